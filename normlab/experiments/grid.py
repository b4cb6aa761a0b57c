"""The grid runner: every run in its own directory, in a process of its own.

``OUT/runs/NAME/`` is an ordinary ``normlab train`` run directory; ``OUT/configs/NAME.yaml`` the config it was
started with; ``OUT/logs/NAME.log`` its output. Running the grid again

* skips a run whose ``summary.json`` says ``completed`` or ``diverged`` (a diverged run is a result): its small
  files (``config.yaml``, ``metrics.jsonl``, ``summary.json``) suffice, without checkpoints, so that finished runs
  committed or copied from other machines complete a grid piece by piece (issue 32),
* resumes a run that has a checkpoint (it was killed),
* starts over a run killed before its first checkpoint,
* records a run that fails (an exit code other than 0 or 3) as ``failed`` with one line (:func:`failure_line`: the
  error the run said last, not torchrun's report that follows it), and goes on,
* refuses, before it starts anything, a directory holding a run of the same name trained with other settings
  (:func:`changed_settings`: e.g. a scale whose schedule changed since), so that a report never mixes them.

How a run is started is the launcher's business (launchers.py: local worker processes, torchrun, Ray tasks,
SLURM jobs); what runs, in which order and what came of it is this module's, the same on every launcher.
``jobs`` runs go in parallel (with ray or slurm, 0: every run that is ready; the cluster queues them), each with
``threads`` CPU threads (small models train several times faster as two one-thread processes than as one
two-thread process on 2 cores). Fine-tuning runs are submitted when their pre-training run has finished. Local
workers and children die with the grid process (PR_SET_PDEATHSIG), so a killed grid leaves no orphan writing into
its runs; a grid stopped by Ctrl-C or SIGTERM cancels the Ray tasks and SLURM jobs it submitted.

Between a run's start and end lines the grid shows its progress (progress.py): on a terminal a live display of
the updates done of the total, the runs in flight with their loss, the pace and the ETA; without one, the same
figures as a line every few minutes. It reads each running run's metrics.jsonl from its end, so it is the same on
every launcher.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from normlab.config import ConfigError, TrainConfig, flat_dict
from normlab.data.cache import cache_root
from normlab.device import cpu_name, machine_text
from normlab.experiments.figures import RunSpec
from normlab.experiments.launchers import Ended, LauncherConfig, Task, as_config, child_preexec, make_launcher
from normlab.experiments.progress import GridWatch, ProgressSettings
from normlab.files import write_atomic
from normlab.rundir import RunDir
from normlab.train.run import train
from normlab.train.trainer import EXIT_DIVERGED

__all__ = ["RunOutcome", "run_grid", "run_status", "changed_settings", "settings_diff", "failure_line", "FINISHED",
           "child_preexec", "add_sync_argument", "sync_in", "sync_out"]

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
    return [] if saved is None else settings_diff(spec, saved)


def settings_diff(spec: RunSpec, saved: dict[str, Any]) -> list[str]:
    """:func:`changed_settings` against a config as a dict (a run's config.yaml, or a report's results.json)."""
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


def add_sync_argument(p: Any) -> None:
    """``--sync DIR`` of ``normlab reproduce`` and ``normlab sweep``."""
    p.add_argument("--sync", metavar="DIR", default="", help="a folder of finished runs shared between machines, "
                   "e.g. docs/results/reproduce-full/runs in a git checkout: the runs of this grid finished there "
                   "when the job starts count as finished and are not trained, and each run that finishes here is "
                   "copied into it as it ends (its small files: config, data record, metrics, summary, log, and the "
                   "machine's lscpu as cpu.txt; no checkpoint), ready to commit, so that a grid fills up over "
                   "several machines and sessions")


def sync_in(specs: Sequence[RunSpec], out: Path, store: Path, say: Callable[[str], None], *,
            lookup: Callable[[str, Path], RunSpec | None] | None = None, train: bool = True) -> list[str]:  # fmt: skip
    """``--sync STORE``, before a grid: copy into ``out/runs`` each run of this grid finished in ``store`` (a folder of
    finished runs' small files shared between machines, e.g. a git checkout's docs/results/reproduce-full/runs) and
    not finished in ``out``; the grid then counts it as finished and does not train it. This grid's runs are
    ``specs``, and the runs ``lookup`` (a name and the folder of its saved run) turns into a spec (the stability
    sweep's edge search: learning rates planned from the runs themselves); anything else in ``store`` is another
    grid's and stays there.

    Left where it is, with a line: a run saved there with other settings than this grid's; a pre-training run
    whose fine-tuning runs have not all finished there (they start from its checkpoints, which are not copied).
    A run in ``out`` that a killed session left unfinished gives way to the finished copy (its checkpoints are
    deleted), unless a trainer holds it now, or ``train`` is False (``--report-only`` deletes nothing: it reads
    the run as unfinished). Returns the names copied."""
    wanted = {s.name: s for s in specs}
    children: dict[str, list[RunSpec]] = {}
    for s in specs:
        if s.parent is not None:
            children.setdefault(str(s.parent), []).append(s)

    def child_done(c: RunSpec) -> bool:  # finished with this grid's settings, there or here
        return any(run_status(d) in FINISHED and not changed_settings(c, d)
                   for d in (store / c.name, out / "runs" / c.name))  # fmt: skip

    def same_parent(spec: RunSpec) -> bool:
        """A fine-tuning run is taken only beside the very pre-training run it started from: the parent here is
        the store's (byte-equal summaries: a copy). A parent trained again here (not taken: its fine-tuning had
        not all finished there) is another pre-training, on another CPU rounding otherwise, and its seed's
        fine-tuning points would come from two of them (found in review, issue 32)."""
        if spec.parent is None:
            return True
        return _same_run(out / "runs" / str(spec.parent), store / str(spec.parent))

    copied, other, parents, kept, orphans = [], [], [], [], []
    # shallower folders first (a name may hold a "/": SETTING/seedK, run_grid's docstring), fine-tuning runs after
    # every pre-training run (same_parent reads the parent this call may have copied)
    found = sorted(store.rglob(RunDir.SUMMARY), key=lambda p: (len(p.parts), p)) if store.is_dir() else []
    rank = {s.name: s.parent is not None for s in specs}
    found.sort(key=lambda p: rank.get(p.parent.relative_to(store).as_posix(), False))
    for summary in found:
        src = summary.parent
        name = src.relative_to(store).as_posix()
        here = out / "runs" / name
        if run_status(src) not in FINISHED or run_status(here) in FINISHED:
            continue
        spec = wanted.get(name) or (lookup(name, src) if lookup is not None else None)
        if spec is None:
            continue  # another grid's run
        if changed_settings(spec, src):
            other.append(name)
            continue
        if not all(child_done(c) for c in children.get(name, [])):
            parents.append(name)
            continue
        if not same_parent(spec):
            orphans.append(name)
            continue
        if RunDir(here).holder() is not None:
            continue  # trained now by another process: its own end decides
        if here.exists():
            if not train:
                kept.append(name)
                continue
            shutil.rmtree(here)
        RunDir(src).copy_small_files(here)  # with its cpu.txt
        log = RunDir(src) / RunDir.LOG
        if log.is_file():  # the log where the grid keeps it, with the run's earlier sessions
            (out / "logs" / f"{name}.log").parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, out / "logs" / f"{name}.log")
        copied.append(name)

    def some(names: list[str]) -> str:
        return ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")

    if copied:
        say(f"sync: {len(copied)} run(s) finished in {store} taken into {out / 'runs'}: {some(copied)}")
    if other:
        say(f"sync: {len(other)} run(s) in {store} were trained with other settings than this grid's and are not "
            f"taken: {some(other)}")
    if parents:
        say(f"sync: {len(parents)} pre-training run(s) in {store} are not taken: their fine-tuning runs have not all "
            f"finished and need their checkpoints, which only a run trained here has: {some(parents)}")
    if orphans:
        say(f"sync: {len(orphans)} fine-tuning run(s) in {store} are not taken: the pre-training run they started "
            f"from is not the one here (not taken above, or trained here again), "
            + ("so they train again from this one: " if train else "so they are reported as unfinished: ")
            + some(orphans))
    if kept:
        say(f"sync: {len(kept)} run(s) finished in {store} are unfinished in {out / 'runs'} (a stopped run's "
            f"checkpoints, which --report-only does not delete): reported as unfinished: {some(kept)}")
    return copied


def sync_out(spec: RunSpec, out: Path, store: Path, say: Callable[[str], None] | None = None, *,
             specs: Sequence[RunSpec] = ()) -> bool:  # fmt: skip
    """``--sync STORE``: copy the run of ``spec``, finished in ``out``, into ``store`` (its small files, the grid's
    log of it as train.log, and as cpu.txt the ``lscpu`` that came with it or, for a run whose summary names this
    CPU last, exactly as :func:`~normlab.device.cpu_name` does now, this machine's), ready to commit. Not copied,
    with a line: a run in ``out`` trained with other settings than ``spec`` (the grid refuses it too), and a run
    whose finished copy there has other settings (remove it there to replace it); a finished copy with the grid's
    settings is kept as it is. Returns whether it copied.

    A pre-training run and its fine-tuning runs (``specs``: the grid's, which name the parents) go out together,
    when the last of them has finished here: the fine-tuning runs start from checkpoints that are not copied, so
    a parent there without all its children could serve no machine (sync_in leaves it), and children there beside
    another machine's parent would pair two pre-trainings. A family there that is incomplete and holds another
    parent (one an earlier version copied out alone, or a machine that stopped before its last child) is
    replaced by this complete one; a complete one is kept (found in review, issue 32)."""
    kids = [c for c in specs if c.parent is not None and str(c.parent) == spec.name]
    if spec.parent is None and not kids:
        return _copy_out(spec, out, store, say)
    parent = spec if spec.parent is None else next((p for p in specs if p.name == str(spec.parent)), None)
    if parent is None:  # a fine-tuning run whose parent this grid does not name: nothing to keep it beside
        return _copy_out(spec, out, store, say)
    kids = kids or [c for c in specs if c.parent is not None and str(c.parent) == parent.name]
    family = [parent, *kids]
    if any(run_status(out / "runs" / r.name) not in FINISHED for r in family):
        return False  # the last of them to finish copies them all
    if run_status(store / parent.name) in FINISHED and not _same_run(out / "runs" / parent.name, store / parent.name):
        if all(run_status(store / c.name) in FINISHED for c in kids):
            if say is not None:
                say(f"sync: {store / parent.name} and its fine-tuning runs, complete, come from another machine: "
                    f"kept as they are ({parent.name} and its {len(kids)} fine-tuning runs here not copied)")
            return False
        for r in family:  # an incomplete family of another pre-training: this complete one replaces it
            shutil.rmtree(store / r.name, ignore_errors=True)
        if say is not None:
            say(f"sync: {store / parent.name} and its unfinished family there replaced by this machine's complete one")
    copied = [_copy_out(r, out, store, say) for r in family if run_status(store / r.name) not in FINISHED]
    return any(copied)


def _same_run(a: Path, b: Path) -> bool:
    """Both finished, and one a copy of the other (byte-equal summaries: a run trained again, even on the same
    machine, writes other times)."""
    if run_status(a) not in FINISHED or run_status(b) not in FINISHED:
        return False
    return (a / RunDir.SUMMARY).read_bytes() == (b / RunDir.SUMMARY).read_bytes()


def _copy_out(spec: RunSpec, out: Path, store: Path, say: Callable[[str], None] | None = None) -> bool:
    """One run of :func:`sync_out`."""
    name = spec.name
    here, there = out / "runs" / name, store / name
    if run_status(here) not in FINISHED:
        return False
    if changed := changed_settings(spec, here):
        if say is not None:
            say(f"sync: {name} in {out / 'runs'} was trained with other settings ({', '.join(changed[:3])}): not "
                f"copied to {store}")
        return False
    if run_status(there) in FINISHED:
        if (changed := changed_settings(spec, there)) and say is not None:
            say(f"sync: {there} holds {name} trained with other settings ({', '.join(changed[:3])}): left as it "
                "is; remove it to put this grid's run there")
        return False
    summary = RunDir(here).summary()
    last = (summary.get("cpus") or [summary.get("cpu") or ""])[-1]
    # the cpu.txt that came with it (copy_small_files' default), else this machine's if the summary names it
    trained_here = not (RunDir(here) / RunDir.MACHINE).is_file() and last == cpu_name()
    RunDir(here).copy_small_files(there, log=out / "logs" / f"{name}.log",
                                  machine=machine_text() if trained_here else None)
    if say is not None:
        say(f"sync: {name} copied to {there}")
    return True


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
    """The status in ``summary.json`` (``running`` while a run is in progress or was killed), or None; ``scoring``
    for a run that completed its training but not the test scoring its config asks for (``test_checkpoint``): the
    trainer writes ``completed`` before the test split is decoded (~100 s), so a run stopped in between, or whose
    scoring failed, would otherwise count as finished, be copied to the sync folder without its test BLEU and
    never be scored (its checkpoint stays on the machine that trained it). Not finished: the grid resumes it,
    which scores the test split and trains nothing (found in review, issue 37)."""
    rd = RunDir(run_dir)
    status = rd.status()
    if status == "completed" and _asks_test(rd) and "bleu" not in (rd.summary().get("test") or {}):
        return "scoring"
    return status


_TEST_LINE = re.compile(r"^test_checkpoint:(.*)$", re.MULTILINE)


def _asks_test(rd: RunDir) -> bool:
    """Whether the run's config.yaml asks for the test split to be scored (a non-empty top-level
    ``test_checkpoint``), read from that one line: run_status is called on every run of a grid, often, and a YAML
    parse of each config made it ~140x slower over a 1,000-run sweep folder (2.8 s against 0.02 s). A config
    without the line (written before the setting existed) asks nothing; a damaged one is the settings check's to
    name, not this one's."""
    try:
        found = _TEST_LINE.search(rd.config_path.read_text(encoding="utf-8"))
        return bool(found and yaml.safe_load(found.group(1)))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False


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


def train_run(config: dict[str, Any], run_dir: str, resume: bool) -> int:
    """One run, where a launcher put it (launchers.run_task: its output already goes to the run's log). Returns
    the exit code the ``normlab train`` command would have returned (0, 2, 3)."""
    try:
        summary = train(TrainConfig.from_dict(config), run_dir, resume=resume, quiet=True)
        return EXIT_DIVERGED if summary["status"] == "diverged" else 0
    except ConfigError as e:
        print(f"normlab train: error: {e}")  # the line failure_line finds
        return 2


def _torchrun_command(config_path: Path, run_dir: Path, resume: bool, nproc: int) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc),
           "-m", "normlab", "train", "--config", str(config_path), "--out", str(run_dir), "--quiet"]  # fmt: skip
    return cmd + (["--resume"] if resume else [])


