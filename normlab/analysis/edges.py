"""The stability edges normlab's committed sweeps measured, for ``normlab diagnose`` to show beside its verdict.

A user asks two things before spending compute (the brief's third goal): does my model need a warm-up, and up to
which learning rate is it stable? diagnose answers the first from gradients at initialisation; its score does not
tell the second (held out against the sweeps, S did not order the schemes' edges: Spearman's rho -0.50, one-sided
p 0.10 on the LM sweep, docs/results/diagnose-held-out), and no formula from initialisation does. What normlab has
measured does: each sweep below bisected every curve's stability edge (the last stable and first unstable learning
rate of a seed, to 1.2x; ``normlab.experiments.sweep``) for several schemes, widths, seeds and both warm-up arms.
This module owns the compact table of those edges, ``normlab/assets/edges.json`` (shipped in the wheel: a user's
diagnose needs no checkout), built from the committed ``sweep.json`` files by :func:`collect` (``python -m
normlab.analysis.edges --write`` in a checkout; a test checks the shipped table against them), and says what of
it applies to a model: the rows of its task and scheme at the nearest measured depth, whether its own depth and
width were measured, and the command that measures them when they were not. It extrapolates nothing: an edge
depends on the run's length, batch and optimizer too, which a model config does not hold, and on depth, which the
sweeps hardly vary.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from normlab.assets import edges_file

__all__ = ["SOURCES", "collect", "dumps", "load", "scheme_of", "measured", "differences", "measured_for", "compare_run",
           "edge_lines", "main"]

# The sweeps the table holds, each a folder of docs/results with a sweep.json written under issue 40's definitions
# (one stability criterion, each seed's edge bisected), and where its runs trained (the sweep.json of a report
# re-read on another machine names that machine, not the runs'). Chosen for bisected edges: three-arms (extended by
# the edge search with `sweep --import` on 2026-11-28: two seeds, Post-LN and Pre-LN at d = 64-256 with the paper's
# 36-update warm-up beside the 100-update one; the only Pre-LN edge at d = 256) after edge-quick and width-gpu, so
# that where two sources measured one model the answer reads the one with more bracketed seeds without warm-up
# (_source_at), ties in this order; the other one- and
# two-seed folders of sweep-quick hold subsets of three-arms' Post-LN and Pre-LN cells; standard-189 adds Peri-LN's
# translation curves (one seed, all three warm-up arms, bisected; its Post-LN and Pre-LN runs are three-arms' seed 1,
# so _OWN_SCHEMES keeps only its Peri-LN rows), bf16 a subset of those; the depth-6 folders are the only 6-6
# translation runs (one seed; no Post-LN run left the unigram plateau at any rate from 1e-4: its edge is below the
# grid, or the runs too short, which the sweep cannot tell apart; Pre-LN's is bisected). `where` is written by hand:
# update it when a sweep's runs are finished on another machine (each run's summary.json names its CPU).
_EXTENDED = "2-core x86-64 CPU (grid) and 2-core AMD EPYC Zen 5 (edge search), bf16"
SOURCES: dict[str, tuple[str, str]] = {
    "edge-quick": ("sweep-quick/edge-quick", "2-core AMD EPYC Zen 4 and a 16-core Xeon with AMX, CPU, bf16"),
    "width-gpu": ("sweep-quick/width-gpu/report", "one NVIDIA H100 (420 runs) and one H200 (296), bf16"),
    "three-arms": ("sweep-quick/three-arms", _EXTENDED),
    "standard-189": ("sweep-quick/standard-189", _EXTENDED),
    "depth-6": ("sweep-quick/depth-6", _EXTENDED),
    "depth-6-600": ("sweep-quick/depth-6-600", _EXTENDED),
    "sweep-lm": ("sweep-lm", "2-core AMD EPYC Zen 5, bf16"),
    "sweep-schemes": ("sweep-schemes", "2-core AMD EPYC Zen 5, bf16"),
}
# A source whose other schemes' curves are an earlier source's runs read again (`sweep --import`) contributes only
# its own: the same runs twice would be two rows of one measurement in diagnose's answer.
_OWN_SCHEMES: dict[str, tuple[str, ...]] = {"standard-189": ("peri",)}

# The optimizer and loss of each task's sweep runs (normlab.experiments.sweep._train_config: name, betas, weight
# decay, label smoothing), copied so that reading the table does not import the experiments; a test checks they
# agree. sweep.json does not record them: they are the task's, the same for every sweep of it.
_OPTIM = {"translation": ("adam", (0.9, 0.98), 0.0, 0.1), "mlm": ("adamw", (0.9, 0.999), 0.01, 0.0),
          "lm": ("adamw", (0.9, 0.95), 0.1, 0.0)}
# The model settings of each task's sweep runs that a sweep does not vary (_train_config again; the test too): what
# diagnose compares with the user's model besides depth, width, FFN, heads and dropout.
_MODEL = {"translation": {"positional": "sinusoidal", "activation": "relu", "scale_embedding": True},
          "mlm": {"positional": "learned", "activation": "gelu", "scale_embedding": False},
          "lm": {"positional": "rope", "activation": "gelu", "scale_embedding": False}}


_UNSET: Any = object()  # edge_lines' ``found`` not given (None is an answer: a task no sweep trains)


def _asset() -> Path:
    return edges_file()


def collect(results: str | Path, sources: dict[str, tuple[str, str]] = SOURCES) -> dict[str, Any]:
    """The table from the sweeps under ``results`` (docs/results): per source its shape and provenance, per
    curve (scheme x warm-up x width) each seed's [last stable, first unstable) bracket, per scheme x width the
    warm-up verdict, per scheme x warm-up the width law. A source without a sweep.json yet is left out."""
    out: dict[str, Any] = {"what": "stability edges measured by normlab's committed sweeps (normlab.analysis.edges)",
                           "sources": {}, "edges": [], "verdicts": [], "width_laws": []}
    for label, (folder, where) in sources.items():
        path = Path(results) / folder / "sweep.json"
        if not path.is_file():
            continue
        d = json.loads(path.read_text(encoding="utf-8"))
        c = d["config"]
        out["sources"][label] = {
            "path": f"docs/results/{folder}", "where": where, "task": c["task"], "layers": c["layers"],
            "ffn_ratio": c["ffn_ratio"], "n_heads": c["n_heads"], "dropout": c["dropout"], "updates": c["updates"],
            "max_tokens": c["max_tokens"], "vocab_size": c["vocab_size"], "seeds": c["seeds"], "lr_min": c["lr_min"],
            "lr_cap": c["lr_cap"], "resolution": c["resolution"], "optimizer": _OPTIM[c["task"]][0],
            "betas": list(_OPTIM[c["task"]][1]), "weight_decay": _OPTIM[c["task"]][2],
            "label_smoothing": _OPTIM[c["task"]][3], "model": _MODEL[c["task"]],
            "warmups": dict(d["warmup_lengths"]),
        }  # fmt: skip
        own = _OWN_SCHEMES.get(label)

        def mine(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [r for r in rows if own is None or r["scheme"] in own]

        for r in mine(d["frontier"]):
            seeds = [[p["last_stable"], p["first_unstable"]] for p in r["edge"]["per_seed"]]
            if not seeds:  # a curve the sweep has not run
                continue
            # grid rates not run yet: the curve is not finished, and its brackets may be a grid step wide
            out["edges"].append({"source": label, "scheme": r["scheme"], "warmup": r["warmup"], "width": r["width"],
                                 "seeds": seeds, "missing_lrs": list(r.get("missing_lrs") or [])})  # fmt: skip
        for t in mine(d["warmup_truth"]):
            for arm, v in t["verdicts"].items():
                out["verdicts"].append({"source": label, "scheme": t["scheme"], "width": t["width"], "warmup": arm,
                                        "verdict": v["verdict"], "why": v.get("why", ""), "plus": v.get("plus"),
                                        "minus": sum(1 for x in v.get("signs") or [] if x is not None and x < 0),
                                        "decided": v.get("decided"), "seeds": len(v.get("seeds") or [])})  # fmt: skip
        for w in mine(d["width_law"]):
            mean = (w.get("seed_mean") or {}).get("mean")
            if w.get("lo") is None or mean is None:
                continue
            out["width_laws"].append({"source": label, "scheme": w["scheme"], "warmup": w["warmup"],
                                      "widths": w["widths"], "seed_mean": round(mean, 4),
                                      "lo": round(w["lo"], 4), "hi": round(w["hi"], 4)})  # fmt: skip
    return out


def dumps(table: dict[str, Any]) -> str:
    """The table as the shipped file holds it: a record a line, so that a sweep's change reads as a diff of rows."""
    parts = []
    for key, value in table.items():
        if isinstance(value, list):
            body = ",\n".join("  " + json.dumps(v, sort_keys=True) for v in value)
            parts.append(f"{json.dumps(key)}: [\n{body}\n ]" if value else f"{json.dumps(key)}: []")
        elif isinstance(value, dict):
            body = ",\n".join(f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in value.items())
            parts.append(f"{json.dumps(key)}: {{\n{body}\n }}" if value else f"{json.dumps(key)}: {{}}")
        else:
            parts.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{\n " + ",\n ".join(parts) + "\n}\n"


