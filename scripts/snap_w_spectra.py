"""The weight matrices of a SNAP experiment's graphs side by side: for each seed's random graph (as a run of that
seed builds it), Eq. (24)'s W and the two problems' (SNAP Sec. IV-B, as ``snap.weights`` solves them): the
second-largest and smallest eigenvalues, the trace (the self-weights), how many eigenvalues lie above 0.9, the
step ``step = "bound"`` gives at ``--lr``, and how many iterations W alone (x <- W x, no gradient) takes to shrink a
class-sorted disagreement (the servers holding the positive class at 1, the others at 0) to a tenth and to a
hundredth of its largest entry. The numbers the SNAP report's Fig. 5 diagnoses cite.

    python scripts/snap_w_spectra.py --servers 60 --degree 2 --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse

import numpy as np

from edgeml.algorithms.snap.weights import eigenvalues, peer_weights
from edgeml.config import build_config
from edgeml.world.build import network


def mixing_time(W: np.ndarray, e0: np.ndarray, share: float, limit: int = 5000) -> int | None:
    """Iterations of e <- W e until max |e| is at most ``share`` of max |e0|; None past ``limit``."""
    e, top = e0.copy(), np.abs(e0).max()
    for k in range(1, limit + 1):
        e = W @ e
        if np.abs(e).max() <= share * top:
            return k
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servers", type=int, default=60)
    ap.add_argument("--degree", type=float, default=2.0)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    ap.add_argument("--lr", type=float, default=0.125, help="snap0.lr of the runs at step = 'bound'")
    ap.add_argument("--positive", type=float, default=0.22, help="share of servers holding the positive class")
    args = ap.parse_args()
    n = args.servers
    e0 = np.where(np.arange(n) < args.positive * n, 1.0, 0.0)
    e0 -= e0.mean()
    print("seed  W          lambda_2  lambda_min  trace  above 0.9  bound step  W alone to 1/10, 1/100")
    for s in args.seeds:
        cfg = build_config({"run": {"algorithm": "snap", "seed": s}, "cluster": {"workers": n},
                            "network": {"topology": "random", "degree": args.degree}}, paths=False)
        graph = network(cfg, {"worker": list(range(n))})  # the graph a run of this seed builds
        edges = tuple(sorted((min(u, v), max(u, v)) for u, v in graph.graph.edges))
        for kind in ("eq24", "problem23", "problem22"):
            W, _ = peer_weights(edges, n, kind, 1e-6)
            ev = eigenvalues(W)
            slow = int((ev[1:] > 0.9).sum())
            print(f"{s:<5} {kind:<10} {ev[1]:.5f}   {ev[-1]:+.4f}     {np.trace(W):5.2f}  {slow:>9}"
                  f"  {args.lr * (1 + ev[-1]):10.4f}  {mixing_time(W, e0, 0.1)}, {mixing_time(W, e0, 0.01)}")


if __name__ == "__main__":
    main()
