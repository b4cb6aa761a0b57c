"""Device and precision: the one place that decides where a model runs and in which dtype (a leaf module:
it imports nothing of normlab but the config error).

* :func:`pick_device` turns ``auto`` / ``cpu`` / ``cuda`` (and a torchrun local rank) into a ``torch.device``;
* :func:`autocast_dtype` turns a run's ``precision`` (``auto`` / ``bf16`` / ``fp32``) into the autocast dtype
  (None: fp32, no autocast);
* :func:`autocast` is the one autocast context of the package (training, evaluation, decoding, analysis and
  the budget probe all use it): a no-op for None / ``float32``;
* :func:`attention_upcast` says whether attention on bf16/fp16 inputs runs in fp32 (CPUs whose bf16 attention
  kernel is slower than the fp32 one);
* :func:`cpu_name` names the CPU (what a run's summary and a report record of the machine that trained it).
"""

from __future__ import annotations

import contextlib
import functools
import platform

import torch

from normlab.config import ConfigError

__all__ = ["cpu_name", "describe_cpuinfo", "machine_text", "same_cpu", "pick_device", "autocast_dtype", "autocast",
           "attention_upcast", "compute_dtype", "LOW_PRECISION"]


@functools.lru_cache(maxsize=1)
def cpu_name() -> str:
    """The CPU in words: Linux's /proc/cpuinfo ``model name`` (platform.processor() is empty there) with its family,
    model and widest matmul instruction set, e.g. ``AMD EPYC (family 26, model 2; AVX-512 BF16)``; else
    platform.processor(), else the architecture. Read once per process.

    Why more than the model name: cloud VMs report bare names (``AMD EPYC``) for CPUs whose training speed differs
    several-fold (AVX2 only, AVX-512 BF16 on Zen 4 and Zen 5, AMX on Intel), and the name is what a report says of
    the machine that trained each run (experiments/results.machine_of). The family and model tell AMD's
    generations apart (family 25: Zen 3 and Zen 4; 26: Zen 5); the instruction set says whether bf16 is native."""
    return describe_cpuinfo(_cpuinfo()) or platform.processor() or platform.machine() or "unknown CPU"


def _cpuinfo() -> str:
    """Linux's /proc/cpuinfo, or "" elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def same_cpu(before: str, now: str) -> bool:
    """Whether two :func:`cpu_name` values can name one CPU: equal, or ``before`` the bare model name an older
    normlab recorded (``AMD EPYC``) and ``now`` the same with its family, model and instruction set added. Only
    consistent, not proof: a bare name covers several generations (Zen 4 and Zen 5 alike)."""
    return before == now or now.startswith(before + " (")


def machine_text() -> str:
    """This machine in full, for a run's copy that outlives it (``cpu.txt`` beside a committed run's small files):
    ``lscpu``'s output (model, family, caches, every flag) where it exists, else /proc/cpuinfo's first processor,
    else :func:`cpu_name`; and the GPU's name when CUDA is there."""
    import os
    import shutil
    import subprocess

    text = ""
    if lscpu := shutil.which("lscpu"):
        try:
            text = subprocess.run([lscpu], capture_output=True, text=True, timeout=30,
                                  env=dict(os.environ, LC_ALL="C")).stdout  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            text = ""
    if not text:
        text = (_cpuinfo().split("\n\n")[0] or cpu_name()) + "\n"
    if torch.cuda.is_available():
        text += f"GPU: {torch.cuda.get_device_name(0)} (x{torch.cuda.device_count()})\n"
    return text


# The widest matrix instruction set first: the one that sets a CPU's bf16 and fp32 matmul rates (README, "The
# quick scale's update"); /proc/cpuinfo's flag names.
_ISA = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX-512 BF16"), ("avx512f", "AVX-512"), ("avx2", "AVX2"),
        ("sve", "SVE"), ("asimd", "NEON"))


