"""SNAP's peers (SNAP Sec. IV-A, IV-D; Eqs. 6-8) and the parameter server at a peer of its evaluation (Sec.
V): EXTRA among neighbours on a round clock, the configs of ``snap``, ``snap0``, ``sno`` and ``peer_ps``, and their
registration. The weight matrix is ``weights.py``'s, the selective exchange ``ape.py``'s.

**Peers** (every node is a worker: an edge server with its own shard) exchange parameters with their
neighbours in the run's topology only (``network.topology``; on the default star every other peer is one).
Each runs the EXTRA iteration, Eqs. (6)-(8), with W symmetric and doubly stochastic, w_ij = 0 off the graph
and W~ = (W + I) / 2 (Eq. 7). Written per peer with d_j = (j's values as i last received them) - (i's values
as j last received them), and D = sum_j w_ij d_j (rows of W sum to 1):

    x^1     = x^0 + D^0 - alpha g(x^0)
    x^{k+2} = 2 x^{k+1} - x^k + D^{k+1} - D^k / 2 - alpha (g(x^{k+1}) - g(x^k))

which is Eq. (8) exactly when every value is received (``peer_step``, tested against the matrix form ``extra``).
By default (``disagreement = "own"``) a peer's own term is its current values, as Eq. (8) has them, its
neighbours' their latest received: unsent changes may then move the point the peers agree on a little, and the
exchange falls silent as they converge (Sec. V-A: "the amount of data sent by SNAP approaches 0").
``disagreement = "published"`` takes the disagreement between *published* values (what each side of a link holds
of the other) instead, which makes it antisymmetric over a link, so unsent changes never move the peers' average:
only the consensus lags (the APE of Sec. IV-C); EXTRA's accumulated correction then keeps the values moving by
about the send bound, so a share of them (about a third in the values-sent runs) crosses it every iteration,
whatever the floor. With published values, a frame that arrives after the next tick, or is lost on
a link that was up at the tick, breaks the symmetry of published values for the rounds it is missing (its sender
already counts its values as held, and a lost frame is not sent again: later frames carry only later changes), and
EXTRA's accumulated disagreement term keeps the shift, so the peers agree on a slightly moved point. This is the
paper's own rule for stragglers (Sec. IV-D: a neighbour's latest values); the simulations (no latency, links down
for whole runs) never meet it, a loaded procs run can. Gradients are over the peer's whole shard, its f_i of Eq.
(1) (``full_batch``), or one mini-batch. EXTRA converges for alpha < 2 mu_g lambda_min(W~) / L_f^2 (Sec. IV-A, from
Eq. 10): ``step = "bound"`` takes alpha = ``lr`` x 2 lambda_min(W~), the same fraction of each W's bound, where the
default ``"fixed"`` gives every W the step ``lr`` (the paper does not say which its Fig. 5 used; at a fixed step
well inside both bounds a W can only help through mixing); ``step = "alg1"`` takes Algorithm 1 line 1's alpha = 1 /
(100 G) from G = ``hessian_bound``, so that the APE growth 1 + alpha G is the 1.01 of Sec. IV-C. Where G is given,
SNAP's APE growth is 1 + alpha G at whatever step the run takes (Alg. 1 line 4).

**Round clock** (Sec. II-B, IV-D: a global clock and a timer, as RIP). Round k starts at k x ``round_s``: a peer
computes its update, sends its frames, then collects what arrives until the next tick; a neighbour whose message
has not arrived (a straggler, a congested link) counts with its latest values. A peer that overruns a round starts
its next one at once, at the last tick that has passed (the ticks it missed are skipped). A link that is down at a
round's tick (``network.failed_links``, ``failures = "permanent"``) is out of that round at both ends (its d_j
is 0, nothing is sent on it): both ends see the same link state, so the average still holds; when the link is
back, the next frame carries every change since the last one that got through. With ``failures = "transient"``
(the paper's "temporarily unavailable due to failure or congestion", Sec. V, Fig. 9) a frame misses its round
one way only: the receiver "ignores the parameter updates that have not been received" and keeps the values it
last got (Sec. IV-D), and the sender, which learns of the miss (``Node.last_lost``), keeps counting the old
values as held, so its next frame carries the changes again: both ends of the link still count the same values,
so with published values the disagreement stays antisymmetric and the peers' average and EXTRA's fixed point are
unchanged, only the consensus lags (with a peer's own values the receiver's stale copy moves them, as
any unsent change does). With ``failures = "silent"`` (no acknowledgement) the sender is not told and counts the missed
values as held: the two ends of the link count different values until a later frame carries those parameters
again, and the disagreement term keeps each such gap, so the peers' average and the point they agree on move.

**APE stages** (Sec. IV-C). With ``stages = "restart"`` (the default) every stage lasts ``hold`` iterations at
every peer, as in the paper's example ("in the first 10 iterations ... APE threshold 3 ... After that, we restart
the iteration from the solution derived by the first 10 iterations, and reduce the APE threshold"), and at each
stage's end every peer restarts EXTRA from its current parameters (its next step is the first one, x^1 = x^0 +
D^0 - alpha g^0), until the threshold reaches its floor. The stages end together on the common clock: EXTRA's
fixed point is optimal from any start, but a peer restarting alone drops its share of the accumulated correction
and moves the fixed point. ``stages = "continue"``: each peer ends a stage by itself once the bound of Eq. (27)
reaches T (Algorithm 1's "till APE exceeds T_k") and EXTRA runs on without a restart. ``stages = "peer-restart"``:
Algorithm 1 read literally, "run by each edge server in a distributed manner": each peer ends a stage by itself
as with ``continue`` and restarts EXTRA from its current parameters there, alone (so the point the peers agree on
moves with every such restart).

Frames (Fig. 3): ``wire.snap_frame``, the smaller of the two structures, with ``value_bytes`` per value (8, the
paper's doubles); a peer keeps, per neighbour, the values that neighbour holds of it.

- ``snap``: the above. ``snap0``: threshold 0, every changed parameter is sent (SNAP-0; with ``snap.threshold = 0``
  SNAP is SNAP-0 exactly, tested). ``sno``: every parameter every round (Select Neighbour Only: SNAP-0's iterates,
  all the bytes).
- ``peer_ps`` (the PS scheme of Sec. V): one peer, drawn with the run's seed, also hosts a parameter server; every
  other peer sends its gradient there (the runtime routes each message along a shortest path, so its cost is bytes
  x hops), the host averages the gradients (its own included, with equal weights: the shards are equal), takes
  the step and sends the model back: synchronous, one iteration per model, no local steps. Its messages are routed
  traffic: one between neighbours whose link is down takes the shortest path left (``detour``), as the rest do.
  The existing ``bsp`` is not this scheme: its server is a node of its own beside the workers, not one of the
  edge servers of the graph. How a gradient travels is a hook (``DenseGradients``): TernGrad on the same PS is
  ``edgeml/algorithms/terngrad.py``.

Iterations: the ``iterations`` counter (evals.csv) counts rounds of peer 0 (SNAP family) or models made by
the host (PS schemes). Series ``exchange`` (SNAP family, one row per peer and round): ``iteration``,
``sent`` (parameter values sent, over its frames), ``values`` (the values its frames could have carried: the
parameters times ``messages``), ``messages``, ``bytes``, ``threshold``, ``ape`` (the bound of Eq. 27 in the
current stage) and ``restart`` (1 where a stage ended and EXTRA restarts at the next iteration).
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.algorithms.snap.ape import APESchedule, changed
from edgeml.algorithms.snap.weights import peer_weights
from edgeml.errors import UserError
from edgeml.schema import ranged

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Node


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


# ------------------------------------------------------------------------------------------ configuration


@dataclass
class PeerConfig:
    lr: float = ranged(0.1, gt=0)
    """Step size alpha: EXTRA's (Eq. 6), or the PS's learning rate."""
    full_batch: bool = True
    """Each iteration's gradient is over the peer's whole shard (its f_i of Eq. 1, so EXTRA is exact); false:
    one mini-batch of ``data.batch_size``."""
    value_bytes: Literal[4, 8] = 8
    """Bytes per parameter value on the wire: 8 (doubles, as the paper counts) or 4 (float32)."""
    iterations: int = ranged(0, ge=0, zero="no limit: the [stop] section decides")
    """End the run after this many iterations (``stop_run``: status stopped), so schemes with and without a
    round clock get the same budget; 0: the [stop] section decides."""
    weight_decay: float = ranged(0.0, ge=0, zero="no regularization")
    """L2 regularization lambda of every peer's objective, f_i + (lambda / 2) |x|^2 (an SVM's; strongly convex,
    so EXTRA converges linearly and parameters stop changing); its gradient lambda x is added to g."""


@dataclass
class ExchangeConfig(PeerConfig):
    weights: Literal["optimized", "problem22", "problem23", "eq24"] = "optimized"
    """W: ``optimized`` (the one of problems 22-23 with the larger convergence rate, Sec. IV-B: Problem 23's, see
    ``weights.OPTIMIZED``), one of the two problems' solutions by name, or ``eq24`` (Eq. 24 as it is)."""
    prune: float = ranged(1e-6, ge=0, lt=1, zero="keep every edge")
    """Weights of the optimized W below this drop their edge (no exchange along it); 0 keeps every edge."""
    step: Literal["fixed", "bound", "alg1"] = "fixed"
    """``fixed``: alpha = ``lr`` for every W; ``bound``: alpha = ``lr`` x 2 lambda_min(W~), the same fraction of
    each W's step condition (Sec. IV-A; see the module docstring); ``alg1``: alpha = 1 / (100 G), G =
    ``hessian_bound`` (Algorithm 1 line 1; ``lr`` unused), so that SNAP's growth 1 + alpha G is 1.01."""
    hessian_bound: float = ranged(0.0, ge=0, zero="not given: SNAP's growth is the growth setting")
    """G, the bound on every server's Hessian, |grad^2 f_i(x)| <= G (Sec. IV-C, Algorithm 1's input): the step
    of ``step = "alg1"``, and SNAP's APE growth 1 + alpha G at any step (Alg. 1 line 4). For a smooth f_i it is at
    least f_i's gradient Lipschitz constant (a binary linear model's: ``linear_hessian_bound``)."""
    disagreement: Literal["own", "published"] = "own"
    """A server's own x_i in EXTRA's disagreement w_ij (x_j - x_i): ``own``, its current values (Eq. 8 with the
    neighbours' latest); ``published``, as neighbour j holds it (unsent changes never move the servers' average)."""
    round_s: float = ranged(0.0, ge=0, zero="derived from the run")
    """Length of a round of the common clock, in seconds. 0 (auto): twice the slowest peer's step plus its
    frames to every neighbour at full size on its links, plus 10 ms for a real transport."""

    def validate(self, cfg) -> None:
        if self.step == "alg1" and not self.hessian_bound:
            raise UserError(f"{cfg.run.algorithm}.step = 'alg1' takes alpha = 1 / (100 G) from G = "
                            f"{cfg.run.algorithm}.hessian_bound: give G > 0 (a bound on every server's Hessian)")


