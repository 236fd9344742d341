"""EdgeGossip and GoSGD (edgegossip.txt Sec. 2.1, 3; Eq. 1, Alg. 1-2): GoSGD's mixing conserves the weights and
averages in expectation, aggregated points are class-pure means of their subsets, the balancer on hand-made
throughputs, the accuracy-aware trainer's plan, the predictor on a known slowdown, and runs of both."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pandas as pd
import pytest
import torch

from edgeml.algorithms.edgegossip.aggregation import METHODS, aggregate, phase_ops, point_matrix, reduce, reduced_dim
from edgeml.algorithms.edgegossip.balancer import NoPlatformLeft, balance, plan_batches, rank_subsets, regroup, split
from edgeml.algorithms.edgegossip.predictor import Predictor
from edgeml.algorithms.gosgd import mix
from edgeml.config import load_config
from edgeml.errors import UserError
from edgeml.runner import run

# ------------------------------------------------------------------------------------------ GoSGD's mixing


def push(models, weights, i, j):
    """Platform i pushes to j (Blot et al.): i keeps half its weight, j mixes in the model with the other half."""
    weights[i] /= 2
    weights[j] = mix(models[j], weights[j], models[i], weights[i])


def test_mix_is_the_weighted_mean_and_adds_the_weights():
    w = torch.tensor([1.0, 4.0])
    assert mix(w, 0.25, torch.tensor([3.0, 0.0]), 0.75) == 1.0
    assert w.tolist() == [2.5, 1.0]  # (0.25 * 1 + 0.75 * 3) / 1, (0.25 * 4 + 0) / 1


def test_gossip_conserves_the_sum_of_weights_and_the_weighted_model():
    rng = random.Random(0)
    models = [torch.randn(5, dtype=torch.float64) for _ in range(6)]
    weights = [1 / 6] * 6
    weighted = sum(a * w for a, w in zip(weights, models))
    for _ in range(200):
        i, j = rng.sample(range(6), 2)
        push(models, weights, i, j)
        assert sum(weights) == pytest.approx(1.0, abs=1e-12)
        assert torch.allclose(sum(a * w for a, w in zip(weights, models)), weighted, atol=1e-12)


def test_gossip_on_a_complete_graph_averages_like_synchronous_averaging_in_expectation():
    models = [torch.tensor([float(i), float(i * i)], dtype=torch.float64) for i in range(4)]
    average = sum(models) / 4  # what synchronous averaging gives every platform
    # one exchange, every ordered pair (sender, uniformly random peer) equally likely: the expected mean model
    outcomes = []
    for i, j in itertools.permutations(range(4), 2):
        m, a = [w.clone() for w in models], [0.25] * 4
        push(m, a, i, j)
        outcomes.append(sum(m) / 4)
    assert torch.allclose(sum(outcomes) / len(outcomes), average, atol=1e-12)
    # and repeated exchanges bring every platform to the average (consensus)
    rng = random.Random(1)
    m, a = [w.clone() for w in models], [0.25] * 4
    for _ in range(400):
        i, j = rng.sample(range(4), 2)
        push(m, a, i, j)
    for _ in range(3):  # weights differ, so the weighted mean is the fixed point: it equals the average
        assert torch.allclose(sum(x * y for x, y in zip(a, m)), average, atol=1e-12)
    assert all(torch.allclose(w, average, atol=1e-3) for w in m)


# ------------------------------------------------------------------------------------------ aggregator (Eq. 1)


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    return x[:600].astype(np.float32), y[:600]


@pytest.mark.parametrize("method", list(METHODS))
def test_aggregated_points_are_class_pure_means_of_their_subsets(digits, method):
    x, y = digits
    agg = aggregate(x, y, method, ratio=10, seed=0)
    covered = np.sort(np.concatenate(agg.members))
    assert covered.tolist() == list(range(len(y)))  # the subsets partition the data
    for point, label, members in zip(agg.points, agg.labels, agg.members):
        assert len(members) and (y[members] == label).all()  # class-pure
        assert np.allclose(point, x[members].mean(0), atol=1e-5)  # Eq. 1
    assert 0.7 * len(y) / 10 <= len(agg.members) <= 1.3 * len(y) / 10  # about N / ratio of them
    coarse = aggregate(x, y, method, ratio=20, seed=0)
    assert len(coarse.members) < len(agg.members)


@pytest.mark.parametrize("svd", ["point", "dataset"])
def test_aggregated_subsets_group_similar_points(digits, svd):
    x, y = digits
    agg = aggregate(x, y, "svd_kmeans", ratio=10, seed=0, svd=svd)
    spread = np.mean([np.linalg.norm(x[g] - x[g].mean(0), axis=1).mean() for g in agg.members if len(g) > 1])
    rng = np.random.default_rng(0)
    shuffled = [rng.permutation(np.flatnonzero(y == y[g[0]]))[:len(g)] for g in agg.members if len(g) > 1]
    random_spread = np.mean([np.linalg.norm(x[g] - x[g].mean(0), axis=1).mean() for g in shuffled])
    assert spread < 0.9 * random_spread


def test_per_point_svd_keeps_each_points_largest_singular_values(digits):
    x, _ = digits
    assert point_matrix(784, (1, 28, 28)) == (28, 28) and point_matrix(3072, (3, 32, 32)) == (96, 32)
    assert point_matrix(64) == (8, 8) and point_matrix(30) == (6, 5) and point_matrix(7) == (7, 1)
    k = reduced_dim("svd", 64, 10, (1, 8, 8))
    assert k == 8  # an 8 x 8 point has 8 singular values, fewer than the paper's 10
    z = reduce(x[:5], "svd", k, seed=0, matrix=(8, 8))
    for point, features in zip(x[:5], z):
        assert np.allclose(features, np.linalg.svd(point.reshape(8, 8), compute_uv=False), rtol=1e-4, atol=1e-4)
    assert reduced_dim("svd", 784, 10, (1, 28, 28)) == 10
    assert phase_ops("reduce", "svd", n=3, d=784, k=10, m=1, matrix=(28, 28)) == 3 * 4 * 28 ** 3


def test_the_aggregator_runs_its_three_steps_through_the_phase_hook_with_their_costs(digits):
    x, y = digits
    seen = []

    def phase(name, fn, ops):
        seen.append((name, ops))
        return fn()

    aggregate(x, y, "hash_kmeans", ratio=10, phase=phase)
    assert [name for name, _ in seen] == ["reduce", "divide", "generate"]
    n, d = x.shape
    assert seen[0][1] == n * d and seen[2][1] == n * d  # hashing and Eq. 1 touch every feature once
    assert phase_ops("divide", "kmeans", n=100, d=64, k=10, m=10) == 20 * 100 * 10 * 10


# ------------------------------------------------------------------------------------------ balancer (Alg. 1)


def test_balancer_ratios_follow_the_estimated_times():
    b = balance([100, 50, 25, 100], [1000] * 4)
    assert b.ratios == (1.0, 0.5, 0.25, 1.0) and b.failed == () and b.moved == ()
    assert balance([100, 100], [1000, 500]).ratios == (0.5, 1.0)  # T = 10 and 5 s: the larger share is cut


def test_balancer_skips_failed_platforms_below_the_failure_share():
    p = [100.0] * 20
    p[3] = 0.0005  # below p_threshold = 0.001
    b = balance(p, [100] * 20, p_threshold=0.001, f_threshold=0.1)
    assert b.failed == (3,) and b.moved == ()  # 1 of 20 = 5% <= 10%: skipped, its data left out
    assert b.ratios[3] == 0.0 and all(r == 1.0 for i, r in enumerate(b.ratios) if i != 3)


def test_balancer_reassigns_the_data_of_failed_platforms_past_the_threshold():
    b = balance([100, 0, 50, 50], [1000] * 4, f_threshold=0.1)  # 1 of 4 = 25% > 10%
    assert b.failed == (1,)
    assert b.moved == ((1, 0, 0, 500), (1, 2, 500, 750), (1, 3, 750, 1000))  # in proportion to p
    assert b.sizes == (1500, 0, 1250, 1250)
    assert b.ratios == (1.0, 0.0, 0.6, 0.6)  # T = 15, 25, 25 s
    assert balance([100, float("nan"), 50, 50], [1000] * 4).failed == (1,)  # no measurement: failed
    assert balance([100, 0, 50, 50], [1000] * 4, f_threshold=0.25).moved == ()  # exactly at the share: kept


def test_balancer_with_no_platform_left_names_them():
    with pytest.raises(NoPlatformLeft, match="platforms 0, 1, 2"):
        balance([0.0, 0.0001, float("nan")], [10, 10, 10])


def test_split_is_proportional_with_largest_remainders():
    assert split(10, [1, 1, 1]) == [4, 3, 3]
    assert split(7, [2, 1]) == [5, 2]
    assert sum(split(1001, [0.3, 0.3, 0.4])) == 1001


# ------------------------------------------------------------------------------------------ trainer (Alg. 2)


def test_ranking_per_class_keeps_every_class_share_each_by_descending_loss():
    """choose = "class": any prefix of the order holds about the same share of every class, and within a class
    the subsets come in Algorithm 2's descending loss."""
    from edgeml.algorithms.edgegossip.balancer import rank_subsets_per_class

    losses = [0.9, 0.1, 0.8, 0.7, 0.2, 0.6, 0.5, 0.4, 0.3, 0.05]
    labels = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]  # six subsets of class 0, four of class 1
    order = rank_subsets_per_class(losses, labels)
    assert sorted(order) == list(range(10))
    for cls in (0, 1):  # within a class: descending loss
        mine = [i for i in order if labels[i] == cls]
        assert [losses[i] for i in mine] == sorted((losses[i] for i in mine), reverse=True)
    for n in (2, 5, 10):  # the first n hold each class in proportion, to within one subset
        kept = order[:n]
        for cls, size in ((0, 6), (1, 4)):
            assert abs(sum(labels[i] == cls for i in kept) - n * size / 10) <= 1
    assert order[:2] == [0, 6]  # the highest-loss subset of each class first
    assert rank_subsets_per_class(losses, [0] * 10) == sorted(range(10), key=lambda i: -losses[i])  # one class


