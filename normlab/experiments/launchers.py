"""How a grid's runs are started: local worker processes, torchrun, Ray tasks or SLURM jobs (submitit).

grid.py decides *what* runs and *when* (finished runs skipped, fine-tuning after its pre-training run, stale
folders refused); this module only starts a :class:`Task` and says when, and how, it ended. Every launcher runs
the same function, :func:`run_task`, with the same CPU threads, so a run writes the same run folder, log and
``metrics.jsonl`` whatever started it: resume, ``--report-only`` and the report never ask which one did.

* ``local``: long-lived worker processes on this machine (spawned; they die with the grid).
* ``torchrun``: each run a ``torchrun --standalone --nproc_per_node N`` child of the grid.
* ``ray``: each run a Ray task requesting ``threads x nproc`` CPUs and ``gpus_per_run`` GPUs;
  ``ray_address`` joins a cluster (``auto``: the one started on this machine by ``ray start``), none starts a
  local one. No retries: a run lost with its worker is reported as failed and resumes on the next invocation.
* ``slurm``: each run a SLURM job through submitit, with the partition, time limit, CPUs, GPUs and memory of
  :class:`LauncherConfig`; ``slurm_executor: local`` runs the same jobs as submitit's local processes (what the
  tests use where no SLURM runs).

The remote launchers need the grid's output directory, the data cache and normlab itself (the same version, the
same Python) on every node, at the same paths: a shared file system. The grid process stays alive while the grid
runs: it submits a fine-tuning run when its pre-training run has finished, and a Ctrl-C (or SIGTERM) cancels
every run it submitted that has not finished (a cancelled run resumes from its last checkpoint next time).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from normlab.assets import load_config_file
from normlab.config import ConfigError, Strict, config, field
from normlab.faults import die_with_parent
from normlab.train.throughput import limit_onednn_cache

__all__ = ["LauncherConfig", "Task", "Ended", "Launcher", "make_launcher", "run_task", "add_launcher_arguments",
           "launcher_from_args", "EXTRAS"]  # fmt: skip

# The optional engines: the module each needs and the extra that installs it (pyproject.toml).
EXTRAS = {"ray": ("ray", "normlab[ray]"), "slurm": ("submitit", "normlab[slurm]")}


@config
class LauncherConfig(Strict):
    """Where a grid's runs go: a ``launcher:`` section of a YAML file (``--launcher-config``) and the command line
    (``--launcher``, ``--nproc``, ``--gpus-per-run``, ``--ray-address``, ``--slurm-*``), the latter winning."""

    kind: Literal["local", "torchrun", "ray", "slurm"] = field(
        "local", help="local (worker processes on this machine), torchrun (a torchrun child per run), ray (a Ray "
        "task per run; the `ray` extra), slurm (a SLURM job per run through submitit; the `slurm` extra)")
    nproc: int = field(1, help="processes (devices) per run: torchrun's --nproc_per_node; with ray or slurm the "
                       "run is started by torchrun inside its task or job")  # fmt: skip
    gpus_per_run: int = field(0, help="GPUs each run requests from Ray or SLURM (0: CPU runs; with --device cuda "
                              "and 0, each run requests nproc GPUs)")  # fmt: skip
    ray_address: str = field("", help="the Ray cluster to join (ray.init(address=...)): '' starts a local one, "
                             "'auto' joins the one `ray start` began on this machine, or ray://HOST:10001")
    slurm_partition: str = field("", help="SLURM partition ('' = the cluster's default)")
    slurm_time_minutes: int = field(240, help="SLURM time limit per run, in minutes (a run stopped by it resumes "
                                    "from its last checkpoint when the grid runs again)")  # fmt: skip
    slurm_mem_gb: int = field(0, help="memory per run in GB (0 = the partition's default)")
    slurm_account: str = field("", help="SLURM account to charge ('' = your default)")
    slurm_qos: str = field("", help="SLURM quality of service ('' = the default)")
    slurm_setup: tuple[str, ...] = field((), help="shell lines run before each job (e.g. 'module load cuda', "
                                         "'source ~/venv/bin/activate')")  # fmt: skip
    slurm_options: tuple[str, ...] = field((), help="further sbatch options as KEY=VALUE (e.g. constraint=a100, "
                                           "exclude=node7), each becoming #SBATCH --KEY=VALUE")  # fmt: skip
    slurm_executor: Literal["slurm", "local"] = field(
        "slurm", help="slurm: sbatch; local: submitit's local executor, the same jobs as processes on this "
        "machine (a test of the SLURM path without a cluster)")

    def validate(self) -> None:
        if self.nproc < 1:
            raise self.error("nproc", f"must be at least 1, got {self.nproc}")
        if self.kind == "local" and self.nproc > 1:
            raise self.error("nproc", "more than one process per run needs --launcher torchrun, ray or slurm")
        if self.gpus_per_run < 0:
            raise self.error("gpus_per_run", f"must be at least 0, got {self.gpus_per_run}")
        if self.slurm_time_minutes < 1:
            raise self.error("slurm_time_minutes", f"must be at least 1, got {self.slurm_time_minutes}")
        if self.slurm_mem_gb < 0:
            raise self.error("slurm_mem_gb", f"must be at least 0, got {self.slurm_mem_gb}")
        bad = [o for o in self.slurm_options if "=" not in o or not o.split("=", 1)[0].strip()]
        if bad:
            raise self.error("slurm_options", f"expected KEY=VALUE items, got {bad}")

    @property
    def remote(self) -> bool:
        """Whether runs leave this process tree (ray, slurm): the cluster places them, so no local core count
        bounds the runs in flight."""
        return self.kind in ("ray", "slurm")

    def require_engine(self) -> None:
        """A one-line ConfigError naming the extra to install when the engine of ``kind`` is not importable."""
        if self.kind not in EXTRAS:
            return
        module, extra = EXTRAS[self.kind]
        try:
            __import__(module)
        except ImportError:
            raise ConfigError(f"--launcher {self.kind} needs {module}: pip install '{extra}'") from None


# --------------------------------------------------------------------------------------------------------
# What runs where the engine puts it


@dataclasses.dataclass(frozen=True)
class Task:
    """One run, as every launcher starts it. ``fn(**kwargs)`` (a module-level function, importable wherever the
    task runs) returns the exit code ``normlab train`` would; ``command``, when set, is run instead (torchrun).
    Its output goes to ``log``; ``env`` is set in the task's process first (e.g. the grid's data cache)."""

    name: str
    fn: Callable[..., int]
    kwargs: dict[str, Any]
    log: Path
    command: tuple[str, ...] = ()
    env: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Ended:
    """How a task ended: ``code``, the exit code (None when the engine lost it: a worker or a job killed, a time
    limit); ``note``, the engine's own words when it, not the run, failed ("" otherwise)."""

    code: int | None
    note: str = ""


