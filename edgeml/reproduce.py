"""Paper reproductions: ``edgeml reproduce PAPER`` runs an experiment file and writes ``results/<paper>/``.

Output (``results/<paper>/quick/`` with ``--quick``): ``experiment.toml`` (the file used), ``runs/``,
``compare.csv``, ``compare_runs.csv``, ``compare.md``, ``figures/`` (PNG and PDF, one folder per figure
group when runs name one) and ``REPORT.md``. The tables and figures come from ``edgeml.report``.

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
    figure = "Fig. 1: time breakdown"   # optional: runs naming the same figure are drawn together, in
                                 # figures/<text before the colon, as a slug>/ (e.g. figures/fig-1/)
    against_sweep = ["time_to_target", "mu_implicit"]   # optional, with a one-key sweep: a figure of these
                                 # against the swept value (compare-table columns, or decided quantities
                                 # from series/decisions.csv, averaged over the run)

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

Claim verdicts: a value claim holds when ``measured op paper_value``. A reduction (neutral 0) or ratio
(neutral 1) claim "holds" when the measured effect has the paper's sign and at least 90% of its size, is
"weaker" with the right sign but smaller, and "does not hold" otherwise. Without a paper value the claim is
a direction: it "holds" from a 10% effect (reduction 0.1, ratio 1.1), is "marginal" below. Unreached targets
count as infinite time, so a run that never reaches the target cannot be "faster".
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import re
import shutil
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
from edgeml.report import (FIGURE_CAPTIONS, Comparison, Run, Target, _fmt_value, _md_table, baseline_labels,
                           choose_target, compare, load_runs, wide_console, write_figures)

HOLDS_SHARE = 0.9
MIN_EFFECT = 0.1  # for claims without a paper value: a 10% reduction, or a ratio of 1.1


# ------------------------------------------------------------------------------------------ experiments


EXPERIMENT_KEYS = {"paper", "title", "description", "seeds", "baseline", "target_accuracy", "target_loss",
                   "differences", "ci"}
"""``ci = false`` keeps an experiment out of scripts/reproduce_quick.sh (e.g. it needs data CI does not have)."""
TOP_KEYS = {"experiment", "settings", "quick", "runs", "claims"}
RUN_KEYS = {"name", "algorithm", "config", "quick", "sweep", "figure", "against_sweep"}
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
    figure: str = ""  # the figure group it is drawn in ("" : the experiment's one set of figures)
    spec: str = ""    # the [[runs]] entry it comes from (its name)
    point: dict = field(default_factory=dict)  # its sweep values, {"section.key": value}

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
    for r in runs:
        against = r.get("against_sweep")
        if against is not None and (len(r.get("sweep") or {}) != 1 or not isinstance(against, list)):
            raise UserError(f"{path}: run {r['name']!r}: against_sweep needs a sweep over one key and a list of "
                            f"metrics, e.g. against_sweep = [\"time_to_target\"]")
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
                               merge(*own, point), str(spec.get("figure", "")), spec["name"],
                               {f"{sec}.{k}": v for sec, kv in point.items() for k, v in kv.items()})
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
    if run not in t.index:
        return {**row, "measured": "n/a", "verdict": f"not measured: no run {run!r}"}
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



def _toml(layers: dict) -> str:
    import tomli_w

    return tomli_w.dumps(layers).strip() if layers else "(none)"


def sweep_figure(spec: dict, planned: list[PlannedRun], runs: list[Run], cmp: Comparison, out: Path) -> list[Path]:
    """The run's ``against_sweep`` metrics against its swept value (one point per seed; PNG and PDF)."""
    from edgeml import plots
    from edgeml.report import _context

    key = next(iter(spec["sweep"]))
    value = {p.name: p.point[key] for p in planned if p.spec == spec["name"]}
    per_run = cmp.per_run.set_index(["run", "seed"])
    rows = []
    for r in runs:
        if r.label not in value:
            continue
        row = {"run": r.label, "seed": r.seed, key: value[r.label]}
        decisions = r.table("series/decisions.csv", ("name", "value"), required=False)
        for metric in spec["against_sweep"]:
            if metric in per_run.columns:
                row[metric] = per_run.loc[(r.label, r.seed), metric]
            elif decisions is not None and (decisions["name"] == metric).any():
                row[metric] = decisions.loc[decisions["name"] == metric, "value"].mean()
        rows.append(row)
    df = pd.DataFrame(rows)
    metrics = [m for m in spec["against_sweep"] if m in df.columns]
    if df.empty or not metrics:
        return []
    fig = plots.against_sweep(df, key, metrics, str(cmp.target), _context([r for r in runs if r.label in value]))
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"sweep_{figure_dir(spec['name'])}.{ext}" for ext in ("png", "pdf")]
    for path in paths:
        fig.savefig(path, dpi=150)
    return paths


