"""AdaComp, ASGD and Comp-ASGD: compressed asynchronous updates with per-parameter staleness (Hardy, Le Merrer
and Sericola, IEEE NCA 2017; adacomp.txt), on the parameter-server kit (``kit.py``).

A worker pulls Theta with its version (timestamp) j, computes one mini-batch gradient dTheta, compresses it and
pushes it tagged with j (a failure point). The PS applies every push on arrival (a new version each) and
answers the worker with the current Theta and its version. The three algorithms differ in what is pushed and
in the learning rate the PS applies (alpha = ``lr``):

- **AdaComp** (Alg. 1-2): the worker keeps the largest c fraction, by absolute value, of each weight matrix
  and bias vector separately (Alg. 1 line 15, ``top_c`` over ``Trainer.spans``). For each received entry k the
  PS computes sigma_k = the number of updates applied since j that touched k (Eq. 3) and applies
  Theta_k -= alpha_k dTheta_k with alpha_k = alpha / sigma_k, or alpha when sigma_k = 0 (Eqs. 4-5).
- **ASGD** (Sec. V-B, [17]): dense updates; Theta -= alpha / sigma dTheta with sigma the update's staleness
  (the versions made since its worker pulled), alpha when sigma = 0.
- **Comp-ASGD** (Sec. V-B, Shokri and Shmatikov's selective SGD [11]): the largest c fraction of the *whole*
  update, with ASGD's rate alpha / sigma.

Wire (the counted bytes are the encodings' real lengths, ``runtime/wire.py``): every push carries j as one
scalar (8 bytes) besides the update. AdaComp sends ``wire.sparse_layers``: L int32 counts, then an int32
layer-local index and a float32 value per kept entry, so a push is exactly 4L + 8K + 8 bytes for K kept
entries of an L-layer model. Comp-ASGD sends ``wire.sparse``, 8K + 8 bytes; ASGD ``wire.dense``, 4P + 8 bytes
for P parameters. Every reply is the model and its version, 4P + 8 bytes. The PS's ingress is
``ps_ingress_bytes`` in evals.csv.

Choices where the paper is open:

- *How many entries "c" keeps*: floor(c n) of a layer (or of the whole update, Comp-ASGD) of n entries,
  computed to 9 decimals so that 0.29 x 100 keeps 29, and at least one: a layer whose c n is below 1 still
  sends its largest entry (``keep_count``). Ties at the threshold go to the lowest indices, so the selection
  is deterministic. Entries are sent as selected, zeros included.
- *What touches a parameter*: an applied entry whose value is non-zero (Eq. 3's indicator), so a kept zero
  changes nothing and counts for nothing.
- *dTheta and alpha*: dTheta is the plain mini-batch gradient (Alg. 1 line 11); alpha is applied at the PS
  (Eq. 4), constant (the paper gives neither its value nor a schedule); no momentum.
- *The baselines' rate*: Sec. V-B says only that "the learning rate is divided by staleness and is global to
  each update"; we read it as Eq. 5 with the update's staleness sigma (versions made since the worker's pull),
  alpha at sigma = 0. ``staleness_aware = false`` turns the division off (for all three algorithms): plain
  asynchronous SGD, as other papers run ASGD, and an ablation of Eq. 5 for AdaComp.
- *Comp-ASGD's selection*: [11] selects either at random or the largest entries; we keep the largest (by
  absolute value, over the whole update), the variant the paper contrasts with per-layer selection (Sec. IV-b).
- *The first push*: every worker starts from Theta(0), the run's common initial model, as pulled at j = 0.
- *Staleness*: counted over exactly the updates j .. i-1 (Eq. 3), whatever the delay; history older than
  every outstanding pull is dropped. (The authors' public code counted over the whole history when the delay
  was 0, and its top-c loops crash; we implement the paper's definitions.) The PS cannot tell a crashed
  worker from a slow one, so a crashed worker's pull stays outstanding.
- *Update order*: arrival order at the PS. The paper's platform added a random wait between computation and
  push (Sec. V-A); here ``cluster.random_wait_s`` does (``node.push`` sleeps it), with device speeds and links.

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

Time series: ``staleness`` (kit: one row per update, the global staleness); ``staleness_hist`` every
``log_every`` updates and at the end: cumulative histograms (``updates``, ``kind`` = global or parameter,
bins [``lo``, ``hi``] = 0, 1, 2-3, 4-7, ..., ``count``) of the global staleness of each update and, for
AdaComp, of sigma_k of each received entry; ``ps_memory`` (AdaComp, same times): ``bytes`` of the history,
its ``bound_bytes`` by the formula above, the ``window`` d and the ``segments`` kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from edgeml.algorithms.kit import ParameterServer, ps_nodes, serve_async
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.errors import UserError

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Message, Node

Spans = Sequence[tuple[int, int]]


# ------------------------------------------------------------------------------------------ configuration


@dataclass
class ASGDConfig:
    lr: float = 0.05
    """Learning rate alpha: the PS applies Theta -= alpha / sigma * dTheta, dTheta being a worker's mini-batch
    gradient and sigma its staleness (alpha when sigma = 0; for AdaComp sigma_k per entry, Eqs. 4-5)."""
    log_every: int = 1000
    """PS updates between two writes of the ``staleness_hist`` (and AdaComp's ``ps_memory``) series; one more
    write at the end of the run."""
    staleness_aware: bool = True
    """Divide alpha by the staleness (Eq. 5; the update's for ASGD and Comp-ASGD, Sec. V-B, each entry's sigma_k
    for AdaComp). Off, every update gets the plain alpha: ASGD as esync.txt runs it, and for AdaComp or
    Comp-ASGD an ablation of the staleness rate."""

    def eta(self, num_workers: int) -> float:
        """The kit's global rate: alpha itself (workers push raw gradients)."""
        return self.lr

    def validate(self, cfg) -> None:
        name = cfg.run.algorithm
        if not 0 < self.lr < math.inf:
            raise UserError(f"{name}.lr = {self.lr}: the learning rate alpha must be a finite number > 0, "
                            f"e.g. --set {name}.lr=0.05")
        if self.log_every < 1:
            raise UserError(f"{name}.log_every = {self.log_every}: must be a whole number of updates >= 1")


@dataclass
class CompASGDConfig(ASGDConfig):
    c: float = 0.01
    """Compression ratio c: a push keeps the floor(c P) largest entries (by absolute value, at least one) of
    the whole update of P entries."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        _check_c(cfg.run.algorithm, self.c)


@dataclass
class AdaCompConfig(ASGDConfig):
    c: float = 0.01
    """Compression ratio c: a push keeps the floor(c n) largest entries (by absolute value, at least one) of
    each weight matrix and bias vector of n entries (adacomp.txt Alg. 1 line 15)."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        _check_c(cfg.run.algorithm, self.c)


def _check_c(name: str, c: float) -> None:
    if not 0 < c <= 1:
        raise UserError(f"{name}.c = {c}: the kept fraction must lie in (0, 1], e.g. --set {name}.c=0.01 "
                        f"(1% of the entries)")


# ------------------------------------------------------------------------------------------ selection


def keep_count(c: float, n: int) -> int:
    """Entries kept of n at ratio c: floor(c n), computed to 9 decimals (0.29 x 100 keeps 29), at least 1."""
    return min(n, max(1, math.floor(round(c * n, 9))))


def top_c(x: torch.Tensor, c: float, spans: Spans) -> torch.Tensor:
    """Flat indices (int64, ascending) of the ``keep_count(c, n)`` largest entries of ``x`` by absolute value in
    each span (offset, n); ties at the threshold go to the lowest indices."""
    import torch

    parts = []
    for offset, n in spans:
        k = keep_count(c, n)
        v = x[offset:offset + n].abs()
        if k == n:
            idx = torch.arange(n, device=x.device)
        else:
            t = torch.topk(v, k, sorted=False).values.min()  # the k-th largest magnitude
            above = torch.nonzero(v > t).reshape(-1)
            ties = torch.nonzero(v == t).reshape(-1)[: k - above.numel()]
            idx = torch.cat([above, ties]).sort().values
        parts.append(idx + offset)
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int64, device=x.device)


