"""Tokenizer: fixed special ids, exact detokenization on the de-en test split, trained once and cached by
content and settings."""

from __future__ import annotations

import pytest
from conftest import small_data_config

from normlab.data import BOS, CLS, EOS, MASK, PAD, SEP, UNK, DataError, Tokenizer, prepare
from normlab.data import tokenizer as tokenizer_module
from normlab.data.corpora import data_root, read_parallel_tsv


def test_special_ids_fixed(small_translation):
    tok = small_translation.tokenizer
    assert tok.vocab_size == 1000 == small_translation.vocab_size
    ids = (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id, tok.cls_id, tok.sep_id, tok.mask_id)
    assert ids == (0, 1, 2, 3, 4, 5, 6)
    assert [tok.id_to_piece(i) for i in range(7)] == ["<pad>", "<unk>", "<s>", "</s>", "[CLS]", "[SEP]", "[MASK]"]
    # control symbols: the characters "[MASK]" in text are text, never the mask id
    assert not {PAD, UNK, BOS, EOS, CLS, SEP, MASK} & set(tok.encode("[CLS] a [MASK] b [SEP] <s> </s> <pad>"))


def test_exact_detokenization_on_de_en_test(small_translation):
    """decode(encode(x)) == x for every sentence of the vendored de-en test split, both sides, and no <unk>:
    identity normalisation keeps spaces and compatibility characters, byte fallback spells unseen ones."""
    tok = small_translation.tokenizer
    test = read_parallel_tsv(data_root() / "de-en/test.tsv.xz", "de", "en")
    sentences = test.src + test.tgt
    encoded = tok.encode_batch(sentences)
    assert encoded[0] == tok.encode(sentences[0])
    wrong = [s for s, ids in zip(sentences, encoded) if tok.decode(ids) != s]
    assert wrong == []
    assert not any(UNK in ids for ids in encoded)


@pytest.mark.parametrize(
    "text", ["  two  spaces  ", "ﬁ ligature, ½, Ⅻ, full-width ＡＢＣ", "tab\there", "emoji 🦜 and 漢字", " ", "x"]
)
def test_exact_detokenization_of_awkward_text(small_translation, text):
    tok = small_translation.tokenizer
    assert tok.decode(tok.encode(text)) == text


def test_known_exception_u2581(small_translation):
    """sentencepiece's own space marker is the one character that does not survive (documented in tokenizer.py)."""
    tok = small_translation.tokenizer
    assert tok.decode(tok.encode("a\u2581b")) == "a b"


def test_decode_stops_at_eos_and_skips_pad_bos(small_translation):
    tok = small_translation.tokenizer
    ids = tok.encode("Hallo Welt")
    assert tok.decode([BOS, *ids, EOS, *tok.encode("danach"), PAD]) == "Hallo Welt"
    assert tok.decode([*ids, PAD, PAD]) == "Hallo Welt"
    import torch

    assert tok.decode(torch.tensor([BOS, *ids, EOS])) == "Hallo Welt"


def test_stored_references_are_the_raw_text(small_translation):
    test = small_translation.splits["test"]
    raw = read_parallel_tsv(data_root() / "de-en/test.tsv.xz", "de", "en")
    tok = small_translation.tokenizer
    for i in (0, 1, 1999):
        assert test.source(i) == raw.src[i] and test.target(i) == raw.tgt[i]
        assert tok.decode(test.target_tokens(i)) == raw.tgt[i]


def test_trained_once_then_loaded(small_corpora, tmp_path, monkeypatch):
    cfg = small_data_config(small_corpora["de-en-tsv"], tmp_path)
    first = prepare(cfg, max_positions=256)
    models = list((tmp_path / "tokenizers").glob("*.model"))
    assert len(models) == 1

    def no_training(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been loaded")

    monkeypatch.setattr(tokenizer_module, "train", no_training)
    second = prepare(cfg, max_positions=256)
    assert second.tokenizer.proto == first.tokenizer.proto
    # the reverse direction shares the joint vocabulary: same text, same settings -> same model file
    prepare(cfg.replace(source_lang="en", target_lang="de"), max_positions=256)
    assert list((tmp_path / "tokenizers").glob("*.model")) == models


def test_retrained_when_content_or_settings_change(small_corpora, tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    for p in small_corpora["de-en-raw"].iterdir():
        (d / p.name).write_bytes(p.read_bytes())
    cfg = small_data_config(d, tmp_path / "cache")
    prepare(cfg, max_positions=256)
    prepare(cfg.replace(vocab_size=900), max_positions=256)
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*.model"))) == 2
    lines = (d / "train.en").read_text(encoding="utf-8").splitlines()
    lines[0] = lines[0].upper()  # same size, new content: the key hashes the bytes
    (d / "train.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    prepare(cfg, max_positions=256)
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*.model"))) == 3


def test_training_is_deterministic(small_corpora):
    lines = read_parallel_tsv(small_corpora["de-en-tsv"] / "train.tsv", "de", "en")
    text = lines.src + lines.tgt
    assert tokenizer_module.train(text, 800, 4000) == tokenizer_module.train(text, 800, 4000)
    assert tokenizer_module.train(text, 800, 4000) != tokenizer_module.train(text, 800, 0)


def test_given_model_file_and_shared_vocabulary(small_corpora, small_translation, tmp_path):
    """A fine-tuning run can reuse a tokenizer: a .model path, or the corpus whose tokenizer to train."""
    path = tmp_path / "given.model"
    path.write_bytes(small_translation.tokenizer.proto)
    cfg = small_data_config(small_corpora["wic"], tmp_path / "cache", task="classification", tokenizer=str(path))
    assert prepare(cfg, max_positions=128).tokenizer.proto == small_translation.tokenizer.proto
    shared = cfg.replace(tokenizer=str(small_corpora["mono"]))
    mono = prepare(small_data_config(small_corpora["mono"], tmp_path / "cache", task="mlm"), max_positions=128)
    assert prepare(shared, max_positions=128).tokenizer.proto == mono.tokenizer.proto


def test_foreign_model_with_other_special_ids_refused(tmp_path):
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["a b c d e f g"] * 50), model_writer=model, vocab_size=12, minloglevel=2
    )  # sentencepiece's defaults: unk 0, bos 1, eos 2, no pad
    with pytest.raises(DataError, match="special ids"):
        Tokenizer(model.getvalue(), name="default.model")
