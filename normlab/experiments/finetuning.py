"""Figure 5(b, c)'s fine-tuning runs as TrainConfigs: ``normlab finetune``'s recipe (:func:`normlab.finetune.run_config`
and :func:`normlab.finetune.data_config`; BERT's AdamW, weight decay 0.01, beta2 0.999, eps 1e-6, gradient
clipping at 1, linear warm-up over 10% of the updates then linear decay) at one point of its search space: the
scale's batch size, learning rate and epochs. The weights come from the pre-training checkpoint
(``TrainConfig.init_from``), the vocabulary from the pre-training tokenizer; the grid runner fills in both when
the pre-training run has finished. Nothing of the recipe is written here."""

from __future__ import annotations

from normlab.config import DataConfig, TrainConfig
from normlab.experiments.scales import FinetuneScale
from normlab.finetune import PAPER, FinetuneConfig, data_config, run_config

__all__ = ["finetune_recipe", "finetune_config", "finetune_data"]


def finetune_recipe(pretrain: TrainConfig, task: str, ft: FinetuneScale) -> FinetuneConfig:
    """The paper's search space (``normlab finetune``'s defaults) narrowed to the scale's one setting, on the
    pre-training run's device and precision."""
    return PAPER.replace(task=task, batch_sizes=(ft.batch_sentences,), lrs=(ft.lr,), epochs=(ft.epochs,),
                         train_subset=ft.train_subset, valid_subset=ft.valid_subset, labels=ft.labels,
                         device=pretrain.device, precision=pretrain.precision)  # fmt: skip


def finetune_data(pretrain: TrainConfig, task: str, ft: FinetuneScale) -> DataConfig:
    """The pair task, encoded with the pre-training vocabulary (the tokenizer trained on the pre-training corpus:
    the same cache key as the pre-training run's), in batches of exactly ``ft.batch_sentences`` pairs."""
    return data_config(pretrain, finetune_recipe(pretrain, task, ft), pretrain.data.corpus_name, ft.batch_sentences)


def finetune_config(
    pretrain: TrainConfig, task: str, ft: FinetuneScale, seed: int, updates_per_epoch: int
) -> TrainConfig:
    """One fine-tuning run: the recipe at the scale's setting; the head has one output per label of ``ft.labels``."""
    fc = finetune_recipe(pretrain, task, ft)
    return run_config(pretrain, fc, finetune_data(pretrain, task, ft), lr=ft.lr, epochs=ft.epochs, seed=seed,
                      updates_per_epoch=updates_per_epoch)  # fmt: skip
