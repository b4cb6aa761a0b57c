"""Parity with torch.nn: with weights copied in, normlab's layers compute what torch.nn's compute.

Post-LN is ``norm_first=False``, Pre-LN ``norm_first=True`` (eval mode, max abs diff < 1e-5).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normlab.model import Block, TransformerStack
from tests.conftest import tiny_config

D, H, FFN = 32, 4, 64


def _norms(block: Block, placement: str):
    """normlab's norm for each torch sub-layer: Post-LN's after the add, Pre-LN's on the branch input."""
    slot = "norm_add" if placement == "post" else "norm_in"
    subs = [block.self_attn] + ([block.cross_attn] if block.cross_attn is not None else []) + [block.ffn]
    return [getattr(s, slot) for s in subs]


@torch.no_grad()
def copy_into_torch(block: Block, ref: nn.Module, placement: str) -> None:
    ref.self_attn.in_proj_weight.copy_(block.self_attn.qkv.weight)
    ref.self_attn.in_proj_bias.copy_(block.self_attn.qkv.bias)
    ref.self_attn.out_proj.weight.copy_(block.self_attn.out.weight)
    ref.self_attn.out_proj.bias.copy_(block.self_attn.out.bias)
    if block.cross_attn is not None:
        ca = block.cross_attn
        ref.multihead_attn.in_proj_weight.copy_(torch.cat([ca.q.weight, ca.kv.weight]))
        ref.multihead_attn.in_proj_bias.copy_(torch.cat([ca.q.bias, ca.kv.bias]))
        ref.multihead_attn.out_proj.weight.copy_(ca.out.weight)
        ref.multihead_attn.out_proj.bias.copy_(ca.out.bias)
    ref.linear1.weight.copy_(block.ffn.w1.weight)
    ref.linear1.bias.copy_(block.ffn.w1.bias)
    ref.linear2.weight.copy_(block.ffn.w2.weight)
    ref.linear2.bias.copy_(block.ffn.w2.bias)
    ref_norms = [ref.norm1, ref.norm2] + ([ref.norm3] if block.cross_attn is not None else [])
    for mine, theirs in zip(_norms(block, placement), ref_norms):
        theirs.weight.copy_(mine.weight)
        theirs.bias.copy_(mine.bias)


def _randomize_norms(module: nn.Module) -> None:
    # gamma = 1, beta = 0 at init would hide a swapped norm; perturb them before comparing
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)


def _padding_mask(B: int, S: int) -> torch.Tensor:
    mask = torch.zeros(B, S, dtype=torch.bool)
    mask[1, S - 3 :] = True
    mask[2, S - 1 :] = True
    return mask


@pytest.mark.parametrize("placement, norm_first", [("post", False), ("pre", True)])
def test_encoder_layer_parity(placement, norm_first):
    torch.manual_seed(0)
    cfg = tiny_config(placement=placement)
    block = Block(cfg, cross_attention=False).eval()
    _randomize_norms(block)
    ref = nn.TransformerEncoderLayer(D, H, FFN, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_into_torch(block, ref, placement)
    x = torch.randn(3, 9, D)
    mask = _padding_mask(3, 9)
    with torch.no_grad():
        ours, _ = block(x, padding_mask=mask, causal=False)  # (x, z): z is B2T's/ResiDual's second stream
        theirs = ref(x, src_key_padding_mask=mask)
        real = ~mask
        assert (ours[real] - theirs[real]).abs().max() < 1e-5
        # without padding, every position
        assert (block(x, padding_mask=None, causal=False)[0] - ref(x)).abs().max() < 1e-5


@pytest.mark.parametrize("placement, norm_first", [("post", False), ("pre", True)])
def test_decoder_layer_parity(placement, norm_first):
    torch.manual_seed(1)
    cfg = tiny_config(placement=placement)
    block = Block(cfg, cross_attention=True).eval()
    _randomize_norms(block)
    ref = nn.TransformerDecoderLayer(D, H, FFN, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    copy_into_torch(block, ref, placement)
    y = torch.randn(3, 6, D)
    memory = torch.randn(3, 9, D)
    mem_mask = _padding_mask(3, 9)
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    with torch.no_grad():
        ours, _ = block(y, padding_mask=None, causal=True, memory=memory, memory_padding_mask=mem_mask)
        theirs = ref(y, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=mem_mask)
    assert (ours - theirs).abs().max() < 1e-5


def _stack(placement: str, layers: int = 3) -> TransformerStack:
    cfg = tiny_config(placement=placement, encoder_layers=layers)
    emb = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
    stack = TransformerStack(cfg, layers, causal=False, cross_attention=False, embed_tokens=emb).eval()
    _randomize_norms(stack)
    return stack


def test_pre_ln_encoder_equals_torch_encoder_with_final_norm():
    """A whole Pre-LN encoder is ``nn.TransformerEncoder(norm_first=True layers, norm=LayerNorm)``."""
    torch.manual_seed(2)
    stack = _stack("pre")
    layer = nn.TransformerEncoderLayer(D, H, FFN, dropout=0.0, batch_first=True, norm_first=True)
    ref = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(D), enable_nested_tensor=False).eval()
    for mine, theirs in zip(stack.layers, ref.layers):
        copy_into_torch(mine, theirs, "pre")
    with torch.no_grad():
        ref.norm.weight.copy_(stack.final_norm.weight)
        ref.norm.bias.copy_(stack.final_norm.bias)
    x = torch.randn(3, 9, D)
    mask = _padding_mask(3, 9)
    with torch.no_grad():
        ours = stack.run_layers(x, padding_mask=mask)
        theirs = ref(x, src_key_padding_mask=mask)
    assert (ours[~mask] - theirs[~mask]).abs().max() < 1e-5


def test_post_ln_encoder_has_no_final_norm():
    """Post-LN equals ``nn.TransformerEncoder`` *without* ``norm``; torch.nn.Transformer adds a final LayerNorm
    to Post-LN too (pytorch issues 24930 and 50086), which is a different model."""
    torch.manual_seed(3)
    stack = _stack("post")
    layer = nn.TransformerEncoderLayer(D, H, FFN, dropout=0.0, batch_first=True, norm_first=False)
    plain = nn.TransformerEncoder(layer, 3, enable_nested_tensor=False).eval()
    for mine, theirs in zip(stack.layers, plain.layers):
        copy_into_torch(mine, theirs, "post")
    x = torch.randn(2, 5, D)
    with torch.no_grad():
        ours = stack.run_layers(x)
        assert (ours - plain(x)).abs().max() < 1e-5
        plain.norm = nn.LayerNorm(D)
        plain.norm.weight.normal_(1.0, 0.2)
        assert (ours - plain(x)).abs().max() > 1e-2
