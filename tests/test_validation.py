"""Bad input refused before anything runs: experiment files checked whole at load (names, seeds, targets,
metrics, figures, the --quick configuration), upper bounds of a run's config before torch loads, and plugins."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeml import cli
from edgeml.algorithms import REGISTRY, AlgorithmSpec, register
from edgeml.algorithms.ps import PSConfig
from edgeml.config import load_config
from edgeml.errors import UserError
from edgeml.reproduce.load import load_experiment
from edgeml.reproduce.validate import NAME_MAX, metrics
from edgeml.schema import MAX_EVALUATIONS, NAME_MAX_BYTES

ROOT = Path(__file__).resolve().parents[1]

TOY = """
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

[[figures]]
id = "fig5"
title = "Fig. 5"
against = [{ x = "cluster.hetero", y = ["time_to_target"] }]

[[runs]]
algorithm = "bsp"
sweep = { "cluster.hetero" = ["H=1", "1:3"] }
figure = "fig5"

[[runs]]
name = "ssp-tight"
algorithm = "ssp"
config = { ssp = { staleness = 1 } }
figure = "fig5"

[[claims]]
text = "tighter is slower"
metric = "time_to_target"
run = "ssp-tight"
baseline = "bsp[cluster.hetero=H=1]"
kind = "ratio"
seeds = [0, 1]
targets = [0.5, 0.6]
"""


def write(tmp_path: Path, text: str, name: str = "toy.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def edited(tmp_path: Path, old: str, new: str) -> str:
    assert old in TOY, old
    return write(tmp_path, TOY.replace(old, new, 1))


def refused(path: str) -> str:
    with pytest.raises(UserError) as exc:
        load_experiment(path)
    message = str(exc.value)
    assert "\n" not in message
    return message


def test_the_toy_experiment_loads(tmp_path):
    exp = load_experiment(write(tmp_path, TOY))
    assert [r.name for r in exp.runs] == ["bsp", "ssp-tight"]


# ------------------------------------------------------------------------------------------------ names


@pytest.mark.parametrize("paper", ["../../x", "a/b", ".hidden", "with space", "x" * (NAME_MAX + 1), "é"])
def test_a_paper_that_is_no_plain_name_is_refused(tmp_path, paper):
    message = refused(edited(tmp_path, 'paper = "toy"', f"paper = {json.dumps(paper)}"))
    assert "[experiment] paper" in message and "A-Z a-z 0-9 . _ -" in message


def test_the_longest_plain_names_load(tmp_path):
    long = "p" * NAME_MAX
    exp = load_experiment(edited(tmp_path, 'paper = "toy"', f'paper = "{long}"'))
    assert exp.paper == long


@pytest.mark.parametrize("name", ["ssp tight", "../ssp", ".ssp", "ssp/tight", "ssp[1]", "s" * (NAME_MAX + 1)])
def test_a_run_name_that_is_no_plain_name_is_refused(tmp_path, name):
    message = refused(edited(tmp_path, 'name = "ssp-tight"', f"name = {json.dumps(name)}"))
    assert "[[runs]] name" in message and repr(name) in message


def test_run_names_that_differ_only_in_case_are_refused(tmp_path):
    text = TOY.replace('run = "ssp-tight"', 'run = "SSP-tight"') + """