def load(path: str | Path | None = None) -> dict[str, Any]:
    """The shipped table (or the one at ``path``)."""
    return json.loads(Path(path or _asset()).read_text(encoding="utf-8"))


def scheme_of(cfg: Any) -> str:
    """A ModelConfig's scheme as the sweeps spell it (normlab.config.parse_scheme): PLACEMENT, or PLACEMENT/NORM."""
    placement, norm = cfg.placement.value, cfg.norm.value if hasattr(cfg.norm, "value") else str(cfg.norm)
    return placement if norm == "layernorm" else f"{placement}/{norm}"


def _depth(cfg: Any, task: str) -> tuple[int, str]:
    """The depth a sweep's `layers` stands for, and how to print the model's: the decoder-only LM's decoder, the
    masked LM's encoder, the encoder-decoder's E-D (a sweep runs E = D)."""
    if task == "lm":
        return cfg.decoder_layers, f"{cfg.decoder_layers} layers"
    if task == "translation":
        e, d = cfg.encoder_layers, cfg.decoder_layers
        return max(e, d), f"{e}-{d} layers"
    return cfg.encoder_layers, f"{cfg.encoder_layers} layers"


def summarize(seeds: Sequence[Sequence[float | None]], cap: float | None = None) -> dict[str, Any]:
    """A curve's edge over its seeds: the median of the bracketed seeds' geometric centres, their range [smallest
    last stable, largest first unstable) and the widest bracket (the resolution reached); seeds censored (no
    unstable run up to the highest rate tried: a lower bound; below ``cap``, the edge search had not finished) or
    below the grid (unstable from the smallest rate: an upper bound) counted apart, with their bounds."""
    pairs = [(lo, hi) for lo, hi in seeds if lo is not None and hi is not None]
    censored = sorted(lo for lo, hi in seeds if hi is None and lo is not None)
    below = sorted(hi for lo, hi in seeds if lo is None and hi is not None)
    return {"n": len(seeds), "bracketed": len(pairs), "censored": len(censored), "below_grid": len(below),
            "median": statistics.median(math.sqrt(lo * hi) for lo, hi in pairs) if pairs else None,
            "lo": min(lo for lo, _ in pairs) if pairs else None, "hi": max(hi for _, hi in pairs) if pairs else None,
            "widest": max(hi / lo for lo, hi in pairs) if pairs else None,
            "censored_at": censored, "unfinished": sum(1 for lo in censored if cap is not None and lo < cap),
            "below": below}  # fmt: skip


