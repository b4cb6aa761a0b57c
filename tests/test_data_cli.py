"""``normlab data`` end to end in a subprocess (the README's data commands, on small corpora)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def normlab(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NORMLAB_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "normlab", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def normlab_in_process(*args: str, cache: Path, monkeypatch, capsys) -> tuple[int, str, str]:
    """The same command through ``normlab.cli.main`` (no interpreter start-up: ~3 s each on 2 busy cores)."""
    from normlab.cli import main

    monkeypatch.setenv("NORMLAB_CACHE", str(cache))
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_data_command(small_corpora, tmp_path):
    out = normlab("data", "--task", "translation", "--set", f"corpus={small_corpora['de-en-raw']}",
                  "--set", "vocab_size=1000", cache=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("DataConfig: task=translation") and "format raw" in lines[1]
    assert "vocab 1,000" in lines[2]
    assert any(line.split()[:2] == ["train", "3,000"] for line in lines)
    assert any(line.startswith("test") and line.split()[1] == "2,000" for line in lines)
    assert "non-pad share" in out.stdout and out.stdout.count("</s>") == 2  # two decoded examples
    assert len(list((tmp_path / "splits").glob("*.npz"))) == 3  # the cache went where NORMLAB_CACHE says


def test_data_command_shared_tokenizer(small_corpora, tmp_path, monkeypatch, capsys):
    mono = small_corpora["mono"]
    args = ("--task", "classification", "--set", f"corpus={small_corpora['wic']}", "--set", f"tokenizer={mono}",
            "--set", "vocab_size=1000", "--max-positions", "128")  # fmt: skip
    code, out, err = normlab_in_process("data", *args, cache=tmp_path, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    assert "[CLS]" in out and "[SEP]" in out
    code, pre, err = normlab_in_process("data", "--task", "mlm", "--set", f"corpus={mono}", "--set", "vocab_size=1000",
                                        cache=tmp_path, monkeypatch=monkeypatch, capsys=capsys)  # fmt: skip
    assert code == 0, err
    tokenizer_line = [line for line in out.splitlines() if line.startswith("tokenizer")]
    assert tokenizer_line == [line for line in pre.splitlines() if line.startswith("tokenizer")]
    assert len(list((tmp_path / "tokenizers").glob("*.model"))) == 1  # one vocabulary, pre-training and fine-tuning


def test_data_command_bad_corpus_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    d = tmp_path / "c"
    d.mkdir()
    (d / "train.de").write_text("a\nb\n", encoding="utf-8")
    (d / "train.en").write_text("A\n", encoding="utf-8")
    (d / "valid.de").write_text("a\n", encoding="utf-8")
    (d / "valid.en").write_text("A\n", encoding="utf-8")
    def run(*args):
        return normlab_in_process(*args, cache=tmp_path / "cache", monkeypatch=monkeypatch, capsys=capsys)

    code, out, err = run("data", "--set", f"corpus={d}")
    assert code == 2 and out == ""
    assert err == (
        f"normlab data: error: parallel files differ in length: {d / 'train.de'} has 2 lines, {d / 'train.en'} has 1\n"
    )
    assert not (tmp_path / "cache").exists()
    code, out, err = run("data", "--set", "vocab_size=100")
    assert code == 2 and "DataConfig.vocab_size: must exceed 263" in err
