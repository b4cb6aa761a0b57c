"""Fine-tuning a pre-trained masked LM on a sentence-pair task with the paper's protocol.

Xiong et al. (2020), Section 4 and Appendix A.3: "we search the optimization hyper-parameters in a search space
including different batch sizes (16/32), learning rates (1e-5 - 1e-4) and number of epochs (3-8) [...] we repeat
fine-tuning on each task for 6 times using different random seeds and compute the 95% confidence interval of
validation accuracy." Here:

* the model is a :class:`~normlab.model.PairClassifier` (BERT's head on [CLS]: pooler, dropout, linear) whose
  ``encoder.*`` comes from the masked-LM checkpoint (``TrainConfig.init_from``, checked once to cover the whole
  encoder) and whose head is new (initialised from the run's seed);
* the data are the pair task's splits encoded with the *pre-training* tokenizer, examples up to 128 tokens;
* each (batch size, learning rate, epochs, seed) is a normal :class:`~normlab.train.trainer.Trainer` run in its
  own directory: AdamW (BERT: weight decay 0.01, beta2 0.999, eps 1e-6), a linear warm-up over the first 10%
  of the updates and a linear decay to 0 (Devlin et al. 2018), batches of exactly ``batch_size`` pairs, the
  validation accuracy (and the test accuracy, logged for the record only) after every epoch;
* a setting's score is the mean over its seeds of the validation accuracy after its last epoch, with a 95%
  confidence interval from Student's t over the seeds; the setting with the highest mean is chosen, and the
  test accuracy is reported for it alone.

The paper gives the learning rates as a range; the grid takes 1e-5, 2e-5, 3e-5, 5e-5, 1e-4. Each number of
epochs is its own run (the linear decay depends on the run's length), so the paper's space is 2 x 5 x 6 = 60
settings x 6 seeds = 360 runs. ``--scale small`` / ``tiny`` shrink it for a CPU (and say so in the output);
``--set`` changes any :class:`FinetuneConfig` field.

Layout of the output directory (default ``RUN/finetune/<task>-<scale>/update_<N>``)::

    finetune.json     the pre-trained checkpoint and the FinetuneConfig
    tokenizer.model   the pre-training tokenizer (each run's data.tokenizer)
    runs/bs32-lr0.0001-ep3/seed1/   a `normlab train` run directory: config.yaml, metrics.jsonl, summary.json, tb/
    results.json      per setting: seeds, accuracies, mean, confidence interval, per-epoch curve; the choice

``normlab finetune`` hands the runs to a launcher (``--launcher local | ray | slurm``, as ``reproduce`` and
``sweep``: normlab/experiments/finetune_grid.py), each run a task that trains as :func:`finetune`'s in-process loop
does (:func:`train_task`), its output in ``logs/SETTING/seedK.log``; :func:`finetune` itself trains one run after
another in the calling process.

The grid is resumable: a finished run (summary.json says completed or diverged) is skipped, an interrupted one
resumes from its last checkpoint (never re-loading the pre-trained encoder over it), a run of another
configuration in the same place is an error. A finished run's checkpoints are deleted unless
``keep_checkpoints`` (a BERT-base checkpoint with its optimizer state is 1.3 GB; the paper's grid has 360
runs); its metrics stay. The per-epoch validation accuracy of every run is in its ``metrics.jsonl`` (records
``"type": "valid"``; :func:`epoch_curve`), and each setting's mean curve is in results.json.

The paper's Figure 5(b,c) plots fine-tuned accuracy against the pre-training checkpoint: run this on
checkpoints along the pre-training run (``--from RUN/checkpoints/update_N``; keep them with
``keep_every``/``save_every``) and read ``chosen`` from each results.json.

The confidence interval is :func:`normlab.metrics.mean_ci` (Student's t computed from the incomplete beta
function; scipy is not a dependency).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from normlab.config import (
    VENDORED_CORPORA,
    ConfigError,
    DataConfig,
    OptimConfig,
    ScheduleConfig,
    Strict,
    TrainConfig,
    add_set_argument,
    config,
    field,
    flat_dict,
)
from normlab.data import Tokenizer, prepare
from normlab.data.corpora import locate
from normlab.files import write_atomic, write_json_atomic
from normlab.metrics import mean_ci
from normlab.model import PairClassifier
from normlab.pretrained import Pretrained, locate_pretrained
from normlab.rundir import RunDir
from normlab.train.checkpoint import read_state
from normlab.train.trainer import EXIT_DIVERGED, Trainer, prepare_run_dir
from normlab.train.throughput import limit_onednn_cache, tune_malloc

__all__ = [
    "FinetuneConfig", "SCALES", "PAPER", "Setting", "FinetuneRun", "data_config", "run_config", "grid", "finetune",
    "epoch_curve", "scale_note", "OpenGrid", "open_grid", "announce", "run_line", "grid_results", "train_task",
    "table", "add_arguments",
]  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# Configuration


@config
class FinetuneConfig(Strict):
    """A fine-tuning grid (``normlab finetune``). The defaults are the paper's search space (Appendix A.3)."""

    task: str = field(
        "paraphrase", help="the sentence-pair corpus: paraphrase (MRPC-like), wic (RTE-sized) or a directory"
    )
    batch_sizes: tuple[int, ...] = field((16, 32), help="sentence pairs per batch (the paper: 16, 32)")
    lrs: tuple[float, ...] = field(
        (1e-5, 2e-5, 3e-5, 5e-5, 1e-4), help="peak learning rates (the paper: the range 1e-5 - 1e-4)"
    )
    epochs: tuple[int, ...] = field((3, 4, 5, 6, 7, 8), help="numbers of epochs, each its own run (the paper: 3-8)")
    seeds: int = field(6, help="runs per setting, seeds 1..N (the paper: 6)")
    confidence: float = field(0.95, help="level of the t confidence interval over the seeds (the paper: 95%)")
    warmup: float = field(0.1, help="share of the updates with a linear warm-up, then linear decay to 0 (BERT: 0.1)")
    weight_decay: float = field(0.01, help="AdamW weight decay (BERT: 0.01)")
    betas: tuple[float, float] = field((0.9, 0.999), help="AdamW betas (BERT: 0.9, 0.999)")
    eps: float = field(1e-6, help="AdamW epsilon (BERT: 1e-6)")
    clip_norm: float = field(1.0, help="clip the gradient norm (BERT: 1.0); 0 = off")
    max_length: int = field(128, help="longest example in tokens, [CLS] and [SEP]s included (BERT: 128)")
    labels: tuple[str, ...] = field(
        ("0", "1"), help="the task's label set in class-id order (DataConfig.labels); the head has one output each"
    )
    train_subset: int = field(0, help="use only the first N training pairs (0 = all)")
    valid_subset: int = field(0, help="use only the first N validation pairs (0 = all)")
    precision: Literal["auto", "bf16", "fp32"] = field("auto", help="as TrainConfig.precision")
    device: Literal["auto", "cpu", "cuda"] = field("auto", help="as TrainConfig.device")
    attention: Literal["auto", "sdpa", "sdpa-fp32", "matmul"] = field(
        "auto", help="as TrainConfig.attention (name a kernel for bit-identical reruns: auto picks by timing)"
    )
    keep_checkpoints: bool = field(False, help="keep each finished run's checkpoints (default: delete them)")

    def validate(self) -> None:
        for name in ("batch_sizes", "lrs", "epochs"):
            values = getattr(self, name)
            if not values or any(v <= 0 for v in values) or len(set(values)) != len(values):
                raise self.error(name, f"expected distinct positive values, got {list(values)}")
        if self.seeds < 1:
            raise self.error("seeds", f"must be >= 1, got {self.seeds}")
        if not 0.0 < self.confidence < 1.0:
            raise self.error("confidence", f"must be in (0, 1), got {self.confidence}")
        if not 0.0 <= self.warmup < 1.0:
            raise self.error("warmup", f"must be in [0, 1), got {self.warmup}")
        if self.max_length < 3:
            raise self.error("max_length", f"must be at least 3, got {self.max_length}")
        for name in ("train_subset", "valid_subset"):
            if getattr(self, name) < 0:
                raise self.error(name, f"must be >= 0 (0 = all), got {getattr(self, name)}")


