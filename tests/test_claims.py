"""Every claim's verdict on synthetic results, for each of the four outcomes: holds, does not hold,
inconclusive (the gate fails, one seed, an effect within the noise) and not run at this scale."""

from __future__ import annotations

import copy
import math
import statistics

import pytest
import torch

from normlab.report.claims import (
    CLAIMS,
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_RUN,
    TRAINING_CLAIMS,
    Effect,
    at_least,
    at_most,
    evaluate_claims,
    group_runs,
    within,
)

ENTROPY = 6.9  # the synthetic unigram entropy of the translation validation targets (nats)
MLM_ENTROPY = 7.0
JITTER = (-0.01, 0.0, 0.01)  # seed-to-seed spread of a curve: small next to every effect below


def curve(*nll, status="completed", bleu=None, every=100, shift=0.0):
    evals = [{"epoch": i + 1, "update": (i + 1) * every, "nll": v + shift, "loss": v + shift + 0.1}
             for i, v in enumerate(nll)]  # fmt: skip
    if bleu is not None:
        evals[-1]["bleu"] = bleu
    return {"status": status, "evals": evals}


def seeds(*nll, spread=JITTER, **kw) -> dict[str, dict]:
    """One curve per seed, shifted by ``spread`` (keys -s1, -s2, ...)."""
    return {f"-s{k}": curve(*nll, shift=d, **kw) for k, d in enumerate(spread, start=1)}


def put(runs: dict, base: str, members: dict) -> None:
    for k in [k for k in runs if k.startswith(base + "-s")]:
        del runs[k]
    runs.update({base + suffix: run for suffix, run in members.items()})


def layers(means: list[float], spread: float = 0.01) -> dict:
    """C1/C2's per-layer means and the per-seed values behind them (3 seeds, +-spread)."""
    return {"per_layer": list(means), "per_layer_seeds": [[m - spread, m, m + spread] for m in means]}


def paper_like() -> dict:
    """Results shaped like the paper's findings, 3 seeds each, every reference well below the entropy: every
    claim holds."""
    runs: dict = {}
    table = {
        # Figure 2: without warm-up far worse, T_warmup=500 worse than 4000; every arm has left the plateau (the
        # paper's no-warm-up arm learned, to BLEU 8.45: Figure 2 compares final quality)
        "post-adam-5e-4-nowarm": dict(nll=(6.9, 6.5, 6.0), bleu=8.45),
        "post-adam-5e-4-w500": dict(nll=(5.5, 4.9, 4.6)),
        "post-adam-5e-4-w4000": dict(nll=(5.6, 4.6, 4.0), bleu=34.0),
        "post-adam-1e-3-nowarm": dict(nll=(6.5, 6.0, 5.5)),
        "post-adam-1e-3-w500": dict(nll=(6.5, 6.4, 6.3), bleu=2.77),
        "post-adam-1e-3-w4000": dict(nll=(5.5, 4.5, 4.0)),
        # Figure 4: Pre-LN ahead all along; RAdam
        "pre-adam-5e-4-nowarm-step": dict(nll=(4.8, 4.0, 3.9)),
        "post-radam-5e-4-nowarm-linear": dict(nll=(5.4, 4.5, 4.05)),
        "pre-radam-5e-4-nowarm-linear": dict(nll=(4.9, 4.1, 3.95)),
        # Figure 6
        "post-adam-1e-4-const": dict(nll=(6.5, 5.5, 4.6)),
        # Figure 5
        "bert-post-1e-4": dict(nll=(6.0, 4.0, 2.0)),
        "bert-pre-3e-4": dict(nll=(5.0, 2.0, 1.8)),
    }
    for base, spec in table.items():
        put(runs, base, seeds(*spec["nll"], bleu=spec.get("bleu")))
    put(runs, "bert-post-3e-4", {f"-s{k}": {"status": "diverged", "evals": [{"epoch": 1, "update": 100, "nll": 6.0}]}
                                 for k in (1, 2, 3)})  # fmt: skip

    def cell(mean):  # fine-tuned from 3 pre-training seeds (parent_seeds: the mean over fine-tuning seeds of each)
        return {"mean": mean, "ci95": 0.01, "seeds": [mean - 0.005, mean, mean + 0.005],
                "parent_seeds": {"1": mean - 0.005, "2": mean, "3": mean + 0.005}}

    finetune = {
        "bert-pre-3e-4": {"paraphrase": {"100": cell(0.70), "200": cell(0.80)},
                          "wic": {"100": cell(0.62), "200": cell(0.66)}},
        "bert-post-1e-4": {"paraphrase": {"100": cell(0.60), "200": cell(0.75)},
                           "wic": {"100": cell(0.55), "200": cell(0.64)}},
    }  # fmt: skip
    analysis = {
        "C1": {"theory": layers([1.49, 1.52, 1.50, 1.48, 1.51, 1.50]),
               "real": {"encoder": {"per_layer": [1.4, 1.5]}, "decoder": {"per_layer": [1.3, 1.5]}}},
        "C2": {"theory": {**layers([2.0, 3.0, 4.0]), "lower": [1.5, 2.0, 2.5], "upper": [2.5, 4.0, 5.5]}},
        "C3": {"slope": 0.02, "slope_stderr": 0.02, "seeds": 3, "mean": [1.6, 1.6, 1.61, 1.59, 1.6],
               "depths": [6, 8, 10, 12, 14]},
        "C4": {"slope": -0.48, "slope_stderr": 0.02, "seeds": 3, "mean": [0.6, 0.52, 0.46, 0.42, 0.39],
               "depths": [6, 8, 10, 12, 14]},
        "C5": {"last_over_first": {"post": 4.0, "pre": 1.1},
               "last_over_first_seeds": {"post": [3.6, 4.0, 4.4], "pre": [1.0, 1.1, 1.2]}},
        "C6": {"epsilon": 0.1, "delta": 0.08, "delta_seeds": {"post": [0.0, 0.01, 0.02], "pre": [0.07, 0.08, 0.09]},
               "d_model": 512},
    }  # fmt: skip
    baselines = {
        "translation": {"unigram_entropy": ENTROPY, "tokens": 10_000},
        "mlm": {"unigram_entropy": MLM_ENTROPY, "tokens": 10_000},
        "finetune": {"paraphrase": {"majority": 0.5, "examples": 500}, "wic": {"majority": 0.5, "examples": 500}},
    }
    return {"runs": runs, "finetune": finetune, "analysis": analysis, "baselines": baselines}


def verdicts(results) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in evaluate_claims(results)}


def claim(results, cid) -> dict:
    return next(c for c in evaluate_claims(results) if c["id"] == cid)


def test_every_claim_holds_on_paper_like_results():
    got = verdicts(paper_like())
    assert got == {c.id: HOLDS for c in CLAIMS}, [(c["id"], c["evidence"]) for c in evaluate_claims(paper_like())
                                                  if c["verdict"] != HOLDS]  # fmt: skip
    assert [c.id for c in CLAIMS] == [f"C{i}" for i in range(1, 14)]


