"""``normlab train`` end to end (one update per task type), its exit codes and its configuration checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from normlab.config import Placement
from tests.clirun import normlab, sets
from tests.conftest import SMALL_VOCAB

TINY = ["model.d_model=32", "model.n_heads=2", "model.d_ffn=64", "model.encoder_layers=2",
        "model.decoder_layers=2", "model.max_positions=128"]  # fmt: skip


def data_sets(task: str, corpus: Path, cache: Path, *extra: str) -> list[str]:
    return sets(f"data.task={task}", f"data.corpus={corpus}", f"data.cache_dir={cache}",
                f"data.vocab_size={SMALL_VOCAB}", "data.max_tokens=512", *extra)  # fmt: skip


@pytest.mark.parametrize(
    "task, corpus, extra",
    [("translation", "de-en-tsv", []), ("mlm", "mono", ["data.block_size=64"]),
     ("classification", "paraphrase", ["model.type_vocab_size=2", "data.max_sentences=16"])],
)  # fmt: skip
def test_one_update_per_task(task, corpus, extra, small_corpora, small_translation, data_cache, tmp_path):
    out = tmp_path / "run"
    proc = normlab("train", "--out", str(out), "--quiet",
                   *data_sets(task, small_corpora[corpus], data_cache, *extra, "data.valid_subset=32"),
                   *sets(*TINY, "max_updates=1", "precision=fp32"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["update"] == 1
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["data"]["task"] == task and saved["model"]["vocab_size"] == SMALL_VOCAB  # fitted to the tokenizer
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["type"] for r in recs] == ["train", "valid"]
    assert recs[0]["loss"] > 0 and recs[1]["nll"] > 0
    if task == "classification":
        assert 0.0 <= recs[1]["accuracy"] <= 1.0
    assert (out / "checkpoints" / "update_00000001" / "model.safetensors").exists()


def test_resume_and_config_file(small_corpora, small_translation, data_cache, tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(yaml.safe_dump({
        "model": {"d_model": 32, "n_heads": 2, "d_ffn": 64, "encoder_layers": 1, "decoder_layers": 1,
                  "placement": "pre", "max_positions": 128},
        "data": {"corpus": str(small_corpora["de-en-tsv"]), "cache_dir": str(data_cache), "vocab_size": SMALL_VOCAB,
                 "max_tokens": 512, "train_subset": 256, "valid_subset": 32},
        "optim": {"lr": 1e-3}, "max_updates": 2, "precision": "fp32",
    }))  # fmt: skip
    out = tmp_path / "run"
    assert normlab("train", "--config", str(cfg), "--out", str(out), "--quiet").returncode == 0
    # more updates on the same run: --resume reads the saved config; --set may change the length
    proc = normlab("train", "--out", str(out), "--resume", "--quiet", "--set", "max_updates=4")
    assert proc.returncode == 0, proc.stderr
    updates = [json.loads(ln)["update"] for ln in (out / "metrics.jsonl").read_text().splitlines()
               if json.loads(ln)["type"] == "train"]  # fmt: skip
    assert updates == [1, 2, 3, 4]
    # resuming with another model is refused, one line, nothing written
    before = sorted(p.name for p in out.rglob("*"))
    proc = normlab("train", "--out", str(out), "--resume", "--set", "model.d_ffn=48")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "normlab train: error: --resume: the model configuration differs from the run's in ['d_ffn']"
    ]
    assert sorted(p.name for p in out.rglob("*")) == before


def test_diverging_run_exits_3(small_corpora, small_translation, data_cache, tmp_path):
    out = tmp_path / "run"
    proc = normlab("train", "--out", str(out), "--quiet",
                   *data_sets("translation", small_corpora["de-en-tsv"], data_cache, "data.train_subset=512"),
                   *sets(*TINY, "model.placement=post", "optim.name=sgd", "optim.lr=1e9", "schedule.decay=constant",
                         "max_updates=8", "precision=fp32"))  # fmt: skip
    assert proc.returncode == 3, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["diverged_at_update"] >= 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["--set", "optm.lr=1e-3"], "TrainConfig: unknown key 'optm.lr'; did you mean 'optim.lr'?"),
        (["--set", "optim.lr=-1e-3"], "OptimConfig.lr: must be positive, got -0.001"),
        (["--set", "optim.lr=0"], "OptimConfig.lr: must be positive, got 0.0"),
        (["--set", "max_updates=10", "--set", "schedule.warmup_updates=4000"],
         "TrainConfig.schedule: warmup_updates=4000 is longer than the run (max_updates=10): set "
         "schedule.warmup_updates to at most 10, or lengthen the run"),
        (["--set", "model.placement=middle"],
         f"ModelConfig.placement: 'middle' is not one of {[p.value for p in Placement]}"),
        (["--resume"], "--resume: {out} is not a run directory (no config.yaml)"),
    ],
)  # fmt: skip
def test_configuration_errors_exit_2_and_write_nothing(args, message, tmp_path):
    out = tmp_path / "run"
    proc = normlab("train", "--out", str(out), *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == "normlab train: error: " + message.format(out=out)
    assert not out.exists()


def test_existing_run_without_resume(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("{}")
    proc = normlab("train", "--out", str(out))
    assert proc.returncode == 2 and "already holds a run; pass --resume" in proc.stderr


def test_threads_sets_the_runs_cpu_threads(monkeypatch, tmp_path):
    """`normlab train --threads N` (a new user's finding: the other commands had it, train did not, and on a shared
    2-core CPU its default two OpenMP threads made a small run up to 25x slower): torch's threads for the run, and
    OMP_NUM_THREADS for the ranks of --nproc-per-node; a negative value is one line."""
    import os

    import torch

    from normlab.cli import main
    from normlab.train import run as train_run

    seen = {}

    def fake_train(cfg, out, **kw):
        seen["threads"], seen["omp"] = torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS")
        return {"status": "completed", "update": 0}

    before = torch.get_num_threads()
    monkeypatch.setattr(train_run, "train", fake_train)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    try:
        assert main(["train", "--out", str(tmp_path / "run"), "--threads", "1", "--quiet"]) == 0
    finally:
        torch.set_num_threads(before)
        os.environ.pop("OMP_NUM_THREADS", None)
    assert seen == {"threads": 1, "omp": "1"}
    assert main(["train", "--out", str(tmp_path / "run"), "--threads", "-1"]) == 2
