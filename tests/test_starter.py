"""The README's first comparison (``--preset starter``): its verdict's direction, not its numbers. ADSP reaches the
target before SSP, SSP before BSP, each by more than the evaluation resolution; and ADSP's commit-rate search runs
as Alg. 1 does after its burn-in."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from edgeml.cli import PRESETS, app

runner = CliRunner()
TARGET = 0.9  # the README's


@pytest.fixture(scope="module")
def starter(tmp_path_factory) -> dict[str, Path]:
    """The recipe's three runs, each stopped at the target (the times to it are what the verdict reads)."""
    out = tmp_path_factory.mktemp("starter")
    paths = {}
    for algorithm in ("bsp", "ssp", "adsp"):
        result = runner.invoke(app, ["run", algorithm, "--preset", "starter", "--target-accuracy", str(TARGET),
                                     "--out", str(out), "--quiet"])
        assert result.exit_code == 0, result.output
        paths[algorithm] = Path(result.output.strip().splitlines()[-1])
    return paths


def test_the_starter_preset_runs_on_the_sim_backend_in_a_heterogeneous_world():
    layers = PRESETS["starter"][0]
    assert layers["run"]["backend"] == "sim"  # deterministic, whatever else the host runs
    assert set(layers) <= {"run", "data", "model", "cluster", "network", "stop", "eval"}  # no algorithm's own


def test_adsp_reaches_the_target_before_ssp_and_ssp_before_bsp(starter):
    from edgeml.analysis.compare import compare
    from edgeml.analysis.convergence import Target
    from edgeml.rundir import load_runs

    cmp = compare(load_runs([str(p) for p in starter.values()]), Target("accuracy", TARGET, "stays"), "bsp")
    times = dict(zip(cmp.per_run["run"], cmp.per_run["time_to_target"]))
    resolution = cmp.eval_interval
    assert all(pd.notna(t) for t in times.values()), times
    assert times["adsp"] + 2 * resolution < times["ssp"], times
    assert times["ssp"] + 2 * resolution < times["bsp"], times


def test_adsp_burns_in_at_the_first_rate_then_searches(tmp_path):
    """The whole 60 s ADSP run of the starter world (the search, not the verdict): the scheduler trains at
    Alg. 1's first rate until the loss curve bends (burn_in rows, rate 1, at least two periods), then
    compares rates in trials of two periods, and each epoch keeps a rate it compared."""
    from edgeml.rundir import load_runs

    result = runner.invoke(app, ["run", "adsp", "--preset", "starter", "--out", str(tmp_path), "--quiet"])
    assert result.exit_code == 0, result.output
    run = load_runs([result.output.strip().splitlines()[-1]])[0]
    decisions = run.table("series/decisions.csv")
    trials = run.table("series/trials.csv")
    burn = decisions[decisions["name"] == "burn_in"]
    assert len(burn) >= 2 and (burn["rate"] == 1).all()
    assert burn["time_s"].max() < trials["time_s"].min()
    assert trials["rate"].nunique() >= 3 and (trials["samples"] == 3).all()
    rates = decisions[decisions["name"] == "commit_rate"]
    for epoch, compared in trials.groupby("epoch"):
        kept = rates[rates["epoch"] == epoch]["value"].iloc[-1]
        assert kept in set(compared["rate"]), (epoch, kept)


def test_an_unknown_preset_is_refused_with_the_closest_name(tmp_path):
    result = runner.invoke(app, ["run", "bsp", "--preset", "startr", "--out", str(tmp_path / "runs")])
    assert result.exit_code == 2 and "did you mean 'starter'?" in result.output
    assert not (tmp_path / "runs").exists()


def test_flags_override_the_preset(tmp_path):
    from edgeml.config import build_config, merge

    cfg = build_config(merge(PRESETS["starter"][0], {"run": {"algorithm": "bsp"}}, {"cluster": {"workers": 3,
                                                                                                  "hetero": "1:1:2"}}))
    assert cfg.cluster.workers == 3 and cfg.cluster.random_wait_s == 0.25 and cfg.run.backend == "sim"
