"""Collect a grid's run directories into the ``results.json`` of the report (the pure functions on its records,
``seed_curves``, ``group_runs``, ``mean_ci95``, live in normlab/results.py, which the report reads too)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from normlab.device import describe_cpuinfo, same_cpu
from normlab.experiments.figures import RunSpec
from normlab.experiments.grid import RunOutcome
from normlab.results import group_runs, mean_ci95, seed_curves, split_seed
from normlab.rundir import RunDir

__all__ = ["machine_of", "run_machine", "run_record", "collect", "mean_ci95", "seed_curves", "group_runs"]

_TRAIN_POINTS = 200  # training-loss points kept per run (evenly spaced) for the plots


def _finite(x: Any) -> Any:
    return x if not isinstance(x, float) or math.isfinite(x) else None


def machine_of(summary: dict[str, Any], lscpu: str = "") -> str:
    """The machine a run trained on, in words, from its summary.json (the trainer records the CPU's model name, the
    GPU's, the precision and torch's version): e.g. ``Intel(R) Xeon(R) Platinum 8480+, bf16, torch 2.11.0+cpu``;
    "" when the summary names no CPU (a run trained before it was recorded). ``lscpu``: the run's ``cpu.txt``
    (committed beside its small files), which completes the bare model name an older normlab recorded (``AMD
    EPYC``: Zen 4 and Zen 5 alike) with its family, model and instruction set, for the CPU it trained on last."""
    cpus = list(summary.get("cpus") or ([summary["cpu"]] if summary.get("cpu") else []))
    if not cpus:
        return ""
    if lscpu and (full := describe_cpuinfo(lscpu)) and full != cpus[-1] and same_cpu(cpus[-1], full):
        cpus[-1] = full
    parts = [" then ".join(cpus)] + [summary[k] for k in ("gpu", "precision") if summary.get(k)]
    return ", ".join(parts) + (f", torch {summary['torch']}" if summary.get("torch") else "")


def run_machine(run_dir: Path, summary: dict[str, Any] | None = None) -> str:
    """:func:`machine_of` a run directory: its summary (``summary`` when already read) completed by its
    ``cpu.txt`` where it has one, so that one machine is named alike before and after normlab recorded the CPU's
    family (the reports count runs per machine, the sweep its edge brackets whose two runs trained apart)."""
    rd = RunDir(run_dir)
    lscpu = rd.path / RunDir.MACHINE
    return machine_of(rd.summary() if summary is None else summary,
                      lscpu.read_text(encoding="utf-8", errors="replace") if lscpu.is_file() else "")


def run_record(spec: RunSpec, run_dir: Path, outcome: RunOutcome | None) -> dict[str, Any]:
    """One run's entry: its settings, status, per-evaluation validation metrics and a thinned training curve."""
    rd = RunDir(run_dir)
    records = rd.metrics()  # a line cut by a kill is skipped
    summary = rd.summary()
    evals = [{k: _finite(v) for k, v in r.items() if k != "type"} for r in records if r.get("type") == "valid"]
    train = [r for r in records if r.get("type") == "train"]
    stride = max(1, math.ceil(len(train) / _TRAIN_POINTS))
    curve = [[r["update"], _finite(r["loss"])] for r in train[::stride]]
    if train and curve[-1][0] != train[-1]["update"]:
        curve.append([train[-1]["update"], _finite(train[-1]["loss"])])
    status = summary.get("status", "absent")
    if outcome is not None and outcome.status in ("failed", "skipped"):
        status = outcome.status
    rec: dict[str, Any] = {
        "name": spec.name,
        "group": spec.group or spec.name,
        "seed": spec.config.seed,
        "label": spec.label,
        "figures": list(spec.figures),
        "kind": spec.kind,
        "status": status,
        "seconds": summary.get("elapsed_s"),
        "updates": summary.get("update"),
        "evals": evals,
        "train": curve,
        "tokens_per_s": (sum(r.get("tokens_per_s", 0) for r in train) / len(train)) if train else None,
        "error": outcome.error if outcome is not None else "",
        "config": spec.config.to_dict(),
    }
    if test := summary.get("test"):  # test_checkpoint (the long scale): the test split scored once it completed
        rec["test"] = {k: test.get(k) for k in ("checkpoint", "sentences", "bleu", "bleu_tokenized", "nll", "error")
                       if k in test}
    if machine := run_machine(run_dir, summary):  # absent for a run trained before normlab recorded its CPU
        rec["machine"] = machine
    if spec.kind == "finetune":
        rec.update(parent=spec.parent, parent_update=spec.parent_update, task=spec.finetune_task)
    if status == "diverged":
        rec["diverged_at_update"] = summary.get("diverged_at_update")
    return rec


def _finetune_table(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """finetune[parent][task][update] = mean/CI of the final validation accuracy over seeds, plus the mean
    accuracy after each fine-tuning epoch (the curve); ``parent`` is the pre-training run's group (the paper's
    run, e.g. bert-pre-3e-4) and ``parent_seeds`` the mean over fine-tuning seeds per pre-training seed (the unit
    of replication of report/claims.py's C12: the points of one pre-training run are not independent)."""
    table: dict[str, Any] = {}
    for rec in runs.values():
        if rec["kind"] != "finetune" or rec["status"] not in ("completed", "cached"):
            continue
        accs = [e["accuracy"] for e in rec["evals"] if e.get("accuracy") is not None]
        if not accs:
            continue
        parent, parent_seed = split_seed(rec["parent"])
        cell = table.setdefault(parent, {}).setdefault(rec["task"], {}).setdefault(
            str(rec["parent_update"]), {"final": [], "per_epoch": [], "by_parent": {}})
        cell["final"].append(accs[-1])
        cell["per_epoch"].append(accs)
        cell["by_parent"].setdefault(str(parent_seed or 1), []).append(accs[-1])
    for parent in table.values():
        for task in parent.values():
            for update, cell in task.items():
                stats = mean_ci95(cell["final"])
                epochs = min(len(c) for c in cell["per_epoch"])
                curve = [sum(c[i] for c in cell["per_epoch"]) / len(cell["per_epoch"]) for i in range(epochs)]
                by_parent = {k: sum(v) / len(v) for k, v in sorted(cell["by_parent"].items(), key=lambda kv: int(kv[0]))}
                task[update] = {**stats, "seeds": cell["final"], "curve": curve, "parent_seeds": by_parent}
    return table


def _groups(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """groups[GROUP] = the seeds of one run of the paper: members, label, figures, and the seed-mean curves of
    the validation loss and (where measured) BLEU."""
    out = {}
    for group, recs in group_runs(runs).items():
        out[group] = {"runs": [r["name"] for r in recs], "label": recs[0]["label"], "figures": recs[0]["figures"],
                      "kind": recs[0]["kind"], "nll": seed_curves(recs, "nll"), "bleu": seed_curves(recs, "bleu")}
    return out


def collect(specs: list[RunSpec], out: Path, outcomes: dict[str, RunOutcome]) -> dict[str, Any]:
    """results.json's runs (a group's seeds side by side, in the order the groups first appear: the grid runs
    them seed by seed, the report's tables read better by group), their groups and the fine-tuning table."""
    first = {}
    for i, s in enumerate(specs):
        first.setdefault(s.group or s.name, i)
    ordered = sorted(specs, key=lambda s: (first[s.group or s.name], s.config.seed))
    runs = {s.name: run_record(s, out / "runs" / s.name, outcomes.get(s.name)) for s in ordered}
    return {"runs": runs, "groups": _groups(runs), "finetune": _finetune_table(runs)}