def _finetune_source(spec: RunSpec, out: Path) -> Path:
    return RunDir(out / "runs" / str(spec.parent)).checkpoints / f"update_{spec.parent_update:08d}"


def _planned(cfg: TrainConfig) -> int:
    """A run's length as its configuration states it: max_updates, or 0 (not known until its summary says) for a
    run that max_epochs bounds or whose length budget_hours decides as it trains."""
    return 0 if cfg.budget_hours else cfg.max_updates


def run_grid(
    specs: list[RunSpec],
    out: str | Path,
    *,
    jobs: int = 1,
    threads: int | None = None,
    launcher: LauncherConfig | str = "local",
    nproc: int = 1,
    cuda: bool = False,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    task: Callable[..., int] | None = None,
    task_kwargs: dict[str, Any] | None = None,
    progress: ProgressSettings | None = None,
    totals: Mapping[str, int] | None = None,
    pace: float | None = None,
    more: Callable[[str | None], Sequence[RunSpec]] | None = None,
    on_end: Callable[[str, RunOutcome], None] | None = None,
) -> dict[str, RunOutcome]:
    """Run ``specs`` (see the module docstring) with ``launcher`` (a LauncherConfig, or its kind with ``nproc``);
    returns each run's outcome. ``jobs``: runs in flight at once (0 with ray or slurm: every run that is ready);
    ``cuda``: the runs train on GPUs (what a remote run requests without ``gpus_per_run``). ``task``: the
    module-level function that trains a run, ``task(config=..., run_dir=..., resume=..., **task_kwargs)`` returning
    ``normlab train``'s exit code (default :func:`train_run`; ``normlab finetune`` gives its own, with the test
    split's evaluation); a spec's name may hold a ``/`` (``SETTING/seedK``: nested run folders).

    ``progress``: the live display or the periodic lines (progress.py; default: live on a terminal, a line every
    5 minutes otherwise); ``totals``: the updates of each run by name, for the runs bounded by epochs (default:
    the config's max_updates; for a run without one, its summary's once it runs); ``pace``: the probe's seconds per
    grid update (budget.Estimate.pace), the ETA's start. ``more``: called once before the first run starts (with
    None) and after each run ends (with its name); the runs it returns join the grid ahead of those not yet
    started, a name already in the grid is ignored, and one already finished on disk is counted as cached (and
    ``more`` is called with it in turn). The stability sweep's edge search uses it to start a curve's next run
    as soon as that curve's last one ends, instead of waiting for every curve between rounds. ``on_end``: called
    with each run's name and outcome as it ends (``--sync``: :func:`sync_out` copies a finished one out)."""
    task = task or train_run
    task_kwargs = task_kwargs or {}
    cfg = as_config(launcher, nproc)
    cfg.require_engine()  # before anything is written: one line naming the extra to install
    # a Ray worker or a SLURM job starts in another directory, perhaps on another machine
    out = Path(out).resolve() if cfg.remote else Path(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    (out / "configs").mkdir(exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    threads = threads or (1 if cfg.remote else max(1, (os.cpu_count() or 1) // max(jobs, 1)))
    # jobs 0 on a cluster: every ready run, the scheduler queues them; submitit's local executor has no queue, so
    # there it is this machine's cores (all 24 smoke-sweep jobs at once on 2 cores took 3.7x the local launcher)
    cluster = cfg.remote and not (cfg.kind == "slurm" and cfg.slurm_executor == "local")
    # (no cap on a cluster with jobs 0, also for the runs ``more`` adds later)
    in_flight = jobs if jobs > 0 else (sys.maxsize if cluster else max(1, (os.cpu_count() or 1) // threads))
    check_not_stale(specs, out)
    outcomes: dict[str, RunOutcome] = {}
    pending: list[RunSpec] = []
    for spec in specs:
        if run_status(out / "runs" / spec.name) in FINISHED:
            outcomes[spec.name] = RunOutcome(spec.name, "cached")
        else:
            pending.append(spec)
    total, done = len(specs), len(outcomes)
    running: dict[str, tuple[Any, float, RunSpec]] = {}  # the launcher's handle, when it was submitted
    t_grid = time.perf_counter()
    engine = None  # made when the first run starts: ``more`` may bring runs to a grid that starts with none

    def engine_now() -> Any:
        nonlocal engine
        if engine is None:
            engine = make_launcher(cfg, jobs=in_flight, threads=threads, cuda=cuda,
                                   folder=out / "launcher" / cfg.kind)
            if cfg.remote:
                say(f"grid: {len(pending) + 1} run(s) as {_where(cfg)}, {threads * cfg.nproc} CPU(s) each"
                    + (f", at most {jobs} at once" if jobs > 0 else ""))
        return engine
    # The data cache this process prepared the data in (reproduce and sweep do so before the grid), for a run
    # wherever it starts: a node would otherwise train its own tokenizer into its own home directory
    # (each run's own: the runs ``more`` adds to a grid that started empty too)

    def parent_state(spec: RunSpec) -> str:
        if spec.parent is None:
            return "ready"
        st = run_status(out / "runs" / spec.parent)
        if spec.parent in outcomes and outcomes[spec.parent].status in ("failed", "skipped"):
            return "failed"
        if st == "diverged":
            return "failed"
        if st == "completed" and spec.parent not in running:
            return "ready" if _finetune_source(spec, out).exists() else "no checkpoint"
        return "wait"

    def family_text(parent: str) -> str:
        """The parent and its finished fine-tuning runs: what must move aside together (the rest would train from
        a new parent beside children of the old one)."""
        done_kids = [sp.name for sp in specs if sp.parent is not None and str(sp.parent) == parent
                     and run_status(out / "runs" / sp.name) in FINISHED]  # fmt: skip
        if not done_kids:
            return str(out / "runs" / parent)
        shown = ", ".join(done_kids[:3]) + (", ..." if len(done_kids) > 3 else "")
        return f"{out / 'runs' / parent} and its {len(done_kids)} finished fine-tuning run(s) ({shown})"

    def skip_reason(spec: RunSpec, state: str) -> str:
        if state == "no checkpoint":  # e.g. its small files copied in from a commit: every rerun would skip again
            return (f"its pre-training run {spec.parent} finished without the checkpoint it starts from "
                    f"({_finetune_source(spec, out)}; a run copied in without its checkpoints?): move "
                    f"{family_text(str(spec.parent))} aside to train them again here")
        return f"its pre-training run {spec.parent} did not finish"

    # a finished pre-training run that cannot serve its fine-tuning runs, said once before anything trains (the
    # runs below are skipped with the same words when their turn comes; the rest of the grid runs)
    orphans = sorted({str(sp.parent) for sp in pending if sp.parent is not None and sp.parent not in running
                      and run_status(out / "runs" / str(sp.parent)) == "completed"
                      and not _finetune_source(sp, out).exists()})  # fmt: skip
    if orphans:
        say(f"grid: {len(orphans)} finished pre-training run(s) lack the checkpoints their fine-tuning runs start "
            f"from, which will be skipped: {', '.join(orphans)}; to train them again here, move aside "
            + "; ".join(family_text(p) for p in orphans))

    def start(spec: RunSpec) -> None:
        run_dir = out / "runs" / spec.name
        latest = RunDir(run_dir).latest()
        resume = latest is not None
        if not resume and run_dir.exists():
            shutil.rmtree(run_dir)  # killed before its first checkpoint: nothing worth keeping
        run_cfg = spec.config
        if spec.kind == "finetune" and spec.parent is not None:
            # the pre-training run's own weights and tokenizer (normlab train writes RUN/tokenizer.model)
            parent = out / "runs" / str(spec.parent)
            data = run_cfg.data
            if RunDir(parent).tokenizer_path.exists():
                data = data.replace(tokenizer=str(RunDir(parent).tokenizer_path))
            run_cfg = run_cfg.replace(init_from=str(_finetune_source(spec, out)), data=data)
        config_path = out / "configs" / f"{spec.name}.yaml"
        write_atomic(config_path, yaml.safe_dump(run_cfg.to_dict(), sort_keys=False))
        log_path = out / "logs" / f"{spec.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "a", encoding="utf-8") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {'resume' if resume else 'start'} ===\n")
        command = (_torchrun_command(config_path, run_dir, resume, cfg.nproc)
                   if cfg.kind == "torchrun" or cfg.nproc > 1 else [])  # fmt: skip
        kwargs = {"config": run_cfg.to_dict(), "run_dir": str(run_dir), "resume": resume, **task_kwargs}
        env = {"NORMLAB_CACHE": str(_cache_of([spec]))} if cfg.remote else {}
        running[spec.name] = (engine_now().submit(Task(spec.name, task, kwargs, log_path, tuple(command), env)),
                              time.perf_counter(), spec)  # fmt: skip
        watch.started(spec.name, base=int(latest.name.split("_")[-1]) if latest is not None else 0)
        say(f"[{done + len(running):>3}/{total}] {'resume' if resume else 'start '} {spec.name}")

    def finish(name: str, ended: Ended) -> None:
        nonlocal done
        _, t0, _ = running.pop(name)
        seconds = time.perf_counter() - t0
        status = run_status(out / "runs" / name)
        log_path = out / "logs" / f"{name}.log"
        if ended.note:  # the engine, not the run, says what happened: into the log too, for whoever reads it later
            with open(log_path, "a", encoding="utf-8") as log:
                log.write(f"normlab grid ({cfg.kind}): {ended.note}\n")
        if ended.code == 0 and status == "completed":
            outcome = RunOutcome(name, "completed", seconds)
        elif ended.code == 3 and status == "diverged":
            outcome = RunOutcome(name, "diverged", seconds)
        else:
            line = failure_line(out / "runs" / name, log_path)
            code = "no exit code" if ended.code is None else f"exit code {ended.code}"
            outcome = RunOutcome(name, "failed", seconds, f"{code}: {line}")
        outcomes[name] = outcome
        watch.ended(name)
        done += 1
        elapsed = time.perf_counter() - t_grid
        why = f": {outcome.error} (log: {log_path})" if outcome.status == "failed" else ""
        say(f"[{done:>3}/{total}] {outcome.status:<9} {name} ({seconds:.0f} s; grid {elapsed / 60:.1f} min){why}")
        if on_end is not None:
            try:
                on_end(name, outcome)
            except Exception as e:  # noqa: BLE001 - a hook (--sync's copy: a full disk) must not stop the runs in flight
                say(f"grid: after {name}: {type(e).__name__}: {e}")
        join(name)

    def join(name: str | None) -> None:
        """The runs ``more`` adds after ``name`` ended (None: before the first start), ahead of the pending ones."""
        nonlocal total, done
        if more is None:
            return
        known = set(outcomes) | set(running) | {sp.name for sp in pending}
        fresh, cached = [], []
        for spec in more(name):
            if spec.name in known:
                continue
            known.add(spec.name)
            total += 1
            finished = run_status(out / "runs" / spec.name) in FINISHED
            watch.add(spec.name, out / "runs" / spec.name, (totals or {}).get(spec.name) or _planned(spec.config),
                      finished=finished)
            if finished:
                check_not_stale([spec], out)  # a run merged from elsewhere with other settings is not a result
                outcomes[spec.name] = RunOutcome(spec.name, "cached")
                done += 1
                cached.append(spec.name)
            else:
                fresh.append(spec)
        pending[:0] = fresh
        if fresh:
            say(f"grid: {len(fresh)} run(s) added: {', '.join(sp.name for sp in fresh)}")
        for c in cached:  # a run finished elsewhere: what follows it may be known now
            join(c)

    # the live display or the progress lines, from here to the end of the grid (closed in the finally below)
    watch = GridWatch(say, progress, prior=pace, jobs=in_flight if in_flight < sys.maxsize else 0)
    for spec in specs:
        length = (totals or {}).get(spec.name) or _planned(spec.config)
        watch.add(spec.name, out / "runs" / spec.name, length, finished=spec.name in outcomes)
    say = watch.say  # the grid's lines above the live display (the caller's say when there is none)
    clean = False
    try:
        with _sigterm_as_interrupt():
            join(None)  # before the count below: runs ``more`` adds that finished elsewhere are counted
            if done:
                say(f"grid: {done} of {total} runs already finished in {out}; {len(pending)} to run")
            while pending or running:
                progressed = False
                # a fine-tuning run whose pre-training run has finished goes first: its parent's checkpoints
                # live only on this machine, so a grid stopped here (to go on elsewhere with --sync) keeps every
                # parent whose fine-tuning is done, where one that started the next parents first would have to
                # train them again (sort is stable: the rest keep their order)
                for spec in sorted(pending, key=lambda sp: sp.parent is None):
                    if len(running) >= in_flight:
                        break
                    state = parent_state(spec)
                    if state == "wait":
                        continue
                    pending.remove(spec)
                    progressed = True
                    if state in ("failed", "no checkpoint"):
                        why = skip_reason(spec, state)
                        outcomes[spec.name] = RunOutcome(spec.name, "skipped", error=why)
                        done += 1
                        watch.ended(spec.name)
                        say(f"[{done:>3}/{total}] skipped   {spec.name} ({why})")
                        continue
                    start(spec)
                for name, (handle, _, _) in list(running.items()):
                    ended = engine_now().poll(handle)
                    if ended is not None:
                        finish(name, ended)
                        progressed = True
                watch.tick()
                if not progressed:
                    if not running and pending:  # nothing runs and nothing can start: a dependency never finished
                        for spec in pending:
                            outcomes[spec.name] = RunOutcome(spec.name, "skipped",
                                                             error=f"{spec.parent} not in the grid")
                        break
                    # a remote poll asks the engine (a Ray call; submitit reads files, squeue now and then)
                    time.sleep(0.5 if cfg.remote else 0.2)
        clean = True
    finally:
        watch.close()
        if engine is not None:
            try:
                if not clean:  # interrupted: what was submitted and has not ended is cancelled (it resumes next time)
                    n = engine.cancel()
                    if n and cfg.remote:
                        say(f"grid: interrupted; cancelled {n} submitted run(s): {', '.join(sorted(running))}")
                    if engine.not_stopped:
                        say(f"grid: {len(engine.not_stopped)} cancelled run(s) had not stopped when the grid stopped "
                            f"waiting and may still run on the cluster: {', '.join(engine.not_stopped)}")
            finally:
                engine.close()
    return outcomes


def _where(cfg: LauncherConfig) -> str:
    if cfg.kind == "ray":
        return f"Ray tasks on {cfg.ray_address or 'a local Ray cluster'}"
    if cfg.slurm_executor == "local":
        return "submitit jobs on its local executor"
    return f"SLURM jobs (partition {cfg.slurm_partition or 'the default'})"


def _cache_of(specs: list[RunSpec]) -> Path:
    """The data cache of the grid's runs, absolute (reproduce and sweep give every run the same one)."""
    return cache_root(specs[0].config.data).resolve()


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Any:
    """SIGTERM (the grid process itself stopped by SLURM, a kill) ends the grid as Ctrl-C does: what it
    submitted is cancelled rather than left to run on a cluster with nobody to collect it."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    return dataclasses.asdict(outcome)