PAPER = FinetuneConfig()

# How far each scale departs from the paper's space: compute, not method. `small`: a CPU-sized grid on an
# MRPC-sized training set (MRPC has 3,668 training pairs); `tiny`: a smoke test.
SCALES: dict[str, dict[str, Any]] = {
    "paper": {},
    "small": {"lrs": [5e-5, 1e-4], "epochs": [3], "train_subset": 3668},
    "tiny": {"batch_sizes": [32], "lrs": [1e-4], "epochs": [1], "seeds": 2, "train_subset": 512, "valid_subset": 256},
}


def scale_note(fc: FinetuneConfig) -> str:
    """One line: the paper's search space, or how ``fc`` departs from it."""

    def fmt(values: tuple) -> str:
        return "{" + ", ".join(f"{v:g}" for v in values) + "}"

    changes = []
    for name, label in (("batch_sizes", "batch"), ("lrs", "lr"), ("epochs", "epochs")):
        if getattr(fc, name) != getattr(PAPER, name):
            changes.append(f"{label} {fmt(getattr(fc, name))}")
    if fc.seeds != PAPER.seeds:
        changes.append(f"{fc.seeds} seeds")
    if fc.train_subset:
        changes.append(f"the first {fc.train_subset} training pairs")
    if fc.valid_subset:
        changes.append(f"the first {fc.valid_subset} validation pairs")
    paper = "batch {16, 32} x lr {1e-05, 2e-05, 3e-05, 5e-05, 0.0001} x epochs 3-8, 6 seeds"
    if not changes:
        return f"search space: the paper's (Appendix A.3: {paper})"
    return f"search space SCALED from the paper's ({paper}) for compute: " + ", ".join(changes)


