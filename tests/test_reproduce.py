"""edgeml reproduce: experiment files, layer order, sweeps, figure groups, claims, keeping finished runs, failed
runs, and the quick baselines reproduction end to end."""

from __future__ import annotations

import math

import csv
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from edgeml import cli, rundir
from edgeml.errors import UserError
from edgeml.reproduce import reproduce
from edgeml.reproduce.load import load_experiment
from edgeml.reproduce.plan import plan, select
from edgeml.rundir import load_runs
from edgeml.schema import FORMER_DEFAULTS

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
baseline = "bsp[cluster.hetero=H=1]"
kind = "ratio"
"""


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(EXPERIMENT)
    return str(path)


def unpack(run: Path) -> Path:
    """A compacted run (``run.zip``) as loose files again, as a run never compacted, so that a test can edit or
    delete one of them; returns ``run``."""
    for name, data in rundir.files(run).items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(data)
    (run / rundir.ARCHIVE).unlink(missing_ok=True)
    return run


def finished_runs(out: Path) -> list[str]:
    """The names of the finished runs in a reproduction's output folder, compacted or not."""
    runs = out / "runs"
    return sorted(p.name for p in runs.iterdir() if rundir.finished_status(p) in rundir.FINISHED) \
        if runs.is_dir() else []


def edit(tmp_path, toy: str, old: str, new: str, name: str = "edited.toml") -> str:
    text = open(toy).read()
    assert old in text
    (tmp_path / name).write_text(text.replace(old, new))
    return str(tmp_path / name)


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


def test_settings_may_hold_each_algorithms_defaults_for_its_own_runs(tmp_path, toy):
    """A section of [settings] named after an algorithm applies to that algorithm's runs only (the run's config
    beats it); one naming an algorithm no run runs is refused."""
    path = edit(tmp_path, toy, "cluster = { workers = 2 }\n",
                "cluster = { workers = 2 }\nssp = { staleness = 4, lr = 0.2 }\nbsp = { lr = 0.3 }\n")
    runs = plan(load_experiment(path))
    assert {p.algorithm: p.layers.get("ssp") for p in runs} == {"bsp": None, "ssp": {"staleness": 1, "lr": 0.2}}
    assert {p.algorithm: p.layers.get("bsp") for p in runs} == {"bsp": {"lr": 0.3}, "ssp": None}
    assert {p.algorithm: p.cfg.algo.lr for p in runs} == {"bsp": 0.3, "ssp": 0.2}
    idle = edit(tmp_path, toy, "cluster = { workers = 2 }\n", "cluster = { workers = 2 }\nasp = { lr = 0.2 }\n",
                name="idle.toml")
    with pytest.raises(UserError, match=r"\[settings\] asp names an algorithm no run"):
        plan(load_experiment(idle))


SHARED = """
[experiment]
paper = "shared"
seeds = [0]
baseline = "bsp"
target_accuracy = 0.5
labels = { "algorithm.lr" = "alpha" }

[settings]
run.backend = "sim"
data.dataset = "digits"
model.name = "mlp"
stop.max_time = 2
cluster.workers = 2
eval.interval = 0.5

[[group]]
sweep = { "algorithm.lr" = [0.05, 0.2] }
runs = [{ algorithm = "bsp" }, { algorithm = "ssp", config = { ssp = { staleness = 1 } } }]

[[claims]]
text = "at one shared step size SSP ends at least as accurate as BSP"
metric = "final_accuracy"
run = "ssp"
kind = "difference"
direction = "higher"
"""


def test_an_algorithm_sweep_key_sets_each_runs_own_algorithm_and_pairs_the_methods_at_each_value(tmp_path):
    """``"algorithm.lr"`` sweeps bsp.lr in the BSP runs and ssp.lr in the SSP runs; both name their points
    alike, so a claim of SSP against BSP reads at each shared value, SSP's against BSP's at the same one."""
    path = tmp_path / "shared.toml"
    path.write_text(SHARED)
    planned = plan(load_experiment(str(path)))
    assert [p.name for p in planned] == ["bsp[algorithm.lr=0.05]", "bsp[algorithm.lr=0.2]", "ssp[algorithm.lr=0.05]",
                                         "ssp[algorithm.lr=0.2]"]
    assert [(p.cfg.algo.lr, p.point) for p in planned] == [(v, {"algorithm.lr": v}) for v in (0.05, 0.2)] * 2
    assert planned[2].layers["ssp"] == {"staleness": 1, "lr": 0.05} and "ssp" not in planned[0].layers
    reproduce(str(path), out=tmp_path / "out")
    final = pd.read_csv(tmp_path / "out" / "compare_runs.csv").set_index("run")["final_accuracy"]
    assert final["bsp[algorithm.lr=0.05]"] != final["bsp[algorithm.lr=0.2]"]  # each point ran at its own value
    verdicts = pd.read_csv(tmp_path / "out" / "verdicts.csv").set_index("at")
    assert sorted(verdicts.index) == ["algorithm.lr=0.05", "algorithm.lr=0.2"]
    for at, row in verdicts.iterrows():  # BSP's accuracy less SSP's, at the same value on both sides
        assert row["point"] == pytest.approx(final[f"bsp[{at}]"] - final[f"ssp[{at}]"], abs=1e-9)


def test_labels_name_runs_and_settings_and_leave_the_plan_alone(tmp_path, toy):
    labelled = edit(tmp_path, toy, 'name = "ssp-tight"', 'name = "ssp-tight"\nlabel = "SSP (s = 1)"')
    labelled = edit(tmp_path, labelled, "seeds = [0, 1]", 'seeds = [0, 1]\nlabels = { "cluster.hetero" = "H" }',
                    "labelled.toml")
    exp = load_experiment(labelled)
    assert exp.run_names() == {"bsp": "BSP", "ssp-tight": "SSP (s = 1)"}
    assert exp.labels == {"cluster.hetero": "H"}
    # names are for readers: the planned runs (and so --resume) are those of the file without them
    assert [(p.name, p.dirname, p.layers) for p in plan(exp)] == \
        [(p.name, p.dirname, p.layers) for p in plan(load_experiment(toy))]


