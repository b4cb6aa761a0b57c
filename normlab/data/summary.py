"""``normlab data``: prepare a DataConfig's corpus (cached) and print its corpus, tokenizer and batch statistics."""

from __future__ import annotations

import argparse
import time

import numpy as np

from normlab.assets import load_config_file
from normlab.config import DataConfig, add_set_argument, apply_overrides
from normlab.data.batch import PAD
from normlab.data.datasets import Prepared, TranslationDataset, prepare
from normlab.data.tokenizer import NUM_SPECIAL


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file or bundled config (bert-tiny-post, ...); its `data:` section (or the "
                                    "whole file) is the DataConfig")  # fmt: skip
    add_set_argument(p, DataConfig, section="data")
    p.add_argument("--task", choices=["translation", "mlm", "classification", "lm"], help="shortcut for --set data.task=...")
    p.add_argument("--max-positions", type=int, default=1024, help="the model's max_positions (longer pairs dropped)")
    p.add_argument("--seed", type=int, default=1, help="batching seed of the statistics")
    p.add_argument("--examples", type=int, default=2, help="training examples to show, decoded")


def config_from_args(args: argparse.Namespace) -> DataConfig:
    data = load_config_file(args.config, "data") if args.config else {}
    if args.task:
        data = {**data, "task": args.task}
    return DataConfig.from_dict(apply_overrides(data, args.set))


def describe(data: Prepared, seed: int = 1, examples: int = 2, seconds: float | None = None) -> str:
    cfg, tok = data.cfg, data.tokenizer
    lines = ["DataConfig: " + ", ".join(f"{k}={v}" for k, v in cfg.to_dict().items())]
    corpus = data.corpus
    lines.append(f"corpus {corpus.name} ({corpus.root}), task {corpus.task}, format {corpus.format}")
    lines.append(f"tokenizer {tok.name}: sentencepiece BPE, vocab {tok.vocab_size:,}")
    if (seen := data.stats["train"].get("pieces_seen")) is not None:  # the rest never train (prepare's warning)
        lines.append(f"vocabulary use: {seen:,} of its {tok.vocab_size - NUM_SPECIAL:,} text pieces occur in the "
                     "training split")
    # tokens as the model sees them: + eos per side for translation, [CLS]/[SEP] included otherwise
    sides = ("source_tokens", "target_tokens") if isinstance(data.splits["train"], TranslationDataset) else ("tokens",)
    header = ("split", "examples", *(f"{side.replace('_', ' ')}" for side in sides), "dropped empty", "dropped long")
    row = "{:<6} {:>10} " + "{:>18} " * len(sides) + "{:>13} {:>12}"
    lines.append(row.format(*header))
    for split, ds in data.splits.items():
        s = data.stats[split]
        per = [f"{s[side]:,} ({s[side] / max(1, len(ds)):.1f})" for side in sides]
        lines.append(row.format(split, f"{len(ds):,}", *per, f"{s['dropped_empty']:,}", f"{s['dropped_long']:,}"))
    train = data.splits["train"]
    batches = train.epoch_batches(0, seed, cfg.max_tokens, max_sentences=cfg.max_sentences)
    real = padded = 0
    for ix in batches:
        if isinstance(train, TranslationDataset):
            real += int(train.src_sizes[ix].sum() + train.tgt_sizes[ix].sum())
            padded += len(ix) * int(train.src_sizes[ix].max() + train.tgt_sizes[ix].max())
        else:
            real += int(train.sizes[ix].sum())
            padded += len(ix) * int(train.sizes[ix].max())
    sentences = np.array([len(ix) for ix in batches])
    lines.append(f"train batches (epoch 0, max_tokens {cfg.max_tokens:,}): {len(batches):,}, "
                 f"{sentences.mean():.1f} examples each (min {sentences.min()}, max {sentences.max()}), "
                 f"non-pad share {real / padded:.1%}")  # fmt: skip
    if examples:
        b = train.collate(batches[0][:examples], seed=seed)
        rows = b.tgt_out if isinstance(train, TranslationDataset) else b.tokens  # type: ignore[union-attr]
        for k, row in enumerate(rows):
            pieces = [tok.id_to_piece(i) for i in row.tolist() if i != PAD]
            lines.append(f"example {int(batches[0][k])}: {' '.join(pieces)[:200]}")
    if seconds is not None:
        lines.append(f"prepared in {seconds:.2f} s")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    t0 = time.perf_counter()
    data = prepare(cfg, max_positions=args.max_positions)
    print(describe(data, seed=args.seed, examples=args.examples, seconds=time.perf_counter() - t0))
    return 0
