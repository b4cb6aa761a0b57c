"""Hugging Face interop: a normlab Post-LN :class:`~normlab.model.MaskedLM` to ``BertForMaskedLM`` and back, and a
Pre-LN :class:`~normlab.model.CausalLM` to ``GPT2LMHeadModel`` (the section "GPT-2" below).

BERT's layer is the Post-LN layer of Xiong et al. (2020, Table 1, left): ``LN(x + Attn(x))`` then
``LN(h + FFN(h))``, with no LayerNorm after the stack; its masked-LM head (``BertLMPredictionHead``) is
normlab's: dense, activation, LayerNorm, decoder tied to the token embedding plus its own bias. So a Post-LN
MaskedLM *is* a BERT, parameter for parameter. The correspondence, and what it takes care of:

============================================  ======================================================
normlab (``MaskedLM``)                        HF (``BertForMaskedLM``)
============================================  ======================================================
encoder.embed_tokens                          bert.embeddings.word_embeddings (padding_idx = pad_id)
encoder.embed_positions (learned)             bert.embeddings.position_embeddings (ids from 0 in both)
encoder.embed_segments                        bert.embeddings.token_type_embeddings
encoder.embed_norm                            bert.embeddings.LayerNorm
layers.i.self_attn.qkv  (fused, rows Q|K|V)   layer.i.attention.self.{query,key,value} (split in 3)
layers.i.self_attn.out / .norm_add            layer.i.attention.output.dense / .LayerNorm
layers.i.ffn.w1                               layer.i.intermediate.dense
layers.i.ffn.w2 / .norm_add                   layer.i.output.dense / .LayerNorm
lm_dense / lm_norm / lm_bias                  cls.predictions.transform.dense / .LayerNorm / cls.predictions.bias
(tied to encoder.embed_tokens)                cls.predictions.decoder (tied to word_embeddings and bias)
============================================  ======================================================

* **Padding.** normlab masks every key whose token is ``pad_id``; HF masks what ``attention_mask`` says.
  ``attention_mask = (input_ids != pad_id)`` is the same computation (:func:`bert_inputs` builds it). Without
  it HF attends to padding and the outputs differ.
* **Segments.** ``token_type_ids`` are normlab's ``segments`` (0 where absent in both). A model without
  segment embeddings (``type_vocab_size=0``) is exported with ``type_vocab_size=1`` and a zero row.
* **Positions** start at 0 in both (BERT, not RoBERTa's ``pad_id + 1``). A sinusoidal model is exported with
  its fixed table written as BERT's position embedding: the same function, but a trainable table in HF, and
  it imports back as ``positional="learned"``.
* **Activation.** ``relu`` and ``gelu`` map to ``hidden_act`` (HF's ``"gelu"`` is the exact erf GELU, as
  ``torch.nn.GELU()``); both the FFN and the head use it, in normlab and in BERT.
* **LayerNorm epsilon** is carried (``layer_norm_eps``: normlab's default 1e-5, BERT's 1e-12).
* **dtype.** The export has the model's parameter dtype (``save_pretrained`` records it, and
  ``from_pretrained`` loads it back in that dtype); an import has the HF model's. Tensors land on the CPU.
* **Dropout.** ``dropout`` and ``attention_dropout`` map to BERT's; BERT has no dropout after the FFN
  activation, so a nonzero ``activation_dropout`` is dropped with a warning (it only acts in training).

Refused, with the reason (a :class:`~normlab.config.ConfigError`, one line): Pre-LN and Peri-LN (BERT has no
place for a LayerNorm on a branch input or output, nor for the final LayerNorm after the stack);
``scale_embedding=True`` (BERT adds token embeddings unscaled, and the factor cannot go into the token table
because the decoder is tied to it); ``embedding_norm=False`` (BERT always normalises the summed embeddings).
Importing refuses causal or cross-attention BERTs, relative positions, other activations, a missing
``pad_token_id`` and an untied decoder.

transformers is an optional dependency (``pip install 'normlab[hf]'``), imported only when a function needs
it; the name mapping (:func:`bert_state_dict`, :func:`maskedlm_state_dict`) and the checks are plain torch.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from normlab.config import ConfigError, ModelConfig, Placement
from normlab.data.batch import EOS
from normlab.model import CausalLM, MaskedLM, SinusoidalPositions

if TYPE_CHECKING:
    from transformers import BertConfig, BertForMaskedLM, BertModel, GPT2Config, GPT2LMHeadModel

__all__ = [
    "INSTALL_HINT",
    "export_refusal",
    "bert_config",
    "model_config",
    "bert_state_dict",
    "maskedlm_state_dict",
    "bert_inputs",
    "to_bert",
    "export_bert",
    "import_bert",
    "gpt2_refusal",
    "gpt2_config",
    "gpt2_state_dict",
    "to_gpt2",
    "export_gpt2",
]

INSTALL_HINT = "pip install 'normlab[hf]'"
ACTIVATIONS = ("relu", "gelu")  # normlab's; BERT's hidden_act names for the same functions

# What each non-Post placement puts where BERT's Post-LN layer, LN(x + F(x)), has no place (Xiong et al. 2020,
# Table 1; the schemes of normlab.model.NORM_SLOTS).
_NO_PLACE = {
    Placement.PRE: "a LayerNorm on each branch input and a final LayerNorm after the stack",
    Placement.PERI: "LayerNorms on each branch input and output and a final LayerNorm after the stack",
    Placement.DEEPNORM: "the residual weight alpha of LN(alpha*x + F(x)) (folding 1/alpha into W^O and W^2 with "
    "eps/alpha^2 would express it; normlab does not fold it)",
    Placement.SUBLN: "Sub-LN's LayerNorms on each branch input, before W^O and W^2, and the final LayerNorm",
    Placement.MIXLN: "the LayerNorms on the branch inputs of its upper (Pre-LN) layers and its final LayerNorm",
    Placement.LNS: "a LayerNorm on each branch input scaled by 1/sqrt(l), and a final LayerNorm",
    Placement.OUTPUT: "a LayerNorm on each branch output and a final LayerNorm, with no LayerNorm after the add",
    Placement.REZERO: "ReZero's learned scalar on each branch, nor for a layer without a LayerNorm after the add",
    Placement.ADMIN: "Admin's learned residual weight omega of LN(omega*x + F(x)) (a per-channel vector, not "
    "foldable into BERT's weights)",
    Placement.B2T: "B2T's connection adding each layer's input before its last LayerNorm",
    Placement.RESI_DUAL: "ResiDual's second residual stream and its final LayerNorm (output x + LN(x_d))",
}


def _transformers() -> Any:
    """The transformers module, or a one-line ImportError that says how to install it."""
    try:
        import transformers
    except ImportError:
        raise ImportError(
            f"Hugging Face export/import needs transformers, an optional dependency: {INSTALL_HINT}"
        ) from None
    return transformers


# --------------------------------------------------------------------------------------------------------
# Configurations


def export_refusal(cfg: ModelConfig) -> str | None:
    """Why BERT cannot express ``cfg`` (one line), or None when it can."""
    if cfg.placement is not Placement.POST:
        return (
            f"placement={cfg.placement.value} cannot be exported to BERT: BERT has no place for "
            f"{_NO_PLACE[cfg.placement]} (its layer is Post-LN: a LayerNorm only after each residual add)"
        )
    if cfg.norm != "layernorm":
        return (f"norm={cfg.norm} cannot be exported to BERT: every norm of BERT is a LayerNorm "
                "(x - mean) / std * gamma + beta")
    if cfg.qk_norm:
        return "qk_norm=true cannot be exported to BERT: BERT's attention has no norm on queries and keys"
    if cfg.attention_softcap:
        return "attention_softcap cannot be exported to BERT: BERT's attention logits are not capped"
    if cfg.positional == "rope":
        return ("positional=rope cannot be exported to BERT: BERT adds absolute position embeddings to its input and "
                "has no rotation of queries and keys")
    if cfg.scale_embedding:
        return (
            "scale_embedding=true cannot be exported to BERT: BERT adds token embeddings unscaled, and the sqrt(d) "
            "factor cannot go into the token table because the masked-LM decoder is tied to it "
            "(train with scale_embedding=false)"
        )
    if not cfg.embedding_norm:
        return (
            "embedding_norm=false cannot be exported to BERT: BERT always applies a LayerNorm to the summed "
            "embeddings, and no LayerNorm is the identity (train with embedding_norm=true)"
        )
    return None


def _check_exportable(cfg: ModelConfig) -> None:
    reason = export_refusal(cfg)
    if reason is not None:
        raise ConfigError(reason)
    if cfg.activation_dropout > 0:
        warnings.warn(
            f"activation_dropout={cfg.activation_dropout} is not exported: BERT has no dropout after the FFN "
            "activation (inference is unaffected; fine-tuning in HF runs without it)",
            stacklevel=3,
        )


def bert_config(cfg: ModelConfig) -> BertConfig:
    """The ``BertConfig`` of a Post-LN masked LM (refuses what BERT cannot express: :func:`export_refusal`)."""
    _check_exportable(cfg)
    tf = _transformers()
    return tf.BertConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        num_hidden_layers=cfg.encoder_layers,
        num_attention_heads=cfg.n_heads,
        intermediate_size=cfg.d_ffn,
        hidden_act=cfg.activation,
        hidden_dropout_prob=cfg.dropout,
        attention_probs_dropout_prob=cfg.attention_dropout,
        max_position_embeddings=cfg.max_positions,
        type_vocab_size=max(cfg.type_vocab_size, 1),  # BERT always has the table; 0 segments -> one zero row
        layer_norm_eps=cfg.layer_norm_eps,
        pad_token_id=cfg.pad_id,
        tie_word_embeddings=True,
        is_decoder=False,
        add_cross_attention=False,
        architectures=["BertForMaskedLM"],
    )


def model_config(bert_cfg: BertConfig, **overrides: Any) -> ModelConfig:
    """The normlab ``ModelConfig`` of a BERT: Post-LN, learned positions, unscaled embeddings with their
    LayerNorm. ``overrides`` set fields BERT does not have (e.g. ``num_classes``). Refuses BERT variants
    normlab's encoder does not compute (causal, cross-attention, relative positions, other activations)."""

    def refuse(reason: str) -> ConfigError:
        return ConfigError(f"cannot import this BERT into normlab: {reason}")

    if getattr(bert_cfg, "is_decoder", False) or getattr(bert_cfg, "add_cross_attention", False):
        raise refuse(
            "it is a causal or cross-attending BERT (is_decoder/add_cross_attention); MaskedLM is bidirectional"
        )
    position_type = getattr(bert_cfg, "position_embedding_type", None) or "absolute"  # transformers 4.x only
    if position_type != "absolute":
        raise refuse(f"position_embedding_type={position_type!r}; normlab has absolute position embeddings only")
    act = bert_cfg.hidden_act
    if act not in ACTIVATIONS:
        raise refuse(f"hidden_act={act!r}; normlab's activations are {list(ACTIVATIONS)} (exact erf GELU)")
    if bert_cfg.pad_token_id is None:
        raise refuse("pad_token_id is None; normlab masks the padding id in attention, so it needs one")
    fields = dict(
        placement="post",
        d_model=bert_cfg.hidden_size,
        n_heads=bert_cfg.num_attention_heads,
        d_ffn=bert_cfg.intermediate_size,
        encoder_layers=bert_cfg.num_hidden_layers,
        decoder_layers=0,  # encoder-only
        vocab_size=bert_cfg.vocab_size,
        pad_id=bert_cfg.pad_token_id,
        dropout=bert_cfg.hidden_dropout_prob,
        attention_dropout=bert_cfg.attention_probs_dropout_prob,
        activation_dropout=0.0,
        activation=act,
        positional="learned",
        scale_embedding=False,
        embedding_norm=True,
        type_vocab_size=bert_cfg.type_vocab_size,
        max_positions=bert_cfg.max_position_embeddings,
        layer_norm_eps=bert_cfg.layer_norm_eps,
    )
    taken = sorted(set(overrides) & set(fields))
    if taken:
        raise ConfigError(f"{', '.join(taken)}: set by the BERT config, not overridable on import")
    return ModelConfig(**fields, **overrides)


