"""Rendering a reproduction from its finished runs: the comparison tables (``compare*.csv``, ``compare.md``), the
figures of each figure group, the claims' verdicts (read by ``edgeml.analysis.readings``) and ``REPORT.md``. It
reads the run directories only (``edgeml.analysis``), so the same runs render the same report wherever the folder
lies; only the date in "How this was produced" is the day it renders (``today``). Layout only: what a claim
reads is decided in ``edgeml.analysis``.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from rich.markup import escape
from rich.table import Table

import edgeml
from edgeml.analysis import placeholders
from edgeml.analysis.compare import Comparison, baseline_labels, choose_targets, compare
from edgeml.analysis.ledger import claim_lines, ledger_lines
from edgeml.analysis.tables import md_table
from edgeml.analysis.claims import CAUSES, HEADLINE_SEEDS
from edgeml.analysis.readings import check_claims, diagnosis_cause, undiagnosed
from edgeml.analysis.verdicts import (FAR, HEADLINE_MARK, HOLDS_SHARE, VERDICT_FIELDS, Result, owes_diagnosis,
                                     verdict_row)
from edgeml.errors import UserError
from edgeml.schema import COMMON_SECTIONS
import edgeml.reproduce.tuning as tuning
from edgeml.reproduce.load import Experiment
from edgeml.reproduce.plan import PlannedRun
from edgeml.rundir import CLASS_ACCURACY, Run, diverged, eval_column, flat_config, fmt_value, load_runs, warn

if TYPE_CHECKING:  # the figures (matplotlib, seaborn: seconds to import) load only when a report draws them
    from edgeml.analysis.figures import FigureFile

VERDICT_NOTE = (f"Each claim is decided on the mean over seeds with a 95% bootstrap interval (pairs by seed for "
                f"comparisons; n = seeds), and each effect is said in words beside its number. "
                f"*holds*: the interval lies on the paper's side and reaches the paper's "
                f"figure within {1 - HOLDS_SHARE:.0%}; *weaker* / *stronger*: on the paper's side but entirely "
                f"below / above it; *does not hold*: on the other side, or entirely short of the paper's figure "
                f"without lying on its side (the figure is excluded, whatever the effect's sign); *inconclusive*: "
                f"the interval straddles no effect and reaches the paper's figure, "
                f"or a run never reached the target so only a bound is known (\"holds (>= x)\" only when the "
                f"bound alone proves it), or too few seeds decided it: one seed never decides a claim "
                f"(\"inconclusive (one seed)\"), and a headline claim (**H**, the paper's abstract and conclusions) "
                f"needs {HEADLINE_SEEDS} (\"inconclusive (3 of {HEADLINE_SEEDS} seeds)\", with what those seeds read); "
                f"*not resolved*: a time difference smaller than one evaluation interval (the resolution column), "
                f"unless the paper's figure lies beyond it by more than that interval (then *does not hold*). "
                f"A claim that does not read holds carries a diagnosis, a *stronger* one once its interval lies "
                f"beyond {FAR:g}x the paper's figure (or below 1/{FAR:g} of it). "
                f"Times to a target are taken where the metric *stays* at or beyond it for the rest of the run "
                f"(edgeml/analysis/convergence.py), unless a claim names another rule; where the first reach of the "
                f"target tells a different story (by more than one evaluation interval), it is shown beside.")


@dataclass
class Report:
    """What REPORT.md is written from."""

    exp: Experiment
    out: Path
    planned: list[PlannedRun]
    done: list[PlannedRun]  # the runs that finished (run now or kept): the tables cover these
    failures: list[tuple[PlannedRun, str]]
    command_line: str
    quick: bool
    runs: list[Run] = field(default_factory=list)  # the done runs' directories, loaded
    cmp: Comparison | None = None
    results: list[Result] = field(default_factory=list)
    figures: dict[str, list[FigureFile]] = field(default_factory=dict)  # per figure group, in the file's order
    processes: int = 1  # the figures are drawn in this many processes side by side
    pdf: bool = False  # each figure as a PDF beside its PNG, and REPORT.md links it


def today() -> date:
    """The day a report is rendered (UTC), which "How this was produced" states."""
    return datetime.now(timezone.utc).date()


def render(report: Report) -> Report:
    """Tables, figures, verdicts and REPORT.md in ``report.out`` from the done runs; returns ``report`` filled."""
    out, exp = report.out, report.exp
    # the old figures go only now: a reproduction stopped while it runs keeps its last report readable
    shutil.rmtree(out / "figures", ignore_errors=True)
    report.runs = load_runs([str(out / "runs" / p.dirname) for p in report.done]) if report.done else []
    names = exp.run_names()
    for r in report.runs:  # what figures call them: the experiment's label for the entry, else the algorithm's name
        r.name = names.get(r.spec, "")
    if report.runs:
        report.cmp = compare(report.runs, exp.targets or choose_targets(report.runs), _baseline(exp, report.runs))
        report.cmp.write(out)
        report.figures = draw_figures(exp, out, report.done, report.runs, report.cmp, report.processes, report.pdf)
        report.results = check_claims(exp, report.runs, report.cmp, report.planned)
    write_report(report)
    write_verdicts(report)
    return report


VERDICTS = "verdicts.csv"
"""Every claim's result, one row each, beside REPORT.md: what the scoreboard (``edgeml.reproduce.summary``)
is rendered from."""
VERDICT_COLUMNS = ["claim", "headline", "at", "paper", "words", "measured", *VERDICT_FIELDS, "cause", "section"]
"""The claim's text, then its verdict's typed fields (``edgeml.analysis.verdicts.verdict_row``; ``verdict`` is
its kind), then its diagnosis's cause and the report's section."""


def write_verdicts(report: Report) -> Path:
    """``verdicts.csv``: each result of REPORT.md's verdicts table, its verdict as data, with its claim's
    diagnosis cause."""
    import csv

    claims = {c.text: c for c in report.exp.claims}
    titles = {g: report.exp.figures[g].title if g in report.exp.figures else "Figures" for g in report.figures}
    path = report.out / VERDICTS
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(VERDICT_COLUMNS)
        for x in report.results:
            w.writerow([x.claim, int(x.headline), x.where, x.paper, x.words, x.measured,
                        *verdict_row(x.decision).values(), diagnosis_cause(claims.get(x.claim), x),
                        titles.get(x.figure or "", "")])
    return path


def _baseline(exp: Experiment, runs: list[Run]) -> str | None:
    """The experiment's baseline, or None where none of its runs finished (with --only, it may not have run
    yet): the table then has no speedups."""
    try:
        baseline_labels([r.label for r in runs], {r.label: r.summary["algorithm"] for r in runs}, exp.baseline)
    except UserError:
        return None
    return exp.baseline


def draw_figures(exp: Experiment, out: Path, done: list[PlannedRun], runs: list[Run], cmp: Comparison,
                 processes: int = 1, pdf: bool = False) -> dict[str, list[FigureFile]]:
    """Each figure group's figures in ``figures/<group>/`` (PNG; and PDF: ``pdf``), groups in the file's order;
    every group's figures drawn side by side in ``processes`` processes (``edgeml.analysis.figures.draw``)."""
    from edgeml.analysis.figures import draw, plan_figures

    pending = {}
    for gid in dict.fromkeys(g for p in done for g in p.figures):
        names = {p.name for p in done if gid in p.figures}
        g = exp.figures.get(gid)
        against = [{"x": a.x, "y": a.y} for a in g.against] if g else ()
        folder = out / "figures" / (g.folder if g else "")
        folder.mkdir(parents=True, exist_ok=True)
        pending[gid] = plan_figures([r for r in runs if r.label in names], folder, cmp, g.panels if g else None,
                                    against, g.cite if g else "", exp.labels, pdf)
    draw([f for fs in pending.values() for f in fs], processes)
    return {gid: [f.file for f in fs] for gid, fs in pending.items()}


