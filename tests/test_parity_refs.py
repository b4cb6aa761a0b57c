"""Parity of the normalisation schemes with independent references, weights copied across.

* torchscale 0.3.0 (Microsoft, the DeepNet and Magneto authors' code): ``deepnorm`` and ``subln``, an
  encoder-only stack and an encoder-decoder (its encoder and decoder), forward and backward; and the
  constants: DeepNorm's alpha and beta, Sub-LN's gamma, read off torchscale's own layers and init.
* x-transformers 2.x: ``peri`` (``sandwich_norm``), ``norm=rmsnorm`` (``use_rmsnorm``), ``norm=dyt``
  (``use_dynamic_tanh``), ``rezero`` (x-transformers' LayerScale with one value in every channel and its norms
  removed) and ``qk_norm`` (``attn_qk_rmsnorm``).

Both are the optional ``test-ref`` dependency group (pyproject.toml), which ``make test`` (and so CI) installs
(``make install-ref``); there a reference that is absent fails its tests (NORMLAB_REQUIRE_REFS=1), and a bare
``pytest`` skips them with the reason. torchscale imports timm for DropPath only (never built with
drop_path_rate = 0), and timm needs torchvision, which would replace the CPU torch: a stub ``timm.models.layers``
stands in for it.
"""

from __future__ import annotations

import importlib
import sys
import types

import pytest
import torch
from torch import nn

from normlab.model import TransformerStack, plan_layer
from tests.conftest import require_reference, tiny_config

D, H, FFN, V = 32, 4, 64, 50


def _stub_timm() -> None:
    try:
        importlib.import_module("timm.models.layers")
    except Exception:  # absent, or present without torchvision
        def drop_path(*args, **kwargs):  # pragma: no cover - drop_path_rate = 0 never calls it
            raise RuntimeError("timm stub: DropPath is not part of the parity tests")

        layers = types.ModuleType("timm.models.layers")
        layers.drop_path = drop_path
        models = types.ModuleType("timm.models")
        models.layers = layers
        timm = types.ModuleType("timm")
        timm.models = models
        sys.modules.update({"timm": timm, "timm.models": models, "timm.models.layers": layers})


def _torchscale():
    require_reference("fairscale", "torchscale needs it: make install-ref")
    _stub_timm()
    return require_reference("torchscale.architecture.encoder", "make install-ref (torchscale)")


