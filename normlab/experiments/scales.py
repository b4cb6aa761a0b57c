"""The scales at which ``normlab reproduce`` runs the paper's experiments.

* ``smoke``: seconds; the test suite runs it end to end. Nothing it measures means anything.
* ``quick``: the README's main job, everything in under 30 minutes on 2 CPU cores. Depth stays at the paper's
  6-6 (the effects are about depth: Theorem 1, Figure 3); width, data and run length shrink.
* ``cpu``: a night on 2 cores; models wide enough and runs long enough for the effects to have room to show.
* ``paper``: the paper's own settings (Appendix A.1: 6-6, d=512, FFN 1024, 4 heads, 10k joint BPE, 4,096
  tokens per batch, beam 5, length penalty 1.2), for GPUs and the user's own IWSLT14 files.

Warm-up lengths and decay points are scaled by the fraction of the run they take in the paper
(:func:`scaled_updates`); the report lists every such mapping.
"""

from __future__ import annotations

from typing import Literal

from normlab.config import ConfigError, Strict, config, field

__all__ = ["PAPER", "TranslationScale", "MLMScale", "FinetuneScale", "Scale", "SCALES", "get_scale", "scaled_updates"]

# What the paper's runs were, in updates. The paper does not state its run lengths; these are read off its
# figures and setup, and the report says so.
PAPER = {
    # IWSLT14 De-En: ~153k pairs, 4,096 tokens per batch -> ~1,100 updates per epoch (fairseq); the figures span
    # up to ~30 epochs (Figure 6: "27 epochs").
    "iwslt_updates_per_epoch": 1100,
    "iwslt_epochs": 30,
    # BERT: 1M updates with a 10k warm-up (Devlin et al. 2018, followed by the paper).
    "bert_updates": 1_000_000,
    "bert_warmup": 10_000,
}


def scaled_updates(paper_updates: int, paper_total: int, total: int, *, least: int = 2) -> int:
    """``paper_updates`` of a ``paper_total``-update run, as the same fraction of a ``total``-update run
    (at least ``least``, so that a scaled warm-up never silently becomes "no warm-up")."""
    if paper_updates <= 1:
        return paper_updates
    return max(least, round(paper_updates / paper_total * total))


@config
class TranslationScale(Strict):
    """Figures 2, 4 and 6: the De-En translation runs."""

    layers: int = field(6, help="encoder and decoder depth (the paper: 6-6)")
    d_model: int = field(512, help="hidden size")
    d_ffn: int = field(1024, help="FFN width")
    n_heads: int = field(4, help="attention heads")
    dropout: float = field(0.1, help="dropout (the paper: 0.1)")
    vocab_size: int = field(10000, help="joint BPE vocabulary")
    max_positions: int = field(1024, help="longest sentence kept, in tokens")
    train_subset: int = field(0, help="training pairs (0 = all)")
    valid_subset: int = field(0, help="validation pairs for the loss (0 = all)")
    max_tokens: int = field(4096, help="tokens per batch")
    epochs: int = field(30, help="epochs per run")
    bleu_sentences: int = field(0, help="validation sentences decoded for BLEU after every epoch (0 = all)")
    beam: int = field(5, help="beam size (the paper: 5)")
    lenpen: float = field(1.2, help="length penalty (the paper: 1.2)")


@config
class MLMScale(Strict):
    """Figure 5(a): BERT pre-training, Post-LN and Pre-LN."""

    layers: int = field(12, help="encoder depth (BERT-base: 12)")
    d_model: int = field(768, help="hidden size")
    d_ffn: int = field(3072, help="FFN width")
    n_heads: int = field(12, help="attention heads")
    vocab_size: int = field(30000, help="BPE vocabulary of the English corpus")
    block_size: int = field(128, help="tokens per pre-training block")
    train_subset: int = field(0, help="pre-training blocks (0 = all)")
    valid_subset: int = field(0, help="validation blocks (0 = all)")
    max_tokens: int = field(32768, help="tokens per batch")
    updates: int = field(1_000_000, help="pre-training updates")
    evals: int = field(20, help="validation points along the run (an evaluation and a checkpoint each)")


