"""Offline tuning (``[[runs]] tunes``): the rule that chooses a candidate per setting, what the tuned runs use
beside it, the report's table, and bad ``tunes`` tables refused with one line."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from edgeml.errors import UserError
from edgeml.reproduce import reproduce
from edgeml.reproduce.load import load_experiment
from edgeml.reproduce.plan import plan
from edgeml.reproduce.tuning import choices

TUNED = """
[experiment]
paper = "toy"
seeds = [0]
target_accuracy = 0.5

[settings]
run = { backend = "sim" }
data = { dataset = "digits" }
model = { name = "mlp" }
stop = { max_time = 3 }
cluster = { workers = 2 }
eval = { interval = 1 }

[[figures]]
id = "tuning"
title = "Tuning"
panels = ["bars"]

[[runs]]
name = "tune"
algorithm = "ssp"
figure = "tuning"
seeds = [5, 6]
sweep = { "cluster.hetero" = ["H=1", "1:3"], "ssp.staleness" = [1, 4] }
tunes = { key = "ssp.staleness", by = "time_to_target", runs = { "timed" = "ssp.staleness", "alt" = "ssp.staleness" } }

[[runs]]
name = "timed"
algorithm = "ssp"
config = { ssp = { staleness = 1 } }
sweep = { "cluster.hetero" = ["H=1", "1:3"] }
points = { "cluster.hetero=1:3" = { ssp = { staleness = 4 } } }