def _randomize(module: nn.Module, seed: int) -> None:
    """gamma = 1, beta = 0 at init would hide a swapped norm; perturb every norm parameter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn(p.shape, generator=g))


def _stack(cfg, n_layers, *, decoder=False, seq2seq=False):
    emb = nn.Embedding(V, cfg.d_model, padding_idx=0)
    from normlab.model import init_weights

    st = TransformerStack(cfg, n_layers, causal=decoder, cross_attention=decoder, embed_tokens=emb, seq2seq=seq2seq)
    init_weights(st, cfg)
    return st.eval()


def _assert_same_grads(ours: torch.Tensor, theirs: torch.Tensor, inputs: list[tuple[torch.Tensor, torch.Tensor]]):
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-4)
    w = torch.randn_like(ours)
    mine = torch.autograd.grad((ours * w).sum(), [a for a, _ in inputs])
    ref = torch.autograd.grad((theirs * w).sum(), [b for _, b in inputs])
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)


# --------------------------------------------------------------------------------------------------------
# torchscale: DeepNorm and Sub-LN


@torch.no_grad()
def _copy_attn(mine, theirs):
    d = mine.out.weight.shape[0]
    if hasattr(mine, "qkv"):
        w, b = mine.qkv.weight, mine.qkv.bias
    else:
        w, b = torch.cat([mine.q.weight, mine.kv.weight]), torch.cat([mine.q.bias, mine.kv.bias])
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        getattr(theirs, name).weight.copy_(w[i * d : (i + 1) * d])
        getattr(theirs, name).bias.copy_(b[i * d : (i + 1) * d])
    theirs.out_proj.weight.copy_(mine.out.weight)
    theirs.out_proj.bias.copy_(mine.out.bias)
    if theirs.inner_attn_ln is not None:
        theirs.inner_attn_ln.load_state_dict(mine.norm_inner.state_dict())


@torch.no_grad()
def _copy_ts_layer(block, layer, placement):
    slot = "norm_add" if placement == "deepnorm" else "norm_in"
    _copy_attn(block.self_attn, layer.self_attn)
    layer.self_attn_layer_norm.load_state_dict(getattr(block.self_attn, slot).state_dict())
    if block.cross_attn is not None:
        _copy_attn(block.cross_attn, layer.encoder_attn)
        layer.encoder_attn_layer_norm.load_state_dict(getattr(block.cross_attn, slot).state_dict())
    layer.ffn.fc1.load_state_dict(block.ffn.w1.state_dict())
    layer.ffn.fc2.load_state_dict(block.ffn.w2.state_dict())
    if layer.ffn.ffn_layernorm is not None:
        layer.ffn.ffn_layernorm.load_state_dict(block.ffn.norm_inner.state_dict())
    layer.final_layer_norm.load_state_dict(getattr(block.ffn, slot).state_dict())


def _ts_kwargs(placement, N, M):
    return dict(deepnorm=placement == "deepnorm", subln=placement == "subln", activation_fn="relu", dropout=0.0,
                no_scale_embedding=True, layernorm_eps=1e-5, vocab_size=V, encoder_embed_dim=D, encoder_attention_heads=H,
                encoder_ffn_embed_dim=FFN, encoder_layers=N, decoder_embed_dim=D, decoder_attention_heads=H,
                decoder_ffn_embed_dim=FFN, decoder_layers=M)


def _mask(B, S):
    m = torch.zeros(B, S, dtype=torch.bool)
    m[1, S - 3 :] = True
    return m


@pytest.mark.parametrize("placement", ["deepnorm", "subln"])
def test_torchscale_encoder_only(placement):
    ts = _torchscale()
    from torchscale.architecture.config import EncoderConfig

    N = 3
    torch.manual_seed(0)
    cfg = tiny_config(placement=placement, encoder_layers=N)
    ours = _stack(cfg, N)
    _randomize(ours, 1)
    kw = {k: v for k, v in _ts_kwargs(placement, N, 1).items() if not k.startswith("decoder")}
    ref = ts.Encoder(EncoderConfig(**kw), is_encoder_decoder=False).eval()
    assert (ref.layer_norm is not None) == (placement == "subln")  # torchscale's final norm: Sub-LN only
    for block, layer in zip(ours.layers, ref.layers):
        _copy_ts_layer(block, layer, placement)
        assert layer.alpha == pytest.approx(block.plan.skip)
    if ref.layer_norm is not None:
        ref.layer_norm.load_state_dict(ours.final_norm.state_dict())
    x = torch.randn(3, 9, D, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    mask = _mask(3, 9)
    out = ours.run_layers(x, padding_mask=mask)
    theirs = ref(src_tokens=None, token_embeddings=x2, encoder_padding_mask=mask, features_only=True)["encoder_out"]
    keep = ~mask
    # torchscale zeroes padded positions of the input; compare the real ones, whose values and gradients
    # cannot depend on padding
    _assert_same_grads(out * keep[..., None], theirs * keep[..., None], [(x, x2)])


@pytest.mark.parametrize("placement", ["deepnorm", "subln"])
def test_torchscale_encoder_decoder(placement):
    ts = _torchscale()
    from torchscale.architecture.config import EncoderDecoderConfig
    from torchscale.architecture.decoder import Decoder

    N, M = 3, 2
    torch.manual_seed(1)
    cfg = tiny_config(placement=placement, encoder_layers=N, decoder_layers=M)
    enc, dec = _stack(cfg, N, seq2seq=True), _stack(cfg, M, decoder=True)
    _randomize(enc, 2)
    _randomize(dec, 3)
    args = EncoderDecoderConfig(**_ts_kwargs(placement, N, M))
    ref_enc = ts.Encoder(args, is_encoder_decoder=True).eval()
    ref_dec = Decoder(args, is_encoder_decoder=True).eval()
    for ours, ref in ((enc, ref_enc), (dec, ref_dec)):
        for block, layer in zip(ours.layers, ref.layers):
            _copy_ts_layer(block, layer, placement)
            assert layer.alpha == pytest.approx(block.plan.skip)
        if ref.layer_norm is not None:
            ref.layer_norm.load_state_dict(ours.final_norm.state_dict())
        assert (ref.layer_norm is not None) == (placement == "subln")
    x = torch.randn(2, 7, D, requires_grad=True)
    y = torch.randn(2, 5, D, requires_grad=True)
    x2, y2 = (t.detach().clone().requires_grad_(True) for t in (x, y))
    mem = enc.run_layers(x)
    out = dec.run_layers(y, memory=mem)
    ref_mem = ref_enc(src_tokens=None, token_embeddings=x2, features_only=True)
    theirs, _ = ref_dec(torch.zeros(2, 5, dtype=torch.long), encoder_out=ref_mem, features_only=True, token_embeddings=y2)
    torch.testing.assert_close(mem, ref_mem["encoder_out"], atol=2e-5, rtol=1e-4)
    _assert_same_grads(out, theirs, [(x, x2), (y, y2)])


@pytest.mark.parametrize("placement", ["deepnorm", "subln"])
@pytest.mark.parametrize("arch", ["encoder", "seq2seq"])
def test_torchscale_init_constants(placement, arch):
    """alpha (residual weight) and the init gain (DeepNorm's beta, Sub-LN's gamma) per stack, read off
    torchscale: the same seed builds a plain torchscale stack and a DeepNorm/Sub-LN one; the ratio of their
    fc1, fc2, v_proj and out_proj weights is torchscale's gain, q_proj and k_proj are untouched."""
    ts = _torchscale()
    from torchscale.architecture.config import EncoderConfig, EncoderDecoderConfig
    from torchscale.architecture.decoder import Decoder

    N, M = 6, 4
    seq2seq = arch == "seq2seq"

    def build(p):
        torch.manual_seed(0)
        kw = _ts_kwargs(p, N, M)
        if not seq2seq:
            kw = {k: v for k, v in kw.items() if not k.startswith("decoder")}
            return [ts.Encoder(EncoderConfig(**kw), is_encoder_decoder=False)]
        args = EncoderDecoderConfig(**kw)
        return [ts.Encoder(args, is_encoder_decoder=True), Decoder(args, is_encoder_decoder=True)]

    scheme, plain = build(placement), build("none")
    roles = ["seq2seq-encoder", "seq2seq-decoder"] if seq2seq else ["encoder"]
    cfg = tiny_config(placement=placement, encoder_layers=N, decoder_layers=M)
    for role, a, b in zip(roles, scheme, plain):
        plan = plan_layer(cfg, role, 0, N if "encoder" in role else M)
        gain = plan.init_gain
        if placement == "deepnorm" and role == "seq2seq-encoder":
            # the one place where torchscale 0.3.0 departs from the paper: DeepNet (Wang et al. 2022, Figure 2)
            # has beta = 0.87 (N^4 M)^(-1/16) for the encoder of an encoder-decoder, torchscale divides the
            # weights by (N^4 M)^(1/16) / 1.15, i.e. beta = 1.15 (N^4 M)^(-1/16); normlab follows the paper
            assert gain == pytest.approx(0.87 * (N**4 * M) ** (-1 / 16), rel=1e-3)
            gain *= 1.15**2
        pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
        for name in ("layers.0.ffn.fc1.weight", "layers.0.ffn.fc2.weight", "layers.0.self_attn.v_proj.weight",
                     "layers.0.self_attn.out_proj.weight"):
            torch.testing.assert_close(pa[name], pb[name] * gain)
        torch.testing.assert_close(pa["layers.0.self_attn.q_proj.weight"], pb["layers.0.self_attn.q_proj.weight"])
        assert a.layers[0].alpha == pytest.approx(plan.skip)
    # and normlab applies the same gain to its own Xavier init: a post (or pre) model of the same seed
    from normlab.model import Seq2Seq

    base = "post" if placement == "deepnorm" else "pre"
    torch.manual_seed(5)
    m = Seq2Seq(cfg)
    torch.manual_seed(5)
    ref = Seq2Seq(cfg.replace(placement=base))
    pm, pr = dict(m.named_parameters()), dict(ref.named_parameters())
    for stack, role in (("encoder", "seq2seq-encoder"), ("decoder", "seq2seq-decoder")):
        gain = plan_layer(cfg, role, 0, N if stack == "encoder" else M).init_gain
        for name in ("ffn.w1.weight", "ffn.w2.weight", "self_attn.out.weight"):
            torch.testing.assert_close(pm[f"{stack}.layers.0.{name}"], pr[f"{stack}.layers.0.{name}"] * gain)
        qkv, qkv_ref = pm[f"{stack}.layers.0.self_attn.qkv.weight"], pr[f"{stack}.layers.0.self_attn.qkv.weight"]
        torch.testing.assert_close(qkv[: 2 * D], qkv_ref[: 2 * D])  # W^Q, W^K: Xavier only
        torch.testing.assert_close(qkv[2 * D :], qkv_ref[2 * D :] * gain)  # W^V
    kv, kv_ref = pm["decoder.layers.0.cross_attn.kv.weight"], pr["decoder.layers.0.cross_attn.kv.weight"]
    torch.testing.assert_close(kv[D:], kv_ref[D:] * plan_layer(cfg, "seq2seq-decoder", 0, M).init_gain)


