"""Comparison tables, figures and paper reproductions, rebuilt from run directories alone.

``edgeml compare`` and ``edgeml plot`` read run directories (format in ``edgeml.metrics``); ``edgeml reproduce
PAPER`` runs an experiment file and writes ``results/<paper>/`` (``results/<paper>/quick/`` with ``--quick``):
``experiment.toml`` (the file used), ``runs/``, ``compare.csv``, ``compare_runs.csv``, ``compare.md``,
``figures/*.png|pdf`` and ``REPORT.md``.

Experiment file ``experiments/<paper>.toml``::

    [experiment]
    paper = "baselines"          # results go to results/<paper>/ (default: the file name)
    title = "..."
    description = "..."          # one paragraph for REPORT.md
    seeds = [0, 1]               # every run is repeated per seed (run.seed)
    baseline = "bsp"             # run name speedups are measured against
    target_accuracy = 0.9        # time-to-target metric (or target_loss = 0.3; neither: automatic, see below)
    differences = "..."          # where settings differ from the paper and why

    [settings]                   # config layers shared by all runs: the sections of a run config
    data = { dataset = "fashion-mnist" }
    [quick]                      # layers merged over [settings] and each run's config with --quick
    data = { dataset = "digits" }

    [[runs]]
    name = "ssp"                 # unique; defaults to algorithm
    algorithm = "ssp"
    config = { ssp = { staleness = 3 } }     # optional layers for this run
    quick = { stop = { max_time = 5 } }      # optional layers for this run with --quick
    sweep = { "cluster.hetero" = ["H=1", "H=2"] }   # optional: one run per value (product over keys),
                                 # named "ssp[cluster.hetero=H=2]"

    [[claims]]
    text = "ADSP converges 80% faster than BSP"
    metric = "time_to_target"    # a compare-table column: any numeric summary.json field or a derived one
    run = "adsp"
    baseline = "bsp"             # optional (default: the experiment's); a swept run pairs with the
                                 # baseline's variant of the same sweep values when the name is not exact
    kind = "reduction"           # reduction: 1 - run/baseline; ratio: baseline/run; value: the run's value
    paper_value = 0.80           # optional for reduction and ratio: without it only the direction is checked
    op = ">="                    # value claims only: ">=" (default) or "<="

Layers merge in this order, later winning key by key: settings, run config, quick, run quick, sweep values,
then ``run.algorithm``/``run.seed`` (and ``--backend``).

Derived table columns: ``time_to_target``, ``steps_to_target``, ``bytes_to_target`` (first evaluation reaching
the target), ``speedup`` (baseline time / run time, paired: same seed, data, model, devices and network),
``noncompute_fraction`` (1 - compute fraction: adsp.txt Sec. 2.3's "waiting", which includes communication),
``samples_per_s`` and ``bytes_per_s``. Seeds of a run give a mean and a 95% bootstrap interval; a time to
target is a mean only when every seed reached it.

Claim verdicts: a value claim holds when ``measured op paper_value``. A reduction (neutral 0) or ratio
(neutral 1) claim "holds" when the measured effect has the paper's sign and at least 90% of its size, is
"weaker" with the right sign but smaller, and "does not hold" otherwise. Without a paper value the claim is
a direction: it "holds" from a 10% effect (reduction 0.1, ratio 1.1), is "marginal" below. Unreached targets
count as infinite time, so a run that never reaches the target cannot be "faster".

Run labels: ``reproduce`` writes ``experiment.json`` (paper, run name, seed) into each run directory. Other run
directories are labelled by algorithm, plus the config keys that tell apart runs of the same algorithm.
"""

from __future__ import annotations

import glob
import itertools
import json
import math
import re
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import edgeml
from edgeml.cli import command
from edgeml.errors import UserError

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
CI_METRICS = ("final_accuracy", "time_to_target", "speedup")
# Run-config keys that never distinguish one configuration from another.
NOT_CONFIG = ("run.seed", "run.name", "run.out")
# What must match for two runs to be paired (besides the seed): the environment, not the algorithm.
PAIRED_SECTIONS = ("data", "model", "cluster", "network")
HOLDS_SHARE = 0.9
MIN_EFFECT = 0.1  # for claims without a paper value: a 10% reduction, or a ratio of 1.1
RESAMPLES = 2000


# ------------------------------------------------------------------------------------------ run directories


@dataclass
class Run:
    path: Path
    summary: dict
    config: dict
    label: str = ""

    @property
    def seed(self) -> int:
        return int(self.summary.get("seed", self.config.get("run", {}).get("seed", 0)))

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


def _is_run(p: Path) -> bool:
    return (p / "summary.json").is_file() or (p / "evals.csv").is_file()


def find_runs(patterns: list[str]) -> list[Path]:
    """Run directories named by paths, glob patterns, or parent directories (searched recursively)."""
    found: list[Path] = []
    for pattern in patterns:
        if any(c in pattern for c in "*?["):
            matches = [Path(p) for p in sorted(glob.glob(pattern, recursive=True))]
            if not matches:
                raise UserError(f"no path matches {pattern!r}: check the pattern (quote it to stop the shell)")
        else:
            matches = [Path(pattern)]
        for m in matches:
            if not m.exists():
                raise UserError(f"{str(m)!r} does not exist: pass run directories or a directory holding them")
            below = [m] if _is_run(m) else sorted({p.parent for n in ("summary.json", "evals.csv")
                                                    for p in m.rglob(n)}) if m.is_dir() else []
            if not below and not any(c in pattern for c in "*?["):
                raise UserError(f"{str(m)!r} holds no run directory (none with summary.json or evals.csv)")
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
    return Run(path, summary, config, str(exp.get("run", "")))