def test_run_seeds_quick_seeds_and_quick_sweeps(tmp_path, toy):
    path = edit(tmp_path, toy, 'sweep = { "cluster.hetero" = ["H=1", "1:3"] }',
                'sweep = { "cluster.hetero" = ["H=1", "1:3"] }\nquick_sweep = { "cluster.hetero" = ["1:5"] }\n'
                'seeds = [3]')
    exp = load_experiment(path.replace("edited", "edited"))
    assert [(p.name, p.seed) for p in plan(exp)][:2] == [("bsp[cluster.hetero=H=1]", 3), ("bsp[cluster.hetero=1:3]", 3)]
    assert [p.name for p in plan(exp, quick=True)][:1] == ["bsp[cluster.hetero=1:5]"]
    quick_seeds = edit(tmp_path, path, "seeds = [0, 1]\n", "seeds = [0, 1]\nquick_seeds = [1, 3]\n", "q.toml")
    seeds = {p.name: p.seed for p in plan(load_experiment(quick_seeds), quick=True)}
    # with --quick, each run keeps its seeds among quick_seeds: bsp names seed 3, ssp-tight has 0 and 1
    assert seeds == {"bsp[cluster.hetero=1:5]": 3, "ssp-tight": 1}
    # a run's own quick_seeds are its seeds with --quick, whatever the experiment's; the full plan keeps its seeds
    own = edit(tmp_path, quick_seeds, 'name = "ssp-tight"\n', 'name = "ssp-tight"\nquick_seeds = [7, 8]\n', "own.toml")
    quick = sorted((p.name, p.seed) for p in plan(load_experiment(own), quick=True))
    assert quick == [("bsp[cluster.hetero=1:5]", 3), ("ssp-tight", 7), ("ssp-tight", 8)]
    assert sorted(p.seed for p in plan(load_experiment(own)) if p.name == "ssp-tight") == [0, 1]
    bad = edit(tmp_path, own, "quick_seeds = [7, 8]", "quick_seeds = [7, -1]", "bad.toml")
    with pytest.raises(UserError, match="quick_seeds"):
        plan(load_experiment(bad))


