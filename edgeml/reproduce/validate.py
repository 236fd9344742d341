"""An experiment checked whole once it is read (``edgeml.reproduce.load`` calls ``validate``), so that nothing
runs that would end in "not measured", a dropped panel or an overwritten figure:

- **names** (``paper``, ``[[runs]]`` entries, ``[[figures]]`` ids) are one path component of ``SAFE`` characters
  (``[A-Za-z0-9._-]``, not starting with ``.``, 1 to ``NAME_MAX`` long), and what becomes a folder is unique
  after sanitising and case-folding: entries, every swept point's run directory (in the full and the
  ``--quick`` experiment), every figure group's folder;
- **seeds**: none listed twice; a claim's seeds are run by the entries it reads;
- **targets**: an accuracy in (0, 1], a loss above 0 (the experiment's, and each claim's);
- **claims**: each worded its own way (a verdict is matched by its claim's text);
- **metrics**: every metric a claim, an ``against`` panel or a ``settled`` table names is one the analysis
  computes for the runs it reads (``METRICS``, or a decision their algorithm declares:
  ``AlgorithmSpec.decisions``); every ``against`` x that is no metric is a config key of those runs;
- **both configurations**: the full experiment and the ``--quick`` one are planned (every run's config
  validated, claims and figures matched to runs) whichever is asked for.

Each problem is one ``UserError`` naming the entry and the fix. The loader runs ``validate`` on every experiment it
reads (``edgeml.reproduce.load.CHECKS``; importing ``edgeml.reproduce`` registers it).
"""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING

from edgeml.errors import UserError
from edgeml.reproduce.load import CHECKS

if TYPE_CHECKING:
    from edgeml.reproduce.load import Experiment, RunSpec

SAFE = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
NAME_MAX = 64
"""The longest name of a paper, entry or figure: its swept points and seeds append to it within
``edgeml.schema.NAME_MAX_BYTES``."""
SAFE_TEXT = f"1 to {NAME_MAX} characters of A-Z a-z 0-9 . _ -, not starting with '.'"

SUMMARY_METRICS = ("final_accuracy", "best_accuracy", "final_loss", "best_loss", "total_steps", "total_samples",
                   "total_bytes", "total_byte_hops", "ps_ingress_bytes", "messages_lost", "compute_fraction",
                   "comm_fraction", "wait_fraction", "compute_fraction_spread", "crashed_workers", "duration_s",
                   "workers")
"""The numbers of every run's ``summary.json`` that claims may name (``edgeml.runtime.monitor.summarize``)."""
DERIVED_METRICS = ("noncompute_fraction", "samples_per_s", "bytes_per_s", "bytes_per_step")
"""Computed from the summary (``edgeml.analysis.compare.run_metrics``)."""


def metrics() -> tuple[str, ...]:
    """The metrics the analysis computes for any run: times (steps, bytes...) to a target, the summary's numbers
    and what is derived from them or from the run's series."""
    from edgeml.analysis.convergence import TARGET_METRICS
    from edgeml.rundir import DERIVED

    return tuple(dict.fromkeys((*TARGET_METRICS, *SUMMARY_METRICS, *DERIVED_METRICS, *DERIVED)))


def validate(exp: Experiment) -> None:
    """Refuse what would run and then fail to measure, draw or keep apart (the module's docstring)."""
    where = exp.source.name if exp.source.name != "experiment.toml" else f"{exp.source.parent.name}/experiment.toml"
    _names(exp, where)
    _seeds(exp, where)
    planned = {quick: _planned(exp, quick) for quick in (False, True)}
    for quick, runs in planned.items():
        _run_folders(where, [p.name for p in runs], quick)
    _targets(exp, where, planned[False])
    _claims(exp, where)
    _figures(exp, where)


# ------------------------------------------------------------------------------------------------ names


def _name(where: str, what: str, name: str) -> None:
    if not isinstance(name, str) or not SAFE.fullmatch(name) or len(name) > NAME_MAX:
        raise UserError(f"{where}: {what} {name!r} is no plain name (it names a folder): use {SAFE_TEXT}")


def _names(exp: Experiment, where: str) -> None:
    _name(where, "[experiment] paper", exp.paper)
    seen: dict[str, str] = {}
    for r in exp.runs:
        _name(where, "[[runs]] name", r.name)
        other = seen.setdefault(r.name.casefold(), r.name)
        if other != r.name:
            raise UserError(f"{where}: runs {other!r} and {r.name!r} differ only in case, so they share a folder "
                            f"where case is ignored: rename one")
    folders: dict[str, str] = {}
    for key, g in exp.figures.items():
        if key == g.id:  # a [[figures]] id (or a run's figure named like one)
            _name(where, "figure id", g.id)
        if not g.folder:
            raise UserError(f"{where}: figure {key!r} makes an empty folder name: give it a letter or digit before "
                            f"any ':'")
        other = folders.setdefault(g.folder, key)
        if other != key:
            raise UserError(f"{where}: figures {other!r} and {key!r} would both be drawn in figures/{g.folder}/ "
                            f"(ids compare without case and punctuation): rename one")


