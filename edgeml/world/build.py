"""The world from the config: the one parser of nodes, speeds, slowdowns, crashes, devices, load and links.

``build(cfg, roles)`` turns ``[cluster]``, ``[network]`` and ``[load]`` into a ``World`` for the algorithm's
nodes (``roles``: role -> ranks, handed in by the caller, which knows the algorithm). Config validation calls it
too, so a run and its validation parse the world the same way, once each, writing nothing.

Node sets (``NODE_SETS``): ``3`` or ``"0-3"`` are worker indices, ``"ps"`` every node of a role,
``"worker:0-1"`` some of them, ``"*"`` every node; terms join with commas. List settings are tables checked by
one function (``_table``): known keys, the required ones present, every number finite and in its bounds.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from typing import Any

from edgeml.errors import UserError
import edgeml.world.topology as topology
from edgeml.world.load import RESOURCES, Workload
from edgeml.world.model import Misses, Slowdown, World
from edgeml.world.profiles import speeds
from edgeml.world.topology import Link

DEVICES = ("cpu", "cuda")
NODE_SETS = "worker indices (2, '0-3'), a role ('ps'), some of a role ('worker:0-1') or '*' for every node, " \
            "joined with commas"


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


# ------------------------------------------------------------------------------------------------- tables
def _inline(item: dict) -> str:
    """A table as TOML writes it inline, for messages: ``{worker = 0, time = 5.0}``."""
    return "{" + ", ".join(f"{k} = {v!r}" for k, v in item.items()) + "}"


class _Bound:
    """A number's bounds in a table: ``low`` (strictly above it when ``strict``) and ``high``; ``default``
    when the key may be left out (``math.inf`` for an ``end``: until the run ends)."""

    def __init__(self, low: float = 0.0, strict: bool = False, high: float = math.inf, default: float | None = None):
        self.low, self.strict, self.high, self.default = low, strict, high, default

    def text(self) -> str:
        return f"{'>' if self.strict else '>='} {self.low:g}" + (f" and <= {self.high:g}" if self.high < math.inf
                                                                 else "")


def _table(item: Any, key: str, numbers: Mapping[str, _Bound], required: tuple[str, ...],
           others: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check one table of a list setting: a table, only known keys (``numbers`` and ``others``), the
    ``required`` ones present, each number finite and within its bounds (a bound's default fills an absent
    key). Returns the table with its numbers as floats."""
    known = (*others, *numbers)
    if not isinstance(item, dict):
        raise UserError(f"{key} entries must be tables like {{{', '.join(f'{k} = ...' for k in required)}}}, "
                        f"got {item!r}")
    where = f"{key} entry {_inline(item)}"
    if any(k not in known for k in item) or any(k not in item for k in required):
        optional = [k for k in known if k not in required]
        raise UserError(f"{where}: use the keys {', '.join(known)} ({', '.join(required)} required"
                        + (f"; {', '.join(optional)} optional" if optional else "") + ")")
    out = dict(item)
    for name, bound in numbers.items():
        if name not in item:
            if bound.default is not None:
                out[name] = bound.default
            continue
        v = item[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or not (v > bound.low if bound.strict else v >= bound.low) or v > bound.high:
            hint = " (leave it out: until the run ends)" if bound.default == math.inf else ""
            raise UserError(f"{where}: {name} = {v!r} must be a finite number {bound.text()}{hint}")
        out[name] = float(v)
    return out


def _worker(item: dict, key: str, cfg) -> int:
    """The table's ``worker``: an index of the configured ``cluster.workers``."""
    w, n = item["worker"], cfg.cluster.workers
    if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < n:
        raise UserError(f"{key} entry {_inline(item)}: worker must be an index in 0..{n - 1}")
    return w


def _ranks(workers: list[int], w: int) -> list[int]:
    """Worker ``w``'s rank, if the algorithm runs that worker as a node (one running on all the data does not)."""
    return [workers[w]] if w < len(workers) else []


# ------------------------------------------------------------------------------------------------- parts
def slowdowns(cfg, roles: Mapping[str, list[int]]) -> list[Slowdown]:
    """``cluster.slowdowns``: by worker (``worker``, ``start``, ``end``, ``factor``) or by node set (``node``,
    ``start``, ``factor``, ``end`` optional), in config order."""
    workers, key = roles.get("worker", []), "cluster.slowdowns"
    out = []
    for item in cfg.cluster.slowdowns:
        by_node = isinstance(item, dict) and "node" in item
        e = _table(item, key, {"start": _Bound(), "end": _Bound(default=math.inf if by_node else None),
                               "factor": _Bound(strict=True)},
                   ("node", "start", "factor") if by_node else ("worker", "start", "end", "factor"),
                   ("node",) if by_node else ("worker",))
        if e["end"] <= e["start"]:
            raise UserError(f"{key} entry {_inline(item)}: needs end > start")
        ranks = parse_nodes(e["node"], roles, key) if by_node else _ranks(workers, _worker(e, key, cfg))
        out += [Slowdown(r, e["start"], e["end"], e["factor"]) for r in ranks]
    return out


def crashes(cfg, roles: Mapping[str, list[int]]) -> dict[int, float]:
    """``cluster.crashes``: worker -> its fail-stop time, keyed by rank."""
    workers, key = roles.get("worker", []), "cluster.crashes"
    out: dict[int, float] = {}
    seen: set[int] = set()
    for item in cfg.cluster.crashes:
        e = _table(item, key, {"time": _Bound()}, ("worker", "time"), ("worker",))
        w = _worker(e, key, cfg)
        if w in seen:
            raise UserError(f"{key} lists worker {w} twice: give one crash time per worker")
        seen.add(w)
        out.update((r, e["time"]) for r in _ranks(workers, w))
    return out


def _Bps(mbps: float) -> float:
    return mbps * 1e6 / 8 if mbps > 0 else math.inf


_LINK_KEYS = {"latency_s": _Bound(), "up_mbps": _Bound(), "down_mbps": _Bound()}


def access_links(cfg) -> dict[int, Link]:
    """Worker index -> its access link on the star (``network.latency_s``, ``up_mbps``, ``down_mbps``,
    ``commit_delay_s`` and the ``network.links`` entries by ``worker``); nodes of other roles have an ideal
    link unless ``network.links`` names them by node set (``node_links``)."""
    net, key = cfg.network, "network.links"
    base = Link(net.latency_s, _Bps(net.up_mbps), _Bps(net.down_mbps), net.commit_delay_s)
    links = {w: base for w in range(cfg.cluster.workers)}
    for item in net.links:
        if isinstance(item, dict) and "node" in item:
            continue
        e = _table(item, key, _LINK_KEYS, ("worker",), ("worker",))
        w = _worker(e, key, cfg)
        links[w] = _override(links[w], e)
    return links


def _override(link: Link, e: Mapping[str, Any]) -> Link:
    """``link`` with the latency and rates a ``network.links`` entry gives."""
    return Link(e.get("latency_s", link.latency_s), _Bps(e["up_mbps"]) if "up_mbps" in e else link.up_Bps,
                _Bps(e["down_mbps"]) if "down_mbps" in e else link.down_Bps, link.extra_s)


def node_links(cfg, roles: Mapping[str, list[int]]) -> dict[int, Link]:
    """Rank -> access link of every node: the workers' (``access_links``), an ideal one for other roles, then
    the ``network.links`` entries by node set (``node = "ps"``, ``"worker:0-3"``, ``"*"``) in order. A node's up
    link carries what it sends, one message at a time: a parameter server's replies queue on it."""
    key, workers = "network.links", roles.get("worker", [])
    links = {r: Link() for rs in roles.values() for r in rs}
    links.update({workers[i]: link for i, link in access_links(cfg).items() if i < len(workers)})
    for item in cfg.network.links:
        if isinstance(item, dict) and "node" in item:
            e = _table(item, key, _LINK_KEYS, ("node",), ("node",))
            for r in parse_nodes(e["node"], roles, key):
                links[r] = _override(links[r], e)
    return links


def devices(cfg, roles: Mapping[str, list[int]]) -> dict[int, str]:
    """Rank -> ``cpu`` or ``cuda``: ``run.device``, overridden per node set by ``cluster.devices``."""
    ranks = sorted(r for rs in roles.values() for r in rs)
    out = {r: cfg.run.device for r in ranks}
    if not isinstance(cfg.cluster.devices, dict):
        raise UserError(f"cluster.devices = {cfg.cluster.devices!r} is not a table: write e.g. {{cpu = \"0-1\"}}")
    named: dict[int, str] = {}
    for kind, spec in cfg.cluster.devices.items():
        if kind not in DEVICES:
            raise UserError(f"cluster.devices: unknown device kind {kind!r}: use {' or '.join(DEVICES)}, "
                            f"e.g. {{cpu = \"0-1\"}}")
        for r in parse_nodes(spec, roles, f"cluster.devices.{kind}"):
            if named.get(r, kind) != kind:
                raise UserError(f"cluster.devices puts {node_name(roles, r)} on both {named[r]} and {kind}: "
                                f"name each node once")
            named[r] = out[r] = kind
    return out


def workloads(cfg, roles: Mapping[str, list[int]]) -> list[Workload]:
    """``load.schedule``: co-running workloads by node set, their times multiplied by ``load.time_scale``; with
    ``load.repeat = N`` a schedule written for workers 0..N-1, which worker i follows as worker i mod N does."""
    out, key = [], "load.schedule"
    repeat, workers = cfg.load.repeat, roles.get("worker", [])
    if repeat:
        if repeat > len(workers):
            raise UserError(f"load.repeat = {repeat} repeats a schedule of {repeat} workers, but this run has "
                            f"{len(workers)}: set it to at most the number of workers, or 0 to name nodes as written")
        names = {"worker": workers[:repeat]}
    for item in cfg.load.schedule:
        e = _table(item, key, {"intensity": _Bound(strict=True, high=1.0), "start": _Bound(default=0.0),
                               "end": _Bound(default=math.inf)}, ("node", "kind", "intensity"), ("node", "kind"))
        if e["kind"] not in RESOURCES:
            raise UserError(f"{key} entry {_inline(item)}: kind must be one of {', '.join(RESOURCES)}")
        if e["end"] <= e["start"]:
            raise UserError(f"{key} entry {_inline(item)}: needs end > start")
        ranks = parse_nodes(e["node"], names if repeat else roles, key + (" (with load.repeat: workers only)"
                                                                          if repeat else ""))
        if repeat:
            ranks = [r for k in ranks for r in workers[workers.index(k)::repeat]]
        scale = cfg.load.time_scale
        out += [Workload(r, e["kind"], e["intensity"], e["start"] * scale, e["end"] * scale) for r in ranks]
    return out


def _seed(seed: int, stream: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}/{stream}".encode(), digest_size=8).digest(), "little")


def network(cfg, roles: Mapping[str, list[int]]) -> topology.Topology:
    """The run's graph (``network.topology``) with its failed links."""
    net = cfg.network
    ranks = sorted(r for rs in roles.values() for r in rs)
    workers = roles.get("worker", [])
    links = node_links(cfg, roles)  # parsed whatever the topology, so bad entries are always refused
    if net.topology == "star":
        for key in ("link_latency_s", "link_mbps"):
            if getattr(net, key):
                raise UserError(f"network.{key} sets the links of generated topologies: the star's access links "
                                f"take network.latency_s, up_mbps and down_mbps")
        if net.edges:
            raise UserError("network.edges is read with topology = 'edges' only: set network.topology = 'edges'")
        graph = topology.star(ranks, links)
    else:
        graph = _generated(cfg, roles, ranks, workers)
    if net.failures != "permanent" and net.failed_may_disconnect:
        raise UserError("network.failed_may_disconnect applies to permanent failures: transient ones never cut a "
                        "link for more than a message; drop it or set network.failures = 'permanent'")
    if net.failed_links > 0 and net.failures == "permanent":
        end = net.failed_from_s + net.failed_for_s if net.failed_for_s > 0 else math.inf
        try:
            outage = topology.random_outage(graph, net.failed_links, start=net.failed_from_s, end=end,
                                            seed=_seed(cfg.run.seed, "failures"),
                                            keep_connected=not net.failed_may_disconnect)
        except UserError as exc:
            raise UserError(f"network.failed_links: {exc} (network.failed_may_disconnect = true)") from None
        graph = graph.with_outages(outage)
    return graph


def _generated(cfg, roles: Mapping[str, list[int]], ranks: list[int], workers: list[int]) -> topology.Topology:
    net = cfg.network
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
                               label=lambda r: node_name(roles, r))
    except UserError as exc:
        raise UserError(f"network.{'edges' if net.topology == 'edges' else 'degree'}: {exc}") from None
    if net.commit_delay_s:
        graph = topology.Topology(graph.graph, extra_s={w: net.commit_delay_s for w in workers})
    return graph


