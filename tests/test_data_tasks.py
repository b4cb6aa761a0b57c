"""Masked-LM and sentence-pair examples: BERT's masking proportions, block packing, pair layout, truncation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import small_data_config

from normlab.data import CLS, MASK, PAD, SEP, ClassificationBatch, MLMBatch, prepare
from normlab.data.corpora import read_mono, read_pairs
from normlab.data.tasks import (
    block_bounds,
    join_with_separator,
    mask_tokens,
    pair_example,
    pair_lengths,
    random_bits,
    truncate_pair,
)
from normlab.data.tokenizer import NUM_SPECIAL

V = 1000


def test_masking_proportions_on_100k_tokens():
    """15% of non-special tokens selected; of those 80% [MASK], 10% a random non-special token, 10% kept.
    Tolerances are about 5 standard deviations of the binomial counts (a wrong rule is off by far more)."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(NUM_SPECIAL, V, size=(800, 128))
    tokens[:, 0], tokens[:, -1] = CLS, SEP  # special: never selected
    inputs, targets = mask_tokens(tokens, np.arange(800), seed=1, epoch=0, vocab_size=V)
    candidates = 800 * 126
    selected = targets != PAD
    assert abs(selected.sum() / candidates - 0.15) < 0.006
    assert not selected[:, 0].any() and not selected[:, -1].any()
    assert np.array_equal(targets[selected], tokens[selected]) and (targets[~selected] == PAD).all()
    assert np.array_equal(inputs[~selected], tokens[~selected])
    masked = inputs[selected] == MASK
    kept = inputs[selected] == tokens[selected]
    replaced = ~masked & ~kept
    n = selected.sum()
    assert abs(masked.sum() / n - 0.8) < 0.015
    assert abs(replaced.sum() / n - 0.1) < 0.011  # a random draw equal to the original (1 in 993) counts as kept
    assert abs(kept.sum() / n - 0.1) < 0.011
    assert (inputs[selected][replaced] >= NUM_SPECIAL).all() and (inputs[selected][replaced] < V).all()
    # the random replacements are spread over the vocabulary: ~1,500 uniform draws from 993 ids hit ~780 of them
    assert len(np.unique(inputs[selected][replaced])) > 700


def test_mask_prob_is_honoured():
    tokens = np.full((400, 256), 100)
    _, targets = mask_tokens(tokens, np.arange(400), seed=0, epoch=0, vocab_size=V, mask_prob=0.3)
    assert abs((targets != PAD).mean() - 0.3) < 0.01


def test_masking_is_a_function_of_seed_epoch_example_position():
    tokens = np.random.default_rng(1).integers(NUM_SPECIAL, V, size=(16, 64))
    ids = np.arange(100, 116)
    a = mask_tokens(tokens, ids, seed=3, epoch=1, vocab_size=V)
    assert all(np.array_equal(x, y) for x, y in zip(a, mask_tokens(tokens, ids, seed=3, epoch=1, vocab_size=V)))
    # the same example in another batch, at another row: masked the same
    sub = mask_tokens(tokens[5:9], ids[5:9], seed=3, epoch=1, vocab_size=V)
    assert np.array_equal(sub[0], a[0][5:9]) and np.array_equal(sub[1], a[1][5:9])
    # another epoch or seed: masked differently (dynamic masking)
    assert not np.array_equal(mask_tokens(tokens, ids, seed=3, epoch=2, vocab_size=V)[1], a[1])
    assert not np.array_equal(mask_tokens(tokens, ids, seed=4, epoch=1, vocab_size=V)[1], a[1])


def test_random_bits_are_uniform():
    bits = random_bits(np.uint64(12345), np.arange(200_000, dtype=np.uint64))
    u = (bits >> np.uint64(11)).astype(np.float64) / (1 << 53)
    hist = np.histogram(u, bins=20, range=(0, 1))[0]
    assert abs(u.mean() - 0.5) < 0.005 and hist.min() > 9_500 and hist.max() < 10_500


def test_blocks_pack_the_paragraphs(small_corpora, small_mlm):
    ds = small_mlm.splits["train"]
    tok = small_mlm.tokenizer
    paragraphs = read_mono(small_corpora["mono"] / "train.txt").text
    assert (ds.sizes[:-1] == 64).all() and 3 <= ds.sizes[-1] <= 64
    body = np.concatenate([ds.block(i)[1:-1] for i in range(len(ds))])
    assert all(ds.block(i)[0] == CLS and ds.block(i)[-1] == SEP for i in range(len(ds)))
    pieces = np.split(body, np.flatnonzero(body == SEP))  # paragraphs joined by [SEP]
    assert len(pieces) == len(paragraphs)
    assert tok.decode(pieces[0]) == paragraphs[0] and tok.decode(pieces[-1][1:]) == paragraphs[-1]