[[runs]]
name = "alt"
algorithm = "ssp"
config = { cluster = { hetero = "1:3" }, ssp = { staleness = 2 } }
"""


@pytest.fixture
def tuned(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(TUNED)
    return str(path)


def _per_run(planned, values: dict) -> pd.DataFrame:
    """A per-run table for the tuning runs: ``values[(hetero, staleness, seed)] = (time or None, final loss)``."""
    rows = []
    for p in planned:
        if p.spec != "tune":
            continue
        time, loss = values[(p.point["cluster.hetero"], p.point["ssp.staleness"], p.seed)]
        rows.append({"run": p.name, "seed": p.seed, "censored": time is None,
                     "time_to_target": math.nan if time is None else time, "final_loss": loss,
                     "final_accuracy": 1 - loss, "best_accuracy": 1 - loss / 2, "best_loss": loss})
    return pd.DataFrame(rows)


def test_the_least_mean_time_wins_a_censored_seed_counts_as_never_and_all_censored_falls_back(tuned):
    """At H=1 staleness 4 has the lower mean time (10 against 12) but a censored seed: never; 1 wins. At 1:3
    every candidate has a censored seed: the least mean final loss decides (4: 0.5 against 0.6). The tuned runs
    at each setting are matched by their config: "timed" uses 1 at H=1 (agrees) and 4 at 1:3 (agrees); "alt"
    runs only at 1:3, with 2 (differs)."""
    exp = load_experiment(tuned)
    planned = plan(exp)
    values = {("H=1", 1, 5): (12, 0.7), ("H=1", 1, 6): (12, 0.7), ("H=1", 4, 5): (5, 0.6), ("H=1", 4, 6): (None, 0.6),
              ("1:3", 1, 5): (None, 0.6), ("1:3", 1, 6): (30, 0.6), ("1:3", 4, 5): (None, 0.4),
              ("1:3", 4, 6): (None, 0.6)}
    spec = next(s for s in exp.runs if s.name == "tune")
    found = {c.setting["cluster.hetero"]: c for c in choices(spec, planned, planned, _per_run(planned, values),
                                                              "accuracy")}
    h1, h3 = found["H=1"], found["1:3"]
    assert h1.by == "time_to_target" and h1.chosen == 1 and h1.scores[1] == (12, 2, 0) and h1.scores[4][0] == math.inf
    assert h1.used == {"timed": [1]} and h1.differs() == []
    assert h3.by == "final_accuracy" and h3.chosen == 4  # an accuracy target: the best mean final accuracy
    assert h3.used == {"timed": [4], "alt": [2]} and h3.differs() == ["alt"]
    assert h1.seeds == [5, 6]
    assert h1.pending == 0 and h3.pending == 0
    # a tuning run not finished yet: the choice at its setting is provisional, the other setting's is not
    done = [p for p in planned if not (p.spec == "tune" and p.point["cluster.hetero"] == "1:3" and p.seed == 6
                                       and p.point["ssp.staleness"] == 1)]
    partial = {c.setting["cluster.hetero"]: c for c in choices(spec, done, planned, _per_run(planned, values),
                                                                "accuracy")}
    assert partial["1:3"].pending == 1 and partial["H=1"].pending == 0
    assert partial["1:3"].scores[1][1] == 1  # one seed of candidate 1 so far


def test_a_candidate_whose_model_diverged_on_a_tuning_seed_is_never_chosen(tuned):
    """By best accuracy 4 wins at both settings, but at 1:3 its model diverged on seed 6 (its best accuracy came
    before): 1 is chosen there, and the table marks 4 "diverged 1/2"; where every candidate diverged, none is."""
    from edgeml.reproduce.tuning import table

    path = tuned.replace("toy.toml", "acc.toml")
    open(path, "w").write(TUNED.replace('by = "time_to_target"', 'by = "best_accuracy"'))
    exp = load_experiment(path)
    planned = plan(exp)
    values = {(h, s, seed): (10, 0.6 if s == 1 else 0.4) for h in ("H=1", "1:3") for s in (1, 4) for seed in (5, 6)}
    spec = next(s for s in exp.runs if s.name == "tune")
    blown = {(p.name, p.seed) for p in planned if p.spec == "tune" and p.point == {"cluster.hetero": "1:3",
                                                                                   "ssp.staleness": 4} and p.seed == 6}
    found = {c.setting["cluster.hetero"]: c for c in choices(spec, planned, planned, _per_run(planned, values),
                                                              "accuracy", blown)}
    assert found["H=1"].chosen == 4 and found["1:3"].chosen == 1 and found["1:3"].unstable == {4: 1}
    text = "\n".join(table(spec, list(found.values()), "accuracy>=0.5", quick=False))
    assert "0.8 (diverged 1/2)" in text and "is not chosen" in text
    every = {(p.name, p.seed) for p in planned if p.spec == "tune" and p.point["cluster.hetero"] == "1:3"}
    found = {c.setting["cluster.hetero"]: c for c in choices(spec, planned, planned, _per_run(planned, values),
                                                              "accuracy", every)}
    assert found["1:3"].chosen is None and found["H=1"].chosen == 4


@pytest.mark.parametrize("edge", ["none", "above"])
def test_with_edge_above_nothing_above_a_diverged_candidate_is_chosen(tmp_path, edge):
    """Staleness 1, 2 and 4 by best accuracy, 4 the best everywhere. At 1:3, 2 diverged on seed 6: without an
    edge 4 (stable on both seeds) is chosen; with edge = "above" its stability there is luck, so 1 is, and the
    table marks 4 "above the edge". The stability table names the seed; two tuning seeds are said to be too few."""
    from edgeml.reproduce.tuning import table

    path = tmp_path / "edge.toml"
    path.write_text(TUNED.replace('by = "time_to_target", ', f'by = "best_accuracy", edge = "{edge}", ')
                    .replace('"ssp.staleness" = [1, 4]', '"ssp.staleness" = [1, 2, 4]'))
    exp = load_experiment(str(path))
    planned = plan(exp)
    values = {(h, s, seed): (10, {1: 0.6, 2: 0.5, 4: 0.4}[s]) for h in ("H=1", "1:3") for s in (1, 2, 4)
              for seed in (5, 6)}
    spec = next(s for s in exp.runs if s.name == "tune")
    blown = {(p.name, p.seed) for p in planned if p.spec == "tune" and p.point == {"cluster.hetero": "1:3",
                                                                                   "ssp.staleness": 2} and p.seed == 6}
    found = {c.setting["cluster.hetero"]: c for c in choices(spec, planned, planned, _per_run(planned, values),
                                                              "accuracy", blown)}
    assert found["H=1"].chosen == 4 and found["H=1"].beyond == []
    assert found["1:3"].unstable == {2: 1} and found["1:3"].diverged_on == {2: [6]}
    assert found["1:3"].chosen == (1 if edge == "above" else 4)
    assert found["1:3"].beyond == ([4] if edge == "above" else [])
    text = "\n".join(table(spec, list(found.values()), "accuracy>=0.5", quick=False))
    assert ("0.8 (above the edge)" in text) == (edge == "above")
    assert "| cluster.hetero=1:3 | stable on all 2 | diverged on 6 | stable on all 2 |" in text
    assert "2 tuning seeds: fewer than the 3 a choice needs" in text
    assert "fewer than the" not in "\n".join(table(spec, list(found.values()), "accuracy>=0.5", quick=True))


def test_the_fallback_from_a_censored_time_looks_at_the_stable_candidates_only(tuned):
    """At H=1 candidate 4 reached the target on both seeds but diverged on one; 1 never reached it: among the
    stable candidates every one is censored, so the best mean final value decides (and 1 is chosen)."""
    exp = load_experiment(tuned)
    planned = plan(exp)
    values = {(h, s, seed): ((5 if s == 4 else None), 0.5) for h in ("H=1", "1:3") for s in (1, 4) for seed in (5, 6)}
    spec = next(s for s in exp.runs if s.name == "tune")
    blown = {(p.name, p.seed) for p in planned if p.spec == "tune" and p.point["ssp.staleness"] == 4 and p.seed == 5}
    for c in choices(spec, planned, planned, _per_run(planned, values), "accuracy", blown):
        assert c.by == "final_accuracy" and c.chosen == 1 and c.unstable == {4: 1}


@pytest.mark.parametrize("by, expect", [("final_loss", 1), ("best_accuracy", 1), ("final_accuracy", 1)])
def test_a_tie_goes_to_the_smaller_value_and_accuracies_are_the_higher_the_better(tuned, by, expect, tmp_path):
    path = tmp_path / "by.toml"
    path.write_text(TUNED.replace('by = "time_to_target"', f'by = "{by}"'))
    exp = load_experiment(str(path))
    planned = plan(exp)
    values = {(h, s, seed): (10, 0.5) for h in ("H=1", "1:3") for s in (1, 4) for seed in (5, 6)}
    values[("1:3", 4, 5)] = (10, 0.3)  # at 1:3, 4 has the lower loss and so the higher accuracies
    spec = next(s for s in exp.runs if s.name == "tune")
    found = {c.setting["cluster.hetero"]: c for c in choices(spec, planned, planned, _per_run(planned, values),
                                                              "loss")}
    assert found["H=1"].chosen == expect and found["1:3"].chosen == 4


@pytest.mark.parametrize("old, new, message", [
    ('by = "time_to_target", ', 'by = "speed", ', "tunes.by = 'speed' is not allowed: choose one of time_to_target"),
    ('key = "ssp.staleness"', 'key = "ssp.stalenes"', r"tunes.key must name one of its sweep keys \('cluster.hetero', "
                                                      r"'ssp.staleness'\), got 'ssp.stalenes'"),
    ('"timed" = "ssp.staleness", ', '"timed" = "ssp.stalenes", ', "tunes.runs names 'ssp.stalenes', which is no "
                                                                 "config key"),
    ('"timed" = "ssp.staleness", ', '"timd" = "ssp.staleness", ', "run 'tune' tunes 'timd', which is no run of this "
                                                                 "experiment: choose among timed, alt"),
    ('tunes = { ', 'tunes = { what = 1, ', "unknown key 'what' in tunes: write tunes = {"),
    ('tunes = { key = "ssp.staleness", by = "time_to_target", runs = { "timed" = "ssp.staleness", "alt" = '
     '"ssp.staleness" } }', 'tunes = "x"', "tunes must be a table: write tunes = {"),
    ('by = "time_to_target", ', 'by = nan, ', "tunes.by = nan is not a finite number"),
    ('runs = { "timed" = "ssp.staleness", "alt" = "ssp.staleness" }', 'runs = "timed"',
     "tunes.runs must name the runs it tunes and the key each takes the choice in"),
    ('by = "time_to_target", ', 'by = "time_to_target", edge = "below", ',
     "tunes.edge = 'below' is not allowed: write \"above\""),
])
def test_bad_tunes_tables_are_refused_with_one_line(tmp_path, old, new, message):
    path = tmp_path / "bad.toml"
    assert old in TUNED
    path.write_text(TUNED.replace(old, new))
    with pytest.raises(UserError, match=message):
        plan(load_experiment(str(path)))


@pytest.mark.slow
def test_the_report_tables_the_choice_beside_what_the_tuned_runs_use(tuned, tmp_path, capsys):
    """End to end: the report's row per setting has each candidate's mean time (or never), the choice in bold
    and each tuned entry's value, marked where it differs; the reproduction warns of it."""
    out = reproduce(tuned, out=tmp_path / "out", console=None)
    report = (out / "REPORT.md").read_text()
    per_run = pd.read_csv(out / "compare_runs.csv")
    exp = load_experiment(tuned)
    planned = plan(exp)
    spec = next(s for s in exp.runs if s.name == "tune")
    found = choices(spec, planned, planned, per_run, "accuracy")
    assert len(found) == 2
    assert "`tune` tunes `ssp.staleness` by the least mean time to" in report
    for c in found:
        line = next(x for x in report.splitlines() if x.startswith(f"| cluster.hetero={c.setting['cluster.hetero']} |"))
        cells = [x.strip() for x in line.strip("|").split("|")]
        assert cells[4] == str(c.chosen) and "**" in cells[2] + cells[3]
        bold = cells[2] if c.chosen == 1 else cells[3]
        assert bold.startswith("**"), line
        timed = "4" if c.setting["cluster.hetero"] == "1:3" else "1"
        assert cells[5] == timed + (" (differs)" if str(c.chosen) != timed else "")
    assert ("but alt uses ssp.staleness = 2" in capsys.readouterr().err) == any("alt" in c.differs() for c in found)