def _run_folders(where: str, names: list[str], quick: bool) -> None:
    """Every planned run's directory unique after sanitising and case-folding, and short enough for any file
    system."""
    from edgeml.reproduce.plan import PlannedRun
    from edgeml.schema import NAME_MAX_BYTES

    seen: dict[str, str] = {}
    planned: set[str] = set()
    for name in names:
        if name in planned or planned.add(name):
            raise UserError(f"{where}: run {name!r} is planned twice{' with --quick' if quick else ''} (its sweep "
                            f"lists a value twice): give each value once")
        folder = PlannedRun(name, "", 2**32 - 1, {}).dirname  # the longest seed
        if len(folder.encode()) > NAME_MAX_BYTES:
            raise UserError(f"{where}: run {name!r} makes a run directory of {len(folder.encode())} bytes, more than "
                            f"{NAME_MAX_BYTES}: shorten its entry's name or its swept values")
        other = seen.setdefault(folder.casefold(), name)
        if other != name:
            raise UserError(f"{where}: runs {other!r} and {name!r} would share the run directory {folder[:-13]!r}-s*"
                            f"{' with --quick' if quick else ''} (names compare without case and with characters "
                            f"other than letters, digits and . = + - as _): make their names or swept values differ "
                            f"in letters or digits")


# ------------------------------------------------------------------------------------------------ seeds


def _twice(seeds) -> int | None:
    seen: set[int] = set()
    return next((s for s in seeds if s in seen or seen.add(s)), None)


def _seeds(exp: Experiment, where: str) -> None:
    lists = [("[experiment] seeds", exp.seeds), ("[experiment] quick_seeds", exp.quick_seeds)]
    lists += [(f"run {r.name!r}: {key}", getattr(r, key)) for r in exp.runs for key in ("seeds", "quick_seeds")]
    lists += [(f"claim {c.text!r}: seeds", c.seeds) for c in exp.claims]
    for what, seeds in lists:
        twice = _twice(seeds or ())
        if twice is not None:
            raise UserError(f"{where}: {what} lists seed {twice} twice: give each seed once")
    for c in exp.claims:
        for entry in _entries(exp, c.run, c.baseline) if c.seeds else ():
            run = entry.seeds or exp.seeds
            missing = [s for s in c.seeds if s not in run]
            if missing:
                raise UserError(f"{where}: claim {c.text!r} is decided on seed {missing[0]}, which run {entry.name!r} "
                                f"does not run (its seeds: {', '.join(map(str, run))}): choose its seeds among "
                                f"those, or add the seed to the run")


def _entries(exp: Experiment, *names: str | None) -> list[RunSpec]:
    """The entries that runs, points or a baseline named by an algorithm (``baseline = "bsp"``) stand for."""
    by_name = {r.name: r for r in exp.runs}
    out: dict[str, RunSpec] = {}
    for name in filter(None, names):
        entry = by_name.get(name.split("[", 1)[0])
        for r in [entry] if entry else [r for r in exp.runs if r.algorithm == name]:
            out[r.name] = r
    return list(out.values())


# ------------------------------------------------------------------------------------------------ plans


def _planned(exp: Experiment, quick: bool) -> list:
    """The experiment planned as ``--quick`` (or not) would plan it: every run's config validated."""
    from edgeml.reproduce.plan import plan

    try:
        return plan(exp, quick, seeds=[exp.seeds[0]])  # one seed: the configs differ only in run.seed
    except UserError as exc:
        raise UserError(f"{exc} (in the experiment as --quick runs it: its [quick] layers)" if quick else str(exc)) \
            from None


def _targets(exp: Experiment, where: str, planned: list) -> None:
    """The experiment's targets and each claim's within what its metric can reach."""
    for t in exp.targets or ():
        if t.rule != "stopping" and not _reachable(t.metric, t.value):
            raise UserError(f"{where}: [experiment] target_{t.metric} = {t.value:g} can never be reached: use "
                            f"{_range(t.metric)}")
    metric = (exp.targets[0].metric if exp.targets else _default_metric(planned))
    for c in exp.claims:
        for v in c.targets or ():
            if isinstance(v, (int, float)) and not _reachable(metric, v):
                raise UserError(f"{where}: claim {c.text!r}: target {v:g} can never be reached (the experiment's "
                                f"targets are {metric}): use {_range(metric)}")


def _reachable(metric: str, value: float) -> bool:
    return 0 < value <= 1 if metric == "accuracy" else value > 0


def _range(metric: str) -> str:
    return "an accuracy in (0, 1]" if metric == "accuracy" else f"a {metric} above 0"


def _default_metric(planned: list) -> str:
    """The metric of the targets the analysis picks where the experiment names none
    (``edgeml.analysis.compare.default_targets``): the runs' common stop target's, else accuracy."""
    for metric in ("accuracy", "loss"):
        values = {getattr(p.cfg.stop, f"target_{metric}") for p in planned}
        if len(values) == 1 and 0 not in values:
            return metric
    return "accuracy"


