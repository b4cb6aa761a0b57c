"""The label-smoothed loss: a hand-worked example, torch's definition, and the chunked implementations' values
and gradients against the plain path (fp32, fp64 gradcheck, bf16 autocast)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normlab.data.batch import PAD
from normlab.model import Seq2Seq
from normlab.train.losses import (
    classification_loss,
    label_smoothed_nll_loss,
    linear_label_smoothed_nll_loss,
    masked_lm_loss,
    translation_loss,
)
from tests.conftest import tiny_config

LN2 = math.log(2.0)


def test_hand_worked_example():
    # V = 3, epsilon = 0.1, so eps_i = 0.1 / (3 - 1) = 0.05 and the NLL weight is 1 - 0.1 - 0.05 = 0.85.
    # Row 0: p = (1/4, 1/2, 1/4), target 1: nll = -ln(1/2) = ln 2;
    #        smooth = -(ln 1/4 + ln 1/2 + ln 1/4) = 2 ln 2 + ln 2 + 2 ln 2 = 5 ln 2;
    #        loss = 0.85 ln 2 + 0.05 * 5 ln 2 = 1.10 ln 2.
    # Row 1: p = (1/2, 1/4, 1/4), target 2: nll = ln 4 = 2 ln 2; smooth = 5 ln 2;
    #        loss = 0.85 * 2 ln 2 + 0.25 ln 2 = 1.95 ln 2.
    # Row 2: target PAD (= 0): ignored.
    # Sums: nll = 3 ln 2 = 2.0794, loss = 3.05 ln 2 = 2.1141.
    p = torch.tensor([[0.25, 0.5, 0.25], [0.5, 0.25, 0.25], [0.2, 0.3, 0.5]])
    target = torch.tensor([1, 2, PAD])
    loss, nll = label_smoothed_nll_loss(p.log(), target, epsilon=0.1, log_probs=True)
    assert nll.item() == pytest.approx(3 * LN2, rel=1e-6)
    assert loss.item() == pytest.approx(3.05 * LN2, rel=1e-6)
    # from logits: log_softmax is shift-invariant, so any per-row offset gives the same numbers
    logits = p.log() + torch.tensor([[3.0], [-7.0], [0.5]])
    loss2, nll2 = label_smoothed_nll_loss(logits, target, epsilon=0.1)
    assert loss2.item() == pytest.approx(3.05 * LN2, rel=1e-6) and nll2.item() == pytest.approx(3 * LN2, rel=1e-6)
    # reductions: mean over the 2 scored rows; none gives per-row values with 0 at the pad
    mean, _ = label_smoothed_nll_loss(logits, target, epsilon=0.1, reduction="mean")
    assert mean.item() == pytest.approx(3.05 * LN2 / 2, rel=1e-6)
    rows, _ = label_smoothed_nll_loss(logits, target, epsilon=0.1, reduction="none")
    torch.testing.assert_close(rows, torch.tensor([1.10 * LN2, 1.95 * LN2, 0.0]))
    # epsilon = 0 is plain cross-entropy
    plain, nll0 = label_smoothed_nll_loss(logits, target, epsilon=0.0)
    assert plain.item() == pytest.approx(3 * LN2, rel=1e-6) and nll0.item() == plain.item()


def test_agrees_with_torch_label_smoothing():
    # torch spreads s / V over all words; fairseq eps_i = epsilon / (V - 1) over the others: s = epsilon V/(V-1)
    g = torch.Generator().manual_seed(0)
    V, eps = 11, 0.1
    logits = torch.randn(4, 6, V, generator=g) * 3
    target = torch.randint(1, V, (4, 6), generator=g)
    target[1, 4:] = PAD
    ours, nll = label_smoothed_nll_loss(logits, target, epsilon=eps)
    theirs = F.cross_entropy(
        logits.reshape(-1, V), target.reshape(-1), ignore_index=PAD, reduction="sum", label_smoothing=eps * V / (V - 1)
    )
    torch.testing.assert_close(ours, theirs)
    ref_nll = F.cross_entropy(logits.reshape(-1, V), target.reshape(-1), ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(nll, ref_nll)


def test_bad_arguments():
    x, t = torch.randn(2, 5), torch.tensor([1, 2])
    with pytest.raises(ValueError, match="epsilon"):
        label_smoothed_nll_loss(x, t, epsilon=1.0)
    with pytest.raises(ValueError, match="does not match"):
        label_smoothed_nll_loss(x, t[:1])
    with pytest.raises(ValueError, match="impl"):
        linear_label_smoothed_nll_loss(torch.randn(2, 3), torch.randn(5, 3), t, impl="fast")


def _problem(N=23, d=8, V=13, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(N, d, generator=g, dtype=dtype)
    w = torch.randn(V, d, generator=g, dtype=dtype) * 0.7
    b = torch.randn(V, generator=g, dtype=dtype) * 0.3
    t = torch.randint(1, V, (N,), generator=g)
    t[[3, 4, N - 1]] = PAD
    return h, w, b, t


def _grads(fn, *tensors):
    leaves = [x.detach().clone().requires_grad_(True) for x in tensors]
    loss, nll = fn(*leaves)
    # a generic combination also exercises the NLL's own gradient (recomputed in both chunked modes)
    (0.7 * loss + 0.3 * nll).backward()
    return loss.detach(), nll.detach(), [x.grad for x in leaves]


@pytest.mark.parametrize("impl", ["chunked", "recompute"])
@pytest.mark.parametrize("eps, with_bias", [(0.1, False), (0.0, True), (0.2, True)])
def test_chunked_equals_plain(impl, eps, with_bias):
    h, w, b, t = _problem()

    def plain(h, w, b):
        return label_smoothed_nll_loss(F.linear(h, w, b if with_bias else None), t, epsilon=eps)

    def chunked(h, w, b):
        bias = b if with_bias else None
        return linear_label_smoothed_nll_loss(h, w, t, epsilon=eps, bias=bias, impl=impl, chunk_size=5)

    l0, n0, g0 = _grads(plain, h, w, b)
    l1, n1, g1 = _grads(chunked, h, w, b)
    torch.testing.assert_close(l1, l0)
    torch.testing.assert_close(n1, n0)
    for a, e in zip(g1, g0):
        if e is None:
            assert a is None or not a.abs().any()
        else:
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
    assert not g1[0][[3, 4, 22]].abs().any(), "padding positions get no gradient"


@pytest.mark.parametrize("impl", ["chunked", "recompute"])
def test_gradcheck_fp64(impl):
    h, w, b, t = _problem(N=7, d=3, V=5, dtype=torch.float64)
    h, w, b = (x.requires_grad_(True) for x in (h, w, b))

    def f(h, w, b):
        return linear_label_smoothed_nll_loss(h, w, t, epsilon=0.1, bias=b, impl=impl, chunk_size=3)

    assert torch.autograd.gradcheck(f, (h, w, b))


def test_loss_only_backward_and_shared_weight():
    # the trainer backpropagates loss / n_tokens only, and the projection is tied to the embedding: the
    # stored gradient must be scaled by the incoming factor and accumulate with the embedding's own gradient
    h, w, b, t = _problem()
    ids = torch.tensor([1, 5, 5, 9])
    res = {}
    for impl in ("plain", "chunked", "recompute"):
        hh, ww = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
        loss, _ = linear_label_smoothed_nll_loss(hh, ww, t, epsilon=0.1, impl=impl, chunk_size=4)
        (loss / 20 + F.embedding(ids, ww).square().sum()).backward()
        res[impl] = (hh.grad, ww.grad)
    for impl in ("chunked", "recompute"):
        for a, e in zip(res[impl], res["plain"]):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


def test_no_grad_and_mean_and_all_padding(monkeypatch):
    import normlab.train.losses as losses

    h, w, b, t = _problem()
    seen = []
    run_head = losses._run_head
    monkeypatch.setattr(losses, "_run_head", lambda *a, **k: seen.append(k["grads"]) or run_head(*a, **k))
    with torch.no_grad():
        ref = label_smoothed_nll_loss(F.linear(h, w), t, reduction="mean")
        got = linear_label_smoothed_nll_loss(h.requires_grad_(True), w, t, reduction="mean", chunk_size=6)
    torch.testing.assert_close(got, ref)
    assert seen == [None], "evaluation must not compute gradients"
    zero, _ = linear_label_smoothed_nll_loss(h, w, torch.full_like(t, PAD))
    assert zero.item() == 0.0


@pytest.mark.parametrize("impl", ["chunked", "recompute"])
def test_bf16_autocast_matches_plain(impl):
    # both paths run the projection in bf16 and the softmax in fp32; the remaining difference is where
    # bf16 rounds the logits (plain: a bf16 (N, V) tensor; chunked: fp32 logits from the bf16 matmul)
    h, w, b, t = _problem(N=40, d=16, V=30)
    res = {}
    for name in ("plain", impl):
        hh, ww = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, nll = linear_label_smoothed_nll_loss(hh, ww, t, impl=name, chunk_size=16)
        loss.backward()
        assert loss.dtype == torch.float32 and ww.grad.dtype == torch.float32 and hh.grad.dtype == torch.float32
        res[name] = (loss.detach(), hh.grad, ww.grad)
    ref = label_smoothed_nll_loss(F.linear(h, w), t)[0]
    for a, e in zip(res[impl], res["plain"]):
        torch.testing.assert_close(a, e, rtol=2e-2, atol=2e-2)
    assert abs(res[impl][0] - ref) < 0.01 * ref  # and both are close to the fp32 value


@pytest.mark.parametrize("impl", ["chunked", "recompute"])
def test_translation_loss_impls_agree(impl):
    torch.manual_seed(0)
    cfg = tiny_config(share_embeddings="all")
    model = Seq2Seq(cfg)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(1, 50, (3, 7), generator=g)
    tgt_in = torch.randint(1, 50, (3, 6), generator=g)
    tgt_out = torch.randint(1, 50, (3, 6), generator=g)
    tgt_out[2, 4:] = PAD
    out = {}
    for name in ("plain", impl):
        model.zero_grad(set_to_none=True)
        loss, nll = translation_loss(model, src, tgt_in, tgt_out, impl=name, chunk_size=4)
        loss.backward()
        out[name] = (loss.detach(), nll.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    torch.testing.assert_close(out[impl][0], out["plain"][0])
    torch.testing.assert_close(out[impl][1], out["plain"][1])
    for n, gp in out["plain"][2].items():
        torch.testing.assert_close(out[impl][2][n], gp, rtol=1e-4, atol=1e-6, msg=n)


def test_masked_lm_and_classification_losses():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 9, generator=g)
    targets = torch.full((2, 5), PAD)
    targets[0, 1], targets[1, 3], targets[1, 4] = 4, 7, 2
    full, _ = masked_lm_loss(logits, targets)
    sel, _ = masked_lm_loss(logits[targets.ne(PAD)], targets)
    ref = F.cross_entropy(logits.reshape(-1, 9), targets.reshape(-1), ignore_index=PAD, reduction="sum")
    torch.testing.assert_close(full, ref)
    torch.testing.assert_close(sel, ref)
    with pytest.raises(ValueError, match="masked positions"):
        masked_lm_loss(logits[:, :2].reshape(-1, 9), targets)
    labels = torch.tensor([0, 2, 1])
    cl = torch.randn(3, 3, generator=g)
    loss, nll = classification_loss(cl, labels)  # class 0 is a label here, not padding
    torch.testing.assert_close(loss, F.cross_entropy(cl, labels, reduction="sum"))
    assert loss.item() == nll.item()
