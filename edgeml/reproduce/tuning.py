"""Offline tuning: the value a tuning sweep chooses at each setting, beside what the runs it tunes use.

A ``[[runs]]`` entry that sweeps candidate values of a hyper-parameter declares what it tunes::

    [[runs]]
    name = "tune-fig6"
    algorithm = "fixed_adacomm"
    seeds = [100, 101]                       # tuning seeds, which decide no verdict
    sweep = { "network.commit_delay_s" = [0.0, 8.0], "fixed_adacomm.tau0" = [1, 2, 4, 8] }
    tunes = { key = "fixed_adacomm.tau0", by = "time_to_target",
              runs = { "fig6-fixed_adacomm" = "fixed_adacomm.tau0", "fig6-adacomm" = "adacomm.tau0" } }

Its other sweep keys are the *settings* (here the delay): at each, the candidate with the best mean of ``by``
over the tuning seeds is chosen (``time_to_target``: the least, a candidate with a censored seed counting as
never reaching the target, and where every candidate has one, the best mean final value of the target's
metric; accuracies: the highest; losses: the least; a tie goes to the smaller value). A candidate whose model
diverged on any of its tuning seeds is not chosen, whatever its score: a setting at the edge of stability chosen
by the seeds' luck (the table marks it "diverged k/n", and a table of each candidate's stability per seed names
the seeds). With ``edge = "above"`` (a step size, whose stability is lost as it grows) no candidate above the
smallest one that diverged is chosen either: that it held on these seeds is luck too (marked "above the
edge"). A choice rests on three tuning seeds or more; the report says where it rests on fewer. The choice is not applied
by itself: the experiment file writes it into the tuned runs (their ``points``, or their config), so that what
a run used stays in the file; the report tables the choice beside the value each tuned run uses at that
setting (matched by the settings' config values) and names any that differ. While some of a setting's tuning
runs have not finished, its choice is marked provisional ("so far") and no difference is warned of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from edgeml.rundir import fmt_value

BY = {"time_to_target": "lower", "steps_to_target": "lower", "iterations_to_target": "lower",
      "bytes_to_target": "lower", "cost_to_target": "lower", "best_accuracy": "higher", "final_accuracy": "higher",
      "final_loss": "lower", "best_loss": "lower"}
"""What ``tunes.by`` may name, and which way is better. The ``_to_target`` ones are read at the experiment's first
target, a candidate with a censored seed counting as never reaching it."""


def to_target(by: str) -> bool:
    return by.endswith("_to_target")


@dataclass
class Tunes:
    """``[[runs]] tunes``: the swept ``key`` the entry tunes, the metric that decides (``by``), and the runs it
    tunes: ``{ run entry name = "the config key that takes the choice" }``."""

    key: str = ""
    by: str = "time_to_target"
    runs: dict = field(default_factory=dict)
    edge: str = "none"  # "above": a candidate above one that diverged is not chosen either


EDGES = ("none", "above")
"""What ``tunes.edge`` may say: no order of stability is assumed, or stability is lost as the value grows."""
MIN_SEEDS = 3
"""The tuning seeds a choice needs: with fewer, a candidate stable on every one may still diverge on others."""


@dataclass
class Choice:
    """One setting of a tuning sweep: each candidate's mean score, the chosen one, and what the tuned runs use."""

    setting: dict[str, Any]
    scores: dict[Any, tuple[float, int, int]]  # candidate -> (mean of the deciding metric, seeds, censored seeds)
    by: str  # the metric that decided (time_to_target, or its fallback where every candidate is censored)
    chosen: Any
    seeds: list[int] = field(default_factory=list)
    used: dict[str, list[Any]] = field(default_factory=dict)  # tuned entry -> the values its runs here use
    pending: int = 0  # planned tuning runs at this setting not finished: the choice is provisional
    diverged_on: dict[Any, list[int]] = field(default_factory=dict)  # candidate -> the seeds its model diverged on
    beyond: list[Any] = field(default_factory=list)  # stable candidates above the edge (``edge = "above"``)

    @property
    def unstable(self) -> dict[Any, int]:
        """Candidate -> how many tuning seeds its model diverged on (never chosen)."""
        return {v: len(seeds) for v, seeds in self.diverged_on.items()}

    def differs(self) -> list[str]:
        """The tuned entries whose runs at this setting use another value than the chosen one (so far, while
        tuning runs are pending)."""
        return [name for name, values in self.used.items()
                if self.chosen is not None and any(not same(v, self.chosen) for v in values)]