def _summary_text(s: dict[str, Any], resolution: float, missing: Sequence[float] = ()) -> str:
    notes = []
    if s["bracketed"]:
        head = f"{s['median']:.2g}"
        notes.append(f"seeds [{s['lo']:.3g}, {s['hi']:.3g})")
        # a bisection stopped early, or a grid step (2.15x at 3 a decade); rates named to 3 digits give 1.21x for 1.2x
        if s["widest"] > resolution * 1.05:
            notes.append(f"brackets up to {s['widest']:.2f}x, coarser than the search's {resolution:g}x")
    elif s["censored"] and not s["below_grid"]:
        head = f"at least {s['censored_at'][0]:.3g}"
    elif s["below_grid"] and not s["censored"]:
        head = f"no edge measured, below {s['below'][-1]:.3g}"
    else:
        head = "not bracketed"
    if s["censored"]:
        lo, hi = s["censored_at"][0], s["censored_at"][-1]
        bounds = f"{lo:.3g}" if lo == hi else f"{lo:.3g} .. {hi:.3g}"
        notes.append(f"{s['censored']} of {s['n']} seeds censored, no run unstable up to {bounds}"
                     + (", where the edge search stopped" if s["unfinished"] else ""))
    if s["n"] and s["below_grid"] == s["n"]:
        notes.append("every seed unstable from the smallest rate, or too short to leave the plateau: the sweep "
                     "cannot tell which")
    elif s["below_grid"]:
        notes.append(f"{s['below_grid']} of {s['n']} seeds unstable from the smallest rate, {s['below'][-1]:.3g}, "
                     "or too short to leave the plateau")
    if missing:
        notes.append(f"incomplete: {len(missing)} grid rate(s) not run")
    return f"{head} ({'; '.join(notes)})"


def measured(table: dict[str, Any], task: str, scheme: str, layers: int, width: int) -> dict[str, Any]:
    """What the table holds for a model of ``task``, ``scheme``, depth ``layers`` and width ``width``, always with
    the same keys: the rows at the measured depth nearest to ``layers`` (every width and source, both warm-up arms;
    an arm its sweep did not run is a row with ``run`` false), the same width at the other measured depths, the
    width laws at that depth, the sources they come from, and the schemes measured on the task."""
    sources = {k: v for k, v in table["sources"].items() if v["task"] == task}
    rows = [r for r in table["edges"] if r["source"] in sources and r["scheme"] == scheme]
    result: dict[str, Any] = {"task": task, "scheme": scheme, "layers": layers, "width": width,
                              "schemes": sorted({r["scheme"] for r in table["edges"] if r["source"] in sources}),
                              "depths": sorted({sources[r["source"]]["layers"] for r in rows}), "nearest_depth": None,
                              "rows": [], "other_depths": [], "width_measured": False, "width_laws": [],
                              "sources": {}}  # fmt: skip
    if not rows:
        return result
    nearest = min(result["depths"], key=lambda n: (abs(math.log(n / layers)), n))
    result["nearest_depth"] = nearest
    verdicts = {(v["source"], v["scheme"], v["width"], v["warmup"]): v for v in table["verdicts"]}
    order = {label: i for i, label in enumerate(table["sources"])}  # a source's rows together, in the table's order
    by_key = {(r["source"], r["width"], r["warmup"]): r for r in rows}

    def full(label: str, w: int, arm: str) -> dict[str, Any]:
        src, r = sources[label], by_key.get((label, w, arm))
        return {"source": label, "scheme": scheme, "warmup": arm, "width": w, "layers": src["layers"],
                "warmup_updates": src["warmups"].get(arm, 0), "run": r is not None,
                "seeds": r["seeds"] if r else [], "missing_lrs": r.get("missing_lrs", []) if r else [],
                "summary": summarize(r["seeds"], src["lr_cap"]) if r else None,
                "verdict": verdicts.get((label, scheme, w, arm)) if r else None}  # fmt: skip

    def arms(label: str) -> list[str]:  # no warm-up first, then the warm-up arms the sweep ran
        return sorted(sources[label]["warmups"], key=lambda a: (a != "none", a))

    cells = sorted({(r["source"], r["width"]) for r in rows}, key=lambda c: (order[c[0]], c[1]))
    result["rows"] = [full(label, w, arm) for label, w in cells if sources[label]["layers"] == nearest
                      for arm in arms(label)]  # fmt: skip
    # the same width at the other measured depths (a 6-layer model of a width measured only at 3 layers)
    others = sorted((c for c in cells if c[1] == width and sources[c[0]]["layers"] != nearest),
                    key=lambda c: (sources[c[0]]["layers"], order[c[0]]))
    result["other_depths"] = [full(label, w, arm) for label, w in others for arm in arms(label)]
    result["width_measured"] = any(r["width"] == width and r["run"] for r in result["rows"])
    result["width_laws"] = [w for w in table["width_laws"] if w["scheme"] == scheme and w["source"] in sources
                            and sources[w["source"]]["layers"] == nearest]  # fmt: skip
    result["sources"] = {r["source"]: sources[r["source"]] for r in result["rows"] + result["other_depths"]}
    return result