# --------------------------------------------------------------------------------------------------------
# Parameters: one table of names, used both ways


def _pairs(n_layers: int) -> list[tuple[str, str]]:
    """(normlab name, HF ``BertForMaskedLM`` name) of every one-to-one parameter. The fused QKV, the tied
    decoder and the position/segment special cases are handled by the callers."""
    pairs = [
        ("encoder.embed_tokens.weight", "bert.embeddings.word_embeddings.weight"),
        ("encoder.embed_norm.weight", "bert.embeddings.LayerNorm.weight"),
        ("encoder.embed_norm.bias", "bert.embeddings.LayerNorm.bias"),
    ]
    for i in range(n_layers):
        n, h = f"encoder.layers.{i}.", f"bert.encoder.layer.{i}."
        for p in ("weight", "bias"):
            pairs += [
                (f"{n}self_attn.out.{p}", f"{h}attention.output.dense.{p}"),
                (f"{n}self_attn.norm_add.{p}", f"{h}attention.output.LayerNorm.{p}"),
                (f"{n}ffn.w1.{p}", f"{h}intermediate.dense.{p}"),
                (f"{n}ffn.w2.{p}", f"{h}output.dense.{p}"),
                (f"{n}ffn.norm_add.{p}", f"{h}output.LayerNorm.{p}"),
            ]
    return pairs


