"""The Transformer of Xiong et al. (2020), with the LayerNorm placement as one switch.

Placement is decided once, in :class:`Sublayer.__init__`, by turning the :class:`~normlab.config.Placement`
into three optional norm slots (:data:`NORM_SLOTS`); every sub-layer's ``forward`` is then the same line for
every placement::

    out = norm_add(x + dropout(norm_out(F(norm_in(x)))))

Post-LN fills ``norm_add`` (Table 1, left); Pre-LN fills ``norm_in`` and puts a final LayerNorm after the
stack (Table 1, right, "Final LayerNorm"); Peri-LN fills ``norm_in`` and ``norm_out`` and has the final
LayerNorm too. An unfilled slot is ``nn.Identity`` and owns no parameters. The other schemes of the
literature (DeepNorm, Sub-LN, Mix-LN, LayerNorm Scaling, OLMo 2's output norm, ReZero, Admin) are rows of the
same table with a few more factors (a weight on the residual, a gain on the branch, a norm inside the branch),
resolved per layer by :func:`plan_layer`. B2T and ResiDual need a second tensor beside the residual stream (the
layer's input; the sum of the branch outputs): every sub-layer carries it, ``(x, z) -> (out, z')``, and the row
says how it is updated and where it is added (:class:`StreamRule`), so ``forward`` stays one line for them too.
HybridNorm's row gives the FFN slots of its own (``NormSlots.ffn``) and norms on each head's Q, K and V; nGPT's
row puts every slot on the unit sphere (x / ||x||) and its learned alpha in ``gain`` and ``1 - alpha`` in ``skip``,
and :func:`project_weights_` keeps its matrices on the sphere after every optimizer step.
The norm function itself (LayerNorm, RMSNorm, DyT, none) is the second switch, ``ModelConfig.norm``
(:func:`make_norm`), and ``qk_norm`` puts it on queries and keys. Admin's omega is set by a profiling pass on a
batch (:func:`admin_profile`, run by :func:`profile_init` where training and the analyses start).

Encoder and decoder are one :class:`TransformerStack` with ``causal`` and ``cross_attention`` switches; the
decoder-only language model (:class:`CausalLM`) is that stack with ``causal`` alone.
Parameter names are stable and readable (``decoder.layers.5.ffn.w2.weight``) so analyses select by name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab.config import ConfigError, ModelConfig, Placement
from normlab.device import LOW_PRECISION, attention_upcast, compute_dtype

__all__ = [
    "NORM_SLOTS",
    "NormSlots",
    "Sublayer",
    "SelfAttention",
    "ATTENTION_IMPLS",
    "set_attention",
    "trace_attention",
    "default_attention",
    "CrossAttention",
    "FeedForward",
    "Block",
    "TransformerStack",
    "Seq2Seq",
    "MaskedLM",
    "PairClassifier",
    "CausalLM",
    "Rotary",
    "EncoderOut",
    "LayerCache",
    "DecoderCache",
    "table1",
    "build_model",
    "init_weights",
    "describe",
    "LayerPlan",
    "plan_layer",
    "deepnorm_constants",
    "subln_gamma",
    "make_norm",
    "DyT",
    "NORM_TYPES",
    "Omega",
    "StreamRule",
    "admin_profile",
    "profile_init",
    "SphereNorm",
    "EigenScale",
    "QueryScale",
    "SphereFeedForward",
    "project_weights_",
]


@dataclasses.dataclass(frozen=True)
class NormSlots:
    """One normalisation scheme: which norms a sub-layer and a stack have, and how the residual is wired.

    A sub-layer computes, for every scheme, ``out = norm_add(skip * x + gain * norm_out(F(scale_in *
    norm_in(x))) [+ z])`` and passes a second stream ``z`` on; each field below switches one factor of that
    line on (an unfilled norm is ``nn.Identity`` and owns no parameters, an unused factor is not multiplied at
    all, and a scheme without ``stream`` carries ``z = None``).
    """

    branch_in: bool  # N on the branch input: F(N(x)) (Pre-LN, Peri-LN)
    branch_out: bool  # N on the branch output: N(F(.)) (Peri-LN's "output LN", OLMo 2)
    after_add: bool  # N after the residual add: N(x + F(x)) (Post-LN)
    final: bool  # N after the last layer of a stack (Pre-LN's "Final LayerNorm", Table 1)
    inner: bool = False  # Sub-LN: N before the attention output projection and before the FFN's W^2
    skip: Literal["one", "deepnorm", "admin"] = "one"  # weight on x: 1, DeepNorm's alpha, Admin's learned omega
    # learned scalar on the branch output, 0 at init (ReZero); eigen: nGPT's learned per-channel alpha, the residual
    # h + alpha (y - h), i.e. skip 1 - alpha and gain alpha on the branch (EigenScale, Complement)
    gain: Literal["none", "rezero", "eigen"] = "none"
    scale_in: Literal["none", "lns"] = "none"  # constant on the branch input: 1/sqrt(l) (LayerNorm Scaling)
    init: Literal["xavier", "deepnorm", "subln", "b2t"] = "xavier"  # projections x beta, gamma or 1/sqrt(L)
    post_first: bool = False  # Mix-LN: the first floor(mixln_alpha * L) layers take Post-LN's slots
    # the second stream z (StreamRule): "b2t", the layer's input, added before the layer's last norm;
    # "dual", ResiDual's sum of the branch outputs, the stack's output x + N(z) (its final norm is on z)
    stream: Literal["none", "b2t", "dual"] = "none"
    qkv_norm: bool = False  # HybridNorm: N on each head's queries, keys and values (over head_dim), whatever qk_norm
    # the FFN sub-layer's own slots where they differ from the attention's (HybridNorm: Post-LN attention, plain FFN);
    # None: every sub-layer of the layer takes this row
    ffn: NormSlots | None = None
    # nGPT: every slot's N is x / ||x|| (the unit sphere) whatever ModelConfig.norm; with gain="eigen" the residual is
    # h + alpha (y - h); queries and keys on the sphere, projections without bias and with unit-norm rows along
    # d_model (project_weights_), a SwiGLU FFN with its scales, logits scaled by s_z (CausalLM)
    sphere: bool = False

    def at(self, place: str) -> NormSlots:
        """The slots of the sub-layer at ``place`` (first, middle: the attentions; last: the FFN)."""
        return self.ffn if place == "last" and self.ffn is not None else self


_POST = NormSlots(branch_in=False, branch_out=False, after_add=True, final=False)
_PRE = NormSlots(branch_in=True, branch_out=False, after_add=False, final=True)

NORM_SLOTS: dict[Placement, NormSlots] = {
    # Vaswani et al. 2017 / BERT. No LayerNorm after the stack: torch.nn.Transformer adds one even for
    # Post-LN (pytorch issues 24930, 50086), which is not the architecture the paper analyses.
    #   x --+--> F --(+)--> N --> out
    #       '--------'
    Placement.POST: _POST,
    # Xiong et al. 2020, Table 1 (right): LN inside the residual branch plus a final LN before prediction.
    #   x --+--> N --> F --(+)--> out          ... final N after the stack
    #       '---------------'
    Placement.PRE: _PRE,
    # Kim et al. 2025 ("Peri-LN"): LN around the branch, the residual stream itself is never normalised.
    #   x --+--> N --> F --> N --(+)--> out    ... final N
    Placement.PERI: NormSlots(branch_in=True, branch_out=True, after_add=False, final=True),
    # Wang et al. 2022 ("DeepNet", arXiv 2203.00555) as torchscale builds it: x <- N(alpha x + F(x)); after
    # Xavier, W^V, W^O, W^1, W^2 (torchscale's v_proj, out_proj, fc1, fc2, weights and biases) are divided by
    # 1/beta; alpha and beta by stack and architecture (deepnorm_constants). No final N (Post-LN).
    #   x --+--> F --(+)--> N --> out
    #       '--x alpha--'
    Placement.DEEPNORM: NormSlots(branch_in=False, branch_out=False, after_add=True, final=False,
                                  skip="deepnorm", init="deepnorm"),
    # Wang et al. 2022 ("Foundation Transformers" / Magneto, arXiv 2210.06423) as torchscale builds it:
    # Pre-LN plus an N before the self-attention's W^O (torchscale: not in the cross-attention) and before
    # the FFN's W^2 (over d_ffn); W^V, W^O, W^1, W^2 multiplied by gamma after Xavier (subln_gamma). Final N.
    #   x --+--> N --> [q k v] --> attend --> N --> W^O --(+)--> out    FFN: N -> W^1 -> act -> N -> W^2
    Placement.SUBLN: NormSlots(branch_in=True, branch_out=False, after_add=False, final=True,
                               inner=True, init="subln"),
    # Li et al. 2024 ("Mix-LN", arXiv 2412.13795): layers 1..floor(alpha L) Post-LN, the rest Pre-LN, and
    # Pre-LN's final N for every alpha, 1 included (the reference's LLaMA keeps its final norm).
    Placement.MIXLN: dataclasses.replace(_PRE, post_first=True),
    # Sun et al. 2025 ("The Curse of Depth in LLMs", arXiv 2502.05795, LayerNorm Scaling): Pre-LN whose
    # branch input is N(x) / sqrt(l) in layer l = 1..L (both sub-layers of the layer). Final N.
    #   x --+--> N --> x 1/sqrt(l) --> F --(+)--> out
    Placement.LNS: dataclasses.replace(_PRE, scale_in="lns"),
    # OLMo 2 (Team OLMo 2024, arXiv 2501.00656, "reordered norm"): x <- x + N(F(x)); final N.
    #   x --+--> F --> N --(+)--> out
    Placement.OUTPUT: NormSlots(branch_in=False, branch_out=True, after_add=False, final=True),
    # Bachlechner et al. 2020 ("ReZero is all you need", arXiv 2003.04887): x <- x + a F(x), one scalar a
    # per layer shared by its sub-layers (the reference's `resweight`, Block), a = 0 at init (every layer
    # starts as the identity); no norm anywhere, no final norm.
    #   x --+--> F --> x a --(+)--> out
    Placement.REZERO: NormSlots(branch_in=False, branch_out=False, after_add=False, final=False, gain="rezero"),
    # Liu et al. 2020 ("Understanding the Difficulty of Training Transformers", arXiv 2004.08249, Admin, Eq. 4-5;
    # code: github.com/LiyuanLucasLiu/Transformer-Clinic, fairseq/modules/transformer_layer.py): Post-LN with
    # x <- N(omega_i . x + F_i(x)), omega_i a learned d-vector per sub-layer (the code's `*_ratio_change`),
    # all channels set to the same value by a profiling pass before training (admin_profile):
    # omega_i = sqrt(sum_{j<i} Var[F_j]) with the embedding as F_0 (omega_1 = 1); Xavier init unchanged; no
    # final N (Post-LN). Until admin_profile runs, omega = 1 and the model is Post-LN.
    #   x --+--> F --(+)--> N --> out
    #       '--x omega--'
    Placement.ADMIN: dataclasses.replace(_POST, skip="admin"),
    # Takase et al. 2023 ("B2T Connection", Findings of ACL, arXiv 2206.00330; code github.com/takase/
    # b2t_connection, `--residual-bottom-to-top`): Post-LN whose layer input x_l is also added before the
    # layer's last N, bypassing the others (encoder: 2 sub-layers, decoder: 3):
    #   h = N(x_l + Attn(x_l)) [decoder: h = N(h + Cross(h))];  x_{l+1} = N(h + FFN(h) + x_l).
    # No final N (Post-LN). Init: the code's rescaling_init multiplies every weight of the layer but the
    # norms' (W^Q, W^K, W^V, W^O, cross-attention, W^1, W^2; not the biases) by 1/sqrt(L) after Xavier, L the
    # stack's depth.
    #   x_l --+--> Attn --(+)--> N --+--> FFN --(+)--(+)--> N --> x_{l+1}
    #         |'----------'          '---------'     |
    #         '--------------------------------------'
    Placement.B2T: dataclasses.replace(_POST, init="b2t", stream="b2t"),
    # Xie et al. 2023 ("ResiDual: Transformer with Dual Residual Connections", arXiv 2304.14802; code
    # github.com/microsoft/ResiDual, resi_dual/resi_dual_layers.py): two streams from the embedding x_1,
    # x_a (Post-LN) and x_d (the raw branch outputs summed, as Pre-LN's residual stream), F seeing x_a:
    #   y = F(x_a);  x_a <- N(x_a + y);  x_d <- x_d + y;  output x_a + N_final(x_d)  (the code's alpha = 1).
    # The final N is on x_d only; init unchanged (Xavier). The official code's final N has eps 1e-7; normlab's
    # layer_norm_eps is used.
    #   x_a --+--> F --(+)--> N --> x_a          x_d --(+)--> x_d      ... out = x_a + N(x_d)
    #         '--------'  '--------- y -----------------'
    Placement.RESI_DUAL: dataclasses.replace(_POST, final=True, stream="dual"),
    # Zhuo et al. 2025 ("HybridNorm", arXiv 2503.04598; code github.com/BryceZhuo/HybridNorm, commit f0dd605,
    # dense_model/olmo/model.py OLMoSequentialBlock with configs/exps/1.2B-dense-HybriedNorm.yaml): QKV-norm in the
    # attention (use_query_norm, use_key_norm, use_value_norm: one norm over head_dim each, shared by the heads, on
    # the projections before RoPE), no norm on the attention's input (attn_norm: false), and the FFN's input norm
    # with the residual taken after it (ffn_norm, ffn_residual_after_norm: x' = N(x1) + FFN(N(x1)), x1 = x +
    # Attn(x)). That is the same function as a norm after the attention's residual add and a plain FFN residual,
    # which is how the row says it. The model's final norm (OLMo's ln_f) stays. In an encoder-decoder the
    # cross-attention is an attention like the self-attention (QKV-norm, N after its add): the paper has none.
    #   x --+--> [N(q) N(k) N(v)] Attn --(+)--> N --+--> FFN --(+)--> out      ... final N
    #       '-------------------------------'       '-----------'
    Placement.HYBRIDNORM: NormSlots(branch_in=False, branch_out=False, after_add=True, final=True, qkv_norm=True,
                                    ffn=NormSlots(branch_in=False, branch_out=False, after_add=False, final=True)),
    # Loshchilov et al. 2025 ("nGPT: Normalized Transformer with Representation Learning on the Hypersphere", ICLR,
    # arXiv 2410.01131; reference lucidrains/nGPT-pytorch 0.2.16, nGPT_pytorch/nGPT.py). N(x) = x / ||x||, no
    # LayerNorm anywhere. Section 2.2.3: h_A = N(Attn(h)), h <- N(h + alpha_A (h_A - h)), the same for the MLP with
    # alpha_M, alpha a learned d-vector ("eigen learning rates", EigenScale: init 1/L, stored at scale 1/sqrt(d) as
    # Section 2.5 and the reference). Section 2.3.2: q <- s_qk N(q), k <- N(k) per head, softmax scale sqrt(d_k)
    # (the reference scales the queries only; the paper both). Section 2.4: SwiGLU u * silu(v) with u <- s_u u,
    # v <- s_v sqrt(d) v (SphereFeedForward). Section 2.2.1/2.2.2: unit-norm token embeddings in, logits
    # z = s_z (E h) out (CausalLM). Section 2.2.4: every matrix unit-norm along d_model, renormalised after each
    # optimizer step (project_weights_). No final norm (the stream is on the sphere). Decoder-only (task lm).
    #   h --+--> Attn --> N --(lerp alpha)--> N --> out
    #       '-----------------'
    Placement.NGPT: NormSlots(branch_in=False, branch_out=True, after_add=True, final=False, gain="eigen",
                              sphere=True),
}


def deepnorm_constants(role: str, n_encoder: int, n_decoder: int) -> tuple[float, float]:
    """DeepNorm's (alpha, beta) for a stack (Wang et al. 2022, Figure 2 and Table 1; torchscale 0.3.0's
    encoder.py and decoder.py write beta as 1/init_scale).

    torchscale agrees with the paper everywhere but in the encoder of an encoder-decoder, whose weights it
    divides by (N^4 M)^(1/16) / 1.15, i.e. beta = 1.15 (N^4 M)^(-1/16), where the paper has 0.87 = 1/1.15;
    normlab takes the paper's value (tests/test_parity_refs.py checks both).

    =================  =========================  ==========================
    role               alpha                      beta
    =================  =========================  ==========================
    encoder (only)     (2N)^(1/4)                 (8N)^(-1/4)
    decoder (only)     (2M)^(1/4)                 (8M)^(-1/4)
    seq2seq encoder    0.81 (N^4 M)^(1/16)        (N^4 M)^(-1/16) / 1.15
    seq2seq decoder    (3M)^(1/4)                 (12M)^(-1/4)
    =================  =========================  ==========================
    """
    N, M = n_encoder, n_decoder
    if role == "encoder":
        return (2.0 * N) ** 0.25, (8.0 * N) ** -0.25
    if role == "decoder":
        return (2.0 * M) ** 0.25, (8.0 * M) ** -0.25
    if role == "seq2seq-encoder":
        return 0.81 * (N**4 * M) ** 0.0625, (N**4 * M) ** -0.0625 / 1.15
    if role == "seq2seq-decoder":
        return (3.0 * M) ** 0.25, (12.0 * M) ** -0.25
    raise ValueError(f"unknown stack role {role!r}")


def subln_gamma(role: str, n_encoder: int, n_decoder: int) -> float:
    """Sub-LN's init gain gamma (Wang et al. 2022, "Foundation Transformers", Section 2.3; torchscale 0.3.0):
    sqrt(log 2N) for an encoder-only stack (sqrt(log 2M) decoder-only); in an encoder-decoder,
    sqrt(log(3M) log(2N) / 3) for the encoder and sqrt(log 3M) for the decoder."""
    N, M = n_encoder, n_decoder
    if role == "encoder":
        return math.sqrt(math.log(2 * N))
    if role == "decoder":
        return math.sqrt(math.log(2 * M))
    if role == "seq2seq-encoder":
        return math.sqrt(math.log(3 * M) * math.log(2 * N) / 3)
    if role == "seq2seq-decoder":
        return math.sqrt(math.log(3 * M))
    raise ValueError(f"unknown stack role {role!r}")


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    """A scheme resolved for one layer of one stack: its slots and the numbers the slots need."""

    slots: NormSlots
    layer: int  # 1-based depth l in the stack
    skip: float = 1.0  # DeepNorm's alpha
    scale_in: float = 1.0  # LayerNorm Scaling's 1/sqrt(l)
    init_gain: float = 1.0  # DeepNorm's beta, Sub-LN's gamma or B2T's 1/sqrt(L)
    eigen_init: float = 0.0  # nGPT's alpha at init: 1/L (the reference's alpha_init default; the paper 0.05)


def plan_layer(cfg: ModelConfig, role: str, index: int, n_layers: int) -> LayerPlan:
    """Resolve ``cfg.placement`` for layer ``index`` (0-based) of a stack of ``n_layers`` with ``role`` in
    encoder, decoder, seq2seq-encoder, seq2seq-decoder. The one function that turns the scheme into numbers."""
    slots = NORM_SLOTS[cfg.placement]
    if slots.post_first and index < math.floor(cfg.mixln_alpha * n_layers):
        slots = _POST
    N = n_layers if role in ("encoder", "seq2seq-encoder") else cfg.encoder_layers
    M = n_layers if role in ("decoder", "seq2seq-decoder") else cfg.decoder_layers
    skip, gain = 1.0, 1.0
    if slots.skip == "deepnorm" or slots.init == "deepnorm":
        skip, gain = deepnorm_constants(role, N, M)
    if slots.init == "subln":
        gain = subln_gamma(role, N, M)
    if slots.init == "b2t":
        gain = 1.0 / math.sqrt(n_layers)  # B2T's rescaling_init: layer_num ** -0.5, the stack's own depth
    scale_in = 1.0 / math.sqrt(index + 1) if slots.scale_in == "lns" else 1.0
    eigen = 1.0 / n_layers if slots.gain == "eigen" else 0.0
    return LayerPlan(slots, index + 1, skip=skip, scale_in=scale_in, init_gain=gain, eigen_init=eigen)


def stack_has_final_norm(cfg: ModelConfig, n_layers: int) -> bool:
    """Whether a stack ends with a norm: the scheme's ``final``. A Mix-LN stack keeps its final norm for every
    mixln_alpha, 1 (all layers Post-LN) included, as the reference does (github.com/pixeli99/MixLN: the
    LLaMA model's final ``self.norm`` runs whatever the layers' split)."""
    return NORM_SLOTS[cfg.placement].final


class DyT(nn.Module):
    """Dynamic Tanh (Zhu, Chen, He, LeCun, Liu 2025, "Transformers without Normalization", arXiv 2503.10622):
    DyT(x) = gamma * tanh(alpha x) + beta, alpha a learned scalar (init ``alpha0``: 0.5 in the paper's
    non-LLM setting), gamma = 1 and beta = 0 per channel at init."""

    def __init__(self, d: int, alpha0: float = 0.5) -> None:
        super().__init__()
        self.alpha0 = alpha0
        self.alpha = nn.Parameter(torch.full((), alpha0))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.alpha.fill_(self.alpha0)
            self.weight.fill_(1.0)
            self.bias.zero_()

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.alpha * x) * self.weight + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha0={self.alpha0}"


NORM_TYPES: tuple[type[nn.Module], ...] = (nn.LayerNorm, nn.RMSNorm, DyT)


class SphereNorm(nn.Module):
    """nGPT's Norm(x) = x / ||x||_2 over the last dimension (Loshchilov et al. 2025, Section 2.1): the projection onto
    the unit sphere, no parameters (``F.normalize``, as the reference's l2norm with norm_eps = 0)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=-1)


class EigenScale(nn.Module):
    """A learned per-channel scale of nGPT stored at another scale (Loshchilov et al. 2025, Section 2.5): the
    parameter ``s`` starts at ``scale`` and the value used is ``s * init / scale``, so that it starts at ``init``
    while the optimizer moves it as a parameter of size ``scale`` (alpha_A, alpha_M: init 1/L, scale 1/sqrt(d);
    s_qk: 1, 1/d; s_u, s_v: 1, 1; s_z: 1, 1/sqrt(d), the reference's defaults). ``forward(x)`` multiplies the last
    dimension of ``x`` by the value."""

    def __init__(self, n: int, init: float, scale: float) -> None:
        super().__init__()
        self.init, self.scale = init, scale
        self.s = nn.Parameter(torch.full((n,), scale))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.s.fill_(self.scale)

    def value(self) -> Tensor:
        return self.s * (self.init / self.scale)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.value()

    def extra_repr(self) -> str:
        return f"{self.s.shape[0]}, init={self.init:.4g}, scale={self.scale:.4g}"


class Complement(nn.Module):
    """(1 - alpha) x for the alpha of an :class:`EigenScale` held elsewhere (the sub-layer's gain): with it nGPT's
    residual h + alpha (y - h) is the table's ``skip(h) + gain(y)`` (Section 2.2.3). The rate is not registered
    here, so its parameter has one name (``gain.s``)."""

    def __init__(self, rate: EigenScale) -> None:
        super().__init__()
        object.__setattr__(self, "rate", rate)

    def forward(self, x: Tensor) -> Tensor:
        return x - self.rate(x)


class QueryScale(nn.Module):
    """nGPT's scale of the unit-norm queries (B, H, T, hd) (Section 2.3.2): times s_qk, a learned vector over the
    heads' features (:class:`EigenScale`: init 1, scale 1/d, the reference's; the reference scales the queries only,
    the paper the keys too), and times hd, which turns the kernels' softmax scale 1/sqrt(hd) into nGPT's sqrt(hd)
    (q and k unit vectors: the logits are s_qk-weighted cosines times sqrt(d_k)). Applied after RoPE, as in the
    reference: the per-feature scale does not commute with the rotation (the normalisation does)."""

    def __init__(self, n_heads: int, head_dim: int, d_model: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, head_dim
        self.s_qk = EigenScale(n_heads * head_dim, 1.0, 1.0 / d_model)

    def forward(self, q: Tensor) -> Tensor:
        return q * (self.s_qk.value().view(self.n_heads, 1, self.head_dim) * float(self.head_dim))


def sphere_linear(n_in: int, n_out: int, dim: int) -> nn.Linear:
    """An nGPT projection: no bias, its weight (n_out, n_in) kept with unit-norm vectors along ``dim``, the axis of
    d_model (1: rows over the input, for W^Q, W^K, W^V, W^u, W^v, the embeddings; 0: columns over the output, for
    W^O and the FFN's W^2; Section 2.2.4), by :func:`project_weights_`."""
    linear = nn.Linear(n_in, n_out, bias=False)
    linear.sphere_dim = dim
    return linear


@torch.no_grad()
def project_weights_(model: nn.Module) -> int:
    """nGPT's weight normalisation (Loshchilov et al. 2025, Section 2.2.4; the reference's ``norm_weights_``): every
    matrix marked ``sphere_dim`` (:func:`sphere_linear`, and nGPT's token embedding and output projection) back onto
    the unit sphere along that axis. :func:`init_weights` calls it, and the trainer after every optimizer step, so
    every update of every training path (plain, accumulated, data-parallel: each rank the same) ends with it; a
    no-op for the other schemes. Returns how many matrices it projected (a tied one once)."""
    seen: set[int] = set()
    for m in model.modules():
        dim = getattr(m, "sphere_dim", None)
        if dim is not None and id(m.weight) not in seen:
            seen.add(id(m.weight))
            m.weight.copy_(F.normalize(m.weight, dim=dim))
    return len(seen)


def make_norm(cfg: ModelConfig, d: int | None = None) -> nn.Module:
    """The norm function ``cfg.norm`` over the last ``d`` (default d_model) features."""
    d = cfg.d_model if d is None else d
    if cfg.norm == "layernorm":
        return nn.LayerNorm(d, eps=cfg.layer_norm_eps)
    if cfg.norm == "rmsnorm":  # Zhang & Sennrich 2019: x / sqrt(mean(x^2) + eps) * g
        return nn.RMSNorm(d, eps=cfg.layer_norm_eps)
    if cfg.norm == "dyt":
        return DyT(d, cfg.dyt_alpha)
    return nn.Identity()


def _norm(present: bool, cfg: ModelConfig, d: int | None = None, slots: NormSlots | None = None) -> nn.Module:
    """The norm of one slot: ``cfg.norm`` over ``d`` features where ``present``, nGPT's x / ||x|| in a sphere scheme."""
    if not present:
        return nn.Identity()
    return SphereNorm() if slots is not None and slots.sphere else make_norm(cfg, d)


class Scale(nn.Module):
    """Multiply by a constant (DeepNorm's alpha on the residual, LayerNorm Scaling's 1/sqrt(l))."""

    def __init__(self, c: float) -> None:
        super().__init__()
        self.c = c

    def forward(self, x: Tensor) -> Tensor:
        return x * self.c

    def extra_repr(self) -> str:
        return f"{self.c:.6g}"


class ReZeroGain(nn.Module):
    """ReZero's learned scalar on the branch output, 0 at init (Bachlechner et al. 2020, Eq. 4); one module per
    layer, shared by the layer's sub-layers (:class:`Block`)."""

    def __init__(self) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(()))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.alpha.zero_()

    def forward(self, x: Tensor) -> Tensor:
        return x * self.alpha


class Omega(nn.Module):
    """Admin's learned weight on the residual, omega . x with omega a d-vector (Liu et al. 2020, Eq. 5; the
    official code's ``*_ratio_change`` parameters). 1 at init; :func:`admin_profile` sets it."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.omega = nn.Parameter(torch.ones(d))

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.omega.fill_(1.0)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.omega


def _skip(slots: NormSlots, c: float, d: int) -> nn.Module:
    if slots.skip == "admin":
        return Omega(d)
    return _maybe(c)


def _maybe(c: float) -> nn.Module:
    return Scale(c) if c != 1.0 else nn.Identity()


class StreamRule(nn.Module):
    """How one sub-layer treats the second stream ``z`` of B2T and ResiDual (no parameters).

    ``add(s, z)`` is the residual sum ``s`` with the term the sub-layer adds to it before ``norm_add`` (``s``
    itself, no operation, where that term is 0: an elementwise pass per sub-layer saved); ``update(z, x, y)``
    is the ``z`` it passes on (``x`` its input, ``y`` its dropped-out branch output). Decided once from the
    scheme and the sub-layer's place in its layer (:attr:`Sublayer.place`):

    ====================  ==============================  ===============================
    scheme, sub-layer     add                             update
    ====================  ==============================  ===============================
    (no second stream)    0                               z (None)
    b2t, first            0                               x: the layer's input
    b2t, middle (cross)   0                               z
    b2t, last (FFN)       z: the layer's input (bypass)   z
    resi_dual, every one  0                               z + y (x_d accumulates F(x_a))
    ====================  ==============================  ===============================
    """

    def __init__(self, stream: str, place: str) -> None:
        super().__init__()
        self.bypass = stream == "b2t" and place == "last"
        self.rule = {"none": "keep", "dual": "accumulate"}.get(stream) or ("input" if place == "first" else "keep")

    def add(self, s: Tensor, z: Tensor | None) -> Tensor:
        return s + z if self.bypass else s

    def update(self, z: Tensor | None, x: Tensor, y: Tensor) -> Tensor | None:
        if self.rule == "input":
            return x
        if self.rule == "accumulate":
            return z + y
        return z

    def extra_repr(self) -> str:
        return f"add={'z' if self.bypass else 0}, update={self.rule}"


_compiling = torch.compiler.is_compiling  # under torch.compile: no branch on a tensor's values, no in-place draw

_DROP_BITS = 15  # random bits per dropout decision (see _keep_mask)


def _drop_threshold(p: float) -> int:
    """The dropout probability as a count of 2^15: a 15-bit draw below it drops (p' = t / 2^15)."""
    return round(p * (1 << _DROP_BITS))


def _keep_mask(shape: torch.Size, p: float, device: torch.device) -> Tensor:
    """A bool mask, True with probability 1 - p' per element, p' = round(p * 2^15) / 2^15 (0.1 -> 0.1000061).

    Each element takes 15 bits of a 64-bit draw of torch's generator instead of a whole fp32 uniform, four
    decisions per draw. On the CPU a 64-bit draw is two mt19937 outputs, so that is half as many generator
    calls as ``torch.rand`` makes, and no float conversion: measured for a (64, 32, 256) activation on a
    2-core AVX-512 EPYC, 1 thread, ``torch.rand`` 2.55 ms, ``random_`` of a quarter as many int64 0.47 ms; the
    quick scale's model draws 32 such masks an update. ``random_`` on int64 gives values in [0, 2^63), so of
    the four 16-bit lanes of each draw three are uniform over 16 bits and the top one over 15: the low 15 bits
    of every lane are uniform, which is what is compared with the threshold. Seeded by ``torch.manual_seed``
    and saved in checkpoints like any other draw."""
    n = math.prod(shape)
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_()
    lanes = words.view(torch.int16)[:n].view(shape)
    return lanes.bitwise_and_(0x7FFF) >= _drop_threshold(p)


class _MaskDropout(torch.autograd.Function):
    """Inverted dropout whose mask is drawn by :func:`_keep_mask` and kept as bool for backward.

    ``F.dropout`` on the CPU draws a float Bernoulli tensor, scales it, multiplies, and keeps the float mask
    for backward (measured on the development CPU for a (4096, 512) activation, forward + backward, 1 thread:
    36 ms for ``F.dropout``, 22 ms with an fp32 uniform per element, less again with :func:`_keep_mask`); the
    saved mask is 1 byte per element instead of 4. The kept elements are scaled by 1 / (1 - p'), p' the
    probability the mask really drops with, so the expectation is exactly preserved. The mask does not depend
    on the activation's dtype, so a bf16 activation drops with the same probability as an fp32 one.
    """

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:  # type: ignore[override]
        t = _drop_threshold(p)
        if t >= 1 << _DROP_BITS:  # p' = 1: everything is dropped (F.dropout with p = 1 gives zeros too)
            ctx.scale, keep = 0.0, torch.zeros(x.shape, dtype=torch.bool, device=x.device)
        else:
            ctx.scale = (1 << _DROP_BITS) / ((1 << _DROP_BITS) - t)
            keep = _keep_mask(x.shape, p, x.device)
        ctx.save_for_backward(keep)
        return x.mul(_as_factor(keep, x.dtype)).mul_(ctx.scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (keep,) = ctx.saved_tensors
        return grad.mul(_as_factor(keep, grad.dtype)).mul_(ctx.scale), None


def _as_factor(keep: Tensor, dtype: torch.dtype) -> Tensor:
    """The bool mask as 0/1 in ``dtype``, converted from its bytes: ``x * keep`` with a bool ``keep`` takes
    PyTorch's type-promoting loop, and ``keep.to(bf16)`` a slow cast, where uint8 -> float and a product of
    one dtype are vectorized (measured, (64, 32, 256) on a Zen 5 core, jemalloc: bf16 ``x.mul(keep)`` 0.51 ms
    against 0.13 ms for this and the product; fp32 0.25 against 0.09). x * 1 and x * 0 are exact, so the
    result is the same bit for bit."""
    return keep.view(torch.uint8).to(dtype)


class Dropout(nn.Dropout):
    """``nn.Dropout`` (same module, same semantics); on the CPU through :class:`_MaskDropout`, elsewhere
    through ``F.dropout``, whose CUDA kernel is already fused and keeps a bool mask."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        # under torch.compile F.dropout, which the compiler fuses with its neighbours (its own random numbers:
        # a compiled run's masks are not an eager run's); _keep_mask's in-place draw would break the graph
        if x.device.type == "cpu" and not self.inplace and x.is_floating_point() and not _compiling():
            return _MaskDropout.apply(x, self.p)
        return F.dropout(x, self.p, True, self.inplace)


# --------------------------------------------------------------------------------------------------------
# Incremental-decoding cache


@dataclasses.dataclass
class LayerCache:
    """One decoder layer's cache: self-attention keys/values of the steps so far (B, H, T, head_dim),
    and the cross-attention keys/values of the encoder output, computed once (B, H, S, head_dim)."""

    k: Tensor | None = None
    v: Tensor | None = None
    cross_k: Tensor | None = None
    cross_v: Tensor | None = None


@dataclasses.dataclass
class DecoderCache:
    """The decoder's state between incremental steps; ``length`` is the number of target positions seen."""

    layers: list[LayerCache]
    length: int = 0

    def reorder(self, index: Tensor, memory_index: Tensor | slice | None = None) -> DecoderCache:
        """Select rows (beams) of every cached tensor, e.g. after a beam-search step.

        The cross-attention keys/values are rows of the encoder memory, which several decoder rows may share
        (:class:`CrossAttention`: the beams of a sentence). ``memory_index`` selects those rows: an index
        tensor, or a slice (``slice(None)``: unchanged, no copy); by default they follow ``index``.
        """
        for layer in self.layers:
            for name in ("k", "v"):
                t = getattr(layer, name)
                if t is not None:
                    setattr(layer, name, t.index_select(0, index))
            for name in ("cross_k", "cross_v"):
                t = getattr(layer, name)
                if t is not None:
                    setattr(layer, name, t[memory_index] if memory_index is not None else t.index_select(0, index))
        return self


@dataclasses.dataclass
class EncoderOut:
    """Encoder states (B, S, d) and the source padding mask (B, S), True at padding."""

    out: Tensor
    padding_mask: Tensor | None

    def index_select(self, index: Tensor) -> EncoderOut:
        mask = None if self.padding_mask is None else self.padding_mask.index_select(0, index)
        return EncoderOut(self.out.index_select(0, index), mask)


# --------------------------------------------------------------------------------------------------------
# Sub-layers


class Sublayer(nn.Module):
    """A residual sub-layer ``(x, z) -> (norm_add(skip(x) + dropout(gain(norm_out(branch(scale_in(norm_in(x))))))
    + [z: stream.add]), stream.update(z, x, dropout(...)))``.

    The only place where the normalisation scheme acts: the slots and factors are chosen here, once, from
    the layer's :class:`LayerPlan` (:data:`NORM_SLOTS` resolved by :func:`plan_layer`); an unused one is
    ``nn.Identity``. ``z`` is the second stream of B2T and ResiDual (:class:`StreamRule`), None otherwise.
    Subclasses implement ``branch`` (attention or FFN), ``init_gain_weights`` (the projections DeepNorm and
    Sub-LN rescale at init), and say their ``place`` in a layer, and nothing else.
    """

    place = "middle"  # first (self-attention), middle (cross-attention) or last (FFN) sub-layer of a layer

    def __init__(self, cfg: ModelConfig, plan: LayerPlan | None = None) -> None:
        super().__init__()
        self.plan = plan = plan or plan_layer(cfg, "encoder", 0, max(cfg.encoder_layers, 1))
        self.slots = slots = plan.slots.at(self.place)  # HybridNorm's FFN has slots of its own
        self.norm_in = _norm(slots.branch_in, cfg, slots=slots)
        self.scale_in = _maybe(plan.scale_in)
        self.norm_out = _norm(slots.branch_out, cfg, slots=slots)
        if slots.gain == "eigen":  # nGPT: h + alpha (y - h) = (1 - alpha) h + alpha y, alpha per channel
            self.gain: nn.Module = EigenScale(cfg.d_model, plan.eigen_init, cfg.d_model**-0.5)
            self.skip: nn.Module = Complement(self.gain)
        else:
            self.gain = ReZeroGain() if slots.gain == "rezero" else nn.Identity()
            self.skip = _skip(slots, plan.skip, cfg.d_model)
        self.norm_add = _norm(slots.after_add, cfg, slots=slots)
        self.drop = Dropout(cfg.dropout)
        self.stream = StreamRule(slots.stream, self.place)
        self.init_gain = plan.init_gain

    def branch(self, h: Tensor, **kwargs: Any) -> Tensor:
        raise NotImplementedError

    def init_gain_weights(self) -> list[Tensor]:
        """The parameters DeepNorm divides by 1/beta and Sub-LN multiplies by gamma after Xavier."""
        raise NotImplementedError

    def init_gain_params(self) -> list[Tensor]:
        """What ``init_weights`` multiplies by ``init_gain``: B2T's rescaling_init takes every projection
        weight of the sub-layer (not the biases, not the norms), DeepNorm and Sub-LN ``init_gain_weights``."""
        if self.slots.init == "b2t":
            return [m.weight for m in self.modules() if isinstance(m, nn.Linear)]
        return self.init_gain_weights()

    def forward(
        self, x: Tensor, z: Tensor | None = None, record: dict[str, Tensor] | None = None, **kwargs: Any
    ) -> tuple[Tensor, Tensor | None]:
        h = self.scale_in(self.norm_in(x))
        y = self.gain(self.norm_out(self.branch(h, **kwargs)))
        yd = self.drop(y)
        s = self.stream.add(self.skip(x) + yd, z)  # the residual carries the raw x, never the normalised h
        out = self.norm_add(s)
        z_next = self.stream.update(z, x, yd)
        if record is not None:
            record.update(input=x, branch_in=h, branch_out=y, sum=s, output=out)
            if z is not None or z_next is not None:
                record.update(stream_in=z, stream_out=z_next)
        return out, z_next


# Attention kernels. Which one is fastest depends on the device, the dtype, the lengths and the mask (issue 31:
# at the quick scale's (64, 4, 32, 64) on a 2-core AVX-512 BF16 EPYC, forward + backward: torch's bf16 flash
# kernel 24.6 ms, the same on fp32 copies 11.6 ms, the explicit products below 4.9 ms; on an AMX Xeon bf16 flash
# 49.8 ms against 4.0 ms), so a run measures them at its own shapes (normlab.train.kernels.choose_attention)
# and sets the winner on every attention module (set_attention). All compute softmax(q k^T / sqrt(hd) + mask) v
# with the softmax in fp32; tests/test_attention.py checks each against the others, forward and backward.
ATTENTION_IMPLS: tuple[str, ...] = ("sdpa", "sdpa-fp32", "matmul")

# (q, k, v, mask, is_causal) of every attention call while trace_attention() is active, for the measurement
_TRACE: list[tuple[Tensor, Tensor, Tensor, Tensor | None, bool]] | None = None


@contextlib.contextmanager
def trace_attention() -> Iterator[list[tuple[Tensor, Tensor, Tensor, Tensor | None, bool]]]:
    """Record the inputs of every attention call made inside the block (a list of ``(q, k, v, mask,
    is_causal)``, detached): the shapes, strides, dtypes and masks a measurement of the kernels replays."""
    global _TRACE
    previous, _TRACE = _TRACE, []
    try:
        yield _TRACE
    finally:
        _TRACE = previous


def default_attention(q: Tensor, k: Tensor, v: Tensor) -> str:
    """The kernel of a model whose run did not measure one: SDPA, on fp32 copies of low-precision inputs where
    PyTorch's bf16 CPU kernel is known to be the slower (:func:`normlab.device.attention_upcast`)."""
    return "sdpa-fp32" if attention_upcast(q, k, v) is not None else "sdpa"


def _matmul_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout: float,
                      softcap: float = 0.0) -> Tensor:  # fmt: skip
    """softmax(q k^T / sqrt(hd) + mask) v as batched matmuls around an fp32 softmax, with the precision of the
    flash kernels: the scores q k^T in fp32 (from fp32 copies of q and k: rounding the scores to bf16 would
    cost up to 0.125 absolute in the output at logits of standard deviation 9, against 0.013 for SDPA,
    measured in float64 at (8, 4, 64, 64)), scaled, masked and normalised in fp32, and the probabilities in the
    matmul dtype (bf16 under bf16 autocast) for the product with v, as the flash kernels do.

    Masks as in ``F.scaled_dot_product_attention``: ``is_causal`` is the lower triangle aligned to the top left,
    and a query row whose keys are all masked out gives 0 (PyTorch 2.13's kernels do the same; such a row, e.g.
    cross-attention from a source of padding only, would otherwise average the values)."""
    dev = q.device.type
    cd = compute_dtype(q)
    with torch.autocast(dev, enabled=False):
        # the casts of q and k also make them contiguous in one pass, which the batched product needs anyway
        # (at the quick shape on Zen 4 these scores cost 14.0 ms forward + backward against 12.5 in bf16)
        v = v.to(cd)
        acc = torch.promote_types(cd, torch.float32)
        q, k = (x.to(acc, memory_format=torch.contiguous_format) for x in (q, k))
        s = torch.matmul(q, k.transpose(-2, -1)).mul_(q.shape[-1] ** -0.5)
        if softcap > 0:
            # softmax capping (ModelConfig.attention_softcap): c tanh(s / c), smooth and within (-c, c), before the
            # mask, so that masked keys stay at the dtype's minimum
            s = torch.tanh(s / softcap) * softcap
        if is_causal:
            T, S = s.shape[-2:]
            mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril_()
        if mask is not None:
            s = s.masked_fill_(~mask, torch.finfo(s.dtype).min)
        p = torch.softmax(s, dim=-1)
        if mask is not None:
            seen = mask.any(-1, keepdim=True)
            if _compiling() or not bool(seen.all()):  # compiled: always, with no branch on the mask's values
                p = p.masked_fill(~seen, 0.0)
        if dropout > 0:
            p = F.dropout(p, dropout, training=True)
        return torch.matmul(p.to(cd), v)


def _sdpa(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout: float, impl: str | None = None,
    softcap: float = 0.0,
) -> Tensor:
    """Attention on (B, H, T, hd) tensors with the kernel ``impl`` (:data:`ATTENTION_IMPLS`; None:
    :func:`default_attention`): ``sdpa`` is ``F.scaled_dot_product_attention`` on the inputs as they are,
    ``sdpa-fp32`` the same on fp32 copies of low-precision inputs (the output then has their dtype, as the
    kernel's would), ``matmul`` :func:`_matmul_attention`. ``mask``: bool, True where a key may be attended."""
    if _TRACE is not None:
        _TRACE.append((q.detach(), k.detach(), v.detach(), mask, is_causal))
    impl = impl or default_attention(q, k, v)
    if impl == "matmul" or softcap > 0:  # only the explicit products can cap the logits
        return _matmul_attention(q, k, v, mask, is_causal, dropout, softcap)
    if impl == "sdpa-fp32" and (dtype := next((x.dtype for x in (q, k, v) if x.dtype in LOW_PRECISION), None)) is not None:
        with torch.autocast(q.device.type, enabled=False):
            o = _torch_sdpa(q.float(), k.float(), v.float(), mask, dropout, is_causal)
        return o.to(dtype)
    if impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {impl!r}")
    return _torch_sdpa(q, k, v, mask, dropout, is_causal)


# torch's attention on CUDA without cuDNN's backend. cuDNN attention builds an execution graph for every new shape
# (a few hundred ms each: sglang#4650 measured ~400 ms; torchtune#1652 saw the overhead on the H100 only, where
# PyTorch can pick cuDNN), and token-bucketed batches give nearly every update a new (batch, length) pair. On an
# H100 (torch 2.11, 2026-11-26) normlab's updates took 0.27-0.4 s while their shapes were new (a whole 300-update
# sweep run; the first epoch of a translation run) and 0.05 s once an epoch's shapes came round again; in the same
# sweep the two runs whose probe chose sdpa-fp32 (fp32 inputs, which cuDNN's attention does not take) ran at 0.03 s
# an update (docs/results/sweep-quick/width-gpu). Flash and memory-efficient attention compile nothing at run time.
# Not yet measured without cuDNN (no GPU since): the check is one of those runs again (README, "On a GPU").
def _torch_sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, dropout: float, is_causal: bool) -> Tensor:
    """``F.scaled_dot_product_attention``; on CUDA with cuDNN's backend turned off for the call (above) and every
    other backend flag as the caller left it (flash, memory-efficient or math then; only a caller that left cuDNN
    as the one backend gets torch's "no available kernel"). The flag is process state, set and restored around
    the call (~0.4 us; normlab's loops call it from one thread)."""
    if q.device.type == "cuda" and torch.backends.cuda.cudnn_sdp_enabled():
        torch.backends.cuda.enable_cudnn_sdp(False)
        try:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)
        finally:
            torch.backends.cuda.enable_cudnn_sdp(True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)


