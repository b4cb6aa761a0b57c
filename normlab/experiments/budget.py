"""How long a reproduce grid will take on this machine, measured before it starts.

``normlab reproduce`` prints the estimate at the start, from a short probe: a few training updates of the
scale's translation model on a batch of the scale's size, in the precision and thread count the grid will use
(the matmul work of an update is fixed by the model and the batch, so the probe's time per update is the
grid's), times the updates of the grid's runs, divided by the jobs that run in parallel, plus the validation
passes. It also measures the fp32 and bf16 matmul rates (on a CPU, of one core: a process started beside the probe
would otherwise distort them) and warns, with both numbers, when the CPU
has no native bf16 (no AMX or AVX-512 BF16): the quick scale's budget (scales.QUICK_BUDGET) assumes a CPU that
has it, and an fp32-only CPU takes several times longer.

The estimate is a pace (:attr:`Estimate.pace`: seconds per update of the grid as a whole) times the grid's updates,
through progress.eta with nothing measured yet; the grid (grid.py) starts from the same pace and the same function
for the ETA it shows while it runs, which its own measured pace corrects as it goes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Sequence
from typing import Any

import torch

from normlab.config import TrainConfig
from normlab.device import autocast, autocast_dtype
from normlab.experiments.figures import Context, RunSpec
from normlab.experiments.progress import eta, lanes_left
from normlab.model import build_model, set_attention
from normlab.train.kernels import choose_attention
from normlab.train.losses import lm_loss, translation_loss
from normlab.train.optim import build_optimizer
from normlab.train.throughput import kept_pages, limit_onednn_cache, matmul_peak_flops, tune_malloc

__all__ = ["Estimate", "probe_update_seconds", "estimate", "grid_work", "evaluations", "updates_per_epoch",
           "native_bf16", "run_updates"]

# A validation pass over V target tokens costs about a third of a training update on the same tokens (forward
# only); the grid's runs validate every eval_every updates. BLEU decoding is counted as this many updates per
# 100 sentences, whatever the beam (measured with translate.validation_bleu: greedy at the quick scale, ~4 of its
# updates; beam 5 at the long scale's shape on a 2-core Zen 4, ~2.4 of its 4,096-token updates, 500 sentences and
# the 2,000-pair loss in ~30 s: a batched beam costs little more than greedy decoding, and the updates it is
# counted in are larger). The test split (test_checkpoint) is decoded once at the end, counted as 2,000 sentences
# (the vendored de-en's test split: ~100 s there, the model and data loaded included).
_BLEU_UPDATES_PER_100 = 4.0
_TEST_SENTENCES = 2000


def native_bf16(device: torch.device) -> bool:
    """bf16 matmuls in hardware: a CUDA GPU that supports them, or a CPU with AVX-512 BF16 or AMX."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def probe_update_seconds(cfg: TrainConfig, *, threads: int, updates: int = 3, sentence_len: int = 24,
                         competitors: int = 0) -> float:  # fmt: skip
    """Seconds per training update of ``cfg``'s translation model on a random batch of ``cfg.data.max_tokens``
    tokens (sentences of ``sentence_len``), with ``threads`` CPU threads: the median of ``updates`` timed
    updates after one warm-up update. ``competitors``: processes that train the same model beside the probe
    (:func:`_compete`), as the grid's other jobs run beside each run (memory bandwidth and caches are shared).
    Measured on a 2-core EPYC Zen 4 in bf16, the sweep's model (quick and standard presets): 0.115 / 0.190 /
    0.351 s at d = 64 / 128 / 256 beside one competitor, against 0.112 / 0.179 / 0.335 alone; in the 2-job grid a
    d=64 run took ~0.125 s per update, validation and per-run costs included."""
    if competitors > 0:
        import multiprocessing

        mp = multiprocessing.get_context("spawn")
        stop, ready = mp.Event(), [mp.Event() for _ in range(competitors)]
        procs = [mp.Process(target=_compete, args=(cfg, threads, sentence_len, r, stop, os.getpid()), daemon=True)
                 for r in ready]  # fmt: skip
        try:
            for p in procs:
                p.start()
            # each competitor's first update (torch imports take seconds); one that died stops the wait for it
            deadline = time.monotonic() + 180
            for p, r in zip(procs, ready):
                while not r.wait(timeout=0.5) and p.exitcode is None and time.monotonic() < deadline:
                    pass
            return probe_update_seconds(cfg, threads=threads, updates=updates, sentence_len=sentence_len)
        finally:
            stop.set()
            for p in procs:
                if p.pid is None:  # never started
                    continue
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()
                    p.join()
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        # the allocator keeping freed pages for the next update, as the grid's workers run (tune_malloc; on
        # jemalloc's default decay the quick shape's update faulted ~51,000 pages in again and took ~1.3x as long,
        # so the probe would overestimate the runs), for the probe only: this process goes on with other things
        with kept_pages():
            step = _updater(cfg, sentence_len)
            times = []
            for k in range(updates + 1):
                t0 = time.perf_counter()
                step()
                if k:
                    times.append(time.perf_counter() - t0)
            return sorted(times)[len(times) // 2]
    finally:
        torch.set_num_threads(before)


PROBED = ("translation", "lm")
"""The tasks the probe can time (:func:`_updater`); a grid's estimate probes its first run of the first of them."""


def _updater(cfg: TrainConfig, sentence_len: int) -> Any:
    """One training update of ``cfg``'s model on a fixed random batch of ``cfg.data.max_tokens`` tokens, as a
    function (synchronised on CUDA, so that timing it times the update): a translation model on sentence pairs of
    ``sentence_len``, a language model (task lm) on rows of its ``data.block_size``."""
    device = torch.device("cuda" if cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
                          else "cpu")  # fmt: skip
    if device.type == "cpu":
        # as the grid's workers run: oneDNN's cache capped (normlab/train/throughput.py)
        limit_onednn_cache()
    gen = torch.Generator().manual_seed(0)
    lm = cfg.data.task == "lm"
    model = build_model(cfg.model, "lm" if lm else "translation").to(device)
    opt = build_optimizer(model, cfg.optim)
    amp = autocast_dtype(cfg.precision, device)
    length = cfg.data.block_size if lm else sentence_len
    batch = max(1, cfg.data.max_tokens // length)
    v = cfg.model.vocab_size
    src = torch.randint(8, v, (batch, length), generator=gen).to(device)
    tgt = torch.randint(8, v, (batch, length), generator=gen).to(device)

    def loss_of() -> Any:
        if lm:  # next-token targets of the same length (their values do not change the work)
            return lm_loss(model, src, tgt)
        return translation_loss(model, src, tgt, tgt, cfg.label_smoothing)

    # the attention kernel the run would train with (the trainer measures it the same way at its start)
    impl = cfg.attention
    if impl == "auto":
        impl = choose_attention(model, loss_of, context=lambda: autocast(device, amp)).impl
    set_attention(model, impl)

    def step() -> None:
        with autocast(device, amp):
            loss, _ = loss_of()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


_COMPETE_MAX_S = 600.0  # a competitor outliving its probe (the parent killed with SIGKILL mid-probe) stops by then


def _compete(cfg: TrainConfig, threads: int, sentence_len: int, ready: Any, stop: Any, parent: int) -> None:
    """A competitor of :func:`probe_update_seconds`: updates of the same model until ``stop`` is set, its parent
    ``parent`` is gone, or :data:`_COMPETE_MAX_S` have passed (nothing else would stop it if the parent was
    killed before its ``finally``)."""
    torch.set_num_threads(max(1, threads))
    tune_malloc()  # as a grid worker trains (this process does nothing else)
    step = _updater(cfg, sentence_len)
    end = time.monotonic() + _COMPETE_MAX_S
    while not stop.is_set() and os.getppid() == parent and time.monotonic() < end:
        step()
        ready.set()


@dataclasses.dataclass
class Estimate:
    seconds_per_update: float  # of the probe, at the grid's threads per job
    updates: int  # training updates of the grid's runs
    # seconds per update of the grid as a whole (jobs in parallel, validation counted): what run_grid's ETA starts
    # from (progress.pace); 0 when there is no probe
    pace: float
    jobs: int
    fp32_gflops: float
    bf16_gflops: float
    native_bf16: bool
    warning: str = ""
    per_core: bool = False  # the matmul rates are one core's (CPU), not the device's (CUDA)
    lengths: tuple[int, ...] = ()  # each run's updates, in grid order (empty: not known; no lanes)

    @property
    def seconds(self) -> float:
        """The estimated wall time of the grid: the ETA the grid shows before its first update (progress.GridWatch:
        the busiest of min(jobs, runs) lanes, :func:`progress.lanes_left`, at one run's pace, ``pace x lanes``; the
        updates at the pace when the lengths are not known)."""
        return _wall(self.updates, self.lengths, self.jobs, self.pace)

    @property
    def _per(self) -> str:
        return " per core" if self.per_core else ""

    def text(self) -> str:
        if not self.seconds_per_update:  # no translation run to probe (e.g. --figures fig5)
            return (f"estimate: not available (the probe times a translation model); matmul{self._per} fp32 "
                    f"{self.fp32_gflops:.0f} GFLOP/s, bf16 {self.bf16_gflops:.0f} GFLOP/s"
                    + (f"\nWARNING: {self.warning}" if self.warning else ""))
        line = (f"estimate: {self.updates:,} updates x {self.seconds_per_update:.2f} s (probe) / {self.jobs} job(s) "
                f"+ validation = ~{self.seconds / 60:.0f} min on this machine (matmul{self._per} fp32 "
                f"{self.fp32_gflops:.0f} GFLOP/s, bf16 {self.bf16_gflops:.0f} GFLOP/s)")  # fmt: skip
        return line + (f"\nWARNING: {self.warning}" if self.warning else "")


def _wall(updates: int, lengths: Sequence[int], jobs: int, pace: float) -> float:
    lanes = min(jobs, len(lengths))
    if lanes > 0 and pace:
        return lanes_left((), lengths, lanes) * pace * lanes
    return eta(updates, prior=pace) or 0.0


def _measured_epoch(spec: RunSpec, ctx: Context) -> int:
    """The updates in an epoch of ``spec``'s training data as the context measured them (0: not measured)."""
    if spec.kind == "finetune":
        return ctx.finetune_updates_per_epoch.get(spec.finetune_task or "", 0)
    return ctx.mlm_updates_per_epoch if spec.kind == "mlm" else ctx.translation_updates_per_epoch


def run_updates(spec: RunSpec, ctx: Context) -> int:
    """The updates ``spec``'s run makes: its max_updates, or its epochs of the data as the context measured them."""
    c = spec.config
    return c.max_updates or c.max_epochs * (_measured_epoch(spec, ctx) or 1)


def _per_epoch(spec: RunSpec, ctx: Context, updates: int) -> int:
    """The updates in an epoch of ``spec``'s training data; where the context did not measure it, the run's own
    epochs (``updates`` over max_epochs) for a run bounded by epochs, else an epoch longer than the run (so that
    only ``eval_every`` and the run's end validate, never every update)."""
    c = spec.config
    return _measured_epoch(spec, ctx) or (updates + 1 if c.max_updates else max(1, updates // max(c.max_epochs, 1)))


def updates_per_epoch(data: Any, cfg: TrainConfig) -> int:
    """Updates in one epoch of ``data``'s training split (a prepared dataset, data.prepare) under ``cfg``'s batching:
    the count the trainer's first epoch makes."""
    d = cfg.data
    return len(data.splits["train"].epoch_batches(1, cfg.seed, d.max_tokens, max_sentences=d.max_sentences))


def evaluations(updates: int, per_epoch: int, eval_every: int = 0) -> int:
    """How many validation passes the trainer makes in a run of ``updates`` updates (train/trainer.py): one at the
    end of each complete epoch, one every ``eval_every`` updates that is not also an epoch's end, and a last one
    when the run stops inside an epoch (max_updates). A run of a few hundred updates of a corpus whose epoch is
    thousands of updates (a sweep's) validates every ``eval_every`` updates and at its end, not once per update."""
    per_epoch = max(per_epoch, 1)
    ends = updates // per_epoch
    periodic = 0
    if eval_every:
        periodic = updates // eval_every - updates // math.lcm(eval_every, per_epoch)
    # the last pass when the run stops inside an epoch, unless eval_every has just made it (trainer._validate
    # skips an update already evaluated)
    last = 1 if updates % per_epoch and not (eval_every and updates % eval_every == 0) else 0
    return ends + periodic + last


def _weight(c: TrainConfig, ref: TrainConfig) -> float:
    """The cost of one of ``c``'s updates in units of the probed one: tokens per batch x layers (matmul work
    per token scales with depth at equal width; widths differ only between scales, not within one)."""
    layers = lambda t: t.model.encoder_layers + t.model.decoder_layers  # noqa: E731
    return (c.data.max_tokens / max(ref.data.max_tokens, 1)) * (layers(c) / max(layers(ref), 1))


def grid_work(specs: Sequence[RunSpec], ctx: Context, ref: TrainConfig) -> tuple[int, float]:
    """The grid's training updates, and its work (training and validation) in updates of ``ref`` (the probed
    run): each run's updates and validation passes (:func:`evaluations`, per epoch of its own data), weighted
    by :func:`_weight`."""
    updates, work = 0, 0.0
    for s in specs:
        c = s.config
        n = run_updates(s, ctx)
        updates += n
        evals = evaluations(n, _per_epoch(s, ctx, n), c.eval_every)
        # a validation pass: (valid examples x ~25 tokens) forward-only, a third of an update's work per token
        valid = evals * (c.data.valid_subset or 2000) * 25 / 3 / max(c.data.max_tokens, 1)
        per_sentence = _BLEU_UPDATES_PER_100 / 100
        if s.kind == "translation" and c.valid_bleu:
            valid += evals * min(c.valid_bleu, c.data.valid_subset or 2000) * per_sentence
        if s.kind == "translation" and c.test_checkpoint:
            valid += _TEST_SENTENCES * per_sentence
        work += (n + valid) * _weight(c, ref)
    return updates, work


def estimate(specs: Sequence[RunSpec], ctx: Context, *, jobs: int, threads: int,
             budget_minutes: float | None = None, compete: bool = False) -> Estimate:  # fmt: skip
    """The grid's wall time on this machine from a probe of its first translation (else language-model) run (see the
    module's doc);
    pre-training and fine-tuning updates are weighted by their tokens and layers against the probed one.
    ``compete``: on a CPU, probe beside ``jobs - 1`` processes training the same model, as the grid will run
    (``normlab sweep``; reproduce's probe already runs beside its Figure 3 analysis)."""
    # the first translation run, else the first language-model run (an LM sweep): the tasks the probe can time
    trans = [s for k in PROBED for s in specs if s.kind == k]
    ref = (trans or list(specs))[0].config
    device = torch.device("cuda" if ref.device == "cuda" or (ref.device == "auto" and torch.cuda.is_available())
                          else "cpu")  # fmt: skip
    # On a CPU, the rate of one core in CPU time (time.thread_time): the Figure 3 analysis starts first and runs
    # beside this probe, and a multi-threaded wall-clock matmul sharing its cores measured 2 GFLOP/s on a core
    # that does 60 alone (OpenMP threads wait on the one that was descheduled). Only the bf16/fp32 ratio and
    # the order of magnitude matter here; the update probe below times the real thing.
    before = torch.get_num_threads()
    cpu = device.type == "cpu"
    if cpu:
        torch.set_num_threads(1)
    # thread_time ticks every ~16 ms on Windows, longer than a 1024^3 product on an AMX core: wall time there
    clock = time.thread_time if cpu and time.get_clock_info("thread_time").resolution <= 1e-6 else time.perf_counter
    try:
        fp32 = matmul_peak_flops(torch.float32, device, n=1024, budget_s=0.3, clock=clock) / 1e9
        bf16 = matmul_peak_flops(torch.bfloat16, device, n=1024, budget_s=0.3, clock=clock) / 1e9
    finally:
        torch.set_num_threads(before)
    competitors = jobs - 1 if compete and cpu else 0
    per_update = probe_update_seconds(ref, threads=threads, competitors=competitors) if trans else 0.0
    updates, work = grid_work(specs, ctx, ref)
    # the grid's work (in updates of the probed run) at the probe's time each, shared by the jobs (no more of them
    # than there are runs), per grid update
    grid_pace = work * per_update / max(1, min(jobs, len(specs))) / max(1, updates)
    lengths = tuple(run_updates(s, ctx) for s in specs)
    seconds = _wall(updates, lengths, jobs, grid_pace)
    native = native_bf16(device)
    warning = ""
    if device.type == "cpu" and not native:
        warning = (f"this CPU has no native bf16 (no AMX or AVX-512 BF16): bf16 matmuls run at {bf16:.1f} GFLOP/s "
                   f"against {fp32:.0f} in fp32 per core, so training runs in fp32. ")  # fmt: skip
        if budget_minutes and per_update:
            warning += (f"The scale's budget of {budget_minutes:g} minutes assumes a CPU with native bf16 (e.g. a "
                        f"Xeon with AMX: ~2,000 GFLOP/s bf16 on 2 cores); here it takes ~{seconds / 60:.0f} minutes.")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > (os.cpu_count() or 1) + 0.5:
        warning += (f" The load average is {load:.1f} on {os.cpu_count()} cores: other processes share them, so this "
                    "probe (and the grid) run slower than on an idle machine.")
    return Estimate(per_update, updates, grid_pace, jobs, fp32, bf16, native, warning.strip(), per_core=cpu,
                    lengths=lengths)
