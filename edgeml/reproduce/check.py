"""``--check``: a reproduction's verdicts against the committed ones.

The committed verdicts are ``results/<paper>/verdicts.csv`` (``results/<paper>/quick/verdicts.csv`` with
``--quick``), ``results/`` lying beside the experiment file's folder (``experiments/``), read as typed verdicts
(``edgeml.reproduce.summary.read_verdicts``). A claim is matched by its text and where it was measured (the
sweep point and target); verdicts are compared by kind (``holds``, ``weaker``, ``does not hold``...), without the
bound that a run which never reached its target adds (``holds (>= 65%)``), whose number moves with a procs
run's timing.

A claim that reads a procs run (``timed_claims``) is read on wall-clock times, which no two runs repeat: its
verdict's kind may change only with a result the committed one cannot hold, so a change counts there where the
two 95% intervals (a lone number: its point), each widened to at least +-5% of its point (``PROCS_SPREAD``, how
far procs runs read apart between runs and hosts of a kind), lie apart; where they overlap, or where the host's
contention set a procs run's step times (``edgeml.analysis.compare.host_bound``: the run measured the host, not
the algorithm), the change is reported and not counted. A claim on sim runs alone must keep its kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from edgeml.analysis.compare import HOST_BOUND, host_bound
from edgeml.analysis.readings import claim_runs
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


PROCS = "procs"


class Change(NamedTuple):
    """A claim whose verdict's kind changed, appeared or went; ``why`` says why it is not counted ("": it is)."""

    claim: str
    at: str
    old: str
    new: str
    why: str = ""


def timed_claims(claims, runs) -> dict[str, str]:
    """The claims that read a procs run (of their run or baseline), by text: ``HOST_BOUND`` where the host's
    contention set one of those runs' step times, else ``PROCS``."""
    timed = {}
    for c in claims:
        procs = [r for r in claim_runs(c, runs) if r.config.get("run", {}).get("backend") == PROCS]
        if procs:
            timed[c.text] = HOST_BOUND if any(host_bound(r) for r in procs) else PROCS
    return timed


PROCS_SPREAD = 0.05
"""How far apart, relatively, two procs runs of one configuration may read a rate or a time on hosts of a kind (the
twins' samples per second: 0.96x to 1.00x of the virtual clock's between runs): a procs-read result is taken to span
at least its point +- this share."""


def _interval(v: Verdict, spread: float = 0.0) -> tuple[float, float] | None:
    if v.lo is not None and v.hi is not None:
        lo, hi = v.lo, v.hi
    elif v.point is not None:
        lo = hi = v.point
    else:
        return None
    if spread and v.point is not None:
        lo, hi = min(lo, v.point - spread * abs(v.point)), max(hi, v.point + spread * abs(v.point))
    return lo, hi


def _uncounted(old: Verdict, new: Verdict, timing: str | None) -> str:
    """Why a change of kind on a claim read on ``timing`` ("procs", "host-bound", None: sim) is not counted."""
    if timing == HOST_BOUND:
        return "a procs run it reads was host-bound (the host's contention set its step times)"
    a, b = _interval(old, PROCS_SPREAD), _interval(new, PROCS_SPREAD)
    if timing == PROCS and a and b and a[0] <= b[1] and b[0] <= a[1]:
        return (f"read on procs runs' wall-clock times, and the results overlap ([{a[0]:.3g}, {a[1]:.3g}] "
                f"committed, [{b[0]:.3g}, {b[1]:.3g}] now, each at least +-{PROCS_SPREAD:.0%})")
    return ""


def compare_verdicts(committed: Committed, results: list[Result], timed: dict[str, str] | None = None) -> list[Change]:
    """A ``Change`` for every claim whose verdict's kind changed, appeared or went; ``timed`` (``timed_claims``)
    marks the claims read on procs runs, whose changes count only where the results lie apart."""

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
            why = _uncounted(old[key], new[key], (timed or {}).get(key[0])) if key in old and key in new else ""
            changed.append(Change(key[0], key[1], str(old.get(key, "(not in the committed verdicts)")),
                                  str(new.get(key, "(not measured)")), why))
    return changed
