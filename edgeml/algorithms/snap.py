"""SNAP (snap.txt): decentralized EXTRA with an optimized weight matrix and selective parameter exchange, and
the baselines of its evaluation (Sec. V): SNAP-0, SNO, a parameter server at a peer, and TernGrad.

**Peers** (every node is a worker: an edge server with its own shard) exchange parameters with their
neighbours in the run's topology only (``network.topology``; on the default star every other peer is one).
Each runs the EXTRA iteration, Eqs. (6)-(8), with W symmetric and doubly stochastic, w_ij = 0 off the graph
and W~ = (W + I) / 2 (Eq. 7). Written per peer with d_j = (j's values as i last received them) - (i's values
as j last received them), and D = sum_j w_ij d_j (rows of W sum to 1):

    x^1     = x^0 + D^0 - alpha g(x^0)
    x^{k+2} = 2 x^{k+1} - x^k + D^{k+1} - D^k / 2 - alpha (g(x^{k+1}) - g(x^k))

which is Eq. (8) exactly when every value is received (``peer_step``, tested against the matrix form
``extra``). Taking the disagreement between *published* values (what each side of a link holds of the other)
makes it antisymmetric over a link, so unsent changes never move the peers' average: only the consensus
lags (the APE of Sec. IV-C). A frame that arrives after the next tick, or is lost on a link that was up at the
tick, breaks that symmetry for the rounds it is missing (its sender already counts its values as held, and a
lost frame is not sent again: later frames carry only later changes), and EXTRA's accumulated disagreement
term keeps the shift, so the peers agree on a slightly moved point. This is the paper's own rule for
stragglers (Sec. IV-D: a neighbour's latest values); the simulations (no latency, links down for whole runs)
never meet it, a loaded procs run can. Gradients are over the peer's whole shard, its f_i of Eq. (1)
(``full_batch``), or one mini-batch.

**Round clock** (Sec. II-B, IV-D: a global clock and a timer, as RIP). Round k starts at k x ``round_s``: a peer
computes its update, sends its frames, then collects what arrives until the next tick; a neighbour whose message has
not arrived (a straggler, a congested link) counts with its latest values. A peer that overruns a round starts its
next one at once, at the last tick that has passed (the ticks it missed are skipped). A link that is down at a
round's tick (``network.failed_links``) is out of that round at both ends (its d_j is 0, nothing is sent on it):
both ends see the same link state, so the average still holds; when the link is back, the next frame carries every
change since the last one that got through.

**Weight matrix** (Sec. IV-B), computed once at set-up from the whole graph (the neighbour sets are known in
advance): Eq. (24), or the optimized W: problems (23) (minimize lambda_max(W) + the second-largest
eigenvalue; lambda_max(W) = 1, so this is (21)) and (22) (maximize lambda_min(W)), convex (Theorem 3), each
with the other eigenvalue held at least as good as at Eq. (24)'s W (our addition: alone, (22) returns W = I,
which never mixes, and (23) drives the smallest eigenvalue to -1, where EXTRA's step condition fails), solved
with cvxpy's bundled conic solver (CLARABEL, SCS as the fallback), keeping the one with the better
``rate_score``; weights below ``prune`` drop their edge (Sec. IV-D, neighbour planning). The solver's own
time is the set-up time, logged in the ``weights`` series with both matrices' eigenvalues; it is not
training time (the round clock starts after it). EXTRA converges for alpha < 2 mu_g lambda_min(W~) / L_f^2 (Sec. IV-A,
from Eq. 10), so a W with a larger lambda_min allows a larger step: ``step = "bound"`` takes alpha = ``lr`` x
2 lambda_min(W~), the same fraction of each W's bound, where the default ``"fixed"`` gives every W the step
``lr`` (the paper does not say which its Fig. 5 used; at a fixed step well inside both bounds a W can only help
through mixing).

**Selective exchange** (Sec. IV-C, Algorithm 1), run by each peer by itself (``APESchedule``): the APE threshold T
starts at ``threshold`` x the mean parameter magnitude of x^0 (Sec. V: 10%); in a stage a parameter is sent only
when it changed by more than T / sum_{l=1}^{I} (1 + alpha G)^l since last sent (``send_bound``; Alg. 1 line 4, I =
``hold`` = 10 iterations), so the bound of Eq. (27), sum_l (1 + alpha G)^l max|Delta x^{k-l}|, stays below T for at
least I iterations; the peer tracks that bound with its own largest unsent change, and when it reaches T the stage
ends and T shrinks by 10%, until T falls below ``epsilon`` x T_0, where it stays (a small final APE avoids sending
the last slight changes). 1 + alpha G is ``growth`` (the paper's example 1.01, alpha = 1 / (100 G)), a setting
rather than derived from ``lr``: Algorithm 1 takes G, the bound on the Hessian, as an input, and with a larger alpha
G the bound of Eq. (27) grows so fast (its sum over 10 iterations is about 4,900 at 1 + alpha G = 2.2, against 10.6
at 1.01) that almost nothing would go unsent; the bound is a worst case, and the experiments keep the paper's 1.01.
Frames (Fig. 3): ``wire.snap_frame``, the smaller of the two structures, with ``value_bytes`` per value (8, the
paper's doubles); a peer keeps, per neighbour, the values that neighbour holds of it.

- ``snap``: the above. ``snap0``: threshold 0, every changed parameter is sent (SNAP-0; with ``snap.threshold = 0``
  SNAP is SNAP-0 exactly, tested). ``sno``: every parameter every round (Select Neighbour Only: SNAP-0's iterates,
  all the bytes).
- ``peer_ps`` (the PS scheme of Sec. V): one peer, drawn with the run's seed, also hosts a parameter server; every
  other peer sends its gradient there (the runtime routes each message along a shortest path, so its cost is bytes x
  hops), the host averages the gradients (its own included, with equal weights: the shards are equal), takes the
  step and sends the model back: synchronous, one iteration per model, no local steps. Its messages are routed
  traffic: one between neighbours whose link is down takes the shortest path left (``detour``), as the rest do.
  The existing ``bsp`` is not this scheme: its server is a node of its own beside the workers, not one of the
  edge servers of the graph.
- ``terngrad`` (Wen et al. 2017, SNAP's [19]) on the same PS: each layer of a gradient is clipped to ``clip``
  standard deviations (2.5; 0: no clipping) and ternarized stochastically, t = s sign(g) b with b ~ Bernoulli(|g| /
  s) (unbiased), s = the layer's scaler max|g|; with ``share_scalers`` the peers first send their scalers to the
  host, which returns the largest per layer, so all use the same (TernGrad's scaler sharing; 4L bytes each way).
  Values travel as ``wire.ternary``, 2 bits each plus 4 bytes per layer; the model comes back in full precision (the
  paper: TernGrad encodes the worker-to-server direction). The host's own gradient never travels, so it enters the
  average unternarized and unclipped.

Iterations: the ``iterations`` counter (evals.csv) counts rounds of peer 0 (SNAP family) or models made by
the host (PS schemes). Series ``exchange`` (SNAP family, one row per peer and round): ``iteration``,
``sent`` (parameters sent, over its frames), ``messages``, ``bytes``, ``threshold`` and ``ape`` (the bound
of Eq. 27 in the current stage).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Sequence

import numpy as np

from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.errors import UserError

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Node


# ------------------------------------------------------------------------------------------ weight matrices


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
    """(1 - second-largest eigenvalue of W) x lambda_min(W~), W~ = (W + I) / 2: larger converges faster. These are
    the two factors the rate bound (Eq. 17, from Eqs. 12-16) grows with; the paper keeps "the solution that can
    result in the larger convergence rate" without a formula free of the problem's constants."""
    ev = eigenvalues(W)
    return float((1.0 - ev[1]) * (1.0 + ev[-1]) / 2.0)


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


