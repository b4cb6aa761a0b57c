"""The stability sweep (normlab/experiments/sweep.py): its grid, and the divergence rule, the frontier and the
LR sensitivity on synthetic loss tables; ``normlab sweep --scale smoke`` end to end."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from normlab.config import ConfigError
from normlab.device import cpu_name
from normlab.experiments.figures import Context
from normlab.experiments.sweep import (
    MARGIN,
    PAPER_WARMUP_FRACTION,
    Cell,
    SweepConfig,
    analyze,
    diagnose_agreement,
    diverged,
    frontier,
    lr_grid,
    lr_sensitivity,
    predicted_slope,
    sweep_runs,
    sweep_scale,
    tolerance_truth,
    warmup_truth,
    warmup_verdicts,
    width_law,
    width_slope,
)
from normlab.results import bracket_machines, machines, provenance, same_machine

LRS = (1e-4, 2.15e-4, 4.64e-4, 1e-3, 2.15e-3, 4.64e-3, 1e-2)
L0 = 9.0


# ---- the grid ----


def test_lr_grid_three_per_decade():
    assert lr_grid(1e-4, 1e-2, 3) == LRS
    assert lr_grid(1e-3, 1e-1, 1) == (1e-3, 1e-2, 1e-1)
    assert lr_grid(1e-4, 5e-4, 3) == (1e-4, 2.15e-4, 4.64e-4)  # the top is kept only when it is a grid point


def test_default_config_is_the_issue():
    cfg = SweepConfig()
    assert cfg.lrs == LRS and cfg.widths == (64, 128, 256, 512) and cfg.warmups == ("none", "paper")
    assert cfg.ffn_ratio == 2 and cfg.n_heads == 4  # FFN = 2 d, head size d/4 = 128 at d=512 (the paper's model)
    assert_close(PAPER_WARMUP_FRACTION, 4000 / 33000)
    assert cfg.warmup_updates == round(300 * 4000 / 33000) == 36


def test_config_is_strict():
    with pytest.raises(ConfigError, match="did you mean 'widths'"):
        SweepConfig(width=(64,))
    with pytest.raises(ConfigError, match="unknown placement 'postln'"):
        SweepConfig(schemes=("postln",))
    with pytest.raises(ConfigError, match="unknown norm"):
        SweepConfig(schemes=("pre/batchnorm",))
    with pytest.raises(ConfigError, match="repeated"):  # the same scheme spelt twice
        SweepConfig(schemes=("pre", "pre/layernorm"))
    with pytest.raises(ConfigError, match="not divisible"):
        SweepConfig(widths=(66,))
    with pytest.raises(ConfigError, match="increasing"):
        SweepConfig(widths=(128, 64))
    with pytest.raises(ConfigError, match="sweep scale"):
        sweep_scale("huge")
    # an lr_max between grid points is refused with its neighbours, not dropped without a word
    with pytest.raises(ConfigError, match="neighbours are 0.00215 and 0.00464"):
        SweepConfig(lr_min=1e-4, lr_max=3e-3, per_decade=3)
    with pytest.raises(ConfigError, match="neighbours are 0.000464 and 0.001"):  # just below a grid point
        SweepConfig(lr_min=1e-4, lr_max=9.93e-4, per_decade=3)
    with pytest.raises(ConfigError, match="neighbours are 0.0001 and 0.001"):
        SweepConfig(lr_min=1e-4, lr_max=9.8e-4, per_decade=1)
    for printed in (2.15e-3, 2.154e-3):  # a grid point as the tables print it, or more exactly
        assert SweepConfig(lr_min=1e-4, lr_max=printed, per_decade=3).lrs[-1] == 2.15e-3
    for per_decade in (1, 2, 3, 5, 10):  # every printed grid point is accepted as lr_max, and ends its own grid
        grid = SweepConfig(lr_min=1e-4, lr_max=1e-2, per_decade=per_decade).lrs
        assert len(grid) == 2 * per_decade + 1 and grid[-1] == 1e-2
        for k, point in enumerate(grid):
            assert SweepConfig(lr_min=1e-4, lr_max=point, per_decade=per_decade).lrs == grid[: k + 1]


def test_the_adam_warmup_arm_is_two_over_one_minus_beta2():
    """The adam arm: 2/(1 - beta2) updates of the task's Adam (Ma & Yarats 2021), whatever the run's length, and
    refused when it is not shorter than the run; its cells train with that warm-up and the task's betas."""
    cfg = SweepConfig(warmups=("none", "paper", "adam"), updates=300)
    assert [cfg.warmup_length(w) for w in cfg.warmups] == [0, 36, 100]  # beta2 = 0.98: 2 / 0.02
    assert SweepConfig(warmups=("adam",), updates=1000).warmup_length("adam") == 100  # not a share of the run
    assert SweepConfig(task="mlm", warmups=("adam",), updates=2001).warmup_length("adam") == 2000  # beta2 = 0.999
    with pytest.raises(ConfigError, match="adam warm-up takes 100 updates, not fewer than the run's updates=100"):
        SweepConfig(warmups=("none", "adam"), updates=100)
    with pytest.raises(ConfigError, match=r"adam warm-up takes 2000 updates.*updates=N with N > 2000\) or leave the "
                       r"arm out \(--set 'warmups=\[none,paper\]'\)"):
        SweepConfig(task="mlm", warmups=("none", "paper", "adam"), updates=300)  # the standard preset's arms
    with pytest.raises(ConfigError, match="each once"):
        SweepConfig(warmups=("adam", "adam"))
    with pytest.raises(ValueError, match="unknown warm-up arm"):
        cfg.warmup_length("cosine")
    specs = sweep_runs(SweepConfig(schemes=("post",), widths=(32,), per_decade=1, warmups=("none", "adam"),
                                   updates=150), Context(translation_updates_per_epoch=1))  # fmt: skip
    assert {s.name.split("-")[1]: s.config.schedule.warmup_updates for s in specs} == {"none": 0, "adam": 100}
    assert {s.config.optim.betas for s in specs} == {(0.9, 0.98)}
    assert all("warm-up 100" in s.label for s in specs if "-adam-" in s.name)


def test_every_cell_sees_the_same_data_and_seed():
    cfg = SweepConfig(schemes=("post", "pre/rmsnorm"), widths=(32, 64), n_heads=4, per_decade=1, seeds=2, updates=33)
    specs = sweep_runs(cfg, Context(translation_updates_per_epoch=1))
    assert len(specs) == 2 * 2 * 2 * 3 * 2 and len({s.name for s in specs}) == len(specs)
    assert {s.config.data for s in specs} == {specs[0].config.data}  # one data config: same batches, same order
    for s in specs:
        assert s.name == f"{s.group}-s{s.config.seed}"
        m = s.config.model
        assert m.d_ffn == 2 * m.d_model and m.n_heads == 4
        assert s.config.schedule.warmup_updates == (4 if "-paper-" in s.name else 0)  # 12.1% of 33
        assert s.config.schedule.decay == "constant" and s.config.max_updates == 33
    assert {s.config.model.norm for s in specs if s.name.startswith("pre+rmsnorm")} == {"rmsnorm"}


def test_the_quick_preset_is_a_subset_of_the_standard_one():
    """quick (the 30-minute preset) keeps standard's run shape and learning-rate grid and drops whole axes, so each
    of its 56 cells is a cell of standard's 189 with the same name and training config: the committed standard runs
    (docs/results/sweep-quick) check a quick run, and a quick run resumes into a standard folder."""
    from normlab.experiments.scales import SCALES
    from normlab.experiments.sweep import SWEEP_SCALES

    quick, standard = sweep_scale("quick"), sweep_scale("standard")
    assert set(SWEEP_SCALES) == {"smoke", "quick", "standard", "full", "lm", "schemes"}
    assert all(cfg.scale == name for name, cfg in SWEEP_SCALES.items())
    ctx = Context(translation_updates_per_epoch=1)
    small, big = sweep_runs(quick, ctx), {s.name: s for s in sweep_runs(standard, ctx)}
    assert len(small) == 2 * 2 * 7 * 2 == 56 and len(big) == 3 * 3 * 7 * 3 == 189
    for s in small:
        assert s.name in big and s.config == big[s.name].config, s.name
    assert quick.lrs == standard.lrs == LRS  # the issue's grid: the LR sensitivity is a mean over it
    assert quick.warmups == ("none", "adam") and quick.warmup_length("adam") == 100  # the arm that can find it
    # reproduce's `width` figure runs the preset its scale names
    assert {name: s.sweep for name, s in SCALES.items()} == {"smoke": "smoke", "quick": "quick", "full": "standard",
                                                             "long": "quick", "paper": "full"}  # fmt: skip


