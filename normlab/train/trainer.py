"""The Trainer (STYLE.md example 7): forward, loss, backward, clip (logging the norm), step, schedule.

One update consumes ``accumulate`` global token batches; the loss is the sum over target positions divided by
the global number of them (all ranks, all accumulated batches), so every token weighs the same whatever the
world size. Divergence, the rule: an update *diverges* when its training loss or gradient norm is not finite, or when its
training loss exceeds ``diverge_factor * ln(V)``, V the number of outputs the loss is over (the vocabulary, or
the classes). ln(V) is the loss of a uniform prediction, where every run starts; a loss several times above it
means the model puts less than V^-(factor-1) of the probability of a uniform guess on the right answer: it
exploded (Post-LN at lr 10 sits at a loss of 128 with V = 1,000, where 4 ln V = 27.6). A diverged update ends
the run with status ``diverged`` before the optimizer step, so the last checkpoints stay finite: a diverging
Post-LN run is a result, not a crash.

The run directory's layout is :class:`normlab.rundir.RunDir`'s. The trainer holds its lock while it runs (a
second trainer on the same directory is refused with the holder's pid) and writes nothing before every check
has passed.

Resume is exact on the CPU: the checkpoint holds the model, the optimizer, the random-number generators and
the position in the epoch's deterministic batch list, so a run killed with SIGKILL and resumed ends with the
same parameters, bit for bit, as an uninterrupted one, and its metrics.jsonl is cut back to the checkpoint
(to nothing, without one) before it continues. A damaged newest checkpoint is set aside
(``checkpoints/damaged-update_N``) and the run resumes from the newest intact one, saying so. Resuming a
finished run changes nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from normlab import __version__, allocator
from normlab.config import ConfigError, TrainConfig, flat_dict
from normlab.data.batch import Batch
from normlab.data.corpora import DataError
from normlab.device import autocast, autocast_dtype, cpu_name
from normlab.faults import collective_timed_out, fault_line
from normlab.model import Omega, build_model, profile_init, project_weights_, set_attention
from normlab.rundir import RunDir
from normlab.train import checkpoint as ckpt
from normlab.train.distributed import Dist, all_reduce_sum, init_distributed
from normlab.train.kernels import choose_attention
from normlab.train.memory import check_fits
from normlab.train.objectives import compute_loss
from normlab.train.optim import build_optimizer, set_lr
from normlab.train.schedules import Schedule, budgeted_length, build_schedule
from normlab.train.throughput import release_memory

__all__ = ["Trainer", "Dataset", "EXIT_DIVERGED", "EXIT_INTERRUPTED", "EXIT_TERMINATED", "PeerFailed", "Terminated",
           "prepare_run_dir", "divergence"]

EXIT_DIVERGED = 3  # `normlab train` exits with this code when the run diverged (2 is a usage error)
EXIT_INTERRUPTED = 128 + 2  # stopped by Ctrl-C (SIGINT), as a shell reports a process the signal ended
EXIT_TERMINATED = 128 + 15  # stopped by SIGTERM
# On the CPU, freed heap pages go back to the OS every this many updates, after each validation and at the end of
# a run (normlab.train.throughput.release_memory: without it the heap fragments and a quick-scale run grew from
# 1.2 to 2.6 GB over 100 updates). Each release makes the next update fault its pages in again; measured at the
# quick scale (1 thread, bf16, 2-core Zen 4): 0.960 s per update, thread time, median of 20, with a release every
# 10 updates against 0.99-1.02 s without in runs of the same length, i.e. within the noise. On jemalloc (the
# allocator normlab preloads) tune_malloc turns its decay off, so that the pages freed in one update serve the
# next, and this release is the only one: a quick-scale run of 120 updates with two validations (2-core Zen 5,
# bf16, 1 thread, loaded) took 1.13-1.15 s an update against 1.30-1.50 with jemalloc's default decay (1.6 M minor
# page faults against 4.2 M; peak resident memory 1.38-1.39 GB against 1.37-1.38), the same losses bit for bit.
RELEASE_EVERY = 10


class Terminated(Exception):
    """The process got SIGTERM while training (torchrun sends it to every rank once one has failed)."""


class PeerFailed(RuntimeError):
    """This rank stopped because another one failed: it says nothing more (the failed rank has said why)."""


def _last_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[-1].strip() if text else type(e).__name__


def _error_line(e: BaseException) -> str:
    """The line the CLI prints for ``e`` (after ``normlab train: error: ``), for summary.json's ``error``."""
    if isinstance(e, (ConfigError, PeerFailed, Terminated)):
        return str(e)
    return fault_line(e) or f"{type(e).__name__}: {_last_line(e)}"


def _peer_gone(e: BaseException) -> bool:
    """Whether ``e`` is a collective that failed because a peer process went away (gloo: "Connection closed by
    peer"; torch's DistBackendError / DistNetworkError on other backends)."""
    if type(e).__name__ in ("DistBackendError", "DistNetworkError", "DistError"):
        return True
    return isinstance(e, RuntimeError) and any(w in str(e) for w in ("by peer", "Broken pipe", "Connection reset"))


class Dataset(Protocol):
    """What the trainer needs of a split (normlab.data provides it)."""

    def __len__(self) -> int: ...

    def epoch_batches(
        self, epoch: int, seed: int, max_tokens: int, shuffle: bool = True, *, max_sentences: int = 0
    ) -> list[np.ndarray]: ...

    def collate(
        self, indices: np.ndarray, *, rank: int = 0, world: int = 1, seed: int = 0, epoch: int = 0, step: int = 0
    ) -> Batch: ...


def divergence(loss: float, gnorm: float, outputs: int, factor: float) -> str | None:
    """Why an update with this training ``loss`` and gradient norm diverged (the rule of the module docstring),
    or None when it did not. ``outputs``: the size of the distribution the loss is over."""
    if not math.isfinite(loss):
        return f"non-finite loss ({loss})"
    if not math.isfinite(gnorm):
        return f"non-finite gradient norm ({gnorm})"
    limit = factor * math.log(max(outputs, 2))
    if factor > 0 and loss > limit:
        return f"loss {loss:.4g} > diverge_factor {factor:g} x ln({outputs}) = {limit:.4g}"
    return None


