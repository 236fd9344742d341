"""The run's world, keyed by rank: each node's device and speed, its network, its failures and what runs beside it.

One ``World`` (``edgeml.world.build(cfg, roles)``, built once per run by the runner) answers every question a
backend asks about the environment, for every node whatever its role; algorithms see it only through the node
interface (a step's duration, a message's arrival, ``neighbours()``, ``load()``). Ranks are the algorithm's
nodes in program order from 1 (0 is the monitor); the config names nodes by role instead
(``edgeml.world.build.NODE_SETS``).

Devices. Every node has a speed factor (workers: the ``cluster.hetero`` profile; other roles: 1) multiplied by
its time-varying slowdowns (``cluster.slowdowns``, by worker or by node set), and a device kind, ``cpu`` or
``cuda`` (``run.device``, overridden per node by ``cluster.devices``). The kind says where the node's tensors
live; speeds come from the factors in both backends.

Network. A ``topology.Topology`` over all ranks. The default star of access links (``network.latency_s``,
``up_mbps``, ``down_mbps``, ``links`` per worker; other roles ideal) gives each message latency(a) +
latency(b) + bytes / min(up(a), down(b)) + the sender's commit delay; ``complete``, ``ring``, ``random``
and ``edges`` graphs give every link ``link_latency_s`` and ``link_mbps``. ``network.failed_links`` takes a
seeded fraction of links down (``topology.random_outage``) with ``failures = "permanent"``; with ``"transient"``
each message sent to a neighbour misses with that probability instead (``Misses``), drawn from the sender's
seeded stream, and the sender learns of it; with ``"silent"`` it misses alike, sent and never delivered, and the
sender is not told (``Missed``).
Each message's flight gains a seeded jitter drawn uniformly from [0, ``jitter_s``].

Random waits (AdaComp Sec. IV-A: "a random waiting time, for each worker, between the effective
computation time and the push"): exponential with mean ``cluster.random_wait_s`` (memoryless, so the order of
pushes is random) or uniform on [0, 2 x mean]; drawn from the node's own seeded stream (``rng``).

Co-running load (``[load] schedule``): workloads of kind ``cpu``, ``disk``, ``net`` or ``io`` (disk and net),
intensity u in (0, 1], over [start, end). ``procs`` runs real processes for them
(``edgeml.runtime.interference``); ``sim`` applies this model, in which each resource is shared max-min fairly
(``edgeml.world.load.fair_share``: each claimant gets its demand or an equal share of what is left, as
Linux's CFS shares a CPU between runnable threads and TCP flows share a link):

- CPU: the node's ``load.cores`` cores are shared between the training's ``run.threads`` threads (each
  wanting a whole core) and its cpu workloads (each wanting u of a core); a step lasts longer by the share the
  training loses. One thread on one core beside one workload: x 1/(1 - u) for u <= 1/2, and x 2 beyond (the
  two then split the core evenly); beside k saturating workloads: x (k + 1).
- Network: every link at a node is shared between the node's messages (wanting the whole link) and its net
  and io workloads (u of the link each): the link's rate is scaled by the messages' share, at the more loaded
  end; latencies are unchanged. Links are emulated in both backends, so this applies in ``procs`` too.
- Disk: the training reads nothing from storage (data sets are in memory), so disk load slows nothing; it
  shows in ``load()``, as in ``procs``.

``load(rank, t)`` is what the node's workloads take while it does not compute: cpu in cores, net and disk as
fractions of capacity, each the sum of the workloads' fair shares; an unhindered workload of intensity u
shows as u, as ``interference.LoadMeter`` observes it in ``procs``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import edgeml.world.topology as topology
from edgeml.world.load import RESOURCES, Load, Workload, fair_share


class Delivery(NamedTuple):
    """What one message costs: (time on the sender's first link, remaining flight time, links crossed)."""

    tx: float
    flight: float
    hops: int


class Missed(Delivery):
    """A message sent, costed as any other, that never arrives, its sender not told (a silent miss)."""

    __slots__ = ()


@dataclass(frozen=True)
class Misses:
    """Transient link failures: during [start, end) each message sent to a neighbour (not routed) misses with
    probability ``p``; ``told``: its sender learns of the miss (it is lost before it leaves), otherwise it is sent
    and never arrives (a silent miss)."""

    p: float
    start: float = 0.0
    end: float = float("inf")
    told: bool = True


@dataclass(frozen=True)
class Slowdown:
    """Node ``rank``'s steps take ``factor`` times longer during [start, end)."""

    rank: int
    start: float
    end: float
    factor: float


@dataclass
class World:
    """The world of one run (see the module docstring); built by ``edgeml.world.build``."""

    roles: dict[str, list[int]]
    """Role -> its ranks, in program order."""
    topology: topology.Topology
    factors: dict[int, float]
    """Rank -> speed factor (step time relative to the fastest device)."""
    devices: dict[int, str]
    """Rank -> ``cpu`` or ``cuda``."""
    slowdowns: tuple[Slowdown, ...] = ()
    workloads: tuple[Workload, ...] = ()
    base_step_s: float = 0.01
    """Step time of a factor-1 device (calibrated in procs)."""
    jitter_s: float = 0.0
    wait_s: float = 0.0
    """Mean random wait before a push."""
    wait_dist: str = "exponential"
    cores: int = 1
    threads: int = 1
    seed: int = 0
    crash_times: dict[int, float] = field(default_factory=dict)
    """Rank -> its scheduled fail-stop time (``cluster.crashes``), known to every node in advance."""
    crash_prob: float = 0.0
    """Probability that a worker fails right after each push (``cluster.crash_prob``)."""
    misses: Misses | None = None
    """Transient link failures (``network.failures = "transient"`` or ``"silent"``), or None."""
    _work: dict[int, list[Workload]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._work = {}
        for w in self.workloads:
            self._work.setdefault(w.rank, []).append(w)

    # ---------------------------------------------------------------- nodes
    @property
    def ranks(self) -> list[int]:
        return sorted(self.factors)

    def device(self, rank: int) -> str:
        return self.devices[rank]

    def rng(self, rank: int, stream: str) -> random.Random:
        """A seeded random stream of node ``rank`` for one system effect (``"wait"``, ``"jitter"``), separate
        from the algorithm's ``node.rng`` so that turning an effect on changes no algorithm's draws."""
        return random.Random(f"{self.seed}/{stream}/{rank}")

    # ---------------------------------------------------------------- compute
    def speed_factor(self, rank: int, t: float) -> float:
        """The device's step-time factor at time ``t``: its profile factor times its active slowdowns."""
        f = self.factors[rank]
        for s in self.slowdowns:
            if s.rank == rank and s.start <= t < s.end:
                f *= s.factor
        return f

    def cpu_slowdown(self, rank: int, t: float) -> float:
        """How much longer a step takes beside the node's active cpu workloads (the sim model)."""
        demands = self._demands(rank, t, "cpu")
        if not demands:
            return 1.0
        alone = min(1.0, self.cores / self.threads)
        return alone / min(1.0, fair_share(self.cores, [1.0] * self.threads + demands))

    def step_time(self, rank: int, t: float, work: float = 1.0) -> float:
        """Modelled duration of a step started at ``t`` doing ``work`` steps' worth of computation (sim)."""
        return self.base_step_s * self.speed_factor(rank, t) * self.cpu_slowdown(rank, t) * work

    def random_wait(self, rng: random.Random) -> float:
        """A random delay between a computation and its push, from the node's ``rng(rank, "wait")`` stream
        (0 when ``wait_s`` is 0)."""
        if self.wait_s <= 0:
            return 0.0
        if self.wait_dist == "uniform":
            return rng.uniform(0.0, 2 * self.wait_s)
        return rng.expovariate(1.0 / self.wait_s)

    # ---------------------------------------------------------------- network
    def message(self, src: int, dst: int, nbytes: int, t: float,
                jitter: random.Random | None = None, detour: bool = False,
                miss: random.Random | None = None) -> Delivery | None:
        """The cost of an ``nbytes`` message sent at ``t``, or ``None`` when it is lost (a failed link between
        neighbours, unless ``detour``, or no path left; with transient failures, a miss drawn from ``miss``, the
        sender's stream ``rng(src, "miss")``, for a message sent without ``detour``; a silent miss is ``Missed``,
        costed as any other). ``jitter``: the sender's jitter stream, needed when ``jitter_s``
        > 0."""
        route = self.topology.route(src, dst, t, detour)
        if route is None:
            return None
        m = self.misses
        missed = False
        if m is not None and not detour and m.start <= t < m.end:
            if miss is None:
                raise ValueError("network.failures misses messages: pass the sender's miss stream "
                                 "(World.rng(rank, 'miss'))")
            missed = miss.random() < m.p
            if missed and m.told:
                return None
        if self.workloads:
            route = self._shared(route, t)
        tx, flight = route.delay(nbytes)
        if self.jitter_s > 0:
            if jitter is None:
                raise ValueError("network.jitter_s is set: pass the sender's jitter stream (World.rng(rank, 'jitter'))")
            flight += jitter.uniform(0.0, self.jitter_s)
        return (Missed if missed else Delivery)(tx, flight, route.hops)

    def all_reduce_time(self, ranks: Sequence[int], nbytes: int, t: float = 0.0) -> float:
        return self.topology.all_reduce_time(ranks, nbytes, t)

    def neighbours(self, rank: int, t: float | None = None) -> list[int]:
        """The ranks one link away (through the star's switch: every other node), at ``t`` only those whose
        links are up; without ``t`` every neighbour (their number is the node's degree)."""
        out = []
        for v in self.topology.neighbours(rank, t):
            if v == topology.HUB:
                out += [u for u in self.topology.neighbours(topology.HUB, t) if u != rank]
            else:
                out.append(v)
        return sorted(out)

    # ---------------------------------------------------------------- co-running load
    def load(self, rank: int, t: float, since: float | None = None) -> Load:
        """The modelled utilisation by the node's workloads at ``t`` (see the module docstring), or its mean
        over [since, t] (what ``interference.LoadMeter`` reports between two readings in procs)."""
        if since is not None and since < t:
            cuts = sorted({since, t, *(x for w in self._work.get(rank, ()) for x in (w.start, w.end)
                                       if since < x < t)})
            parts = [(b - a, self.load(rank, a)) for a, b in zip(cuts, cuts[1:])]
            return Load(*(sum(dt * part[i] for dt, part in parts) / (t - since) for i in range(3)))
        used = []
        for resource, capacity in (("cpu", self.cores), ("net", 1.0), ("disk", 1.0)):
            demands = self._demands(rank, t, resource)
            level = fair_share(capacity, demands)
            used.append(sum((min(d, level) for d in demands), 0.0))
        return Load(*used)

    def _demands(self, rank: int, t: float, resource: str) -> list[float]:
        return [w.intensity for w in self._work.get(rank, ())
                if w.start <= t < w.end and resource in RESOURCES[w.kind]]

    def _net_share(self, rank: int, t: float) -> float:
        demands = self._demands(rank, t, "net")
        return min(1.0, fair_share(1.0, [1.0] + demands)) if demands else 1.0

    def _shared(self, route: topology.Route, t: float) -> topology.Route:
        """``route`` with each link's rate scaled by the messages' share at its more loaded end."""
        share = {v: self._net_share(v, t) for v in route.path if v != topology.HUB}
        if route.hops == 0 or all(s == 1.0 for s in share.values()):
            return route
        g = self.topology.graph
        rates = [g.edges[u, v]["Bps"][u] * min(share.get(u, 1.0), share.get(v, 1.0))
                 for u, v in zip(route.path, route.path[1:])]
        return route._replace(first_Bps=rates[0], bottleneck_Bps=min(rates))


