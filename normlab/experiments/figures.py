"""The paper's experiments, one Python function per figure, each returning its grid of runs (STYLE.md
example 4). A run appears in several figures when the paper reuses it (Figure 4's Post-LN with warm-up is
Figure 2's); the grid runner runs it once.

Every function is a pure function of the :class:`~normlab.experiments.scales.Scale` and a :class:`Context`
(how many updates an epoch has at this scale, measured from the data), so the grid can be listed, tested and
compared without running anything.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from normlab.config import (
    CHECKPOINT_AVERAGE,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    ScheduleConfig,
    TrainConfig,
)
from normlab.experiments.finetuning import finetune_config
from normlab.experiments.scales import FULL_ARMS, FULL_MLM, PAPER, Scale, scaled_updates
from normlab.report.claims import LEVEL, _noise_k
from normlab.results import lr_name, split_seed

__all__ = [
    "Context",
    "RunSpec",
    "Mapping",
    "BertArms",
    "bert_arms",
    "fig2_warmup_ablation",
    "fig4_pre_vs_post",
    "fig5_bert",
    "fig5_finetune",
    "fig6_small_lr",
    "FIGURES",
    "all_runs",
    "mappings",
    "split_seed",
]


@dataclasses.dataclass(frozen=True)
class Context:
    """What the grid depends on besides the scale."""

    translation_updates_per_epoch: int  # updates in one epoch of the scale's translation data
    finetune_updates_per_epoch: dict[str, int] = dataclasses.field(default_factory=dict)  # per pair task
    mlm_updates_per_epoch: int = 0  # updates in one epoch of the pre-training data (0 = not measured)
    corpus: str = ""  # translation corpus ('' = the vendored de-en; a directory for the user's IWSLT14 files)
    mlm_corpus: str = ""  # pre-training corpus ('' = the vendored en-mono)
    cache_dir: str = ""  # the data cache ('' = the default)
    device: str = "auto"
    precision: str = "auto"


@dataclasses.dataclass(frozen=True)
class RunSpec:
    name: str  # directory name, unique within the grid
    figures: tuple[str, ...]  # the figures it belongs to
    label: str  # legend label, as the paper names the curve
    config: TrainConfig
    kind: Literal["translation", "mlm", "finetune", "lm"] = "translation"
    parent: str | None = None  # finetune: the pre-training run it starts from
    parent_update: int | None = None  # finetune: the pre-training checkpoint (update number)
    finetune_task: str | None = None  # finetune: paraphrase / wic
    group: str = ""  # the run of the paper this is one seed of ('' = the name itself); runs are named GROUP-sK


@dataclasses.dataclass(frozen=True)
class Mapping:
    """A setting of the paper translated to this scale, for the report."""

    what: str
    paper: str
    here: str


# -------------------------------------------------------------------------------------------------------------
# Translation (Figures 2, 4, 6)


def _paper_iwslt_total() -> int:
    return PAPER["iwslt_updates_per_epoch"] * PAPER["iwslt_epochs"]


def _translation_total(scale: Scale, ctx: Context) -> int:
    return scale.translation.updates or scale.translation.epochs * ctx.translation_updates_per_epoch


def _short(scale: Scale) -> bool:
    """The short-run schedule (scales.py): warm-ups in updates, then one decay curve for every run from the
    scale's ``decay_from`` (lr_max kept when it is 0)."""
    return scale.translation.schedule == "short"


def warmup_here(paper_warmup: int, scale: Scale, ctx: Context) -> int:
    """The paper's T_warmup (in IWSLT updates) at this scale; 0 or 1 stays (no warm-up). With the short schedule
    T_warmup=4000 becomes the scale's ``warmup`` updates and 500 the same share of it; otherwise the same
    fraction of the run as in the paper."""
    if scale.name == "paper" or paper_warmup <= 1:
        return paper_warmup
    if _short(scale) and scale.translation.warmup:
        return max(2, round(scale.translation.warmup * paper_warmup / 4000))
    return scaled_updates(paper_warmup, _paper_iwslt_total(), _translation_total(scale, ctx))


