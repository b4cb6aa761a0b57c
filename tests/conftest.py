"""Shared fixtures. Tests run on the CPU with few threads so that the suite stays fast on 2 cores."""

from __future__ import annotations

import os
import signal

# Tiny models spend their time in thread hand-offs, not arithmetic: one thread is several times faster on a
# 2-core machine (and far faster when the cores are shared). Set before torch is imported so that the
# subprocesses of the end-to-end tests inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep rather than spin on shared cores

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

# A suite started as a background job of a non-interactive shell (`pytest ... &`, nohup, some CI runners) inherits
# SIGINT ignored (POSIX: asynchronous commands ignore SIGINT and SIGQUIT), so Python installs no KeyboardInterrupt
# handler and every process the tests start ignores SIGINT too. The Ctrl-C tests (the Trainer's stop at an update
# boundary, a grid cancelling its submitit jobs with SIGINT) need what an interactive `pytest` has; found as two
# failures that appeared only when the suite ran in the background.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _fresh_attention_choices():
    """Each test measures its attention kernels afresh: the trainer keeps a process's measurements by shape
    (normlab.train.kernels), and a test that fakes the timings must not see another test's answer."""
    from normlab.train import kernels

    kernels.forget_choices()
    yield
    kernels.forget_choices()


# `make test` (and so CI, .ci/run) installs the references of tests/test_parity_refs.py and the benchmark's
# peers (pyproject's test-ref group, `make install-ref`) and sets NORMLAB_REQUIRE_REFS=1: there an absent one
# fails the test that needs it, so a broken install cannot turn the parity tests into silent skips. A bare
# `pytest` without the variable reports them as skipped, with the reason.
REQUIRE_REFS = os.environ.get("NORMLAB_REQUIRE_REFS", "") == "1"


def require_reference(module: str, hint: str):
    """Import ``module`` (a reference or a peer of the tests), or skip (fail under NORMLAB_REQUIRE_REFS=1)
    with ``hint``, the way to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        reason = f"{module} is not importable ({e}): {hint}"
        if REQUIRE_REFS:
            pytest.fail(f"NORMLAB_REQUIRE_REFS=1 (make test): {reason}", pytrace=False)
        pytest.skip(reason)


def tiny_config(**overrides):
    """The HF-style tiny config of the test tiers: hidden 32, 2 layers."""
    from normlab.config import ModelConfig

    base = dict(
        d_model=32, n_heads=4, d_ffn=64, encoder_layers=2, decoder_layers=2, vocab_size=50,
        dropout=0.0, max_positions=64,
    )  # fmt: skip
    base.update(overrides)
    return ModelConfig(**base)


@pytest.fixture
def tiny():
    return tiny_config


PLACEMENTS = ["post", "pre", "peri"]


# ---------------------------------------------------------------------------------------------------------
# Data (tests/test_data_*.py): small corpora cut from the vendored ones, laid out as a user's own directories,
# so that tokenizers train in about a second. Session-scoped: built once.

SMALL_VOCAB = 1000


def _vendored_lines(rel: str, n: int | None = None) -> list[str]:
    import lzma

    from normlab.data.corpora import data_root

    with lzma.open(data_root() / rel, "rt", encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines = [line for line in lines if line]
    return lines if n is None else lines[:n]


@pytest.fixture(scope="session")
def small_corpora(tmp_path_factory):
    """Directories: de-en TSV (3,000/200 train/valid pairs, the full 2,000-pair test split), the same as
    fairseq raw text (train.de/train.en ...), English paragraphs, and wic/paraphrase pair TSVs."""
    root = tmp_path_factory.mktemp("corpora")

    def write(path, lines):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    de_en = {"train": _vendored_lines("de-en/train.tsv.xz", 3001), "valid": _vendored_lines("de-en/valid.tsv.xz", 201),
             "test": _vendored_lines("de-en/test.tsv.xz")}  # fmt: skip
    for split, lines in de_en.items():
        write(root / "de-en-tsv" / f"{split}.tsv", lines)
        rows = [line.split("\t") for line in lines[1:]]
        write(root / "de-en-raw" / f"{split}.de", [r[1] for r in rows])
        write(root / "de-en-raw" / f"{split}.en", [r[2] for r in rows])
    mono = _vendored_lines("en-mono/valid.txt.xz", 2300)
    write(root / "mono" / "train.txt", mono[:2000])
    write(root / "mono" / "valid.txt", mono[2000:])
    for task, n in (("wic", 1200), ("paraphrase", 1200)):
        lines = _vendored_lines(f"tasks/{task}/valid.tsv.xz", n + 1)
        write(root / task / "train.tsv", lines[: n - 200 + 1])
        write(root / task / "valid.tsv", lines[:1] + lines[n - 200 + 1 :])
    return {name: root / name for name in ("de-en-tsv", "de-en-raw", "mono", "wic", "paraphrase")}


@pytest.fixture(scope="session")
def data_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("normlab-cache")


def small_data_config(corpus, cache_dir, **overrides):
    from normlab.config import DataConfig

    return DataConfig(corpus=str(corpus), cache_dir=str(cache_dir), vocab_size=SMALL_VOCAB, **overrides)


@pytest.fixture(scope="session")
def small_translation(small_corpora, data_cache):
    """The prepared small de-en corpus (tokenizer of 1,000 pieces)."""
    from normlab.data import prepare

    return prepare(small_data_config(small_corpora["de-en-tsv"], data_cache), max_positions=256)


@pytest.fixture(scope="session")
def small_mlm(small_corpora, data_cache):
    from normlab.data import prepare

    cfg = small_data_config(small_corpora["mono"], data_cache, task="mlm", block_size=64)
    return prepare(cfg, max_positions=128)


# `make test` runs the suite on pytest-xdist's workers (-n, --dist loadgroup; Makefile). Every test is put in the
# group of its file, so a file's tests run on one worker, in order, and its module fixtures are built once (as
# --dist loadfile would); the two files that start a local Ray cluster (ray.init without an address) share one
# group, so that two clusters never start at once on one machine. tryfirst: xdist's own hook reads the marks.
XDIST_GROUPS = {"test_launchers": "ray-and-slurm", "test_finetune_launchers": "ray-and-slurm"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        stem = item.path.stem
        item.add_marker(pytest.mark.xdist_group(XDIST_GROUPS.get(stem, stem)))