def test_every_claim_is_not_run_without_results():
    got = verdicts({"runs": {}})
    assert got == {c.id: NOT_RUN for c in CLAIMS}
    for c in evaluate_claims({"runs": {}}):
        assert c["evidence"].startswith("needed results are missing")


# ---------------------------------------------------------------------------------------------------------------
# does not hold: the test had the power (references learned, seeds measured the noise) and saw the effect's
# absence or reverse


def _replace(base, *nll, **kw):
    return lambda r: put(r["runs"], base, seeds(*nll, **kw))


def _set(path, value):
    def mutate(r):
        node = r
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value

    return mutate


FLIPS = {
    "C1": lambda r: r["analysis"]["C1"]["theory"].update(layers([1.5, 1.5, 2.0])),
    "C2": lambda r: r["analysis"]["C2"]["theory"].update(layers([1.2, 1.3, 1.4])),
    "C3": _set(["analysis", "C3", "slope"], -0.4),
    "C4": _set(["analysis", "C4", "slope"], -0.05),
    "C5": _set(["analysis", "C5", "last_over_first_seeds", "post"], [1.1, 1.2, 1.3]),
    "C6": _set(["analysis", "C6", "delta_seeds", "pre"], [0.29, 0.3, 0.31]),
    # without warm-up as good as with it at 5e-4 (C7 needs it at every learning rate)
    "C7": _replace("post-adam-5e-4-nowarm", 5.6, 4.6, 4.01),
    "C8": lambda r: (_replace("post-adam-5e-4-w500", 5.6, 4.6, 4.02)(r), _replace("post-adam-1e-3-w500", 5.5, 4.5, 4.01)(r)),
    "C9": _replace("pre-adam-5e-4-nowarm-step", 5.6, 4.6, 4.0),  # the same curve as Post-LN's
    "C10": _replace("pre-radam-5e-4-nowarm-linear", 5.5, 4.8, 4.5),  # RAdam 15% worse than Adam for Pre-LN
    "C11": lambda r: put(r["runs"], "bert-post-3e-4", seeds(6.0, 4.0, 2.01)),  # 3e-4 trains as well
    "C12": lambda r: r["finetune"].update({"bert-pre-3e-4": _shifted(r["finetune"]["bert-post-1e-4"], -0.03)}),
    # the small fixed rate learns, but ends as badly as 1e-3 without warm-up (5.4 against 5.5: +1.9%)
    "C13": _replace("post-adam-1e-4-const", 6.0, 5.6, 5.4),
}  # fmt: skip


def _shifted(table: dict, by: float) -> dict:
    """A fine-tuning table with every accuracy moved by ``by`` (Pre-LN 3 points behind Post-LN: the reverse)."""
    out = copy.deepcopy(table)
    for cells in out.values():
        for cell in cells.values():
            cell["mean"] += by
            cell["seeds"] = [x + by for x in cell["seeds"]]
            cell["parent_seeds"] = {k: x + by for k, x in cell["parent_seeds"].items()}
    return out


@pytest.mark.parametrize("cid", sorted(FLIPS, key=lambda c: int(c[1:])))
def test_each_claim_can_fail(cid):
    results = paper_like()
    FLIPS[cid](results)
    got = verdicts(results)
    assert got[cid] == FAILS, (cid, got[cid], claim(results, cid)["evidence"])
    assert all(v == HOLDS for k, v in got.items() if k != cid), got  # the mutation touches one claim only


# ---------------------------------------------------------------------------------------------------------------
# inconclusive: (1) the reference did not learn (the gate), (2) one seed, (3) the effect within the noise

GATE_REFERENCES = {
    "C7": ["post-adam-5e-4-w4000", "post-adam-1e-3-w4000"],
    "C8": ["post-adam-5e-4-w4000", "post-adam-1e-3-w4000"],
    "C9": ["post-adam-5e-4-w4000"],
    "C10": ["post-adam-5e-4-w4000", "pre-adam-5e-4-nowarm-step"],
    "C11": ["bert-post-1e-4"],
    "C13": ["post-adam-1e-3-w4000"],
}


@pytest.mark.parametrize("cid", sorted(GATE_REFERENCES, key=lambda c: int(c[1:])))
def test_a_reference_that_did_not_learn_makes_the_claim_inconclusive(cid):
    results = paper_like()
    for base in GATE_REFERENCES[cid]:
        # on the plateau: 0.3 nats below the entropy, less than the 0.5 margin
        top = MLM_ENTROPY if base.startswith("bert") else ENTROPY
        put(results["runs"], base, seeds(top, top - 0.2, top - 0.3))
    c = claim(results, cid)
    assert c["verdict"] == INCONCLUSIVE, c["evidence"]
    assert "did not learn" in c["evidence"] and "did not learn" in c["gate"]


def test_the_arm_said_to_train_must_leave_the_plateau_itself():
    # C13: the fixed 1e-4 on the plateau (6.9 = the unigram loss) while 1e-3 without warm-up diverged: far worse
    # than the small rate, but "the small rate trains" is not shown
    results = paper_like()
    put(results["runs"], "post-adam-1e-4-const", seeds(6.95, 6.92, 6.9))
    put(results["runs"], "post-adam-1e-3-nowarm", {f"-s{k}": {"status": "diverged", "evals": []} for k in (1, 2, 3)})
    c = claim(results, "C13")
    assert c["verdict"] == INCONCLUSIVE and "has not left the plateau" in c["evidence"], c["evidence"]
    # C10: RAdam's Post-LN within 5% of a barely-learned Adam reference, yet itself above the gate
    results = paper_like()
    put(results["runs"], "post-adam-5e-4-w4000", seeds(6.6, 6.5, 6.35))
    put(results["runs"], "post-radam-5e-4-nowarm-linear", seeds(6.7, 6.6, 6.55))
    put(results["runs"], "post-adam-5e-4-nowarm", seeds(7.0, 7.0, 7.0))  # keep C7 decided
    c = claim(results, "C10")
    assert c["verdict"] == INCONCLUSIVE and "has not left the plateau" in c["evidence"], c["evidence"]


def test_an_early_divergence_of_one_seed_does_not_hide_the_others():
    results = paper_like()
    results["runs"]["pre-adam-5e-4-nowarm-step-s2"] = {"status": "diverged", "evals": []}
    c = claim(results, "C9")
    assert c["verdict"] == INCONCLUSIVE and "1/3 seeds diverged" in c["evidence"], c["evidence"]


def test_a_failed_seed_is_counted():
    results = paper_like()
    results["runs"]["post-adam-5e-4-w4000-s3"]["status"] = "failed"
    assert "2 seeds; 1 more failed and left out" in claim(results, "C7")["evidence"]