# --------------------------------------------------------------------------------------------------------
# x-transformers: sandwich norm (Peri-LN), RMSNorm, DyT, layer scale (ReZero), qk-norm


def _xt():
    return require_reference("x_transformers", "make install-ref (x-transformers)")


@torch.no_grad()
def _copy_norm(mine: nn.Module, theirs: nn.Module) -> None:
    if isinstance(mine, nn.Identity):
        return
    names = {"LayerNorm": [("weight", "gamma")], "RMSNorm": [("weight", "g")],
             "DynamicTanh": [("alpha", "pre_tanh_scale"), ("weight", "gamma"), ("bias", "beta")]}[type(theirs).__name__]
    for a, b in names:
        getattr(theirs, b).copy_(getattr(mine, a))


@torch.no_grad()
def _copy_to_xt(stack: TransformerStack, xt) -> None:
    for i, block in enumerate(stack.layers):
        for j, sub in enumerate((block.self_attn, block.ffn)):
            norms, fn, _ = xt.layers[2 * i + j]
            scale = None
            if hasattr(fn, "gamma"):  # LayerScale around the branch
                scale, fn = fn.gamma, fn.fn
            if norms[0] is not None:
                _copy_norm(sub.norm_in, norms[0])
            if norms[1] is not None:
                _copy_norm(sub.norm_out, norms[1])
            if scale is not None:
                scale.fill_(float(sub.gain.alpha))
            if j == 0:
                fn.to_q.weight.copy_(sub.qkv.weight[:D])
                fn.to_k.weight.copy_(sub.qkv.weight[D : 2 * D])
                fn.to_v.weight.copy_(sub.qkv.weight[2 * D :])
                fn.to_out.weight.copy_(sub.out.weight)
                if fn.q_rmsnorm is not None:  # MultiheadRMSNorm: x / ||x|| sqrt(dh) (gamma + 1), gamma per head
                    fn.q_rmsnorm.gamma.copy_((sub.q_norm.weight - 1).expand_as(fn.q_rmsnorm.gamma))
                    fn.k_rmsnorm.gamma.copy_((sub.k_norm.weight - 1).expand_as(fn.k_rmsnorm.gamma))
            else:
                fn.ff[0][0].load_state_dict(sub.w1.state_dict())
                fn.ff[2].load_state_dict(sub.w2.state_dict())
    if not isinstance(stack.final_norm, nn.Identity):
        _copy_norm(stack.final_norm, xt.final_norm)