def choose_weights(adj: np.ndarray, nonnegative: bool = True, threshold: float = 1e-6,
                   eps: float = 1e-3, pick: str = "optimized") -> tuple[np.ndarray, dict]:
    """The optimized W of Sec. IV-B: problems (23) and (22) from Eq. (24)'s point, the one with the better
    ``rate_score`` (``pick = "optimized"``) or the one named (``"problem22"``, ``"problem23"``), pruned.
    Returns (W, info) with each candidate's second-largest and smallest eigenvalue and score, Eq. (24)'s
    included for comparison, the name of the one ``chosen`` and ``setup_s``, the solvers' time for both."""
    candidates = {"eq24": initial_weights(adj, eps)}
    setup_s = 0.0
    for objective, name in (("second", "problem23"), ("smallest", "problem22")):
        W, seconds = optimal_weights(adj, objective, nonnegative, start=candidates["eq24"])
        candidates[name] = prune(W, threshold)
        setup_s += seconds
    info: dict = {name: {"second_largest": second_largest(W), "smallest": float(eigenvalues(W)[-1]),
                         "score": rate_score(W)} for name, W in candidates.items()}
    best = pick if pick in ("problem22", "problem23") else \
        max(("problem23", "problem22"), key=lambda name: info[name]["score"])
    info["chosen"] = best
    info["setup_s"] = setup_s
    return candidates[best], info


