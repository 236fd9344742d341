"""SNAP and its baselines (snap.txt): weight matrices (Eq. 24, problems 21-23), EXTRA (Eqs. 6-8) in matrix and
per-peer form, the APE threshold (Sec. IV-C, Alg. 1, Eq. 27), TernGrad's ternarization, and sim runs: SNAP
with threshold 0 is SNAP-0, frames are as long as their formulas, hop-weighted cost on a hand-made path."""

from __future__ import annotations

import json

import networkx as nx
import numpy as np
import pandas as pd
import pytest
import torch

from edgeml.algorithms.snap.ape import APESchedule, changed, send_bound
from edgeml.algorithms.snap.programs import extra, peer_step
from edgeml.algorithms.snap.weights import (choose_weights, eigenvalues, initial_weights, optimal_weights, prune,
                                            second_largest)
from edgeml.algorithms.terngrad import ternarize, terngrad_scalers
from edgeml.runtime import wire


def adjacency(g: nx.Graph) -> np.ndarray:
    return nx.to_numpy_array(g, nodelist=sorted(g)).astype(bool)


def assert_valid(W: np.ndarray, adj: np.ndarray) -> None:
    n = len(W)
    assert np.allclose(W, W.T, atol=1e-12) and np.allclose(W.sum(1), 1.0, atol=1e-12)
    assert (W[~adj & ~np.eye(n, dtype=bool)] == 0).all()  # only neighbours exchange
    assert (W >= -1e-9).all() and eigenvalues(W)[0] == pytest.approx(1.0, abs=1e-7)


# ------------------------------------------------------------------------------------------ weight matrices