def test_the_fine_tuning_gate():
    results = paper_like()
    for task in ("paraphrase", "wic"):  # Post-LN's fine-tuned models at chance: 52% ± 4 against 50%
        for cell in results["finetune"]["bert-post-1e-4"][task].values():
            cell.update(mean=0.52, ci95=0.04, seeds=[0.50, 0.52, 0.54],
                        parent_seeds={"1": 0.50, "2": 0.52, "3": 0.54})
    c = claim(results, "C12")  # the interval straddles the majority class: the gate cannot tell
    assert c["verdict"] == INCONCLUSIVE and "cannot tell within the seed noise" in c["gate"], c["evidence"]
    for task in ("paraphrase", "wic"):  # 44% ± 4 against 50%: below chance, did not learn
        for cell in results["finetune"]["bert-post-1e-4"][task].values():
            cell.update(mean=0.44, ci95=0.04, seeds=[0.42, 0.44, 0.46],
                        parent_seeds={"1": 0.42, "2": 0.44, "3": 0.46})
    c = claim(results, "C12")
    assert c["verdict"] == INCONCLUSIVE and "did not learn" in c["gate"], c["evidence"]


def test_without_baselines_the_gate_fails():
    results = paper_like()
    del results["baselines"]
    got = verdicts(results)
    assert all(got[c] == INCONCLUSIVE for c in TRAINING_CLAIMS), got
    assert all(got[c] == HOLDS for c in ("C1", "C2", "C3", "C4", "C5", "C6"))  # initialisation needs no gate


def _one_seed(results):
    results["runs"] = {k: v for k, v in results["runs"].items() if k.endswith("-s1")}
    for parent in results["finetune"].values():
        for task in parent.values():
            for cell in task.values():
                cell["seeds"] = cell["seeds"][:1]
                cell["parent_seeds"] = {"1": cell["parent_seeds"]["1"]}


def test_one_seed_makes_every_training_claim_inconclusive():
    results = paper_like()
    _one_seed(results)
    for c in evaluate_claims(results):
        if c["id"] in TRAINING_CLAIMS:
            assert c["verdict"] == INCONCLUSIVE, (c["id"], c["evidence"])
            assert "not measured" in c["evidence"] or "seed" in c["evidence"], c["evidence"]


def test_one_seed_does_not_decide_a_divergence_either():
    # the one seed of Post-LN at 3e-4 diverged: one seed does not say how often that lr diverges (issue 38: the
    # rule said holds on one seed a side, against its docstring)
    results = paper_like()
    _one_seed(results)
    c = claim(results, "C11")
    assert c["verdict"] == INCONCLUSIVE and "one seed on a side (1 vs 1)" in c["evidence"], c["evidence"]
    assert at_least(Effect([math.inf], [5.0]), 0.05) == (INCONCLUSIVE, "one seed on a side (1 vs 1): the seed "
                                                          "noise is not measured")


NOISY = {  # the paper's mean effect, but seeds that spread over more than the effect
    "C7": _replace("post-adam-5e-4-nowarm", 5.6, 4.6, 4.25, spread=(-0.6, 0.0, 0.6)),
    "C9": _replace("pre-adam-5e-4-nowarm-step", 5.3, 4.3, 3.8, spread=(-0.8, 0.0, 0.8)),
    "C10": _replace("pre-radam-5e-4-nowarm-linear", 4.9, 4.1, 4.1, spread=(-0.5, 0.0, 0.5)),
    "C13": _replace("post-adam-1e-4-const", 6.5, 5.5, 4.6, spread=(-2.5, 0.0, 2.5)),
}  # fmt: skip


@pytest.mark.parametrize("cid", sorted(NOISY, key=lambda c: int(c[1:])))
def test_an_effect_within_the_noise_is_inconclusive_never_does_not_hold(cid):
    results = paper_like()
    NOISY[cid](results)
    c = claim(results, cid)
    assert c["verdict"] == INCONCLUSIVE, c["evidence"]
    assert "noise" in c["evidence"] or "straddles" in c["evidence"]


def test_c12_within_the_noise():
    results = paper_like()
    for task, cells in results["finetune"]["bert-pre-3e-4"].items():
        for cell in cells.values():  # the same means, pre-training seeds that spread over 40 points
            m = cell["mean"]
            cell["parent_seeds"] = {"1": m - 0.2, "2": m, "3": m + 0.2}
    c = claim(results, "C12")
    assert c["verdict"] == INCONCLUSIVE and "within the noise" in c["evidence"]


def test_c12_the_unit_is_the_pre_training_seed():
    # many fine-tuning seeds with a tight spread, but one pre-training run: the noise of pre-training is unmeasured
    results = paper_like()
    for parent in results["finetune"].values():
        for cells in parent.values():
            for cell in cells.values():
                cell["seeds"] = [cell["mean"]] * 6
                cell["parent_seeds"] = {"1": cell["mean"]}
    c = claim(results, "C12")
    assert c["verdict"] == INCONCLUSIVE and "pre-training" in c["evidence"], c["evidence"]


def test_smoke_like_results_decide_no_training_claim():
    """Models that learned nothing (every loss on the plateau) must not decide any training claim."""
    results = paper_like()
    for base in {k.rsplit("-s", 1)[0] for k in results["runs"]}:
        if not base.startswith("bert-post-3e-4"):
            top = MLM_ENTROPY if base.startswith("bert") else ENTROPY
            put(results["runs"], base, seeds(top + 0.3, top + 0.1, top + 0.05))
    for parent in results["finetune"].values():
        for cells in parent.values():
            for cell in cells.values():
                cell.update(mean=0.5, ci95=0.05, seeds=[0.48, 0.5, 0.52])
    got = verdicts(results)
    assert all(got[c] in (INCONCLUSIVE, NOT_RUN) for c in TRAINING_CLAIMS), got


# ---------------------------------------------------------------------------------------------------------------
# missing runs, divergence, the numbers


def test_a_failed_run_makes_its_claims_not_run():
    results = paper_like()
    for k in [k for k in results["runs"] if k.startswith("post-adam-5e-4-w4000")]:
        results["runs"][k]["status"] = "failed"
    got = verdicts(results)
    for cid in ("C9", "C10"):
        assert got[cid] == NOT_RUN
    # C7 and C8 are decided at the learning rate that was run, and say which one was not
    assert got["C7"] == HOLDS and "not run at this scale: lr 5e-4" in claim(results, "C7")["evidence"]
    assert got["C13"] == HOLDS


def test_a_scale_that_runs_one_learning_rate_decides_c7_on_it():
    results = paper_like()
    results["runs"] = {k: v for k, v in results["runs"].items() if "1e-3" not in k}
    c = claim(results, "C7")
    assert c["verdict"] == HOLDS and "lr 1e-3" in c["evidence"] and "not run" in c["evidence"]
    assert verdicts(results)["C13"] == NOT_RUN