# ------------------------------------------------------------------------------------------ claims


def claims_table(exp: Experiment, quick: bool, results: list[Result]) -> Table:
    """The verdicts for the terminal."""
    table = Table(title=f"{exp.paper}: claims ({'quick' if quick else 'full'} reproduction)")
    for h in ("claim", "at", "n", "measured [95% CI]", "verdict"):
        table.add_column(h, overflow="fold")
    for r in results:
        style = {"holds": "green", "weaker": "yellow", "stronger": "yellow"}.get(r.kind, "red")
        measured = f"{r.words}\n{r.measured}" if r.words else r.measured
        table.add_row(escape(r.claim), escape(r.where), str(r.n), escape(measured),
                      f"[{style}]{escape(r.verdict)}[/]")
    return table


# ------------------------------------------------------------------------------------------ REPORT.md


def write_report(report: Report) -> Path:
    """REPORT.md: the verdicts, the failed runs, one section per figure group, the results table, how it was
    produced, the differences from the paper."""
    lines = [*_opening(report), *ledger_lines(report.exp.ledger, lambda t: _prose(report, t)), *_verdicts(report),
             *_failed(report), *_figure_sections(report), *_results(report), *_produced(report), *_differences(report)]
    path = report.out / "REPORT.md"
    path.write_text("\n".join(lines))
    return path


