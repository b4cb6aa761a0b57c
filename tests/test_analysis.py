"""Tiny-config tests of the analyses (Figure 3, Theorem 1, Lemmas 2-3, concentration) and `normlab analyze`."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normlab.analysis.gradients import (
    GradientMoments,
    expected_gradients,
    ffn_weights,
    figure3ab,
    figure3cd,
    fit_loglog_slope,
    fit_paired_loglog_slope,
    training_loss,
)
from normlab.analysis.sources import load_checkpoint, synthetic_translation_batches
from normlab.analysis.theory import (
    concentration_delta,
    concentration_table,
    hidden_norms,
    lemma2_pre_bounds,
    lemma2_theory,
    lemma3,
    theory_config,
)
from normlab.data.batch import BOS, EOS, PAD
from normlab.model import MaskedLM, Seq2Seq
from tests.conftest import tiny_config


def _batches(n=3, V=50, max_tokens=96, seed=0):
    return synthetic_translation_batches(n, vocab_size=V, max_tokens=max_tokens, seed=seed)


# ---- batches and loss ------------------------------------------------------------------------------------


def test_synthetic_batches_follow_the_batch_contract():
    batches = _batches(4, V=100, max_tokens=256)
    for b in batches:
        B, S = b.src.shape
        T = b.tgt_in.shape[1]
        assert B * max(S, T) <= 256 + B  # fairseq's token budget, padding included (eos/bos add one)
        assert (b.tgt_in[:, 0] == BOS).all()
        assert b.n_tokens == int(b.tgt_out.ne(PAD).sum())
        # tgt_out is tgt_in shifted left, ending with eos
        for i in range(B):
            n = int(b.tgt_out[i].ne(PAD).sum())
            assert b.tgt_out[i, n - 1] == EOS
            assert torch.equal(b.tgt_out[i, : n - 1], b.tgt_in[i, 1:n])
        assert b.src.max() < 100 and b.src[b.src.ne(PAD) & b.src.ne(EOS)].min() >= 7
    again = _batches(4, V=100, max_tokens=256)
    assert all(torch.equal(a.src, b.src) for a, b in zip(batches, again))


def test_training_loss_is_fairseq_label_smoothing_per_token():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    target = torch.tensor([[3, 4, 5, PAD, PAD], [7, 8, 9, 10, 3]])
    eps, n = 0.1, int(target.ne(PAD).sum())
    lp = logits.log_softmax(-1)
    keep = target.ne(PAD)
    nll = -lp.gather(-1, target[..., None])[..., 0][keep].sum()
    smooth = -lp.sum(-1)[keep].sum()
    eps_i = eps / (11 - 1)  # fairseq: eps spread over the V - 1 other classes; sample_size = ntokens
    expected = ((1 - eps - eps_i) * nll + eps_i * smooth) / n
    torch.testing.assert_close(training_loss(logits, target, n, eps), expected)


# ---- the expected-gradient statistic ----------------------------------------------------------------------


def test_norm_of_mean_is_not_mean_of_norms():
    """Gradients that disagree between batches: the paper's statistic (norm of the mean) cancels them, the
    mean of the norms does not."""
    g = torch.tensor([[3.0, 4.0]])
    m = GradientMoments(["w"])
    m.add({"w": g})
    m.add({"w": -g})
    assert m.norm_of_mean("w") == 0.0
    assert m.mean_of_norms("w") == 5.0
    m2 = GradientMoments(["w"])
    for k in range(4):
        m2.add({"w": g + (-1) ** k * torch.tensor([[1.0, 0.0]])})
    assert m2.norm_of_mean("w") == pytest.approx(5.0)
    assert m2.mean_of_norms("w") == pytest.approx((math.hypot(4, 4) + math.hypot(2, 4)) / 2)
    # de-biased: ||mean||^2 - tr(Cov)/M, tr(Cov) = sum ||g - mean||^2 / (M - 1) = 4/3
    assert m2.debiased_norm("w") == pytest.approx(math.sqrt(25 - (4 / 3) / 4))


def test_figure3ab_equals_independent_backward_average():
    """figure3ab's number is ||mean_m grad_m||_F, recomputed here with plain loss.backward() per batch."""
    cfg = tiny_config(encoder_layers=2, decoder_layers=3, dropout=0.0)
    torch.manual_seed(0)
    model = Seq2Seq(cfg)
    batches = _batches(3)
    res = figure3ab(model, batches, mode="eval")
    grads = {}
    for b in batches:
        model.zero_grad()
        training_loss(model(b.src, b.tgt_in), b.tgt_out, b.n_tokens).backward()
        for name, (stack, layer, which) in ffn_weights(model).items():
            grads.setdefault((stack, layer, which), []).append(dict(model.named_parameters())[name].grad.clone())
    for (stack, layer, which), gs in grads.items():
        norm_of_mean = torch.stack(gs).mean(0).norm().item()
        mean_of_norms = float(np.mean([g.norm().item() for g in gs]))
        assert res["expected"][stack][f"w{which}"][layer - 1] == pytest.approx(norm_of_mean, rel=1e-5)
        assert res["mean_of_norms"][stack][f"w{which}"][layer - 1] == pytest.approx(mean_of_norms, rel=1e-5)
        assert norm_of_mean < mean_of_norms  # batches disagree: the two statistics differ
    assert len(res["expected"]["encoder"]["w1"]) == 2 and len(res["expected"]["decoder"]["w2"]) == 3


