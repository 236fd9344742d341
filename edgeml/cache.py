"""Where edgeml keeps what it can fetch or compute again: ``$EDGEML_CACHE``, default ``~/.cache/edgeml``.

Downloaded data sets go to ``<root>/<name>`` (``edgeml.data``) and SNAP's solved weight matrices to
``<root>/snap-weights`` (``edgeml.algorithms.snap.weights``). Deleting any of it only costs the time to fetch or
solve it again.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$EDGEML_CACHE`` when set and not empty, else ``~/.cache/edgeml``."""
    return Path(os.environ.get("EDGEML_CACHE") or Path.home() / ".cache" / "edgeml").expanduser()


def cache_dir(name: str) -> Path:
    """The folder for one kind of cached thing (a data set's name, ``snap-weights``), not created here."""
    return cache_root() / name