def _attend(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool, dropout: float, impl: str | None,
    softcap: float = 0.0,
) -> Tensor:
    """Attention on (B, H, T, hd) tensors; returns (B, T, H*hd)."""
    return _sdpa(q, k, v, mask, is_causal, dropout, impl, softcap).transpose(1, 2).flatten(2)


def set_attention(model: nn.Module, impl: str | None) -> int:
    """Make every attention module of ``model`` use the kernel ``impl`` (None: :func:`default_attention`);
    returns how many modules it set. The kernels compute the same function (to rounding): changing it never
    changes what a checkpoint means."""
    if impl is not None and impl not in ATTENTION_IMPLS:
        raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {impl!r}")
    n = 0
    for m in model.modules():
        if isinstance(m, (SelfAttention, CrossAttention)):
            m.attention = impl
            n += 1
    return n


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021, "RoFormer", arXiv 2104.09864, Eq. 34) of a head's queries or
    keys (B, H, T, hd): feature pairs (i, i + hd/2) of the vector at position p are rotated by the angle
    p * theta_i, theta_i = 10000^(-2i/hd), i < hd/2. The pairing of the two halves (not of neighbours) is
    GPT-NeoX's and Llama's ("rotate_half"); it is the same function as the paper's up to a fixed permutation of
    the features, which W^Q and W^K absorb. q_p . k_s then depends on p - s only: the relative position enters
    every attention logit and no table is added to the input. The cos/sin table is a non-persistent buffer, so
    checkpoints do not hold it."""

    def __init__(self, head_dim: int, max_positions: int, base: float = 10000.0) -> None:
        super().__init__()
        half = head_dim // 2
        inv_freq = base ** (-torch.arange(half, dtype=torch.float64) / half)  # theta_i = base^(-2i/hd)
        angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
        self.register_buffer("cos", angles.cos().float(), persistent=False)  # (max_positions, hd/2)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """``x`` (B, H, T, hd) at positions ``start .. start + T - 1``."""
        T = x.shape[-2]
        if start + T > self.cos.shape[0]:
            raise ValueError(f"sequence of {start + T} positions exceeds max_positions={self.cos.shape[0]}")
        cos, sin = self.cos[start : start + T].to(x.dtype), self.sin[start : start + T].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def extra_repr(self) -> str:
        return f"head_dim={2 * self.cos.shape[1]}, max_positions={self.cos.shape[0]}"


def _qkv_norms(cfg: ModelConfig, slots: NormSlots) -> tuple[nn.Module, nn.Module, nn.Module]:
    """The norms of each head's queries, keys and values (over head_dim), decided once from the scheme: nGPT's
    sphere for queries and keys (their scale is :class:`QueryScale`, after RoPE); HybridNorm's three norms; else
    ``qk_norm``'s two (Dehghani et al. 2023); the values untouched but by HybridNorm."""
    hd = cfg.head_dim
    if slots.sphere:
        return SphereNorm(), SphereNorm(), nn.Identity()
    qk = cfg.qk_norm or slots.qkv_norm
    return _norm(qk, cfg, hd), _norm(qk, cfg, hd), _norm(slots.qkv_norm, cfg, hd)