def _flat_config(run: Run) -> dict[str, Any]:
    return {f"{s}.{k}": v for s, values in run.config.items() if isinstance(values, dict)
            for k, v in values.items() if f"{s}.{k}" not in NOT_CONFIG}


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    return v if isinstance(v, str) else json.dumps(v)


def load_runs(patterns: list[str]) -> list[Run]:
    """Load run directories and label them (experiment name, else algorithm plus distinguishing keys)."""
    paths = find_runs(patterns)
    # among several runs, one still in progress (or killed before writing its summary) is left out, not fatal
    unfinished = [p for p in paths if not (p / "summary.json").is_file()] if len(paths) > 1 else []
    if unfinished and len(unfinished) < len(paths):
        from rich.console import Console

        Console(stderr=True).print(f"[yellow]skipping {len(unfinished)} unfinished run(s)[/yellow] (no summary.json): "
                                   + ", ".join(str(p) for p in unfinished), highlight=False)
    runs = [load_run(p) for p in paths if p not in unfinished or len(unfinished) == len(paths)]
    by_algorithm: dict[str, dict[str, dict]] = {}
    for r in runs:
        if not r.label:
            flat = _flat_config(r)
            by_algorithm.setdefault(r.summary["algorithm"], {})[json.dumps(flat, sort_keys=True, default=str)] = flat
    for r in runs:
        if r.label:
            continue
        configs = list(by_algorithm[r.summary["algorithm"]].values())
        r.label = r.summary["algorithm"]
        if len(configs) > 1:
            flat = _flat_config(r)
            keys = [k for k in flat if any(c.get(k) != flat[k] for c in configs)]
            r.label += "[" + ",".join(f"{k}={_fmt_value(flat[k])}" for k in keys) + "]"
    return runs


# ------------------------------------------------------------------------------------------ comparison


@dataclass(frozen=True)
class Target:
    metric: str  # "accuracy" (reach at least) or "loss" (fall to at most)
    value: float
    note: str = ""

    def __str__(self) -> str:
        return f"{self.metric} {'>=' if self.metric == 'accuracy' else '<='} {self.value:g}" + \
            (f" ({self.note})" if self.note else "")

    def first_hit(self, evals: pd.DataFrame) -> pd.Series | None:
        """The first evaluation reaching the target (NaN never does)."""
        col = evals[self.metric]
        hit = col >= self.value if self.metric == "accuracy" else col <= self.value
        return evals[hit].iloc[0] if hit.any() else None


def choose_target(runs: list[Run], accuracy: float | None = None, loss: float | None = None) -> Target:
    """The given target, else the runs' common stop target, else 95% of the weakest run's best accuracy."""
    if accuracy is not None and loss is not None:
        raise UserError("give --target-accuracy or --target-loss, not both")
    if accuracy is not None:
        return Target("accuracy", accuracy)
    if loss is not None:
        return Target("loss", loss)
    for metric in ("accuracy", "loss"):
        values = {r.summary.get(f"target_{metric}") for r in runs}
        if len(values) == 1 and None not in values:
            return Target(metric, float(values.pop()), "the runs' stop target")
    best = [r.summary["best_accuracy"] for r in runs if r.summary["best_accuracy"] is not None]
    value = round(0.95 * min(best), 3) if best else 1.0
    return Target("accuracy", value, "auto: 95% of the lowest best accuracy")