def _set_threads(threads: int) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    # Waiting OpenMP threads sleep instead of spinning: with several jobs on few cores, spinning threads steal
    # the cores the other jobs compute on (measured: a diagnosis took 22 s instead of 2.1 s).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    # every launcher trains a run with the same number of threads: a reduction split over another number of
    # threads sums in another order, and the losses would differ in their last bits from launcher to launcher
    torch.set_num_threads(threads)


@contextlib.contextmanager
def _fds_to(log: Any) -> Iterator[None]:
    """File descriptors 1 and 2 into ``log`` for the task, then back: what torch's C++ and the libraries below
    it write there (oneDNN's and NNPACK's warnings) goes to the run's log, not into the terminal where the grid
    draws its live display (normlab.experiments.progress), whose redraw it would garble."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        yield
    finally:
        log.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def run_task(task: Task, threads: int) -> int:
    """Run ``task`` in this process (a local worker, a Ray worker, a SLURM job) with ``threads`` CPU threads, its
    output appended to its log; returns its exit code (1 for an error of ours: the traceback is in the log)."""
    import logging
    import traceback

    os.environ.update(task.env)
    _set_threads(threads)
    if task.command:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(task.log, "a", encoding="utf-8") as log:
            # the command dies with this process: a Ray worker killed by a cancel must not leave torchrun behind
            return subprocess.run(list(task.command), stdout=log, stderr=subprocess.STDOUT, env=env,
                                  preexec_fn=child_preexec()).returncode  # fmt: skip
    with (open(task.log, "a", encoding="utf-8") as log, _fds_to(log), contextlib.redirect_stderr(log),
          contextlib.redirect_stdout(log)):  # fmt: skip
        handler = logging.StreamHandler(log)
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.WARNING)
        try:
            return task.fn(**task.kwargs)
        except Exception:  # noqa: BLE001 - recorded as a failed run; the grid goes on
            traceback.print_exc(file=log)
            return 1
        finally:
            root.removeHandler(handler)


# --------------------------------------------------------------------------------------------------------
# The launchers: submit, poll, cancel, close


class Launcher:
    """Starts tasks and reports their ends. ``submit`` returns a handle; ``poll(handle)`` an :class:`Ended` once
    the task has ended, else None; ``cancel()`` stops every task submitted and not yet ended (Ctrl-C);
    ``close()`` releases the engine."""

    kind = ""

    def submit(self, task: Task) -> Any:
        raise NotImplementedError

    def poll(self, handle: Any) -> Ended | None:
        raise NotImplementedError

    # the runs whose tasks a cancel() could not confirm as ended (Ray: still running after CANCEL_WAIT_S)
    not_stopped: tuple[str, ...] = ()

    def cancel(self) -> int:
        """Cancel what is in flight; returns how many tasks it cancelled."""
        return 0

    def close(self) -> None:
        pass


def child_preexec() -> Callable[[], None] | None:
    """``preexec_fn`` for a child that must not outlive the grid: Linux only (prctl). Windows has no
    ``preexec_fn`` at all, and macOS no parent-death signal; there the grid's own shutdown stops its children."""
    return die_with_parent if sys.platform.startswith("linux") else None