def describe_cpuinfo(text: str) -> str:
    """:func:`cpu_name` from the text of /proc/cpuinfo (its first processor's block) or of ``lscpu`` (a committed
    run's ``cpu.txt``: the same fields, capitalised); "" when it names no model."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough: a VM's vCPUs are one model
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), " ".join(value.split()))
    name = fields.get("model name", "")
    if not name:
        return ""
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    isa = next((label for flag, label in _ISA if flag in flags), "")
    ids = [f"{k} {fields[c]}" for k, c in (("family", "cpu family"), ("model", "model")) if fields.get(c)]
    detail = "; ".join(x for x in (", ".join(ids), isa) if x)
    return f"{name} ({detail})" if detail else name


def pick_device(preference: str = "auto", local_rank: int = 0) -> torch.device:
    """``auto``: CUDA when present, else the CPU; the code path is the same."""
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise ConfigError("device 'cuda' requested but CUDA is not available")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def autocast_dtype(precision: str, device: torch.device) -> torch.dtype | None:
    """bf16 where the hardware runs it natively, fp32 (None) otherwise or on request."""
    if precision == "fp32":
        return None
    if device.type == "cuda":
        supported = torch.cuda.is_bf16_supported()
    else:
        # Without AVX-512 BF16 or AMX, bf16 matmuls are emulated on the CPU and slower than fp32.
        supported = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    if precision == "bf16" and not supported and device.type == "cuda":
        raise ConfigError(f"precision 'bf16' requested but {torch.cuda.get_device_name(device)} does not support it")
    if precision == "bf16":
        return torch.bfloat16  # on a CPU without native bf16 it runs, slowly: the user asked for it
    return torch.bfloat16 if supported else None


def autocast(device: torch.device | str, dtype: torch.dtype | str | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` in ``dtype`` on ``device``'s type; a no-op for None or float32 (autocast would
    leave an fp32 model as it is anyway, the no-op costs nothing)."""
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    if dtype is None or dtype == torch.float32:
        return contextlib.nullcontext()
    kind = device if isinstance(device, str) else device.type
    return torch.autocast(kind, dtype=dtype)


# PyTorch's CPU flash-attention kernel in bf16 is slower than in fp32 on a CPU with AVX-512 BF16 but no AMX:
# forward + backward of (42, 4, 24, 16) q/k/v, the sweep's d=64 shape, 12.0 ms in bf16 against 2.3 ms for the
# same call on fp32 copies (1.2 ms in fp32 throughout); (16, 8, 64, 64): 27.7 ms against 11.3 ms (AMD EPYC
# Zen 4, torch 2.13, 1 thread): 2.5-5x. On an x86 CPU without AVX-512 BF16 bf16 is emulated (autocast runs it
# only on request), and the fp32 kernel is native there: upcast too (reasoned, not measured). Attention is a
# small share of an update's FLOPs at these sequence lengths (4 n^2 d against 8 n d^2 + 4 n d d_ffn per layer),
# so running it in fp32 costs little, and it keeps the softmax's precision. AMX CPUs, non-x86 CPUs (neither
# measured) and CUDA keep the native kernel.
_CPU_UPCAST = platform.machine().lower() in ("x86_64", "amd64") and not torch.cpu._is_amx_tile_supported()
LOW_PRECISION = (torch.bfloat16, torch.float16)


def attention_upcast(*xs: torch.Tensor) -> torch.dtype | None:
    """The low-precision dtype (bf16/fp16) attention on ``xs`` (q, k, v) would run in, when it should run in
    fp32 instead (an x86 CPU without AMX); None otherwise. Any of the three counts: a norm with an fp32
    parameter (DyT's qk-norm) leaves q and k in fp32 and v in bf16, which autocast would send to the bf16
    kernel."""
    if not _CPU_UPCAST or xs[0].device.type != "cpu":
        return None
    return next((x.dtype for x in xs if x.dtype in LOW_PRECISION), None)


def compute_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype a matmul on ``x`` computes in here: the autocast dtype when autocast is on for x's device, else
    x's own (the chunked loss head and the matmul attention kernel run their products in it explicitly)."""
    dev = x.device.type
    if torch.amp.is_autocast_available(dev) and torch.is_autocast_enabled(dev):
        return torch.get_autocast_dtype(dev)
    return x.dtype