def bootstrap_ci(values, resamples: int = RESAMPLES, level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval of the mean; one value gives (v, v, v); any NaN gives NaNs."""
    x = np.asarray(values, dtype=float)
    if x.size == 0 or np.isnan(x).any():
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    means = x[np.random.default_rng(seed).integers(0, x.size, (resamples, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return mean, float(lo), float(hi)


def _pair_key(run: Run) -> str:
    env = {s: run.config.get(s, {}) for s in PAIRED_SECTIONS}
    return json.dumps([run.seed, env], sort_keys=True, default=str)


def baseline_labels(labels: list[str], algorithms: dict[str, str], name: str) -> list[str]:
    """Labels a baseline name selects: the run itself, its sweep variants, or every run of that algorithm."""
    chosen = [lab for lab in labels if lab == name or lab.startswith(name + "[") or algorithms[lab] == name]
    if not chosen:
        raise UserError(f"baseline {name!r} names no run: choose one of {', '.join(dict.fromkeys(labels))}")
    return chosen


def per_run_table(runs: list[Run], target: Target, baseline: str | None) -> pd.DataFrame:
    """One row per run directory: context, results, time to target, paired speedup against the baseline."""
    rows = []
    for r in runs:
        s = r.summary
        evals = r.table("evals.csv", EVALS_NEEDED)
        hit = target.first_hit(evals)
        duration = s["duration_s"] or math.nan
        row = {"run": r.label, "seed": r.seed, **{k: s[k] for k in CONTEXT}, "target": str(target),
               "time_to_target": math.nan if hit is None else float(hit["time_s"]),
               "steps_to_target": math.nan if hit is None else float(hit["total_steps"]),
               "bytes_to_target": math.nan if hit is None else float(hit["total_bytes"]),
               "noncompute_fraction": 1.0 - s["compute_fraction"],
               "samples_per_s": s["total_samples"] / duration, "bytes_per_s": s["total_bytes"] / duration}
        for k, v in s.items():  # every other numeric headline, so claims can name any summary field
            if k not in row and k != "seed" and not k.startswith(("target_", "time_to_target_")) \
                    and isinstance(v, (int, float, type(None))) and not isinstance(v, bool):
                row[k] = math.nan if v is None else v
        rows.append({**row, "path": str(r.path), "_pair": _pair_key(r)})
    df = pd.DataFrame(rows)
    df["speedup"] = math.nan
    if baseline:
        base = df[df["run"].isin(baseline_labels(list(df["run"]), dict(zip(df["run"], df["algorithm"])), baseline))]
        base_time = base.groupby("_pair")["time_to_target"].first()
        df["speedup"] = df["_pair"].map(base_time) / df["time_to_target"]
    return df.drop(columns="_pair")


def group_table(per_run: pd.DataFrame) -> pd.DataFrame:
    """One row per run label: means over seeds, bootstrap intervals for the headline metrics."""
    rows = []
    for label, g in per_run.groupby("run", sort=False):
        row: dict[str, Any] = {"run": label, **{k: g[k].iloc[0] for k in CONTEXT}, "seeds": len(g),
                               "reached": f"{int(g['time_to_target'].notna().sum())}/{len(g)}",
                               "target": g["target"].iloc[0]}
        for col in per_run.columns:
            if col not in row and col != "path" and pd.api.types.is_numeric_dtype(per_run[col]):
                # A mean over seeds only when every seed has the value: a partial mean would flatter the run.
                row[col] = float(g[col].mean()) if g[col].notna().all() else math.nan
        for col in CI_METRICS:
            _, row[f"{col}_ci_low"], row[f"{col}_ci_high"] = bootstrap_ci(g[col])
        rows.append(row)
    return pd.DataFrame(rows).drop(columns=["seed"])


@dataclass
class Comparison:
    per_run: pd.DataFrame
    table: pd.DataFrame
    target: Target
    baseline: str | None

    def display(self) -> tuple[str, list[str], list[list[str]]]:
        """Title, headers and cells; context columns equal in every row move into the title."""
        t = self.table
        same = [k for k in CONTEXT[1:] if t[k].nunique() == 1]
        shown = [k for k in CONTEXT if k not in same and (k != "algorithm" or (t["algorithm"] != t["run"]).any())]
        ctx = ", ".join(f"{k} {t[k].iloc[0]}" for k in same)
        title = f"{len(self.per_run)} runs" + (f" ({ctx})" if ctx else "") + f"; time to {self.target}" + \
            (f"; speedup vs {self.baseline}" if self.baseline else "")
        cols: list[tuple[str, Any]] = [("run", lambda r: r["run"])]
        cols += [(k, lambda r, k=k: str(r[k])) for k in shown]
        cols += [("seeds", lambda r: str(r["seeds"])),
                 ("final acc", lambda r: _ci(r, "final_accuracy", "{:.3f}")),
                 ("best acc", lambda r: _num(r["best_accuracy"], "{:.3f}")),
                 ("time to target (s)", lambda r: _ci(r, "time_to_target", "{:.2f}", f"not reached ({r['reached']})")),
                 (f"speedup vs {self.baseline}", lambda r: _ci(r, "speedup", "{:.2f}x", "n/a")),
                 ("traffic (MB)", lambda r: _num(r["total_bytes"] / 1e6, "{:.1f}")),
                 ("into PS (MB)", lambda r: _num(r["ps_ingress_bytes"] / 1e6, "{:.1f}")),
                 ("compute/comm/wait %", lambda r: "/".join(_num(100 * r[f"{p}_fraction"], "{:.0f}")
                                                             for p in ("compute", "comm", "wait"))),
                 ("steps", lambda r: _num(r["total_steps"], "{:.0f}"))]
        if not self.baseline:
            cols = [c for c in cols if not c[0].startswith("speedup")]
        return title, [c[0] for c in cols], [[f(r) for _, f in cols] for _, r in t.iterrows()]

    def markdown(self) -> str:
        title, headers, cells = self.display()
        return f"**{title}** (means over seeds; [95% bootstrap interval] with several seeds)\n\n" + \
            _md_table(headers, cells) + "\n"

    def rich(self) -> Table:
        title, headers, cells = self.display()
        table = Table(title=title, caption="means over seeds; [95% bootstrap interval] with several seeds")
        for i, h in enumerate(headers):
            table.add_column(h, style="cyan" if i == 0 else None, justify="left" if i == 0 else "right")
        for row in cells:
            table.add_row(*row)
        return table

    def write(self, out: Path) -> list[Path]:
        out.mkdir(parents=True, exist_ok=True)
        paths = [out / "compare.csv", out / "compare_runs.csv", out / "compare.md"]
        self.table.to_csv(paths[0], index=False)
        self.per_run.to_csv(paths[1], index=False)
        paths[2].write_text(self.markdown())
        return paths


def wide_console(stderr: bool = False) -> Console:
    """A console; when output goes to a file or CI log, wide enough that tables do not wrap."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=200)


def _num(v: float, fmt: str) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _ci(row: pd.Series, col: str, fmt: str, missing: str = "n/a") -> str:
    mean, lo, hi = row[col], row[f"{col}_ci_low"], row[f"{col}_ci_high"]
    if math.isnan(mean):
        return missing
    return fmt.format(mean) if lo == hi else f"{fmt.format(mean)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def default_baseline(runs: list[Run]) -> str:
    labels = [r.label for r in runs]
    return "bsp" if any(r.summary["algorithm"] == "bsp" for r in runs) else labels[0]


def compare(runs: list[Run], target: Target | None = None, baseline: str | None = None) -> Comparison:
    target = target or choose_target(runs)
    baseline = baseline or default_baseline(runs)
    per_run = per_run_table(runs, target, baseline)
    return Comparison(per_run, group_table(per_run), target, baseline)


# ------------------------------------------------------------------------------------------ figures


def _context(runs: list[Run]) -> str:
    s = [r.summary for r in runs]
    parts = [f"{s[0][k]}" for k in ("dataset", "model") if len({x[k] for x in s}) == 1]
    if len({x["workers"] for x in s}) == 1:
        parts.append(f"{s[0]['workers']} workers")
    if len({x["hetero"] for x in s}) == 1:
        parts.append(f"speeds {s[0]['hetero']}")
    if {x.get("backend") for x in s} == {"sim"}:
        parts.append("sim backend (virtual seconds)")
    return ", ".join(parts)


def figure_tables(runs: list[Run]) -> dict[str, pd.DataFrame]:
    """The tidy tables the figures are drawn from (empty frames for series no run recorded)."""
    evals, nodes, staleness, decisions = [], [], [], []
    for r in runs:
        tag = {"run": r.label, "seed": r.seed}
        e = r.table("evals.csv", EVALS_NEEDED)
        evals.append(e.assign(total_mb=e["total_bytes"] / 1e6, **tag))
        n = r.table("nodes.csv", NODES_NEEDED)
        w = n[n["role"] == "worker"].copy()
        factors = r.meta().get("step_factors") or []
        w["worker"] = [f"{int(i)}\n×{factors[int(i)]:g}" if int(i) < len(factors) else str(int(i))
                       for i in w["index"]]
        alive = w["alive_s"].where(w["alive_s"] > 0)
        for src, part in (("compute_s", "computation"), ("comm_s", "communication"), ("wait_s", "waiting")):
            w[part] = 100 * w[src] / alive
        nodes.append(w[["worker", "computation", "communication", "waiting"]].assign(**tag))
        st = r.table("series/staleness.csv", ("time_s", "staleness"), required=False)
        if st is not None:
            staleness.append(st.assign(**tag))
        de = r.table("series/decisions.csv", ("time_s", "rank", "name", "value"), required=False)
        if de is not None:
            decisions.append(de.assign(**tag))
    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    worker_means = cat(nodes).groupby(["run", "worker"], sort=False, as_index=False).mean(numeric_only=True)
    return {"evals": cat(evals), "nodes": worker_means, "staleness": cat(staleness), "decisions": cat(decisions)}


def write_figures(runs: list[Run], out: Path, per_run: pd.DataFrame | None = None) -> list[Path]:
    """Draw every figure the runs have data for; write PNG and PDF; return the paths written."""
    from edgeml import plots

    tables = figure_tables(runs)
    per_run = per_run if per_run is not None else per_run_table(runs, choose_target(runs), None)
    ctx = _context(runs)
    figures = {f"convergence_{name}": plots.convergence(tables["evals"], x, ctx)
               for name, x in (("time", "time_s"), ("steps", "total_steps"), ("bytes", "total_mb"))}
    figures["time_breakdown"] = plots.time_breakdown(tables["nodes"], ctx)
    figures["throughput"] = plots.throughput(per_run, ctx)
    if not tables["staleness"].empty:
        figures["staleness"] = plots.staleness(tables["staleness"], ctx)
    if not tables["decisions"].empty:
        figures["decisions"] = plots.decisions(tables["decisions"], ctx)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in figures.items():
        for ext in ("png", "pdf"):
            fig.savefig(out / f"{name}.{ext}", dpi=150)
            paths.append(out / f"{name}.{ext}")
    return paths


FIGURE_CAPTIONS = {
    "convergence_time": "Test accuracy and loss against training time (adsp.txt Fig. 4, esync.txt Fig. 3)",
    "convergence_steps": "Test accuracy and loss against total steps over all workers (adsp.txt Fig. 4c-d)",
    "convergence_bytes": "Test accuracy and loss against bytes sent (adacomp.txt Fig. 3, snap.txt Fig. 4)",
    "time_breakdown": "Each worker's time split into computation, communication and waiting (adsp.txt Fig. 1)",
    "throughput": "Training throughput and network traffic per run (esync.txt Fig. 4)",
    "staleness": "Staleness of the updates the parameter server applied",
    "decisions": "Quantities the algorithms decided as they ran",
}


# ------------------------------------------------------------------------------------------ experiments


EXPERIMENT_KEYS = {"paper", "title", "description", "seeds", "baseline", "target_accuracy", "target_loss",
                   "differences", "ci"}
"""``ci = false`` keeps an experiment out of scripts/reproduce_quick.sh (e.g. it needs data CI does not have)."""
TOP_KEYS = {"experiment", "settings", "quick", "runs", "claims"}
RUN_KEYS = {"name", "algorithm", "config", "quick", "sweep"}
CLAIM_KEYS = {"text", "metric", "run", "baseline", "kind", "paper_value", "op"}
CLAIM_KINDS = ("reduction", "ratio", "value")


@dataclass
class Experiment:
    source: Path
    paper: str
    title: str
    description: str
    seeds: list[int]
    baseline: str
    target: Target | None
    differences: str
    settings: dict
    quick: dict
    runs: list[dict]
    claims: list[dict]


@dataclass
class PlannedRun:
    name: str
    algorithm: str
    seed: int
    layers: dict
    extra: dict = field(default_factory=dict)  # this run's own layers, for the report

    @property
    def dirname(self) -> str:
        return re.sub(r"[^\w.=+-]+", "_", self.name).strip("_") + f"-s{self.seed}"


def experiment_dirs() -> list[Path]:
    return list(dict.fromkeys([Path.cwd() / "experiments", Path(edgeml.__file__).resolve().parents[1] / "experiments"]))


def find_experiment(paper: str) -> Path:
    if paper.endswith(".toml") and Path(paper).is_file():
        return Path(paper)
    for d in experiment_dirs():
        if (d / f"{paper}.toml").is_file():
            return d / f"{paper}.toml"
    names = sorted({p.stem for d in experiment_dirs() if d.is_dir() for p in d.glob("*.toml")})
    raise UserError(f"no experiment {paper!r}: choose one of {', '.join(names) or '(none)'} "
                    f"(files in {' or '.join(str(d) for d in experiment_dirs())})")


def _check_keys(where: str, table: Any, allowed: set[str]) -> dict:
    if not isinstance(table, dict):
        raise UserError(f"{where} must be a table: write it as [{where}] or {{ key = value }}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise UserError(f"unknown key {unknown[0]!r} in {where}: allowed keys are {', '.join(sorted(allowed))}")
    return table


def load_experiment(paper: str) -> Experiment:
    from edgeml.config import read_toml

    path = find_experiment(paper)
    doc = _check_keys(path.name, read_toml(path), TOP_KEYS)
    e = _check_keys(f"{path.name} [experiment]", doc.get("experiment", {}), EXPERIMENT_KEYS)
    runs = [_check_keys(f"{path.name} [[runs]]", r, RUN_KEYS) for r in doc.get("runs", [])]
    claims = [_check_keys(f"{path.name} [[claims]]", c, CLAIM_KEYS) for c in doc.get("claims", [])]
    if not runs:
        raise UserError(f"{path}: no [[runs]]: add at least one with name and algorithm")
    for r in runs:
        if "algorithm" not in r:
            raise UserError(f"{path}: a [[runs]] entry has no algorithm: add algorithm = \"...\"")
        r.setdefault("name", r["algorithm"])
    names = [r["name"] for r in runs]
    if len(set(names)) != len(names):
        raise UserError(f"{path}: run names must be unique, got {', '.join(names)}: give each [[runs]] a name")
    if "target_accuracy" in e and "target_loss" in e:
        raise UserError(f"{path}: give target_accuracy or target_loss in [experiment], not both")
    target = Target("accuracy", float(e["target_accuracy"])) if "target_accuracy" in e else \
        Target("loss", float(e["target_loss"])) if "target_loss" in e else None
    for c in claims:
        missing = [k for k in ("text", "metric", "run", "kind") if k not in c]
        if missing:
            raise UserError(f"{path}: claim {c.get('text', '?')!r} lacks {', '.join(missing)}")
        if c["kind"] not in CLAIM_KINDS:
            raise UserError(f"{path}: claim {c['text']!r} has kind {c['kind']!r}: choose {', '.join(CLAIM_KINDS)}")
        if c["kind"] == "value" and ("paper_value" not in c or c.get("op", ">=") not in (">=", "<=")):
            raise UserError(f"{path}: value claim {c['text']!r} needs paper_value and op \">=\" or \"<=\"")
    seeds = e.get("seeds", [0])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise UserError(f"{path}: [experiment] seeds must be a non-empty list of integers, e.g. seeds = [0, 1]")
    return Experiment(path, str(e.get("paper", path.stem)), e.get("title", path.stem), e.get("description", ""),
                      seeds, e.get("baseline", runs[0]["name"]), target, e.get("differences", ""),
                      doc.get("settings", {}), doc.get("quick", {}), runs, claims)


def _sweep(spec: dict) -> list[tuple[str, dict]]:
    """(name, layer) per point of the run's sweep: the product over its keys."""
    sweep = spec.get("sweep") or {}
    for key, values in sweep.items():
        if key.count(".") < 1 or not isinstance(values, list) or not values:
            raise UserError(f"sweep key {key!r} of run {spec['name']!r}: write \"section.key\" = [values, ...]")
    points = []
    for values in itertools.product(*sweep.values()):
        layer: dict[str, dict] = {}
        for key, v in zip(sweep, values):
            section, name = key.split(".", 1)
            layer.setdefault(section, {})[name] = v
        tag = ",".join(f"{k}={_fmt_value(v)}" for k, v in zip(sweep, values))
        points.append((f"{spec['name']}[{tag}]" if sweep else spec["name"], layer))
    return points


def plan(exp: Experiment, quick: bool = False, seeds: list[int] | None = None,
         backend: str | None = None) -> list[PlannedRun]:
    """Every (run, sweep point, seed) of the experiment with its merged config layers, validated up front."""
    from edgeml.config import build_config, merge

    planned = []
    for spec in exp.runs:
        own = [spec.get("config", {})] + ([spec.get("quick", {})] if quick else [])
        layers = [exp.settings, own[0]] + ([exp.quick, own[1]] if quick else [])
        for name, point in _sweep(spec):
            for seed in seeds or exp.seeds:
                run = {"algorithm": spec["algorithm"], "seed": seed, **({"backend": backend} if backend else {})}
                p = PlannedRun(name, spec["algorithm"], seed, merge(*layers, point, {"run": run}),
                               merge(*own, point))
                try:
                    build_config(p.layers)
                except UserError as exc:
                    raise UserError(f"{exp.source.name}, run {name!r}: {exc}") from None
                planned.append(p)
    labels = {p.name for p in planned}
    try:
        baseline_labels(sorted(labels), {p.name: p.algorithm for p in planned}, exp.baseline)
    except UserError as exc:
        raise UserError(f"{exp.source.name}: {exc}") from None
    for c in exp.claims:
        if c["run"] not in labels:
            raise UserError(f"{exp.source.name}: claim {c['text']!r} names run {c['run']!r}: "
                            f"choose one of {', '.join(sorted(labels))}")
    return planned


def _is_inf_if_missing(metric: str) -> bool:
    return metric.endswith("_to_target")


def evaluate_claim(claim: dict, table: pd.DataFrame, default_baseline: str) -> dict[str, str]:
    """Measure one claim on the comparison table (means over seeds) and give a computed verdict."""
    kind, metric, paper = claim["kind"], claim["metric"], claim.get("paper_value")
    t = table.set_index("run")
    row = {"claim": claim["text"], "paper": _claim_fmt(kind, paper, claim.get("op", ">="), metric)}
    if metric not in t.columns:
        return {**row, "measured": "n/a", "verdict": f"not measured: no column {metric!r} in the table"}

    def value(label: str) -> float:
        v = float(t.loc[label, metric])
        return math.inf if math.isnan(v) and _is_inf_if_missing(metric) else v

    run = claim["run"]
    if kind == "value":
        m = value(run)
    else:
        base = claim.get("baseline", default_baseline)
        if base not in t.index and "[" in run:  # a sweep point compares with the baseline's same point
            base = base + run[run.index("["):]
        if base not in t.index:
            return {**row, "measured": "n/a", "verdict": f"not measured: no run {base!r}"}
        b, r = value(base), value(run)
        with np.errstate(all="ignore"):
            m = float(1 - np.float64(r) / b) if kind == "reduction" else float(np.float64(b) / r)
    row["measured"] = _claim_fmt(kind, m, None, metric)
    if math.isnan(m):
        return {**row, "verdict": "not measured (neither reached the target)" if _is_inf_if_missing(metric)
                else "not measured"}
    if kind == "value":
        ok = m >= paper if claim.get("op", ">=") == ">=" else m <= paper
        return {**row, "verdict": "holds" if ok else "does not hold"}
    neutral = 0.0 if kind == "reduction" else 1.0
    want = (paper - neutral) if paper is not None else 1.0  # no paper value: the direction only
    effect = (m - neutral) * math.copysign(1.0, want)
    if paper is None:  # the paper gives a direction, not a size: a tiny effect is not evidence either way
        verdict = "holds" if effect >= MIN_EFFECT else "marginal" if effect > 0 else "does not hold"
    else:
        verdict = "holds" if effect >= HOLDS_SHARE * abs(want) else "weaker" if effect > 0 else "does not hold"
    return {**row, "verdict": verdict}


def _claim_fmt(kind: str, v: float | None, op: str | None, metric: str) -> str:
    if v is None:
        return "> 0% (no number given)" if kind == "reduction" else "> 1x (no number given)"
    if math.isinf(v):
        return "∞ (not reached)" if v > 0 else "-∞ (not reached)"
    if kind == "reduction":
        s = f"{v:.0%}"
    elif kind == "ratio":
        s = f"{v:.2f}x"
    else:
        s = f"{v:.0%}" if metric.endswith(("fraction", "accuracy")) else f"{v:.4g}"
    return f"{op} {s}" if op else s


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows])


