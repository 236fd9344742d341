"""Measured numbers in an experiment's prose, filled from its runs: a sentence in notes.md that states a
measurement writes a placeholder instead of the number, and the report fills it from the per-run table
(``compare_runs.csv``), so that the prose says what the runs behind the report measured.

A placeholder::

    {{ mean(total_byte_hops, "testbed-snap", seed=0) * 1e-6 :.0f }}

- a statistic over the runs' values: ``mean``, ``min``, ``max``, ``median``, or ``n`` (how many runs);
- a column of the per-run table (``final_accuracy``, ``total_byte_hops``, ``iterations_to_target``...);
- the runs: a name or glob, as ``--only`` takes them (an entry picks each of its points); ``seed=N`` keeps one
  seed;
- optionally ``* NUMBER`` (a unit: ``* 1e-6`` for MB, ``* 100`` for percent) and ``:FORMAT``, a number format
  (``.0f``, ``.3g``, ``,.0f``; default ``.4g``).

Nothing else is read: no expression is evaluated. A placeholder that does not parse is refused when the
experiment loads; one whose runs are not in the report (a quick reproduction runs fewer) reads "n/a".
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass

import pandas as pd

from edgeml.errors import UserError

OPEN, CLOSE = "{{", "}}"
PLACEHOLDER = re.compile(r"\{\{(.*?)\}\}", re.S)
STATS = {"mean": "mean", "min": "min", "max": "max", "median": "median", "n": "count"}
EXPR = re.compile(r'^\s*(?P<stat>[a-z]+)\(\s*(?P<metric>[a-z_][a-z0-9_]*)\s*,\s*"(?P<run>[^"]+)"\s*'
                  r'(?:,\s*seed\s*=\s*(?P<seed>\d+)\s*)?\)\s*(?:\*\s*(?P<scale>[0-9][0-9.]*(?:e-?[0-9]+)?)\s*)?'
                  r'(?::\s*(?P<fmt>[^\s]+)\s*)?$')
FORMAT = re.compile(r"^,?(\.\d{1,2})?[fge%]$")
EXAMPLE = '{{ mean(final_accuracy, "snap-100") }}'


@dataclass(frozen=True)
class Placeholder:
    source: str  # as written, braces included
    stat: str
    metric: str
    run: str
    seed: int | None = None
    scale: float = 1.0
    fmt: str = ".4g"

    def fill(self, per_run: pd.DataFrame | None, spec: dict[str, str]) -> str:
        """Its value from ``per_run`` (``spec``: each run name's entry, so that an entry's name picks its
        points); "n/a" where no run of it is there."""
        if per_run is None or per_run.empty:
            return "n/a"
        names = per_run["run"].astype(str)
        picked = names.map(lambda n: self.run in (n, spec.get(n)) or fnmatch.fnmatchcase(n, self.run)
                           or fnmatch.fnmatchcase(spec.get(n, ""), self.run))
        rows = per_run[picked & (per_run["seed"] == self.seed if self.seed is not None else True)]
        if self.metric not in per_run.columns:
            raise UserError(f"placeholder {self.source!r}: the runs' table has no column {self.metric!r}")
        values = pd.to_numeric(rows[self.metric], errors="coerce").dropna()
        if self.stat != "n" and values.empty:
            return "n/a"
        value = float(getattr(values, STATS[self.stat])()) * (self.scale if self.stat != "n" else 1.0)
        return format(int(value), "d") if self.stat == "n" else _format(value, self.fmt)


def _format(value: float, fmt: str) -> str:
    return "n/a" if math.isnan(value) else format(value, fmt)


def parse(text: str) -> list[Placeholder]:
    """Every placeholder of ``text``; one that does not parse is refused with the form to write."""
    found = []
    for m in PLACEHOLDER.finditer(text):
        e = EXPR.match(m.group(1))
        if e is None or e["stat"] not in STATS:
            raise UserError(f"placeholder {m.group(0)!r} does not parse: write {EXAMPLE}, with a statistic of "
                            f"{', '.join(STATS)}, optionally seed=N, * NUMBER and :FORMAT")
        fmt = e["fmt"] or ".4g"
        if not FORMAT.match(fmt):
            raise UserError(f"placeholder {m.group(0)!r}: format {fmt!r}: write a number format such as .0f, .3g "
                            "or ,.0f")
        found.append(Placeholder(m.group(0), e["stat"], e["metric"], e["run"],
                                 int(e["seed"]) if e["seed"] is not None else None,
                                 float(e["scale"]) if e["scale"] else 1.0, fmt))
    if CLOSE in PLACEHOLDER.sub("", text) or OPEN in PLACEHOLDER.sub("", text):
        raise UserError(f"an unmatched {OPEN} or {CLOSE}: write a placeholder as {EXAMPLE}")
    return found


def fill(text: str, per_run: pd.DataFrame | None, spec: dict[str, str]) -> str:
    """``text`` with each placeholder replaced by its value from the runs."""
    if OPEN not in text:
        return text
    return PLACEHOLDER.sub(lambda m: parse(m.group(0))[0].fill(per_run, spec), text)