def _decay(scale: Scale, paper: str) -> dict[str, object]:
    """The decay after the warm-up (ScheduleConfig settings): the paper's; with the short schedule one curve for
    every run whatever its warm-up, lr_max held until the scale's ``decay_from`` and lr_max * sqrt(decay_from / t)
    after it (the paper's inverse square root, anchored where the longest warm-up ends; ``long``: linear to 0 at
    the run's end instead), or none (constant)."""
    if not _short(scale):
        return {"decay": paper}
    if scale.translation.decay_from:
        return {"decay": scale.translation.decay, "decay_from": scale.translation.decay_from}
    return {"decay": "constant"}


def _translation(scale: Scale, ctx: Context, *, placement: str, optim: OptimConfig, schedule: ScheduleConfig,
                 seed: int = 1) -> TrainConfig:  # fmt: skip
    t = scale.translation
    model = ModelConfig(
        placement=placement, d_model=t.d_model, d_ffn=t.d_ffn, n_heads=t.n_heads, encoder_layers=t.layers,
        decoder_layers=t.layers, dropout=t.dropout, vocab_size=t.vocab_size, max_positions=t.max_positions,
    )  # fmt: skip
    data = DataConfig(task="translation", corpus=ctx.corpus, vocab_size=t.vocab_size, train_subset=t.train_subset,
                      valid_subset=t.valid_subset, max_tokens=t.max_tokens, cache_dir=ctx.cache_dir)  # fmt: skip
    # BLEU after every epoch, as the paper plots it (Figures 2, 4); bleu_sentences = 0 means the whole valid set
    bleu = t.bleu_sentences or 10**9
    # avg:N needs the run's last N checkpoints; otherwise one (with the best) is all a run of the grid keeps
    keep = int(avg.group(1)) if (avg := CHECKPOINT_AVERAGE.fullmatch(t.test_checkpoint)) else 1
    # a checkpoint at every evaluation point too: a run shorter than an epoch (quick, full) would otherwise save
    # only at its end, and a killed one would start again from update 0 (80 minutes of a quick run on 2 cores)
    return TrainConfig(model=model, data=data, optim=optim, schedule=schedule,
                       max_epochs=10_000 if t.updates else t.epochs, max_updates=t.updates, eval_every=t.eval_every,
                       save_every=t.eval_every, label_smoothing=0.1, seed=seed, device=ctx.device,
                       precision=ctx.precision, keep_last=keep, valid_bleu=bleu, beam=t.beam, lenpen=t.lenpen,
                       test_checkpoint=t.test_checkpoint)  # fmt: skip


def _adam(lr: float) -> OptimConfig:
    return OptimConfig(name="adam", lr=lr, betas=(0.9, 0.98))  # Section 3.2: beta = (0.9, 0.98)


def _post_inverse_sqrt(scale: Scale, ctx: Context, opt: str, lr: float, paper_warmup: int) -> RunSpec:
    """A Figure 2 run: Post-LN, warm-up of paper_warmup IWSLT updates (1 = none), then inverse square root."""
    warm = warmup_here(paper_warmup, scale, ctx)
    optim = _adam(lr) if opt == "adam" else OptimConfig(name="sgd", lr=lr)
    cfg = _translation(scale, ctx, placement="post", optim=optim,
                       schedule=ScheduleConfig(warmup_updates=warm, **_decay(scale, "inverse_sqrt")))  # fmt: skip
    w = "w/o warm-up" if paper_warmup <= 1 else f"T_warmup={paper_warmup}" + (f" (here {warm})" if warm != paper_warmup else "")
    name = f"post-{opt}-{lr_name(lr)}-" + ("nowarm" if paper_warmup <= 1 else f"w{paper_warmup}")
    return RunSpec(name, ("fig2",), f"Post-LN, {opt.capitalize() if opt == 'adam' else 'SGD'}, lr {lr_name(lr)}, {w}", cfg)


