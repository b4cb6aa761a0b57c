"""The grid runner: every run in its own directory, in a process of its own.

``OUT/runs/NAME/`` is an ordinary ``normlab train`` run directory; ``OUT/configs/NAME.yaml`` the config it was
started with; ``OUT/logs/NAME.log`` its output. Running the grid again

* skips a run whose ``summary.json`` says ``completed`` or ``diverged`` (a diverged run is a result),
* resumes a run that has a checkpoint (it was killed),
* starts over a run killed before its first checkpoint,
* records a run that fails (an exit code other than 0 or 3) as ``failed`` with one line (:func:`failure_line`: the
  error the run said last, not torchrun's report that follows it), and goes on,
* refuses, before it starts anything, a directory holding a run of the same name trained with other settings
  (:func:`changed_settings`: e.g. a scale whose schedule changed since), so that a report never mixes them.

``jobs`` runs go in parallel, each with ``threads`` CPU threads (small models train several times faster as
two one-thread processes than as one two-thread process on 2 cores). Locally, each job is a long-lived worker
process that trains one run after another (importing torch and building an optimizer cost ~8 s per process:
more than a small run itself); ``launcher="torchrun"`` hands each run to ``torchrun --standalone
--nproc_per_node N`` instead. Fine-tuning runs wait for their pre-training run. Workers and children die with
the grid process (PR_SET_PDEATHSIG), so a killed grid leaves no orphan writing into its runs.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from normlab.config import ConfigError, TrainConfig, flat_dict
from normlab.experiments.figures import RunSpec
from normlab.files import write_atomic
from normlab.rundir import RunDir
from normlab.train.run import train
from normlab.train.throughput import limit_onednn_cache
from normlab.train.trainer import EXIT_DIVERGED

__all__ = ["RunOutcome", "run_grid", "run_status", "changed_settings", "failure_line", "FINISHED"]

# What a run's result does not depend on: checkpoint and log cadence; the device (`auto` on one invocation and
# `cpu` on the next are the same run; precision, which changes the numbers, does count); the attention kernel
# (the kernels compute one function and differ in rounding only, as a run on another CPU does); the paths
# run_grid fills in for a fine-tuning run (its parent's checkpoint and tokenizer); the sizes the trainer fits to
# the data.
_NOT_THE_RESULT = frozenset({"save_every", "keep_last", "keep_every", "log_every", "device", "attention",
                             "init_from", "data.tokenizer", "model.vocab_size", "model.num_classes"})  # fmt: skip


def changed_settings(spec: RunSpec, run_dir: Path) -> list[str]:
    """The settings (``key: saved -> wanted``) in which the run in ``run_dir`` differs from ``spec``, ignoring
    those its result does not depend on; [] for an absent run or the same one. A setting the saved config lacks
    (written by an older normlab) is the default it ran with, so a new setting counts where the grid's value is
    not its default (e.g. ``schedule.decay_from``)."""
    saved = RunDir(run_dir).read_config_dict()
    if saved is None:
        return []
    # absent keys are their defaults (no validation: this cannot refuse or raise on an odd saved config)
    theirs = {**flat_dict(type(spec.config)().to_dict()), **flat_dict(saved)}
    return [f"{k}: {theirs[k]!r} -> {v!r}" for k, v in flat_dict(spec.config.to_dict()).items()
            if k not in _NOT_THE_RESULT and k in theirs and theirs[k] != v]  # fmt: skip


def check_not_stale(specs: list[RunSpec], out: Path) -> None:
    """A ConfigError when a run of ``specs`` already in ``out`` was trained with other settings (another scale, a
    corpus, a --set): neither the grid nor a report may take it for this grid's run."""
    stale = {s.name: d for s in specs if (d := changed_settings(s, out / "runs" / s.name))}
    if stale:
        lines = "; ".join(f"{name} ({', '.join(d[:3])}{', ...' if len(d) > 3 else ''})" for name, d in stale.items())
        raise ConfigError(f"{out}: {len(stale)} run(s) there were trained with other settings than this grid's: "
                          f"{lines}. Remove them (or choose another output directory) to run them again.")


FINISHED = ("completed", "diverged")


def others_note(specs: list[RunSpec], runs: Path) -> str:
    """For --report-only's "nothing of this grid has finished": the finished runs in ``runs`` that are not the
    grid's (another --scale, --figures or preset wrote the folder), or ""."""
    names = {s.name for s in specs}
    others = sorted(d.name for d in runs.iterdir() if d.is_dir() and d.name not in names
                    and run_status(d) in FINISHED) if runs.is_dir() else []  # fmt: skip
    if not others:
        return ""
    return (f" It holds {len(others)} finished run(s) of another grid (e.g. {others[0]}): was it written with another "
            "--scale, --figures or --set? Give the same ones.")


