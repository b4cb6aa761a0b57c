"""``normlab reproduce``: the paper's experiments at a scale, then the report.

    normlab reproduce --scale quick                      # the README's main job (make reproduce)
    normlab reproduce --scale paper --corpus ~/iwslt14   # the paper's settings on your IWSLT14 files, on GPUs
    normlab reproduce --scale full --out reproduce/quick # quick + every other claim's arms: trains only those

Writes ``OUT/report/index.html``, ``OUT/report/REPORT.md`` and ``OUT/report/results.json``. Re-running skips
finished runs and resumes a killed one (see grid.py); a finished run is its small files under ``OUT/runs/NAME/``
(config.yaml, metrics.jsonl, summary.json: no checkpoint needed), so a grid can be filled from several machines
by copying or committing those, and ``--scale full`` on a folder of quick runs trains only the arms quick lacks
(the two scales share those runs: scales.py). A pre-training run of Figure 5 needs its checkpoints until its
fine-tuning runs have finished. ``--figures`` chooses the figures (some of the scale's, or one it runs only when
asked: ``fig5`` at full, ``width``);
``--report-only`` trains nothing and writes the report from the runs finished so far (a long job stopped
half-way, or still running in another process): a claim then counts only its finished seeds, and the report's
first lines name the runs that have not finished.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from normlab import __version__
from normlab.analysis.run import analysis_scale, claims_numbers, summary_lines
from normlab.config import ConfigError, OptimConfig, ScheduleConfig, TrainConfig
from normlab.data import prepare
from normlab.device import cpu_name
from normlab.experiments.budget import estimate, native_bf16, run_updates, updates_per_epoch
from normlab.experiments.figures import (
    Context,
    RunSpec,
    _translation,
    all_runs,
    bert_arms,
    fig5_bert,
    mappings,
    seeds_mapping,
)
from normlab.experiments.finetuning import finetune_config
from normlab.experiments.grid import (
    FINISHED,
    add_sync_argument,
    any_finished,
    check_not_stale,
    child_preexec,
    others_note,
    run_grid,
    run_status,
    sync_in,
    sync_out,
)
from normlab.experiments.launchers import LauncherConfig, add_launcher_arguments, as_config, launcher_from_args
from normlab.experiments.progress import ProgressSettings, add_progress_arguments, progress_from_args
from normlab.experiments.results import collect, group_runs
from normlab.experiments.scales import QUICK_BUDGET, Scale, get_scale
from normlab.experiments.sweep import run_sweep, sweep_scale
from normlab.metrics import majority_share, unigram_plateau
from normlab.report.render import evaluate_claims, plot_all, progress_sentence, write_report
from normlab.results import provenance, split_seed

__all__ = ["reproduce", "add_arguments", "run", "make_context", "rerender", "local_shape"]

ALL_FIGURES = ("fig2", "fig3", "fig4", "fig5", "fig6", "width")
"""The paper's figures, and ``width``: beyond the paper, the stability sweep across widths (scales.py)."""
NOT_TRAINED_HERE = ("fig3", "width")  # fig3: the analysis process; width: its own sweep grid (sweep.py)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", default="quick", choices=["smoke", "quick", "full", "long", "paper"],
                   help="smoke (seconds, tests), quick (the decisive contrasts, ~1.9 h measured on 2 Zen 5 cores, "
                   "~2.7 h on a Zen 4, ~2 h with AMX), full (quick + the other claims' arms, reusing a quick "
                   "folder's runs; hours), long (C7 and C9 per epoch at the de-en-cpu recipe's shape: runs of "
                   "~40 min measured on 2 Zen 5 cores, ~1.6 h on a Zen 4, that translate), "
                   "paper (the paper's settings, GPUs)")
    p.add_argument("--out", help="output directory (default: reproduce/SCALE)")
    p.add_argument("--figures", default="", help=f"comma-separated subset of {ALL_FIGURES} (default: the scale's)")
    p.add_argument("--no-estimate", action="store_true", help="skip the probe that estimates the wall time")
    p.add_argument("--report-only", action="store_true", help="train nothing: write the report from the runs "
                   "finished so far in OUT (claims count only the finished seeds; the report names the others)")
    p.add_argument("--rerender", default="", metavar="REPORT_DIR", help="train and read no run: decide the claims "
                   "again from REPORT_DIR/results.json under the current rules and rewrite its results.json, REPORT.md "
                   "(and index.html if there is one) in place")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel (default: one per CPU core, 1 on CUDA; "
                   "--scale long: 1, on every core; with --launcher ray or slurm, every run that is ready: the cluster queues them)")
    p.add_argument("--seeds", type=int, default=0, help="seeds of each training run, translation and BERT "
                   "pre-training (default: the scale's, 3 at quick and full; fine-tuning keeps its own): runs seeds "
                   "1..N, so a finished folder keeps its seeds and trains only the new ones; more seeds narrow every "
                   "claim's interval (decide how many before looking at the verdicts)")
    add_sync_argument(p)
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (default: cores / jobs; with ray or "
                   "slurm, 1): what each run requests from Ray or SLURM")
    add_launcher_arguments(p)
    p.add_argument("--corpus", default="", help="translation corpus: a directory of your own files (e.g. IWSLT14 "
                   "De-En as train.de/train.en ...); default the vendored de-en")  # fmt: skip
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"])
    add_progress_arguments(p)


