"""Batching: token budgets as fairseq counts them, determinism for a seed, exact resume, rank splitting,
max_positions filtering, subsets and the binarized cache."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import small_data_config

from normlab.data import BOS, EOS, PAD, DataError, TranslationBatch, prepare
from normlab.data import cache as cache_module
from normlab.data.batching import batch_by_size, shard
from normlab.data.corpora import read_parallel_tsv


@pytest.fixture(scope="module")
def train(small_translation):
    return small_translation.splits["train"]


@pytest.mark.parametrize("max_tokens", [256, 1024, 4096])
def test_batches_cover_the_epoch_within_budget(train, max_tokens):
    batches = train.epoch_batches(epoch=0, seed=1, max_tokens=max_tokens)
    flat = np.concatenate(batches)
    assert np.array_equal(np.sort(flat), np.arange(len(train)))  # every example exactly once
    for b in batches:  # fairseq's rule: sentences x longest, padding included
        assert len(b) * train.sizes[b].max() <= max_tokens
    # greedy from the short end of a sorted list: merging two neighbours in sorted order would break the budget
    ordered = sorted(batches, key=lambda b: (train.sizes[b].max(), train.sizes[b].min()))
    for x, y in zip(ordered, ordered[1:]):
        assert (len(x) + len(y)) * max(train.sizes[x].max(), train.sizes[y].max()) > max_tokens


def test_max_sentences_caps_batches(train):
    batches = train.epoch_batches(epoch=0, seed=1, max_tokens=4096, max_sentences=32)
    assert max(len(b) for b in batches) == 32
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(len(train)))
    assert all(len(b) * train.sizes[b].max() <= 4096 for b in batches)


def test_deterministic_for_seed_and_epoch(train):
    a = train.epoch_batches(epoch=3, seed=7, max_tokens=1024)
    b = train.epoch_batches(epoch=3, seed=7, max_tokens=1024)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    other_epoch = train.epoch_batches(epoch=4, seed=7, max_tokens=1024)
    other_seed = train.epoch_batches(epoch=3, seed=8, max_tokens=1024)
    assert not all(np.array_equal(x, y) for x, y in zip(a, other_epoch))
    assert not all(np.array_equal(x, y) for x, y in zip(a, other_seed))


def test_unshuffled_batches_are_in_length_order(train):
    batches = train.epoch_batches(epoch=0, seed=0, max_tokens=1024, shuffle=False)
    assert np.all(np.diff(train.sizes[np.concatenate(batches)]) >= 0)
    assert all(np.array_equal(x, y) for x, y in zip(batches, train.epoch_batches(9, 9, 1024, shuffle=False)))


def _same_batch(x, y):
    return all(torch.equal(getattr(x, k), getattr(y, k)) if isinstance(getattr(x, k), torch.Tensor)
               else getattr(x, k) == getattr(y, k) for k in vars(x))  # fmt: skip


@pytest.mark.parametrize("task", ["translation", "mlm"])
def test_resume_from_position(small_corpora, data_cache, small_translation, small_mlm, task):
    """A run stopped after k batches of epoch e and restarted (a fresh prepare, as a new process would) yields
    exactly the batches, masks included, that the uninterrupted run would have."""
    prepared = small_translation if task == "translation" else small_mlm
    seed, epoch, k = 11, 2, 5
    full = [prepared.splits["train"].collate(ix, seed=seed, epoch=epoch, step=s)
            for s, ix in enumerate(prepared.splits["train"].epoch_batches(epoch, seed, 2048))]  # fmt: skip
    cfg = prepared.cfg
    restarted = prepare(cfg, max_positions=256 if task == "translation" else 128).splits["train"]
    rest = [restarted.collate(ix, seed=seed, epoch=epoch, step=s)
            for s, ix in list(enumerate(restarted.epoch_batches(epoch, seed, 2048)))[k:]]  # fmt: skip
    assert len(rest) == len(full) - k
    assert all(_same_batch(x, y) for x, y in zip(full[k:], rest))


def test_translation_batch_layout(small_translation, train):
    tok = small_translation.tokenizer
    ix = train.epoch_batches(0, 0, 512)[0]
    b = train.collate(ix)
    assert isinstance(b, TranslationBatch) and b.src.dtype == torch.long
    assert torch.equal(b.ids, torch.from_numpy(ix))
    for row, i in enumerate(ix):
        src, tgt = train.source_tokens(i).tolist(), train.target_tokens(i).tolist()
        assert b.src[row, : len(src) + 1].tolist() == src + [EOS] and (b.src[row, len(src) + 1 :] == PAD).all()
        assert b.tgt_in[row, : len(tgt) + 1].tolist() == [BOS] + tgt
        assert b.tgt_out[row, : len(tgt) + 1].tolist() == tgt + [EOS] and (b.tgt_out[row, len(tgt) + 1 :] == PAD).all()
        assert tok.decode(b.tgt_out[row]) == train.target(i)
    assert b.n_tokens == int((b.tgt_out != PAD).sum())
    assert (b.tgt_in != PAD).sum() == (b.tgt_out != PAD).sum()


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_rank_split_covers_each_sentence_once(train, world):
    for ix in train.epoch_batches(epoch=1, seed=5, max_tokens=2048)[:40]:
        if len(ix) < world:
            continue
        parts = [shard(ix, train.sizes, r, world) for r in range(world)]
        assert all(len(p) >= 1 for p in parts)
        assert np.array_equal(np.concatenate(parts), ix)  # concatenated in rank order: the 1-rank batch
        tokens = [int(train.sizes[p].sum()) for p in parts]
        assert max(tokens) - min(tokens) <= 2 * int(train.sizes[ix].max())  # balanced up to a cut's granularity
        single = train.collate(ix)
        ranked = [train.collate(ix, rank=r, world=world) for r in range(world)]
        assert torch.equal(torch.cat([r.ids for r in ranked]), single.ids)
        assert sum(r.n_tokens for r in ranked) == single.n_tokens


def test_mlm_rank_split_masks_as_one_rank(small_mlm):
    """An example's masking does not depend on the rank (or world size) it lands on."""
    ds = small_mlm.splits["train"]
    ix = ds.epoch_batches(epoch=0, seed=3, max_tokens=1024)[0]
    single = ds.collate(ix, seed=3, epoch=0)
    for world in (2, 4):
        parts = [ds.collate(ix, rank=r, world=world, seed=3, epoch=0, step=99) for r in range(world)]
        tokens = torch.cat([p.tokens for p in parts])  # blocks are all block_size long but the last
        assert torch.equal(tokens, single.tokens[:, : tokens.shape[1]])
        assert torch.equal(torch.cat([p.targets for p in parts]), single.targets[:, : tokens.shape[1]])


