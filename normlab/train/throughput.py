"""Measuring training speed: analytic FLOPs of an update, the device's measured matmul peak, peak memory.

Used by ``benchmarks/train_throughput.py`` (normlab against its peers) and usable by a training loop to log
tokens/s and the share of the matmul peak it reaches ("model FLOPs utilisation").
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import platform
import statistics
import sys
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from normlab import allocator
from normlab.config import ModelConfig

__all__ = ["seq2seq_update_flops", "matmul_peak_flops", "PeakMemory", "synchronize", "tune_malloc", "kept_pages", "release_memory",
           "limit_onednn_cache"]


def seq2seq_update_flops(cfg: ModelConfig, batch_size: int, src_len: int, tgt_len: int) -> int:
    """FLOPs of one training update (forward + backward) of the encoder-decoder on ``batch_size`` sentence
    pairs of ``src_len`` / ``tgt_len`` tokens: matmuls and attention only (LayerNorm, softmax, the optimizer
    and the embedding lookups are a rounding error next to them).

    Forward: 2 FLOPs per multiply-add. Per source token and encoder layer the projections are
    3d^2 (QKV) + d^2 (output) + 2 d d_ffn; per target token and decoder layer 4 d^2 (self-attention)
    + 2 d^2 (cross-attention queries and output) + 2 d d_ffn, and per *source* token and decoder layer 2 d^2
    (cross-attention keys and values); per target token d V for the output projection. Attention adds
    QK^T and AV: 4 n m d per layer for n queries and m keys (causal masks counted in full, as is customary).
    Backward is twice the forward (gradients of inputs and of weights): the update is 3x the forward.
    """
    d, f, V = cfg.d_model, cfg.d_ffn, cfg.vocab_size
    S, T, Le, Ld = src_len, tgt_len, cfg.encoder_layers, cfg.decoder_layers
    proj = S * Le * (4 * d * d + 2 * d * f) + T * Ld * (6 * d * d + 2 * d * f) + S * Ld * 2 * d * d + T * d * V
    attn = Le * 4 * S * S * d + Ld * (4 * T * T * d + 4 * T * S * d)
    return 3 * batch_size * (2 * proj + attn)


def _glibc() -> Any:
    """The C library when it is glibc and serves this process's malloc (whose tunables tune_malloc and
    release_memory use), else None: not where jemalloc or tcmalloc is preloaded (normlab.allocator), whose heap
    glibc's tunables do not reach."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc" or allocator.running() != "system":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both must exist
    except (OSError, AttributeError):
        return None
    return libc


def _jemalloc() -> Any:
    """jemalloc's ``mallctl`` when jemalloc serves this process's malloc (normlab.allocator preloads it), else
    None."""
    if allocator.running() != "jemalloc":
        return None
    try:
        mallctl = ctypes.CDLL(None).mallctl
    except (OSError, AttributeError):  # no mallctl: a build with a symbol prefix (je_mallctl), which does not
        return None  # serve malloc at all (and leaves glibc's heap untuned: allocator.running() names jemalloc)
    mallctl.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                        ctypes.c_size_t]
    mallctl.restype = ctypes.c_int
    return mallctl


def _jemalloc_decays(mallctl: Any) -> dict[bytes, int] | None:
    """jemalloc's decay times (ms; -1: never), the defaults of arenas created later (``arenas.*``) and those of
    every arena in use; None when jemalloc does not answer. An arena that was never initialised answers an error
    and is left out: it takes the ``arenas.*`` default when it starts."""
    narenas = ctypes.c_uint()
    size = ctypes.c_size_t(ctypes.sizeof(narenas))
    if mallctl(b"arenas.narenas", ctypes.byref(narenas), ctypes.byref(size), None, 0):
        return None
    names = [b"arenas.dirty_decay_ms", b"arenas.muzzy_decay_ms"]
    names += [f"arena.{i}.{kind}_decay_ms".encode() for i in range(narenas.value) for kind in ("dirty", "muzzy")]
    out = {}
    for name in names:
        value, size = ctypes.c_ssize_t(), ctypes.c_size_t(ctypes.sizeof(ctypes.c_ssize_t))
        if mallctl(name, ctypes.byref(value), ctypes.byref(size), None, 0) == 0:
            out[name] = value.value
    return out if len(out) >= 2 else None


def _jemalloc_set_decays(mallctl: Any, values: dict[bytes, int]) -> bool:
    ok = True
    for name, ms in values.items():
        value = ctypes.c_ssize_t(ms)
        ok = mallctl(name, None, None, ctypes.byref(value), ctypes.sizeof(value)) == 0 and ok
    return ok


def _jemalloc_keep_pages(mallctl: Any) -> dict[bytes, int] | None:
    """Turn jemalloc's decay off (dirty and muzzy pages kept until :func:`release_memory` purges them) in every
    arena and in those created later; returns the settings it replaced, None when one did not take."""
    before = _jemalloc_decays(mallctl)
    if before is None or not _jemalloc_set_decays(mallctl, {name: -1 for name in before}):
        return None
    return before


