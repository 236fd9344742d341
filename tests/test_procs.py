"""The procs backend: real processes, throttling, exact bytes, faults, Ctrl-C, torchrun across 'machines'."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest
import torch

from edgeml.config import load_config
from edgeml.runner import run
from edgeml.runtime.procs.contention import MARGIN
from edgeml.runtime.procs.framing import decode, encode
from conftest import pythonpath
from waiting import PATIENCE, Output, gone, group, wait_for

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"


def test_wire_format_round_trip():
    data = {"a": torch.randn(3, 5), "b": torch.arange(7, dtype=torch.int32), "e": torch.empty(0),
            "h": torch.randn(2, 3).half(), "k": 3, "x": 2.5, "flag": True}
    tag, out, meta = decode(encode("push", data, {"nbytes": 12}))
    assert tag == "push" and meta == {"nbytes": 12}
    for key, value in data.items():
        if isinstance(value, torch.Tensor):
            assert out[key].dtype == value.dtype and torch.equal(out[key], value)
        else:
            assert out[key] == value
    framed = encode("push", data, {"nbytes": 12}, framed=True)
    assert int(framed[:8].view(torch.int64)) == framed.numel() - 8  # the length prefix the receiver reads
    assert torch.equal(framed[8:], encode("push", data, {"nbytes": 12}))


def _children_alive(pid: int) -> list[psutil.Process]:
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if p.is_running()]
    except psutil.NoSuchProcess:
        return []


def test_throttled_step_times_and_exact_bytes(tmp_path):
    cfg = load_config(overrides=["run.algorithm='asp'", "cluster.workers=3", "cluster.hetero='1:1:3'",
                                 "stop.max_time=3", f"run.out='{tmp_path}'"])
    path = run(cfg)
    nodes = pd.read_csv(path / "nodes.csv")
    workers = nodes[nodes.role == "worker"].reset_index()
    step = workers.compute_s / workers.steps
    meta = json.loads((path / "meta.json").read_text())
    # throttling holds each worker to its target wherever the host lets it: a run in which some worker was more
    # than MARGIN over its target is marked (tests/test_contention.py) and its step times measure the host; an
    # unmarked run has every worker within MARGIN of its target (a few percent on a quiet host)
    if not meta["oversubscribed"]:
        assert step[2] / step[0] == pytest.approx(3.0, rel=MARGIN)
        assert step[1] / step[0] == pytest.approx(1.0, rel=MARGIN)
        assert step[0] == pytest.approx(meta["calibration"]["base_step_s"], rel=MARGIN)
    P = meta["num_params"]
    ps = nodes[nodes.role == "ps"].iloc[0]
    assert ps.bytes_recv == ps.messages_recv * (4 * P + 8)
    assert (workers.bytes_sent == workers.messages_sent * (4 * P + 8)).all()
    evals = pd.read_csv(path / "evals.csv")
    assert len(evals) >= 3 and evals.accuracy.iloc[-1] > evals.accuracy.iloc[0]
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["ps_ingress_bytes"] == ps.bytes_recv


def _wait_for_evaluations(run: Path, p: subprocess.Popen, rows: int = 2) -> Path:
    """The run's evals.csv once it holds ``rows`` evaluations (the run ``p`` makes is well under way)."""
    evals = run / "evals.csv"
    wait_for(lambda: evals.exists() and len(evals.read_text().splitlines()) > rows, f"{rows} evaluations in {evals}",
             process=p, every=0.2)
    return evals


