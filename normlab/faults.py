"""The wording of faults: the one line the CLI prints (and a run's summary.json records) for an error of the machine
or of a library, and the hand-over of that line to torchrun. A floor below the CLI and the trainer, which both
speak it; it imports nothing of normlab."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

__all__ = ["fault_line", "report_to_torchrun"]


def _last_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def _raised_in(e: BaseException, *packages: str) -> bool:
    """Whether the innermost frame of ``e``'s traceback lies in one of ``packages`` (their own errors are plain
    RuntimeErrors: sentencepiece's "Vocabulary size is too high" or a model file it cannot parse)."""
    tb, last = e.__traceback__, None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return False
    parts = Path(last.tb_frame.f_code.co_filename).parts
    return any(p in parts for p in packages)


def fault_line(e: BaseException) -> str | None:
    """The one line for an error of the machine or of a library that reached the CLI (issue 36: OSError,
    safetensors, sentencepiece, yaml, memory, torch's overflow), or None for anything else, a bug of ours,
    whose traceback is wanted."""
    if isinstance(e, OSError):
        where = e.filename2 or e.filename  # a copy names its source first and the file it writes second
        what = e.strerror or _last_line(e)
        return f"{what}: {where}" if where else what
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return f"out of memory ({_last_line(e)}); use a smaller model, batch (data.max_tokens) or beam"
    if isinstance(e, OverflowError):
        return f"a number too large for the kernels ({_last_line(e)}); check the sizes in the configuration"
    name = type(e).__name__
    if name == "SafetensorError":
        return f"safetensors: {_last_line(e)}"
    if name.endswith("YAMLError") or _raised_in(e, "yaml"):
        return f"YAML: {_last_line(e)}"
    if isinstance(e, RuntimeError):
        text = _last_line(e)
        if _raised_in(e, "sentencepiece"):
            return f"sentencepiece: {text}"
        if "overflow" in text.lower() or "can't allocate memory" in text or "not enough memory" in text:
            return f"{text}; check the sizes in the configuration"
    return None


def report_to_torchrun(line: str) -> None:
    """Under torchrun, write ``line`` into the worker's error file (TORCHELASTIC_ERROR_FILE), so that torchrun's
    ChildFailedError report shows it where it would say "To enable traceback see ...". The report itself, a
    traceback of torchrun's own main, comes whatever the worker does."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        try:
            Path(path).write_text(json.dumps({"message": line, "timestamp": int(time.time())}), encoding="utf-8")
        except OSError:
            pass
