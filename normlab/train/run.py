"""``normlab train``: one run from a YAML config (plus ``--set`` overrides) into a run directory.

Python: ``train(cfg, out)``. From the shell::

    normlab train --config run.yaml --set optim.lr=1e-3 --out runs/post-lr1e-3
    normlab train --out runs/post-lr1e-3 --resume          # continue it (after a kill, or with more epochs)
    normlab train --nproc-per-node 4 --config run.yaml --out runs/ddp     # data parallel, 4 ranks (gloo/nccl)
    torchrun --nproc_per_node 4 -m normlab train --config run.yaml --out runs/ddp   # the same, under torchrun

Exit codes: 0 completed, 2 configuration error (one line, nothing written), 3 diverged, 130 interrupted by
Ctrl-C (one line: where it stopped and how to resume; the run's status is ``interrupted``), 1 any other fault
and 143 SIGTERM (the run's status is ``failed``, with the error in summary.json; ``--resume`` continues it from
its last checkpoint).

Data parallelism, two ways. ``--nproc-per-node N`` starts the N ranks itself (:mod:`normlab.train.launch`, torch's
launcher API, the same agent as torchrun's) after the checks that need no rank (the configuration, the run
directory): a fault is one line in all, the line of the rank that failed first, and the exit code is that
rank's (the rule for ranks that disagree is that module's). Under ``torchrun -m normlab train`` every rank that
fails says why in one line (N ranks failing alike: up to N lines), and the run's status becomes ``failed``; the
ranks that stop because of it (a collective whose peer is gone, torchrun's SIGTERM) exit 1 without a line.
torchrun itself then prints its ChildFailedError report (a traceback of torchrun's own ``main``, whatever the
worker does) and exits 1 whatever the ranks' codes: the grid (:mod:`normlab.experiments.grid`) reports the
run's status and its error line instead. Either way a rank that stalls holds the others in a collective for at
most NORMLAB_DIST_TIMEOUT seconds (:mod:`normlab.train.distributed`), then the run ends ``failed``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from normlab.assets import load_config_file
from normlab.config import ConfigError, TrainConfig, add_set_argument, apply_overrides
from normlab.data import fingerprint, prepare
from normlab.device import autocast_dtype
from normlab.faults import LAUNCHER_PID, die_with_parent, final_line, launched
from normlab.rundir import RunDir
from normlab.train.distributed import dist_timeout, init_distributed, shutdown
from normlab.train.launch import MAX_NPROC, launch
from normlab.train.throughput import limit_onednn_cache, tune_malloc
from normlab.train.trainer import (
    EXIT_DIVERGED,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    PeerFailed,
    Terminated,
    Trainer,
    prepare_run_dir,
)
from normlab.translate import evaluate_run, validation_bleu

__all__ = ["train", "resolve_config", "add_arguments", "run"]

log = logging.getLogger("normlab.train")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML run config (sections model, data, optim, schedule and top-level keys), or "
                                    "a bundled one by name: bert-{tiny,mini,small,base}-{post,pre}, "
                                    "de-en-cpu")  # fmt: skip
    add_set_argument(p, TrainConfig)
    p.add_argument("--out", required=True, help="run directory (config, metrics, checkpoints, TensorBoard)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    p.add_argument("--accept-changed-data", action="store_true",
                   help="with --resume: train on a corpus that changed since the run started, encoded with the "
                        "run's own tokenizer.model (without it, changed data is refused)")  # fmt: skip
    p.add_argument("--accept-changed-settings", action="store_true",
                   help="with --resume: train on with another optimizer, schedule, accumulate or label_smoothing "
                        "than the run's (without it, a resume may change only the run's length, its evaluation and "
                        "checkpoint cadence and how it computes)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--threads", type=int, default=0, metavar="N",
                   help="CPU threads for this run (torch.set_num_threads; default: torch's, one per core). On a CPU "
                        "that other processes share, fewer threads than cores avoid OpenMP's threads waiting on a "
                        "descheduled one (a 2-core machine with another job: 1 thread can be several times faster)")
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N",
                   help="data parallel: start N ranks on this machine (gloo on the CPU, nccl on CUDA), as torchrun "
                        "--standalone --nproc_per_node N does, with one line per fault instead of torchrun's report; "
                        "collectives wait at most $NORMLAB_DIST_TIMEOUT seconds (default 1800) for a rank")  # fmt: skip


def resolve_config(config_path: str | None, overrides: list[str], out: str | Path, resume: bool) -> TrainConfig:
    """The run's configuration: the YAML file (or, on ``--resume`` without one, the run's saved config) with
    the overrides applied; strictly checked."""
    data: dict[str, Any] = {}
    if config_path:
        data = load_config_file(config_path)
    elif resume and RunDir(out).is_run():
        try:
            data = RunDir(out).read_config_dict() or {}
        except ConfigError as e:
            raise ConfigError(f"--resume: {RunDir(out).config_path}: {e}") from None
    return TrainConfig.from_dict(apply_overrides(data, overrides))


def _fit_to_data(cfg: TrainConfig, data: Any) -> TrainConfig:
    """The model's vocabulary and classes come from the data: the tokenizer's size and the label set."""
    model = cfg.model.replace(vocab_size=data.vocab_size)
    if cfg.data.task == "classification":
        model = model.replace(num_classes=data.num_classes)
    default = type(cfg.model)().vocab_size
    if cfg.model.vocab_size not in (data.vocab_size, default):
        # a size the user chose and the run does not use: said where it is seen (a new user's --set
        # model.vocab_size=2000 was replaced without a word), with the setting that does change it
        log.warning("model.vocab_size=%d is replaced by the tokenizer's size, %d; data.vocab_size sets that",
                    cfg.model.vocab_size, data.vocab_size)  # fmt: skip
    elif model != cfg.model:
        log.info("model.vocab_size=%d (the tokenizer's)", model.vocab_size)
    return cfg.replace(model=model)


def _bleu_hook(cfg: TrainConfig, tokenizer: Any, valid: Any, is_main: bool) -> Any:
    """The validation BLEU of the first ``cfg.valid_bleu`` sentences after every evaluation (the paper plots
    BLEU per epoch, Figures 2 and 4); decoded on the main rank only."""
    def extra(model: Any, epoch: int) -> dict[str, float]:
        if not is_main:
            return {}
        bf16 = autocast_dtype(cfg.precision, next(model.parameters()).device) is not None
        return validation_bleu(model, tokenizer, valid, sentences=cfg.valid_bleu, beam=cfg.beam, lenpen=cfg.lenpen,
                               max_tokens=cfg.data.max_tokens, bf16=bf16, lang=cfg.data.target_lang)  # fmt: skip

    return extra


def _resume_data(rd: RunDir, cfg: TrainConfig, fingerprint: dict[str, str], accept: bool) -> Any:
    """The data of a resumed run, checked against what the run started with (data.json, tokenizer.model).

    Weights learnt under one tokenizer mean nothing under another: a corpus edited by one word retrains the BPE
    and moves ids (14 of 400 in issue 36), so a resume that silently retrained it went on from weights learnt
    under the old ids. Changed corpus files are refused, naming them, before any tokenizer is trained;
    ``accept`` trains on them with the run's own tokenizer.model, which is never replaced."""
    if not rd.tokenizer_path.is_file():  # killed before it wrote anything: nothing to keep
        return prepare(cfg.data, cfg.model.max_positions)
    recorded = rd.data_record()
    if recorded is None:
        # a run from before data.json: the tokenizer the data gives now is the only witness of a change
        data = prepare(cfg.data, cfg.model.max_positions)
        if rd.tokenizer_path.read_bytes() == data.tokenizer.proto:
            return data
        if not accept:
            raise ConfigError(f"--resume: the tokenizer the data gives now differs from the run's {rd.tokenizer_path} "
                              "(a changed corpus, or another sentencepiece version); pass --accept-changed-data to "
                              "train on the data with the run's tokenizer, or start a new run")  # fmt: skip
    else:
        changed = sorted(k for k in recorded["files"].keys() | fingerprint.keys()
                         if recorded["files"].get(k) != fingerprint.get(k))  # fmt: skip
        if changed and not accept:
            raise ConfigError(f"--resume: the data changed since the run started: {', '.join(changed)}; pass "
                              "--accept-changed-data to train on it with the run's tokenizer, or start a new run")
    return prepare(cfg.data, cfg.model.max_positions, tokenizer=rd.tokenizer())


