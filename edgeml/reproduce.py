"""Paper reproductions: ``edgeml reproduce PAPER`` runs an experiment file and writes ``results/<paper>/``.

Output (``results/<paper>/quick/`` with ``--quick``): ``experiment.toml`` (the file used), ``runs/``,
``compare.csv``, ``compare_runs.csv``, ``compare_reach.csv``, ``compare.md``, ``figures/`` (PNG and PDF, one
folder per figure group) and ``REPORT.md``: the verdicts, then one section per figure group with the paper's
statements, what was measured, the verdicts and the figures. Tables come from ``edgeml.report``, figures from
``edgeml.figures``, verdicts from ``edgeml.claims``. Finished runs are never deleted without ``--force``; a run
that fails is recorded (its reason in REPORT.md) and the others go on.

Experiment file ``experiments/<paper>.toml``::

    [experiment]
    paper = "baselines"          # results go to results/<paper>/ (default: the file name)
    title = "..."
    description = "..."          # one paragraph for REPORT.md
    seeds = [0, 1, 2]            # every run is repeated per seed (run.seed), unless the run names its own
    quick_seeds = [0, 1]         # optional: with --quick, each run's seeds among these
    baseline = "bsp"             # run name speedups are measured against
    target_loss = [0.9, 1.0]     # or target_accuracy: the targets of the time-to-target tables (the first is
                                 # the headline); neither: automatic (the runs' stop target, else 95% of the
                                 # weakest run's best accuracy)
    rule = "stays"               # convergence rule (edgeml.convergence): stays, smoothed, first, stopping
    differences = "..."          # where settings differ from the paper and why
    ci = true                    # false keeps the experiment out of scripts/reproduce_quick.sh

    [settings]                   # config layers shared by all runs: the sections of a run config
    data = { dataset = "fashion-mnist" }
    [quick]                      # layers merged over [settings] and each run's config with --quick
    data = { dataset = "digits" }

    [[figures]]                  # optional: a figure group's panels and what the paper says about them
    id = "fig5"                  # runs join it with figure = "fig5"; its files go to figures/fig5/
    title = "Fig. 5: ADSP against Fixed ADACOMM at four heterogeneity degrees"
    cite = "adsp.txt Fig. 5"     # the paper's figure; captions cite it and nothing else
    text = "..."                 # optional: what the paper's figure shows, for REPORT.md
    panels = ["bars", "convergence_time"]   # optional: the panels to draw (default: every one with data)
    against = [{ x = "cluster.hetero", y = ["time_to_target"] }]   # optional: metrics against a swept
                                 # setting (or against a measured quantity), per method with intervals

    [[runs]]
    name = "ssp"                 # unique; defaults to algorithm
    algorithm = "ssp"
    config = { ssp = { staleness = 3 } }     # optional layers for this run
    quick = { stop = { max_time = 5 } }      # optional layers for this run with --quick
    sweep = { "cluster.hetero" = ["H=1", "H=2"] }   # optional: one run per value (product over keys),
                                 # named "ssp[cluster.hetero=H=2]"
    quick_sweep = { "cluster.hetero" = ["H=1"] }     # optional: the sweep with --quick (default: sweep)
    seeds = [0]                  # optional: this run's seeds instead of the experiment's
    figure = "fig5"              # optional: the figure group(s) it is drawn in (an id, a list of ids, or a
                                 # title of its own: "Fig. 2: SSP" draws every panel in figures/fig-2/)

    [[claims]]                   # see edgeml.claims for kinds, fields and verdicts
    text = "ADSP converges 80% faster than BSP (Fig. 4b)"
    metric = "time_to_target"
    run = "adsp"
    baseline = "bsp"
    kind = "reduction"
    paper_value = 0.80
    seeds = [0, 1, 2]            # optional: the seeds it is decided on (default: all the runs share)
    targets = [0.9, 1.0]         # optional: check it at these targets (default: the headline target)

Layers merge in this order, later winning key by key: settings, run config, quick, run quick, sweep values,
then ``run.algorithm``/``run.seed`` (and ``--backend``).
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import re
import shutil
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

import edgeml
from edgeml.claims import HOLDS_SHARE, Claim, Result, evaluate, parse_claim
from edgeml.convergence import RULES, Target
from edgeml.errors import UserError
from edgeml.figures import FigureFile, panel_names, write_figures
from edgeml.report import (Comparison, Run, baseline_labels, choose_targets, claim_samples, compare, fmt_value,
                           load_runs, md_table, wide_console)

EXPERIMENT_KEYS = {"paper", "title", "description", "seeds", "quick_seeds", "baseline", "target_accuracy",
                   "target_loss", "rule", "differences", "ci"}
TOP_KEYS = {"experiment", "settings", "quick", "runs", "claims", "figures"}
RUN_KEYS = {"name", "algorithm", "config", "quick", "sweep", "quick_sweep", "figure", "seeds"}
FIGURE_KEYS = {"id", "title", "cite", "text", "panels", "against"}
AGAINST_KEYS = {"x", "y"}
FINISHED = ("completed", "stalled", "stopped")


# ------------------------------------------------------------------------------------------ experiments


@dataclass
class FigureGroup:
    id: str
    title: str
    cite: str = ""
    text: str = ""
    panels: list[str] | None = None
    against: list[dict] = field(default_factory=list)

    @property
    def folder(self) -> str:
        return re.sub(r"[^a-z0-9]+", "-", self.id.lower()).strip("-")


@dataclass
class Experiment:
    source: Path
    paper: str
    title: str
    description: str
    seeds: list[int]
    quick_seeds: list[int] | None
    baseline: str
    targets: list[Target] | None
    differences: str
    settings: dict
    quick: dict
    runs: list[dict]
    claims: list[Claim]
    figures: dict[str, FigureGroup]


@dataclass
class PlannedRun:
    name: str
    algorithm: str
    seed: int
    layers: dict
    extra: dict = field(default_factory=dict)  # this run's own layers, for the report
    figures: list[str] = field(default_factory=list)  # the figure groups it is drawn in ([""]: the default one)
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


def _seed_list(where: str, seeds: Any) -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise UserError(f"{where} must be a non-empty list of integers, e.g. seeds = [0, 1, 2]")
    return seeds


def _targets(where: str, e: dict) -> list[Target] | None:
    rule = e.get("rule", "stays")
    if rule not in RULES:
        raise UserError(f"{where}: rule = {rule!r}: choose one of {', '.join(RULES)}")
    if "target_accuracy" in e and "target_loss" in e:
        raise UserError(f"{where}: give target_accuracy or target_loss in [experiment], not both")
    for metric in ("accuracy", "loss"):
        if f"target_{metric}" in e:
            values = e[f"target_{metric}"]
            values = values if isinstance(values, list) else [values]
            if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                     for v in values):
                raise UserError(f"{where}: target_{metric} must be a number or a non-empty list of numbers")
            return [Target(metric, float(v), rule) for v in values]
    return [Target("loss", rule="stopping")] if rule == "stopping" else None


def _figure_group(where: str, raw: dict, known: set[str]) -> FigureGroup:
    f = _check_keys(f"{where} [[figures]]", raw, FIGURE_KEYS)
    if not isinstance(f.get("id"), str) or not f["id"] or not isinstance(f.get("title"), str):
        raise UserError(f"{where}: every [[figures]] entry needs id = \"...\" and title = \"...\"")
    panels = f.get("panels")
    if panels is not None:
        bad = [p for p in panels if p not in known] if isinstance(panels, list) else [panels]
        if bad:
            raise UserError(f"{where}: figure {f['id']!r}: unknown panel {bad[0]!r}: choose among "
                            f"{', '.join(sorted(known))}")
    against = f.get("against", [])
    for a in against if isinstance(against, list) else [None]:
        _check_keys(f"{where} figure {f['id']!r} against", a, AGAINST_KEYS)
        if not isinstance(a.get("x"), str) or not isinstance(a.get("y"), list) or not a["y"]:
            raise UserError(f"{where}: figure {f['id']!r}: write against = [{{ x = \"section.key\" or a metric, "
                            f"y = [\"time_to_target\", ...] }}]")
    return FigureGroup(f["id"], f["title"], str(f.get("cite", "")), str(f.get("text", "")).strip(), panels, against)


def load_experiment(paper: str) -> Experiment:
    from edgeml.config import read_toml

    path = find_experiment(paper)
    where = path.name
    doc = _check_keys(where, read_toml(path), TOP_KEYS)
    e = _check_keys(f"{where} [experiment]", doc.get("experiment", {}), EXPERIMENT_KEYS)
    runs = [_check_keys(f"{where} [[runs]]", r, RUN_KEYS) for r in doc.get("runs", [])]
    if not runs:
        raise UserError(f"{path}: no [[runs]]: add at least one with name and algorithm")
    for r in runs:
        if "algorithm" not in r:
            raise UserError(f"{path}: a [[runs]] entry has no algorithm: add algorithm = \"...\"")
        r.setdefault("name", r["algorithm"])
        if "seeds" in r:
            _seed_list(f"{where}: run {r['name']!r}: seeds", r["seeds"])
    names = [r["name"] for r in runs]
    if len(set(names)) != len(names):
        raise UserError(f"{path}: run names must be unique, got {', '.join(names)}: give each [[runs]] a name")
    figures = {}
    for raw in doc.get("figures", []):
        g = _figure_group(where, raw, set(panel_names()))
        if g.id in figures:
            raise UserError(f"{where}: two [[figures]] have id {g.id!r}: give each its own")
        figures[g.id] = g
    for r in runs:
        refs = r.get("figure", [])
        refs = [refs] if isinstance(refs, str) else refs
        if not isinstance(refs, list) or not all(isinstance(x, str) and x for x in refs):
            raise UserError(f"{where}: run {r['name']!r}: figure must be a figure id or a list of ids")
        for ref in refs:  # a title of its own: a group with every panel, in a folder named before the colon
            figures.setdefault(ref, FigureGroup(re.sub(r"[^a-z0-9]+", "-", ref.split(":", 1)[0].lower()), ref))
        r["figure"] = refs or [""]
    unused = [g for g in figures if not any(g in r["figure"] for r in runs)]
    if unused:
        raise UserError(f"{where}: no run is drawn in figure {unused[0]!r}: add figure = {unused[0]!r} to its runs")
    seeds = _seed_list(f"{path}: [experiment] seeds", e.get("seeds", [0]))
    quick_seeds = _seed_list(f"{path}: [experiment] quick_seeds", e["quick_seeds"]) if "quick_seeds" in e else None
    baseline = e.get("baseline", runs[0]["name"])
    claims = [parse_claim(c, where, baseline) for c in doc.get("claims", [])]
    return Experiment(path, str(e.get("paper", path.stem)), e.get("title", path.stem), e.get("description", ""),
                      seeds, quick_seeds, baseline, _targets(where, e), e.get("differences", ""),
                      doc.get("settings", {}), doc.get("quick", {}), runs, claims, figures)


def _sweep(spec: dict, quick: bool = False) -> list[tuple[str, dict]]:
    """(name, layer) per point of the run's sweep (its ``quick_sweep`` with ``quick``): the product over its keys."""
    sweep = (spec.get("quick_sweep") if quick else None) or spec.get("sweep") or {}
    for key, values in sweep.items():
        if key.count(".") < 1 or not isinstance(values, list) or not values:
            raise UserError(f"sweep key {key!r} of run {spec['name']!r}: write \"section.key\" = [values, ...]")
    points = []
    for values in itertools.product(*sweep.values()):
        layer: dict[str, dict] = {}
        for key, v in zip(sweep, values):
            section, name = key.split(".", 1)
            layer.setdefault(section, {})[name] = v
        tag = ",".join(f"{k}={fmt_value(v)}" for k, v in zip(sweep, values))
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
        run_seeds = seeds or spec.get("seeds", exp.seeds)
        if quick and exp.quick_seeds and not seeds:  # fewer seeds, never more than the run's own
            run_seeds = [s for s in exp.quick_seeds if s in run_seeds] or run_seeds[:1]
        for name, point in _sweep(spec, quick):
            for seed in run_seeds:
                run = {"algorithm": spec["algorithm"], "seed": seed, **({"backend": backend} if backend else {})}
                p = PlannedRun(name, spec["algorithm"], seed, merge(*layers, point, {"run": run}),
                               merge(*own, point), spec["figure"], spec["name"],
                               {f"{sec}.{k}": v for sec, kv in point.items() for k, v in kv.items()})
                try:
                    build_config(p.layers)
                except UserError as exc:
                    raise UserError(f"{exp.source.name}, run {name!r}: {exc}") from None
                planned.append(p)
    labels = {p.name for p in planned}
    # claims may name points of the full sweeps, which --quick may replace: they are then not measured
    named = labels | {name for spec in exp.runs for name, _ in _sweep(spec)}
    specs = {s["name"]: s for s in exp.runs}
    where = exp.source.name
    try:
        baseline_labels(sorted(labels), {p.name: p.algorithm for p in planned}, exp.baseline)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    for c in exp.claims:
        if c.kind == "trend":
            for name in filter(None, (c.run, c.baseline)):
                if name not in specs or len(specs[name].get("sweep") or {}) != 1:
                    swept = ", ".join(s for s in specs if specs[s].get("sweep"))
                    raise UserError(f"{where}: trend claim {c.text!r} names {name!r}: name a [[runs]] entry "
                                    f"with a sweep over one key ({swept})")
        elif c.run not in named and c.run not in specs:
            raise UserError(f"{where}: claim {c.text!r} names run {c.run!r}: choose one of {', '.join(sorted(labels))} "
                            f"(or a swept [[runs]] name, to check it at every point)")
        elif c.baseline and c.baseline not in named and (c.baseline not in specs or c.run in named) and \
                not ("[" in c.run and c.baseline + c.run[c.run.index("["):] in named):  # the same point
            points = sorted({p.name for p in planned if p.spec == c.baseline})
            raise UserError(f"{where}: claim {c.text!r} has baseline {c.baseline!r}: "
                            + (f"it is swept, name one of its points ({', '.join(points)})" if points else
                               f"choose one of {', '.join(sorted(labels))}"))
        if c.figure is not None and c.figure not in exp.figures:
            raise UserError(f"{where}: claim {c.text!r} names figure {c.figure!r}: choose one of "
                            f"{', '.join(exp.figures) or '(no [[figures]])'}")
    return planned


