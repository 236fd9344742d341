"""ADSP (adsp.txt): the reward fit, implicit momentum, balanced commits, and the reduction to local-update SGD."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import simulate
from edgeml.algorithms.adsp import fit_reward, loss_curve, mu_implicit
from edgeml.algorithms.kit import local_lr
from edgeml.config import load_config
from edgeml.errors import UserError
from edgeml.runner import run
from edgeml.train import build_job


# ------------------------------------------------------------------------------------------ pure functions


@pytest.mark.parametrize("a1, a2, a3", [(0.5, 1.0, 0.2), (1.3, 0.4, 0.05), (0.2, 2.5, 1.0)])
def test_reward_fit_recovers_known_parameters(a1, a2, a3):
    times = np.linspace(10.0, 70.0, 7)  # the fit measures t from the first sample
    losses = loss_curve(times - 10.0, a1, a2, a3)
    target = a3 + 0.5 * (losses[-1] - a3)
    r, fitted = fit_reward(times, losses, target)
    assert fitted == pytest.approx((a1, a2, a3), rel=1e-4, abs=1e-6)
    assert r == pytest.approx(a1 ** 2 / (1 / (target - a3) - a2), rel=1e-4)  # the paper's formula
    # r is the inverse of the time at which the fitted curve reaches the target
    assert loss_curve(1 / r, a1, a2, a3) == pytest.approx(target, rel=1e-6)


def test_reward_fit_with_three_samples_start_middle_end():
    t = [0.0, 30.0, 60.0]
    r, fitted = fit_reward(t, loss_curve(t, 0.1, 0.5, 0.3), 0.6)
    assert fitted == pytest.approx((0.1, 0.5, 0.3), rel=1e-4)
    assert r == pytest.approx(0.01 / (1 / 0.3 - 0.5), rel=1e-4)


def test_reward_limits():
    t = [0.0, 1.0, 2.0, 3.0]
    falling = loss_curve(t, 1.0, 1.0, 0.5)  # 1.5 -> 0.75, asymptote 0.5
    assert fit_reward(t, falling, 0.4)[0] == 0.0  # target below the asymptote: never reached
    assert fit_reward(t, falling, 2.0)[0] == math.inf  # target above the first loss: reached at once
    assert fit_reward(t, [1.0, 1.1, 1.2, 1.3], 0.5)[0] == 0.0  # rising loss: never reached
    # too few samples for the curve: the straight line through them, the family's limit
    r, fitted = fit_reward([0.0, 2.0], [1.0, 0.8], 0.5)
    assert fitted is None and r == pytest.approx(0.1 / 0.5)
    # a faster fall gives a larger reward
    assert fit_reward(t, loss_curve(t, 2.0, 1.0, 0.5), 0.6)[0] > fit_reward(t, falling, 0.6)[0]


def test_mu_implicit_by_hand():
    # p = 1 / (1 + (1 - 1/m) sum Gamma / (dC_i v_i)) with Gamma = 60, dC = (1, 2), v = (2, 3)
    # sum = 60/2 + 60/6 = 40;  p = 1 / (1 + 0.5 * 40) = 1/21
    assert mu_implicit(60.0, [1, 2], [2.0, 3.0]) == pytest.approx(20 / 21)
    mus = [mu_implicit(60.0, [r] * 3, [1.0, 1.0, 1 / 3]) for r in range(1, 30)]
    assert all(b < a for a, b in zip(mus, mus[1:]))  # decreases with the commit rate (Fig. 3(b))
    assert mu_implicit(60.0, [0, 2], [1.0, 1.0]) == 1.0


def test_local_learning_rate_decays_exponentially():
    assert local_lr(0.1, 0.5, 10.0, 0.0) == pytest.approx(0.1)
    assert local_lr(0.1, 0.5, 10.0, 20.0) == pytest.approx(0.025)
    assert local_lr(0.1, 1.0, 10.0, 1e6) == 0.1


@pytest.mark.parametrize("override, key", [
    ("adsp.epoch_s=50", "adsp.epoch_s"),
    ("adsp.check_period_s=0", "adsp.check_period_s"),
    ("adsp.loss_samples=2", "adsp.loss_samples"),
    ("adsp.target_ratio=1.0", "adsp.target_ratio"),
    ("adsp.fixed_rate=-1", "adsp.fixed_rate"),
    ("adsp.lr_decay=0", "adsp.lr_decay"),
    ("adsp.lr_decay_s=-1", "adsp.lr_decay_s"),
    ("adsp.lr_decay_s=nan", "adsp.lr_decay_s"),
    ("adsp.probe_samples=0", "adsp.probe_samples"),
    ("adsp.no_such_key=1", "adsp.no_such_key"),
])
def test_config_errors_name_the_key(override, key):
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        load_config(overrides=["run.algorithm='adsp'", "adsp.check_period_s=60", override])


# ------------------------------------------------------------------------------------------ runs


def _run(tmp_path, *overrides):
    cfg = load_config(overrides=["run.algorithm='adsp'", "run.backend='sim'", f"run.out='{tmp_path}'", *overrides])
    path = run(cfg, quiet=True)
    read = lambda name: pd.read_csv(path / "series" / f"{name}.csv")
    return path, read


@pytest.mark.parametrize("search", [True, False])
def test_commit_counts_stay_within_one_on_heterogeneous_workers(tmp_path, search):
    path, read = _run(tmp_path, "cluster.workers=4", "cluster.hetero='1:1:3:7'", "stop.max_time=12",
                      "adsp.check_period_s=0.5", "adsp.epoch_s=4", f"adsp.fixed_rate={0 if search else 4}")
    commits = read("commits")
    per = commits.pivot(index="checkpoint", columns="worker", values="commits")
    assert len(per) >= 20 and per.shape[1] == 4
    assert ((per.max(axis=1) - per.min(axis=1)) <= 1).all()  # Theorem 2: c_i roughly equal at checkpoints
    target = commits.groupby("checkpoint").target.first()
    assert ((target - per.min(axis=1)) <= 1).all()  # and they meet C_target
    nodes = pd.read_csv(path / "nodes.csv")
    workers = nodes[nodes.role == "worker"]
    assert (workers.wait_s / workers.alive_s).max() < 0.02  # no waiting
    assert workers.steps.iloc[0] > 5 * workers.steps.iloc[3]  # the fast worker trains all the time
    decisions = read("decisions")
    rates = decisions[decisions.name == "commit_rate"]
    assert len(rates) - len(per) in (0, 1)  # the last period may be cut short by the stop
    if search:
        trials = read("trials")
        assert len(trials) >= 2 and trials.reward.notna().all()
        assert rates.value.min() >= 1 and rates.value.nunique() >= 2
    else:
        assert set(rates.value) == {4}
    mu = decisions[decisions.name == "mu_implicit"].value
    assert mu.between(0, 1).all()


def test_equal_speeds_and_fixed_rate_reduce_to_periodic_local_sgd():
    """Equal speeds, fixed dC: every worker takes the same tau local steps and all commit at the same instants,
    i.e. local-update SGD with period tau, the PS applying each update on arrival (Alg. 2)."""
    M, lr = 3, 0.05
    kernel, _, status, _ = simulate("run.algorithm='adsp'", f"cluster.workers={M}", "stop.max_time=0.555",
                                    "adsp.check_period_s=0.2", "adsp.epoch_s=0.4", "adsp.fixed_rate=2",
                                    f"adsp.lr={lr}", "adsp.lr_decay=1.0")
    assert status == "completed"
    ps = kernel.nodes[kernel.roles["ps"][0]]
    stale = pd.DataFrame([r for s, r in ps.series if s == "staleness"])
    rounds = stale.groupby("time_s")
    assert len(rounds) == 5 and all(len(g) == M for _, g in rounds)  # all workers commit together
    for k, (_, g) in enumerate(rounds):  # each update is stale by the others' updates since the last pull
        assert g.steps.nunique() == 1 and list(g.staleness) == (list(range(M)) if k == 0 else [M - 1] * M)
    assert stale.steps.iloc[M] == 10  # tau = Gamma / dC / step time = 0.1 / 0.01 after the first round

    job = build_job(kernel.job.cfg)
    workers = [job.trainer(i) for i in range(M)]
    W = job.init_params.clone()
    for _, g in rounds:
        updates = {}
        for i in g.worker:
            t, U = workers[i], torch.zeros_like(W)
            for _ in range(int(g.steps.iloc[0])):
                t.gradient()
                U.add_(t.grad, alpha=lr)
                t.sgd(lr)
            updates[i] = U
        for i in g.worker:  # in order of arrival; each worker continues from W as it then is
            W.add_(updates[i], alpha=-1 / M)
            workers[i].params.copy_(W)
    assert torch.equal(ps.exposed, W)


def test_sim_runs_are_deterministic(tmp_path):
    args = ["cluster.workers=3", "cluster.hetero='1:1:3'", "stop.max_time=4", "adsp.check_period_s=0.5",
            "adsp.epoch_s=2"]
    a, read_a = _run(tmp_path / "a", *args)
    b, read_b = _run(tmp_path / "b", *args)
    pd.testing.assert_frame_equal(pd.read_csv(a / "evals.csv"), pd.read_csv(b / "evals.csv"))
    pd.testing.assert_frame_equal(read_a("decisions"), read_b("decisions"))
