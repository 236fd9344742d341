"""The per-worker access-link model that runs used before the network became a graph, kept as the reference
the default star topology must reproduce bit for bit (``edgeml.hetero.Cluster`` holds the links)."""

from __future__ import annotations

import math

from edgeml.hetero import Cluster, Link


def link(cluster: Cluster, worker: int | None) -> Link:
    """A worker's access link; other nodes (and workers without an entry) have an ideal one."""
    return cluster.links.get(worker, Link()) if worker is not None else Link()


def message_delay(cluster: Cluster, src_worker: int | None, dst_worker: int | None, nbytes: int) -> tuple[float, float]:
    """(time on the sender's uplink, remaining flight time) of one message: the sender's uplink transmits at
    its own rate; a slower downlink at the receiver lengthens only that message's flight."""
    a, b = link(cluster, src_worker), link(cluster, dst_worker)
    tx = nbytes / a.up_Bps if a.up_Bps < math.inf else 0.0
    slower = nbytes / min(a.up_Bps, b.down_Bps) if min(a.up_Bps, b.down_Bps) < math.inf else 0.0
    return tx, a.latency_s + b.latency_s + a.extra_s + (slower - tx)


def all_reduce_time(cluster: Cluster, workers: list[int | None], nbytes: int) -> float:
    """Ring all-reduce among ``workers``: 2(n-1) rounds, each moving nbytes/n over the slowest link, with twice
    the largest access latency per round."""
    n = len(workers)
    if n <= 1:
        return 0.0
    links = [link(cluster, w) for w in workers]
    bw = min(min(x.up_Bps, x.down_Bps) for x in links)
    lat = 2 * max(x.latency_s for x in links)
    return 2 * (n - 1) * (lat + (nbytes / n / bw if bw < math.inf else 0.0))


def step_factor(cluster: Cluster, worker: int, t: float) -> float:
    """A worker's profile factor times its slowdowns active at ``t``."""
    f = cluster.factors[worker]
    for s in cluster.slowdowns:
        if s.worker == worker and s.start <= t < s.end:
            f *= s.factor
    return f