def test_too_few_sentences_for_the_ranks_is_an_error(train):
    ix = np.array([0, 1])
    with pytest.raises(DataError, match="a global batch of 2 examples cannot give each of 4 ranks one"):
        train.collate(ix, rank=0, world=4)


def test_example_longer_than_budget_is_an_error():
    with pytest.raises(DataError, match="an example of 300 tokens exceeds max_tokens=256"):
        batch_by_size(np.arange(3), np.array([5, 9, 300]), 256)


def test_max_positions_drops_and_counts(small_corpora, data_cache, caplog):
    cfg = small_data_config(small_corpora["de-en-tsv"], data_cache)
    with caplog.at_level(logging.WARNING, logger="normlab.data"):
        short = prepare(cfg, max_positions=24)
    train = short.splits["train"]
    dropped = short.stats["train"]["dropped_long"]
    full = prepare(cfg, max_positions=10_000).splits["train"]
    expected = int(((full.src_sizes > 24) | (full.tgt_sizes > 24)).sum())
    assert dropped == expected > 0 and len(train) == len(full) - dropped
    assert train.src_sizes.max() <= 24 and train.tgt_sizes.max() <= 24
    assert f"dropped {dropped} of 3000 examples longer than max_positions=24" in caplog.text


def test_subsets_keep_the_first_examples(small_corpora, data_cache):
    cfg = small_data_config(small_corpora["de-en-tsv"], data_cache, train_subset=100, valid_subset=30)
    data = prepare(cfg, max_positions=256)
    assert len(data.splits["train"]) == 100 and len(data.splits["valid"]) == 30 and len(data.splits["test"]) == 2000
    raw = read_parallel_tsv(small_corpora["de-en-tsv"] / "train.tsv", "de", "en")
    assert [data.splits["train"].target(i) for i in range(100)] == raw.tgt[:100]


def test_padding_share_of_length_buckets(train):
    """Length bucketing keeps padding small even on this 3,000-pair corpus (the benchmark measures the full
    one: 97%), far below that of batches drawn at random."""

    def share(batches):
        real = padded = 0
        for ix in batches:
            b = train.collate(ix)
            for t in (b.src, b.tgt_out):
                real += int((t != PAD).sum())
                padded += t.numel()
        return real / padded

    bucketed = train.epoch_batches(epoch=0, seed=0, max_tokens=4096)
    shuffled = np.random.default_rng(0).permutation(len(train))
    random = np.array_split(shuffled, len(bucketed))
    assert share(bucketed) > 0.8 and share(bucketed) > share(random) + 0.3


def test_second_prepare_reads_the_cache(small_translation, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("nothing should be re-encoded")

    monkeypatch.setattr(cache_module, "save_arrays", fail)
    import normlab.data.datasets as datasets

    monkeypatch.setattr(datasets, "save_arrays", fail)
    again = prepare(small_translation.cfg, max_positions=256)
    assert np.array_equal(again.splits["train"].sizes, small_translation.splits["train"].sizes)


def test_settings_change_rebuilds_splits(small_corpora, tmp_path):
    cfg = small_data_config(small_corpora["de-en-tsv"], tmp_path)
    prepare(cfg, max_positions=256)
    before = {p.name for p in (tmp_path / "splits").iterdir()}
    assert len(before) == 3
    prepare(cfg.replace(source_lang="en", target_lang="de"), max_positions=256)
    after = {p.name for p in (tmp_path / "splits").iterdir()}
    assert len(after) == 6 and before < after


def test_cache_writes_are_atomic(tmp_path, monkeypatch):
    """A write that fails half-way leaves neither a final file nor a temporary one, and an existing file as it
    was."""
    import os

    target = tmp_path / "x" / "split.npz"
    cache_module.save_arrays(target, {"a": np.arange(3)}, {"examples": 3})
    before = target.read_bytes()

    def disk_full(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", disk_full)  # after the bytes went to the temporary file, before the rename
    with pytest.raises(OSError, match="disk full"):
        cache_module.save_arrays(target, {"a": np.arange(1000)}, {"examples": 1000})
    with pytest.raises(OSError, match="disk full"):
        cache_module.save_arrays(tmp_path / "x" / "new.npz", {"a": np.arange(1000)}, {})
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["split.npz"] and target.read_bytes() == before


def test_cache_write_replaces_under_final_name_only_when_complete(tmp_path):
    target = tmp_path / "split.npz"
    cache_module.save_arrays(target, {"a": np.arange(5)}, {"examples": 5})
    arrays, meta = cache_module.load_arrays(target)
    assert arrays["a"].tolist() == [0, 1, 2, 3, 4] and meta == {"examples": 5}
    assert [p.name for p in tmp_path.iterdir()] == ["split.npz"]
