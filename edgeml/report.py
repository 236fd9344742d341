"""Comparison tables rebuilt from run directories alone: what ``edgeml compare`` prints, and the runs, tables
and claim samples that ``edgeml.figures`` and ``edgeml.reproduce`` build on.

Which runs: run directories (with ``summary.json`` or ``evals.csv``), an experiment's results folder (holding
``runs/`` and ``experiment.toml``), or a folder whose direct children are run directories; ``recursive``
searches every folder below. Runs written by different experiments (``experiment.json``: paper, quick) are
never compared with each other.

Derived columns per run: ``time_to_target``, ``steps_to_target``, ``bytes_to_target`` under the target's rule
(``edgeml.convergence``: by default the time from which the metric *stays* at the target), NaN when the run
never got there (censored), with ``*_bound`` (the value, or what the run spent when censored) and
``censored``; ``noncompute_fraction`` (1 - compute fraction: adsp.txt Sec. 2.3's "waiting", which includes
communication), ``samples_per_s`` and ``bytes_per_s``. Per run label: ``seeds`` (distinct seeds; duplicate runs
of one seed are one sample, their mean), ``reached`` (seeds that reached the target), means over seeds with
95% bootstrap intervals (``edgeml.stats``), and ``speedup`` = baseline time / run time paired by seed and
environment (data, model, cluster, network), a bound when a side is censored. A time to target is a mean only
when every seed reached it; otherwise the table shows a bound ("> 1000" when none did).

Run labels: ``reproduce`` writes ``experiment.json`` (paper, run name, its ``[[runs]]`` entry and sweep point,
seed) into each run directory. Other run directories are labelled by algorithm, plus the config keys that tell
apart runs of the same algorithm.
"""

from __future__ import annotations

import functools
import glob
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

import edgeml
from edgeml.claims import TARGET_METRICS, pair_effect
from edgeml.schema import Config
from edgeml.convergence import COLUMNS, RULES, UNITS, Reach, Target, reach
from edgeml.errors import UserError
from edgeml.stats import bootstrap_ci, mean_interval

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SUMMARY_NEEDED = ("algorithm", "dataset", "model", "workers", "hetero", "final_accuracy", "best_accuracy",
                  "total_steps", "total_samples", "total_bytes", "ps_ingress_bytes", "compute_fraction",
                  "comm_fraction", "wait_fraction", "duration_s")
EVALS_NEEDED = ("time_s", "total_steps", "total_bytes", "loss", "accuracy")
NODES_NEEDED = ("role", "index", "compute_s", "comm_s", "wait_s", "alive_s")
CONTEXT = ("algorithm", "dataset", "model", "workers", "hetero")
# Run-config keys that never distinguish one configuration from another.
NOT_CONFIG = ("run.seed", "run.name", "run.out")
# What must match for two runs to be paired (besides the seed): the environment, not the algorithm.
PAIRED_SECTIONS = ("data", "model", "cluster", "network")
QUANTITIES = {m: m.split("_", 1)[0] for m in TARGET_METRICS}  # time_to_target -> time


# ------------------------------------------------------------------------------------------ run directories


@dataclass
class Run:
    path: Path
    summary: dict
    config: dict
    label: str = ""
    spec: str = ""  # the method: the experiment's [[runs]] name, or the algorithm
    point: dict = field(default_factory=dict)  # its sweep values (or the config keys that set it apart)
    experiment: str = ""  # "adsp", "adsp --quick"; "" when not written by reproduce

    @property
    def seed(self) -> int:
        return int(self.summary.get("seed", self.config.get("run", {}).get("seed", 0)))

    @property
    def setting(self) -> str:
        return ",".join(f"{k}={fmt_value(v)}" for k, v in self.point.items())

    @property
    def method(self) -> str:
        """What figures colour by: the algorithm."""
        return self.summary["algorithm"]

    def meta(self) -> dict:
        p = self.path / "meta.json"
        return json.loads(p.read_text()) if p.is_file() else {}

    def table(self, name: str, needed: tuple[str, ...] = (), required: bool = True) -> pd.DataFrame | None:
        """A CSV of the run (``evals.csv``, ``series/staleness.csv``...), checked for the columns we use."""
        p = self.path / name
        if not p.is_file():
            if required:
                raise UserError(f"run {self.path}: missing {name} (written by an older edgeml or unfinished?): "
                                f"re-run it with edgeml {edgeml.__version__}")
            return None
        df = pd.read_csv(p)
        missing = [c for c in needed if c not in df.columns]
        if missing:
            raise UserError(f"run {self.path}: {name} has no column {', '.join(missing)} (written by an older "
                            f"edgeml?): re-run it with edgeml {edgeml.__version__}")
        return df

    @functools.cached_property
    def evals(self) -> pd.DataFrame:
        return self.table("evals.csv", EVALS_NEEDED)

    def reach(self, target: Target) -> Reach:
        s, stop = self.summary, self.config.get("stop", {})
        return reach(self.evals, target, {"time": s["duration_s"], "steps": s["total_steps"],
                                          "bytes": s["total_bytes"], "ingress": s["ps_ingress_bytes"],
                                          "iterations": (s.get("counts") or {}).get("iterations", math.nan),
                                          "cost": s.get("total_byte_hops", math.nan)},
                     (float(stop.get("loss_variance") or 0.0), int(stop.get("window") or 0)))

    def decided(self, name: str) -> float | None:
        """The mean of a quantity the algorithm decided (``series/decisions.csv``, rows named ``name``)."""
        d = self.table("series/decisions.csv", ("name", "value"), required=False)
        if d is None or not (d["name"] == name).any():
            return None
        return float(d.loc[d["name"] == name, "value"].mean())