def test_the_schemes_preset_is_the_quick_shape_with_the_translation_schemes_and_five_seeds():
    """issue 40's held-out cells beyond post and pre: the schemes proposed on translation at the quick preset's
    shape, grid and arms (its cells sit beside edge-quick's), five seeds (the fewest the sign test can decide
    with), and every run a valid translation config."""
    from normlab.experiments.figures import Context

    quick, schemes = sweep_scale("quick"), sweep_scale("schemes")
    schemes.validate()
    assert schemes.schemes == ("deepnorm", "admin", "b2t", "resi_dual") and schemes.seeds == 5
    assert schemes.to_dict() | {"scale": "quick", "schemes": list(quick.schemes), "seeds": 1, "description": ""} == \
        quick.to_dict() | {"description": ""}
    specs = sweep_runs(schemes, Context(translation_updates_per_epoch=1))
    assert len(specs) == 4 * 2 * 7 * 2 * 5 == 560
    assert {s.config.model.placement.value for s in specs} == set(schemes.schemes)


def test_the_lm_preset_runs_every_scheme_the_issue_names_at_a_depth_where_mixln_differs():
    """issue 34's LM sweep: the eight schemes, both warm-up arms (40 updates at beta2 = 0.95), d=64 and 128, the
    quick preset's run shape and LR grid; 6 layers, where Mix-LN's floor(0.25 L) Post-LN layers are not zero."""
    from normlab.experiments.figures import Context

    lm = sweep_scale("lm")
    lm.validate()
    assert lm.task == "lm" and lm.scale == "lm"
    assert set(lm.schemes) == {"post", "pre", "peri", "lns", "mixln", "output", "pre/dyt", "hybridnorm"}
    assert lm.warmups == ("none", "adam") and lm.warmup_length("adam") == 40
    assert lm.widths == (64, 128) and lm.lrs == LRS and lm.updates == 300 and lm.dropout == 0.0
    ctx = Context(translation_updates_per_epoch=1, mlm_corpus="en-mono")
    runs = sweep_runs(lm, ctx)
    for m in {r.config.model for r in runs if r.config.model.placement == "mixln"}:
        assert 1 <= math.floor(m.mixln_alpha * m.decoder_layers) < m.decoder_layers  # Post-LN layers, then Pre-LN
    assert len(runs) == 8 * 2 * 2 * 7 == 224
    assert {r.config.data.task for r in runs} == {"lm"} and {r.config.model.encoder_layers for r in runs} == {0}


# ---- the divergence rule ----


def test_divergence_rule():
    assert not diverged(5.0, L0)
    assert not diverged(L0, L0)  # ending exactly where it started is not above it
    assert diverged(L0 + 1e-6, L0)  # ends above its loss at initialisation
    assert diverged(float("nan"), L0) and diverged(float("inf"), L0) and diverged(None, L0)
    assert diverged(5.0, L0, status="diverged")  # the trainer saw a non-finite loss
    assert not diverged(5.0, None)  # l0 unknown: only non-finite losses count


# ---- LR sensitivity (Wortsman et al. 2023) ----


def test_lr_sensitivity_by_hand():
    # l* = 5; min(l, l0) - l* = 1, 0, 2, 4 (the diverged point counts as l0 = 9) -> mean 7/4
    assert_close(lr_sensitivity([6.0, 5.0, 7.0, None], L0), 7 / 4)
    assert_close(lr_sensitivity([6.0, 5.0, 7.0, float("nan")], L0), 7 / 4)
    assert_close(lr_sensitivity([6.0, 5.0, 7.0, 12.0], L0), 7 / 4)  # above l0: capped at l0, as a divergence
    assert lr_sensitivity([5.0, 5.0, 5.0], L0) == 0.0  # flat: insensitive
    assert lr_sensitivity([None, None], L0) == 0.0  # all diverged: l* = l0 (frontier says "never trains")


# ---- the frontier on synthetic tables ----


def test_divergence_at_the_top_of_the_grid():
    finals = [6.0, 5.5, 5.2, 5.05, 5.0, float("nan"), float("inf")]
    c = frontier(LRS, finals, [L0] * 7, ["completed"] * 5 + ["diverged"] * 2)
    assert c.trained and c.best == 5.0 and c.best_lr == 2.15e-3
    assert c.diverged == (False,) * 5 + (True, True)
    assert c.lr_tolerance == 2.15e-3  # the best itself is the top of the stable range
    assert_close(c.sensitivity, (1.0 + 0.5 + 0.2 + 0.05 + 0 + 4 + 4) / 7)


def test_frontier_within_the_margin_above_the_best():
    finals = [6.0, 5.0, 5.05, 5.0 + MARGIN, 5.0 + MARGIN + 1e-3, 8.0, 9.5]  # 9.5 > l0: diverged
    c = frontier(LRS, finals, [L0] * 7)
    assert c.lr_tolerance == 1e-3  # 5.1 is within 0.1 of 5.0; 5.101 is not
    assert c.diverged[-1] and not any(c.diverged[:-1]) and c.finals[-1] is None
    assert frontier(LRS, finals, [L0] * 7, margin=0.5).lr_tolerance == 2.15e-3


def test_non_monotone_curve():
    """A bad point inside the stable range does not end it: the frontier is the largest stable point (the
    issue's definition), and the bad point still costs sensitivity."""
    finals = [7.0, 5.0, 6.5, 5.05, 7.5, 8.0, 8.5]
    c = frontier(LRS, finals, [L0] * 7)
    assert c.best_lr == 2.15e-4 and c.lr_tolerance == 1e-3
    assert_close(c.sensitivity, (2.0 + 0 + 1.5 + 0.05 + 2.5 + 3.0 + 3.5) / 7)


def test_a_scheme_that_never_trains():
    # every run stays within the margin of l0 (or diverges): no frontier, however flat its curve
    c = frontier(LRS, [8.95, 8.97, 8.99, 9.0, float("nan"), None, None], [L0] * 7, ["completed"] * 4 + ["diverged"] * 3)
    assert not c.trained and c.lr_tolerance is None and "never trains" in c.note
    everything_diverged = frontier(LRS, [None] * 7, [L0] * 7, ["diverged"] * 7)
    assert everything_diverged.lr_tolerance is None and everything_diverged.best is None
    assert everything_diverged.sensitivity == 0.0


def test_a_curve_on_the_unigram_plateau_has_no_frontier():
    """Runs too short to learn more than token frequencies all end near the unigram loss U: every point is within
    the margin of the best, and without U the frontier would read "stable up to the top of the grid" (what the
    quick sweep's Post-LN runs of 150 updates would have said). With U, a curve must get the margin below it."""
    u = 6.82
    plateau = [7.41, 6.90, 6.84, 6.83, 6.88, 6.92, 6.91]  # the shape measured: 9.5 at l0, ~U after 150 updates
    blind = frontier(LRS, plateau, [L0] * 7)
    assert blind.trained and blind.lr_tolerance == 1e-2  # the failure mode the rule exists for
    c = frontier(LRS, plateau, [L0] * 7, unigram=u)
    assert not c.trained and c.plateau and c.lr_tolerance is None and c.best == 6.83
    assert "never leaves the unigram plateau" in c.note and "U = 6.820" in c.note
    assert_close(c.sensitivity, blind.sensitivity)  # Wortsman's statistic does not depend on U
    # a curve that learned: the plateau runs (>= U) are outside [l*, l* + margin] by construction
    learned = frontier(LRS, [7.4, 6.6, 6.45, 6.5, 6.86, 6.9, None], [L0] * 7, ["completed"] * 6 + ["diverged"], unigram=u)
    assert learned.trained and not learned.plateau and learned.lr_tolerance == 1e-3
    # the rule is strict: a best exactly the margin below U is not below it
    edge = frontier(LRS, [u - MARGIN] + [8.0] * 6, [L0] * 7, unigram=u)
    assert edge.plateau and edge.lr_tolerance is None


def test_plateau_curves_and_the_warmup_ground_truth():
    """analyze with U: a scheme that leaves the plateau only with warm-up needs it (the paper's Post-LN); a width
    where neither arm leaves it is undecided; a no-warm-up arm that diverges everywhere beside a warm-up arm on
    the plateau needs warm-up; a warm-up arm still on the plateau beside a no-warm-up frontier may only be late
    (undecided); the report's sentence counts the curves that left the plateau."""
    from normlab.report.sweep import _plateau_sentence

    u = 6.82

    def curve(scheme, warmup, width, finals):
        return [Cell(scheme, warmup, width, lr, 1, f, L0) for lr, f in zip(LRS[:3], finals)]

    def diverging(scheme, warmup, width):
        return [Cell(scheme, warmup, width, lr, 1, None, L0, "diverged") for lr in LRS[:3]]

    cells = (curve("post", "none", 64, [7.4, 6.9, 6.85]) + curve("post", "paper", 64, [7.4, 6.5, 6.9])
             + curve("post", "none", 128, [7.4, 6.9, 6.85]) + curve("post", "paper", 128, [7.5, 6.88, 6.86]))  # fmt: skip
    rows = analyze(cells, unigram=u)
    by = {(r["scheme"], r["warmup"], r["width"]): r for r in rows}
    assert by[("post", "none", 64)]["plateau"] and by[("post", "none", 64)]["lr_tolerance"] is None
    assert by[("post", "paper", 64)]["lr_tolerance"] == 2.15e-4 and not by[("post", "paper", 64)]["plateau"]
    assert tolerance_truth(rows) == {("post", 64): True, ("post", 128): None}
    more = (diverging("post", "none", 256) + curve("post", "paper", 256, [7.4, 6.9, 6.85])  # the classic failure
            + curve("pre", "none", 64, [7.0, 6.5, 6.6]) + curve("pre", "paper", 64, [7.5, 6.9, 6.85])  # late warm-up
            + curve("pre", "none", 128, [7.0, 6.5, 6.6]) + diverging("pre", "paper", 128))  # fmt: skip
    truth = tolerance_truth(analyze(more, unigram=u))
    assert truth == {("post", 256): True, ("pre", 64): None, ("pre", 128): False}
    # without U the plateau reads as stable: at d=64 the no-warm-up frontier (the top of the grid, on the
    # plateau) is above the warm-up one, so "warm-up not needed": the reverse of what the runs show
    assert tolerance_truth(analyze(cells))[("post", 64)] is False
    text = _plateau_sentence({"baseline": {"unigram_loss": u, "what": "w"}, "rules": {"margin": MARGIN},
                              "frontier": rows})  # fmt: skip
    assert text.startswith("Curves that left the unigram plateau: 1 of 4 (scheme x warm-up x width), their best run "
                           "more than 0.1 nats below U = 6.820 nats; 3 trained but stayed on the plateau")
    assert "undecided, not evidence either way" in text and text.endswith("U: w.")