# ------------------------------------------------------------------------------------------------ metrics


def _algorithms(entries: list[RunSpec]) -> list[str]:
    from edgeml.algorithms import get_algorithm

    out = []
    for r in entries:
        try:
            out.append(get_algorithm(r.algorithm).name)
        except UserError:
            pass  # its config is refused by the plan, with the algorithms to choose from
    return list(dict.fromkeys(out))


def _computable(metric: str, algorithms: list[str]) -> bool:
    from edgeml.algorithms import REGISTRY

    from edgeml.rundir import derived

    return metric in metrics() or derived(metric) is not None or (
        bool(algorithms) and all(metric in REGISTRY[a].decisions for a in algorithms))


def _unknown_metric(where: str, what: str, metric: str, algorithms: list[str]) -> UserError:
    from edgeml.algorithms import REGISTRY
    from edgeml.rundir import DERIVED_FAMILIES
    from edgeml.schema import did_you_mean

    own = sorted(set.intersection(*(set(REGISTRY[a].decisions) for a in algorithms))) if algorithms else []
    known = [*metrics(), *(f"{p}<iteration>" for p in DERIVED_FAMILIES), *own]
    return UserError(f"{where}: {what} names metric {metric!r}{did_you_mean(metric, known)}, which the analysis "
                     f"does not compute for {', '.join(algorithms) or 'its runs'}: choose one of {', '.join(known)}")


def _claims(exp: Experiment, where: str) -> None:
    from edgeml.rundir import drawn_series

    texts: set[str] = set()
    for c in exp.claims:
        if c.text in texts or texts.add(c.text):  # verdicts are matched by their claim's text (--check, scoreboard)
            raise UserError(f"{where}: two claims read {c.text!r}: word each claim its own way")
        entries = _entries(exp, c.run, c.baseline)
        algorithms = _algorithms(entries)
        if not (c.epochs or _computable(c.metric, algorithms)):  # at epochs: accuracy, loss (claims checked them)
            raise _unknown_metric(where, f"claim {c.text!r}", c.metric, algorithms)
        series = drawn_series(c.metric)
        undrawn = [r.name for r in entries if series and not any(
            f not in exp.figures or series in (exp.figures[f].panels or [series]) for f in r.figure)]
        if undrawn:
            raise UserError(f"{where}: claim {c.text!r} reads {c.metric} from series/{series}.csv, which a "
                            f"reproduction keeps only in runs a figure draws it for: put {undrawn[0]} in a figure with "
                            f"the {series!r} panel")


def _config_keys(algorithms: list[str]) -> set[str]:
    from edgeml.algorithms import REGISTRY
    from edgeml.schema import COMMON_SECTIONS

    keys = {f"{s}.{f.name}" for s, cls in COMMON_SECTIONS.items() for f in dataclasses.fields(cls)}
    return keys | {f"{a}.{f.name}" for a in algorithms for f in dataclasses.fields(REGISTRY[a].config)}


def _figures(exp: Experiment, where: str) -> None:
    from edgeml.schema import did_you_mean

    for key, g in exp.figures.items():
        algorithms = _algorithms([r for r in exp.runs if key in r.figure])
        panels = g.panels or []
        twice = next((p for i, p in enumerate(panels) if p in panels[:i]), None)
        if twice is not None:
            raise UserError(f"{where}: figure {key!r} lists panel {twice!r} twice: name each panel once")
        xs: set[str] = set()
        for a in g.against:
            if a.x in xs:
                raise UserError(f"{where}: figure {key!r} draws against {a.x!r} twice (one file, against_{a.x}.png): "
                                f"put every y of that x in one against entry")
            xs.add(a.x)
            if "." in a.x:
                known = _config_keys(algorithms)
                if a.x not in known:
                    raise UserError(f"{where}: figure {key!r}: against x = {a.x!r} is no config key of its runs"
                                    f"{did_you_mean(a.x, sorted(known))}: name a setting as \"section.key\", or a "
                                    f"metric")
            elif not _computable(a.x, algorithms):
                raise _unknown_metric(where, f"figure {key!r} against x", a.x, algorithms)
            for y in a.y:
                if not _computable(y, algorithms):
                    raise _unknown_metric(where, f"figure {key!r} against y", y, algorithms)
        decision = (g.settled or {}).get("decision")
        if decision and not any(decision in _decisions(a) for a in algorithms):
            raise UserError(f"{where}: figure {key!r}: settled decision = {decision!r} is logged by none of its runs' "
                            f"algorithms ({', '.join(algorithms)}): choose one of "
                            f"{', '.join(sorted({d for a in algorithms for d in _decisions(a)})) or '(none)'}")


def _decisions(algorithm: str) -> tuple[str, ...]:
    from edgeml.algorithms import REGISTRY

    return REGISTRY[algorithm].decisions


CHECKS.append(validate)  # every experiment read is checked whole (the package imports this module)