def test_train_mode_is_seeded_and_differs_from_eval():
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(dropout=0.3))
    names = ["decoder.layers.1.ffn.w2.weight"]
    a, _ = expected_gradients(model, _batches(2), names, mode="train", seed=5)
    b, _ = expected_gradients(model, _batches(2), names, mode="train", seed=5)
    c, _ = expected_gradients(model, _batches(2), names, mode="eval")
    assert a.norm_of_mean(names[0]) == b.norm_of_mean(names[0])
    assert a.norm_of_mean(names[0]) != c.norm_of_mean(names[0])
    assert model.training  # the caller's mode is restored


def test_figure3cd_structure_and_paired_initialisation():
    base = tiny_config(dropout=0.0)
    batches = {s: _batches(1, seed=s) for s in (1, 2)}
    res = figure3cd(base, depths=(1, 2), schemes=("post", "pre"), seeds=(1, 2), batches_for_seed=batches.__getitem__, mode="eval")
    for p in ("post", "pre"):
        for s in ("encoder", "decoder"):
            e = res[p][s]
            assert np.asarray(e["per_seed"]).shape == (2, 2)
            assert e["mean"] == pytest.approx(np.mean(e["per_seed"], 1).tolist())
            assert set(e["fit"]) >= {"slope", "stderr"} and e["paired"]["slope"] == pytest.approx(e["fit"]["slope"]) == e["slope"]
    # a seed initialises Post-LN and Pre-LN models with the same weight matrices
    torch.manual_seed(1)
    post = dict(Seq2Seq(base.replace(placement="post")).named_parameters())
    torch.manual_seed(1)
    pre = dict(Seq2Seq(base.replace(placement="pre")).named_parameters())
    for name in ("encoder.layers.0.ffn.w2.weight", "decoder.layers.1.self_attn.qkv.weight", "decoder.embed_tokens.weight"):
        assert torch.equal(post[name], pre[name])


def test_figure3cd_scans_any_scheme_and_says_when_the_slope_is_undefined():
    """The depth scan takes sweep's spelling (PLACEMENT[/NORM]); ReZero's W^2 has no gradient at init (alpha = 0),
    so its slope is None with the reason, never NaN."""
    base = tiny_config(dropout=0.0)
    batches = {s: _batches(1, seed=s) for s in (1, 2)}
    schemes = ("post", "rezero", "pre/rmsnorm")
    res = figure3cd(base, depths=(1, 2), schemes=schemes, seeds=(1, 2), batches_for_seed=batches.__getitem__, mode="eval")
    assert res["schemes"] == list(schemes) and set(res["slopes"]) == set(schemes)
    for scheme in ("post", "pre/rmsnorm"):
        for s in ("encoder", "decoder"):
            e = res["slopes"][scheme][s]
            assert math.isfinite(e["slope"]) and e["slope_undefined"] is None
            assert e["slope"] == res[scheme][s]["paired"]["slope"]
    for s in ("encoder", "decoder"):
        assert res["rezero"][s]["mean"] == [0.0, 0.0]
        e = res["slopes"]["rezero"][s]
        assert e["slope"] is None and e["slope_stderr"] is None and "is 0 at 4 of 4" in e["slope_undefined"]
    assert res["slopes"]["post"]["theory"] == 0.0 and res["slopes"]["pre/rmsnorm"]["theory"] is None
    json.dumps(res["slopes"], allow_nan=False)
    # pre/rmsnorm is the Pre-LN model with RMSNorm: the models figure3cd builds for it (seen through the class it
    # instantiates) have RMSNorm modules in Pre-LN's slots and no LayerNorm
    import normlab.analysis.gradients

    built = []

    class Recording(normlab.analysis.gradients.Seq2Seq):
        def __init__(self, cfg):
            super().__init__(cfg)
            built.append(self)

    with pytest.MonkeyPatch.context() as mp:  # the name figure3cd builds its models with (imported from normlab.model)
        mp.setattr(normlab.analysis.gradients, "Seq2Seq", Recording)
        figure3cd(base, depths=(1,), schemes=("pre/rmsnorm",), seeds=(1,), batches_for_seed=batches.__getitem__,
                  mode="eval")
    assert built
    for model in built:
        assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
        for st in (model.encoder, model.decoder):
            assert isinstance(st.final_norm, nn.RMSNorm)
            assert all(isinstance(layer.ffn.norm_in, nn.RMSNorm) for layer in st.layers)


