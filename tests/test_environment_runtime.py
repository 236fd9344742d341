"""The world (``edgeml.world``) as both backends apply it through the node interface: interruptible and
work-proportional steps, co-running load, topologies with hop costs and failed links, progress counters,
random waits and per-node devices. Scenarios are small plugin algorithms (tests/plugins/edgeml_faultplugins.py)."""

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
from edgeml.errors import UserError
from edgeml.runner import run

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = Path(__file__).resolve().parent / "plugins"
if str(PLUGINS) not in sys.path:
    sys.path.insert(0, str(PLUGINS))
import edgeml_faultplugins  # noqa: E402,F401
from conftest import pythonpath  # noqa: E402
from waiting import PATIENCE, gone, wait_for  # noqa: E402


@pytest.fixture
def plugins(monkeypatch):
    monkeypatch.setenv("EDGEML_PLUGINS", "edgeml_faultplugins")


def one(tmp_path: Path, backend: str, algorithm: str, *overrides: str, name: str | None = None) -> Path:
    cfg = load_config(overrides=[f"run.algorithm='{algorithm}'", f"run.backend='{backend}'", f"run.out='{tmp_path}'",
                                 f"run.name='{name or backend}'", *overrides])
    return run(cfg)


def probe(path: Path) -> pd.DataFrame:
    return pd.read_csv(path / "series" / "probe.csv")


def nodes(path: Path) -> pd.DataFrame:
    return pd.read_csv(path / "nodes.csv").set_index("rank")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "procs"])
def test_an_algorithm_can_end_the_run_saying_why(tmp_path, plugins, backend):
    path = one(tmp_path, backend, "env-stop", "cluster.workers=2", "cluster.base_step_s=0.02", "stop.max_time=30",
               "eval.interval=0.25")
    meta = json.loads((path / "meta.json").read_text())
    assert meta["status"] == "stopped" and meta["stop_reason"] == "worker 1: no platform left alive"
    evals = pd.read_csv(path / "evals.csv")
    assert 1.0 <= evals.time_s.iloc[-1] < 5.0 and len(evals) >= 4 and evals.accuracy.notna().all()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "procs"])
def test_an_interrupted_step_ends_at_the_message_and_charges_only_its_part(tmp_path, plugins, backend):
    path = one(tmp_path, backend, "env-interrupt", "cluster.workers=2", "cluster.base_step_s=0.1",
               "stop.max_time=2.5", "eval.interval=0.5")
    p = probe(path).set_index("what")
    assert p.loc["interrupted", "result"] == "INTERRUPTED"
    assert p.loc["kept", "value"] == 5  # the message that interrupted stayed to be received
    assert p.loc["work2", "result"] == "7"
    w0 = nodes(path).loc[1]
    assert w0.steps == 1  # the interrupted step does not count
    if backend == "sim":  # exact: the message arrives at 0.5 s on the ideal network; work 2 lasts 2 x 0.1 s
        assert p.loc["interrupted", "value"] == pytest.approx(0.5)
        assert p.loc["work2", "value"] == pytest.approx(0.2)
        assert w0.compute_s == pytest.approx(0.7)
    else:  # wall clock: far shorter than the 10 s step, and work 2 close to 0.2 s
        assert 0.45 <= p.loc["interrupted", "value"] < 2.0
        assert 0.19 <= p.loc["work2", "value"] < 1.0
        assert 0.6 < w0.compute_s < 2.5


def test_sim_cpu_load_slows_steps_as_documented_and_shows_in_load(tmp_path, plugins):
    # one training thread on one core beside a cpu workload of intensity 0.5: steps take 1 / (1 - 0.5) = 2x
    path = one(tmp_path, "sim", "env-load", "cluster.workers=1", "cluster.base_step_s=0.1", "stop.max_time=2",
               "load.schedule=[{node = 0, kind = 'cpu', intensity = 0.5, start = 0.95}]")
    p = probe(path)
    before, after = p[p["end"] <= 0.95 + 1e-9], p[p["at"] >= 0.95]
    assert len(before) >= 2 and len(after) >= 2
    assert before.value.tolist() == pytest.approx([0.1] * len(before))
    assert after.value.tolist() == pytest.approx([0.2] * len(after))
    assert before.cpu.tolist() == [0.0] * len(before)
    assert after.cpu.tolist() == pytest.approx([0.5] * len(after))


