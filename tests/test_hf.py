"""Hugging Face BERT interop (normlab.hf): export to BertForMaskedLM, import back, and parity with HF BERT as a
reference Post-LN implementation (STYLE.md, test tier 2).

Tests that need transformers skip with a reason when it is missing (it is the optional `hf` extra; `make
install` installs it, so CI runs them); the refusals and the missing-dependency message need only torch.
"""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from normlab.config import ConfigError
from normlab.hf import (
    bert_inputs,
    bert_state_dict,
    export_bert,
    export_refusal,
    import_bert,
    maskedlm_state_dict,
    to_bert,
)
from normlab.model import MaskedLM
from tests.conftest import require_reference, tiny_config

TOL = 1e-4  # the bound on the max abs logit difference; float32 gives ~1e-6


@pytest.fixture
def tf():
    return require_reference("transformers", "pip install 'normlab[hf]' (make install does)")


def bert_like(**overrides):
    """A tiny normlab config that BERT can express: Post-LN, learned positions, no embedding scale, embedding
    LayerNorm, two segments, GELU."""
    base = dict(
        placement="post", positional="learned", scale_embedding=False, embedding_norm=True, type_vocab_size=2,
        activation="gelu",
    )  # fmt: skip
    base.update(overrides)
    return tiny_config(**base)


