"""Running a reproduction's runs side by side on this machine (``--jobs N``): one child process per run, never
more cores busy than ``N``.

Cores are reserved, not guessed: a sim run reserves ``run.threads`` cores (1 by default); a procs run as many as
it has processes, its node processes plus the monitor (``len(get_algorithm(algorithm).nodes(cfg)) + 1``). A
reservation is capped at ``N``, so a procs run larger than the machine still runs, alone. The scheduler walks the
runs in the plan's order and starts each one whose reservation fits in the cores free now; it starts nothing
else until a run ends and frees its cores. ``N`` defaults to this machine's cores (``default_jobs``).

Each run is a ``multiprocessing`` child started with "spawn" (a fresh interpreter, not a daemon: a procs run
starts processes of its own), in its own process group, so a Ctrl-C at the terminal reaches the driver alone,
which passes it to every running child once (a run stops in order, as ``edgeml run`` does on Ctrl-C), waits for
them, kills what is left, and re-raises; finished runs stay. A child dies with the driver (``PR_SET_PDEATHSIG``)
so a killed driver leaves no run going; ``--resume`` then runs what did not finish. The results are those of a
serial reproduction: the same run directories (each run's config fixes its threads and seeds), recorded in the
plan's order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from multiprocessing.connection import wait
from typing import Callable

from edgeml.reproduce.plan import PlannedRun

STOP_WITHIN_S = 40.0
"""How long an interrupted child may take to stop in order (a procs run waits up to 30 s for its nodes)."""


def default_jobs() -> int:
    """This machine's cores (those this process may run on)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def needed_cores(cfg) -> int:
    """The cores a run keeps busy: a procs run's processes (its nodes and the monitor), a sim run's threads."""
    if cfg.run.backend == "procs":
        from edgeml.algorithms import get_algorithm

        return len(get_algorithm(cfg.run.algorithm).nodes(cfg)) + 1
    return max(1, cfg.run.threads)


def reservation(cfg, jobs: int) -> int:
    """The cores the scheduler reserves for a run: ``needed_cores``, at least 1 and at most ``jobs``."""
    return max(1, min(needed_cores(cfg), jobs))


def _child(run_one: Callable, args: tuple, conn) -> None:
    """A run's own process: stop in order on SIGINT or SIGTERM, die with the driver, send back the failure
    reason (None: the run finished)."""
    os.setpgid(0, 0)  # the terminal's Ctrl-C goes to the driver, which passes it on once
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the driver's own clean-up still applies
        pass
    if os.getppid() == 1:  # the driver died before the line above
        os._exit(1)

    def terminate(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, terminate)
    try:
        conn.send(("done", run_one(*args)))
    except KeyboardInterrupt:
        conn.send(("interrupted", "interrupted by the user"))
    finally:
        conn.close()


def run_parallel(items: list[tuple[int, PlannedRun, object]], jobs: int, run_one: Callable[..., str | None],
                 args_for: Callable[[int], tuple], on_start: Callable[[int], None],
                 on_end: Callable[[int, str | None], None], on_tick: Callable[[int], None]) -> None:
    """Run ``items`` (index, planned run, config) in child processes, at most ``jobs`` cores reserved at once.

    ``run_one(*args_for(index))`` runs in the child and returns the failure reason (None when the run finished);
    ``on_start(index)`` and ``on_end(index, reason)`` are called in the driver as each run starts and ends
    (reason: also when the child died without one), ``on_tick(running)`` about once a second."""
    ctx = mp.get_context("spawn")
    pending = [(k, reservation(cfg, jobs)) for k, _, cfg in items]
    running: dict[int, tuple[mp.Process, object, int]] = {}  # index -> (process, connection, cores)
    free = jobs
    try:
        while pending or running:
            for k, cores in list(pending):
                if cores <= free:
                    receive, send = ctx.Pipe(duplex=False)
                    proc = ctx.Process(target=_child, args=(run_one, args_for(k), send), daemon=False)
                    on_start(k)
                    proc.start()
                    send.close()
                    running[k] = (proc, receive, cores)
                    pending.remove((k, cores))
                    free -= cores
            on_tick(len(running))
            ready = wait([proc.sentinel for proc, _, _ in running.values()], timeout=1.0)
            for k, (proc, receive, cores) in list(running.items()):
                if proc.sentinel in ready:
                    proc.join()
                    on_end(k, _result(proc, receive))
                    del running[k]
                    free += cores
    except KeyboardInterrupt:
        _stop(running)
        raise
    finally:
        for proc, _, _ in running.values():  # an error in the driver: no run goes on without it
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


def _result(proc: mp.Process, receive) -> str | None:
    """The failure reason a child sent (None: finished), or why it sent none."""
    try:
        if receive.poll():
            kind, reason = receive.recv()
            return reason if kind == "done" else f"KeyboardInterrupt: {reason}"
    except (EOFError, OSError):
        pass
    finally:
        receive.close()
    code = proc.exitcode
    how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return f"the run's process died with {how} (EDGEML_DEBUG=1 shows a traceback)"


def _stop(running: dict[int, tuple[mp.Process, object, int]]) -> None:
    """Pass the interrupt to every running child once, wait for them to stop in order, kill what is left."""
    for proc, _, _ in running.values():
        if proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_WITHIN_S
    for proc, _, _ in running.values():
        while proc.is_alive() and time.monotonic() < deadline:
            try:
                proc.join(timeout=0.2)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
                deadline = 0.0
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
    running.clear()
