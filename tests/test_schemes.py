"""The normalisation schemes (``placement``) and norm functions (``norm``, ``qk_norm``): each line of each
scheme's formula on the recorded intermediates (``return_intermediates``), init, decoding, training, the
analysis and diagnosis code paths, ``normlab model``'s description. Parity with torchscale and x-transformers
is tests/test_parity_refs.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normlab.config import ConfigError, Placement, placement_task_error
from normlab.model import (
    NORM_SLOTS, NORM_TYPES, DyT, MaskedLM, Omega, Seq2Seq, admin_profile, describe, plan_layer, profile_init,
)
from tests.conftest import tiny_config

# the schemes of the encoder-decoder these tests build; nGPT is decoder-only (tests/test_lm_schemes.py)
SCHEMES = [p.value for p in Placement if placement_task_error(p, "translation") is None]
NORMS = ["layernorm", "rmsnorm", "dyt", "none"]


def _ln(x):
    return F.layer_norm(x, x.shape[-1:], eps=1e-5)


def _batch(B=3, S=7, T=5, V=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, S), generator=g), torch.randint(1, V, (B, T), generator=g)


def _records(**overrides):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(**overrides)).eval()
    src, tgt = _batch()
    profile_init(model, (src, tgt))  # Admin's omega; a no-op for the other schemes
    with torch.no_grad():
        _, rec = model(src, tgt, return_intermediates=True)
    return model, rec


def _var(t):
    return t.double().var(unbiased=False)


def _sublayers(rec):
    """(stack, layer index, sub-layer name, record) of every sub-layer, in order."""
    for stack in ("encoder", "decoder"):
        for i, layer in enumerate(rec[stack]["layers"]):
            for sub in ("self_attn", "cross_attn", "ffn"):
                if sub in layer:
                    yield stack, i, sub, layer[sub]


# ---- norm functions ------------------------------------------------------------------------------------


def test_rmsnorm_formula():
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich 2019), g = 1 at init, on Pre-LN's slot."""
    model, rec = _records(placement="pre", norm="rmsnorm")
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert any(isinstance(m, nn.RMSNorm) for m in model.modules())
    for _, _, _, r in _sublayers(rec):
        x = r["input"]
        torch.testing.assert_close(r["branch_in"], x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))


def test_dyt_formula():
    """DyT(x) = gamma * tanh(alpha x) + beta, alpha = 0.5 at init (Zhu et al. 2025), gamma = 1, beta = 0."""
    model, rec = _records(placement="pre", norm="dyt")
    dyts = [m for m in model.modules() if isinstance(m, DyT)]
    assert dyts and all(float(m.alpha.detach()) == 0.5 for m in dyts)
    for _, _, _, r in _sublayers(rec):
        torch.testing.assert_close(r["branch_in"], torch.tanh(0.5 * r["input"]))
    with torch.no_grad():
        dyts[0].alpha.fill_(2.0)
        dyts[0].weight.normal_()
        dyts[0].bias.normal_()
        x = torch.randn(4, 32)
        torch.testing.assert_close(dyts[0](x), dyts[0].weight * torch.tanh(2.0 * x) + dyts[0].bias)
    # dyt_alpha reaches every DyT of a model, and init_weights (reset_parameters) restores it there
    m = MaskedLM(tiny_config(placement="peri", norm="dyt", dyt_alpha=1.0))
    dyts = [d for d in m.modules() if isinstance(d, DyT)]
    assert len(dyts) == 2 * 2 * 2 + 1 + 1  # in and out of 4 sub-layers, the final one, the head's
    assert [float(d.alpha.detach()) for d in dyts] == [1.0] * len(dyts)


def test_norm_none_is_the_identity():
    model, rec = _records(placement="pre", norm="none")
    assert not any(isinstance(m, NORM_TYPES) for m in model.modules())
    for _, _, _, r in _sublayers(rec):
        torch.testing.assert_close(r["branch_in"], r["input"])
    torch.testing.assert_close(rec["encoder"]["final"], rec["encoder"]["layers"][-1]["ffn"]["output"])


