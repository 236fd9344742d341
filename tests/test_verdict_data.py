"""Verdicts as data: the words are rendered from the typed verdict, ``verdicts.csv`` carries it and reads back to
it, ``--check`` reads it alone, and a "stronger" result beyond 2x of the paper's figure owes a diagnosis."""

from __future__ import annotations

import csv
from dataclasses import replace
from types import SimpleNamespace

import pandas as pd
import pytest

from edgeml.analysis.claims import Diagnosis, parse_claim
from edgeml.analysis.readings import diagnosis_cause, undiagnosed
from edgeml.analysis.verdicts import (Verdict, evaluate, far_from_paper, owes_diagnosis, reproduced, verdict_from_row,
                                     verdict_row, verdict_words)
from edgeml.reproduce import check, render
from edgeml.reproduce.summary import read_verdicts, render_summary


def ratio_claim(paper: float, headline: bool = False, diagnosis: Diagnosis | None = None):
    c = parse_claim({"text": f"new is {paper:g}x as fast", "metric": "time_to_target", "run": "new",
                     "baseline": "base", "kind": "ratio", "paper_value": paper}, "x.toml", "base")
    return replace(c, headline=headline, diagnosis=diagnosis)


def samples(speedups: list[float]) -> pd.DataFrame:
    """Times to a target: the baseline 1000 s on every seed, the run 1000 / speedup."""
    rows = [{"run": run, "spec": run, "point": "", "seed": seed, "metric": "time_to_target", "target": "t",
             "lo": t, "hi": t, "resolution": 1.0, "unit": "s"}
            for seed, x in enumerate(speedups) for run, t in (("new", 1000.0 / x), ("base", 1000.0))]
    return pd.DataFrame(rows)


def read(claim, speedups):
    (r,) = evaluate(claim, samples(speedups), "t", rule="stays")
    return r


@pytest.mark.parametrize("speedups, paper, owes", [
    ((80.0, 85.0, 90.0, 88.0, 95.0), 7.0, True),     # ESync's shape: 88x where the paper says 7x
    ((10.0, 10.5, 11.0, 10.2, 10.8), 7.0, False),    # stronger, but within 2x of 7x
    ((2.0, 2.1, 2.05, 1.95, 2.0), 7.0, True),        # weaker: always owes one
    ((7.0, 7.1, 6.9, 7.05, 6.95), 7.0, False),       # holds
    ((1.6, 1.7, 1.65, 1.55, 1.6), 0.5, True),        # the paper's run is 2x slower, ours faster: does not hold
])
def test_a_stronger_result_owes_a_diagnosis_only_beyond_2x_of_the_papers_figure(speedups, paper, owes):
    claim = ratio_claim(paper)
    r = read(claim, list(speedups))
    assert owes_diagnosis(r.decision) == owes, r.verdict
    assert diagnosis_cause(claim, r) == ("not yet diagnosed" if owes else "")
    assert (r in undiagnosed([claim], [r])) == owes
    notes = render._notes(SimpleNamespace(exp=SimpleNamespace(claims=[claim]), cmp=None, planned=[]), [r])
    assert (f"- *{claim.text}*: **not yet diagnosed**." in notes) == owes
    # a diagnosis answers it
    diagnosed = ratio_claim(paper, diagnosis=Diagnosis("setting", "another model"))
    assert undiagnosed([diagnosed], [r]) == [] and diagnosis_cause(diagnosed, r) == ("setting" if owes else "")


def test_stronger_beyond_2x_is_read_on_the_interval_and_on_a_bound():
    far = read(ratio_claim(7.0), [80.0, 85.0, 90.0, 88.0, 95.0])
    near = read(ratio_claim(7.0), [10.0, 10.5, 11.0, 10.2, 10.8])
    assert far.kind == near.kind == "stronger"
    assert far_from_paper(far.decision) and not far_from_paper(near.decision)
    assert not reproduced(far.decision) and reproduced(near.decision)
    # the interval reaching into [p/2, 2p] keeps it within: 13x to 15x against 7x (2p = 14x)
    straddling = Verdict("stronger", point=14.2, lo=13.0, hi=15.0, unit="x", paper=7.0, n=5)
    assert not far_from_paper(straddling) and not owes_diagnosis(straddling)
    # only a lower bound known: it decides once it lies beyond 2p
    assert owes_diagnosis(Verdict("stronger", bound=">=", point=15.0, lo=12.0, hi=18.0, unit="x", paper=7.0, n=5))
    assert not owes_diagnosis(Verdict("stronger", bound=">=", point=13.0, lo=12.0, hi=14.0, unit="x", paper=7.0,
                                      n=5))
    # a change shown with its sign: the paper's +30% and ours both as shown, 2p = +60%
    assert far_from_paper(Verdict("stronger", point=0.9, lo=0.8, hi=1.0, unit="%", signed=True, paper=0.3, n=5))
    # no figure, no factor of two: a direction that holds is reproduced
    assert reproduced(Verdict("holds", point=0.2, lo=0.1, hi=0.3, unit="%", n=5))
    assert not reproduced(Verdict("inconclusive", point=0.2, lo=-0.1, hi=0.3, unit="%", n=5))


