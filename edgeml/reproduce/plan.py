"""Planning: an experiment becomes its planned runs, one per (run, sweep point, seed), each with its merged
config layers, validated up front (so a bad file fails before anything runs), and ``--only``'s selection of
them. Nothing here runs or writes anything.

Layers merge in this order, later winning key by key: settings, run config, quick, run quick, sweep values,
the run's layer for that point (``points``: a value tuned per setting; full runs only), then
``run.algorithm``/``run.seed`` (and ``--backend``).

A sweep key in the section ``algorithm`` names the run's own algorithm's key: ``"algorithm.lr" = [0.01, 0.1]``
sweeps ``asgd.lr`` in an ASGD run and ``adacomp.lr`` in an AdaComp run, and every run's points carry the same
name (``[algorithm.lr=0.1]``), so runs of different methods at one shared value pair as a claim's run and
baseline (AdaComp's methods at one shared learning rate, as its paper runs them).
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from edgeml.analysis.compare import baseline_labels
from edgeml.errors import UserError
from edgeml.reproduce.load import ALGORITHM_SECTION, Experiment, RunSpec, algorithm_section
from edgeml.rundir import fmt_value


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
    cfg: Any = None  # its validated edgeml.schema.Config (run.out and run.name not set yet)

    @property
    def dirname(self) -> str:
        return re.sub(r"[^\w.=+-]+", "_", self.name).strip("_") + f"-s{self.seed}"


def sweep_points(spec: RunSpec, quick: bool = False) -> list[tuple[str, dict]]:
    """(name, layer) per point of the run's sweep (its ``quick_sweep`` with ``quick``): the product over its keys."""
    sweep = (spec.quick_sweep if quick else None) or spec.sweep or {}
    for key, values in sweep.items():
        if key.count(".") < 1 or not isinstance(values, list) or not values:
            raise UserError(f"sweep key {key!r} of run {spec.name!r}: write \"section.key\" = [values, ...]")
    own = (algorithm_section(spec.algorithm) or spec.algorithm) if spec.algorithm else ALGORITHM_SECTION
    points = []
    for values in itertools.product(*sweep.values()):
        layer: dict[str, dict] = {}
        for key, v in zip(sweep, values):
            section, name = key.split(".", 1)
            layer.setdefault(own if section == ALGORITHM_SECTION else section, {})[name] = v
        tag = ",".join(f"{k}={fmt_value(v)}" for k, v in zip(sweep, values))
        points.append((f"{spec.name}[{tag}]" if sweep else spec.name, layer))
    return points


def _tag(name: str) -> str:
    """A point's tag, its run name's bracket: "fig5[cluster.hetero=H=2]" -> "cluster.hetero=H=2"."""
    return name[name.index("[") + 1:-1] if name.endswith("]") and "[" in name else ""


def plan(exp: Experiment, quick: bool = False, seeds: list[int] | None = None,
         backend: str | None = None) -> list[PlannedRun]:
    """Every (run, sweep point, seed) of the experiment with its merged config layers, validated up front."""
    planned = [p for spec in exp.runs for p in _plan_spec(exp, spec, quick, seeds, backend)]
    _check_names(exp, planned)
    ran = {algorithm_section(p.algorithm) for p in planned}
    idle = [s for s in exp.settings if algorithm_section(s) and algorithm_section(s) not in ran]
    if idle:
        raise UserError(f"{exp.source.name}: [settings] {idle[0]} names an algorithm no run of the experiment runs: "
                        f"give each algorithm's defaults under its own name ({', '.join(sorted(ran))})")
    for gid, g in exp.figures.items():  # a group that lists its runs draws only those of its members
        if g.runs is not None:
            picked = select(g.runs, planned)
            for p in planned:
                if gid in p.figures and p.dirname not in picked:
                    p.figures = [f for f in p.figures if f != gid]
    return planned