def _toml(layers: dict) -> str:
    import tomli_w

    return tomli_w.dumps(layers).strip() if layers else "(none)"


# ------------------------------------------------------------------------------------------ claims


def claim_targets(exp: Experiment, claim: Claim, cmp: Comparison) -> list[Target]:
    if not claim.on_target:
        return []
    headline = (exp.targets or cmp.targets)[0]
    rule = claim.rule or headline.rule
    if rule == "stopping":
        return [Target("loss", rule="stopping")]
    values = claim.targets or ([headline.value] if headline.rule != "stopping" else [])
    if not values:
        raise UserError(f"{exp.source.name}: claim {claim.text!r} needs targets: the experiment's rule is the "
                        "stopping rule, which has none")
    return [Target(headline.metric, v, rule) for v in values]


def check_claims(exp: Experiment, runs: list[Run], cmp: Comparison, planned: list[PlannedRun]) -> list[Result]:
    """Every claim at each of its targets, on the samples of the runs that finished; each result names the
    figure group it is reported in."""
    targets = {c: claim_targets(exp, c, cmp) for c in exp.claims}
    samples = claim_samples(runs, cmp.per_run, [c.metric for c in exp.claims],
                            list(dict.fromkeys(t for ts in targets.values() for t in ts)))
    return [replace(r, figure=claim_figure(exp, c, planned))
            for c in exp.claims for t in targets[c] or [None] for r in evaluate(c, samples, t.short if t else "")]


