"""The bundled run configs (normlab/assets/configs): every YAML is a valid TrainConfig, the BERT configs are
BERT-shaped, the Post-LN ones export, the translation recipe is the run its measurements come from, and
``--config`` finds them by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from normlab.assets import bundled_configs, config_file, configs_dir, load_config_file
from normlab.config import ConfigError, Placement, TrainConfig, load_yaml
from normlab.hf import export_refusal

CONFIGS = sorted(configs_dir().glob("*.yaml"))
BERT = [p for p in CONFIGS if p.stem.startswith("bert-")]


def load(path: Path) -> TrainConfig:
    return TrainConfig.from_dict(load_yaml(path.read_text(encoding="utf-8")))


def test_there_are_configs():
    names = {p.stem for p in CONFIGS}
    assert {"bert-base-post", "bert-base-pre", "bert-tiny-post", "bert-tiny-pre", "de-en-cpu"} <= names
    assert all(load(p) for p in CONFIGS)  # strict: an unknown key or a bad value raises


def test_de_en_cpu_is_its_measured_run():
    """Issue 37's recipe (`--config de-en-cpu`) is the run whose curve and test BLEU docs/results/de-en-cpu
    reports: the same settings but where the run was pinned to its machine (device, precision, the data cache,
    the log cadence); its length is budget_hours', its guard on the wall time (max_hours) the recipe's too."""
    cfg = load(configs_dir() / "de-en-cpu.yaml")
    assert (cfg.data.task, cfg.model.placement, cfg.schedule.warmup_updates, cfg.schedule.decay) == (
        "translation", Placement.PRE, 0, "linear")  # fmt: skip
    assert cfg.budget_hours and cfg.budget_at == 100 and cfg.max_hours > cfg.budget_hours
    run = Path(__file__).parents[1] / "docs/results/de-en-cpu/runs/cpu-d256-lr1e-3-budget1.8h/config.yaml"
    measured = TrainConfig.from_dict(load_yaml(run.read_text(encoding="utf-8")))
    pinned = {"device": cfg.device, "precision": cfg.precision, "log_every": cfg.log_every}
    assert measured.replace(data=measured.data.replace(cache_dir=""), **pinned) == cfg


def test_a_short_trial_of_the_recipe_is_told_which_settings_allow_it():
    """`--set max_updates=50` on de-en-cpu (decay from update 100, length by budget_hours) is refused; the message
    names a decay_from that both the schedule and the budget's rule accept, and following it works."""
    from normlab.config import apply_overrides

    data = load_config_file("de-en-cpu")
    with pytest.raises(ConfigError, match=r"decay_from=100 is after the run's end \(max_updates=50\): .* \(with "
                       r"budget_hours: decay_from 20\.\.50, or budget_hours=0\)"):
        TrainConfig.from_dict(apply_overrides(data, ["max_updates=50"]))
    short = TrainConfig.from_dict(apply_overrides(data, ["max_updates=50", "schedule.decay_from=20"]))
    assert short.budget_at == 20 and short.max_updates == 50
    assert TrainConfig.from_dict(apply_overrides(data, ["max_updates=50", "schedule.decay_from=0", "budget_hours=0"]))
    with pytest.raises(ConfigError, match=r"\(and budget_hours=0: too short to time\)"):
        TrainConfig.from_dict(apply_overrides(data, ["max_updates=10"]))


