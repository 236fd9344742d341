"""``--check``: a reproduction's verdicts against the committed ones.

The committed report is ``results/<paper>/REPORT.md`` (``results/<paper>/quick/REPORT.md`` with ``--quick``),
``results/`` lying beside the experiment file's folder (``experiments/``). Its verdicts are read from the
claims table at the top of the report (``render._verdicts`` writes it; its ``claim``, ``at`` and ``verdict``
columns are read, whatever others it has).
A claim is matched by its text and where it was measured (the sweep point and target); verdicts are compared
by kind (``holds``, ``weaker``, ``does not hold``...), without the bound in parentheses that a run which never
reached its target adds (``holds (>= 65%)``), whose number moves with a procs run's timing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from edgeml.analysis.verdicts import HEADLINE_MARK, Result
from edgeml.errors import UserError
from edgeml.reproduce.load import Experiment, beside_experiments

HEADER = ("claim", "at", "verdict")
"""The verdicts table's columns ``--check`` reads."""


@dataclass
class Committed:
    source: Path  # the committed REPORT.md
    verdicts: list[tuple[str, str, str]]  # (claim, at, verdict) in the report's order


def committed_report(exp: Experiment, quick: bool) -> Path:
    folder = beside_experiments(exp.source) / "results" / exp.paper
    return (folder / "quick" if quick else folder) / "REPORT.md"


def committed_verdicts(exp: Experiment, quick: bool) -> Committed:
    """The committed report's verdicts; a UserError where none is committed (or it has no verdicts table)."""
    path = committed_report(exp, quick)
    if not path.is_file():
        raise UserError(f"--check: nothing is committed for {exp.paper}{' --quick' if quick else ''} ({path} does "
                        "not exist): reproduce without --check, or commit a reproduction there first")
    verdicts = parse_verdicts(path.read_text())
    if verdicts is None:
        raise UserError(f"--check: {path} has no verdicts table (with columns claim, at and verdict): "
                        "re-render it with edgeml reproduce --resume")
    return Committed(path, verdicts)


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def parse_verdicts(text: str) -> list[tuple[str, str, str]] | None:
    """(claim, at, verdict) per row of a REPORT.md's verdicts table; [] when it lists no claims, None when
    there is no such section."""
    if "## Verdicts" not in text:
        return None
    section = text.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    if not lines:
        return []
    header = _cells(lines[0])
    if not set(HEADER) <= set(header):
        return None
    at = [header.index(h) for h in HEADER]
    rows = []
    for line in lines[2:]:
        cells = _cells(line) + [""] * len(header)
        claim, where, verdict = (cells[i] for i in at)
        rows.append((claim.removeprefix(HEADLINE_MARK), where, verdict.strip("*")))
    return rows


def kind(verdict: str) -> str:
    """A verdict without the bound in parentheses: ``holds (>= 65%)`` is ``holds``."""
    return re.sub(r"\s*\([^()]*\)$", "", verdict.strip())


def compare_verdicts(committed: Committed, results: list[Result]) -> list[tuple[str, str, str, str]]:
    """(claim, at, committed verdict, new verdict) for every claim whose verdict changed, appeared or went."""
    from edgeml.reproduce.render import claim_at

    def keyed(rows):
        seen: dict[tuple[str, str], int] = {}
        out = {}
        for claim, at, verdict in rows:
            n = seen[(claim, at)] = seen.get((claim, at), 0) + 1
            out[(claim, at, n)] = verdict
        return out

    old = keyed(committed.verdicts)
    new = keyed((r.claim, claim_at(r), r.verdict) for r in results)
    changed = []
    for key in list(old) + [k for k in new if k not in old]:
        before, after = old.get(key, "(not in the committed report)"), new.get(key, "(not measured)")
        if key not in old or key not in new or kind(before) != kind(after):
            changed.append((key[0], key[1], before, after))
    return changed
