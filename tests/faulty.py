"""``python tests/faulty.py FAULT RANK NORMLAB_ARGS...``: normlab's CLI with one fault injected on rank ``RANK``
(-1: every rank), for the torchrun fault tests (tests/test_faults.py). The ranks that normlab's own launcher starts
(``normlab train --nproc-per-node N``) are ``python -m normlab`` processes, which this wrapper cannot be: they get
the fault from the environment instead, ``NORMLAB_TEST_FAULT=FAULT:RANK``, read by tests/inject/sitecustomize.py
when that folder is on PYTHONPATH (:func:`inject_from_environment`). Faults:

* ``evaluate-eio``: the validation raises an I/O error (OSError EIO), as a failing disk or network file would;
* ``no-shard-check``: the trainer's check that every batch can be shared among the ranks is skipped, so that the
  sharding itself fails where it did before the check existed (issue 36: after the last update);
* ``stall``: the rank stops answering at its third update (it sleeps for an hour before the update's first
  collective), as a rank in a deadlock or on a hung file system does; the others wait in that collective until
  NORMLAB_DIST_TIMEOUT.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

ENV = "NORMLAB_TEST_FAULT"


def inject(fault: str, rank: int) -> None:
    """Patch the Trainer of this process with ``fault`` if this process is rank ``rank`` (-1: any rank)."""
    from normlab.train.trainer import Trainer

    if rank >= 0 and int(os.environ.get("RANK", "0")) != rank:
        return
    if fault == "evaluate-eio":

        def evaluate(self, *a, **k):
            raise OSError(errno.EIO, "Input/output error (injected)", "valid")

        Trainer.evaluate = evaluate  # type: ignore[method-assign]
    elif fault == "no-shard-check":
        Trainer._check_shards = lambda self, split, plan: None  # type: ignore[method-assign]
    elif fault == "stall":
        import time

        real_step = Trainer.train_step

        def train_step(self, *a, **k):
            if self.state.update == 2:
                time.sleep(3600)
            return real_step(self, *a, **k)

        Trainer.train_step = train_step  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown fault {fault}")


def inject_from_environment() -> None:
    """``NORMLAB_TEST_FAULT=FAULT:RANK``: :func:`inject` in a rank of a launcher (RANK set), else nothing (the
    launcher itself, or any other Python process that the tests start)."""
    spec = os.environ.get(ENV)
    if spec and "RANK" in os.environ:
        fault, rank = spec.rsplit(":", 1)
        inject(fault, int(rank))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from normlab.cli import main

    fault, rank, args = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    inject(fault, rank)
    sys.exit(main(args))