@dataclass
class SNAPConfig(ExchangeConfig):
    threshold: float = ranged(0.1, ge=0, zero="SNAP-0, every changed parameter is sent")
    """Initial APE threshold T_0 as a fraction of the mean parameter magnitude of x^0 (Sec. V: 10%); 0 sends
    every changed parameter (SNAP-0)."""
    epsilon: float = ranged(0.01, gt=0, le=1)
    """The threshold stops shrinking once it is below this fraction of T_0 (Algorithm 1's epsilon)."""
    hold: int = ranged(10, ge=1)
    """I_k: iterations a threshold holds at least (Sec. V: 10)."""
    shrink: float = ranged(0.9, gt=0, lt=1)
    """Factor applied to the threshold each time the APE reaches it (Sec. V: 0.9)."""
    growth: float = ranged(1.01, ge=1)
    """1 + alpha G of Eqs. (25)-(27), the growth per iteration of an unsent change's error, where G is not given
    (the paper's example: 1.01, at alpha = 1 / (100 G)); with ``hessian_bound`` it follows from the run's step and
    G (``ape_growth``, Alg. 1 line 4) and must be left at 1.01."""
    stages: Literal["restart", "continue", "peer-restart"] = "restart"
    """``restart``: every stage lasts ``hold`` iterations at every peer, then all restart EXTRA (Sec. IV-C);
    ``continue``: a peer ends a stage once the bound of Eq. (27) reaches the threshold, EXTRA runs on;
    ``peer-restart``: so, and that peer alone restarts EXTRA (Alg. 1 at each server)."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if self.hessian_bound and self.growth != 1.01:
            raise UserError(f"{cfg.run.algorithm}.growth = {self.growth}: with hessian_bound = {self.hessian_bound} "
                            f"the growth is 1 + alpha G (Algorithm 1 line 4); leave growth at 1.01, or set "
                            f"hessian_bound = 0 to give the growth yourself")


@dataclass
class SNAP0Config(SNAPConfig):
    threshold: float = ranged(0.0, ge=0, zero="SNAP-0, every changed parameter is sent")
    """APE threshold: 0, every changed parameter is sent (SNAP-0)."""


def step_size(cfg: ExchangeConfig, smallest: float) -> float:
    """EXTRA's alpha (``step``) for a W whose smallest eigenvalue is ``smallest``."""
    if cfg.step == "alg1":
        return 1.0 / (100.0 * cfg.hessian_bound)  # Algorithm 1 line 1
    if cfg.step == "bound":
        return cfg.lr * (1.0 + smallest)  # 2 lambda_min(W~) = 1 + lambda_min(W), Eq. (7)
    return cfg.lr


