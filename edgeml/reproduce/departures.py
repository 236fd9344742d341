"""The departures ledger checked against the experiment once it is read (``edgeml.reproduce.load.CHECKS``;
importing ``edgeml.reproduce`` registers it): its keys are config keys, its tests and each prose placeholder
pick runs, and each diagnosis's ablations differ from its claim's runs in the cited departures' keys alone."""

from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import replace

from edgeml.analysis import ledger as ledger_mod
from edgeml.analysis import placeholders
from edgeml.errors import UserError
from edgeml.reproduce.load import CHECKS, Experiment


def check_ledger(exp: Experiment) -> None:
    """The ledger's keys and tests name config keys and runs; each placeholder names runs; each diagnosis's
    ablations differ from its claim's runs in the cited departures' keys alone."""
    from edgeml.algorithms import ALIASES, REGISTRY
    from edgeml.reproduce.plan import sweep_points
    from edgeml.schema import COMMON_SECTIONS, Config

    where = exp.source.name
    entries = [r.name for r in exp.runs] + [n for r in exp.runs for n, _ in sweep_points(r)]
    texts = [exp.description, exp.differences, *(g.text for g in exp.figures.values()),
             *(c.diagnosis.text for c in exp.claims if c.diagnosis is not None),
             *(t for d in exp.ledger or [] for t in (d.ours, d.why))]
    for text in texts:
        for p in placeholders.parse(text):
            if not any(p.run == e or fnmatch.fnmatchcase(e, p.run) for e in entries):
                raise UserError(f"{where}: placeholder {p.source!r} names run {p.run!r}, which picks no run of "
                                "the experiment: name an entry or a glob, as --only takes them")
    if exp.ledger:
        known = [f"{s}.{f.name}" for s in COMMON_SECTIONS for f in dataclasses.fields(getattr(Config(), s))]
        known += [f"{n}.{f.name}" for n, spec in REGISTRY.items() for f in dataclasses.fields(spec.config)]
        known += [f"{a}.{k.split('.', 1)[1]}" for a, n in ALIASES.items() for k in known if k.startswith(f"{n}.")]
        ledger_mod.check_keys(exp.ledger, known, entries, ledger_mod.LEDGER)
    rows = {d.id: d for d in exp.ledger or []}
    for c in exp.claims:
        if c.diagnosis is None:
            continue
        cited = [rows[x] for x in c.diagnosis.departures]
        for ablation, (run, base) in zip(c.diagnosis.ablations, c.diagnosis.pairs):
            keys = _one_factor(exp, run, c.run) | (_one_factor(exp, base, c.baseline) if base and c.baseline
                                                   else set())
            if not keys:
                raise UserError(f"{where}: claim {c.text!r}: ablation {ablation!r} changes no config key of the "
                                "claim's runs: it tests no factor; leave it out of the diagnosis")
            wide = ledger_mod.uncovered(keys, cited)
            if wide:
                raise UserError(f"{where}: claim {c.text!r}: ablation {ablation!r} also differs from the claim's "
                                f"runs in {', '.join(wide)}, which no cited departure "
                                f"({', '.join(c.diagnosis.departures)}) names: an ablation changes the cited "
                                "factors alone")


def _one_factor(exp: Experiment, ablation: str, claim_run: str) -> set[str]:
    """The config keys in which ``ablation``'s runs differ from ``claim_run``'s (each of its points against the
    claim's point nearest to it: the fewest keys apart)."""
    a, c = _flat_points(exp, ablation), _flat_points(exp, claim_run)
    if not a or not c:
        return set()
    return set().union(*(min((ledger_mod.differing_keys(x, y) for y in c), key=len) for x in a))


def _flat_points(exp: Experiment, name: str) -> list[dict]:
    """The full (not quick) configs of a run entry's points, or of one point, as ``{"section.key": value}``."""
    from edgeml.reproduce.plan import _plan_spec
    from edgeml.rundir import NOT_CONFIG

    spec = next((s for s in exp.runs if s.name == name.split("[", 1)[0]), None)
    if spec is None:
        return []
    points = {}
    for p in _plan_spec(exp, replace(spec, seeds=[spec.seeds[0] if spec.seeds else exp.seeds[0]]), False, None,
                        None):
        if name in (p.name, p.spec):
            points[p.name] = {f"{s}.{k}": v for s, kv in p.cfg.to_dict().items() for k, v in kv.items()
                              if f"{s}.{k}" not in NOT_CONFIG}
    return list(points.values())


CHECKS.insert(0, check_ledger)  # before validate: a diagnosis's departures are known before its metrics are
