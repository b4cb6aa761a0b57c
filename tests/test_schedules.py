"""Schedules against tables of values, including t = 0 and t = 1 (the first update never runs at lr 0)."""

import math

import pytest

from normlab.config import ConfigError, ScheduleConfig
from normlab.train.schedules import build_schedule, constant, inverse_sqrt, linear, step, switch, warmup

LR = 5e-4


def table(schedule, ts):
    return [schedule(t) for t in ts]


def test_warmup_then_inverse_sqrt_paper_eq1():
    s = build_schedule(ScheduleConfig(warmup_updates=4000), LR, 100_000, 1000)
    assert table(s, [0, 1, 2, 2000, 4000]) == pytest.approx([0.0, LR / 4000, 2 * LR / 4000, LR / 2, LR])
    assert table(s, [4001, 16_000, 64_000]) == pytest.approx([LR * math.sqrt(4000 / 4001), LR / 2, LR / 4])


@pytest.mark.parametrize("w", [0, 1])
def test_no_warmup_is_0_or_1(w):
    s = build_schedule(ScheduleConfig(warmup_updates=w), LR, 1000, 100)
    assert table(s, [0, 1, 4, 100]) == pytest.approx([LR, LR, LR / 2, LR / 10])  # lr(0) is the clamp of t=1
    assert s(1) > 0


def test_warmup_500_first_update_not_zero():
    s = build_schedule(ScheduleConfig(warmup_updates=500), 1e-3, 10_000, 100)
    assert s(1) == pytest.approx(2e-6) and s(500) == pytest.approx(1e-3) and s(2000) == pytest.approx(5e-4)


def test_linear_decay_bert():
    # the paper's Pre-LN BERT: linear decay from 3e-4, no warm-up; reaches 0 at the last update
    s = build_schedule(ScheduleConfig(decay="linear"), 3e-4, 1000, 100)
    assert table(s, [0, 1, 500, 1000]) == pytest.approx([3e-4, 3e-4 * 999 / 1000, 1.5e-4, 0.0])
    # Post-LN BERT: warm-up then linear decay
    s = build_schedule(ScheduleConfig(decay="linear", warmup_updates=100), 1e-4, 1100, 100)
    assert table(s, [1, 100, 600, 1100]) == pytest.approx([1e-6, 1e-4, 5e-5, 0.0])


def test_constant_figure6():
    s = build_schedule(ScheduleConfig(decay="constant"), 1e-4, 10, 5)
    assert table(s, [0, 1, 10]) == [1e-4, 1e-4, 1e-4]


def test_step_decay_at_epoch_8_pre_ln_iwslt():
    # 5e-4, x 0.1 from the start of epoch 8 (epochs of 1000 updates): updates 1..7000 at 5e-4
    s = build_schedule(ScheduleConfig(decay="constant", step_epochs=(8,)), LR, 20_000, 1000)
    assert table(s, [1, 7000, 7001, 15_000]) == pytest.approx([LR, LR, LR / 10, LR / 10])


def test_step_then_inverse_sqrt_wmt():
    # decay at epoch 6 then inverse square root, continuous apart from the factor
    s = build_schedule(ScheduleConfig(decay="constant", step_epochs=(6,), after_step="inverse_sqrt"), 7e-4, 20_000, 1000)
    assert s(5000) == pytest.approx(7e-4)
    assert s(5001) == pytest.approx(7e-5 * math.sqrt(5000 / 5001))
    assert s(20_000) == pytest.approx(7e-5 * math.sqrt(5000 / 20_000))


def test_step_updates_footnote():
    # footnote 1: 7.5e-4, decayed at update 8000, then inverse square root
    s = build_schedule(ScheduleConfig(decay="constant", step_updates=(8000,), after_step="inverse_sqrt"), 7.5e-4, 40_000, 500)
    assert s(8000) == pytest.approx(7.5e-4) and s(32_000) == pytest.approx(7.5e-5 / 2)


