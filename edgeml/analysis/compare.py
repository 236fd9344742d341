"""Comparison tables rebuilt from run directories alone: what ``edgeml compare`` prints, and the tables and
claim samples that ``edgeml.analysis.figures`` and ``edgeml.reproduce`` build on. Which runs and how they are
labelled is ``edgeml.rundir``'s (``load_runs``).

Derived columns per run: ``time_to_target``, ``steps_to_target``, ``bytes_to_target`` under the target's rule
(``edgeml.analysis.convergence``: by default the time from which the metric *stays* at the target), NaN when the run
never got there (censored), with ``*_bound`` (the value, or what the run spent when censored) and ``censored``;
``noncompute_fraction`` (1 - compute fraction: ADSP Sec. 2.3's "waiting", which includes communication),
``samples_per_s``, ``bytes_per_s`` and ``bytes_per_step`` (all nodes' bytes over all steps). Per run label:
``seeds`` (distinct seeds; duplicate runs of one seed are one sample, their mean), ``reached`` (seeds that reached
the target), means over seeds with 95% bootstrap intervals (``edgeml.analysis.stats``), and ``speedup`` = baseline
time / run time paired by seed and environment (data, model, cluster, network), a bound when a side is censored. A
time to target is a mean only when every seed reached it; otherwise the table shows a bound ("> 1000" when none
did).
"""

from __future__ import annotations

import os

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from rich.table import Table
from rich.text import Text

from edgeml.analysis.convergence import (COLUMNS, EPOCHS, EVAL_METRICS, RULES, TARGET_METRICS, UNITS, Target, reach_run,
                                        value_at)
from edgeml.analysis.stats import bootstrap_ci, mean_interval, pair_effect
from edgeml.analysis.tables import (ci_text, md_table, number_text, reached_text, rich_table, speedup_text,
                                    time_text)
from edgeml.errors import UserError
from edgeml.rundir import Run, load_runs, warn

CONTEXT = ("algorithm", "dataset", "model", "workers", "hetero")
# What must match for two runs to be paired (besides the seed): the environment, not the algorithm.
PAIRED_SECTIONS = ("data", "model", "cluster", "network")
QUANTITIES = {m: m.split("_", 1)[0] for m in TARGET_METRICS}  # time_to_target -> time


def choose_targets(runs: list[Run], accuracy: Iterable[float] = (), loss: Iterable[float] = (),
                   rule: str = "stays") -> list[Target]:
    """The given targets, else the runs' common stop target, else 95% of the weakest run's best accuracy."""
    accuracy, loss = list(accuracy or ()), list(loss or ())
    if rule not in RULES:
        raise UserError(f"unknown convergence rule {rule!r}: choose one of {', '.join(RULES)}")
    if accuracy and loss:
        raise UserError("give --target-accuracy or --target-loss, not both")
    for metric, values in (("accuracy", accuracy), ("loss", loss)):
        for v in values:
            if not math.isfinite(v) or v < 0 or (metric == "accuracy" and v > 1):
                raise UserError(f"--target-{metric} {v}: give a finite number" +
                                (" between 0 and 1" if metric == "accuracy" else " >= 0"))
        if values:
            return [Target(metric, float(v), rule) for v in values]
    if rule == "stopping":
        return [Target("loss", rule="stopping")]
    for metric in ("accuracy", "loss"):
        values = {r.summary.get(f"target_{metric}") for r in runs}
        if len(values) == 1 and None not in values:
            return [Target(metric, float(values.pop()), rule, "the runs' stop target")]
    best = [r.summary["best_accuracy"] for r in runs if r.summary["best_accuracy"] is not None]
    value = round(0.95 * min(best), 3) if best else 1.0
    return [Target("accuracy", value, rule, "auto: 95% of the lowest best accuracy")]


def _pair_key(run: Run) -> str:
    env = {s: run.config.get(s, {}) for s in PAIRED_SECTIONS}
    return json.dumps([run.seed, env], sort_keys=True, default=str)