@functools.lru_cache(maxsize=4)
def _prepare(data_cfg: Any, max_positions: int) -> Any:
    """``data.prepare``, once per data config in this process: the context and the baselines read the same
    splits (from the cache on disk, but each read logged its dropped examples again)."""
    return prepare(data_cfg, max_positions)


def make_context(
    scale: Scale, figures: tuple[str, ...] = ALL_FIGURES, *, corpus: str = "", device: str = "auto",
    precision: str = "auto",
) -> Context:
    """Measure what the grid depends on: the updates in an epoch of the scale's translation data and, for
    Figure 5, of the pre-training data and each fine-tuning task (the warm-ups are fractions of the run; the
    wall-time estimate counts validation passes per epoch)."""
    def per_epoch(cfg: TrainConfig) -> int:
        return updates_per_epoch(_prepare(cfg.data, cfg.model.max_positions), cfg)

    probe = Context(translation_updates_per_epoch=1, corpus=corpus, device=device, precision=precision)
    translation = per_epoch(_translation(scale, probe, placement="post", optim=OptimConfig(), schedule=ScheduleConfig()))
    finetune, mlm = {}, 0
    if "fig5" in figures:
        bert = fig5_bert(scale, probe)[0].config
        mlm = per_epoch(bert)
        finetune = {task: per_epoch(finetune_config(bert, task, scale.finetune, 1, 1)) for task in scale.finetune.tasks}
    return Context(translation_updates_per_epoch=translation, finetune_updates_per_epoch=finetune,
                   mlm_updates_per_epoch=mlm, corpus=corpus, device=device, precision=precision)  # fmt: skip


def baselines(scale: Scale, ctx: Context, figures: tuple[str, ...]) -> dict[str, Any]:
    """What the gates of report/claims.py compare with, computed from the data the runs see: for the translation
    and pre-training data the unigram loss of the validation targets (nats per token: their cross-entropy under
    the training targets' token frequencies, the plateau a model that learned only frequencies sits on) beside
    their plug-in entropy; the majority-class share of each fine-tuning task's validation labels."""
    out: dict[str, Any] = {}

    def entropy(cfg: Any, masked_lm: bool = False) -> dict[str, Any]:
        splits = _prepare(cfg.data, cfg.model.max_positions).splits
        plateau = unigram_plateau(splits["valid"].all_targets(), splits["train"].all_targets(), masked_lm=masked_lm)
        return {"unigram_entropy": plateau.pop("unigram_loss"), **plateau}  # the key report/claims.py reads

    if any(f in figures for f in ("fig2", "fig4", "fig6")):
        out["translation"] = entropy(_translation(scale, ctx, placement="post", optim=OptimConfig(),
                                                  schedule=ScheduleConfig()))  # fmt: skip
    if "fig5" in figures:
        bert = fig5_bert(scale, ctx)[0].config
        mlm = entropy(bert, masked_lm=True)
        out["mlm"] = mlm
        out["finetune"] = {}
        for task in scale.finetune.tasks:
            cfg = finetune_config(bert, task, scale.finetune, 1, 1)
            labels = _prepare(cfg.data, cfg.model.max_positions).splits["valid"].labels
            out["finetune"][task] = {"majority": majority_share(labels), "examples": int(len(labels))}
    return out


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _more_seeds(specs: list[RunSpec], runs: Path) -> int:
    """The highest seed of a finished run in ``runs`` beyond the grid's (``GROUP-sK`` of one of its groups), or 0:
    a folder trained with ``--seeds 5`` read by a plain ``reproduce`` keeps its seeds 4-5, and says so."""
    names = {s.name for s in specs}
    groups = {base for base, seed in map(split_seed, names) if seed is not None}
    beyond = 0
    for d in runs.iterdir() if runs.is_dir() else []:
        group, seed = split_seed(d.name)
        if seed is not None and group in groups and d.name not in names and run_status(d) in FINISHED:
            beyond = max(beyond, seed)
    return beyond


