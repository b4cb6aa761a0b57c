"""Encoded splits and the one entry point of the data pipeline, :func:`prepare`.

``prepare(data_cfg, max_positions)`` locates and checks the corpus, trains (or loads) the tokenizer, encodes
each split once into the cache, and returns datasets whose ``epoch_batches`` and ``collate`` the trainer
calls::

    data = prepare(DataConfig(), max_positions=model_cfg.max_positions)
    train = data.splits["train"]
    for step, indices in enumerate(train.epoch_batches(epoch, seed, max_tokens)[start:], start):
        batch = train.collate(indices, rank=rank, world=world, seed=seed, epoch=epoch, step=step)

Everything is read and checked before anything is written, so a bad corpus leaves the cache as it was.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normlab.config import TEXT_TASKS, DataConfig
from normlab.data import batching, tasks
from normlab.data.batch import BOS, CLS, EOS, PAD, SEP, Batch, ClassificationBatch, LMBatch, MLMBatch, TranslationBatch
from normlab.data.cache import cache_root, digest, file_digest, load_arrays, save_arrays
from normlab.data.corpora import (
    Corpus,
    DataError,
    Mono,
    Pairs,
    Parallel,
    locate,
    locate_tokenizer_corpus,
    read_parallel_raw,
    read_split,
    tokenizer_text,
)
from normlab.data.tokenizer import NUM_SPECIAL, Tokenizer, settings_key, tokenizer_path, train_or_load

log = logging.getLogger("normlab.data")


# --------------------------------------------------------------------------------------------------------
# Ragged arrays


@dataclasses.dataclass(frozen=True)
class Ragged:
    """Variable-length rows stored flat: row i is ``values[offsets[i]:offsets[i+1]]``."""

    values: np.ndarray
    offsets: np.ndarray  # (n + 1,) int64, offsets[0] == 0

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    def take(self, idx: np.ndarray) -> Ragged:
        """A compact copy holding rows ``idx`` in that order."""
        lengths = self.lengths[idx]
        offsets = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return Ragged(self.values[_gather_index(self.offsets[idx], lengths)], offsets)

    def padded(self, idx: np.ndarray, *, prefix: int | None = None, suffix: int | None = None) -> np.ndarray:
        """Rows ``idx`` as a (B, T) int64 matrix, ``prefix``/``suffix`` around each row, right-padded with PAD."""
        lengths = self.lengths[idx]
        p = int(prefix is not None)
        width = int(lengths.max(initial=0)) + p + int(suffix is not None)
        out = np.full((len(idx), width), PAD, dtype=np.int64)
        if prefix is not None:
            out[:, 0] = prefix
        rows = np.repeat(np.arange(len(idx)), lengths)
        cols = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths) + p
        out[rows, cols] = self.values[_gather_index(self.offsets[idx], lengths)]
        if suffix is not None:
            out[np.arange(len(idx)), lengths + p] = suffix
        return out

    def text(self, i: int) -> str:
        return self[i].tobytes().decode("utf-8")

    @classmethod
    def from_texts(cls, texts: Sequence[str]) -> Ragged:
        """UTF-8 bytes of ``texts`` (the raw strings, kept for BLEU references)."""
        encoded = [t.encode("utf-8") for t in texts]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8), offsets)


def _gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat indices of the runs ``[starts[k], starts[k] + lengths[k])``, concatenated."""
    total = int(lengths.sum())
    return np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(total, dtype=np.int64)


# --------------------------------------------------------------------------------------------------------
# Datasets


