"""The table of measured stability edges (normlab.analysis.edges) and what diagnose says of it."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

import pytest

from normlab.analysis import edges
from normlab.config import ModelConfig, apply_overrides

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"


def test_the_shipped_table_is_the_committed_sweeps():
    """normlab/assets/edges.json is what the committed sweep.json files give: a sweep re-read or extended without
    `python -m normlab.analysis.edges --write` fails here, not in a user's diagnose."""
    if not RESULTS.is_dir():
        pytest.skip("no docs/results: not a checkout")
    assert edges.load() == edges.collect(RESULTS), "run: python -m normlab.analysis.edges --write"
    assert edges.dumps(edges.load()) == edges._asset().read_text(encoding="utf-8")


def test_the_shipped_table_holds_the_bisected_sweeps():
    table = edges.load()
    assert {"edge-quick", "width-gpu", "sweep-lm"} <= set(table["sources"])
    # standard-189's Post-LN and Pre-LN runs are three-arms' seed 1: only its Peri-LN curves are rows of their own
    assert {r["scheme"] for key in ("edges", "verdicts", "width_laws") for r in table[key]
            if r["source"] == "standard-189"} == {"peri"}  # fmt: skip
    # edge-quick: Post-LN at d=64 without warm-up, its five seeds' brackets as the sweep's README gives them
    [row] = [r for r in table["edges"] if (r["source"], r["scheme"], r["warmup"], r["width"]) == ("edge-quick", "post",
                                                                                                   "none", 64)]
    assert row["seeds"] == [[0.00237, 0.00261], [0.00178, 0.00196], [0.00196, 0.00215], [0.00162, 0.00178],
                            [0.00261, 0.00287]]  # fmt: skip
    s = edges.summarize(row["seeds"])
    assert (s["lo"], s["hi"], s["bracketed"]) == (0.00162, 0.00287, 5)
    assert s["median"] == pytest.approx(math.sqrt(0.00196 * 0.00215))


def test_the_optimizers_are_the_sweeps():
    """The table says which optimizer each task's sweep ran; the sweep's own run config is the truth."""
    from normlab.experiments.figures import Context
    from normlab.experiments.sweep import SWEEP_SCALES, _train_config

    for task, (name, betas, wd, smoothing) in edges._OPTIM.items():
        model = edges._MODEL[task]
        cfg = SWEEP_SCALES["quick"].replace(task=task, warmups=("none",))  # mlm's adam warm-up outlasts 300 updates
        ctx = Context(translation_updates_per_epoch=1)
        tc = _train_config(cfg, ctx, scheme="post", warmup="none", width=64, lr=1e-3, seed=1)
        assert (tc.optim.name, tuple(tc.optim.betas), tc.optim.weight_decay, tc.label_smoothing) == (
            name, betas, wd, smoothing), task
        assert edges._model_settings(tc.model) == model, task


def test_summarize_keeps_censored_and_below_grid_seeds_apart():
    s = edges.summarize([[1e-3, 1.2e-3], [2e-3, 2.4e-3], [5e-3, None], [None, 1e-4]], cap=1.0)
    assert (s["n"], s["bracketed"], s["censored"], s["below_grid"], s["unfinished"]) == (4, 2, 1, 1, 1)
    assert s["median"] == pytest.approx((math.sqrt(1.2e-6) + math.sqrt(4.8e-6)) / 2)
    assert (s["lo"], s["hi"], s["censored_at"], s["below"]) == (1e-3, 2.4e-3, [5e-3], [1e-4])
    assert s["widest"] == pytest.approx(1.2)
    text = edges._summary_text(s, 1.2)
    assert text.startswith("0.0016 (seeds [0.001, 0.0024); ") and "coarser" not in text
    assert "1 of 4 seeds censored, no run unstable up to 0.005, where the edge search stopped" in text
    assert "1 of 4 seeds unstable from the smallest rate, 0.0001" in text
    # censored at the cap: a finished search; brackets a grid step wide: said; grid rates not run: said
    s = edges.summarize([[0.01, 0.0215], [1.0, None]], cap=1.0)
    text = edges._summary_text(s, 1.2, missing=[0.00464])
    assert "brackets up to 2.15x, coarser than the search's 1.2x" in text and "not finished" not in text
    assert "incomplete: 1 grid rate(s) not run" in text
    assert edges._summary_text(edges.summarize([[0.01, None], [0.02, None]], 1.0), 1.2).startswith("at least 0.01 (")
    assert edges._summary_text(edges.summarize([[None, 1e-4]], 1.0), 1.2).startswith("no edge measured, below 0.0001 (")
    assert edges._summary_text(edges.summarize([[None, 1e-4], [0.5, None]], 1.0), 1.2).startswith("not bracketed (")