# ------------------------------------------------------------------------------------------ EXTRA


def extra(x0: np.ndarray, grad, W: np.ndarray, alpha: float, iterations: int) -> np.ndarray:
    """EXTRA (Eq. 6) in matrix form: x is N x P (a row per server), ``grad(x)`` the N x P gradients of each
    server's local objective; returns x after ``iterations`` steps."""
    Wt = (W + np.eye(len(W))) / 2.0  # Eq. (7)
    prev, g_prev = x0, grad(x0)
    cur = W @ x0 - alpha * g_prev
    for _ in range(iterations - 1):
        g = grad(cur)
        cur, prev, g_prev = cur + W @ cur - Wt @ prev - alpha * (g - g_prev), cur, g
    return cur


def peer_step(x, D, g, alpha: float, prev=None):
    """One peer's EXTRA update (Eq. 8) from its disagreement D = sum_j w_ij (x_j - x_i) and gradient g at x:
    x^1 = x^0 + D^0 - alpha g^0 without ``prev``; with ``prev = (x^k, D^k, g^k)``,
    x^{k+2} = 2 x^{k+1} - x^k + D^{k+1} - D^k / 2 - alpha (g^{k+1} - g^k). Works on numpy arrays and tensors."""
    if prev is None:
        return x + D - alpha * g
    x_prev, D_prev, g_prev = prev
    return 2 * x - x_prev + D - D_prev / 2 - alpha * (g - g_prev)


# ------------------------------------------------------------------------------------------ selective exchange


def send_bound(threshold: float, hold: int, growth: float) -> float:
    """The largest change left unsent: T / sum_{l=1}^{I} c^l, c = 1 + alpha G, so that I iterations of unsent
    changes up to it keep the APE bound of Eq. (27) at most T. (Algorithm 1 line 4 writes the sum's upper bound
    I c^I; the exact sum gives the text's numbers: T = 3, I = 10, c = 1.01 -> 0.28; T = 1 -> 0.1.)"""
    return threshold / sum(growth ** l for l in range(1, hold + 1))


@dataclass
class APESchedule:
    """A peer's APE threshold (Sec. IV-C, Algorithm 1, Sec. V): stages of at least ``hold`` iterations; the bound
    of Eq. (27) on the accumulated error, a_{k+1} = c (a_k + e_k) with e_k the largest change left unsent and
    c = ``growth`` = 1 + alpha G, restarts with each stage; once it reaches the threshold T (and the stage has
    lasted ``hold`` iterations), T shrinks by ``shrink``, until it is below ``floor``."""

    threshold: float
    floor: float
    hold: int = 10
    shrink: float = 0.9
    growth: float = 1.01
    ape: float = 0.0
    stage_iterations: int = 0
    stages: int = 0

    def bound(self) -> float:
        """Changes up to this are not sent in this iteration."""
        return send_bound(self.threshold, self.hold, self.growth)

    def record(self, unsent: float) -> None:
        """One iteration done whose largest unsent change was ``unsent``."""
        self.ape = self.growth * (self.ape + unsent)
        self.stage_iterations += 1
        if self.ape >= self.threshold and self.stage_iterations >= self.hold and self.threshold >= self.floor:
            self.threshold *= self.shrink
            self.ape = 0.0
            self.stage_iterations = 0
            self.stages += 1


def changed(x: torch.Tensor, held: torch.Tensor, bound: float) -> torch.Tensor:
    """The parameters to send: those whose value differs from what the neighbour holds by more than ``bound``
    (with ``bound = 0``: every changed one)."""
    return (x - held).abs() > bound


