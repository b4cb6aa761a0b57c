"""The paper's BERT experiment end to end on small corpora (issue 8): masked-LM pre-training through
`normlab train` with the bundled configs bert-tiny-*.yaml (shrunk), fine-tuning (`normlab finetune`) and export
(`normlab export-hf`). (The t confidence interval itself is checked by hand in tests/test_metrics.py; here, its
use on fine-tuning seeds.)

The measured claims: the pre-training lowers the validation masked-LM loss well below its initial value and
below what token frequencies alone give; the fine-tuned pre-trained model beats the majority class on the
paraphrase task.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from normlab.config import TrainConfig, load_yaml
from normlab.finetune import FinetuneConfig, epoch_curve, finetune
from normlab.model import PairClassifier
from normlab.pretrained import locate_pretrained
from tests.clirun import normlab, sets
from tests.conftest import SMALL_VOCAB, _vendored_lines, require_reference

# the bundled bert-tiny-*.yaml (normlab/assets/configs; `--config bert-tiny-post` as in the README) shrunk to
# seconds on a CPU: d=64, 64-token blocks, no dropout, fp32
SHRINK = ["model.d_model=64", "model.n_heads=2", "model.d_ffn=128", "model.max_positions=128", "model.dropout=0.0",
          "model.attention_dropout=0.0", "data.block_size=64", "data.max_tokens=2048", "save_every=0", "keep_every=0",
          "precision=fp32"]  # fmt: skip


def pretrain(config: str, corpus: Path, cache: Path, out: Path, *extra: str) -> None:
    proc = normlab("train", "--config", config, "--out", str(out), "--quiet",
                   *sets(f"data.corpus={corpus}", f"data.cache_dir={cache}", f"data.vocab_size={SMALL_VOCAB}",
                         *SHRINK, *extra))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def post_run(small_corpora, small_mlm, data_cache, tmp_path_factory):
    """A Post-LN BERT-shaped masked LM pre-trained for 400 updates (warm-up 40, lr 3e-3) on 2,000 paragraphs."""
    out = tmp_path_factory.mktemp("pretrain") / "bert-tiny-post"
    pretrain("bert-tiny-post", small_corpora["mono"], data_cache, out,
             "optim.lr=3e-3", "schedule.warmup_updates=40", "max_updates=400")  # fmt: skip
    return out


@pytest.fixture(scope="module")
def pre_run(small_corpora, small_mlm, data_cache, tmp_path_factory):
    """The bundled bert-tiny-pre for two updates: a Pre-LN checkpoint (fine-tunes; does not export)."""
    out = tmp_path_factory.mktemp("pretrain") / "bert-tiny-pre"
    pretrain("bert-tiny-pre", small_corpora["mono"], data_cache, out, "max_updates=2", "data.valid_subset=16")
    return out


@pytest.fixture(scope="module")
def paraphrase_8k(tmp_path_factory):
    """8,000 training pairs of the vendored paraphrase task, 400 validation and 400 test pairs. (The 1,000 pairs
    of conftest's small corpus are too few: measured, a tiny model stays within noise of the majority class.)"""
    root = tmp_path_factory.mktemp("paraphrase-8k")
    for split, n in (("train", 8000), ("valid", 400), ("test", 400)):
        lines = _vendored_lines(f"tasks/paraphrase/{split}.tsv.xz", n + 1)
        (root / f"{split}.tsv").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root


def valid_records(run: Path) -> list[dict]:
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if r["type"] == "valid"]


# ------------------------------------------------------------------------------------------------ pre-training


