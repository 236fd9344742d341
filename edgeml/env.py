"""The run's world, keyed by rank: each node's device and speed, its network, and what runs beside it.

One ``Env`` (``build_env(cfg)``) answers every question a backend asks about the environment, for every node
whatever its role; algorithms see it only through the node interface (the step's duration, a message's
arrival, ``neighbours()``, ``load()``). Ranks are the algorithm's nodes in program order from 1 (0 is the
monitor). The config names nodes by role instead (``NODE_SETS``): ``3`` or ``"0-3"`` are worker indices,
``"ps"`` every node of a role, ``"worker:0-1"`` some of them, ``"*"`` every node; terms join with commas.

Devices. Every node has a speed factor (workers: the ``cluster.hetero`` profile; other roles: 1) multiplied by
its time-varying slowdowns (``cluster.slowdowns``, by worker or by node set), and a device kind, ``cpu`` or
``cuda`` (``run.device``, overridden per node by ``cluster.devices``). The kind says where the node's tensors
live; speeds come from the factors in both backends.

Network. A ``topology.Topology`` over all ranks. The default star of access links (``network.latency_s``,
``up_mbps``, ``down_mbps``, ``links`` per worker; other roles ideal) gives exactly ``hetero.Cluster``'s message
timings; ``complete``, ``ring``, ``random`` and ``edges`` graphs give every link ``link_latency_s`` and
``link_mbps``. ``network.failed_links`` takes a seeded fraction of links down (``topology.random_outage``).
Each message's flight gains a seeded jitter drawn uniformly from [0, ``jitter_s``].

Random waits (adacomp.txt Sec. IV-A: "a random waiting time, for each worker, between the effective
computation time and the push"): exponential with mean ``cluster.random_wait_s`` (memoryless, so the order of
pushes is random) or uniform on [0, 2 x mean]; drawn from the node's own seeded stream (``rng``).

Co-running load (``[load] schedule``): workloads of kind ``cpu``, ``disk``, ``net`` or ``io`` (disk and net),
intensity u in (0, 1], over [start, end). ``procs`` runs real processes for them
(``edgeml.runtime.interference``); ``sim`` applies this model, in which each resource is shared max-min fairly
(``fair_share``: each claimant gets its demand or an equal share of what is left, as Linux's CFS shares a CPU
between runnable threads and TCP flows share a link):

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

import hashlib
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from edgeml import topology
from edgeml.errors import UserError
from edgeml.hetero import build_cluster
from edgeml.runtime.interference import RESOURCES, Load

DEVICES = ("cpu", "cuda")
NODE_SETS = "worker indices (2, '0-3'), a role ('ps'), some of a role ('worker:0-1') or '*' for every node, " \
            "joined with commas"


class Delivery(NamedTuple):
    """What one message costs: (time on the sender's first link, remaining flight time, links crossed)."""

    tx: float
    flight: float
    hops: int


@dataclass(frozen=True)
class Slowdown:
    """Node ``rank``'s steps take ``factor`` times longer during [start, end)."""

    rank: int
    start: float
    end: float
    factor: float


@dataclass(frozen=True)
class Workload:
    """Co-running work of ``kind`` (``interference.RESOURCES``) at ``intensity`` on node ``rank`` during
    [start, end)."""

    rank: int
    kind: str
    intensity: float
    start: float
    end: float


def fair_share(capacity: float, demands: Sequence[float]) -> float:
    """Max-min fair level L: claimant i gets min(demand_i, L) and the shares add up to ``capacity``;
    ``inf`` when every demand fits."""
    left, n = capacity, len(demands)
    if sum(demands) <= capacity:
        return math.inf
    for i, d in enumerate(sorted(demands)):
        if d * (n - i) >= left:
            return left / (n - i)
        left -= d
    raise AssertionError("unreachable: the demands exceed the capacity")


@dataclass
class Env:
    """The environment of one run (see the module docstring); built by ``build_env``."""

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
                jitter: random.Random | None = None, detour: bool = False) -> Delivery | None:
        """The cost of an ``nbytes`` message sent at ``t``, or ``None`` when it is lost (a failed link between
        neighbours, unless ``detour``, or no path left). ``jitter``: the sender's jitter stream, needed when
        ``jitter_s`` > 0."""
        route = self.topology.route(src, dst, t, detour)
        if route is None:
            return None
        if self.workloads:
            route = self._shared(route, t)
        tx, flight = route.delay(nbytes)
        if self.jitter_s > 0:
            if jitter is None:
                raise ValueError("network.jitter_s is set: pass the sender's jitter stream (Env.rng(rank, 'jitter'))")
            flight += jitter.uniform(0.0, self.jitter_s)
        return Delivery(tx, flight, route.hops)

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


