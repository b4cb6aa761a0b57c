"""Shared fixtures. Tests run on the CPU with few threads so that the suite stays fast on 2 cores."""

from __future__ import annotations

import os

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


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
