"""The runtime interface every node program is written against.

A node program is a plain function ``program(node: Node) -> None`` that loops forever; the run ends it by
raising ``StopRun`` out of whichever runtime call it is blocked in (so programs need no stopping logic).
The interface is deliberately small, and shaped like the papers' pseudocode:

- ``compute(fn)``: one training step on this node's device. The step's *duration* comes from the device
  model (virtual in ``sim``, throttled wall time in ``procs``), never from the algorithm.
- ``send(dst, tag, **data)`` / ``recv(src=None, tag=None, timeout=None)``: point-to-point messages whose
  payload is tensors and scalars. Their delay follows the link model; their size is counted exactly.
- ``all_reduce(tensor, role)``: a sum over all live nodes of a role (ESync, SSGD).
- ``now()``, ``sleep(seconds)``: the run's clock (seconds since start, wall or virtual).
- ``expose(params)``: the tensor that holds this node's view of the global model; the monitor evaluates it
  (averaging over nodes that expose one) without the algorithm's involvement, and without charging the
  node's clock.
- ``log(series, **fields)``: a row of an algorithm-specific time series (staleness, decisions, ...).
- ``rng``: this node's seeded ``random.Random`` (random peers, random waits).

Accounting shared by both backends lives here: compute / communication / waiting time, steps, messages and
bytes. Blocked time in ``recv`` is split into communication (the delivered message's own time in flight) and
waiting (the rest).

Wire size of a message: the bytes of its tensors plus 8 bytes per scalar (int, float or bool). Tags and the
transport's framing are not counted, so byte counts match the papers' accounting and can be checked by hand.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch

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
        if isinstance(value, torch.Tensor):
            n += value.numel() * value.element_size()
        elif isinstance(value, (int, float, bool)):
            n += SCALAR_BYTES
        else:
            raise TypeError(f"message payload values must be tensors or scalars, got {type(value).__name__}")
    return n


@dataclass
class Message:
    src: int
    tag: str
    data: dict[str, Any]
    nbytes: int
    sent_at: float = 0.0
    flight_s: float = 0.0
    """Time the message spent between leaving the sender's program and arriving (communication)."""
    meta: dict[str, Any] = field(default_factory=dict)
    """Transport metadata (never counted as payload)."""

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
    messages_recv: int = 0
    bytes_recv: int = 0


@dataclass
class NodeInfo:
    rank: int
    role: str
    index: int
    """Index among nodes of the same role (worker i is device i of the heterogeneity profile)."""


