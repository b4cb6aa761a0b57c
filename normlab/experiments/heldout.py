"""diagnose held out (issue 40): its warm-up verdict at initialisation scored against the stability sweeps' ground
truth, on cells it was never calibrated on, beside the trivial baseline "Post-LN needs warm-up, nothing else does".

Why held out. On the sweep's own cells every threshold between the two clusters of S (Post-LN's ~2, Pre-LN's
~0.6) scores the same, and so does the baseline: agreement there validates nothing (issue 40, finding 4). So:

* **the shipped rule** (``normlab diagnose`` as it is today: S above the threshold of the stack's depth,
  diagnose.score_verdict, applied to the S each sweep.json holds) was calibrated on its own reference models
  (diagnose.DEPTH_CALIBRATION: Post-LN and Pre-LN stacks at seeds 0-2, synthetic batches); no sweep cell's S
  entered a threshold's value. But its depth axis was added after the quick sweep's 3-layer translation cells had
  been seen (diagnose.SEEN_IN_DESIGN): the score is given on every decided cell and, apart, on those never in
  view (a review on 2026-11-27 found the heading "every sweep cell is held out" claimed more);
* **refitted on some cells, scored on the others** (:func:`normlab.analysis.diagnose.held_out_agreement`): the
  threshold on r = S / the shipped threshold at L (S in units of it, so that stacks of different depths share one
  scale) chosen on (a) the paper's two schemes, exactly ``post`` and ``pre`` (LayerNorm; ``pre/dyt`` or
  ``post/rmsnorm`` are other schemes, scored, not fitted on) and scored on every other scheme; (b) the
  translation sweeps' cells and scored on the language-model sweep's, and (c) the reverse. (a) asks whether the
  rule transfers to schemes it never saw, (b)-(c) to another task.

The ground truth of a cell (one scheme x depth x width of one sweep) is that sweep's seeds' sign test on the
stability edge (sweep.warmup_truth: needed / not needed / open), recomputed here from the cells of its sweep.json
under the present rules (as ``normlab sweep --from-json`` does), so a file written under an older rule is read
under today's. diagnose's S per cell is the file's own table (models at initialisation, seed 0: what the sweep
measured when it wrote its report), else measured (seconds per model); normlab.experiments.sweep.held_out_cells
reads the files (this module only scores).

Counts reported apart: decided (a truth and a verdict), undecided (the sweep's seeds leave it open), no score
(diagnose gave no verdict: overlapping references at that depth). The baseline is scored on exactly the decided
cells diagnose is scored on, and so is the other fixed rule, "every scheme needs warm-up": the truth is the sign of
warm-up's effect on the stability edge, and where warm-up raises the edge of every scheme (the LM sweep's Pre-LN
and Peri-LN as well as Post-LN; the edge-quick sweep's Pre-LN), that rule scores every cell; a rule that reads the
model must beat both to tell more than "warm-up helps" (added 2026-11-28, after a preview of the held-out score
on the LM sweep's partial report, in which every decided cell was "needed": a second comparator, which changes no
score of diagnose's).

Beside the verdict's score, per sweep, whether S orders the cells' no-warm-up stability edges (a rank
correlation with its permutation p, :func:`_edge_rank`): the level of the edge, not the yes/no verdict, is what
separates the schemes at these scales.

One experiment, one cell: two sweeps that ran the same cell (the same scheme, width and
sweep.EXPERIMENT_FIELDS, e.g. one preset on a CPU and on a GPU, or a sweep and its re-read copy) are refused
together, since a cell counted twice would count its truth twice; so is one file given twice under two names.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normlab.analysis.diagnose import depth_threshold, held_out_agreement
from normlab.files import write_atomic, write_json_atomic
from normlab.metrics import spearman_within
from normlab.results import edge_text, trivial_baseline

__all__ = ["held_out", "held_out_markdown", "write_held_out"]

# a cell: (sweep label, scheme, layers, width); the label keeps two sweeps' cells of the same shape apart (other
# lengths, tasks or arms: another experiment; the same experiment twice is refused, _check_once)
Key = tuple[str, str, int, int]

PAPER_SCHEMES = ("post", "pre")
"""Split (a)'s calibration set: the paper's two schemes by their exact names (LayerNorm in both)."""


def _key(c: dict[str, Any]) -> Key:
    return c["sweep"], c["scheme"], c["layers"], c["width"]


def _ratio(c: dict[str, Any]) -> float | None:
    """S in units of the shipped threshold of its depth (depth_threshold: inside the references' overlap there is
    none, and the cell has no ratio); None without one."""
    t = depth_threshold(c["layers"])
    return None if c["score"] is None or not t else c["score"] / t


def _base(scheme: str) -> str:
    return scheme.split("/")[0]


def _shipped(cells: Sequence[dict[str, Any]], truth: str = "truth") -> dict[str, Any]:
    """The shipped verdicts against the truth (``truth``: the cells' key, ``truth_mean_rate`` for the mean-rate
    reading) on every cell, beside both fixed rules on the same decided cells."""
    decided = [c for c in cells if c.get(truth) is not None and c["diagnose"] is not None]
    return {
        "cells": len(cells), "decided": len(decided),
        "undecided": sum(c.get(truth) is None for c in cells),
        "no_score": sum(c.get(truth) is not None and c["diagnose"] is None for c in cells),
        "agree": sum(c["diagnose"] == c[truth] for c in decided),
        "baseline_agree": sum(trivial_baseline(c["scheme"]) == c[truth] for c in decided),
        "always_agree": sum(c[truth] is True for c in decided),  # "every scheme needs warm-up" (module doc)
        "schemes": sorted({c["scheme"] for c in decided}),
        "wrong": [list(_key(c)) for c in decided if c["diagnose"] != c[truth]],
        "baseline_wrong": [list(_key(c)) for c in decided if trivial_baseline(c["scheme"]) != c[truth]],
    }  # fmt: skip


def _edge_rank(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per sweep, does diagnose's S order its schemes' stability edges? Within each width, Spearman's rho of S
    against the no-warm-up arm's edge (the geometric centre of the seeds' brackets) across the schemes, averaged
    over the widths, with the one-sided p of a permutation test that moves whole schemes (metrics.spearman_within):
    a scheme's cells at two widths share its level and are not independent, and within every scheme of the LM
    sweep both S and the edge fall from d = 64 to 128, a trend of width that a correlation pooled over cells would
    mix in (a review of 2026-11-28 found the pooled test's p 0.03 where moving schemes as units gives 0.08). A
    scheme enters when its S and a bracketed edge are known at every width of the sweep (a censored or unbracketed
    seed leaves the edge without a centre: ``schemes`` lists those used).

    Why. The verdict asks a yes/no question whose truth came out "needed" for nearly every scheme (a warm-up
    raises every scheme's edge at these scales), so its score says little; what separates the schemes is the
    edge's level (in the LM sweep, at equal width, 2.2-220x Post-LN's without warm-up), which is what a user asking "up to which
    learning rate is it stable?" needs. S measures the gradient pattern that Theorem 1 ties to Post-LN's small
    stable rate, so the direction is the theory's: a larger S, a lower edge (hence one-sided). Per sweep, because
    an edge belongs to its recipe (task, length, batch, optimiser): S can only order the edges of one recipe. Added
    on 2026-11-28 after a preview of the LM sweep's partial report: that sweep was in view, so this is a
    measurement of S, not a held-out test of a rule, and nothing is fitted to it."""
    def rank(label: str, mine: list[dict[str, Any]], widths: list[int] | None = None) -> dict[str, Any]:
        widths = widths or sorted({c["width"] for c in mine})
        known = {(c["scheme"], c["width"]): (c["score"], c["edge_none"]["centre"]) for c in mine
                 if c["score"] is not None and (c.get("edge_none") or {}).get("centre") is not None
                 and math.isfinite(c["score"]) and c["width"] in widths}  # fmt: skip
        schemes = sorted({sc for sc, _ in known if all((sc, w) in known for w in widths)})
        r = spearman_within({k: v for k, v in known.items() if k[0] in schemes})
        return {"sweep": label, "task": mine[0]["task"], "layers": mine[0]["layers"], "cells": len(mine),
                "widths": widths, **r.to_dict(), "schemes": schemes}  # fmt: skip

    out = [rank(label, [c for c in cells if c["sweep"] == label]) for label in sorted({c["sweep"] for c in cells})]
    # Sweeps of one recipe (every EXPERIMENT_FIELDS value alike; the schemes preset was built to sit beside
    # edge-quick's Post-LN and Pre-LN) ranked together as well: an edge belongs to its recipe, not to its file, and
    # six schemes give 720 orderings where two give 2 and four 24. Added on 2026-11-28 before the schemes sweep's
    # S-edge pairs were seen (its DeepNorm and Admin edges were); beside the per-sweep rows, not instead of them.
    recipes: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        recipe = {k: v for k, v in (c.get("experiment") or {}).items() if k not in ("scheme", "width")}
        if recipe:
            recipes.setdefault(json.dumps(recipe, sort_keys=True), []).append(c)
    for mine in recipes.values():
        labels = sorted({c["sweep"] for c in mine})
        if len(labels) < 2:
            continue
        if len({(c["scheme"], c["width"]) for c in mine}) < len(mine):
            # held_out's _check_once refuses one experiment twice; a direct call with a scheme in two files of one
            # recipe would give it two edges at one width
            raise ValueError(f"a scheme at one width in two sweeps of one recipe ({', '.join(labels)}): pass each "
                             "experiment once")
        # the widths every pooled sweep ran: a width only one ran would drop the others' schemes
        common = sorted(set.intersection(*({c["width"] for c in mine if c["sweep"] == lb} for lb in labels)))
        pooled = rank(" + ".join(labels), mine, common) if common else None
        alone = max((r["n"] for r in out if r["sweep"] in labels), default=0)
        if pooled is not None and pooled["n"] > alone:  # a pool that adds no scheme says nothing new
            out.append({**pooled, "pooled": labels})
    return out