def claim_figure(exp: Experiment, claim: Claim, planned: list[PlannedRun]) -> str:
    """The figure group a claim is reported in: its own ``figure``, else its run's first group."""
    if claim.figure is not None:
        return claim.figure
    for p in planned:
        if p.name == claim.run or p.spec == claim.run:
            return p.figures[0]
    return ""


# ------------------------------------------------------------------------------------------ the report


VERDICT_NOTE = (f"Each claim is decided on the mean over seeds with a 95% bootstrap interval (pairs by seed for "
                f"comparisons; n = seeds). Measured effects: a reduction is 1 - run / baseline, a ratio baseline / run, "
                f"a difference baseline - run (so an accuracy difference above 0 means the run is less accurate). "
                f"*holds*: the interval lies on the paper's side and reaches the paper's "
                f"figure within {1 - HOLDS_SHARE:.0%}; *weaker* / *stronger*: on the paper's side but entirely "
                f"below / above it; *does not hold*: on the other side; *inconclusive*: the interval straddles no "
                f"effect, or a run never reached the target so only a bound is known (\"holds (>= x)\" only when the "
                f"bound alone proves it); *not resolved*: a time difference smaller than one evaluation interval "
                f"(the resolution column). Times to a target are taken where the loss *stays* below it for the rest "
                f"of the run (edgeml/convergence.py), unless a claim names another rule.")


