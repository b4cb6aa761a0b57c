"""Data: vendored corpora and users' files, sentencepiece BPE, token-bucketed batches, MLM and pair tasks."""

from normlab.data.batch import (
    BOS,
    CLS,
    EOS,
    MASK,
    PAD,
    SEP,
    SPECIAL_TOKENS,
    UNK,
    Batch,
    ClassificationBatch,
    MLMBatch,
    TranslationBatch,
)

__all__ = [
    "PAD", "UNK", "BOS", "EOS", "CLS", "SEP", "MASK", "SPECIAL_TOKENS",
    "Batch", "TranslationBatch", "MLMBatch", "ClassificationBatch",
]  # fmt: skip
