"""Training throughput of normlab against torch.nn, Hugging Face mBART/Marian and x-transformers, in one run.

The workload is the paper's IWSLT14 model (Xiong et al. 2020, Section 3 setup; fairseq transformer_iwslt_de_en):
6 encoder and 6 decoder layers, d = 512, FFN 1024, 4 heads, a 10k vocabulary, and 4,096 target tokens per
update as 128 sentence pairs of 32 source and 32 target tokens; one update is forward + backward + Adam step
with dropout 0.1 and the paper's label-smoothed loss (epsilon 0.1). Every model is timed on the same batch,
in ONE process, alternating model by model within each round (the starting model rotates between rounds),
so that load from other processes hits all of them alike; the figure is the median of ``--updates`` timed
updates after ``--warmup`` warm-up updates, per model and dtype.

Printed per model and dtype: target tokens/s, ms per update (median, min-max), peak memory, the achieved
FLOP/s as a share of the matmul peak measured in the same run, and the ratio of each normlab variant to
each peer (ratio of the medians, and the median of the per-round ratios, which cancels slow drifts in load).

* FLOPs are counted analytically (normlab.train.throughput.seq2seq_update_flops: 6 x matmul parameters x
  tokens plus the attention products; checked against torch's FlopCounterMode in tests/test_throughput.py),
  the same figure for every model since they compute the same products.
* Peak memory: on CUDA ``torch.cuda.max_memory_allocated``; on the CPU the peak of live tensor storage
  (parameters, gradients, Adam state and activations), tracked by a TorchDispatchMode with weak references on
  storages (normlab.train.throughput.PeakMemory) in one extra, untimed update per model: the process's RSS
  cannot separate models that share one process, and glibc keeps freed memory mapped.
* The peers are configured as their documentation shows, at the same sizes: torch.nn.Transformer
  (Post-LN, with its final norms) with token embeddings, fairseq's sinusoidal positions and a tied output
  projection around it, loss ``F.cross_entropy(label_smoothing=0.1)``; MBartForConditionalGeneration and
  MarianMTModel (``attn_implementation="sdpa"``, ReLU, dropout 0.1 on residual branches, their own loss);
  x-transformers' XTransformer (``attn_flash=True``, ReLU, ``ff_mult=2``, dropout 0.1 on the embeddings and
  on each branch's output via ``sublayer_dropout``, its own loss). They use ``torch.optim.Adam`` with its
  default implementation (on the CPU: the per-parameter loop; ``--peer-adam fused`` gives them the fused
  one too); normlab uses its trainer's settings (``--normlab-adam``, ``--normlab-loss``).

Then normlab-post and normlab-pre also train through normlab's Trainer (``--no-real-loop`` skips it): the same
shapes come from a synthetic corpus through its data pipeline (epoch plan, collate), with its metrics.jsonl and
TensorBoard logging, gradient-norm logging and learning-rate schedule; the time per update is the interval
between consecutive logged updates, and after each logged update one bare update of the same model runs
outside those intervals, so that the printed gap (loop vs bare step) compares the two under the same load.

Variants of normlab can be raced against each other: ``--models normlab-post,normlab-post:loss=plain,
normlab-post:adam=loop`` (keys: loss=chunked|recompute|plain, adam=trainer|fused|foreach|loop, compile=0|1,
chunk=N). ``--quick`` runs a 2+2-layer model on 1,024 target tokens with 1 warm-up and 3 timed updates
(under 2 minutes on 2 cores). bf16 is skipped, with the reason, when the measured bf16 matmul peak is
below a quarter of the fp32 one (a CPU without AVX512-BF16/AMX runs bf16 matmuls in a slow fallback);
``--force-dtypes`` runs it anyway.

    python benchmarks/train_throughput.py             # the full comparison (minutes)
    python benchmarks/train_throughput.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd import DeviceType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from normlab import allocator  # noqa: E402
from normlab.config import ModelConfig, OptimConfig, TrainConfig  # noqa: E402
from normlab.device import cpu_name  # noqa: E402
from normlab.model import ATTENTION_IMPLS, Seq2Seq, set_attention, sinusoidal_table  # noqa: E402
from normlab.train.kernels import choose_attention  # noqa: E402
from normlab.train.losses import LOSS_IMPLS, translation_loss  # noqa: E402
from normlab.train.optim import build_optimizer  # noqa: E402
from normlab.train.throughput import (  # noqa: E402
    PeakMemory,
    kept_pages,
    matmul_peak_flops,
    seq2seq_update_flops,
    limit_onednn_cache,
    synchronize,
    tune_malloc,
)

PEERS = ("torch.nn", "hf-mbart", "hf-marian", "x-transformers")
DEFAULT_MODELS = ("normlab-post", "normlab-pre") + PEERS
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
FP32_ONLY = {"hf-marian"}  # as in the reference figures


@dataclasses.dataclass(frozen=True)
class Workload:
    layers: int
    batch: int
    src_len: int = 32
    tgt_len: int = 32
    d_model: int = 512
    d_ffn: int = 1024
    heads: int = 4
    vocab: int = 10_000
    dropout: float = 0.1
    epsilon: float = 0.1

    @property
    def tokens(self) -> int:
        return self.batch * self.tgt_len

    def model_config(self, placement: str) -> ModelConfig:
        return ModelConfig(
            placement=placement, encoder_layers=self.layers, decoder_layers=self.layers, d_model=self.d_model,
            d_ffn=self.d_ffn, n_heads=self.heads, vocab_size=self.vocab, dropout=self.dropout, max_positions=256,
        )  # fmt: skip


# The workloads: the paper's IWSLT model (4,096 target tokens) and the model `normlab reproduce --scale quick`
# trains (normlab/experiments/scales.py: 6-6, d=256, FFN 512, 4 heads, an 8k vocabulary, 2,048 target tokens,
# one thread per run as its 2-job grid runs on 2 cores, the allocator tuned as `normlab train` does; run it with
# LD_PRELOAD=/path/to/libjemalloc.so.2 to measure on jemalloc, which `normlab train` preloads where it can).
SHAPES = {
    "paper": dict(layers=6, batch=128),
    "quick": dict(layers=6, batch=64, d_model=256, d_ffn=512, vocab=8_000),
}


@dataclasses.dataclass
class Entry:
    name: str
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss: Callable[[dict[str, Tensor]], Tensor]  # batch -> scalar loss to backpropagate
    dtypes: tuple[str, ...] = ("fp32", "bf16")
    note: str = ""
    times: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    peak: dict[str, int] = dataclasses.field(default_factory=dict)
    attention: str | None = None  # normlab: "auto" (measured per dtype before the first update) or a kernel
    chosen: dict[str, str] = dataclasses.field(default_factory=dict)  # dtype -> the kernel "auto" chose


# --------------------------------------------------------------------------------------------------------
# Models


def _adam(params, impl: str) -> torch.optim.Optimizer:
    kwargs = dict(lr=5e-4, betas=(0.9, 0.98), eps=1e-8)  # the paper's IWSLT Adam settings
    if impl == "fused":
        return torch.optim.Adam(params, fused=True, **kwargs)
    if impl == "foreach":
        return torch.optim.Adam(params, foreach=True, **kwargs)
    if impl == "loop":
        return torch.optim.Adam(params, foreach=False, **kwargs)
    if impl == "default":
        return torch.optim.Adam(params, **kwargs)
    raise SystemExit(f"unknown Adam implementation {impl!r} (fused, foreach, loop, default)")


def build_normlab(spec: str, w: Workload, device: torch.device, args: argparse.Namespace) -> Entry:
    base, _, opts_text = spec.partition(":")
    opts = dict(kv.split("=", 1) for kv in opts_text.split(",") if kv)
    unknown = set(opts) - {"loss", "adam", "compile", "chunk", "attn"}
    if unknown:
        raise SystemExit(f"{spec}: unknown option(s) {sorted(unknown)}; expected loss, adam, compile, chunk, attn")
    placement = base.removeprefix("normlab-")
    loss_impl = opts.get("loss", args.normlab_loss)
    if loss_impl not in LOSS_IMPLS:
        raise SystemExit(f"{spec}: loss must be one of {LOSS_IMPLS}")
    chunk = int(opts["chunk"]) if "chunk" in opts else None
    model = Seq2Seq(w.model_config(placement)).to(device).train()
    attn = opts.get("attn", getattr(args, "normlab_attention", "auto"))
    if attn not in ("auto", *ATTENTION_IMPLS):
        raise SystemExit(f"{spec}: attn must be auto or one of {ATTENTION_IMPLS}")
    if attn == "auto":  # as the Trainer does at a run's start (normlab.train.kernels), per dtype: see update()
        attn_note = "attn=auto"
    else:
        set_attention(model, attn)
        attn_note = f"attn={attn}"
    adam = opts.get("adam", args.normlab_adam)
    # "trainer": the optimizer normlab's Trainer builds (normlab.train.optim: fused Adam where available)
    opt = build_optimizer(model, OptimConfig()) if adam == "trainer" else _adam(model.parameters(), adam)
    run = model
    if opts.get("compile", "0") == "1":
        run = torch.compile(model)

    def loss(b: dict[str, Tensor]) -> Tensor:
        total, _ = translation_loss(run, b["src"], b["tgt_in"], b["tgt_out"], w.epsilon, impl=loss_impl, chunk_size=chunk)
        return total / w.tokens  # the trainer divides the summed loss by the (global) token count

    note = f"loss={loss_impl}, adam={opts.get('adam', args.normlab_adam)}, {attn_note}" + (
        ", compiled" if run is not model else "")
    return Entry(spec, model, opt, loss, note=note, attention=attn)


class TorchNNSeq2Seq(nn.Module):
    """torch.nn.Transformer with what a translation model needs around it: token embeddings scaled by
    sqrt(d), fairseq's sinusoidal positions, dropout, and an output projection tied to the target embedding."""

    def __init__(self, w: Workload) -> None:
        super().__init__()
        self.scale = math.sqrt(w.d_model)
        self.src_embed = nn.Embedding(w.vocab, w.d_model, padding_idx=0)
        self.tgt_embed = nn.Embedding(w.vocab, w.d_model, padding_idx=0)
        self.register_buffer("pos", sinusoidal_table(256, w.d_model), persistent=False)
        self.drop = nn.Dropout(w.dropout)
        self.transformer = nn.Transformer(
            w.d_model, w.heads, w.layers, w.layers, w.d_ffn, w.dropout, batch_first=True
        )
        self.out = nn.Linear(w.d_model, w.vocab, bias=False)
        self.out.weight = self.tgt_embed.weight

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        S, T = src.shape[1], tgt_in.shape[1]
        x = self.drop(self.src_embed(src) * self.scale + self.pos[:S])
        y = self.drop(self.tgt_embed(tgt_in) * self.scale + self.pos[:T])
        mask = nn.Transformer.generate_square_subsequent_mask(T, device=src.device)
        return self.out(self.transformer(x, y, tgt_mask=mask, tgt_is_causal=True))


