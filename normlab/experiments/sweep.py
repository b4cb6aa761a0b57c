"""``normlab sweep``: the stability frontier of each normalization scheme.

For every scheme x warm-up x width x learning rate (x seed) one short training run, all through the grid runner
(grid.py: parallel, resumable, a failed or diverged run recorded and the grid going on). Every cell starts from
the same seed and sees the same batches in the same order (the data config and the seed do not depend on the
cell), so two cells differ only in what the grid varies. From the final losses, per scheme x warm-up x width:

* **Divergence** (:func:`diverged`). A run diverged when its loss became non-finite (the trainer stops it:
  status ``diverged``) or when its final validation loss ends *above* the loss at initialisation l0: it ended
  worse than it started. l0 is the NLL of the run's first batch, computed before the first optimizer step (the
  first ``train`` record of metrics.jsonl: the model at initialisation). For an untrained model the training and
  validation sentences are exchangeable, so this l0 is an unbiased estimate of the validation NLL at
  initialisation that costs no extra pass; and it is the same number for every learning rate and warm-up of a
  curve (same seed, same first batch, and the loss is taken before any step).
* **Stability edge** (issue 40; :func:`unstable`, :func:`plan_edges`, :func:`edge_summary`): one absolute
  criterion for every arm and scheme (unstable = non-finite, or the final loss above l0); each seed's curve is
  extended above lr_max on the same grid while its highest run is stable, up to :data:`LR_CAP`, then bisected
  until first unstable / last stable <= :data:`RESOLUTION`; the frontier is that bracket (censored, a lower
  bound, when no run was unstable). Warm-up "needed" per seed pair, combined by a sign test
  (:func:`warmup_verdict`); the width law from the seeds' brackets (:func:`width_law`). Until issue 40 the
  sweep's "frontier" was the band below, which no committed run ever left by diverging: it measured the top of
  a near-best band, not stability.
* **LR tolerance** (:func:`frontier`, called "maximum stable learning rate" until issue 40): the largest grid
  point whose final loss is within ``margin`` of the best final loss l* of the curve and that did not diverge. The default margin is 0.1 nats
  (:data:`MARGIN`, the reasoning is there). A curve whose best run is not ``margin`` below l0 never trained: it
  has no frontier (None), whatever its losses.
* **The unigram plateau.** A curve whose best run is not ``margin`` below the unigram loss U of the validation
  targets (their cross-entropy under the training targets' token frequencies: the loss of a model that learned
  frequencies and nothing else, computed from the data as reproduce's gates do) has no frontier either: it
  never left the plateau. Why this rule: the first thing every run learns is the unigram distribution, ~2.5
  nats below l0 within a hundred updates at any learning rate that moves at all, so a grid whose runs are too
  short to learn more has every point within ``margin`` of its best, and "maximum stable learning rate" would
  read "the top of the grid" for every scheme with or without warm-up: the sweep would report a stability it
  never measured. Requiring l* < U - margin puts every run still on the plateau (final loss >= U) outside the
  band [l*, l* + margin] by construction, so the frontier separates runs that learned from runs that did not.
  Measured on the quick preset as it was until stop 23 (150 updates of 1,024 tokens, 3-3 layers, U = 6.817):
  the best run of each of
  the six Post-LN curves (with and without warm-up, d = 64, 128, 256) ended at 6.77-6.84 nats, on the plateau,
  while Pre-LN without warm-up reached 6.35-6.42. Without this rule the Post-LN frontiers were 1e-2 (the top
  of the grid) at d=64 for both arms, 1e-3 against 4.64e-3 at d=128 and 4.64e-4 against 1e-3 at d=256, and the
  sweep said "warm-up needed at d=128 and 256": a reading of differences of a few hundredths of a nat between
  runs that had all learned token frequencies and nothing else.
* **Learning-rate sensitivity** (:func:`lr_sensitivity`), Wortsman et al. 2023 ("Small-scale proxies for
  large-scale Transformer training instabilities", arXiv 2309.14322, Section 2.2):
  E_{eta in grid}[min(l(eta), l0) - l*], with l(eta) the final loss at learning rate eta, l0 the loss at
  initialisation and l* the best final loss over the grid. The expectation is over the log-spaced grid (each
  grid point weighs the same, as in the paper's log-spaced sweeps); a diverged run (non-finite loss) enters as
  l0 through the min, which is why the min is there: one divergence costs at most l0 - l*, not infinity.
* **Seed spread** (seeds > 1): the frontier and the sensitivity of every seed's own curve, their mean and
  standard deviation; the seed-mean curve (a grid point counts as diverged when any seed diverged there) gives
  the headline frontier.

**Widths and shapes.** The paper's IWSLT model is d=512, FFN 1024, 4 heads (head size 128). The sweep keeps
the FFN ratio (FFN = 2 d) and the number of heads (4) at every width, so the head size is d/4 (128 at d=512, as
in the paper). Keeping the head size at 128 instead is impossible below d=128 (d=64 would need half a head),
and 4 heads at every width means that width is the only thing that changes along the width axis (Theorem 1 is
a statement about d; the attention logits are scaled by 1/sqrt(head size) either way).

**Warm-up.** ``none``, or ``paper``: the paper's share of the run, 4,000 of its ~33,000 IWSLT updates (scales.PAPER:
~30 epochs x ~1,100 updates), 12.1%, linear from lr/T_warmup (eq. 1); or ``adam``: linear over 2/(1 - beta2)
updates, Ma & Yarats's untuned rule for Adam (2021, "On the adequacy of untuned warmup for adaptive optimization",
AAAI: in Adam's first updates the update term is large in magnitude, until its second-moment average has seen about
1/(1 - beta2) gradients), 100 updates at the translation task's beta2 = 0.98. Why a second warm-up arm: the paper's
share scales with the run, and in a short run it is shorter than that horizon: 36 of the standard preset's 300 updates
against 1/(1 - 0.98) = 50, where the paper's own 4,000 updates were 80 times it. A warm-up that ends before Adam's
second moment has settled need not show what the paper's warm-up did, so a sweep whose only warm-up is the paper's
share of a short run could miss the effect it is looking for. The ``adam`` arm's length does not depend on the run
(it is refused when it is not shorter than the run). After the warm-up the learning rate stays at lr_max: the
frontier is a statement about lr_max, and in a run of a few hundred updates a decay would have most updates run well
below the rate the cell is labelled with (the reproduce scales decay over 2,000 updates because there the question
is whether the reference learns, scales.py). Both arms of every contrast have the same schedule apart from the
warm-up.

**Theorem 1's width law.** The Post-LN gradient of the last FFN layer is O(d sqrt(ln d)) at initialisation. If
the largest stable step is inversely proportional to that gradient (the paper's argument in Section 3.4 for
why large learning rates fail early), the maximum stable learning rate scales as 1/(d sqrt(ln d)), and on
log-log axes its slope against d is d log(lr)/d log(d) = -1 - 1/(2 ln d): -1.12 at d=64, -1.08 at d=512.
:func:`predicted_slope` returns the least-squares slope of log(1/(d sqrt(ln d))) against log d over the widths
that were run, the number to set beside the measured slope (:func:`width_slope`). Adam normalises each
coordinate's step by its gradient scale, so for Adam this is the paper's heuristic, not a theorem: that is what
the sweep measures.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from normlab import __version__
from normlab.analysis.diagnose import SEEN_IN_DESIGN, diagnose_config, score_verdict
from normlab.config import (
    NORMS,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    Placement,
    ScheduleConfig,
    Strict,
    TrainConfig,
    add_set_argument,
    apply_overrides,
    config,
    field,
    parse_scheme,
    placement_task_error,
    scheme_errors,
)
from normlab.data import prepare
from normlab.device import autocast_dtype, cpu_name, pick_device
from normlab.experiments.budget import PROBED, estimate, updates_per_epoch
from normlab.experiments.figures import Context, RunSpec
from normlab.experiments.grid import (
    FINISHED,
    add_sync_argument,
    any_finished,
    check_not_stale,
    others_note,
    run_grid,
    run_status,
    sync_in,
    sync_out,
)
from normlab.experiments.heldout import held_out, write_held_out
from normlab.experiments.launchers import add_launcher_arguments, as_config, launcher_from_args
from normlab.experiments.progress import ProgressSettings, add_progress_arguments, eta, progress_from_args
from normlab.experiments.results import run_machine
from normlab.experiments.scales import PAPER
from normlab.metrics import mean_ci, unigram_plateau
from normlab.report.render import write_sweep_report
from normlab.results import WARMUPS, Cell, Curve, Edge, arms, best_loss_gap, edge_text, warm_arms
from normlab.rundir import RunDir
from normlab.train.schedules import build_schedule

__all__ = [
    "EXPERIMENT_FIELDS",
    "MARGIN", "PAPER_WARMUP_FRACTION", "SweepConfig", "SWEEP_SCALES", "sweep_scale", "lr_grid", "sweep_runs",
    "Cell", "Curve", "diverged", "unstable", "curve_failures", "Edge", "edge", "plan_edge", "plan_edges",
    "edge_summary", "seed_sign", "idle_curves", "edge_runs_per_curve", "edge_search_runs", "edge_estimate_line",
    "warmup_verdict", "warmup_verdicts", "mean_lr_factor", "width_law", "tolerance_truth", "rerender", "LR_CAP", "RESOLUTION",
    "lr_sensitivity", "frontier", "analyze", "predicted_slope", "width_slope",
    "slope_resolution", "read_cell", "WARMUPS", "BETAS", "warm_arms", "arms", "best_loss_gap", "warmup_truth",
    "diagnose_agreement", "diagnoses", "diagnose_verdicts", "edge_text", "held_out_cells",
]  # fmt: skip

PAPER_WARMUP_FRACTION = 4000 / (PAPER["iwslt_updates_per_epoch"] * PAPER["iwslt_epochs"])
"""T_warmup = 4,000 of the paper's ~33,000 IWSLT updates (Section 3.2 and scales.PAPER): 12.1% of the run."""

MARGIN = 0.1
"""Nats above the best final loss l* of a curve within which a grid point still counts as stable.

Why 0.1: (1) it is a perplexity ratio of e^0.1 = 1.105, "within about 10% of the best perplexity", a loss one
would still accept from a learning rate chosen without tuning; (2) it is five times smaller than the gap that
report/claims.py asks of a model to count as having learned anything (LEARN_MARGIN = 0.5 nats below the unigram
entropy), so a run stuck on the unigram plateau, the failure of Post-LN without warm-up, is never within it of a
run that learned; (3) it is larger than the seed spread of the final loss of short runs that train (a few
hundredths of a nat); the sweep reports that spread when seeds > 1, and a spread near the margin says the
frontier is noise. (Issue 40 measured that spread on the committed sweeps: median 0.039, 90th percentile 0.10,
maximum 0.18 nats near a curve's best, so (3) does not hold: the band is narrower than the seed noise. That is why
the band is now only the "LR tolerance" and no verdict rests on it.) A relative margin (a share of l0 - l*) was rejected: the unigram plateau already recovers most
of l0 - l* (ln V down to the unigram entropy), so "within 10% of the improvement" can let a plateaued run through.
"""

LR_CAP = 1.0
"""The largest learning rate the edge search tries (:func:`plan_edges`): a curve still stable there is censored.

Why 1: Adam's update moves every coordinate by about lr per step whatever the gradient's scale (Kingma & Ba 2015,
Section 2.1: |step| <~ lr), and the sweep's weights start at a scale of 1/sqrt(d) <= 0.125 for d >= 64. At lr = 1
one update moves each weight by 8 times its own scale or more: a model that still ends below its starting loss
there is not limited by its learning rate, and a larger grid point would measure nothing more."""

RESOLUTION = 1.2
"""The edge search bisects until first unstable / last stable <= this ratio (:func:`plan_edges`).

Why 1.2: the committed sweeps' grid step is 10^(1/3) = 2.15x, and Theorem 1's width law predicts a change of
2^1.1 = 2.14x per doubling of d, one grid step: a frontier known to 2.15x cannot see it move at one doubling. At
1.2x a doubling moves it by log(2.14)/log(1.2) = 4 resolution steps. Each halving of the log-ratio costs one run
per curve: from 2.15x, 3 runs (2.15 -> 1.47 -> 1.21 -> 1.10)."""

SIGN_ALPHA = 0.05
"""The one-sided level of the sign test over seeds (:func:`warmup_verdict`), the conventional 5%, fixed before any
run: with every seed agreeing it needs 5 seeds (0.5^5 = 0.031); with 2 or 3 seeds no verdict can reach it."""



BETAS = {"translation": (0.9, 0.98), "mlm": (0.9, 0.999), "lm": (0.9, 0.95)}
"""Adam's betas per task: the paper's IWSLT optimizer (Section 3.2), BERT's (figures._mlm's runs) and the decoder-only
LMs' (GPT-3, Brown et al. 2020, Appendix B; Llama, OLMo 2: beta2 = 0.95)."""


@config
class SweepConfig(Strict):
    """One stability sweep: which schemes, warm-ups, learning rates, widths and seeds, and the runs' shape."""

    scale: Literal["smoke", "quick", "standard", "full", "lm", "schemes", "custom"] = field(
        "custom", help="the preset this config started from"
    )
    task: Literal["translation", "mlm", "lm"] = field("translation", help="de-en translation (the paper's IWSLT "
                                                      "stand-in), masked-LM pre-training (en-mono) or a decoder-only "
                                                      "language model on en-mono (lm: RoPE, GELU, tied embeddings, "
                                                      "AdamW with beta2 0.95)")  # fmt: skip
    schemes: tuple[str, ...] = field(
        tuple(p.value for p in Placement if placement_task_error(p, "translation") is None),
        help="normalization schemes: a placement (" + ", ".join(p.value for p in Placement) + "; ngpt with task lm "
        "only), optionally with a norm function after a slash (pre/rmsnorm; norms: " + ", ".join(NORMS) + "; ngpt's "
        "norm is its own x/||x||); default: every placement the translation task takes",
    )
    warmups: tuple[Literal["none", "paper", "adam"], ...] = field(
        ("none", "paper"), help="none; paper: a linear warm-up over the paper's share of the run (4,000 of ~33,000 "
        "IWSLT updates = 12.1%); adam: a linear warm-up over 2/(1 - beta2) updates (Ma & Yarats 2021's untuned rule "
        "for Adam: 100 at the translation task's beta2 = 0.98, 2,000 at the mlm task's 0.999, 40 at the lm task's "
        "0.95), whatever the run's "
        "length; lr_max is kept after it")  # fmt: skip
    warmup_fraction: float = field(PAPER_WARMUP_FRACTION, help="the share of the run the `paper` warm-up takes")
    lr_min: float = field(1e-4, help="smallest learning rate of the log grid")
    lr_max: float = field(1e-2, help="largest learning rate of the log grid")
    per_decade: int = field(3, help="grid points per decade (3: 1e-4, 2.15e-4, 4.64e-4, 1e-3, ...)")
    widths: tuple[int, ...] = field((64, 128, 256, 512), help="d_model of each width; FFN = ffn_ratio x d")
    ffn_ratio: int = field(2, help="FFN width over d (the paper's IWSLT model: 1024 / 512 = 2)")
    n_heads: int = field(4, help="attention heads at every width (the paper: 4; head size d/4 = 128 at d=512)")
    layers: int = field(6, help="encoder (and decoder) depth (the paper: 6-6); lm: the decoder-only stack's depth")
    updates: int = field(300, help="updates per run")
    seeds: int = field(1, help="training seeds per cell (runs named ...-s1, -s2, ...)")
    find_edge: bool = field(True, help="extend each curve's learning rates above lr_max (same grid) while its "
                            "highest run is stable, up to lr_cap, then bisect to `resolution` (sweep.plan_edges)")
    plateau_fails: bool = field(True, help="a run that ends on the unigram plateau above its curve's best learning "
                                "rate is unstable (collapsed; sweep.curve_failures says why); false: divergence "
                                "only (non-finite, or above l0)")  # fmt: skip
    lr_cap: float = field(LR_CAP, help="the largest learning rate the edge search tries (sweep.LR_CAP says why)")
    resolution: float = field(RESOLUTION, help="the edge search bisects until first unstable / last stable <= this "
                              "ratio (sweep.RESOLUTION says why)")  # fmt: skip
    margin: float = field(MARGIN, help="nats above the best final loss within which a grid point counts as stable "
                          "(sweep.MARGIN explains the default)")  # fmt: skip
    vocab_size: int = field(8000, help="BPE vocabulary")
    max_tokens: int = field(2048, help="tokens per batch")
    max_positions: int = field(128, help="longest sentence kept, in tokens")
    block_size: int = field(128, help="mlm and lm: tokens per block")
    dropout: float = field(0.1, help="dropout (the paper: 0.1)")
    train_subset: int = field(0, help="training examples (0 = all)")
    valid_subset: int = field(500, help="validation examples for the final loss (0 = all)")
    eval_every: int = field(0, help="also validate every N updates (0 = only at the end; the final loss is the last)")
    description: str = field("", help="what the preset is for, in the report")

    def validate(self) -> None:
        if problem := scheme_errors(self.schemes):
            raise self.error("schemes", problem)
        for scheme in self.schemes:
            if why := placement_task_error(parse_scheme(scheme)[0], self.task):
                raise self.error("schemes", f"{scheme!r}: {why}")
        if not self.warmups or len(set(self.warmups)) != len(self.warmups):
            raise self.error("warmups", f"expected some of {list(WARMUPS)}, each once, got {list(self.warmups)}")
        if not 0 < self.warmup_fraction < 1:
            raise self.error("warmup_fraction", f"must be in (0, 1), got {self.warmup_fraction}")
        for name in ("per_decade", "ffn_ratio", "n_heads", "layers", "updates", "seeds"):
            if getattr(self, name) < 1:
                raise self.error(name, f"must be >= 1, got {getattr(self, name)}")
        for arm in self.warmups:
            # a warm-up as long as the run never reaches the learning rate its cells are labelled with
            if arm != "none" and (t := self.warmup_length(arm)) >= self.updates:
                others = [w for w in self.warmups if w != arm] or ["none"]
                raise self.error("warmups", f"the {arm} warm-up takes {t} updates, not fewer than the run's "
                                 f"updates={self.updates}: its cells would never train at lr_max; run longer "
                                 f"(--set updates=N with N > {t}) or leave the arm out (--set "
                                 f"'warmups=[{','.join(others)}]')")
        if not 0 < self.lr_min <= self.lr_max:
            raise self.error("lr_max", f"need 0 < lr_min <= lr_max, got {self.lr_min} and {self.lr_max}")
        # an lr_max between two grid points would be dropped without a word (the grid is lr_min x 10^(k/n)), and
        # a last step shorter than the others would break the even log spacing the LR sensitivity averages over
        top = self.lrs[-1]
        if not _on_grid(self.lr_max, top):
            below = math.floor(math.log10(self.lr_max / self.lr_min) * self.per_decade)
            pair = [_grid_point(self.lr_min, k, self.per_decade) for k in (below, below + 1)]
            raise self.error("lr_max", f"{self.lr_max:g} is not on the log grid from lr_min={self.lr_min:g} at "
                             f"{self.per_decade} per decade, whose neighbours are {pair[0]:g} and {pair[1]:g}: set "
                             "one of them, or move lr_min")
        if not self.widths or any(w < 1 for w in self.widths) or list(self.widths) != sorted(set(self.widths)):
            raise self.error("widths", f"must be increasing positive integers, got {list(self.widths)}")
        for w in self.widths:
            if w % self.n_heads:
                raise self.error("widths", f"d={w} is not divisible by n_heads={self.n_heads}")
        if not self.resolution > 1:
            raise self.error("resolution", f"must be > 1 (a ratio of learning rates), got {self.resolution}")
        if self.find_edge and not self.lr_cap >= self.lr_max:
            raise self.error("lr_cap", f"must be >= lr_max={self.lr_max:g}, got {self.lr_cap:g}")
        if not self.margin > 0:
            raise self.error("margin", f"must be positive, got {self.margin}")
        for name in ("train_subset", "valid_subset", "eval_every"):
            if getattr(self, name) < 0:
                raise self.error(name, f"must be >= 0, got {getattr(self, name)}")

    @property
    def lrs(self) -> tuple[float, ...]:
        return lr_grid(self.lr_min, self.lr_max, self.per_decade)

    @property
    def warmup_updates(self) -> int:
        """T_warmup of the `paper` arm (:meth:`warmup_length`)."""
        return self.warmup_length("paper")

    def warmup_length(self, arm: str) -> int:
        """T_warmup of a warm-up arm: 0 for ``none``; ``paper``: the paper's share of this run, at least 2 (1 would
        be no warm-up); ``adam``: 2/(1 - beta2) of the task's Adam (Ma & Yarats 2021), whatever the run's length."""
        if arm == "none":
            return 0
        if arm == "paper":
            return max(2, round(self.warmup_fraction * self.updates))
        if arm == "adam":
            return round(2 / (1 - BETAS[self.task][1]))
        raise ValueError(f"unknown warm-up arm {arm!r}: expected one of {list(WARMUPS)}")