def fig2_warmup_ablation(scale: Scale, ctx: Context) -> list[RunSpec]:
    """Figure 2: Post-LN with Adam, lr_max in {5e-4, 1e-3} x T_warmup in {1 (none), 500, 4000}, and with SGD,
    lr_max in {5e-3, 1e-3} with and without warm-up (4000); an inverse square root after every warm-up."""
    adam = [_post_inverse_sqrt(scale, ctx, "adam", lr, w) for lr in (5e-4, 1e-3) for w in (1, 500, 4000)]
    sgd = [_post_inverse_sqrt(scale, ctx, "sgd", lr, w) for lr in (5e-3, 1e-3) for w in (1, 4000)]
    return adam + sgd


def _pre_step_decay(scale: Scale, ctx: Context) -> ScheduleConfig:
    """The paper's Pre-LN IWSLT schedule: constant 5e-4, x 0.1 from epoch 8 (no warm-up). With the short
    schedule, the same curve as the Post-LN runs (:func:`_decay`): the paper's step, compressed into a short run,
    would fall at 7/30 of it (update 467 of 2,000) and leave 5e-5 for the rest, a schedule no Post-LN arm has, so
    C9 would compare schedules as much as placements (scales.py)."""
    if _short(scale):
        return ScheduleConfig(**_decay(scale, "constant"))
    if scale.name == "paper":
        return ScheduleConfig(decay="constant", step_epochs=(8,), step_factor=0.1)
    at = scaled_updates(7 * PAPER["iwslt_updates_per_epoch"], _paper_iwslt_total(), _translation_total(scale, ctx))
    return ScheduleConfig(decay="constant", step_updates=(at,), step_factor=0.1)


def fig4_pre_vs_post(scale: Scale, ctx: Context) -> list[RunSpec]:
    """Figure 4 (IWSLT): Pre-LN without warm-up (5e-4, x 0.1 at epoch 8) against Post-LN with 4,000 warm-up
    updates at the same lr_max; RAdam with linear decay and no warm-up for both placements."""
    post = dataclasses.replace(_post_inverse_sqrt(scale, ctx, "adam", 5e-4, 4000), figures=("fig4",))
    step = "" if _short(scale) else " (x0.1 at epoch 8)"
    pre = RunSpec("pre-adam-5e-4-nowarm-step", ("fig4",), f"Pre-LN, Adam, lr 5e-4, w/o warm-up{step}",
                  _translation(scale, ctx, placement="pre", optim=_adam(5e-4), schedule=_pre_step_decay(scale, ctx)))
    radam = [
        RunSpec(f"{p}-radam-5e-4-nowarm-linear", ("fig4",), f"{p.capitalize()}-LN, RAdam, lr 5e-4, w/o warm-up",
                _translation(scale, ctx, placement=p, optim=OptimConfig(name="radam", lr=5e-4, betas=(0.9, 0.98)),
                             schedule=ScheduleConfig(**_decay(scale, "linear"))))
        for p in ("post", "pre")
    ]  # fmt: skip
    return [post, pre, *radam]


def fig6_small_lr(scale: Scale, ctx: Context) -> list[RunSpec]:
    """Figure 6 / Appendix H: Post-LN at a fixed 1e-4 without warm-up, beside Post-LN at lr_max 1e-3 without
    and with warm-up (the paper's blue and green curves)."""
    small = RunSpec("post-adam-1e-4-const", ("fig6",), "Post-LN, Adam, fixed lr 1e-4, w/o warm-up",
                    _translation(scale, ctx, placement="post", optim=_adam(1e-4),
                                 schedule=ScheduleConfig(decay="constant")))  # fmt: skip
    refs = [dataclasses.replace(_post_inverse_sqrt(scale, ctx, "adam", 1e-3, w), figures=("fig6",)) for w in (1, 4000)]
    return [small, *refs]


