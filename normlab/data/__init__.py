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
from normlab.data.corpora import DataError, data_root
from normlab.data.datasets import (
    ClassificationDataset,
    Dataset,
    MLMDataset,
    Prepared,
    TranslationDataset,
    fingerprint,
    prepare,
)
from normlab.data.tokenizer import Tokenizer

__all__ = [
    "PAD", "UNK", "BOS", "EOS", "CLS", "SEP", "MASK", "SPECIAL_TOKENS",
    "Batch", "TranslationBatch", "MLMBatch", "ClassificationBatch",
    "prepare", "fingerprint", "Prepared", "Dataset", "TranslationDataset", "MLMDataset", "ClassificationDataset",
    "Tokenizer", "DataError", "data_root",
]  # fmt: skip
