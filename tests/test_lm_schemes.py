"""The two LLM-era schemes of issue 34: HybridNorm (Zhuo et al. 2025) and nGPT (Loshchilov et al. 2025).

Tiers (STYLE.md 9): tiny models of every task (or a clear refusal), each scheme's lines written out, parity with the
reference code (weights copied across, forward and gradients), and nGPT's invariant through the trainer (unit-norm
matrices and hidden states after an update).

References:

* nGPT: lucidrains/nGPT-pytorch, the package ``nGPT-pytorch==0.2.16`` (``make install-ref``), imported as it is. Read
  at commit 166bbe7 (nGPT_pytorch/nGPT.py), which 0.2.16 equals but for ``return_hiddens``, used here.
* HybridNorm: github.com/BryceZhuo/HybridNorm is an OLMo fork with no package; :func:`_hybridnorm_reference` below
  re-states its forward, from dense_model/olmo/model.py at commit f0dd60589c4cafcbd5496d60884d2745ff340805
  (OLMoSequentialBlock.forward, OLMoBlock.attention, RotaryEmbedding, OLMo.forward) with the settings of
  dense_model/configs/exps/1.2B-dense-HybriedNorm.yaml (use_query_norm, use_key_norm, use_value_norm: true;
  attn_norm: false; ffn_norm: true; ffn_residual_after_norm: true; rope; weight_tying; layer_norm_type rms), except
  what normlab's ModelConfig sets otherwise and the re-statement takes as given: biases (OLMo's include_bias: true),
  GELU for SwiGLU (OLMo's activation_type: gelu), RoPE base 10000 for 500000.
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normlab.config import ConfigError, DataConfig, ModelConfig, Placement, TrainConfig
from normlab.data.batch import LMBatch
from normlab.model import (
    NORM_SLOTS, CausalLM, EigenScale, MaskedLM, PairClassifier, Seq2Seq, SphereNorm, describe, project_weights_,
)
from tests.conftest import require_reference, tiny_config

V = 50


def lm_config(**overrides) -> ModelConfig:
    base = dict(positional="rope", scale_embedding=False, activation="gelu")
    base.update(overrides)
    return tiny_config(**base)


def tokens(B=3, T=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, T), generator=g)


def _perturb(model: nn.Module, seed: int) -> None:
    """Norm gains at 1, biases at 0 and eigen scales at their init would hide a swapped or misplaced one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or p.ndim == 1:
                p.mul_(1 + 0.3 * torch.randn(p.shape, generator=g)).add_(0.1 * torch.randn(p.shape, generator=g))


# ---- every task builds, or is refused in one line -------------------------------------------------------


@pytest.mark.parametrize("task", ["translation", "mlm", "classification", "lm"])
def test_hybridnorm_every_task_forward_backward(task):
    torch.manual_seed(0)
    cfg = tiny_config(placement="hybridnorm", norm="rmsnorm", type_vocab_size=2 if task != "lm" else 0)
    model = {"translation": Seq2Seq, "mlm": MaskedLM, "classification": PairClassifier, "lm": CausalLM}[task](cfg)
    x = tokens()
    out = model(x, x) if task == "translation" else model(x)
    assert torch.isfinite(out).all()
    out.float().pow(2).mean().backward()
    for name, p in model.named_parameters():
        if task in ("mlm", "lm") or "pooler" not in name:  # an unused head weight has no gradient only by design
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    # the norms the row asks for: Q, K, V per head in every attention (cross-attention included), one after each
    # attention's residual add, none in the FFN, a final one
    for sub in (m for m in model.modules() if hasattr(m, "v_norm")):
        assert all(isinstance(getattr(sub, n), nn.RMSNorm) and getattr(sub, n).weight.shape == (8,)
                   for n in ("q_norm", "k_norm", "v_norm"))  # fmt: skip
        assert isinstance(sub.norm_add, nn.RMSNorm) and isinstance(sub.norm_in, nn.Identity)
    ffns = [m for n, m in model.named_modules() if n.endswith(".ffn")]
    assert ffns and all(isinstance(f.norm_add, nn.Identity) and isinstance(f.norm_in, nn.Identity) for f in ffns)