def _interferers(pid: int) -> list[psutil.Process]:
    out = []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            if "edgeml.runtime.interference" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def busy_share(seconds: float = 1.0) -> float:
    """The share of a core a plain busy loop gets on this host now: 1 on an idle host, 1/2 beside one CPU hog
    per core, far less on a crowded one (the host's own baseline for load thresholds)."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        proc = psutil.Process(spin.pid)
        t0, c0 = time.monotonic(), sum(proc.cpu_times()[:2])
        time.sleep(seconds)  # the window the share is measured over
        return (sum(proc.cpu_times()[:2]) - c0) / (time.monotonic() - t0)
    finally:
        spin.kill()
        spin.wait()


@pytest.mark.slow
@pytest.mark.alone
def test_procs_cpu_interferer_raises_load_and_scaled_step_time(tmp_path, plugins):
    if (share := busy_share()) < 0.3:  # beside n busy processes on its core the interferer gets 1/(n + 2)
        pytest.skip(f"a busy loop gets {share:.2f} of a core here: one more process cannot be told from the noise")
    path = one(tmp_path, "procs", "env-load", "cluster.workers=1", "cluster.throttle_mode='scale'",
               "stop.max_time=5", "eval.interval=1", "load.cores=1",
               "load.schedule=[{node = 0, kind = 'cpu', intensity = 1.0, start = 2.0}]")
    p = probe(path)
    before, after = p[p["end"] < 1.95], p[p["at"] > 2.05]
    assert len(before) >= 3 and len(after) >= 3
    # the interferer competes with the training (and whatever else runs on the host) for the node's one core;
    # medians, since the run's other processes still starting up on a 2-core CI host can fill the first windows.
    # Its share c of the core is measured against the host's own baseline (before its start, it only started
    # up): alone with the training c is about 1/2, beside n other busy processes 1/(n + 2)
    share = after.cpu.median()
    assert before.cpu.median() < 0.15 and share > 3 * before.cpu.median() + 0.04, (
        before.cpu.tolist(), after.cpu.tolist())
    # the training lost that share: a step takes (n + 2) / (n + 1) = 1 + c / (1 - c) times as long (2x alone);
    # at least 1 + c / 2, room for the medians' noise
    assert after.value.median() > (1 + share / 2) * before.value.median(), (
        before.value.median(), after.value.median(), share)


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": pythonpath(PLUGINS, ROOT), "EDGEML_PLUGINS": "edgeml_faultplugins"}
    return subprocess.Popen([sys.executable, "-m", "edgeml", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
@pytest.mark.parametrize("ending", ["ctrl-c", "killed monitor", "completed"])
def test_no_interferer_outlives_a_procs_run(tmp_path, ending):
    p = _cli("run", "env-load", "--workers", "2", "--max-time", "4" if ending == "completed" else "60",
             "--out", str(tmp_path), "--name", "r", "-q", "--set", "load.schedule=[{node = '*', kind = 'io', "
             "intensity = 0.2}, {node = 0, kind = 'cpu', intensity = 0.3}]")
    # io = disk + net: 2 x 2, and one cpu
    found = wait_for(lambda: (lambda f: f if len(f) >= 5 else None)(_interferers(p.pid)), "five interferers",
                     process=p, every=0.2)
    assert len(found) == 5
    if ending != "completed":  # the run is under way (an evaluation written), its interferers loading
        evals = tmp_path / "r" / "evals.csv"
        wait_for(lambda: evals.exists() and len(evals.read_text().splitlines()) > 1, "an evaluation", process=p)
    if ending == "ctrl-c":
        p.send_signal(signal.SIGINT)
    elif ending == "killed monitor":
        parents = {q.ppid() for q in found}
        assert len(parents) == 1  # the monitor started them
        os.kill(parents.pop(), signal.SIGKILL)
    p.communicate(timeout=PATIENCE)
    gone(found, "the interferers to end")
    meta = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert meta["status"] == {"ctrl-c": "interrupted", "killed monitor": "failed", "completed": "completed"}[ending]


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "procs"])
def test_a_ring_with_a_failed_link_routes_counts_hops_and_loses_what_crosses_it(tmp_path, plugins, backend):
    path = one(tmp_path, backend, "env-neighbours", "cluster.workers=4", "network.topology='ring'",
               "network.link_latency_s=0.001", "network.failed_links=0.25", "stop.max_time=1.5", "eval.interval=0.5")
    p = probe(path)
    n = nodes(path)
    assert (p.value == 2).all()  # a ring: two neighbours each
    cut = p[p.up == 1]["rank"].tolist()  # the failed link's two ends see one neighbour up
    assert len(cut) == 2 and (p[~p["rank"].isin(cut)].up == 2).all()
    size = 10 * 4  # ten float32 values
    for rank, row in n.iterrows():
        rounds = row.messages_sent // 3  # two neighbours and the node two places on
        assert row.messages_sent == 3 * rounds and rounds >= 3
        lost = rounds if rank in cut else 0  # the message over the failed link, every round
        assert row.messages_lost == lost
        # one hop to each neighbour, two to the node opposite (either way round the ring)
        assert row.byte_hops == size * (rounds * 4 - lost)
    evals = pd.read_csv(path / "evals.csv")
    assert evals.total_byte_hops.iloc[-1] == n.byte_hops.sum()
    assert (evals.rounds.diff().dropna() >= 0).all() and evals.rounds.iloc[-1] > 0
    if backend == "sim":  # counters are exact at the final row
        assert evals.rounds.iloc[-1] == n.loc[1].messages_sent // 3
        assert evals.messages.iloc[-1] == n.messages_sent.sum()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "procs"])
def test_on_the_star_every_message_crosses_two_links_and_commits_are_counted(tmp_path, backend):
    path = one(tmp_path, backend, "asp", "cluster.workers=2", "stop.max_time=2", "eval.interval=0.5")
    evals = pd.read_csv(path / "evals.csv")
    assert (evals.total_byte_hops == 2 * evals.total_bytes).all()  # worker - switch - ps
    assert evals.commits.iloc[-1] > 0 and (evals.commits <= evals.total_steps).all()
    assert (evals.commits >= evals.total_steps - 2).all()  # each step is pushed, but a step cut short by the end
    tags = pd.read_csv(path / "messages.csv")
    assert (tags.byte_hops == 2 * tags.bytes_sent).all()


@pytest.mark.slow
def test_random_waits_before_pushes_are_seeded_and_have_the_mean_set(tmp_path):
    runs = [one(tmp_path, "sim", "asp", "cluster.workers=2", "cluster.base_step_s=0.01", "stop.max_time=10",
                "cluster.random_wait_s=0.02", name=f"r{i}") for i in range(2)]
    a, b = (pd.read_csv(r / "evals.csv") for r in runs)
    assert a.equals(b)
    n = nodes(runs[0])
    workers = n[n.role == "worker"]
    pushes = workers.messages_sent.sum()
    assert pushes > 300
    # on the ideal network a worker waits only for its random waits (the PS answers at once)
    assert workers.wait_s.sum() / pushes == pytest.approx(0.02, rel=0.15)
    plain = one(tmp_path, "sim", "asp", "cluster.workers=2", "cluster.base_step_s=0.01", "stop.max_time=10",
                name="plain")
    n = nodes(plain)
    assert n[n.role == "worker"].wait_s.sum() == 0


def test_cuda_nodes_without_cuda_are_refused_in_one_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CUDA is visible here")
    for backend in ("sim", "procs"):
        cfg = load_config(overrides=[f"run.backend='{backend}'", "cluster.workers=2", "cluster.devices={cuda = '1'}",
                                     f"run.out='{tmp_path}'"])
        with pytest.raises(UserError, match="cluster.devices") as err:
            run(cfg)
        assert "\n" not in str(err.value)
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["sim", "procs"])
def test_a_cpu_and_cuda_worker_mix_trains(tmp_path, backend):
    path = one(tmp_path, backend, "asp", "cluster.workers=3", "cluster.devices={cpu = '0', cuda = '1-2'}",
               "stop.max_time=3", "eval.interval=0.5")
    meta = json.loads((path / "meta.json").read_text())
    assert [meta["nodes"][str(r)]["device"] for r in (2, 3, 4)] == ["cpu", "cuda", "cuda"]
    evals = pd.read_csv(path / "evals.csv")
    assert evals.accuracy.iloc[-1] > evals.accuracy.iloc[0]
    if backend == "procs":
        assert set(meta["calibration"]["measured_by_device"]) == {"cpu", "cuda"}