# glibc's own defaults (malloc/malloc.c: DEFAULT_MMAP_MAX, DEFAULT_TRIM_THRESHOLD), which kept_pages restores
_GLIBC_MMAP_MAX, _GLIBC_TRIM_THRESHOLD = 65536, 128 * 1024
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc's malloc.h


def tune_malloc() -> bool:
    """Make the allocator (glibc's, or a preloaded jemalloc) keep freed memory for reuse instead of returning it
    to the OS (CPU training only).

    A training step allocates and frees the same large activation tensors every update. glibc serves any
    allocation above its mmap threshold (at most 32 MB) with a fresh ``mmap`` and unmaps it on free, so each
    update page-faults its large tensors in again, and it trims the heap top back to the OS. Turning mmap off
    (``M_MMAP_MAX=0``) and the trim threshold up makes the heap behave like a caching allocator. Measured on
    the development CPU (1 thread, thread CPU time, 6+6 layers, 1,024 target tokens): normlab 3.71 -> 3.42 s
    per update, torch.nn 4.39 -> 3.77 s, x-transformers 4.40 -> 3.79 s. Process-wide, and the process's RSS
    no longer shrinks but through :func:`release_memory`.

    On jemalloc (normlab.allocator preloads it where the machine has it) the same is its decay turned off:
    by default jemalloc hands freed pages back to the OS over ~10 s (and those of allocations above 8 MB at
    once), so a training step, which frees and re-allocates hundreds of MB every update, faults most of them
    in again each time. Measured at the quick scale (6-6, d=256, 2,048 tokens, bf16, 1 thread, a 2-core Zen 5):
    ~51,000 minor faults an update with jemalloc's default decay against ~8,400 with decay off and a purge every
    10 updates (0.666 -> 0.613 s an update, thread time, batches of changing length); a quick run of 120
    updates with two validations, ``normlab train``: see the trainer's RELEASE_EVERY. Returns False (and does
    nothing) where neither glibc nor jemalloc serves this process's malloc.
    """
    if (mallctl := _jemalloc()) is not None:
        return _jemalloc_keep_pages(mallctl) is not None
    if (libc := _glibc()) is None:
        return False
    return bool(libc.mallopt(_M_MMAP_MAX, 0)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30))


@contextlib.contextmanager
def kept_pages() -> Iterator[bool]:
    """:func:`tune_malloc` for the length of a block, in a process that goes on doing other things after it (the
    wall-time probe of ``reproduce`` and ``sweep``, which must time an update as the grid's workers will run it):
    then the allocator's settings restored and the kept pages handed back (:func:`release_memory`). Yields what
    tune_malloc returned. Restored as far as the allocators let: jemalloc's decay times as they were, an arena
    first used inside the block (the one for allocations over 8 MB, typically) at the default of new arenas (10
    s, where jemalloc would have started that one at 0); glibc's M_MMAP_MAX and M_TRIM_THRESHOLD at glibc's
    defaults, but its dynamic mmap threshold stays off (any mallopt turns it off) and a user's MALLOC_* settings
    are not read back."""
    if (mallctl := _jemalloc()) is not None:
        before = _jemalloc_keep_pages(mallctl)
        try:
            yield before is not None
        finally:
            if before is not None:
                # an arena first used inside the block (the one for allocations over 8 MB, typically) started
                # with the block's -1: it takes the default that arenas started with before
                now = _jemalloc_decays(mallctl) or {}
                default = {kind: before[f"arenas.{kind}_decay_ms".encode()] for kind in ("dirty", "muzzy")}
                new = {n: default[n.split(b".")[2].split(b"_")[0].decode()] for n in now if n not in before}
                _jemalloc_set_decays(mallctl, {**before, **new})
            release_memory()
        return
    tuned = tune_malloc()
    try:
        yield tuned
    finally:
        if tuned and (libc := _glibc()) is not None:
            release_memory()
            libc.mallopt(_M_MMAP_MAX, _GLIBC_MMAP_MAX)
            libc.mallopt(_M_TRIM_THRESHOLD, _GLIBC_TRIM_THRESHOLD)


ONEDNN_CACHE_CAPACITY = 64


def limit_onednn_cache(capacity: int = ONEDNN_CACHE_CAPACITY) -> bool:
    """Cap oneDNN's primitive cache (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, 1,024 by default) unless the user set
    it; True when this call set it. oneDNN reads the variable when it creates its first primitive, so this must
    run before the process's first bf16 matmul or convolution on the CPU (``normlab train`` and the grid's
    workers call it before building the model).

    oneDNN (PyTorch's bf16 CPU matmuls) compiles and caches a primitive per matmul shape, and token-bucketed
    batches bring new shapes every update, so the cache fills to its capacity with primitives of shapes that may
    never come back. Measured at the quick scale (6-6, d=256, 2,048 tokens, bf16, 1 thread, 40 updates and a
    validation, 2-core Zen 4, malloc released every 10 updates): peak resident memory 1.91 GB with the default
    1,024, 1.79 GB with 256, 1.59 GB with 64, 1.47 GB with 8; the update's thread time 1.03 / 1.03 / 0.93 /
    1.06 s, i.e. no cost within the noise (re-creating a primitive is cheap beside the matmul it runs). 64
    keeps the primitives of about two batch shapes."""
    if "ONEDNN_PRIMITIVE_CACHE_CAPACITY" in os.environ or "DNNL_PRIMITIVE_CACHE_CAPACITY" in os.environ:
        return False  # the user's setting, under oneDNN's name or its older one
    os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] = str(capacity)
    return True


