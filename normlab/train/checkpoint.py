"""Checkpoints: tensors in safetensors, everything else in JSON; written atomically; loading never unpickles.

A checkpoint is a directory ``RUN/checkpoints/update_00001234/`` holding

* ``model.safetensors``: the model's parameters and buffers (tied weights stored once, by safetensors'
  ``save_model``);
* ``optimizer.safetensors``: the optimizer's per-parameter state (``state.<i>.<name>``) and the random-number
  generator states (``rng.cpu``, ``rng.cuda.<k>``);
* ``state.json``: the trainer's position (update, epoch, batch within the epoch), the optimizer's
  hyper-parameters, the best validation score so far, and the run's configuration.

It is written into a temporary directory whose files are fsync-ed, renamed into place, and the parent
fsync-ed: a run killed at any moment leaves either the previous set of checkpoints or the new one, never a
half-written directory. A checkpoint is deleted (rotation, a re-save of the same update) by renaming it aside
first, so an interrupted deletion leaves no partial directory under a checkpoint's name.

``best/`` holds a *copy* of the best checkpoint's model and state (no optimizer: it is for loading, not for
resuming). A copy, not hard links: a link shares storage, so damage to one file (a truncating write, a disk
error) would take the best checkpoint with it.

Loading never unpickles and turns every kind of damage (a truncated file, a pickle or zip archive where a
safetensors file belongs, a cut state.json) into a one-line :class:`CheckpointError`. Which checkpoint a run
directory's ``best`` / ``last`` / ``N`` means is :meth:`normlab.rundir.RunDir.resolve`; ``avg:N``, the mean of
the last N checkpoints' weights, is :meth:`normlab.rundir.RunDir.resolve_average` and :func:`average_weights`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file, save_model
from torch import nn

from normlab.config import ConfigError
from normlab.files import UMASK, fsync_dir, remove_tree, sweep

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "average_weights",
    "load_average",
    "list_checkpoints",
    "mark_best",
    "rotate",
    "read_state",
    "update_state",
    "CheckpointError",
    "update_of",
]

_NAME = re.compile(r"^update_(\d{8,})$")
STATE, MODEL, OPTIMIZER = "state.json", "model.safetensors", "optimizer.safetensors"


def update_of(path: Path) -> int:
    """The update a checkpoint directory ``update_NNNNNNNN`` was written at."""
    return int(_NAME.match(path.name).group(1))  # type: ignore[union-attr]


class CheckpointError(ConfigError):
    """A checkpoint that cannot be found or does not fit the model (a one-line error of the CLI, exit 2)."""


def _load_model_tensors(model: nn.Module, tensors: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """``safetensors.torch.load_model`` on tensors already read: tied weights were stored once (save_model),
    so a missing name whose storage twin is present is not missing."""
    from safetensors.torch import _remove_duplicate_names

    state = model.state_dict()
    to_removes = _remove_duplicate_names(state, preferred_names=list(tensors))
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing, unexpected = set(missing), list(unexpected)
    for names in to_removes.values():
        for name in names:
            if name in missing:
                missing.remove(name)
            else:
                unexpected.append(name)
    return sorted(missing), sorted(unexpected)


def _load_weights(model: nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """``weights`` (read from the checkpoint ``path``, or averaged) into ``model``, every tensor of it and nothing
    else; a tensor of another shape, a missing or an unexpected one is a one-line :class:`CheckpointError`."""
    try:
        missing, unexpected = _load_model_tensors(_unwrap(model), weights)
    except RuntimeError as e:  # a tensor of another shape
        raise CheckpointError(f"{path}: checkpoint does not fit the model ({_one_line(e)})") from None
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: checkpoint does not fit the model (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )


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


def _os_error(e: Exception, path: Path) -> OSError | None:
    """The ``OSError`` behind a safetensors write error, or None. safetensors raises its own ``SafetensorError``
    for a failed write ("I/O error: No space left on device (os error 28)"), not an OSError, so a real full disk
    escaped the trainer's handler of full and read-only disks (issue 36) and ended in a traceback."""
    match = re.search(r"\(os error (\d+)\)", str(e))
    if match is None:
        return None
    code = int(match.group(1))
    return OSError(code, os.strerror(code), str(path))


