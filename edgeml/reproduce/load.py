"""Experiment folders (``experiments/<paper>/``, format in ``edgeml.reproduce``) read into typed dataclasses.

Each table goes through the machinery run configs go through (``edgeml.schema``): its keys are the fields of
a dataclass (an unknown key is refused with the allowed ones), values are coerced to the fields' types
(``update_section``), and numbers must be finite and within the ranges declared beside their fields
(``ranged``, ``check_fields``). What involves several tables (unique run names, figure groups that runs name,
targets, the prose's placeholders, the departures ledger and the diagnoses that cite it, each ablation's one
factor) is checked here too; what else involves the runs' configurations is ``edgeml.reproduce.plan``'s.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import edgeml
from edgeml.analysis import ledger as ledger_mod
from edgeml.analysis import placeholders
from edgeml.analysis.claims import CLAIM_KEYS, Claim, parse_claim
from edgeml.analysis.convergence import RULES, Target
from edgeml.errors import UserError
from edgeml.schema import check_fields, ranged, update_section

SEED = {"ge": 0, "le": 2**32 - 1}  # as run.seed: every seed of an experiment becomes one
TOP_KEYS = {"experiment", "settings", "quick", "runs", "group", "claims", "figures"}
EXPERIMENT = "experiment.toml"
NOTES = "notes.md"
FILES = (EXPERIMENT, NOTES, ledger_mod.LEDGER)
"""An experiment folder's files: the run matrix and claims, the prose, the departures ledger (the last two
optional); a reproduction's output folder keeps a copy of each."""
NOTE_KEYS = ("description", "differences")
"""The headings of notes.md besides the figure groups' ids."""
CHECKS: list = []
"""Checks of the whole experiment once read, each raising UserError, in order: ``edgeml.reproduce.departures``
(the ledger and the diagnoses that cite it) and ``edgeml.reproduce.validate`` add their own (both plan the
experiment, and planning imports this module)."""


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
    target), and how far its time lies from that value's, in evaluation intervals. ``rule = "stopping"`` (any of
    ``convergence.RULES``) reads the times by that rule instead of the experiment's."""
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
    ledger: list[ledger_mod.Departure] | None = None  # None: the experiment has no ledger.toml

    def run_names(self) -> dict[str, str]:
        """What figures and verdicts call the runs of each ``[[runs]]`` entry, by its name: its ``label``, else
        its algorithm's name in the papers ("fig4-adsp": "ADSP")."""
        from edgeml.algorithms import display_name

        return {r.name: r.label or display_name(r.algorithm) for r in self.runs}


def experiment_dirs() -> list[Path]:
    return list(dict.fromkeys([Path.cwd() / "experiments", Path(edgeml.__file__).resolve().parents[1] / "experiments"]))


def experiment_names() -> list[str]:
    return sorted({p.parent.name for d in experiment_dirs() if d.is_dir() for p in d.glob(f"*/{EXPERIMENT}")})


def find_experiment(paper: str) -> Path:
    """The experiment file of a paper's name (``experiments/<paper>/experiment.toml``), of a folder holding one
    (a reproduction's output folder keeps a copy), or a ``.toml`` file itself."""
    if paper.endswith(".toml") and Path(paper).is_file():
        return Path(paper)
    if (Path(paper) / EXPERIMENT).is_file():
        return Path(paper) / EXPERIMENT
    for d in experiment_dirs():
        if (d / paper / EXPERIMENT).is_file():
            return d / paper / EXPERIMENT
    names = experiment_names()
    raise UserError(f"no experiment {paper!r}: choose one of {', '.join(names) or '(none)'} "
                    f"(folders in {' or '.join(str(d) for d in experiment_dirs())})")


def beside_experiments(path: Path) -> Path:
    """The folder that holds ``experiments/`` for an experiment file (``results/`` lies there too)."""
    folder = path.resolve().parent
    return folder.parent.parent if path.name == EXPERIMENT else folder.parent


def companions(path: Path) -> list[Path]:
    """The files an experiment file brings (notes.md, ledger.toml): those beside it, where it is an
    ``experiment.toml`` (a lone ``x.toml`` brings none)."""
    if path.name != EXPERIMENT:
        return []
    return [path.parent / f for f in FILES[1:] if (path.parent / f).is_file()]


