"""edgeml reproduce --jobs (runs side by side, the same results), --plan (costs, nothing written), --check (verdicts
against the committed report) and each run's recorded cost (meta.json's wall_s and cpu_s)."""

from __future__ import annotations

import os

import csv
import importlib
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeml import cli, rundir
from edgeml.analysis.verdicts import VERDICT_KINDS
from edgeml.reproduce import reproduce
from edgeml.reproduce.load import load_experiment
from edgeml.reproduce.parallel import needed_cores, reservation
from edgeml.reproduce.plan import plan
from edgeml.reproduce.summary import read_verdicts
from test_reproduce import EXPERIMENT, edit, finished_runs, unpack  # the toy experiment, and reading its runs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(EXPERIMENT)
    return str(path)


def _files(out: Path, name: str) -> dict[str, bytes]:
    """Each run's file ``name``; a table as its CSV's bytes, whether reproduce compacted it or not yet."""
    found = {}
    for run in sorted(p for p in (out / "runs").iterdir() if p.is_dir()):
        data = rundir.read_file(run, name)
        if data is not None:
            found[run.name] = data
    return found


def _report(out: Path) -> list[str]:
    return [line for line in (out / "REPORT.md").read_text().splitlines() if "edgeml reproduce" not in line]


@pytest.mark.slow
def test_jobs_give_the_results_of_a_serial_reproduction(tmp_path, toy):
    serial, side = tmp_path / "serial", tmp_path / "side"
    for out, jobs in ((serial, "1"), (side, "2")):
        result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(out), "--jobs", jobs])
        assert result.exit_code == 0, result.output
        assert "[6/6]" in result.output and result.output.count(": running ") == 6
    assert len(_files(side, "evals.csv")) == 6
    assert _files(side, "evals.csv") == _files(serial, "evals.csv")      # bit-identical sim runs
    assert _files(side, "experiment.json") == _files(serial, "experiment.json")
    assert (side / "compare.csv").read_bytes() == (serial / "compare.csv").read_bytes()
    assert _report(side) == _report(serial)
    for run in (side / "runs").iterdir():
        m = rundir.read_json(run, rundir.META)
        assert m["wall_s"] > 0 and m["cpu_s"] > 0
    # --resume after a driver that died mid-way: what did not finish runs again, in parallel
    (unpack(side / "runs" / "ssp-tight-s1") / "summary.json").unlink()
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(side), "--jobs", "2", "--resume"])
    assert result.exit_code == 0, result.output
    assert result.output.count("(kept)") == 5 and "ssp-tight-s1" in finished_runs(side)
    assert _files(side, "evals.csv") == _files(serial, "evals.csv")


@pytest.mark.slow
def test_a_failed_run_in_a_child_is_recorded_and_the_others_go_on(tmp_path, toy, monkeypatch):
    plugins = str(ROOT / "tests" / "plugins")
    monkeypatch.syspath_prepend(plugins)               # the runs' processes get this process's sys.path
    monkeypatch.setenv("EDGEML_PLUGINS", "edgeml_faultplugins")  # the runs' processes load it
    importlib.import_module("edgeml_faultplugins")                 # this one has its registry already
    bad = edit(tmp_path, toy, 'algorithm = "ssp"\nconfig = { ssp = { staleness = 1 } }', 'algorithm = "fault-raises"')
    result = CliRunner().invoke(cli.app, ["reproduce", bad, "--quick", "--seeds", "0", "--out",
                                          str(tmp_path / "out"), "--jobs", "2"])
    assert result.exit_code == 1, result.output
    assert "1 of 3 runs failed" in result.output and "ssp-tight seed 0: FAILED" in result.output
    report = (tmp_path / "out" / "REPORT.md").read_text()
    assert "## Failed runs" in report and "| ssp-tight | 0 | RunFailed: run failed" in report
    assert (tmp_path / "out" / "runs" / "ssp-tight-s0" / "error.txt").exists()
    assert len((tmp_path / "out" / "compare.csv").read_text().splitlines()) == 3   # the two BSP runs


def test_reservations_never_exceed_jobs(toy):
    exp = load_experiment(toy)
    sim = plan(exp, quick=True)[0].cfg
    procs = plan(exp, quick=True, backend="procs")[0].cfg
    assert needed_cores(sim) == 1 and reservation(sim, 4) == 1
    assert needed_cores(procs) == 4                      # 2 workers and the PS, plus the monitor
    assert reservation(procs, 2) == 2 and reservation(procs, 16) == 4


