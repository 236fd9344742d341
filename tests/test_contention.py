"""Procs runs that know when the host distorts them: each worker's realised step time against its throttle target
(``edgeml.runtime.procs.contention``), the mark in meta.json, at the end of the run, in ``compare`` and in
``plot``'s legends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from conftest import pythonpath
from edgeml.cli import app
from edgeml.runtime.procs.contention import MARGIN, MIN_STEPS, assess, message

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
NAMES = {1: "ps 0", 2: "worker 0", 3: "worker 1"}
HOST = {"cores": 2, "samples": 4, "cpu_percent_mean": 97.0, "load1_mean": 6.5}


def steps(n: int, target_ms: float, realised_ms: float) -> dict:
    return {"steps": n, "target_s": n * target_ms / 1e3, "realised_s": n * realised_ms / 1e3,
            "compute_s": n * realised_ms / 2e3}


def test_a_worker_over_its_target_by_more_than_the_margin_marks_the_run():
    over = 10.0 * (1 + MARGIN) + 0.5
    record = assess({1: None, 2: steps(100, 10.0, 10.2), 3: steps(100, 10.0, over)}, NAMES, HOST, throttled=True)
    assert record["marked"] and record["over"] == ["worker 1"] and record["worst"] == "worker 1"
    assert record["nodes"]["worker 1"]["ratio"] == pytest.approx(over / 10.0)
    assert record["nodes"]["worker 0"]["target_ms"] == pytest.approx(10.0)
    assert "ps 0" not in record["nodes"]  # no throttled steps: nothing to say
    line = message(record, workers=18)
    assert "--backend sim" in line and "fewer than 18 workers" in line and "10.0 ms target" in line
    assert "load 6.5 on 2 cores" in line


def test_realised_steps_within_the_margin_leave_the_run_unmarked():
    record = assess({2: steps(100, 10.0, 10.0 * (1 + MARGIN) - 0.1), 3: steps(100, 10.0, 10.1)}, NAMES, HOST,
                    throttled=True)
    assert not record["marked"] and record["over"] == []


def test_too_few_steps_or_no_throttle_never_mark():
    few = assess({2: steps(MIN_STEPS - 1, 10.0, 40.0)}, NAMES, HOST, throttled=True)
    assert not few["marked"] and few["worst"] is None
    unthrottled = assess({2: steps(100, 10.0, 40.0)}, NAMES, HOST, throttled=False)
    assert not unthrottled["marked"] and not unthrottled["applies"]


# ------------------------------------------------------------------ compare and plot


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """Two short sim runs; the second's meta.json is then marked as a procs run beside a CPU hog would be."""
    out = tmp_path_factory.mktemp("runs")
    paths = []
    for hetero in ("homogeneous", "1:1:1:3"):
        result = runner.invoke(app,
                               ["run", "bsp", "--backend", "sim", "--hetero", hetero, "--max-time", "3", "--out",
                                str(out), "--quiet"])
        assert result.exit_code == 0, result.output
        paths.append(Path(result.output.strip().splitlines()[-1]))
    meta = json.loads((paths[1] / "meta.json").read_text())
    (paths[1] / "meta.json").write_text(json.dumps({**meta, "oversubscribed": True}))
    return out


def test_compare_marks_the_host_bound_runs_and_says_what_to_do(two_runs):
    from edgeml.analysis.compare import compare_dirs

    cmp = compare_dirs([str(two_runs)])
    assert cmp.host_bound == {"bsp[cluster.hetero=1:1:1:3]": 1}
    _, _, cells = cmp.display()
    names = [row[0] for row in cells]
    assert "bsp[cluster.hetero=1:1:1:3] (host-bound)" in names and "bsp[cluster.hetero=homogeneous]" in names
    md = cmp.markdown()
    assert "(host-bound): in 1 run of bsp[cluster.hetero=1:1:1:3]" in md and "--backend sim" in md
    result = runner.invoke(app, ["compare", str(two_runs)], terminal_width=240)
    assert "(host-bound)" in result.output and "fewer workers" in " ".join(result.output.split())