_HEAD = [
    ("lm_dense.weight", "cls.predictions.transform.dense.weight"),
    ("lm_dense.bias", "cls.predictions.transform.dense.bias"),
    ("lm_norm.weight", "cls.predictions.transform.LayerNorm.weight"),
    ("lm_norm.bias", "cls.predictions.transform.LayerNorm.bias"),
    ("lm_bias", "cls.predictions.bias"),
]
_QKV = ("query", "key", "value")  # the row blocks of normlab's fused projection, in order (model.SelfAttention)


def _unwrap(model: nn.Module, cls: type[nn.Module] = MaskedLM, what: str = "the encoder-only masked LM") -> Any:
    """``model`` without its torch.compile / DistributedDataParallel wrappers, checked to be a ``cls``."""
    model = getattr(model, "_orig_mod", model)  # torch.compile
    model = getattr(model, "module", model)  # DistributedDataParallel
    if not isinstance(model, cls):
        raise TypeError(f"expected a normlab {cls.__name__} ({what}), got {type(model).__name__}")
    return model


@torch.no_grad()
def bert_state_dict(model: MaskedLM) -> dict[str, Tensor]:
    """The parameters of ``model`` under ``BertForMaskedLM``'s names (tied keys included, as its
    ``state_dict`` has them); detached copies. Refuses what BERT cannot express."""
    model = _unwrap(model)
    cfg = model.cfg
    reason = export_refusal(cfg)
    if reason is not None:
        raise ConfigError(reason)
    src = {k: v.detach() for k, v in model.state_dict().items()}
    out = {h: src[n].clone() for n, h in _pairs(cfg.encoder_layers) + _HEAD}
    positions = model.encoder.embed_positions
    if isinstance(positions, SinusoidalPositions):
        # the fixed table becomes BERT's (trainable) position table: same function at these weights
        table = positions.table.to(model.encoder.embed_tokens.weight.dtype)
    else:
        table = src["encoder.embed_positions.weight"]
    out["bert.embeddings.position_embeddings.weight"] = table.clone()
    if cfg.type_vocab_size:
        out["bert.embeddings.token_type_embeddings.weight"] = src["encoder.embed_segments.weight"].clone()
    else:
        out["bert.embeddings.token_type_embeddings.weight"] = out["bert.embeddings.word_embeddings.weight"].new_zeros(
            1, cfg.d_model
        )
    for i in range(cfg.encoder_layers):
        for p in ("weight", "bias"):
            blocks = src[f"encoder.layers.{i}.self_attn.qkv.{p}"].chunk(3, dim=0)
            for name, block in zip(_QKV, blocks):
                out[f"bert.encoder.layer.{i}.attention.self.{name}.{p}"] = block.clone()
    out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


