"""Examples of the encoder-only tasks and the language model: BERT masking, text packed into blocks (framed for
BERT, or shifted by one token for next-token prediction), sentence pairs.

Masking randomness is *counter-based*: the random numbers of token ``p`` of example ``i`` in epoch ``e`` are a
hash of ``(seed, e, i, p)`` (splitmix64, Steele et al. 2014). An example is therefore masked the same way
whichever batch, step or data-parallel rank it lands in, whether the run was resumed or not and whatever the
world size or ``max_tokens`` — no generator state to carry in a checkpoint — and differently in every epoch
(RoBERTa's dynamic masking, Liu et al. 2019, rather than BERT's fixed copies).
"""

from __future__ import annotations

import hashlib

import numpy as np

from normlab.data.batch import CLS, EOS, MASK, PAD, SEP
from normlab.data.tokenizer import NUM_SPECIAL

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
POSITION_BITS = 20  # counters are (example << 20) | position: positions up to 1M, examples up to 2^44


def _key(*parts: int) -> np.uint64:
    h = hashlib.sha256(",".join(map(str, parts)).encode()).digest()
    return np.uint64(int.from_bytes(h[:8], "little"))


def random_bits(key: np.uint64, counters: np.ndarray) -> np.ndarray:
    """64 random bits per counter: splitmix64's output function of ``counter * golden + key``."""
    with np.errstate(over="ignore"):
        x = counters.astype(np.uint64) * _GOLDEN + key
        x = (x ^ (x >> np.uint64(30))) * _M1
        x = (x ^ (x >> np.uint64(27))) * _M2
        return x ^ (x >> np.uint64(31))


def _uniform(bits: np.ndarray) -> np.ndarray:
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def mask_tokens(
    tokens: np.ndarray, example_ids: np.ndarray, *, seed: int, epoch: int, vocab_size: int, mask_prob: float = 0.15
) -> tuple[np.ndarray, np.ndarray]:
    """BERT's masking (Devlin et al. 2019, Section 3.1) of a (B, T) batch of token ids.

    Each non-special token is selected with probability ``mask_prob``; a selected token becomes [MASK] with
    probability 0.8, a random non-special token with 0.1, and stays with 0.1. Returns ``(inputs, targets)``:
    targets hold the original token at selected positions and PAD elsewhere (the loss ignores PAD).
    """
    B, T = tokens.shape
    counters = (example_ids.astype(np.uint64)[:, None] << np.uint64(POSITION_BITS)) | np.arange(T, dtype=np.uint64)
    selected = (tokens >= NUM_SPECIAL) & (_uniform(random_bits(_key(seed, epoch, 0), counters)) < mask_prob)
    kind = _uniform(random_bits(_key(seed, epoch, 1), counters))
    replace = random_bits(_key(seed, epoch, 2), counters) % np.uint64(vocab_size - NUM_SPECIAL)
    inputs = tokens.copy()
    to_mask = selected & (kind < 0.8)
    to_random = selected & (kind >= 0.8) & (kind < 0.9)
    inputs[to_mask] = MASK
    inputs[to_random] = (replace[to_random] + np.uint64(NUM_SPECIAL)).astype(tokens.dtype)
    targets = np.where(selected, tokens, PAD)
    return inputs, targets


def join_with_separator(tokens: np.ndarray, offsets: np.ndarray, sep: int = SEP) -> np.ndarray:
    """The paragraphs ``tokens[offsets[i]:offsets[i+1]]`` as one stream with ``sep`` between consecutive ones
    (RoBERTa's FULL-SENTENCES packing marks document boundaries the same way)."""
    n, total = len(offsets) - 1, len(tokens)
    if n == 0:
        return tokens.copy()
    out = np.full(total + n - 1, sep, dtype=tokens.dtype)  # uint16 stays uint16: en-mono's stream is 10M tokens
    shift = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    out[np.arange(total, dtype=np.int64) + shift] = tokens
    return out