def test_paired_slope_removes_per_seed_levels():
    depths = np.array([6, 8, 10, 12, 14], dtype=float)
    levels = np.array([0.5, 1.0, 3.0])  # one seed's batch gives large gradients at every depth
    noise = np.array([[1.0, 1.02, 0.98]] * 5)
    y = levels[None, :] * depths[:, None] ** -0.5 * noise
    paired = fit_paired_loglog_slope(depths, y)
    pooled = fit_loglog_slope(np.repeat(depths, 3), y.ravel())
    assert paired["slope"] == pytest.approx(pooled["slope"]) == pytest.approx(-0.5)
    assert paired["stderr"] < pooled["stderr"] / 100  # the levels inflate only the pooled error
    assert len(paired["per_seed"]) == 3


def test_loglog_slope_recovers_power_law():
    x = np.array([6, 8, 10, 12, 14] * 3, dtype=float)
    fit = fit_loglog_slope(x, 3.0 * x**-0.5)
    assert fit["slope"] == pytest.approx(-0.5) and fit["stderr"] == pytest.approx(0.0, abs=1e-12)
    assert fit_loglog_slope(x, np.full_like(x, 1.6))["slope"] == pytest.approx(0.0, abs=1e-12)


# ---- Lemma 2, Lemma 3, concentration ---------------------------------------------------------------------


def test_theory_setting_has_uniform_attention():
    """W^Q = W^K = 0: Attn(x_i) = (1/n) sum_j x_j W^V W^O, the same vector at every position (Section 3.3)."""
    cfg = theory_config(32, 2, "post", 6)
    assert cfg.n_heads == 1 and cfg.d_ffn == 32 and cfg.init == "theory"
    torch.manual_seed(0)
    stack = MaskedLM(cfg).encoder.eval()
    rec = {}
    with torch.no_grad():
        stack.run_layers(torch.randn(2, 6, 32), record=rec)
    x1 = rec["layers"][1]["table1"]["x1"]
    torch.testing.assert_close(x1, x1[:, :1].expand_as(x1))


def test_lemma2_theory_setting():
    post = lemma2_theory("post", d=256, n_layers=4, n_positions=16, batch_size=8, seeds=range(3))
    assert len(post["mean"]) == 4 and post["layers"] == [1, 2, 3, 4]
    for m in post["mean"]:
        assert m == pytest.approx(1.5, rel=0.06)  # Lemma 2: 3/2 (sampling error at d = 256: a few %)
    pre = lemma2_theory("pre", d=256, n_layers=4, n_positions=16, batch_size=8, seeds=range(3))
    assert pre["layers"] == [0, 1, 2, 3, 4] and pre["mean"][0] == pytest.approx(1.0, rel=0.02)
    assert pre["within"][0] is None and all(pre["within"][1:])
    assert pre["lower"][4] == 3.0 and pre["upper"][4] == 7.0
    assert all(b > a for a, b in zip(pre["mean"], pre["mean"][1:]))  # grows with depth


