"""The results experiments hand to the report: the records of runs and seed groups in ``results.json``, the
seed curves and intervals read off them, and the sweep's cells, curves and stability edges.

The experiments (normlab/experiments) write these; the report (normlab/report) reads and renders them. Both import
this module, never each other's: it sits below the report layer (tests/test_layers.py).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from normlab.metrics import mean_ci

__all__ = ["WARMUPS", "Cell", "Curve", "Edge", "arms", "best_loss_gap", "bracket_machines", "edge_text",
           "group_runs", "lr_name", "machines", "mean_ci95", "provenance", "same_machine", "seed_curves", "split_seed",
           "trivial_baseline", "warm_arms"]  # fmt: skip

# -------------------------------------------------------------------------------------------------------------
# the runs of a grid (results.json: runs, groups)


_SEEDED = re.compile(r"^(?P<base>.+)-s(?P<seed>\d+)$")


def lr_name(x: float) -> str:
    """A learning rate as run names spell it: 5e-4, 1e-3, 1.8e-3 (the fewest digits that give ``x`` back)."""
    s = next((t for p in range(17) if float(t := f"{x:.{p}e}") == x), None)
    if s is None:
        raise ValueError(f"a learning rate must be a finite number, got {x}")
    mantissa, exponent = s.split("e")
    return f"{mantissa}e{int(exponent)}"


def split_seed(name: str) -> tuple[str, int | None]:
    """``NAME-sK`` -> (``NAME``, K), the inverse of :func:`with_seeds`' naming; a name without it -> (name, None)."""
    m = _SEEDED.match(name)
    return (m["base"], int(m["seed"])) if m else (name, None)


def mean_ci95(values: list[float]) -> dict[str, Any]:
    """Mean and half-width of the 95% confidence interval (Student's t over ``values``, e.g. seeds)."""
    if not values:
        return {"mean": None, "ci95": None, "n": 0}
    ci = mean_ci(values, 0.95)
    return {"mean": ci.mean, "ci95": ci.half_width if math.isfinite(ci.half_width) else None, "n": ci.n}


def seed_curves(members: list[dict[str, Any]], key: str = "nll") -> dict[str, Any]:
    """The seed mean and standard deviation of ``key`` at each evaluation point (update) every finished seed
    has (the report's curves with bands), and each seed's final value (diverged: None)."""
    done = [r for r in members if r.get("status") in ("completed", "cached", "diverged")]
    per_seed = [{int(e["update"]): (e["epoch"], e[key]) for e in r.get("evals", []) if e.get(key) is not None}
                for r in done if r.get("status") != "diverged"]  # fmt: skip
    common = sorted(set.intersection(*(set(p) for p in per_seed))) if per_seed else []
    curve = []
    for u in common:
        vals = [p[u][1] for p in per_seed]
        m = sum(vals) / len(vals)
        sd = math.sqrt(sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) if len(vals) > 1 else None
        curve.append({"update": u, "epoch": per_seed[0][u][0], "mean": m, "sd": sd, "n": len(vals)})
    finals = [None if r.get("status") == "diverged" else (r["evals"][-1].get(key) if r.get("evals") else None)
              for r in done]  # fmt: skip
    return {"curve": curve, "finals": finals, "seeds": len(done), "diverged": sum(r.get("status") == "diverged" for r in done)}