def train(
    cfg: TrainConfig, out: str | Path, *, resume: bool = False, progress: bool | None = None, quiet: bool = False,
    accept_changed_data: bool = False, accept_changed_settings: bool = False,
) -> dict[str, Any]:
    """Prepare the data, build the model, and train; returns the run's summary (also in ``out/summary.json``).
    ``accept_changed_data``: a resume may train on a changed corpus, with the run's tokenizer (:func:`_resume_data`)."""
    if launched():  # a rank of normlab's launcher: not one update after the launcher was killed
        die_with_parent(int(os.environ.get(LAUNCHER_PID) or 0) or None)
    # before anything is written (prepare only fills the data cache)
    prepare_run_dir(out, cfg, resume, accept_changed_settings)
    files = fingerprint(cfg.data)
    if resume:
        data = _resume_data(RunDir(out), cfg, files, accept_changed_data)
    else:
        data = prepare(cfg.data, cfg.model.max_positions)
    cfg = _fit_to_data(cfg, data)
    if "train" not in data.splits:
        raise ConfigError(f"{data.corpus.root}: no train split")
    if cfg.test_checkpoint and "test" not in data.splits:  # before hours of training, not after
        raise ConfigError(f"test_checkpoint={cfg.test_checkpoint}: {data.corpus.root} has no test split (has "
                          f"{sorted(data.splits)}); leave test_checkpoint empty or give a corpus with one")  # fmt: skip
    dist = init_distributed(cfg.device)
    if dist.device.type == "cpu":
        # this process only trains: let the allocator (glibc or jemalloc) keep freed activations for reuse (6-14%
        # faster updates on glibc, issue 9; ~1.3x on jemalloc, issue 31)
        tune_malloc()
        limit_onednn_cache()  # before the first matmul: oneDNN reads it once
    trainer, completed = None, False
    try:
        valid = data.splits.get("valid")
        extra = _bleu_hook(cfg, data.tokenizer, valid, dist.is_main) if cfg.valid_bleu and valid is not None else None
        trainer = Trainer(cfg, out, data.splits["train"], valid, dist=dist, progress=progress, quiet=quiet,
                          extra_eval=extra, files={RunDir.TOKENIZER: data.tokenizer.proto}, fingerprint=files)
        summary = trainer.fit(resume=resume)
        completed = True
    finally:
        if trainer is not None:
            trainer.close()  # the DDP wrapper holds the process group: released before shutdown
        shutdown(dist, completed=completed)
    if cfg.test_checkpoint and dist.is_main and summary.get("status") == "completed":
        del trainer  # the model and its optimizer state: not held while the test split is decoded
        summary = _score_test(cfg, out, summary, quiet)
    return summary


