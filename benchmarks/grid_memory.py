"""Resident memory of a grid's worker against the same runs trained alone (issue 31, "Memory").

`normlab reproduce` and `normlab sweep` train their runs in long-lived worker processes (the local launcher's
pool: importing torch and building a model costs seconds, more than a small run), each training run after run. A
worker can hold more than a run trained alone by `normlab train`: what the allocator keeps from one run for the
next, what the pool itself costs. This benchmark measures both on the same runs:

1. the first ``--runs`` runs of reproduce's grid at ``--scale`` (Figure 4's, in the grid's order), cut to
   ``--updates`` updates, trained by ONE worker of the local launcher, one after another, as `reproduce --jobs 1`
   would; the worker's resident memory is sampled every 0.2 s from /proc (VmRSS, and VmHWM, the kernel's own
   peak), and each sample is assigned to the run the worker was training then;
2. each of those runs alone: ``python -m normlab train --config`` of the run's ``config.yaml`` (as the grid's run
   resolved it), its peak resident memory from the kernel (``wait4``'s ru_maxrss, the same figure as
   ``/usr/bin/time -v``; it covers normlab's re-exec, which keeps the pid).

Both sides run on the allocator normlab picks (``NORMLAB_ALLOCATOR``, normlab/allocator.py: jemalloc where the
machine has it): this process re-executes itself with it preloaded, as the ``normlab`` command does, and its
worker inherits it, and so does each run alone (the same ``LD_PRELOAD``; the runs' ``summary.json`` must name the
same allocator, else the benchmark stops). ``--allocator system`` measures the C library's. One thread per process
(reproduce's pool setting). The work does not depend on the machine's load, but when memory is handed back does
(jemalloc returned idle pages on a timer when the committed results were measured; since 2026-11-27 a training
process keeps them until the trainer's purge every 10 updates), so read a ratio within a few percent of 1 as no
difference until repeats measure the spread (the committed result is one measurement).

    python benchmarks/grid_memory.py                          # quick scale, 2 runs of 120 updates (~20 min)
    python benchmarks/grid_memory.py --allocator system       # the same on glibc
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

GUARD = "_NORMLAB_GRID_MEMORY_EXEC"


def _preload(allocator: str) -> None:
    """Re-execute this script (run as a program, not imported) with the allocator ``normlab`` would preload
    (normlab.allocator.plan), once."""
    from normlab import allocator as alloc

    os.environ[alloc.ENV] = allocator
    if os.environ.get(GUARD):
        return
    try:
        lib = alloc.plan(dict(os.environ), running=alloc.loaded())
    except alloc.AllocatorError as e:
        raise SystemExit(f"grid_memory: {e}") from None
    if lib is None:
        return
    env = {**alloc.with_preload(os.environ, lib), GUARD: "1"}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _gb(kib: int) -> float:
    """/proc's and getrusage's kB (KiB) in GB."""
    return kib * 1024 / 1e9


def _status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process in GB (empty when it has gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS", "VmHWM")):
                    out[line.split(":")[0]] = _gb(int(line.split()[1]))
    except OSError:
        pass
    return out


def _workers(pid: int) -> list[int]:
    """The local launcher's pool workers among this process's children: spawned interpreters running
    multiprocessing's ``spawn_main`` (not its resource tracker, nor a child between its fork and its exec, which
    shows this process's command line and pages)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        return []
    out = []
    for k in kids:
        try:
            with open(f"/proc/{k}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    out.append(k)
        except OSError:
            pass
    return out


def _reset_peak(pid: int) -> None:
    """Set the kernel's peak resident memory of ``pid`` (VmHWM) to its current value (proc(5), clear_refs 5);
    stop where the kernel does not allow it (a run's peak would then include every run before it)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except FileNotFoundError:
        return  # the process has gone
    except OSError as e:
        raise SystemExit(f"grid_memory: cannot reset the peak resident memory of pid {pid} ({e})") from None
    s = _status(pid)
    if s and s["VmHWM"] > s["VmRSS"] + 0.05:  # reset, then grown by at most a moment's allocations
        raise SystemExit(f"grid_memory: the peak resident memory of pid {pid} did not reset ({s})")


class Sampler(threading.Thread):
    """Samples the resident memory of the pool's worker until stopped. At each run's start line the kernel's
    peak (VmHWM) of the worker is reset, and at its end line read: each run's peak in the worker is the kernel's,
    spikes between two samples included, as ``alone`` reads it for a run trained alone."""

    PATTERN = re.compile(r"\[\s*\d+/\d+\] (start|resume|completed|failed|diverged|interrupted)\s+(\S+)")

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.current, self.stopped = "(before the first run)", False
        self.samples: list[tuple[float, int, str, float, float]] = []
        self.lock = threading.Lock()
        self.t0 = time.perf_counter()

    def sample(self) -> None:
        with self.lock:
            for pid in _workers(os.getpid()):
                s = _status(pid)
                if "VmRSS" in s:
                    self.samples.append((time.perf_counter() - self.t0, pid, self.current, s["VmRSS"], s["VmHWM"]))

    def run(self) -> None:
        while not self.stopped:
            self.sample()
            time.sleep(0.2)

    def say(self, line: str) -> None:
        """The grid's line (printed) and, for a run's start or end, the label of the samples that follow."""
        print(line, flush=True)
        if m := self.PATTERN.match(line):
            if m[1] in ("start", "resume"):
                with self.lock:
                    for pid in _workers(os.getpid()):
                        _reset_peak(pid)
                    self.current = m[2]
            else:
                self.sample()  # the run's last reading: its peak, before the label moves on
                with self.lock:
                    self.current = f"(after {m[2]})"

    def peak(self, run: str) -> float:
        """The worker's peak resident memory while it trained ``run`` (VmHWM since the run's start)."""
        return max((h for _, _, r, _, h in self.samples if r == run), default=float("nan"))


def alone(config: Path, out: Path) -> float:
    """Peak resident memory (GB) of ``python -m normlab train --config config``, from the kernel."""
    # this process's LD_PRELOAD as it is: normlab's re-exec leaves a process that preloads something alone (or
    # finds the allocator it asks for already running), so the run trains on this process's allocator
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "normlab", "train", "--config", str(config), "--out", str(out),
                                 "--quiet"], stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    if proc.returncode != 0:
        raise SystemExit(f"normlab train --config {config} failed: see {out.with_suffix('.log')}")
    return _gb(usage.ru_maxrss)


def main(argv: list[str] | None = None, *, preload: bool = False) -> int:
    """The benchmark; ``preload``: re-execute onto the chosen allocator first (only as a program: __main__)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default="quick", help="reproduce's scale whose runs are measured (default quick)")
    ap.add_argument("--updates", type=int, default=120, help="updates per run (default 120)")
    ap.add_argument("--runs", type=int, default=2, help="runs the worker trains one after another (default 2)")
    ap.add_argument("--allocator", default=os.environ.get("NORMLAB_ALLOCATOR", "auto"),
                    help="NORMLAB_ALLOCATOR for both sides: auto (default), system, jemalloc, tcmalloc")  # fmt: skip
    ap.add_argument("--out", default="runs/grid-memory", help="working folder, new or empty (runs, logs)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):  # finished runs would be skipped, killed ones resumed: not measured
        raise SystemExit(f"grid_memory: --out {out} is not empty; give a new folder")
    if preload:
        _preload(args.allocator)

    from normlab.allocator import running
    from normlab.device import cpu_name
    from normlab.experiments.figures import all_runs
    from normlab.experiments.grid import run_grid
    from normlab.experiments.reproduce import make_context
    from normlab.experiments.scales import get_scale

    scale = get_scale(args.scale)
    ctx = make_context(scale, ("fig4",))
    specs = []
    grid = all_runs(scale, ctx, ("fig4",))
    if not 1 <= args.runs <= len(grid):
        raise SystemExit(f"--runs {args.runs}: the {args.scale} scale's Figure 4 grid has {len(grid)} runs")
    for spec in grid[: args.runs]:
        warm = spec.config.schedule.warmup_updates
        if args.updates <= warm:
            raise SystemExit(f"--updates {args.updates}: {spec.name} warms up over {warm} updates; ask for more")
        specs.append(dataclasses.replace(spec, config=spec.config.replace(max_updates=args.updates)))
    print(f"# grid_memory: {cpu_name()}, {os.cpu_count()} cores; allocator {running()}; scale {args.scale}, "
          f"{len(specs)} runs x {args.updates} updates, 1 thread", flush=True)  # fmt: skip

    sampler = Sampler()
    sampler.start()
    t = time.perf_counter()
    outcomes = run_grid(specs, out / "grid", jobs=1, threads=1, say=sampler.say)
    sampler.stopped = True
    sampler.join()
    worker_s = time.perf_counter() - t
    if any(o.status != "completed" for o in outcomes.values()):
        raise SystemExit(f"a grid run did not complete: {outcomes}")
    standalone = {}
    for spec in specs:
        t = time.perf_counter()
        standalone[spec.name] = alone(out / "grid" / "runs" / spec.name / "config.yaml", out / "alone" / spec.name)
        print(f"alone {spec.name}: {standalone[spec.name]:.3f} GB ({time.perf_counter() - t:.0f} s)", flush=True)
        ours, theirs = (json.loads((d / "summary.json").read_text()).get("allocator")
                        for d in (out / "grid" / "runs" / spec.name, out / "alone" / spec.name))  # fmt: skip
        if ours != theirs:
            raise SystemExit(f"grid_memory: {spec.name} trained on {ours} in the worker and on {theirs} alone")

    workers = sorted({pid for _, pid, *_ in sampler.samples})
    if not workers or any(math.isnan(sampler.peak(spec.name)) for spec in specs):
        raise SystemExit("grid_memory: the worker's memory was not sampled (/proc/PID/task/PID/children needs a "
                         "kernel with CONFIG_PROC_CHILDREN)")  # fmt: skip
    print(f"\n## peak resident memory, GB ({len(workers)} worker process, {worker_s:.0f} s in the grid)")
    print(f"{'run':40s} {'alone':>8s} {'in the worker':>14s} {'ratio':>7s}")
    for spec in specs:
        inside = sampler.peak(spec.name)
        print(f"{spec.name:40s} {standalone[spec.name]:8.3f} {inside:14.3f} {inside / standalone[spec.name]:7.3f}")
    for before, after in itertools.pairwise(specs):  # from one run's end line to the next one's start line
        held = [r for _, _, run, r, _ in sampler.samples if run == f"(after {before.name})"]
        if held:
            print(f"between {before.name} and {after.name} the worker held up to {max(held):.3f} GB "
                  "(resident, sampled)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(preload=True))
