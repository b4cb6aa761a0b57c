"""Issue 40's definitions on synthetic cells (no training): the one stability criterion, the edge search's
planner (extension, then bisection), censoring, the seeds' sign test, the width law's interval with a censored
width, and diagnose scored on held-out cells."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

from normlab.analysis.diagnose import held_out_agreement
from normlab.experiments.sweep import (
    LR_CAP,
    RESOLUTION,
    Cell,
    Edge,
    analyze,
    curve_failures,
    SweepConfig,
    edge,
    edge_estimate_line,
    edge_runs_per_curve,
    edge_search_runs,
    idle_curves,
    next_grid_lr,
    plan_edge,
    plan_edges,
    predicted_slope,
    seed_sign,
    unstable,
    warmup_truth,
    warmup_verdict,
    warmup_verdicts,
    width_law,
)

L0 = 9.0
GRID = (1e-4, 2.15e-4, 4.64e-4, 1e-3, 2.15e-3, 4.64e-3, 1e-2)


# ---- the criterion ----


def test_one_criterion_non_finite_diverged_or_above_l0():
    assert not unstable(6.8, L0)  # on the unigram plateau, below l0: not diverged (curve_failures sees it)
    assert not unstable(L0, L0)  # ending where it started is not above it
    assert unstable(L0 + 1e-6, L0)
    assert unstable(float("nan"), L0) and unstable(float("inf"), L0) and unstable(None, L0)
    assert unstable(5.0, L0, "diverged")  # the trainer's status
    assert not unstable(5.0, None)  # l0 unknown: only non-finite losses count


U = 6.8  # the unigram loss of the synthetic curves' validation targets


def test_collapse_on_the_plateau_above_the_best_lr_is_a_failure_below_it_is_not():
    # a Post-LN-like curve: too slow at 1e-4 (plateau), learns at 1e-3, back on the plateau from 1e-2, above l0 at 1
    pts = {1e-4: (6.9, L0, "completed"), 1e-3: (5.0, L0, "completed"), 4.64e-3: (6.0, L0, "completed"),
           1e-2: (6.75, L0, "completed"), 1e-1: (6.95, L0, "completed"), 1.0: (9.5, L0, "completed")}  # fmt: skip
    failed = curve_failures(pts, unigram=U)
    # 1e-4 is below the best lr: slow, not unstable; 6.75 >= U - 0.1 = 6.7 above the best: collapsed
    assert failed == {1e-4: False, 1e-3: False, 4.64e-3: False, 1e-2: True, 1e-1: True, 1.0: True}
    assert edge(failed) == Edge(4.64e-3, 1e-2)
    # divergence alone (no U) sees only the run above l0: the edge the plateau rule was added to move
    assert edge(curve_failures(pts)) == Edge(1e-1, 1.0)
    # the line is U - margin: a run 0.11 below U learned something beyond token frequencies
    assert not curve_failures({**pts, 1e-2: (U - 0.11, L0, "completed")}, unigram=U)[1e-2]
    assert curve_failures({**pts, 1e-2: (U - 0.1, L0, "completed")}, unigram=U, margin=0.1)[1e-2]
    # a non-finite run fails wherever it is, also below the best learning rate
    assert curve_failures({**pts, 1e-4: (float("nan"), L0, "diverged")}, unigram=U)[1e-4]


def test_a_curve_that_never_leaves_the_plateau_fails_everywhere():
    pts = {1e-4: (6.95, L0, "completed"), 1e-3: (6.85, L0, "completed"), 1e-2: (7.2, L0, "completed")}
    failed = curve_failures(pts, unigram=U)
    assert all(failed.values()) and edge(failed) == Edge(None, 1e-4)
    assert plan_edge(failed, lr_min=1e-4, per_decade=3) is None  # nothing to search: no stable run to bracket


def test_plan_edges_bisects_between_learning_and_the_plateau():
    cells = [Cell("post", "none", 64, lr, 1, f, L0, "completed")
             for lr, f in zip(GRID, (6.9, 6.5, 6.0, 5.5, 5.2, 6.0, 6.9))]  # fmt: skip
    # divergence only: nothing above l0, so the search extends past the grid
    assert plan_edges(cells, lr_min=1e-4, per_decade=3) == [("post", "none", 64, 1, 2.15e-2)]
    # with U: 1e-2 collapsed (6.9 >= 6.7), 4.64e-3 learned: bisect between them
    assert plan_edges(cells, lr_min=1e-4, per_decade=3, unigram=U) == [("post", "none", 64, 1, 6.81e-3)]
    rows = analyze(cells, unigram=U, grid=GRID)
    assert rows[0]["edge"]["per_seed"][0]["first_unstable"] == 1e-2
    assert rows[0]["divergence_edge"]["censored"]
    # how that first unstable run failed: on the plateau, 6.9 against the line U - 0.1
    (first,) = rows[0]["first_unstable"]
    assert (first["seed"], first["lr"], first["diverged"]) == (1, 1e-2, False)
    assert first["above_line"] == pytest.approx(6.9 - (U - 0.1))
    # a seed whose first unstable run diverged (non-finite): no distance to the line
    nan = [Cell("post", "none", 64, lr, 2, f, L0, "completed" if f == f else "diverged")
           for lr, f in zip(GRID, (6.9, 6.5, 6.0, 5.5, 5.2, float("nan"), float("nan")))]  # fmt: skip
    runs = {r["seed"]: r for r in analyze(cells + nan, unigram=U, grid=GRID)[0]["first_unstable"]}
    assert runs[2] == {"seed": 2, "lr": 4.64e-3, "final": None, "diverged": True, "above_line": None}


# ---- the planner ----


def test_the_planner_extends_on_the_grid_until_a_run_is_unstable_or_the_cap():
    stable = dict.fromkeys(GRID, False)
    assert plan_edge(stable, lr_min=1e-4, per_decade=3) == 2.15e-2  # the next point of the same grid
    assert next_grid_lr(1e-2, 1e-4, 3) == 2.15e-2 and next_grid_lr(4.64e-1, 1e-4, 3) == 1.0
    at_cap = {**stable, 2.15e-2: False, 4.64e-2: False, 1e-1: False, 2.15e-1: False, 4.64e-1: False, 1.0: False}
    assert plan_edge(at_cap, lr_min=1e-4, per_decade=3) is None  # stable at the cap: done, censored
    assert edge(at_cap) == Edge(1.0, None) and edge(at_cap).censored and LR_CAP == 1.0
    # with a lower cap the extension stops below it
    assert plan_edge(stable, lr_min=1e-4, per_decade=3, cap=1e-2) is None


def test_the_planner_bisects_to_the_resolution():
    runs = {**dict.fromkeys(GRID, False), 2.15e-2: True}
    assert edge(runs) == Edge(1e-2, 2.15e-2)
    mid = plan_edge(runs, lr_min=1e-4, per_decade=3)
    assert mid == float(f"{math.sqrt(1e-2 * 2.15e-2):.3g}") == 1.47e-2
    runs[mid] = False  # stable: the bracket is [1.47e-2, 2.15e-2), ratio 1.46
    nxt = plan_edge(runs, lr_min=1e-4, per_decade=3)
    assert nxt == 1.78e-2
    runs[nxt] = True  # unstable: [1.47e-2, 1.78e-2), ratio 1.21 > 1.2: one more
    last = plan_edge(runs, lr_min=1e-4, per_decade=3)
    assert 1.47e-2 < last < 1.78e-2
    runs[last] = False
    assert plan_edge(runs, lr_min=1e-4, per_decade=3) is None and edge(runs).ratio <= RESOLUTION
    # unstable from the smallest learning rate: done, no search below the grid
    assert plan_edge(dict.fromkeys(GRID, True), lr_min=1e-4, per_decade=3) is None
    assert edge(dict.fromkeys(GRID, True)) == Edge(None, 1e-4)


def _search(threshold: float, **kw) -> int:
    """The runs plan_edge adds to the grid of a curve unstable from ``threshold`` up."""
    runs = {lr: lr >= threshold for lr in GRID}
    added = 0
    while (nxt := plan_edge(runs, lr_min=1e-4, per_decade=3, **kw)) is not None:
        runs[nxt] = nxt >= threshold
        added += 1
    return added


def test_the_estimate_counts_the_runs_the_planner_adds():
    """edge_runs_per_curve's counts are the planner's: 3 bisections where the grid brackets the edge, wherever in
    the bracket the edge lies; 9 where it lies in the last step below the cap (the 6 grid points above 1e-2, then
    3 bisections); 6 and no bisection (censored) where the curve is still stable at the cap."""
    cfg = SweepConfig()
    typical, most = edge_runs_per_curve(cfg)
    assert (typical, most) == (3, 9)
    for threshold in (2.2e-3, 3.1e-3, 4.6e-3, 7e-3, 1e-2):  # bracketed by the grid
        assert _search(threshold) == typical, threshold
    assert _search(0.9) == most  # the last extension point (1.0) fails, then 3 bisections between 0.464 and 1
    assert _search(5.0) == most - typical  # stable at the cap: the extension only
    assert _search(1e-5) == 0  # unstable from lr_min: nothing
    assert edge_runs_per_curve(SweepConfig(find_edge=False)) == (0, 0)
    assert edge_runs_per_curve(SweepConfig(resolution=1.5)) == (1, 7)  # 2.15 -> 1.47
    line = edge_estimate_line(cfg, 0.01, jobs=2)
    curves = len(cfg.schemes) * len(cfg.warmups) * len(cfg.widths) * cfg.seeds
    assert f"{curves} curves; up to 3 bisection runs a curve" in line and f"{3 * curves:,} to {9 * curves:,} runs" in line
    assert edge_search_runs(cfg, math.inf) == 6 and "6 where a curve is still stable at the cap 1" in line
    hours = 9 * curves * cfg.updates * 0.01 / 3600
    scale, unit = (3600, "h") if hours >= 1 else (60, "min")
    assert f"~{3 * curves * cfg.updates * 0.01 / scale:.1f} to {9 * curves * cfg.updates * 0.01 / scale:.1f} {unit} more" in line
    assert "more at" not in edge_estimate_line(cfg, None, jobs=2)
    assert " h more" in edge_estimate_line(cfg, 1.0, jobs=2) and " min more" in edge_estimate_line(cfg, 1e-4, jobs=2)


def test_a_stable_run_above_the_first_unstable_one_does_not_move_the_edge():
    runs = {1e-3: False, 2.15e-3: True, 4.64e-3: False, 1e-2: True}
    assert edge(runs) == Edge(1e-3, 2.15e-3)


def test_plan_edges_per_seed_curve_never_reruns_and_skips_holes():
    cells = [Cell("post", "none", 64, lr, 1, 6.0, L0) for lr in GRID]  # all stable: extend
    cells += [Cell("post", "none", 64, lr, 2, 6.0 if lr < 1e-2 else 9.5, L0) for lr in GRID]  # seed 2: bisect
    cells += [Cell("pre", "none", 64, lr, 1, 6.0, L0) for lr in GRID[:-1]]
    cells.append(Cell("pre", "none", 64, 1e-2, 1, None, None, "failed"))  # a hole: left out, not a verdict
    plan = sorted(plan_edges(cells, lr_min=1e-4, per_decade=3))
    assert plan == [("post", "none", 64, 1, 2.15e-2), ("post", "none", 64, 2, 6.81e-3),
                    ("pre", "none", 64, 1, 1e-2)]  # fmt: skip
    # the learning rate it asks for is not already run (a hole at 1e-2 is planned again: it has no result)
    done = cells + [Cell("post", "none", 64, 2.15e-2, 1, 9.5, L0), Cell("post", "none", 64, 6.81e-3, 2, 6.0, L0)]
    plan = dict(((k[0], k[3]), k[4]) for k in plan_edges(done, lr_min=1e-4, per_decade=3))
    assert plan[("post", 1)] == 1.47e-2 and plan[("post", 2)] == 8.25e-3  # both bisect on


# ---- censoring and the frontier's interval ----


def test_the_interval_over_seeds_and_censoring():
    cells = [Cell("post", "none", 64, lr, s, 6.0, L0) for s in (1, 2) for lr in GRID]
    cells += [Cell("post", "none", 64, 2.15e-2, 1, None, None, "diverged"), Cell("post", "none", 64, 1.47e-2, 1,
              6.0, L0), Cell("post", "none", 64, 2.15e-2, 2, 9.1, L0)]  # fmt: skip
    (row,) = analyze(cells, grid=GRID)
    e = row["edge"]
    assert e["lo"] == 1e-2 and e["hi"] == 2.15e-2 and not e["censored"]  # seed 1 [1.47e-2, 2.15e-2), seed 2 [1e-2, ..)
    assert [(x["seed"], x["last_stable"], x["first_unstable"]) for x in e["per_seed"]] == [(1, 1.47e-2, 2.15e-2),
                                                                                          (2, 1e-2, 2.15e-2)]
    # the extra runs are not on the grid: the band (LR tolerance, sensitivity) reads the grid's 7 points only
    assert len(row["curve"]["lrs"]) == 7
    (top,) = analyze([Cell("pre", "none", 64, lr, 1, 6.0, L0) for lr in GRID], grid=GRID)
    assert top["edge"]["censored"] and top["edge"]["lo"] == 1e-2 and top["edge"]["hi"] is None
    assert top["edge"]["centre"] is None  # a bound, never a point


# ---- the seeds' sign test ----


def test_seed_sign_needs_disjoint_brackets():
    assert seed_sign(Edge(1e-2, 1.2e-2), Edge(1.2e-2, 1.4e-2)) == 1  # warm-up stable where none was not
    assert seed_sign(Edge(1e-2, 1.2e-2), Edge(1.1e-2, 1.3e-2)) == 0  # overlapping: within the resolution
    assert seed_sign(Edge(1.4e-2, 1.6e-2), Edge(1e-2, 1.2e-2)) == -1
    assert seed_sign(Edge(1e-2, None), Edge(1e-2, None)) is None  # two lower bounds
    assert seed_sign(Edge(1e-3, 1.2e-3), Edge(1e-2, None)) == 1  # a censored warm-up arm above a bracket
    assert seed_sign(Edge(1e-2, None), Edge(1e-3, 1.2e-3)) == -1
    assert seed_sign(Edge(1e-3, None), Edge(1e-3, 1.2e-3)) is None  # open: the bound could be anywhere above
    assert seed_sign(Edge(None, 1e-4), Edge(1e-4, 1.2e-4)) == 1  # unstable everywhere without warm-up
    assert seed_sign(Edge(1e-4, 1.2e-4), Edge(None, 1e-4)) == -1


def test_seed_sign_leaves_open_what_the_brackets_cannot_see():
    # both arms unstable from the smallest rate: both edges lie somewhere below it, in any order
    assert seed_sign(Edge(None, 1e-4), Edge(None, 1e-4)) is None
    # overlapping brackets decide "no difference" only when both are resolved: a failed bisection run (or one not
    # yet run) leaves a grid step, x2.15, whose overlap with a resolved bracket says nothing
    assert seed_sign(Edge(1e-3, 2.15e-3), Edge(1.5e-3, 1.65e-3)) is None
    assert seed_sign(Edge(1e-3, 2.15e-3), Edge(1.5e-3, 1.65e-3), resolution=None) == 0  # no resolution asked
    assert seed_sign(Edge(1e-3, 1.2e-3), Edge(1.1e-3, 1.3e-3), resolution=1.2) == 0  # both within 1.2x
    # disjoint brackets decide whatever their widths
    assert seed_sign(Edge(1e-3, 2.15e-3), Edge(4.64e-3, 1e-2)) == 1


def test_sign_test_verdicts():
    assert warmup_verdict([1] * 5)["verdict"] == "needed"  # 0.5^5 = 0.031 <= 0.05
    assert warmup_verdict([0, 0, -1, 0, 0])["verdict"] == "not needed"
    split = warmup_verdict([1, 1, 1, 0, 0])
    assert split["verdict"] == "inconclusive" and "disagree" in split["why"]
    few = warmup_verdict([1, 1])  # two seeds agreeing: p = 0.25, too few
    assert few["verdict"] == "inconclusive" and "too few" in few["why"] and few["p_needed"] == 0.25
    six = warmup_verdict([1, 1, 1, 1, 1, 1, 0])  # P(X >= 6 | 7, 1/2) = 8/128 = 0.0625 > 0.05: not enough
    assert six["verdict"] == "inconclusive" and six["p_needed"] == 8 / 128
    assert warmup_verdict([None, None])["verdict"] == "undecided"
    assert warmup_verdict([1, None, 1, 1, 1, 1])["decided"] == 5


def test_warmup_verdicts_from_rows_seed_by_seed():
    def curve(warmup, seed, top_stable):
        return [Cell("post", warmup, 64, lr, seed, 6.0 if lr <= top_stable else None, L0,
                     "completed" if lr <= top_stable else "diverged") for lr in GRID]  # fmt: skip

    agree = [c for s in range(1, 6) for c in curve("none", s, 1e-3) + curve("adam", s, 4.64e-3)]
    rows = analyze(agree, grid=GRID)
    v = warmup_verdicts(rows, "adam")[("post", 64)]
    assert v["verdict"] == "needed" and v["signs"] == [1] * 5 and v["seeds"] == [1, 2, 3, 4, 5]
    assert warmup_truth(rows) == {("post", 64): True}
    # seeds that disagree: three raise it, two do not
    mixed = [c for s in range(1, 6) for c in curve("none", s, 1e-3) + curve("adam", s, 4.64e-3 if s <= 3 else 1e-3)]
    v = warmup_verdicts(analyze(mixed, grid=GRID), "adam", resolution=None)[("post", 64)]
    assert v["verdict"] == "inconclusive" and v["signs"] == [1, 1, 1, 0, 0]
    assert warmup_truth(analyze(mixed, grid=GRID), resolution=None) == {("post", 64): None}
    # the same grid-only curves at the edge search's resolution: seeds 4-5's one-step brackets overlap, which
    # decides nothing, and three seeds are too few for the sign test
    v = warmup_verdicts(analyze(mixed, grid=GRID), "adam")[("post", 64)]
    assert v["signs"] == [1, 1, 1, None, None] and v["verdict"] == "inconclusive" and v["undecided_seeds"] == 2


def test_the_mean_rate_reading_scales_the_warm_up_arm():
    """The second reading beside the verdict: the warm-up arm's rates times its mean share of lr_max over the run
    (its own schedule, by hand: a 100-update linear warm-up in 300 updates averages (50.5 + 200) / 300 = 0.835), so
    that an edge raised only as much as a constant rate lowered to the same mean would raise it counts as 0."""
    from normlab.experiments.sweep import mean_lr_factor

    cfg = SweepConfig(updates=300)
    assert mean_lr_factor(cfg, "none") == 1.0
    assert mean_lr_factor(cfg, "adam") == pytest.approx((sum(t / 100 for t in range(1, 101)) + 200) / 300)
    assert mean_lr_factor(cfg, "adam") == pytest.approx(0.835)
    # seed by seed: without warm-up [1.0e-3, 1.1e-3); with it [1.15e-3, 1.25e-3) (disjoint: +), or x0.835 =
    # [0.96e-3, 1.04e-3), overlapping within the resolution: 0; or [1.4e-3, 1.5e-3): x0.835 = [1.17e-3, 1.25e-3), +
    rows = [{"scheme": "post", "warmup": "none", "width": 64, "seeds": 2, "missing_lrs": [],
             "edge": {"per_seed": [{"seed": s, "last_stable": 1.0e-3, "first_unstable": 1.1e-3} for s in (1, 2)]}},
            {"scheme": "post", "warmup": "adam", "width": 64, "seeds": 2, "missing_lrs": [],
             "edge": {"per_seed": [{"seed": 1, "last_stable": 1.15e-3, "first_unstable": 1.25e-3},
                                   {"seed": 2, "last_stable": 1.4e-3, "first_unstable": 1.5e-3}]}}]  # fmt: skip
    assert warmup_verdicts(rows, "adam")[("post", 64)]["signs"] == [1, 1]
    assert warmup_verdicts(rows, "adam", factor=0.835)[("post", 64)]["signs"] == [0, 1]


def test_several_warm_up_arms_share_the_level():
    """"Some warm-up is needed" reads one sign test per arm and says yes when any passes: at SIGN_ALPHA each, a
    sweep where no warm-up helps would say "needed" with a chance up to m x alpha. Each arm is read at alpha / m
    (Bonferroni; review of 2026-11-27): with two arms 5 seeds that all agree (p = 1/32) no longer pass, 6 do."""
    def curve(warmup, seed, top_stable):
        return [Cell("post", warmup, 64, lr, seed, 6.0 if lr <= top_stable else None, L0,
                     "completed" if lr <= top_stable else "diverged") for lr in GRID]  # fmt: skip

    def rows(seeds, arms):
        return analyze([c for s in range(1, seeds + 1) for c in curve("none", s, 1e-3)
                        + [c for w in arms for c in curve(w, s, 4.64e-3)]], grid=GRID)  # fmt: skip

    assert warmup_truth(rows(5, ["adam"])) == {("post", 64): True}  # one arm: alpha
    assert warmup_verdicts(rows(5, ["adam", "paper"]), "adam")[("post", 64)]["verdict"] == "needed"  # arm alone
    assert warmup_truth(rows(5, ["adam", "paper"])) == {("post", 64): None}  # two arms: 1/32 > 0.025
    assert warmup_truth(rows(6, ["adam", "paper"])) == {("post", 64): True}  # 1/64 <= 0.025
    assert warmup_truth(rows(5, ["adam", "paper"]), "adam") == {("post", 64): True}  # one arm asked for


# ---- the width law ----


def test_slope_interval_with_a_censored_width():
    def rows_for(edges):  # {width: {seed: (last stable, first unstable)}}
        return [{"scheme": "post", "warmup": "none", "width": w, "missing_lrs": [],
                 "edge": {"censored": any(hi is None for _, hi in by.values()),
                          "per_seed": [{"seed": s, "last_stable": lo, "first_unstable": hi} for s, (lo, hi) in
                                       by.items()]}}
                for w, by in edges.items()]  # fmt: skip

    # two seeds, each bracketed at 1.2x, the edge halving per doubling (slope -1) for seed 1, falling 1.5x for 2
    r = 1.2
    law = width_law(rows_for({64: {1: (1e-2, r * 1e-2), 2: (1e-2, r * 1e-2)},
                              128: {1: (5e-3, r * 5e-3), 2: (1e-2 / 1.5, r * 1e-2 / 1.5)}}), "post", "none")
    ln2 = math.log(2)
    assert law["per_seed"][0]["lo"] == pytest.approx(-1 - math.log(r) / ln2)
    assert law["per_seed"][0]["hi"] == pytest.approx(-1 + math.log(r) / ln2)
    assert law["lo"] == pytest.approx(-1 - math.log(r) / ln2)
    assert law["hi"] == pytest.approx(-math.log(1.5) / ln2 + math.log(r) / ln2)
    assert law["contains"]["-1"] and law["contains"]["theorem_1"]  # -1.11 at 64-128 lies in [-1.26, -0.32]
    assert law["predicted_post_ln"] == pytest.approx(predicted_slope([64, 128]))
    # the smallest width censored (>= 1e-2): its log-edge may be anywhere above, so the slope is open below; the
    # interval is a bound, never a point
    law = width_law(rows_for({64: {1: (1e-2, None)}, 128: {1: (5e-3, r * 5e-3)}}), "post", "none")
    assert law["lo"] is None and law["hi"] == pytest.approx(math.log(r * 0.5) / ln2) and law["censored"] == [64]
    assert law["contains"]["-1"] and law["contains"]["theorem_1"]
    # the largest width censored: open above
    law = width_law(rows_for({64: {1: (1e-2, r * 1e-2)}, 128: {1: (5e-3, None)}}), "post", "none")
    assert law["hi"] is None and law["lo"] == pytest.approx(math.log(0.5 / r) / ln2)
    # three widths: the middle one has no weight in the least-squares slope, censored or not
    law = width_law(rows_for({64: {1: (1e-2, r * 1e-2)}, 128: {1: (1e-3, None)}, 256: {1: (2.5e-3, r * 2.5e-3)}}),
                    "post", "none")  # fmt: skip
    assert law["lo"] == pytest.approx(-1 - math.log(r) / (2 * ln2))
    assert law["hi"] == pytest.approx(-1 + math.log(r) / (2 * ln2)) and law["censored"] == [128]
    assert law["contains"] == {"-1": True, "theorem_1": True}  # -1.10 in [-1.13, -0.87]: not told apart


def test_seed_mean_slope_and_its_interval():
    """The seeds' mean of their centre slopes with a t-interval: computed by hand for 3 seeds at 2 widths; none
    with a censored width (no centre) or with 2 seeds (one degree of freedom)."""
    def rows_for(edges):  # {width: {seed: (last stable, first unstable)}}
        return [{"scheme": "post", "warmup": "none", "width": w, "missing_lrs": [],
                 "edge": {"censored": any(hi is None for _, hi in by.values()),
                          "per_seed": [{"seed": s, "last_stable": lo, "first_unstable": hi} for s, (lo, hi) in
                                       by.items()]}}
                for w, by in edges.items()]  # fmt: skip

    r, ln2 = 1.2, math.log(2)
    falls = {1: 2.0, 2: 1.5, 3: 2.5}  # each seed's edge falls by this factor from d=64 to 128
    law = width_law(rows_for({64: {s: (1e-2, r * 1e-2) for s in falls},
                              128: {s: (1e-2 / f, r * 1e-2 / f) for s, f in falls.items()}}), "post", "none")
    slopes = [-math.log(f) / ln2 for f in falls.values()]
    for p, want in zip(law["per_seed"], slopes):
        assert p["centre"] == pytest.approx(want)  # a shared bracket ratio: the centre slope is the true one
    mean = sum(slopes) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in slopes) / 2)
    half = 4.302653 * sd / math.sqrt(3)  # t(0.975, 2)
    res = math.log(r) / ln2  # each seed's slope range is centre +- ln(1.2)/ln 2 at two widths one doubling apart
    m = law["seed_mean"]
    assert m["mean"] == pytest.approx(mean) and m["resolution"] == pytest.approx(res)
    assert m["low"] == pytest.approx(mean - half, rel=1e-5) and m["high"] == pytest.approx(mean + half, rel=1e-5)
    assert m["low_res"] == pytest.approx(mean - half - res, rel=1e-5)
    assert m["high_res"] == pytest.approx(mean + half + res, rel=1e-5)
    assert law["mean_contains"] == {"-1": True, "theorem_1": True}  # [-2.15, 0.21]: 3 seeds, wide
    # the union of the per-seed ranges holds the mean
    assert law["lo"] < mean < law["hi"]
    # the report's width-law table shows it beside the union
    from normlab.report.sweep import _width_rows

    head, rows = _width_rows({"width_law": [law]})
    cell = dict(zip(head, rows[0]))
    assert cell["seeds' mean slope (95% t-interval over seeds; widened by the resolution)"] == (
        f"{mean:.2f} [{mean - half:.2f}, {mean + half:.2f}]; [{mean - half - res:.2f}, {mean + half + res:.2f}] (3 seeds)")
    assert cell["-1, Theorem 1 against the widened interval"] == "not excluded, not excluded"
    # the envelope of the seeds' ranges is not a confidence interval: the table says "outside every seed's range",
    # never "excluded", of a slope outside it
    outside = {"width_law": [{**law, "contains": {"-1": False, "theorem_1": True}}]}
    cell = dict(zip(*(lambda h, r: (h, r[0]))(*_width_rows(outside))))
    assert cell["-1 against the envelope"] == "outside every seed's range"
    assert cell["Theorem 1 against the envelope"] == "inside"
    # five seeds that share their brackets (as bisection makes them) and fall as 1/d: the t-interval of the centres
    # is narrow, and a slope just outside it but within the resolution is not excluded by the widened interval
    five = {s: 2.0 * (1.01 if s % 2 else 0.99) for s in range(1, 6)}
    law = width_law(rows_for({64: {s: (1e-2, r * 1e-2) for s in five},
                              128: {s: (1e-2 / f, r * 1e-2 / f) for s, f in five.items()}}), "post", "none")
    m = law["seed_mean"]
    assert m["high"] - m["low"] < 0.05 and m["low"] > -1.1 > m["low_res"]
    assert law["mean_contains"]["theorem_1"]  # -1.11 at d = 64, 128: outside [low, high], inside the widened one
    # one seed censored at d=128: no centre for it, so no mean (never a mean over the seeds that happen to end)
    law = width_law(rows_for({64: {s: (1e-2, r * 1e-2) for s in falls},
                              128: {1: (5e-3, None), 2: (5e-3, r * 5e-3), 3: (4e-3, r * 4e-3)}}), "post", "none")
    assert law["per_seed"][0]["centre"] is None and law["seed_mean"] is None and law["mean_contains"] is None
    # two seeds: no interval
    law = width_law(rows_for({64: {1: (1e-2, r * 1e-2), 2: (1e-2, r * 1e-2)},
                              128: {1: (5e-3, r * 5e-3), 2: (4e-3, r * 4e-3)}}), "post", "none")
    assert law["seed_mean"] is None and all(p["centre"] is not None for p in law["per_seed"])


# ---- diagnose held out ----


def test_held_out_scoring_beside_the_trivial_baseline():
    scores = {("post", 3, 64): 2.0, ("post", 3, 128): 1.9, ("pre", 3, 64): 0.6, ("pre", 3, 128): 0.55,
              ("peri", 3, 64): 0.3, ("deepnorm", 3, 64): 1.5, ("rezero", 3, 64): None, ("post", 6, 64): 2.2,
              ("pre", 6, 64): 0.5, ("admin", 3, 64): 0.8}  # fmt: skip
    truth = {("post", 3, 64): True, ("post", 3, 128): True, ("pre", 3, 64): False, ("pre", 3, 128): False,
             ("peri", 3, 64): False, ("deepnorm", 3, 64): False, ("rezero", 3, 64): False, ("post", 6, 64): None,
             ("pre", 6, 64): False, ("admin", 3, 64): True}  # fmt: skip
    cal = [("post", 3, 64), ("post", 3, 128), ("pre", 3, 64), ("pre", 3, 128)]
    ev = [k for k in scores if k not in cal]
    out = held_out_agreement(scores, truth, cal, ev)
    # calibration: every cut between 0.6 and 1.9 separates the two clusters; the cut points are 0.575 (below the
    # pre cluster, 1 error), 1.25 (0 errors), ... the one with the fewest errors is 1.25, the only one
    assert out["threshold"] == pytest.approx((0.6 + 1.9) / 2) and out["calibration"]["agree"] == 4
    ev_ = out["evaluation"]
    # decided on the held-out cells: peri (0.3 < t: no, right), deepnorm (1.5 > t: yes, wrong), pre d=6 (right),
    # admin (0.8 < t: no, wrong); post d=6 has no truth (undecided); rezero has no S (counted apart)
    assert (ev_["decided"], ev_["undecided"], ev_["no_score"], ev_["agree"]) == (4, 1, 1, 2)
    # the baseline "Post-LN needs warm-up": peri, deepnorm, pre right; admin wrong
    assert ev_["baseline_agree"] == 3 and ev_["schemes"] == ["admin", "deepnorm", "peri", "pre"]
    assert ev_["always_agree"] == 1  # "every scheme needs warm-up": right at admin only
    with pytest.raises(ValueError, match="both"):
        held_out_agreement(scores, truth, cal, cal[:1])
    # no calibration cell decides: no threshold, nothing scored
    none = held_out_agreement(scores, {k: None for k in truth}, cal, ev)
    assert none["threshold"] is None and none["evaluation"]["decided"] == 0
    # ... while the held-out cells have a truth: each is counted, as having no threshold to be scored by
    blind = held_out_agreement(scores, {k: (None if k in cal else v) for k, v in truth.items()}, cal, ev)
    e = blind["evaluation"]
    assert (e["decided"], e["undecided"], e["no_score"], e["no_threshold"]) == (0, 1, 1, 4)
    assert e["decided"] + e["undecided"] + e["no_score"] + e["no_threshold"] == e["cells"]


def test_held_out_threshold_is_the_median_of_equally_good_cuts():
    scores = {("post", 1): 3.0, ("pre", 1): 1.0, ("x", 1): 5.0, ("y", 1): 0.0}
    truth = {("post", 1): True, ("pre", 1): False, ("x", 1): False, ("y", 1): True}
    # cuts -1, 0.5, 2, 4, 6: errors 2, 3, 2, 3, 2 -> three tie at 2; the median of them is 2
    out = held_out_agreement(scores, truth, list(scores), [])
    assert out["threshold"] == 2.0
    # positive scores (S is a ratio): the outer cuts halve and double the extremes instead of stepping by 1
    pos = {k: v + 0.5 for k, v in scores.items()}  # 3.5, 1.5, 5.5, 0.5 -> cuts 0.25, 1, 2.5, 4.5, 11
    assert held_out_agreement(pos, truth, list(pos), [])["threshold"] == 2.5


def test_a_curve_with_no_finished_run_reads_not_finished_not_never_trains():
    """--report-only on a grid in progress: a curve none of whose runs has finished says so, where it read "never
    trains" (which says its runs ran and learned nothing); a curve with some runs finished keeps its numbers."""
    from normlab.report.sweep import _frontier_rows

    cells = [Cell("post", "none", 64, lr, 1, 6.0, L0) for lr in GRID]
    cells += [Cell("post", "adam", 64, lr, 1, None, None, "absent") for lr in GRID]
    rows = analyze(cells, grid=GRID)
    result = {"config": {"widths": [64], "schemes": ["post"], "warmups": ["none", "adam"]}, "frontier": rows,
              "warmup_lengths": {"none": 0, "adam": 100}}
    _, table = _frontier_rows(result)
    by_arm = {r[0] + "/" + r[1]: r[2] for r in table}
    assert next(v for k, v in by_arm.items() if "100" in k) == "no finished run (not run, running or failed)"
    assert next(v for k, v in by_arm.items() if "none" in k).startswith(">=0.01 (censored) / ")