def build_torch_nn(w: Workload, device: torch.device, args: argparse.Namespace) -> Entry:
    model = TorchNNSeq2Seq(w).to(device).train()

    def loss(b: dict[str, Tensor]) -> Tensor:
        logits = model(b["src"], b["tgt_in"])
        return F.cross_entropy(
            logits.reshape(-1, w.vocab).float(), b["tgt_out"].reshape(-1), ignore_index=0, label_smoothing=w.epsilon
        )

    return Entry("torch.nn", model, _adam(model.parameters(), args.peer_adam), loss)


def build_hf(kind: str, w: Workload, device: torch.device, args: argparse.Namespace) -> Entry:
    import transformers  # noqa: F401  (ImportError is reported by the caller)
    from transformers import MarianConfig, MarianMTModel, MBartConfig, MBartForConditionalGeneration

    common = dict(
        vocab_size=w.vocab, d_model=w.d_model, encoder_layers=w.layers, decoder_layers=w.layers,
        encoder_attention_heads=w.heads, decoder_attention_heads=w.heads, encoder_ffn_dim=w.d_ffn,
        decoder_ffn_dim=w.d_ffn, max_position_embeddings=256, dropout=w.dropout, attention_dropout=0.0,
        activation_dropout=0.0, activation_function="relu", scale_embedding=True, pad_token_id=0,
        bos_token_id=2, eos_token_id=3, decoder_start_token_id=2,
    )  # fmt: skip
    if kind == "hf-mbart":
        model = MBartForConditionalGeneration(MBartConfig(attn_implementation="sdpa", **common))
    else:
        model = MarianMTModel(MarianConfig(decoder_vocab_size=w.vocab, attn_implementation="sdpa", **common))
    assert model.config._attn_implementation == "sdpa", model.config._attn_implementation
    model = model.to(device).train()

    def loss(b: dict[str, Tensor]) -> Tensor:
        return model(input_ids=b["src"], decoder_input_ids=b["tgt_in"], labels=b["tgt_out"]).loss

    dtypes = ("fp32",) if kind in FP32_ONLY else ("fp32", "bf16")
    return Entry(kind, model, _adam(model.parameters(), args.peer_adam), loss, dtypes=dtypes)