class Dataset:
    """Examples of one split: ``sizes[i]`` is the number of tokens example i costs in a batch.

    ``epoch_batches`` and ``collate`` are the trainer's interface (see the module docstring).
    """

    sizes: np.ndarray

    def __len__(self) -> int:
        return len(self.sizes)

    def num_tokens(self, i: int) -> int:
        return int(self.sizes[i])

    def _sort_keys(self) -> tuple[np.ndarray, ...]:
        return ()

    def epoch_batches(
        self, epoch: int, seed: int, max_tokens: int, shuffle: bool = True, *, max_sentences: int = 0
    ) -> list[np.ndarray]:
        """The global batches of ``epoch`` as arrays of example indices, a pure function of ``(seed, epoch,
        max_tokens, max_sentences)``: a resumed run skips the first k of the same list. ``shuffle=False`` for
        evaluation; ``max_sentences`` (> 0) caps the examples per batch as well (BERT fine-tunes with 32)."""
        return batching.epoch_batches(self.sizes, epoch=epoch, seed=seed, max_tokens=max_tokens, shuffle=shuffle,
                                      keys=self._sort_keys(), max_sentences=max_sentences)  # fmt: skip

    def collate(
        self, indices: np.ndarray, *, rank: int = 0, world: int = 1, seed: int = 0, epoch: int = 0, step: int = 0
    ) -> Batch:
        """The tensors of rank ``rank``'s share of the global batch ``indices`` (:func:`batching.shard`).

        Randomness (masked-LM masking) is a function of ``(seed, epoch, example index, token position)`` only,
        so it is the same whether the run was resumed or not and whatever the world size; ``step`` does not
        enter it (an example occurs once per epoch) and is accepted so that callers need not know that.
        """
        del step
        return self._collate(batching.shard(np.asarray(indices, dtype=np.int64), self.sizes, rank, world), seed, epoch)

    def _collate(self, indices: np.ndarray, seed: int, epoch: int) -> Batch:
        raise NotImplementedError

    def select(self, idx: np.ndarray) -> Dataset:
        """A dataset of the examples ``idx`` (in that order)."""
        raise NotImplementedError


class TranslationDataset(Dataset):
    """Sentence pairs: ``src = tokens + eos``, ``tgt_in = bos + tokens``, ``tgt_out = tokens + eos``
    (batch.py). ``sizes = max(len(src), len(tgt_out))`` as fairseq's ``num_tokens``."""

    def __init__(self, src: Ragged, tgt: Ragged, src_text: Ragged, tgt_text: Ragged) -> None:
        self.src, self.tgt, self.src_text, self.tgt_text = src, tgt, src_text, tgt_text
        self.src_sizes = src.lengths + 1
        self.tgt_sizes = tgt.lengths + 1
        self.sizes = np.maximum(self.src_sizes, self.tgt_sizes)

    def _sort_keys(self) -> tuple[np.ndarray, ...]:
        # after the budgeted size, group by target then source length: each side is padded to its own maximum
        return (self.tgt_sizes, self.src_sizes)

    def source(self, i: int) -> str:
        """The raw source sentence of example i."""
        return self.src_text.text(i)

    def target(self, i: int) -> str:
        """The raw target sentence of example i (the BLEU reference)."""
        return self.tgt_text.text(i)

    def source_tokens(self, i: int) -> np.ndarray:
        return self.src[i].astype(np.int64)

    def target_tokens(self, i: int) -> np.ndarray:
        return self.tgt[i].astype(np.int64)

    def all_targets(self) -> np.ndarray:
        """Every predicted token of the split (each sentence's tokens and its EOS), the loss's denominator."""
        tgt = self.tgt
        return np.concatenate([tgt.values[tgt.offsets[0] : tgt.offsets[-1]], np.full(len(self), EOS)]).astype(np.int64)

    def _collate(self, indices: np.ndarray, seed: int, epoch: int) -> TranslationBatch:
        tgt_out = self.tgt.padded(indices, suffix=EOS)
        return TranslationBatch(
            src=torch.from_numpy(self.src.padded(indices, suffix=EOS)),
            tgt_in=torch.from_numpy(self.tgt.padded(indices, prefix=BOS)),
            tgt_out=torch.from_numpy(tgt_out),
            ids=torch.from_numpy(indices.copy()),
            n_tokens=int(self.tgt_sizes[indices].sum()),
        )

    def select(self, idx: np.ndarray) -> TranslationDataset:
        return TranslationDataset(*(r.take(idx) for r in (self.src, self.tgt, self.src_text, self.tgt_text)))