def _model_settings(cfg: Any) -> dict[str, Any]:
    value = lambda x: getattr(x, "value", x)  # noqa: E731 - an enum's value, else the value
    return {"positional": value(cfg.positional), "activation": value(cfg.activation),
            "scale_embedding": bool(cfg.scale_embedding)}  # fmt: skip


def differences(cfg: Any, task: str, m: dict[str, Any]) -> list[str]:
    """What of the model of ``cfg`` the rows at the nearest depth did not have: its depth, width, FFN, heads,
    dropout, positions, activation, embedding scale (each named with the sweeps' value)."""
    near = list({r["source"]: m["sources"][r["source"]] for r in m["rows"]}.values())
    if not near:
        return []
    layers, depth_text = _depth(cfg, task)
    out = []
    if m["nearest_depth"] != layers or (task == "translation" and cfg.encoder_layers != cfg.decoder_layers):
        out.append(f"depth {depth_text} (measured: {', '.join(map(str, m['depths']))})")
    if not m["width_measured"]:
        widths = sorted({r["width"] for r in m["rows"] if r["run"]})
        out.append(f"width d={cfg.d_model} (measured: {', '.join(map(str, widths))})")
    ratio = cfg.d_ffn / cfg.d_model
    for name, mine, theirs in [("FFN", f"{ratio:.3g}d", {f"{src['ffn_ratio']}d" for src in near}),
                               ("heads", str(cfg.n_heads), {str(src["n_heads"]) for src in near}),
                               ("dropout", f"{cfg.dropout:g}", {f"{src['dropout']:g}" for src in near})]:
        if mine not in theirs:
            out.append(f"{name} {mine} (measured: {', '.join(sorted(theirs))})")
    for key, mine in _model_settings(cfg).items():
        theirs = {str(src["model"][key]) for src in near if "model" in src}
        if theirs and str(mine) not in theirs:
            out.append(f"{key.replace('_', ' ')} {mine} (measured: {', '.join(sorted(theirs))})")
    return out


def _measure_command(cfg: Any, task: str, scheme: str) -> tuple[str, list[str]]:
    """The ``normlab sweep`` command that measures the edge of the model of ``cfg`` nearest to it that a sweep can
    express, and what it changes: a sweep runs E = D layers (the deeper stack's depth), an FFN of a whole multiple
    of d (the nearest), and its task's positions, activation and embedding scale."""
    layers, _ = _depth(cfg, task)
    base = "lm" if task == "lm" else "quick"  # the presets whose shape, length and arms the table's sweeps have
    # the masked LM's adam warm-up is 2,000 updates (2/(1 - 0.999)), longer than the preset's 300: the paper's share
    sets = [f"task={task}", "warmups=[none,paper]"] if task == "mlm" else []
    sets += [f"schemes=[{scheme}]", f"layers={layers}", f"widths=[{cfg.d_model}]", "seeds=5"]
    changes = []
    if task == "translation" and cfg.encoder_layers != cfg.decoder_layers:
        changes.append(f"{layers}-{layers} layers for your {cfg.encoder_layers}-{cfg.decoder_layers}")
    ratio = cfg.d_ffn / cfg.d_model
    whole = max(1, round(ratio))
    if whole != ratio:
        changes.append(f"FFN {whole}d for your {ratio:.3g}d")
    if whole != 2:
        sets.append(f"ffn_ratio={whole}")
    if cfg.n_heads != 4:
        sets.append(f"n_heads={cfg.n_heads}")
    preset_dropout = 0.0 if task == "lm" else 0.1  # SWEEP_SCALES' quick and lm presets
    if cfg.dropout != preset_dropout:
        sets.append(f"dropout={cfg.dropout:g}")
    for key, mine in _model_settings(cfg).items():
        if mine != _MODEL[task][key]:
            changes.append(f"{key.replace('_', ' ')} {_MODEL[task][key]} for your {mine}")
    command = (f"normlab sweep --scale {base} " + " ".join(f"--set '{x}'" for x in sets)
               + f" --out sweep/{scheme.replace('/', '-')}-L{layers}-d{cfg.d_model}")
    return command, changes


