"""Faults and runtime primitives behave the same in both backends: each scenario (a small plugin algorithm in
tests/plugins/edgeml_faultplugins.py) runs in sim and in procs and must give the same outcome."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import psutil
import pytest
import torch

from edgeml.config import load_config
from edgeml.runner import run

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))  # the in-process runs (and the fork server of procs) see the plugins too
import edgeml_faultplugins  # noqa: E402,F401
from conftest import pythonpath  # noqa: E402
from waiting import PATIENCE, gone, wait_for  # noqa: E402


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.setenv("EDGEML_PLUGINS", "edgeml_faultplugins")


def run_both(tmp_path: Path, algorithm: str, *overrides: str) -> dict[str, Path]:
    out = {}
    for backend in ("sim", "procs"):
        cfg = load_config(overrides=[f"run.algorithm='{algorithm}'", f"run.backend='{backend}'", "cluster.workers=3",
                                     f"run.out='{tmp_path}'", f"run.name='{backend}'", *overrides])
        out[backend] = run(cfg)
    return out


def probe(path: Path) -> pd.DataFrame:
    return pd.read_csv(path / "series" / "probe.csv")


def meta(path: Path) -> dict:
    return json.loads((path / "meta.json").read_text())


def nodes(path: Path) -> pd.DataFrame:
    return pd.read_csv(path / "nodes.csv").set_index("rank")


@pytest.mark.slow
def test_all_reduce_timeout_and_worker_to_worker_messages(tmp_path, plugins):
    for backend, path in run_both(tmp_path, "fault-primitives", "stop.max_time=1.5").items():
        p = probe(path)
        assert list(p[p.what == "sum"].value) == [6.0] * 3, backend
        assert list(p[p.what == "mean"].value) == [2.0] * 3, backend
        timeouts = p[p.what == "timeout"]
        assert timeouts.got.all() and len(timeouts) == 3
        if backend == "sim":
            assert timeouts.value.tolist() == pytest.approx([0.3] * 3, abs=1e-9)
        else:
            assert ((timeouts.value >= 0.3) & (timeouts.value < 1.3)).all(), timeouts
        hello = p[p.what == "hello"].iloc[0]
        assert hello.value == 3 + 7 and hello["nbytes"] == 3 * 8 + 8
        # each all_reduce of a 4-byte tensor among 3 moves 2(n-1) = 4 messages and 2(n-1)/n * 4 = 5 bytes
        tags = pd.read_csv(path / "messages.csv").set_index(["rank", "tag"])
        for rank in (1, 2, 3):
            row = tags.loc[(rank, "all_reduce")]
            assert (row.messages_sent, row.bytes_sent) == (8, 10), backend
        assert meta(path)["status"] == "completed"


@pytest.mark.slow
def test_messages_to_dead_peers_are_dropped_and_counted_the_same(tmp_path, plugins):
    runs = run_both(tmp_path, "fault-lost", "stop.max_time=2", "cluster.crashes=[{worker=1, time=0.5}]")
    for backend, path in runs.items():
        n = nodes(path)
        assert (n.loc[1, "messages_sent"], n.loc[1, "messages_lost"]) == (5, 5), backend
        assert n.messages_lost.sum() == 5 and bool(n.loc[2, "crashed"]) and not n.loc[3, "crashed"]
        assert pd.read_csv(path / "evals.csv").messages_lost.iloc[-1] == 5
        assert json.loads((path / "summary.json").read_text())["messages_lost"] == 5
        tags = pd.read_csv(path / "messages.csv").set_index(["rank", "tag"])
        assert (tags.loc[(1, "x"), "messages_sent"], tags.loc[(1, "x"), "messages_lost"]) == (5, 5)
        sent = probe(path)
        assert len(sent) == 1 and sent.value.iloc[0] >= 1.0  # the sender went on after its lost messages
        assert meta(path)["status"] == "completed"


@pytest.mark.slow
def test_a_crash_during_all_reduce_leaves_the_survivors_reducing(tmp_path, plugins):
    # worker 0 (the lowest rank: the reduction's root in procs) crashes while the others wait for it
    runs = run_both(tmp_path, "fault-reduce-crash", "stop.max_time=2", "cluster.crashes=[{worker=0, time=0.5}]")
    for backend, path in runs.items():
        p = probe(path)
        assert sorted(p["rank"]) == [2, 2, 3, 3] and (p.value == 2.0 + 3.0).all(), backend
        first = p[p["round"] == 1]["at"]
        if backend == "sim":
            assert first.tolist() == [0.5, 0.5]
        else:
            assert ((first >= 0.5) & (first < 2.0)).all(), first
        n = nodes(path)
        assert bool(n.loc[1, "crashed"]) and meta(path)["status"] == "completed"


@pytest.mark.slow
def test_evaluation_goes_on_after_an_exposer_crashed(tmp_path, plugins):
    runs = run_both(tmp_path, "fault-exposers", "stop.max_time=4", "eval.interval=0.5",
                    "cluster.crashes=[{worker=1, time=1.0}]")
    sim = pd.read_csv(runs["sim"] / "evals.csv")
    assert sim.time_s.tolist() == [0.5 * k for k in range(9)]
    procs = pd.read_csv(runs["procs"] / "evals.csv")
    assert procs.time_s.is_monotonic_increasing
    assert (procs.time_s > 1.5).sum() >= 4 and procs.time_s.iloc[-1] >= 3.5, procs
    assert procs.loss.notna().all()


def test_the_final_row_averages_every_node_that_ever_exposed(plugins):
    from conftest import simulate

    kernel, monitor, status, _ = simulate("run.algorithm='fault-exposers'", "cluster.workers=3",
                                          "stop.max_time=2", "cluster.crashes=[{worker=1, time=1.0}]")
    models = [n.exposed for n in kernel.nodes.values()]
    loss, acc = monitor.evaluator(torch.stack([m.double() for m in models]).mean(0).float())  # as the monitor does
    assert (monitor.rows[-1]["loss"], monitor.rows[-1]["accuracy"]) == (loss, acc)
    live = torch.stack([models[0], models[2]]).mean(0)
    assert monitor.evaluator(live)[0] != loss


@pytest.mark.slow
def test_a_stalled_run_ends_as_stalled_naming_the_blocked_nodes(tmp_path):
    runs = run_both(tmp_path, "bsp", "cluster.workers=2", "stop.max_time=60", "stop.loss_variance=1e-9",
                    "cluster.crashes=[{worker=1, time=0.5}]")
    for backend, path in runs.items():
        m = meta(path)
        assert m["status"] == "stalled", (backend, m["stop_reason"])
        assert m["stop_reason"] == ("no node can make progress: ps 0 in recv(tag='push'); "
                                    "worker 0 in recv(src=ps 0, tag='model')")
        assert m["duration_s"] < (1 if backend == "sim" else 20)
        n = nodes(path)
        survivors = n[~n.crashed]
        accounted = survivors.compute_s + survivors.comm_s + survivors.wait_s
        if backend == "sim":  # the time blocked when the run ends counts as waiting
            assert accounted.tolist() == pytest.approx(survivors.alive_s.tolist(), abs=1e-6)
        else:
            assert (accounted > 0.9 * survivors.alive_s).all(), survivors


def test_a_node_error_writes_error_txt_in_sim(tmp_path, plugins, monkeypatch):
    cfg = load_config(overrides=["run.algorithm='fault-raises'", "run.backend='sim'", "cluster.workers=2",
                                 f"run.out='{tmp_path}'", "run.name='r'"])
    with pytest.raises(RuntimeError, match=r"worker 0 raised KeyError: '\[pair.cc:545\] missing' \(traceback in "):
        run(cfg)
    text = (tmp_path / "r" / "error.txt").read_text()
    assert text.startswith("worker 0 (rank 1) raised at t = ") and "Traceback (most recent call last)" in text
    assert "in raises" in text and meta(tmp_path / "r")["status"] == "failed"
    monkeypatch.setenv("EDGEML_DEBUG", "1")
    cfg.run.name = "debug"
    with pytest.raises(KeyError, match="missing"):
        run(cfg)
    assert (tmp_path / "debug" / "error.txt").exists()


def _cli(*args, env=None):
    e = {**os.environ, "PYTHONPATH": pythonpath(PLUGINS, ROOT), "EDGEML_PLUGINS": "edgeml_faultplugins",
         **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "edgeml", *args], env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


@pytest.mark.slow
def test_a_node_error_in_procs_gives_one_literal_line_and_error_txt(tmp_path):
    p = _cli("run", "fault-raises", "--workers", "2", "--max-time", "30", "--out", str(tmp_path), "--name", "r")
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 1, err
    assert "Traceback" not in err and "MarkupError" not in err
    error = err.strip().splitlines()[-1]
    assert error.startswith("error: run failed: worker 0 raised KeyError: '[pair.cc:545] missing' (traceback in ")
    assert str(tmp_path / "r" / "error.txt") in error
    text = (tmp_path / "r" / "error.txt").read_text()
    assert text.startswith("worker 0 (rank 1) raised at t = ") and "in raises" in text


def _wait_for_evaluations(run_dir: Path, p: subprocess.Popen, rows: int = 2) -> None:
    evals = run_dir / "evals.csv"
    wait_for(lambda: evals.exists() and len(evals.read_text().splitlines()) > rows, f"{rows} evaluations in {evals}",
             process=p, every=0.2)


def _pids(folder: Path, names: list[str], p: subprocess.Popen) -> dict[str, int]:
    """The pids the nodes of the run ``p`` write to ``folder`` as they start (the fault-pids plugin)."""
    wait_for(lambda: all((folder / n).exists() and (folder / n).read_text() for n in names),
             f"the pid files {names} in {folder}", process=p)
    return {n: int((folder / n).read_text()) for n in names}


@pytest.mark.slow
@pytest.mark.parametrize("victim, rank", [("worker1", 3), ("ps0", 1)])
def test_a_killed_node_fails_the_run_in_one_line_and_is_blamed(tmp_path, victim, rank):
    pids = tmp_path / "pids"
    pids.mkdir()
    p = _cli("run", "fault-pids", "--workers", "2", "--max-time", "60", "--out", str(tmp_path), "--name", "r",
             env={"EDGEML_TEST_PIDS": str(pids)})
    pid = _pids(pids, ["ps0", "worker0", "worker1"], p)[victim]
    _wait_for_evaluations(tmp_path / "r", p)
    os.kill(pid, signal.SIGKILL)
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 1, err
    assert "Traceback" not in err and "MarkupError" not in err
    name = {"worker1": "worker 1", "ps0": "ps 0"}[victim]
    reason = f"{name} (rank {rank}) died with exit code -9 (SIGKILL)"
    assert err.strip().splitlines()[-1].startswith(f"error: run failed: {reason} (partial results in ")
    m = meta(tmp_path / "r")
    assert m["status"] == "failed" and m["stop_reason"] == reason
    n = nodes(tmp_path / "r")
    assert n.crashed.tolist() == [r == rank for r in n.index]


@pytest.mark.slow
def test_a_killed_monitor_still_ends_the_run_record(tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    p = _cli("run", "fault-pids", "--workers", "2", "--max-time", "60", "--out", str(tmp_path), "--name", "r", "-q",
             env={"EDGEML_TEST_PIDS": str(pids)})
    ours = set(_pids(pids, ["ps0", "worker0", "worker1"], p).values())
    _wait_for_evaluations(tmp_path / "r", p)
    kids = psutil.Process(p.pid).children(recursive=True)
    monitor = next(k for k in kids if k.pid not in ours and k.ppid() != p.pid)  # a sibling of the nodes
    monitor.kill()
    out, err = p.communicate(timeout=PATIENCE)
    assert p.returncode == 1 and "Traceback" not in err
    assert str(tmp_path / "r") in err.strip().splitlines()[-1]
    m = meta(tmp_path / "r")
    assert m["status"] == "failed" and m["stop_reason"] == "the monitor process died with exit code -9 (SIGKILL)"
    gone(kids, "the run's processes to end")
