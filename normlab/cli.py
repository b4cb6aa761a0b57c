"""The ``normlab`` command. Thin: each subcommand parses its arguments and calls one library function.

Exit codes: 0 success, 2 a usage or configuration error (one line on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from normlab import __version__
from normlab.config import ConfigError

EXIT_USAGE = 2

def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file; its `model:` section (or the whole file) is the ModelConfig")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a ModelConfig field")
    p.add_argument("--task", default="translation", choices=["translation", "mlm", "classification"])


def _model(args: argparse.Namespace) -> int:
    from normlab.config import ModelConfig, apply_overrides, load_yaml
    from normlab.model import build_model, describe

    data = {}
    if args.config:
        with open(args.config, encoding="utf-8") as f:
            data = load_yaml(f.read()) or {}
        data = data.get("model", data)
    cfg = ModelConfig.from_dict(apply_overrides(data, args.set))
    print(describe(build_model(cfg, args.task)))
    return 0


def _data_args(p: argparse.ArgumentParser) -> None:
    from normlab.data.summary import add_arguments

    add_arguments(p)


def _data(args: argparse.Namespace) -> int:
    from normlab.data.summary import run

    return run(args)


def _train_args(p: argparse.ArgumentParser) -> None:
    from normlab.train.run import add_arguments

    add_arguments(p)


def _train(args: argparse.Namespace) -> int:
    from normlab.train.run import run

    return run(args)


def _reproduce_args(p: argparse.ArgumentParser) -> None:
    from normlab.experiments.reproduce import add_arguments

    add_arguments(p)


def _reproduce(args: argparse.Namespace) -> int:
    from normlab.experiments.reproduce import run

    return run(args)


# name -> (help, add arguments, run); each run returns the exit code
COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {
    "model": ("print a model's configuration, parameter count and where its LayerNorms sit", _model_args, _model),
    "data": ("prepare a corpus (tokenizer, binarized splits; cached) and print its statistics", _data_args, _data),
    "train": ("train a translation, masked-LM or classification model (exit 3 when it diverges)", _train_args, _train),
    "reproduce": ("run the paper's experiments at a scale and write the report with a verdict per claim",
                  _reproduce_args, _reproduce),
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
    _, _, run = COMMANDS[args.command]
    try:
        return run(args)
    except ConfigError as e:
        print(f"normlab {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