def test_diverged_runs_count_as_infinitely_bad():
    results = paper_like()
    put(results["runs"], "post-adam-1e-3-nowarm", {f"-s{k}": {"status": "diverged", "evals": []} for k in (1, 2, 3)})
    claims = {c["id"]: c for c in evaluate_claims(results)}
    assert claims["C7"]["verdict"] == HOLDS and "diverged" in claims["C7"]["evidence"]
    assert claims["C13"]["verdict"] == HOLDS
    assert claims["C7"]["numbers"]["1e-3"]["without"] == "inf"  # JSON-safe


def test_some_seeds_diverged_is_inconclusive():
    results = paper_like()
    runs = results["runs"]
    runs["post-adam-5e-4-nowarm-s2"] = {"status": "diverged", "evals": []}
    c = claim(results, "C7")
    assert c["verdict"] == INCONCLUSIVE and "1/3 seeds diverged" in c["evidence"]


def test_c13_a_diverged_small_rate_does_not_hold():
    results = paper_like()
    put(results["runs"], "post-adam-1e-4-const", {f"-s{k}": {"status": "diverged", "evals": []} for k in (1, 2, 3)})
    put(results["runs"], "post-adam-1e-3-nowarm", {f"-s{k}": {"status": "diverged", "evals": []} for k in (1, 2, 3)})
    c = claim(results, "C13")
    assert c["verdict"] == FAILS and "nan" not in c["evidence"]


def test_evidence_quotes_the_numbers():
    claims = {c["id"]: c for c in evaluate_claims(paper_like())}
    assert "BLEU 34.0" in claims["C7"]["evidence"]  # BLEU is quoted where measured
    assert "4.000" in claims["C7"]["evidence"] and "3 seeds" in claims["C7"]["evidence"]
    assert "6.900" in claims["C7"]["gate"] and "learned" in claims["C7"]["gate"]  # the entropy and the verdict
    assert "±" in claims["C7"]["effect"]
    assert "log-depth +0.02" in claims["C3"]["evidence"]
    assert all(c["rule"] and c["source"] for c in claims.values())
    assert math.isclose(claims["C12"]["numbers"]["mean_gap"], (0.1 + 0.05 + 0.07 + 0.02) / 4)


def test_group_runs_by_seed_suffix():
    runs = {"a-s2": {"status": "completed"}, "a-s1": {"status": "completed"}, "b": {"status": "completed"},
            "ft-x-s1": {"status": "completed", "kind": "finetune"}}  # fmt: skip
    groups = group_runs(runs)
    assert {k: [r["name"] for r in v] for k, v in groups.items()} == {"a": ["a-s1", "a-s2"], "b": ["b"]}


# ---------------------------------------------------------------------------------------------------------------
# the decision rules


@pytest.mark.parametrize(
    ("a", "b", "delta", "expected"),
    [
        ([1.10, 1.11, 1.12], [1.00, 1.00, 1.00], 0.05, HOLDS),  # +11%, tight
        ([1.00, 1.01, 1.02], [1.00, 1.00, 1.00], 0.05, FAILS),  # +1%, tight: the interval's top is below 5%
        ([0.90, 0.91, 0.92], [1.00, 1.00, 1.00], 0.05, FAILS),  # the reverse
        ([0.90, 1.10, 1.30], [1.00, 1.00, 1.00], 0.05, INCONCLUSIVE),  # +10% within a 23% noise
        ([1.03, 1.04, 1.05], [1.00, 1.00, 1.00], 0.05, INCONCLUSIVE),  # beyond the noise, below 5%, interval over it
        ([1.20], [1.00], 0.05, INCONCLUSIVE),  # one seed: no noise estimate
        ([math.inf] * 3, [1.0, 1.0, 1.0], 0.05, HOLDS),  # every seed diverged on the worse side
        ([1.0, 1.0, 1.0], [math.inf] * 3, 0.05, FAILS),
        ([math.inf, 1.2, 1.2], [1.0, 1.0, 1.0], 0.05, INCONCLUSIVE),
    ],
)
def test_at_least(a, b, delta, expected):
    assert at_least(Effect(a, b), delta)[0] == expected


def test_at_most_and_within():
    tight_same = Effect([1.00, 1.01, 1.02], [1.00, 1.01, 1.02])
    assert at_most(tight_same, 0.05)[0] == HOLDS and within(tight_same, 0.05)[0] == HOLDS
    far = Effect([1.20, 1.21, 1.22], [1.00, 1.01, 1.02])
    assert at_most(far, 0.05)[0] == FAILS and within(far, 0.05)[0] == FAILS
    noisy = Effect([0.8, 1.0, 1.2], [1.00, 1.01, 1.02])
    assert at_most(noisy, 0.05)[0] == INCONCLUSIVE and within(noisy, 0.05)[0] == INCONCLUSIVE


def test_effect_standard_error_and_interval():
    e = Effect([1.0, 1.1, 1.2], [1.0, 1.0, 1.0])
    # Welch: sqrt(var_a / n_a + var_b / n_b) / |mean_b| = sqrt(0.01 / 3); df = (0.01/3)^2 / ((0.01/3)^2 / 2) = 2
    torch.testing.assert_close(e.size, 0.1)
    torch.testing.assert_close(e.se, math.sqrt(0.01 / 3))
    torch.testing.assert_close(e.df, 2.0)
    torch.testing.assert_close(e.k, 4.302653, atol=1e-5, rtol=0)  # t_{0.975, 2} from the standard table
    torch.testing.assert_close(e.low, 0.1 - 4.302653 * math.sqrt(0.01 / 3), atol=1e-5, rtol=0)
    # equal spreads and equal means: R = 1, both delta-method terms equal, df = 2 (n - 1) = 4, t_{0.975, 4}
    # unequal spreads: df = (va + vb)^2 / ((va^2 + vb^2) / 2), va = 0.01 / 3, vb = 0.0025 / 3
    torch.testing.assert_close(Effect([2.0, 2.1, 2.2], [2.05, 2.1, 2.15]).df, 2 * 0.0125**2 / (0.01**2 + 0.0025**2),
                               atol=1e-12, rtol=0)
    torch.testing.assert_close(Effect([2.0, 2.1, 2.2], [2.0, 2.1, 2.2]).k, 2.776445, atol=1e-5, rtol=0)
    # many seeds: the t quantile falls towards 1.96, and the rule's floor of 2 standard errors takes over
    many = Effect([1.0 + 0.01 * (i % 5) for i in range(200)], [1.0 + 0.01 * (i % 7) for i in range(200)])
    assert many.k == 2.0


