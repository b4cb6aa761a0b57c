"""Draw curves.png: validation loss and BLEU against updates of the runs committed here (the CPU recipe's
calibration runs in runs/, the GPU ones in gpu-calibration/runs/), from their metrics.jsonl.

    .venv/bin/python docs/results/de-en-cpu/curves.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).parent


def valid_points(run: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    return [r for r in rows if r.get("type") == "valid"]


def main() -> None:
    runs = sorted((HERE / "runs").iterdir()) + sorted((HERE / "gpu-calibration" / "runs").iterdir())
    fig, (loss, bleu) = plt.subplots(1, 2, figsize=(11, 4))
    for run in runs:
        pts = valid_points(run)
        if not pts:
            continue
        where = "CPU" if run.parent.parent == HERE else "H100"
        style = {"marker": "o", "markersize": 3, "linestyle": "-" if where == "CPU" else ":"}
        xs = [p["update"] for p in pts]
        loss.plot(xs, [p["nll"] / math.log(2) for p in pts], label=f"{run.name} ({where})", **style)
        bleu.plot(xs, [p.get("bleu", float("nan")) for p in pts], label=f"{run.name} ({where})", **style)
    loss.set_ylabel("validation NLL (bits/token)")
    bleu.set_ylabel("validation BLEU (first 500 sentences, beam 5)")
    for ax in (loss, bleu):
        ax.set_xlabel("updates (4,096 target tokens each; 660 an epoch)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("de-en, Pre-LN without warm-up: the CPU recipe's calibration beside the GPU runs")
    fig.tight_layout()
    fig.savefig(HERE / "curves.png", dpi=110)


if __name__ == "__main__":
    main()