def test_l0_is_the_median_of_the_points():
    c = frontier((1e-3, 1e-2), [5.0, 8.0], [9.0, float("nan")])  # a point whose first loss was non-finite
    assert c.l0 == 9.0 and not c.diverged[1]


def test_analyze_seed_mean_and_spread():
    """Two seeds: a point where one seed diverged is diverged in the seed-mean curve; each seed's own frontier
    and sensitivity are kept, with their spread."""
    s1 = [6.0, 5.0, 5.05, 7.0]
    s2 = [6.2, 5.2, 5.1, None]  # diverged at the top
    lrs = LRS[:4]
    cells = [Cell("post", "none", 64, lr, 1, f, L0, "completed") for lr, f in zip(lrs, s1)]
    cells += [Cell("post", "none", 64, lr, 2, f, L0, "completed" if f is not None else "diverged")
              for lr, f in zip(lrs, s2)]  # fmt: skip
    cells.append(Cell("post", "none", 64, 1e-2, 1, None, None, "failed"))  # a crash: left out, listed
    (row,) = analyze(cells)
    assert row["seeds"] == 2 and row["missing_lrs"] == [1e-2]
    assert row["curve"]["diverged"] == [False, False, False, True]
    assert_close(row["best_loss"], 5.075)  # mean of 5.05 and 5.1 at 4.64e-4
    assert row["lr_tolerance"] == 4.64e-4 and row["diverged_lrs"] == [1e-3]
    assert row["lr_tolerance_per_seed"] == [4.64e-4, 4.64e-4] and not row["tolerance_censored"]
    (top,) = analyze([Cell("pre", "paper", 64, lr, 1, f, L0) for lr, f in zip(lrs, [6.0, 5.5, 5.0, 4.95])])
    assert top["lr_tolerance"] == 1e-3 and top["tolerance_censored"]  # the top of the grid: a lower bound
    sens1 = (1.0 + 0 + 0.05 + 2.0) / 4
    sens2 = (6.2 - 5.1 + 5.2 - 5.1 + 0 + 9.0 - 5.1) / 4
    assert_close(row["sensitivity"], (sens1 + sens2) / 2)
    assert_close(row["sensitivity_sd"], abs(sens1 - sens2) / math.sqrt(2))


# ---- Theorem 1's width law ----


def test_predicted_slope_of_theorem_1():
    # two widths: the secant of log(1/(d sqrt(ln d))) = -1 - (ln ln d2 - ln ln d1) / (2 (ln d2 - ln d1))
    d1, d2 = 64, 512
    want = -1 - (math.log(math.log(d2)) - math.log(math.log(d1))) / (2 * (math.log(d2) - math.log(d1)))
    assert_close(predicted_slope([d1, d2]), want)
    assert -1.2 < predicted_slope([64, 128, 256, 512]) < -1.05


def test_width_slope_recovers_a_power_law():
    rows = [{"scheme": "post", "warmup": "none", "width": d, "lr_tolerance": 0.5 / d} for d in (64, 128, 256)]
    rows.append({"scheme": "post", "warmup": "none", "width": 512, "lr_tolerance": None})  # never trained
    s = width_slope(rows, "post", "none", per_decade=3)
    assert_close(s["measured"], -1.0) and s["widths"] == [64, 128, 256]
    assert_close(s["predicted_post_ln"], predicted_slope([64, 128, 256, 512]))
    assert width_slope(rows[:1], "post", "none", per_decade=3)["measured"] is None


def test_slope_resolution_is_half_the_range_of_slopes_the_grid_allows():
    """Each frontier f is the largest stable grid point, so the true one lies in [f, f x 10^(1/3)): over every corner
    of that box (each width's frontier moved up a step or not) the measured slope spans 2 x the resolution. By
    hand: 1.11 over d = 64 and 128 (Theorem 1's whole slope), 0.55 over 64-256, 0.44 over 64-512; the uneven
    widths (64, 256, 512) are checked by brute force only."""
    import itertools

    from normlab.experiments.sweep import slope_resolution

    step = 10 ** (1 / 3)
    cases = {(64, 128): math.log(10) / 3 / math.log(2), (64, 128, 256): 0.5537, (64, 128, 256, 512): 0.4429,
             (64, 256, 512): None}  # fmt: skip
    for widths, by_hand in cases.items():
        rows = [{"scheme": "post", "warmup": "none", "width": d, "lr_tolerance": 0.5 / d} for d in widths]
        res = width_slope(rows, "post", "none", per_decade=3)["resolution"]
        if by_hand is not None:
            assert_close(res, by_hand, atol=1e-4, rtol=0)
        slopes = []
        for up in itertools.product((1.0, step), repeat=len(widths)):
            moved = [{**r, "lr_tolerance": r["lr_tolerance"] * u} for r, u in zip(rows, up)]
            slopes.append(width_slope(moved, "post", "none", per_decade=3)["measured"])
        assert_close((max(slopes) - min(slopes)) / 2, res)
    assert slope_resolution([64], 3) is None
    assert_close(slope_resolution([64, 128], 1), 3 * slope_resolution([64, 128], 3))


# ---- diagnose against the sweep ----


def test_warmup_truth_and_agreement():
    def row(scheme, warmup, width, lr):
        return {"scheme": scheme, "warmup": warmup, "width": width, "lr_tolerance": lr}

    rows = [row("post", "none", 64, 1e-3), row("post", "paper", 64, 4.64e-3),  # warm-up moves the frontier up
            row("pre", "none", 64, 4.64e-3), row("pre", "paper", 64, 4.64e-3),  # no difference
            row("post", "none", 128, None), row("post", "paper", 128, 1e-3),  # only trains with warm-up
            row("rezero", "none", 64, None), row("rezero", "paper", 64, None)]  # never trains: no truth  # fmt: skip
    rows += [dict(row("peri", w, 64, 1e-2), tolerance_censored=True) for w in ("none", "paper")]  # two lower bounds: no truth
    truth = tolerance_truth(rows)
    assert truth == {("post", 64): True, ("pre", 64): False, ("post", 128): True, ("rezero", 64): None,
                     ("peri", 64): None}
    verdicts = {("post", 64): True, ("pre", 64): True, ("post", 128): True, ("rezero", 64): False}
    agreement = diagnose_agreement(verdicts, truth)
    assert agreement["decided"] == 3 and agreement["agree"] == 2 and agreement["wrong"] == [("pre", 64)]


