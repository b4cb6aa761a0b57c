"""Tiny-config tests of the model: Table 1 line by line, caches, padding, initialisation, names."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from normlab.config import ConfigError
from normlab.model import (
    NORM_SLOTS,
    CausalLM,
    CrossAttention,
    MaskedLM,
    PairClassifier,
    SelfAttention,
    Seq2Seq,
    build_model,
    set_attention,
    sinusoidal_table,
)
from tests.conftest import PLACEMENTS, tiny_config


def _ln(x):
    return F.layer_norm(x, x.shape[-1:], eps=1e-5)  # gamma = 1, beta = 0 at initialisation


def _batch(B=3, S=7, T=5, V=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V, (B, S), generator=g), torch.randint(1, V, (B, T), generator=g)


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("task", ["translation", "mlm", "classification"])
def test_shapes(placement, task):
    cfg = tiny_config(placement=placement, type_vocab_size=2 if task != "translation" else 0)
    model = build_model(cfg, task).eval()
    src, tgt = _batch()
    if task == "translation":
        assert model(src, tgt).shape == (3, 5, 50)
    elif task == "mlm":
        assert model(src).shape == (3, 7, 50)
        select = src > 25
        assert model(src, select=select).shape == (int(select.sum()), 50)
    else:
        assert model(src, torch.zeros_like(src)).shape == (3, 2)


def test_unknown_task():
    with pytest.raises(ValueError, match="unknown task"):
        build_model(tiny_config(), "summarize")


def test_parameter_names_are_stable():
    names = dict(Seq2Seq(tiny_config(encoder_layers=6, decoder_layers=6)).named_parameters())
    for name in (
        "decoder.layers.5.ffn.w2.weight",
        "decoder.layers.5.ffn.w1.bias",
        "encoder.layers.0.self_attn.qkv.weight",
        "decoder.layers.3.cross_attn.kv.weight",
        "encoder.layers.5.ffn.norm_add.weight",  # Post-LN: the norm after the residual add
    ):
        assert name in names, name
    assert not any("final_norm" in n for n in names), "Post-LN has no LayerNorm after the stack"
    pre = dict(Seq2Seq(tiny_config(placement="pre")).named_parameters())
    assert "encoder.final_norm.weight" in pre and "decoder.final_norm.weight" in pre
    assert "encoder.layers.1.ffn.norm_in.weight" in pre and not any("norm_add" in n for n in pre)
    peri = dict(Seq2Seq(tiny_config(placement="peri")).named_parameters())
    assert "encoder.layers.1.ffn.norm_out.weight" in peri and "encoder.layers.1.ffn.norm_in.weight" in peri


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_layernorm_count(placement):
    cfg = tiny_config(placement=placement)
    model = Seq2Seq(cfg)
    per_sublayer = {"post": 1, "pre": 1, "peri": 2}[placement]
    sublayers = 2 * cfg.encoder_layers + 3 * cfg.decoder_layers
    finals = 2 if NORM_SLOTS[cfg.placement].final else 0
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in model.modules()) == per_sublayer * sublayers + finals


def test_table1_post_ln():
    """Every line of Table 1 (left), encoder and decoder, from the recorded intermediates."""
    model = Seq2Seq(tiny_config(placement="post")).eval()
    src, tgt = _batch()
    _, rec = model(src, tgt, return_intermediates=True)
    for stack in ("encoder", "decoder"):
        layers = rec[stack]["layers"]
        x = rec[stack]["embed"]
        for layer in layers:
            t = layer["table1"]
            torch.testing.assert_close(t["x"], x)
            torch.testing.assert_close(t["x2"], t["x"] + t["x1"])  # x2 = x + Attn(x)
            torch.testing.assert_close(t["x3"], _ln(t["x2"]))  # x3 = LN(x2)
            torch.testing.assert_close(t["x5"], layer["ffn"]["input"] + t["x4"])  # x5 = x3 + FFN(x3)
            torch.testing.assert_close(t["x_next"], _ln(t["x5"]))  # x_{l+1} = LN(x5)
            # at initialisation LN projects onto the sphere of radius sqrt(d) (Appendix C)
            torch.testing.assert_close(t["x3"].pow(2).sum(-1), torch.full(t["x3"].shape[:-1], 32.0), rtol=1e-3, atol=1e-3)
            x = t["x_next"]
        if stack == "encoder":
            for layer in layers:  # in the encoder the FFN input is x3 itself
                torch.testing.assert_close(layer["ffn"]["input"], layer["table1"]["x3"])
        # no LayerNorm after a Post-LN stack
        torch.testing.assert_close(rec[stack]["final"], layers[-1]["table1"]["x_next"])


def test_table1_pre_ln():
    """Every line of Table 1 (right); the residual stream carries the raw x, not LN(x)."""
    model = Seq2Seq(tiny_config(placement="pre")).eval()
    src, tgt = _batch()
    _, rec = model(src, tgt, return_intermediates=True)
    for stack in ("encoder", "decoder"):
        x = rec[stack]["embed"]
        for layer in rec[stack]["layers"]:
            t = layer["table1"]
            torch.testing.assert_close(t["x"], x)
            torch.testing.assert_close(t["x1"], _ln(t["x"]))  # x1 = LN(x)
            torch.testing.assert_close(t["x3"], t["x"] + t["x2"])  # x3 = x + Attn(x1): raw x on the residual
            assert not torch.allclose(t["x3"], t["x1"] + t["x2"]), "the residual must not carry LN(x)"
            ffn_in = layer["ffn"]["input"]
            torch.testing.assert_close(t["x4"], _ln(ffn_in))  # x4 = LN(x3)
            torch.testing.assert_close(t["x_next"], t["x5"] + ffn_in)  # x_{l+1} = x5 + x3
            x = t["x_next"]
        # Final LayerNorm (Table 1): x_Final = LN(x_{L+1})
        torch.testing.assert_close(rec[stack]["final"], _ln(x))
    for layer in rec["encoder"]["layers"]:
        torch.testing.assert_close(layer["ffn"]["input"], layer["table1"]["x3"])


def test_peri_ln_wraps_each_branch():
    model = Seq2Seq(tiny_config(placement="peri")).eval()
    src, tgt = _batch()
    _, rec = model(src, tgt, return_intermediates=True)
    for layer in rec["encoder"]["layers"]:
        for sub in ("self_attn", "ffn"):
            r = layer[sub]
            torch.testing.assert_close(r["branch_in"], _ln(r["input"]))
            # the branch output is normalised: zero mean, unit variance per position
            torch.testing.assert_close(r["branch_out"].mean(-1), torch.zeros(r["input"].shape[:-1]), atol=1e-5, rtol=0)
            torch.testing.assert_close(r["branch_out"].var(-1, unbiased=False), torch.ones(r["input"].shape[:-1]),
                                       atol=1e-3, rtol=0)  # eps = 1e-5 takes about eps / Var[F] off the 1
            torch.testing.assert_close(r["output"], r["input"] + r["branch_out"])
    torch.testing.assert_close(rec["encoder"]["final"], _ln(rec["encoder"]["layers"][-1]["ffn"]["output"]))


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("share", ["all", "decoder", "none"])
def test_incremental_decoding_equals_full_pass(placement, share):
    torch.manual_seed(0)
    model = Seq2Seq(tiny_config(placement=placement, share_embeddings=share, dropout=0.1)).eval()
    src, tgt = _batch(B=4, S=9, T=8)
    src[1, 6:] = 0  # padded sources: the cross-attention must ignore them
    src[3, 3:] = 0
    with torch.no_grad():
        full = model(src, tgt)
        enc = model.encode(src)
        cache = model.init_cache()
        steps = [model.decode(tgt[:, t : t + 1], enc, cache) for t in range(tgt.shape[1])]
        torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
        assert cache.length == tgt.shape[1]
        # a prefix of several tokens, then single steps
        cache = model.init_cache()
        first = model.decode(tgt[:, :5], enc, cache)
        rest = [model.decode(tgt[:, t : t + 1], enc, cache) for t in range(5, 8)]
        torch.testing.assert_close(torch.cat([first, *rest], 1), full, atol=1e-5, rtol=1e-5)


def test_cache_reorder_selects_beams():
    model = Seq2Seq(tiny_config()).eval()
    src, tgt = _batch(B=3, T=4)
    with torch.no_grad():
        enc = model.encode(src)
        cache = model.init_cache()
        model.decode(tgt[:, :3], enc, cache)
        index = torch.tensor([2, 2, 0])
        cache.reorder(index)
        out = model.decode(tgt[index, 3:4], enc.index_select(index), cache)
        full = model(src[index], tgt[index])
        torch.testing.assert_close(out, full[:, 3:4], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_padding_changes_nothing_at_real_positions(placement):
    model = Seq2Seq(tiny_config(placement=placement)).eval()
    src, tgt = _batch(B=2, S=6, T=5)
    pad_src = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], 1)
    pad_tgt = torch.cat([tgt, torch.zeros(2, 3, dtype=torch.long)], 1)
    with torch.no_grad():
        ref = model(src, tgt)
        out = model(pad_src, pad_tgt)
        torch.testing.assert_close(out[:, :5], ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(model.encode(pad_src).out[:, :6], model.encode(src).out, atol=1e-5, rtol=1e-5)
    # a batch that mixes lengths gives each sentence the output it has alone
    mixed = pad_src.clone()
    mixed[1, 3:] = 0
    with torch.no_grad():
        alone = model(src[1:, :3], tgt[1:])
        torch.testing.assert_close(model(mixed, pad_tgt)[1:, :5], alone, atol=1e-5, rtol=1e-5)
    mlm = MaskedLM(tiny_config(placement=placement, type_vocab_size=2)).eval()
    cls = PairClassifier(tiny_config(placement=placement, type_vocab_size=2)).eval()
    cls.encoder.load_state_dict(mlm.encoder.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(mlm(pad_src)[:, :6], mlm(src), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cls(pad_src), cls(src), atol=1e-5, rtol=1e-5)


def test_theory_init_attention_is_uniform():
    """W^Q = W^K = 0 (Section 3.3): Attn(x_i) = (1/n) sum_j x_j W^V, the same at every position."""
    cfg = tiny_config(init="theory", n_heads=1, d_ffn=32)
    model = Seq2Seq(cfg).eval()
    attn: SelfAttention = model.encoder.layers[0].self_attn
    d = cfg.d_model
    assert attn.qkv.weight[: 2 * d].abs().sum() == 0
    x = torch.randn(2, 7, d)
    with torch.no_grad():
        got = attn.branch(x)
        v = x @ attn.qkv.weight[2 * d :].T + attn.qkv.bias[2 * d :]
        want = attn.out(v.mean(1, keepdim=True)).expand_as(got)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        # the attention probabilities themselves: softmax(q k^T / sqrt(d)) with q = k = 0 is uniform
        q, k, _ = attn.qkv(x).chunk(3, -1)
        probs = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d), -1)
        torch.testing.assert_close(probs, torch.full_like(probs, 1 / 7))
    cross: CrossAttention = model.decoder.layers[0].cross_attn
    assert cross.q.weight.abs().sum() == 0 and cross.kv.weight[:d].abs().sum() == 0


def test_xavier_variance():
    """Every projection matrix ~ N(0, 2/(n_in + n_out)); fused QKV block by block; biases 0; gamma 1, beta 0."""
    torch.manual_seed(0)
    cfg = tiny_config(d_model=256, d_ffn=1024, n_heads=4, encoder_layers=1, decoder_layers=1, vocab_size=300)
    model = Seq2Seq(cfg)
    d = 256
    checks = {
        "encoder.layers.0.self_attn.qkv.weight": [(d, d)] * 3,
        "encoder.layers.0.self_attn.out.weight": [(d, d)],
        "encoder.layers.0.ffn.w1.weight": [(d, 1024)],
        "encoder.layers.0.ffn.w2.weight": [(1024, d)],
        "decoder.layers.0.cross_attn.kv.weight": [(d, d)] * 2,
    }
    params = dict(model.named_parameters())
    for name, shapes in checks.items():
        for block, (n_in, n_out) in zip(params[name].chunk(len(shapes), 0), shapes):
            want = 2.0 / (n_in + n_out)
            assert abs(block.var().item() / want - 1) < 0.03, (name, block.var().item(), want)
            assert abs(block.mean().item()) < 3 * math.sqrt(want / block.numel())
    for name, p in params.items():
        if name.endswith(".bias") and "norm" not in name:
            assert p.abs().sum() == 0, name
        if "norm" in name:
            assert torch.all(p == (1.0 if name.endswith("weight") else 0.0)), name
    emb = params["encoder.embed_tokens.weight"]
    assert emb[cfg.pad_id].abs().sum() == 0
    assert abs(emb[1:].var().item() * d - 1) < 0.03  # N(0, 1/d)


def test_bert_init_is_a_truncated_normal_of_sd_0_02_at_every_width():
    """init="bert" (Devlin et al.'s initializer_range): every projection and embedding weight N(0, 0.02^2) cut at
    +-2 sd, whatever d (Xavier's scale would fall with d); biases 0, norms 1 and 0, padding row 0; a scheme's
    rescaling (DeepNorm's beta) still applies on top."""
    torch.manual_seed(0)
    # the variance of N(0, 1) truncated at +-2: 1 - 2 * 2 * phi(2) / (2 Phi(2) - 1)
    phi2, cdf2 = math.exp(-2) / math.sqrt(2 * math.pi), 0.5 * (1 + math.erf(2 / math.sqrt(2)))
    want = 0.02**2 * (1 - 4 * phi2 / (2 * cdf2 - 1))
    for d in (64, 256):
        cfg = tiny_config(d_model=d, d_ffn=4 * d, n_heads=4, encoder_layers=2, vocab_size=500, type_vocab_size=2,
                          embedding_norm=True, init="bert")
        model = MaskedLM(cfg)
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                w = p[1:] if name == "encoder.embed_tokens.weight" else p
                assert w.abs().max() <= 0.04, name
                torch.testing.assert_close(w.var().item(), want, rtol=0.06 if w.numel() > 5000 else 0.25, atol=0,
                                           msg=name)
            elif name.endswith(".bias") or name == "lm_bias":
                assert p.abs().sum() == 0, name
            else:
                assert torch.all(p == (1.0 if name.endswith("weight") else 0.0)), name
        assert model.encoder.embed_tokens.weight[cfg.pad_id].abs().sum() == 0
    base = MaskedLM(tiny_config(placement="post", init="bert", encoder_layers=4))
    deep = MaskedLM(tiny_config(placement="deepnorm", init="bert", encoder_layers=4))
    beta = deep.encoder.layers[0].ffn.init_gain
    assert beta < 1
    torch.testing.assert_close(deep.encoder.layers[0].ffn.w1.weight.std().item(),
                               beta * base.encoder.layers[0].ffn.w1.weight.std().item(), rtol=0.15, atol=0)


def test_shared_embeddings():
    m = Seq2Seq(tiny_config(share_embeddings="all"))
    assert m.encoder.embed_tokens is m.decoder.embed_tokens
    assert m.output_projection.weight is m.decoder.embed_tokens.weight
    m = Seq2Seq(tiny_config(share_embeddings="decoder"))
    assert m.encoder.embed_tokens is not m.decoder.embed_tokens
    assert m.output_projection.weight is m.decoder.embed_tokens.weight
    m = Seq2Seq(tiny_config(share_embeddings="none"))
    assert m.output_projection.weight is not m.decoder.embed_tokens.weight
    mlm = MaskedLM(tiny_config())
    h = torch.randn(3, 32)
    with torch.no_grad():
        mlm.lm_bias.normal_()
        t = mlm.lm_norm(mlm.lm_act(mlm.lm_dense(h)))
        torch.testing.assert_close(mlm.lm_logits(h), t @ mlm.encoder.embed_tokens.weight.T + mlm.lm_bias)


def test_sinusoidal_table_is_fairseqs():
    table = sinusoidal_table(10, 8)
    torch.testing.assert_close(table[0], torch.tensor([0.0] * 4 + [1.0] * 4))
    rate = math.log(10000) / 3
    for p in (1, 7):
        for k in range(4):
            assert table[p, k].item() == pytest.approx(math.sin(p * math.exp(-k * rate)), abs=1e-6)
            assert table[p, 4 + k].item() == pytest.approx(math.cos(p * math.exp(-k * rate)), abs=1e-6)


def test_learned_positions_and_segments():
    cfg = tiny_config(positional="learned", type_vocab_size=2, embedding_norm=True, scale_embedding=False)
    m = MaskedLM(cfg).eval()
    src, _ = _batch()
    seg = torch.zeros_like(src)
    seg[:, 4:] = 1
    assert not torch.allclose(m(src, seg), m(src, torch.zeros_like(src)))


def test_too_long_is_an_error():
    m = Seq2Seq(tiny_config(max_positions=8))
    with pytest.raises(ValueError, match="exceeds max_positions=8"):
        m(torch.ones(1, 9, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def test_dropout_only_in_training():
    m = Seq2Seq(tiny_config(dropout=0.3, attention_dropout=0.2, activation_dropout=0.2))
    src, tgt = _batch()
    m.eval()
    torch.testing.assert_close(m(src, tgt), m(src, tgt))
    m.train()
    assert not torch.allclose(m(src, tgt), m(src, tgt))


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_bf16_autocast_close_to_fp32(placement):
    torch.manual_seed(0)
    m = Seq2Seq(tiny_config(placement=placement)).eval()
    src, tgt = _batch()
    with torch.no_grad():
        ref = m(src, tgt)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m(src, tgt)
    assert (out.float() - ref).abs().max() < 0.1 * ref.abs().max()


@pytest.mark.parametrize("upcast", [True, False])
@pytest.mark.parametrize("fp32_q", [False, True])
def test_cpu_attention_upcast_is_fp32_attention_of_the_bf16_inputs(monkeypatch, upcast, fp32_q):
    # normlab.device.attention_upcast: on an x86 CPU without AMX, attention inside a bf16 autocast region runs on
    # fp32 copies of its bf16 q/k/v (PyTorch's bf16 CPU kernel is the slower there) and returns bf16; both
    # settings are exercised whatever CPU runs the test. fp32_q: q and k in fp32, v in bf16 (DyT's qk-norm has
    # an fp32 parameter), which must be upcast too.
    import normlab.device
    import normlab.model
    from normlab.model import _sdpa

    monkeypatch.setattr(normlab.device, "_CPU_UPCAST", upcast)
    seen = []
    kernel = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append((q.dtype, k.dtype, v.dtype, torch.is_autocast_enabled("cpu")))
        return kernel(q, k, v, **kw)

    monkeypatch.setattr(normlab.model.F, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 5, 8).bfloat16().requires_grad_() for _ in range(3))
    if fp32_q:
        q, k = (x.detach().float().requires_grad_() for x in (q, k))
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[1, ..., 3:] = False
    with torch.autocast("cpu", dtype=torch.bfloat16):
        o = _sdpa(q, k, v, mask, False, 0.0)
    # upcast: the kernel sees fp32 tensors outside autocast; native: the tensors as given, under autocast
    f32, b16 = torch.float32, torch.bfloat16
    assert seen == ([(f32, f32, f32, False)] if upcast else [(q.dtype, k.dtype, v.dtype, True)])
    assert o.dtype == torch.bfloat16
    qf, kf, vf = (x.detach().float().requires_grad_() for x in (q, k, v))
    ref = kernel(qf, kf, vf, attn_mask=mask)
    # upcast: fp32 attention rounded once to bf16 at the end; native: a bf16 kernel, within bf16 rounding
    tol = dict(atol=0, rtol=0) if upcast else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(o, ref.to(b16), **tol)
    o.float().square().sum().backward()
    ref.to(b16).float().square().sum().backward()
    assert q.grad.dtype == q.dtype and v.grad.dtype == torch.bfloat16
    torch.testing.assert_close(q.grad.float(), qf.grad, atol=5e-2, rtol=5e-2)


def test_backward_reaches_every_parameter():
    m = Seq2Seq(tiny_config(placement="peri", share_embeddings="none"))
    src, tgt = _batch()
    m(src, tgt).logsumexp(-1).mean().backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing, missing


def test_config_errors_are_config_errors():
    with pytest.raises(ConfigError):
        tiny_config(placement="sideways")


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_masked_lm_learns_from_its_context(placement):
    """The masked-LM path end to end (BERT's 80/10/10 masking at collate time, learned positions, the
    bidirectional encoder, the loss on the selected positions only) learns what only the context can tell: each
    block is a random sequence written twice, so a masked token is the token six positions away, while token
    frequencies say nothing (uniform). A model that cannot use its context stays at the copy-aware unigram loss U
    (metrics.masked_lm_unigram_loss: 3.52 nats here), with attention to itself alone it stays there (~3.7), with
    causal attention it reaches ~2.3; in 400 Adam steps both placements fall below 0.8 (measured; Post-LN crosses
    the 0.5 U line between steps 200 and 300 over seeds, and at 150 steps neither is near it: the masked LM's
    plateau in miniature, docs/results/reproduce-full/bert-calibration). It drives collate and compute_loss, not
    the trainer."""
    from normlab.data.datasets import MLMDataset
    from normlab.data.tasks import block_bounds
    from normlab.data.tokenizer import NUM_SPECIAL
    from normlab.metrics import masked_lm_unigram_loss
    from normlab.train.objectives import compute_loss

    V, half = 50, 6

    def blocks(n, seed):
        r = torch.Generator().manual_seed(seed)
        body = torch.randint(NUM_SPECIAL, V, (n, half), generator=r)
        stream = torch.cat([body, body], 1).flatten().numpy()
        return MLMDataset(stream, block_bounds(len(stream), 2 * half + 2), vocab_size=V, mask_prob=0.15)

    torch.manual_seed(0)
    cfg = tiny_config(placement=placement, positional="learned", type_vocab_size=2, embedding_norm=True,
                      scale_embedding=False)  # fmt: skip
    model = MaskedLM(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    train, valid = blocks(4096, 1), blocks(256, 2)
    for step in range(400):
        sums = compute_loss(model, train.collate(np.arange(32 * step, 32 * step + 32) % len(train), epoch=step))
        opt.zero_grad()
        (sums.loss / sums.n_tokens).backward()
        opt.step()
    with torch.no_grad():
        sums = compute_loss(model.eval(), valid.collate(np.arange(len(valid))))
    u = masked_lm_unigram_loss(math.log(V - NUM_SPECIAL))
    assert sums.loss.item() / sums.n_tokens < 0.5 * u, (placement, sums.loss.item() / sums.n_tokens, u)


@pytest.mark.parametrize("impl", ["matmul", "sdpa"])
def test_the_models_trace_whole_under_torch_compile(impl):
    """``torch.compile`` sees one graph per model, in training (dropout on, padding in the batch): no branch on a
    tensor's values (the padding check, the attention's all-masked rows) and no in-place random draw (the CPU
    dropout's mask) is traced; eager mode keeps both (normlab.model._compiling). A graph break would split the
    compiled model where the compiler could have fused across it."""
    torch.manual_seed(0)
    cfg = tiny_config(dropout=0.1, type_vocab_size=2)
    src = torch.randint(4, 50, (3, 7))
    src[0, 5:] = cfg.pad_id
    tgt = torch.randint(4, 50, (3, 6))
    tgt[1, 4:] = cfg.pad_id
    for model, args in ((Seq2Seq(cfg), (src, tgt)), (MaskedLM(cfg), (src,)), (CausalLM(cfg), (tgt,))):
        set_attention(model.train(), impl)
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(*args)
        assert explained.graph_break_count == 0, [str(b.reason)[:200] for b in explained.break_reasons]