class MLMDataset(Dataset):
    """Running text packed into blocks ``[CLS] + block_size - 2 tokens + [SEP]`` (the paragraphs joined with
    [SEP] between them; the last block may be shorter), masked as BERT at collate time."""

    def __init__(self, stream: np.ndarray, bounds: np.ndarray, *, vocab_size: int, mask_prob: float) -> None:
        self.blocks = Ragged(stream, bounds)
        self.vocab_size, self.mask_prob = vocab_size, mask_prob
        self.sizes = self.blocks.lengths + 2

    def all_targets(self) -> np.ndarray:
        """Every token that masking can pick as a target (the blocks' text tokens; masking chooses positions
        uniformly, so the masked targets follow this distribution in expectation)."""
        b = self.blocks
        return b.values[b.offsets[0] : b.offsets[-1]].astype(np.int64)

    def block(self, i: int) -> np.ndarray:
        """Block i unmasked: ``[CLS] tokens [SEP]``."""
        return np.concatenate([[CLS], self.blocks[i], [SEP]]).astype(np.int64)

    def _collate(self, indices: np.ndarray, seed: int, epoch: int) -> MLMBatch:
        tokens = self.blocks.padded(indices, prefix=CLS, suffix=SEP)
        inputs, targets = tasks.mask_tokens(
            tokens, indices, seed=seed, epoch=epoch, vocab_size=self.vocab_size, mask_prob=self.mask_prob
        )
        return MLMBatch(
            tokens=torch.from_numpy(inputs),
            segments=torch.zeros(inputs.shape, dtype=torch.long),
            targets=torch.from_numpy(targets),
            n_tokens=int((targets != PAD).sum()),
        )

    def select(self, idx: np.ndarray) -> MLMDataset:
        blocks = self.blocks.take(idx)
        return MLMDataset(blocks.values, blocks.offsets, vocab_size=self.vocab_size, mask_prob=self.mask_prob)


class LMDataset(Dataset):
    """Running text for next-token prediction: the stream of :func:`tasks.lm_stream` (paragraphs between EOS) cut
    into blocks of ``block_size`` input positions (:func:`tasks.lm_block_starts`); example i is ``tokens =
    stream[s : s + n]``, ``targets = stream[s + 1 : s + n + 1]``, s = ``starts[i]``, n = ``sizes[i]``. Every stream
    token after the first is the target of exactly one example, so the validation NLL per target is the
    per-token loss of the whole split (its exponential the perplexity)."""

    def __init__(self, stream: np.ndarray, starts: np.ndarray, block_size: int) -> None:
        self.stream, self.starts, self.block_size = stream, np.asarray(starts, dtype=np.int64), block_size
        self.sizes = np.minimum(block_size, len(stream) - 1 - self.starts)

    def all_targets(self) -> np.ndarray:
        """Every target token of the examples (the validation split's: what the unigram baseline is scored on)."""
        return self.stream[_gather_index(self.starts + 1, self.sizes)].astype(np.int64)

    def block(self, i: int) -> np.ndarray:
        """Example i's input tokens."""
        return self.stream[self.starts[i] : self.starts[i] + self.sizes[i]].astype(np.int64)

    def _collate(self, indices: np.ndarray, seed: int, epoch: int) -> LMBatch:
        sizes = self.sizes[indices]
        width = int(sizes.max(initial=0))
        tokens = np.full((len(indices), width), PAD, dtype=np.int64)
        targets = np.full((len(indices), width), PAD, dtype=np.int64)
        rows = np.repeat(np.arange(len(indices)), sizes)
        cols = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        starts = self.starts[indices]
        tokens[rows, cols] = self.stream[_gather_index(starts, sizes)]
        targets[rows, cols] = self.stream[_gather_index(starts + 1, sizes)]
        return LMBatch(tokens=torch.from_numpy(tokens), targets=torch.from_numpy(targets), n_tokens=int(sizes.sum()))

    def select(self, idx: np.ndarray) -> LMDataset:
        return LMDataset(self.stream, self.starts[idx], self.block_size)


