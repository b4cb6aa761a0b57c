"""Decoding: model-agnostic beam search and greedy search, and their adapter for :class:`~normlab.model.Seq2Seq`;
sampling from a decoder-only :class:`~normlab.model.CausalLM` with its KV cache (:func:`sample_lm`).

The search sees a model only through ``step_fn(tokens, cache) -> (log_probs, cache)`` (flax's ``decode.py``):
``tokens`` (rows,) holds the last token of every (sentence, beam) row, ``log_probs`` (rows, V) the next-token
log-probabilities. Rows are sentence-major: row ``n * K + k`` is beam ``k`` of active sentence ``n``. Between
steps the search reorders the cache with one index (beam selection and the removal of finished sentences
together): through ``cache.reorder(index)`` when the cache has that method (normlab's
:class:`~normlab.model.DecoderCache`), else by ``index_select(0, index)`` on every tensor of a pytree.

Semantics are fairseq's ``SequenceGenerator`` (``fairseq/sequence_generator.py`` and ``search.BeamSearch``),
so that scores and BLEU can be set beside the paper's (beam 5, length penalty 1.2, Appendix A.1):

* a step takes the ``2K`` best continuations over all beams of a sentence (by cumulative log-prob); an EOS
  among the first ``K`` of them is *finalized* (it leaves the beam); the next beams are the ``K`` best
  candidates that are not EOS, in rank order;
* a finished hypothesis scores ``sum(log p) / len ** lenpen`` where ``len`` counts its tokens *including*
  the EOS (fairseq's ``(step + 1) ** len_penalty``); ``lenpen > 1`` favours longer output;
* stopping rule (fairseq's ``is_finished``): a sentence is done once it has ``K`` finalized hypotheses, or at
  its maximum length. Unfinished beams are *not* checked for whether they could still beat the finalized
  ones (fairseq dropped that check, its old ``--no-early-stop``); this is the rule the paper's numbers were
  decoded with;
* the maximum length is ``floor(a * src_len + b)`` tokens before the EOS, per sentence, where ``src_len``
  counts the source's non-pad tokens including its EOS; at that step every token but EOS is forbidden, so a
  hypothesis has at most ``max_len + 1`` tokens. (fairseq takes ``src_len`` as the padded width of the whole
  batch, so its limit is the same for every sentence of a batch; per sentence does not depend on batching.)
  ``max_len_cap`` bounds it from above (the decoder's positions: ``max_positions - 1``);
* the EOS is forbidden before ``min_len`` generated tokens (fairseq's default 1: no empty output), PAD is
  never generated, NaN log-probs count as -inf, a hypothesis with score -inf is never finalized.

Finished sentences leave the batch at once (fairseq does the same), so a long sentence does not keep the
short ones' rows computing; the state below is indexed by *active* sentence.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils import _pytree as pytree

from normlab.data.batch import BOS, EOS, PAD
from normlab.device import autocast

__all__ = [
    "StepFn",
    "Hypotheses",
    "reorder_cache",
    "max_lengths",
    "beam_search",
    "greedy_search",
    "Seq2SeqState",
    "seq2seq_step_fn",
    "seq2seq_init",
    "translate_batch",
    "next_token",
    "sample_lm",
]

StepFn = Callable[[Tensor, Any], tuple[Tensor, Any]]
"""``step_fn(tokens (rows,) long, cache) -> (log_probs (rows, V), cache)``; the search may change a float32
``log_probs`` in place (it masks PAD, NaN and the length constraints there)."""


def reorder_cache(cache: Any, index: Tensor) -> Any:
    """Select rows ``index`` of a cache: ``cache.reorder(index)`` if it has that method, else
    ``index_select(0, index)`` on every tensor leaf of a pytree (dicts, lists, tuples, dataclasses registered
    with pytree); non-tensor leaves are kept. ``None`` stays ``None``."""
    if cache is None:
        return None
    if hasattr(cache, "reorder"):
        out = cache.reorder(index)
        return cache if out is None else out
    return pytree.tree_map_only(Tensor, lambda t: t.index_select(0, index), cache)


@dataclasses.dataclass
class Hypotheses:
    """The n-best list of every sentence, best first; a sentence may have fewer than ``N`` hypotheses
    (only when its beams reach the maximum length with scores of -inf), the empty slots have length 0."""

    tokens: Tensor  # (B, N, L) long: generated tokens ending with EOS (no BOS), right-padded with PAD
    lengths: Tensor  # (B, N) long: tokens of each hypothesis including its EOS
    scores: Tensor  # (B, N) float32: sum(positional_scores) / lengths ** lenpen; -inf in an empty slot
    positional_scores: Tensor  # (B, N, L) float32: log-prob of each token; 0 at padding

    def best(self, strip_eos: bool = True) -> list[list[int]]:
        """The best hypothesis of each sentence as a list of ids (without its EOS by default)."""
        out = []
        for toks, n in zip(self.tokens[:, 0].tolist(), self.lengths[:, 0].tolist()):
            out.append(toks[: max(n - 1, 0)] if strip_eos else toks[:n])
        return out

    def nbest(self, i: int) -> list[dict[str, Any]]:
        """Sentence ``i``'s hypotheses as fairseq writes them: tokens (with EOS), score, positional scores."""
        out = []
        for j in range(self.tokens.shape[1]):
            n = int(self.lengths[i, j])
            if n == 0:
                continue
            out.append(
                dict(
                    tokens=self.tokens[i, j, :n].tolist(),
                    score=float(self.scores[i, j]),
                    positional_scores=self.positional_scores[i, j, :n].tolist(),
                )
            )
        return out