def _lowest_priority(then: Any) -> None:
    """``preexec_fn``: nice 19, then ``then`` (the parent-death signal), in the child before it execs."""
    os.nice(19)
    if then is not None:
        then()


class _Analysis:
    """Figure 3 and the lemmas through ``normlab analyze``, in a process of its own beside the training grid;
    skipped when its analysis.json exists (written atomically). ``threads``: 1 beside a grid (it time-shares
    the cores with the grid's jobs, at nice 19), all cores when it runs ``alone`` (``--figures fig3``)."""

    def __init__(self, scale: Scale, out: Path, *, threads: int, device: str, start: bool = True,
                 alone: bool = False) -> None:
        self.target = out / "analysis"
        self.log = out / "logs" / "analysis.log"
        self.proc: subprocess.Popen | None = None
        self.stale = self._stale(scale.analysis)
        if (self.done() and not self.stale) or not start:
            return
        _say(f"analysis: normlab analyze --scale {scale.analysis} (Figure 3, Theorem 1, Lemmas 2-3), beside the grid"
             + (f" (the one in {self.target} has other settings: {self.stale})" if self.stale else ""))
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_WAIT_POLICY="PASSIVE")
        cmd = [sys.executable, "-m", "normlab", "analyze", "--scale", scale.analysis, "--out", str(self.target),
               "--threads", str(threads), "--set", f"device={device}"]  # fmt: skip
        # Beside the grid at the lowest priority: the training runs are the job's long path (their claims are
        # decided first, and their update times stay what the probe estimated), and the analysis (~6 minutes on 2
        # idle cores) fills what they leave idle: validations, and the grid's tail when fewer runs than cores are
        # left. At normal priority it took a third of the CPU from the runs for 10-20 minutes. At nice 19 beside
        # the quick grid (2026-11-27, 2-core Zen 5) it ended 6.5 minutes after the grid's 109 (the two priorities
        # were not timed against each other on one machine).
        preexec = child_preexec()
        if not alone and hasattr(os, "nice"):
            preexec = functools.partial(_lowest_priority, preexec)
        with open(self.log, "w", encoding="utf-8") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env,
                                         preexec_fn=preexec)  # fmt: skip

    def stop(self) -> None:
        """Stop the analysis (the grid failed or was interrupted); a rerun starts it again."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def done(self) -> bool:
        return (self.target / "analysis.json").exists()

    def _stale(self, name: str) -> str:
        """The settings in which an existing analysis.json differs from the scale's analysis (e.g. fewer seeds,
        from an older normlab), or "": such an analysis is run again rather than judged by today's rules."""
        try:
            saved = json.loads((self.target / "analysis.json").read_text(encoding="utf-8"))["config"]
        except (OSError, ValueError, KeyError, TypeError):
            return ""
        want = analysis_scale(name).to_dict()
        return ", ".join(f"{k}: {saved.get(k)!r} -> {v!r}" for k, v in want.items()
                         if k not in ("device", "threads") and json.loads(json.dumps(v)) != saved.get(k))  # fmt: skip

    def result(self) -> tuple[dict[str, Any] | None, dict[str, Path], str]:
        if self.proc is None and not self.done():  # --report-only before the analysis finished
            return None, {}, ""
        if self.proc is None and self.stale:  # --report-only reads what there is, and says so
            _say(f"analysis: {self.target} has other settings than this scale's ({self.stale}); reported as it is")
        if self.proc is not None:
            code = self.proc.wait()
            if code != 0:
                _say(f"analysis failed (exit code {code}); see {self.log}")
                return None, {}, ""
            _say("analysis: done")

        data = json.loads((self.target / "analysis.json").read_text(encoding="utf-8"))
        try:  # from the measurements, with this normlab's claims_numbers (an older analysis.json lacks fields)
            data["claims"] = claims_numbers(data)
        except (KeyError, TypeError, ValueError):
            pass
        images = {f"fig3-{p.stem}": p for p in sorted(self.target.glob("*.png"))}
        return data["claims"], images, "\n".join(summary_lines(data))


