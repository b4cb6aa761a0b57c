"""The report's figures, laid out like the paper's panels (matplotlib, Agg: no display needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

from normlab.report.claims import LEARN_MARGIN, PAPER_MLM_ARMS, mlm_arms
from normlab.results import seed_curves, split_seed

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_all"]

LN2 = math.log(2)


def _style(name: str, hot: str = PAPER_MLM_ARMS["hot"]) -> dict[str, Any]:
    """``hot``: Figure 5's Post-LN run at the Pre-LN rate (claims.mlm_arms), drawn red."""
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
    if name.startswith("bert"):  # Figure 5: Pre-LN orange, Post-LN blue, Post-LN at 3e-4 (diverges) red
        style["color"] = "tab:orange" if "-pre-" in name else "tab:red" if split_seed(name)[0] == hot else "tab:blue"
        style["linestyle"] = "-"
    style["marker"] = "o" if "1e-3" in name or "5e-3" in name else "s"
    style["markersize"] = 3
    return style


def _groups(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """results["groups"] (seed groups with their mean curves); for an older results.json without it, each run
    as a group of one seed."""
    if "groups" in results:
        return results["groups"]
    out = {}
    for name, run in results.get("runs", {}).items():
        if run.get("kind") != "finetune":
            out[name] = {"runs": [name], "label": run["label"], "figures": run["figures"], "kind": run["kind"],
                         "nll": seed_curves([run], "nll"), "bleu": seed_curves([run], "bleu")}
    return out


def _panel(ax: Any, groups: dict[str, dict[str, Any]], key: str, ylabel: str, title: str,
           hot: str = PAPER_MLM_ARMS["hot"]) -> bool:
    """Seed-mean curves of ``key`` against updates, with a band of one standard deviation over the seeds."""
    drawn = False
    for name, g in groups.items():
        stats = g[key]
        pts = stats["curve"]
        scale = 1 / LN2 if key == "nll" else 1.0  # bits per token, as fairseq and the paper report
        xs = [p["update"] for p in pts]
        ys = [p["mean"] * scale for p in pts]
        n = stats["seeds"]
        label = f"{g['label']} ({n} seed{'s' if n != 1 else ''}" + (f", {stats['diverged']} diverged" if
                                                                    stats["diverged"] else "") + ")"  # fmt: skip
        style = _style(name, hot)
        if xs:
            ax.plot(xs, ys, label=label, **style)
            sds = [p["sd"] for p in pts]
            if all(sd is not None for sd in sds):
                ax.fill_between(xs, [y - sd * scale for y, sd in zip(ys, sds)], [y + sd * scale for y, sd in zip(ys, sds)],
                                color=style["color"], alpha=0.15, linewidth=0)  # fmt: skip
            drawn = True
        elif stats["diverged"]:
            ax.plot([], [], label=label, **style)
    ax.set_xlabel("updates")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    return drawn


def _figure(path: Path, title: str, rows: list[tuple[str, dict[str, dict[str, Any]]]], entropy: float | None) -> Path:
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 3.8 * len(rows)), squeeze=False)
    for row, (name, members) in enumerate(rows):
        ax = axes[row][0]
        _panel(ax, members, "nll", "validation NLL (bits/token)", f"{name}: validation loss, seed mean ± 1 sd")
        if entropy is not None:  # the gate of report/claims.py
            ax.axhline(entropy / LN2, color="grey", linewidth=0.8, linestyle=":", label="unigram loss of the targets")
            ax.axhline((entropy - LEARN_MARGIN) / LN2, color="black", linewidth=0.8, linestyle=":",
                       label=f"learned: {LEARN_MARGIN:g} nats below it")  # fmt: skip
        if not _panel(axes[row][1], members, "bleu", "BLEU", f"{name}: BLEU, seed mean ± 1 sd"):
            axes[row][1].text(0.5, 0.5, "BLEU not measured at this scale", ha="center", va="center",
                              transform=axes[row][1].transAxes)  # fmt: skip
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_all(results: dict[str, Any], out: Path) -> dict[str, Path]:
    """PNG files for Figures 2, 4, 5, 6 (Figure 3 comes from ``normlab analyze``)."""
    out.mkdir(parents=True, exist_ok=True)
    groups = _groups(results)
    by_fig = lambda f: {k: g for k, g in groups.items() if f in g["figures"] and g["kind"] != "finetune"}  # noqa: E731
    entropy = results.get("baselines", {}).get("translation", {}).get("unigram_entropy")
    paths = {}
    fig2 = by_fig("fig2")
    if fig2:
        adam = {k: g for k, g in fig2.items() if "-adam-" in k}
        sgd = {k: g for k, g in fig2.items() if "-sgd-" in k}
        rows = [(n, m) for n, m in (("Adam", adam), ("SGD", sgd)) if m]
        paths["fig2"] = _figure(out / "fig2.png", "Figure 2: Post-LN, warm-up ablation", rows, entropy)
    if by_fig("fig4"):
        paths["fig4"] = _figure(out / "fig4.png", "Figure 4: Pre-LN vs Post-LN (and RAdam)",
                                [("IWSLT-style De-En", by_fig("fig4"))], entropy)  # fmt: skip
    if by_fig("fig6"):
        paths["fig6"] = _figure(out / "fig6.png", "Figure 6: Post-LN at a fixed small learning rate",
                                [("De-En", by_fig("fig6"))], entropy)  # fmt: skip
    bert = {k: g for k, g in by_fig("fig5").items() if g["kind"] == "mlm"}
    if bert:
        baselines = results.get("baselines", {})
        paths["fig5"] = _fig5(bert, results.get("finetune", {}), out / "fig5.png",
                              baselines.get("mlm", {}).get("unigram_entropy"), mlm_arms(results)["hot"],
                              {t: b.get("majority") for t, b in baselines.get("finetune", {}).items()})
    return paths


