"""Shared helpers for the test-suite: build and run simulated jobs in-process."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

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


@pytest.fixture
def no_drawing(monkeypatch):
    """Figures planned (their data, names and captions, all that a report's text holds) but not drawn: each
    would-be file is written empty. For tests that compare text; the drawing itself is tested per kind of
    figure in tests/test_figure_kinds.py. Returns the figures that were to be drawn."""
    from edgeml.analysis.figures import PendingFigure

    planned: list = []

    def write(self) -> None:
        planned.append(self)
        self.file.png.parent.mkdir(parents=True, exist_ok=True)
        self.file.png.write_bytes(b"")
        if self.file.pdf:
            self.file.png.with_suffix(".pdf").write_bytes(b"")

    def draw(figures, processes: int = 1) -> None:  # nothing to draw: no processes to fork for it
        for f in figures:
            f.write()

    monkeypatch.setattr(PendingFigure, "write", write)
    monkeypatch.setattr("edgeml.analysis.figures.draw", draw)
    monkeypatch.setattr("edgeml.reproduce.render.draw", draw, raising=False)
    return planned


HOST_BOUND = {"test_procs", "test_faults", "test_contract", "test_contention", "test_interference",
              "test_environment_runtime", "test_reproduce_jobs", "test_reproduce_ray", "test_transport_auth",
              "test_full_disk", "test_output_folder", "test_cli_ux", "test_starter", "test_kept_runs"}
"""Modules whose tests start processes of their own (procs runs, reproductions side by side, Ray, interferers) or
time them: under pytest-xdist (the README's command runs on every core) they share one worker, one at a time,
so that no two of them compete for the cores beside the in-process tests."""
ORDERED = {"test_readme"}
"""Modules whose tests depend on their order (the README's commands, in turn, in one folder): one worker each."""


def group_of(nodeid: str) -> str:
    """The group a test runs in under pytest-xdist: ``host_bound``, its module for an ``ORDERED`` one, else its
    own id (any worker)."""
    module = nodeid.split("::", 1)[0].rpartition("/")[2].removesuffix(".py")
    return "host_bound" if module in HOST_BOUND else module if module in ORDERED else nodeid


CORES = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


@pytest.fixture(autouse=True)
def _one_core_beside_the_host_bound(request):
    """Under pytest-xdist, a test outside ``HOST_BOUND`` runs on one core (its worker's, by number) with every
    process it starts: however many it starts (a reproduction's jobs, a procs run, figures drawn side by side),
    the ``HOST_BOUND`` test on the other worker keeps the other cores. ``HOST_BOUND`` tests keep every core."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if len(CORES) < 2 or not worker.startswith("gw") or group_of(request.node.nodeid) == "host_bound":
        yield
        return
    os.sched_setaffinity(0, {CORES[int(worker[2:] or 0) % len(CORES)]})
    try:
        yield
    finally:
        os.sched_setaffinity(0, CORES)


@pytest.fixture(autouse=True)
def _alone_when_marked(request):
    """Under pytest-xdist, a test marked ``alone`` (it times the host: load thresholds, commit rates) runs with no
    other test beside it: it waits for the running ones to end and holds the others back until it ends. Every other
    test holds a shared lock while it runs; a gate taken first lets a waiting ``alone`` test in before new ones.
    Fixtures of a wider scope (module, session) are set up outside the lock: keep the timing in the test."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    try:
        import fcntl
    except ImportError:  # no flock (Windows): tests run side by side as scheduled
        fcntl = None
    if not run or fcntl is None:
        yield
        return
    base = Path(tempfile.gettempdir()) / f"edgeml-tests-{run}"
    alone = request.node.get_closest_marker("alone") is not None
    with open(f"{base}.gate", "a") as gate, open(f"{base}.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's scheduler, with each ``group_of`` sent whole to one worker, in order (xdist's own
    ``loadgroup`` reads groups from node ids that pytest 9.2 no longer lets a plugin change)."""
    from xdist.scheduler import LoadScopeScheduling

    if config.getvalue("dist") != "load":  # another mode asked for by name (--dist): xdist's own
        return None

    class Grouped(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return Grouped(config, log)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``matrix`` run only when ``-m`` names the marker (``-m matrix``): the default run keeps one
    representative of each such matrix, CI runs the rest. Tests marked ``snap_large`` (SNAP's weights on graphs
    of 80 and 100 servers, minutes each) run only when ``-m`` names them."""
    for marker in ("matrix", "snap_large"):
        if marker in (config.option.markexpr or ""):
            continue
        kept = [item for item in items if item.get_closest_marker(marker) is None]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker(marker)])
            items[:] = kept