@pytest.mark.parametrize("model_cls", [Seq2Seq, MaskedLM, PairClassifier])
def test_ngpt_refuses_the_tasks_it_has_no_definition_for(model_cls):
    with pytest.raises(ValueError, match="decoder-only language model: use task lm"):
        model_cls(lm_config(placement="ngpt"))
    data = DataConfig(task="mlm")
    with pytest.raises(ConfigError, match="placement=ngpt is defined for task lm only, not mlm"):
        TrainConfig(model=lm_config(placement="ngpt"), data=data)


@pytest.mark.parametrize("override, key", [(dict(positional="sinusoidal"), "positional"),
                                           (dict(scale_embedding=True), "scale_embedding"),
                                           (dict(qk_norm=True), "qk_norm"), (dict(norm="rmsnorm"), "norm"),
                                           (dict(embedding_norm=True), "embedding_norm")])  # fmt: skip
def test_ngpt_refuses_settings_that_leave_the_sphere(override, key):
    with pytest.raises(ConfigError, match=f"ModelConfig.{key}: placement=ngpt"):
        lm_config(placement="ngpt", **override)


@pytest.mark.parametrize("share", ["decoder", "none"])
def test_ngpt_lm_forward_backward_cache_and_describe(share):
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="ngpt", share_embeddings=share))
    _perturb(model, 1)
    x = tokens()
    logits = model(x)
    assert torch.isfinite(logits).all()
    F.cross_entropy(logits[:, :-1].flatten(0, 1), x[:, 1:].flatten()).backward()
    for name, p in model.named_parameters():
        if name != "decoder.embed_tokens.weight" or share == "decoder":  # untied: the input table gets gradient too
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert not any(isinstance(m, (nn.LayerNorm, nn.RMSNorm)) for m in model.modules())  # no LayerNorm anywhere
    assert not any(getattr(m, "bias", None) is not None for m in model.modules() if isinstance(m, nn.Linear))
    model.eval()
    with torch.no_grad():
        full = model(x)
        cache = model.init_cache()
        steps = [model(x[:, :4], cache=cache)] + [model(x[:, t : t + 1], cache=cache) for t in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    text = describe(model)
    assert "unit sphere" in text and "eigen" in text, text


def test_ngpt_chunked_loss_folds_the_logit_scale():
    """The trainer's chunked loss projects with ``logit_weight()``: s_z folded into the rows gives the plain loss."""
    from normlab.train.losses import lm_loss

    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="ngpt"))
    _perturb(model, 2)
    x = tokens()
    plain = lm_loss(model, x, x, impl="plain")
    for impl in ("chunked", "recompute"):
        torch.testing.assert_close(lm_loss(model, x, x, impl=impl), plain, atol=1e-5, rtol=1e-5)


# ---- each line written out -------------------------------------------------------------------------------


def test_hybridnorm_lines():
    """Each layer: x1 = N(x + Attn(x)) with Q, K, V normalised per head; x' = x1 + FFN(x1); final N."""
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="hybridnorm")).eval()
    _perturb(model, 3)
    with torch.no_grad():
        _, rec = model(tokens(), return_intermediates=True)
    for block, layer in zip(model.decoder.layers, rec["decoder"]["layers"]):
        sa, ffn = layer["self_attn"], layer["ffn"]
        torch.testing.assert_close(sa["output"], block.self_attn.norm_add(sa["input"] + sa["branch_out"]))
        torch.testing.assert_close(sa["branch_in"], sa["input"])  # no norm on the attention's input
        torch.testing.assert_close(ffn["output"], ffn["input"] + ffn["branch_out"])
    torch.testing.assert_close(rec["decoder"]["final"], model.decoder.final_norm(layer["ffn"]["output"]))