def _table():
    src = dict(task="translation", ffn_ratio=2, n_heads=4, dropout=0.1, updates=300, max_tokens=1024, vocab_size=8000,
               seeds=2, lr_min=1e-4, lr_cap=1.0, resolution=1.2, optimizer="adam", betas=[0.9, 0.98],
               weight_decay=0.0, label_smoothing=0.1, warmups={"none": 0, "adam": 100}, where="here",
               model={"positional": "sinusoidal", "activation": "relu", "scale_embedding": True})  # fmt: skip
    return {
        "sources": {"a3": {**src, "layers": 3, "path": "docs/results/a3"},
                    "b6": {**src, "layers": 6, "path": "docs/results/b6", "seeds": 1}},
        "edges": [
            {"source": "a3", "scheme": "post", "warmup": "none", "width": 64,
             "seeds": [[2e-3, 2.4e-3], [3e-3, 3.6e-3]]},
            {"source": "a3", "scheme": "post", "warmup": "adam", "width": 64, "seeds": [[5e-3, 6e-3], [7e-3, 8.4e-3]]},
            {"source": "a3", "scheme": "post", "warmup": "none", "width": 128, "seeds": [[1e-3, 1.2e-3]] * 2},
            {"source": "a3", "scheme": "post", "warmup": "adam", "width": 128, "seeds": [[2e-3, 2.4e-3], [1e-2, None]],
             "missing_lrs": [0.01]},
            {"source": "b6", "scheme": "post", "warmup": "none", "width": 128, "seeds": [[None, 1e-4]]},
            {"source": "a3", "scheme": "pre", "warmup": "none", "width": 64, "seeds": [[0.05, 0.06]] * 2},
        ],
        "verdicts": [{"source": "a3", "scheme": "post", "width": 64, "warmup": "adam", "verdict": "inconclusive",
                      "why": "2 of 2 seeds agree, too few", "plus": 2, "decided": 2, "seeds": 2},
                     {"source": "a3", "scheme": "post", "width": 128, "warmup": "adam", "verdict": "undecided",
                      "why": "a run of an arm failed or has not finished", "plus": 0, "decided": 0, "seeds": 0}],
        "width_laws": [{"source": "a3", "scheme": "post", "warmup": "none", "widths": [64, 128], "seed_mean": -1.08,
                        "lo": -1.3, "hi": -0.9}],
    }  # fmt: skip


def test_measured_takes_the_nearest_depth_and_says_what_was_not_measured():
    t = _table()
    m = edges.measured(t, "translation", "post", 4, 64)  # |ln(4/3)| < |ln(4/6)|: the 3-layer sweep
    assert m["nearest_depth"] == 3 and m["depths"] == [3, 6] and m["width_measured"]
    assert [(r["width"], r["warmup"], r["run"]) for r in m["rows"]] == [(64, "none", True), (64, "adam", True),
                                                                        (128, "none", True), (128, "adam", True)]
    assert m["rows"][1]["verdict"]["verdict"] == "inconclusive" and m["rows"][1]["warmup_updates"] == 100
    assert m["other_depths"] == [] and set(m["sources"]) == {"a3"}
    # nearer 6: the 6-layer rows, the arm that sweep did not run said as such, the 3-layer d=128 beside them
    m = edges.measured(t, "translation", "post", 5, 128)
    assert m["nearest_depth"] == 6 and [(r["source"], r["warmup"], r["run"]) for r in m["rows"]] == [
        ("b6", "none", True), ("b6", "adam", False)]
    assert [(r["source"], r["width"], r["warmup"]) for r in m["other_depths"]] == [("a3", 128, "none"),
                                                                                   ("a3", 128, "adam")]
    # the same keys whatever is found (diagnose's JSON)
    empty = edges.measured(t, "translation", "deepnorm", 3, 64)
    assert empty["rows"] == [] and empty["schemes"] == ["post", "pre"] and set(empty) == set(m)
    assert edges.measured(t, "lm", "post", 3, 64)["rows"] == []


