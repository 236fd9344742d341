"""Comparison tables and figures, rebuilt from run directories alone: ``edgeml compare`` and ``edgeml plot``.

Run directories are described in ``edgeml.metrics``; ``edgeml.reproduce`` builds paper reproductions on this.

Derived table columns: ``time_to_target``, ``steps_to_target``, ``bytes_to_target`` (first evaluation reaching
the target), ``speedup`` (baseline time / run time, paired: same seed, data, model, devices and network),
``noncompute_fraction`` (1 - compute fraction: adsp.txt Sec. 2.3's "waiting", which includes communication),
``samples_per_s`` and ``bytes_per_s``. Seeds of a run give a mean and a 95% bootstrap interval; a time to
target is a mean only when every seed reached it.

Run labels: ``reproduce`` writes ``experiment.json`` (paper, run name, seed) into each run directory. Other run
directories are labelled by algorithm, plus the config keys that tell apart runs of the same algorithm.
"""

from __future__ import annotations

import glob
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd
import typer
from rich.console import Console
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


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows])


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
    evals, nodes, staleness, decisions, commits, trials = [], [], [], [], [], []
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
        co = r.table("series/commits.csv", ("time_s", "worker", "commits", "target"), required=False)
        if co is not None:
            commits.append(co.assign(**tag))
        tr = r.table("series/trials.csv", ("epoch", "rate", "reward"), required=False)
        if tr is not None:
            trials.append(tr.assign(**tag))
    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    worker_means = cat(nodes).groupby(["run", "worker"], sort=False, as_index=False).mean(numeric_only=True)
    return {"evals": cat(evals), "nodes": worker_means, "staleness": cat(staleness), "decisions": cat(decisions),
            "commits": cat(commits), "trials": cat(trials)}


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
    if not tables["commits"].empty:
        figures["commits"] = plots.commits(tables["commits"], ctx)
    if not tables["trials"].empty:
        figures["trials"] = plots.trials(tables["trials"], ctx)
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
    "trials": "Each trial's reward against the commit rate it tried, a line per search (adsp.txt Alg. 1)",
    "commits": "Each worker's commit count at every checkpoint against C_target, and their spread (adsp.txt "
               "Theorem 2)",
}


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