def _opening(r: Report) -> list[str]:
    note = ["> This is the **quick** reproduction: the description is the full experiment's; what the quick version "
            "changes is in the settings at the end of this report.", ""] if r.quick else []
    ran, missing = what_ran(r.runs), not_run(r)
    return [f"# {r.exp.title}", "", *note, _prose(r, r.exp.description).strip(), "",
            *([f"**What ran** (read from the runs behind this report): {ran}.", ""] if ran else []),
            *([f"**Not run yet**: {sum(len(s) for s in missing.values())} of the {len(r.planned)} planned runs, "
               + "; ".join(f"`{name}` seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}"
                           for name, s in missing.items())
               + ". The claims on them read not measured, or are decided on the seeds that ran; `--resume` runs "
               "the rest.", ""] if missing else [])]


def not_run(r: Report) -> dict[str, list[int]]:
    """The planned runs that neither finished nor failed (a report rendered while its experiment is under
    way): their seeds by run name, in the plan's order."""
    ended = {p.dirname for p in r.done} | {p.dirname for p, _ in r.failures}
    missing: dict[str, list[int]] = {}
    for p in r.planned:
        if p.dirname not in ended:
            missing.setdefault(p.name, []).append(p.seed)
    return missing


def what_ran(runs: list[Run]) -> str:
    """The runs' set-ups as they were made, by backend: "17 runs on the sim backend: digits with mlp, 6
    workers" (so a quick report says what its runs were, whatever the description says of the paper's)."""
    groups: dict[str, dict[str, set]] = {}
    counts: dict[str, int] = {}
    for run in runs:
        s = run.summary
        backend = s.get("backend", "procs")
        g = groups.setdefault(backend, {"data": set(), "workers": set()})
        g["data"].add(f"{s['dataset']} with {s['model']}")
        g["workers"].add(int(s["workers"]))
        counts[backend] = counts.get(backend, 0) + 1
    parts = []
    for backend, g in groups.items():
        w = sorted(g["workers"])
        workers = f"{w[0]} workers" if len(w) == 1 else f"{', '.join(map(str, w[:-1]))} or {w[-1]} workers"
        parts.append(f"{counts[backend]} runs on the {backend} backend: {', '.join(sorted(g['data']))}, {workers}")
    return "; ".join(parts)