def linear_hessian_bound(shards, model: str, weight_decay: float) -> float:
    """G for a binary linear model (``model.binary``) over the servers' shards (each a samples x features tensor):
    the largest over servers of lambda_max(X~_i^T X~_i / n_i) x c + lambda, X~_i the shard with a column of ones
    (the bias), c the loss's largest second derivative in the score (the squared hinge's, max(0, 1 - y s)^2 / 2
    per sample: 1; the logistic loss's: 1/4) and lambda the weight decay. The Hessian of f_i is (1/n_i) sum over
    samples of that second derivative times x~ x~^T plus lambda I, so this bounds it at every x."""
    import torch

    c = {"l2svm": 1.0, "logreg": 0.25}.get(model)
    if c is None:
        raise ValueError(f"no Hessian bound for '{model}': l2svm or logreg (the hinge of 'svm' has none)")
    largest = 0.0
    for x in shards:
        x = torch.cat([x.reshape(len(x), -1).double(), torch.ones(len(x), 1, dtype=torch.float64)], 1)
        largest = max(largest, float(torch.linalg.eigvalsh(x.T @ x / len(x))[-1]))
    return c * largest + weight_decay


def ape_growth(cfg: SNAPConfig, alpha: float) -> float:
    """1 + alpha G of Eqs. (25)-(27) at the step ``alpha``, where G (``hessian_bound``) is given (Alg. 1 line 4:
    at ``step = "alg1"`` exactly 1.01); else the ``growth`` setting."""
    return 1.0 + alpha * cfg.hessian_bound if cfg.hessian_bound else cfg.growth