def test_warmup_truth_with_two_warmup_arms():
    """Per arm, each warm-up held against none; combined, needed when any arm widens the range, else not needed
    where an arm decides; the report's diagnose table names each arm's truth and best-loss gap."""
    from normlab.report.sweep import _diagnose_rows, _diagnose_sentence

    def row(scheme, warmup, width, lr, best=6.5):
        return {"scheme": scheme, "warmup": warmup, "width": width, "lr_tolerance": lr, "best_loss": best,
                "best_lr": lr, "sensitivity": 0.1, "seeds": 1, "diverged_lrs": [], "missing_lrs": []}

    rows = [row("post", "none", 64, 1e-3, 6.6), row("post", "paper", 64, 1e-3, 6.45),  # the short warm-up: equal
            row("post", "adam", 64, 2.15e-3, 6.4),  # the longer one moves the frontier up: needed
            row("pre", "none", 64, 4.64e-3), row("pre", "paper", 64, 4.64e-3), row("pre", "adam", 64, None),
            row("peri", "none", 64, None), row("peri", "paper", 64, None), row("peri", "adam", 64, None)]
    rows[5]["plateau"] = True  # the adam arm on the plateau beside a no-warm-up frontier: maybe late, no truth
    assert tolerance_truth(rows, "paper") == {("peri", 64): None, ("post", 64): False, ("pre", 64): False}
    assert tolerance_truth(rows, "adam") == {("peri", 64): None, ("post", 64): True, ("pre", 64): None}
    assert tolerance_truth(rows) == {("peri", 64): None, ("post", 64): True, ("pre", 64): False}
    # an arm that was not run decides nothing, and rows of the paper arm alone read as before
    assert tolerance_truth([r for r in rows if r["warmup"] != "adam"]) == tolerance_truth(rows, "paper")
    # an arm with holes (failed or unfinished runs: --report-only midway) could be the one that widens the range:
    # "not needed" from the other arm alone would be a verdict on half the evidence
    holed = [dict(r, missing_lrs=[1e-2]) if (r["scheme"], r["warmup"]) == ("post", "adam") else r for r in rows]
    assert tolerance_truth(holed)[("post", 64)] is None and tolerance_truth(holed, "paper")[("post", 64)] is False
    assert tolerance_truth(holed)[("pre", 64)] is False  # the other pairs are unchanged
    # an arm that says "needed" is enough, whatever the holes of another
    assert tolerance_truth([dict(r, missing_lrs=[1e-2]) if r["warmup"] == "paper" else r for r in rows])[("post", 64)]
    truth = tolerance_truth(rows)
    agreement = diagnose_agreement({("post", 64): True, ("pre", 64): True, ("peri", 64): False}, truth)
    assert agreement["decided"] == 2 and agreement["wrong"] == [("pre", 64)]
    result = {"frontier": rows, "diagnose": agreement, "rules": {"margin": 0.1},
              "warmup_lengths": {"none": 0, "paper": 36, "adam": 100},
              "warmup_truth": [{"scheme": k[0], "width": k[1], "warmup_needed": v,
                                "per_arm": {w: tolerance_truth(rows, w)[k] for w in ("paper", "adam")}}
                               for k, v in truth.items()]}  # fmt: skip
    _, table = _diagnose_rows(result)
    post = next(t for t in table if t[0] == "post")
    assert post[3] == "warm-up (36 updates: not needed; 100 updates: needed)" and post[4] == "yes"
    assert post[5] == ("36 updates: 6.600 at 0.001 / 6.450 at 0.001 (+0.150); "
                       "100 updates: 6.600 at 0.001 / 6.400 at 0.00215 (+0.200)")
    # the combined truth is "needed" at post: not a "not needed with a lower loss" pair, whatever the gaps
    assert "At post d=64" not in _diagnose_sentence({**result, "config": {"seeds": 1}})
    # "not needed" overall, and only the adam arm's best is more than the margin below the no-warm-up best: named
    flat = [row("post", "none", 64, 1e-3, 6.6), row("post", "paper", 64, 1e-3, 6.55),
            row("post", "adam", 64, 1e-3, 6.4)]
    flat_truth = tolerance_truth(flat)
    assert flat_truth == {("post", 64): False}
    named = _diagnose_sentence({"frontier": flat, "rules": {"margin": 0.1}, "config": {"seeds": 1},
                                "diagnose": diagnose_agreement({("post", 64): True}, flat_truth)})  # fmt: skip
    assert "At post d=64 the no-warm-up frontier is not below a warm-up arm's" in named
    # reproduce's section says which arm found the need
    from normlab.report.sweep import beyond_the_paper

    cfg = SweepConfig(schemes=("post", "pre", "peri"), warmups=("none", "paper", "adam"), widths=(64,), updates=300)
    meta = {"scale": "custom", "description": "synthetic", "normlab_version": "0", "torch": "0", "device": "cpu",
            "threads": "1", "runs": 9, "outcomes": {"completed": 9}, "wall_time_s": 60, "finished": "now"}
    text = "\n".join(beyond_the_paper({**result, "ran": True, "config": cfg.to_dict(), "lrs": list(cfg.lrs),
                                        "width_law": [], "meta": meta})["sentences"])  # fmt: skip
    assert ("or a linear warm-up of 36 updates (the paper's share of its run) or 100 updates (2/(1 - beta2), Ma & "
            "Yarats's untuned rule for Adam), lr_max kept after it.") in text
    assert "post: warm-up needed (the seeds' sign test on the stability edge) at d=64; per warm-up arm, " \
        "needed at: 36 updates: none, 100 updates: d=64." in text
    none_only = SweepConfig(warmups=("none",), widths=(64,), updates=300)
    text = "\n".join(beyond_the_paper({**result, "ran": True, "config": none_only.to_dict(), "lrs": list(cfg.lrs),
                                        "width_law": [], "meta": meta})["sentences"])  # fmt: skip
    assert "(3 per decade), with no warm-up." in text and "a linear warm-up of ," not in text


def test_diagnose_table_shows_the_score_and_the_best_loss_gap():
    """The diagnose table keeps diagnose's S and threshold beside its verdict, and the best final loss of both arms:
    where the frontiers are equal (ground truth "not needed") but the warm-up arm ended more than the margin below
    the other arm's best, the sentence names the pair, as the committed standard sweep's Post-LN at d=64 shows."""
    from normlab.report.sweep import _diagnose_rows, _diagnose_sentence

    def row(warmup, lr, best, best_lr):
        return {"scheme": "post", "warmup": warmup, "width": 64, "lr_tolerance": lr, "best_loss": best,
                "best_lr": best_lr}

    rows = [row("none", 2.15e-3, 6.594, 1e-3), row("paper", 2.15e-3, 6.463, 2.15e-3)]
    truth = tolerance_truth(rows)
    assert truth == {("post", 64): False}  # equal frontiers
    agreement = diagnose_agreement({("post", 64): True}, truth, {("post", 64): (1.962, 0.869)})
    assert agreement["table"][0]["score"] == 1.962 and agreement["wrong"] == [("post", 64)]
    result = {"frontier": rows, "diagnose": agreement, "rules": {"margin": 0.1}}
    head, table = _diagnose_rows(result)
    assert table == [["post", "64", "warm-up (S = 1.96, threshold 0.87)", "no warm-up", "NO",
                      "6.594 at 0.001 / 6.463 at 0.00215 (+0.131)"]]
    sentence = _diagnose_sentence({**result, "config": {"seeds": 1}})
    assert "At post d=64 the no-warm-up frontier is not below a warm-up arm's" in sentence
    assert "more than the margin (0.1 nats) below" in sentence and "latter (one seed per cell). The ground truth is the seeds' sign test" in sentence
    # the no-warm-up frontier above the warm-up one is "not needed" too, and named the same way
    above = [row("none", 4.64e-3, 6.594, 1e-3), row("paper", 2.15e-3, 6.463, 2.15e-3)]
    truth_above = tolerance_truth(above)
    assert truth_above == {("post", 64): False}
    assert "At post d=64" in _diagnose_sentence({"frontier": above, "rules": {"margin": 0.1},
                                                 "diagnose": diagnose_agreement({("post", 64): True}, truth_above)})
    # within the margin: not named; a table from before the scores were kept still renders
    result["frontier"][1]["best_loss"] = 6.55
    old = {**agreement, "table": [{k: v for k, v in agreement["table"][0].items() if k not in ("score", "threshold")}]}
    assert "At post" not in _diagnose_sentence({**result, "diagnose": old})
    assert _diagnose_rows({**result, "diagnose": old})[1][0][2] == "warm-up"

def test_beyond_the_paper_section_reads_the_sweep():
    """reproduce's "beyond the paper" section on a synthetic sweep: Post-LN needs warm-up at the wider width only,
    its no-warm-up frontier falls as 1/d; Pre-LN never needs it; the slope, the one-seed caveat and diagnose's
    agreement are stated; without the sweep, the section says how to run it."""
    from normlab.report.sweep import beyond_the_paper

    def curve(scheme, warmup, width, finals):
        return [Cell(scheme, warmup, width, lr, 1, f, L0, "completed" if f is not None else "diverged")
                for lr, f in zip(LRS[:4], finals)]  # fmt: skip

    cells = (curve("post", "none", 64, [6, 5, 4.9, 7]) + curve("post", "paper", 64, [6, 5, 4.9, 7])
             + curve("post", "none", 128, [6, 4.9, 7, None]) + curve("post", "paper", 128, [6, 5, 4.9, 4.95])
             + curve("pre", "none", 64, [6, 5, 4.9, 7]) + curve("pre", "paper", 64, [6, 5, 4.9, 7])
             + curve("pre", "none", 128, [6, 5, 4.9, 7]) + curve("pre", "paper", 128, [6, 5, 4.9, 7]))  # fmt: skip
    rows = analyze(cells)
    truth = warmup_truth(rows)
    cfg = SweepConfig(schemes=("post", "pre"), widths=(64, 128), lr_min=1e-4, lr_max=1e-3, updates=300)
    summary = {
        "ran": True, "config": cfg.to_dict(), "lrs": list(cfg.lrs), "warmup_updates": cfg.warmup_updates,
        "frontier": rows, "width_law": [width_law(rows, s, w) for s in cfg.schemes for w in cfg.warmups],
        "warmup_truth": [{"scheme": k[0], "width": k[1], "warmup_needed": v,
                          "verdicts": {"paper": warmup_verdicts(rows, "paper")[k]}} for k, v in truth.items()],
        "diagnose": diagnose_agreement({("post", 64): True, ("post", 128): True, ("pre", 64): False,
                                        ("pre", 128): False}, truth),
        "meta": {"scale": "custom", "description": "synthetic", "normlab_version": "0", "torch": "0", "device": "cpu",
                 "threads": "1", "runs": len(cells), "outcomes": {"completed": len(cells)}, "wall_time_s": 60,
                 "finished": "now"},
    }  # fmt: skip
    section = beyond_the_paper(summary)
    text = "\n".join(section["sentences"])
    # one seed, and every curve but post/none/d=128 censored (no run above l0): nothing is decided
    assert "post: inconclusive or undecided at d=64, d=128" in text and "pre: inconclusive or undecided" in text
    # post without warm-up: d=64 censored at >= 1e-3, d=128 bracketed in [4.64e-4, 1e-3): the slope is at most
    # (ln 1e-3 - ln 1e-3) / ln 2 = 0 and unbounded below; the censored width is named as a bound
    assert "post, no warm-up: log-log slope of the stability edge against width <= 0.00 over d=64, d=128" in text
    assert "at d=64 the edge is censored, a lower bound" in text
    assert "1 seed(s) per cell: the sign test needs 5 seeds" in text
    assert "diagnose agrees with the sweep on 0 of 0" in text
    assert "or a linear warm-up of 36 updates (the paper's share of its run), lr_max kept after it." in text
    assert [t[0] for t in section["tables"]] == ["Stability edge, LR tolerance and LR sensitivity",
                                                 "How the edge's first unstable runs failed",
                                                 "Warm-up needed? Seed by seed, and the sign test",
                                                 "Width law: Theorem 1", "diagnose held against the sweep"]
    absent = beyond_the_paper({"ran": False, "preset": "quick", "runs": 126, "description": "d"})
    assert absent["tables"] == [] and "not run at this scale" in absent["sentences"][0]
    assert "--scale quick" in absent["sentences"][0]