class SelfAttention(Sublayer):
    """Multi-head self-attention with one fused QKV projection (Section 3.1); with ``qk_norm`` each head's
    queries and keys are normalised over head_dim before the dot product (Dehghani et al. 2023, ViT-22B), with
    HybridNorm the values too, with nGPT queries and keys go onto the unit sphere (:func:`_qkv_norms`);
    with Sub-LN a norm sits before the output projection W^O."""

    place = "first"

    def __init__(self, cfg: ModelConfig, plan: LayerPlan | None = None) -> None:
        super().__init__(cfg, plan)
        self.n_heads = cfg.n_heads
        self.attention_dropout = cfg.attention_dropout
        d, sphere = cfg.d_model, self.slots.sphere
        # nGPT: W^Q, W^K, W^V with unit rows over d_model, W^O with unit columns, no biases (Section 2.3.2)
        self.qkv = sphere_linear(d, 3 * d, 1) if sphere else nn.Linear(d, 3 * d)
        self.qkv.xavier_blocks = 3  # W^Q, W^K, W^V are three d x d matrices, each Xavier-initialised
        self.q_norm, self.k_norm, self.v_norm = _qkv_norms(cfg, self.slots)
        self.q_scale = QueryScale(cfg.n_heads, cfg.head_dim, d) if sphere else nn.Identity()  # nGPT's s_qk
        self.norm_inner = _norm(self.slots.inner, cfg)
        self.out = sphere_linear(d, d, 0) if sphere else nn.Linear(d, d)
        self.rotary = Rotary(cfg.head_dim, cfg.max_positions) if cfg.positional == "rope" else None
        self.softcap = cfg.attention_softcap
        self.attention: str | None = None  # the kernel (set_attention); None: default_attention

    def init_gain_weights(self) -> list[Tensor]:
        d = self.out.weight.shape[0]
        return [self.qkv.weight[2 * d :], self.qkv.bias[2 * d :], self.out.weight, self.out.bias]

    def branch(
        self,
        h: Tensor,
        *,
        padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: LayerCache | None = None,
    ) -> Tensor:
        B, T, _ = h.shape
        q, k, v = self.qkv(h).unflatten(-1, (3, self.n_heads, -1)).permute(2, 0, 3, 1, 4).unbind(0)
        q, k, v = self.q_norm(q), self.k_norm(k), self.v_norm(v)  # keys and values normalised before they are cached
        past = 0 if cache is None or cache.k is None else cache.k.shape[2]
        if self.rotary is not None:
            # rotated after QK-norm (OLMo 2's order: the norm sees the raw projection), before the keys are cached:
            # the new positions are past .. past + T - 1
            q, k = self.rotary(q, past), self.rotary(k, past)
        q = self.q_scale(q)
        if cache is not None:
            if cache.k is not None:
                k = torch.cat([cache.k, k], dim=2)
                v = torch.cat([cache.v, v], dim=2)
            cache.k, cache.v = k, v
        mask, is_causal = None, False
        if causal and T > 1:
            if past == 0 and padding_mask is None:
                is_causal = True
            else:
                # query t sits at position past + t and sees keys 0..past + t
                qpos = torch.arange(past, past + T, device=h.device)[:, None]
                mask = torch.arange(past + T, device=h.device)[None, :] <= qpos
        if padding_mask is not None:
            keep = ~padding_mask[:, None, None, :]  # (B, 1, 1, S), True where a key may be attended
            mask = keep if mask is None else mask & keep
        p = self.attention_dropout if self.training else 0.0
        return self.out(self.norm_inner(_attend(q, k, v, mask, is_causal, p, self.attention, self.softcap)))