def test_the_asynchronous_search_waits_for_every_run_of_a_curve():
    """idle_curves: a curve is planned only when none of its runs is still to come; a run to resume (it reads
    `interrupted` or `failed` on disk until it starts again) keeps its curve busy, unless it ended in this
    invocation without finishing (a hole)."""
    def curve(seed, statuses):
        return [Cell("post", "none", 64, lr, seed, 6.0, L0, st) for lr, st in zip(GRID, statuses)]

    done = ["completed"] * 7
    cells = (curve(1, done) + curve(2, done[:3] + ["interrupted"] + done[4:])
             + curve(3, done[:5] + ["failed", "completed"]) + curve(4, done[:6] + ["absent"]))  # fmt: skip
    names = [f"r{c.seed}-{c.lr}" for c in cells]
    assert {c.seed for c in idle_curves(cells, names, set())} == {1}
    # seed 3's failed run ended in this invocation: a hole, its curve can be planned from the rest
    assert {c.seed for c in idle_curves(cells, names, {f"r3-{GRID[5]}"})} == {1, 3}
    # what the planner then plans for seed 2 with its interrupted run (a hole) differs from what it plans once
    # that run has finished unstable: why the search waits for it
    stable = {lr: False for lr in GRID[:3]} | {lr: True for lr in GRID[4:]}
    assert plan_edge(stable, lr_min=GRID[0], per_decade=3) != plan_edge(stable | {GRID[3]: True}, lr_min=GRID[0],
                                                                         per_decade=3)