def test_pretraining_lowers_validation_loss(post_run):
    from normlab.data import prepare
    from normlab.train.trainer import Trainer

    cfg = TrainConfig.from_dict(load_yaml((post_run / "config.yaml").read_text()))
    assert (cfg.data.task, cfg.model.placement.value, cfg.schedule.decay) == ("mlm", "post", "linear")
    data = prepare(cfg.data, cfg.model.max_positions)
    # the run's initial model: the Trainer seeds and builds it exactly as the run did (nothing is written)
    initial = Trainer(cfg, post_run / "unused", data.splits["train"], data.splits["valid"], quiet=True).evaluate()
    valid = valid_records(post_run)
    final = valid[-1]["nll"]
    # what knowing only the token frequencies gives: the train unigram's cross-entropy on the valid text tokens
    train_tokens = data.splits["train"].blocks.values.astype(np.int64)
    valid_tokens = data.splits["valid"].blocks.values.astype(np.int64)
    train_tokens, valid_tokens = train_tokens[train_tokens >= 7], valid_tokens[valid_tokens >= 7]  # 7 specials
    counts = np.bincount(train_tokens, minlength=cfg.model.vocab_size) + 1.0
    unigram = float(-np.log(counts[valid_tokens] / counts.sum()).mean())
    print(f"\nvalid MLM loss: initial {initial['nll']:.3f}, final {final:.3f} after {valid[-1]['update']} updates; "
          f"unigram {unigram:.3f}; per epoch {[round(r['nll'], 3) for r in valid]}")  # fmt: skip
    assert initial["nll"] > math.log(SMALL_VOCAB) - 0.5  # a fresh model: about uniform over the vocabulary
    # well below the start: the frequencies alone lie ~1 nat under the uniform loss ln V where BERT's N(0, 0.02^2)
    # init starts (Xavier's larger logits start ~0.5 above it), so "below the unigram" is the stronger test of both
    assert final < min(initial["nll"], math.log(SMALL_VOCAB)) - 1.0
    assert final < unigram - 0.15  # it uses the context, not only the frequencies
    assert json.loads((post_run / "summary.json").read_text())["status"] == "completed"


# ------------------------------------------------------------------------------------------------- fine-tuning


def test_encoder_comes_from_the_checkpoint(post_run, tmp_path):
    from normlab.config import ConfigError, DataConfig
    from normlab.train.trainer import Trainer

    pre = locate_pretrained(post_run)  # the run's best checkpoint
    assert pre.update == 400 and pre.run_dir == post_run.resolve()
    assert locate_pretrained(post_run / "checkpoints" / "update_00000400").update == 400
    assert pre.tokenizer().proto == (post_run / "tokenizer.model").read_bytes()  # the run's own vocabulary
    # a fine-tuning run's configuration (as normlab.finetune.grid writes it) and what its Trainer starts from
    cfg = TrainConfig(model=pre.cfg.model, data=DataConfig(task="classification"), init_from=str(pre.checkpoint))
    new = ["pooler.weight", "pooler.bias", "classifier.weight", "classifier.bias"]
    assert pre.check_encoder(PairClassifier(cfg.model)) == new
    trainer = Trainer(cfg, tmp_path / "run", None, quiet=True)
    torch.manual_seed(cfg.seed)
    fresh = PairClassifier(cfg.model).state_dict()  # the seed's initialisation, as the Trainer's
    trainer._init_from(Path(cfg.init_from))  # what fit() does when the run starts (not on a resume)
    state = trainer.model.state_dict()
    saved = load_file(str(pre.checkpoint / "model.safetensors"))
    encoder = [k for k in state if k.startswith("encoder.")]
    assert encoder and all(torch.equal(state[k], saved[k]) for k in encoder)
    assert all(torch.equal(state[k], fresh[k]) for k in new)  # the head is new
    assert not any(k.startswith("lm_") for k in state)  # the masked-LM head stays behind
    with pytest.raises(ConfigError, match="its encoder does not fit the model"):
        pre.check_encoder(PairClassifier(cfg.model.replace(d_ffn=96)))


