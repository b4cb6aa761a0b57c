"""The paper's experiments as functions: the grids they return, and how settings are scaled."""

from __future__ import annotations

import math

import pytest

from normlab.config import ConfigError
from normlab.experiments.figures import (
    BertArms,
    Context,
    bert_arms,
    all_runs,
    fig2_warmup_ablation,
    fig4_pre_vs_post,
    fig5_bert,
    fig6_small_lr,
    finetune_points,
    mappings,
)
from normlab.experiments.scales import PAPER, SCALES, get_scale, scaled_updates
from normlab.results import lr_name
from normlab.train.schedules import build_schedule

CTX = Context(translation_updates_per_epoch=100)


def test_fig2_is_the_papers_grid():
    runs = fig2_warmup_ablation(get_scale("paper"), Context(translation_updates_per_epoch=1100))
    adam = {(r.config.optim.lr, r.config.schedule.warmup_updates) for r in runs if r.config.optim.name == "adam"}
    assert adam == {(lr, w) for lr in (5e-4, 1e-3) for w in (1, 500, 4000)}
    sgd = {(r.config.optim.lr, r.config.schedule.warmup_updates) for r in runs if r.config.optim.name == "sgd"}
    assert sgd == {(lr, w) for lr in (5e-3, 1e-3) for w in (1, 4000)}
    assert all(r.config.schedule.decay == "inverse_sqrt" and r.config.model.placement == "post" for r in runs)
    assert all(r.config.optim.betas == (0.9, 0.98) for r in runs if r.config.optim.name == "adam")
    m = runs[0].config.model
    assert (m.encoder_layers, m.decoder_layers, m.d_model, m.d_ffn, m.n_heads) == (6, 6, 512, 1024, 4)
    assert runs[0].config.data.max_tokens == 4096 and runs[0].config.label_smoothing == 0.1


def test_fig4_pre_ln_schedule_at_paper_and_small_scale():
    paper = {r.name: r for r in fig4_pre_vs_post(get_scale("paper"), Context(translation_updates_per_epoch=1100))}
    pre = paper["pre-adam-5e-4-nowarm-step"].config
    assert pre.model.placement == "pre" and pre.schedule.warmup_updates == 0
    assert pre.schedule.step_epochs == (8,) and pre.schedule.step_factor == 0.1 and pre.schedule.decay == "constant"
    radam = paper["post-radam-5e-4-nowarm-linear"].config
    assert radam.optim.name == "radam" and radam.schedule.decay == "linear" and radam.schedule.warmup_updates == 0
    smoke = {r.name: r for r in fig4_pre_vs_post(get_scale("smoke"), CTX)}
    total = get_scale("smoke").translation.epochs * 100
    step = smoke["pre-adam-5e-4-nowarm-step"].config.schedule.step_updates[0]
    assert step == round(7 / 30 * total)  # the same fraction of the run as epoch 8 of ~30


@pytest.mark.parametrize("scale", ["smoke"])
def test_warmup_is_the_same_fraction_of_the_run(scale):
    s = get_scale(scale)
    runs = {r.name: r for r in fig2_warmup_ablation(s, CTX)}
    total = s.translation.epochs * 100
    paper_total = PAPER["iwslt_updates_per_epoch"] * PAPER["iwslt_epochs"]
    w4000 = runs["post-adam-5e-4-w4000"].config.schedule.warmup_updates
    assert w4000 == max(2, round(4000 / paper_total * total))
    assert runs["post-adam-5e-4-w500"].config.schedule.warmup_updates >= 2  # never silently "no warm-up"
    assert runs["post-adam-5e-4-nowarm"].config.schedule.warmup_updates == 1