@torch.no_grad()
def maskedlm_state_dict(hf: dict[str, Tensor], cfg: ModelConfig, *, head: bool = True) -> dict[str, Tensor]:
    """The inverse of :func:`bert_state_dict`: normlab ``MaskedLM`` names from ``BertForMaskedLM`` names
    (``cfg`` from :func:`model_config`). ``head=False`` for a bare ``BertModel`` (keys prefixed ``bert.``):
    the result then has no ``lm_*`` entries. Refuses a decoder that is not tied to the embedding."""
    pairs = _pairs(cfg.encoder_layers) + (_HEAD if head else [])
    out = {n: hf[h] for n, h in pairs}
    out["encoder.embed_positions.weight"] = hf["bert.embeddings.position_embeddings.weight"]
    if cfg.type_vocab_size:
        out["encoder.embed_segments.weight"] = hf["bert.embeddings.token_type_embeddings.weight"]
    for i in range(cfg.encoder_layers):
        for p in ("weight", "bias"):
            out[f"encoder.layers.{i}.self_attn.qkv.{p}"] = torch.cat(
                [hf[f"bert.encoder.layer.{i}.attention.self.{name}.{p}"] for name in _QKV], dim=0
            )
    if head:
        # normlab's decoder *is* the embedding (and lm_bias): an untied BERT head has no place here
        for tied, source in (
            ("cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight"),
            ("cls.predictions.decoder.bias", "cls.predictions.bias"),
        ):
            if tied in hf and not torch.equal(hf[tied], hf[source]):
                raise ConfigError(
                    f"cannot import this BERT into normlab: {tied} differs from {source} (untied decoder)"
                )
    return {k: v.detach().clone() for k, v in out.items()}


