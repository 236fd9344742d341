"""ESync (Algorithms 1-2, Eqs. 4-8) and its baselines SSGD and standalone training.

**ESync.** Every communication round t starts from the global model w_t, which each device copies into a
replica (Eq. 4). Before each local iteration a device asks the *State Server* whether to aggregate
(``QUERY-STATE``, Alg. 2); while the answer is NOT-READY it trains its replica with plain mini-batch SGD at the
local rate eta (Eq. 5) and measures its capability c, the duration of its last iteration. When READY, it
sends Delta w_t^i = w_{t,n_i}^i - w_t (Eq. 6); the deltas are averaged over the devices (Eq. 7) and applied
with the global rate eps (Eq. 8): w_{t+1} = w_t + eps * mean(Delta w). Then the device tells the State Server
(``RESET-STATE-SERVER``, Alg. 1 line 25) and starts round t + 1.

*Aggregation* (``esync.aggregation``, chosen once per device: ``aggregation``): ``allreduce``, the runtime's
all-reduce among the live devices, or ``ps``, a parameter server that waits for every device's delta, averages
them and returns w_{t+1}. The two give bit-identical models in ``sim`` (both sum in rank order, divide by p, then
add eps times the mean).

*The State Server* (its own node, role ``state``) keeps per device (rank, local iterations k, capability c,
last finish time t_e, ready, round) and answers ``QUERY-STATE`` exactly as Alg. 2 (``query_state``): not
ready when k = 0 or the slowest device (largest c) has not pulled the current round yet; ready when the
querying device is the slowest, the slowest is ready, or c + epsilon exceeds the slowest's remaining time
c_slowest - (now - t_e,slowest). A device that has not reported yet counts as not having pulled. Crashed
devices are left out of "the slowest". Queries are plain sends, never failure points.

*Non-blocking mode with delayed ACK* (Sec. 4.2, ``esync.mode = "delayed_ack"``): a device sends its query and
trains on without waiting; the State Server answers only READY (NOT-READY is implicit). The capability then
includes the query's round trip (measured on the READY that ends the round; at first, on a blocking query
before training). A READY for iteration k aborts the iteration in progress (k + delta) at once through the
runtime's interruptible compute, and the device aggregates its iterations 1 .. k + delta - 1.

Choices where the paper is silent (settings):
- ``state_eps_s``, the epsilon of Alg. 2: "a small constant"; the authors' code used 0.5 s against 3.5 s
  steps. 0 (auto): a tenth of the fastest device's step time.
- ``probe``: Alg. 1 line 3 measures the first capability with a batch (``step``); the authors' code ran one
  forward pass (``forward``, modelled as a third of a step: ``node.forward_work``).
- ``max_local``: not in the paper (nor a cap in the authors' code), an ablation: at most this many local
  iterations per round (blocking mode); a device at the cap still tells the State Server, then aggregates.
  With a cap of 1 ESync is SSGD at any speeds, as with equal speeds (tested).

Recorded: ``series/rounds.csv`` (per device and round: local iterations, waiting time at aggregation, the
capability c, and in delayed-ACK mode the iteration the READY was for and delta); the counter ``rounds`` (at
device 0).

**SSGD** (synchronous data-parallel SGD): every device computes one mini-batch gradient, the gradients are
averaged (all-reduce or parameter server, ``ssgd.aggregation``) and every replica takes the same step. With
equal speeds ESync does one local iteration per round and equals SSGD on the same batches (tested).

**Standalone** (alias ``centralized``): one device trains on the whole training set with plain SGD, the
accuracy reference of ESync Table 1 and the centralized baseline of SNAP. It is device 0 of the
heterogeneity profile.

ASGD, the asynchronous baseline, is ``asgd`` (``edgeml/algorithms/adacomp.py``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Literal

from edgeml.algorithms.kit import ParameterServer
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.errors import UserError
from edgeml.schema import ranged

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Node


# ------------------------------------------------------------------------------------------ configuration


@dataclass
class SSGDConfig:
    lr: float = ranged(0.05, gt=0)
    """Local learning rate eta. ESync Sec. 5 uses 0.001 (the authors' code 0.0005), which
    experiments/esync/ pins; the default learns within a default run's 20 s."""
    aggregation: Literal["allreduce", "ps"] = "allreduce"
    """How updates are averaged: the runtime's all-reduce among the devices, or a parameter server."""

    def eta(self, num_workers: int) -> float:
        """The rate on the mean update, at the devices (all-reduce) or the parameter server: 1, the devices send
        -eta g."""
        return 1.0


@dataclass
class ESyncConfig(SSGDConfig):
    global_lr: float = ranged(1.0, gt=0)
    """Global learning rate eps of Eq. 8: w_{t+1} = w_t + eps * mean(Delta w)."""
    mode: Literal["blocking", "delayed_ack"] = "blocking"
    """``blocking``: a device waits for each State Server answer; ``delayed_ack``: it trains on and aborts the
    iteration in progress when READY arrives (Sec. 4.2)."""
    state_eps_s: float = ranged(0.0, ge=0, zero="a tenth of the fastest device's step time")
    """Epsilon of Alg. 2 in seconds ("a small constant to avoid boundary error"); 0 (auto): a tenth of the
    fastest device's step time (the authors' code: 0.5 s with 3.5 s steps)."""
    probe: Literal["step", "forward"] = "step"
    """The first capability: one training step on a batch (Alg. 1 line 3) or one forward pass (the authors'
    code; modelled as a third of a step)."""
    max_local: int = ranged(0, ge=0, zero="as many as the State Server allows")
    """At most this many local iterations per round (blocking mode): a device that has done them aggregates
    whatever the State Server answers. Not in the paper (an ablation: how far fast replicas drift)."""

    def validate(self, cfg) -> None:
        if self.max_local and self.mode != "blocking":
            raise UserError(f"esync.max_local = {self.max_local} caps the rounds of the blocking mode: set "
                            f"esync.mode = 'blocking' or esync.max_local = 0")

    def eta(self, num_workers: int) -> float:
        """The rate on the mean delta, at the devices (all-reduce) or the parameter server: eps of Eq. 8."""
        return self.global_lr


@dataclass
class StandaloneConfig:
    lr: float = ranged(0.05, gt=0)
    """Learning rate of plain mini-batch SGD."""
    weight_decay: float = ranged(0.0, ge=0, zero="no regularization")
    """L2 regularization added to each gradient (weight_decay x w): a reference for peers that minimize the same
    regularized objective (SNAP's simulations)."""


# ------------------------------------------------------------------------------------------ the State Server


@dataclass
class Record:
    """The State Server's row for one device (Alg. 2 line 2)."""

    rank: int
    k: int = 0
    """Local iterations done in the current round."""
    c: float = math.inf
    """Capability: seconds per local iteration."""
    t_e: float = 0.0
    """When the device finished its last iteration (or its last aggregation)."""
    ready: bool = False
    round: int = -1
    """Rounds the device has completed (pulled); -1 until it first reports."""


def query_state(table: dict[int, Record], current: int, k: int, c: float, t_e: float, now: float,
                eps: float, live: set[int] | None = None) -> bool:
    """QUERY-STATE (ESync Alg. 2) for device ``current``, updating ``table`` in place; True = READY.

    The slowest device is the live one with the largest capability (the lowest rank among equals). It has not
    completed the PULL of the current round when its round is behind the querying device's."""
    me = table[current]
    me.k, me.c, me.t_e = k, c, t_e  # line 3 (ready and round unchanged)
    candidates = [r for r in table.values() if live is None or r.rank in live]
    slowest = max(candidates, key=lambda r: (r.c, -r.rank))
    if k == 0 or slowest.round < me.round:  # line 5
        return False
    rest = slowest.c - now + slowest.t_e  # line 8
    if slowest is me or slowest.ready or me.c + eps > rest:  # line 9
        me.ready = True
        return True
    return False


def state_server(node: Node) -> None:
    """Answer QUERY-STATE and RESET-STATE-SERVER (Alg. 2; Alg. 1 line 25) for the devices."""
    cfg = node.algo
    devices = node.ranks("worker")
    table = {r: Record(r) for r in devices}
    eps = cfg.state_eps_s or node.base_step_s / 10
    delayed = cfg.mode == "delayed_ack"
    answered: set[int] = set()  # delayed ACK: devices told READY this round
    while True:
        msg = node.recv()
        r = msg.src
        if msg.tag == "ping":  # delayed ACK: a device measures its round trip before training
            node.send(r, "pong")
            continue
        if msg.tag == "reset":
            rec = table[r]
            rec.k, rec.ready, rec.round, rec.t_e = 0, False, msg["round"], msg["t_e"]
            answered.discard(r)
            continue
        if table[r].round < 0:
            table[r].round = msg["round"]
        live = {d for d in devices if node.alive(d)}
        ready = query_state(table, r, msg["k"], msg["c"], msg["t_e"], node.now(), eps, live)
        if not delayed:
            node.send(r, "state", ready=ready, k=msg["k"])
        elif ready and r not in answered:
            answered.add(r)
            node.send(r, "ready", k=msg["k"], asked_at=msg["asked_at"])


# ------------------------------------------------------------------------------------------ aggregation


def aggregation(node: Node, model: torch.Tensor) -> Callable[[torch.Tensor], None]:
    """The devices' aggregation (Eqs. 7-8), chosen once from ``aggregation``: ``aggregate(update)`` sets ``model``,
    this device's copy of the global model, to model + rate x the mean of ``update`` over the devices, rate the
    config's ``eta`` (eps of Eq. 8, or 1 for SSGD's -eta g). By all-reduce among the live devices, each applying
    the rate (their copies are then the global model, exposed for evaluation), or through the parameter server
    (``average_server``), which applies it, exposes the model and returns it."""
    cfg = node.algo
    if cfg.aggregation == "ps":
        ps = node.ranks("ps")[0]

        def through_server(update: torch.Tensor) -> None:
            node.push(ps, "push", update=update)
            model.copy_(node.recv(ps, "model")["params"])  # the parameter server applied Eq. 8
        return through_server

    rate = cfg.eta(len(node.ranks("worker")))
    node.expose(model)

    def all_reduce(update: torch.Tensor) -> None:
        model.add_(node.all_reduce(update, mean=True), alpha=rate)  # Eqs. 7-8
    return all_reduce


def _average(ps: ParameterServer, msgs) -> None:
    """The parameter server's round: W <- W + eps * (sum of the updates in rank order) / p, the all-reduce's
    arithmetic (ESync sends model deltas; SSGD sends -eta times gradients, eps = 1)."""
    total = msgs[0]["update"].clone()
    for m in msgs[1:]:
        total += m["update"]
    ps.W.add_(total.div_(len(msgs)), alpha=ps.eta)


def average_server(node: Node) -> None:
    """Aggregation by parameter server: wait for every device's update, average, return the new model."""
    ps = ParameterServer(node)
    while True:
        msgs = ps.gather()
        ps.apply_round(msgs, combine=_average)
        for w in sorted(m.src for m in msgs):
            ps.reply(w)


# ------------------------------------------------------------------------------------------ devices


class BlockingQuery:
    """QUERY-STATE as Alg. 1 asks it (``mode = "blocking"``): the device waits for each answer."""

    interrupt: tuple[int, str] | None = None
    """The message that ends a local iteration early (``node.compute``'s ``interrupt``): none."""

    def __init__(self, node: Node, state: int):
        self.node, self.state = node, state

    def ready(self, k: int, c: float, t_e: float, t: int) -> bool:
        """Whether to aggregate now, after ``k`` local iterations of round ``t`` at capability ``c``, the last
        finished at ``t_e``."""
        self.node.send(self.state, "query", k=k, c=c, t_e=t_e, round=t)
        return self.node.recv(self.state, "state")["ready"]

    def answer(self) -> int | None:
        """The iteration a READY that interrupted a local iteration was for (never, blocking)."""
        return None


class DelayedAck(BlockingQuery):
    """Sec. 4.2's non-blocking mode with delayed ACK (``mode = "delayed_ack"``): the device asks and trains on;
    only READY comes back, and it interrupts the iteration in progress. The capability it reports includes the
    query's round trip, measured once before training (a blocking ping) and then on each READY."""

    def __init__(self, node: Node, state: int):
        super().__init__(node, state)
        self.interrupt = (state, "ready")
        t0 = node.now()
        node.send(state, "ping")
        node.recv(state, "pong")
        self.rtt = node.now() - t0

    def ready(self, k: int, c: float, t_e: float, t: int) -> bool:
        self.node.send(self.state, "query", k=k, c=c + self.rtt, t_e=t_e, round=t, asked_at=self.node.now())
        return False  # NOT-READY is implicit: train on

    def answer(self) -> int:
        msg = self.node.recv(self.state, "ready")  # READY for iteration msg["k"]: the one in progress is aborted
        self.rtt = self.node.now() - msg["asked_at"]
        return msg["k"]


QUERIES = {"blocking": BlockingQuery, "delayed_ack": DelayedAck}
"""``esync.mode`` -> how a device asks the State Server."""


def _probe(node: Node, trainer, how: str) -> float:
    """The first capability (Alg. 1 line 3): the duration of one batch, as a step or a forward pass."""
    t0 = node.now()
    if how == "forward":
        node.compute(lambda: trainer.losses(trainer.index[:trainer.batch_size]),
                     work=node.forward_work(trainer.batch_size))
    else:  # a fixed batch: the probe leaves the epoch's order of batches as it was
        node.compute(lambda: trainer.gradient(trainer.index[:trainer.batch_size]), samples=trainer.batch_size)
    return node.now() - t0


def esync_device(node: Node) -> None:
    """A device of ESync (Alg. 1), blocking or with delayed ACK."""
    cfg = node.algo
    state = node.ranks("state")[0]
    trainer = node.trainer()
    w_t = trainer.params.clone()  # the global model of the current round; params hold the replica
    aggregate = aggregation(node, w_t)
    c = _probe(node, trainer, cfg.probe)
    query = QUERIES[cfg.mode](node, state)
    t_e, t, k = node.now(), 0, 0
    while True:
        asked_for = None
        # the State Server hears of every iteration; a device at its cap aggregates whatever the answer
        if not query.ready(k, c, t_e, t) and not (cfg.max_local and k >= cfg.max_local):
            t_s = node.now()
            loss = node.compute(trainer.gradient, samples=trainer.batch_size, interrupt=query.interrupt)
            if loss is not node.INTERRUPTED:
                trainer.sgd(cfg.lr)  # Eq. 5
                t_e = node.now()
                c = t_e - t_s
                k += 1
                continue
            asked_for = query.answer()
        # aggregation over the iterations done, 1 .. k
        waited = node.counters.wait_s
        t0 = node.now()
        aggregate(trainer.params - w_t)  # Eq. 6, then Eqs. 7-8 into w_t
        trainer.params.copy_(w_t)
        t += 1
        row = {"round": t, "iterations": k, "aggregation_s": node.now() - t0,
               "wait_s": node.counters.wait_s - waited, "capability": c}
        if asked_for is not None:
            row.update(ready_for=asked_for, delta=k - asked_for + 1)
        node.log("rounds", **row)
        if node.index == 0:
            node.count("rounds")
        k, t_e = 0, node.now()
        node.send(state, "reset", round=t, t_e=t_e)


def ssgd_device(node: Node) -> None:
    """A device of SSGD: every step, the mean of the devices' gradients (times -eta) moves every replica."""
    cfg = node.algo
    trainer = node.trainer()
    aggregate = aggregation(node, trainer.params)
    while True:
        node.compute(trainer.gradient, samples=trainer.batch_size)
        aggregate(trainer.grad.mul(-cfg.lr))
        if node.index == 0:
            node.count("rounds")


def standalone(node: Node) -> None:
    """One device, the whole training set, plain mini-batch SGD."""
    trainer = node.trainer(all_data=True)
    node.expose(trainer.params)
    lr, decay = node.algo.lr, node.algo.weight_decay
    while True:
        node.compute(trainer.gradient, samples=trainer.batch_size)
        if decay:
            trainer.grad.add_(trainer.params, alpha=decay)
        trainer.sgd(lr)


# ------------------------------------------------------------------------------------------ registration


def _nodes(device, with_state: bool):
    def nodes(cfg) -> list:
        out = [("state", state_server)] if with_state else []
        if cfg.algo.aggregation == "ps":
            out.append(("ps", average_server))
        return out + [("worker", device)] * cfg.cluster.workers
    return nodes


register(AlgorithmSpec("esync", "ESync: fast devices train locally until the slowest is ready (State Server)",
                       ESyncConfig, _nodes(esync_device, True), "ESync Alg. 1-2", display="ESync"))
register(AlgorithmSpec("ssgd", "Synchronous SGD: gradients averaged every step (all-reduce or PS)", SSGDConfig,
                       _nodes(ssgd_device, False), "ESync Sec. 5", display="SSGD"))
register(AlgorithmSpec("standalone", "One device trains on the whole training set (the accuracy reference)",
                       StandaloneConfig, lambda cfg: [("worker", standalone)], "ESync Table 1",
                       display="Standalone"),
         "centralized")
