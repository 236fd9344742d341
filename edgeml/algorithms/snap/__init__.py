"""SNAP: decentralized EXTRA with an optimized weight matrix and selective parameter exchange, and
the baselines of its evaluation (Sec. V): SNAP-0, SNO and a parameter server at a peer.

- ``weights``: the weight matrix W, Eq. (24) and the optimized one of problems (21)-(23) (Sec. IV-B).
- ``ape``: the selective exchange, the APE threshold of Sec. IV-C, Algorithm 1 and Eqs. (25)-(27).
- ``programs``: EXTRA (Eqs. 6-8, Sec. IV-A) per peer on a round clock (Sec. II-B, IV-D), the PS scheme at a peer
  (Sec. V), their configs and the algorithms ``snap``, ``snap0``, ``sno`` and ``peer_ps`` (registered on import).

TernGrad, SNAP's other baseline ([19]), runs on the PS at a peer: ``edgeml/algorithms/terngrad.py``.
"""

from edgeml.algorithms.snap.ape import APESchedule, changed, send_bound
from edgeml.algorithms.snap.programs import (DenseGradients, ExchangeConfig, PeerConfig, SNAP0Config, SNAPConfig,
                                             exchange_peer, extra, peer_step, ps_host, ps_peer)
from edgeml.algorithms.snap.weights import (choose_weights, eigenvalues, initial_weights, optimal_weights, prune,
                                            second_largest)

__all__ = ["APESchedule", "DenseGradients", "ExchangeConfig", "PeerConfig", "SNAP0Config", "SNAPConfig", "changed",
           "choose_weights", "eigenvalues", "exchange_peer", "extra", "initial_weights", "optimal_weights",
           "peer_step", "prune", "ps_host", "ps_peer", "second_largest", "send_bound"]