def test_trainer_consumes_subsets_in_rank_order_and_stops_at_its_share():
    subsets = [np.arange(0, 3), np.arange(3, 8), np.arange(8, 10), np.arange(10, 14), np.arange(14, 20)]
    order = rank_subsets([0.1, 0.9, 0.5, 0.7, 0.3])
    assert order == [1, 3, 2, 4, 0]  # descending loss
    batches = plan_batches(subsets, order, target=0.5 * 20, b=4)
    # 5 points (>= b), 4 points, then 2 + 6: 17 >= 10 processed, so the last subset is never used
    assert [b.tolist() for b in batches] == [list(range(3, 8)), list(range(10, 14)), [8, 9, *range(14, 20)]]
    whole = plan_batches(subsets, order, target=20, b=4)
    assert [len(b) for b in whole] == [5, 4, 8, 3]  # r = 1: one pass, the last batch smaller
    assert rank_subsets([1.0, 2.0, 2.0]) == [1, 2, 0]  # ties keep their order
    # order = "shuffled": the same points, in batches of b in the given order
    again = regroup(batches, 4, np.arange(17)[::-1])
    assert [b.tolist() for b in again] == [[19, 18, 17, 16], [15, 14, 9, 8], [13, 12, 11, 10], [7, 6, 5, 4], [3]]


