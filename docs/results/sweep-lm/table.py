"""The README's tables of this folder, printed from its sweep.json (so that no number is copied by hand):

    .venv/bin/python docs/results/sweep-lm/table.py [PATH/sweep.json]

1. per scheme x warm-up: each width's stability edge over the seeds [lowest last stable, highest first unstable)
   (`*`: a grid point not finished), the best grid point (its seed-mean final loss) and the LR sensitivity;
2. per scheme x width: the warm-up verdict (seeds' sign test), its mean-rate reading, and how the first unstable
   runs failed.
Works on any sweep.json of `normlab sweep` (the edge-quick or schemes folders too).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from normlab.experiments.sweep import SweepConfig
from normlab.report.sweep import first_unstable_text


def _lr(x: float | None) -> str:
    return "–" if x is None else f"{x:.3g}"


def _edge(e: dict) -> str:
    if not e or not e.get("per_seed"):
        return "–"
    if e.get("censored"):
        return f">= {_lr(e['lo'])}"
    if e.get("lo") is None:
        return f"< {_lr(e['hi'])}"
    return f"[{_lr(e['lo'])}, {_lr(e['hi'])})"


def main(path: Path) -> None:
    d = json.loads(path.read_text(encoding="utf-8"))
    widths, schemes, warmups = d["config"]["widths"], d["config"]["schemes"], d["config"]["warmups"]
    cfg = SweepConfig.from_dict({k: v for k, v in d["config"].items()
                                 if k in {f.name for f in dataclasses.fields(SweepConfig)}})  # fmt: skip
    arm_text = {w: "none" if w == "none" else f"{cfg.warmup_length(w)} updates" for w in warmups}
    by = {(r["scheme"], r["warmup"], r["width"]): r for r in d["frontier"]}
    head = ["scheme", "warm-up"] + [x for w in widths for x in (f"d = {w}: edge", "best lr (loss)", "sensitivity")]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for s in schemes:
        for w in warmups:
            cells = [s, arm_text[w]]
            for width in widths:
                r = by.get((s, w, width))
                if r is None:
                    cells += ["not run", "–", "–"]
                    continue
                loss = "–" if r.get("best_loss") is None else f"{r['best_loss']:.3f}"
                sens = "–" if r.get("sensitivity") is None else f"{r['sensitivity']:.2f}"
                # '*': a grid point of the curve has not finished (a report written while the sweep runs)
                star = "*" if r.get("missing_lrs") else ""
                cells += [_edge(r.get("edge") or {}) + star, f"{_lr(r.get('best_lr'))} ({loss})", sens]
            print("| " + " | ".join(cells) + " |")
    print()
    print("| scheme | width | warm-up verdict (seeds +) | mean-rate reading (seeds +) | first unstable runs, no warm-up "
          "| first unstable runs, warm-up |")
    print("|---|---|---|---|---|---|")
    arm = next((w for w in warmups if w != "none"), None)
    for t in sorted(d["warmup_truth"], key=lambda t: (schemes.index(t["scheme"]), t["width"])):
        v = (t.get("verdicts") or {}).get(arm) or {}
        m = (t.get("verdicts_mean_rate") or {}).get(arm) or {}
        none, warm = by.get((t["scheme"], "none", t["width"])), by.get((t["scheme"], arm, t["width"]))
        print(f"| {t['scheme']} | {t['width']} | {v.get('verdict', '–')} ({v.get('plus', 0)} of {v.get('decided', 0)}) "
              f"| {m.get('verdict', '–')} ({m.get('plus', 0)} of {m.get('decided', 0)}) "
              f"| {first_unstable_text((none or {}).get('first_unstable') or [])} | "
              f"{first_unstable_text((warm or {}).get('first_unstable') or [])} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("sweep.json"))
