"""The runtime interface every node program is written against, and the message path both backends share.

A node program is a plain function ``program(node: Node) -> None`` that loops forever; the run ends it by
raising ``StopRun`` out of whichever runtime call it is blocked in (so programs need no stopping logic).
The interface is deliberately small, and shaped like the papers' pseudocode:

- ``compute(fn, work=1.0, interrupt=None)``: one training step on this node's device. The step's
  *duration* comes from the device model (virtual in ``sim``, throttled wall time in ``procs``), never from
  the algorithm; ``work`` scales it (a partial batch, building aggregated data), and ``interrupt=(src, tag)``
  ends it early when a matching message arrives (``compute`` then returns ``node.INTERRUPTED``).
- ``send(dst, tag, **data)`` / ``recv(src=None, tag=None, timeout=None)``: point-to-point messages whose
  payload is tensors and scalars. ``push`` is a ``send`` marked as a failure point (``cluster.crash_prob``).
- ``all_reduce(tensor, role, mean=False)``: a sum (or mean) over the live nodes of a role (ESync, SSGD).
- ``now()``, ``sleep(seconds)``: the run's clock (seconds since start, wall or virtual).
- ``alive(rank)``: whether a node is alive as far as this node knows (see "Faults").
- ``expose(params)``: the tensor that holds this node's view of the global model; the monitor evaluates it
  (averaging over nodes that expose one) without the algorithm's involvement, and without charging the
  node's clock.
- ``log(series, **fields)``: a row of an algorithm-specific time series (staleness, decisions, ...).
- ``stop_run(reason)``: end the whole run as ``stopped`` (the algorithm's own decision), keeping its results.
- ``rng`` / ``gen``: this node's seeded ``random.Random`` (random peers) and ``torch.Generator``
  (stochastic rounding, sampling), so no algorithm couples nodes through a global random state.
- ``trainer()``: this node's ``edgeml.train.Trainer`` over its shard, on its ``device`` (``cpu``/``cuda``).
- ``neighbours()``: the ranks one link away in the run's topology whose links are up; ``load()``: what the
  node's co-running workloads use (``edgeml.world``); ``count(name, n)``: a progress counter of the algorithm
  (rounds, PS iterations, epochs), summed over nodes into a column of ``evals.csv``.

**One message path.** A message's fate is decided here, once, in ``Node.send``: its arrival time (the route's
cost in the run's topology, ``edgeml.world.World.message``, behind the sender's uplink, which transmits one
message at a time; messages between two nodes arrive in the order they were sent), whether it is lost (a
failed link or no path left, a transient miss, or the destination is dead when it would arrive: the sender's
``last_lost``; a silent miss is sent, lost and not told), and its bytes and byte-hops
(bytes x links crossed, SNAP Sec. II-B). ``push`` first waits the environment's random wait
(``cluster.random_wait_s``, counted as waiting). A backend only delivers a
message at its arrival time (``sim`` schedules an event, ``procs`` has the receiver hold it until then) and
waits. Wire size of a message: the bytes of its tensors plus 8 bytes per scalar (int, float or bool). Tags
and the transport's framing are not counted, so byte counts match the papers' accounting.

**Faults.** A node is dead once it crashed (crash schedule, ``crash_prob`` after a push) or its program
ended. A message to a dead node is dropped and counted in the sender's ``messages_lost``, never an error:
one whose destination is known dead at its arrival time (known deaths and the crash schedule, which every
node knows in advance) is dropped at the sender; one whose destination dies while it is in flight is dropped
on arrival and counted for its sender too. ``sim`` knows every death at once; in ``procs`` a node learns of a
death from the message it was pushing when it failed, from the monitor's notice to every node (a few
milliseconds) or from a failed connection.

**all_reduce** sums over the members of the role that are alive when the last of them joins, in rank order
(so ``sim`` is deterministic), and returns the sum (or the mean over those members). Its duration is the
ring all-reduce model of the topology (``Topology.all_reduce_time``) among them, and each member is charged
what a ring moves (its byte-hops: to its successor in rank order):
2(n-1) messages and 2(n-1)/n x size bytes (rounded down) sent, the same received. A member that dies while
waiting is left out; a crash never blocks the others.

**Evaluation** (the monitor's) averages the models of the exposing nodes that have not crashed; the run's
final row averages every node that ever exposed, a crashed node with the model it held when it failed.

Accounting shared by both backends: compute / communication / waiting time, steps, messages (sent, lost,
received) and bytes, per node and per message tag. Blocked time in ``recv`` is split into communication (the
delivered message's own time in flight, and this node's last message's) and waiting (the rest); time still
blocked when the run ends counts as waiting, and a step cut short by the end counts as compute.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from edgeml.rundir import AVERAGE_COLUMNS, EVAL_COLUMNS, eval_column  # evals.csv's own columns: no counter's
from edgeml.world.model import Missed

T = TypeVar("T")

SCALAR_BYTES = 8


class StopRun(Exception):
    """Raised out of a runtime call when the run is over; node programs let it propagate."""


class NodeCrashed(StopRun):
    """Raised out of a runtime call when this node fails (crash schedule or crash probability)."""


def payload_nbytes(data: dict[str, Any]) -> int:
    """Wire size of a payload: tensor bytes plus 8 bytes per scalar."""
    n = 0
    for value in data.values():
        if isinstance(value, (int, float, bool)):
            n += SCALAR_BYTES
        elif hasattr(value, "element_size"):  # a tensor (duck-typed: this module does not import torch)
            n += value.numel() * value.element_size()
        else:
            raise TypeError(f"message payload values must be tensors or scalars, got {type(value).__name__}")
    return n


def ring_traffic(n: int, nbytes: int) -> tuple[int, int]:
    """(messages, bytes) each of ``n`` members sends (and receives) in a ring all-reduce of ``nbytes``."""
    return (2 * (n - 1), 2 * (n - 1) * nbytes // n) if n > 1 else (0, 0)


@dataclass
class Message:
    src: int
    tag: str
    data: dict[str, Any]
    nbytes: int
    sent_at: float = 0.0
    arrive_at: float = 0.0
    """When it reaches the destination under the link model (run clock; the backend delivers it then)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Transport metadata (never counted as payload)."""

    @property
    def flight_s(self) -> float:
        """Time between leaving the sender's program and arriving (communication)."""
        return self.arrive_at - self.sent_at

    def __getitem__(self, key: str) -> Any:
        return self.data[key]


