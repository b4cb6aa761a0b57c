"""The quick scale's reference (Post-LN, 100-update warm-up, 5e-4, lr_max sqrt(100/t) from update 100) against the
learning gate at every validation point: seed mean, 95% interval as claims.py computes it, the line U - 0.5."""
import json, sys
from pathlib import Path
from normlab.report.claims import LEARN_MARGIN, _seed_interval
U = 6.817095399401195  # docs/results/reproduce-quick/length-1200/results.json (and the 2,000-update one) baselines.translation.unigram_entropy
line = U - LEARN_MARGIN
root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "runs")
curves = {}
for d in sorted(root.glob("post-adam-5e-4-w4000-s*")):
    pts = {}
    for l in open(d / "metrics.jsonl"):
        r = json.loads(l)
        if r.get("type") == "valid":
            pts[r["update"]] = r["nll"]
    curves[d.name[-2:]] = pts
seeds = sorted(curves)
common = sorted(set.intersection(*[set(c) for c in curves.values()]))
print(f"line U - {LEARN_MARGIN} = {line:.3f}; seeds {seeds}")
print("update " + " ".join(f"{s:>6}" for s in seeds) + "   mean   [95% interval]   upper bound below line by")
for u in common:
    xs = [curves[s][u] for s in seeds]
    iv = _seed_interval(xs) if len(xs) > 1 else None
    tail = f"{iv[0]:.3f} [{iv[1]:.3f}, {iv[2]:.3f}]  {line - iv[2]:+.3f}" if iv else ""
    print(f"{u:6d} " + " ".join(f"{x:6.3f}" for x in xs) + "   " + tail)