def _grid_only(committed: Path, to: Path) -> dict:
    """A committed sweep.json as it was before the edge search extended it (`sweep --import`, 2026-11-28): its grid
    cells only (the imported records as they were, less ``imported_from``), no edge runs counted; written to
    ``to``."""
    extended = json.loads(committed.read_text())
    grid = set(extended["lrs"])
    cells = [{k: v for k, v in c.items() if k != "imported_from"} for c in extended["cells"] if c["lr"] in grid]
    before = {**extended, "cells": cells,
              "meta": {**extended["meta"], "edge_runs": 0, "edge_rounds": 0, "imported": [], "runs": len(cells),
                       "outcomes": {"completed": sum(c["status"] == "completed" for c in cells),
                                    "diverged": sum(c["status"] == "diverged" for c in cells)},
                       "train_time_s": sum(c.get("elapsed_s") or 0.0 for c in cells)}}  # fmt: skip
    to.write_text(json.dumps(before))
    return before


def test_frontier_plot_marks_the_lower_bounds(tmp_path, monkeypatch):
    """frontier.png of the committed 126-run sweep (docs/results/sweep-quick/sweep.json, the preset named quick
    until stop 28; its grid cells, without the edge search's runs once they are added) re-read under the issue-40
    definitions: no run of it ended above l0, but Post-LN's curves end on
    the unigram plateau above their best learning rate (sweep.curve_failures), so its 6 edges (2 arms x 3 widths)
    are bracketed, one grid step lower per doubling of d; Pre-LN's and Peri-LN's 12 are censored at the top of the
    grid, upward triangles, none drawn as a point."""
    import matplotlib.pyplot as plt

    from normlab.experiments.sweep import rerender
    from normlab.report.sweep import plot_frontier

    copy = tmp_path / "sweep.json"
    assert len(_grid_only(Path(__file__).parents[1] / "docs/results/sweep-quick/sweep.json", copy)["cells"]) == 126
    result = rerender(copy, say=lambda line: None)
    # 12 censored curves would be extended above 1e-2; 6 bracketed ones bisected (ratio 2.15 > 1.2)
    assert result["meta"]["edge_pending"] == 18
    brackets = {(r["width"], r["warmup"]): (r["edge"]["lo"], r["edge"]["hi"]) for r in result["frontier"]
                if r["scheme"] == "post"}  # fmt: skip
    assert brackets == {(64, "none"): (2.15e-3, 4.64e-3), (128, "none"): (1e-3, 2.15e-3),
                        (256, "none"): (4.64e-4, 1e-3), (64, "paper"): (2.15e-3, 4.64e-3),
                        (128, "paper"): (1e-3, 2.15e-3), (256, "paper"): (1e-3, 2.15e-3)}  # fmt: skip
    # the divergence half alone still finds nothing: every divergence edge censored
    assert all(r["divergence_edge"]["censored"] for r in result["frontier"])
    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    plot_frontier(result, tmp_path / "frontier.png")
    [fig] = figures
    marked = sorted((float(x), float(y)) for line in fig.axes[0].lines if line.get_gid() == "lower-bound"
                    for x, y in zip(line.get_xdata(), line.get_ydata()))  # fmt: skip
    censored = sorted((float(r["width"]), r["edge"]["lo"]) for r in result["frontier"] if r["edge"]["censored"])
    assert len(censored) == 12 and marked == censored and {y for _, y in marked} == {1e-2}
    assert {r["scheme"] for r in result["frontier"] if r["edge"]["censored"]} == {"pre", "peri"}
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "censored: no unstable run, a lower bound" in legend
    assert len(fig.axes[0].containers) == 2  # Post-LN's two arms: their bracketed edges drawn with error bars


def test_spec_of_name_finds_the_sweeps_runs_the_edge_search_included(tmp_path):
    """--sync reads a shared folder's runs as this sweep's by name: every grid point, a rate the edge search
    bisected to (its name keeps 3 digits; the saved config has the rate), nothing of another grid or seed range."""
    import dataclasses

    import yaml

    from normlab.experiments.figures import Context
    from normlab.experiments.sweep import run_spec, spec_of_name

    cfg = dataclasses.replace(sweep_scale("quick"), seeds=2)
    ctx = Context(translation_updates_per_epoch=1)
    assert all(spec_of_name(cfg, ctx, s.name) == s for s in sweep_runs(cfg, ctx))
    bisected = run_spec(cfg, ctx, "pre", "adam", 128, 0.0123456, 2)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(bisected.config.to_dict()))
    assert spec_of_name(cfg, ctx, bisected.name, tmp_path / "run") == bisected
    assert spec_of_name(cfg, ctx, bisected.name).config.optim.lr == 0.0123  # without the saved run: the name's rate
    assert spec_of_name(cfg, ctx, bisected.name.replace("-s2", "-s3")) is None  # seeds 1-2 only
    assert spec_of_name(cfg, ctx, "post-adam-5e-4-w4000-s1") is None
    assert spec_of_name(cfg, ctx, "post-none-d96-lr1.00e-03-s1") is None  # no such width
    for tag in ("0.00e+00", "-1.00e-03", "inf", "nan", "x"):  # not a rate: None, not an error
        assert spec_of_name(cfg, ctx, f"post-none-d64-lr{tag}-s1") is None


# ---- the CLI, end to end ----