def _verdicts(r: Report) -> list[str]:
    if not r.results:
        return ["## Verdicts", "", "(the experiment file lists no claims)", ""]
    sections = {g: r.exp.figures[g].title if g else "Figures" for g in r.figures}
    rows = [[(HEADLINE_MARK if x.headline else "") + x.claim, x.where, x.words or x.measured,
             f"**{x.verdict}**", _link(sections.get(x.figure or "", "Figures"))] for x in r.results]
    return ["## Verdicts", "", *_counts(r), md_table(["claim", "at", "ours", "verdict", "section"], rows), "",
            VERDICT_NOTE, ""]


def _counts(r: Report) -> list[str]:
    """The line at the top of a report: how many results read each verdict, and how many await a diagnosis."""
    counts = Counter(x.kind for x in r.results)
    waiting = len(undiagnosed(r.exp.claims, r.results))
    headline = sum(x.headline for x in r.results)
    return [f"**{len(r.results)} results** ({headline} on headline claims): "
            + ", ".join(f"{n} {k}" for k, n in counts.items()) + "; " + waiting_text(waiting) + ".", ""]


def waiting_text(waiting: int) -> str:
    """How many results await a diagnosis, in words that name the missing diagnosis only where one is missing."""
    return f"**{waiting} not yet diagnosed**" if waiting else "**every diagnosis owed is given**"


def _link(title: str) -> str:
    anchor = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
    return f"[{title.split(':', 1)[0]}](#{anchor})"


def _failed(r: Report) -> list[str]:
    if not r.failures:
        return []
    return ["## Failed runs", "", f"{len(r.failures)} of {len(r.planned)} runs failed; they are left out of every "
            "table, figure and verdict below.", "",
            md_table(["run", "seed", "reason"], [[p.name, str(p.seed), reason] for p, reason in r.failures]), ""]


def _figure_sections(r: Report) -> list[str]:
    lines = []
    for gid, files in r.figures.items():
        g = r.exp.figures.get(gid)
        lines += [f"## {g.title if g else 'Figures'}", ""]
        if g and g.text:
            lines += [_prose(r, g.text), ""]
        members = list(dict.fromkeys(p.name for p in r.done if gid in p.figures))
        lines += ["Runs: " + ", ".join(f"`{m}`" for m in members) + ".", ""]
        mine = [x for x in r.results if (x.figure or "") == gid]
        if mine:
            lines += [_claims_table(mine), "", *_notes(r, mine), *_claim_lines(r, mine)]
        if g and g.settled:
            lines += _settled(r, g.settled, set(members))
        lines += _tuning(r, [spec for spec in r.exp.runs if spec.tunes and spec.name in
                             {p.spec for p in r.done if gid in p.figures}])
        if g and g.per_class:
            lines += _per_class(r, members)
        for f in files:
            rel = f.png.relative_to(r.out).as_posix()
            link = f" ([PDF]({rel[:-4]}.pdf))" if f.pdf else ""
            lines += [f"**{f.caption}**{link}", "", f"![{f.name}]({rel})", ""]
    return lines


