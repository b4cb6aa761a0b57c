"""Losses. Label-smoothed cross entropy with fairseq's definition (Szegedy et al. 2016; the paper: eps = 0.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from normlab.data.batch import PAD

__all__ = ["label_smoothed_nll_loss"]


def label_smoothed_nll_loss(
    logits: Tensor, target: Tensor, epsilon: float = 0.1, ignore_index: int = PAD
) -> tuple[Tensor, Tensor]:
    """Sums over the non-ignored positions of (smoothed loss, NLL), computed in fp32.

    fairseq's ``label_smoothed_nll_loss``: with eps_i = epsilon / (V - 1),
    loss = (1 - epsilon - eps_i) * nll + eps_i * sum_v (-log p_v).
    """
    logits = logits.reshape(-1, logits.shape[-1])
    target = target.reshape(-1)
    keep = target != ignore_index
    lprobs = F.log_softmax(logits[keep].float(), dim=-1)
    t = target[keep]
    nll = -lprobs.gather(-1, t[:, None]).sum()
    smooth = -lprobs.sum()
    eps_i = epsilon / (lprobs.shape[-1] - 1)
    return (1.0 - epsilon - eps_i) * nll + eps_i * smooth, nll