class CrossAttention(Sublayer):
    """Encoder-decoder attention: queries from the decoder, keys/values from the encoder output."""

    def __init__(self, cfg: ModelConfig, plan: LayerPlan | None = None) -> None:
        super().__init__(cfg, plan)
        self.n_heads = cfg.n_heads
        self.attention_dropout = cfg.attention_dropout
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.kv.xavier_blocks = 2
        self.q_norm, self.k_norm, self.v_norm = _qkv_norms(cfg, self.slots)
        # Sub-LN has no inner norm in the cross-attention (torchscale 0.3.0: `subln and self.self_attention`)
        self.out = nn.Linear(cfg.d_model, cfg.d_model)
        self.softcap = cfg.attention_softcap
        self.attention: str | None = None  # the kernel (set_attention); None: default_attention

    def init_gain_weights(self) -> list[Tensor]:
        d = self.out.weight.shape[0]
        return [self.kv.weight[d:], self.kv.bias[d:], self.out.weight, self.out.bias]

    def branch(
        self,
        h: Tensor,
        *,
        memory: Tensor,
        memory_padding_mask: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        q = self.q_norm(self.q(h).unflatten(-1, (self.n_heads, -1)).transpose(1, 2))
        if cache is not None and cache.cross_k is not None:
            k, v = cache.cross_k, cache.cross_v
        else:
            # the encoder output is fixed while decoding: its keys/values are computed once per sentence
            k, v = self.kv(memory).unflatten(-1, (2, self.n_heads, -1)).permute(2, 0, 3, 1, 4).unbind(0)
            k, v = self.k_norm(k), self.v_norm(v)
            if cache is not None:
                cache.cross_k, cache.cross_v = k, v
        mask = None if memory_padding_mask is None else ~memory_padding_mask[:, None, None, :]
        p = self.attention_dropout if self.training else 0.0
        B, M = q.shape[0], k.shape[0]
        if B == M:
            return self.out(_attend(q, k, v, mask, False, p, self.attention, self.softcap))
        # g consecutive decoder rows share one memory row (the beams of a sentence while decoding): their
        # queries attend as g*T query positions of that row, so the memory's keys/values are neither copied
        # per beam nor reordered after each step
        if B % M:
            raise ValueError(f"{B} decoder rows cannot share {M} memory rows")
        g, T = B // M, q.shape[2]
        q = q.unflatten(0, (M, g)).transpose(1, 2).flatten(2, 3)  # (M, H, g*T, hd)
        o = _sdpa(q, k, v, mask, False, p, self.attention, self.softcap)
        return self.out(o.unflatten(2, (g, T)).permute(0, 2, 3, 1, 4).reshape(B, T, -1))


class FeedForward(Sublayer):
    """Position-wise FFN(h) = act(h W^1 + b^1) W^2 + b^2 (Section 3.1); with Sub-LN a norm over the d_ffn
    features sits before W^2 (torchscale's ``ffn_layernorm``)."""

    place = "last"

    def __init__(self, cfg: ModelConfig, plan: LayerPlan | None = None) -> None:
        super().__init__(cfg, plan)
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ffn)
        self.w2 = nn.Linear(cfg.d_ffn, cfg.d_model)
        self.act = nn.ReLU() if cfg.activation == "relu" else nn.GELU()
        self.act_drop = Dropout(cfg.activation_dropout)
        self.norm_inner = _norm(self.slots.inner, cfg, cfg.d_ffn)

    def init_gain_weights(self) -> list[Tensor]:
        return [self.w1.weight, self.w1.bias, self.w2.weight, self.w2.bias]

    def branch(self, h: Tensor) -> Tensor:
        return self.w2(self.norm_inner(self.act_drop(self.act(self.w1(h)))))


