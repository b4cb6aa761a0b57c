"""How much memory a model needs, estimated from its configuration before anything is allocated (issue 36).

``--set model.encoder_layers=10**9`` grew memory at 130 MB/s until the kernel killed something (possibly another
job's process), and ``d_model=1048576`` was killed by the OOM killer at 13 GB with no word first. The estimate is
deliberately a floor (it leaves out the allocator's slack, attention's score matrices and kernels' workspaces):
a configuration refused by it cannot fit, so a refusal is never wrong, while one that passes may still be
close to the limit.

Training holds, per parameter, the fp32 weight, its gradient and Adam's two moments: 16 bytes. The activations
kept for the backward pass of one batch of ``max_tokens`` tokens are at least, per token and layer, the residual
stream, the attention's q, k, v and output and the FFN's two sides (about 10 d + 2 d_ffn numbers), and the
logits with their gradient (2 V).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from normlab.config import ConfigError, ModelConfig

__all__ = ["parameters", "training_bytes", "machine_bytes", "check_fits"]

GB = 1e9


def parameters(cfg: ModelConfig, task: str) -> int:
    """A floor of the model's parameter count: the layers' weight matrices (attention 4 d^2, cross-attention
    4 d^2 more, FFN 2 d d_ffn) and one embedding of the vocabulary; biases, norms, position tables and an untied
    output projection are left out (tests/test_faults.py checks it against built models)."""
    d, f = cfg.d_model, cfg.d_ffn
    # the decoder-only language model's stack has the encoder's layer shape and the decoder's depth
    encoder = (cfg.decoder_layers if task == "lm" else cfg.encoder_layers) * (4 * d * d + 2 * d * f)
    decoder = cfg.decoder_layers * (8 * d * d + 2 * d * f) if task == "translation" else 0
    return cfg.vocab_size * d + encoder + decoder


def training_bytes(cfg: ModelConfig, task: str, max_tokens: int) -> tuple[int, int]:
    """(parameter state, activations) bytes of training ``cfg`` on batches of ``max_tokens`` tokens."""
    layers = cfg.decoder_layers if task == "lm" else cfg.encoder_layers + (cfg.decoder_layers if task == "translation" else 0)
    activations = 4 * max_tokens * (layers * (10 * cfg.d_model + 2 * cfg.d_ffn) + 2 * cfg.vocab_size)
    return 16 * parameters(cfg, task), activations


def machine_bytes(device: torch.device) -> int:
    """The memory of ``device``: a GPU's own, else the machine's RAM or the cgroup's limit when lower."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit.isdigit():
            total = min(total, int(limit))
    except OSError:
        pass
    return total


def check_fits(cfg: ModelConfig, task: str, max_tokens: int, device: torch.device) -> None:
    """A one-line :class:`ConfigError` when training ``cfg`` cannot fit in ``device``'s memory."""
    state, activations = training_bytes(cfg, task, max_tokens)
    have = machine_bytes(device)
    if state + activations > have:
        raise ConfigError(
            f"TrainConfig.model: training needs at least {(state + activations) / GB:.3g} GB ({parameters(cfg, task):.3g} "
            f"parameters x 16 bytes for weights, gradients and Adam's moments, {state / GB:.3g} GB; activations of a "
            f"{max_tokens}-token batch, {activations / GB:.3g} GB), more than the {have / GB:.3g} GB of this "
            f"machine ({device.type}); choose a smaller model or data.max_tokens"
        )