def test_qk_norm_normalises_each_heads_queries_and_keys():
    """softmax(N(q_h) N(k_h)^T / sqrt(d_h)) per head h, N over the head's d_h features (Dehghani et al. 2023)."""
    cfg = tiny_config(placement="pre", qk_norm=True)
    attn = Seq2Seq(cfg).encoder.layers[0].self_attn.eval()
    with torch.no_grad():
        attn.q_norm.weight.normal_(1.0, 0.3)
        attn.k_norm.bias.normal_(0.0, 0.3)
        h = torch.randn(2, 6, 32)
        q, k, v = attn.qkv(h).split(32, -1)
        heads = lambda t: t.unflatten(-1, (4, 8)).transpose(1, 2)  # noqa: E731
        qn = F.layer_norm(heads(q), (8,), attn.q_norm.weight, attn.q_norm.bias)
        kn = F.layer_norm(heads(k), (8,), attn.k_norm.weight, attn.k_norm.bias)
        probs = torch.softmax(qn @ kn.transpose(-1, -2) / math.sqrt(8), -1)
        want = attn.out((probs @ heads(v)).transpose(1, 2).flatten(2))
        torch.testing.assert_close(attn.branch(h), want, atol=1e-5, rtol=1e-5)
    names = dict(Seq2Seq(cfg).named_parameters())
    assert "decoder.layers.0.cross_attn.q_norm.weight" in names and "decoder.layers.0.cross_attn.k_norm.weight" in names
    with pytest.raises(ConfigError, match="qk_norm"):
        tiny_config(norm="none", qk_norm=True)


# ---- placements: one test per line of each formula ------------------------------------------------------


def test_deepnorm_lines():
    """x_{l+1} = LN(alpha x + G(x)) per sub-layer (Wang et al. 2022), no final LN; alpha by stack."""
    model, rec = _records(placement="deepnorm", encoder_layers=3, decoder_layers=2)
    alpha = {"encoder": 0.81 * (3**4 * 2) ** (1 / 16), "decoder": (3 * 2) ** 0.25}
    for stack, _, _, r in _sublayers(rec):
        torch.testing.assert_close(r["sum"], alpha[stack] * r["input"] + r["branch_out"])  # alpha x + G(x)
        torch.testing.assert_close(r["output"], _ln(r["sum"]))  # LN(.)
        torch.testing.assert_close(r["branch_in"], r["input"])  # the branch sees the raw x
    for stack in ("encoder", "decoder"):
        torch.testing.assert_close(rec[stack]["final"], rec[stack]["layers"][-1]["ffn"]["output"])
    enc = MaskedLM(tiny_config(placement="deepnorm", encoder_layers=6)).encoder
    assert enc.layers[0].plan.skip == pytest.approx(12**0.25) and enc.layers[0].plan.init_gain == pytest.approx(48**-0.25)


def test_subln_lines():
    """Sub-LN: x + W^O LN(Attn(LN(x))) and x + W^2 LN(act(W^1 LN(x))), final LN (Wang et al. 2022, Magneto)."""
    model, rec = _records(placement="subln")
    for stack, i, sub, r in _sublayers(rec):
        torch.testing.assert_close(r["branch_in"], _ln(r["input"]))
        torch.testing.assert_close(r["output"], r["input"] + r["branch_out"])
        if sub == "ffn":
            ffn = getattr(model, stack).layers[i].ffn
            with torch.no_grad():
                want = ffn.w2(_ln(ffn.act(ffn.w1(r["branch_in"]))))
            torch.testing.assert_close(r["branch_out"], want)
    assert isinstance(model.encoder.layers[0].self_attn.norm_inner, nn.LayerNorm)
    assert isinstance(model.decoder.layers[0].cross_attn.norm_out, nn.Identity)
    assert not hasattr(model.decoder.layers[0].cross_attn, "norm_inner")  # torchscale: self-attention only
    torch.testing.assert_close(rec["encoder"]["final"], _ln(rec["encoder"]["layers"][-1]["ffn"]["output"]))


@pytest.mark.parametrize("alpha, n_post", [(0.25, 1), (0.5, 2), (0.0, 0), (1.0, 4)])
def test_mixln_lines(alpha, n_post):
    """Mix-LN: layers l <= floor(alpha L) are Post-LN, x <- LN(x + F(x)); the rest Pre-LN, x <- x + F(LN(x))."""
    model, rec = _records(placement="mixln", mixln_alpha=alpha, encoder_layers=4, decoder_layers=4)
    for stack, i, _, r in _sublayers(rec):
        if i < n_post:
            torch.testing.assert_close(r["output"], _ln(r["input"] + r["branch_out"]))
            torch.testing.assert_close(r["branch_in"], r["input"])
        else:
            torch.testing.assert_close(r["branch_in"], _ln(r["input"]))
            torch.testing.assert_close(r["output"], r["input"] + r["branch_out"])
    # the final LN for every alpha, 1 (all Post-LN) included: the reference (github.com/pixeli99/MixLN, a LLaMA)
    # keeps its final norm whatever the split
    for stack in ("encoder", "decoder"):
        torch.testing.assert_close(rec[stack]["final"], _ln(rec[stack]["layers"][-1]["ffn"]["output"]))
        assert isinstance(getattr(model, stack).final_norm, nn.LayerNorm)