def group_runs(runs: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The runs of ``results["runs"]`` by seed group (a run's ``group`` field, else its name less ``-sK``), in
    seed order; fine-tuning runs are left out (the fine-tuning table holds their seed statistics)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for name, run in runs.items():
        if run.get("kind") == "finetune":
            continue
        groups.setdefault(run.get("group") or split_seed(name)[0], []).append(dict(run, name=run.get("name", name)))
    for members in groups.values():
        members.sort(key=lambda r: split_seed(r["name"])[1] or 0)
    return groups


# -------------------------------------------------------------------------------------------------------------
# the stability sweep (sweep.json: cells, frontier rows)

WARMUPS = ("none", "paper", "adam")
"""The warm-up arms (SweepConfig.warmup_length): none; the paper's share of the run; 2/(1 - beta2) updates."""


@dataclasses.dataclass(frozen=True)
class Cell:
    """One run's result: its coordinates, its final validation NLL (None when it has none: diverged or
    failed), its loss at initialisation l0 and its status (completed / diverged / failed / ...)."""

    scheme: str
    warmup: str
    width: int
    lr: float
    seed: int
    final: float | None
    l0: float | None
    status: str = "completed"

    @property
    def curve(self) -> tuple[str, str, int, int]:
        """The seed's learning-rate curve this run is a point of: (scheme, warm-up, width, seed)."""
        return self.scheme, self.warmup, self.width, self.seed


@dataclasses.dataclass(frozen=True)
class Curve:
    """One loss-vs-learning-rate curve (one seed, or the seed mean) and what is read off it."""

    lrs: tuple[float, ...]
    finals: tuple[float | None, ...]  # None where the point diverged or has no loss
    diverged: tuple[bool, ...]
    l0: float | None
    best: float | None  # l*: the best final loss of a point that did not diverge
    best_lr: float | None
    lr_tolerance: float | None  # None: the curve never trained
    sensitivity: float | None
    trained: bool
    note: str = ""
    plateau: bool = False  # it trained (below l0) but its best run did not leave the unigram plateau

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class Edge:
    """One seed's stability edge on one curve: the largest stable learning rate below the smallest unstable one
    (``last_stable``; None when the smallest learning rate run was already unstable) and that smallest unstable
    one (``first_unstable``; None when no run was unstable: censored, the true edge is above ``last_stable``)."""

    last_stable: float | None
    first_unstable: float | None

    @property
    def censored(self) -> bool:
        return self.first_unstable is None

    @property
    def ratio(self) -> float | None:
        if self.last_stable is None or self.first_unstable is None:
            return None
        return self.first_unstable / self.last_stable

    def to_dict(self) -> dict[str, Any]:
        return {"last_stable": self.last_stable, "first_unstable": self.first_unstable, "ratio": self.ratio,
                "censored": self.censored}  # fmt: skip


def trivial_baseline(scheme: str) -> bool:
    """The rule diagnose is scored beside (issue 40): "Post-LN needs warm-up, nothing else does", by the scheme's
    placement (post/rmsnorm is Post-LN)."""
    return scheme.split("/")[0] == "post"


def edge_text(e: dict[str, Any] | None) -> str:
    """A curve's stability edge in a few characters: '[lo, hi) x1.2' (the seeds' interval and its ratio), '>=lo'
    (censored: no run of some seed was unstable, a lower bound), '<hi' (unstable from the smallest lr), '-'."""
    if not e or not e.get("per_seed"):
        return "-"
    if e["censored"]:
        return "-" if e["lo"] is None else f">={e['lo']:.3g}"
    if e["lo"] is None:
        return f"<{e['hi']:.3g}"
    return f"[{e['lo']:.3g}, {e['hi']:.3g}) x{e['ratio']:.2f}"


def machines(cells: Sequence[dict[str, Any]]) -> tuple[dict[str, int], int]:
    """The machines a sweep's finished runs trained on (sweep.json cells' ``machine``, most runs first) and how many
    finished runs recorded none (written before cells carried it, or imported from such a sweep.json)."""
    done = [c for c in cells if c.get("status") in ("completed", "diverged")]
    counts = Counter(c["machine"] for c in done if c.get("machine"))
    return dict(counts.most_common()), sum(not c.get("machine") for c in done)


_CPU_DETAIL = re.compile(r" \(family [^)]*\)")  # device.cpu_name's family, model and instruction set


def same_machine(a: str, b: str) -> bool:
    """Whether two runs' machines (experiments.results.machine_of) can be one: equal, or equal once the CPU's
    family, model and instruction set are left out of one that names them while the other, recorded by an older
    normlab, does not (device.same_cpu's reading: consistent, not proof)."""
    if a == b:
        return True
    bare_a, bare_b = _CPU_DETAIL.sub("", a), _CPU_DETAIL.sub("", b)
    return bare_a == bare_b and (bare_a == a or bare_b == b)


def bracket_machines(rows: Sequence[dict[str, Any]], cells: Sequence[dict[str, Any]]) -> tuple[int, int, int]:
    """The seeds' edge brackets (last stable, first unstable run): how many have their two runs from two machines,
    of how many whose two runs both name their machine, of how many in all. Near the edge a run of one config can
    end on either side of the plateau line on two machines (docs/results/sweep-quick/width-gpu: an H100 and an H200,
    the same chip and torch, 0.23 nats apart), so such a bracket mixes the seed's numerics with the machines'."""
    where = {(c["scheme"], c["warmup"], c["width"], lr_name(c["lr"]), c["seed"]): c.get("machine") for c in cells}
    mixed = compared = brackets = 0
    for r in rows:
        for p in (r.get("edge") or {}).get("per_seed", []):
            if p.get("last_stable") is None or p.get("first_unstable") is None:
                continue
            brackets += 1
            a, b = (where.get((r["scheme"], r["warmup"], r["width"], lr_name(p[k]), p["seed"]))
                    for k in ("last_stable", "first_unstable"))
            if a and b:
                compared += 1
                mixed += not same_machine(a, b)
    return mixed, compared, brackets


def provenance(rows: Sequence[dict[str, Any]], cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Where a sweep's runs trained, for a report that keeps its result without the cells (reproduce's width
    figure): :func:`machines` and :func:`bracket_machines` in one record."""
    known, unrecorded = machines(cells)
    mixed, compared, brackets = bracket_machines(rows, cells)
    return {"machines": known, "unrecorded": unrecorded, "brackets_mixed": mixed, "brackets_compared": compared,
            "brackets": brackets}


def warm_arms(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The warm-up arms (not ``none``) that the frontier rows hold, in :data:`WARMUPS` order."""
    present = {r["warmup"] for r in rows}
    return [w for w in WARMUPS if w != "none" and w in present]


def arms(rows: Sequence[dict[str, Any]], warmup: str = "paper"
         ) -> dict[tuple[str, int], tuple[dict[str, Any] | None, dict[str, Any] | None]]:  # fmt: skip
    """The frontier rows paired per scheme x width: (no-warm-up row, ``warmup`` arm's row), None for an arm not
    run."""
    by = {(r["scheme"], r["warmup"], r["width"]): r for r in rows}
    return {(scheme, width): (by.get((scheme, "none", width)), by.get((scheme, warmup, width)))
            for scheme, width in sorted({(r["scheme"], r["width"]) for r in rows})}  # fmt: skip


def best_loss_gap(none: dict[str, Any] | None, warm: dict[str, Any] | None) -> float | None:
    """The no-warm-up arm's best final loss minus the warm-up arm's (+: warm-up better), None without both. Each
    arm's frontier is counted from its own best loss, so this is what the frontiers do not show: a warm-up that
    lowers the best loss without moving the largest learning rate within the margin of it."""
    if not none or not warm or none.get("best_loss") is None or warm.get("best_loss") is None:
        return None
    return none["best_loss"] - warm["best_loss"]