def _score_test(cfg: TrainConfig, out: str | Path, summary: dict[str, Any], quiet: bool) -> dict[str, Any]:
    """``test_checkpoint``: the test split scored as ``normlab evaluate --split test`` does, after the process group
    is gone (rank 0 alone decodes; the other ranks have ended, none waits on a collective), into summary.json's
    ``test``. Scored once: a resume of a run whose summary holds the same scoring (checkpoint setting, beam, lenpen,
    update) does not decode again. A failure here (a checkpoint rotated away, memory) does not undo the training:
    the run stays completed, ``test`` holds the error's line, and a warning says how to score it by hand."""
    settings = {"test_checkpoint": cfg.test_checkpoint, "beam": cfg.beam, "lenpen": cfg.lenpen,
                "update": summary.get("update")}  # fmt: skip
    done = summary.get("test") or {}
    if "bleu" in done and {k: done.get(k) for k in settings} == settings:
        return summary
    try:
        result = evaluate_run(out, "test", checkpoint=cfg.test_checkpoint, beam=cfg.beam, lenpen=cfg.lenpen,
                              device=cfg.device)  # fmt: skip
    except (ConfigError, OSError, RuntimeError) as e:  # a checkpoint error, the disk, memory
        line = str(e).splitlines()[0] if str(e) else type(e).__name__
        summary = {**summary, "test": {**settings, "error": line}}
        RunDir(out).write_summary(summary)
        print(f"normlab train: warning: the run completed, its test scoring failed: {line}; score it with: normlab "
              f"evaluate --run {out} --split test --checkpoint {cfg.test_checkpoint}", file=sys.stderr)  # fmt: skip
        return summary
    keep = ("checkpoint", "checkpoint_update", "sentences", "data_rows", "rows_not_scored", "bleu", "bleu_tokenized",
            "nll", "bleu_signature", "bleu_tokenized_signature", "decoding", "written")  # fmt: skip
    summary = {**summary, "test": {**settings, **{k: result[k] for k in keep}}}
    RunDir(out).write_summary(summary)
    if not quiet:
        print(f"test ({result['sentences']} sentences, checkpoint {Path(result['checkpoint']).name}, beam {cfg.beam}, "
              f"lenpen {cfg.lenpen}): sacreBLEU {result['bleu']:.2f}, tokenized BLEU {result['bleu_tokenized']:.2f}, "
              f"NLL {result['nll']:.3f}", file=sys.stderr)  # fmt: skip
    return summary