# -------------------------------------------------------------------------------------------------------------
# BERT (Figure 5)


def _mlm_total(scale: Scale) -> int:
    return scale.mlm.updates


def bert_warmup_here(scale: Scale) -> int:
    if scale.mlm.warmup >= 0:
        return scale.mlm.warmup
    if scale.name == "paper":
        return PAPER["bert_warmup"]
    return scaled_updates(PAPER["bert_warmup"], PAPER["bert_updates"], _mlm_total(scale))


HOT = 3  # Section 4: Pre-LN BERT at 3e-4 against Post-LN's 1e-4, and Post-LN at 3e-4 diverged


@dataclasses.dataclass(frozen=True)
class BertArms:
    """Figure 5(a)'s three pre-training runs (groups) at a scale: the Post-LN reference at ``MLMScale.lr`` with
    warm-up, Pre-LN without warm-up at HOT x that rate, and Post-LN at HOT x with warm-up (the arm the paper found
    to diverge). Named by their rates, so ``bert-post-1e-4``, ``bert-pre-3e-4``, ``bert-post-3e-4`` at the paper's;
    report/claims.py finds them here (results.json's ``mlm_arms``), whatever the scale's rates."""

    post: str
    pre: str
    hot: str
    lr: float
    hot_lr: float


def bert_arms(scale: Scale) -> BertArms:
    lr = scale.mlm.lr
    hot = float(f"{HOT * lr:.12g}")  # 3 x 1e-4 is 3.0000000000000003e-4 in binary: the name says 3e-4
    return BertArms(f"bert-post-{lr_name(lr)}", f"bert-pre-{lr_name(hot)}", f"bert-post-{lr_name(hot)}", lr, hot)