@dataclass
class Counters:
    compute_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    steps: int = 0
    samples: int = 0
    messages_sent: int = 0
    bytes_sent: int = 0
    messages_lost: int = 0
    """Messages this node sent that were never delivered (the destination was dead)."""
    messages_recv: int = 0
    bytes_recv: int = 0
    byte_hops: int = 0
    """Bytes sent x links crossed (SNAP Sec. II-B's communication cost)."""
    counts: dict[str, float] = field(default_factory=dict)
    """The algorithm's progress counters (``Node.count``)."""


@dataclass
class TagCounters:
    """What a node sent under one message tag (``all_reduce`` for its all-reduces)."""

    messages_sent: int = 0
    bytes_sent: int = 0
    messages_lost: int = 0
    min_bytes: int = 0
    max_bytes: int = 0
    byte_hops: int = 0

    def add(self, messages: int, nbytes: int, lost: bool = False, byte_hops: int = 0) -> None:
        size = nbytes // messages if messages else 0
        self.min_bytes = min(self.min_bytes, size) if self.messages_sent else size
        self.max_bytes = max(self.max_bytes, size)
        self.messages_sent += messages
        self.bytes_sent += nbytes
        self.messages_lost += messages if lost else 0
        self.byte_hops += byte_hops


@dataclass
class NodeInfo:
    rank: int
    role: str
    index: int
    """Index among nodes of the same role (worker i is device i of the heterogeneity profile)."""

    @property
    def name(self) -> str:
        return f"{self.role} {self.index}"