def test_ngpt_lines():
    """Section 2.2.3: h_F = N(F(h)), h' = N(h + alpha (h_F - h)), alpha the sub-layer's learned vector; every hidden
    state on the unit sphere, from the embedding on."""
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="ngpt")).eval()
    _perturb(model, 4)
    with torch.no_grad():
        _, rec = model(tokens(), return_intermediates=True)
    ones = torch.ones(3, 10)
    torch.testing.assert_close(rec["decoder"]["embed"].norm(dim=-1), ones)
    for block, layer in zip(model.decoder.layers, rec["decoder"]["layers"]):
        for name in ("self_attn", "ffn"):
            sub, r = getattr(block, name), layer[name]
            alpha = sub.gain.value()
            f = sub.branch(r["input"]) if name == "ffn" else sub.branch(r["input"], causal=True)
            h_f = F.normalize(f, dim=-1)
            want = F.normalize(r["input"] + alpha * (h_f - r["input"]), dim=-1)
            torch.testing.assert_close(r["output"], want, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(r["output"].norm(dim=-1), ones)
    assert isinstance(model.decoder.final_norm, nn.Identity) and not NORM_SLOTS[Placement.NGPT].final


# ---- parity with the references --------------------------------------------------------------------------


def _ngpt_reference_model(model: CausalLM, *, tied: bool):
    """lucidrains' nGPT with our weights copied in: returns the reference model."""
    ngpt = require_reference("nGPT_pytorch", "pip install nGPT-pytorch==0.2.16 rotary-embedding-torch "
                             "(make install-ref)")
    cfg = model.cfg
    hd = cfg.head_dim
    ref = ngpt.nGPT(num_tokens=cfg.vocab_size, dim=cfg.d_model, depth=cfg.decoder_layers, dim_head=hd,
                    heads=cfg.n_heads, ff_expand_factor=cfg.d_ffn * 3 / (2 * cfg.d_model), tied_embedding=tied,
                    add_value_residual=False,  # ResFormer's value residual (its default) is not part of nGPT
                    manual_norm_weights=True)  # plain weights, normalised by norm_weights_ (the paper's Section 2.2.4)
    assert ref.layers[0][1].fn.dim_inner == cfg.d_ffn
    # rotary_embedding_torch rotates neighbouring features (2i, 2i+1); normlab's Rotary the halves (i, i + hd/2):
    # the same function after this permutation of each head's query and key features
    perm = torch.stack([torch.arange(hd // 2), torch.arange(hd // 2) + hd // 2], 1).flatten()
    heads = torch.cat([h * hd + perm for h in range(cfg.n_heads)])
    d = cfg.d_model
    with torch.no_grad():
        ref.token_embed.linear.weight.copy_(model.decoder.embed_tokens.weight)
        if not tied:
            ref.to_logits.linear.weight.copy_(model.output_projection.weight)
        ref.logit_scale.scale.copy_(model.logit_scale.s)
        for block, (attn, ff) in zip(model.decoder.layers, ref.layers):
            sa, f = block.self_attn, block.ffn
            wq, wk, wv = sa.qkv.weight.split(d)
            attn.fn.to_q.linear.weight.copy_(wq[heads])
            attn.fn.to_k.linear.weight.copy_(wk[heads])
            attn.fn.to_v.linear.weight.copy_(wv)
            attn.fn.to_out.linear.weight.copy_(sa.out.weight)
            attn.fn.qk_scale.scale.copy_(sa.q_scale.s_qk.s[heads])
            attn.branch_scale.scale.copy_(sa.gain.s)
            ff.fn.to_hidden.linear.weight.copy_(f.w1.weight)
            ff.fn.to_gate.linear.weight.copy_(f.w3.weight)
            ff.fn.to_out.linear.weight.copy_(f.w2.weight)
            ff.fn.hidden_scale.scale.copy_(f.s_u.s)
            ff.fn.gate_scale.scale.copy_(f.s_v.s)
            ff.branch_scale.scale.copy_(f.gain.s)
    # the scales' stored sizes agree, so that an optimizer moves them alike (Section 2.5)
    sa0 = model.decoder.layers[0].self_attn
    assert ref.layers[0][0].fn.qk_scale.forward_scale == pytest.approx(1.0 / sa0.q_scale.s_qk.scale)
    assert ref.layers[0][0].branch_scale.forward_scale == pytest.approx(sa0.gain.init * d**0.5)
    assert ref.logit_scale.forward_scale == pytest.approx(d**0.5)
    return ref, heads


@pytest.mark.parametrize("tied", [True, False])
def test_ngpt_parity_with_lucidrains(tied):
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="ngpt", decoder_layers=3, share_embeddings="decoder" if tied else "none"))
    _perturb(model, 5)
    ref, heads = _ngpt_reference_model(model, tied=tied)
    x = tokens(B=2, T=12)
    ours, rec = model(x, return_intermediates=True)
    theirs, hiddens = ref(x, return_hiddens=True)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-4)
    # the hidden state after every sub-layer (the reference's hiddens: the embedding, then each attention and MLP)
    layers = rec["decoder"]["layers"]
    ours_h = [rec["decoder"]["embed"]] + [layer[n]["output"] for layer in layers for n in ("self_attn", "ffn")]
    torch.testing.assert_close(torch.stack(ours_h), hiddens, atol=2e-6, rtol=1e-5)
    w = torch.randn_like(ours)
    (ours * w).sum().backward()
    (theirs * w).sum().backward()
    d = model.cfg.d_model
    pairs = [("embed", model.decoder.embed_tokens.weight.grad, ref.token_embed.linear.weight.grad),
             ("s_z", model.logit_scale.s.grad, ref.logit_scale.scale.grad)]
    if not tied:
        pairs.append(("output", model.output_projection.weight.grad, ref.to_logits.linear.weight.grad))
    for i, (block, (attn, ff)) in enumerate(zip(model.decoder.layers, ref.layers)):
        sa, fb, qkv = block.self_attn, block.ffn, block.self_attn.qkv.weight.grad
        pairs += [(f"{i}.alpha_A", sa.gain.s.grad, attn.branch_scale.scale.grad),
                  (f"{i}.alpha_M", fb.gain.s.grad, ff.branch_scale.scale.grad),
                  (f"{i}.s_qk", sa.q_scale.s_qk.s.grad[heads], attn.fn.qk_scale.scale.grad),
                  (f"{i}.W_q", qkv[:d][heads], attn.fn.to_q.linear.weight.grad),
                  (f"{i}.W_k", qkv[d : 2 * d][heads], attn.fn.to_k.linear.weight.grad),
                  (f"{i}.W_v", qkv[2 * d :], attn.fn.to_v.linear.weight.grad),
                  (f"{i}.W_o", sa.out.weight.grad, attn.fn.to_out.linear.weight.grad),
                  (f"{i}.W_u", fb.w1.weight.grad, ff.fn.to_hidden.linear.weight.grad),
                  (f"{i}.W_v(ffn)", fb.w3.weight.grad, ff.fn.to_gate.linear.weight.grad),
                  (f"{i}.W_2", fb.w2.weight.grad, ff.fn.to_out.linear.weight.grad),
                  (f"{i}.s_u", fb.s_u.s.grad, ff.fn.hidden_scale.scale.grad),
                  (f"{i}.s_v", fb.s_v.s.grad, ff.fn.gate_scale.scale.grad)]  # fmt: skip
    for name, a, b in pairs:
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)