def _mlm(scale: Scale, ctx: Context, *, placement: str, lr: float, warmup: int) -> TrainConfig:
    m = scale.mlm
    # BERT-shaped, so that a Post-LN run exports to Hugging Face's BertForMaskedLM (normlab/hf.py), and BERT's
    # initialisation: the paper's BERT runs "follow the same hyper-parameter configuration in Devlin et al."
    # (Section 4), whose weights start from N(0, 0.02^2), not the Xavier of Section 3.3's analysis. Measured at
    # FULL_MLM (docs/results/reproduce-full/bert-calibration, round 7): with Xavier the Post-LN reference never left
    # the masked LM's plateau (rates 2e-4-1.2e-3, warm-ups 100-1,000, 10,000-20,000 updates), with BERT's it did
    model = ModelConfig(
        placement=placement, d_model=m.d_model, d_ffn=m.d_ffn, n_heads=m.n_heads, encoder_layers=m.layers,
        decoder_layers=0, vocab_size=m.vocab_size, max_positions=max(m.block_size, 64), positional="learned",
        scale_embedding=False, embedding_norm=True, type_vocab_size=2, activation="gelu", dropout=0.1, init="bert",
    )  # fmt: skip
    data = DataConfig(task="mlm", corpus=ctx.mlm_corpus, vocab_size=m.vocab_size, block_size=m.block_size,
                      train_subset=m.train_subset, valid_subset=m.valid_subset, max_tokens=m.max_tokens,
                      cache_dir=ctx.cache_dir)  # fmt: skip
    every = max(1, m.updates // m.evals)
    # Devlin et al.: Adam with decoupled weight decay 0.01, beta2 = 0.999, which the paper keeps; a scale may set
    # beta2 (MLMScale.beta2: full's 0.98, so that its 100-update warm-up covers Adam's window, scales.py)
    optim = OptimConfig(name="adamw", lr=lr, betas=(0.9, m.beta2), weight_decay=0.01)
    return TrainConfig(model=model, data=data, optim=optim, schedule=ScheduleConfig(warmup_updates=warmup,
                       decay="linear"), max_epochs=10_000, max_updates=m.updates, label_smoothing=0.0,
                       eval_every=every, save_every=every, keep_last=1, keep_every=every, device=ctx.device,
                       precision=ctx.precision)  # fmt: skip


def fig5_bert(scale: Scale, ctx: Context) -> list[RunSpec]:
    """Figure 5(a): Post-LN BERT (lr 1e-4, 10k warm-up, linear decay) against Pre-LN (3e-4, no warm-up, linear
    decay), and Post-LN at 3e-4, which the paper found to diverge; at the scale's rates (:func:`bert_arms`)."""
    w, a = bert_warmup_here(scale), bert_arms(scale)
    return [
        RunSpec(a.post, ("fig5",), f"Post-LN BERT, lr {lr_name(a.lr)}, warm-up", _mlm(scale, ctx, placement="post",
                lr=a.lr, warmup=w), kind="mlm"),
        RunSpec(a.pre, ("fig5",), f"Pre-LN BERT, lr {lr_name(a.hot_lr)}, w/o warm-up", _mlm(scale, ctx, placement="pre",
                lr=a.hot_lr, warmup=0), kind="mlm"),
        RunSpec(a.hot, ("fig5",), f"Post-LN BERT, lr {lr_name(a.hot_lr)}, warm-up", _mlm(scale, ctx, placement="post",
                lr=a.hot_lr, warmup=w), kind="mlm"),
    ]  # fmt: skip


def finetune_points(scale: Scale) -> list[int]:
    """The pre-training updates whose checkpoints are fine-tuned: evenly spaced evaluation points."""
    every = max(1, scale.mlm.updates // scale.mlm.evals)
    points = list(range(every, scale.mlm.updates + 1, every))
    if scale.finetune.checkpoints >= len(points):
        return points
    step = len(points) / scale.finetune.checkpoints
    return [points[min(len(points) - 1, round((k + 1) * step) - 1)] for k in range(scale.finetune.checkpoints)]


def fig5_finetune(scale: Scale, ctx: Context, parents: list[RunSpec] | None = None) -> list[RunSpec]:
    """Figure 5(b, c): each pre-training run's checkpoints fine-tuned on the two pair tasks, over seeds.
    (The run that the paper found to diverge, Post-LN at 3e-4, is not fine-tuned.)"""
    parents = parents or [r for r in fig5_bert(scale, ctx) if r.name != bert_arms(scale).hot]
    specs = []
    for parent in parents:
        for update in finetune_points(scale):
            for task in scale.finetune.tasks:
                for seed in range(1, scale.finetune.seeds + 1):
                    per_epoch = ctx.finetune_updates_per_epoch.get(task, 1)
                    cfg = finetune_config(parent.config, task, scale.finetune, seed, per_epoch)
                    specs.append(RunSpec(f"ft-{parent.name}-u{update}-{task}-s{seed}", ("fig5",),
                                         f"{parent.label} @ {update}: {task}", cfg, kind="finetune",
                                         parent=parent.name, parent_update=update, finetune_task=task,
                                         group=f"ft-{parent.group or parent.name}-u{update}-{task}"))  # fmt: skip
    return specs


FIGURES = {
    "fig2": fig2_warmup_ablation,
    "fig4": fig4_pre_vs_post,
    "fig5": fig5_bert,
    "fig6": fig6_small_lr,
}


def all_runs(scale: Scale, ctx: Context, figures: tuple[str, ...] = ("fig2", "fig4", "fig5", "fig6")) -> list[RunSpec]:
    """The grid of the chosen figures, each run once (figures merged), in the order they are listed, seed by
    seed; the fine-tuning runs of Figure 5 come last (they start from the pre-training runs' checkpoints)."""
    merged: dict[str, RunSpec] = {}
    for fig in figures:
        for spec in FIGURES[fig](scale, ctx):
            if spec.name in merged:
                old = merged[spec.name]
                if old.config != spec.config:
                    raise AssertionError(f"two different runs named {spec.name}")
                merged[spec.name] = dataclasses.replace(old, figures=tuple(dict.fromkeys(old.figures + spec.figures)))
            else:
                merged[spec.name] = spec
    pretraining = [name for name, r in merged.items() if r.kind == "mlm"]  # fig5_bert's, built just above
    if pretraining and (unknown := set(scale.mlm.runs) - set(pretraining)):
        # names follow MLMScale.lr (bert_arms): a name of another rate would select nothing, silently
        raise ConfigError(f"mlm.runs names {sorted(unknown)}, not among this scale's pre-training runs {pretraining}")
    runs = [r for r in merged.values() if _selected(scale, r)]
    parents = [r for r in runs if r.kind == "mlm" and r.name != bert_arms(scale).hot]
    # Seed-major (every run's seed 1, then every run's seed 2, ...): the finished runs of a job stopped part-way
    # (it resumes when run again) cover every contrast at one seed, a first look at each curve in runs/, rather
    # than all the seeds of its first run and nothing of the others; the claims still wait for every seed.
    runs = _seed_major(runs, scale.seeds)
    if "fig5" in figures:
        # every pre-training seed is fine-tuned: C12's noise is that of pre-training and fine-tuning together
        # (the points of one pre-training run share it), measured across pre-training seeds
        # (seed-major as above, so that a stopped job has fine-tuned both placements' first seeds first)
        runs += fig5_finetune(scale, ctx, _seed_major(parents, scale.seeds))
    return runs


def _seed_major(runs: list[RunSpec], seeds: int) -> list[RunSpec]:
    """:func:`with_seeds` of each run, seed by seed: every run's seed 1, then every run's seed 2, ..."""
    by_run = [with_seeds(r, seeds) for r in runs]
    return [seeded[k] for k in range(max(1, seeds)) for seeded in by_run]


def _selected(scale: Scale, spec: RunSpec) -> bool:
    """Whether the scale runs this run of the paper (``runs`` of its translation / mlm section; () = all)."""
    chosen = scale.translation.runs if spec.kind == "translation" else scale.mlm.runs
    return not chosen or spec.name in chosen


def with_seeds(spec: RunSpec, seeds: int) -> list[RunSpec]:
    """``spec`` once per training seed, named ``NAME-s1``, ``NAME-s2``, ... (group ``NAME``)."""
    return [dataclasses.replace(spec, name=f"{spec.name}-s{k}", group=spec.name,
                                config=dataclasses.replace(spec.config, seed=k))
            for k in range(1, max(1, seeds) + 1)]  # fmt: skip


def seeds_mapping(seeds: int) -> Mapping:
    """The report's "seeds" row: how many, and the interval the verdicts read off them, with the numbers of the
    rules in report/claims.py (computed here, so that the text cannot drift from the code that decides)."""
    if seeds < 2:
        here = f"{seeds} per training run: the seed noise is not measured, and every training claim is inconclusive"
    else:
        lo, hi = _noise_k(2 * seeds - 2), _noise_k(seeds - 1)
        here = (f"{seeds} per training run; an effect is decided on the {100 * LEVEL:g}% t interval of the gap of "
                f"the seed means (delta method, Welch-Satterthwaite df): {lo:.2f}-{hi:.2f} standard errors each way "
                f"at {seeds} seeds a side (report/claims.py)")
    return Mapping("seeds", "one run per setting (6 seeds for fine-tuning)", here)


def mappings(scale: Scale, ctx: Context, figures: tuple[str, ...] | None = None) -> list[Mapping]:
    """How the paper's schedule settings were translated to this scale (the report's table), for the figures run
    (``figures``; None: the scale's own)."""
    figures = scale.figures if figures is None else figures
    total = _translation_total(scale, ctx)
    paper_total = _paper_iwslt_total()
    t = scale.translation
    length = (f"{total:,} updates ({total / max(ctx.translation_updates_per_epoch, 1):.2f} epochs of "
              f"{ctx.translation_updates_per_epoch:,} updates)" if t.updates else
              f"{t.epochs} epochs x {ctx.translation_updates_per_epoch:,} updates = {total:,}")  # fmt: skip
    out = [
        Mapping("IWSLT run length", f"~{PAPER['iwslt_epochs']} epochs x ~{PAPER['iwslt_updates_per_epoch']:,} "
                f"updates = {paper_total:,} updates (read off Figures 2, 4, 6)", length),
        seeds_mapping(scale.seeds),
    ]  # fmt: skip
    added = [n for n in t.runs if n in FULL_ARMS]
    if t.runs and not added:
        out.append(Mapping("runs", "every setting of Figures 2, 4, 6", "only " + ", ".join(t.runs) +
                           " (the decisive contrasts; the other claims are not run at this scale)"))
    elif t.runs:  # full: the quick scale's runs and the arms the other claims need, each with its reason
        base = [n for n in t.runs if n not in FULL_ARMS]
        out.append(Mapping("runs", "every setting of Figures 2, 4, 6", f"{len(t.runs)} of them: the quick scale's ("
                           + ", ".join(base) + ", same names and configs, so a quick folder's runs are reused) and "
                           "the arms the other claims need, one row each below; Figure 2's SGD runs are left out "
                           "(no claim reads them)"))  # fmt: skip
        out += [Mapping(f"{n}: {FULL_ARMS[n].claims}", FULL_ARMS[n].paper, FULL_ARMS[n].here) for n in added]
    for w in (500, 4000):
        if t.runs and not any(f"-w{w}" in r for r in t.runs):
            continue  # no run of this scale has it
        here = warmup_here(w, scale, ctx)
        ref = warmup_here(4000, scale, ctx)
        how = ("" if not _short(scale) else " (a number of updates, not a fraction of the run: see scales.py)"
               if w == 4000 else f" (1/8 of the {ref} standing for 4,000, as 500 is of 4,000: scales.py, FULL_ARMS)")
        out.append(Mapping(f"T_warmup={w}", f"{w:,} updates ({100 * w / paper_total:.1f}% of the run)",
                           f"{here:,} updates ({100 * here / max(total, 1):.1f}% of the run){how}"))  # fmt: skip
    if _short(scale):
        if t.decay_from:
            out.append(Mapping("decay after the warm-up", "inverse square root lr_max sqrt(T_warmup / t) (Figure 2; "
                               "without warm-up lr_max / sqrt(t)), linear (RAdam), x0.1 at epoch 8 (Pre-LN)",
                               f"one curve for every run (Figure 6's fixed rate apart): up to update {t.decay_from} "
                               f"the warm-up's ramp (eq. 1) in the runs that have one and lr_max in the others, then "
                               + (f"the paper's inverse square root lr_max sqrt({t.decay_from} / t) "
                                  f"({math.sqrt(t.decay_from / max(total, 1)):.2f} x lr_max at update {total:,}). "
                                  if t.decay == "inverse_sqrt" else
                                  f"linearly to 0 at update {total:,} (a run of known, short length ends with its "
                                  "rate at 0: scales.py's `long`). ")
                               + ("The runs 'w/o warm-up' hold lr_max until then: anchored at update 1 (lr_max / "
                                  "sqrt(t)) their rate would be a tenth of lr_max by update 100 and the contrast would "
                                  "measure the schedule, not the warm-up. " if t.decay == "inverse_sqrt" else
                                  f"The runs 'w/o warm-up' hold lr_max until update {t.decay_from} too, so that the "
                                  "arms differ in the warm-up only. ")
                               + "Pre-LN (whose paper schedule is a x0.1 step at epoch "
                               "8, which compressed would fall at 7/30 of the run) and RAdam (a linear decay in the "
                               "paper) follow the same curve; their run names keep the paper's (scales.py)"))  # fmt: skip
        else:
            out.append(Mapping("decay after the warm-up", "inverse square root (Figure 2), linear (RAdam), x0.1 at "
                               "epoch 8 (Pre-LN)", "none: every run keeps lr_max (a short run measures early "
                               "training; a compressed decay would remove the learning rate before any model leaves "
                               "the plateau). So the runs 'w/o warm-up' train at lr_max throughout, where the paper's "
                               "inverse square root from update 1 gives lr_max / sqrt(t)"))  # fmt: skip
        out.append(Mapping("evaluation", "after every epoch", (f"every {t.eval_every} updates" if t.eval_every else
                           "after every epoch") + f" on {t.valid_subset or 'all'} validation pairs"
                           + (f"; the test split with the {t.test_checkpoint} checkpoint at the end"
                              if t.test_checkpoint else "")))  # fmt: skip
    else:
        sched = _pre_step_decay(scale, ctx)
        at = f"from epoch {sched.step_epochs[0]}" if sched.step_epochs else f"after update {sched.step_updates[0]:,}"
        out.append(Mapping("Pre-LN step decay x0.1", "from epoch 8 (after 7 of ~30 epochs)", at))
    if "fig5" not in figures:
        return out + _model_rows(scale)
    bw, arms, m = bert_warmup_here(scale), bert_arms(scale), scale.mlm
    out.append(Mapping("BERT run", f"{PAPER['bert_updates']:,} updates, T_warmup={PAPER['bert_warmup']:,} (1%)",
                       f"{m.updates:,} updates, T_warmup={bw:,} ({100 * bw / m.updates:.1f}%)"
                       + ("" if scale.name == "paper" else "; the setting the calibration runs of docs/results/"
                          "reproduce-full/bert-calibration chose (scales.FULL_MLM): the gate says whether the Post-LN "
                          "reference learned" if m == FULL_MLM else "; not calibrated: no width and length measured "
                          "at which the Post-LN reference passes its gate (scales.py); the gate says whether it did")))
    out.append(Mapping("BERT rates", "Post-LN 1e-4 with warm-up; Pre-LN 3e-4 without; Post-LN 3e-4 diverged; AdamW "
                       "beta2 0.999", f"Post-LN {lr_name(arms.lr)} with warm-up; Pre-LN {lr_name(arms.hot_lr)} without; Post-LN "
                       f"{lr_name(arms.hot_lr)} with warm-up; beta2 {m.beta2:g}; {m.layers} layers, d={m.d_model}"))
    ft = scale.finetune
    out.append(Mapping("fine-tuning", "batch 16/32, lr 1e-5..1e-4, 3-8 epochs searched; 6 seeds, 95% CI",
                       f"batch {ft.batch_sentences}, lr {ft.lr:g}, {ft.epochs} epoch(s), {ft.seeds} seed(s) per "
                       f"point, {ft.checkpoints} pre-training checkpoints"))  # fmt: skip
    return out + _model_rows(scale)


def _model_rows(scale: Scale) -> list[Mapping]:
    t = scale.translation
    out = []
    out.append(Mapping("translation model", "6-6 layers, d=512, FFN 1024, 4 heads, 10k BPE, 4,096 tokens/batch",
                       f"{t.layers}-{t.layers} layers, d={t.d_model}, FFN {t.d_ffn}, {t.n_heads} heads, "
                       f"{t.vocab_size:,} BPE, {t.max_tokens:,} tokens/batch"))  # fmt: skip
    out.append(Mapping("decoding", "beam 5, length penalty 1.2, full validation set",
                       f"beam {t.beam}, length penalty {t.lenpen}, "
                       f"{t.bleu_sentences or 'all'} validation sentences"))  # fmt: skip
    return out