@pytest.mark.parametrize("scale", ["quick", "full"])
def test_short_schedule_one_curve_and_warmup_in_updates(scale):
    """The short-run schedule (scales.py): the warm-up standing for T_warmup=4000 is the scale's ``warmup``
    updates whatever the run length, 500 the same share of it, and every run of Figures 2 and 4 (with or without
    warm-up, Pre-LN too) follows one curve after ``decay_from``: lr_max sqrt(decay_from / t), lr_max before."""
    s = get_scale(scale)
    t = s.translation
    runs = {r.group: r for r in all_runs(s, CTX, ("fig2", "fig4"))}
    assert runs["post-adam-5e-4-w4000"].config.schedule.warmup_updates == t.warmup
    if "post-adam-5e-4-w500" in runs:
        assert runs["post-adam-5e-4-w500"].config.schedule.warmup_updates == round(t.warmup / 8)
    assert all(r.config.max_updates == t.updates for r in runs.values())
    assert runs["pre-adam-5e-4-nowarm-step"].config.schedule.warmup_updates == 0
    assert t.decay_from == t.warmup > 0  # the curve starts where the longest warm-up ends
    after = range(t.decay_from, t.updates + 1)
    for r in runs.values():
        lr = r.config.optim.lr
        sched = build_schedule(r.config.schedule, lr, r.config.max_updates, CTX.translation_updates_per_epoch)
        assert [sched(u) for u in after] == pytest.approx([lr * math.sqrt(t.decay_from / u) for u in after])
        if r.config.schedule.warmup_updates <= 1:  # no warm-up: lr_max from update 1 to decay_from
            assert [sched(u) for u in range(1, t.decay_from + 1)] == [lr] * t.decay_from


def test_short_schedule_without_decay_keeps_lr_max():
    s = get_scale("quick")
    s = s.replace(translation=s.translation.replace(decay_from=0))
    runs = {r.group: r for r in all_runs(s, CTX, ("fig2", "fig4"))}
    assert all(r.config.schedule.decay == "constant" and not r.config.schedule.step_updates for r in runs.values())
    rows = {m.what: m for m in mappings(s, CTX)}
    assert "none" in rows["decay after the warm-up"].here


def test_decay_from_needs_the_short_schedule_and_follows_the_warmup():
    t = get_scale("quick").translation
    with pytest.raises(ConfigError, match="decay_from"):
        t.replace(schedule="paper")
    with pytest.raises(ConfigError, match="decay_from"):
        t.replace(decay_from=50)
    with pytest.raises(ConfigError, match="needs warmup"):
        t.replace(warmup=0)
    with pytest.raises(ConfigError, match="after the run's end"):
        t.replace(updates=50)


def test_quick_runs_the_decisive_contrasts_with_seeds_at_a_width_where_the_effect_lives():
    s = get_scale("quick")
    runs = all_runs(s, CTX, tuple(f for f in s.figures if f != "fig3"))
    groups = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
    assert set(groups) == {"post-adam-5e-4-nowarm", "post-adam-5e-4-w4000", "pre-adam-5e-4-nowarm-step"}
    assert all(sorted(r.config.seed for r in g) == [1, 2, 3] for g in groups.values())  # >= 3 seeds
    assert all(r.name == f"{r.group}-s{r.config.seed}" for r in runs)
    m = runs[0].config.model
    assert (m.encoder_layers, m.decoder_layers, m.d_model, m.d_ffn) == (6, 6, 256, 512)  # depth 6-6, FFN = 2d
    assert runs[0].config.data.max_tokens >= 2048
    assert {r.config.optim.lr for r in runs} == {5e-4}
    # 2,000 updates (1.47 epochs of 1,357 at 2,048 tokens), ~25-35 minutes with native bf16: a checkpoint at every
    # evaluation, so that a killed run resumes rather than restarts
    assert all(r.config.save_every == r.config.eval_every == 100 for r in runs)


def test_scaled_updates():
    assert scaled_updates(4000, 33000, 330) == 40
    assert scaled_updates(500, 33000, 33) == 2  # rounded to 0, kept at the least
    assert scaled_updates(1, 33000, 330) == 1 and scaled_updates(0, 33000, 330) == 0


def test_fig5_and_fig6():
    bert = {r.name: r.config for r in fig5_bert(get_scale("paper"), CTX)}
    assert bert["bert-post-1e-4"].schedule.warmup_updates == 10_000 and bert["bert-post-1e-4"].optim.lr == 1e-4
    assert bert["bert-pre-3e-4"].schedule.warmup_updates == 0 and bert["bert-pre-3e-4"].optim.lr == 3e-4
    assert bert["bert-post-3e-4"].model.placement == "post" and bert["bert-post-3e-4"].optim.lr == 3e-4
    assert all(c.schedule.decay == "linear" and c.data.task == "mlm" for c in bert.values())
    base = bert["bert-pre-3e-4"].model
    assert (base.encoder_layers, base.d_model, base.n_heads, base.d_ffn) == (12, 768, 12, 3072)
    assert all(c.model.init == "bert" for c in bert.values())  # Devlin et al.'s configuration, as the paper's
    six = {r.name: r.config for r in fig6_small_lr(get_scale("quick"), CTX)}
    small = six["post-adam-1e-4-const"]
    assert small.optim.lr == 1e-4 and small.schedule.decay == "constant" and small.schedule.warmup_updates == 0