def baseline_labels(labels: list[str], algorithms: dict[str, str], name: str) -> list[str]:
    """Labels a baseline name selects: the run itself, its sweep variants, or every run of that algorithm."""
    chosen = [lab for lab in labels if lab == name or lab.startswith(name + "[") or algorithms[lab] == name]
    if not chosen:
        raise UserError(f"baseline {name!r} names no run: choose one of {', '.join(dict.fromkeys(labels))}")
    return chosen


HOST_BOUND = "host-bound"
"""The mark of a procs run whose step times the host's CPU contention set, not the device model (``meta.json``
``oversubscribed``: ``edgeml.runtime.procs.contention``)."""


def host_bound(r: Run) -> bool:
    return bool(r.meta().get("oversubscribed", False))


def host_bound_note(marked: dict[str, int]) -> str:
    """What the mark means, for the labels ``marked`` (with their number of marked runs); "" when none is."""
    if not marked:
        return ""
    runs = sum(marked.values())
    return (f"({HOST_BOUND}): in {runs} run{'s' if runs > 1 else ''} of {', '.join(marked)} the host's CPU "
            f"contention, not the device model, set the step times (meta.json: contention), so their times "
            f"measure the host: re-run with --backend sim or fewer workers.")


def run_metrics(r: Run) -> dict[str, Any]:
    """The numeric headlines of one run: every numeric summary field plus the derived ones."""
    s = r.summary
    duration = s["duration_s"] or math.nan
    row: dict[str, Any] = {"noncompute_fraction": 1.0 - s["compute_fraction"],
                           "samples_per_s": s["total_samples"] / duration, "bytes_per_s": s["total_bytes"] / duration,
                           "bytes_per_step": s["total_bytes"] / (s["total_steps"] or math.nan)}
    for k, v in s.items():  # every other numeric headline, so claims can name any summary field
        if k not in row and k != "seed" and not k.startswith(("target_", "time_to_target_")) \
                and isinstance(v, (int, float, type(None))) and not isinstance(v, bool):
            row[k] = math.nan if v is None else v
    return row


def per_run_table(runs: list[Run], target: Target) -> pd.DataFrame:
    """One row per run directory: context, results, time/steps/bytes to target (NaN when censored, with the
    bound the run spent), and ``_pair`` (seed and environment, for pairing)."""
    rows = []
    for r in runs:
        hit = reach_run(r, target)
        row = {"run": r.label, "seed": r.seed, **{k: r.summary[k] for k in CONTEXT}, "target": str(target),
               "censored": hit.censored}
        for metric, q in QUANTITIES.items():
            row[metric] = math.nan if hit.censored else hit.value(q)
            row[f"{metric}_bound"] = hit.value(q)
        row.update(run_metrics(r))
        rows.append({**row, "path": str(r.path), "_pair": _pair_key(r)})
    return pd.DataFrame(rows)


def _by_pair(g: pd.DataFrame) -> pd.DataFrame:
    """One row per seed and environment: duplicate runs of one seed are one sample, the mean of their values
    (a time is then censored if any duplicate was)."""
    numeric = [c for c in g.columns if pd.api.types.is_numeric_dtype(g[c]) and c != "censored"]
    g = g.assign(**{f"{m}_hi": g[m].fillna(math.inf) for m in QUANTITIES})
    out = g.groupby("_pair", sort=False)[numeric + [f"{m}_hi" for m in QUANTITIES]].mean()
    out["seed"] = g.groupby("_pair", sort=False)["seed"].first()
    return out


