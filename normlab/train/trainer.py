"""The Trainer (STYLE.md example 7): forward, loss, backward, clip (logging the norm), step, schedule.

One update consumes ``accumulate`` global token batches; the loss is the sum over target positions divided by
the global number of them (all ranks, all accumulated batches), so every token weighs the same whatever the
world size. A non-finite loss or gradient norm ends the run with status ``diverged`` before the optimizer
step, so the last checkpoints stay finite: a diverging Post-LN run is a result, not a crash.

Run directory::

    config.yaml       the resolved configuration
    metrics.jsonl     one JSON object per update ("type": "train") and per evaluation ("type": "valid")
    summary.json      status (running / completed / diverged), last update, best validation score, timings
    tb/               TensorBoard event files
    checkpoints/      update_XXXXXXXX/ (the last ``keep_last``) and best/  (see checkpoint.py)

Resume is exact on the CPU: the checkpoint holds the model, the optimizer, the random-number generators and
the position in the epoch's deterministic batch list, so a run killed with SIGKILL and resumed ends with the
same parameters, bit for bit, as an uninterrupted one, and its metrics.jsonl is cut back to the checkpoint
before it continues.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from normlab import __version__
from normlab.config import ConfigError, TrainConfig, load_yaml
from normlab.data.batch import Batch
from normlab.model import build_model
from normlab.train import checkpoint as ckpt
from normlab.train.distributed import Dist, all_reduce_sum, init_distributed
from normlab.train.objectives import compute_loss
from normlab.train.optim import build_optimizer, set_lr
from normlab.train.schedules import Schedule, build_schedule

__all__ = ["Trainer", "Dataset", "EXIT_DIVERGED", "prepare_run_dir", "autocast_dtype", "write_json_atomic"]

EXIT_DIVERGED = 3  # `normlab train` exits with this code when the run diverged (2 is a usage error)


class Dataset(Protocol):
    """What the trainer needs of a split (normlab.data provides it)."""

    def __len__(self) -> int: ...

    def epoch_batches(
        self, epoch: int, seed: int, max_tokens: int, shuffle: bool = True, *, max_sentences: int = 0
    ) -> list[np.ndarray]: ...

    def collate(
        self, indices: np.ndarray, *, rank: int = 0, world: int = 1, seed: int = 0, epoch: int = 0, step: int = 0
    ) -> Batch: ...


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 where the hardware runs it natively, fp32 (None) otherwise or on request."""
    if precision == "fp32":
        return None
    if device.type == "cuda":
        supported = torch.cuda.is_bf16_supported()
    else:
        # Without AVX-512 BF16 or AMX, bf16 matmuls are emulated on the CPU and slower than fp32.
        supported = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if precision == "bf16" and not supported and device.type == "cuda":
        raise ConfigError(f"precision 'bf16' requested but {torch.cuda.get_device_name(device)} does not support it")
    if precision == "bf16":
        return torch.bfloat16  # on a CPU without native bf16 it runs, slowly: the user asked for it
    return torch.bfloat16 if supported else None


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str), encoding="utf-8")
    os.replace(tmp, path)


def prepare_run_dir(run_dir: str | Path, cfg: TrainConfig, resume: bool) -> TrainConfig:
    """Check a run directory before anything is written; returns the configuration to run.

    A new run needs an empty or missing directory. ``resume`` needs the directory of an earlier run; its model
    configuration must equal ``cfg``'s (a checkpoint of another shape is not a resume), other settings may
    change (e.g. more epochs) and the new ones are saved.
    """
    run_dir = Path(run_dir)
    saved_path = run_dir / "config.yaml"
    if resume:
        if not saved_path.exists():
            raise ConfigError(f"--resume: {run_dir} is not a run directory (no config.yaml)")
        saved = TrainConfig.from_dict(load_yaml(saved_path.read_text(encoding="utf-8")))
        # vocab_size and num_classes are fitted to the data, whose equality is checked next
        mine, theirs = cfg.model.to_dict(), saved.model.to_dict()
        diff = [k for k, v in mine.items() if theirs[k] != v and k not in ("vocab_size", "num_classes")]
        if diff:
            raise ConfigError(f"--resume: the model configuration differs from the run's in {diff}")
        if saved.data != cfg.data or saved.seed != cfg.seed:
            raise ConfigError("--resume: the data or the seed differ from the run's; start a new run instead")
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(f"{run_dir} already holds a run; pass --resume to continue it or choose another --out")
    return cfg


