"""EdgeGossip's platform program (EdgeGossip Sec. 3: Eq. 1, Algorithms 1-2), GoSGD's platform with three
additions, and its config and registry entry.

Once before training a platform builds its aggregated points (Sec. 3.2, Eq. 1; ``aggregation``). Every epoch
it computes their losses (Algorithm 2 line 1, ``Trainer.losses``), predicts its time per point under the
latest co-running load (Sec. 3.3, ``predictor``), contributes its throughput to the epoch barrier's all-reduce
and, from every platform's, balances the data ratios (Algorithm 1, ``balancer.balance``): a failed platform
sits the epoch out; when none is left the run stops (``node.stop_run``) naming the failed platforms; when
more than ``f_threshold`` failed, the live platforms take over their data (event logged, counted as
``reassignments``). Then it trains on the subsets Algorithm 2 keeps (``balancer.plan_batches``), sampling the
predictor every ``sample_steps`` steps, and refits and recalibrates it. The local SGD, the gossip and the
barrier are GoSGD's (``edgeml.algorithms.gosgd.Platform``).

Cost model (``compute(work=...)``; in steps, one step = 3 b F multiply-adds, F the model's forward
multiply-adds per sample, ``node.forward_macs()``): a batch of n points costs n / b steps; the aggregated
points' losses ``node.forward_work(M)`` (a forward pass each, M / (3 b)); the aggregator's phases their
multiply-adds (``aggregation.phase_ops``, from Table 3 and the scikit-learn algorithms used) divided by a
step's. Generation and loss times are logged. scikit-learn's thread pools are the runtime's to limit (to the
node's threads, for the whole run).

Recorded: ``series/epochs.csv`` (per platform and epoch: data ratio r_i, points processed, data |X_i|,
predicted and measured training time, mixing weight, whether failed, and the mean co-running load the epoch
trained under, ``load_cpu``, ``load_net``, ``load_disk``, as ``node.load()`` reports it; GoSGD: ratio 1, no
prediction) and ``series/decisions.csv`` (``data_ratio`` per epoch; EdgeGossip also ``prediction_error``
|predicted - measured| / measured, ``aggregated_share`` (the share of the epoch spent on the aggregated
points' losses), ``predictor_s`` (fitting the predictor) and ``load_reading_s`` (collecting the co-running
load, the mean over the epoch's readings; both on the node's clock: wall time in ``procs``, 0 in ``sim``) per
epoch, ``reduce_s``, ``divide_s``, ``generate_s``, ``generation_s`` and ``aggregated_points`` once,
``reassigned`` per reassignment); the counters ``epochs`` (epochs all live platforms completed, at the first
live platform) and ``reassignments``.

Not modelled: moving a failed platform's data to the live ones costs nothing (the paper's exception handling
runs the failed tasks elsewhere without saying how the data get there).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from edgeml.algorithms.edgegossip.aggregation import aggregate
from edgeml.algorithms.edgegossip.balancer import (NoPlatformLeft, balance, plan_batches, rank_subsets,
                                                   rank_subsets_per_class, regroup)
from edgeml.algorithms.edgegossip.predictor import Predictor
from edgeml.algorithms.gosgd import GoSGDConfig, Platform
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.schema import ranged

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Node


@dataclass
class EdgeGossipConfig(GoSGDConfig):
    method: Literal["svd_kmeans", "isvd_lsh", "hash_kmeans"] = "svd_kmeans"
    """Aggregation method: dimensionality reduction + data division (Sec. 4.2's three)."""
    ratio: float = ranged(10.0, ge=1)
    """Aggregation ratio: original points per aggregated point (Sec. 4.2: 10; Fig. 13: 5 and 20)."""
    p_threshold: float = ranged(0.001, ge=0, zero="only platforms with no throughput, the crashed ones, fail")
    """Throughput (points per second) below which a platform counts as failed (Algorithm 1; Sec. 3.3: 0.001)."""
    f_threshold: float = ranged(0.1, ge=0, le=1, zero="any failed platform's data move to the live ones")
    """Share of failed platforms beyond which their data move to the live ones (Algorithm 1 line 10: 10%)."""
    sample_steps: int = ranged(8, ge=1)
    """The predictor takes one sample (load, time per point) every this many training steps."""
    svd: Literal["point", "dataset"] = "point"
    """The SVD of ``svd_kmeans``: ``point``, each point's 10 largest singular values (Table 3's O(N d^{3/2}): every
    point decomposed as a matrix); ``dataset``, a truncated SVD of the class's points (the variant Sec. 3.2
    found ten times slower with LSH)."""
    choose: Literal["loss", "class", "random"] = "loss"
    """Which subsets an epoch keeps (r_i of its points): ``loss``, Algorithm 2's highest-loss first; ``class``,
    the highest-loss first within each class, every class the same share (a remedy, not the paper's);
    ``random``, random ones (an ablation)."""
    order: Literal["shuffled", "rank"] = "shuffled"
    """Which order the subsets Algorithm 2 keeps are trained in: ``rank``, Algorithm 2 as written (iterations
    over whole subsets in descending loss, so a batch holds one or two classes: on Fashion-MNIST with LeNet-5
    the accuracy then swings between 0.2 and 0.55 from epoch to epoch); ``shuffled``, their points in random
    batches of b."""


class EdgePlatform(Platform):
    """An EdgeGossip platform (see the module docstring)."""

    def __init__(self, node: Node):
        super().__init__(node)
        self.step_ops = 3 * self.b * node.forward_macs()
        self.predictor = Predictor(seed=node.cfg.run.seed)
        self.readings: list[float] = []  # how long each node.load() of this epoch took
        self.shards = node.job.shards
        self.points: dict[Any, tuple[torch.Tensor, torch.Tensor, list[np.ndarray]]] = {}
        self.points["own"] = self.build(self.trainer.index, log=True)

    def build(self, index: torch.Tensor, log: bool = False):
        """Aggregated points of the samples ``index`` (Eq. 1), their cost charged step by step:
        (points, labels, members as sample indices)."""
        import torch

        node, times = self.node, {}

        def phase(name: str, fn, ops: float):
            t0 = node.now()
            out = node.compute(fn, work=ops / self.step_ops)
            times[name] = node.now() - t0
            return out

        x = self.data.x_train[index].reshape(len(index), -1).numpy()
        agg = aggregate(x, self.data.y_train[index].numpy(), self.cfg.method, self.cfg.ratio,
                        seed=node.cfg.run.seed * 1009 + node.index, phase=phase, shape=self.data.input_shape,
                        svd=self.cfg.svd)
        if log:
            for name, s in times.items():
                node.log("decisions", name=f"{name}_s", value=s)
            node.log("decisions", name="generation_s", value=sum(times.values()))
            node.log("decisions", name="aggregated_points", value=len(agg.members))
        points = torch.from_numpy(agg.points).reshape(len(agg.points), *self.data.input_shape)
        return points, torch.from_numpy(agg.labels), [index.numpy()[g] for g in agg.members]

    def losses(self, parts: list) -> tuple[list[float], list[np.ndarray], list[int]]:
        """Algorithm 2 line 1: the loss of every aggregated point (a forward pass each, charged), with the
        points' subsets and classes."""
        losses, members, classes = [], [], []
        for points, labels, subsets in parts:
            m = len(labels)
            out = self.node.compute(partial(self.trainer.losses, (points, labels)), work=self.node.forward_work(m))
            losses += out.tolist()
            members += subsets
            classes += labels.tolist()
        return losses, members, classes

    def run(self) -> None:
        import torch

        node, cfg, me = self.node, self.cfg, self.node.index
        sizes = [len(s) for s in self.shards]
        self.read_load()  # the first reading's window starts here
        while True:
            start = node.now()
            losses, members, labels = self.losses([self.points["own"]])
            loss_s = node.now() - start
            load = self.read_load()  # the latest reading: what the next epoch is predicted under
            if self.predictor.t0 is None:  # the first epoch: the speed of the forward passes just made
                self.predictor.calibrate(load, loss_s / (node.forward_work(len(losses)) * self.b))
            t_point = self.predictor.predict(load)
            p = self.barrier(1.0 / t_point, count=self.epoch > 0)
            try:
                plan = balance(p, sizes, cfg.p_threshold, cfg.f_threshold)
            except NoPlatformLeft as exc:
                node.stop_run(str(exc))
            ratio = plan.ratios[me]
            if me in plan.failed:
                self.record(ratio=0.0, points=0, data=plan.sizes[me], predicted_s=0.0, measured_s=0.0, failed=1)
                self.epoch += 1
                continue
            extra = [self.taken(f, a, b) for f, j, a, b in plan.moved if j == me]
            if plan.moved and me == min(j for _, j, _, _ in plan.moved):
                node.count("reassignments")
                node.log("decisions", name="reassigned", value=len(plan.failed))
            if extra:
                t0 = node.now()
                more_losses, more_members, more_labels = self.losses(extra)
                loss_s += node.now() - t0
                losses, members, labels = losses + more_losses, members + more_members, labels + more_labels
            if cfg.choose == "loss":
                chosen = rank_subsets(losses)
            elif cfg.choose == "class":
                chosen = rank_subsets_per_class(losses, labels)
            else:
                chosen = torch.randperm(len(members), generator=node.gen).tolist()
            batches = plan_batches(members, chosen, ratio * plan.sizes[me], self.b)
            if cfg.order == "shuffled":
                batches = regroup(batches, self.b, torch.randperm(sum(map(len, batches)), generator=node.gen).numpy())
            points = sum(len(b) for b in batches)
            predicted = points * t_point
            measured, used = self.train(batches)
            t0 = node.now()
            self.predictor.fit()
            self.predictor.calibrate(used, measured / max(points, 1))
            node.log("decisions", name="predictor_s", value=node.now() - t0)
            node.log("decisions", name="load_reading_s", value=float(np.mean(self.readings)))
            self.readings.clear()
            error = abs(predicted - measured) / measured if measured > 0 else math.nan
            node.log("decisions", name="prediction_error", value=error)
            node.log("decisions", name="aggregated_share", value=loss_s / max(node.now() - start, 1e-12))
            self.record(ratio=ratio, points=points, data=plan.sizes[me], predicted_s=predicted, measured_s=measured,
                        failed=0, load_cpu=used[0], load_net=used[1], load_disk=used[2])
            self.epoch += 1

    def read_load(self) -> tuple[float, float, float]:
        """``node.load()``, timed on the node's clock: collecting the co-running load is the predictor's
        overhead of EdgeGossip Fig. 11."""
        t0 = self.node.now()
        load = self.node.load()
        self.readings.append(self.node.now() - t0)
        return load

    def taken(self, failed: int, start: int, stop: int):
        """Aggregated points of the slice of a failed platform's data this platform takes over (built once)."""
        key = (failed, start, stop)
        if key not in self.points:
            self.points[key] = self.build(self.shards[failed][start:stop])
        return self.points[key]

    def train(self, batches: list) -> tuple[float, tuple[float, ...]]:
        """Run the planned iterations, sampling the predictor every ``sample_steps`` steps; returns the training
        time and the mean co-running load over it."""
        node, every = self.node, self.cfg.sample_steps
        start = window = node.now()
        busy, points, used = 0.0, 0, np.zeros(3)
        self.read_load()  # the first window starts now
        for k, batch in enumerate(batches, start=1):
            busy += self.step(batch)
            points += len(batch)
            if k % every == 0 or k == len(batches):
                load = self.read_load()
                self.predictor.observe(load, busy / points)
                used += np.array(load) * (node.now() - window)
                busy, points, window = 0.0, 0, node.now()
        total = node.now() - start
        return total, tuple(used / total) if total > 0 else (0.0, 0.0, 0.0)


def edgegossip_platform(node: Node) -> None:
    EdgePlatform(node).run()


SKLEARN = ("sklearn.cluster", "sklearn.decomposition", "sklearn.ensemble", "sklearn.feature_extraction")
"""The aggregator's and the predictor's scikit-learn: seconds to import, so a procs node loads it before the run's
clock starts (``AlgorithmSpec.preload``); imported on the clock, it cost each platform about two seconds that the
virtual clock does not count (the twins experiment, ``results/twins``)."""

register(AlgorithmSpec("edgegossip", "EdgeGossip: predicted balancing and accuracy-aware training over "
                       "aggregated points, on GoSGD", EdgeGossipConfig,
                       lambda cfg: [("worker", edgegossip_platform)] * cfg.cluster.workers,
                       "EdgeGossip Sec. 3, Alg. 1-2, Eq. 1", display="EdgeGossip", preload=SKLEARN,
                       decisions=("data_ratio", "prediction_error", "aggregated_share", "predictor_s",
                                  "load_reading_s", "reduce_s", "divide_s", "generate_s", "generation_s",
                                  "aggregated_points", "reassigned")))