def test_lns_lines():
    """LayerNorm Scaling: the branch input of layer l is LN(x) / sqrt(l) (Sun et al. 2025); final LN."""
    _, rec = _records(placement="lns", encoder_layers=3)
    for _, i, _, r in _sublayers(rec):
        torch.testing.assert_close(r["branch_in"], _ln(r["input"]) / math.sqrt(i + 1))
        torch.testing.assert_close(r["output"], r["input"] + r["branch_out"])
    torch.testing.assert_close(rec["encoder"]["final"], _ln(rec["encoder"]["layers"][-1]["ffn"]["output"]))


def test_output_norm_lines():
    """OLMo 2: x <- x + LN(F(x)); the branch sees the raw x; final LN."""
    _, rec = _records(placement="output")
    for _, _, _, r in _sublayers(rec):
        torch.testing.assert_close(r["branch_in"], r["input"])
        torch.testing.assert_close(r["branch_out"].mean(-1), torch.zeros(r["input"].shape[:-1]), atol=1e-5, rtol=0)
        # and unit variance (gamma = 1 at init): a norm that lost its scaling keeps the zero mean
        torch.testing.assert_close(r["branch_out"].var(-1, unbiased=False), torch.ones(r["input"].shape[:-1]),
                                   atol=1e-3, rtol=0)
        torch.testing.assert_close(r["output"], r["input"] + r["branch_out"])
    torch.testing.assert_close(rec["decoder"]["final"], _ln(rec["decoder"]["layers"][-1]["ffn"]["output"]))


def test_rezero_lines():
    """ReZero: x <- x + a_l F(x), one a_l per layer shared by its sub-layers (the reference's `resweight`,
    github.com/majumderb/rezero rztx.py), a = 0 at init: every layer is the identity; no norm at all."""
    model, rec = _records(placement="rezero")
    assert not any(isinstance(m, NORM_TYPES) for m in model.modules())
    for stack in ("encoder", "decoder"):
        torch.testing.assert_close(rec[stack]["final"], rec[stack]["embed"])
    gates = [n for n, _ in model.named_parameters() if n.endswith("gain.alpha")]
    assert gates == [f"{st}.layers.{i}.self_attn.gain.alpha" for st in ("encoder", "decoder") for i in range(2)]
    with torch.no_grad():
        for i, layer in enumerate([*model.encoder.layers, *model.decoder.layers]):
            layer.self_attn.gain.alpha.fill_(0.1 * (i + 1))  # a_l = 0.1, 0.2 (encoder), 0.3, 0.4 (decoder)
        src, tgt = _batch()
        _, rec = model(src, tgt, return_intermediates=True)
    for stack, i, name, r in _sublayers(rec):
        a = 0.1 * (i + 1) + (0.2 if stack == "decoder" else 0.0)
        sub = getattr(getattr(model, stack).layers[i], name)
        kw = {"memory": rec["encoder"]["final"]} if name == "cross_attn" else {}
        if stack == "decoder" and name == "self_attn":
            kw = {"causal": True}
        with torch.no_grad():
            want = r["input"] + a * sub.branch(r["input"], **kw)
            torch.testing.assert_close(r["output"], want, msg=f"{stack}.{i}.{name}")
    # trained, the layer's one a moves by the sum of its sub-layers' gradients
    out = model(src, tgt)
    out.square().mean().backward()
    g = model.decoder.layers[0].self_attn.gain.alpha.grad
    assert g is not None and g.item() != 0.0 and model.decoder.layers[0].ffn.gain.alpha.grad is g