def group_table(per_run: pd.DataFrame, baseline: list[str] | None = None) -> pd.DataFrame:
    """One row per run label: means over seeds, bootstrap intervals, reach and paired speedup."""
    rows = []
    base = _by_pair(per_run[per_run["run"].isin(baseline)]) if baseline else None
    base_labels = per_run[per_run["run"].isin(baseline or [])].groupby("_pair")["run"].agg(set)
    for label, g in per_run.groupby("run", sort=False):
        c = _by_pair(g)
        row: dict[str, Any] = {"run": label, **{k: g[k].iloc[0] for k in CONTEXT}, "seeds": int(c["seed"].nunique()),
                               "runs": len(g), "reached": f"{int(np.isfinite(c['time_to_target_hi']).sum())}/{len(c)}",
                               "target": g["target"].iloc[0]}
        for col in c.columns:
            if col not in row and col != "seed" and not col.endswith("_hi") and col not in QUANTITIES:
                # A mean over seeds only when every seed has the value: a partial mean would flatter the run.
                row[col] = float(c[col].mean()) if c[col].notna().all() else math.nan
        for m in QUANTITIES:
            iv = mean_interval(c[f"{m}_bound"], c[f"{m}_hi"])
            row[m], row[f"{m}_bound"] = iv.point, iv.low
            row[f"{m}_ci_low"], row[f"{m}_ci_high"] = (iv.ci_low, iv.ci_high) if iv.exact else (math.nan, math.nan)
        _, row["final_accuracy_ci_low"], row["final_accuracy_ci_high"] = bootstrap_ci(c["final_accuracy"])
        row.update(dict.fromkeys(("speedup", "speedup_low", "speedup_high", "speedup_ci_low", "speedup_ci_high"),
                                 math.nan))
        if base is not None:
            pairs = c.index.intersection(base.index)
            if len(pairs):
                r, b = c.loc[pairs], base.loc[pairs]
                lo, hi = pair_effect("ratio", r["time_to_target_bound"], r["time_to_target_hi"],
                                     b["time_to_target_bound"], b["time_to_target_hi"])
                if all(base_labels[p] == {label} for p in pairs):  # the baseline itself: 1x, censored or not
                    lo = hi = pd.Series(1.0, index=pairs)
                iv = mean_interval(lo, hi)
                row.update(speedup=iv.point, speedup_low=iv.low, speedup_high=iv.high, speedup_ci_low=iv.ci_low,
                           speedup_ci_high=iv.ci_high)
        rows.append(row)
    return pd.DataFrame(rows)


def reach_table(runs: list[Run], targets: list[Target]) -> pd.DataFrame:
    """Time, steps and bytes to every target, one row per run directory and target (``*_hi`` infinite when
    censored)."""
    rows = []
    for r in runs:
        for t in targets:
            hit = reach_run(r, t)
            rows.append({"run": r.label, "seed": r.seed, "target": t.short, "censored": hit.censored,
                         **{f"{q}_lo": hit.value(q) for q in COLUMNS},
                         **{f"{q}_hi": math.inf if hit.censored else hit.value(q) for q in COLUMNS},
                         "path": str(r.path)})
    return pd.DataFrame(rows)


def claim_samples(runs: list[Run], per_run: pd.DataFrame, metrics: Iterable[str],
                  targets: Iterable[Target]) -> pd.DataFrame:
    """The samples claims are decided on (``edgeml.analysis.verdicts``): one row per run, seed, metric and
    target. Metrics: the per-run table's columns, ``*_to_target`` at each target, or quantities in
    ``series/decisions.csv``."""
    rows = []
    targets = list(targets)
    records = per_run.set_index("path")
    for r in runs:
        pr = records.loc[str(r.path)]
        base = {"run": r.label, "spec": r.spec, "point": r.setting, "seed": r.seed}
        for m in dict.fromkeys(metrics):
            if m in QUANTITIES:
                q = QUANTITIES[m]
                for t in targets:
                    hit = reach_run(r, t)
                    v = hit.value(q)
                    rows.append({**base, "metric": m, "target": t.key, "lo": v,
                                 "hi": math.inf if hit.censored else v, "resolution": hit.resolution[q],
                                 "unit": UNITS[q]})
                continue
            if m in EVAL_METRICS:  # read at a count of epochs (``claims``: epochs)
                for t in targets:
                    v = value_at(r.evals, t, m) if t.metric == EPOCHS else None
                    if v is not None and math.isfinite(v):
                        rows.append({**base, "metric": m, "target": t.key, "lo": v, "hi": v,
                                     "resolution": math.nan, "unit": ""})
                continue
            v = pr.get(m)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                v = r.decided(m)
            if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
                    and math.isfinite(v):  # numpy's integers (a column of whole numbers) are no ints
                rows.append({**base, "metric": m, "target": "", "lo": float(v), "hi": float(v),
                             "resolution": math.nan, "unit": ""})
    columns = ["run", "spec", "point", "seed", "metric", "target", "lo", "hi", "resolution", "unit"]
    return pd.DataFrame(rows, columns=columns)