def test_meta_records_the_runs_cost(tmp_path):
    from edgeml.config import build_config
    from edgeml.runner import run

    cfg = build_config({"run": {"algorithm": "bsp", "backend": "sim", "out": str(tmp_path), "name": "r"},
                        "cluster": {"workers": 2}, "stop": {"max_time": 1}})
    meta = json.loads((run(cfg, quiet=True) / "meta.json").read_text())
    assert meta["status"] == "completed"
    assert 0 < meta["wall_s"] < 60 and 0 < meta["cpu_s"] < 60
    # the processor that cost was paid on: the same run costs several-fold more on a host without wide vectors
    import torch
    assert meta["cpu"]["capability"] == torch.backends.cpu.get_cpu_capability()
    assert isinstance(meta["cpu"]["model"], str)


@pytest.mark.parametrize("value", ["0", "-1"])
def test_bad_jobs_are_refused_with_one_line_and_nothing_written(tmp_path, toy, value):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(out), "--jobs", value])
    assert result.exit_code == 2, result.output
    assert f"--jobs {value}: give the number of cores to use, 1 or more" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_check_without_a_committed_report_is_refused_and_nothing_written(tmp_path, toy):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--check", "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "--check: nothing is committed for toy --quick" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_plan_lists_the_runs_and_writes_nothing(tmp_path, toy):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--plan", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("bsp[cluster.hetero=H=1]", "bsp[cluster.hetero=1:3]", "ssp-tight"):
        assert name in result.output
    assert "6 planned runs" in result.output and "total:" in result.output and "6 to run" in result.output
    assert not out.exists()
    procs = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--plan", "--backend", "procs", "--jobs", "2",
                                         "--out", str(out)])
    # a procs run: its reserved cores (2 of 4 processes at --jobs 2) times max_time and its setup
    assert procs.exit_code == 0 and "24 (est.)" in procs.output, procs.output


@pytest.mark.slow
def test_plan_estimates_a_run_by_its_own_finished_seeds_first(tmp_path, toy):
    """An unfinished seed costs what the same run's finished seeds recorded (``meta.json``'s cpu_s), not the
    mean over its algorithm, whose other runs may train another model or at another speed."""
    from edgeml.reproduce.cost import plan_rows

    out = tmp_path / "out"
    reproduce(toy, quick=True, out=out, seeds=[0])
    cost = {"bsp_cluster.hetero=H=1-s0": 10.0, "bsp_cluster.hetero=1_3-s0": 30.0, "ssp-tight-s0": 7.0}
    for name, cpu in cost.items():
        run = unpack(out / "runs" / name)
        meta = json.loads((run / "meta.json").read_text())
        (run / "meta.json").write_text(json.dumps({**meta, "cpu_s": cpu}))
    planned = plan(load_experiment(toy), quick=True, seeds=[0, 1])
    rows = {(r.run.name, r.run.seed): r for r in plan_rows(planned, {p.dirname for p in planned}, out, True, 1)}
    assert rows[("bsp[cluster.hetero=H=1]", 0)].measured and rows[("bsp[cluster.hetero=H=1]", 0)].estimate == 10.0
    assert rows[("bsp[cluster.hetero=H=1]", 1)].estimate == 10.0      # its own seed 0, not BSP's mean (20)
    assert rows[("bsp[cluster.hetero=1:3]", 1)].estimate == 30.0
    assert rows[("ssp-tight", 1)].estimate == 7.0
    # a new entry of the same algorithm and model: BSP's runs, each scaled by the work of its budget (8 workers
    # for 2 s against 2 workers for 2 s: four times), not their plain mean
    wide = edit(tmp_path, toy, "[[runs]]\nname = \"ssp-tight\"",
                "[[runs]]\nname = \"bsp-wide\"\nalgorithm = \"bsp\"\nconfig = { cluster = { workers = 8 } }\n\n"
                "[[runs]]\nname = \"ssp-tight\"")
    planned = plan(load_experiment(wide), quick=True, seeds=[0])
    rows = {r.run.name: r for r in plan_rows(planned, {p.dirname for p in planned}, out, True, 1)}
    assert not rows["bsp-wide"].measured and rows["bsp-wide"].estimate == pytest.approx(4 * (10.0 + 30.0) / 2)