def _dump_config(cfg: TrainConfig) -> str:
    import yaml

    return yaml.safe_dump(cfg.to_dict(), sort_keys=False)


@dataclasses.dataclass
class TrainState:
    """The trainer's position; saved in every checkpoint's state.json."""

    update: int = 0  # updates done
    epoch: int = 1  # the epoch in progress (1-based)
    step_in_epoch: int = 0  # updates done within it
    best_valid: float | None = None  # lowest validation NLL per target position so far
    best_update: int | None = None
    last_finite_loss: float | None = None
    elapsed: float = 0.0  # training seconds, summed over resumes


class Trainer:
    """Trains ``cfg`` on ``train`` (validating on ``valid``) into ``run_dir``; see the module docstring."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: str | Path,
        train: Dataset,
        valid: Dataset | None = None,
        *,
        dist: Dist | None = None,
        model: nn.Module | None = None,
        extra_eval: Callable[[nn.Module, int], dict[str, float]] | None = None,
        progress: bool | None = None,
        quiet: bool = False,
        files: dict[str, bytes] | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.train_data, self.valid_data = train, valid
        self.dist = dist or init_distributed(cfg.device)
        self.device = self.dist.device
        self.extra_eval = extra_eval
        self.progress = progress  # None: a tqdm bar on a terminal, plain lines otherwise; True/False force it
        self.quiet = quiet  # neither bar nor lines
        self.files = files or {}  # written into the run directory beside config.yaml (e.g. tokenizer.model)
        self.amp = autocast_dtype(cfg.precision, self.device)
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank and on every resume
        self.model = (model or build_model(cfg.model, cfg.data.task)).to(self.device)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.net: nn.Module = self.model
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        self.state = TrainState()
        self.ckpt_dir = self.run_dir / "checkpoints"
        self._writer = None
        self._metrics_file = None
        self._bar = None
        self._evaluated_at: int | None = None
        self._saved_at: int | None = None

    # ---------------------------------------------------------------------------------------------- helpers

    def _autocast(self) -> contextlib.AbstractContextManager:
        if self.amp is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp)

    def _log(self, record: dict[str, Any]) -> None:
        if not self.dist.is_main:
            return
        self._metrics_file.write(json.dumps(record, sort_keys=True) + "\n")
        self._metrics_file.flush()
        step = record["update"]
        prefix = record["type"]
        for key, value in record.items():
            if key not in ("type", "update", "epoch") and isinstance(value, (int, float)) and math.isfinite(value):
                self._writer.add_scalar(f"{prefix}/{key}", value, step)

    def _summary(self, status: str, **extra: Any) -> dict[str, Any]:
        s = self.state
        summary = {
            "status": status,
            "update": s.update,
            "epoch": s.epoch,
            "best_valid_nll": s.best_valid,
            "best_update": s.best_update,
            "last_finite_loss": s.last_finite_loss,
            "elapsed_s": round(s.elapsed, 3),
            "device": str(self.device),
            "precision": "bf16" if self.amp is not None else "fp32",
            "world_size": self.dist.world,
            "parameters": sum(p.numel() for p in self.params),
            "normlab_version": __version__,
            **extra,
        }
        if self.dist.is_main:
            write_json_atomic(self.run_dir / "summary.json", summary)
        return summary

    def _ckpt_state(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self.state), config=self.cfg.to_dict(), normlab_version=__version__)

    def save(self) -> Path | None:
        if not self.dist.is_main or self._saved_at == self.state.update:
            return None
        self._saved_at = self.state.update
        path = ckpt.save_checkpoint(self.ckpt_dir, self.state.update, self.model, self.optimizer, self._ckpt_state())
        if self.state.best_update == self.state.update:
            ckpt.mark_best(path)
        ckpt.rotate(self.ckpt_dir, self.cfg.keep_last, self.cfg.keep_every)
        return path

    def _resume(self) -> None:
        last = ckpt.latest_checkpoint(self.ckpt_dir)
        if last is None:
            return
        saved = ckpt.load_checkpoint(last, self.model, self.optimizer, restore_rng=True, device=self.device)
        fields = {f.name for f in dataclasses.fields(TrainState)}
        self.state = TrainState(**{k: v for k, v in saved.items() if k in fields})
        if self.dist.is_main:
            # forget what the killed run logged after its last checkpoint: it is about to be done again
            path = self.run_dir / "metrics.jsonl"
            if path.exists():
                kept = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
                kept = [ln for ln in kept if json.loads(ln)["update"] <= self.state.update]
                tmp = path.with_name(".metrics.jsonl.tmp")
                tmp.write_text("".join(ln + "\n" for ln in kept), encoding="utf-8")
                os.replace(tmp, path)

    def _init_from(self, path: Path) -> None:
        """Start from another run's weights: every tensor of ``path/model.safetensors`` whose name and shape
        match one of the model's (the rest keep their initialisation: e.g. a new classification head)."""
        from safetensors.torch import load_file

        if not (path / "model.safetensors").exists():
            raise ConfigError(f"TrainConfig.init_from: {path} is not a checkpoint (no model.safetensors)")
        source = load_file(str(path / "model.safetensors"), device=str(self.device))
        own = self.model.state_dict()
        taken = {k: v for k, v in source.items() if k in own and own[k].shape == v.shape}
        if not taken:
            raise ConfigError(f"TrainConfig.init_from: no tensor of {path} fits the model")
        with torch.no_grad():
            for k, v in taken.items():
                own[k].copy_(v)
        loaded = {own[k].data_ptr() for k in taken}  # tied weights share storage: loaded through their twin
        fresh = sorted(k for k in own if own[k].data_ptr() not in loaded)
        self._say(f"initialised {len(taken)} tensors from {path}; {len(fresh)} new: {', '.join(fresh[:6])}"
                  + (" ..." if len(fresh) > 6 else ""))

    # ------------------------------------------------------------------------------------------------- steps

    def train_step(self, group: list[np.ndarray], epoch: int, step: int, lr: float) -> dict[str, Any]:
        """One update on a group of ``accumulate`` global batches; returns its log record."""
        t0 = time.perf_counter()
        cfg, d = self.cfg, self.dist
        batches = [
            self.train_data.collate(idx, rank=d.rank, world=d.world, seed=cfg.seed, epoch=epoch,
                                    step=step * cfg.accumulate + j)
            for j, idx in enumerate(group)
        ]  # fmt: skip
        n_local = sum(b.n_tokens for b in batches)
        (n_global,) = all_reduce_sum([float(n_local)], d)
        self.net.train()
        set_lr(self.optimizer, lr)
        loss_sum = nll_sum = 0.0
        for j, batch in enumerate(batches):
            last = j == len(batches) - 1
            sync = contextlib.nullcontext() if (last or not d.enabled) else self.net.no_sync()
            with sync:
                with self._autocast():
                    sums = compute_loss(self.net, batch.to(self.device), cfg.label_smoothing, cfg.loss_impl)
                # DDP averages gradients over ranks; scale so that the result is sum / global tokens
                (sums.loss * (d.world / n_global)).backward()
            loss_sum += sums.loss.item()
            nll_sum += sums.nll.item()
        gnorm = torch.nn.utils.get_total_norm([p.grad for p in self.params if p.grad is not None]).item()
        loss, nll = (x / n_global for x in all_reduce_sum([loss_sum, nll_sum], d))
        record = {
            "type": "train", "update": self.state.update + 1, "epoch": epoch, "loss": loss, "nll": nll,
            "lr": lr, "gnorm": gnorm, "tokens": int(n_global),
        }  # fmt: skip
        if not (math.isfinite(loss) and math.isfinite(gnorm)):
            self.optimizer.zero_grad(set_to_none=True)
            record["diverged"] = True
            return record
        if cfg.optim.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.params, cfg.optim.clip_norm, torch.tensor(gnorm))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - t0
        record["seconds"] = seconds
        record["tokens_per_s"] = n_global / seconds
        return record

    @torch.no_grad()
    def evaluate(self, data: Dataset | None = None) -> dict[str, float]:
        """Validation loss, NLL and perplexity per target position (and accuracy for classification)."""
        data = data or self.valid_data
        if data is None:
            return {}
        cfg, d = self.cfg, self.dist
        self.net.eval()
        loss = nll = n = correct = 0.0
        plan = data.epoch_batches(0, cfg.seed, cfg.data.max_tokens, shuffle=False, max_sentences=cfg.data.max_sentences)
        for step, idx in enumerate(plan):
            batch = data.collate(idx, rank=d.rank, world=d.world, seed=cfg.seed, epoch=0, step=step)
            with self._autocast():
                # the model itself, not the DDP wrapper: evaluation has no backward
                sums = compute_loss(self.model, batch.to(self.device), cfg.label_smoothing, cfg.loss_impl)
            loss += sums.loss.item()
            nll += sums.nll.item()
            n += sums.n_tokens
            if sums.correct is not None:
                correct += sums.correct.item()
        loss, nll, n, correct = all_reduce_sum([loss, nll, n, correct], d)
        out = {"loss": loss / max(n, 1), "nll": nll / max(n, 1), "ppl": math.exp(min(nll / max(n, 1), 50.0))}
        if cfg.data.task == "classification":
            out["accuracy"] = correct / max(n, 1)
        if self.extra_eval is not None:
            out.update(self.extra_eval(self.model, self.state.epoch))
        return out

    def _validate(self, epoch: int) -> None:
        if self._evaluated_at == self.state.update:  # e.g. eval_every and the end of the run coincide
            return
        self._evaluated_at = self.state.update
        metrics = self.evaluate()
        if not metrics:
            return
        s = self.state
        if s.best_valid is None or metrics["nll"] < s.best_valid:
            s.best_valid, s.best_update = metrics["nll"], s.update
        self._log({"type": "valid", "update": s.update, "epoch": epoch, **metrics})
        self._say(f"valid | epoch {epoch} | update {s.update} | " + " | ".join(f"{k} {v:.4g}" for k, v in metrics.items()))

    def _say(self, line: str) -> None:
        if self.dist.is_main and not self.quiet:
            if self._bar is not None:
                self._bar.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr, flush=True)

    # -------------------------------------------------------------------------------------------------- fit

    def _epoch_plan(self, epoch: int) -> list[np.ndarray]:
        d = self.cfg.data
        return self.train_data.epoch_batches(epoch, self.cfg.seed, d.max_tokens, max_sentences=d.max_sentences)

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train until ``max_epochs`` / ``max_updates`` or divergence; returns the summary (also in summary.json)."""
        cfg = self.cfg
        per_epoch = math.ceil(len(self._epoch_plan(1)) / cfg.accumulate)
        total = cfg.max_epochs * per_epoch
        if cfg.max_updates:
            total = min(total, cfg.max_updates)
        if cfg.schedule.warmup_updates > total:
            raise ConfigError(
                f"TrainConfig.schedule: warmup_updates={cfg.schedule.warmup_updates} is longer than the run "
                f"({total} updates = {cfg.max_epochs} epochs of {per_epoch})"
            )
        schedule: Schedule = build_schedule(cfg.schedule, cfg.optim.lr, total, per_epoch)
        # everything is checked: from here on the run directory is written
        if self.dist.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            (self.run_dir / "config.yaml").write_text(_dump_config(cfg), encoding="utf-8")
            for name, content in self.files.items():
                (self.run_dir / name).write_bytes(content)
        if resume:
            self._resume()
        if cfg.init_from and self.state.update == 0:
            self._init_from(Path(cfg.init_from))
        if self.dist.is_main:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tb"), purge_step=self.state.update + 1)
            self._metrics_file = open(self.run_dir / "metrics.jsonl", "a", encoding="utf-8")
        self._bar = None
        show_bar = self.progress if self.progress is not None else sys.stderr.isatty()
        if self.dist.is_main and show_bar and not self.quiet:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=self.state.update, unit="upd", dynamic_ncols=True)
        s = self.state
        status = "completed"
        extra: dict[str, Any] = {"total_updates": total, "updates_per_epoch": per_epoch}
        try:
            self._summary("running", **extra)
            while s.update < total and s.epoch <= cfg.max_epochs:
                plan = self._epoch_plan(s.epoch)
                groups = [plan[i : i + cfg.accumulate] for i in range(0, len(plan), cfg.accumulate)]
                while s.step_in_epoch < len(groups) and s.update < total:
                    t0 = time.perf_counter()
                    record = self.train_step(groups[s.step_in_epoch], s.epoch, s.step_in_epoch, schedule(s.update + 1))
                    if record.get("diverged"):
                        self._log(record)
                        status = "diverged"
                        extra.update(diverged_at_update=record["update"], diverged_loss=record["loss"],
                                     diverged_gnorm=record["gnorm"])  # fmt: skip
                        self._say(f"diverged at update {record['update']}: loss {record['loss']}, "
                                  f"gradient norm {record['gnorm']}; last finite loss {s.last_finite_loss}")
                        return self._summary(status, **extra)
                    s.update += 1
                    s.step_in_epoch += 1
                    s.last_finite_loss = record["loss"]
                    s.elapsed += time.perf_counter() - t0
                    self._log(record)
                    self._progress(record, total)
                    if cfg.eval_every and s.update % cfg.eval_every == 0 and s.step_in_epoch < len(groups):
                        self._validate(s.epoch)
                    if cfg.save_every and s.update % cfg.save_every == 0 and s.step_in_epoch < len(groups):
                        self.save()
                if s.step_in_epoch >= len(groups):  # the epoch is complete: validate and checkpoint (paper: per epoch)
                    self._validate(s.epoch)
                    s.epoch += 1
                    s.step_in_epoch = 0
                    self.save()
                else:  # stopped inside an epoch by max_updates
                    break
            if s.step_in_epoch > 0:  # the run ended mid-epoch: a last evaluation and checkpoint
                self._validate(s.epoch)
                self.save()
            return self._summary(status, **extra)
        finally:
            if self._bar is not None:
                self._bar.close()
            if self._writer is not None:
                self._writer.close()
            if self._metrics_file is not None:
                self._metrics_file.close()

    def _progress(self, record: dict[str, Any], total: int) -> None:
        if not self.dist.is_main or self.quiet:
            return
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}",
                                  tok_s=f"{record['tokens_per_s']:.0f}", refresh=False)  # fmt: skip
        elif record["update"] % self.cfg.log_every == 0 or record["update"] == total:
            self._say(
                f"update {record['update']}/{total} | epoch {record['epoch']} | loss {record['loss']:.4f} | "
                f"nll {record['nll']:.4f} | lr {record['lr']:.3e} | gnorm {record['gnorm']:.3f} | "
                f"{record['tokens_per_s']:.0f} tok/s"
            )
