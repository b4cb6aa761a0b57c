"""Token-bucketed batches, as fairseq's ``batch_by_size`` and ``LanguagePairDataset.ordered_indices``.

An epoch's batches are a pure function of ``(sizes, seed, epoch, max_tokens)``: the examples are shuffled,
sorted by length (the shuffle breaks ties, so equal-length examples meet different neighbours every epoch),
cut greedily into batches of at most ``max_tokens`` tokens *padding included* (``len(batch) * max(size)``,
fairseq's ``max_tokens`` rule), and the batches are shuffled. Resuming is skipping the first k batches of the
same list; data parallelism cuts each global batch into contiguous per-rank pieces of similar token counts.
"""

from __future__ import annotations

import numpy as np

from normlab.data.corpora import DataError


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, epoch, 0x6E6C])  # "nl": a stream of its own


def length_order(
    sizes: np.ndarray, keys: tuple[np.ndarray, ...] = (), rng: np.random.Generator | None = None
) -> np.ndarray:
    """Indices sorted by ``sizes`` (then by each of ``keys``, then at random when ``rng`` is given, else by
    index)."""
    n = len(sizes)
    perm = rng.permutation(n) if rng is not None else np.arange(n)
    # np.lexsort sorts by its last key first; a stable sort of a shuffled array breaks ties at random
    order = np.lexsort([k[perm] for k in reversed(keys)] + [sizes[perm]])
    return perm[order]


def batch_by_size(order: np.ndarray, sizes: np.ndarray, max_tokens: int, max_sentences: int = 0) -> list[np.ndarray]:
    """Cut ``order`` (non-decreasing ``sizes[order]``) into the fewest consecutive batches with
    ``len(batch) * max(size) <= max_tokens`` (and ``len(batch) <= max_sentences`` when that is > 0), greedily
    from the short end."""
    s = sizes[order]
    n = len(s)
    if n and s[-1] > max_tokens:
        raise DataError(
            f"an example of {int(s[-1])} tokens exceeds max_tokens={max_tokens} (raise DataConfig.max_tokens, or "
            "lower the model's max_positions so that longer examples are dropped)"
        )
    batches = []
    i = 0
    while i < n:
        # (j - i + 1) * s[j] is non-decreasing in j (s is): binary search the last j that fits
        lo, hi = i, min(n, i + max_tokens // int(s[i]), i + (max_sentences or n)) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if (mid - i + 1) * int(s[mid]) <= max_tokens:
                lo = mid
            else:
                hi = mid - 1
        batches.append(order[i : lo + 1])
        i = lo + 1
    return batches


def epoch_batches(
    sizes: np.ndarray,
    *,
    epoch: int,
    seed: int,
    max_tokens: int,
    shuffle: bool = True,
    keys: tuple[np.ndarray, ...] = (),
    max_sentences: int = 0,
) -> list[np.ndarray]:
    """The global batches of one epoch (arrays of example indices), deterministic for ``(seed, epoch)``.

    ``shuffle=False`` (evaluation): sorted by length, ties by index, batches in length order.
    """
    rng = epoch_rng(seed, epoch) if shuffle else None
    batches = batch_by_size(length_order(sizes, keys, rng), sizes, max_tokens, max_sentences)
    if rng is not None:
        batches = [batches[k] for k in rng.permutation(len(batches))]
    return batches


def shard(indices: np.ndarray, sizes: np.ndarray, rank: int, world: int) -> np.ndarray:
    """The part of the global batch ``indices`` that belongs to data-parallel ``rank`` of ``world``.

    The batch is cut into ``world`` contiguous pieces whose token counts are as close to equal as the cut
    points allow; every rank gets at least one example, and the pieces in rank order concatenate to
    ``indices``. A batch with fewer examples than ranks is an error (every rank must have work, or the
    collective operations of the step would wait forever); raise ``max_tokens``.
    """
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in [0, world={world})")
    n = len(indices)
    if world == 1:
        return indices
    if n < world:
        raise DataError(
            f"a global batch of {n} examples cannot give each of {world} ranks one (raise DataConfig.max_tokens)"
        )
    cum = np.cumsum(sizes[indices])
    targets = cum[-1] * np.arange(1, world) / world
    cuts = np.searchsorted(cum, targets)  # cum[c-1] < target <= cum[c]: the cut goes after c or after c+1
    closer = np.abs(cum[np.minimum(cuts, n - 1)] - targets) < np.abs(cum[np.maximum(cuts - 1, 0)] - targets)
    cuts = cuts + closer.astype(np.int64)
    bounds = [0]
    for k in range(world - 1):  # at least one example per rank, and room for one on each later rank
        bounds.append(int(min(max(cuts[k], bounds[-1] + 1), n - (world - 1 - k))))
    bounds.append(n)
    return indices[bounds[rank] : bounds[rank + 1]]