def test_ngpt_weight_normalisation_matches_lucidrains():
    """After an optimizer step, project_weights_ and the reference's norm_weights_ put the same matrices back on the
    sphere along the same axes."""
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="ngpt", share_embeddings="none"))
    with torch.no_grad():  # an update took every matrix off the sphere
        for p in model.parameters():
            if p.ndim == 2:
                p.add_(0.3 * torch.randn_like(p))
    ref, heads = _ngpt_reference_model(model, tied=False)
    assert project_weights_(model) == 2 + 5 * 2  # embedding, output projection; qkv, W^O, W^u, W^v, W^2 per layer
    # the reference's own ref.norm_weights_() walks ref.modules(), which raises in 0.2.16 (nGPT, Attention and
    # FeedForward define __eq__ without __hash__, so the module set cannot hold them): call each NormLinear's
    def walk(m):
        yield m
        for child in m._modules.values():
            yield from walk(child)

    for m in walk(ref):
        if type(m).__name__ == "NormLinear":
            m.norm_weights_()
    sa, attn = model.decoder.layers[1].self_attn, ref.layers[1][0].fn
    torch.testing.assert_close(sa.qkv.weight[:32][heads], attn.to_q.linear.weight)
    torch.testing.assert_close(sa.out.weight, attn.to_out.linear.weight)
    torch.testing.assert_close(model.decoder.layers[1].ffn.w2.weight, ref.layers[1][1].fn.to_out.linear.weight)
    torch.testing.assert_close(model.decoder.embed_tokens.weight, ref.token_embed.linear.weight)
    torch.testing.assert_close(model.output_projection.weight, ref.to_logits.linear.weight)


