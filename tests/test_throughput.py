"""Speed-related code: the analytic FLOP count, the CPU peak-memory tracker, the CPU dropout, bf16 training,
and a tiny end-to-end run of benchmarks/train_throughput.py (so that the benchmark cannot rot)."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from normlab.model import Dropout, Seq2Seq
from normlab.train.losses import translation_loss
from normlab.train.throughput import PeakMemory, seq2seq_update_flops
from tests.conftest import require_reference, tiny_config

ROOT = Path(__file__).resolve().parents[1]


def test_update_flops_match_torch_flop_counter():
    # (the plain path: FlopCounterMode does not count the in-place addmm_ the chunked loss accumulates with)
    impl = "plain"
    cfg = tiny_config(vocab_size=64)
    model = Seq2Seq(cfg)
    B, S, T = 3, 7, 5
    src = torch.randint(1, 64, (B, S))
    tgt = torch.randint(1, 64, (B, T))
    counter = FlopCounterMode(display=False)
    # the math backend spells attention as two batched matmuls, which the counter sees on any device
    with sdpa_kernel(SDPBackend.MATH), counter:
        loss, _ = translation_loss(model, src, tgt, tgt, impl=impl)
        loss.backward()
    counted = counter.get_total_flops()
    expected = seq2seq_update_flops(cfg, B, S, T)
    assert abs(counted - expected) <= 0.01 * expected, (counted, expected)


def test_update_flops_of_the_paper_workload():
    # the figure: one update of the IWSLT model on 128 x 32 tokens is about 0.91 TFLOP
    from normlab.config import ModelConfig

    assert seq2seq_update_flops(ModelConfig(), 128, 32, 32) == pytest.approx(0.913e12, rel=0.005)


def test_peak_memory_counts_storages_once_and_frees():
    resident = torch.zeros(1000)  # 4,000 bytes present before the block
    with PeakMemory("cpu", resident=[resident]) as pm:
        a = torch.ones(250)  # 1,000 bytes
        view = a[10:]  # a view: no new storage
        b = a * 2  # 1,000 bytes, peak 6,000
        del a, view, b  # freed
        c = torch.empty(100)  # 400 bytes: current 4,400, peak unchanged
    assert pm.peak == 6000
    assert pm.current == 4400
    del c


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_tune_malloc_in_a_fresh_process():
    # process-wide, so not in the test process itself
    code = "from normlab.train.throughput import tune_malloc; import torch; print(tune_malloc()); torch.ones(1 << 24)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]


def test_mask_dropout_statistics_and_gradient():
    torch.manual_seed(0)
    drop = Dropout(0.25).train()
    x = torch.randn(400, 500, requires_grad=True)
    y = drop(x)
    kept = y != 0
    assert abs(1 - kept.float().mean().item() - 0.25) < 0.005  # 200k draws: sd of the rate is 0.001
    torch.testing.assert_close(y[kept], x[kept] / 0.75)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, kept.float() / 0.75)
    assert drop.eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    xb = torch.randn(1000, 100, dtype=torch.bfloat16)
    yb = Dropout(0.5).train()(xb)
    assert yb.dtype == torch.bfloat16 and abs((yb == 0).float().mean().item() - 0.5) < 0.01
    torch.manual_seed(3)
    first = drop.train()(x)
    torch.manual_seed(3)
    torch.testing.assert_close(drop(x), first)  # seeded: reproducible


def test_mask_dropout_keeps_the_expectation_and_its_edge_probabilities():
    """The mask drops with p' = round(p 2^15) / 2^15 and scales the kept elements by 1 / (1 - p'), so that the
    expectation is exactly preserved; p' = 1 gives zeros (as F.dropout does), p' = 0 keeps everything."""
    from normlab.model import _drop_threshold, _keep_mask

    torch.manual_seed(0)
    p = 0.1
    t = _drop_threshold(p)
    assert t == 3277  # 0.1 * 32768 = 3276.8
    keep = _keep_mask(torch.Size([4_000_000]), p, torch.device("cpu"))
    rate = keep.float().mean().item()
    assert abs(rate - (1 - t / 2**15)) < 5 * math.sqrt(0.09 / 4e6), rate  # 5 sd of a binomial rate
    x = torch.ones(1000, 100)
    y = Dropout(p).train()(x)
    torch.testing.assert_close(y[y != 0], torch.full_like(y[y != 0], 2**15 / (2**15 - t)), rtol=0, atol=0)
    assert torch.equal(Dropout(1 - 2**-17).train()(x), torch.zeros_like(x))  # p' = 1
    assert torch.equal(Dropout(2**-17).train()(x), x)  # p' = 0: scale 1, nothing dropped


def _train(autocast: bool, steps: int = 40) -> list[float]:
    torch.manual_seed(0)
    cfg = tiny_config(dropout=0.0)
    model = Seq2Seq(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.9, 0.98))
    g = torch.Generator().manual_seed(1)
    perm = torch.randperm(50, generator=g)
    losses = []
    for _ in range(steps):
        src = torch.randint(7, 50, (8, 6), generator=g)
        tgt_in = torch.randint(7, 50, (8, 6), generator=g)
        tgt_out = perm[tgt_in]  # a task a tiny model learns in a few dozen steps: a fixed token mapping
        tgt_out[tgt_out == 0] = 1  # never the padding id
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss, nll = translation_loss(model, src, tgt_in, tgt_out)
        opt.zero_grad(set_to_none=True)
        (loss / tgt_out.numel()).backward()
        opt.step()
        losses.append(nll.item() / tgt_out.numel())
    return losses


def test_bf16_training_reaches_the_fp32_loss():
    # Stated tolerance: after 40 Adam steps the mean NLL of the last 5 steps (nats per token) differs by less
    # than 0.15 between bf16 autocast and fp32, from the same initialisation and data; both must have learnt
    # (from ln 50 = 3.9 to below 1.5), so the comparison is between trained models, not two untrained ones.
    fp32, bf16 = _train(False), _train(True)
    tail = lambda xs: sum(xs[-5:]) / 5  # noqa: E731
    assert tail(fp32) < 1.5 and tail(bf16) < 1.5, (tail(fp32), tail(bf16))
    assert abs(tail(bf16) - tail(fp32)) < 0.15, (tail(fp32), tail(bf16))


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("train_throughput", ROOT / "benchmarks" / "train_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["train_throughput"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _tiny_benchmark(monkeypatch):
    """The benchmark module, a one-layer workload, its arguments and the CPU, for the end-to-end tests."""
    bench = _benchmark_module()
    monkeypatch.setattr(bench, "tune_malloc", lambda: False)  # process-wide: not in the test process
    monkeypatch.setattr(bench, "kept_pages", contextlib.nullcontext)  # glibc's dynamic mmap threshold: for good
    w = bench.Workload(layers=1, batch=2, src_len=6, tgt_len=5, d_model=32, d_ffn=64, heads=4, vocab=60)
    args = argparse.Namespace(
        normlab_loss="chunked", normlab_adam="trainer", peer_adam="default", warmup=1, updates=2,
        clock="wall", no_memory=False,
    )  # fmt: skip
    return bench, w, args, torch.device("cpu")


def test_benchmark_runs_end_to_end_at_tiny_size(capsys, monkeypatch):
    bench, w, args, device = _tiny_benchmark(monkeypatch)
    # every peer is built, none dropped: the benchmark prints and skips a peer it cannot import, so an absent
    # one is a reported skip here (a failure under `make test`) instead (x-transformers: the test below)
    require_reference("transformers", "pip install -e '.[hf]' (the hf-mbart and hf-marian peers)")
    names = ["normlab-post", "normlab-pre:loss=plain,adam=foreach", "torch.nn", "hf-mbart", "hf-marian"]
    entries = [bench.build(n, w, device, args) for n in names]
    assert [e.name for e in entries] == names
    assert len(bench.run_dtype(entries, "fp32", w, device, args)) == 2  # one matmul peak per timed round
    flops = seq2seq_update_flops(w.model_config("post"), w.batch, w.src_len, w.tgt_len)
    bench.report(entries, "fp32", w, flops, peak_flops=1e10)
    out = capsys.readouterr().out
    assert "normlab-post" in out and "ratio normlab / peer" in out and "torch.nn" in out
    for e in entries:
        assert len(e.times["fp32"]) == 2 and e.peak["fp32"] > 0
    with pytest.raises(SystemExit, match="unknown option"):
        bench.build("normlab-post:speed=11", w, device, args)
    # the same workload through the Trainer: every update has exactly the benchmark's target tokens
    loop = bench.run_real_loop("post", "fp32", w, device, args, bare=entries[0])
    assert loop["median"] > 0 and loop["trainer_tokens_per_s"] > 0 and loop["bare_median"] > 0
    assert len(entries[0].times["fp32"]) == 2, "the paired bare updates are not the alternating run's"
    bench.report_real_loop({("post", "fp32"): loop}, w)
    assert "gap" in capsys.readouterr().out



def test_benchmark_times_an_empty_operator_and_profiles_an_update(capsys, monkeypatch):
    """The launch-overhead line (an operator that does no work, queued and synchronized) and --profile's table,
    on the CPU: what a GPU session runs first to tell a launch-bound step from a compute-bound one."""
    bench, w, args, device = _tiny_benchmark(monkeypatch)
    queued, synced = bench.launch_overhead(device, n=50, synced=10)
    assert 0 < queued < 1e4 and 0 < synced < 1e4  # microseconds: an add_ of one element
    e = bench.build("normlab-post", w, device, args)
    flops = seq2seq_update_flops(w.model_config("post"), w.batch, w.src_len, w.tgt_len)
    bench.profile_updates(e, "fp32", w, device, 2, flops, 1e10)
    out = capsys.readouterr().out
    assert "## profile: normlab-post fp32, 2 updates (CPU self time" in out and "calls/update" in out
    # the device totals of a CUDA profile, on made-up events: kernels and copies count, an operator's own device
    # time (its kernels' again) and user annotations do not
    from types import SimpleNamespace as E

    from torch.autograd import DeviceType

    events = [E(device_type=DeviceType.CPU, is_user_annotation=False, self_device_time_total=90.0, count=3),
              E(device_type=DeviceType.CUDA, is_user_annotation=False, self_device_time_total=60.0, count=2),
              E(device_type=DeviceType.CUDA, is_user_annotation=False, self_device_time_total=30.0, count=1),
              E(device_type=DeviceType.CUDA, is_user_annotation=True, self_device_time_total=500.0, count=1)]
    assert bench.device_totals(events) == (90.0, 3)

def test_benchmark_measures_the_x_transformers_peer(monkeypatch):
    """The x-transformers peer of the benchmark, built and timed; absent, a reported skip (make test installs it
    and fails without it), never a peer dropped in silence."""
    require_reference("x_transformers", "make install-ref (x-transformers, the benchmark's peer)")
    bench, w, args, device = _tiny_benchmark(monkeypatch)
    entries = [bench.build(n, w, device, args) for n in ("normlab-post", "x-transformers")]
    assert [e.name for e in entries] == ["normlab-post", "x-transformers"]
    bench.run_dtype(entries, "fp32", w, device, args)
    assert len(entries[1].times["fp32"]) == 2 and entries[1].peak["fp32"] > 0


@pytest.mark.slow
def test_grid_memory_benchmark_at_the_smoke_scale(tmp_path):
    """benchmarks/grid_memory.py end to end: one smoke run trained by a grid worker and alone, both peaks read from
    the kernel (VmHWM reset at the run's start; wait4's ru_maxrss), the ratio their quotient."""
    import re

    proc = subprocess.run([sys.executable, "benchmarks/grid_memory.py", "--scale", "smoke", "--updates", "3",
                           "--runs", "1", "--out", str(tmp_path / "gm")], capture_output=True, text=True,
                          cwd=Path(__file__).parents[1], timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "## peak resident memory, GB (1 worker process" in proc.stdout
    rows = re.findall(r"^(\S+-s1)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", proc.stdout, re.MULTILINE)
    assert len(rows) == 1, proc.stdout
    alone, inside, ratio = map(float, rows[0][1:])
    assert 0.1 < alone < 4 and 0.1 < inside < 4  # a process that imported torch and trained, in GB
    assert ratio == pytest.approx(inside / alone, rel=1e-2)  # three numbers printed to 3 decimals
    assert (tmp_path / "gm" / "alone" / rows[0][0] / "summary.json").is_file()


def test_grid_memory_labels_each_sample_with_the_run_the_worker_trains(monkeypatch):
    """The grid's own start / resume / end lines (grid.py's formats) move the label of the samples: a run's peak is
    read from samples taken between its start and its end line only; the kernel's peak is reset at each start."""
    spec = importlib.util.spec_from_file_location("grid_memory", Path(__file__).parents[1] / "benchmarks" /
                                                  "grid_memory.py")  # fmt: skip
    gm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gm)
    rss = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    resets = []
    monkeypatch.setattr(gm, "_workers", lambda pid: [42])
    monkeypatch.setattr(gm, "_status", lambda pid: {"VmRSS": (r := next(rss)), "VmHWM": r})
    monkeypatch.setattr(gm, "_reset_peak", resets.append)
    s = gm.Sampler()
    s.sample()  # before the first run
    s.say("[  1/3] start  post-a-s1")
    s.sample()
    s.say("[  1/3] completed post-a-s1 (5 s; grid 0.1 min)")  # samples once more, as post-a-s1's
    s.sample()  # between the two runs
    s.say("[  2/3] resume post-b-s1")
    s.say("[  2/3] failed    post-b-s1 (3 s; grid 0.2 min): the worker process died")
    assert resets == [42, 42]
    assert [r for *_, r, _, _ in s.samples] == ["(before the first run)", "post-a-s1", "post-a-s1", "(after post-a-s1)",
                                                "post-b-s1"]  # fmt: skip
    assert s.peak("post-a-s1") == 3.0 and s.peak("post-b-s1") == 5.0 and math.isnan(s.peak("post-c-s1"))
