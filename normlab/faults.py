"""The wording of faults: the one line the CLI prints (and a run's summary.json records) for an error of the machine
or of a library, and the hand-over of that line to torchrun. A floor below the CLI and the trainer, which both
speak it; it imports nothing of normlab.

A process's last word (:func:`final_line`) goes to stderr and into torchrun's error file. Under normlab's own
launcher (``normlab train --nproc-per-node N``, :mod:`normlab.train.launch`, which sets :data:`LAUNCHED` in its
ranks' environment) it goes into the error file only, with the exit code and whether the rank stopped because
another failed: the launcher prints the line of the rank that failed first, once for all ranks.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import sys
import time
from pathlib import Path

__all__ = ["fault_line", "report_to_torchrun", "final_line", "launched", "collective_timed_out", "die_with_parent",
           "LAUNCHED", "LAUNCHER_PID"]

LAUNCHED = "NORMLAB_LAUNCHED"  # "1" in the environment of the ranks that normlab's launcher starts


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


def collective_timed_out(e: BaseException) -> bool:
    """Whether ``e`` is a collective of torch.distributed that waited past its timeout for another rank
    (normlab.train.distributed: NORMLAB_DIST_TIMEOUT): gloo's "Timed out waiting 3000ms for recv operation to
    complete", NCCL's watchdog under TORCH_NCCL_BLOCKING_WAIT."""
    text = str(e)
    if "Timed out waiting" in text or "collective operation timeout" in text:
        return True
    return type(e).__name__ == "DistBackendError" and "timed out" in text.lower()


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
    if collective_timed_out(e):
        # gloo prefixes its source file ("[.../unbound_buffer.cc:78] Timed out waiting 3000ms ..."): not for users
        what = re.sub(r"^\[[^\]]*\]\s*", "", _last_line(e))
        return (f"another rank stopped answering: a collective waited past its timeout ({what}); it stalled or died "
                "(NORMLAB_DIST_TIMEOUT sets the wait, in seconds)")
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


_reported = False  # whether this process wrote its error file (report_to_torchrun)


LAUNCHER_PID = "NORMLAB_LAUNCHER_PID"  # the launcher's pid, in its ranks' environment (die_with_parent)


def die_with_parent(parent: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux's PR_SET_PDEATHSIG; nothing elsewhere):
    a grid's worker, or a rank of normlab's launcher, must not train on after the process that started it was
    killed (kill -9, the out-of-memory killer), holding the run's lock. ``parent``: the pid the caller expects as
    its parent; if it is gone already (it died before the request), exit now. Runs between fork and exec, or
    first thing in a spawned process; the setting survives execve (normlab.allocator's re-exec)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if parent and os.getppid() != parent:
        os._exit(1)


def launched() -> bool:
    """Whether this process is a rank that normlab's own launcher started (module docstring)."""
    return os.environ.get(LAUNCHED) == "1"


def reported() -> bool:
    """Whether this process has written its line into the error file already."""
    return _reported


def report_to_torchrun(line: str, *, code: int = 1, peer: bool = False) -> bool:
    """Under torchrun (or normlab's launcher), write ``line`` into the worker's error file (TORCHELASTIC_ERROR_FILE),
    so that torchrun's ChildFailedError report shows it where it would say "To enable traceback see ...". The
    report itself, a traceback of torchrun's own main, comes whatever the worker does. Beside torchrun's two fields,
    normlab's own: the exit ``code`` the process ends with, ``peer`` (it stopped because another rank failed) and
    the time to the microsecond, by which normlab's launcher picks the rank that failed first. Returns whether the
    file was written."""
    global _reported
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return False
    now = time.time()
    record = {"message": line, "timestamp": int(now), "normlab": {"exit": code, "peer": peer, "time": now}}
    try:
        Path(path).write_text(json.dumps(record), encoding="utf-8")
    except OSError:
        return False
    _reported = True
    return True


def final_line(line: str, code: int, *, peer: bool = False) -> None:
    """The last word of a process about to exit with ``code``: ``line`` on stderr (a ``peer``, a rank that stopped
    because another failed, says nothing there) and into the error file (:func:`report_to_torchrun`). Under
    normlab's launcher the error file only, where it could be written: the launcher prints one line for all ranks.

    One write of the line and its newline: with PYTHONUNBUFFERED, print() writes them separately, and two torchrun
    ranks failing at once interleaved their lines onto one (seen as a flaky
    test_config_error_under_torchrun_is_one_line_per_rank)."""
    if report_to_torchrun(line, code=code, peer=peer) and launched():
        return
    if not peer:
        import sys

        sys.stderr.write(line + "\n")
        sys.stderr.flush()