def test_edge_lines_read_the_rows_and_give_a_command_that_the_sweep_takes():
    from normlab.experiments.sweep import SweepConfig, sweep_scale

    t = _table()
    cfg = ModelConfig(placement="post", d_model=64, d_ffn=128, n_heads=4, encoder_layers=3, decoder_layers=3)
    lines = edges.edge_lines(cfg, "translation", t)
    text = " ".join(line.strip() for line in lines)  # wrapped at 118 columns: read as one text
    assert max(map(len, lines)) <= 120
    assert "  > d=64   no warm-up    0.0027 (seeds [0.002, 0.0036))" in lines
    # the plain answer: the model's own cell, both arms and the verdict
    assert ("answer: nearest measured model: post, 3-3 layers, d=64 (a3: 2 seed(s), 300 updates of 1,024 tokens): "
            "without warm-up, stable up to ~0.0027 (seeds 0.002..0.0036); with a 100-update warm-up, stable up to "
            "~0.0066 (seeds 0.005..0.0084); warm-up inconclusive: it raised the edge in 2 of 2 seeds.") in text
    assert "label smoothing 0.1" in text
    # no seed decided: the verdict's reason, not "0 of 0 seeds"; an unfinished curve said
    assert "warm-up undecided (a run of an arm failed or has not finished)" in text and "0 of 0" not in text
    assert "1 of 2 seeds censored, no run unstable up to 0.01, where the edge search stopped; incomplete" in text
    assert "edge ~ d^-1.08 (seeds' fits -1.30 .. -0.90; for Post-LN, Theorem 1" in text
    assert "has the nearest rows' depth, width, FFN, heads, dropout" in text
    # diagnose's verdict against the rows: said when they point different ways, not otherwise
    assert "answer different questions" not in text
    assert "answer different" not in " ".join(edges.edge_lines(cfg, "translation", t, advised=False))
    needed = {**t, "verdicts": [{**t["verdicts"][0], "verdict": "needed"}]}
    assert "answer different" in " ".join(edges.edge_lines(cfg, "translation", needed, advised=False))
    assert "answer different" not in " ".join(edges.edge_lines(cfg, "translation", needed, advised=True))
    # a model of another depth, width, FFN, heads and dropout: each named, and the command that measures it
    cfg = ModelConfig(placement="post", d_model=512, d_ffn=2048, n_heads=8, encoder_layers=6, decoder_layers=6,
                      dropout=0.3)
    m = edges.measured_for(cfg, "translation", t)
    assert m["differences"] == ["width d=512 (measured: 128)", "FFN 4d (measured: 2d)", "heads 8 (measured: 4)",
                                "dropout 0.3 (measured: 0.1)"]
    lines = edges.edge_lines(cfg, "translation", t)
    assert "differs from the nearest rows in: width d=512" in " ".join(line.strip() for line in lines)
    argv = shlex.split(m["command"])
    assert argv[:4] == ["normlab", "sweep", "--scale", "quick"]
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    sweep = SweepConfig.from_dict(apply_overrides(sweep_scale("quick").to_dict(), sets))
    assert (sweep.schemes, sweep.layers, sweep.widths, sweep.ffn_ratio, sweep.n_heads, sweep.seeds, sweep.dropout) == (
        ("post",), 6, (512,), 4, 8, 5, 0.3)
    # what a sweep cannot express is said beside its command: E != D, an FFN no whole multiple of d, positions
    odd = ModelConfig(placement="post", d_model=64, d_ffn=170, n_heads=4, encoder_layers=6, decoder_layers=2,
                      positional="learned")
    m = edges.measured_for(odd, "translation", t)
    assert m["command_changes"] == ["6-6 layers for your 6-2", "FFN 3d for your 2.66d",
                                    "positional sinusoidal for your learned"]
    assert "positional learned (measured: sinusoidal)" in m["differences"]
    # every task's command is one the sweep accepts (the masked LM's 2,000-update adam warm-up outlasts the preset)
    for task in ("translation", "mlm", "lm"):
        argv = shlex.split(edges.measured_for(cfg, task, t)["command"])
        sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        SweepConfig.from_dict(apply_overrides(sweep_scale(argv[3]).to_dict(), sets))
    # a scheme the sweeps did not run on the task: said, with the command
    text = " ".join(line.strip() for line in edges.edge_lines(cfg.replace(placement="admin"), "translation", t))
    assert "admin was not swept on the translation task (swept there: post, pre)" in text and "schemes=[admin]" in text
    # a task no sweep trains
    assert "none for the classification task: the committed sweeps trained translation models." in " ".join(
        edges.edge_lines(cfg, "classification", t))
    mlm = " ".join(line.strip() for line in edges.edge_lines(cfg, "mlm", t))
    assert "none for the mlm task: the committed sweeps trained translation models. To measure" in mlm
    # a norm other than LayerNorm is part of the scheme's name, as the sweeps spell it
    assert edges.scheme_of(cfg.replace(placement="pre", norm="dyt")) == "pre/dyt"