def max_lengths(
    batch_size: int,
    src_lengths: Tensor | None,
    max_len_a: float,
    max_len_b: int,
    max_len_cap: int | None,
    device: torch.device | None = None,
) -> Tensor:
    """Per-sentence maximum number of generated tokens before the EOS: ``floor(a * src_len + b)``, capped."""
    if src_lengths is None:
        if max_len_a:
            raise ValueError("max_len_a needs src_lengths")
        lens = torch.full((batch_size,), int(max_len_b), dtype=torch.long, device=device)
    else:
        if src_lengths.shape != (batch_size,):
            raise ValueError(f"src_lengths has shape {tuple(src_lengths.shape)}, expected ({batch_size},)")
        lens = (max_len_a * src_lengths.double() + max_len_b).floor().long()
        if device is not None:
            lens = lens.to(device)
    if max_len_cap is not None:
        lens = lens.clamp(max=max_len_cap)
    return lens


@dataclasses.dataclass
class _Beams:
    """The active sentences' beams. At step 0 each sentence has one row (K0 = 1), then K."""

    sent: Tensor  # (N,) long: index in the batch of each active sentence
    max_len: Tensor  # (N,) long: its maximum length (tokens before the EOS)
    tokens: Tensor  # (N, Kc, t) long: tokens generated so far (no BOS)
    pos_scores: Tensor  # (N, Kc, t) float32: their log-probs
    scores: Tensor  # (N, Kc) float32: cumulative log-prob of each beam
    last: Tensor  # (N * Kc,) long: the input of the next step

    def select(self, keep: Tensor) -> _Beams:
        """Keep active sentences ``keep`` (indices into the N active ones)."""
        return _Beams(
            sent=self.sent[keep],
            max_len=self.max_len[keep],
            tokens=self.tokens[keep],
            pos_scores=self.pos_scores[keep],
            scores=self.scores[keep],
            last=self.last.view(self.sent.numel(), -1)[keep].reshape(-1),
        )


@dataclasses.dataclass
class _Finished:
    """Finalized hypotheses of every sentence of the batch, in order of finalization (fairseq's ``finalized``)."""

    tokens: Tensor  # (B, K, L) long, PAD-filled
    pos_scores: Tensor  # (B, K, L) float32
    scores: Tensor  # (B, K) float32, -inf where empty
    lengths: Tensor  # (B, K) long, 0 where empty
    count: Tensor  # (B,) long: how many slots are filled

    @classmethod
    def empty(cls, B: int, K: int, L: int, pad: int, device: torch.device) -> _Finished:
        return cls(
            tokens=torch.full((B, K, L), pad, dtype=torch.long, device=device),
            pos_scores=torch.zeros(B, K, L, device=device),
            scores=torch.full((B, K), -math.inf, device=device),
            lengths=torch.zeros(B, K, dtype=torch.long, device=device),
            count=torch.zeros(B, dtype=torch.long, device=device),
        )

    def sorted(self, nbest: int) -> Hypotheses:
        # stable sort: among equal scores the earlier finalized comes first (fairseq sorts a Python list)
        order = self.scores.sort(dim=1, descending=True, stable=True).indices[:, :nbest]
        L = max(int(self.lengths.max()), 1)
        take = order[:, :, None].expand(-1, -1, L)
        return Hypotheses(
            tokens=self.tokens[:, :, :L].gather(1, take),
            lengths=self.lengths.gather(1, order),
            scores=self.scores.gather(1, order),
            positional_scores=self.pos_scores[:, :, :L].gather(1, take),
        )


