"""Parameter-server baselines: BSP, SSP and ASP/TAP (ADSP Sec. 2.1-2.2), on the PS kit (``kit.py``).

Workers compute a mini-batch gradient g, push U = eta' g (local learning rate eta') to the PS, and continue
from the model the PS returns. The PS applies W <- W - eta U with the global learning rate eta (Eq. 1 with
mu = 0; default eta = 1/M, as in ADSP Sec. 5.1).

- **BSP** (Valiant 1990): the PS waits for one update from every worker, applies them (in rank order), then
  returns the new model to all: every worker does the same number of steps.
- **SSP** (Ho et al. 2013): the PS applies each update on arrival; a worker that has pushed c updates gets
  the model back (may start step c) only once c <= min_j c_j + s. With s = 0 this is BSP (tested), with
  s = infinity it is ASP.
- **ASP / TAP** (Hsieh et al. 2017): SSP without a bound: every update is applied and answered at once.

The PS records each update's staleness: the models made between the worker's pull and its push (0 in BSP).
A crashed worker is not detected: BSP and SSP then wait for it, as the protocols prescribe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from edgeml.algorithms.kit import ParameterServer, PSConfig, ps_nodes, ps_worker, serve_async
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.schema import ranged

if TYPE_CHECKING:
    from edgeml.runtime.base import Node

__all__ = ["PSConfig", "SSPConfig", "asp_server", "bsp_server", "ps_worker", "ssp_server"]


@dataclass
class SSPConfig(PSConfig):
    staleness: int = ranged(3, ge=0)
    """Staleness bound s: the fastest worker may be at most s steps ahead of the slowest (0: BSP)."""


def bsp_server(node: Node) -> None:
    """Wait for every worker's update, apply them in rank order, return the new model to all."""
    ps = ParameterServer(node)
    while True:
        msgs = ps.gather()
        ps.apply_round(msgs)
        for w in sorted(m.src for m in msgs):
            ps.reply(w)


register(AlgorithmSpec("bsp", "Bulk synchronous parallel: a barrier every step", PSConfig,
                       ps_nodes(bsp_server, ps_worker), "ADSP Sec. 2.2", display="BSP"))


def ssp_server(node: Node) -> None:
    serve_async(ParameterServer(node), node.algo.staleness)


def asp_server(node: Node) -> None:
    serve_async(ParameterServer(node), math.inf)


register(AlgorithmSpec("ssp", "Stale synchronous parallel with staleness bound s", SSPConfig,
                       ps_nodes(ssp_server, ps_worker), "ADSP Sec. 2.2", display="SSP"))
register(AlgorithmSpec("asp", "Asynchronous parallel (TAP): every update applied on arrival", PSConfig,
                       ps_nodes(asp_server, ps_worker), "ADSP Sec. 2.2", display="ASP"), "tap")