def test_admin_lines():
    """Admin: x <- LN(omega_i . x + F_i(x)) per sub-layer, no final LN (Liu et al. 2020, Eq. 5); omega_1 = 1 and
    omega_{i+1}^2 = Var[omega_i x_i] + Var[F_i(x_i)] per stack (the official code's profiling, Eq. 5's
    omega_i^2 = sum_{j<i} Var[F_j] with the embedding as F_0), every channel the same value."""
    model, rec = _records(placement="admin", encoder_layers=3, decoder_layers=2)
    for stack in ("encoder", "decoder"):
        subs = [r for st, _, _, r in _sublayers(rec) if st == stack]
        omegas = [sub.skip.omega for sub in getattr(model, stack).modules() if isinstance(getattr(sub, "skip", None), Omega)]
        assert len(omegas) == len(subs) == (6 if stack == "encoder" else 6)
        assert float(omegas[0][0].detach()) == 1.0
        for i, (r, w) in enumerate(zip(subs, omegas)):
            assert torch.equal(w, torch.full_like(w, float(w[0].detach())))  # one value on every channel at init
            torch.testing.assert_close(r["branch_in"], r["input"])  # the branch sees the raw x
            torch.testing.assert_close(r["sum"], w * r["input"] + r["branch_out"])  # omega . x + F(x)
            torch.testing.assert_close(r["output"], _ln(r["sum"]))  # LN(.)
            if i + 1 < len(omegas):
                want = torch.sqrt(_var(w * r["input"]) + _var(r["branch_out"]))
                torch.testing.assert_close(omegas[i + 1][0].double(), want, rtol=1e-5, atol=0)
        assert float(omegas[-1][0].detach()) > float(omegas[1][0].detach()) > 1.0  # grows with depth: sum of the branch variances
        torch.testing.assert_close(rec[stack]["final"], subs[-1]["output"])  # no final LN


def test_admin_profiling_is_reproducible_and_leaves_the_random_stream():
    cfg = tiny_config(placement="admin", dropout=0.1)
    src, tgt = _batch()
    torch.manual_seed(0)
    a = Seq2Seq(cfg).eval()
    before = a.encoder.layers[1].ffn.skip.omega.clone()
    assert torch.equal(before, torch.ones_like(before))  # omega = 1 (Post-LN) until profiled
    assert "not profiled yet" in describe(a)
    torch.manual_seed(123)
    wa = admin_profile(a, (src, tgt), seed=7)
    after_a = torch.rand(3)
    torch.manual_seed(123)
    after_none = torch.rand(3)
    torch.testing.assert_close(after_a, after_none)  # the caller's random stream is untouched
    assert not a.training  # mode restored
    torch.manual_seed(0)
    b = Seq2Seq(cfg)
    assert admin_profile(b, (src, tgt), seed=7) == wa  # same seed, same omega
    assert admin_profile(b, (src, tgt), seed=8) != wa  # profiled in training mode: dropout on, as the reference
    assert "profiled: 1, " in describe(a)
    assert profile_init(Seq2Seq(tiny_config(placement="post")), (src, tgt)) == {}
    m = MaskedLM(tiny_config(placement="admin"))
    omegas = profile_init(m, (src, torch.zeros_like(src)))
    assert list(omegas) == ["encoder"] and len(omegas["encoder"]) == 4


def test_b2t_lines():
    """B2T (Takase et al. 2023): h = LN(x_l + Attn(x_l)) [decoder: h = LN(h + Cross(h))], x_{l+1} =
    LN(h + FFN(h) + x_l); no final LN; every projection weight x 1/sqrt(L) at init (the code's rescaling_init)."""
    model, rec = _records(placement="b2t", encoder_layers=3, decoder_layers=2)
    for stack in ("encoder", "decoder"):
        for layer in rec[stack]["layers"]:
            x_l = layer["self_attn"]["input"]
            for sub in ("self_attn", "cross_attn"):
                if sub in layer:
                    r = layer[sub]
                    torch.testing.assert_close(r["branch_in"], r["input"])
                    torch.testing.assert_close(r["output"], _ln(r["input"] + r["branch_out"]))
            r = layer["ffn"]
            torch.testing.assert_close(r["sum"], r["input"] + r["branch_out"] + x_l)  # the bottom-to-top bypass
            torch.testing.assert_close(r["output"], _ln(r["sum"]))
        torch.testing.assert_close(rec[stack]["final"], rec[stack]["layers"][-1]["ffn"]["output"])
    torch.manual_seed(0)
    post = Seq2Seq(tiny_config(placement="post", encoder_layers=3, decoder_layers=2))
    torch.manual_seed(0)
    b2t = Seq2Seq(tiny_config(placement="b2t", encoder_layers=3, decoder_layers=2))
    theirs = dict(post.named_parameters())
    for name, p in b2t.named_parameters():
        L = 3 if name.startswith("encoder") else 2
        scaled = ".layers." in name and name.endswith("weight") and "norm" not in name
        torch.testing.assert_close(p, theirs[name] / math.sqrt(L) if scaled else theirs[name], msg=name)


