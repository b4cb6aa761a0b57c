"""The report layer's one entry for the experiments: ``normlab reproduce`` and ``normlab sweep`` write their reports
through this module and through no other report module (tests/test_layers.py holds them to it).

The experiments hand over their results as data (``results.json``'s and ``sweep.json``'s structures, the records
and dataclasses of normlab/results.py); the pages, figures and files are the report's business.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from normlab.files import write_atomic
from normlab.report.claims import evaluate_claims
from normlab.report.html import progress_sentence, write_html
from normlab.report.markdown import write_markdown
from normlab.report.plots import plot_all
from normlab.report.sweep import write_sweep_report

__all__ = ["evaluate_claims", "plot_all", "progress_sentence", "write_report", "write_sweep_report"]


def _json_default(x: Any) -> Any:
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return str(x)


def write_report(results: dict[str, Any], images: dict[str, Path], report: Path, *, html: bool = True) -> None:
    """The paper's report in the folder ``report``: results.json, written atomically (a ``--report-only`` in another
    process may be reading it, or writing the same folder), index.html (unless ``html`` is False) and REPORT.md,
    with the figures ``images``."""
    write_atomic(report / "results.json", json.dumps(results, indent=1, default=_json_default))
    if html:
        write_html(results, images, report / "index.html")
    write_markdown(results, images, report / "REPORT.md")