@pytest.mark.parametrize("verdict, words", [
    (Verdict("holds"), "holds"),
    (Verdict("weaker", point=0.62, lo=0.55, hi=0.69, unit="%", paper=0.8), "weaker"),
    (Verdict("holds", bound=">=", point=0.4, unit="%"), "holds (>= 40%)"),
    (Verdict("stronger", bound=">=", point=0.9, unit="%"), "stronger (>= 90%)"),
    (Verdict("does not hold", bound="<=", point=43.59, unit="x"), "does not hold (<= 43.59x)"),
    (Verdict("does not hold", bound="<=", point=-1.5, unit="%"), "does not hold (<= -150%)"),
    (Verdict("inconclusive", bound="<=", point=-207.0, unit="s"), "inconclusive (<= -207 s)"),
    (Verdict("holds", bound="<=", point=0.25, unit="%", signed=True), "holds (<= +25%)"),
    (Verdict("holds", bound=">=", point=-0.0001, unit="pp", signed=True), "holds (>= 0.0 pp)"),
    (Verdict("inconclusive", bound=">=", point=3.5e6, unit="MB"), "inconclusive (>= 3.5 MB)"),
    (Verdict("holds", bound=">=", point=0.123456, unit=""), "holds (>= 0.1235)"),
    (Verdict("inconclusive"), "inconclusive"),
    (Verdict("inconclusive", reason="censored points"), "inconclusive (censored points)"),
    (Verdict("not resolved"), "not resolved"),
    (Verdict("not measured", reason="no run 'x'"), "not measured: no run 'x'"),
    (Verdict("inconclusive", provisional="holds", n=3, seeds_needed=5), "inconclusive (3 of 5 seeds)"),
    (Verdict("inconclusive", provisional="does not hold", n=1, seeds_needed=2), "inconclusive (one seed)"),
])
def test_the_words_are_rendered_from_the_verdicts_fields(verdict, words):
    assert verdict_words(verdict) == str(verdict) == words


def test_what_the_runs_read_before_the_seed_rule_is_kept_as_data():
    r = read(ratio_claim(7.0, headline=True), [7.0, 7.1, 6.9])
    assert r.decision.kind == "inconclusive" and r.decision.provisional == "holds"
    assert r.verdict == "inconclusive (3 of 5 seeds)" and r.provisional == "holds"
    assert r.decision.rule == "stays" and r.resolution == "1 s"


def _write(tmp_path, results, claims):
    report = SimpleNamespace(exp=SimpleNamespace(claims=claims, figures={}), figures={}, out=tmp_path,
                             results=results)
    return render.write_verdicts(report)


def test_verdicts_csv_reads_back_to_the_typed_verdicts(tmp_path):
    claims = [ratio_claim(7.0, headline=True), ratio_claim(2.0, headline=True)]
    results = [read(claims[0], [80.0, 85.0, 90.0, 88.0, 95.0]), read(claims[0], [7.0, 7.1, 6.9, 7.0, 7.2]),
               read(claims[1], [7.0, 7.1, 6.9]), read(claims[1], [1.0])]
    (tmp_path / "toy").mkdir()
    path = _write(tmp_path / "toy", results, claims)
    rows = read_verdicts(path)
    assert [(r.claim, r.at, r.verdict) for r in rows] == [(x.claim, x.where, x.verdict) for x in results]
    for row, x in zip(rows, results):
        assert row.decision == x.decision
        again = verdict_from_row(verdict_row(row.decision))
        assert again == row.decision  # every digit kept: the same floats
    assert [r.cause for r in rows] == ["not yet diagnosed", "", "not yet diagnosed", "not yet diagnosed"]
    # the scoreboard: of the four headline results, the one within 2x of its figure is reproduced
    board = render_summary(tmp_path)
    assert "| [toy](toy/REPORT.md) | 4 | 4 | 1 holds, 2 inconclusive, 1 stronger | 3 | 1 of 4 |" in board, board
    assert "| **inconclusive (3 of 5 seeds)** | not yet diagnosed |" in board
    assert "| **stronger** | not yet diagnosed |" in board


def test_a_verdicts_csv_cell_that_is_no_verdict_is_refused_naming_the_claim(tmp_path):
    claim = ratio_claim(7.0)
    path = _write(tmp_path, [read(claim, [7.0, 7.1])], [claim])
    rows = list(csv.DictReader(path.open()))
    rows[0]["verdict"] = "holds (>= 40%)"  # words where the kind belongs
    _rewrite(path, rows)
    with pytest.raises(Exception, match=r"claim 'new is 7x as fast'.*verdict = 'holds \(>= 40%\)'"):
        read_verdicts(path)


