"""GoSGD (Blot et al.), the baseline of EdgeGossip (its Sec. 2.1; Sec. 4.1's settings).

Every platform (a worker) trains its own replica with mini-batch SGD and momentum on its local data and holds a
mixing weight a_i (1/E at the start, E platforms). After each local step it pushes, with probability
``gossip_prob``, its model and *half* of its weight to a random live neighbour (``node.rng``), keeping the other
half; a receiver mixes w_i <- (a_i w_i + a_j w_j) / (a_i + a_j) and sets a_i <- a_i + a_j (``mix``). The
weights (with those in flight) sum to 1 all along; a push to a crashed peer is dropped by the runtime and its
weight with it. An epoch ends when every live platform has processed its data (a barrier: the runtime's
all-reduce among the live platforms), which is where slow platforms delay everyone (Sec. 4.5, "slow platforms
cause a longer delay in each epoch's synchronization"). The model evaluated is the plain average of the
platforms' models (each platform exposes its replica).

``Platform`` is what GoSGD and EdgeGossip platforms share (the replica, gossip, steps, the epoch barrier,
records); EdgeGossip (``edgeml.algorithms.edgegossip``) builds on it.

Recorded: ``series/epochs.csv`` (per platform and epoch: data ratio r_i, here 1, points processed, data |X_i|,
measured training time, mixing weight, whether failed) and ``series/decisions.csv`` (``data_ratio`` per epoch);
the counter ``epochs`` (epochs all live platforms completed, at the first live platform).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.schema import ranged

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Node


@dataclass
class GoSGDConfig:
    lr: float = ranged(0.01, gt=0)
    """Learning rate of the local SGD (EdgeGossip Sec. 4.1: 0.01)."""
    momentum: float = ranged(0.9, ge=0, lt=1)
    """Momentum of the local SGD (Sec. 4.1: 0.9); the buffer stays local, mixing moves only the model."""
    gossip_prob: float = ranged(0.1, ge=0, le=1, zero="no gossip: the replicas never mix")
    """Probability p that a platform pushes its model and half its weight after a local step (Blot et al.'s
    exchange probability)."""


# ------------------------------------------------------------------------------------------ gossip


def mix(w_i: torch.Tensor, a_i: float, w_j: torch.Tensor, a_j: float) -> float:
    """GoSGD's receive: w_i <- (a_i w_i + a_j w_j) / (a_i + a_j) in place; returns a_i + a_j."""
    total = a_i + a_j
    w_i.mul_(a_i / total).add_(w_j, alpha=a_j / total)
    return total


class Gossip:
    """A platform's side of GoSGD: its mixing weight, pushes to random live neighbours, mixing what arrives."""

    def __init__(self, node: Node, params: torch.Tensor, prob: float):
        self.node = node
        self.params = params
        self.prob = prob
        self.peers = [r for r in node.ranks("worker") if r != node.rank]
        self.weight = 1.0 / len(node.ranks("worker"))

    def after_step(self) -> None:
        """Mix what has arrived, then push with probability p."""
        self.drain()
        if self.prob > 0 and self.node.rng.random() < self.prob:
            self.push()

    def push(self) -> None:
        node = self.node
        near = set(node.neighbours())
        peers = [r for r in self.peers if r in near and node.alive(r)]
        if not peers:
            return
        self.weight /= 2  # Blot et al.: the sender keeps half its weight and sends the other half
        node.push(node.rng.choice(peers), "gossip", params=self.params, weight=self.weight)

    def drain(self) -> None:
        while (msg := self.node.recv(tag="gossip", timeout=0)) is not None:
            self.weight = mix(self.params, self.weight, msg["params"], msg["weight"])


# ------------------------------------------------------------------------------------------ platforms


class Platform:
    """What GoSGD and EdgeGossip platforms share: the replica, gossip, steps, the epoch barrier, records."""

    def __init__(self, node: Node):
        import torch

        self.node = node
        self.cfg = node.algo
        self.trainer = node.trainer()
        node.expose(self.trainer.params)
        self.gossip = Gossip(node, self.trainer.params, self.cfg.gossip_prob)
        self.platforms = node.ranks("worker")
        self.b = self.trainer.batch_size
        self.epoch = 0
        self.data = node.job.dataset
        self.own = torch.zeros(len(self.data.y_train), dtype=torch.bool)
        self.own[self.trainer.index] = True

    def step(self, batch) -> float:
        """One local SGD step on the sample indices ``batch`` (work in proportion to its size), then gossip;
        returns the step's duration."""
        import torch

        t, n, batch = self.trainer, len(batch), torch.as_tensor(batch)
        arg = batch if bool(self.own[batch].all()) else (self.data.x_train[batch], self.data.y_train[batch])
        t0 = self.node.now()
        self.node.compute(lambda: t.gradient(arg), samples=n, work=n / self.b)
        duration = self.node.now() - t0
        t.sgd(self.cfg.lr, self.cfg.momentum)
        self.gossip.after_step()
        return duration

    def barrier(self, value: float = 0.0, count: bool = True) -> list[float]:
        """End of an epoch: wait for every live platform; returns every platform's ``value`` (0 when dead).
        ``count``: an epoch ended here (the first barrier of EdgeGossip precedes its first epoch)."""
        import torch

        v = torch.zeros(len(self.platforms), dtype=torch.float64)
        v[self.node.index] = value
        self.node.all_reduce(v)
        self.gossip.drain()
        if count and self.node.index == min(i for i, r in enumerate(self.platforms) if self.node.alive(r)):
            self.node.count("epochs")
        return v.tolist()

    def record(self, **fields: Any) -> None:
        self.node.log("epochs", epoch=self.epoch, weight=self.gossip.weight, **fields)
        self.node.log("decisions", name="data_ratio", value=fields["ratio"])


def gosgd_platform(node: Node) -> None:
    """GoSGD: every epoch a shuffled pass over the whole shard, then the epoch barrier."""
    import torch

    p = Platform(node)
    index, b = p.trainer.index, p.b
    while True:
        order = index[torch.randperm(len(index), generator=node.gen)]
        start = node.now()
        for i in range(0, len(order) - b + 1, b):  # a remainder shorter than a batch is dropped
            p.step(order[i:i + b])
        p.record(ratio=1.0, points=len(order) // b * b, data=len(index), measured_s=node.now() - start, failed=0)
        p.barrier()
        p.epoch += 1


register(AlgorithmSpec("gosgd", "GoSGD: gossip of models and halved mixing weights, epochs end together",
                       GoSGDConfig, lambda cfg: [("worker", gosgd_platform)] * cfg.cluster.workers,
                       "EdgeGossip Sec. 2.1 (Blot et al.)", display="GoSGD", decisions=("data_ratio",)))
