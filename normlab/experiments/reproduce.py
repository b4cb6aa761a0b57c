"""``normlab reproduce``: the paper's experiments at a scale, then the report.

    normlab reproduce --scale quick                      # the README's main job (make reproduce)
    normlab reproduce --scale paper --corpus ~/iwslt14   # the paper's settings on your IWSLT14 files, on GPUs
    normlab reproduce --scale cpu --jobs 2               # a night on 2 cores

Writes ``OUT/report/index.html`` and ``OUT/report/results.json``. Re-running skips finished runs and resumes a
killed one (see grid.py); ``--figures`` restricts the work to some figures.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from normlab import __version__
from normlab.config import ConfigError
from normlab.experiments.figures import Context, all_runs, mappings
from normlab.experiments.grid import run_grid
from normlab.experiments.results import collect
from normlab.experiments.scales import Scale, get_scale
from normlab.report.claims import evaluate_claims
from normlab.report.html import write_html
from normlab.report.plots import plot_all

__all__ = ["reproduce", "add_arguments", "run", "make_context"]

ALL_FIGURES = ("fig2", "fig3", "fig4", "fig5", "fig6")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", default="quick", choices=["smoke", "quick", "cpu", "paper"],
                   help="smoke (seconds, tests), quick (< 30 min on 2 cores), cpu (a night), paper (GPUs)")
    p.add_argument("--out", help="output directory (default: reproduce/SCALE)")
    p.add_argument("--figures", default=",".join(ALL_FIGURES), help=f"comma-separated subset of {ALL_FIGURES}")
    p.add_argument("--jobs", type=int, default=0, help="runs in parallel (default: one per CPU core, 1 on CUDA)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (default: cores / jobs)")
    p.add_argument("--launcher", default="local", choices=["local", "torchrun"], help="how each run is started")
    p.add_argument("--nproc", type=int, default=1, help="processes per run with --launcher torchrun")
    p.add_argument("--corpus", default="", help="translation corpus: a directory of your own files (e.g. IWSLT14 "
                   "De-En as train.de/train.en ...); default the vendored de-en")  # fmt: skip
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--precision", default="auto", choices=["auto", "bf16", "fp32"])


def make_context(scale: Scale, *, corpus: str = "", device: str = "auto", precision: str = "auto") -> Context:
    """Measure what the grid depends on: the number of updates in an epoch of the scale's translation data."""
    from normlab.data import prepare
    from normlab.experiments.figures import _translation
    from normlab.config import OptimConfig, ScheduleConfig

    probe = Context(translation_updates_per_epoch=1, corpus=corpus, device=device, precision=precision)
    cfg = _translation(scale, probe, placement="post", optim=OptimConfig(), schedule=ScheduleConfig())
    data = prepare(cfg.data, cfg.model.max_positions)
    batches = data.splits["train"].epoch_batches(1, cfg.seed, cfg.data.max_tokens, max_sentences=cfg.data.max_sentences)
    return Context(translation_updates_per_epoch=len(batches), corpus=corpus, device=device, precision=precision)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _analysis(scale: Scale, out: Path, threads: int) -> tuple[dict[str, Any] | None, dict[str, Path], str]:
    """Figure 3 and the lemmas through ``normlab analyze`` (skipped when its analysis.json exists)."""
    target = out / "analysis"
    if not (target / "analysis.json").exists():
        _say(f"analysis: normlab analyze --scale {scale.analysis} (Figure 3, Theorem 1, Lemmas 2-3)")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        cmd = [sys.executable, "-m", "normlab", "analyze", "--scale", scale.analysis, "--out", str(target)]
        log = out / "logs" / "analysis.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w", encoding="utf-8") as f:
            code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
        if code != 0:
            _say(f"analysis failed (exit code {code}); see {log}")
            return None, {}, ""
    from normlab.report.analysis import claims_view

    data = json.loads((target / "analysis.json").read_text(encoding="utf-8"))
    images = {f"fig3{p.stem}": p for p in sorted(target.glob("*.png"))}
    view, text = claims_view(data)
    return view, images, text


