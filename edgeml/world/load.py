"""Co-running load as the world models it: workloads, the resources they claim, and max-min fair sharing.

Workloads of kind ``cpu``, ``disk``, ``net`` or ``io`` (disk and net), intensity u in (0, 1], over [start, end).
``procs`` runs real processes for them (``edgeml.runtime.interference``); ``sim`` applies the model of
``World`` (``edgeml.world.model``), in which each resource is shared max-min fairly (``fair_share``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

RESOURCES: dict[str, tuple[str, ...]] = {"cpu": ("cpu",), "disk": ("disk",), "net": ("net",), "io": ("disk", "net")}
"""Workload kind -> the resources (one process each) it loads."""


class Load(NamedTuple):
    """Utilisation of the resources co-running work competes for."""

    cpu: float
    """CPU taken, in cores (1.0: one core busy all the time)."""
    net: float
    """Network traffic as a fraction of the net capacity (``load.net_MBps``)."""
    disk: float
    """Storage traffic as a fraction of the disk capacity (``load.disk_MBps``)."""


@dataclass(frozen=True)
class Workload:
    """Co-running work of ``kind`` (``RESOURCES``) at ``intensity`` on node ``rank`` during
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