def read_notes(path: Path, figures: set[str]) -> dict[str, str]:
    """notes.md's prose by its ``## `` headings: ``description``, ``differences`` and figure ids (a ``# `` title
    line above them is for readers); an unknown heading, or text before the first, is refused."""
    sections: dict[str, list[str]] = {}
    current = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("## "):
            current = line[3:].strip()
            if current not in NOTE_KEYS and current not in figures:
                raise UserError(f"{path.name}:{n}: heading {current!r} is neither {', '.join(NOTE_KEYS)} nor a figure "
                                f"id ({', '.join(sorted(figures)) or 'none'})")
            if current in sections:
                raise UserError(f"{path.name}:{n}: heading {current!r} appears twice: one section each")
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
        elif line.strip() and not line.startswith("# "):
            raise UserError(f"{path.name}:{n}: text before the first heading: put it under ## description")
    return {k: "\n".join(v).strip() for k, v in sections.items()}


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
ALGORITHM_SECTION = "algorithm"
"""A sweep key's section that stands for the run's own algorithm's section ("algorithm.lr": ``asgd.lr``...)."""


def _labels(where: str, labels: Any, what: str = "[experiment] labels") -> None:
    """``[experiment] labels``: each key a config key (``section.key`` of a common section or an algorithm's),
    each value a short name (at most ``LABEL_WIDTH`` characters, on one line)."""
    from edgeml.algorithms import REGISTRY
    from edgeml.schema import COMMON_SECTIONS, Config, did_you_mean

    if not isinstance(labels, dict):
        raise UserError(f"{where}: [experiment] labels must be a table: labels = {{ \"cluster.hetero\" = \"H\" }}")
    sections = {s: {f.name for f in dataclasses.fields(getattr(Config(), s))} for s in COMMON_SECTIONS}
    sections.update({name: {f.name for f in dataclasses.fields(spec.config)} for name, spec in REGISTRY.items()})
    sections[ALGORITHM_SECTION] = set().union(*(sections[n] for n in REGISTRY))  # a sweep's "algorithm.lr"
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
    key (the entries it names are checked once every entry is read); ``edge`` (optional) "above" or "none"."""
    from edgeml.reproduce.tuning import BY, EDGES

    example = ('tunes = { key = "fixed_adacomm.tau0", by = "time_to_target", runs = { "fig4-fixed_adacomm" = '
               '"fixed_adacomm.tau0" } }')
    t = spec.tunes
    if not isinstance(t, dict):
        raise UserError(f"{where}: run {spec.name!r}: tunes must be a table: write {example}")
    unknown = sorted(set(t) - {"key", "by", "runs", "edge"})
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
    t.setdefault("edge", "none")
    if t["edge"] not in EDGES:
        raise UserError(f"{where}: run {spec.name!r}: tunes.edge = {t['edge']!r} is not allowed: write \"above\" "
                        "(stability is lost as the value grows, as a step size's) or \"none\"")
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
        from edgeml.analysis.convergence import RULES

        if not {"decision", "fixed"} <= set(g.settled) <= {"decision", "fixed", "rule"} \
                or not all(isinstance(v, str) and v for v in g.settled.values()) \
                or g.settled.get("rule", RULES[0]) not in RULES:
            raise UserError(f"{where}: figure {f['id']!r}: settled names a decision and the key that fixes it, and "
                            f"optionally the rule times are read by ({', '.join(RULES)}): settled = {{ decision = "
                            f"\"commit_rate\", fixed = \"adsp.fixed_rate\", rule = \"stopping\" }}")
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


GROUP_SHARED = {"runs": {"algorithm", "config", "quick", "sweep", "quick_sweep", "figure", "seeds", "quick_seeds"},
                "claims": CLAIM_KEYS - {"text", "diagnosis"}}
"""A ``[[group]]`` holds run entries (``[[group.runs]]``) or claims (``[[group.claims]]``) and defaults for them,
of these keys: tables merge key by key (the entry winning), other values are the entry's where it gives one."""


def _merged(base: Any, over: Any) -> Any:
    """``over`` on ``base``, tables key by key (``base``'s keys first, as written)."""
    if not isinstance(base, dict) or not isinstance(over, dict):
        return over
    return {**base, **{k: _merged(base.get(k), v) if k in base else v for k, v in over.items()}}


