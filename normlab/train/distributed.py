"""Data parallelism on torch.distributed: ``normlab train --nproc-per-node N ...`` (normlab's own launcher,
:mod:`normlab.train.launch`) or ``torchrun --nproc_per_node N -m normlab train ...``.

gloo on the CPU, nccl on CUDA. Every rank takes its share of each global batch (the data pipeline splits
the sentences), gradients are averaged by DistributedDataParallel, and only rank 0 writes files.

A hung collective (issue 36). A rank that stalls (a deadlock, a hung file system, a process stopped with SIGSTOP)
or dies without its launcher noticing left the others waiting in their next collective forever, the run
``running``. Every collective now waits at most ``NORMLAB_DIST_TIMEOUT`` seconds (:func:`dist_timeout`, the
``timeout`` of ``init_process_group``); past it gloo raises in the waiting rank, which ends with one line (the
collective that timed out, :func:`normlab.faults.fault_line`), the run's status becomes ``failed`` and its
launcher stops the stalled rank; ``--resume`` continues from the last checkpoint. The default, 1800 s (torch's
own for gloo), is there for the longest wait a healthy run makes at a collective: the other ranks wait while
rank 0 alone writes a checkpoint and decodes the validation BLEU (``valid_bleu``, beam 5), minutes at the paper's
scale on a CPU. Shorter would end healthy runs; longer holds the machines of a dead one for longer. The timeout
also bounds the ranks' rendezvous in ``init_process_group``.

On CUDA (nccl) NCCL's watchdog enforces the same timeout, and what happens at it is NCCL's to decide:
``TORCH_NCCL_ASYNC_ERROR_HANDLING`` (torchrun and normlab's launcher set it to 1 unless it is set: abort the
communicator and tear the process down) ends the rank with the watchdog's message and SIGABRT, no line of
normlab's and no status written by that rank (normlab's launcher then marks a run still ``running`` as
``failed``, naming the rank and its signal); ``TORCH_NCCL_BLOCKING_WAIT=1`` instead makes the collective raise in
the trainer, which ends with its line and the status ``failed`` as on the CPU (the trainer waits for the GPU at
the end of every update anyway, so a blocking wait costs little). ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` (with
``TORCH_NCCL_TRACE_BUFFER_SIZE``) records which collective each rank was in, to find the one that stalled.

Teardown (issue 16, item 10). ``destroy_process_group`` only drops torch's own references to the process group;
gloo's threads (two ``pt_gloo_runloop`` workers and ``gloo_tcp_loop``) stop when the last reference goes. Two
things held one past it, so the threads ran on into interpreter exit:

* DistributedDataParallel's constructor imports ``torch._dynamo``, which imports modules whose functions take
  ``group=group.WORLD`` as a default argument (``torch.distributed.nn.functional``,
  ``torch.distributed.optim.zero_redundancy_optimizer``): imported after ``init_process_group``, those defaults
  hold the default group for the life of the process. :func:`init_distributed` imports them first, so the
  defaults are None.
* the DistributedDataParallel wrapper itself (its Reducer holds the group): :meth:`Trainer.close` drops it.

With threads still alive at exit, a gloo worker that lets go of the last reference to a tensor Python owns must
take the GIL while the interpreter is finalizing; CPython 3.11 ends such a thread with ``pthread_exit``, whose
unwinding through a ``noexcept`` frame is ``std::terminate`` -- "terminate called without an active
exception", SIGABRT, and torchrun reports the finished rank as failed (pytorch/pytorch PR 179291 describes the
same mechanism). Under load the worker is late enough for the window to open. :func:`shutdown` therefore waits
for every rank (a barrier: no rank tears down while a peer still communicates) and then destroys a group that
nothing else holds, which joins those threads while Python is fully alive.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import math
import os

import torch
import torch.distributed as dist

from normlab.config import ConfigError
from normlab.device import pick_device

__all__ = ["Dist", "init_distributed", "pick_device", "all_reduce_sum", "shutdown", "dist_timeout", "TIMEOUT_ENV",
           "DEFAULT_TIMEOUT_S"]  # fmt: skip

TIMEOUT_ENV = "NORMLAB_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 1800.0  # torch's default for gloo; why this value: the module docstring


@dataclasses.dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def dist_timeout() -> datetime.timedelta:
    """How long a collective waits for the other ranks: ``$NORMLAB_DIST_TIMEOUT`` seconds, else
    :data:`DEFAULT_TIMEOUT_S` (the module docstring says why). A value that is not a positive number is a
    :class:`ConfigError`, named, before any rank waits on it."""
    text = os.environ.get(TIMEOUT_ENV, "").strip()
    if not text:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    # bounded above too: timedelta overflows past 10**9 days, and a wait of years is no bound
    if not 0 < seconds <= 10**8:
        raise ConfigError(f"{TIMEOUT_ENV}={text!r}: seconds a collective waits for the other ranks, a number in "
                          f"(0, 1e8] (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    return datetime.timedelta(seconds=seconds)


def init_distributed(preference: str = "auto") -> Dist:
    """Join the process group that torchrun describes in the environment (WORLD_SIZE, RANK, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT); a single process otherwise. Collectives wait at most :func:`dist_timeout`."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(preference, local_rank)
    if world > 1 and not dist.is_initialized():
        timeout = dist_timeout()  # a bad value is one line before any rank waits
        # before the group exists: modules that DistributedDataParallel imports bind group.WORLD as a default
        # argument at import time, which would keep the group (and gloo's threads) alive past shutdown
        import torch._dynamo.utils  # noqa: F401

        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", timeout=timeout)
    return Dist(rank=rank, world=world, device=device)


def all_reduce_sum(values: list[float], d: Dist) -> list[float]:
    """Sum a few scalars over the ranks (one collective for all of them)."""
    if not d.enabled:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=d.device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def shutdown(d: Dist, *, completed: bool = True) -> None:
    """Leave the process group. Release every DistributedDataParallel wrapper first (:meth:`Trainer.close`).

    ``completed``: this rank finished normally, so wait for the others (a barrier) before tearing down; after
    an error the peers may be gone or elsewhere, and torchrun stops them, so no barrier (it could hang)."""
    if not (d.enabled and dist.is_initialized()):
        return
    if completed:
        dist.barrier()
    gc.collect()  # a wrapper in a reference cycle would still hold the group
    dist.destroy_process_group()