@pytest.mark.parametrize("old, new, message", [
    ('name = "ssp-tight"', 'nmae = "ssp-tight"', "unknown key 'nmae'"),
    ('kind = "ratio"', 'kind = "ratio"\ntarget = 0.9', "unknown key 'target' in toy.toml \\[\\[claims\\]\\]: allowed"),
    ('kind = "ratio"', 'kind = "ratio"\nfigure = "nope"', "names figure 'nope'"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nrule = "sometimes"', "rule = 'sometimes'"),
    ('target_accuracy = 0.5', 'target_accuracy = [0.5, "x"]', "target_accuracy must be a number"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\n\n[[runs]]\nalgorithm = "bsp"',
     "no run is drawn in figure 'f'"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\npanels = ["pie"]\n\n[[runs]]\n'
     'figure = "f"\nalgorithm = "bsp"', "unknown panel 'pie'"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\nagainst = [{ x = "a", ys = [] }]\n\n'
     '[[runs]]\nfigure = "f"\nalgorithm = "bsp"', "unknown key 'ys'"),
    ('[[runs]]\nalgorithm = "bsp"', '[[runs]]\nseeds = []\nalgorithm = "bsp"', "seeds must be a non-empty list"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = { "cluster.heteor" = "H" }', "no config key.*cluster.hetero"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = { "hetero" = "H" }', "labels names 'hetero', which is no config key"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = { "ssp.staleness" = "" }', "must be named by a short string"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = { "ssp.staleness" = 3 }', "must be named by a short string"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = { "ssp.staleness" = "s\\nx" }', "must be named by a short string"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = "H"', "labels must be a table"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = { "ssp.staleness" = "{} to {}" }', "at most one {}"),
    ('seeds = [0, 1]', 'seeds = [0, 1]\nlabels = { "ssp.staleness" = "{}" }', "must be named by a short string"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\nsettled = { decision = "commit_rate", '
     'fixed = "adsp.fixed_rat" }\n\n[[runs]]\nfigure = "f"\nalgorithm = "bsp"', "settled.fixed names 'adsp.fixed_rat'.*"
     "adsp.fixed_rate"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\nsettled = { decision = "commit_rate" }\n\n'
     '[[runs]]\nfigure = "f"\nalgorithm = "bsp"', "settled names a decision and the key that fixes it"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\nsettled = { decision = "commit_rate", '
     'fixed = "adsp.fixed_rate", rule = "stoping" }\n\n[[runs]]\nfigure = "f"\nalgorithm = "bsp"',
     "optionally the rule times are read by"),
    ('name = "ssp-tight"', 'name = "ssp-tight"\nlabel = ""', "label must be a short name"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\nruns = []\n\n[[runs]]\nfigure = "f"\n'
     'algorithm = "bsp"', "figure 'f': runs lists the runs drawn in it, by name or glob"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\nruns = "bsp*"\n\n[[runs]]\nfigure = "f"\n'
     'algorithm = "bsp"', "figure 'f': runs lists the runs drawn in it, by name or glob"),
    ('[[runs]]\nalgorithm = "bsp"', '[[figures]]\nid = "f"\ntitle = "F"\nruns = ["ssp*"]\n\n[[runs]]\nfigure = "f"\n'
     'algorithm = "bsp"', r"figure 'f' lists run 'ssp\*', which picks none of the runs drawn in it: name one of "
     r"bsp, bsp\[cluster.hetero=1:3\], bsp\[cluster.hetero=H=1\], or a glob"),
    ('name = "ssp-tight"', 'name = "ssp-tight"\nlabel = "%s"' % ("x" * 60), "label must be a short name"),
])
def test_bad_experiment_files_are_refused_with_one_line(tmp_path, toy, old, new, message):
    with pytest.raises(UserError, match=message):
        plan(load_experiment(edit(tmp_path, toy, old, new, "toy.toml")))


def test_bad_runs_and_claims_are_refused_before_anything_runs(tmp_path, toy):
    with pytest.raises(UserError, match="no experiment 'nope': choose one of .*baselines"):
        load_experiment("nope")
    with pytest.raises(UserError, match=r"run 'ssp-tight': unknown config entry 'ssp.stalenes' \(did you mean"):
        plan(load_experiment(edit(tmp_path, toy, "staleness = 1", "stalenes = 1")))
    with pytest.raises(UserError, match="baseline 'bps' names no run"):
        plan(load_experiment(edit(tmp_path, toy, 'baseline = "bsp"', 'baseline = "bps"')))
    with pytest.raises(UserError, match="names run 'ssp'"):
        plan(load_experiment(edit(tmp_path, toy, 'run = "ssp-tight"', 'run = "ssp"')))
    with pytest.raises(UserError, match=r"baseline 'bsp': it is swept, name one of its points \(bsp\[cluster"):
        plan(load_experiment(edit(tmp_path, toy, 'baseline = "bsp[cluster.hetero=H=1]"', 'baseline = "bsp"')))
    with pytest.raises(UserError, match="trend claim 'tighter is slower' names 'ssp-tight': name a \\[\\[runs\\]\\] "
                                        "entry with a sweep over one key \\(bsp\\)"):
        plan(load_experiment(edit(tmp_path, toy, 'baseline = "bsp[cluster.hetero=H=1]"\nkind = "ratio"',
                                  'kind = "trend"\ndirection = "increasing"')))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="not written by edgeml reproduce"):
        reproduce(toy, out=tmp_path / "mine")
    result = CliRunner().invoke(cli.app, ["reproduce", "nope"])
    assert result.exit_code == 2 and "baselines" in result.output
    a_file = tmp_path / "mine" / "notes.txt"
    for out, problem in ((a_file, "is a file"), (a_file / "sub", "lies under the file")):
        result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--out", str(out)])
        assert result.exit_code == 2 and f"--out '{out}' {problem}" in result.output, result.output
    assert a_file.read_text() == "keep me"
    for seeds, problem in (("1,,2", "give comma-separated integers"), ("", "give comma-separated integers"),
                           ("0,1,0", "names a seed twice"),
                           ("0,-1", "seed -1 is out of range: use a whole number in [0, "),
                           ("4294967296", "seed 4294967296 is out of range")):
        result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--seeds", seeds, "--out",
                                              str(tmp_path / "new")])
        assert result.exit_code == 2 and problem in result.output, result.output
    assert not (tmp_path / "new").exists()


def test_quick_baselines_reproduction(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(cli.app, ["reproduce", "baselines", "--quick", "--seeds", "0,1", "--out", str(out),
                                          "--pdf"])
    assert result.exit_code == 0, result.output
    assert "[10/10]" in result.output and "REPORT.md" in result.output
    assert "[1/10] bsp seed 0: running bsp (sim)" in result.output  # not a terminal: each run said as it starts

    table = pd.read_csv(out / "compare.csv").set_index("run")
    assert list(table.index) == ["bsp", "ssp", "asp", "bsp-network", "ssp-network"] and set(table["seeds"]) == {2}
    assert table.loc["bsp", "speedup"] == 1.0
    # Under 1:1:3, BSP's two fast workers block two thirds of the time: 4/9 of all worker time is not compute.
    assert table.loc["bsp", "noncompute_fraction"] == pytest.approx(4 / 9, abs=0.03)
    assert table.loc["asp", "noncompute_fraction"] < 0.05
    # the ablation: transfers that take time add to the barrier's share, the paper's "waiting time"
    assert table.loc["bsp-network", "noncompute_fraction"] > table.loc["bsp", "noncompute_fraction"] + 0.05
    assert table.loc["bsp-network", "comm_fraction"] > 0.05 == table.loc["bsp", "comm_fraction"] + 0.05

    for name in ("convergence_time", "convergence_steps", "convergence_bytes", "bars", "time_breakdown",
                 "throughput", "staleness"):
        assert (out / "figures" / "fig1" / f"{name}.png").stat().st_size > 1000
        assert (out / "figures" / "fig1" / f"{name}.pdf").stat().st_size > 1000

    report = (out / "REPORT.md").read_text()
    assert "([PDF](figures/fig1/bars.pdf))" in report  # --pdf: linked beside each PNG
    assert "edgeml reproduce baselines --quick" in report and "## Differences from the paper" in report
    assert "This is the **quick** reproduction" in report.split("## Verdicts")[0]
    section = report.split("## ADSP Fig. 1's setting", 1)[1].split("## Results", 1)[0]
    header = "| the paper says | paper | at | n | ours, in words | measured [95% CI] | resolution | verdict |"
    assert header in section
    for c in load_experiment("baselines").claims:
        row = next(line for line in section.splitlines() if line.startswith(f"| {c.text} |"))
        cells = [x.strip() for x in row.strip("|").split("|")]
        assert cells[3] == "2" and cells[-1].split("**")[1].split(" (")[0] in (
            "holds", "weaker", "stronger", "does not hold", "inconclusive", "not resolved")
    assert "![bars](figures/fig1/bars.png)" in section
    assert "![time_breakdown](figures/fig1/time_breakdown.png)" in section
    assert "**ADSP Fig. 1: time and steps until accuracy stays >= 0.8" in section

    # The table is rebuilt from the run directories alone, with the experiment's run names.
    runs = load_runs([str(out)])
    assert sorted({r.label for r in runs}) == ["asp", "bsp", "bsp-network", "ssp", "ssp-network"] and len(runs) == 10
    again = CliRunner().invoke(cli.app, ["compare", str(out / "runs"), "--target-accuracy", "0.85"])
    assert again.exit_code == 0 and "speedup vs bsp" in again.output


@pytest.mark.slow
def test_finished_runs_are_never_deleted_without_force(tmp_path, toy):
    out = tmp_path / "out"
    reproduce(toy, quick=True, out=out, seeds=[0])
    runs = out / "runs"
    kept = runs / "ssp-tight-s0" / rundir.ARCHIVE
    before = kept.stat().st_mtime_ns
    args = ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out)]
    refused = CliRunner().invoke(cli.app, args)
    assert refused.exit_code == 2 and "holds 3 finished run(s)" in refused.output and "--force" in refused.output
    assert kept.stat().st_mtime_ns == before
    # --resume keeps what is finished with the same configuration and runs the rest
    (unpack(runs / "bsp_cluster.hetero=1_3-s0") / "summary.json").unlink()   # as if stopped during this run
    (unpack(runs / "bsp_cluster.hetero=H=1-s0") / rundir.EXPERIMENT).unlink()  # as if stopped before its tag
    result = CliRunner().invoke(cli.app, [*args, "--resume"])                # neither needs --force
    assert result.exit_code == 0, result.output
    assert "ssp-tight seed 0 (kept)" in result.output and result.output.count("(kept)") == 1
    assert rundir.read_file(runs / "bsp_cluster.hetero=H=1-s0", rundir.EXPERIMENT) is not None
    assert kept.stat().st_mtime_ns == before
    assert "bsp_cluster.hetero=1_3-s0" in finished_runs(out)
    # a finished run whose configuration changed would be replaced: that too needs --force
    changed = unpack(runs / "bsp_cluster.hetero=H=1-s0")
    (changed / "config.toml").write_text((changed / "config.toml").read_text().replace("max_time = 2",
                                                                                      "max_time = 1"))
    refused = CliRunner().invoke(cli.app, [*args, "--resume"])
    assert refused.exit_code == 2 and "holds 1 finished run(s)" in refused.output
    assert "max_time = 1" in rundir.read_file(changed, "config.toml").decode()
    result = CliRunner().invoke(cli.app, [*args, "--resume", "--force"])
    assert result.exit_code == 0, result.output
    assert "max_time = 2" in rundir.read_file(changed, "config.toml").decode() and kept.stat().st_mtime_ns == before
    stray = runs / "from-an-older-experiment-s0"
    stray.mkdir()
    (stray / "summary.json").write_text('{"status": "completed"}')
    result = CliRunner().invoke(cli.app, [*args, "--force"])          # --force runs everything again
    assert result.exit_code == 0, result.output
    assert kept.stat().st_mtime_ns != before
    assert "1 run directories" in result.output and "no run of this experiment" in result.output
    assert stray.is_dir() and len(pd.read_csv(out / "compare.csv")) == 3  # left alone, and out of the tables
    # the same experiment's runs at another seed are named as such, not as strangers
    shutil.copytree(runs / "ssp-tight-s0", runs / "ssp-tight-s7")
    result = CliRunner().invoke(cli.app, [*args, "--resume"])
    assert result.exit_code == 0, result.output
    assert "1 run directories" in result.output and "at seeds this call does not run" in result.output
    assert "ssp-tight-s7" in result.output and result.output.count("no run of this experiment") == 1