def _fig5(bert: dict[str, dict[str, Any]], finetune: dict[str, Any], path: Path, entropy: float | None,
          hot: str, majority: dict[str, float | None] | None = None) -> Path:
    tasks = sorted({t for parent in finetune.values() for t in parent})
    fig, axes = plt.subplots(1, 1 + len(tasks), figsize=(5 * (1 + len(tasks)), 3.8), squeeze=False)
    ax = axes[0][0]
    _panel(ax, bert, "nll", "validation MLM loss (bits/token)", "(a) pre-training, seed mean ± 1 sd", hot)
    if entropy is not None:
        ax.axhline(entropy / LN2, color="grey", linewidth=0.8, linestyle=":", label="unigram loss")
        # the learning gate's line (report/claims.py, learned): a reference whose interval ends above it did not learn
        ax.axhline((entropy - LEARN_MARGIN) / LN2, color="black", linewidth=0.8, linestyle=":",
                   label=f"learned: {LEARN_MARGIN:g} nats below it")  # fmt: skip
    ax.set_xlabel("pre-training updates")
    ax.legend(fontsize=7)
    for k, task in enumerate(tasks, start=1):
        ax = axes[0][k]
        lows, highs = [], []
        for parent, per_task in finetune.items():
            cells = per_task.get(task, {})
            xs = sorted(cells, key=int)
            ys = [100 * cells[x]["mean"] for x in xs]
            err = [100 * (cells[x]["ci95"] or 0) for x in xs]
            lows += [y - e for y, e in zip(ys, err)]
            highs += [y + e for y, e in zip(ys, err)]
            ax.errorbar([int(x) for x in xs], ys, yerr=err, capsize=3, marker="o", markersize=3,
                        label=("Pre-LN" if "pre" in parent else "Post-LN") + f" ({parent})",
                        color="tab:orange" if "pre" in parent else "tab:blue")  # fmt: skip
        ax.set_xlabel("pre-training updates of the fine-tuned checkpoint")
        base = (majority or {}).get(task)
        if base is not None:  # C12's gate: Post-LN must beat the majority class beyond its interval
            ax.axhline(100 * base, color="grey", linewidth=0.8, linestyle="--",
                       label=f"majority class ({100 * base:.1f}%)")  # fmt: skip
            lows.append(100 * base)
        ax.set_ylabel("validation accuracy (%), mean ± 95% CI")
        # zoomed on the bars and the majority class (the accuracies of a small model lie within a few points of
        # it; a 0-100 axis hides their differences), never past the possible range
        if lows and highs:
            ax.set_ylim(max(0.0, min(lows) - 2), min(100.0, max(highs) + 2))
        ax.set_title(f"({chr(ord('a') + k)}) fine-tuning on {task}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Figure 5: BERT pre-training and downstream fine-tuning")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
