"""Translating with a trained run: ``normlab translate`` (stdin/file to stdout, streamed), ``normlab evaluate``
(BLEU, both kinds, and NLL on a split of the run's corpus or on your own parallel files; a language-model run's
perplexity is normlab.lm's), and the validation BLEU the trainer measures after every epoch.

A run directory holds everything needed: ``config.yaml``, ``tokenizer.model`` (written by ``normlab train``)
and ``checkpoints/``; ``--checkpoint`` is ``best`` (the lowest validation NLL), ``last``, an update number or
``avg:N`` (the mean of the last N checkpoints' weights: normlab.train.checkpoint.average_weights).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normlab.config import ConfigError, TrainConfig
from normlab.data import prepare
from normlab.data.batch import EOS, PAD
from normlab.data.cache import digest
from normlab.data.corpora import DataError
from normlab.data.datasets import read_test_pairs
from normlab.data.tokenizer import Tokenizer
from normlab.device import autocast_dtype
from normlab.files import strict_json, write_atomic
from normlab.generate import translate_batch
from normlab.lm import run_evaluate_lm
from normlab.metrics import bleu
from normlab.model import Seq2Seq
from normlab.rundir import RunDir
from normlab.scoring import ENCODER_TASKS, evaluate_encoder
from normlab.train.checkpoint import CheckpointError, read_state
from normlab.train.objectives import compute_loss

__all__ = ["load_run", "translate_tokens", "translate_lines", "validation_bleu", "evaluate_run"]

log = logging.getLogger("normlab.translate")


def load_run(run_dir: str | Path, checkpoint: str = "best", device: str = "auto") -> tuple[Seq2Seq, TrainConfig, Tokenizer, Path]:
    """The run's model (with the checkpoint's weights, in eval mode), configuration and tokenizer."""
    rd = RunDir(run_dir)
    model, cfg, path = rd.load_model("translation", checkpoint, device)
    tok = rd.tokenizer()
    return model, cfg, tok, path  # type: ignore[return-value]


def _batches(lengths: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Indices grouped by similar length, each group's padded source size at most max_tokens."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups, cur, longest = [], [], 0
    for i in order:
        longest2 = max(longest, lengths[i])
        if cur and longest2 * (len(cur) + 1) > max_tokens:
            groups.append(cur)
            cur, longest2 = [], lengths[i]
        cur.append(i)
        longest = longest2
    if cur:
        groups.append(cur)
    return groups


@torch.inference_mode()
def translate_tokens(
    model: Seq2Seq,
    sources: Sequence[Sequence[int]],
    *,
    beam: int = 5,
    lenpen: float = 1.2,
    max_tokens: int = 4096,
    bf16: bool = False,
) -> list[list[int]]:
    """Best hypothesis (token ids, no EOS) of each source (token ids without EOS), in the given order."""
    device = next(model.parameters()).device
    out: list[list[int]] = [[] for _ in sources]
    todo = [i for i, s in enumerate(sources) if len(s) > 0]  # an empty line translates to an empty line
    lengths = [len(sources[i]) + 1 for i in todo]
    for group in _batches(lengths, max_tokens):
        idx = [todo[g] for g in group]
        width = max(len(sources[i]) for i in idx) + 1
        src = torch.full((len(idx), width), PAD, dtype=torch.long)
        for r, i in enumerate(idx):
            src[r, : len(sources[i])] = torch.as_tensor(list(sources[i]))
            src[r, len(sources[i])] = EOS
        hyps = translate_batch(model, src.to(device), beam_size=beam, lenpen=lenpen, bf16=bf16).best()
        for i, h in zip(idx, hyps):
            out[i] = list(h)
    return out


def _encode_lines(tok: Tokenizer, lines: Sequence[str], max_positions: int, first_line: int) -> list[list[int]]:
    ids = tok.encode_batch([line.strip() for line in lines])
    limit = max_positions - 1  # room for the EOS
    for k, s in enumerate(ids):
        if len(s) > limit:
            log.warning("line %d: %d tokens, truncated to max_positions - 1 = %d", first_line + k, len(s), limit)
            ids[k] = s[:limit]
    return ids


def translate_lines(
    model: Seq2Seq,
    tok: Tokenizer,
    lines: Iterable[str],
    *,
    beam: int = 5,
    lenpen: float = 1.2,
    max_tokens: int = 4096,
    chunk: int = 256,
    bf16: bool = False,
) -> Iterator[str]:
    """Translations of ``lines``, in order, yielded as each chunk of ``chunk`` lines is done (streaming)."""
    buf: list[str] = []
    first = 1
    for line in lines:
        buf.append(line)
        if len(buf) == chunk:
            yield from _translate_chunk(model, tok, buf, first, beam, lenpen, max_tokens, bf16)
            first += len(buf)
            buf = []
    if buf:
        yield from _translate_chunk(model, tok, buf, first, beam, lenpen, max_tokens, bf16)


def _translate_chunk(model, tok, lines, first, beam, lenpen, max_tokens, bf16) -> Iterator[str]:  # noqa: ANN001
    ids = _encode_lines(tok, lines, model.cfg.max_positions, first)
    for hyp in translate_tokens(model, ids, beam=beam, lenpen=lenpen, max_tokens=max_tokens, bf16=bf16):
        yield tok.decode(hyp)


def validation_bleu(
    model: Seq2Seq, tok: Tokenizer, dataset: Any, *, sentences: int, beam: int, lenpen: float, max_tokens: int,
    bf16: bool = False, lang: str = "en",
) -> dict[str, float]:
    """BLEU of the first ``sentences`` examples of a TranslationDataset (the trainer's per-epoch BLEU); ``lang``: the
    target language (the tokenized BLEU's Moses rules, as evaluate's)."""
    n = min(sentences, len(dataset))
    sources = [list(dataset.source_tokens(i)) for i in range(n)]
    was_training = model.training
    hyps = translate_tokens(model, sources, beam=beam, lenpen=lenpen, max_tokens=max_tokens, bf16=bf16)
    model.train(was_training)
    scores = bleu([tok.decode(h) for h in hyps], [dataset.target(i) for i in range(n)], lang=lang)
    return {"bleu": scores.sacrebleu, "bleu_tokenized": scores.tokenized_bleu}


def evaluate_run(
    run_dir: str | Path, split: str = "test", *, checkpoint: str = "best", beam: int = 5, lenpen: float = 1.2,
    max_tokens: int = 4096, limit: int = 0, device: str = "auto", source: str | Path | None = None,
    reference: str | Path | None = None,
) -> dict[str, Any]:
    """BLEU (sacreBLEU on detokenized text, and fairseq-IWSLT-style tokenized BLEU) and the teacher-forced NLL
    of ``split`` of the run's corpus, or of your own parallel files ``source`` / ``reference`` (one sentence per
    line, in the run's source and target languages, read with the run's tokenizer and dropped as ``prepare``
    drops a split's pairs); also writes ``run_dir/eval/<split>-<checkpoint>.{json,hyp}`` (for your files:
    ``own-<file name>-<hash of its path>-<checkpoint>``, named in the result's ``written``)."""
    if limit < 0:
        raise ConfigError(f"--limit must be >= 0 (0 = all), got {limit}")
    if (source is None) != (reference is None):
        raise ConfigError("--source and --reference go together: your source sentences and their translations")
    if source is not None and reference is not None:
        for flag, f in (("--source", source), ("--reference", reference)):
            if not str(f) or not Path(f).is_file():
                why = "is a directory" if str(f) and Path(f).is_dir() else "no such file"
                raise ConfigError(f"{flag} {f!r}: {why}")
    model, cfg, tok, path = load_run(run_dir, checkpoint, device)
    if source is None or reference is None:
        # with the run's own tokenizer (a run resumed with --accept-changed-data keeps it), as lm.evaluate_lm does
        data = prepare(cfg.data.replace(valid_subset=0), cfg.model.max_positions, tokenizer=tok)
        if split not in data.splits:
            raise ConfigError(f"{run_dir}: the corpus has no {split!r} split (has {sorted(data.splits)})")
        ds, stem, rows = data.splits[split], split, data.rows.get(split)
        st = data.stats[split]
        what = {"split": split, "dropped_empty": st["dropped_empty"],
                "dropped_longer_than_max_positions": st["dropped_long"], "data_rows": st["data_rows"]}  # fmt: skip
    else:
        try:  # read as prepare reads a corpus' split, with the run's tokenizer
            ds, dropped, rows = read_test_pairs(Path(source), Path(reference), tok, cfg.model.max_positions)
        except DataError as e:
            raise ConfigError(str(e)) from None
        what = {"source": str(source), "reference": str(reference), **dropped}
        # named after the file and where it is: two test sets called news.de must not overwrite each other's
        # scores, nor a file called "test" the split's
        stem = f"own-{Path(source).name}-{digest('eval', str(Path(source).resolve()))[:8]}"
    n = min(limit, len(ds)) if limit else len(ds)
    # which update the scored weights are (``best`` or ``last`` name a checkpoint, not its update: a new user found
    # the summary's ``test.update``, the run's last update, read as the checkpoint's); None for an average
    try:
        at = read_state(path).get("update")
    except CheckpointError:  # an average of checkpoints is no checkpoint directory
        at = None
    what = {**what, "checkpoint_update": at}
    result = {"run": str(run_dir), "checkpoint": str(path), **what,
              **_score(model, cfg, tok, ds, n, beam=beam, lenpen=lenpen, max_tokens=max_tokens)}  # fmt: skip
    hyps = result.pop("hypotheses")
    rd = RunDir(run_dir)
    lines = rd.write_eval_lines(stem, path, ".hyp", hyps, rows, what["data_rows"] if n == len(ds) else None)
    # the scores are of the pairs scored; a pair dropped when read (an empty side) or for its length has an empty
    # line in the .hyp and its row (1-based) in rows_not_scored (a new user found a test BLEU over 24 of 40 pairs
    # that said so only in a log line). With --limit the .hyp covers the rows up to the last one scored
    # (hyp_lines); data_rows and the drop counts are the whole file's
    result.update(hypotheses_file=lines["file"], hyp_lines=lines["lines"], rows_not_scored=lines["rows_not_scored"])
    result["written"] = str(rd.eval_file(stem, path))
    write_atomic(rd.eval_file(stem, path), json.dumps(strict_json(result), indent=1))
    return result


def _score(model: Seq2Seq, cfg: TrainConfig, tok: Tokenizer, ds: Any, n: int, *, beam: int, lenpen: float,
           max_tokens: int) -> dict[str, Any]:  # fmt: skip
    """BLEU and NLL of the first ``n`` examples of ``ds`` (and the hypotheses, for the .hyp file)."""
    t0 = time.perf_counter()
    sources = [list(ds.source_tokens(i)) for i in range(n)]
    amp = autocast_dtype(cfg.precision, next(model.parameters()).device)
    hyps = [tok.decode(h) for h in translate_tokens(model, sources, beam=beam, lenpen=lenpen, max_tokens=max_tokens,
                                                     bf16=amp is not None)]  # fmt: skip
    seconds = time.perf_counter() - t0
    refs = [ds.target(i) for i in range(n)]
    scores = bleu(hyps, refs, lang=cfg.data.target_lang)
    nll = tokens = 0.0
    with torch.inference_mode():
        sub = ds.select(np.arange(n)) if n < len(ds) else ds
        for idx in sub.epoch_batches(0, cfg.seed, max_tokens, shuffle=False):
            sums = compute_loss(model, sub.collate(idx).to(next(model.parameters()).device), 0.0)
            nll += sums.nll.item()
            tokens += sums.n_tokens
    return {
        "sentences": n,
        "bleu": scores.sacrebleu, "bleu_signature": scores.sacrebleu_signature,
        "bleu_tokenized": scores.tokenized_bleu, "bleu_tokenized_signature": scores.tokenized_bleu_signature,
        "nll": nll / max(tokens, 1), "ppl": math.exp(min(nll / max(tokens, 1), 50)),
        "decoding": {"beam": beam, "lenpen": lenpen, "max_len": "1.2 * src_len + 10", "max_tokens": max_tokens},
        "sentences_per_s": n / max(seconds, 1e-9),
        "hypotheses": hyps,
    }  # fmt: skip


# ----------------------------------------------------------------------------------------------------- CLI


DEFAULT_BEAM, DEFAULT_LENPEN = 5, 1.2  # the paper's decoding (Section 3.2: beam 5, length penalty 1.2)


def _common(p: argparse.ArgumentParser, run: str = "a translation run directory (normlab train --out)") -> None:
    p.add_argument("--run", required=True, help=run)
    p.add_argument("--checkpoint", default="best", help="best, last, an update number, or avg:N (the mean "
                   "of the last N checkpoints' weights, as fairseq's average_checkpoints.py)")
    # None when not given (translation's defaults are filled in by _check_decoding), so that a run of another task
    # can refuse them rather than ignore them
    p.add_argument("--beam", type=int, default=None, help=f"beam size (default {DEFAULT_BEAM}, the paper's; 1 = greedy)")
    p.add_argument("--lenpen", type=float, default=None, help=f"length penalty (default {DEFAULT_LENPEN}, the paper's)")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per batch (translation: source tokens per "
                   "decoding batch); at least the longest example")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def add_translate_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--input", help="a file of sentences, one per line (default: stdin)")


# A beam holds beam x sentences hypotheses with their caches; past a few thousand it exhausts memory (a --beam of
# 10**30 overflowed in C++ frames, issue 36), and wide beams decode worse anyway (the paper uses 5)
MAX_BEAM = 1024


def _check_decoding(args: argparse.Namespace) -> None:
    """The decoding options, checked before a model is loaded (one line each)."""
    args.beam = DEFAULT_BEAM if args.beam is None else args.beam
    args.lenpen = DEFAULT_LENPEN if args.lenpen is None else args.lenpen
    if not 1 <= args.beam <= MAX_BEAM:
        raise ConfigError(f"--beam must be in [1, {MAX_BEAM}] (1 = greedy), got {args.beam}")
    if not (math.isfinite(args.lenpen) and args.lenpen >= 0):
        raise ConfigError(f"--lenpen must be a finite number >= 0, got {args.lenpen}")
    if args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be positive, got {args.max_tokens}")


def _utf8_lines(stream: Any, name: str) -> Iterator[str]:
    """The lines of a binary stream as text; a line that is not UTF-8 is a one-line error naming it."""
    for number, raw in enumerate(stream, 1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"{name}: line {number} is not valid UTF-8 (byte {e.start + 1} of the line)") from None


def run_translate(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    _check_decoding(args)
    if args.input:
        path = Path(args.input)
        if not path.exists() or path.is_dir():
            raise ConfigError(f"--input {args.input}: " + ("is a directory" if path.is_dir() else "no such file"))
        with open(path, "rb") as f:  # a file is checked whole before anything is translated
            for _ in _utf8_lines(f, f"--input {args.input}"):
                pass
    model, cfg, tok, _ = load_run(args.run, args.checkpoint, args.device)
    amp = autocast_dtype(cfg.precision, next(model.parameters()).device) is not None
    source = open(args.input, "rb") if args.input else sys.stdin.buffer
    interactive = not args.input and sys.stdin.isatty()
    try:
        lines = _utf8_lines(source, f"--input {args.input}" if args.input else "stdin")
        for line in translate_lines(model, tok, lines, beam=args.beam, lenpen=args.lenpen, max_tokens=args.max_tokens,
                                    chunk=1 if interactive else 256, bf16=amp):
            print(line, flush=True)
    finally:
        if args.input:
            source.close()
    return 0


def add_evaluate_arguments(p: argparse.ArgumentParser) -> None:
    _common(p, "a run directory (normlab train --out): translation (BLEU), language model (perplexity), "
            "classification (accuracy) or masked LM (masked-token loss)")
    p.add_argument("--split", default=None, choices=["valid", "test"], help="a split of the run's corpus (default: "
                   "test; a language-model, classification or masked-LM run: test where its corpus has one, else "
                   "valid)")
    p.add_argument("--source", help="your own test set instead of a split: a file of source sentences, one per line, "
                   "in the run's source language (with --reference)")
    p.add_argument("--reference", help="the reference translations of --source, line by line")
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences (0 = all)")
    p.add_argument("--text", help="a language-model run (data.task=lm): your own text file, one paragraph per line, "
                   "instead of a split; its perplexity beside the unigram level (--beam, --lenpen, --limit are "
                   "translation's)")


def _given(args: argparse.Namespace, *flags: str) -> list[str]:
    """Which of evaluate's ``flags`` the user gave (--limit 0 is its default, "all"), in the order named."""
    value = {"--text": args.text, "--source": args.source, "--reference": args.reference,
             "--limit": args.limit or None, "--beam": args.beam, "--lenpen": args.lenpen}  # fmt: skip
    return [f for f in flags if value[f] is not None]


def run_evaluate(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    rd = RunDir(args.run)
    if not rd.is_run() and (rd.path / "runs").is_dir():  # a grid's folder (finetune --out, sweep --out, ...)
        first = next((c.parent for c in sorted((rd.path / "runs").rglob(RunDir.CONFIG))), None)
        raise ConfigError(f"{rd.path}: a folder of runs, not a run; evaluate one of them"
                          + (f", e.g. --run {first}" if first else ""))  # fmt: skip
    task = rd.read_config().data.task if rd.is_run() else "translation"
    if task == "lm":  # perplexity, not BLEU (normlab.lm)
        if given := _given(args, "--beam", "--lenpen", "--limit"):
            raise ConfigError(f"{', '.join(given)}: not for a language-model run (translation's decoding); it is "
                              "scored on a --split or your --text")
        return run_evaluate_lm(args)
    if task in ENCODER_TASKS:  # accuracy or masked-LM loss (normlab.scoring)
        if given := _given(args, "--text", "--source", "--reference", "--limit", "--beam", "--lenpen"):
            kind = "classification" if task == "classification" else "masked-LM (mlm)"
            raise ConfigError(f"{', '.join(given)}: not for a {kind} run, which is scored on a --split of its own "
                              "corpus (--beam, --lenpen, --limit are translation's decoding)")
        result = evaluate_encoder(args.run, args.split, checkpoint=args.checkpoint, max_tokens=args.max_tokens,
                                  device=args.device)  # fmt: skip
        print(json.dumps(result, indent=1))
        return 0
    if args.text:
        raise ConfigError("--text is for a language-model run (data.task=lm); a translation takes --source/--reference")
    _check_decoding(args)
    if args.split and (args.source or args.reference):
        raise ConfigError("--split evaluates the run's own corpus; --source/--reference your files: one or the other")
    result = evaluate_run(args.run, args.split or "test", checkpoint=args.checkpoint, beam=args.beam,
                          lenpen=args.lenpen, max_tokens=args.max_tokens, limit=args.limit, device=args.device,
                          source=args.source, reference=args.reference)  # fmt: skip
    print(json.dumps(result, indent=1))
    return 0