def figure_dir(title: str) -> str:
    """Folder of a figure group under figures/: "Fig. 4: convergence" -> "fig-4" ("" for the default group)."""
    return re.sub(r"[^a-z0-9]+", "-", title.split(":", 1)[0].lower()).strip("-")


def write_report(exp: Experiment, out: Path, cmp: Comparison, claims: list[dict], figures: dict[str, list[Path]],
                 planned: list[PlannedRun], command_line: str, quick: bool, runs: list[Run]) -> Path:
    meta = runs[0].meta() if runs else {}
    shared = {k: v for k, v in planned[0].layers.items() if k != "run"} if planned else {}
    shared = {s: {k: v for k, v in vals.items() if all(p.layers.get(s, {}).get(k) == v for p in planned)}
              for s, vals in shared.items()}
    backend = sorted({p.layers.get("run", {}).get("backend", "procs") for p in planned})
    per_run = {p.name: (p.algorithm, p.extra) for p in planned}
    note = ["> This is the **quick** reproduction: the description is the full experiment's; what the quick version "
            "changes is in the settings below and at the end of this report.", ""] if quick else []
    lines = [f"# {exp.title}", "", *note, exp.description.strip(), "",
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
    for title, paths in figures.items():
        if title:
            members = list(dict.fromkeys(p.name for p in planned if p.figure == title))
            lines += [f"### {title}", "", "Runs: " + ", ".join(f"`{m}`" for m in members) + ".", ""]
        for p in paths:
            if p.suffix == ".png":
                rel = p.relative_to(out).as_posix()
                caption = FIGURE_CAPTIONS.get(p.stem, "Measured against the swept value, one point per seed"
                                              if p.stem.startswith("sweep_") else p.stem)
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
    """Whether ``path`` holds a finished run of exactly ``cfg`` from this reproduction (``--resume`` keeps it).

    The output folder itself (``run.out``) may differ: a reproduction can be continued from another place."""
    from edgeml.config import read_toml
    from edgeml.metrics import _toml_safe

    def comparable(config: dict) -> dict:
        return {**config, "run": {k: v for k, v in config.get("run", {}).items() if k != "out"}}

    try:
        done = json.loads((path / "summary.json").read_text())
        tag = json.loads((path / "experiment.json").read_text())
        same = comparable(read_toml(path / "config.toml")) == comparable(_toml_safe(cfg.to_dict()))
    except (OSError, ValueError, UserError):
        return False
    return same and tag.get("quick") == quick and done.get("status") in ("completed", "stopped")


def reproduce(paper: str, quick: bool = False, out: Path | None = None, seeds: list[int] | None = None,
              backend: str | None = None, console: Console | None = None, command_line: str = "",
              resume: bool = False, only: str | None = None) -> Path:
    """Run every run of an experiment; write the table, the figures and REPORT.md; return the output folder.

    With ``resume``, a run whose directory already holds a finished run of the same configuration is kept
    rather than run again (a reproduction that was stopped continues where it stopped). With ``only`` (a glob
    on run names), only the matching runs are run; the others are kept where they already finished and left
    out where they did not, and the table, figures and REPORT.md cover every run that is there."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from edgeml.config import build_config
    from edgeml.runner import run as run_config

    console = console or wide_console(stderr=True)
    exp = load_experiment(paper)
    planned = plan(exp, quick, seeds, backend)
    selected = {p.dirname for p in planned if not only or fnmatch.fnmatchcase(p.name, only)}
    if not selected:
        raise UserError(f"--only {only!r} matches no run of {exp.paper}: choose among "
                        f"{', '.join(dict.fromkeys(p.name for p in planned))}")
    out = Path(out) if out else Path("results") / exp.paper / ("quick" if quick else "")
    _prepare_out(out, resume or bool(only))
    shutil.copyfile(exp.source, out / "experiment.toml")
    done: list[PlannedRun] = []  # the runs the table covers: run now or kept
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(exp.paper, total=len(planned))
        for k, p in enumerate(planned, 1):
            progress.update(task, description=f"{exp.paper}: [cyan]{p.name}[/] ({p.algorithm}) seed {p.seed}")
            cfg = build_config({**p.layers, "run": {**p.layers["run"], "name": p.dirname, "out": str(out / "runs")}})
            path = out / "runs" / p.dirname
            kept = (resume or p.dirname not in selected) and _finished(path, cfg, quick)
            if not kept and p.dirname not in selected:
                progress.console.print(f"[{k}/{len(planned)}] {p.name} seed {p.seed}: not selected by --only and "
                                       "not run yet: left out", highlight=False)
                progress.advance(task)
                continue
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
            done.append(p)
        progress.update(task, description=f"{exp.paper}: table, figures, report")
        runs = load_runs([str(out / "runs" / p.dirname) for p in done])
        labels = [r.label for r in runs]
        try:  # with --only, the baseline may not have run yet: then the table has no speedups
            baseline_labels(labels, {r.label: r.summary["algorithm"] for r in runs}, exp.baseline)
            baseline = exp.baseline
        except UserError:
            baseline = None
        cmp = compare(runs, exp.target or choose_target(runs), baseline)
        cmp.write(out)
        figures = {}
        for title in dict.fromkeys(p.figure for p in done):  # figure groups, in the experiment's order
            names = {p.name for p in done if p.figure == title}
            group = [r for r in runs if r.label in names]
            figures[title] = write_figures(group, out / "figures" / figure_dir(title),
                                           cmp.per_run[cmp.per_run["run"].isin(names)])
            for spec in exp.runs:
                if spec.get("against_sweep") and spec.get("figure", "") == title:
                    figures[title] += sweep_figure(spec, done, runs, cmp, out / "figures" / figure_dir(title))
        claims = [evaluate_claim(c, cmp.table, exp.baseline) for c in exp.claims]
        write_report(exp, out, cmp, claims, figures, done,
                     command_line or f"edgeml reproduce {paper}" + (" --quick" if quick else ""), quick, runs)
    table = Table(title=f"{exp.paper}: claims ({'quick' if quick else 'full'} reproduction)")
    for h in ("claim", "paper", "measured here", "verdict"):
        table.add_column(h)
    for c in claims:
        style = {"holds": "green", "weaker": "yellow", "marginal": "yellow"}.get(c["verdict"], "red")
        table.add_row(escape(c["claim"]), c["paper"], c["measured"], f"[{style}]{escape(c['verdict'])}[/]")
    console.print(cmp.rich(), table)
    return out


# ------------------------------------------------------------------------------------------ command


@command("reproduce")
def reproduce_cmd(
    paper: str = typer.Argument(..., help="Experiment name (a file experiments/<paper>.toml) or a .toml path."),
    quick: bool = typer.Option(False, "--quick", help="Reduced version that finishes in minutes on 2 cores."),
    out: Optional[Path] = typer.Option(None, help="Output folder (default results/<paper>/, or .../quick/)."),
    seeds: Optional[str] = typer.Option(None, help="Comma-separated seeds replacing the experiment's, e.g. 0,1,2."),
    backend: Optional[str] = typer.Option(None, help="procs or sim for every run."),
    resume: bool = typer.Option(False, "--resume", help="Keep runs already finished in the output folder with the "
                                                         "same configuration; run only the rest."),
    only: Optional[str] = typer.Option(None, help="Run only the runs whose names match this glob (e.g. 'fig5*'); "
                                                  "keep the others that already finished."),
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
    print(reproduce(paper, quick, out, seed_list, backend, command_line=line, resume=resume, only=only) / "REPORT.md")
