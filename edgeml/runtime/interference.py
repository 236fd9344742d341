"""Real co-running load for the ``procs`` backend, and what a node observes of it.

A workload of the ``[load]`` schedule (``edgeml.world.load.Workload``: node, kind, intensity, start, end) becomes one
or two OS processes, each loading one resource at a rate set by the intensity u in (0, 1]:

- ``cpu``: in every 0.1 s period, spin until the process has had u x 0.1 s of CPU time (or the period is over),
  then sleep: a demand of u of one core. Sharing a core with a training step it gets at most half of it (the
  kernel's fair share), which is what ``edgeml.world`` models in ``sim``.
- ``disk``: per period, write u x ``disk_Bps`` x 0.1 / 2 bytes to a temporary file, ``fsync``, drop them from
  the page cache and read them back, so storage moves u x ``disk_Bps`` bytes/s (half written, half read; the
  paper's Sort co-runner reads and writes). The file is unlinked as soon as it is open: nothing is left on
  disk whatever happens to the process. On a tmpfs directory nothing reaches storage: set ``load.dir``.
- ``net``: per period, u x ``net_Bps`` x 0.1 bytes over a TCP connection to itself on 127.0.0.1 (loopback only).
- ``io``: a ``disk`` and a ``net`` process.

Supervision. ``Supervisor.start`` spawns every process of the schedule at once (a small Python program that
imports nothing heavy); each keeps its own timer, idles until its start, loads its resource until its end and
then idles until the supervisor ends it, so its pid stays valid for observation. ``stop`` kills and reaps them
all (also at interpreter exit). Each process asks Linux to SIGKILL it when its parent dies (PR_SET_PDEATHSIG,
as the procs launcher does for nodes) and checks that the parent is still there, so none survives a SIGTERM,
SIGKILL or crash of the supervising process. The signal is tied to the thread that spawned the process: call
``start`` from the thread that lives as long as the run. The processes ignore SIGINT (Ctrl-C reaches the whole
foreground process group): the supervisor ends them, in order.

Observation. ``LoadMeter`` reads, with psutil, what given processes (a node's interferers) used since the
previous reading: ``Load(cpu, net, disk)`` with cpu in cores (1.0 = one core busy), net as bytes sent per second
over ``net_Bps`` and disk as storage bytes per second over ``disk_Bps``. With the supervisor's rates these are
u for an unhindered workload of intensity u, the same numbers ``edgeml.world.World.load`` models in ``sim``. Linux
has no per-process network counters; the net workload writes to its socket with ``write(2)``, which the
kernel counts in the process's ``write_chars``.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from edgeml.errors import UserError
from edgeml.world.load import RESOURCES, Load

PERIOD_S = 0.1
"""Each workload paces itself in periods this long."""
FILE_LIMIT = 64 << 20
"""The disk workload's file wraps around at this size."""
CHUNK = 1 << 20

# ------------------------------------------------------------------------------------------------- supervisor
class Supervisor:
    """Starts the interfering processes of a schedule and guarantees that none outlives it.

    ``workloads``: objects with ``rank``, ``kind``, ``intensity``, ``start`` and ``end`` (seconds on the run's
    clock; ``end`` may be ``inf``). ``epoch``: the wall-clock time (``time.time()``) of the run's time 0.
    ``cpus``: rank -> the CPUs that rank's interferers are pinned to (the node's own share of the host)."""

    def __init__(self, workloads: Sequence[Any], *, epoch: float, net_Bps: float, disk_Bps: float,
                 dir: str = "", cpus: Mapping[int, Collection[int]] | None = None):
        unknown = sorted({w.kind for w in workloads} - set(RESOURCES))
        if unknown:
            raise ValueError(f"unknown workload kinds {unknown}: use {', '.join(RESOURCES)}")
        if dir and not (os.path.isdir(dir) and os.access(dir, os.W_OK)):
            raise UserError(f"load.dir = {dir!r} is not a writable directory: create it or leave it empty")
        self.workloads = list(workloads)
        self.epoch = epoch
        self.net_Bps, self.disk_Bps = net_Bps, disk_Bps
        self.dir = dir or tempfile.gettempdir()
        self.cpus = {r: sorted(c) for r, c in (cpus or {}).items()}
        self.procs: list[tuple[int, str, subprocess.Popen]] = []
        """(rank, resource, process) of every process started."""

    def start(self) -> None:
        """Spawn every process now; each starts loading at its workload's start time."""
        atexit.register(self.stop)
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        try:
            for w in self.workloads:
                for resource in RESOURCES[w.kind]:
                    spec = {"resource": resource, "intensity": w.intensity, "parent": os.getpid(),
                            "start": self.epoch + w.start, "end": self.epoch + w.end,
                            "Bps": self.net_Bps if resource == "net" else self.disk_Bps,
                            "dir": self.dir, "cpus": self.cpus.get(w.rank)}
                    p = subprocess.Popen([sys.executable, "-m", "edgeml.runtime.interference", json.dumps(spec)],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                                         close_fds=True)
                    self.procs.append((w.rank, resource, p))
        except BaseException:
            self.stop()
            raise

    def pids(self, rank: int | None = None) -> dict[int, str]:
        """pid -> resource of the processes of ``rank`` (all ranks when ``None``)."""
        return {p.pid: res for r, res, p in self.procs if rank is None or r == rank}

    def stop(self) -> None:
        """Kill and reap every process (idempotent)."""
        for _, _, p in self.procs:
            if p.poll() is None:
                p.kill()
        for _, _, p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover (SIGKILL cannot be ignored)
                pass
        self.procs.clear()
        atexit.unregister(self.stop)

    def __enter__(self) -> "Supervisor":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pin(ranks: Iterable[int], cores: int, available: Sequence[int]) -> dict[int, list[int]]:
    """Give each rank ``cores`` of the ``available`` CPUs, consecutive and round robin: the share of the host
    its training and its interferers compete for (ranks share CPUs when there are too few)."""
    cpus = sorted(available)
    if not cpus or cores < 1:
        raise ValueError("need at least one CPU and one core per rank")
    out = {}
    for i, rank in enumerate(sorted(ranks)):
        out[rank] = sorted({cpus[(i * cores + k) % len(cpus)] for k in range(min(cores, len(cpus)))})
    return out