def test_plan_bounds_a_sim_runs_cost_by_the_first_budget_it_meets(tmp_path):
    """A sim run stopped by its step count costs its steps, however long its clock budget (setup 3 s, 5 ms a
    step); by the clock, 0.05 s per worker-second; with neither budget the cost is unknown."""
    from edgeml.reproduce.cost import plan_rows

    def estimate(stop: str) -> float | None:
        path = tmp_path / "one.toml"
        path.write_text(f'[experiment]\npaper = "one"\nseeds = [0]\n[settings]\nrun = {{ backend = "sim" }}\n'
                        f'cluster = {{ workers = 2 }}\nstop = {stop}\n[[runs]]\nalgorithm = "bsp"\n')
        planned = plan(load_experiment(str(path)))
        (row,) = plan_rows(planned, {p.dirname for p in planned}, tmp_path / "o", False, 1)
        return row.estimate

    assert estimate("{ max_time = 1e9, max_steps = 1000 }") == pytest.approx(3.0 + 5.0)
    assert estimate("{ max_time = 10, max_steps = 1000000 }") == pytest.approx(3.0 + 0.05 * 2 * 10)
    assert estimate("{ max_time = 0, max_steps = 0, target_accuracy = 0.9 }") is None


def test_plan_bounds_a_sim_run_by_its_algorithms_iterations(tmp_path):
    """SNAP's and the PS schemes' runs end after their section's ``iterations`` (every worker steps once per
    iteration) under a clock budget that never binds: 5 ms per worker-iteration, not the clock's bound."""
    from edgeml.reproduce.cost import plan_rows

    path = tmp_path / "one.toml"
    path.write_text('[experiment]\npaper = "one"\nseeds = [0]\n[settings]\nrun = { backend = "sim" }\n'
                    'data = { dataset = "credit-synthetic" }\nmodel = { name = "l2svm" }\n'
                    'cluster = { workers = 10 }\nnetwork = { topology = "ring" }\nstop = { max_time = 100000 }\n'
                    '[[runs]]\nalgorithm = "snap0"\nconfig = { snap0 = { iterations = 200 } }\n')
    planned = plan(load_experiment(str(path)))
    (row,) = plan_rows(planned, {p.dirname for p in planned}, tmp_path / "o", False, 1)
    assert row.estimate == pytest.approx(3.0 + 0.005 * 10 * 200)
    # on procs the iterations end it on the wall clock at a time not known ahead: unknown, not max_time's bound
    path.write_text(path.read_text().replace('backend = "sim"', 'backend = "procs"'))
    planned = plan(load_experiment(str(path)))
    (row,) = plan_rows(planned, {p.dirname for p in planned}, tmp_path / "o", False, 1)
    assert row.estimate is None


@pytest.mark.slow
def test_plan_counts_finished_runs_at_their_recorded_cost(tmp_path, toy):
    out = reproduce(toy, quick=True, out=tmp_path / "out", seeds=[0])
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--seeds", "0", "--plan", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "0 to run" in result.output and "(est.)" not in result.output
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_the_committed_verdicts_read_as_typed_verdicts():
    for path in sorted(ROOT.glob("results/*/verdicts.csv")) + sorted(ROOT.glob("results/*/quick/verdicts.csv")):
        rows = read_verdicts(path, "--check")
        assert rows and all(r.decision.kind in VERDICT_KINDS and "**" not in r.verdict for r in rows), path


@pytest.mark.slow
def test_check_compares_verdicts_with_the_committed_report(tmp_path, toy):
    (tmp_path / "experiments").mkdir()
    exp_file = tmp_path / "experiments" / "toy.toml"
    shutil.copy(toy, exp_file)
    committed = tmp_path / "results" / "toy" / "quick"
    out = reproduce(str(exp_file), quick=True, out=committed, seeds=[0])   # commit a reproduction
    args = ["reproduce", str(exp_file), "--quick", "--seeds", "0", "--check", "--jobs", "2",
            "--out", str(tmp_path / "again")]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0 and "every verdict is as committed" in result.output, result.output
    path = out / "verdicts.csv"
    rows = list(csv.DictReader(path.open()))
    claim, verdict = rows[0]["claim"], read_verdicts(path)[0].verdict
    rows[0]["verdict"] = "stronger" if rows[0]["verdict"] != "stronger" else "weaker"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    result = CliRunner().invoke(cli.app, [*args, "--resume"])
    assert result.exit_code == 1, result.output
    assert f"verdict changed: {claim}" in result.output and f"-> {verdict}" in result.output