# --------------------------------------------------------------------------------------------------------
# The grid


@dataclasses.dataclass(frozen=True)
class Setting:
    batch_size: int
    lr: float
    epochs: int

    @property
    def name(self) -> str:
        return f"bs{self.batch_size}-lr{self.lr:g}-ep{self.epochs}"

    def to_dict(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "lr": self.lr, "epochs": self.epochs}


@dataclasses.dataclass(frozen=True)
class FinetuneRun:
    setting: Setting
    seed: int
    cfg: TrainConfig
    run_dir: Path
    updates: int = 0  # epochs x updates per epoch (0: not counted): the updates the grid's progress display counts


def data_config(pretrain: TrainConfig, fc: FinetuneConfig, tokenizer: str | Path, batch_size: int) -> DataConfig:
    """The pair task ``fc.task`` encoded with the pre-training tokenizer (a path, or the pre-training corpus's
    cache name); examples up to ``fc.max_length`` tokens; batches of exactly ``batch_size`` pairs (the token
    budget is never the binding limit)."""
    length = min(fc.max_length, pretrain.model.max_positions)
    return DataConfig(task="classification", corpus=fc.task, tokenizer=str(tokenizer),
                      vocab_size=pretrain.data.vocab_size, block_size=length, max_sentences=batch_size,
                      max_tokens=batch_size * length, train_subset=fc.train_subset, valid_subset=fc.valid_subset,
                      labels=fc.labels, cache_dir=pretrain.data.cache_dir)  # fmt: skip


def run_config(
    pretrain: TrainConfig, fc: FinetuneConfig, data: DataConfig, *, lr: float, epochs: int, seed: int,
    updates_per_epoch: int, init_from: str = "",
) -> TrainConfig:
    """The fine-tuning recipe, the one place it is written (``normlab finetune``'s grid and the Figure 5(b, c)
    runs of ``normlab reproduce`` both call it): the pre-training model with a new classification head of one
    output per label of ``data`` (:func:`data_config`: ``fc.labels``), AdamW with ``fc``'s betas, epsilon,
    weight decay and clipping, a linear warm-up over ``fc.warmup`` of the ``epochs * updates_per_epoch``
    updates then a linear decay to 0, no label smoothing, the last checkpoint kept."""
    return TrainConfig(
        model=pretrain.model.replace(num_classes=len(data.labels)), data=data, seed=seed, max_epochs=epochs,
        precision=fc.precision, device=fc.device, attention=fc.attention,
        optim=OptimConfig(name="adamw", lr=lr, betas=fc.betas, eps=fc.eps, weight_decay=fc.weight_decay,
                          clip_norm=fc.clip_norm),
        schedule=ScheduleConfig(warmup_updates=round(fc.warmup * epochs * updates_per_epoch), decay="linear"),
        keep_last=1, label_smoothing=0.0, init_from=init_from,
    )  # fmt: skip


