"""The run's world: who computes how fast and when, over which network, beside what load, and who fails.

- ``profiles``: speed profiles (``cluster.hetero``).
- ``topology``: the network graph, routes and what a message costs; failed links.
- ``load``: co-running workloads and the max-min fair sharing of a node's resources.
- ``model``: ``World``, everything a backend asks about the environment, keyed by rank.
- ``build``: the one parser of the config's world settings; ``build(cfg, roles)`` makes the ``World``.

The runner builds one ``World`` per run and hands it to the backends and the trainer; config validation calls
the same builder. Nothing here imports the runtime or the algorithms: the algorithm's roles are handed in.
"""

from edgeml.world.build import build
from edgeml.world.model import World

__all__ = ["World", "build"]