def _mask_log_probs(lp: Tensor, step: int, row_max_len: Tensor, min_len: int, eos: int, pad: int) -> Tensor:
    """fairseq's constraints on one step's log-probs (rows, V), float32, in place."""
    lp.masked_fill_(lp.isnan(), -math.inf)
    lp[:, pad] = -math.inf  # never generate PAD
    if step < min_len:
        lp[:, eos] = -math.inf
    at_max = row_max_len.le(step)  # (rows,): these rows must end now
    if bool(at_max.any()):
        eos_lp = lp[:, eos].clone()
        lp.masked_fill_(at_max[:, None], -math.inf)
        lp[:, eos] = eos_lp
    return lp


def _start(
    batch_size: int,
    slots: int,
    src_lengths: Tensor | None,
    max_len_a: float,
    max_len_b: int,
    max_len_cap: int | None,
    min_len: int,
    pad: int,
    device: torch.device | str | None,
) -> tuple[torch.device, Tensor, _Finished]:
    """What beam and greedy search both start from: the device (``src_lengths``' when not given), each
    sentence's maximum length (checked against ``min_len``) and an empty store of ``slots`` finished
    hypotheses per sentence."""
    if device is None:
        device = src_lengths.device if src_lengths is not None else torch.device("cpu")
    device = torch.device(device)
    max_len = max_lengths(batch_size, src_lengths, max_len_a, max_len_b, max_len_cap, device)
    if bool(max_len.lt(min_len).any()):
        raise ValueError(f"a maximum length ({int(max_len.min())}) is below min_len={min_len}")
    return device, max_len, _Finished.empty(batch_size, slots, int(max_len.max()) + 1, pad, device)


