"""A masked-LM pre-training run as a starting point: its checkpoint, configuration, tokenizer and encoder weights.

``normlab finetune --from RUN`` and ``normlab export-hf --run RUN`` both start here. ``RUN`` is a run directory
of ``normlab train`` with ``data.task=mlm`` (its ``best`` checkpoint unless another is asked for) or one of its
checkpoint directories (``RUN/checkpoints/update_00012000``, ``RUN/checkpoints/best``). A checkpoint's
``state.json`` carries the run's full configuration, so a checkpoint directory is enough on its own.

The tokenizer is the pre-training one: the run directory's ``tokenizer.model``, or for a run without one, the
tokenizer its ``data`` configuration makes (``normlab.data.prepare``: a cache hit on the machine that ran the
pre-training), checked against the checkpoint's vocabulary size. Fine-tuning with another vocabulary would feed
the encoder ids it never saw.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open
from torch import nn

from normlab.config import ConfigError, TrainConfig
from normlab.data import Tokenizer, prepare
from normlab.hf import bert_inputs, export_bert, export_refusal
from normlab.lm import run_export_gpt2
from normlab.model import MaskedLM
from normlab.rundir import RunDir
from normlab.train.checkpoint import MODEL, STATE, CheckpointError, load_checkpoint, read_state

if TYPE_CHECKING:
    import argparse

__all__ = ["Pretrained", "locate_pretrained", "export_hf", "ENCODER_PREFIX", "EXPORT_TOLERANCE"]

EXPORT_TOLERANCE = 1e-3  # max |logit difference| export_hf accepts (the tests hold it to 1e-4)
ENCODER_PREFIX = "encoder."  # MaskedLM, PairClassifier: the shared TransformerStack (embeddings + layers)


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """One checkpoint of a masked-LM run."""

    checkpoint: Path  # the checkpoint directory (model.safetensors, state.json)
    run_dir: Path | None  # the run it belongs to, when it sits in RUN/checkpoints/
    update: int  # the pre-training update it was saved at
    cfg: TrainConfig  # the run's configuration (vocab_size fitted to its tokenizer)

    @property
    def name(self) -> str:
        return f"update_{self.update:08d}"

    def describe(self) -> str:
        m = self.cfg.model
        return (f"{self.checkpoint} (update {self.update}; placement={m.placement.value}, {m.encoder_layers} layers, "
                f"d={m.d_model}, vocab {m.vocab_size})")  # fmt: skip

    def tokenizer(self) -> Tokenizer:
        """The pre-training tokenizer: the run's own ``tokenizer.model`` (``normlab train`` writes it), or else
        the one its data configuration makes; a :class:`ConfigError` when its size differs from the checkpoint's."""
        saved = None if self.run_dir is None else RunDir(self.run_dir).tokenizer_path
        if saved is not None and saved.is_file():
            tok = Tokenizer.load(saved)
        else:
            tok = prepare(self.cfg.data, self.cfg.model.max_positions).tokenizer
        if tok.vocab_size != self.cfg.model.vocab_size:
            raise ConfigError(
                f"{self.checkpoint}: the pre-training data's tokenizer has {tok.vocab_size} pieces but the checkpoint "
                f"{self.cfg.model.vocab_size}; the corpus or the tokenizer changed since the run"
            )
        return tok

    def masked_lm(self, device: torch.device | str = "cpu") -> MaskedLM:
        """The pre-trained :class:`MaskedLM`, in eval mode."""
        model = MaskedLM(self.cfg.model)
        load_checkpoint(self.checkpoint, model, device=device)  # a CheckpointError is a one-line ConfigError
        return model.eval()

    def check_encoder(self, model: nn.Module) -> list[str]:
        """Check that the checkpoint holds every ``encoder.*`` tensor of ``model`` (a
        :class:`~normlab.model.PairClassifier`) in its shape, so that ``TrainConfig.init_from`` (which takes
        whatever matches) initialises the whole encoder; returns the names it leaves to ``model``'s own
        initialisation (the new head: ``pooler.*``, ``classifier.*``). Reads the file's header only."""
        file = self.checkpoint / MODEL
        try:
            with safe_open(str(file), framework="pt") as f:
                shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys() if k.startswith(ENCODER_PREFIX)}
        except Exception as e:  # a cut or foreign (pickled) file: safetensors' own error type, one line here
            raise CheckpointError(f"{file}: damaged or not safetensors ({' '.join(str(e).split())[:200]})") from None
        own = model.state_dict()
        wanted = [k for k in own if k.startswith(ENCODER_PREFIX)]
        missing = sorted(set(wanted) - set(shapes))
        unexpected = sorted(set(shapes) - set(wanted))
        other = [k for k in wanted if k in shapes and shapes[k] != tuple(own[k].shape)]
        if missing or unexpected or other:
            raise ConfigError(
                f"{self.checkpoint}: its encoder does not fit the model (missing {missing[:3]}, unexpected "
                f"{unexpected[:3]}, other shapes {other[:3]})"
            )
        return [k for k in own if not k.startswith(ENCODER_PREFIX)]