# ------------------------------------------------------------------------------------------ SNAP's peers


def peer_gradient(node: Node, trainer) -> None:
    """One gradient at the current parameters into ``trainer.grad``: over the whole shard (its cost in steps) or one
    mini-batch, plus the regularizer's."""
    cfg = node.algo
    if cfg.full_batch:
        n = len(trainer.index)
        node.compute(lambda: trainer.gradient(trainer.shard()), samples=n, work=n / trainer.batch_size)
    else:
        node.compute(trainer.gradient, samples=trainer.batch_size)
    if cfg.weight_decay:
        trainer.grad.add_(trainer.params, alpha=cfg.weight_decay)


def peer_graph(node: Node) -> tuple[list[int], tuple[tuple[int, int], ...]]:
    """The peers (ranks) and the links between them, as peer indices: the whole graph, known at set-up."""
    peers = node.ranks("worker")
    at = {r: i for i, r in enumerate(peers)}
    edges = sorted({(min(at[r], at[v]), max(at[r], at[v]))
                    for r in peers for v in node.neighbours(all=True, rank=r) if v in at})
    return peers, tuple(edges)


def round_length(node: Node, peers: list[int], n: int) -> float:
    """``round_s``, or auto: twice the longest (step + full frames to every neighbour) of any peer, + 10 ms. Every
    peer derives the same from the run's world (step and message times as the node models them at time 0)."""
    cfg = node.algo
    if cfg.round_s:
        return cfg.round_s
    from edgeml.runtime import wire

    batch = node.cfg.data.batch_size
    frame = wire.snap_nbytes(n, 0, cfg.value_bytes)
    longest = 0.0
    for i, r in enumerate(peers):
        size = node.shard_size(i)
        work = size / min(batch, size) if cfg.full_batch else 1.0
        sends = 0.0
        for v in node.neighbours(all=True, rank=r):
            cost = node.message_time(v, frame, src=r, at=0.0)
            if cost is not None:
                sends += cost
        longest = max(longest, node.step_time(work, rank=r, at=0.0) + sends)
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
    W, info = peer_weights(edges, len(peers), cfg.weights, cfg.prune)
    alpha = step_size(cfg, info[info["chosen"]]["smallest"])
    growth = {} if send_all else {"growth": ape_growth(cfg, alpha)}  # SNO sends everything: no APE
    me = peers.index(node.rank)
    weight = {peers[j]: float(W[me, j]) for j in range(len(peers)) if j != me and W[me, j] != 0}
    if me == 0:
        node.log("weights", setup_s=info["setup_s"], chosen=info["chosen"], peers=len(peers), links=len(edges),
                 alpha=alpha, **growth,
                 **{f"{name}_{k}": v for name in ("eq24", "problem22", "problem23") if name in info
                    for k, v in info[name].items()})
    n = x.numel()
    T = round_length(node, peers, n)
    views = {j: x.clone() for j in weight}  # each neighbour's values as last received: x^0 at the start
    held = {j: x.clone() for j in weight}  # this peer's values as each neighbour holds them
    threshold = 0.0 if send_all else cfg.threshold * float(x.abs().mean())
    schedule = APESchedule(threshold, cfg.epsilon * threshold, cfg.hold, cfg.shrink, growth["growth"],
                           rule="fixed" if cfg.stages == "restart" else "ape") if not send_all else None
    everything = torch.ones(n, dtype=torch.bool, device=x.device)
    own = cfg.disagreement == "own"  # the peer's own term in D: its current values, not those its neighbours hold
    prev = None
    k = math.ceil(node.now() / T - 1e-9)  # the first tick after set-up
    node.sleep(max(0.0, k * T - node.now()))
    iteration = 0
    while True:
        tick = k * T
        up = set(node.neighbours(at=tick))  # the link state at the tick, as both ends see it
        live = [j for j in weight if j in up]
        peer_gradient(node, trainer)
        g = trainer.grad.clone()
        D = torch.zeros_like(x)
        for j in live:
            D.add_(views[j] - (x if own else held[j]), alpha=weight[j])
        new = peer_step(x, D, g, alpha, prev)
        prev = (x.clone(), D, g)
        x.copy_(new)
        bound = 0.0 if send_all else schedule.bound()
        sent = messages = nbytes = 0
        unsent = 0.0
        for j in live:
            mask = everything if send_all else changed(x, held[j], bound)
            nbytes += node.send(j, "params", **wire.snap_frame(x, mask, cfg.value_bytes))
            if not node.last_lost:  # a missed frame (transient failure): j keeps, and is known to keep, the old
                held[j][mask] = x[mask]
            sent += int(mask.sum())
            messages += 1
            if not send_all:
                unsent = max(unsent, float((x - held[j]).abs().max()))
        restart = False
        if schedule is not None:
            threshold_now = schedule.threshold
            restart = schedule.record(unsent) and cfg.stages != "continue"
        node.log("exchange", iteration=iteration, sent=sent, values=n * messages, messages=messages, bytes=nbytes,
                 threshold=threshold_now if schedule else 0.0,
                 ape=schedule.ape if schedule else 0.0, restart=int(restart))
        if restart:
            prev = None  # the next iteration is EXTRA's first, from the current parameters
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


