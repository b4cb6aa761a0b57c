"""normlab's own launcher: ``normlab train --nproc-per-node N ...`` starts N ranks on this machine, as ``torchrun
--standalone --nproc_per_node N -m normlab train ...`` does, through torch's launcher API (:class:`LaunchConfig`,
:class:`elastic_launch`: the same elastic agent, rendezvous and worker environment as torchrun), and ends with
one line per fault.

Why not torchrun alone. Under torchrun a rank that fails writes its one line, and then torchrun prints its own
ChildFailedError report: a traceback of torchrun's ``main`` and a table of the failed ranks, some 30 lines, which no
worker can suppress (torchrun's ``@record`` re-raises). Here the launcher catches ChildFailedError and prints the
one line of the rank that failed first, which the rank wrote into its error file (TORCHELASTIC_ERROR_FILE,
:func:`normlab.faults.final_line`) instead of onto stderr, so that N ranks failing alike give one line, not N.

Which rank, which exit code. The *root cause* is the rank that failed first for a reason of its own: a rank that
stopped because another failed (a collective whose peer is gone, the agent's SIGTERM) says so in its error file
and is passed over; among the others the earliest (the microsecond time the rank wrote into its error file; a rank
that wrote none, killed by a signal or ended by a traceback, counts at torchrun's time of its failure). The launcher
exits with the root cause's code, whatever the others' (normlab's codes: 2 a configuration or data error, 3
diverged, 130 interrupted, 143 SIGTERM, 1 any other fault); a rank killed by a signal counts as 130 for SIGINT,
143 for SIGTERM and 1 for any other (SIGKILL from the out-of-memory killer, SIGABRT from NCCL's watchdog), with a
line naming the rank and the signal, as does a rank that ended with a traceback of its own (printed above). If the
run's summary still says ``running`` once every rank has ended (rank 0 killed before it could write ``failed``), the
launcher writes ``failed`` with that line.

Signals. torch's agent starts each rank in a session of its own, so a terminal's Ctrl-C reaches the launcher only;
the agent passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on to every rank and waits for them (torch's
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, 30 s by default, then SIGKILL). On SIGINT the ranks stop at the next update
boundary with a checkpoint (the status ``interrupted``) and the launcher prints rank 0's line, where it stopped and
how to resume, and exits 130; on the others the ranks stop at once (the status ``failed``, what the checkpoints
hold kept) and the launcher exits 128 + the signal's number with a line that says so.

Before any rank starts, the launcher makes the checks ``normlab train`` makes before writing anything (the
configuration, the run directory, NORMLAB_DIST_TIMEOUT): such an error is one line and exit 2, and no rank starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from normlab.faults import LAUNCHED, LAUNCHER_PID
from normlab.rundir import RunDir

__all__ = ["launch", "root_cause", "outcome", "MAX_NPROC"]

MAX_NPROC = 1024  # more ranks than any one machine holds: a typo, refused before a process starts

EXIT_FAULT = 1
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def root_cause(failures: dict[int, Any]) -> tuple[int, Any]:
    """The rank that failed first for a reason of its own, and its failure (torch's ProcessFailure), from
    ChildFailedError's ``failures`` (global rank -> ProcessFailure); the rule of the module docstring."""
    def key(item: tuple[int, Any]) -> tuple[bool, float, int]:
        rank, failure = item
        ours = _record(failure)
        peer = bool(ours and ours.get("peer"))
        # torch stamps a failure it found without normlab's record with int(time.time()) when the agent noticed it,
        # truncated to the second: at its second's end it cannot sort before a rank's own, precise, record
        when = float(ours["time"]) if ours and "time" in ours else float(failure.timestamp) + 1.0
        return peer, when, rank

    return min(failures.items(), key=key)


def _record(failure: Any) -> dict[str, Any] | None:
    """What normlab wrote beside torchrun's fields in the rank's error file (normlab.faults.report_to_torchrun)."""
    data = getattr(failure, "error_file_data", None)
    ours = data.get("normlab") if isinstance(data, dict) else None
    return ours if isinstance(ours, dict) else None


def outcome(command: str, rank: int, failure: Any) -> tuple[str, int]:
    """The line to print (empty: the rank said it already) and the exit code for the root cause's failure."""
    ours = _record(failure)
    if ours is not None:
        return str(failure.error_file_data.get("message", "")), int(ours.get("exit", EXIT_FAULT))
    if failure.exitcode < 0:  # killed by a signal: it could say nothing
        number = -failure.exitcode
        code = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}.get(number, EXIT_FAULT)
        hint = " (the out-of-memory killer's signal, or a kill -9)" if number == signal.SIGKILL else ""
        hint = " (NCCL's watchdog ends a rank so, e.g. at a collective's timeout)" if number == signal.SIGABRT else hint
        line = f"normlab {command}: error: rank {rank} (pid {failure.pid}) was killed by {_signal_name(number)}{hint}"
        return line, code
    return (f"normlab {command}: error: rank {rank} (pid {failure.pid}) ended with exit code {failure.exitcode} and "
            "no line of normlab's: its traceback, if any, is above"), EXIT_FAULT  # fmt: skip