@pytest.mark.slow
def test_a_failed_run_is_recorded_and_the_others_go_on(tmp_path, toy, monkeypatch):
    import edgeml.runner

    real = edgeml.runner.run

    def flaky(cfg, **kw):
        if cfg.run.name == "bsp_cluster.hetero=1_3-s0":
            raise RuntimeError("run failed: worker 1 raised KeyError: 'w' (partial results in the run directory)")
        return real(cfg, **kw)

    monkeypatch.setattr(edgeml.runner, "run", flaky)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="1 of 3 runs failed"):
        reproduce(toy, quick=True, out=out, seeds=[0])
    report = (out / "REPORT.md").read_text()
    assert "## Failed runs" in report
    assert "| bsp[cluster.hetero=1:3] | 0 | RuntimeError: run failed: worker 1 raised KeyError: 'w'" in report
    assert len(pd.read_csv(out / "compare.csv")) == 2          # the others are in the table
    assert "ssp-tight-s0" in finished_runs(out)
    monkeypatch.setattr(edgeml.runner, "run", real)
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out), "--resume"])
    assert result.exit_code == 0, result.output                # the failed run is run again, the rest kept
    assert result.output.count("(kept)") == 2 and "## Failed runs" not in (out / "REPORT.md").read_text()


def test_a_figure_that_lists_its_runs_draws_only_those_of_its_members(tmp_path, toy):
    # BSP's sweep and SSP in figure f, which lists one point of the sweep and SSP by a glob; figure g keeps all
    text = open(toy).read().replace(
        '[[runs]]\nalgorithm = "bsp"',
        '[[figures]]\nid = "f"\ntitle = "F"\nruns = ["bsp[cluster.hetero=1:3]", "ssp-*"]\n\n'
        '[[figures]]\nid = "g"\ntitle = "G"\n\n[[runs]]\nfigure = ["f", "g"]\nalgorithm = "bsp"').replace(
        'name = "ssp-tight"', 'name = "ssp-tight"\nfigure = "f"')
    (tmp_path / "listed.toml").write_text(text)
    planned = plan(load_experiment(str(tmp_path / "listed.toml")))
    assert sorted({(p.name, tuple(p.figures)) for p in planned}) == [
        ("bsp[cluster.hetero=1:3]", ("f", "g")), ("bsp[cluster.hetero=H=1]", ("g",)), ("ssp-tight", ("f",))]


@pytest.mark.slow
def test_figure_groups_claims_and_against_panels(tmp_path, toy):
    text = open(toy).read().replace(
        '[[runs]]\nalgorithm = "bsp"',
        '[[figures]]\nid = "f2"\ntitle = "Fig. 2: tight SSP against BSP"\ncite = "toy.txt Fig. 2"\n'
        'text = "The paper: SSP with bound 1 is slower."\n'
        'against = [{ x = "cluster.hetero", y = ["final_accuracy", "time_to_target"] }]\n\n'
        '[[runs]]\nfigure = ["f2", "Fig. 9: BSP alone"]\nalgorithm = "bsp"').replace(
        'name = "ssp-tight"', 'name = "ssp-tight"\nfigure = "f2"')
    text += ('\n[[claims]]\ntext = "BSP reaches the target at every speed profile"\nmetric = "time_to_target"\n'
             'run = "bsp"\nkind = "value"\nop = "<="\npaper_value = 100\n')
    (tmp_path / "grouped.toml").write_text(text)
    out = reproduce(str(tmp_path / "grouped.toml"), quick=True, out=tmp_path / "out", seeds=[0, 1])
    assert (out / "figures" / "f2" / "against_cluster.hetero.png").stat().st_size > 1000
    assert (out / "figures" / "fig-9" / "convergence_time.png").exists()   # a title of its own: every panel
    assert not list((out / "figures").rglob("*.pdf"))  # PNGs alone without --pdf, and no link to a PDF
    report = (out / "REPORT.md").read_text()
    assert "[PDF]" not in report
    f2 = report.split("## Fig. 2: tight SSP against BSP", 1)[1].split("\n## ", 1)[0]
    assert "The paper: SSP with bound 1 is slower." in f2
    # the paper's side named as the words name runs: the algorithm's name, a point as a setting
    assert "| tighter is slower | lower than BSP (H=1) (no number given) | accuracy>=0.5 | 2 |" in f2
    # a value claim naming a swept run is checked at every point
    assert "| BSP reaches the target at every speed profile | <= 100 s | cluster.hetero=H=1; accuracy>=0.5 | 2 |" in f2
    assert "|  | <= 100 s | cluster.hetero=1:3; accuracy>=0.5 | 2 |" in f2
    assert "**toy.txt Fig. 2: test loss and accuracy" in f2 and "![against_cluster.hetero]" in f2
    assert "## Fig. 9: BSP alone" in report
    tag = rundir.read_json(out / "runs" / "bsp_cluster.hetero=1_3-s0", rundir.EXPERIMENT)
    assert tag == {"paper": "toy", "run": "bsp[cluster.hetero=1:3]", "spec": "bsp",
                   "point": {"cluster.hetero": "1:3"}, "seed": 0, "quick": True}


@pytest.mark.slow
def test_only_runs_the_matching_runs_and_keeps_the_rest(tmp_path, toy):
    out = tmp_path / "out"
    args = ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out)]
    # a fresh folder: only the SSP run runs; the BSP runs are left out, so there is no baseline to pair with
    result = CliRunner().invoke(cli.app, [*args, "--only", "ssp*"])
    assert result.exit_code == 0, result.output
    assert result.output.count("not selected by --only and not run yet") == 2
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["ssp-tight-s0"]
    assert list(pd.read_csv(out / "compare.csv")["run"]) == ["ssp-tight"]
    report = (out / "REPORT.md").read_text()
    assert "not measured: no run 'bsp[cluster.hetero=H=1]'" in report
    # a report of an experiment under way says what it has not run yet, by run and seed, at the top and at the end
    assert ("**Not run yet**: 2 of the 3 planned runs, `bsp[cluster.hetero=H=1]` seed 0; `bsp[cluster.hetero=1:3]` "
            "seed 0. The claims on them read not measured") in report
    assert ": 3 runs (2 not run yet), seeds 0," in report
    # then the BSP runs, named as their swept entry: the SSP run is kept, and the table covers all three
    before = (out / "runs" / "ssp-tight-s0" / rundir.ARCHIVE).stat().st_mtime_ns
    result = CliRunner().invoke(cli.app, [*args, "--only", "bsp"])
    assert result.exit_code == 0, result.output
    assert "ssp-tight seed 0 (kept)" in result.output
    assert (out / "runs" / "ssp-tight-s0" / rundir.ARCHIVE).stat().st_mtime_ns == before
    assert len(pd.read_csv(out / "compare.csv")) == 3
    report = (out / "REPORT.md").read_text()
    assert "Not run yet" not in report and "not run yet)" not in report and ": 3 runs, seeds 0," in report
    result = CliRunner().invoke(cli.app, [*args, "--only", "nothing*"])
    assert result.exit_code == 2 and "--only 'nothing*' matches no run of toy" in result.output
    # continued from the copy of the experiment file it wrote, in place (as from a committed reproduction)
    before = (out / "experiment.toml").read_bytes()
    result = CliRunner().invoke(cli.app, ["reproduce", str(out / "experiment.toml"), "--quick", "--seeds", "0",
                                          "--out", str(out), "--resume"])
    assert result.exit_code == 0, result.output
    assert (out / "experiment.toml").read_bytes() == before and "(kept)" in result.output