def test_counts_sentence_agrees_in_number():
    from normlab.report.html import counts_sentence

    one_each = [{"verdict": v} for v in ("holds", "does not hold", "inconclusive", "not run at this scale")]
    assert counts_sentence(one_each) == ("1 claim holds, 1 does not hold, 1 is inconclusive (the test could not "
                                         "decide), 1 was not run at this scale.")
    assert counts_sentence(one_each * 2).startswith("2 claims hold, 2 do not hold, 2 are inconclusive")


def test_c8_with_both_warmups_mapped_to_one_length_is_no_test():
    """A scale whose warm-ups both round to the same number of updates (smoke: 500 and 4000 -> 2) runs one run
    twice; C8 must say so, not report the zero gap as "does not hold"."""
    results = paper_like()
    for name, run in results["runs"].items():
        if "-w500-" in name or "-w4000-" in name:
            run["config"] = {"schedule": {"warmup_updates": 2}}
    c8 = next(c for c in evaluate_claims(results) if c["id"] == "C8")
    assert c8["verdict"] == "inconclusive" and "both warm-ups are 2 updates at this scale" in c8["evidence"], c8
    for name, run in results["runs"].items():  # distinct warm-ups: decided as before
        if "-w4000-" in name:
            run["config"] = {"schedule": {"warmup_updates": 16}}
    assert next(c for c in evaluate_claims(results) if c["id"] == "C8")["verdict"] == "holds"


def test_theory_claims_are_decided_on_the_seed_interval():
    """C1-C4 are samples at initialisation: a mean near the threshold whose 95% interval over seeds straddles it
    is inconclusive, not a verdict (issue 13: a verdict needs an experiment that could see the effect)."""
    results = paper_like()
    # the quick analysis' Post-LN depth slope: +0.12 with a standard error of 0.13 over 3 seeds
    results["analysis"]["C3"].update(slope=0.12, slope_stderr=0.13, seeds=3)
    c3 = claim(results, "C3")
    assert c3["verdict"] == "inconclusive" and "95% t interval over 3 seeds" in c3["evidence"], c3
    results["analysis"]["C3"].update(slope=0.05, slope_stderr=0.01)  # measured tightly: [+0.01, +0.09], flat
    assert claim(results, "C3")["verdict"] == "holds"
    results["analysis"]["C3"].update(slope=0.4)  # tightly away from flat
    assert claim(results, "C3")["verdict"] == "does not hold"
    results["analysis"]["C3"].pop("slope_stderr")  # an analysis without the spread: noise not measured
    assert claim(results, "C3")["verdict"] == "inconclusive"
    # C1: one layer 10.2% off in its mean but with an interval that reaches inside 10%
    results["analysis"]["C1"]["theory"].update(layers([1.5, 1.5, 1.653], spread=0.02))
    c1 = claim(results, "C1")
    assert c1["verdict"] == "inconclusive" and "straddle" in c1["evidence"], c1
    # 1.653 +- 0.001: its 95% interval [1.6505, 1.6555] is above 1.65, but "does not hold" at one of 3 layers is
    # a union of 3 tests, read at 1 - 0.05/3 (t = 7.65 at 2 df): [1.6486, 1.6574] reaches inside
    results["analysis"]["C1"]["theory"].update(layers([1.5, 1.5, 1.653], spread=0.001))
    c1 = claim(results, "C1")
    assert c1["verdict"] == "inconclusive" and "98.33%" in c1["evidence"], c1
    results["analysis"]["C1"]["theory"].update(layers([1.5, 1.5, 1.653], spread=0.0005))  # [1.6509, 1.6551]
    assert claim(results, "C1")["verdict"] == "does not hold"
    del results["analysis"]["C1"]["theory"]["per_layer_seeds"]
    assert claim(results, "C1")["verdict"] == "inconclusive"


def test_c5_c6_are_decided_on_the_seed_interval():
    """C5 and C6 as C1-C4: the 95% t interval over the Figure 3(a,b) seeds against the threshold; C5's on the log
    of the ratio. At d = 128 the quick analysis' first seed had Pre-LN's delta at 0.114, under 0.125, while the
    mean of 10 seeds was 0.157: one seed's point estimate decided the wrong way."""
    results = paper_like()
    c6 = results["analysis"]["C6"]
    c6["delta_seeds"]["pre"] = [0.10, 0.114, 0.128]  # mean 0.114, interval [0.079, 0.149]: straddles 0.125
    got = claim(results, "C6")
    assert got["verdict"] == "inconclusive" and "straddles" in got["evidence"], got
    mean, low, high = got["numbers"]["intervals"]["pre"]
    torch.testing.assert_close(mean, 0.114)
    torch.testing.assert_close(high - mean, 4.302653 * 0.014 / math.sqrt(3), rtol=1e-5, atol=0)  # t(0.975, 2)
    c6["delta_seeds"]["pre"] = [0.110, 0.114, 0.118]  # tight below: [0.104, 0.124]
    assert claim(results, "C6")["verdict"] == "holds"
    c6["delta_seeds"]["post"] = [0.2, 0.21, 0.22]  # one placement wholly above: the claim does not hold
    assert claim(results, "C6")["verdict"] == "does not hold"
    # ... at the paper's width; at d = 128 delta is larger whatever the model (Appendix G): above 0.125 there is
    # no evidence against the paper's d = 512 measurement, while below it would be (a narrower width is harder)
    c6["d_model"] = 128
    got = claim(results, "C6")
    assert got["verdict"] == "inconclusive" and "d = 128" in got["evidence"], got
    c6["delta_seeds"]["post"] = [0.0, 0.01, 0.02]
    assert claim(results, "C6")["verdict"] == "holds"
    c6["d_model"] = 512
    del c6["delta_seeds"]  # an analysis.json without them: the noise is not measured, whatever the point says
    got = claim(results, "C6")
    assert got["verdict"] == "inconclusive" and "not recorded" in got["evidence"], got

    c5 = results["analysis"]["C5"]
    c5["last_over_first_seeds"]["post"] = [1.5, 2.5, 4.0]  # geometric mean 2.47, interval [0.73, 8.3]
    got = claim(results, "C5")
    assert got["verdict"] == "inconclusive", got
    mean, low, high = got["numbers"]["intervals"]["post"]
    torch.testing.assert_close(mean, math.exp(sum(map(math.log, (1.5, 2.5, 4.0))) / 3))
    torch.testing.assert_close(mean * mean, low * high)  # symmetric on the log scale
    c5["last_over_first_seeds"]["pre"] = [2.5, 2.6, 2.7]  # Pre-LN wholly outside [1/2, 2]: does not hold
    assert claim(results, "C5")["verdict"] == "does not hold"
    c5["last_over_first_seeds"] = {"post": [4.0], "pre": [1.1]}  # one seed
    assert claim(results, "C5")["verdict"] == "inconclusive"


