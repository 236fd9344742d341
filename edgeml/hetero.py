"""Device and network model: who is how fast, when, and what a message costs.

Speeds are *step-time factors* relative to the fastest device (factor 1). Both backends consult the same
``Cluster``: ``sim`` turns factors into virtual step durations, ``procs`` sleeps each step up to
``base_step_s * factor`` (throttling). A message from node a to node b takes

    latency(a) + latency(b) + bytes / min(up(a), down(b)) + commit_delay (when a is a worker)

where each node has one access link; servers (PS, scheduler, state server) default to an ideal link, as the
papers put them in a datacenter. A sender's uplink transmits one message at a time at its own rate (messages
queue there); a slower downlink at the receiver lengthens that message's flight only.

Named profiles (``cluster.hetero``):
- ``homogeneous``; explicit step-time ratios ``1:1:3`` (adsp.txt Sec. 2.3, one entry per worker; ``r*k`` repeats a
  ratio for k workers: ``1*60:19*80:199*60``);
- ``H=3.2``: heterogeneity degree H = mean(v)/min(v) of speeds v (adsp.txt Sec. 5.2). Speeds are spread
  evenly over [1, 2H - 1], whose mean is H (the paper does not say how it spread them);
- ``ec2``: ADSP's 18-worker EC2 mix (7 t2.large, 5 t2.xlarge, 4 t2.2xlarge, 2 t3.xlarge; adsp.txt Sec. 5.1),
  scaled to any worker count by keeping the proportions. Relative speeds 1, 1.8, 3.2, 2.0 are our estimate
  of CNN training throughput on 2, 4, 8 and 4 vCPUs (the paper gives none);
- ``adacomp-3class``: 30% fast, 40% ten times slower, 30% a hundred times slower (adacomp.txt Sec. V);
- ``cpu-gpu``: ESync's mix (esync.txt Sec. 5): a third of devices are CPUs, the slowest ~117x the fastest
  GPU (3.5 s vs 0.03 s per batch).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from edgeml.errors import UserError

PROFILES = {
    "homogeneous": "all workers equally fast",
    "A:B:C": "explicit step-time ratios, one per worker (e.g. 1:1:3; r*k repeats r for k workers: 1*6:3*2)",
    "H=x": "heterogeneity degree H = mean(speed)/min(speed), speeds spread evenly (adsp.txt Sec. 5.2)",
    "ec2": "ADSP's EC2 mix: 7 t2.large, 5 t2.xlarge, 4 t2.2xlarge, 2 t3.xlarge per 18 workers",
    "adacomp-3class": "30% fast, 40% 10x slower, 30% 100x slower (adacomp.txt)",
    "cpu-gpu": "ESync's CPU/GPU mix: a third CPUs, slowest ~117x the fastest (esync.txt)",
}

_EC2 = [(7, 1.0), (5, 1.8), (4, 3.2), (2, 2.0)]  # (count per 18 workers, relative speed)


def _apportion(counts: list[int], n: int) -> list[int]:
    """Largest-remainder apportionment of ``n`` items in the proportions of ``counts``."""
    total = sum(counts)
    raw = [c * n / total for c in counts]
    out = [math.floor(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))
    for i in order[: n - sum(out)]:
        out[i] += 1
    return out


def speeds(profile: str, n: int) -> list[float]:
    """Relative speeds v_i (steps per unit time) of ``n`` workers for a named profile."""
    p = profile.strip().lower()
    if p in ("homogeneous", "homo", ""):
        return [1.0] * n
    if ":" in p or "*" in p:
        items = []
        for item in p.split(":"):
            ratio, star, count = item.partition("*")
            try:
                items.append((float(ratio), int(count) if star else 1))
            except ValueError:
                raise UserError(f"cluster.hetero = {profile!r}: ratios must be numbers like 1:1:3, each optionally "
                                f"repeated as ratio*count like 1*60:19*80") from None
        bad = [t for t, _ in items if not (math.isfinite(t) and t > 0)]
        if bad:
            raise UserError(f"cluster.hetero = {profile!r} has the step-time ratio {bad[0]:g}: every ratio must be "
                            f"a finite number > 0, like 1:1:3")
        if any(k < 1 for _, k in items):
            raise UserError(f"cluster.hetero = {profile!r} repeats a ratio {min(k for _, k in items)} times: a count "
                            f"after '*' is a whole number >= 1, like 1*60:19*80")
        total = sum(k for _, k in items)
        if total != n:
            raise UserError(f"cluster.hetero = {profile!r} gives {total} step-time ratios but there are {n} "
                            f"workers: give one ratio per worker (or --workers {total})")
        return [1.0 / t for t, k in items for _ in range(k)]
    m = re.fullmatch(r"h\s*=\s*(.*)", p)
    if m:
        try:
            h = float(m.group(1))
        except ValueError:
            h = math.nan
        if not math.isfinite(h) or h < 1 or (n == 1 and h != 1):
            raise UserError(f"cluster.hetero = {profile!r}: H must be a finite number >= 1, like H=3.2 "
                            f"(and H=1 with a single worker)")
        vmax = 2 * h - 1
        return [1.0 + (vmax - 1.0) * i / (n - 1) for i in range(n)] if n > 1 else [1.0]
    if p == "ec2":
        counts = _apportion([c for c, _ in _EC2], n)
        return [v for (_, v), c in zip(_EC2, counts) for _ in range(c)]
    if p == "adacomp-3class":
        counts = _apportion([3, 4, 3], n)
        return [v for v, c in zip((1.0, 0.1, 0.01), counts) for _ in range(c)]
    if p == "cpu-gpu":
        n_cpu = max(1, round(n / 3)) if n > 1 else 0
        gpu = [1.0 / (1 + 2 * i / max(1, n - n_cpu - 1)) for i in range(n - n_cpu)]  # GPUs within 3x
        cpu = [1.0 / (60 + 57 * i / max(1, n_cpu - 1)) for i in range(n_cpu)]  # CPUs 60x..117x slower
        return gpu + cpu
    raise UserError(f"unknown heterogeneity profile {profile!r}: use one of {', '.join(PROFILES)}")


def heterogeneity_degree(v: list[float]) -> float:
    """H = mean(v) / min(v) (adsp.txt Sec. 5.2)."""
    return sum(v) / len(v) / min(v)


@dataclass(frozen=True)
class Link:
    latency_s: float = 0.0
    up_Bps: float = math.inf
    down_Bps: float = math.inf
    extra_s: float = 0.0


@dataclass(frozen=True)
class Slowdown:
    worker: int
    start: float
    end: float
    factor: float


@dataclass
class Cluster:
    """Resolved heterogeneity for one run: per-worker step factors, slowdowns, failures and links."""

    factors: list[float]
    slowdowns: list[Slowdown] = field(default_factory=list)
    crash_times: dict[int, float] = field(default_factory=dict)
    crash_prob: float = 0.0
    links: dict[int, Link] = field(default_factory=dict)
    """Worker index -> its access link. Nodes without an entry have an ideal link. How links, factors and
    slowdowns act on a run is ``edgeml.env``'s (the star of these access links is its default network)."""