@dataclass
class Comparison:
    per_run: pd.DataFrame
    table: pd.DataFrame
    reach: pd.DataFrame  # every target
    targets: list[Target]
    baseline: str | None
    eval_interval: float = 0.0
    """The longest evaluation interval among the runs: times to a target are read at evaluations, so they and the
    speedups from them are resolved to this (said under the console table)."""
    host_bound: dict[str, int] = field(default_factory=dict)
    """Labels with runs marked host-bound (``host_bound``), with how many: marked in the tables."""

    @property
    def target(self) -> Target:
        return self.targets[0]

    def display(self) -> tuple[str, list[str], list[list[str]]]:
        """Title, headers and cells; context columns equal in every row move into the title."""
        t = self.table
        same = [k for k in CONTEXT[1:] if t[k].nunique() == 1]
        shown = [k for k in CONTEXT if k not in same and (k != "algorithm" or (t["algorithm"] != t["run"]).any())]
        ctx = ", ".join(f"{k} {t[k].iloc[0]}" for k in same)
        title = f"{len(self.per_run)} runs" + (f" ({ctx})" if ctx else "") + f"; time until {self.target}" + \
            (f"; speedup vs {self.baseline}" if self.baseline else "")
        cols: list[tuple[str, Any]] = [("run", lambda r: r["run"] + (f" ({HOST_BOUND})" if r["run"] in
                                                                       self.host_bound else ""))]
        cols += [(k, lambda r, k=k: str(r[k])) for k in shown]
        cols += [("seeds", lambda r: str(r["seeds"]) + (f" ({r['runs']} runs)" if r["runs"] > r["seeds"] else "")),
                 ("final acc", lambda r: ci_text(r, "final_accuracy", "{:.3f}")),
                 ("best acc", lambda r: number_text(r["best_accuracy"], "{:.3f}")),
                 ("time to target (s)", lambda r: reached_text(r, "time_to_target", "{:.3g}")),
                 (f"speedup vs {self.baseline}", speedup_text),
                 ("traffic (MB)", lambda r: number_text(r["total_bytes"] / 1e6, "{:.1f}")),
                 ("into PS (MB)", lambda r: number_text(r["ps_ingress_bytes"] / 1e6, "{:.1f}")),
                 ("compute/comm/wait %", lambda r: "/".join(number_text(100 * r[f"{p}_fraction"], "{:.0f}")
                                                             for p in ("compute", "comm", "wait"))),
                 ("steps", lambda r: number_text(r["total_steps"], "{:.0f}"))]
        if not self.baseline:
            cols = [c for c in cols if not c[0].startswith("speedup")]
        return title, [c[0] for c in cols], [[f(r) for _, f in cols] for _, r in t.iterrows()]

    def reach_display(self) -> tuple[list[str], list[list[str]]]:
        """Time until each target per run label: mean [95% interval], or a bound where seeds never got there.
        Made once (the markdown and the console table both show it; each interval is a bootstrap)."""
        if "_reach_display" not in self.__dict__:
            self.__dict__["_reach_display"] = self._reach_display()
        return self.__dict__["_reach_display"]

    def _reach_display(self) -> tuple[list[str], list[list[str]]]:
        labels = list(dict.fromkeys(self.reach["run"]))
        targets = list(dict.fromkeys(self.reach["target"]))
        cells = []
        for label in labels:
            row = [label]
            for t in targets:
                g = self.reach[(self.reach["run"] == label) & (self.reach["target"] == t)]
                per_seed = g.groupby("seed").agg(lo=("time_lo", "mean"), hi=("time_hi", "mean"))
                iv = mean_interval(per_seed["lo"], per_seed["hi"])
                row.append(time_text(iv, int(np.isfinite(per_seed["hi"]).sum()), len(per_seed)))
            cells.append(row)
        return ["run"] + [f"time until {t} (s)" for t in targets], cells

    def markdown(self) -> str:
        title, headers, cells = self.display()
        text = f"**{title}** (means over seeds; [95% bootstrap interval] with several seeds; '> x': never " \
               f"reached within the x s the runs lasted)\n\n" + md_table(headers, cells) + "\n"
        if self.host_bound:
            text += f"\n{host_bound_note(self.host_bound)}\n"
        if len(self.targets) > 1:
            text += f"\n**Time until each target** ({self.target.rule} rule)\n\n" + \
                md_table(*self.reach_display()) + "\n"
        return text

    def rich(self) -> list[Table]:
        title, headers, cells = self.display()
        tables = [rich_table(title, headers, cells)]
        if self.eval_interval:
            tables[0].caption = Text(f"Times to a target are read at evaluations, every {self.eval_interval:g} s: "
                                     f"each is resolved to {self.eval_interval:g} s, and speedups from them are as "
                                     f"coarse (1.00x, 0.50x, ... from a few intervals).")
            tables[0].caption_justify = "left"
        if self.host_bound:
            tables[0].caption = Text.assemble(tables[0].caption or "", "\n",
                                              (host_bound_note(self.host_bound), "yellow"))
            tables[0].caption_justify = "left"
        if len(self.targets) > 1:
            tables.append(rich_table(f"time until each target ({self.target.rule} rule)", *self.reach_display()))
        return tables

    def write(self, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "compare.csv", out / "compare_runs.csv", out / "compare_reach.csv", out / "compare.md"]

        def portable(frame):  # run paths relative to the tables' folder: the same bytes on every machine
            return frame.assign(path=[os.path.relpath(p, out.absolute()) for p in frame["path"]])

        self.table.to_csv(paths[0], index=False)
        portable(self.per_run.drop(columns="_pair")).to_csv(paths[1], index=False)
        portable(self.reach).to_csv(paths[2], index=False)
        paths[3].write_text(self.markdown())
        return paths




