"""The network as a graph: routes, hop counts, what a message costs, and links that fail.

Nodes are the run's ranks; the star adds one relay node, ``HUB`` (the switch every access link plugs into).
Each edge is a link with a one-way latency and a rate in each direction (bytes/s; ``inf`` is an ideal link).

Routing. A message follows a shortest path by hop count. Ties are broken the way a routing table would: each
node forwards to its lowest-numbered neighbour that is one hop closer to the destination, so a route is the
lexicographically smallest shortest path and every suffix of a route is itself a route. Messages between
direct neighbours use their link only: when it is down the message is lost (SNAP's neighbour exchange,
SNAP Sec. IV-D: the receiver then uses that neighbour's latest values), unless the sender asks for a detour
(``detour=True``: traffic that the network routes, such as a parameter server's). Other messages are routed
around failed links and are lost only when no path is left.

Cost. A message of B bytes on path e_1..e_h takes

    latency(e_1) + ... + latency(e_h) + extra(src) + B / min(rate(e_1), ..., rate(e_h))

(cut-through: packets are forwarded as they arrive, so the message streams at its bottleneck's rate and pays
every hop's latency once; store-and-forward would add B / rate(e) at every hop, which for a message split into
packets is only the last packet's worth). ``extra(src)`` is the sender's per-message delay (ADSP's commit
delay). The sender's first link carries one message after another: ``Route.delay`` returns that transmission
time separately. On the default star, where every path is access link up, hub, access link down, this is the
per-worker access-link model: latency(a) + latency(b) + B / min(up(a), down(b)).

Communication cost (SNAP Sec. II-B): a flow of B bytes over h hops costs B x h byte-hops. On the star a
message between two ranks crosses two links (through the hub), so it costs 2B.

Failures. An ``Outage`` takes a set of links down for [start, end). Routes are computed once per failure
epoch (an interval between outage starts and ends), lazily, one breadth-first search per destination, and
cached: a 200-node graph costs a few hundred searches per epoch.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import networkx as nx
import numpy as np

from edgeml.errors import UserError

HUB = -1
"""The star's switch: a relay node, never a rank."""


@dataclass(frozen=True)
class Link:
    """A node's access link on the star: one-way latency, rates up and down (bytes/s; ``inf`` is ideal) and the
    sender's extra delay per message (``network.commit_delay_s``)."""

    latency_s: float = 0.0
    up_Bps: float = math.inf
    down_Bps: float = math.inf
    extra_s: float = 0.0

TOPOLOGIES: dict[str, str] = {
    "star": "every node on an access link to one switch (the default: the per-worker links of [network])",
    "complete": "every pair of nodes directly linked",
    "ring": "each node linked to the next, the last to the first",
    "random": "a random connected graph of a given average degree (seeded; SNAP's simulations use degree 3)",
    "edges": "a given list of links",
}

Edge = tuple[int, int]


class Route(NamedTuple):
    """A message's path from ``path[0]`` to ``path[-1]`` and what it costs."""

    path: tuple[int, ...]
    latency_s: float
    """Sum of the links' latencies."""
    first_Bps: float
    """Rate of the sender's link (its transmit queue)."""
    bottleneck_Bps: float
    """Slowest rate along the path, in the direction of travel."""
    extra_s: float
    """The sender's per-message delay."""

    @property
    def hops(self) -> int:
        return len(self.path) - 1

    def delay(self, nbytes: int) -> tuple[float, float]:
        """(time on the sender's first link, remaining flight time) of an ``nbytes`` message."""
        tx = nbytes / self.first_Bps if self.first_Bps < math.inf else 0.0
        slower = nbytes / self.bottleneck_Bps if self.bottleneck_Bps < math.inf else 0.0
        return tx, self.latency_s + self.extra_s + (slower - tx)


@dataclass(frozen=True)
class Outage:
    """Links ``edges`` (node pairs, either way round) are down during [start, end)."""

    start: float
    end: float
    edges: frozenset[Edge]

    def __post_init__(self) -> None:
        object.__setattr__(self, "edges", frozenset(edge(u, v) for u, v in self.edges))