def _sweep_json(path, *, task, layers, truths, scores, tops=None):
    """A sweep.json of synthetic cells (5 seeds, the grid only): per scheme, warm-up needed (the warm-up arm stable
    a decade above the no-warm-up arm's edge: disjoint brackets, +1 on every seed) or not (the reverse: -1 on
    every seed); diagnose's table with the S given (threshold 1.0)."""
    import json

    from normlab.experiments.sweep import SweepConfig

    schemes = tuple(truths)
    cfg = SweepConfig(task=task, layers=layers, schemes=schemes, warmups=("none", "adam"), widths=(64,), seeds=5,
                      find_edge=False)  # fmt: skip
    cells = []
    for scheme, needed in truths.items():
        arms_top = (tops or {}).get(scheme) or ({"none": 1e-3, "adam": 1e-2} if needed else {"none": 1e-2, "adam": 1e-3})
        for warm, top in arms_top.items():
            for seed in range(1, 6):
                for lr in GRID:
                    ok = lr <= top
                    cells.append({"scheme": scheme, "warmup": warm, "width": 64, "lr": lr, "seed": seed,
                                  "final": 6.0 if ok else None, "l0": L0, "status": "completed" if ok else "diverged"})
    table = [{"scheme": s, "width": 64, "score": scores[s], "threshold": 1.0, "diagnose": scores[s] > 1.0}
             for s in schemes]  # fmt: skip
    path.mkdir(parents=True)
    (path / "sweep.json").write_text(json.dumps({"config": cfg.to_dict(), "cells": cells,
                                                  "baseline": {"unigram_loss": U}, "diagnose": {"table": table}}))
    return path


