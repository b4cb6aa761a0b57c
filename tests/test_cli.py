"""One-step CLI end-to-end tests: the ``normlab`` console entry point in a subprocess."""

from __future__ import annotations

import json

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


def test_a_closed_pipe_is_no_traceback():
    """``normlab model | head -1``: the reader goes away before the output ends; exit as a process killed by
    SIGPIPE (141), with nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "normlab", "model", "--set", "d_model=64", "--set", "n_heads=2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    proc.stdout.close()  # before anything is read: the first write fails
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141 and "Traceback" not in err and not err.strip(), err


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
        "normlab model: error: ModelConfig: unknown key 'plcement'; did you mean 'model.placement'?"
    )


def test_invalid_value_exit_2():
    out = normlab("model", "--set", "dropout=1.5")
    assert out.returncode == 2 and "ModelConfig.dropout" in out.stderr


# ---- --help from the dataclasses, and one --set convention (the dotted path from the config file's root)


def _help(*argv: str, capsys) -> str:
    from normlab.cli import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


def _set_commands() -> list[tuple[str, type, str]]:
    """(command, config class, section) of every command that takes --set."""
    import argparse

    from normlab.cli import COMMANDS

    out = []
    for name, (_, configure, _) in COMMANDS.items():
        p = argparse.ArgumentParser()
        configure(p)
        if "set_root" in p._defaults:
            out.append((name, *p._defaults["set_root"]))
    return out


def test_every_command_with_set_has_a_config():
    from normlab.analysis.run import AnalysisConfig
    from normlab.config import DataConfig, ModelConfig, TrainConfig
    from normlab.experiments.sweep import SweepConfig
    from normlab.finetune import FinetuneConfig

    assert _set_commands() == [("model", ModelConfig, "model"), ("analyze", AnalysisConfig, ""),
                               ("diagnose", ModelConfig, "model"), ("data", DataConfig, "data"),
                               ("train", TrainConfig, ""), ("sweep", SweepConfig, ""),
                               ("finetune", FinetuneConfig, "")]  # fmt: skip


@pytest.mark.parametrize("command", ["model", "analyze", "diagnose", "data", "train", "sweep", "finetune"])
def test_help_lists_every_field_with_type_default_and_help(command, capsys):
    from normlab.config import settings

    [(_, cls, section)] = [c for c in _set_commands() if c[0] == command]
    text = _help(command, capsys=capsys)
    flat = " ".join(text.split())
    rows = settings(cls, f"{section}." if section else "")
    assert rows
    for row in rows:
        if row.section:
            assert f"{row.key}.*: {row.help} ({row.type})" in flat
        else:
            assert f"\n  {row.key} ({row.type}) = {row.default}\n" in text
            assert " ".join(row.help.split()) in flat, row.key


def test_train_help_shows_nested_sections_by_dotted_key(capsys):
    text = _help("train", capsys=capsys)
    from normlab.config import Placement

    placements = "|".join(p.value for p in Placement)
    for line in ("  model.*: the model (ModelConfig)", f"  model.placement ({placements}) = post",
                 "  optim.betas ([float, float]) = [0.9, 0.98]", "  schedule.step_epochs ([int, ...]) = []",
                 "  data.corpus (str) = ''", "  max_updates (int) = 0"):  # fmt: skip
        assert line + "\n" in text


def test_set_keys_from_the_config_files_root_old_form_still_accepted():
    from normlab.config import DataConfig, ModelConfig, TrainConfig, resolve_overrides

    # model/diagnose read the model: section of a run config, data its data: section
    assert resolve_overrides(ModelConfig, "model", ["model.placement=pre", "d_model=64"]) == ["placement=pre",
                                                                                            "d_model=64"]
    assert resolve_overrides(DataConfig, "data", ["data.corpus=wic", "vocab_size=2000"]) == ["corpus=wic",
                                                                                           "vocab_size=2000"]
    assert resolve_overrides(TrainConfig, "", ["model.placement=pre", "optim={lr: 1}"]) == ["model.placement=pre",
                                                                                          "optim={lr: 1}"]


@pytest.mark.parametrize(
    "command, key, message",
    [
        ("train", "placement=pre", "TrainConfig: unknown key 'placement'; did you mean 'model.placement'?"),
        ("train", "lr=1e-3", "TrainConfig: unknown key 'lr'; did you mean 'optim.lr'?"),
        ("train", "vocab_size=8000",
         "TrainConfig: unknown key 'vocab_size'; did you mean 'model.vocab_size' or 'data.vocab_size'?"),
        ("data", "model.corpus=wic", "DataConfig: unknown key 'model.corpus'; did you mean 'data.corpus'?"),
        ("model", "model.plcement=pre", "ModelConfig: unknown key 'model.plcement'; did you mean 'model.placement'?"),
        ("model", "optim.zzz=1", "ModelConfig: unknown key 'optim.zzz' (--help lists the keys)"),
        ("analyze", "depth=3", "AnalysisConfig: unknown key 'depth'; did you mean 'depths'?"),
    ],
)  # fmt: skip
def test_wrong_set_key_is_one_line_naming_the_right_key(command, key, message, capsys, tmp_path):
    from normlab.cli import main

    extra = {"train": ["--out", str(tmp_path / "run")], "analyze": ["--out", str(tmp_path / "a")]}
    assert main([command, *extra.get(command, []), "--set", key]) == 2
    assert capsys.readouterr().err == f"normlab {command}: error: {message}\n"
    assert not any(tmp_path.iterdir())


def test_model_command_new_and_old_key_agree(capsys):
    from normlab.cli import main

    assert main(["model", "--set", "model.placement=pre", "--set", "model.d_model=64", "--set", "n_heads=2"]) == 0
    new = capsys.readouterr().out
    assert main(["model", "--set", "placement=pre", "--set", "d_model=64", "--set", "n_heads=2"]) == 0
    assert capsys.readouterr().out == new and "placement=pre" in new


def test_diagnose_reads_the_task_of_the_run_config_it_is_given(capsys, tmp_path):
    """`normlab diagnose --config RUN/config.yaml` of a language-model run diagnosed a translation model with the
    default 6 encoder layers (a new user's finding): the run config's data.task is the default task; --task still
    wins. The first line says the batches are synthetic."""
    import yaml

    from normlab.cli import main

    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"data": {"task": "lm"}, "model": {"d_model": 32, "n_heads": 2, "d_ffn": 64,
                                                                      "decoder_layers": 2, "vocab_size": 200,
                                                                      "placement": "pre", "positional": "rope"}}))
    assert main(["diagnose", "--config", str(cfg), "--steps", "1", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("lm model, placement=pre, 2 decoder layers, at initialisation, on 1 synthetic batches")
    assert "Your run (" not in out  # no optim section: a model, not a run
    assert main(["model", "--config", str(cfg), "--task", "lm"]) == 0
    # a run config's learning rate and warm-up are placed against the nearest measured edge (the LM sweep's Pre-LN at
    # 6 layers, d=64: every seed stable at 0.01 without warm-up), in the text and the JSON
    run = yaml.safe_load(cfg.read_text())
    cfg.write_text(yaml.safe_dump({**run, "optim": {"lr": 1e-3}, "schedule": {"warmup_updates": 0}}))
    assert main(["diagnose", "--config", str(cfg), "--steps", "1", "--threads", "1", "--json",
                 str(tmp_path / "d.json")]) == 0  # fmt: skip
    out = " ".join(line.strip() for line in capsys.readouterr().out.splitlines())
    assert "Your run (learning rate 0.001, no warm-up): stable in all 5 seeds of pre, 6 layers, d=64 (sweep-lm)" in out
    placed = json.loads((tmp_path / "d.json").read_text())["measured_edges"]["run"]
    assert placed["lr"] == 1e-3 and placed["position"] == "below" and placed["source"] == "sweep-lm"


def test_ctrl_c_while_starting_is_one_line(monkeypatch, capsys):
    """A Ctrl-C during the first second (torch's import, before any command's handler) printed ~35 lines of
    traceback (a new user's finding): one line and the shell's SIGINT code now."""
    import types

    import normlab.__main__ as entry_point

    class Importing(types.ModuleType):
        def __getattr__(self, name):
            raise KeyboardInterrupt

    monkeypatch.setattr(entry_point, "reexec", lambda: None)
    monkeypatch.setitem(sys.modules, "normlab.cli", Importing("normlab.cli"))
    assert entry_point.entry() == 130
    assert capsys.readouterr().err == "normlab: interrupted while starting; nothing was done\n"


@pytest.mark.parametrize("command, advice", [
    ("train", "; a run resumes from its last checkpoint with --resume"),
    ("sweep", "; a run resumes from its last checkpoint when the same command is run again"),
    ("finetune", "; a run resumes from its last checkpoint when the same command is run again"),
    ("translate", ""),
])  # fmt: skip
def test_ctrl_c_in_a_command_says_how_that_command_resumes(monkeypatch, capsys, command, advice):
    """The interrupted line named --resume for every command; a new user followed it into sweep's "unrecognized
    arguments: --resume" (the grids resume when run again; translate has nothing to resume)."""
    from normlab import cli

    def interrupted(args):
        raise KeyboardInterrupt

    help_text, arguments, _ = cli.COMMANDS[command]
    monkeypatch.setitem(cli.COMMANDS, command, (help_text, arguments, interrupted))
    argv = {"train": ["train", "--out", "x"], "sweep": ["sweep"], "finetune": ["finetune", "--from", "x", "--task",
            "wic"], "translate": ["translate", "--run", "x"]}[command]  # fmt: skip
    assert cli.main(argv) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"normlab {command}: interrupted{advice}"