def test_bert_arms_at_a_scale_of_its_own_rates():
    """MLMScale.lr, beta2 and warmup set Figure 5's three runs in the paper's ratio (the Post-LN reference, Pre-LN
    and the hot Post-LN arm at 3x), named by their rates; the defaults are the paper's names."""
    paper = get_scale("paper")
    assert bert_arms(paper) == BertArms("bert-post-1e-4", "bert-pre-3e-4", "bert-post-3e-4", 1e-4, 3e-4)
    full = get_scale("full")
    mine = full.replace(mlm=full.mlm.replace(lr=6e-4, beta2=0.98, warmup=100))
    arms = bert_arms(mine)
    assert (arms.post, arms.pre, arms.hot) == ("bert-post-6e-4", "bert-pre-1.8e-3", "bert-post-1.8e-3")
    runs = {r.name: r.config for r in fig5_bert(mine, CTX)}
    assert {n: (c.model.placement, c.optim.lr, c.optim.betas, c.schedule.warmup_updates) for n, c in runs.items()} == {
        "bert-post-6e-4": ("post", 6e-4, (0.9, 0.98), 100), "bert-pre-1.8e-3": ("pre", 1.8e-3, (0.9, 0.98), 0),
        "bert-post-1.8e-3": ("post", 1.8e-3, (0.9, 0.98), 100)}  # fmt: skip
    ft = {r.parent for r in all_runs(mine, CTX) if r.kind == "finetune"}
    assert ft == {f"{p}-s{k}" for p in ("bert-post-6e-4", "bert-pre-1.8e-3") for k in (1, 2, 3)}  # not the hot arm
    assert [lr_name(x) for x in (5e-4, 1e-3, 1.8e-3, 2.5e-5)] == ["5e-4", "1e-3", "1.8e-3", "2.5e-5"]
    for bad in ({"lr": 0.0}, {"beta2": 1.0}, {"warmup": -2}):
        with pytest.raises(ConfigError, match="MLMScale"):
            full.mlm.replace(**bad)
    with pytest.raises(ConfigError, match="bert-post-1e-4"):  # a run of another rate selects nothing: an error
        all_runs(mine.replace(mlm=mine.mlm.replace(runs=("bert-post-1e-4",))), CTX)
    # the report's mapping table has the BERT rows when fig5 is asked for, though full runs it only then
    rows = {m.what: m.here for m in mappings(full, CTX, ("fig2", "fig5"))}
    assert "Post-LN 6e-4 with warm-up" in rows["BERT rates"] and "FULL_MLM" in rows["BERT run"]
    assert "BERT rates" not in {m.what for m in mappings(full, CTX)}
    assert "not calibrated" in {m.what: m.here for m in mappings(get_scale("smoke"), CTX)}["BERT run"]