# ------------------------------------------------------------------------------------------ predictor (Sec. 3.3)


def test_predictor_recovers_a_known_slowdown_from_samples():
    def slowdown(u):  # a shared core (1 / (1 - u), then 2x) and some disk contention
        cpu, net, disk = u.T
        return np.where(cpu < 0.5, 1 / (1 - cpu), 2.0) * (1 + 0.2 * disk)

    rng = np.random.default_rng(0)
    loads = rng.random((400, 3)) * [1.0, 1.0, 1.0]
    t0 = 0.004
    p = Predictor(seed=0)
    for u, noise in zip(loads, rng.normal(1, 0.01, 400)):
        p.observe(u, t0 * slowdown(u[None])[0] * noise)
    p.fit()
    test = rng.random((200, 3))
    got = np.array([p.slowdown(u) for u in test])
    assert np.mean(np.abs(got / slowdown(test) - 1)) < 0.05
    assert p.slowdown([0.0, 0.0, 0.0]) == pytest.approx(1.0, abs=0.05)
    # t0 follows the measured speed: a platform now twice as slow, measured under load u
    u = [0.25, 0.0, 0.0]
    p.calibrate(u, 2 * t0 * slowdown(np.array([u]))[0])
    assert p.t0 == pytest.approx(2 * t0, rel=0.05)
    assert p.predict([0.75, 0.0, 0.0]) == pytest.approx(2 * t0 * 2.0, rel=0.05)


