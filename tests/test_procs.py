"""The procs backend: real processes, throttling, exact bytes, faults, Ctrl-C, torchrun across 'machines'."""

from __future__ import annotations

import json
import os
import signal
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
from edgeml.runtime.procs import decode, encode

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
    assert step[2] / step[0] == pytest.approx(3.0, rel=0.10)
    assert step[1] / step[0] == pytest.approx(1.0, rel=0.10)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["calibration"]["base_step_s"] >= meta["calibration"]["measured_step_s"]
    P = meta["num_params"]
    ps = nodes[nodes.role == "ps"].iloc[0]
    assert ps.bytes_recv == ps.messages_recv * (4 * P + 8)
    assert (workers.bytes_sent == workers.messages_sent * (4 * P + 8)).all()
    evals = pd.read_csv(path / "evals.csv")
    assert len(evals) >= 3 and evals.accuracy.iloc[-1] > evals.accuracy.iloc[0]
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["ps_ingress_bytes"] == ps.bytes_recv


def _wait_for_evaluations(run: Path, rows: int = 2, within: float = 60) -> Path:
    """The run's evals.csv once it holds ``rows`` evaluations: the run is well under way."""
    evals = run / "evals.csv"
    deadline = time.time() + within
    while time.time() < deadline and (not evals.exists() or len(evals.read_text().splitlines()) <= rows):
        time.sleep(0.2)
    return evals


def _cli(*args, env=None, **kw):
    e = {**os.environ, "PYTHONPATH": f"{PLUGINS}{os.pathsep}{ROOT}", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "edgeml", *args], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_sim_run_stops_on_ctrl_c_or_sigterm_and_keeps_results(tmp_path, sig):
    # node programs are greenlets on the main thread: the signal lands inside one of them and must still end
    # the whole run in order
    p = _cli("run", "asp", "--backend", "sim", "--workers", "4", "--max-time", "1e9", "--out", str(tmp_path),
             "--name", "r", "-q")
    evals = _wait_for_evaluations(tmp_path / "r", rows=3)
    os.killpg(p.pid, sig)
    out, err = p.communicate(timeout=40)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["status"] == "interrupted" and meta["stop_reason"] == "interrupted by the user"
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["total_steps"] > 0
    assert len(pd.read_csv(evals)) >= 3


def test_a_dying_worker_ends_the_run_cleanly(tmp_path):
    p = _cli("run", "test-die", "--workers", "3", "--max-time", "60", "--out", str(tmp_path), "--name", "r", "-q",
             env={"EDGEML_PLUGINS": "edgeml_testplugins"})
    out, err = p.communicate(timeout=90)
    assert p.returncode == 1, err
    assert "worker 1" in err and "died with exit code 7" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["status"] == "failed" and "exit code 7" in meta["stop_reason"]
    assert pd.read_csv(tmp_path / "r" / "nodes.csv").shape[0] == 4
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["duration_s"] < 30
    time.sleep(0.5)
    assert not _children_alive(p.pid)


def test_ctrl_c_stops_in_order_and_keeps_results(tmp_path):
    p = _cli("run", "bsp", "--workers", "2", "--max-time", "120", "--out", str(tmp_path), "--name", "r", "-q")
    evals = _wait_for_evaluations(tmp_path / "r")
    kids = _children_alive(p.pid)
    assert len(kids) >= 4  # fork server, monitor, PS, workers
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    out, err = p.communicate(timeout=40)
    assert p.returncode == 130, err
    assert "Traceback" not in err
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["status"] == "interrupted"
    assert len(pd.read_csv(evals)) >= 2
    time.sleep(1.0)
    assert not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]


def test_two_runs_side_by_side_and_crash_schedule(tmp_path):
    args = ["run", "asp", "--workers", "2", "--max-time", "3", "--out", str(tmp_path), "-q"]
    a = _cli(*args, "--name", "a", "--set", "cluster.crashes=[{worker=1, time=1.0}]")
    b = _cli(*args, "--name", "b")
    for p in (a, b):
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
    nodes = pd.read_csv(tmp_path / "a" / "nodes.csv").set_index("rank")
    crashed = nodes[nodes.crashed]
    assert list(crashed["index"]) == [1] and crashed.crash_time_s.iloc[0] == pytest.approx(1.0, abs=0.2)
    assert nodes.loc[2, "steps"] > 1.5 * crashed.steps.iloc[0]


