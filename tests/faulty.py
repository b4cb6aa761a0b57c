"""``python tests/faulty.py FAULT RANK NORMLAB_ARGS...``: normlab's CLI with one fault injected on rank ``RANK``
(-1: every rank), for the torchrun fault tests (tests/test_faults.py). Faults:

* ``evaluate-eio``: the validation raises an I/O error (OSError EIO), as a failing disk or network file would;
* ``no-shard-check``: the trainer's check that every batch can be shared among the ranks is skipped, so that the
  sharding itself fails where it did before the check existed (issue 36: after the last update).
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from normlab.cli import main
    from normlab.train.trainer import Trainer

    fault, rank, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if rank < 0 or int(os.environ.get("RANK", "0")) == rank:
        if fault == "evaluate-eio":

            def evaluate(self, *a, **k):
                raise OSError(errno.EIO, "Input/output error (injected)", "valid")

            Trainer.evaluate = evaluate  # type: ignore[method-assign]
        elif fault == "no-shard-check":
            Trainer._check_shards = lambda self, split, plan: None  # type: ignore[method-assign]
        else:
            raise SystemExit(f"unknown fault {fault}")
    sys.exit(main(args))