def _worker_init(threads: int) -> None:
    die_with_parent()
    _set_threads(threads)
    # before the worker's first matmul: it trains run after run, and oneDNN's default cache would hold 1,024
    # primitives of shapes from every one of them
    limit_onednn_cache()


class LocalLauncher(Launcher):
    """``jobs`` long-lived worker processes, each training one run after another (importing torch and building
    an optimizer cost ~8 s per process: more than a small run itself)."""

    kind = "local"

    def __init__(self, jobs: int, threads: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.threads = threads
        # spawn: workers start from a clean interpreter, not a copy of this process, and are this process's own
        # children, so that PR_SET_PDEATHSIG ends them with it (a forkserver's workers would outlive it)
        self.pool = ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_worker_init, initargs=(threads,))  # fmt: skip
        self.futures: list[Any] = []

    def submit(self, task: Task) -> Any:
        future = self.pool.submit(run_task, task, self.threads)
        self.futures.append(future)
        return future

    def poll(self, handle: Any) -> Ended | None:
        if not handle.done():
            return None
        try:
            return Ended(handle.result())
        except Exception as e:  # noqa: BLE001 - e.g. BrokenProcessPool: the worker was killed
            return Ended(None, f"the worker process died ({type(e).__name__}: {e})")

    def cancel(self) -> int:
        # a running run cannot be cancelled in a pool, only killed (it resumes from its checkpoint next time)
        n = sum(not f.done() for f in self.futures)
        for proc in list((getattr(self.pool, "_processes", None) or {}).values()):
            proc.kill()
        self.pool.shutdown(wait=False, cancel_futures=True)
        return n

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