@contextlib.contextmanager
def _restored() -> Iterator[None]:
    """Put back what launching changes in this process: the environment (torch's agent sets a variable of its own,
    this module two) and the handlers of the signals the agent takes over, so that a caller in the same process
    (a test, a grid) finds them as they were."""
    env = dict(os.environ)
    handled = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT]
    handlers = {s: signal.getsignal(s) for s in handled}
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(env)
        for s, h in handlers.items():
            if h is not None:
                signal.signal(s, h)


@contextlib.contextmanager
def _quiet_agent() -> Iterator[None]:
    """torch's elastic agent logs each signal it passes on, each worker it stops and each failure (``W... Received 2
    death signal, shutting down workers``, ``E... failed (exitcode: 1)``) at WARNING and ERROR: the launcher says
    what matters in one line. Each of its modules' loggers has a level of its own (torch's ``get_logger`` sets it),
    so each is raised, not only their parent's."""
    name = "torch.distributed.elastic"
    loggers = [logging.getLogger(name)] + [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
                                           if n.startswith(name + ".")]  # fmt: skip
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)


def _ranks_threads(nproc: int) -> str:
    """OMP_NUM_THREADS for each rank when the user set none: the CPUs this process may use, shared out (torchrun
    sets 1, which leaves all but N cores idle when ranks train on the CPU)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return str(max(1, cpus // nproc))


def launch(command: str, argv: list[str], nproc: int, run_dir: str | Path | None = None) -> int:
    """Run ``normlab COMMAND ARGV`` as ``nproc`` ranks on this machine; returns the exit code (module docstring).
    ``run_dir``: the run's directory, whose status the launcher sets to ``failed`` if a rank's death left it
    ``running``."""
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    with _restored(), _quiet_agent(), tempfile.TemporaryDirectory(prefix="normlab-launch-") as logs:
        os.environ[LAUNCHED] = "1"  # the ranks write their last line into their error file, not onto stderr
        os.environ[LAUNCHER_PID] = str(os.getpid())  # a rank dies with the launcher (faults.die_with_parent)
        os.environ.setdefault("OMP_NUM_THREADS", _ranks_threads(nproc))
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=str(uuid.uuid4()),
            rdzv_backend="c10d", rdzv_endpoint="localhost:0",  # torchrun --standalone: a store on a free port
            max_restarts=0,  # a rank that failed fails again from the same checkpoint: --resume is the user's call
            monitor_interval=0.1, start_method="spawn",
            logs_specs=DefaultLogsSpecs(log_dir=logs),  # the ranks' error files; their output goes to ours
        )  # fmt: skip
        try:
            # the launcher's own interpreter flags (-X dev, -W error, -I, ...) hold in its ranks too
            flags = subprocess._args_from_interpreter_flags()  # type: ignore[attr-defined]
            elastic_launch(config, sys.executable)(*flags, "-u", "-m", "normlab", command, *argv)
            return 0
        except ChildFailedError as e:
            rank, failure = root_cause(e.failures)
            line, code = outcome(command, rank, failure)
        except (SignalException, KeyboardInterrupt) as e:
            # the agent stopped the ranks with the signal; a rank that says more than "a peer failed" (SIGINT: where
            # it stopped, with a checkpoint) speaks for all, else the launcher says which signal stopped them
            number = int(e.sigval) if isinstance(e, SignalException) else int(signal.SIGINT)
            said = {r: f for r, f in _error_files(Path(logs)).items() if not (_record(f) or {}).get("peer", True)}
            if said:
                line, code = outcome(command, *root_cause(said))
            else:
                line = (f"normlab {command}: stopped by {_signal_name(number)}; every rank was stopped; a run resumes "
                        "from its last checkpoint with --resume")  # fmt: skip
                code = 128 + number
    if line:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    if run_dir is not None:
        _mark_failed(Path(run_dir), line)
    return code


def _error_files(logs: Path) -> dict[int, Any]:
    """The ranks' error files under the agent's log folder (``RUN_ID/attempt_N/RANK/error.json``, one attempt:
    max_restarts is 0), as failures :func:`root_cause` reads; where the agent raised no ChildFailedError that
    would have read them (a signal to the launcher)."""
    import json
    from types import SimpleNamespace

    out: dict[int, Any] = {}
    for path in logs.glob("*/attempt_*/*/error.json"):
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(path.read_text(encoding="utf-8"))
            out[int(path.parent.name)] = SimpleNamespace(exitcode=int((data.get("normlab") or {}).get("exit", 1)),
                                                         pid=0, timestamp=int(data.get("timestamp", 0)),
                                                         error_file_data=data)  # fmt: skip
    return out


def _mark_failed(run_dir: Path, line: str) -> None:
    """A run whose summary still says ``running`` after every rank ended (rank 0 was killed: SIGKILL, NCCL's
    watchdog) is ``failed``, with the launcher's line as its error: ``running`` would say it still trains."""
    rd = RunDir(run_dir)
    with contextlib.suppress(OSError, ValueError):
        summary = rd.summary()
        # rank 0 stopped because another rank failed (its error says so): the root cause's line says more
        peer = rd.status() == "failed" and "another rank failed" in str(summary.get("error", "")) and bool(line)
        if rd.status() != "running" and not peer:
            return
        error = line.split(": error: ", 1)[-1] if line else "a rank ended without a line"
        rd.write_summary({**summary, "status": "failed", "error": error})
