"""Corpora: the vendored files are there, each reader reads, and each bad input is one line that says what and
where, with nothing written to the cache."""

from __future__ import annotations

import gzip
import logging
import lzma
from pathlib import Path

import pytest
from conftest import SMALL_VOCAB, _vendored_lines, small_data_config

from normlab.config import ConfigError, DataConfig
from normlab.data import DataError, prepare
from normlab.data.corpora import (
    VENDORED_FILES,
    data_root,
    locate,
    read_lines,
    read_mono,
    read_pairs,
    read_parallel_raw,
    read_parallel_tsv,
)


@pytest.mark.parametrize("rel", VENDORED_FILES)
def test_vendored_file_present(rel):
    path = data_root() / rel
    assert path.is_file(), f"vendored file missing: {path}"
    if rel.endswith(".xz"):
        with lzma.open(path, "rb") as f:
            assert f.read(64), f"{path} is empty"


def test_licence_table_beside_the_data():
    text = (data_root() / "README.md").read_text(encoding="utf-8")
    assert "## Sources and licences" in text
    for source in ("Ding", "Wesnoth", "LibreOffice", "Brown", "WordNet", "KJV"):
        assert source in text


def test_corpora_are_package_data_in_one_copy(monkeypatch):
    """Found through importlib.resources (in a wheel's install as in a checkout), and only there: no data/
    folder beside the package (tests/test_wheel.py checks the installed wheel)."""
    from importlib import resources

    import normlab

    monkeypatch.delenv("NORMLAB_DATA", raising=False)
    assert data_root() == resources.files("normlab.assets") / "corpora"
    on_disk = sorted(p.relative_to(data_root()).as_posix() for p in data_root().rglob("*") if p.is_file())
    assert on_disk == sorted(VENDORED_FILES)
    assert not (Path(normlab.__file__).resolve().parents[1] / "data").exists()


def test_data_root_override(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMLAB_DATA", str(tmp_path))
    assert data_root() == tmp_path
    with pytest.raises(DataError, match="vendored corpus 'de-en' not found"):
        locate(DataConfig())


# ---------------------------------------------------------------------------------------------- readers


def test_vendored_de_en_tsv_both_directions():
    path = data_root() / "de-en/test.tsv.xz"
    de_en = read_parallel_tsv(path, "de", "en")
    en_de = read_parallel_tsv(path, "en", "de")
    assert len(de_en.src) == 2000 and de_en.dropped_empty == 0
    assert de_en.src == en_de.tgt and de_en.tgt == en_de.src
    assert de_en.tgt[0].startswith("It does indeed.")  # line 2 of the file (after the header)


def test_vendored_locations():
    assert set(locate(DataConfig()).splits) == {"train", "valid", "test"}
    assert set(locate(DataConfig(task="mlm")).splits) == {"train", "valid"}  # en-mono has no test split
    wic = locate(DataConfig(task="classification", corpus="wic"))
    assert wic.splits["train"][0].name == "train.tsv.xz"


def test_raw_text_matches_tsv(small_corpora):
    raw = small_corpora["de-en-raw"]
    cfg = DataConfig(corpus=str(raw))
    corpus = locate(cfg)
    assert corpus.format == "raw" and corpus.splits["train"] == (raw / "train.de", raw / "train.en")
    pairs = read_parallel_raw(*corpus.splits["train"])
    tsv = read_parallel_tsv(small_corpora["de-en-tsv"] / "train.tsv", "de", "en")
    assert pairs.src == tsv.src and pairs.tgt == tsv.tgt and len(pairs.src) == 3000
    reverse = locate(DataConfig(corpus=str(raw), source_lang="en", target_lang="de"))
    assert reverse.splits["valid"] == (raw / "valid.en", raw / "valid.de")


def test_compressed_and_crlf_user_files(tmp_path):
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress("eins\r\nzwei\r\n".encode()))
    (tmp_path / "b.txt.xz").write_bytes(lzma.compress("one\r\ntwo".encode()))  # no final newline
    assert read_lines(tmp_path / "a.txt.gz") == ["eins", "zwei"]
    assert read_lines(tmp_path / "b.txt.xz") == ["one", "two"]
    # only \n ends a line: U+2028 and \x0b stay inside the text
    (tmp_path / "c.txt").write_text("a\u2028b\x0bc\nd\n", encoding="utf-8")
    assert read_lines(tmp_path / "c.txt") == ["a\u2028b\x0bc", "d"]


