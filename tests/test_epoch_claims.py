"""Claims read at a number of completed epochs ("the model training time across different epochs", EdgeGossip
Sec. 4.1): the time each run spends on its first N epochs, and the accuracy it has there."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from edgeml.analysis.claims import parse_claim
from edgeml.analysis.compare import claim_samples, per_run_table
from edgeml.analysis.convergence import EPOCHS, Target, value_at
from edgeml.analysis.readings import claim_targets
from edgeml.analysis.verdicts import evaluate
from edgeml.errors import UserError
from edgeml.rundir import load_runs
from test_report import make_run


def with_epochs(path, epoch_s: float | None) -> None:
    """Add the evaluations' epochs counter to a hand-made run: one epoch completed every ``epoch_s`` seconds
    (None: a run that counts none)."""
    evals = pd.read_csv(path / "evals.csv")
    if epoch_s is not None:
        evals["epochs"] = (evals["time_s"] // epoch_s).astype(int)
    evals.to_csv(path / "evals.csv", index=False)


def test_the_accuracy_at_epochs_is_the_mean_of_the_evaluations_over_the_last_epoch():
    evals = pd.DataFrame({"time_s": range(8), "epochs": [0, 0, 1, 1, 2, 2, 3, 3],
                          "accuracy": [0.1, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 0.9]})
    at2 = Target(EPOCHS, 2, "first")  # the second epoch: from the first evaluation at 1 epoch to the first at 2
    assert value_at(evals, at2, "accuracy") == pytest.approx((0.5 + 0.6 + 0.7) / 3)
    assert value_at(evals, Target(EPOCHS, 1, "first"), "accuracy") == pytest.approx((0.1 + 0.3 + 0.5) / 3)
    assert value_at(evals, Target(EPOCHS, 3, "first"), "accuracy") == pytest.approx(0.8)
    assert value_at(evals, Target(EPOCHS, 4, "first"), "accuracy") is None  # never completed
    assert value_at(evals.drop(columns="epochs"), at2, "accuracy") is None
    assert str(at2) == "2 epochs completed" and at2.key == at2.short == "epochs>=2"


def claims(*raw: dict):
    return [parse_claim({"run": "fast", "baseline": "slow", **r}, "experiment.toml", "slow") for r in raw]


def test_time_for_the_same_epochs_and_the_accuracy_there_are_paired_by_seed(tmp_path):
    # five seeds: "fast" completes an epoch every 2 s, "slow" every 4 s (seed 2: 5 s); accuracy rises with
    # time for both, fast's 0.02 lower at the same time
    times = list(range(41))
    for seed in range(5):
        slow_epoch = 5.0 if seed == 2 else 4.0
        for name, epoch_s, drop in (("fast", 2.0, 0.02), ("slow", slow_epoch, 0.0)):
            acc = [min(0.9, 0.1 + 0.02 * t) - drop for t in times]
            with_epochs(make_run(tmp_path, f"{name}{seed}", seed=seed, times=times, accuracy=acc, label=name),
                        epoch_s)
    runs = load_runs([str(tmp_path)])
    time_claim, acc_claim = claims(
        {"text": "time", "metric": "time_to_target", "kind": "ratio", "paper_value": 2.0, "epochs": [8]},
        {"text": "acc", "metric": "accuracy", "kind": "difference", "direction": "higher", "margin": 0.01,
         "epochs": [8]})

    class Exp:
        targets = [Target("accuracy", 0.8)]

    (target,) = claim_targets(Exp, time_claim, None, runs)
    assert target == Target(EPOCHS, 8.0, "first")
    per_run = per_run_table(runs, Target("accuracy", 0.8))
    samples = claim_samples(runs, per_run, ["time_to_target", "accuracy"], [target])
    t = samples[samples.metric == "time_to_target"].set_index(["run", "seed"])
    assert t.loc[("fast", 0), "lo"] == 16.0 and t.loc[("slow", 0), "lo"] == 32.0 and t.loc[("slow", 2), "lo"] == 40.0
    (r,) = evaluate(time_claim, samples, target.key)
    assert r.decision.kind == "holds" and r.n == 5  # mean of 2, 2, 2.5, 2, 2 = 2.1
    assert r.measured.startswith("2.10x [") and r.words == "fast completes the epochs 2.1x as fast as slow"
    a = samples[samples.metric == "accuracy"].set_index(["run", "seed"])
    # the eighth epoch: fast's from 14 to 16 s (the mean accuracy less 0.02), slow's from 28 to 32 s: the same
    # share of training for both, however long their epochs
    assert a.loc[("fast", 0), "lo"] == pytest.approx(sum(0.1 + 0.02 * s for s in range(14, 17)) / 3 - 0.02)
    assert a.loc[("slow", 0), "lo"] == pytest.approx(0.7)
    (r,) = evaluate(acc_claim, samples, target.key)
    assert r.decision.kind == "does not hold"  # about 0.32 less accurate, far beyond the 0.01 margin
    assert "less accurate" in r.words


def test_a_run_that_never_completes_the_epochs_or_counts_none_is_censored(tmp_path):
    times, acc = list(range(11)), [0.5] * 11
    for seed in range(2):
        with_epochs(make_run(tmp_path, f"fast{seed}", seed=seed, times=times, accuracy=acc, label="fast"), 1.0)
        with_epochs(make_run(tmp_path, f"slow{seed}", seed=seed, times=times, accuracy=acc, label="slow"), 4.0)
        with_epochs(make_run(tmp_path, f"none{seed}", seed=seed, times=times, accuracy=acc, label="none"), None)
    runs = load_runs([str(tmp_path)])
    target = Target(EPOCHS, 5.0, "first")
    samples = claim_samples(runs, per_run_table(runs, Target("accuracy", 0.8)), ["time_to_target", "accuracy"],
                            [target])
    for name in ("slow", "none"):  # none: its evaluations count no epoch (the column comes with the first)
        times = samples[(samples.run == name) & (samples.metric == "time_to_target")]
        assert len(times) == 2 and (times.lo == 10.0).all() and times.hi.map(math.isinf).all()  # >= what it spent
        assert samples[(samples.run == name) & (samples.metric == "accuracy")].empty  # no accuracy there
    (c,) = claims({"text": "t", "metric": "time_to_target", "kind": "ratio", "direction": "lower", "epochs": [5]})
    (r,) = evaluate(c, samples, target.key, seeds_rule=False)
    assert r.decision.kind == "holds" and r.measured.startswith(">=")  # slow's time is only bounded below


@pytest.mark.parametrize("raw, message", [
    ({"metric": "time_to_target", "epochs": [8], "targets": [0.8]}, "takes the place of targets"),
    ({"metric": "time_to_target", "epochs": [8], "rule": "first"}, "takes the place of targets"),
    ({"metric": "final_accuracy", "epochs": [8]}, "epochs applies to"),
    ({"metric": "time_to_target", "epochs": [0]}, "whole numbers above 0"),
    ({"metric": "time_to_target", "epochs": 8}, "whole numbers above 0"),
    ({"metric": "time_to_target", "epochs": [8, 8]}, "distinct"),
    ({"metric": "time_to_target", "epochs": [[8]]}, "whole numbers above 0"),
    ({"metric": "accuracy"}, r"add epochs = \[30\]"),
])
def test_epochs_are_refused_where_they_mean_nothing(raw, message):
    with pytest.raises(UserError, match=message):
        parse_claim({"text": "c", "run": "a", "kind": "ratio", "direction": "lower", **raw}, "e.toml", "b")