def _claims_table(results: list[Result]) -> str:
    rows, last = [], None
    for r in results:
        rows.append(["" if r.claim == last else r.claim, r.paper, _at(r), str(r.n), r.measured, r.resolution,
                     f"**{r.verdict}**"])
        last = r.claim
    return md_table(["the paper says", "paper", "at", "n", "measured [95% CI]", "resolution", "verdict"], rows)


def _at(r: Result) -> str:
    """Where a result was measured: the sweep point and the target ("cluster.hetero=H=1.6; loss<=0.9")."""
    return "; ".join(filter(None, (r.at, r.target))) or "-"


def write_report(exp: Experiment, out: Path, cmp: Comparison | None, results: list[Result],
                 figures: dict[str, list[FigureFile]], planned: list[PlannedRun], done: list[PlannedRun],
                 failures: list[tuple[PlannedRun, str]], command_line: str, quick: bool, runs: list[Run]) -> Path:
    meta = runs[0].meta() if runs else {}
    shared = {k: v for k, v in planned[0].layers.items() if k != "run"} if planned else {}
    shared = {s: {k: v for k, v in vals.items() if all(p.layers.get(s, {}).get(k) == v for p in planned)}
              for s, vals in shared.items()}
    backend = sorted({p.layers.get("run", {}).get("backend", "procs") for p in planned})
    per_run = {p.name: (p.algorithm, p.extra, sorted({q.seed for q in planned if q.name == p.name}))
               for p in planned}
    note = ["> This is the **quick** reproduction: the description is the full experiment's; what the quick version "
            "changes is in the settings at the end of this report.", ""] if quick else []
    lines = [f"# {exp.title}", "", *note, exp.description.strip(), "", "## Verdicts", ""]
    if results:
        sections = {g: exp.figures[g].title if g else "Figures" for g in figures}
        lines += [md_table(["claim", "at", "verdict", "section"],
                            [[r.claim, _at(r), f"**{r.verdict}**",
                              _link(sections.get(r.figure or "", "Figures"))] for r in results]), "", VERDICT_NOTE, ""]
    else:
        lines += ["(the experiment file lists no claims)", ""]
    if failures:
        lines += ["## Failed runs", "", f"{len(failures)} of {len(planned)} runs failed; they are left out of every "
                  "table, figure and verdict below.", "",
                  md_table(["run", "seed", "reason"], [[p.name, str(p.seed), reason] for p, reason in failures]), ""]
    for gid, files in figures.items():
        g = exp.figures.get(gid)
        lines += [f"## {g.title if g else 'Figures'}", ""]
        if g and g.text:
            lines += [g.text, ""]
        members = list(dict.fromkeys(p.name for p in done if gid in p.figures))
        lines += ["Runs: " + ", ".join(f"`{m}`" for m in members) + ".", ""]
        mine = [r for r in results if (r.figure or "") == gid]
        if mine:
            lines += [_claims_table(mine), ""]
        for f in files:
            rel = f.png.relative_to(out).as_posix()
            lines += [f"**{f.caption}** ([PDF]({rel[:-4]}.pdf))", "", f"![{f.name}]({rel})", ""]
    if cmp is not None:
        lines += ["## Results", "", cmp.markdown(), "Full tables: [compare.csv](compare.csv), per run: "
                  "[compare_runs.csv](compare_runs.csv), every target: [compare_reach.csv](compare_reach.csv).", ""]
    lines += ["## How this was produced", "",
              f"`{command_line}` with edgeml {edgeml.__version__} (git {meta.get('git_sha') or 'unknown'}) on "
              f"{datetime.now(timezone.utc):%Y-%m-%d}: {len(planned)} runs, seeds "
              f"{', '.join(map(str, sorted({p.seed for p in planned})))}, backend {', '.join(backend)}. "
              f"Everything above is rebuilt from `runs/` by `edgeml compare` and `edgeml plot`.", "",
              "Settings shared by every run:", "", "```toml", _toml({k: v for k, v in shared.items() if v}), "```", "",
              md_table(["run", "algorithm", "seeds", "its own settings"],
                        [[n, a, ", ".join(map(str, s)),
                          "; ".join(f"{sec}.{k} = {fmt_value(v)}" for sec, kv in e.items() for k, v in kv.items())
                          or "-"] for n, (a, e, s) in per_run.items()]), "",
              "## Differences from the paper", "", exp.differences.strip() or "(none noted)", ""]
    if quick:
        reduced = "; ".join(f"{s}.{k} = {fmt_value(v)}" for s, kv in exp.quick.items() for k, v in kv.items())
        lines += [f"This is the **quick** reproduction (`--quick`), reduced to finish in minutes on 2 cores "
                  f"({reduced or 'no shared changes'}; plus each run's own quick settings above). Its numbers "
                  f"show the direction of each effect, not the paper's magnitudes; the full reproduction is "
                  f"`edgeml reproduce {exp.paper}`.", ""]
    path = out / "REPORT.md"
    path.write_text("\n".join(lines))
    return path


