"""Does this model need a learning-rate warm-up? A diagnosis at initialisation, for any ``nn.Module``.

Xiong et al. (2020) trace the warm-up that Post-LN Transformers need to their gradients at initialisation:
large near the output and decaying towards the input (Figure 3(a,b), Appendix F), because the LayerNorms
see inputs of constant scale, so nothing damps the gradient of the last layers. In a Pre-LN Transformer the
inputs of the LayerNorms grow with depth (Lemma 2) and the LayerNorm Jacobians, O(sqrt(d)/||x||) (Lemma 3),
scale the gradients down accordingly: the per-layer gradient profile is flat or falling, and no warm-up is
needed (Section 4). :func:`diagnose` measures both signals on any model and a loss closure:

1. the per-layer gradient profile: parameters grouped by layer (by default, the first integer path component
   after an ``nn.ModuleList``: ``encoder.layers.3.ffn.w2.weight`` -> (``encoder.layers``, 3),
   ``bert.encoder.layer.11.output.dense.weight`` -> (``bert.encoder.layer``, 11)), the Frobenius norm of each
   layer's gradient (of the mean gradient over ``steps`` calls of the closure), and per stack the ratio of
   the last layer's norm to the first layer's;
2. the growth of the LayerNorm input norms with depth: E||x||^2/d at the input of every ``nn.LayerNorm``
   (forward pre-hooks, registered for the call and removed after; the model itself is not modified), per
   layer, and the last/first ratio.

Verdict (calibrated on measurements, not a lookup of the placement): both signals point the same way in
the paper's account (Post-LN: gradients growing towards the output, r > 1, and LayerNorm inputs of constant
scale, G ~ 1; Pre-LN: a flat or falling profile and LayerNorm inputs growing with depth, G >> 1, which by
Lemma 3 damps the gradients by 1/sqrt(G)). The statistic combines them as evidence,

    S = r / sqrt(G)     (per stack; G = 1 where a stack shows no LayerNorm input; the largest S counts),

and warm-up is advised when S exceeds the threshold for the stack's depth (:func:`depth_threshold`; 0.45,
:data:`THRESHOLD`, at 12 layers; see "Depth" below). There is no verdict (None, "no verdict") when a stack's r is
undefined: a zero or non-finite gradient norm in its first or last layer, as in ReZero at initialisation, whose
alpha = 0 gives every weight in its layers a zero gradient (r = 0/0). The gradient ratio alone, estimated from a few batches,
is noisy for encoder-only models (one of the Post-LN masked LMs below has r = 0.88 against a Pre-LN
maximum of 0.82); the LayerNorm growth alone says nothing for a model without LayerNorms, and is fooled by
inputs far larger than the branches. Together they separate every calibration run by a wide margin.

Calibration: 12-layer models at initialisation, eval mode, 8 synthetic batches, seeds 0-5, d = 64, 4 heads,
FFN 128, vocabulary 1,000 (:func:`measure_calibration`); r, G and S of the stack with the largest S:

=====================================  =========  ===============  ============  ===============
model                                  placement  r                G             S = r / sqrt(G)
=====================================  =========  ===============  ============  ===============
normlab MaskedLM (batches 32 x 64)     post       0.88 - 3.68      0.90 - 1.19   0.80 - 3.54
normlab MaskedLM                       pre        0.32 - 0.48      7.5 - 8.8     0.11 - 0.16
normlab Seq2Seq 12-12 (512 tokens)     post       40.9 - 77.9      0.87 - 1.08   41.8 - 80.6
normlab Seq2Seq 12-12                  pre        0.48 - 0.82      8.1 - 11.0    0.15 - 0.25
torch.nn.TransformerEncoder + LM head  post       1.29 - 2.84      1.32 - 1.50   1.13 - 2.34
torch.nn.TransformerEncoder + LM head  pre        0.36 - 0.62      12.7 - 18.5   0.09 - 0.15
=====================================  =========  ===============  ============  ===============

The threshold is the geometric mean of the largest Pre-LN S (0.247) and the smallest Post-LN S (0.804),
0.446, rounded: 0.45.

Depth. One threshold calibrated at 12 layers is wrong for shallow stacks: with fewer layers Post-LN's gradient
ratio compounds less and Pre-LN's LayerNorm inputs grow less, so both placements' S move towards 1. Measured on
the same three kinds of model and seeds 0-2 (:data:`DEPTH_CALIBRATION`), the largest Pre-LN S and the smallest
Post-LN S are 0.971 / 0.947 at 2 layers (they overlap), 0.853 / 0.885 at 3, 0.712 / 0.848 at 4 and 0.461 /
0.597 at 6: with 0.45, every Pre-LN reference at 2-4 layers was "warm-up advised", and so were the Pre-LN models
of the standard stability sweep (3-3 layers, d = 64-256, S = 0.55-0.63 at seed 0). The threshold for L layers
is the geometric mean of the two at that depth, interpolated in log-log between the measured depths
(:func:`thresholds`); where they overlap (2 layers), an S inside the overlap gets no verdict and one outside it
gets the side it is on. Held out of this table: 8-layer references (seeds 0-2:
every Post-LN above, every Pre-LN below the interpolated 0.49; tests/test_diagnose.py checks seed 0) and the
sweep's cells (sweep.py holds diagnose against them).
:data:`CALIBRATION` holds seed 0's numbers; ``tests/test_diagnose.py`` re-measures them and checks that every
Post-LN model of seed 0 is above the threshold and every Pre-LN model below it. Limits: at 3 layers the two
placements' S are within 4% of each other (0.853 against 0.885), so a verdict there rests on little margin;
shallow Post-LN models have small ratios (Appendix F: about 1.5^((L-1)/2) in theory), and they do train
without warm-up more easily;
a Pre-LN model whose input embeddings dwarf its branches has LayerNorm inputs that barely grow and flat
gradients, and may be flagged. The verdict follows the measurement, not the architecture's name.

Held against the stability sweep (``normlab sweep --scale standard``, docs/results/sweep-quick: 3-3 layers, 300
updates of 1,024 tokens at a constant learning rate, widths 64-256). diagnose tells the placements apart there:
S = 1.9-2.8 for Post-LN, 0.55-0.69 for Pre-LN and 0.36-0.53 for Peri-LN (initialisation seeds 0-2, every width),
against the 3-layer threshold 0.87. The sweep's ground truth is "is the no-warm-up frontier below a warm-up arm's?".

1. With the paper's share of the run as the only warm-up (36 of 300 updates; measured 2026-11-24, fp32 and bf16,
   two Post-LN seeds), the sweep said "not needed" for Post-LN at all three widths: the warm-up moved no
   frontier, and diagnose was wrong on 3 of the 5 pairs the sweep decided. That warm-up is shorter than the
   horizon of Adam's second-moment average, 1/(1 - beta2) = 50 updates at beta2 = 0.98 (the paper's 4,000 updates
   were 80 times it).
2. With a second warm-up arm over 2/(1 - beta2) = 100 updates (Ma & Yarats 2021's untuned rule for Adam, its
   length fixed from that rule before any run of it; measured 2026-11-24, bf16, two seeds of Post-LN and Pre-LN),
   Post-LN's seed-mean frontier rose one grid step (x2.15) at every width (2.15e-3 -> 4.64e-3, 1e-3 -> 2.15e-3,
   4.64e-4 -> 1e-3) and Pre-LN's did not move (4.64e-3 and 2.15e-3 at d = 128 and 256; d = 64 is the top of the
   grid in every arm); per seed, 4 of Post-LN's 6 seed x width frontiers rose and none fell, 1 of Pre-LN's 4 rose
   and none fell. diagnose agrees on all 5 decided pairs. The gain is not the warm-up's lower mean learning
   rate (0.83 lr_max over the run): one step above the no-warm-up frontier, Post-LN's warm-up runs ended 0.23-0.28
   nats below the no-warm-up curve read at 0.83 lr.

Both readings above took "frontier" to be the largest learning rate within 0.1 nats of a curve's best final loss.
Issue 40 showed that this band (now named the LR tolerance) is not a stability boundary: none of those runs was
unstable, so under the stability edge (experiments/sweep.py) every edge is censored at the grid's top, no pair is
decided, and the 5/5 above is agreement with the LR tolerance, which any threshold between the two clusters of S
(or the rule "Post-LN needs warm-up") also gets. diagnose is not validated until the edge search decides pairs;
:func:`held_out_agreement` is how it will be scored then (calibrated on some cells, scored on others).

The rule is unchanged: the disagreement came from a ground truth whose only warm-up was too short for the
effect, not from S. The 8-layer references stay held out of the threshold's calibration, and the sweep's cells
never entered it. What diagnose does with this evidence: when every flagged stack has :data:`SHALLOW_LAYERS` or
fewer layers (where the calibration's margin is smallest), the verdict carries :data:`SHALLOW_NOTE`, the
measurement, which also says how long a warm-up it took. Still open: a depth axis (``normlab sweep --set layers=6
--set seeds=2``), where the paper's own models sit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from normlab.analysis.gradients import GradientMoments, fit_linear_slope, training_loss
from normlab.analysis.sources import (
    synthetic_classification_batches,
    synthetic_lm_batches,
    synthetic_mlm_batches,
    synthetic_translation_batches,
)
from normlab.config import ModelConfig
from normlab.data.batch import PAD
from normlab.files import strict_json
from normlab.model import NORM_TYPES, build_model, profile_init

__all__ = [
    "THRESHOLD",
    "held_out_agreement",
    "score",
    "measure_calibration",
    "calibration_diagnoses",
    "TorchEncoderLM",
    "CALIBRATION",
    "LayerKey",
    "modulelist_grouping",
    "LayerProfile",
    "Diagnosis",
    "diagnose",
    "diagnose_config",
    "verdict",
    "SHALLOW_LAYERS",
    "SHALLOW_NOTE",
    "SEEN_IN_DESIGN",
    "score_verdict",
]

LayerKey = tuple[str, int]
"""(stack, layer index from 0), e.g. ("decoder.layers", 5)."""

CALIBRATION: dict[str, dict[str, tuple[float, float]]] = {
    # model -> placement -> (r, G) of seed 0, as measure_calibration(seed=0) returns them
    "mlm": {"post": (1.7367, 0.9592), "pre": (0.4099, 7.4796)},
    "seq2seq": {"post": (45.4423, 0.9391), "pre": (0.4811, 10.9382)},
    "torch": {"post": (1.2924, 1.3162), "pre": (0.3893, 12.7167)},
}
"""Measured calibration numbers (see the module docstring); re-measured by tests/test_diagnose.py."""

THRESHOLD = 0.45
"""Warm-up is advised when S = r / sqrt(G) exceeds this in some stack of 12 layers (calibration: module
docstring); other depths use :func:`thresholds`."""

DEPTH_CALIBRATION: dict[int, tuple[float, float]] = {
    # layers -> (the largest S of a Pre-LN reference, the smallest S of a Post-LN reference): the three kinds of
    # calibration models (normlab MaskedLM, Seq2Seq, torch.nn encoder LM; d = 64), eval mode, 8 batches; seeds
    # 0-2 (12 layers: seeds 0-5, the docstring's table). Measured with calibration_diagnoses(layers=L, seed=k).
    2: (0.971, 0.947),  # overlap: torch.nn Pre-LN seed 2 above torch.nn Post-LN seed 1
    3: (0.853, 0.885),
    4: (0.712, 0.848),
    6: (0.461, 0.597),
    12: (0.247, 0.804),
}
"""The calibration envelope per depth (:func:`thresholds`). At 12 layers it gives the threshold 0.45 above;
shallower stacks have less room for either signal (Post-LN's gradient ratio compounds over fewer layers,
Pre-LN's LayerNorm inputs grow over fewer), so the two placements' S move towards each other and below ~4
layers they meet."""


SHALLOW_LAYERS = 3
"""A "warm-up advised" verdict whose flagged stacks all have this many layers or fewer carries :data:`SHALLOW_NOTE`
(measured at 3 layers; 2-layer stacks are shallower still and get it too)."""

SHALLOW_NOTE = (
    "Measured on translation models at 3-3 layers (normlab sweep --scale quick --set seeds=5: 300 updates, five "
    "seeds, each stability edge bisected to 1.2x): a linear warm-up over 2/(1 - beta2) updates (100 with Adam's "
    "beta2 = 0.98) "
    "raised the largest stable learning rate in 5 of 5 seeds at d = 64 and 128, Post-LN's and Pre-LN's alike; what "
    "sets Post-LN apart is that without warm-up its edge is about 30x lower (about 2e-3 at d = 64 and 1.2e-3 at "
    "d = 128, near the learning rates one trains at). A warm-up of 36 updates, shorter than Adam's 1/(1 - beta2) "
    "horizon, raised it in too few seeds to tell: a warm-up much shorter than 2/(1 - beta2) updates may not help."
)
"""Held against the sweep (module docstring, "Held against the stability sweep"): the measurement behind a verdict
on a shallow stack, where the calibration's margin is smallest, and the warm-up length it took."""


def thresholds(layers: int) -> tuple[float, float]:
    """(lo, hi) for a stack of ``layers`` layers: the largest Pre-LN and the smallest Post-LN S of the calibration
    models at that depth (:data:`DEPTH_CALIBRATION`), interpolated linearly in log S against log L between the
    measured depths, and held at the end values outside them. The verdict's threshold is sqrt(lo x hi) where
    lo < hi; where lo >= hi the references overlap and an S in [hi, lo] gets no verdict."""
    depths = sorted(DEPTH_CALIBRATION)
    if layers <= depths[0] or layers >= depths[-1]:
        return DEPTH_CALIBRATION[depths[0] if layers <= depths[0] else depths[-1]]
    below = max(d for d in depths if d <= layers)
    above = min(d for d in depths if d >= layers)
    if below == above:
        return DEPTH_CALIBRATION[below]
    t = (math.log(layers) - math.log(below)) / (math.log(above) - math.log(below))
    (lo0, hi0), (lo1, hi1) = DEPTH_CALIBRATION[below], DEPTH_CALIBRATION[above]
    return math.exp((1 - t) * math.log(lo0) + t * math.log(lo1)), math.exp((1 - t) * math.log(hi0) + t * math.log(hi1))


def depth_threshold(layers: int) -> float | None:
    """The threshold on S for a stack of ``layers`` layers: sqrt(lo x hi) of :func:`thresholds` (0.45 at 12
    layers, rounded as THRESHOLD), or None where the calibration models overlap (lo >= hi)."""
    lo, hi = thresholds(layers)
    if lo >= hi:
        return None
    return THRESHOLD if layers >= max(DEPTH_CALIBRATION) else math.sqrt(lo * hi)


SEEN_IN_DESIGN = frozenset({("translation", 3, "post"), ("translation", 3, "pre"), ("translation", 3, "peri")})
"""(task, layers, scheme) of the sweep cells whose S was in view when the rule took its depth axis: the
depth-dependent threshold (commit 8715bac, 2026-11-24) came after the 12-layer threshold 0.45 had called the
quick sweep's 3-3 Pre-LN models (S 0.55-0.63) warm-up advised. The thresholds' values come from the reference
models alone (:data:`DEPTH_CALIBRATION`), but the choice to have a depth axis was made with these cells in view,
and diagnose measures them at seed 0 whichever sweep holds them (the same S each time), so a held-out score
reports them apart (normlab.experiments.heldout; found in review on 2026-11-27)."""


def score_verdict(s: float | None, layers: int) -> tuple[bool | None, float | None]:
    """The shipped rule on one stack's S at its depth, as :func:`diagnose` applies it when no threshold is given:
    (warm-up advised, the threshold applied); (None, None) without an S or inside the references' overlap."""
    if s is None:
        return None, None
    lo, hi = thresholds(layers)
    t = depth_threshold(layers)
    if t is not None:
        return s > t, t
    if s > lo:
        return True, lo
    if s < hi:
        return False, hi
    return None, None


def score(grad_ratio: float | None, ln_growth: float | None) -> float | None:
    """S = r / sqrt(G): the last/first gradient-norm ratio counted against the LayerNorm-input growth; None when
    r is undefined (:attr:`LayerProfile.grad_ratio`)."""
    if grad_ratio is None:
        return None
    return grad_ratio / math.sqrt(ln_growth if ln_growth and ln_growth > 0 else 1.0)


def modulelist_grouping(model: nn.Module) -> Callable[[str], LayerKey | None]:
    """The default grouping: a parameter (or module) name belongs to layer ``(prefix, i)`` when ``prefix`` is
    an ``nn.ModuleList`` of the model and ``i`` the integer that follows it in the name (the outermost such
    list wins); names outside any ModuleList (embeddings, heads, final norms) belong to no layer."""
    lists = {name for name, m in model.named_modules() if isinstance(m, nn.ModuleList)}

    def group(name: str) -> LayerKey | None:
        parts = name.split(".")
        for i in range(1, len(parts)):
            if parts[i].isdigit() and ".".join(parts[:i]) in lists:
                return ".".join(parts[:i]), int(parts[i])
        return None

    return group


@dataclasses.dataclass
class LayerProfile:
    """One stack's per-layer numbers, layers in index order (input side first)."""

    stack: str
    layers: list[int]
    grad_norm: list[float]  # Frobenius norm of the layer's (mean) gradient, all its parameters together
    ln_input: list[float | None]  # mean E||x||^2/d over the layer's LayerNorm inputs (None: no LayerNorm)

    @property
    def undefined(self) -> str | None:
        """Why r = last/first is undefined, or None: a zero or non-finite gradient norm in the first or the last
        layer. ReZero at initialisation is the case met in practice: every branch is scaled by alpha = 0, so
        every weight inside a layer has a zero gradient (only the alphas have one) and r would be 0/0."""
        ends = {"first": self.grad_norm[0], "last": self.grad_norm[-1]}
        bad = [f"the {k} layer's gradient norm is {v:g}" for k, v in ends.items() if not math.isfinite(v) or v <= 0]
        return " and ".join(bad) if bad else None

    @property
    def grad_ratio(self) -> float | None:
        """r: the last layer's gradient norm over the first's; None when :attr:`undefined`."""
        if self.undefined:
            return None
        return self.grad_norm[-1] / self.grad_norm[0]

    @property
    def grad_log_slope(self) -> float | None:
        """Slope of log(gradient norm) against the layer index (Appendix F: 0.5 ln 1.5 = 0.2 for Post-LN); None
        with fewer than two layers or a zero or non-finite norm."""
        if len(self.layers) < 2 or not all(math.isfinite(g) and g > 0 for g in self.grad_norm):
            return None
        return fit_linear_slope(self.layers, np.log(self.grad_norm))["slope"]

    @property
    def ln_growth(self) -> float | None:
        """G: E||x||^2/d at the last layer's LayerNorm inputs over the first layer's (None: no LayerNorm)."""
        vals = [v for v in self.ln_input if v is not None]
        if len(vals) < 2 or vals[0] <= 0:
            return None
        return vals[-1] / vals[0]

    @property
    def score(self) -> float | None:
        """S = r / sqrt(G), the verdict's statistic; None when r is undefined."""
        return score(self.grad_ratio, self.ln_growth)


@dataclasses.dataclass
class Diagnosis:
    """What :func:`diagnose` found; ``summary()`` prints it, ``to_dict()`` is JSON-ready."""

    profiles: list[LayerProfile]
    other_grad_norm: float  # parameters in no layer (embeddings, heads, final norms)
    loss: float
    steps: int
    warmup_advised: bool | None  # None: no verdict (no layered structure, or a ratio r is undefined)
    reason: str
    threshold: float | None = THRESHOLD  # the threshold the verdict applied (the decisive stack's depth's)

    @property
    def decisive(self) -> LayerProfile | None:
        """The stack with the largest S (the one the verdict rests on); None when no stack has a defined S."""
        layered = [p for p in self.profiles if len(p.layers) > 1 and p.score is not None]
        return max(layered, key=lambda p: p.score) if layered else None

    @property
    def score(self) -> float | None:
        return self.decisive.score if self.decisive else None

    @property
    def grad_ratio(self) -> float | None:
        """The largest defined last/first gradient-norm ratio over the stacks (None: none is defined)."""
        return max((p.grad_ratio for p in self.profiles if len(p.layers) > 1 and p.grad_ratio is not None),
                   default=None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready and strict: an undefined or non-finite number is None (null), never NaN or Infinity."""
        return strict_json({  # strict JSON: an undefined ratio is null
            "warmup_advised": self.warmup_advised,
            "reason": self.reason,
            "threshold": self.threshold,
            "score": self.score,
            "grad_ratio": self.grad_ratio,
            "decisive_stack": self.decisive.stack if self.decisive else None,
            "loss": self.loss,
            "steps": self.steps,
            "other_grad_norm": self.other_grad_norm,
            "stacks": [
                {**dataclasses.asdict(p), "grad_ratio": p.grad_ratio, "grad_ratio_undefined": p.undefined,
                 "grad_log_slope": p.grad_log_slope, "ln_growth": p.ln_growth, "score": p.score}
                for p in self.profiles
            ],
        })

    def summary(self) -> str:
        lines = [f"loss at initialisation {self.loss:.4f} (mean of {self.steps} evaluations)"]
        for p in self.profiles:
            lines.append(f"{p.stack}: {len(p.layers)} layers")
            lines.append("  layer   ||grad||_F   LN input E||x||^2/d")
            for i, g, n in zip(p.layers, p.grad_norm, p.ln_input):
                lines.append(f"  {i:5d}   {g:10.4g}   {'-' if n is None else f'{n:.3f}'}")
            growth = "n/a" if p.ln_growth is None else f"{p.ln_growth:.2f}x"
            if p.grad_ratio is None:
                lines.append(f"  gradient last/first r undefined ({p.undefined}); "
                             f"LayerNorm input growth last/first G = {growth}; S undefined")
            else:
                slope = "n/a" if p.grad_log_slope is None else f"{p.grad_log_slope:.3f}"
                lines.append(f"  gradient last/first r = {p.grad_ratio:.3g} (log-slope {slope} per layer); "
                             f"LayerNorm input growth last/first G = {growth}; S = r/sqrt(G) = {p.score:.3g}")
        lines.append(f"parameters outside the layers: ||grad||_F {self.other_grad_norm:.4g}")
        word = {True: "WARM-UP ADVISED", False: "no warm-up needed", None: "no verdict"}[self.warmup_advised]
        lines.append(f"verdict: {word}. {self.reason}")
        return "\n".join(lines)


def _stack_verdict(p: LayerProfile, threshold: float | None) -> tuple[bool | None, str, float | None]:
    """One stack's verdict: (advised, the rule applied in words, the threshold applied or None)."""
    n = len(p.layers)
    if threshold is not None:
        return p.score > threshold, f"the threshold {threshold:g} (given)", threshold
    lo, hi = thresholds(n)
    t = depth_threshold(n)
    advised, applied = score_verdict(p.score, n)  # the rule; the words below say which branch of it applied
    if t is not None:
        return advised, (f"the threshold {t:.3g} for {n} layers (between the largest Pre-LN S, {lo:.3g}, and the "
                             f"smallest Post-LN S, {hi:.3g}, of the calibration models at that depth)"), applied  # fmt: skip
    overlap = f"at {n} layers the calibration models overlap (Pre-LN S up to {lo:.3g}, Post-LN S from {hi:.3g})"
    if advised is True:
        return True, f"every Pre-LN calibration model ({overlap})", applied
    if advised is False:
        return False, f"every Post-LN calibration model ({overlap})", applied
    return None, overlap, None


def verdict(profiles: Sequence[LayerProfile], threshold: float | None = None) -> tuple[bool | None, str]:
    """The decision rule of the module docstring, with the evidence in words. ``threshold``: one threshold on S
    for every depth; None (the default): the depth's own, from :data:`DEPTH_CALIBRATION`."""
    return _verdict(profiles, threshold)[:2]


def _verdict(profiles: Sequence[LayerProfile], threshold: float | None) -> tuple[bool | None, str, float | None]:
    layered = [p for p in profiles if len(p.layers) > 1]
    if not layered:
        # both readers' remedies: a command-line user has no group_fn (a new user's one-layer config was told to
        # pass it), a Python caller's model may number its layers otherwise
        return None, ("no stack of two or more layers was found: the profile compares a stack's first and last "
                      "layers (normlab diagnose: a model of 2 or more layers, e.g. --set encoder_layers=2 --set "
                      "decoder_layers=2; diagnose() on your own model: pass group_fn to say how parameters map to "
                      "layers)"), None
    undefined = [p for p in layered if p.grad_ratio is None]
    if undefined:
        # a 0/0 ratio is no evidence either way: ReZero at init (alpha = 0) gives zero gradients to every weight in
        # its layers, and reading that as "flat" or "growing" would be a guess, not a measurement
        where = "; ".join(f"in {p.stack!r} {p.undefined}" for p in undefined)
        return None, (f"the gradient ratio r = last/first is undefined ({where}), so S = r/sqrt(G) cannot be "
                      "measured at these parameters. A scheme whose branches are switched off at initialisation "
                      "(ReZero: alpha = 0) has zero gradients in every layer until its scalars move; this "
                      "diagnosis at initialisation cannot judge it."), None
    judged = [(p, *_stack_verdict(p, threshold)) for p in layered]
    advised_stacks = [j for j in judged if j[1] is True]
    open_stacks = [j for j in judged if j[1] is None]
    # one stack that looks like Post-LN is enough; otherwise a stack the calibration cannot judge leaves no verdict
    worst, advised, rule, applied = max(advised_stacks or open_stacks or judged, key=lambda j: j[0].score)
    growth = worst.ln_growth
    direction = "grows" if worst.grad_ratio > 1 else "does not grow"
    # G's words say what G is, not which placement it looks like: a shallow Pre-LN stack's inputs grow little
    # (Lemma 2: E||x_l||^2 ~ (1 + l/2) d, under 2x over 3 layers), and "the Post-LN pattern" said of G < 2 beside
    # a verdict of no warm-up contradicted it (found by a new user, 2026-11-27). 1.5: above every Post-LN
    # calibration model's G (0.94-1.32, CALIBRATION), below a 3-layer Pre-LN stack's. S = r/sqrt(G) decides.
    if growth is None:
        mechanism = "no LayerNorm inputs were seen in its layers (G = 1)"
    elif growth < 1.5:
        mechanism = (f"its LayerNorm inputs keep their scale with depth (G = {growth:.2f}), so the LayerNorms do not "
                     "damp the upper layers' gradients (the Post-LN pattern of Lemma 2)")
    else:
        mechanism = (f"its LayerNorm inputs grow {growth:.2f}x from the first layer to the last, which damps the upper "
                     "layers' gradients by about 1/sqrt(G) (Lemma 3; Pre-LN's inputs grow with depth, Lemma 2)")
    where = {True: "above", False: "below", None: "inside the overlap:"}[advised]
    reason = (f"In {worst.stack!r} the gradient norm {direction} towards the output (last/first r = "
              f"{worst.grad_ratio:.3g}) and {mechanism}: S = r/sqrt(G) = {worst.score:.3g} is {where} {rule}.")
    pattern = worst.grad_ratio > 1 and (growth is None or growth < 1.5)  # Lemma 2's: growing and undamped
    if advised and pattern:
        reason += " Large, undamped gradients near the output make large early steps unstable: use a learning-rate warm-up."
    elif advised:
        # S above the threshold without the pattern the threshold stands for (a new user's finding, 2026-11-28: a
        # 12-layer Post-LN LM read "does not grow ... damps ... Large, undamped gradients")
        reason += (" The pattern the threshold stands for (gradients growing towards the output, undamped) is not "
                   "what this stack shows: the verdict is the side of the calibration's threshold S falls on, not "
                   "the paper's mechanism seen here; read it as uncertain, and measure the edge (normlab sweep) if "
                   "it matters.")
    elif advised is None:
        reason += " This diagnosis cannot tell the two placements apart at this depth; no verdict."
    gap = thresholds(len(worst.layers))
    if advised is not None and threshold is None and gap[0] < worst.score < gap[1]:
        reason += (f" S lies in the gap between the calibration's Pre-LN models (up to {gap[0]:.3g}) and Post-LN "
                   f"models (from {gap[1]:.3g}) at this depth, where no calibration model is: an uncertain verdict.")
    if advised and all(len(j[0].layers) <= SHALLOW_LAYERS for j in advised_stacks):  # no deeper stack is flagged
        reason += " " + SHALLOW_NOTE
    return advised, reason, applied


def diagnose(
    model: nn.Module,
    loss_closure: Callable[[], Tensor],
    *,
    steps: int = 1,
    group_fn: Callable[[str], LayerKey | None] | None = None,
    norm_types: tuple[type[nn.Module], ...] = (nn.LayerNorm,),
    threshold: float | None = None,
) -> Diagnosis:
    """Diagnose ``model`` at its current parameters (normally: at initialisation).

    ``loss_closure()`` runs the model on a batch and returns a scalar loss; it is called ``steps`` times (it
    may draw a new batch each time) and the gradients are averaged (the norm of the mean, as in Figure 3).
    The model's train/eval mode is left as the caller set it. ``group_fn(name) -> (stack, index) | None``
    maps parameter and module names to layers (default :func:`modulelist_grouping`). ``norm_types``: the
    normalisation modules whose inputs are measured (add e.g. an RMSNorm class).
    """
    group = group_fn or modulelist_grouping(model)
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    names = [n for n, _ in params]
    moments = GradientMoments(names, dtype=torch.float32)
    ln_stats: dict[str, list[float]] = {}

    def hook_for(name: str, d: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            x = args[0].detach().float()
            ln_stats.setdefault(name, []).append(float(x.pow(2).sum(-1).mean()) / d)

        return hook

    handles = []
    for name, module in model.named_modules():
        if isinstance(module, norm_types):
            shape = getattr(module, "normalized_shape", None)
            d = int(np.prod(shape)) if shape else getattr(module, "weight").numel()
            handles.append(module.register_forward_pre_hook(hook_for(name, d)))
    losses = []
    try:
        for _ in range(steps):
            loss = loss_closure()
            grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
            moments.add({n: (g if g is not None else torch.zeros_like(p)) for (n, p), g in zip(params, grads)})
            losses.append(float(loss.detach()))
    finally:
        for h in handles:
            h.remove()

    sq: dict[LayerKey, float] = {}
    other = 0.0
    for n in names:
        v = moments.norm_of_mean(n) ** 2
        key = group(n)
        if key is None:
            other += v
        else:
            sq[key] = sq.get(key, 0.0) + v
    ln_by_layer: dict[LayerKey, list[float]] = {}
    for name, vals in ln_stats.items():
        key = group(name)
        if key is not None:
            ln_by_layer.setdefault(key, []).append(float(np.mean(vals)))
    profiles = []
    for stack in dict.fromkeys(k[0] for k in sq):
        layers = sorted(i for s, i in sq if s == stack)
        profiles.append(LayerProfile(
            stack=stack, layers=layers, grad_norm=[math.sqrt(sq[(stack, i)]) for i in layers],
            ln_input=[float(np.mean(ln_by_layer[(stack, i)])) if (stack, i) in ln_by_layer else None for i in layers],
        ))  # fmt: skip
    advised, reason, applied = _verdict(profiles, threshold)
    return Diagnosis(profiles=profiles, other_grad_norm=math.sqrt(other), loss=float(np.mean(losses)), steps=steps,
                     warmup_advised=advised, reason=reason, threshold=applied)


def _cycle(batches: Sequence[Any]) -> Iterable[Any]:
    while True:
        yield from batches


def diagnose_config(
    cfg: Any,
    task: str = "translation",
    *,
    steps: int = 4,
    seed: int = 0,
    mode: str = "eval",
    max_tokens: int = 1024,
    device: torch.device | str = "cpu",
    threshold: float | None = None,
) -> Diagnosis:
    """:func:`diagnose` for a normlab :class:`~normlab.config.ModelConfig` at initialisation (seed ``seed``),
    on synthetic batches of its task (:mod:`normlab.analysis.sources`) with the task's training loss:
    label-smoothed cross entropy per target token (translation), cross entropy over the masked positions
    (mlm), next-token cross entropy per target (lm), cross entropy per sentence (classification)."""
    import torch.nn.functional as F

    torch.manual_seed(seed)
    model = build_model(cfg, task).to(device)
    model.train(mode == "train")
    if task == "translation":
        batches = synthetic_translation_batches(steps, vocab_size=cfg.vocab_size, max_tokens=max_tokens, seed=seed)
    elif task == "mlm":
        batches = synthetic_mlm_batches(steps, vocab_size=cfg.vocab_size, batch_size=32, length=min(64, cfg.max_positions), seed=seed)
    elif task == "lm":  # the masked LM's batch shape, every position a target
        batches = synthetic_lm_batches(steps, vocab_size=cfg.vocab_size, batch_size=32, length=min(64, cfg.max_positions), seed=seed)
    else:
        batches = synthetic_classification_batches(
            steps, vocab_size=cfg.vocab_size, num_classes=cfg.num_classes, length=min(32, cfg.max_positions), seed=seed
        )

    profile_init(model, batches[0], seed=seed)  # Admin's omega is part of its initialisation (no-op otherwise)
    it = iter(_cycle([b.to(device) for b in batches]))

    def closure() -> Tensor:
        b = next(it)
        if task == "translation":
            return training_loss(model(b.src, b.tgt_in), b.tgt_out, b.n_tokens)
        if task == "mlm":
            select = b.targets.ne(PAD)
            return F.cross_entropy(model(b.tokens, b.segments, select=select), b.targets[select])
        if task == "lm":  # next-token cross entropy per target
            return F.cross_entropy(model(b.tokens).flatten(0, 1).float(), b.targets.flatten(), ignore_index=PAD)
        return F.cross_entropy(model(b.tokens, b.segments), b.labels)

    # every norm function a normlab model may hold (ModelConfig.norm), not only nn.LayerNorm
    return diagnose(model, closure, steps=steps, threshold=threshold, norm_types=NORM_TYPES)


class TorchEncoderLM(nn.Module):
    """A masked LM around ``torch.nn.TransformerEncoder`` (PyTorch's own layers and initialisation; a final
    LayerNorm for ``norm_first=True``, as Pre-LN needs): the foreign model of the calibration and tests."""

    def __init__(self, *, d_model: int, n_heads: int, d_ffn: int, n_layers: int, vocab_size: int, norm_first: bool,
                 dropout: float = 0.1) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)  # N(0, 1): unit-scale inputs, as Section 3.3 assumes
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ffn, dropout=dropout, batch_first=True, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(
            layer, n_layers, norm=nn.LayerNorm(d_model) if norm_first else None, enable_nested_tensor=False
        )
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def calibration_diagnoses(*, layers: int = 12, steps: int = 8, seed: int = 0) -> dict[str, dict[str, Diagnosis]]:
    """The diagnoses behind :data:`CALIBRATION`: for each model kind (``mlm``, ``seq2seq``, ``torch``) and
    placement, :func:`diagnose` at initialisation, eval mode, ``steps`` synthetic batches, seed ``seed``."""
    import torch.nn.functional as F

    out: dict[str, dict[str, Diagnosis]] = {"mlm": {}, "seq2seq": {}, "torch": {}}
    for placement in ("post", "pre"):
        cfg = ModelConfig(d_model=64, n_heads=4, d_ffn=128, encoder_layers=layers, decoder_layers=layers,
                          vocab_size=1000, placement=placement, max_positions=128)
        out["mlm"][placement] = diagnose_config(cfg, "mlm", steps=steps, seed=seed)
        out["seq2seq"][placement] = diagnose_config(cfg, "translation", steps=steps, seed=seed, max_tokens=512)
        torch.manual_seed(seed)
        model = TorchEncoderLM(d_model=64, n_heads=4, d_ffn=128, n_layers=layers, vocab_size=1000,
                               norm_first=placement == "pre").eval()
        batches = iter(_cycle(synthetic_mlm_batches(steps, vocab_size=1000, batch_size=32, length=64, seed=seed)))

        def closure(model: nn.Module = model) -> Tensor:
            b = next(batches)
            select = b.targets.ne(PAD)
            return F.cross_entropy(model(b.tokens)[select], b.targets[select])

        out["torch"][placement] = diagnose(model, closure, steps=steps)
    return out


def measure_calibration(*, layers: int = 12, steps: int = 8, seed: int = 0) -> dict[str, dict[str, tuple[float, float]]]:
    """Re-measure :data:`CALIBRATION`: (r, G) of the stack with the largest S for each model and placement."""

    def stats(d: Diagnosis) -> tuple[float, float]:
        worst = d.decisive
        assert worst is not None
        return round(worst.grad_ratio, 4), round(worst.ln_growth or 1.0, 4)

    runs = calibration_diagnoses(layers=layers, steps=steps, seed=seed)
    return {model: {p: stats(d) for p, d in by_p.items()} for model, by_p in runs.items()}


def held_out_agreement(
    scores: Mapping[Any, float | None],
    truth: Mapping[Any, bool | None],
    calibrate: Iterable[Any],
    evaluate: Iterable[Any],
    *,
    placement_of: Callable[[Any], str] = lambda key: str(key[0]).split("/")[0],
) -> dict[str, Any]:
    """diagnose's threshold on S calibrated on one set of cells and scored on another (issue 40: on the sweep's
    own cells every threshold between the two clusters scored the same, so agreement there validates nothing).

    ``scores``: S per cell (a key such as (scheme, depth, width)); ``truth``: the sweep's ground truth per cell
    (True warm-up needed, False not needed, None undecided); ``calibrate`` and ``evaluate``: the two sets of cells
    (a cell in both is an error: it would not be held out). The threshold: among the cut points between
    consecutive distinct S of the calibration cells that decide (and one below and one above them all), those
    with the fewest disagreements with the truth for the rule "warm-up advised when S > threshold"; of those, the
    median one (the middle of the equally good cuts, the lower of the two middle ones when their number is even:
    a fixed convention, chosen before any evaluation cell is seen, which it never sees). Scored on the evaluation cells that decide and have an S, beside the trivial baseline "Post-LN
    needs warm-up, nothing else does" (``placement_of`` reads the placement from a key), with the numbers of
    decided and undecided cells. No threshold (None) when no calibration cell decides."""
    cal, ev = list(calibrate), list(evaluate)
    if both := set(cal) & set(ev):
        raise ValueError(f"cells in both the calibration and the evaluation set: {sorted(both, key=str)}")
    decided_cal = [(scores[k], truth[k]) for k in cal if truth.get(k) is not None and scores.get(k) is not None]
    threshold = None
    if decided_cal:
        xs = sorted({s for s, _ in decided_cal})
        # one cut below every score and one above (S is a ratio, > 0: halved and doubled; a score set that is not
        # positive, e.g. a log scale: one unit), between them the midpoints
        low, high = (xs[0] / 2, xs[-1] * 2) if xs[0] > 0 else (xs[0] - 1.0, xs[-1] + 1.0)
        cuts = [low] + [(a + b) / 2 for a, b in zip(xs, xs[1:])] + [high]
        errors = [sum((s > c) != t for s, t in decided_cal) for c in cuts]
        best = [c for c, e in zip(cuts, errors) if e == min(errors)]
        threshold = best[(len(best) - 1) // 2]
    table = []
    for k in ev:
        s, t = scores.get(k), truth.get(k)
        said = None if s is None or threshold is None else s > threshold
        base = placement_of(k) == "post"
        table.append({"cell": k, "score": s, "truth": t, "diagnose": said, "baseline": base,
                      "agree": None if said is None or t is None else said == t,
                      "baseline_agree": None if t is None else base == t})
    decided = [r for r in table if r["agree"] is not None]
    return {
        "threshold": threshold,
        "calibration": {"cells": len(cal), "decided": len(decided_cal),
                        "agree": sum((s > threshold) == t for s, t in decided_cal) if threshold is not None else 0},
        # undecided: the sweep's truth is open (inconclusive, censored); no_score: the truth is there but diagnose
        # gave no S (counted apart, so that an abstention cannot pass for the sweep's indecision)
        "evaluation": {"cells": len(ev), "decided": len(decided),
                       "undecided": sum(r["truth"] is None for r in table),
                       "no_score": sum(r["truth"] is not None and r["score"] is None for r in table),
                       # no threshold (no calibration cell decides): cells with a truth and a score, not scored
                       "no_threshold": sum(r["truth"] is not None and r["score"] is not None and threshold is None
                                           for r in table),
                       "agree": sum(r["agree"] for r in decided),
                       "baseline_agree": sum(bool(r["baseline_agree"]) for r in decided),
                       # the other fixed rule, "every scheme needs warm-up": where the truth is mostly "needed", a
                       # rule must beat it too to say more than "warm-up helps"
                       "always_agree": sum(r["truth"] is True for r in decided),
                       "schemes": sorted({str(r["cell"][0]) for r in decided})},
        "table": table,
    }