def test_eq24_by_hand_on_a_path():
    eps = 0.01
    W = initial_weights(adjacency(nx.path_graph(3)), eps)  # degrees 1, 2, 1
    w = 1 / (2 + eps)
    assert np.allclose(W, [[1 - w, w, 0], [w, 1 - 2 * w, w], [0, w, 1 - w]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_optimized_weights_are_valid_and_mix_faster_than_eq24(seed):
    g = nx.random_regular_graph(3, 12, seed=seed)
    adj = adjacency(g)
    base = initial_weights(adj)
    second, t23 = optimal_weights(adj, "second", start=base)
    smallest, t22 = optimal_weights(adj, "smallest", start=base)
    assert t23 > 0 and t22 > 0  # the solver's time: the set-up the runs log
    for W in (base, second, smallest):
        assert_valid(W, adj)
    for W in (second, smallest):  # each improves one eigenvalue of Eq. (20) and keeps the other
        assert second_largest(W) <= second_largest(base) + 1e-6
        assert eigenvalues(W)[-1] >= eigenvalues(base)[-1] - 1e-6
    assert second_largest(second) < second_largest(base) - 1e-3
    assert eigenvalues(smallest)[-1] > eigenvalues(base)[-1] + 1e-3
    W, info = choose_weights(adj)
    assert_valid(W, adj)
    assert info["chosen"] == "problem23" and info["setup_s"] > 0  # Sec. IV-B's pick (weights.OPTIMIZED)
    assert info["problem23"]["second_largest"] < info["eq24"]["second_largest"] - 1e-3


HUNG = [(0, 3), (0, 6), (0, 16), (0, 17), (1, 2), (1, 12), (3, 7), (4, 17), (4, 18), (4, 19), (5, 6), (7, 12), (8, 14),
        (9, 11), (9, 17), (10, 12), (10, 15), (12, 14), (13, 16), (14, 18)]
"""A 20-node graph of average degree 2 on which Clarabel's default clique merging never returned."""


def test_the_weights_of_a_graph_that_held_the_solver_are_solved_in_seconds():
    import subprocess
    import sys

    code = ("import networkx as nx, numpy as np; from edgeml.algorithms.snap.weights import choose_weights; "
            f"g = nx.Graph({HUNG!r}); W, info = choose_weights(nx.to_numpy_array(g, nodelist=range(20)) > 0); "
            "print(info['chosen'], round(float(np.linalg.eigvalsh(W)[-2]), 3))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    chosen, second = done.stdout.split()
    assert chosen in ("problem22", "problem23") and float(second) < 1


def test_unconstrained_problems_are_the_degenerate_ones():
    adj = adjacency(nx.cycle_graph(6))
    smallest, _ = optimal_weights(adj, "smallest")  # alone, (22) keeps every node to itself
    assert np.allclose(smallest, np.eye(6), atol=1e-5)
    second, _ = optimal_weights(adj, "second")  # (21) alone: weights 1/2, lambda-bar = 1 - 2 w (1 - cos(2 pi / 6))
    assert second_largest(second) == pytest.approx(0.5, abs=1e-5)
    assert eigenvalues(second)[-1] == pytest.approx(-1.0, abs=1e-5)  # and the smallest at -1: no step allowed


def test_pruning_drops_small_weights_and_keeps_w_doubly_stochastic():
    adj = adjacency(nx.cycle_graph(5))
    W = initial_weights(adj)
    W[0, 1] = W[1, 0] = 1e-9
    P = prune(W, threshold=1e-6)
    assert P[0, 1] == P[1, 0] == 0
    assert np.allclose(P.sum(1), 1.0) and np.allclose(P, P.T)


# ------------------------------------------------------------------------------------------ EXTRA


def least_squares(n: int = 6, dim: int = 4, seed: int = 0):
    rng = np.random.default_rng(seed)
    A = [rng.normal(size=(20, dim)) for _ in range(n)]
    b = [rng.normal(size=20) for _ in range(n)]
    x_star = np.linalg.lstsq(np.vstack(A), np.concatenate(b), rcond=None)[0]  # all data in one place

    def grad(x):  # f_i(x) = 1/2 |A_i x - b_i|^2, one row per server
        return np.stack([A[i].T @ (A[i] @ x[i] - b[i]) for i in range(n)])
    return grad, x_star


def test_extra_reaches_the_centralized_least_squares_optimum():
    n, dim = 6, 4
    grad, x_star = least_squares(n, dim)
    W = initial_weights(adjacency(nx.cycle_graph(n)))
    x = extra(np.zeros((n, dim)), grad, W, alpha=0.01, iterations=3000)
    assert np.abs(x - x_star).max() < 1e-6  # every server holds the optimum of the sum
    # plain decentralized gradient descent (no correction term) stays off the optimum with the same step
    y = np.zeros((n, dim))
    for _ in range(3000):
        y = W @ y - 0.01 * grad(y)
    assert np.abs(y - x_star).max() > 1e-3


def test_extra_reaches_scikit_learns_logistic_regression():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(1)
    n, per, dim, lam = 5, 40, 3, 0.1
    X = rng.normal(size=(n * per, dim))
    y = (X @ np.array([1.0, -2.0, 0.5]) + rng.normal(size=n * per) > 0).astype(float)
    C = 1 / (lam * n * per)  # sklearn: C sum_k loss_k + |w|^2 / 2 (no intercept): our sum_i f_i times C
    ref = LogisticRegression(C=C, fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y).coef_[0]

    def grad(x):  # f_i(x) = sum_{k in shard i} logloss_k / (n per) + lam / (2 n) |x|^2: the sum is sklearn's / C
        out = []
        for i in range(n):
            Xi, yi = X[i * per:(i + 1) * per], y[i * per:(i + 1) * per]
            p = 1 / (1 + np.exp(-Xi @ x[i]))
            out.append(Xi.T @ (p - yi) / (n * per) + lam / n * x[i])
        return np.stack(out)

    W, _ = choose_weights(adjacency(nx.path_graph(n)))
    x = extra(np.zeros((n, dim)), grad, W, alpha=1.0, iterations=4000)
    assert np.abs(x - ref).max() < 1e-6


def test_per_peer_updates_are_the_matrix_iteration():
    """Each peer's update from its disagreement with its neighbours (``peer_step``) is Eq. (6) row by row."""
    n, dim = 6, 4
    grad, _ = least_squares(n, dim)
    W = initial_weights(adjacency(nx.cycle_graph(n)))
    x0 = np.random.default_rng(3).normal(size=(n, dim))
    for iterations in (1, 2, 7):
        want = extra(x0, grad, W, alpha=0.01, iterations=iterations)
        x, prev = x0, None
        for _ in range(iterations):
            D = W @ x - x  # sum_j w_ij (x_j - x_i): every value received
            g = grad(x)
            x, prev = peer_step(x, D, g, 0.01, prev), (x, D, g)
        assert np.allclose(x, want, rtol=0, atol=1e-12)


def test_restarting_extra_everywhere_keeps_its_optimum_and_restarting_one_peer_moves_it():
    """Why SNAP's APE stages end together (``stages = "restart"``): EXTRA restarted at every peer from where it
    is still converges to the centralized optimum; a restart at one peer alone drops its share of the
    accumulated correction and the peers settle elsewhere."""
    n, dim = 6, 4
    grad, x_star = least_squares(n, dim)
    W = initial_weights(adjacency(nx.cycle_graph(n)))

    def run(restart_rows):
        x, prev = np.zeros((n, dim)), None
        for k in range(4000):
            D = W @ x - x
            g = grad(x)
            step = peer_step(x, D, g, 0.01, prev)
            if prev is not None and k % 50 == 0 and k <= 500:  # a restart: these rows take EXTRA's first step
                step[restart_rows] = peer_step(x, D, g, 0.01)[restart_rows]
            x, prev = step, (x, D, g)
        return x

    assert np.abs(run(list(range(n))) - x_star).max() < 1e-6
    assert np.abs(run([0]) - x_star).max() > 1e-3


def test_the_auto_round_is_twice_the_slowest_step_and_frames_asked_of_the_node():
    """``round_s = 0``: 2 x max over peers (a full-shard step + full frames to every neighbour) + 10 ms, each cost as
    the node models it at time 0 (step and message times, shard sizes, every neighbour of every peer)."""
    from types import SimpleNamespace

    from edgeml.algorithms.snap.programs import SNAPConfig, round_length

    graph = {1: [2], 2: [1, 3], 3: [2]}  # a path of three peers, ranks 1-3
    shards = [40, 80, 40]
    asked = []

    def step_time(work, *, rank, at):
        asked.append(("step", rank, at))
        return 0.01 * rank * work

    def message_time(dst, nbytes, *, src, at):
        asked.append(("message", src, dst, at))
        return 1e-6 * nbytes + (0.002 if {src, dst} == {2, 3} else 0.001)

    node = SimpleNamespace(algo=SNAPConfig(), cfg=SimpleNamespace(data=SimpleNamespace(batch_size=20)),
                           shard_size=lambda worker: shards[worker], step_time=step_time, message_time=message_time,
                           neighbours=lambda all=False, *, rank=None, at=None: graph[rank] if all else [])
    frame = wire.snap_nbytes(100, 0, 8)
    longest = max(0.01 * 1 * 2 + (1e-6 * frame + 0.001), 0.01 * 2 * 4 + (1e-6 * frame + 0.001) + (1e-6 * frame + 0.002),
                  0.01 * 3 * 2 + (1e-6 * frame + 0.002))
    assert round_length(node, [1, 2, 3], 100) == pytest.approx(2 * longest + 0.01, rel=1e-12)
    assert all(a[-1] == 0.0 for a in asked) and len(asked) == 3 + 4
    node.algo = SNAPConfig(round_s=0.5)
    assert round_length(node, [1, 2, 3], 100) == 0.5


# ------------------------------------------------------------------------------------------ selective exchange


def test_send_bound_gives_the_papers_numbers():
    # Sec. IV-C: APE threshold 3 over 10 iterations with 1 + alpha G = 1.01 -> changes below 0.28 stay; 1 -> 0.1
    assert send_bound(3, 10, 1.01) == pytest.approx(3 / sum(1.01 ** i for i in range(1, 11)))
    assert round(send_bound(3, 10, 1.01), 2) == 0.28 and round(send_bound(1, 10, 1.01), 2) == 0.09
    assert send_bound(1, 10, 1.0) == pytest.approx(0.1)


def test_ape_threshold_holds_then_shrinks_until_the_floor():
    s = APESchedule(threshold=1.0, floor=0.5, hold=10, shrink=0.9, growth=1.01, rule="ape")
    for _ in range(9):  # changes left unsent exactly at the bound: Eq. (27)'s bound reaches T after I = 10
        s.record(s.bound())
        assert s.threshold == 1.0 and s.stages == 0
    s.record(s.bound())
    assert s.threshold == pytest.approx(0.9) and s.ape == 0 and s.stages == 1
    quiet = APESchedule(threshold=1.0, floor=0.5, rule="ape")
    for _ in range(100):
        quiet.record(0.0)  # nothing left unsent: the threshold holds
    assert quiet.threshold == 1.0
    for _ in range(1000):
        s.record(s.bound())
    assert 0.5 * 0.9 <= s.threshold < 0.5  # shrinks once below... never again
    assert s.stages == 7  # 0.9^7 = 0.478 is the first value below 0.5


def test_fixed_stages_last_hold_iterations_whatever_is_left_unsent_until_the_floor():
    s = APESchedule(threshold=1.0, floor=0.5, hold=10, shrink=0.9, growth=1.01, rule="fixed")
    ends = [s.record(0.0) for _ in range(100)]  # nothing left unsent: the "ape" rule would never end a stage
    assert [i for i, e in enumerate(ends) if e] == [9, 19, 29, 39, 49, 59, 69]  # 0.9^7 = 0.478 < 0.5: no more
    assert s.stages == 7 and s.threshold == pytest.approx(0.9 ** 7)
    zero = APESchedule(threshold=0.0, floor=0.0, rule="fixed")  # SNAP-0: no threshold, no stages
    assert not any(zero.record(0.0) for _ in range(50)) and zero.stages == 0


def test_threshold_zero_sends_every_changed_parameter():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    held = torch.tensor([1.0, 2.5, 3.0, 4.0 + 1e-6])
    assert changed(x, held, 0.0).tolist() == [False, True, False, True]
    assert changed(x, held, 0.1).tolist() == [False, True, False, False]


# ------------------------------------------------------------------------------------------ TernGrad


def test_ternarization_is_unbiased_on_a_fixed_tensor():
    g = torch.tensor([0.3, -0.1, 0.0, 0.05, -0.6, 0.2, 0.9, -0.45])
    spans = [(0, 5), (5, 3)]
    _, scalers = terngrad_scalers(g, spans, clip=0.0)
    assert scalers.tolist() == pytest.approx([0.6, 0.9])
    gen = torch.Generator().manual_seed(0)
    draws = 20_000
    total = torch.zeros_like(g, dtype=torch.float64)  # 20,000 sums: float32 would round them
    s = torch.repeat_interleave(scalers, torch.tensor([5, 3]))
    for _ in range(draws):
        signs = ternarize(g, scalers, spans, gen)
        assert set(signs.unique().tolist()) <= {-1.0, 0.0, 1.0}
        total += (signs * s).double()
    mean = total / draws
    sd = (s * s - g * g).clamp(min=0).sqrt() / draws ** 0.5  # each entry: s b sign(g), b ~ Bernoulli(|g|/s)
    assert ((mean - g.double()).abs() <= 5 * sd + 1e-7).all(), (mean, g)
    assert signs[2] == 0  # a zero is never sent as +-1; the layer's largest entries always are
    assert signs[4] == -1 and signs[6] == 1


def test_terngrad_clips_each_layer_at_its_standard_deviations():
    g = torch.tensor([0.0] * 9 + [10.0])
    clipped, scalers = terngrad_scalers(g, [(0, 10)], clip=2.5)
    bound = 2.5 * float(g.std())
    assert float(scalers[0]) == pytest.approx(bound) and float(clipped[-1]) == pytest.approx(bound)
    assert torch.equal(clipped[:9], g[:9])


# ------------------------------------------------------------------------------------------ runs


def sim_run(tmp_path, algorithm: str, *extra_settings: str, name: str | None = None):
    from edgeml.config import load_config
    from edgeml.runner import run

    rounds = [f"{algorithm}.round_s=1"] if algorithm in ("snap", "snap0", "sno") else []
    cfg = load_config(overrides=[f"run.algorithm='{algorithm}'", "run.backend='sim'", "data.dataset='breast-cancer'",
                                 "data.batch_size=4", "model.name='l2svm'", "cluster.workers=8",
                                 "network.topology='random'", "network.degree=3", "stop.max_time=40",
                                 "eval.interval=1", "eval.test_samples=0", f"{algorithm}.lr=0.05",
                                 f"{algorithm}.weight_decay=0.05", *rounds, *extra_settings,
                                 f"run.out='{tmp_path}'", f"run.name='{name or algorithm}'"])
    return run(cfg, quiet=True)


def test_snap_with_threshold_zero_is_snap0_and_sno_makes_the_same_iterates(tmp_path):
    snap = sim_run(tmp_path, "snap", "snap.threshold=0.0", name="snap")
    snap0 = sim_run(tmp_path, "snap0")
    sno = sim_run(tmp_path, "sno")
    a, b, c = (pd.read_csv(p / "evals.csv") for p in (snap, snap0, sno))
    assert len(a) > 30 and a.equals(b)  # every column: models, bytes, iterations
    assert pd.read_csv(snap / "series/exchange.csv").equals(pd.read_csv(snap0 / "series/exchange.csv"))
    assert a[["loss", "accuracy", "iterations"]].equals(c[["loss", "accuracy", "iterations"]])
    assert (c.total_bytes >= a.total_bytes).all()  # SNO sends unchanged parameters too
    default = pd.read_csv(sim_run(tmp_path, "snap", name="snap-default") / "evals.csv")
    assert default.total_bytes.iloc[-1] < a.total_bytes.iloc[-1]  # the threshold holds changes back


CONVERGED = ["stop.max_time=400", "eval.interval=25"]
"""400 iterations of a stable step on a well-conditioned objective (lr 0.1, weight decay 0.3): EXTRA settles."""


@pytest.mark.slow
def test_ape_stages_restart_extra_together_changing_the_path_not_the_optimum(tmp_path):
    """With every change sent (a growth so large that the send bound is ~0), SNAP's restarts are the only
    difference from SNO: every peer restarts at the end of each ``hold``-iteration stage until the threshold's
    floor, the iterates differ meanwhile, and both settle on the same model."""
    sno = sim_run(tmp_path, "sno", *CONVERGED, "sno.lr=0.1", "sno.weight_decay=0.3")
    staged = ["snap.lr=0.1", "snap.weight_decay=0.3", "snap.growth=1e6", "snap.hold=5", "snap.epsilon=0.1"]
    snap = sim_run(tmp_path, "snap", *CONVERGED, *staged, name="restart")
    rows = pd.read_csv(snap / "series/exchange.csv")
    ends = rows[rows.restart == 1]
    stages = 22  # 0.9^22 = 0.098: the first threshold under 10% of T_0
    assert len(ends) == 8 * stages and set(ends.iteration) == {5 * k + 4 for k in range(stages)}
    assert (ends.groupby("iteration").size() == 8).all()  # at every peer alike
    a, b = pd.read_csv(sno / "evals.csv"), pd.read_csv(snap / "evals.csv")
    assert (a.loss.iloc[1:6] - b.loss.iloc[1:6]).abs().max() > 1e-4
    assert b.loss.iloc[-1] == pytest.approx(a.loss.iloc[-1], rel=1e-5)
    again = sim_run(tmp_path, "snap", *CONVERGED, *staged, "snap.stages='continue'", name="continue")
    assert pd.read_csv(again / "series/exchange.csv").restart.sum() == 0  # no restart: SNO's iterates
    assert np.allclose(pd.read_csv(again / "evals.csv").loss, a.loss, rtol=1e-6)


@pytest.mark.slow
def test_transient_link_failures_slow_the_consensus_but_keep_extras_optimum(tmp_path):
    """One-way misses that the sender learns of: the receiver keeps its old values, the sender sends the
    changes again; with the disagreement taken between published values the peers' average is untouched, so
    SNAP-0 settles where it settles without failures (with a peer's own values, Eq. 8, the receiver's stale copy
    moves that point: ``test_misses_move_the_point_with_a_peers_own_values``)."""
    common = [*CONVERGED, "snap0.lr=0.1", "snap0.weight_decay=0.3", "snap0.disagreement='published'"]
    clean = sim_run(tmp_path, "snap0", *common, name="clean")
    missed = ["network.failures='transient'", "network.failed_links=0.2"]
    lossy = sim_run(tmp_path, "snap0", *common, *missed, name="lossy")
    summary = json.loads((lossy / "summary.json").read_text())
    frames = pd.read_csv(lossy / "series/exchange.csv").messages.sum()
    assert 0.15 < summary["messages_lost"] / frames < 0.25
    a, b = pd.read_csv(clean / "evals.csv"), pd.read_csv(lossy / "evals.csv")
    assert (a.loss.iloc[1:6] - b.loss.iloc[1:6]).abs().max() > 1e-4
    assert b.loss.iloc[-1] == pytest.approx(a.loss.iloc[-1], rel=1e-5)
    assert pd.read_csv(sim_run(tmp_path, "snap0", *common, *missed, name="again") / "evals.csv").equals(b)


def test_frames_are_as_long_as_their_formulas(tmp_path):
    """Two peers: one neighbour each, so each round's row is one frame: its bytes are snap_nbytes(N, M)."""
    path = sim_run(tmp_path, "snap", "cluster.workers=2", "network.topology='complete'", "snap.threshold=1.0")
    rows = pd.read_csv(path / "series/exchange.csv")
    n = 30 * 2 + 2
    assert (rows.messages == 1).all() and rows.sent.between(0, n).all()
    assert rows.sent.nunique() > 3  # frames of many sizes, both structures among them
    want = [wire.snap_nbytes(n, n - s, 8) for s in rows.sent]
    assert rows.bytes.tolist() == want
    assert (rows.sent > n // 2).any() and (rows.sent < n // 2).any()
    nodes = pd.read_csv(path / "nodes.csv").set_index("rank")
    assert rows.groupby("rank").bytes.sum().to_dict() == nodes.bytes_sent.to_dict()
    assert rows.groupby("rank").bytes.sum().sum() == json.loads((path / "summary.json").read_text())["total_byte_hops"]


def test_parameter_server_traffic_is_bytes_times_hops_on_a_path(tmp_path):
    from edgeml.algorithms.snap.programs import ps_host

    path = sim_run(tmp_path, "peer_ps", "cluster.workers=4", "network.topology='edges'",
                   "network.edges=[[0, 1], [1, 2], [2, 3]]")
    tags = pd.read_csv(path / "messages.csv")
    ranks = [1, 2, 3, 4]  # workers 0-3 on the path 0-1-2-3
    host = ps_host(0, ranks)
    dist = {r: abs(r - host) for r in ranks}
    grads = tags[tags.tag == "grad"].set_index("rank")
    assert set(grads.index) == set(ranks) - {host}
    for r, row in grads.iterrows():
        assert row.bytes_sent == row.messages_sent * (62 * 8)  # float64 gradients
        assert row.byte_hops == row.bytes_sent * dist[r]
    model = tags[tags.tag == "model"].set_index("rank").loc[host]
    iterations = pd.read_csv(path / "evals.csv").iterations.iloc[-1]
    assert model.messages_sent == 3 * iterations
    assert model.byte_hops == iterations * 62 * 8 * sum(dist.values())


def test_terngrad_sends_two_bits_a_value_and_its_scalers(tmp_path):
    path = sim_run(tmp_path, "terngrad", "cluster.workers=4")
    tags = pd.read_csv(path / "messages.csv")
    grads = tags[tags.tag == "grad"]
    assert (grads.min_bytes == wire.ternary_nbytes(62, 2)).all() and (grads.max_bytes == grads.min_bytes).all()
    assert (tags[tags.tag == "scalers"].max_bytes == 8).all() and (tags[tags.tag == "shared"].max_bytes == 8).all()
    evals = pd.read_csv(path / "evals.csv")
    assert evals.accuracy.iloc[-1] > 0.9


def test_either_problems_solution_can_be_picked_by_name():
    adj = adjacency(nx.random_regular_graph(3, 12, seed=4))
    best, info = choose_weights(adj)
    for name in ("problem22", "problem23"):
        W, named = choose_weights(adj, pick=name)
        assert named["chosen"] == name and second_largest(W) == pytest.approx(named[name]["second_largest"])
        assert_valid(W, adj)
    W23 = choose_weights(adj, pick="problem23")[0]
    assert second_largest(W23) <= info["eq24"]["second_largest"] + 1e-9
    assert info["chosen"] == "problem23" and np.allclose(best, W23, atol=1e-9)


def test_an_iteration_budget_ends_the_run_with_every_peers_last_frames_sent(tmp_path):
    """SNO on a ring of 4 sends the same full frames every round: after N rounds, exactly N rounds of bytes."""
    path = sim_run(tmp_path, "sno", "cluster.workers=4", "network.topology='ring'", "sno.iterations=6")
    summary = json.loads((path / "summary.json").read_text())
    frame = wire.snap_nbytes(30 * 2 + 2, 0, 8)
    assert summary["status"] == "stopped" and summary["counts"]["iterations"] == 6
    assert summary["total_bytes"] == 6 * 4 * 2 * frame
    rows = pd.read_csv(path / "series/exchange.csv")
    assert sorted(rows.groupby("rank").iteration.max()) == [5, 5, 5, 5]


def test_a_step_at_the_bound_is_the_fixed_step_lr_times_one_plus_lambda_min(tmp_path):
    """snap.step = "bound" runs alpha = lr x 2 lambda_min(W~) = lr x (1 + lambda_min(W)): the same run as a fixed
    step of that size, and Problem (22)'s W (larger lambda_min) gets the larger step."""
    bound = sim_run(tmp_path, "snap0", "snap0.step='bound'", "snap0.weights='problem22'", name="bound")
    weights = pd.read_csv(bound / "series/weights.csv").iloc[0]
    smallest = weights[f"{weights.chosen}_smallest"]
    assert -1 < smallest < 1 and weights.alpha == pytest.approx(0.05 * (1 + smallest), rel=1e-12)
    assert weights.alpha > 0.05 * (1 + weights.eq24_smallest)
    fixed = sim_run(tmp_path, "snap0", f"snap0.lr={float(weights.alpha)!r}", "snap0.weights='problem22'",
                    name="fixed")
    a, b = (pd.read_csv(p / "evals.csv") for p in (bound, fixed))
    assert len(a) > 30 and a.equals(b)
    eq24 = pd.read_csv(sim_run(tmp_path, "snap0", "snap0.step='bound'", "snap0.weights='eq24'", name="eq24")
                       / "series/weights.csv").iloc[0]
    assert eq24.alpha == pytest.approx(0.05 * (1 + eq24.eq24_smallest), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_parameter_server_traffic_detours_around_a_failed_link_between_neighbours(tmp_path, seed):
    """A ring of 4 with one link down: every gradient and model still arrives (nothing lost, the budget is
    reached), each along the shortest path left, so a peer whose link to the host is down pays 3 hops."""
    from edgeml.algorithms.snap.programs import ps_host

    path = sim_run(tmp_path, "peer_ps", "cluster.workers=4", "network.topology='edges'", f"run.seed={seed}",
                   "network.edges=[[0, 1], [1, 2], [2, 3], [3, 0]]", "network.failed_links=0.25",
                   "peer_ps.iterations=20")
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["messages_lost"] == 0
    assert pd.read_csv(path / "evals.csv").iterations.iloc[-1] == 20
    host = ps_host(seed, [1, 2, 3, 4])
    grads = pd.read_csv(path / "messages.csv").query("tag == 'grad'").set_index("rank")
    hops = {r: row.byte_hops // row.bytes_sent for r, row in grads.iterrows()}
    assert all(row.byte_hops % row.bytes_sent == 0 for _, row in grads.iterrows())
    ring = nx.cycle_graph([1, 2, 3, 4])
    cuts = [e for e in ring.edges if {r: nx.shortest_path_length(nx.restricted_view(ring, [], [e]), r, host)
                                      for r in hops} == hops]
    assert len(cuts) >= 1  # the hops are those of the ring without one of its links
    assert sum(hops.values()) == (6 if host in cuts[0] else 4)  # 1 + 2 + 3 around the cut, else 1 + 1 + 2


def test_a_solved_weight_matrix_is_kept_on_disk_and_reused(tmp_path, monkeypatch) -> None:
    from edgeml.algorithms.snap import weights

    monkeypatch.setenv("EDGEML_CACHE", str(tmp_path))
    edges = ((0, 1), (1, 2), (2, 3), (3, 0), (0, 2), (3, 4))
    weights.peer_weights.cache_clear()
    W, info = weights.peer_weights(edges, 5, "optimized", 1e-6)
    kept = list((tmp_path / "snap-weights").glob("*.npz"))
    assert len(kept) == 1 and kept[0] == weights.solved_cache((edges, 5, "optimized", 1e-6))
    assert weights.solved_cache((edges, 5, "problem22", 1e-6)) != kept[0]  # the pick is part of the key

    def unsolvable(*args, **kwargs):
        raise AssertionError("solved again")

    monkeypatch.setattr(weights, "choose_weights", unsolvable)
    weights.peer_weights.cache_clear()
    W2, info2 = weights.peer_weights(edges, 5, "optimized", 1e-6)
    assert np.array_equal(W, W2) and info2 == json.loads(json.dumps(info))
    monkeypatch.undo()
    monkeypatch.setenv("EDGEML_CACHE", str(tmp_path))
    kept[0].write_bytes(b"damaged")  # a damaged entry is solved again and replaced
    weights.peer_weights.cache_clear()
    W3, _ = weights.peer_weights(edges, 5, "optimized", 1e-6)
    assert np.allclose(W, W3) and np.load(kept[0])["W"].shape == (5, 5)
    assert not list((tmp_path / "snap-weights").glob("*.part*"))
    weights.peer_weights.cache_clear()


@pytest.mark.slow
def test_misses_move_the_point_with_a_peers_own_values(tmp_path):
    """With Eq. (8)'s own values (the default) a transient miss leaves the receiver's copy stale for a round while
    the sender's own term has moved on: the disagreement is not antisymmetric then, EXTRA's correction keeps the
    gap, and SNAP-0 settles away from the point it reaches without failures (as with silent misses, below)."""
    common = [*CONVERGED, "snap0.lr=0.1", "snap0.weight_decay=0.3"]
    clean = sim_run(tmp_path, "snap0", *common, name="clean")
    lossy = sim_run(tmp_path, "snap0", *common, "network.failures='transient'", "network.failed_links=0.2",
                    name="lossy")
    a, b = pd.read_csv(clean / "evals.csv"), pd.read_csv(lossy / "evals.csv")
    settled = b.loss.iloc[-3:]
    assert (settled.max() - settled.min()) < 1e-6 * settled.mean()  # settled...
    assert abs(settled.iloc[-1] - a.loss.iloc[-1]) > 1e-4 * a.loss.iloc[-1]  # ...elsewhere


@pytest.mark.slow
def test_silent_misses_move_the_point_the_peers_agree_on(tmp_path):
    """Misses the sender is not told of (``failures = "silent"``): frames are sent, counted and lost as transient
    ones are, but the sender counts the values as held, so the two ends of a link disagree on what was sent and
    SNAP-0 settles away from the point it reaches without failures (transient misses keep it: the test above)."""
    common = [*CONVERGED, "snap0.lr=0.1", "snap0.weight_decay=0.3"]
    clean = sim_run(tmp_path, "snap0", *common, name="clean")
    silent = sim_run(tmp_path, "snap0", *common, "network.failures='silent'", "network.failed_links=0.2",
                     name="silent")
    summary = json.loads((silent / "summary.json").read_text())
    frames = pd.read_csv(silent / "series/exchange.csv").messages.sum()
    assert 0.15 < summary["messages_lost"] / frames < 0.25  # the same miss rate as transient misses
    a, b = pd.read_csv(clean / "evals.csv"), pd.read_csv(silent / "evals.csv")
    settled = b.loss.iloc[-3:]
    assert (settled.max() - settled.min()) < 1e-6 * settled.mean()  # settled...
    assert abs(settled.iloc[-1] - a.loss.iloc[-1]) > 1e-4 * a.loss.iloc[-1]  # ...elsewhere


def test_a_peers_own_term_matters_only_where_changes_go_unsent(tmp_path):
    """``disagreement = "own"`` (Eq. 8 with the peer's current values) and ``"published"`` (its values as each
    neighbour holds them) are one iteration while every changed value is sent (SNAP-0)."""
    runs = [sim_run(tmp_path, "snap0", "stop.max_time=30", f"snap0.disagreement='{d}'", name=d)
            for d in ("published", "own")]
    a, b = (pd.read_csv(p / "evals.csv") for p in runs)
    assert len(a) > 20 and a.equals(b)


@pytest.mark.slow
def test_with_its_own_values_snaps_exchange_falls_silent_and_with_published_ones_it_keeps_a_share(tmp_path):
    """At a threshold floor, the published disagreement keeps the average exact but EXTRA's correction keeps the
    values moving by about the send bound, so a share of them is sent every iteration; with the peers' own values
    (Eq. 8) the exchange falls silent as EXTRA converges (SNAP Sec. V-A), at a point near the optimum (here 2% above
    it: a larger floor than the experiments' leaves more unsent)."""
    from edgeml import rundir

    common = [*CONVERGED, "snap.lr=0.1", "snap.weight_decay=0.3", "snap.stages='continue'", "snap.epsilon=0.05"]
    paths = {d: sim_run(tmp_path, "snap", *common, f"snap.disagreement='{d}'", name=d) for d in ("published", "own")}
    late = {d: rundir.DERIVED["late_sent_fraction"](rundir.load_runs([str(p)])[0]) for d, p in paths.items()}
    assert late["own"] < 0.01 < 0.05 < late["published"]
    exact = pd.read_csv(sim_run(tmp_path, "snap0", *CONVERGED, "snap0.lr=0.1", "snap0.weight_decay=0.3",
                                name="snap0") / "evals.csv").loss.iloc[-1]
    losses = {d: pd.read_csv(p / "evals.csv").loss.iloc[-1] for d, p in paths.items()}
    assert losses["published"] == pytest.approx(exact, rel=1e-5)  # the average exact, the churn about it tiny
    assert losses["own"] == pytest.approx(exact, rel=5e-2)  # the unsent changes moved the point the peers agree on
    assert abs(losses["own"] - exact) > 10 * abs(losses["published"] - exact)


@pytest.mark.slow
def test_algorithm1_at_each_peer_restarts_a_peer_where_its_own_ape_ends_a_stage(tmp_path):
    """``stages = "peer-restart"``: a peer's stage ends where the bound of Eq. (27) reaches its threshold, as with
    ``continue``, and that peer alone restarts EXTRA there: until the first restart both runs are one run, every
    restart is a stage end of its peer, and the peers restart at different iterations."""
    common = ["snap.threshold=2.0", "snap.hold=2", "snap.epsilon=0.05", "stop.max_time=60"]
    runs = {s: sim_run(tmp_path, "snap", *common, f"snap.stages='{s}'", name=s) for s in ("continue", "peer-restart")}
    ex = {s: pd.read_csv(p / "series/exchange.csv") for s, p in runs.items()}
    alone = ex["peer-restart"]
    assert alone.restart.sum() > 0 and ex["continue"].restart.sum() == 0
    first = int(alone.loc[alone.restart == 1, "iteration"].min())
    before = [e[e.iteration <= first].reset_index(drop=True) for e in (ex["continue"], alone)]
    assert before[0].drop(columns="restart").equals(before[1].drop(columns="restart"))
    for _, rows in alone.groupby("rank"):  # a restart where the next iteration's threshold is lower
        rows = rows.sort_values("iteration")
        dropped = (rows.threshold.shift(-1) < rows.threshold).fillna(False)
        assert (rows.restart[:-1] == dropped[:-1].astype(int)).all()
    assert alone[alone.restart == 1].groupby("iteration").size().lt(8).any()  # not every peer at once


def test_the_late_share_of_values_sent_is_one_for_sno_and_lower_for_snap(tmp_path):
    """``late_sent_fraction``: sent / values over the last tenth of the iterations: exactly 1 for SNO (every
    parameter every round), below it for SNAP, whose exchange falls silent as EXTRA converges."""
    from edgeml import rundir

    paths = {a: sim_run(tmp_path, a, "stop.max_time=40") for a in ("sno", "snap")}
    runs = {a: rundir.load_runs([str(p)])[0] for a, p in paths.items()}
    late = {a: rundir.DERIVED["late_sent_fraction"](r) for a, r in runs.items()}
    assert late["sno"] == 1.0 and 0 <= late["snap"] < 1.0
    ex = pd.read_csv(paths["snap"] / "series/exchange.csv")
    tail = ex[ex.iteration >= 0.9 * (ex.iteration.max() + 1)]
    assert late["snap"] == pytest.approx(tail.sent.sum() / tail["values"].sum(), rel=1e-12)


def test_the_share_sent_at_an_iteration_reads_that_iteration_of_every_server(tmp_path):
    """``sent_fraction_at_<k>`` (SNAP Fig. 2(a): one minus it is SNAP-0's share of unchanged parameters): the values
    sent over those the frames could carry at iteration k, summed over the servers; exactly 1 for SNO at every k;
    None past the run's last iteration; names that are no family member read nothing."""
    from edgeml import rundir

    paths = {a: sim_run(tmp_path, a, "stop.max_time=20") for a in ("sno", "snap0")}
    runs = {a: rundir.load_runs([str(p)])[0] for a, p in paths.items()}
    ex = pd.read_csv(paths["snap0"] / "series/exchange.csv")
    for k in (0, 3, int(ex.iteration.max())):
        rows = ex[ex.iteration == k]
        assert len(rows) == 8  # every server's row
        assert runs["snap0"].decided(f"sent_fraction_at_{k}") == pytest.approx(rows.sent.sum() / rows["values"].sum())
        assert runs["sno"].decided(f"sent_fraction_at_{k}") == 1.0
    assert runs["snap0"].decided(f"sent_fraction_at_{int(ex.iteration.max()) + 1}") is None
    assert [rundir.derived(n) for n in ("sent_fraction_at_", "sent_fraction_at_1.5", "sent_fraction_at_x")] \
        == [None] * 3
    assert rundir.drawn_series("sent_fraction_at_15") == "exchange" and rundir.drawn_series("sent_fraction_at_") is None