class TorchrunLauncher(Launcher):
    """Each run a ``torchrun --standalone`` child of the grid process (it dies with the grid)."""

    kind = "torchrun"

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.procs: list[subprocess.Popen] = []

    def submit(self, task: Task) -> Any:
        env = dict(os.environ, **task.env, OMP_NUM_THREADS=str(self.threads), PYTHONUNBUFFERED="1")
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        with open(task.log, "a", encoding="utf-8") as log:
            proc = subprocess.Popen(list(task.command), stdout=log, stderr=subprocess.STDOUT, env=env,
                                    preexec_fn=child_preexec())  # fmt: skip
        self.procs.append(proc)
        return proc

    def poll(self, handle: Any) -> Ended | None:
        code = handle.poll()
        return None if code is None else Ended(code)

    def cancel(self) -> int:
        live = [p for p in self.procs if p.poll() is None]
        for p in live:
            p.kill()
        return len(live)

    def close(self) -> None:
        self.cancel()


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(ln for ln in text.strip().splitlines()[-lines:] if ln.strip())


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def signal_handlers() -> dict[int, Any]:
    """This process's handlers of SIGINT and SIGTERM, for :func:`restore_signal_handlers`."""
    return {s: signal.getsignal(s) for s in _SIGNALS}


def restore_signal_handlers(handlers: dict[int, Any]) -> None:
    """Put back handlers saved by :func:`signal_handlers` (only the main thread may set them; None: not set from
    Python, left as it is)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for s, h in handlers.items():
        if h is not None:
            signal.signal(s, h)


class RayLauncher(Launcher):
    """Each run a Ray task. Joins ``cfg.ray_address``, starts a local cluster without one, or uses the Ray
    already initialised in this process (a notebook, a test); it shuts down only a cluster it started."""

    kind = "ray"

    def __init__(self, cfg: LauncherConfig, threads: int, gpus: int) -> None:
        import logging

        import ray

        self.ray = ray
        self.started = not ray.is_initialized()
        # ray.init installs its own SIGTERM handler in this process, and ray.shutdown() leaves it there: the
        # caller's handlers (the grid's Ctrl-C/SIGTERM cancel, a Trainer's stop at an update boundary) come back at
        # close(). Found as an order-dependent test failure: a SIGTERM test met Ray's handler after a Ray test.
        self.handlers = signal_handlers()
        if self.started:
            if not cfg.ray_address:
                # a cluster of our own runs its workers at Ray's default niceness, 15, below every other process of
                # the machine: on a shared machine they starve (measured, the smoke reproduce grid on a loaded
                # 2-core CPU: 43.8 s per run against 1.5 s locally). The grid's runs are this machine's work, so
                # they run at the caller's priority, as Ray's own job manager does for its drivers; a cluster
                # joined by address keeps its own setting, and RAY_worker_niceness set by the user wins.
                os.environ.setdefault("RAY_worker_niceness", "0")
            # the runs' output goes to their logs, not to this console; no dashboard for a grid's own cluster
            ray.init(address=cfg.ray_address or None, log_to_driver=False, logging_level=logging.WARNING,
                     configure_logging=False, **({} if cfg.ray_address else {"include_dashboard": False}))
        self.remote = ray.remote(run_task)
        self.resources = {"num_cpus": threads * cfg.nproc, "num_gpus": gpus, "max_retries": 0}
        self.threads = threads
        self.refs: dict[Any, str] = {}

    def submit(self, task: Task) -> Any:
        ref = self.remote.options(name=f"normlab:{task.name}", **self.resources).remote(task, self.threads)
        self.refs[ref] = task.name
        return ref

    def poll(self, handle: Any) -> Ended | None:
        ready, _ = self.ray.wait([handle], timeout=0)
        if not ready:
            return None
        self.refs.pop(handle, None)
        try:
            return Ended(self.ray.get(handle))
        except Exception as e:  # noqa: BLE001 - a worker lost (killed, out of memory, its node gone), a cancel
            return Ended(None, f"Ray: {type(e).__name__}: {_tail(str(e), 4)}")

    # how long Ctrl-C waits for the cancelled tasks to end before the grid says which did not
    CANCEL_WAIT_S = 30.0

    def cancel(self) -> int:
        refs = list(self.refs)
        pending, deadline = refs, time.monotonic() + self.CANCEL_WAIT_S
        # A cancel can be lost: one that reaches a worker after the task was pushed to it and before it started
        # (ray-project/ray#24359) leaves the task running, and a training run then trains to its end on the
        # cluster after the user pressed Ctrl-C (seen here, Ray 2.60: 1 task in ~4 kept running, its ray.get
        # timing out). So the cancel is sent again to each task that has not ended, until every one has (a
        # cancelled task ends at once, with TaskCancelledError or WorkerCrashedError) or the deadline passes. A
        # second Ctrl-C, or the cluster gone, stops the waiting: every cancel was sent at least once, and the grid
        # still closes the engine and names what it could not confirm.
        with contextlib.suppress(KeyboardInterrupt, Exception):
            while pending:
                for ref in pending:
                    with contextlib.suppress(Exception):  # already finished between the poll and now
                        self.ray.cancel(ref, force=True)  # kills the worker: a training process has no cancel point
                if time.monotonic() >= deadline:
                    break
                _, pending = self.ray.wait(pending, num_returns=len(pending), timeout=1.0, fetch_local=False)
        self.not_stopped = tuple(sorted(self.refs[ref] for ref in pending))
        self.refs.clear()
        return len(refs)

    def close(self) -> None:
        if self.started:
            self.ray.shutdown()
            restore_signal_handlers(self.handlers)


class SlurmLauncher(Launcher):
    """Each run a SLURM job through submitit (``slurm_executor: local``: submitit's local executor). submitit
    writes each job's pickled task, its stdout/stderr and result under ``folder``."""

    kind = "slurm"
    # a job that squeue no longer lists and that left no result after this long was killed (time limit, node
    # failure, scancel): on a cluster without accounting (sacct), submitit alone would wait for it forever
    GONE_AFTER_S = 30.0

    def __init__(self, cfg: LauncherConfig, threads: int, gpus: int, folder: Path) -> None:
        import submitit

        self.local = cfg.slurm_executor == "local"
        self.executor = submitit.AutoExecutor(folder=str(folder), cluster="local" if self.local else "slurm")
        params: dict[str, Any] = {"timeout_min": cfg.slurm_time_minutes, "cpus_per_task": threads * cfg.nproc,
                                  "gpus_per_node": gpus, "nodes": 1, "tasks_per_node": 1}  # fmt: skip
        if cfg.slurm_mem_gb:
            params["mem_gb"] = cfg.slurm_mem_gb
        if not self.local:
            slurm = {"slurm_partition": cfg.slurm_partition, "slurm_account": cfg.slurm_account,
                     "slurm_qos": cfg.slurm_qos}  # fmt: skip
            params.update({k: v for k, v in slurm.items() if v})
            if cfg.slurm_setup:
                params["slurm_setup"] = list(cfg.slurm_setup)
            if cfg.slurm_options:
                params["slurm_additional_parameters"] = dict(o.split("=", 1) for o in cfg.slurm_options)
        self.executor.update_parameters(**params)
        self.threads = threads
        self.jobs: dict[str, Any] = {}  # job id -> submitit Job, while in flight
        self.gone: dict[str, float] = {}  # job id -> when squeue first did not list it

    def submit(self, task: Task) -> Any:
        self.executor.update_parameters(name=f"normlab-{task.name}")
        job = self.executor.submit(run_task, task, self.threads)
        self.jobs[job.job_id] = job
        return job

    def poll(self, handle: Any) -> Ended | None:
        if not handle.done() and not self._gone(handle):
            return None
        self.jobs.pop(handle.job_id, None)
        try:
            return Ended(handle.result())
        except Exception as e:  # noqa: BLE001 - FailedJobError/UncompletedJobError: killed, time limit, ...
            return Ended(None, f"SLURM job {handle.job_id}: {type(e).__name__}: {_tail(str(e))}")

    def _gone(self, job: Any) -> bool:
        """Whether the job has left the queue without a result (see GONE_AFTER_S)."""
        if self.local or job.paths.result_pickle.exists() or not shutil.which("squeue"):
            return False
        out = subprocess.run(["squeue", "-h", "-j", str(job.job_id), "-o", "%T"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            self.gone.pop(job.job_id, None)
            return False
        first = self.gone.setdefault(job.job_id, time.monotonic())
        return time.monotonic() - first > self.GONE_AFTER_S

    def cancel(self) -> int:
        jobs = [j for j in self.jobs.values() if not j.done()]
        for job in jobs:
            with contextlib.suppress(Exception):  # already ended between the poll and now
                job.cancel(check=False)
        self.jobs.clear()
        return len(jobs)


def make_launcher(cfg: LauncherConfig, *, jobs: int, threads: int, cuda: bool, folder: Path) -> Launcher:
    """The launcher of ``cfg`` for a grid of ``jobs`` runs in parallel (local) with ``threads`` CPU threads each;
    ``cuda``: the runs train on GPUs (without ``gpus_per_run``, each requests ``nproc``); ``folder``: where an
    engine keeps its own files (submitit's job files)."""
    cfg.require_engine()
    gpus = cfg.gpus_per_run or (cfg.nproc if cuda else 0)
    if cfg.kind == "local":
        return LocalLauncher(jobs, threads)
    if cfg.kind == "torchrun":
        return TorchrunLauncher(threads)
    if cfg.kind == "ray":
        return RayLauncher(cfg, threads, gpus)
    return SlurmLauncher(cfg, threads, gpus, folder)


# --------------------------------------------------------------------------------------------------------
# Command line: the same flags on every command that runs a grid


_FLAGS = {"nproc": "--nproc", "gpus_per_run": "--gpus-per-run", "ray_address": "--ray-address",
          "slurm_partition": "--slurm-partition", "slurm_time_minutes": "--slurm-time",
          "slurm_mem_gb": "--slurm-mem-gb", "slurm_account": "--slurm-account", "slurm_qos": "--slurm-qos"}  # fmt: skip


def add_launcher_arguments(p: Any) -> None:
    """``--launcher`` and its settings, with the help of :class:`LauncherConfig`'s fields."""
    helps = LauncherConfig.field_help()
    p.add_argument("--launcher", default=None, choices=["local", "torchrun", "ray", "slurm"],
                   help=helps["kind"] + " (default: the --launcher-config file's, else local)")
    p.add_argument("--launcher-config", metavar="YAML", help="a YAML file whose `launcher:` section (or the whole "
                   f"file) sets any of: {', '.join(LauncherConfig.field_names())}; the flags here win")
    numbers = {"nproc": "N", "gpus_per_run": "N", "slurm_time_minutes": "MINUTES", "slurm_mem_gb": "GB"}
    for name, flag in _FLAGS.items():
        p.add_argument(flag, dest=f"launch_{name}", type=int if name in numbers else str, default=None,
                       metavar=numbers.get(name, "ADDRESS" if name == "ray_address" else "NAME"), help=helps[name])


def launcher_from_args(args: Any) -> LauncherConfig:
    """The LauncherConfig of parsed arguments: the file's section, then the flags given."""
    data = load_config_file(args.launcher_config, "launcher") if getattr(args, "launcher_config", None) else {}
    if args.launcher is not None:
        data["kind"] = args.launcher
    for name in _FLAGS:
        value = getattr(args, f"launch_{name}", None)
        if value is not None:
            data[name] = value
    return LauncherConfig.from_dict(data)


def as_config(launcher: LauncherConfig | str, nproc: int = 1) -> LauncherConfig:
    """A LauncherConfig from what a caller of run_grid gives: a config, or a kind (with ``nproc``)."""
    if isinstance(launcher, LauncherConfig):
        return launcher
    return LauncherConfig(kind=launcher, nproc=nproc)