def release_memory() -> bool:
    """Return the freed pages of the C heap to the OS (glibc's ``malloc_trim(0)``; jemalloc: every arena
    purged); False where neither serves this process's malloc.

    :func:`tune_malloc` keeps freed memory for reuse, which is what makes the steady-state update free of page
    faults, but the token-bucketed batches change shape every update, and glibc's heap fragments under
    allocations of ever new sizes: measured on the quick scale's run (6-6, d=256, 2,048 tokens, bf16, 1 thread),
    resident memory grew from 1.23 GB after the first update to 2.37 GB after 60 and 2.60 GB after 100 (with
    glibc's defaults too: 2.33 GB after 60), which is how a pool worker reached 5.5 GB over a 1,200-update run.
    ``malloc_trim`` hands back every free page, those in the holes too (glibc >= 2.8); the next update faults
    the pages it reuses in again, so the trainer calls it every few updates, after a validation and at the end
    of a run (normlab.train.trainer.RELEASE_EVERY), not after every update."""
    if (mallctl := _jemalloc()) is not None:
        return mallctl(b"arena.4096.purge", None, None, None, 0) == 0  # 4096: MALLCTL_ARENAS_ALL
    if (libc := _glibc()) is None:
        return False
    libc.malloc_trim(0)  # 1 when it released memory, 0 when there was none to release
    return True


def synchronize(device: torch.device | str) -> None:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak_flops(
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    *,
    n: int = 2048,
    budget_s: float = 3.0,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Measured FLOP/s of a large square matmul in ``dtype`` (the median of a few repetitions).

    bf16 runs under autocast with fp32 operands, as the training step does. On a CPU without native bf16
    (no AVX512-BF16/AMX) the bf16 path is a slow fallback; ``n`` then shrinks until one product fits the
    time budget, so the measurement itself stays short. ``clock``: ``time.thread_time`` measures the CPU
    time of a 1-thread run, which other processes on a shared machine barely disturb.
    """
    device = torch.device(device)
    autocast = dtype != torch.float32

    def product(m: int) -> Callable[[], Tensor]:
        a = torch.randn(m, m, device=device)
        b = torch.randn(m, m, device=device)

        def run() -> Tensor:
            with torch.autocast(device.type, dtype=dtype, enabled=autocast):
                return a @ b

        return run

    m = 256
    while True:  # probe upwards so that a slow dtype never runs a product that takes minutes
        run = product(m)
        run()
        synchronize(device)
        t0 = clock()
        run()
        synchronize(device)
        dt = clock() - t0
        if m >= n or dt * 8 > budget_s / 4:
            break
        m *= 2
    reps = max(2, min(7, int(budget_s / max(dt, 1e-6))))
    times = []
    for _ in range(reps):
        t0 = clock()
        run()
        synchronize(device)
        times.append(clock() - t0)
    return 2 * m**3 / statistics.median(times)


class PeakMemory(TorchDispatchMode):
    """Peak bytes of live tensor storage while the block runs.

    On CUDA this is ``torch.cuda.max_memory_allocated`` (minus nothing: parameters, gradients and optimizer
    state count). On the CPU, where PyTorch keeps no allocator statistics, every storage that an operator
    returns inside the block is added when it appears and subtracted when it is freed (a weak reference on
    the storage), on top of the storages of ``resident`` tensors (parameters, optimizer state) that exist
    before; views share their storage and count once. Allocations internal to a kernel (a BLAS workspace)
    are not seen, as they are not by the CUDA statistic either. The dispatch hook costs time, so measure
    memory in an update of its own, not in a timed one.
    """

    def __init__(self, device: torch.device | str = "cpu", resident: Iterable[Tensor] = ()) -> None:
        super().__init__()
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}
        self._refs: list[weakref.ref] = []
        self._resident = list(resident)

    def _track(self, t: Tensor) -> None:
        if t.device.type != "cpu" or t.is_meta:
            return
        try:
            st = t.untyped_storage()
        except (NotImplementedError, RuntimeError):  # sparse or other storage-less tensors
            return
        key, nbytes = st.data_ptr(), st.nbytes()
        if nbytes == 0 or key in self._live:
            return
        self._live[key] = nbytes
        self.current += nbytes
        self.peak = max(self.peak, self.current)
        self._refs.append(weakref.ref(st, lambda _ref, key=key: self._free(key)))

    def _free(self, key: int) -> None:
        nbytes = self._live.pop(key, 0)
        self.current -= nbytes

    def __enter__(self) -> PeakMemory:
        if self.cuda:
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            return self
        for t in self._resident:
            self._track(t)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        if self.cuda:
            synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device)
            return None
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor):
                self._track(t)
        return out
