"""Training losses: fairseq's label-smoothed cross-entropy, plain and fused with the output projection.

The paper trains with label-smoothed cross-entropy, epsilon = 0.1 (Xiong et al. 2020, Section 3 setup, after
Szegedy et al. 2016), in fairseq's definition (``fairseq/criterions/label_smoothed_cross_entropy.py``)::

    eps_i  = epsilon / (V - 1)
    nll    = -log p(target)
    smooth = -sum_v log p(v)
    loss   = (1 - epsilon - eps_i) * nll + eps_i * smooth        (positions whose target is PAD count 0)

i.e. the target gets 1 - epsilon of the mass and every *other* word eps_i. (PyTorch's ``label_smoothing=s``
spreads s / V over *all* words; the two agree for s = epsilon * V / (V - 1), which a test checks.)

Every function returns the pair ``(loss, nll)``, both *sums* over the scored positions by default: the trainer
divides by the global token count (``batch.n_tokens`` summed over data-parallel ranks), so that the gradient
does not depend on how a batch is split.

Three implementations of the translation loss, selected by ``impl`` (:data:`LOSS_IMPLS`):

* ``plain``: logits (N, V) for every position, then ``log_softmax`` in fp32. Under bf16 autocast this keeps a
  bf16 and an fp32 copy of the logits alive for the backward pass (N x V x 6 bytes: 250 MB at the paper's 4,096
  tokens x 10k vocabulary, plus the same again for their gradients).
* ``chunked`` (the default): :func:`linear_label_smoothed_nll_loss` takes the decoder *features* (N, d) and the
  projection weight (V, d) and walks over ``chunk_size`` positions at a time; for each chunk it computes the
  logits in fp32, the two sums, and -- since the loss is a sum of per-position terms and its gradient with
  respect to the chunk's logits is known in closed form -- that chunk's gradients with respect to the
  features and the weight (the "fused linear cross-entropy" of Liger-Kernel / Apple's Cut Cross-Entropy). Only
  one (chunk, V) block ever exists, no logits are kept for backward, and no matmul is repeated: backward only
  scales the stored (N, d) and (V, d) gradients by the incoming scalar.
* ``recompute``: the same chunks, but the gradients are computed in backward by recomputing each chunk's logits
  (activation checkpointing of the head): the least memory (no stored weight gradient), one extra
  (N x d x V) matmul.

All three give the same values and gradients to fp32 rounding (tests/test_losses.py). Which one is fastest is
measured by ``benchmarks/train_throughput.py --loss-impls``; ``chunked`` won on the development CPU (numbers in
the commit that made it the default) and is what the trainer uses unless told otherwise.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from normlab.data.batch import PAD
from normlab.device import compute_dtype

__all__ = [
    "LOSS_IMPLS",
    "DEFAULT_LOSS_IMPL",
    "label_smoothed_nll_loss",
    "linear_label_smoothed_nll_loss",
    "default_chunk_size",
    "translation_loss",
    "lm_loss",
    "masked_lm_loss",
    "classification_loss",
]

LossImpl = Literal["chunked", "recompute", "plain"]
LOSS_IMPLS: tuple[str, ...] = ("chunked", "recompute", "plain")
DEFAULT_LOSS_IMPL: LossImpl = "chunked"
Reduction = Literal["sum", "mean", "none"]


def _smoothing_weights(epsilon: float, vocab: int) -> tuple[float, float]:
    """fairseq's weights: (1 - epsilon - eps_i) on the NLL, eps_i = epsilon / (V - 1) on the smooth term."""
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"label smoothing epsilon must be in [0, 1), got {epsilon}")
    if epsilon > 0 and vocab < 2:
        raise ValueError("label smoothing needs at least 2 classes")
    eps_i = epsilon / (vocab - 1) if epsilon > 0 else 0.0
    return 1.0 - epsilon - eps_i, eps_i


def _reduce(loss: Tensor, nll: Tensor, n: Tensor | int, reduction: Reduction) -> tuple[Tensor, Tensor]:
    if reduction == "sum":
        return loss.sum(), nll.sum()
    if reduction == "mean":
        n = n if isinstance(n, Tensor) else torch.tensor(n, device=loss.device)
        n = n.clamp(min=1).to(loss.dtype)
        return loss.sum() / n, nll.sum() / n
    if reduction == "none":
        return loss, nll
    raise ValueError(f"reduction must be 'sum', 'mean' or 'none', got {reduction!r}")