def test_lemma2_bounds():
    assert lemma2_pre_bounds(0) == (1.0, 1.0)
    assert lemma2_pre_bounds(2) == (2.0, 4.0)
    assert lemma2_pre_bounds(2, start=1.5, attention_sublayers=2) == (2.5, 6.5)


def test_hidden_norms_skip_padding():
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(placement="pre")).eval()
    b = _batches(1, max_tokens=96)[0]
    assert b.src.eq(PAD).any()
    res = hidden_norms(model, [b])
    with torch.no_grad():
        _, rec = model(b.src, b.tgt_in, return_intermediates=True)
    x = rec["encoder"]["layers"][1]["table1"]["x_next"]
    expected = (x.pow(2).sum(-1) / 32)[b.src.ne(PAD)].double().mean().item()
    assert res["encoder"]["stream"]["mean"][2] == pytest.approx(expected, rel=1e-6)
    assert len(res["decoder"]["stream"]["mean"]) == 3 and "within_from_measured_input" in res["decoder"]["stream"]


def test_lemma3_autograd_against_sqrt_d_over_norm():
    res = lemma3(d=32, scales=(0.1, 1.0, 10.0, 100.0), per_scale=2)
    centred = res["families"]["centred"]
    # for zero-mean inputs ||J||_2 = sqrt(d)/||x - mean(x)||, a hair above sqrt(d)/||x||
    assert 1.0 <= centred["fitted_constant"] < 1.1
    assert centred["loglog_slope_vs_x_norm"] == pytest.approx(-1.0, abs=0.01)
    assert res["families"]["offset"]["fitted_constant"] > centred["fitted_constant"]


def test_concentration_delta():
    assert concentration_delta(torch.tensor([1.0, 1.0, 1.0, 2.0]), 0.1) == 0.25  # mean 1.25: only 2 exceeds
    assert concentration_delta(torch.ones(10), 0.1) == 0.0
    table = concentration_table([torch.tensor([1.0, 1.0, 1.0, 2.0]), torch.tensor([1.0, 0.5, 1.5, 1.0])], 0.1)
    assert table["delta"] == [0.25, 0.25] and table["delta_last"] == 0.25 and table["two_sided"] == [1.0, 0.5]
    # Appendix G: ||Y||^2 of a d-dim standard Gaussian is (eps, exp(-d eps^2 / 8))-bounded
    g = torch.Generator().manual_seed(0)
    z = torch.randn(4000, 512, generator=g).pow(2).sum(-1)
    assert concentration_delta(z, 0.1) <= math.exp(-512 * 0.01 / 8)


# ---- checkpoint after warm-up -----------------------------------------------------------------------------


def _save_checkpoint(model, path):
    from safetensors.torch import save_model

    save_model(model, str(path / "model.safetensors"))
    (path / "model.json").write_text(json.dumps({"model": model.cfg.to_dict(), "task": "translation"}))


def test_load_checkpoint_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config())
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for b in _batches(2):  # a couple of updates, so that the weights are not those of an initialisation
        opt.zero_grad()
        training_loss(model(b.src, b.tgt_in), b.tgt_out, b.n_tokens).backward()
        opt.step()
    _save_checkpoint(model, tmp_path)
    loaded = load_checkpoint(tmp_path)
    for (n, p), (_, q) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(p, q), n
    assert loaded.output_projection.weight is loaded.decoder.embed_tokens.weight  # still tied


def test_load_trainer_checkpoint(tmp_path):
    """The trainer's layout: RUN/checkpoints/update_N/{model.safetensors, state.json with the run config}."""
    from normlab.config import TrainConfig
    from normlab.train.checkpoint import save_checkpoint

    cfg = TrainConfig(model=tiny_config(placement="post").to_dict())
    torch.manual_seed(1)
    model = Seq2Seq(cfg.model)
    path = save_checkpoint(tmp_path / "run" / "checkpoints", 4000, model, None, {"config": cfg.to_dict()})
    for where in (path, tmp_path / "run"):  # the checkpoint itself, or the run (its last checkpoint)
        loaded = load_checkpoint(where)
        assert loaded.cfg == cfg.model
        assert torch.equal(loaded.decoder.layers[1].ffn.w2.weight, model.decoder.layers[1].ffn.w2.weight)
    with pytest.raises(Exception, match="expected a trainer checkpoint"):
        load_checkpoint(tmp_path)


# ---- the command ---------------------------------------------------------------------------------------


