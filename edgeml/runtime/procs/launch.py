"""Start a procs run on this machine and supervise it: the monitor and the nodes as child processes.

Every process gets its own listening socket, bound to 127.0.0.1 before it starts, every rank's address and the
run's secret, drawn here at random (with its other arguments, over a pipe: not on a command line, not in the
environment), so no rendezvous service is needed, nothing listens beyond loopback, and a process that does not
know the secret is refused by every rank. The launcher then watches: a node process that dies is reported to the
monitor with its exit code (which fails the run), Ctrl-C or SIGTERM stops the run in order, and if the monitor
itself dies the launcher records the end in ``meta.json``. Children are killed if the launcher dies
(``PR_SET_PDEATHSIG``; the monitor is told instead and finishes the run directory), so nothing outlives a run.
"""

from __future__ import annotations

import queue
import time
from pathlib import Path

import torch.multiprocessing as mp

from edgeml.rundir import RunWriter
from edgeml.runtime.procs.monitor import exit_text, monitor_main
from edgeml.runtime.procs.node import node_main
from edgeml.runtime.procs.transport import loopback_endpoints


def run_local(job, programs: list, path: Path, progress, preload: tuple[str, ...] = ()) -> tuple[str, str]:
    """Run ``job``'s node ``programs`` (role, program) with one process per node on this machine, the monitor
    showing ``progress()`` (a picklable factory of the progress display), every node importing ``preload``
    before the clock starts; returns (status, reason)."""
    world = len(programs) + 1
    endpoints = loopback_endpoints(world)  # with a fresh secret, shared by this run's processes only
    # a fork server imports torch and edgeml once, then forks each node from that clean state: starting N
    # processes costs one import instead of N (fork from this process is unsafe once threads exist)
    ctx = mp.get_context("forkserver")
    # (the programs are pickled to each child: a plugin's module is imported there by name when unpickled)
    ctx.set_forkserver_preload(["edgeml.runtime.forkserver", "edgeml.runtime.procs.launch"])
    control, result = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=monitor_main, args=(endpoints[0], job, programs, str(path), progress, control,
                                                    result), daemon=False)]
    procs += [ctx.Process(target=node_main, args=(endpoints[r], job, programs), kwargs={"preload": preload},
                          daemon=False) for r in range(1, world)]
    for p in procs:
        p.start()
    for e in endpoints:
        e.listener.close()  # each child has its own copy
    interrupted, outcome = False, None
    try:
        outcome = _supervise(procs, control, result)
    except KeyboardInterrupt:
        interrupted = True
        control.put(("interrupt",))
        outcome = _outcome(procs[0], result, within=20)
    finally:
        deadline = time.monotonic() + 10
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if outcome is None:  # the monitor died before it could finish the run directory: record the end at least
        outcome = ("interrupted", "interrupted by the user") if interrupted else \
            ("failed", f"the monitor process died with {exit_text(procs[0].exitcode)}")
        writer = RunWriter.attach(path)
        writer.close()
        writer.write_meta(status=outcome[0], stop_reason=outcome[1])
    if interrupted:
        raise KeyboardInterrupt
    return outcome


def _outcome(monitor, result, within: float) -> tuple[str, str] | None:
    """The monitor's (status, reason) once it reports it, while it lives."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            return result.get(timeout=0.1)
        except queue.Empty:
            if not monitor.is_alive():
                try:
                    return result.get(timeout=1.0)
                except queue.Empty:
                    return None
    return None


def _supervise(procs, control, result) -> tuple[str, str] | None:
    """The monitor's outcome, or None if it died without one; meanwhile report dead node processes to it."""
    reported: set[int] = set()
    while True:
        try:
            return result.get(timeout=0.1)
        except queue.Empty:
            pass
        if not procs[0].is_alive():
            return _outcome(procs[0], result, within=1.0)
        for r, p in enumerate(procs[1:], start=1):
            if r not in reported and p.exitcode not in (None, 0):
                reported.add(r)
                control.put(("died", r, p.exitcode))