@dataclass
class _Epoch:
    failed: frozenset[Edge]
    adj: dict[int, list[int]]
    dist_to: dict[int, dict[int, int]] = field(default_factory=dict)
    routes: dict[tuple[int, int, bool], Route | None] = field(default_factory=dict)


def edge(u: int, v: int) -> Edge:
    """The canonical name of the link between u and v."""
    return (u, v) if u <= v else (v, u)


class Topology:
    """A network graph over node ranks with per-direction link rates, latencies and scheduled outages.

    Edges carry ``latency_s`` and ``Bps``, a dict mapping each endpoint to the rate of the direction leaving
    it. Use the generators (``star``, ``complete``, ``ring``, ``random_graph``, ``from_edges``, or ``build``
    by name) rather than building the graph by hand.
    """

    def __init__(self, graph: nx.Graph, *, extra_s: Mapping[int, float] | None = None,
                 outages: Sequence[Outage] = ()):
        for u, v, data in graph.edges(data=True):
            if "latency_s" not in data or set(data.get("Bps", {})) != {u, v}:
                raise ValueError(f"link {u}-{v} needs latency_s and a rate for each direction")
        for o in outages:
            unknown = [e for e in o.edges if not graph.has_edge(*e)]
            if unknown:
                raise ValueError(f"outage names links that are not in the graph: {unknown}")
        self.graph = graph
        self.extra_s = dict(extra_s or {})
        self.outages = tuple(outages)
        self._adj = {u: sorted(graph.adj[u]) for u in graph}
        self._bounds = sorted({t for o in self.outages for t in (o.start, o.end) if math.isfinite(t)})
        self._epochs: dict[int, _Epoch] = {}

    # ---------------------------------------------------------------- structure
    @property
    def nodes(self) -> list[int]:
        return sorted(self.graph.nodes)

    def edges(self) -> list[Edge]:
        return sorted(edge(u, v) for u, v in self.graph.edges)

    def neighbours(self, u: int, t: float | None = None) -> list[int]:
        """``u``'s neighbours in increasing order; at time ``t``, only those whose link is up."""
        if t is None:
            return list(self._adj[u])
        return list(self._epoch(t).adj[u])

    def degree(self, u: int) -> int:
        return len(self._adj[u])

    def failed(self, t: float) -> frozenset[Edge]:
        """The links down at time ``t``."""
        return self._epoch(t).failed

    def alive(self, u: int, v: int, t: float) -> bool:
        """Whether a link between u and v exists and is up at time ``t``."""
        return self.graph.has_edge(u, v) and edge(u, v) not in self._epoch(t).failed

    def with_outages(self, *outages: Outage) -> "Topology":
        """The same network with more scheduled outages."""
        return Topology(self.graph, extra_s=self.extra_s, outages=self.outages + outages)

    # ---------------------------------------------------------------- routes and costs
    def route(self, src: int, dst: int, t: float = 0.0, detour: bool = False) -> Route | None:
        """The route of a message sent at time ``t``, or ``None`` when it is lost (see the module docstring);
        ``detour``: a message between neighbours whose link is down takes the shortest path left."""
        return self._route(src, dst, t, detour_neighbours=detour)

    def message_delay(self, src: int, dst: int, nbytes: int, t: float = 0.0) -> tuple[float, float] | None:
        """(time on the sender's first link, remaining flight time), or ``None`` when the message is lost."""
        r = self.route(src, dst, t)
        return None if r is None else r.delay(nbytes)

    def byte_hops(self, src: int, dst: int, nbytes: int, t: float = 0.0) -> int | None:
        """Communication cost of one flow (SNAP Sec. II-B): bytes x hops; ``None`` when it is lost."""
        r = self.route(src, dst, t)
        return None if r is None else nbytes * r.hops

    def all_reduce_time(self, members: Sequence[int], nbytes: int, t: float = 0.0) -> float:
        """Ring all-reduce of ``nbytes`` among ``members`` (ring in the given order): 2(n - 1) rounds in which
        every member sends nbytes/n to its successor at once. A round lasts the ring's largest path latency
        plus the chunk at the ring's slowest rate (both taken over all ring hops, as the papers' setups do
        not overlap rounds). On the star with equal access latencies this is ``Cluster.all_reduce_time``
        (which takes twice the largest access latency). A collective's transport routes around failed links;
        ``inf`` when some member cannot reach its successor."""
        n = len(members)
        if n <= 1:
            return 0.0
        lat, bw = 0.0, math.inf
        for a, b in zip(members, [*members[1:], members[0]]):
            r = self._route(a, b, t, detour_neighbours=True)
            if r is None:
                return math.inf
            lat, bw = max(lat, r.latency_s), min(bw, r.bottleneck_Bps)
        return 2 * (n - 1) * (lat + (nbytes / n / bw if bw < math.inf else 0.0))

    # ---------------------------------------------------------------- internals
    def _epoch(self, t: float) -> _Epoch:
        i = bisect.bisect_right(self._bounds, t)
        ep = self._epochs.get(i)
        if ep is None:
            at = self._bounds[i - 1] if i > 0 else -math.inf
            failed = frozenset(e for o in self.outages if o.start <= at < o.end for e in o.edges)
            adj = {u: [v for v in vs if edge(u, v) not in failed] for u, vs in self._adj.items()}
            ep = self._epochs[i] = _Epoch(failed, adj)
        return ep

    def _route(self, src: int, dst: int, t: float, detour_neighbours: bool) -> Route | None:
        ep = self._epoch(t)
        key = (src, dst, detour_neighbours)
        if key in ep.routes:
            return ep.routes[key]
        for u in (src, dst):
            if u not in self._adj:
                raise ValueError(f"node {u} is not in the topology (nodes: {self.nodes})")
        if src == dst:
            path: tuple[int, ...] | None = (src,)
        elif self.graph.has_edge(src, dst) and not detour_neighbours:
            path = (src, dst) if edge(src, dst) not in ep.failed else None
        else:
            path = self._shortest(ep, src, dst)
        ep.routes[key] = route = None if path is None else self._cost(path)
        return route

    def _shortest(self, ep: _Epoch, src: int, dst: int) -> tuple[int, ...] | None:
        dist = ep.dist_to.get(dst)
        if dist is None:
            dist = ep.dist_to[dst] = _bfs(ep.adj, dst)
        if src not in dist:
            return None
        path = [src]
        while path[-1] != dst:
            here = dist[path[-1]]
            path.append(next(v for v in ep.adj[path[-1]] if dist.get(v) == here - 1))
        return tuple(path)

    def _cost(self, path: tuple[int, ...]) -> Route:
        links = [self.graph.edges[u, v] for u, v in zip(path, path[1:])]
        rates = [data["Bps"][u] for data, u in zip(links, path)]
        return Route(path, sum((data["latency_s"] for data in links), 0.0), rates[0] if rates else math.inf,
                     min(rates, default=math.inf), self.extra_s.get(path[0], 0.0) if rates else 0.0)


