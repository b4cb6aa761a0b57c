"""Data parallelism on torch.distributed: ``torchrun --nproc_per_node N -m normlab train ...``.

gloo on the CPU, nccl on CUDA. Every rank takes its share of each global batch (the data pipeline splits
the sentences), gradients are averaged by DistributedDataParallel, and only rank 0 writes files.
"""

from __future__ import annotations

import dataclasses
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


def shutdown(d: Dist) -> None:
    if d.enabled and dist.is_initialized():
        dist.destroy_process_group()