def default_baseline(runs: list[Run]) -> str:
    return "bsp" if any(r.summary["algorithm"] == "bsp" for r in runs) else runs[0].label


def compare(runs: list[Run], targets: list[Target] | Target | None = None, baseline: str | None = None) -> Comparison:
    targets = [targets] if isinstance(targets, Target) else targets or choose_targets(runs)
    baseline = baseline or default_baseline(runs)
    per_run = per_run_table(runs, targets[0])
    dup = per_run[per_run.duplicated(["run", "_pair"], keep=False)]
    for (label, seed), g in dup.groupby(["run", "seed"], sort=False):
        warn(f"{len(g)} runs of {label!r} share seed {seed} and settings: they count as one sample (their mean)")
    labels = baseline_labels(list(per_run["run"]), dict(zip(per_run["run"], per_run["algorithm"])), baseline)
    interval = max((float(r.config.get("eval", {}).get("interval", 0.0)) for r in runs), default=0.0)
    marked: dict[str, int] = {}
    for r in runs:
        if host_bound(r):
            marked[r.label] = marked.get(r.label, 0) + 1
    return Comparison(per_run, group_table(per_run, labels), reach_table(runs, targets), targets, baseline,
                      eval_interval=interval, host_bound=marked)


def compare_dirs(patterns: list[str], accuracy: list[float] = (), loss: list[float] = (), rule: str = "stays",
                 baseline: str | None = None, recursive: bool = False) -> Comparison:
    """``edgeml compare``: load the runs, choose the targets, compare."""
    runs = load_runs(patterns, recursive)
    return compare(runs, choose_targets(runs, accuracy, loss, rule), baseline)
