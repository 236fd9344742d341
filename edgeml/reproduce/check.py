"""``--check``: a reproduction's verdicts against the committed ones.

The committed verdicts are ``results/<paper>/verdicts.csv`` (``results/<paper>/quick/verdicts.csv`` with
``--quick``), ``results/`` lying beside the experiment file's folder (``experiments/``), read as typed verdicts
(``edgeml.reproduce.summary.read_verdicts``). A claim is matched by its text and where it was measured (the
sweep point and target); verdicts are compared by kind (``holds``, ``weaker``, ``does not hold``...), without the
bound that a run which never reached its target adds (``holds (>= 65%)``), whose number moves with a procs
run's timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeml.analysis.verdicts import Result, Verdict
from edgeml.errors import UserError
from edgeml.reproduce.load import beside_experiments
from edgeml.reproduce.summary import read_verdicts

VERDICTS = "verdicts.csv"


@dataclass
class Committed:
    source: Path  # the committed verdicts.csv
    verdicts: list[tuple[str, str, Verdict]]  # (claim, at, verdict) in the file's order


def committed_file(exp, quick: bool) -> Path:
    folder = beside_experiments(exp.source) / "results" / exp.paper
    return (folder / "quick" if quick else folder) / VERDICTS


def committed_verdicts(exp, quick: bool) -> Committed:
    """The committed verdicts; a UserError where none are committed (or they cannot be read)."""
    path = committed_file(exp, quick)
    if not path.is_file():
        raise UserError(f"--check: nothing is committed for {exp.paper}{' --quick' if quick else ''} ({path} does "
                        "not exist): reproduce without --check, or commit a reproduction there first")
    rows = read_verdicts(path, "--check")
    return Committed(path, [(r.claim, r.at, r.decision) for r in rows])


def compare_verdicts(committed: Committed, results: list[Result]) -> list[tuple[str, str, str, str]]:
    """(claim, at, committed verdict, new verdict) for every claim whose verdict's kind changed, appeared or
    went."""

    def keyed(rows):
        seen: dict[tuple[str, str], int] = {}
        out = {}
        for claim, at, verdict in rows:
            n = seen[(claim, at)] = seen.get((claim, at), 0) + 1
            out[(claim, at, n)] = verdict
        return out

    old = keyed(committed.verdicts)
    new = keyed((r.claim, r.where, r.decision) for r in results)
    changed = []
    for key in list(old) + [k for k in new if k not in old]:
        if key not in old or key not in new or old[key].kind != new[key].kind:
            changed.append((key[0], key[1], str(old.get(key, "(not in the committed verdicts)")),
                            str(new.get(key, "(not measured)"))))
    return changed