def _olmo_rms(x, w, eps=1e-5):
    # OLMo RMSLayerNorm (with_affine, no bias): x * rsqrt(mean(x^2) + eps) * weight
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _olmo_rope(t, base=10000.0):
    # OLMo RotaryEmbedding: inv_freq = 1 / base^(arange(0, hs, 2) / hs), positions = cat(freqs, freqs),
    # rotate_half = cat(-x2, x1) over the two halves; t * cos + rotate_half(t) * sin
    B, nh, T, hs = t.shape
    inv_freq = 1.0 / (base ** (torch.arange(0, hs, 2, dtype=torch.float) / hs))
    freqs = torch.einsum("i,j->ij", torch.arange(T, dtype=torch.float), inv_freq)
    pos = torch.cat((freqs, freqs), dim=-1)[None, None]
    x1, x2 = t.view(B, nh, T, 2, hs // 2).unbind(dim=-2)
    return t * pos.cos() + torch.cat((-x2, x1), dim=-1) * pos.sin()


def _hybridnorm_reference(model: CausalLM, ids: torch.Tensor) -> torch.Tensor:
    """HybridNorm's OLMoSequentialBlock forward (the module docstring says which file and commit) on our weights:

    h = x (attn_norm false); q, k, v = att_proj(h).split; per head q_norm(q), k_norm(k), v_norm(v); RoPE on q, k;
    causal SDPA; att = attn_out(heads merged); x = x + att; then (ffn_norm, ffn_residual_after_norm) x = ff_norm(x),
    og_x = x, x = og_x + ff_out(act(ff_proj(x))). After the blocks ln_f, then logits F.linear(x, wte) (weight tying).
    """
    cfg = model.cfg
    B, T = ids.shape
    H, hs = cfg.n_heads, cfg.head_dim
    x = F.embedding(ids, model.decoder.embed_tokens.weight)
    for block in model.decoder.layers:
        sa, ff = block.self_attn, block.ffn
        h = x
        q, k, v = F.linear(h, sa.qkv.weight, sa.qkv.bias).split(cfg.d_model, dim=-1)
        q, k, v = (t.view(B, T, H, hs).transpose(1, 2) for t in (q, k, v))
        q, k, v = _olmo_rms(q, sa.q_norm.weight), _olmo_rms(k, sa.k_norm.weight), _olmo_rms(v, sa.v_norm.weight)
        q, k = _olmo_rope(q), _olmo_rope(k)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        att = F.linear(att.transpose(1, 2).contiguous().view(B, T, cfg.d_model), sa.out.weight, sa.out.bias)
        x = x + att
        x = _olmo_rms(x, sa.norm_add.weight)  # ff_norm (normlab's slot: the attention's norm after its add)
        og_x = x
        x = F.linear(F.gelu(F.linear(x, ff.w1.weight, ff.w1.bias)), ff.w2.weight, ff.w2.bias)
        x = og_x + x
    x = _olmo_rms(x, model.decoder.final_norm.weight)  # ln_f
    return F.linear(x, model.decoder.embed_tokens.weight)


def test_hybridnorm_parity_with_the_reference():
    torch.manual_seed(0)
    model = CausalLM(lm_config(placement="hybridnorm", norm="rmsnorm", decoder_layers=3))
    _perturb(model, 6)
    x = tokens(B=2, T=12)
    ours = model(x)
    theirs = _hybridnorm_reference(model, x)
    torch.testing.assert_close(ours, theirs, atol=2e-5, rtol=1e-4)
    w = torch.randn_like(ours)
    params = [p for p in model.parameters()]
    g_ours = torch.autograd.grad((ours * w).sum(), params)
    g_ref = torch.autograd.grad((theirs * w).sum(), params)
    for (name, _), a, b in zip(model.named_parameters(), g_ours, g_ref):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4, msg=name)


# ---- nGPT's invariant through the trainer ----------------------------------------------------------------


