"""``normlab finetune``'s grid on a launcher (issue 39): normlab/finetune.py checks the grid and claims its directory
(:func:`normlab.finetune.open_grid`), then every run that has not finished goes to the grid runner
(experiments/grid.py) as a task of ``--launcher local | ray | slurm``, each training exactly as the in-process loop
of :func:`normlab.finetune.finetune` does (:func:`normlab.finetune.train_task`), into the same run folder
(``OUT/runs/SETTING/seedK``, its metrics.jsonl and summary.json), its output in ``OUT/logs/SETTING/seedK.log``.
Here, in the experiments layer, because the launchers are (normlab/finetune.py is a task and imports none of
them); not in experiments/finetuning.py, which experiments/figures.py imports and the grid runner imports
figures."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

from normlab.config import ConfigError, apply_overrides
from normlab.experiments.figures import RunSpec
from normlab.experiments.grid import RunOutcome, run_grid
from normlab.experiments.launchers import LauncherConfig, add_launcher_arguments, as_config, launcher_from_args
from normlab.experiments.progress import ProgressSettings, add_progress_arguments, progress_from_args
from normlab.finetune import SCALES, FinetuneConfig, announce, grid_results, open_grid, run_line, table, train_task
from normlab.finetune import add_arguments as add_finetune_arguments

__all__ = ["add_arguments", "default_threads", "finetune_grid", "run"]


def default_threads(launch: LauncherConfig, jobs: int) -> int:
    """CPU threads per run when none are given: on this machine, one run at a time, the threads this process
    would train with (the in-process loop's, so that its numbers are kept bit for bit); several at a time, the
    cores shared out; a task of ray or slurm, 1 (what it requests from the cluster). A reduction split over
    another number of threads sums in another order: give the same ``--threads`` to compare launchers."""
    if launch.remote:
        return 1
    return torch.get_num_threads() if jobs <= 1 else max(1, (os.cpu_count() or 1) // jobs)


def finetune_grid(
    source: str | Path,
    fc: FinetuneConfig,
    out: str | Path | None = None,
    *,
    which: str = "best",
    scale: str = "custom",
    launcher: LauncherConfig | str = "local",
    jobs: int = 1,
    threads: int = 0,
    verbose: bool = False,
    say: Any = print,
    progress: ProgressSettings | None = None,
) -> tuple[dict[str, Any] | None, dict[str, RunOutcome]]:
    """Run (or resume) the grid of ``fc`` with ``launcher``: the same checks, run folders and results as
    :func:`normlab.finetune.finetune`, each unfinished run a task of the grid runner (a finished run is never
    submitted again; Ctrl-C cancels what was submitted). Returns the results (None when a run failed: each
    failure is reported with its log's line, and the command run again retries it) and each run's outcome.
    ``progress``: the grid's live display or progress lines (progress.py)."""
    launch = as_config(launcher)
    if launch.kind == "torchrun" or launch.nproc > 1:
        raise ConfigError("normlab finetune trains each run in one process: --launcher local, ray or slurm, "
                          "without --nproc")  # fmt: skip
    launch.require_engine()  # before anything is written: one line naming the extra to install
    if jobs < 0 or threads < 0:
        raise ConfigError(f"--jobs and --threads must be >= 0, got {jobs} and {threads}")
    g = open_grid(source, fc, out, which=which, scale=scale)
    announce(g, say)
    threads = threads or default_threads(launch, jobs)
    # a run's folder is the grid's OUT/runs/SETTING/seedK: the spec's name is that path below OUT/runs
    names = [str(r.run_dir.relative_to(g.out / "runs")) for r in g.runs]
    specs = [RunSpec(name, (), f"{r.setting.name} seed {r.seed}", r.cfg, kind="finetune")
             for name, r in zip(names, g.runs)]  # fmt: skip
    cuda = fc.device == "cuda" or (fc.device == "auto" and torch.cuda.is_available())
    task_kwargs = {"checkpoint": str(Path(g.pre.checkpoint).resolve()), "update": g.pre.update,
                   "keep": g.fc.keep_checkpoints, "verbose": verbose, "cwd": os.getcwd()}  # fmt: skip
    outcomes = run_grid(specs, g.out, jobs=jobs or (0 if launch.remote else 1), threads=threads, launcher=launch,
                        cuda=cuda, say=say, task=train_task, task_kwargs=task_kwargs, progress=progress,
                        totals={name: r.updates for name, r in zip(names, g.runs)})  # fmt: skip
    failed = []
    for i, name in enumerate(names, 1):
        o = outcomes[name]
        if o.status in ("completed", "diverged", "cached"):
            say(run_line(g, i, "done" if o.status == "cached" else o.status, o.seconds))
        else:
            failed.append(f"{name}: {o.status}{': ' + o.error if o.error else ''}")
    if failed:
        say(f"{len(failed)} of {len(names)} run(s) did not finish ({'; '.join(failed[:3])}"
            f"{'; ...' if len(failed) > 3 else ''}); their logs are in {g.out / 'logs'}. The finished runs are kept: "
            "the same command runs the others again; no results.json until every run has finished")  # fmt: skip
        return None, outcomes
    return grid_results(g), outcomes


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``normlab finetune``'s arguments: the grid's (normlab/finetune.py), then where its runs go."""
    add_finetune_arguments(p)
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel (default: 1 on this machine, one after "
                   "another; with --launcher ray or slurm, every run: the cluster queues them)")  # fmt: skip
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (default: with --launcher local and "
                   "one job, the threads this process trains with, as the in-process loop did; several jobs, cores / "
                   "jobs; ray or slurm, 1): what each run requests from Ray or SLURM")  # fmt: skip
    add_launcher_arguments(p)
    add_progress_arguments(p)


def run(args: argparse.Namespace) -> int:
    fc = FinetuneConfig.from_dict(apply_overrides({**SCALES[args.scale], "task": args.task}, args.set))

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    results, _ = finetune_grid(args.source, fc, args.out, which=args.checkpoint, scale=args.scale,
                               launcher=launcher_from_args(args), jobs=args.jobs, threads=args.threads,
                               verbose=args.verbose, say=say, progress=progress_from_args(args))  # fmt: skip
    if results is None:
        return 1
    print(table(results))
    print(f"results: {Path(results['out']) / 'results.json'}")
    return 0
