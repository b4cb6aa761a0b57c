"""The ``normlab`` command. Thin: each subcommand parses its arguments and calls one library function.

Exit codes: 0 success, 1 a fault of the machine or of a library (a file that cannot be read or written, memory,
a number too large for the kernels; one line on stderr), 2 a usage or configuration error (one line on stderr,
nothing written), 130 interrupted by Ctrl-C (one line), 141 the reader of the output went away (``| head``; no
traceback). Set ``NORMLAB_TRACEBACK=1`` to see the traceback of a fault instead of its line.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from normlab import __version__, lm, pretrained, translate
from normlab.analysis.diagnose import diagnose_config
from normlab.analysis.edges import edge_lines, load, measured_for
from normlab.analysis.run import AnalysisConfig, analysis_scale, print_progress, run_analysis, summary_lines
from normlab.assets import load_config_file
from normlab.config import (ConfigError, DataConfig, ModelConfig, OptimConfig, ScheduleConfig, TrainConfig,
                            add_set_argument, apply_overrides, resolve_overrides)
from normlab.data import summary as data_summary
from normlab.experiments import finetune_grid, reproduce, sweep
from normlab.faults import fault_line, final_line, launched, report_to_torchrun, reported
from normlab.model import build_model, describe
from normlab.train import run as train_run

__all__ = ["COMMANDS", "build_parser", "fault_line", "main", "report_to_torchrun"]

EXIT_FAULT = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 128 + 2  # what a shell reports for a process ended by SIGINT
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a process killed by SIGPIPE


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file or bundled config (bert-tiny-post, ...); its `model:` section (or "
                                    "the whole file) is the ModelConfig")  # fmt: skip
    add_set_argument(p, ModelConfig, section="model")
    p.add_argument("--task", choices=["translation", "mlm", "classification", "lm"],
                   help="the model's task (default: the --config run config's data.task, else translation)")


def _file_task(full: dict[str, Any]) -> str | None:
    """The task a run config names in ``data.task`` (a run's config.yaml, a bundled recipe), or None."""
    data = full.get("data")
    if isinstance(data, dict) and data.get("task") in ("translation", "mlm", "classification", "lm"):
        return str(data["task"])
    return None


def _task(task: str | None, full: dict[str, Any]) -> str:
    """--task, else the task of the run config given with --config (``full``, the whole file: a run's config.yaml
    names it in ``data.task``; a language-model run read as a translation model would be another model, silently),
    else translation."""
    return task or _file_task(full) or "translation"


def _run_rate(full: dict[str, Any]) -> dict[str, Any] | None:
    """The learning rate and warm-up of a run config (the whole file given with --config, with an ``optim``
    section: a bundled recipe, a run's config.yaml), for diagnose to place against the measured edges; else None."""
    if not isinstance(full.get("optim"), dict):
        return None
    optim = OptimConfig.from_dict(full["optim"])
    schedule = ScheduleConfig.from_dict(full.get("schedule") or {})
    data = full.get("data") if isinstance(full.get("data"), dict) else {}
    # what the file leaves out is the default a run would train with (4,096 tokens; a length by epochs: 0)
    tokens = data.get("max_tokens", DataConfig().max_tokens)
    updates = full.get("max_updates", TrainConfig().max_updates)
    return {"lr": optim.lr, "warmup_updates": schedule.warmup_updates, "optimizer": optim.name,
            "betas": list(optim.betas), "max_tokens": tokens, "updates": updates or 0, "decay": schedule.decay}


def _model(args: argparse.Namespace) -> int:
    full = load_config_file(args.config) if args.config else {}
    cfg = ModelConfig.from_dict(apply_overrides(full.get("model", full), args.set))  # load_config_file's section rule
    print(describe(build_model(cfg, _task(args.task, full))))
    return 0


# ---- analysis (Figure 3, Lemmas 2-3, concentration) and the warm-up diagnosis ----


def _analyze_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scale", choices=["smoke", "quick", "paper"], default="quick",
                   help="smoke: seconds; quick: minutes on 2 CPU cores; paper: the paper's sizes")
    p.add_argument("--out", required=True, help="directory for analysis.json and the figures")
    add_set_argument(p, AnalysisConfig, note="the defaults shown are before --scale, which sets most of them")
    p.add_argument("--checkpoint", help="Post-LN checkpoint after warm-up (safetensors + JSON sidecar), optional")
    p.add_argument("--data", choices=["synthetic", "de-en"], help="mini-batches (default: the scale's)")
    p.add_argument("--schemes", help="comma-separated schemes for the depth scan of Figure 3(c,d), as `normlab sweep` "
                                     "spells them (post,pre,rezero,pre/rmsnorm); default post,pre; same as "
                                     "--set schemes=[...]")  # fmt: skip
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")


