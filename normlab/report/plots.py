"""The report's figures, laid out like the paper's panels (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_all"]

LN2 = math.log(2)


def _evals(run: dict[str, Any], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for e in run.get("evals", []):
        if e.get(key) is not None:
            xs.append(e["epoch"])
            ys.append(e[key])
    return xs, ys


def _style(run: dict[str, Any]) -> dict[str, Any]:
    name = run["name"]
    style: dict[str, Any] = {"linestyle": "--" if "nowarm" in name or "const" in name else "-"}
    style["color"] = ("tab:orange" if name.startswith("pre") else "tab:blue")
    if "radam" in name:
        style["color"] = "tab:green" if name.startswith("post") else "tab:olive"
    if "sgd" in name:
        style["color"] = "tab:purple"
    if "w500" in name:
        style["color"] = "tab:red"
    if "1e-4-const" in name:
        style["color"] = "tab:pink"
    style["marker"] = "o" if "1e-3" in name or "5e-3" in name else "s"
    style["markersize"] = 3
    return style


def _panel(ax: Any, runs: list[dict[str, Any]], key: str, ylabel: str, title: str) -> bool:
    drawn = False
    for run in runs:
        xs, ys = _evals(run, key)
        if key in ("loss", "nll"):
            ys = [y / LN2 for y in ys]  # bits per token, as fairseq and the paper report
        label = run["label"] + (" (diverged)" if run["status"] == "diverged" else "")
        if xs:
            ax.plot(xs, ys, label=label, **_style(run))
            drawn = True
        elif run["status"] == "diverged":
            ax.plot([], [], label=label, **_style(run))
    ax.set_xlabel("epoch")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return drawn


def _figure(runs: list[dict[str, Any]], path: Path, title: str, groups: list[tuple[str, list[dict[str, Any]]]]) -> Path:
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 3.6 * len(groups)), squeeze=False)
    for row, (name, members) in enumerate(groups):
        _panel(axes[row][0], members, "loss", "validation loss (bits/token)", f"{name}: validation loss")
        if not _panel(axes[row][1], members, "bleu", "BLEU", f"{name}: BLEU"):
            axes[row][1].text(0.5, 0.5, "BLEU not measured at this scale", ha="center", va="center",
                              transform=axes[row][1].transAxes)  # fmt: skip
        axes[row][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(results: dict[str, Any], out: Path) -> dict[str, Path]:
    """PNG files for Figures 2, 4, 5, 6 (Figure 3 comes from ``normlab analyze``)."""
    out.mkdir(parents=True, exist_ok=True)
    runs = results.get("runs", {})
    by_fig = lambda f: [r for r in runs.values() if f in r["figures"] and r["kind"] != "finetune"]  # noqa: E731
    paths = {}
    fig2 = by_fig("fig2")
    if fig2:
        adam = [r for r in fig2 if "-adam-" in r["name"]]
        sgd = [r for r in fig2 if "-sgd-" in r["name"]]
        paths["fig2"] = _figure(fig2, out / "fig2.png", "Figure 2: Post-LN, warm-up ablation",
                                [("Adam", adam), ("SGD", sgd)])  # fmt: skip
    if by_fig("fig4"):
        paths["fig4"] = _figure(by_fig("fig4"), out / "fig4.png", "Figure 4: Pre-LN vs Post-LN (and RAdam)",
                                [("IWSLT-style De-En", by_fig("fig4"))])  # fmt: skip
    if by_fig("fig6"):
        paths["fig6"] = _figure(by_fig("fig6"), out / "fig6.png", "Figure 6: Post-LN at a fixed small learning rate",
                                [("De-En", by_fig("fig6"))])  # fmt: skip
    bert = [r for r in by_fig("fig5") if r["kind"] == "mlm"]
    if bert:
        paths["fig5"] = _fig5(bert, results.get("finetune", {}), out / "fig5.png")
    return paths


def _fig5(bert: list[dict[str, Any]], finetune: dict[str, Any], path: Path) -> Path:
    tasks = sorted({t for parent in finetune.values() for t in parent})
    fig, axes = plt.subplots(1, 1 + len(tasks), figsize=(5 * (1 + len(tasks)), 3.8), squeeze=False)
    ax = axes[0][0]
    for run in bert:
        pts = [(e["update"], e["nll"] / LN2) for e in run["evals"] if e.get("nll") is not None]
        style = {"color": "tab:orange" if "pre" in run["name"] else ("tab:red" if "3e-4" in run["name"] else
                                                                     "tab:blue")}  # fmt: skip
        label = run["label"] + (" (diverged)" if run["status"] == "diverged" else "")
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=label, **style)
    ax.set_xlabel("pre-training updates")
    ax.set_ylabel("validation MLM loss (bits/token)")
    ax.set_title("(a) pre-training", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    for k, task in enumerate(tasks, start=1):
        ax = axes[0][k]
        for parent, per_task in finetune.items():
            cells = per_task.get(task, {})
            xs = sorted(cells, key=int)
            ys = [100 * cells[x]["mean"] for x in xs]
            err = [100 * (cells[x]["ci95"] or 0) for x in xs]
            ax.errorbar([int(x) for x in xs], ys, yerr=err, capsize=3, marker="o", markersize=3,
                        label=("Pre-LN" if "pre" in parent else "Post-LN") + f" ({parent})",
                        color="tab:orange" if "pre" in parent else "tab:blue")  # fmt: skip
        ax.set_xlabel("pre-training updates of the fine-tuned checkpoint")
        ax.set_ylabel("validation accuracy (%), mean and 95% CI over seeds")
        ax.set_title(f"({chr(ord('a') + k)}) fine-tuning on {task}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Figure 5: BERT pre-training and downstream fine-tuning")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