def _bfs(adj: Mapping[int, list[int]], root: int) -> dict[int, int]:
    dist = {root: 0}
    queue = deque([root])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


# ------------------------------------------------------------------------------------------------- generators
def star(nodes: Iterable[int], links: Mapping[int, Link] | None = None) -> Topology:
    """Every node on its own access link to ``HUB``: up = node to hub, down = hub to node. Nodes without an
    entry in ``links`` get an ideal link (the papers put servers in a datacenter)."""
    links = links or {}
    g = nx.Graph()
    g.add_node(HUB)
    extra = {}
    for u in _ranks(nodes):
        link = links.get(u, Link())
        g.add_edge(u, HUB, latency_s=link.latency_s, Bps={u: link.up_Bps, HUB: link.down_Bps})
        if link.extra_s:
            extra[u] = link.extra_s
    return Topology(g, extra_s=extra)


def complete(nodes: Iterable[int], *, latency_s: float = 0.0, Bps: float = math.inf) -> Topology:
    ranks = _ranks(nodes)
    return _uniform(ranks, [(u, v) for i, u in enumerate(ranks) for v in ranks[i + 1:]], latency_s, Bps)


def ring(nodes: Iterable[int], *, latency_s: float = 0.0, Bps: float = math.inf) -> Topology:
    """Node i linked to node i + 1 in the given order, and the last to the first."""
    ranks = _ranks(nodes)
    pairs = {edge(u, v) for u, v in zip(ranks, [*ranks[1:], ranks[0]]) if u != v} if ranks else set()
    return _uniform(ranks, sorted(pairs), latency_s, Bps)


