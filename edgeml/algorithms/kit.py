"""The parameter-server kit: what every PS algorithm shares, written once (ADSP Sec. 2.1, Eq. 1; Alg. 2).

Workers send updates U (already scaled by their local learning rate eta') to a parameter server (PS), which
applies W <- W - eta U with the global learning rate eta (Eq. 1 with mu = 0; eta = 1/M by default, ADSP
Sec. 5.1) and returns W. An algorithm of the family is what differs from that:

Server side
- ``ParameterServer(node, rule=sgd_rule)``: the preamble (W, a copy of the initial model, exposed for
  evaluation; eta; the worker ranks) and the bookkeeping. ``version`` counts the models the PS has made (one
  per update applied on arrival, one per barrier round); ``pulled[w]`` is the version worker w last received;
  an update's *staleness* is ``version - pulled[src]`` when it arrives: the models made since its worker
  pulled, logged to the ``staleness`` series. ``rule(ps, msg, staleness)`` applies one update to W (the hook
  for ASGD's eta / staleness, sparse or compressed updates). A subclass that needs more state overrides
  ``step(msg, staleness)`` and extends ``reply`` (AdaComp's per-parameter counters, snapshot at each pull).
- ``ps.apply(msg)``: one update on arrival (SSP, ASP, ADSP; ASGD, AdaComp, Comp-ASGD).
- ``ps.gather()`` then ``ps.apply_round(msgs, combine=...)``: a barrier round (BSP, ADACOMM; ESync's PS mode
  with a ``combine`` that averages the round). ``gather`` waits for one push from *every* worker, crashed ones
  included: a barrier protocol stalls when a worker dies, as it prescribes (it has no failure detector).
- ``ps.reply(dst, **extra)``: send W (and extra fields) and record the pull.
- ``serve_async(ps, bound)``: the whole server loop of SSP (bound s), ASP (no bound), and of ASGD, AdaComp or
  Comp-ASGD given their ``ParameterServer``.

Worker side
- ``ps_worker(node, pack=dense, scaled=True, fields=with_loss)``: one mini-batch gradient per push, U = eta' g
  (BSP, SSP, ASP); ``pack(cfg, spans, U)`` turns U into the message's fields (AdaComp's top-c sparse encodings),
  ``scaled=False`` pushes g itself (ASGD and AdaComp, whose PS applies the rate) and ``fields(loss, reply)`` the
  push's other fields (the batch loss; AdaComp: the version of the model the gradient was computed on).
- ``LocalWorker(node, cfg)``: local SGD between commits, accumulating U = sum eta'(t) g (ADSP Alg. 2 lines
  6-7; ADSP, ADACOMM; ESync's local iterations); ``commit`` pushes U and continues from the returned model;
  ``timed_pull`` measures a commit's round trip before the first commit.

Configuration: ``PSConfig`` (lr, global_lr) and ``LocalSGDConfig`` (the decaying local learning rate), each number's
range declared with its field (``schema.ranged``; a subclass that changes a default declares it again). Settings
on the paper's time scale may be left at 0 (auto): ``resolve(job)`` derives them from ``time_scale(job)``, so
a default run of any length has several periods, trials and adaptations in it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from edgeml.schema import ranged

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Message, Node


# ------------------------------------------------------------------------------------------ configuration


def time_scale(job) -> float:
    """The run's unit for settings on the paper's time scale: 20 steps of the fastest device or 1/40 of the time
    budget (``stop.max_time``), whichever is longer. ADSP's 60 s check period is many mini-batches long
    and a small part of its hour-scale runs; with this unit a default 20 s run of 0.01 s steps gets 0.5 s
    periods, and a 1000 s run of 2 s steps 40 s periods (what experiments/adsp/ chose by hand)."""
    return max(20 * job.base_step_s, job.cfg.stop.max_time / 40)


@dataclass
class PSConfig:
    lr: float = ranged(0.1, gt=0)
    """Local learning rate eta': a worker's update is U = eta' g."""
    global_lr: float = ranged(0.0, ge=0, zero="1/M for M workers")
    """Global learning rate eta at the PS; 0 means 1/M for M workers."""
    lr_decay: float = ranged(1.0, gt=0, le=1)
    """eta' is multiplied by this every ``lr_decay_s`` seconds of the run's clock (exponential decay, as ADSP
    Sec. 5.1's local rate: a baseline tuned alike); 1: constant."""
    lr_decay_s: float = ranged(600.0, gt=0)
    """Time constant of the decay, in seconds of the run's clock."""

    def eta(self, num_workers: int) -> float:
        return self.global_lr or 1.0 / num_workers

    def local_lr(self, t: float) -> float:
        """eta' at time ``t`` of the run's clock."""
        return self.lr if self.lr_decay == 1 else local_lr(self.lr, self.lr_decay, self.lr_decay_s, t)