def grid(pre: Pretrained, fc: FinetuneConfig, tokenizer: Path, train: Any, out: Path) -> list[FinetuneRun]:
    """Every run of the search space, settings in grid order (batch size, then lr, then epochs), seeds 1..N."""
    runs = []
    for bs, lr, epochs in itertools.product(fc.batch_sizes, fc.lrs, fc.epochs):
        setting = Setting(bs, lr, epochs)
        data = data_config(pre.cfg, fc, tokenizer, bs)
        for seed in range(1, fc.seeds + 1):
            per_epoch = len(train.epoch_batches(1, seed, data.max_tokens, max_sentences=bs))  # as Trainer.fit
            cfg = run_config(pre.cfg, fc, data, lr=lr, epochs=epochs, seed=seed, updates_per_epoch=per_epoch,
                             init_from=str(pre.checkpoint))  # fmt: skip
            run_dir = out / "runs" / setting.name / f"seed{seed}"
            runs.append(FinetuneRun(setting, seed, cfg, run_dir, epochs * per_epoch))
    return runs


def _run_status(run: FinetuneRun) -> str:
    """new (nothing there), done (completed or diverged), or resume; an error for a run of another config."""
    d = run.run_dir
    rd = RunDir(d)
    if rd.is_empty():
        return "new"
    if not rd.is_run():
        raise ConfigError(f"{d} holds files but no run (no {RunDir.CONFIG}); remove it or choose another --out")
    saved = rd.read_config()
    if saved != run.cfg:
        mine, theirs = flat_dict(run.cfg.to_dict()), flat_dict(saved.to_dict())
        diff = sorted(k for k in mine if mine[k] != theirs.get(k))
        raise ConfigError(f"{d} was run with another configuration (differs in {diff[:4]}); choose another --out")
    return "done" if rd.finished() else "resume"


def epoch_curve(run_dir: str | Path) -> list[dict[str, Any]]:
    """The validation records of a run, one per epoch: epoch, update, accuracy (and test_accuracy, nll)."""
    keys = ("epoch", "update", "accuracy", "nll", "test_accuracy")
    return [{k: r[k] for k in keys if k in r} for r in RunDir(run_dir).metrics("valid")]


def _train_one(
    run: FinetuneRun, checkpoint: Path, update: int, data: Any, status: str, *, keep: bool, verbose: bool
) -> str:
    """Train (or resume) one run of the grid in this process; returns its summary's status."""

    if read_state(checkpoint)["update"] != update:  # e.g. `best` moved on while the pre-training continues
        raise ConfigError(f"{checkpoint} changed during the grid (now update {read_state(checkpoint)['update']}"
                          f", was {update}); fine-tune a fixed checkpoint: --from RUN/checkpoints/update_N")
    prepare_run_dir(run.run_dir, run.cfg, resume=status == "resume")
    # The Trainer builds the PairClassifier from the run's seed (the new head's initialisation) and copies the
    # pre-trained encoder in (TrainConfig.init_from) when the run starts, never over a resumed checkpoint.
    trainer = Trainer(run.cfg, run.run_dir, data.splits["train"], data.splits["valid"],
                      progress=None if verbose else False, quiet=not verbose)  # fmt: skip
    if trainer.device.type == "cpu":  # as `normlab train` does (normlab/train/run.py): this process trains
        limit_onednn_cache()  # before its first matmul, where this run is it
        tune_malloc()
    test = data.splits.get("test")
    if test is not None:
        # logged beside each epoch's validation record, for the record: selection never reads it
        def test_eval(model: torch.nn.Module, epoch: int) -> dict[str, float]:
            trainer.extra_eval = None  # evaluate() calls extra_eval: not for the test split itself
            try:
                m = trainer.evaluate(test)
            finally:
                trainer.extra_eval = test_eval
            return {"test_accuracy": m["accuracy"], "test_nll": m["nll"]}

        trainer.extra_eval = test_eval
    summary = trainer.fit(resume=status == "resume")
    if summary["status"] in ("completed", "diverged") and not keep:
        shutil.rmtree(RunDir(run.run_dir).checkpoints, ignore_errors=True)
    return str(summary["status"])