class ClassificationDataset(Dataset):
    """Labelled sentence pairs as ``[CLS] a [SEP] b [SEP]`` (``[CLS] word [SEP] a [SEP] b [SEP]`` for
    word-in-context data, see :func:`tasks.pair_example`), truncated to ``max_len``."""

    def __init__(self, a: Ragged, b: Ragged, word: Ragged | None, labels: np.ndarray, max_len: int) -> None:
        self.a, self.b, self.word, self.labels, self.max_len = a, b, word, labels, max_len
        self.sizes = tasks.pair_lengths(a.lengths, b.lengths, None if word is None else word.lengths, max_len)

    def example(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``(tokens, segments)`` of example i."""
        word = None if self.word is None else self.word[i]
        return tasks.pair_example(self.a[i], self.b[i], self.max_len, word)

    def _collate(self, indices: np.ndarray, seed: int, epoch: int) -> ClassificationBatch:
        width = int(self.sizes[indices].max())
        tokens = np.full((len(indices), width), PAD, dtype=np.int64)
        segments = np.zeros((len(indices), width), dtype=np.int64)
        for row, i in enumerate(indices):
            tok, seg = self.example(int(i))
            tokens[row, : len(tok)] = tok
            segments[row, : len(seg)] = seg
        return ClassificationBatch(
            tokens=torch.from_numpy(tokens),
            segments=torch.from_numpy(segments),
            labels=torch.from_numpy(self.labels[indices].astype(np.int64)),
            ids=torch.from_numpy(indices.copy()),
            n_tokens=len(indices),
        )

    def select(self, idx: np.ndarray) -> ClassificationDataset:
        word = None if self.word is None else self.word.take(idx)
        return ClassificationDataset(self.a.take(idx), self.b.take(idx), word, self.labels[idx], self.max_len)


# --------------------------------------------------------------------------------------------------------
# prepare


@dataclasses.dataclass
class Prepared:
    """What :func:`prepare` returns: the tokenizer and the datasets of the splits that exist."""

    cfg: DataConfig
    tokenizer: Tokenizer
    splits: dict[str, Dataset]  # "train", "valid" and, where the corpus has one, "test"
    stats: dict[str, dict[str, Any]]  # per split: examples, tokens (sum of sizes), dropped_empty, dropped_long, ...
    corpus: Corpus
    # per split of a translation or classification corpus: each example's data row in its file (0-based: a raw
    # file's lines, a TSV's rows after the header), so that evaluate's .hyp and .pred keep the file's lines
    rows: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def num_classes(self) -> int:
        return len(self.cfg.labels)


def _label(corpus: Corpus) -> str:
    """A file-name-safe name for a corpus: the last part of its directory (the hash in the name does the rest)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", corpus.root.name)[:40] or "corpus"


def _reading(corpus: Corpus, cfg: DataConfig) -> dict[str, Any]:
    """The settings that decide what the readers return for ``corpus`` (part of every cache key)."""
    # the masked and the causal LM read the same running text the same way: one tokenizer and one binarized
    # split serve both (their blocks are cut when a split is loaded, not cached)
    spec: dict[str, Any] = {"task": "mlm" if corpus.task in TEXT_TASKS else corpus.task, "format": corpus.format}
    if corpus.task == "translation":
        spec["langs"] = [cfg.source_lang, cfg.target_lang]
    elif corpus.task == "classification":
        spec["labels"] = list(cfg.labels)
    return spec


def _tokenizer_lines(data: Parallel | Mono | Pairs, cfg: DataConfig) -> list[str]:
    if isinstance(data, Parallel) and cfg.source_lang > cfg.target_lang:
        # the same text in the same order for De->En and En->De: one joint vocabulary serves both directions
        return data.tgt + data.src
    return tokenizer_text(data)


def _tokenizer_key(corpus: Corpus, cfg: DataConfig) -> str:
    reading = _reading(corpus, cfg)
    reading.pop("labels", None)  # the text a tokenizer learns from has no labels
    if "langs" in reading:
        reading["langs"] = sorted(reading["langs"])
    files = [file_digest(p) for p in corpus.splits["train"]]
    return digest("tokenizer", settings_key(), cfg.vocab_size, cfg.tokenizer_sentences, reading, files)


def _binarize(data: Parallel | Mono | Pairs, tok: Tokenizer) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}

    def put(name: str, texts: Sequence[str]) -> None:
        arrays[f"{name}_tokens"], arrays[f"{name}_offsets"] = tok.encode_arrays(texts)

    if isinstance(data, Parallel):
        put("src", data.src)
        put("tgt", data.tgt)
        for name, texts in (("src_text", data.src), ("tgt_text", data.tgt)):
            raw = Ragged.from_texts(texts)
            arrays[f"{name}_tokens"], arrays[f"{name}_offsets"] = raw.values, raw.offsets
    elif isinstance(data, Mono):
        put("text", data.text)
    else:
        put("a", data.a)
        put("b", data.b)
        if data.word is not None:
            put("word", data.word)
        arrays["labels"] = data.labels
    if not isinstance(data, Mono) and data.rows is not None:
        arrays["rows"] = np.asarray(data.rows, dtype=np.int64)
    return arrays