[[runs]]
name = "SSP-tight"
algorithm = "ssp"
"""
    message = refused(write(tmp_path, text))
    assert "'ssp-tight' and 'SSP-tight' differ only in case" in message


@pytest.mark.parametrize("values, why", [('["A", "a"]', "share"), ('["a b", "a_b"]', "share"),
                                         ('["a", "a"]', "planned twice")])
def test_swept_points_that_share_a_run_directory_are_refused(tmp_path, values, why):
    path = edited(tmp_path, '"cluster.hetero" = ["H=1", "1:3"]', f'"data.root" = {values}')
    first = json.loads(values)[0]
    path = write(tmp_path, Path(path).read_text().replace("bsp[cluster.hetero=H=1]", f"bsp[data.root={first}]")
                 .replace('x = "cluster.hetero"', 'x = "data.root"'))
    message = refused(path)
    assert why in message and "bsp[data.root=" in message


def test_swept_points_that_differ_only_in_the_quick_configuration_are_refused_without_quick(tmp_path):
    text = TOY.replace('sweep = { "cluster.hetero" = ["H=1", "1:3"] }',
                       'sweep = { "cluster.hetero" = ["H=1", "1:3"] }\nquick_sweep = { "data.root" = ["A", "a"] }')
    message = refused(write(tmp_path, text))
    assert "with --quick" in message


def test_figure_ids_that_collide_without_case_are_refused(tmp_path):
    text = TOY + '\n[[figures]]\nid = "FIG5"\ntitle = "again"\n'
    text = text.replace('figure = "fig5"\n\n[[runs]]\nname = "ssp-tight"', 'figure = "FIG5"\n\n[[runs]]\nname = '
                                                                         '"ssp-tight"')
    message = refused(write(tmp_path, text))
    assert "figures/fig5/" in message and "rename one" in message


@pytest.mark.parametrize("fid", ["fig 5", "../fig5", ".fig5", "f" * (NAME_MAX + 1)])
def test_a_figure_id_that_is_no_plain_name_is_refused(tmp_path, fid):
    text = TOY.replace('id = "fig5"', f"id = {json.dumps(fid)}").replace('figure = "fig5"', f"figure = "
                                                                                           f"{json.dumps(fid)}")
    assert "figure id" in refused(write(tmp_path, text))


def test_a_run_figure_title_that_makes_no_folder_is_refused(tmp_path):
    text = TOY.replace('figure = "fig5"\n\n[[runs]]\nname', 'figure = ["fig5", ": untitled"]\n\n[[runs]]\nname')
    assert "empty folder name" in refused(write(tmp_path, text))


# ------------------------------------------------------------------------------------------------ seeds


@pytest.mark.parametrize("old, new, where", [
    ("seeds = [0, 1]\nbaseline", "seeds = [0, 1, 0]\nbaseline", "[experiment] seeds"),
    ('name = "ssp-tight"', 'name = "ssp-tight"\nseeds = [1, 1]', "run 'ssp-tight': seeds"),
    ('name = "ssp-tight"', 'name = "ssp-tight"\nquick_seeds = [2, 2]', "run 'ssp-tight': quick_seeds"),
    ("seeds = [0, 1]\ntargets", "seeds = [1, 1]\ntargets", "claim 'tighter is slower': seeds"),
])
def test_a_seed_listed_twice_is_refused(tmp_path, old, new, where):
    message = refused(edited(tmp_path, old, new))
    assert where in message and "twice" in message


def test_a_claim_on_seeds_that_are_not_run_is_refused(tmp_path):
    message = refused(edited(tmp_path, "seeds = [0, 1]\ntargets", "seeds = [0, 2]\ntargets"))
    assert "seed 2" in message and "'ssp-tight'" in message
    # the run's own seeds count: a run that runs seed 2 makes the claim measurable on its side only
    text = TOY.replace('name = "ssp-tight"', 'name = "ssp-tight"\nseeds = [0, 1, 2]')
    message = refused(write(tmp_path, text.replace("seeds = [0, 1]\ntargets", "seeds = [0, 2]\ntargets")))
    assert "seed 2" in message and "'bsp'" in message


# ------------------------------------------------------------------------------------------------ targets


@pytest.mark.parametrize("targets", ["[2.0]", "[0.5, 1.5]", "[0.0]", "[-0.1]"])
def test_a_claim_target_outside_the_accuracy_range_is_refused(tmp_path, targets):
    message = refused(edited(tmp_path, "targets = [0.5, 0.6]", f"targets = {targets}"))
    assert "can never be reached" in message and "(0, 1]" in message


def test_an_accuracy_target_of_zero_or_above_one_is_refused(tmp_path):
    assert "(0, 1]" in refused(edited(tmp_path, "target_accuracy = 0.5", "target_accuracy = 0.0"))
    assert "target_accuracy" in refused(edited(tmp_path, "target_accuracy = 0.5", "target_accuracy = 2.0"))


def test_loss_targets_take_any_positive_value(tmp_path):
    path = write(tmp_path, TOY.replace("target_accuracy = 0.5", "target_loss = 0.5").replace(
        "targets = [0.5, 0.6]", "targets = [2.0, 0.3]"))
    assert load_experiment(path).targets[0].metric == "loss"
    assert "a loss above 0" in refused(write(tmp_path, Path(path).read_text().replace("[2.0, 0.3]", "[0.0]")))


# ------------------------------------------------------------------------------------------------ metrics


def test_a_claim_on_an_unknown_metric_is_refused_with_the_closest_one(tmp_path):
    text = TOY.replace('metric = "time_to_target"', 'metric = "final_acuracy"').replace("targets = [0.5, 0.6]\n", "")
    message = refused(write(tmp_path, text))
    assert "'final_acuracy'" in message and "did you mean 'final_accuracy'" in message


def test_a_claim_on_a_decision_its_algorithm_does_not_log_is_refused(tmp_path):
    value = TOY + """
