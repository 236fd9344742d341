"""What the command line prints: names as written, suggestions for mistyped names, whole command descriptions,
the way back after Ctrl-C, and the target that `plot` draws its bars at."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from edgeml.analysis.tables import rich_table
from edgeml.cli import app

runner = CliRunner()


def rendered(*renderables) -> str:
    console = Console(record=True, width=200, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(*renderables)
    return console.export_text()


def test_a_console_table_prints_run_names_with_brackets_as_written():
    table = rich_table("[cluster.hetero=1:2] runs", ["run", "[x]"],
                       [["bsp[run.backend=procs]", "1"], ["bsp[run.backend=sim]", "[2, 3]"]])
    text = " ".join(rendered(table).split())
    for shown in ("bsp[run.backend=procs]", "bsp[run.backend=sim]", "[2, 3]", "[x]", "[cluster.hetero=1:2] runs",
                  "[95% bootstrap interval]"):
        assert shown in text


@pytest.mark.parametrize("args, suggestion", [
    (["run", "bps"], "did you mean 'bsp'?"),
    (["run", "adps"], "did you mean 'adsp'?"),
    (["run", "bsp", "--model", "lenet"], "did you mean 'lenet5'?"),
    (["run", "bsp", "--dataset", "digit"], "did you mean 'digits'?"),
    (["run", "bsp", "--partition", "dirichelt"], "did you mean 'dirichlet'?"),
    (["run", "bsp", "--hetero", "homogenous"], "did you mean 'homogeneous'?"),
    (["run", "bsp", "--network", "lam"], "did you mean 'lan'?"),
])
def test_a_mistyped_name_gets_the_closest_known_one(tmp_path, args, suggestion):
    out = tmp_path / "runs"
    result = runner.invoke(app, [*args, "--backend", "sim", "--out", str(out), "--quiet"])
    assert result.exit_code == 2, result.output
    assert suggestion in result.output and "Traceback" not in result.output
    assert not out.exists()


def test_a_name_far_from_every_known_one_gets_no_suggestion(tmp_path):
    result = runner.invoke(app, ["run", "zzzzzz", "--backend", "sim", "--out", str(tmp_path / "runs")])
    assert result.exit_code == 2 and "did you mean" not in result.output


def test_help_lists_each_command_with_its_whole_description():
    from edgeml import cli

    result = runner.invoke(app, ["--help"], terminal_width=80)
    assert result.exit_code == 0
    listed = " ".join(result.output.split("Commands:", 1)[1].split())
    assert "..." not in listed
    for fn in (cli.run, cli.list_, cli.compare, cli.plot, cli.reproduce):
        assert " ".join(fn.__doc__.split()) in listed


def test_reproduce_interrupted_prints_the_command_that_resumes(monkeypatch, tmp_path):
    import edgeml.reproduce

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(edgeml.reproduce, "reproduce", interrupted)
    out = tmp_path / "my out"
    result = runner.invoke(app, ["reproduce", "baselines", "--quick", "--out", str(out), "--only", "fig1*",
                                 "--seeds", "0,1", "--jobs", "1"])
    assert result.exit_code == 130
    line = " ".join(result.output.split())
    assert f"edgeml reproduce baselines --quick --out '{out}' --seeds 0,1 --only 'fig1*' --jobs 1 --resume" in line


def test_reproduce_interrupted_within_a_run_still_prints_the_command_that_resumes(monkeypatch, tmp_path):
    import edgeml.reproduce
    from edgeml.errors import Interrupted

    def interrupted(*args, **kwargs):  # Ctrl-C while a run went on in this process (--jobs 1)
        raise Interrupted(tmp_path / "runs" / "fig1-bsp")

    monkeypatch.setattr(edgeml.reproduce, "reproduce", interrupted)
    result = runner.invoke(app, ["reproduce", "baselines", "--quick", "--jobs", "1"])
    assert result.exit_code == 130
    assert "edgeml reproduce baselines --quick --jobs 1 --resume" in " ".join(result.output.split())


def _class_made_under_ctrl_c():
    """A class whose making meets a Ctrl-C, as matplotlib's import can: Python 3.11 hands it back as a
    RuntimeError caused by the KeyboardInterrupt (later versions raise the interrupt itself)."""

    class Descriptor:
        def __set_name__(self, owner, name):
            raise KeyboardInterrupt

    class Owner:
        field = Descriptor()

    return Owner


@pytest.mark.parametrize("wrapped", ["by a class being made", "as a cause"])
def test_a_ctrl_c_handed_back_wrapped_still_stops_a_reproduction_as_a_ctrl_c(monkeypatch, wrapped):
    import edgeml.reproduce

    def interrupted(*args, **kwargs):
        if wrapped == "as a cause":
            raise RuntimeError("while a module imported") from KeyboardInterrupt()
        _class_made_under_ctrl_c()

    monkeypatch.setattr(edgeml.reproduce, "reproduce", interrupted)
    result = runner.invoke(app, ["reproduce", "baselines", "--quick", "--jobs", "1"])
    assert result.exit_code == 130, result.output
    assert "edgeml reproduce baselines --quick --jobs 1 --resume" in " ".join(result.output.split())


def test_only_an_interrupt_in_the_cause_chain_counts_as_one():
    from edgeml.errors import interrupt_within, unwrap_interrupt

    ctrl_c = KeyboardInterrupt()
    try:
        raise RuntimeError("outer") from ValueError("middle")
    except RuntimeError as exc:
        assert interrupt_within(exc) is None
        exc.__cause__.__cause__ = ctrl_c
        assert interrupt_within(exc) is ctrl_c
    with pytest.raises(KeyboardInterrupt):
        unwrap_interrupt(_class_made_under_ctrl_c)
    with pytest.raises(ValueError, match="not an interrupt"):
        unwrap_interrupt(int, "not an interrupt")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> Path:
    """Two short sim runs told apart by a setting: their names carry brackets."""
    out = tmp_path_factory.mktemp("runs")
    for hetero in ("homogeneous", "1:1:1:3"):
        result = runner.invoke(app, ["run", "bsp", "--backend", "sim", "--hetero", hetero, "--max-time", "3",
                                     "--out", str(out), "--quiet"])
        assert result.exit_code == 0, result.output
    return out


def test_compare_prints_each_run_by_its_whole_name(two_runs):
    result = runner.invoke(app, ["compare", str(two_runs)], terminal_width=240)
    assert result.exit_code == 0, result.output
    assert "bsp[cluster.hetero=homogeneous]" in result.output and "bsp[cluster.hetero=1:1:1:3]" in result.output


def test_plot_draws_its_bars_at_the_target_given(two_runs, tmp_path, monkeypatch):
    from edgeml.analysis import figures

    drawn = {}

    def keep(pending, processes=1):  # the captions say the target; drawing them is another test's business
        drawn.update({f.file.png.name: f.file.caption for f in pending})

    monkeypatch.setattr(figures, "draw", keep)
    result = runner.invoke(app, ["plot", str(two_runs), "--target-accuracy", "0.5", "--out", str(tmp_path / "f")])
    assert result.exit_code == 0, result.output
    assert re.search(r"until accuracy stays >= 0\.5\b", drawn["bars.png"])

    bad = runner.invoke(app, ["plot", str(two_runs), "--target-accuracy", "1.5", "--out", str(tmp_path / "g")])
    assert bad.exit_code == 2 and "--target-accuracy 1.5" in bad.output and not (tmp_path / "g").exists()
