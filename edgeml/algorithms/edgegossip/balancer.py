"""EdgeGossip's gossip training balancer and the accuracy-aware trainer's plan (EdgeGossip Sec. 3.3-3.4,
Algorithms 1 and 2).

- *Balancer* (Algorithm 1, ``balance``), before every epoch, on every platform from the throughputs all
  platforms contribute to the epoch barrier's all-reduce (so no platform is central): platforms with p below
  ``p_threshold`` are failed and skipped for the epoch (a crashed platform contributes nothing: p = 0); if more
  than ``f_threshold`` of them failed, the exception handling of lines 10-12 moves their data to the live
  platforms, in proportion to their throughputs; when none is left, ``NoPlatformLeft`` names the failed
  platforms. Then r_i = T[1] / T[i] with T[i] = |X_i| / p_i and T[1] the shortest.
- *Accuracy-aware trainer* (Algorithm 2, ``rank_subsets`` and ``plan_batches``): every epoch the aggregated
  points' losses are computed, their subsets ranked by descending loss, and training runs over the subsets in
  rank order, each iteration on whole subsets adding up to at least b points, until r_i |X_i| points are
  processed (Algorithm 2 loops while processed <= r_i |X_i|; here while processed < r_i |X_i|, so r_i = 1
  means one pass). ``regroup`` trains the same points in random batches of b instead (``order = "shuffled"``).

Pure functions of numbers and index arrays; the platform program (``programs``) applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# ------------------------------------------------------------------------------------------ balancer (Alg. 1)


class NoPlatformLeft(Exception):
    """Every platform failed: the run cannot go on."""

    def __init__(self, failed: Sequence[int]):
        self.failed = tuple(failed)
        super().__init__(f"every platform failed (throughput below the threshold): platforms "
                         f"{', '.join(map(str, self.failed))}")


@dataclass(frozen=True)
class Balance:
    ratios: tuple[float, ...]
    """r_i: the share of its (possibly extended) data platform i processes this epoch; 0 when failed."""
    failed: tuple[int, ...]
    sizes: tuple[int, ...]
    """|X_i| this epoch: own data plus data taken over (0 for a failed platform whose data moved)."""
    moved: tuple[tuple[int, int, int, int], ...] = ()
    """(failed platform, live platform, start, stop): the slice [start, stop) of the failed platform's data
    that the live platform trains on this epoch."""


def split(n: int, shares: Sequence[float]) -> list[int]:
    """``n`` items in proportion to ``shares`` (largest remainder; ties to the earlier share)."""
    total = sum(shares)
    exact = [n * s / total for s in shares]
    counts = [math.floor(e) for e in exact]
    for i in sorted(range(len(shares)), key=lambda i: (counts[i] - exact[i], i))[:n - sum(counts)]:
        counts[i] += 1
    return counts


def balance(p: Sequence[float], sizes: Sequence[int], p_threshold: float = 0.001,
            f_threshold: float = 0.1) -> Balance:
    """Algorithm 1 over throughputs ``p`` (points per second) and data sizes ``sizes``: platforms with p below
    the threshold fail; beyond ``f_threshold`` failed their data move to the live ones in proportion to p;
    r_i = T[1] / T[i], T[i] = |X_i| / p_i. Raises ``NoPlatformLeft`` when every platform failed."""
    E = len(p)
    failed = [i for i in range(E) if not p[i] >= p_threshold or p[i] <= 0]  # nan fails too
    live = [i for i in range(E) if i not in failed]
    if not live:
        raise NoPlatformLeft(failed)
    sizes = list(sizes)
    moved = []
    if len(failed) / E > f_threshold:  # lines 10-12: the failed platforms' tasks run elsewhere
        for f in failed:
            start = 0
            for j, c in zip(live, split(sizes[f], [p[j] for j in live])):
                if c:
                    moved.append((f, j, start, start + c))
                    sizes[j] += c
                    start += c
            sizes[f] = 0
    T = {i: sizes[i] / p[i] for i in live}
    t1 = min((t for t in T.values() if t > 0), default=0.0)
    ratios = tuple(min(1.0, t1 / T[i]) if i in live and T[i] > 0 else 0.0 if i in failed else 1.0
                   for i in range(E))
    return Balance(ratios, tuple(failed), tuple(sizes), tuple(moved))


# ------------------------------------------------------------------------------------------ trainer (Alg. 2)


def rank_subsets(losses: Sequence[float]) -> list[int]:
    """Aggregated points in descending order of loss (their effect e_i; Algorithm 2 line 2); ties by index."""
    return sorted(range(len(losses)), key=lambda i: (-float(losses[i]), i))


def rank_subsets_per_class(losses: Sequence[float], labels: Sequence[int]) -> list[int]:
    """Algorithm 2's descending loss within each class, the classes interleaved (``choose = "class"``): a subset's
    key is its rank among its class's subsets over their number, so any prefix of the order keeps about the same
    share of every class, each share its highest-loss subsets; ties by loss, then index."""
    by_class: dict[int, list[int]] = {}
    for i in rank_subsets(losses):
        by_class.setdefault(int(labels[i]), []).append(i)
    key = {i: (k / len(members), -float(losses[i]), i) for members in by_class.values()
           for k, i in enumerate(members)}
    return sorted(key, key=key.__getitem__)


def plan_batches(subsets: Sequence[np.ndarray], order: Sequence[int], target: float, b: int) -> list[np.ndarray]:
    """Algorithm 2 lines 4-16: iterations over whole subsets in ``order``, each of at least ``b`` points (the
    last may be smaller when the subsets run out), until ``target`` points are processed."""
    batches, done, i = [], 0, 0
    while done < target and i < len(order):
        parts, size = [], 0
        while i < len(order) and size < b:
            parts.append(subsets[order[i]])
            size += len(subsets[order[i]])
            i += 1
        batches.append(np.concatenate(parts))
        done += size
    return batches


def regroup(batches: Sequence[np.ndarray], b: int, perm: np.ndarray) -> list[np.ndarray]:
    """The points of ``batches`` in the order ``perm`` (a permutation of their number), in batches of ``b``
    (the last may be smaller): ``order = "shuffled"``."""
    points = np.concatenate(batches)[perm]
    return [points[i:i + b] for i in range(0, len(points), b)]
