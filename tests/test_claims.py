"""Every claim's verdict on synthetic results, for each outcome: holds, does not hold, not run at this scale."""

from __future__ import annotations

import copy
import math

import pytest

from normlab.report.claims import CLAIMS, FAILS, HOLDS, NOT_RUN, evaluate_claims


def curve(*nll, status="completed", bleu=None, every=1):
    evals = [{"epoch": i + 1, "update": (i + 1) * every, "nll": v, "loss": v + 0.1} for i, v in enumerate(nll)]
    if bleu is not None:
        evals[-1]["bleu"] = bleu
    return {"status": status, "evals": evals}


def paper_like() -> dict:
    """Results shaped like the paper's findings: every claim holds."""
    runs = {
        # Figure 2: without warm-up far worse, T_warmup=500 worse than 4000
        "post-adam-5e-4-nowarm": curve(6.0, 5.8, 5.7, bleu=8.45),
        "post-adam-5e-4-w500": curve(5.5, 4.9, 4.6),
        "post-adam-5e-4-w4000": curve(5.6, 4.6, 4.0, bleu=34.0),
        "post-adam-1e-3-nowarm": curve(7.0, 7.0, 7.0),
        "post-adam-1e-3-w500": curve(6.5, 6.4, 6.3, bleu=2.77),
        "post-adam-1e-3-w4000": curve(5.5, 4.5, 4.0),
        # Figure 4: Pre-LN reaches 4.0 one epoch earlier; RAdam
        "pre-adam-5e-4-nowarm-step": curve(4.8, 4.0, 3.9),
        "post-radam-5e-4-nowarm-linear": curve(5.4, 4.5, 4.05),
        "pre-radam-5e-4-nowarm-linear": curve(4.9, 4.1, 3.95),
        # Figure 6
        "post-adam-1e-4-const": curve(6.5, 5.5, 4.6),
        # Figure 5
        "bert-post-1e-4": curve(6.0, 4.0, 2.0, every=100),
        "bert-pre-3e-4": curve(5.0, 2.0, 1.8, every=100),
        "bert-post-3e-4": {"status": "diverged", "evals": [{"epoch": 1, "update": 100, "nll": 6.0}]},
    }
    finetune = {
        "bert-pre-3e-4": {"paraphrase": {"100": {"mean": 0.70}, "200": {"mean": 0.80}},
                          "wic": {"100": {"mean": 0.60}, "200": {"mean": 0.64}}},
        "bert-post-1e-4": {"paraphrase": {"100": {"mean": 0.60}, "200": {"mean": 0.75}},
                           "wic": {"100": {"mean": 0.55}, "200": {"mean": 0.65}}},
    }  # fmt: skip
    analysis = {
        "C1": {"theory": {"per_layer": [1.49, 1.52, 1.50, 1.48, 1.51, 1.50]},
               "real": {"encoder": {"per_layer": [1.4, 1.5]}, "decoder": {"per_layer": [1.3, 1.5]}}},
        "C2": {"theory": {"per_layer": [2.0, 3.0, 4.0], "lower": [1.5, 2.0, 2.5], "upper": [2.5, 4.0, 5.5]}},
        "C3": {"slope": 0.02, "mean": [1.6, 1.6, 1.61, 1.59, 1.6], "depths": [6, 8, 10, 12, 14]},
        "C4": {"slope": -0.48, "mean": [0.6, 0.52, 0.46, 0.42, 0.39], "depths": [6, 8, 10, 12, 14]},
        "C5": {"last_over_first": {"post": 4.0, "pre": 1.1}},
        "C6": {"epsilon": 0.1, "delta": 0.08},
    }  # fmt: skip
    return {"runs": runs, "finetune": finetune, "analysis": analysis}


def verdicts(results) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in evaluate_claims(results)}


def test_every_claim_holds_on_paper_like_results():
    got = verdicts(paper_like())
    assert got == {c.id: HOLDS for c in CLAIMS}, got
    assert [c.id for c in CLAIMS] == [f"C{i}" for i in range(1, 14)]


def test_every_claim_is_not_run_without_results():
    got = verdicts({"runs": {}})
    assert got == {c.id: NOT_RUN for c in CLAIMS}
    for c in evaluate_claims({"runs": {}}):
        assert c["evidence"].startswith("needed results are missing")


# one mutation per claim that must flip it to "does not hold"
def _set(path, value):
    def mutate(r):
        node = r
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value

    return mutate


FLIPS = {
    "C1": _set(["analysis", "C1", "theory", "per_layer"], [1.5, 1.5, 2.0]),
    "C2": _set(["analysis", "C2", "theory", "per_layer"], [1.2, 1.3, 1.4]),
    "C3": _set(["analysis", "C3", "slope"], -0.4),
    "C4": _set(["analysis", "C4", "slope"], -0.05),
    "C5": _set(["analysis", "C5", "last_over_first", "post"], 1.2),
    "C6": _set(["analysis", "C6", "delta"], 0.3),
    "C7": _set(["runs", "post-adam-5e-4-nowarm"], curve(5.6, 4.6, 4.05)),
    "C8": lambda r: (_set(["runs", "post-adam-5e-4-w500"], curve(5.6, 4.6, 4.02))(r),
                     _set(["runs", "post-adam-1e-3-w500"], curve(5.5, 4.5, 4.01))(r)),
    "C9": _set(["runs", "pre-adam-5e-4-nowarm-step"], curve(5.0, 4.5, 3.98)),  # reaches 4.0 at the same epoch
    "C10": _set(["runs", "pre-radam-5e-4-nowarm-linear"], curve(5.5, 4.8, 4.5)),
    "C11": _set(["runs", "bert-post-3e-4"], curve(6.0, 4.0, 2.01, every=100)),
    "C12": _set(["finetune", "bert-pre-3e-4", "paraphrase"], {"100": {"mean": 0.5}, "200": {"mean": 0.6}}),
    "C13": _set(["runs", "post-adam-1e-4-const"], curve(7.5, 7.4, 7.3)),
}  # fmt: skip