def _is_run(p: Path) -> bool:
    return (p / "summary.json").is_file() or (p / "evals.csv").is_file()


def _runs_below(d: Path, recursive: bool) -> list[Path]:
    if recursive:
        return sorted({p.parent for n in ("summary.json", "evals.csv") for p in d.rglob(n)})
    if (d / "runs").is_dir() and (d / "experiment.toml").is_file():  # an experiment's results folder
        d = d / "runs"
    return sorted(p for p in d.iterdir() if p.is_dir() and _is_run(p))


def find_runs(patterns: list[str], recursive: bool = False) -> list[Path]:
    """Run directories named by paths, glob patterns, experiment results folders or folders holding runs
    directly (every folder below with ``recursive``)."""
    found: list[Path] = []
    for pattern in patterns:
        is_glob = any(c in pattern for c in "*?[")
        if is_glob:
            matches = [Path(p) for p in sorted(glob.glob(pattern, recursive=True))]
            if not matches:
                raise UserError(f"no path matches {pattern!r}: check the pattern (quote it to stop the shell)")
        else:
            matches = [Path(pattern)]
        for m in matches:
            if not m.exists():
                raise UserError(f"{str(m)!r} does not exist: pass run directories or a directory holding them")
            below = [m] if _is_run(m) else _runs_below(m, recursive) if m.is_dir() else []
            if not below and not is_glob:
                raise UserError(f"{str(m)!r} holds no run directory" + ("" if recursive else " directly below it") +
                                " (run directories have summary.json or evals.csv): pass run directories or an "
                                "experiment's results folder" + ("" if recursive else
                                                                 ", or --recursive to search every folder below"))
            found.extend(below)
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise UserError(f"no run directories found in {' '.join(patterns)}")
    return unique


def load_run(path: Path) -> Run:
    def read(name: str) -> str:
        if not (path / name).is_file():
            raise UserError(f"run {path}: missing {name} (unfinished, killed, or not a run directory): "
                            "let it finish or leave it out")
        return (path / name).read_text()

    try:
        summary = json.loads(read("summary.json"))
        config = tomllib.loads(read("config.toml"))
        exp = json.loads((path / "experiment.json").read_text()) if (path / "experiment.json").is_file() else {}
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"run {path}: unreadable file ({exc}): re-run it") from None
    missing = [k for k in SUMMARY_NEEDED if k not in summary]
    if missing:
        raise UserError(f"run {path}: summary.json lacks {', '.join(missing)} (written by an older edgeml?): "
                        f"re-run it with edgeml {edgeml.__version__}")
    label = str(exp.get("run", ""))
    experiment = f"{exp['paper']}{' --quick' if exp.get('quick') else ''}" if exp.get("paper") else ""
    return Run(path, summary, config, label, str(exp.get("spec", label.split("[", 1)[0])), exp.get("point", {}),
               experiment)


def flat_config(run: Run) -> dict[str, Any]:
    """The run's config as {"section.key": value}. A key its config lacks (written before the key existed)
    counts as its default, so old and new runs differ only where they do."""
    return {**_config_defaults(), **_flatten(run.config)}


def _flatten(config: dict) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, values in config.items() if isinstance(values, dict)
            for k, v in values.items() if f"{s}.{k}" not in NOT_CONFIG}


@functools.cache
def _config_defaults() -> dict[str, Any]:
    return _flatten(Config().to_dict())


def fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return v if isinstance(v, str) else json.dumps(v)


def warn(text: str) -> None:
    Console(stderr=True).print(text, style="yellow", highlight=False, markup=False, soft_wrap=True)