@dataclass
class Layout:
    """Who is who in a run: ranks of each role and each node's identity (rank 0 is the monitor)."""

    roles: dict[str, list[int]]
    infos: dict[int, NodeInfo]


def layout(programs: list[tuple[str, Any]]) -> Layout:
    """The layout of programs listed in rank order from rank 1."""
    roles: dict[str, list[int]] = {}
    for rank, (role, _) in enumerate(programs, start=1):
        roles.setdefault(role, []).append(rank)
    infos = {r: NodeInfo(r, role, roles[role].index(r)) for r, (role, _) in enumerate(programs, start=1)}
    return Layout(roles, infos)


def matches(msg: Message, src: int | None, tag: str | None) -> bool:
    return (src is None or msg.src == src) and (tag is None or msg.tag == tag)


def describe_blocked(blocked: list[tuple[NodeInfo, str]], limit: int = 6) -> str:
    """``ps 0 in recv(tag='push'); worker 0, worker 2 in recv(src=ps 0, tag='model')``: who waits for what."""
    groups: dict[str, list[str]] = {}
    for info, what in blocked:
        groups.setdefault(what, []).append(info.name)
    parts = []
    for what, names in groups.items():
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        parts.append(f"{', '.join(names[:limit])}{more} in {what}")
    return "; ".join(parts)


class _Interrupted:
    """What ``compute`` returns for a step cut short by a message (``Node.INTERRUPTED``)."""

    def __repr__(self) -> str:
        return "INTERRUPTED"

    def __reduce__(self) -> str:
        return "INTERRUPTED"  # unpickles as the one instance


INTERRUPTED = _Interrupted()
COUNTER_NAME = re.compile(r"[a-z][a-z0-9_]*")


