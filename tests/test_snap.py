"""SNAP's weight matrices (snap.txt Eq. 24, problems 22-23) and the EXTRA iteration (Eqs. 6-8)."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from edgeml.algorithms.snap import (choose_weights, eigenvalues, extra, initial_weights, optimal_weights, prune,
                                    second_largest)


def adjacency(g: nx.Graph) -> np.ndarray:
    return nx.to_numpy_array(g, nodelist=sorted(g)).astype(bool)


def assert_valid(W: np.ndarray, adj: np.ndarray) -> None:
    n = len(W)
    assert np.allclose(W, W.T, atol=1e-12) and np.allclose(W.sum(1), 1.0, atol=1e-12)
    assert (W[~adj & ~np.eye(n, dtype=bool)] == 0).all()  # only neighbours exchange
    assert (W >= -1e-9).all() and eigenvalues(W)[0] == pytest.approx(1.0, abs=1e-7)


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
    second = optimal_weights(adj, "second")
    smallest = optimal_weights(adj, "smallest")
    for W in (base, second, smallest):
        assert_valid(W, adj)
    assert second_largest(second) <= second_largest(base) + 1e-6
    assert eigenvalues(smallest)[-1] >= eigenvalues(base)[-1] - 1e-6
    W, info = choose_weights(adj)
    assert_valid(W, adj)
    assert info["chosen"] in ("problem22", "problem23")
    assert info[info["chosen"]]["score"] >= max(info["problem22"]["score"], info["problem23"]["score"]) - 1e-12


def test_pruning_drops_small_weights_and_keeps_w_doubly_stochastic():
    adj = adjacency(nx.cycle_graph(5))
    W = initial_weights(adj)
    W[0, 1] = W[1, 0] = 1e-9
    P = prune(W, threshold=1e-6)
    assert P[0, 1] == P[1, 0] == 0
    assert np.allclose(P.sum(1), 1.0) and np.allclose(P, P.T)


def test_extra_reaches_the_centralized_least_squares_optimum():
    rng = np.random.default_rng(0)
    n, dim = 6, 4
    A = [rng.normal(size=(20, dim)) for _ in range(n)]
    b = [rng.normal(size=20) for _ in range(n)]
    x_star = np.linalg.lstsq(np.vstack(A), np.concatenate(b), rcond=None)[0]  # all data in one place

    def grad(x):  # f_i(x) = 1/2 |A_i x - b_i|^2, one row per server
        return np.stack([A[i].T @ (A[i] @ x[i] - b[i]) for i in range(n)])

    W = initial_weights(adjacency(nx.cycle_graph(n)))
    x = extra(np.zeros((n, dim)), grad, W, alpha=0.01, iterations=3000)
    assert np.abs(x - x_star).max() < 1e-6  # every server holds the optimum of the sum
    # plain decentralized gradient descent (no correction term) stays off the optimum with the same step
    y = np.zeros((n, dim))
    for _ in range(3000):
        y = W @ y - 0.01 * grad(y)
    assert np.abs(y - x_star).max() > 1e-3