def test_a_claim_whose_runs_have_not_finished_is_inconclusive_not_unrun():
    """A stopped job's --report-only: the runs this scale has and that have not finished make their claims
    inconclusive ("not finished yet"); a run the scale does not have stays "not run at this scale"."""
    results = paper_like()
    del results["runs"]["pre-adam-5e-4-nowarm-step-s1"], results["runs"]["pre-adam-5e-4-nowarm-step-s2"]
    del results["runs"]["pre-adam-5e-4-nowarm-step-s3"]
    results.pop("finetune")
    del results["analysis"]
    got = {c["id"]: c for c in evaluate_claims(results, pending=["pre-adam-5e-4-nowarm-step", "analysis",
                                                                  "fine-tuning results"])}
    for cid in ("C1", "C6", "C9", "C12"):
        assert got[cid]["verdict"] == INCONCLUSIVE and got[cid]["evidence"].startswith("not finished yet"), got[cid]
    assert "pre-adam-5e-4-nowarm-step" in got["C9"]["evidence"]
    plain = {c["id"]: c["verdict"] for c in evaluate_claims(results)}  # nothing pending: the scale lacks them
    assert all(plain[cid] == NOT_RUN for cid in ("C1", "C6", "C9", "C12")), plain
    assert got["C7"]["verdict"] == plain["C7"] == HOLDS  # untouched where nothing is missing


# ---------------------------------------------------------------------------------------------------------------
# issue 38: one symmetric rule, the gate with its noise, final quality, the ratio's interval, edge cases, unions

# the C7 seeds (3 d.p.) of the 1,200-update quick report (docs/results/reproduce-quick/length-1200)
QUICK_C7 = ([6.6018, 6.6508, 6.7459], [6.1861, 6.2457, 6.4435])


def test_an_interval_that_straddles_the_claimed_size_is_inconclusive():
    e = Effect(*QUICK_C7)
    assert at_least(e, 0.05)[0] == INCONCLUSIVE  # +6.0% [+1.3%, +10.6%] around a claimed 5%
    # the delta method with both variances (the reviewer's [+1.25%, +10.6%]); leaving the reference mean's own
    # variance out gave [+1.34%, +10.56%]
    torch.testing.assert_close((e.low, e.high), (0.01252, 0.10648), atol=5e-5, rtol=0)
    torch.testing.assert_close(e.df, 2.986, atol=1e-3, rtol=0)


def test_both_verdicts_err_equally_when_the_effect_is_the_claimed_size():
    """The rule's error rates, measured: 3 seeds a side (the quick scale), the true gap exactly delta = 5%, the
    seeds' spread of the 1,200-update quick report's C7 arms (sd 0.07 and 0.13 nats around ~6.3). A symmetric 95%
    rule says holds and does not hold each ~2.5% of the time (measured here: 1.9% and 2.2% over 4,000 draws; this test
    draws 1,000, whose binomial sd at 2% is 0.44 points). The rule it replaced (holds: low > 0 and size >= delta)
    said holds 39% of the time on the same draws."""
    gen = torch.Generator().manual_seed(38)
    n = 1000
    a = (6.29 * 1.05 + 0.07 * torch.randn(n, 3, generator=gen, dtype=torch.float64)).tolist()
    b = (6.29 + 0.13 * torch.randn(n, 3, generator=gen, dtype=torch.float64)).tolist()
    effects = [Effect(x, y) for x, y in zip(a, b)]
    got = [at_least(e, 0.05)[0] for e in effects]
    holds, fails = got.count(HOLDS) / n, got.count(FAILS) / n
    assert 0.005 <= holds <= 0.045 and 0.005 <= fails <= 0.045, (holds, fails)
    assert abs(holds - fails) <= 0.02, (holds, fails)
    old = sum(e.low > 0 and e.size >= 0.05 for e in effects) / n
    assert old >= 0.3, old  # the point-estimate rule leaned toward the paper


def test_edge_cases_of_the_rules():
    inf = math.inf
    # one seed a side: the noise (here, how often the rate diverges) is not measured
    assert at_least(Effect([inf], [5.0]), 0.05)[0] == INCONCLUSIVE
    # one seed of the better side diverged too: not "the other did not"
    assert within(Effect([inf, inf], [inf, 5.0]), 0.05)[0] == INCONCLUSIVE
    assert within(Effect([inf, inf], [5.0, 5.1]), 0.05)[0] == FAILS
    assert at_most(Effect([inf, inf], [inf, 5.0]), 0.05)[0] == INCONCLUSIVE
    # identical seeds: a zero-width interval is no measurement of the noise
    same = Effect([6.6] * 3, [6.2] * 3)
    for rule in (at_least, at_most, within):
        verdict, why = rule(same, 0.05)
        assert verdict == INCONCLUSIVE and "same value" in why, (rule.__name__, verdict, why)


def test_the_gate_reads_its_own_noise():
    """The 1,200-update quick report's reference: 6.186, 6.246, 6.443 (mean 6.292 [5.957, 6.626]) against a line at
    6.317. A pass by 0.025 nats of a mean whose standard error is 0.078 is no pass: C7 and C9 are inconclusive."""
    results = paper_like()
    line = ENTROPY - 0.5
    put(results["runs"], "post-adam-5e-4-w4000", {f"-s{k}": curve(5.6, 4.6, x) for k, x in
                                                  enumerate((line - 0.131, line - 0.071, line + 0.126), 1)})
    for cid in ("C7", "C9"):
        c = claim(results, cid)
        assert c["verdict"] == INCONCLUSIVE and "cannot tell within the seed noise" in c["gate"], c
        finals = [line - 0.131, line - 0.071, line + 0.126]
        high = sum(finals) / 3 + 4.302653 * statistics.stdev(finals) / math.sqrt(3)  # t(0.975, 2)
        torch.testing.assert_close(c["numbers"]["gate"]["post-adam-5e-4-w4000"]["high"], high, atol=1e-5, rtol=0)
    # the same mean with the spread the old docstring assumed (hundredths): learned
    put(results["runs"], "post-adam-5e-4-w4000", seeds(5.6, 4.6, line - 0.025 - 0.06))
    assert claim(results, "C9")["verdict"] == HOLDS


def test_far_worse_is_decided_only_where_both_arms_have_left_the_plateau():
    """C7 compares final quality (Figure 2). An arm still on the plateau is >5% behind any reference past the
    gate by construction, so neither verdict is read from it, the paper's way or the other."""
    results = paper_like()
    put(results["runs"], "post-adam-5e-4-nowarm", seeds(6.95, 6.9, 6.85))  # on the plateau, +71% behind 4.0
    c = claim(results, "C7")
    assert c["verdict"] == INCONCLUSIVE and "not decided at this length" in c["evidence"], c["evidence"]
    assert "post-adam-5e-4-nowarm (3 seeds) ends at 6.850" in c["evidence"] and "did not learn" in c["evidence"]
    # the mirror image: a reference just past the gate, the other arm just short of it, 2.4% apart (the interval's
    # top below 5%): at_least alone says does not hold, far_worse does not read it
    put(results["runs"], "post-adam-5e-4-w4000", seeds(5.6, 4.6, 6.30))
    put(results["runs"], "post-adam-5e-4-nowarm", seeds(6.9, 6.6, 6.45))
    c = claim(results, "C7")
    assert at_least(Effect(*[[x["evals"][-1]["nll"] for k, x in results["runs"].items() if k.startswith(base)]
                             for base in ("post-adam-5e-4-nowarm-", "post-adam-5e-4-w4000-")]), 0.05)[0] == FAILS
    assert c["verdict"] == INCONCLUSIVE and "not decided at this length" in c["evidence"], c["evidence"]


