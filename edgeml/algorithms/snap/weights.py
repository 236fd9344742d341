"""SNAP's weight matrix W (SNAP Sec. IV-B, Eqs. 12-24, Theorems 2-3), computed once at set-up from the whole
peer graph (the neighbour sets are known in advance).

EXTRA (Sec. IV-A, Eqs. 6-8) needs W symmetric and doubly stochastic with w_ij = 0 off the graph. Two candidates
improve on Eq. (24)'s W (``initial_weights``): problems (23) (minimize lambda_max(W) + the second-largest
eigenvalue; lambda_max(W) = 1, so this is (21)) and (22) (maximize lambda_min(W)), convex (Theorem 3), each with
the other eigenvalue held at least as good as at Eq. (24)'s W (our addition: alone, (22) returns W = I, which
never mixes, and (23) drives the smallest eigenvalue to -1, where EXTRA's step condition fails), solved with
cvxpy's bundled conic solver (CLARABEL, SCS as the fallback). ``optimized`` is Problem (23)'s (``OPTIMIZED``
says why); weights below ``prune`` drop their edge (Sec. IV-D, neighbour planning). The solver's own time is
the set-up time, which the peers log in the ``weights`` series with the matrices' eigenvalues; it is not
training time (the round clock starts after it).

EXTRA converges for alpha < 2 mu_g lambda_min(W~) / L_f^2 (Sec. IV-A, from Eq. 10; W~ = (W + I) / 2, Eq. 7), so
a W with a larger lambda_min allows a larger step: the peers' ``step = "bound"`` (``programs.py``) uses it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import zipfile
from pathlib import Path

import numpy as np

from edgeml.cache import cache_dir
from edgeml.errors import UserError


def _check(adj: np.ndarray) -> np.ndarray:
    adj = np.asarray(adj, dtype=bool)
    if adj.ndim != 2 or adj.shape[0] != adj.shape[1] or not (adj == adj.T).all() or adj.diagonal().any():
        raise ValueError("adjacency must be a symmetric square matrix with an empty diagonal")
    return adj


def initial_weights(adj: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    """Eq. (24): w_ij = 1 / (max(deg(i), deg(j)) + eps) for neighbours, 0 for others, 1 - (row's others) on the
    diagonal."""
    adj = _check(adj)
    if not eps > 0:
        raise ValueError("eps must be > 0")
    deg = adj.sum(1)
    W = np.where(adj, 1.0 / (np.maximum.outer(deg, deg) + eps), 0.0)
    np.fill_diagonal(W, 1.0 - W.sum(1))
    return W


def eigenvalues(W: np.ndarray) -> np.ndarray:
    """Eigenvalues of a symmetric W, descending."""
    return np.sort(np.linalg.eigvalsh(W))[::-1]


def second_largest(W: np.ndarray) -> float:
    """lambda-bar_max(W): the largest eigenvalue after the one of the consensus direction (1 for these W)."""
    return float(eigenvalues(W)[1])


def optimal_weights(adj: np.ndarray, objective: str, nonnegative: bool = True,
                    start: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """Problem (21)/(23) (``objective = "second"``: minimize the second-largest eigenvalue) or (22)
    (``"smallest"``: maximize the smallest eigenvalue) over symmetric doubly stochastic W on the graph; returns
    (W, the seconds cvxpy and its solver took).

    W = I - sum_e w_e (u_i - u_j)(u_i - u_j)^T over the graph's links e = (i, j): symmetric, rows summing to 1
    and zero off the graph by construction, so only the link weights are variables. With lambda_max(W) = 1
    (Eq. 12), (23)'s lambda_max(W) + lambda-bar_max(W) is minimized as lambda_max(W - 2 11^T / N) (the consensus
    direction moved to eigenvalue -1, below every other), one matrix inequality (cvxpy's
    ``lambda_sum_largest`` costs an N x N matrix variable more: 3x slower at N = 60).
    "Doubly stochastic" is read with non-negative entries (``nonnegative``); the fastest-mixing literature also
    allows negative weights.

    With ``start`` (a feasible W: Eq. 24's, the paper's starting point) the other eigenvalue of Eq. (20) is held
    at least as good as at ``start``: alone, (22) is solved by W = I (lambda_min = 1, but no mixing at all), and
    (23) drives lambda_min(W) toward -1, which shrinks the step EXTRA allows (alpha < 2 lambda_min(W~) / L_f,
    Sec. IV-A)."""
    import cvxpy as cp
    import scipy.sparse as sp

    adj = _check(adj)
    n = len(adj)
    links = np.argwhere(np.triu(adj))
    m = len(links)
    if m == 0:
        return np.eye(n), 0.0
    rows, cols, vals = [], [], []
    for e, (i, j) in enumerate(links):
        rows += [i * n + i, j * n + j, i * n + j, j * n + i]
        cols += [e] * 4
        vals += [1.0, 1.0, -1.0, -1.0]
    laplacians = sp.csr_matrix((vals, (rows, cols)), shape=(n * n, m))  # vec(W) = vec(I) - laplacians @ w
    w = cp.Variable(m)
    W = cp.reshape(np.eye(n).reshape(-1) - laplacians @ w, (n, n), order="C")
    incidence = sp.csr_matrix((np.ones(2 * m), (links.reshape(-1), np.repeat(np.arange(m), 2))), shape=(n, m))
    constraints = [w >= 0, incidence @ w <= 1] if nonnegative else []  # off-diagonal and diagonal >= 0
    t = cp.Variable()
    eye, consensus = np.eye(n), 2 * np.ones((n, n)) / n
    if objective == "second":
        constraints.append(W - consensus << t * eye)
        if start is not None:
            constraints.append(W >> float(eigenvalues(start)[-1]) * eye)
        problem = cp.Problem(cp.Minimize(t), constraints)
    elif objective == "smallest":
        constraints.append(W >> t * eye)
        if start is not None:
            constraints.append(W - consensus << float(eigenvalues(start)[1]) * eye)
        problem = cp.Problem(cp.Maximize(t), constraints)
    else:
        raise ValueError(f"objective {objective!r}: use 'second' (problem 23) or 'smallest' (problem 22)")
    for solver in ("CLARABEL", "SCS"):
        try:
            problem.solve(solver=solver, **SOLVER_OPTIONS.get(solver, {}))
        except cp.error.SolverError:
            continue
        if problem.status in ("optimal", "optimal_inaccurate") and w.value is not None:
            seconds = (problem.compilation_time or 0.0) + (problem.solver_stats.solve_time or 0.0)
            weights = np.clip(w.value, 0.0, None) if nonnegative else w.value
            return symmetrize(np.eye(n) - (laplacians @ weights).reshape(n, n)), seconds
    raise UserError(f"the weight-matrix problem ({objective}) could not be solved: status {problem.status}")


SOLVER_OPTIONS = {"CLARABEL": {"chordal_decomposition_merge_method": "none"}}
"""Clarabel's default merging of the cliques of a chordal decomposition (``clique_graph``, Clarabel 0.11) never
returns on some sparse graphs (a 20-node graph of average degree 2 held it for minutes, growing past 7 GB);
without merging, every graph tried (10-100 nodes, degree 2-5) solves, and faster (60 nodes: 10 s against 13 s)."""


def symmetrize(W: np.ndarray) -> np.ndarray:
    """W made exactly symmetric with rows summing to 1 (the solver's answer is so up to its tolerance)."""
    W = (W + W.T) / 2.0
    np.fill_diagonal(W, 0.0)
    np.fill_diagonal(W, 1.0 - W.sum(1))
    return W


def prune(W: np.ndarray, threshold: float = 1e-6) -> np.ndarray:
    """Off-diagonal weights below ``threshold`` become 0 (the edge is dropped); the diagonal refills each row."""
    W = W.copy()
    small = (np.abs(W) < threshold) & ~np.eye(len(W), dtype=bool)
    W[small] = 0.0
    return symmetrize(W)


OPTIMIZED = "problem23"
"""The candidate ``optimized`` keeps: Problem (23)'s, on every graph. SNAP Sec. IV-B keeps "the solution that
can result in the larger convergence rate" of problems (22) and (23). The paper's (22) has one solution, W = I
(lambda_min(W) <= lambda_max(W) = 1, equal only when every eigenvalue is 1), whose 1 - lambda-bar_max(W) = 0 is
a factor of both terms of the rate bound, Eq. (17): no rate at all, while (23)'s W on a connected graph has
lambda-bar_max(W) < 1. So the paper's rule picks (23) whatever the step and the loss's constants. Our guard on
(23) (lambda_min(W) at least Eq. 24's) keeps every factor of Eq. (17) at least as good as at Eq. (24)'s W, the
first term better by (23)'s lower lambda-bar_max. Our guarded (22) stays a named candidate: its guard binds (on
every graph tried), so it mixes exactly as Eq. (24)'s W does, and it can beat (23) in Eq. (17) only where the
second term, which lambda_min(W) raises, is the smaller one: near the step bound."""

CANDIDATES = {"problem23": "second", "problem22": "smallest"}
"""The named candidates and ``optimal_weights``' objective for each."""


def choose_weights(adj: np.ndarray, nonnegative: bool = True, threshold: float = 1e-6,
                   eps: float = 1e-3, pick: str = "optimized") -> tuple[np.ndarray, dict]:
    """The W of Sec. IV-B named by ``pick``: ``"optimized"`` (Problem 23's, ``OPTIMIZED``), ``"problem23"`` or
    ``"problem22"``, each solved from Eq. (24)'s point and pruned. Returns (W, info): the second-largest and
    smallest eigenvalue of the solved W and of Eq. (24)'s (for comparison), the name of the one ``chosen`` and
    ``setup_s``, the solver's time."""
    name = OPTIMIZED if pick == "optimized" else pick
    if name not in CANDIDATES:
        raise ValueError(f"pick {pick!r}: use 'optimized', 'problem23' or 'problem22'")
    start = initial_weights(adj, eps)
    W, setup_s = optimal_weights(adj, CANDIDATES[name], nonnegative, start=start)
    W = prune(W, threshold)
    info: dict = {key: {"second_largest": second_largest(M), "smallest": float(eigenvalues(M)[-1])}
                  for key, M in (("eq24", start), (name, W))}
    info["chosen"] = name
    info["setup_s"] = setup_s
    return W, info


@functools.lru_cache(maxsize=8)
def peer_weights(edges: tuple[tuple[int, int], ...], n: int, kind: str, threshold: float) -> tuple[np.ndarray, dict]:
    """W for the graph of ``n`` peers with links ``edges`` (peer indices), with its ``info``: Eq. (24)'s as it is
    (``kind = "eq24"``), or ``choose_weights(pick=kind)`` pruned at ``threshold``. Cached: every peer of a run in
    one process asks for the same; and a solved W is kept on disk (``solved_cache``), since the problems take
    minutes at 100 peers and the runs of one topology (SNAP, SNAP-0, their ablations) often run in different
    processes."""
    adj = np.zeros((n, n), dtype=bool)
    for i, j in edges:
        adj[i, j] = adj[j, i] = True
    if kind == "eq24":
        W = initial_weights(adj)
        return W, {"chosen": "eq24", "setup_s": 0.0,
                   "eq24": {"second_largest": second_largest(W), "smallest": float(eigenvalues(W)[-1])}}
    path = solved_cache((edges, n, kind, threshold))
    try:
        with np.load(path, allow_pickle=False) as f:
            return f["W"].copy(), json.loads(str(f["info"]))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        pass  # not solved before here (or a damaged entry): solve
    W, info = choose_weights(adj, threshold=threshold, pick=kind)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(f"{path.stem}.{os.getpid()}.part.npz")
        np.savez(part, W=W, info=np.array(json.dumps(info)))
        os.replace(part, path)
    except OSError:
        pass  # an unwritable cache only costs the next run the solve
    return W, info


def solved_cache(key: object) -> Path:
    """The file that keeps the solved W for ``key`` (the graph, the pick and the pruning threshold):
    ``$EDGEML_CACHE/snap-weights`` (default ``~/.cache/edgeml``), named by a hash of the key and of cvxpy's and
    its solvers' versions, so an upgrade solves again. The solution is the solver's, so a kept W equals a new
    solve of the same version; its ``setup_s`` stays the time the solve took. ``OPTIMIZED`` is hashed too: W kept
    for ``optimized`` under another rule is solved again."""
    from importlib.metadata import PackageNotFoundError, version

    versions = []
    for package in ("cvxpy", "clarabel", "scs"):
        try:
            versions.append(version(package))
        except PackageNotFoundError:
            versions.append(None)
    digest = hashlib.blake2b(json.dumps([repr(key), versions, SOLVER_OPTIONS, OPTIMIZED]).encode(),
                             digest_size=16).hexdigest()
    return cache_dir("snap-weights") / f"{digest}.npz"
