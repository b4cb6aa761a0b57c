"""``report/REPORT.md``: the claims and runs of the report as Markdown, for a terminal, a diff or a pull request
(the HTML page embeds the figures; this file links to the PNGs beside it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from normlab.files import write_atomic
from normlab.report.format import md_table
from normlab.report.html import (
    baseline_lines,
    counts_sentence,
    machine_lines,
    progress_sentence,
    run_cells,
    run_columns,
    time_phrase,
)
from normlab.report.sweep import beyond_the_paper

__all__ = ["write_markdown"]


def _cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def write_markdown(results: dict[str, Any], images: dict[str, Path], path: Path) -> Path:
    """Write the claims table (verdict, evidence, rule), the runs table and links to ``images``."""
    meta = results.get("meta", {})
    claims = results.get("claims", [])
    lines = [
        "# On Layer Normalization in the Transformer Architecture — reproduction",
        "",
        f"Scale **{meta.get('scale')}**: {meta.get('description')}. "
        + (f"Corpus: {meta['corpus']}. " if meta.get("corpus") else "") + f"normlab {meta.get('normlab_version')}, "
        f"torch {meta.get('torch')}, {meta.get('device')}, {meta.get('threads') or 'no training'}; {time_phrase(meta)}; "
        f"{meta.get('finished')}.",
        "",
        *([f"**{progress_sentence(meta)}**", ""] if meta.get("report_only") else []),
        counts_sentence(claims),
        "",
        "| id | claim (paper) | verdict | gate: did the reference learn? | effect (95% interval) |",
        "|---|---|---|---|---|",
    ]
    lines += [f"| {c['id']} | {_cell(c['claim'])} ({_cell(c['source'])}) | **{c['verdict']}** | "
              f"{_cell(c.get('gate', ''))} | {_cell(c.get('effect', ''))} |" for c in claims]  # fmt: skip
    if base := baseline_lines(results):
        lines += ["", "Gates:", ""] + [f"- {x}" for x in base]
    lines += ["", "## Evidence", ""]
    lines += [f"- **{c['id']}** ({c['verdict']}): {c['evidence']}" for c in claims]
    lines += ["", "Rules (normlab/report/claims.py):", ""]
    lines += [f"- {c['id']}: {c['rule']}" for c in claims]
    if results.get("mappings"):  # the schedule, warm-ups and sizes a verdict was reached with, beside the paper's
        lines += ["", "## How the paper's settings map to this scale", "", "| setting | paper | here |", "|---|---|---|"]
        lines += [f"| {_cell(m['what'])} | {_cell(m['paper'])} | {_cell(m['here'])} |" for m in results["mappings"]]
    beyond = beyond_the_paper(results.get("width_sweep"))
    lines += ["", f"## {beyond['title']}", ""] + [_cell(x) + "\n" for x in beyond["sentences"]]
    for title, head, rows in beyond["tables"]:
        lines += [f"### {title}", ""] + md_table(head, rows) + [""]
    if where := machine_lines(results):
        lines += ["", "## Where the runs trained", ""] + [f"- {_cell(x)}" for x in where]
    columns = run_columns(results.get("runs", {}).values())
    lines += ["", "## Runs", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in results.get("runs", {}).values():
        lines.append("| " + " | ".join(_cell(c) for c in [r["name"], *run_cells(r, columns)]) + " |")
    if images:
        lines += ["", "## Figures", ""]
        for k, p in sorted(images.items()):
            rel = os.path.relpath(Path(p).resolve(), path.parent.resolve())
            lines.append(f"- [{k}]({Path(rel).as_posix()})")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "\n".join(lines) + "\n")
    return path