def test_the_mean_rate_truth_reads_the_arms_factor(tmp_path):
    """held_out_cells' second truth: warm-up arms one grid step apart ([1e-3, 2.15e-3) without, [2.15e-3, 4.64e-3)
    with it: disjoint, needed in 5 of 5) are read on the mean-rate scale at translation's x0.835, where the brackets
    overlap and are a grid step wide (wider than the resolution): open, so the cell is undecided; the LM's x0.935
    (40 warm-up updates) overlaps too. With the factor 1 the two truths would coincide."""
    from normlab.experiments.heldout import held_out
    from normlab.experiments.sweep import held_out_cells

    a = _sweep_json(tmp_path / "sweep-a", task="translation", layers=3, truths={"post": True, "pre": True},
                    scores={"post": 2.0, "pre": 0.6}, tops={"post": {"none": 1e-3, "adam": 2.15e-3}})  # fmt: skip
    by = {c["scheme"]: c for c in held_out_cells(a)}
    assert by["post"]["truth"] is True and by["post"]["truth_mean_rate"] is None  # one step: within the mean rate
    assert by["pre"]["truth"] is True and by["pre"]["truth_mean_rate"] is True  # a decade: beyond it
    m = held_out(list(by.values()))["mean_rate"]
    assert (m["decided"], m["undecided"], m["agree"], m["always_agree"]) == (1, 1, 0, 1)