@dataclass
class LocalSGDConfig(PSConfig):
    """PS algorithms whose workers take local SGD steps between commits (ADSP, ADACOMM)."""

    lr_decay: float = ranged(0.9, gt=0, le=1)
    """The local learning rate is multiplied by this every ``lr_decay_s`` seconds (exponential decay; 1: none)."""
    lr_decay_s: float = ranged(0.0, ge=0, zero="derived from the run: 20 time units")
    """Time constant of the local learning-rate decay, in seconds of the run's clock. 0 (auto): 20 time units
    (``kit.time_scale``): half the time budget or 400 steps of the fastest device, whichever is longer. The
    paper says only that the rate "decays exponentially"."""

    time_settings = ("lr_decay_s",)
    """Settings whose 0 means auto, derived in ``resolve`` (not annotated: no field); each declares its range
    (``ranged(0.0, ge=0, zero=...)``) with its field."""

    def resolve(self, job) -> "LocalSGDConfig":
        """A copy with every auto (0) time setting derived from the run; every node derives the same values."""
        return dataclasses.replace(self, lr_decay_s=self.lr_decay_s or 20 * time_scale(job))

    def log_settings(self, node: Node) -> None:
        """One ``settings`` row with the resolved time settings, so the run directory says what auto chose."""
        node.log("settings", **{key: getattr(self, key) for key in self.time_settings})


def local_lr(lr: float, decay: float, decay_s: float, t: float) -> float:
    """eta'(t) = lr * decay^(t / decay_s): exponential decay over time (ADSP Sec. 5.1)."""
    return lr * decay ** (t / decay_s)


# ------------------------------------------------------------------------------------------ the server

Rule = Callable[["ParameterServer", "Message", int], None]
"""An update rule: apply ``msg`` (which arrived with ``staleness``) to ``ps.W``."""


def sgd_rule(ps: ParameterServer, msg: Message, staleness: int) -> None:
    """W <- W - eta U (ADSP Eq. 1 with mu = 0; Alg. 2 PS line 3)."""
    ps.W.add_(msg["update"], alpha=-ps.eta)


class ParameterServer:
    """The PS's model, learning rate and version/staleness bookkeeping (see the module docstring)."""

    def __init__(self, node: Node, rule: Rule = sgd_rule):
        self.node = node
        self.W = node.job.init_params.to(node.device, copy=True)  # on the PS's device (cluster.devices)
        node.expose(self.W)
        self.workers = node.ranks("worker")
        self.eta = node.algo.eta(len(self.workers))
        self.rule = rule
        self.version = 0
        self.pulled = {w: 0 for w in self.workers}

    def staleness(self, src: int) -> int:
        """Models made since worker ``src`` last pulled."""
        return self.version - self.pulled[src]

    def step(self, msg: Message, staleness: int) -> None:
        """Apply one update to W with the rule (the method a subclass overrides)."""
        self.rule(self, msg, staleness)

    def _record(self, msg: Message, fields: dict[str, Any]) -> int:
        s = self.staleness(msg.src)
        self.node.log("staleness", worker=self.node.worker_index(msg.src), staleness=s, **fields)
        return s

    def apply(self, msg: Message, **fields: Any) -> int:
        """Apply one update on arrival (a new model version); log its staleness with ``fields``; return it."""
        s = self._record(msg, fields)
        self.step(msg, s)
        self.version += 1
        return s

    def apply_round(self, msgs: list[Message],
                    combine: Callable[[ParameterServer, list[Message]], None] | None = None) -> None:
        """Apply a barrier round, in rank order whatever the arrival order: every update was computed on the
        model of the previous round (staleness 0). ``combine(ps, msgs)`` replaces one ``step`` per update
        (e.g. one averaged step). The round makes one model version."""
        msgs = sorted(msgs, key=lambda m: m.src)
        stale = [self._record(m, {}) for m in msgs]
        if combine is None:
            for m, s in zip(msgs, stale):
                self.step(m, s)
        else:
            combine(self, msgs)
        self.version += 1

    def reply(self, dst: int, tag: str = "model", **extra: Any) -> None:
        """Send the current model (with ``extra`` fields) to ``dst``, which thereby pulls this version."""
        self.node.send(dst, tag, params=self.W, **extra)
        self.pulled[dst] = self.version

    def gather(self, tag: str = "push") -> list[Message]:
        """A barrier: wait for one message ``tag`` from every worker; return them in arrival order."""
        got: dict[int, Message] = {}
        while len(got) < len(self.workers):
            msg = self.node.recv(tag=tag)
            got[msg.src] = msg
        return list(got.values())


def serve_async(ps: ParameterServer, bound: float = math.inf) -> None:
    """Apply every push on arrival; answer a worker that has pushed c updates only once c <= min_j c_j + bound
    (SSP, Ho et al. 2013; ASP with no bound). A crashed worker's count stops, so SSP waits for it."""
    node = ps.node
    clock = {w: 0 for w in ps.workers}
    held: list[int] = []
    while True:
        msg = node.recv(tag="push")
        ps.apply(msg)
        clock[msg.src] += 1
        held.append(msg.src)
        slowest = min(clock.values())
        ready = [w for w in held if clock[w] <= slowest + bound]
        held = [w for w in held if clock[w] > slowest + bound]
        for w in ready:
            ps.reply(w)


