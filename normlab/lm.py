"""Using a trained language-model run (``data.task=lm``): ``normlab evaluate`` (perplexity on a split of its corpus
or on your own text, beside the unigram level) and ``normlab generate`` (sampling with the KV cache).

A run directory holds everything needed: ``config.yaml``, ``tokenizer.model`` and ``checkpoints/``;
``--checkpoint`` is ``best`` (the lowest validation NLL), ``last``, an update number or ``avg:N`` (the mean of the
last N checkpoints' weights: normlab.train.checkpoint.average_weights). Text is scored as the
trainer scores it: paragraphs (lines) between EOS, cut into blocks of the run's ``data.block_size``
(:class:`~normlab.data.datasets.LMDataset`), so the perplexity of the run's validation split here equals the
trainer's last validation perplexity of that checkpoint.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from normlab.config import ConfigError, TrainConfig
from normlab.data import prepare
from normlab.data.batch import EOS
from normlab.data.cache import digest
from normlab.data.corpora import DataError, read_mono
from normlab.data.datasets import LMDataset
from normlab.data.tasks import lm_block_starts, lm_stream
from normlab.data.tokenizer import Tokenizer
from normlab.device import autocast, autocast_dtype
from normlab.files import strict_json, write_atomic
from normlab.generate import sample_lm
from normlab.hf import export_gpt2, gpt2_refusal
from normlab.metrics import unigram_entropy
from normlab.model import CausalLM
from normlab.rundir import RunDir
from normlab.train.objectives import compute_loss

__all__ = ["load_lm", "text_dataset", "perplexity", "evaluate_lm", "generate", "export_hf_gpt2", "add_generate_arguments",
           "run_generate", "run_evaluate_lm", "run_export_gpt2"]

log = logging.getLogger("normlab.lm")


def load_lm(run_dir: str | Path, checkpoint: str = "best", device: str = "auto"
            ) -> tuple[CausalLM, TrainConfig, Tokenizer, Path]:  # fmt: skip
    """The run's language model (with the checkpoint's weights, in eval mode), configuration and tokenizer;
    a run of another task is refused in one line."""
    rd = RunDir(run_dir)
    model, cfg, path = rd.load_model("lm", checkpoint, device)
    return model, cfg, rd.tokenizer(), path  # type: ignore[return-value]


def text_dataset(path: str | Path, tok: Tokenizer, block_size: int) -> LMDataset:
    """Your own text file (one paragraph per line, possibly compressed) as the trainer would read a split of it."""
    text = read_mono(Path(path)).text
    tokens, offsets = tok.encode_arrays(text)
    stream = lm_stream(tokens, offsets)
    return LMDataset(stream, lm_block_starts(len(stream), block_size), block_size)


@torch.inference_mode()
def perplexity(model: CausalLM, ds: LMDataset, *, max_tokens: int = 4096, bf16: bool = False) -> dict[str, float]:
    """NLL per target token of ``ds`` (every token of the text but the first is a target once) and its
    exponential, the perplexity."""
    device = next(model.parameters()).device
    model.eval()
    nll = n = 0.0
    with autocast(device, torch.bfloat16 if bf16 else None):
        for idx in ds.epoch_batches(0, 0, max(max_tokens, ds.block_size), shuffle=False):
            sums = compute_loss(model, ds.collate(idx).to(device))
            nll += sums.nll.item()
            n += sums.n_tokens
    mean = nll / max(n, 1)
    return {"nll": mean, "ppl": math.exp(min(mean, 50.0)), "tokens": int(n)}


def evaluate_lm(run_dir: str | Path, split: str | None = None, *, checkpoint: str = "best", text: str | Path | None = None,
                max_tokens: int = 4096, device: str = "auto") -> dict[str, Any]:  # fmt: skip
    """Perplexity of a language-model run on ``split`` of its corpus (default: test when the corpus has one, else
    valid) or on your own ``text`` file, beside the unigram level: the perplexity of the run's training tokens'
    frequencies on the same targets (:func:`normlab.metrics.unigram_entropy`), the plateau every model crosses
    first. Writes ``run_dir/eval/<split or own-FILE-HASH>-<checkpoint>.json``."""
    if text is not None and split is not None:
        raise ConfigError("--split evaluates the run's own corpus; --text your file: one or the other")
    if text is not None and not Path(text).is_file():
        raise ConfigError(f"--text {text!r}: " + ("is a directory" if Path(text).is_dir() else "no such file"))
    model, cfg, tok, path = load_lm(run_dir, checkpoint, device)
    # the run's corpus gives the unigram reference (its training targets), and the split when no file is given
    data = prepare(cfg.data.replace(valid_subset=0), cfg.model.max_positions, tokenizer=tok)
    if text is None:
        split = split or ("test" if "test" in data.splits else "valid")
        if split not in data.splits:
            raise ConfigError(f"{run_dir}: the corpus has no {split!r} split (has {sorted(data.splits)})")
        ds, what, stem = data.splits[split], {"split": split}, split
    else:
        try:
            ds = text_dataset(text, tok, cfg.data.block_size)
        except DataError as e:
            raise ConfigError(str(e)) from None
        if len(ds) == 0:
            raise ConfigError(f"--text {text}: no token to predict")
        what = {"text": str(text)}
        stem = f"own-{Path(text).name}-{digest('eval', str(Path(text).resolve()))[:8]}"
    t0 = time.perf_counter()
    amp = autocast_dtype(cfg.precision, next(model.parameters()).device) is not None
    scores = perplexity(model, ds, max_tokens=max_tokens, bf16=amp)  # type: ignore[arg-type]
    unigram = unigram_entropy(ds.all_targets(), data.splits["train"].all_targets())  # type: ignore[attr-defined]
    result = {"run": str(run_dir), "checkpoint": str(path), **what, **scores,
              "unigram_nll": unigram, "unigram_ppl": math.exp(unigram),
              "seconds": round(time.perf_counter() - t0, 3)}  # fmt: skip
    out = RunDir(run_dir).eval_file(stem, path)
    result["written"] = str(out)
    write_atomic(out, json.dumps(strict_json(result), indent=1))
    return result


def generate(run_dir: str | Path, prompt: str, *, checkpoint: str = "best", samples: int = 1,
             max_new_tokens: int = 64, temperature: float = 1.0, top_k: int = 0, seed: int = 0,
             device: str = "auto") -> list[str]:  # fmt: skip
    """``samples`` continuations of ``prompt`` by a language-model run (:func:`normlab.generate.sample_lm`). The
    prompt is encoded with the run's tokenizer after an EOS, where every paragraph of the training stream starts;
    an empty prompt samples a paragraph from its start."""
    model, cfg, tok, _ = load_lm(run_dir, checkpoint, device)
    ids = [EOS, *tok.encode(prompt)] if prompt.strip() else [EOS]
    limit = cfg.model.max_positions - 1
    if len(ids) > limit:
        raise ConfigError(f"--prompt: {len(ids)} tokens leave no room to generate (max_positions="
                          f"{cfg.model.max_positions}); shorten it")
    amp = autocast_dtype(cfg.precision, next(model.parameters()).device) is not None
    rows = sample_lm(model, ids, samples=samples, max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                     seed=seed, bf16=amp)  # fmt: skip
    return [tok.decode(row) for row in rows]


def export_hf_gpt2(run_dir: str | Path, out: str | Path, which: str = "best") -> dict[str, Any]:
    """Write a Pre-LN language-model run's checkpoint as a Hugging Face ``GPT2LMHeadModel`` (``save_pretrained``)
    into ``out``, with the run's ``tokenizer.model`` beside it (sentencepiece; normlab's ids: pad 0, eos 3, which
    the config names as GPT-2's bos/eos). Checks that HF computes what normlab computes on random text ids and
    returns the largest logit difference. What GPT-2 cannot express is refused in one line before anything is
    written (:func:`normlab.hf.gpt2_refusal`)."""
    rd = RunDir(run_dir)
    if not rd.is_run():
        raise ConfigError(f"{run_dir}: not a run directory (no {RunDir.CONFIG})")
    reason = gpt2_refusal(rd.read_config().model)
    if reason is not None:
        raise ConfigError(reason)
    try:
        import transformers  # noqa: F401 - the optional dependency, checked before anything is written
    except ImportError:
        raise ConfigError("exporting to Hugging Face needs transformers: pip install 'normlab[hf]'") from None
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "config.json").is_file():
        raise ConfigError(f"{out} is not empty and holds no earlier export (config.json); choose another --out")
    model, cfg, tok, path = load_lm(run_dir, which, "cpu")
    hf = export_gpt2(model, out)
    (out / "tokenizer.model").write_bytes(tok.proto)
    g = torch.Generator().manual_seed(0)
    n = min(32, cfg.model.max_positions)
    ids = torch.randint(7, cfg.model.vocab_size, (2, n), generator=g)
    ids[:, 0] = EOS
    with torch.no_grad():
        diff = (model(ids) - hf(input_ids=ids).logits).abs().max().item()
    return {"out": str(out), "checkpoint": str(path), "parameters": sum(p.numel() for p in model.parameters()),
            "vocab_size": cfg.model.vocab_size, "max_abs_logit_diff": diff}  # fmt: skip


# ----------------------------------------------------------------------------------------------------- CLI

MAX_SAMPLES = 1024  # rows decoded together, each with its cache: far more exhausts memory


def add_generate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="a language-model run directory (normlab train --set data.task=lm)")
    p.add_argument("--prompt", default="", help="the text to continue ('' = the start of a paragraph)")
    p.add_argument("--checkpoint", default="best", help="best, last, an update number, or avg:N (the mean "
                   "of the last N checkpoints' weights, as fairseq's average_checkpoints.py)")
    p.add_argument("--samples", type=int, default=1, help="continuations to draw")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate at most (a sample also ends "
                   "at the end of a paragraph, EOS)")
    p.add_argument("--temperature", type=float, default=1.0, help="softmax temperature; 0 = greedy (arg-max)")
    p.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens only (0 = all)")
    p.add_argument("--seed", type=int, default=0, help="the sampling seed (the same seed, the same samples)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])


def run_generate(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if not 1 <= args.samples <= MAX_SAMPLES:
        raise ConfigError(f"--samples must be in [1, {MAX_SAMPLES}], got {args.samples}")
    if args.max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens must be positive, got {args.max_new_tokens}")
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        raise ConfigError(f"--temperature must be a finite number >= 0, got {args.temperature}")
    if args.top_k < 0:
        raise ConfigError(f"--top-k must be >= 0 (0 = all), got {args.top_k}")
    for text in generate(args.run, args.prompt, checkpoint=args.checkpoint, samples=args.samples,
                         max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                         seed=args.seed, device=args.device):  # fmt: skip
        print(text, flush=True)
    return 0


def run_evaluate_lm(args: argparse.Namespace) -> int:
    """``normlab evaluate`` on a language-model run (called by normlab.translate.run_evaluate for ``task: lm``)."""
    if args.source or args.reference:
        raise ConfigError("--source/--reference are a translation test set; for a language model pass --text FILE")
    if args.max_tokens < 1:
        raise ConfigError(f"--max-tokens must be positive, got {args.max_tokens}")
    result = evaluate_lm(args.run, args.split, checkpoint=args.checkpoint, text=args.text, max_tokens=args.max_tokens,
                         device=args.device)  # fmt: skip
    print(json.dumps(strict_json(result), indent=1))
    return 0



EXPORT_TOLERANCE = 1e-3  # max |logit difference| the export accepts, as normlab.pretrained's (float32: ~1e-6)


def run_export_gpt2(args: argparse.Namespace) -> int:
    """``normlab export-hf`` on a language-model run (called by normlab.pretrained.run_export for ``task: lm``)."""
    done = export_hf_gpt2(args.run, args.out, args.checkpoint)
    print(f"exported {done['checkpoint']} ({done['parameters']:,} parameters, vocab {done['vocab_size']}) to "
          f"{done['out']} as a Hugging Face GPT2LMHeadModel, with its sentencepiece tokenizer.model")
    diff = done["max_abs_logit_diff"]
    print(f"check: max |normlab - HF| next-token logit on random text = {diff:.1e}")
    if not diff <= EXPORT_TOLERANCE:
        print(f"normlab export-hf: error: HF's logits differ from normlab's by {diff:.1e} > {EXPORT_TOLERANCE:g}",
              file=sys.stderr)
        return 1
    return 0
