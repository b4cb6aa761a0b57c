"""``report/index.html``: one self-contained page (images embedded) that says which claims hold at this scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normlab.files import write_atomic
from normlab.report.claims import LEARN_MARGIN, LEVEL, NOISE_SE, VERDICTS, corrected
from normlab.report.format import CSS, escape, format_number, html_table, img
from normlab.report.sweep import beyond_the_paper

__all__ = ["write_html", "format_number", "verdict_counts", "counts_sentence", "progress_sentence", "time_phrase",
           "baseline_lines", "machine_lines", "RUN_COLUMNS", "run_columns", "run_cells"]


def _verdict_class(v: str) -> str:
    return {"holds": "holds", "does not hold": "fails", "inconclusive": "inconclusive"}.get(v, "notrun")


def verdict_counts(claims: list[dict[str, Any]]) -> dict[str, int]:
    return {v: sum(c["verdict"] == v for c in claims) for v in VERDICTS}


def counts_sentence(claims: list[dict[str, Any]]) -> str:
    """"N claims hold, N do not hold, N are inconclusive, N were not run at this scale" (shared with REPORT.md)."""
    c = verdict_counts(claims)

    def n(k: int, one: str, many: str) -> str:
        return f"{k} {one if k == 1 else many}"

    return (f"{n(c['holds'], 'claim holds', 'claims hold')}, {n(c['does not hold'], 'does not hold', 'do not hold')}, "
            f"{n(c['inconclusive'], 'is inconclusive', 'are inconclusive')} (the test could not decide), "
            f"{n(c['not run at this scale'], 'was not run at this scale', 'were not run at this scale')}.")


def time_phrase(meta: dict[str, Any]) -> str:
    """"wall time N min" of the job, or for a report written with --report-only what the finished runs cost
    (shared with REPORT.md)."""
    train = meta.get("train_time_s")
    runs = f"{format_number(train / 60, '.1f')} min of training summed over the finished runs" if train else ""
    if meta.get("report_only"):
        return "report written with --report-only" + (f"; {runs}" if runs else "")
    wall = f"{format_number(meta.get('wall_time_s', 0) / 60, '.1f')} min"
    trained = {k: v for k, v in (meta.get("outcomes") or {}).items() if k not in ("cached", "skipped") and v}
    if meta.get("outcomes") and not trained:  # a job run again after its runs finished: its wall time is not theirs
        return (f"every training run had finished before this invocation, which took {wall} (the report, and the "
                f"analysis at initialisation if it had to run)" + (f"; {runs}" if runs else ""))
    return f"wall time {wall}" + (f" ({runs})" if runs else "")


def progress_sentence(meta: dict[str, Any], names: int = 6) -> str:
    """For a report written with ``--report-only``: which runs had not finished (the first ``names`` of them;
    results.json's meta lists all), shared with REPORT.md; "" for a report written at the end of the job."""
    if not meta.get("report_only"):
        return ""
    unfinished = meta.get("unfinished") or {}
    words = {"running": "running or stopped", "absent": "not started"}
    s = "Written with --report-only, training nothing: "
    if unfinished:
        listed = [f"{name} ({words.get(st, st)})" for name, st in list(unfinished.items())[:names]]
        more = len(unfinished) - len(listed)
        s += (f"{len(unfinished)} of the {meta.get('runs')} runs had not finished: " + ", ".join(listed)
              + (f" and {more} more (results.json's meta lists them)" if more else "") + ". A claim counts only its "
              "finished seeds, and a claim whose runs have none is missing. ")  # fmt: skip
    else:
        s += "every run had finished. "
    if meta.get("analysis_missing"):
        s += "Figure 3's analysis had not finished: its claims are missing. "
    if meta.get("width_missing"):
        s += "The width sweep had no finished run. "
    if unfinished or meta.get("analysis_missing") or meta.get("width_missing"):
        s += "Run the same command without --report-only to finish the job."
    return s.rstrip()


def machine_lines(results: dict[str, Any]) -> list[str]:
    """Where the runs trained, one line per machine with its runs (a grid completed in pieces on several machines
    says which ran what); [] when no run records its machine (runs trained before normlab recorded the CPU).
    Shared with REPORT.md."""
    runs = results.get("runs", {})
    if not any(r.get("machine") for r in runs.values()):
        return []
    by: dict[str, list[str]] = {}
    for name, r in runs.items():
        if r.get("status") in ("completed", "diverged", "cached"):
            by.setdefault(r.get("machine") or "not recorded (trained before normlab recorded the CPU)", []).append(name)
    return [f"{machine}: {len(names)} run(s): {', '.join(names)}" for machine, names in by.items()]


def baseline_lines(results: dict[str, Any]) -> list[str]:
    """The gates' reference numbers in words (shared with REPORT.md)."""
    base = results.get("baselines", {})
    out = []
    for kind, what in (("translation", "translation"), ("mlm", "masked-LM")):
        if kind in base:
            h = base[kind]["unigram_entropy"]
            plug = base[kind].get("plugin_entropy")
            out.append(f"{what}: unigram loss of the validation targets {h:.3f} nats per token (their cross-entropy "
                       f"under the training data's token frequencies; {base[kind]['tokens']:,} tokens"
                       + (f"; their own plug-in entropy {plug:.3f}" if plug is not None else "")
                       + f"); a reference run learned if the {100 * LEVEL:g}% t interval of its seed mean lies at "
                       f"or below {h - LEARN_MARGIN:.3f} nats ({LEARN_MARGIN:g} below it), did not learn if it lies "
                       "above, and its claims are inconclusive when it straddles that line")
    for task, b in base.get("finetune", {}).items():
        out.append(f"fine-tuning {task}: majority class {100 * b['majority']:.1f}% of {b['examples']:,} validation "
                   "pairs; the reference must beat it beyond its 95% interval")
    if out:
        out.append(f"an effect is the relative gap of two seed means with its {100 * LEVEL:g}% t interval (delta "
                   "method with both means' variances, Welch-Satterthwaite degrees of freedom, never narrower than "
                   f"{NOISE_SE:g} standard errors). A directional claim of size delta holds when the interval's low "
                   "end lies above delta, does not hold when its high end lies below delta, and is inconclusive "
                   f"between: each verdict errs at most about {100 * (1 - LEVEL) / 2:g}% of the time")
        out.append("a claim made of several tests (layers, placements, learning rates, parts) that any one of them "
                   "can decide (a union) reads that one at the Bonferroni-corrected level 1 - "
                   f"{1 - LEVEL:.2g}/m (e.g. {100 * corrected(2):g}% for 2 tests, {100 * corrected(12):.4g}% for "
                   "12); one that needs all of them (an intersection) reads each at "
                   f"{100 * LEVEL:g}%: either way the claim's verdict errs at most about {100 * (1 - LEVEL) / 2:g}% of "
                   "the time")
    return out


RUN_COLUMNS = ("run", "seed", "figures", "status", "updates", "final valid loss (nats)", "BLEU", "accuracy", "tokens/s",
               "wall (s)")  # fmt: skip


def run_columns(runs: Any) -> tuple[str, ...]:
    """RUN_COLUMNS, with "test BLEU" after "BLEU" when a run scored its test split (the long scale's
    test_checkpoint); the other scales' tables stay as they were."""
    if not any("test" in r for r in runs):
        return RUN_COLUMNS
    at = RUN_COLUMNS.index("BLEU") + 1
    return (*RUN_COLUMNS[:at], "test BLEU", *RUN_COLUMNS[at:])


def run_cells(r: dict[str, Any], columns: tuple[str, ...] = RUN_COLUMNS) -> list[str]:
    """The runs table's cells after the run's name (``columns[1:]``, from :func:`run_columns`), unescaped; shared
    with REPORT.md."""
    last = r["evals"][-1] if r["evals"] else {}
    status = r["status"] + (f" at update {r.get('diverged_at_update')}" if r["status"] == "diverged" else "")
    cell = {"seed": str(r.get("seed", "")), "figures": ", ".join(r["figures"]), "status": status,
            "updates": format_number(r.get("updates")), "final valid loss (nats)": format_number(last.get("nll")),
            "BLEU": format_number(last.get("bleu"), ".2f"),
            "test BLEU": format_number((r.get("test") or {}).get("bleu"), ".2f"),
            "accuracy": format_number(last.get("accuracy"), ".3f"),
            "tokens/s": format_number(r.get("tokens_per_s"), ".0f"), "wall (s)": format_number(r.get("seconds"), ".0f")}
    return [cell[c] for c in columns[1:]]


def _num(x: Any, fmt: str = ".3f") -> str:
    return escape(format_number(x, fmt))


def write_html(results: dict[str, Any], images: dict[str, Path], path: Path) -> Path:
    """Write the report page; ``images`` maps a figure id (fig2, fig3a, ...) to a PNG, embedded in the page."""
    meta = results.get("meta", {})
    claims = results.get("claims", [])
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>normlab reproduce: "
        f"{escape(meta.get('scale', ''))}</title><style>{CSS}</style></head><body>",
        "<h1>On Layer Normalization in the Transformer Architecture — reproduction</h1>",
        f"<p class='meta'>Xiong et al., ICML 2020. Scale <b>{escape(meta.get('scale'))}</b>: {escape(meta.get('description'))}."
        + (f" Corpus: {escape(meta['corpus'])}." if meta.get("corpus") else "") +
        f"<br>normlab {escape(meta.get('normlab_version'))}, torch {escape(meta.get('torch'))}, {escape(meta.get('device'))}, "
        f"{escape(meta.get('threads') or 'no training')}; {escape(time_phrase(meta))}; {escape(meta.get('finished'))}.</p>",
        f"<p><b>{escape(progress_sentence(meta))}</b></p>" if meta.get("report_only") else "",
        f"<p>{escape(counts_sentence(claims))}</p>",
        "<p class='small'><b>holds</b> / <b>does not hold</b>: the test could see the paper's effect (its reference "
        "runs learned the task, the seeds measured the noise) and saw it, or saw its absence or reverse. "
        "<b>inconclusive</b>: it could not decide, and the evidence says why.</p>",
        "<h2>Claims</h2><table><tr><th>id</th><th>claim (paper)</th><th>verdict</th><th>gate: did the reference "
        "learn?</th><th>effect (95% interval)</th><th>evidence</th><th>rule</th></tr>",
    ]
    for c in claims:
        parts.append(
            f"<tr><td>{escape(c['id'])}</td><td>{escape(c['claim'])}<div class='small'>{escape(c['source'])}</div></td>"
            f"<td class='{_verdict_class(c['verdict'])}'>{escape(c['verdict'])}</td>"
            f"<td class='small'>{escape(c.get('gate', ''))}</td><td>{escape(c.get('effect', ''))}</td>"
            f"<td class='small'>{escape(c['evidence'])}</td><td class='small'>{escape(c['rule'])}</td></tr>"
        )
    parts.append("</table>")
    lines = baseline_lines(results)
    if lines:
        parts.append("<h2>Gates</h2><ul>" + "".join(f"<li>{escape(x)}</li>" for x in lines) + "</ul>")
    parts.append("<h2>How the paper's settings map to this scale</h2><table><tr><th>setting</th><th>paper</th>"
                 "<th>here</th></tr>")
    for m in results.get("mappings", []):
        parts.append(f"<tr><td>{escape(m['what'])}</td><td>{escape(m['paper'])}</td><td>{escape(m['here'])}</td></tr>")
    parts.append("</table>")
    sections = [
        ("fig3", "Figure 3 and Lemmas 2-3: gradients and hidden states at initialisation"),
        ("fig2", "Figure 2: the warm-up ablation (Post-LN)"),
        ("fig4", "Figure 4: Pre-LN without warm-up against Post-LN with it; RAdam"),
        ("fig5", "Figure 5: BERT pre-training and fine-tuning"),
        ("fig6", "Figure 6: Post-LN at a fixed small learning rate"),
    ]
    for fig, title in sections:
        shown = [k for k in images if k == fig or k.startswith(fig)]
        parts.append(f"<h2>{escape(title)}</h2>")
        if not shown:
            parts.append("<p class='notrun'>not run at this scale</p>")
        for k in sorted(shown):
            parts.append(img(images[k]))
        if fig == "fig3" and results.get("analysis_summary"):
            parts.append(f"<pre class='small'>{escape(results['analysis_summary'])}</pre>")
    beyond = beyond_the_paper(results.get("width_sweep"))
    parts.append(f"<h2>{escape(beyond['title'])}</h2>")
    opening = "<p>" if beyond["tables"] else "<p class='notrun'>"
    parts.append("".join(f"{opening}{escape(x)}</p>" for x in beyond["sentences"]))
    for title, head, rows in beyond["tables"]:
        parts.append(f"<h3>{escape(title)}</h3>" + html_table(head, rows))
    for k in ("width_loss_vs_lr", "width_frontier"):
        if k in images:
            parts.append(img(images[k]))
    if where := machine_lines(results):
        parts.append("<h2>Where the runs trained</h2><ul>" + "".join(f"<li>{escape(x)}</li>" for x in where) + "</ul>")
    columns = run_columns(results.get("runs", {}).values())
    parts.append("<h2>Runs</h2><table><tr>" + "".join(f"<th>{escape(c)}</th>" for c in columns) + "</tr>")
    for r in results.get("runs", {}).values():
        cells = [escape(c) for c in run_cells(r, columns)]
        if r.get("error"):  # under the status
            cells[columns.index("status") - 1] += f"<div class='small'>{escape(r['error'][:300])}</div>"
        parts.append(
            f"<tr><td>{escape(r['name'])}<div class='small'>{escape(r['label'])}</div></td>"
            + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        )
    parts.append("</table>")
    parts.append("<p class='small'>Everything on this page is computed from <code>results.json</code> beside it "
                 "(the runs' metrics.jsonl and the analysis); the verdict rules are in "
                 "<code>normlab/report/claims.py</code>.</p></body></html>")  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "\n".join(parts))
    return path