def reproduce(
    scale_name: str = "quick",
    out: str | Path | None = None,
    *,
    figures: tuple[str, ...] = ALL_FIGURES,
    jobs: int = 0,
    threads: int = 0,
    launcher: str = "local",
    nproc: int = 1,
    corpus: str = "",
    device: str = "auto",
    precision: str = "auto",
) -> dict[str, Any]:
    """Run the grid of ``figures`` at ``scale_name`` into ``out`` and write the report; returns results.json's
    content."""
    t0 = time.perf_counter()
    scale = get_scale(scale_name)
    unknown = [f for f in figures if f not in ALL_FIGURES]
    if unknown:
        raise ConfigError(f"--figures: unknown {unknown}; expected some of {list(ALL_FIGURES)}")
    out = Path(out or f"reproduce/{scale.name}")
    out.mkdir(parents=True, exist_ok=True)
    cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    cores = os.cpu_count() or 1
    jobs = jobs or (1 if cuda else cores)
    threads = threads or max(1, cores // jobs)
    _say(f"normlab reproduce --scale {scale.name} -> {out} ({jobs} job(s) x {threads} thread(s))")
    ctx = make_context(scale, corpus=corpus, device=device, precision=precision)
    specs = all_runs(scale, ctx, tuple(f for f in figures if f != "fig3"))
    analysis, analysis_images, analysis_text = (None, {}, "")
    if "fig3" in figures:
        analysis, analysis_images, analysis_text = _analysis(scale, out, cores if not cuda else 1)
    outcomes = run_grid(specs, out, jobs=jobs, threads=threads, launcher=launcher, nproc=nproc, say=_say)
    results = collect(specs, out, outcomes)
    if analysis is not None:
        results["analysis"] = analysis
        results["analysis_summary"] = analysis_text
    results["mappings"] = [m.__dict__ for m in mappings(scale, ctx)]
    results["claims"] = evaluate_claims(results)
    report = out / "report"
    images = {**plot_all(results, report), **analysis_images}
    wall = time.perf_counter() - t0
    prior = _prior_wall(report / "results.json")
    results["meta"] = {
        "scale": scale.name,
        "description": scale.description,
        "figures": list(figures),
        "normlab_version": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0) if cuda else f"CPU ({platform.processor() or platform.machine()}, "
        f"{cores} cores)",
        "threads": f"{jobs} job(s) x {threads} thread(s)",
        "wall_time_s": wall,
        "wall_time_all_sessions_s": wall + prior,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "updates_per_epoch": ctx.translation_updates_per_epoch,
        "runs": len(specs),
        "outcomes": {k: sum(o.status == k for o in outcomes.values()) for k in
                     ("completed", "diverged", "failed", "skipped", "cached")},
    }  # fmt: skip
    report.mkdir(parents=True, exist_ok=True)
    (report / "results.json").write_text(json.dumps(results, indent=1, default=_json_default), encoding="utf-8")
    write_html(results, images, report / "index.html")
    _say(f"report: {report / 'index.html'} ({wall / 60:.1f} min)")
    for c in results["claims"]:
        _say(f"  {c['id']:>4} {c['verdict']:<22} {c['claim']}")
    return results


def _prior_wall(path: Path) -> float:
    try:
        return float(json.loads(path.read_text(encoding="utf-8"))["meta"]["wall_time_all_sessions_s"])
    except (OSError, KeyError, ValueError, TypeError):
        return 0.0


def _json_default(x: Any) -> Any:
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return str(x)


def run(args: argparse.Namespace) -> int:
    figures = tuple(f.strip() for f in args.figures.split(",") if f.strip())
    reproduce(args.scale, args.out, figures=figures, jobs=args.jobs, threads=args.threads, launcher=args.launcher,
              nproc=args.nproc, corpus=args.corpus, device=args.device, precision=args.precision)  # fmt: skip
    return 0