def locate_pretrained(source: str | Path, which: str = "best") -> Pretrained:
    """The checkpoint ``source`` names: a checkpoint directory, or a run directory and ``which`` (``best``,
    ``last`` or an update number). Refuses, in one line, what is not a masked-LM checkpoint."""
    path = Path(source).expanduser()
    if (path / STATE).is_file():
        if which != "best":
            raise ConfigError(f"{source} is a checkpoint directory already; --checkpoint {which} needs a run directory")
        checkpoint = path
    elif path.is_dir():
        checkpoint = RunDir(path).resolve(which)
    else:
        raise ConfigError(f"{source}: neither a run directory nor a checkpoint directory")
    state = read_state(checkpoint)
    if "config" not in state:
        raise ConfigError(f"{checkpoint}: the checkpoint has no run configuration (state.json lacks 'config')")
    cfg = TrainConfig.from_dict(state["config"])
    if cfg.data.task != "mlm":
        raise ConfigError(f"{checkpoint}: a {cfg.data.task} run; this needs a masked-LM run (data.task=mlm)")
    run = RunDir.of_checkpoint(checkpoint)
    return Pretrained(checkpoint=checkpoint.resolve(), run_dir=None if run is None else run.path.resolve(),
                      update=int(state["update"]), cfg=cfg)  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# normlab export-hf


def export_hf(source: str | Path, out: str | Path, which: str = "best") -> dict:
    """Write a Post-LN masked-LM checkpoint as a Hugging Face ``BertForMaskedLM`` (``save_pretrained``) into
    ``out``, with the pre-training tokenizer beside it (``tokenizer.model``, sentencepiece, normlab's special ids:
    pad 0, unk 1, bos 2, eos 3, [CLS] 4, [SEP] 5, [MASK] 6). Checks that HF computes what normlab computes on a
    padded two-segment batch and returns what it did. Refuses Pre-/Peri-LN (and what else BERT cannot express)
    with the one-line reason of :func:`normlab.hf.export_refusal`, before anything is written."""
    pre = locate_pretrained(source, which)
    reason = export_refusal(pre.cfg.model)
    if reason is not None:
        raise ConfigError(reason)
    try:
        import transformers  # noqa: F401 - the optional dependency, checked before anything is written
    except ImportError as e:
        raise ConfigError(str(e)) from None
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "config.json").is_file():
        raise ConfigError(f"{out} is not empty and holds no earlier export (config.json); choose another --out")
    model = pre.masked_lm()
    tok = pre.tokenizer()
    hf = export_bert(model, out)
    (out / "tokenizer.model").write_bytes(tok.proto)

    # the check: a padded batch [CLS] a [SEP] b [SEP] of random text ids, both segments
    cfg = pre.cfg.model
    g = torch.Generator().manual_seed(0)
    n = min(24, cfg.max_positions)
    tokens = torch.randint(7, cfg.vocab_size, (2, n), generator=g)
    tokens[:, 0], tokens[:, n // 2], tokens[0, -1] = tok.cls_id, tok.sep_id, tok.sep_id
    tokens[1, n - 4 :] = cfg.pad_id
    tokens[1, n - 5] = tok.sep_id
    segments = torch.zeros_like(tokens)
    segments[:, n // 2 + 1 :] = 1
    segments[tokens == cfg.pad_id] = 0
    with torch.no_grad():
        ours = model(tokens, segments)
        theirs = hf(**bert_inputs(tokens, segments, pad_id=cfg.pad_id)).logits
    keep = tokens != cfg.pad_id
    diff = (ours - theirs)[keep].abs().max().item()
    return {"out": str(out), "checkpoint": str(pre.checkpoint), "update": pre.update,
            "parameters": sum(p.numel() for p in model.parameters()), "vocab_size": cfg.vocab_size,
            "max_abs_logit_diff": diff}  # fmt: skip


def add_export_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="a masked-LM run directory of `normlab train`, or a checkpoint in it; "
                   "or a Pre-LN language-model run (data.task=lm), written as a GPT2LMHeadModel")
    p.add_argument("--checkpoint", default="best", help="best (lowest validation loss), last, or an update number")
    p.add_argument("--out", required=True, help="the directory to write (BertForMaskedLM.from_pretrained loads it)")


def run_export(args: argparse.Namespace) -> int:
    rd = RunDir(args.run)
    if rd.is_run() and rd.read_config().data.task == "lm":  # a Pre-LN causal LM goes out as GPT-2 (normlab.lm)
        return run_export_gpt2(args)
    done = export_hf(args.run, args.out, args.checkpoint)
    print(f"exported {done['checkpoint']} (update {done['update']}, {done['parameters']:,} parameters, vocab "
          f"{done['vocab_size']}) to {done['out']} as a Hugging Face BertForMaskedLM, with its sentencepiece "
          f"tokenizer.model")  # fmt: skip
    diff = done["max_abs_logit_diff"]
    print(f"check: max |normlab - HF| masked-LM logit on a padded two-segment batch = {diff:.1e}")
    if not diff <= EXPORT_TOLERANCE:  # float32 gives ~1e-6: a larger gap is a bug in the name mapping
        print(f"normlab export-hf: error: HF's logits differ from normlab's by {diff:.1e} > {EXPORT_TOLERANCE:g}",
              file=sys.stderr)
        return 1
    return 0