def _grid_point(lo: float, k: int, per_decade: int) -> float:
    return float(f"{lo * 10 ** (k / per_decade):.3g}")


def _on_grid(x: float, point: float) -> bool:
    """``x`` names the grid point ``point``: equal at 3 significant digits (as the tables print it), or within
    0.5% (the 3-digit rounding's worst case)."""
    return float(f"{x:.3g}") == point or math.isclose(x, point, rel_tol=5e-3)


def lr_grid(lo: float, hi: float, per_decade: int) -> tuple[float, ...]:
    """lo x 10^(k / per_decade) for k = 0, 1, ... up to hi (included when it falls on the grid), rounded to 3
    significant digits so that names and tables read 2.15e-04, not 0.00021544346900318823. ``hi`` as printed
    (2.15e-03 for 1e-4 x 10^(4/3)) counts as that grid point (:func:`_on_grid`)."""
    x = math.log10(hi / lo) * per_decade
    n = round(x) if _on_grid(hi, _grid_point(lo, round(x), per_decade)) else math.floor(x)
    return tuple(_grid_point(lo, k, per_decade) for k in range(n + 1))


SWEEP_SCALES: dict[str, SweepConfig] = {
    "smoke": SweepConfig(
        scale="smoke", schemes=("post", "pre"), lr_min=1e-3, lr_max=1e-1, per_decade=1, widths=(16, 32), n_heads=2,
        layers=2, updates=4, vocab_size=600, max_tokens=256, max_positions=64, block_size=32, train_subset=100,
        valid_subset=16, resolution=11.0,  # one round of the edge search (lr 1, the cap) in seconds; no measurement
        # 4 updates never leave the unigram plateau, so under the plateau rule every curve fails at every learning
        # rate and the edge search would have nothing to run: the smoke preset, which exists to run every part of
        # the pipeline, reads divergence only so that its extension round runs
        plateau_fails=False,
        description="seconds, for the tests: every part of the pipeline runs (2-2 layers, so that diagnose has a "
        "stack to read); 4 updates at d=16 and 32 measure nothing about the frontier",
    ),  # fmt: skip
    # Run length. At 150 updates (the preset until stop 23, docs/results/sweep-quick: 126 runs, 119 min on a
    # 2-core AVX2 CPU in fp32) Post-LN stayed on the unigram plateau at every width and learning rate, with and
    # without warm-up (best runs 6.77-6.84 nats against U = 6.817), so the preset could not see the frontier the
    # sweep is for. Measured at this shape (one seed, lr 1e-3, validation every 100 updates, U = 6.817; a curve
    # has a frontier only below U - margin = 6.717), without / with the paper's warm-up share:
    #   Post-LN        update 300        update 400
    #   d=64           6.59 / 6.66       -              (stop 21)
    #   d=128          6.52 / 6.44       -              (stop 21)
    #   d=256          6.859 / 6.635     6.856 / 6.728  (stop 23, a 400-update run: 6.913 6.963 6.859 6.856
    #                                                    without, 6.893 6.831 6.635 6.728 with its 48-update
    #                                                    warm-up; 1.09 s per update, fp32, 1 thread, 2 jobs)
    # The run length is the least at which Post-LN *with* warm-up, the arm the paper says trains, has left the
    # plateau at every width: 300. (That d=256 run at 1e-3 rests on one fp32 seed: in bf16 the same cell ended
    # at 6.791 and, with a second seed, 6.732, on the plateau; but in every sweep since, fp32 and bf16, two
    # seeds, each Post-LN curve's best run (at 2.15e-4 or 4.64e-4 for d=256) is below it, so every curve has a
    # frontier.) At 400 the d=256 run at 1e-3 had gone back up to 6.728, 0.01 above the rule's line, so a
    # longer run buys no clearer reading at that rate (its frontier may lie below 1e-3, which is what the
    # sweep measures). Cost, measured end to end at 300 updates (docs/results/sweep-quick):
    #   2-core AMD EPYC, AVX2 only, fp32:                 4.1 h wall (454 min of training summed over runs)
    #   2-core AMD EPYC Zen 4, AVX-512 BF16 (no AMX), bf16: 80 min wall (148 min of training summed over runs;
    #                                                      the estimate printed at the start: 70 min)
    # The second is a CPU with native bf16, and 2.7x the issue's 30 minutes on one. Kept at stop 23-28 (for the
    # preset then named quick, now standard): 30 minutes buy about 110 updates per run at this shape, fewer than
    # the 150 at which no Post-LN run left the plateau, i.e. a sweep that cannot measure Post-LN at all; two
    # points per decade or 512-token batches change the measurement without a calibration run. That still holds
    # for the run's shape; since stop 29 the 30-minute `quick` preset (below) keeps the shape and cuts whole axes
    # of the grid instead (Peri-LN, the paper's warm-up share, d=256), which `standard` keeps.
    # Warm-up arms: none, the paper's share (36 of 300 updates) and adam (2/(1 - beta2) = 100 updates, module
    # doc). The paper's share of a 300-update run is shorter than Adam's second-moment horizon, 1/(1 - 0.98) = 50
    # updates, and it moved no Post-LN frontier (fp32 and bf16, two seeds: 5 of 6 seed x width pairs unmoved).
    # The adam arm was added (stop 28) with its length set from Ma & Yarats's rule before any run of it;
    # measured on the same cells (bf16, two seeds, docs/results/sweep-quick/three-arms) it raised Post-LN's
    # seed-mean frontier by one grid step at every width and Pre-LN's at none.
    # `standard` is the preset that was `quick` until stop 29: every scheme, all three arms, widths 64-256 (189
    # runs, ~2 h on the CPU below, 4x the issue's 30 minutes). It is kept whole under its own name; `quick` is
    # the subset of its cells that fits the 30 minutes (below).
    "standard": SweepConfig(
        scale="standard", schemes=("post", "pre", "peri"), warmups=("none", "paper", "adam"), widths=(64, 128, 256),
        layers=3, updates=300, max_tokens=1024, eval_every=100,
        description="3 schemes x 3 warm-ups (none; 36 updates, the paper's 12.1% of the run; 100 updates, "
        "2/(1 - beta2)) x 7 learning rates (1e-4..1e-2) x 3 widths (64-256), 3-3 layers, 300 updates of 1,024 "
        "tokens: 189 runs, ~2 h on a 2-core CPU with AVX-512 BF16 (no AMX) in bf16 (the first two arms' 126 runs "
        "measured 80 min, 4.1 h on a 2-core AVX2 CPU in fp32). 300 updates: every Post-LN curve of the preset then "
        "has a run below the unigram plateau (measured in fp32 and bf16, two seeds); at 150 no Post-LN run had",
    ),  # fmt: skip
    # The 30-minute preset (the issue's budget on 2 cores of a CPU with native bf16). Sized from measured compute,
    # not from the verdicts: the run's shape is `standard`'s (300 updates of 1,024 tokens, 3-3 layers: the
    # shortest run at which Post-LN leaves the unigram plateau, above), so only the grid can shrink. Per run, in
    # the 2-job grid (bf16, 2-core EPYC Zen 4 with AVX-512 BF16; an AMX Xeon measured reproduce's d=256 update
    # at about the same speed, 0.84 s against a median 0.86 s here: scales.QUICK_BUDGET): d=64 ~35 s, d=128 ~60 s,
    # d=256 ~115 s, so 30 minutes of 2 jobs, less ~3 min of data preparation, probe, diagnose and report, hold
    # ~3,200 run-seconds.
    # What goes, and why:
    # * the paper's share of the run (36 updates): shorter than Adam's second-moment horizon, 50 updates, it
    #   cannot show the effect the sweep looks for (theory, module doc; measured: 5 of 6 Post-LN seed x width
    #   pairs unmoved). The adam arm (100 updates, Ma & Yarats's rule) stays: it is the warm-up that can.
    # * Peri-LN (beyond the paper): the quick question is the paper's contrast, Post-LN against Pre-LN; Peri-LN's
    #   frontier is above this grid at every width measured, so its cells buy a lower bound at a third of the cost.
    # * d=256: it alone costs more than d=64 and 128 together (115 s against 95 s per grid point). Two widths
    #   still give the width law a slope (one doubling of d); `standard` adds d=256.
    # What stays whole: the issue's learning-rate grid (1e-4..1e-2, three per decade: the LR sensitivity is a
    # mean over it) and the run's shape. 2 x 2 x 2 x 7 = 56 runs: 2,610 run-seconds in standard's grid
    # (docs/results/sweep-quick/standard-189), ~22 min of training on 2 jobs. One seed per cell: a frontier can
    # move one grid step from seed noise (stop 28: on seed 1 alone diagnose agreed on 3 of 5 decided pairs, on
    # two seeds on 5 of 5); `--set seeds=2` doubles the cost, and the report says "one seed per cell".
    # Measured end to end in one command (stop 29, same CPU, docs/results/sweep-quick/quick-56): 25.5 min against
    # the 23.5 printed at the start; all 56 final losses equal to those of standard's runs of the same cells. What
    # it gives up: with two widths one grid step at one width moves the slope by 1.11 (sweep.slope_resolution),
    # as much as Theorem 1's whole predicted slope, so its width law is a reading, not a test; standard's three
    # widths halve that. At the paper's depth (`--set layers=6`) 300 updates are too short for Post-LN: every
    # Post-LN curve stayed on the unigram plateau (docs/results/sweep-quick/depth-6), and at 600 updates (d=64,
    # one seed) the warm-up arm's best was 0.002 nats past the plateau line (depth-6-600).
    "quick": SweepConfig(
        scale="quick", schemes=("post", "pre"), warmups=("none", "adam"), widths=(64, 128),
        layers=3, updates=300, max_tokens=1024, eval_every=100,
        description="the paper's contrast in 30 minutes: Post-LN and Pre-LN x 2 warm-ups (none; 100 updates, "
        "2/(1 - beta2), Ma & Yarats's rule for Adam) x 7 learning rates (1e-4..1e-2) x 2 widths (64, 128), 3-3 "
        "layers, 300 updates of 1,024 tokens, one seed: 56 runs, ~25 min on a 2-core CPU with AVX-512 BF16 in bf16. "
        "The `standard` preset adds Peri-LN, the paper's warm-up share (36 updates) and d=256 (189 runs, ~2 h)",
    ),  # fmt: skip
    "full": SweepConfig(
        scale="full", schemes=("post", "pre", "peri"), warmups=("none", "paper", "adam"), widths=(64, 128, 256, 512),
        layers=6, updates=500, max_tokens=4096, valid_subset=1000, eval_every=100,
        description="widths 64-512 at the paper's depth and batch: 3 schemes x 3 warm-ups (none; 61 updates, the "
        "paper's share; 100, 2/(1 - beta2)) x 7 learning rates x widths 64-512, 6-6 layers, 500 updates of 4,096 "
        "tokens (252 runs; sized for a GPU, not yet measured); --set schemes=[...] adds the other schemes",
    ),  # fmt: skip
    # The decoder-only LM sweep (issue 34): the schemes that were proposed on causal LMs, on the task they were
    # proposed on. The shape follows the quick preset's where nothing says otherwise (300 updates of 1,024 tokens,
    # widths 64 and 128, the LR grid 1e-4..1e-2 with the edge search above it, one seed), and differs where the
    # schemes need it:
    # * 6 layers, not 3: Mix-LN puts Post-LN in the first floor(0.25 L) layers (its paper's alpha), which is 0 at
    #   L = 3 (Mix-LN would be Pre-LN, measured twice) and 1 at L = 6; LayerNorm Scaling's 1/sqrt(l) spans 1 to 0.41
    #   at L = 6 against 1 to 0.58 at L = 3. 6 is also the paper's depth.
    # * no dropout: GPT-style pre-training (Llama, OLMo 2, nanoGPT's) trains without it, and these schemes were
    #   measured so.
    # * warm-up arms none and adam: 2/(1 - beta2) = 40 updates at the LMs' beta2 = 0.95 (Ma & Yarats's rule, the
    #   module doc); AdamW with weight decay 0.1 for every scheme (_train_config).
    # Calibration (stop 34, before any sweep run; 2-core AMD EPYC Zen 4, bf16, 1 thread, 2 jobs): this shape
    # (6 layers, 300 updates of 1,024 tokens) with dropout 0.1, Post-LN and Pre-LN with the warm-up at lr 1e-3,
    # ended at 6.75 / 6.82 (Post-LN, d=64 / 128) and 6.79 (Pre-LN, d=64) against the unigram loss U = 7.058,
    # 0.24-0.31 nats past it: at 300 updates a curve that trains leaves the plateau by more than the 0.1-nat line
    # of the plateau rule. Cost, measured in the sweep itself (same CPU, 2 jobs): 71 grid runs in 56 min, 45-85 s
    # a run (Peri-LN at d=128 110-120 s), so ~3 h for the 224 grid runs, plus the edge search (a few runs per
    # curve): more than one working session, which the grid allows (a finished run is never trained again).
    "lm": SweepConfig(
        scale="lm", task="lm", schemes=("post", "pre", "peri", "lns", "mixln", "output", "pre/dyt", "hybridnorm"),
        warmups=("none", "adam"), widths=(64, 128), layers=6, updates=300, max_tokens=1024, dropout=0.0,
        eval_every=100,
        description="decoder-only LMs on en-mono (RoPE, GELU, tied embeddings, AdamW 0.9/0.95, weight decay 0.1): "
        "8 schemes (post, pre, peri, lns, mixln, output, pre/dyt, hybridnorm) x 2 warm-ups (none; 40 updates, "
        "2/(1 - beta2)) x 7 learning rates (1e-4..1e-2, then the edge search) x d=64 and 128, 6 layers, 300 "
        "updates of 1,024 tokens, no dropout, one seed: 224 grid runs, ~3 h on a 2-core CPU with AVX-512 BF16 in "
        "bf16, plus the edge search",
    ),  # fmt: skip
    # The schemes proposed on encoder-decoder translation, on the task they were proposed on (issue 40: diagnose
    # held out "on schemes other than post and pre"; the LM sweep holds those proposed on causal LMs): DeepNorm
    # (Wang et al. 2022, DeepNet), Admin (Liu et al. 2020), the B2T connection (Takase et al. 2023) and ResiDual
    # (Xie et al. 2023), each a way to keep Post-LN's output norm and train without its instability. Chosen by
    # where they were proposed, before any run of them at this shape. The quick preset's shape, grid, warm-up arms
    # and edge search, so that its cells sit beside edge-quick's Post-LN and Pre-LN ones; five seeds, the fewest
    # with which the one-sided sign test can decide at 5% (p = 1/32). Cost, estimated from edge-quick's runs (not
    # measured for these schemes): ~40 s a run at d=64 and ~70 s at d=128 on two lanes of a Zen 4/5 in bf16 (its
    # log), 3.0 edge-search runs a curve for Post-LN and 5.75 for Pre-LN; B2T and ResiDual train like Pre-LN in
    # pilot runs (an audit of 2026-11-28), so ~1,000 runs in all, ~7-8 h of two lanes, in pieces with --sync. (The
    # first estimate, ~6 h, took 45 s a run and Post-LN's edge-search count for every scheme.) Measured on a 2-core
    # AMD EPYC Zen 5 (2026-11-28, docs/results/sweep-schemes): 875 runs (315 of the edge search), 20 s of training a
    # run at d=64 and 29 s at d=128 (median), ~3.8 h of wall time in four pieces: half the estimate.
    "schemes": SweepConfig(
        scale="schemes", schemes=("deepnorm", "admin", "b2t", "resi_dual"), warmups=("none", "adam"),
        widths=(64, 128), layers=3, updates=300, max_tokens=1024, eval_every=100, seeds=5,
        description="the schemes proposed on translation (DeepNorm, Admin, B2T, ResiDual) at the quick preset's "
        "shape: 2 warm-ups (none; 100 updates, 2/(1 - beta2)) x 7 learning rates (1e-4..1e-2, then the edge "
        "search) x d=64 and 128, 3-3 layers, 300 updates of 1,024 tokens, 5 seeds: 560 grid runs plus the edge "
        "search (315 runs): ~3.8 h measured on a 2-core AMD EPYC Zen 5 in bf16, in pieces",
    ),  # fmt: skip
}


