"""The shipped algorithms, registered by importing their modules; plugins named in ``EDGEML_PLUGINS`` add more.

The registry itself lives in ``edgeml.algorithms.registry`` (re-exported here; algorithm modules import it,
never this package); the parameter-server kit the PS algorithms share lives in ``edgeml.algorithms.kit``.
Algorithm modules import torch only inside node programs, so importing them (config validation, ``edgeml
list``) stays fast.
"""

from edgeml.algorithms.registry import (ALIASES, REGISTRY, AlgorithmSpec, display_name, get_algorithm, load_plugins,
                                        register)
# they register what they define
from edgeml.algorithms import ps, adsp, adacomm, adacomp, esync, snap, terngrad, gosgd, edgegossip  # noqa: F401,E402

BUILTIN: tuple[str, ...] = tuple(REGISTRY)
"""The algorithms edgeml ships (plugins and tests register more)."""

__all__ = ["ALIASES", "BUILTIN", "REGISTRY", "AlgorithmSpec", "display_name", "load_plugins", "get_algorithm",
           "register"]

load_plugins()