[[runs]]
name = "adsp"
algorithm = "adsp"

[[claims]]
text = "the rate settles"
metric = "commit_rate"
run = "{run}"
kind = "value"
paper_value = 1.0
"""
    assert load_experiment(write(tmp_path, value.replace("{run}", "adsp"))).claims[-1].metric == "commit_rate"
    message = refused(write(tmp_path, value.replace("{run}", "ssp-tight")))
    assert "'commit_rate'" in message and "for ssp" in message


def test_every_logged_decision_is_declared_by_its_algorithm():
    """Claims may name a decision only where the algorithm declares it (AlgorithmSpec.decisions): every name an
    algorithm's programs log as a decision must be declared by some algorithm."""
    declared = {d for spec in REGISTRY.values() for d in spec.decisions}
    logged = set()
    for path in (ROOT / "edgeml" / "algorithms").rglob("*.py"):
        logged |= set(re.findall(r'log\(\s*"decisions",\s*name="([^"]+)"', path.read_text()))
    assert logged and logged <= declared, logged - declared


def test_the_summary_metrics_are_what_a_run_records(tmp_path):
    """The metrics claims may name from a run's summary are those a run writes (so a new summary number is
    claimable, and no name is accepted that no run has)."""
    from edgeml.analysis.compare import run_metrics
    from edgeml.rundir import load_runs
    from edgeml.runner import run

    cfg = load_config(overrides=["run.backend='sim'", "stop.max_time=0.5", "cluster.workers=2",
                                 f"run.out='{tmp_path}'", "run.name='r'"])
    path = run(cfg, quiet=True)
    summary = json.loads((path / "summary.json").read_text())
    numbers = {k for k, v in summary.items() if (isinstance(v, (int, float)) or v is None)
               and not isinstance(v, bool) and k != "seed" and not k.startswith(("target_", "time_to_target_"))}
    assert numbers <= set(metrics()), numbers - set(metrics())
    assert set(run_metrics(load_runs([str(path)])[0])) <= set(metrics())


def test_two_claims_worded_alike_are_refused(tmp_path):
    claim = TOY[TOY.index("[[claims]]"):]
    message = refused(write(tmp_path, TOY + "\n" + claim.replace('kind = "ratio"', 'kind = "reduction"')))
    assert "two claims read 'tighter is slower'" in message


def test_against_axes_name_config_keys_or_metrics(tmp_path):
    message = refused(edited(tmp_path, 'x = "cluster.hetero"', 'x = "cluster.hetro"'))
    assert "'cluster.hetro' is no config key" in message and "did you mean 'cluster.hetero'" in message
    assert "against y names metric 'time_to_targt'" in refused(
        edited(tmp_path, 'y = ["time_to_target"]', 'y = ["time_to_targt"]'))
    assert "ssp.staleness" not in refused(edited(tmp_path, 'x = "cluster.hetero"', 'x = "adsp.fixed_rate"'))
    load_experiment(edited(tmp_path, 'x = "cluster.hetero"', 'x = "ssp.staleness"'))  # an algorithm's own key
    load_experiment(edited(tmp_path, 'x = "cluster.hetero"', 'x = "best_accuracy"'))  # a metric


def test_two_against_panels_on_one_x_are_refused(tmp_path):
    message = refused(edited(tmp_path, 'y = ["time_to_target"] }]',
                             'y = ["time_to_target"] }, { x = "cluster.hetero", y = ["best_accuracy"] }]'))
    assert "against 'cluster.hetero' twice" in message


def test_a_settled_decision_no_run_logs_is_refused(tmp_path):
    message = refused(edited(tmp_path, 'title = "Fig. 5"',
                             'title = "Fig. 5"\nsettled = { decision = "commit_rate", fixed = "adsp.fixed_rate" }'))
    assert "settled decision = 'commit_rate'" in message


# ------------------------------------------------------------------------------------------------ --quick


def test_the_quick_configuration_is_checked_without_quick(tmp_path):
    path = edited(tmp_path, "stop = { max_time = 2 }", "stop = { max_tme = 2 }")
    message = refused(path)
    assert "max_tme" in message and "--quick" in message
    result = CliRunner().invoke(cli.app, ["reproduce", path, "--plan"])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "max_tme" in result.output, result.output