def _ragged(arrays: dict[str, np.ndarray], name: str) -> Ragged:
    return Ragged(arrays[f"{name}_tokens"], arrays[f"{name}_offsets"])


def _dataset(
    task: str, arrays: dict[str, np.ndarray], cfg: DataConfig, max_positions: int, vocab_size: int
) -> tuple[Dataset, int, np.ndarray | None]:
    """The dataset of a cached split, how many examples were dropped for exceeding ``max_positions``, and the
    indices of those kept when some were (None: every one)."""
    if task == "translation":
        ds = TranslationDataset(_ragged(arrays, "src"), _ragged(arrays, "tgt"), _ragged(arrays, "src_text"),
                                _ragged(arrays, "tgt_text"))  # fmt: skip
        keep = np.flatnonzero((ds.src_sizes <= max_positions) & (ds.tgt_sizes <= max_positions))
        if len(keep) < len(ds):
            return ds.select(keep), len(ds) - len(keep), keep
        return ds, 0, None
    if task == "mlm":
        text = _ragged(arrays, "text")
        stream = tasks.join_with_separator(text.values, text.offsets)
        bounds = tasks.block_bounds(len(stream), cfg.block_size)
        return MLMDataset(stream, bounds, vocab_size=vocab_size, mask_prob=cfg.mask_prob), 0, None
    if task == "lm":
        text = _ragged(arrays, "text")
        stream = tasks.lm_stream(text.values, text.offsets)
        return LMDataset(stream, tasks.lm_block_starts(len(stream), cfg.block_size), cfg.block_size), 0, None
    word = _ragged(arrays, "word") if "word_tokens" in arrays else None
    max_len = min(cfg.block_size, max_positions)
    return ClassificationDataset(_ragged(arrays, "a"), _ragged(arrays, "b"), word, arrays["labels"], max_len), 0, None


def _fitted(label: str, task: str, arrays: dict[str, np.ndarray], cfg: DataConfig, max_positions: int,
            vocab_size: int) -> tuple[Dataset, int, np.ndarray | None]:
    """:func:`_dataset`, with the examples longer than ``max_positions`` dropped, counted and logged; a
    DataError when none is left (else a "completed" run of 0 updates, or no validation at all). Also each kept
    example's data row in its file (``arrays["rows"]`` through the kept indices), None where the split has none
    (running text)."""
    ds, dropped_long, keep = _dataset(task, arrays, cfg, max_positions, vocab_size)
    rows = arrays.get("rows")
    if rows is not None and keep is not None:
        rows = rows[keep]
    if dropped_long and len(ds) == 0:
        raise DataError(f"{label}: all {dropped_long} examples are longer than the model's "
                        f"max_positions={max_positions}; raise model.max_positions")  # fmt: skip
    if dropped_long:
        log.warning("%s: dropped %d of %d examples longer than max_positions=%d", label, dropped_long,
                    dropped_long + len(ds), max_positions)  # fmt: skip
    return ds, dropped_long, rows


def pieces_seen(arrays: dict[str, np.ndarray], vocab_size: int) -> int:
    """How many of the vocabulary's text pieces (ids >= NUM_SPECIAL) occur in a binarized split's token arrays
    (not the raw-text arrays ``*_text_tokens`` translation keeps for BLEU)."""
    seen = np.zeros(vocab_size, dtype=bool)
    for name, values in arrays.items():
        if name.endswith("_tokens") and not name.endswith("_text_tokens") and values.size:
            seen |= np.bincount(values.astype(np.int64), minlength=vocab_size)[:vocab_size] > 0
    return int(seen[NUM_SPECIAL:].sum())


# A vocabulary entry that never occurs in the training split keeps its initial embedding and, as an output, only
# ever has its logit pushed down: parameters that learn nothing (with a 10k vocabulary on a few thousand
# sentences, most of the embedding table). The warning fires when they are the majority of the text pieces,
# where the model is mostly untrained parameters; a vocabulary the size of the pieces seen fits such a corpus.
UNSEEN_WARNING_SHARE = 0.5


SPLIT_ARRAYS = 2
"""The arrays a cached split of :data:`ROW_TASKS` holds, in its cache key: 2 added ``rows`` (each example's data row
in its file); such a split cached before is binarized again rather than read without them. Running text (mlm, lm)
keeps no rows, and its key (and cache: en-mono's 7.1M words) is as it was."""
ROW_TASKS = ("translation", "classification")


