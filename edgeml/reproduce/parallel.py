"""Running a reproduction's runs side by side on this machine (``--jobs N``): runs in worker processes, never
more cores busy than ``N``.

Cores are reserved, not guessed: a sim run reserves ``run.threads`` cores (1 by default); a procs run as many as
it has processes, its node processes plus the monitor (``len(get_algorithm(algorithm).nodes(cfg)) + 1``). A
reservation is capped at ``N``, so a procs run larger than the machine still runs, alone. The scheduler walks the
runs in the plan's order and starts each one whose reservation fits in the cores free now; it starts nothing
else until a run ends and frees its cores. ``N`` defaults to this machine's cores (``default_jobs``).

Runs go to worker processes (``multiprocessing`` children, not daemons: a procs run starts processes of its
own), at most one per core: forked from the driver before the runs start where that is safe, with torch and
edgeml imported, else fresh interpreters ("spawn") that import them (``start_workers``). Each then runs one run
at a time, as the driver does with ``--jobs 1``: a fresh interpreter per run spent seconds of CPU on imports
each time. A worker is in its own process group, so a Ctrl-C at the terminal
reaches the driver alone, which passes it to every worker running a run once (a run stops in order, as ``edgeml
run`` does on Ctrl-C), waits for them, kills what is left, and re-raises; finished runs stay. A worker that dies
fails its run only; another takes its place. Workers die with the driver (``PR_SET_PDEATHSIG``), so a killed
driver leaves no run going; ``--resume`` then runs what did not finish. The results are those of a serial
reproduction: the same run directories (each run's config fixes its threads and seeds), recorded in the plan's
order.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from multiprocessing.connection import wait
from typing import Callable

from edgeml.errors import interrupt_within
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


class _Worker:
    """A long-lived run process: it imports torch and edgeml once, then runs one planned run at a time as the
    driver sends them (as ``--jobs 1`` runs them one after another in the driver). A fresh interpreter per run
    spent seconds of CPU on imports each time, which side-by-side runs of a few seconds could not afford."""

    def __init__(self, ctx):
        self.conn, child_conn = ctx.Pipe(duplex=True)
        _DRIVER_ENDS.add(self.conn)
        self.proc = ctx.Process(target=_serve, args=(child_conn,), daemon=False)
        self.proc.start()
        child_conn.close()
        self.run: int | None = None  # the plan index it runs now
        self.cores = 0
        self.ended = False  # it will take no more runs (it died, or stopped on an interrupt)

    def start(self, k: int, cores: int, run_one: Callable, args: tuple) -> None:
        self.run, self.cores = k, cores
        self.conn.send((run_one, args))

    def result(self) -> str | None:
        """The failure reason it sent for its run (None: finished), or why it sent none; frees it."""
        reason = None
        try:
            kind, reason = self.conn.recv()
            if kind != "done":
                reason, self.ended = f"KeyboardInterrupt: {reason}", True
        except (EOFError, OSError):
            self.ended = True
            self.proc.join(timeout=5)
            code = self.proc.exitcode
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            reason = f"the run's process died with {how} (EDGEML_DEBUG=1 shows a traceback)"
        self.run = None
        return reason

    def close(self) -> None:
        """End it: an idle worker exits when its pipe closes; one that does not within a few seconds is killed."""
        _DRIVER_ENDS.discard(self.conn)
        self.conn.close()
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)


_DRIVER_ENDS: set = set()
"""The driver's ends of its workers' pipes. A forked worker closes its copies of them first: a pipe reads as
closed only once every copy of its other end is, so a worker that kept one would never see the driver end it."""


def _serve(conn) -> None:
    """A worker's loop: stop a run in order on SIGINT or SIGTERM, die with the driver, send back each run's
    failure reason (None: the run finished); exit when the driver closes the pipe."""
    for end in _DRIVER_ENDS:  # (empty in a spawned worker)
        end.close()
    _DRIVER_ENDS.clear()
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
        import edgeml.runner  # noqa: F401  (torch and edgeml, while the driver starts other workers)

        while True:
            try:
                run_one, args = conn.recv()
            except (EOFError, OSError):  # the driver closed its end, or died with the pipe unread
                return
            try:
                reply = ("done", run_one(*args))
            except KeyboardInterrupt:
                reply = ("interrupted", "interrupted by the user")
            try:
                conn.send(reply)
            except OSError:  # the driver is gone: nobody to tell
                return
            if reply[0] == "interrupted":
                return
    except KeyboardInterrupt:  # between runs: nothing to report
        return
    finally:
        conn.close()


def start_workers(n: int) -> list[_Worker]:
    """``n`` workers, started before the reproduction shows its progress; ``run_parallel`` takes them over and
    ``close_workers`` ends those it never got.

    On Linux, while this process runs no other thread, they are forked from it once it has imported what a run
    needs (torch and edgeml, which the driver imports anyway to plan the runs' cores): each starts at once, where
    a fresh interpreter spends seconds importing them, seconds a reproduction of short runs could not spare. (A
    fork while a thread runs, such as the progress display's, could copy a lock that thread holds; the workers
    started later, to replace one that died, are spawned.)"""
    import sys
    import threading

    ctx = mp.get_context("spawn")
    if sys.platform.startswith("linux") and threading.active_count() == 1:
        import edgeml.runner  # noqa: F401  (inherited by every worker)

        ctx = mp.get_context("fork")
    return [_Worker(ctx) for _ in range(n)]


def close_workers(workers: list[_Worker]) -> None:
    """End workers that ran nothing (a reproduction that stopped before its runs, on bad input say): at once,
    even one still importing."""
    for w in workers:
        _DRIVER_ENDS.discard(w.conn)
        w.conn.close()
        if w.proc.is_alive():
            w.proc.kill()
        w.proc.join(timeout=5)


def run_parallel(items: list[tuple[int, PlannedRun, object]], jobs: int, run_one: Callable[..., str | None],
                 args_for: Callable[[int], tuple], on_start: Callable[[int], None],
                 on_end: Callable[[int, str | None], None], on_tick: Callable[[int], None],
                 started: list[_Worker] | None = None) -> None:
    """Run ``items`` (index, planned run, config) in worker processes, at most ``jobs`` cores reserved at once.

    ``run_one(*args_for(index))`` runs in a worker and returns the failure reason (None when the run finished);
    ``on_start(index)`` and ``on_end(index, reason)`` are called in the driver as each run starts and ends
    (reason: also when the worker died without one; a new worker takes its place), ``on_tick(running)`` about
    once a second. Workers are the ``started`` ones (``start_workers``), then more started as runs need them,
    at most one per reserved core; all are ended on return."""
    ctx = mp.get_context("spawn")
    pending = [(k, reservation(cfg, jobs)) for k, _, cfg in items]
    workers: list[_Worker] = list(started or [])
    free = jobs
    try:
        while pending or any(w.run is not None for w in workers):
            for k, cores in list(pending):
                if cores <= free:
                    idle = next((w for w in workers if w.run is None), None)
                    if idle is None:
                        idle = _Worker(ctx)
                        workers.append(idle)
                    on_start(k)
                    idle.start(k, cores, run_one, args_for(k))
                    pending.remove((k, cores))
                    free -= cores
            busy = [w for w in workers if w.run is not None]
            on_tick(len(busy))
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=1.0)
            for w in busy:
                if w.conn in ready or w.proc.sentinel in ready:
                    k, cores = w.run, w.cores
                    on_end(k, w.result())
                    free += cores
                    if w.ended:  # a new worker takes its place when a run needs one
                        w.close()
                        workers.remove(w)
    except BaseException as exc:  # a Ctrl-C, or one that came back wrapped (a class made as a module imported)
        interrupt = interrupt_within(exc)
        if interrupt is None:
            raise
        _stop([w for w in workers if w.run is not None])
        raise interrupt from None
    finally:
        for w in workers:  # idle ones exit as their pipe closes; an error in the driver: no run goes on without it
            w.close()


def _stop(busy: list[_Worker]) -> None:
    """Pass the interrupt to every worker running a run once, wait for them to stop in order, kill what is left."""
    for w in busy:
        if w.proc.is_alive():
            try:
                os.kill(w.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + STOP_WITHIN_S
    for w in busy:
        while w.proc.is_alive() and time.monotonic() < deadline:
            try:
                w.proc.join(timeout=0.2)
            except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
                deadline = 0.0
        if w.proc.is_alive():
            w.proc.kill()
            w.proc.join(timeout=5)