def label_smoothed_nll_loss(
    lprobs_or_logits: Tensor,
    target: Tensor,
    epsilon: float = 0.1,
    ignore_index: int | None = PAD,
    reduction: Reduction = "sum",
    *,
    log_probs: bool = False,
) -> tuple[Tensor, Tensor]:
    """fairseq's label-smoothed NLL: returns ``(loss, nll)`` (see the module docstring for the formula).

    ``lprobs_or_logits`` is (..., V): logits by default (``log_softmax`` is then taken in fp32, whatever their
    dtype), or log-probabilities with ``log_probs=True`` (fairseq's calling convention). ``target`` is the
    matching (...) long tensor; positions whose target is ``ignore_index`` contribute 0 (``None``: none
    ignored). ``reduction``: ``sum`` (the default; the trainer divides by the global token count), ``mean`` over
    the scored positions, or ``none`` (per-position values, 0 at ignored positions).
    """
    V = lprobs_or_logits.shape[-1]
    conf, eps_i = _smoothing_weights(epsilon, V)
    if lprobs_or_logits.shape[:-1] != target.shape:
        raise ValueError(f"target {tuple(target.shape)} does not match scores {tuple(lprobs_or_logits.shape)}")
    if reduction != "none" and ignore_index is not None:
        # sums need only the scored rows: drop the ignored ones before the (N, V) log-softmax
        keep = target.ne(ignore_index)
        lprobs_or_logits, target = lprobs_or_logits[keep], target[keep]
        ignore_index = None
    lprobs = lprobs_or_logits if log_probs else F.log_softmax(lprobs_or_logits, dim=-1, dtype=torch.float32)
    keep = None if ignore_index is None else target.ne(ignore_index)
    safe_target = target if keep is None else target.masked_fill(~keep, 0)  # gather needs a valid index
    nll = -lprobs.gather(-1, safe_target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.sum(-1)
    if keep is not None:
        nll = nll.masked_fill(~keep, 0.0)
        smooth = smooth.masked_fill(~keep, 0.0)
    loss = conf * nll + eps_i * smooth if epsilon > 0 else nll
    n = target.numel() if keep is None else keep.sum()
    return _reduce(loss, nll, n, reduction)


# --------------------------------------------------------------------------------------------------------
# The output projection and the loss in chunks of positions


def default_chunk_size(vocab: int, device: torch.device | str = "cpu") -> int:
    """Positions per chunk: a (chunk, V) fp32 block of 32 MB on the CPU (2^23 elements; 1,024 positions at
    10k words measured 23% faster than the plain path, 419 positions 17%: smaller products run below the
    matmul peak) and 128 MB on a GPU, where larger products are needed to fill the device."""
    elements = 1 << (25 if torch.device(device).type == "cuda" else 23)
    return max(64, elements // max(vocab, 1))


class _Head:
    """The projection ``h @ w.T + b`` applied chunk by chunk, giving each chunk's fp32 softmax and the two
    per-row quantities the loss needs.

    Two (chunk, V) buffers are allocated once per call and reused for every chunk (one when the matmul already
    runs in fp32): on the CPU a fresh tensor of tens of MB is a fresh ``mmap`` whose pages fault in on first
    touch, which costs as much as the softmax itself (measured on the development CPU: log_softmax of 1024 x 10k
    into a new tensor 44 ms, into a reused one 18 ms). The low-precision buffer is reused again for the
    probabilities in the matmul dtype that the gradients need.

    The loss needs, per row, log p(target) = z_t - lse and sum_v log p(v) = sum_v z_v - V lse, with lse the
    row's log-sum-exp; the gradients need p = softmax(z). So each chunk takes z_t and sum_v z_v from the logits,
    the row maximum m, then the softmax in place, and lse = m - log max_v p(v) (the largest probability sits at the
    largest logit and is at least 1/V, so the log is exact to fp32 rounding): a softmax pass and two max
    reductions instead of a log-softmax pass followed by an ``exp`` pass over the block (measured, (1048, 8000)
    fp32 on AVX-512, 1 thread: exp 7.1 ms, softmax 5.6 ms, log-softmax 7.0 ms, amax 1.3 ms; ``max`` with its
    indices 7.2 ms, which is why the column of the maximum is not looked up).
    """

    def __init__(self, w: Tensor, b: Tensor | None, cd: torch.dtype, chunk: int, n: int) -> None:
        self.cd = cd
        self.acc = torch.float64 if cd == torch.float64 else torch.float32  # softmax and sums: fp32 at least
        self.w = w.to(cd)
        self.b = None if b is None else b.to(cd)
        rows = min(chunk, max(n, 1))
        V = w.shape[0]
        self.z = torch.empty(rows, V, dtype=cd, device=w.device)
        self.p = self.z if cd == self.acc else torch.empty(rows, V, dtype=self.acc, device=w.device)

    def softmax(self, hc: Tensor, tc: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(p, log p(target), sum_v log p(v))`` of a chunk: p (c, V) in the accumulation dtype (a view of a
        reused buffer, valid until the next call), the two others (c,)."""
        c = hc.shape[0]
        z, p = self.z[:c], self.p[:c]
        if self.b is None:
            torch.mm(hc, self.w.T, out=z)
        else:
            torch.addmm(self.b, hc, self.w.T, out=z)
        if p is not z:
            p.copy_(z)  # upcast into the reused buffer: the softmax and the sums are fp32
        z_t = p.gather(1, tc[:, None]).squeeze(1)
        z_sum = p.sum(1)
        m = p.amax(1)
        if p.device.type == "cpu":
            torch._softmax(p, -1, False, out=p)  # in place: the CPU kernel reads a row in full before writing it
        else:
            p.copy_(torch.softmax(p, -1))
        lse = m - p.amax(1).log()  # the largest probability is exp(m - lse), at the largest logit
        return p, z_t - lse, z_sum - p.shape[1] * lse

    def low(self, p: Tensor) -> Tensor:
        """p in the matmul dtype: p itself in fp32, else the logits' buffer (no longer needed) refilled."""
        return p if self.p is self.z else self.z[: p.shape[0]].copy_(p)


def _run_head(h, w, b, target, conf, eps_i, chunk, cd, *, loss, grads):
    """One pass over the chunks: the loss and NLL sums (``loss=True``) and/or the gradients of
    ``A * loss + C * nll`` with respect to h, w and b (``grads=(A, C, need_h, need_w, need_b)``).

    With P = softmax(z) and Y = onehot(target): d(A loss + C nll)/dz = (A + C) P - A eps_i - (A conf + C) Y.
    Only P goes through the (chunk, V) matmuls, and (A + C) scales their (chunk, d) and (V, d) results; the
    constant and the one-hot terms are rank-one corrections applied once at the end (column sums of W and h,
    and an index_add over the target rows), which saves two passes over every (chunk, V) block.
    """
    N, d = h.shape
    head = _Head(w, b, cd, chunk, N)
    acc, dev = head.acc, h.device
    nll_sum = torch.zeros((), dtype=acc, device=dev)
    lp_sum = torch.zeros((), dtype=acc, device=dev)
    gh = gw = gb = None
    if grads is not None:
        A, C, need_h, need_w, need_b = grads
        A = torch.as_tensor(A, dtype=acc, device=dev)
        C = torch.as_tensor(C, dtype=acc, device=dev)
        p_scale, const, k = A + C, A * eps_i, A * conf + C
        gh = torch.empty(N, d, dtype=acc, device=dev) if need_h else None
        gw = torch.zeros(w.shape[0], d, dtype=acc, device=dev) if need_w else None
        gb = torch.zeros(w.shape[0], dtype=acc, device=dev) if need_b else None
    for s in range(0, N, chunk):
        hc, tc = h[s : s + chunk].to(cd), target[s : s + chunk]
        p, lp_t, lp_rows = head.softmax(hc, tc)
        if loss:
            nll_sum -= lp_t.sum()
            if eps_i:
                lp_sum += lp_rows.sum()
        if grads is not None:
            pc = head.low(p)
            if gh is not None:
                if cd == acc:
                    torch.mm(pc, head.w, out=gh[s : s + chunk])
                else:
                    gh[s : s + chunk] = pc @ head.w
            if gw is not None:
                if cd == acc:
                    gw.addmm_(pc.T, hc)
                else:
                    gw += (pc.T @ hc).to(acc)
            if gb is not None:
                gb += p.sum(0)
    if grads is not None:
        if gh is not None:  # (A + C) P W - (A conf + C) W[target] - A eps_i sum_v W_v
            gh.mul_(p_scale).sub_(k * w.index_select(0, target).to(acc) + const * w.to(acc).sum(0))
        if gw is not None:  # (A + C) P^T h - (A conf + C) sum of the h rows of each target id - A eps_i sum_n h_n
            hf = h.to(acc)
            gw.mul_(p_scale).index_add_(0, target, hf * -k)
            gw -= const * hf.sum(0)
        if gb is not None:
            gb.mul_(p_scale).index_add_(0, target, (-k).expand(N))
            gb -= const * N
    loss_sum = conf * nll_sum - eps_i * lp_sum if loss else None  # smooth = -(sum of all log-probs)
    return loss_sum, nll_sum, gh, gw, gb


class _LinearLabelSmoothedCE(torch.autograd.Function):
    """Sums of the label-smoothed loss and the NLL of ``h @ w.T + b`` over rows, in chunks of rows.

    ``precompute=True`` (``impl="chunked"``) computes the loss's gradients with respect to h, w and b in the
    same pass as the loss and keeps only those (N, d), (V, d), (V,) tensors for backward, which scales them by
    the incoming gradient; ``precompute=False`` (``impl="recompute"``) keeps nothing but the inputs and
    recomputes each chunk's log-probabilities in backward. The NLL's own gradient (needed only when the NLL
    itself is differentiated, which training never does) is always recomputed.
    """

    @staticmethod
    def forward(ctx, h, w, b, target, conf, eps_i, chunk, compute_dtype, precompute):  # type: ignore[override]
        ctx.set_materialize_grads(False)
        need = ctx.needs_input_grad[:3]
        grads = (1.0, 0.0, *need) if precompute and any(need) else None
        with torch.autocast(h.device.type, enabled=False):  # explicit casts inside; softmax always fp32
            loss, nll, gh, gw, gb = _run_head(
                h, w, b, target, conf, eps_i, chunk, compute_dtype, loss=True, grads=grads
            )
        ctx.args = (conf, eps_i, chunk, compute_dtype, b is not None)
        ctx.precomputed = (gh, gw, gb) if grads is not None else None
        ctx.save_for_backward(h, w, b if b is not None else torch.empty(0), target)
        return loss, nll

    @staticmethod
    def backward(ctx, g_loss, g_nll):  # type: ignore[override]
        h, w, b, target = ctx.saved_tensors
        conf, eps_i, chunk, cd, has_bias = ctx.args
        b = b if has_bias else None
        need = ctx.needs_input_grad[:3]
        out: list[Tensor | None] = [None, None, None]
        if g_loss is not None and ctx.precomputed is not None:
            out = [None if g is None else g * g_loss for g in ctx.precomputed]
            g_loss = None
        if g_loss is not None or g_nll is not None:
            A = 0.0 if g_loss is None else g_loss
            C = 0.0 if g_nll is None else g_nll
            with torch.autocast(h.device.type, enabled=False):
                *_, rh, rw, rb = _run_head(h, w, b, target, conf, eps_i, chunk, cd, loss=False, grads=(A, C, *need))
            out = [m if o is None else (o if m is None else o + m) for o, m in zip(out, (rh, rw, rb))]
        ctx.precomputed = None
        gh, gw, gb = (None if g is None else g.to(x.dtype) for g, x in zip(out, (h, w, w if b is None else b)))
        return gh, gw, gb if has_bias else None, None, None, None, None, None, None


def linear_label_smoothed_nll_loss(
    features: Tensor,
    weight: Tensor,
    target: Tensor,
    epsilon: float = 0.1,
    ignore_index: int | None = PAD,
    reduction: Literal["sum", "mean"] = "sum",
    *,
    bias: Tensor | None = None,
    impl: LossImpl = DEFAULT_LOSS_IMPL,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """``label_smoothed_nll_loss(F.linear(features, weight, bias), target, ...)`` without the (N, V) logits.

    ``features`` (..., d) are the decoder's output before the projection, ``weight`` (V, d) the projection
    (tied to the target embedding in normlab), ``target`` (...) the gold ids. Positions whose target is
    ``ignore_index`` are dropped before the projection, so padding costs nothing. Under autocast the matmuls
    run in the autocast dtype, as ``F.linear`` would; logits, softmax and both sums are fp32 and the returned
    gradients have the parameters' dtype. ``impl`` is ``chunked``, ``recompute`` or ``plain`` (see the module
    docstring); ``chunk_size`` positions per chunk (:func:`default_chunk_size` if None).
    """
    if impl == "plain":
        return label_smoothed_nll_loss(F.linear(features, weight, bias), target, epsilon, ignore_index, reduction)
    if impl not in LOSS_IMPLS:
        raise ValueError(f"impl must be one of {LOSS_IMPLS}, got {impl!r}")
    if reduction not in ("sum", "mean"):
        raise ValueError(f"reduction must be 'sum' or 'mean' for the fused loss, got {reduction!r}")
    d, V = features.shape[-1], weight.shape[0]
    if features.shape[:-1] != target.shape:
        raise ValueError(f"target {tuple(target.shape)} does not match features {tuple(features.shape)}")
    conf, eps_i = _smoothing_weights(epsilon, V)
    h, t = features.reshape(-1, d), target.reshape(-1)
    if ignore_index is not None:
        keep = t.ne(ignore_index)
        if not bool(keep.all()):
            h, t = h[keep], t[keep]
    n = t.shape[0]
    chunk = chunk_size or default_chunk_size(V, h.device)
    cd = compute_dtype(h)
    # under no_grad (evaluation) autograd still reports needs_input_grad: never precompute gradients there
    precompute = impl == "chunked" and torch.is_grad_enabled()
    loss, nll = _LinearLabelSmoothedCE.apply(h, weight, bias, t, conf, eps_i, chunk, cd, precompute)
    if reduction == "mean":
        loss, nll = loss / max(n, 1), nll / max(n, 1)
    return loss, nll


# --------------------------------------------------------------------------------------------------------
# Task losses (all return sums; divide by the batch's n_tokens, summed over ranks)


def translation_loss(
    model: torch.nn.Module,
    src: Tensor,
    tgt_in: Tensor,
    tgt_out: Tensor,
    epsilon: float = 0.1,
    *,
    impl: LossImpl = DEFAULT_LOSS_IMPL,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The label-smoothed loss of a :class:`~normlab.model.Seq2Seq` on one batch, summed over target tokens.

    ``impl="plain"`` runs the model to logits; the others ask it for decoder features only and project them
    in chunks with the model's (tied) ``output_projection.weight``.
    """
    if impl == "plain":
        return label_smoothed_nll_loss(model(src, tgt_in), tgt_out, epsilon)
    feats = model(src, tgt_in, features_only=True)
    weight = getattr(model, "module", model).output_projection.weight  # through a DDP wrapper too
    return linear_label_smoothed_nll_loss(feats, weight, tgt_out, epsilon, impl=impl, chunk_size=chunk_size)


def lm_loss(
    model: torch.nn.Module,
    tokens: Tensor,
    targets: Tensor,
    *,
    impl: LossImpl = DEFAULT_LOSS_IMPL,
    chunk_size: int | None = None,
) -> tuple[Tensor, Tensor]:
    """The next-token cross-entropy of a :class:`~normlab.model.CausalLM` on one batch, summed over the non-pad
    targets: ``(loss, nll)``, equal (no label smoothing: the language models the schemes were proposed on train
    without it). The output projection and the loss go through the same three ``impl`` as translation's."""
    if impl == "plain":
        return label_smoothed_nll_loss(model(tokens), targets, 0.0)
    feats = model(tokens, features_only=True)
    weight = getattr(model, "module", model).logit_weight()  # through a DDP wrapper too; with nGPT's s_z folded in
    return linear_label_smoothed_nll_loss(feats, weight, targets, 0.0, impl=impl, chunk_size=chunk_size)


def masked_lm_loss(
    logits: Tensor, targets: Tensor, epsilon: float = 0.0, ignore_index: int = PAD
) -> tuple[Tensor, Tensor]:
    """Cross-entropy on the masked positions only (BERT's MLM objective), summed.

    ``targets`` (B, T) holds the original token at masked positions and PAD elsewhere (the batch contract).
    ``logits`` are either (B, T, V) or, cheaper, only the masked rows (N_masked, V) as returned by
    ``MaskedLM(tokens, segments, select=targets.ne(PAD))``; in that case they are matched to the masked
    targets in row-major order, which is the order boolean indexing produces.
    """
    if logits.shape[:-1] == targets.shape:
        return label_smoothed_nll_loss(logits, targets, epsilon, ignore_index)
    selected = targets[targets.ne(ignore_index)]
    if logits.shape[:-1] != selected.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} match neither targets {tuple(targets.shape)} nor its "
            f"{selected.numel()} masked positions"
        )
    return label_smoothed_nll_loss(logits, selected, epsilon, ignore_index=None)


def classification_loss(logits: Tensor, labels: Tensor, epsilon: float = 0.0) -> tuple[Tensor, Tensor]:
    """Cross-entropy of the sentence(-pair) classifier, summed over sentences: ``(loss, nll)``, equal when
    ``epsilon`` is 0 (BERT fine-tuning uses none)."""
    return label_smoothed_nll_loss(logits, labels, epsilon, ignore_index=None)
