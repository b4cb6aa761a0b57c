"""The on-disk cache of tokenizers and binarized splits: content-addressed, written atomically.

Every cached file is named by a hash of everything that determines its content (the bytes of the input
files, the tokenizer, the settings, a format version), so a changed corpus or setting is a different file
and a stale one is never read. Files are written to a temporary name in the same directory and moved into
place with ``os.replace`` (atomic on POSIX and Windows), so a crash or a concurrent run never leaves a
half-written file under a final name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from normlab.config import DataConfig
from normlab.files import write_atomic

# Bump when the layout of a cached file changes: old files are then simply not found.
FORMAT_VERSION = 1


def cache_root(cfg: DataConfig) -> Path:
    """``cfg.cache_dir``, else ``$NORMLAB_CACHE``, else ``~/.cache/normlab``."""
    return Path(cfg.cache_dir or os.environ.get("NORMLAB_CACHE") or "~/.cache/normlab").expanduser()


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes (memoised on path, size and mtime: hashing the 11 MB of en-mono takes ~30 ms)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def digest(*parts: Any) -> str:
    """A short hex key for JSON-serialisable ``parts``."""
    text = json.dumps([FORMAT_VERSION, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def save_arrays(path: Path, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """An uncompressed ``.npz`` of ``arrays`` plus a JSON ``meta`` record, written atomically."""
    buf = io.BytesIO()
    payload = dict(arrays)
    payload["__meta__"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    np.savez(buf, **payload)
    write_atomic(path, buf.getvalue())


def load_arrays(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "__meta__"}
        meta = json.loads(z["__meta__"].tobytes().decode("utf-8"))
    return arrays, meta
