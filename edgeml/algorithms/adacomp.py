"""AdaComp, ASGD and Comp-ASGD: compressed asynchronous updates with per-parameter staleness (Hardy, Le Merrer
and Sericola, IEEE NCA 2017; AdaComp), on the parameter-server kit (``kit.py``).

A worker pulls Theta with its version (timestamp) j, computes one mini-batch gradient dTheta, compresses it and
pushes it tagged with j (a failure point). The PS applies every push on arrival (a new version each) and
answers the worker with the current Theta and its version. The three algorithms differ in what is pushed and
in the learning rate the PS applies (alpha = ``lr``):

- **AdaComp** (Alg. 1-2): the worker keeps the largest c fraction, by absolute value, of each weight matrix
  and bias vector separately (Alg. 1 line 15, ``top_c`` over ``Trainer.spans``, ``adacomp_compression.py``).
  For each received entry k the PS computes sigma_k = the number of updates applied since j that touched k
  (Eq. 3, ``adacomp_staleness.py``) and applies Theta_k -= alpha_k dTheta_k with alpha_k = alpha / sigma_k, or
  alpha when sigma_k = 0 (Eqs. 4-5).
- **ASGD** (Sec. V-B, [17]): dense updates; Theta -= alpha / sigma dTheta with sigma the update's staleness
  (the versions made since its worker pulled), alpha when sigma = 0.
- **Comp-ASGD** (Sec. V-B, Shokri and Shmatikov's selective SGD [11]): the largest c fraction of the *whole*
  update, with ASGD's rate alpha / sigma.

Wire: AdaComp, Comp-ASGD and ASGD push the encodings of ``adacomp_compression.py`` and the version j (one
scalar, 8 bytes); every reply is the model and its version, 4P + 8 bytes for P parameters. The PS's ingress is
``ps_ingress_bytes`` in evals.csv.

Choices where the paper is open:

- *What touches a parameter*: an applied entry whose value is non-zero (Eq. 3's indicator), so a kept zero
  changes nothing and counts for nothing.
- *dTheta and alpha*: dTheta is the plain mini-batch gradient (Alg. 1 line 11); alpha is applied at the PS
  (Eq. 4), constant (the paper gives neither its value nor a schedule); no momentum.
- *The baselines' rate*: Sec. V-B says only that "the learning rate is divided by staleness and is global to
  each update"; we read it as Eq. 5 with the update's staleness sigma (versions made since the worker's pull),
  alpha at sigma = 0. ``staleness_aware = false`` turns the division off (for all three algorithms): plain
  asynchronous SGD, as other papers run ASGD, and an ablation of Eq. 5 for AdaComp.
- *The first push*: every worker starts from Theta(0), the run's common initial model, as pulled at j = 0.
- *Staleness*: counted over exactly the updates j .. i-1 (Eq. 3), whatever the delay; history older than
  every outstanding pull is dropped (``adacomp_staleness.py``: exact, in bounded memory). (The authors' public
  code counted over the whole history when the delay was 0, and its top-c loops crash; we implement the
  paper's definitions.) The PS cannot tell a crashed worker from a slow one, so a crashed worker's pull stays
  outstanding.
- *Stabilisers*: the paper names none, and none is on by default. ``warmup`` (all three methods) ramps alpha up
  linearly over the first updates; ``rate_cap`` (AdaComp) bounds each entry's rate alpha / sigma_k by a
  multiple of the update's rate alpha / sigma, so that an entry no other update touched cannot step much
  further than ASGD would (1: the update's rate for every entry; with c = 1, ASGD exactly).
- *Update order*: arrival order at the PS. The paper's platform added a random wait between computation and
  push (Sec. V-A); here ``cluster.random_wait_s`` does (``node.push`` sleeps it), with device speeds and links.

Time series: ``staleness`` (kit: one row per update, the global staleness); ``staleness_hist`` every
``log_every`` updates and at the end: cumulative histograms (``updates``, ``kind`` = global or parameter,
bins [``lo``, ``hi``] = 0, 1, 2-3, 4-7, ..., ``count``) of the global staleness of each update and, for
AdaComp, of sigma_k of each received entry; ``ps_memory`` (AdaComp, same times): ``bytes`` of the history,
its ``bound_bytes`` by the bound of ``adacomp_staleness.py``, the ``window`` d and the ``segments`` kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Callable

from edgeml.algorithms.adacomp_compression import dense_update, global_top_c, keep_count, layer_top_c
from edgeml.algorithms.adacomp_staleness import Histogram, TouchHistory
from edgeml.algorithms.kit import Pack, ParameterServer, ps_nodes, ps_worker, serve_async
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.schema import ranged

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Message, Node


# ------------------------------------------------------------------------------------------ configuration


@dataclass
class ASGDConfig:
    lr: float = ranged(0.05, gt=0)
    """Learning rate alpha: the PS applies Theta -= alpha / sigma * dTheta, dTheta being a worker's mini-batch
    gradient and sigma its staleness (alpha when sigma = 0; for AdaComp sigma_k per entry, Eqs. 4-5)."""
    log_every: int = ranged(1000, ge=1)
    """PS updates between two writes of the ``staleness_hist`` (and AdaComp's ``ps_memory``) series; one more
    write at the end of the run."""
    staleness_aware: bool = True
    """Divide alpha by the staleness (Eq. 5; the update's for ASGD and Comp-ASGD, Sec. V-B, each entry's sigma_k
    for AdaComp). Off, every update gets the plain alpha: ASGD as ESync runs it, and for AdaComp or
    Comp-ASGD an ablation of the staleness rate."""
    warmup: int = ranged(0, ge=0)
    """A stabiliser the paper does not name (0, off, is the paper's rule): the PS's alpha rises linearly over its
    first ``warmup`` updates, alpha (v + 1) / warmup at update v (counted from 0), then stays alpha."""

    def eta(self, num_workers: int) -> float:
        """The kit's global rate: alpha itself (workers push raw gradients)."""
        return self.lr


@dataclass
class CompASGDConfig(ASGDConfig):
    c: float = ranged(0.01, gt=0, le=1)
    """Compression ratio c: a push keeps the floor(c P) largest entries (by absolute value, at least one) of
    the whole update of P entries."""


@dataclass
class AdaCompConfig(ASGDConfig):
    c: float = ranged(0.01, gt=0, le=1)
    """Compression ratio c: a push keeps the floor(c n) largest entries (by absolute value, at least one) of
    each weight matrix and bias vector of n entries (AdaComp Alg. 1 line 15)."""
    rate_cap: float = ranged(0.0, ge=0)
    """A stabiliser the paper does not name (0, off, is Eq. 5): each entry's rate alpha_k is at most ``rate_cap``
    times the update's rate alpha / sigma (ASGD's, sigma the update's staleness). 1 gives every entry the
    update's rate (sigma_k <= sigma; at c = 1, ASGD)."""


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


def adacomp_update(W, history, spans, src: int, data, alpha: float, aware: bool = True, *, cap: float = 0.0,
                   staleness: int = 0) -> torch.Tensor:
    """Apply one AdaComp push ``data`` (each layer's kept entries) from worker ``src`` to ``W`` in place: sigma_k
    of each kept entry from the touch ``history`` (Eq. 3), each entry at its rate alpha / sigma_k (Eqs. 4-5; at
    most ``cap`` times the update's rate for its global ``staleness``, when ``cap`` > 0), then the touched
    entries recorded. Returns the sigma_k. The PS's step, and what the benchmark times."""
    from edgeml.runtime import wire

    index, values = wire.sparse_layers_decode(data, spans)
    sigma = history.sigma(src, index)
    rate = staleness_rate(alpha, sigma, aware)
    if cap > 0:
        most = cap * staleness_rate(alpha, staleness, aware)
        rate = rate.clamp(max=most) if aware else min(rate, most)
    W.index_add_(0, index, values * rate, alpha=-1.0)
    history.record(index[values != 0])
    return sigma


def asgd_rule(ps: ParameterServer, msg: Message, staleness: int) -> None:
    """Theta -= alpha / sigma * dTheta, alpha when sigma = 0 (AdaComp Sec. V-B)."""
    from edgeml.runtime import wire

    rate = staleness_rate(ps.alpha(), staleness, ps.node.algo.staleness_aware)
    # the product rounded before the subtraction, as in AdaComp's update: add_(alpha=) is one fused multiply-add
    # on CPUs with vector units and two roundings elsewhere, which would make the last bit depend on the CPU
    ps.W.sub_(wire.dense_decode(msg.data) * rate)


def comp_asgd_rule(ps: ParameterServer, msg: Message, staleness: int) -> None:
    """ASGD's rate on the entries a sparse update carries."""
    from edgeml.runtime import wire

    index, values = wire.sparse_decode(msg.data)
    rate = staleness_rate(ps.alpha(), staleness, ps.node.algo.staleness_aware)
    ps.W.index_add_(0, index, values, alpha=-rate)


class AsyncServer(ParameterServer):
    """The PS of ASGD and Comp-ASGD (given their rule): replies carry the version, the global staleness of
    every update goes into a histogram written every ``log_every`` updates."""

    def __init__(self, node: Node, rule=asgd_rule):
        super().__init__(node, rule)
        self.staleness_hist = Histogram()
        self.reported = -1

    def alpha(self) -> float:
        """The rate of this update (version v): alpha, or its linear warm-up ``warmup``."""
        warmup = self.node.algo.warmup
        return self.eta * min(1.0, (self.version + 1) / warmup) if warmup else self.eta

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
    """AdaComp Alg. 2: per-parameter staleness sigma_k (Eq. 3) and rates alpha / sigma_k (Eqs. 4-5)."""

    def __init__(self, node: Node):
        super().__init__(node)
        self.spans = layer_spans(node.job)
        self.kept = sum(keep_count(node.algo.c, n) for _, n in self.spans)
        size = self.W.numel()
        self.history = TouchHistory(size, -(-size // self.kept), self.workers, self.W.device)
        self.sigma_hist = Histogram()

    def step(self, msg: Message, staleness: int) -> None:
        # Alg. 2 line 4: the push names the version it was computed on, the one this worker last pulled
        assert msg["version"] == self.pulled[msg.src], "a push computed on a model its worker never pulled"
        algo = self.node.algo
        sigma = adacomp_update(self.W, self.history, self.spans, msg.src, msg.data, self.alpha(),
                               algo.staleness_aware, cap=algo.rate_cap, staleness=staleness)
        self.sigma_hist.add(sigma)

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


def pulled_version(loss: float, reply: Message | None) -> dict[str, Any]:
    """A push's field besides the update: the version j of the model its gradient was computed on, the one the
    PS last returned (0, Theta(0), before the first reply)."""
    return {"version": reply["version"] if reply is not None else 0}


def worker(pack: Pack, node: Node) -> None:
    """AdaComp Alg. 1: compute a mini-batch gradient on the model of version j, push ``pack`` of it tagged
    with j (a failure point), continue from the model and version the PS returns (the kit's ``ps_worker``, the
    gradient unscaled: the PS applies alpha)."""
    ps_worker(node, pack, scaled=False, fields=pulled_version)


register(AlgorithmSpec("asgd", "Asynchronous SGD, learning rate divided by the update's staleness", ASGDConfig,
                       ps_nodes(partial(serve, AsyncServer), partial(worker, dense_update)),
                       "AdaComp Sec. V-B", display="ASGD"))
register(AlgorithmSpec("comp_asgd", "ASGD pushing the largest c fraction of each update (selective SGD)",
                       CompASGDConfig,
                       ps_nodes(partial(serve, partial(AsyncServer, rule=comp_asgd_rule)),
                                partial(worker, global_top_c)),
                       "AdaComp Sec. V-B", display="Comp-ASGD"), "comp-asgd")
register(AlgorithmSpec("adacomp", "Per-layer top-c updates with per-parameter staleness rates", AdaCompConfig,
                       ps_nodes(partial(serve, AdaCompServer), partial(worker, layer_top_c)),
                       "AdaComp Alg. 1-2, Eqs. 3-5", display="AdaComp"))
