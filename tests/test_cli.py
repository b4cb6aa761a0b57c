"""One-step CLI end-to-end tests: the ``normlab`` console entry point in a subprocess."""

from __future__ import annotations

import subprocess
import sys

import pytest


def normlab(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "normlab", *args], capture_output=True, text=True, cwd=cwd, timeout=300
    )


def test_version_and_help():
    out = normlab("--version")
    assert out.returncode == 0 and out.stdout.startswith("normlab ")
    out = normlab("--help")
    assert out.returncode == 0 and "model" in out.stdout
    assert normlab().returncode == 2


@pytest.mark.parametrize("placement, final", [("post", "no"), ("pre", "yes"), ("peri", "yes")])
def test_model_command(placement, final):
    out = normlab("model", "--set", f"placement={placement}", "--set", "d_model=64", "--set", "n_heads=2")
    assert out.returncode == 0, out.stderr
    assert f"placement={placement}" in out.stdout
    assert f"final LayerNorm after each stack: {final}" in out.stdout


def test_model_command_from_yaml(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("model:\n  placement: pre\n  d_model: 64\n  n_heads: 2\n  encoder_layers: 1\n")
    out = normlab("model", "--config", str(cfg), "--task", "mlm")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MaskedLM: placement=pre")


def test_misspelt_key_is_one_line_error_exit_2():
    out = normlab("model", "--set", "plcement=pre")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip() == (
        "normlab model: error: ModelConfig: unknown key 'plcement'; did you mean 'placement'?"
    )


def test_invalid_value_exit_2():
    out = normlab("model", "--set", "dropout=1.5")
    assert out.returncode == 2 and "ModelConfig.dropout" in out.stderr