class SphereFeedForward(FeedForward):
    """nGPT's MLP (Loshchilov et al. 2025, Section 2.4): SwiGLU W^2 (u * silu(v)) with u = s_u (W^u h) and
    v = s_v sqrt(d) (W^v h), s_u and s_v learned d_ffn-vectors (:class:`EigenScale`, init 1, scale 1); no biases,
    W^u and W^v (``w1``, ``w3``) with unit rows over d_model, W^2 with unit columns. The gate is nGPT's SiLU whatever
    ``activation``; ``d_ffn`` is the width of u and v."""

    def __init__(self, cfg: ModelConfig, plan: LayerPlan | None = None) -> None:
        super().__init__(cfg, plan)
        d, f = cfg.d_model, cfg.d_ffn
        self.w1, self.w3, self.w2 = sphere_linear(d, f, 1), sphere_linear(d, f, 1), sphere_linear(f, d, 0)
        self.act = nn.SiLU()
        self.s_u, self.s_v = EigenScale(f, 1.0, 1.0), EigenScale(f, 1.0, 1.0)
        self.v_factor = math.sqrt(d)

    def branch(self, h: Tensor) -> Tensor:
        u, v = self.s_u(self.w1(h)), self.s_v(self.w3(h)) * self.v_factor
        return self.w2(self.act_drop(u * self.act(v)))


