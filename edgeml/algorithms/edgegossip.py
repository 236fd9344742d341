"""EdgeGossip (edgegossip.txt Sec. 3: Eq. 1, Algorithms 1-2) and its baseline GoSGD (Blot et al.; Sec. 2.1).

**GoSGD.** Every platform (a worker) trains its own replica with mini-batch SGD and momentum on its local data
and holds a mixing weight a_i (1/E at the start, E platforms). After each local step it pushes, with
probability ``gossip_prob``, its model and *half* of its weight to a random live neighbour (``node.rng``),
keeping the other half; a receiver mixes w_i <- (a_i w_i + a_j w_j) / (a_i + a_j) and sets a_i <- a_i + a_j
(``mix``). The weights (with those in flight) sum to 1 all along; a push to a crashed peer is dropped by the
runtime and its weight with it. An epoch ends when every live platform has processed its data (a barrier:
the runtime's all-reduce among the live platforms), which is where slow platforms delay everyone (Sec. 4.5,
"slow platforms cause a longer delay in each epoch's synchronization"). The model evaluated is the plain
average of the platforms' models (each platform exposes its replica).

**EdgeGossip** is GoSGD with three additions:

- *Input data aggregator* (Sec. 3.2, Eq. 1; ``aggregate``), once before training: within each class, a
  dimensionality reduction (``svd``: each point's 10 largest singular values, d' = 10; ``isvd``: incremental
  SVD, d' = log2(0.1 d / ratio) as in Sec. 4.3; ``hash``: feature hashing, d' = 10), then a similarity-preserving
  division into N_c / ratio subsets (``kmeans``: K-means, 20 iterations; ``lsh``: E2LSH random projections,
  floor((a.x + b) / w) on d' projections, the width w searched so the non-empty buckets number N_c / ratio);
  each subset becomes one aggregated point, the mean of its original points (Eq. 1). The combinations of
  the paper: ``svd_kmeans``, ``isvd_lsh``, ``hash_kmeans``. Which SVD is a reading (``edgegossip.svd``): Sec. 3.2
  names "SVD based on single data points or the entire dataset" and drops "SVD (based on the entire dataset)
  + LSH" as ten times slower, and Table 3 costs the kept SVD O(N d^{3/2}), the cost of decomposing every point
  as a sqrt(d) x sqrt(d) matrix, so the default ``point`` decomposes each point (an image's channels stacked
  as rows: H C x W) and keeps its 10 largest singular values; ``dataset`` is a truncated randomized SVD of the
  class's points (their projections on its 10 leading singular vectors). The incremental SVD is scikit-learn's
  ``IncrementalPCA`` (the paper's [40] is Gorrell's Hebbian algorithm, 20 iterations on 1% of the values).
- *Performance predictor* (Sec. 3.3, ``Predictor``): a regression RG(U) of the slowdown from the co-running
  load U = (cpu, net, disk) (``node.load()``), fitted on the platform's own samples (load over a window of
  ``sample_steps`` steps, measured time per data point); the predicted time per point is t0 x RG(U) with t0
  re-estimated after every epoch from the measured speed (t0 = t_measured / RG(U_measured)), so a drifting
  platform speed is followed. Throughput p = 1 / t (one executor per platform).
- *Gossip training balancer* (Algorithm 1, ``balance``), before every epoch, on every platform from the
  throughputs all platforms contribute to the epoch barrier's all-reduce (so no platform is central):
  platforms with p below ``p_threshold`` are failed and skipped for the epoch (a crashed platform contributes
  nothing: p = 0); if more than ``f_threshold`` of them failed, the exception handling of lines 10-12 moves
  their data to the live platforms, in proportion to their throughputs (event logged, counted as
  ``reassignments``); when none is left the run stops (``node.stop_run``) naming the failed platforms. Then
  r_i = T[1] / T[i] with T[i] = |X_i| / p_i and T[1] the shortest.
- *Accuracy-aware trainer* (Algorithm 2, ``rank_subsets`` and ``plan_batches``): every epoch the aggregated
  points' losses are computed (``Trainer.losses``), their subsets ranked by descending loss, and training
  runs over the subsets in rank order, each iteration on whole subsets adding up to at least b points, until
  r_i |X_i| points are processed (Algorithm 2 loops while processed <= r_i |X_i|; here while processed <
  r_i |X_i|, so r_i = 1 means one pass).

Cost model (``compute(work=...)``; in steps, one step = 3 b F multiply-adds, F the model's forward
multiply-adds per sample, ``forward_macs``): a batch of n points costs n / b steps; the aggregated points'
losses M / (3 b) (a forward pass each); the aggregator's phases their multiply-adds (``phase_ops``, from
Table 3 and the scikit-learn algorithms used) divided by a step's. Generation and loss times are logged.

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
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence

import numpy as np

from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.errors import UserError

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Node

METHODS: dict[str, tuple[str, str]] = {"svd_kmeans": ("svd", "kmeans"), "isvd_lsh": ("isvd", "lsh"),
                                      "hash_kmeans": ("hash", "kmeans")}
"""The aggregation methods of Sec. 4.2: (dimensionality reduction, data division)."""
FIXED_DIM = 10
"""d' of SVD and of hashing (Sec. 4.3: 10 singular values, a fingerprint of length 10)."""
KMEANS_ITERS = 20
SVD_ITERS = 5
SVD_OVERSAMPLES = 10
ISVD_BATCH = 256
LSH_SEARCH = 40
"""Bisection steps of the LSH bucket width."""
FORWARD_WORK = 1 / 3
"""A forward pass as a share of a training step (forward and backward) on the same points."""


