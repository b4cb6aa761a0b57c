"""Learning-rate schedules: pure functions ``t -> lr`` of the update number t = 1, 2, ... (STYLE.md example 5).

Update t is the t-th optimizer step; ``lr(t)`` is the rate that step uses. So the first update runs at
``lr(1)``, never at 0 (nanoGPT once shipped a zero rate at step 0); ``lr(0)`` is defined only for plotting.

Each schedule is built from small pieces that compose:

* :func:`warmup` wraps another schedule with the paper's eq. (1), lr(t) = t / T_warmup * lr_max for
  t <= T_warmup; T_warmup = 0 or 1 means no warm-up (Figure 2's "1");
* :func:`inverse_sqrt`: lr_max * sqrt(T_warmup) / sqrt(t) (fairseq's ``inverse_sqrt``, used after warm-up in
  all of the paper's Figure 2 runs); ``ScheduleConfig.decay_from`` anchors it at another update than the end
  of the warm-up (lr_max held until then), so that runs with and without warm-up can share one decay curve;
* :func:`linear`: from lr_max at T_warmup (or ``decay_from``) to ``end_lr`` at the last update (BERT; the
  paper's Pre-LN BERT: from 3e-4, no warm-up);
* :func:`constant` (Figure 6: a fixed 1e-4);
* :func:`step` multiplies by a factor after each boundary (the paper's Pre-LN IWSLT run: 5e-4, x 0.1 at
  epoch 8); :func:`switch` continues with another schedule after a boundary (its WMT runs: decay at epoch 6,
  then an inverse square root).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from normlab.config import ScheduleConfig

Schedule = Callable[[int], float]

__all__ = ["Schedule", "constant", "inverse_sqrt", "linear", "warmup", "step", "switch", "build_schedule",
           "epoch_boundary", "budgeted_length"]


def constant(lr: float) -> Schedule:
    """lr(t) = lr."""
    return lambda t: lr


def inverse_sqrt(lr_max: float, warmup_updates: int = 0) -> Schedule:
    """lr(t) = lr_max * sqrt(T_warmup) / sqrt(t) for t >= T_warmup (fairseq ``inverse_sqrt``), lr_max before
    (where a warm-up wraps it, eq. (1) replaces that part); with no warm-up (T_warmup = 0 or 1), lr_max / sqrt(t)."""
    anchor = max(warmup_updates, 1)
    return lambda t: lr_max * math.sqrt(anchor / max(t, anchor))


def linear(lr_max: float, start: int, end: int, end_lr: float = 0.0) -> Schedule:
    """Straight line from (start, lr_max) to (end, end_lr); constant outside [start, end]."""
    if end <= start:
        raise ValueError(f"linear decay needs end > start, got start={start}, end={end}")
    return lambda t: lr_max + (end_lr - lr_max) * (min(max(t, start), end) - start) / (end - start)


def warmup(lr_max: float, warmup_updates: int, then: Schedule) -> Schedule:
    """Paper eq. (1): lr(t) = t / T_warmup * lr_max for t <= T_warmup, then ``then(t)``."""
    if warmup_updates <= 1:
        return then
    return lambda t: t / warmup_updates * lr_max if t <= warmup_updates else then(t)


def step(base: Schedule, boundaries: Sequence[int], factor: float) -> Schedule:
    """lr(t) = base(t) * factor^k, k = the number of boundaries b with t > b."""
    bounds = sorted(boundaries)
    return lambda t: base(t) * factor ** bisect.bisect_left(bounds, t)


def switch(first: Schedule, boundary: int, then: Schedule) -> Schedule:
    """``first`` up to and including update ``boundary``, ``then`` after it."""
    return lambda t: first(t) if t <= boundary else then(t)


def epoch_boundary(epoch: int, updates_per_epoch: int) -> int:
    """Epoch e (1-based) starts after (e - 1) * updates_per_epoch updates."""
    return (epoch - 1) * updates_per_epoch


def build_schedule(cfg: ScheduleConfig, lr_max: float, total_updates: int, updates_per_epoch: int) -> Schedule:
    """The schedule a :class:`ScheduleConfig` describes, for a run of ``total_updates`` updates.

    Epoch boundaries are turned into update numbers with ``updates_per_epoch`` (the number of updates of an
    epoch of the training data), so the result is still a pure function of t.
    """
    if why := cfg.past_the_end(total_updates):
        raise ValueError(why)
    w = cfg.warmup_updates
    start = cfg.decay_from or w  # validate() keeps decay_from >= w: eq. (1) ends at lr_max, then it is held
    if cfg.decay == "inverse_sqrt":
        after = inverse_sqrt(lr_max, start)
    elif cfg.decay == "linear":
        after = linear(lr_max, start, max(total_updates, start + 1), cfg.end_lr)
    else:
        after = constant(lr_max)
    schedule = warmup(lr_max, w, after)
    bounds = sorted(
        set(cfg.step_updates) | {epoch_boundary(e, updates_per_epoch) for e in cfg.step_epochs}
    )
    if bounds and cfg.after_step == "inverse_sqrt":
        b0 = bounds[0]
        lr_b0 = schedule(b0)
        schedule = switch(schedule, b0, lambda t: lr_b0 * math.sqrt(b0 / t))
    return step(schedule, bounds, cfg.step_factor) if bounds else schedule


def budgeted_length(budget_s: float, at: int, elapsed: float, mark: Sequence[float]) -> tuple[int, float]:
    """A run's length under ``TrainConfig.budget_hours`` (``budget_s`` seconds of updates), decided at update
    ``at`` with ``elapsed`` seconds of updates behind it: an update takes the mean time of those since ``mark`` =
    (update, elapsed seconds then), and the length is ``at`` plus the whole updates the rest of the budget buys at
    that rate (``at`` itself when the budget is spent). Returns the length, not capped (the trainer caps it by
    max_updates and max_epochs), and the seconds an update took."""
    done, then = int(mark[0]), float(mark[1])
    per = (elapsed - then) / max(at - done, 1)
    if per <= 0:  # no time measured (a clock that did not move): nothing to size the run by
        raise ValueError(f"updates {done + 1}-{at} took no measurable time")
    return at + math.floor(max(budget_s - elapsed, 0.0) / per), per
