"""edgeml compare on hand-made run directories whose answers are known exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import tomli_w
from typer.testing import CliRunner

from edgeml import cli
from edgeml.errors import UserError
from edgeml.report import (Target, bootstrap_ci, choose_target, compare, find_runs, load_runs,
                           per_run_table)
from edgeml.reproduce import evaluate_claim


def make_run(root: Path, name: str, algorithm: str = "bsp", seed: int = 0, times=(0, 1, 2, 3),
             accuracy=(0.1, 0.5, 0.8, 0.9), loss=None, summary: dict | None = None, config: dict | None = None,
             label: str | None = None, series: dict[str, pd.DataFrame] | None = None) -> Path:
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
           "data": {"dataset": "digits"}, "cluster": {"workers": workers, "hetero": "1:1:3"}, algorithm: {}}
    for section, values in (config or {}).items():
        cfg.setdefault(section, {}).update(values)
    (path / "config.toml").write_text(tomli_w.dumps(cfg))
    (path / "meta.json").write_text(json.dumps({"seed": seed, "step_factors": [1.0, 1.0, 3.0]}))
    accs = [a for a in accuracy if not math.isnan(a)]
    s = {"algorithm": algorithm, "dataset": "digits", "model": "mlp", "workers": workers, "hetero": "1:1:3",
         "backend": "sim", "seed": seed, "duration_s": float(times[-1]), "final_accuracy": accs[-1],
         "best_accuracy": max(accs), "final_loss": loss[-1], "best_loss": min(loss),
         "total_steps": 10 * times[-1], "total_samples": 320 * times[-1], "total_bytes": 1000 * times[-1],
         "ps_ingress_bytes": 500 * times[-1], "compute_fraction": 0.5, "comm_fraction": 0.1,
         "wait_fraction": 0.4, "target_accuracy": None, "target_loss": None, **(summary or {})}
    (path / "summary.json").write_text(json.dumps(s))
    if label:
        (path / "experiment.json").write_text(json.dumps({"run": label, "seed": seed}))
    for name_, df in (series or {}).items():
        (path / "series").mkdir(exist_ok=True)
        df.to_csv(path / "series" / f"{name_}.csv", index=False)
    return path


def reach_at(t: int, horizon: int = 10) -> dict:
    """Evaluations every second that first reach accuracy 0.8 at second ``t``."""
    times = list(range(horizon + 1))
    return {"times": times, "accuracy": [0.5 if x < t else 0.85 for x in times]}


def test_time_to_target_is_the_first_evaluation_reaching_it(tmp_path):
    make_run(tmp_path, "r", times=(0, 1, 2, 3, 4), accuracy=(0.1, math.nan, 0.79, 0.8, 0.9),
             loss=(2.0, math.nan, 0.6, 0.4, 0.3))
    runs = load_runs([str(tmp_path)])
    row = per_run_table(runs, Target("accuracy", 0.8), None).iloc[0]
    assert (row["time_to_target"], row["steps_to_target"], row["bytes_to_target"]) == (3.0, 30.0, 3000.0)
    assert per_run_table(runs, Target("loss", 0.6), None).iloc[0]["time_to_target"] == 2.0
    assert math.isnan(per_run_table(runs, Target("accuracy", 0.95), None).iloc[0]["time_to_target"])


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
    assert "| bsp | 1 | 0.850 | 0.850 | 4.00 | 1.00x | 3.0 | 1.2 | 50/10/40 | 100 |" in md
    assert "| asp | 1 | 0.850 | 0.850 | 2.00 | 2.00x |" in md and "[" not in md.split("\n", 1)[1]


def test_unreached_target_shows_not_reached_and_nan(tmp_path):
    make_run(tmp_path, "bsp", "bsp", 0, **reach_at(4))
    make_run(tmp_path, "ssp", "ssp", 0, times=(0, 1, 2), accuracy=(0.1, 0.2, 0.3))
    cmp = compare(load_runs([str(tmp_path)]), Target("accuracy", 0.8), "bsp")
    t = cmp.table.set_index("run")
    assert math.isnan(t.loc["ssp", "time_to_target"]) and math.isnan(t.loc["ssp", "speedup"])
    assert t.loc["ssp", "reached"] == "0/1"
    assert "not reached (0/1)" in cmp.markdown()


def test_default_target_and_baseline(tmp_path):
    make_run(tmp_path, "a", "asp", 0, accuracy=(0.1, 0.5, 0.6, 0.7))
    make_run(tmp_path, "b", "bsp", 0, accuracy=(0.1, 0.5, 0.8, 0.9))
    runs = load_runs([str(tmp_path)])
    auto = choose_target(runs)
    assert (auto.metric, auto.value) == ("accuracy", 0.665)  # 95% of the weakest run's best accuracy 0.7
    assert compare(runs).baseline == "bsp"
    with pytest.raises(UserError, match="not both"):
        choose_target(runs, 0.5, 0.5)


def test_runs_are_found_below_folders_and_by_glob(tmp_path):
    make_run(tmp_path / "x", "r1")
    make_run(tmp_path / "y" / "deeper", "r2")
    assert [p.name for p in find_runs([str(tmp_path)])] == ["r1", "r2"]
    assert [p.name for p in find_runs([str(tmp_path / "*" / "r*"), str(tmp_path / "x" / "r1")])] == ["r1"]
    with pytest.raises(UserError, match="does not exist"):
        find_runs([str(tmp_path / "nope")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no run directory"):
        find_runs([str(tmp_path / "empty")])


def test_labels_tell_configurations_apart(tmp_path):
    make_run(tmp_path, "a", "ssp", 0, config={"ssp": {"staleness": 3}})
    make_run(tmp_path, "b", "ssp", 1, config={"ssp": {"staleness": 3}})
    make_run(tmp_path, "c", "ssp", 0, config={"ssp": {"staleness": 10}})
    make_run(tmp_path, "d", "bsp", 0, label="my-bsp")
    labels = [r.label for r in load_runs([str(tmp_path)])]
    assert labels == ["ssp[ssp.staleness=3]", "ssp[ssp.staleness=3]", "ssp[ssp.staleness=10]", "my-bsp"]


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
    cli._register_extensions()
    result = CliRunner().invoke(cli.app, ["compare", str(evals_only)])
    assert result.exit_code == 2
    assert "missing summary.json" in result.output and "Traceback" not in result.output


def test_compare_command_writes_csv_and_markdown(tmp_path):
    for seed in (0, 1):
        make_run(tmp_path / "runs", f"bsp{seed}", "bsp", seed, **reach_at(4))
        make_run(tmp_path / "runs", f"ssp{seed}", "ssp", seed, **reach_at(2 + seed))
    cli._register_extensions()
    result = CliRunner().invoke(cli.app, ["compare", str(tmp_path / "runs"), "--target-accuracy", "0.8",
                                          "--baseline", "bsp", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "speedup vs bsp" in result.output
    table = pd.read_csv(tmp_path / "out" / "compare.csv").set_index("run")
    assert table.loc["ssp", "speedup"] == pytest.approx((2 + 4 / 3) / 2)
    assert table.loc["ssp", "target"] == "accuracy >= 0.8"
    assert len(pd.read_csv(tmp_path / "out" / "compare_runs.csv")) == 4
    assert "| ssp | 2 |" in (tmp_path / "out" / "compare.md").read_text()
    bad = CliRunner().invoke(cli.app, ["compare", str(tmp_path / "runs"), "--baseline", "adsp"])
    assert bad.exit_code == 2 and "baseline 'adsp' names no run" in bad.output


def claim(kind: str, paper=None, metric: str = "time_to_target", **extra) -> dict:
    return {"text": "t", "metric": metric, "run": "new", "kind": kind, "paper_value": paper, **extra}


@pytest.mark.parametrize("new, kind, paper, verdict", [
    (2.0, "reduction", 0.8, "holds"),          # 1 - 2/10 = 0.8
    (5.0, "reduction", 0.8, "weaker"),         # 0.5
    (11.0, "reduction", 0.8, "does not hold"),  # -0.1
    (math.nan, "reduction", 0.8, "does not hold"),  # never reached: infinitely slow
    (4.0, "reduction", None, "holds"),         # direction only
    (9.5, "reduction", None, "marginal"),      # 5%: too small to count
    (2.0, "ratio", 5.0, "holds"),              # 10 / 2 = 5
    (5.0, "ratio", 5.0, "weaker"),             # 2
])
def test_claim_verdicts_are_computed(new, kind, paper, verdict):
    table = pd.DataFrame({"run": ["base", "new"], "time_to_target": [10.0, new], "wait_fraction": [0.6, 0.1]})
    c = claim(kind, paper)
    if paper is None:
        del c["paper_value"]
    assert evaluate_claim(c, table, "base")["verdict"] == verdict


def test_value_claims_and_unknown_metrics():
    table = pd.DataFrame({"run": ["base", "new"], "time_to_target": [10.0, 1.0], "wait_fraction": [0.6, 0.1]})
    low = {**claim("value", 0.5, "wait_fraction"), "run": "base"}
    assert evaluate_claim(low, table, "base") == {"claim": "t", "paper": ">= 50%", "measured": "60%",
                                                  "verdict": "holds"}
    assert evaluate_claim({**low, "op": "<="}, table, "base")["verdict"] == "does not hold"
    assert evaluate_claim(claim("value", 1, "nope"), table, "base")["verdict"].startswith("not measured")


def test_an_unfinished_run_among_others_is_skipped(tmp_path):
    import shutil

    from edgeml.report import load_runs

    src = Path(__file__).resolve().parents[1] / "results" / "baselines" / "runs"
    shutil.copytree(src / "bsp-s0", tmp_path / "done")
    shutil.copytree(src / "ssp-s0", tmp_path / "running")
    (tmp_path / "running" / "summary.json").unlink()
    runs = load_runs([str(tmp_path)])
    assert [r.path.name for r in runs] == ["done"]