def test_a_bad_experiment_is_refused_by_plan_and_run_before_anything_is_written(tmp_path):
    path = edited(tmp_path, 'paper = "toy"', 'paper = "../../escaped"')
    out = tmp_path / "out"
    for args in (["--plan"], ["--quick", "--out", str(out)], []):
        result = CliRunner().invoke(cli.app, ["reproduce", path, *args])
        assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
        assert "Traceback" not in result.output
    assert not out.exists() and not (tmp_path / "escaped").exists()


# ------------------------------------------------------------------------------------------------ limits


def limited(*overrides: str) -> str:
    with pytest.raises(UserError) as exc:
        load_config(overrides=["run.backend='sim'", *overrides])
    assert "\n" not in str(exc.value)
    return str(exc.value)


def test_workers_beyond_the_machines_memory_are_refused_with_the_estimate(monkeypatch):
    import psutil

    message = limited("cluster.workers=1e18")
    assert message.startswith("cluster.workers = 1000000000000000000 needs at least") and "use a whole number in [1," \
        in message
    total = 2**30  # a machine of 1 GiB: sim workers take 0.125 MiB, procs workers 16
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("M", (), {"total": total})())
    assert "more than this machine's 1 GiB: use a whole number in [1, 8191]" in limited("cluster.workers=8192")
    load_config(overrides=["run.backend='sim'", "cluster.workers=8191", "data.dataset='credit-synthetic'",
                           "data.batch_size=1"])
    assert "on the procs backend (16 MiB a worker)" in limited("run.backend='procs'", "cluster.workers=64")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "x")  # under torchrun the nodes use other machines' memory too
    load_config(overrides=["run.backend='procs'", "cluster.workers=64"])


def test_threads_beyond_the_machines_cores_are_refused():
    cores = os.cpu_count()
    assert f"run.threads = {cores + 1} is more than this machine's {cores} cores: use a whole number in [1, {cores}]" \
        == limited(f"run.threads={cores + 1}")
    assert load_config(overrides=["run.backend='sim'", f"run.threads={cores}"]).run.threads == cores


def test_evaluations_per_run_are_bounded():
    assert "eval.interval = 1e-09 is out of range: use a number >= 0.001" in limited("eval.interval=1e-9")
    most = 0.001 * MAX_EVALUATIONS
    load_config(overrides=["eval.interval=0.001", f"stop.max_time={most}"])
    message = limited("eval.interval=0.001", f"stop.max_time={most * 1.5}")
    assert "evaluations in stop.max_time" in message and "use eval.interval >= 0.0015" in message
    load_config(overrides=["eval.interval=0.001", "stop.max_time=1e9", "stop.max_steps=1000"])  # time: a backstop


def test_names_and_paths_within_what_file_systems_take(tmp_path):
    message = limited("run.name='" + "x" * 300 + "'")
    assert "is 300 bytes long: use a name of 1 to 200 bytes (--name)" in message
    assert load_config(overrides=[f"run.name='{'é' * (NAME_MAX_BYTES // 2)}'"]).run.name  # 200 bytes
    assert "bytes" in limited(f"run.name='{'é' * (NAME_MAX_BYTES // 2)}x'")
    assert "a folder name of 300 bytes" in limited(f"run.out='{tmp_path}/{'x' * 300}/runs'")
    assert "load.dir" in limited(f"load.dir='/{'x/' * 2000}'")