# ------------------------------------------------------------------------------------------ staleness


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
    """sigma_k(j) of adacomp.txt Eq. 3 for the outstanding pull of every holder (worker), exact, in bounded memory.

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


# ------------------------------------------------------------------------------------------ the server


def staleness_rate(alpha: float, sigma: int | torch.Tensor, aware: bool = True) -> float | torch.Tensor:
    """Eq. 5: alpha / sigma, alpha when sigma = 0 (sigma an update's staleness, or a tensor of sigma_k); alpha
    whatever sigma when not ``aware``."""
    import torch

    if not aware:
        return alpha
    if isinstance(sigma, int):
        return alpha / max(1, sigma)
    return alpha / sigma.clamp(min=1).to(torch.float32)


def asgd_rule(ps: ParameterServer, msg: Message, staleness: int) -> None:
    """Theta -= alpha / sigma * dTheta, alpha when sigma = 0 (adacomp.txt Sec. V-B)."""
    from edgeml.runtime import wire

    rate = staleness_rate(ps.eta, staleness, ps.node.algo.staleness_aware)
    ps.W.add_(wire.dense_decode(msg.data), alpha=-rate)


def comp_asgd_rule(ps: ParameterServer, msg: Message, staleness: int) -> None:
    """ASGD's rate on the entries a sparse update carries."""
    from edgeml.runtime import wire

    index, values = wire.sparse_decode(msg.data)
    rate = staleness_rate(ps.eta, staleness, ps.node.algo.staleness_aware)
    ps.W.index_add_(0, index, values, alpha=-rate)


class AsyncServer(ParameterServer):
    """The PS of ASGD and Comp-ASGD (given their rule): replies carry the version, the global staleness of
    every update goes into a histogram written every ``log_every`` updates."""

    def __init__(self, node: Node, rule=asgd_rule):
        super().__init__(node, rule)
        self.staleness_hist = Histogram()
        self.reported = -1

    def apply(self, msg: Message, **fields: Any) -> int:
        s = super().apply(msg, **fields)
        self.staleness_hist.add(s)
        if self.version % self.node.algo.log_every == 0:
            self.report()
        return s

    def reply(self, dst: int, tag: str = "model", **extra: Any) -> None:
        super().reply(dst, tag, version=self.version, **extra)

    def histograms(self) -> dict[str, Histogram]:
        return {"global": self.staleness_hist}

    def report(self) -> None:
        """Write the cumulative histograms (once per version)."""
        if self.reported == self.version:
            return
        self.reported = self.version
        for kind, hist in self.histograms().items():
            for lo, hi, count in hist.rows():
                self.node.log("staleness_hist", updates=self.version, kind=kind, lo=lo, hi=hi, count=count)


class AdaCompServer(AsyncServer):
    """adacomp.txt Alg. 2: per-parameter staleness sigma_k (Eq. 3) and rates alpha / sigma_k (Eqs. 4-5)."""

    def __init__(self, node: Node):
        super().__init__(node)
        self.spans = layer_spans(node.job)
        self.kept = sum(keep_count(node.algo.c, n) for _, n in self.spans)
        size = self.W.numel()
        self.history = TouchHistory(size, -(-size // self.kept), self.workers, self.W.device)
        self.sigma_hist = Histogram()

    def step(self, msg: Message, staleness: int) -> None:
        from edgeml.runtime import wire

        # Alg. 2 line 4: the push names the version it was computed on, the one this worker last pulled
        assert msg["version"] == self.pulled[msg.src], "a push computed on a model its worker never pulled"
        index, values = wire.sparse_layers_decode(msg.data, self.spans)
        sigma = self.history.sigma(msg.src, index)
        self.sigma_hist.add(sigma)
        rate = staleness_rate(self.eta, sigma, self.node.algo.staleness_aware)
        self.W.index_add_(0, index, values * rate, alpha=-1.0)
        self.history.record(index[values != 0])

    def reply(self, dst: int, tag: str = "model", **extra: Any) -> None:
        super().reply(dst, tag, **extra)
        self.history.pull(dst)

    def histograms(self) -> dict[str, Histogram]:
        return {"global": self.staleness_hist, "parameter": self.sigma_hist}

    def report(self) -> None:
        if self.reported != self.version:
            h = self.history
            self.node.log("ps_memory", updates=self.version, bytes=h.nbytes(), bound_bytes=h.bound(self.kept),
                          window=h.window(), segments=1 + len(h.closed))
        super().report()


def layer_spans(job) -> list[tuple[int, int]]:
    """(offset, size) of each parameter tensor of the run's model in the flat vector (as ``Trainer.spans``)."""
    spans, offset = [], 0
    for p in job.make_model().parameters():
        spans.append((offset, p.numel()))
        offset += p.numel()
    return spans


def serve(server: Callable[[Node], AsyncServer], node: Node) -> None:
    """Apply every push on arrival and answer at once; the histograms' last write when the run ends."""
    ps = server(node)
    try:
        serve_async(ps)
    finally:
        ps.report()


# ------------------------------------------------------------------------------------------ workers


def dense_update(cfg: ASGDConfig, spans: Spans, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    from edgeml.runtime import wire

    return wire.dense(grad)


def global_top_c(cfg: CompASGDConfig, spans: Spans, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    from edgeml.runtime import wire

    return wire.sparse(grad, top_c(grad, cfg.c, [(0, grad.numel())]))


def layer_top_c(cfg: AdaCompConfig, spans: Spans, grad: torch.Tensor) -> dict[str, torch.Tensor]:
    from edgeml.runtime import wire

    return wire.sparse_layers(grad, top_c(grad, cfg.c, spans), spans)


def worker(pack: Callable[[Any, Spans, torch.Tensor], dict[str, torch.Tensor]], node: Node) -> None:
    """adacomp.txt Alg. 1: compute a mini-batch gradient on the model of version j, push ``pack`` of it tagged
    with j (a failure point), continue from the model and version the PS returns."""
    trainer = node.trainer()
    ps = node.ranks("ps")[0]
    spans = trainer.spans
    version = 0
    while True:
        node.compute(trainer.gradient, samples=trainer.batch_size)
        node.push(ps, "push", **pack(node.algo, spans, trainer.grad), version=version)
        node.count("commits")
        reply = node.recv(ps, "model")
        trainer.params.copy_(reply["params"])
        version = reply["version"]


register(AlgorithmSpec("asgd", "Asynchronous SGD, learning rate divided by the update's staleness", ASGDConfig,
                       ps_nodes(partial(serve, AsyncServer), partial(worker, dense_update)),
                       "adacomp.txt Sec. V-B"))
register(AlgorithmSpec("comp_asgd", "ASGD pushing the largest c fraction of each update (selective SGD)",
                       CompASGDConfig,
                       ps_nodes(partial(serve, partial(AsyncServer, rule=comp_asgd_rule)),
                                partial(worker, global_top_c)),
                       "adacomp.txt Sec. V-B"), "comp-asgd")
register(AlgorithmSpec("adacomp", "Per-layer top-c updates with per-parameter staleness rates", AdaCompConfig,
                       ps_nodes(partial(serve, AdaCompServer), partial(worker, layer_top_c)),
                       "adacomp.txt Alg. 1-2, Eqs. 3-5"))