def test_mono_drops_empty_lines(tmp_path):
    (tmp_path / "t.txt").write_text("First paragraph.\n\n  \nSecond one.\n", encoding="utf-8")
    mono = read_mono(tmp_path / "t.txt")
    assert mono.text == ["First paragraph.", "Second one."] and mono.dropped_empty == 2


def test_pair_readers_on_vendored_tasks():
    para = read_pairs(data_root() / "tasks/paraphrase/valid.tsv.xz", ("0", "1"))
    assert para.word is None and len(para.a) == 2000 and set(para.labels.tolist()) == {0, 1}
    wic = read_pairs(data_root() / "tasks/wic/valid.tsv.xz", ("0", "1"))
    assert len(wic.a) == 1239 and wic.word[0] == "deceptive"
    assert wic.a[0] == "the deceptive calm in the eye of the storm" and wic.labels[0] == 1


def test_custom_label_set(tmp_path):
    (tmp_path / "t.tsv").write_text("label\ta\tb\nentailment\tx\ty\nnot_entailment\tx\tz\n", encoding="utf-8")
    pairs = read_pairs(tmp_path / "t.tsv", ("not_entailment", "entailment"))
    assert pairs.labels.tolist() == [1, 0]


def test_empty_pairs_dropped_and_logged(tmp_path, caplog):
    (tmp_path / "s.de").write_text("a\n\nc\nd\n", encoding="utf-8")
    (tmp_path / "s.en").write_text("A\nB\n \nD\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="normlab.data"):
        pairs = read_parallel_raw(tmp_path / "s.de", tmp_path / "s.en")
    assert pairs.src == ["a", "d"] and pairs.tgt == ["A", "D"] and pairs.dropped_empty == 2
    assert pairs.rows == [0, 3]  # each kept pair's line (0-based): evaluate's .hyp keeps the file's lines
    assert "dropped 2 of 4 examples: empty source or target line" in caplog.text


def test_empty_tsv_lines_dropped(tmp_path, caplog):
    (tmp_path / "t.tsv").write_text("source\tde\ten\nx\tHallo\tHello\n\nx\t\tEmpty\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="normlab.data"):
        pairs = read_parallel_tsv(tmp_path / "t.tsv", "de", "en")
    assert pairs.src == ["Hallo"] and pairs.dropped_empty == 2 and "dropped 2 of 3" in caplog.text
    assert pairs.rows == [0]  # data rows after the header
    (tmp_path / "c.tsv").write_text("label\ta\tb\n1\tx\ty\n0\t\tz\n\n1\tu\tv\n", encoding="utf-8")
    labelled = read_pairs(tmp_path / "c.tsv", ("0", "1"))
    assert labelled.rows == [0, 3] and labelled.labels.tolist() == [1, 1] and labelled.dropped_empty == 2


def test_prepare_keeps_each_examples_row(tmp_path):
    """Each kept example's data row in its file, through prepare's cache and its max_positions drop (evaluate
    writes its .hyp / .pred on those rows: a new user's predictions drifted one row off after a dropped one)."""
    lines = _vendored_lines("de-en/train.tsv.xz", 301)
    corpus = tmp_path / "mine"
    corpus.mkdir()
    test = lines[:1] + lines[1:3] + ["x\t\tEmpty"] + lines[3:5] + ["x\t" + " ".join(["Haus"] * 1000) + "\thouse"] + lines[5:7]
    for split, rows in (("train", lines), ("valid", lines[:21]), ("test", test)):
        (corpus / f"{split}.tsv").write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    cfg = DataConfig(corpus=str(corpus), cache_dir=str(tmp_path / "cache"), vocab_size=600)
    for _ in range(2):  # binarized, then read from the cache
        data = prepare(cfg, max_positions=256)
        assert data.rows["test"].tolist() == [0, 1, 3, 4, 6, 7]  # row 2 empty, row 5 too long for 256 positions
        st = data.stats["test"]
        assert (st["data_rows"], st["dropped_empty"], st["dropped_long"], st["examples"]) == (8, 1, 1, 6)
        assert data.splits["test"].target(2) == lines[3].split("\t")[2]  # example 2 is row 3's pair
    assert data.rows["valid"].tolist() == list(range(20))
    assert prepare(cfg.replace(valid_subset=5), max_positions=256).rows["valid"].tolist() == list(range(5))


# ---------------------------------------------------------------------------------------------- bad input


def _copy_corpus(src_dir, dst_dir):
    dst_dir.mkdir()
    for p in src_dir.iterdir():
        (dst_dir / p.name).write_bytes(p.read_bytes())
    return dst_dir


def _assert_refused(cfg, match):
    """prepare() raises a one-line DataError matching ``match`` and writes nothing to the cache."""
    with pytest.raises(DataError, match=match) as info:
        prepare(cfg, max_positions=256)
    assert "\n" not in str(info.value)
    cache = cfg.cache_dir
    from pathlib import Path

    written = [p for p in Path(cache).rglob("*") if p.is_file()] if Path(cache).exists() else []
    assert written == [], f"a refused corpus wrote {written}"
    return str(info.value)


def test_parallel_line_counts_differ(small_corpora, tmp_path):
    d = _copy_corpus(small_corpora["de-en-raw"], tmp_path / "c")
    lines = (d / "valid.en").read_text(encoding="utf-8").splitlines()
    (d / "valid.en").write_text("\n".join(lines[:-3]) + "\n", encoding="utf-8")
    msg = _assert_refused(small_data_config(d, tmp_path / "cache"), "parallel files differ in length")
    assert f"{d / 'valid.de'} has 200 lines" in msg and f"{d / 'valid.en'} has 197" in msg


def test_invalid_utf8_names_file_and_line(small_corpora, tmp_path):
    d = _copy_corpus(small_corpora["de-en-raw"], tmp_path / "c")
    raw = (d / "train.en").read_bytes().split(b"\n")
    raw[41] = raw[41][:5] + b"\xff\xfe" + raw[41][5:]
    (d / "train.en").write_bytes(b"\n".join(raw))
    msg = _assert_refused(small_data_config(d, tmp_path / "cache"), "invalid UTF-8")
    assert msg.startswith(f"{d / 'train.en'}:42: invalid UTF-8 (byte 0xff at byte column 6)")


@pytest.mark.parametrize("extra, kind", [(False, "missing"), (True, "extra")])
def test_tsv_column_count(small_corpora, tmp_path, extra, kind):
    d = _copy_corpus(small_corpora["de-en-tsv"], tmp_path / "c")
    lines = (d / "test.tsv").read_text(encoding="utf-8").splitlines()
    fields = lines[10].split("\t")
    lines[10] = "\t".join(fields + ["surplus"] if extra else fields[:2])
    (d / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    msg = _assert_refused(small_data_config(d, tmp_path / "cache"), f"{kind} columns")
    assert msg.startswith(f"{d / 'test.tsv'}:11: {kind} columns: {4 if extra else 2} tab-separated fields")


def test_tsv_header_without_language(small_corpora, tmp_path):
    cfg = small_data_config(small_corpora["de-en-tsv"], tmp_path / "cache", source_lang="fr")
    msg = _assert_refused(cfg, r"has no 'fr' column \(DataConfig.source_lang\)")
    assert ":1: the header (source de en)" in msg


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(small_corpora, tmp_path, content):
    d = _copy_corpus(small_corpora["de-en-raw"], tmp_path / "c")
    (d / "valid.de").write_text(content, encoding="utf-8")
    _assert_refused(small_data_config(d, tmp_path / "cache"), f"^{d / 'valid.de'}: empty file$")


def test_header_only_tsv_is_empty(small_corpora, tmp_path):
    d = _copy_corpus(small_corpora["de-en-tsv"], tmp_path / "c")
    (d / "valid.tsv").write_text("source\tde\ten\n", encoding="utf-8")
    _assert_refused(small_data_config(d, tmp_path / "cache"), r"valid.tsv: empty file \(a header and no examples\)")


def test_label_outside_label_set(small_corpora, tmp_path):
    d = _copy_corpus(small_corpora["wic"], tmp_path / "c")
    lines = (d / "valid.tsv").read_text(encoding="utf-8").splitlines()
    lines[7] = "2" + lines[7][1:]
    (d / "valid.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = small_data_config(d, tmp_path / "cache", task="classification")
    msg = _assert_refused(cfg, "label '2' is not in the label set")
    assert msg == f"{d / 'valid.tsv'}:8: label '2' is not in the label set ['0', '1'] (DataConfig.labels)"


def test_bad_test_split_writes_no_tokenizer(small_corpora, tmp_path):
    """The tokenizer is trained only after every split has been read and checked."""
    d = _copy_corpus(small_corpora["de-en-tsv"], tmp_path / "c")
    (d / "test.tsv").write_bytes((d / "test.tsv").read_bytes() + b"x\t\xc3\x28\ty\n")
    _assert_refused(small_data_config(d, tmp_path / "cache"), r"test.tsv:2002: invalid UTF-8")


def test_missing_split_and_unknown_corpus(small_corpora, tmp_path):
    d = _copy_corpus(small_corpora["de-en-raw"], tmp_path / "c")
    (d / "valid.en").unlink()
    _assert_refused(small_data_config(d, tmp_path / "cache"), r"no valid.en \(nor .xz/.gz/.bz2\) for the valid split")
    _assert_refused(small_data_config(tmp_path / "nowhere", tmp_path / "cache"), "neither a vendored corpus")


def test_config_rejects_mismatched_vendored_corpus():
    match = r"DataConfig.corpus: 'en-mono' is a mlm corpus; task 'translation' uses \['de-en'\]"
    with pytest.raises(ConfigError, match=match):
        DataConfig(corpus="en-mono")
    with pytest.raises(ConfigError, match="DataConfig.target_lang: equals source_lang"):
        DataConfig(target_lang="de")
    with pytest.raises(ConfigError, match="unknown key 'vocab'; did you mean 'vocab_size'"):
        DataConfig(vocab=10)
    assert DataConfig(task="mlm").corpus_name == "en-mono"
    assert DataConfig.from_dict(DataConfig(labels=["a", "b", "c"]).to_dict()).labels == ("a", "b", "c")


def test_data_error_is_a_config_error():
    """So the CLI prints it as one line and exits 2, as it does for configs."""
    assert issubclass(DataError, ConfigError) and issubclass(DataError, ValueError)


def test_vocab_too_large_for_corpus(small_corpora, tmp_path):
    cfg = small_data_config(small_corpora["wic"], tmp_path / "cache", task="classification").replace(vocab_size=50_000)
    msg = _assert_refused(cfg, "tokenizer training failed")
    assert "DataConfig.vocab_size" in msg and SMALL_VOCAB < 50_000


def test_a_vocabulary_mostly_unseen_in_training_is_warned(tmp_path, caplog):
    """300 training pairs with the default 10k vocabulary (a new user's first own corpus): most text pieces never
    occur in the training split, so most of the embedding table learns nothing. prepare warns and names a size;
    at that size it does not warn; nor for data read with a tokenizer chosen elsewhere (fine-tuning's case)."""
    from normlab.data.datasets import UNSEEN_WARNING_SHARE, pieces_seen
    from normlab.data.tokenizer import NUM_SPECIAL

    lines = _vendored_lines("de-en/train.tsv.xz", 301)
    corpus = tmp_path / "mine"
    corpus.mkdir()
    (corpus / "train.tsv").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    (corpus / "valid.tsv").write_text("".join(line + "\n" for line in lines[:21]), encoding="utf-8")
    cfg = DataConfig(corpus=str(corpus), cache_dir=str(tmp_path / "cache"), vocab_size=10_000)
    with caplog.at_level(logging.WARNING, logger="normlab.data"):
        data = prepare(cfg, max_positions=256)
    seen, text_pieces = data.stats["train"]["pieces_seen"], data.vocab_size - NUM_SPECIAL
    assert seen < (1 - UNSEEN_WARNING_SHARE) * text_pieces  # what the warning says, counted by hand below
    train = data.splits["train"]
    by_hand = set(train.src.values.tolist()) | set(train.tgt.values.tolist())
    assert seen == len({i for i in by_hand if i >= NUM_SPECIAL})
    assert f"{text_pieces - seen} of the vocabulary's {text_pieces} text pieces" in caplog.text
    suggested = int(caplog.text.split("data.vocab_size=")[1].split()[0])
    assert suggested == seen + NUM_SPECIAL
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="normlab.data"):
        smaller = prepare(cfg.replace(vocab_size=suggested), max_positions=256)
    assert "never occur" not in caplog.text and smaller.stats["train"]["pieces_seen"] > seen / 2
    caplog.clear()
    model = tmp_path / "pretraining.model"  # a tokenizer named by the config (fine-tuning's): chosen elsewhere
    model.write_bytes(data.tokenizer.proto)
    with caplog.at_level(logging.WARNING, logger="normlab.data"):
        given = prepare(cfg.replace(tokenizer=str(model)), max_positions=256)
    assert "never occur" not in caplog.text and given.stats["train"]["pieces_seen"] == seen
    with caplog.at_level(logging.WARNING, logger="normlab.data"):  # a run evaluated or resumed with its own
        prepare(cfg, max_positions=256, tokenizer=data.tokenizer)
    assert "never occur" not in caplog.text
    assert pieces_seen({"a_tokens": train.src.values, "src_text_tokens": train.src.values}, data.vocab_size) == len(
        {i for i in train.src.values.tolist() if i >= NUM_SPECIAL})
