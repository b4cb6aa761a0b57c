"""Shared fixtures. Tests run on the CPU with few threads so that the suite stays fast on 2 cores."""

from __future__ import annotations

import os

# Tiny models spend their time in thread hand-offs, not arithmetic: one thread is several times faster on a
# 2-core machine (and far faster when the cores are shared). Set before torch is imported so that the
# subprocesses of the end-to-end tests inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


def tiny_config(**overrides):
    """The HF-style tiny config of the test tiers: hidden 32, 2 layers."""
    from normlab.config import ModelConfig

    base = dict(
        d_model=32, n_heads=4, d_ffn=64, encoder_layers=2, decoder_layers=2, vocab_size=50,
        dropout=0.0, max_positions=64,
    )  # fmt: skip
    base.update(overrides)
    return ModelConfig(**base)


@pytest.fixture
def tiny():
    return tiny_config


PLACEMENTS = ["post", "pre", "peri"]
