"""Resident memory of a grid's worker against the same runs trained alone (issue 31, "Memory").

`normlab reproduce` and `normlab sweep` train their runs in long-lived worker processes (the local launcher's
pool: importing torch and building a model costs seconds, more than a small run), each training run after run. A
worker can hold more than a run trained alone by `normlab train`: what the allocator keeps from one run for the
next, what the pool itself costs. This benchmark measures both on the same runs:

1. the first ``--runs`` runs of reproduce's grid at ``--scale`` (Figure 4's, in the grid's order), cut to
   ``--updates`` updates, trained by ONE worker of the local launcher, one after another, as `reproduce --jobs 1`
   would; the worker's resident memory is sampled every 0.2 s from /proc (VmRSS, and VmHWM, the kernel's own
   peak), and each sample is assigned to the run the worker was training then;
2. each of those runs alone: ``python -m normlab train --config`` of the config the grid wrote, its peak resident
   memory from the kernel (``wait4``'s ru_maxrss, the same figure as ``/usr/bin/time -v``).

Both sides run on the allocator normlab picks (``NORMLAB_ALLOCATOR``, normlab/allocator.py: jemalloc where the
machine has it): this process re-executes itself with it preloaded, as the ``normlab`` command does, and its
worker inherits it; ``--allocator system`` measures the C library's. One thread per process (reproduce's pool
setting). Resident memory does not depend on the machine's load, so the figures can be taken beside other jobs.

    python benchmarks/grid_memory.py                          # quick scale, 2 runs of 120 updates (~10 min)
    python benchmarks/grid_memory.py --allocator system       # the same on glibc
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

GUARD = "_NORMLAB_GRID_MEMORY_EXEC"


def _preload(allocator: str) -> None:
    """Re-execute this script with the allocator ``normlab`` would preload (normlab.allocator.plan), once."""
    from normlab import allocator as alloc

    os.environ[alloc.ENV] = allocator
    if os.environ.get(GUARD):
        return
    lib = alloc.plan(dict(os.environ), running=alloc.loaded())
    if lib is None:
        return
    env = dict(os.environ, **{GUARD: "1"})
    env["LD_PRELOAD"] = f"{env['LD_PRELOAD']}:{lib}" if env.get("LD_PRELOAD", "").strip() else str(lib)
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _status(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process in GB (empty when it has gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS", "VmHWM")):
                    out[line.split(":")[0]] = int(line.split()[1]) / 1e6
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
    """Set the kernel's peak resident memory of ``pid`` (VmHWM) to its current value (proc(5), clear_refs 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


class Sampler(threading.Thread):
    """Samples the resident memory of the pool's worker until stopped. At each run's start line the kernel's
    peak (VmHWM) of the worker is reset, and at its end line read: each run's peak in the worker is the kernel's,
    spikes between two samples included, as ``alone`` reads it for a run trained alone."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.current, self.stopped = "(between runs)", False
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
        print(line, flush=True)
        if m := re.match(r"\[\s*\d+/\d+\] (start|completed|failed|diverged)\s+(\S+)", line):
            if m[1] == "start":
                self.sample()
                with self.lock:
                    for pid in _workers(os.getpid()):
                        _reset_peak(pid)
                    self.current = m[2]
            else:
                self.sample()  # the run's last reading: its peak, before the label moves on
                with self.lock:
                    self.current = "(between runs)"

    def peak(self, run: str) -> float:
        """The worker's peak resident memory while it trained ``run`` (VmHWM since the run's start)."""
        return max((h for _, _, r, _, h in self.samples if r == run), default=float("nan"))


def alone(config: Path, out: Path) -> float:
    """Peak resident memory (GB) of ``python -m normlab train --config config``, from the kernel."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("LD_PRELOAD", None)  # normlab re-executes itself onto the same allocator (NORMLAB_ALLOCATOR is set)
    env.pop("_NORMLAB_ALLOCATOR_EXEC", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "normlab", "train", "--config", str(config), "--out", str(out),
                                 "--quiet"], stdout=log, stderr=subprocess.STDOUT, env=env)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"normlab train --config {config} failed: see {out.with_suffix('.log')}")
    return usage.ru_maxrss / 1e6  # KB on Linux


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default="quick", help="reproduce's scale whose runs are measured (default quick)")
    ap.add_argument("--updates", type=int, default=120, help="updates per run (default 120)")
    ap.add_argument("--runs", type=int, default=2, help="runs the worker trains one after another (default 2)")
    ap.add_argument("--allocator", default=os.environ.get("NORMLAB_ALLOCATOR", "auto"),
                    help="NORMLAB_ALLOCATOR for both sides: auto (default), system, jemalloc, tcmalloc")  # fmt: skip
    ap.add_argument("--out", default="grid-memory", help="working folder (runs, logs)")
    args = ap.parse_args(argv)
    _preload(args.allocator)

    from normlab.allocator import running
    from normlab.device import cpu_name
    from normlab.experiments.figures import all_runs
    from normlab.experiments.grid import run_grid
    from normlab.experiments.reproduce import make_context
    from normlab.experiments.scales import get_scale

    out = Path(args.out)
    scale = get_scale(args.scale)
    ctx = make_context(scale, ("fig4",))
    specs = []
    for spec in all_runs(scale, ctx, ("fig4",))[: args.runs]:
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

    workers = sorted({pid for _, pid, *_ in sampler.samples})
    print(f"\n## peak resident memory, GB ({len(workers)} worker process, {worker_s:.0f} s in the grid)")
    print(f"{'run':40s} {'alone':>8s} {'in the worker':>14s} {'ratio':>7s}")
    for spec in specs:
        inside = sampler.peak(spec.name)
        print(f"{spec.name:40s} {standalone[spec.name]:8.3f} {inside:14.3f} {inside / standalone[spec.name]:7.3f}")
    between = [r for _, _, run, r, _ in sampler.samples if run == "(between runs)"]
    if between:
        print(f"between runs the worker held up to {max(between):.3f} GB (resident, sampled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
