"""File mechanics, the ground floor of every on-disk format normlab writes: atomic writes (a temporary file in the
same directory, fsync, rename, fsync the directory), strict JSON (RFC 8259: no NaN or Infinity), JSON lines, and
the removal of a directory tree that a kill cannot leave half-deleted under its name.

The run directory (normlab/rundir.py), the checkpoints (normlab/train/checkpoint.py), the data cache
(normlab/data/cache.py) and the reports write through these; this module imports nothing of normlab.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["UMASK", "fsync_dir", "json_line", "last_jsonl", "read_jsonl", "remove_tree", "strict_json", "sweep",
           "write_atomic", "write_json_atomic"]  # fmt: skip


def fsync_dir(path: str | Path) -> None:
    """Make a rename (or creation) inside ``path`` durable; a no-op where directories cannot be opened."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _read_umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it: put it back at once
    os.umask(mask)
    return mask


# read once, at import (in the main thread): os.umask is process-wide, and setting it while another thread creates a
# file would give that file the wrong mode
UMASK = _read_umask()


def write_atomic(path: str | Path, data: bytes | str) -> None:
    """Write ``data`` to ``path``: a temporary file in the same directory, fsync, rename, fsync the directory.
    A kill at any moment leaves the old file or the new one, never an empty or partial one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates the file 0600; the result gets the mode of the file it replaces, else that of a file
        # opened for writing (0666 less the umask), so that a report or summary stays readable by others
        if hasattr(os, "fchmod"):  # not on Windows, where the mode bits mean little
            os.fchmod(fd, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~UMASK)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite float replaced by None: JSON has no NaN or Infinity (RFC 8259), and
    ``json.dumps`` would write the tokens ``NaN`` / ``Infinity`` that strict parsers refuse."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def json_line(record: dict[str, Any]) -> str:
    """One strict-JSON line (a metrics.jsonl record)."""
    return json.dumps(strict_json(record), sort_keys=True, allow_nan=False, default=str)


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_atomic(path, json.dumps(strict_json(data), indent=1, sort_keys=True, allow_nan=False, default=str) + "\n")


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The records of a JSON-lines file; a line cut by a kill (or otherwise unreadable) is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    with open(path, "rb") as f:
        for raw in f:
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def last_jsonl(path: str | Path, kind: str, window: int = 8192) -> dict[str, Any] | None:
    """The last complete record of ``"type": kind`` in a JSON-lines file that is being appended to, read from the
    file's end (the last ``window`` bytes, doubled until one is found or the whole file is read): a grid watching
    its runs reads this every second, and a run's metrics.jsonl grows by a line per update. A first line cut by
    the seek and a last line still being written are skipped. None when there is no such record (or no file)."""
    try:
        f = open(path, "rb")
    except OSError:
        return None
    with f:
        size = f.seek(0, os.SEEK_END)
        while True:
            start = max(0, size - window)
            f.seek(start)
            lines = f.read(size - start).split(b"\n")
            lines.pop()  # after the last newline: b"" or a line still being written
            if start > 0 and lines:
                lines.pop(0)  # cut by the seek
            for raw in reversed(lines):
                try:
                    rec = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    continue
                if isinstance(rec, dict) and rec.get("type") == kind:
                    return rec
            if start == 0:
                return None
            window *= 2


def remove_tree(path: Path) -> None:
    """Delete a directory so that a kill midway leaves no partial copy under its name: rename it to a hidden
    ``.trash-*`` sibling first (atomic), then delete that (a later :func:`sweep` finishes an interrupted one)."""
    if not path.exists():
        return
    trash = Path(tempfile.mkdtemp(prefix=".trash-", dir=path.parent))
    os.replace(path, trash / path.name)
    fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


def sweep(directory: Path) -> None:
    """Remove what an interrupted save or deletion left in ``directory`` (hidden ``.tmp-*`` / ``.trash-*``)."""
    for pattern in (".tmp-*", ".trash-*", ".old-best-*"):
        for stale in directory.glob(pattern):
            shutil.rmtree(stale, ignore_errors=True)