def measured_for(cfg: Any, task: str, table: dict[str, Any] | None = None, run: dict[str, Any] | None = None
                 ) -> dict[str, Any] | None:  # fmt: skip
    """:func:`measured` for a ModelConfig of ``task`` (None for a task no sweep trains), with what of the model
    the nearest rows did not have (``differences``), the command that measures its own edge (``command``), what
    of the model a sweep cannot express (``command_changes``) and, given a run (``lr``, ``warmup_updates`` and
    what else of it is known: :func:`compare_run`), where its rate sits (``run``): diagnose's JSON."""
    if task not in _OPTIM:
        return None
    table = table if table is not None else load()
    layers, _ = _depth(cfg, task)
    m = measured(table, task, scheme_of(cfg), layers, cfg.d_model)
    m["differences"] = differences(cfg, task, m)
    m["command"], m["command_changes"] = _measure_command(cfg, task, m["scheme"])
    m["run"] = compare_run(m, run) if run is not None else None
    return m


def _wrap(text: str, indent: int, width: int = 118) -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=" " * indent, subsequent_indent=" " * (indent + 4),
                         break_on_hyphens=False, break_long_words=False)


_BELOW_WORDS = "unstable from the smallest rate or too short to leave the plateau"


def _edge_text(s: dict[str, Any] | None) -> str:
    """A curve's edge in a few words, for the plain answer; seeds without a bracket counted beside it."""
    if s is None:
        return "not run"
    apart = ([f"{s['censored']} censored"] if s["censored"] else []) + (
        [f"{s['below_grid']} {_BELOW_WORDS}"] if s["below_grid"] else [])
    if s["bracketed"]:
        return (f"stable up to ~{s['median']:.2g} (seeds {s['lo']:.2g}..{s['hi']:.2g}"
                + (f"; of {s['n']} seeds, {', '.join(apart)}" if apart else "") + ")")
    if s["censored"] and not s["below_grid"]:
        return f"stable up to at least {s['censored_at'][0]:.2g} (censored)"
    if s["below_grid"] and not s["censored"]:
        return f"no edge measured (every seed {_BELOW_WORDS}, from {s['below'][-1]:.2g})"
    return f"not bracketed ({', '.join(apart)})" if apart else "not run"


def _verdict_text(v: dict[str, Any] | None) -> str:
    if v is None:
        return ""
    if not v["decided"]:  # the sign test's reason, up to its parenthesis (the long form is in the sweep's report)
        why = (v.get("why") or "").split(" (")[0]
        return f"warm-up {v['verdict']}" + (f" ({why})" if why else "")
    minus, open_seeds = v.get("minus") or 0, v["seeds"] - v["decided"]
    return (f"warm-up {v['verdict']}: it raised the edge in {v['plus']} of {v['seeds']} seeds"
            + (f", lowered it in {minus}" if minus else "") + (f", {open_seeds} open" if open_seeds else ""))


def _source_at(rows: list[dict[str, Any]], w: int, arm: str | None = None) -> str | None:
    """Of the sources with width ``w`` among ``rows``, the one to read: with the arm ``arm`` run (if given), then
    the most bracketed seeds without warm-up (the answer's first number; with ``arm``, 0 unless it is none), then
    over its arms (or in that arm); ties in the table's order."""
    at_w = [r for r in rows if r["width"] == w and r["run"] and (arm is None or r["warmup"] == arm)]
    if not at_w:
        return None
    # the no-warm-up arm's bracketed seeds first (the answer's first number), then all arms': a source with more
    # arms does not outrank one with more seeds; ties in the table's order
    def rank(label: str) -> tuple[int, int]:
        mine = [r for r in at_w if r["source"] == label]
        return (sum(r["summary"]["bracketed"] for r in mine if r["warmup"] == "none"),
                sum(r["summary"]["bracketed"] for r in mine))

    return max(dict.fromkeys(r["source"] for r in at_w), key=rank)


def _nearest_width(rows: list[dict[str, Any]], width: int) -> int | None:
    widths = {r["width"] for r in rows if r["run"]}
    return min(widths, key=lambda x: (abs(math.log(x / width)), x)) if widths else None


def _cell_name(m: dict[str, Any], label: str, w: int) -> str:
    src = m["sources"][label]
    depth = f"{src['layers']}-{src['layers']}" if m["task"] == "translation" else str(src["layers"])
    return f"{m['scheme']}, {depth} layers, d={w}"


def _cell_answer(m: dict[str, Any], rows: list[dict[str, Any]], w: int) -> tuple[str, str] | None:
    """One measured model in a sentence (the source :func:`_source_at` reads at width ``w``): each warm-up arm's
    edge and the warm-up verdict; with the source's label."""
    label = _source_at(rows, w)
    if label is None:
        return None
    src = m["sources"][label]
    parts = []
    for r in [r for r in rows if r["source"] == label and r["width"] == w]:
        arm = "without warm-up" if r["warmup"] == "none" else f"with a {r['warmup_updates']}-update warm-up"
        parts.append(f"{arm}, {_edge_text(r['summary'])}")
        if v := _verdict_text(r["verdict"]):
            parts.append(v)
    return label, (f"{_cell_name(m, label, w)} ({label}: {src['seeds']} seed(s), {src['updates']} updates of "
                   f"{src['max_tokens']:,} tokens): " + "; ".join(parts))


def _answer(m: dict[str, Any]) -> list[str]:
    """The plain answer: the nearest measured model (the model's width, else the nearest width, at the nearest
    depth); when that has no bracketed edge, the model's width at another depth as well."""
    w = _nearest_width(m["rows"], m["width"])
    if w is None:
        return []
    label, text = _cell_answer(m, m["rows"], w)
    out = [f"answer: nearest measured model: {text}."]
    if not any(r["summary"]["bracketed"] for r in m["rows"] if r["run"] and r["width"] == w and r["source"] == label):
        if other := _cell_answer(m, m["other_depths"], m["width"]):
            out.append(f"At your width, another depth: {other[1]}.")
    return out


