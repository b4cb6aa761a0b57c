"""Checkpoints: tensors in safetensors, everything else in JSON; written atomically; loading never unpickles.

A checkpoint is a directory ``RUN/checkpoints/update_00001234/`` holding

* ``model.safetensors``: the model's parameters and buffers (tied weights stored once, by safetensors'
  ``save_model``);
* ``optimizer.safetensors``: the optimizer's per-parameter state (``state.<i>.<name>``) and the random-number
  generator states (``rng.cpu``, ``rng.cuda.<k>``);
* ``state.json``: the trainer's position (update, epoch, batch within the epoch), the optimizer's
  hyper-parameters, the best validation score so far, and the run's configuration.

It is written into a temporary directory that is renamed into place (``os.replace``): a run killed at any
moment leaves either the previous set of checkpoints or the new one, never a half-written directory.
``best/`` holds hard links to the files of the best checkpoint so that rotation of the last k never removes it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, load_model, save_file, save_model
from torch import nn

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "list_checkpoints",
    "latest_checkpoint",
    "resolve_checkpoint",
    "mark_best",
    "rotate",
    "read_state",
    "CheckpointError",
]

_NAME = re.compile(r"^update_(\d{8,})$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be found or does not fit the model."""


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "module", model)  # DistributedDataParallel


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for index, state in sd["state"].items():
        for key, value in state.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            tensors[f"state.{index}.{key}"] = t.detach().cpu().contiguous().clone()
    groups = [{k: v for k, v in g.items()} for g in sd["param_groups"]]
    for g in groups:
        for k, v in list(g.items()):
            if isinstance(v, tuple):
                g[k] = list(v)
    return tensors, groups


def _rng_tensors() -> dict[str, torch.Tensor]:
    out = {"rng.cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for k, state in enumerate(torch.cuda.get_rng_state_all()):
            out[f"rng.cuda.{k}"] = state
    return out


def _restore_rng(tensors: dict[str, torch.Tensor]) -> None:
    if "rng.cpu" in tensors:
        torch.set_rng_state(tensors["rng.cpu"])
    cuda = sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k.rsplit(".", 1)[1]))
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda])


def save_checkpoint(
    directory: str | Path,
    update: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
) -> Path:
    """Write ``directory/update_<update>/`` atomically and return its path."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"update_{update:08d}"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory))
    try:
        save_model(_unwrap(model), str(tmp / "model.safetensors"))
        tensors = _rng_tensors()
        groups: list[dict[str, Any]] = []
        if optimizer is not None:
            opt_tensors, groups = _optimizer_tensors(optimizer)
            tensors.update(opt_tensors)
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        payload = dict(state, update=update, optimizer_param_groups=groups)
        (tmp / "state.json").write_text(json.dumps(payload, indent=1, sort_keys=True), encoding="utf-8")
        for f in tmp.iterdir():  # data on disk before the rename makes it visible
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        if final.exists():  # re-saving the same update (e.g. after a resume): replace it
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary directories of an interrupted save are ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if p.is_dir() and _NAME.match(p.name) and (p / "state.json").exists()]
    return sorted(found, key=lambda p: int(_NAME.match(p.name).group(1)))  # type: ignore[union-attr]


def latest_checkpoint(directory: str | Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def resolve_checkpoint(run_dir: str | Path, which: str = "best") -> Path:
    """``best``, ``last``, or an update number, inside ``run_dir/checkpoints``; a one-line error otherwise."""
    ckpts = Path(run_dir) / "checkpoints"
    if which == "best":
        if (ckpts / "best" / "state.json").exists():
            return ckpts / "best"
        which = "last"  # a run without a validation score yet: its last checkpoint is its best
    if which == "last":
        last = latest_checkpoint(ckpts)
        if last is None:
            raise CheckpointError(f"{run_dir}: no checkpoint found (looked in {ckpts})")
        return last
    if which.isdigit():
        path = ckpts / f"update_{int(which):08d}"
        if not (path / "state.json").exists():
            have = ", ".join(p.name.removeprefix("update_").lstrip("0") or "0" for p in list_checkpoints(ckpts))
            raise CheckpointError(f"{run_dir}: no checkpoint at update {which} (have: {have or 'none'})")
        return path
    raise CheckpointError(f"checkpoint must be 'best', 'last' or an update number, got {which!r}")


def read_state(path: str | Path) -> dict[str, Any]:
    return json.loads((Path(path) / "state.json").read_text(encoding="utf-8"))


def load_checkpoint(
    path: str | Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    restore_rng: bool = False,
    device: torch.device | str = "cpu",
) -> dict[str, Any]:
    """Load tensors into ``model`` (and ``optimizer``); return the JSON state. Nothing is unpickled."""
    path = Path(path)
    if not (path / "state.json").exists():
        raise CheckpointError(f"{path}: not a checkpoint (no state.json)")
    state = read_state(path)
    try:
        missing, unexpected = load_model(_unwrap(model), str(path / "model.safetensors"), strict=False, device=str(device))
    except RuntimeError as e:  # a tensor of another shape
        raise CheckpointError(f"{path}: checkpoint does not fit the model ({str(e).splitlines()[-1].strip()})") from None
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: checkpoint does not fit the model (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    tensors = load_file(str(path / "optimizer.safetensors"), device="cpu")
    if optimizer is not None:
        per_param: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in tensors.items():
            if key.startswith("state."):
                _, index, name = key.split(".", 2)
                per_param.setdefault(int(index), {})[name] = value
        groups = state["optimizer_param_groups"]
        current = optimizer.state_dict()["param_groups"]
        if len(groups) != len(current) or any(len(g["params"]) != len(c["params"]) for g, c in zip(groups, current)):
            raise CheckpointError(f"{path}: optimizer state does not fit the model's parameters")
        for g in groups:
            for k, v in list(g.items()):
                if isinstance(v, list) and k != "params":
                    g[k] = tuple(v)
        optimizer.load_state_dict({"state": per_param, "param_groups": groups})
    if restore_rng:
        _restore_rng(tensors)
    return state


def mark_best(checkpoint: str | Path) -> Path:
    """Make ``checkpoints/best`` the given checkpoint (hard links; a copy where links are not possible)."""
    checkpoint = Path(checkpoint)
    best = checkpoint.parent / "best"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-best-", dir=checkpoint.parent))
    for f in checkpoint.iterdir():
        try:
            os.link(f, tmp / f.name)
        except OSError:
            shutil.copy2(f, tmp / f.name)
    old = None
    if best.exists():
        old = checkpoint.parent / f".old-best-{os.getpid()}"
        os.replace(best, old)
    os.replace(tmp, best)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return best


def rotate(directory: str | Path, keep_last: int, keep_every: int = 0) -> None:
    """Delete all but the newest ``keep_last`` checkpoints and those at multiples of ``keep_every`` updates
    (``best/`` is separate and never deleted); also remove temporary directories left by a killed save."""
    directory = Path(directory)
    for stale in directory.glob(".tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in directory.glob(".old-best-*"):
        shutil.rmtree(stale, ignore_errors=True)
    found = list_checkpoints(directory)
    for path in found[: max(len(found) - keep_last, 0)]:
        update = int(_NAME.match(path.name).group(1))  # type: ignore[union-attr]
        if keep_every and update % keep_every == 0:
            continue
        shutil.rmtree(path, ignore_errors=True)
