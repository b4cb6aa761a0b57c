"""``python -m normlab`` and the ``normlab`` command (what ``torchrun -m normlab train ...`` runs).

The C allocator is chosen first (normlab.allocator: jemalloc where the machine has it), by re-executing the
process before torch is imported; the package's __init__ imports nothing heavy, so that costs milliseconds."""

from __future__ import annotations

import sys

from normlab.allocator import reexec


def entry() -> int:
    reexec()
    from normlab.cli import main  # after reexec: cli imports torch, which the re-executed process would import again

    return main()


if __name__ == "__main__":
    sys.exit(entry())