def _descendants(pid: int) -> set[int]:
    """The live processes below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = set(), [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def _alive(pids: set[int]) -> set[int]:
    out = set()
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(p)
    return out


@pytest.mark.slow
def test_a_killed_driver_leaves_no_run_going_and_resume_finishes_the_rest(tmp_path, toy):
    """SIGKILL to the driver mid-reproduction (no chance to clean up): its runs die with it, the runs that
    finished stay as they were, and --resume runs only the rest."""
    import os
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    args = ["reproduce", toy, "--quick", "--seeds", "0,1,2,3", "--out", str(out), "--jobs", "2"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen([sys.executable, "-m", "edgeml", *args], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    from edgeml.reproduce.execute import tagged

    def kept() -> list[str]:  # finished and tagged: a run finished but killed before its tag runs again (tagged)
        runs = out / "runs"
        return sorted(p.name for p in runs.iterdir() if tagged(p)) if runs.is_dir() else []

    deadline = time.monotonic() + 180
    while not kept() and time.monotonic() < deadline:
        time.sleep(0.05)
    running = _descendants(driver.pid)
    driver.kill()
    driver.wait()
    finished = {name: evals for name, evals in _files(out, "evals.csv").items() if name in kept()}
    assert 1 <= len(finished) < 12
    deadline = time.monotonic() + 15
    while _alive(running) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(running), "a run outlived its killed driver"

    result = CliRunner().invoke(cli.app, [*args, "--resume"])
    assert result.exit_code == 0, result.output
    assert result.output.count("(kept)") >= len(finished)
    assert len(finished_runs(out)) == 12 and (out / "REPORT.md").exists()
    for name, evals in finished.items():  # nothing already finished was run again or lost
        assert _files(out, "evals.csv")[name] == evals


@pytest.mark.slow
def test_ctrl_c_stops_the_runs_in_order_keeps_the_finished_ones_and_leaves_no_process(tmp_path, toy):
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    args = ["reproduce", toy, "--quick", "--seeds", "0,1,2,3", "--out", str(out), "--jobs", "2"]
    driver = subprocess.Popen([sys.executable, "-m", "edgeml", *args], env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 180
    while not finished_runs(out) and time.monotonic() < deadline:
        time.sleep(0.05)
    running = _descendants(driver.pid)
    os.killpg(driver.pid, signal.SIGINT)  # the terminal's Ctrl-C: the driver's group, which holds no worker
    _, err = driver.communicate(timeout=60)
    assert driver.returncode == 130, err
    assert "Traceback" not in err
    deadline = time.monotonic() + 10  # (the resource tracker exits as the driver's pipe closes)
    while _alive(running) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(running), "a run outlived the interrupted reproduction"
    statuses = [rundir.finished_status(p) for p in (out / "runs").iterdir()]
    assert "completed" in statuses  # the runs that finished stay finished
    # (a run interrupted as it started was once recorded "failed" in CI: the sim backend's status before its
    # kernel ran; now "interrupted", tested in test_sim.py. Not asserted here, where the interrupt's timing is
    # the machine's)


def test_the_eta_comes_from_the_estimates_then_from_the_runs_that_ended(monkeypatch):
    from edgeml.reproduce import execute

    clock = [100.0]
    monkeypatch.setattr(execute.time, "monotonic", lambda: clock[0])
    eta = execute.Eta([60.0, 60.0, None, 120.0], cores=2)   # the unknown run costs the mean of the others, 80
    assert eta.text() == ", ETA ~2:40"                        # 320 core-seconds over 2 cores, nothing measured
    clock[0] += 30.0
    eta.ended(60.0)                                           # 60 estimated core-seconds took 30 s of wall time
    assert eta.text() == ", ETA 2:10"                         # 260 left at that pace
    for estimate in (60.0, None, 120.0):
        eta.ended(estimate)
    assert eta.text() == ""


def test_workers_end_as_soon_as_the_driver_closes_their_pipes():
    """Forked workers (``start_workers`` in a process running no other thread: a fresh one here) hold no copy
    of another worker's pipe end: each sees its pipe close and exits by itself (exit 0), none is left to be
    killed (``close`` kills a worker that has not exited 5 s after its pipe closed: exit -9)."""
    import subprocess
    import sys

    code = ("from edgeml.reproduce import parallel\n"
            "workers = parallel.start_workers(3)\n"
            "methods = [w.proc._start_method for w in workers]\n"
            "for w in workers:\n    w.close()\n"
            "print(methods, [w.proc.exitcode for w in workers])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    expected = "fork" if sys.platform.startswith("linux") else "spawn"
    assert done.stdout.strip() == f"{[expected] * 3} [0, 0, 0]", done.stdout + done.stderr
