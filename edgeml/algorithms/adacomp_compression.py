"""The compression rule of AdaComp and Comp-ASGD (AdaComp Alg. 1 line 15, Sec. IV-b, Sec. V-B): which
entries of a gradient a worker pushes, and how they travel. The packs (``layer_top_c`` for AdaComp,
``global_top_c`` for Comp-ASGD, ``dense_update`` for ASGD) are the ``pack`` hook of the kit's ``ps_worker``.

- *How many entries "c" keeps*: floor(c n) of a layer (or of the whole update, Comp-ASGD) of n entries,
  computed to 9 decimals so that 0.29 x 100 keeps 29, and at least one: a layer whose c n is below 1 still
  sends its largest entry (``keep_count``). Ties at the threshold go to the lowest indices, so the selection
  is deterministic. Entries are sent as selected, zeros included.
- *Comp-ASGD's selection*: [11] selects either at random or the largest entries; we keep the largest (by
  absolute value, over the whole update), the variant the paper contrasts with per-layer selection (Sec. IV-b).

Wire (the counted bytes are the encodings' real lengths, ``runtime/wire.py``): every push carries j as one
scalar (8 bytes) besides the update. AdaComp sends ``wire.sparse_layers``: L int32 counts, then an int32
layer-local index and a float32 value per kept entry, so a push is exactly 4L + 8K + 8 bytes for K kept
entries of an L-layer model. Comp-ASGD sends ``wire.sparse``, 8K + 8 bytes; ASGD ``wire.dense``, 4P + 8 bytes
for P parameters.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    import torch

Spans = Sequence[tuple[int, int]]


def keep_count(c: float, n: int) -> int:
    """Entries kept of n at ratio c: floor(c n), computed to 9 decimals (0.29 x 100 keeps 29), at least 1."""
    return min(n, max(1, math.floor(round(c * n, 9))))


def top_c(x: torch.Tensor, c: float, spans: Spans) -> torch.Tensor:
    """Flat indices (int64, ascending) of the ``keep_count(c, n)`` largest entries of ``x`` by absolute value in
    each span (offset, n); ties at the threshold go to the lowest indices. On a finite float CPU vector the
    threshold (the k-th largest magnitude) comes from NumPy's partition (introselect: the same order statistic
    as ``torch.topk``, so the same selection, several times faster on one thread); elsewhere (CUDA, NaN or
    infinite entries) from ``torch.topk``."""
    import numpy as np
    import torch

    a = x.detach().numpy() if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64) else None
    fast = a is not None and bool(np.isfinite(a).all())
    parts = []
    for offset, n in spans:
        k = keep_count(c, n)
        if k == n:
            idx = torch.arange(n, device=x.device)
        elif fast:
            idx = torch.from_numpy(_select_numpy(np.abs(a[offset:offset + n]), k))
        else:
            v = x[offset:offset + n].abs()
            t = torch.topk(v, k, sorted=False).values.min()  # the k-th largest magnitude
            above = torch.nonzero(v > t).reshape(-1)
            ties = torch.nonzero(v == t).reshape(-1)[: k - above.numel()]
            idx = torch.cat([above, ties]).sort().values
        parts.append(idx + offset)
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=x.device)


def _select_numpy(v, k: int):
    """``top_c``'s selection in one span of finite magnitudes ``v``: the k largest, ties to the lowest, ascending.

    Exact, and cheap for small k (the c of 0.01 and 0.001 on a 200,000-entry layer is ten times faster than one
    partition of the layer): a strided sample of about 4,096 entries estimates a threshold that a few standard
    deviations more than k entries reach; when at least k do, the k-th largest magnitude is at or above it, so
    every entry the selection can keep (ties included) is among those candidates and the partition runs on them
    only; when fewer do (an unlucky sample), the whole span is partitioned."""
    import numpy as np

    n = v.size
    if n >= 8192 and 4 * k <= n:
        sample = v[:: n // 4096]
        expect = k * sample.size / n  # sample entries at or above the k-th largest, on average
        q = min(sample.size, int(expect + 4 * math.sqrt(expect)) + 8)  # four standard deviations above
        threshold = np.partition(sample, sample.size - q)[sample.size - q]
        if threshold > 0:  # (at 0, every entry is a candidate: the sample is mostly zeros)
            candidates = np.flatnonzero(v >= threshold)
            if candidates.size >= k:
                return candidates[largest_mask(v[candidates], k)].astype(np.int64)
    return np.flatnonzero(largest_mask(v, k)).astype(np.int64)


def largest_mask(v, k: int):
    """A mask of the k largest entries of the magnitudes ``v`` (>= 0), ties at the k-th largest to the lowest
    indices. Zeros, often most of a gradient (dead units, a diverged model), are counted apart: NumPy's partition
    slows down tenfold and more on many equal values, so it runs on the non-zero entries alone where they are
    fewer than half, and not at all where at most k entries are non-zero (every one is kept)."""
    import numpy as np

    nonzero = int(np.count_nonzero(v))
    if nonzero <= k:
        t = v.dtype.type(0)  # keep every non-zero entry, and the lowest-index zeros up to k
    elif 2 * nonzero < v.size:
        t = np.partition(v[v != 0], nonzero - k)[nonzero - k]
    else:
        t = np.partition(v, v.size - k)[v.size - k]  # the k-th largest
    keep = v > t
    need = k - int(np.count_nonzero(keep))
    if need:
        keep[np.flatnonzero(v == t)[:need]] = True
    return keep


def dense_update(cfg: Any, spans: Spans, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """ASGD's push: the whole gradient (``wire.dense``)."""
    from edgeml.runtime import wire

    return wire.dense(grad)


def global_top_c(cfg: Any, spans: Spans, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """Comp-ASGD's push: the largest ``cfg.c`` fraction of the whole gradient (``wire.sparse``)."""
    from edgeml.runtime import wire

    return wire.sparse(grad, top_c(grad, cfg.c, [(0, grad.numel())]))


def layer_top_c(cfg: Any, spans: Spans, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    """AdaComp's push (Alg. 1 line 15): the largest ``cfg.c`` fraction of each layer (``wire.sparse_layers``)."""
    from edgeml.runtime import wire

    return wire.sparse_layers(grad, top_c(grad, cfg.c, spans), spans)