def test_finetune_beats_the_majority_class(post_run, paraphrase_8k, tmp_path):
    fc = FinetuneConfig(task=str(paraphrase_8k), batch_sizes=(16,), lrs=(1e-3,), epochs=(2,), seeds=1, max_length=48,
                        precision="fp32", keep_checkpoints=True)  # fmt: skip
    lines: list[str] = []
    results = finetune(post_run, fc, tmp_path / "ft", say=lines.append)
    chosen, majority = results["chosen"], results["majority_baseline"]
    valid_labels = np.array([int(line.split("\t")[0]) for line in
                             (paraphrase_8k / "valid.tsv").read_text().splitlines()[1:]])  # fmt: skip
    best_constant = max(valid_labels.mean(), 1 - valid_labels.mean())  # the better of the two constant guesses
    print(f"\nfine-tuned valid accuracy {chosen['valid']['mean']:.4f}, test {chosen['test']['mean']:.4f}; majority "
          f"class: valid {majority['valid']:.4f}, test {majority['test']:.4f}; curve {results['settings'][0]['curve']}")
    assert chosen["setting"] == "bs16-lr0.001-ep2"
    assert chosen["valid"]["mean"] > max(majority["valid"], best_constant) + 0.08  # 400 pairs: sd 0.025 at 0.5
    assert chosen["test"]["n"] == 1 and chosen["test"]["mean"] > majority["test"] + 0.05
    run = tmp_path / "ft" / "runs" / "bs16-lr0.001-ep2" / "seed1"
    curve = epoch_curve(run)  # the per-epoch curve (the paper's fine-tuning curves) from metrics.jsonl
    assert [r["epoch"] for r in curve] == [1, 2] and all("test_accuracy" in r for r in curve)
    assert curve[-1]["accuracy"] == chosen["valid"]["mean"]

    # `normlab evaluate` on the fine-tuned run (normlab.scoring): the accuracies the trainer logged after the last
    # epoch, with the last checkpoint, on both splits; the majority class as finetune's; F1 from the predictions
    for split, logged, baseline in (("valid", curve[-1]["accuracy"], majority["valid"]),
                                    ("test", curve[-1]["test_accuracy"], majority["test"])):  # fmt: skip
        proc = normlab("evaluate", "--run", str(run), "--split", split, "--checkpoint", "last")
        assert proc.returncode == 0, proc.stderr[-2000:]
        got = json.loads(proc.stdout)
        assert (got["task"], got["split"], got["examples"]) == ("classification", split, 400)
        assert got["accuracy"] == pytest.approx(logged, abs=1e-12)
        assert got["majority_accuracy"] == pytest.approx(baseline, abs=1e-12)
        assert got["majority_label"] == ["0", "1"][majority["label"]] == majority["label_name"]  # the name
        predicted = Path(got["predictions"]).read_text().splitlines()
        truth = [line.split("\t")[0] for line in (paraphrase_8k / f"{split}.tsv").read_text().splitlines()[1:]]
        assert len(predicted) == len(truth) == 400
        assert got["accuracy"] == pytest.approx(np.mean([p == t for p, t in zip(predicted, truth, strict=True)]))
        tp = sum(p == t == "1" for p, t in zip(predicted, truth, strict=True))
        precision, recall = tp / predicted.count("1"), tp / truth.count("1")
        assert got["f1"] == pytest.approx(2 * precision * recall / (precision + recall)) and got["f1_label"] == "1"
        assert json.loads(Path(got["written"]).read_text())["accuracy"] == got["accuracy"]