# What a resume may change without being asked twice: the run's length, its evaluation and checkpoint cadence,
# how it computes (device, precision, kernels) and when it counts as diverged. The optimizer, the schedule and
# how a loss is formed (accumulate, label_smoothing) shape the weights the checkpoints hold: a resume that changes
# them is another experiment, allowed with --accept-changed-settings only. The model, the data and the seed never.
RESUME_MAY_CHANGE = frozenset({"max_epochs", "max_updates", "eval_every", "save_every", "keep_last", "keep_every",
                               "log_every", "valid_bleu", "beam", "lenpen", "device", "precision", "attention",
                               "loss_impl", "init_from", "diverge_factor", "max_hours", "test_checkpoint"})  # fmt: skip


def prepare_run_dir(run_dir: str | Path, cfg: TrainConfig, resume: bool, accept_changed_settings: bool = False
                    ) -> TrainConfig:  # fmt: skip
    """Check a run directory before anything is written; returns the configuration to run.

    A new run needs an empty or missing directory. ``resume`` needs the directory of an earlier run; its model
    configuration, data and seed must equal ``cfg``'s (a checkpoint of another shape is not a resume); the
    settings of :data:`RESUME_MAY_CHANGE` may change (e.g. more epochs), the others (the optimizer, the schedule,
    accumulate, label_smoothing) only with ``accept_changed_settings``; the new ones are saved. A learning rate
    changed on resume was accepted silently and config.yaml rewritten (issue 36): now one line naming each.
    """
    rd = RunDir(run_dir)
    if rd.path.exists() and not rd.path.is_dir():
        raise ConfigError(f"--out {rd.path}: exists and is not a directory")
    if resume:
        if not rd.is_run():
            raise ConfigError(f"--resume: {rd.path} is not a run directory (no {RunDir.CONFIG})")
        rd.check_unlocked()
        saved = rd.read_config()
        # vocab_size and num_classes are fitted to the data, whose equality is checked next
        mine, theirs = cfg.model.to_dict(), saved.model.to_dict()
        diff = [k for k, v in mine.items() if theirs[k] != v and k not in ("vocab_size", "num_classes")]
        if diff:
            raise ConfigError(f"--resume: the model configuration differs from the run's in {diff}")
        if saved.data != cfg.data or saved.seed != cfg.seed:
            raise ConfigError("--resume: the data or the seed differ from the run's; start a new run instead")
        if not accept_changed_settings:
            mine, theirs = flat_dict(cfg.to_dict()), flat_dict(saved.to_dict())
            changed = [f"{k} ({theirs[k]!r} -> {v!r})" for k, v in mine.items() if not k.startswith(("model.", "data."))
                       and k.split(".")[0] not in RESUME_MAY_CHANGE and theirs.get(k) != v]  # fmt: skip
            if changed:
                raise ConfigError(f"--resume: {', '.join(changed)} differ from the run's; a resume may change only "
                                  f"{', '.join(sorted(RESUME_MAY_CHANGE))}; pass --accept-changed-settings to train "
                                  "on with the new ones, or start a new run")  # fmt: skip
    else:
        rd.check_unlocked()
        rd.check_new()
    return cfg


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
    wall: float = 0.0  # wall-clock seconds in the training loop (validations, checkpoints included), summed over resumes
    # the attention kernel the run trains with (normlab.model.ATTENTION_IMPLS, or "default": the static rule of
    # normlab.model.default_attention, which runs from before the kernel was measured have); chosen once at the
    # start (normlab.train.kernels) and kept on resume, so that a resumed run is bit-identical
    attention: str | None = None
    # the epoch whose validation is due at this update: set in the checkpoint written before the validation,
    # cleared once it is done, so that a run stopped in between validates first when resumed (_save_then_validate)
    pending_valid: int | None = None
    # budget_hours: [update, elapsed seconds] where the timing window starts (a quarter of the way to budget_at),
    # then the length decided at budget_at and how (_decide_length); in the checkpoints, so that a resumed run
    # keeps its length and with it its schedule
    budget_mark: list[float] | None = None
    budget: dict[str, Any] | None = None