def block_bounds(stream_length: int, block_size: int) -> np.ndarray:
    """Start offsets (and the end) of the blocks of ``block_size - 2`` stream tokens, each framed as
    ``[CLS] ... [SEP]`` (BERT's pre-training input); the last block may be shorter."""
    body = block_size - 2
    return np.append(np.arange(0, stream_length, body, dtype=np.int64), np.int64(stream_length))


def lm_stream(tokens: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The paragraphs as one stream for next-token prediction, each preceded and the last one followed by EOS:
    ``EOS p1 EOS p2 ... EOS pn EOS``. EOS marks the document boundary, as GPT-2's ``<|endoftext|>`` between the
    documents of its packed training text (Radford et al. 2019), so the first token of a paragraph is predicted
    from a boundary, and a prompt that starts with EOS (normlab generate) starts as a paragraph does."""
    body = join_with_separator(tokens, offsets, sep=EOS)
    return np.concatenate([np.array([EOS], dtype=body.dtype), body, np.array([EOS], dtype=body.dtype)])


def lm_block_starts(stream_length: int, block_size: int) -> np.ndarray:
    """Start offsets of the language model's blocks: block i reads ``block_size`` input positions from
    ``i * block_size`` and predicts the same positions shifted by one, so consecutive blocks share one token and
    every stream token but the first is a target exactly once (nanoGPT's packing, without its random offsets:
    an epoch's examples are fixed and only their order is drawn, as for every other task). The last block may be
    shorter; a stream of fewer than 2 tokens has no block."""
    return np.arange(0, max(stream_length - 1, 0), block_size, dtype=np.int64)


def truncate_pair(la: np.ndarray | int, lb: np.ndarray | int, budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Lengths of a and b after BERT's ``_truncate_seq_pair`` (pop a token from the longer side, from b on a
    tie, until ``la + lb <= budget``), in closed form and vectorised."""
    la, lb = np.asarray(la, dtype=np.int64), np.asarray(lb, dtype=np.int64)
    over = la + lb > budget
    ta = np.where(over, np.minimum(la, np.maximum(budget - lb, (budget + 1) // 2)), la)
    tb = np.where(over, np.minimum(lb, budget - ta), lb)
    return ta, tb


def pair_lengths(la: np.ndarray, lb: np.ndarray, lw: np.ndarray | None, max_len: int) -> np.ndarray:
    """Lengths of the examples :func:`pair_example` builds (vectorised, for batching)."""
    prefix = 0 if lw is None else np.minimum(lw, max_len // 4) + 1
    ta, tb = truncate_pair(la, lb, max_len - 3 - prefix)
    return ta + tb + 3 + prefix


def pair_example(
    a: np.ndarray, b: np.ndarray, max_len: int, word: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``[CLS] a [SEP] b [SEP]`` with segment ids 0 for ``[CLS] a [SEP]`` and 1 for ``b [SEP]`` (BERT's
    sentence-pair input), the longer side truncated to fit ``max_len``.

    With ``word`` (word-in-context data) the layout is ``[CLS] word [SEP] a [SEP] b [SEP]``, the word in
    segment 0. The word must reach the classifier — without it "same sense?" has no subject — and placing it
    first, closed by the [SEP] the model already reads as a boundary, (1) keeps the segment ids binary as in
    BERT (type_vocab_size 2), (2) never truncates it (truncation cuts the ends of a and b), and (3) needs no
    span pointer into a and b, which a plain [CLS] classifier (the paper's fine-tuning) does not have.
    A word longer than ``max_len // 4`` tokens is cut to that.
    """
    prefix = [] if word is None else [*word[: max_len // 4].tolist(), SEP]
    ta, tb = truncate_pair(len(a), len(b), max_len - 3 - len(prefix))
    tokens = np.array([CLS, *prefix, *a[: int(ta)].tolist(), SEP, *b[: int(tb)].tolist(), SEP], dtype=np.int64)
    segments = np.zeros(len(tokens), dtype=np.int64)
    segments[len(prefix) + int(ta) + 2 :] = 1
    return tokens, segments
