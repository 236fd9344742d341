"""edgeml reproduce: experiment files, layer order, sweeps, and the quick baselines reproduction end to end."""

from __future__ import annotations

import pandas as pd
import pytest
from typer.testing import CliRunner

from edgeml import cli
from edgeml.errors import UserError
from edgeml.report import load_runs
from edgeml.reproduce import load_experiment, plan, reproduce

EXPERIMENT = """
[experiment]
paper = "toy"
seeds = [0, 1]
baseline = "bsp"
target_accuracy = 0.5

[settings]
run = { backend = "sim" }
stop = { max_time = 10 }
cluster = { workers = 2 }

[quick]
stop = { max_time = 2 }

[[runs]]
algorithm = "bsp"
config = { stop = { max_time = 20 } }
sweep = { "cluster.hetero" = ["H=1", "1:3"] }

[[runs]]
name = "ssp-tight"
algorithm = "ssp"
config = { ssp = { staleness = 1 } }
quick = { stop = { max_time = 3 } }

[[claims]]
text = "tighter is slower"
metric = "time_to_target"
run = "ssp-tight"
kind = "ratio"
"""


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(EXPERIMENT)
    return str(path)


def test_layers_merge_in_order_and_sweeps_expand(toy):
    exp = load_experiment(toy)
    full = plan(exp)
    assert [(p.name, p.seed) for p in full] == [
        ("bsp[cluster.hetero=H=1]", 0), ("bsp[cluster.hetero=H=1]", 1), ("bsp[cluster.hetero=1:3]", 0),
        ("bsp[cluster.hetero=1:3]", 1), ("ssp-tight", 0), ("ssp-tight", 1)]
    assert full[2].layers["cluster"] == {"workers": 2, "hetero": "1:3"}
    assert full[0].layers["stop"]["max_time"] == 20       # the run's config beats [settings]
    assert full[4].layers["ssp"] == {"staleness": 1}
    quick = plan(exp, quick=True, seeds=[7], backend="procs")
    assert [p.layers["stop"]["max_time"] for p in quick] == [2, 2, 3]  # [quick] beats the run config
    assert {p.layers["run"]["backend"] for p in quick} == {"procs"} and {p.seed for p in quick} == {7}
    assert quick[0].dirname == "bsp_cluster.hetero=H=1-s7"


def test_bad_experiments_are_refused_with_one_line(tmp_path, toy):
    with pytest.raises(UserError, match="no experiment 'nope': choose one of .*baselines"):
        load_experiment("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text(EXPERIMENT.replace('name = "ssp-tight"', 'nmae = "ssp-tight"'))
    with pytest.raises(UserError, match="unknown key 'nmae'"):
        load_experiment(str(bad))
    bad.write_text(EXPERIMENT.replace('staleness = 1', 'stalenes = 1'))
    with pytest.raises(UserError, match="run 'ssp-tight': unknown config key 'ssp.stalenes'"):
        plan(load_experiment(str(bad)))
    bad.write_text(EXPERIMENT.replace('baseline = "bsp"', 'baseline = "bps"'))
    with pytest.raises(UserError, match="baseline 'bps' names no run"):
        plan(load_experiment(str(bad)))
    bad.write_text(EXPERIMENT.replace('run = "ssp-tight"', 'run = "ssp"'))
    with pytest.raises(UserError, match="names run 'ssp'"):
        plan(load_experiment(str(bad)))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="not written by edgeml reproduce"):
        reproduce(toy, out=tmp_path / "mine")
    cli._register_extensions()
    result = CliRunner().invoke(cli.app, ["reproduce", "nope"])
    assert result.exit_code == 2 and "baselines" in result.output