@pytest.mark.parametrize("claim", sorted(FLIPS, key=lambda c: int(c[1:])))
def test_each_claim_can_fail(claim):
    results = copy.deepcopy(paper_like())
    FLIPS[claim](results)
    got = verdicts(results)
    assert got[claim] == FAILS, (claim, got[claim], [c["evidence"] for c in evaluate_claims(results) if c["id"] == claim])
    assert all(v == HOLDS for k, v in got.items() if k != claim), got  # the mutation touches one claim only


def test_a_failed_run_makes_its_claims_not_run():
    results = paper_like()
    results["runs"]["post-adam-5e-4-w4000"]["status"] = "failed"
    got = verdicts(results)
    for claim in ("C7", "C8", "C9", "C10"):
        assert got[claim] == NOT_RUN
    assert got["C13"] == HOLDS


def test_diverged_runs_count_as_infinitely_bad():
    results = paper_like()
    results["runs"]["post-adam-1e-3-nowarm"] = {"status": "diverged", "evals": []}
    claims = {c["id"]: c for c in evaluate_claims(results)}
    assert claims["C7"]["verdict"] == HOLDS and "diverged" in claims["C7"]["evidence"]
    assert claims["C13"]["verdict"] == HOLDS
    assert claims["C7"]["numbers"]["1e-3"]["without"] == "inf"  # JSON-safe


def test_evidence_quotes_the_numbers():
    claims = {c["id"]: c for c in evaluate_claims(paper_like())}
    assert "BLEU 34.0" in claims["C7"]["evidence"]  # BLEU is quoted where measured
    assert "5.700" in claims["C7"]["evidence"] and "4.000" in claims["C7"]["evidence"]
    assert "log-depth +0.02" in claims["C3"]["evidence"]
    assert all(c["rule"] and c["source"] for c in claims.values())
    assert math.isclose(claims["C12"]["numbers"]["mean_gap"], (0.1 + 0.05 + 0.05 - 0.01) / 4)


def test_c12_needs_a_gap_beyond_seed_noise():
    results = paper_like()
    pre, post = results["finetune"]["bert-pre-3e-4"], results["finetune"]["bert-post-1e-4"]
    for task in pre:
        for update in pre[task]:
            a, b = pre[task][update]["mean"], post[task][update]["mean"]
            pre[task][update]["seeds"] = [a - 0.01, a + 0.01]
            post[task][update]["seeds"] = [b - 0.01, b + 0.01]
    claims = {c["id"]: c for c in evaluate_claims(results)}
    assert claims["C12"]["verdict"] == HOLDS and "clear of" in claims["C12"]["evidence"]
    for task in pre:  # the same means, but seeds that spread over 40 points: the gap is noise
        for update in pre[task]:
            a = pre[task][update]["mean"]
            pre[task][update]["seeds"] = [a - 0.2, a + 0.2]
    claims = {c["id"]: c for c in evaluate_claims(results)}
    assert claims["C12"]["verdict"] == FAILS and "within 2 standard errors" in claims["C12"]["evidence"]


def test_c13_needs_a_clear_margin_over_the_large_rate():
    results = paper_like()
    results["runs"]["post-adam-1e-4-const"] = curve(7.5, 7.2, 6.95)  # 0.7% better than 7.0: noise, not "trains"
    assert verdicts(results)["C13"] == FAILS


def test_c13_two_diverged_runs_do_not_hold():
    results = paper_like()
    results["runs"]["post-adam-1e-4-const"] = {"status": "diverged", "evals": []}
    results["runs"]["post-adam-1e-3-nowarm"] = {"status": "diverged", "evals": []}
    claims = {c["id"]: c for c in evaluate_claims(results)}
    assert claims["C13"]["verdict"] == FAILS and "nan" not in claims["C13"]["evidence"]


def test_c12_a_point_with_one_seed_keeps_the_noise_check():
    results = paper_like()
    pre, post = results["finetune"]["bert-pre-3e-4"], results["finetune"]["bert-post-1e-4"]
    for task in pre:
        for update in pre[task]:
            pre[task][update]["seeds"] = [pre[task][update]["mean"] - 0.2, pre[task][update]["mean"] + 0.2]
            post[task][update]["seeds"] = [post[task][update]["mean"]] * 2
    pre["wic"]["100"]["seeds"] = [pre["wic"]["100"]["mean"]]  # one seed failed at one point
    claims = {c["id"]: c for c in evaluate_claims(results)}
    assert claims["C12"]["verdict"] == FAILS and "within 2 standard errors" in claims["C12"]["evidence"]
