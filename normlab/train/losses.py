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

__all__ = [
    "LOSS_IMPLS",
    "DEFAULT_LOSS_IMPL",
    "label_smoothed_nll_loss",
    "linear_label_smoothed_nll_loss",
    "default_chunk_size",
    "translation_loss",
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


def default_chunk_size(vocab: int) -> int:
    """Positions per chunk: one fp32 (chunk, V) block of about 16 MB, which stays in the last-level cache of
    a server CPU and is a negligible slice of GPU memory (measured in benchmarks/train_throughput.py)."""
    return max(64, (1 << 22) // max(vocab, 1))


def _compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype F.linear would compute in here: the autocast dtype when autocast is on for x's device."""
    dev = x.device.type
    if torch.amp.is_autocast_available(dev) and torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return x.dtype


def _chunk_logits(h: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """One chunk's logits (c, V) in fp32 (fp64 stays fp64); h, w, b already in the compute dtype."""
    z = F.linear(h, w, b)
    return z if z.dtype in (torch.float32, torch.float64) else z.float()


def _accumulate_weight_grad(gw: Tensor, g: Tensor, h: Tensor) -> None:
    """gw (V, d) fp32 += g.T @ h: in place in fp32; a bf16 product is summed into the fp32 accumulator."""
    if g.dtype == gw.dtype:
        gw.addmm_(g.T, h)
    else:
        gw += (g.T @ h).float()


class _LinearLabelSmoothedCE(torch.autograd.Function):
    """Sums of the label-smoothed loss and the NLL of ``h @ w.T + b`` over rows, in chunks of rows.

    With the gradient of a chunk's loss with respect to its logits z (fp32)::

        d loss / d z = softmax(z) - (1 - epsilon - eps_i) * onehot(target) - eps_i      (rows sum to 0)
        d nll  / d z = softmax(z) - onehot(target)

    ``precompute=True`` (``impl="chunked"``) applies the first to the chunk's features and weight in forward
    and keeps only the (N, d) and (V, d) results; ``precompute=False`` (``impl="recompute"``) keeps the row
    log-sum-exps and recomputes each chunk's logits in backward. The NLL's own gradient (only needed when the
    NLL itself is differentiated, which training never does) is always recomputed.
    """

    @staticmethod
    def forward(ctx, h, w, b, target, conf, eps_i, chunk, compute_dtype, precompute):  # type: ignore[override]
        ctx.set_materialize_grads(False)
        N, V = h.shape[0], w.shape[0]
        cd = compute_dtype
        acc = torch.float64 if cd == torch.float64 else torch.float32  # accumulators: fp32 at least
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grads = precompute and (need_h or need_w or need_b)
        with torch.autocast(h.device.type, enabled=False):  # explicit casts below; logits always fp32
            wc = w.to(cd)
            bc = None if b is None else b.to(cd)
            loss = torch.zeros((), dtype=acc, device=h.device)
            nll_sum = torch.zeros((), dtype=acc, device=h.device)
            lse_all = torch.empty(N, dtype=acc, device=h.device)
            gh = torch.empty(N, h.shape[1], dtype=acc, device=h.device) if grads and need_h else None
            gw = torch.zeros(V, w.shape[1], dtype=acc, device=h.device) if grads and need_w else None
            gb = torch.zeros(V, dtype=acc, device=h.device) if grads and need_b else None
            for s in range(0, N, chunk):
                hc, tc = h[s : s + chunk].to(cd), target[s : s + chunk]
                z = _chunk_logits(hc, wc, bc)
                lse = torch.logsumexp(z, dim=-1)
                nll = lse - z.gather(1, tc[:, None]).squeeze(1)
                # smooth = -sum_v log p_v = V * lse - sum_v z_v
                smooth = V * lse - z.sum(-1) if eps_i else None
                nll_sum += nll.sum()
                loss += conf * nll.sum() + (eps_i * smooth.sum() if eps_i else 0.0)
                lse_all[s : s + chunk] = lse
                if grads:
                    g = z.sub_(lse[:, None]).exp_()  # softmax, in place of the logits
                    if eps_i:
                        g.sub_(eps_i)
                    g.scatter_add_(1, tc[:, None], torch.full_like(lse[:, None], -conf))
                    gc = g.to(cd)
                    if gh is not None:
                        gh[s : s + chunk] = gc @ wc
                    if gw is not None:
                        _accumulate_weight_grad(gw, gc, hc)
                    if gb is not None:
                        gb += g.sum(0)
        ctx.conf, ctx.eps_i, ctx.chunk, ctx.cd, ctx.has_bias = conf, eps_i, chunk, cd, b is not None
        ctx.precomputed = (gh, gw, gb) if grads else None
        ctx.save_for_backward(h, w, b if b is not None else torch.empty(0), target, lse_all)
        return loss, nll_sum

    @staticmethod
    def backward(ctx, g_loss, g_nll):  # type: ignore[override]
        h, w, b, target, lse_all = ctx.saved_tensors
        b = b if ctx.has_bias else None
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        gh = gw = gb = None
        recompute_loss = g_loss is not None and ctx.precomputed is None
        if g_loss is not None and ctx.precomputed is not None:
            pgh, pgw, pgb = ctx.precomputed
            gh = pgh * g_loss if need_h else None
            gw = pgw * g_loss if need_w else None
            gb = pgb * g_loss if need_b else None
        if recompute_loss or g_nll is not None:
            a = g_loss if recompute_loss else None  # weight of the loss's own gradient in this pass
            rh, rw, rb = _recompute_grads(ctx, h, w, b, target, lse_all, a, g_nll, need_h, need_w, need_b)
            gh = rh if gh is None else (gh + rh if rh is not None else gh)
            gw = rw if gw is None else (gw + rw if rw is not None else gw)
            gb = rb if gb is None else (gb + rb if rb is not None else gb)
        ctx.precomputed = None
        cast = lambda g, like: None if g is None else g.to(like.dtype)  # noqa: E731
        return cast(gh, h), cast(gw, w), (cast(gb, b) if b is not None else None), None, None, None, None, None, None


def _recompute_grads(ctx, h, w, b, target, lse_all, a, c, need_h, need_w, need_b):
    """Gradients of ``a * loss + c * nll`` (a, c: scalar tensors or None) by recomputing each chunk's logits:
    d/dz = (a + c) * softmax - a * eps_i - (a * conf + c) * onehot."""
    cd, conf, eps_i, chunk = ctx.cd, ctx.conf, ctx.eps_i, ctx.chunk
    N, V = h.shape[0], w.shape[0]
    acc = torch.float64 if cd == torch.float64 else torch.float32
    zero = torch.zeros((), dtype=acc, device=h.device)
    a = zero if a is None else a.to(acc)
    c = zero if c is None else c.to(acc)
    p_scale, const, onehot = a + c, a * eps_i, -(a * conf + c)
    with torch.autocast(h.device.type, enabled=False):
        wc = w.to(cd)
        bc = None if b is None else b.to(cd)
        gh = torch.empty(N, h.shape[1], dtype=acc, device=h.device) if need_h else None
        gw = torch.zeros(V, w.shape[1], dtype=acc, device=h.device) if need_w else None
        gb = torch.zeros(V, dtype=acc, device=h.device) if need_b else None
        for s in range(0, N, chunk):
            hc, tc = h[s : s + chunk].to(cd), target[s : s + chunk]
            g = _chunk_logits(hc, wc, bc).sub_(lse_all[s : s + chunk, None]).exp_().mul_(p_scale).sub_(const)
            g.scatter_add_(1, tc[:, None], onehot.expand(tc.shape[0], 1).contiguous())
            gc = g.to(cd)
            if gh is not None:
                gh[s : s + chunk] = gc @ wc
            if gw is not None:
                _accumulate_weight_grad(gw, gc, hc)
            if gb is not None:
                gb += g.sum(0)
    return gh, gw, gb


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
    chunk = chunk_size or default_chunk_size(V)
    cd = _compute_dtype(h)
    loss, nll = _LinearLabelSmoothedCE.apply(h, weight, bias, t, conf, eps_i, chunk, cd, impl == "chunked")
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
    return linear_label_smoothed_nll_loss(
        feats, model.output_projection.weight, tgt_out, epsilon, impl=impl, chunk_size=chunk_size
    )


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
