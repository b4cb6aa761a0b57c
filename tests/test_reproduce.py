"""``normlab reproduce --scale smoke`` end to end, and the grid's kill-and-rerun behaviour."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from normlab.experiments.figures import Context, fig6_small_lr
from normlab.experiments.grid import run_grid, run_status
from normlab.experiments.scales import get_scale
from normlab.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


@pytest.mark.slow
def test_smoke_reproduce_writes_the_report(tmp_path, data_cache):
    out = tmp_path / "repro"
    proc = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "smoke", "--out", str(out)],
                          cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=500)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "estimate:" in proc.stderr  # the wall-time probe ran first
    results = json.loads((out / "report" / "results.json").read_text())
    claims = {c["id"]: c for c in results["claims"]}
    assert sorted(claims, key=lambda c: int(c[1:])) == [f"C{i}" for i in range(1, 14)]
    for c in claims.values():
        assert c["evidence"] and c["rule"]
    # every figure was run at the smoke scale, so no verdict may say it was not; its models learn nothing, so no
    # training claim may be decided (the gate of report/claims.py)
    assert all(c["verdict"] != "not run at this scale" for c in claims.values()), claims
    # at initialisation no gate applies; C1-C6 are decided on their seed intervals, which at this scale's tiny
    # samples may straddle a threshold (inconclusive)
    for cid in ("C1", "C2", "C3", "C4", "C5", "C6"):
        assert "95%" in claims[cid]["evidence"] and "interval" in claims[cid]["evidence"], claims[cid]
    for cid in ("C7", "C8", "C9", "C10", "C11", "C12", "C13"):
        assert claims[cid]["verdict"] == "inconclusive", claims[cid]
        # its models learned nothing, or the gate cannot tell within its noise (issue 38: the gate's interval)
        assert ("did not learn" in claims[cid]["evidence"]
                or "cannot tell within the seed noise" in claims[cid]["evidence"]), claims[cid]
    base = results["baselines"]
    # the unigram loss lies above the plug-in entropy of the same tokens; the masked LM's gate is lower (copying)
    assert 3 < base["translation"]["plugin_entropy"] < base["translation"]["unigram_entropy"] < 9, base
    assert 3 < base["mlm"]["plugin_entropy"] < base["mlm"]["unigram_loss_all_masked"] < 9, base
    assert base["mlm"]["unigram_entropy"] < base["mlm"]["unigram_loss_all_masked"]
    assert 0.4 < base["finetune"]["wic"]["majority"] < 0.7
    # two seeds per training run, grouped, with seed-mean curves
    group = results["groups"]["post-adam-5e-4-w4000"]
    assert group["runs"] == ["post-adam-5e-4-w4000-s1", "post-adam-5e-4-w4000-s2"]
    assert group["nll"]["curve"] and all(p["n"] == 2 and p["sd"] is not None for p in group["nll"]["curve"])
    assert results["meta"]["scale"] == "smoke" and results["meta"]["outcomes"]["failed"] == 0
    assert {"fig2", "fig4", "fig6"} <= {f for r in results["runs"].values() for f in r["figures"]}
    page = (out / "report" / "index.html").read_text()
    for section in ("Claims", "Gates", "inconclusive", "How the paper", "Figure 2", "Figure 3", "Figure 4", "Figure 5",
                    "Figure 6", "Beyond the paper", "Runs"):
        assert section in page, section
    # the width sweep is not in the smoke scale's default figures: the section says how to add it
    assert results["width_sweep"] == {"ran": False, "preset": "smoke", "runs": 24,
                                      "description": results["width_sweep"]["description"]}
    assert "not run at this scale. `normlab reproduce --figures" in page
    assert page.count("data:image/png;base64,") >= 5  # self-contained: the figures are inside the page
    md = (out / "report" / "REPORT.md").read_text()
    assert all(f"| {i} |" in md for i in claims) and "## Runs" in md
    assert "## How the paper's settings map to this scale" in md and "| T_warmup=4000 |" in md  # as in the page
    links = re.findall(r"\]\(([^)]+\.png)\)", md)  # the Markdown links the PNGs, relative to itself
    assert len(links) >= 5, links
    for link in links:
        assert "/" not in link and (out / "report" / link).is_file(), link  # the report folder stands alone
    # re-running does no work: everything is cached
    again = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "smoke", "--out", str(out)],
                           cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "to run" not in again.stderr or " 0 to run" in again.stderr
    assert json.loads((out / "report" / "results.json").read_text())["meta"]["outcomes"]["cached"] == len(
        results["runs"]
    )


def test_width_figure_runs_the_sweep_into_the_report(tmp_path, data_cache, monkeypatch):
    """``--figures width`` (beyond the paper) runs the scale's sweep preset into OUT/width and the report gains its
    section: the frontier table, the width law, diagnose beside the sweep, and the two figures. A smaller preset
    than the smoke sweep keeps it to a few seconds (8 runs)."""
    import dataclasses

    from normlab.experiments import sweep
    from normlab.experiments.reproduce import reproduce
    from normlab.report.sweep import BEYOND_TITLE

    small = dataclasses.replace(sweep.SWEEP_SCALES["smoke"], schemes=("post",), lr_min=1e-2)
    monkeypatch.setitem(sweep.SWEEP_SCALES, "smoke", small)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "repro"
    results = reproduce("smoke", out, figures=("width",), jobs=2, threads=1, probe=False)
    w = results["width_sweep"]
    assert w["ran"] and w["config"]["schemes"] == ["post"] and "cells" not in w
    # 8 grid runs, and the edge search's one round: lr 1 (the cap) on each of the 4 curves (no bisection: smoke's
    # resolution, 11x, holds the bracket [0.1, 1))
    assert len(json.loads((out / "width" / "report" / "sweep.json").read_text())["cells"]) == 8 + 4
    assert {(r["warmup"], r["width"]) for r in w["frontier"]} == {(a, b) for a in ("none", "paper") for b in (16, 32)}
    assert w["diagnose"]["table"] and len(w["width_law"]) == 2
    assert all(c["verdict"] == "not run at this scale" for c in results["claims"])  # no paper figure was asked for
    report = out / "report"
    md = (report / "REPORT.md").read_text()
    assert f"## {BEYOND_TITLE}" in md and "### Stability edge, LR tolerance and LR sensitivity" in md
    assert "| post | none |" in md and "1 seed(s) per cell" in md and "diagnose agrees with the sweep" in md
    # where the sweep's runs trained, counted before its cells were left out of results.json
    assert list(w["meta"]["provenance"]["machines"].values()) == [12]  # one machine, every run
    assert "The runs trained on: " in md and "(12 runs)." in md
    for png in ("width_loss_vs_lr.png", "width_frontier.png"):
        assert (report / png).stat().st_size > 1000 and f"]({png})" in md
    page = (report / "index.html").read_text()
    assert BEYOND_TITLE in page and "diagnose held against the sweep" in page and "notrun" not in page.split(BEYOND_TITLE)[1].split("<h2>")[0]
    # --report-only with a cell gone: the sweep's section reads what finished; the curve with the hole decides
    # nothing (no warm-up ground truth at its width, no point of the width law), diagnose's verdicts are reused
    gone = json.loads((out / "width" / "report" / "sweep.json").read_text())["cells"][0]
    shutil.rmtree(out / "width" / "runs" / gone["name"])
    again = reproduce("smoke", out, figures=("width",), jobs=2, threads=1, probe=False, train=False)
    w = again["width_sweep"]
    assert w["ran"] and w["meta"]["report_only"] and w["meta"]["unfinished"] == 1
    [row] = [r for r in w["frontier"] if (r["scheme"], r["warmup"], r["width"]) == (gone["scheme"], gone["warmup"],
                                                                                       gone["width"])]  # fmt: skip
    assert row["missing_lrs"] == [gone["lr"]]
    assert next(t for t in w["warmup_truth"] if t["width"] == gone["width"])["warmup_needed"] is None
    assert gone["width"] not in next(s for s in w["width_law"] if s["warmup"] == gone["warmup"])["widths"]
    assert w["diagnose"] is not None and w["diagnose"]["table"] == results["width_sweep"]["diagnose"]["table"]
    assert not (out / "width" / "runs" / gone["name"]).exists()


def test_figure_subset_on_a_users_own_files(tmp_path, small_corpora):
    """``--figures`` runs only what those figures need, and ``--corpus`` takes fairseq-style train.de/train.en
    files; claims whose runs were not asked for say so instead of guessing."""
    out = tmp_path / "repro"
    env = dict(ENV, NORMLAB_CACHE=str(tmp_path / "cache"))
    proc = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "smoke", "--figures", "fig6",
                           "--corpus", str(small_corpora["de-en-raw"]), "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads((out / "report" / "results.json").read_text())
    assert sorted(results["runs"]) == [f"{r}-s{k}" for r in ("post-adam-1e-3-nowarm", "post-adam-1e-3-w4000",
                                                            "post-adam-1e-4-const") for k in (1, 2)]  # fmt: skip
    assert all(r["status"] == "completed" for r in results["runs"].values()), results["runs"]
    verdicts = {c["id"]: c["verdict"] for c in results["claims"]}
    assert verdicts["C13"] == "inconclusive" and verdicts["C1"] == verdicts["C11"] == "not run at this scale"
    assert "unigram_entropy" in results["baselines"]["translation"]  # measured on the user's files
    assert str(small_corpora["de-en-raw"]) in (out / "configs" / "post-adam-1e-4-const-s1.yaml").read_text()
    # --report-only trains nothing and writes the report from what has finished: a run killed half-way (its
    # summary says running) and a run never started count as missing, and the report names both
    runs = out / "runs"
    metrics = {p.parent.name: p.read_bytes() for p in runs.glob("*/metrics.jsonl")}
    shutil.rmtree(runs / "post-adam-1e-4-const-s2")
    summary = runs / "post-adam-1e-3-nowarm-s2" / "summary.json"
    summary.write_text(json.dumps(dict(json.loads(summary.read_text()), status="running")))
    partial = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "smoke", "--figures", "fig6",
                              "--corpus", str(small_corpora["de-en-raw"]), "--out", str(out), "--report-only"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert partial.returncode == 0, partial.stderr[-3000:]
    assert not (runs / "post-adam-1e-4-const-s2").exists()
    assert {p.parent.name: p.read_bytes() for p in runs.glob("*/metrics.jsonl")} == {
        k: v for k, v in metrics.items() if k != "post-adam-1e-4-const-s2"}  # nothing trained, nothing resumed
    results = json.loads((out / "report" / "results.json").read_text())
    assert results["meta"]["report_only"] and results["meta"]["unfinished"] == {
        "post-adam-1e-3-nowarm-s2": "running", "post-adam-1e-4-const-s2": "absent"}
    c13 = next(c for c in results["claims"] if c["id"] == "C13")
    assert c13["verdict"] == "inconclusive" and "(1 seed)" in c13["evidence"], c13
    # the half-killed run's curve is left out too, not only the deleted one
    assert results["groups"]["post-adam-1e-3-nowarm"]["nll"]["seeds"] == 1
    assert results["groups"]["post-adam-1e-4-const"]["nll"]["seeds"] == 1
    banner = "Written with --report-only, training nothing: 2 of the 6 runs had not finished"
    md, page = (out / "report" / "REPORT.md").read_text(), (out / "report" / "index.html").read_text()
    assert banner in md and banner in page and "report written with --report-only; " in md
    assert results["meta"]["threads"] is None and results["meta"]["train_time_s"] > 0 and "no training;" in md
    assert banner in partial.stderr  # on the terminal too
    # the report names the corpus it was computed from (the user's files here)
    assert results["meta"]["corpus"] == str(small_corpora["de-en-raw"].resolve())
    assert f"Corpus: {small_corpora['de-en-raw'].resolve()}." in md
    # the width sweep asked for but not started: said so, not "not run at this scale"
    partial = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "smoke", "--figures",
                              "fig6,width", "--corpus", str(small_corpora["de-en-raw"]), "--out", str(out),
                              "--report-only"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=600)  # fmt: skip
    assert partial.returncode == 0, partial.stderr[-3000:]
    results = json.loads((out / "report" / "results.json").read_text())
    assert results["width_sweep"]["unfinished"] and results["meta"]["width_missing"]
    md = (out / "report" / "REPORT.md").read_text()
    assert "The width sweep had no finished run" in md and "had finished when this report was written" in md
    assert not (out / "width").exists()
    # runs of another scale in the folder are refused, not reported as this scale's
    other = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "full", "--figures", "fig6",
                            "--corpus", str(small_corpora["de-en-raw"]), "--out", str(out), "--report-only"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert other.returncode == 2 and "trained with other settings" in other.stderr, other.stderr[-2000:]
    empty = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "smoke", "--figures", "fig6",
                            "--out", str(tmp_path / "empty"), "--report-only"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert empty.returncode == 2 and "nothing has finished" in empty.stderr
    assert not (tmp_path / "empty").exists() and "dropped" not in empty.stderr  # refused before any data work
    bad = subprocess.run([sys.executable, "-m", "normlab", "reproduce", "--scale", "smoke", "--figures", "fig7",
                          "--out", str(tmp_path / "bad")], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "fig7" in bad.stderr and not (tmp_path / "bad" / "report").exists()


GRID_SCRIPT = """
import sys
from pathlib import Path
from normlab.experiments.figures import Context, fig6_small_lr
from normlab.experiments.grid import run_grid
from normlab.experiments.scales import get_scale
specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
specs = [s for s in specs]
outcomes = run_grid(specs, Path(sys.argv[1]), jobs=1, threads=1)
print({k: v.status for k, v in outcomes.items()})
"""


@pytest.mark.slow
def test_kill_and_rerun_skips_finished_runs(tmp_path):
    out = tmp_path / "grid"
    specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
    proc = subprocess.Popen([sys.executable, "-c", GRID_SCRIPT, str(out)], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    first = out / "runs" / specs[0].name
    deadline = time.time() + 300
    while time.time() < deadline and run_status(first) != "completed":
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert run_status(first) == "completed", proc.stderr.read()[-2000:]
    finished_mtime = (first / "metrics.jsonl").stat().st_mtime
    time.sleep(0.5)  # the worker dies with the grid (PR_SET_PDEATHSIG): nothing writes into the runs any more
    outcomes = run_grid(specs, out, jobs=1, threads=1, say=lambda line: None)
    assert outcomes[specs[0].name].status == "cached"
    assert (first / "metrics.jsonl").stat().st_mtime == finished_mtime  # not run again
    assert [outcomes[s.name].status for s in specs[1:]] == ["completed", "completed"]
    for s in specs:
        assert run_status(out / "runs" / s.name) == "completed"


def test_the_grid_refuses_a_run_trained_with_other_settings(tmp_path):
    """A run directory whose config differs from the grid's in a setting its result depends on (here the schedule's
    decay, as when a scale changes between two invocations) stops the grid before anything runs; checkpoint
    cadence does not count."""
    import yaml

    from normlab.config import ConfigError
    from normlab.experiments.grid import changed_settings

    specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
    run = tmp_path / "grid" / "runs" / specs[0].name
    run.mkdir(parents=True)
    saved = specs[0].config.to_dict()
    saved["save_every"], saved["keep_last"] = 7, 3
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert changed_settings(specs[0], run) == [] and changed_settings(specs[1], tmp_path / "absent") == []
    saved["schedule"]["decay"] = "inverse_sqrt" if saved["schedule"]["decay"] != "inverse_sqrt" else "constant"
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert [d.split(":")[0] for d in changed_settings(specs[0], run)] == ["schedule.decay"]
    with pytest.raises(ConfigError, match=f"{specs[0].name} \\(schedule.decay: "):
        run_grid(specs, tmp_path / "grid", jobs=1, threads=1, say=lambda line: None)
    assert not (tmp_path / "grid" / "runs" / specs[1].name).exists()  # nothing ran
    # a setting an older normlab did not write ran at its default: absent counts as the default, not as "same"
    saved["schedule"]["decay"] = "inverse_sqrt"
    del saved["schedule"]["decay_from"]
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    wanted = specs[0].__class__(**{**specs[0].__dict__, "config": specs[0].config.replace(
        schedule=specs[0].config.schedule.replace(decay="inverse_sqrt", decay_from=2))})
    assert changed_settings(wanted, run) == ["schedule.decay_from: 0 -> 2"]
    saved["schedule"]["decay_from"] = 2
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    assert changed_settings(wanted, run) == []


def test_sync_fills_one_grid_from_several_machines(tmp_path):
    """--sync (issue 32's grid in pieces): machine A's finished run is copied into the shared folder as it ends,
    small files only, with the grid's log and the machine's lscpu; machine B takes it as finished (never trained
    again: the same metrics), trains the rest and copies them there. Not taken: a run saved there with other
    settings, another grid's run, a pre-training run whose fine-tuning runs need its checkpoints; not copied out: a
    run trained with other settings. A killed run's leftovers give way to a finished copy, except with
    --report-only (train=False), which deletes nothing."""
    import dataclasses

    import yaml

    from normlab.experiments.grid import sync_in, sync_out

    specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
    store, lines = tmp_path / "store", []
    a, b = tmp_path / "machine-a", tmp_path / "machine-b"
    by_name = {s.name: s for s in specs}
    out_a = run_grid(specs[:1], a, jobs=1, threads=1, say=lambda line: None,
                     on_end=lambda n, o: sync_out(by_name[n], a, store, lines.append))  # fmt: skip
    first = specs[0].name
    assert out_a[first].status == "completed" and lines == [f"sync: {first} copied to {store / first}"]
    assert sorted(p.name for p in (store / first).iterdir()) == sorted(
        ["config.yaml", "data.json", "metrics.jsonl", "summary.json", "train.log", "cpu.txt"])
    assert (store / first / "metrics.jsonl").read_bytes() == (a / "runs" / first / "metrics.jsonl").read_bytes()
    assert "=== " in (store / first / "train.log").read_text() and (store / first / "cpu.txt").read_text().strip()
    assert not sync_out(specs[0], a, store)  # a finished copy there is kept as it is
    lines.clear()  # ... and one with other settings is named, not replaced
    assert not sync_out(dataclasses.replace(specs[0], config=specs[0].config.replace(seed=7)), a, store, lines.append)
    assert "trained with other settings (seed: 1 -> 7)" in lines[0], lines

    assert sync_in(specs, b, store, lines.append) == [first]
    out_b = run_grid(specs, b, jobs=1, threads=1, say=lambda line: None,
                     on_end=lambda n, o: sync_out(by_name[n], b, store))  # fmt: skip
    assert [out_b[s.name].status for s in specs] == ["cached"] + ["completed"] * (len(specs) - 1)
    assert (b / "runs" / first / "metrics.jsonl").read_bytes() == (a / "runs" / first / "metrics.jsonl").read_bytes()
    assert all(run_status(store / s.name) == "completed" for s in specs)
    assert not any((store / s.name / "checkpoints").exists() or (store / s.name / "tokenizer.model").exists()
                   for s in specs)  # fmt: skip

    # machine C: --report-only keeps a killed run of its own; a grid run lets it give way to the finished copy.
    # A copy with other settings, another grid's run and a parent whose fine-tuning runs wait are not taken.
    c = tmp_path / "machine-c"
    (c / "runs" / first / "checkpoints" / "update_00000002").mkdir(parents=True)
    (c / "runs" / first / "summary.json").write_text(json.dumps({"status": "running"}))
    other, parent = specs[1].name, specs[2].name
    saved = yaml.safe_load((store / other / "config.yaml").read_text())
    saved["optim"]["lr"] *= 2
    (store / other / "config.yaml").write_text(yaml.safe_dump(saved))
    shutil.copytree(store / parent, store / "another-grids-run")
    child = dataclasses.replace(specs[0], name=f"ft-{parent}-u6-mrpc-s1", parent=parent, kind="finetune")
    grid = [*specs, child]
    # its fine-tuning run is there, but trained with other settings: it would have to train here, from the parent
    shutil.copytree(store / first, store / child.name)
    saved = yaml.safe_load((store / child.name / "config.yaml").read_text())
    saved["seed"] = 9
    (store / child.name / "config.yaml").write_text(yaml.safe_dump(saved))
    lines.clear()
    assert sync_in(grid, c, store, lines.append, train=False) == []
    assert (c / "runs" / first / "checkpoints").is_dir() and "reported as unfinished" in lines[-1]
    lines.clear()
    assert sync_in(grid, c, store, lines.append) == [first]
    assert not (c / "runs" / first / "checkpoints").exists() and run_status(c / "runs" / first) == "completed"
    assert run_status(c / "runs" / other) is None and run_status(c / "runs" / parent) is None
    assert not (c / "runs" / "another-grids-run").exists()
    assert any("other settings" in line and other in line for line in lines), lines
    assert any("pre-training" in line and parent in line for line in lines), lines
    # a run trained here with other settings is not copied out
    shutil.copytree(store / other, c / "runs" / other)
    assert not sync_out(specs[1], c, tmp_path / "elsewhere", lines.append) and "other settings" in lines[-1]


def test_sync_keeps_fine_tuning_beside_the_pre_training_it_started_from(tmp_path):
    """A pre-training run and its fine-tuning runs go out to the shared folder together, when the last of them has
    finished (the children start from checkpoints that are not copied); a fine-tuning run is taken from there
    only beside the very parent it started from. A complete family from another machine is kept; an incomplete
    one is replaced by a complete one. A finished parent without its checkpoints (its small files copied in)
    skips its fine-tuning runs with a line naming what to move aside (issue 32's reviews)."""
    import dataclasses

    from normlab.experiments.grid import sync_in, sync_out

    specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
    store, a = tmp_path / "store", tmp_path / "machine-a"
    parent = specs[0]
    child = dataclasses.replace(parent, name=f"ft-{parent.name}-u2-wic-s1", parent=parent.name, parent_update=2,
                                kind="finetune")  # fmt: skip
    grid = [parent, child]
    run_grid([parent], a, jobs=1, threads=1, say=lambda line: None,
             on_end=lambda n, o: sync_out(parent, a, store, specs=grid))  # fmt: skip
    assert not (store / parent.name).exists()  # its fine-tuning run has not finished: nothing goes out yet
    shutil.copytree(a / "runs" / parent.name, a / "runs" / child.name)  # a finished fine-tuning run (same config)
    assert sync_out(child, a, store, specs=grid)  # the last of the family: both go out
    assert run_status(store / parent.name) == run_status(store / child.name) == "completed"
    # a machine with nothing takes the family
    assert sync_in(grid, tmp_path / "fresh", store, lambda line: None) == [parent.name, child.name]
    # a machine whose parent is its own (trained there again): the fine-tuning run in the store is not taken ...
    d, lines = tmp_path / "machine-d", []
    shutil.copytree(a / "runs" / parent.name, d / "runs" / parent.name)
    summary = json.loads((d / "runs" / parent.name / "summary.json").read_text())
    (d / "runs" / parent.name / "summary.json").write_text(json.dumps({**summary, "elapsed_s": 1.0}))
    assert sync_in(grid, d, store, lines.append) == [] and run_status(d / "runs" / child.name) is None
    assert any("not the one here" in line and child.name in line for line in lines), lines
    # ... and its complete family does not replace the complete one there
    shutil.copytree(a / "runs" / child.name, d / "runs" / child.name)
    lines.clear()
    assert not sync_out(child, d, store, lines.append, specs=grid) and "kept as they are" in lines[-1], lines
    assert (store / parent.name / "summary.json").read_bytes() != (d / "runs" / parent.name / "summary.json").read_bytes()
    # an incomplete family there (a parent copied out alone, by an earlier version): the complete one replaces it
    partial = tmp_path / "store-partial"
    shutil.copytree(store / parent.name, partial / parent.name)
    lines.clear()
    assert sync_out(child, d, partial, lines.append, specs=grid) and "replaced" in lines[0], lines
    assert (partial / parent.name / "summary.json").read_bytes() == (d / "runs" / parent.name / "summary.json").read_bytes()
    assert run_status(partial / child.name) == "completed"
    # the parent's small files in a grid folder, no checkpoint: its fine-tuning run is skipped, saying what to move
    e, lines = tmp_path / "machine-e", []
    shutil.copytree(store / parent.name, e / "runs" / parent.name)
    out = run_grid(grid, e, jobs=1, threads=1, say=lines.append)
    assert out[child.name].status == "skipped" and "aside" in out[child.name].error, out[child.name]
    assert any(line.startswith("grid: 1 finished pre-training run(s) lack the checkpoints") for line in lines), lines


def test_fine_tuning_runs_go_before_the_next_pre_training_run(tmp_path):
    """A fine-tuning run whose parent has finished starts before the pre-training runs still pending: a grid
    stopped between them keeps every parent whose fine-tuning is done (its checkpoints live on one machine)."""
    import dataclasses

    specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
    bad = specs[1].config.replace(data=specs[1].config.data.replace(corpus=str(tmp_path / "no-such-corpus")))
    done, later = specs[0], dataclasses.replace(specs[1], config=bad)  # later fails at once: only the order counts
    grid_dir = tmp_path / "grid"
    ckpt = grid_dir / "runs" / done.name / "checkpoints" / "update_00000002"
    ckpt.mkdir(parents=True)
    (grid_dir / "runs" / done.name / "summary.json").write_text(json.dumps({"status": "completed"}))
    RunDir(grid_dir / "runs" / done.name).write_config(done.config)
    child = dataclasses.replace(done, name=f"ft-{done.name}-u2-wic-s1", parent=done.name, parent_update=2,
                                kind="finetune", config=bad)  # fmt: skip
    lines = []
    run_grid([done, later, child], grid_dir, jobs=1, threads=1, say=lines.append)
    started = [line.split()[-1] for line in lines if " start " in line]
    assert started == [child.name, later.name], lines


def test_a_failing_run_is_recorded_and_the_grid_goes_on(tmp_path):
    specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
    bad = specs[0].config.replace(data=specs[0].config.data.replace(corpus=str(tmp_path / "no-such-corpus")))
    specs = [specs[0].__class__(**{**specs[0].__dict__, "config": bad}), specs[1]]
    outcomes = run_grid(specs, tmp_path / "grid", jobs=1, threads=1, say=lambda line: None)
    assert outcomes[specs[0].name].status == "failed" and "no-such-corpus" in outcomes[specs[0].name].error
    assert outcomes[specs[1].name].status == "completed"


def test_a_run_failing_under_torchrun_is_recorded_with_its_own_line(tmp_path):
    """Issue 36: the grid recorded the last 8 lines of the log, which under torchrun are its ChildFailedError
    report; now the rank's own line (the same on each rank that said it)."""
    specs = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))
    bad = specs[0].config.replace(data=specs[0].config.data.replace(corpus=str(tmp_path / "no-such-corpus")))
    specs = [specs[0].__class__(**{**specs[0].__dict__, "config": bad})]
    outcomes = run_grid(specs, tmp_path / "grid", jobs=1, threads=1, launcher="torchrun", nproc=2,
                        say=lambda line: None)  # fmt: skip
    outcome = outcomes[specs[0].name]
    assert outcome.status == "failed", outcome
    assert outcome.error.startswith("exit code 1: normlab train: error: ") and "no-such-corpus" in outcome.error
    assert "\n" not in outcome.error and "ChildFailedError" not in outcome.error and "=====" not in outcome.error