def load_runs(patterns: list[str], recursive: bool = False) -> list[Run]:
    """Load run directories and label them (experiment name, else algorithm plus distinguishing keys)."""
    paths = find_runs(patterns, recursive)
    # among several runs, one still in progress (or killed before writing its summary) is left out, not fatal
    unfinished = [p for p in paths if not (p / "summary.json").is_file()] if len(paths) > 1 else []
    if unfinished and len(unfinished) < len(paths):
        warn(f"skipping {len(unfinished)} unfinished run(s) (no summary.json): " + ", ".join(map(str, unfinished)))
    runs = [load_run(p) for p in paths if p not in unfinished or len(unfinished) == len(paths)]
    experiments = pd.Series([r.experiment for r in runs if r.experiment]).value_counts(sort=False)
    if len(experiments) > 1:
        raise UserError("these runs come from different experiments (" +
                        ", ".join(f"{e}: {n} runs" for e, n in experiments.items()) +
                        "): compare one experiment's runs at a time")
    by_algorithm: dict[str, dict[str, dict]] = {}
    for r in runs:
        if not r.label:
            flat = flat_config(r)
            by_algorithm.setdefault(r.summary["algorithm"], {})[json.dumps(flat, sort_keys=True, default=str)] = flat
    for r in runs:
        if r.label:
            continue
        configs = list(by_algorithm[r.summary["algorithm"]].values())
        r.spec = r.label = r.summary["algorithm"]
        if len(configs) > 1:
            flat = flat_config(r)
            r.point = {k: flat[k] for k in flat if any(c.get(k) != flat[k] for c in configs)}
            r.label += f"[{r.setting}]"
    return runs


# ------------------------------------------------------------------------------------------ comparison


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


def run_metrics(r: Run) -> dict[str, Any]:
    """The numeric headlines of one run: every numeric summary field plus the derived ones."""
    s = r.summary
    duration = s["duration_s"] or math.nan
    row: dict[str, Any] = {"noncompute_fraction": 1.0 - s["compute_fraction"],
                           "samples_per_s": s["total_samples"] / duration, "bytes_per_s": s["total_bytes"] / duration}
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
        hit = r.reach(target)
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
            hit = r.reach(t)
            rows.append({"run": r.label, "seed": r.seed, "target": t.short, "censored": hit.censored,
                         **{f"{q}_lo": hit.value(q) for q in COLUMNS},
                         **{f"{q}_hi": math.inf if hit.censored else hit.value(q) for q in COLUMNS},
                         "path": str(r.path)})
    return pd.DataFrame(rows)


def claim_samples(runs: list[Run], per_run: pd.DataFrame, metrics: Iterable[str],
                  targets: Iterable[Target]) -> pd.DataFrame:
    """The samples claims are decided on (``edgeml.claims``): one row per run, seed, metric and target. Metrics:
    the per-run table's columns, ``*_to_target`` at each target, or quantities in ``series/decisions.csv``."""
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
                    hit = r.reach(t)
                    v = hit.value(q)
                    rows.append({**base, "metric": m, "target": t.short, "lo": v,
                                 "hi": math.inf if hit.censored else v, "resolution": hit.resolution[q],
                                 "unit": UNITS[q]})
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
        cols: list[tuple[str, Any]] = [("run", lambda r: r["run"])]
        cols += [(k, lambda r, k=k: str(r[k])) for k in shown]
        cols += [("seeds", lambda r: str(r["seeds"]) + (f" ({r['runs']} runs)" if r["runs"] > r["seeds"] else "")),
                 ("final acc", lambda r: _ci(r, "final_accuracy", "{:.3f}")),
                 ("best acc", lambda r: _num(r["best_accuracy"], "{:.3f}")),
                 ("time to target (s)", lambda r: _reached(r, "time_to_target", "{:.3g}")),
                 (f"speedup vs {self.baseline}", _speedup),
                 ("traffic (MB)", lambda r: _num(r["total_bytes"] / 1e6, "{:.1f}")),
                 ("into PS (MB)", lambda r: _num(r["ps_ingress_bytes"] / 1e6, "{:.1f}")),
                 ("compute/comm/wait %", lambda r: "/".join(_num(100 * r[f"{p}_fraction"], "{:.0f}")
                                                             for p in ("compute", "comm", "wait"))),
                 ("steps", lambda r: _num(r["total_steps"], "{:.0f}"))]
        if not self.baseline:
            cols = [c for c in cols if not c[0].startswith("speedup")]
        return title, [c[0] for c in cols], [[f(r) for _, f in cols] for _, r in t.iterrows()]

    def reach_display(self) -> tuple[list[str], list[list[str]]]:
        """Time until each target per run label: mean [95% interval], or a bound where seeds never got there."""
        labels = list(dict.fromkeys(self.reach["run"]))
        targets = list(dict.fromkeys(self.reach["target"]))
        cells = []
        for label in labels:
            row = [label]
            for t in targets:
                g = self.reach[(self.reach["run"] == label) & (self.reach["target"] == t)]
                per_seed = g.groupby("seed").agg(lo=("time_lo", "mean"), hi=("time_hi", "mean"))
                iv = mean_interval(per_seed["lo"], per_seed["hi"])
                row.append(_time_text(iv, int(np.isfinite(per_seed["hi"]).sum()), len(per_seed)))
            cells.append(row)
        return ["run"] + [f"time until {t} (s)" for t in targets], cells

    def markdown(self) -> str:
        title, headers, cells = self.display()
        text = f"**{title}** (means over seeds; [95% bootstrap interval] with several seeds; '> x': never " \
               f"reached within the x s the runs lasted)\n\n" + md_table(headers, cells) + "\n"
        if len(self.targets) > 1:
            text += f"\n**Time until each target** ({self.target.rule} rule)\n\n" + \
                md_table(*self.reach_display()) + "\n"
        return text

    def rich(self) -> list[Table]:
        title, headers, cells = self.display()
        tables = [_rich_table(title, headers, cells)]
        if len(self.targets) > 1:
            tables.append(_rich_table(f"time until each target ({self.target.rule} rule)", *self.reach_display()))
        return tables

    def write(self, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "compare.csv", out / "compare_runs.csv", out / "compare_reach.csv", out / "compare.md"]
        self.table.to_csv(paths[0], index=False)
        self.per_run.drop(columns="_pair").to_csv(paths[1], index=False)
        self.reach.to_csv(paths[2], index=False)
        paths[3].write_text(self.markdown())
        return paths