def random_graph(nodes: Iterable[int], degree: float, *, seed: int = 0, latency_s: float = 0.0,
                 Bps: float = math.inf) -> Topology:
    """A random connected graph with round(n x degree / 2) links, so an average degree within 1/n of ``degree``.

    A random spanning tree first (each node in a random order links to a uniformly chosen earlier one), then
    links drawn uniformly from the missing ones. Drawing whole graphs until one is connected would almost
    never finish at degree 3 (a G(n, m) graph of that density usually has isolated nodes)."""
    ranks = _ranks(nodes)
    n = len(ranks)
    m = round(n * degree / 2)
    if not max(n - 1, 0) <= m <= n * (n - 1) // 2:
        raise UserError(f"average degree {degree} on {n} nodes: a connected graph needs a degree between "
                        f"{2 * (n - 1) / n:.3g} and {n - 1}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    pairs = {edge(ranks[order[i]], ranks[order[rng.integers(i)]]) for i in range(1, n)}
    missing = [(u, v) for i, u in enumerate(ranks) for v in ranks[i + 1:] if edge(u, v) not in pairs]
    extra = rng.choice(len(missing), size=m - len(pairs), replace=False)
    pairs.update(edge(*missing[j]) for j in extra)
    return _uniform(ranks, sorted(pairs), latency_s, Bps)


def from_edges(nodes: Iterable[int], edges: Iterable[Any], *, latency_s: float = 0.0,
               Bps: float = math.inf, label: Callable[[int], str] = str) -> Topology:
    """A given list of links. An entry is ``(u, v)`` or a dict ``{u, v, latency_s, up_mbps, down_mbps}``
    (up: u to v, down: v to u; Mb/s, 0 for unlimited); missing values take ``latency_s`` and ``Bps``."""
    ranks = _ranks(nodes)
    g = nx.Graph()
    g.add_nodes_from(ranks)
    allowed = ("u", "v", "latency_s", "up_mbps", "down_mbps")
    for entry in edges:
        if isinstance(entry, Mapping):
            if "u" not in entry or "v" not in entry or any(k not in allowed for k in entry):
                raise UserError(f"link {dict(entry)!r}: use keys {', '.join(allowed)} (u and v required)")
            if any(not isinstance(entry.get(k, 0), (int, float)) or entry.get(k, 0) < 0 for k in allowed[2:]):
                raise UserError(f"link {dict(entry)!r}: latency and rates must be numbers >= 0")
            u, v = entry["u"], entry["v"]
        elif isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) == 2:
            (u, v), entry = entry, {}
        else:
            raise UserError(f"link {entry!r}: give a pair [u, v] or a table {{u = 1, v = 2, latency_s = ...}}")
        if u not in g or v not in g or u == v:
            raise UserError(f"link {label(u)}-{label(v)}: both ends must be different nodes among "
                            f"{', '.join(map(label, ranks))}")
        if g.has_edge(u, v):
            raise UserError(f"link {label(u)}-{label(v)} is listed twice: give each link once")
        up = _Bps(entry["up_mbps"]) if "up_mbps" in entry else Bps
        down = _Bps(entry["down_mbps"]) if "down_mbps" in entry else Bps
        g.add_edge(u, v, latency_s=float(entry.get("latency_s", latency_s)), Bps={u: up, v: down})
    if len(ranks) > 1 and not nx.is_connected(g):
        cut = ", ".join(map(label, sorted(min(nx.connected_components(g), key=min))))
        raise UserError(f"the links leave {cut} cut off from the rest: add links so that every node is reachable")
    return Topology(g)


