"""Experiment files (``experiments/<paper>.toml``, format in ``edgeml.reproduce``) read into typed dataclasses.

Each table goes through the machinery run configs go through (``edgeml.schema``): its keys are the fields of
a dataclass (an unknown key is refused with the allowed ones), values are coerced to the fields' types
(``update_section``), and numbers must be finite and within the ranges declared beside their fields
(``ranged``, ``check_fields``). What involves several tables (unique run names, figure groups that runs name,
targets) is checked here too; what involves the runs' configurations is ``edgeml.reproduce.plan``'s.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import edgeml
from edgeml.analysis.claims import Claim, parse_claim
from edgeml.analysis.convergence import RULES, Target
from edgeml.errors import UserError
from edgeml.reproduce.validate import validate
from edgeml.schema import check_fields, ranged, update_section

SEED = {"ge": 0, "le": 2**32 - 1}  # as run.seed: every seed of an experiment becomes one
TOP_KEYS = {"experiment", "settings", "quick", "runs", "claims", "figures"}


@dataclass
class ExperimentSection:
    """``[experiment]``: what the experiment is, its seeds, baseline and targets."""

    paper: str = ""  # default: the file's name
    title: str = ""  # default: the file's name
    description: str = ""
    seeds: list[int] = ranged(default_factory=lambda: [0], **SEED)
    quick_seeds: list[int] | None = ranged(None, **SEED)
    baseline: str = ""  # default: the first run
    target_accuracy: float | list[float] | None = ranged(None, ge=0, le=1)
    target_loss: float | list[float] | None = ranged(None, ge=0)
    rule: Literal[RULES] = "stays"
    differences: str = ""
    ci: bool = True  # read by scripts/reproduce_quick.sh
    labels: dict = field(default_factory=dict)  # config key -> its short name in legends and axes ("H", "delay")


@dataclass
class RunSpec:
    """One ``[[runs]]`` entry: a method, its config layers, sweep, seeds and figure groups."""

    name: str = ""  # default: the algorithm
    algorithm: str = ""
    label: str = ""  # what figures and verdicts call its runs; default: the algorithm's name in the papers
    config: dict = field(default_factory=dict)
    quick: dict = field(default_factory=dict)
    sweep: dict = field(default_factory=dict)
    quick_sweep: dict = field(default_factory=dict)
    points: dict = field(default_factory=dict)  # a layer per point of the full sweep, by its tag ("cluster.hetero=1:3")
    figure: str | list[str] = field(default_factory=list)  # once loaded: the group ids ([""]: the default group)
    seeds: list[int] | None = ranged(None, **SEED)
    quick_seeds: list[int] | None = ranged(None, **SEED)  # with --quick: its seeds (default: the experiment's rule)
    tunes: dict = field(default_factory=dict)  # what its sweep tunes offline: edgeml.reproduce.tuning


@dataclass
class Against:
    """A panel of metrics ``y`` against ``x`` (a config key such as a swept setting, or a metric)."""

    x: str = ""
    y: list[str] = field(default_factory=list)


@dataclass
class FigureGroup:
    id: str = ""
    title: str = ""
    cite: str = ""
    text: str = ""
    panels: list[str] | None = None
    against: list[Against] = field(default_factory=list)
    settled: dict = field(default_factory=dict)
    """``{ decision = "commit_rate", fixed = "adsp.fixed_rate" }``: a table under the figure of what each run that
    searches the value online (the config key ``fixed`` unset or 0) settled on (the last ``decision`` it logged)
    beside the group's best fixed value (the runs that fix ``fixed``, the value with the least mean time to the
    target)."""
    per_class: bool = False
    """A table under the figure of each run's final accuracy per class (mean over its seeds), for the runs that
    recorded it (``eval.per_class``)."""
    runs: list[str] | None = None
    """Of the runs that name this group, only those these names or globs pick, as ``--only`` picks them (a swept
    point's exact name, or a glob on run and entry names): one point of a sweep drawn in a figure of its own
    (AdaComp's Fig. 4 holds its sweep's c = 0.001 alone)."""

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
    runs: list[RunSpec]
    claims: list[Claim]
    figures: dict[str, FigureGroup]
    labels: dict[str, str] = field(default_factory=dict)

    def run_names(self) -> dict[str, str]:
        """What figures and verdicts call the runs of each ``[[runs]]`` entry, by its name: its ``label``, else
        its algorithm's name in the papers ("fig4-adsp": "ADSP")."""
        from edgeml.algorithms import display_name

        return {r.name: r.label or display_name(r.algorithm) for r in self.runs}


def experiment_dirs() -> list[Path]:
    return list(dict.fromkeys([Path.cwd() / "experiments", Path(edgeml.__file__).resolve().parents[1] / "experiments"]))


def experiment_names() -> list[str]:
    return sorted({p.stem for d in experiment_dirs() if d.is_dir() for p in d.glob("*.toml")})


def find_experiment(paper: str) -> Path:
    if paper.endswith(".toml") and Path(paper).is_file():
        return Path(paper)
    for d in experiment_dirs():
        if (d / f"{paper}.toml").is_file():
            return d / f"{paper}.toml"
    names = experiment_names()
    raise UserError(f"no experiment {paper!r}: choose one of {', '.join(names) or '(none)'} "
                    f"(files in {' or '.join(str(d) for d in experiment_dirs())})")


def _check_keys(where: str, table: Any, allowed: set[str]) -> dict:
    if not isinstance(table, dict):
        raise UserError(f"{where} must be a table: write it as [{where}] or {{ key = value }}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise UserError(f"unknown key {unknown[0]!r} in {where}: allowed keys are {', '.join(sorted(allowed))}")
    return table


def _keys(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _typed(obj: Any, section: str, values: dict, where: str) -> Any:
    """``obj`` with ``values`` set through the config machinery: types coerced, numbers finite and in range."""
    try:
        update_section(obj, section, values)
        check_fields(section, obj)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None
    return obj


def _seed_list(where: str, seeds: Any) -> list[int]:
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                           for s in seeds):
        raise UserError(f"{where} must be a non-empty list of integers, e.g. seeds = [0, 1, 2]")
    return seeds


def _targets(where: str, e: ExperimentSection) -> list[Target] | None:
    if e.target_accuracy is not None and e.target_loss is not None:
        raise UserError(f"{where}: give target_accuracy or target_loss in [experiment], not both")
    for metric in ("accuracy", "loss"):
        values = getattr(e, f"target_{metric}")
        if values is not None:
            values = values if isinstance(values, list) else [values]
            if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                     for v in values):
                raise UserError(f"{where}: target_{metric} must be a number or a non-empty list of numbers")
            return [Target(metric, float(v), e.rule) for v in values]
    return [Target("loss", rule="stopping")] if e.rule == "stopping" else None


def _experiment_section(path: Path, raw: Any) -> tuple[ExperimentSection, list[Target] | None]:
    where = path.name
    e = _check_keys(f"{where} [experiment]", raw, _keys(ExperimentSection))
    for key in ("seeds", "quick_seeds"):
        if key in e:
            _seed_list(f"{path}: [experiment] {key}", e[key])
    # the targets' own check (a number or a list of numbers) comes before their ranges: its message names the fix
    section = _typed(ExperimentSection(), "experiment", {k: v for k, v in e.items() if not k.startswith("target_")},
                     where)
    section.target_accuracy, section.target_loss = e.get("target_accuracy"), e.get("target_loss")
    targets = _targets(where, section)
    _labels(where, section.labels)
    return _typed(section, "experiment", {}, where), targets


LABEL_WIDTH = 24


def _labels(where: str, labels: Any, what: str = "[experiment] labels") -> None:
    """``[experiment] labels``: each key a config key (``section.key`` of a common section or an algorithm's),
    each value a short name (at most ``LABEL_WIDTH`` characters, on one line)."""
    from edgeml.algorithms import REGISTRY
    from edgeml.schema import COMMON_SECTIONS, Config, did_you_mean

    if not isinstance(labels, dict):
        raise UserError(f"{where}: [experiment] labels must be a table: labels = {{ \"cluster.hetero\" = \"H\" }}")
    sections = {s: {f.name for f in dataclasses.fields(getattr(Config(), s))} for s in COMMON_SECTIONS}
    sections.update({name: {f.name for f in dataclasses.fields(spec.config)} for name, spec in REGISTRY.items()})
    for key, name in labels.items():
        section, _, field_name = key.partition(".")
        if field_name not in sections.get(section, ()):
            known = [f"{s}.{f}" for s, fs in sections.items() for f in sorted(fs)]
            raise UserError(f"{where}: {what} names {key!r}, which is no config key"
                            f"{did_you_mean(key, known)}: name it as \"section.key\"")
        if not isinstance(name, str) or not name.replace("{}", "").strip() or len(name) > LABEL_WIDTH or "\n" in name \
                or name.count("{}") > 1:
            raise UserError(f"{where}: [experiment] labels: {key!r} must be named by a short string (1 to "
                            f"{LABEL_WIDTH} characters on one line, with at most one {{}} where the value goes), "
                            f"got {name!r}")


def _run_spec(path: Path, raw: Any) -> RunSpec:
    where = path.name
    r = _check_keys(f"{where} [[runs]]", raw, _keys(RunSpec))
    if "algorithm" not in r:
        raise UserError(f"{path}: a [[runs]] entry has no algorithm: add algorithm = \"...\"")
    name = r.get("name", r["algorithm"])
    for key in ("seeds", "quick_seeds"):
        if key in r:
            _seed_list(f"{where}: run {name!r}: {key}", r[key])
    for key in ("config", "quick", "sweep", "quick_sweep", "points"):
        if not isinstance(r.get(key, {}), dict):
            raise UserError(f"{where}: run {name!r}: {key} must be a table: write {key} = {{ ... }}")
    spec = _typed(RunSpec(), f"runs[{name}]", {**r, "name": name}, where)
    if len(spec.label) > 2 * LABEL_WIDTH or "\n" in spec.label or ("label" in r and not spec.label.strip()):
        raise UserError(f"{where}: run {name!r}: label must be a short name (1 to {2 * LABEL_WIDTH} characters on "
                        f"one line), got {spec.label!r}")
    refs = [spec.figure] if isinstance(spec.figure, str) else spec.figure
    if not isinstance(refs, list) or not all(isinstance(x, str) and x for x in refs):
        raise UserError(f"{where}: run {name!r}: figure must be a figure id or a list of ids")
    spec.figure = refs
    if spec.tunes:
        _tunes(where, spec)
    return spec


def _tunes(where: str, spec: RunSpec) -> None:
    """``tunes = { key = "section.key", by = "time_to_target", runs = { "entry" = "section.key" } }``: ``key`` one
    of the entry's sweep keys, ``by`` a metric of ``edgeml.reproduce.tuning.BY``, each tuned run's key a config
    key (the entries it names are checked once every entry is read)."""
    from edgeml.reproduce.tuning import BY

    example = ('tunes = { key = "fixed_adacomm.tau0", by = "time_to_target", runs = { "fig4-fixed_adacomm" = '
               '"fixed_adacomm.tau0" } }')
    t = spec.tunes
    if not isinstance(t, dict):
        raise UserError(f"{where}: run {spec.name!r}: tunes must be a table: write {example}")
    unknown = sorted(set(t) - {"key", "by", "runs"})
    if unknown:
        raise UserError(f"{where}: run {spec.name!r}: unknown key {unknown[0]!r} in tunes: write {example}")
    if not isinstance(t.get("key"), str) or t["key"] not in (spec.sweep or {}):
        swept = ", ".join(repr(k) for k in spec.sweep or {}) or "none: give the run a sweep of the candidates"
        raise UserError(f"{where}: run {spec.name!r}: tunes.key must name one of its sweep keys ({swept}), "
                        f"got {t.get('key')!r}")
    t.setdefault("by", "time_to_target")
    if t["by"] not in BY:
        raise UserError(f"{where}: run {spec.name!r}: tunes.by = {t['by']!r} is not allowed: choose one of "
                        f"{', '.join(BY)}")
    runs = t.get("runs")
    if not isinstance(runs, dict) or not runs or not all(isinstance(k, str) for k in runs.values()):
        raise UserError(f"{where}: run {spec.name!r}: tunes.runs must name the runs it tunes and the key each "
                        f"takes the choice in: write {example}")
    _labels(where, {key: "x" for key in runs.values()}, what=f"run {spec.name!r} tunes.runs")


def _against(where: str, figure: str, raw: Any) -> Against:
    a = _check_keys(f"{where} figure {figure!r} against", raw, _keys(Against))
    if not isinstance(a.get("x"), str) or not isinstance(a.get("y"), list) or not a["y"]:
        raise UserError(f"{where}: figure {figure!r}: write against = [{{ x = \"section.key\" or a metric, "
                        f"y = [\"time_to_target\", ...] }}]")
    return _typed(Against(), f"figures[{figure}].against", a, where)


def _figure_group(where: str, raw: dict, known: set[str]) -> FigureGroup:
    f = _check_keys(f"{where} [[figures]]", raw, _keys(FigureGroup))
    if not isinstance(f.get("id"), str) or not f["id"] or not isinstance(f.get("title"), str):
        raise UserError(f"{where}: every [[figures]] entry needs id = \"...\" and title = \"...\"")
    panels = f.get("panels")
    if panels is not None:
        bad = [p for p in panels if p not in known] if isinstance(panels, list) else [panels]
        if bad:
            raise UserError(f"{where}: figure {f['id']!r}: unknown panel {bad[0]!r}: choose among "
                            f"{', '.join(sorted(known))}")
    against = f.get("against", [])
    typed = [_against(where, f["id"], a) for a in (against if isinstance(against, list) else [None])]
    g = _typed(FigureGroup(), f"figures[{f['id']}]", {k: v for k, v in f.items() if k != "against"}, where)
    g.text, g.against = g.text.strip(), typed
    if g.settled:
        if set(g.settled) != {"decision", "fixed"} or not all(isinstance(v, str) and v for v in g.settled.values()):
            raise UserError(f"{where}: figure {f['id']!r}: settled names a decision and the key that fixes it: "
                            f"settled = {{ decision = \"commit_rate\", fixed = \"adsp.fixed_rate\" }}")
        _labels(where, {g.settled["fixed"]: "x"}, what=f"figure {f['id']!r} settled.fixed")
    if g.runs is not None and (not isinstance(g.runs, list) or not g.runs
                               or not all(isinstance(r, str) and r for r in g.runs)):
        raise UserError(f"{where}: figure {f['id']!r}: runs lists the runs drawn in it, by name or glob: "
                        f"runs = [\"fig4-*\", \"adacomp[adacomp.c=0.001]\"]")
    return g


def _figure_groups(where: str, doc: dict, runs: list[RunSpec]) -> dict[str, FigureGroup]:
    """The ``[[figures]]`` groups, plus a group of every panel for each title a run names instead of an id."""
    figures: dict[str, FigureGroup] = {}
    for raw in doc.get("figures", []):
        from edgeml.analysis.figures import panel_names  # (matplotlib: not for what only plans or runs)

        g = _figure_group(where, raw, set(panel_names()))
        if g.id in figures:
            raise UserError(f"{where}: two [[figures]] have id {g.id!r}: give each its own")
        figures[g.id] = g
    for r in runs:
        for ref in r.figure:  # a title of its own: a group with every panel, in a folder named before the colon
            figures.setdefault(ref, FigureGroup(re.sub(r"[^a-z0-9]+", "-", ref.split(":", 1)[0].lower()), ref))
        r.figure = r.figure or [""]
    unused = [g for g in figures if not any(g in r.figure for r in runs)]
    if unused:
        raise UserError(f"{where}: no run is drawn in figure {unused[0]!r}: add figure = {unused[0]!r} to its runs")
    return figures


def _run_specs(path: Path, doc: dict) -> list[RunSpec]:
    runs = [_run_spec(path, r) for r in doc.get("runs", [])]
    if not runs:
        raise UserError(f"{path}: no [[runs]]: add at least one with name and algorithm")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise UserError(f"{path}: run names must be unique, got {', '.join(names)}: give each [[runs]] a name")
    return runs


def load_experiment(paper: str) -> Experiment:
    """Read and check an experiment file (a paper's name in ``experiments/``, or a path)."""
    from edgeml.config import read_toml

    path = find_experiment(paper)
    where = path.name
    doc = _check_keys(where, read_toml(path), TOP_KEYS)
    e, targets = _experiment_section(path, doc.get("experiment", {}))
    runs = _run_specs(path, doc)
    figures = _figure_groups(where, doc, runs)
    baseline = e.baseline or runs[0].name
    claims = [parse_claim(c, where, baseline) for c in doc.get("claims", [])]
    names = [r.name for r in runs]
    for r in runs:
        for tuned in (r.tunes or {}).get("runs", {}):
            if tuned not in names:
                raise UserError(f"{where}: run {r.name!r} tunes {tuned!r}, which is no run of this experiment: "
                                f"choose among {', '.join(n for n in names if n != r.name)}")
    for c in claims:
        for a in [n for pair in c.diagnosis.pairs for n in pair if n] if c.diagnosis else ():
            if a.split("[", 1)[0] not in names:
                raise UserError(f"{where}: claim {c.text!r}: its diagnosis names ablation {a!r}, which is no run "
                                f"of this experiment: add it as a [[runs]] entry or choose among {', '.join(names)}")
    exp = Experiment(path, e.paper or path.stem, e.title or path.stem, e.description, e.seeds, e.quick_seeds,
                     baseline, targets, e.differences, doc.get("settings", {}), doc.get("quick", {}), runs, claims,
                     figures, dict(e.labels))
    validate(exp)  # the whole experiment, its --quick configuration too
    return exp