class Node:
    """Backend-independent part of a node. Backends subclass it and implement the ``_``-prefixed hooks."""

    INTERRUPTED = INTERRUPTED
    """Returned by ``compute`` when ``interrupt`` ended the step: the step's result is discarded."""

    def __init__(self, rank: int, lay: Layout, job: Any, dead: set[int]):
        self.info = lay.infos[rank]
        self.layout = lay
        self.job = job
        """The run's shared job (config, data, initial model; see ``edgeml.train.Job``)."""
        self.dead = dead
        """Ranks this node knows to be dead (the backend keeps it current)."""
        self.counters = Counters()
        self.tags: dict[str, TagCounters] = {}
        self.series: list[tuple[str, dict[str, Any]]] = []
        self.exposed = None
        self.crashed_at: float | None = None
        self.blocked_on: tuple | None = None
        """What this node waits for while blocked with no timeout: ("recv", src, tag) or ("all_reduce", role)."""
        self.send_horizon = 0.0
        """When the last message this node sent arrives (its in-flight time counts as communication)."""
        self.up_busy = 0.0
        """When this node's uplink has sent everything handed to it."""
        self.crash_schedule = job.world.crash_times
        """Rank -> scheduled crash time: known to every node in advance."""
        seed = job.cfg.run.seed
        self._crash_rng = random.Random(f"{seed}/crash/{rank}")
        self.rng = random.Random(f"{seed}/node/{rank}")
        """This node's own random numbers (random peers): seeded, so ``sim`` stays deterministic."""
        self.world = job.world
        """The run's world (``edgeml.world``): the backends' to apply; programs ask through the methods below."""
        self.device: str = self.world.device(rank)
        """Where this node's tensors live: ``cpu`` or ``cuda`` (``run.device``, per node ``cluster.devices``)."""
        self._waits = self.world.rng(rank, "wait")
        self._jitter = self.world.rng(rank, "jitter")
        self._miss = self.world.rng(rank, "miss")
        self.last_lost = False
        """Whether the last message this node sent was lost (a failed link, no path left, a transient miss or a
        dead destination): the sender knows, as a failed connection tells it (SNAP keeps a neighbour's view of
        its values by it). A silent miss (``network.failures = "silent"``) is lost untold: False."""
        self._arrivals: dict[int, float] = {}
        """Destination -> arrival time of the last message sent to it (messages between a pair stay in order)."""
        self._gen = None
        self._load_since: float | None = None

    # ------------------------------------------------------------------ identity
    @property
    def rank(self) -> int:
        return self.info.rank

    @property
    def role(self) -> str:
        return self.info.role

    @property
    def index(self) -> int:
        return self.info.index

    @property
    def roles(self) -> dict[str, list[int]]:
        return self.layout.roles

    @property
    def cfg(self):
        return self.job.cfg

    @property
    def algo(self):
        return self.job.cfg.algo

    def ranks(self, role: str) -> list[int]:
        return list(self.layout.roles.get(role, []))

    def worker_index(self, rank: int) -> int | None:
        info = self.layout.infos.get(rank)
        return info.index if info is not None and info.role == "worker" else None

    def name(self, rank: int) -> str:
        return self.layout.infos[rank].name if rank in self.layout.infos else f"rank {rank}"

    @property
    def is_worker(self) -> bool:
        return self.info.role == "worker"

    def waiting_for(self) -> str | None:
        """``recv(src=ps 0, tag='model')`` or ``all_reduce('worker')``: what this node is blocked in, if anything."""
        if self.blocked_on is None:
            return None
        if self.blocked_on[0] == "all_reduce":
            return f"all_reduce({self.blocked_on[1]!r})"
        _, src, tag = self.blocked_on
        where = ([f"src={self.name(src)}"] if src is not None else []) + ([f"tag={tag!r}"] if tag is not None else [])
        return f"recv({', '.join(where)})"

    def alive(self, rank: int, at: float | None = None) -> bool:
        """Whether node ``rank`` is alive (at time ``at``, default now) as far as this node knows."""
        if rank in self.dead:
            return False
        crash = self.crash_schedule.get(rank)
        return crash is None or crash > (self.now() if at is None else at)

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    @property
    def gen(self):
        """This node's seeded ``torch.Generator`` (made on first use)."""
        if self._gen is None:
            import torch

            self._gen = torch.Generator().manual_seed(random.Random(f"{self.cfg.run.seed}/gen/{self.rank}")
                                                      .getrandbits(63))
        return self._gen

    def trainer(self, worker: int | None = None, *, all_data: bool = False):
        """A ``Trainer`` over the shard of worker ``worker`` (default: this node's index; ``all_data``: the whole
        training set), on this node's device, drawing from ``gen``; it starts from the run's initial model."""
        shard = None if all_data else (self.index if worker is None else worker)
        return self.job.trainer(shard, self.device, gen=self.gen)

    # ------------------------------------------------------------------ environment
    def neighbours(self, all: bool = False, *, rank: int | None = None, at: float | None = None) -> list[int]:
        """Ranks one link away in the run's topology from node ``rank`` (default: this one) whose links are up at
        ``at`` (default: now); ``all``: every neighbour, up or not (their number is the node's degree). On the
        default star every other node is one. Any node may ask about any other (SNAP's peer graph)."""
        return self.world.neighbours(self.rank if rank is None else rank,
                                     None if all else (self.now() if at is None else at))

    @property
    def base_step_s(self) -> float:
        """Step time of a factor-1 device with no slowdown or load (``cluster.base_step_s``, calibrated in procs):
        the run's unit of computation time, the same at every node."""
        return self.job.base_step_s

    def shard_size(self, worker: int | None = None) -> int:
        """Training samples in the shard of worker ``worker`` (default: this node's index)."""
        return len(self.job.shards[self.index if worker is None else worker])

    def load(self):
        """``Load(cpu, net, disk)``: what this node's co-running workloads used since the previous call (cpu in
        cores, net and disk as fractions of capacity); the modelled schedule in ``sim``, measured in ``procs``."""
        t = self.now()
        out = self._load(self._load_since, t)
        self._load_since = t
        return out

    def stop_run(self, reason: str) -> None:
        """End the whole run now with status ``stopped`` and ``reason`` (an algorithm's own decision, e.g. no
        platform left alive); what was measured so far is kept. Does not return."""
        self._stop_run(str(reason))
        raise StopRun()

    def count(self, name: str, n: float = 1) -> None:
        """Add ``n`` to the progress counter ``name`` (``rounds``, ``iterations``, ``epochs``): summed over
        nodes into a column of ``evals.csv``, so count a global quantity at one node."""
        if not COUNTER_NAME.fullmatch(name) or eval_column(name):
            raise ValueError(f"counter name {name!r}: use lower-case letters, digits and _, not one of "
                             f"{', '.join(EVAL_COLUMNS + AVERAGE_COLUMNS)} or accuracy_c<k>")
        counts = self.counters.counts
        counts[name] = counts.get(name, 0) + n

    # ------------------------------------------------------------------ compute
    def compute(self, fn: Callable[[], T], *, samples: int = 0, work: float = 1.0,
                interrupt: tuple[int | None, str | None] | None = None) -> T:
        """Run one training step ``fn`` on this node's device; its duration follows the device model, scaled
        by ``work``. With ``interrupt=(src, tag)`` (None matches any) the step ends when a matching message
        arrives before its end: only the elapsed time is charged, the message stays to be received, the step
        is not counted, and the result is ``node.INTERRUPTED`` (``fn`` has run: apply its result only when the
        step was not interrupted)."""
        if not (0.0 <= work < math.inf):
            raise ValueError(f"compute(work={work!r}): work must be a finite number >= 0")
        if interrupt is not None and (not isinstance(interrupt, tuple) or len(interrupt) != 2):
            raise ValueError(f"compute(interrupt={interrupt!r}): give (src, tag), either may be None")
        t0 = self.now()
        c = self.counters
        try:
            result, duration = self._compute(fn, work, interrupt)
        except StopRun:
            c.compute_s += self.now() - t0  # a step cut short by the end of the run or a crash
            raise
        c.compute_s += duration
        if result is INTERRUPTED:
            return result
        c.steps += 1
        c.samples += samples
        return result

    def step_duration(self, work: float = 1.0) -> float:
        """Modelled duration of a step of ``work`` steps' worth started now (the device and its modelled load)."""
        return self.world.step_time(self.rank, self.now(), work)

    # ------------------------------------------------------------------ costs and evaluation
    # What a program may ask of the run's world and model without reading them: the cost model is the
    # training step's (``edgeml.train``), times and routes are the world's.
    def step_time(self, work: float = 1.0, *, rank: int | None = None, at: float | None = None) -> float:
        """Modelled duration of ``work`` steps' worth of computation on node ``rank`` (default: this one)
        started at ``at`` (default: now), from its device and modelled load (no throttling noise)."""
        return self.world.step_time(self.rank if rank is None else rank, self.now() if at is None else at, work)

    def message_time(self, dst: int, nbytes: int, *, src: int | None = None, at: float = 0.0) -> float | None:
        """Transmission plus flight time of an ``nbytes`` message from ``src`` (default: this node) to ``dst``
        sent at ``at`` over the topology's route, with no queueing, jitter or co-running load; ``None`` when
        no path is left."""
        route = self.world.topology.route(self.rank if src is None else src, dst, at)
        if route is None:
            return None
        tx, flight = route.delay(nbytes)
        return tx + flight

    def forward_work(self, samples: int) -> float:
        """Work, in training steps, of a forward pass (losses, no gradient) over ``samples`` samples: the
        ``work`` to pass to ``compute`` for it."""
        return self.job.forward_work(samples)

    def forward_macs(self) -> float:
        """Multiply-adds of one sample's forward pass through the run's model (a training step of b samples
        is about 3 b times this)."""
        return self.job.forward_macs()

    def evaluator(self, x, y) -> Callable[[Any], tuple[float, float]]:
        """A function giving (mean loss, accuracy) of flat parameters on the examples ``x``, ``y`` with the
        run's model and loss, outside any clock (ADSP's probe of the training loss)."""
        return self.job.evaluator(x, y)

    # ------------------------------------------------------------------ messages
    def send(self, dst: int, tag: str, *, detour: bool = False, **data: Any) -> int:
        """Send ``data`` to node ``dst``; returns the message's wire size in bytes. ``detour``: a message to a
        neighbour whose link is down takes the shortest path left instead of being lost (see
        ``edgeml.world.topology``; traffic the network routes, as to a parameter server). ``detour`` is therefore not
        a data field name."""
        return self._send(dst, tag, data, failure_point=False, detour=detour)

    def push(self, dst: int, tag: str, *, detour: bool = False, **data: Any) -> int:
        """``send``, marked as a failure point: with ``cluster.crash_prob`` p, a worker fails right after it
        (the papers' "fails after a push"). Queries, replies and control messages use ``send``. It first waits
        the environment's random wait (``cluster.random_wait_s``; AdaComp Sec. IV-A), counted as waiting."""
        wait = self.world.random_wait(self._waits)
        if wait > 0:
            t0 = self.now()
            try:
                self.sleep(wait)
            finally:
                self.counters.wait_s += self.now() - t0
        return self._send(dst, tag, data, failure_point=True, detour=detour)

    def _send(self, dst: int, tag: str, data: dict[str, Any], failure_point: bool, detour: bool = False) -> int:
        self._check()
        nbytes = payload_nbytes(data)
        p = self.world.crash_prob
        fails = failure_point and p > 0 and self.is_worker and self._crash_rng.random() < p
        t = self.now()
        route = self.world.message(self.rank, dst, nbytes, t, self._jitter, detour, self._miss)
        delivered, byte_hops, missed = False, 0, isinstance(route, Missed)  # Missed: a silent miss, not told
        if route is not None:  # None: a failed link or no path left, the message is lost on the way
            start = max(t, self.up_busy)  # the uplink sends one message at a time, lost or not
            self.up_busy = start + route.tx
            arrive = max(start + route.tx + route.flight, self._arrivals.get(dst, 0.0))
            self._arrivals[dst] = arrive
            self.send_horizon = max(self.send_horizon, arrive)
            byte_hops = nbytes * route.hops
            msg = Message(self.rank, tag, data, nbytes, sent_at=t, arrive_at=arrive)
            delivered = not missed and self.alive(dst, arrive) and self._deliver(dst, msg, last=fails)
        c = self.counters
        c.messages_sent += 1
        c.bytes_sent += nbytes
        c.byte_hops += byte_hops
        if not delivered:
            c.messages_lost += 1
        self.last_lost = not delivered and not missed
        self._tag(tag).add(1, nbytes, lost=not delivered, byte_hops=byte_hops)
        c.comm_s += self.now() - t  # handing the message over (zero on the virtual clock)
        if fails:
            self.crashed_at = self.now()
            raise NodeCrashed(f"worker {self.index} failed after a push (p = {p})")
        return nbytes

    def recv(self, src: int | None = None, tag: str | None = None, timeout: float | None = None) -> Message | None:
        """Next message (optionally from ``src`` with ``tag``); ``None`` once ``timeout`` seconds pass."""
        t0 = self.now()
        if timeout is None:
            self.blocked_on = ("recv", src, tag)
        msg = None
        try:
            msg = self._await(src, tag, timeout)
        finally:
            self.blocked_on = None
            self._account_blocked(t0, msg)
        if msg is None:
            return None
        self.counters.messages_recv += 1
        self.counters.bytes_recv += msg.nbytes
        for key, value in msg.data.items():  # a message from a node on another device arrives on this one's
            if getattr(value, "device", None) is not None and value.device.type != self.device:
                msg.data[key] = value.to(self.device)
        return msg

    def _account_blocked(self, t0: float, msg: Message | None) -> None:
        t1 = self.now()
        blocked = t1 - t0
        # communication: while our own last message was still in flight, or the awaited one was
        outgoing = (t0, min(t1, max(t0, self.send_horizon)))
        incoming = (max(t0, t1 - msg.flight_s), t1) if msg is not None else (t1, t1)
        overlap = max(0.0, min(outgoing[1], incoming[1]) - max(outgoing[0], incoming[0]))
        comm = min(blocked, (outgoing[1] - outgoing[0]) + (incoming[1] - incoming[0]) - overlap)
        self.counters.comm_s += comm
        self.counters.wait_s += blocked - comm

    def all_reduce(self, tensor, role: str = "worker", *, mean: bool = False):
        """Sum ``tensor`` in place over the live nodes of ``role`` (this node among them), or average it with
        ``mean``; returns it."""
        if self.role != role:
            raise ValueError(f"{self.info.name} cannot join an all_reduce of role {role!r}: only its members can")
        t0 = self.now()
        self.blocked_on = ("all_reduce", role)
        try:
            members, complete_at = self._all_reduce(tensor, role)
        except StopRun:
            self.counters.wait_s += self.now() - t0
            raise
        finally:
            self.blocked_on = None
        c = self.counters
        c.wait_s += complete_at - t0
        c.comm_s += self.now() - complete_at
        messages, nbytes = ring_traffic(len(members), tensor.numel() * tensor.element_size())
        successor = members[(members.index(self.rank) + 1) % len(members)]
        byte_hops = self.world.topology.byte_hops(self.rank, successor, nbytes, complete_at) or 0
        c.messages_sent += messages
        c.bytes_sent += nbytes
        c.byte_hops += byte_hops
        c.messages_recv += messages
        c.bytes_recv += nbytes
        self._tag("all_reduce").add(messages, nbytes, byte_hops=byte_hops)
        if mean:
            tensor.div_(len(members))
        return tensor

    def _tag(self, tag: str) -> TagCounters:
        t = self.tags.get(tag)
        if t is None:
            t = self.tags[tag] = TagCounters()
        return t

    # ------------------------------------------------------------------ backend hooks
    def _check(self) -> None:
        """Raise ``StopRun`` (or ``NodeCrashed``) when the run, or this node, is over; backend housekeeping."""
        raise NotImplementedError

    def _compute(self, fn: Callable[[], T], work: float,
                 interrupt: tuple[int | None, str | None] | None) -> tuple[T, float]:
        """Run ``fn`` and take the step's modelled duration (``work`` steps' worth); returns (result, duration),
        or (``INTERRUPTED``, elapsed) when a message matching ``interrupt`` arrived first (left unconsumed)."""
        raise NotImplementedError

    def _load(self, since: float | None, t: float):
        """The co-running load over [since, t] (since None: now)."""
        raise NotImplementedError

    def _stop_run(self, reason: str) -> None:
        """Ask the run to end with status ``stopped`` and ``reason``."""
        raise NotImplementedError

    def _deliver(self, dst: int, msg: Message, last: bool) -> bool:
        """Deliver ``msg`` to ``dst`` at ``msg.arrive_at``; False if it cannot reach ``dst`` (dead). ``last``:
        this node fails right after this message, which tells the receiver so."""
        raise NotImplementedError

    def _await(self, src: int | None, tag: str | None, timeout: float | None) -> Message | None:
        """The next deliverable matching message, waiting at most ``timeout`` seconds (None: forever)."""
        raise NotImplementedError

    def _all_reduce(self, tensor, role: str) -> tuple[list[int], float]:
        """Sum ``tensor`` in place over the live members of ``role`` and spend the modelled reduction time;
        returns (the ranks summed, in rank order; the time the last of them joined)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ observation
    def expose(self, params) -> None:
        """Declare ``params`` as this node's copy of the global model, for evaluation."""
        self.exposed = params

    def log(self, series: str, **fields: Any) -> None:
        """Append a row to the time series ``series`` (written to ``series/<series>.csv``)."""
        self.series.append((series, {"time_s": self.now(), "rank": self.rank, "role": self.role, **fields}))