def build(name: str, nodes: Iterable[int], *, degree: float = 3.0, seed: int = 0, latency_s: float = 0.0,
          mbps: float = 0.0, edges: Iterable[Any] = (), links: Mapping[int, Link] | None = None,
          label: Callable[[int], str] = str) -> Topology:
    """A topology by name (``TOPOLOGIES``). ``links`` are the star's access links; the other graphs give every
    link ``latency_s`` and ``mbps`` in both directions (0: unlimited). ``label``: how errors name a node."""
    if name not in TOPOLOGIES:
        raise UserError(f"unknown topology '{name}': choose one of {', '.join(TOPOLOGIES)}")
    if name == "star":
        return star(nodes, links)
    rate = _Bps(mbps)
    if name == "edges":
        return from_edges(nodes, edges, latency_s=latency_s, Bps=rate, label=label)
    if name == "random":
        return random_graph(nodes, degree, seed=seed, latency_s=latency_s, Bps=rate)
    return {"complete": complete, "ring": ring}[name](nodes, latency_s=latency_s, Bps=rate)


# ------------------------------------------------------------------------------------------------- failures
def random_outage(topology: Topology, fraction: float, *, start: float = 0.0, end: float = math.inf,
                  seed: int = 0, keep_connected: bool = True) -> Outage:
    """round(fraction x links) links, drawn with ``seed``, down from ``start`` until ``end``.

    With ``keep_connected`` (the default) links are tried in a random order and each fails unless that would
    cut the network in two: SNAP measures iterations to converge with 1-5% of links unavailable (SNAP
    Fig. 9), which a partitioned network never reaches. Without it any links may fail, and nodes may be cut
    off (their messages are lost)."""
    if not 0.0 <= fraction <= 1.0:
        raise UserError(f"failed link fraction {fraction}: must be between 0 and 1")
    if not start < end:
        raise UserError(f"link failures from {start} to {end}: the end must come after the start")
    links = topology.edges()
    k = round(fraction * len(links))
    order = [links[i] for i in np.random.default_rng(seed).permutation(len(links))]
    if not keep_connected:
        return Outage(start, end, frozenset(order[:k]))
    g = topology.graph.copy()
    down: list[Edge] = []
    for u, v in order:
        if len(down) == k:
            break
        g.remove_edge(u, v)
        if nx.has_path(g, u, v):
            down.append((u, v))
        else:
            g.add_edge(u, v)
    if len(down) < k:
        raise UserError(f"only {len(down)} of {len(links)} links can fail without cutting the network, "
                        f"{k} requested: lower the failed fraction or allow disconnection")
    return Outage(start, end, frozenset(down))


# ------------------------------------------------------------------------------------------------- helpers
def _ranks(nodes: Iterable[int]) -> list[int]:
    ranks = list(nodes)
    if len(set(ranks)) != len(ranks) or HUB in ranks:
        raise ValueError(f"nodes must be distinct ranks other than {HUB}: {ranks}")
    return ranks


def _uniform(ranks: list[int], pairs: Iterable[Edge], latency_s: float, Bps: float) -> Topology:
    g = nx.Graph()
    g.add_nodes_from(ranks)
    for u, v in pairs:
        g.add_edge(u, v, latency_s=latency_s, Bps={u: Bps, v: Bps})
    return Topology(g)


def _Bps(mbps: float) -> float:
    """Mb/s to bytes/s; 0 is an unlimited link (as in the [network] section)."""
    return mbps * 1e6 / 8 if mbps > 0 else math.inf