def _write(save: Any, obj: Any, path: Path) -> None:
    try:
        save(obj, str(path))
    except Exception as e:  # SafetensorError is not importable by name in every safetensors version
        error = _os_error(e, path)
        if error is None:
            raise
        raise error from e


def _publish_modes(tmp: Path) -> None:
    """mkdtemp makes the directory 0700 and safetensors its files 0600; a checkpoint gets the modes of the
    run's other files (0666 / 0777 less the umask) so that whoever may read the run may read its weights."""
    if not hasattr(os, "fchmod"):  # not on Windows, where the mode bits mean little
        return
    for f in tmp.iterdir():
        os.chmod(f, 0o666 & ~UMASK)
    os.chmod(tmp, 0o777 & ~UMASK)


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
        _write(save_model, _unwrap(model), tmp / MODEL)
        tensors = _rng_tensors()
        groups: list[dict[str, Any]] = []
        if optimizer is not None:
            opt_tensors, groups = _optimizer_tensors(optimizer)
            tensors.update(opt_tensors)
        _write(save_file, tensors, tmp / OPTIMIZER)
        payload = dict(state, update=update, optimizer_param_groups=groups)
        (tmp / STATE).write_text(json.dumps(payload, indent=1, sort_keys=True), encoding="utf-8")
        _publish_modes(tmp)
        for f in tmp.iterdir():  # data on disk before the rename makes it visible
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        fsync_dir(tmp)
        remove_tree(final)  # re-saving the same update (e.g. after a resume): replace it
        os.replace(tmp, final)
        fsync_dir(directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def update_state(path: str | Path, changes: dict[str, Any]) -> None:
    """Rewrite a saved checkpoint's state.json with ``changes`` merged in, atomically (a temporary file, fsync-ed,
    renamed over it): the trainer checkpoints before it validates, and records the validation's best score in the
    checkpoint afterwards without writing its tensors twice."""
    path = Path(path)
    payload = dict(read_state(path), **changes)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(payload, indent=1, sort_keys=True))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path / STATE)
        fsync_dir(path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first (temporary directories of an interrupted save are ignored)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if p.is_dir() and _NAME.match(p.name) and (p / STATE).exists()]
    return sorted(found, key=update_of)