def _long_precision(precision: str, *, train: bool, cuda: bool) -> str:
    """The long scale's precision: bf16 unless asked otherwise, written into every run's config, so that a seed
    trained in fp32 on another machine can never join a bf16 contrast from the sync folder (``auto`` resolves per
    machine and would hide it: review of issue 37's scale). Training it on a CPU without native bf16 is refused:
    its runs would take ~6 h each in fp32 (scales.LONG_BUDGET), far longer in emulated bf16, past the 2-hour
    pieces a grid of several machines is made of; ``--precision fp32`` trains it there anyway, as a grid of its own."""
    if precision == "auto":
        precision = "bf16"
    if precision == "bf16" and train and not cuda and not native_bf16(torch.device("cpu")):
        raise ConfigError("--scale long trains its runs in bf16 (every seed of a contrast in one precision, whatever "
                          "machine trains it), and this CPU has no native bf16 (no AVX-512 BF16 or AMX): a run would "
                          "take ~6 h in fp32 and far longer in emulated bf16, past the 2-hour pieces the grid is "
                          "made of (a checkpoint does not leave the machine that wrote it). Run it on a CPU with "
                          "AVX-512 BF16 or AMX, or a GPU; or pass --precision fp32 to train it here in fp32, as a "
                          "grid of its own (another --out and --sync folder: its runs do not mix with bf16 ones), "
                          "each run resumable on this machine only")
    return precision