def test_held_out_report_over_sweeps(tmp_path, capsys):
    """`normlab sweep --held-out`: the shipped verdicts on every decided cell of every sweep beside the baseline,
    the truth recomputed from the cells under today's rules, and the refitted splits (post/pre -> other schemes,
    one task -> the other), each scored on cells its threshold never saw."""
    from normlab.analysis.diagnose import depth_threshold
    from normlab.experiments.heldout import held_out, held_out_markdown, write_held_out
    from normlab.experiments.sweep import held_out_cells

    def cells(*paths):
        return [c for p in paths for c in held_out_cells(p)]

    # the "not needed" cells' no-warm-up arms end inside the grid (a decade above their warm-up arms), so that every
    # no-warm-up edge is bracketed (the rank test of S against it, below)
    a = _sweep_json(tmp_path / "results" / "sweep-a", task="translation", layers=3,
                    truths={"post": True, "pre": True, "peri": False}, scores={"post": 2.0, "pre": 0.6, "peri": 0.3},
                    tops={"peri": {"none": 4.64e-3, "adam": 4.64e-4}})
    b = _sweep_json(tmp_path / "results" / "sweep-b", task="lm", layers=6,
                    truths={"post": True, "pre": False, "mixln": True, "output": False},
                    scores={"post": 0.4, "pre": 0.1, "mixln": 0.3, "output": 0.05},
                    tops={"pre": {"none": 4.64e-3, "adam": 4.64e-4}, "output": {"none": 2.15e-3, "adam": 2.15e-4}})  # fmt: skip
    r = held_out(cells(a, b / "sweep.json"))
    assert r["sweeps"] == ["sweep-a", "sweep-b"] and len(r["cells"]) == 7
    sh = r["shipped"]  # diagnose says warm-up only for sweep-a's post (S > 1): right there and at every "not needed"
    assert (sh["decided"], sh["agree"], sh["undecided"], sh["no_score"]) == (7, 4, 0, 0)
    # the baseline: post needed (2 right), pre (a: needed, wrong; b: right), peri right, mixln wrong, output right
    assert sh["baseline_agree"] == 5 and sorted(map(tuple, sh["baseline_wrong"])) == [
        ("sweep-a", "pre", 3, 64), ("sweep-b", "mixln", 6, 64)]
    assert sh["schemes"] == ["mixln", "output", "peri", "post", "pre"]
    assert sh["always_agree"] == 4  # "every scheme needs warm-up": the two posts, sweep-a's pre, mixln
    # the mean-rate reading: the arms lie a decade apart, far beyond x0.835 (translation's 100 of 300 updates; the
    # LM's 40: x0.935), so its truth is the same here, and so are the scores
    assert all(c["truth_mean_rate"] == c["truth"] for c in r["cells"])
    m = r["mean_rate"]
    assert (m["decided"], m["agree"], m["baseline_agree"], m["always_agree"]) == (7, 4, 5, 4)
    splits = {s["split"]: s for s in r["splits"]}
    assert set(splits) == {"post and pre -> the other schemes", "the other tasks -> lm", "the other tasks -> translation"}
    # post/pre cells in units of today's threshold at their depth (t3 at 3 layers, t6 at 6): 2.0/t3, 0.6/t3, 0.4/t6
    # needed, 0.1/t6 not: the cut halfway between 0.1/t6 and 0.6/t3 errs nowhere; held out on peri (0.3/t3 below
    # it: not needed, right), mixln (0.3/t6 above: needed, right), output (0.05/t6: right)
    t3, t6 = depth_threshold(3), depth_threshold(6)
    p = splits["post and pre -> the other schemes"]
    assert p["threshold"] == pytest.approx((0.1 / t6 + 0.6 / t3) / 2) and p["calibration"]["agree"] == 4
    assert (p["evaluation"]["decided"], p["evaluation"]["agree"], p["evaluation"]["baseline_agree"]) == (3, 3, 2)
    assert p["evaluation"]["always_agree"] == 1  # mixln
    # does S order the no-warm-up edges, per sweep? sweep-b's S (0.05, 0.1, 0.3, 0.4 for output, pre, mixln, post)
    # against edges at the grid points 2.15e-3, 4.64e-3, 1e-3, 1e-3: rho is the Pearson correlation of the ranks
    # (1, 2, 3, 4) and (3, 4, 1.5, 1.5), -3.5 / sqrt(22.5); of the 24 orderings of the edges' ranks, 4 reach it (the
    # two 1.5s last, 4 and 3 or 3 and 4 first); sweep-a's (peri 0.3, pre 0.6, post 2.0 against 4.64e-3, 1e-3,
    # 1e-3): -sqrt(3) / 2, 2 of 6
    er = {e["sweep"]: e for e in r["edge_rank"]}
    assert (er["sweep-b"]["n"], er["sweep-b"]["cells"], er["sweep-b"]["exact"]) == (4, 4, True)
    torch.testing.assert_close(er["sweep-b"]["rho"], -3.5 / math.sqrt(22.5), rtol=0, atol=1e-12)
    torch.testing.assert_close(er["sweep-a"]["rho"], -math.sqrt(3) / 2, rtol=0, atol=1e-12)
    assert er["sweep-b"]["p_below"] == pytest.approx(4 / 24) and er["sweep-a"]["p_below"] == pytest.approx(2 / 6)
    by = {(c["sweep"], c["scheme"]): c for c in r["cells"]}  # each cell's no-warm-up edge: one grid step, bracketed
    assert by[("sweep-b", "post")]["edge_none"]["lo"] == pytest.approx(1e-3)
    assert by[("sweep-b", "post")]["edge_none"]["hi"] == pytest.approx(GRID[GRID.index(1e-3) + 1])
    md = held_out_markdown(r)
    assert "| sweep-b | lm | 6 | 4 | 64 | 4 | -0.74 | 0.167 | all 24 |" in md
    assert "| 7 | 7 | 0 | 0 | 4/7 | 5/7 | 4/7 |" in md
    assert "| under the mean-rate reading (the truth: warm-up beyond its arm's lower mean rate) | 7 | 0 | 0 | 4/7 | " \
           "5/7 | 4/7 | 5 |" in md and "sweep-b | lm | mixln | 6 | 64 | 5 | needed" in md
    files = write_held_out(r, tmp_path / "out")
    assert files["md"].read_text() == md and files["json"].is_file()
    with pytest.raises(ValueError, match="given twice"):
        held_out(cells(a, a))
    # the command: the same report, and one line per score
    from normlab.cli import main

    assert main(["sweep", "--held-out", str(a), str(b), "--out", str(tmp_path / "cli")]) == 0
    assert (tmp_path / "cli" / "HELD_OUT.md").read_text() == md
    err = capsys.readouterr().err
    assert "the shipped rule agrees on 4 of 7 decided cells (5 schemes; 0 open, 0 without a verdict), the baseline " \
           "'Post-LN needs warm-up' on 5, 'every scheme needs warm-up' on 4; of the 4 decided cells never in view " \
           "when the rule was designed, 2 (baselines 3, " in err
    assert "refitted, post and pre -> the other schemes: 3 of 3 (baselines 2, 1)" in err
    assert "under the mean-rate reading (warm-up beyond its arm's lower mean rate): 4 of 7 (baselines 5, 4)" in err
    assert "S against the no-warm-up edge, sweep-b: Spearman's rho -0.74 within each width over 4 schemes " \
           "(one-sided permutation p 0.167, schemes moved whole)" in err