def test_resi_dual_lines():
    """ResiDual (Xie et al. 2023): x_a <- LN(x_a + F(x_a)), x_d <- x_d + F(x_a), both from the embedding;
    the stack's output is x_a + LN(x_d)."""
    model, rec = _records(placement="resi_dual", encoder_layers=3, decoder_layers=2)
    for stack in ("encoder", "decoder"):
        subs = [r for st, _, _, r in _sublayers(rec) if st == stack]
        torch.testing.assert_close(subs[0]["stream_in"], rec[stack]["embed"])
        for r in subs:
            torch.testing.assert_close(r["branch_in"], r["input"])
            torch.testing.assert_close(r["output"], _ln(r["input"] + r["branch_out"]))  # x_a: Post-LN
            torch.testing.assert_close(r["stream_out"], r["stream_in"] + r["branch_out"])  # x_d += F(x_a)
        torch.testing.assert_close(subs[-1]["stream_out"], rec[stack]["embed"] + sum(r["branch_out"] for r in subs))
        torch.testing.assert_close(rec[stack]["final"], subs[-1]["output"] + _ln(subs[-1]["stream_out"]))
    assert isinstance(model.encoder.final_norm, nn.LayerNorm)


def test_admin_profiled_when_training_starts(tmp_path):
    """Trainer.fit profiles Admin's omega on a fresh run before the first update; a resumed run keeps its own."""
    from normlab.config import TrainConfig
    from normlab.train.trainer import Trainer
    from tests.synthetic import ReverseTask

    cfg = TrainConfig.from_dict({
        "model": dict(d_model=32, n_heads=2, d_ffn=64, encoder_layers=2, decoder_layers=2, vocab_size=20,
                      dropout=0.1, max_positions=32, placement="admin"),
        "data": {"max_tokens": 120}, "optim": {"lr": 1e-6}, "max_updates": 1, "max_epochs": 1,
        "device": "cpu", "precision": "fp32", "seed": 1,
    })  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run", ReverseTask(), quiet=True)
    assert trainer.fit()["status"] == "completed"
    w = [float(m.omega.detach().mean()) for m in trainer.model.decoder.modules() if isinstance(m, Omega)]
    assert w[0] == pytest.approx(1.0, abs=1e-4) and all(b > a for a, b in zip(w, w[1:])), w


# ---- every scheme: init, decoding, training, analysis, description --------------------------------------


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_decodes_incrementally(scheme):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(placement=scheme, qk_norm=scheme != "rezero", mixln_alpha=0.5)).eval()
    if scheme == "rezero":
        with torch.no_grad():
            for m in model.modules():
                if hasattr(m, "gain") and hasattr(m.gain, "alpha"):
                    m.gain.alpha.fill_(0.5)
    src, tgt = _batch(B=2, S=6, T=5)
    src[1, 4:] = 0
    profile_init(model, (src, tgt))
    with torch.no_grad():
        full = model(src, tgt)
        enc = model.encode(src)
        cache = model.init_cache()
        steps = [model.decode(tgt[:, t : t + 1], enc, cache) for t in range(tgt.shape[1])]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def _train(cfg, steps=25):
    """A copy task (target = source) with Adam: returns the first and last losses."""
    torch.manual_seed(0)
    model = Seq2Seq(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, cfg.vocab_size, (16, 8), generator=g)
    tgt_in = torch.cat([torch.full((16, 1), 1), src[:, :-1]], 1)
    profile_init(model, (src, tgt_in))  # Admin's omega, as Trainer.fit does before the first update
    losses = []
    for _ in range(steps):
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), src.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses[0], losses[-1]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_trains(scheme):
    first, last = _train(tiny_config(placement=scheme, vocab_size=20, d_ffn=32, mixln_alpha=0.5))
    assert math.isfinite(last) and last < 0.8 * first, (first, last)


@pytest.mark.parametrize("norm", ["rmsnorm", "dyt", "none"])
def test_every_norm_trains(norm):
    first, last = _train(tiny_config(placement="pre", norm=norm, qk_norm=norm != "none", vocab_size=20, d_ffn=32))
    assert math.isfinite(last) and last < 0.8 * first, (first, last)