def _toml(layers: dict) -> str:
    import tomli_w

    return tomli_w.dumps(layers).strip() if layers else "(none)"


def write_report(exp: Experiment, out: Path, cmp: Comparison, claims: list[dict], figures: list[Path],
                 planned: list[PlannedRun], command_line: str, quick: bool, runs: list[Run]) -> Path:
    meta = runs[0].meta() if runs else {}
    shared = {k: v for k, v in planned[0].layers.items() if k != "run"} if planned else {}
    shared = {s: {k: v for k, v in vals.items() if all(p.layers.get(s, {}).get(k) == v for p in planned)}
              for s, vals in shared.items()}
    backend = sorted({p.layers.get("run", {}).get("backend", "procs") for p in planned})
    per_run = {p.name: (p.algorithm, p.extra) for p in planned}
    lines = [f"# {exp.title}", "", exp.description.strip(), "",
             "## How this was produced", "",
             f"`{command_line}` with edgeml {edgeml.__version__} (git {meta.get('git_sha') or 'unknown'}) on "
             f"{datetime.now(timezone.utc):%Y-%m-%d}: {len(planned)} runs, seeds "
             f"{', '.join(map(str, sorted({p.seed for p in planned})))}, backend {', '.join(backend)}. "
             f"Everything below is rebuilt from `runs/` by `edgeml compare` and `edgeml plot`.", "",
             "Settings shared by every run:", "", "```toml", _toml({k: v for k, v in shared.items() if v}), "```", "",
             _md_table(["run", "algorithm", "its own settings"],
                       [[n, a, "; ".join(f"{s}.{k} = {_fmt_value(v)}" for s, kv in e.items() for k, v in kv.items())
                         or "-"] for n, (a, e) in per_run.items()]), "",
             "## Claims", "",
             _md_table(["claim", "paper", "measured here", "verdict"],
                       [[c["claim"], c["paper"], c["measured"], c["verdict"]] for c in claims]) if claims
             else "(the experiment file lists no claims)", "",
             f"Measured from the table below (means over seeds, time to {cmp.target}). A claim *holds* when the "
             f"measured effect has the paper's direction and at least {HOLDS_SHARE:.0%} of its size, is *weaker* "
             "with the right direction but smaller, and *does not hold* otherwise; where the paper gives only a "
             f"direction, it holds from a {MIN_EFFECT:.0%} effect and is *marginal* below.", "",
             "## Results", "", cmp.markdown(), "Full table: [compare.csv](compare.csv), per run: "
             "[compare_runs.csv](compare_runs.csv).", "", "## Figures", ""]
    for p in figures:
        if p.suffix == ".png":
            rel = p.relative_to(out).as_posix()
            caption = FIGURE_CAPTIONS.get(p.stem, p.stem)
            lines += [f"**{caption}** ([PDF]({rel[:-4]}.pdf))", "", f"![{p.stem}]({rel})", ""]
    lines += ["## Differences from the paper", "", exp.differences.strip() or "(none noted)", ""]
    if quick:
        reduced = "; ".join(f"{s}.{k} = {_fmt_value(v)}" for s, kv in exp.quick.items() for k, v in kv.items())
        lines += [f"This is the **quick** reproduction (`--quick`), reduced to finish in minutes on 2 cores "
                  f"({reduced or 'no shared changes'}; plus each run's own quick settings above). Its numbers "
                  f"show the direction of each effect, not the paper's magnitudes; the full reproduction is "
                  f"`edgeml reproduce {exp.paper}`.", ""]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines))
    return path