def test_limits_are_checked_before_torch_loads():
    """A refused name or bound costs no start-up: the CLI refuses it before importing torch."""
    code = ("import sys\nfrom edgeml import cli\nsys.argv = ['edgeml', 'run', 'bsp', '--backend', 'sim', "
            "'--name', 'x' * 300]\ntry:\n    cli.main()\nexcept SystemExit as e:\n"
            "    print('torch' in sys.modules, e.code)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.stdout.split() == ["False", "2"], p.stdout + p.stderr
    assert p.stderr.count("\n") == 1 and "run.name" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------------------------------------ plugins


PLUGINS = {
    "p_raises": 'raise RuntimeError("broken plugin")\n',
    "p_exits": "import sys\nsys.exit(3)\n",
    "p_needs": "import edgeml_no_such_dependency\n",
    "p_takes_bsp": "from edgeml.algorithms.registry import AlgorithmSpec, register\n"
                   "from edgeml.algorithms.ps import PSConfig\n"
                   "register(AlgorithmSpec('bsp', 'mine', PSConfig, lambda cfg: []))\n",
    "p_replaces_bsp": "from edgeml.algorithms.registry import REGISTRY, AlgorithmSpec, register\n"
                      "from edgeml.algorithms.ps import PSConfig\n"
                      "register(AlgorithmSpec('bsp', 'mine', PSConfig, REGISTRY['bsp'].nodes), replace=True)\n",
}


@pytest.fixture
def plugin_dir(tmp_path):
    for name, text in PLUGINS.items():
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


def edgeml_with(plugin_dir: Path, plugins: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{plugin_dir}{os.pathsep}{ROOT}", "EDGEML_PLUGINS": plugins}
    return subprocess.run([sys.executable, "-m", "edgeml", *args], capture_output=True, text=True, timeout=120,
                          env=env, cwd=plugin_dir)


@pytest.mark.parametrize("plugin, words", [
    ("p_raises", ["'p_raises'", "RuntimeError: broken plugin", "p_raises.py:1"]),
    ("p_exits", ["'p_exits'", "SystemExit: 3"]),
    ("p_needs", ["'p_needs'", "No module named 'edgeml_no_such_dependency'", "install what it needs"]),
    ("edgeml_no_such_plugin", ["'edgeml_no_such_plugin' which cannot be imported", "PYTHONPATH"]),
    (".p_raises", ["'.p_raises', a relative module name"]),
    ("p_takes_bsp", ["'p_takes_bsp'", "'bsp' is already registered", "replace=True"]),
])
def test_a_plugin_that_fails_to_import_is_one_line(plugin_dir, plugin, words):
    p = edgeml_with(plugin_dir, plugin, "run", "bsp", "--backend", "sim", "--max-time", "1", "--out", "runs")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr, p.stderr
    assert all(w in p.stderr for w in words), p.stderr
    assert not (plugin_dir / "runs").exists()


def test_every_command_says_a_plugin_fault_in_one_line(plugin_dir):
    for args in (["list", "algorithms"], ["bsp"], ["reproduce", "baselines", "--plan"]):  # `edgeml bsp`: no command
        p = edgeml_with(plugin_dir, "p_raises", *args)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and "'p_raises'" in p.stderr, (args, p.stderr)


def test_a_plugin_replaces_an_algorithm_when_it_says_so(plugin_dir):
    p = edgeml_with(plugin_dir, "p_replaces_bsp", "list", "bsp")
    assert p.returncode == 0 and "mine" in p.stdout, p.stderr


def test_registering_a_taken_name_or_alias_is_refused():
    bsp = REGISTRY["bsp"]
    for name, aliases in (("bsp", ()), ("BSP", ()), ("tap", ()), ("fresh-name", ("ssp",))):
        with pytest.raises(UserError, match="already registered"):
            register(AlgorithmSpec(name, "x", PSConfig, bsp.nodes), *aliases)
        assert name not in REGISTRY or REGISTRY[name] is bsp
    assert register(bsp) is bsp  # the same spec again is no conflict
    try:
        mine = register(AlgorithmSpec("bsp", "mine", PSConfig, bsp.nodes), replace=True)
        assert REGISTRY["bsp"] is mine
    finally:
        REGISTRY["bsp"] = bsp


def test_a_claim_on_a_series_kept_only_where_drawn_must_read_runs_drawn_with_it(tmp_path):
    """late_sent_fraction reads series/exchange.csv, which a reproduction keeps only in runs a figure draws the
    exchange panel for: SNAP's claim on it loads; the same claim on runs no such figure draws is refused, one line."""
    import shutil
    from pathlib import Path

    from edgeml.reproduce.load import load_experiment

    root = Path(__file__).resolve().parents[1] / "experiments" / "snap"
    load_experiment(str(root))
    shutil.copytree(root, tmp_path / "snap")
    toml = tmp_path / "snap" / "experiment.toml"
    text = toml.read_text()
    assert 'run = "svm-sent-snap0"\nop = ">="' in text
    toml.write_text(text.replace('run = "svm-sent-snap0"\nop = ">="', 'run = "svm-snap0"\nop = ">="'))
    with pytest.raises(UserError, match="reads late_sent_fraction from series/exchange.csv.*put svm-snap0 in a figure"):
        load_experiment(str(tmp_path / "snap"))