@pytest.mark.skipif(not any((Path(sys.executable).parent / n).exists() for n in ("torchrun",)),
                    reason="torchrun not installed next to this python")
def test_torchrun_two_launchers_as_two_machines(tmp_path):
    from edgeml.runtime.procs import free_port

    port = str(free_port())
    torchrun = str(Path(sys.executable).parent / "torchrun")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", port,
              "-m", "edgeml", "run", "asp", "--workers", "2", "--max-time", "3", "--out", str(tmp_path),
              "--name", "tr", "-q"]
    procs = [subprocess.Popen([torchrun, "--node-rank", str(i), *common], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for i in (0, 1)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (o, e) in zip(procs, outs):
        assert p.returncode == 0, e[-2000:]
    nodes = pd.read_csv(tmp_path / "tr" / "nodes.csv")
    assert list(nodes.role) == ["ps", "worker", "worker"]
    assert (nodes[nodes.role == "worker"].steps > 10).all()
    assert json.loads((tmp_path / "tr" / "summary.json").read_text())["status"] == "completed"


def test_workers_share_the_dataset_memory(tmp_path):
    p = _cli("run", "test-shared", "--workers", "2", "--max-time", "1", "--out", str(tmp_path), "--name", "r", "-q",
             env={"EDGEML_PLUGINS": "edgeml_testplugins"})
    out, err = p.communicate(timeout=90)
    assert p.returncode == 0, err
    probe = pd.read_csv(tmp_path / "r" / "series" / "probe.csv")
    assert len(probe) == 2 and probe.shared.all()


def _echo(rank: int, port: int, sizes: list[int], out) -> None:
    import torch.distributed as dist

    from edgeml.runtime.procs import Transport

    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    tr = Transport(rank)

    def take():
        with tr.cond:
            while not tr.inbox:
                tr.cond.wait(1.0)
            return tr.inbox.popleft()

    for n in sizes:
        if rank == 0:
            tr.send(1, "ping", {"x": torch.arange(n, dtype=torch.uint8), "n": n}, {})
            msg = take()
            out.put((n, msg.data["n"] == n and torch.equal(msg.data["x"], torch.arange(n, dtype=torch.uint8))))
        else:
            msg = take()
            tr.send(0, "pong", dict(msg.data), {})
    out.put(None) if rank == 0 else None
    time.sleep(0.5)
    os._exit(0)


def test_transport_messages_across_the_chunk_boundary():
    import torch.multiprocessing as mp

    from edgeml.runtime.procs import CHUNK_BYTES, free_port

    # payload sizes around the point where a message no longer fits one chunk (framing adds header bytes)
    sizes = [0, 1, 1000, CHUNK_BYTES - 300, CHUNK_BYTES - 100, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES + 5]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    ps = [ctx.Process(target=_echo, args=(r, port, sizes, out)) for r in (0, 1)]
    for p in ps:
        p.start()
    got = []
    while (item := out.get(timeout=60)) is not None:
        got.append(item)
    for p in ps:
        p.join(timeout=10)
    assert got == [(n, True) for n in sizes]


def _descendants_gone(kids: list[psutil.Process], within: float) -> bool:
    deadline = time.time() + within
    while time.time() < deadline:
        if not [k for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 130), (signal.SIGKILL, -9)])
def test_killing_the_launcher_leaves_no_process_behind(tmp_path, sig, code):
    p = _cli("run", "asp", "--workers", "2", "--max-time", "120", "--out", str(tmp_path), "--name", "r", "-q")
    evals = _wait_for_evaluations(tmp_path / "r")
    kids = _children_alive(p.pid)
    assert len(kids) >= 4
    p.send_signal(sig)  # the launcher only, as `kill` or `timeout` would
    p.communicate(timeout=40)
    assert p.returncode == code
    assert _descendants_gone(kids, within=10)
    if sig == signal.SIGTERM:  # an orderly stop: results complete, reason recorded
        meta = json.loads((tmp_path / "r" / "meta.json").read_text())
        assert meta["status"] == "interrupted" and (tmp_path / "r" / "summary.json").exists()
    assert len(pd.read_csv(evals)) >= 2  # what was measured stays readable either way