def test_join_and_bounds():
    stream = join_with_separator(np.array([10, 11, 12, 13, 14]), np.array([0, 2, 2 + 3]))
    assert stream.tolist() == [10, 11, SEP, 12, 13, 14]
    assert block_bounds(6, 4).tolist() == [0, 2, 4, 6]
    assert block_bounds(7, 4).tolist() == [0, 2, 4, 6, 7]


def test_mlm_batch(small_mlm):
    ds = small_mlm.splits["train"]
    ix = ds.epoch_batches(epoch=0, seed=0, max_tokens=1024)[0]
    b = ds.collate(ix, seed=0, epoch=0)
    assert isinstance(b, MLMBatch) and b.tokens.shape == (16, 64) and b.tokens.dtype == torch.long
    assert (b.segments == 0).all() and b.n_tokens == int((b.targets != PAD).sum()) > 0
    assert (b.tokens[:, 0] == CLS).all() and (b.targets[:, 0] == PAD).all()
    original = torch.from_numpy(np.stack([ds.block(i) for i in ix]))
    assert torch.equal(b.targets[b.targets != PAD], original[b.targets != PAD])


def _bert_truncate(la, lb, budget):
    """BERT's _truncate_seq_pair (run_classifier.py), literally."""
    while la + lb > budget:
        if la > lb:
            la -= 1
        else:
            lb -= 1
    return la, lb


def test_truncate_pair_matches_bert():
    for budget in range(2, 30):
        for la in range(1, 40):
            for lb in range(1, 40):
                ta, tb = truncate_pair(la, lb, budget)
                assert (int(ta), int(tb)) == _bert_truncate(la, lb, budget), (la, lb, budget)


def test_pair_layout_and_segments():
    a, b = np.array([10, 11, 12]), np.array([20, 21])
    tokens, segments = pair_example(a, b, max_len=128)
    assert tokens.tolist() == [CLS, 10, 11, 12, SEP, 20, 21, SEP]
    assert segments.tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    tokens, segments = pair_example(a, b, max_len=128, word=np.array([30]))
    assert tokens.tolist() == [CLS, 30, SEP, 10, 11, 12, SEP, 20, 21, SEP]
    assert segments.tolist() == [0, 0, 0, 0, 0, 0, 0, 1, 1, 1]
    # too long: the longer side loses tokens from its end; the word is never cut
    tokens, segments = pair_example(np.arange(100, 120), b, max_len=12, word=np.array([30]))
    assert tokens.tolist() == [CLS, 30, SEP, 100, 101, 102, 103, 104, SEP, 20, 21, SEP]
    assert pair_lengths(np.array([20]), np.array([2]), np.array([1]), 12).tolist() == [12]


@pytest.mark.parametrize("task", ["wic", "paraphrase"])
def test_classification_batches(small_corpora, data_cache, task):
    cfg = small_data_config(small_corpora[task], data_cache, task="classification", block_size=48)
    data = prepare(cfg, max_positions=64)
    ds = data.splits["valid"]
    raw = read_pairs(small_corpora[task] / "valid.tsv", ("0", "1"))
    assert len(ds) == 200 and data.num_classes == 2 and (ds.sizes <= 48).all()
    ix = ds.epoch_batches(epoch=0, seed=0, max_tokens=512)[0]
    b = ds.collate(ix)
    assert isinstance(b, ClassificationBatch) and b.n_tokens == len(ix)
    assert torch.equal(b.labels, torch.from_numpy(raw.labels[ix]))
    tok = data.tokenizer
    for row, i in enumerate(ix):
        tokens = b.tokens[row][b.tokens[row] != PAD].tolist()
        seps = [k for k, t in enumerate(tokens) if t == SEP]
        assert tokens[0] == CLS and tokens[-1] == SEP and len(seps) == (3 if task == "wic" else 2)
        assert (b.segments[row, : seps[-2] + 1] == 0).all() and (b.segments[row, seps[-2] + 1 : len(tokens)] == 1).all()
        if task == "wic":
            assert tok.decode(tokens[1 : seps[0]]) == raw.word[i]
        if len(tokens) < 48:  # not truncated: the sentences come back exactly
            assert tok.decode(tokens[seps[-2] + 1 : -1]) == raw.b[i]