# ------------------------------------------------------------------------------------------------- from the config
def parse_nodes(spec: Any, roles: Mapping[str, list[int]], key: str) -> list[int]:
    """The ranks a node set names (``NODE_SETS``), sorted; ``UserError`` naming ``key`` when it names none or
    a node that does not exist."""
    def bad(problem: str) -> UserError:
        return UserError(f"{key} = {spec!r} {problem}: name nodes as {NODE_SETS} (roles here: {', '.join(roles)})")

    if isinstance(spec, bool) or not isinstance(spec, (int, str)):
        raise bad("is not a node set")
    out: set[int] = set()
    for term in ([spec] if isinstance(spec, int) else [s.strip() for s in spec.split(",")]):
        if term == "*":
            out.update(r for ranks in roles.values() for r in ranks)
            continue
        if isinstance(term, int):
            role, span = "worker", str(term)
        elif ":" in term:
            role, _, span = term.partition(":")
        elif term[:1].isdigit():
            role, span = "worker", term
        else:
            role, span = term, ""
        if role not in roles:
            raise bad(f"names role {role!r}, which this algorithm does not have")
        ranks = roles[role]
        if not span:
            out.update(ranks)
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", span.strip())
        if not m:
            raise bad(f"has {term!r}, which is not an index or a range like 0-3")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if not 0 <= lo <= hi < len(ranks):
            raise bad(f"has {term!r}, outside the {len(ranks)} {role} node(s) (indices 0..{len(ranks) - 1})")
        out.update(ranks[lo:hi + 1])
    if not out:
        raise bad("names no node")
    return sorted(out)


def _entry(item: Any, key: str, required: Sequence[str], optional: Sequence[str] = ()) -> dict:
    if not isinstance(item, dict) or any(k not in item for k in required) \
            or any(k not in (*required, *optional) for k in item):
        keys = ", ".join([*required, *(f"{k} (optional)" for k in optional)])
        raise UserError(f"{key} entry {item!r}: use a table with the keys {keys}")
    return item


def _number(item: dict, name: str, key: str, *, low: float = 0.0, strict: bool = False,
            high: float = math.inf, default: float | None = None) -> float:
    """``item[name]`` (``default`` when absent and allowed) if a finite number in range, else a UserError."""
    if name not in item and default is not None:
        return default
    v = item.get(name)
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and (v > low if strict else v >= low) and v <= high):
        bound = f"{'>' if strict else '>='} {low:g}" + (f" and <= {high:g}" if high < math.inf else "")
        raise UserError(f"{key} entry {item!r}: {name} must be a finite number {bound}"
                        + (" (leave it out: until the run ends)" if name == "end" else ""))
    return float(v)


def _seed(seed: int, stream: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}/{stream}".encode(), digest_size=8).digest(), "little")


def _network(cfg, roles: Mapping[str, list[int]], links: Mapping[int, Any]) -> topology.Topology:
    net = cfg.network
    ranks = sorted(r for rs in roles.values() for r in rs)
    workers = roles.get("worker", [])
    if net.topology == "star":
        for key in ("link_latency_s", "link_mbps"):
            if getattr(net, key):
                raise UserError(f"network.{key} sets the links of generated topologies: the star's access links "
                                f"take network.latency_s, up_mbps and down_mbps")
        if net.edges:
            raise UserError("network.edges is read with topology = 'edges' only: set network.topology = 'edges'")
        return topology.star(ranks, {workers[i]: link for i, link in links.items() if i < len(workers)})
    for key in ("latency_s", "up_mbps", "down_mbps", "links"):
        if getattr(net, key):
            raise UserError(f"network.{key} describes the star's access links: with topology = "
                            f"'{net.topology}' use network.link_latency_s and link_mbps (or per-link values in "
                            f"network.edges)")
    if net.edges and net.topology != "edges":
        raise UserError("network.edges is read with topology = 'edges' only: set network.topology = 'edges'")

    def one(name: Any) -> int:
        found = parse_nodes(name, roles, "network.edges")
        if len(found) != 1:
            raise UserError(f"network.edges: {name!r} names {len(found)} nodes: each end of a link is one node")
        return found[0]

    edges = []
    for e in net.edges:
        if isinstance(e, dict) and "u" in e and "v" in e:
            edges.append({**e, "u": one(e["u"]), "v": one(e["v"])})
        elif isinstance(e, list) and len(e) == 2:
            edges.append((one(e[0]), one(e[1])))
        else:
            edges.append(e)  # refused by from_edges with the allowed shapes
    try:
        graph = topology.build(net.topology, ranks, degree=net.degree, seed=_seed(cfg.run.seed, "topology"),
                               latency_s=net.link_latency_s, mbps=net.link_mbps, edges=edges,
                               label=lambda r: _name(roles, r))
    except UserError as exc:
        raise UserError(f"network.{'edges' if net.topology == 'edges' else 'degree'}: {exc}") from None
    if net.commit_delay_s:
        graph = topology.Topology(graph.graph, extra_s={w: net.commit_delay_s for w in workers})
    return graph


