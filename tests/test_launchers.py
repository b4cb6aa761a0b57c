"""The grid's launchers (issue 39): a smoke-size grid through a local Ray cluster of 2 workers, submitit's local
executor and, where Debian's slurm-wlm is installed, a private single-node SLURM cluster gives the same run
folders and the same losses and weights, bit for bit, as the local launcher; a resumed grid submits only the
runs that have not finished; Ctrl-C cancels what was submitted; a missing engine is one line naming the extra.

The grid: a BERT pre-training run and a fine-tuning run of its last checkpoint (the dependency order), a
pre-training run that fails (a missing corpus: reported with its own line) and the fine-tuning run of it, which
is skipped. Masked-LM runs of the smoke scale train in about a second; what the remote launchers cost here is
their processes' start (a Python that imports torch: each submitit job is one), so the grid has two waves."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import require_reference
from normlab.config import ConfigError
from normlab.experiments.figures import Context, RunSpec, fig5_bert, fig5_finetune
from normlab.experiments.grid import run_grid
from normlab.experiments.launchers import (
    LauncherConfig,
    launcher_from_args,
    restore_signal_handlers,
    signal_handlers,
)
from normlab.experiments.scales import get_scale
from normlab.rundir import RunDir

TIMING = {"seconds", "tokens_per_s", "elapsed_s", "wall_s", "attention_ms"}  # what differs from one machine state to the next
PARENT, CHILD, BROKEN = "bert-post-1e-4", "ft-bert-post-1e-4-u6-wic-s1", "bert-broken"


def grid_specs(missing_corpus: Path) -> list[RunSpec]:
    smoke = get_scale("smoke")
    ctx = Context(translation_updates_per_epoch=9, finetune_updates_per_epoch={"paraphrase": 4, "wic": 4})
    bert = fig5_bert(smoke, ctx)[0]
    broken = dataclasses.replace(bert, name=BROKEN, config=bert.config.replace(
        data=bert.config.data.replace(corpus=str(missing_corpus))))  # fmt: skip
    specs = [bert, broken] + [s for s in fig5_finetune(smoke, ctx, [bert, broken]) if s.name.endswith("-u6-wic-s1")]
    # one attention kernel: `auto` times the kernels at the start of a run and keeps the fastest, which on a
    # loaded machine may differ from launcher to launcher (the kernels differ in rounding)
    return [dataclasses.replace(s, config=s.config.replace(attention="sdpa-fp32")) for s in specs]


def run_files(out: Path) -> list[str]:
    """The files of the run folders (a TensorBoard file's name carries its time and pid)."""
    runs = out / "runs"
    return sorted(re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents", str(p.relative_to(runs)))
                  for p in runs.rglob("*") if p.is_file())  # fmt: skip


def assert_same_runs(out: Path, ref: Path) -> None:
    """The same run folders; per finished run the same metrics records (the losses, bit for bit), summary and
    final weights."""
    from safetensors.torch import load_file

    assert run_files(out) == run_files(ref)
    for name in (PARENT, CHILD):
        mine, theirs = RunDir(out / "runs" / name), RunDir(ref / "runs" / name)
        a = [{k: v for k, v in r.items() if k not in TIMING} for r in mine.metrics()]
        b = [{k: v for k, v in r.items() if k not in TIMING} for r in theirs.metrics()]
        assert len(a) == len(b) and [r.get("type") for r in a] == [r.get("type") for r in b]
        losses = [[r[k] for r in rs if k in r] for rs in (a, b) for k in ("loss", "nll")]
        torch.testing.assert_close(torch.tensor(losses[0] + losses[1], dtype=torch.float64),
                                   torch.tensor(losses[2] + losses[3], dtype=torch.float64), rtol=0, atol=0)
        assert a == b
        sa = {k: v for k, v in mine.summary().items() if k not in TIMING}
        sb = {k: v for k, v in theirs.summary().items() if k not in TIMING}
        assert sa == sb and sa["status"] == "completed"
        wa, wb = (load_file(str(rd.latest() / "model.safetensors")) for rd in (mine, theirs))
        assert wa.keys() == wb.keys()
        for key in wa:
            torch.testing.assert_close(wa[key], wb[key], rtol=0, atol=0, msg=lambda m, key=key: f"{key}: {m}")


def assert_outcomes(outcomes: dict, out: Path) -> None:
    assert outcomes[PARENT].status == "completed" and outcomes[CHILD].status == "completed", outcomes
    broken = outcomes[BROKEN]
    # reported with the run's own line from its log, as the local launcher reports it
    assert broken.status == "failed" and "normlab train: error: " in broken.error, broken
    assert "no-such-corpus" in broken.error and "\n" not in broken.error
    assert outcomes["ft-bert-broken-u6-wic-s1"].status == "skipped"  # never submitted: its parent failed
    assert not (out / "runs" / "ft-bert-broken-u6-wic-s1").exists()


def submissions(out: Path, name: str) -> int:
    """How often the grid submitted a run: each submission opens its log with a ``=== time start ===`` line."""
    log = out / "logs" / f"{name}.log"
    return sum(1 for line in log.read_text().splitlines() if line.startswith("=== ")) if log.exists() else 0


@pytest.fixture(scope="module")
def missing(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("absent") / "no-such-corpus"


@pytest.fixture(scope="module")
def local_grid(tmp_path_factory, missing) -> Path:
    out = tmp_path_factory.mktemp("local")
    outcomes = run_grid(grid_specs(missing), out, jobs=2, threads=1, say=lambda line: None)
    assert_outcomes(outcomes, out)
    return out


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster of 2 workers (2 CPUs, each run requests 1); the launcher joins it."""
    ray = require_reference("ray", "pip install 'normlab[ray]' (make test installs it)")
    handlers = signal_handlers()  # ray.init installs a SIGTERM handler that ray.shutdown() leaves behind
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()
    restore_signal_handlers(handlers)


@pytest.fixture(scope="module")
def ray_grid(tmp_path_factory, ray_cluster, missing) -> Path:
    out = tmp_path_factory.mktemp("ray")
    outcomes = run_grid(grid_specs(missing), out, jobs=0, threads=1, launcher="ray", say=lambda line: None)
    assert_outcomes(outcomes, out)
    return out


@pytest.mark.slow
def test_ray_gives_the_local_runs_bit_for_bit(ray_grid, local_grid):
    assert_same_runs(ray_grid, local_grid)


@pytest.mark.slow
def test_a_resumed_grid_submits_only_the_unfinished_runs(ray_grid, local_grid, missing, tmp_path):
    out = tmp_path / "grid"
    shutil.copytree(ray_grid, out)
    shutil.rmtree(out / "runs" / CHILD)  # as if the grid had been stopped before it
    lines: list[str] = []
    outcomes = run_grid(grid_specs(missing), out, jobs=0, threads=1, launcher="ray", say=lines.append)
    assert outcomes[PARENT].status == "cached" and outcomes[CHILD].status == "completed"
    assert outcomes[BROKEN].status == "failed"  # a failed run has not finished: it is tried again
    assert {n: submissions(out, n) for n in (PARENT, CHILD, BROKEN)} == {PARENT: 1, CHILD: 2, BROKEN: 2}
    assert lines[0] == f"grid: 1 of 4 runs already finished in {out}; 3 to run"
    assert_same_runs(out, local_grid)


def endless(spec: RunSpec, name: str) -> RunSpec:
    """``spec`` as a run that cannot end by itself while the test looks at it: a million updates at a constant
    rate (the smoke model trains ~100 a second). A run that ended before the simulated Ctrl-C, as the failing
    pre-training run of ``grid_specs`` does within seconds on idle cores, would leave nothing to cancel."""
    config = spec.config.replace(max_updates=1_000_000, keep_every=0,  # a lost cancel does not fill the disk
                                 schedule=spec.config.schedule.replace(decay="constant"))  # fmt: skip
    return dataclasses.replace(spec, name=name, config=config)


def endless_ray_grid(bert: RunSpec, out: Path, monkeypatch) -> tuple[list, list[str]]:
    """Two endless runs through the Ray launcher, interrupted by a Ctrl-C once both are submitted: the task refs
    and the grid's lines."""
    from normlab.experiments import launchers

    refs = []
    submit = launchers.RayLauncher.submit
    monkeypatch.setattr(launchers.RayLauncher, "submit", lambda self, task: refs.append(submit(self, task)) or refs[-1])
    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if "start" in line and "bert-endless-2" in line:  # both runs submitted: the user presses Ctrl-C
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_grid([endless(bert, "bert-endless-1"), endless(bert, "bert-endless-2")], out, jobs=0, threads=1,
                 launcher="ray", say=say)  # fmt: skip
    return refs, lines


@pytest.mark.slow
def test_ctrl_c_cancels_the_submitted_ray_tasks(ray_cluster, missing, tmp_path, monkeypatch):
    from ray.exceptions import TaskCancelledError, WorkerCrashedError

    refs, lines = endless_ray_grid(grid_specs(missing)[0], tmp_path / "grid", monkeypatch)
    try:
        assert len(refs) == 2 and lines[-1].startswith("grid: interrupted; cancelled 2 submitted run(s)"), lines
        for ref in refs:  # the engine says the task was cancelled or its worker killed: it ended, not by itself
            with pytest.raises((TaskCancelledError, WorkerCrashedError)):  # a lost cancel: GetTimeoutError
                ray_cluster.get(ref, timeout=60)
    finally:  # a failure leaves no endless task to starve the module's later tests
        for ref in refs:
            ray_cluster.cancel(ref, force=True)


@pytest.mark.slow
def test_a_cancel_that_does_not_take_is_named(ray_cluster, missing, tmp_path, monkeypatch):
    """Ray may lose a cancel (ray-project/ray#24359); the launcher sends it again until the task ends, and names
    the runs it could not stop rather than saying they were cancelled. Here every cancel is lost."""
    from normlab.experiments import launchers

    monkeypatch.setattr(launchers.RayLauncher, "CANCEL_WAIT_S", 2.0)
    monkeypatch.setattr(ray_cluster, "cancel", lambda ref, force=False: None)
    refs, lines = endless_ray_grid(grid_specs(missing)[0], tmp_path / "grid", monkeypatch)
    monkeypatch.undo()
    try:
        assert lines[-1] == ("grid: 2 cancelled run(s) had not stopped when the grid stopped waiting and may still "
                             "run on the cluster: bert-endless-1, bert-endless-2"), lines  # fmt: skip
        assert ray_cluster.wait(refs, num_returns=2, timeout=0)[1] == refs  # they do run on
    finally:
        for ref in refs:
            ray_cluster.cancel(ref, force=True)


def slurm_launcher(executor: str) -> LauncherConfig:
    return LauncherConfig(kind="slurm", slurm_executor=executor, slurm_time_minutes=10)


@pytest.mark.slow
def test_submitit_local_gives_the_local_runs_bit_for_bit(local_grid, missing, tmp_path):
    require_reference("submitit", "pip install 'normlab[slurm]' (make test installs it)")
    out = tmp_path / "grid"
    outcomes = run_grid(grid_specs(missing), out, jobs=0, threads=1, launcher=slurm_launcher("local"),
                        say=lambda line: None)  # fmt: skip
    assert_outcomes(outcomes, out)
    assert_same_runs(out, local_grid)
    assert len(list((out / "launcher" / "slurm").glob("*_submitted.pkl"))) == 3  # one job per run that ran


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """The single-node cluster of tests/slurm_cluster.py; skipped where slurm-wlm is not installed (a failure
    under NORMLAB_REQUIRE_SLURM=1, which .ci/run sets when it installed it)."""
    import slurm_cluster

    try:
        env, procs = slurm_cluster.start(tmp_path_factory.mktemp("slurm"))
    except slurm_cluster.Unavailable as e:
        if os.environ.get("NORMLAB_REQUIRE_SLURM") == "1":
            pytest.fail(f"NORMLAB_REQUIRE_SLURM=1: {e}", pytrace=False)
        pytest.skip(f"no single-node SLURM here: {e}")
    yield env
    slurm_cluster.stop(procs)


@pytest.mark.slow
def test_slurm_gives_the_local_runs_bit_for_bit(slurm_cluster, local_grid, missing, tmp_path, monkeypatch):
    require_reference("submitit", "pip install 'normlab[slurm]' (make test installs it)")
    for k, v in slurm_cluster.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "grid"
    outcomes = run_grid(grid_specs(missing), out, jobs=0, threads=1, launcher=slurm_launcher("slurm"),
                        say=lambda line: None)  # fmt: skip
    assert_outcomes(outcomes, out)
    assert_same_runs(out, local_grid)


@pytest.mark.slow
def test_ctrl_c_cancels_the_submitted_submitit_jobs(missing, tmp_path, monkeypatch):
    require_reference("submitit", "pip install 'normlab[slurm]' (make test installs it)")
    from normlab.experiments import launchers

    jobs = []
    submit = launchers.SlurmLauncher.submit
    monkeypatch.setattr(launchers.SlurmLauncher, "submit", lambda self, task: jobs.append(submit(self, task))
                        or jobs[-1])  # fmt: skip

    def say(line: str) -> None:
        if "start" in line and "bert-endless-2" in line:
            raise KeyboardInterrupt

    bert = grid_specs(missing)[0]
    with pytest.raises(KeyboardInterrupt):  # jobs=2: both in flight whatever the machine's core count
        run_grid([endless(bert, "bert-endless-1"), endless(bert, "bert-endless-2")], tmp_path / "grid", jobs=2,
                 threads=1, launcher=slurm_launcher("local"), say=say)  # fmt: skip
    assert len(jobs) == 2
    # submitit's local executor cancels with SIGINT (scancel sends SIGTERM) to its controller, which stops its
    # task (a SIGKILL after about a second): runs that cannot end by themselves have ended only if the cancel
    # reached them
    deadline = time.monotonic() + 60
    while not all(job.done() for job in jobs) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(job.done() for job in jobs), [job.state for job in jobs]


# ---------------------------------------------------------------------------------------------------------
# Without the engines, and the settings


@pytest.mark.parametrize("command,kind,extra", [("sweep", "ray", "normlab[ray]"),
                                                ("reproduce", "slurm", "normlab[slurm]")])  # fmt: skip
def test_a_missing_engine_is_one_line_naming_the_extra(command, kind, extra, tmp_path, monkeypatch, capsys):
    from normlab.cli import main

    monkeypatch.setitem(sys.modules, {"ray": "ray", "slurm": "submitit"}[kind], None)  # import fails
    out = tmp_path / "out"
    assert main([command, "--scale", "smoke", "--launcher", kind, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"normlab {command}: error: --launcher {kind} needs "
                                        f"{'ray' if kind == 'ray' else 'submitit'}: pip install '{extra}'"]
    assert not out.exists()  # refused before anything was prepared or written


def test_the_launcher_settings_from_a_file_and_the_command_line(tmp_path):
    import argparse

    from normlab.experiments.launchers import add_launcher_arguments

    p = argparse.ArgumentParser()
    add_launcher_arguments(p)
    (tmp_path / "cluster.yaml").write_text("launcher:\n  kind: slurm\n  slurm_partition: gpu\n  gpus_per_run: 1\n"
                                           "  slurm_setup: ['module load cuda']\n")  # fmt: skip
    cfg = launcher_from_args(p.parse_args(["--launcher-config", str(tmp_path / "cluster.yaml"), "--slurm-time", "30"]))
    assert cfg == LauncherConfig(kind="slurm", slurm_partition="gpu", gpus_per_run=1, slurm_time_minutes=30,
                                 slurm_setup=("module load cuda",))  # fmt: skip
    # the command line wins over the file
    assert launcher_from_args(p.parse_args(["--launcher-config", str(tmp_path / "cluster.yaml"), "--launcher",
                                            "ray"])).kind == "ray"  # fmt: skip
    assert launcher_from_args(p.parse_args([])) == LauncherConfig()
    (tmp_path / "typo.yaml").write_text("launcher:\n  slurm_partiton: gpu\n")
    with pytest.raises(ConfigError, match="unknown key 'slurm_partiton'; did you mean 'slurm_partition'"):
        launcher_from_args(p.parse_args(["--launcher-config", str(tmp_path / "typo.yaml")]))
    with pytest.raises(ConfigError, match="nproc: more than one process per run needs"):
        LauncherConfig(kind="local", nproc=2)
    with pytest.raises(ConfigError, match="slurm_options: expected KEY=VALUE"):
        LauncherConfig(kind="slurm", slurm_options=("exclusive",))



def _native_writer(text: str) -> int:
    """A task that writes below Python, on file descriptors 1 and 2, as torch's C++ warnings do."""
    print(f"{text}: python")
    os.write(1, f"{text}: fd 1\n".encode())
    os.write(2, f"{text}: fd 2\n".encode())
    return 0


def test_a_task_writes_its_native_output_into_its_log_not_the_grid_terminal(tmp_path, capfd):
    """run_task puts file descriptors 1 and 2, not only sys.stdout/stderr, into the run's log for the task, and
    back after it: a library's C-level warning would otherwise land in the grid's terminal and garble its live
    display (normlab.experiments.progress)."""
    from normlab.experiments.launchers import Task, run_task

    log = tmp_path / "run.log"
    assert run_task(Task(name="t", fn=_native_writer, kwargs={"text": "native"}, log=log), threads=1) == 0
    os.write(2, b"after: fd 2\n")
    out, err = capfd.readouterr()
    assert "native" not in out + err and err == "after: fd 2\n", (out, err)
    assert sorted(log.read_text().splitlines()) == ["native: fd 1", "native: fd 2", "native: python"]


def _finish_at_once(config: dict, run_dir: str, resume: bool) -> int:
    """A task that trains nothing: its run is completed as soon as it starts."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    (Path(run_dir) / "summary.json").write_text(json.dumps({"status": "completed"}))
    return 0


def test_more_adds_runs_as_runs_end_ahead_of_the_pending_ones(tmp_path):
    """run_grid's ``more`` hook (the sweep's asynchronous edge search): called before the first start and after
    each run ends; what it returns starts before the runs still pending, a name already in the grid is ignored,
    and a run already finished on disk joins as cached and is passed to ``more`` in turn."""
    smoke = get_scale("smoke")
    base = fig5_bert(smoke, Context(translation_updates_per_epoch=9))[0]

    def spec(name: str) -> RunSpec:
        return dataclasses.replace(base, name=name)

    _finish_at_once({}, str(tmp_path / "runs" / "done-elsewhere"), False)  # finished before the grid
    calls, order = [], []
    follow = {None: ["a2"], "a": ["a2", "b"], "b2": ["done-elsewhere"], "done-elsewhere": ["z"]}

    def more(name):
        calls.append(name)
        return [spec(n) for n in follow.get(name, [])]

    def say(line):
        if " start " in line:
            order.append(line.split()[-1])

    outcomes = run_grid([spec("a"), spec("b2"), spec("c")], tmp_path, jobs=1, threads=1, say=say,
                        task=_finish_at_once, more=more)  # fmt: skip
    # a2 joins before anything starts, ahead of a; after a ends, b (a2 again is ignored) starts before b2, c
    assert order == ["a2", "a", "b", "b2", "z", "c"], order
    assert calls[0] is None and calls.count("a2") == 1 and "done-elsewhere" in calls
    assert outcomes["done-elsewhere"].status == "cached"
    assert {n for n, o in outcomes.items() if o.status == "completed"} == {"a", "a2", "b", "b2", "c", "z"}
