"""``report/REPORT.md``: the claims and runs of the report as Markdown, for a terminal, a diff or a pull request
(the HTML page embeds the figures; this file links to the PNGs beside it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from normlab.report.html import format_number, verdict_counts

__all__ = ["write_markdown"]


def _cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _num(x: Any, fmt: str = ".3f") -> str:
    return _cell(format_number(x, fmt))


def write_markdown(results: dict[str, Any], images: dict[str, Path], path: Path) -> Path:
    """Write the claims table (verdict, evidence, rule), the runs table and links to ``images``."""
    meta = results.get("meta", {})
    claims = results.get("claims", [])
    counts = verdict_counts(claims)
    lines = [
        "# On Layer Normalization in the Transformer Architecture — reproduction",
        "",
        f"Scale **{meta.get('scale')}**: {meta.get('description')}. normlab {meta.get('normlab_version')}, "
        f"torch {meta.get('torch')}, {meta.get('device')}, {meta.get('threads')}; wall time "
        f"{_num(meta.get('wall_time_s', 0) / 60, '.1f')} min; {meta.get('finished')}.",
        "",
        f"**{counts['holds']}** claims hold, **{counts['does not hold']}** do not hold, "
        f"**{counts['not run at this scale']}** were not run at this scale.",
        "",
        "| id | claim (paper) | verdict | evidence |",
        "|---|---|---|---|",
    ]
    lines += [f"| {c['id']} | {_cell(c['claim'])} ({_cell(c['source'])}) | **{c['verdict']}** | {_cell(c['evidence'])} |"
              for c in claims]  # fmt: skip
    lines += ["", "Rules (normlab/report/claims.py):", ""]
    lines += [f"- {c['id']}: {c['rule']}" for c in claims]
    lines += ["", "## Runs", "", "| run | figures | status | updates | final valid loss (nats) | BLEU | accuracy "
              "| tokens/s | wall (s) |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results.get("runs", {}).values():
        last = r["evals"][-1] if r["evals"] else {}
        status = r["status"] + (f" at update {r.get('diverged_at_update')}" if r["status"] == "diverged" else "")
        lines.append(f"| {r['name']} | {', '.join(r['figures'])} | {_cell(status)} | {_num(r.get('updates'))} | "
                     f"{_num(last.get('nll'))} | {_num(last.get('bleu'), '.2f')} | {_num(last.get('accuracy'), '.3f')} "
                     f"| {_num(r.get('tokens_per_s'), '.0f')} | {_num(r.get('seconds'), '.0f')} |")  # fmt: skip
    if images:
        lines += ["", "## Figures", ""]
        for k, p in sorted(images.items()):
            rel = os.path.relpath(Path(p).resolve(), path.parent.resolve())
            lines.append(f"- [{k}]({Path(rel).as_posix()})")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