def build_env(cfg, roles: Mapping[str, list[int]] | None = None, *, base_step_s: float | None = None) -> Env:
    """Resolve the config's devices, network, failures, waits and load schedule for the algorithm's nodes
    (``roles``: role -> ranks; by default those of ``cfg.run.algorithm``). Raises ``UserError`` on bad input."""
    from edgeml.algorithms.registry import roles_of

    roles = {role: list(ranks) for role, ranks in (roles or roles_of(cfg)).items()}
    cluster = build_cluster(cfg)
    workers = roles.get("worker", [])
    ranks = sorted(r for rs in roles.values() for r in rs)
    factors = {r: 1.0 for r in ranks}
    factors.update({r: f for r, f in zip(workers, cluster.factors)})

    worker_slowdowns = iter(cluster.slowdowns)  # parsed by hetero, in config order
    slowdowns = []
    for item in cfg.cluster.slowdowns:
        if isinstance(item, dict) and "node" in item:
            _entry(item, "cluster.slowdowns", ("node", "start", "factor"), ("end",))
            start = _number(item, "start", "cluster.slowdowns")
            end = _number(item, "end", "cluster.slowdowns", low=start, strict=True, default=math.inf)
            factor = _number(item, "factor", "cluster.slowdowns", strict=True)
            for r in parse_nodes(item["node"], roles, "cluster.slowdowns"):
                slowdowns.append(Slowdown(r, start, end, factor))
        else:
            s = next(worker_slowdowns)
            if s.worker < len(workers):
                slowdowns.append(Slowdown(workers[s.worker], s.start, s.end, s.factor))

    devices = {r: cfg.run.device for r in ranks}
    if not isinstance(cfg.cluster.devices, dict):
        raise UserError(f"cluster.devices = {cfg.cluster.devices!r} is not a table: write e.g. {{cpu = \"0-1\"}}")
    named: dict[int, str] = {}
    for kind, spec in cfg.cluster.devices.items():
        if kind not in DEVICES:
            raise UserError(f"cluster.devices: unknown device kind {kind!r}: use {' or '.join(DEVICES)}, "
                            f"e.g. {{cpu = \"0-1\"}}")
        for r in parse_nodes(spec, roles, f"cluster.devices.{kind}"):
            if named.get(r, kind) != kind:
                raise UserError(f"cluster.devices puts {_name(roles, r)} on both {named[r]} and {kind}: "
                                f"name each node once")
            named[r] = devices[r] = kind

    workloads = []
    for item in cfg.load.schedule:
        _entry(item, "load.schedule", ("node", "kind", "intensity"), ("start", "end"))
        if item["kind"] not in RESOURCES:
            raise UserError(f"load.schedule entry {item!r}: kind must be one of {', '.join(RESOURCES)}")
        u = _number(item, "intensity", "load.schedule", strict=True, high=1.0)
        start = _number(item, "start", "load.schedule", default=0.0)
        end = _number(item, "end", "load.schedule", low=start, strict=True, default=math.inf)
        workloads += [Workload(r, item["kind"], u, start, end)
                      for r in parse_nodes(item["node"], roles, "load.schedule")]

    net = cfg.network
    graph = _network(cfg, roles, cluster.links)
    if net.failed_links > 0:
        end = net.failed_from_s + net.failed_for_s if net.failed_for_s > 0 else math.inf
        try:
            outage = topology.random_outage(graph, net.failed_links, start=net.failed_from_s, end=end,
                                            seed=_seed(cfg.run.seed, "failures"),
                                            keep_connected=not net.failed_may_disconnect)
        except UserError as exc:
            raise UserError(f"network.failed_links: {exc} (network.failed_may_disconnect = true)") from None
        graph = graph.with_outages(outage)

    return Env(roles, graph, factors, devices, tuple(slowdowns), tuple(workloads),
               base_step_s=base_step_s if base_step_s is not None else (cfg.cluster.base_step_s or 0.01),
               jitter_s=net.jitter_s, wait_s=cfg.cluster.random_wait_s, wait_dist=cfg.cluster.random_wait,
               cores=cfg.load.cores, threads=cfg.run.threads, seed=cfg.run.seed)


def _name(roles: Mapping[str, list[int]], rank: int) -> str:
    """``"worker 3"``: how a node is named to users."""
    role = next(role for role, ranks in roles.items() if rank in ranks)
    return f"{role} {roles[role].index(rank)}"