def _cli(*args, env=None, **kw):
    e = {**os.environ, "PYTHONPATH": pythonpath(PLUGINS, ROOT), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "edgeml", *args], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_sim_run_stops_on_ctrl_c_or_sigterm_and_keeps_results(tmp_path, sig):
    # node programs are greenlets on the main thread: the signal lands inside one of them and must still end
    # the whole run in order
    p = _cli("run", "asp", "--backend", "sim", "--workers", "4", "--max-time", "1e6", "--out", str(tmp_path),
             "--name", "r", "-q")
    evals = _wait_for_evaluations(tmp_path / "r", p, rows=3)
    os.killpg(p.pid, sig)
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["stop_reason"] == "interrupted by the user"
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["total_steps"] > 0
    assert len(pd.read_csv(evals)) >= 3
    assert out.strip().splitlines()[-1] == str(tmp_path / "r")  # the path, last on stdout as for any run
    assert f"what was measured so far is in {tmp_path / 'r'}" in err


@pytest.mark.slow
def test_ctrl_c_before_the_run_directory_exists_says_none_was_made(tmp_path):
    # the command line has accepted the input and starts loading the runner (torch, the data): an import hook says
    # "up" there and waits for the signal, so the Ctrl-C lands before the run directory is made on any host
    e = {**os.environ, "PYTHONPATH": pythonpath(PLUGINS, ROOT)}
    code = ("import signal, sys\nfrom edgeml.__main__ import entry\n"
            f"sys.argv = ['edgeml', 'run', 'asp', '--backend', 'sim', '--out', {str(tmp_path)!r}, '--name', 'r']\n"
            "class Up:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'edgeml.runner':\n            sys.stderr.write('up\\n'); sys.stderr.flush()\n"
            "            signal.pause()\n"
            "        return None\nsys.meta_path.insert(0, Up())\nentry()\n")
    p = subprocess.Popen([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    assert p.stderr.readline() == "up\n"
    assert not (tmp_path / "r").exists()
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 130 and not (tmp_path / "r").exists() and out == ""
    assert "no run directory was made" in err and "Traceback" not in err


def test_a_handled_ctrl_c_inside_exec_is_forgotten_by_the_interpreter():
    """A Ctrl-C that lands in an ``exec`` of text (dataclasses do that while torch imports) is remembered by
    CPython, whose ``-m`` runner then kills itself with SIGINT at exit even after we caught it and chose exit
    code 130. ``interrupt_handled`` makes it forget."""
    code = ("import ctypes\nfrom edgeml.errors import interrupt_handled\n"
            "flag = ctypes.c_int.in_dll(ctypes.pythonapi, '_Py_UnhandledKeyboardInterrupt')\n"
            "try:\n    exec('raise KeyboardInterrupt')\nexcept KeyboardInterrupt:\n    before = flag.value\n"
            "    interrupt_handled()\nprint(before, flag.value)\n")
    e = {**os.environ, "PYTHONPATH": pythonpath(PLUGINS, ROOT)}
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
    if "_Py_UnhandledKeyboardInterrupt" in r.stderr:
        pytest.skip("this CPython keeps the flag in its runtime state, out of ctypes' reach")
    assert r.stdout.split() == ["1", "0"], r.stderr


def test_ctrl_c_while_the_command_line_loads_exits_130_without_a_traceback(tmp_path):
    """The first second, while typer, rich and the schema import: a Ctrl-C there is an interruption as any other."""
    e = {**os.environ, "PYTHONPATH": pythonpath(PLUGINS, ROOT)}
    # "up" is said as entry() starts importing the command line (an import hook), so the SIGINT lands inside that
    # import, as a Ctrl-C in its first second does, however the host's load delays this child
    code = ("import sys\nfrom edgeml.__main__ import entry\nsys.argv = ['edgeml', 'list']\n"
            "class Up:\n    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'edgeml.cli':\n            sys.stderr.write('up\\n'); sys.stderr.flush()\n"
            "        return None\nsys.meta_path.insert(0, Up())\nentry()\n")
    p = subprocess.Popen([sys.executable, "-c", code], env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    assert p.stderr.readline() == "up\n"
    os.killpg(p.pid, signal.SIGINT)  # the interpreter is up; edgeml.cli has not finished importing
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 130, err
    assert "Traceback" not in err and "no run directory was made" in err and out == ""


@pytest.mark.slow
def test_progress_lines_reach_a_log_when_stderr_is_not_a_terminal(tmp_path):
    """Not on a terminal (a CI log), a long run prints a plain progress line every few seconds to stderr."""
    p = _cli("run", "asp", "--backend", "sim", "--max-time", "1e6", "--out", str(tmp_path), "--name", "r")
    output = Output(p)
    output.wait_line(lambda line: line.startswith("asp sim w=4") and "clock" in line, "a progress line")
    os.killpg(p.pid, signal.SIGINT)
    out, err = output.finish()
    lines = [line for line in err.splitlines() if line.startswith("asp sim w=4") and "clock" in line]
    assert len(lines) >= 1 and p.returncode == 130, err
    assert "\x1b" not in err  # plain text, no terminal control sequences


@pytest.mark.slow
def test_preloaded_modules_load_before_the_clock_starts(tmp_path):
    """A module an algorithm declares in ``preload`` is imported in every node process before the run's clock
    starts (the monitor waits for each node to be ready): its first use mid-run costs the node nothing."""
    p = _cli("run", "test-preload", "--workers", "2", "--max-time", "2", "--out", str(tmp_path), "--name", "r", "-q",
             env={"EDGEML_PLUGINS": "edgeml_testplugins"})
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 0, err
    probe = pd.read_csv(tmp_path / "r" / "series" / "probe.csv")
    assert len(probe) == 2 and (probe.import_s < 0.2).all(), probe  # 1.5 s each without the preload


@pytest.mark.slow
@pytest.mark.alone
def test_the_model_is_evaluated_every_interval_while_its_node_waits_for_messages(tmp_path):
    """The PS of BSP waits 0.4 s a round for a 4x slow worker; its model is still snapshotted for evaluation once
    per 0.1 s interval (a waiting node wakes for it), as the virtual clock evaluates, not only when a message
    wakes it: a model changed just after a snapshot was otherwise seen a round late (the twins' time to a
    target, results/twins)."""
    cfg = load_config(overrides=["run.algorithm='bsp'", "cluster.workers=2", "cluster.hetero='1:4'",
                                 "cluster.base_step_s=0.1", "eval.interval=0.1", "stop.max_time=3",
                                 f"run.out='{tmp_path}'"])
    path = run(cfg)
    evals = pd.read_csv(path / "evals.csv")
    meta = json.loads((path / "meta.json").read_text())
    during = evals.time_s.iloc[:-1]  # (the last row: the final model, at the run's end)
    assert (during // 0.1).is_unique  # one evaluation per interval at most
    if not meta["oversubscribed"]:  # (a host that starves the nodes delays their wake-ups)
        gaps = during.diff().dropna()  # (a wake-up for a message or the stats, 0.25 s, left gaps of 0.2 s)
        assert gaps.quantile(0.9) < 0.15, evals.time_s.to_list()


def test_adsp_on_procs_keeps_committing(tmp_path):
    """ADSP's workers never stop committing: the scheduler sends a target every check period (0.5 s here), its
    reward fit's scipy loaded before the clock starts (a first import mid-run, seconds on a host with a
    process per worker, once held every commit back for most of the run)."""
    p = _cli("run", "adsp", "--workers", "18", "--max-time", "10", "--out", str(tmp_path), "--name", "r", "-q")
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 0, err
    evals = pd.read_csv(tmp_path / "r" / "evals.csv")
    started = evals[evals.commits > 0]
    assert len(started) >= 5
    # from one evaluation to the next (1 s apart) after the first commit, commits grow
    for t in started.time_s[started.time_s <= evals.time_s.max() - 1]:
        later = evals[evals.time_s >= t + 0.9].commits.iloc[0]
        assert later > evals[evals.time_s == t].commits.iloc[0], evals[["time_s", "commits"]].to_string()


@pytest.mark.slow
def test_a_dying_worker_ends_the_run_cleanly(tmp_path):
    p = _cli("run", "test-die", "--workers", "3", "--max-time", "60", "--out", str(tmp_path), "--name", "r", "-q",
             env={"EDGEML_PLUGINS": "edgeml_testplugins"})
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 1, err
    assert "worker 1" in err and "died with exit code 7" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["status"] == "failed" and "exit code 7" in meta["stop_reason"]
    assert pd.read_csv(tmp_path / "r" / "nodes.csv").shape[0] == 4
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["duration_s"] < 30
    # the launcher led its own process group: every process it started ends with it
    gone(group(p.pid), "the run's processes to end")


@pytest.mark.slow
def test_ctrl_c_stops_in_order_and_keeps_results(tmp_path):
    p = _cli("run", "bsp", "--workers", "2", "--max-time", "120", "--out", str(tmp_path), "--name", "r", "-q")
    evals = _wait_for_evaluations(tmp_path / "r", p)
    kids = _children_alive(p.pid)
    assert len(kids) >= 4  # fork server, monitor, PS, workers
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    assert len(pd.read_csv(evals)) >= 2
    gone(kids, "the run's processes to end")


@pytest.mark.slow
def test_two_runs_side_by_side_and_crash_schedule(tmp_path):
    args = ["run", "asp", "--workers", "2", "--max-time", "3", "--out", str(tmp_path), "-q"]
    a = _cli(*args, "--name", "a", "--set", "cluster.crashes=[{worker=1, time=1.0}]")
    b = _cli(*args, "--name", "b")
    for p in (a, b):
        out, err = p.communicate(timeout=PATIENCE)
        assert p.returncode == 0, err
    nodes = pd.read_csv(tmp_path / "a" / "nodes.csv").set_index("rank")
    crashed = nodes[nodes.crashed]
    assert list(crashed["index"]) == [1] and crashed.crash_time_s.iloc[0] == pytest.approx(1.0, abs=0.2)
    assert nodes.loc[2, "steps"] > 1.5 * crashed.steps.iloc[0]


@pytest.mark.skipif(not any((Path(sys.executable).parent / n).exists() for n in ("torchrun",)),
                    reason="torchrun not installed next to this python")
@pytest.mark.slow
def test_torchrun_two_launchers_as_two_machines(tmp_path):
    from edgeml.runtime.procs.transport import listen

    with listen("127.0.0.1") as s:
        port = str(s.getsockname()[1])
    torchrun = str(Path(sys.executable).parent / "torchrun")
    env = {**os.environ, "PYTHONPATH": pythonpath(ROOT), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1",
           "EDGEML_SECRET": "the same on both machines"}  # what the ranks prove to each other
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port,
              "-m", "edgeml", "run", "asp", "--workers", "2", "--max-time", "3", "--out", str(tmp_path),
              "--name", "tr", "-q"]
    procs = [subprocess.Popen([torchrun, "--node-rank", str(i), *common], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    outs = [p.communicate(timeout=PATIENCE) for p in procs]
    for p, (_o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-2000:]
    nodes = pd.read_csv(tmp_path / "tr" / "nodes.csv")
    assert list(nodes.role) == ["ps", "worker", "worker"]
    assert (nodes[nodes.role == "worker"].steps > 10).all()
    assert json.loads((tmp_path / "tr" / "summary.json").read_text())["status"] == "completed"


@pytest.mark.slow
def test_workers_share_the_dataset_memory(tmp_path):
    p = _cli("run", "test-shared", "--workers", "2", "--max-time", "1", "--out", str(tmp_path), "--name", "r", "-q",
             env={"EDGEML_PLUGINS": "edgeml_testplugins"})
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 0, err
    probe = pd.read_csv(tmp_path / "r" / "series" / "probe.csv")
    assert len(probe) == 2 and probe.shared.all()


def _pair():
    from edgeml.runtime.procs.transport import Transport, loopback_endpoints

    return [Transport(e) for e in loopback_endpoints(2)]


def _take(tr, within: float = 10.0):
    with tr.cond:
        tr.cond.wait_for(lambda: tr.inbox, timeout=within)
        return tr.inbox.popleft()


def test_transport_round_trips_messages_of_any_size():
    a, b = _pair()
    for n in [0, 1, 1000, (1 << 16) + 3, 3 * (1 << 20) + 5]:
        x = torch.arange(n, dtype=torch.int64).to(torch.uint8)
        assert a.send(1, "ping", {"x": x, "n": n}, {"k": n})
        msg = _take(b)
        assert msg.src == 0 and msg.tag == "ping" and msg.meta["k"] == n and msg["n"] == n
        assert torch.equal(msg["x"], x)
    # the control tags act at once: a stop notice sets the stop event, a death notice marks the peer dead
    b.send(0, "__died", {}, {"rank": 5})
    b.send(0, "__stop", {}, {})
    assert a.stopped.wait(5)
    assert 5 in a.dead and not a.inbox
    assert (a.sent, b.arrived) == (0, 0)  # traffic with rank 0 (the monitor) is not node-to-node


def _serve(endpoint) -> None:
    from edgeml.runtime.procs.transport import Transport

    Transport(endpoint)
    signal.pause()  # serving until the test kills it


@pytest.mark.slow
def test_a_dead_peer_neither_blocks_nor_breaks_the_transport():
    import torch.multiprocessing as mp

    from edgeml.runtime.procs.transport import Transport, loopback_endpoints

    ends = loopback_endpoints(3)
    ctx = mp.get_context("spawn")
    peer = ctx.Process(target=_serve, args=(ends[2],), daemon=True)
    peer.start()
    me, other = Transport(ends[1]), Transport(ends[0])
    big = {"x": torch.zeros(1 << 20)}
    assert me.send(2, "hello", big, {})  # the connection is up
    os.kill(peer.pid, signal.SIGKILL)
    peer.join(10)
    t0 = time.time()
    results = [me.send(2, "hello", big, {}) for _ in range(5)]
    assert time.time() - t0 < 2 and results[-1] is False and 2 in me.dead
    assert me.send(0, "still", {"k": 1}, {})  # the others are unaffected
    assert _take(other)["k"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 130), (signal.SIGKILL, -9)])
def test_killing_the_launcher_leaves_no_process_behind(tmp_path, sig, code):
    p = _cli("run", "asp", "--workers", "2", "--max-time", "120", "--out", str(tmp_path), "--name", "r", "-q")
    evals = _wait_for_evaluations(tmp_path / "r", p)
    kids = _children_alive(p.pid)
    assert len(kids) >= 4
    p.send_signal(sig)  # the launcher only, as `kill` or `timeout` would
    p.communicate(timeout=PATIENCE)
    assert p.returncode == code
    gone(kids, "the run's processes to end")
    # SIGTERM: an orderly stop; SIGKILL: the monitor is told and still completes the run directory
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    status = {signal.SIGTERM: ("interrupted", "interrupted by the user"),
              signal.SIGKILL: ("failed", "the launcher process was killed")}[sig]
    assert (meta["status"], meta["stop_reason"]) == status and (tmp_path / "r" / "summary.json").exists()
    assert len(pd.read_csv(evals)) >= 2  # what was measured stays readable either way


@pytest.mark.slow
def test_a_single_machine_run_listens_on_loopback_only(tmp_path):
    p = _cli("run", "asp", "--workers", "2", "--max-time", "120", "--out", str(tmp_path), "--name", "r", "-q")
    _wait_for_evaluations(tmp_path / "r", p)
    listening = []
    for proc in [psutil.Process(p.pid), *_children_alive(p.pid)]:
        try:
            listening += [c.laddr for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
        except psutil.NoSuchProcess:
            pass
    # nothing answers on the host's other addresses (while the run is on)
    others = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
              if a.family == socket.AF_INET and not a.address.startswith("127.")]
    refused = []
    for ip in others[:1]:
        for a in listening:
            try:
                socket.create_connection((ip, a.port), timeout=2).close()
            except OSError:
                refused.append(a.port)
    os.killpg(p.pid, signal.SIGINT)
    p.communicate(timeout=PATIENCE)
    assert len(listening) >= 4  # monitor, PS and 2 workers
    assert {a.ip for a in listening} == {"127.0.0.1"}, listening
    assert len(refused) == len(listening) * len(others[:1])


def test_procs_slots_refuses_more_cores_than_the_host_has_before_starting_anything(tmp_path):
    """scripts/procs_slots.sh runs a procs run's seeds side by side, each in its own cores: asked for more cores
    than the host has, it says so in one line, exits 2 and starts no run."""
    out = tmp_path / "slots"
    cores = len(os.sched_getaffinity(0))
    p = subprocess.run(["bash", str(ROOT / "scripts" / "procs_slots.sh"), "edgegossip", "predictor", "0,1",
                        str(cores), str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and f"need {2 * cores} cores" in p.stderr and "fewer seeds" in p.stderr
    assert not list(out.glob("slot-*"))


def test_a_run_records_the_cores_it_may_use_beside_the_hosts(tmp_path):
    """meta.json: ``cpus`` counts the host's cores, ``cores`` those the run may use (its CPU affinity, as a
    slot of scripts/procs_slots.sh or taskset sets it)."""
    script = ("import json, os, sys; from edgeml.config import load_config; from edgeml.runner import run; "
              "cfg = load_config(overrides=['run.algorithm=\"asp\"', 'run.backend=\"sim\"', 'cluster.workers=2', "
              "'stop.max_time=1', 'data.dataset=\"digits\"', 'model.name=\"mlp\"', "
              f"'run.out=\"{tmp_path}\"', 'run.name=\"one\"']); p = run(cfg); "
              "print(json.dumps(json.load(open(os.path.join(p, 'meta.json')))))")
    p = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": pythonpath()})
    assert p.returncode == 0, p.stderr
    meta = json.loads(p.stdout.strip().splitlines()[-1])
    assert meta["cores"] == 1 and meta["cpus"] == os.cpu_count()


SLOW_IMPORTS = ("sklearn", "cvxpy", "scipy")
"""Packages that take a second or more to import: a node program that imports one on the run's clock spends
wall time in procs that the virtual clock does not count (the twins experiment found two seconds per EdgeGossip
platform)."""


NEVER_IMPORTS = {"peer_ps": ("cvxpy", "scipy"), "terngrad": ("cvxpy", "scipy")}
"""Algorithms that share a package with a slow import they never reach (a PS at a peer solves no weight matrix)."""


def test_every_slow_package_an_algorithm_imports_is_preloaded():
    """For each shipped algorithm, the slow packages its program's package imports (at module level or inside a
    function) are covered by its ``preload``, so that procs loads them before the clock starts."""
    import ast
    import importlib

    from edgeml.algorithms import REGISTRY

    for name, spec in REGISTRY.items():
        modules = {importlib.import_module(spec.nodes.__module__), importlib.import_module(spec.config.__module__)}
        files = set()
        for module in modules:
            if not module.__name__.startswith("edgeml."):
                continue
            package = Path(module.__file__).parent if module.__name__.count(".") > 2 else None
            files |= set(package.glob("*.py")) if package else {Path(module.__file__)}
        imported = set()
        for f in sorted(files):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [f"{node.module}.{a.name}" for a in node.names]  # from sklearn import ensemble
                else:
                    names = []
                imported |= {n for n in names if n.split(".")[0] in SLOW_IMPORTS}
        imported -= {m for m in imported if m.split(".")[0] in NEVER_IMPORTS.get(name, ())}
        missing = sorted(m for m in imported if not any(m == p or m.startswith(p + ".") for p in spec.preload))
        assert not missing, f"{name} imports {missing} on the run's clock: add them to its preload"