@torch.no_grad()
def perturb(model: nn.Module, seed: int = 0) -> nn.Module:
    """Move every parameter off its initial value: zero biases and gamma=1/beta=0 would hide a swapped or
    dropped tensor (q/k, a bias, a LayerNorm)."""
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.add_(0.2 * torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


def batch(pad_id: int = 0, vocab: int = 50):
    """Three sequences: one full, two right-padded; two segments (the second half is segment 1)."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(7, vocab, (3, 11), generator=g)  # above the special ids: no accidental padding
    tokens[1, 7:] = pad_id
    tokens[2, 10:] = pad_id
    segments = torch.zeros_like(tokens)
    segments[:, 5:] = 1
    segments[tokens.eq(pad_id)] = 0
    return tokens, segments


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


# --------------------------------------------------------------------------------------------------------
# Without transformers


def test_missing_transformers_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` now raises ImportError
    model = MaskedLM(bert_like())
    with pytest.raises(ImportError) as err:
        to_bert(model)
    msg = str(err.value)
    assert "\n" not in msg and "transformers" in msg and "pip install 'normlab[hf]'" in msg
    with pytest.raises(ImportError, match="normlab\\[hf\\]"):
        import_bert("somewhere")


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(placement="pre"), ["placement=pre", "BERT has no place for", "final LayerNorm"]),
        (dict(placement="peri"), ["placement=peri", "BERT has no place for", "branch input and output"]),
        (dict(placement="deepnorm"), ["placement=deepnorm", "residual weight alpha", "does not fold"]),
        (dict(placement="subln"), ["placement=subln", "before W^O and W^2"]),
        (dict(placement="mixln"), ["placement=mixln", "upper (Pre-LN) layers"]),
        (dict(placement="lns"), ["placement=lns", "1/sqrt(l)"]),
        (dict(placement="output"), ["placement=output", "branch output"]),
        (dict(placement="rezero"), ["placement=rezero", "ReZero"]),
        (dict(placement="admin"), ["placement=admin", "omega"]),
        (dict(placement="b2t"), ["placement=b2t", "B2T's connection"]),
        (dict(placement="resi_dual"), ["placement=resi_dual", "second residual stream"]),
        (dict(norm="rmsnorm"), ["norm=rmsnorm", "every norm of BERT is a LayerNorm"]),
        (dict(norm="dyt"), ["norm=dyt", "LayerNorm"]),
        (dict(norm="none"), ["norm=none", "LayerNorm"]),
        (dict(qk_norm=True), ["qk_norm=true", "queries and keys"]),
        (dict(scale_embedding=True), ["scale_embedding=true", "tied"]),
        (dict(embedding_norm=False), ["embedding_norm=false", "always applies a LayerNorm"]),
    ],
)
def test_export_refuses_what_bert_cannot_express(overrides, words, tmp_path):
    cfg = bert_like(**overrides)
    reason = export_refusal(cfg)
    assert reason is not None and "\n" not in reason
    for w in words:
        assert w in reason
    with pytest.raises(ConfigError) as err:  # refused before transformers is even imported
        export_bert(MaskedLM(cfg), tmp_path / "out")
    assert str(err.value) == reason
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError):
        bert_state_dict(MaskedLM(cfg))


def test_exportable_configs_have_no_refusal():
    for overrides in ({}, dict(activation="relu"), dict(positional="sinusoidal"), dict(type_vocab_size=0)):
        assert export_refusal(bert_like(**overrides)) is None


def test_name_mapping_round_trip_without_transformers():
    """bert_state_dict and maskedlm_state_dict are inverse (plain torch): every normlab tensor goes out and
    comes back unchanged, and the fused QKV is split into three d x d blocks."""
    cfg = bert_like()
    model = perturb(MaskedLM(cfg))
    hf = bert_state_dict(model)
    d = cfg.d_model
    key = hf["bert.encoder.layer.1.attention.self.key.weight"]
    assert key.shape == (d, d)
    assert torch.equal(key, model.encoder.layers[1].self_attn.qkv.weight[d : 2 * d])
    assert_same_weights(maskedlm_state_dict(hf, cfg), model.state_dict())


# --------------------------------------------------------------------------------------------------------
# With transformers


def hidden_states(model: MaskedLM, tokens, segments):
    """normlab's embedding output and each layer's output: what HF returns as hidden_states."""
    _, rec = model(tokens, segments, return_intermediates=True)
    enc = rec["encoder"]
    return [enc["embed"]] + [layer["ffn"]["output"] for layer in enc["layers"]]


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),  # BERT's own shape: GELU, learned positions, two segments
        dict(activation="relu", positional="sinusoidal", type_vocab_size=0, layer_norm_eps=1e-12),
    ],
    ids=["bert", "relu-sinusoidal-nosegments"],
)
def test_exported_bert_gives_normlab_logits(tf, tmp_path, overrides):
    cfg = bert_like(**overrides)
    model = perturb(MaskedLM(cfg)).eval()
    export_bert(model, tmp_path)
    assert {"config.json", "model.safetensors"} <= {p.name for p in tmp_path.iterdir()}
    hf = tf.BertForMaskedLM.from_pretrained(tmp_path)
    assert not hf.training
    assert hf.config.layer_norm_eps == cfg.layer_norm_eps and hf.config.hidden_act == cfg.activation
    assert hf.cls.predictions.decoder.weight is hf.bert.embeddings.word_embeddings.weight  # still tied
    tokens, segments = batch(cfg.pad_id)
    if not cfg.type_vocab_size:
        segments = None
    with torch.no_grad():
        ours = model(tokens, segments)
        out = hf(**bert_inputs(tokens, segments, pad_id=cfg.pad_id), output_hidden_states=True)
        # every position, padding included: queries at padding see the same (unmasked) keys in both
        assert (ours - out.logits).abs().max() < TOL
        for mine, theirs in zip(hidden_states(model, tokens, segments), out.hidden_states, strict=True):
            assert (mine - theirs).abs().max() < TOL
        # the attention mask is what makes them agree: without it HF attends to the padding
        unmasked = hf(input_ids=tokens, token_type_ids=segments).logits
        assert (ours[1] - unmasked[1]).abs().max() > 1e-2
        assert (ours[0] - unmasked[0]).abs().max() < TOL  # the unpadded row needs no mask


def test_export_then_import_is_identity(tf, tmp_path):
    cfg = bert_like(dropout=0.1, attention_dropout=0.05, pad_id=3, layer_norm_eps=1e-12)
    model = perturb(MaskedLM(cfg))
    export_bert(model, tmp_path)
    back = import_bert(tmp_path)
    assert not back.training
    assert_same_weights(back.state_dict(), model.state_dict())
    # every field BERT has comes back; the rest are the encoder-only model's don't-cares
    dont_care = {"decoder_layers", "share_embeddings", "num_classes", "init"}
    assert {k: v for k, v in back.cfg.to_dict().items() if k not in dont_care} == {
        k: v for k, v in cfg.to_dict().items() if k not in dont_care
    }


def test_sinusoidal_export_imports_as_learned_table(tf, tmp_path):
    cfg = bert_like(positional="sinusoidal", type_vocab_size=0)
    model = perturb(MaskedLM(cfg)).eval()
    export_bert(model, tmp_path)
    back = import_bert(tmp_path)
    assert back.cfg.positional == "learned" and back.cfg.type_vocab_size == 1
    assert torch.equal(back.encoder.embed_positions.weight, model.encoder.embed_positions.table)
    assert not back.encoder.embed_segments.weight.any()
    tokens, _ = batch(cfg.pad_id)
    with torch.no_grad():
        assert (back(tokens) - model(tokens)).abs().max() < TOL


def test_import_then_export_is_identity(tf):
    config = tf.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64, type_vocab_size=2, hidden_act="gelu",
    )  # fmt: skip
    hf = perturb(tf.BertForMaskedLM(config)).eval()
    assert hf.cls.predictions.decoder.weight is hf.bert.embeddings.word_embeddings.weight
    model = import_bert(hf)
    again = to_bert(model)
    assert_same_weights(again.state_dict(), hf.state_dict())
    tokens, segments = batch(config.pad_token_id)
    with torch.no_grad():
        assert (model(tokens, segments) - hf(**bert_inputs(tokens, segments)).logits).abs().max() < TOL


def test_bfloat16_round_trip(tf, tmp_path):
    model = perturb(MaskedLM(bert_like())).to(torch.bfloat16).eval()
    export_bert(model, tmp_path)
    hf = tf.BertForMaskedLM.from_pretrained(tmp_path)
    assert hf.dtype == torch.bfloat16
    back = import_bert(tmp_path)
    assert {p.dtype for p in back.parameters()} == {torch.bfloat16}
    assert_same_weights(back.state_dict(), model.state_dict())
    model.lm_dense.double()
    with pytest.raises(ConfigError, match="parameters mix dtypes"):
        to_bert(model)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_hf_bert_reference_parity(tf, attn):
    """Tier 2: HF's BertModel (random weights, every tensor perturbed) imported into normlab computes the
    same hidden states at every layer, with padding and segments; BERT's eps 1e-12 and GELU."""
    config = tf.BertConfig(
        vocab_size=50, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
        max_position_embeddings=40, type_vocab_size=2, hidden_act="gelu", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    bert = perturb(tf.BertModel._from_config(config, attn_implementation=attn), seed=2).eval()
    with pytest.warns(UserWarning, match="no masked-LM head"):
        model = import_bert(bert)
    assert model.cfg.placement.value == "post" and model.cfg.layer_norm_eps == 1e-12
    tokens, segments = batch(config.pad_token_id)
    with torch.no_grad():
        out = bert(**bert_inputs(tokens, segments, pad_id=config.pad_token_id), output_hidden_states=True)
        ours = hidden_states(model, tokens, segments)
    assert len(ours) == len(out.hidden_states) == 4
    for mine, theirs in zip(ours, out.hidden_states):
        assert (mine - theirs).abs().max() < TOL


def test_import_refusals(tf, tmp_path):
    def cfg(**kw):
        base = dict(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64)
        return tf.BertConfig(**{**base, **kw})

    for kw, words in [
        (dict(hidden_act="gelu_new"), "hidden_act='gelu_new'"),
        (dict(is_decoder=True), "causal"),
        (dict(pad_token_id=None), "pad_token_id is None"),
    ]:
        with pytest.raises(ConfigError, match="cannot import this BERT") as err:
            import_bert(tf.BertForMaskedLM(cfg(**kw)))
        assert words in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="d_model: set by the BERT config"):
        import_bert(tf.BertForMaskedLM(cfg()), d_model=64)
    assert import_bert(tf.BertForMaskedLM(cfg()), num_classes=3).cfg.num_classes == 3
    untied = tf.BertForMaskedLM(cfg(tie_word_embeddings=False))
    assert untied.cls.predictions.decoder.weight is not untied.bert.embeddings.word_embeddings.weight
    with pytest.raises(ConfigError, match="untied decoder"):
        import_bert(untied)
    # a directory with an encoder alone is not silently given a random head
    tf.BertModel(cfg()).save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match="lacks cls.predictions"):
        import_bert(tmp_path)


def test_activation_dropout_is_dropped_with_a_warning(tf):
    with pytest.warns(UserWarning, match="activation_dropout=0.1 is not exported"):
        to_bert(MaskedLM(bert_like(activation_dropout=0.1)))