def _settled(r: Report, settled: dict, members: set[str]) -> list[str]:
    """``[[figures]] settled``: what each run that searched a value online settled on, beside the group's best
    fixed value (the least mean time to the target over its seeds; a value with a censored seed counts as
    never reaching it), and how far its own time lies from that mean, in evaluation intervals."""
    from edgeml.analysis.convergence import Target, reach_run

    decision, key = settled["decision"], settled["fixed"]
    runs = [x for x in r.runs if x.label in members]
    target = r.cmp.target if r.cmp is not None else None
    if target is not None and settled.get("rule"):
        target = Target(target.metric, target.value, settled["rule"])

    def time(x: Run) -> float:
        if target is None:
            return math.nan
        at = reach_run(x, target)
        return math.inf if at.censored else at.time_s

    def fixed(x: Run) -> float:
        return float(flat_config(x).get(key) or 0)

    def world(x: Run) -> str:  # the setting a run searched or fixed the value in: its common config sections
        flat = flat_config(x)
        return json.dumps({k: v for k, v in flat.items() if k.split(".")[0] in COMMON_SECTIONS
                           and k.split(".")[0] != "run"}, sort_keys=True, default=str)

    by_value: dict[str, dict[float, list[dict]]] = {}
    for x in runs:
        if fixed(x) > 0:
            by_value.setdefault(world(x), {}).setdefault(fixed(x), []).append(
                {"time_to_target": time(x), "censored": time(x) == math.inf})
    means = {w: {v: tuning.score(rows, "time_to_target") for v, rows in values.items()}  # NaN where one is unmeasured
             for w, values in by_value.items()}
    best = {w: tuning.best(m, "time_to_target") for w, m in means.items()}
    from edgeml.algorithms import REGISTRY

    def searches(x: Run) -> bool:  # the run's algorithm decides the value, and this run does not fix it
        spec = REGISTRY.get(str(x.summary.get("algorithm")))
        return fixed(x) == 0 and spec is not None and decision in spec.decisions

    searched = [x for x in runs if searches(x)]
    if not searched:
        return []

    def last(x: Run) -> str:  # a run that never decided it (its first search still going at the end): "none"
        v = x.last_decided(decision)
        return "none" if v is None else f"{v:.4g}"

    def mean(x: Run) -> str:
        v = x.decided(decision)
        return "-" if v is None else f"{v:.4g}"

    def secs(t: float) -> str:
        return "never" if t == math.inf else "-" if math.isnan(t) else f"{t:.0f} s"

    def best_text(x: Run) -> str:
        b = best.get(world(x))
        return "-" if b is None else f"{b:g} ({secs(means[world(x)][b])})"

    def behind(x: Run) -> str:  # the run's time less the best fixed value's mean, in evaluation intervals
        interval = float(x.evals["time_s"].diff().median()) if len(x.evals) > 1 else math.nan
        b = best.get(world(x))
        gap = time(x) - means[world(x)][b] if b is not None else math.nan
        return "-" if not math.isfinite(gap) or not interval > 0 else f"{gap / interval:+.1f}"

    rows = [[x.label, str(x.seed), last(x), mean(x), secs(time(x)), best_text(x), behind(x)] for x in searched]
    what = f"time to {target.short if target.rule == 'stopping' else target}" if target else "time to the target"
    return [f"What each run that searched its `{decision}` online settled on (the last value it decided), beside "
            f"the best of this group's runs that fix it in the same setting (`{key}`; the least mean {what} over "
            "their seeds), and how many evaluation intervals the searched run's time lies behind that mean (+) or "
            "ahead of it (-):", "",
            md_table(["run", "seed", "settled on", "mean over the run", what, "best fixed (its mean time)",
                      "behind (intervals)"], rows), ""]


def _tuning(r: Report, specs: list) -> list[str]:
    """``[[runs]] tunes``: each tuning entry's choice per setting beside what the runs it tunes use; a full
    reproduction warns of a tuned run that uses another value (``edgeml.reproduce.tuning``)."""
    if r.cmp is None:
        return []
    lines = []
    for spec in specs:
        found = tuning.choices(spec, r.done, r.planned, r.cmp.per_run, r.cmp.target.metric,
                               {(x.label, x.seed) for x in r.runs if diverged(x.summary)})
        lines += tuning.table(spec, found, str(r.cmp.target), r.quick)
        for c in [] if r.quick else [c for c in found if not c.pending]:
            for name in c.differs():
                where = ", ".join(f"{k}={fmt_value(v)}" for k, v in c.setting.items())
                warn(f"{spec.name} chooses {spec.tunes['key']} = {fmt_value(c.chosen)}"
                     f"{' at ' + where if where else ''}, but {name} uses {spec.tunes['runs'][name]} = "
                     f"{', '.join(fmt_value(v) for v in c.used[name])}: write the choice into its points")
    return lines