def bert_inputs(tokens: Tensor, segments: Tensor | None = None, *, pad_id: int = 0) -> dict[str, Tensor]:
    """HF keyword arguments that make BERT compute what normlab computes on ``tokens`` (B, T):
    ``attention_mask = tokens != pad_id`` (normlab masks padding keys itself) and ``token_type_ids =
    segments`` (zeros when None, as in normlab)."""
    inputs = {"input_ids": tokens, "attention_mask": tokens.ne(pad_id).long()}
    if segments is not None:
        inputs["token_type_ids"] = segments
    return inputs


# --------------------------------------------------------------------------------------------------------
# Export and import


def _dtype(model: nn.Module, what: str) -> torch.dtype:
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1:
        raise ConfigError(f"cannot {what}: parameters mix dtypes {sorted(map(str, dtypes))}; cast the model to one")
    return dtypes.pop()


def to_bert(model: MaskedLM) -> BertForMaskedLM:
    """An in-memory ``BertForMaskedLM`` (CPU, eval mode, the model's dtype) that computes what ``model``
    computes, given ``attention_mask = input_ids != pad_id`` (:func:`bert_inputs`)."""
    model = _unwrap(model)
    config = bert_config(model.cfg)  # refuses first, before anything is built
    state = bert_state_dict(model)
    tf = _transformers()
    hf = tf.BertForMaskedLM(config).to(_dtype(model, "export to BERT")).eval()
    hf.load_state_dict(state, strict=True)  # in place: the decoder stays tied to the embedding
    return hf