def test_predictor_is_neutral_until_it_has_samples():
    p = Predictor()
    assert p.slowdown([0.9, 0.9, 0.9]) == 1.0
    with pytest.raises(ValueError):
        p.predict([0.0, 0.0, 0.0])
    p.calibrate([0.5, 0.0, 0.0], 0.01)
    assert p.predict([0.9, 0.0, 0.0]) == 0.01


# ------------------------------------------------------------------------------------------ runs


COMMON = ["run.backend='sim'", "data.dataset='digits'", "cluster.workers=4", "cluster.hetero='1:1:2:2'",
          "eval.interval=0.5"]


def go(tmp_path, name, *overrides):
    cfg = load_config(overrides=[*COMMON, f"run.out='{tmp_path}'", f"run.name='{name}'", *overrides])
    return run(cfg, quiet=True)


@pytest.mark.slow
def test_edgegossip_balances_heterogeneous_platforms(tmp_path):
    path = go(tmp_path, "eg", "run.algorithm='edgegossip'", "stop.max_time=4")
    epochs = pd.read_csv(path / "series/epochs.csv")
    later = epochs[epochs.epoch >= 1]
    ratio = later.groupby("rank").ratio.mean()
    assert ratio.iloc[:2].min() > 0.95 and ratio.iloc[2:].between(0.45, 0.55).all()  # 2x slower: half the data
    assert (later.points >= later.ratio * later.data - 1e-9).all()
    assert (later.points < later.ratio * later.data + 64).all()  # stopped within one iteration of r_i |X_i|
    decisions = pd.read_csv(path / "series/decisions.csv")
    err = decisions[decisions.name == "prediction_error"].value
    assert len(err) and err.mean() < 0.02  # no co-running load: speeds are steady
    assert pd.read_csv(path / "evals.csv").epochs.iloc[-1] in (epochs.epoch.max(), epochs.epoch.max() + 1)
    # the slow platforms finish their epochs with the fast ones (about twice as many epochs once the aggregated
    # points are built); GoSGD's fast platforms wait for the slow ones instead
    gosgd = go(tmp_path, "go", "run.algorithm='gosgd'", "stop.max_time=4")
    assert pd.read_csv(path / "evals.csv").epochs.iloc[-1] > 1.3 * pd.read_csv(gosgd / "evals.csv").epochs.iloc[-1]
    nodes = pd.read_csv(gosgd / "nodes.csv")
    assert nodes.wait_s.iloc[:2].min() > 0.3 * nodes.alive_s.iloc[0]