def _per_class(r: Report, members: list[str]) -> list[str]:
    """``[[figures]] per_class``: each run's accuracy per class at its last evaluation, the mean over its seeds
    (runs that did not record it, ``eval.per_class``, are left out)."""
    rows, width = [], 0
    for name in members:
        finals = []
        for x in r.runs:
            if x.label != name:
                continue
            last = x.evals.iloc[-1]
            classes = sorted((int(k[len(CLASS_ACCURACY):]), k) for k in last.index
                             if k.startswith(CLASS_ACCURACY) and eval_column(k))
            if classes:
                finals.append([float(last[k]) for _, k in classes] + [float(last["accuracy"])])
        if finals:
            mean = np.nanmean(np.array(finals), axis=0)
            width = max(width, len(mean) - 1)
            rows.append([name, str(len(finals)), *(f"{v:.3f}" for v in mean)])
    if not rows:
        return []
    return ["Final accuracy per class (the last evaluation, mean over seeds):", "",
            md_table(["run", "seeds", *(f"class {k}" for k in range(width)), "all"], rows), ""]


def _claims_table(results: list[Result]) -> str:
    rows, last = [], None
    for r in results:
        verdict = f"**{r.verdict}**" + (f": reads {r.provisional} on these" if r.provisional else "")
        rows.append(["" if r.claim == last else (HEADLINE_MARK if r.headline else "") + r.claim, r.paper,
                     r.where, str(r.n), r.words or "-", r.measured, r.resolution, verdict])
        last = r.claim
    return md_table(["the paper says", "paper", "at", "n", "ours, in words", "measured [95% CI]", "resolution",
                     "verdict"], rows)


def _notes(report: Report, results: list[Result]) -> list[str]:
    """Under a section's claims table: where the other arrival rule reads differently, where the seeds disagree
    (``seeds_apart``), and the diagnosis of each claim that does not read holds (its cause, how, the ablations'
    measured effects), or that it has none."""
    lines = [f"- *{x.claim}* ({x.where}), {x.other_rule}." for x in results if x.other_rule]
    lines += [f"- *{x.claim}*{f' ({x.where})' if x.at or x.target else ''}: the seeds disagree: {x.seeds_apart}."
              for x in results if x.seeds_apart]
    claims = {c.text: c for c in report.exp.claims}
    owing = list(dict.fromkeys(x.claim for x in results if owes_diagnosis(x.decision)))
    for text in owing:
        d = claims[text].diagnosis if text in claims else None
        if d is None:
            lines.append(f"- *{text}*: **not yet diagnosed**.")
            continue
        lines.append(f"- *{text}*: **{CAUSES[d.cause]}**: {_prose(report, d.text)}")
        lines += _ablation_lines([x for x in results if x.claim == text])
    return lines + [""] if lines else []


def _ablation_lines(results: list[Result]) -> list[str]:
    """One line per distinct reading of each ablation of a claim (``results``: the claim's, one per sweep point
    and target); where an ablation reads differently at the claim's points or targets, each line says where."""
    where: dict[tuple, list[str]] = {}
    for r in results:
        for run, measured, verdict in r.ablations:
            a = (run, measured, str(verdict))  # a reading is its words (a verdict's NaNs never compare equal)
            where.setdefault(a, [])
            if r.where not in where[a]:
                where[a].append(r.where)
    readings = Counter(run for run, _, _ in where)
    order = list(readings)  # each ablation's readings together, in the order the ablations first read
    lines = []
    for (run, measured, verdict), ats in sorted(where.items(), key=lambda kv: order.index(kv[0][0])):
        at = f" at {', '.join(ats)}" if readings[run] > 1 else ""
        lines.append(f"  - ablation `{run}`{at}: {measured} ({verdict} with it in the claim's place).")
    return lines