@config
class FinetuneScale(Strict):
    """Figure 5(b, c): fine-tuning pre-training checkpoints on the two sentence-pair tasks."""

    tasks: tuple[str, ...] = field(("paraphrase", "wic"), help="the paper's MRPC and RTE stand-ins")
    checkpoints: int = field(5, help="pre-training checkpoints fine-tuned, evenly spaced along the run")
    seeds: int = field(6, help="fine-tuning seeds per point (the paper: 6)")
    epochs: int = field(3, help="fine-tuning epochs (the paper searches 3-8)")
    lr: float = field(5e-5, help="fine-tuning learning rate (the paper searches 1e-5..1e-4)")
    batch_sentences: int = field(32, help="sentences per batch (the paper searches 16/32)")
    train_subset: int = field(0, help="training pairs per task (0 = all)")
    valid_subset: int = field(0, help="validation pairs per task (0 = all)")


@config
class Scale(Strict):
    name: Literal["smoke", "quick", "cpu", "paper"] = field(help="the scale's name")
    translation: TranslationScale = field(default_factory=TranslationScale, help="Figures 2, 4, 6")
    mlm: MLMScale = field(default_factory=MLMScale, help="Figure 5(a)")
    finetune: FinetuneScale = field(default_factory=FinetuneScale, help="Figure 5(b, c)")
    analysis: Literal["smoke", "quick", "paper"] = field("paper", help="the `normlab analyze` scale (Figure 3)")
    seeds: int = field(1, help="training seeds per translation/pre-training run")
    description: str = field("", help="what the scale is for, in the report")


SCALES: dict[str, Scale] = {
    "smoke": Scale(
        name="smoke",
        translation=TranslationScale(layers=2, d_model=32, d_ffn=64, n_heads=2, vocab_size=600, max_positions=64,
                                     train_subset=200, valid_subset=32, max_tokens=512, epochs=2, bleu_sentences=8,
                                     beam=2),
        mlm=MLMScale(layers=2, d_model=32, d_ffn=64, n_heads=2, vocab_size=600, block_size=32, train_subset=64,
                     valid_subset=16, max_tokens=512, updates=6, evals=2),
        finetune=FinetuneScale(tasks=("paraphrase", "wic"), checkpoints=2, seeds=2, epochs=1, lr=1e-4,
                               batch_sentences=16, train_subset=64, valid_subset=32),
        analysis="smoke",
        description="seconds, for the tests: checks that every part of the pipeline runs; its numbers mean nothing",
    ),  # fmt: skip
    "quick": Scale(
        name="quick",
        translation=TranslationScale(layers=6, d_model=64, d_ffn=128, n_heads=4, vocab_size=2000, max_positions=64,
                                     train_subset=4000, valid_subset=300, max_tokens=512, epochs=7,
                                     bleu_sentences=100, beam=5),
        mlm=MLMScale(layers=6, d_model=64, d_ffn=128, n_heads=4, vocab_size=2000, block_size=64, train_subset=6000,
                     valid_subset=100, max_tokens=1024, updates=1200, evals=4),
        finetune=FinetuneScale(tasks=("paraphrase", "wic"), checkpoints=3, seeds=2, epochs=2, lr=1e-4,
                               batch_sentences=32, train_subset=1000, valid_subset=300),
        analysis="quick",
        description="the README's main job: under 30 minutes on 2 CPU cores; the paper's depth (6-6), "
        "d=64, 4,000 sentence pairs for ~800 translation updates per run, 1,200 BERT updates",
    ),  # fmt: skip
    "cpu": Scale(
        name="cpu",
        translation=TranslationScale(layers=6, d_model=256, d_ffn=512, n_heads=4, vocab_size=8000, max_positions=128,
                                     train_subset=40000, valid_subset=1000, max_tokens=2048, epochs=10,
                                     bleu_sentences=500, beam=5),
        mlm=MLMScale(layers=6, d_model=256, d_ffn=1024, n_heads=4, vocab_size=8000, block_size=128,
                     train_subset=0, valid_subset=500, max_tokens=4096, updates=4000, evals=8),
        finetune=FinetuneScale(tasks=("paraphrase", "wic"), checkpoints=4, seeds=3, epochs=3, lr=5e-5,
                               batch_sentences=32, train_subset=8000, valid_subset=1000),
        analysis="paper",
        description="a night on 2 CPU cores: 6-6 at d=256, 40k sentence pairs, thousands of updates per run",
    ),  # fmt: skip
    "paper": Scale(
        name="paper",
        analysis="paper",
        description="the paper's settings (Appendix A.1, A.2, A.3), for GPUs: 6-6, d=512, FFN 1024, 4 heads, 10k "
        "joint BPE, 4,096 tokens per batch, beam 5, length penalty 1.2; BERT-base for Figure 5",
    ),
}


def get_scale(name: str) -> Scale:
    if name not in SCALES:
        raise ConfigError(f"unknown scale {name!r}; expected one of {list(SCALES)}")
    return SCALES[name]