def test_evaluate_scores_a_masked_lm_run_as_its_validation_did(post_run, tmp_path):
    """`normlab evaluate` on a masked-LM run: the last checkpoint's loss on the validation split's masked positions
    is the one the trainer logged at that update (the same masks: cfg.seed, epoch 0; the whole split: the run had no
    valid_subset), whatever the batch size; beside the unigram plateaus (copy-aware: the report's gate)."""
    last = valid_records(post_run)[-1]
    cfg = TrainConfig.from_dict(load_yaml((post_run / "config.yaml").read_text()))
    assert cfg.data.valid_subset == 0 and last["update"] == cfg.max_updates
    for max_tokens in ("4096", "512"):
        proc = normlab("evaluate", "--run", str(post_run), "--split", "valid", "--checkpoint", "last",
                       "--max-tokens", max_tokens)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        got = json.loads(proc.stdout)
        assert (got["task"], got["split"], got["checkpoint_update"]) == ("mlm", "valid", cfg.max_updates)
        torch.testing.assert_close(got["nll"], last["nll"], rtol=1e-5, atol=0.0)
        # 400 tiny updates: below the frequencies at every target (test_pretraining_lowers_validation_loss's bar),
        # not yet below the copy-aware plateau, which lies under it
        assert got["nll"] < got["unigram_nll_all_masked"] - 0.15 and got["masked_tokens"] > 1000
        assert got["unigram_nll"] < got["unigram_nll_all_masked"]
    proc = normlab("evaluate", "--run", str(post_run), "--source", "x.de", "--reference", "x.en", "--beam", "4")
    assert proc.returncode == 2 and "--source, --reference, --beam: not for a masked-LM (mlm) run" in proc.stderr


