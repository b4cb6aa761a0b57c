"""``python -m normlab`` and the ``normlab`` command (what ``torchrun -m normlab train ...`` runs).

The C allocator is chosen first (normlab.allocator: jemalloc where the machine has it), by re-executing the
process before torch is imported; the package's __init__ imports nothing heavy, so that costs milliseconds."""

from __future__ import annotations

import sys

from normlab.allocator import reexec


def entry() -> int:
    reexec()
    try:
        from normlab.cli import main  # after reexec: cli imports torch, which the re-executed process would import again
    except KeyboardInterrupt:
        # Ctrl-C during the imports (a second or two of torch), before the command's own handler exists: one line,
        # as after it, not a traceback through torch's import machinery (a new user's finding)
        print("normlab: interrupted while starting; nothing was done", file=sys.stderr)
        return 130
    return main()


if __name__ == "__main__":
    sys.exit(entry())