def reproduce(
    scale_name: str = "quick",
    out: str | Path | None = None,
    *,
    figures: tuple[str, ...] = (),
    jobs: int = 0,
    threads: int = 0,
    launcher: LauncherConfig | str = "local",
    nproc: int = 1,
    corpus: str = "",
    device: str = "auto",
    precision: str = "auto",
    probe: bool = True,
    train: bool = True,
    progress: ProgressSettings | None = None,
    sync: str | Path | None = None,
    seeds: int = 0,
) -> dict[str, Any]:
    """Run the grid of ``figures`` (default: the scale's) at ``scale_name`` into ``out`` and write the report;
    returns results.json's content. ``probe``: print the estimated wall time first (see budget.py). ``train``
    False (``--report-only``): run nothing (neither the grid, nor the analysis, nor the width sweep) and write the
    report from what has finished in ``out``; a run that has not finished (killed, still running in another
    process, never started) counts as missing, and ``meta["unfinished"]`` names it. ``launcher``: where the
    grid's runs go (a kind or a LauncherConfig, launchers.py), the width sweep's too; the analysis of Figure 3
    (minutes, no training) runs in a process of this machine whatever the launcher. ``sync``: a folder of finished
    runs' small files shared between machines (``--sync``, grid.sync_in / sync_out): the runs of this grid
    finished there when the job starts are taken as finished, and each run finished here is copied into it as it
    ends (not with ``--report-only``, which writes nothing there); the width sweep's runs are not synced.
    ``seeds``: the seeds of each training run (translation, BERT pre-training; not fine-tuning's own seeds)
    instead of the scale's (``--seeds``: seeds 1..N, so that a folder of the scale's 3 gains seeds 4..N and keeps
    the others). ``progress``: the grid's live
    display or progress lines (progress.py), whose ETA starts from the estimate's pace."""
    t0 = time.perf_counter()
    launch = as_config(launcher, nproc)
    if train:
        launch.require_engine()  # one line naming the extra to install, before any data is prepared
    _prepare.cache_clear()  # the data of this call only (files may have changed since an earlier one)
    scale = get_scale(scale_name)
    scale_seeds = scale.seeds
    if seeds:
        if seeds < 1:
            raise ConfigError(f"--seeds {seeds}: expected at least 1")
        scale = scale.replace(seeds=seeds)
    figures = tuple(figures) or scale.figures
    unknown = [f for f in figures if f not in ALL_FIGURES]
    if unknown:
        raise ConfigError(f"--figures: unknown {unknown}; expected some of {list(ALL_FIGURES)}")
    out = Path(out or f"reproduce/{scale.name}")
    if not train and not (any_finished(out / "runs") or (out / "analysis" / "analysis.json").exists()
                          or any_finished(out / "width" / "runs")
                          or (sync and any_finished(Path(sync)))):  # before any data is prepared  # fmt: skip
        raise ConfigError(f"--report-only: nothing has finished in {out} yet; run it without --report-only first")
    out.mkdir(parents=True, exist_ok=True)
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if scale.name == "long":
        precision = _long_precision(precision, train=train and not launch.remote, cuda=cuda)
    cores = os.cpu_count() or 1
    if launch.remote:  # the cluster's nodes, not this machine's cores, bound what runs at once
        threads = threads or 1
    else:
        jobs, threads = local_shape(scale, jobs, threads, cuda=cuda, cores=cores)
    _say(f"normlab reproduce --scale {scale.name} -> {out} " + (f"({_shape(launch, jobs, threads)})" if train
         else "(--report-only: from the runs finished so far, training nothing)"))  # fmt: skip
    # The analysis needs no data: it starts first and overlaps the tokenizer training as well as the grid.
    alone = set(figures) <= {"fig3"}
    analysis_job = (_Analysis(scale, out, threads=cores if alone else 1, device=device, start=train, alone=alone)
                    if "fig3" in figures else None)  # fmt: skip
    try:
        ctx = make_context(scale, figures, corpus=corpus, device=device, precision=precision)
        specs = all_runs(scale, ctx, tuple(f for f in figures if f not in NOT_TRAINED_HERE))
        store = Path(sync) if sync else None
        if store is not None:
            sync_in(specs, out, store, _say, train=train)
            if train:  # what an earlier session finished here without --sync goes there too (the grid's own only)
                check_not_stale(specs, out)
                for spec in specs:
                    sync_out(spec, out, store, _say, specs=specs)
        if beyond := _more_seeds(specs, out / "runs"):
            _say(f"{out / 'runs'} holds finished runs of seeds up to {beyond} of this grid's runs; this job counts "
                 f"seeds 1-{scale.seeds} (--seeds {beyond} counts them all)")
        todo = [s for s in specs if run_status(out / "runs" / s.name) not in FINISHED]
        sweep_started = "width" in figures and any_finished(out / "width" / "runs")
        if not train:
            # a run trained with other settings (another --scale, --corpus) must not be reported as this grid's
            check_not_stale(specs, out)
            if len(todo) == len(specs) and not (analysis_job and analysis_job.done()) and not sweep_started:
                raise ConfigError(f"--report-only: no run of the figures {', '.join(figures)} at the {scale.name} "
                                  f"scale has finished in {out} yet." + (others_note(specs, out / "runs") or
                                  " Run it without --report-only first."))  # fmt: skip
        pace = None  # the probe's seconds per grid update: the estimate, and the start of the grid's ETA
        if train and probe and todo and launch.remote:
            _say(f"estimate: none with --launcher {launch.kind} (the probe times this machine, not the cluster's)")
        elif train and probe and todo:
            # the budget is the scale's grid's; --seeds scales it
            budget = QUICK_BUDGET["minutes"] * scale.seeds / scale_seeds if scale.name == "quick" else None
            est = estimate(todo, ctx, jobs=jobs, threads=threads, budget_minutes=budget)
            _say(est.text())
            pace = est.pace or None
        base = baselines(scale, ctx, figures)
        by_name = {spec.name: spec for spec in specs}
        outcomes = (run_grid(specs, out, jobs=jobs, threads=threads, launcher=launch, cuda=cuda, say=_say,
                             progress=progress, totals={s.name: run_updates(s, ctx) for s in specs}, pace=pace,
                             on_end=(lambda name, _o: sync_out(by_name[name], out, store, _say, specs=specs))
                             if store else None)
                    if train else {})  # fmt: skip
        # After the paper's runs, so that a stopped job has decided the paper's claims first. With --report-only,
        # from the sweep's finished runs, if any.
        width = None
        if "width" in figures and (train or sweep_started):
            width = _width_sweep(scale, out, jobs=jobs, threads=threads, corpus=corpus, device=device,
                                 precision=precision, probe=probe, train=train, launcher=launch,
                                 progress=progress)  # fmt: skip
    except BaseException as e:  # a bad corpus, Ctrl-C: the analysis must not run on as an orphan
        if analysis_job:
            analysis_job.stop()
        if isinstance(e, KeyboardInterrupt) and train:
            _say("interrupted: finished runs are kept and a killed one resumes where it stopped. The same command "
                 "goes on; with --report-only added it writes the report from what has finished")  # fmt: skip
        raise
    analysis, analysis_images, analysis_text = analysis_job.result() if analysis_job else (None, {}, "")
    results = collect(specs, out, outcomes)
    results["baselines"] = base
    if analysis is not None:
        results["analysis"] = analysis
        results["analysis_summary"] = analysis_text
    results["mappings"] = [m.__dict__ for m in mappings(scale, ctx, figures)]
    results["mlm_arms"] = dataclasses.asdict(bert_arms(scale))  # C11-C12 and Figure 5 find the BERT runs here
    unfinished = {s.name: st for s in specs if (st := results["runs"][s.name]["status"]) not in FINISHED}
    # what this scale runs but has not finished (a job stopped, --report-only): a claim missing these is
    # inconclusive ("not finished"), not "not run at this scale"
    pending = sorted({results["runs"][n]["group"] for n in unfinished})
    if any("fig5" in results["runs"][n]["figures"] for n in unfinished):
        pending.append("fine-tuning results")
    if "fig3" in figures and analysis is None:
        pending.append("analysis")
    results["claims"] = evaluate_claims(results, pending=pending)
    results["width_sweep"] = _width_summary(scale, width, asked="width" in figures)
    report = out / "report"
    images = plot_all(results, report)
    report.mkdir(parents=True, exist_ok=True)
    if width is not None:  # the sweep's two figures beside the others, so that the report folder stands alone
        for key in ("loss_vs_lr", "frontier"):
            images[f"width_{key}"] = Path(shutil.copyfile(out / "width" / "report" / f"{key}.png",
                                                          report / f"width_{key}.png"))  # fmt: skip
    for key, png in analysis_images.items():  # beside the other figures, so that the report folder stands alone
        images[key] = Path(shutil.copyfile(png, report / f"{key}.png"))
    wall = time.perf_counter() - t0
    prior = _prior_wall(report / "results.json")
    seconds = [r.get("seconds") for r in results["runs"].values() if r["status"] in FINISHED]
    results["meta"] = {
        "scale": scale.name,
        "description": scale.description + (f" Run here with {scale.seeds} seeds per training run (--seeds), not "
                                            f"{scale_seeds}." if scale.seeds != scale_seeds else ""),
        "corpus": str(Path(corpus).resolve()) if corpus else "the vendored corpora (normlab/assets/corpora)",
        "figures": list(figures),
        "seeds": scale.seeds,  # per training arm (the scale's, or --seeds)
        "normlab_version": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0) if cuda else f"CPU ({cpu_name()}, "
        f"{cores} cores)",
        "threads": _shape(launch, jobs, threads) if train else None,
        "launcher": launch.kind if train else None,
        "wall_time_s": wall,
        # the finished runs' own training time (their summaries), summed: what a report written with
        # --report-only can say of the job's cost; None when a finished run lacks it
        "train_time_s": None if any(x is None for x in seconds) else math.fsum(seconds),
        # a report written without training adds no training time to the job's total. Only the sessions that
        # ended by writing a report count: one killed half-way through the grid wrote none and is missing (a
        # lower bound; train_time_s, from the runs themselves, does not have that gap)
        "wall_time_all_sessions_s": (wall if train else 0.0) + prior,
        "report_only": not train,
        "unfinished": unfinished,
        "analysis_missing": "fig3" in figures and analysis is None,
        "width_missing": "width" in figures and width is None,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "updates_per_epoch": ctx.translation_updates_per_epoch,
        "runs": len(specs),
        "outcomes": {k: sum(o.status == k for o in outcomes.values()) for k in
                     ("completed", "diverged", "failed", "skipped", "cached")},
    }  # fmt: skip
    report.mkdir(parents=True, exist_ok=True)
    write_report(results, images, report)  # results.json atomic: a --report-only elsewhere may be reading it (_prior_wall)
    _say(f"report: {report / 'index.html'} ({wall / 60:.1f} min)")
    if not train:
        _say(progress_sentence(results["meta"]))
    for c in results["claims"]:
        _say(f"  {c['id']:>4} {c['verdict']:<22} {c['claim']}")
    return results