def _rank_argv(args: argparse.Namespace) -> list[str]:
    """The command line of each rank that ``--nproc-per-node`` starts: this one's arguments, every option of
    :func:`add_arguments` but ``--nproc-per-node`` (``--set`` as resolved: the same keys)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    argv: list[str] = []
    for action in parser._actions:
        value = getattr(args, action.dest)
        if action.dest == "nproc_per_node" or value is None:
            continue
        flag = action.option_strings[0]
        if action.nargs == 0:  # store_true
            argv += [flag] if value else []
        elif isinstance(value, list):  # append (--set)
            for item in value:
                argv += [flag, item]
        else:
            argv += [flag, str(value)]
    return argv


def _launch(args: argparse.Namespace, cfg: TrainConfig) -> int:
    """``--nproc-per-node N``: what can be checked without a rank is checked here, one line before any rank starts
    (a configuration the ranks would each refuse gave N lines under torchrun); then the ranks."""
    if not 1 <= args.nproc_per_node <= MAX_NPROC:
        raise ConfigError(f"--nproc-per-node must be in [1, {MAX_NPROC}], got {args.nproc_per_node}")
    if "WORLD_SIZE" in os.environ:  # already a rank of torchrun: ranks of ranks
        raise ConfigError(f"--nproc-per-node {args.nproc_per_node}: this process is already a rank of a launcher "
                          f"(WORLD_SIZE={os.environ['WORLD_SIZE']}); use one or the other")  # fmt: skip
    prepare_run_dir(args.out, cfg, args.resume, args.accept_changed_settings)
    dist_timeout()
    return launch("train", _rank_argv(args), args.nproc_per_node, run_dir=args.out)


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    cfg = resolve_config(args.config, args.set, args.out, args.resume)
    for flag in ("accept_changed_data", "accept_changed_settings"):
        if getattr(args, flag) and not args.resume:
            raise ConfigError(f"--{flag.replace('_', '-')} applies to --resume only")
    if args.threads < 0:
        raise ConfigError(f"--threads must be positive, got {args.threads}")
    if args.threads:
        # every rank of --nproc-per-node inherits it through OMP_NUM_THREADS (launch.py leaves a set one alone)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
        import torch

        torch.set_num_threads(args.threads)
    if args.nproc_per_node != 1:
        return _launch(args, cfg)
    try:
        summary = train(cfg, args.out, resume=args.resume, quiet=args.quiet,
                        accept_changed_data=args.accept_changed_data,
                        accept_changed_settings=args.accept_changed_settings)  # fmt: skip
    except PeerFailed as e:  # another rank failed and said why in its line; this one adds none (status: failed)
        final_line(str(e), 1, peer=True)  # torchrun's report only
        return 1
    except Terminated:
        final_line(f"normlab train: stopped by SIGTERM; the run's status is failed; continue with: normlab train "
                   f"--out {args.out} --resume", EXIT_TERMINATED)  # fmt: skip
        return EXIT_TERMINATED
    if summary["status"] == "diverged":
        return EXIT_DIVERGED
    if summary["status"] == "interrupted":
        final_line(f"normlab train: interrupted at update {summary['update']}, checkpoint saved; continue with: "
                   f"normlab train --out {args.out} --resume", EXIT_INTERRUPTED)  # fmt: skip
        return EXIT_INTERRUPTED
    return 0