def test_pieces_compose():
    s = step(warmup(1.0, 4, inverse_sqrt(1.0, 4)), [8], 0.5)
    assert table(s, [1, 4, 16]) == pytest.approx([0.25, 1.0, 0.25])
    s = switch(constant(1.0), 3, linear(1.0, 3, 5))
    assert table(s, [3, 4, 5, 9]) == pytest.approx([1.0, 0.5, 0.0, 0.0])
    with pytest.raises(ValueError):
        linear(1.0, 5, 5)


def test_decay_from_one_curve_with_and_without_warmup():
    # the quick scale's C7 arms (scales.py): after update 100 both follow lr_max * sqrt(100 / t); the arm without
    # warm-up holds lr_max until then, where fairseq's inverse_sqrt with warmup 1 would give lr_max / sqrt(t)
    warm = build_schedule(ScheduleConfig(warmup_updates=100, decay_from=100), LR, 1200, 1357)
    cold = build_schedule(ScheduleConfig(warmup_updates=0, decay_from=100), LR, 1200, 1357)
    fairseq = build_schedule(ScheduleConfig(warmup_updates=100), LR, 1200, 1357)  # anchored at T_warmup
    ts = range(0, 1201)
    assert table(warm, ts) == table(fairseq, ts)  # decay_from = T_warmup is fairseq's own anchor
    assert table(cold, range(1, 101)) == [LR] * 100
    assert table(cold, range(100, 1201)) == table(warm, range(100, 1201))
    assert table(cold, [400, 1200]) == pytest.approx([LR / 2, LR * math.sqrt(100 / 1200)])
    assert table(warm, [1, 50, 100, 400]) == pytest.approx([LR / 100, LR / 2, LR, LR / 2])  # eq. (1), then the decay


def test_decay_from_linear_holds_then_decays():
    s = build_schedule(ScheduleConfig(decay="linear", warmup_updates=10, decay_from=50), 1e-3, 150, 100)
    assert table(s, [5, 10, 50, 100, 150]) == pytest.approx([5e-4, 1e-3, 1e-3, 5e-4, 0.0])


def test_decay_from_after_the_run():
    with pytest.raises(ValueError, match="decay_from=2000"):
        build_schedule(ScheduleConfig(decay_from=2000), LR, 1000, 100)
    # refused with the config, before any data is read (normlab train prints a ConfigError, not a traceback)
    from normlab.config import TrainConfig

    with pytest.raises(ConfigError, match="decay_from=2000 is after the run's end"):
        TrainConfig(max_updates=1000, schedule=ScheduleConfig(decay_from=2000))


def test_warmup_longer_than_run():
    with pytest.raises(ValueError, match="longer than the run"):
        build_schedule(ScheduleConfig(warmup_updates=4000), LR, 1000, 100)


@pytest.mark.parametrize(
    "kwargs, field",
    [({"warmup_updates": -1}, "warmup_updates"), ({"step_epochs": (1,)}, "step_epochs"),
     ({"step_updates": (5, 3)}, "step_updates"), ({"step_factor": 0}, "step_factor"),
     ({"after_step": "inverse_sqrt"}, "after_step"), ({"decay_from": -1}, "decay_from"),
     ({"decay": "constant", "decay_from": 100}, "decay_from"),
     ({"warmup_updates": 100, "decay_from": 50}, "decay_from"),
     ({"decay_from": 100, "step_updates": (50,), "after_step": "inverse_sqrt"}, "decay_from")],
)  # fmt: skip
def test_invalid_schedule_configs(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        ScheduleConfig(**kwargs)


def test_budgeted_length():
    """budget_hours' arithmetic: 100 s of updates done at update 20, updates 6-20 took 75 s (5 s each), 1,000 s
    buy 180 more; a budget already spent ends the run at the decision; a clock that did not move is an error."""
    from normlab.train.schedules import budgeted_length

    assert budgeted_length(1000.0, 20, 100.0, (5, 25.0)) == (200, 5.0)
    assert budgeted_length(1004.9, 20, 100.0, (5, 25.0)) == (200, 5.0)  # whole updates only
    assert budgeted_length(50.0, 20, 100.0, (5, 25.0)) == (20, 5.0)
    with pytest.raises(ValueError, match="no measurable time"):
        budgeted_length(1000.0, 20, 25.0, (5, 25.0))