def _analyze(args: argparse.Namespace) -> int:
    overrides = list(args.set)
    if args.checkpoint:
        overrides.append(f"checkpoint={args.checkpoint}")
    if args.data:
        overrides.append(f"data={args.data}")
    if args.schemes is not None:
        schemes = [x.strip() for x in args.schemes.split(",")]
        if not all(schemes):
            raise ConfigError(f"--schemes {args.schemes!r}: an empty scheme name (expected e.g. post,pre,rezero)")
        overrides.append("schemes=[" + ", ".join(f'"{x}"' for x in schemes) + "]")
    cfg = AnalysisConfig.from_dict(apply_overrides(analysis_scale(args.scale).to_dict(), overrides))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    result = run_analysis(cfg, args.out, progress=print_progress)
    print("\n".join(summary_lines(result)))
    print(f"wrote {args.out}/analysis.json and {', '.join(result['figures'])}")
    return 0


def _diagnose_args(p: argparse.ArgumentParser) -> None:
    _model_args(p)
    p.add_argument("--steps", type=int, default=8, help="loss evaluations (batches) the gradients are averaged over")
    p.add_argument("--seed", type=int, default=0, help="initialisation and batch seed")
    p.add_argument("--mode", choices=["eval", "train"], default="eval", help="dropout off (eval) or on (train)")
    p.add_argument("--max-tokens", type=int, default=1024, help="tokens per translation batch")
    p.add_argument("--json", help="also write the diagnosis as JSON to this file")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")