def beam_search(
    step_fn: StepFn,
    init_cache: Any,
    batch_size: int,
    *,
    beam_size: int = 5,
    lenpen: float = 1.2,
    src_lengths: Tensor | None = None,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    max_len_cap: int | None = None,
    min_len: int = 1,
    nbest: int | None = None,
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
    device: torch.device | str | None = None,
) -> Hypotheses:
    """Beam search with fairseq's semantics (module docstring); returns the ``nbest`` (default: all
    ``beam_size``) best finished hypotheses of each sentence.

    ``init_cache`` holds one row per sentence (``batch_size`` rows): the search calls ``step_fn`` once on
    those rows with BOS, then expands them to ``beam_size`` rows per sentence through the reorder (so a model
    computes its first step, e.g. the cross-attention keys of its encoder output, once per sentence).
    ``src_lengths`` (B,) are needed when ``max_len_a`` is not 0.
    """
    K = beam_size
    if K < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    nbest = K if nbest is None else nbest
    if not 1 <= nbest <= K:
        raise ValueError(f"nbest must be in [1, beam_size={K}], got {nbest}")
    device, max_len, fin = _start(batch_size, K, src_lengths, max_len_a, max_len_b, max_len_cap, min_len, pad, device)
    L = fin.tokens.shape[2]  # the longest maximum length, EOS included
    beams = _Beams(
        sent=torch.arange(batch_size, device=device),
        max_len=max_len,
        tokens=torch.empty(batch_size, 1, 0, dtype=torch.long, device=device),
        pos_scores=torch.empty(batch_size, 1, 0, device=device),
        scores=torch.zeros(batch_size, 1, device=device),
        last=torch.full((batch_size,), bos, dtype=torch.long, device=device),
    )
    cache = init_cache
    for step in range(L):
        lp, cache = step_fn(beams.last, cache)
        N, Kc = beams.scores.shape
        V = lp.shape[-1]
        if lp.shape[0] != N * Kc:
            raise ValueError(f"step_fn returned {lp.shape[0]} rows, expected {N * Kc}")
        if 2 * K > Kc * V:
            raise ValueError(f"beam_size={K} needs a vocabulary of at least {2 * K} tokens, got {V}")
        lp = _mask_log_probs(lp.float().contiguous(), step, beams.max_len.repeat_interleave(Kc), min_len, eos, pad)
        # the 2K best continuations of each sentence over all its beams (fairseq's BeamSearch.step)
        cand_scores, cand_idx = (beams.scores[:, :, None] + lp.view(N, Kc, V)).view(N, Kc * V).topk(2 * K)
        cand_beam, cand_tok = cand_idx.div(V, rounding_mode="floor"), cand_idx.remainder(V)
        cand_lp = lp.view(N, Kc * V).gather(1, cand_idx)
        is_eos = cand_tok.eq(eos) & cand_scores.ne(-math.inf)  # (N, 2K)

        # finalize the EOS among the K best, in rank order, while the sentence has room (fairseq's finalize_hypos)
        eos_top = is_eos[:, :K]
        if bool(eos_top.any()):
            rank = eos_top.long().cumsum(1) - 1
            accept = eos_top & rank.lt((K - fin.count[beams.sent])[:, None])
            n_i, c_i = accept.nonzero(as_tuple=True)
            s_i = beams.sent[n_i]
            slot = fin.count[s_i] + rank[n_i, c_i]
            b_i = cand_beam[n_i, c_i]
            fin.tokens[s_i, slot, :step] = beams.tokens[n_i, b_i]
            fin.tokens[s_i, slot, step] = eos
            fin.pos_scores[s_i, slot, :step] = beams.pos_scores[n_i, b_i]
            fin.pos_scores[s_i, slot, step] = cand_lp[n_i, c_i]
            fin.scores[s_i, slot] = cand_scores[n_i, c_i] / (step + 1) ** lenpen
            fin.lengths[s_i, slot] = step + 1
            fin.count[beams.sent] += accept.sum(1)
        done = fin.count[beams.sent].ge(K) | beams.max_len.le(step)  # (N,)
        if bool(done.all()):
            break

        # the next beams: the K best candidates that are not a finalized EOS, in rank order
        order = torch.arange(2 * K, device=device)
        active = (is_eos.long() * 2 * K + order).topk(K, dim=1, largest=False).indices  # (N, K) ascending
        new_beam = cand_beam.gather(1, active)
        t = beams.tokens.shape[2]
        hist = new_beam[:, :, None].expand(-1, -1, t)
        beams = _Beams(
            sent=beams.sent,
            max_len=beams.max_len,
            tokens=torch.cat([beams.tokens.gather(1, hist), cand_tok.gather(1, active)[:, :, None]], 2),
            pos_scores=torch.cat([beams.pos_scores.gather(1, hist), cand_lp.gather(1, active)[:, :, None]], 2),
            scores=cand_scores.gather(1, active),
            last=cand_tok.gather(1, active).view(-1),
        )
        rows = torch.arange(N, device=device)
        if bool(done.any()):  # drop finished sentences from the batch
            rows = (~done).nonzero().squeeze(1)
            beams = beams.select(rows)
            new_beam = new_beam[rows]
        # one reorder per step: old row (n * Kc + beam) for every new row (n' * K + k)
        cache = reorder_cache(cache, (rows[:, None] * Kc + new_beam).view(-1))
    return fin.sorted(nbest)


def greedy_search(
    step_fn: StepFn,
    init_cache: Any,
    batch_size: int,
    *,
    lenpen: float = 1.0,
    src_lengths: Tensor | None = None,
    max_len_a: float = 0.0,
    max_len_b: int = 200,
    max_len_cap: int | None = None,
    min_len: int = 1,
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
    device: torch.device | str | None = None,
) -> Hypotheses:
    """Greedy decoding: the arg-max token at each step, with the same constraints as :func:`beam_search`
    (it returns what ``beam_search(beam_size=1)`` returns; ``lenpen`` only scales the reported score).
    Sentences that emitted EOS leave the batch."""
    device, max_len, fin = _start(batch_size, 1, src_lengths, max_len_a, max_len_b, max_len_cap, min_len, pad, device)
    L = fin.tokens.shape[2]  # the longest maximum length, EOS included
    sent = torch.arange(batch_size, device=device)
    last = torch.full((batch_size,), bos, dtype=torch.long, device=device)
    cum = torch.zeros(batch_size, device=device)
    cache = init_cache
    for step in range(L):
        lp, cache = step_fn(last, cache)
        lp = _mask_log_probs(lp.float().contiguous(), step, max_len, min_len, eos, pad)
        best_lp, tok = lp.max(dim=1)
        fin.tokens[sent, 0, step] = tok
        fin.pos_scores[sent, 0, step] = best_lp
        cum = cum + best_lp
        ended = tok.eq(eos) & best_lp.ne(-math.inf)
        if bool(ended.any()):
            fin.scores[sent[ended], 0] = cum[ended] / (step + 1) ** lenpen
            fin.lengths[sent[ended], 0] = step + 1
        done = ended | max_len.le(step)
        if bool(done.all()):
            break
        if bool(done.any()):
            keep = (~done).nonzero().squeeze(1)
            sent, max_len, tok, cum = sent[keep], max_len[keep], tok[keep], cum[keep]
            cache = reorder_cache(cache, keep)
        last = tok
    # rows that never ended have only PAD-free garbage past their length; clear it
    pos = torch.arange(L, device=device)
    beyond = pos[None, None, :] >= fin.lengths[:, :, None]
    fin.tokens.masked_fill_(beyond, pad)
    fin.pos_scores.masked_fill_(beyond, 0.0)
    return fin.sorted(1)


