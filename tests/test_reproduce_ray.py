"""edgeml reproduce --cluster ray / --address: runs as Ray tasks on a real local Ray instance (no mocks) give the
results of a serial reproduction; a run whose process dies is run again, then reported failed while the others
are kept; bad input is refused before anything is written; Ctrl-C leaves no process behind."""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import pythonpath
from edgeml import cli, rundir
from test_reproduce import EXPERIMENT, finished_runs, unpack  # the toy experiment: 6 quick sim runs of 2 workers

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "plugins"

LOSSY = """
[experiment]
paper = "lossy"
seeds = [0]
baseline = "bsp"
target_accuracy = 0.5

[settings]
run = { backend = "sim" }
stop = { max_time = 2 }
cluster = { workers = 2 }

[[runs]]
algorithm = "bsp"

[[runs]]
name = "dies"
algorithm = "test-die"

[[runs]]
name = "dies-once"
algorithm = "test-dies-once"

[[runs]]
name = "raises"
algorithm = "fault-raises"
"""
"""A run that finishes, one whose process dies each time (a node lost for good), one whose process dies the first
time only (a node lost once), one whose node program raises."""

WALL_CLOCK = ("started", "wall_s", "cpu_s", "git_sha")  # git_sha: the checkout may move between two reproductions


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(EXPERIMENT)
    return str(path)


def _tree(out: Path) -> dict[str, object]:
    """Every file of every run directory: meta.json without its wall-clock fields, config.toml without run.out
    (the output folders differ)."""
    files: dict[str, object] = {}
    for run in sorted(p for p in (out / "runs").iterdir() if p.is_dir()):
        for name, data in rundir.files(run).items():
            key = f"{run.name}/{name}"
            if name == rundir.META:
                files[key] = {k: v for k, v in json.loads(data).items() if k not in WALL_CLOCK}
            elif name == rundir.CONFIG:
                files[key] = [line for line in data.decode().splitlines() if not line.startswith("out = ")]
            else:
                files[key] = data
    return files


def _report(out: Path) -> list[str]:
    return [line for line in (out / "REPORT.md").read_text().splitlines() if "edgeml reproduce" not in line]


def _edgeml(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": pythonpath(ROOT)}
    return subprocess.run([sys.executable, "-m", "edgeml", *args], env=env, capture_output=True, text=True,
                          timeout=60, **kwargs)


@pytest.mark.slow
def test_ray_gives_the_results_of_a_serial_reproduction(tmp_path, toy):
    serial, on_ray = tmp_path / "serial", tmp_path / "ray"
    for out, how in ((serial, ["--jobs", "1"]), (on_ray, ["--cluster", "ray", "--jobs", "2"])):
        result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(out), *how])
        assert result.exit_code == 0, result.output
        assert "[6/6]" in result.output and result.output.count(": running ") == 6
    assert len(finished_runs(on_ray)) == 6
    assert _tree(on_ray) == _tree(serial)                                # bit-identical sim runs, same files
    for name in ("compare.csv", "compare_runs.csv", "compare_reach.csv", "compare.md"):
        assert (on_ray / name).read_bytes() == (serial / name).read_bytes(), name
    assert _report(on_ray) == _report(serial)
    assert [p.name for p in (on_ray / "runs").iterdir() if p.name.startswith(".")] == []  # no unpacking left over
    # --resume after a driver that died mid-way: what did not finish runs again, on the cluster
    (unpack(on_ray / "runs" / "ssp-tight-s1") / "summary.json").unlink()
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(on_ray), "--cluster", "ray",
                                          "--jobs", "2", "--resume"])
    assert result.exit_code == 0, result.output
    assert result.output.count("(kept)") == 5 and result.output.count(": running ") == 1
    assert _tree(on_ray) == _tree(serial)


@pytest.mark.slow
def test_a_lost_run_is_retried_then_failed_and_the_others_are_kept(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    monkeypatch.setenv("PYTHONPATH", pythonpath(PLUGINS))  # the local Ray instance and its workers inherit these
    monkeypatch.setenv("EDGEML_PLUGINS", "edgeml_faultplugins,edgeml_testplugins,edgeml_rayplugins")
    monkeypatch.setenv("EDGEML_TEST_DIES_ONCE", str(tmp_path / "died"))
    for module in ("edgeml_faultplugins", "edgeml_testplugins", "edgeml_rayplugins"):
        importlib.import_module(module)                  # this process plans the runs: it needs their names
    (tmp_path / "lossy.toml").write_text(LOSSY)
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["reproduce", str(tmp_path / "lossy.toml"), "--out", str(out),
                                          "--cluster", "ray", "--jobs", "2"])
    assert result.exit_code == 1, result.output
    assert "2 of 4 runs failed" in result.output
    assert "dies seed 0: FAILED: the run's task was lost 3 times (WorkerCrashedError" in result.output
    assert (tmp_path / "died").read_text() == "died\n"   # died once, then ran again and finished
    assert "dies-once seed 0: accuracy" in result.output
    report = (out / "REPORT.md").read_text()
    assert "## Failed runs" in report and "| dies | 0 | the run's task was lost 3 times" in report
    assert "| raises | 0 | RunFailed: run failed" in report and "edgeml-run-" not in report  # its own path
    assert (out / "runs" / "raises-s0" / "error.txt").exists()     # a failed run's directory comes back
    assert not (out / "runs" / "dies-s0").exists()
    assert len((out / "compare.csv").read_text().splitlines()) == 3    # bsp and dies-once


