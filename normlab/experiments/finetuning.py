"""Figure 5(b, c)'s fine-tuning runs as TrainConfigs: BERT's fine-tuning recipe (``normlab finetune``'s
defaults: AdamW, weight decay 0.01, beta2 0.999, eps 1e-6, gradient clipping at 1, linear warm-up over 10% of
the updates then linear decay) at the scale's batch size, learning rate and epochs. The weights come from the
pre-training checkpoint (``TrainConfig.init_from``), the vocabulary from the pre-training tokenizer; the grid
runner fills in both when the pre-training run has finished."""

from __future__ import annotations

from typing import Any

from normlab.config import DataConfig, OptimConfig, ScheduleConfig, TrainConfig
from normlab.finetune import PAPER as RECIPE

__all__ = ["finetune_config", "finetune_data"]


def finetune_data(pretrain: TrainConfig, task: str, ft: Any) -> DataConfig:
    """The pair task, encoded with the pre-training vocabulary (the tokenizer trained on the pre-training corpus:
    the same cache key as the pre-training run's), in batches of exactly ``ft.batch_sentences`` pairs."""
    length = min(RECIPE.max_length, pretrain.model.max_positions)
    return DataConfig(
        task="classification", corpus=task, tokenizer=pretrain.data.corpus_name, vocab_size=pretrain.data.vocab_size,
        block_size=length, max_sentences=ft.batch_sentences, max_tokens=ft.batch_sentences * length,
        train_subset=ft.train_subset, valid_subset=ft.valid_subset, cache_dir=pretrain.data.cache_dir,
    )  # fmt: skip


def finetune_config(pretrain: TrainConfig, task: str, ft: Any, seed: int, updates_per_epoch: int) -> TrainConfig:
    total = ft.epochs * updates_per_epoch
    optim = OptimConfig(name="adamw", lr=ft.lr, betas=RECIPE.betas, eps=RECIPE.eps, weight_decay=RECIPE.weight_decay,
                        clip_norm=RECIPE.clip_norm)  # fmt: skip
    return TrainConfig(
        model=pretrain.model.replace(num_classes=2), data=finetune_data(pretrain, task, ft), optim=optim,
        schedule=ScheduleConfig(warmup_updates=round(RECIPE.warmup * total), decay="linear"), max_epochs=ft.epochs,
        label_smoothing=0.0, seed=seed, keep_last=1, device=pretrain.device, precision=pretrain.precision,
    )  # fmt: skip
