"""Figure 5(b, c)'s fine-tuning runs as TrainConfigs (the weights come from the pre-training checkpoint)."""

from __future__ import annotations

from typing import Any

from normlab.config import DataConfig, OptimConfig, ScheduleConfig, TrainConfig

__all__ = ["finetune_config"]


def finetune_config(pretrain: TrainConfig, task: str, ft: Any, seed: int, ctx: Any) -> TrainConfig:
    """Fine-tune ``pretrain``'s encoder on ``task`` (paraphrase / wic): same vocabulary (the tokenizer trained on
    the pre-training corpus), a classification head on [CLS], Adam with linear decay and 10% warm-up (BERT)."""
    data = DataConfig(
        task="classification", corpus=task, tokenizer=pretrain.data.corpus_name, vocab_size=pretrain.data.vocab_size,
        block_size=pretrain.data.block_size, max_sentences=ft.batch_sentences, max_tokens=ft.batch_sentences *
        pretrain.data.block_size, train_subset=ft.train_subset, valid_subset=ft.valid_subset,
        cache_dir=pretrain.data.cache_dir,
    )  # fmt: skip
    optim = OptimConfig(name="adamw", lr=ft.lr, betas=(0.9, 0.999), weight_decay=0.01)
    return TrainConfig(model=pretrain.model.replace(num_classes=2), data=data, optim=optim,
                       schedule=ScheduleConfig(decay="linear"), max_epochs=ft.epochs, label_smoothing=0.0,
                       seed=seed, keep_last=1, device=pretrain.device, precision=pretrain.precision)  # fmt: skip