def sweep_scale(name: str) -> SweepConfig:
    if name not in SWEEP_SCALES:
        raise ConfigError(f"sweep scale {name!r}: expected one of {list(SWEEP_SCALES)}")
    return SWEEP_SCALES[name]


# -------------------------------------------------------------------------------------------------------------
# the grid of runs


def _lr_tag(lr: float) -> str:
    return f"{lr:.2e}"


def group_name(scheme: str, warmup: str, width: int, lr: float) -> str:
    return f"{scheme.replace('/', '+')}-{warmup}-d{width}-lr{_lr_tag(lr)}"


def _train_config(cfg: SweepConfig, ctx: Context, *, scheme: str, warmup: str, width: int, lr: float,
                  seed: int) -> TrainConfig:  # fmt: skip
    placement, norm = parse_scheme(scheme)
    schedule = ScheduleConfig(warmup_updates=cfg.warmup_length(warmup), decay="constant")
    common = dict(max_epochs=10_000, max_updates=cfg.updates, eval_every=cfg.eval_every, keep_last=1, seed=seed,
                  device=ctx.device, precision=ctx.precision, log_every=max(1, cfg.updates // 4))  # fmt: skip
    if cfg.task == "translation":
        model = ModelConfig(placement=placement, norm=norm, d_model=width, d_ffn=cfg.ffn_ratio * width,
                            n_heads=cfg.n_heads, encoder_layers=cfg.layers, decoder_layers=cfg.layers,
                            dropout=cfg.dropout, vocab_size=cfg.vocab_size, max_positions=cfg.max_positions)  # fmt: skip
        data = DataConfig(task="translation", corpus=ctx.corpus, vocab_size=cfg.vocab_size, train_subset=cfg.train_subset,
                          valid_subset=cfg.valid_subset, max_tokens=cfg.max_tokens, cache_dir=ctx.cache_dir)  # fmt: skip
        # Section 3.2: Adam, beta = (0.9, 0.98); label smoothing 0.1 (the loss trained; the reported loss is the NLL)
        return TrainConfig(model=model, data=data, optim=OptimConfig(name="adam", lr=lr, betas=BETAS["translation"]),
                           schedule=schedule, label_smoothing=0.1, **common)  # fmt: skip
    if cfg.task == "lm":
        # GPT/Llama-shaped, as the LMs the newer schemes were proposed on (Peri-LN, Mix-LN, LayerNorm Scaling: Llama
        # with RoPE): rotary positions, unscaled tied embeddings, GELU, no embedding norm; AdamW with the LLMs'
        # betas and weight decay 0.1 (GPT-3, Brown et al. 2020, Appendix B), the same for every scheme
        model = ModelConfig(placement=placement, norm=norm, d_model=width, d_ffn=cfg.ffn_ratio * width,
                            n_heads=cfg.n_heads, encoder_layers=0, decoder_layers=cfg.layers, vocab_size=cfg.vocab_size,
                            max_positions=cfg.block_size, positional="rope", scale_embedding=False, activation="gelu",
                            dropout=cfg.dropout)  # fmt: skip
        data = DataConfig(task="lm", corpus=ctx.mlm_corpus, vocab_size=cfg.vocab_size, block_size=cfg.block_size,
                          train_subset=cfg.train_subset, valid_subset=cfg.valid_subset, max_tokens=cfg.max_tokens,
                          cache_dir=ctx.cache_dir)  # fmt: skip
        return TrainConfig(model=model, data=data, optim=OptimConfig(name="adamw", lr=lr, betas=BETAS["lm"],
                           weight_decay=0.1), schedule=schedule, label_smoothing=0.0, **common)  # fmt: skip
    # BERT-shaped, as Figure 5's runs (figures._mlm), with the paper's Adam betas for all schemes alike
    model = ModelConfig(placement=placement, norm=norm, d_model=width, d_ffn=cfg.ffn_ratio * width, n_heads=cfg.n_heads,
                        encoder_layers=cfg.layers, decoder_layers=0, vocab_size=cfg.vocab_size,
                        max_positions=max(cfg.block_size, 64), positional="learned", scale_embedding=False,
                        embedding_norm=True, type_vocab_size=2, activation="gelu", dropout=cfg.dropout)  # fmt: skip
    data = DataConfig(task="mlm", corpus=ctx.mlm_corpus, vocab_size=cfg.vocab_size, block_size=cfg.block_size,
                      train_subset=cfg.train_subset, valid_subset=cfg.valid_subset, max_tokens=cfg.max_tokens,
                      cache_dir=ctx.cache_dir)  # fmt: skip
    return TrainConfig(model=model, data=data, optim=OptimConfig(name="adamw", lr=lr, betas=BETAS["mlm"],
                       weight_decay=0.01), schedule=schedule, label_smoothing=0.0, **common)  # fmt: skip


def run_spec(cfg: SweepConfig, ctx: Context, scheme: str, warmup: str, width: int, lr: float, seed: int) -> RunSpec:
    """One cell as a RunSpec named GROUP-sK (group ``SCHEME-WARMUP-dWIDTH-lrLR``): a grid point, or a learning
    rate the edge search added (:func:`plan_edges`), named and configured the same way."""
    group = group_name(scheme, warmup, width, lr)
    w = "w/o warm-up" if warmup == "none" else f"warm-up {cfg.warmup_length(warmup)}"
    tc = _train_config(cfg, ctx, scheme=scheme, warmup=warmup, width=width, lr=lr, seed=seed)
    return RunSpec(f"{group}-s{seed}", ("sweep",), f"{scheme}, {w}, d={width}, lr {lr:.3g}", tc, kind=cfg.task,
                   group=group)  # fmt: skip


def spec_of_name(cfg: SweepConfig, ctx: Context, name: str, run_dir: Path | None = None) -> RunSpec | None:
    """The run of this sweep named ``name`` (a grid point, or a learning rate the edge search planned: any rate of
    a curve of ``cfg``, seeds 1..cfg.seeds), or None for another grid's name; for ``--sync``, whose shared folder
    may hold the edge runs of another machine. A name keeps 3 digits of its rate (a bisection's rate has more):
    the rate is the one saved in ``run_dir``'s config when that rounds to the name's."""
    for scheme in cfg.schemes:
        for warmup in cfg.warmups:
            for width in cfg.widths:
                prefix = group_name(scheme, warmup, width, 1.0).rsplit("-lr", 1)[0] + "-lr"
                if not name.startswith(prefix):
                    continue
                tag, _, seed = name[len(prefix):].rpartition("-s")
                try:
                    lr, k = float(tag), int(seed)
                except ValueError:
                    continue
                if not (math.isfinite(lr) and lr > 0):
                    continue
                saved = RunDir(run_dir).read_config_dict() if run_dir is not None else None
                exact = ((saved or {}).get("optim") or {}).get("lr")
                if isinstance(exact, float) and _lr_tag(exact) == tag:
                    lr = exact
                if not 1 <= k <= cfg.seeds:
                    continue
                try:
                    spec = run_spec(cfg, ctx, scheme, warmup, width, lr, k)
                except ConfigError:  # a name no configuration of this sweep can have
                    continue
                if spec.name == name:
                    return spec
    return None


def sweep_runs(cfg: SweepConfig, ctx: Context) -> list[RunSpec]:
    """Every cell of the sweep's log grid (:func:`run_spec`); the seed and the data config do not depend on the
    cell, so every cell sees the same batches in the same order."""
    return [run_spec(cfg, ctx, scheme, warmup, width, lr, seed) for scheme in cfg.schemes for warmup in cfg.warmups
            for width in cfg.widths for lr in cfg.lrs for seed in range(1, cfg.seeds + 1)]  # fmt: skip


# -------------------------------------------------------------------------------------------------------------
# the cells' results and the pure functions on them


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def unstable(final: float | None, l0: float | None, status: str = "completed") -> bool:
    """THE stability criterion, shared by every scheme, warm-up arm and width: a run is unstable when the trainer
    stopped it on a non-finite loss (``status == "diverged"``), or its final loss is non-finite, or it ends above
    its loss at initialisation l0.

    Why l0 and not a multiple of the curve's best (theory, not fitted to any run): l0 is the loss of the model
    before any step, so "ends above l0" says the training made the model worse than not training at all, with no
    constant to choose; it is the same for both arms of a warm-up contrast (same seed, same first batch, loss
    taken before the first step, so the warm-up cannot move it), and Wortsman et al. 2023 (arXiv 2309.14322)
    cap a diverged run's loss at l0 for the same reason. A multiple of the curve's best (k x l*) depends on how
    far the best run of that curve got, so two arms would be held to different lines and the criterion would not
    be absolute, and k is a free constant. This is the divergence half of the criterion; a run that ends on the
    unigram plateau (below l0, above U) passes it, and :func:`curve_failures` adds that failure on a curve."""
    if status == "diverged" or not _finite(final):
        return True
    return _finite(l0) and final > l0  # type: ignore[operator]


diverged = unstable  # the name the band analysis and the reports used before issue 40


def curve_failures(points: dict[float, tuple[float | None, float | None, str]], *, unigram: float | None = None,
                   margin: float = MARGIN) -> dict[float, bool]:  # fmt: skip
    """THE stability criterion on one seed's curve ``{lr: (final, l0, status)}``, shared by every scheme, warm-up
    arm and width: a run fails when it diverged (:func:`unstable`: non-finite, or above l0) or when it collapsed:
    it ends on the unigram plateau (final >= U - ``margin``, U = ``unigram``, the loss of predicting every target
    token by its frequency) at a learning rate above the curve's best one (the lowest final loss of a run that did
    not diverge). A curve whose best run did not leave the plateau fails everywhere (it learned nothing at any
    learning rate: the edge reads "unstable from the smallest learning rate"). ``unigram`` None: divergence only.

    Why the plateau counts (theory and the paper, not fitted): the failure the paper reports for Post-LN without
    warm-up is a model that did not learn (Section 3.2 and Figure 2: 8.45 BLEU against ~34 with warm-up; "just
    above zero" with SGD), not a loss that grows without bound. A LayerNorm before the output projection bounds
    the logits' input, so a Post-LN network that large early steps break falls back to the token-frequency
    solution, loss ~U, and stays below l0 (~ln V): "ends above l0" cannot see that failure. The line U - margin is
    the one :func:`frontier` already asks a curve's best run to cross to count as trained (the same ``margin``, 0.1
    nats, MARGIN says why); U is a property of the validation data, the same line for every arm, scheme and width.
    Why only above the best learning rate: below it a run on the plateau is too slow for the run's length, not
    unstable, and a user raising the learning rate from the best one meets the edge above it. (Added after the
    quick preset's seed-1 runs showed Post-LN ending on the plateau from lr 2.15e-2 with and without warm-up, at
    6.89-6.97 against U = 6.817, while it ended above l0 only from ~0.35; the divergence-only edge stays in
    sweep.json beside it, ``divergence_edge``.)"""
    div = {lr: unstable(f, l0, st) for lr, (f, l0, st) in points.items()}
    kept = [(f, lr) for lr, (f, _, _) in points.items() if not div[lr]]
    if unigram is None or not kept:
        return div
    best, best_lr = min(kept)  # type: ignore[type-var]
    line = unigram - margin
    if best >= line:  # type: ignore[operator]
        return dict.fromkeys(points, True)
    return {lr: div[lr] or (lr > best_lr and points[lr][0] >= line) for lr in points}  # type: ignore[operator]


def lr_sensitivity(finals: Sequence[float | None], l0: float) -> float:
    """Wortsman et al. 2023 (arXiv 2309.14322): E_{eta in grid}[min(l(eta), l0) - l*], the mean over the grid's
    points of how far each ends above the best, a diverged point (None or non-finite) counting as l0. l* is the
    best final loss over the grid; when every point diverged, l* = l0 (the capped losses' minimum) and the
    sensitivity is 0: no learning rate trained, which :func:`frontier` reports as "never trains"."""
    if not finals:
        raise ValueError("lr_sensitivity needs at least one grid point")
    capped = [min(x, l0) if _finite(x) else l0 for x in finals]  # type: ignore[type-var]
    best = min(capped)
    return math.fsum(c - best for c in capped) / len(capped)


def frontier(lrs: Sequence[float], finals: Sequence[float | None], l0s: Sequence[float | None],
             statuses: Sequence[str] | None = None, *, margin: float = MARGIN, unigram: float | None = None
             ) -> Curve:  # fmt: skip
    """Read one curve: the divergence of each point (:func:`diverged`), l* and its learning rate, the maximum
    stable learning rate (the largest point within ``margin`` nats of l* that did not diverge; None when l* is
    not ``margin`` below l0: the curve never trained; None too when ``unigram`` (U, the unigram loss of the
    validation targets) is given and l* is not ``margin`` below it: the curve never left the plateau, see the
    module's doc) and the LR sensitivity. ``l0s``: each point's loss at initialisation (the same number along a
    curve; their median is used, non-finite ones ignored)."""
    if not (len(lrs) == len(finals) == len(l0s)) or not lrs:
        raise ValueError(f"one final loss and one l0 per learning rate: {len(lrs)}, {len(finals)}, {len(l0s)}")
    if list(lrs) != sorted(lrs):
        raise ValueError(f"learning rates must be increasing, got {list(lrs)}")
    statuses = list(statuses) if statuses is not None else ["completed"] * len(lrs)
    finite_l0 = [x for x in l0s if _finite(x)]
    l0 = statistics.median(finite_l0) if finite_l0 else None
    div = tuple(diverged(f, l0, s) for f, s in zip(finals, statuses))
    kept = tuple(None if d else f for f, d in zip(finals, div))
    ok = [(f, lr) for f, lr in zip(kept, lrs) if f is not None]
    best, best_lr = min(ok) if ok else (None, None)
    sens = lr_sensitivity(kept, l0) if l0 is not None else None
    trained = best is not None and l0 is not None and l0 - best > margin
    if not trained:
        why = ("no point kept a finite loss at or below l0" if best is None else
               f"the best final loss {best:.3f} is not {margin:g} nats below l0 = {l0:.3f}" if l0 is not None else
               "l0 unknown")  # fmt: skip
        return Curve(tuple(lrs), kept, div, l0, best, best_lr, None, sens, False, f"never trains: {why}")
    if unigram is not None and not best < unigram - margin:  # type: ignore[operator]
        return Curve(tuple(lrs), kept, div, l0, best, best_lr, None, sens, False,
                     f"never leaves the unigram plateau: the best final loss {best:.3f} is not {margin:g} nats below "
                     f"the unigram loss U = {unigram:.3f} (a model that learned token frequencies only); its runs are "
                     "too short to show a frontier", plateau=True)  # fmt: skip
    stable = [lr for f, lr in zip(kept, lrs) if f is not None and f <= best + margin]  # type: ignore[operator]
    return Curve(tuple(lrs), kept, div, l0, best, best_lr, max(stable), sens, True)


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def _sd(xs: Sequence[float]) -> float | None:
    return statistics.stdev(xs) if len(xs) > 1 else None


def first_unstable_runs(by_seed: dict[int, Edge], ran: dict[tuple[str, str, int, int, float], Cell],
                        curve: tuple[str, str, int], *, unigram: float | None, margin: float = MARGIN
                        ) -> list[dict[str, Any]]:  # fmt: skip
    """Per seed, the run at its edge's first unstable rate: its lr, final loss, whether it diverged (non-finite or
    above l0) and, when it did not, how far its final loss lies above the plateau line U - margin (``above_line``,
    nats; None without U)."""
    out = []
    for seed, e in by_seed.items():
        c = ran.get((*curve, seed, e.first_unstable)) if e.first_unstable is not None else None
        if c is None:
            continue
        gone = diverged(c.final, c.l0, c.status)
        above = None if gone or unigram is None or not _finite(c.final) else c.final - (unigram - margin)
        out.append({"seed": seed, "lr": c.lr, "final": c.final if _finite(c.final) else None, "diverged": gone,
                    "above_line": above})
    return out


def analyze(cells: Sequence[Cell], *, margin: float = MARGIN, unigram: float | None = None,
            grid: Sequence[float] | None = None, plateau_fails: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """Per scheme x warm-up x width: each seed's stability edge from all its runs (:func:`edge_summary`, the
    frontier since issue 40); and on the runs of the log grid ``grid`` only (all the runs when None; the edge
    search's extra runs differ between seeds and would break the grid's even log spacing) the near-best band:
    the seed-mean curve's LR tolerance (a point diverged when any seed diverged
    there; its loss the mean of the seeds'), each seed's own frontier and sensitivity, and their spread. Points
    with a failed run (no result, not a divergence) are left out of the curve and listed. ``unigram``: the
    unigram loss U of the validation targets (:func:`frontier`: a curve must get ``margin`` below it; and the
    edges' plateau rule, :func:`curve_failures`, unless ``plateau_fails`` is False)."""
    keyed: dict[tuple[str, str, int], list[Cell]] = {}
    for c in cells:
        keyed.setdefault((c.scheme, c.warmup, c.width), []).append(c)
    edges = edge_rows_by_seed(cells, unigram=unigram if plateau_fails else None, margin=margin)
    divergence = edge_rows_by_seed(cells)  # the same runs read by divergence alone, beside it
    ran = {(c.scheme, c.warmup, c.width, c.seed, c.lr): c for c in cells}
    if grid is not None:
        cells = [c for c in cells if any(_on_grid(c.lr, g) for g in grid)]
    keyed = {}
    for c in cells:
        keyed.setdefault((c.scheme, c.warmup, c.width), []).append(c)
    rows = []
    for (scheme, warmup, width), members in keyed.items():
        seeds = sorted({c.seed for c in members})
        missing = sorted({c.lr for c in members if c.status not in ("completed", "diverged", "cached")})
        lrs = sorted({c.lr for c in members} - set(missing))
        at = {(c.lr, c.seed): c for c in members}
        per_seed = []
        for s in seeds:
            pts = [at[(lr, s)] for lr in lrs if (lr, s) in at]
            if pts:
                per_seed.append(frontier([p.lr for p in pts], [p.final for p in pts], [p.l0 for p in pts],
                                         [p.status for p in pts], margin=margin, unigram=unigram))  # fmt: skip
        mean_finals, mean_l0s, mean_status = [], [], []
        for lr in lrs:
            pts = [at[(lr, s)] for s in seeds if (lr, s) in at]
            bad = any(diverged(p.final, p.l0, p.status) for p in pts)
            mean_finals.append(None if bad else _mean([p.final for p in pts]))  # type: ignore[misc]
            l0s = [p.l0 for p in pts if _finite(p.l0)]
            mean_l0s.append(_mean(l0s) if l0s else None)
            mean_status.append("diverged" if bad else "completed")
        curve = frontier(lrs, mean_finals, mean_l0s, mean_status, margin=margin, unigram=unigram) if lrs else None
        sens = [c.sensitivity for c in per_seed if c.sensitivity is not None]
        stable = [c.lr_tolerance for c in per_seed]
        bests = [c.best for c in per_seed if c.best is not None]
        rows.append({
            "scheme": scheme, "warmup": warmup, "width": width, "seeds": len(seeds),
            # the stability edge (issue 40): each seed's (last stable, first unstable), their interval
            "edge": edge_summary(edges.get((scheme, warmup, width), {})),
            # non-finite or above l0 only (no plateau): where the loss itself runs away; the edge search bisects the
            # edge above, so this one is resolved only where the two coincide or the extension rounds reached it
            "divergence_edge": edge_summary(divergence.get((scheme, warmup, width), {})),
            # how each seed's first unstable run failed: diverged, or ended on the plateau and by how much above its
            # line (an audit before the schemes sweep: a curve that falls smoothly with the rate crosses the line
            # just above it, where slower learning moves the crossing as much as instability does)
            "first_unstable": first_unstable_runs(edges.get((scheme, warmup, width), {}), ran, (scheme, warmup, width),
                                                  unigram=unigram if plateau_fails else None, margin=margin),
            "curve": curve.to_dict() if curve else None,
            "lr_tolerance": curve.lr_tolerance if curve else None,
            # the frontier is the top of the grid: the true one is at or above it (a lower bound)
            "tolerance_censored": bool(curve and curve.lr_tolerance is not None and curve.lr_tolerance == lrs[-1]),
            "best_lr": curve.best_lr if curve else None,
            "best_loss": curve.best if curve else None,
            "l0": curve.l0 if curve else None,
            "sensitivity": _mean(sens) if sens else None,
            "sensitivity_sd": _sd(sens),
            "lr_tolerance_per_seed": stable,
            "best_loss_sd": _sd(bests),
            "diverged_lrs": [lr for lr, d in zip(lrs, curve.diverged) if d] if curve else [],
            "missing_lrs": missing,
            "plateau": bool(curve and curve.plateau),
            "note": curve.note if curve else "no finished run",
        })  # fmt: skip
    return rows


# -------------------------------------------------------------------------------------------------------------
# the stability edge (issue 40): one absolute criterion, the LR range extended until it fails, then bisected


def next_grid_lr(lr: float, lo: float, per_decade: int) -> float:
    """The grid point above ``lr`` on the log grid from ``lo`` at ``per_decade`` points a decade (3 digits)."""
    k = round(math.log10(lr / lo) * per_decade)
    return _grid_point(lo, k + 1, per_decade)


def edge(results: dict[float, bool]) -> Edge:
    """The edge of one seed's curve from ``{lr: unstable?}`` (finished runs only). A stable run above an unstable
    one does not move the edge up: the edge is the first failure, as a user raising the learning rate meets it."""
    bad = [lr for lr, u in results.items() if u]
    first = min(bad) if bad else None
    good = [lr for lr, u in results.items() if not u and (first is None or lr < first)]
    return Edge(max(good) if good else None, first)


def _midpoint(lo: float, hi: float) -> float:
    return float(f"{math.sqrt(lo * hi):.3g}")


def plan_edge(results: dict[float, bool], *, lr_min: float, per_decade: int, cap: float = LR_CAP,
              resolution: float = RESOLUTION) -> float | None:  # fmt: skip
    """The next learning rate to run on one seed's curve, given its finished runs ``{lr: unstable?}``, or None
    when the curve is done. (1) No unstable run yet: the next grid point above the largest run (same per-decade
    grid from ``lr_min``), while it is <= ``cap``; at the cap the curve is censored. (2) An unstable run: the
    geometric midpoint (3 digits) of the last stable and the first unstable learning rate while their ratio is
    above ``resolution``. (3) Unstable already at the smallest learning rate: done (an edge below the grid; the
    search does not go down, the grid's lr_min says where it starts)."""
    if not results:
        return None
    e = edge(results)
    if e.first_unstable is None:
        nxt = next_grid_lr(max(results), lr_min, per_decade)
        return nxt if nxt <= cap * (1 + 1e-9) and nxt not in results else None
    if e.last_stable is None or e.ratio <= resolution * (1 + 1e-9):  # type: ignore[operator]
        return None
    mid = _midpoint(e.last_stable, e.first_unstable)
    return mid if e.last_stable < mid < e.first_unstable and mid not in results else None


def plan_edges(cells: Sequence[Cell], *, lr_min: float, per_decade: int, cap: float = LR_CAP,
               resolution: float = RESOLUTION, unigram: float | None = None, margin: float = MARGIN
               ) -> list[tuple[str, str, int, int, float]]:  # fmt: skip
    """One round of the edge search: for each curve (scheme, warm-up, width, seed), :func:`plan_edge`'s next
    learning rate from its finished runs (completed or diverged), each run's failure read by
    :func:`curve_failures` (``unigram``, ``margin``); (scheme, warm-up, width, seed, lr) each. A run
    not finished (failed, absent, still running) is a hole, not a verdict: it is left out here, and the curve is
    marked incomplete by :func:`analyze` (``missing_lrs``), which decides nothing on it."""
    curves: dict[tuple[str, str, int, int], list[Cell]] = {}
    for c in cells:
        if c.status in ("completed", "diverged", "cached"):
            curves.setdefault(c.curve, []).append(c)
    out = []
    for key, members in curves.items():
        failed = curve_failures({c.lr: (c.final, c.l0, c.status) for c in members}, unigram=unigram, margin=margin)
        nxt = plan_edge(failed, lr_min=lr_min, per_decade=per_decade, cap=cap, resolution=resolution)
        if nxt is not None:
            out.append((*key, nxt))
    return out


def idle_curves(cells: Sequence[Cell], names: Sequence[str], ended: set[str]) -> list[Cell]:
    """The cells of the curves (scheme, warm-up, width, seed) that the asynchronous edge search may plan now: those
    none of whose runs is still to come. A run is still to come when it has not finished on disk and has not ended
    in this invocation (``ended``: the names that ended without finishing, holes from then on): to start, running,
    or to resume (a run stopped earlier reads ``interrupted`` or ``failed`` until its worker starts it again).
    ``names`` are the cells' run names, in order. Planning a curve from part of its runs would plan other rates
    than a search that waits for them."""
    busy = {c.curve for c, name in zip(cells, names, strict=True) if c.status not in FINISHED and name not in ended}
    return [c for c in cells if c.curve not in busy]


def edge_summary(by_seed: dict[int, Edge]) -> dict[str, Any]:
    """The frontier of one curve from its seeds' edges: the interval [min last_stable, max first_unstable) (the
    seeds' spread and each seed's resolution together; ``hi`` None when a seed is censored: a lower bound only;
    ``lo`` None when a seed was unstable from the smallest rate: an upper bound), its geometric centre (None
    unless every seed is bracketed), and each seed's edge."""
    edges = list(by_seed.values())
    lows = [e.last_stable for e in edges]
    highs = [e.first_unstable for e in edges]
    censored = any(e.censored for e in edges)
    lo = None if not edges or any(x is None for x in lows) else min(lows)  # type: ignore[type-var]
    hi = None if censored or not edges else max(highs)  # type: ignore[type-var]
    # the centre of the seeds' brackets: a point only when every seed is bracketed (a seed unstable from the smallest
    # rate has its edge anywhere below it, a censored one anywhere above: a bound, never a point)
    mids = [math.log(e.first_unstable * e.last_stable) / 2 for e in edges if e.ratio is not None]
    return {"lo": lo, "hi": hi, "censored": censored, "all_censored": bool(edges) and all(e.censored for e in edges),
            "centre": None if censored or lo is None or not mids else math.exp(_mean(mids)),
            "ratio": None if lo is None or hi is None else hi / lo,
            "per_seed": [{"seed": s, **e.to_dict()} for s, e in by_seed.items()]}  # fmt: skip


def seed_sign(none: Edge, warm: Edge, resolution: float | None = RESOLUTION) -> int | None:
    """One seed's warm-up contrast from the two arms' edges, each known to its bracket: +1 (the warm-up arm was
    stable at or above a learning rate where the no-warm-up arm was already unstable: the brackets are disjoint,
    so the warm-up edge is the higher one; by how much is not asked, and the gap may be as small as two brackets
    that touch), -1 (the reverse), 0 (the brackets overlap and both are resolved to ``resolution``: no order the
    bisection can see; the edges may still differ by less than resolution squared), None (open: a censored arm, an arm unstable from
    the smallest learning rate, whose edge could be anywhere below it, or a bracket wider than ``resolution``,
    e.g. a bisection run that failed, whose overlap says nothing; ``resolution`` None: no width asked).

    Disjoint brackets decide whatever their widths; overlapping ones only when both are narrow: two arms both
    unstable from the smallest rate, or a bracket of one grid step (x2.15) over a resolved one, would otherwise
    count as "no difference" and push the sign test towards "not needed" (found in review, issue 40).

    Why the sign and not a size: the sign test over seeds (:func:`warmup_verdict`) needs only that, where warm-up
    makes no difference, a seed is as likely to come out +1 as -1; both arms are bisected on the same midpoints,
    so touching brackets are as likely either way under that null. A magnitude threshold would be a second rule
    the issue did not ask for (a review of 2026-11-27 found the words "a gap beyond the resolution" here and in
    the report, which the code never applied: the words were wrong, the rule stays)."""
    lo_n, hi_n, lo_w, hi_w = none.last_stable or 0.0, none.first_unstable, warm.last_stable or 0.0, warm.first_unstable
    if hi_n is not None and lo_w >= hi_n:
        return 1
    if hi_w is not None and lo_n >= hi_w:
        return -1
    if hi_n is None or hi_w is None or none.last_stable is None or warm.last_stable is None:
        return None
    if resolution is not None and max(none.ratio, warm.ratio) > resolution * (1 + 1e-9):  # type: ignore[type-var]
        return None
    return 0


def _binom_tail(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2)."""
    return math.fsum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def warmup_verdict(signs: Sequence[int | None], *, alpha: float = SIGN_ALPHA) -> dict[str, Any]:
    """Combine the seeds' contrasts (:func:`seed_sign`) by a one-sided sign test. With n seeds that decide, k of
    them +1: ``needed`` when P(X >= k | n, 1/2) <= alpha (a seed with 0 or -1 counts against: the question is
    whether warm-up raises the edge, which a seed shows by disjoint brackets); ``not needed`` when the seeds that do not say +1
    are as significant the other way; else ``inconclusive`` (the seeds disagree, or agree but are too few for
    the test: with 2 seeds p >= 0.25); ``undecided`` when no seed decides (censored arms)."""
    decided = [s for s in signs if s is not None]
    n, k = len(decided), sum(s == 1 for s in decided)
    p_needed = _binom_tail(k, n) if n else None
    p_not = _binom_tail(n - k, n) if n else None
    if not n:
        verdict, why = "undecided", ("no seed decides (a censored arm, an arm unstable from the smallest lr, or "
                                     "overlapping brackets wider than the resolution)")
    elif p_needed <= alpha:  # type: ignore[operator]
        verdict, why = "needed", f"{k} of {n} seeds raise the edge (disjoint brackets; sign test p = {p_needed:.3g})"
    elif p_not <= alpha:  # type: ignore[operator]
        verdict, why = "not needed", f"{n - k} of {n} seeds do not (sign test p = {p_not:.3g})"
    else:
        verdict = "inconclusive"
        why = (f"the seeds disagree: {k} of {n} raise the edge (disjoint brackets)" if 0 < k < n else
               f"{max(k, n - k)} of {n} seeds agree, too few for the sign test (p = {min(p_needed, p_not):.3g} > "
               f"{alpha:g})")  # type: ignore[type-var]
    return {"verdict": verdict, "why": why, "signs": list(signs), "plus": k, "decided": n,
            "undecided_seeds": len(signs) - n, "p_needed": p_needed, "p_not_needed": p_not}  # fmt: skip


def edge_rows_by_seed(cells: Sequence[Cell], *, unigram: float | None = None, margin: float = MARGIN
                      ) -> dict[tuple[str, str, int], dict[int, Edge]]:  # fmt: skip
    """Each seed's :func:`edge` per (scheme, warm-up, width), from its finished runs (holes left out), each run's
    failure read by :func:`curve_failures` (``unigram`` None: divergence only)."""
    out: dict[tuple[str, str, int], dict[int, dict[float, tuple[float | None, float | None, str]]]] = {}
    for c in cells:
        if c.status in ("completed", "diverged", "cached"):
            out.setdefault((c.scheme, c.warmup, c.width), {}).setdefault(c.seed, {})[c.lr] = (c.final, c.l0, c.status)
    return {k: {s: edge(curve_failures(r, unigram=unigram, margin=margin)) for s, r in sorted(v.items())}
            for k, v in out.items()}  # fmt: skip


def mean_lr_factor(cfg: SweepConfig, arm: str) -> float:
    """A warm-up arm's mean learning rate over its run, as a share of lr_max: its own schedule (the runs' linear
    warm-up, eq. (1), then lr_max held), averaged over updates 1..updates. 1 for ``none``; a 100-update warm-up in
    300 updates: 0.835; 40 in 300: 0.935."""
    # the schedule a run of the arm trains with (_train_config's), whatever the scheme, width, rate and seed
    run = _train_config(cfg, Context(translation_updates_per_epoch=1), scheme=cfg.schemes[0], warmup=arm,
                        width=cfg.widths[0], lr=1.0, seed=1)  # fmt: skip
    sched = build_schedule(run.schedule, 1.0, cfg.updates, 1)
    return math.fsum(sched(t) for t in range(1, cfg.updates + 1)) / cfg.updates


def warmup_verdicts(rows: Sequence[dict[str, Any]], warmup: str, *, resolution: float | None = RESOLUTION,
                    alpha: float = SIGN_ALPHA, factor: float = 1.0) -> dict[tuple[str, int], dict[str, Any]]:  # fmt: skip
    """:func:`warmup_verdict` per scheme x width for one warm-up arm against ``none``, seed by seed (the seeds both
    arms have; :func:`seed_sign` at the edge search's ``resolution``), at level ``alpha``. The rows'
    ``edge['per_seed']`` carry the edges (analyze). ``factor``: the warm-up arm's rates are read times it before
    they are compared (:func:`mean_lr_factor`: on the scale of the mean rate each run trained at, the second reading
    the report gives beside the verdict)."""
    by = {(r["scheme"], r["warmup"], r["width"]): r for r in rows}
    out = {}
    for scheme, width in sorted({(r["scheme"], r["width"]) for r in rows}):
        none, warm = by.get((scheme, "none", width)), by.get((scheme, warmup, width))
        if not none or not warm:
            continue
        if _incomplete(none, warm):  # a run that failed or has not finished could hold the edge
            out[(scheme, width)] = {**warmup_verdict([]), "seeds": [], "why": "a run of an arm failed or has not "
                                    "finished"}  # fmt: skip
            continue
        en = {e["seed"]: Edge(e["last_stable"], e["first_unstable"]) for e in none["edge"]["per_seed"]}
        ew = {e["seed"]: Edge(None if e["last_stable"] is None else e["last_stable"] * factor,
                              None if e["first_unstable"] is None else e["first_unstable"] * factor)
              for e in warm["edge"]["per_seed"]}  # fmt: skip
        seeds = sorted(set(en) & set(ew))
        out[(scheme, width)] = {**warmup_verdict([seed_sign(en[s], ew[s], resolution) for s in seeds], alpha=alpha),
                                 "seeds": seeds}
    return out


def _arm_verdicts(rows: Sequence[dict[str, Any]], cfg: SweepConfig, arms_run: Sequence[str]
                  ) -> dict[tuple[str, int], dict[str, Any]]:  # fmt: skip
    """sweep.json's per-arm verdicts, per scheme x width: the verdict, each arm's mean-rate factor and the same seeds
    on the scale of the mean rate each run trained at (RULES["mean_rate"]); each arm's test run once for all cells."""
    factors = {w: mean_lr_factor(cfg, w) for w in arms_run}
    plain = {w: warmup_verdicts(rows, w, resolution=cfg.resolution) for w in arms_run}
    scaled = {w: warmup_verdicts(rows, w, resolution=cfg.resolution, factor=factors[w]) for w in arms_run}
    return {k: {"verdicts": {w: plain[w].get(k) for w in arms_run}, "mean_lr_factor": factors,
                "verdicts_mean_rate": {w: scaled[w].get(k) for w in arms_run}}
            for k in {(r["scheme"], r["width"]) for r in rows}}  # fmt: skip


def verdict_truth(v: dict[str, Any] | None) -> bool | None:
    """A verdict as diagnose's ground truth: True needed, False not needed, None otherwise."""
    return {"needed": True, "not needed": False}.get(v["verdict"]) if v else None


def _slope_box(xs: Sequence[float], boxes: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """The range of the least-squares slope sum c_i y_i (c_i = (x_i - mean)/Sxx) over y_i in [lo_i, hi_i] (log
    learning rates; -inf/inf for an open side)."""
    mx = _mean(xs)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    lo = hi = 0.0
    for x, (a, b) in zip(xs, boxes):
        c = (x - mx) / sxx
        if c == 0:
            continue
        lo += c * (a if c > 0 else b)
        hi += c * (b if c > 0 else a)
    return lo, hi


def width_law(rows: Sequence[dict[str, Any]], scheme: str, warmup: str) -> dict[str, Any]:
    """The width law of the stability edge for one scheme x warm-up, from the seeds: for each seed, the range of
    least-squares log-log slopes over the widths its edges allow (each log-edge in [log last_stable,
    log first_unstable]; a censored width is [log last_stable, inf): a bound, never a point), and the interval
    over seeds (the union of the seeds' ranges: seed spread and resolution together). Set beside -1 (the edge
    inversely proportional to d) and Theorem 1's 1/(d sqrt(ln d)) (:func:`predicted_slope`); ``contains`` says
    which of them the interval holds. None bounds where a side is open. ``seed_mean``: the mean over seeds of each
    seed's slope through its brackets' centres, its 95% t-interval over seeds (low, high) and that interval
    widened by the seeds' mean half-range (the resolution: low_res, high_res), which ``mean_contains`` sets -1 and
    Theorem 1 against; when every seed in ``seeds`` (those with an edge at every width) is bracketed at every
    width and there are 3 or more; else None."""
    mine = sorted((r for r in rows if r["scheme"] == scheme and r["warmup"] == warmup and r.get("edge")
                   and r["edge"]["per_seed"] and not r.get("missing_lrs")),
                  key=lambda r: r["width"])  # fmt: skip
    widths = [r["width"] for r in mine]
    seeds = sorted(set.intersection(*[{e["seed"] for e in r["edge"]["per_seed"]} for r in mine])) if mine else []
    per_seed = []
    for s in seeds:
        boxes = []
        for r in mine:
            e = next(e for e in r["edge"]["per_seed"] if e["seed"] == s)
            boxes.append((math.log(e["last_stable"]) if e["last_stable"] else -math.inf,
                          math.log(e["first_unstable"]) if e["first_unstable"] else math.inf))
        if len(widths) > 1:
            lo, hi = _slope_box([math.log(w) for w in widths], boxes)
            # the slope through the brackets' geometric centres, the middle of the range (the least-squares slope
            # is linear in the log-edges): None when a width is censored (no centre)
            centre = (lo + hi) / 2 if all(math.isfinite(a) and math.isfinite(b) for a, b in boxes) else None
            per_seed.append({"seed": s, "lo": lo if math.isfinite(lo) else None,
                             "hi": hi if math.isfinite(hi) else None, "centre": centre})
    lo = None if not per_seed or any(p["lo"] is None for p in per_seed) else min(p["lo"] for p in per_seed)
    hi = None if not per_seed or any(p["hi"] is None for p in per_seed) else max(p["hi"] for p in per_seed)
    predicted = predicted_slope(widths) if len(widths) > 1 else None
    # The seeds' mean slope with a 95% Student-t interval over seeds, from each seed's centre slope: the seeds as
    # the noise (issue 40), where the union above is the envelope of every seed's every possible slope. Each
    # centre is off its seed's true slope by at most half its range (the resolution, h_s). That error enters the
    # seeds' spread only where it differs between seeds; seeds that share brackets (the bisection's midpoints
    # are the same for every seed) share most of it, and the t-interval cannot see it. So the interval that
    # mean_contains judges is the t-interval widened on each side by the seeds' mean h (exact for these seeds:
    # the mean of their true slopes lies within mean centre +- mean h, the slope being linear in the
    # log-edges), "low_res"/"high_res"; "low"/"high" stay the t-interval of the centres alone. Only with every
    # seed bracketed at every width (a censored width has no centre; a seed absent at a width is left out of
    # ``seeds`` above) and at least 3 seeds (2 leave one degree of freedom, t = 12.7: no interval worth printing).
    centres = [p["centre"] for p in per_seed]
    mean = None
    if len(centres) >= 3 and all(c is not None for c in centres):
        h = _mean([(p["hi"] - p["lo"]) / 2 for p in per_seed])
        mean = {**mean_ci(centres).to_dict(), "resolution": h}
        mean.update(low_res=mean["low"] - h, high_res=mean["high"] + h)

    def inside(x: float | None, a: float | None = lo, b: float | None = hi) -> bool | None:
        if x is None or not per_seed:
            return None
        return (a is None or a <= x) and (b is None or x <= b)

    return {"scheme": scheme, "warmup": warmup, "widths": widths, "seeds": seeds, "per_seed": per_seed,
            "lo": lo, "hi": hi, "predicted_post_ln": predicted,
            "censored": [r["width"] for r in mine if r["edge"]["censored"]],
            "contains": {"-1": inside(-1.0), "theorem_1": inside(predicted)},
            "seed_mean": mean,
            "mean_contains": None if mean is None else {"-1": inside(-1.0, mean["low_res"], mean["high_res"]),
                                                         "theorem_1": inside(predicted, mean["low_res"],
                                                                             mean["high_res"])}}  # fmt: skip


def predicted_slope(widths: Sequence[int]) -> float:
    """The least-squares slope, over ``widths``, of log(1/(d sqrt(ln d))) against log d: Theorem 1's width law for
    Post-LN's maximum stable learning rate on log-log axes (the module docstring derives it)."""
    xs = [math.log(d) for d in widths]
    ys = [-math.log(d) - 0.5 * math.log(math.log(d)) for d in widths]
    return _ls_slope(xs, ys)


def _ls_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    mx, my = _mean(xs), _mean(ys)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    return math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx


def slope_resolution(widths: Sequence[int], per_decade: int) -> float | None:
    """The half-width of the range of least-squares log-log slopes over ``widths`` that the measured frontiers
    allow. A maximum stable learning rate f is the largest stable grid point, so the true frontier lies in
    [f, f x 10^(1/per_decade)): each log-frontier is known to a step delta = ln(10)/per_decade. With x = ln d,
    the slope is sum (x_i - mean) y_i / Sxx, so over that box of frontiers it ranges over
    delta x sum |x_i - mean| / Sxx; half of it is returned. Slopes closer than this cannot be told apart: 1.11 over
    d = 64 and 128 at three points per decade (Theorem 1's whole predicted slope), 0.55 over 64-256, 0.44 over
    64-512. None with fewer than two widths."""
    if len(widths) < 2:
        return None
    xs = [math.log(w) for w in widths]
    mx = _mean(xs)
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    return math.log(10) / per_decade * math.fsum(abs(x - mx) for x in xs) / (2 * sxx)


def width_slope(rows: Sequence[dict[str, Any]], scheme: str, warmup: str, *, per_decade: int) -> dict[str, Any]:
    """The measured log-log slope of the maximum stable learning rate against width for one scheme x warm-up
    (least squares over the widths that have a frontier and no missing grid point; None with fewer than two),
    beside Theorem 1's, and its resolution (:func:`slope_resolution` on a grid of ``per_decade`` points per
    decade)."""
    mine = [r for r in rows if r["scheme"] == scheme and r["warmup"] == warmup]
    # a curve with holes (failed or unfinished grid points) has no reliable frontier
    pts = sorted((r["width"], r["lr_tolerance"]) for r in mine if r["lr_tolerance"] and not r.get("missing_lrs"))
    widths = sorted({r["width"] for r in mine})
    measured = _ls_slope([math.log(w) for w, _ in pts], [math.log(lr) for _, lr in pts]) if len(pts) > 1 else None
    censored = sorted(r["width"] for r in mine if r.get("tolerance_censored"))
    fitted = [w for w, _ in pts]
    return {"scheme": scheme, "warmup": warmup, "widths": fitted, "measured": measured, "censored": censored,
            "predicted_post_ln": predicted_slope(widths) if len(widths) > 1 else None,
            "resolution": slope_resolution(fitted, per_decade)}  # fmt: skip


# -------------------------------------------------------------------------------------------------------------
# diagnose held against the sweep


def _rank(row: dict[str, Any]) -> int:
    """How far a curve got: 0 never trained (diverged everywhere, or never ``margin`` below l0), 1 trained but
    never left the unigram plateau, 2 has a frontier."""
    return 2 if row["lr_tolerance"] is not None else 1 if row.get("plateau") else 0


def _incomplete(none: dict[str, Any] | None, warm: dict[str, Any] | None) -> bool:
    """An arm not run, or with holes in its grid (failed or unfinished runs): the hole could hold the frontier."""
    return none is None or warm is None or bool(none.get("missing_lrs")) or bool(warm.get("missing_lrs"))


def _pair_truth(none: dict[str, Any] | None, warm: dict[str, Any] | None) -> bool | None:
    if _incomplete(none, warm):
        return None
    rn, rw = _rank(none), _rank(warm)
    if rn == rw == 2:
        both_top = bool(none.get("tolerance_censored")) and bool(warm.get("tolerance_censored"))
        return None if both_top else none["lr_tolerance"] < warm["lr_tolerance"]
    if rn < rw:
        return True
    if rn == 2 and rw == 0:
        return False
    return None


def tolerance_truth(rows: Sequence[dict[str, Any]], warmup: str | None = None) -> dict[tuple[str, int], bool | None]:
    """The pre-issue-40 reading, on the near-best band (LR tolerance), kept to set beside the edge's verdicts
    (:func:`warmup_truth`): does the no-warm-up arm's LR tolerance fall below the warm-up arm's? It is not a
    stability statement (no run of the committed sweeps diverged) and has no allowance for the seed noise.

    * Both arms have a frontier: warm-up is needed when the no-warm-up frontier is below the warm-up one; None
      when both are the top of the grid (two lower bounds: the grid cannot tell them apart).
    * The no-warm-up arm got less far (:func:`_rank`: it never trained, or stayed on the unigram plateau, where
      the warm-up arm got further): warm-up is needed. This is the paper's Post-LN without warm-up. A no-warm-up
      arm starts at lr_max, so being slower than the arm whose first updates are small cannot be a delay.
    * The warm-up arm got less far: only when it never trained at all while the no-warm-up arm has a frontier is
      that "not needed" (False). A warm-up arm on the plateau beside a no-warm-up frontier is None: a warm-up
      spends its first updates at small learning rates, so in a short run it can be merely late.
    * Both arms equally far without a frontier (both on the plateau, both never trained), or one arm not run or
      incomplete (a grid point failed or has not finished: the hole could hold the frontier): None, no evidence
      either way.

    ``warmup``: the warm-up arm to hold against ``none`` (``paper``, ``adam``). None: every warm-up arm the rows
    hold, combined: needed (True) when any arm says needed (some warm-up widens the usable range of learning
    rates, which is the question); else None when an arm is absent or incomplete at that scheme x width (the
    missing arm could be the one that widens it); else not needed (False) when an arm decides it; else None.
    With several arms "any" has more chances to read a one-grid-step difference of noise as a need: seeds
    measure that."""
    if warmup is not None:
        return {key: _pair_truth(none, warm) for key, (none, warm) in arms(rows, warmup).items()}  # fmt: skip
    pairs = [arms(rows, w) for w in warm_arms(rows)]
    out: dict[tuple[str, int], bool | None] = {}
    for key in sorted({(r["scheme"], r["width"]) for r in rows}):
        said = [_pair_truth(*p[key]) for p in pairs]
        holes = any(_incomplete(*p[key]) for p in pairs)
        out[key] = True if True in said else None if holes else False if False in said else None
    return out


def warmup_truth(rows: Sequence[dict[str, Any]], warmup: str | None = None, *, resolution: float | None = RESOLUTION,
                 factors: dict[str, float] | None = None) -> dict[tuple[str, int], bool | None]:  # fmt: skip
    """The sweep's ground truth per scheme x width (issue 40): the seeds' sign test on the stability edge
    (:func:`warmup_verdicts`): True ``needed``, False ``not needed``, None ``inconclusive`` or ``undecided``.
    ``warmup``: one arm against ``none``; None: every warm-up arm the rows hold, True when any arm's verdict is
    needed at SIGN_ALPHA / (the number of arms), False when every arm's is not needed, else None. ``resolution``:
    the edge search's (:func:`seed_sign`). ``factors``: per arm, the factor its rates are read times
    (:func:`mean_lr_factor`: the mean-rate reading); none: 1.

    Why the division (Bonferroni): "some warm-up is needed" reads m sign tests and says yes when any one passes,
    which, where no warm-up helps, happens with a chance up to m x alpha; at alpha / m it stays within alpha. "Not
    needed" asks every arm to pass, which is no easier than one: no correction. With one arm (every sweep of the
    held-out score) nothing changes; with two arms 5 seeds cannot reach "needed" (p = 1/32 > 0.025): 6 can."""
    names = [warmup] if warmup is not None else warm_arms(rows)
    alpha = SIGN_ALPHA / max(1, len(names))
    per = [warmup_verdicts(rows, w, resolution=resolution, alpha=alpha, factor=(factors or {}).get(w, 1.0))
           for w in names]  # fmt: skip
    out: dict[tuple[str, int], bool | None] = {}
    for key in sorted({(r["scheme"], r["width"]) for r in rows}):
        said = [verdict_truth(p.get(key)) for p in per]
        out[key] = True if True in said else False if said and all(x is False for x in said) else None
    return out


def diagnose_agreement(verdicts: dict[tuple[str, int], bool | None], truth: dict[tuple[str, int], bool | None],
                       scores: dict[tuple[str, int], tuple[float | None, float | None]] | None = None
                       ) -> dict[str, Any]:  # fmt: skip
    """``diagnose``'s warm-up verdict beside the sweep's ground truth, per scheme x width: the table, and the
    agreement over the pairs where both say something. ``scores``: diagnose's (S, threshold) per pair, kept in
    the table so that a reader sees how far from its threshold each verdict was."""
    table = []
    for key in sorted(set(verdicts) | set(truth)):
        v, t = verdicts.get(key), truth.get(key)
        score, threshold = (scores or {}).get(key, (None, None))
        table.append({"scheme": key[0], "width": key[1], "diagnose": v, "sweep": t,
                      "agree": None if v is None or t is None else v == t,
                      "score": score, "threshold": threshold})  # fmt: skip
    decided = [r for r in table if r["agree"] is not None]
    return {"table": table, "decided": len(decided), "agree": sum(r["agree"] for r in decided),
            "wrong": [(r["scheme"], r["width"]) for r in decided if not r["agree"]]}  # fmt: skip


def diagnoses(cfg: SweepConfig, *, steps: int = 4, keys: Sequence[tuple[str, int]] | None = None
              ) -> dict[tuple[str, int], Any]:  # fmt: skip
    """``diagnose`` at initialisation (a :class:`~normlab.analysis.diagnose.Diagnosis`) for each scheme x width of
    the sweep (``keys``: only these): the cells' model configuration, initialised by diagnose with its own seed 0
    (the cells train from seed 1: another draw of the same initialisation), on synthetic batches (seconds per
    model)."""
    ctx = Context(translation_updates_per_epoch=1)
    out = {}
    for scheme in cfg.schemes:
        for width in cfg.widths:
            if keys is not None and (scheme, width) not in keys:
                continue
            model = _train_config(cfg, ctx, scheme=scheme, warmup="none", width=width, lr=cfg.lr_min, seed=1).model
            out[(scheme, width)] = diagnose_config(model, cfg.task, steps=steps, seed=0,
                                                   max_tokens=min(cfg.max_tokens, 1024))  # fmt: skip
    return out


def diagnose_verdicts(cfg: SweepConfig, *, steps: int = 4) -> dict[tuple[str, int], bool | None]:
    """``diagnose``'s verdict at initialisation for each scheme x width of the sweep (:func:`diagnoses`)."""
    return {k: d.warmup_advised for k, d in diagnoses(cfg, steps=steps).items()}


# -------------------------------------------------------------------------------------------------------------
# reading the runs


def read_cell(spec: RunSpec, run_dir: Path, status: str, scheme: str, warmup: str) -> tuple[Cell, dict[str, Any]]:
    """One run directory as a :class:`Cell` (final validation NLL, l0 from the first training record) and its
    record for sweep.json (the cell, the validation points, a thinned training curve)."""
    records = []
    path = run_dir / "metrics.jsonl"
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill
                continue
    train = [r for r in records if r.get("type") == "train"]
    valid = [r for r in records if r.get("type") == "valid"]
    l0 = train[0].get("nll") if train and train[0].get("update") == 1 else None
    final = valid[-1].get("nll") if valid and status != "diverged" else None
    c = spec.config
    cell = Cell(scheme, warmup, c.model.d_model, c.optim.lr, c.seed, final if _finite(final) else None,
                l0 if _finite(l0) else None, status)  # fmt: skip
    stride = max(1, len(train) // 100)
    curve = [[r["update"], r["nll"] if _finite(r.get("nll")) else None] for r in train[::stride]]
    # the run's own training time, precision (trainer summary: "auto" resolved on the machine that trained it) and
    # machine (CPU, GPU, precision, torch), so that a later invocation that only re-reads the runs, maybe elsewhere,
    # still knows what they cost, in which arithmetic and where: a report re-read on a laptop must not pass its
    # runs off as the laptop's (meta.device is the invocation's machine)
    summary = RunDir(run_dir).summary()
    rec = {**dataclasses.asdict(cell), "name": spec.name, "diverged": diverged(cell.final, cell.l0, status),
           "valid": [[r["update"], r.get("nll")] for r in valid], "train": curve,
           "elapsed_s": summary.get("elapsed_s"), "precision": summary.get("precision"),
           "machine": run_machine(run_dir, summary) or None}  # fmt: skip
    return cell, rec


# -------------------------------------------------------------------------------------------------------------
# --import: an earlier sweep's cells as finished runs of this one

# The SweepConfig fields that enter a run's TrainConfig (_train_config) apart from its coordinates (scheme, warm-up,
# width, lr, seed): two sweeps that agree on all of them train a run of one name identically, on the same data, so
# a run of the one is a run of the other. The grid's lists (schemes, warm-ups, widths, lrs, seeds) only choose which
# runs there are; the analysis' rules (margin, plateau_fails, resolution, lr_cap, find_edge) read the runs and are
# this sweep's own.
TRAINING_FIELDS = ("task", "warmup_fraction", "ffn_ratio", "n_heads", "layers", "updates", "vocab_size", "max_tokens",
                   "max_positions", "block_size", "dropout", "train_subset", "valid_subset", "eval_every")


@dataclasses.dataclass(frozen=True)
class Imported:
    """The runs ``--import`` takes from earlier sweeps (:func:`import_cells`): name -> (cell, its sweep.json record,
    with ``imported_from``), and per source what it gave, for sweep.json's ``meta.imported``."""

    runs: dict[str, tuple[Cell, dict[str, Any]]]
    sources: list[dict[str, Any]]


def _sweep_json(path: str | Path) -> Path:
    p = Path(path)
    if p.is_dir():
        p = next((q for q in (p / "sweep.json", p / "report" / "sweep.json") if q.is_file()), p / "sweep.json")
    if not p.is_file():
        raise ConfigError(f"--import {path}: no sweep.json there (give the file, or the folder that holds it or its "
                          "report/)")
    return p


def import_cells(paths: Sequence[str | Path], cfg: SweepConfig, ctx: Context, *, precision: str, device: str = "cpu",
                 say: Any = None) -> Imported:
    """The finished runs (completed or diverged) recorded in earlier sweeps' sweep.json files that are runs of
    ``cfg``: a curve of this sweep (its schemes, warm-ups, widths, seeds 1..cfg.seeds), from a sweep whose
    :data:`TRAINING_FIELDS` are this one's and whose runs trained in this sweep's ``precision`` ("bf16" or "fp32");
    :func:`check_import_data` then asks for the same validation targets. Such a run is never trained again: the
    edge search plans from it as from a run in OUT/runs (why: a sweep written before the edge search, issue 40, kept
    only its sweep.json, and its censored curves need the runs above the grid, not the grid again). A run finished
    in OUT/runs wins over an imported one, and the first import that has a name wins over later ones. A mismatch, a
    sweep.json that does not record its precision (its runs' arithmetic would be a guess) or one that gives no run of
    this sweep is a ConfigError that says what differs. Not checked, so said in the report: the normlab version that
    trained the imported runs (a change of the training code since is not seen; sweep.json records the version,
    which stayed 0.1.0 through every change so far) and the device (a warning when its type, CPU or GPU, is not
    this sweep's: the same precision on other hardware rounds differently)."""
    runs: dict[str, tuple[Cell, dict[str, Any]]] = {}
    sources = []
    mine = cfg.to_dict()
    for path in paths:
        src = _sweep_json(path)
        data = json.loads(src.read_text(encoding="utf-8"))
        theirs, meta = data.get("config") or {}, data.get("meta") or {}
        if differ := [f"{k}={theirs.get(k)!r} (here {mine[k]!r})" for k in TRAINING_FIELDS if theirs.get(k) != mine[k]]:
            raise ConfigError(f"--import {src}: its runs were trained otherwise: {', '.join(differ)}; --set the "
                              "same values to extend it")
        if meta.get("precision") not in ("bf16", "fp32"):
            raise ConfigError(f"--import {src}: it does not record one precision its runs trained in (meta.precision "
                              f"{meta.get('precision')!r}), so they cannot be told from this sweep's {precision} runs")
        if meta["precision"] != precision:
            raise ConfigError(f"--import {src}: its runs trained in {meta['precision']}, this sweep's would in "
                              f"{precision}: pass --precision {meta['precision']} to extend it")
        taken, other, dup, took_s = 0, 0, 0, 0.0
        for rec in data.get("cells") or []:
            if rec.get("status") not in FINISHED:
                continue
            ok = (rec.get("scheme") in cfg.schemes and rec.get("warmup") in cfg.warmups
                  and rec.get("width") in cfg.widths and 1 <= int(rec.get("seed", 0)) <= cfg.seeds)  # fmt: skip
            try:
                name = run_spec(cfg, ctx, rec["scheme"], rec["warmup"], rec["width"], rec["lr"], rec["seed"]).name \
                    if ok else None
            except ConfigError:
                name = None
            if name is None or name != rec.get("name"):
                other += 1
                continue
            if name in runs:
                dup += 1
                continue
            cell = Cell(rec["scheme"], rec["warmup"], rec["width"], rec["lr"], rec["seed"], rec.get("final"),
                        rec.get("l0"), rec["status"])  # fmt: skip
            # where it was first read from: a sweep extended with --import and imported again keeps its origin
            runs[name] = (cell, {**rec, "imported_from": rec.get("imported_from") or str(path)})
            taken += 1
            took_s += rec.get("elapsed_s") or 0.0
        if not taken and not dup:
            have = sorted({(r.get("scheme"), r.get("warmup"), r.get("width"), r.get("seed")) for r in
                           data.get("cells") or []}, key=str)  # fmt: skip
            raise ConfigError(f"--import {src}: none of its {len(data.get('cells') or [])} runs is a finished run of "
                              f"this sweep (schemes {list(cfg.schemes)}, warm-ups {list(cfg.warmups)}, widths "
                              f"{list(cfg.widths)}, seeds 1-{cfg.seeds}); its curves (scheme, warm-up, width, seed): "
                              f"{have[:6]}{' ...' if len(have) > 6 else ''}: --scale or --set to match them")
        theirs_gpu = not str(meta.get("device", "")).startswith("CPU")  # "CPU (...)" or a GPU's name
        if say is not None and theirs_gpu != (device == "cuda"):
            say(f"warning: --import {src}: written on {meta.get('device')} (where its runs trained, unless it was "
                f"re-read elsewhere), this sweep's runs train on {'a GPU' if device == 'cuda' else 'the CPU'}: the "
                "same precision, rounded by other kernels")
        sources.append({"path": str(path), "runs": taken, "not_this_sweep": other, "duplicates": dup,
                        "train_time_s": took_s,
                        "precision": meta["precision"], "normlab_version": meta.get("normlab_version"),
                        "device": meta.get("device"), "baseline": data.get("baseline")})  # fmt: skip
    return Imported(runs, sources)


def check_import_data(imported: Imported, baseline: dict[str, Any]) -> None:
    """A ConfigError when an imported sweep's runs saw other validation targets than this sweep's: its unigram loss
    U or their token count differ (another corpus, split or tokenizer; the sweep's config does not record the
    corpus, its baseline does)."""
    for src in imported.sources:
        theirs = src.get("baseline") or {}
        if theirs.get("tokens") != baseline["tokens"] or not math.isclose(
                theirs.get("unigram_loss", math.nan), baseline["unigram_loss"], abs_tol=1e-6):
            raise ConfigError(f"--import {src['path']}: its validation targets are not this sweep's (U = "
                              f"{theirs.get('unigram_loss')} nats over {theirs.get('tokens')} tokens; here "
                              f"{baseline['unigram_loss']:.6g} over {baseline['tokens']}): another corpus or split")


# -------------------------------------------------------------------------------------------------------------
# the command: run the grid, read the cells, write sweep.json and the page

RULES = {
    "stability": "one criterion for every scheme, warm-up arm and width (sweep.curve_failures): a run is unstable when "
    "it diverged (below) or collapsed: at a learning rate above its curve's best one it ends on the unigram plateau "
    "(final validation NLL >= U - margin, U the unigram loss of the validation targets), the failure the paper "
    "reports for Post-LN without warm-up (a model that did not learn, Figure 2); a curve whose best run never left "
    "the plateau fails at every learning rate",
    "divergence": "a run diverged when its loss became non-finite (the trainer stops it) or its final validation "
    "NLL ends strictly above l0, its NLL at initialisation (training left it worse than not training); "
    "divergence_edge is the edge under this half of the criterion alone",
    "edge": "per seed, the largest stable learning rate below the smallest unstable one (last stable, first "
    "unstable); the sweep extends each curve above lr_max on the same grid while its highest run is stable, up to "
    "lr_cap, then bisects until their ratio is <= resolution; a curve with no unstable run is censored (a lower "
    "bound); the frontier's interval is [min over seeds of last stable, max over seeds of first unstable)",
    "verdict": "warm-up needed per seed pair when the warm-up arm's last stable lr is at or above the no-warm-up "
    "arm's first unstable one (disjoint brackets: the same seed stable with warm-up at a rate where it was unstable "
    "without; the sign of the difference, whatever its size, which may be as small as touching brackets); "
    "combined over seeds by a one-sided "
    "sign test at sign_alpha (a seed whose brackets overlap, both resolved to the resolution, or whose warm-up arm "
    "is lower counts against; a seed with a censored arm, an arm unstable from the smallest lr or an overlapping "
    "bracket wider than the resolution decides nothing): needed, not needed, inconclusive (the seeds disagree, or "
    "too few agree), undecided (no seed decides); with several warm-up arms, a cell needs warm-up when some arm's "
    "test passes at sign_alpha / (the number of arms) (Bonferroni), and does not when every arm's says not needed",
    "mean_rate": "beside the verdict, the same seeds and test with the warm-up arm's rates times its mean learning "
    "rate over the run as a share of lr_max (sweep.mean_lr_factor: 0.835 for a 100-update warm-up in 300 updates, "
    "0.935 for 40): a warm-up arm trains at a lower mean rate than its lr_max, and a constant run at that mean is "
    "a no-warm-up run at factor x lr_max, whose stability the no-warm-up arm's edge tells; this reading asks whether "
    "the warm-up arm stays stable where that constant run of equal mean rate would not (the verdict compares equal "
    "peak rates; which comparison is right is a choice, not a measurement). The scaled brackets lie off the shared bisection "
    "midpoints, so a seed's 0 spans about two bisection steps and + asks a wider gap than in the verdict: the "
    "reading is conservative for 'needed', and its 0 and - both mean 'not beyond'. Written on 2026-11-28 after an "
    "audit pointed at it and after a preview of the LM sweep's partial seeds 2-5 report, before the schemes sweep "
    "ran; the verdict above stays the truth diagnose is scored against",
    "margin": MARGIN,
    "lr_tolerance": "LR tolerance (until issue 40 called 'maximum stable lr'; a near-best band, not a stability "
    "boundary): the largest grid point within `margin` nats of the best final loss l* of its curve that did not "
    "diverge ('>=' when it is the top of the grid); none when l* is not `margin` below l0 (the curve never trained) "
    "or not `margin` below the unigram loss U (never left the plateau); with seeds, on the seed-mean curve; on the "
    "log grid's runs only",
    "sensitivity": "Wortsman et al. 2023 (arXiv 2309.14322): E_{eta in grid}[min(l(eta), l0) - l*], the mean over "
    "the log grid, a diverged point counting as l0; with seeds, the mean (and sd) of the seeds' own values",
    "width_law": "Theorem 1: Post-LN's last-layer gradient is O(d sqrt(ln d)); a stable lr inversely proportional to "
    "it scales as 1/(d sqrt(ln d)); predicted slope = least-squares slope of log(1/(d sqrt(ln d))) against log d "
    "over the widths run. Measured: per seed, the range of least-squares log-log slopes of the edge that its "
    "brackets allow (a censored width is a bound, open above), and over seeds their union; set beside -1 and the "
    "prediction; with 3 or more seeds bracketed at every width, also the seeds' mean of their slopes through the "
    "brackets' centres, with a 95% t-interval over seeds",
}


def _say(line: str) -> None:
    import sys

    print(line, file=sys.stderr, flush=True)


_RUN_OVERHEAD_S = 1.0  # measured: the smoke sweep's 24 runs took ~1 s each in a warm worker (2 shared cores)
_WORKER_START_S = 15.0  # measured: the first run of each worker took ~15 s (imports, first data load)


def sweep_estimate(specs: Sequence[RunSpec], ctx: Context, *, jobs: int, threads: int) -> tuple[str, float | None]:
    """budget.estimate per width (its probe times one model, beside jobs - 1 processes training it as the grid
    will; the widths of a sweep differ in cost), summed: the line to print, and the pace it comes from (seconds per
    update of the grid, progress.pace's prior: the grid's ETA starts from it), None where there is no probe."""
    if specs and specs[0].kind not in PROBED:
        return (f"estimate: not available for the {specs[0].kind} task (budget.py probes translation and language "
                "models)"), None  # fmt: skip
    by_width: dict[int, list[RunSpec]] = {}
    for s in specs:
        by_width.setdefault(s.config.model.d_model, []).append(s)
    parts, seconds, updates, warning = [], 0.0, 0, ""
    for width, group in sorted(by_width.items()):
        e = estimate(group, ctx, jobs=jobs, threads=threads, compete=True)
        seconds += e.seconds
        updates += e.updates
        warning = warning or e.warning
        parts.append(f"d={width}: {e.seconds_per_update:.3f} s/update")
    # budget.estimate counts training and validation work only; a short run also pays its model build, data
    # loading and checkpoint (~1 s on the smoke scale here) and each worker its start-up (~15 s, torch imports)
    overhead = len(specs) * _RUN_OVERHEAD_S / max(1, jobs) + _WORKER_START_S
    pace = (seconds + overhead) / max(1, updates)
    line = (f"estimate: {len(specs)} runs, {updates:,} updates ({'; '.join(parts)}) / {jobs} job(s) + validation "
            f"+ ~{overhead:.0f} s of per-run overhead = ~{(eta(updates, prior=pace) or 0.0) / 60:.1f} min on this "
            "machine")  # fmt: skip
    return line + (f"\nWARNING: {warning}" if warning else ""), pace


def edge_runs_per_curve(cfg: SweepConfig) -> tuple[int, int]:
    """The runs the edge search adds to one seed's curve after its grid, counted by running :func:`plan_edge` on
    synthetic curves whose first unstable rate lies at points spread over the grid and above it: (the most where
    the grid brackets the edge, the most anywhere). From one grid step to ``resolution`` the bisections halve the
    log of the bracket's ratio (3 from 2.15x to 1.2x, RESOLUTION's note; the midpoints' 3-digit rounding can move
    that by one at other settings, which is why they are counted, not computed); an edge above the grid adds the
    grid points run one by one up to it (6 from 1e-2 to the cap 1), and its own bisection unless the curve is still
    stable at the cap. A curve unstable from lr_min adds none."""
    if not cfg.find_edge:
        return 0, 0
    grid = lr_grid(cfg.lr_min, cfg.lr_max, cfg.per_decade)
    lo, hi = math.log(grid[0]), math.log(max(cfg.lr_cap, grid[-1]) * 10 ** (1 / cfg.per_decade))
    points = [math.exp(lo + (hi - lo) * (k + 0.5) / 400) for k in range(400)]
    added = {t: edge_search_runs(cfg, t) for t in points}  # each synthetic curve searched once
    return max((n for t, n in added.items() if t <= grid[-1]), default=0), max(added.values())


def edge_search_runs(cfg: SweepConfig, threshold: float) -> int:
    """The runs :func:`plan_edge` adds to a synthetic curve of ``cfg``'s grid that is unstable from ``threshold``
    up (math.inf: a curve still stable at the cap, censored)."""
    if not cfg.find_edge:
        return 0
    runs = {lr: lr >= threshold for lr in lr_grid(cfg.lr_min, cfg.lr_max, cfg.per_decade)}
    n = 0
    while (nxt := plan_edge(runs, lr_min=cfg.lr_min, per_decade=cfg.per_decade, cap=cfg.lr_cap,
                            resolution=cfg.resolution)) is not None:  # fmt: skip
        runs[nxt] = nxt >= threshold
        n += 1
    return n


def edge_estimate_line(cfg: SweepConfig, pace: float | None, *, jobs: int) -> str:
    """The edge search's share, which the grid's estimate leaves out (its runs depend on the grid's outcomes): the
    curves' typical and largest number of added runs (:func:`edge_runs_per_curve`), each of ``cfg.updates``, at the
    estimate's pace (seconds per update of the grid, all lanes together). An upper reading: a run that diverges
    stops early, and a finished run is never trained again."""
    typical, most = edge_runs_per_curve(cfg)
    if not most:
        return ""
    curves = len(cfg.schemes) * len(cfg.warmups) * len(cfg.widths) * cfg.seeds
    hours = most * curves * cfg.updates * (pace or 0.0) / 3600
    unit, scale = ("h", 3600) if hours >= 1 else ("min", 60)
    when = "" if pace is None else (f", ~{typical * curves * cfg.updates * pace / scale:.1f} to "
                                    f"{most * curves * cfg.updates * pace / scale:.1f} {unit} more at the same pace")
    step, censored = 10 ** (1 / cfg.per_decade), edge_search_runs(cfg, math.inf)
    bisect = (f"up to {typical} bisection runs a curve where the grid brackets its edge (from the grid's step "
              f"x{step:.2f} to the resolution {cfg.resolution:g}x)" if typical else
              f"no bisection where the grid brackets a curve's edge (the grid's step x{step:.2f} is within the "
              f"resolution {cfg.resolution:g}x)")  # fmt: skip
    return (f"edge search, not in that estimate: {curves} curves; {bisect}, up to {most} where the edge lies above "
            f"the grid, {censored} where a curve is still stable at the cap {cfg.lr_cap:g}: {typical * curves:,} to "
            f"{most * curves:,} runs{when} on {jobs} job(s) (fewer: a diverged run stops early, and the curves of "
            "a sweep run before keep what they ran)")  # fmt: skip


def unigram_baseline(data: Any, task: str) -> dict[str, Any]:
    """U, the plateau a curve must leave (:func:`frontier`): metrics.unigram_plateau of the prepared data's
    validation targets, as reproduce.baselines computes the gates of report/claims.py (for the masked LM the
    copy-aware value)."""
    return unigram_plateau(data.splits["valid"].all_targets(), data.splits["train"].all_targets(),
                           masked_lm=task == "mlm")


def run_sweep(cfg: SweepConfig, out: str | Path, *, jobs: int = 0, threads: int = 0, corpus: str = "",
              device: str = "auto", precision: str = "auto", probe: bool = True, diagnose: bool = True,
              say: Any = _say, train: bool = True, launcher: Any = "local",
              progress: ProgressSettings | None = None, sync: str | Path | None = None,
              imports: Sequence[str | Path] = ()) -> dict[str, Any]:  # fmt: skip
    """Run the sweep's grid into ``out`` (resumable: finished runs are kept), then write ``out/report/``:
    sweep.json, loss_vs_lr.png, frontier.png, index.html and SWEEP.md. Returns sweep.json's content. ``train``
    False (``--report-only``): run nothing and write the report from the runs finished so far; a cell that has not
    finished is a missing grid point (:func:`analyze`), and ``meta["unfinished"]`` counts them with the runs the
    edge search would still add (``meta["edge_unrun"]``, not among ``meta["runs"]``). ``launcher``: where
    the runs go (a kind or a LauncherConfig, launchers.py); diagnose and the report run here. ``progress``: the
    grid's live display or progress lines (progress.py), whose ETA starts from the estimate's pace. ``sync``: a
    folder of finished runs' small files shared between machines (``--sync``; grid.sync_in / sync_out): this
    sweep's runs finished there when it starts are taken (the edge search's too: :func:`spec_of_name`), and each
    run finished here is copied there as it ends (not with ``--report-only``). ``imports``: earlier sweeps'
    sweep.json files whose finished runs are this sweep's (``--import``, :func:`import_cells`): read, never
    trained again, marked ``imported_from`` in sweep.json."""
    import os
    import platform
    import time

    import torch

    t0 = time.perf_counter()
    launch = as_config(launcher)
    if train:
        launch.require_engine()  # one line naming the extra to install, before any data is prepared
    out = Path(out)
    store = Path(sync) if sync else None
    if not train and not (imports or any_finished(out / "runs") or (store and any_finished(store))):
        raise ConfigError(f"--report-only: no run of this sweep has finished in {out} yet; run it without "
                          "--report-only first")
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    cores = os.cpu_count() or 1
    if launch.remote:  # the cluster's nodes, not this machine's cores, bound what runs at once
        threads = threads or 1
    else:
        jobs = jobs or (1 if cuda else cores)
        threads = threads or max(1, cores // jobs)
    shape = (f"{jobs} job(s) x {threads} thread(s)" if not launch.remote else
             f"{launch.kind}: {'every ready run' if jobs <= 0 else f'at most {jobs} runs'} at once x {threads} "
             "thread(s)")  # fmt: skip
    ctx = Context(translation_updates_per_epoch=1, corpus=corpus if cfg.task == "translation" else "",
                  mlm_corpus=corpus if cfg.task in ("mlm", "lm") else "", device=device, precision=precision)  # fmt: skip
    specs = sweep_runs(cfg, ctx)
    where = {}
    for s in specs:
        scheme, warmup = next((sc, w) for sc in cfg.schemes for w in cfg.warmups
                              if s.group.startswith(f"{sc.replace('/', '+')}-{w}-d"))  # fmt: skip
        where[s.name] = (scheme, warmup)
    grid_names = {s.name for s in specs}
    lookup = functools.partial(spec_of_name, cfg, ctx)  # this sweep's run of a name (the edge search's too), or None
    grid_specs = {s.name: s for s in specs}
    imported = Imported({}, [])
    data, baseline = None, None
    if imports:  # before anything is written or synced: a refused import leaves OUT and the store as they were
        if launch.remote and precision == "auto":
            raise ConfigError(f"--import with --launcher {launch.kind}: pass --precision (bf16 or fp32), the "
                              "arithmetic the cluster's runs train in, to be matched against the imported runs'")
        resolved = precision if precision != "auto" else (
            "bf16" if autocast_dtype(precision, pick_device(device)) is not None else "fp32")
        imported = import_cells(imports, cfg, ctx, precision=resolved, device="cuda" if cuda else "cpu", say=say)
        data = prepare(specs[0].config.data, specs[0].config.model.max_positions)
        baseline = unigram_baseline(data, cfg.task)
        check_import_data(imported, baseline)
        for name, (cell, _rec) in imported.runs.items():  # an imported edge-search run: beyond the grid
            if name not in grid_specs:
                specs.append(run_spec(cfg, ctx, cell.scheme, cell.warmup, cell.width, cell.lr, cell.seed))
                where[name] = (cell.scheme, cell.warmup)
    out.mkdir(parents=True, exist_ok=True)

    def imported_only(name: str) -> bool:
        """An imported run with no finished run of its name here (a run finished here wins)."""
        return name in imported.runs and run_status(out / "runs" / name) not in FINISHED

    def status(name: str) -> str | None:
        """A run's status: its run directory's, else an imported run's."""
        return imported.runs[name][0].status if imported_only(name) else run_status(out / "runs" / name)

    if store is not None:  # before anything counts what has finished
        sync_in(specs, out, store, say, lookup=lookup, train=train)
        if train:  # what an earlier session finished here without --sync goes there too (this sweep's only)
            for d in sorted((out / "runs").glob("*")) if (out / "runs").is_dir() else []:
                if (spec := grid_specs.get(d.name) or lookup(d.name, d)) is not None:  # a grid point's own spec
                    sync_out(spec, out, store, say)
    say(f"normlab sweep --scale {cfg.scale} -> {out}: {len(grid_names)} runs ({len(cfg.schemes)} schemes x "
        f"{len(cfg.warmups)} warm-ups x {len(cfg.widths)} widths x {len(cfg.lrs)} learning rates x {cfg.seeds} "
        f"seed(s))" + (f" + {len(specs) - len(grid_names)} imported beyond the grid" if len(specs) > len(grid_names)
                       else "") + f"; {shape}")  # fmt: skip
    todo = [s for s in specs if status(s.name) not in FINISHED]
    for src in imported.sources:
        say(f"--import {src['path']}: {src['runs']} finished run(s) of this sweep (trained in {src['precision']}; "
            f"that sweep.json written by normlab {src['normlab_version']} on {src['device']})"
            + (f"; {src['not_this_sweep']} of other curves or settings not read" if src["not_this_sweep"] else "")
            + (f"; {src['duplicates']} already imported" if src["duplicates"] else ""))
    if not train:
        check_not_stale(specs, out)  # runs of another preset or --set must not be read as this sweep's
        note = others_note(specs, out / "runs")  # finished runs in OUT that are not this grid's, in words
        if len(todo) == len(specs):
            raise ConfigError(f"--report-only: no run of this sweep ({cfg.scale} preset) has finished in {out} yet."
                              + (note or " Run it without --report-only first."))
    # the tokenizer and binarized splits, once, before the workers (they would race to build them); the unigram
    # loss of the validation targets from them (a curve must get below it to have a frontier: module doc)
    first = specs[0].config
    if data is None:
        data = prepare(first.data, first.model.max_positions)
        baseline = unigram_baseline(data, cfg.task)
    say(f"unigram loss of the validation targets U = {baseline['unigram_loss']:.3f} nats ({baseline['tokens']:,} "
        f"tokens): a curve has a frontier only when its best run ends more than {cfg.margin:g} nats below it")  # fmt: skip
    pace = None  # the estimate's seconds per grid update: where the grid's ETA starts
    if todo and train:
        # the estimate counts validation passes (budget.evaluations): it needs the epoch's real length, thousands
        # of updates here, so that runs of a few hundred validate every eval_every updates and at their end only
        ctx = dataclasses.replace(ctx, translation_updates_per_epoch=updates_per_epoch(data, first))
        if probe and launch.remote:
            say(f"estimate: none with --launcher {launch.kind} (the probe times this machine, not the cluster's)")
        elif probe:
            text, pace = sweep_estimate(todo, ctx, jobs=jobs, threads=threads)
            say(text)
            if text.startswith("estimate:") and (line := edge_estimate_line(cfg, pace, jobs=jobs)):
                say(line)
    outcomes: dict[str, Any] = {}
    read: dict[str, tuple[Cell, dict[str, Any]]] = {}

    def read_all() -> list[Cell]:
        for s in specs:
            here = run_status(out / "runs" / s.name) or "absent"
            if outcomes.get(s.name) is not None and outcomes[s.name].status in ("failed", "skipped"):
                here = outcomes[s.name].status
            if here not in FINISHED and s.name in imported.runs:
                read[s.name] = imported.runs[s.name]
            elif s.name not in read or read[s.name][0].status != here:
                read[s.name] = read_cell(s, out / "runs" / s.name, here, *where[s.name])
        return [read[s.name][0] for s in specs]

    # The edge search (issue 40): plan_edges decides which learning rate each seed's curve needs next, from that
    # curve's finished runs; finished runs are never trained again. Training, a curve's next run starts as soon as
    # every run of that curve has ended (run_grid's ``more``), not when every curve of the grid has: a curve's plan
    # reads its own runs only, so the runs planned are the same as in rounds, without the GPU or the cores idling
    # at each round's slowest run. --report-only replays the search on the finished runs, in rounds, and counts
    # what it would still run. A planned name already in the grid (a failed run's rate, planned again) is not
    # added twice: the next invocation retries it.
    known = {sp.name for sp in specs}
    failed: set[str] = set()  # runs that ended without finishing in this invocation: holes, no longer pending
    unigram = baseline["unigram_loss"] if cfg.plateau_fails else None

    def plan(cells: list[Cell]) -> tuple[list[RunSpec], int, int]:
        """The search's next runs for ``cells``' curves, added to the sweep; and, with --report-only, the curves
        whose next run has not finished (their edge is provisional) and how many of those runs are not already
        runs of the sweep (the unfinished ones the search adds)."""
        nonlocal specs
        planned = plan_edges(cells, lr_min=cfg.lr_min, per_decade=cfg.per_decade, cap=cfg.lr_cap,
                             resolution=cfg.resolution, margin=cfg.margin, unigram=unigram)  # fmt: skip
        new, waiting, beyond = [], 0, 0
        for p in planned:
            sp = run_spec(cfg, ctx, *p[:3], p[4], p[3])
            if not train and status(sp.name) not in FINISHED:
                waiting += 1  # a curve stopped at an unfinished run, whether the grid's or the search's
                beyond += sp.name not in known
                continue
            if sp.name in known:
                continue
            known.add(sp.name)
            where[sp.name] = (p[0], p[1])
            new.append(sp)
        specs = specs + new
        return new, waiting, beyond

    def more(name: str | None) -> list[RunSpec]:
        """run_grid's hook: the next run of every curve none of whose runs is still to run or running."""
        if not cfg.find_edge:
            return []
        if name is not None and run_status(out / "runs" / name) not in FINISHED:
            failed.add(name)
        cells = read_all()
        return plan(idle_curves(cells, [sp.name for sp in specs], failed))[0]

    pending, beyond = 0, 0
    while True:
        if train:
            mine = [s for s in specs if not imported_only(s.name)]  # the runs this sweep trains (or has)
            for name, o in run_grid(mine, out, jobs=jobs, threads=threads, launcher=launch, cuda=cuda,
                                    say=say, progress=progress, pace=pace, more=more,
                                    on_end=(lambda n, _o: sync_out(next(sp for sp in specs if sp.name == n), out,
                                                                   store, say)) if store else None
                                    ).items():  # fmt: skip
                if o.status != "cached" or name not in outcomes:  # a run of an earlier pass keeps its outcome
                    outcomes[name] = o
        cells = read_all()
        if not cfg.find_edge:
            break
        new, pending, beyond = plan(cells)  # --report-only: the finished runs join, the others are counted
        if not new:
            break
    if not train:  # after the edge search's replay: its finished runs are this sweep's, not another grid's
        todo = [s for s in specs if status(s.name) not in FINISHED]
        note = others_note(specs, out / "runs")  # finished runs in OUT that are not this sweep's, in words
        if todo and note:  # its missing cells may be those runs, elsewhere
            say(f"--report-only: {len(todo)} of this sweep's {len(specs)} runs have not finished (marked '*')." + note)
        elif note:  # e.g. a folder of the 189-run preset (named quick before stop 29) read with --scale quick
            say(f"--report-only: this report reads the {len(specs)} runs of this sweep only." + note)
    cells = read_all()
    records = [read[s.name][1] for s in specs]
    trained_here = [r for r in records if not r.get("imported_from")]  # the runs of this sweep's own OUT/runs
    rows = analyze(cells, margin=cfg.margin, unigram=baseline["unigram_loss"], grid=cfg.lrs,
                   plateau_fails=cfg.plateau_fails)
    truth = warmup_truth(rows, resolution=cfg.resolution)
    truth_per_arm = {w: warmup_truth(rows, w, resolution=cfg.resolution) for w in warm_arms(rows)}
    by_arm = _arm_verdicts(rows, cfg, list(truth_per_arm))
    agreement = None
    if diagnose:  # models at initialisation only (seconds each): measured again by --report-only too, so the
        # verdicts always follow the present rule, not the rule of whichever version wrote the last report
        say("diagnose: warm-up verdicts at initialisation for each scheme x width")
        found = diagnoses(cfg)
        agreement = diagnose_agreement({k: d.warmup_advised for k, d in found.items()}, truth,
                                       {k: (d.score, d.threshold) for k, d in found.items()})
    wall = time.perf_counter() - t0
    preset = SWEEP_SCALES[cfg.scale].to_dict() if cfg.scale in SWEEP_SCALES else None
    result = {
        "config": cfg.to_dict(),
        "lrs": list(cfg.lrs),
        "warmup_updates": cfg.warmup_updates,  # the paper arm's (sweep.json before the adam arm had only it)
        "warmup_lengths": {w: cfg.warmup_length(w) for w in cfg.warmups},
        "rules": {**RULES, "margin": cfg.margin, "lr_cap": cfg.lr_cap, "resolution": cfg.resolution,
                  "find_edge": cfg.find_edge, "sign_alpha": SIGN_ALPHA,
                  "plateau_fails": cfg.plateau_fails},
        "baseline": baseline,
        "frontier": rows,
        "width_law": [width_law(rows, s, w) for s in cfg.schemes for w in cfg.warmups],
        "tolerance_width_law": [width_slope(rows, s, w, per_decade=cfg.per_decade) for s in cfg.schemes
                                for w in cfg.warmups],
        "warmup_truth": [{"scheme": k[0], "width": k[1], "warmup_needed": v,
                          "per_arm": {w: t.get(k) for w, t in truth_per_arm.items()},
                          **by_arm.get(k, {}),
                          "tolerance_needed": tolerance_truth(rows).get(k)} for k, v in truth.items()],
        "diagnose": agreement,
        "cells": records,
        "meta": {
            "scale": cfg.scale, "description": cfg.description, "normlab_version": __version__,
            # what --set changed from the preset: the description is the preset's, not this grid's
            "overrides": {k: v for k, v in cfg.to_dict().items() if v != preset.get(k)} if preset else {},
            "torch": torch.__version__, "python": platform.python_version(),
            "device": torch.cuda.get_device_name(0) if cuda else f"CPU ({cpu_name()}, "
            f"{cores} cores)", "threads": shape, "launcher": launch.kind, "wall_time_s": wall,
            # None when a run has no time (failed, or from before the runs recorded it): a partial sum would
            # understate the grid's cost without saying so
            "train_time_s": None if any(r["elapsed_s"] is None for r in trained_here) else
            math.fsum(r["elapsed_s"] for r in trained_here),
            # what the runs trained in (bf16 autocast or fp32; both named when the runs were mixed)
            "precision": ", ".join(sorted({r["precision"] for r in records if r.get("precision")})) or None,
            "finished": time.strftime("%Y-%m-%d %H:%M:%S"), "runs": len(specs),
            "outcomes": {k: sum(o.status == k for o in outcomes.values())
                         for k in ("completed", "diverged", "failed", "skipped", "cached")}
                        | {"imported": len(records) - len(trained_here)} if train else
                        {k: sum(r["status"] == k for r in trained_here) for k in ("completed", "diverged", "running",
                                                                                 "absent", "failed")}
                        | {"imported": len(records) - len(trained_here)},
            "report_only": not train,
            # the most runs the search added to one curve (its depth: rounds of the search before issue 40's
            # asynchronous search, which runs them as each curve is ready)
            "edge_rounds": max(Counter(c.curve for c, sp in zip(cells, specs) if sp.name not in grid_names).values(),
                               default=0),
            "edge_runs": len(specs) - len(grid_names),
            # runs the edge search still has to run (--report-only on a partial folder): the edges are provisional
            "edge_pending": pending,
            "unfinished": sum(r["status"] not in FINISHED + ("cached",) for r in records) + beyond,
            # of those, the runs the search would add beyond the sweep's (not among meta.runs, not grid points)
            "edge_unrun": beyond,
            # --import: the earlier sweeps whose finished runs this one read instead of training them
            "imported": [{k: v for k, v in src.items() if k != "baseline"} for src in imported.sources],
        },
    }  # fmt: skip
    report = out / "report"
    write_sweep_report(result, report)
    say(f"report: {report / 'index.html'} ({wall / 60:.1f} min)")
    for line in table_lines(result):
        say(line)
    return result


def table_lines(result: dict[str, Any]) -> list[str]:
    """The stability edge per scheme x warm-up (rows) and width (columns), the LR tolerance beside it."""
    widths = result["config"]["widths"]
    lines = ["stability edge [last stable, first unstable) over seeds (LR tolerance); '>=' = censored, no run "
             "unstable up to the cap (a lower bound); '<' = unstable from the smallest lr: no run of a seed's curve "
             "left the unigram plateau (or all diverged), so the run is too short or every rate too high, which "
             "the sweep cannot tell apart; '*' = incomplete (a run failed or has not finished)",
             f"{'scheme':<14}{'warm-up':<9}" + "".join(f"{'d=' + str(w):>34}" for w in widths)]  # fmt: skip
    by = {(r["scheme"], r["warmup"], r["width"]): r for r in result["frontier"]}
    for scheme in result["config"]["schemes"]:
        for warmup in result["config"]["warmups"]:
            cells = []
            for w in widths:
                r = by.get((scheme, warmup, w))
                tol = "" if not r or r["lr_tolerance"] is None else f" ({r['lr_tolerance']:.3g})"
                text = (edge_text(r.get("edge")) if r else "-") + tol + ("*" if r and r.get("missing_lrs") else "")
                cells.append(f"{text:>34}")
            lines.append(f"{scheme:<14}{warmup:<9}" + "".join(cells))
    return lines


def rerender(path: str | Path, *, say: Any = _say) -> dict[str, Any]:
    """Re-read a written sweep.json under the present definitions and rewrite its report beside it (sweep.json,
    the figures, index.html, SWEEP.md), training nothing: the cells' records carry every run's l0, final loss and
    status, which is all the analysis reads. diagnose's verdicts and scores are kept from the file (they are
    models at initialisation, not runs). The edge search's runs are not in a sweep written before it: the learning
    rates it would run next are counted in ``meta.edge_pending`` and the edges read as censored where no run was
    unstable. For the committed folders under docs/results, whose run directories were not committed (for a folder
    with its runs, ``--report-only`` reads them)."""
    path = Path(path)
    old = json.loads(path.read_text(encoding="utf-8"))
    cfg = SweepConfig.from_dict({k: v for k, v in old["config"].items() if k in {f.name for f in
                                 dataclasses.fields(SweepConfig)}})  # fmt: skip
    cells = [Cell(c["scheme"], c["warmup"], c["width"], c["lr"], c["seed"], c["final"], c["l0"], c["status"])
             for c in old["cells"]]  # fmt: skip
    # cells written before the status of a failed or absent run was kept as such count as missing grid points
    u = (old.get("baseline") or {}).get("unigram_loss")
    rows = analyze(cells, margin=cfg.margin, unigram=u, grid=cfg.lrs, plateau_fails=cfg.plateau_fails)
    truth = warmup_truth(rows, resolution=cfg.resolution)
    arms_present = warm_arms(rows)
    by_arm = _arm_verdicts(rows, cfg, arms_present)
    planned = plan_edges(cells, lr_min=cfg.lr_min, per_decade=cfg.per_decade, cap=cfg.lr_cap,
                         resolution=cfg.resolution, unigram=u if cfg.plateau_fails else None,
                         margin=cfg.margin) if cfg.find_edge else []  # fmt: skip
    agreement = None
    if old.get("diagnose"):
        found = {(r["scheme"], r["width"]): r for r in old["diagnose"]["table"]}
        agreement = diagnose_agreement({k: r["diagnose"] for k, r in found.items()}, truth,
                                       {k: (r.get("score"), r.get("threshold")) for k, r in found.items()})
    records = [{**c, "diverged": unstable(c["final"], c["l0"], c["status"])} for c in old["cells"]]
    result = {**old, "config": cfg.to_dict(), "lrs": list(cfg.lrs),
              "rules": {**RULES, "margin": cfg.margin, "lr_cap": cfg.lr_cap, "resolution": cfg.resolution,
                        "find_edge": cfg.find_edge, "sign_alpha": SIGN_ALPHA,
                        "plateau_fails": cfg.plateau_fails},
              "frontier": rows,
              "width_law": [width_law(rows, s, w) for s in cfg.schemes for w in cfg.warmups],
              "tolerance_width_law": [width_slope(rows, s, w, per_decade=cfg.per_decade) for s in cfg.schemes
                                      for w in cfg.warmups],
              "warmup_truth": [{"scheme": k[0], "width": k[1], "warmup_needed": v,
                                "per_arm": {w: warmup_truth(rows, w, resolution=cfg.resolution).get(k)
                                            for w in arms_present},
                                **by_arm.get(k, {}),
                                "tolerance_needed": tolerance_truth(rows).get(k)} for k, v in truth.items()],
              "diagnose": agreement, "cells": records,
              # a sweep written with the edge search keeps its counts (its runs are among the cells); one written
              # before it says that its edges are the grid's alone
              "meta": {**old["meta"], "edge_rounds": old["meta"].get("edge_rounds", 0),
                       "edge_runs": old["meta"].get("edge_runs", 0), "edge_pending": len(planned),
                       "rerendered": "re-read from sweep.json under the present definitions (no run trained)"
                       + ("; the edge search's runs were not run" if planned and not old["meta"].get("edge_runs")
                          else "")}}  # fmt: skip
    write_sweep_report(result, path.parent)
    for line in table_lines(result):
        say(line)
    return result


def _sweep_label(path: Path) -> str:
    """The sweep's folder, relative to a docs/results tree where it is in one (docs/results/sweep-lm ->
    sweep-lm), else its own name."""
    parts = path.resolve().parent.parts
    return "/".join(parts[parts.index("results") + 1:]) if "results" in parts else str(path.parent)


# The settings that make a cell's runs what they are (with its scheme and width): two sweeps that agree on them
# ran the same experiment, whatever their grids, seeds, warm-up arms, rules or machines. The warm-up arms are left
# out on purpose: two sweeps that share the no-warm-up arm of a cell measured part of the same thing.
EXPERIMENT_FIELDS = ("task", "layers", "ffn_ratio", "n_heads", "updates", "vocab_size", "max_tokens",
                     "max_positions", "block_size", "dropout", "train_subset", "valid_subset")  # fmt: skip


def held_out_cells(path: str | Path, *, measure: bool = True) -> list[dict[str, Any]]:
    """For diagnose held out (normlab/experiments/heldout.py, ``--held-out``), one sweep.json's cells: per scheme x
    width its task, depth, the seeds run, the sweep's truth under the present rules, diagnose's S (the file's
    table; measured for the cells it lacks when ``measure``, else None) and the shipped rule's verdict and
    threshold on that S today (:func:`~normlab.analysis.diagnose.score_verdict`, not the file's: a file written
    under an older threshold is read under today's), whether the cell was in view when the rule was designed
    (:data:`~normlab.analysis.diagnose.SEEN_IN_DESIGN`), and what makes it one experiment
    (:data:`EXPERIMENT_FIELDS`, for heldout's check that no experiment is counted twice), and the no-warm-up arm's
    stability edge over the seeds (``edge_none``, :func:`edge_summary`'s: its geometric centre is None where a seed
    is censored or unbracketed; heldout's rank test of S against it). ``path``: a sweep.json,
    its folder, or a sweep's ``--out`` folder (its report/sweep.json)."""
    path = Path(path)
    if path.is_dir():
        path = path / "sweep.json" if (path / "sweep.json").is_file() else path / "report" / "sweep.json"
    old = json.loads(path.read_text(encoding="utf-8"))
    if missing := [k for k in ("task", "layers") if k not in old["config"]]:
        # a default would label the cells with a depth (and a threshold) they may not have
        raise ValueError(f"{path}: its config does not say {' or '.join(missing)}; the cells' depth and task are "
                         "what diagnose's threshold depends on")
    cfg = SweepConfig.from_dict({k: v for k, v in old["config"].items()
                                 if k in {f.name for f in dataclasses.fields(SweepConfig)}})  # fmt: skip
    cells = [Cell(c["scheme"], c["warmup"], c["width"], c["lr"], c["seed"], c["final"], c["l0"], c["status"])
             for c in old["cells"]]  # fmt: skip
    u = (old.get("baseline") or {}).get("unigram_loss")
    rows = analyze(cells, margin=cfg.margin, unigram=u, grid=cfg.lrs, plateau_fails=cfg.plateau_fails)
    truth = warmup_truth(rows, resolution=cfg.resolution)
    # the second reading (RULES["mean_rate"]): warm-up beyond the lower mean rate its arm trains at
    mean_rate = warmup_truth(rows, resolution=cfg.resolution,
                             factors={w: mean_lr_factor(cfg, w) for w in warm_arms(rows)})  # fmt: skip
    # the no-warm-up arm's edge (heldout's rank test: does S order the edges?)
    edge_none = {(r["scheme"], r["width"]): r.get("edge") or {} for r in rows if r["warmup"] == "none"}
    scores = {(r["scheme"], r["width"]): r.get("score") for r in (old.get("diagnose") or {}).get("table", [])}
    if measure and (lacking := [k for k in truth if k not in scores]):
        scores.update({k: d.score for k, d in diagnoses(cfg, keys=lacking).items()})
    seeds = {}
    for c in cells:
        if c.status in ("completed", "diverged", "cached"):
            seeds.setdefault((c.scheme, c.width), set()).add(c.seed)
    experiment = {k: old["config"].get(k, getattr(cfg, k)) for k in EXPERIMENT_FIELDS}
    label = _sweep_label(path)
    out = []
    for scheme, width in sorted(truth):
        s = scores.get((scheme, width))
        verdict, threshold = score_verdict(s, cfg.layers)
        out.append({"sweep": label, "path": str(path.resolve()), "task": cfg.task, "scheme": scheme,
                    "layers": cfg.layers, "width": width, "seeds": len(seeds.get((scheme, width), ())),
                    "truth": truth[(scheme, width)], "truth_mean_rate": mean_rate.get((scheme, width)),
                    "score": s, "threshold": threshold, "diagnose": verdict,
                    "edge_none": edge_none.get((scheme, width), {}),
                    "seen": (cfg.task, cfg.layers, scheme) in SEEN_IN_DESIGN,
                    "experiment": {**experiment, "scheme": scheme, "width": width}})  # fmt: skip
    return out


def add_arguments(p: Any) -> None:
    p.add_argument("--scale", default="quick", choices=list(SWEEP_SCALES),
                   help="smoke (seconds, tests), quick (Post-LN and Pre-LN, no warm-up or 100 updates, d=64 and 128, "
                   "3-3 layers: 56 grid runs of 300 updates, ~25 min on 2 AVX-512 BF16 cores, + ~35 edge-search "
                   "runs), standard (3 schemes x 3 warm-ups x d=64-256: 189 grid runs, ~2 h, + the edge search), full "
                   "(widths 64-512 at the paper's depth and batch; a GPU), lm (decoder-only LMs: 8 schemes x 2 warm-ups x d=64 and 128, 6 layers: 224 runs, ~3 h, "
                   "and the edge search), schemes (DeepNorm, Admin, B2T, ResiDual at quick's shape, 5 seeds: 560 grid "
                   "runs and the edge search, ~3.8 h measured on 2 Zen 5 cores)")  # fmt: skip
    p.add_argument("--out", help="output directory (default: sweep/SCALE)")
    add_set_argument(p, SweepConfig, note="the defaults shown are before --scale, which sets most of them")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel (default: one per CPU core, 1 on CUDA; "
                   "with --launcher ray or slurm, every run that is ready: the cluster queues them)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (default: cores / jobs; with ray or "
                   "slurm, 1): what each run requests from Ray or SLURM")
    add_launcher_arguments(p)
    p.add_argument("--no-estimate", action="store_true", help="skip the probe that estimates the wall time")
    p.add_argument("--no-diagnose", action="store_true", help="skip diagnose's warm-up verdicts beside the sweep")
    p.add_argument("--report-only", action="store_true", help="train nothing: write the report from the runs "
                   "finished so far in OUT (an unfinished cell is a missing grid point)")
    p.add_argument("--from-json", metavar="SWEEP_JSON", help="train nothing and read no runs: re-read a written "
                   "sweep.json (its cells) under the present definitions and rewrite the report beside it")
    p.add_argument("--held-out", metavar="SWEEP", nargs="+", help="train nothing: score diagnose's warm-up verdict "
                   "against these sweeps' ground truth (sweep.json files or their folders), on cells it was not "
                   "calibrated on, beside the baseline 'Post-LN needs warm-up'; writes HELD_OUT.md and held_out.json "
                   "into --out (default: held-out)")
    add_sync_argument(p)
    p.add_argument("--import", dest="imports", metavar="SWEEP", nargs="+", default=[], help="read the finished runs "
                   "recorded in earlier sweeps' sweep.json files (or their folders) as runs of this sweep, never "
                   "trained again: the same curves and training settings (use --set to match them) and precision; "
                   "e.g. to extend a sweep that kept only its sweep.json with the edge search's runs; they are not "
                   "copied to --sync's folder: another machine needs the same --import")
    p.add_argument("--corpus", default="", help="a directory of your own files (default: the vendored de-en / en-mono)")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"])
    add_progress_arguments(p)


def run(args: Any) -> int:
    if args.from_json:
        rerender(args.from_json)
        return 0
    if args.held_out:
        try:
            result = held_out([c for p in args.held_out for c in held_out_cells(p)])
        except ValueError as e:  # an experiment given twice, a file without its depth: one line, exit 2
            raise ConfigError(f"--held-out: {e}") from None
        files = write_held_out(result, args.out or "held-out")
        sh, un = result["shipped"], result["shipped_unseen"]
        _say(f"diagnose held out: the shipped rule agrees on {sh['agree']} of {sh['decided']} decided cells "
             f"({len(sh['schemes'])} schemes; {sh['undecided']} open, {sh['no_score']} without a verdict), the "
             f"baseline 'Post-LN needs warm-up' on {sh['baseline_agree']}, 'every scheme needs warm-up' on "
             f"{sh['always_agree']}; of the {un['decided']} decided cells never in view when the rule was designed, "
             f"{un['agree']} (baselines {un['baseline_agree']}, {un['always_agree']}); {files['md']}")
        m = result["mean_rate"]
        _say(f"  under the mean-rate reading (warm-up beyond its arm's lower mean rate): {m['agree']} of "
             f"{m['decided']} (baselines {m['baseline_agree']}, {m['always_agree']})")
        for sp in result["splits"]:
            ev = sp["evaluation"]
            _say(f"  refitted, {sp['split']}: {ev['agree']} of {ev['decided']} (baselines {ev['baseline_agree']}, "
                 f"{ev['always_agree']})")
        for r in result["edge_rank"]:
            if r["rho"] == r["rho"]:  # S against the no-warm-up edge (heldout._edge_rank); NaN: nothing to rank
                _say(f"  S against the no-warm-up edge, {r['sweep']}: Spearman's rho {r['rho']:+.2f} within each "
                     f"width over {r['n']} schemes (one-sided permutation p {r['p_below']:.3g}, schemes moved whole)")
        return 0
    cfg = SweepConfig.from_dict(apply_overrides(sweep_scale(args.scale).to_dict(), args.set))
    run_sweep(cfg, args.out or f"sweep/{cfg.scale}", jobs=args.jobs, threads=args.threads, corpus=args.corpus,
              device=args.device, precision=args.precision, probe=not args.no_estimate,
              diagnose=not args.no_diagnose, train=not args.report_only, launcher=launcher_from_args(args),
              progress=progress_from_args(args), sync=args.sync or None, imports=args.imports)  # fmt: skip
    return 0