def _plan_spec(exp: Experiment, spec: RunSpec, quick: bool, seeds: list[int] | None,
               backend: str | None) -> list[PlannedRun]:
    from edgeml.config import build_config, merge

    own = [spec.config] + ([spec.quick] if quick else [])
    mine = algorithm_section(spec.algorithm)
    settings = {s: v for s, v in exp.settings.items() if algorithm_section(s) in (None, mine)}
    layers = [settings, own[0]] + ([exp.quick, own[1]] if quick else [])
    run_seeds = seeds or spec.seeds or exp.seeds
    if quick and spec.quick_seeds and not seeds:  # the run's own quick seeds
        run_seeds = spec.quick_seeds
    elif quick and exp.quick_seeds and not seeds:  # fewer seeds, never more than the run's own
        run_seeds = [s for s in exp.quick_seeds if s in run_seeds] or run_seeds[:1]
    planned = []
    tags = {_tag(name): name for name, _ in sweep_points(spec)}
    for tag, layer in (spec.points or {}).items():
        if tag not in tags:
            raise UserError(f"{exp.source.name}, run {spec.name!r}: points names {tag!r}, which is no point of its "
                            f"sweep: name one of {', '.join(repr(t) for t in tags) or 'none (it has no sweep)'}")
        if not isinstance(layer, dict):
            raise UserError(f"{exp.source.name}, run {spec.name!r}: points.{tag!r} must be a table of settings, "
                            f"e.g. {{ adacomm = {{ tau0 = 4 }} }}")
    own_keys = {f"{mine or spec.algorithm}.{k.split('.', 1)[1]}": k  # "asgd.lr" -> "algorithm.lr", as named
                for k in (spec.quick_sweep if quick else None) or spec.sweep or {}
                if k.split(".", 1)[0] == ALGORITHM_SECTION}
    for name, point in sweep_points(spec, quick):
        extra = {} if quick else (spec.points or {}).get(_tag(name), {})  # --quick: the run's quick layer instead
        for seed in run_seeds:
            run = {"algorithm": spec.algorithm, "seed": seed, **({"backend": backend} if backend else {})}
            flat = {own_keys.get(f"{sec}.{k}", f"{sec}.{k}"): v for sec, kv in point.items() for k, v in kv.items()}
            p = PlannedRun(name, spec.algorithm, seed, merge(*layers, point, extra, {"run": run}),
                           merge(*own, point, extra), spec.figure, spec.name, flat)
            try:
                p.cfg = build_config(p.layers, paths=False)  # paths: once, for the runs that start (execute)
            except UserError as exc:
                raise UserError(f"{exp.source.name}, run {name!r}: {exc}") from None
            planned.append(p)
    return planned


def _check_names(exp: Experiment, planned: list[PlannedRun]) -> None:
    """The baseline and every claim name runs (or swept entries) the plan has, and figures the file has."""
    labels = {p.name for p in planned}
    # claims may name points of the full sweeps, which --quick may replace: they are then not measured
    named = labels | {name for spec in exp.runs for name, _ in sweep_points(spec)}
    specs = {s.name: s for s in exp.runs}
    where = exp.source.name
    try:
        baseline_labels(sorted(labels), {p.name: p.algorithm for p in planned}, exp.baseline)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    for c in exp.claims:
        if c.kind == "trend":
            for name in filter(None, (c.run, c.baseline)):
                if name not in specs or len(specs[name].sweep or {}) != 1:
                    swept = ", ".join(s for s in specs if specs[s].sweep)
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
    for g in exp.figures.values():  # its runs pick some run of the full sweeps (--quick may sweep fewer points)
        specs_in = [spec for spec in exp.runs if g.id in spec.figure]
        members = {s.name for s in specs_in} | {n for s in specs_in for n, _ in sweep_points(s)}
        for pattern in g.runs or ():
            if not any(pattern == n or fnmatch.fnmatchcase(n, pattern) for n in members):
                raise UserError(f"{where}: figure {g.id!r} lists run {pattern!r}, which picks none of the runs drawn "
                                f"in it: name one of {', '.join(sorted(members)) or '(none)'}, or a glob")


def select(only: str | Sequence[str] | None, planned: list[PlannedRun]) -> set[str]:
    """The directory names of the runs ``--only`` picks (every run without it; several patterns: the runs any of
    them picks): a run's exact name (a swept point such as ``sim-snap[cluster.workers=100]``, whose brackets a
    glob would read as a character class) is taken literally; anything else is a glob on the run's name and on
    its swept entry's name."""
    if not only:
        return {p.dirname for p in planned}
    if not isinstance(only, str):
        return set().union(*(select(pattern, planned) for pattern in only))
    if any(only in (p.name, p.spec) for p in planned):
        return {p.dirname for p in planned if only in (p.name, p.spec)}
    return {p.dirname for p in planned if fnmatch.fnmatchcase(p.name, only) or fnmatch.fnmatchcase(p.spec, only)}