def build_x_transformers(w: Workload, device: torch.device, args: argparse.Namespace) -> Entry:
    from x_transformers import XTransformer

    side = dict(
        depth=w.layers, heads=w.heads, attn_dim_head=w.d_model // w.heads, ff_mult=w.d_ffn / w.d_model,
        attn_flash=True, emb_dropout=w.dropout, attn_sublayer_dropout=w.dropout, ff_sublayer_dropout=w.dropout,
        ff_custom_activation=nn.ReLU(), num_tokens=w.vocab,
    )  # fmt: skip
    kwargs = {f"enc_{k}": v for k, v in side.items()} | {f"dec_{k}": v for k, v in side.items()}
    model = XTransformer(
        dim=w.d_model, enc_max_seq_len=w.src_len, dec_max_seq_len=w.tgt_len + 1, ignore_index=0, pad_value=0, **kwargs
    ).to(device).train()

    def loss(b: dict[str, Tensor]) -> Tensor:
        # XTransformer shifts the target itself: tgt = bos + tokens, its loss is over the T next tokens
        return model(b["src"], b["tgt"])

    return Entry("x-transformers", model, _adam(model.parameters(), args.peer_adam), loss)


def build(name: str, w: Workload, device: torch.device, args: argparse.Namespace) -> Entry | None:
    try:
        if name.startswith("normlab-"):
            return build_normlab(name, w, device, args)
        if name == "torch.nn":
            return build_torch_nn(w, device, args)
        if name in ("hf-mbart", "hf-marian"):
            return build_hf(name, w, device, args)
        if name == "x-transformers":
            return build_x_transformers(w, device, args)
    except ImportError as e:
        print(f"# {name}: not measured, could not import it ({e}); pip install -e '.[bench]'")
        return None
    raise SystemExit(f"unknown model {name!r}; expected normlab-<placement>[:opts] or one of {PEERS}")


