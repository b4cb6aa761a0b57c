"""What each task's model is asked to minimise, as sums over a batch (the trainer normalises by the global
number of target positions, so data-parallel ranks and accumulated batches weigh tokens equally)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab.data.batch import PAD, Batch, ClassificationBatch, LMBatch, MLMBatch, TranslationBatch
from normlab.train.losses import DEFAULT_LOSS_IMPL, lm_loss, translation_loss

__all__ = ["LossSums", "compute_loss"]


@dataclasses.dataclass
class LossSums:
    loss: Tensor  # the objective, summed over target positions (label-smoothed for translation)
    nll: Tensor  # the plain negative log-likelihood, summed (detached)
    n_tokens: int  # target positions the sums run over
    correct: Tensor | None = None  # classification: correctly labelled sentences (detached)


def compute_loss(
    model: nn.Module, batch: Batch, label_smoothing: float = 0.0, loss_impl: str = DEFAULT_LOSS_IMPL
) -> LossSums:
    if isinstance(batch, TranslationBatch):
        # loss_impl: how the output projection and the loss are computed (losses.py); same values and gradients
        loss, nll = translation_loss(model, batch.src, batch.tgt_in, batch.tgt_out, label_smoothing, impl=loss_impl)
        return LossSums(loss, nll.detach(), batch.n_tokens)
    if isinstance(batch, LMBatch):
        # next-token NLL over every non-pad target; label_smoothing is translation's (TrainConfig), not applied
        loss, nll = lm_loss(model, batch.tokens, batch.targets, impl=loss_impl)
        return LossSums(loss, nll.detach(), batch.n_tokens)
    if isinstance(batch, MLMBatch):
        select = batch.targets != PAD  # BERT: the loss is on masked positions only
        logits = model(batch.tokens, batch.segments, select=select)
        loss = F.cross_entropy(logits.float(), batch.targets[select], reduction="sum")
        return LossSums(loss, loss.detach(), batch.n_tokens)
    if isinstance(batch, ClassificationBatch):
        logits = model(batch.tokens, batch.segments).float()
        loss = F.cross_entropy(logits, batch.labels, reduction="sum")
        correct = (logits.argmax(-1) == batch.labels).sum().detach()
        return LossSums(loss, loss.detach(), batch.n_tokens, correct)
    raise TypeError(f"unknown batch type {type(batch).__name__}")


def batch_on(batch: Batch, device: torch.device) -> Batch:
    return batch.to(device, non_blocking=device.type == "cuda")