def test_every_scheme_through_analysis_and_diagnosis():
    """Figure 3(c,d)'s depth scan (analyze) and the warm-up diagnosis accept every scheme and norm."""
    from normlab.analysis.diagnose import diagnose_config
    from normlab.analysis.gradients import figure3cd
    from normlab.analysis.sources import synthetic_translation_batches

    base = tiny_config(vocab_size=40, d_ffn=32, dropout=0.1)
    batches = synthetic_translation_batches(1, vocab_size=40, max_tokens=64, seed=0)
    out = figure3cd(base, depths=(1, 2), schemes=SCHEMES, seeds=(0,), batches_for_seed=lambda s: batches)
    for scheme in SCHEMES:
        assert all(math.isfinite(v) for v in out[scheme]["decoder"]["mean"]), scheme
    for scheme in SCHEMES:
        d = diagnose_config(base.replace(placement=scheme), "translation", steps=1, max_tokens=64)
        assert math.isfinite(d.loss) and d.profiles
        has_norm = NORM_SLOTS[Placement(scheme)] != NORM_SLOTS[Placement.REZERO]
        assert any(g is not None for p in d.profiles for g in p.ln_input) == has_norm, scheme
    d = diagnose_config(base.replace(placement="pre", norm="rmsnorm"), "mlm", steps=1)
    assert any(g is not None for p in d.profiles for g in p.ln_input)  # RMSNorm inputs are measured too


@pytest.mark.parametrize("scheme", SCHEMES)
def test_describe_says_where_the_norms_sit(scheme):
    text = describe(Seq2Seq(tiny_config(placement=scheme, encoder_layers=4, decoder_layers=4, mixln_alpha=0.5)))
    assert f"placement={scheme}" in text
    expect = {"post": "after the residual add", "pre": "branch input", "peri": "branch input, branch output",
              "deepnorm": "alpha*x + F(x)", "subln": "before the self-attention's W^O", "mixln": "layers 1-2",
              "lns": "1/sqrt(l)", "output": "branch output", "rezero": "no norm in the sub-layers",
              "admin": "omega*x + F(x) (Admin)", "b2t": "layer's input added before its last norm (B2T)",
              "resi_dual": "final LayerNorm on the second stream: yes",
              "hybridnorm": "attention: each head's queries, keys and values, after the residual add; FFN: nothing"
              }[scheme]  # fmt: skip
    assert expect in text, text
    if scheme in ("deepnorm", "subln", "b2t"):
        assert "at init" in text
    assert "norm=rmsnorm" in describe(MaskedLM(tiny_config(placement=scheme, norm="rmsnorm")))


def test_plan_numbers():
    cfg = tiny_config(placement="subln", encoder_layers=6, decoder_layers=6)
    assert plan_layer(cfg, "encoder", 0, 6).init_gain == pytest.approx(math.sqrt(math.log(12)))
    assert plan_layer(cfg, "seq2seq-decoder", 0, 6).init_gain == pytest.approx(math.sqrt(math.log(18)))
    assert plan_layer(tiny_config(placement="lns"), "encoder", 3, 6).scale_in == pytest.approx(0.5)
    assert plan_layer(tiny_config(placement="b2t"), "seq2seq-decoder", 0, 9).init_gain == pytest.approx(1 / 3)


def test_sweep_accepts_every_scheme():
    from normlab.experiments.sweep import SweepConfig

    assert SweepConfig(schemes=tuple(SCHEMES)).schemes == tuple(SCHEMES)


# ---- every placement x every norm, with perturbed norm parameters ---------------------------------------
# At initialisation gamma = 1 and beta = 0 (DyT: alpha = 0.5), so a formula test against a parameter-free norm
# passes whichever norm module sits in a slot. Here every norm parameter (LayerNorm gamma and beta, RMSNorm g,
# DyT alpha, gamma and beta), Admin's omega and ReZero's a are drawn at random, and each sub-layer's output is
# recomputed from its input by the scheme's formula written out below, taking each norm's parameters from the
# slot the formula names: a swapped, misplaced or mis-scaled norm gives another number.

EPS = 1e-5  # tiny_config's layer_norm_eps