# ------------------------------------------------------------------------------------------ TernGrad


def terngrad_scalers(g: torch.Tensor, spans: Sequence[tuple[int, int]], clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(g clipped per layer to [-clip sigma, clip sigma], sigma the layer's standard deviation (no clipping with
    ``clip = 0``), and each layer's scaler max |clipped g|) (TernGrad Sec. 3.3 and 3.1)."""
    import torch

    g = g.detach().clone()
    scalers = torch.zeros(len(spans), dtype=torch.float32, device=g.device)
    for i, (offset, n) in enumerate(spans):
        part = g[offset:offset + n]
        if clip > 0 and n > 1:
            bound = clip * float(part.std())
            part.clamp_(-bound, bound)
        scalers[i] = part.abs().max() if n else 0.0
    return g, scalers


def ternarize(g: torch.Tensor, scalers: torch.Tensor, spans: Sequence[tuple[int, int]],
              gen: torch.Generator) -> torch.Tensor:
    """TernGrad's stochastic ternarization (Eq. 4): sign(g) b with b ~ Bernoulli(|g| / s) per entry, s its layer's
    scaler (at least the layer's max |g|, so s sign(g) b is unbiased); returns the signs -1, 0, +1 (float32)."""
    import torch

    s = torch.repeat_interleave(scalers.to(g), torch.tensor([n for _, n in spans], device=g.device))
    p = torch.where(s > 0, g.abs() / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(s))
    keep = torch.rand(g.numel(), generator=gen, dtype=g.dtype).to(g.device) < p  # one stream on every device
    return (torch.sign(g) * keep).to(torch.float32)


# ------------------------------------------------------------------------------------------ configuration


@dataclass
class PeerConfig:
    lr: float = 0.1
    """Step size alpha: EXTRA's (Eq. 6), or the PS's learning rate."""
    full_batch: bool = True
    """Each iteration's gradient is over the peer's whole shard (its f_i of Eq. 1, so EXTRA is exact); false:
    one mini-batch of ``data.batch_size``."""
    value_bytes: Literal[4, 8] = 8
    """Bytes per parameter value on the wire: 8 (doubles, as the paper counts) or 4 (float32)."""
    iterations: int = 0
    """End the run after this many iterations (``stop_run``: status stopped), so schemes with and without a
    round clock get the same budget; 0: the [stop] section decides."""
    weight_decay: float = 0.0
    """L2 regularization lambda of every peer's objective, f_i + (lambda / 2) |x|^2 (an SVM's; strongly convex,
    so EXTRA converges linearly and parameters stop changing); its gradient lambda x is added to g."""

    def validate(self, cfg) -> None:
        name = cfg.run.algorithm
        if not 0 < self.lr < math.inf:
            raise UserError(f"{name}.lr = {self.lr}: the step size must be a finite number > 0")
        if self.iterations < 0:
            raise UserError(f"{name}.iterations = {self.iterations}: must be >= 0 (0: no limit)")
        if not 0 <= self.weight_decay < math.inf:
            raise UserError(f"{name}.weight_decay = {self.weight_decay}: must be a finite number >= 0")


@dataclass
class ExchangeConfig(PeerConfig):
    weights: Literal["optimized", "problem22", "problem23", "eq24"] = "optimized"
    """W: ``optimized`` (problems 22-23, the one with the better ``rate_score`` kept, Sec. IV-B), one of the two
    problems' solutions by name, or ``eq24`` (Eq. 24 as it is)."""
    prune: float = 1e-6
    """Weights of the optimized W below this drop their edge (no exchange along it); 0 keeps every edge."""
    step: Literal["fixed", "bound"] = "fixed"
    """``fixed``: alpha = ``lr`` for every W; ``bound``: alpha = ``lr`` x 2 lambda_min(W~), the same fraction of
    each W's step condition (Sec. IV-A; see the module docstring)."""
    round_s: float = 0.0
    """Length of a round of the common clock, in seconds. 0 (auto): twice the slowest peer's step plus its
    frames to every neighbour at full size on its links, plus 10 ms for a real transport."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        name = cfg.run.algorithm
        if not 0 <= self.prune < 1:
            raise UserError(f"{name}.prune = {self.prune}: must lie in [0, 1)")
        if not 0 <= self.round_s < math.inf:
            raise UserError(f"{name}.round_s = {self.round_s}: must be a finite number of seconds > 0, or 0 for auto")


@dataclass
class SNAPConfig(ExchangeConfig):
    threshold: float = 0.1
    """Initial APE threshold T_0 as a fraction of the mean parameter magnitude of x^0 (Sec. V: 10%); 0 sends
    every changed parameter (SNAP-0)."""
    epsilon: float = 0.01
    """The threshold stops shrinking once it is below this fraction of T_0 (Algorithm 1's epsilon)."""
    hold: int = 10
    """I_k: iterations a threshold holds at least (Sec. V: 10)."""
    shrink: float = 0.9
    """Factor applied to the threshold each time the APE reaches it (Sec. V: 0.9)."""
    growth: float = 1.01
    """1 + alpha G of Eqs. (25)-(27): the growth per iteration of an unsent change's error (the paper's example,
    alpha = 1 / (100 G))."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        name = cfg.run.algorithm
        if not 0 <= self.threshold < math.inf:
            raise UserError(f"{name}.threshold = {self.threshold}: must be a finite number >= 0 (0: SNAP-0)")
        if not 0 < self.epsilon <= 1:
            raise UserError(f"{name}.epsilon = {self.epsilon}: must lie in (0, 1] (a fraction of the first threshold)")
        if self.hold < 1:
            raise UserError(f"{name}.hold = {self.hold}: a threshold holds at least 1 iteration")
        if not 0 < self.shrink < 1:
            raise UserError(f"{name}.shrink = {self.shrink}: must lie in (0, 1)")
        if not 1 <= self.growth < math.inf:
            raise UserError(f"{name}.growth = {self.growth}: 1 + alpha G must be a finite number >= 1")


@dataclass
class SNAP0Config(SNAPConfig):
    threshold: float = 0.0
    """APE threshold: 0, every changed parameter is sent (SNAP-0)."""


@dataclass
class TernGradConfig(PeerConfig):
    clip: float = 2.5
    """Clip each layer's gradient to this many standard deviations before ternarizing (TernGrad's 2.5); 0: no
    clipping, the scaler is max |g|."""
    share_scalers: bool = True
    """Peers agree on each layer's scaler (the largest) through the host before ternarizing (scaler sharing)."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if not 0 <= self.clip < math.inf:
            raise UserError(f"{cfg.run.algorithm}.clip = {self.clip}: must be a finite number >= 0 (0: no clipping)")


# ------------------------------------------------------------------------------------------ node programs


def _gradient(node: Node, trainer) -> None:
    """One gradient at the current parameters into ``trainer.grad``: over the whole shard (its cost in steps) or one
    mini-batch, plus the regularizer's."""
    cfg = node.algo
    if cfg.full_batch:
        n = len(trainer.index)
        node.compute(lambda: trainer.gradient(trainer.index), samples=n, work=n / trainer.batch_size)
    else:
        node.compute(trainer.gradient, samples=trainer.batch_size)
    if cfg.weight_decay:
        trainer.grad.add_(trainer.params, alpha=cfg.weight_decay)


@functools.lru_cache(maxsize=8)
def _weights(edges: tuple[tuple[int, int], ...], n: int, kind: str, threshold: float) -> tuple[np.ndarray, dict]:
    """W for the peer graph (cached: every peer of a run in one process asks for the same)."""
    adj = np.zeros((n, n), dtype=bool)
    for i, j in edges:
        adj[i, j] = adj[j, i] = True
    if kind == "eq24":
        W = initial_weights(adj)
        return W, {"chosen": "eq24", "setup_s": 0.0,
                   "eq24": {"second_largest": second_largest(W), "smallest": float(eigenvalues(W)[-1])}}
    return choose_weights(adj, threshold=threshold, pick=kind)


def peer_graph(node: Node) -> tuple[list[int], tuple[tuple[int, int], ...]]:
    """The peers (ranks) and the links between them, as peer indices: the whole graph, known at set-up."""
    peers = node.ranks("worker")
    at = {r: i for i, r in enumerate(peers)}
    edges = sorted({(min(at[r], at[v]), max(at[r], at[v])) for r in peers for v in node.env.neighbours(r) if v in at})
    return peers, tuple(edges)


def round_length(node: Node, peers: list[int], n: int) -> float:
    """``round_s``, or auto: twice the longest (step + full frames to every neighbour) of any peer, + 10 ms. Every
    peer derives the same from the run's environment."""
    cfg = node.algo
    if cfg.round_s:
        return cfg.round_s
    from edgeml.runtime import wire

    env, batch = node.env, node.cfg.data.batch_size
    frame = wire.snap_nbytes(n, 0, cfg.value_bytes)
    longest = 0.0
    for i, r in enumerate(peers):
        size = len(node.job.shards[i])
        work = size / min(batch, size) if cfg.full_batch else 1.0
        sends = 0.0
        for v in env.neighbours(r):
            route = env.topology.route(r, v, 0.0)
            if route is not None:
                tx, flight = route.delay(frame)
                sends += tx + flight
        longest = max(longest, env.step_time(r, 0.0, work) + sends)
    return 2 * longest + 0.01


def exchange_peer(node: Node, send_all: bool = False) -> None:
    """A SNAP / SNAP-0 / SNO peer (see the module docstring)."""
    import torch

    from edgeml.runtime import wire

    cfg = node.algo
    trainer = node.trainer()
    x = trainer.params
    node.expose(x)
    peers, edges = peer_graph(node)
    W, info = _weights(edges, len(peers), cfg.weights, cfg.prune)
    alpha = cfg.lr * (1.0 + info[info["chosen"]]["smallest"]) if cfg.step == "bound" else cfg.lr
    me = peers.index(node.rank)
    weight = {peers[j]: float(W[me, j]) for j in range(len(peers)) if j != me and W[me, j] != 0}
    if me == 0:
        node.log("weights", setup_s=info["setup_s"], chosen=info["chosen"], peers=len(peers), links=len(edges),
                 alpha=alpha,
                 **{f"{name}_{k}": v for name in ("eq24", "problem22", "problem23") if name in info
                    for k, v in info[name].items()})
    n = x.numel()
    T = round_length(node, peers, n)
    views = {j: x.clone() for j in weight}  # each neighbour's values as last received: x^0 at the start
    held = {j: x.clone() for j in weight}  # this peer's values as each neighbour holds them
    threshold = 0.0 if send_all else cfg.threshold * float(x.abs().mean())
    schedule = APESchedule(threshold, cfg.epsilon * threshold if not send_all else 0.0, cfg.hold, cfg.shrink,
                           cfg.growth) if not send_all else None
    everything = torch.ones(n, dtype=torch.bool, device=x.device)
    prev = None
    k = math.ceil(node.now() / T - 1e-9)  # the first tick after set-up
    node.sleep(max(0.0, k * T - node.now()))
    iteration = 0
    while True:
        tick = k * T
        up = set(node.env.neighbours(node.rank, tick))  # the link state at the tick, as both ends see it
        live = [j for j in weight if j in up]
        _gradient(node, trainer)
        g = trainer.grad.clone()
        D = torch.zeros_like(x)
        for j in live:
            D.add_(views[j] - held[j], alpha=weight[j])
        new = peer_step(x, D, g, alpha, prev)
        prev = (x.clone(), D, g)
        x.copy_(new)
        bound = 0.0 if send_all else schedule.bound()
        sent = messages = nbytes = 0
        unsent = 0.0
        for j in live:
            mask = everything if send_all else changed(x, held[j], bound)
            nbytes += node.send(j, "params", **wire.snap_frame(x, mask, cfg.value_bytes))
            held[j][mask] = x[mask]
            sent += int(mask.sum())
            messages += 1
            if not send_all:
                unsent = max(unsent, float((x - held[j]).abs().max()))
        if schedule is not None:
            schedule.record(unsent)
        node.log("exchange", iteration=iteration, sent=sent, messages=messages, bytes=nbytes,
                 threshold=schedule.threshold if schedule else 0.0, ape=schedule.ape if schedule else 0.0)
        iteration += 1
        if me == 0:
            node.count("iterations")
        k = max(k + 1, math.floor(node.now() / T + 1e-9))  # an overrun round: wait for the next tick
        while (left := (k * T) - node.now()) > 0:
            msg = node.recv(tag="params", timeout=left)
            if msg is None:
                break
            if msg.src in views:
                views[msg.src] = wire.snap_decode(msg.data, views[msg.src])
        while (msg := node.recv(tag="params", timeout=0)) is not None:  # arrived exactly at the tick
            if msg.src in views:
                views[msg.src] = wire.snap_decode(msg.data, views[msg.src])
        if iteration == cfg.iterations:  # at the tick that ends the last round: every peer has sent its frames
            if me == 0:
                node.stop_run(f"{iteration} iterations done")
            return


def ps_host(seed: int, peers: list[int]) -> int:
    """The peer that hosts the parameter server: drawn with the run's seed, the same at every peer."""
    return peers[random.Random(f"{seed}/ps-host").randrange(len(peers))]


def ps_peer(node: Node, ternary: bool = False) -> None:
    """A peer of the PS scheme (``ternary``: TernGrad): the host averages every peer's gradient and steps."""
    import torch

    from edgeml.runtime import wire

    cfg = node.algo
    trainer = node.trainer()
    host = ps_host(node.cfg.run.seed, node.ranks("worker"))
    others = [r for r in node.ranks("worker") if r != host]
    dtype = {4: torch.float32, 8: torch.float64}[cfg.value_bytes]
    spans = trainer.spans
    if node.rank == host:
        node.expose(trainer.params)
    iteration = 0
    while True:
        _gradient(node, trainer)
        if node.rank == host:
            if ternary and cfg.share_scalers:
                _, own = terngrad_scalers(trainer.grad, spans, cfg.clip)
                shared = torch.stack([own, *(node.recv(r, "scalers")["scalers"] for r in others)]).amax(0)
                for r in others:
                    node.send(r, "shared", detour=True, scalers=shared)
            total = trainer.grad.clone().double()
            for r in others:
                data = node.recv(r, "grad").data
                total += (wire.ternary_decode(data, spans) if ternary else data["grad"]).double()
            trainer.grad.copy_(total / (len(others) + 1))
            trainer.sgd(cfg.lr)
            node.count("iterations")
            iteration += 1
            for r in others:
                node.send(r, "model", detour=True, params=trainer.params.to(dtype))
            if iteration == cfg.iterations:  # after the round's last messages
                node.stop_run(f"{iteration} iterations done")
        else:
            if ternary:
                clipped, scalers = terngrad_scalers(trainer.grad, spans, cfg.clip)
                if cfg.share_scalers:
                    node.send(host, "scalers", detour=True, scalers=scalers)
                    scalers = node.recv(host, "shared")["scalers"]
                ternary_grad = wire.ternary(ternarize(clipped, scalers, spans, node.gen), scalers, spans)
                node.push(host, "grad", detour=True, **ternary_grad)
            else:
                node.push(host, "grad", detour=True, grad=trainer.grad.to(dtype))
            trainer.params.copy_(node.recv(host, "model")["params"])


# ------------------------------------------------------------------------------------------ registration


def _peers(program):
    return lambda cfg: [("worker", program)] * cfg.cluster.workers


register(AlgorithmSpec("snap", "SNAP: EXTRA among neighbours, optimized weights, only changes above the APE bound",
                       SNAPConfig, _peers(exchange_peer), "snap.txt Sec. IV, Alg. 1"))
register(AlgorithmSpec("snap0", "SNAP-0: SNAP sending every changed parameter (APE threshold 0)", SNAP0Config,
                       _peers(exchange_peer), "snap.txt Sec. V"), "snap-0")
register(AlgorithmSpec("sno", "Select Neighbour Only: EXTRA among neighbours, every parameter every round",
                       ExchangeConfig, _peers(functools.partial(exchange_peer, send_all=True)), "snap.txt Sec. V"))
register(AlgorithmSpec("peer_ps", "Synchronous parameter server hosted at a peer, gradients routed over the "
                       "topology", PeerConfig, _peers(ps_peer), "snap.txt Sec. V"))
register(AlgorithmSpec("terngrad", "TernGrad: ternary gradients (2 bits, per-layer scalers) to a PS at a peer",
                       TernGradConfig, _peers(functools.partial(ps_peer, ternary=True)), "snap.txt Sec. V [19]"))
