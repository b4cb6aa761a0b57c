"""``normlab translate`` / ``normlab evaluate`` end to end, and the trainer's per-epoch validation BLEU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.clirun import normlab
from tests.conftest import SMALL_VOCAB


@pytest.fixture(scope="module")
def trained_run(small_corpora, small_translation, data_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("translate") / "run"
    sets = [f"data.corpus={small_corpora['de-en-tsv']}", f"data.cache_dir={data_cache}",
            f"data.vocab_size={SMALL_VOCAB}", "data.max_tokens=1024", "data.train_subset=512", "data.valid_subset=16",
            "model.d_model=32", "model.n_heads=2", "model.d_ffn=64", "model.encoder_layers=1",
            "model.decoder_layers=1", "model.max_positions=64", "max_updates=3", "valid_bleu=8", "beam=2",
            "precision=fp32", "save_every=1", "keep_last=3", "test_checkpoint=avg:2"]  # fmt: skip
    proc = normlab("train", "--out", str(out), "--quiet", *[a for s in sets for a in ("--set", s)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


def test_validation_bleu_is_logged(trained_run):
    recs = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in recs if r["type"] == "valid"]
    assert valid and 0.0 <= valid[-1]["bleu"] <= 100.0 and "bleu_tokenized" in valid[-1]
    assert (trained_run / "tokenizer.model").exists()


def test_translate_streams_in_order(trained_run):
    long_line = " ".join(["Haus"] * 200)
    lines = ["Das ist ein Haus.", "", "Wie geht es dir?", long_line]
    proc = normlab("translate", "--run", str(trained_run), "--beam", "2", stdin="\n".join(lines) + "\n")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")[:-1]
    assert len(out) == 4 and out[1] == ""  # an empty line translates to an empty line
    assert "line 4:" in proc.stderr and "truncated" in proc.stderr  # the long line is named
    # the same input from a file, with a chosen checkpoint
    f = trained_run.parent / "in.txt"
    f.write_text("\n".join(lines[:3]) + "\n")
    again = normlab("translate", "--run", str(trained_run), "--beam", "2", "--input", str(f), "--checkpoint", "3")
    assert again.returncode == 0 and again.stdout.split("\n")[:3] == out[:3]


def test_evaluate_writes_json(trained_run):
    proc = normlab("evaluate", "--run", str(trained_run), "--split", "test", "--limit", "10", "--beam", "2")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["sentences"] == 10 and result["split"] == "test"
    assert {"bleu", "bleu_tokenized", "bleu_signature", "bleu_tokenized_signature", "nll"} <= set(result)
    assert result["decoding"]["beam"] == 2 and result["nll"] > 0
    assert json.loads((trained_run / "eval" / "test-best.json").read_text())["bleu"] == result["bleu"]
    # the .hyp keeps the split's rows up to the tenth scored: an empty line for each row not scored (longer than
    # the run's 64 positions), so that it stays in line with the test file
    hyp = (trained_run / "eval" / "test-best.hyp").read_text().splitlines()
    assert len(hyp) == result["hyp_lines"] == 10 + len(result["rows_not_scored"]) and result["data_rows"] == 2000
    assert result["rows_not_scored"] and all(hyp[r - 1] == "" for r in result["rows_not_scored"])  # the fixture drops


def test_evaluate_and_translate_with_the_average_of_the_last_checkpoints(trained_run):
    """--checkpoint avg:N (fairseq's checkpoint averaging): the mean of the last N checkpoints' weights; evaluate's
    files say which checkpoints; a run that kept fewer is one line. The run itself (test_checkpoint=avg:2) scored
    the whole test split with the same average once it had completed: the same numbers as evaluate's."""
    summary = json.loads((trained_run / "summary.json").read_text())
    test = summary["test"]
    assert test["checkpoint"].endswith("avg2-update_00000002-00000003") and test["decoding"]["beam"] == 2
    whole = normlab("evaluate", "--run", str(trained_run), "--split", "test", "--beam", "2", "--checkpoint", "avg:2")
    assert whole.returncode == 0, whole.stderr
    again = json.loads(whole.stdout)
    assert (again["sentences"], again["bleu"], again["nll"]) == (test["sentences"], test["bleu"], test["nll"])
    proc = normlab("evaluate", "--run", str(trained_run), "--split", "test", "--limit", "5", "--beam", "2",
                   "--checkpoint", "avg:2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["checkpoint"].endswith("avg2-update_00000002-00000003") and result["sentences"] == 5
    assert (trained_run / "eval" / "test-avg2-update_00000002-00000003.json").is_file()
    out = normlab("translate", "--run", str(trained_run), "--beam", "2", "--checkpoint", "avg:3", stdin="Das Haus.\n")
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 1, out.stderr
    few = normlab("evaluate", "--run", str(trained_run), "--checkpoint", "avg:9")
    assert few.returncode == 2 and "avg:9 needs 9 checkpoints, the run kept 3" in few.stderr, few.stderr


def test_evaluate_on_your_own_files(trained_run, small_corpora, tmp_path):
    """``--source/--reference``: your own parallel files, read with the run's tokenizer as ``prepare`` reads a split
    (an empty pair and a pair longer than max_positions dropped and counted), score exactly as the same sentences
    do as the run's test split."""
    raw = small_corpora["de-en-raw"]
    de, en = ((raw / f"test.{lang}").read_text(encoding="utf-8").splitlines()[:20] for lang in ("de", "en"))
    # a byte-order mark (not text), an empty pair (line 5), a pair too long for the run's 64 positions (line 22)
    (tmp_path / "own.de").write_text("\ufeff" + "\n".join(de[:4] + [""] + de[4:] + [" ".join(["Haus"] * 200)]) + "\n",
                                     encoding="utf-8")  # fmt: skip
    (tmp_path / "own.en").write_text("\n".join(en[:4] + [""] + en[4:] + ["house"]) + "\n", encoding="utf-8")
    proc = normlab("evaluate", "--run", str(trained_run), "--source", str(tmp_path / "own.de"), "--reference",
                   str(tmp_path / "own.en"), "--beam", "2")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    own = json.loads(proc.stdout)
    long = own["dropped_longer_than_max_positions"]  # the long pair, and any of the 20 over the run's 64 tokens
    assert own["dropped_empty"] == 1 and long >= 1 and own["sentences"] == 21 - long >= 10
    # the run's test split drops by the same rule: its first sentences are the ones kept here
    split = json.loads(normlab("evaluate", "--run", str(trained_run), "--split", "test", "--limit",
                               str(own["sentences"]), "--beam", "2").stdout)  # fmt: skip
    assert own["bleu"] == split["bleu"] and own["bleu_tokenized"] == split["bleu_tokenized"]
    assert own["nll"] == pytest.approx(split["nll"], rel=1e-6)
    written = Path(own["written"])
    assert written.parent == trained_run / "eval" and written.name.startswith("own-own.de-")
    # the .hyp keeps the file's lines, an empty one for each pair not scored: the split's translations of its rows
    # 1-4 on lines 1-4, line 5 empty (the empty pair), its rows 5.. on lines 6.. (one further down), as the split's
    # .hyp keeps its rows up to the last one its --limit scored
    hyp = written.with_suffix(".hyp").read_text().splitlines()
    assert len(hyp) == own["hyp_lines"] == own["data_rows"] == 22 and {5, 22} <= set(own["rows_not_scored"])
    assert len(own["rows_not_scored"]) == 22 - own["sentences"] and hyp[4] == ""
    split_hyp = Path(split["written"]).with_suffix(".hyp").read_text().splitlines()
    assert hyp[:4] == split_hyp[:4] and hyp[5 : len(split_hyp) + 1] == split_hyp[4:] and len(split_hyp) > 4
    assert [r + 1 if r > 4 else r for r in split["rows_not_scored"]] == [r for r in own["rows_not_scored"] if r != 5][
        : len(split["rows_not_scored"])]
    # a file of the same name elsewhere does not overwrite these scores
    (tmp_path / "b").mkdir()
    for name in ("own.de", "own.en"):
        (tmp_path / "b" / name).write_text("\n".join((de if name.endswith("de") else en)[:3]) + "\n", encoding="utf-8")
    other = json.loads(normlab("evaluate", "--run", str(trained_run), "--source", str(tmp_path / "b" / "own.de"),
                               "--reference", str(tmp_path / "b" / "own.en"), "--beam", "1").stdout)  # fmt: skip
    assert Path(other["written"]) != written and json.loads(written.read_text())["sentences"] == own["sentences"]
    # one-line errors: files of different lengths, a flag alone, both ways at once, a missing or empty name
    (tmp_path / "short.en").write_text("house\n", encoding="utf-8")
    for args, says in (
        (["--source", str(tmp_path / "own.de"), "--reference", str(tmp_path / "short.en")], "differ in length"),
        (["--source", str(tmp_path / "own.de")], "go together"),
        (["--split", "valid", "--source", str(tmp_path / "own.de"), "--reference", str(tmp_path / "own.en")],
         "one or the other"),
        (["--source", str(tmp_path / "nope.de"), "--reference", str(tmp_path / "own.en")], "no such file"),
        (["--source", "", "--reference", str(tmp_path / "own.en")], "no such file"),
    ):  # fmt: skip
        bad = normlab("evaluate", "--run", str(trained_run), *args)
        assert bad.returncode == 2 and says in bad.stderr and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_run_without_checkpoint_is_one_line_error(tmp_path):
    run = tmp_path / "empty"
    run.mkdir()
    (run / "config.yaml").write_text("{}\n")
    proc = normlab("translate", "--run", str(run), stdin="Hallo\n")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "no checkpoint found" in proc.stderr


def test_invalid_utf8_on_stdin_is_one_line_naming_it(trained_run):
    """stdin is read as a stream (in chunks of lines): the bad line is named in one line, exit 2, no traceback
    (issue 16, item 7; the file case, checked whole before any translation, is in test_rundir.py)."""
    import os
    import subprocess
    import sys

    from tests.clirun import ROOT

    data = "Das ist ein Haus.\nGr\xfc\xdfe\n".encode("latin-1")
    proc = subprocess.run([sys.executable, "-m", "normlab", "translate", "--run", str(trained_run), "--beam", "1"],
                          input=data, capture_output=True, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"),
                          timeout=600)  # fmt: skip
    err = proc.stderr.decode().strip().splitlines()
    assert proc.returncode == 2 and err == ["normlab translate: error: stdin: line 2 is not valid UTF-8 (byte 3 of the line)"], err
    assert "Traceback" not in proc.stderr.decode()


def test_de_en_cpu_recipe_from_start_to_test_bleu_then_translates(small_corpora, data_cache, tmp_path):
    """The README's recipe commands (`normlab train --config de-en-cpu`, then `normlab translate --run ...
    --checkpoint last` on stdin) at a tiny size: the bundled recipe's schedule (no warm-up, lr_max held to the
    update where budget_hours decides the length; here 20, and a budget spent by then, so that the run ends there
    whatever the machine's pace: tests/test_trainer.py checks the decay after it), its evaluation and its test
    scoring with the last checkpoint, in one command."""
    out = tmp_path / "de-en-cpu"
    sets = [f"data.corpus={small_corpora['de-en-tsv']}", f"data.cache_dir={data_cache}",
            f"data.vocab_size={SMALL_VOCAB}", "data.max_tokens=1024", "data.train_subset=256", "data.valid_subset=16",
            "model.d_model=32", "model.n_heads=2", "model.d_ffn=64", "model.encoder_layers=1",
            "model.decoder_layers=1", "model.max_positions=64", "schedule.decay_from=20", "budget_hours=1e-7",
            "save_every=10", "valid_bleu=4", "precision=fp32"]  # fmt: skip
    proc = normlab("train", "--config", "de-en-cpu", "--out", str(out), "--quiet", *[a for s in sets for a in ("--set", s)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in recs if r["type"] == "train"]
    assert lrs == [1e-3] * 20  # no warm-up; the length decided at update 20, where the budget is spent
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["budget"]["total_updates"], summary["stopped_by"]) == (20, "budget_hours")
    test = summary["test"]
    assert test["test_checkpoint"] == "last" and test["update"] == 20 and test["beam"] == 5 and test["sentences"] > 0
    tr = normlab("translate", "--run", str(out), "--checkpoint", "last", stdin="Erzeugt im aktuellen Dokument ein Diagramm.\n")
    assert tr.returncode == 0, tr.stderr
    assert len(tr.stdout.split("\n")[:-1]) == 1