def test_finetune_cli_tiny_grid_then_skips_finished_runs(pre_run, small_corpora, tmp_path, capsys):
    from normlab.cli import main

    out = tmp_path / "ft"
    args = ["finetune", "--from", str(pre_run), "--task", str(small_corpora["paraphrase"]), "--scale", "tiny",
            "--out", str(out), "--set", "precision=fp32"]  # fmt: skip
    proc = normlab(*args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "search space SCALED from the paper's" in proc.stderr and "epochs {1}, 2 seeds" in proc.stderr
    assert "bs32-lr0.0001-ep1" in proc.stdout and "majority-class baseline ('" in proc.stdout
    assert "test no test split" in proc.stdout  # the small corpus has no test split
    results = json.loads((out / "results.json").read_text())
    (setting,) = results["settings"]
    assert setting["seeds"] == [1, 2] and setting["valid"]["n"] == 2
    a, b = setting["valid_accuracy"]
    # by hand: s = |a - b| / sqrt(2), s / sqrt(2) = |a - b| / 2, t_{0.975, 1} = tan(0.475 pi) = 12.7062
    assert setting["valid"]["mean"] == pytest.approx((a + b) / 2)
    assert setting["valid"]["ci_half_width"] == pytest.approx(12.706204736 * abs(a - b) / 2)
    assert results["chosen"]["setting"] == "bs32-lr0.0001-ep1"
    for seed, acc in ((1, a), (2, b)):
        run = out / "runs" / "bs32-lr0.0001-ep1" / f"seed{seed}"
        assert [(r["epoch"], r["accuracy"]) for r in valid_records(run)] == [(1, acc)]  # the curve, from metrics.jsonl
        assert not (run / "checkpoints").exists()  # pruned once finished (keep_checkpoints=false)
        cfg = TrainConfig.from_dict(load_yaml((run / "config.yaml").read_text()))
        assert cfg.data.tokenizer == str(out / "tokenizer.model") and cfg.data.max_sentences == 32
        assert cfg.model.placement.value == "pre" and cfg.seed == seed and cfg.optim.lr == 1e-4
        assert cfg.init_from == str((pre_run / "checkpoints" / "best").resolve())  # the encoder's source
        updates = json.loads((run / "summary.json").read_text())["update"]
        assert cfg.schedule.warmup_updates == round(0.1 * updates) and cfg.schedule.decay == "linear"

    # evaluate on the grid's folder, and on a run whose checkpoints were pruned: one line each, saying what to do
    capsys.readouterr()
    assert main(["evaluate", "--run", str(out)]) == 2
    assert "a folder of runs, not a run; evaluate one of them, e.g. --run " in capsys.readouterr().err
    assert main(["evaluate", "--run", str(out / "runs" / "bs32-lr0.0001-ep1" / "seed1")]) == 2
    assert "no checkpoint to score (normlab finetune deletes a finished run's checkpoints unless --set " \
           "keep_checkpoints=true" in capsys.readouterr().err

    # the same command again (in this process, to save a start-up): every run is skipped, nothing changes
    files = {p: p.read_bytes() for p in sorted((out / "runs").rglob("*")) if p.is_file()}
    assert main(args) == 0
    assert capsys.readouterr().err.count("finished earlier, skipped") == 2
    assert {p: p.read_bytes() for p in sorted((out / "runs").rglob("*")) if p.is_file()} == files
    assert json.loads((out / "results.json").read_text())["settings"] == results["settings"]

    assert main([*args, "--set", "weight_decay=0.1"]) == 2  # another experiment in the same place: refused
    assert capsys.readouterr().err.strip().splitlines() == [
        f"normlab finetune: error: {out / 'runs' / 'bs32-lr0.0001-ep1' / 'seed1'} was run with another "
        "configuration (differs in ['optim.weight_decay']); choose another --out"
    ]
    assert {p: p.read_bytes() for p in sorted((out / "runs").rglob("*")) if p.is_file()} == files


def test_interrupted_run_resumes_from_its_checkpoint(pre_run, small_corpora, tmp_path, monkeypatch):
    """Killed after its first epoch's checkpoint, a fine-tuning run resumes from that checkpoint (the pre-trained
    encoder is not loaded over it) and ends exactly where an uninterrupted run ends. (On the word-in-context task,
    from a checkpoint directory.)"""
    from normlab.train.checkpoint import read_state
    from normlab.train.trainer import Trainer

    # a named kernel: the two runs are compared bit for bit, and attention "auto" picks by timing
    fc = FinetuneConfig(task=str(small_corpora["wic"]), batch_sizes=(32,), lrs=(1e-3,), epochs=(2,), seeds=1,
                        train_subset=256, valid_subset=64, precision="fp32", attention="sdpa",
                        keep_checkpoints=True)  # fmt: skip
    quiet = lambda line: None  # noqa: E731
    pre_run = pre_run / "checkpoints" / "update_00000002"
    finetune(pre_run, fc, tmp_path / "a", say=quiet)

    save = Trainer.save

    def save_then_die(self):
        save(self)
        raise KeyboardInterrupt  # as a kill right after the end-of-epoch-1 checkpoint

    monkeypatch.setattr(Trainer, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        finetune(pre_run, fc, tmp_path / "b", say=quiet)
    monkeypatch.undo()
    run_a, run_b = (tmp_path / x / "runs" / "bs32-lr0.001-ep2" / "seed1" for x in "ab")
    # a KeyboardInterrupt mid-run is a second Ctrl-C (commit 7c67737): interrupted; the checkpoint comes before its
    # epoch's validation, which the resumed run does first (issue 36)
    assert json.loads((run_b / "summary.json").read_text())["status"] == "interrupted"
    assert read_state(max((run_b / "checkpoints").glob("update_*")))["pending_valid"] == 1
    lines: list[str] = []
    finetune(pre_run, fc, tmp_path / "b", say=lines.append)
    assert "finished earlier" not in lines[-1]
    assert epoch_curve(run_b) == epoch_curve(run_a) and len(epoch_curve(run_a)) == 2
    last_a, last_b = (load_file(str(max((r / "checkpoints").glob("update_*")) / "model.safetensors"))
                      for r in (run_a, run_b))  # fmt: skip
    assert last_a.keys() == last_b.keys() and all(torch.equal(last_a[k], last_b[k]) for k in last_a)


def test_finetune_refusals(tmp_path, capsys):
    from normlab.cli import main
    from normlab.model import Seq2Seq
    from normlab.train.checkpoint import save_checkpoint
    from tests.conftest import tiny_config

    cfg = TrainConfig(model=tiny_config())  # a translation run's checkpoint
    save_checkpoint(tmp_path / "mt" / "checkpoints", 1, Seq2Seq(cfg.model), None, {"config": cfg.to_dict()})
    for source, message in (
        (tmp_path / "mt", f"{tmp_path / 'mt' / 'checkpoints' / 'update_00000001'}: a translation run; this needs a "
                          "masked-LM run (data.task=mlm)"),
        (tmp_path / "nowhere", f"{tmp_path / 'nowhere'}: neither a run directory nor a checkpoint directory"),
    ):  # fmt: skip
        assert main(["finetune", "--from", str(source), "--task", "paraphrase", "--out", str(tmp_path / "o")]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [f"normlab finetune: error: {message}"]
    assert main(["finetune", "--from", str(tmp_path / "mt"), "--task", "paraphrase", "--set", "seeds=0"]) == 2
    assert capsys.readouterr().err.strip() == "normlab finetune: error: FinetuneConfig.seeds: must be >= 1, got 0"
    assert not (tmp_path / "o").exists()


def test_setting_chosen_by_validation_accuracy_test_reported_for_it_alone(tmp_path):
    from normlab.finetune import FinetuneRun, Setting, _results

    fc = FinetuneConfig(seeds=2)
    # (valid, test) accuracy per seed; the second setting is best on validation, the third on test, and the
    # fourth would be best but one of its runs diverged
    table = {Setting(16, 1e-5, 3): [(0.70, 0.90), (0.72, 0.90)], Setting(16, 2e-5, 3): [(0.80, 0.60), (0.78, 0.62)],
             Setting(32, 1e-5, 3): [(0.74, 0.95), (0.76, 0.97)], Setting(32, 2e-5, 3): [(0.99, 0.99), None]}
    runs = []
    for setting, seeds in table.items():
        for seed, accs in enumerate(seeds, 1):
            run = FinetuneRun(setting, seed, TrainConfig(), tmp_path / setting.name / f"seed{seed}")
            run.run_dir.mkdir(parents=True)
            status = "diverged" if accs is None else "completed"
            (run.run_dir / "summary.json").write_text(json.dumps({"status": status}))
            recs = [] if accs is None else [{"type": "valid", "epoch": 1, "update": 5, "accuracy": accs[0],
                                             "test_accuracy": accs[1]}]  # fmt: skip
            (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            runs.append(run)
    settings, chosen = _results(runs, fc)
    assert [s["valid"]["mean"] for s in settings] == pytest.approx([0.71, 0.79, 0.75, 0.99])
    assert settings[3]["diverged_seeds"] == [2] and settings[3]["valid"]["n"] == 1
    assert chosen["setting"] == "bs16-lr2e-05-ep3"
    assert chosen["test_accuracy"] == [0.60, 0.62] and chosen["test"]["mean"] == pytest.approx(0.61)
    assert all("test" not in s and "_test" not in s for s in settings)  # no test accuracy for the others


# ---------------------------------------------------------------------------------------------------- export


def test_export_hf_cli(post_run, small_mlm, tmp_path):
    tf = require_reference("transformers", "pip install 'normlab[hf]' (make install does)")
    from normlab.data import Tokenizer
    from normlab.hf import bert_inputs

    out = tmp_path / "hf"
    proc = normlab("export-hf", "--run", str(post_run), "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "as a Hugging Face BertForMaskedLM" in proc.stdout and "check: max |normlab - HF|" in proc.stdout
    bert = tf.BertForMaskedLM.from_pretrained(out).eval()
    model = locate_pretrained(post_run).masked_lm()
    batch = small_mlm.splits["valid"].collate(np.arange(6), seed=1)  # real masked blocks, padded
    with torch.no_grad():
        ours = model(batch.tokens, batch.segments)
        theirs = bert(**bert_inputs(batch.tokens, batch.segments, pad_id=model.cfg.pad_id)).logits
    keep = batch.tokens != model.cfg.pad_id
    assert (ours - theirs)[keep].abs().max().item() < 1e-4
    assert Tokenizer.load(out / "tokenizer.model").proto == small_mlm.tokenizer.proto  # the pre-training vocabulary


def test_export_hf_refuses_pre_ln(pre_run, tmp_path, capsys):
    from normlab.cli import main

    out = tmp_path / "hf"
    assert main(["export-hf", "--run", str(pre_run), "--checkpoint", "last", "--out", str(out)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("normlab export-hf: error: placement=pre cannot be exported to BERT: BERT has no place for")
    assert not out.exists()


def test_a_three_class_task_through_both_paths(pre_run, small_corpora, tmp_path, capsys):
    """One recipe (normlab.finetune.run_config): `normlab finetune` and reproduce's Figure 5(b, c) runs
    (experiments/finetuning.py, trained as the grid runner trains them) build the same run for a 3-class pair
    TSV, with a head of three outputs, and both train it."""
    from normlab.cli import main
    from normlab.experiments.finetuning import finetune_config
    from normlab.experiments.scales import FinetuneScale
    from normlab.train.run import train

    three = tmp_path / "three"
    three.mkdir()
    for split in ("train", "valid"):
        header, *rows = (small_corpora["paraphrase"] / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
        relabelled = [f"{k % 3}\t{row.split(chr(9), 1)[1]}" for k, row in enumerate(rows)]
        (three / f"{split}.tsv").write_text("\n".join([header, *relabelled]) + "\n", encoding="utf-8")

    out = tmp_path / "ft"
    code = main(["finetune", "--from", str(pre_run), "--task", str(three), "--scale", "tiny", "--out", str(out),
                 "--set", "precision=fp32", "--set", "seeds=1", "--set", "labels=[\"0\",\"1\",\"2\"]"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    run_a = out / "runs" / "bs32-lr0.0001-ep1" / "seed1"
    a = TrainConfig.from_dict(load_yaml((run_a / "config.yaml").read_text()))
    assert a.model.num_classes == 3 and a.data.labels == ("0", "1", "2")
    per_epoch = json.loads((run_a / "summary.json").read_text())["update"]

    pre_cfg = TrainConfig.from_dict(load_yaml((pre_run / "config.yaml").read_text()))
    ft = FinetuneScale(tasks=(str(three),), lr=1e-4, epochs=1, batch_sentences=32, train_subset=512,
                       valid_subset=256, labels=("0", "1", "2"))  # the tiny scale's setting
    b = finetune_config(pre_cfg.replace(precision="fp32"), str(three), ft, 1, per_epoch)
    # what the grid runner fills in (experiments/grid.py): the pre-training run's tokenizer and weights
    b = b.replace(data=b.data.replace(tokenizer=str(pre_run / "tokenizer.model")), init_from=a.init_from)
    assert b.model == a.model and b.optim == a.optim and b.schedule == a.schedule and b.max_epochs == a.max_epochs
    assert b.data.replace(tokenizer="") == a.data.replace(tokenizer="")
    summary = train(b, tmp_path / "fig5-run", quiet=True)
    assert summary["status"] == "completed" and summary["update"] == per_epoch
    acc = [r["accuracy"] for r in valid_records(tmp_path / "fig5-run")]
    assert len(acc) == 1 and 0.0 <= acc[0] <= 1.0


def test_an_interval_of_seeds_that_all_agree_is_not_shown_as_certainty():
    """Seeds that all reach the same accuracy (both predict the majority class) printed "0.5200 ± 0.0000", which
    reads as certainty (a new user's finding): the table says the noise is not measured."""
    from normlab.finetune import _fmt_acc

    assert _fmt_acc({"mean": 0.52, "ci_half_width": 0.0}) == "0.5200 (every seed the same: the noise is not measured)"
    assert _fmt_acc({"mean": 0.52, "ci_half_width": 0.01}) == "0.5200 ± 0.0100"
    assert _fmt_acc({"mean": 0.52, "ci_half_width": None}) == "0.5200"