# ------------------------------------------------------------------------------------------ the PS at a peer


def ps_host(seed: int, peers: list[int]) -> int:
    """The peer that hosts the parameter server: drawn with the run's seed, the same at every peer."""
    return peers[random.Random(f"{seed}/ps-host").randrange(len(peers))]


class DenseGradients:
    """How a peer's gradient reaches the host in ``ps_peer``: as it is, ``value_bytes`` per value. A subclass
    changes the encoding (TernGrad's, ``edgeml.algorithms.terngrad``)."""

    def agree(self, node: Node, trainer, others: list[int]) -> None:
        """At the host, once its own gradient is computed and before it receives the others' (TernGrad's scaler
        sharing); nothing for dense gradients."""

    def encode(self, node: Node, trainer, host: int) -> dict[str, Any]:
        """At every other peer: the fields of the message that carries its gradient to ``host``."""
        import torch

        return {"grad": trainer.grad.to({4: torch.float32, 8: torch.float64}[node.algo.value_bytes])}

    def decode(self, data: dict[str, Any], trainer) -> torch.Tensor:
        """At the host: a peer's gradient from its message's fields."""
        return data["grad"]


DENSE = DenseGradients()


def ps_peer(node: Node, gradients: DenseGradients = DENSE) -> None:
    """A peer of the PS scheme: the host averages every peer's gradient (``gradients`` says how they travel) and
    steps."""
    import torch

    cfg = node.algo
    trainer = node.trainer()
    host = ps_host(node.cfg.run.seed, node.ranks("worker"))
    others = [r for r in node.ranks("worker") if r != host]
    dtype = {4: torch.float32, 8: torch.float64}[cfg.value_bytes]
    if node.rank == host:
        node.expose(trainer.params)
    iteration = 0
    while True:
        peer_gradient(node, trainer)
        if node.rank == host:
            gradients.agree(node, trainer, others)
            total = trainer.grad.clone().double()
            for r in others:
                total += gradients.decode(node.recv(r, "grad").data, trainer).double()
            trainer.grad.copy_(total / (len(others) + 1))
            trainer.sgd(cfg.lr)
            node.count("iterations")
            iteration += 1
            for r in others:
                node.send(r, "model", detour=True, params=trainer.params.to(dtype))
            if iteration == cfg.iterations:  # after the round's last messages
                node.stop_run(f"{iteration} iterations done")
        else:
            node.push(host, "grad", detour=True, **gradients.encode(node, trainer, host))
            trainer.params.copy_(node.recv(host, "model")["params"])