def local_shape(scale: Scale, jobs: int, threads: int, *, cuda: bool, cores: int) -> tuple[int, int]:
    """Runs at once and threads per run on this machine: as given, else one run on CUDA, the scale's ``jobs`` on a
    CPU (``long``: 1, every core on one run, so that each run is a piece of at most 2 hours) or one per core, and
    the cores shared among them."""
    jobs = jobs or (1 if cuda else min(scale.jobs, cores) if scale.jobs else cores)
    return jobs, threads or max(1, cores // jobs)


def _shape(launch: LauncherConfig, jobs: int, threads: int) -> str:
    """How the grid runs, in words: ``2 job(s) x 1 thread(s)``, or where a remote launcher sends it."""
    if not launch.remote:
        return f"{jobs} job(s) x {threads} thread(s)"
    return f"{launch.kind}: {'every ready run' if jobs <= 0 else f'at most {jobs} runs'} at once x {threads} thread(s)"


def rerender(report: Path | str) -> dict[str, Any]:
    """Decide the claims again from ``report``/results.json (what a finished job wrote) under the current rules of
    report/claims.py, without the runs: every number a verdict reads is in results.json. Rewrites results.json's
    ``claims`` and the mapping table's "seeds" row (the rules' numbers), then REPORT.md and, if present,
    index.html, with the figures already in the folder. Returns the new results."""
    report = Path(report)
    results = json.loads((report / "results.json").read_text(encoding="utf-8"))
    meta = results.get("meta", {})
    unfinished = meta.get("unfinished") or {}
    pending = sorted({results["runs"][n]["group"] for n in unfinished if n in results["runs"]})
    if any("fig5" in results["runs"][n].get("figures", []) for n in unfinished if n in results["runs"]):
        pending.append("fine-tuning results")
    if meta.get("analysis_missing"):
        pending.append("analysis")
    results["claims"] = evaluate_claims(results, pending=pending)
    seeds = max((len(g) for g in group_runs(results.get("runs", {})).values()), default=0)
    results["mappings"] = [seeds_mapping(seeds).__dict__ if m.get("what") == "seeds" else m
                           for m in results.get("mappings", [])]  # fmt: skip
    images = {png.stem: png for png in sorted(report.glob("*.png"))}
    write_report(results, images, report, html=(report / "index.html").exists())
    return results


def _width_sweep(scale: Scale, out: Path, **kw: Any) -> dict[str, Any]:
    """The ``width`` figure: ``normlab sweep`` at the scale's preset into OUT/width (its own report there too)."""
    _say(f"width (beyond the paper): the {scale.sweep!r} stability sweep -> {out / 'width'}"
         + ("" if kw.get("train", True) else " (its finished runs)"))
    return run_sweep(sweep_scale(scale.sweep), out / "width", say=_say, **kw)


def _width_summary(scale: Scale, width: dict[str, Any] | None, *, asked: bool = False) -> dict[str, Any]:
    """What the report shows of the sweep: its result without the per-run cells (they are in OUT/width/report/
    sweep.json), or, when it was not run, what running it would take (``asked``: it was among the figures, but
    --report-only found no finished run of it)."""
    if width is not None:
        return {"ran": True, **{k: v for k, v in width.items() if k not in ("cells", "meta")},
                # where the runs trained, counted before the cells are left out (report.sweep's header says it)
                "meta": {**(width.get("meta") or {}),
                         "provenance": provenance(width.get("frontier") or [], width.get("cells") or [])}}
    cfg = sweep_scale(scale.sweep)
    runs = len(cfg.schemes) * len(cfg.warmups) * len(cfg.widths) * len(cfg.lrs) * cfg.seeds
    return {"ran": False, "preset": scale.sweep, "runs": runs, "description": cfg.description,
            **({"unfinished": True} if asked else {})}  # fmt: skip


def _prior_wall(path: Path) -> float:
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["meta"]["wall_time_all_sessions_s"])
    except (OSError, KeyError, ValueError, TypeError):
        return 0.0


def run(args: argparse.Namespace) -> int:
    if args.rerender:
        for c in rerender(args.rerender)["claims"]:
            _say(f"  {c['id']:>4} {c['verdict']:<22} {c['claim']}")
        return 0
    figures = tuple(f.strip() for f in args.figures.split(",") if f.strip())
    if args.figures.strip() and not figures:
        raise ConfigError(f"--figures {args.figures!r} names no figure; expected some of {list(ALL_FIGURES)}")
    reproduce(args.scale, args.out, figures=figures, jobs=args.jobs, threads=args.threads,
              launcher=launcher_from_args(args), corpus=args.corpus, device=args.device, precision=args.precision,
              probe=not args.no_estimate, train=not args.report_only, progress=progress_from_args(args),
              sync=args.sync or None, seeds=args.seeds)  # fmt: skip
    return 0