# --------------------------------------------------------------------------------------------------------
# Measuring


def make_batch(w: Workload, device: torch.device, seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(7, w.vocab, (w.batch, w.src_len), generator=g)
    tgt = torch.randint(7, w.vocab, (w.batch, w.tgt_len + 1), generator=g)
    tgt[:, 0] = 2  # bos
    batch = dict(src=src, tgt=tgt, tgt_in=tgt[:, :-1].contiguous(), tgt_out=tgt[:, 1:].contiguous())
    return {k: v.to(device) for k, v in batch.items()}


def choose_kernel(e: Entry, batch: dict[str, Tensor], dtype: torch.dtype, device: torch.device) -> None:
    """attn=auto: the attention kernel the Trainer would choose for this dtype, measured on this batch."""
    dname = next(k for k, v in DTYPES.items() if v == dtype)
    if e.attention != "auto" or dname in e.chosen:
        return
    amp = lambda: torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)  # noqa: E731
    choice = choose_attention(e.model, lambda: e.loss(batch), context=amp)
    set_attention(e.model, choice.impl)
    e.chosen[dname] = choice.impl
    print(f"#   {e.name} {dname}: attention {choice.impl} (measured ms: "
          + ", ".join(f"{k} {v:.1f}" for k, v in choice["ms"].items()) + ")", flush=True)


def update(e: Entry, batch: dict[str, Tensor], dtype: torch.dtype, device: torch.device) -> None:
    if e.attention == "auto":
        choose_kernel(e, batch, dtype, device)
        dname = next(k for k, v in DTYPES.items() if v == dtype)
        set_attention(e.model, e.chosen[dname])
    e.optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = e.loss(batch)
    loss.backward()
    e.optimizer.step()
    if not torch.isfinite(loss):
        raise RuntimeError(f"{e.name}: non-finite loss {loss.item()}")


def resident_tensors(e: Entry) -> list[Tensor]:
    out = list(e.model.parameters()) + list(e.model.buffers())
    out += [p.grad for p in e.model.parameters() if p.grad is not None]
    for state in e.optimizer.state.values():
        out += [v for v in state.values() if isinstance(v, Tensor)]
    return out


def measure_peak_memory(e: Entry, batch, dtype, device) -> int:
    gc.collect()
    with PeakMemory(device, resident=resident_tensors(e)) as pm:
        update(e, batch, dtype, device)
        synchronize(device)
    return pm.peak


def run_dtype(entries: list[Entry], dname: str, w: Workload, device, args) -> list[float]:
    """Alternate the models' updates; after each round also measure the matmul peak, so that peak and models
    see the same load on a shared machine. Returns the per-round peaks (FLOP/s)."""
    dtype = DTYPES[dname]
    peaks = []
    batch = make_batch(w, device)
    active = [e for e in entries if dname in e.dtypes]
    rounds = args.warmup + args.updates
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    for r in range(rounds):
        order = active[r % len(active) :] + active[: r % len(active)]
        for e in order:
            synchronize(device)
            t0 = clock()
            update(e, batch, dtype, device)
            synchronize(device)
            dt = clock() - t0
            if r >= args.warmup:
                e.times.setdefault(dname, []).append(dt)
        if r >= args.warmup:
            peaks.append(matmul_peak_flops(dtype, device, budget_s=1.5, clock=clock))
        done = "warm-up" if r < args.warmup else "timed"
        print(f"#   {dname} round {r + 1}/{rounds} ({done}) done, load average {os.getloadavg()[0]:.1f}", flush=True)
    if not args.no_memory:
        for e in active:
            e.peak[dname] = measure_peak_memory(e, batch, dtype, device)
    return peaks


def report(entries: list[Entry], dname: str, w: Workload, flops: int, peak_flops: float) -> None:
    active = [e for e in entries if dname in e.times]
    if not active:
        return
    print(f"\n## {dname}: matmul peak {peak_flops / 1e9:.0f} GFLOP/s (median of one measurement per round); "
          f"one update = {flops / 1e12:.3f} "
          f"TFLOP; ceiling at that peak = {w.tokens * peak_flops / flops:,.0f} tokens/s")  # fmt: skip
    print(f"{'model':34s} {'tokens/s':>9s} {'ms/update (min-max)':>24s} {'peak MiB':>9s} {'% of peak':>9s}  notes")
    for e in active:
        ts = e.times[dname]
        med = statistics.median(ts)
        mem = f"{e.peak[dname] / 2**20:9.0f}" if dname in e.peak else f"{'-':>9s}"
        share = flops / med / peak_flops
        span = f"{med * 1e3:8.0f} ({min(ts) * 1e3:.0f}-{max(ts) * 1e3:.0f})"
        print(f"{e.name:34s} {w.tokens / med:9,.0f} {span:>24s} {mem} {share:9.1%}  {e.note}")
    ours = [e for e in active if e.name.startswith("normlab-")]
    peers = [e for e in active if not e.name.startswith("normlab-")]
    if ours and peers:
        print("\nratio normlab / peer in tokens/s: ratio of medians [median of per-round ratios]; memory ratio")
        for o in ours:
            cells = []
            for p in peers:
                med_ratio = statistics.median(p.times[dname]) / statistics.median(o.times[dname])
                paired = statistics.median(tp / to for tp, to in zip(p.times[dname], o.times[dname]))
                mem = f", mem {o.peak[dname] / p.peak[dname]:.2f}" if dname in o.peak and dname in p.peak else ""
                cells.append(f"{p.name} {med_ratio:.2f}x [{paired:.2f}x]{mem}")
            print(f"  {o.name:32s} " + "; ".join(cells))


