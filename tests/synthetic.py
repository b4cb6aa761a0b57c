"""A tiny in-memory translation dataset with the data pipeline's interface, for trainer tests that must not
depend on tokenizers or corpora: the target is the source reversed (a task a tiny model learns in seconds)."""

from __future__ import annotations

import numpy as np
import torch

from normlab.data.batch import BOS, EOS, PAD, TranslationBatch


class ReverseTask:
    def __init__(self, n: int = 256, vocab: int = 20, min_len: int = 3, max_len: int = 9, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.src = [rng.integers(7, vocab, size=rng.integers(min_len, max_len + 1)) for _ in range(n)]
        self.tgt = [s[::-1].copy() for s in self.src]
        self.sizes = np.array([len(t) + 1 for t in self.tgt])

    def __len__(self) -> int:
        return len(self.src)

    def epoch_batches(
        self, epoch: int, seed: int, max_tokens: int, shuffle: bool = True, *, max_sentences: int = 0
    ) -> list[np.ndarray]:
        order = np.argsort(self.sizes, kind="stable")
        batches, cur, longest = [], [], 0
        for i in order:
            longest2 = max(longest, self.sizes[i])
            if cur and longest2 * (len(cur) + 1) > max_tokens:
                batches.append(np.array(cur))
                cur, longest2 = [], self.sizes[i]
            cur.append(i)
            longest = longest2
        if cur:
            batches.append(np.array(cur))
        if shuffle:
            perm = np.random.default_rng([seed, epoch]).permutation(len(batches))
            batches = [batches[k] for k in perm]
        return batches

    def collate(self, indices, *, rank=0, world=1, seed=0, epoch=0, step=0) -> TranslationBatch:
        part = np.array_split(np.asarray(indices), world)[rank]
        S = max(len(self.src[i]) for i in part) + 1
        T = max(len(self.tgt[i]) for i in part) + 1
        src = torch.full((len(part), S), PAD)
        tin = torch.full((len(part), T), PAD)
        tout = torch.full((len(part), T), PAD)
        for r, i in enumerate(part):
            s, t = torch.as_tensor(self.src[i]), torch.as_tensor(self.tgt[i])
            src[r, : len(s)] = s
            src[r, len(s)] = EOS
            tin[r, 0] = BOS
            tin[r, 1 : len(t) + 1] = t
            tout[r, : len(t)] = t
            tout[r, len(t)] = EOS
        return TranslationBatch(src, tin, tout, torch.as_tensor(part), int((tout != PAD).sum()))


def _emit(record: dict) -> None:
    """One JSON line on stderr in a single write(2): under torchrun both ranks share the pipe, and print() writes
    the text and its newline in two calls (stderr is write-through), so two ranks' lines could run together
    (seen once in CI: '{"rank": 0, ...}{"rank": 1, ...}'). A write of under PIPE_BUF bytes to a pipe is atomic."""
    import json
    import os
    import sys

    sys.stderr.flush()
    os.write(2, (json.dumps(record) + "\n").encode())


def main(argv: list[str] | None = None) -> int:
    """``python tests/synthetic.py RUN_DIR CONFIG_JSON [--resume] [--sleep S]``: a Trainer on ReverseTask in a
    process of its own (the SIGKILL-resume and torchrun tests drive it)."""
    import argparse
    import json
    import sys
    import time

    from normlab.config import TrainConfig
    from normlab.train.distributed import shutdown
    from normlab.train.trainer import EXIT_DIVERGED, Trainer

    p = argparse.ArgumentParser()
    p.add_argument("run_dir")
    p.add_argument("config")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds per collated batch, to slow the run down")
    p.add_argument("--report-threads", action="store_true", help="print the process's thread names after shutdown")
    args = p.parse_args(argv)
    cfg = TrainConfig.from_dict(json.loads(args.config))
    train, valid = ReverseTask(), ReverseTask(n=64, seed=1)
    if args.sleep:
        collate = train.collate

        def slow(*a, **k):
            time.sleep(args.sleep)
            return collate(*a, **k)

        train.collate = slow  # type: ignore[method-assign]
    trainer = Trainer(cfg, args.run_dir, train, valid, progress=False)
    summary = trainer.fit(resume=args.resume)
    trainer.close()
    shutdown(trainer.dist)
    if args.report_threads:  # the torchrun test: gloo's threads must be gone before the interpreter exits
        import glob

        names = sorted(open(p).read().strip() for p in glob.glob("/proc/self/task/*/comm"))
        _emit({"rank": trainer.dist.rank, "threads_after_shutdown": names})
    _emit(summary)
    return EXIT_DIVERGED if summary["status"] == "diverged" else 0


if __name__ == "__main__":
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    raise SystemExit(main())