def _seed_counts(lr: float, seeds: Sequence[Sequence[float | None]]) -> tuple[int, int, int]:
    """Seeds stable at ``lr`` (it is at most their last stable rate), unstable at it (at least their first unstable
    rate), and not determined (inside a bracket, above a censored bound, below a below-grid one)."""
    stable = sum(1 for lo, hi in seeds if lo is not None and lr <= lo)
    unstable = sum(1 for lo, hi in seeds if hi is not None and lr >= hi)
    return stable, unstable, len(seeds) - stable - unstable


def _run_differences(run: dict[str, Any], src: dict[str, Any]) -> list[str]:
    """What of a run the source's runs did not have: optimizer, betas, batch, length, decay (what is known of it)."""
    out = []
    if run.get("optimizer") and run["optimizer"] != src["optimizer"]:
        out.append(f"optimizer {run['optimizer']} (measured: {src['optimizer']})")
    if run.get("betas") and [round(b, 6) for b in run["betas"]] != [round(b, 6) for b in src["betas"]]:
        out.append(f"betas ({', '.join(f'{b:g}' for b in run['betas'])}) (measured: "
                   f"({', '.join(f'{b:g}' for b in src['betas'])}))")
    if run.get("max_tokens") and run["max_tokens"] != src["max_tokens"]:
        out.append(f"batch {run['max_tokens']:,} tokens (measured: {src['max_tokens']:,})")
    if "updates" in run and run["updates"] != src["updates"]:
        out.append(f"run length {run['updates']:,} updates (measured: {src['updates']})" if run["updates"] else
                   f"run length set by epochs or hours (measured: {src['updates']} updates)")
    if run.get("decay") and run["decay"] != "constant":
        out.append(f"{run['decay']} decay (measured: the rate constant after the warm-up)")
    return out


