"""`normlab finetune` on the grid's launchers (issue 39): a tiny fine-tuning grid (1 setting x 2 seeds, 2 epochs,
a test split) run by the in-process loop (:func:`normlab.finetune.finetune`), by the local launcher (worker
processes, the command's default), by a local Ray cluster and by submitit's local executor writes the same run
folders, the same metrics records (losses and accuracies bit for bit), summaries, results and final weights; a
resumed grid submits only the run that has not finished.

The pre-trained model is the bundled bert-tiny-pre shrunk and trained for 2 updates in this process. Every run
trains with one CPU thread (the in-process loop under torch.set_num_threads(1); the local launcher's default is
this process's thread count, the others' 1) and one named attention kernel (``auto`` picks by timing)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from conftest import SMALL_VOCAB, require_reference
from safetensors.torch import load_file

from normlab.cli import main
from normlab.experiments.finetune_grid import finetune_grid
from normlab.experiments.launchers import LauncherConfig, restore_signal_handlers, signal_handlers
from normlab.finetune import FinetuneConfig, finetune
from normlab.rundir import RunDir
from tests.clirun import sets

TIMING = {"seconds", "tokens_per_s", "elapsed_s", "wall_s", "attention_ms"}
SETTING = "bs32-lr0.001-ep2"
SEEDS = ("seed1", "seed2")
SHRINK = ["model.d_model=64", "model.n_heads=2", "model.d_ffn=128", "model.max_positions=128", "model.dropout=0.0",
          "model.attention_dropout=0.0", "data.block_size=64", "data.max_tokens=2048", "save_every=0", "keep_every=0",
          "precision=fp32", "device=cpu"]  # fmt: skip
quiet = lambda line: None


@pytest.fixture(scope="module")
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def pretrained(small_corpora, data_cache, tmp_path_factory, one_thread) -> Path:
    out = tmp_path_factory.mktemp("pretrain") / "bert-tiny-pre"
    code = main(["train", "--config", "bert-tiny-pre", "--out", str(out), "--quiet",
                 *sets(f"data.corpus={small_corpora['mono']}", f"data.cache_dir={data_cache}",
                       f"data.vocab_size={SMALL_VOCAB}", *SHRINK, "max_updates=2",
                       "data.valid_subset=16")])  # fmt: skip
    assert code == 0
    return out


@pytest.fixture(scope="module")
def fc(small_corpora, tmp_path_factory) -> FinetuneConfig:
    """The paraphrase pairs with a test split (the valid pairs again: the test evaluation runs in every task)."""
    task = tmp_path_factory.mktemp("task")
    src = small_corpora["paraphrase"]
    shutil.copy(src / "train.tsv", task / "train.tsv")
    shutil.copy(src / "valid.tsv", task / "valid.tsv")
    shutil.copy(src / "valid.tsv", task / "test.tsv")
    return FinetuneConfig(task=str(task), batch_sizes=(32,), lrs=(1e-3,), epochs=(2,), seeds=2, train_subset=128,
                          valid_subset=64, precision="fp32", device="cpu", attention="sdpa", keep_checkpoints=True)


def run_files(out: Path) -> list[str]:
    runs = out / "runs"
    return sorted(re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents", str(p.relative_to(runs)))
                  for p in runs.rglob("*") if p.is_file())  # fmt: skip


def assert_same_grid(out: Path, ref: Path) -> None:
    """The same run files; per run the same metrics records (losses, accuracies: bit for bit), summary and final
    weights; the same results.json settings and choice."""
    assert run_files(out) == run_files(ref) and len(run_files(ref)) > 4
    for seed in SEEDS:
        mine, theirs = RunDir(out / "runs" / SETTING / seed), RunDir(ref / "runs" / SETTING / seed)
        a = [{k: v for k, v in r.items() if k not in TIMING} for r in mine.metrics()]
        b = [{k: v for k, v in r.items() if k not in TIMING} for r in theirs.metrics()]
        assert a == b and [r["type"] for r in a].count("valid") == 2
        assert all("test_accuracy" in r for r in a if r["type"] == "valid")
        sa = {k: v for k, v in mine.summary().items() if k not in TIMING}
        sb = {k: v for k, v in theirs.summary().items() if k not in TIMING}
        assert sa == sb and sa["status"] == "completed"
        wa, wb = (load_file(str(rd.latest() / "model.safetensors")) for rd in (mine, theirs))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    ra, rb = (json.loads((d / "results.json").read_text()) for d in (out, ref))
    assert ra["settings"] == [dict(s, runs=s["runs"].replace(str(ref), str(out))) for s in rb["settings"]]
    assert ra["chosen"] == rb["chosen"] and ra["majority_baseline"] == rb["majority_baseline"]


def submissions(out: Path, seed: str) -> int:
    log = out / "logs" / SETTING / f"{seed}.log"
    return sum(line.startswith("=== ") for line in log.read_text().splitlines()) if log.exists() else 0


@pytest.fixture(scope="module")
def in_process(pretrained, fc, tmp_path_factory, one_thread) -> Path:
    out = tmp_path_factory.mktemp("inproc") / "ft"
    finetune(pretrained, fc, out, say=quiet)
    return out


@pytest.fixture(scope="module")
def local(pretrained, fc, tmp_path_factory, one_thread) -> Path:
    out = tmp_path_factory.mktemp("local") / "ft"
    results, outcomes = finetune_grid(pretrained, fc, out, say=quiet)  # the defaults: --launcher local, 1 job
    assert results is not None and {o.status for o in outcomes.values()} == {"completed"}
    return out


@pytest.mark.slow
def test_the_local_launcher_gives_the_in_process_loop_bit_for_bit(local, in_process):
    assert_same_grid(local, in_process)
    assert all(submissions(local, s) == 1 for s in SEEDS)


@pytest.mark.slow
def test_ray_gives_the_local_runs_bit_for_bit_and_a_resumed_grid_submits_only_the_unfinished_run(
    pretrained, fc, in_process, tmp_path
):
    ray = require_reference("ray", "pip install 'normlab[ray]' (make test installs it)")
    handlers = signal_handlers()  # ray.init installs a SIGTERM handler that ray.shutdown() leaves behind
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        out = tmp_path / "ft"
        results, outcomes = finetune_grid(pretrained, fc, out, launcher="ray", say=quiet)
        assert results is not None and {o.status for o in outcomes.values()} == {"completed"}
        assert_same_grid(out, in_process)

        shutil.rmtree(out / "runs" / SETTING / "seed2")  # as if the grid had been stopped before it
        lines: list[str] = []
        results, outcomes = finetune_grid(pretrained, fc, out, launcher="ray", say=lines.append)
    finally:
        ray.shutdown()
        restore_signal_handlers(handlers)
    assert {n: o.status for n, o in outcomes.items()} == {f"{SETTING}/seed1": "cached",
                                                          f"{SETTING}/seed2": "completed"}  # fmt: skip
    assert (submissions(out, "seed1"), submissions(out, "seed2")) == (1, 2)  # the finished run never again
    assert sum("finished earlier, skipped" in line for line in lines) == 1
    assert_same_grid(out, in_process)


@pytest.mark.slow
def test_submitit_local_gives_the_local_runs_bit_for_bit(pretrained, fc, in_process, tmp_path):
    require_reference("submitit", "pip install 'normlab[slurm]' (make test installs it)")
    out = tmp_path / "ft"
    launch = LauncherConfig(kind="slurm", slurm_executor="local", slurm_time_minutes=10)
    results, outcomes = finetune_grid(pretrained, fc, out, launcher=launch, say=quiet)
    assert results is not None and {o.status for o in outcomes.values()} == {"completed"}
    assert_same_grid(out, in_process)
    assert len(list((out / "launcher" / "slurm").glob("*_submitted.pkl"))) == 2  # one job per run


def test_finetune_refuses_torchrun_and_a_missing_engine(pretrained, fc, tmp_path, monkeypatch, capsys):
    out = tmp_path / "ft"
    args = ["finetune", "--from", str(pretrained), "--task", "paraphrase", "--scale", "tiny", "--out", str(out)]
    assert main([*args, "--launcher", "torchrun"]) == 2
    assert "trains each run in one process" in capsys.readouterr().err
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # import fails
    assert main([*args, "--launcher", "ray"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "normlab finetune: error: --launcher ray needs ray: pip install 'normlab[ray]'"]
    assert not out.exists()  # refused before anything was written