def export_bert(model: MaskedLM, out_dir: str | os.PathLike[str]) -> BertForMaskedLM:
    """Write ``model`` as a Hugging Face ``BertForMaskedLM`` to ``out_dir`` (``save_pretrained``:
    ``config.json`` + ``model.safetensors``), so that ``BertForMaskedLM.from_pretrained(out_dir)`` loads it.
    Returns the in-memory HF model. Refuses Pre-LN and Peri-LN models, and what else BERT cannot express,
    with a one-line :class:`~normlab.config.ConfigError`."""
    hf = to_bert(model)
    hf.save_pretrained(os.fspath(out_dir))
    return hf


def import_bert(source: str | os.PathLike[str] | BertForMaskedLM | BertModel, **overrides: Any) -> MaskedLM:
    """A normlab Post-LN :class:`~normlab.model.MaskedLM` from a Hugging Face BERT: a directory written by
    ``save_pretrained`` (or anything ``BertForMaskedLM.from_pretrained`` accepts), a ``BertForMaskedLM``, or a
    bare ``BertModel`` (then only the encoder is imported and the masked-LM head keeps normlab's
    initialisation; a warning says so). The model is in eval mode, on the CPU, in the source's dtype;
    ``overrides`` set ModelConfig fields BERT has not (e.g. ``num_classes``)."""
    tf = _transformers()
    if isinstance(source, (str, os.PathLike)):
        hf, info = tf.BertForMaskedLM.from_pretrained(os.fspath(source), output_loading_info=True)
        missing = sorted(info["missing_keys"])
        if missing:
            raise ConfigError(
                f"cannot import {os.fspath(source)} as a masked LM: it lacks {', '.join(missing)}; to import its "
                "encoder alone, pass transformers.BertModel.from_pretrained(path) to import_bert"
            )
        head = True
    elif isinstance(source, tf.BertForMaskedLM):
        hf, head = source, True
    elif isinstance(source, tf.BertModel):
        hf, head = source, False
        warnings.warn(
            "importing a BertModel: it has no masked-LM head, so the head keeps normlab's initialisation",
            stacklevel=2,
        )
    else:
        raise TypeError(f"expected a path, BertForMaskedLM or BertModel, got {type(source).__name__}")
    cfg = model_config(hf.config, **overrides)
    state = hf.state_dict()
    if not head:
        state = {f"bert.{k}": v for k, v in state.items()}
    dtype = _dtype(hf, "import this BERT into normlab")
    model = MaskedLM(cfg).to(dtype)
    missing, unexpected = model.load_state_dict(maskedlm_state_dict(state, cfg, head=head), strict=False)
    expected_missing = set() if head else {n for n, _ in _HEAD}
    if set(missing) != expected_missing or unexpected:
        raise RuntimeError(f"normlab.hf name mapping is incomplete: missing {missing}, unexpected {unexpected}")
    return model.eval()


# --------------------------------------------------------------------------------------------------------
# GPT-2
#
# GPT-2 (Radford et al. 2019, Section 2.3) is Pre-LN with a final LayerNorm: "Layer normalization was moved to the
# input of each sub-block ... and an additional layer normalization was added after the final self-attention
# block", i.e. Xiong et al.'s Table 1, right, and normlab's ``placement=pre``. Learned absolute positions from 0,
# token embeddings unscaled, the output projection tied to them without a bias. The correspondence:
#
# ============================================  ======================================================
# normlab (``CausalLM``)                        HF (``GPT2LMHeadModel``)
# ============================================  ======================================================
# decoder.embed_tokens / embed_positions        transformer.wte / transformer.wpe
# decoder.layers.i.self_attn.norm_in            transformer.h.i.ln_1
# decoder.layers.i.self_attn.qkv (rows Q|K|V)   transformer.h.i.attn.c_attn (Conv1D: the transpose, columns Q|K|V)
# decoder.layers.i.self_attn.out                transformer.h.i.attn.c_proj (transposed)
# decoder.layers.i.ffn.norm_in                  transformer.h.i.ln_2
# decoder.layers.i.ffn.w1 / w2                  transformer.h.i.mlp.c_fc / c_proj (transposed)
# decoder.final_norm                            transformer.ln_f
# output_projection (tied to embed_tokens)      lm_head (tied to wte)
# ============================================  ======================================================
#
# HF's GPT-2 keeps W^Q, W^K, W^V in one Conv1D whose weight is (d, 3d), x @ W + b: normlab's fused nn.Linear
# weight (3d, d) transposed, the same Q|K|V order (GPT2Attention splits c_attn's output in three along the last
# dimension). ``activation_function`` "gelu" is the exact erf GELU (torch.nn.GELU()), "relu" ReLU; GPT-2's own
# "gelu_new" (the tanh approximation) has no normlab counterpart and is never written. Dropout maps to
# resid_pdrop (the branch output), embd_pdrop (the embedding) and attn_pdrop; activation_dropout has no place.

