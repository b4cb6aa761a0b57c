"""Where the analyses' inputs come from: mini-batches (synthetic or the real De-En data) and checkpoints.

The analyses take any iterable of :class:`~normlab.data.batch.TranslationBatch`, so the data source is
pluggable. Two sources are provided:

* :func:`synthetic_translation_batches`: token batches shaped like the paper's (Appendix A.1: batches of
  4,096 tokens, fairseq's ``max_tokens``, sentences of similar length in a batch, ids under a Zipf law over a
  10k joint vocabulary). At initialisation the model knows nothing of the language, so what matters for the
  gradient statistics is the shape of the batches and the skew of the target distribution (the mean gradient
  of the output layer points towards frequent tokens), which the Zipf law reproduces. Source and target are
  drawn independently.
* :func:`de_en_batches`: the real De-En training batches of the data pipeline (:func:`normlab.data.prepare`:
  the vendored stand-in for IWSLT14 De-En, joint 10k BPE, batches of 4,096 tokens), as the trainer sees them.

:func:`load_checkpoint` reads a trained model (the Post-LN model "after warm-up" of Figure 3(a,b)).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import nn

from normlab.config import ConfigError, DataConfig, ModelConfig
from normlab.data import DataError, prepare
from normlab.data.batch import BOS, CLS, EOS, MASK, PAD, SEP, ClassificationBatch, LMBatch, MLMBatch, TranslationBatch
from normlab.model import build_model
from normlab.rundir import RunDir
from normlab.train.checkpoint import STATE, read_state

__all__ = [
    "FIRST_CONTENT_ID",
    "zipf_weights",
    "synthetic_translation_batches",
    "synthetic_mlm_batches",
    "synthetic_lm_batches",
    "synthetic_classification_batches",
    "de_en_batches",
    "load_checkpoint",
]

FIRST_CONTENT_ID = 7  # ids 0..6 are the fixed special tokens of normlab.data.batch


def zipf_weights(vocab_size: int, exponent: float = 1.0) -> torch.Tensor:
    """Unnormalised Zipf weights 1/rank^s over the content ids ``FIRST_CONTENT_ID .. vocab_size - 1``."""
    n = vocab_size - FIRST_CONTENT_ID
    if n < 2:
        raise ConfigError(f"vocab_size={vocab_size} leaves fewer than 2 content tokens after the 7 special ids")
    return torch.arange(1, n + 1, dtype=torch.float64).pow(-exponent)


def _tokens(weights: torch.Tensor, n: int, g: torch.Generator) -> torch.Tensor:
    if n == 0:
        return torch.zeros(0, dtype=torch.long)
    return torch.multinomial(weights, n, replacement=True, generator=g) + FIRST_CONTENT_ID


def synthetic_translation_batches(
    n_batches: int,
    *,
    vocab_size: int,
    max_tokens: int = 4096,
    seed: int = 0,
    mean_length: float = 22.0,
    zipf_exponent: float = 1.0,
) -> list[TranslationBatch]:
    """``n_batches`` translation batches of at most ``max_tokens`` tokens each, padding included.

    As fairseq's token buckets: every batch gathers sentences of about one length ``l`` (drawn log-normally
    around ``mean_length``, IWSLT14's mean BPE length) and holds ``B = max_tokens // (longest + 1)`` sentence
    pairs, so that ``B x max(source length, target length)`` stays within ``max_tokens``. Sources end with
    eos, ``tgt_in`` starts with bos, ``tgt_out`` ends with eos. Deterministic in ``seed``.
    """
    g = torch.Generator().manual_seed(seed)
    weights = zipf_weights(vocab_size, zipf_exponent)
    batches = []
    for _ in range(n_batches):
        u = torch.randn((), generator=g).item()
        bucket = int(min(max(round(mean_length * math.exp(0.5 * u - 0.125)), 3), 200))
        cap = bucket + 3  # longest source or target in the bucket (before eos/bos)
        B = max(1, max_tokens // (cap + 1))
        src_len = (bucket + torch.randint(-2, 3, (B,), generator=g)).clamp(1, cap)
        ratio = 0.8 + 0.45 * torch.rand(B, generator=g)
        tgt_len = (src_len.double() * ratio).round().long().clamp(1, cap)
        S, T = int(src_len.max()) + 1, int(tgt_len.max()) + 1
        src = torch.full((B, S), PAD, dtype=torch.long)
        tgt_in = torch.full((B, T), PAD, dtype=torch.long)
        tgt_out = torch.full((B, T), PAD, dtype=torch.long)
        for b in range(B):
            s, t = int(src_len[b]), int(tgt_len[b])
            src[b, :s] = _tokens(weights, s, g)
            src[b, s] = EOS
            words = _tokens(weights, t, g)
            tgt_in[b, 0] = BOS
            tgt_in[b, 1 : t + 1] = words
            tgt_out[b, :t] = words
            tgt_out[b, t] = EOS
        n_tokens = int(tgt_out.ne(PAD).sum())
        batches.append(TranslationBatch(src=src, tgt_in=tgt_in, tgt_out=tgt_out, ids=torch.arange(B), n_tokens=n_tokens))
    return batches


def synthetic_mlm_batches(
    n_batches: int, *, vocab_size: int, batch_size: int = 16, length: int = 64, seed: int = 0
) -> list[MLMBatch]:
    """BERT-style masked-LM batches over Zipf tokens: cls + tokens, 15% of positions masked (80% [MASK],
    10% random, 10% kept), targets PAD elsewhere."""
    g = torch.Generator().manual_seed(seed)
    weights = zipf_weights(vocab_size)
    out = []
    for _ in range(n_batches):
        tokens = _tokens(weights, batch_size * (length - 1), g).view(batch_size, length - 1)
        tokens = torch.cat([torch.full((batch_size, 1), CLS), tokens], 1)
        chosen = torch.rand(tokens.shape, generator=g) < 0.15
        chosen[:, 0] = False
        chosen[0, 1] = True  # at least one target
        targets = torch.where(chosen, tokens, torch.full_like(tokens, PAD))
        r = torch.rand(tokens.shape, generator=g)
        inputs = tokens.clone()
        inputs[chosen & (r < 0.8)] = MASK
        rand_pos = chosen & (r >= 0.8) & (r < 0.9)
        inputs[rand_pos] = _tokens(weights, int(rand_pos.sum()), g)
        out.append(MLMBatch(tokens=inputs, segments=torch.zeros_like(inputs), targets=targets, n_tokens=int(chosen.sum())))
    return out


def synthetic_lm_batches(
    n_batches: int, *, vocab_size: int, batch_size: int = 16, length: int = 64, seed: int = 0
) -> list[LMBatch]:
    """Language-model batches over Zipf tokens: blocks of ``length`` + 1 tokens starting with EOS (a paragraph's
    start, as the packed stream has them), input the first ``length``, targets the last ``length``."""
    g = torch.Generator().manual_seed(seed)
    weights = zipf_weights(vocab_size)
    out = []
    for _ in range(n_batches):
        block = _tokens(weights, batch_size * length, g).view(batch_size, length)
        block = torch.cat([torch.full((batch_size, 1), EOS), block], 1)
        out.append(LMBatch(tokens=block[:, :-1].contiguous(), targets=block[:, 1:].contiguous(),
                           n_tokens=batch_size * length))  # fmt: skip
    return out


def synthetic_classification_batches(
    n_batches: int, *, vocab_size: int, num_classes: int = 2, batch_size: int = 16, length: int = 32, seed: int = 0
) -> list[ClassificationBatch]:
    """Sentence-pair batches ``cls a sep b sep`` over Zipf tokens with random labels."""
    g = torch.Generator().manual_seed(seed)
    weights = zipf_weights(vocab_size)
    half = (length - 3) // 2
    out = []
    for _ in range(n_batches):
        a = _tokens(weights, batch_size * half, g).view(batch_size, half)
        b = _tokens(weights, batch_size * half, g).view(batch_size, half)
        col = lambda v: torch.full((batch_size, 1), v)  # noqa: E731
        tokens = torch.cat([col(CLS), a, col(SEP), b, col(SEP)], 1)
        segments = torch.cat([torch.zeros(batch_size, half + 2, dtype=torch.long), torch.ones(batch_size, half + 1, dtype=torch.long)], 1)
        labels = torch.randint(0, num_classes, (batch_size,), generator=g)
        out.append(ClassificationBatch(tokens=tokens, segments=segments, labels=labels, ids=torch.arange(batch_size), n_tokens=batch_size))
    return out


def de_en_batches(
    n_batches: int, *, max_tokens: int = 4096, seed: int = 0, max_positions: int = 1024, data: DataConfig | None = None
) -> tuple[list[TranslationBatch], int]:
    """The first ``n_batches`` training batches of an epoch of IWSLT14 De-En (the vendored ``de-en`` corpus
    with its 10k joint BPE, unless ``data`` says otherwise), shuffled with ``seed`` as the trainer's first
    epoch is, and the tokenizer's vocabulary size. The tokenizer and binarized splits come from the data
    pipeline's cache (built on first use: up to a minute)."""
    cfg = data or DataConfig(task="translation", corpus="de-en")
    cfg = cfg.replace(max_tokens=max_tokens)
    try:
        prepared = prepare(cfg, max_positions)
    except DataError as e:
        raise ConfigError(f"de-en data: {e}") from None
    split = prepared.splits["train"]
    index_batches = split.epoch_batches(0, seed, cfg.max_tokens)
    if len(index_batches) < n_batches:
        raise ConfigError(f"de-en data: {n_batches} batches wanted, the training split has {len(index_batches)}")
    return [split.collate(idx, seed=seed) for idx in index_batches[:n_batches]], prepared.vocab_size