# --------------------------------------------------------------------------------------------------------
# The adapter for normlab's Seq2Seq


@dataclasses.dataclass
class Seq2SeqState:
    """What a :class:`~normlab.model.Seq2Seq` carries between decoding steps.

    The decoder has one row per (sentence, beam); the encoder output, its padding mask and the
    cross-attention keys/values have one row per *sentence*, shared by that sentence's consecutive decoder
    rows (see :class:`~normlab.model.CrossAttention`), so they are copied only when sentences leave the batch.
    """

    enc: Any  # EncoderOut: encoder states (M, S, d) and source padding mask (M, S), one row per sentence
    cache: Any  # DecoderCache: self-attention keys/values (rows, H, t, hd); cross-attention (M, H, S, hd)
    rows: int  # decoder rows, a multiple of M

    def reorder(self, index: Tensor) -> Seq2SeqState:
        """New decoder row r takes old row ``index[r]``. If the new rows come in runs of equal length from one
        memory row each (beam search always), the memory stays shared, one row per run; otherwise every
        decoder row gets its own memory row (any ``index`` is valid)."""
        M = self.enc.out.shape[0]
        g = self.rows // M
        mem = index.div(g, rounding_mode="floor") if g > 1 else index
        runs, counts = torch.unique_consecutive(mem, return_counts=True)
        mem_index: Tensor | slice = runs if bool(counts.eq(counts[0]).all()) else mem
        if mem_index.shape[0] == M and bool(mem_index.eq(torch.arange(M, device=index.device)).all()):
            mem_index = slice(None)  # the same sentences: nothing to copy
        else:
            self.enc = self.enc.index_select(mem_index)
        self.cache.reorder(index, memory_index=mem_index)
        self.rows = index.shape[0]
        return self


def seq2seq_init(model: Any, src: Tensor) -> Seq2SeqState:
    """Encode ``src`` (B, S) once; the state has one row per sentence (the search expands it per beam)."""
    return Seq2SeqState(enc=model.encode(src), cache=model.init_cache(), rows=src.shape[0])


def seq2seq_step_fn(model: Any) -> StepFn:
    """``step_fn`` for a normlab ``Seq2Seq``: one incremental decoder step, log-softmax in float32
    (as fairseq: bf16 log-probs would tie many candidates)."""

    def step(tokens: Tensor, state: Seq2SeqState) -> tuple[Tensor, Seq2SeqState]:
        logits = model.decode(tokens[:, None], state.enc, state.cache)  # (rows, 1, V)
        return F.log_softmax(logits[:, -1].float(), dim=-1), state

    return step