# ------------------------------------------------------------------------------------------------- observation
class LoadMeter:
    """What the processes ``pids`` (pid -> resource, as ``Supervisor.pids`` gives) used since the previous
    ``read`` (the first: since the meter was made). Processes that ended count what they used until then."""

    def __init__(self, pids: Mapping[int, str], *, net_Bps: float, disk_Bps: float):
        import psutil

        self.net_Bps, self.disk_Bps = net_Bps, disk_Bps
        self._procs: dict[int, tuple[Any, str]] = {}
        for pid, resource in pids.items():
            try:
                self._procs[pid] = (psutil.Process(pid), resource)
            except psutil.NoSuchProcess:
                pass
        self._totals = {pid: self._sample(pid, (0.0, 0, 0)) for pid in self._procs}
        self._time = time.monotonic()

    def _sample(self, pid: int, last: tuple[float, int, int]) -> tuple[float, int, int]:
        """(CPU seconds, bytes sent on sockets, storage bytes) so far; ``last`` when it can no longer be read."""
        import psutil

        proc, resource = self._procs[pid]
        try:
            with proc.oneshot():
                cpu = proc.cpu_times()
                io = proc.io_counters()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return last
        sent = io.write_chars if resource == "net" else 0
        return cpu.user + cpu.system, sent, io.read_bytes + io.write_bytes

    def read(self) -> Load:
        now = time.monotonic()
        dt = max(now - self._time, 1e-9)
        cpu = net = disk = 0.0
        for pid, last in self._totals.items():
            new = self._sample(pid, last)
            cpu += new[0] - last[0]
            net += new[1] - last[1]
            disk += new[2] - last[2]
            self._totals[pid] = new
        self._time = now
        return Load(cpu / dt, net / dt / self.net_Bps, disk / dt / self.disk_Bps)


# ------------------------------------------------------------------------------------------------- the processes
def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when its parent dies (PR_SET_PDEATHSIG); exit now if it already has."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:  # pragma: no cover (not Linux): the supervisor's stop is the only guarantee
        pass
    if os.getppid() != parent:
        os._exit(0)


def _sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 1.0))


def _cpu(spec: dict) -> Any:
    quota = spec["intensity"] * PERIOD_S

    def period(end: float) -> None:
        c0 = time.thread_time()
        x = 1.0
        while time.thread_time() - c0 < quota and time.monotonic() < end:
            for _ in range(200):
                x = x * 1.0000001 + 1e-9
    return period


def _disk(spec: dict) -> Any:
    fd, path = tempfile.mkstemp(prefix="edgeml-load-", dir=spec["dir"])
    os.unlink(path)  # the blocks go back when the process ends, however it ends
    half = int(spec["intensity"] * spec["Bps"] * PERIOD_S / 2)
    block = os.urandom(min(max(half, 1), CHUNK))
    offset = 0

    def period(end: float) -> None:
        nonlocal offset
        if offset + half > FILE_LIMIT:
            offset = 0
        start, done = offset, 0
        while done < half and time.monotonic() < end:
            done += os.pwrite(fd, block[:half - done], offset + done)
        os.fsync(fd)
        os.posix_fadvise(fd, start, done, os.POSIX_FADV_DONTNEED)  # so the read-back comes from storage
        read = 0
        while read < done and time.monotonic() < end:
            got = os.pread(fd, min(CHUNK, done - read), start + read)
            if not got:
                break
            read += len(got)
        offset += done
    return period


def _net(spec: dict) -> Any:
    server = socket.create_server(("127.0.0.1", 0))
    out = socket.create_connection(server.getsockname())
    inp, _ = server.accept()

    def drain() -> None:
        buf = bytearray(CHUNK)
        while inp.recv_into(buf):
            pass
    threading.Thread(target=drain, daemon=True).start()
    per_period = int(spec["intensity"] * spec["Bps"] * PERIOD_S)
    block = memoryview(bytes(min(max(per_period, 1), CHUNK)))

    def period(end: float) -> None:
        sent = 0
        while sent < per_period and time.monotonic() < end:
            sent += os.write(out.fileno(), block[:per_period - sent])  # write(2): counted in write_chars
    return period


def _main(spec: dict) -> None:
    _die_with_parent(spec["parent"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if spec["cpus"]:
        os.sched_setaffinity(0, spec["cpus"])
    period = {"cpu": _cpu, "disk": _disk, "net": _net}[spec["resource"]](spec)
    _sleep_until(spec["start"])
    while time.time() < spec["end"]:
        end = time.monotonic() + PERIOD_S
        period(end)
        time.sleep(max(0.0, end - time.monotonic()))
    while True:  # idle until the supervisor ends us (the pid stays valid for observation)
        time.sleep(3600)


if __name__ == "__main__":
    _main(json.loads(sys.argv[1]))