def test_a_union_of_tests_is_read_at_the_corrected_level():
    """One test that decides the claim alone (C8's one learning rate, C1's one layer) is read at 1 - 0.05/m."""
    from normlab.report.claims import corrected, family

    def holds_at_95_only(level):
        return (HOLDS, "h") if level <= 0.95 else (INCONCLUSIVE, "i")

    def fails_at_95_only(level):
        return (FAILS, "f") if level <= 0.95 else (INCONCLUSIVE, "i")

    assert corrected(2) == 0.975 and corrected(12) == 1 - 0.05 / 12
    assert family([holds_at_95_only], "any")[0] == HOLDS  # one test: no correction
    assert family([holds_at_95_only, fails_at_95_only], "any")[0] == INCONCLUSIVE
    assert family([holds_at_95_only, holds_at_95_only], "all")[0] == HOLDS  # an intersection: no correction
    assert family([holds_at_95_only, fails_at_95_only], "all")[0] == INCONCLUSIVE
    assert family([fails_at_95_only, fails_at_95_only], "any")[0] == FAILS
    # C8 on real numbers: T_warmup=500 +7.0% behind at 5e-4 with seeds whose 95% interval clears 5% and whose
    # 97.5% one does not; at 1e-3 as good as 4000 (does not hold there): inconclusive, not holds
    results = paper_like()
    put(results["runs"], "post-adam-5e-4-w500", {f"-s{k}": curve(5.6, 4.6, x) for k, x in
                                                 enumerate((4.25, 4.28, 4.31), 1)})
    put(results["runs"], "post-adam-1e-3-w500", seeds(5.5, 4.5, 4.01))
    e = Effect([4.25, 4.28, 4.31], [3.99, 4.0, 4.01])
    assert e.low > 0.05 and e.at(0.975).low < 0.05, (e.low, e.at(0.975).low)
    c = claim(results, "C8")
    assert c["verdict"] == INCONCLUSIVE and "97.5% level" in c["evidence"], c["evidence"]


def test_c11_c12_read_the_bert_runs_a_scale_names():
    """A scale that runs Figure 5 at other rates in the paper's ratio (figures.bert_arms: results.json's
    ``mlm_arms``) is judged on those runs, with the same verdicts, and its rates in the evidence."""
    paper = paper_like()
    renamed = {"bert-post-1e-4": "bert-post-6e-4", "bert-pre-3e-4": "bert-pre-1.8e-3",
               "bert-post-3e-4": "bert-post-1.8e-3"}  # fmt: skip

    def rename(name):
        return next((new + name[len(old):] for old, new in renamed.items() if name.startswith(old + "-s")), name)

    results = {**paper, "runs": {rename(k): v for k, v in paper["runs"].items()},
               "finetune": {renamed[k]: v for k, v in paper["finetune"].items()},
               "mlm_arms": {"post": "bert-post-6e-4", "pre": "bert-pre-1.8e-3", "hot": "bert-post-1.8e-3", "lr": 6e-4,
                            "hot_lr": 1.8e-3}}  # fmt: skip
    assert verdicts(results)["C11"] == verdicts(results)["C12"] == HOLDS
    assert "Post-LN (6e-4, warm-up)" in claim(results, "C11")["evidence"]
    # without ``mlm_arms`` (a results.json from before it): the paper's names, which this grid does not have
    assert verdicts({k: v for k, v in results.items() if k != "mlm_arms"})["C11"] == NOT_RUN


def test_c11_hot_arm_that_does_not_learn_is_the_papers_divergence():
    """Post-LN at 3e-4 with the reference's warm-up and schedule, on the plateau at the end while the reference
    learned: the optimisation failed (the paper's "diverged"), decided, not "slower" (issue 32's review)."""
    results = paper_like()
    put(results["runs"], "bert-post-3e-4", seeds(7.0, 6.98, 6.95))  # above the line 6.5 on every seed
    c = claim(results, "C11")
    assert c["verdict"] == HOLDS and "did not learn where the same warm-up" in c["evidence"], c["evidence"]
    # its interval straddles the line: it may have learned a little, so the failure is not established
    put(results["runs"], "bert-post-3e-4", seeds(7.0, 6.8, 6.5, spread=(-0.4, 0.0, 0.4)))
    assert claim(results, "C11")["verdict"] == INCONCLUSIVE
    # the reference itself did not learn: the gate makes the claim inconclusive whatever the hot arm did
    put(results["runs"], "bert-post-3e-4", seeds(7.0, 6.98, 6.95))
    put(results["runs"], "bert-post-1e-4", seeds(7.0, 6.95, 6.9))
    assert claim(results, "C11")["verdict"] == INCONCLUSIVE


def test_c11_with_every_pre_ln_seed_diverged_does_not_hold():
    """An arm whose every seed diverged has no evaluation point; it is inf along the other's curve: C11's "Pre-LN
    reaches Post-LN's loss sooner" does not hold, where an empty set of shared points said "not run"."""
    results = paper_like()
    put(results["runs"], "bert-pre-3e-4", {f"-s{k}": {"status": "diverged", "evals": [{"epoch": 1, "update": 100,
                                                                                       "nll": 6.0}]}
                                           for k in (1, 2, 3)})  # fmt: skip
    c = claim(results, "C11")
    assert c["verdict"] == FAILS and "diverged" in c["evidence"], c["evidence"]
    # C9 shares the rule
    put(results["runs"], "pre-adam-5e-4-nowarm-step", {f"-s{k}": {"status": "diverged", "evals": []}
                                                       for k in (1, 2, 3)})  # fmt: skip
    assert claim(results, "C9")["verdict"] == FAILS


def test_c12_gate_interval_is_over_pretraining_seeds():
    """The fine-tuning gate's seed interval is over the pre-training seeds' means (the unit of replication), not
    the pooled runs: three pre-training seeds that spread widely leave the reference undecided even where the
    pooled interval (as if the 6 runs were independent) would be narrow."""
    results = paper_like()
    assert verdicts(results)["C12"] == HOLDS
    for update, cell in results["finetune"]["bert-post-1e-4"]["paraphrase"].items():
        m = cell["mean"]
        cell.update(ci95=0.01, parent_seeds={"1": m - 0.2, "2": m, "3": m + 0.2})  # last point 0.75: [0.25, 1.25]
    c = claim(results, "C12")
    assert c["verdict"] == INCONCLUSIVE and "cannot tell" in c["evidence"], c["evidence"]


