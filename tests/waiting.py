"""Waiting for what a test caused (a file written, a line printed, processes gone) until it happens, with a
generous deadline, instead of sleeping a fixed time: a busy host delays the event but never fails the test by a
wait that was too short, and an idle one does not wait longer than the event takes."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from typing import Any, Callable

import psutil

PATIENCE = 240.0
"""Seconds to wait for an event that takes a few seconds on an idle host: a 2-core host loaded by other test
runs and a CPU hog can take ten times as long; a deadline this far only ends a test that would hang."""


def wait_for(condition: Callable[[], Any], what: str, within: float = PATIENCE,
             process: subprocess.Popen | None = None, every: float = 0.1) -> Any:
    """``condition()``'s first true value, polled every ``every`` s; an AssertionError naming ``what`` when
    ``within`` s pass first, or when ``process`` (the one that should cause it) ends first."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            value = condition()  # it may have happened just before the process ended
            if value:
                return value
            raise AssertionError(f"waiting for {what}: the process ended first (exit code {process.returncode})")
        if time.monotonic() > deadline:
            raise AssertionError(f"waiting for {what}: not within {within:.0f} s")
        time.sleep(every)


def running(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie has ended: only its exit status waits to be read)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def gone(procs: list[psutil.Process], what: str = "the processes to end", within: float = PATIENCE) -> None:
    """Wait until none of ``procs`` runs."""
    wait_for(lambda: not running(procs), what, within)


def group(pgid: int) -> list[psutil.Process]:
    """The running processes of process group ``pgid`` (a command started with ``start_new_session=True`` leads
    its own: what it started stays in it unless it left on purpose)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.pid != os.getpid() and os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.NoSuchProcess):
            pass
    return out


class Output:
    """The lines a process writes to its stdout and stderr, collected as they come (two threads drain the pipes,
    so the process never blocks on a full one): the test waits for a line, then acts."""

    def __init__(self, p: subprocess.Popen):
        self.p = p
        self.lines: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._threads = [threading.Thread(target=self._drain, args=(getattr(p, name), self.lines[name]), daemon=True)
                         for name in self.lines]
        for t in self._threads:
            t.start()

    @staticmethod
    def _drain(stream, into: list[str]) -> None:
        for line in iter(stream.readline, ""):
            into.append(line)

    def wait_line(self, match: Callable[[str], bool], what: str, stream: str = "stderr",
                  within: float = PATIENCE) -> str:
        """The first line of ``stream`` for which ``match`` is true, once the process has written it."""
        return wait_for(lambda: next((line for line in list(self.lines[stream]) if match(line)), None), what,
                        within, self.p)

    def finish(self, timeout: float = PATIENCE) -> tuple[str, str]:
        """Wait for the process to end; everything it wrote, (stdout, stderr)."""
        self.p.wait(timeout=timeout)
        for t in self._threads:
            t.join(timeout=timeout)
        return "".join(self.lines["stdout"]), "".join(self.lines["stderr"])