# ------------------------------------------------------------------------------------------ configuration


@dataclass
class GoSGDConfig:
    lr: float = 0.01
    """Learning rate of the local SGD (edgegossip.txt Sec. 4.1: 0.01)."""
    momentum: float = 0.9
    """Momentum of the local SGD (Sec. 4.1: 0.9); the buffer stays local, mixing moves only the model."""
    gossip_prob: float = 0.1
    """Probability p that a platform pushes its model and half its weight after a local step (Blot et al.'s
    exchange probability)."""

    def validate(self, cfg) -> None:
        name = cfg.run.algorithm
        if not 0 < self.lr < math.inf:
            raise UserError(f"{name}.lr = {self.lr}: the learning rate must be a finite number > 0")
        if not 0 <= self.momentum < 1:
            raise UserError(f"{name}.momentum = {self.momentum}: must lie in [0, 1)")
        if not 0 <= self.gossip_prob <= 1:
            raise UserError(f"{name}.gossip_prob = {self.gossip_prob}: a probability in [0, 1]")


@dataclass
class EdgeGossipConfig(GoSGDConfig):
    method: Literal["svd_kmeans", "isvd_lsh", "hash_kmeans"] = "svd_kmeans"
    """Aggregation method: dimensionality reduction + data division (Sec. 4.2's three)."""
    ratio: float = 10.0
    """Aggregation ratio: original points per aggregated point (Sec. 4.2: 10; Fig. 13: 5 and 20)."""
    p_threshold: float = 0.001
    """Throughput (points per second) below which a platform counts as failed (Algorithm 1; Sec. 3.3: 0.001)."""
    f_threshold: float = 0.1
    """Share of failed platforms beyond which their data move to the live ones (Algorithm 1 line 10: 10%)."""
    sample_steps: int = 8
    """The predictor takes one sample (load, time per point) every this many training steps."""
    svd: Literal["point", "dataset"] = "point"
    """The SVD of ``svd_kmeans``: ``point``, each point's 10 largest singular values (Table 3's O(N d^{3/2}): every
    point decomposed as a matrix); ``dataset``, a truncated SVD of the class's points (the variant Sec. 3.2
    found ten times slower with LSH)."""
    order: Literal["shuffled", "rank"] = "shuffled"
    """Which order the subsets Algorithm 2 keeps are trained in: ``rank``, Algorithm 2 as written (iterations
    over whole subsets in descending loss, so a batch holds one or two classes: on Fashion-MNIST with LeNet-5
    the accuracy then swings between 0.2 and 0.55 from epoch to epoch); ``shuffled``, their points in random
    batches of b."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if not 1 <= self.ratio < math.inf:
            raise UserError(f"edgegossip.ratio = {self.ratio}: points per aggregated point, a number >= 1")
        if not 0 <= self.p_threshold < math.inf:
            raise UserError(f"edgegossip.p_threshold = {self.p_threshold}: points per second, a number >= 0")
        if not 0 <= self.f_threshold <= 1:
            raise UserError(f"edgegossip.f_threshold = {self.f_threshold}: a share of platforms in [0, 1]")
        if self.sample_steps < 1:
            raise UserError(f"edgegossip.sample_steps = {self.sample_steps}: at least 1 step per sample")


# ------------------------------------------------------------------------------------------ gossip (GoSGD)


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


# ------------------------------------------------------------------------------------------ aggregator (Eq. 1)


@dataclass
class Aggregated:
    """Aggregated data points: ``points[k]`` is the mean of the original points ``members[k]`` (positions in
    the input), all of class ``labels[k]``."""

    points: np.ndarray
    labels: np.ndarray
    members: list[np.ndarray]


Phase = Callable[[str, Callable[[], Any], float], Any]
"""``phase(name, fn, ops)`` runs one step of the aggregator (``reduce``, ``divide``, ``generate``) costing
``ops`` multiply-adds and returns ``fn()``; a platform charges it to its clock."""


def point_matrix(d: int, shape: Sequence[int] | None = None) -> tuple[int, int]:
    """The matrix a point of d features is decomposed as by the per-point SVD: an image of ``shape`` (C, H, W)
    as its channels stacked into (C H) x W; other features as the most nearly square r x (d / r)."""
    if shape is not None and len(shape) >= 2 and math.prod(shape) == d:
        return d // shape[-1], shape[-1]
    r = max(k for k in range(1, math.isqrt(d) + 1) if d % k == 0)
    return d // r, r


def reduced_dim(how: str, d: int, ratio: float, shape: Sequence[int] | None = None, svd: str = "point") -> int:
    """d' of a reduction of d features: 10 for SVD (at most the singular values a point has, per point) and
    hashing, log2(0.1 d / ratio) for incremental SVD (Sec. 4.3), at least 1 and below d."""
    if how == "svd" and svd == "point":
        return max(1, min(FIXED_DIM, *point_matrix(d, shape)))
    k = FIXED_DIM if how in ("svd", "hash") else round(math.log2(max(1.0, 0.1 * d / ratio)))
    return max(1, min(k, d - 1)) if d > 1 else 1


def reduce(x: np.ndarray, how: str, k: int, seed: int, matrix: tuple[int, int] | None = None) -> np.ndarray:
    """The points ``x`` (n x d) in k dimensions: each point's k largest singular values (``svd`` with ``matrix``,
    the rows x columns each point is decomposed as), a truncated SVD of the points (``svd`` without),
    incremental SVD or feature hashing."""
    n, d = x.shape
    if how == "svd" and matrix is not None:
        return np.linalg.svd(x.reshape(n, *matrix), compute_uv=False)[:, :k].astype(np.float32, copy=False)
    if how == "hash":
        from sklearn.feature_extraction import FeatureHasher

        # each feature j goes to bucket h(j) with sign s(j): x' = x H, H the hashing of the feature names
        h = FeatureHasher(n_features=k, input_type="dict").transform([{str(j): 1.0} for j in range(d)])
        return np.asarray(x @ h.toarray(), dtype=np.float32)
    k = min(k, n - 1, d - 1)
    if k < 1:
        return x
    if how == "svd":
        from sklearn.decomposition import TruncatedSVD

        return TruncatedSVD(k, n_iter=SVD_ITERS, n_oversamples=SVD_OVERSAMPLES, random_state=seed).fit_transform(x)
    from sklearn.decomposition import IncrementalPCA

    return IncrementalPCA(k, batch_size=max(k, ISVD_BATCH)).fit_transform(x)


def divide(z: np.ndarray, how: str, m: int, seed: int) -> np.ndarray:
    """A subset label per point of ``z`` (n x d'), about ``m`` subsets of similar points: K-means or LSH."""
    n = len(z)
    if m >= n:
        return np.arange(n)
    if m <= 1:
        return np.zeros(n, dtype=np.int64)
    if how == "kmeans":
        from sklearn.cluster import KMeans

        with warnings.catch_warnings():  # duplicate points may leave fewer distinct clusters than asked
            warnings.simplefilter("ignore")
            return KMeans(m, n_init=1, max_iter=KMEANS_ITERS, random_state=seed).fit_predict(z)
    return lsh(z, m, np.random.default_rng(seed))


def lsh(z: np.ndarray, m: int, rng: np.random.Generator) -> np.ndarray:
    """E2LSH (Datar et al. 2004): bucket floor((a_i . x + b_i) / w) over d' Gaussian projections a_i, offsets b_i
    uniform in [0, w); the width w is bisected (in log scale) so that the non-empty buckets are closest to m."""
    proj = (z - z.mean(0)) @ rng.standard_normal((z.shape[1], z.shape[1]))
    offset = rng.random(z.shape[1])

    def buckets(w: float) -> np.ndarray:
        _, inv = np.unique(np.floor(proj / w + offset), axis=0, return_inverse=True)
        return inv.reshape(-1)

    lo, hi = math.log(1e-9), math.log(float(np.ptp(proj, axis=0).max()) * 2 + 1e-9)
    best = buckets(math.exp(hi))
    for _ in range(LSH_SEARCH):
        mid = (lo + hi) / 2
        labels = buckets(math.exp(mid))
        count = labels.max() + 1
        if abs(count - m) < abs(best.max() + 1 - m):
            best = labels
        if count > m:
            lo = mid
        elif count < m:
            hi = mid
        else:
            break
    return best


def phase_ops(name: str, how: str, n: int, d: int, k: int, m: int, matrix: tuple[int, int] | None = None) -> float:
    """Multiply-adds of one aggregator step on n points of d features (k = d', m subsets), after Table 3 and the
    algorithms used: per-point SVD (``matrix`` = r x c) the bidiagonalization of each point, 4 r c min(r, c)
    (Table 3's O(N d^{3/2}) for a square point); randomized SVD 2 (iterations + 1) products of X with a
    d x (k + oversamples) matrix;
    incremental SVD one SVD of a (B + k) x d matrix per batch of B = min(256, n) (4 n d (B + k)^2 / B);
    hashing n d; K-means 20 iterations of n m k; LSH n k^2 for the projections and n k log2 n per bisection
    step; Eq. 1 n d."""
    if name == "reduce":
        if how == "svd" and matrix is not None:
            r, c = matrix
            return 4.0 * n * r * c * min(r, c)
        if how == "svd":
            return 2.0 * (SVD_ITERS + 1) * n * d * min(k + SVD_OVERSAMPLES, n, d)
        if how == "isvd":
            batch = max(1, min(ISVD_BATCH, n))
            return 4.0 * n * d * (batch + k) ** 2 / batch
        return float(n * d)
    if name == "divide":
        if how == "kmeans":
            return float(KMEANS_ITERS * n * m * k)
        return n * k * k + LSH_SEARCH * n * k * math.log2(max(n, 2))
    return float(n * d)


def aggregate(x: np.ndarray, y: np.ndarray, method: str, ratio: float, seed: int = 0,
              phase: Phase | None = None, shape: Sequence[int] | None = None, svd: str = "point") -> Aggregated:
    """Eq. 1 within each class: reduce, divide into about n_c / ratio subsets, one mean point per subset.

    ``x``: n x d features (flattened; ``shape``, a point's shape before flattening, such as (1, 28, 28)),
    ``y``: n labels. ``svd``: ``point`` or ``dataset`` (``EdgeGossipConfig.svd``). ``phase`` runs each of the
    three steps (over all classes), e.g. charging its cost; by default it just runs them."""
    reduce_how, divide_how = METHODS[method]
    phase = phase or (lambda name, fn, ops: fn())
    n, d = x.shape
    k = reduced_dim(reduce_how, d, ratio, shape, svd)
    matrix = point_matrix(d, shape) if reduce_how == "svd" and svd == "point" else None
    classes = [np.flatnonzero(y == c) for c in np.unique(y)]
    subsets = [max(1, round(len(idx) / ratio)) for idx in classes]
    reduced = phase("reduce", lambda: [reduce(x[idx], reduce_how, k, seed, matrix) for idx in classes],
                    sum(phase_ops("reduce", reduce_how, len(idx), d, k, m, matrix)
                        for idx, m in zip(classes, subsets)))
    parts = phase("divide", lambda: [divide(z, divide_how, m, seed) for z, m in zip(reduced, subsets)],
                  sum(phase_ops("divide", divide_how, len(idx), d, k, m) for idx, m in zip(classes, subsets)))

    def generate() -> Aggregated:
        members = [idx[part == s] for idx, part in zip(classes, parts) for s in np.unique(part)]
        points = np.stack([x[g].mean(0) for g in members]).astype(x.dtype, copy=False)
        return Aggregated(points, np.array([y[g[0]] for g in members]), members)

    return phase("generate", generate, float(n * d))


# ------------------------------------------------------------------------------------------ predictor (Sec. 3.3)


class Predictor:
    """The basic performance predictor: RG(U), the slowdown of a platform's training under co-running load
    U = (cpu, net, disk), and t0, its time per data point without interference.

    RG is scikit-learn's ``ExtraTreesRegressor`` (25 trees) on log(time per point): the slowdown is non-linear
    (a shared core gives 1 / (1 - u), then saturates) and differs by resource and with their mix, which an
    ensemble of randomized trees fits without a chosen functional form, as a smooth-enough average of step
    functions; it needs no feature scaling, is deterministic for a seed, and fits a few hundred samples in
    tens of milliseconds (gradient boosting fitted as well, 3x slower; nearest neighbours were twice as far
    off on the synthetic test). RG(U) = exp(f(U) - f(0)), at least 1; until ``MIN_SAMPLES`` samples exist it
    is 1. ``fit`` refits only once ``MIN_NEW`` samples have arrived since the last fit.
    """

    MIN_SAMPLES = 8
    MIN_NEW = 8

    def __init__(self, window: int = 512, seed: int = 0):
        self.window = window
        self.seed = seed
        self.new = 0
        self.loads: list[tuple[float, float, float]] = []
        self.times: list[float] = []
        self.model = None
        self.base = 0.0
        self.memo: dict[tuple[float, ...], float] = {}
        self.t0: float | None = None

    def observe(self, load: Sequence[float], t: float) -> None:
        """One sample: time per point ``t`` measured under ``load``."""
        if t > 0 and math.isfinite(t):
            self.loads.append(tuple(float(v) for v in load))
            self.times.append(float(t))
            self.new += 1
            del self.loads[:-self.window], self.times[:-self.window]

    def fit(self) -> None:
        if len(self.times) < self.MIN_SAMPLES or self.new < self.MIN_NEW:
            return
        from sklearn.ensemble import ExtraTreesRegressor

        self.model = ExtraTreesRegressor(25, min_samples_leaf=2, random_state=self.seed, n_jobs=1)
        self.model.fit(np.array(self.loads), np.log(self.times))
        self.new = 0
        self.memo = {}
        self.base = float(self.model.predict(np.zeros((1, 3)))[0])

    def slowdown(self, load: Sequence[float]) -> float:
        """RG(U) >= 1."""
        if self.model is None:
            return 1.0
        key = tuple(float(v) for v in load)
        if key not in self.memo:  # modelled loads repeat exactly; each prediction costs milliseconds
            self.memo[key] = max(1.0, math.exp(float(self.model.predict(np.array([key]))[0]) - self.base))
        return self.memo[key]

    def calibrate(self, load: Sequence[float], t: float) -> None:
        """t0 <- t / RG(U): follow the platform's measured speed (time per point ``t`` under ``load``)."""
        if t > 0 and math.isfinite(t):
            self.t0 = t / self.slowdown(load)

    def predict(self, load: Sequence[float]) -> float:
        """Predicted time per data point under ``load``: t0 x RG(U)."""
        if self.t0 is None:
            raise ValueError("calibrate the predictor with a measured time first")
        return self.t0 * self.slowdown(load)


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


# ------------------------------------------------------------------------------------------ platforms


def forward_macs(model, input_shape: Sequence[int]) -> float:
    """Multiply-adds of one sample's forward pass through the model's linear and convolution layers."""
    import torch
    from torch import nn

    total = 0.0

    def count(module, _inputs, out):
        nonlocal total
        if isinstance(module, nn.Linear):
            total += module.in_features * module.out_features
        else:
            k = module.weight[0].numel()  # in_channels / groups x kernel area
            total += out[0].numel() * k

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        with torch.no_grad():
            training = model.training
            model.eval()
            model(torch.zeros(1, *input_shape, device=next(model.parameters()).device))
            model.train(training)
    finally:
        for h in hooks:
            h.remove()
    return max(total, 1.0)


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


class EdgePlatform(Platform):
    """An EdgeGossip platform (see the module docstring)."""

    def __init__(self, node: Node):
        super().__init__(node)
        # loading scikit-learn takes seconds on a busy host: done before, not charged to, the first phase
        import sklearn.cluster  # noqa: F401
        import sklearn.decomposition  # noqa: F401
        import sklearn.ensemble  # noqa: F401
        import sklearn.feature_extraction  # noqa: F401

        self.step_ops = 3 * self.b * forward_macs(self.trainer.model, self.data.input_shape)
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
            from threadpoolctl import threadpool_limits

            def limited():  # scikit-learn's OpenMP and BLAS pools stay within the node's threads
                with threadpool_limits(node.cfg.run.threads):
                    return fn()

            t0 = node.now()
            out = node.compute(limited, work=ops / self.step_ops)
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

    def losses(self, parts: list) -> tuple[list[float], list[np.ndarray]]:
        """Algorithm 2 line 1: the loss of every aggregated point (a forward pass each, charged)."""
        losses, members = [], []
        for points, labels, subsets in parts:
            m = len(labels)
            out = self.node.compute(lambda: self.trainer.losses((points, labels)), work=m * FORWARD_WORK / self.b)
            losses += out.tolist()
            members += subsets
        return losses, members

    def run(self) -> None:
        node, cfg, me = self.node, self.cfg, self.node.index
        sizes = [len(s) for s in self.shards]
        self.read_load()  # the first reading's window starts here
        while True:
            start = node.now()
            losses, members = self.losses([self.points["own"]])
            loss_s = node.now() - start
            load = self.read_load()  # the latest reading: what the next epoch is predicted under
            if self.predictor.t0 is None:  # the first epoch: the speed of the forward passes just made
                self.predictor.calibrate(load, loss_s / (len(losses) * FORWARD_WORK))
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
                more_losses, more_members = self.losses(extra)
                loss_s += node.now() - t0
                losses, members = losses + more_losses, members + more_members
            batches = plan_batches(members, rank_subsets(losses), ratio * plan.sizes[me], self.b)
            if cfg.order == "shuffled":
                import torch

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
        overhead of edgegossip.txt Fig. 11."""
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


# ------------------------------------------------------------------------------------------ registration


def _platforms(program):
    return lambda cfg: [("worker", program)] * cfg.cluster.workers


register(AlgorithmSpec("gosgd", "GoSGD: gossip of models and halved mixing weights, epochs end together",
                       GoSGDConfig, _platforms(gosgd_platform), "edgegossip.txt Sec. 2.1 (Blot et al.)"))
register(AlgorithmSpec("edgegossip", "EdgeGossip: predicted balancing and accuracy-aware training over "
                       "aggregated points, on GoSGD", EdgeGossipConfig, _platforms(edgegossip_platform),
                       "edgegossip.txt Sec. 3, Alg. 1-2, Eq. 1"))