def _split(cells: Sequence[dict[str, Any]], name: str, calibrate: Sequence[dict[str, Any]],
           evaluate: Sequence[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    scores = {_key(c): _ratio(c) for c in cells}
    truth = {_key(c): c["truth"] for c in cells}
    out = held_out_agreement(scores, truth, [_key(c) for c in calibrate], [_key(c) for c in evaluate],
                             placement_of=lambda k: _base(k[1]))  # fmt: skip
    out["evaluation"]["schemes"] = sorted({r["cell"][1] for r in out["table"] if r["agree"] is not None})
    out["table"] = [{**r, "cell": list(r["cell"])} for r in out["table"]]
    return {"split": name, **out}


def _experiment(c: dict[str, Any]) -> str:
    return json.dumps(c.get("experiment") or list(_key(c)[1:]), sort_keys=True)


def _check_once(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells, each experiment once (module docstring); two sweeps whose labels coincide take their paths."""
    paths: dict[str, set[str]] = {}
    for c in cells:
        paths.setdefault(c["sweep"], set()).add(c.get("path", c["sweep"]))
    by_exp: dict[str, list[str]] = {}
    for c in cells:
        by_exp.setdefault(_experiment(c), []).append(c.get("path", c["sweep"]))
    twice = sorted({p for ps in by_exp.values() if len(ps) > 1 for p in ps})
    if twice:
        same = [ps for ps in by_exp.values() if len(ps) > 1]
        what = "the same file given twice" if all(len(set(ps)) == 1 for ps in same) else "the same experiment"
        raise ValueError(f"{what} (a cell would count twice): {', '.join(twice)}; pass each experiment once")
    return [{**c, "sweep": c["sweep"] if len(paths[c["sweep"]]) == 1 else c.get("path", c["sweep"])} for c in cells]


def held_out(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """diagnose held out against the sweeps' ``cells`` (sweep.held_out_cells: one per scheme x width of each sweep,
    with its truth and diagnose's S, threshold and verdict): the shipped rule's score on all decided cells and on
    those never in view when it was designed, and the refitted splits (module docstring)."""
    cells = _check_once(list(cells))
    paper = [c for c in cells if c["scheme"] in PAPER_SCHEMES]
    others = [c for c in cells if c["scheme"] not in PAPER_SCHEMES]
    splits = []
    if paper and others:
        splits.append(_split(cells, "post and pre -> the other schemes", paper, others))
    by_task = {t: [c for c in cells if c["task"] == t] for t in sorted({c["task"] for c in cells})}
    if len(by_task) > 1:
        for t, mine in by_task.items():
            rest = [c for c in cells if c["task"] != t]
            splits.append(_split(cells, f"the other tasks -> {t}", rest, mine))
    return {"sweeps": sorted({c["sweep"] for c in cells}), "cells": cells, "shipped": _shipped(cells),
            "shipped_unseen": _shipped([c for c in cells if not c.get("seen")]),
            "shipped_by_task": {t: _shipped(mine) for t, mine in by_task.items()}, "splits": splits,
            # the second truth, the mean-rate reading (sweep.RULES["mean_rate"]: warm-up beyond the lower mean rate
            # its arm trains at)
            "mean_rate": _shipped(cells, "truth_mean_rate"),
            # S against the level of the no-warm-up edge, per sweep (_edge_rank)
            "edge_rank": _edge_rank(cells)}


def _score(n_agree: int, n: int) -> str:
    return f"{n_agree}/{n}" if n else "–"


def _truth(x: bool | None) -> str:
    return {True: "needed", False: "not needed", None: "open"}[x]


def _edge_cell(e: dict[str, Any]) -> str:
    """results.edge_text's interval, and the centre the rank test reads."""
    return edge_text(e) + ("" if e.get("centre") is None else f", centre {e['centre']:.3g}")


def held_out_markdown(result: dict[str, Any]) -> str:
    """HELD_OUT.md: the scores first, then every cell."""
    sh = result["shipped"]
    lines = ["# diagnose held out against the stability sweeps", "",
             f"Sweeps: {', '.join(result['sweeps'])}. A cell is one scheme x depth x width of one sweep; its truth is "
             "that sweep's seeds' sign test on the stability edge (needed / not needed / open), under the present "
             "rules. The baseline says \"Post-LN needs warm-up, nothing else does\"; beside it the other fixed rule, "
             "\"every scheme needs warm-up\". normlab/experiments/heldout.py says why each split is held out.", "",
             "## The shipped rule (thresholds from diagnose's own reference models; its depth axis was added with "
             "the 3-layer translation cells of the quick sweeps in view: the row \"never in view\" leaves them out)",
             "",
             "| cells | decided | open (sweep) | no verdict (diagnose) | diagnose agrees | baseline agrees | \"every "
             "scheme needs warm-up\" agrees | schemes decided |", "|---|---|---|---|---|---|---|---|",
             f"| {sh['cells']} | {sh['decided']} | {sh['undecided']} | {sh['no_score']} | "
             f"{_score(sh['agree'], sh['decided'])} | {_score(sh['baseline_agree'], sh['decided'])} | "
             f"{_score(sh.get('always_agree', 0), sh['decided'])} | "
             f"{len(sh['schemes'])}: {', '.join(sh['schemes']) or '–'} |"]  # fmt: skip
    if "shipped_unseen" in result:
        s = result["shipped_unseen"]
        lines.append(f"| never in view: {s['cells']} | {s['decided']} | {s['undecided']} | {s['no_score']} | "
                     f"{_score(s['agree'], s['decided'])} | {_score(s['baseline_agree'], s['decided'])} | "
                     f"{_score(s.get('always_agree', 0), s['decided'])} | {len(s['schemes'])} |")  # fmt: skip
    for t, s in result["shipped_by_task"].items():
        lines.append(f"| {t}: {s['cells']} | {s['decided']} | {s['undecided']} | {s['no_score']} | "
                     f"{_score(s['agree'], s['decided'])} | {_score(s['baseline_agree'], s['decided'])} | "
                     f"{_score(s.get('always_agree', 0), s['decided'])} | {len(s['schemes'])} |")  # fmt: skip
    if (m := result.get("mean_rate")) is not None:
        lines.append(f"| under the mean-rate reading (the truth: warm-up beyond its arm's lower mean rate) | "
                     f"{m['decided']} | {m['undecided']} | {m['no_score']} | {_score(m['agree'], m['decided'])} | "
                     f"{_score(m['baseline_agree'], m['decided'])} | {_score(m['always_agree'], m['decided'])} | "
                     f"{len(m['schemes'])} |")  # fmt: skip
    if result["splits"]:
        lines += ["", "## Refitted on some cells, scored on the others (threshold on S / the shipped threshold)", "",
                  "| split | threshold (x shipped) | calibration agrees | held-out decided | open | no score | "
                  "no threshold | diagnose agrees | baseline agrees | \"every scheme needs warm-up\" agrees | schemes |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in result["splits"]:
            cal, ev = s["calibration"], s["evaluation"]
            t = "–" if s["threshold"] is None else f"{s['threshold']:.3g}"
            lines.append(f"| {s['split']} | {t} | {_score(cal['agree'], cal['decided'])} | {ev['decided']} | "
                         f"{ev['undecided']} | {ev['no_score']} | {ev['no_threshold']} | "
                         f"{_score(ev['agree'], ev['decided'])} | "
                         f"{_score(ev['baseline_agree'], ev['decided'])} | "
                         f"{_score(ev.get('always_agree', 0), ev['decided'])} | {', '.join(ev['schemes']) or '–'} |")
    if result.get("edge_rank"):
        lines += ["", "## Does S order the stability edges? (per sweep, and pooled where sweeps share a recipe: within "
                  "each width, Spearman's rho of S against "
                  "the no-warm-up edge's centre across the schemes, averaged over the widths; p: one-sided "
                  "permutation test that moves whole schemes, of a correlation at most rho, the theory's direction: "
                  "a larger S, a lower edge; heldout._edge_rank says why, and that it was added with the LM sweep "
                  "in view)", "",
                  "| sweep | task | layers | cells | widths | schemes with S and a bracketed edge at every width | "
                  "rho | p (rho or lower) | orderings of the schemes |", "|---|---|---|---|---|---|---|---|---|"]
        for r in result["edge_rank"]:
            rho = "–" if r["rho"] != r["rho"] else f"{r['rho']:+.2f}"
            how = f"all {r['permutations']:,}" if r["exact"] else f"{r['permutations']:,} random"
            lines.append(f"| {r['sweep']} | {r['task']} | {r['layers']} | {r['cells']} | "
                         f"{', '.join(map(str, r['widths']))} | {r['n']} | {rho} | {r['p_below']:.3g} | "
                         f"{how if r['permutations'] else '–'} |")
    lines += ["", "## Every cell", "", "| sweep | task | scheme | layers | width | seeds run | truth | truth, mean-rate "
              "reading | S | shipped threshold | diagnose | in view at design | no-warm-up edge |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in result["cells"]:
        s = "–" if c["score"] is None else f"{c['score']:.3g}"
        t = "–" if c["threshold"] is None else f"{c['threshold']:.3g}"
        d = "–" if c["diagnose"] is None else ("warm-up" if c["diagnose"] else "none")
        lines.append(f"| {c['sweep']} | {c['task']} | {c['scheme']} | {c['layers']} | {c['width']} | {c['seeds']} | "
                     f"{_truth(c['truth'])} | {_truth(c.get('truth_mean_rate'))} | {s} | {t} | {d} | "
                     f"{'yes' if c.get('seen') else 'no'} | {_edge_cell(c.get('edge_none') or {})} |")
    return "\n".join(lines) + "\n"


def write_held_out(result: dict[str, Any], out: str | Path) -> dict[str, Path]:
    """held_out.json and HELD_OUT.md in ``out``."""
    out = Path(out)
    write_json_atomic(out / "held_out.json", result)
    write_atomic(out / "HELD_OUT.md", held_out_markdown(result))
    return {"json": out / "held_out.json", "md": out / "HELD_OUT.md"}
