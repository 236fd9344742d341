"""The staleness bookkeeping of AdaComp's parameter server (AdaComp Eq. 3, Alg. 2 line 7, the memory of Sec.
IV-d): sigma_k, the updates applied since a worker's pull that touched parameter k, exact and in bounded memory
(``TouchHistory``), and the histograms of staleness the runs log (``Histogram``). The server that uses them is
``adacomp.py``'s.

Bookkeeping for Eq. 3 (``TouchHistory``). With ``count[k]`` the number of updates that touched k so far,
sigma_k(j) = count_k(now) - count_k(j), so the PS needs count(j) for every outstanding pull j (one per worker).
A copy of ``count`` per worker costs 4PW bytes (170 MB for the paper's CNN and 200 workers), a list of the
touched indices of every update since the oldest pull 4Kd bytes for a window of d updates (unbounded once a
worker crashes). Instead, versions are cut into segments of E = ceil(P / K) updates; a segment holds
``count`` at its first version (a checkpoint, 4P bytes) and the touched indices of its updates (at most
4EK < 4(P + K) bytes), which give count(j) for any j inside it. Once closed, a segment keeps its log only up
to its last outstanding pull, turns into a single checkpoint at that pull when its pulls share one version,
and is dropped when it holds none. The memory (``TouchHistory.nbytes``, logged in the ``ps_memory`` series)
is then at most

    M <= 4 (P + K) (3 + min(W, 2 ceil(d / E)))  bytes,

W workers, d = the updates since the oldest outstanding pull: the running count, the open segment (2 units)
and at most 2 units per closed segment that holds a pull, 1 when its pulls share a version. So M never
exceeds the per-worker copies by more than 3 vectors, and stays near 8Kd (twice the index list) while the
window is short: at c = 0.01, d = 400 and the paper's CNN (P = 211,690, K = 2,117, E = 100) M is about 9.4 MB.
A push costs O(P) at the PS (one bincount over at most E logs), as much as the model it sends back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    import torch


class Histogram:
    """Counts of non-negative integers in bins 0, 1, 2-3, 4-7, ... (bin b >= 1 holds [2^(b-1), 2^b - 1])."""

    BINS = 33  # up to 2^32 - 1

    def __init__(self) -> None:
        import torch

        self.counts = torch.zeros(self.BINS, dtype=torch.int64)
        self._edges = torch.tensor([2 ** b for b in range(self.BINS - 1)], dtype=torch.int64)

    def add(self, values: torch.Tensor | int) -> None:
        import torch

        if isinstance(values, int):
            self.counts[values.bit_length()] += 1
            return
        if values.device != self.counts.device:  # count where the values are (a CUDA node's staleness)
            self.counts, self._edges = self.counts.to(values.device), self._edges.to(values.device)
        b = torch.searchsorted(self._edges, values.reshape(-1).to(torch.int64), right=True)
        self.counts += torch.bincount(b, minlength=self.BINS)

    def rows(self) -> list[tuple[int, int, int]]:
        """(lo, hi, count) of every bin up to the last non-empty one."""
        nonzero = self.counts.nonzero()
        last = int(nonzero.max()) if len(nonzero) else -1
        return [(0 if b == 0 else 2 ** (b - 1), 0 if b == 0 else 2 ** b - 1, int(self.counts[b]))
                for b in range(last + 1)]


@dataclass(eq=False)
class _Segment:
    """Updates start, start + 1, ...: ``count`` at ``start`` and the entries each update touched."""

    start: int
    base: torch.Tensor
    log: list[torch.Tensor] = field(default_factory=list)
    pins: dict[int, int] = field(default_factory=dict)
    """Outstanding pulls in this segment: version -> how many workers hold it."""

    def count_at(self, j: int, index: torch.Tensor | None = None) -> torch.Tensor:
        """``count`` at version j (start <= j <= start + len(log)), at ``index`` only if given."""
        import torch

        prefix = self.log[: j - self.start]
        base = self.base if index is None else self.base[index]
        if not prefix:
            return base.clone()
        touched = torch.bincount(torch.cat(prefix).to(torch.int64), minlength=len(self.base)).to(torch.int32)
        return base + (touched if index is None else touched[index])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.base, *self.log))


class TouchHistory:
    """sigma_k(j) of AdaComp Eq. 3 for the outstanding pull of every holder (worker), exact, in bounded memory.

    ``record(touched)`` after each applied update (the entries it changed), ``pull(holder)`` when a holder
    receives the model, ``sigma(holder, index)`` for a push it computed on that model. The structure (segments
    of ``segment`` updates with a checkpoint and a log) and its memory bound are in the module docstring."""

    def __init__(self, size: int, segment: int, holders: Iterable[int], device: str | torch.device = "cpu"):
        import torch

        self.size, self.segment = size, segment
        self.version = 0
        self.count = torch.zeros(size, dtype=torch.int32, device=device)
        self.live = _Segment(0, self.count.clone())
        self.closed: list[_Segment] = []
        self.held: dict[int, tuple[_Segment, int]] = {}
        for h in holders:
            self._pin(h)

    def sigma(self, holder: int, index: torch.Tensor) -> torch.Tensor:
        """Updates since ``holder``'s pull that touched each entry of ``index`` (int64)."""
        import torch

        seg, j = self.held[holder]
        return (self.count[index] - seg.count_at(j, index)).to(torch.int64)

    def record(self, touched: torch.Tensor) -> None:
        """One update applied (a new version) that changed the entries ``touched`` (distinct)."""
        import torch

        touched = touched.to(torch.int64)
        self.count[touched] += 1
        self.live.log.append(touched.to(torch.int32))
        self.version += 1
        if self.version - self.live.start == self.segment:
            old, self.live = self.live, _Segment(self.version, self.count.clone())
            self.closed.append(old)
            self._settle(old)

    def pull(self, holder: int) -> None:
        """``holder`` receives the current version: its previous pull is no longer outstanding."""
        seg, j = self.held.pop(holder)
        seg.pins[j] -= 1
        if not seg.pins[j]:
            del seg.pins[j]
        if seg is not self.live:
            self._settle(seg)
        self._pin(holder)

    def _pin(self, holder: int) -> None:
        j = self.version
        self.live.pins[j] = self.live.pins.get(j, 0) + 1
        self.held[holder] = (self.live, j)

    def _settle(self, seg: _Segment) -> None:
        """Keep of a closed segment only what its outstanding pulls need."""
        if not seg.pins:
            self.closed.remove(seg)
        elif len(seg.pins) == 1:  # one version: a checkpoint at it, no log
            (j,) = seg.pins
            seg.base, seg.start, seg.log = seg.count_at(j), j, []
        else:
            del seg.log[max(seg.pins) - seg.start:]

    def nbytes(self) -> int:
        """Bytes of the tensors kept: the running count, the open segment and the closed ones still needed."""
        return self.count.numel() * 4 + sum(s.nbytes() for s in (self.live, *self.closed))

    def window(self) -> int:
        """d: updates applied since the oldest outstanding pull."""
        return self.version - min(j for _, j in self.held.values()) if self.held else 0

    def bound(self, kept: int) -> int:
        """The memory bound of the module docstring, 4 (P + K) (3 + min(W, 2 ceil(d / E))), with K = ``kept``."""
        d = self.window()
        return 4 * (self.size + kept) * (3 + min(len(self.held), 2 * -(-d // self.segment)))

