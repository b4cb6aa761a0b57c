"""The pieces both report pages are made of (the paper's report, report/html.py and report/markdown.py, and the
sweep's, report/sweep.py): the page's style, escaping, embedded images, numbers and tables in HTML and Markdown.
A floor below the pages, so that each page imports it rather than the other page."""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

__all__ = ["CSS", "escape", "format_number", "html_table", "img", "md_cell", "md_table"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1180px;margin:2em auto;padding:0 1em;
color:#222;line-height:1.45}
h1{font-size:1.6em;margin-bottom:.2em} h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;width:100%;font-size:.9em;margin:.6em 0} th,td{border:1px solid #ddd;padding:.35em .5em;
vertical-align:top;text-align:left} th{background:#f4f4f4}
.holds{background:#e3f5e1;font-weight:600} .fails{background:#fbe3e1;font-weight:600} .notrun{background:#eee;color:#555}
.inconclusive{background:#fff4d6;font-weight:600}
.meta{color:#555;font-size:.92em} img{max-width:100%;border:1px solid #eee;margin:.5em 0}
code{background:#f4f4f4;padding:0 .25em} .small{font-size:.85em;color:#555}
"""


def escape(x: Any) -> str:
    return html.escape(str(x))


def img(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{escape(path.stem)}" src="data:image/png;base64,{data}">'


def format_number(x: Any, fmt: str = ".3f") -> str:
    """A table cell's number: "–" when absent, "inf" for a diverged run's loss (shared with REPORT.md)."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return "inf" if math.isinf(x) else format(x, fmt)
    return str(x)


def html_table(head: list[str], rows: list[list[str]]) -> str:
    return ("<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>" +
            "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows) + "</table>")


def md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(map(md_cell, head)) + " |", "|" + "---|" * len(head)] +
            ["| " + " | ".join(map(md_cell, row)) + " |" for row in rows])  # fmt: skip