def _link(title: str) -> str:
    anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    return f"[{title.split(':', 1)[0]}](#{anchor})"


# ------------------------------------------------------------------------------------------ running


def _finished(path: Path, cfg, quick: bool) -> bool:
    """Whether ``path`` holds a finished run of exactly ``cfg`` from this reproduction (``--resume`` keeps it).

    The output folder itself (``run.out``) may differ: a reproduction can be continued from another place. A
    setting the run's ``config.toml`` lacks (one added to edgeml after the run) counts as the same where the new
    configuration keeps it at its default: a setting is added with the default that does what edgeml did
    before, so a reproduction spanning sessions keeps its finished runs."""
    from edgeml.config import build_config, read_toml
    from edgeml.metrics import _toml_safe

    def comparable(config: dict) -> dict:
        return {**config, "run": {k: v for k, v in config.get("run", {}).items() if k != "out"}}

    try:
        done = json.loads((path / "summary.json").read_text())
        tag = json.loads((path / "experiment.json").read_text())
        old, new = read_toml(path / "config.toml"), _toml_safe(cfg.to_dict())
        defaults = _toml_safe(build_config({"run": {"algorithm": cfg.run.algorithm}}).to_dict())
        for section, values in new.items():
            if isinstance(values, dict) and isinstance(old.get(section), dict):
                for key, value in values.items():
                    if key not in old[section] and defaults.get(section, {}).get(key) == value:
                        old[section][key] = value
        same = comparable(old) == comparable(new)
    except (OSError, ValueError, UserError):
        return False
    return same and tag.get("quick") == quick and done.get("status") in FINISHED