def compare_run(m: dict[str, Any], run: dict[str, Any]) -> dict[str, Any]:
    """Where a run's learning rate sits against the seeds of a measured model. ``run``: ``lr``, ``warmup_updates``
    (0 or 1: none, as ScheduleConfig reads them) and, when known, ``optimizer``, ``betas``, ``max_tokens``,
    ``updates`` (0: set by epochs or hours), ``decay``.

    The arm: no warm-up for a run without one, else the warm-up arm nearest in length, comparable only within a
    factor 2 of the run's (a far shorter warm-up may not protect the first updates as the measured one did, a far
    longer one may protect rates the measured one did not). The cell: the nearest measured depth first, at the
    width the answer reads, then the model's width at the other depths, nearest first; within them, the source
    whose arm is nearest the run's warm-up, then the most bracketed seeds; the first whose arm decides a seed at
    this rate (stable: the rate is at most the seed's last stable one; unstable: at least its first unstable one,
    which for a seed below the grid may be a run too short to leave the plateau). ``position``: below (stable in
    every seed), above (unstable in every seed), inside (some of each, or some not determined), unknown (why in
    ``text``); ``caveats``: what of the model and the run differ from the cell's."""
    lr = run["lr"]
    given = int(run.get("warmup_updates") or 0)
    warm = given if given > 1 else 0
    out: dict[str, Any] = {"lr": lr, "warmup_updates": given, "source": None, "layers": None, "width": None,
                           "warmup": None, "position": "unknown", "seeds": None, "caveats": [], "text": ""}
    yours = f"your run (learning rate {lr:g}, " + (f"a {warm}-update warm-up)" if warm else "no warm-up)")

    def arm_of(rows: list[dict[str, Any]], label: str, w: int) -> dict[str, Any] | None:
        cands = [r for r in rows if r["source"] == label and r["width"] == w and r["run"] and r["seeds"]]
        if not warm:
            return next((r for r in cands if r["warmup"] == "none"), None)
        warmed = [r for r in cands if r["warmup"] != "none" and r["warmup_updates"] > 0]
        return min(warmed, key=lambda r: abs(math.log(r["warmup_updates"] / warm)), default=None)

    def distance(r: dict[str, Any]) -> float:
        return abs(math.log(r["warmup_updates"] / warm)) if warm else 0.0

    candidates = []  # (depth rank, arm, label, width) in the order they are tried
    groups = [(m["rows"], _nearest_width(m["rows"], m["width"]), 0)]
    for depth in sorted({r["layers"] for r in m["other_depths"]}, key=lambda n: abs(math.log(n / m["layers"]))):
        groups.append(([r for r in m["other_depths"] if r["layers"] == depth], m["width"], 1))
    for rows, w, rank in groups:
        if w is None:
            continue
        found = []
        for label in dict.fromkeys(r["source"] for r in rows if r["width"] == w and r["run"]):
            if (r := arm_of(rows, label, w)) is not None:
                bracketed = r["summary"]["bracketed"] if r["summary"] else 0
                found.append((distance(r), -bracketed, label, r))
        candidates += [(rank, r, label, w) for _, _, label, r in sorted(found, key=lambda x: x[:2])]
    if not candidates:
        out["text"] = f"{yours}: no measured model near yours ran that arm" if m["rows"] else ""
        return out
    comparable = [c for c in candidates if not warm or 0.5 <= c[1]["warmup_updates"] / warm <= 2]
    if not comparable:
        _, r, label, w = candidates[0]
        out.update(source=label, layers=m["sources"][label]["layers"], width=w, warmup=r["warmup"])
        out["text"] = (f"{yours}: not comparable with the nearest measured warm-up, {r['warmup_updates']} updates "
                       f"({_cell_name(m, label, w)}, {label}): the lengths differ by more than 2x")
        return out
    src0 = m["sources"]
    if run.get("optimizer") and {"adam": "adam", "adamw": "adam"}.get(run["optimizer"]) != \
            {"adam": "adam", "adamw": "adam"}.get(src0[comparable[0][2]]["optimizer"]):
        _, r, label, w = comparable[0]
        out.update(source=label, layers=src0[label]["layers"], width=w, warmup=r["warmup"])
        out["text"] = (f"{yours}: not comparable with {_cell_name(m, label, w)} ({label}): the edges were measured "
                       f"with {src0[label]['optimizer']}, your run uses {run['optimizer']}")
        return out
    # the first candidate whose seeds decide something at this rate; else the first, with nothing decided
    counted = [(c, _seed_counts(lr, c[1]["seeds"])) for c in comparable]
    (rank, r, label, w), (stable, unstable, open_) = next(
        ((c, k) for c, k in counted if k[0] + k[1] > 0), counted[0])
    src = src0[label]
    out.update(source=label, layers=src["layers"], width=w, warmup=r["warmup"])
    arm = "without warm-up" if r["warmup"] == "none" else f"with its {r['warmup_updates']}-update warm-up"
    where = f"{_cell_name(m, label, w)} ({label}) {arm}"
    caveats = []
    if src["layers"] != m["layers"]:
        caveats.append(f"depth {m['layers']} (measured: {src['layers']})")
    if w != m["width"]:
        caveats.append(f"width d={m['width']} (measured: {w})")
    caveats += [d for d in m.get("differences", []) if not d.startswith(("depth", "width"))]
    caveats += _run_differences(run, src)
    out["caveats"] = caveats
    n = len(r["seeds"])
    out["seeds"] = {"n": n, "stable": stable, "unstable": unstable, "not_determined": open_}
    every = f"all {n} seeds" if n > 1 else "its one seed"
    if stable == n:
        out["position"] = "below"
        lowest = min(lo for lo, _ in r["seeds"])
        bound = " (a censored bound: stable up to at least there)" if any(
            hi is None and lo == lowest for lo, hi in r["seeds"]) else ""
        how = (f"stable in {every} of {where}: the lowest last stable rate, {lowest:.3g}{bound}, is {lowest / lr:.3g}x "
               "your rate")
    elif unstable == n:
        out["position"] = "above"
        below = sum(1 for lo, _ in r["seeds"] if lo is None)
        how = (f"unstable in {every} of {where} (the highest first unstable rate: "
               f"{max(hi for _, hi in r['seeds']):.3g}"
               + (f"; {below} of them unstable from the smallest rate or too short to leave the plateau" if below
                  else "") + ")")
    elif stable + unstable == 0:
        out["position"] = "unknown"
        how = f"not determined in any of the {n} seeds of {where} (the rate falls inside their brackets or bounds)"
    else:
        out["position"] = "inside"
        how = (f"at that rate {where} was stable in {stable}, unstable in {unstable} and not determined in {open_} "
               f"of {n} seeds")
    out["text"] = f"{yours}: {how}" + (f". Indicative only: that model and run differ from yours in "
                                       f"{'; '.join(caveats)}" if caveats else "")
    return out


