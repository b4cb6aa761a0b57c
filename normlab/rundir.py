"""The run directory of ``normlab train``: the one module that knows its layout (STYLE.md item 11).

Layout::

    config.yaml       the resolved configuration (written atomically)
    tokenizer.model   the run's sentencepiece model
    data.json         the sha256 of every corpus file and of tokenizer.model at the start (``--resume`` checks them)
    metrics.jsonl     one strict-JSON object per update ("type": "train") and per evaluation ("type": "valid")
    summary.json      status (running / completed / diverged / interrupted / failed), last update, best validation
                      score, timings
    tb/               TensorBoard event files
    checkpoints/      update_XXXXXXXX/ (the last ``keep_last``) and best/  (see normlab/train/checkpoint.py)
    eval/             ``normlab evaluate``'s scores: <what>-<checkpoint>.json, beside it .hyp (translations) or
                      .pred (classifications), one line per data row of the scored file, empty for a row that
                      was not scored (:meth:`RunDir.eval_file`, :meth:`RunDir.write_eval_lines`)
    .lock             the trainer's lock (``flock``) and its pid

Every file is written atomically: into a temporary file in the same directory, ``fsync``, renamed into place,
then the directory ``fsync``-ed so that the rename itself survives a power cut. A reader never sees a half
file, except metrics.jsonl, which is appended to: its reader skips a last line cut by a kill.

Callers ask a :class:`RunDir`: ``RunDir(path).resolve("best")``, ``.metrics()``, ``.status()``,
``.load_model("translation")``. Nothing else in normlab spells these file names.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normlab.config import CHECKPOINT_AVERAGE, ConfigError, TrainConfig, load_yaml
from normlab.data.tokenizer import Tokenizer
from normlab.device import pick_device
from normlab.files import (
    fsync_dir,
    json_line,
    last_jsonl,
    read_jsonl,
    remove_tree,
    strict_json,
    sweep,
    write_atomic,
    write_json_atomic,
)
from normlab.model import build_model
from normlab.train.checkpoint import (
    STATE,
    CheckpointError,
    list_checkpoints,
    load_average,
    load_checkpoint,
    update_of,
)

if TYPE_CHECKING:
    import torch
    from torch import nn

# the file mechanics live in normlab/files.py (the ground floor); they are named here too, where callers found them
__all__ = ["RunDir", "RunDirUnwritable", "RunLocked", "fsync_dir", "json_line", "read_jsonl", "remove_tree",
           "strict_json", "sweep", "write_atomic", "write_json_atomic"]  # fmt: skip

FINISHED = ("completed", "diverged")


# ------------------------------------------------------------------------------------------------------ lock


class RunLocked(ConfigError):
    """Another process trains into this run directory."""


class _Lock:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor releases the flock
            self.fd = -1


class RunDirUnwritable(ConfigError):
    """The run directory cannot be written: a full disk, a quota, a read-only file system, no permission."""


# errno -> what to say; the trainer turns these OSErrors into one line (exit 2), never a traceback
_UNWRITABLE = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


# ------------------------------------------------------------------------------------------------------ RunDir


class RunDir:
    """A run directory (it need not exist yet)."""

    CONFIG = "config.yaml"
    TOKENIZER = "tokenizer.model"
    DATA = "data.json"
    METRICS = "metrics.jsonl"
    SUMMARY = "summary.json"
    CHECKPOINTS = "checkpoints"
    EVAL = "eval"
    TENSORBOARD = "tb"
    LOCK = ".lock"
    # What a finished run is without its weights: enough for a grid to count it as finished and for a report to
    # read its curve and result (issue 32: grids filled in pieces on several machines, their runs committed).
    # The summary last, so that a reader who finds it finished finds the rest there too.
    SMALL_FILES = (CONFIG, DATA, METRICS, SUMMARY)
    LOG = "train.log"  # the grid's log of the run (experiments/grid.py keeps it in OUT/logs/NAME.log)
    MACHINE = "cpu.txt"  # the machine it trained on (device.machine_text: lscpu), beside the summary's CPU name

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    # -------------------------------------------------------------------------------------------- paths

    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def tokenizer_path(self) -> Path:
        return self.path / self.TOKENIZER

    @property
    def metrics_path(self) -> Path:
        return self.path / self.METRICS

    @property
    def summary_path(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def tensorboard(self) -> Path:
        return self.path / self.TENSORBOARD

    def is_run(self) -> bool:
        """Whether a run was started here (its config.yaml exists)."""
        return self.config_path.is_file()

    def is_empty(self) -> bool:
        """Missing, or holding nothing but a stale lock file."""
        if not self.path.exists():
            return True
        return all(p.name == self.LOCK for p in self.path.iterdir())

    def check_new(self) -> None:
        """A one-line error unless a new run may start here."""
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"--out {self.path}: exists and is not a directory")
        if not self.is_empty():
            raise ConfigError(f"{self.path} already holds a run; pass --resume to continue it or choose another --out")

    def copy_small_files(self, dest: str | Path, *, log: Path | None = None, machine: str | None = None) -> RunDir:
        """Copy this run's :attr:`SMALL_FILES` (those it has) into ``dest``, with ``log`` as :attr:`LOG` when given,
        and as :attr:`MACHINE` ``machine`` when given, else this run's own (a copy's that came with it); no
        tokenizer, TensorBoard or checkpoint. Each file is written atomically and the summary last. Returns the
        copy."""
        out = RunDir(dest)
        out.path.mkdir(parents=True, exist_ok=True)
        if log is not None and log.is_file():
            out.write_file(self.LOG, log.read_bytes())
        else:  # an earlier partial copy's must not pass for this run's
            (out / self.LOG).unlink(missing_ok=True)
        if machine is None and (self.path / self.MACHINE).is_file():
            machine = (self.path / self.MACHINE).read_text(encoding="utf-8")
        if machine:
            out.write_file(self.MACHINE, machine.encode("utf-8"))
        else:
            (out / self.MACHINE).unlink(missing_ok=True)
        for name in self.SMALL_FILES:
            if (self.path / name).is_file():
                out.write_file(name, (self.path / name).read_bytes())
        return out

    # ----------------------------------------------------------------------------------------- config

    def read_config(self) -> TrainConfig:
        """The run's configuration; a one-line error for a directory that is not a run or a damaged config."""
        if self.path.exists() and not self.path.is_dir():
            raise ConfigError(f"{self.path}: not a run directory (a file)")
        if not self.is_run():
            raise ConfigError(f"{self.path}: not a run directory (no {self.CONFIG})")
        try:
            data = load_yaml(self.config_path.read_text(encoding="utf-8"))
        except ConfigError as e:
            raise ConfigError(f"{self.config_path}: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{self.config_path}: damaged (expected a mapping, got {type(data).__name__})")
        return TrainConfig.from_dict(data)

    def read_config_dict(self) -> dict[str, Any] | None:
        """The saved configuration as a plain dict (for ``--resume`` with ``--set``), or None."""
        if not self.is_run():
            return None
        data = load_yaml(self.config_path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ConfigError(f"{self.config_path}: damaged (expected a mapping, got {type(data).__name__})")
        return data

    def write_config(self, cfg: TrainConfig) -> None:
        import yaml

        write_atomic(self.config_path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))

    def write_file(self, name: str, content: bytes) -> None:
        write_atomic(self.path / name, content)

    def data_record(self) -> dict[str, Any] | None:
        """data.json: ``{"files": {key: sha256}, "tokenizer": sha256}`` (:func:`normlab.data.fingerprint`), or
        None for a run that has none (one started before issue 36, or killed before it wrote anything)."""
        try:
            data = json.loads((self.path / self.DATA).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ConfigError(f"{self.path / self.DATA}: damaged ({e})") from None
        if not (isinstance(data, dict) and isinstance(data.get("files"), dict) and isinstance(data.get("tokenizer"), str)):
            raise ConfigError(f"{self.path / self.DATA}: damaged (expected files and tokenizer)")
        return data

    def write_data_record(self, files: dict[str, str], tokenizer: bytes) -> None:
        import hashlib

        write_json_atomic(self.path / self.DATA, {"files": files, "tokenizer": hashlib.sha256(tokenizer).hexdigest()})

    def eval_file(self, what: str, checkpoint: Path, suffix: str = ".json") -> Path:
        """Where ``normlab evaluate`` writes its score of ``what`` (a split, or ``own-NAME-HASH`` for a user's file)
        with ``checkpoint`` (its directory, or an average's name): ``eval/<what>-<checkpoint name><suffix>``."""
        return self.path / self.EVAL / f"{what}-{checkpoint.name}{suffix}"

    def write_eval_lines(self, what: str, checkpoint: Path, suffix: str, outputs: Sequence[str],
                         rows: Sequence[int] | None, data_rows: int | None) -> dict[str, Any]:
        """Write ``outputs`` (a .hyp's translations, a .pred's labels), one per line, into :meth:`eval_file`, on
        the rows of the file they were scored from: ``rows[i]`` is output i's data row (0-based: a raw file's
        line, a TSV's row after its header), and a row not scored (an empty pair, one longer than max_positions)
        gets an empty line. So line k of the .pred is data row k's prediction, and beside the user's file (a TSV's
        rows after its header: its line k + 1) it stays in line with it (a new user found every prediction after a
        dropped row one row off). ``data_rows``: the file's data rows, when every example kept was scored (the lines
        then cover the whole file); None when only the first ones were (``--limit``: up to the last row scored).
        ``rows`` None: the outputs as they are. Returns the file, its lines and the 1-based numbers of the rows not
        scored among them."""
        path = self.eval_file(what, checkpoint, suffix)
        if rows is None:
            write_atomic(path, "".join(f"{o}\n" for o in outputs))
            return {"file": str(path), "lines": len(outputs), "rows_not_scored": []}
        rows = [int(r) for r in rows[: len(outputs)]]
        if len(rows) < len(outputs) or any(b <= a for a, b in zip(rows, rows[1:])) or (rows and rows[0] < 0):
            raise ValueError(f"one increasing row per output needed: {len(outputs)} outputs, rows {rows[:5]}...")
        n = data_rows if data_rows is not None else (rows[-1] + 1 if rows else 0)
        if rows and rows[-1] >= n:
            raise ValueError(f"row {rows[-1]} is beyond the file's {n} data rows")
        lines = [""] * n
        for r, o in zip(rows, outputs):
            lines[r] = o
        write_atomic(path, "".join(f"{line}\n" for line in lines))
        scored = set(rows)
        return {"file": str(path), "lines": n, "rows_not_scored": [k + 1 for k in range(n) if k not in scored]}

    def tokenizer(self) -> Tokenizer:
        """The run's tokenizer: its own copy, or the file its config names (``data.tokenizer``: a fine-tuning grid's
        runs share the pre-training one, ``normlab finetune --out``'s tokenizer.model, and keep no copy)."""
        if self.tokenizer_path.is_file():
            return Tokenizer.load(self.tokenizer_path)
        cfg = self.read_config() if self.config_path.is_file() else None
        named = cfg.data.tokenizer if cfg is not None else ""
        if named.endswith(".model"):  # a file (prepare's rule), not a corpus whose tokenizer the cache holds
            # a relative name is relative to where the grid ran (`normlab finetune --out ft` writes
            # ft/tokenizer.model): a directory holding the run first (the grid's own), then the current one; a
            # file whose vocabulary is not the model's is another experiment's, never used (a review found a stray
            # ft/tokenizer.model in the current directory would have won)
            where = [Path(named)] if Path(named).is_absolute() else [
                *(up / named for up in self.path.resolve().parents), Path.cwd() / named]  # fmt: skip
            for p in where:
                if p.is_file() and (tok := Tokenizer.load(p)).vocab_size == cfg.model.vocab_size:  # type: ignore[union-attr]
                    return tok
        raise ConfigError(f"{self.path}: no {self.TOKENIZER}" + (
            f", and its data.tokenizer {named} is not found (from here or a directory holding the run)" if named
            else " (runs trained by normlab train have one)"))  # fmt: skip

    # ---------------------------------------------------------------------------------- status, summary

    def summary(self) -> dict[str, Any]:
        """summary.json, or {} when there is none (or it cannot be read)."""
        try:
            data = json.loads(self.summary_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def status(self) -> str | None:
        """``running`` (in progress, or killed), ``completed``, ``diverged``, ``interrupted`` (stopped by Ctrl-C at
        an update boundary, with a checkpoint: ``--resume`` continues it), ``failed`` (stopped by an error, named in
        the summary's ``error``; ``--resume`` continues from the last checkpoint), or None (no summary).

        A full disk is ``failed`` too, though nothing is lost and ``--resume`` continues once there is room:
        ``running`` would say that a process still trains it, which is what a grid or a reader of the status asks;
        whether a run can be resumed is a question of its checkpoints, which every status but ``completed`` and a
        ``diverged`` under the same configuration answers the same way."""
        return self.summary().get("status")

    def finished(self) -> bool:
        return self.status() in FINISHED

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json_atomic(self.summary_path, summary)

    # ---------------------------------------------------------------------------------------- metrics

    def metrics(self, kind: str | None = None) -> list[dict[str, Any]]:
        """The records of metrics.jsonl (those of ``kind``, "train" or "valid", when given); a last line cut
        by a kill is skipped."""
        recs = read_jsonl(self.metrics_path)
        return recs if kind is None else [r for r in recs if r.get("type") == kind]

    def last_metric(self, kind: str = "train") -> dict[str, Any] | None:
        """The last record of ``kind`` in metrics.jsonl, read from the file's end (files.last_jsonl): what a grid
        shows of a run in progress, every second, without reading the whole file."""
        return last_jsonl(self.metrics_path, kind)

    def truncate_metrics(self, update: int, valid: bool = True) -> None:
        """Keep the records up to ``update`` (a resume forgets what the killed run logged after its checkpoint:
        it is about to be done again); ``valid=False``: not the validation at ``update`` either; atomic."""
        if not self.metrics_path.exists():
            return
        kept = [r for r in self.metrics() if isinstance(r.get("update"), int)
                and (r["update"] < update or (r["update"] == update and (valid or r.get("type") != "valid")))]
        write_atomic(self.metrics_path, "".join(json_line(r) + "\n" for r in kept))

    @contextlib.contextmanager
    def metrics_writer(self) -> Iterator[Any]:
        """An append-only writer of records: ``write(record)`` writes one strict-JSON line and flushes it."""
        f = open(self.metrics_path, "a", encoding="utf-8")

        class _Writer:
            def write(self, record: dict[str, Any]) -> None:
                f.write(json_line(record) + "\n")
                f.flush()

        try:
            yield _Writer()
        finally:
            f.close()

    # ------------------------------------------------------------------------------------- write errors

    def unwritable(self, e: OSError) -> RunDirUnwritable | None:
        """The one-line error for an ``OSError`` met while writing this run (a full or read-only disk), or None
        for any other error. Every file is written atomically and a checkpoint appears whole or not at all, so
        a failed write loses nothing: the line says what ``--resume`` continues from once the disk is writable."""
        what = _UNWRITABLE.get(e.errno or 0)
        if what is None:
            return None
        target = e.filename2 or e.filename  # a copy names its source first and the file it writes second
        where = f": {target}" if target else ""
        if not self.is_run():
            return RunDirUnwritable(f"--out {self.path}: {what}{where}; nothing was written")
        last = self.latest()
        start = f"its checkpoint {last.name}" if last is not None else "its start"
        return RunDirUnwritable(f"--out {self.path}: {what}{where}; nothing is lost: once there is room, --resume "
                                f"continues from {start}")  # fmt: skip

    # ------------------------------------------------------------------------------------------- lock

    def holder(self) -> int | None:
        """The pid of the process that holds this run's lock, or None when nobody does."""
        import fcntl

        lock = self.path / self.LOCK
        try:
            fd = os.open(str(lock), os.O_RDONLY)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                text = lock.read_text(encoding="utf-8", errors="replace").strip()
                return int(text) if text.isdigit() else -1
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def check_unlocked(self) -> None:
        pid = self.holder()
        if pid is not None:
            raise RunLocked(f"{self.path} is in use by another trainer (pid {pid if pid >= 0 else 'unknown'}); "
                            "wait for it to end or choose another --out")  # fmt: skip

    def lock(self) -> _Lock:
        """Take the run's lock (creating the directory), or raise :class:`RunLocked` naming the holder's pid.
        The lock is an ``flock``: the kernel releases it when the process ends, even by SIGKILL."""
        import fcntl

        self.path.mkdir(parents=True, exist_ok=True)
        lock = self.path / self.LOCK
        fd = os.open(str(lock), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            self.check_unlocked()
            raise RunLocked(f"{self.path} is in use by another trainer") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        os.fsync(fd)
        return _Lock(fd)

    # ------------------------------------------------------------------------------------ checkpoints

    def list_checkpoints(self) -> list[Path]:
        """Complete ``update_*`` checkpoints, oldest first."""
        return list_checkpoints(self.checkpoints)

    def latest(self) -> Path | None:
        found = self.list_checkpoints()
        return found[-1] if found else None

    def resolve_average(self, which: str) -> list[Path] | None:
        """``avg:N``: the last N ``update_*`` checkpoints, oldest first (their weights are averaged:
        checkpoint.average_weights); None for any other name. A one-line error when the run kept fewer."""
        m = CHECKPOINT_AVERAGE.fullmatch(str(which))
        if m is None:
            return None
        n, found = int(m[1]), self.list_checkpoints()
        if n < 2:
            raise CheckpointError(f"{which}: averaging needs at least 2 checkpoints (avg:N with N >= 2)")
        if len(found) < n:
            raise CheckpointError(f"{self.path}: {which} needs {n} checkpoints, the run kept {len(found)} (train with "
                                  f"--set keep_last={n} or more, a checkpoint every save_every updates)")  # fmt: skip
        self._check_last_saves(which, n, [update_of(p) for p in found])
        return found[-n:]

    def _check_last_saves(self, which: str, n: int, kept: list[int]) -> None:
        """Refuse ``avg:N`` when its N checkpoints reach into the run's keep_every snapshots. checkpoint.rotate keeps
        the last keep_last saves and, older than those, the saves at multiples of keep_every: every checkpoint that
        is not such a multiple lies in that unbroken tail, and so does everything after it. Only multiples older
        than the tail's first non-multiple can be snapshots; they are taken as the run's own saves while they are
        no further apart than the tail's saves (x1.5: epochs differ a little in length), or, for a tail of one, than
        the configured interval (every epoch, save_every). A run without keep_every has no snapshots: its kept
        checkpoints are its last saves, whatever a resume changed."""
        cfg = self.read_config_dict() or {}
        keep_every = int(cfg.get("keep_every") or 0)
        if not keep_every:
            return
        first_tail = next((i for i, u in enumerate(kept) if u % keep_every), len(kept))
        tail = kept[first_tail:]
        gaps = [b - a for a, b in zip(tail, tail[1:])]
        if gaps:
            step = max(gaps)
        else:
            per_epoch = self.summary().get("updates_per_epoch")
            known = [int(x) for x in (cfg.get("save_every"), per_epoch) if x and int(x) > 0]
            if not known:
                return  # nothing to measure the spacing against
            step = min(known)
        span = kept[len(kept) - n : first_tail] + tail[:1]  # the chosen ones older than the tail, then its first
        wide = [(a, b) for a, b in zip(span, span[1:]) if b - a > 1.5 * step]
        if wide:
            a, b = wide[-1]
            raise CheckpointError(f"{self.path}: {which} would average checkpoints {b - a} updates apart (updates "
                                  f"{a} and {b}), where the run's last saves are {step} apart: update {a} and older "
                                  f"are keep_every snapshots (every {keep_every} updates), not its last saves; name "
                                  f"avg:{sum(u > a for u in kept[-n:])} or less, or train with --set "
                                  f"keep_last={n}")  # fmt: skip

    def resolve(self, which: str | int = "best") -> Path:
        """``best``, ``last``, or an update number; a one-line error otherwise (``avg:N``: :meth:`resolve_average`)."""
        ckpts = self.checkpoints
        which = str(which)
        if CHECKPOINT_AVERAGE.fullmatch(which):
            raise CheckpointError(f"{which}: an average of checkpoints is for evaluate, translate, generate and a "
                                  "language model's export-hf; name one checkpoint here (best, last or an update "
                                  "number)")  # fmt: skip
        if which == "best":
            if (ckpts / "best" / STATE).exists():
                return ckpts / "best"
            which = "last"  # a run without a validation score yet: its last checkpoint is its best
        if which == "last":
            last = self.latest()
            if last is None:
                raise CheckpointError(f"{self.path}: no checkpoint found (looked in {ckpts})")
            return last
        if which.isdigit():
            path = ckpts / f"update_{int(which):08d}"
            if not (path / STATE).exists():
                have = ", ".join(str(update_of(p)) for p in self.list_checkpoints())
                raise CheckpointError(f"{self.path}: no checkpoint at update {which} (have: {have or 'none'})")
            return path
        raise CheckpointError(f"checkpoint must be 'best', 'last', an update number or avg:N, got {which!r}")

    @staticmethod
    def of_checkpoint(checkpoint: str | Path) -> RunDir | None:
        """The run a checkpoint directory belongs to (``RUN/checkpoints/NAME``), or None."""
        checkpoint = Path(checkpoint)
        if checkpoint.parent.name == RunDir.CHECKPOINTS:
            return RunDir(checkpoint.parent.parent)
        return None

    # ---------------------------------------------------------------------------------------- loading

    def load_model(
        self, task: str | None = None, which: str = "best", device: str | torch.device = "auto"
    ) -> tuple[nn.Module, TrainConfig, Path]:
        """The run's model with the weights of checkpoint ``which``, in eval mode, its configuration and the
        checkpoint's path. ``task``: refuse (one line) a run of another task. ``avg:N``: the mean of the last N
        checkpoints' weights; the path returned names them (``checkpoints/avg5-update_00001000-00003000``, not a
        directory), so that what is written from it (evaluate's files) says which."""
        cfg = self.read_config()
        if task is not None and cfg.data.task != task:
            raise ConfigError(f"{self.path}: a {cfg.data.task} run, not a {task} run")
        average = self.resolve_average(which)
        path = self.resolve(which) if average is None else None
        dev = device if not isinstance(device, str) else pick_device(device)
        model = build_model(cfg.model, cfg.data.task).to(dev)
        if average is None:
            load_checkpoint(path, model, device=dev)
        else:
            load_average(average, model, device=dev)
            span = f"{average[0].name}-{average[-1].name.removeprefix('update_')}"
            path = self.checkpoints / f"avg{len(average)}-{span}"
        return model.eval(), cfg, path