@pytest.mark.slow
def test_random_or_per_class_subsets_keep_the_same_share_of_data_as_algorithm_2s_highest_loss_ones(tmp_path):
    """edgegossip.choose = "random" or "class" changes which subsets an epoch keeps, not how many points: the balancer's
    ratios of the first epoch are the same, every epoch stops within one iteration of r_i |X_i|, and the
    training differs."""
    ranked = go(tmp_path, "loss", "run.algorithm='edgegossip'", "stop.max_time=2")
    others = [go(tmp_path, how, "run.algorithm='edgegossip'", "stop.max_time=2", f"edgegossip.choose='{how}'")
              for how in ("random", "class")]
    epochs = [pd.read_csv(p / "series/epochs.csv") for p in (ranked, *others)]
    first = [e[e.epoch == 0].set_index("rank").ratio for e in epochs]
    for f in first[1:]:
        pd.testing.assert_series_equal(first[0], f)
    for e in epochs:
        assert (e.points >= e.ratio * e.data - 1e-9).all() and (e.points < e.ratio * e.data + 64).all()
    for other in others:
        assert not pd.read_csv(ranked / "evals.csv").accuracy.equals(pd.read_csv(other / "evals.csv").accuracy)


def test_edgegossip_predicts_under_co_running_load(tmp_path):
    schedule = "load.schedule=[{node = 0, kind = 'cpu', intensity = 0.4, start = 1, end = 3}]"
    path = go(tmp_path, "load", "run.algorithm='edgegossip'", "stop.max_time=4", schedule)
    epochs = pd.read_csv(path / "series/epochs.csv")
    p0 = epochs[epochs["rank"] == 1].set_index("time_s").ratio
    assert p0.loc[1.5:2.9].mean() < 0.8 * p0.loc[:1.0].iloc[1:].mean()  # a loaded platform keeps less data
    # each epoch records the co-running load it trained under, as plain numbers
    loads = epochs[["load_cpu", "load_net", "load_disk"]]
    assert all(dtype.kind == "f" for dtype in loads.dtypes)
    cpu = epochs[epochs["rank"] == 1].set_index("time_s").load_cpu
    assert cpu.loc[1.5:2.9].min() > 0.2 and cpu.loc[:0.9].max() == 0.0
    assert epochs.loc[epochs["rank"] != 1, "load_cpu"].max() == 0.0
    assert loads[["load_net", "load_disk"]].eq(0).all().all()
    # the cost of reading the load is logged once per trained epoch, on the node's clock (which sim does not move)
    decisions = pd.read_csv(path / "series/decisions.csv")
    readings = decisions[decisions.name == "load_reading_s"]
    assert len(readings) == len(epochs[epochs.failed == 0]) and (readings.value == 0).all()


@pytest.mark.slow
def test_a_crash_past_the_failure_share_moves_its_data_to_the_live_platforms(tmp_path):
    path = go(tmp_path, "crash", "run.algorithm='edgegossip'", "stop.max_time=3",
              "cluster.crashes=[{worker = 3, time = 1.0}]")
    epochs = pd.read_csv(path / "series/epochs.csv")
    after = epochs[(epochs.time_s > 1.3) & (epochs["rank"] != 4)]
    own = epochs[epochs.epoch == 0].set_index("rank").data
    assert (after.data.to_numpy() > own.loc[after["rank"]].to_numpy()).all()  # each took a slice
    evals = pd.read_csv(path / "evals.csv")
    assert evals.reassignments.iloc[-1] > 0
    assert json.loads((path / "meta.json").read_text())["status"] == "completed"


def test_no_platform_left_stops_the_run_naming_them(tmp_path):
    path = go(tmp_path, "none", "run.algorithm='edgegossip'", "stop.max_time=3", "edgegossip.p_threshold=1e12")
    meta = json.loads((path / "meta.json").read_text())
    assert meta["status"] == "stopped" and "platforms 0, 1, 2, 3" in meta["stop_reason"]


