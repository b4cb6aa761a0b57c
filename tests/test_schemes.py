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

from normlab.config import ConfigError, Placement
from normlab.model import NORM_SLOTS, NORM_TYPES, DyT, MaskedLM, Seq2Seq, describe, plan_layer
from tests.conftest import tiny_config

SCHEMES = [p.value for p in Placement]
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
    with torch.no_grad():
        _, rec = model(src, tgt, return_intermediates=True)
    return model, rec


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
    assert tiny_config(norm="dyt", dyt_alpha=1.0).dyt_alpha == 1.0


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
    last = rec["encoder"]["layers"][-1]["ffn"]["output"]
    torch.testing.assert_close(rec["encoder"]["final"], last if n_post == 4 else _ln(last))


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
        torch.testing.assert_close(r["output"], r["input"] + r["branch_out"])
    torch.testing.assert_close(rec["decoder"]["final"], _ln(rec["decoder"]["layers"][-1]["ffn"]["output"]))


def test_rezero_lines():
    """ReZero: x <- x + a F(x), a = 0 at init: every layer is the identity and there is no norm at all."""
    model, rec = _records(placement="rezero")
    assert not any(isinstance(m, NORM_TYPES) for m in model.modules())
    for stack in ("encoder", "decoder"):
        torch.testing.assert_close(rec[stack]["final"], rec[stack]["embed"])
    with torch.no_grad():
        for i, m in enumerate(m for m in model.modules() if hasattr(m, "gain") and hasattr(m.gain, "alpha")):
            m.gain.alpha.fill_(0.1 * (i + 1))
        src, tgt = _batch()
        _, rec = model(src, tgt, return_intermediates=True)
    layer = model.encoder.layers[1].ffn
    r = rec["encoder"]["layers"][1]["ffn"]
    with torch.no_grad():
        torch.testing.assert_close(r["output"], r["input"] + layer.gain.alpha * layer.branch(r["input"]))


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
    out = figure3cd(base, depths=(1, 2), placements=SCHEMES, seeds=(0,), batches_for_seed=lambda s: batches)
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
              "lns": "1/sqrt(l)", "output": "branch output", "rezero": "no norm in the sub-layers"}[scheme]
    assert expect in text, text
    if scheme in ("deepnorm", "subln"):
        assert "at init" in text
    assert "norm=rmsnorm" in describe(MaskedLM(tiny_config(placement=scheme, norm="rmsnorm")))


def test_plan_numbers():
    cfg = tiny_config(placement="subln", encoder_layers=6, decoder_layers=6)
    assert plan_layer(cfg, "encoder", 0, 6).init_gain == pytest.approx(math.sqrt(math.log(12)))
    assert plan_layer(cfg, "seq2seq-decoder", 0, 6).init_gain == pytest.approx(math.sqrt(math.log(18)))
    assert plan_layer(tiny_config(placement="lns"), "encoder", 3, 6).scale_in == pytest.approx(0.5)
