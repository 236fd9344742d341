"""Real co-running load (edgeml.runtime.interference): the workloads load what they claim, the meter sees it,
and no interfering process outlives its supervisor however that ends. Thresholds leave room for a loaded host."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import namedtuple

import psutil
import pytest

from edgeml.runtime.interference import LoadMeter, Supervisor, pin
from conftest import pythonpath

W = namedtuple("W", "rank kind intensity start end")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(pids, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def settle(pids, timeout: float = 20.0) -> None:
    """Wait until the processes have finished starting (their CPU time stops growing)."""
    procs = [psutil.Process(p) for p in pids]
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        now = sum(sum(p.cpu_times()[:2]) for p in procs)
        if last is not None and now - last < 0.005:
            return
        last = now
        time.sleep(0.3)
    raise AssertionError("interfering processes did not settle")


def loading(pids, timeout: float = 20.0) -> None:
    """Wait until every process is in its loading loop (it has written with write(2)): what it read from storage
    while starting (Python's own files, on a cold page cache) is then behind it."""
    procs = [psutil.Process(p) for p in pids]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(p.io_counters().write_chars > 0 for p in procs):
            return
        time.sleep(0.05)
    raise AssertionError("interfering processes did not start loading")


@pytest.mark.slow
def test_a_cpu_workload_raises_observed_cpu_load():
    sup = Supervisor([W(1, "cpu", 1.0, 0.0, math.inf), W(2, "cpu", 1.0, math.inf, math.inf)],
                     epoch=time.time(), net_Bps=1e6, disk_Bps=1e6)
    with sup:
        settle(sup.pids(2))  # the workload that never starts: only its start-up used CPU
        # the host's own baseline: what a plain busy loop on the workload's cores gets beside it right now (alone,
        # a core; on a crowded host, a fair share, which may be far below one)
        cores = psutil.Process(next(iter(sup.pids(1)))).cpu_affinity()
        spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            psutil.Process(spin.pid).cpu_affinity(cores)
            busy = LoadMeter(sup.pids(1), net_Bps=1e6, disk_Bps=1e6)
            idle = LoadMeter(sup.pids(2), net_Bps=1e6, disk_Bps=1e6)
            reference = LoadMeter({spin.pid: "cpu"}, net_Bps=1e6, disk_Bps=1e6)
            time.sleep(1.5)  # the window the loads are measured over
            b, i, ref = busy.read(), idle.read(), reference.read()
        finally:
            spin.kill()
            spin.wait()
    assert b.cpu > 0.5 * ref.cpu and i.cpu < 0.05, (b, i, ref)  # about the busy loop's share; the idle one none
    # the idle one may be charged a clock tick (10 ms) of CPU for waking from its sleeps: within the bound above
    assert b.net == b.disk == 0.0 and (i.net, i.disk) == (0.0, 0.0)


def test_io_workloads_raise_observed_disk_and_net_load(tmp_path):
    rate = 4e6
    sup = Supervisor([W(1, "disk", 1.0, 0.0, math.inf), W(2, "net", 1.0, 0.0, math.inf)],
                     epoch=time.time(), net_Bps=rate, disk_Bps=rate, dir=str(tmp_path))
    with sup:
        loading([*sup.pids(1), *sup.pids(2)])
        disk = LoadMeter(sup.pids(1), net_Bps=rate, disk_Bps=rate)
        net = LoadMeter(sup.pids(2), net_Bps=rate, disk_Bps=rate)
        time.sleep(1.5)
        d, n = disk.read(), net.read()
        assert list(tmp_path.iterdir()) == []  # the file is unlinked as soon as it is open
    assert d.disk > 0.3 and d.net == 0.0, d  # intensity 1: about `rate` bytes/s, half written, half read back
    assert n.net > 0.3 and n.disk < 0.1, n
    assert list(tmp_path.iterdir()) == []


def test_stop_ends_every_process_and_a_workload_keeps_its_window():
    t0 = time.time()
    sup = Supervisor([W(1, "cpu", 0.5, 0.0, 0.5), W(1, "io", 0.2, 0.0, math.inf)], epoch=t0,
                     net_Bps=1e6, disk_Bps=1e6)
    sup.start()
    pids = list(sup.pids())
    assert sorted(sup.pids(1).values()) == ["cpu", "disk", "net"] and sup.pids(2) == {}
    settle([p for p, r in sup.pids().items() if r == "cpu"])  # its window is over: it idles, still there
    assert all(alive(p) for p in pids)
    sup.stop()
    assert wait_gone(pids, timeout=2.0) == [] and sup.pids() == {}
    sup.stop()  # idempotent


PARENT = """
import json, math, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as in a terminal, even if started with it ignored
from collections import namedtuple
from edgeml.runtime.interference import Supervisor
W = namedtuple("W", "rank kind intensity start end")
with Supervisor([W(1, "cpu", 0.3, 0.0, math.inf), W(1, "io", 0.2, 0.0, math.inf)], epoch=time.time(),
                net_Bps=1e6, disk_Bps=1e6, dir=sys.argv[1]) as sup:
    print(json.dumps(list(sup.pids())), flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_no_process_survives_its_supervisors_end(tmp_path, sig):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": pythonpath(ROOT)})
    try:
        pids = json.loads(parent.stdout.readline())
        assert len(pids) == 3
        parent.send_signal(sig)  # at once: some children may still be starting
        parent.wait(timeout=20)
        assert wait_gone(pids) == []
        assert list(tmp_path.iterdir()) == []
    finally:
        if parent.poll() is None:
            parent.kill()


def test_pin_gives_each_rank_its_own_cores():
    assert pin([3, 1, 2], 1, [0, 1, 2, 3]) == {1: [0], 2: [1], 3: [2]}
    assert pin([1, 2, 3], 2, [4, 5, 6, 7]) == {1: [4, 5], 2: [6, 7], 3: [4, 5]}  # wraps round when short
    assert pin([1], 3, [0, 1]) == {1: [0, 1]}


def test_an_unwritable_directory_is_refused(tmp_path):
    from edgeml.errors import UserError

    with pytest.raises(UserError, match="load.dir = .* is not a writable directory"):
        Supervisor([W(1, "disk", 0.5, 0.0, 1.0)], epoch=time.time(), net_Bps=1e6, disk_Bps=1e6,
                   dir=str(tmp_path / "missing"))
