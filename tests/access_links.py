"""The per-worker access-link model that runs used before the network became a graph, kept as the reference
the default star topology must reproduce bit for bit. ``links`` maps a worker index to its access link (as
``edgeml.world.build.access_links`` parses them from the config)."""

from __future__ import annotations

import math

from edgeml.world.topology import Link


def link(links: dict[int, Link], worker: int | None) -> Link:
    """A worker's access link; other nodes (and workers without an entry) have an ideal one."""
    return links.get(worker, Link()) if worker is not None else Link()


def message_delay(links: dict[int, Link], src_worker: int | None, dst_worker: int | None,
                  nbytes: int) -> tuple[float, float]:
    """(time on the sender's uplink, remaining flight time) of one message: the sender's uplink transmits at
    its own rate; a slower downlink at the receiver lengthens only that message's flight."""
    a, b = link(links, src_worker), link(links, dst_worker)
    tx = nbytes / a.up_Bps if a.up_Bps < math.inf else 0.0
    slower = nbytes / min(a.up_Bps, b.down_Bps) if min(a.up_Bps, b.down_Bps) < math.inf else 0.0
    return tx, a.latency_s + b.latency_s + a.extra_s + (slower - tx)


def all_reduce_time(links: dict[int, Link], workers: list[int | None], nbytes: int) -> float:
    """Ring all-reduce among ``workers``: 2(n-1) rounds, each moving nbytes/n over the slowest link, with twice
    the largest access latency per round."""
    n = len(workers)
    if n <= 1:
        return 0.0
    chosen = [link(links, w) for w in workers]
    bw = min(min(x.up_Bps, x.down_Bps) for x in chosen)
    lat = 2 * max(x.latency_s for x in chosen)
    return 2 * (n - 1) * (lat + (nbytes / n / bw if bw < math.inf else 0.0))


def step_factor(factors: list[float], slowdowns: list[dict], worker: int, t: float) -> float:
    """A worker's profile factor times its ``cluster.slowdowns`` entries (by worker) active at ``t``."""
    f = factors[worker]
    for s in slowdowns:
        if s.get("worker") == worker and s["start"] <= t < s["end"]:
            f *= s["factor"]
    return f


def profile_factors(profile: str, n: int) -> list[float]:
    """Step-time factors of a speed profile: the fastest worker's speed over each worker's."""
    from edgeml.world.profiles import speeds

    v = speeds(profile, n)
    return [max(v) / x for x in v]