@pytest.mark.slow
def test_only_refuses_to_leave_out_finished_runs_the_experiment_now_configures_otherwise(tmp_path, toy):
    """An experiment file whose settings changed since a folder's runs were made, reproduced into that folder
    with --only for other runs, would render a report without them: refused in one line, nothing written, unless
    --force; continuing the folder's own copy keeps them."""
    out = tmp_path / "out"
    args = ["--quick", "--seeds", "0", "--out", str(out)]
    assert CliRunner().invoke(cli.app, ["reproduce", toy, *args]).exit_code == 0
    report = (out / "REPORT.md").read_text()
    changed = edit(tmp_path, toy, "ssp = { staleness = 1 }", "ssp = { staleness = 2 }", name="toy.toml.new")
    Path(changed).replace(toy)  # the same experiment file, edited
    refused = CliRunner().invoke(cli.app, ["reproduce", toy, *args, "--only", "bsp", "--resume"])
    assert refused.exit_code == 2, refused.output
    line = " ".join(refused.output.split())
    assert "holds 1 finished run(s) that --only leaves out" in line and "ssp-tight-s0" in line and "--force" in line
    assert (out / "REPORT.md").read_text() == report
    assert "staleness = 1" in (out / "experiment.toml").read_text()
    kept = CliRunner().invoke(cli.app, ["reproduce", str(out / "experiment.toml"), *args, "--only", "bsp",
                                        "--resume"])
    assert kept.exit_code == 0 and "ssp-tight seed 0 (kept)" in kept.output, kept.output
    forced = CliRunner().invoke(cli.app, ["reproduce", toy, *args, "--only", "bsp", "--resume", "--force"])
    assert forced.exit_code == 0, forced.output
    assert (out / "runs" / "ssp-tight-s0").is_dir()  # left out of the report, not deleted
    assert list(pd.read_csv(out / "compare.csv")["run"]) == ["bsp[cluster.hetero=H=1]", "bsp[cluster.hetero=1:3]"]


@pytest.mark.slow
def test_a_reproduction_stopped_while_it_runs_keeps_its_last_report_and_figures(tmp_path, toy, monkeypatch):
    out = reproduce(toy, quick=True, out=tmp_path / "out", seeds=[0])
    figures = sorted(p.relative_to(out) for p in (out / "figures").rglob("*.png"))
    report = (out / "REPORT.md").read_text()
    assert figures and "![" in report

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("edgeml.runner.run", stopped)
    with pytest.raises(KeyboardInterrupt):
        reproduce(toy, quick=True, out=out, seeds=[0], force=True)
    assert sorted(p.relative_to(out) for p in (out / "figures").rglob("*.png")) == figures
    assert (out / "REPORT.md").read_text() == report


def test_only_takes_a_swept_points_name_literally(toy):
    # "bsp[cluster.hetero=1:3]" as a glob would be "bsp" and one character of the class: it matches neither point
    planned = plan(load_experiment(toy), quick=True, seeds=[0])
    names = {p.dirname: p.name for p in planned}
    assert [names[d] for d in select("bsp[cluster.hetero=1:3]", planned)] == ["bsp[cluster.hetero=1:3]"]
    assert sorted(names[d] for d in select("bsp*", planned)) == sorted(p.name for p in planned if p.spec == "bsp")
    assert [names[d] for d in select("ssp-tigh?", planned)] == ["ssp-tight"]
    assert select(None, planned) == set(names)
    # several patterns (--only repeated): the runs any of them picks
    both = select(["ssp-tigh?", "bsp[cluster.hetero=1:3]"], planned)
    assert sorted(names[d] for d in both) == ["bsp[cluster.hetero=1:3]", "ssp-tight"]