def launch_overhead(device, n: int = 2000, synced: int = 200) -> tuple[float, float]:
    """Microseconds per operator that does no work (``add_`` on a 1-element tensor): queued back to back (the
    dispatcher's and, on CUDA, the kernel launch's cost) and with a synchronize after each (the round trip).
    A model whose update runs many small kernels is bound by the first figure times its kernel count (the
    profile's line), not by its matmuls. What it is for: on the GPU lent on 2026-11-26 (H100, torch 2.11) a
    quick-preset sweep run took 0.24 s an update (median of 88 runs) where the same runs with fp32 attention took
    0.03 s, and the runs of a worker process that had seen the batches' shapes before were fast too: a cost per
    new shape (cuDNN attention's graph builds; normlab/model.py leaves that backend out since), which this line
    and the profile tell from a per-launch one."""
    x = torch.zeros(1, device=device)
    for _ in range(50):
        x.add_(1)
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(n):
        x.add_(1)
    synchronize(device)
    queued = (time.perf_counter() - t0) / n * 1e6
    t0 = time.perf_counter()
    for _ in range(synced):
        x.add_(1)
        synchronize(device)
    return queued, (time.perf_counter() - t0) / synced * 1e6


def profile_updates(e: Entry, dname: str, w: Workload, device, n: int, flops: int, peak: float) -> None:
    """The top operators of ``n`` updates by self time (torch.profiler), per update and as a share of it; the
    matmuls' line beside the time they would take at the measured peak."""
    from torch.profiler import ProfilerActivity, profile

    batch = make_batch(w, device)
    dtype = DTYPES[dname]
    update(e, batch, dtype, device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        synchronize(device)
        t0 = time.perf_counter()  # inside: the profiler's start and its trace's collection are not the updates'
        for _ in range(n):
            update(e, batch, dtype, device)
        synchronize(device)
        wall = (time.perf_counter() - t0) / n
    averages = prof.key_averages()
    cuda = device.type == "cuda"
    # on CUDA an operator's self device time is its kernels', and the kernels are events of their own too: the
    # operators' table is read against the kernels' sum (device_totals), as torch's own table does
    attr = "self_device_time_total" if cuda else "self_cpu_time_total"
    ops = [ev for ev in averages if not cuda or ev.device_type == DeviceType.CPU]
    events = sorted(ops, key=lambda ev: getattr(ev, attr), reverse=True)
    total, kernels = device_totals(averages) if cuda else (sum(ev.self_cpu_time_total for ev in ops), 0)
    print(f"\n## profile: {e.name} {dname}, {n} updates ({'device' if cuda else 'CPU'} self time, under the "
          f"profiler): {total / n / 1e3:.0f} ms an update; its matmuls at the measured peak {flops / peak * 1e3:.0f} "
          "ms")  # fmt: skip
    if cuda:  # busy device time against the wall: a small share means launch- or host-bound
        busy = total / n / 1e6 / wall  # profiler times are microseconds
        if kernels:
            print(f"   wall {wall * 1e3:.0f} ms an update under the profiler, the device busy {busy:.0%} of it; "
                  f"{kernels / n:.0f} kernels and copies an update ({wall * 1e6 / (kernels / n):.0f} us of wall "
                  "each)")  # fmt: skip
        else:
            print(f"   wall {wall * 1e3:.0f} ms an update under the profiler; no device event recorded (CUPTI "
                  "unavailable?): the device shares above are not measured")  # fmt: skip
    print(f"{'operator':48s} {'ms/update':>10s} {'share':>7s} {'calls/update':>13s}")
    for ev in events[:20]:
        t = getattr(ev, attr)
        print(f"{ev.key[:48]:48s} {t / n / 1e3:10.1f} {t / max(total, 1e-9):7.1%} {ev.count / n:13.0f}")


def device_totals(averages) -> tuple[float, int]:
    """The device time (microseconds) and the kernel count of a profile's ``key_averages()``: the sums over its
    device events (kernels, memcpy, memset), user annotations left out, as torch's profiler table sums them."""
    dev = [ev for ev in averages if ev.device_type == DeviceType.CUDA and not ev.is_user_annotation]
    return sum(ev.self_device_time_total for ev in dev), sum(ev.count for ev in dev)


# --------------------------------------------------------------------------------------------------------
# The same workload through normlab's Trainer (data loading, logging, schedule included)


def synthetic_translation_data(w: Workload, n_batches: int, seed: int = 0):
    """A TranslationDataset whose every pair is ``src_len`` / ``tgt_len`` tokens once eos/bos are added, so
    that the Trainer's token batching (``max_tokens = batch * max(src_len, tgt_len)``) forms exactly the
    benchmark's batches: the loop does the data pipeline's real work (epoch plan, collate) on the same shapes."""
    import numpy as np

    from normlab.data.datasets import Ragged, TranslationDataset

    rng = np.random.default_rng(seed)
    n = w.batch * n_batches

    def ragged(length: int) -> Ragged:
        values = rng.integers(7, w.vocab, size=n * length, dtype=np.int64).astype(np.int32)
        return Ragged(values, np.arange(0, n * length + 1, length, dtype=np.int64))

    text = Ragged.from_texts(["x"] * n)
    return TranslationDataset(ragged(w.src_len - 1), ragged(w.tgt_len - 1), text, text)


def run_real_loop(
    placement: str, dname: str, w: Workload, device, args, bare: Entry | None = None
) -> dict[str, float]:
    """Train ``warmup + updates + 1`` updates with normlab's Trainer. An update's time is the interval between
    consecutive train records written to metrics.jsonl (everything the loop does in between). With ``bare``
    (the same model's bare-step entry), one bare update runs right after each logged update, outside the
    intervals, so that loop and bare step are paired under the same load and their gap is not a load drift."""
    import tempfile

    from normlab.config import DataConfig, ScheduleConfig
    from normlab.train.trainer import Trainer

    n_updates = args.warmup + args.updates + 1
    cfg = TrainConfig(
        model=w.model_config(placement), data=DataConfig(max_tokens=w.batch * max(w.src_len, w.tgt_len)),
        optim=OptimConfig(), schedule=ScheduleConfig(warmup_updates=n_updates), max_epochs=1,
        max_updates=n_updates, label_smoothing=w.epsilon, precision="fp32" if dname == "fp32" else "bf16",
        device=device.type, keep_last=1, log_every=1,
    )  # fmt: skip
    data = synthetic_translation_data(w, n_updates + 1)
    batch = make_batch(w, device)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    loop_times: list[float] = []
    bare_times: list[float] = []
    trainer_rates: list[float] = []
    last = [0.0]
    # the allocator tuned as `normlab train` does on the CPU (normlab/train/run.py), for the loop only: the bare
    # steps keep what --malloc says
    tuned = kept_pages() if device.type == "cpu" else contextlib.nullcontext()
    with tuned, tempfile.TemporaryDirectory(prefix="normlab-bench-") as tmp:
        trainer = Trainer(cfg, tmp, data, None, quiet=True)
        log = trainer._log

        def timed_log(record):
            log(record)
            if record.get("type") != "train":
                return
            synchronize(device)
            now = clock()
            if record["update"] > 1:
                loop_times.append(now - last[0])
            trainer_rates.append(record["tokens_per_s"])
            assert record["tokens"] == w.tokens, (record["tokens"], w.tokens)
            if bare is not None:
                t0 = clock()
                update(bare, batch, DTYPES[dname], device)
                synchronize(device)
                bare_times.append(clock() - t0)
            last[0] = clock()

        trainer._log = timed_log
        summary = trainer.fit()
    if summary["status"] != "completed":
        raise RuntimeError(f"real loop {placement}: {summary['status']}")
    loop_times = loop_times[args.warmup :]
    out = {"median": statistics.median(loop_times), "min": min(loop_times), "max": max(loop_times),
           "trainer_tokens_per_s": statistics.median(trainer_rates[args.warmup + 1 :])}  # fmt: skip
    if bare is not None:
        bare_times = bare_times[args.warmup + 1 :]  # the bare update after record k pairs with interval k
        out["bare_median"] = statistics.median(bare_times)
        out["paired_gap"] = statistics.median(1 - tb / tl for tb, tl in zip(bare_times, loop_times))
    return out


def report_real_loop(results: dict[tuple[str, str], dict[str, float]], w: Workload) -> None:
    if not results:
        return
    print("\n## normlab's Trainer on the same workload: synthetic pairs through its data pipeline (epoch plan, "
          "collate), metrics.jsonl + TensorBoard logging, gradient norm, learning-rate schedule; on the CPU with "
          f"the allocator tuned as `normlab train` does (here {allocator.running()}; `normlab train` preloads "
          "jemalloc where the machine has it). After each logged update one bare update of the same model runs "
          "(outside the loop's intervals), so that both see the same load: the figure users see")  # fmt: skip
    print(f"{'model':18s} {'dtype':5s} {'loop tokens/s':>13s} {'ms/update (min-max)':>24s} {'bare tokens/s':>13s} "
          f"{'gap':>6s} {'trainer log':>12s}")  # fmt: skip
    for (placement, dname), r in results.items():
        loop_tps = w.tokens / r["median"]
        bare_tps = w.tokens / r["bare_median"] if "bare_median" in r else float("nan")
        span = f"{r['median'] * 1e3:8.0f} ({r['min'] * 1e3:.0f}-{r['max'] * 1e3:.0f})"
        gap = r.get("paired_gap", float("nan"))
        print(f"normlab-{placement:10s} {dname:5s} {loop_tps:13,.0f} {span:>24s} {bare_tps:13,.0f} {gap:6.1%} "
              f"{r['trainer_tokens_per_s']:12,.0f}")  # fmt: skip
    print("(gap: median over updates of 1 - bare time / loop time, paired; 'trainer log' is the tokens_per_s "
          "the Trainer itself logs, which times collate + step but not logging)")


def build_parser() -> argparse.ArgumentParser:
    """The command line (tests/test_readme.py parses the README's benchmark lines with it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="2+2 layers, 1,024 target tokens, 1+3 updates (< 2 min)")
    ap.add_argument("--shape", default="paper", choices=sorted(SHAPES),
                    help="paper: the paper's IWSLT model, 4,096 target tokens; quick: the model `normlab reproduce "
                    "--scale quick` trains (6-6, d=256, FFN 512, 8k vocabulary, 2,048 target tokens), by default "
                    "on 1 thread with the allocator tuned, as reproduce runs it")
    ap.add_argument("--normlab-attention", default="auto", choices=["auto", *ATTENTION_IMPLS],
                    help="normlab's attention kernel (default auto: measured at the start, as the Trainer does)")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timing, profile N updates of each normlab model (torch.profiler) and print its "
                    "top operators by self CPU time, with their share of the update")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated; normlab-<placement>[:k=v,...]")
    ap.add_argument("--dtypes", default="fp32,bf16", help="comma-separated: fp32, bf16 (autocast)")
    ap.add_argument("--force-dtypes", action="store_true", help="run bf16 even where its matmuls are slow")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up updates per model (default 2; quick 1)")
    ap.add_argument("--updates", type=int, default=None, help="timed updates per model (default 6; quick 3)")
    ap.add_argument("--layers", type=int, default=None, help="encoder and decoder layers (default 6; quick 2)")
    ap.add_argument("--batch", type=int, default=None, help="sentence pairs per update (default 128; quick 32)")
    ap.add_argument("--normlab-loss", default=TrainConfig().loss_impl, choices=LOSS_IMPLS,
                    help="normlab's loss implementation (default: the Trainer's, TrainConfig.loss_impl)")
    ap.add_argument("--normlab-adam", default="trainer", choices=["trainer", "fused", "foreach", "loop", "default"],
                    help="normlab's Adam (default: the one the Trainer builds, normlab.train.optim)")
    ap.add_argument("--peer-adam", default="default", choices=["fused", "foreach", "loop", "default"])
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    ap.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                    help="wall: elapsed time; cpu: the main thread's CPU time with 1 thread, which other "
                    "processes on a shared machine barely disturb (tokens per CPU-second)")
    ap.add_argument("--malloc", default="default", choices=["default", "tuned"],
                    help="tuned: the allocator keeps freed memory (normlab.train.throughput.tune_malloc: glibc or jemalloc), "
                    "for every model")
    ap.add_argument("--no-memory", action="store_true", help="skip the (untimed) peak-memory update")
    ap.add_argument("--real-loop", action=argparse.BooleanOptionalAction, default=True,
                    help="also run normlab-post/pre through the Trainer's real loop and print the gap (default on)")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    shape = SHAPES[args.shape]
    if args.shape == "quick":  # as reproduce runs it: one thread per job, allocator tuned, oneDNN's cache capped
        args.threads = 1 if args.threads is None else args.threads
        args.malloc = "tuned"
        limit_onednn_cache()  # before the first matmul (normlab/train/run.py does the same)

    if args.clock == "cpu":
        if args.device == "cuda" or (args.device is None and torch.cuda.is_available()):
            raise SystemExit("--clock cpu measures CPU work; it is meaningless for a CUDA run")
        if args.threads not in (None, 1):
            raise SystemExit("--clock cpu needs --threads 1: the CPU time of other threads is not counted")
        args.threads = 1
    if args.threads:
        torch.set_num_threads(args.threads)
    # the allocator this process runs on: the C library's unless one is preloaded (`normlab train` preloads
    # jemalloc where the machine has it, normlab.allocator; LD_PRELOAD=... runs this benchmark on it)
    malloc_note = f"{allocator.running()}, default"
    if args.malloc == "tuned":
        tuned = "glibc: mmap off, no trim" if allocator.running() == "system" else "decay off"
        malloc_note = (f"{allocator.running()}, tuned ({tuned})" if tune_malloc()
                       else f"{allocator.running()}: no tuning available")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    quick = args.quick
    w = Workload(**{**shape, "layers": args.layers or (2 if quick else shape["layers"]),
                    "batch": args.batch or (shape["batch"] // 4 if quick else shape["batch"])})
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 2)
    args.updates = args.updates if args.updates is not None else (3 if quick else 6)
    t_start = time.perf_counter()

    cpu = cpu_name()
    print(f"# train_throughput: torch {torch.__version__}, device {device}"
          f"{' (' + torch.cuda.get_device_name(device) + ')' if device.type == 'cuda' else ''}, "
          f"{torch.get_num_threads()} threads, {os.cpu_count()} cores, CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()} ({cpu}), python {platform.python_version()}")  # fmt: skip
    print(f"# workload: {w.layers}+{w.layers} layers, d={w.d_model}, FFN {w.d_ffn}, {w.heads} heads, vocab "
          f"{w.vocab:,}; {w.batch} pairs x {w.src_len}/{w.tgt_len} tokens = {w.tokens:,} target tokens per update; "
          f"dropout {w.dropout}, label smoothing {w.epsilon}; {args.warmup} warm-up + {args.updates} timed "
          f"updates per model, alternating; load average {os.getloadavg()[0]:.1f} at start")  # fmt: skip
    print(f"# clock: {'main-thread CPU time (1 thread)' if args.clock == 'cpu' else 'wall'}; malloc: {malloc_note}")
    queued, synced = launch_overhead(device)
    print(f"# an empty operator: {queued:.1f} us queued back to back, {synced:.1f} us with a synchronize after each"
          + (f" (CUDA_LAUNCH_BLOCKING={os.environ.get('CUDA_LAUNCH_BLOCKING', 'unset')})" if device.type == "cuda"
             else ""))  # fmt: skip
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if device.type == "cpu" and args.clock == "wall" and load > 0.5 * cores:
        print(f"# WARNING: load average {load:.1f} on {cores} cores: other processes share this CPU. With more "
              f"than one thread every OpenMP parallel region waits for a descheduled thread, which slows models "
              f"with many small operators most; --clock cpu gives the robust comparison.")  # fmt: skip

    flops = seq2seq_update_flops(w.model_config("post"), w.batch, w.src_len, w.tgt_len)
    peaks = {}
    for dname in args.dtypes.split(","):
        if dname not in DTYPES:
            raise SystemExit(f"unknown dtype {dname!r}; expected one of {sorted(DTYPES)}")
        clock = time.thread_time if args.clock == "cpu" else time.perf_counter
        peaks[dname] = matmul_peak_flops(DTYPES[dname], device, clock=clock)
        print(f"# matmul peak {dname}: {peaks[dname] / 1e9:.1f} GFLOP/s")
    dtypes = []
    for dname, peak in peaks.items():
        if dname != "fp32" and "fp32" in peaks and peak < 0.25 * peaks["fp32"] and not args.force_dtypes:
            print(f"# {dname}: SKIPPED: its matmuls run at {peak / 1e9:.1f} GFLOP/s here, "
                  f"{peaks['fp32'] / peak:.0f}x slower than fp32 (no native {dname} on this "
                  f"{torch.backends.cpu.get_cpu_capability()} CPU); one update would take about "
                  f"{flops / peak / 60:.0f} min per model. --force-dtypes runs it anyway.")  # fmt: skip
            continue
        dtypes.append(dname)

    entries = []
    for name in args.models.split(","):
        torch.manual_seed(0)
        e = build(name.strip(), w, device, args)
        if e is not None:
            entries.append(e)
            n = sum(p.numel() for p in e.model.parameters())
            print(f"# built {e.name}: {n / 1e6:.1f}M parameters" + (f" ({e.note})" if e.note else ""))
    if not entries:
        print("nothing to measure")
        return 1
    for dname in dtypes:
        round_peaks = run_dtype(entries, dname, w, device, args)
        peaks[dname] = statistics.median(round_peaks + [peaks[dname]])
    loops: dict[tuple[str, str], dict[str, float]] = {}
    if args.real_loop:
        for dname in dtypes:
            for e in entries:
                if e.name in ("normlab-post", "normlab-pre", "normlab-peri") and dname in e.dtypes:
                    placement = e.name.removeprefix("normlab-")
                    loops[placement, dname] = run_real_loop(placement, dname, w, device, args, bare=e)
                    print(f"#   real loop normlab-{placement} {dname} done, load average {os.getloadavg()[0]:.1f}",
                          flush=True)  # fmt: skip
    for dname in dtypes:
        report(entries, dname, w, flops, peaks[dname])
    report_real_loop(loops, w)
    if args.profile:
        for dname in dtypes:
            for e in entries:
                if e.name.startswith("normlab-") and dname in e.dtypes:
                    profile_updates(e, dname, w, device, args.profile, flops, peaks[dname])
    print(f"\n# peers' Adam: {args.peer_adam}; memory: "
          f"{'torch.cuda.max_memory_allocated' if device.type == 'cuda' else 'peak live tensor storage (PeakMemory)'}; "
          f"load average {os.getloadavg()[0]:.1f} at the end; {time.perf_counter() - t_start:.0f} s in all")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