def _prepare_out(out: Path, resume: bool) -> None:
    """Start a fresh reproduction (or continue one), but never clear a directory reproduce did not write."""
    if out.exists() and not (out / "experiment.toml").exists() and {p.name for p in out.iterdir()} - {"quick"}:
        raise UserError(f"{out} exists and was not written by edgeml reproduce: choose a new or empty --out")
    for sub in ("figures",) if resume else ("runs", "figures"):
        shutil.rmtree(out / sub, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)


def _finished(path: Path, cfg, quick: bool) -> bool:
    """Whether ``path`` holds a finished run of exactly ``cfg`` from this reproduction (``--resume`` keeps it)."""
    import tomli_w

    from edgeml.metrics import _toml_safe

    try:
        done = json.loads((path / "summary.json").read_text())
        tag = json.loads((path / "experiment.json").read_text())
        same = (path / "config.toml").read_text() == tomli_w.dumps(_toml_safe(cfg.to_dict()))
    except (OSError, ValueError):
        return False
    return same and tag.get("quick") == quick and done.get("status") in ("completed", "stopped")


def reproduce(paper: str, quick: bool = False, out: Path | None = None, seeds: list[int] | None = None,
              backend: str | None = None, console: Console | None = None, command_line: str = "",
              resume: bool = False) -> Path:
    """Run every run of an experiment; write the table, the figures and REPORT.md; return the output folder.

    With ``resume``, a run whose directory already holds a finished run of the same configuration is kept
    rather than run again (a reproduction that was stopped continues where it stopped)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from edgeml.config import build_config
    from edgeml.runner import run as run_config

    console = console or wide_console(stderr=True)
    exp = load_experiment(paper)
    planned = plan(exp, quick, seeds, backend)
    out = Path(out) if out else Path("results") / exp.paper / ("quick" if quick else "")
    _prepare_out(out, resume)
    shutil.copyfile(exp.source, out / "experiment.toml")
    paths = []
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(exp.paper, total=len(planned))
        for k, p in enumerate(planned, 1):
            progress.update(task, description=f"{exp.paper}: [cyan]{p.name}[/] ({p.algorithm}) seed {p.seed}")
            cfg = build_config({**p.layers, "run": {**p.layers["run"], "name": p.dirname, "out": str(out / "runs")}})
            path = out / "runs" / p.dirname
            kept = resume and _finished(path, cfg, quick)
            if not kept:
                shutil.rmtree(path, ignore_errors=True)
                path = run_config(cfg, quiet=True, path=path)
                (path / "experiment.json").write_text(json.dumps({"paper": exp.paper, "run": p.name, "seed": p.seed,
                                                                  "quick": quick}))
            s = json.loads((path / "summary.json").read_text())
            acc = s.get("final_accuracy")
            progress.console.print(f"[{k}/{len(planned)}] {p.name} seed {p.seed}{' (kept)' if kept else ''}: "
                                   f"{'accuracy %.3f' % acc if acc is not None else 'no evaluation'}, "
                                   f"{s.get('total_steps')} steps ({s.get('stop_reason')})", highlight=False)
            progress.advance(task)
            paths.append(path)
        progress.update(task, description=f"{exp.paper}: table, figures, report")
        runs = load_runs([str(p) for p in paths])
        cmp = compare(runs, exp.target or choose_target(runs), exp.baseline)
        cmp.write(out)
        figures = write_figures(runs, out / "figures", cmp.per_run)
        claims = [evaluate_claim(c, cmp.table, exp.baseline) for c in exp.claims]
        write_report(exp, out, cmp, claims, figures, planned,
                     command_line or f"edgeml reproduce {paper}" + (" --quick" if quick else ""), quick, runs)
    table = Table(title=f"{exp.paper}: claims ({'quick' if quick else 'full'} reproduction)")
    for h in ("claim", "paper", "measured here", "verdict"):
        table.add_column(h)
    for c in claims:
        style = {"holds": "green", "weaker": "yellow", "marginal": "yellow"}.get(c["verdict"], "red")
        table.add_row(escape(c["claim"]), c["paper"], c["measured"], f"[{style}]{escape(c['verdict'])}[/]")
    console.print(cmp.rich(), table)
    return out


# ------------------------------------------------------------------------------------------ commands


@command("compare")
def compare_cmd(
    run_dirs: list[str] = typer.Argument(..., help="Run directories, glob patterns, or folders holding runs."),
    target_accuracy: Optional[float] = typer.Option(None, help="Time to reach this test accuracy."),
    target_loss: Optional[float] = typer.Option(None, help="Time to fall to this test loss."),
    baseline: Optional[str] = typer.Option(None, help="Run or algorithm speedups are measured against "
                                                      "(default: bsp if present, else the first run)."),
    out: Optional[Path] = typer.Option(None, help="Write compare.csv, compare_runs.csv and compare.md here."),
) -> None:
    """Compare runs: accuracy, time to target, speedup, bytes, time fractions; seeds give mean and CI."""
    runs = load_runs(run_dirs)
    cmp = compare(runs, choose_target(runs, target_accuracy, target_loss), baseline)
    wide_console().print(cmp.rich())
    if out:
        for p in cmp.write(out):
            print(p)


@command("plot")
def plot_cmd(
    run_dirs: list[str] = typer.Argument(..., help="Run directories, glob patterns, or folders holding runs."),
    out: Path = typer.Option(Path("figures"), help="Folder for the PNG and PDF figures."),
) -> None:
    """Draw convergence, time breakdown, throughput, staleness and decision figures (PNG and PDF)."""
    for p in write_figures(load_runs(run_dirs), out):
        print(p)


@command("reproduce")
def reproduce_cmd(
    paper: str = typer.Argument(..., help="Experiment name (a file experiments/<paper>.toml) or a .toml path."),
    quick: bool = typer.Option(False, "--quick", help="Reduced version that finishes in minutes on 2 cores."),
    out: Optional[Path] = typer.Option(None, help="Output folder (default results/<paper>/, or .../quick/)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds replacing the experiment's, e.g. 0,1,2."),
    backend: Optional[str] = typer.Option(None, help="procs or sim for every run."),
    resume: bool = typer.Option(False, "--resume", help="Keep runs already finished in the output folder with the "
                                                         "same configuration; run only the rest."),
) -> None:
    """Run a paper's experiment: the system and its baselines; write table, figures and REPORT.md."""
    seed_list = None
    if seeds is not None:
        try:
            seed_list = [int(s) for s in seeds.split(",") if s.strip()]
        except ValueError:
            raise UserError(f"--seeds {seeds!r}: give comma-separated integers, e.g. --seeds 0,1,2") from None
    line = " ".join(["edgeml reproduce", paper] + (["--quick"] if quick else []) + ([f"--out {out}"] if out else [])
                    + ([f"--seeds {seeds}"] if seeds else []) + ([f"--backend {backend}"] if backend else []))
    print(reproduce(paper, quick, out, seed_list, backend, command_line=line, resume=resume) / "REPORT.md")
