"""Corpora: where the files of a corpus are, and readers that check them.

A corpus is a vendored name (``de-en``, ``en-mono``, ``paraphrase``, ``wic``: package data in
``normlab/assets/corpora/``, see its README.md) or a directory of the user's own files, one file (or file pair) per split:

=============== ========================================================================================
task            files of a split (``train`` and ``valid`` required, ``test`` optional)
=============== ========================================================================================
translation     ``{split}.tsv`` with a header naming the language columns (``source  de  en``), or
                fairseq-style raw text ``{split}.{source_lang}`` + ``{split}.{target_lang}``, line i of one
                the translation of line i of the other
mlm, lm         ``{split}.txt``: one paragraph (document) per line
classification  ``{split}.tsv`` with a header: ``label a b`` (paraphrase) or ``label word a b`` (wic)
=============== ========================================================================================

Any file may be compressed (``.xz``, ``.gz``, ``.bz2``: the vendored files are xz). Readers return plain
Python lists; every problem is a :class:`DataError` of one line that names the file and, where it applies,
the line number. Readers never write: a bad corpus leaves the cache untouched.
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import logging
import lzma
from pathlib import Path

import numpy as np

from normlab.assets import corpora_root
from normlab.config import TEXT_TASKS, VENDORED_CORPORA, ConfigError, DataConfig, corpus_serves

log = logging.getLogger("normlab.data")

SPLITS = ("train", "valid", "test")
REQUIRED_SPLITS = ("train", "valid")
COMPRESSED = {".xz": lzma.decompress, ".gz": gzip.decompress, ".bz2": bz2.decompress}

# Where each vendored corpus lies under the data root, and its files (a test checks that they are all there).
VENDORED_DIRS = {"de-en": "de-en", "en-mono": "en-mono", "paraphrase": "tasks/paraphrase", "wic": "tasks/wic"}
VENDORED_FILES = (
    "de-en/train.tsv.xz", "de-en/valid.tsv.xz", "de-en/test.tsv.xz",
    "en-mono/train.txt.xz", "en-mono/valid.txt.xz",
    "tasks/paraphrase/train.tsv.xz", "tasks/paraphrase/valid.tsv.xz", "tasks/paraphrase/test.tsv.xz",
    "tasks/wic/train.tsv.xz", "tasks/wic/valid.tsv.xz", "tasks/wic/test.tsv.xz",
    "README.md",
)  # fmt: skip


class DataError(ConfigError):
    """A corpus normlab refuses (one line: what is wrong and where). Nothing has been written when it is raised.

    A :class:`ConfigError` (so a ``ValueError``): the data a config points to is part of the configuration, and
    the CLI turns both into one line on stderr and exit status 2."""


def data_root() -> Path:
    """The vendored corpora: ``$NORMLAB_DATA``, else the package data ``normlab/assets/corpora`` (found through
    importlib.resources, so in a wheel's install as in a checkout)."""
    return corpora_root()


# --------------------------------------------------------------------------------------------------------
# Locating the files of a corpus


@dataclasses.dataclass(frozen=True)
class Corpus:
    """The files of one corpus: ``splits[name]`` is one file (TSV, text) or two (raw source, raw target)."""

    name: str  # the vendored name, or the directory as given
    root: Path
    task: str
    format: str  # "tsv" or "raw"
    splits: dict[str, tuple[Path, ...]]

    def files(self) -> list[Path]:
        return [p for paths in self.splits.values() for p in paths]


def _find(directory: Path, stem: str) -> Path | None:
    for suffix in ("", *COMPRESSED):
        path = directory / f"{stem}{suffix}"
        if path.is_file():
            return path
    return None


def _root(name: str) -> Path:
    if name in VENDORED_CORPORA:
        root = data_root() / VENDORED_DIRS[name]
        if not root.is_dir():
            raise DataError(f"vendored corpus {name!r} not found at {root} (set NORMLAB_DATA to a folder of the corpora)")
        return root
    root = Path(name).expanduser()
    if not root.is_dir():
        raise DataError(f"corpus {name!r} is neither a vendored corpus ({', '.join(VENDORED_CORPORA)}) nor a directory")
    return root


def locate(cfg: DataConfig) -> Corpus:
    """The files of ``cfg.corpus_name`` for ``cfg.task``; a :class:`DataError` when a required split is missing."""
    name = cfg.corpus_name
    if name in VENDORED_CORPORA and not corpus_serves(name, cfg.task):
        raise DataError(f"{name!r} is a {VENDORED_CORPORA[name]} corpus, not a {cfg.task} one")
    return _locate(cfg, name, _root(name), cfg.task, REQUIRED_SPLITS)


def locate_tokenizer_corpus(cfg: DataConfig, name: str) -> Corpus:
    """The train split of the corpus a tokenizer is trained on (``DataConfig.tokenizer``), whatever its task: a
    vendored corpus has its own; for a directory, ``train.txt`` is running text, a ``train.tsv`` whose header
    has a ``label`` column sentence pairs, any other ``train.tsv`` or ``train.{source_lang}`` parallel text."""
    root = _root(name)
    if name in VENDORED_CORPORA:
        task = VENDORED_CORPORA[name]
    elif _find(root, "train.txt"):
        task = "mlm"
    elif (path := _find(root, "train.tsv")) is not None:
        task = "classification" if "label" in read_lines(path)[0].split("\t") else "translation"
    else:
        task = "translation"
    return _locate(cfg.replace(format="auto"), name, root, task, ("train",))


def _locate(cfg: DataConfig, name: str, root: Path, task: str, required: tuple[str, ...]) -> Corpus:
    if task == "translation":
        fmt = cfg.format
        if fmt == "auto":
            fmt = "tsv" if _find(root, "train.tsv") else "raw"
        if fmt == "tsv":
            stems = {split: (f"{split}.tsv",) for split in SPLITS}
        else:
            stems = {split: (f"{split}.{cfg.source_lang}", f"{split}.{cfg.target_lang}") for split in SPLITS}
    elif task in TEXT_TASKS:
        if cfg.format == "tsv":
            raise DataError(f"{root}: running text for {task} is raw (one paragraph per line in {{split}}.txt), not tsv")
        fmt, stems = "raw", {split: (f"{split}.txt",) for split in SPLITS}
    else:
        if cfg.format == "raw":
            raise DataError(f"{root}: sentence-pair classification reads TSV ({{split}}.tsv), not raw text")
        fmt, stems = "tsv", {split: (f"{split}.tsv",) for split in SPLITS}
    splits: dict[str, tuple[Path, ...]] = {}
    for split, names in stems.items():
        found = [_find(root, stem) for stem in names]
        if all(found):
            splits[split] = tuple(found)  # type: ignore[arg-type]
        elif split in required or any(found):
            missing = [stem for stem, path in zip(names, found) if path is None]
            raise DataError(f"{root}: no {' or '.join(missing)} (nor .xz/.gz/.bz2) for the {split} split ({fmt})")
    return Corpus(name=name, root=root, task=task, format=fmt, splits=splits)


# --------------------------------------------------------------------------------------------------------
# Lines


def read_lines(path: Path) -> list[str]:
    """The lines of a (possibly compressed) UTF-8 file, without their line ends (``\\n`` or ``\\r\\n``).

    Only ``\\n`` ends a line (as in fairseq and sentencepiece), not the other characters ``str.splitlines``
    splits at (``\\x0b``, ``\\x1c``, U+2028, ...), so that the line numbers of errors match an editor's.
    """
    raw = path.read_bytes()
    decompress = COMPRESSED.get(path.suffix)
    if decompress is not None:
        try:
            raw = decompress(raw)
        except (lzma.LZMAError, OSError, EOFError, ValueError) as e:
            raise DataError(f"{path}: cannot decompress ({type(e).__name__}: {e})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise DataError(f"{path}:{line}: invalid UTF-8 (byte 0x{raw[e.start]:02x} at byte column {column})") from None
    if text.startswith("\ufeff"):  # a byte-order mark is not text
        text = text[1:]
    if not text.strip():
        raise DataError(f"{path}: empty file")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start an empty one
    if "\r\n" in text:
        lines = [line.removesuffix("\r") for line in lines]
    return lines


def _blank(text: str) -> bool:
    return not text.strip()


def _log_dropped(path: Path | str, dropped: int, total: int, why: str) -> None:
    if dropped:
        log.warning("%s: dropped %d of %d examples: %s", path, dropped, total, why)


# --------------------------------------------------------------------------------------------------------
# Readers


@dataclasses.dataclass
class Parallel:
    """Sentence pairs of one split (empty pairs already dropped and counted); ``rows``: each kept pair's data row
    in its file (0-based: a raw file's lines, a TSV's rows after its header), so that what is written per example
    (evaluate's .hyp) can keep the file's lines."""

    src: list[str]
    tgt: list[str]
    dropped_empty: int = 0
    rows: list[int] | None = None


@dataclasses.dataclass
class Mono:
    """Paragraphs of one split (empty lines dropped and counted)."""

    text: list[str]
    dropped_empty: int = 0


@dataclasses.dataclass
class Pairs:
    """Labelled sentence pairs of one split; ``word`` only for word-in-context data."""

    labels: np.ndarray  # (N,) int64 class ids, in the order of DataConfig.labels
    a: list[str]
    b: list[str]
    word: list[str] | None = None
    dropped_empty: int = 0
    rows: list[int] | None = None  # each kept example's data row (0-based, after the header), as Parallel's


def _tsv_rows(path: Path, lines: list[str], header: list[str]) -> list[list[str]]:
    """Split the data lines (1..) at tabs; every line must have as many columns as the header."""
    n = len(header)
    rows = []
    for lineno, line in enumerate(lines[1:], start=2):
        if line == "":
            rows.append([])  # an empty line: dropped (and counted) by the caller, not a column error
            continue
        fields = line.split("\t")
        if len(fields) != n:
            kind = "missing" if len(fields) < n else "extra"
            raise DataError(
                f"{path}:{lineno}: {kind} columns: {len(fields)} tab-separated fields, the header has {n} "
                f"({' '.join(header)})"
            )
        rows.append(fields)
    if not rows:
        raise DataError(f"{path}: empty file (a header and no examples)")
    return rows


def _header_index(path: Path, header: list[str], column: str, what: str) -> int:
    if column not in header:
        raise DataError(f"{path}:1: the header ({' '.join(header)}) has no {column!r} column ({what})")
    return header.index(column)


def read_parallel_tsv(path: Path, source_lang: str, target_lang: str) -> Parallel:
    """A TSV whose header names the language columns (the vendored de-en: ``source  de  en``)."""
    lines = read_lines(path)
    header = lines[0].split("\t")
    i = _header_index(path, header, source_lang, "DataConfig.source_lang")
    j = _header_index(path, header, target_lang, "DataConfig.target_lang")
    rows = _tsv_rows(path, lines, header)
    keep = [k for k, r in enumerate(rows) if r and not _blank(r[i]) and not _blank(r[j])]
    _log_dropped(path, len(rows) - len(keep), len(rows), "empty source or target")
    if not keep:
        raise DataError(f"{path}: no non-empty sentence pair")
    return Parallel([rows[k][i] for k in keep], [rows[k][j] for k in keep], len(rows) - len(keep), keep)


def read_parallel_raw(src_path: Path, tgt_path: Path) -> Parallel:
    """fairseq-style raw text: line i of ``src_path`` translates to line i of ``tgt_path``."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise DataError(
            f"parallel files differ in length: {src_path} has {len(src)} lines, {tgt_path} has {len(tgt)}"
        )
    keep = [k for k in range(len(src)) if not _blank(src[k]) and not _blank(tgt[k])]
    _log_dropped(f"{src_path} + {tgt_path}", len(src) - len(keep), len(src), "empty source or target line")
    if not keep:
        raise DataError(f"{src_path}, {tgt_path}: no non-empty sentence pair")
    return Parallel([src[k] for k in keep], [tgt[k] for k in keep], len(src) - len(keep), keep)


def read_mono(path: Path) -> Mono:
    """Running text, one paragraph per line; empty lines (paragraph breaks) are dropped and counted."""
    lines = read_lines(path)
    keep = [line for line in lines if not _blank(line)]
    if len(keep) < len(lines):
        log.info("%s: skipped %d empty of %d lines", path, len(lines) - len(keep), len(lines))
    return Mono(keep, len(lines) - len(keep))


def read_pairs(path: Path, labels: tuple[str, ...] | None) -> Pairs:
    """Sentence-pair classification TSV with a header: ``label a b`` or ``label word a b`` (other columns are
    ignored). A label outside ``labels`` is an error naming the line; ``labels=None`` reads the text only
    (for a tokenizer) and leaves the labels at 0."""
    lines = read_lines(path)
    header = lines[0].split("\t")
    li = _header_index(path, header, "label", "the class label")
    ai = _header_index(path, header, "a", "the first sentence")
    bi = _header_index(path, header, "b", "the second sentence")
    wi = header.index("word") if "word" in header else None
    rows = _tsv_rows(path, lines, header)
    ids = {label: k for k, label in enumerate(labels or ())}
    out_labels, a, b, word, kept = [], [], [], [], []
    dropped = 0
    for lineno, r in enumerate(rows, start=2):
        if not r or _blank(r[ai]) or _blank(r[bi]) or (wi is not None and _blank(r[wi])):
            dropped += 1
            continue
        kept.append(lineno - 2)
        label = ids.get(r[li], 0 if labels is None else None)
        if label is None:
            raise DataError(
                f"{path}:{lineno}: label {r[li]!r} is not in the label set {list(labels)} (DataConfig.labels)"
            )
        out_labels.append(label)
        a.append(r[ai])
        b.append(r[bi])
        if wi is not None:
            word.append(r[wi])
    _log_dropped(path, dropped, len(rows), "empty sentence or word")
    if not a:
        raise DataError(f"{path}: no non-empty sentence pair")
    return Pairs(np.asarray(out_labels, dtype=np.int64), a, b, word if wi is not None else None, dropped, kept)


def read_split(corpus: Corpus, split: str, cfg: DataConfig, *, text_only: bool = False) -> Parallel | Mono | Pairs:
    """Read and check one split of ``corpus`` with the reader its task and format call for (``text_only``:
    labels are not checked, for a tokenizer trained on another task's corpus)."""
    paths = corpus.splits[split]
    if corpus.task == "translation":
        if corpus.format == "tsv":
            return read_parallel_tsv(paths[0], cfg.source_lang, cfg.target_lang)
        return read_parallel_raw(paths[0], paths[1])
    if corpus.task in TEXT_TASKS:
        return read_mono(paths[0])
    return read_pairs(paths[0], None if text_only else cfg.labels)


def tokenizer_text(data: Parallel | Mono | Pairs) -> list[str]:
    """The lines a tokenizer learns from: both sides of a parallel corpus (a joint vocabulary, as the paper's
    10k joint BPE), the paragraphs of running text, every text field of sentence pairs."""
    if isinstance(data, Parallel):
        return data.src + data.tgt
    if isinstance(data, Mono):
        return data.text
    return data.a + data.b + (data.word or [])