def any_finished(runs: Path) -> bool:
    """Whether any run directory under ``runs`` has finished (for --report-only: is there anything to report)."""
    return runs.is_dir() and any(run_status(d) in FINISHED for d in runs.iterdir() if d.is_dir())


@dataclasses.dataclass
class RunOutcome:
    name: str
    status: str  # completed / diverged / failed / skipped (a parent failed) / cached (finished before)
    seconds: float = 0.0
    error: str = ""


def run_status(run_dir: Path) -> str | None:
    """The status in ``summary.json`` (``running`` while a run is in progress or was killed), or None."""
    return RunDir(run_dir).status()


def failure_line(run_dir: Path, log_path: Path) -> str:
    """Why a run failed, in one line: the last ``normlab train: error:`` line of its log since it last started (a
    rank's own line: the ranks stopped by it say nothing, and torchrun's ChildFailedError report comes after);
    else the error that summary.json records with the status ``failed``; else the end of the log (a traceback's
    last lines: a bug of ours)."""
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.startswith("=== ")]
    lines = lines[starts[-1] + 1 :] if starts else lines
    ours = [ln for ln in lines if ln.startswith("normlab train: error: ")]
    if ours:
        return ours[-1]
    summary = RunDir(run_dir).summary()
    if summary.get("status") == "failed" and summary.get("error"):
        return f"normlab train: error: {summary['error']}"
    return " | ".join(lines[-8:])


def die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def child_preexec() -> Callable[[], None] | None:
    """``preexec_fn`` for a child that must not outlive the grid: Linux only (prctl). Windows has no
    ``preexec_fn`` at all, and macOS no parent-death signal; there the grid's own shutdown stops its children."""
    return die_with_parent if sys.platform.startswith("linux") else None


def _torchrun_command(config_path: Path, run_dir: Path, resume: bool, nproc: int) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "normlab", "train", "--config", str(config_path), "--out", str(run_dir), "--quiet"]  # fmt: skip
    return cmd + (["--resume"] if resume else [])


def _worker_init(threads: int) -> None:
    die_with_parent()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # Waiting OpenMP threads sleep instead of spinning: with several jobs on few cores, spinning threads steal
    # the cores the other jobs compute on (measured: a diagnosis took 22 s instead of 2.1 s).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    torch.set_num_threads(threads)
    # before the worker's first matmul: it trains run after run, and oneDNN's default cache would hold 1,024
    # primitives of shapes from every one of them
    limit_onednn_cache()


def _train_in_worker(config: dict[str, Any], run_dir: str, resume: bool, log_path: str) -> int:
    """One run inside a worker process; its output goes to the run's log. Returns the exit code the
    ``normlab train`` command would have returned (0, 2, 3; 1 for an unexpected error)."""
    import contextlib
    import logging
    import traceback

    with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stderr(log), contextlib.redirect_stdout(log):
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
        try:
            summary = train(TrainConfig.from_dict(config), run_dir, resume=resume, quiet=True)
            return EXIT_DIVERGED if summary["status"] == "diverged" else 0
        except ConfigError as e:
            print(f"normlab train: error: {e}", file=log)
            return 2
        except Exception:  # noqa: BLE001 - recorded as a failed run; the grid goes on
            traceback.print_exc(file=log)
            return 1
        finally:
            root.removeHandler(handler)


def _finetune_source(spec: RunSpec, out: Path) -> Path:
    return RunDir(out / "runs" / str(spec.parent)).checkpoints / f"update_{spec.parent_update:08d}"