def _results(r: Report) -> list[str]:
    if r.cmp is None:
        return []
    return ["## Results", "", r.cmp.markdown(), "Full tables: [compare.csv](compare.csv), per run: "
            "[compare_runs.csv](compare_runs.csv), every target: [compare_reach.csv](compare_reach.csv).", ""]


def _produced(r: Report) -> list[str]:
    """The command, version, git SHA of the runs, date, runs and seeds; the settings shared by every run and
    each run's own."""
    planned = r.planned
    meta = r.runs[0].meta() if r.runs else {}
    backend = sorted({p.layers.get("run", {}).get("backend", "procs") for p in planned})
    per_run = {p.name: (p.algorithm, p.extra, sorted({q.seed for q in planned if q.name == p.name})) for p in planned}
    return ["## How this was produced", "",
            f"`{r.command_line}` with edgeml {edgeml.__version__} (git {meta.get('git_sha') or 'unknown'}) on "
            f"{today():%Y-%m-%d}: {len(planned)} runs{_not_run_count(r)}, seeds "
            f"{', '.join(map(str, sorted({p.seed for p in planned})))}, backend {', '.join(backend)}. "
            f"Everything above is rebuilt from `runs/` by `edgeml compare` and `edgeml plot`.", "",
            "Settings shared by every run:", "", "```toml", _toml(_shared(planned)), "```", "",
            md_table(["run", "algorithm", "seeds", "its own settings"],
                     [[n, a, ", ".join(map(str, s)),
                       "; ".join(f"{sec}.{k} = {fmt_value(v)}" for sec, kv in e.items() for k, v in kv.items())
                       or "-"] for n, (a, e, s) in per_run.items()]), ""]


def _not_run_count(r: Report) -> str:
    n = sum(len(s) for s in not_run(r).values())
    return f" ({n} not run yet)" if n else ""


def _shared(planned: list[PlannedRun]) -> dict:
    """The config keys (outside [run]) every planned run sets to the same value, by section."""
    shared = {k: v for k, v in planned[0].layers.items() if k != "run"} if planned else {}
    shared = {s: {k: v for k, v in vals.items() if all(p.layers.get(s, {}).get(k) == v for p in planned)}
              for s, vals in shared.items()}
    return {k: v for k, v in shared.items() if v}


def _toml(layers: dict) -> str:
    import tomli_w

    return tomli_w.dumps(layers).strip() if layers else "(none)"


def _prose(r: Report, text: str) -> str:
    """The experiment's prose with its measured numbers filled from the runs (``edgeml.analysis.placeholders``)."""
    return placeholders.fill(text, r.cmp.per_run if r.cmp is not None else None, {p.name: p.spec for p in r.planned})


def _claim_lines(r: Report, results: list[Result]) -> list[str]:
    """Under a section's notes: each claim's own reading in the paper, and the departures its runs carry."""
    claims = {c.text: c for c in r.exp.claims}
    lines = []
    for text in dict.fromkeys(x.claim for x in results):
        c = claims.get(text)
        if c is not None:
            runs = [p.layers for p in r.planned if {p.name, p.spec} & {c.run, c.baseline}]
            lines += claim_lines(c, r.exp.ledger, runs, lambda t: _prose(r, t))
    return lines + [""] if lines else []


def _differences(r: Report) -> list[str]:
    lines = ["## Differences from the paper", "", _prose(r, r.exp.differences).strip() or "(none noted)", ""]
    if r.quick:
        reduced = "; ".join(f"{s}.{k} = {fmt_value(v)}" for s, kv in r.exp.quick.items() for k, v in kv.items())
        lines += [f"This is the **quick** reproduction (`--quick`), reduced to finish in minutes on 2 cores "
                  f"({reduced or 'no shared changes'}; plus each run's own quick settings above). Its numbers "
                  f"show the direction of each effect, not the paper's magnitudes; the full reproduction is "
                  f"`edgeml reproduce {r.exp.paper}`.", ""]
    return lines
