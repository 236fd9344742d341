"""Figures: each plot function labels its axes; edgeml plot writes non-empty PNG and PDF files."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from edgeml import cli, plots
from edgeml.report import load_runs, write_figures
from test_report import make_run


def evals_frame() -> pd.DataFrame:
    rows = []
    for run, speed in (("bsp", 1.0), ("asp", 2.0)):
        for seed in (0, 1):
            for t in range(6):
                rows.append({"run": run, "seed": seed, "time_s": float(t), "total_steps": 10 * t * speed + seed,
                             "total_mb": 0.1 * t * speed, "accuracy": 1 - 0.8 * np.exp(-speed * t),
                             "loss": 2 * np.exp(-speed * t)})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("x, label", [("time_s", "training time (s)"), ("total_steps", "total steps over all workers"),
                                      ("total_mb", "bytes sent by all nodes (MB)")])
def test_convergence_axes(x, label):
    fig = plots.convergence(evals_frame(), x, "digits, mlp")
    acc, loss = fig.axes[:2]
    assert (acc.get_xlabel(), acc.get_ylabel()) == (label, "test accuracy")
    assert (loss.get_xlabel(), loss.get_ylabel()) == (label, "test loss")
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["bsp", "asp"]
    assert "digits, mlp" in fig._suptitle.get_text()
    assert len(acc.lines) >= 2 and acc.collections  # mean lines and the seed bands


def test_breakdown_throughput_staleness_decisions_axes():
    nodes = pd.DataFrame({"run": ["bsp"] * 2 + ["asp"] * 2, "worker": ["0\n×1", "1\n×3"] * 2,
                          "computation": [33.0, 100.0, 100.0, 100.0], "communication": [0.0] * 4,
                          "waiting": [67.0, 0.0, 0.0, 0.0]})
    fig = plots.time_breakdown(nodes)
    assert [ax.get_title() for ax in fig.axes] == ["bsp", "asp"]
    assert fig.axes[0].get_ylabel() == "share of its time (%)"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["computation", "communication", "waiting"]
    assert len(fig.axes[0].patches) == 6  # 2 workers x 3 parts

    summary = pd.DataFrame({"run": ["bsp", "bsp", "asp"], "samples_per_s": [100.0, 110.0, 300.0],
                            "bytes_per_s": [1e6, 1e6, 3e6]})
    fig = plots.throughput(summary)
    assert [ax.get_ylabel() for ax in fig.axes] == ["training throughput (samples/s)", "traffic, all nodes (MB/s)"]
    assert [round(p.get_height()) for p in fig.axes[0].patches if p.get_height()] == [105, 300]

    st = pd.DataFrame({"run": ["ssp"] * 3 + ["asp"] * 2, "staleness": [0, 1, 2, 0, 5]})
    fig = plots.staleness(st)
    assert fig.axes[0].get_xlabel().startswith("staleness") and fig.axes[0].get_ylabel() == "fraction of updates"

    de = pd.DataFrame({"run": ["adsp"] * 4 + ["esync"] * 2, "seed": 0, "rank": [1, 1, 2, 2, 1, 1],
                       "time_s": [0, 1, 0, 1, 0, 2], "name": ["c_target"] * 4 + ["local_iters"] * 2,
                       "value": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    fig = plots.decisions(de)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["c_target", "local_iters"]
    assert [ax.get_xlabel() for ax in shown] == ["training time (s)"] * 2
    assert sum(len(line.get_xdata()) > 0 for line in shown[0].lines) == 2  # one line per node
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["adsp", "esync"]


def test_commits_figure_shows_counts_target_and_spread():
    df = pd.DataFrame({"run": "adsp", "seed": 0, "time_s": [4.0, 4.0, 8.0, 8.0], "worker": [0, 1, 0, 1],
                       "commits": [1, 0, 2, 2], "target": [1, 1, 2, 2]})
    fig = plots.commits(df)
    counts, spread = fig.axes[:2]
    assert (counts.get_ylabel(), spread.get_ylabel()) == ("commits so far", "max - min commits over workers")
    assert len(counts.lines) == 3  # two workers and C_target
    assert list(spread.lines[0].get_ydata()) == [1, 0]  # one apart at the first checkpoint, equal at the second


def test_trials_figure_draws_one_line_per_search():
    df = pd.DataFrame({"run": "adsp", "seed": 0, "epoch": [0, 0, 0, 1, 1], "rate": [1, 2, 1, 1, 2],
                       "reward": [0.1, 0.3, 0.12, 0.2, 0.1]})
    ax = plots.trials(df).axes[0]
    assert ax.get_xlabel().startswith("commit rate") and ax.get_ylabel().startswith("reward")
    lines = [line for line in ax.lines if len(line.get_xdata())]
    assert sorted(list(line.get_ydata()) for line in lines) == [[0.1, 0.3], [0.2, 0.1]]  # first reward per rate


def test_plot_command_writes_every_figure(tmp_path):
    staleness = pd.DataFrame({"time_s": [0.1, 0.2], "rank": [1, 1], "role": "ps", "worker": [0, 1],
                              "staleness": [0, 2]})
    decisions = pd.DataFrame({"time_s": [0.0, 1.0], "rank": [1, 1], "role": "ps", "name": "c_target",
                              "value": [2.0, 3.0]})
    commits = pd.DataFrame({"time_s": [4.0, 4.0, 8.0, 8.0], "rank": 2, "role": "scheduler", "checkpoint": [1, 1, 2, 2],
                            "worker": [0, 1, 0, 1], "commits": [1, 0, 2, 2], "target": [1, 1, 2, 2]})
    trials = pd.DataFrame({"time_s": [8.0, 8.0], "rank": 2, "role": "scheduler", "epoch": 0, "rate": [1, 2],
                           "reward": [0.1, 0.2]})
    for seed in (0, 1):
        make_run(tmp_path / "runs", f"bsp{seed}", "bsp", seed)
        make_run(tmp_path / "runs", f"asp{seed}", "asp", seed,
                 series={"staleness": staleness, "decisions": decisions, "commits": commits, "trials": trials})
    cli._register_extensions()
    result = CliRunner().invoke(cli.app, ["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    names = ["convergence_time", "convergence_steps", "convergence_bytes", "time_breakdown", "throughput",
             "staleness", "decisions", "commits", "trials"]
    for name in names:
        for ext in ("png", "pdf"):
            path = tmp_path / "fig" / f"{name}.{ext}"
            assert path.stat().st_size > 1000
            assert str(path) in result.output
    assert (tmp_path / "fig" / "convergence_time.png").read_bytes()[:4] == b"\x89PNG"


def test_runs_without_series_skip_those_figures(tmp_path):
    make_run(tmp_path, "bsp")
    written = {p.stem for p in write_figures(load_runs([str(tmp_path)]), tmp_path / "fig")}
    assert written == {"convergence_time", "convergence_steps", "convergence_bytes", "time_breakdown", "throughput"}


def test_a_run_without_nodes_csv_gives_one_line(tmp_path):
    (make_run(tmp_path / "runs", "old") / "nodes.csv").unlink()
    cli._register_extensions()
    result = CliRunner().invoke(cli.app, ["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "fig")])
    assert result.exit_code == 2
    assert "missing nodes.csv" in result.output and "Traceback" not in result.output