def run_grid(
    specs: list[RunSpec],
    out: str | Path,
    *,
    jobs: int = 1,
    threads: int | None = None,
    launcher: str = "local",
    nproc: int = 1,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> dict[str, RunOutcome]:
    """Run ``specs`` (see the module docstring); returns each run's outcome."""
    out = Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    threads = threads or max(1, (os.cpu_count() or 1) // max(jobs, 1))
    check_not_stale(specs, out)
    outcomes: dict[str, RunOutcome] = {}
    pending: list[RunSpec] = []
    for spec in specs:
        if run_status(out / "runs" / spec.name) in FINISHED:
            outcomes[spec.name] = RunOutcome(spec.name, "cached")
        else:
            pending.append(spec)
    total, done = len(specs), len(outcomes)
    if done:
        say(f"grid: {done} of {total} runs already finished in {out}; {len(pending)} to run")
    running: dict[str, tuple[Any, float, RunSpec]] = {}  # a Popen (torchrun) or a Future (local worker)
    t_grid = time.perf_counter()
    pool = None
    if launcher == "local" and pending:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # spawn: workers start from a clean interpreter, not a copy of this process, and are this process's own
        # children, so that PR_SET_PDEATHSIG ends them with it (a forkserver's workers would outlive it)
        pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_init, initargs=(threads,))  # fmt: skip

    def parent_state(spec: RunSpec) -> str:
        if spec.parent is None:
            return "ready"
        st = run_status(out / "runs" / spec.parent)
        if spec.parent in outcomes and outcomes[spec.parent].status in ("failed", "skipped"):
            return "failed"
        if st == "diverged":
            return "failed"
        if st == "completed" and spec.parent not in running:
            return "ready" if _finetune_source(spec, out).exists() else "failed"
        return "wait"

    def start(spec: RunSpec) -> None:
        run_dir = out / "runs" / spec.name
        resume = RunDir(run_dir).latest() is not None
        if not resume and run_dir.exists():
            shutil.rmtree(run_dir)  # killed before its first checkpoint: nothing worth keeping
        cfg = spec.config
        if spec.kind == "finetune":
            # the pre-training run's own weights and tokenizer (normlab train writes RUN/tokenizer.model)
            parent = out / "runs" / str(spec.parent)
            data = cfg.data
            if RunDir(parent).tokenizer_path.exists():
                data = data.replace(tokenizer=str(RunDir(parent).tokenizer_path))
            cfg = cfg.replace(init_from=str(_finetune_source(spec, out)), data=data)
        config_path = out / "configs" / f"{spec.name}.yaml"
        write_atomic(config_path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        log_path = out / "logs" / f"{spec.name}.log"
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {'resume' if resume else 'start'} ===\n")
        if pool is not None:
            job: Any = pool.submit(_train_in_worker, cfg.to_dict(), str(run_dir), resume, str(log_path))
        else:
            env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
            env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
            with open(log_path, "a", encoding="utf-8") as log:
                job = subprocess.Popen(_torchrun_command(config_path, run_dir, resume, nproc), stdout=log,
                                       stderr=subprocess.STDOUT, env=env, preexec_fn=child_preexec())  # fmt: skip
        running[spec.name] = (job, time.perf_counter(), spec)
        say(f"[{done + len(running):>3}/{total}] {'resume' if resume else 'start '} {spec.name}")

    def finish(name: str, code: int) -> None:
        nonlocal done
        proc, t0, spec = running.pop(name)
        seconds = time.perf_counter() - t0
        status = run_status(out / "runs" / name)
        if code == 0 and status == "completed":
            outcome = RunOutcome(name, "completed", seconds)
        elif code == 3 and status == "diverged":
            outcome = RunOutcome(name, "diverged", seconds)
        else:
            line = failure_line(out / "runs" / name, out / "logs" / f"{name}.log")
            outcome = RunOutcome(name, "failed", seconds, f"exit code {code}: {line}")
        outcomes[name] = outcome
        done += 1
        elapsed = time.perf_counter() - t_grid
        say(f"[{done:>3}/{total}] {outcome.status:<9} {name} ({seconds:.0f} s; grid {elapsed / 60:.1f} min)")

    clean = False
    try:
        while pending or running:
            progressed = False
            for spec in list(pending):
                if len(running) >= jobs:
                    break
                state = parent_state(spec)
                if state == "wait":
                    continue
                pending.remove(spec)
                progressed = True
                if state == "failed":
                    outcomes[spec.name] = RunOutcome(spec.name, "skipped", error=f"pre-training run {spec.parent} "
                                                     "did not finish, or lacks the checkpoint")  # fmt: skip
                    done += 1
                    say(f"[{done:>3}/{total}] skipped   {spec.name} (its pre-training run did not finish)")
                    continue
                start(spec)
            for name, (job, _, _) in list(running.items()):
                code = _poll(job)
                if code is not None:
                    finish(name, code)
                    progressed = True
            if not progressed:
                if not running and pending:  # nothing runs and nothing can start: a dependency never finished
                    for spec in pending:
                        outcomes[spec.name] = RunOutcome(spec.name, "skipped", error=f"{spec.parent} not in the grid")
                    break
                time.sleep(0.2)
        clean = True
    finally:
        for job, _, _ in running.values():
            if isinstance(job, subprocess.Popen):
                job.kill()
        if pool is not None:
            if not clean:  # interrupted: a running run cannot be cancelled, only killed (it resumes next time)
                for proc in list((getattr(pool, "_processes", None) or {}).values()):
                    proc.kill()
            pool.shutdown(wait=clean, cancel_futures=True)
    return outcomes


def _poll(job: Any) -> int | None:
    """The exit code of a finished run, None while it runs (a worker that died counts as a failure)."""
    if isinstance(job, subprocess.Popen):
        return job.poll()
    if not job.done():
        return None
    try:
        return job.result()
    except Exception:  # noqa: BLE001 - e.g. BrokenProcessPool: the worker was killed
        return 1


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    return dataclasses.asdict(outcome)