def test_analyze_command_end_to_end(tmp_path):
    """`normlab analyze --scale smoke` with a checkpoint: analysis.json with claims C1-C6 and five figures."""
    torch.manual_seed(0)
    _save_checkpoint(Seq2Seq(tiny_config(vocab_size=64)), tmp_path)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "normlab", "analyze", "--scale", "smoke", "--out", str(out), "--checkpoint",
           str(tmp_path / "model.safetensors"), "--set", "depths=[2, 3]", "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "C3 post-LN" in proc.stdout and "figure 3(c,d)" in proc.stderr
    def no_nan(constant):
        raise AssertionError(f"analysis.json is not strict JSON: {constant}")

    res = json.loads((out / "analysis.json").read_text(), parse_constant=no_nan)
    assert set(res["claims"]) == {"C1", "C2", "C3", "C4", "C5", "C6"}
    assert {"slope", "mean", "stack"} <= set(res["claims"]["C3"]) and "delta" in res["claims"]["C6"]
    assert set(res["claims"]["C5"]["last_over_first"]) == {"post", "pre"}
    assert res["figure3ab"]["post_warmup"]["placement"] == "post"
    assert res["figure3cd"]["depths"] == [2, 3]
    c3 = res["claims"]["C3"]
    assert math.isfinite(c3["encoder"]["slope"]) and len(c3["decoder"]["mean"]) == 2
    assert res["claims"]["C2"]["theory"]["n_layers"] == 4
    for name in ("figure3ab.png", "figure3cd.png", "lemma2.png", "lemma3.png", "concentration.png"):
        assert (out / name).stat().st_size > 10_000, name
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


def test_analyze_rejects_bad_settings():
    proc = subprocess.run([sys.executable, "-m", "normlab", "analyze", "--scale", "smoke", "--out", "/nonexistent",
                           "--set", "depth=[2]"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown key 'depth'; did you mean 'depths'?" in proc.stderr


@pytest.mark.parametrize("given, message", [
    (["--schemes", "post,postln"], "AnalysisConfig.schemes: 'postln': unknown placement 'postln'; expected one of"),
    (["--schemes", "pre/batchnorm"], "unknown norm 'batchnorm'"),
    (["--schemes", "pre,pre/layernorm"], "repeated"),
    (["--schemes", "post,,pre"], "an empty scheme name"),
    (["--set", "schemes=[]"], "needs at least one scheme"),
])  # fmt: skip
def test_analyze_rejects_unknown_schemes(given, message, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "normlab", "analyze", "--scale", "smoke", "--out", str(out), *given],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_analyze_depth_scan_of_chosen_schemes(tmp_path):
    """`normlab analyze --schemes pre,rezero`: a slope per scheme in analysis.json (strict JSON: ReZero's is null
    with the reason), in the printed summary and in figure3cd.png; C3 needs post in the scan and is left out."""
    from normlab.analysis.run import AnalysisConfig, SCALES

    assert all(SCALES[name]().schemes == ("post", "pre") for name in SCALES)  # reproduce's Figure 3 is unchanged
    assert AnalysisConfig().schemes == ("post", "pre")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "normlab", "analyze", "--scale", "smoke", "--out", str(out), "--schemes",
           "pre, rezero", "--set", "depths=[2, 3]", "--threads", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Depth scan (Figure 3(c,d)" in proc.stdout
    assert re.search(r"rezero\s+decoder undefined \(zero gradient\), encoder undefined", proc.stdout), proc.stdout
    assert re.search(r"pre\s+decoder -?\d+\.\d+ \+- \d", proc.stdout), proc.stdout

    def no_nan(constant):
        raise AssertionError(f"analysis.json is not strict JSON: {constant}")

    res = json.loads((out / "analysis.json").read_text(), parse_constant=no_nan)
    cd = res["figure3cd"]
    assert cd["schemes"] == ["pre", "rezero"] and res["config"]["schemes"] == ["pre", "rezero"]
    assert math.isfinite(cd["slopes"]["pre"]["decoder"]["slope"]) and cd["slopes"]["pre"]["theory"] == -0.5
    assert cd["slopes"]["rezero"]["decoder"]["slope"] is None and cd["slopes"]["rezero"]["encoder"]["slope_undefined"]
    assert "C3" not in res["claims"] and "C4" in res["claims"]
    assert (out / "figure3cd.png").stat().st_size > 10_000