class Block(nn.Module):
    """One Transformer layer: self-attention, optional cross-attention, FFN; each a :class:`Sublayer`."""

    def __init__(self, cfg: ModelConfig, *, cross_attention: bool, plan: LayerPlan | None = None) -> None:
        super().__init__()
        self.plan = plan = plan or plan_layer(cfg, "seq2seq-decoder" if cross_attention else "encoder", 0,
                                              max(cfg.decoder_layers if cross_attention else cfg.encoder_layers, 1))
        self.self_attn = SelfAttention(cfg, plan)
        self.cross_attn = CrossAttention(cfg, plan) if cross_attention else None
        self.ffn = (SphereFeedForward if plan.slots.sphere else FeedForward)(cfg, plan)
        if plan.slots.gain == "rezero":
            # ReZero's reference shares one a per layer between its sub-layers (github.com/majumderb/rezero,
            # rezero/transformer/rztx.py: RZTXEncoderLayer and RZTXDecoderLayer multiply every branch by the
            # layer's one `resweight`): the self-attention's gain is the layer's, the others take it
            for sub in (self.cross_attn, self.ffn):
                if sub is not None:
                    sub.gain = self.self_attn.gain

    def forward(
        self,
        x: Tensor,
        *,
        padding_mask: Tensor | None,
        causal: bool,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: LayerCache | None = None,
        record: dict[str, dict[str, Tensor]] | None = None,
        z: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """``(x, z) -> (x', z')``: ``z`` is the second stream of B2T and ResiDual (None otherwise)."""
        rec = (lambda key: record.setdefault(key, {})) if record is not None else (lambda key: None)
        x, z = self.self_attn(x, z, rec("self_attn"), padding_mask=padding_mask, causal=causal, cache=cache)
        if self.cross_attn is not None:
            x, z = self.cross_attn(
                x, z, rec("cross_attn"), memory=memory, memory_padding_mask=memory_padding_mask, cache=cache
            )
        return self.ffn(x, z, rec("ffn"))


def table1(layer_record: dict[str, dict[str, Tensor]], placement: Placement | str) -> dict[str, Tensor]:
    """Name one layer's recorded tensors as in Table 1 of Xiong et al. (2020).

    Post-LN (left column): x, x1 = Attn(x), x2 = x + x1, x3 = LN(x2), x4 = FFN(x3), x5 = x3 + x4,
    x_next = LN(x5). Pre-LN (right column): x, x1 = LN(x), x2 = Attn(x1), x3 = x + x2, x4 = LN(x3),
    x5 = FFN(x4), x_next = x5 + x3. Peri-LN follows the Pre-LN names with x2 and x5 taken after the
    output LayerNorm. In a decoder layer x1..x3 belong to the self-attention sub-layer and x4, x5 to the FFN;
    the cross-attention in between keeps its generic record (``layer_record["cross_attn"]``).
    """
    sa, ffn = layer_record["self_attn"], layer_record["ffn"]
    if Placement(placement) is Placement.POST:
        return dict(
            x=sa["input"], x1=sa["branch_out"], x2=sa["sum"], x3=sa["output"],
            x4=ffn["branch_out"], x5=ffn["sum"], x_next=ffn["output"],
        )  # fmt: skip
    return dict(
        x=sa["input"], x1=sa["branch_in"], x2=sa["branch_out"], x3=sa["sum"],
        x4=ffn["branch_in"], x5=ffn["branch_out"], x_next=ffn["output"],
    )  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# Embeddings and the stack


def sinusoidal_table(n_positions: int, d: int) -> Tensor:
    """fairseq's ``SinusoidalPositionalEmbedding`` table (the one of transformer_iwslt_de_en): the first
    half of each row is sin(p * w_k), the second half cos(p * w_k), w_k = 10000^(-k / (d/2 - 1))."""
    half = d // 2
    rate = math.log(10000.0) / max(half - 1, 1)
    freqs = torch.exp(torch.arange(half, dtype=torch.float32) * -rate)
    angles = torch.arange(n_positions, dtype=torch.float32)[:, None] * freqs[None, :]
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if d % 2:
        table = torch.cat([table, torch.zeros(n_positions, 1)], dim=1)
    return table


class SinusoidalPositions(nn.Module):
    def __init__(self, n_positions: int, d: int) -> None:
        super().__init__()
        self.register_buffer("table", sinusoidal_table(n_positions, d), persistent=False)

    def forward(self, positions: Tensor) -> Tensor:
        return self.table[positions]


class TransformerStack(nn.Module):
    """Embeddings, ``n_layers`` blocks, and the final LayerNorm where the placement has one.

    The encoder is ``TransformerStack(causal=False, cross_attention=False)``, the decoder
    ``TransformerStack(causal=True, cross_attention=True)``; nothing else differs.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        n_layers: int,
        *,
        causal: bool,
        cross_attention: bool,
        embed_tokens: nn.Embedding,
        seq2seq: bool = False,
    ) -> None:
        super().__init__()
        if NORM_SLOTS[cfg.placement].sphere and (cross_attention or not causal):
            # the paper defines nGPT for decoder-only language models: no cross-attention on the sphere, and the
            # masked-LM and classification heads have a LayerNorm and a bias where nGPT has s_z (E h)
            raise ConfigError(f"placement={cfg.placement.value} (nGPT, Loshchilov et al. 2025) is a decoder-only "
                             "language model: use task lm (an encoder, cross-attention or the masked-LM/classification "
                             "heads are not defined on the sphere)")
        self.cfg = cfg
        self.causal = causal
        # the stack's role sets DeepNorm's and Sub-LN's constants (torchscale: encoder-only, decoder-only and
        # encoder-decoder differ); a cross-attending stack is the decoder of an encoder-decoder
        if cross_attention:
            self.role = "seq2seq-decoder"
        elif seq2seq:
            self.role = "seq2seq-encoder"
        else:
            self.role = "decoder" if causal else "encoder"
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embedding else 1.0
        self.embed_tokens = embed_tokens
        self.embed_positions: nn.Module | None = None  # rope: positions enter in the self-attention (Rotary)
        if cfg.positional == "sinusoidal":
            self.embed_positions = SinusoidalPositions(cfg.max_positions, cfg.d_model)
        elif cfg.positional == "learned":
            self.embed_positions = nn.Embedding(cfg.max_positions, cfg.d_model)
        self.embed_segments = nn.Embedding(cfg.type_vocab_size, cfg.d_model) if cfg.type_vocab_size else None
        self.embed_norm = _norm(cfg.embedding_norm, cfg)
        self.embed_drop = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(
            Block(cfg, cross_attention=cross_attention, plan=plan_layer(cfg, self.role, i, n_layers))
            for i in range(n_layers)
        )
        self.final_norm = _norm(stack_has_final_norm(cfg, n_layers), cfg)
        # ResiDual: the second stream starts as the embedded input and the output is x_a + N(x_d); every other
        # scheme starts without one (B2T's first sub-layer of each layer sets its own) and ends with N(x)
        self.dual = NORM_SLOTS[cfg.placement].stream == "dual"

    def embed(self, tokens: Tensor, segments: Tensor | None = None, start: int = 0) -> Tensor:
        T = tokens.shape[1]
        if start + T > self.cfg.max_positions:
            raise ValueError(f"sequence of {start + T} positions exceeds max_positions={self.cfg.max_positions}")
        x = self.embed_scale * self.embed_tokens(tokens)
        if self.embed_positions is not None:
            x = x + self.embed_positions(torch.arange(start, start + T, device=tokens.device))
        if self.embed_segments is not None:
            x = x + self.embed_segments(segments if segments is not None else torch.zeros_like(tokens))
        return self.embed_drop(self.embed_norm(x))

    def run_layers(
        self,
        x: Tensor,
        *,
        padding_mask: Tensor | None = None,
        memory: Tensor | None = None,
        memory_padding_mask: Tensor | None = None,
        cache: DecoderCache | None = None,
        record: dict[str, Any] | None = None,
    ) -> Tensor:
        """The blocks and the final LayerNorm on already embedded input ``x`` (B, T, d)."""
        if record is not None:
            record["embed"] = x
            record["layers"] = []
        z = x if self.dual else None
        for i, layer in enumerate(self.layers):
            rec = None
            if record is not None:
                rec = {}
                record["layers"].append(rec)
            x, z = layer(
                x,
                padding_mask=padding_mask,
                causal=self.causal,
                memory=memory,
                memory_padding_mask=memory_padding_mask,
                cache=None if cache is None else cache.layers[i],
                record=rec,
                z=z,
            )
        out = x + self.final_norm(z) if self.dual else self.final_norm(x)
        if record is not None:
            for rec, layer in zip(record["layers"], self.layers):
                rec["table1"] = table1(rec, Placement.POST if layer.plan.slots.after_add else Placement.PRE)
            record["final"] = out
        return out

    def forward(
        self,
        tokens: Tensor,
        *,
        segments: Tensor | None = None,
        memory: EncoderOut | None = None,
        cache: DecoderCache | None = None,
        record: dict[str, Any] | None = None,
    ) -> Tensor:
        start = 0 if cache is None else cache.length
        # With a cache the new tokens are real by construction; padding is only masked on full passes.
        padding_mask = None
        if cache is None:
            padding_mask = tokens.eq(self.cfg.pad_id)
            if not _compiling() and not padding_mask.any():
                padding_mask = None  # lets SDPA take its unmasked fast path (compiled: no data-dependent branch)
        x = self.embed(tokens, segments, start)
        out = self.run_layers(
            x,
            padding_mask=padding_mask,
            memory=None if memory is None else memory.out,
            memory_padding_mask=None if memory is None else memory.padding_mask,
            cache=cache,
            record=record,
        )
        if cache is not None:
            cache.length += tokens.shape[1]
        return out


# --------------------------------------------------------------------------------------------------------
# Models


class Seq2Seq(nn.Module):
    """Encoder-decoder for translation (the paper's IWSLT14 De-En model)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        tgt_embed = src_embed if cfg.share_embeddings == "all" else nn.Embedding(
            cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id
        )
        self.encoder = TransformerStack(
            cfg, cfg.encoder_layers, causal=False, cross_attention=False, embed_tokens=src_embed, seq2seq=True
        )
        self.decoder = TransformerStack(
            cfg, cfg.decoder_layers, causal=True, cross_attention=True, embed_tokens=tgt_embed
        )
        self.output_projection = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        init_weights(self, cfg)
        if cfg.share_embeddings != "none":
            # W^emb is both the decoder input table and the softmax layer (Section 3.3's loss)
            self.output_projection.weight = tgt_embed.weight

    def encode(self, src: Tensor, record: dict[str, Any] | None = None) -> EncoderOut:
        out = self.encoder(src, record=record)
        mask = src.eq(self.cfg.pad_id)
        return EncoderOut(out, mask if _compiling() or mask.any() else None)

    def decode_features(
        self,
        tgt_in: Tensor,
        enc: EncoderOut,
        cache: DecoderCache | None = None,
        record: dict[str, Any] | None = None,
    ) -> Tensor:
        """Decoder output (B, T, d) before the output projection."""
        return self.decoder(tgt_in, memory=enc, cache=cache, record=record)

    def decode(self, tgt_in: Tensor, enc: EncoderOut, cache: DecoderCache | None = None) -> Tensor:
        """Logits (B, T, V); with a ``cache``, ``tgt_in`` holds only the new positions."""
        return self.output_projection(self.decode_features(tgt_in, enc, cache))

    def init_cache(self) -> DecoderCache:
        return DecoderCache([LayerCache() for _ in self.decoder.layers])

    def forward(
        self, src: Tensor, tgt_in: Tensor, *, return_intermediates: bool = False, features_only: bool = False
    ) -> Tensor | tuple[Tensor, dict[str, Any]]:
        """Teacher-forced pass: logits (B, T, V), or decoder features (B, T, d) with ``features_only``
        (the trainer then projects and scores them in chunks). With ``return_intermediates`` also a dict
        ``{"encoder": ..., "decoder": ...}`` of per-layer records (see :func:`table1`)."""
        records = {"encoder": {}, "decoder": {}} if return_intermediates else None
        enc = self.encode(src, record=None if records is None else records["encoder"])
        x = self.decode_features(tgt_in, enc, record=None if records is None else records["decoder"])
        out = x if features_only else self.output_projection(x)
        return (out, records) if records is not None else out


class MaskedLM(nn.Module):
    """Encoder-only model with BERT's masked-LM head (dense, activation, norm, tied decoder + bias); the head's
    norm is ``cfg.norm`` (BERT: LayerNorm)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.encoder = TransformerStack(
            cfg, cfg.encoder_layers, causal=False, cross_attention=False, embed_tokens=embed
        )
        self.lm_dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.lm_act = nn.ReLU() if cfg.activation == "relu" else nn.GELU()
        # BERT's head norm is the model's norm function (make_norm): none with norm=none, RMSNorm or DyT with
        # those, so that a model "without normalisation" has none in its head either
        self.lm_norm = make_norm(cfg)
        self.lm_bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        init_weights(self, cfg)

    def features(
        self, tokens: Tensor, segments: Tensor | None = None, record: dict[str, Any] | None = None
    ) -> Tensor:
        return self.encoder(tokens, segments=segments, record=record)

    def lm_logits(self, h: Tensor) -> Tensor:
        # the decoder is tied to the input embedding (BERT), with its own bias
        return F.linear(self.lm_norm(self.lm_act(self.lm_dense(h))), self.encoder.embed_tokens.weight, self.lm_bias)

    def forward(
        self,
        tokens: Tensor,
        segments: Tensor | None = None,
        *,
        select: Tensor | None = None,
        return_intermediates: bool = False,
    ) -> Tensor | tuple[Tensor, dict[str, Any]]:
        """Logits (B, T, V), or only at the positions where the bool mask ``select`` is True (N, V):
        the masked-LM loss needs no logits elsewhere."""
        record = {} if return_intermediates else None
        h = self.features(tokens, segments, record)
        logits = self.lm_logits(h if select is None else h[select])
        return (logits, {"encoder": record}) if record is not None else logits


class PairClassifier(nn.Module):
    """Encoder-only model with a classification head on the first token ([CLS]), as BERT fine-tuning:
    pooler (dense + tanh), dropout, linear. Its ``encoder`` loads from a :class:`MaskedLM`'s."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.encoder = TransformerStack(
            cfg, cfg.encoder_layers, causal=False, cross_attention=False, embed_tokens=embed
        )
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
        self.head_drop = Dropout(cfg.dropout)
        self.classifier = nn.Linear(cfg.d_model, cfg.num_classes)
        init_weights(self, cfg)

    def forward(
        self, tokens: Tensor, segments: Tensor | None = None, *, return_intermediates: bool = False
    ) -> Tensor | tuple[Tensor, dict[str, Any]]:
        record = {} if return_intermediates else None
        h = self.encoder(tokens, segments=segments, record=record)
        logits = self.classifier(self.head_drop(torch.tanh(self.pooler(h[:, 0]))))
        return (logits, {"encoder": record}) if record is not None else logits