@torch.inference_mode()
def translate_batch(
    model: Any,
    src: Tensor,
    *,
    beam_size: int = 5,
    lenpen: float = 1.2,
    max_len_a: float = 1.2,
    max_len_b: int = 10,
    min_len: int = 1,
    nbest: int = 1,
    bf16: bool = False,
) -> Hypotheses:
    """Translate a padded batch of sources ``src`` (B, S) (tokens + EOS, PAD on the right) with a normlab
    ``Seq2Seq``: beam search (greedy when ``beam_size == 1``) with the paper's beam 5 and length penalty
    1.2 by default, at most ``floor(max_len_a * src_len + max_len_b)`` tokens before the EOS (fairseq's WMT
    setting 1.2/10; its generator's own default is a=0, b=200).

    ``bf16`` runs the model under bf16 autocast (CPU or CUDA); the log-softmax and the search stay float32.
    """
    model.eval()
    cfg = model.cfg
    src_lengths = src.ne(cfg.pad_id).sum(1)
    kw = dict(
        src_lengths=src_lengths,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        max_len_cap=cfg.max_positions - 1,  # the decoder's input at the last step sits at position max_len
        min_len=min_len,
        bos=BOS,
        eos=EOS,
        pad=cfg.pad_id,
        device=src.device,
    )
    with autocast(src.device, torch.bfloat16 if bf16 else None):
        state = seq2seq_init(model, src)
        step = seq2seq_step_fn(model)
        if beam_size == 1:
            return greedy_search(step, state, src.shape[0], lenpen=lenpen, **kw)
        return beam_search(step, state, src.shape[0], beam_size=beam_size, lenpen=lenpen, nbest=nbest, **kw)


# --------------------------------------------------------------------------------------------------------
# Sampling from a decoder-only language model


def next_token(logits: Tensor, *, temperature: float = 1.0, top_k: int = 0, generator: torch.Generator | None = None,
               pad: int = PAD) -> Tensor:  # fmt: skip
    """One token per row of ``logits`` (rows, V): the arg-max at ``temperature`` 0, else a draw from
    softmax(logits / temperature) restricted to the ``top_k`` largest logits (0: all; Fan et al. 2018's top-k
    sampling). PAD is never drawn. The softmax is taken in float32."""
    if temperature < 0 or top_k < 0:
        raise ValueError(f"temperature and top_k must be >= 0, got {temperature} and {top_k}")
    x = logits.float().clone()
    x[:, pad] = -math.inf
    if temperature == 0:
        return x.argmax(-1)
    x = x / temperature
    if 0 < top_k < x.shape[-1]:
        kth = x.topk(top_k, dim=-1).values[:, -1:]
        x = x.masked_fill(x < kth, -math.inf)  # ties with the k-th largest stay: none is preferred over another
    return torch.multinomial(torch.softmax(x, dim=-1), 1, generator=generator).squeeze(1)


@torch.inference_mode()
def sample_lm(
    model: Any,
    prompt: Sequence[int],
    *,
    samples: int = 1,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    top_k: int = 0,
    seed: int = 0,
    eos: int = EOS,
    bf16: bool = False,
) -> list[list[int]]:
    """``samples`` continuations of ``prompt`` (token ids, at least one) from a normlab ``CausalLM``: the prompt
    is run once through the model (its keys and values cached), then one token per step, each step computing only
    the new position against the cache (:class:`~normlab.model.DecoderCache`). A row stops at EOS (not included
    in its output) or after ``max_new_tokens``, and no later than the model's ``max_positions``. Tokens are drawn
    by :func:`next_token` from a generator seeded with ``seed`` (the same seed gives the same samples)."""
    cfg = model.cfg
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    if samples < 1 or max_new_tokens < 1:
        raise ValueError(f"samples and max_new_tokens must be >= 1, got {samples} and {max_new_tokens}")
    room = cfg.max_positions - len(prompt)
    if room < 1:
        raise ValueError(f"a prompt of {len(prompt)} tokens leaves no position to generate (max_positions="
                         f"{cfg.max_positions})")
    n = min(max_new_tokens, room)
    device = next(model.parameters()).device
    g = torch.Generator(device=device).manual_seed(seed)
    model.eval()
    cache = model.init_cache()
    x = torch.as_tensor(list(prompt), dtype=torch.long, device=device)[None].expand(samples, -1)
    out = torch.full((samples, n), PAD, dtype=torch.long, device=device)
    done = torch.zeros(samples, dtype=torch.bool, device=device)
    with autocast(device, torch.bfloat16 if bf16 else None):
        logits = model(x, cache=cache)[:, -1]  # the prompt, once
        for step in range(n):
            tok = next_token(logits, temperature=temperature, top_k=top_k, generator=g, pad=cfg.pad_id)
            out[:, step] = tok.masked_fill(done, PAD)
            done |= tok.eq(eos)
            if bool(done.all()) or step == n - 1:
                break
            logits = model(tok[:, None], cache=cache)[:, -1]  # one new position against the cache
    rows = []
    for row in out.tolist():
        row = row[: row.index(eos)] if eos in row else row
        rows.append([t for t in row if t != PAD])
    return rows