def train_task(
    config: dict[str, Any], run_dir: str, resume: bool, *, checkpoint: str, update: int, keep: bool = False,
    verbose: bool = False, cwd: str = "",
) -> int:
    """One run of the grid as a launcher's task (a worker process, a Ray task, a SLURM job): the same training as
    :func:`finetune`'s loop, its data prepared again from the cache (the same splits), in ``cwd`` (the grid's
    working directory: a run's config may hold relative paths). Returns the exit code ``normlab train`` would:
    0, 3 (diverged), 2 (an error of the configuration, its line printed as ``normlab train: error: ...``)."""

    if cwd:
        os.chdir(cwd)
    cfg = TrainConfig.from_dict(config)
    try:
        data = prepare(cfg.data, cfg.model.max_positions)
        run = FinetuneRun(Setting(cfg.data.max_sentences, cfg.optim.lr, cfg.max_epochs), cfg.seed, cfg, Path(run_dir))
        status = _train_one(run, Path(checkpoint), update, data, "resume" if resume else "new", keep=keep,
                            verbose=verbose)  # fmt: skip
    except ConfigError as e:
        print(f"normlab train: error: {e}")  # the line the grid runner reports (grid.failure_line)
        return 2
    return EXIT_DIVERGED if status == "diverged" else 0


def _majority(data: Any) -> dict[str, float | int | str]:
    """The majority-class baseline: the most frequent training label, scored on each split."""
    labels = data.splits["train"].labels
    top = int(np.bincount(labels).argmax())
    # the label's index and its name (the task's labels; `normlab evaluate` prints the name)
    out: dict[str, float | int | str] = {"label": top, "label_name": str(data.cfg.labels[top])}
    for split, ds in data.splits.items():
        out[split] = float(np.mean(ds.labels == top))
    return out


def _summarise(values: list[float], confidence: float) -> dict[str, Any]:
    """n, mean, and the t confidence interval (half-width and bounds; None for fewer than two values)."""
    if not values:
        return {"n": 0, "mean": None, "ci_half_width": None, "ci": None}
    ci = mean_ci(values, confidence)
    if ci.n < 2:
        return {"n": ci.n, "mean": ci.mean, "ci_half_width": None, "ci": None}
    return {"n": ci.n, "mean": ci.mean, "ci_half_width": ci.half_width, "ci": [ci.low, ci.high]}


def _results(runs: list[FinetuneRun], fc: FinetuneConfig) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    settings: list[dict[str, Any]] = []
    for setting, group in itertools.groupby(runs, key=lambda r: r.setting):
        group = list(group)
        seeds, valid, test, diverged, curves = [], [], [], [], []
        for run in group:
            curve = epoch_curve(run.run_dir)
            if RunDir(run.run_dir).status() != "completed" or not curve:
                diverged.append(run.seed)
                continue
            seeds.append(run.seed)
            valid.append(curve[-1]["accuracy"])
            if "test_accuracy" in curve[-1]:
                test.append(curve[-1]["test_accuracy"])
            curves.append([r["accuracy"] for r in curve])
        mean_curve = [{"epoch": e + 1, "accuracy": float(np.mean([c[e] for c in curves if len(c) > e]))}
                      for e in range(max((len(c) for c in curves), default=0))]  # fmt: skip
        settings.append({
            "setting": setting.name, **setting.to_dict(), "runs": str(group[0].run_dir.parent), "seeds": seeds,
            "diverged_seeds": diverged, "valid_accuracy": valid, "valid": _summarise(valid, fc.confidence),
            "curve": mean_curve, "_test": test,
        })  # fmt: skip
    eligible = [s for s in settings if not s["diverged_seeds"] and s["valid"]["n"]]
    chosen = None
    if eligible:
        best = max(eligible, key=lambda s: s["valid"]["mean"])  # the first in grid order on a tie
        chosen = {"setting": best["setting"], "valid": best["valid"], "valid_accuracy": best["valid_accuracy"],
                  "test_accuracy": best["_test"] or None,
                  "test": _summarise(best["_test"], fc.confidence) if best["_test"] else None}  # fmt: skip
    for s in settings:
        del s["_test"]
    return settings, chosen


def _fmt_acc(summary: dict[str, Any] | None) -> str:
    if not summary or summary["mean"] is None:
        return "-"
    half = summary["ci_half_width"]
    if half == 0:  # every seed at the same accuracy (e.g. all predict the majority class): no spread seen, not certainty
        return f"{summary['mean']:.4f} (every seed the same: the noise is not measured)"
    return f"{summary['mean']:.4f}" + ("" if half is None else f" ± {half:.4f}")