class CausalLM(nn.Module):
    """Decoder-only language model (GPT; the models Peri-LN, Mix-LN, LayerNorm Scaling, DyT, OLMo 2's output norm
    and QK-norm were proposed on): one :class:`TransformerStack` with ``causal=True, cross_attention=False`` of
    ``cfg.decoder_layers`` layers (so DeepNorm's and Sub-LN's constants are the decoder-only ones), every scheme of
    :data:`NORM_SLOTS` unchanged, and an output projection tied to the token embedding (GPT-2; Press & Wolf 2017)
    unless ``share_embeddings="none"``. No bias on the projection (GPT-2 has none). Next-token prediction: the
    logits at position t score token t + 1 (:class:`~normlab.data.batch.LMBatch`).

    Incremental decoding: ``forward(new_tokens, cache=cache)`` with a :class:`DecoderCache` from
    :meth:`init_cache` computes the new positions only (keys and values of the earlier ones are cached)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.decoder = TransformerStack(
            cfg, cfg.decoder_layers, causal=True, cross_attention=False, embed_tokens=embed
        )
        self.output_projection = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        # nGPT (Section 2.2.1-2.2.2): unit-norm token vectors in and out (project_weights_), logits z = s_z (E h)
        # with s_z a learned V-vector (EigenScale: init 1, scale 1/sqrt(d)); the identity for every other scheme
        self.logit_scale: nn.Module = nn.Identity()
        if NORM_SLOTS[cfg.placement].sphere:
            embed.sphere_dim = self.output_projection.sphere_dim = 1
            self.logit_scale = EigenScale(cfg.vocab_size, 1.0, cfg.d_model**-0.5)
        init_weights(self, cfg)
        if cfg.share_embeddings != "none":
            self.output_projection.weight = embed.weight  # W^emb is both the input table and the softmax layer

    def logit_weight(self) -> Tensor:
        """The (V, d) matrix W whose product h W^T with the stack's output is the logits: the output projection's
        weight, with nGPT's s_z folded into its rows (s_z * (h E^T) = h (s_z E)^T: the logit scale acts on the last,
        vocabulary, dimension, so applied to W^T it scales W's rows). The chunked losses project with it."""
        return self.logit_scale(self.output_projection.weight.t()).t()

    def init_cache(self) -> DecoderCache:
        return DecoderCache([LayerCache() for _ in self.decoder.layers])

    def forward(
        self,
        tokens: Tensor,
        *,
        cache: DecoderCache | None = None,
        features_only: bool = False,
        return_intermediates: bool = False,
    ) -> Tensor | tuple[Tensor, dict[str, Any]]:
        """Logits (B, T, V) of the next token at every position of ``tokens`` (B, T), or the stack's output
        (B, T, d) with ``features_only`` (the trainer then projects and scores it in chunks). With a ``cache``,
        ``tokens`` holds only the new positions. ``return_intermediates`` adds ``{"decoder": record}``."""
        record = {} if return_intermediates else None
        h = self.decoder(tokens, cache=cache, record=record)
        out = h if features_only else self.logit_scale(self.output_projection(h))
        return (out, {"decoder": record}) if record is not None else out


# --------------------------------------------------------------------------------------------------------
# Initialisation


BERT_INIT_STD = 0.02  # BERT's initializer_range (Devlin et al. 2018, bert/modeling.py)


@torch.no_grad()
def init_weights(model: nn.Module, cfg: ModelConfig) -> None:
    """The paper's initialisation (Section 3.3, "Parameter Initialization").

    * every projection matrix n_in x n_out: Xavier-normal N(0, 2/(n_in + n_out)); a fused projection
      (QKV) is initialised block by block, as the d x d matrices it stands for; biases 0;
    * LayerNorm: gamma = 1, beta = 0 (RMSNorm: g = 1; DyT: alpha = ``dyt_alpha``, gamma = 1, beta = 0;
      ReZero's gains: 0);
    * DeepNorm and Sub-LN: then W^V, W^O, W^1, W^2 (weights and biases) times the stack's beta or gamma
      (:func:`deepnorm_constants`, :func:`subln_gamma`); B2T: every projection weight times 1/sqrt(L);
    * Admin: omega = 1 here; :func:`admin_profile` sets it from a batch (it needs one, so it is not here);
    * token, learned-position and segment embeddings: N(0, 1/d) (fairseq's transformer, the code the paper
      used); with the sqrt(d) scale each input coordinate has unit variance, as Section 3.3 assumes of the
      Gaussian inputs. The padding row is 0;
    * nGPT: then every matrix it keeps on the sphere normalised (:func:`project_weights_`), eigen scales at their
      init (:class:`EigenScale`);
    * ``init="theory"``: additionally W^Q = W^K = 0, so attention is uniform at initialisation and
      Attn(x_i) = (1/n) sum_j x_j W^V W^O (Section 3.3);
    * ``init="bert"``: every projection and embedding weight N(0, 0.02^2) truncated at +-2 standard deviations
      instead (BERT's ``initializer_range``; Devlin et al.'s code uses ``truncated_normal_initializer(0.02)``),
      whatever the width: the paper's BERT runs "follow the same hyper-parameter configuration in Devlin et al."
      (Section 4). Biases, norms, gains and the schemes' rescalings as above.
    """
    for module in model.modules():
        if cfg.init == "bert" and isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.trunc_normal_(module.weight, 0.0, BERT_INIT_STD, -2 * BERT_INIT_STD, 2 * BERT_INIT_STD)
            if getattr(module, "bias", None) is not None:
                module.bias.zero_()
            if getattr(module, "padding_idx", None) is not None:
                module.weight[module.padding_idx].zero_()
        elif isinstance(module, nn.Linear):
            blocks = getattr(module, "xavier_blocks", 1)
            for w in module.weight.chunk(blocks, dim=0):
                n_out, n_in = w.shape
                w.normal_(0.0, math.sqrt(2.0 / (n_in + n_out)))
            if module.bias is not None:
                module.bias.zero_()
        elif isinstance(module, (*NORM_TYPES, ReZeroGain, Omega, EigenScale)):
            # gamma = 1, beta = 0; DyT's alpha = alpha0; ReZero's a = 0; Admin's omega = 1; nGPT's scales at init
            module.reset_parameters()
        elif isinstance(module, nn.Embedding):
            module.weight.normal_(0.0, cfg.d_model**-0.5)
            if module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()
    for module in model.modules():
        # DeepNorm (x beta, beta < 1) and Sub-LN (x gamma) rescale the value, output and FFN projections
        # after Xavier, weights and biases as torchscale does (its loop matches names, biases included);
        # B2T every projection weight by 1/sqrt(L) (its rescaling_init)
        if isinstance(module, Sublayer) and module.init_gain != 1.0:
            for p in module.init_gain_params():
                p.mul_(module.init_gain)
    project_weights_(model)  # nGPT: every matrix onto the unit sphere (Section 2.2.4); no-op for other schemes
    if cfg.init == "theory":
        d = cfg.d_model
        for module in model.modules():
            if isinstance(module, SelfAttention):
                module.qkv.weight[: 2 * d].zero_()
            elif isinstance(module, CrossAttention):
                module.q.weight.zero_()
                module.kv.weight[:d].zero_()