@pytest.mark.slow
def test_the_gpu_ceiling_script_runs_its_smoke_version(tmp_path, data_cache):
    """Issue 37's device script (docs/results/de-en-cpu/gpu-calibration/device-ceiling.sh) waits for a session with
    a GPU; its plumbing (the --set keys, the recipe by name, the report of the curve and the test BLEU) is run here
    on a tiny model, so that a lent GPU's minutes are not lost to a typo."""
    import os
    import subprocess
    import sys

    root = Path(__file__).parents[1]
    env = dict(os.environ, OUT=str(tmp_path), DEVICE="cpu", SMOKE="1", OMP_NUM_THREADS="1",
               NORMLAB_CACHE=str(data_cache),
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")  # its python3: this one
    out = subprocess.run(["bash", str(root / "docs/results/de-en-cpu/gpu-calibration/device-ceiling.sh")], cwd=root,
                         env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "status completed update 6" in out.stdout and "epoch 1 update 6: valid nll" in out.stdout, out.stdout
    assert "test {'checkpoint': " in out.stdout and "'bleu': None" not in out.stdout
    assert (tmp_path / "train.log").is_file() and (tmp_path / "ceiling-d512" / "summary.json").is_file()


@pytest.mark.parametrize("path", BERT, ids=lambda p: p.name)
def test_config_parses(path):
    cfg = load(path)  # strict: an unknown key or a bad value raises
    assert cfg.data.task == "mlm"
    m = cfg.model
    # BERT's shape (hf.py's export needs all of it for the Post-LN ones; the Pre-LN twins share it)
    assert (m.positional, m.scale_embedding, m.embedding_norm, m.type_vocab_size, m.activation) == (
        "learned", False, True, 2, "gelu")  # fmt: skip
    assert m.placement.value in path.stem
    assert cfg.data.block_size <= m.max_positions
    assert cfg.schedule.decay == "linear"
    assert cfg.schedule.warmup_updates < cfg.max_updates
    if m.placement is Placement.POST:
        assert export_refusal(m) is None
        assert cfg.optim.lr == 1e-4 and cfg.schedule.warmup_updates > 0  # the paper's Post-LN BERT
    else:
        assert "cannot be exported to BERT" in export_refusal(m)
        assert cfg.optim.lr == 3e-4 and cfg.schedule.warmup_updates == 0  # the paper's Pre-LN BERT


def test_bert_base_is_the_papers():
    for placement, lr, warmup in (("post", 1e-4, 10_000), ("pre", 3e-4, 0)):
        cfg = load(configs_dir() / f"bert-base-{placement}.yaml")
        m = cfg.model
        assert (m.encoder_layers, m.d_model, m.n_heads, m.d_ffn) == (12, 768, 12, 3072)
        assert (cfg.optim.lr, cfg.schedule.warmup_updates, cfg.schedule.decay) == (lr, warmup, "linear")
        assert (m.max_positions, m.layer_norm_eps, m.dropout, m.attention_dropout) == (512, 1e-12, 0.1, 0.1)
        assert m.init == "bert"  # Devlin et al.'s initializer_range, which the paper's BERT runs follow
        assert cfg.data.max_tokens == 256 * cfg.data.block_size  # 256 blocks a batch: BERT's batch at length 128


def test_config_by_name_or_path(tmp_path, monkeypatch):
    assert bundled_configs() == [p.stem for p in CONFIGS]
    assert config_file("bert-tiny-post") == config_file("bert-tiny-post.yaml") == configs_dir() / "bert-tiny-post.yaml"
    assert load_config_file("bert-tiny-pre", "model")["placement"] == "pre"
    own = tmp_path / "bert-tiny-post.yaml"  # a file of the user's wins over the bundled one of the same name
    own.write_text("model:\n  placement: pre\n")
    monkeypatch.chdir(tmp_path)
    assert config_file("bert-tiny-post.yaml").resolve() == own
    assert config_file("bert-tiny-post") == configs_dir() / own.name
    # the path before configs/ moved into the package
    with pytest.raises(ConfigError, match=r"^--config configs/bert-tiny-post.yaml: no such file; the bundled config "
                                          r"is --config bert-tiny-post$"):  # fmt: skip
        config_file("configs/bert-tiny-post.yaml")
    with pytest.raises(ConfigError, match=r"no such file, nor a bundled config \(bert-base-post, "):
        config_file("bert-huge")
