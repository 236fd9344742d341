"""TernGrad (Wen et al. 2017, SNAP's [19] and a baseline of its Sec. V): ternary gradients to the parameter
server at a peer of SNAP's PS scheme (``peer_ps``, ``edgeml/algorithms/snap/programs.py``).

Each layer of a gradient is clipped to ``clip`` standard deviations (2.5; 0: no clipping; TernGrad Sec. 3.3) and
ternarized stochastically, t = s sign(g) b with b ~ Bernoulli(|g| / s) (TernGrad Eq. 4, unbiased), s = the layer's
scaler max|g| (Sec. 3.1); with ``share_scalers`` the peers first send their scalers to the host, which returns the
largest per layer, so all use the same (TernGrad's scaler sharing; 4L bytes each way). Values travel as
``wire.ternary``, 2 bits each plus 4 bytes per layer; the model comes back in full precision (SNAP Sec. V:
TernGrad encodes the worker-to-server direction). The host's own gradient never travels, so it enters the
average unternarized and unclipped.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.algorithms.snap.programs import DenseGradients, PeerConfig, peer_nodes, ps_peer
from edgeml.schema import ranged

if TYPE_CHECKING:
    import torch

    from edgeml.runtime.base import Node


@dataclass
class TernGradConfig(PeerConfig):
    clip: float = ranged(2.5, ge=0, zero="no clipping, the scaler is max |g|")
    """Clip each layer's gradient to this many standard deviations before ternarizing (TernGrad's 2.5); 0: no
    clipping, the scaler is max |g|."""
    share_scalers: bool = True
    """Peers agree on each layer's scaler (the largest) through the host before ternarizing (scaler sharing)."""


def terngrad_scalers(g: torch.Tensor, spans: Sequence[tuple[int, int]],
                     clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(g clipped per layer to [-clip sigma, clip sigma], sigma the layer's standard deviation (no clipping with
    ``clip = 0``), and each layer's scaler max |clipped g|) (TernGrad Sec. 3.3 and 3.1)."""
    import torch

    g = g.detach().clone()
    scalers = torch.zeros(len(spans), dtype=torch.float32, device=g.device)
    for i, (offset, n) in enumerate(spans):
        part = g[offset:offset + n]
        if clip > 0 and n > 1:
            bound = clip * float(part.std())
            part.clamp_(-bound, bound)
        scalers[i] = part.abs().max() if n else 0.0
    return g, scalers


def ternarize(g: torch.Tensor, scalers: torch.Tensor, spans: Sequence[tuple[int, int]],
              gen: torch.Generator) -> torch.Tensor:
    """TernGrad's stochastic ternarization (Eq. 4): sign(g) b with b ~ Bernoulli(|g| / s) per entry, s its layer's
    scaler (at least the layer's max |g|, so s sign(g) b is unbiased); returns the signs -1, 0, +1 (float32)."""
    import torch

    s = torch.repeat_interleave(scalers.to(g), torch.tensor([n for _, n in spans], device=g.device))
    p = torch.where(s > 0, g.abs() / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(s))
    keep = torch.rand(g.numel(), generator=gen, dtype=g.dtype).to(g.device) < p  # one stream on every device
    return (torch.sign(g) * keep).to(torch.float32)


class TernaryGradients(DenseGradients):
    """``ps_peer``'s gradients as TernGrad sends them: clipped, scalers shared through the host, ternarized."""

    def agree(self, node: Node, trainer, others: list[int]) -> None:
        """The host's part of scaler sharing: the largest of every peer's scalers (its own included), per layer."""
        import torch

        cfg = node.algo
        if cfg.share_scalers:
            _, own = terngrad_scalers(trainer.grad, trainer.spans, cfg.clip)
            shared = torch.stack([own, *(node.recv(r, "scalers")["scalers"] for r in others)]).amax(0)
            for r in others:
                node.send(r, "shared", detour=True, scalers=shared)

    def encode(self, node: Node, trainer, host: int) -> dict[str, Any]:
        from edgeml.runtime import wire

        cfg = node.algo
        spans = trainer.spans
        clipped, scalers = terngrad_scalers(trainer.grad, spans, cfg.clip)
        if cfg.share_scalers:
            node.send(host, "scalers", detour=True, scalers=scalers)
            scalers = node.recv(host, "shared")["scalers"]
        return wire.ternary(ternarize(clipped, scalers, spans, node.gen), scalers, spans)

    def decode(self, data: dict[str, Any], trainer) -> torch.Tensor:
        from edgeml.runtime import wire

        return wire.ternary_decode(data, trainer.spans)


register(AlgorithmSpec("terngrad", "TernGrad: ternary gradients (2 bits, per-layer scalers) to a PS at a peer",
                       TernGradConfig, peer_nodes(functools.partial(ps_peer, gradients=TernaryGradients())),
                       "SNAP Sec. V [19]", display="TernGrad"))
