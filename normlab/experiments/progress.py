"""Watching a grid while it runs (issue 32, "a job a person can watch").

A quick ``normlab reproduce`` trains for 30-40 minutes between the line that starts a run and the line that ends
it. While the grid runs, this module shows, from the grid's own process:

* **on a terminal** (the stream is a TTY): one live block of a few lines, redrawn in place about once a second:
  updates done of the total over every run of the grid, the runs in flight with their latest update and training
  loss, the grid's measured pace and the ETA. The grid's start/end lines go through :meth:`GridWatch.say`, which
  clears the block, writes the line and draws the block again below it, so a line is never cut by the display;
* **without one** (a log file, CI, nohup): the same figures as one plain line every :data:`LINE_EVERY_S`
  seconds (``--progress-every``), the start/end lines as before;
* nothing with ``--quiet``.

**Where the figures come from.** A run is a process of its own, started by whichever launcher (local workers,
torchrun, Ray, SLURM); each writes a ``{"type": "train", "update": ..., "loss": ...}`` line per update to its
run folder's metrics.jsonl. The grid reads the last train record of each run in flight from the end of that file
(:meth:`normlab.rundir.RunDir.last_metric`: a seek to the end and the last few KB, only when the file's size has
changed), which works the same on every launcher that shares the run folders with the grid (the remote ones
need a shared file system already).

**The pace and the ETA** (:func:`pace`, :func:`eta`): seconds per update of the grid as a whole (wall time over
the updates made by all its runs together), so that the jobs running in parallel, validation, checkpoints and
every run's start-up are counted as they happen. The estimate that reproduce and sweep print at the start is the
same arithmetic with nothing measured yet: the probe's pace (budget.py) over the grid's lanes (*The tail*, below).
As the grid runs, the measured pace takes over from the probe's (a weighted mean, :data:`PRIOR_WEIGHT_S`).

**The tail** (:func:`lanes_left`): the pace is measured while ``jobs`` runs go side by side; once fewer runs are left
than jobs (the last run of an odd grid), the grid makes updates that much slower, while a run's own pace stays.
So with ``jobs`` lanes the ETA is the updates left in the busiest lane, each run in flight keeping its lane and
each pending run going, in grid order, to the lane that frees first (what run_grid does), at the pace of one run,
``pace x lanes``: the updates left times the pace while every lane is busy, longer at the tail. Measured before
this (the quick scale's 9th run alone, 2026-11-27): "ETA 4 min" with 769 updates of one run left at 0.66 s each.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

from normlab.config import ConfigError
from normlab.rundir import RunDir

__all__ = ["LINE_EVERY_S", "PRIOR_WEIGHT_S", "ProgressSettings", "GridWatch", "Snapshot", "pace", "eta",
           "lanes_left", "duration", "add_progress_arguments", "progress_from_args"]  # fmt: skip

LINE_EVERY_S = 300.0
"""Without a terminal, a progress line every 5 minutes. Why 5: the common CI services stop a job that has written
nothing for 10 minutes (CircleCI's ``no_output_timeout`` and Travis CI's default), so a line at half that keeps a
grid alive there with a margin; and over a quick reproduce (60-140 minutes, 20-30 runs of a few minutes each) it
adds 12-28 lines beside the grid's own ~50 start/end lines: a log that a person can still read, where a line a
minute would bury the start/end lines in progress lines."""

PRIOR_WEIGHT_S = 120.0
"""How much the probe's pace counts once the grid measures its own: as much as 2 minutes of the grid. The first
minutes are the least representative of a grid (every worker imports torch and loads its data, ~15 s each:
sweep.py's _WORKER_START_S; each run times its attention kernels), so the probe carries the ETA through them; after
10 minutes the grid's own pace weighs 5 to 1, after 30 minutes 15 to 1."""

REFRESH_S = 1.0
"""On a terminal, the block is redrawn (and the runs' metrics.jsonl read) at most once a second."""

LIVE_RUNS = 8
"""On a terminal, at most this many runs in flight get a line each (a cluster grid may have hundreds submitted)."""


def pace(done: float, elapsed: float, *, prior: float | None = None,
         prior_weight_s: float = PRIOR_WEIGHT_S) -> float | None:  # fmt: skip
    """Seconds per update of the grid as a whole: ``elapsed`` seconds of the grid over the ``done`` updates its runs
    made in that time (all runs together), the probe's ``prior`` (seconds per grid update, budget.Estimate.pace)
    counted as ``prior_weight_s`` seconds more in which it would have made ``prior_weight_s / prior`` updates::

        pace = (elapsed + W) / (done + W / prior)     (no prior: elapsed / done)

    So nothing measured gives the prior, and the measured pace ``elapsed / done`` takes over as the grid goes (its
    weight against the prior's is elapsed : W). None when there is neither a prior nor an update made."""
    if prior is not None and prior > 0 and math.isfinite(prior):
        return prior * (elapsed + prior_weight_s) / (done * prior + prior_weight_s)  # the same, exact at 0, 0
    return elapsed / done if done > 0 else None


def eta(left: float, *, done: float = 0.0, elapsed: float = 0.0, prior: float | None = None,
        prior_weight_s: float = PRIOR_WEIGHT_S) -> float | None:  # fmt: skip
    """Seconds until the grid's ``left`` updates are made, at :func:`pace`. With nothing measured yet (``done`` 0,
    ``elapsed`` 0) it is the estimate printed at the start: ``left x prior``. None when no pace is known."""
    p = pace(done, elapsed, prior=prior, prior_weight_s=prior_weight_s)
    return None if p is None else max(left, 0.0) * p


def lanes_left(running: Sequence[float], pending: Sequence[float], lanes: int) -> float:
    """The updates the busiest of ``lanes`` parallel workers still has to make (module doc, *The tail*): each run in
    flight keeps its lane (``running``: the updates it has left), each of ``pending`` (their lengths, in the order
    they start) goes to the lane that frees first. ``lanes`` <= 0 (a cluster that runs everything at once): the
    longest run left."""
    if lanes <= 0:
        return max([*running, *pending], default=0.0)
    heap = [max(0.0, float(n)) for n in running] + [0.0] * max(0, lanes - len(running))
    heapq.heapify(heap)
    for n in pending:
        heapq.heapreplace(heap, heap[0] + max(0.0, float(n)))
    return max(heap, default=0.0)


def duration(seconds: float | None) -> str:
    """``45 s``, ``23 min``, ``2 h 05 min``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min"


def _rate(seconds_per_update: float | None) -> str:
    if seconds_per_update is None or seconds_per_update <= 0:
        return "pace -"
    if seconds_per_update <= 1:
        return f"{1 / seconds_per_update:.1f} updates/s"
    return f"{seconds_per_update:.1f} s/update"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProgressSettings:
    """How a grid shows its progress (``--quiet``, ``--progress-every``)."""

    mode: Literal["auto", "live", "lines", "off"] = "auto"
    """auto: ``live`` when the stream is a terminal, else ``lines``; off: neither (the start/end lines stay)."""
    every_s: float = LINE_EVERY_S
    """``lines``: seconds between two progress lines."""
    stream: TextIO | None = None
    """Where the live block is drawn (default: sys.stderr, where the grid's lines go)."""


def add_progress_arguments(p: Any) -> None:
    """``--quiet`` and ``--progress-every`` for the commands that run a grid (reproduce, sweep, finetune)."""
    p.add_argument("--quiet", action="store_true", help="no live display of the grid on a terminal and no progress "
                   "lines without one (the lines that start and end each run stay)")  # fmt: skip
    p.add_argument("--progress-every", type=float, default=LINE_EVERY_S / 60, metavar="MINUTES",
                   help="without a terminal (a log file, CI, nohup), a progress line of the grid every MINUTES "
                   f"(default {LINE_EVERY_S / 60:g}: under the 10 minutes after which CI services stop a silent "
                   "job)")  # fmt: skip


def progress_from_args(args: Any) -> ProgressSettings:
    if args.progress_every <= 0:
        raise ConfigError(f"--progress-every must be > 0 minutes, got {args.progress_every:g}")
    return ProgressSettings(mode="off" if args.quiet else "auto", every_s=args.progress_every * 60)


@dataclasses.dataclass
class _Run:
    rundir: RunDir
    total: int  # updates the run makes in all; 0 while unknown (an epoch-bounded run before its summary says)
    state: str = "pending"  # pending / running / ended
    base: int = 0  # the update it resumed from (made in an earlier session: not this grid's pace)
    update: int = 0  # the latest update read from its metrics.jsonl
    loss: float | None = None
    record: bool = False  # a train record has been read
    seen: int = -1  # metrics.jsonl's size when last read (-1: never)
    finished_before: bool = False  # it had finished before this grid started (it takes no lane)
    pending: bool = False  # its summary's length is a cap that budget_hours has yet to replace


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """The figures the display shows, at one moment."""

    done: int  # updates done of the grid, finished runs at their totals
    total: int  # updates of every run whose length is known
    unknown: int  # runs whose length is not known yet
    finished: int  # runs that have ended (or had finished before this grid)
    runs: int
    running: list[tuple[str, int, int, float | None, bool]]  # name, update, total, loss, any record yet
    elapsed: float
    made: int  # updates made by this grid's runs since it started (not those of an earlier session)
    pace: float | None  # seconds per grid update (:func:`pace`: the probe's corrected by the measured one)
    eta: float | None


class GridWatch:
    """The live display or the periodic lines of one grid (module doc). The grid tells it what happens
    (:meth:`add`, :meth:`started`, :meth:`ended`), writes its lines through :meth:`say`, calls :meth:`tick` in its
    polling loop and :meth:`close` at the end. ``prior``: the probe's seconds per grid update (or None);
    ``clock``: monotonic seconds (a test's fake clock); ``jobs``: the runs the grid keeps going side by side (0: no
    limit, or not known: the ETA is then the updates left at the grid's pace)."""

    def __init__(self, say: Callable[[str], None], settings: ProgressSettings | None = None, *,
                 prior: float | None = None, clock: Callable[[], float] = time.monotonic,
                 jobs: int = 0) -> None:  # fmt: skip
        settings = settings or ProgressSettings()
        self._say = say
        self.stream = settings.stream or sys.stderr
        mode = settings.mode
        if mode == "auto":
            mode = "live" if _isatty(self.stream) else "lines"
        self.mode = mode
        self.every_s = settings.every_s
        self.prior = prior
        self.jobs = max(0, int(jobs))
        self.clock = clock
        self.t0 = clock()
        self.runs: dict[str, _Run] = {}
        self._last_line = self.t0
        self._last_refresh = -math.inf
        self._drawn = 0  # lines of the live block now on the screen
        self._closed = False

    # ------------------------------------------------------------------------------------- what happens

    def add(self, name: str, run_dir: str | Path, total: int, *, finished: bool = False) -> None:
        """A run of the grid, ``total`` updates long (0: not known yet; read from its summary once it runs);
        ``finished``: it had finished before this grid started."""
        self.runs[name] = _Run(RunDir(run_dir), max(0, int(total)), "ended" if finished else "pending",
                               finished_before=finished)
        if finished:
            self.runs[name].update = self.runs[name].base = self.runs[name].total

    def started(self, name: str, base: int = 0) -> None:
        """The run was submitted; ``base``: the update of the checkpoint it resumes from."""
        r = self.runs[name]
        r.state, r.base, r.update, r.seen, r.record = "running", base, base, -1, False

    def ended(self, name: str) -> None:
        """The run ended (completed, diverged or failed) or was skipped: its last record is read once more."""
        r = self.runs[name]
        if r.state == "running":
            self._read(r)
        r.state = "ended"

    def say(self, line: str) -> None:
        """One of the grid's own lines: above the live block, which is drawn again below it."""
        if self.mode == "live" and self._drawn:
            self._clear()
        self._say(line)
        if not self._closed:
            self._draw()

    def tick(self) -> None:
        """Called from the grid's loop: on a terminal, read the runs and redraw at most every :data:`REFRESH_S`;
        without one, read them and write a line every ``every_s`` seconds."""
        now = self.clock()
        if self._closed:
            return
        if self.mode == "live" and now - self._last_refresh >= REFRESH_S:
            self._last_refresh = now
            self._read_all()
            self._draw()
        elif self.mode == "lines" and now - self._last_line >= self.every_s:
            self._last_line = now
            self._read_all()
            self._say(self.line())

    def close(self) -> None:
        """The grid is over: the live block is taken off the screen (the grid's lines say how it ended)."""
        if self.mode == "live" and self._drawn:
            self._clear()
        self._closed = True

    # --------------------------------------------------------------------------------------------- figures

    def snapshot(self) -> Snapshot:
        done = total = unknown = finished = made = 0
        running = []
        for name, r in self.runs.items():
            made += max(0, r.update - r.base)
            if r.state == "ended":  # at its length, or where it stopped when that was never known
                finished += 1
                done += r.total or r.update
                total += r.total or r.update
                continue
            if r.total:
                done += min(r.update, r.total)
                total += r.total
            else:  # neither in the total nor in what is done, until its length is known
                unknown += 1
            if r.state == "running":
                running.append((name, r.update, r.total, r.loss, r.record))
        elapsed = self.clock() - self.t0
        p = pace(made, elapsed, prior=self.prior)
        left = max(total - done, 0)
        eta_s = None if p is None else left * p
        # the lanes: as many as the grid runs side by side, or fewer when it trains fewer runs than that
        lanes = min(self.jobs, sum(1 for r in self.runs.values() if not r.finished_before))
        if p is not None and lanes > 0:
            flying = [max(0, r.total - r.update) for r in self.runs.values() if r.state == "running" and r.total]
            queued = [r.total for r in self.runs.values() if r.state == "pending" and r.total]
            eta_s = lanes_left(flying, queued, lanes) * p * lanes
        return Snapshot(done, total, unknown, finished, len(self.runs), running, elapsed, made, p, eta_s)

    def line(self) -> str:
        """The figures in one line (the periodic line without a terminal)."""
        s = self.snapshot()
        grid, runs = self._figures(s, ", ")
        running = ", ".join(_run_text(*r) for r in s.running)
        return f"grid: {grid}; {runs}" + (f": {running}" if running else "")

    def block(self, width: int = 100) -> list[str]:
        """The figures as a few lines, each at most ``width`` characters (the live display)."""
        s = self.snapshot()
        grid, runs = self._figures(s, " | ")
        share = min(1.0, s.done / s.total) if s.total else 0.0
        bar = "#" * round(20 * share) + "." * (20 - round(20 * share))
        lines = [f"grid [{bar}] {grid}", f"  {runs}" + (":" if s.running else "")]
        lines += [f"    {_run_text(*r)}" for r in s.running[:LIVE_RUNS]]
        if len(s.running) > LIVE_RUNS:
            lines.append(f"    ... and {len(s.running) - LIVE_RUNS} more")
        return [ln if len(ln) <= width else ln[: width - 3] + "..." for ln in lines]

    def _figures(self, s: Snapshot, sep: str) -> tuple[str, str]:
        """The grid's figures (updates, ETA, pace), and its runs' (done, in flight, time so far)."""
        share = f" ({100 * s.done / s.total:.0f}%)" if s.total else ""
        unknown = f" (+{s.unknown} run(s) of unknown length)" if s.unknown else ""
        # the pace shown is the grid's own once it has made an update; the ETA's blends in the probe's, fading
        shown = _rate(s.elapsed / s.made) if s.made else f"{_rate(self.prior)} (probe)" if self.prior else "pace -"
        grid = f"{s.done:,}/{s.total:,} updates{share}{unknown}{sep}ETA {duration(s.eta)}{sep}{shown}"
        return grid, f"{s.finished}/{s.runs} runs done, {len(s.running)} running, {duration(s.elapsed)} in"

    # ------------------------------------------------------------------------------------------- mechanics

    def _read_all(self) -> None:
        for r in self.runs.values():
            if r.state == "running":
                self._read(r)

    def _read(self, r: _Run) -> None:
        """The run's length from its summary while it is not known; its latest train record when its metrics.jsonl
        has grown (a stat per run, else nothing read)."""
        if not r.total or r.pending:
            summary = r.rundir.summary()
            r.total = int(summary.get("total_updates") or 0)
            # budget_hours: until the run decides its length, total_updates is its cap (read again each time)
            budget = summary.get("budget")
            r.pending = isinstance(budget, dict) and budget.get("total_updates") is None
        try:
            size = r.rundir.metrics_path.stat().st_size
        except OSError:  # not written yet (a run starting, or queued on a cluster)
            return
        if size == r.seen:
            return
        r.seen = size
        rec = r.rundir.last_metric("train")
        if rec is not None and isinstance(rec.get("update"), int):
            r.update, r.record = rec["update"], True
            loss = rec.get("loss")
            r.loss = float(loss) if isinstance(loss, (int, float)) else None  # null: not finite

    def _draw(self) -> None:
        if self.mode != "live" or self._closed:
            return
        lines = self.block(_columns(self.stream) - 1)  # a line that wraps would break the redraw
        out = self._erase() + "".join(f"{ln}\n" for ln in lines)
        self.stream.write(out)
        self.stream.flush()
        self._drawn = len(lines)

    def _erase(self) -> str:
        # up to the block's first line, then clear to the end of the screen (the block is the last thing on it)
        return f"\x1b[{self._drawn}A\r\x1b[J" if self._drawn else ""

    def _clear(self) -> None:
        self.stream.write(self._erase())
        self.stream.flush()
        self._drawn = 0


def _run_text(name: str, update: int, total: int, loss: float | None, seen: bool) -> str:
    if not seen:
        return f"{name} starting"
    loss_text = "nan" if loss is None else f"{loss:.3f}"
    return f"{name} {update:,}/{total:,} loss {loss_text}" if total else f"{name} {update:,} loss {loss_text}"


def _columns(stream: Any) -> int:
    """The width of the terminal ``stream`` is (stderr's, which may be a terminal while stdout is a file)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no file descriptor (a test's stream), or not a terminal
        return shutil.get_terminal_size((100, 24)).columns  # $COLUMNS, else stdout's, else 100


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False
