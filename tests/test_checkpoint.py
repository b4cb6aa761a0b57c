"""Checkpoints: safetensors + JSON, atomic, rotation keeps the best, loading restores everything exactly."""

from __future__ import annotations

import json

import pytest
import torch

from normlab.config import OptimConfig
from normlab.model import Seq2Seq
from normlab.rundir import RunDir
from normlab.train import checkpoint as ck
from normlab.train.optim import build_optimizer
from tests.conftest import tiny_config


def _trained(seed=0):
    torch.manual_seed(seed)
    model = Seq2Seq(tiny_config(share_embeddings="all"))
    opt = build_optimizer(model, OptimConfig(lr=1e-3))
    src = torch.randint(1, 50, (2, 5))
    model(src, src).logsumexp(-1).mean().backward()
    opt.step()
    return model, opt


def test_round_trip_is_exact(tmp_path):
    model, opt = _trained()
    torch.manual_seed(123)
    path = ck.save_checkpoint(tmp_path, 7, model, opt, {"epoch": 2, "note": "x"})
    expected_draw = torch.rand(3)
    assert sorted(p.name for p in path.iterdir()) == ["model.safetensors", "optimizer.safetensors", "state.json"]
    model2, opt2 = _trained(seed=1)
    state = ck.load_checkpoint(path, model2, opt2, restore_rng=True)
    assert torch.equal(torch.rand(3), expected_draw)  # the RNG continues where it was saved
    assert state["update"] == 7 and state["epoch"] == 2 and state["note"] == "x"
    for (n, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert torch.equal(a, b), n
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for i in s1["state"]:
        for k in s1["state"][i]:
            assert torch.equal(torch.as_tensor(s1["state"][i][k]), torch.as_tensor(s2["state"][i][k]))
    # tied weights stay tied after loading
    assert model2.output_projection.weight is model2.encoder.embed_tokens.weight


def test_no_pickle_anywhere(tmp_path):
    model, opt = _trained()
    path = ck.save_checkpoint(tmp_path, 1, model, opt, {})
    json.loads((path / "state.json").read_text())
    for f in ("model.safetensors", "optimizer.safetensors"):
        head = (path / f).read_bytes()[:16]
        assert not head.startswith(b"\x80"), "pickle protocol header"
        assert not head.startswith(b"PK"), "torch.save zip archive"


def test_rotation_keeps_last_k_and_best(tmp_path):
    model, opt = _trained()
    for u in (1, 2, 3, 4):
        p = ck.save_checkpoint(tmp_path, u, model, opt, {})
        if u == 2:
            ck.mark_best(p)
        ck.rotate(tmp_path, keep_last=2)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["update_00000003", "update_00000004"]
    assert ck.read_state(tmp_path / "best")["update"] == 2


def test_interrupted_save_is_invisible(tmp_path):
    model, opt = _trained()
    ck.save_checkpoint(tmp_path, 1, model, opt, {})
    (tmp_path / ".tmp-abc").mkdir()  # what a kill during a save leaves behind
    (tmp_path / ".tmp-abc" / "model.safetensors").write_bytes(b"half")
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["update_00000001"]
    ck.rotate(tmp_path, keep_last=5)
    assert not (tmp_path / ".tmp-abc").exists()


def test_resolve(tmp_path):
    model, opt = _trained()
    run = RunDir(tmp_path)
    with pytest.raises(ck.CheckpointError, match="no checkpoint found"):
        run.resolve("best")
    ckpts = tmp_path / "checkpoints"
    for u in (3, 9):
        ck.save_checkpoint(ckpts, u, model, opt, {})
    assert run.resolve("best").name == "update_00000009"  # no best yet: the last
    assert run.resolve("3").name == "update_00000003"
    ck.mark_best(ckpts / "update_00000003")
    assert run.resolve("best").name == "best"
    with pytest.raises(ck.CheckpointError, match=r"no checkpoint at update 4 \(have: 3, 9\)"):
        run.resolve("4")
    with pytest.raises(ck.CheckpointError, match="'best', 'last', an update number or avg:N"):
        run.resolve("newest")
    with pytest.raises(ck.CheckpointError, match="an average of checkpoints is for evaluate"):
        run.resolve("avg:2")  # one checkpoint wanted (finetune --checkpoint)


def test_average_of_the_last_checkpoints(tmp_path):
    """avg:N: the mean of the last N checkpoints' weights (fairseq's average_checkpoints.py), loaded into the
    model whole (tied weights tied), fp64 accumulation; too few checkpoints or different models: one line."""
    run = RunDir(tmp_path)
    ckpts = tmp_path / "checkpoints"
    models = []
    for u, seed in ((1, 1), (2, 2), (3, 3)):
        model, opt = _trained(seed)
        ck.save_checkpoint(ckpts, u, model, opt, {})
        models.append(model)
    paths = run.resolve_average("avg:2")
    assert [p.name for p in paths] == ["update_00000002", "update_00000003"] and run.resolve_average("3") is None
    avg = ck.average_weights(paths)
    target = Seq2Seq(tiny_config(share_embeddings="all"))
    ck.load_average(paths, target)
    for name, t in target.state_dict().items():
        a, b = models[1].state_dict()[name], models[2].state_dict()[name]
        want = ((a.double() + b.double()) / 2).to(a.dtype) if a.is_floating_point() else a
        torch.testing.assert_close(t, want, rtol=0, atol=0, msg=name)
    assert target.output_projection.weight is target.encoder.embed_tokens.weight
    assert set(avg) <= set(target.state_dict())  # stored once per tied group, as save_model writes it
    three = ck.average_weights(run.resolve_average("avg:3"))
    for name, t in three.items():
        if t.is_floating_point():
            torch.testing.assert_close(t, sum(m.state_dict()[name] for m in models) / 3, msg=name)
    with pytest.raises(ck.CheckpointError, match=r"avg:4 needs 4 checkpoints, the run kept 3 \(train with --set "
                       r"keep_last=4"):  # fmt: skip
        run.resolve_average("avg:4")
    with pytest.raises(ck.CheckpointError, match="at least 2 checkpoints"):
        run.resolve_average("avg:1")
    other = Seq2Seq(tiny_config(share_embeddings="all", d_model=16, n_heads=2, d_ffn=32))
    ck.save_checkpoint(ckpts, 4, other, build_optimizer(other, OptimConfig(lr=1e-3)), {})
    with pytest.raises(ck.CheckpointError, match=r"update_00000004: \S+ is \(\d+, 16\)"):
        ck.average_weights(run.resolve_average("avg:2"))



def test_average_never_reaches_into_the_keep_every_snapshots(tmp_path):
    """avg:N averages the run's last N saves. Beyond its last keep_last checkpoints a run with keep_every keeps
    snapshots far apart (and a resume may have raised keep_last): checkpoints older than the last saves' unbroken
    tail and further apart than its saves are refused; evenly spaced ones are averaged whatever kept them
    (save_every = keep_every, as experiments/figures.py trains), and a run without keep_every is never refused,
    whatever a resume changed in its cadence."""
    import yaml

    from normlab.config import TrainConfig

    model, opt = _trained()

    def run_with(name, updates, **cfg):
        for u in updates:
            ck.save_checkpoint(tmp_path / name / "checkpoints", u, model, opt, {})
        (tmp_path / name / "config.yaml").write_text(yaml.safe_dump(TrainConfig(**cfg).to_dict()))
        return RunDir(tmp_path / name)

    # keep_every=1000's snapshots, then the last saves every 100 updates (keep_last raised from 2 to 3 on resume)
    run = run_with("snapshots", (1000, 2000, 2400, 2500, 2600), save_every=100, keep_last=3, keep_every=1000)
    assert [p.name for p in run.resolve_average("avg:3")] == ["update_00002400", "update_00002500", "update_00002600"]
    with pytest.raises(ck.CheckpointError, match=r"avg:4 would average checkpoints 400 updates apart \(updates 2000 "
                       r"and 2400\), where the run's last saves are 100 apart: update 2000 and older are keep_every "
                       r"snapshots \(every 1000 updates\), not its last saves; name avg:3 or less"):  # fmt: skip
        run.resolve_average("avg:4")
    even = run_with("even", (100, 200, 300, 350), save_every=100, keep_last=1, keep_every=100)  # 350: the run's end
    assert len(even.resolve_average("avg:4")) == 4
    # per-epoch saves (save_every 0), 500 updates an epoch: 2000 is a save of the tail's cadence, 1000 a snapshot
    epochs = run_with("epochs", (1000, 2000, 2500, 3000), keep_last=2, keep_every=1000)
    assert len(epochs.resolve_average("avg:3")) == 3
    with pytest.raises(ck.CheckpointError, match=r"1000 updates apart \(updates 1000 and 2000\), where the run's last "
                       r"saves are 500 apart"):  # fmt: skip
        epochs.resolve_average("avg:4")
    # no keep_every: the kept checkpoints are the last saves, also after a resume added eval_every (250 apart now)
    resumed = run_with("resumed", (3000, 4000, 4250, 4500, 4750), keep_last=5, eval_every=250)
    assert len(resumed.resolve_average("avg:5")) == 5


def test_wrong_model_is_an_error(tmp_path):
    model, opt = _trained()
    path = ck.save_checkpoint(tmp_path, 1, model, opt, {})
    for other in (Seq2Seq(tiny_config(encoder_layers=3)), Seq2Seq(tiny_config(d_ffn=48))):
        with pytest.raises(ck.CheckpointError, match="does not fit the model"):
            ck.load_checkpoint(path, other)


def test_keep_every_spares_multiples(tmp_path):
    model, opt = _trained()
    for u in (2, 3, 4, 5, 6, 7):
        ck.save_checkpoint(tmp_path, u, model, opt, {})
        ck.rotate(tmp_path, keep_last=1, keep_every=3)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["update_00000003", "update_00000006", "update_00000007"]
