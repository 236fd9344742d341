"""Shared helpers for the test-suite: build and run simulated jobs in-process."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("EDGEML_CACHE", tempfile.mkdtemp(prefix="edgeml-test-cache-"))  # solved SNAP weights
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def pythonpath(*dirs) -> str:
    """PYTHONPATH for a subprocess: ``dirs`` first, then whatever the caller's environment already had."""
    return os.pathsep.join([*map(str, dirs), *filter(None, [os.environ.get("PYTHONPATH")])])


def simulate(*overrides: str):
    """Run a sim job in-process with ``overrides``; return (kernel, monitor, status, reason)."""
    from edgeml.config import load_config
    from edgeml.runtime.monitor import Monitor
    from edgeml.runtime.sim import Kernel
    from edgeml.runner import prepare

    cfg = load_config(overrides=["run.backend='sim'", *overrides])
    job, programs = prepare(cfg)
    monitor = Monitor(job)
    kernel = Kernel(job, programs, monitor)
    status, reason = kernel.run()
    return kernel, monitor, status, reason


@pytest.fixture
def sim():
    return simulate