class _TinyLM:
    """A stand-in for the trainer's LMDataset: fixed blocks of random tokens."""

    def __init__(self, n=16, T=9, seed=0):
        g = np.random.default_rng(seed)
        self.blocks = g.integers(1, V, size=(n, T))

    def __len__(self):
        return len(self.blocks)

    def epoch_batches(self, epoch, seed, max_tokens, shuffle=True, **kwargs):
        per = max(1, max_tokens // self.blocks.shape[1])
        return [np.arange(i, min(i + per, len(self.blocks))) for i in range(0, len(self.blocks), per)]

    def collate(self, idx, **kwargs):
        t = torch.as_tensor(self.blocks[idx])
        return LMBatch(tokens=t[:, :-1], targets=t[:, 1:], n_tokens=t[:, 1:].numel())


@pytest.mark.parametrize("accumulate", [1, 2])
def test_ngpt_unit_norm_after_a_training_step(tmp_path, accumulate):
    """One trainer update (plain, and accumulated over two batches) leaves every matrix nGPT keeps on the sphere with
    unit vectors along d_model, and every hidden state unit norm; the eigen scales moved."""
    from normlab.train.trainer import Trainer

    model_cfg = lm_config(placement="ngpt", dropout=0.0)
    cfg = TrainConfig(model=model_cfg, data=DataConfig(task="lm", max_tokens=36), accumulate=accumulate,
                      max_updates=1, device="cpu", precision="fp32", attention="sdpa")  # fmt: skip
    torch.manual_seed(cfg.seed)
    model = CausalLM(model_cfg)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    summary = Trainer(cfg, tmp_path / "run", _TinyLM(), None, model=model, progress=False, quiet=True).fit()
    assert summary["status"] == "completed" and summary["update"] == 1, summary
    marked = [(n, m) for n, m in model.named_modules() if getattr(m, "sphere_dim", None) is not None]
    assert len(marked) == 2 + 5 * model_cfg.decoder_layers  # embedding, output (tied: the same), qkv, out, w1, w3, w2
    for name, m in marked:
        norms = m.weight.norm(dim=m.sphere_dim)
        if name.endswith("embed_tokens") or name == "output_projection":
            norms = norms[1:]  # the padding row stays 0
        torch.testing.assert_close(norms, torch.ones_like(norms), msg=name)
        if name + ".weight" in before:  # a tied output projection is the embedding
            assert not torch.equal(m.weight, before[name + ".weight"]), name  # it was updated, then projected
    assert not torch.equal(model.decoder.layers[0].self_attn.gain.s, before["decoder.layers.0.self_attn.gain.s"])
    model.eval()
    with torch.no_grad():
        _, rec = model(tokens(), return_intermediates=True)
    layers = rec["decoder"]["layers"]
    states = [rec["decoder"]["embed"]] + [layer[n]["output"] for layer in layers for n in ("self_attn", "ffn")]
    for h in states:
        torch.testing.assert_close(h.norm(dim=-1), torch.ones(3, 10))
    assert isinstance(model.decoder.layers[0].self_attn.norm_add, SphereNorm)
    assert isinstance(model.logit_scale, EigenScale)


# ---- the sweep ---------------------------------------------------------------------------------------------


def test_sweep_takes_both_schemes_on_the_lm_task_and_refuses_ngpt_elsewhere():
    from normlab.experiments.figures import Context
    from normlab.experiments.sweep import SweepConfig, sweep_runs

    assert "hybridnorm" in SweepConfig().schemes and "ngpt" not in SweepConfig().schemes  # default: translation's
    cfg = SweepConfig(task="lm", schemes=("hybridnorm", "ngpt"), widths=(32,), per_decade=1, warmups=("none",),
                      updates=50)  # fmt: skip
    specs = sweep_runs(cfg, Context(translation_updates_per_epoch=1))
    assert {s.config.model.placement.value for s in specs} == {"hybridnorm", "ngpt"}
    for s in specs:  # every run config builds its model
        CausalLM(s.config.model)
    with pytest.raises(ConfigError, match="'ngpt': placement=ngpt is defined for task lm only, not translation"):
        SweepConfig(schemes=("pre", "ngpt"))