def _norm_formula(kind: str, module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The norm ``kind`` written out, with ``module``'s parameters; ``module`` must be that norm."""
    expect = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm, "dyt": DyT, "none": nn.Identity}[kind]
    assert type(module) is expect, (kind, module)
    if kind == "layernorm":  # (x - mean) / sqrt(var + eps) * gamma + beta (Ba et al. 2016)
        mu = x.mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt((x - mu).pow(2).mean(-1, keepdim=True) + EPS) * module.weight + module.bias
    if kind == "rmsnorm":  # x / sqrt(mean(x^2) + eps) * g (Zhang & Sennrich 2019)
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * module.weight
    if kind == "dyt":  # gamma * tanh(alpha x) + beta (Zhu et al. 2025)
        return module.weight * torch.tanh(module.alpha * x) + module.bias
    return x


def _branch_formula(sub: nn.Module, kind: str, h: torch.Tensor, *, causal: bool, memory=None) -> torch.Tensor:
    """F(h) written out: softmax(q k^T / sqrt(d_h)) v W^O per head (with Sub-LN's norm before W^O in the
    self-attention), or W^2 [N] act(W^1 h) (Sub-LN's N over d_ffn)."""
    if hasattr(sub, "w1"):
        return F.linear(_norm_formula(kind if sub.plan.slots.inner else "none", sub.norm_inner,
                                      torch.relu(F.linear(h, sub.w1.weight, sub.w1.bias))), sub.w2.weight, sub.w2.bias)
    d = h.shape[-1]
    heads = lambda t: t.unflatten(-1, (sub.n_heads, d // sub.n_heads)).transpose(1, 2)  # noqa: E731
    if memory is None:
        q, k, v = F.linear(h, sub.qkv.weight, sub.qkv.bias).split(d, -1)
    else:
        q = F.linear(h, sub.q.weight, sub.q.bias)
        k, v = F.linear(memory, sub.kv.weight, sub.kv.bias).split(d, -1)
    q, k, v = heads(q), heads(k), heads(v)
    if sub.slots.qkv_norm:  # HybridNorm: each head's queries, keys and values normalised over head_dim
        q, k, v = (_norm_formula(kind, getattr(sub, n), t) for n, t in (("q_norm", q), ("k_norm", k), ("v_norm", v)))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // sub.n_heads)
    if causal:
        T = h.shape[1]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    o = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
    if memory is None:
        o = _norm_formula(kind if sub.plan.slots.inner else "none", sub.norm_inner, o)
    return F.linear(o, sub.out.weight, sub.out.bias)


def _perturb(model: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    rnd = lambda p: torch.randn(p.shape, generator=g)  # noqa: E731
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, NORM_TYPES):
                m.weight.copy_(1 + 0.4 * rnd(m.weight))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.4 * rnd(m.bias))
                if isinstance(m, DyT):
                    m.alpha.fill_(0.3 + torch.rand((), generator=g).item())
            elif isinstance(m, Omega):
                m.omega.copy_(1.5 + 0.4 * rnd(m.omega))
            elif hasattr(m, "alpha") and m.alpha.dim() == 0 and not isinstance(m, DyT):  # ReZero's a
                m.alpha.fill_(0.2 + torch.rand((), generator=g).item())


def _scheme_formula(placement: str, kind: str, sub, x, f, *, layer: int, n_layers: int, role: str, x_l):
    """One sub-layer's output from its input ``x`` for ``placement``; ``f`` is F written out, ``x_l`` the
    layer's input (B2T). The slots a placement leaves empty must be the identity."""
    N = lambda slot, t: _norm_formula(kind, getattr(sub, slot), t)  # noqa: E731
    empty = {"norm_in", "norm_out", "norm_add"}

    def used(*slots):
        for slot in empty - set(slots):
            assert isinstance(getattr(sub, slot), nn.Identity), (placement, slot)

    if placement == "mixln":  # Li et al. 2024: layers 1..floor(alpha L) Post-LN (alpha = 0.5 here)
        placement = "post" if layer < math.floor(0.5 * n_layers) else "pre"
    if placement in ("post", "resi_dual"):  # N(x + F(x)); ResiDual's x_a stream
        used("norm_add")
        return N("norm_add", x + f(x))
    if placement in ("pre", "subln"):  # x + F(N(x)) (Sub-LN's inner norms are in f)
        used("norm_in")
        return x + f(N("norm_in", x))
    if placement == "peri":  # x + N(F(N(x)))
        used("norm_in", "norm_out")
        return x + N("norm_out", f(N("norm_in", x)))
    if placement == "lns":  # x + F(N(x) / sqrt(l))
        used("norm_in")
        return x + f(N("norm_in", x) / math.sqrt(layer + 1))
    if placement == "output":  # x + N(F(x))
        used("norm_out")
        return x + N("norm_out", f(x))
    if placement == "deepnorm":  # N(alpha x + F(x)); alpha: encoder 0.81 (N^4 M)^(1/16), decoder (3M)^(1/4)
        used("norm_add")
        alpha = 0.81 * (n_layers**4 * 2) ** (1 / 16) if role == "encoder" else (3 * n_layers) ** 0.25
        return N("norm_add", alpha * x + f(x))
    if placement == "admin":  # N(omega . x + F(x))
        used("norm_add")
        return N("norm_add", sub.skip.omega * x + f(x))
    if placement == "rezero":  # x + a F(x), no norm
        used()
        return x + sub.gain.alpha * f(x)
    if placement == "hybridnorm":  # attentions N(x + F(x)) (F with QKV-norm), the FFN x + F(x)
        if hasattr(sub, "w1"):
            used()
            return x + f(x)
        used("norm_add")
        return N("norm_add", x + f(x))
    if placement == "b2t":  # N(x + F(x)); the FFN adds the layer's input too
        used("norm_add")
        return N("norm_add", x + f(x) + (x_l if hasattr(sub, "w1") else 0))
    raise AssertionError(f"no formula written for {placement}")


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("placement", SCHEMES)
def test_every_placement_and_norm_with_perturbed_norms(placement, norm):
    cfg = tiny_config(placement=placement, norm=norm, encoder_layers=2, decoder_layers=2, mixln_alpha=0.5)
    torch.manual_seed(0)
    model = Seq2Seq(cfg).eval()
    _perturb(model, seed=SCHEMES.index(placement) * 10 + NORMS.index(norm))
    src, tgt = _batch()
    with torch.no_grad():
        _, rec = model(src, tgt, return_intermediates=True)
        for stack in ("encoder", "decoder"):
            st = getattr(model, stack)
            z = rec[stack]["embed"]  # ResiDual's x_d starts as the embedding
            for i, (block, layer) in enumerate(zip(st.layers, rec[stack]["layers"])):
                x_l = layer["self_attn"]["input"]
                for name in ("self_attn", "cross_attn", "ffn"):
                    if name not in layer:
                        continue
                    sub, r = getattr(block, name), layer[name]
                    mem = rec["encoder"]["final"] if name == "cross_attn" else None
                    causal = stack == "decoder" and name == "self_attn"
                    f = lambda h: _branch_formula(sub, norm, h, causal=causal, memory=mem)  # noqa: E731
                    want = _scheme_formula(placement, norm, sub, r["input"], f, layer=i, n_layers=2, role=stack,
                                           x_l=x_l)
                    torch.testing.assert_close(r["output"], want, atol=2e-5, rtol=1e-4, msg=f"{stack}.{i}.{name}")
                    z = z + f(r["input"])
            last = rec[stack]["layers"][-1]["ffn"]["output"]
            if placement == "resi_dual":  # x_a + N(x_d), x_d the embedding plus every F(x_a)
                want = last + _norm_formula(norm, st.final_norm, z)
            elif placement in ("pre", "peri", "subln", "mixln", "lns", "output", "hybridnorm"):
                want = _norm_formula(norm, st.final_norm, last)
            else:
                assert isinstance(st.final_norm, nn.Identity)
                want = last
            torch.testing.assert_close(rec[stack]["final"], want, atol=2e-5, rtol=1e-4, msg=f"{stack} final")


@pytest.mark.parametrize("norm", NORMS)
def test_masked_lm_head_norm_is_the_models_norm(norm):
    """BERT's head is dense, activation, LayerNorm, tied decoder; its norm is ``cfg.norm``: a masked LM with
    norm=none has no norm anywhere, rmsnorm and dyt put theirs in the head too (written out, perturbed)."""
    model = MaskedLM(tiny_config(placement="pre", norm=norm)).eval()
    _perturb(model, seed=NORMS.index(norm))
    if norm == "none":
        assert not any(isinstance(m, NORM_TYPES) for m in model.modules())
    h = torch.randn(2, 5, 32)
    with torch.no_grad():
        hidden = torch.relu(F.linear(h, model.lm_dense.weight, model.lm_dense.bias))
        want = F.linear(_norm_formula(norm, model.lm_norm, hidden), model.encoder.embed_tokens.weight, model.lm_bias)
        torch.testing.assert_close(model.lm_logits(h), want)
