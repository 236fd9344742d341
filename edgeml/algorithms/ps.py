"""Parameter-server baselines: BSP, SSP and ASP/TAP (adsp.txt Sec. 2.1-2.2).

Workers compute a mini-batch gradient g, push U = eta' g (local learning rate eta') to the PS, and continue
from the model the PS returns. The PS applies W <- W - eta U with the global learning rate eta (Eq. 1 with
mu = 0; default eta = 1/M, as in adsp.txt Sec. 5.1).

- **BSP** (Valiant 1990): the PS waits for one update from every worker, applies them (in rank order), then
  returns the new model to all: every worker does the same number of steps.
- **SSP** (Ho et al. 2013): the PS applies each update on arrival; a worker that has pushed c updates gets
  the model back (may start step c) only once c <= min_j c_j + s. With s = 0 this is BSP (tested), with
  s = infinity it is ASP.
- **ASP / TAP** (Hsieh et al. 2017): SSP without a bound: every update is applied and answered at once.

The PS records each update's staleness: the number of updates applied between the worker's pull and its push.
A crashed worker is not detected: BSP and SSP then wait for it, as the protocols prescribe.

Shared PS machinery (``PSConfig``, ``ps_worker``) is reused by other PS algorithms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgeml.algorithms import AlgorithmSpec, register
from edgeml.errors import UserError
from edgeml.runtime.base import Node


@dataclass
class PSConfig:
    lr: float = 0.1
    """Local learning rate eta': a worker's update is U = eta' g."""
    global_lr: float = 0.0
    """Global learning rate eta at the PS; 0 means 1/M for M workers."""

    def validate(self, cfg) -> None:
        name = cfg.run.algorithm
        if self.lr <= 0:
            raise UserError(f"{name}.lr = {self.lr}: the learning rate must be > 0")
        if self.global_lr < 0:
            raise UserError(f"{name}.global_lr = {self.global_lr}: must be >= 0 (0 means 1/M)")

    def eta(self, num_workers: int) -> float:
        return self.global_lr or 1.0 / num_workers


@dataclass
class SSPConfig(PSConfig):
    staleness: int = 3
    """Staleness bound s: the fastest worker may be at most s steps ahead of the slowest."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if self.staleness < 0:
            raise UserError(f"ssp.staleness = {self.staleness}: the bound s must be >= 0")


def ps_worker(node: Node) -> None:
    """Compute a gradient, push eta' g, wait for the model, repeat."""
    trainer = node.job.trainer(node.index, node.cfg.run.device)
    ps = node.ranks("ps")[0]
    lr = node.algo.lr
    while True:
        loss = node.compute(trainer.gradient, samples=trainer.batch_size)
        node.push(ps, "push", update=trainer.grad * lr, loss=loss)
        trainer.params.copy_(node.recv(ps, "model")["params"])


def bsp_server(node: Node) -> None:
    W = node.job.init_params.clone()
    node.expose(W)
    workers = node.ranks("worker")
    eta = node.algo.eta(len(workers))
    while True:
        updates = {}
        while len(updates) < len(workers):
            msg = node.recv(tag="push")
            updates[msg.src] = msg["update"]
        for src in sorted(updates):
            W.add_(updates[src], alpha=-eta)
            node.log("staleness", worker=node.worker_index(src), staleness=0)
        for src in sorted(updates):
            node.send(src, "model", params=W)


def ssp_server(node: Node, staleness: float) -> None:
    W = node.job.init_params.clone()
    node.expose(W)
    workers = node.ranks("worker")
    eta = node.algo.eta(len(workers))
    clock = {w: 0 for w in workers}
    pulled = {w: 0 for w in workers}
    version = 0
    held: list[int] = []
    while True:
        msg = node.recv(tag="push")
        src = msg.src
        node.log("staleness", worker=node.worker_index(src), staleness=version - pulled[src])
        W.add_(msg["update"], alpha=-eta)
        version += 1
        clock[src] += 1
        held.append(src)
        slowest = min(clock.values())
        still = []
        for w in held:
            if clock[w] <= slowest + staleness:
                node.send(w, "model", params=W)
                pulled[w] = version
            else:
                still.append(w)
        held = still


def _nodes(server):
    def nodes(cfg):
        return [("ps", server)] + [("worker", ps_worker)] * cfg.cluster.workers
    return nodes


register(AlgorithmSpec("bsp", "Bulk synchronous parallel: a barrier every step", PSConfig,
                       _nodes(bsp_server), "adsp.txt Sec. 2.2"))
register(AlgorithmSpec("ssp", "Stale synchronous parallel with staleness bound s", SSPConfig,
                       _nodes(lambda node: ssp_server(node, node.algo.staleness)), "adsp.txt Sec. 2.2"))
register(AlgorithmSpec("asp", "Asynchronous parallel (TAP): every update applied on arrival", PSConfig,
                       _nodes(lambda node: ssp_server(node, math.inf)), "adsp.txt Sec. 2.2"), "tap")
