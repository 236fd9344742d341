"""edgeml compare on hand-made run directories whose answers are known exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import tomli_w
from rich.console import Console
from typer.testing import CliRunner

from edgeml import cli
from edgeml.analysis.compare import choose_targets, compare, per_run_table
from edgeml.analysis.convergence import Target
from edgeml.analysis.stats import bootstrap_ci
from edgeml.errors import UserError
from edgeml.rundir import find_runs, load_runs


def make_run(root: Path, name: str, algorithm: str = "bsp", seed: int = 0, times=(0, 1, 2, 3),
             accuracy=(0.1, 0.5, 0.8, 0.9), loss=None, summary: dict | None = None, config: dict | None = None,
             label: str | None = None, series: dict[str, pd.DataFrame] | None = None,
             experiment: dict | None = None) -> Path:
    """A run directory written by hand: evals every second, 10 steps and 1000 bytes per second."""
    path = root / name
    path.mkdir(parents=True)
    loss = loss if loss is not None else [1 - a for a in accuracy]
    pd.DataFrame({"time_s": times, "total_steps": [10 * t for t in times], "total_samples": [320 * t for t in times],
                  "total_bytes": [1000 * t for t in times], "ps_ingress_bytes": [500 * t for t in times],
                  "loss": loss, "accuracy": accuracy}).to_csv(path / "evals.csv", index=False)
    workers = 3
    pd.DataFrame({"rank": range(workers + 1), "role": ["ps"] + ["worker"] * workers, "index": [0, 0, 1, 2],
                  "compute_s": [0, 1, 1, 3], "comm_s": [0, 0.5, 0.5, 0], "wait_s": [3, 1.5, 1.5, 0],
                  "alive_s": [3] * (workers + 1)}).to_csv(path / "nodes.csv", index=False)
    cfg = {"run": {"algorithm": algorithm, "seed": seed, "backend": "sim", "name": name, "out": str(root)},
           "data": {"dataset": "digits"}, "cluster": {"workers": workers, "hetero": "1:1:3"},
           "eval": {"interval": 1.0, "test_samples": 100}, algorithm: {}}
    for section, values in (config or {}).items():
        cfg.setdefault(section, {}).update(values)
    (path / "config.toml").write_text(tomli_w.dumps(cfg))
    (path / "meta.json").write_text(json.dumps({"seed": seed, "step_factors": [1.0, 1.0, 3.0]}))
    accs = [a for a in accuracy if not math.isnan(a)]
    s = {"algorithm": algorithm, "dataset": "digits", "model": "mlp", "workers": workers, "hetero": "1:1:3",
         "backend": "sim", "seed": seed, "status": "completed", "duration_s": float(times[-1]),
         "final_accuracy": accs[-1], "best_accuracy": max(accs), "final_loss": loss[-1], "best_loss": min(loss),
         "total_steps": 10 * times[-1], "total_samples": 320 * times[-1], "total_bytes": 1000 * times[-1],
         "ps_ingress_bytes": 500 * times[-1], "compute_fraction": 0.5, "comm_fraction": 0.1,
         "wait_fraction": 0.4, "target_accuracy": None, "target_loss": None, **(summary or {})}
    (path / "summary.json").write_text(json.dumps(s))
    if label or experiment:
        (path / "experiment.json").write_text(json.dumps({"run": label or algorithm, "seed": seed,
                                                          **(experiment or {})}))
    for name_, df in (series or {}).items():
        (path / "series").mkdir(exist_ok=True)
        df.to_csv(path / "series" / f"{name_}.csv", index=False)
    return path


def reach_at(t: int, horizon: int = 10) -> dict:
    """Evaluations every second whose accuracy reaches 0.8 at second ``t`` and stays there."""
    times = list(range(horizon + 1))
    return {"times": times, "accuracy": [0.5 if x < t else 0.85 for x in times]}


def test_time_to_target_is_where_the_metric_stays(tmp_path):
    # accuracy touches 0.8 at t = 1, falls back, and stays from t = 3; NaN rows are no evaluation
    make_run(tmp_path, "r", times=(0, 1, 2, 3, 4), accuracy=(0.1, 0.8, math.nan, 0.8, 0.9),
             loss=(2.0, 0.5, math.nan, 0.4, 0.3))
    runs = load_runs([str(tmp_path)])
    row = per_run_table(runs, Target("accuracy", 0.8)).iloc[0]
    assert (row["time_to_target"], row["steps_to_target"], row["bytes_to_target"]) == (1.0, 10.0, 1000.0)
    make_run(tmp_path, "dip", times=(0, 1, 2, 3, 4), accuracy=(0.1, 0.85, 0.6, 0.82, 0.9))
    dip = per_run_table(load_runs([str(tmp_path / "dip")]), Target("accuracy", 0.8)).iloc[0]
    assert (dip["time_to_target"], dip["censored"]) == (3.0, False)
    first = per_run_table(load_runs([str(tmp_path / "dip")]), Target("accuracy", 0.8, "first")).iloc[0]
    assert first["time_to_target"] == 1.0
    never = per_run_table(runs, Target("accuracy", 0.95)).iloc[0]
    assert math.isnan(never["time_to_target"]) and never["censored"]
    assert (never["time_to_target_bound"], never["steps_to_target_bound"]) == (4.0, 40.0)  # what the run spent


def test_speedup_is_paired_by_seed_with_a_bootstrap_interval(tmp_path):
    for seed, (b, a) in enumerate([(4, 1), (8, 4)]):
        make_run(tmp_path, f"bsp{seed}", "bsp", seed, **reach_at(b))
        make_run(tmp_path, f"asp{seed}", "asp", seed, **reach_at(a))
    cmp = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "bsp")
    t = cmp.table.set_index("run")
    # Paired: mean(4/1, 8/4) = 3, not the ratio of means 6 / 2.5 = 2.4.
    assert t.loc["asp", "speedup"] == pytest.approx(3.0)
    assert 2.0 <= t.loc["asp", "speedup_ci_low"] < 3.0 < t.loc["asp", "speedup_ci_high"] <= 4.0
    assert t.loc["bsp", "speedup"] == 1.0
    assert t.loc["asp", "time_to_target"] == 2.5 and t.loc["bsp", "time_to_target"] == 6.0
    assert list(t["seeds"]) == [2, 2]


def test_duplicate_runs_of_one_seed_are_one_sample(tmp_path, capsys):
    # two runs of the same configuration and seed: the baseline is never faster than itself
    make_run(tmp_path, "bsp-a", "bsp", 0, **reach_at(4))
    make_run(tmp_path, "bsp-b", "bsp", 0, **reach_at(6))
    make_run(tmp_path, "asp", "asp", 0, **reach_at(2))
    cmp = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "bsp")
    t = cmp.table.set_index("run")
    assert t.loc["bsp", "speedup"] == 1.0 and t.loc["bsp", "speedup_ci_high"] == 1.0
    assert (t.loc["bsp", "seeds"], t.loc["bsp", "runs"]) == (1, 2)
    assert t.loc["bsp", "time_to_target"] == 5.0            # the mean of the two runs of seed 0
    assert t.loc["asp", "speedup"] == pytest.approx(2.5)    # paired with that one sample
    assert "2 runs of 'bsp' share seed 0" in capsys.readouterr().err
    assert "| bsp | 1 (2 runs) |" in cmp.markdown()


def test_a_run_without_a_same_seed_baseline_has_no_speedup(tmp_path):
    make_run(tmp_path, "bsp0", "bsp", 0, **reach_at(4))
    make_run(tmp_path, "asp1", "asp", 1, **reach_at(2))
    t = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "bsp").table.set_index("run")
    assert math.isnan(t.loc["asp", "speedup"])


def test_one_seed_collapses_the_interval_and_bytes_are_exact(tmp_path):
    assert bootstrap_ci([2.5]) == (2.5, 2.5, 2.5)
    assert all(math.isnan(v) for v in bootstrap_ci([1.0, math.nan]))
    make_run(tmp_path, "bsp", "bsp", 0, **reach_at(4),
             summary={"total_bytes": 3_000_000, "ps_ingress_bytes": 1_250_000})
    make_run(tmp_path, "asp", "asp", 0, **reach_at(2))
    cmp = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "bsp")
    t = cmp.table.set_index("run")
    assert t.loc["asp", "speedup"] == t.loc["asp", "speedup_ci_low"] == t.loc["asp", "speedup_ci_high"] == 2.0
    assert (t.loc["bsp", "total_bytes"], t.loc["bsp", "ps_ingress_bytes"]) == (3_000_000, 1_250_000)
    md = cmp.markdown()
    assert "| bsp | 1 | 0.850 | 0.850 | 4 | 1.00x | 3.0 | 1.2 | 50/10/40 | 100 |" in md
    assert "| asp | 1 | 0.850 | 0.850 | 2 | 2.00x |" in md and "[" not in md.split("\n", 1)[1]


def test_a_censored_side_gives_a_bound_never_a_number(tmp_path):
    make_run(tmp_path, "bsp", "bsp", 0, times=list(range(11)), accuracy=[0.3] * 11)  # never reaches 0.8
    make_run(tmp_path, "asp", "asp", 0, **reach_at(2))
    make_run(tmp_path, "ssp", "ssp", 0, times=list(range(7)), accuracy=[0.3] * 7)    # neither side
    cmp = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "bsp")
    t = cmp.table.set_index("run")
    assert math.isnan(t.loc["bsp", "time_to_target"]) and t.loc["bsp", "time_to_target_bound"] == 10.0
    assert t.loc["bsp", "reached"] == "0/1"
    # BSP took more than its 10 s: ASP's speedup is at least 10 / 2 = 5, and no more is known
    assert math.isnan(t.loc["asp", "speedup"]) and t.loc["asp", "speedup_low"] == 5.0
    assert math.isinf(t.loc["asp", "speedup_high"])
    md = cmp.markdown()
    assert "| bsp | 1 | 0.300 | 0.300 | > 10 (never) | 1.00x |" in md  # itself: 1x even though censored
    assert "| asp | 1 | 0.850 | 0.850 | 2 | >= 5.00x |" in md
    assert "| ssp | 1 | 0.300 | 0.300 | > 6 (never) | n/a (both censored) |" in md


def test_a_key_an_older_run_lacks_counts_as_its_default(tmp_path):
    # a run written before stop.diverged existed, beside one that sets it to its default: one configuration
    make_run(tmp_path, "old", "bsp", 0, **reach_at(2))
    make_run(tmp_path, "new", "bsp", 1, **reach_at(2), config={"stop": {"diverged": False}})
    make_run(tmp_path, "other", "bsp", 2, **reach_at(2), config={"stop": {"diverged": True}})
    labels = {r.path.name: r.label for r in load_runs([str(tmp_path)])}
    assert labels == {"old": "bsp[stop.diverged=false]", "new": "bsp[stop.diverged=false]",
                      "other": "bsp[stop.diverged=true]"}


def test_only_a_baseline_alone_at_its_pairs_is_1x_by_definition(tmp_path):
    # two BSP runs of one seed and environment are both the baseline: each is compared with their mean
    make_run(tmp_path, "bsp", "bsp", 0, **reach_at(2), label="bsp")
    make_run(tmp_path, "bsp-slow", "bsp", 0, **reach_at(6), label="bsp-slow")
    t = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "bsp").table.set_index("run")
    assert (t.loc["bsp", "speedup"], t.loc["bsp-slow", "speedup"]) == (2.0, 4 / 6)


def test_several_targets_are_tabled_with_bounds(tmp_path):
    for seed, reach in ((0, 3), (1, 5)):
        make_run(tmp_path, f"a{seed}", "asp", seed, times=list(range(8)),
                 accuracy=[0.5 if x < reach else 0.85 for x in range(8)])
    cmp = compare(load_runs([str(tmp_path)]), [Target("accuracy", 0.8), Target("accuracy", 0.9)], "asp")
    headers, cells = cmp.reach_display()
    assert headers == ["run", "time until accuracy>=0.8 (s)", "time until accuracy>=0.9 (s)"]
    assert cells[0][0] == "asp" and cells[0][1].startswith("4 [3, 5]") and cells[0][2] == "> 7 (never)"
    assert "**Time until each target**" in cmp.markdown()


def test_default_target_and_baseline(tmp_path):
    make_run(tmp_path, "a", "asp", 0, accuracy=(0.1, 0.5, 0.6, 0.7))
    make_run(tmp_path, "b", "bsp", 0, accuracy=(0.1, 0.5, 0.8, 0.9))
    runs = load_runs([str(tmp_path)])
    auto = choose_targets(runs)[0]
    assert (auto.metric, auto.value, auto.rule) == ("accuracy", 0.665, "stays")  # 95% of the weakest best 0.7
    assert compare(runs).baseline == "bsp"
    with pytest.raises(UserError, match="not both"):
        choose_targets(runs, [0.5], [0.5])
    for bad in (math.nan, math.inf, 1.5):
        with pytest.raises(UserError, match="--target-accuracy"):
            choose_targets(runs, [bad])
    with pytest.raises(UserError, match="unknown convergence rule 'often'"):
        choose_targets(runs, rule="often")


def test_runs_are_found_in_folders_of_runs_and_below_only_with_recursive(tmp_path):
    make_run(tmp_path / "x", "r1")
    make_run(tmp_path / "y" / "deeper", "r2")
    assert [p.name for p in find_runs([str(tmp_path / "x")])] == ["r1"]
    with pytest.raises(UserError, match="holds no run directory directly below it.*--recursive"):
        find_runs([str(tmp_path)])
    assert [p.name for p in find_runs([str(tmp_path)], recursive=True)] == ["r1", "r2"]
    assert [p.name for p in find_runs([str(tmp_path / "*" / "r*"), str(tmp_path / "x" / "r1")])] == ["r1"]
    with pytest.raises(UserError, match="does not exist"):
        find_runs([str(tmp_path / "nope")])
    # an experiment's results folder: its runs/
    exp = tmp_path / "results"
    make_run(exp / "runs", "r3")
    (exp / "experiment.toml").write_text("")
    assert [p.name for p in find_runs([str(exp)])] == ["r3"]


def test_compare_refuses_runs_of_different_experiments(tmp_path):
    make_run(tmp_path, "a", "bsp", experiment={"paper": "adsp", "quick": False})
    make_run(tmp_path, "b", "bsp", experiment={"paper": "baselines", "quick": False})
    make_run(tmp_path, "c", "bsp", seed=1, experiment={"paper": "adsp", "quick": True})
    with pytest.raises(UserError, match=r"different experiments \(adsp: 1 runs, baselines: 1 runs, adsp --quick"):
        load_runs([str(tmp_path)])
    result = CliRunner().invoke(cli.app, ["compare", str(tmp_path)])
    assert result.exit_code == 2 and "different experiments" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_compare_needs_run_directories_or_recursive(tmp_path):
    make_run(tmp_path / "deep" / "er", "r")
    result = CliRunner().invoke(cli.app, ["compare", str(tmp_path)])
    assert result.exit_code == 2 and "--recursive" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli.app, ["compare", str(tmp_path), "--recursive"])
    assert result.exit_code == 0, result.output


def test_labels_tell_configurations_apart(tmp_path):
    make_run(tmp_path, "a", "ssp", 0, config={"ssp": {"staleness": 3}})
    make_run(tmp_path, "b", "ssp", 1, config={"ssp": {"staleness": 3}})
    make_run(tmp_path, "c", "ssp", 0, config={"ssp": {"staleness": 10}})
    make_run(tmp_path, "d", "bsp", 0, label="my-bsp")
    runs = load_runs([str(tmp_path)])
    assert [r.label for r in runs] == ["ssp[ssp.staleness=3]", "ssp[ssp.staleness=3]", "ssp[ssp.staleness=10]",
                                       "my-bsp"]
    assert runs[2].point == {"ssp.staleness": 10} and runs[2].spec == "ssp"


def test_older_run_directories_give_one_line_errors(tmp_path):
    old = make_run(tmp_path, "old")
    summary = json.loads((old / "summary.json").read_text())
    del summary["ps_ingress_bytes"]
    (old / "summary.json").write_text(json.dumps(summary))
    with pytest.raises(UserError, match=r"old.*summary\.json lacks ps_ingress_bytes"):
        load_runs([str(old)])
    evals_only = make_run(tmp_path, "evals")
    pd.read_csv(evals_only / "evals.csv").drop(columns="accuracy").to_csv(evals_only / "evals.csv", index=False)
    with pytest.raises(UserError, match="evals.csv has no column accuracy"):
        compare(load_runs([str(evals_only)]), Target("accuracy", 0.5))
    (evals_only / "summary.json").unlink()
    result = CliRunner().invoke(cli.app, ["compare", str(evals_only)])
    assert result.exit_code == 2
    assert "missing summary.json" in result.output and "Traceback" not in result.output


def test_compare_command_writes_csv_and_markdown(tmp_path):
    for seed in (0, 1):
        make_run(tmp_path / "runs", f"bsp{seed}", "bsp", seed, **reach_at(4))
        make_run(tmp_path / "runs", f"ssp{seed}", "ssp", seed, **reach_at(2 + seed))
    result = CliRunner().invoke(cli.app, ["compare", str(tmp_path / "runs"), "--target-accuracy", "0.8",
                                          "--target-accuracy", "0.9", "--baseline", "bsp", "--out",
                                          str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "speedup vs bsp" in result.output and "time until each target" in result.output
    table = pd.read_csv(tmp_path / "out" / "compare.csv").set_index("run")
    assert table.loc["ssp", "speedup"] == pytest.approx((2 + 4 / 3) / 2)
    assert table.loc["ssp", "target"] == "accuracy stays >= 0.8"
    assert len(pd.read_csv(tmp_path / "out" / "compare_runs.csv")) == 4
    assert len(pd.read_csv(tmp_path / "out" / "compare_reach.csv")) == 8  # 4 runs x 2 targets
    assert "| ssp | 2 |" in (tmp_path / "out" / "compare.md").read_text()
    bad = CliRunner().invoke(cli.app, ["compare", str(tmp_path / "runs"), "--baseline", "adsp"])
    assert bad.exit_code == 2 and "baseline 'adsp' names no run" in bad.output
    a_file = tmp_path / "out" / "compare.md"
    for command in ("compare", "plot"):
        bad = CliRunner().invoke(cli.app, [command, str(tmp_path / "runs"), "--out", str(a_file)])
        assert bad.exit_code == 2 and f"--out '{a_file}' is a file" in bad.output, bad.output
    (tmp_path / "taken" / "compare.csv").mkdir(parents=True)  # a folder where a file must go
    bad = CliRunner().invoke(cli.app, ["compare", str(tmp_path / "runs"), "--out", str(tmp_path / "taken")])
    assert bad.exit_code == 1 and "compare.csv': Is a directory" in bad.output and "Traceback" not in bad.output


def test_tables_fold_rather_than_cut_in_a_narrow_terminal(tmp_path):
    make_run(tmp_path, "a-run-with-a-rather-long-name", "bsp", 0, label="a-run-with-a-rather-long-name",
             **reach_at(4))
    make_run(tmp_path, "asp", "asp", 0, label="asp", **reach_at(2))
    cmp = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "a-run-with-a-rather-long-name")
    console = Console(width=80, record=True, file=open("/dev/null", "w"))
    console.print(*cmp.rich())
    text = console.export_text()
    assert max(map(len, text.splitlines())) <= 80
    assert "…" not in text  # rich's default would end cut cells with an ellipsis


def test_an_unfinished_run_among_others_is_skipped(tmp_path):
    make_run(tmp_path, "done")
    make_run(tmp_path, "running", seed=1)
    (tmp_path / "running" / "summary.json").unlink()
    runs = load_runs([str(tmp_path)])
    assert [r.path.name for r in runs] == ["done"]


def test_claims_can_name_a_whole_number_summary_field(tmp_path):
    from edgeml.analysis.compare import claim_samples

    for seed, hops in ((0, 1200), (1, 1300)):  # whole numbers: pandas keeps them as numpy integers
        make_run(tmp_path / "runs", f"a{seed}", seed=seed, summary={"total_byte_hops": hops})
    runs = load_runs([str(tmp_path / "runs")])
    cmp = compare(runs, Target("accuracy", 0.8, "stays"))
    samples = claim_samples(runs, cmp.per_run, ["total_byte_hops", "total_steps"], [])
    assert sorted(samples[samples["metric"] == "total_byte_hops"]["lo"]) == [1200.0, 1300.0]
    assert sorted(samples[samples["metric"] == "total_steps"]["lo"]) == [30.0, 30.0]


def test_an_interrupted_run_is_never_pooled_with_a_completed_one(tmp_path):
    make_run(tmp_path, "done", "bsp", 0)
    make_run(tmp_path, "cut", "bsp", 0, times=(0, 1), accuracy=(0.1, 0.2), summary={"status": "interrupted"})
    make_run(tmp_path, "ssp", "ssp", 0)
    runs = load_runs([str(tmp_path)])
    assert sorted(r.label for r in runs) == ["bsp", "bsp (interrupted)", "ssp"]
    cmp = compare(runs, Target("accuracy", 0.85), baseline="bsp")
    assert set(cmp.table["run"]) == {"bsp", "bsp (interrupted)", "ssp"}
    assert (cmp.table.set_index("run").loc["bsp", "seeds"] == 1)


def test_labels_show_the_settings_that_differ_between_algorithms_and_the_resolution(tmp_path):
    """BSP on procs against SSP on sim: each label says which (not only the settings one algorithm varies)."""
    make_run(tmp_path, "a", "bsp", 0, config={"run": {"backend": "procs"}, "cluster": {"workers": 3}})
    make_run(tmp_path, "b", "ssp", 0, config={"run": {"backend": "sim"}, "eval": {"interval": 2.0}})
    runs = load_runs([str(tmp_path)])
    assert [r.label for r in runs] == ["bsp[run.backend=procs,eval.interval=1.0]",
                                       "ssp[run.backend=sim,eval.interval=2.0]"]
    cmp = compare(runs, Target("accuracy", 0.85))
    console = Console(record=True, width=200)
    console.print(*cmp.rich())
    assert "resolved to 2 s" in console.export_text()