def test_an_unreachable_address_is_refused_with_one_line_within_seconds_and_nothing_written(tmp_path, toy):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                        # closed when the block ends: nothing listens there
    out = tmp_path / "out"
    t0 = time.monotonic()
    result = _edgeml("reproduce", toy, "--quick", "--out", str(out), "--address", f"127.0.0.1:{port}")
    assert time.monotonic() - t0 < 10
    assert result.returncode == 2, result.stderr
    assert f"error: --address 127.0.0.1:{port}: cannot reach a Ray cluster" in result.stderr
    assert "ray start --head" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == "" and not out.exists()


def test_an_unknown_cluster_kind_is_refused(tmp_path, toy):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(out), "--cluster", "slurm"])
    assert result.exit_code == 2, result.output
    assert "--cluster 'slurm': the cluster kinds are ray" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_without_ray_the_error_says_how_to_install_it(tmp_path, toy, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)       # as if Ray were not installed
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(out), "--cluster", "ray"])
    assert result.exit_code == 2, result.output
    assert "--cluster ray needs Ray, which is not installed: pip install -e '.[cluster]'" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.slow
def test_address_joins_a_running_cluster_and_leaves_it_running(tmp_path, toy, monkeypatch):
    head_code = ("import logging, time, ray; ray.init(address='local', num_cpus=2, include_dashboard=False, "
                 "logging_level=logging.ERROR); print(ray.get_runtime_context().gcs_address, flush=True); "
                 "time.sleep(300)")
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    head = subprocess.Popen([sys.executable, "-c", head_code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env={**os.environ, "RAY_AUTH_MODE": "disabled"})
    try:
        address = head.stdout.readline().strip()
        assert address, "the head did not start"
        out = tmp_path / "out"
        result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out),
                                              "--address", address])
        assert result.exit_code == 0, result.output
        assert len(finished_runs(out)) == 3 and (out / "REPORT.md").exists()
        assert head.poll() is None                       # leaving the cluster does not stop it
    finally:
        head.terminate()
        head.wait(timeout=30)


@pytest.mark.xfail(strict=False, reason="Ray 2.60's core worker can abort on a SIGINT sent to the driver's whole "
                   "process group (task_manager.cc:1329, 'you have likely discovered a bug in Ray'); the "
                   "reproduction then exits 1 instead of 130. Seen once in CI; passes otherwise")
@pytest.mark.slow
def test_ctrl_c_cancels_the_tasks_keeps_finished_runs_and_leaves_no_process(tmp_path, toy):
    import psutil

    out = tmp_path / "out"
    with open(tmp_path / "log.txt", "w") as log:
        driver = subprocess.Popen([sys.executable, "-m", "edgeml", "reproduce", toy, "--quick", "--seeds", "0,1,2",
                                   "--out", str(out), "--cluster", "ray", "--jobs", "2"],
                                  env={**os.environ, "PYTHONPATH": pythonpath(ROOT)}, stdout=log, stderr=log,
                                  start_new_session=True)
    deadline = time.monotonic() + 180
    while not finished_runs(out) and time.monotonic() < deadline:
        time.sleep(0.05)
    processes = psutil.Process(driver.pid).children(recursive=True)  # Ray's own and its workers
    finished = {name: rundir.read_file(out / "runs" / name, rundir.SUMMARY) for name in finished_runs(out)}
    os.killpg(driver.pid, signal.SIGINT)                 # Ctrl-C at a terminal: the whole foreground group
    assert driver.wait(timeout=60) == 130, (tmp_path / "log.txt").read_text()
    assert 1 <= len(finished) < 9
    for name, summary in finished.items():
        assert rundir.read_file(out / "runs" / name, rundir.SUMMARY) == summary
    deadline = time.monotonic() + 15
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(processes), f"processes outlived the driver: {_alive(processes)}"


def _alive(processes) -> list[str]:
    import psutil

    names = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                names.append(f"{p.pid} {p.name()}")
        except psutil.NoSuchProcess:
            pass
    return names