def _diagnose(args: argparse.Namespace) -> int:
    import json

    full = load_config_file(args.config) if args.config else {}  # read once: its model section, task and rate
    model = full.get("model", full)  # load_config_file's section rule: a run config's model, or the whole file
    cfg = ModelConfig.from_dict(apply_overrides(model, args.set))
    if args.steps <= 0:
        raise ConfigError(f"--steps must be positive, got {args.steps}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    task = _task(args.task, full)
    result = diagnose_config(cfg, task, steps=args.steps, seed=args.seed, mode=args.mode, max_tokens=args.max_tokens)
    layers = (f"{cfg.decoder_layers} decoder" if task == "lm" else f"{cfg.encoder_layers} encoder"
              + (f" / {cfg.decoder_layers} decoder" if task == "translation" else ""))
    norm = "" if cfg.norm == "layernorm" else f", norm={cfg.norm}"
    print(f"{task} model, placement={cfg.placement.value}{norm}, {layers} layers, at initialisation, on {args.steps} "
          "synthetic batches of its task (Zipf-distributed token ids, normlab.analysis.sources: the model as built, not "
          "your data)")
    print(result.summary())
    if task == "lm":  # the calibration never held a causal LM (a new user's finding, 2026-11-28)
        print("note: diagnose's thresholds were calibrated on encoder, encoder-decoder and masked-LM models, never on "
              "a causal LM. In the LM sweep (docs/results/sweep-lm: 6 layers, d = 64 and 128, 300 updates, 5 seeds) "
              "every scheme's S was below the 6-layer threshold, Post-LN's too (0.29-0.38), while a 40-update warm-up "
              "raised the stability edge in 5 of 5 seeds for Post-LN and, at one or both widths, 5 other schemes "
              "(none was \"not needed\"); what set Post-LN apart was the edge's level without warm-up (8e-4 to "
              "2.9e-3, 30-220x below "
              "Pre-LN, LNS, Peri-LN and OLMo 2's output norm). S also moves with settings that are not the placement "
              "(positional, activation, scale_embedding): for an LM, measure the edge with normlab sweep --scale lm")
    # a run config's rate, placed against the edges of its own task (a --task that overrides the file's: another
    # model than the run's, so no placement)
    run = _run_rate(full) if full and (not args.task or args.task == _task(None, full)) else None

    # beside the verdict, what the committed sweeps measured of the learning rate a model of this kind stands
    try:
        table = load()
    except (FileNotFoundError, ValueError) as e:  # a zip install, a damaged file: the verdict stands without it
        table = None
        print(f"measured stability edges: not available ({e})")
    edges = measured_for(cfg, task, table, run) if table is not None else None
    if table is not None:
        print("\n".join(edge_lines(cfg, task, table, advised=result.warmup_advised, run=run, found=edges)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({**result.to_dict(), "measured_edges": edges}, f, indent=1,
                      allow_nan=False)  # strict: undefined numbers are null
    return 0


# name -> (help, add arguments, run); each run returns the exit code
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "model": ("print a model's configuration, parameter count and where its LayerNorms sit", _model_args, _model),
    "analyze": ("measure Figure 3, Theorem 1, Lemmas 2-3 and concentration at initialisation", _analyze_args, _analyze),
    "diagnose": ("per-layer gradients at initialisation and a warm-up verdict for a model config", _diagnose_args, _diagnose),
    "data": ("prepare a corpus (tokenizer, binarized splits; cached) and print its statistics",
             data_summary.add_arguments, data_summary.run),
    "train": ("train a translation, masked-LM, classification or language model (exit 3 when it diverges)",
              train_run.add_arguments, train_run.run),
    "translate": ("translate sentences (stdin or --input) with a trained run, streamed to stdout",
                  translate.add_translate_arguments, translate.run_translate),
    "evaluate": ("BLEU (sacreBLEU and tokenized) and NLL of a run on its valid or test split, or on your own files; "
                 "a language model's perplexity beside the unigram level; a classifier's accuracy (F1 for two "
                 "labels) beside the majority class; a masked LM's loss on its masked positions",
                 translate.add_evaluate_arguments, translate.run_evaluate),
    "generate": ("sample continuations of a prompt from a language-model run (temperature, top-k; KV cache)",
                 lm.add_generate_arguments, lm.run_generate),
    "reproduce": ("run the paper's experiments at a scale and write the report with a verdict per claim",
                  reproduce.add_arguments, reproduce.run),
    "sweep": ("the stability edge (the largest learning rate whose run neither diverges nor falls back to the "
              "unigram plateau, bisected), the LR tolerance and LR sensitivity per normalization scheme, with and "
              "without warm-up, across widths",
              sweep.add_arguments, sweep.run),
    "finetune": ("fine-tune a masked-LM checkpoint on sentence pairs: the paper's grid, 6 seeds, t confidence "
                 "intervals", finetune_grid.add_arguments, finetune_grid.run),
    "export-hf": ("write a Post-LN masked-LM checkpoint as a Hugging Face BertForMaskedLM, or a Pre-LN language "
                  "model as a GPT2LMHeadModel", pretrained.add_export_arguments, pretrained.run_export),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normlab",
        description="Train and study Transformers by where their LayerNorm sits (Xiong et al., ICML 2020).",
    )
    parser.add_argument("--version", action="version", version=f"normlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (help, configure, _) in COMMANDS.items():
        configure(sub.add_parser(name, help=help, description=help))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    code = _run(args)
    if code and launched() and not reported():
        # a rank of normlab's launcher that ends without a line (diverged, exit 3: the trainer said so as it
        # happened): its exit code, so that the launcher tells it from a rank that died without a word
        report_to_torchrun("", code=code)
    return code


GRID_COMMANDS = ("reproduce", "sweep", "finetune")
"""The commands that train many runs into one folder and resume the unfinished ones when run again."""


def _run(args: argparse.Namespace) -> int:
    _, _, run = COMMANDS[args.command]
    try:
        if hasattr(args, "set_root"):  # one --set convention: keys become relative to the command's config
            args.set = resolve_overrides(*args.set_root, args.set)
        return run(args)
    except ConfigError as e:
        final_line(f"normlab {args.command}: error: {e}", EXIT_USAGE)  # stderr and torchrun's error file
        return EXIT_USAGE
    except KeyboardInterrupt:
        # a second Ctrl-C in training, or one outside it (`normlab train` stops at an update boundary itself)
        # `train` resumes with --resume; the grids (reproduce, sweep, finetune) resume every unfinished run when the
        # same command is run again (a new user followed "--resume" into sweep's "unrecognized arguments")
        how = ("with --resume" if args.command == "train" else "when the same command is run again"
               if args.command in GRID_COMMANDS else "")  # fmt: skip
        final_line(f"normlab {args.command}: interrupted" + (f"; a run resumes from its last checkpoint {how}" if how
                   else ""), EXIT_INTERRUPTED)  # fmt: skip
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader of our output went away (`normlab translate ... | head`): not an error of ours. Point stdout
        # at /dev/null so that the flush at exit does not raise again, and exit as a process killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as e:
        line = fault_line(e)
        if line is None or os.environ.get("NORMLAB_TRACEBACK"):
            raise
        final_line(f"normlab {args.command}: error: {line}", EXIT_FAULT)
        return EXIT_FAULT


if __name__ == "__main__":
    sys.exit(main())