def prepare(data_cfg: DataConfig, max_positions: int, *, tokenizer: Tokenizer | None = None) -> Prepared:
    """Build or load the tokenizer and the binarized splits of ``data_cfg`` for a model of ``max_positions``.
    ``tokenizer``: use this one instead of the one ``data_cfg`` names or trains (a resumed run keeps its own).

    Translation pairs with a side longer than ``max_positions`` (eos included) are dropped and counted;
    ``train_subset`` / ``valid_subset`` keep the first N examples after that. Raises :class:`DataError` (one
    line, nothing written) for a corpus it cannot use.
    """
    cfg = data_cfg
    t0 = time.perf_counter()
    if cfg.task in TEXT_TASKS and cfg.block_size > max_positions:
        raise DataError(f"DataConfig.block_size={cfg.block_size} exceeds the model's max_positions={max_positions}")
    corpus = locate(cfg)
    root = cache_root(cfg)

    # the tokenizer: a given model file, or one trained on a corpus' train split (this one by default)
    tok: Tokenizer | None = None
    tok_corpus: Corpus | None = None
    if cfg.tokenizer.endswith(".model"):
        tok = tokenizer or Tokenizer.load(cfg.tokenizer)
        tok_id = tok.digest
    else:
        tok_corpus = locate_tokenizer_corpus(cfg, cfg.tokenizer) if cfg.tokenizer else corpus
        tok_id = _tokenizer_key(tok_corpus, cfg)
        if tokenizer_path(root, tok_id).is_file():
            tok = Tokenizer.load(tokenizer_path(root, tok_id))
        if tokenizer is not None:
            # the given one keys the splits by its own digest, unless it is the cached one the config trains
            # (a resume of unchanged data: the splits already binarized are the same)
            if tok is None or tok.proto != tokenizer.proto:
                tok_id = tokenizer.digest
            tok = tokenizer

    reading = _reading(corpus, cfg)
    keyed = (SPLIT_ARRAYS,) if corpus.task in ROW_TASKS else ()  # running text keeps no rows: its cache stands
    paths = {
        split: root / "splits" / f"{_label(corpus)}-{split}-"
        f"{digest('split', *keyed, reading, [file_digest(p) for p in files], tok_id)}.npz"
        for split, files in corpus.splits.items()
    }
    missing = [split for split, path in paths.items() if not path.is_file()]

    # read and check everything still needed before writing anything
    texts = {split: read_split(corpus, split, cfg) for split in missing}
    if tok is None:
        assert tok_corpus is not None
        if tok_corpus is corpus and "train" in texts:
            tok_lines = _tokenizer_lines(texts["train"], cfg)
        else:
            tok_lines = _tokenizer_lines(read_split(tok_corpus, "train", cfg, text_only=True), cfg)
        tok = train_or_load(root, tok_id, lambda: tok_lines, cfg.vocab_size, cfg.tokenizer_sentences)
    for split in missing:
        data = texts.pop(split)
        examples = len(data.a if isinstance(data, Pairs) else data.src if isinstance(data, Parallel) else data.text)
        files = [str(p) for p in corpus.splits[split]]
        meta = {"examples": examples, "dropped_empty": data.dropped_empty, "files": files}
        save_arrays(paths[split], _binarize(data, tok), meta)
        log.info("binarized %s %s: %d examples -> %s", corpus.name, split, meta["examples"], paths[split])

    splits: dict[str, Dataset] = {}
    stats: dict[str, dict[str, Any]] = {}
    rows: dict[str, np.ndarray] = {}
    for split, path in paths.items():
        arrays, meta = load_arrays(path)
        ds, dropped_long, kept_rows = _fitted(f"{corpus.name} {split}", corpus.task, arrays, cfg, max_positions,
                                              tok.vocab_size)  # fmt: skip
        if meta["dropped_empty"]:  # logged by the reader when it read the file; repeated on every cached load
            level = logging.INFO if corpus.task == "mlm" else logging.WARNING  # empty lines separate paragraphs
            log.log(level, "%s %s: %d empty examples were dropped when reading", corpus.name, split,
                    meta["dropped_empty"])  # fmt: skip
        subset = {"train": cfg.train_subset, "valid": cfg.valid_subset}.get(split, 0)
        if subset and subset < len(ds):
            ds = ds.select(np.arange(subset))
            kept_rows = None if kept_rows is None else kept_rows[:subset]
        splits[split] = ds
        if kept_rows is not None:
            rows[split] = kept_rows
        stats[split] = {"examples": len(ds), "tokens": int(ds.sizes.sum()), "dropped_empty": meta["dropped_empty"],
                        "dropped_long": dropped_long, "data_rows": meta["examples"] + meta["dropped_empty"],
                        "cache": str(path)}  # fmt: skip
        if isinstance(ds, TranslationDataset):  # "tokens" is the batching size max(src, tgt); here each side
            stats[split].update(source_tokens=int(ds.src_sizes.sum()), target_tokens=int(ds.tgt_sizes.sum()))
        if split == "train":
            text_pieces = tok.vocab_size - NUM_SPECIAL
            seen = stats[split]["pieces_seen"] = pieces_seen(arrays, tok.vocab_size)
            # only where this corpus chose the vocabulary: a fine-tuning task read with the pre-training
            # tokenizer (or any given .model) sees part of it by design
            # and only where this call chose it: a run evaluated or resumed with its own tokenizer cannot change it
            if tokenizer is None and tok_corpus is corpus and text_pieces - seen > UNSEEN_WARNING_SHARE * text_pieces:
                log.warning("%s train: %d of the vocabulary's %d text pieces (%.0f%%) never occur in the training "
                            "split; their embeddings learn nothing. A vocabulary near the %d pieces seen fits this "
                            "corpus: --set data.vocab_size=%d", corpus.name, text_pieces - seen, text_pieces,
                            100 * (text_pieces - seen) / text_pieces, seen, max(seen + NUM_SPECIAL, 100))  # fmt: skip
    log.info("prepared %s in %.2f s", corpus.name, time.perf_counter() - t0)
    return Prepared(cfg=cfg, tokenizer=tok, splits=splits, stats=stats, corpus=corpus, rows=rows)


