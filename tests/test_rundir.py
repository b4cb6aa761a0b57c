"""The run directory (normlab/rundir.py) and the hostile inputs, kills and faults of issue 16: each is refused
in one line (exit 2) or handled as stated, and nothing is written or lost. In-process where it can be (the CLI's
``main``), so the file stays fast."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from normlab.cli import main
from normlab.config import ConfigError, TrainConfig
from normlab.rundir import RunDir, RunLocked, json_line, strict_json, write_atomic
from normlab.train import checkpoint as ck
from normlab.train.trainer import Trainer, divergence, prepare_run_dir
from tests.synthetic import ReverseTask
from tests.test_trainer import config

ROOT = Path(__file__).resolve().parents[1]


def cli(capsys, *argv: str) -> tuple[int, list[str]]:
    """``normlab ARGV`` in this process: the exit code and the stderr lines."""
    code = main(list(argv))
    return code, capsys.readouterr().err.strip().splitlines()


def fit(run_dir, resume=False, valid=True, **top) -> dict:
    top.setdefault("schedule", {"warmup_updates": 0})
    cfg = TrainConfig.from_dict(config(**top))
    return Trainer(cfg, run_dir, ReverseTask(), ReverseTask(n=64, seed=1) if valid else None, quiet=True).fit(resume)


def strict_records(run_dir) -> list[dict]:
    def refuse(token):
        raise ValueError(f"non-strict JSON token {token}")

    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(ln, parse_constant=refuse) for ln in lines]


def snapshot(run_dir) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(Path(run_dir).rglob("*"))
            if p.is_file() and p.name != ".lock" and "tb" not in p.parts}  # fmt: skip


# ---------------------------------------------------------------------------------------------- RunDir itself


def test_atomic_write_and_tolerant_metrics_reader(tmp_path):
    write_atomic(tmp_path / "a.json", "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temporary file left
    if os.name == "posix":  # the mode of a file opened for writing (not mkstemp's 0600), or of the one replaced
        import normlab.files as files

        write_atomic(tmp_path / "b.json", "{}")
        (tmp_path / "c.json").write_text("{}")  # what open() gives under the process' umask
        assert (tmp_path / "b.json").stat().st_mode & 0o777 == (tmp_path / "c.json").stat().st_mode & 0o777
        assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o666 & ~files.UMASK
        (tmp_path / "b.json").chmod(0o640)
        write_atomic(tmp_path / "b.json", "[]")
        assert (tmp_path / "b.json").stat().st_mode & 0o777 == 0o640
        (tmp_path / "b.json").unlink()
        (tmp_path / "c.json").unlink()
    run = RunDir(tmp_path)
    run.metrics_path.write_text(json_line({"type": "train", "update": 1, "loss": float("nan")}) + "\n"
                                + '{"type": "train", "upd')  # a line cut by a kill
    assert run.metrics() == [{"type": "train", "update": 1, "loss": None}]
    assert strict_json({"a": [math.inf, 1.0]}) == {"a": [None, 1.0]}
    assert run.status() is None
    run.summary_path.write_text('{"status": "comp')  # a damaged summary reads as none
    assert run.status() is None


def test_a_second_trainer_is_refused_with_the_holders_pid(tmp_path, capsys):
    fit(tmp_path / "run", max_updates=2)
    code = f"import sys, time; from normlab.rundir import RunDir; l = RunDir(sys.argv[1]).lock(); print('ok', flush=True); time.sleep(60)"  # noqa: E501
    holder = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "ok"
        assert RunDir(tmp_path / "run").holder() == holder.pid
        before = snapshot(tmp_path / "run")
        status, err = cli(capsys, "train", "--out", str(tmp_path / "run"), "--resume", "--set", "max_updates=4")
        assert status == 2 and len(err) == 1 and f"in use by another trainer (pid {holder.pid})" in err[0]
        with pytest.raises(RunLocked, match=f"pid {holder.pid}"):
            fit(tmp_path / "run", resume=True, max_updates=4)
        assert snapshot(tmp_path / "run") == before
    finally:
        holder.kill()
        holder.wait()
    assert RunDir(tmp_path / "run").holder() is None  # the kernel released it with the process


# --------------------------------------------------------------------------------------- checkpoints, resume


def test_damaged_newest_checkpoint_resume_falls_back_and_says_so(tmp_path, capsys):
    ref = fit(tmp_path / "ref", max_updates=8, save_every=2, keep_last=5)
    fit(tmp_path / "run", max_updates=6, save_every=2, keep_last=5)
    ckpts = tmp_path / "run" / "checkpoints"
    best_before = (ckpts / "best" / "model.safetensors").read_bytes()
    newest = ckpts / "update_00000006" / "model.safetensors"
    with open(newest, "r+b") as f:  # truncated in place: best/ is a copy, not a hard link, so it survives
        f.truncate(100)
    assert (ckpts / "best" / "model.safetensors").read_bytes() == best_before
    with pytest.raises(ck.CheckpointError) as e:
        ck.load_checkpoint(ckpts / "update_00000006", ReverseTaskModel())
    assert "\n" not in str(e.value) and "damaged" in str(e.value)
    cfg = TrainConfig.from_dict(config(max_updates=8, save_every=2, keep_last=5, schedule={"warmup_updates": 0}))
    summary = Trainer(cfg, tmp_path / "run", ReverseTask(), ReverseTask(n=64, seed=1)).fit(resume=True)
    err = capsys.readouterr().err
    assert "resuming from update_00000004, the newest intact one" in err
    assert (ckpts / "damaged-update_00000006").is_dir()  # set aside, not deleted
    assert summary["update"] == ref["update"] == 8
    ours, theirs = strict_records(tmp_path / "run"), strict_records(tmp_path / "ref")
    strip = lambda recs: [{k: v for k, v in r.items() if k not in ("seconds", "tokens_per_s")} for r in recs]  # noqa: E731
    assert strip(ours) == strip(theirs)  # each update once, the same values
    a = load_file(str(ckpts / "update_00000008" / "model.safetensors"))
    b = load_file(str(tmp_path / "ref" / "checkpoints" / "update_00000008" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def ReverseTaskModel():  # noqa: N802 - the model the trainer tests train
    from normlab.model import build_model

    return build_model(TrainConfig.from_dict(config()).model, "translation")


def test_pickled_checkpoint_is_one_line_never_unpickled(tmp_path, capsys):
    fit(tmp_path, max_updates=2)
    best = tmp_path / "checkpoints" / "best"
    torch.save(ReverseTaskModel().state_dict(), best / "model.safetensors")  # a foreign (pickled) file
    status, err = cli(capsys, "translate", "--run", str(tmp_path), "--input", os.devnull)
    assert status == 2 and len(err) == 1 and "never unpickles" in err[0], err
    with pytest.raises(ck.CheckpointError, match="not a checkpoint directory"):
        ck.load_checkpoint(best / "model.safetensors", ReverseTaskModel())


def test_resume_after_a_kill_before_the_first_checkpoint_logs_each_update_once(tmp_path):
    fit(tmp_path, max_updates=5)
    # what a kill before the first checkpoint leaves: config, metrics of updates 1-5, no checkpoint
    shutil.rmtree(tmp_path / "checkpoints")
    RunDir(tmp_path).write_summary({"status": "running"})
    summary = fit(tmp_path, resume=True, max_updates=5)
    assert summary["status"] == "completed"
    assert [r["update"] for r in strict_records(tmp_path) if r["type"] == "train"] == [1, 2, 3, 4, 5]


def test_resuming_a_finished_run_changes_nothing(tmp_path):
    first = fit(tmp_path, max_updates=3)
    before = snapshot(tmp_path)
    again = fit(tmp_path, resume=True, max_updates=3)
    assert snapshot(tmp_path) == before and again == first


def test_interrupted_rotation_leaves_no_partial_checkpoint(tmp_path):
    fit(tmp_path, max_updates=4, save_every=1, keep_last=1)
    ckpts = tmp_path / "checkpoints"
    # a deletion killed midway: rotation renames first, so what is left is hidden and swept by the next save
    (ckpts / ".trash-x" / "update_00000002").mkdir(parents=True)
    assert [p.name for p in RunDir(tmp_path).list_checkpoints()] == ["update_00000004"]
    ck.rotate(ckpts, keep_last=1)
    assert sorted(p.name for p in ckpts.iterdir()) == ["best", "update_00000004"]


# ------------------------------------------------------------------------------------------------ the config


@pytest.mark.parametrize("key, value", [("optim.lr", math.nan), ("optim.eps", math.inf), ("optim.clip_norm", -math.inf),
                                        ("model.layer_norm_eps", math.nan), ("lenpen", math.inf)])  # fmt: skip
def test_non_finite_values_are_refused_naming_the_field(key, value):
    section, _, name = key.rpartition(".")
    data = {section: {name: value}} if section else {name: value}
    with pytest.raises(ConfigError, match=rf"\.{name}: must be a finite number"):
        TrainConfig.from_dict(data)


@pytest.mark.parametrize("seed", [-1, 2**32, 2**70])
def test_seed_out_of_range_is_refused(seed):
    # 2**70 is past every integer setting's bound (normlab.config.MAX_INT), refused before the seed's own check
    with pytest.raises(ConfigError, match=r"TrainConfig\.seed: (must be in \[0, 2\*\*32\)|\d+ is out of range)"):
        TrainConfig.from_dict({"seed": seed})


def test_config_and_out_errors_are_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim:\n  lr: [1e-3\n")
    dup = tmp_path / "dup.yaml"
    dup.write_text("optim:\n  lr: 1e-3\n  lr: 1e-2\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = [
        (["--config", str(bad)], "YAML syntax error: line"),
        (["--config", str(dup)], "line 3: duplicate key 'lr' (first on line 2)"),
        (["--config", str(tmp_path / "missing.yaml")], "no such file"),
        (["--config", str(tmp_path)], "is a directory, not a YAML file"),
        (["--set", "optim.lr=.nan"], "OptimConfig.lr: must be a finite number, got nan"),
        (["--set", "seed=-3"], "TrainConfig.seed: must be in [0, 2**32), got -3"),
    ]
    out = tmp_path / "run"
    for args, message in cases:
        status, err = cli(capsys, "train", "--out", str(out), *args)
        assert status == 2 and len(err) == 1 and message in err[0], (args, err)
        assert not out.exists()
    status, err = cli(capsys, "train", "--out", str(a_file))
    assert status == 2 and err == [f"normlab train: error: --out {a_file}: exists and is not a directory"]
    assert a_file.read_text() == "x"


def test_a_damaged_config_yaml_on_resume_is_one_line(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text("model: {d_model: 32\n")
    status, err = cli(capsys, "train", "--out", str(tmp_path), "--resume")
    assert status == 2 and len(err) == 1 and "config.yaml: YAML syntax error" in err[0], err


# ----------------------------------------------------------------------------------------- translate, evaluate


def test_decoding_arguments_are_checked_in_one_line(tmp_path, capsys):
    latin1 = tmp_path / "in.txt"
    latin1.write_bytes("Hallo\nGr\xfc\xdfe\n".encode("latin-1"))
    run = str(tmp_path / "nowhere")
    cases = [
        (["translate", "--run", run, "--beam", "0"], "--beam must be in [1, 1024] (1 = greedy), got 0"),
        (["translate", "--run", run, "--input", str(tmp_path / "missing.txt")], "missing.txt: no such file"),
        (["translate", "--run", run, "--input", str(latin1)], "line 2 is not valid UTF-8"),
        (["evaluate", "--run", run, "--limit", "-5"], "--limit must be >= 0 (0 = all), got -5"),
        (["evaluate", "--run", run, "--lenpen", "nan"], "--lenpen must be a finite number >= 0, got nan"),
        (["reproduce", "--out", run, "--figures", ","], "--figures ',' names no figure"),
    ]
    for args, message in cases:
        status, err = cli(capsys, *args)
        assert status == 2 and len(err) == 1 and message in err[0], (args, err)
    assert not (tmp_path / "nowhere").exists()


# -------------------------------------------------------------------------------------------------- the data


def test_a_validation_example_longer_than_max_tokens_is_caught_before_training(tmp_path):
    from normlab.data import batching
    from normlab.data.corpora import DataError

    class Checked(ReverseTask):  # batched by the data pipeline's own rule, which refuses an example too long
        def epoch_batches(self, epoch, seed, max_tokens, shuffle=True, *, max_sentences=0):
            return batching.epoch_batches(self.sizes, epoch=epoch, seed=seed, max_tokens=max_tokens, shuffle=shuffle,
                                          max_sentences=max_sentences)  # fmt: skip

    cfg = TrainConfig.from_dict(config(data={"max_tokens": 20}))
    long_valid = Checked(n=8, min_len=25, max_len=30, seed=1)

    with pytest.raises(DataError, match="the validation split: an example of"):
        Trainer(cfg, tmp_path / "run", ReverseTask(n=64, max_len=9), long_valid, quiet=True).fit()
    assert not (tmp_path / "run").exists()


def test_max_positions_that_drops_every_example_is_an_error(small_corpora, data_cache):
    from normlab.data import prepare
    from normlab.data.corpora import DataError
    from tests.conftest import small_data_config

    with pytest.raises(DataError, match="all .* examples are longer than the model's max_positions=2"):
        prepare(small_data_config(small_corpora["de-en-tsv"], data_cache), max_positions=2)


# ------------------------------------------------------------------------------------------------ divergence


def test_the_divergence_rule():
    assert divergence(3.0, 1.0, 20, 4.0) is None
    assert "non-finite loss" in divergence(math.nan, 1.0, 20, 4.0)
    assert "non-finite gradient norm" in divergence(3.0, math.inf, 20, 4.0)
    assert divergence(128.0, 5.0, 1000, 4.0) == "loss 128 > diverge_factor 4 x ln(1000) = 27.63"
    assert divergence(128.0, 5.0, 1000, 0.0) is None  # off: only non-finite losses


def test_an_exploding_loss_is_recorded_as_diverged_in_strict_json(tmp_path):
    summary = fit(tmp_path, optim={"name": "sgd", "lr": 1e9}, schedule={"warmup_updates": 0, "decay": "constant"},
                  model={"placement": "post"}, max_updates=20)  # fmt: skip
    assert summary["status"] == "diverged" and summary["diverged_reason"]
    recs = strict_records(tmp_path)  # no NaN / Infinity tokens
    assert recs[-1]["diverged"] is True and recs[-1]["diverged_reason"] == summary["diverged_reason"]
    json.loads((tmp_path / "summary.json").read_text(), parse_constant=lambda t: pytest.fail(t))


# ------------------------------------------------------------------------------------------- fault injection


@pytest.mark.slow
def test_kill_9_at_random_moments_then_resume_equals_an_uninterrupted_run(tmp_path):
    """SIGKILL at random moments (a checkpoint and a rotation every update, so many kills land inside one),
    resume each time: the final tensors and metrics equal an uninterrupted run's.

    A kill lands a random 1-3 updates past the last update on record, plus a random fraction of an update, so
    that it falls inside the run whatever the CPU's speed (a kill after a random number of seconds missed the
    run on a fast CPU: a 24-update run that ends before 1.5-6 s is never killed)."""
    import random

    from tests.test_trainer import final_params, records, run_script

    def last_update() -> int:
        metrics = run / "metrics.jsonl"
        if not metrics.exists():
            return 0
        lines = [json.loads(ln) for ln in metrics.read_text().splitlines() if ln.endswith("}")]  # a torn last line
        return max((r["update"] for r in lines if r.get("type") == "train"), default=0)

    cfg = config(save_every=1, keep_last=2, max_updates=24, schedule={"warmup_updates": 0})  # dropout on
    ref = run_script(tmp_path / "ref", cfg)
    assert ref.wait(timeout=300) == 0, ref.stderr.read()
    run, rng, kills = tmp_path / "run", random.Random(16), 0
    for _ in range(12):
        resume = ["--resume"] if (run / "config.yaml").exists() else []
        target = last_update() + rng.randint(1, 3)  # a resume first replays what the last checkpoint lacks
        proc = run_script(run, cfg, *resume, "--sleep", "0.01")
        if kills < 5:
            deadline = time.time() + 120
            while proc.poll() is None and last_update() < target and time.time() < deadline:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.02))  # somewhere in the next update or its checkpoint
        if kills >= 5 or proc.poll() is not None:
            assert proc.wait(timeout=300) == 0, proc.stderr.read()
            break
        proc.kill()
        proc.wait()
        kills += 1
    assert kills >= 3  # five, unless the run got to its end first (at most 4 updates of progress per kill: not 24)
    a, b = final_params(tmp_path / "ref"), final_params(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert records(run) == records(tmp_path / "ref")
    assert not [p.name for p in (run / "checkpoints").iterdir() if p.name.startswith(".")]  # nothing half-done


# ------------------------------------------------------------------------------------------------- disk full


def test_a_full_disk_is_one_line_exit_2_loses_nothing_and_resumes_exactly(
    small_corpora, small_translation, data_cache, tmp_path, capsys, monkeypatch
):
    """ENOSPC injected into the third checkpoint's optimizer file (half of it written first, as a full disk
    does): exit 2, one line naming --out and the file, the earlier checkpoints intact, and ``--resume`` once
    there is room ends with the tensors and metrics of an uninterrupted run. Injected, not a real full file
    system: a small tmpfs needs root (mount), which the suite must not."""
    import errno

    from tests.clirun import sets
    from tests.conftest import SMALL_VOCAB
    from tests.test_trainer import final_params, records

    args = sets(f"data.corpus={small_corpora['de-en-tsv']}", f"data.cache_dir={data_cache}",
                f"data.vocab_size={SMALL_VOCAB}", "data.max_tokens=512", "data.train_subset=256",
                "data.valid_subset=32", "model.d_model=32", "model.n_heads=2", "model.d_ffn=64",
                "model.encoder_layers=1", "model.decoder_layers=1", "model.max_positions=128",
                "max_updates=8", "save_every=2", "eval_every=4", "keep_last=1", "precision=fp32",
                "device=cpu", "attention=sdpa")  # fmt: skip
    assert cli(capsys, "train", "--out", str(tmp_path / "ref"), "--quiet", *args)[0] == 0

    saves = []
    real_save_file = ck.save_file

    def full_disk(tensors, filename, *a, **k):
        saves.append(filename)
        if len(saves) == 3:
            Path(filename).write_bytes(b"\0" * 100)  # the part that fitted
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real_save_file(tensors, filename, *a, **k)

    run = tmp_path / "run"
    monkeypatch.setattr(ck, "save_file", full_disk)
    status, err = cli(capsys, "train", "--out", str(run), "--quiet", *args)
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"normlab train: error: --out {run}: no space left on the device: {run}/checkpoints/")
    assert "nothing is lost: once there is room, --resume continues from its checkpoint update_00000004" in err[0]
    # nothing lost: the newest checkpoint is whole and loads, the failed one left nothing behind
    rd = RunDir(run)
    assert [p.name for p in rd.list_checkpoints()] == ["update_00000004"]
    assert not [p.name for p in rd.checkpoints.iterdir() if p.name.startswith(".")]
    rd.load_model("translation", which="last")
    # failed, not running (no process runs it); as resumable as a killed run: --resume continues from update 4
    assert rd.status() == "failed" and rd.summary()["error"] == err[0].removeprefix("normlab train: error: ")
    # room again: --resume continues and ends where an uninterrupted run ends
    monkeypatch.setattr(ck, "save_file", real_save_file)
    assert cli(capsys, "train", "--out", str(run), "--resume", "--quiet")[0] == 0
    a, b = final_params(tmp_path / "ref"), final_params(run)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert records(run) == records(tmp_path / "ref")
    assert rd.status() == "completed"


def test_a_read_only_out_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    """EROFS where the run directory would be created (injected: as root, chmod does not make a directory
    read-only, and a read-only mount needs root)."""
    import errno

    def read_only(self, *a, **k):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    out = tmp_path / "ro" / "run"
    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(ConfigError) as e:
        fit(out, max_updates=2)
    assert str(e.value) == f"--out {out}: read-only file system: {out}; nothing was written"
    assert not (tmp_path / "ro").exists()


def test_resume_restores_a_best_copy_that_a_stop_left_unwritten(tmp_path, monkeypatch):
    """A full disk (or a kill) between a checkpoint and its copy into best/: the resume copies it, else the
    rotation would delete the only copy of the best weights."""
    fit(tmp_path, max_updates=4, eval_every=4)
    assert ck.read_state(tmp_path / "checkpoints" / "best")["update"] == 4
    shutil.rmtree(tmp_path / "checkpoints" / "best")
    marked = []
    real_mark_best = ck.mark_best
    monkeypatch.setattr(ck, "mark_best", lambda path: marked.append(Path(path).name) or real_mark_best(path))
    fit(tmp_path, resume=True, max_updates=8, eval_every=4, keep_last=1)
    assert marked[0] == "update_00000004"
    best = ck.read_state(tmp_path / "checkpoints" / "best")
    assert best["update"] == best["best_update"] in (4, 8)


def test_a_run_without_its_own_tokenizer_reads_the_one_its_config_names(tmp_path, monkeypatch, small_translation):
    """A fine-tuning grid's runs keep no tokenizer.model; their config names the grid's (``normlab finetune --out
    ft`` writes ``ft/tokenizer.model``, relative to where it ran). RunDir.tokenizer finds it from the run's own
    directories wherever the command is run from, and says so in one line when it is gone."""
    grid = tmp_path / "work" / "ft"
    run = grid / "runs" / "bs32" / "seed1"
    run.mkdir(parents=True)
    (grid / "tokenizer.model").write_bytes(small_translation.tokenizer.proto)
    vocab = small_translation.tokenizer.vocab_size
    cfg = TrainConfig().replace(data=TrainConfig().data.replace(tokenizer="ft/tokenizer.model"),
                                model=TrainConfig().model.replace(vocab_size=vocab))  # fmt: skip
    RunDir(run).write_config(cfg)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert RunDir(run).tokenizer().proto == small_translation.tokenizer.proto
    # another experiment's ft/tokenizer.model in the current directory: the run's own grid folder comes first
    (elsewhere / "ft").mkdir()
    (elsewhere / "ft" / "tokenizer.model").write_bytes(b"not this one")
    assert RunDir(run).tokenizer().proto == small_translation.tokenizer.proto
    (elsewhere / "ft" / "tokenizer.model").unlink()
    (grid / "tokenizer.model").unlink()
    with pytest.raises(ConfigError, match="data.tokenizer ft/tokenizer.model is not found"):
        RunDir(run).tokenizer()


def test_eval_lines_keep_the_scored_files_rows(tmp_path):
    """evaluate's .hyp / .pred: output i on data row rows[i] of the scored file, an empty line for a row not scored
    (dropped when read or for its length), the whole file when every kept example was scored, up to the last one
    scored when only the first were (--limit); the rows not scored named 1-based."""
    rd = RunDir(tmp_path)
    ckpt = tmp_path / "checkpoints" / "best"
    got = rd.write_eval_lines("test", ckpt, ".pred", ["a", "b", "c"], [0, 2, 3], 6)
    assert Path(got["file"]) == rd.eval_file("test", ckpt, ".pred")
    assert Path(got["file"]).read_text() == "a\n\nb\nc\n\n\n" and got["rows_not_scored"] == [2, 5, 6]
    first = rd.write_eval_lines("test", ckpt, ".hyp", ["a", "b"], [0, 2, 3], None)  # --limit 2
    assert Path(first["file"]).read_text() == "a\n\nb\n" and (first["lines"], first["rows_not_scored"]) == (3, [2])
    plain = rd.write_eval_lines("own", ckpt, ".hyp", ["x", "y"], None, None)  # no rows known: as they are
    assert Path(plain["file"]).read_text() == "x\ny\n" and plain["rows_not_scored"] == []
    for rows, data_rows in (([0, 0, 1], 6), ([0, 2, 9], 6), ([0, 2], 6)):  # repeated, beyond the file, too few
        with pytest.raises(ValueError):
            rd.write_eval_lines("test", ckpt, ".pred", ["a", "b", "c"], rows, data_rows)
