"""SNAP (snap.txt): the weight matrix and the EXTRA iteration of Sec. IV-A and IV-B, as pure functions over
numpy arrays. (The node programs of SNAP and its baselines, and the selective exchange of Sec. IV-C, are
not written yet; this module is not registered as an algorithm.)

- ``initial_weights``: Eq. (24), w_ij = 1 / (max(deg i, deg j) + eps) on the graph's edges, the diagonal
  completing each row to 1: symmetric and doubly stochastic, the feasible starting point of Sec. IV-B.
- ``optimal_weights``: the convex problems over symmetric, doubly stochastic W with w_ij = 0 off the graph,
  solved with cvxpy (its bundled conic solver CLARABEL, SCS as the fallback): (23) minimize
  lambda_max(W) + the second-largest eigenvalue (with lambda_max(W) = 1 this is (21), minimizing the
  second-largest eigenvalue), and (22) maximize lambda_min(W).
- ``choose_weights``: both, keeping the one with the better ``rate_score``; then ``prune``.
- ``extra``: the EXTRA iteration (Eqs. 6-8) with W~ = (W + I) / 2 (Eq. 7).

Choices where the paper is open (each a parameter):
- *Sign of the weights.* "Doubly stochastic" is read with non-negative entries (``nonnegative=True``); the
  fastest-mixing literature allows negative weights (``nonnegative=False``).
- *Which solution is faster.* The paper keeps "the solution that can result in the larger convergence rate"
  without a formula free of the problem's constants; ``rate_score`` uses the two factors its bound (Eq. 12
  with Eqs. 13-18) grows with, (1 - second-largest eigenvalue of W) x lambda_min(W~).
- *Pruning.* Weights below ``threshold`` (default 1e-6) are set to 0, which removes the edge (no exchange
  along it), and the diagonal completes each row to 1 again, so W stays symmetric and doubly stochastic.
"""

from __future__ import annotations

import numpy as np

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


def rate_score(W: np.ndarray) -> float:
    """(1 - second-largest eigenvalue of W) x lambda_min(W~), W~ = (W + I) / 2: larger converges faster."""
    ev = eigenvalues(W)
    return float((1.0 - ev[1]) * (1.0 + ev[-1]) / 2.0)


def optimal_weights(adj: np.ndarray, objective: str, nonnegative: bool = True) -> np.ndarray:
    """Problem (23) (``objective = "second"``: minimize the sum of the two largest eigenvalues) or (22)
    (``"smallest"``: maximize the smallest eigenvalue) over symmetric doubly stochastic W on the graph."""
    import cvxpy as cp

    adj = _check(adj)
    n = len(adj)
    W = cp.Variable((n, n), symmetric=True)
    off = ~adj & ~np.eye(n, dtype=bool)
    constraints = [W @ np.ones(n) == np.ones(n)]
    if off.any():
        constraints.append(W[off] == 0)
    if nonnegative:
        constraints.append(W >= 0)
    if objective == "second":
        problem = cp.Problem(cp.Minimize(cp.lambda_sum_largest(W, 2)), constraints)
    elif objective == "smallest":
        problem = cp.Problem(cp.Maximize(cp.lambda_min(W)), constraints)
    else:
        raise ValueError(f"objective {objective!r}: use 'second' (problem 23) or 'smallest' (problem 22)")
    for solver in ("CLARABEL", "SCS"):
        try:
            problem.solve(solver=solver)
        except cp.error.SolverError:
            continue
        if problem.status in ("optimal", "optimal_inaccurate") and W.value is not None:
            return symmetrize(np.where(off, 0.0, W.value))
    raise UserError(f"the weight-matrix problem ({objective}) could not be solved: status {problem.status}")


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


def choose_weights(adj: np.ndarray, nonnegative: bool = True, threshold: float = 1e-6,
                   eps: float = 1e-3) -> tuple[np.ndarray, dict]:
    """The optimized W of Sec. IV-B: problems (23) and (22), the one with the better ``rate_score``, pruned.
    Returns (W, info) with each candidate's second-largest and smallest eigenvalue and score, Eq. (24)'s
    included for comparison."""
    candidates = {"eq24": initial_weights(adj, eps)}
    for objective, name in (("second", "problem23"), ("smallest", "problem22")):
        candidates[name] = prune(optimal_weights(adj, objective, nonnegative), threshold)
    info = {name: {"second_largest": second_largest(W), "smallest": float(eigenvalues(W)[-1]),
                   "score": rate_score(W)} for name, W in candidates.items()}
    best = max(("problem23", "problem22"), key=lambda name: info[name]["score"])
    info["chosen"] = best
    return candidates[best], info


def extra(x0: np.ndarray, grad, W: np.ndarray, alpha: float, iterations: int) -> np.ndarray:
    """EXTRA (Eq. 6) in matrix form: x is N x P (a row per server), ``grad(x)`` the N x P gradients of each
    server's local objective; returns x after ``iterations`` steps. Each row's update uses only its
    neighbours' rows (Eq. 8)."""
    Wt = (W + np.eye(len(W))) / 2.0  # Eq. (7)
    prev, g_prev = x0, grad(x0)
    cur = W @ x0 - alpha * g_prev
    for _ in range(iterations - 1):
        g = grad(cur)
        cur, prev, g_prev = cur + W @ cur - Wt @ prev - alpha * (g - g_prev), cur, g
    return cur