def test_c11_hot_arm_with_a_diverged_seed_is_not_the_plateau_rule():
    """The plateau reading of C11's hot arm needs every seed to end at a loss: one diverged seed beside two that
    learned is a mix (at_least: inconclusive), not an arm that failed to train (review of the rule)."""
    results = paper_like()
    put(results["runs"], "bert-post-3e-4", {"-s1": curve(6.0, 4.0, 3.0), "-s2": curve(6.0, 3.5, 2.0),
                                            "-s3": {"status": "diverged", "evals": [{"epoch": 1, "update": 100,
                                                                                      "nll": 6.0}]}})  # fmt: skip
    c = claim(results, "C11")
    assert c["verdict"] == INCONCLUSIVE and "paper's 'diverged'" not in c["evidence"], c["evidence"]


def test_both_arms_diverged_is_inconclusive_not_missing():
    results = paper_like()
    for base in ("post-adam-5e-4-w4000", "pre-adam-5e-4-nowarm-step"):
        put(results["runs"], base, {f"-s{k}": {"status": "diverged", "evals": []} for k in (1, 2, 3)})
    c = claim(results, "C9")
    assert c["verdict"] == INCONCLUSIVE and "every seed of both arms diverged" in c["evidence"], c["evidence"]


def test_c12_gate_with_one_pre_training_seed_is_undecided():
    """Fine-tuning from one pre-training seed: the noise between pre-trainings is not measured, whatever the
    fine-tuning seeds' spread (their pooled interval is not the unit of replication)."""
    results = paper_like()
    for task in results["finetune"]["bert-post-1e-4"].values():
        for cell in task.values():
            cell["parent_seeds"] = {"1": cell["mean"]}
    c = claim(results, "C12")
    assert c["verdict"] == INCONCLUSIVE and "one pre-training seed" in c["gate"], c["gate"]


def test_a_last_validation_that_is_not_finite_is_no_final_loss():
    """A run whose last validation loss was NaN (null in results.json) while its training went on ended at no
    loss: its final is inf, not the evaluation before it (review, issue 32)."""
    from normlab.report.claims import Group

    run = curve(6.0, 5.0, 4.0)
    run["evals"][-1]["nll"] = None
    assert Group("g", [run, curve(6.0, 5.0, 4.0)]).finals() == [math.inf, 4.0]


# ---------------------------------------------------------------------------------------------------------------
# a cold audit of the rules against their words (2026-11-27)


def _null_last(run: dict) -> dict:
    run = copy.deepcopy(run)
    run["evals"][-1]["nll"] = None
    return run


def test_a_non_finite_last_loss_counts_along_the_run_too():
    """C9 and C11's "faster" read the curve along the run: a seed whose last validation loss was not finite is inf
    there as in its final loss, not compared on the updates before it failed."""
    results = paper_like()
    put(results["runs"], "pre-adam-5e-4-nowarm-step",
        {k: _null_last(v) for k, v in seeds(4.8, 4.0, 3.9).items()})  # fmt: skip
    c = claim(results, "C9")
    assert c["verdict"] == FAILS and "diverged" in c["evidence"], c["evidence"]


def test_c11_hot_arm_with_a_non_finite_last_loss_is_not_the_plateau_rule():
    """The plateau reading of C11's hot arm needs every seed to end at a finite loss: a seed whose last validation
    was NaN (status completed) beside two that learned is not an arm that failed to train."""
    results = paper_like()
    put(results["runs"], "bert-post-3e-4", {"-s1": curve(6.0, 4.0, 2.1), "-s2": curve(6.0, 3.9, 2.0),
                                            "-s3": _null_last(curve(6.0, 4.0, 2.0))})  # fmt: skip
    c = claim(results, "C11")
    assert "paper's 'diverged'" not in c["evidence"] and c["verdict"] != HOLDS, c["evidence"]


def test_a_learning_rate_still_training_keeps_c7_waiting():
    """C7 reads "every learning rate run": a rate whose runs are there but running is not "not run"; the claim
    waits (inconclusive, not finished) instead of being decided on the other rate."""
    results = paper_like()
    for base in ("post-adam-1e-3-nowarm", "post-adam-1e-3-w4000"):
        put(results["runs"], base, {f"-s{k}": {"status": "running", "evals": []} for k in (1, 2, 3)})
    got = {c["id"]: c for c in evaluate_claims(results, pending=["post-adam-1e-3-nowarm", "post-adam-1e-3-w4000"])}
    assert got["C7"]["verdict"] == INCONCLUSIVE and got["C7"]["evidence"].startswith("not finished yet"), got["C7"]
    assert verdicts(results)["C7"] == NOT_RUN  # without the pending list: not run, never decided on 5e-4 alone


def test_c8_holds_at_one_rate_whatever_the_other_rates_gate():
    """C8 is a union ("sensitive at one learning rate at least"): the rate that decides needs its own reference
    past the gate, not the other rate's (its docstring and README said so; the code gated on every rate's)."""
    results = paper_like()
    put(results["runs"], "post-adam-1e-3-w4000", seeds(6.9, 6.8, 6.7))  # 1e-3's reference on the plateau
    put(results["runs"], "post-adam-1e-3-w500", seeds(6.95, 6.9, 6.8))
    c = claim(results, "C8")
    assert c["verdict"] == HOLDS and "lr 5e-4" in c["evidence"], c["evidence"]
    # the intersection side still needs every rate: C7 holds only where it holds at both
    assert claim(results, "C7")["verdict"] == INCONCLUSIVE


def test_c13_one_diverged_seed_of_the_small_rate_is_not_a_failure():
    """Divergence is categorical with two seeds a side or more (at_least); one seed that diverged does not measure
    the noise: inconclusive, not "does not hold"."""
    results = paper_like()
    put(results["runs"], "post-adam-1e-4-const", {"-s1": {"status": "diverged", "evals": []}})
    c = claim(results, "C13")
    assert c["verdict"] == INCONCLUSIVE and "one seed" in c["evidence"], c["evidence"]


def test_the_printed_rules_say_what_the_code_asks():
    """C10's rule names the RAdam arm's own gate (_trains); C9 and C11 measure "faster" as Post-LN above Pre-LN, of
    Pre-LN's (the effect every report prints)."""
    rules = {c["id"]: c["rule"] for c in evaluate_claims(paper_like())}
    assert "the Post-LN RAdam arm itself passes the gate" in rules["C10"]
    assert "above Pre-LN's (of Pre-LN's)" in rules["C9"] and "above Pre-LN's (of Pre-LN's)" in rules["C11"]
