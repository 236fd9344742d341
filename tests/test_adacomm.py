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
    ("adacomm.trial_s=-1", "adacomm.trial_s"),
    ("adacomm.adapt_period_s=-1", "adacomm.adapt_period_s"),
    ("adacomm.adapt_period_s=nan", "adacomm.adapt_period_s"),
    ("adacomm.target_ratio=0", "adacomm.target_ratio"),
    ("adacomm.lr_decay=1.5", "adacomm.lr_decay"),
])
def test_config_errors_name_the_key(override, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        load_config(overrides=["run.algorithm='adacomm'", override])


def test_fixed_adacomm_names():
    assert get_algorithm("fixed-adacomm").name == "fixed_adacomm"
    with pytest.raises(UserError, match=r"fixed_adacomm\.adapt_period_s"):  # it never adapts tau
        load_config(overrides=["run.algorithm='fixed_adacomm'", "fixed_adacomm.adapt_period_s=10"])


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


def test_search_picks_the_best_reward_then_adapts(tmp_path):
    path = _run(tmp_path, "adacomm", "cluster.workers=3", "cluster.hetero='1:1:3'", "stop.max_time=8",
                "adacomm.tau_candidates=[8, 2]", "adacomm.trial_s=0.5", "adacomm.adapt_period_s=0.5")
    d = pd.read_csv(path / "series" / "decisions.csv")
    trials = d[d.name == "tau_trial"]
    assert list(trials.tau) == [8, 2] and trials.target.nunique() == 1
    assert set(trials["rule"]) <= {"curve", "slope"}
    tau0 = int(trials.tau.iloc[trials.value.argmax()])  # the first best on ties
    taus = d[d.name == "tau"]
    searched = taus[taus.time_s <= trials.time_s.max()]
    # tau runs through the candidates, then becomes tau0 when the search ends (no row if it already is)
    assert list(searched.value) == ([8, 2] if tau0 == 2 else [8, 2, 8])
    # after the search: tau = ceil(sqrt(L / L0) tau0) at every adaptation
    loss0 = d[d.name == "loss0"].value.iloc[0]
    adapt = d[d.name == "loss"]
    assert len(adapt) >= 5
    current = tau0
    for _, row in adapt.iterrows():
        new = taus[taus.time_s == row.time_s]
        if len(new):
            current = int(new.value.iloc[0])
        assert current == adapted_tau(tau0, row.value, loss0)


def test_tau_shrinks_as_the_loss_falls(tmp_path):
    path = _run(tmp_path, "adacomm", "cluster.workers=3", "cluster.hetero='1:1:3'", "stop.max_time=6",
                "adacomm.tau0=8", "adacomm.adapt_period_s=0.5")
    d = pd.read_csv(path / "series" / "decisions.csv")
    assert not (d.name == "tau_trial").any()  # tau0 given: no search
    loss0, last = d[d.name == "loss0"].value.iloc[0], d[d.name == "loss"].value.iloc[-1]
    assert last < 0.5 * loss0
    taus = list(d[d.name == "tau"].value)
    assert taus[0] == 8 and taus[-1] == adapted_tau(8, last, loss0) < 8
    assert all(b < a for a, b in zip(taus, taus[1:]))  # each change shortens it here, as the loss only falls


@pytest.mark.slow
def test_default_time_settings_follow_the_run(tmp_path):
    """Left at 0, trial_s is one time unit and adapt_period_s two: 20 s / 40 = 0.5 s and 1 s in a 20 s run."""
    path = _run(tmp_path, "adacomm", "cluster.workers=2", "stop.max_time=20")
    settings = pd.read_csv(path / "series" / "settings.csv")
    assert settings[["lr_decay_s", "trial_s", "adapt_period_s"]].iloc[0].tolist() == [10.0, 0.5, 1.0]
    d = pd.read_csv(path / "series" / "decisions.csv")
    assert list(d[d.name == "tau_trial"].tau) == [1, 2, 4, 8]  # the whole search fits in the run
    assert len(d[d.name == "loss"]) >= 10