def test_bad_settings_are_refused():
    with pytest.raises(UserError, match=r"edgegossip\.ratio = 0\.5 is out of range: use a number >= 1$"):
        load_config(overrides=["run.algorithm='edgegossip'", "edgegossip.ratio=0.5"])
    with pytest.raises(UserError, match=r"gosgd\.gossip_prob = 1\.5 is out of range: use a number in \[0, 1\]"):
        load_config(overrides=["run.algorithm='gosgd'", "gosgd.gossip_prob=1.5"])
    with pytest.raises(UserError, match="edgegossip.method"):
        load_config(overrides=["run.algorithm='edgegossip'", "edgegossip.method='pca'"])


def test_epochs_figure_draws_a_line_per_platform_and_predicted_against_measured():
    from edgeml.analysis import plots

    eg = pd.DataFrame({"time_s": [1, 1, 2, 2], "rank": [1, 2, 1, 2], "epoch": [0, 0, 1, 1], "ratio": [1, 0.5, 1, 0.4],
                       "measured_s": [1.0, 1.1, 1.0, 0.9], "predicted_s": [1.0, 1.0, 1.2, 0.9]})
    go = pd.DataFrame({"time_s": [2, 2], "rank": [1, 2], "epoch": [0, 0], "ratio": [1.0, 1.0], "measured_s": [1, 2]})
    df = pd.concat([eg.assign(run="eg", method="edgegossip"), go.assign(run="go", method="gosgd")])
    fig = plots.epochs(df.assign(setting="", seed=0))
    ratios, times = fig.axes[0], fig.axes[1]
    assert len(ratios.lines) == 4  # a line per platform and run
    assert sorted(ratios.lines[1].get_ydata().tolist()) == [0.4, 0.5]
    assert times.lines[0].get_xdata().tolist() == [1.0, 1.1, 1.0, 0.9]  # measured, one point per epoch
    assert times.lines[0].get_ydata().tolist() == [1.0, 1.0, 1.2, 0.9]  # predicted


def test_epochs_figure_draws_the_prediction_error_against_the_co_running_load():
    from edgeml.analysis import plots

    # two CPU-loaded epochs at 0.3 (errors 10% and 30%), one I/O epoch at 0.8 (disk busiest; 50%), one idle
    eg = pd.DataFrame({"time_s": [1, 1, 2, 2], "rank": [1, 2, 1, 2], "epoch": [0, 0, 1, 1], "ratio": [1, 1, 1, 1],
                       "measured_s": [1.0, 1.0, 2.0, 1.0], "predicted_s": [1.1, 1.3, 1.0, 1.0],
                       "load_cpu": [0.3, 0.31, 0.1, 0.0], "load_net": [0.0, 0.0, 0.5, 0.0],
                       "load_disk": [0.0, 0.0, 0.8, 0.01]})
    fig = plots.epochs(eg.assign(run="eg", method="edgegossip", setting="", seed=0))
    assert len(fig.axes) >= 3
    errors = fig.axes[2]
    means = {line.get_label(): (line.get_xdata().tolist(), line.get_ydata().tolist())
             for line in errors.lines if not line.get_label().startswith("_")}
    assert means["CPU"][0] == [0.3] and means["CPU"][1] == pytest.approx([20.0])  # mean of 10% and 30%
    assert means["I/O"] == ([0.8], [50.0])
    assert means["idle"] == ([0.0], [0.0])
    # runs that recorded no load keep the two panels
    fig = plots.epochs(eg.drop(columns=["load_cpu", "load_net", "load_disk"]).assign(run="eg", method="edgegossip",
                                                                                   setting="", seed=0))
    assert len([ax for ax in fig.axes if ax.has_data()]) == 2