XT_CASES = {
    # name: (normlab config, x-transformers Encoder kwargs)
    "pre-layernorm": (dict(placement="pre"), dict()),
    "peri-sandwich": (dict(placement="peri"), dict(sandwich_norm=True)),
    "pre-rmsnorm": (dict(placement="pre", norm="rmsnorm"), dict(use_rmsnorm=True)),
    "peri-rmsnorm": (dict(placement="peri", norm="rmsnorm"), dict(use_rmsnorm=True, sandwich_norm=True)),
    "pre-dyt": (dict(placement="pre", norm="dyt"), dict(use_dynamic_tanh=True, dynamic_tanh_init_alpha=0.5)),
    "qk-rmsnorm": (dict(placement="pre", norm="rmsnorm", qk_norm=True), dict(use_rmsnorm=True, attn_qk_rmsnorm=True)),
    "rezero": (dict(placement="rezero"), dict(use_layerscale=True, layerscale_init_value=0.0)),
}


@pytest.mark.parametrize("case", list(XT_CASES))
def test_x_transformers_encoder(case):
    xt_mod = _xt()
    ours_kw, xt_kw = XT_CASES[case]
    torch.manual_seed(0)
    # RMSNorm: x-transformers divides by max(||x||, 1e-12), torch's nn.RMSNorm by sqrt(mean x^2 + eps): the
    # same function once eps is negligible
    eps = 1e-12 if ours_kw.get("norm") == "rmsnorm" else 1e-5
    cfg = tiny_config(activation="gelu", encoder_layers=2, layer_norm_eps=eps, **ours_kw)
    ours = _stack(cfg, 2)
    _randomize(ours, 4)
    with torch.no_grad():
        for m in ours.modules():  # x-transformers' LayerNorm and RMSNorm have no bias: keep normlab's at 0
            if isinstance(m, nn.LayerNorm):
                m.bias.zero_()
            if hasattr(m, "gain") and hasattr(m.gain, "alpha"):
                m.gain.alpha.fill_(0.3)  # ReZero's a = 0 at init would make every layer the identity
    xt = xt_mod.Encoder(dim=D, depth=2, heads=H, attn_dim_head=D // H, ff_mult=FFN // D, norm_add_unit_offset=False,
                        **xt_kw).eval()
    if case == "rezero":  # x-transformers always normalises; ReZero has no norm: remove them
        for norms, _, _ in xt.layers:
            for k in range(3):
                if norms[k] is not None:
                    norms[k] = nn.Identity()
        xt.final_norm = nn.Identity()
    _copy_to_xt(ours, xt)
    x = torch.randn(3, 8, D, requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    _assert_same_grads(ours.run_layers(x), xt(x2), [(x, x2)])
