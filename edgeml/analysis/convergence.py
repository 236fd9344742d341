"""When did a run converge? Times, steps and bytes to a target, from the run's ``evals.csv`` alone.

A single evaluation touching a loose target is noise, not convergence: a curve that dips below 0.9 once and
rises back above 1.0 has not reached 0.9. The rules (``Target.rule``):

- ``stays`` (the default, used by claims): the first evaluation from which the metric meets the target at
  every later evaluation of the run: it never rises above a loss target (or falls below an accuracy target)
  again. It depends on how long the run went on; runs compared with each other share a budget.
- ``smoothed``: the first evaluation at which the mean of the last ``window`` evaluations meets the target.
- ``first``: the first evaluation that meets the target (fragile; kept for comparison).
- ``stopping``: the paper's own stopping rule as the run's config states it (``stop.loss_variance`` over
  ``stop.window`` evaluations, ADSP Sec. 5.2): the first evaluation at which the population variance of
  the last ``window`` losses is below the threshold, exactly as the monitor decides it.

A target may also be a number of completed epochs (``Target("epochs", 30)``, the evaluations' ``epochs``
column, a counter that never falls: every rule reads it alike): "the training time across different epochs"
(EdgeGossip Sec. 4.1), the time, steps or bytes a run spends on its first 30 epochs, and ``value_at`` the test
accuracy (or loss) it has there. A run whose evaluations count no epoch has not reached one.

A run that never got there is **censored**: its time, steps and bytes are known only to exceed what the run
spent (its duration, its total steps and bytes), and a ``Reach`` says so instead of inventing a number
(``reach_run`` reads both from a run directory).
Resolution: a time to target is quantised to the evaluation interval, so differences below one interval are
not measured.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np
import pandas as pd

from edgeml.rundir import SMOOTH_WINDOW, Run

RULES = ("stays", "smoothed", "first", "stopping")
RULE_NAMES = {"stays": "stays", "first": "first reach", "smoothed": "moving average", "stopping": "stopping rule"}
UNITS = {"time": "s", "steps": "steps", "bytes": "bytes", "ingress": "bytes", "iterations": "iterations",
         "cost": "byte-hops"}
COLUMNS = {"time": "time_s", "steps": "total_steps", "bytes": "total_bytes", "ingress": "ps_ingress_bytes",
           "iterations": "iterations", "cost": "total_byte_hops"}
"""Quantities spent until a target: time, steps, bytes sent by every node, bytes into the parameter server
(AdaComp's ingress traffic), the algorithm's ``iterations`` counter, and the communication cost in
byte-hops (SNAP Sec. II-B); NaN without the column."""
TARGET_METRICS = ("time_to_target", "steps_to_target", "bytes_to_target", "ingress_to_target",
                  "iterations_to_target", "cost_to_target")
"""The metrics measured until a target, one per quantity of ``COLUMNS`` (claims and tables name them)."""


EPOCHS = "epochs"
"""A target's metric that counts completed epochs (``Target(EPOCHS, 30)``): reached once the run has completed
that many."""
EVAL_METRICS = ("accuracy", "loss")
"""What a run's evaluations measure, read at a target (``value_at``): claims on them name the epochs they are read
at (``edgeml.analysis.claims``)."""


@dataclass(frozen=True)
class Target:
    metric: str  # accuracy, average_accuracy or EPOCHS (reach at least); loss, average_loss (fall to at most)
    value: float = 0.0  # unused by the stopping rule
    rule: str = "stays"
    note: str = ""
    window: int = SMOOTH_WINDOW  # the evaluations the smoothed rule averages

    def __str__(self) -> str:
        if self.metric == EPOCHS:
            return f"{self.value:g} epochs completed"
        if self.rule == "stopping":
            return "the stopping rule (loss variance over the last evaluations below the run's threshold)"
        op = "<=" if self.lower else ">="
        rule = {"stays": "stays ", "smoothed": f"(mean of {self.window} evaluations) ", "first": "first "}
        return f"{self.metric} {rule[self.rule]}{op} {self.value:g}" + (f" ({self.note})" if self.note else "")

    @property
    def key(self) -> str:
        """``short``, naming the rule where it is not the default (``stays``): targets that differ only in their
        rule stay apart in the claims' samples ("loss<=0.9 (first reach)")."""
        if self.rule in ("stays", "stopping") or self.metric == EPOCHS:
            return self.short
        return f"{self.short} ({RULE_NAMES[self.rule]}{f' of {self.window}' if self.rule == 'smoothed' else ''})"

    @property
    def short(self) -> str:
        """A label for table headers and file names: 'loss<=0.9', 'stopping rule'."""
        if self.rule == "stopping":
            return "stopping rule"
        return f"{self.metric}{'<=' if self.lower else '>='}{self.value:g}"

    @property
    def lower(self) -> bool:
        """Whether the metric falls to the target (a loss: ``loss``, ``average_loss``) rather than rises to it."""
        return self.metric.endswith("loss")

    def meets(self, values: np.ndarray) -> np.ndarray:
        return values <= self.value if self.lower else values >= self.value


@dataclass(frozen=True)
class Reach:
    """Each quantity of ``COLUMNS`` at convergence; when ``censored``, what the run spent without converging."""

    values: dict  # {"time": s, "steps": ..., "bytes": ..., "ingress": ...}
    censored: bool
    resolution: dict  # the same keys: spacing of the evaluations

    def value(self, quantity: str) -> float:
        return self.values[quantity]

    @property
    def time_s(self) -> float:
        return self.values["time"]

    @property
    def steps(self) -> float:
        return self.values["steps"]

    @property
    def bytes(self) -> float:
        return self.values["bytes"]


def stays_index(ok: np.ndarray) -> int | None:
    """The first index from which every element of ``ok`` is true (None if the last one is false)."""
    if ok.size == 0 or not ok[-1]:
        return None
    false = np.flatnonzero(~ok)
    return int(false[-1] + 1) if false.size else 0


def first_index(ok: np.ndarray) -> int | None:
    hits = np.flatnonzero(ok)
    return int(hits[0]) if hits.size else None


def smoothed_index(values: np.ndarray, target: Target, window: int = SMOOTH_WINDOW) -> int | None:
    means = pd.Series(values).rolling(window, min_periods=window).mean().to_numpy()
    return first_index(target.meets(means) & ~np.isnan(means))


def stopping_index(losses: np.ndarray, variance: float, window: int) -> int | None:
    """The first evaluation at which the last ``window`` losses (all finite) have variance below ``variance``
    (the monitor's rule: ``edgeml.runtime.monitor.Monitor``)."""
    if not variance or window < 1:
        return None
    for i in range(window - 1, len(losses)):
        recent = losses[i - window + 1:i + 1]
        if all(math.isfinite(x) for x in recent) and statistics.pvariance(recent) < variance:
            return i
    return None


def target_index(values: np.ndarray, target: Target) -> int | None:
    """The index at which ``values`` (the target's metric at each evaluation) reach ``target`` by its rule (not
    the stopping rule, which reads losses: ``stopping_index``)."""
    if target.rule == "smoothed":
        return smoothed_index(values, target, target.window)
    return (stays_index if target.rule == "stays" else first_index)(target.meets(values))


def resolution(evals: pd.DataFrame) -> dict:
    """The median spacing of the evaluations in time, steps and bytes (what one evaluation interval is worth)."""
    out = {}
    for q, col in COLUMNS.items():
        gaps = np.diff(evals[col].to_numpy(dtype=float)) if col in evals else np.zeros(0)
        out[q] = float(np.median(gaps)) if gaps.size else math.nan
    return out


def reach(evals: pd.DataFrame, target: Target, end: dict, stop: tuple[float, int] = (0.0, 0)) -> Reach:
    """Where ``evals`` reaches ``target`` under its rule; ``end`` = {"time", "steps", "bytes", "ingress"} the run
    spent (the bounds of a censored run; ingress optional); ``stop`` = (loss variance threshold, window) for the
    stopping rule."""
    res = resolution(evals)
    if target.rule == "stopping":
        i = stopping_index(evals["loss"].to_numpy(dtype=float), *stop)
        rows = evals
    else:
        rows, i = _arrival(evals, target)
    if i is None:
        return Reach({q: float(end.get(q, math.nan)) for q in COLUMNS}, True, res)
    row = rows.iloc[i]
    return Reach({q: float(row.get(col, math.nan)) for q, col in COLUMNS.items()}, False, res)


def _arrival(evals: pd.DataFrame, target: Target) -> tuple[pd.DataFrame, int | None]:
    """The evaluations that measure ``target``'s metric, and the index among them where the target is reached by
    its rule (None: not reached, or no such column, as before a run's first epoch is counted)."""
    if target.metric not in evals:
        return evals.iloc[:0], None
    rows = evals[evals[target.metric].notna()]
    return rows, target_index(rows[target.metric].to_numpy(dtype=float), target)


def run_evals(run: Run, metric: str) -> pd.DataFrame:
    """The run's evaluations, where ``metric`` is the average model's (``average_loss``) and the run evaluates that
    model itself (``eval.models = "average"``, which writes no such column) with its ``loss`` as that column; a
    run that evaluates other models and lacks the column (made before it existed) has none: not measured."""
    evals = run.evals
    own = metric.removeprefix("average_")
    if own != metric and metric not in evals and own in evals and \
            (run.config.get("eval") or {}).get("models", "average") == "average":
        return evals.assign(**{metric: evals[own]})
    return evals


def value_at(evals: pd.DataFrame, target: Target, column: str) -> float | None:
    """``column`` (accuracy, loss) after ``target``'s count of epochs N: the mean over the evaluations of the Nth
    epoch, from the first at N - 1 epochs to the first at N, so that one noisy evaluation does not decide it and
    runs compared at the same epochs average over the same training, whatever their epochs' length. None where
    the run never completes N epochs or has no such column."""
    rows, i = _arrival(evals, target)
    if i is None or column not in evals:
        return None
    start = first_index(rows[target.metric].to_numpy(dtype=float) >= target.value - 1) or 0
    seen = pd.to_numeric(rows[column].iloc[start:i + 1], errors="coerce").dropna()
    return float(seen.mean()) if len(seen) else None


def reach_run(run: Run, target: Target) -> Reach:
    """Where a run reaches ``target``; censored at what the run spent (its summary), the stopping rule read from
    the run's own config. Found once per run and target: a report's tables, claims and figures ask for the same
    ones thousands of times."""
    known = run.__dict__.setdefault("_reach", {})
    if target not in known:
        known[target] = _reach_run(run, target)
    return known[target]


def _reach_run(run: Run, target: Target) -> Reach:
    s, stop = run.summary, run.config.get("stop", {})
    spent = {"time": s["duration_s"], "steps": s["total_steps"], "bytes": s["total_bytes"],
             "ingress": s["ps_ingress_bytes"], "iterations": (s.get("counts") or {}).get("iterations", math.nan),
             "cost": s.get("total_byte_hops", math.nan)}
    return reach(run_evals(run, target.metric), target, spent,
                 (float(stop.get("loss_variance") or 0.0), int(stop.get("window") or 0)))


REACHED_STEP = 0.005
"""The grid of ``highest_reached``: levels of accuracy (or loss) that are whole multiples of it."""


def highest_reached(runs: Iterable[Run], target: Target, step: float = REACHED_STEP) -> float | None:
    """The highest accuracy (for a loss target, the lowest loss) on a grid of ``step`` that every run reaches by
    ``target``'s rule (its metric, rule and window; its value unused): the target every run of a comparison
    reaches. None without runs, under the stopping rule, or when some run has no evaluation of the metric; NaN
    when that level is no better than some run's first evaluation, where a run reaches it before training (by
    "stays", a run that diverged reaches no level above its start): no ratio of times or bytes is measured
    there."""
    runs = list(runs)
    if not runs or target.rule == "stopping":
        return None
    higher = not target.lower
    levels = []
    for r in runs:
        evals = run_evals(r, target.metric)
        values = evals[target.metric].to_numpy(dtype=float) if target.metric in evals else np.array([])
        values = values[np.isfinite(values)]
        if values.size == 0:
            return None

        def reached(k: int, r: Run = r) -> bool:
            return not reach_run(r, replace(target, value=round(k * step, 9))).censored

        # reached(k) is monotone in k: bisect for the best level this run reaches
        if higher:  # the largest k reached; level 0 always is (every accuracy is >= 0)
            lo, hi = 0, int(math.floor(values.max() / step)) + 1  # + 1: a best value on the grid, whatever its rounding
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if reached(mid) else (lo, mid - 1)
        else:  # the smallest k reached; a level above every loss always is
            lo, hi = 0, int(math.ceil(values.max() / step)) + 1
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if reached(mid) else (mid + 1, hi)
        if not reached(lo):
            return None
        levels.append(lo)
    level = round((min(levels) if higher else max(levels)) * step, 9)
    starts = [float(run_evals(r, target.metric)[target.metric].dropna().iloc[0]) for r in runs]
    return level if (level > max(starts) if higher else level < min(starts)) else math.nan