def table(results: dict[str, Any]) -> str:
    """The results as text: one row per setting, then the choice and the majority baseline."""
    level = f"{100 * results['config']['confidence']:g}%"
    rows = [f"{'setting':<24} {'seeds':>5}  valid accuracy (mean ± {level} CI)"]
    for s in results["settings"]:
        extra = f"  ({len(s['diverged_seeds'])} diverged)" if s["diverged_seeds"] else ""
        rows.append(f"{s['setting']:<24} {s['valid']['n']:>5}  {_fmt_acc(s['valid'])}{extra}")
    maj = results["majority_baseline"]
    c = results["chosen"]
    if c is None:
        rows.append("chosen: none (every setting has a diverged run)")
    else:
        test = _fmt_acc(c["test"]) if c["test"] else "no test split"
        rows.append(f"chosen by validation accuracy: {c['setting']} | valid {_fmt_acc(c['valid'])} | test {test}")
    rows.append((f"majority-class baseline ({maj['label_name']!r}): " if "label_name" in maj else
                 "majority-class baseline: ") + "valid {:.4f}".format(maj["valid"])
                + (" | test {:.4f}".format(maj["test"]) if "test" in maj else ""))  # fmt: skip
    return "\n".join(rows)


def _label(task: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(task).name)[:40] or "task"


@dataclasses.dataclass
class OpenGrid:
    """A grid checked and its directory claimed (:func:`open_grid`), ready to train: what :func:`finetune`'s loop
    and a launcher's tasks (normlab/experiments/finetune_grid.py) start from."""

    pre: Pretrained
    fc: FinetuneConfig
    out: Path
    meta: dict[str, Any]
    tok_path: Path
    data: Any
    runs: list[FinetuneRun]
    statuses: list[str]  # per run: new, resume or done (_run_status)