def read_state(path: str | Path) -> dict[str, Any]:
    """A checkpoint's state.json; a one-line :class:`CheckpointError` when it is missing or damaged."""
    path = Path(path)
    if not path.is_dir():
        what = "does not exist" if not path.exists() else f"is a file ({_kind(path)}), not a checkpoint directory"
        raise CheckpointError(f"{path}: {what}")
    try:
        state = json.loads((path / STATE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: not a checkpoint (no {STATE})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: damaged checkpoint ({STATE}: {_one_line(e)})") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: damaged checkpoint ({STATE} is not a JSON object)")
    return state


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[-1].strip() if text else type(e).__name__


def _kind(path: Path) -> str:
    """What a file that should be safetensors is: a pickle, a torch.save zip archive, or unknown."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
    except OSError:
        return "unreadable"
    if head.startswith(b"\x80"):
        return "a pickle; normlab never unpickles"
    if head.startswith(b"PK"):
        return "a zip archive such as torch.save writes; normlab never unpickles"
    return "not safetensors"


def _load_tensors(file: Path, device: str = "cpu") -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; damage is a one-line :class:`CheckpointError`."""
    if not file.is_file():
        raise CheckpointError(f"{file.parent}: damaged checkpoint (no {file.name})")
    try:
        return load_file(str(file), device=device)
    except Exception as e:  # safetensors raises SafetensorError (not an OSError) for a cut or foreign file
        raise CheckpointError(f"{file}: damaged or foreign file ({_kind(file)}: {_one_line(e)})") from None


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
    state = read_state(path)
    # read every file before anything is loaded: a damaged checkpoint leaves the model and optimizer untouched
    weights = _load_tensors(path / MODEL, str(device))
    need_extra = optimizer is not None or restore_rng
    tensors = _load_tensors(path / OPTIMIZER) if need_extra else {}
    if optimizer is not None and not isinstance(state.get("optimizer_param_groups"), list):
        raise CheckpointError(f"{path}: damaged checkpoint ({STATE} lacks optimizer_param_groups)")
    _load_weights(model, weights, path)
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


def average_weights(paths: list[Path], device: str = "cpu") -> dict[str, torch.Tensor]:
    """The mean of the model tensors of ``paths`` (fairseq's scripts/average_checkpoints.py, which Vaswani et al.
    2017 used for their base models: the last 5 checkpoints): each floating tensor averaged in fp64 and cast
    back to its dtype, any other (integer buffers) required equal in every checkpoint. Checkpoints whose names or
    shapes differ are a one-line :class:`CheckpointError` (checkpoints of different runs or models)."""
    if not paths:
        raise CheckpointError("no checkpoint to average")
    mean: dict[str, torch.Tensor] = {}
    first = _load_tensors(paths[0] / MODEL, device)
    for name, t in first.items():
        mean[name] = t.to(torch.float64) if t.is_floating_point() else t
    for path in paths[1:]:
        tensors = _load_tensors(path / MODEL, device)
        if set(tensors) != set(first):
            diff = sorted(set(tensors) ^ set(first))[:3]
            raise CheckpointError(f"{path}: not the same model as {paths[0]} (tensors {diff} in one only)")
        for name, t in tensors.items():
            if t.shape != first[name].shape:
                raise CheckpointError(f"{path}: {name} is {tuple(t.shape)}, {tuple(first[name].shape)} in {paths[0]}")
            if t.is_floating_point():
                mean[name] += t.to(torch.float64)
            elif not torch.equal(t, first[name]):
                raise CheckpointError(f"{path}: the integer tensor {name} differs from {paths[0]}'s")
    return {name: (t / len(paths)).to(first[name].dtype) if t.is_floating_point() else t for name, t in mean.items()}


def load_average(paths: list[Path], model: nn.Module, *, device: torch.device | str = "cpu") -> None:
    """Load the mean of the checkpoints' model tensors (:func:`average_weights`) into ``model``."""
    _load_weights(model, average_weights(paths, str(device)), paths[0])


def mark_best(checkpoint: str | Path) -> Path:
    """Make ``checkpoints/best`` a copy of the given checkpoint's model and state (see the module docstring)."""
    checkpoint = Path(checkpoint)
    best = checkpoint.parent / "best"
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-best-", dir=checkpoint.parent))
    try:
        for name in (MODEL, STATE):
            shutil.copyfile(checkpoint / name, tmp / name)
            with open(tmp / name, "rb") as fh:
                os.fsync(fh.fileno())
        _publish_modes(tmp)
        fsync_dir(tmp)
        remove_tree(best)
        os.replace(tmp, best)
        fsync_dir(checkpoint.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return best


def rotate(directory: str | Path, keep_last: int, keep_every: int = 0) -> None:
    """Delete all but the newest ``keep_last`` checkpoints and those at multiples of ``keep_every`` updates
    (``best/`` is separate and never deleted); also remove what a killed save or deletion left behind."""
    directory = Path(directory)
    sweep(directory)
    found = list_checkpoints(directory)
    for path in found[: max(len(found) - keep_last, 0)]:
        if keep_every and update_of(path) % keep_every == 0:
            continue
        remove_tree(path)
