"""A paper's departures ledger (``experiments/<paper>/ledger.toml``): every place where our set-up or
implementation differs from the paper, one ``[[departure]]`` row each, which the report opens with and which
every diagnosis cites.

A row::

    [[departure]]
    id = "model"                 # slug, unique in the paper; diagnoses cite it
    what = "model"               # data set, model, speeds, network, step size, metric, algorithm line, budget...
    kind = "setting"             # setting | implementation | metric | budget
    paper = "ResNet-18"          # the paper's value
    section = "ESync Sec. 5"     # where the paper says it
    quote = "..."                # a short verbatim quote from the paper
    ours = "LeNet-5"             # our value
    why = "..."                  # why we depart
    keys = ["model.name"]        # the config keys that carry it in our runs ([] when none, e.g. a metric)
    tests = ["table1-resnet*"]   # the ablation entries (names or globs, as --only takes them) that test it

A diagnosis (``edgeml.analysis.claims``) names the rows it blames; ``check_diagnoses`` ties the two: every cited
id is a row, the cause is the rows' kind (or "claim"), and "implementation" cites a row of that kind. Whether an
ablation changes only the cited rows' keys needs the planned runs: ``edgeml.reproduce.load`` checks it with
``differing_keys``.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from edgeml.analysis.claims import CAUSES, Claim
from edgeml.errors import UserError

LEDGER = "ledger.toml"
KINDS = ("setting", "implementation", "metric", "budget")
FIELDS = ("id", "what", "kind", "paper", "section", "quote", "ours", "why", "keys", "tests")
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]*$")
UNTESTED = "untested"


@dataclass(frozen=True)
class Departure:
    id: str
    what: str
    kind: str
    paper: str
    section: str
    quote: str
    ours: str
    why: str
    keys: tuple[str, ...] = ()
    tests: tuple[str, ...] = ()

    def covers(self, key: str) -> bool:
        """Whether config key ``key`` is one of this row's (a row's key may be a glob: ``"snap.*"``)."""
        return any(key == k or fnmatch.fnmatchcase(key, k) for k in self.keys)


def read_ledger(folder: Path) -> list[Departure] | None:
    """The ledger beside an experiment file (None: it has none)."""
    from edgeml.config import read_toml

    path = folder / LEDGER
    if not path.is_file():
        return None
    return parse_ledger(read_toml(path), path.name)


def parse_ledger(doc: Any, where: str) -> list[Departure]:
    """The ``[[departure]]`` rows, strictly: every field present and a one-line string (``keys``, ``tests``:
    lists of strings), ``kind`` one of ``KINDS``, ids unique slugs."""
    if not isinstance(doc, dict) or set(doc) - {"departure"}:
        extra = sorted(set(doc) - {"departure"}) if isinstance(doc, dict) else ["?"]
        raise UserError(f"{where}: unknown table {extra[0]!r}: a ledger holds [[departure]] rows only")
    rows = doc.get("departure", [])
    if not isinstance(rows, list):
        raise UserError(f"{where}: write each row as [[departure]]")
    out: list[Departure] = []
    for raw in rows:
        name = raw.get("id", "?") if isinstance(raw, dict) else "?"
        if not isinstance(raw, dict):
            raise UserError(f"{where}: write each row as [[departure]]")
        unknown, missing = sorted(set(raw) - set(FIELDS)), [f for f in FIELDS if f not in raw]
        if unknown:
            raise UserError(f"{where}: departure {name!r}: unknown key {unknown[0]!r}: the keys are "
                            f"{', '.join(FIELDS)}")
        if missing:
            raise UserError(f"{where}: departure {name!r} lacks {', '.join(missing)}")
        for f in FIELDS[:8]:
            if not isinstance(raw[f], str) or not raw[f].strip() or (f in FIELDS[:3] and "\n" in raw[f].strip()):
                raise UserError(f"{where}: departure {name!r}: {f} must be a non-empty string"
                                + (" on one line" if f in FIELDS[:3] else ""))
        for f in ("keys", "tests"):
            if not isinstance(raw[f], list) or not all(isinstance(k, str) and k.strip() for k in raw[f]):
                raise UserError(f"{where}: departure {name!r}: {f} must be a list of strings ([] for none)")
        if not SLUG.match(raw["id"]):
            raise UserError(f"{where}: departure id {raw['id']!r}: write a slug (a-z, 0-9 and -), e.g. \"model\"")
        if raw["kind"] not in KINDS:
            raise UserError(f"{where}: departure {name!r}: kind = {raw['kind']!r}: choose one of {', '.join(KINDS)}")
        if any(d.id == raw["id"] for d in out):
            raise UserError(f"{where}: two departures have id {raw['id']!r}: give each its own")
        # a long value may wrap over lines in the file: it is one paragraph in the report
        out.append(Departure(*(" ".join(raw[f].split()) for f in FIELDS[:8]), tuple(raw["keys"]),
                             tuple(raw["tests"])))
    return out


def check_keys(ledger: list[Departure], known: list[str], entries: list[str], where: str) -> None:
    """Each row's keys name config keys (``known``; globs allowed) and its tests pick ablation entries
    (``entries``: the experiment's run names and sweep points; names or globs, as --only takes them)."""
    from edgeml.schema import did_you_mean

    for d in ledger:
        for key in d.keys:
            if not any(key == k or fnmatch.fnmatchcase(k, key) for k in known):
                raise UserError(f"{where}: departure {d.id!r}: key {key!r} is no config key"
                                f"{did_you_mean(key, known)}: name it as \"section.key\"")
        for t in d.tests:
            if not any(t == e or fnmatch.fnmatchcase(e, t) for e in entries):
                raise UserError(f"{where}: departure {d.id!r}: tests names {t!r}, which picks no run of the "
                                "experiment: name an entry (or a glob), as --only takes it")


def check_diagnoses(claims: list[Claim], ledger: list[Departure] | None, where: str) -> list[Claim]:
    """``claims`` with each diagnosis's cause settled by the ledger rows it cites: refused where it cites none or
    an unknown id, where its cause is no cited row's kind (nor "claim"), or where the rows' kinds differ and it
    names no cause."""
    rows = {d.id: d for d in ledger or []}
    out = []
    for c in claims:
        d = c.diagnosis
        if d is None:
            out.append(c)
            continue
        unknown = [x for x in d.departures if x not in rows]
        if unknown:
            known = ", ".join(rows) or f"none: {LEDGER} has no rows"
            raise UserError(f"{where}: claim {c.text!r}: its diagnosis cites departure {unknown[0]!r}, which is no "
                            f"row of {LEDGER} (rows: {known})")
        kinds = list(dict.fromkeys(rows[x].kind for x in d.departures))
        cause = d.cause
        if cause is None:
            if len(kinds) > 1:
                raise UserError(f"{where}: claim {c.text!r}: its diagnosis cites rows of kinds "
                                f"{', '.join(kinds)}: say which is the cause (cause = \"{kinds[0]}\")")
            cause = kinds[0]
        if cause != "claim" and cause not in kinds:
            need = (f"cite a row of kind {cause} whose quote is the algorithm line our code departs from"
                    if cause == "implementation" else f"cite a row of kind {cause}, or choose among "
                    f"{', '.join(kinds + ['claim'])}")
            raise UserError(f"{where}: claim {c.text!r}: diagnosis cause {cause!r} ({CAUSES[cause]}) follows from "
                            f"no cited row ({', '.join(f'{x}: {rows[x].kind}' for x in d.departures)}): {need}")
        out.append(replace(c, diagnosis=replace(d, cause=cause)))
    return out


def differing_keys(a: dict[str, Any], b: dict[str, Any]) -> set[str]:
    """The config keys (``{"section.key": value}``, a run's whole config) in which two runs differ. Where their
    algorithms differ, that is ``run.algorithm`` alone: each algorithm's own section comes with it."""
    algorithms = {a.get("run.algorithm"), b.get("run.algorithm")}
    own = tuple(f"{x}." for x in algorithms if x) if len(algorithms) > 1 else ()
    return {k for k in set(a) | set(b) if a.get(k, _MISSING) != b.get(k, _MISSING) and not k.startswith(own)}


_MISSING = object()


def uncovered(keys: set[str], rows: list[Departure]) -> list[str]:
    """The keys of ``keys`` that none of ``rows`` names."""
    return sorted(k for k in keys if not any(d.covers(k) for d in rows))


def carried(rows: list[Departure], layers: list[dict]) -> list[Departure]:
    """The rows whose keys some of ``layers`` (planned runs' config layers, ``{section: {key: value}}``) sets."""
    keys = {f"{s}.{k}" for layer in layers for s, kv in layer.items() if isinstance(kv, dict) for k in kv}
    return [d for d in rows if any(d.covers(k) for k in keys)]


def ledger_lines(rows: list[Departure] | None, fill=lambda text: text) -> list[str]:
    """The ledger as REPORT.md opens with it: one row per departure (nothing where the experiment has none);
    ``fill`` puts the runs' numbers into the placeholders of ``ours`` and ``why``."""
    from edgeml.analysis.tables import md_table

    if not rows:
        return []
    table = [[d.what, f"{d.paper} ({d.section}: \"{d.quote}\")", fill(d.ours), fill(d.why), d.kind,
              ", ".join(f"`{t}`" for t in d.tests) or UNTESTED] for d in rows]
    return ["## Departures from the paper", "",
            md_table(["what", "the paper", "ours", "why", "kind", "tested by"], table), ""]


def claim_lines(claim: Claim, rows: list[Departure] | None, layers: list[dict], fill=lambda text: text) -> list[str]:
    """Beside a claim in REPORT.md: how the paper reads the quantity, and (a headline claim) the departures its
    runs carry."""
    lines = []
    if claim.reading is not None:
        lines.append(f"- *{claim.text}*: the paper's reading: {claim.reading.words()}.")
    if claim.headline and rows:
        found = carried(rows, layers)
        if found:
            lines.append(f"- *{claim.text}*: its runs carry departures "
                         + "; ".join(f"{d.id} ({d.what}: {fill(d.ours)} for {d.paper})" for d in found) + ".")
    return lines
