"""Gradients at initialisation: Figure 3 of Xiong et al. (2020) and Theorem 1 across depth.

* Figure 3(a,b), :func:`figure3ab`: for every FFN weight W^{1,l}, W^{2,l} of a model, the paper's "scale of
  the expected gradient" (Section 3.4, "On the extended theory"): the gradient is recorded on each of M
  mini-batches, averaged element-wise, and the Frobenius norm of that mean is the statistic,
  ``|| (1/M) sum_m dL_m/dW ||_F``. It is *not* the mean of the per-batch norms (which does not shrink when the
  per-batch gradients disagree); both are returned, with a de-biased estimate of ``||E dL/dW||_F``.
* Figure 3(c,d), :func:`figure3cd`: ``||dL/dW^{2,L}||_F`` of the last FFN layer of the encoder and of the
  decoder, for models of depth 6-6 ... 14-14 and several seeds, and the slope of log(norm) against log(L)
  (:func:`fit_loglog_slope`). Theorem 1 bounds it by O(d sqrt(ln d)) for Post-LN, independent of L (slope
  0), and by O(d sqrt(ln d / L)) for Pre-LN (slope -1/2). Any scheme (``PLACEMENT[/NORM]``, as ``normlab
  sweep`` spells it) can be scanned; where the gradient is 0 (ReZero at initialisation) the slope is
  undefined and says so.

The loss is the training loss of Section 3.2 / Appendix A.1: label-smoothed cross entropy with eps = 0.1,
summed over the target tokens and divided by their number (fairseq's ``label_smoothed_cross_entropy`` with
``sample_size = ntokens``: the trainer scales the summed loss's gradient by 1/ntokens); :func:`training_loss`
calls the trainer's own loss function.

Parameters are selected by name (``decoder.layers.5.ffn.w2.weight``), activations are never hooked.
``nn.Linear`` stores W^T; the Frobenius norm is the same.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor, nn

from normlab.config import ModelConfig, parse_scheme
from normlab.data.batch import PAD, TranslationBatch
from normlab.device import autocast
from normlab.model import Seq2Seq, profile_init
from normlab.train.losses import label_smoothed_nll_loss

__all__ = [
    "FFN_WEIGHT",
    "training_loss",
    "GradientMoments",
    "ffn_weights",
    "expected_gradients",
    "figure3ab",
    "figure3cd",
    "THEOREM1_SLOPE",
    "fit_loglog_slope",
    "fit_paired_loglog_slope",
    "fit_linear_slope",
]

Mode = Literal["train", "eval"]

FFN_WEIGHT = re.compile(r"^(?P<stack>encoder|decoder)\.layers\.(?P<layer>\d+)\.ffn\.w(?P<which>[12])\.weight$")
"""Names of the FFN weight matrices W^{1,l}, W^{2,l} (``decoder.layers.5.ffn.w2.weight``)."""


def training_loss(logits: Tensor, target: Tensor, n_tokens: int, label_smoothing: float = 0.1) -> Tensor:
    """The trainer's loss per target token: label-smoothed cross entropy (fairseq's definition, computed by
    :func:`normlab.train.losses.label_smoothed_nll_loss` in fp32), summed over the non-pad targets and
    divided by ``n_tokens`` (fairseq's ``sample_size = ntokens``), so that the gradient is the one the
    optimizer would see at the first update."""
    loss, _ = label_smoothed_nll_loss(logits, target, label_smoothing, PAD)
    return loss / max(n_tokens, 1)


class GradientMoments:
    """Running first and second moments of per-batch gradients of some named parameters.

    ``norm_of_mean`` is the paper's "scale of the expected gradient" ``||(1/M) sum_m g_m||_F``;
    ``mean_of_norms`` is ``(1/M) sum_m ||g_m||_F``; ``debiased_norm`` estimates ``||E g||_F`` without the
    sampling noise that ``norm_of_mean`` carries: ``||g_bar||^2 - tr(Cov)/M`` with the unbiased sample
    covariance, ``tr(Cov) = (sum_m ||g_m||^2 - M ||g_bar||^2) / (M - 1)`` (clipped at 0).
    Sums are kept in float64 (``dtype``) so that the statistics do not depend on the order of many small
    additions; :mod:`~normlab.analysis.diagnose` keeps float32 sums for large foreign models.
    """

    def __init__(self, names: Sequence[str], dtype: torch.dtype = torch.float64) -> None:
        self.names = list(names)
        self.dtype = dtype
        self.count = 0
        self._sum: dict[str, Tensor] = {}
        self._sq: dict[str, float] = dict.fromkeys(self.names, 0.0)
        self._norms: dict[str, list[float]] = {n: [] for n in self.names}

    def add(self, grads: dict[str, Tensor]) -> None:
        for name in self.names:
            g = grads[name].detach().to(self.dtype)
            if name in self._sum:
                self._sum[name] += g
            else:
                self._sum[name] = g.clone()
            sq = float(g.double().pow(2).sum())
            self._sq[name] += sq
            self._norms[name].append(math.sqrt(sq))
        self.count += 1

    def mean(self, name: str) -> Tensor:
        return self._sum[name] / self.count

    def norm_of_mean(self, name: str) -> float:
        return float(torch.linalg.vector_norm(self.mean(name)))

    def mean_of_norms(self, name: str) -> float:
        return float(np.mean(self._norms[name]))

    def batch_norms(self, name: str) -> list[float]:
        return list(self._norms[name])

    def debiased_norm(self, name: str) -> float:
        m = self.count
        mean_sq = self.norm_of_mean(name) ** 2
        if m < 2:
            return math.sqrt(mean_sq)
        trace_cov = max(self._sq[name] - m * mean_sq, 0.0) / (m - 1)
        return math.sqrt(max(mean_sq - trace_cov / m, 0.0))


def ffn_weights(model: nn.Module) -> dict[str, tuple[str, int, int]]:
    """``name -> (stack, layer index from 1, 1 or 2)`` for every W^{1,l}, W^{2,l} of a normlab model."""
    out = {}
    for name, _ in model.named_parameters():
        m = FFN_WEIGHT.match(name)
        if m:
            out[name] = (m["stack"], int(m["layer"]) + 1, int(m["which"]))
    return out


def _loss_on(model: nn.Module, batch: TranslationBatch, label_smoothing: float, dtype: str) -> Tensor:
    device = next(model.parameters()).device
    batch = batch.to(device)
    with autocast(device, dtype):
        logits = model(batch.src, batch.tgt_in)
    return training_loss(logits, batch.tgt_out, batch.n_tokens, label_smoothing)


def expected_gradients(
    model: nn.Module,
    batches: Iterable[TranslationBatch],
    names: Sequence[str],
    *,
    mode: Mode = "train",
    label_smoothing: float = 0.1,
    seed: int = 0,
    dtype: str = "float32",
) -> tuple[GradientMoments, list[float]]:
    """Per-batch gradients of the parameters ``names`` over ``batches`` (the model is not updated).

    ``mode="train"`` keeps dropout on, as the paper measured with its training configuration (Section 3.4:
    "the general model and training configuration exactly follow Section 3.2", dropout 0.1); the dropout
    masks are drawn from ``torch.manual_seed(seed)``. ``mode="eval"`` measures the deterministic network of
    the theory. Only the gradients of ``names`` are computed (``torch.autograd.grad``), so no other
    parameter's weight gradient costs time. Returns the moments and the per-batch losses.
    """
    params = dict(model.named_parameters())
    inputs = [params[n] for n in names]
    was_training = model.training
    model.train(mode == "train")
    torch.manual_seed(seed)
    moments = GradientMoments(names)
    losses = []
    try:
        for batch in batches:
            loss = _loss_on(model, batch, label_smoothing, dtype)
            grads = torch.autograd.grad(loss, inputs)
            moments.add(dict(zip(names, grads)))
            losses.append(float(loss.detach()))
    finally:
        model.train(was_training)
    return moments, losses


def figure3ab(
    model: nn.Module,
    batches: Iterable[TranslationBatch],
    *,
    mode: Mode = "train",
    label_smoothing: float = 0.1,
    seed: int = 0,
    dtype: str = "float32",
) -> dict[str, Any]:
    """Figure 3(a,b): the scale of the expected gradient of every FFN weight of ``model``.

    Returns ``{"expected": {stack: {"w1": [per layer], "w2": [...]}}, "mean_of_norms": ..., "debiased": ...,
    "loss": mean training loss, "n_batches": M, "target_tokens": ...}``; lists run from layer 1 (next to the
    embeddings) to layer L (next to the output).
    """
    batches = list(batches)
    where = ffn_weights(model)
    names = sorted(where, key=lambda n: (where[n][0] != "encoder", where[n][1], where[n][2]))
    moments, losses = expected_gradients(
        model, batches, names, mode=mode, label_smoothing=label_smoothing, seed=seed, dtype=dtype
    )
    out: dict[str, Any] = {"expected": {}, "mean_of_norms": {}, "debiased": {}, "per_batch": {}}
    for name in names:
        stack, layer, which = where[name]
        for key, value in (
            ("expected", moments.norm_of_mean(name)),
            ("mean_of_norms", moments.mean_of_norms(name)),
            ("debiased", moments.debiased_norm(name)),
            ("per_batch", moments.batch_norms(name)),
        ):
            out[key].setdefault(stack, {}).setdefault(f"w{which}", []).append(value)
    out["loss"] = float(np.mean(losses))
    out["n_batches"] = len(batches)
    out["target_tokens"] = int(sum(b.n_tokens for b in batches))
    return out


THEOREM1_SLOPE = {"post": 0.0, "pre": -0.5}
"""Theorem 1's rate of ||dL/dW^{2,L}||_F in L (log-log slope): flat for Post-LN, L^{-1/2} for Pre-LN. The
theorem says nothing of the other schemes; their slopes are measured only."""


def _undefined_slope(depths: Sequence[int], seeds: Sequence[int], v: np.ndarray) -> str | None:
    """Why the log-log slope of the (depths, seeds) norms ``v`` is undefined, or None: a zero or non-finite norm."""
    bad = ~(np.isfinite(v) & (v > 0))
    if not bad.any():
        return None
    zero = int((v == 0).sum())
    return (f"||dL/dW^{{2,L}}||_F is {'0' if zero == bad.sum() else 'zero or non-finite'} at {int(bad.sum())} of "
            f"{v.size} (depth, seed) points, so its logarithm, and the slope, are undefined (a scheme whose branches "
            "are scaled by 0 at initialisation, as ReZero's alpha = 0, gives W^2 no gradient)")


def figure3cd(
    base: ModelConfig,
    *,
    depths: Sequence[int],
    schemes: Sequence[str],
    seeds: Sequence[int],
    batches_for_seed: Callable[[int], list[TranslationBatch]],
    mode: Mode = "train",
    label_smoothing: float = 0.1,
    dtype: str = "float32",
    device: torch.device | str = "cpu",
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Figure 3(c,d) and Theorem 1: ``||dL/dW^{2,L}||_F`` of the last FFN layer of the encoder and of the
    decoder of an L-L model at initialisation, for each depth, scheme and seed.

    ``schemes``: ``PLACEMENT`` or ``PLACEMENT/NORM`` (:func:`normlab.config.parse_scheme`; the paper's figure
    is ``("post", "pre")``); each sets ``placement`` and ``norm`` of ``base``. Seed ``s`` initialises the model
    (``torch.manual_seed(s)``; the models of one seed then share every weight matrix) and picks its batches
    ``batches_for_seed(s)``; the same batches serve every depth and scheme, so the comparisons across depth are
    paired. With several batches per seed the value is the norm of the mean gradient, as in Figure 3(a,b).

    Returns, per scheme (keyed as given) and stack: ``per_seed[depth index][seed index]``, ``mean``, ``std``
    (over seeds, ddof=1), the log-log fit of :func:`fit_loglog_slope` over all (depth, seed) points (``fit``),
    the paired one of :func:`fit_paired_loglog_slope` (``paired``: same slope, the standard error across
    seeds), and ``slope`` / ``slope_stderr`` (the paired fit's). When some norm is 0 or non-finite the slope is
    undefined: ``slope``, ``slope_stderr``, ``fit`` and ``paired`` are None and ``slope_undefined`` says why
    (None otherwise). ``slopes`` gathers, per scheme, both stacks' slopes and Theorem 1's (None where the
    theorem says nothing).
    """
    out: dict[str, Any] = {"depths": list(depths), "seeds": list(seeds), "theory_slope": dict(THEOREM1_SLOPE),
                           "schemes": list(schemes), "slopes": {}}
    for scheme in schemes:
        placement, norm = parse_scheme(scheme)
        res: dict[str, Any] = {s: {"per_seed": []} for s in ("encoder", "decoder")}
        losses = []
        for depth in depths:
            cfg = base.replace(encoder_layers=depth, decoder_layers=depth, placement=placement, norm=norm)
            row: dict[str, list[float]] = {"encoder": [], "decoder": []}
            for seed in seeds:
                torch.manual_seed(seed)
                model = Seq2Seq(cfg).to(device)
                profile_init(model, batches_for_seed(seed)[0], seed=seed)  # Admin's omega; no-op otherwise
                names = [f"{s}.layers.{depth - 1}.ffn.w2.weight" for s in ("encoder", "decoder")]
                moments, batch_losses = expected_gradients(
                    model, batches_for_seed(seed), names, mode=mode, label_smoothing=label_smoothing, seed=seed, dtype=dtype
                )
                for stack, name in zip(("encoder", "decoder"), names):
                    row[stack].append(moments.norm_of_mean(name))
                losses.extend(batch_losses)
                if progress:
                    progress(f"fig3cd {scheme} {depth}-{depth} seed {seed}: "
                             f"enc {row['encoder'][-1]:.4g} dec {row['decoder'][-1]:.4g}")
            for stack in row:
                res[stack]["per_seed"].append(row[stack])
        for stack in ("encoder", "decoder"):
            e = res[stack]
            v = np.asarray(e["per_seed"])  # (depths, seeds)
            e["mean"] = v.mean(1).tolist()
            e["std"] = (v.std(1, ddof=1) if v.shape[1] > 1 else np.zeros(len(depths))).tolist()
            e["slope_undefined"] = _undefined_slope(depths, seeds, v)
            if e["slope_undefined"]:
                e["fit"] = e["paired"] = e["slope"] = e["slope_stderr"] = None
            else:
                xs = np.repeat(np.asarray(depths, dtype=float), v.shape[1])
                e["fit"] = fit_loglog_slope(xs, v.ravel())
                e["paired"] = fit_paired_loglog_slope(depths, v)
                e["slope"], e["slope_stderr"] = e["paired"]["slope"], e["paired"]["stderr"]
        res["loss"] = float(np.mean(losses))
        out[scheme] = res
        out["slopes"][scheme] = {
            "theory": THEOREM1_SLOPE.get(placement) if norm == "layernorm" else None,
            **{s: {k: res[s][k] for k in ("slope", "slope_stderr", "slope_undefined")} for s in ("encoder", "decoder")},
        }
    return out


def fit_loglog_slope(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least-squares fit ``log y = a + b log x``: slope ``b``, its standard error, intercept ``a``.

    Over all (depth, seed) points rather than the means, so that the standard error reflects the spread
    across seeds; Theorem 1 predicts b = 0 (Post-LN) and b = -1/2 (Pre-LN)."""
    return _ols(np.log(np.asarray(x, dtype=float)), np.log(np.asarray(y, dtype=float)))


def fit_paired_loglog_slope(x: Sequence[float], y: np.ndarray) -> dict[str, Any]:
    """The log-log slope of each seed's curve (``y`` is (len(x), seeds)), their mean and its standard error.

    The design is paired: a seed fixes the initialisation and the batch at every depth, and most of the
    spread across seeds is a per-seed level (one seed's batch gives large gradients at every depth) that does
    not change the slope. The mean of the per-seed slopes equals the pooled fit's slope; its standard error
    (over seeds) is the one that fits this design."""
    y = np.asarray(y, dtype=float)
    slopes = [fit_loglog_slope(x, y[:, k])["slope"] for k in range(y.shape[1])]
    n = len(slopes)
    se = float(np.std(slopes, ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    return {"slope": float(np.mean(slopes)), "stderr": se, "per_seed": slopes, "n": n}


def fit_linear_slope(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Least-squares fit ``y = a + b x``: slope, standard error, intercept."""
    return _ols(np.asarray(x, dtype=float), np.asarray(y, dtype=float))


def _ols(x: np.ndarray, y: np.ndarray) -> dict[str, float]:
    n = len(x)
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    if n < 2 or sxx == 0.0:
        return {"slope": float("nan"), "stderr": float("nan"), "intercept": float(ym), "n": n}
    b = float(((x - xm) * (y - ym)).sum() / sxx)
    a = float(ym - b * xm)
    resid = y - (a + b * x)
    se = math.sqrt(float((resid**2).sum()) / (n - 2) / sxx) if n > 2 else float("nan")
    return {"slope": b, "stderr": se, "intercept": a, "n": n}