def test_the_wall_time_estimate():
    """budget.estimate: a probe of the grid's first translation run, times its updates, over the jobs; the
    matmul rates measured beside it; no estimate (and says so) when there is no translation run to probe."""
    from normlab.experiments.budget import estimate

    smoke = get_scale("smoke")
    ctx = Context(translation_updates_per_epoch=9, finetune_updates_per_epoch={"paraphrase": 4, "wic": 4})
    e = estimate(fig6_small_lr(smoke, ctx), ctx, jobs=2, threads=1)
    assert e.updates == 3 * smoke.translation.epochs * 9 and e.seconds_per_update > 0 and e.seconds > 0
    assert e.fp32_gflops > 0 and e.text().startswith("estimate: 54 updates x")
    assert e.per_core and "(matmul per core fp32" in e.text()  # CPU: one core's rates (budget.estimate)
    if not e.native_bf16:  # this machine: the warning names both measured rates
        assert "no native bf16" in e.warning and "GFLOP/s" in e.warning
    from normlab.experiments.figures import fig5_bert

    bert_only = estimate(fig5_bert(smoke, ctx), ctx, jobs=1, threads=1)
    assert bert_only.text().startswith("estimate: not available")


def test_the_probe_beside_competitors_as_the_grid_runs():
    """budget.probe_update_seconds with competitors (normlab sweep's estimate: the grid's other jobs train beside
    each run): a time per update comes back, and the competitor processes are gone after it."""
    import multiprocessing

    from normlab.experiments.budget import probe_update_seconds

    cfg = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))[0].config
    started = multiprocessing.get_context("spawn").Process.start
    children = []

    def spy(self):  # the competitors, to read their exit codes after the probe
        children.append(self)
        return started(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(multiprocessing.get_context("spawn").Process, "start", spy)
        t0 = time.perf_counter()
        t = probe_update_seconds(cfg, threads=1, updates=1, competitors=1)
        took = time.perf_counter() - t0
    # not the 180 s wait for a competitor that never trained: anything under it proves that, and a spawned
    # interpreter importing torch on a loaded 2-core machine can take tens of seconds (found in a flakiness audit)
    assert 0 < t < 60 and took < 150
    assert len(children) == 1 and children[0].exitcode == 0  # it trained, was told to stop, and ended cleanly
    assert not multiprocessing.active_children()


def test_make_context_measures_every_epoch_the_grid_depends_on(tmp_path):
    """reproduce.make_context at the smoke scale with Figure 5: the translation, pre-training and fine-tuning
    epochs, each from its own prepared data (the estimate counts validation passes per epoch of each). The
    expected counts are the trainer's own: the ``updates_per_epoch`` its summary records after one update of
    each run, which it computes from its epoch plan, not through budget.updates_per_epoch."""
    import dataclasses

    from normlab.experiments.figures import _translation, fig5_bert
    from normlab.experiments.reproduce import make_context
    from normlab.train.run import train

    smoke = get_scale("smoke")
    ctx = make_context(smoke, ("fig2", "fig5"))
    bert = fig5_bert(smoke, ctx)[0].config
    from normlab.config import OptimConfig, ScheduleConfig

    translation = _translation(smoke, ctx, placement="post", optim=OptimConfig(), schedule=ScheduleConfig())
    for name, cfg, want in (("mlm", bert, ctx.mlm_updates_per_epoch),
                            ("translation", translation, ctx.translation_updates_per_epoch)):  # fmt: skip
        one = dataclasses.replace(cfg, max_updates=1, device="cpu", precision="fp32", attention="sdpa",
                                  schedule=ScheduleConfig(), valid_bleu=0)  # fmt: skip
        summary = train(one, tmp_path / name, quiet=True)
        assert summary["updates_per_epoch"] == want > 0, name
    assert ctx.translation_updates_per_epoch != ctx.mlm_updates_per_epoch
    assert set(ctx.finetune_updates_per_epoch) == set(smoke.finetune.tasks)
    assert all(n > 0 for n in ctx.finetune_updates_per_epoch.values())


def test_the_estimate_counts_each_runs_validation_per_epoch_of_its_own_data():
    """budget.grid_work: a pre-training run validates at the ends of pre-training epochs and every eval_every,
    not at the ends of translation epochs; a length the context did not measure counts as longer than the run."""
    import dataclasses

    import torch

    from normlab.experiments.budget import evaluations, grid_work
    from normlab.experiments.figures import fig5_bert

    full = get_scale("full")
    full = full.replace(mlm=full.mlm.replace(updates=2000, evals=8))  # the arithmetic below: 8 points of 250
    ctx = Context(translation_updates_per_epoch=7, mlm_updates_per_epoch=10**6)
    [bert] = fig5_bert(full, ctx)[:1]
    c = bert.config
    n = c.max_updates
    assert n and c.eval_every and n // c.eval_every < n // 7  # a translation epoch would validate far more often
    assert (n, c.eval_every) == (2000, 250)
    # a pass: (valid examples x ~25 tokens) forward-only at a third of an update's work per token
    one_pass = (c.data.valid_subset or 2000) * 25 / 3 / c.data.max_tokens
    for mlm_epoch, passes in [(10**6, 8),  # every 250 updates, the last one at 2,000
                              (300, 13),  # and at the epochs' ends 300, 600, ..., 1800 (1,500 is both)
                              (0, 8)]:  # not measured: an epoch longer than the run
        updates, work = grid_work([bert], dataclasses.replace(ctx, mlm_updates_per_epoch=mlm_epoch), c)
        assert updates == n
        torch.testing.assert_close(work, n + passes * one_pass)


def test_the_estimate_counts_the_test_split():
    """budget.grid_work: a run with test_checkpoint decodes the test split once at its end (the long scale: 500
    validation sentences after each of its epochs and at its end, 2,000 test sentences); the beam does not change
    the count (measured: a batched beam of 5 costs about what greedy decoding does, budget.py)."""
    import dataclasses

    import torch

    from normlab.experiments.budget import _BLEU_UPDATES_PER_100, _TEST_SENTENCES, grid_work
    from normlab.experiments.figures import fig4_pre_vs_post

    long = get_scale("long")
    ctx = Context(translation_updates_per_epoch=660)
    spec = [s for s in fig4_pre_vs_post(long, ctx) if s.name.startswith("pre-adam")][0]
    c = spec.config
    n = c.max_updates
    evals = n // 660 + 1  # after each complete epoch, and at the end (inside the fifth)
    one_pass = 2000 * 25 / 3 / c.data.max_tokens  # all 2,000 validation pairs
    per_sentence = _BLEU_UPDATES_PER_100 / 100
    updates, work = grid_work([spec], ctx, c)
    assert updates == n
    test = _TEST_SENTENCES * per_sentence
    torch.testing.assert_close(work, n + evals * (one_pass + 500 * per_sentence) + test)
    greedy = dataclasses.replace(spec, config=c.replace(beam=1, test_checkpoint=""))
    torch.testing.assert_close(grid_work([greedy], ctx, c)[1], n + evals * (one_pass + 500 * per_sentence))


@pytest.mark.parametrize(
    ("updates", "per_epoch", "eval_every", "expected"),
    [
        (150, 4000, 0, 1),  # a run far shorter than an epoch validates once, at its end (the 150-update sweep)
        (150, 1, 0, 150),  # an epoch per update: a pass after each
        (30, 10, 0, 3),  # three complete epochs, no pass left over at the end
        (35, 10, 0, 4),  # ... and a last pass where max_updates stops inside the fourth
        (500, 4000, 100, 5),  # every 100 updates; the 5th at update 500 is also the end (counted once)
        (40, 10, 20, 4),  # eval_every on an epoch's end is that epoch's pass, not a second one
        (40, 10, 15, 5),  # 4 epoch ends and update 15 (update 30 is an epoch's end)
        (45, 10, 15, 6),  # ... and update 45, inside the fifth epoch, which is also the end of the run
    ],
)
def test_the_estimate_counts_the_validation_passes_the_trainer_makes(updates, per_epoch, eval_every, expected):
    from normlab.experiments.budget import evaluations

    assert evaluations(updates, per_epoch, eval_every) == expected


def test_an_analysis_with_other_settings_is_run_again(tmp_path):
    """An analysis.json from other settings (fewer seeds, from an older normlab) is not judged by today's rules
    as if it were this scale's: reproduce runs it again (and --report-only, which runs nothing, says so)."""
    from normlab.analysis.run import analysis_scale
    from normlab.experiments.reproduce import _Analysis

    target = tmp_path / "analysis"
    target.mkdir()
    config = json.loads(json.dumps(analysis_scale("smoke").to_dict()))
    (target / "analysis.json").write_text(json.dumps({"config": config}))
    assert _Analysis(get_scale("smoke"), tmp_path, threads=1, device="cpu", start=False).stale == ""
    (target / "analysis.json").write_text(json.dumps({"config": dict(config, seeds=1)}))
    assert _Analysis(get_scale("smoke"), tmp_path, threads=1, device="cpu", start=False).stale == "seeds: 1 -> 2"


def test_seeds_reach_reproduce_and_a_folder_with_more_seeds_says_so(tmp_path, monkeypatch):
    """`--seeds N` from the command line to reproduce(); a folder holding finished runs of seeds beyond the job's
    (trained with --seeds 5, read by a plain reproduce) names the highest one."""
    from normlab.cli import build_parser
    from normlab.experiments import reproduce as rep

    seen = {}
    monkeypatch.setattr(rep, "reproduce", lambda *a, **kw: seen.update(kw))
    args = build_parser().parse_args(["reproduce", "--scale", "quick", "--seeds", "5", "--report-only"])
    assert rep.run(args) == 0 and seen["seeds"] == 5 and seen["train"] is False
    from normlab.experiments.figures import all_runs

    specs = all_runs(get_scale("quick"), Context(translation_updates_per_epoch=1357), ("fig2", "fig4"))
    runs = tmp_path / "runs"
    assert rep._more_seeds(specs, runs) == 0
    for name, status in ((specs[0].group + "-s5", "completed"), (specs[0].group + "-s7", "running"),
                         ("another-group-s9", "completed")):  # fmt: skip
        (runs / name).mkdir(parents=True)
        (runs / name / "summary.json").write_text(json.dumps({"status": status}))
    assert rep._more_seeds(specs, runs) == 5  # not the unfinished seed 7, nor another grid's run


def test_the_analysis_beside_the_grid_runs_at_the_lowest_priority(tmp_path, monkeypatch):
    """Figure 3's analysis gives way to the training runs beside it (nice 19), not when it runs alone."""
    import functools

    from normlab.experiments import reproduce as rep

    started = []

    class Proc:
        def __init__(self, cmd, **kw):
            started.append(kw["preexec_fn"])

    monkeypatch.setattr(rep.subprocess, "Popen", Proc)
    rep._Analysis(get_scale("smoke"), tmp_path / "beside", threads=1, device="cpu")
    rep._Analysis(get_scale("smoke"), tmp_path / "alone", threads=2, device="cpu", alone=True)
    beside, alone = started
    assert isinstance(beside, functools.partial) and beside.func is rep._lowest_priority
    assert not isinstance(alone, functools.partial)
    monkeypatch.undo()
    out = subprocess.run([sys.executable, "-c", "import os; print(os.nice(0))"], capture_output=True, text=True,
                         preexec_fn=functools.partial(rep._lowest_priority, None), check=True)  # fmt: skip
    assert out.stdout.strip() == "19"


def test_time_phrase_says_whose_wall_time_it_is():
    """A job run again after every run finished took seconds: the header must not call that the job's wall time."""
    from normlab.report.html import time_phrase

    done = {"completed": 0, "diverged": 0, "failed": 0, "skipped": 0, "cached": 9}
    again = time_phrase({"wall_time_s": 2.0, "train_time_s": 42783.0, "outcomes": done})
    assert again.startswith("every training run had finished before this invocation, which took 0.0 min")
    assert "713.0 min of training" in again
    ran = time_phrase({"wall_time_s": 3220.0, "train_time_s": 42783.0, "outcomes": dict(done, completed=2, cached=7)})
    assert ran.startswith("wall time 53.7 min")
    assert time_phrase({"report_only": True, "train_time_s": 60.0}).startswith("report written with --report-only")


def test_the_committed_quick_report_is_what_the_rules_decide(tmp_path):
    """docs/results/reproduce-quick: deciding its claims again from its results.json (``reproduce --rerender``)
    under the rules of report/claims.py gives the committed REPORT.md and results.json byte for byte, so every
    number of its method text (the gates, the rules, the seeds row) is the code's; the README's claims table says
    the same verdicts and quotes the same intervals."""
    from normlab.experiments.reproduce import rerender

    committed = Path(__file__).parents[1] / "docs/results/reproduce-quick"
    copy = tmp_path / "report"
    shutil.copytree(committed, copy)
    results = rerender(copy)
    for name in ("REPORT.md", "results.json"):
        assert (copy / name).read_text() == (committed / name).read_text(), f"{name}: run normlab reproduce --rerender"
    verdicts = {c["id"]: c["verdict"] for c in results["claims"]}
    assert "2 standard errors of the seed means" not in (committed / "REPORT.md").read_text()
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    table = readme.split("What it found (3 seeds per run")[1].split("\n\n")[1]  # the quick job's table
    rows = dict(re.findall(r"^\| (C\d+)[^|]*\| ([a-z ]+?)(?: \(was: [a-z ]+\))? \|", table, flags=re.M))
    assert rows.get("C7") == verdicts["C7"] and rows.get("C9") == verdicts["C9"], (rows, verdicts)
    assert all(verdicts[f"C{i}"] == "holds" for i in range(1, 7))  # the README's "C1-C6 ... all hold"
    assert all(verdicts[c] == "not run at this scale" for c in ("C8", "C10", "C11", "C12", "C13"))
    effects = {c["id"]: c["effect"] for c in results["claims"]}
    assert "+4.7% [+0.9%, +8.5%]" in effects["C7"] and "+20.1% [+16.4%, +23.8%]" in effects["C9"], effects
    for quoted in ("+4.7% [+0.9%, +8.5%]", "+20.1% [+16.4%, +23.8%]", "6.146 [5.999, 6.293]", "6.435 [6.154, 6.716]"):
        assert quoted in readme, quoted
    assert "6.146 [5.999, 6.293]" in results["claims"][6]["gate"]


def test_the_committed_full_report_is_what_the_rules_decide_from_the_committed_runs(tmp_path):
    """docs/results/reproduce-full (issue 32): its REPORT.md and results.json are what report/claims.py decides
    from its results.json (``--rerender``, byte for byte); every translation run the report read is a run committed
    under runs/, and the report's validation curve of each (every claim reads it: final loss, mean along the run) is
    that run's validation records there, so no verdict rests on a run that is not committed; every training claim is decided or `inconclusive` with its
    numbers, C11-C12 included (Figure 5, asked for with --figures: 9 BERT runs and the 96 fine-tuning runs of their
    Post-LN and Pre-LN checkpoints; a run the report names as unfinished is not committed and counts for no claim);
    the README's table quotes the report's verdicts."""
    from normlab.experiments.reproduce import rerender

    committed = Path(__file__).parents[1] / "docs/results/reproduce-full"
    copy = tmp_path / "report"
    shutil.copytree(committed, copy, ignore=shutil.ignore_patterns("runs", "bert-calibration"))
    (copy / "REPORT.md").unlink()  # written anew, or the comparison below fails
    results = rerender(copy)
    for name in ("REPORT.md", "results.json"):
        assert (copy / name).read_text() == (committed / name).read_text(), f"{name}: run normlab reproduce --rerender"
    kinds = {k: [n for n, r in results["runs"].items() if r["kind"] == k] for k in ("translation", "mlm", "finetune")}
    assert {k: len(v) for k, v in kinds.items()} == {"translation": 30, "mlm": 9, "finetune": 96}
    assert sum(map(len, kinds.values())) == len(results["runs"])
    unfinished = set(results["meta"]["unfinished"])
    assert unfinished <= set(kinds["mlm"]) - {results["mlm_arms"]["post"] + f"-s{i}" for i in (1, 2, 3)}, unfinished
    assert all((r["status"] == "completed") == (n not in unfinished) for n, r in results["runs"].items())
    last = {"translation": 2000, "mlm": 20000}
    for name, run in results["runs"].items():
        if name in unfinished:  # not committed: the README names it
            assert not (committed / "runs" / name).exists() and name in (committed / "README.md").read_text(), name
            continue
        records = [json.loads(line) for line in (committed / "runs" / name / "metrics.jsonl").read_text().splitlines()]
        valid = [(r["update"], r["nll"], r.get("accuracy")) for r in records if r.get("type") == "valid"]
        assert [(e["update"], e["nll"], e.get("accuracy")) for e in run["evals"]] == valid, name
        assert valid[-1][0] == last.get(run["kind"], run["updates"]), name
    verdicts = {c["id"]: c["verdict"] for c in results["claims"]}
    assert list(verdicts.values()).count("not run at this scale") == 0, verdicts
    readme = (committed / "README.md").read_text()
    rows = dict(re.findall(r"^\| (C\d+)[^|]*\| \**([a-z ]+?)\** \|", readme, flags=re.M))
    assert rows == verdicts, (rows, verdicts)
    # the project README's claims table: a column for quick, one for full
    table = (Path(__file__).parents[1] / "README.md").read_text().split("What `full` found")[1].split("\n\n")[1]
    rows = {c: (q, f) for c, q, f in re.findall(r"^\| (C\d+)[^|]*\| ([a-z ]+) \| ([a-z ]+?) \|", table, flags=re.M)}
    quick = json.loads((committed.parent / "reproduce-quick/results.json").read_text())
    quick = {c["id"]: c["verdict"] for c in quick["claims"]}
    assert all(verdicts[f"C{i}"] == quick[f"C{i}"] == "holds" for i in range(1, 7))  # the row "C1-C6 ... all hold"
    claims = ("C7", "C8", "C9", "C10", "C11", "C12", "C13")
    assert rows == {"C1": ("all hold", "all hold")} | {c: (quick[c], verdicts[c]) for c in claims}, rows


def _smoke_quick_and_full():
    """The smoke scale's equivalent of quick ⊂ full (issue 32): smoke's tiny model on the quick scale's short schedule
    (warm-up and decay in updates) with its three runs, one seed; `full` built from it by the same function as the
    real one (scales.with_full_arms)."""
    from normlab.experiments.scales import QUICK_RUNS, with_full_arms

    smoke = get_scale("smoke")
    t = smoke.translation.replace(schedule="short", epochs=1, updates=6, eval_every=3, warmup=4, decay_from=4,
                                  runs=QUICK_RUNS)  # fmt: skip
    quick = smoke.replace(name="quick", translation=t, seeds=1, figures=("fig2", "fig4"))
    return quick, with_full_arms(quick)


SMALL_FILES = ("config.yaml", "metrics.jsonl", "summary.json")  # what a user commits of a finished run


@pytest.mark.slow
def test_full_on_a_folder_of_finished_quick_runs_trains_only_the_new_arms(tmp_path, data_cache, monkeypatch):
    """Issue 32's check, on the smoke scale's equivalent: the quick runs' small files alone (no checkpoints, as
    committed from another machine) count as finished for --report-only and for `reproduce --scale full`, which
    trains only the arms quick lacks and leaves the quick runs untouched; each run's summary names its CPU and torch,
    and the report says where the runs trained. With --sync every finished run lands in a shared folder, from
    which a third machine's --report-only writes the same verdicts."""
    import torch

    from normlab.device import cpu_name
    from normlab.experiments import scales
    from normlab.experiments.reproduce import reproduce

    quick, full = _smoke_quick_and_full()
    monkeypatch.setitem(scales.SCALES, "quick", quick)
    monkeypatch.setitem(scales.SCALES, "full", full)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    first = tmp_path / "machine-a"
    ran = reproduce("quick", first, jobs=2, threads=1, probe=False)
    names = sorted(ran["runs"])
    assert len(names) == 3 and ran["meta"]["outcomes"]["completed"] == 3
    summary = json.loads((first / "runs" / names[0] / "summary.json").read_text())
    assert summary["cpu"] == cpu_name() and summary["torch"] == torch.__version__
    # --seeds 2 on the same folder: seed 1 is kept (the same configs), seed 2 is what is missing
    more = reproduce("quick", first, seeds=2, probe=False, train=False)
    assert set(more["meta"]["unfinished"]) == {n.replace("-s1", "-s2") for n in names} and more["meta"]["seeds"] == 2
    assert all(more["runs"][n]["status"] == "completed" for n in names)
    # another machine's folder: the quick runs' small files, nothing else
    out = tmp_path / "machine-b"
    for name in names:
        (out / "runs" / name).mkdir(parents=True)
        for f in SMALL_FILES:
            shutil.copyfile(first / "runs" / name / f, out / "runs" / name / f)
    before = {n: (out / "runs" / n / "metrics.jsonl").read_bytes() for n in names}
    figures = ("fig2", "fig4", "fig6")
    partial = reproduce("full", out, figures=figures, probe=False, train=False)
    assert set(partial["meta"]["unfinished"]) == set(partial["runs"]) - set(names)
    assert len(partial["runs"]) == 10 and all(partial["runs"][n]["status"] == "completed" for n in names)
    store = tmp_path / "committed"  # --sync: what a user commits, filled as the runs end
    done = reproduce("full", out, figures=figures, jobs=2, threads=1, probe=False, sync=store)
    outcomes = done["meta"]["outcomes"]
    assert (outcomes["cached"], outcomes["completed"], outcomes["failed"]) == (3, 7, 0), outcomes
    assert not done["meta"]["unfinished"]
    for n in names:  # not trained again: the same metrics, no checkpoint written
        assert (out / "runs" / n / "metrics.jsonl").read_bytes() == before[n]
        assert sorted(p.name for p in (out / "runs" / n).iterdir()) == sorted(SMALL_FILES)
    md = (out / "report" / "REPORT.md").read_text()
    assert "## Where the runs trained" in md and f"- {cpu_name()}, " in md and "10 run(s)" in md
    assert all(r["machine"].startswith(cpu_name()) for r in done["runs"].values())
    # a third machine reports from the shared folder alone: every run there, none trained
    assert sorted(p.name for p in store.iterdir()) == sorted(done["runs"])
    third = reproduce("full", tmp_path / "machine-c", figures=figures, probe=False, train=False, sync=store)
    assert not third["meta"]["unfinished"] and [c["verdict"] for c in third["claims"]] == [
        c["verdict"] for c in done["claims"]]


def test_the_report_says_where_each_run_trained():
    """A grid filled from several machines: one line per machine with its runs, from each summary.json; a run
    trained before normlab recorded its CPU says so; no section when no run records one (older reports)."""
    from normlab.experiments.results import machine_of
    from normlab.report.html import machine_lines

    amx = {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "precision": "bf16", "torch": "2.11.0+cpu"}
    zen = {"cpu": "AMD EPYC 9R14", "precision": "bf16", "torch": "2.13.0+cpu"}
    assert machine_of(amx) == "Intel(R) Xeon(R) Platinum 8480+, bf16, torch 2.11.0+cpu"
    assert machine_of({**zen, "cpus": ["AMD EPYC 9R14", "Intel(R) Xeon(R) Platinum 8480+"]}).startswith(
        "AMD EPYC 9R14 then Intel(R) Xeon(R) Platinum 8480+, bf16")
    assert machine_of({"status": "completed", "device": "cpu"}) == ""
    runs = {"a-s1": {"status": "completed", "machine": machine_of(amx)},
            "a-s2": {"status": "completed", "machine": machine_of(zen)},
            "b-s1": {"status": "cached", "machine": machine_of(amx)},
            "b-s2": {"status": "completed"}, "c-s1": {"status": "absent"}}  # fmt: skip
    assert machine_lines({"runs": runs}) == [
        "Intel(R) Xeon(R) Platinum 8480+, bf16, torch 2.11.0+cpu: 2 run(s): a-s1, b-s1",
        "AMD EPYC 9R14, bf16, torch 2.13.0+cpu: 1 run(s): a-s2",
        "not recorded (trained before normlab recorded the CPU): 1 run(s): b-s2"]
    assert machine_lines({"runs": {"b-s2": {"status": "completed"}}}) == []
    # a committed run's cpu.txt (lscpu) completes the bare name an older normlab recorded, for the CPU it ran on last
    lscpu = "Architecture: x86_64\nModel name:   AMD EPYC\nCPU family:   25\nModel:        17\nFlags: avx2 avx512_bf16\n"
    bare = {"cpu": "AMD EPYC", "precision": "bf16", "torch": "2.13.0+cpu"}
    assert machine_of(bare, lscpu) == "AMD EPYC (family 25, model 17; AVX-512 BF16), bf16, torch 2.13.0+cpu"
    assert machine_of({**bare, "cpus": ["Intel X", "AMD EPYC"]}, lscpu).startswith(
        "Intel X then AMD EPYC (family 25, model 17; AVX-512 BF16)")
    assert machine_of({**bare, "cpu": "Intel X"}, lscpu).startswith("Intel X, ")  # another CPU's file: not used


def test_the_cpu_name_tells_cpus_with_one_model_name_apart():
    """Cloud VMs name Zen 4, Zen 5 and AVX2-only EPYCs alike ("AMD EPYC"); the summary's CPU adds the family, the
    model and the widest matmul instruction set, which set the speed a report's machine line stands for."""
    from normlab.device import describe_cpuinfo

    def block(name: str, family: str, model: str, flags: str) -> str:
        return (f"processor\t: 0\nvendor_id\t: x\ncpu family\t: {family}\nmodel\t\t: {model}\nmodel name\t: {name}\n"
                f"flags\t\t: fpu sse2 {flags}\n\nprocessor\t: 1\nmodel name\t: other\n")

    assert describe_cpuinfo(block("AMD EPYC", "26", "2", "avx2 avx512f avx512_bf16")) == (
        "AMD EPYC (family 26, model 2; AVX-512 BF16)")
    assert describe_cpuinfo(block("AMD EPYC", "25", "17", "avx2 avx512f avx512_bf16")) == (
        "AMD EPYC (family 25, model 17; AVX-512 BF16)")
    assert describe_cpuinfo(block("AMD EPYC", "23", "49", "avx2")) == "AMD EPYC (family 23, model 49; AVX2)"
    assert describe_cpuinfo(block("Intel(R) Xeon(R) Platinum 8480+", "6", "143",
                                  "avx2 avx512f avx512_bf16 amx_bf16 amx_tile")).endswith("; AMX)")
    assert describe_cpuinfo(block("Some CPU", "6", "1", "sse4_2")) == "Some CPU (family 6, model 1)"
    assert describe_cpuinfo("processor\t: 0\nflags\t\t: avx2\n") == ""  # no model name: cpu_name falls back
    # what --sync writes as cpu.txt describes this CPU the way cpu_name does (lscpu's fields, or /proc/cpuinfo's)
    from normlab.device import cpu_name, machine_text

    text = machine_text()
    assert describe_cpuinfo(text) in ("", cpu_name()), text[:500]


@pytest.mark.slow
def test_long_on_the_smoke_model_runs_one_at_a_time_and_reports_test_bleu(tmp_path, data_cache, monkeypatch):
    """Issue 37's `long` scale end to end on smoke's tiny model: by default one run at a time with every core
    (scale.jobs), whole epochs with BLEU after each, one lr curve for the three arms ending at 0 on the last update,
    and each run's test split scored at its end, in results.json and in the report's runs table."""
    from normlab.experiments import scales
    from normlab.experiments.reproduce import reproduce

    smoke = get_scale("smoke")
    t = smoke.translation.replace(schedule="short", epochs=2, updates=0, eval_every=0, warmup=4, decay_from=4,
                                  decay="linear", test_checkpoint="last", runs=scales.QUICK_RUNS)  # fmt: skip
    long = get_scale("long").replace(translation=t, mlm=smoke.mlm, finetune=smoke.finetune, seeds=1)
    monkeypatch.setitem(scales.SCALES, "long", long)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "long"
    import torch

    from normlab.experiments.budget import native_bf16

    native = native_bf16(torch.device("cpu"))  # without it the scale refuses bf16 (test below): fp32, asked
    results = reproduce("long", out, probe=False, precision="auto" if native else "fp32")
    # every run's config names its precision (bf16 by default), so that a seed from another machine cannot join in
    # another one
    assert {r["config"]["precision"] for r in results["runs"].values()} == {"bf16" if native else "fp32"}
    cores = os.cpu_count() or 1
    assert results["meta"]["threads"] == f"1 job(s) x {cores} thread(s)"
    assert sorted(results["runs"]) == sorted(f"{g}-s1" for g in scales.QUICK_RUNS)
    for name, run in results["runs"].items():
        assert run["status"] == "completed", name
        assert [e["epoch"] for e in run["evals"]] == [1, 2] and all("bleu" in e for e in run["evals"])
        assert run["test"]["sentences"] > 0 and run["test"]["bleu"] >= 0
        rows = [json.loads(x) for x in (out / "runs" / name / "metrics.jsonl").read_text().splitlines()]
        lrs = {r["update"]: r["lr"] for r in rows if r.get("type") == "train"}
        lr_max = run["config"]["optim"]["lr"]
        assert lrs[4] == pytest.approx(lr_max) and lrs[max(lrs)] == pytest.approx(0.0, abs=1e-12)
    md = (out / "report" / "REPORT.md").read_text()
    assert "| BLEU | test BLEU |" in md


def test_figure5_panels_show_the_majority_class_and_zoom_on_the_accuracies(tmp_path, monkeypatch):
    """Figure 5(b, c) (report/plots.py): C12's gate compares Post-LN's fine-tuned accuracy with the majority class,
    so each task's panel draws that line, and its axis spans the bars and the line (a small model's accuracies lie
    within a few points of it, which a 0-100 axis flattens); panel (a) draws the masked LM's learning gate."""
    import math

    import matplotlib.pyplot as plt
    import torch

    from normlab.report import plots

    figures = []
    monkeypatch.setattr(plots.plt, "close", lambda fig: figures.append(fig))
    curve = {"curve": [{"update": u, "mean": m, "sd": 0.05} for u, m in ((1000, 6.6), (2000, 5.0))], "seeds": 2,
             "diverged": 0}  # fmt: skip
    bert = {g: {"label": g, "figures": ["fig5"], "kind": "mlm", "nll": curve} for g in ("bert-post-6e-4", "bert-pre-1.8e-3")}
    cell = lambda mean, ci: {"mean": mean, "ci95": ci, "n": 4}  # noqa: E731
    finetune = {"bert-post-6e-4": {"wic": {"1000": cell(0.58, 0.02), "2000": cell(0.60, 0.01)}},
                "bert-pre-1.8e-3": {"wic": {"1000": cell(0.55, 0.03), "2000": cell(0.57, None)}}}  # fmt: skip
    plots._fig5(bert, finetune, tmp_path / "fig5.png", 6.491, "bert-post-1.8e-3", {"wic": 0.527})
    assert (tmp_path / "fig5.png").stat().st_size > 0
    (fig,) = figures
    mlm, wic = fig.axes
    lines = {line.get_label(): line.get_ydata()[0] for ax in (mlm, wic) for line in ax.get_lines()}
    torch.testing.assert_close(lines["majority class (52.7%)"], 52.7)
    torch.testing.assert_close(lines["learned: 0.5 nats below it"], (6.491 - 0.5) / math.log(2))
    low, high = wic.get_ylim()
    torch.testing.assert_close((low, high), (52.0 - 2, 61.0 + 2))  # the lowest bar's end (55 - 3), the highest's
    plots._fig5(bert, {p: {"wic": {"1000": cell(0.70, 0.01)}} for p in finetune}, tmp_path / "b.png", 6.491,
                "bert-post-1.8e-3", {"wic": 0.527})
    torch.testing.assert_close(figures[-1].axes[1].get_ylim(), (52.7 - 2, 71.0 + 2))  # the majority line below all
    plt.close(fig)


def test_a_run_stopped_while_its_test_split_is_scored_is_not_finished(tmp_path):
    """The trainer writes `completed` before the test split is decoded (`test_checkpoint`, the long scale's runs):
    a run stopped in between had counted as finished, was copied to the sync folder without its test BLEU and was
    never scored (its checkpoint stays where it trained). It reads `scoring` now: not copied out, and the grid
    resumes it, which scores the test split without training (review of issue 37's scale)."""
    import dataclasses

    from normlab.experiments.grid import FINISHED, sync_out

    spec = fig6_small_lr(get_scale("smoke"), Context(translation_updates_per_epoch=9))[0]
    spec = dataclasses.replace(spec, config=spec.config.replace(test_checkpoint="last"))
    out, store, lines = tmp_path / "grid", tmp_path / "store", []
    assert run_grid([spec], out, jobs=1, threads=1, say=lambda line: None)[spec.name].status == "completed"
    rd = RunDir(out / "runs" / spec.name)
    summary = rd.summary()
    assert "bleu" in summary["test"] and run_status(rd.path) == "completed"
    assert summary["test"]["checkpoint_update"] == summary["update"]  # the scored weights' own update (last)
    metrics = (rd.path / "metrics.jsonl").read_bytes()
    rd.write_summary({k: v for k, v in summary.items() if k != "test"})  # stopped while decoding the test split
    assert run_status(rd.path) == "scoring" and "scoring" not in FINISHED
    assert not sync_out(spec, out, store, lines.append) and not (store / spec.name).exists()
    again = run_grid([spec], out, jobs=1, threads=1, say=lambda line: None)[spec.name]
    assert again.status == "completed" and rd.summary()["test"]["bleu"] == summary["test"]["bleu"]
    assert (rd.path / "metrics.jsonl").read_bytes() == metrics  # scored, not trained again
    assert sync_out(spec, out, store, lines.append) and run_status(store / spec.name) == "completed"


def test_the_long_scale_is_bf16_and_refuses_a_cpu_without_it(monkeypatch):
    """Issue 37's scale (review): its runs' precision is bf16 in every config (``auto`` resolved per machine would
    let an fp32 seed join a bf16 contrast from the sync folder), and training it on a CPU without native bf16 is
    refused in one line (~6 h a run in fp32, past the 2-hour pieces) unless fp32 is asked for; --report-only and a
    GPU are not refused."""
    from normlab.config import ConfigError
    from normlab.experiments import reproduce as rp

    monkeypatch.setattr(rp, "native_bf16", lambda device: False)
    with pytest.raises(ConfigError, match="no native bf16"):
        rp._long_precision("auto", train=True, cuda=False)
    assert rp._long_precision("fp32", train=True, cuda=False) == "fp32"
    assert rp._long_precision("auto", train=False, cuda=False) == "bf16"
    assert rp._long_precision("auto", train=True, cuda=True) == "bf16"
    monkeypatch.setattr(rp, "native_bf16", lambda device: True)
    assert rp._long_precision("auto", train=True, cuda=False) == "bf16"


def test_the_probe_times_a_language_models_update():
    """budget._updater builds the run's own model: a decoder-only LM on rows of its block size (an LM sweep's
    estimate said "not available" before); measured against the LM sweep's runs on a Zen 5 core, the probe gave
    0.058 / 0.089 s at d = 64 / 128 against 0.056-0.062 / 0.089-0.092 s of the runs' own elapsed time per update."""
    from normlab.experiments.budget import PROBED, _updater
    from normlab.experiments.figures import Context
    from normlab.experiments.sweep import sweep_runs, sweep_scale

    assert PROBED == ("translation", "lm")
    cfg = sweep_scale("smoke").replace(task="lm")
    spec = sweep_runs(cfg, Context(translation_updates_per_epoch=1))[0]
    assert spec.kind == "lm"
    step = _updater(spec.config.replace(model=spec.config.model.replace(vocab_size=300)), sentence_len=24)
    step()  # one update of the LM on its own batch shape runs