def _holds_finished_run(path: Path) -> bool:
    try:
        return json.loads((path / "summary.json").read_text()).get("status") in FINISHED
    except (OSError, ValueError):
        return False


def _prepare_out(out: Path, work: list[tuple[PlannedRun, Any, bool]], force: bool) -> None:
    """Refuse to clear a directory reproduce did not write, or to delete finished runs without ``force``.

    ``work``: (planned run, its config, whether it runs now)."""
    if out.exists() and not (out / "experiment.toml").exists() and {p.name for p in out.iterdir()} - {"quick"}:
        raise UserError(f"{out} exists and was not written by edgeml reproduce: choose a new or empty --out")
    doomed = [p.dirname for p, _, runs_now in work if runs_now and _holds_finished_run(out / "runs" / p.dirname)]
    if doomed and not force:
        raise UserError(f"{out / 'runs'} holds {len(doomed)} finished run(s) that this would delete and run again "
                        f"({', '.join(doomed[:3])}{', ...' if len(doomed) > 3 else ''}): add --resume to keep those "
                        "with the same configuration, or --force to run them again")
    out.mkdir(parents=True, exist_ok=True)


def select(only: str | None, planned: list[PlannedRun]) -> set[str]:
    """The directory names of the runs ``--only`` picks (every run without it): a run's exact name (a swept point
    such as ``sim-snap[cluster.workers=100]``, whose brackets a glob would read as a character class) is taken
    literally; anything else is a glob on the run's name and on its swept entry's name."""
    if not only:
        return {p.dirname for p in planned}
    if any(only in (p.name, p.spec) for p in planned):
        return {p.dirname for p in planned if only in (p.name, p.spec)}
    return {p.dirname for p in planned if fnmatch.fnmatchcase(p.name, only) or fnmatch.fnmatchcase(p.spec, only)}