def _rewrite(path, rows):
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def test_check_detects_a_changed_verdict_from_verdicts_csv_alone(tmp_path):
    """One cell edited in a copy of a verdicts.csv: ``--check`` names that claim, and only it."""
    claims = [ratio_claim(7.0), ratio_claim(2.0)]
    results = [read(claims[0], [7.0, 7.1, 6.9]), read(claims[1], [7.0, 7.1, 6.9])]
    committed = tmp_path / "results" / "toy"
    committed.mkdir(parents=True)
    path = _write(committed, results, claims)
    exp = SimpleNamespace(source=tmp_path / "experiments" / "toy.toml", paper="toy")
    assert check.compare_verdicts(check.committed_verdicts(exp, quick=False), results) == []
    rows = list(csv.DictReader(path.open()))
    assert rows[1]["verdict"] == "stronger"
    rows[1]["verdict"] = "weaker"
    _rewrite(path, rows)
    changed = check.compare_verdicts(check.committed_verdicts(exp, quick=False), results)
    assert changed == [check.Change(claims[1].text, "t", "weaker", "stronger")]
    # a bound that moves with a procs run's timing is no change: only the kind counts
    rows[1]["verdict"], rows[0]["point"] = "stronger", "6.5"
    _rewrite(path, rows)
    assert check.compare_verdicts(check.committed_verdicts(exp, quick=False), results) == []


def _run(label, seed, backend, oversubscribed=False):
    return SimpleNamespace(label=label, spec=label, seed=seed, config={"run": {"backend": backend}},
                           meta=lambda: {"oversubscribed": oversubscribed})


def test_check_counts_a_procs_read_change_only_where_the_results_lie_apart(tmp_path):
    """A claim read on procs runs (wall-clock times no two runs repeat) changes kind for ``--check`` only where
    the committed and the new intervals lie apart, and not at all where the host set a procs run's step times;
    a claim read on sim runs alone must keep its kind."""
    claim = ratio_claim(2.0)
    committed_result = read(claim, [1.7, 2.3, 2.0])  # holds, [1.7x, 2.3x]
    committed = tmp_path / "results" / "toy"
    committed.mkdir(parents=True)
    _write(committed, [committed_result], [claim])
    exp = SimpleNamespace(source=tmp_path / "experiments" / "toy.toml", paper="toy")
    old = check.committed_verdicts(exp, quick=False)
    near = read(claim, [1.5, 1.6, 1.75])  # weaker, [1.5x, 1.75x]: overlaps the committed interval
    far = read(claim, [4.0, 4.2, 4.1])    # stronger, [4.0x, 4.2x]: lies apart from it
    assert near.kind != committed_result.kind and far.kind != committed_result.kind
    sim = [_run("new", s, "sim") for s in range(3)] + [_run("base", s, "sim") for s in range(3)]
    procs = [_run("new", s, "sim") for s in range(3)] + [_run("base", s, "procs") for s in range(3)]
    loaded = procs[:-1] + [_run("base", 2, "procs", oversubscribed=True)]
    assert check.timed_claims([claim], sim) == {}
    assert check.timed_claims([claim], procs) == {claim.text: check.PROCS}
    assert check.timed_claims([claim], loaded) == {claim.text: "host-bound"}

    def counted(result, runs):
        return [c for c in check.compare_verdicts(old, [result], check.timed_claims([claim], runs)) if not c.why]

    assert counted(near, sim) and counted(far, sim)      # sim alone: every change of kind counts
    assert not counted(near, procs) and counted(far, procs)
    (noted,) = check.compare_verdicts(old, [near], check.timed_claims([claim], procs))
    assert "results overlap" in noted.why and noted.new == str(near.decision)
    assert not counted(far, loaded)                       # the host set the times: reported, not counted
    # a claim that appears or goes counts wherever it is read
    assert counted(replace(near, claim="another claim"), procs)
    # a tight interval (seeds alike) still spans procs' run-to-run spread: 0.873x against 0.905x is no change there
    tight = Verdict("does not hold", point=0.873, lo=0.872, hi=0.874, unit="x", n=2)
    assert not check._uncounted(tight, Verdict("holds", point=0.905, lo=0.903, hi=0.907, unit="x", n=2), "")
    assert check._uncounted(tight, Verdict("holds", point=0.905, lo=0.903, hi=0.907, unit="x", n=2), check.PROCS)
    assert not check._uncounted(tight, Verdict("holds", point=1.0, lo=0.99, hi=1.01, unit="x", n=2), check.PROCS)
