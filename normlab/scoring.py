"""``normlab evaluate`` for the encoder tasks: a classification run's accuracy on a split of its corpus beside the
majority class (and F1 of the positive class where there are two: MRPC's second metric, Section 3.3), a masked-LM
run's loss on the split's masked positions beside the unigram plateau the report's gates use.

Translation is scored by :mod:`normlab.translate` (BLEU) and the causal LM by :mod:`normlab.lm` (perplexity); each
writes ``RUN/eval/<split>-<checkpoint>.json``, as this module does for its tasks.

The masked positions are drawn as the trainer's validation draws them (``cfg.seed``, epoch 0:
:meth:`normlab.data.datasets.Dataset.collate` is a pure function of them), so a masked-LM run's valid NLL here is
the one its ``metrics.jsonl`` logged at the same checkpoint, on the whole split (the trainer may read a subset,
``data.valid_subset``).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from normlab.config import ConfigError, TrainConfig
from normlab.data import prepare
from normlab.data.datasets import Dataset
from normlab.device import autocast, autocast_dtype
from normlab.files import strict_json, write_atomic
from normlab.metrics import unigram_plateau
from normlab.rundir import RunDir
from normlab.train.checkpoint import CheckpointError, read_state
from normlab.train.objectives import compute_loss

__all__ = ["ENCODER_TASKS", "evaluate_encoder", "binary_f1"]

ENCODER_TASKS = ("classification", "mlm")


def binary_f1(predicted: np.ndarray, labels: np.ndarray, positive: int = 1) -> float:
    """F1 of the ``positive`` class (MRPC's "paraphrase"): 2 TP / (2 TP + FP + FN); 0 when there is no positive
    example and none predicted (no TP to score, as scikit-learn's zero_division=0)."""
    tp = int(np.sum((predicted == positive) & (labels == positive)))
    fp = int(np.sum((predicted == positive) & (labels != positive)))
    fn = int(np.sum((predicted != positive) & (labels == positive)))
    return 0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn)


@torch.inference_mode()
def _score(model: torch.nn.Module, ds: Dataset, cfg: TrainConfig, max_tokens: int, bf16: bool
           ) -> tuple[float, int, np.ndarray | None]:  # fmt: skip
    """The summed NLL over ``ds``'s targets, their number, and (classification) each example's predicted label in
    the split's order; batches as the trainer's validation makes them (no shuffle, ``cfg.seed``, epoch 0)."""
    device = next(model.parameters()).device
    nll, n = 0.0, 0
    predicted = np.full(len(ds), -1, dtype=np.int64) if cfg.data.task == "classification" else None
    plan = ds.epoch_batches(0, cfg.seed, max_tokens, shuffle=False, max_sentences=cfg.data.max_sentences)
    with autocast(device, torch.bfloat16 if bf16 else None):
        for step, idx in enumerate(plan):
            batch = ds.collate(idx, seed=cfg.seed, epoch=0, step=step).to(device)
            if predicted is not None:
                logits = model(batch.tokens, batch.segments).float()
                nll += float(torch.nn.functional.cross_entropy(logits, batch.labels, reduction="sum"))
                predicted[batch.ids.cpu().numpy()] = logits.argmax(-1).cpu().numpy()
            else:
                nll += float(compute_loss(model, batch).nll)
            n += batch.n_tokens
    return nll, n, predicted


def evaluate_encoder(run_dir: str | Path, split: str | None = None, *, checkpoint: str = "best",
                     max_tokens: int = 4096, device: str = "auto") -> dict[str, Any]:  # fmt: skip
    """Score a classification or masked-LM run on ``split`` of its corpus (default: test where the corpus has one,
    else valid) with checkpoint ``checkpoint`` (``best``, ``last``, ``update_N``, ``avg:N``); writes and returns
    ``RUN/eval/<split>-<checkpoint>.json``, on the whole split (a run that validated on ``data.valid_subset``
    examples logged fewer). ``max_tokens``: tokens per batch (classification batches are also capped
    by ``data.max_sentences``, as in training); the scores do not depend on it (the masks are drawn per example)."""
    rd = RunDir(run_dir)
    cfg = rd.read_config()
    if cfg.data.task not in ENCODER_TASKS:
        raise ConfigError(f"{run_dir}: a {cfg.data.task} run; this scores {' or '.join(ENCODER_TASKS)} runs")
    if max_tokens < 1:
        raise ConfigError(f"--max-tokens must be positive, got {max_tokens}")
    if not rd.checkpoints.is_dir() or not any(rd.checkpoints.iterdir()):
        why = (" (normlab finetune deletes a finished run's checkpoints unless --set keep_checkpoints=true; its "
               "accuracies after each epoch are in metrics.jsonl)" if cfg.init_from else "")  # fmt: skip
        raise ConfigError(f"{run_dir}: no checkpoint to score{why}")
    model, cfg, path = rd.load_model(cfg.data.task, checkpoint, device)
    # the run's own tokenizer (a fine-tuning run's is the pre-training one: finetune.data_config)
    data = prepare(cfg.data.replace(valid_subset=0), cfg.model.max_positions, tokenizer=rd.tokenizer())
    split = split or ("test" if "test" in data.splits else "valid")
    if split not in data.splits:
        raise ConfigError(f"{run_dir}: the corpus has no {split!r} split (has {sorted(data.splits)})")
    ds, train = data.splits[split], data.splits["train"]
    if max_tokens < (longest := int(ds.sizes.max())):  # batching's own error names the config field, not the flag
        raise ConfigError(f"--max-tokens {max_tokens} is below the {split} split's longest example ({longest} tokens)")
    try:  # which update the scored weights are; None for an average of checkpoints
        at = read_state(path).get("update")
    except CheckpointError:
        at = None
    t0 = time.perf_counter()
    bf16 = autocast_dtype(cfg.precision, next(model.parameters()).device) is not None
    nll, n, predicted = _score(model, ds, cfg, max_tokens, bf16)
    mean = nll / max(n, 1)
    result: dict[str, Any] = {"run": str(run_dir), "task": cfg.data.task, "checkpoint": str(path),
                              "checkpoint_update": at, "split": split, "nll": mean}  # fmt: skip
    if predicted is not None:
        labels = np.asarray(ds.labels, dtype=np.int64)  # type: ignore[attr-defined]
        top = int(np.bincount(np.asarray(train.labels, dtype=np.int64)).argmax())  # type: ignore[attr-defined]
        result.update(examples=int(len(labels)), accuracy=float(np.mean(predicted == labels)),
                      # the accuracy of always answering the training split's most frequent label: what a model
                      # that learned nothing but the label prior scores (finetune's majority baseline)
                      majority_label=cfg.data.labels[top], majority_accuracy=float(np.mean(labels == top)),
                      labels=list(cfg.data.labels))  # fmt: skip
        if len(cfg.data.labels) == 2:  # of the second label, as MRPC's F1 scores "paraphrase" (label 1)
            result["f1"] = binary_f1(predicted, labels)
            result["f1_label"] = cfg.data.labels[1]
        # each example's predicted label on its row of the split's file (as translate's .hyp holds each
        # hypothesis): an empty line for a row not scored (an empty sentence), so that the .pred stays in line with
        # the file (RunDir.write_eval_lines); the rows not scored are named, and the scores are of the others
        st = data.stats[split]
        lines = rd.write_eval_lines(split, path, ".pred", [cfg.data.labels[int(p)] for p in predicted],
                                    data.rows.get(split), st["data_rows"])  # fmt: skip
        result.update(predictions=lines["file"], data_rows=st["data_rows"], dropped_empty=st["dropped_empty"],
                      rows_not_scored=lines["rows_not_scored"])  # fmt: skip
    else:
        plateau = unigram_plateau(ds.all_targets(), train.all_targets(), masked_lm=True)
        # the copy-aware plateau (the report's gate: BERT's kept 10% can be copied) and the all-masked one (the
        # frequencies alone at every target)
        result.update(masked_tokens=int(n), ppl=math.exp(min(mean, 50.0)), unigram_nll=plateau["unigram_loss"],
                      unigram_nll_all_masked=plateau["unigram_loss_all_masked"], unigram_what=plateau["what"])  # fmt: skip
    if split == "valid" and 0 < cfg.data.valid_subset < len(ds):  # e.g. finetune's tiny and small scales
        result["note"] = (f"the whole valid split ({len(ds):,} examples); the run validated on its first "
                          f"{cfg.data.valid_subset:,} (data.valid_subset), so its logged numbers differ")
    result["seconds"] = round(time.perf_counter() - t0, 3)
    out = rd.eval_file(split, path)
    result["written"] = str(out)
    write_atomic(out, json.dumps(strict_json(result), indent=1))
    return result
