"""Sentencepiece BPE with normlab's fixed special ids, trained once per corpus and cached.

Settings, and why:

* ``model_type="bpe"``, one vocabulary learnt on source and target together (the paper's IWSLT14 setting:
  a joint BPE of 10k, Appendix A.1);
* ``normalization_rule_name="identity"``, ``remove_extra_whitespaces=False`` and ``byte_fallback=True``:
  sentencepiece's default NFKC normalisation and whitespace folding change the text (``ﬁ`` → ``fi``, two spaces
  → one), and characters outside the vocabulary would become ``<unk>``; with these three, every string is
  encoded without loss, so ``decode(encode(x)) == x`` and BLEU is computed on the exact reference text;
* the special ids are fixed (normlab/data/batch.py): pad 0, unk 1, bos 2, eos 3 through sentencepiece's own
  ``*_id`` options, and cls 4, sep 5, mask 6 as *control* symbols. Control symbols, unlike
  ``user_defined_symbols``, are never produced from text: a corpus that contains the characters ``[MASK]``
  (Python docs do) gets them as ordinary pieces instead of the mask id. The ids are checked after training
  and on every load.

One string does not come back: sentencepiece writes spaces as U+2581 (``▁``), so that character in the input
decodes as a space. None of the vendored corpora contains it (checked: 0 lines in every file).
"""

from __future__ import annotations

import hashlib
import io
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from normlab.data.batch import BOS, CLS, EOS, MASK, PAD, SEP, SPECIAL_TOKENS, UNK
from normlab.data.corpora import DataError
from normlab.files import write_atomic

log = logging.getLogger("normlab.data")

NUM_SPECIAL = len(SPECIAL_TOKENS)  # ids below this are special; the rest are text pieces (masking draws from them)
_CONTROL = ("[CLS]", "[SEP]", "[MASK]")
SEED = 0  # the seed of the training-sentence sample; part of the cache key

SETTINGS = dict(
    model_type="bpe",
    pad_id=PAD, unk_id=UNK, bos_id=BOS, eos_id=EOS,
    pad_piece="<pad>", unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
    control_symbols=list(_CONTROL),
    normalization_rule_name="identity",
    remove_extra_whitespaces=False,
    byte_fallback=True,
    character_coverage=0.9995,  # the rarest 0.05% of characters are spelt in bytes rather than given pieces
    max_sentence_length=1 << 16,  # en-mono's paragraphs run to 15k bytes; the default (4192) drops them
)  # fmt: skip


def _threads() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


class Tokenizer:
    """A sentencepiece model with normlab's special ids.

    ``encode`` adds no bos/eos (the datasets place them, see batch.py); ``decode`` stops at the first eos and
    skips pad and bos, so a decoder's output row decodes as it is.
    """

    pad_id, unk_id, bos_id, eos_id, cls_id, sep_id, mask_id = PAD, UNK, BOS, EOS, CLS, SEP, MASK

    def __init__(self, model_proto: bytes, *, name: str = "<memory>") -> None:
        self.proto = model_proto
        self.sp = spm.SentencePieceProcessor(model_proto=model_proto)
        self.name = name
        self.digest = hashlib.sha256(model_proto).hexdigest()[:16]  # names the binarized splits it made
        found = {piece: self.sp.piece_to_id(piece) for piece in SPECIAL_TOKENS}
        wrong = {piece: i for piece, i in found.items() if i != SPECIAL_TOKENS[piece]}
        if wrong:
            raise DataError(f"tokenizer {name}: special ids {wrong} differ from normlab's {SPECIAL_TOKENS}")

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        path = Path(path).expanduser()
        try:
            return cls(path.read_bytes(), name=str(path))
        except (OSError, RuntimeError) as e:
            raise DataError(f"tokenizer {path}: cannot load ({e})") from None

    @property
    def vocab_size(self) -> int:
        return int(self.sp.get_piece_size())

    def encode(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.sp.encode(list(texts), num_threads=_threads())

    def encode_arrays(self, texts: Sequence[str], chunk: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
        """Encode ``texts`` to a flat token array and offsets (``tokens[offsets[i]:offsets[i+1]]`` is text i)."""
        dtype = np.uint16 if self.vocab_size <= 1 << 16 else np.int32
        flats, lengths = [], []
        for start in range(0, len(texts), chunk):
            enc = self.encode_batch(texts[start : start + chunk])
            lens = np.fromiter(map(len, enc), dtype=np.int64, count=len(enc))
            flats.append(np.fromiter(itertools.chain.from_iterable(enc), dtype=dtype, count=int(lens.sum())))
            lengths.append(lens)
        offsets = np.zeros(len(texts) + 1, dtype=np.int64)
        if texts:
            np.cumsum(np.concatenate(lengths), out=offsets[1:])
        return (np.concatenate(flats) if flats else np.zeros(0, dtype)), offsets

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first eos; pad and bos are skipped (a tensor or array is fine)."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()  # type: ignore[union-attr]
        out = []
        for i in ids:
            if i == EOS:
                break
            if i != PAD and i != BOS:
                out.append(int(i))
        return self.sp.decode(out)

    def id_to_piece(self, i: int) -> str:
        return self.sp.id_to_piece(int(i))

    def __repr__(self) -> str:
        return f"Tokenizer({self.name}, vocab_size={self.vocab_size})"


def train(sentences: Sequence[str], vocab_size: int, max_sentences: int = 0) -> bytes:
    """Train a BPE model on ``sentences`` (a seeded sample of ``max_sentences`` of them when > 0); returns the
    serialised model. Sampling here rather than in sentencepiece keeps the result a function of the inputs."""
    if max_sentences and len(sentences) > max_sentences:
        keep = np.sort(np.random.default_rng(SEED).choice(len(sentences), max_sentences, replace=False))
        sentences = [sentences[i] for i in keep]
    model = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            num_threads=_threads(),
            input_sentence_size=0,
            minloglevel=2,
            **SETTINGS,
        )
    except RuntimeError as e:  # e.g. "Vocabulary size is too high (10000). Please set it to a value <= 2361."
        message = (f"tokenizer training failed on {len(sentences)} sentences: {e} (DataConfig.vocab_size: --set "
                   "data.vocab_size=N; below that maximum, `normlab data --set data.vocab_size=N` says how many of the "
                   "pieces occur in the training split, and warns when most do not)")
        raise DataError(message) from None
    return model.getvalue()


def train_or_load(
    cache_dir: Path, key: str, sentences: Callable[[], Sequence[str]], vocab_size: int, max_sentences: int
) -> Tokenizer:
    """The tokenizer cached under ``key``; trained on ``sentences()`` and cached first when it is not there."""
    path = tokenizer_path(cache_dir, key)
    if path.is_file():
        return Tokenizer.load(path)
    proto = train(sentences(), vocab_size, max_sentences)
    tok = Tokenizer(proto, name=str(path))  # checks the special ids before anything is written
    write_atomic(path, proto)
    log.info("trained tokenizer %s (vocab %d)", path, tok.vocab_size)
    return tok


def tokenizer_path(cache_dir: Path, key: str) -> Path:
    return cache_dir / "tokenizers" / f"spm-bpe-{key}.model"


def settings_key() -> dict:
    """What, besides the training text, determines a trained model (part of the cache key)."""
    return {"sentencepiece": spm.__version__, "seed": SEED, **SETTINGS}