@dataclass
class Node:
    """Backend-independent part of a node. Backends subclass it and implement the ``_``-prefixed hooks."""

    info: NodeInfo
    roles: dict[str, list[int]]
    job: Any
    """The run's shared job (config, data, initial model; see ``edgeml.train.Job``)."""
    counters: Counters = field(default_factory=Counters)
    series: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    exposed: torch.Tensor | None = None
    crashed_at: float | None = None
    send_horizon: float = 0.0
    """When the last message this node sent arrives (its in-flight time counts as communication)."""

    def __post_init__(self) -> None:
        self._crash_rng = random.Random(f"{self.job.cfg.run.seed}/crash/{self.info.rank}")
        self.rng = random.Random(f"{self.job.cfg.run.seed}/node/{self.info.rank}")
        """This node's own random numbers (random peers, random waits): seeded, so ``sim`` stays deterministic."""

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
    def cfg(self):
        return self.job.cfg

    @property
    def algo(self):
        return self.job.cfg.algo

    def ranks(self, role: str) -> list[int]:
        return list(self.roles.get(role, []))

    def worker_index(self, rank: int) -> int | None:
        workers = self.roles.get("worker", [])
        return workers.index(rank) if rank in workers else None

    @property
    def is_worker(self) -> bool:
        return self.info.role == "worker"

    # ------------------------------------------------------------------ clock
    def now(self) -> float:
        raise NotImplementedError

    def sleep(self, seconds: float) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ compute
    def compute(self, fn: Callable[[], T], *, samples: int = 0) -> T:
        """Run one training step ``fn`` on this node's device; its duration follows the device model."""
        result, duration = self._compute(fn)
        c = self.counters
        c.compute_s += duration
        c.steps += 1
        c.samples += samples
        return result

    def step_duration(self) -> float:
        """Emulated duration of one step of this device at the current time."""
        factor = self.job.cluster.step_factor(self.index, self.now()) if self.is_worker else 1.0
        return self.job.base_step_s * factor

    def _compute(self, fn: Callable[[], T]) -> tuple[T, float]:
        raise NotImplementedError

    # ------------------------------------------------------------------ messages
    def send(self, dst: int, tag: str, **data: Any) -> int:
        """Send ``data`` to node ``dst``; returns the message's wire size in bytes."""
        return self._send(dst, tag, data, failure_point=False)

    def push(self, dst: int, tag: str, **data: Any) -> int:
        """``send``, marked as a failure point: with ``cluster.crash_prob`` p, a worker fails right after it
        (the papers' "fails after a push"). Queries, replies and control messages use ``send``."""
        return self._send(dst, tag, data, failure_point=True)

    def _send(self, dst: int, tag: str, data: dict[str, Any], failure_point: bool) -> int:
        nbytes = payload_nbytes(data)
        t0 = self.now()
        self.send_horizon = max(self.send_horizon, self._post(dst, tag, data, nbytes))
        self.counters.comm_s += self.now() - t0  # handing the message over (zero on the virtual clock)
        self.counters.messages_sent += 1
        self.counters.bytes_sent += nbytes
        p = self.job.cluster.crash_prob
        if failure_point and self.is_worker and p > 0 and self._crash_rng.random() < p:
            self.crashed_at = self.now()
            raise NodeCrashed(f"worker {self.index} failed after a push (p = {p})")
        return nbytes

    def recv(self, src: int | None = None, tag: str | None = None, timeout: float | None = None) -> Message | None:
        """Next message (optionally from ``src`` with ``tag``); ``None`` once ``timeout`` seconds pass."""
        msg, blocked = self._await(src, tag, timeout)
        t1 = self.now()
        t0 = t1 - blocked
        # communication: while our own last message was still in flight, or the awaited one was
        outgoing = (t0, min(t1, max(t0, self.send_horizon)))
        incoming = (max(t0, t1 - msg.flight_s), t1) if msg is not None else (t1, t1)
        overlap = max(0.0, min(outgoing[1], incoming[1]) - max(outgoing[0], incoming[0]))
        comm = min(blocked, (outgoing[1] - outgoing[0]) + (incoming[1] - incoming[0]) - overlap)
        self.counters.comm_s += comm
        self.counters.wait_s += blocked - comm
        if msg is None:
            return None
        self.counters.messages_recv += 1
        self.counters.bytes_recv += msg.nbytes
        return msg

    def all_reduce(self, tensor: torch.Tensor, role: str = "worker") -> torch.Tensor:
        """Sum ``tensor`` in place over all nodes of ``role``; returns it."""
        comm, wait = self._all_reduce(tensor, role)
        nbytes = tensor.numel() * tensor.element_size()
        self.counters.comm_s += comm
        self.counters.wait_s += wait
        self.counters.bytes_sent += nbytes
        self.counters.bytes_recv += nbytes
        return tensor

    def _post(self, dst: int, tag: str, data: dict[str, Any], nbytes: int) -> float:
        """Hand the message to the transport; return its arrival time on this node's clock."""
        raise NotImplementedError

    def _await(self, src: int | None, tag: str | None, timeout: float | None) -> tuple[Message | None, float]:
        raise NotImplementedError

    def _all_reduce(self, tensor: torch.Tensor, role: str) -> tuple[float, float]:
        raise NotImplementedError

    # ------------------------------------------------------------------ observation
    def expose(self, params: torch.Tensor) -> None:
        """Declare ``params`` as this node's copy of the global model, for evaluation."""
        self.exposed = params

    def log(self, series: str, **fields: Any) -> None:
        """Append a row to the time series ``series`` (written to ``series/<series>.csv``)."""
        self.series.append((series, {"time_s": self.now(), "rank": self.rank, "role": self.role, **fields}))


def layout(programs: list[tuple[str, Any]]) -> tuple[dict[str, list[int]], dict[int, NodeInfo]]:
    """Ranks of each role and each node's identity, for programs listed in rank order from rank 1
    (rank 0 is the monitor)."""
    roles: dict[str, list[int]] = {}
    for rank, (role, _) in enumerate(programs, start=1):
        roles.setdefault(role, []).append(rank)
    infos = {r: NodeInfo(r, role, roles[role].index(r)) for r, (role, _) in enumerate(programs, start=1)}
    return roles, infos


def matches(msg: Message, src: int | None, tag: str | None) -> bool:
    return (src is None or msg.src == src) and (tag is None or msg.tag == tag)