_GPT2_ACTIVATIONS = {"gelu": "gelu", "relu": "relu"}


def gpt2_refusal(cfg: ModelConfig) -> str | None:
    """Why ``GPT2LMHeadModel`` cannot express the causal LM ``cfg`` (one line), or None when it can."""
    if cfg.placement is not Placement.PRE:
        return (f"placement={cfg.placement.value} cannot be exported to GPT-2: GPT-2 is Pre-LN (a LayerNorm on each "
                "branch input and one after the stack, Radford et al. 2019, Section 2.3) and has no other norm slot")
    if cfg.norm != "layernorm":
        return f"norm={cfg.norm} cannot be exported to GPT-2: every norm of GPT-2 is a LayerNorm"
    if cfg.qk_norm:
        return "qk_norm=true cannot be exported to GPT-2: its attention has no norm on queries and keys"
    if cfg.attention_softcap:
        return "attention_softcap cannot be exported to GPT-2: its attention logits are not capped"
    if cfg.positional == "rope":
        return "positional=rope cannot be exported to GPT-2: GPT-2 adds learned absolute position embeddings"
    if cfg.scale_embedding:
        return ("scale_embedding=true cannot be exported to GPT-2: GPT-2 adds token embeddings unscaled, and the "
                "sqrt(d) factor cannot go into the table the output projection is tied to (train with "
                "scale_embedding=false)")
    if cfg.embedding_norm:
        return "embedding_norm=true cannot be exported to GPT-2: GPT-2 has no LayerNorm on the summed embeddings"
    if cfg.share_embeddings == "none":
        return "share_embeddings=none cannot be exported to GPT2LMHeadModel: its lm_head is tied to the token embedding"
    return None


def gpt2_config(cfg: ModelConfig) -> GPT2Config:
    """The ``GPT2Config`` of a Pre-LN causal LM (refuses what GPT-2 cannot express: :func:`gpt2_refusal`)."""
    reason = gpt2_refusal(cfg)
    if reason is not None:
        raise ConfigError(reason)
    if cfg.activation_dropout > 0:
        warnings.warn(f"activation_dropout={cfg.activation_dropout} is not exported: GPT-2 has no dropout after the "
                      "FFN activation (inference is unaffected)", stacklevel=3)  # fmt: skip
    tf = _transformers()
    return tf.GPT2Config(
        vocab_size=cfg.vocab_size,
        n_positions=cfg.max_positions,
        n_embd=cfg.d_model,
        n_layer=cfg.decoder_layers,
        n_head=cfg.n_heads,
        n_inner=cfg.d_ffn,
        activation_function=_GPT2_ACTIVATIONS[cfg.activation],
        resid_pdrop=cfg.dropout,
        embd_pdrop=cfg.dropout,
        attn_pdrop=cfg.attention_dropout,
        layer_norm_epsilon=cfg.layer_norm_eps,
        scale_attn_weights=True,  # q k^T / sqrt(head_dim), as normlab
        bos_token_id=EOS,  # normlab's packed stream starts every paragraph after EOS (GPT-2's <|endoftext|>)
        eos_token_id=EOS,
        pad_token_id=cfg.pad_id,
        tie_word_embeddings=True,
        architectures=["GPT2LMHeadModel"],
    )