def test_quick_baselines_reproduction(tmp_path):
    out = tmp_path / "out"
    cli._register_extensions()
    result = CliRunner().invoke(cli.app, ["reproduce", "baselines", "--quick", "--seeds", "0,1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "[6/6]" in result.output and "REPORT.md" in result.output

    table = pd.read_csv(out / "compare.csv").set_index("run")
    assert list(table.index) == ["bsp", "ssp", "asp"] and set(table["seeds"]) == {2}
    assert table.loc["bsp", "speedup"] == 1.0
    # Under 1:1:3, BSP's two fast workers block two thirds of the time: 4/9 of all worker time is not compute.
    assert table.loc["bsp", "noncompute_fraction"] == pytest.approx(4 / 9, abs=0.03)
    assert table.loc["asp", "noncompute_fraction"] < 0.05

    for name in ("convergence_time", "convergence_steps", "convergence_bytes", "time_breakdown", "throughput",
                 "staleness"):
        assert (out / "figures" / f"{name}.png").stat().st_size > 1000
        assert (out / "figures" / f"{name}.pdf").stat().st_size > 1000

    report = (out / "REPORT.md").read_text()
    assert "edgeml reproduce baselines --quick" in report and "## Differences from the paper" in report
    assert "This is the **quick** reproduction" in report.split("## How this was produced")[0]
    claims = report.split("## Claims", 1)[1].split("## Results", 1)[0]
    texts = [c["text"] for c in load_experiment("baselines").claims]
    for text in texts:
        row = next(line for line in claims.splitlines() if line.startswith(f"| {text} |"))
        assert row.rstrip(" |").endswith(("holds", "weaker", "marginal", "does not hold"))
    assert "![time_breakdown](figures/time_breakdown.png)" in report

    # The table is rebuilt from the run directories alone, with the experiment's run names.
    runs = load_runs([str(out / "runs")])
    assert sorted({r.label for r in runs}) == ["asp", "bsp", "ssp"] and len(runs) == 6
    again = CliRunner().invoke(cli.app, ["compare", str(out / "runs"), "--target-accuracy", "0.85"])
    assert again.exit_code == 0 and "speedup vs bsp" in again.output


def test_resume_keeps_finished_runs_and_reruns_the_rest(tmp_path, toy):
    out = tmp_path / "out"
    reproduce(toy, quick=True, out=out, seeds=[0])
    runs = out / "runs"
    kept = runs / "ssp-tight-s0"
    before = (kept / "summary.json").stat().st_mtime_ns
    (runs / "bsp_cluster.hetero=1_3-s0" / "summary.json").unlink()   # as if stopped during this run
    changed = runs / "bsp_cluster.hetero=H=1-s0" / "config.toml"
    changed.write_text(changed.read_text().replace("max_time = 2", "max_time = 1"))  # a different config
    cli._register_extensions()
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert "ssp-tight seed 0 (kept)" in result.output and result.output.count("(kept)") == 1
    assert (kept / "summary.json").stat().st_mtime_ns == before
    assert "max_time = 2" in changed.read_text()
    assert (runs / "bsp_cluster.hetero=1_3-s0" / "summary.json").exists()
    # without --resume everything runs again
    reproduce(toy, quick=True, out=out, seeds=[0])
    assert (kept / "summary.json").stat().st_mtime_ns != before


def test_runs_naming_a_figure_are_drawn_together(tmp_path, toy):
    grouped = tmp_path / "grouped.toml"
    grouped.write_text(open(toy).read().replace('name = "ssp-tight"', 'name = "ssp-tight"\nfigure = "Fig. 2: SSP"'))
    out = reproduce(str(grouped), quick=True, out=tmp_path / "out", seeds=[0])
    assert (out / "figures" / "convergence_time.png").exists()             # the runs that name no figure
    assert (out / "figures" / "fig-2" / "convergence_time.png").exists()   # the group "Fig. 2: SSP"
    report = (out / "REPORT.md").read_text()
    assert "### Fig. 2: SSP" in report and "Runs: `ssp-tight`." in report
    assert "![convergence_time](figures/fig-2/convergence_time.png)" in report


def test_against_sweep_draws_metrics_against_the_swept_value(tmp_path, toy):
    swept = tmp_path / "swept.toml"
    swept.write_text(open(toy).read().replace(
        'config = { ssp = { staleness = 1 } }',
        'sweep = { "ssp.staleness" = [0, 2] }\nagainst_sweep = ["final_accuracy", "total_steps"]').replace(
        'run = "ssp-tight"', 'run = "ssp-tight[ssp.staleness=2]"'))
    out = reproduce(str(swept), quick=True, out=tmp_path / "out", seeds=[0, 1])
    fig = out / "figures" / "sweep_ssp-tight.png"
    assert fig.stat().st_size > 1000
    assert "![sweep_ssp-tight](figures/sweep_ssp-tight.png)" in (out / "REPORT.md").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(open(toy).read().replace('name = "ssp-tight"', 'name = "ssp-tight"\nagainst_sweep = ["x"]'))
    with pytest.raises(UserError, match="against_sweep needs a sweep over one key"):
        load_experiment(str(bad))


def test_only_runs_the_matching_runs_and_keeps_the_rest(tmp_path, toy):
    out = tmp_path / "out"
    cli._register_extensions()
    args = ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out)]
    # a fresh folder: only the SSP run runs; the BSP runs are left out, so there is no baseline to pair with
    result = CliRunner().invoke(cli.app, [*args, "--only", "ssp*"])
    assert result.exit_code == 0, result.output
    assert result.output.count("not selected by --only and not run yet") == 2
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["ssp-tight-s0"]
    assert list(pd.read_csv(out / "compare.csv")["run"]) == ["ssp-tight"]
    assert "not measured: no run 'bsp'" in (out / "REPORT.md").read_text()
    # then the BSP runs: the SSP run is kept, and the table covers all three
    before = (out / "runs" / "ssp-tight-s0" / "summary.json").stat().st_mtime_ns
    result = CliRunner().invoke(cli.app, [*args, "--only", "bsp*"])
    assert result.exit_code == 0, result.output
    assert "ssp-tight seed 0 (kept)" in result.output
    assert (out / "runs" / "ssp-tight-s0" / "summary.json").stat().st_mtime_ns == before
    assert len(pd.read_csv(out / "compare.csv")) == 3
    result = CliRunner().invoke(cli.app, [*args, "--only", "nothing*"])
    assert result.exit_code == 2 and "--only 'nothing*' matches no run of toy" in result.output