def test_an_unmarked_comparison_reads_as_before(two_runs, tmp_path):
    from edgeml.analysis.compare import compare_dirs

    quiet = [p for p in two_runs.iterdir() if not json.loads((p / "meta.json").read_text()).get("oversubscribed")]
    cmp = compare_dirs([str(p) for p in quiet])
    assert not cmp.host_bound and "host-bound" not in cmp.markdown()


def test_the_legend_marks_a_method_with_host_bound_runs():
    from edgeml.analysis.plots.style import Styles

    df = pd.DataFrame({"method": ["BSP", "BSP", "SSP"], "setting": ["a", "b", "a"], "host_bound": [False, True, False]})
    st = Styles.of(df)
    assert st.notes == {"BSP": "host-bound"}
    st.add_notes({"BSP": "same curve as SSP"})
    assert st.notes["BSP"] == "host-bound; same curve as SSP"


def test_plot_tables_carry_the_mark(two_runs):
    from edgeml.analysis.figures import figure_tables
    from edgeml.rundir import load_runs

    evals = figure_tables(load_runs([str(two_runs)]))["evals"]
    marked = evals.groupby("setting")["host_bound"].agg(["min", "max"])
    hogged = next(s for s in marked.index if "1:1:1:3" in s)
    quiet = next(s for s in marked.index if "homogeneous" in s)
    assert marked.loc[hogged].tolist() == [True, True] and marked.loc[quiet].tolist() == [False, False]


# ------------------------------------------------------------------ procs runs on a quiet and a hogged host


def procs_run(out: Path, base_step_s: float, seconds: float = 4.0) -> tuple[dict, str]:
    # LeNet-5 on batches of 700 (of the 718 digits a worker holds): a step computes for over ten milliseconds, well
    # above the scheduler's granularity and the head start a waking process has over busy loops, so that CPU hogs
    # stretch the computation itself rather than only the waits around it (steps of 256 digits, a few ms, were
    # stretched by only ~20% on some hosts: too close to the 25% margin)
    p = subprocess.run([sys.executable, "-m", "edgeml", "run", "bsp", "--workers", "2", "--max-time", str(seconds),
                        "--set", f"cluster.base_step_s={base_step_s}", "--model", "lenet5", "--batch-size", "700",
                        "--out", str(out),
                        "--quiet"],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": pythonpath(ROOT)})
    assert p.returncode == 0, p.stderr[-3000:]
    path = Path(p.stdout.strip().splitlines()[-1])
    return json.loads((path / "meta.json").read_text()), p.stderr


@pytest.mark.slow
def test_a_procs_run_beside_cpu_hogs_is_marked_and_a_throttle_dominated_one_is_not(tmp_path):
    # Quiet: steps throttled to 200 ms, far above a LeNet-5 step of 700 digits (over ten milliseconds), so that
    # even a host busy with other work leaves the realised steps on their target.
    quiet, said = procs_run(tmp_path / "quiet", 0.2)
    assert quiet["contention"]["applies"] and not quiet["oversubscribed"], json.dumps(quiet["contention"])
    assert "host contention" not in said
    # Hogged: targets at the computation's own time measured in that run (its least contended worker's), and two
    # busy loops per core beside it: the computation stretches past the target, which throttling cannot hide.
    compute_ms = min(n["compute_ms"] for n in quiet["contention"]["nodes"].values())
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
            for _ in range(2 * (os.cpu_count() or 1))]
    try:
        hogged, said = procs_run(tmp_path / "hogged", compute_ms / 1e3)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    record = hogged["contention"]
    assert hogged["oversubscribed"] and record["marked"] and record["worst_ratio"] > 1 + MARGIN, json.dumps(record)
    assert record["host"]["samples"] > 0 and "load1_mean" in record["host"]
    assert "host contention distorted this run" in said and "--backend sim" in said
