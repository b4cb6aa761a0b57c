"""Data: vendored corpora and users' files, sentencepiece BPE, token-bucketed batches, MLM, LM and pair tasks."""

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
    LMBatch,
    MLMBatch,
    TranslationBatch,
)
from normlab.data.corpora import DataError, data_root
from normlab.data.datasets import (
    ClassificationDataset,
    Dataset,
    LMDataset,
    MLMDataset,
    Prepared,
    TranslationDataset,
    fingerprint,
    prepare,
)
from normlab.data.tokenizer import Tokenizer

__all__ = [
    "PAD", "UNK", "BOS", "EOS", "CLS", "SEP", "MASK", "SPECIAL_TOKENS",
    "Batch", "TranslationBatch", "MLMBatch", "ClassificationBatch", "LMBatch",
    "prepare", "fingerprint", "Prepared", "Dataset", "TranslationDataset", "MLMDataset", "ClassificationDataset",
    "LMDataset",
    "Tokenizer", "DataError", "data_root",
]  # fmt: skip