@torch.no_grad()
def admin_profile(model: nn.Module, inputs: Sequence[Tensor], *, seed: int = 0) -> dict[str, list[float]]:
    """Set every Admin omega of ``model`` by one forward pass ``model(*inputs)``; returns ``{stack: [omega_i]}``.

    Liu et al. 2020 (Admin, Section 5 and Eq. 5): omega_i = sqrt(sum_{j<i} Var[F_j]), computed as the official
    code's ``adaptive-profiling`` pass does (Transformer-Clinic, fairseq/modules/transformer_layer.py): per
    stack a running value v starts at 1 (the embedding's share); sub-layer i, in the order the forward pass
    meets them (self-attention, cross-attention, FFN, layer by layer), takes omega_i = v on every channel,
    then v <- sqrt(Var[omega_i x_i] + Var[dropout(F_i(x_i))]), each variance over every element of the batch
    (padding included, as the code's ``np.var`` of the flattened tensor). As x_i is the previous LN's output
    (variance about 1) this is omega_{i+1}^2 = omega_i^2 + Var[F_i]. Encoder and decoder run separately.

    The pass runs in training mode (the code profiles under ``self.training``: dropout on) under its own
    random seed (``torch.random.fork_rng``), so it is reproducible and leaves the caller's random stream as it
    was; the model's mode is restored. Other schemes are left untouched (an empty dict).
    """
    stacks = [(n, st) for n, st in model.named_modules() if isinstance(st, TransformerStack)]
    found = {n: [sub for sub in st.modules() if isinstance(sub, Sublayer) and isinstance(sub.skip, Omega)]
             for n, st in stacks}
    found = {n: subs for n, subs in found.items() if subs}
    if not found:
        return {}
    out: dict[str, list[float]] = {n: [] for n in found}
    handles = []
    for name, subs in found.items():
        state: dict[str, Any] = {"v": 1.0, "var_f": None}

        def branch_hook(module: nn.Module, args: Any, output: Tensor, state: dict[str, Any] = state) -> None:
            state["var_f"] = output.float().var(unbiased=False).item()  # Var[dropout(F_i(x_i))]

        def skip_hook(module: Omega, args: tuple[Tensor], state: dict[str, Any] = state, name: str = name) -> None:
            # the sub-layer computes its branch (and its dropout) before omega . x: both are known here
            if state["var_f"] is None:
                raise RuntimeError("admin_profile: a sub-layer used omega before its branch")
            module.omega.fill_(state["v"])
            out[name].append(state["v"])
            var_in = (args[0] * module.omega).float().var(unbiased=False).item()  # Var[omega_i x_i]
            state["v"], state["var_f"] = math.sqrt(var_in + state["var_f"]), None

        for sub in subs:
            handles.append(sub.drop.register_forward_hook(branch_hook))
            handles.append(sub.skip.register_forward_pre_hook(skip_hook))
    was_training = model.training
    device = next(model.parameters()).device
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            model.train()
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return out


def profile_init(model: nn.Module, batch: Any, *, seed: int = 0) -> dict[str, list[float]]:
    """The initialisation step that needs data: Admin's omega (:func:`admin_profile`) from ``batch`` (a
    translation, masked-LM, classification or language-model batch, or a tuple of the model's inputs); a no-op returning {}
    for every other scheme. Where it runs: ``Trainer.fit`` on a fresh run before the first update (on the first
    global batch of epoch 1, the same on every rank, seed ``TrainConfig.seed``; a resumed run or one started
    ``init_from`` another run's weights keeps its saved omega), and ``diagnose_config`` and ``figure3cd`` on
    their first batch, so that the at-initialisation measurements see Admin's initialisation."""
    if not any(isinstance(m, Omega) for m in model.modules()):
        return {}
    if isinstance(batch, tuple):
        inputs = batch
    elif hasattr(batch, "src"):
        inputs = (batch.src, batch.tgt_in)
    elif hasattr(batch, "segments"):
        inputs = (batch.tokens, batch.segments)
    else:  # a language-model batch: the tokens are the whole input
        inputs = (batch.tokens,)
    device = next(model.parameters()).device
    return admin_profile(model, tuple(t.to(device) for t in inputs), seed=seed)


MODELS: dict[str, type[nn.Module]] = {"translation": Seq2Seq, "mlm": MaskedLM, "classification": PairClassifier,
                                      "lm": CausalLM}


def build_model(cfg: ModelConfig, task: str = "translation") -> nn.Module:
    """The model for ``task``: ``translation`` (encoder-decoder), ``mlm``, ``classification`` or ``lm``
    (decoder-only)."""
    if task not in MODELS:
        raise ValueError(f"unknown task {task!r}; expected one of {sorted(MODELS)}")
    return MODELS[task](cfg)


_NORM_NAMES = {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm", "dyt": "DyT", "none": "no norm"}


def _where(slots: NormSlots) -> str:
    if slots.ffn is not None:  # HybridNorm: the attention's and the FFN's slots differ
        return f"attention: {_where(dataclasses.replace(slots, ffn=None))}; FFN: {_where(slots.ffn)}"
    parts = []
    if slots.qkv_norm:
        parts.append("each head's queries, keys and values")
    if slots.branch_in:
        parts.append("branch input" + (" (scaled by 1/sqrt(l))" if slots.scale_in == "lns" else ""))
    if slots.inner:
        parts.append("inside the branch (before the self-attention's W^O and the FFN's W^2)")
    if slots.branch_out:
        parts.append("branch output")
    if slots.after_add:
        parts.append("after the residual add" + {"one": "", "deepnorm": " of alpha*x + F(x)",
                                                  "admin": " of omega*x + F(x) (Admin)"}[slots.skip])
    if slots.stream == "b2t":
        parts.append("and the layer's input added before its last norm (B2T)")
    if slots.stream == "dual":
        parts.append("and a second stream summing the branch outputs, output x + N(stream) (ResiDual)")
    if slots.gain == "eigen":
        parts.append("the residual x + alpha (N(F(x)) - x) with learned per-channel eigen learning rates alpha, "
                     "queries and keys on the sphere, every matrix unit-norm along d_model after each update, "
                     "logits scaled by s_z (nGPT)")
    return ", ".join(parts) if parts else "nothing"


def describe(model: nn.Module) -> str:
    """A short human-readable summary: configuration, parameter count, and where the norms sit (per stack,
    with the constants the scheme sets there)."""
    cfg: ModelConfig = model.cfg  # type: ignore[assignment]
    sphere = NORM_SLOTS[cfg.placement].sphere
    name = "x/||x|| (the unit sphere)" if sphere else _NORM_NAMES[cfg.norm]
    n_params = sum(p.numel() for p in model.parameters())
    n_norms = sum(isinstance(m, (*NORM_TYPES, SphereNorm)) for m in model.modules())
    stacks = [(n, m) for n, m in model.named_children() if isinstance(m, TransformerStack)]
    lines = [f"{type(model).__name__}: placement={cfg.placement.value}, norm={cfg.norm}, {n_params:,} parameters, "
             f"{n_norms} norms ({name}, qk_norm={'on' if cfg.qk_norm else 'off'})"]
    plans = [layer.plan for _, st in stacks for layer in st.layers]
    finals = {_n: st.final_norm is not None and not isinstance(st.final_norm, nn.Identity) for _n, st in stacks}
    uniform = len({p.slots for p in plans}) <= 1 and len(set(finals.values())) <= 1
    if uniform and plans:
        where = _where(plans[0].slots)
        lines.append((f"  {name} in each sub-layer: {where}" if where != "nothing" else "  no norm in the sub-layers")
                     + f"; final {name} {'on the second stream' if plans[0].slots.stream == 'dual' else 'after each stack'}"
                     f": {'yes' if next(iter(finals.values())) else 'no'}")
    for stack_name, st in stacks:
        groups: list[tuple[int, int, NormSlots]] = []
        for layer in st.layers:
            p = layer.plan
            if groups and groups[-1][2] == p.slots:
                groups[-1] = (groups[-1][0], p.layer, p.slots)
            else:
                groups.append((p.layer, p.layer, p.slots))
        if not uniform:
            for a, b, sl in groups:
                lines.append(f"  {stack_name} layers {a}-{b}: {name} in each sub-layer: {_where(sl)}")
            lines.append(f"  {stack_name}: final {name} after the stack: {'yes' if finals[stack_name] else 'no'}")
        p0 = st.layers[0].plan if len(st.layers) else None
        if p0 is not None and (p0.skip != 1.0 or p0.init_gain != 1.0):
            which = "every projection weight" if p0.slots.init == "b2t" else "value/output/FFN projections"
            lines.append(f"  {stack_name} ({st.role}): residual weight alpha={p0.skip:.4g}, {which} "
                         f"x {p0.init_gain:.4g} at init")
        if p0 is not None and p0.slots.gain == "rezero":
            lines.append(f"  {stack_name}: each branch output x a, one learned scalar per layer, 0 at init (ReZero)")
        if p0 is not None and p0.slots.skip == "admin":
            omegas = [float(sub.skip.omega.detach().mean()) for sub in st.modules() if isinstance(sub, Sublayer)]
            state = ("= 1, not profiled yet (admin_profile sets it from a batch)" if all(w == 1.0 for w in omegas)
                     else "profiled: " + ", ".join(f"{w:.3g}" for w in omegas))
            lines.append(f"  {stack_name}: residual weight omega per sub-layer {state}")
    lines.append("  " + ", ".join(f"{k}={v}" for k, v in cfg.to_dict().items()))
    return "\n".join(lines)