def test_any_quantity_to_the_target_tunes_as_the_time_does(tuned):
    """``by = "cost_to_target"`` (bytes x hops to the target): the least mean wins, a censored seed counts as
    never, and the table names the quantity."""
    from edgeml.reproduce.tuning import table

    path = tuned.replace("toy.toml", "cost.toml")
    open(path, "w").write(TUNED.replace('by = "time_to_target"', 'by = "cost_to_target"'))
    exp = load_experiment(path)
    planned = plan(exp)
    cost = {("H=1", 1): 300.0, ("H=1", 4): 200.0, ("1:3", 1): 300.0, ("1:3", 4): 100.0}
    frame = _per_run(planned, {(h, s, seed): (10, 0.5) for h in ("H=1", "1:3") for s in (1, 4) for seed in (5, 6)})
    frame["cost_to_target"] = [cost[(p.point["cluster.hetero"], p.point["ssp.staleness"])]
                               for p in planned if p.spec == "tune"]
    frame.loc[[i for i, p in enumerate(q for q in planned if q.spec == "tune")
               if p.point == {"cluster.hetero": "1:3", "ssp.staleness": 4} and p.seed == 6], "censored"] = True
    spec = next(s for s in exp.runs if s.name == "tune")
    found = {c.setting["cluster.hetero"]: c for c in choices(spec, planned, planned, frame, "accuracy")}
    assert found["H=1"].chosen == 4 and found["H=1"].by == "cost_to_target"
    assert found["1:3"].chosen == 1 and found["1:3"].scores[4][0] == math.inf  # the cheaper one missed on seed 6
    text = "\n".join(table(spec, list(found.values()), "accuracy>=0.5", quick=False))
    assert "by the least mean cost to accuracy>=0.5, a candidate with a censored seed counting as never" in text