def _entries(path: Path, doc: dict, kind: str) -> list[Any]:
    """Every entry of ``kind`` ("runs" or "claims"): the top-level ones, then each ``[[group]]``'s, its defaults
    merged in."""
    entries = list(doc.get(kind, []))
    groups = doc.get("group", [])
    if not isinstance(groups, list):
        raise UserError(f"{path.name}: write each group as [[group]], its entries as [[group.runs]] or "
                        "[[group.claims]]")
    for n, g in enumerate(groups, 1):
        if not isinstance(g, dict) or ("runs" in g) == ("claims" in g):
            raise UserError(f"{path.name}: [[group]] {n} holds entries of one kind: [[group.runs]] or "
                            "[[group.claims]] tables after it")
        if kind not in g:
            continue
        g = _check_keys(f"{path.name} [[group]] {n}", g, GROUP_SHARED[kind] | {kind})
        items = g[kind]
        if not isinstance(items, list) or not items or not all(isinstance(r, dict) for r in items):
            raise UserError(f"{path.name}: [[group]] {n}: write each entry as a [[group.{kind}]] table")
        if kind == "runs":
            _check_group_sections(f"{path.name}: [[group]] {n}", g, items)
        for r in items:
            shared = {k: _own_sections(v, r.get("algorithm", g.get("algorithm"))) if k in ("config", "quick") else v
                      for k, v in g.items() if k != kind}
            entries.append({**{k: v for k, v in shared.items() if k not in r},
                            **{k: _merged(shared[k], v) if k in shared and isinstance(v, dict) else v
                               for k, v in r.items()}})
    return entries


def algorithm_section(name: str) -> str | None:
    """The algorithm a config section (or run) names, by its registered name (an alias read as its algorithm);
    None for a section that names none ([run], [data]...). ``[settings]`` may hold a section per algorithm of the
    experiment: each applies to that algorithm's runs only."""
    from edgeml.algorithms import ALIASES, REGISTRY

    name = ALIASES.get(name, name)
    return name if name in REGISTRY else None


def _own_sections(table: Any, algorithm: Any) -> Any:
    """A group's ``config`` or ``quick`` as one run takes it: the sections of algorithms other than the run's
    left out (a group of several algorithms' runs gives each algorithm's settings under its name, as
    ``[settings]`` does)."""
    if not isinstance(table, dict):
        return table
    mine = algorithm_section(algorithm) if isinstance(algorithm, str) else None
    return {k: v for k, v in table.items() if algorithm_section(k) in (None, mine)}


def _check_group_sections(where: str, group: dict, items: list[dict]) -> None:
    """Each algorithm's section in a group's ``config`` or ``quick`` is one of its runs' algorithms."""
    ran = {algorithm_section(a) for r in items if isinstance(a := r.get("algorithm", group.get("algorithm")), str)}
    for key in ("config", "quick"):
        table = group.get(key)
        idle = [s for s in table if algorithm_section(s) and algorithm_section(s) not in ran] \
            if isinstance(table, dict) else []
        if idle:
            raise UserError(f"{where}: {key} names [{idle[0]}], an algorithm none of the group's runs runs: give "
                            f"each algorithm's settings under its own name ({', '.join(sorted(filter(None, ran)))})")


def _run_specs(path: Path, doc: dict) -> list[RunSpec]:
    runs = [_run_spec(path, r) for r in _entries(path, doc, "runs")]
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
    _prose(path, e, figures)
    baseline = e.baseline or runs[0].name
    claims = [parse_claim(c, where, baseline) for c in _entries(path, doc, "claims")]
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
    stem = path.parent.name if path.name == EXPERIMENT else path.stem
    ledger = ledger_mod.read_ledger(path.parent) if path.name == EXPERIMENT else None
    exp = Experiment(path, e.paper or stem, e.title or stem, e.description, e.seeds, e.quick_seeds, baseline,
                     targets, e.differences, doc.get("settings", {}), doc.get("quick", {}), runs,
                     ledger_mod.check_diagnoses(claims, ledger, where), figures, dict(e.labels), ledger)
    for check in CHECKS:  # the whole experiment, its --quick configuration too
        check(exp)
    return exp


def _prose(path: Path, e: ExperimentSection, figures: dict[str, FigureGroup]) -> None:
    """The description, differences and figure texts from notes.md (none of them also in the experiment file),
    each placeholder in them checked (``edgeml.analysis.placeholders``)."""
    notes = read_notes(path.parent / NOTES, set(figures)) if path.name == EXPERIMENT and \
        (path.parent / NOTES).is_file() else {}
    for key, text in notes.items():
        owner, field_name = (e, key) if key in NOTE_KEYS else (figures[key], "text")
        if getattr(owner, field_name).strip():
            raise UserError(f"{path.name}: {key!r} is written both in {NOTES} and here: keep it in {NOTES}")
        setattr(owner, field_name, text)
    for where, text in [("description", e.description), ("differences", e.differences),
                        *((g.id, g.text) for g in figures.values())]:
        try:
            placeholders.parse(text)
        except UserError as exc:
            raise UserError(f"{NOTES if where in notes else path.name} ({where}): {exc}") from None
