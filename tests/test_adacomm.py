"""ADACOMM and Fixed ADACOMM: the tau rule, the tau0 search, the barrier, and tau = 1 equals BSP."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from edgeml.algorithms import get_algorithm
from edgeml.algorithms.adacomm import adapted_tau
from edgeml.config import load_config
from edgeml.errors import UserError
from edgeml.runner import run


def test_tau_rule_by_hand():
    assert adapted_tau(8, 0.25, 1.0) == 4  # ceil(sqrt(1/4) * 8)
    assert adapted_tau(8, 0.3, 1.0) == 5  # ceil(0.5477 * 8 = 4.38)
    assert adapted_tau(10, 1.0, 1.0) == 10
    assert adapted_tau(3, 1e-6, 1.0) == 1  # at least one local step
    assert adapted_tau(4, 2.0, 0.5) == 8  # a higher loss lengthens the period
    assert adapted_tau(4, math.nan, 1.0) == 4


@pytest.mark.parametrize("override, key", [
    ("adacomm.tau0=-1", "adacomm.tau0"),
    ("adacomm.tau_candidates=[4, 0]", "adacomm.tau_candidates"),
    ("adacomm.tau_candidates=[]", "adacomm.tau_candidates"),
    ("adacomm.trial_s=0", "adacomm.trial_s"),
    ("adacomm.adapt_period_s=-1", "adacomm.adapt_period_s"),
    ("adacomm.target_ratio=0", "adacomm.target_ratio"),
    ("adacomm.lr_decay=1.5", "adacomm.lr_decay"),
])
def test_config_errors_name_the_key(override, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        load_config(overrides=["run.algorithm='adacomm'", override])


def test_fixed_adacomm_names():
    assert get_algorithm("fixed-adacomm").name == "fixed_adacomm"
    assert load_config(overrides=["run.algorithm='fixed_adacomm'"]).algo.adapt_period_s == 0


def _run(tmp_path, algorithm, *overrides):
    cfg = load_config(overrides=[f"run.algorithm='{algorithm}'", "run.backend='sim'", f"run.out='{tmp_path}'",
                                 *overrides])
    return run(cfg, quiet=True)


@pytest.mark.parametrize("workers, hetero", [(1, "homogeneous"), (3, "1:1:3")])
def test_tau_one_equals_bsp(tmp_path, workers, hetero):
    common = [f"cluster.workers={workers}", f"cluster.hetero='{hetero}'", "stop.max_time=3"]
    bsp = _run(tmp_path, "bsp", *common)
    ada = _run(tmp_path, "fixed_adacomm", *common, "fixed_adacomm.tau0=1", "fixed_adacomm.lr_decay=1")
    cols = ["time_s", "total_steps", "loss", "accuracy"]
    a, b = pd.read_csv(bsp / "evals.csv")[cols], pd.read_csv(ada / "evals.csv")[cols]
    assert len(a) > 3 and a.loss.iloc[-1] < a.loss.iloc[0]
    pd.testing.assert_frame_equal(a, b)  # bit for bit


def test_fixed_tau_is_a_barrier_every_tau_steps(tmp_path):
    path = _run(tmp_path, "fixed_adacomm", "cluster.workers=3", "cluster.hetero='1:1:3'", "stop.max_time=3",
                "fixed_adacomm.tau0=5")
    nodes = pd.read_csv(path / "nodes.csv")
    w = nodes[nodes.role == "worker"]
    assert w.steps.max() - w.steps.min() <= 5  # everyone waits for the slowest at each round
    assert w.wait_s.iloc[0] > 0.5 * w.alive_s.iloc[0]  # the fast worker waits 2/3 of the time
    d = pd.read_csv(path / "series" / "decisions.csv")
    assert list(d[d.name == "tau"].value) == [5]


def test_search_then_adapt(tmp_path):
    path = _run(tmp_path, "adacomm", "cluster.workers=3", "cluster.hetero='1:1:3'", "stop.max_time=8",
                "adacomm.tau_candidates=[8, 2]", "adacomm.trial_s=0.5", "adacomm.adapt_period_s=0.5")
    d = pd.read_csv(path / "series" / "decisions.csv")
    trials = d[d.name == "tau_trial"]
    assert list(trials.tau) == [8, 2]
    tau0 = int(trials.tau.iloc[trials.value.argmax()])
    taus = d[d.name == "tau"]
    assert list(taus.value.iloc[:3]) == [8, 2, tau0] or (tau0 == 2 and list(taus.value.iloc[:2]) == [8, 2])
    # after the search: tau = ceil(sqrt(L / L0) tau0) at every adaptation
    loss0 = d[d.name == "loss0"].value.iloc[0]
    adapt = d[d.name == "loss"]
    assert len(adapt) >= 5
    after = taus[taus.time_s > trials.time_s.max()]
    for _, row in after.iterrows():
        L = adapt[adapt.time_s == row.time_s].value.iloc[0]
        assert row.value == adapted_tau(tau0, L, loss0)
    assert taus.value.iloc[-1] < tau0 or tau0 == 2  # the loss fell, so tau shrinks