def test_held_out_counts_each_experiment_once_and_reads_todays_rule(tmp_path):
    """Review findings of 2026-11-27 on diagnose held out: (1) the same experiment in two sweep folders (one preset
    on two machines, a copy) and the same file under two names were counted twice: refused; (2) split (a) fitted
    on every scheme whose name starts with post/ or pre/ (DyT included): now on exactly post and pre; (3) the
    shipped verdict was the file's (its threshold at writing): now today's rule on the file's S; (4) the 3-layer
    translation cells that were in view when the depth axis was designed are scored apart as well."""
    from normlab.analysis.diagnose import depth_threshold
    from normlab.experiments.heldout import held_out, held_out_markdown
    from normlab.experiments.sweep import held_out_cells

    def cells(*paths):
        return [c for p in paths for c in held_out_cells(p)]

    a = _sweep_json(tmp_path / "results" / "sweep-a", task="translation", layers=3,
                    truths={"post": True, "pre": True}, scores={"post": 2.0, "pre": 0.6})
    copy = _sweep_json(tmp_path / "elsewhere" / "sweep-a-on-a-gpu", task="translation", layers=3,
                       truths={"post": True, "pre": False}, scores={"post": 2.0, "pre": 0.6})
    with pytest.raises(ValueError, match="the same experiment"):
        held_out(cells(a, copy))
    rel = Path(os.path.relpath(a, Path.cwd()))
    with pytest.raises(ValueError, match="the same file given twice"):
        held_out(cells(a, rel))
    # another experiment (6 layers) is another cell, even under the same folder name
    b = _sweep_json(tmp_path / "other" / "results" / "sweep-a", task="translation", layers=6,
                    truths={"post": True, "pre": False, "pre/dyt": True, "peri": False},
                    scores={"post": 0.9, "pre": 0.1, "pre/dyt": 0.6, "peri": 0.05})  # fmt: skip
    r = held_out(cells(a, b))
    assert len(r["cells"]) == 6 and len(r["sweeps"]) == 2  # the two "sweep-a" labels took their paths
    # today's rule: the file's table said threshold 1.0 (so pre/dyt's 0.6 "none"); at 6 layers today's is 0.52
    dyt = next(c for c in r["cells"] if c["scheme"] == "pre/dyt")
    assert dyt["threshold"] == pytest.approx(depth_threshold(6)) and dyt["diagnose"] is True
    # split (a): fitted on post and pre only (4 cells), scored on pre/dyt and peri
    p = next(s for s in r["splits"] if s["split"].startswith("post and pre"))
    assert p["calibration"]["cells"] == 4 and p["evaluation"]["schemes"] == ["peri", "pre/dyt"]
    # in view at design: sweep-a's 3-layer translation cells; the other row leaves them out
    assert [c["seen"] for c in r["cells"]] == [True, True, False, False, False, False]
    assert r["shipped"]["decided"] == 6 and r["shipped_unseen"]["decided"] == 4
    assert r["shipped_unseen"]["agree"] == 4 and r["shipped_unseen"]["baseline_agree"] == 3  # DyT: needed
    assert r["shipped_unseen"]["always_agree"] == 2  # post and pre/dyt at 6 layers: needed
    assert "| never in view: 4 | 4 | 0 | 0 | 4/4 | 3/4 | 2/4 | 4 |" in held_out_markdown(r)


