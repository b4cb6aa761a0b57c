"""Issue 36's fault battery (the fault-injection tier): silent corruption on resume, library errors, Ctrl-C and
sizes. Each case is one line and an exit code, nothing lost, and a resumed result bit-identical where a resume
applies. In-process through the CLI's ``main`` where it can be, so that the file stays fast."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from normlab.cli import main
from normlab.rundir import RunDir
from tests.clirun import sets
from tests.conftest import SMALL_VOCAB


def cli(capsys, *argv: str) -> tuple[int, list[str]]:
    """``normlab ARGV`` in this process: the exit code and the stderr lines."""
    code = main(list(argv))
    return code, capsys.readouterr().err.strip().splitlines()


def snapshot(run_dir) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(Path(run_dir).rglob("*"))
            if p.is_file() and p.name != ".lock" and "tb" not in p.parts}  # fmt: skip


def small_run(corpus: Path, cache: Path, *extra: str) -> list[str]:
    return sets(f"data.corpus={corpus}", f"data.cache_dir={cache}", f"data.vocab_size={SMALL_VOCAB}",
                "data.max_tokens=512", "data.train_subset=128", "data.valid_subset=16", "model.d_model=32",
                "model.n_heads=2", "model.d_ffn=64", "model.encoder_layers=1", "model.decoder_layers=1",
                "model.max_positions=128", "precision=fp32", "device=cpu", "attention=sdpa", *extra)  # fmt: skip


# ---------------------------------------------------------------------------------------- 1. data on resume


@pytest.fixture
def own_corpus(small_corpora, tmp_path):
    """A copy of the small raw de-en corpus that a test may edit."""
    root = tmp_path / "corpus"
    shutil.copytree(small_corpora["de-en-raw"], root)
    return root


def change_one_word(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    word = next(w for w in text.split() if w.isalpha() and len(w) > 4)
    path.write_text(text.replace(word, word[::-1] + "x", 1), encoding="utf-8")


def test_resume_on_a_changed_corpus_is_one_line_and_keeps_the_tokenizer(own_corpus, tmp_path, capsys):
    """Issue 36 case 1: a word of the corpus changed between a kill and ``--resume``. Before: exit 0, the
    tokenizer retrained on the new corpus (ids moved) under weights learnt with the old one. Now: exit 2, one
    line naming the file, nothing written; ``--accept-changed-data`` trains on it with the run's tokenizer."""
    cache, out = tmp_path / "cache", tmp_path / "run"
    assert cli(capsys, "train", "--out", str(out), "--quiet", *small_run(own_corpus, cache, "max_updates=2"))[0] == 0
    record = RunDir(out).data_record()
    assert record is not None and "corpus/train/train.en" in record["files"]
    change_one_word(own_corpus / "train.en")
    before = snapshot(out)
    status, err = cli(capsys, "train", "--out", str(out), "--resume", "--quiet", "--set", "max_updates=4")
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith("normlab train: error: --resume: the data changed since the run started: "
                             "corpus/train/train.en; pass --accept-changed-data")  # fmt: skip
    assert snapshot(out) == before
    status, err = cli(capsys, "train", "--out", str(out), "--resume", "--quiet", "--accept-changed-data",
                      "--set", "max_updates=4")  # fmt: skip
    assert status == 0, err
    assert RunDir(out).tokenizer_path.read_bytes() == before["tokenizer.model"]  # never retrained
    assert RunDir(out).summary()["update"] == 4
    # the run now trains on the new corpus: a further plain resume is not refused
    assert RunDir(out).data_record()["files"] != record["files"]
    assert cli(capsys, "train", "--out", str(out), "--resume", "--quiet", "--set", "max_updates=5")[0] == 0


def test_resume_with_another_tokenizer_file_is_refused(own_corpus, tmp_path, capsys):
    """The last guard: a run's tokenizer.model is never replaced under its checkpoints, whatever the data
    gives now (here a run from before data.json, so that the corpus check has nothing to compare)."""
    cache, out = tmp_path / "cache", tmp_path / "run"
    assert cli(capsys, "train", "--out", str(out), "--quiet", *small_run(own_corpus, cache, "max_updates=2"))[0] == 0
    (out / RunDir.DATA).unlink()
    change_one_word(own_corpus / "train.de")
    before = snapshot(out)
    status, err = cli(capsys, "train", "--out", str(out), "--resume", "--quiet", "--set", "max_updates=4")
    assert status == 2 and len(err) == 1, err
    assert "--resume: the tokenizer the data gives now differs from the run's" in err[0]
    assert snapshot(out) == before