# ------------------------------------------------------------------------------------------ workers


Pack = Callable[[Any, Sequence[tuple[int, int]], "torch.Tensor"], dict[str, Any]]
"""``pack(cfg, spans, update)``: the message fields of an update, given the algorithm's config and the
(offset, size) of each layer in the flat vector (``Trainer.spans``), e.g. a per-layer top-c sparse encoding."""


def dense(cfg: Any, spans: Sequence[tuple[int, int]], update: torch.Tensor) -> dict[str, Any]:
    """The update as it is: one float32 tensor on the wire."""
    return {"update": update}


def with_loss(loss: float, reply: Message | None) -> dict[str, Any]:
    """A push's fields besides the update: the batch loss."""
    return {"loss": loss}


def ps_worker(node: Node, pack: Pack = dense, *, scaled: bool = True,
              fields: Callable[[float, Message | None], dict[str, Any]] = with_loss) -> None:
    """Compute a mini-batch gradient g, push ``pack`` of U = eta' g (of g itself when not ``scaled``: a PS that
    applies the learning rate, as ASGD's) with ``fields(batch loss, the PS's last reply or None)``, continue from
    the returned model. The encoding is part of the worker's step (AdaComp Alg. 1 lines 11-15: the gradient,
    then its selection), so on real processes its time is computation, throttled with the gradient's."""
    trainer = node.trainer()
    ps = node.ranks("ps")[0]
    cfg = node.algo
    spans = trainer.spans
    lr = cfg.lr  # eta' of the step: ``PSConfig.local_lr``, constant unless it decays
    decays = scaled and getattr(cfg, "lr_decay", 1) != 1  # a PS that applies the rate itself (not scaled): none

    def step() -> tuple[float, dict[str, Any]]:
        loss = trainer.gradient()
        return loss, pack(cfg, spans, trainer.grad * lr if scaled else trainer.grad)

    reply = None
    while True:
        if decays:
            lr = cfg.local_lr(node.now())  # at the step's start
        loss, packed = node.compute(step, samples=trainer.batch_size)
        node.push(ps, "push", **packed, **fields(loss, reply))
        node.count("commits")
        reply = node.recv(ps, "model")
        trainer.params.copy_(reply["params"])


class LocalWorker:
    """A worker's local SGD between commits: U = sum eta'(t) g over its local steps (ADSP Alg. 2 lines 6-7)."""

    def __init__(self, node: Node, cfg: LocalSGDConfig):
        self.node = node
        self.cfg = cfg
        self.trainer = node.trainer()
        self.update = self.trainer.params.new_zeros(self.trainer.params.shape)  # U_i
        self.steps = 0  # local steps since the last commit

    def step(self) -> float:
        """One local SGD step at eta'(t), accumulated into U; returns the mini-batch loss."""
        t = self.trainer
        loss = self.node.compute(t.gradient, samples=t.batch_size)
        lr = self.cfg.local_lr(self.node.now())
        self.update.add_(t.grad, alpha=lr)  # U_i <- U_i + eta' g_i
        t.sgd(lr)
        self.steps += 1
        return loss

    def run(self, tau: int) -> list[float]:
        """``tau`` local steps; their mini-batch losses."""
        return [self.step() for _ in range(tau)]

    def commit(self, ps: int, tag: str = "push", **data: Any) -> Message:
        """Push U (a failure point) with ``data``, wait for the PS's reply, continue from its model, reset U."""
        self.node.push(ps, tag, update=self.update, **data)
        self.node.count("commits")
        msg = self.node.recv(ps, "model")
        self.trainer.params.copy_(msg["params"])
        self.update.zero_()
        self.steps = 0
        return msg

    def timed_pull(self, ps: int) -> float:
        """Pull the model with a request the size of a commit; return the round trip, a commit's overhead O_i.

        The request carries a zero tensor as large as U, so the exchange moves a commit's bytes each way and
        takes what a commit takes on this worker's link (latency, bandwidth, extra delay) without knowing it."""
        t0 = self.node.now()
        self.node.send(ps, "pull", padding=self.update)
        self.trainer.params.copy_(self.node.recv(ps, "model")["params"])
        return self.node.now() - t0


def ps_nodes(server: Callable, worker: Callable, *others: tuple[str, Callable]) -> Callable[[Any], list]:
    """``nodes(cfg)`` for a PS algorithm: the PS (rank 1), ``others`` (e.g. a scheduler), then the workers."""
    def nodes(cfg) -> list[tuple[str, Callable]]:
        return [("ps", server), *others] + [("worker", worker)] * cfg.cluster.workers
    return nodes
