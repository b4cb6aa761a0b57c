"""Optimizers: Adam (the paper's, beta = (0.9, 0.98)), AdamW, vanilla SGD, RAdam (Figure 4)."""

from __future__ import annotations

import torch
from torch import nn

from normlab.config import OptimConfig

__all__ = ["build_optimizer", "set_lr"]


def _param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    # Weight decay on matrices only: biases, LayerNorm gains and the masked-LM bias stay undecayed (BERT).
    decay, no_decay = [], []
    for p in model.parameters():  # named_parameters de-duplicates tied weights too; parameters() is enough
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def _fused_ok(model: nn.Module) -> bool:
    params = [p for p in model.parameters() if p.requires_grad]
    return bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point() for p in params)


def build_optimizer(model: nn.Module, cfg: OptimConfig) -> torch.optim.Optimizer:
    """The optimizer of ``cfg`` over ``model``'s trainable parameters. Its learning rate is set before every
    update by the schedule (:func:`set_lr`), so the value given here is only the initial one."""
    groups = _param_groups(model, cfg.weight_decay)
    # Adam/AdamW: the fused kernel (one pass over each parameter's state) where torch has one for the device.
    # Measured on the development CPU, one step over the paper's 41.8M-parameter IWSLT model, 1 thread:
    # fused 49 ms, foreach 272 ms, per-parameter loop 187 ms (benchmarks/train_throughput.py, issue 9).
    fused = {"fused": True} if _fused_ok(model) else {"foreach": True}
    if cfg.name == "adam":
        return torch.optim.Adam(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, **fused)
    if cfg.name == "adamw":
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, **fused)
    if cfg.name == "radam":
        # RAdam rectifies the variance of the adaptive rate (Liu et al. 2019a), which the paper runs without
        # warm-up for both placements (Figure 4).
        return torch.optim.RAdam(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, foreach=True)
    return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, foreach=True)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