def edge_lines(cfg: Any, task: str, table: dict[str, Any] | None = None, *, advised: bool | None = None,
               run: dict[str, Any] | None = None, found: Any = _UNSET) -> list[str]:  # fmt: skip
    """diagnose's section on measured stability edges for model config ``cfg`` of ``task``; ``advised``:
    diagnose's own verdict, for the sentence that says what each of the two answers when they differ; ``run``:
    the learning rate and warm-up of a run config (``lr``, ``warmup_updates``), placed against the answer's edge;
    ``found``: :func:`measured_for`'s answer for the same arguments (None included), when the caller has it."""
    table = table if table is not None else load()
    head = ("measured stability edges (the largest stable learning rate; normlab's committed sweeps, "
            "normlab.analysis.edges):")
    m = measured_for(cfg, task, table, run) if found is _UNSET else found
    tasks = sorted({src["task"] for src in table["sources"].values()})
    command = ""
    if m is not None:
        changes = m["command_changes"]
        command = m["command"] + (f" (it runs {', '.join(changes)}: what a sweep can express)" if changes else "")
    if m is None or task not in tasks:
        measure = f" To measure this model's edge with and without warm-up: {command}" if command else ""
        return [head] + _wrap(f"none for the {task} task: the committed sweeps trained {' and '.join(tasks)} "
                              f"models.{measure}", 2)
    scheme, width = m["scheme"], m["width"]
    if not m["rows"]:
        swept = ", ".join(m["schemes"]) or "none"
        return [head] + _wrap(f"{scheme} was not swept on the {task} task (swept there: {swept}). To measure its "
                              f"edge with and without warm-up at this depth and width: {command}", 2)
    lines = [head]
    for sentence in _answer(m):
        lines += _wrap(sentence, 2)
    if m["run"] is not None and m["run"]["text"]:
        text = m["run"]["text"]
        lines += _wrap(text[0].upper() + text[1:] + ".", 2)
    if advised is not None and (w := _nearest_width(m["rows"], width)) is not None:
        label = _source_at(m["rows"], w)  # the answer's cell: its verdict against diagnose's
        words = {r["verdict"]["verdict"] for r in m["rows"]
                 if r["source"] == label and r["width"] == w and r["verdict"] is not None}  # fmt: skip
        if (advised is False and "needed" in words) or (advised is True and "not needed" in words):
            lines += _wrap("The verdict above and these rows answer different questions: the verdict reads the "
                           "gradient pattern at initialisation that the paper blames for Post-LN's need of a warm-up; "
                           "the rows measure whether a warm-up moved the largest stable learning rate. A warm-up can "
                           "raise the edge of a model that trains well without one: what decides is whether the rate "
                           "you train at is below the edge without warm-up.", 2)
    shown: set[str] = set()

    def source_line(label: str, indent: int) -> None:
        src = m["sources"][label]
        b1, b2 = src["betas"]
        optim = "Adam" if src["optimizer"] == "adam" else f"AdamW (weight decay {src['weight_decay']:g})"
        smoothing = f", label smoothing {src['label_smoothing']:g}" if src["label_smoothing"] else ""
        depth = f"{src['layers']}-{src['layers']}" if task == "translation" else str(src["layers"])
        lines.extend(_wrap(f"{label}: {depth} layers, FFN {src['ffn_ratio']}d, {src['n_heads']} heads, dropout "
                           f"{src['dropout']:g}; {src['updates']} updates of {src['max_tokens']:,} tokens, {optim} "
                           f"betas ({b1:g}, {b2:g}){smoothing}, the rate constant after the warm-up; {src['seeds']} "
                           f"seed(s) ({src['path']}; {src['where']})", indent))
        shown.add(label)

    def row_line(r: dict[str, Any], indent: int, mark: bool) -> None:
        if r["source"] not in shown:
            source_line(r["source"], indent)
        arm = "no warm-up" if r["warmup"] == "none" else f"warm-up {r['warmup_updates']}"
        if not r["run"]:
            text = f"d={r['width']:<4} {arm:<13} not run"
        else:
            resolution = m["sources"][r["source"]]["resolution"]
            text = f"d={r['width']:<4} {arm:<13} {_summary_text(r['summary'], resolution, r['missing_lrs'])}"
            if v := _verdict_text(r["verdict"]):
                text += f"; {v}"
        here = mark and r["width"] == width  # the model's own width, marked at the start (a wrapped end hides it)
        lines.extend(_wrap(("> " if here else "") + text, indent + (0 if here else 2)))

    for r in m["rows"]:
        row_line(r, 2, mark=True)
    for w in m["width_laws"]:
        arm = "no warm-up" if w["warmup"] == "none" else "warm-up"
        theory = "; for Post-LN, Theorem 1's gradient scale gives about -1" if scheme == "post" else ""
        lines.extend(_wrap(f"width law ({w['source']}, {arm}, d = {', '.join(map(str, w['widths']))}): edge ~ "
                           f"d^{w['seed_mean']:+.2f} (seeds' fits {w['lo']:+.2f} .. {w['hi']:+.2f}{theory})", 2))
    if m["other_depths"]:
        lines.append(f"  d={width} at other depths:")
        for r in m["other_depths"]:
            row_line(r, 4, mark=False)
    for label in {r["source"]: None for r in m["rows"] + m["other_depths"]}:
        none = [r for r in m["rows"] + m["other_depths"] if r["source"] == label and r["run"] and r["warmup"] == "none"]
        if none and all(r["summary"]["n"] and r["summary"]["below_grid"] == r["summary"]["n"] for r in none):
            src = m["sources"][label]
            lines.extend(_wrap(f"{label}: without warm-up no run of {src['updates']} updates left the plateau at any "
                               f"rate from {src['lr_min']:g}: a sweep of this model needs longer runs (--set "
                               "updates=...)", 2))
    shape = f"your model ({_depth(cfg, task)[1]}, d={width}, FFN {cfg.d_ffn / cfg.d_model:.3g}d, {cfg.n_heads} heads)"
    if m["differences"]:
        lines += _wrap(f"{shape} differs from the nearest rows in: {'; '.join(m['differences'])}. An edge moves "
                       "with the model's shape and with the run's length, batch and optimizer: read these rows as "
                       f"another model's. To measure yours (bisected, 5 seeds, with and without warm-up): {command}", 2)
    else:
        lines += _wrap(f"{shape} has the nearest rows' depth, width, FFN, heads, dropout, positions, activation and "
                       "embedding scale; your run's length, batch and optimizer may differ, and an edge moves with "
                       f"them. To measure it with your run's settings: {command} (with --set updates=... --set "
                       "max_tokens=...)", 2)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m normlab.analysis.edges",
                                description="build the table of measured stability edges from a checkout's sweeps")
    p.add_argument("--results", default="docs/results", help="the folder of the committed sweeps")
    p.add_argument("--write", action="store_true", help="write the table into the package (normlab/assets)")
    args = p.parse_args(argv)
    table = collect(args.results)
    text = dumps(table)
    if args.write:
        _asset().write_text(text, encoding="utf-8")
        print(f"wrote {_asset()}: {len(table['edges'])} curves from {len(table['sources'])} sweeps")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