def reproduce(paper: str, quick: bool = False, out: Path | None = None, seeds: list[int] | None = None,
              backend: str | None = None, console: Console | None = None, command_line: str = "",
              resume: bool = False, only: str | None = None, force: bool = False) -> Path:
    """Run every run of an experiment; write the tables, the figures and REPORT.md; return the output folder.

    With ``resume``, a run whose directory already holds a finished run of the same configuration is kept
    rather than run again. With ``only`` (a glob on run names), only the matching runs are run; the others are
    kept where they already finished and left out where they did not. A finished run is deleted (to run it
    again) only with ``force``. A run that fails is recorded in REPORT.md and the others go on; the call then
    raises RuntimeError after writing everything, so that scripts notice."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from edgeml.config import build_config, check_out
    from edgeml.runner import run as run_config

    console = console or wide_console(stderr=True)
    exp = load_experiment(paper)
    planned = plan(exp, quick, seeds, backend)
    selected = select(only, planned)
    if not selected:
        raise UserError(f"--only {only!r} matches no run of {exp.paper}: choose among "
                        f"{', '.join(dict.fromkeys(p.spec for p in planned))} (a swept entry's name picks all its "
                        "points; 'NAME[setting=value]' one of them)")
    out = Path(out) if out else Path("results") / exp.paper / ("quick" if quick else "")
    check_out(out, "--out")
    work = []
    for p in planned:
        cfg = build_config({**p.layers, "run": {**p.layers["run"], "name": p.dirname, "out": str(out / "runs")}})
        path = out / "runs" / p.dirname
        kept = (resume or p.dirname not in selected) and _finished(path, cfg, quick)
        work.append((p, cfg, p.dirname in selected and not kept))
    _prepare_out(out, work, force)
    shutil.copyfile(exp.source, out / "experiment.toml")
    stale = sorted({p.name for p in (out / "runs").glob("*") if p.is_dir()} - {p.dirname for p in planned}) \
        if (out / "runs").is_dir() else []
    if stale:
        console.print(f"{len(stale)} run directories in {out / 'runs'} are no run of this experiment (e.g. "
                      f"{stale[0]}): left alone, and left out of the tables", style="yellow", highlight=False,
                      markup=False)
    done: list[PlannedRun] = []  # the runs the tables cover: run now or kept
    failures: list[tuple[PlannedRun, str]] = []
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task(exp.paper, total=len(planned))
        for k, (p, cfg, runs_now) in enumerate(work, 1):
            progress.update(task, description=f"{exp.paper}: [cyan]{escape(p.name)}[/] ({p.algorithm}) seed {p.seed}")
            path = out / "runs" / p.dirname
            head = f"[{k}/{len(planned)}] {p.name} seed {p.seed}"
            progress.advance(task)
            if not runs_now and p.dirname not in selected and not _finished(path, cfg, quick):
                progress.console.print(f"{head}: not selected by --only and not run yet: left out", highlight=False,
                                       markup=False)
                continue
            if runs_now:
                shutil.rmtree(path, ignore_errors=True)
                try:
                    path = run_config(cfg, quiet=True, path=path)
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # noqa: BLE001 - one failed run must not end a reproduction of hours
                    failures.append((p, f"{type(exc).__name__}: {exc}"))
                    progress.console.print(f"{head}: FAILED: {exc}", style="red", highlight=False, markup=False)
                    continue
                finally:
                    if path.is_dir():
                        (path / "experiment.json").write_text(json.dumps(
                            {"paper": exp.paper, "run": p.name, "spec": p.spec, "point": p.point, "seed": p.seed,
                             "quick": quick}))
            s = json.loads((path / "summary.json").read_text())
            if s.get("status") not in FINISHED:
                failures.append((p, f"status {s.get('status')}: {s.get('stop_reason')}"))
                progress.console.print(f"{head}: FAILED: {s.get('status')} ({s.get('stop_reason')})", style="red",
                                       highlight=False, markup=False)
                continue
            acc = s.get("final_accuracy")
            progress.console.print(f"{head}{' (kept)' if not runs_now else ''}: "
                                   f"{'accuracy %.3f' % acc if acc is not None else 'no evaluation'}, "
                                   f"{s.get('total_steps')} steps ({s.get('stop_reason')})", highlight=False,
                                   markup=False)
            done.append(p)
        progress.update(task, description=f"{exp.paper}: tables, figures, report")
        # the old figures go only now: a reproduction stopped while it runs keeps its last report readable
        shutil.rmtree(out / "figures", ignore_errors=True)
        runs = load_runs([str(out / "runs" / p.dirname) for p in done]) if done else []
        cmp, results, figures = None, [], {}
        if runs:
            labels = [r.label for r in runs]
            try:  # with --only, the baseline may not have run yet: then the table has no speedups
                baseline_labels(labels, {r.label: r.summary["algorithm"] for r in runs}, exp.baseline)
                baseline = exp.baseline
            except UserError:
                baseline = None
            cmp = compare(runs, exp.targets or choose_targets(runs), baseline)
            cmp.write(out)
            for gid in dict.fromkeys(g for p in done for g in p.figures):  # figure groups, in the file's order
                names = {p.name for p in done if gid in p.figures}
                g = exp.figures.get(gid)
                figures[gid] = write_figures([r for r in runs if r.label in names],
                                             out / "figures" / (g.folder if g else ""), cmp,
                                             g.panels if g else None, g.against if g else (), g.cite if g else "")
            results = check_claims(exp, runs, cmp, planned)
        write_report(exp, out, cmp, results, figures, planned, done, failures,
                     command_line or f"edgeml reproduce {paper}" + (" --quick" if quick else ""), quick, runs)
    table = Table(title=f"{exp.paper}: claims ({'quick' if quick else 'full'} reproduction)")
    for h in ("claim", "at", "n", "measured [95% CI]", "verdict"):
        table.add_column(h, overflow="fold")
    for r in results:
        style = {"holds": "green", "weaker": "yellow", "stronger": "yellow"}.get(r.verdict.split(" (")[0], "red")
        table.add_row(escape(r.claim), escape(_at(r)), str(r.n), escape(r.measured), f"[{style}]{escape(r.verdict)}[/]")
    console.print(*(cmp.rich() if cmp else []), table)
    if failures:
        raise RuntimeError(f"{len(failures)} of {len(planned)} runs failed (reasons in {out / 'REPORT.md'}); the "
                           "other runs, tables and figures are written")
    return out

