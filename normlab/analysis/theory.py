"""The forward-pass theory of Xiong et al. (2020), measured: Lemma 2, Lemma 3 and the concentration property.

* Lemma 2 (Appendix C): at initialisation E||x^{post,5}_l||^2 = (3/2) d for every Post-LN layer, and
  (1 + l/2) d <= E||x^{pre}_l||^2 <= (1 + 3l/2) d for Pre-LN. :func:`lemma2_theory` measures it in the
  setting of the proof (Section 3.3): single head, W^Q = W^K = 0 (uniform attention), FFN width d, Xavier
  N(0, 1/d) weights, zero biases, Gaussian N(0, I) inputs fed straight into the stack's ``run_layers``.
  :func:`hidden_norms` measures the same quantities in a real model on real batches.

  Indexing: the Pre-LN bounds are proved by induction from E||x_0||^2 = d, the input embedding, one layer
  adding between d/2 and 3d/2 (Appendix C, eqs. 14-20). So here ``x^{pre}_l`` is the residual stream after
  l layers: l = 0 is the input, l = L is the input of the final LayerNorm (the paper's x_{L+1}).
* Lemma 3 (Appendix D): ||J_LN(x)||_2 = O(sqrt(d) / ||x||_2). :func:`lemma3` computes the Jacobian of
  ``F.layer_norm`` with autograd (not with the formula being tested) and its spectral norm, over inputs of
  scales spanning four decades, and fits the constant.
* Concentration (Definition 1, Section 3.4): Z >= 0 is (eps, delta)-bounded if P[(Z - EZ)/EZ > eps] <= delta.
  :func:`concentration_delta` gives the measured delta of samples of Z = ||x||^2; the paper found the
  hidden-state norms (0.1, 0.125)-bounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab.analysis.gradients import fit_loglog_slope
from normlab.config import ModelConfig, Placement
from normlab.data.batch import PAD, TranslationBatch
from normlab.device import autocast
from normlab.model import MaskedLM

__all__ = [
    "LEMMA2_POST",
    "lemma2_pre_bounds",
    "theory_config",
    "residual_norms",
    "lemma2_theory",
    "hidden_norms",
    "lemma3",
    "concentration_delta",
    "concentration_table",
]

LEMMA2_POST = 1.5
"""Lemma 2: E||x^{post,5}_l||^2 / d = 3/2 for every layer l."""


def lemma2_pre_bounds(l: int, start: float = 1.0, attention_sublayers: int = 1) -> tuple[float, float]:
    """Lemma 2's bounds on E||x^{pre}_l||^2 / d after l layers: (start + l/2, start + 3l/2), ``start`` being
    E||x_0||^2 / d (1 for the Gaussian inputs of the theory).

    The proof's step (Appendix C, eqs. 14-20): an attention sub-layer adds between 0 and d (its output is a
    mean of unit-scale LN outputs), the FFN adds d/2 (Lemma 1). A decoder layer has two attention sub-layers
    (self and cross), so the same induction gives an upper bound of start + 5l/2 there
    (``attention_sublayers=2``)."""
    return start + l / 2, start + (0.5 + attention_sublayers) * l


def theory_config(d: int, n_layers: int, placement: Placement | str, n_positions: int) -> ModelConfig:
    """The simplified setting of Section 3.3 as a ModelConfig (no dropout: the lemma is about the
    network at initialisation, not about a training-time sample of it)."""
    return ModelConfig(
        d_model=d, n_heads=1, d_ffn=d, encoder_layers=n_layers, decoder_layers=0, vocab_size=8,
        dropout=0.0, placement=Placement(placement), init="theory", max_positions=max(n_positions, 8),
    )  # fmt: skip


def residual_norms(record: dict[str, Any], placement: Placement | str, mask: Tensor | None = None) -> dict[str, list[Tensor]]:
    """Squared norms / d of the Lemma 2 quantities of one stack's record, as flat tensors of samples.

    ``"x5"``: x^{post,5}_l of Table 1 (the input of each layer's last LayerNorm in Post-LN; the FFN output in
    Pre-LN), layers 1..L. ``"stream"``: the residual stream after l = 0..L layers (the embedding, then each
    layer's output ``x_next``; for Pre-LN the last is the input of the final LayerNorm). ``mask`` (B, T) is
    True at the positions to keep (non-padding).
    """
    layers = record["layers"]
    d = layers[0]["table1"]["x"].shape[-1]

    def sq(t: Tensor) -> Tensor:
        v = t.detach().float().pow(2).sum(-1) / d
        return (v[mask] if mask is not None else v.reshape(-1)).cpu()

    stream = [sq(layers[0]["table1"]["x"])] + [sq(layer["table1"]["x_next"]) for layer in layers]
    return {"x5": [sq(layer["table1"]["x5"]) for layer in layers], "stream": stream}


def _summary(samples: Sequence[Tensor]) -> dict[str, list[float]]:
    return {
        "mean": [float(s.double().mean()) for s in samples],
        "std": [float(s.double().std()) if s.numel() > 1 else 0.0 for s in samples],
    }


def lemma2_theory(
    placement: Placement | str,
    *,
    d: int,
    n_layers: int,
    n_positions: int,
    batch_size: int,
    seeds: Sequence[int],
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Lemma 2 in the theory setting: for each seed, a fresh stack (``init="theory"``) and fresh inputs
    x ~ N(0, I_d) of shape (batch, n_positions, d); expectations are means over positions, inputs and seeds
    (the lemma's expectation is over the input and the initialisation).

    Returns per layer: for Post-LN ``x5`` (lemma: 1.5), for Pre-LN ``stream`` with its bounds, each with the
    standard deviation over positions and the per-seed means; ``samples`` holds the raw squared norms for the
    concentration table (dropped before writing JSON).
    """
    placement = Placement(placement)
    cfg = theory_config(d, n_layers, placement, n_positions)
    per_seed: list[dict[str, list[Tensor]]] = []
    for seed in seeds:
        torch.manual_seed(seed)
        stack = MaskedLM(cfg).encoder.to(device).eval()  # only the stack: its run_layers takes the inputs
        g = torch.Generator().manual_seed(10_000 + seed)
        x = torch.randn(batch_size, n_positions, d, generator=g).to(device)
        rec: dict[str, Any] = {}
        with torch.no_grad():
            stack.run_layers(x, record=rec)
        per_seed.append(residual_norms(rec, placement))
    key = "x5" if placement is Placement.POST else "stream"
    samples = [torch.cat([s[key][i] for s in per_seed]) for i in range(len(per_seed[0][key]))]
    out: dict[str, Any] = {
        "quantity": "E||x^{post,5}_l||^2/d, l=1..L" if key == "x5" else "E||x^{pre}_l||^2/d, l=0..L",
        "layers": list(range(1, n_layers + 1)) if key == "x5" else list(range(0, n_layers + 1)),
        **_summary(samples),
        "per_seed_mean": [[float(s[key][i].mean()) for s in per_seed] for i in range(len(samples))],
        "setting": {"d": d, "n_layers": n_layers, "n_positions": n_positions, "batch_size": batch_size,
                    "seeds": list(seeds), "init": "theory", "n_heads": 1, "d_ffn": d, "inputs": "N(0, I)"},
        "samples": samples,
    }
    _add_bounds(out, placement, start=1.0)
    return out


def _add_bounds(out: dict[str, Any], placement: Placement, start: float) -> None:
    if placement is Placement.POST:
        out["lemma"] = [LEMMA2_POST] * len(out["mean"])
        out["rel_dev"] = [m / LEMMA2_POST - 1 for m in out["mean"]]
    else:
        lo, hi = zip(*(lemma2_pre_bounds(l, start) for l in out["layers"]))
        out["lower"], out["upper"] = list(lo), list(hi)
        # l = 0 is the input itself (the bounds are equalities there): only l > 0 is the lemma's claim
        out["within"] = [None if l == 0 else bool(a <= m <= b) for l, a, m, b in zip(out["layers"], lo, out["mean"], hi)]
        out["bounds_start"] = start


@torch.no_grad()
def hidden_norms(
    model: nn.Module, batches: Iterable[TranslationBatch], *, dtype: str = "float32"
) -> dict[str, Any]:
    """Lemma 2's quantities in a real :class:`~normlab.model.Seq2Seq` (eval mode: no dropout) over real
    batches, at non-padding positions, for the encoder and the decoder.

    Returns per stack ``x5`` and ``stream`` summaries; the Pre-LN bounds are given twice: the paper's (from
    E||x_0||^2 = d) and ones started from the measured input norm (a real input embedding is not N(0, I):
    sqrt(d)-scaled token embeddings plus the sinusoidal table give E||x_0||^2 close to 1.5 d), the latter
    with the decoder's upper bound widened for its cross-attention (:func:`lemma2_pre_bounds`). In a real
    model Lemma 2's assumptions do not hold exactly (FFN width 2d and Xavier N(0, 2/(n_in + n_out)) give an
    FFN branch of about 0.44 d rather than d/2; multi-head attention is not uniform), so the measurement is
    the test of how far the theory carries.
    """
    placement = model.cfg.placement
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    acc: dict[str, dict[str, list[list[Tensor]]]] = {s: {"x5": [], "stream": []} for s in ("encoder", "decoder")}
    try:
        for batch in batches:
            batch = batch.to(device)
            with autocast(device, dtype):
                _, rec = model(batch.src, batch.tgt_in, return_intermediates=True)
            masks = {"encoder": batch.src.ne(PAD), "decoder": batch.tgt_in.ne(PAD)}
            for stack in acc:
                norms = residual_norms(rec[stack], placement, masks[stack])
                for key in ("x5", "stream"):
                    acc[stack][key].append(norms[key])
    finally:
        model.train(was_training)
    out: dict[str, Any] = {"placement": placement.value}
    for stack, parts in acc.items():
        res: dict[str, Any] = {}
        for key in ("x5", "stream"):
            samples = [torch.cat(col) for col in zip(*parts[key])]
            layers = list(range(1, len(samples) + 1)) if key == "x5" else list(range(len(samples)))
            entry: dict[str, Any] = {"layers": layers, **_summary(samples), "samples": samples}
            if key == "x5" and placement is Placement.POST:
                _add_bounds(entry, placement, 1.0)
            if key == "stream" and placement is not Placement.POST:
                _add_bounds(entry, placement, 1.0)
                # the decoder's cross-attention is one more attention sub-layer per layer
                k = 2 if stack == "decoder" else 1
                lo, hi = zip(*(lemma2_pre_bounds(l, entry["mean"][0], k) for l in layers))
                entry["lower_from_measured_input"], entry["upper_from_measured_input"] = list(lo), list(hi)
                entry["within_from_measured_input"] = [
                    None if l == 0 else bool(a <= m <= b) for l, a, m, b in zip(layers, lo, entry["mean"], hi)
                ]
            res[key] = entry
        out[stack] = res
    return out


def lemma3(
    *, d: int = 512, scales: Sequence[float] = tuple(10.0 ** (k / 2) for k in range(-2, 7)), per_scale: int = 4,
    eps: float = 1e-5, seed: int = 0,
) -> dict[str, Any]:
    """Lemma 3: the spectral norm of the LayerNorm Jacobian against sqrt(d)/||x||, in float64.

    For each scale s two families of inputs: *centred* x = s z and *offset* x = s (z + 0.5 * 1), z ~ N(0, I_d)
    (an offset mean is removed by LN, so ||J|| = sqrt(d)/||x - mean(x)||, above sqrt(d)/||x||: the constant of
    the O() depends on how far x is from mean zero). The Jacobian is ``torch.autograd.functional.jacobian``
    of ``F.layer_norm`` (gamma = 1, beta = 0, the model's eps) and its spectral norm
    ``torch.linalg.matrix_norm(ord=2)``. Reports per family the ratio ||J||_2 / (sqrt(d)/||x||): its
    geometric mean (the fitted constant C of ||J||_2 = C sqrt(d)/||x||), min and max, and the slope of
    log ||J||_2 against log ||x|| (the lemma's rate: -1).
    """
    g = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {"d": d, "eps": eps, "scales": list(scales), "families": {}}

    def ln(v: Tensor) -> Tensor:
        return F.layer_norm(v, (d,), eps=eps)

    for family, offset in (("centred", 0.0), ("offset", 0.5)):
        xnorm, bound, spec = [], [], []
        for s in scales:
            for _ in range(per_scale):
                z = torch.randn(d, generator=g, dtype=torch.float64)
                x = s * (z + offset)
                J = torch.autograd.functional.jacobian(ln, x, vectorize=True)
                spec.append(float(torch.linalg.matrix_norm(J, ord=2)))
                xnorm.append(float(x.norm()))
                bound.append(math.sqrt(d) / float(x.norm()))
        ratio = np.asarray(spec) / np.asarray(bound)

        out["families"][family] = {
            "x_norm": xnorm,
            "sqrt_d_over_x_norm": bound,
            "spectral_norm": spec,
            "fitted_constant": float(np.exp(np.log(ratio).mean())),
            "ratio_min": float(ratio.min()),
            "ratio_max": float(ratio.max()),
            "loglog_slope_vs_x_norm": fit_loglog_slope(xnorm, spec)["slope"],
        }
    allr = np.concatenate([
        np.asarray(f["spectral_norm"]) / np.asarray(f["sqrt_d_over_x_norm"]) for f in out["families"].values()
    ])
    out["fitted_constant"] = float(np.exp(np.log(allr).mean()))
    out["ratio_max"] = float(allr.max())
    return out


def concentration_delta(z: Tensor | np.ndarray, eps: float = 0.1) -> float:
    """Measured delta of Definition 1: the fraction of samples with (Z - EZ)/EZ > eps, EZ the sample mean."""
    z = torch.as_tensor(z, dtype=torch.float64).reshape(-1)
    mean = z.mean()
    return float(((z - mean) / mean > eps).double().mean())


def concentration_table(samples: Sequence[Tensor], eps: float = 0.1) -> dict[str, Any]:
    """delta for each layer's samples of squared norms, the worst layer's and the last layer's; also the
    two-sided fraction |Z - EZ|/EZ > eps (Definition 1 is one-sided)."""
    deltas = [concentration_delta(s, eps) for s in samples]
    two_sided = []
    for s in samples:
        z = s.double()
        two_sided.append(float(((z - z.mean()).abs() / z.mean() > eps).double().mean()))
    return {"eps": eps, "delta": deltas, "delta_max": max(deltas), "delta_last": deltas[-1],
            "two_sided": two_sided, "n_samples": [int(s.numel()) for s in samples]}