def test_the_answer_looks_at_another_depth_when_the_nearest_has_no_edge():
    t = _table()
    cfg = ModelConfig(placement="post", d_model=128, d_ffn=256, n_heads=4, encoder_layers=6, decoder_layers=6)
    text = " ".join(line.strip() for line in edges.edge_lines(cfg, "translation", t))
    assert ("answer: nearest measured model: post, 6-6 layers, d=128 (b6: 1 seed(s), 300 updates of 1,024 tokens): "
            "without warm-up, no edge measured (every seed unstable from the smallest rate or too short to leave the "
            "plateau, from 0.0001); with a 100-update "
            "warm-up, not run.") in text
    assert "At your width, another depth: post, 3-3 layers, d=128 (a3:" in text
    assert "b6: without warm-up no run of 300 updates left the plateau at any rate from 0.0001" in text


def test_a_run_config_s_rate_is_placed_against_the_nearest_edge_seed_by_seed():
    t = _table()
    cfg = ModelConfig(placement="post", d_model=64, d_ffn=128, n_heads=4, encoder_layers=3, decoder_layers=3)
    m = edges.measured_for(cfg, "translation", t)

    def place(lr, warm, **run):
        return edges.compare_run(m, {"lr": lr, "warmup_updates": warm, **run})

    # the no-warm-up arm's seeds: [2e-3, 2.4e-3) and [3e-3, 3.6e-3)
    below = place(1e-3, 0)
    assert (below["position"], below["warmup"], below["source"], below["width"]) == ("below", "none", "a3", 64)
    assert below["seeds"] == {"n": 2, "stable": 2, "unstable": 0, "not_determined": 0}
    assert ("stable in all 2 seeds of post, 3-3 layers, d=64 (a3) without warm-up: the lowest last stable rate, "
            "0.002, is 2x your rate") in below["text"] and below["caveats"] == []
    # at the bounds: a seed is stable at its last stable rate and unstable at its first unstable one
    assert place(2e-3, 0)["seeds"] == {"n": 2, "stable": 2, "unstable": 0, "not_determined": 0}
    assert place(2.4e-3, 0)["seeds"] == {"n": 2, "stable": 1, "unstable": 1, "not_determined": 0}
    # inside the range: counted per seed (2.1e-3 is inside seed 1's bracket, below seed 2's edge: nothing unstable)
    assert place(2.1e-3, 0)["seeds"] == {"n": 2, "stable": 1, "unstable": 0, "not_determined": 1}
    assert place(2.5e-3, 0)["seeds"] == {"n": 2, "stable": 1, "unstable": 1, "not_determined": 0}
    assert place(4e-3, 0)["position"] == "above"
    # a 1-update warm-up is none (ScheduleConfig); a warm-up is read against the arm nearest in length, and one under
    # half of it is not comparable
    assert place(1e-3, 1)["warmup"] == "none"
    warm = place(4e-3, 80)
    assert warm["position"] == "below" and warm["warmup"] == "adam" and "with its 100-update warm-up" in warm["text"]
    short = place(4e-3, 5)
    assert short["position"] == "unknown" and "the lengths differ by more than 2x" in short["text"]
    assert short["warmup"] == "adam" and place(3e-2, 4000)["position"] == "unknown"  # far longer: not comparable
    assert place(1e-3, None)["warmup"] == "none"  # a missing warm-up is none
    # another optimizer family is not comparable; a run's batch, length and decay are caveats
    assert place(1e-3, 0, optimizer="sgd")["position"] == "unknown"
    caveats = place(1e-3, 0, optimizer="adamw", max_tokens=4096, updates=9000, decay="linear")["caveats"]
    assert caveats == ["optimizer adamw (measured: adam)", "batch 4,096 tokens (measured: 1,024)",
                       "run length 9,000 updates (measured: 300)", "linear decay (measured: the rate constant after "
                       "the warm-up)"]
    assert place(1e-3, 0, updates=0)["caveats"] == ["run length set by epochs or hours (measured: 300 updates)"]
    # a censored seed counts as stable below its bound, not determined above it
    mixed = {**t, "edges": [{**e, "seeds": [[2e-3, 2.4e-3], [1e-2, None]]} if (e["scheme"], e["warmup"], e["width"])
                            == ("post", "none", 64) else e for e in t["edges"]]}  # fmt: skip
    mm = edges.measured_for(cfg, "translation", mixed)
    assert edges.compare_run(mm, {"lr": 1e-4, "warmup_updates": 0})["position"] == "below"
    assert edges.compare_run(mm, {"lr": 5e-2, "warmup_updates": 0})["seeds"]["not_determined"] == 1
    # the nearest depth's failures are read, not skipped: b6 (6 layers) was unstable (or too short) from 1e-4
    m6 = edges.measured_for(cfg.replace(encoder_layers=6, decoder_layers=6, d_model=128, d_ffn=256), "translation", t)
    placed = edges.compare_run(m6, {"lr": 5e-4, "warmup_updates": 0})
    assert (placed["source"], placed["layers"], placed["position"]) == ("b6", 6, "above")
    assert "1 of them unstable from the smallest rate or too short to leave the plateau" in placed["text"]
    # below 1e-4 b6 decides nothing: the model's width at 3 layers, with the depth as a caveat
    placed = edges.compare_run(m6, {"lr": 5e-5, "warmup_updates": 0})
    assert (placed["source"], placed["layers"], placed["position"]) == ("a3", 3, "below")
    assert placed["caveats"][0] == "depth 6 (measured: 3)"
    # the same keys on every path (diagnose's JSON)
    keys = set(below)
    assert set(short) == keys and set(edges.compare_run(edges.measured(t, "translation", "admin", 3, 64) | {
        "differences": []}, {"lr": 1e-3, "warmup_updates": 0})) == keys
    # in diagnose's section and JSON
    run = {"lr": 1e-3, "warmup_updates": 0}
    text = " ".join(line.strip() for line in edges.edge_lines(cfg, "translation", t, run=run))
    assert "Your run (learning rate 0.001, no warm-up): stable in all 2 seeds" in text
    assert edges.measured_for(cfg, "translation", t, {"lr": 4e-3, "warmup_updates": 0})["run"]["position"] == "above"
    assert edges.measured_for(cfg, "translation", t)["run"] is None