def _inline(item: dict) -> str:
    """A table as TOML writes it inline, for messages: ``{worker = 0, time = 5.0}``."""
    return "{" + ", ".join(f"{k} = {v!r}" for k, v in item.items()) + "}"


def _entries(items: list, key: str, bounds: dict[str, float], n: int, required: tuple[str, ...]) -> list[dict]:
    """Check the tables of a list setting: known keys, the ``required`` ones present, ``worker`` an index,
    every other value a finite number >= its bound in ``bounds``."""
    allowed = ("worker", *bounds)
    for item in items:
        if not isinstance(item, dict):
            raise UserError(f"{key} entries must be tables like {{worker = 0, ...}}, got {item!r}")
        where = f"{key} entry {_inline(item)}"
        if any(k not in allowed for k in item) or any(k not in item for k in required):
            raise UserError(f"{where}: use the keys {', '.join(allowed)} ({', '.join(required)} required)")
        w = item["worker"]
        if isinstance(w, bool) or not isinstance(w, int) or not 0 <= w < n:
            raise UserError(f"{where}: worker must be an index in 0..{n - 1}")
        for k, low in bounds.items():
            v = item.get(k, low)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < low:
                raise UserError(f"{where}: {k} = {v!r} must be a finite number >= {low:g}")
    return items


def build_cluster(cfg) -> Cluster:
    """Resolve ``cfg.cluster`` and ``cfg.network`` into a Cluster (raises UserError on bad input)."""
    n = cfg.cluster.workers
    v = speeds(cfg.cluster.hetero, n)
    vmax = max(v)
    factors = [vmax / x for x in v]
    slow = []
    for e in _entries([e for e in cfg.cluster.slowdowns if not (isinstance(e, dict) and "node" in e)],
                      "cluster.slowdowns",  # entries naming a node set are edgeml.env's
                      {"start": 0, "end": 0, "factor": 0}, n,
                      ("worker", "start", "end", "factor")):
        if e["factor"] <= 0 or e["end"] <= e["start"]:
            raise UserError(f"cluster.slowdowns entry {_inline(e)}: needs factor > 0 and end > start")
        slow.append(Slowdown(e["worker"], float(e["start"]), float(e["end"]), float(e["factor"])))
    crashes: dict[int, float] = {}
    for e in _entries(cfg.cluster.crashes, "cluster.crashes", {"time": 0}, n, ("worker", "time")):
        if e["worker"] in crashes:
            raise UserError(f"cluster.crashes lists worker {e['worker']} twice: give one crash time per worker")
        crashes[e["worker"]] = float(e["time"])
    net = cfg.network

    def bps(mbps: float) -> float:
        return mbps * 1e6 / 8 if mbps > 0 else math.inf

    base = Link(net.latency_s, bps(net.up_mbps), bps(net.down_mbps), net.commit_delay_s)
    links = {w: base for w in range(n)}
    for e in _entries(net.links, "network.links", {"latency_s": 0, "up_mbps": 0, "down_mbps": 0}, n, ("worker",)):
        old = links[e["worker"]]
        links[e["worker"]] = Link(float(e.get("latency_s", old.latency_s)),
                                  bps(e["up_mbps"]) if "up_mbps" in e else old.up_Bps,
                                  bps(e["down_mbps"]) if "down_mbps" in e else old.down_Bps, old.extra_s)
    return Cluster(factors, slow, crashes, cfg.cluster.crash_prob, links)
