"""Data parallelism on torch.distributed: ``torchrun --nproc_per_node N -m normlab train ...``.

gloo on the CPU, nccl on CUDA. Every rank takes its share of each global batch (the data pipeline splits
the sentences), gradients are averaged by DistributedDataParallel, and only rank 0 writes files.

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
import gc
import os

import torch
import torch.distributed as dist

from normlab.device import pick_device

__all__ = ["Dist", "init_distributed", "pick_device", "all_reduce_sum", "shutdown"]


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


def init_distributed(preference: str = "auto") -> Dist:
    """Join the process group that torchrun describes in the environment (WORLD_SIZE, RANK, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT); a single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(preference, local_rank)
    if world > 1 and not dist.is_initialized():
        # before the group exists: modules that DistributedDataParallel imports bind group.WORLD as a default
        # argument at import time, which would keep the group (and gloo's threads) alive past shutdown
        import torch._dynamo.utils  # noqa: F401

        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
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
