"""Data-pipeline benchmark (not part of the test suite).

Prints, for the vendored De-En corpus:

1. the time to read and check the train split, train the 10k joint BPE on it and binarize it, from an empty
   cache (goal: under 60 s on 2 cores), the whole ``prepare`` from scratch (valid and test too), and a
   second ``prepare`` that reads the cache; beside it, the peer: Hugging Face ``tokenizers``' BPE trained on the
   same text, when installed;
2. batch-iteration speed: ``epoch_batches`` + ``collate`` over a whole epoch, in non-pad tokens (source +
   target) per second (goal: over 1M tokens/s); with ``--mlm`` the same for masked-LM blocks of en-mono
   (its first prepare takes about a minute);
3. the share of non-pad tokens in the De-En train batches (goal: at least 90%), beside batches of the same
   count drawn at random;
4. exact detokenization on the test split: sentences where ``decode(encode(x)) != x``.

    .venv/bin/python benchmarks/data_bench.py [--repeat 2] [--mlm]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from normlab.config import DataConfig
from normlab.data import PAD, prepare
from normlab.data import tokenizer as tokenizer_module
from normlab.data.corpora import locate, read_split, tokenizer_text


def from_scratch(cache: Path) -> dict[str, float]:
    cfg = DataConfig(cache_dir=str(cache))
    t0 = time.perf_counter()
    corpus = locate(cfg)
    data = read_split(corpus, "train", cfg)
    t1 = time.perf_counter()
    proto = tokenizer_module.train(tokenizer_text(data), cfg.vocab_size, cfg.tokenizer_sentences)
    t2 = time.perf_counter()
    tok = tokenizer_module.Tokenizer(proto)
    tok.encode_arrays(data.src)
    tok.encode_arrays(data.tgt)
    t3 = time.perf_counter()
    prepare(cfg, max_positions=1024)  # the real entry point, from an empty cache (valid and test as well)
    t4 = time.perf_counter()
    prepare(cfg, max_positions=1024)
    t5 = time.perf_counter()
    return {"read": t1 - t0, "train": t2 - t1, "encode": t3 - t2, "tok+binarize": t3 - t0,
            "prepare (empty cache)": t4 - t3, "prepare (cached)": t5 - t4}  # fmt: skip


def hf_peer(texts: list[str]) -> float | None:
    try:
        from tokenizers import SentencePieceBPETokenizer
    except ImportError:
        return None
    t0 = time.perf_counter()
    tok = SentencePieceBPETokenizer()
    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    tok.train_from_iterator(texts, vocab_size=10_000, show_progress=False, special_tokens=specials)
    return time.perf_counter() - t0


def iterate(ds, epoch: int, seed: int, max_tokens: int) -> tuple[float, int, int, int]:
    """Seconds for epoch_batches + collate over one epoch; non-pad and padded tokens; batches."""
    t0 = time.perf_counter()
    real = padded = 0
    batches = ds.epoch_batches(epoch, seed, max_tokens)
    for step, ix in enumerate(batches):
        b = ds.collate(ix, seed=seed, epoch=epoch, step=step)
        for t in (b.src, b.tgt_out) if hasattr(b, "src") else (b.tokens,):
            real += int((t != PAD).sum())
            padded += t.numel()
    return time.perf_counter() - t0, real, padded, len(batches)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=2, help="measure each timing this many times (the machine is shared)")
    p.add_argument("--mlm", action="store_true", help="also time masked-LM iteration on en-mono")
    args = p.parse_args()
    print(f"cores available: {len(os.sched_getaffinity(0))}, load average: {os.getloadavg()[0]:.1f}")

    print("\n1. tokenizer + binarize De-En train from an empty cache (goal < 60 s)")
    for r in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t = from_scratch(Path(tmp))
        print(f"   run {r + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in t.items()))
    cfg = DataConfig(cache_dir=tempfile.mkdtemp())
    train_text = tokenizer_text(read_split(locate(cfg), "train", cfg))
    peer = hf_peer(train_text)
    if peer is not None:
        print(f"   peer: HF tokenizers SentencePieceBPETokenizer, vocab 10k, same {len(train_text):,} lines: "
              f"{peer:.2f} s")  # fmt: skip

    data = prepare(cfg, max_positions=1024)
    train = data.splits["train"]
    print(f"\n2. batch iteration: epoch_batches + collate over an epoch, max_tokens {cfg.max_tokens} (goal > 1M tok/s)")
    for r in range(args.repeat):
        dt, real, padded, n = iterate(train, epoch=r, seed=1, max_tokens=cfg.max_tokens)
        print(f"   de-en epoch {r}: {n} batches, {real:,} non-pad tokens in {dt:.2f} s = {real / dt / 1e6:.2f}M tok/s "
              f"({padded / dt / 1e6:.2f}M incl. padding)")
    if args.mlm:
        mlm = prepare(DataConfig(task="mlm", cache_dir=cfg.cache_dir), max_positions=512).splits["train"]
        for r in range(args.repeat):
            dt, real, padded, n = iterate(mlm, epoch=r, seed=1, max_tokens=cfg.max_tokens)
            print(f"   en-mono MLM epoch {r}: {n} batches, {real:,} tokens in {dt:.2f} s = "
                  f"{real / dt / 1e6:.2f}M tok/s")  # fmt: skip

    print("\n3. share of non-pad tokens in the De-En train batches (goal >= 90%)")
    dt, real, padded, n = iterate(train, epoch=0, seed=1, max_tokens=cfg.max_tokens)
    src_real = tgt_real = src_pad = tgt_pad = 0
    for ix in train.epoch_batches(0, 1, cfg.max_tokens):
        src_real += int(train.src_sizes[ix].sum())
        tgt_real += int(train.tgt_sizes[ix].sum())
        src_pad += len(ix) * int(train.src_sizes[ix].max())
        tgt_pad += len(ix) * int(train.tgt_sizes[ix].max())
    rand = np.array_split(np.random.default_rng(0).permutation(len(train)), n)
    r_real = sum(int(train.src_sizes[ix].sum() + train.tgt_sizes[ix].sum()) for ix in rand)
    r_pad = sum(len(ix) * int(train.src_sizes[ix].max() + train.tgt_sizes[ix].max()) for ix in rand)
    print(f"   length-bucketed: {real / padded:.1%} (source {src_real / src_pad:.1%}, "
          f"target {tgt_real / tgt_pad:.1%}), {n} batches, {len(train) / n:.1f} sentences and "
          f"{real / n:,.0f} non-pad tokens per batch")  # fmt: skip
    print(f"   peer: as many batches, examples drawn at random (no length bucketing): {r_real / r_pad:.1%}")

    print("\n4. exact detokenization on the De-En test split")
    test = data.splits["test"]
    tok = data.tokenizer
    wrong = [(i, side) for i in range(len(test)) for side, text in (("de", test.source(i)), ("en", test.target(i)))
             if tok.decode(tok.encode(text)) != text]  # fmt: skip
    unk = sum(tok.unk_id in tok.encode(test.source(i)) + tok.encode(test.target(i)) for i in range(len(test)))
    print(f"   {2 * len(test) - len(wrong)}/{2 * len(test)} sentences exact, {len(wrong)} not: {wrong[:10]}; "
          f"{unk} with <unk>")


if __name__ == "__main__":
    main()
