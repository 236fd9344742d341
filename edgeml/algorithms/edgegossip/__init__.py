"""EdgeGossip (Sec. 3: Eq. 1, Algorithms 1-2): GoSGD (``edgeml.algorithms.gosgd``, Sec. 2.1) with
three additions, one module each.

- ``aggregation``: the input data aggregator (Sec. 3.2, Eq. 1): class-wise reduction, division into subsets and
  one mean point per subset, with the phases' cost model (Table 3).
- ``predictor``: the load-driven performance predictor (Sec. 3.3): the slowdown RG(U) under co-running load.
- ``balancer``: the gossip training balancer (Algorithm 1: data ratios, failed platforms) and the accuracy-aware
  trainer's plan (Algorithm 2: subsets ranked by loss, batches).
- ``programs``: the platform node program that puts them together, its config and its registry entry.

Importing this package registers ``edgegossip``.
"""

from edgeml.algorithms.edgegossip import programs  # noqa: F401