def _hours_minutes(seconds: float) -> str:
    """``seconds`` as "1 h 05 min" or "12 min", rounded up (the max_hours clock in progress lines: "0 min" only
    when no time is left)."""
    minutes = math.ceil(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"


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
        fingerprint: dict[str, str] | None = None,
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.rundir = RunDir(self.run_dir)
        self.train_data, self.valid_data = train, valid
        self.dist = dist or init_distributed(cfg.device)
        self.device = self.dist.device
        self.extra_eval = extra_eval
        self.progress = progress  # None: a tqdm bar on a terminal, plain lines otherwise; True/False force it
        self.quiet = quiet  # neither bar nor lines
        self.files = files or {}  # written into the run directory beside config.yaml (e.g. tokenizer.model)
        self.fingerprint = fingerprint  # the data's files and their sha256 (normlab.data.fingerprint), for data.json
        self.amp = autocast_dtype(cfg.precision, self.device)
        if model is None:  # refused before a byte is allocated (a model too large for the machine, issue 36)
            check_fits(cfg.model, cfg.data.task, cfg.data.max_tokens * cfg.accumulate, self.device)
        torch.manual_seed(cfg.seed)  # the same initial weights on every rank and on every resume
        self.model = (model or build_model(cfg.model, cfg.data.task)).to(self.device)
        self.optimizer = build_optimizer(self.model, cfg.optim)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.net: nn.Module = self.model
        if self.dist.enabled:
            ids = [self.device.index] if self.device.type == "cuda" else None
            self.net = nn.parallel.DistributedDataParallel(self.model, device_ids=ids)
        self.state = TrainState()
        # the size of the distribution the training loss is over (the divergence rule)
        self._outputs = cfg.model.num_classes if cfg.data.task == "classification" else cfg.model.vocab_size
        self.ckpt_dir = self.rundir.checkpoints
        self._allocator = allocator.running()  # the C allocator this process runs on (normlab.allocator)
        # the machine, for the summary: a grid completed on several machines names each run's CPU in its report; a run
        # resumed on another CPU than the one that started it lists every one it trained on ("cpus")
        self._cpu = cpu_name()
        before = self.rundir.summary() if self.dist.is_main else {}
        self._cpus = [*(before.get("cpus") or [c for c in [before.get("cpu")] if c])]
        self._cpus += [self._cpu] if self._cpu not in self._cpus else []
        self._gpu = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else None
        self._writer = None
        self._lock = None
        self._metrics_file = None
        self._bar = None
        self._evaluated_at: int | None = None
        self._saved_at: dict[str, Any] | None = None
        self._resumed_from: Path | None = None  # the checkpoint a resume loaded
        self._extra: dict[str, Any] | None = None  # what _fit puts in every summary of the run
        self._stop = False  # Ctrl-C asked the run to stop at the next update boundary (_on_interrupt)

    # ---------------------------------------------------------------------------------------------- helpers

    def _autocast(self) -> contextlib.AbstractContextManager:
        return autocast(self.device, self.amp)

    def _autocast_off(self) -> contextlib.AbstractContextManager:
        """Autocast off inside :meth:`_autocast`'s region (its weight cache lives on until that region ends)."""
        return torch.autocast(self.device.type, enabled=False) if self.amp is not None else contextlib.nullcontext()

    def _log(self, record: dict[str, Any]) -> None:
        if not self.dist.is_main:
            return
        self._metrics_file.write(record)  # strict JSON: a non-finite value is written as null
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
            "wall_s": round(s.wall, 3),
            "device": str(self.device),
            "precision": "bf16" if self.amp is not None else "fp32",
            "world_size": self.dist.world,
            "parameters": sum(p.numel() for p in self.params),
            "normlab_version": __version__,
            "allocator": self._allocator,
            "cpu": self._cpu,
            **({"cpus": self._cpus} if len(self._cpus) > 1 else {}),
            **({"gpu": self._gpu} if self._gpu else {}),
            "torch": torch.__version__,
            **extra,
        }
        if status == "interrupted":
            # the user stopped it, whatever limit would have (extra's stopped_by is the planned stop: a new user's
            # interrupted run said max_epochs)
            summary["stopped_by"] = "interrupt"
        if self.dist.is_main:
            self.rundir.write_summary(summary)
        return summary

    def _ckpt_state(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self.state), config=self.cfg.to_dict(), normlab_version=__version__)

    def save(self) -> Path | None:
        """Checkpoint the state, unless saved already. A checkpoint comes before the validation of its update
        (:meth:`_save_then_validate`); after it only the checkpoint's state.json is rewritten (the score, the
        validation done: the tensors are those already saved), and best/ copies it when the score is the best."""
        if not self.dist.is_main or self._saved_at == dataclasses.asdict(self.state):
            return None
        before, self._saved_at = self._saved_at, dataclasses.asdict(self.state)
        best = ("best_valid", "best_update", "pending_valid")
        path = self.ckpt_dir / f"update_{self.state.update:08d}"
        if (before is not None and path.is_dir()
                and all(before[k] == v for k, v in self._saved_at.items() if k not in best)):  # fmt: skip
            ckpt.update_state(path, {k: self._saved_at[k] for k in best})
        else:
            path = ckpt.save_checkpoint(self.ckpt_dir, self.state.update, self.model, self.optimizer,
                                        self._ckpt_state())  # fmt: skip
        if self.state.best_update == self.state.update:
            ckpt.mark_best(path)
        ckpt.rotate(self.ckpt_dir, self.cfg.keep_last, self.cfg.keep_every)
        if self._extra is not None:  # the summary of a run in progress names its last checkpoint's update, not 0
            self._summary("running", **self._extra)
        return path

    def _resume(self) -> list[Path]:
        """Load the newest intact checkpoint (model, optimizer, RNG, position); returns the damaged newer ones,
        which :meth:`_set_aside` moves out of the way once writing starts. Reads only."""
        damaged: list[Path] = []
        for path in reversed(self.rundir.list_checkpoints()):
            try:
                saved = ckpt.load_checkpoint(path, self.model, self.optimizer, restore_rng=True, device=self.device)
            except ckpt.CheckpointError as e:
                self._warn(f"resume: {e}")
                damaged.append(path)
                continue
            fields = {f.name for f in dataclasses.fields(TrainState)}
            self.state = TrainState(**{k: v for k, v in saved.items() if k in fields})
            if "wall" not in saved:  # a checkpoint from before max_hours: its training time is the best lower bound
                self.state.wall = self.state.elapsed
            if "attention" not in saved:  # a checkpoint from before the kernel was chosen: keep its kernel
                self.state.attention = "default"
            self._resumed_from = path
            self._saved_at = dataclasses.asdict(self.state)  # what the checkpoint holds: not saved again as it is
            if damaged:
                self._warn(f"resume: {len(damaged)} newer checkpoint(s) damaged; resuming from {path.name}, the newest "
                          "intact one")  # fmt: skip
            return damaged
        if damaged:
            raise ckpt.CheckpointError(f"--resume: no intact checkpoint in {self.ckpt_dir} (all {len(damaged)} damaged)")
        return damaged

    def _repair_best(self) -> None:
        """After a resume from the best checkpoint, make sure best/ holds it: a run stopped between the
        checkpoint and its copy into best/ (a full disk, a kill) would otherwise leave best/ behind, and
        rotation would then delete the only copy of the best weights."""
        path, s = self._resumed_from, self.state
        if path is None or s.best_update is None or s.best_update != s.update:
            return
        best = self.ckpt_dir / "best"
        try:
            current = ckpt.read_state(best).get("update")
        except ckpt.CheckpointError:
            current = None
        if current != s.update:
            ckpt.mark_best(path)
            self._say(f"resume: best/ did not hold {path.name}, the best checkpoint; copied it")

    def _set_aside(self, damaged: list[Path]) -> None:
        """Rename damaged checkpoints to ``damaged-update_N`` (kept for inspection, never loaded or rotated)."""
        for path in damaged:
            if not path.exists():
                continue
            target = path.with_name(f"damaged-{path.name}")
            k = 1
            while target.exists():
                k += 1
                target = path.with_name(f"damaged-{path.name}-{k}")
            os.replace(path, target)
            self._say(f"resume: set the damaged {path.name} aside as {target.name}")

    def _finished(self, resume: bool, total: int) -> bool:
        """A resumed run with nothing left to do: completed at (or past) its length, or diverged with the very
        configuration it diverged with (it would diverge again)."""
        if not resume:
            return False
        status = self.rundir.status()
        s = self.state
        if s.budget is not None:  # the length budget_hours decided, within the caps as they are now
            total = min(s.budget["updates_bought"], total)
        if status == "completed":
            wall = max(s.wall, (self.rundir.summary() or {}).get("wall_s") or 0.0)  # the summary's: the run's end
            time_up = bool(self.cfg.max_hours) and wall >= self.cfg.max_hours * 3600  # stopped by max_hours
            return s.update >= total or s.epoch > self.cfg.max_epochs or time_up
        if status == "diverged":
            try:
                return self.rundir.read_config() == self.cfg
            except ConfigError:
                return False
        return False

    def _check_files(self) -> None:
        """A run's files (tokenizer.model) are never replaced under its checkpoints: their weights were learnt
        with them (normlab.train.run checks the data first and says what changed; this is the last guard)."""
        for name, content in self.files.items():
            path = self.rundir / name
            if path.is_file() and path.read_bytes() != content:
                raise ConfigError(f"--resume: {path} differs from the one this run would write; the file a run's "
                                  "checkpoints were trained with is never replaced")  # fmt: skip

    def _init_from(self, path: Path) -> None:
        """Start from another run's weights: every tensor of ``path/model.safetensors`` whose name and shape
        match one of the model's (the rest keep their initialisation: e.g. a new classification head)."""
        from safetensors.torch import load_file

        if not (path / ckpt.MODEL).is_file():
            raise ConfigError(f"TrainConfig.init_from: {path} is not a checkpoint directory (no {ckpt.MODEL})")
        try:
            source = load_file(str(path / ckpt.MODEL), device=str(self.device))
        except Exception as e:  # a cut or foreign (pickled) file: one line, never unpickled
            raise ConfigError(f"TrainConfig.init_from: {path / ckpt.MODEL} is damaged or not safetensors "
                              f"({str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__})") from None
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

    def _profile_init(self) -> None:
        """The part of the initialisation that needs data (Admin's omega, :func:`normlab.model.profile_init`),
        on a fresh run only: before the first update, on the first global batch of epoch 1 (all ranks' shares,
        so every rank sets the same omega), seeded by ``TrainConfig.seed`` and without touching the training's
        random stream. A resumed run and one started ``init_from`` other weights keep the omega they load."""
        if self.state.update > 0 or self.cfg.init_from:
            return

        if not any(isinstance(m, Omega) for m in self.model.modules()):
            return
        batch = self.train_data.collate(self._epoch_plan(1)[0], rank=0, world=1, seed=self.cfg.seed, epoch=1, step=0)
        omegas = profile_init(self.model, batch.to(self.device), seed=self.cfg.seed)
        self._say("admin: omega profiled on the first batch: " + "; ".join(
            f"{k} {', '.join(f'{w:.3g}' for w in v)}" for k, v in omegas.items()))

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
        # One autocast region around the whole update: autocast casts each weight to bf16 once and keeps the copy
        # until its outermost region exits, so the micro-batches of an accumulated update share one cast of the
        # weights instead of one each. Backward runs with autocast off, as PyTorch advises.
        with self._autocast():
            for j, batch in enumerate(batches):
                last = j == len(batches) - 1
                sync = contextlib.nullcontext() if (last or not d.enabled) else self.net.no_sync()
                with sync:
                    sums = compute_loss(self.net, batch.to(self.device), cfg.label_smoothing, cfg.loss_impl)
                    with self._autocast_off():
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
        reason = divergence(loss, gnorm, self._outputs, cfg.diverge_factor)
        if reason is not None:
            self.optimizer.zero_grad(set_to_none=True)
            record["diverged"] = True
            record["diverged_reason"] = reason
            return record
        if cfg.optim.clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(self.params, cfg.optim.clip_norm, torch.tensor(gnorm))
        self.optimizer.step()
        # nGPT's matrices back onto the unit sphere after every update (Loshchilov et al. 2025, Section 2.2.4), on
        # every rank alike; the one place an update happens, so plain, accumulated and data-parallel runs all do it
        project_weights_(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        seconds = time.perf_counter() - t0
        record["seconds"] = seconds
        record["tokens_per_s"] = n_global / seconds
        return record

    @torch.no_grad()
    def evaluate(self, data: Dataset | None = None, epoch: int | None = None) -> dict[str, float]:
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
            out.update(self.extra_eval(self.model, self.state.epoch if epoch is None else epoch))
        return out

    def _validate(self, epoch: int) -> None:
        if self._evaluated_at == self.state.update:  # e.g. eval_every and the end of the run coincide
            return
        self._evaluated_at = self.state.update
        metrics = self.evaluate(epoch=epoch)
        self._release()  # evaluation and decoding allocate shapes the updates never do
        if not metrics:
            return
        s = self.state
        if s.best_valid is None or metrics["nll"] < s.best_valid:
            s.best_valid, s.best_update = metrics["nll"], s.update
        self._log({"type": "valid", "update": s.update, "epoch": epoch, **metrics})
        self._say(f"valid | epoch {epoch} | update {s.update} | " + " | ".join(f"{k} {v:.4g}" for k, v in metrics.items()))

    def close(self) -> None:
        """Release the DistributedDataParallel wrapper: its Reducer holds the process group, which must go before
        :func:`normlab.train.distributed.shutdown` for gloo's threads to stop (see that module's docstring). On the
        CPU the freed heap goes back to the OS: a grid's pool worker trains its next run in the same process."""
        self.net = self.model
        self._release()

    def _warn(self, line: str) -> None:
        """A notice that --quiet does not hide: the run did something else than asked (resumed from an older
        checkpoint than the newest, issue 36)."""
        if self.dist.is_main:
            print(line, file=sys.stderr, flush=True)

    def _say(self, line: str) -> None:
        if self.dist.is_main and not self.quiet:
            if self._bar is not None:
                self._bar.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr, flush=True)

    # -------------------------------------------------------------------------------------------------- fit

    def _release(self) -> None:
        if self.device.type == "cpu":
            release_memory()

    def _set_attention(self, plan: list[np.ndarray], extra: dict[str, Any], *, measure: bool = True) -> None:
        """Choose the attention kernel (``cfg.attention``; ``auto``: the fastest measured on batches of this
        epoch, :mod:`normlab.train.kernels`), set it on the model and record it in the summary. A resumed run
        keeps the kernel it started with unless the configuration names another.

        The batches measured are those at the 10th, 50th and 90th percentile of the plan's sentences per batch:
        with token-bucketed batches that is long, middling and short sentences, whose best kernels can differ
        (the flash kernel wins at long lengths, plain products at short ones)."""
        cfg, s = self.cfg, self.state
        if cfg.attention != "auto":
            s.attention = cfg.attention
        elif s.attention is None and measure:
            order = sorted(range(len(plan)), key=lambda i: len(plan[i]))
            picks = sorted({order[round(q * (len(order) - 1))] for q in (0.1, 0.5, 0.9)})
            batches = [self.train_data.collate(plan[i], rank=self.dist.rank, world=self.dist.world, seed=cfg.seed,
                                               epoch=s.epoch, step=i).to(self.device) for i in picks]  # fmt: skip
            choice = choose_attention(
                self.model, lambda: [compute_loss(self.model, b, cfg.label_smoothing, cfg.loss_impl) for b in batches],
                context=self._autocast,
            )  # fmt: skip
            impls = list(choice["ms"])
            # every rank takes the same kernel: the one with the least time summed over ranks
            totals = all_reduce_sum([choice["ms"][k] for k in impls], self.dist)
            s.attention = impls[min(range(len(impls)), key=totals.__getitem__)]
            extra["attention_ms"] = choice["ms"]
            if choice.get("cached"):  # kernels.py: the same shapes were measured for an earlier run of this process
                extra["attention_cached"] = True
            self._say(f"attention: {s.attention} (forward + backward of the {choice['calls']} attention calls of "
                      f"{len(batches)} batches: " + ", ".join(f"{k} {v:.1f} ms" for k, v in choice["ms"].items())
                      + ("; measured for an earlier run of this process, same shapes" if choice.get("cached") else "")
                      + ")")
        set_attention(self.model, None if s.attention in (None, "default") else s.attention)
        extra["attention"] = s.attention or "default"

    def _epoch_plan(self, epoch: int) -> list[np.ndarray]:
        d = self.cfg.data
        return self.train_data.epoch_batches(epoch, self.cfg.seed, d.max_tokens, max_sentences=d.max_sentences)

    def fit(self, resume: bool = False) -> dict[str, Any]:
        """Train until ``max_epochs`` / ``max_updates`` / ``max_hours`` or divergence; returns the summary (also in
        summary.json)."""
        cfg = self.cfg
        plan = self._epoch_plan(1)
        per_epoch = math.ceil(len(plan) / cfg.accumulate)
        total = cfg.max_epochs * per_epoch
        if cfg.max_updates:
            total = min(total, cfg.max_updates)
        if why := cfg.schedule.past_the_end(total, f"{total} updates = {cfg.max_epochs} epochs of {per_epoch}"):
            raise ConfigError(f"TrainConfig.schedule: {why}")
        schedule: Schedule = build_schedule(cfg.schedule, cfg.optim.lr, total, per_epoch)
        self._check_shards("training", plan)
        if self.valid_data is not None:  # a validation example longer than max_tokens: now, not after an epoch
            try:
                valid = self.valid_data.epoch_batches(0, cfg.seed, cfg.data.max_tokens, shuffle=False,
                                                      max_sentences=cfg.data.max_sentences)  # fmt: skip
            except DataError as e:
                raise DataError(f"the validation split: {e}") from None
            self._check_shards("validation", valid)
        try:
            if not self.dist.is_main:
                damaged = self._resume() if resume else []
                if self._finished(resume, total):
                    return self.rundir.summary()
                if cfg.init_from and self.state.update == 0:
                    self._init_from(Path(cfg.init_from))
                self._profile_init()
                return self._fit(schedule, total, per_epoch)
            try:
                return self._fit_main(resume, schedule, total, per_epoch)
            except OSError as e:  # a full or read-only disk: one line (exit 2); what was written stays resumable
                error = self.rundir.unwritable(e)
                if error is None:
                    raise
                raise error from None
        except Exception as e:
            error = self._failed(e)
            if error is e:
                raise
            raise error from None

    def _check_shards(self, split: str, plan: list[np.ndarray]) -> None:
        """Every global batch must give each rank at least one example (:func:`normlab.data.batching.shard`):
        checked before training, on every rank alike, for every world size. Under torchrun a validation batch of 1
        example among 2 ranks failed only after all 30 updates of a run, which had no checkpoint yet (issue 36).
        The training split's first epoch stands for all: batches are cut from the examples sorted by size, so every
        epoch has the same batch lengths (only their order and which equal-size examples fill them differ)."""
        world = self.dist.world
        fewest = min((len(b) for b in plan), default=world)
        if fewest < world:
            raise DataError(f"the {split} split: a global batch of {fewest} examples cannot give each of {world} "
                            f"ranks one (raise DataConfig.max_tokens above {self.cfg.data.max_tokens}, or train on "
                            "fewer ranks)")  # fmt: skip

    def _failed(self, e: BaseException) -> BaseException:
        """After an error in training: the run's status becomes ``failed`` (it stayed ``running``, as if still
        alive, issue 36), naming the error; returns the exception to raise. A rank that stopped because another
        failed (a collective whose peer is gone, or torchrun's SIGTERM) raises :class:`PeerFailed`, which the CLI
        ends without a line of its own: the rank that failed first has said why. A collective that waited past its
        timeout for a rank that stalled (normlab.train.distributed) is the waiting rank's own fault line: the
        stalled one says nothing. --resume continues a failed run from its last checkpoint, as it does a killed
        one."""
        import signal
        import threading

        # a collective that timed out is this rank's own line: the rank it waited for stalled and cannot say why
        if self.dist.enabled and not collective_timed_out(e) and (isinstance(e, Terminated) or _peer_gone(e)):
            e = PeerFailed(f"rank {self.dist.rank} stopped: another rank failed ({_last_line(e)})")
        if not (self.dist.is_main and self._extra is not None):  # training had not started: nothing to record
            return e
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN) if main else None  # torchrun's must not cut it
        try:
            with contextlib.suppress(OSError):  # a full disk may refuse this too: the line still says it all
                self._summary("failed", error=_error_line(e), **self._extra)
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)
        return e

    def _fit_main(self, resume: bool, schedule: Schedule, total: int, per_epoch: int) -> dict[str, Any]:
        """:meth:`fit` on the rank that writes: the lock, the checks, then the run directory is written."""
        cfg = self.cfg
        created = not self.run_dir.exists()
        self._lock = self.rundir.lock()  # refused, naming the holder's pid, while another trainer runs here
        try:
            try:
                if not resume:
                    self.rundir.check_new()  # another trainer may have started here since prepare_run_dir
                damaged = self._resume() if resume else []
                if self._finished(resume, total):
                    summary = self.rundir.summary()
                    if summary.get("status") == "diverged":  # the checkpoint's update is before it: name both
                        self._say(f"{self.run_dir}: the run diverged at update {summary.get('diverged_at_update')} "
                                  f"(last checkpoint: update {self.state.update}); with the configuration it "
                                  "diverged with, nothing to do")  # fmt: skip
                    else:
                        self._say(f"{self.run_dir}: the run is {summary.get('status')} (update {self.state.update}); "
                                  "nothing to do")  # fmt: skip
                    return summary
                if cfg.init_from and self.state.update == 0:
                    self._init_from(Path(cfg.init_from))
                self._profile_init()
                if resume and self.state.update > 0:
                    self._check_files()
            except BaseException:
                if created:  # nothing of this run was written: leave no directory behind
                    self._lock.release()
                    shutil.rmtree(self.run_dir, ignore_errors=True)
                raise
            # everything is checked: from here on the run directory is written
            self._set_aside(damaged)
            self._repair_best()
            self.rundir.write_config(cfg)
            for name, content in self.files.items():
                self.rundir.write_file(name, content)
            if self.fingerprint is not None:
                self.rundir.write_data_record(self.fingerprint, self.files.get(RunDir.TOKENIZER, b""))
            if resume:
                # each update once, even without a checkpoint; a validation still due is done again
                self.rundir.truncate_metrics(self.state.update, valid=self.state.pending_valid is None)
            return self._fit(schedule, total, per_epoch)
        finally:
            self._lock.release()

    def _fit(self, schedule: Schedule, total: int, per_epoch: int) -> dict[str, Any]:
        cfg = self.cfg
        metrics = contextlib.ExitStack()
        if self.dist.is_main:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.rundir.tensorboard), purge_step=self.state.update + 1)
            self._metrics_file = metrics.enter_context(self.rundir.metrics_writer())
        # budget_hours: total is the cap (max_updates, max_epochs) until the length is decided (_decide_length)
        self._cap, self._per_epoch = total, per_epoch
        budget = self.state.budget
        if budget is not None:  # decided: kept on resume, within the caps as they are now
            total = self._recap(budget)
            schedule = build_schedule(cfg.schedule, cfg.optim.lr, total, per_epoch)
        elif cfg.budget_hours and self.dist.is_main and self.state.update < cfg.budget_at:
            at = cfg.budget_at
            print(f"normlab train: note: budget_hours={cfg.budget_hours:g}: " + (
                f"the run's length is decided at update {at}, from the time of updates {at // 4 + 1}-{at}" if at < total
                else f"the run ends at update {total} (max_updates / max_epochs), before the budget would decide its "
                f"length at update {at}"), file=sys.stderr)  # fmt: skip
        self._bar = None
        show_bar = self.progress if self.progress is not None else sys.stderr.isatty()
        if self.dist.is_main and show_bar and not self.quiet:
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=self.state.update, unit="upd", dynamic_ncols=True)
        extra: dict[str, Any] = {"total_updates": total, "updates_per_epoch": per_epoch}
        if budget is not None:  # what ends the run is the budget's length, or the cap that is shorter
            extra.update(self._budget_extra(budget))
        elif cfg.budget_hours and total > cfg.budget_at:
            # the length is not known yet (progress.py reads the summary again until it is)
            extra["budget"] = {"hours": cfg.budget_hours, "decided_at": cfg.budget_at, "total_updates": None}
        elif cfg.max_updates and self._cap < cfg.max_updates:
            # max_epochs (default 20) binds before the max_updates asked for: said at the start and in the summary,
            # not left to a "/80" in the progress line (a new user's finding: a small corpus' 20 epochs are short)
            extra["stopped_by"] = "max_epochs"
            if self.dist.is_main:
                print(f"normlab train: note: max_epochs={cfg.max_epochs} ends this run at update {self._cap} "
                      f"({per_epoch} an epoch), before max_updates={cfg.max_updates}; raise max_epochs to reach it",
                      file=sys.stderr)  # fmt: skip
        self._extra = extra
        try:
            with self._interruptible():
                return self._loop(schedule, total, extra)
        except KeyboardInterrupt:  # a second Ctrl-C, mid-update: what the checkpoints hold is kept
            with contextlib.suppress(OSError):
                self._summary("interrupted", **extra)
            raise
        finally:
            if self._bar is not None:
                self._bar.close()
            if self._writer is not None:
                self._writer.close()
            metrics.close()
            self._metrics_file = None

    def _loop(self, schedule: Schedule, total: int, extra: dict[str, Any]) -> dict[str, Any]:
        cfg, s = self.cfg, self.state
        status = "completed"
        # the kernel of the run (kept, or measured when there are updates left to make it pay): a pending
        # validation of a resumed run computes with the kernel the uninterrupted run would have used
        self._set_attention(self._epoch_plan(s.epoch), extra, measure=s.update < total)
        self._release()
        self._wall0, self._wall_base = time.perf_counter(), s.wall
        if cfg.budget_hours and s.budget is None and cfg.budget_at <= s.update < total:
            # resumed past the decision point without a decision (a run that had ended at its cap, given a larger
            # one; a budget added with --accept-changed-settings): decided now, from the updates since the mark
            total, schedule = self._decide_length(extra)
        self._summary("running", **extra)
        if s.pending_valid is not None:  # resumed from a checkpoint whose validation had not been done
            self._validate(s.pending_valid)
            s.pending_valid = None
            self.save()
        time_up = self._time_is_up()
        while s.update < total and s.epoch <= cfg.max_epochs and not time_up:
            plan = self._epoch_plan(s.epoch)
            groups = [plan[i : i + cfg.accumulate] for i in range(0, len(plan), cfg.accumulate)]
            while s.step_in_epoch < len(groups) and s.update < total:
                t0 = time.perf_counter()
                record = self.train_step(groups[s.step_in_epoch], s.epoch, s.step_in_epoch, schedule(s.update + 1))
                if record.get("diverged"):
                    self._log(record)
                    status = "diverged"
                    extra.update(diverged_at_update=record["update"], diverged_loss=record["loss"],
                                 diverged_gnorm=record["gnorm"], diverged_reason=record["diverged_reason"])  # fmt: skip
                    self._say(f"diverged at update {record['update']}: {record['diverged_reason']}; gradient "
                              f"norm {record['gnorm']}; last loss below the rule {s.last_finite_loss}")
                    return self._summary(status, **extra)
                s.update += 1
                s.step_in_epoch += 1
                s.last_finite_loss = record["loss"]
                s.elapsed += time.perf_counter() - t0
                s.wall = self._wall()
                if cfg.budget_hours and s.budget is None:
                    if s.update == cfg.budget_at // 4:
                        s.budget_mark = [s.update, s.elapsed]
                    elif s.update == cfg.budget_at and s.update < total:
                        total, schedule = self._decide_length(extra)
                self._log(record)
                self._progress(record, total)
                if s.update % RELEASE_EVERY == 0:
                    self._release()
                mid = s.step_in_epoch < len(groups)
                save = bool(cfg.save_every and s.update % cfg.save_every == 0)
                # an eval_every with no validation split saves nothing extra (its checkpoints would rotate out the
                # save_every ones under keep_last)
                validate = bool(cfg.eval_every and s.update % cfg.eval_every == 0) and self.valid_data is not None
                if mid and (save or validate):
                    # every validation after a checkpoint, an eval_every one off the save_every grid too: a validation
                    # that failed there lost the updates since the last checkpoint (issue 36)
                    self._save_then_validate(s.epoch, validate=validate)
                # max_hours: the checkpoint and validation below, then the end; asked only while the run has updates
                # left (every rank alike), so that a run that reached its length is not labelled stopped by the clock
                if mid and s.update < total and self._time_is_up():
                    time_up = True
                    break
                # a Ctrl-C stops here, at an update boundary, with a checkpoint (not at an epoch's last update:
                # the epoch's validation and checkpoint below come first)
                if s.step_in_epoch < len(groups) and s.update < total and self._stopping():
                    return self._interrupted(extra)
            if s.step_in_epoch >= len(groups):  # the epoch is complete: checkpoint and validate (paper: per epoch)
                s.epoch += 1
                s.step_in_epoch = 0
                self._save_then_validate(s.epoch - 1)
                if s.update < total and self._stopping():
                    return self._interrupted(extra)
                time_up = time_up or (s.update < total and s.epoch <= cfg.max_epochs and self._time_is_up())
            else:  # stopped inside an epoch by max_updates or max_hours
                break
        if s.step_in_epoch > 0:  # the run ended mid-epoch: a last checkpoint and evaluation
            self._save_then_validate(s.epoch)
        if time_up:
            extra["stopped_by"] = "max_hours"
        # the summary's wall time includes the last checkpoint and validation (the checkpoint's own state was written
        # before them); a resume reads the summary's to tell whether max_hours has run out (_finished)
        s.wall = self._wall()
        return self._summary(status, **extra)

    def _decide_length(self, extra: dict[str, Any]) -> tuple[int, Schedule]:
        """budget_hours: the run's length at update ``budget_at`` (:func:`budgeted_length` on the updates since
        the mark), capped by max_updates and max_epochs, and its schedule; rank 0's clock decides for every rank
        (one all-reduce), so that all stop at the same update. Said in a line and in the summary's ``budget``."""
        cfg, s = self.cfg, self.state
        mark = s.budget_mark or [0, 0.0]
        length, per = 0, 0.0
        if self.dist.is_main:  # only rank 0's clock counts: computed there alone, then shared
            length, per = budgeted_length(cfg.budget_hours * 3600, s.update, s.elapsed, mark)
        if self.dist.enabled:
            length, per = all_reduce_sum([float(length), per], self.dist)
            length = int(length)
        s.budget = {"hours": cfg.budget_hours, "decided_at": s.update, "window": [int(mark[0]) + 1, s.update],
                    "seconds_per_update": round(per, 4), "updates_bought": length}  # fmt: skip
        total = self._recap(s.budget)
        capped = s.budget["capped_by"]
        extra.update(self._budget_extra(s.budget))
        if self._bar is not None:
            self._bar.total = total
            self._bar.refresh()
        left = max(total - s.update, 0) * per
        linear = cfg.schedule.decay == "linear"
        self._say(f"budget_hours={cfg.budget_hours:g}: updates {int(mark[0]) + 1}-{s.update} took {per:.3f} s each, "
                  f"so the run ends at update {total:,} ({total / self._per_epoch:.1f} epochs of {self._per_epoch}; "
                  f"{_hours_minutes(left)} of updates left" + (f", capped by {capped}" if capped else "") + ")"
                  + (f"; the rate decays linearly to {cfg.schedule.end_lr:g} there" if linear else ""))  # fmt: skip
        return total, build_schedule(cfg.schedule, cfg.optim.lr, total, self._per_epoch)

    def _recap(self, budget: dict[str, Any]) -> int:
        """The run's length from a decided budget: the updates it bought, within the caps as they are now
        (max_updates and max_epochs may change on resume, as for any run; then the linear decay is rebuilt for the
        new length, as it is for a run without a budget). Sets the budget's ``total_updates`` and ``capped_by``;
        a length that a resume's caps changed is said in a line."""
        cfg = self.cfg
        total = min(budget["updates_bought"], self._cap)
        capped = None if total == budget["updates_bought"] else (
            "max_updates" if total == cfg.max_updates else "max_epochs")  # fmt: skip
        before = budget.get("total_updates")
        budget.update(total_updates=total, capped_by=capped)
        if before is not None and before != total:
            self._say(f"resume: the run now ends at update {total:,}, not {before:,} (the budget bought "
                      f"{budget['updates_bought']:,}; "
                      + (f"{capped} is {total:,} now" if capped else "no cap below it now")
                      + "); a linear decay is rebuilt for that length")  # fmt: skip
        return total

    @staticmethod
    def _budget_extra(budget: dict[str, Any]) -> dict[str, Any]:
        """The summary's keys of a length that budget_hours decided: the length, how it was decided, and what ends
        the run (the budget, or the cap that was shorter)."""
        return {"total_updates": budget["total_updates"], "budget": budget,
                "stopped_by": budget["capped_by"] or "budget_hours"}

    def _wall(self) -> float:
        """Wall-clock seconds of the training loop so far, summed over resumes (``state.wall``, max_hours)."""
        return self._wall_base + time.perf_counter() - self._wall0

    def _time_is_up(self) -> bool:
        """``max_hours`` reached (wall-clock time of the training loop, summed over resumes). Rank 0's clock decides
        for every rank (one all-reduce of its verdict): ranks whose clocks disagree by a moment must still stop at
        the same update, or the others would wait in the next update's collectives."""
        if not self.cfg.max_hours:
            return False
        up = self._wall() >= self.cfg.max_hours * 3600
        if self.dist.enabled:
            (up,) = all_reduce_sum([float(up) if self.dist.is_main else 0.0], self.dist)
        return bool(up)

    def _save_then_validate(self, epoch: int, validate: bool = True) -> None:
        """Checkpoint, then validate (``epoch``: the epoch the validation is logged under), then record the score in
        that checkpoint. The checkpoint comes first because validation can fail where training did not (a
        validation batch that cannot be shared among the ranks, BLEU's decoding): under torchrun a run of 30
        updates lost all of them to its end-of-run validation (issue 36). The checkpoint says that its validation
        is due (``pending_valid``): a run stopped before it is done validates first when resumed. Every validation
        of :meth:`_loop` comes through here (at an epoch's end, at ``eval_every`` and at the run's end), so
        ``eval_every`` writes a checkpoint of its own where ``save_every`` would not (``keep_last`` rotates it)."""
        s = self.state
        validate = validate and self.valid_data is not None and self._evaluated_at != s.update
        if validate:
            s.pending_valid = epoch
        self.save()
        if validate:
            self._validate(epoch)
            s.pending_valid = None
            self.save()  # state.json only, and best/ when the score is the best

    def _on_terminate(self, signum: int, frame: Any) -> None:
        """SIGTERM (torchrun stops every rank so once one has failed; a kill): end with status ``failed``."""
        raise Terminated("stopped by SIGTERM")

    def _interrupted(self, extra: dict[str, Any]) -> dict[str, Any]:
        self.save()
        return self._summary("interrupted", **extra)

    def _on_interrupt(self, signum: int, frame: Any) -> None:
        """SIGINT (Ctrl-C): stop at the next update boundary, with a checkpoint; a second one stops at once (a
        KeyboardInterrupt, what was saved stays resumable). A Ctrl-C in the middle of an update used to end in a
        35-line traceback and a run left ``running`` (issue 36)."""
        if self._stop:
            raise KeyboardInterrupt
        self._stop = True
        if self.dist.is_main:
            print("interrupt: stopping after this update, with a checkpoint (Ctrl-C again to stop at once)",
                  file=sys.stderr, flush=True)  # fmt: skip

    def _stopping(self) -> bool:
        """Whether to stop now: every rank stops at the same update, so the flag is summed over ranks (each rank
        gets its own SIGINT, perhaps in different updates)."""
        if not self.dist.enabled:
            return self._stop
        return all_reduce_sum([float(self._stop)], self.dist)[0] > 0

    @contextlib.contextmanager
    def _interruptible(self) -> Any:
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = signal.signal(signal.SIGINT, self._on_interrupt)
        previous_term = signal.signal(signal.SIGTERM, self._on_terminate)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)
            signal.signal(signal.SIGTERM, previous_term)

    def _progress(self, record: dict[str, Any], total: int) -> None:
        if not self.dist.is_main or self.quiet:
            return
        # with max_hours the run may stop long before `total` updates, and the bar's ETA (or update N/total) counts
        # towards `total`: say how long the clock leaves beside it
        left = max(0.0, self.cfg.max_hours * 3600 - self.state.wall) if self.cfg.max_hours else None
        if self._bar is not None:
            self._bar.update(1)
            clock = {"stops_in": _hours_minutes(left)} if left is not None else {}
            self._bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{record['lr']:.2e}",
                                  tok_s=f"{record['tokens_per_s']:.0f}", **clock, refresh=False)  # fmt: skip
        elif record["update"] % self.cfg.log_every == 0 or record["update"] == total:
            self._say(
                f"update {record['update']}/{total} | epoch {record['epoch']} | loss {record['loss']:.4f} | "
                f"nll {record['nll']:.4f} | lr {record['lr']:.3e} | gnorm {record['gnorm']:.3f} | "
                f"{record['tokens_per_s']:.0f} tok/s"
                + (f" | max_hours={self.cfg.max_hours:g} stops it in {_hours_minutes(left)}" if left is not None
                   else "")
            )