def fingerprint(data_cfg: DataConfig) -> dict[str, str]:
    """The sha256 of every file the data of ``data_cfg`` is made from, keyed ``corpus/<split>/<file>`` (and
    ``tokenizer/...`` for the corpus or model file a tokenizer comes from, when ``DataConfig.tokenizer`` names
    one): a run records it at its start, and ``--resume`` refuses data that has changed since (issue 36)."""
    out = {}
    corpus = locate(data_cfg)
    for split, files in corpus.splits.items():
        out.update({f"corpus/{split}/{p.name}": file_digest(p) for p in files})
    if data_cfg.tokenizer.endswith(".model"):
        path = Path(data_cfg.tokenizer).expanduser()
        out[f"tokenizer/{path.name}"] = file_digest(path) if path.is_file() else "missing"
    elif data_cfg.tokenizer:
        tok_corpus = locate_tokenizer_corpus(data_cfg, data_cfg.tokenizer)
        out.update({f"tokenizer/train/{p.name}": file_digest(p) for p in tok_corpus.splits["train"]})
    return out


def read_test_pairs(
    source: Path, reference: Path, tok: Tokenizer, max_positions: int
) -> tuple[TranslationDataset, dict[str, int], np.ndarray]:
    """Your own test set, two fairseq-style parallel files (one sentence per line, possibly compressed), read and
    encoded exactly as :func:`prepare` reads a corpus' split: empty pairs and pairs with a side longer than
    ``max_positions`` (EOS included) are dropped and counted (the dict, with the files' lines, ``data_rows``);
    each kept pair's line (0-based). Nothing is cached. Raises DataError."""
    data = read_parallel_raw(source, reference)
    ds, dropped_long, rows = _fitted(str(source), "translation", _binarize(data, tok), DataConfig(), max_positions,
                                     tok.vocab_size)  # fmt: skip
    counts = {"dropped_empty": data.dropped_empty, "dropped_longer_than_max_positions": dropped_long,
              "data_rows": len(data.src) + data.dropped_empty}  # fmt: skip
    assert rows is not None  # read_parallel_raw keeps its rows
    return ds, counts, rows  # type: ignore[return-value]  # the translation task's dataset


__all__ = ["prepare", "fingerprint", "Prepared", "Dataset", "TranslationDataset", "MLMDataset", "ClassificationDataset", "LMDataset", "Ragged",
           "read_test_pairs", "pieces_seen"]
