"""EdgeGossip's input data aggregator (EdgeGossip Sec. 3.2, Eq. 1; Sec. 4.2-4.3; Table 3's costs).

Once before training, within each class: a dimensionality reduction (``svd``: each point's 10 largest singular
values, d' = 10; ``isvd``: incremental SVD, d' = log2(0.1 d / ratio) as in Sec. 4.3; ``hash``: feature hashing,
d' = 10), then a similarity-preserving division into N_c / ratio subsets (``kmeans``: K-means, 20 iterations;
``lsh``: E2LSH random projections, floor((a.x + b) / w) on d' projections, the width w searched so the
non-empty buckets number N_c / ratio); each subset becomes one aggregated point, the mean of its original points
(Eq. 1). The combinations of the paper: ``svd_kmeans``, ``isvd_lsh``, ``hash_kmeans``. Which SVD is a reading
(``edgegossip.svd``): Sec. 3.2 names "SVD based on single data points or the entire dataset" and drops "SVD
(based on the entire dataset) + LSH" as ten times slower, and Table 3 costs the kept SVD O(N d^{3/2}), the cost
of decomposing every point as a sqrt(d) x sqrt(d) matrix, so the default ``point`` decomposes each point (an
image's channels stacked as rows: H C x W) and keeps its 10 largest singular values; ``dataset`` is a truncated
randomized SVD of the class's points (their projections on its 10 leading singular vectors). The incremental
SVD is scikit-learn's ``IncrementalPCA`` (the paper's [40] is Gorrell's Hebbian algorithm, 20 iterations on 1%
of the values).

Cost model: each of the three phases (``reduce``, ``divide``, ``generate``) is charged its multiply-adds
(``phase_ops``, from Table 3 and the scikit-learn algorithms used); a platform divides them by a training
step's (``edgeml.algorithms.edgegossip.programs``). Plain numpy and scikit-learn: no node, no torch.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

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