def _rich_table(title: str, headers: list[str], cells: list[list[str]]) -> Table:
    table = Table(title=title, caption="means over seeds; [95% bootstrap interval] with several seeds")
    for i, h in enumerate(headers):
        # fold, never cut: a narrow terminal wraps cells onto more lines instead of hiding digits
        table.add_column(h, style="cyan" if i == 0 else None, justify="left" if i == 0 else "right",
                         overflow="fold")
    for row in cells:
        table.add_row(*row)
    return table


def wide_console(stderr: bool = False) -> Console:
    """A console; when output goes to a file or CI log, wide enough that tables do not wrap."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=240)


def _num(v: float, fmt: str) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _ci(row: pd.Series, col: str, fmt: str, missing: str = "n/a") -> str:
    mean, lo, hi = row[col], row[f"{col}_ci_low"], row[f"{col}_ci_high"]
    if math.isnan(mean):
        return missing
    if lo == hi or math.isnan(lo):
        return fmt.format(mean)
    return f"{fmt.format(mean)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def _time_text(iv, reached: int, n: int) -> str:
    if reached == n:
        return f"{iv.low:.3g}" if iv.ci_low == iv.ci_high else f"{iv.low:.3g} [{iv.ci_low:.3g}, {iv.ci_high:.3g}]"
    return f"> {iv.low:.3g} (never)" if reached == 0 else f">= {iv.low:.3g} ({reached}/{n} reached)"


def _reached(row: pd.Series, col: str, fmt: str) -> str:
    reached, n = (int(x) for x in row["reached"].split("/"))
    if reached == n:
        return _ci(row, col, fmt)
    bound = fmt.format(row[f"{col}_bound"])
    return f"> {bound} (never)" if reached == 0 else f">= {bound} ({reached}/{n} reached)"


def _speedup(row: pd.Series) -> str:
    lo, hi = row["speedup_low"], row["speedup_high"]
    if math.isnan(lo):
        return "n/a"
    if lo == hi:
        return _ci(row, "speedup", "{:.2f}x")
    if math.isinf(hi) and lo > 0:
        return f">= {lo:.2f}x"
    if lo == 0 and math.isfinite(hi):
        return f"<= {hi:.2f}x"
    return "n/a (both censored)"


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
    return Comparison(per_run, group_table(per_run, labels), reach_table(runs, targets), targets, baseline)


def compare_dirs(patterns: list[str], accuracy: list[float] = (), loss: list[float] = (), rule: str = "stays",
                 baseline: str | None = None, recursive: bool = False) -> Comparison:
    """``edgeml compare``: load the runs, choose the targets, compare."""
    runs = load_runs(patterns, recursive)
    return compare(runs, choose_targets(runs, accuracy, loss, rule), baseline)


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows])