def test_the_first_unstable_runs_in_words():
    from normlab.report.sweep import first_unstable_text

    runs = [{"seed": 1, "lr": 1e-2, "final": 6.8, "diverged": False, "above_line": 0.05},
            {"seed": 2, "lr": 1e-2, "final": None, "diverged": True, "above_line": None},
            {"seed": 3, "lr": 1e-2, "final": 6.9, "diverged": False, "above_line": 0.15}]  # fmt: skip
    assert first_unstable_text(runs) == "diverged 1 of 3; 2 on the plateau, +0.050 to +0.150 nats above the line"
    assert first_unstable_text(runs[:1]) == "1 on the plateau, +0.050 nats above the line"
    assert first_unstable_text([]) == "–"


def test_edge_rank_pools_the_sweeps_of_one_recipe():
    """heldout._edge_rank: per sweep, and once more over sweeps whose experiment fields agree (the schemes preset
    beside edge-quick), never over two recipes."""
    from normlab.experiments.heldout import _edge_rank

    recipe = {"task": "translation", "layers": 3, "updates": 300}

    def cell(sweep, scheme, width, score, centre, **other):
        return {"sweep": sweep, "task": "translation", "layers": 3, "scheme": scheme, "width": width, "score": score,
                "edge_none": {"centre": centre}, "experiment": {**recipe, **other, "scheme": scheme, "width": width}}

    # S falls as the edge rises in both sweeps: four schemes, one ordering of 24 as extreme
    cells = [cell("a", "post", 64, 2.0, 1e-3), cell("a", "pre", 64, 0.5, 5e-2),
             cell("b", "deepnorm", 64, 1.5, 4e-3), cell("b", "admin", 64, 1.0, 8e-3)]
    rows = {r["sweep"]: r for r in _edge_rank(cells)}
    assert set(rows) == {"a", "b", "a + b"} and rows["a + b"]["pooled"] == ["a", "b"]
    assert rows["a + b"]["n"] == 4 and rows["a + b"]["rho"] == pytest.approx(-1.0)
    assert rows["a + b"]["p_below"] == pytest.approx(1 / 24)
    # another recipe (a longer run) is not pooled
    other = [cell("a", "post", 64, 2.0, 1e-3), cell("a", "pre", 64, 0.5, 5e-2),
             cell("c", "deepnorm", 64, 1.5, 4e-3, updates=600)]
    assert {r["sweep"] for r in _edge_rank(other)} == {"a", "c"}
    # only the widths every pooled sweep ran: b's schemes are not dropped for lacking a's d=256
    wide = cells + [cell("a", "post", 256, 2.1, 4e-4), cell("a", "pre", 256, 0.6, 2e-2)]
    rows = {r["sweep"]: r for r in _edge_rank(wide)}
    assert rows["a + b"]["widths"] == [64] and rows["a + b"]["n"] == 4 and rows["a"]["widths"] == [64, 256]
    # a scheme at one width in two files of one recipe is refused, not dropped without a word
    with pytest.raises(ValueError, match="pass each experiment once"):
        _edge_rank(cells + [cell("b", "post", 64, 2.0, 1e-3)])