@pytest.mark.slow
def test_smoke_sweep_cli(tmp_path):
    from tests.clirun import normlab

    out = tmp_path / "sweep"
    proc = normlab("sweep", "--scale", "smoke", "--out", str(out), "--jobs", "2", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stderr.splitlines()
    first_run = next(i for i, line in enumerate(lines) if " start " in line)
    # the wall-time estimate comes before the first run, after the data's preparation (its epoch length)
    [estimate] = [i for i, line in enumerate(lines) if line.startswith("estimate:")]
    assert estimate < first_run, lines[: first_run + 1]
    assert "/ 2 job(s)" in lines[estimate]
    report = out / "report"
    data = json.loads((report / "sweep.json").read_text())
    cfg = sweep_scale("smoke")
    n = len(cfg.schemes) * len(cfg.warmups) * len(cfg.widths) * len(cfg.lrs) * cfg.seeds
    # the edge search: no grid point of 4 updates is unstable, so one round adds the cap, lr 1, to each of the 8
    # curves; the bracket [0.1, 1) is within the smoke preset's resolution (11x), so no bisection follows
    curves = len(cfg.schemes) * len(cfg.warmups) * len(cfg.widths)
    assert data["meta"]["edge_rounds"] == 1 and data["meta"]["edge_runs"] == curves
    # each curve's search run starts as soon as that curve's grid runs have ended (run_grid's ``more``), not
    # after the whole grid: the first one is added while grid runs are still to start
    added = [line for line in lines if line.startswith("grid: ") and " run(s) added: " in line]
    assert sum(int(line.split()[1]) for line in added) == curves
    first_added = lines.index(added[0])
    assert any(" start " in line for line in lines[first_added:]) and any(
        " start " in line and "-lr1.00e+00-" not in line for line in lines[first_added:])  # a grid run after it
    extra = [c for c in data["cells"] if c["lr"] == 1.0]
    assert len(extra) == curves and all(c["diverged"] for c in extra)
    assert all(r["edge"]["per_seed"] == [{"seed": 1, "last_stable": 0.1, "first_unstable": 1.0, "ratio": 10.0,
                                          "censored": False}] for r in data["frontier"])  # fmt: skip
    n += curves
    assert len(data["cells"]) == n and data["meta"]["outcomes"]["failed"] == 0
    assert all(c["l0"] is not None and c["train"] and c["elapsed_s"] > 0 for c in data["cells"])
    assert data["meta"]["train_time_s"] == pytest.approx(sum(c["elapsed_s"] for c in data["cells"]))
    assert len(data["frontier"]) == len(cfg.schemes) * len(cfg.warmups) * len(cfg.widths)
    assert {(s["scheme"], s["warmup"]) for s in data["width_law"]} == {(s, w) for s in cfg.schemes for w in cfg.warmups}
    # no frontier at 4 updates, so no widths to resolve a slope over (the resolution follows the widths with one)
    assert all(s["resolution"] is None for s in data["tolerance_width_law"])
    # the edge's slope: both widths in [0.1, 1), so the one seed allows +-ln(10)/ln(2) and -1 is not excluded
    assert all(s["lo"] == pytest.approx(-math.log(10) / math.log(2)) and s["hi"] == pytest.approx(-s["lo"])
               and s["contains"]["-1"] for s in data["width_law"])  # fmt: skip
    assert data["rules"]["margin"] == MARGIN and "min(l(eta), l0)" in data["rules"]["sensitivity"]
    # U from the data the runs see; 4 updates learn nothing: every curve is below l0 or on the plateau, none has a
    # frontier, and no width has a ground truth
    u = data["baseline"]["unigram_loss"]
    assert 0 < u < math.log(cfg.vocab_size) and data["baseline"]["tokens"] > 0 and f"U = {u:.3f}" in proc.stderr
    assert all(r["lr_tolerance"] is None for r in data["frontier"])
    assert all(t["warmup_needed"] is None for t in data["warmup_truth"])
    for png in ("loss_vs_lr.png", "frontier.png"):
        assert (report / png).stat().st_size > 1000
    page = (report / "index.html").read_text()
    for text in ("Stability edge", "LR tolerance", "LR sensitivity", "Theorem 1", "sign test", "data:image/png;base64,",
                 f"Curves that left the unigram plateau: 0 of {len(data['frontier'])}"):
        assert text in page, text
    md = (report / "SWEEP.md").read_text()
    assert "| scheme | warm-up |" in md
    # the arithmetic the runs trained in: precision "auto" is bf16 where the hardware runs it natively, read
    # here from the CPU's own flags (Linux: AVX-512 BF16 or AMX), not from the resolver the runs use
    want = "bf16" if _native_bf16() else "fp32"
    assert {c["precision"] for c in data["cells"]} == {want} and data["meta"]["precision"] == want
    assert f"precision {want};" in md
    # where each run trained, from its own summary (the header's device is the invocation's): one machine here
    [machine] = {c["machine"] for c in data["cells"]}
    assert machine.startswith(cpu_name()) and f"The runs trained on: {machine} ({n} runs)." in md
    assert "edge brackets" not in md  # one machine: no bracket mixes two
    assert all((report / link).is_file() for link in re.findall(r"\]\(([^)]+\.png)\)", md))
    again = normlab("sweep", "--scale", "smoke", "--out", str(out), "--no-estimate")
    assert again.returncode == 0 and f"{n} of {n} runs already finished" in again.stderr
    assert " start " not in again.stderr  # finished runs, the edge search's included, are never trained again
    # --sync: the runs finished before go to the shared folder (the edge search's too), and a second machine's
    # --report-only reads every one from it
    store = tmp_path / "committed"
    synced = normlab("sweep", "--scale", "smoke", "--out", str(out), "--no-estimate", "--no-diagnose", "--sync",
                     str(store))  # fmt: skip
    assert synced.returncode == 0 and " start " not in synced.stderr, synced.stderr[-2000:]
    assert len(list(store.glob("*/summary.json"))) == n and len(list(store.glob("*/cpu.txt"))) == n
    other = normlab("sweep", "--scale", "smoke", "--out", str(tmp_path / "machine-b"), "--report-only",
                    "--no-diagnose", "--sync", str(store))  # fmt: skip
    assert other.returncode == 0 and f"sync: {n} run(s) finished in {store}" in other.stderr, other.stderr[-2000:]
    assert len(json.loads((tmp_path / "machine-b" / "report" / "sweep.json").read_text())["cells"]) == n
    # --report-only trains nothing: a run that is gone stays gone and is a missing grid point of its curve
    gone = data["cells"][0]
    shutil.move(out / "runs" / gone["name"], out / "runs" / "post-none-d16-lr5.00e-02-s1")  # as if another grid's
    verdicts = data["diagnose"]["table"]
    partial = normlab("sweep", "--scale", "smoke", "--out", str(out), "--report-only")
    assert partial.returncode == 0, partial.stderr[-3000:]
    assert not (out / "runs" / gone["name"]).exists() and " start " not in partial.stderr
    data = json.loads((report / "sweep.json").read_text())
    assert data["meta"]["report_only"] and data["meta"]["unfinished"] == 1
    [row] = [r for r in data["frontier"] if (r["scheme"], r["warmup"], r["width"]) == (gone["scheme"], gone["warmup"],
                                                                                          gone["width"])]  # fmt: skip
    assert row["missing_lrs"] == [gone["lr"]]
    md = (report / "SWEEP.md").read_text()
    # the edge search is replayed on the finished runs, the curve with the hole included (it is marked incomplete)
    assert data["meta"]["runs"] == n and data["meta"]["edge_runs"] == curves
    assert f"Written with --report-only: 1 of the {n} runs had not finished" in md
    assert f"{sum(c['status'] == 'completed' for c in data['cells'])} completed" in md
    # diagnose is measured again (models at initialisation only: seconds), with the same verdicts and scores
    assert "diagnose: warm-up verdicts" in partial.stderr
    assert data["diagnose"]["table"] == verdicts and all(r["score"] is not None for r in verdicts)
    assert "*" in partial.stderr.split("stability edge [last stable")[1]  # the terminal's table marks the incomplete curve
    assert "1 finished run(s) of another grid" in partial.stderr  # the folder holds a run this grid does not read
    # a smaller grid whose runs have all finished, read from a folder that holds more: said so, not silently
    subset = normlab("sweep", "--scale", "smoke", "--out", str(out), "--report-only", "--no-diagnose", "--set",
                     "schemes=[pre]")  # fmt: skip
    assert subset.returncode == 0, subset.stderr[-3000:]
    assert f"reads the {n // 2} runs of this sweep only" in subset.stderr and "of another grid" in subset.stderr
    # another preset on this folder: said so, not "run it without --report-only" (which would start that sweep)
    wrong = normlab("sweep", "--scale", "quick", "--out", str(out), "--report-only")
    assert wrong.returncode == 2 and "finished run(s) of another grid" in wrong.stderr, wrong.stderr[-2000:]
    empty = normlab("sweep", "--scale", "smoke", "--out", str(tmp_path / "empty"), "--report-only")
    assert empty.returncode == 2 and "no run of this sweep has finished" in empty.stderr
    assert not (tmp_path / "empty").exists()


def test_diagnose_verdicts_give_no_verdict_for_rezero():
    """ReZero at initialisation (alpha = 0): diagnose's ratio is 0/0, so the sweep's verdict is None, not a guess."""
    from normlab.experiments.sweep import diagnose_verdicts

    cfg = SweepConfig(schemes=("rezero", "post"), widths=(16,), n_heads=2, layers=2, vocab_size=300, max_tokens=256)
    verdicts = diagnose_verdicts(cfg, steps=1)
    assert verdicts[("rezero", 16)] is None and verdicts[("post", 16)] is not None


def test_machines_and_brackets_that_mix_two():
    def cell(lr, seed, machine, status="completed"):
        return {"scheme": "post", "warmup": "none", "width": 64, "lr": lr, "seed": seed, "machine": machine,
                "status": status}

    cells = [cell(1e-3, 1, "A"), cell(2.15e-3, 1, "A"), cell(1e-3, 2, "A"), cell(1.1e-3, 2, "B"),
             cell(1e-3, 3, None), cell(1.1e-3, 3, "B"), cell(5e-3, 3, "B", status="absent")]
    assert machines(cells) == ({"A": 3, "B": 2}, 1)  # the absent run is not counted; the None one is unrecorded
    # a decoy of another curve at seed 1's lr and seed, on B: a bracket reads its own curve's runs only
    decoy = {**cell(2.15e-3, 1, "B"), "width": 128}
    per_seed = [{"seed": 1, "last_stable": 1e-3, "first_unstable": 2.15e-3},
                {"seed": 2, "last_stable": 1e-3, "first_unstable": 1.1e-3},
                {"seed": 3, "last_stable": 1e-3, "first_unstable": 1.1e-3},  # one end unrecorded: not counted
                {"seed": 4, "last_stable": 1e-3, "first_unstable": None}]  # censored
    rows = [{"scheme": "post", "warmup": "none", "width": 64, "edge": {"per_seed": per_seed}}]
    assert bracket_machines(rows, cells + [decoy]) == (1, 2, 3)
    from normlab.report.sweep import _machines_sentence

    said = _machines_sentence({"cells": cells, "frontier": rows})
    assert said.startswith(" The runs trained on: A (3 runs); B (2 runs); 1 runs recorded no machine. 1 of the 2 "
                           "seeds' edge brackets (of 3) whose two runs both recorded their machine have their last "
                           "stable and first unstable run from two machines: such a bracket mixes"), said
    # a result kept without its cells (reproduce's width figure) says the same from meta.provenance
    kept = {"frontier": rows, "meta": {"provenance": provenance(rows, cells)}}
    assert _machines_sentence(kept) == said
    assert _machines_sentence({"cells": [cell(1e-3, 1, None)], "frontier": rows}) == ""  # nothing recorded
    # one machine named bare by an older normlab and in full by a later one is one machine, not a mixed bracket
    full = "AMD EPYC (family 26, model 2; AVX-512 BF16), bf16, torch 2.13.0+cpu"
    assert same_machine("AMD EPYC, bf16, torch 2.13.0+cpu", full) and same_machine(full, full)
    assert not same_machine("AMD EPYC (family 25, model 17; AVX-512 BF16), bf16, torch 2.13.0+cpu", full)
    assert not same_machine("AMD EPYC, bf16, torch 2.11.0+cpu", full)


def test_meta_line_names_what_set_changed_from_the_preset():
    from normlab.report.sweep import _meta_line

    meta = {"scale": "quick", "description": "the preset's words", "normlab_version": "0", "torch": "2", "device": "CPU",
            "threads": "2 job(s) x 1 thread(s)", "precision": "bf16", "runs": 84, "outcomes": {"completed": 84},
            "wall_time_s": 60.0, "finished": "now", "overrides": {"schemes": ["post"], "seeds": 2}}
    line = _meta_line({"meta": meta})
    assert line.startswith("Scale quick with --set schemes=['post'], seeds=2 (the preset's description follows): the "
                           "preset's words.")
    assert "precision bf16;" in line
    assert _meta_line({"meta": {**meta, "overrides": {}}}).startswith("Scale quick: the preset's words.")


def _native_bf16() -> bool:
    """Whether the machine the smoke sweep ran on has native bf16: a CUDA device's own answer, else the CPU's
    flags in /proc/cpuinfo (avx512_bf16, amx_tile), else (no /proc) torch's CPU probe."""
    if torch.cuda.is_available():
        return torch.cuda.is_bf16_supported()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        flags = {f for line in cpuinfo.read_text().splitlines() if line.startswith("flags") for f in line.split()}
        return bool(flags & {"avx512_bf16", "amx_tile"})
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def test_from_json_keeps_where_the_runs_trained(tmp_path):
    """width-gpu's runs trained on an H100 (2026-11-26) and an H200 (2026-11-28); its sweep.json, re-read here on
    a CPU, still says so, and counts the seeds' edge brackets whose two runs trained on different GPUs."""
    from tests.clirun import normlab

    folder = tmp_path / "width-gpu"
    folder.mkdir()
    shutil.copy(Path(__file__).parents[1] / "docs/results/sweep-quick/width-gpu/report/sweep.json", folder)
    proc = normlab("sweep", "--from-json", str(folder / "sweep.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    md = (folder / "SWEEP.md").read_text()
    assert ("The runs trained on: Intel(R) Xeon(R) Processor, NVIDIA H100 80GB HBM3, bf16, torch 2.11.0+cu130 "
            "(420 runs); Intel(R) Xeon(R) Processor (family 6, model 207; AMX), NVIDIA H200, bf16, torch "
            "2.11.0+cu130 (296 runs). 15 of the 65 seeds' edge brackets have their last stable and first unstable "
            "run from two machines") in md


def test_from_json_rereads_a_committed_sweep(tmp_path):
    """`normlab sweep --from-json`: a committed sweep.json (its run folders were not committed) re-read under the
    present definitions, training nothing. quick-56 as it was committed before the edge search (its grid cells: the
    folder was extended with `sweep --import` on 2026-11-28, whose runs beyond the grid are dropped here): no run
    ended above l0; Post-LN's runs end on the unigram plateau above their best learning rate
    (sweep.curve_failures), so its 4 edges are bracketed, Pre-LN's 4 are censored at the top of the grid. As
    committed now, every edge is bracketed."""
    from tests.clirun import normlab

    committed = Path(__file__).parents[1] / "docs/results/sweep-quick/quick-56/sweep.json"
    folder = tmp_path / "quick-56"
    folder.mkdir()
    assert len(_grid_only(committed, folder / "sweep.json")["cells"]) == 56
    proc = normlab("sweep", "--from-json", str(folder / "sweep.json"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads((folder / "sweep.json").read_text())
    assert len(data["frontier"]) == 8
    edges = {(r["scheme"], r["warmup"], r["width"]): (r["edge"]["lo"], r["edge"]["hi"]) for r in data["frontier"]}
    assert edges == {("post", "none", 64): (2.15e-3, 4.64e-3), ("post", "none", 128): (1e-3, 2.15e-3),
                     ("post", "adam", 64): (4.64e-3, 1e-2), ("post", "adam", 128): (2.15e-3, 4.64e-3),
                     **{("pre", w, d): (1e-2, None) for w in ("none", "adam") for d in (64, 128)}}  # fmt: skip
    # 4 bracketed curves to bisect (2.15x > 1.2x), 4 censored ones to extend; nothing ended above l0
    assert data["meta"]["edge_pending"] == 8 and not any(c["diverged"] for c in data["cells"])
    verdicts = {(t["scheme"], t["width"]): t["verdicts"]["adam"] for t in data["warmup_truth"]}
    # Post-LN: warm-up raises the edge beyond the bracket on the one seed (+1), too few seeds for the sign test
    assert all(verdicts[("post", d)]["signs"] == [1] and verdicts[("post", d)]["verdict"] == "inconclusive"
               for d in (64, 128))  # fmt: skip
    assert all(verdicts[("pre", d)]["verdict"] == "undecided" for d in (64, 128))
    md = (folder / "SWEEP.md").read_text()
    assert ">=0.01 (censored)" in md and "8 curve(s) would need more runs to find their edge" in md
    assert "the edge search's runs were not run" in md  # written before the edge search: said so
    assert " start " not in proc.stderr
    now = tmp_path / "quick-56-extended"
    now.mkdir()
    shutil.copy(committed, now / "sweep.json")
    assert normlab("sweep", "--from-json", str(now / "sweep.json")).returncode == 0
    data = json.loads((now / "sweep.json").read_text())
    assert data["meta"]["edge_pending"] == 0 and not any(r["edge"]["censored"] for r in data["frontier"])
    # a sweep written with the edge search (edge-quick: its runs are among the cells) keeps its counts and says
    # nothing of runs not run
    edge = tmp_path / "edge-quick"
    edge.mkdir()
    shutil.copy(Path(__file__).parents[1] / "docs/results/sweep-quick/edge-quick/sweep.json", edge / "sweep.json")
    assert normlab("sweep", "--from-json", str(edge / "sweep.json")).returncode == 0
    data = json.loads((edge / "sweep.json").read_text())
    meta = data["meta"]
    assert meta["edge_runs"] == 175 and "were not run" not in meta["rerendered"]
    # the mean-rate reading (x0.835 for 100 warm-up updates in 300): Post-LN 5 of 5 seeds beyond it at both widths,
    # Pre-LN 4 of 5 (inconclusive); its column in SWEEP.md says the same
    mean_rate = {(t["scheme"], t["width"]): t["verdicts_mean_rate"]["adam"] for t in data["warmup_truth"]}
    assert {k: (v["plus"], v["verdict"]) for k, v in mean_rate.items()} == {
        ("post", 64): (5, "needed"), ("post", 128): (5, "needed"),
        ("pre", 64): (4, "inconclusive"), ("pre", 128): (4, "inconclusive")}  # fmt: skip
    edge_md = (edge / "SWEEP.md").read_text()
    assert "| post | 64 | 100 updates (2/(1-beta2)) | s1:+ s2:+ s3:+ s4:+ s5:+ | needed: 5 of 5 seeds raise the edge " \
           "(disjoint brackets; sign test p = 0.0312) | x0.835: s1:+ s2:+ s3:+ s4:+ s5:+; needed |" in edge_md
    assert "| pre | 64 | 100 updates (2/(1-beta2)) | s1:+ s2:+ s3:+ s4:+ s5:+ | needed: 5 of 5 seeds raise the edge " \
           "(disjoint brackets; sign test p = 0.0312) | x0.835: s1:+ s2:0 s3:+ s4:+ s5:+; inconclusive |" in edge_md
    # how the edges were met: all 40 first unstable runs on the plateau, none diverged
    firsts = [x for r in data["frontier"] for x in r["first_unstable"]]
    assert len(firsts) == 40 and not any(x["diverged"] for x in firsts)
    assert min(x["above_line"] for x in firsts) > 0


@pytest.mark.slow
def test_sweep_elsewhere_brings_back_only_the_runs_it_trained(tmp_path):
    """tools/sweep-elsewhere.sh (a sweep continued on a lent machine) and tools/merge-runs.sh: the tarball holds the
    runs this call finished, never the committed ones it was given (a device call brings back 16 MiB a file: 890
    committed runs once outgrew it and a whole call's runs were lost), also with the folders named relative to the
    repository's root as its docs show; a second call on the merged folder trains and carries nothing."""
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(root)}  # fmt: skip
    docs = Path(os.path.relpath(tmp_path / "docs", root))
    args = ["--scale", "smoke", "--set", "schemes=[pre]", "--set", "warmups=[none]", "--set", "widths=[16]",
            "--jobs", "1", "--threads", "1", "--device", "cpu", "--no-diagnose", "--no-estimate"]  # fmt: skip

    def call(out: str) -> tuple[str, list[str]]:
        proc = subprocess.run(["bash", "tools/sweep-elsewhere.sh", str(docs), "120", out, "--", *args], cwd=root,
                              env=env, capture_output=True, text=True, check=True)  # fmt: skip
        names = subprocess.run(["tar", "tzf", f"{out}/runs.tgz"], cwd=root, capture_output=True, text=True,
                               check=True).stdout.split()  # fmt: skip
        merged = subprocess.run(["bash", "tools/merge-runs.sh", f"{out}/runs.tgz", str(docs)], cwd=root, env=env,
                                capture_output=True, text=True, check=True)  # fmt: skip
        return proc.stdout + merged.stdout, names

    log, names = call(os.path.relpath(tmp_path / "o1", root))
    runs = sorted({n.split("/")[0] for n in names})
    cfg = sweep_scale("smoke")
    grid = len(cfg.lrs) * cfg.seeds
    assert len(runs) == grid + 1, log  # the grid and the edge search's one run at the cap (test_smoke_sweep_cli)
    assert f"merge-runs: {len(runs)} new run(s)" in log
    assert sorted(p.name for p in (tmp_path / "docs" / "runs").iterdir()) == runs
    assert all(n.rsplit("/", 1)[-1] in {"config.yaml", "data.json", "metrics.jsonl", "summary.json"} for n in names)
    log, names = call(str(tmp_path / "o2"))
    assert names == [] and "0 runs finished by this call" in log and "merge-runs: 0 new run(s)" in log, log


@pytest.mark.slow
def test_import_extends_a_sweep_that_kept_only_its_sweep_json(tmp_path):
    """`normlab sweep --import`: a sweep run without the edge search (as every sweep before issue 40, which kept its
    sweep.json only) is extended by the search's runs alone: its 16 grid runs are read from its sweep.json, never
    trained again, and the search plans from them the 8 runs above the grid (lr 1: the smoke preset's cap) that
    the smoke sweep with the search runs itself (test_smoke_sweep_cli). A sweep trained otherwise, in another
    precision or on other validation targets is refused with what differs."""
    from tests.clirun import normlab

    old = tmp_path / "old"
    cfg = sweep_scale("smoke")
    proc = normlab("sweep", "--scale", "smoke", "--out", str(old), "--no-estimate", "--no-diagnose", "--set",
                   "find_edge=false")  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    grid = len(cfg.schemes) * len(cfg.warmups) * len(cfg.widths) * len(cfg.lrs)
    curves = grid // len(cfg.lrs)
    src = old / "report" / "sweep.json"
    before = json.loads(src.read_text())
    assert len(before["cells"]) == grid and all(r["edge"]["per_seed"][0]["censored"] for r in before["frontier"])
    shutil.rmtree(old / "runs")  # what was committed: the report, not the runs
    new = tmp_path / "new"
    proc = normlab("sweep", "--scale", "smoke", "--out", str(new), "--no-estimate", "--no-diagnose", "--import",
                   str(old / "report"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"--import {old / 'report'}: {grid} finished run(s) of this sweep" in proc.stderr
    trained = sorted(d.name for d in (new / "runs").iterdir())
    assert len(trained) == curves and all("-lr1.00e+00-" in n for n in trained), trained
    data = json.loads((new / "report" / "sweep.json").read_text())
    imported = [c for c in data["cells"] if c.get("imported_from")]
    assert len(imported) == grid and len(data["cells"]) == grid + curves
    by_name = {c["name"]: c for c in before["cells"]}
    assert all(c["final"] == by_name[c["name"]]["final"] and c["l0"] == by_name[c["name"]]["l0"] for c in imported)
    # where each imported run trained comes with it (its record's machine, not this invocation's)
    assert all(c["machine"] and c["machine"] == by_name[c["name"]]["machine"] for c in imported)
    assert all(r["edge"]["per_seed"] == [{"seed": 1, "last_stable": 0.1, "first_unstable": 1.0, "ratio": 10.0,
                                          "censored": False}] for r in data["frontier"])  # fmt: skip
    want = "bf16" if _native_bf16() else "fp32"
    [meta] = data["meta"]["imported"]
    assert meta["runs"] == grid and meta["precision"] == want and data["meta"]["edge_runs"] == curves
    md = (new / "report" / "SWEEP.md").read_text()
    assert f"{grid} run(s) read from {old / 'report'} (--import: not trained by this sweep" in md
    outcomes = data["meta"]["outcomes"]
    assert outcomes["imported"] == grid and outcomes["completed"] + outcomes["diverged"] == curves
    assert data["meta"]["train_time_s"] == pytest.approx(sum(c["elapsed_s"] for c in data["cells"]
                                                             if not c.get("imported_from")))  # fmt: skip
    # the extended sweep imported again, in training mode: its edge-search runs, beyond the grid, are runs of this
    # sweep too, and nothing is trained; a run finished in OUT wins over the imported one of its name
    third = tmp_path / "third"
    (third / "runs").mkdir(parents=True)
    shutil.copytree(new / "runs" / trained[0], third / "runs" / trained[0])
    again = normlab("sweep", "--scale", "smoke", "--out", str(third), "--no-estimate", "--no-diagnose", "--import",
                    str(new / "report"))  # fmt: skip
    assert again.returncode == 0 and " start " not in again.stderr, again.stderr[-2000:]
    assert f"+ {curves} imported beyond the grid" in again.stderr
    redone = json.loads((third / "report" / "sweep.json").read_text())
    assert redone["frontier"] == data["frontier"] and redone["meta"]["edge_runs"] == curves
    assert [c["name"] for c in redone["cells"] if not c.get("imported_from")] == [trained[0]]
    # where each run was first read from is kept
    assert {c["imported_from"] for c in redone["cells"] if c["lr"] < 1} == {str(old / "report")}
    assert {c["imported_from"] for c in redone["cells"] if c["lr"] == 1 and c["name"] != trained[0]} == {
        str(new / "report")}
    # --report-only reads the same
    again = normlab("sweep", "--scale", "smoke", "--out", str(new), "--report-only", "--no-diagnose", "--import",
                    str(src))  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((new / "report" / "sweep.json").read_text())["frontier"] == data["frontier"]
    assert "Written with --report-only: every one of its runs had finished." in (new / "report" / "SWEEP.md").read_text()
    # --report-only on the grid alone: the runs the search would add are pending curves, not missing points
    grid_only = normlab("sweep", "--scale", "smoke", "--out", str(tmp_path / "grid-only"), "--report-only",
                        "--no-diagnose", "--import", str(src))  # fmt: skip
    assert grid_only.returncode == 0, grid_only.stderr[-2000:]
    meta = json.loads((tmp_path / "grid-only" / "report" / "sweep.json").read_text())["meta"]
    assert meta["edge_pending"] == curves and meta["edge_unrun"] == curves and meta["unfinished"] == curves
    md = (tmp_path / "grid-only" / "report" / "SWEEP.md").read_text()
    assert "every one of its runs had finished" in md
    assert f"The edge search is not finished: {curves} curve(s) would need more runs" in md
    # refused, each with what differs and before anything is written: the training settings, the precision, the
    # validation targets, an unknown precision, no run of this sweep
    other = normlab("sweep", "--scale", "smoke", "--out", str(tmp_path / "x"), "--set", "updates=5", "--import",
                    str(src))  # fmt: skip
    assert other.returncode == 2 and f"updates={cfg.updates} (here 5)" in other.stderr, other.stderr[-2000:]
    none = normlab("sweep", "--scale", "smoke", "--out", str(tmp_path / "x"), "--set", "schemes=[peri]", "--import",
                   str(src))  # fmt: skip
    assert none.returncode == 2 and f"none of its {grid} runs is a finished run of this sweep" in none.stderr
    flip = "fp32" if want == "bf16" else "bf16"
    prec = normlab("sweep", "--scale", "smoke", "--out", str(tmp_path / "x"), "--precision", flip, "--import", str(src))
    assert prec.returncode == 2 and f"--precision {want} to extend it" in prec.stderr, prec.stderr[-2000:]
    for key, value, words in (("baseline", {**before["baseline"], "tokens": 1}, "validation targets are not"),
                              ("meta", {**before["meta"], "precision": None}, "does not record one precision")):
        bad = tmp_path / key / "sweep.json"
        bad.parent.mkdir()
        bad.write_text(json.dumps({**before, key: value}))
        proc = normlab("sweep", "--scale", "smoke", "--out", str(tmp_path / "x"), "--no-estimate", "--import", str(bad))
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr[-2000:]
        assert not (tmp_path / "x").exists()  # refused before anything is written