def same(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return float(a) == float(b)
    return fmt_value(a) == fmt_value(b)


def _flat(cfg: Any) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, values in cfg.to_dict().items() for k, v in values.items()}


def choices(spec: Any, done: list, planned: list, per_run: pd.DataFrame, target_metric: str,
            diverged: set[tuple[str, int]] = frozenset()) -> list[Choice]:
    """The tuning entry ``spec``'s choice at each of its settings, from its finished runs (``done``, rows of
    ``per_run`` by label and seed), beside what the planned runs it tunes use there (``planned``); ``diverged``:
    the (label, seed) of the runs whose model diverged."""
    tunes = Tunes(**spec.tunes)
    mine = [p for p in done if p.spec == spec.name and tunes.key in p.point]
    rows = per_run.set_index(["run", "seed"]) if len(per_run) else None
    grouped: dict[tuple, dict[Any, list[dict]]] = {}
    seeds: dict[tuple, set[int]] = {}
    for p in mine:
        if rows is None or (p.name, p.seed) not in rows.index:
            continue
        row = rows.loc[(p.name, p.seed)]
        row = row.iloc[0] if isinstance(row, pd.DataFrame) else row
        setting = tuple((k, v) for k, v in p.point.items() if k != tunes.key)  # (--quick: its quick sweep's)
        grouped.setdefault(setting, {}).setdefault(p.point[tunes.key], []).append(
            {**row.to_dict(), "_diverged": (p.name, p.seed) in diverged, "_seed": p.seed})
        seeds.setdefault(setting, set()).add(p.seed)
    fallback = "final_accuracy" if target_metric == "accuracy" else "final_loss"
    tuned = [(p, _flat(p.cfg)) for p in planned if p.spec in tunes.runs and p.cfg is not None]
    out = []
    for setting, candidates in grouped.items():
        by = tunes.by
        diverged_on = {v: ss for v, rs in candidates.items()
                       if (ss := sorted(r["_seed"] for r in rs if r["_diverged"]))}
        unstable = set(diverged_on)
        beyond = edge_beyond(list(candidates), unstable, tunes.edge)
        eligible = {v for v in candidates if v not in unstable and v not in beyond}
        if to_target(by) and all(any(r["censored"] for r in candidates[v]) for v in eligible):
            by = fallback
        scores = {v: (score(rs, by), len(rs), sum(bool(r["censored"]) for r in rs)) for v, rs in candidates.items()}
        chosen = best({v: s[0] for v, s in scores.items() if v in eligible}, by)
        c = Choice(dict(setting), scores, by, chosen, sorted(seeds[setting]), diverged_on=diverged_on, beyond=beyond)
        finished = {(p.name, p.seed) for p in mine}
        c.pending = sum(1 for p in planned if p.spec == spec.name and (p.name, p.seed) not in finished
                        and all(same(p.point.get(k), v) for k, v in setting))
        for name, key in tunes.runs.items():
            used = [flat.get(key) for p, flat in tuned if p.spec == name
                    and all(same(flat.get(k), v) for k, v in setting)]
            if used:
                c.used[name] = list(dict.fromkeys(used))
        out.append(c)
    return out


def edge_beyond(candidates: list[Any], unstable: set[Any], edge: str) -> list[Any]:
    """The stable candidates that ``edge = "above"`` rules out: those above the smallest candidate that diverged
    on some tuning seed (numbers only; none with ``edge = "none"``)."""
    numbers = [v for v in unstable if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if edge != "above" or not numbers:
        return []
    low = min(numbers)
    return sorted((v for v in candidates if v not in unstable and isinstance(v, (int, float))
                   and not isinstance(v, bool) and v > low), key=_order)


def score(rows: list[dict], by: str) -> float:
    """The mean of ``by`` over a candidate's seeds; a time (steps, bytes...) to the target with a censored seed is
    infinite (never)."""
    if to_target(by) and any(r["censored"] for r in rows):
        return math.inf
    return sum(float(r[by]) for r in rows) / len(rows)


def best(scores: dict[Any, float], by: str) -> Any:
    """The candidate whose score is best by ``by`` (see ``BY``); a tie goes to the smaller value; NaN scores (not
    measured) are left out; None where none is left."""
    sign = -1 if BY[by] == "higher" else 1
    finite = {v: s for v, s in scores.items() if not math.isnan(s)}
    return min(finite, key=lambda v: (sign * finite[v], _order(v))) if finite else None


def _order(v: Any) -> tuple:
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0.0, fmt_value(v))