def test_only_repeated_runs_the_runs_of_every_pattern_and_names_one_that_matches_none(tmp_path, toy):
    out = tmp_path / "out"
    args = ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out)]
    result = CliRunner().invoke(cli.app, [*args, "--only", "ssp*", "--only", "bsp[cluster.hetero=1:3]"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["bsp_cluster.hetero=1_3-s0", "ssp-tight-s0"]
    refused = CliRunner().invoke(cli.app, [*args, "--only", "ssp*", "--only", "nothing*", "--resume"])
    assert refused.exit_code == 2 and "--only 'nothing*' matches no run of toy" in refused.output
    empty = CliRunner().invoke(cli.app, [*args, "--only", "ssp*", "--only", " ", "--resume"])
    assert empty.exit_code == 2 and "--only ' ' is empty" in empty.output  # not every run


def test_the_shipped_experiments_plan(tmp_path):
    """Every experiment file loads, and plans in full and quick, with every claim naming real runs."""
    for name in ("adsp", "baselines"):
        exp = load_experiment(name)
        full, quick = plan(exp), plan(exp, quick=True)
        assert full and quick and exp.claims
    adsp = load_experiment("adsp")
    assert {p.seed for p in plan(adsp) if p.spec == "adsp"} == {0, 1, 2}             # the procs Fig. 4: three
    assert {p.seed for p in plan(adsp) if p.spec == "fig5-adsp"} == {0, 1, 2, 3, 4}  # the sim Fig. 5: five
    points = {p.point["cluster.hetero"] for p in plan(adsp) if p.spec == "fig5-adsp"}
    assert points == {"H=1.6", "H=2.4", "H=3.2", "H=4.0"}
    assert len({p.point["network.commit_delay_s"] for p in plan(adsp) if p.spec == "fig6-bsp"}) >= 3


@pytest.mark.slow
def test_a_setting_added_after_a_run_keeps_it_only_at_its_default(tmp_path, toy):
    out = tmp_path / "out"
    reproduce(toy, quick=True, out=out, seeds=[0])
    runs = out / "runs"
    before = {p.name: rundir.read_file(p, rundir.META) for p in runs.iterdir()}  # a run made again: a new meta
    for run in runs.iterdir():
        unpack(run)
    for config in runs.glob("*/config.toml"):  # as if written before data.train_samples existed
        text = config.read_text()
        assert "train_samples = 0\n" in text
        config.write_text(text.replace("train_samples = 0\n", ""))
    # ssp.staleness = 1 is not SSP's default: a run without the setting did something else, and is not kept
    tight = runs / "ssp-tight-s0" / "config.toml"
    tight.write_text(tight.read_text().replace("staleness = 1\n", ""))
    args = ["reproduce", toy, "--quick", "--seeds", "0", "--out", str(out), "--resume"]
    refused = CliRunner().invoke(cli.app, args)
    assert refused.exit_code == 2 and "holds 1 finished run(s)" in refused.output, refused.output
    result = CliRunner().invoke(cli.app, [*args, "--force"])
    assert result.exit_code == 0, result.output
    assert result.output.count("(kept)") == 2 and "ssp-tight seed 0 (kept)" not in result.output
    after = {p.name: rundir.read_file(p, rundir.META) for p in runs.iterdir()}
    assert [name for name in before if before[name] != after[name]] == ["ssp-tight-s0"]


def test_a_missing_data_set_is_refused_before_anything_runs_and_plans_need_none(tmp_path, toy, monkeypatch):
    """Planning is pure (the shipped experiments plan on a machine without their data); reproducing checks every
    data set a starting run reads before the first run, and writes nothing when one is missing."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDGEML_DATA", str(tmp_path / "nodata"))
    mnist = edit(tmp_path, toy, 'run = { backend = "sim" }', 'run = { backend = "sim" }\ndata = { dataset = "mnist" }')
    assert len(plan(load_experiment(mnist))) == 6
    with pytest.raises(UserError, match="run 'bsp.*mnist"):
        reproduce(mnist, quick=True, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_ablation_that_reads_differently_at_a_claims_targets_says_where_each_reading_is():
    """A claim decided at several targets (or sweep points) decides its ablation at each: a reading shared by
    every target is one line, as it always was; readings that differ are one line each, saying where."""
    from edgeml.analysis.verdicts import Result, Verdict
    from edgeml.reproduce.render import _ablation_lines

    def result(target, *ablations):
        return Result(claim="c", target=target, paper="80%", measured="-", decision=Verdict("weaker", n=5),
                      ablations=ablations)

    same = ("abl-a", "A takes 70% less time", "weaker")
    results = [result("loss<=1", ("abl-b", "B takes 68% less time", "weaker"), same),
               result("loss<=0.9", ("abl-b", "B takes 73% less time", "holds"), same),
               result("loss<=0.8", ("abl-b", "B takes 68% less time", "weaker"), same)]
    assert _ablation_lines(results) == [  # each ablation's readings together
        "  - ablation `abl-b` at loss<=1, loss<=0.8: B takes 68% less time (weaker with it in the claim's place).",
        "  - ablation `abl-b` at loss<=0.9: B takes 73% less time (holds with it in the claim's place).",
        "  - ablation `abl-a`: A takes 70% less time (weaker with it in the claim's place)."]
    swept = [Result(claim="c", target="loss<=0.9", paper="-", measured="-", decision=Verdict("weaker", n=3),
                    at=f"cluster.workers={n}", ablations=(("abl-c", f"{n} workers", Verdict("holds")),))
             for n in (18, 36)]
    assert [line.split(":")[0] for line in _ablation_lines(swept)] == [
        "  - ablation `abl-c` at cluster.workers=18; loss<=0.9",
        "  - ablation `abl-c` at cluster.workers=36; loss<=0.9"]


def test_a_diagnosis_in_the_experiment_file_appears_in_the_report_and_the_scoreboard(tmp_path, toy):
    """A claim that does not hold prints its diagnosis under its section's table, with its ablation decided in
    the claim's place; one without says "not yet diagnosed", counted at the top; verdicts.csv carries both, and
    the scoreboard renders its headline claims from it."""
    from edgeml.reproduce.summary import render_summary

    text = open(toy).read() + (
        '\n[[claims]]\ntext = "BSP ends above certainty"\nheadline = true\nmetric = "final_accuracy"\n'
        'run = "bsp[cluster.hetero=H=1]"\nkind = "value"\nop = ">="\npaper_value = 1.5\n'
        'reading = "open"\ndiagnosis = { departures = ["toy"], cause = "claim", text = "no accuracy exceeds 1", '
        'ablations = ["ssp-tight"] }\n'
        '\n[[claims]]\ntext = "SSP ends above certainty"\nmetric = "final_accuracy"\nrun = "ssp-tight"\n'
        'kind = "value"\nop = ">="\npaper_value = 1.5\n'
        '\n[[claims]]\ntext = "tighter is far slower"\nmetric = "final_accuracy"\nrun = "ssp-tight"\n'
        'baseline = "bsp[cluster.hetero=H=1]"\nkind = "ratio"\npaper_value = 100\n'
        'diagnosis = { departures = ["toy"], cause = "claim", text = "x", '
        'ablations = ["bsp[cluster.hetero=1:3] vs ssp-tight"] }\n'
        '\n[[claims]]\ntext = "tighter reaches any level sooner"\nmetric = "steps_to_target"\nrun = "ssp-tight"\n'
        'baseline = "bsp[cluster.hetero=H=1]"\nkind = "ratio"\ndirection = "lower"\n'
        'targets = [0.5, "reached"]\n')
    (tmp_path / "diagnosed").mkdir()
    (tmp_path / "diagnosed" / "experiment.toml").write_text(text)
    (tmp_path / "diagnosed" / "ledger.toml").write_text(  # the one row the diagnoses cite and their ablations change
        '[[departure]]\nid = "toy"\nwhat = "the method and its setting"\nkind = "setting"\npaper = "p"\n'
        'section = "Toy Sec. 1"\nquote = "q"\nours = "o"\nwhy = "w"\n'
        'keys = ["run.algorithm", "stop.max_time", "cluster.hetero"]\ntests = ["ssp-tight"]\n')
    out = reproduce(str(tmp_path / "diagnosed"), quick=True, out=tmp_path / "results" / "toy", seeds=[0, 1])
    report = (out / "REPORT.md").read_text()
    top = report.split("## Verdicts", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"\*\*\d+ results\*\* \(1 on headline claims\): .*\*\*\d+ not yet diagnosed\*\*", top), top
    assert "| **H** BSP ends above certainty |" in top
    assert "inconclusive (2 of 5 seeds)" in top  # a headline claim on two seeds
    assert ("- *BSP ends above certainty*: **the claim does not hold as far as we can tell**: no accuracy "
            "exceeds 1") in report
    assert re.search(r"  - ablation `ssp-tight`: SSP: final accuracy \d+% \(does not hold with it in the "
                     r"claim's place\)\.", report), report
    assert "- *SSP ends above certainty*: **not yet diagnosed**." in report
    # an ablation of both sides of a comparison: the pair decided in the claim's place
    assert re.search(r"  - ablation `bsp\[cluster.hetero=1:3\] vs ssp-tight`: BSP \(hetero=1:3\): final accuracy "
                     r"\S+ of SSP's \(\w+ with it in the claim's place\)\.", report), report
    # a claim at the highest level every run of both its sides reaches: found from the runs, named as such
    from edgeml.analysis.convergence import Target, highest_reached
    runs = [r for r in load_runs([str(out / "runs")]) if r.label in ("ssp-tight", "bsp[cluster.hetero=H=1]")]
    level = highest_reached(runs, Target("accuracy", 0.0, "stays"))
    assert len(runs) == 4 and level is not None and level > 0.5
    assert f"| tighter reaches any level sooner | accuracy>={level:g} (the highest every run reaches) |" in report
    assert "| tighter reaches any level sooner | accuracy>=0.5 |" in report
    assert "**What ran** (read from the runs behind this report): 6 runs on the sim backend: digits with mlp, " \
           "2 workers." in report
    rows = {r["claim"]: r for r in csv.DictReader((out / "verdicts.csv").open())}
    assert rows["BSP ends above certainty"]["cause"] == "claim" and rows["BSP ends above certainty"]["headline"] == "1"
    assert rows["SSP ends above certainty"]["cause"] == "not yet diagnosed"
    board = render_summary(tmp_path / "results")
    assert "| [toy](toy/REPORT.md) |" in board
    assert "| BSP ends above certainty | - | >= 150% |" in board and "| claim |" in board
    assert "SSP ends above certainty" not in board  # not a headline claim


def test_summary_and_a_missing_paper_are_one_line_errors_or_the_scoreboard(tmp_path):
    """``reproduce`` with no PAPER names the experiments; ``--summary`` on a folder without reproductions, or
    with a PAPER, is refused in one line (exit 2, nothing written); on results it writes README.md there."""
    for args, message in ((["reproduce"], "give the PAPER to reproduce, one of adacomp, adsp"),
                          (["reproduce", "--summary", "--out", str(tmp_path)], "no reproduction with a verdicts.csv"),
                          (["reproduce", "adsp", "--summary"], "--summary takes no PAPER"),
                          (["reproduce", "--summary", "--out", str(tmp_path / "none")], "is no folder")):
        result = CliRunner().invoke(cli.app, args)
        assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output, args
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "verdicts.csv").write_text("a,b\n1,2\n")
    result = CliRunner().invoke(cli.app, ["reproduce", "--summary", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "lacks the column(s) claim" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "README.md").exists()
    (tmp_path / "odd" / "verdicts.csv").unlink()
    (tmp_path / "odd").rmdir()
    paper = tmp_path / "toy"
    paper.mkdir()
    (paper / "verdicts.csv").write_text("claim,headline,at,paper,words,measured,n,verdict,provisional,cause,section\n"
                                        "X is fast,1,-,2.00x,x 2x as fast,2.00x,5,holds,,,Fig. 1\n")
    result = CliRunner().invoke(cli.app, ["reproduce", "--summary", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    board = (tmp_path / "README.md").read_text()
    assert "| [toy](toy/REPORT.md) | 1 | 1 | 1 holds | 0 |" in board
    assert "| X is fast | - | 2.00x | x 2x as fast (2.00x) | 5 | **holds** | - |" in board


def test_check_reads_the_committed_verdicts_past_the_headline_mark():
    """``--check`` matches claims by text: the mark before a headline claim's text is not part of it, so every
    committed verdict names a claim of its experiment file."""
    from pathlib import Path

    from edgeml.reproduce.check import committed_verdicts

    results = Path(__file__).resolve().parents[1] / "results"
    checked = 0
    for report in sorted(results.glob("*/quick/REPORT.md")):
        exp = load_experiment(report.parent.parent.name)
        texts = {c.text for c in exp.claims}
        verdicts = committed_verdicts(exp, quick=True).verdicts
        assert {claim for claim, _, _ in verdicts} <= texts, report
        checked += sum(c.headline for c in exp.claims)
    assert checked > 0  # some experiment has headline claims, so the mark was there to read past


@pytest.mark.parametrize("setting", sorted(FORMER_DEFAULTS))
def test_resume_runs_again_a_run_made_before_a_default_changed_what_edgeml_does(tmp_path, setting):
    """A run whose config lacks a setting counts as the new default (kept by --resume), unless that default
    changed behaviour (``schema.FORMER_DEFAULTS``): an ADSP run from before ``reward_clock`` fitted the reward on
    each trial's clock, so it is no run of the default "run" clock, and it is one of "trial". Every such setting."""
    import tomli_w

    from edgeml import rundir
    from edgeml.config import build_config
    from edgeml.reproduce.execute import finished

    algorithm, key = setting.split(".")
    new = build_config({"run": {"algorithm": algorithm}}, paths=False)
    assert new.to_dict()[algorithm][key] != FORMER_DEFAULTS[setting]  # the default did change
    path = tmp_path / "old-run"
    path.mkdir()
    old = rundir.toml_safe(new.to_dict())
    default = old[algorithm].pop(key)  # written before the setting existed
    (path / rundir.CONFIG).write_text(tomli_w.dumps(old))
    (path / rundir.SUMMARY).write_text(json.dumps({"status": "completed"}))
    (path / rundir.EXPERIMENT).write_text(json.dumps({"run": algorithm, "quick": False}))
    assert not finished(path, new, quick=False)
    former = build_config({"run": {"algorithm": algorithm}, algorithm: {key: FORMER_DEFAULTS[setting]}}, paths=False)
    assert finished(path, former, quick=False)
    # a setting added without changing behaviour still counts as its default
    del old["cluster"]["crash_prob"]
    old[algorithm][key] = default
    (path / rundir.CONFIG).write_text(tomli_w.dumps(old))
    assert finished(path, new, quick=False)


def test_resume_keeps_a_run_made_with_other_threads(tmp_path):
    """``run.threads`` sets how many cores a run computes on, not what it computes: --resume keeps a finished run
    made with one thread when the experiment now asks for two (a long run given both cores of a session), and
    still runs again one whose other settings differ."""
    import tomli_w

    from edgeml import rundir
    from edgeml.config import build_config
    from edgeml.reproduce.execute import finished

    path = tmp_path / "one-thread"
    path.mkdir()
    made = build_config({"run": {"algorithm": "bsp", "threads": 1}}, paths=False)
    (path / rundir.CONFIG).write_text(tomli_w.dumps(rundir.toml_safe(made.to_dict())))
    (path / rundir.SUMMARY).write_text(json.dumps({"status": "completed"}))
    (path / rundir.EXPERIMENT).write_text(json.dumps({"run": "bsp", "quick": False}))
    assert finished(path, build_config({"run": {"algorithm": "bsp", "threads": 2}}, paths=False), quick=False)
    assert not finished(path, build_config({"run": {"algorithm": "bsp", "threads": 2, "seed": 1}}, paths=False),
                        quick=False)

SEARCHED = """
[experiment]
paper = "toy"
seeds = [0, 1]
target_loss = 1.5

[settings]
run = { backend = "sim" }
data = { dataset = "digits" }
model = { name = "mlp" }
cluster = { workers = 3, hetero = "1:1:3", base_step_s = 0.2 }
stop = { max_time = 24, target_loss = 0.0 }
adsp = { check_period_s = 2, epoch_s = 12, lr_decay_s = 60 }

[[figures]]
id = "rates"
title = "Rates"
panels = ["bars"]
settled = { decision = "commit_rate", fixed = "adsp.fixed_rate" }

[[runs]]
name = "fixed"
algorithm = "adsp"
figure = "rates"
sweep = { "adsp.fixed_rate" = [1, 4] }

[[runs]]
name = "searched"
algorithm = "adsp"
figure = "rates"

[[runs]]
name = "elsewhere"
algorithm = "adsp"
figure = "rates"
seeds = [0]
config = { cluster = { hetero = "1:1:2" } }
"""


@pytest.mark.slow
def test_the_report_shows_what_each_searched_run_settled_on_beside_the_best_fixed_value(tmp_path):
    """``[[figures]] settled``: one row per run that searched its commit rate, with the last rate it decided and
    its mean, beside the fixed rate of the group with the least mean time to the target."""
    path = tmp_path / "toy.toml"
    path.write_text(SEARCHED)
    out = reproduce(str(path), out=tmp_path / "out", console=None)
    report = (out / "REPORT.md").read_text()
    runs = {(r.label, r.seed): r for r in load_runs([str(out)])}
    per_run = pd.read_csv(out / "compare_runs.csv")
    times = {}
    for rate in (1, 4):
        rows = per_run[per_run["run"] == f"fixed[adsp.fixed_rate={rate}]"]
        times[rate] = float("inf") if rows["censored"].any() else rows["time_to_target"].mean()
    best = min(times, key=lambda v: (times[v], v))
    assert "settled on its `commit_rate`" not in report and "searched its `commit_rate` online" in report
    for seed in (0, 1):
        r = runs[("searched", seed)]
        d = r.table("series/decisions.csv")
        rates = d[d["name"] == "commit_rate"].sort_values("time_s", kind="stable")["value"]
        row = f"| searched | {seed} | {rates.iloc[-1]:.4g} | {rates.mean():.4g} |"
        assert row in report, report
        # and how far behind the best fixed rate's mean time it lies, in evaluation intervals
        mine = per_run[(per_run["run"] == "searched") & (per_run["seed"] == seed)].iloc[0]
        line = next(x for x in report.splitlines() if x.startswith(row))
        assert not mine["censored"] and math.isfinite(times[best])  # the toy's runs reach the target
        interval = float(r.evals["time_s"].diff().median())
        assert line.endswith(f"| {(mine['time_to_target'] - times[best]) / interval:+.1f} |"), line
    assert report.count(f"| {best:g} (") == 2  # the best fixed rate of the runs' own setting...
    assert any(x.startswith("| elsewhere | 0 |") and x.endswith("| - | - |") for x in report.splitlines())  # none here


def test_a_point_layer_sets_a_value_for_one_point_of_the_sweep_only(tmp_path, toy):
    """``points = { "cluster.hetero=1:3" = { ... } }``: that point's runs get the layer, after the sweep's own
    values; the other point is untouched; a tag that names no point, or a layer that is no table, is refused."""
    tuned = edit(tmp_path, toy, 'sweep = { "cluster.hetero" = ["H=1", "1:3"] }',
                 'sweep = { "cluster.hetero" = ["H=1", "1:3"] }\n'
                 'points = { "cluster.hetero=1:3" = { stop = { max_time = 7 }, cluster = { hetero = "1:2" } } }')
    planned = {(p.name, p.seed): p for p in plan(load_experiment(tuned))}
    one, other = planned[("bsp[cluster.hetero=1:3]", 0)], planned[("bsp[cluster.hetero=H=1]", 0)]
    assert one.cfg.stop.max_time == 7 and one.cfg.cluster.hetero == "1:2"
    assert other.cfg.stop.max_time == 20 and other.cfg.cluster.hetero == "H=1"
    assert one.point == {"cluster.hetero": "1:3"}  # the run keeps its sweep point's name
    quick = {(p.name, p.seed): p for p in plan(load_experiment(tuned), quick=True)}
    assert quick[("bsp[cluster.hetero=1:3]", 0)].cfg.cluster.hetero == "1:3"  # full runs only
    bad = edit(tmp_path, toy, 'sweep = { "cluster.hetero" = ["H=1", "1:3"] }',
               'sweep = { "cluster.hetero" = ["H=1", "1:3"] }\npoints = { "cluster.hetero=1:4" = { stop = {} } }',
               name="bad.toml")
    with pytest.raises(UserError, match=r"points names 'cluster.hetero=1:4', which is no point.*'cluster.hetero=1:3'"):
        plan(load_experiment(bad))
    worse = edit(tmp_path, toy, 'sweep = { "cluster.hetero" = ["H=1", "1:3"] }',
                 'sweep = { "cluster.hetero" = ["H=1", "1:3"] }\npoints = { "cluster.hetero=1:3" = 4 }',
                 name="worse.toml")
    with pytest.raises(UserError, match="must be a table"):
        plan(load_experiment(worse))


PER_CLASS = """
[experiment]
paper = "toy"
seeds = [0, 1]

[settings]
run = { backend = "sim" }
data = { dataset = "digits", partition = "sorted" }
model = { name = "mlp" }
cluster = { workers = 3 }
stop = { max_time = 3 }
eval = { interval = 1, per_class = true }

[[figures]]
id = "split"
title = "Split"
panels = ["bars"]
per_class = true

[[runs]]
name = "gossip"
algorithm = "gosgd"
figure = "split"

[[runs]]
name = "plain"
algorithm = "bsp"
figure = "split"
config = { eval = { per_class = false } }
"""


def test_the_report_tables_each_runs_final_accuracy_per_class(tmp_path):
    """``[[figures]] per_class``: a row per run that recorded its class accuracies, the mean over its seeds of
    the last evaluation's; runs that did not record them are left out."""
    path = tmp_path / "toy.toml"
    path.write_text(PER_CLASS)
    out = reproduce(str(path), out=tmp_path / "out", console=None)
    report = (out / "REPORT.md").read_text()
    runs = [r for r in load_runs([str(out)]) if r.label == "gossip"]
    last = pd.DataFrame([r.evals.iloc[-1] for r in runs])
    cells = " | ".join(f"{last[f'accuracy_c{k}'].mean():.3f}" for k in range(10))
    assert f"| gossip | 2 | {cells} | {last['accuracy'].mean():.3f} |" in report, report
    table = report.split("Final accuracy per class")[1].split("\n\n")[1]
    assert "| class 9 | all |" in table and "| gossip |" in table and "| plain |" not in table