def test_all_runs_merges_shared_runs_and_orders_finetuning_last():
    s = get_scale("full")
    runs = all_runs(s, CTX)
    names = [r.name for r in runs]
    assert len(names) == len(set(names))
    shared = {r.name: r.figures for r in runs}
    assert shared["post-adam-5e-4-w4000-s1"] == ("fig2", "fig4")
    assert shared["post-adam-1e-3-nowarm-s3"] == ("fig2", "fig6")
    kinds = [r.kind for r in runs]
    assert kinds.index("finetune") > max(i for i, k in enumerate(kinds) if k != "finetune")
    # seed-major: every trained run's seed 1 before any seed 2, so that a stopped job has one seed of each
    seeds = [int(r.name.rsplit("-s", 1)[1]) for r in runs if r.kind != "finetune"]
    assert seeds == sorted(seeds) and seeds.count(1) == len(seeds) // s.seeds
    ft = [r for r in runs if r.kind == "finetune"]
    # fine-tuning seed-major too: both placements' first pre-training seeds are fine-tuned first
    parent_seeds = [int(r.parent.rsplit("-s", 1)[1]) for r in ft]
    assert parent_seeds == sorted(parent_seeds) and {r.parent for r in ft[: len(ft) // s.seeds]} == {
        "bert-post-6e-4-s1", "bert-pre-1.8e-3-s1"}
    assert len(ft) == 2 * s.seeds * s.finetune.checkpoints * len(s.finetune.tasks) * s.finetune.seeds
    # every seed of each pre-training run is fine-tuned; the diverging 3e-4 run is not
    assert {r.parent for r in ft} == {f"bert-{p}-s{k}" for p in ("post-6e-4", "pre-1.8e-3") for k in (1, 2, 3)}
    assert all(r.parent_update in finetune_points(s) for r in ft)
    assert all(r.config.data.tokenizer == "en-mono" for r in ft)  # the pre-training vocabulary


def test_finetune_points_are_checkpoints_the_mlm_run_keeps():
    for name in SCALES:
        s = get_scale(name)
        bert = fig5_bert(s, CTX)[0].config
        points = finetune_points(s)
        assert len(points) == min(s.finetune.checkpoints, s.mlm.evals)
        assert all(p % bert.keep_every == 0 and p <= bert.max_updates for p in points)


def test_mappings_state_every_translation():
    rows = {m.what: m for m in mappings(get_scale("smoke"), CTX)}
    assert "T_warmup=4000" in rows and "12.1% of the run" in rows["T_warmup=4000"].paper
    assert "Pre-LN step decay x0.1" in rows and "BERT run" in rows and "fine-tuning" in rows
    quick = {m.what: m for m in mappings(get_scale("quick"), CTX)}
    assert "not a fraction" in quick["T_warmup=4000"].here
    assert "lr_max sqrt(100 / t)" in quick["decay after the warm-up"].here
    assert "(0.22 x lr_max at update 2,000)" in quick["decay after the warm-up"].here
    assert "3 per training run" in quick["seeds"].here and "only" in quick["runs"].here
    assert "BERT run" not in quick  # Figure 5 is not run at the quick scale


def test_unknown_scale():
    with pytest.raises(ConfigError, match="unknown scale 'huge'"):
        get_scale("huge")


def test_results_list_a_groups_seeds_side_by_side(tmp_path):
    """The grid runs seed by seed; results.json (and the report's run tables) list each group's seeds together,
    groups in the grid's order. Runs not started yet are recorded as absent."""
    from normlab.experiments.results import collect

    s = get_scale("quick")
    specs = all_runs(s, CTX, ("fig2", "fig4"))
    assert [r.config.seed for r in specs[:3]] == [1, 1, 1]
    runs = collect(specs, tmp_path, {})["runs"]
    names = list(runs)
    groups = list(dict.fromkeys(r.group for r in specs))
    assert names == [f"{g}-s{k}" for g in groups for k in (1, 2, 3)]
    assert all(r["status"] == "absent" for r in runs.values())


def _grid(scale, figures=("fig2", "fig4", "fig6")):
    return {r.name: r for r in all_runs(scale, CTX, figures)}


def test_full_is_the_quick_grid_and_the_arms_the_other_claims_need():
    """Issue 32: `full` reuses every quick run (same names, same configs: a quick folder is a full folder with those
    runs done), at the quick scale's shape, length and curve, and adds one group per arm of FULL_ARMS, 3 seeds each;
    every translation claim finds the groups it reads."""
    from normlab.experiments.scales import FULL_ARMS, FULL_BUDGET, FULL_MLM, QUICK_RUNS

    quick, full = get_scale("quick"), get_scale("full")
    q, f = _grid(quick, ("fig2", "fig4")), _grid(full)
    assert set(q) <= set(f)
    for name, spec in q.items():
        assert f[name].config == spec.config, name  # not a setting changed: the quick runs count as full's
    assert {r.group for r in f.values()} == set(QUICK_RUNS) | set(FULL_ARMS)
    assert len(f) == 3 * (len(QUICK_RUNS) + len(FULL_ARMS)) == FULL_BUDGET["translation_runs"]
    assert len(f) - len(q) == FULL_BUDGET["translation_runs_new"]
    assert all(r.config.max_updates == FULL_BUDGET["updates_per_translation_run"] == 2000 for r in f.values())
    assert full.translation.replace(runs=()) == quick.translation.replace(runs=())  # one shape, length and curve
    assert full.analysis == quick.analysis and "width" not in full.figures  # the sweep only when asked
    # BERT (C11-C12) only when asked too: the calibrated setting costs more than full's 3-hour target by itself
    assert "fig5" not in full.figures and full.mlm == FULL_MLM
    assert (FULL_MLM.d_model, FULL_MLM.layers, FULL_MLM.updates, FULL_MLM.lr, FULL_MLM.beta2) == (128, 4, 20_000, 6e-4,
                                                                                                  0.98)
    # BERT's initialisation for every arm (the calibration's round 7: with Xavier the reference never learned)
    assert {r.config.model.init for r in fig5_bert(full, CTX)} == {"bert"}
    assert bert_arms(full).hot_lr == 1.8e-3 and fig5_bert(full, CTX)[0].config.schedule.warmup_updates == 100
    arm = {g: f[f"{g}-s1"].config for g in FULL_ARMS}
    assert arm["post-adam-1e-3-nowarm"].optim.lr == 1e-3 and arm["post-adam-1e-3-w4000"].schedule.warmup_updates == 100
    assert {arm[f"post-adam-{lr}-w500"].schedule.warmup_updates for lr in ("5e-4", "1e-3")} == {12}  # 100 / 8
    radam = [arm[f"{p}-radam-5e-4-nowarm-linear"] for p in ("post", "pre")]
    assert all(c.optim.name == "radam" and c.schedule.warmup_updates == 0 for c in radam)
    small = arm["post-adam-1e-4-const"]
    assert small.optim.lr == 1e-4 and small.schedule.decay == "constant" and small.schedule.warmup_updates == 0
    # the groups the translation claims read (report/claims.py): C7, C8 at both rates, C9, C10, C13
    read = {f"post-adam-{lr}-{w}" for lr in ("5e-4", "1e-3") for w in ("nowarm", "w500", "w4000")}
    read |= {"pre-adam-5e-4-nowarm-step", "post-radam-5e-4-nowarm-linear", "pre-radam-5e-4-nowarm-linear",
             "post-adam-1e-4-const"}
    assert read == {r.group for r in f.values()}
    # the report says why each arm is what it is
    rows = {m.what.split(":")[0]: m for m in mappings(full, CTX)}
    assert all(g in rows and rows[g].here == FULL_ARMS[g].here for g in FULL_ARMS)
    assert "1/8 of the 100" in rows["T_warmup=500"].here and "same names and configs" in rows["runs"].here


def test_the_quick_grid_is_the_committed_quick_reports():
    """The quick runs keep their configs: each is the one docs/results/reproduce-quick was trained with (a setting
    added since counts at its default, as the grid's stale-settings check reads a run's config.yaml), so that
    report, and any quick folder written since issue 32 set the length to 2,000 updates, stay valid and `full` reuses
    them (docs/results/reproduce-quick/length-1200 is the report of the length before)."""
    import json
    from pathlib import Path

    from normlab.experiments.grid import settings_diff

    committed = json.loads((Path(__file__).parents[1] / "docs/results/reproduce-quick/results.json").read_text())
    q = _grid(get_scale("quick"), ("fig2", "fig4"))
    assert set(q) == set(committed["runs"])
    diffs = {name: settings_diff(spec, committed["runs"][name]["config"]) for name, spec in q.items()}
    assert diffs == {name: [] for name in q}


def test_long_is_the_quick_contrasts_per_epoch_on_the_recipe_shape():
    """Issue 37: `long` runs quick's three groups (C7 at 5e-4, C9) as whole epochs at the de-en-cpu recipe's shape,
    one lr curve for every arm (lr_max to update 100, then linear to 0 at the last update), BLEU after every epoch,
    the test split at the end, 3 seeds, one run at a time on every core of a CPU."""
    from dataclasses import replace

    from normlab.experiments.reproduce import local_shape
    from normlab.experiments.scales import QUICK_RUNS

    long = get_scale("long")
    ctx = Context(translation_updates_per_epoch=660)
    grid = {r.name: r for r in all_runs(long, ctx, long.figures)}
    assert {r.group for r in grid.values()} == set(QUICK_RUNS) and len(grid) == 3 * len(QUICK_RUNS)
    cfgs = {g: grid[f"{g}-s1"].config for g in QUICK_RUNS}
    for c in cfgs.values():
        m = c.model
        assert (m.d_model, m.d_ffn, m.n_heads, m.encoder_layers, m.decoder_layers) == (256, 1024, 4, 6, 6)
        assert (c.data.max_tokens, c.data.vocab_size, c.optim.lr, c.optim.betas) == (4096, 10000, 5e-4, (0.9, 0.98))
        assert (c.max_updates, c.eval_every, c.save_every) == (3000, 0, 0)  # the recipe's length, an epoch's checks
        assert (c.valid_bleu, c.beam, c.lenpen, c.test_checkpoint) == (500, 5, 1.2, "last")
        total = c.max_updates
        lr = build_schedule(c.schedule, c.optim.lr, total, ctx.translation_updates_per_epoch)
        assert lr(100) == pytest.approx(5e-4) and lr(total) == pytest.approx(0.0, abs=1e-12)
        assert lr(total // 2) == pytest.approx(5e-4 * (total - total // 2) / (total - 100))
    warm = {g: c.schedule.warmup_updates for g, c in cfgs.items()}
    assert warm == {"post-adam-5e-4-w4000": 100, "post-adam-5e-4-nowarm": 1, "pre-adam-5e-4-nowarm-step": 0}
    # the arms differ in the warm-up and the placement only
    base = cfgs["post-adam-5e-4-w4000"]
    for c in cfgs.values():
        same = replace(c, model=replace(c.model, placement="post"), schedule=replace(c.schedule, warmup_updates=100))
        assert same == base
    rows = {m.what: m.here for m in mappings(long, ctx)}
    assert "linearly to 0 at update 3,000" in rows["decay after the warm-up"]
    assert "the test split with the last checkpoint" in rows["evaluation"]
    assert local_shape(long, 0, 0, cuda=False, cores=2) == (1, 2)
    assert local_shape(get_scale("quick"), 0, 0, cuda=False, cores=2) == (2, 1)
    assert local_shape(long, 2, 0, cuda=False, cores=2) == (2, 1)  # --jobs wins
    assert all(c.keep_last == 1 for c in cfgs.values())
    avg = long.replace(translation=long.translation.replace(test_checkpoint="avg:3"))
    assert {r.config.keep_last for r in all_runs(avg, ctx, long.figures)} == {3}  # avg:3 needs the last 3 kept
    with pytest.raises(ConfigError, match="jobs"):
        long.replace(jobs=-1)
    assert long.mlm == get_scale("quick").mlm  # --figures fig5 at long is quick's BERT, not BERT-base


def test_run_record_carries_the_test_score(tmp_path):
    """A run that scored its test split (test_checkpoint) shows it in results.json and the report's runs table."""
    import json

    from normlab.experiments.results import run_record
    from normlab.report.html import RUN_COLUMNS, run_cells, run_columns

    spec = all_runs(get_scale("long"), Context(translation_updates_per_epoch=660), ("fig4",))[0]
    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "update": 3300, "test": {
        "checkpoint": "checkpoint_last.pt", "sentences": 2000, "bleu": 21.37, "bleu_tokenized": 22.1, "nll": 2.9,
        "beam": 5, "decoding": {}}}))
    valid = {"type": "valid", "update": 3300, "nll": 3.1, "bleu": 20.5}
    (tmp_path / "metrics.jsonl").write_text(json.dumps(valid) + "\n")
    rec = run_record(spec, tmp_path, None)
    assert rec["test"] == {"checkpoint": "checkpoint_last.pt", "sentences": 2000, "bleu": 21.37,
                           "bleu_tokenized": 22.1, "nll": 2.9}
    columns = run_columns([rec])
    cells = dict(zip(columns[1:], run_cells(rec, columns)))
    assert (cells["BLEU"], cells["test BLEU"]) == ("20.50", "21.37")
    assert run_columns([{"name": "no-test"}]) == RUN_COLUMNS  # the other scales' tables as they were


def test_the_committed_full_runs_are_runs_of_full():
    """docs/results/reproduce-full/runs/ holds finished runs of `reproduce --scale full` (issue 32: committed as they
    end, counted as finished by every later invocation): each must be one of full's runs, with its settings
    (grid.changed_settings, what the grid's stale check reads), or the grid would refuse the folder."""
    from pathlib import Path

    from normlab.experiments.grid import changed_settings

    runs = Path(__file__).parents[1] / "docs/results/reproduce-full/runs"
    # fine-tuning's warm-up is a share of its updates, which the data sets: full's 8,000 training pairs of each task
    # (FinetuneScale.train_subset; both vendored tasks have more) in batches of 32 are 250 updates an epoch
    ctx = Context(translation_updates_per_epoch=100, finetune_updates_per_epoch={"paraphrase": 250, "wic": 250})
    specs = {s.name: s for s in all_runs(get_scale("full"), ctx, ("fig2", "fig4", "fig5", "fig6"))}
    committed = sorted(d for d in runs.iterdir() if d.is_dir()) if runs.is_dir() else []
    for d in committed:
        assert d.name in specs, d.name
        assert changed_settings(specs[d.name], d) == [], d.name
