"""Batches: what the data pipeline hands to the trainer, the analyses and the decoder.

Special token ids are fixed across tokenizers (sentencepiece is trained with these ids):
pad 0, unk 1, bos 2, eos 3, and for the encoder-only tasks cls 4, sep 5, mask 6.

Every batch has ``n_tokens`` (the number of target positions its loss is summed over: non-pad target tokens
for translation and the language model, masked positions for the masked LM, sentences for classification) so that losses can be
normalised by the *global* count across data-parallel ranks, and ``to(device)``.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor

PAD, UNK, BOS, EOS, CLS, SEP, MASK = 0, 1, 2, 3, 4, 5, 6
SPECIAL_TOKENS = {"<pad>": PAD, "<unk>": UNK, "<s>": BOS, "</s>": EOS, "[CLS]": CLS, "[SEP]": SEP, "[MASK]": MASK}


class _Movable:
    def to(self, device: torch.device | str, non_blocking: bool = False):
        changes = {
            f.name: getattr(self, f.name).to(device, non_blocking=non_blocking)
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if isinstance(getattr(self, f.name), Tensor)
        }
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


@dataclasses.dataclass(frozen=True)
class TranslationBatch(_Movable):
    src: Tensor  # (B, S) long: source tokens + eos, right-padded with PAD
    tgt_in: Tensor  # (B, T) long: bos + target tokens (teacher forcing input), right-padded
    tgt_out: Tensor  # (B, T) long: target tokens + eos, PAD where there is no target
    ids: Tensor  # (B,) long: example indices in their split (to write outputs back in order)
    n_tokens: int  # non-pad positions of tgt_out

    @property
    def n_sentences(self) -> int:
        return int(self.src.shape[0])


@dataclasses.dataclass(frozen=True)
class MLMBatch(_Movable):
    tokens: Tensor  # (B, T) long: cls + block tokens (+ sep), masked as BERT (80% MASK, 10% random, 10% kept)
    segments: Tensor  # (B, T) long: segment ids (0 everywhere for plain text blocks)
    targets: Tensor  # (B, T) long: the original token at masked positions, PAD elsewhere (loss ignores PAD)
    n_tokens: int  # masked positions

    @property
    def n_sentences(self) -> int:
        return int(self.tokens.shape[0])


@dataclasses.dataclass(frozen=True)
class ClassificationBatch(_Movable):
    tokens: Tensor  # (B, T) long: cls a sep b sep, right-padded
    segments: Tensor  # (B, T) long: 0 for cls a sep, 1 for b sep
    labels: Tensor  # (B,) long
    ids: Tensor  # (B,) long
    n_tokens: int  # sentences (the loss is a mean over sentences)

    @property
    def n_sentences(self) -> int:
        return int(self.tokens.shape[0])


@dataclasses.dataclass(frozen=True)
class LMBatch(_Movable):
    tokens: Tensor  # (B, T) long: a block of running text (the model's input), right-padded with PAD
    targets: Tensor  # (B, T) long: the next token of each position (tokens shifted by one), PAD where there is none
    n_tokens: int  # non-pad targets

    @property
    def n_sentences(self) -> int:
        return int(self.tokens.shape[0])


Batch = TranslationBatch | MLMBatch | ClassificationBatch | LMBatch
