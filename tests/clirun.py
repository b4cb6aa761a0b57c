"""``normlab`` as a user runs it, for the end-to-end CLI tests: a fresh interpreter, one thread, the repo root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def normlab(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "normlab", *args], input=stdin, capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600)  # fmt: skip


def sets(*items: str) -> list[str]:
    """``--set`` before each item."""
    return [a for item in items for a in ("--set", item)]