def table(spec: Any, found: list[Choice], target: str, quick: bool) -> list[str]:
    """The report's lines for one tuning entry: a row per setting, each candidate's mean score, the choice and
    the value each tuned entry uses there (with --quick the tuned runs keep their quick settings: not compared)."""
    from edgeml.analysis.tables import md_table

    tunes = Tunes(**spec.tunes)
    if not found:
        return []
    values = sorted({v for c in found for v in c.scores}, key=_order)
    settings_keys = sorted({k for c in found for k in c.setting})

    def cell(c: Choice, v: Any) -> str:
        if v not in c.scores:
            return "-"
        mean, n, censored = c.scores[v]
        text = "never" if mean == math.inf else "-" if math.isnan(mean) else \
            (f"{mean:.4g} s" if c.by == "time_to_target" else f"{mean:.4g}")
        if v in c.unstable:
            text += f" (diverged {c.unstable[v]}/{n})"
        elif v in c.beyond:
            text += " (above the edge)"
        return f"**{text}**" if same(v, c.chosen) else text

    tuned = list(tunes.runs)
    rows = []
    for c in found:
        row = [", ".join(f"{k}={fmt_value(v)}" for k, v in c.setting.items()) or "-", c.by.replace("_", " ")]
        row += [cell(c, v) for v in values]
        pending = f" (so far: {c.pending} tuning run{'s' if c.pending > 1 else ''} to come)" if c.pending else ""
        row.append(("-" if c.chosen is None else fmt_value(c.chosen)) + pending)
        if not quick:
            for name in tuned:
                used = c.used.get(name)
                text = ", ".join(fmt_value(u) for u in used) if used else "-"
                row.append(text + ((" (differs so far)" if c.pending else " (differs)") if name in c.differs()
                                   else ""))
        rows.append(row)
    key = tunes.key
    head = ["setting" if settings_keys else "", "by"] + [f"{key}={fmt_value(v)}" for v in values] + ["chosen"]
    if not quick:
        head += [f"{name} uses ({tunes.runs[name]})" for name in tuned]
    what = {"best_accuracy": "the highest mean best accuracy", "final_accuracy": "the highest mean final accuracy",
            "final_loss": "the least mean final loss", "best_loss": "the least mean best loss"}.get(tunes.by) or (
        f"the least mean {tunes.by.removesuffix('_to_target').replace('_', ' ')} to {target}, a candidate with a "
        "censored seed counting as never reaching it (where every candidate has one: the best mean final value)")
    note = (" With --quick the tuned runs keep their quick settings." if quick else
            " A tuned run that uses another value is marked (differs): write the choice into its points.")
    seeds = sorted({s for c in found for s in c.seeds})
    if any(c.beyond for c in found):
        note = (" Stability is lost as the value grows (edge = \"above\"): no candidate above the smallest one that "
                "diverged is chosen either (above the edge).") + note
    if any(c.unstable for c in found):
        note = " A candidate whose model diverged on some seed is not chosen (diverged k/n)." + note
    if not quick and len(seeds) < MIN_SEEDS:
        note += (f" {'One tuning seed' if len(seeds) == 1 else f'{len(seeds)} tuning seeds'}: fewer than the "
                 f"{MIN_SEEDS} a choice needs, so a candidate stable on {'it' if len(seeds) == 1 else 'each'} may "
                 "still diverge on others.")
    return [f"`{spec.name}` tunes `{key}` by {what}, over its seeds ({', '.join(map(str, seeds))}); "
            "the chosen value in bold." + note, "", md_table(head, rows), ""] + _stability(found, values, key)


def _stability(found: list[Choice], values: list[Any], key: str) -> list[str]:
    """Each candidate's stability on each tuning seed: the seeds its model diverged on, per setting (where any
    candidate diverged; else one line that says none did)."""
    from edgeml.analysis.tables import md_table

    if not any(c.unstable for c in found):
        return []
    rows = []
    for c in found:
        row = [", ".join(f"{k}={fmt_value(v)}" for k, v in c.setting.items()) or "-"]
        for v in values:
            if v not in c.scores:
                row.append("-")
                continue
            ran = c.scores[v][1]
            bad = c.diverged_on.get(v, [])
            row.append(f"diverged on {', '.join(map(str, bad))}" if bad else f"stable on all {ran}")
        rows.append(row)
    return ["Stability of each candidate on each tuning seed (the seeds whose model diverged):", "",
            md_table(["setting"] + [f"{key}={fmt_value(v)}" for v in values], rows), ""]