def load_checkpoint(path: str | Path, task: str = "translation") -> nn.Module:
    """A trained model, e.g. the Post-LN model "after warm-up" of Figure 3(a,b).

    ``path`` is one of
    * a trainer checkpoint directory (``RUN/checkpoints/update_00004000``: ``model.safetensors`` and
      ``state.json``, whose ``config`` is the run's TrainConfig; :mod:`normlab.train.checkpoint`): for the
      after-warm-up curve, the checkpoint of update T_warmup (train with ``keep_every`` = T_warmup to keep it);
    * a run directory (``RUN``): its last checkpoint;
    * a ``.safetensors`` file with a JSON sidecar (``X.json``, ``config.json`` or ``model.json`` beside it)
      whose ``"model"`` entry (or the whole document) is the ModelConfig.
    Tied embeddings are restored by :func:`safetensors.torch.load_model`, the counterpart of ``save_model``.
    """
    from safetensors.torch import load_model

    path = Path(path)

    if path.is_dir() and RunDir(path).checkpoints.is_dir():
        path = RunDir(path).resolve("last")
    if path.is_dir() and (path / STATE).is_file():
        state = read_state(path)
        run_cfg = state.get("config", {})
        meta = {"model": run_cfg.get("model", {}), "task": run_cfg.get("data", {}).get("task", task)}
        weights = path / "model.safetensors"
    else:
        weights = path / "model.safetensors" if path.is_dir() else path
        candidates = [weights.with_suffix(".json"), weights.parent / "config.json", weights.parent / "model.json"]
        sidecar = next((c for c in candidates if c.is_file()), None)
        if not weights.is_file() or sidecar is None:
            raise ConfigError(
                f"checkpoint {str(path)!r}: expected a trainer checkpoint directory (model.safetensors + state.json), "
                "a run directory, or a .safetensors file with a JSON sidecar holding the model config"
            )
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    cfg = ModelConfig.from_dict(meta.get("model", meta))
    model = build_model(cfg, meta.get("task", task))
    try:
        missing, unexpected = load_model(model, str(weights), strict=False)
    except RuntimeError as e:  # a tensor of another shape
        raise ConfigError(f"checkpoint {str(path)!r} does not fit its config ({str(e).splitlines()[-1].strip()})") from None
    if unexpected or [m for m in missing if not m.endswith("output_projection.weight")]:
        raise ConfigError(f"checkpoint {str(path)!r} does not match its config: missing {missing}, unexpected {unexpected}")
    return model
