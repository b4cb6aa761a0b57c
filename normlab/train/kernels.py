"""Kernels chosen by measurement (issue 31): which attention implementation a run uses.

The fastest attention kernel depends on the device, the dtype, the sequence lengths and the mask, and the
differences are large: at the quick scale's shape (batch 64, 4 heads, 32 positions, head 64, bf16, one
thread), forward + backward of the 18 attention calls of a batch, PyTorch's CPU flash kernel took 357 ms on an
AMX Xeon where batched matmuls around an fp32 softmax took 88 ms (on a 2-core AVX-512 BF16 EPYC 265 against
91); at long sequences the flash kernel wins, as it does on a GPU (H200, the paper's shape: 5.3 ms against
15.0). A CPU flag cannot say which is which, so :func:`choose_attention` times the candidates
(:data:`normlab.model.ATTENTION_IMPLS`) on the run's own attention calls, recorded from a forward pass of the
model over a few of the run's batches (the shapes, strides, dtypes and masks of every encoder self-, decoder
self- and cross-attention call), and the trainer sets the fastest on the model
(:func:`normlab.model.set_attention`) and records the choice and the timings in the run's summary. The kernels
compute the same function with the same precision (scores and softmax in fp32) and differ in rounding (fp32:
~1e-7 relative; bf16: within 1.5x of each other's error against float64, tests/test_attention.py), so a
resumed run keeps the kernel it started with, to stay bit-identical to the run uninterrupted, rather than
measuring again.

A process that trains run after run (a grid's worker) measures each set of attention shapes once:
:func:`choose_attention` keeps its answer keyed by every call's shapes, strides, dtypes and mask, the kernels,
the device and the thread count, and a later run whose calls are the same gets it without timing again, marked
``cached`` in its summary. Within a sweep's curve every run has the same seed, so the same batches and shapes,
and only the learning rate differs: measuring again asked the same question and cost ~1.6 s of a 30-40 s run
(d=64, 3-3 layers, a loaded 2-core Zen 5), while timing noise could give runs of one curve different kernels.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from normlab.model import ATTENTION_IMPLS, _sdpa, trace_attention

__all__ = ["AttentionChoice", "record_attention_calls", "time_attention", "choose_attention", "forget_choices"]

Call = tuple[Tensor, Tensor, Tensor, "Tensor | None", bool]


class AttentionChoice(dict):
    """``{"impl": winner, "ms": {impl: ms per forward + backward of all the recorded calls}, "calls": n}``: a
    dict so that it goes into summary.json as it is."""

    @property
    def impl(self) -> str:
        return self["impl"]


def record_attention_calls(forward: Callable[[], Any]) -> list[Call]:
    """The inputs of every attention call ``forward()`` makes (run under no_grad: only shapes are needed)."""
    with torch.no_grad(), trace_attention() as calls:
        forward()
    return list(calls)


def _leaf_like(x: Tensor) -> Tensor:
    """A fresh leaf with x's shape, strides and dtype (a permuted view of a fused QKV projection stays one)."""
    t = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    with torch.no_grad():
        t.copy_(x)
    return t.requires_grad_(True)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_attention(
    calls: Sequence[Call],
    impls: Sequence[str] = ATTENTION_IMPLS,
    *,
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    rounds: int = 5,
    budget_s: float = 3.0,
    dropout: float = 0.0,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Milliseconds for forward + backward of all ``calls`` with each kernel of ``impls``: the median over up to
    ``rounds`` timed rounds after one warm-up round, the kernels interleaved within each round (the starting
    one rotating) so that load from other processes hits them alike. Rounds stop early once ``budget_s``
    seconds have gone into the measurement (at least one timed round: long sequences make a round take
    seconds). ``context`` is entered around each forward (the run's autocast)."""
    if not calls:
        return {impl: 0.0 for impl in impls}
    device = calls[0][0].device
    leaves = [(_leaf_like(q), _leaf_like(k), _leaf_like(v), mask, causal) for q, k, v, mask, causal in calls]
    grads = [None] * len(leaves)
    gen = torch.Generator(device=device).manual_seed(0)  # its own generator: the run's draw nothing here

    def run(impl: str) -> float:
        _synchronize(device)
        t0 = clock()
        for i, (q, k, v, mask, causal) in enumerate(leaves):
            with context():
                o = _sdpa(q, k, v, mask, causal, dropout, impl)
            if grads[i] is None or grads[i].dtype != o.dtype:
                grads[i] = torch.randn(o.shape, generator=gen, dtype=o.dtype, device=o.device)
            o.backward(grads[i])
            q.grad = k.grad = v.grad = None
        _synchronize(device)
        return (clock() - t0) * 1e3

    times: dict[str, list[float]] = {impl: [] for impl in impls}
    start = time.perf_counter()
    for r in range(rounds + 1):
        if r > 1 and time.perf_counter() - start > budget_s:
            break
        order = list(impls[r % len(impls):]) + list(impls[: r % len(impls)])
        for impl in order:
            ms = run(impl)
            if r:  # round 0 warms every kernel up (first-call allocations, lazy initialisation)
                times[impl].append(ms)
    return {impl: statistics.median(ts) for impl, ts in times.items()}


_CHOICES: dict[tuple, AttentionChoice] = {}


def _signature(t: Tensor | None) -> tuple | None:
    return None if t is None else (tuple(t.shape), t.stride(), str(t.dtype), str(t.device))


def _autocast_state(device_type: str) -> tuple[bool, str]:
    """Whether autocast is on for ``device_type`` where this is called, and its dtype: the kernels are timed
    inside the run's context, and an fp32 model under bf16 autocast is timed otherwise than one without."""
    return torch.is_autocast_enabled(device_type), str(torch.get_autocast_dtype(device_type))


def _choice_key(calls: Sequence[Call], impls: Sequence[str], rounds: int, autocast: tuple[bool, str]) -> tuple:
    """What a measurement depends on besides the machine's load: every call's inputs as the kernels see them
    (values aside), the autocast they are timed under, the kernels compared, the rounds, and the threads."""
    shapes = tuple((_signature(q), _signature(k), _signature(v), _signature(mask), causal)
                   for q, k, v, mask, causal in calls)  # fmt: skip
    return shapes, autocast, tuple(impls), rounds, torch.get_num_threads()


def forget_choices() -> None:
    """Drop the measurements this process keeps (tests that fake the timings; a caller that wants to measure
    again)."""
    _CHOICES.clear()


def choose_attention(
    model: nn.Module,
    forward: Callable[[], Any],
    *,
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
    impls: Sequence[str] = ATTENTION_IMPLS,
    rounds: int = 5,
) -> AttentionChoice:
    """Measure ``impls`` on the attention calls of ``forward()`` (a pass of ``model`` over one or more real
    batches, run inside ``context``) and return the fastest with the timings, or the answer this process found
    for the same calls before (``cached``: module docstring). The model is left as it was: the caller sets the
    winner (:func:`normlab.model.set_attention`)."""
    was_training = model.training
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    # the measurement draws no number from the run's generators: a run's dropout masks and data order are the
    # same whether or not (and whatever) it measured
    with torch.random.fork_rng(devices=devices):
        model.eval()  # shapes only: no dropout
        try:
            with context():
                calls = record_attention_calls(forward)
                autocast = _autocast_state(calls[0][0].device.type) if calls else (False, "")
        finally:
            model.train(was_training)
        key = _choice_key(calls, impls, rounds, autocast)
        if key in _CHOICES:  # the same shapes measured earlier in this process (module docstring)
            earlier = _CHOICES[key]
            return AttentionChoice(earlier, ms=dict(earlier["ms"]), cached=True)
        ms = time_attention(calls, impls, context=context, rounds=rounds)
    best = min(impls, key=lambda impl: ms[impl])
    choice = AttentionChoice(impl=best, ms={k: round(v, 3) for k, v in ms.items()}, calls=len(calls))
    _CHOICES[key] = choice
    return AttentionChoice(choice, ms=dict(choice["ms"]))