# ------------------------------------------------------------------------------------------ registration


def peer_nodes(program):
    """``nodes(cfg)``: one ``program`` per peer (every node is a worker)."""
    return lambda cfg: [("worker", program)] * cfg.cluster.workers


SOLVER = ("cvxpy", "scipy.sparse")
"""The weight matrix's solver (``weights.optimal_weights``): a second to import, so procs loads it before the clock."""

register(AlgorithmSpec("snap", "SNAP: EXTRA among neighbours, optimized weights, only changes above the APE bound",
                       SNAPConfig, peer_nodes(exchange_peer), "SNAP Sec. IV, Alg. 1", preload=SOLVER,
                       display="SNAP"))
register(AlgorithmSpec("snap0", "SNAP-0: SNAP sending every changed parameter (APE threshold 0)", SNAP0Config,
                       peer_nodes(exchange_peer), "SNAP Sec. V", preload=SOLVER, display="SNAP-0"), "snap-0")
register(AlgorithmSpec("sno", "Select Neighbour Only: EXTRA among neighbours, every parameter every round",
                       ExchangeConfig, peer_nodes(functools.partial(exchange_peer, send_all=True)), "SNAP Sec. V",
                       preload=SOLVER, display="SNO"))
register(AlgorithmSpec("peer_ps", "Synchronous parameter server hosted at a peer, gradients routed over the "
                       "topology", PeerConfig, peer_nodes(ps_peer), "SNAP Sec. V", display="PS"))