def open_grid(
    source: str | Path, fc: FinetuneConfig, out: str | Path | None = None, *, which: str = "best",
    scale: str = "custom",
) -> OpenGrid:
    """Check the grid of ``fc`` from the masked-LM checkpoint ``source`` and claim its output directory (every
    run checked before any trains: a run of another configuration in the same place is an error)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError("normlab finetune runs its grid in one process, not under torchrun; to spread a grid over "
                          "devices, start one command per device with its own --set lrs=[...] and --out")  # fmt: skip
    if fc.task not in VENDORED_CORPORA and Path(fc.task).expanduser().is_dir():
        fc = fc.replace(task=str(Path(fc.task).expanduser().resolve()))  # the runs' configs must not depend on the cwd
    pre = locate_pretrained(source, which)
    if out is None:
        if pre.run_dir is None:
            raise ConfigError(f"{pre.checkpoint} is not inside a run directory: give --out")
        out = pre.run_dir / "finetune" / f"{_label(fc.task)}-{scale}" / pre.name
    out = Path(out)
    meta = {"pretrained": {"checkpoint": str(pre.checkpoint), "update": pre.update,
                           "run": None if pre.run_dir is None else str(pre.run_dir)},
            "scale": scale, "config": fc.to_dict()}  # fmt: skip
    meta_path = out / "finetune.json"
    if meta_path.is_file():
        before = json.loads(meta_path.read_text(encoding="utf-8"))["pretrained"]
        if (before["checkpoint"], before["update"]) != (str(pre.checkpoint), pre.update):
            raise ConfigError(f"{out} holds fine-tuning runs of {before['checkpoint']} (update {before['update']}), "
                              f"not of {pre.checkpoint} (update {pre.update}); choose another --out")  # fmt: skip
    elif out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty and holds no fine-tuning grid (finetune.json); choose another --out")

    tok_path = out / "tokenizer.model"
    if tok_path.is_file():
        tok = Tokenizer.load(tok_path)
        if tok.vocab_size != pre.cfg.model.vocab_size:
            raise ConfigError(f"{tok_path}: {tok.vocab_size} pieces, the checkpoint has {pre.cfg.model.vocab_size}")
    else:
        tok = pre.tokenizer()
    # the corpus is checked before the output directory is written
    data_cfg = data_config(pre.cfg, fc, tok_path, fc.batch_sizes[0])
    locate(data_cfg)
    out.mkdir(parents=True, exist_ok=True)
    if not meta_path.is_file():  # claims the directory for this checkpoint (the config is recorded once checked)
        write_json_atomic(meta_path, meta)
    if not tok_path.is_file():
        write_atomic(tok_path, tok.proto)
    data = prepare(data_cfg, pre.cfg.model.max_positions)
    runs = grid(pre, fc, tok_path, data.splits["train"], out)
    pre.check_encoder(PairClassifier(runs[0].cfg.model))  # init_from will fill the whole encoder
    statuses = [_run_status(r) for r in runs]  # every run checked before any trains
    write_json_atomic(meta_path, meta)
    return OpenGrid(pre, fc, out, meta, tok_path, data, runs, statuses)


def announce(g: OpenGrid, say: Any) -> None:
    """The grid's opening lines: the checkpoint, the task's sizes and runs, the search space."""
    say(f"fine-tuning {g.pre.describe()}")
    say(f"task {g.fc.task}: {', '.join(f'{k} {len(v):,}' for k, v in g.data.splits.items())} pairs; "
        f"{len(g.runs) // g.fc.seeds} settings x {g.fc.seeds} seeds = {len(g.runs)} runs in {g.out}")  # fmt: skip
    say(scale_note(g.fc))


def run_line(g: OpenGrid, i: int, status: str, seconds: float) -> str:
    """``[i/N] SETTING seed K: valid accuracy X (T s)`` for run ``i`` (1-based) once it has ended."""
    run = g.runs[i - 1]
    curve = epoch_curve(run.run_dir)
    acc = f"valid accuracy {curve[-1]['accuracy']:.4f}" if curve else "no evaluation"
    when = "finished earlier, skipped" if status == "done" else f"{seconds:.1f} s"
    return f"[{i}/{len(g.runs)}] {run.setting.name} seed {run.seed}: {acc} ({when})"


def grid_results(g: OpenGrid) -> dict[str, Any]:
    """The results of the grid's finished runs (settings, the choice, the majority baseline), written to
    ``out/results.json``."""
    settings, chosen = _results(g.runs, g.fc)
    results = {**g.meta, "out": str(g.out), "scale_note": scale_note(g.fc), "tokenizer": str(g.tok_path),
               "majority_baseline": _majority(g.data), "settings": settings, "chosen": chosen}  # fmt: skip
    write_json_atomic(g.out / "results.json", results)
    return results


def finetune(
    source: str | Path,
    fc: FinetuneConfig,
    out: str | Path | None = None,
    *,
    which: str = "best",
    scale: str = "custom",
    verbose: bool = False,
    say: Any = print,
) -> dict[str, Any]:
    """Run (or resume) the grid of ``fc`` from the masked-LM checkpoint ``source`` in this process, one run after
    another; returns the results (also in ``out/results.json``). ``say`` receives the progress lines. (``normlab
    finetune`` hands the runs to a launcher instead: normlab/experiments/finetune_grid.py.)"""
    g = open_grid(source, fc, out, which=which, scale=scale)
    announce(g, say)
    for i, (run, status) in enumerate(zip(g.runs, g.statuses), 1):
        t0 = time.perf_counter()
        if status != "done":
            _train_one(run, g.pre.checkpoint, g.pre.update, g.data, status, keep=g.fc.keep_checkpoints,
                       verbose=verbose)  # fmt: skip
        say(run_line(g, i, status, time.perf_counter() - t0))
    return grid_results(g)


# --------------------------------------------------------------------------------------------------------
# CLI


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="source", required=True,
                   help="a masked-LM run directory of `normlab train` (its best checkpoint) or a checkpoint in it")
    p.add_argument("--checkpoint", default="best", help="with a run directory: best, last or an update number")
    p.add_argument("--task", required=True, help="paraphrase (MRPC-like), wic (RTE-sized) or a directory of pair TSVs")
    p.add_argument("--scale", default="paper", choices=list(SCALES),
                   help="paper: the paper's search space (360 runs); small: 4 settings x 6 seeds on 3,668 training "
                   "pairs (a CPU); tiny: 1 setting x 2 seeds, 1 epoch (a smoke test)")  # fmt: skip
    add_set_argument(p, FinetuneConfig, note="the defaults shown are the paper's; --scale sets some of them, --task "
                                              "sets task")  # fmt: skip
    p.add_argument("--out", help="output directory (default: RUN/finetune/<task>-<scale>/update_<N>)")
    p.add_argument("--verbose", action="store_true", help="each run's progress and per-epoch validation (in its log, "
                   "OUT/logs/SETTING/seedK.log)")