def _unwrap_lm(model: nn.Module) -> CausalLM:
    return _unwrap(model, CausalLM, "the decoder-only language model")


@torch.no_grad()
def gpt2_state_dict(model: CausalLM) -> dict[str, Tensor]:
    """The parameters of ``model`` under ``GPT2LMHeadModel``'s names (the tied ``lm_head.weight`` included);
    detached copies, the Conv1D weights transposed. Refuses what GPT-2 cannot express."""
    model = _unwrap_lm(model)
    cfg = model.cfg
    reason = gpt2_refusal(cfg)
    if reason is not None:
        raise ConfigError(reason)
    src = {k: v.detach() for k, v in model.state_dict().items()}
    out = {"transformer.wte.weight": src["decoder.embed_tokens.weight"].clone()}
    positions = model.decoder.embed_positions
    if isinstance(positions, SinusoidalPositions):  # the fixed table becomes GPT-2's (trainable) wpe
        out["transformer.wpe.weight"] = positions.table.to(out["transformer.wte.weight"].dtype).clone()
    else:
        out["transformer.wpe.weight"] = src["decoder.embed_positions.weight"].clone()
    for i in range(cfg.decoder_layers):
        n, h = f"decoder.layers.{i}.", f"transformer.h.{i}."
        for p in ("weight", "bias"):
            out[f"{h}ln_1.{p}"] = src[f"{n}self_attn.norm_in.{p}"].clone()
            out[f"{h}ln_2.{p}"] = src[f"{n}ffn.norm_in.{p}"].clone()
        for ours, theirs in (("self_attn.qkv", "attn.c_attn"), ("self_attn.out", "attn.c_proj"),
                             ("ffn.w1", "mlp.c_fc"), ("ffn.w2", "mlp.c_proj")):  # fmt: skip
            out[f"{h}{theirs}.weight"] = src[f"{n}{ours}.weight"].t().contiguous()  # Conv1D: x @ W
            out[f"{h}{theirs}.bias"] = src[f"{n}{ours}.bias"].clone()
    for p in ("weight", "bias"):
        out[f"transformer.ln_f.{p}"] = src[f"decoder.final_norm.{p}"].clone()
    out["lm_head.weight"] = out["transformer.wte.weight"]
    return out


def to_gpt2(model: CausalLM) -> GPT2LMHeadModel:
    """An in-memory ``GPT2LMHeadModel`` (CPU, eval mode, the model's dtype) that computes what ``model`` computes."""
    model = _unwrap_lm(model)
    config = gpt2_config(model.cfg)  # refuses first, before anything is built
    state = gpt2_state_dict(model)
    tf = _transformers()
    hf = tf.GPT2LMHeadModel(config).to(_dtype(model, "export to GPT-2")).eval()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    # non-persistent buffers (older transformers keep the causal mask as attn.bias / attn.masked_bias) may be listed
    missing = [k for k in missing if not k.endswith((".attn.bias", ".attn.masked_bias"))]
    if missing or unexpected:
        raise RuntimeError(f"normlab.hf GPT-2 name mapping is incomplete: missing {missing}, unexpected {unexpected}")
    return hf


def export_gpt2(model: CausalLM, out_dir: str | os.PathLike[str]) -> GPT2LMHeadModel:
    """Write ``model`` as a Hugging Face ``GPT2LMHeadModel`` to ``out_dir`` (``save_pretrained``), so that
    ``GPT2LMHeadModel.from_pretrained(out_dir)`` loads it; returns the in-memory HF model. Refuses what GPT-2
    cannot express (not Pre-LN, RoPE, scaled embeddings, ...) with a one-line :class:`~normlab.config.ConfigError`."""
    hf = to_gpt2(model)
    hf.save_pretrained(os.fspath(out_dir))
    return hf
