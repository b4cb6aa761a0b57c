"""Collect a grid's run directories into the ``results.json`` of the report."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from normlab.experiments.figures import RunSpec
from normlab.experiments.grid import RunOutcome

__all__ = ["run_record", "collect", "t_quantile_975", "mean_ci95"]

_TRAIN_POINTS = 200  # training-loss points kept per run (evenly spaced) for the plots


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by a kill
                continue
    return out


def _finite(x: Any) -> Any:
    return x if not isinstance(x, float) or math.isfinite(x) else None


def run_record(spec: RunSpec, run_dir: Path, outcome: RunOutcome | None) -> dict[str, Any]:
    """One run's entry: its settings, status, per-evaluation validation metrics and a thinned training curve."""
    records = _read_jsonl(run_dir / "metrics.jsonl")
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.exists() else {}
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
    if spec.kind == "finetune":
        rec.update(parent=spec.parent, parent_update=spec.parent_update, task=spec.finetune_task,
                   seed=spec.config.seed)  # fmt: skip
    if status == "diverged":
        rec["diverged_at_update"] = summary.get("diverged_at_update")
    return rec


# Two-sided 95% quantiles of Student's t with df = 1..30 (then the normal 1.96 is within 2%).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]  # fmt: skip


def t_quantile_975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else 1.96


def mean_ci95(values: list[float]) -> dict[str, Any]:
    """Mean and half-width of the 95% confidence interval (t-distribution over ``values``, e.g. seeds)."""
    n = len(values)
    if n == 0:
        return {"mean": None, "ci95": None, "n": 0}
    mean = sum(values) / n
    if n == 1:
        return {"mean": mean, "ci95": None, "n": 1}
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return {"mean": mean, "ci95": t_quantile_975(n - 1) * sd / math.sqrt(n), "n": n}


def _finetune_table(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """finetune[parent][task][update] = mean/CI of the final validation accuracy over seeds, plus the mean
    accuracy after each fine-tuning epoch (the curve)."""
    table: dict[str, Any] = {}
    for rec in runs.values():
        if rec["kind"] != "finetune" or rec["status"] not in ("completed", "cached"):
            continue
        accs = [e["accuracy"] for e in rec["evals"] if e.get("accuracy") is not None]
        if not accs:
            continue
        cell = table.setdefault(rec["parent"], {}).setdefault(rec["task"], {}).setdefault(
            str(rec["parent_update"]), {"final": [], "per_epoch": []})
        cell["final"].append(accs[-1])
        cell["per_epoch"].append(accs)
    for parent in table.values():
        for task in parent.values():
            for update, cell in task.items():
                stats = mean_ci95(cell["final"])
                epochs = min(len(c) for c in cell["per_epoch"])
                curve = [sum(c[i] for c in cell["per_epoch"]) / len(cell["per_epoch"]) for i in range(epochs)]
                task[update] = {**stats, "seeds": cell["final"], "curve": curve}
    return table


def collect(specs: list[RunSpec], out: Path, outcomes: dict[str, RunOutcome]) -> dict[str, Any]:
    runs = {s.name: run_record(s, out / "runs" / s.name, outcomes.get(s.name)) for s in specs}
    return {"runs": runs, "finetune": _finetune_table(runs)}