def build(cfg, roles: Mapping[str, list[int]], *, base_step_s: float | None = None) -> World:
    """The world of a run of ``cfg`` whose algorithm has the nodes ``roles`` (role -> ranks in program order
    from 1). ``base_step_s``: a factor-1 step's time (default ``cluster.base_step_s``, or 0.01 s when that is
    0; procs sets the calibrated value later). Raises ``UserError`` on bad input."""
    roles = {role: list(ranks) for role, ranks in roles.items()}
    workers = roles.get("worker", [])
    ranks = sorted(r for rs in roles.values() for r in rs)
    v = speeds(cfg.cluster.hetero, cfg.cluster.workers)
    vmax = max(v)
    factors = {r: 1.0 for r in ranks}
    factors.update({r: vmax / x for r, x in zip(workers, v)})
    slow = slowdowns(cfg, roles)
    crash_times = crashes(cfg, roles)
    kinds = devices(cfg, roles)
    work = workloads(cfg, roles)
    graph = network(cfg, roles)
    return World(roles, graph, factors, kinds, tuple(slow), tuple(work),
                 base_step_s=base_step_s if base_step_s is not None else (cfg.cluster.base_step_s or 0.01),
                 jitter_s=cfg.network.jitter_s, wait_s=cfg.cluster.random_wait_s, wait_dist=cfg.cluster.random_wait,
                 cores=cfg.load.cores, threads=cfg.run.threads, seed=cfg.run.seed, crash_times=crash_times,
                 crash_prob=cfg.cluster.crash_prob, misses=misses(cfg))


def misses(cfg) -> Misses | None:
    """Transient link failures (``network.failures = "transient"`` or ``"silent"``), or None."""
    net = cfg.network
    if net.failures == "permanent" or net.failed_links <= 0:
        return None
    end = net.failed_from_s + net.failed_for_s if net.failed_for_s > 0 else math.inf
    return Misses(net.failed_links, net.failed_from_s, end, told=net.failures == "transient")


def node_name(roles: Mapping[str, list[int]], rank: int) -> str:
    """``"worker 3"``: how a node is named to users."""
    role = next(role for role, ranks in roles.items() if rank in ranks)
    return f"{role} {roles[role].index(rank)}"
