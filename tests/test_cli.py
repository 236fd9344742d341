"""The command line: bad input gives one line, exit code 2, no traceback, no run directory, and no torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeml.cli import app
from conftest import pythonpath

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def cli(*args, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "edgeml", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": pythonpath(ROOT), **(env or {})})


def hermetic_env(home: Path) -> dict:
    """No user data: an empty HOME (the data cache lives under it) and no $EDGEML_DATA."""
    env = {k: v for k, v in os.environ.items() if k != "EDGEML_DATA"}
    return {**env, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "PYTHONPATH": pythonpath(ROOT)}


# Each case: arguments after `edgeml` ({out} is a fresh path under the case's folder; {file}, {dir}, {binary} are
# a text file, an empty directory and a binary file there) and a text the one-line message must contain.
# Every case but the LATE ones is refused before torch is imported.
BAD = [
    (["run", "nosuch"], "unknown algorithm 'nosuch'"),
    (["run", "bsp", "--workers", "0"], "cluster.workers = 0"),
    (["run", "bsp", "--workers", "-3"], "cluster.workers = -3"),
    (["run", "ssp", "--set", "ssp.staleness=-1"], "ssp.staleness = -1"),
    (["run", "bsp", "--set", "bsp.lr=-0.1"], "bsp.lr = -0.1"),
    (["run", "bsp", "--set", "bsp.lr=nan"], "bsp.lr = nan is not a finite number"),
    (["run", "asp", "--set", "asp.global_lr=inf"], "asp.global_lr = inf"),
    (["run", "adsp", "--set", "adsp.check_period_s=nan"], "adsp.check_period_s = nan"),
    (["run", "adacomm", "--set", "adacomm.tau_candidates=[1, nan]"], "adacomm.tau_candidates[1] = nan"),
    (["run", "bsp", "--set", "stop.nosuch=1"], "unknown config entry 'stop.nosuch'"),
    (["run", "bsp", "--set", "nosection.x=1"], "unknown config entry section [nosection]"),
    (["run", "bsp", "--set", "novalue"], "is malformed"),
    (["run", "bsp", "--dataset", "nosuch"], "unknown dataset"),
    (["run", "bsp", "--dataset", "mnist"], "--download"),
    (["run", "bsp", "--hetero", "1:2"], "one ratio per worker"),
    (["run", "bsp", "--hetero", "weird"], "unknown heterogeneity profile"),
    (["run", "bsp", "--hetero", "1:inf:1", "--workers", "3"], "step-time ratio inf"),
    (["run", "bsp", "--hetero", "1:nan:1", "--workers", "3"], "step-time ratio nan"),
    (["run", "bsp", "--hetero", "1:0:1", "--workers", "3"], "step-time ratio 0"),
    (["run", "bsp", "--hetero", "H=inf"], "H must be a finite number >= 1"),
    (["run", "bsp", "--hetero", "H=1.2.3"], "H must be a finite number >= 1"),
    (["run", "bsp", "--network", "moon"], "unknown network profile"),
    (["run", "bsp", "--backend", "gpu"], "run.backend = 'gpu'"),
    (["run", "bsp", "--max-time", "-1"], "stop.max_time = -1"),
    (["run", "bsp", "--max-time", "nan"], "stop.max_time = nan"),
    (["run", "bsp", "--max-time", "inf", "--backend", "sim"], "stop.max_time = inf"),
    (["run", "bsp", "--max-time", "0"], "no stopping rule"),
    (["run", "bsp", "--max-steps", "-1"], "stop.max_steps = -1"),
    (["run", "bsp", "--seed", "-1"], "run.seed = -1"),
    (["run", "bsp", "--seed", str(2**32)], "run.seed = 4294967296"),
    (["run", "bsp", "--target-accuracy", "nan"], "stop.target_accuracy = nan"),
    (["run", "bsp", "--target-accuracy", "1.5"], "stop.target_accuracy = 1.5"),
    (["run", "bsp", "--target-loss", "-inf"], "stop.target_loss = -inf"),
    (["run", "bsp", "--batch-size", "0"], "data.batch_size = 0"),
    (["run", "bsp", "--set", "data.alpha=0"], "data.alpha = 0"),
    (["run", "bsp", "--set", "network.latency_s=nan"], "network.latency_s = nan"),
    (["run", "bsp", "--set", "network.up_mbps=-1"], "network.up_mbps = -1"),
    (["run", "bsp", "--set", "eval.interval=0"], "eval.interval = 0"),
    (["run", "bsp", "--set", "eval.test_samples=-1"], "eval.test_samples = -1"),
    (["run", "bsp", "--set", "run.threads=0"], "run.threads = 0"),
    (["run", "bsp", "--set", "stop.window=1"], "stop.window = 1"),
    (["run", "bsp", "--set", "cluster.crash_prob=2"], "cluster.crash_prob = 2"),
    (["run", "bsp", "--set", "cluster.base_step_s=inf"], "cluster.base_step_s = inf"),
    (["run", "bsp", "--set", "cluster.crashes=[{worker=9, time=1.0}]"], "worker must be an index"),
    (["run", "bsp", "--set", "cluster.crashes=[{worker=1, time=-1.0}]"], "time = -1.0 must be"),
    (["run", "bsp", "--set", "cluster.crashes=[{worker=1, time=1}, {worker=1, time=2}]"], "worker 1 twice"),
    (["run", "bsp", "--set", "cluster.slowdowns=[{worker=0, start=2, end=1, factor=2}]"], "end > start"),
    (["run", "bsp", "--set", "cluster.slowdowns=[{worker=0, start=0, end=1, factor=nan}]"],
     "cluster.slowdowns[0].factor = nan"),
    (["run", "bsp", "--set", "network.links=[{worker=0, up_mbps=-5}]"], "up_mbps = -5 must be"),
    (["run", "bsp", "--set", "network.links=[{worker=0, speed=5}]"], "use the keys"),
    (["run", "bsp", "--data-root", "/nonexistent"], "data.root = '/nonexistent' does not exist"),
    (["run", "bsp", "--data-root", "{file}"], "is not a directory"),
    (["run", "bsp", "--dataset", "mnist", "--data-root", "{dir}"], "does not hold mnist: expected train-images"),
    (["run", "bsp", "--config", "/nonexistent.toml"], "does not exist"),
    (["run", "bsp", "--config", "{dir}"], "is a directory"),
    (["run", "bsp", "--config", "{binary}"], "not UTF-8"),
    (["run", "bsp", "--out", "{file}"], "run.out"),
    (["run", "bsp", "--out", "{file}/runs"], "lies under the file"),
    (["run", "bsp", "--out", "/proc/edgeml-runs"], "not writable"),
    (["run", "bsp", "--name", "../x"], "run.name = '../x'"),
    (["run", "bsp", "--workers", "many"], "'--workers'"),
    (["run", "bsp", "--nosuch"], "No such option: --nosuch"),
    (["list", "nosuch"], "cannot list 'nosuch'"),
    (["run", "bsp", "--workers", "1000000000"], "cluster.workers = 1000000000 needs at least"),
    (["run", "bsp", "--set", "run.threads=100000"], "run.threads = 100000 is more than this machine's"),
    (["run", "bsp", "--set", "eval.interval=1e-9"], "eval.interval = 1e-09 is out of range"),
    (["run", "bsp", "--name", "x" * 300], "is 300 bytes long"),
]
# Refused where the data is loaded, after torch, still before anything is written.
LATE = [
    (["run", "bsp", "--workers", "5000", "--backend", "sim"], "5000 workers but only"),
    (["run", "bsp", "--model", "nosuch"], "unknown model"),
    (["run", "bsp", "--workers", "60", "--backend", "sim"], "data.batch_size = 32 is larger than worker"),
    (["run", "bsp", "--batch-size", "400"], "use --batch-size 359 or less"),
]

# Calls the real entry point once per case in one process, so that torch's absence can be checked after each.
DRIVER = r"""
import contextlib, io, json, sys, traceback
from edgeml.cli import main

results = []
for args in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = ["edgeml", *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code
        except Exception:
            code = "raised"
            traceback.print_exc(file=err)
    results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                    "torch": "torch._C" in sys.modules})
print(json.dumps(results))
"""


def _tree(root: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def refusals(tmp_path_factory):
    """Run every bad-input case through ``edgeml.cli.main``; per case its result and whether files changed."""
    base = tmp_path_factory.mktemp("bad")
    home = tmp_path_factory.mktemp("home")
    cases = []
    for i, (args, _) in enumerate(BAD + LATE):
        folder = base / f"case{i}"
        (folder / "dir").mkdir(parents=True)
        (folder / "file").write_text("not a directory\n")
        (folder / "binary").write_bytes(b"\xff\xfe\x00binary")
        for key in ("out", "file", "dir", "binary"):
            args = [a.replace("{%s}" % key, str(folder / key)) for a in args]
        if args[0] == "run" and "--out" not in args:
            args += ["--out", str(folder / "out")]
        cases.append((args, folder, _tree(folder)))
    p = subprocess.run([sys.executable, "-c", DRIVER, json.dumps([a for a, _, _ in cases])], capture_output=True,
                       text=True, timeout=600, env=hermetic_env(home))
    assert p.returncode == 0, p.stderr
    results = json.loads(p.stdout)
    return [{**r, "unchanged": _tree(folder) == before} for r, (_, folder, before) in zip(results, cases)]


@pytest.mark.parametrize("i", range(len(BAD) + len(LATE)), ids=[" ".join(a) for a, _ in BAD + LATE])
def test_bad_input_is_one_line_exit_2_writes_nothing(refusals, i):
    needle = (BAD + LATE)[i][1]
    r = refusals[i]
    lines = r["stderr"].strip().splitlines()
    assert r["code"] == 2, r
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], r["stderr"]
    assert "Traceback" not in r["stderr"] and r["stdout"] == ""
    assert r["unchanged"], "the case wrote files"
    if i < len(BAD):
        assert not r["torch"], "torch was imported before the input was refused"


def test_refusal_without_torch_is_the_entry_point_behaviour():
    """The console script and ``python -m edgeml`` go through ``main``: validating a config never imports torch,
    so a refusal comes at once."""
    code = ("import sys; from edgeml.cli import main; sys.argv = ['edgeml', 'run', 'bsp', '--max-time', 'nan']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    print(e.code, 'torch' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": pythonpath(ROOT)})
    assert p.stdout.split() == ["2", "False"], p.stdout + p.stderr


def test_a_bug_keeps_its_traceback_and_a_failed_run_is_one_line(tmp_path, monkeypatch):
    """Only ``RunFailed`` (a run that failed, its traceback in error.txt) and ``UserError`` become one line; any
    other exception is a bug and reaches the developer with its traceback."""
    import edgeml.runner

    def broken(cfg, quiet=True):
        raise RuntimeError("an internal bug")

    monkeypatch.setattr(edgeml.runner, "run", broken)
    result = runner.invoke(app, ["run", "bsp", "--backend", "sim", "--out", str(tmp_path), "-q"])
    assert isinstance(result.exception, RuntimeError) and str(result.exception) == "an internal bug"

    def failed(cfg, quiet=True):
        from edgeml.errors import RunFailed

        raise RunFailed("run failed: worker 0 raised (traceback in x/error.txt; partial results in x)")

    monkeypatch.setattr(edgeml.runner, "run", failed)
    result = runner.invoke(app, ["run", "bsp", "--backend", "sim", "--out", str(tmp_path), "-q"])
    assert result.exit_code == 1 and "traceback in x/error.txt" in result.stderr


def test_cli_runner_refusal_names_the_key(tmp_path, monkeypatch):
    """Through the Typer app directly (no deferred torch), with HOME pointing at an empty folder (and the
    cache at its default there)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("EDGEML_DATA", raising=False)
    monkeypatch.delenv("EDGEML_CACHE", raising=False)
    result = runner.invoke(app, ["run", "bsp", "--dataset", "mnist", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--download" in result.stderr and str(tmp_path / "home") in result.stderr
    assert not (tmp_path / "o").exists()


def test_malformed_toml(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[stop\nmax_time = ")
    result = runner.invoke(app, ["run", "bsp", "--config", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "not valid TOML" in result.output
    assert not (tmp_path / "o").exists()


def test_config_file_and_overrides_compose(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text('[run]\nbackend = "sim"\n[cluster]\nworkers = 3\nhetero = "1:1:2"\n'
                    '[stop]\nmax_time = 2.0\n[ssp]\nstaleness = 1\n')
    result = runner.invoke(app, ["run", "ssp", "-c", str(conf), "--set", "ssp.staleness=2", "--out", str(tmp_path),
                                 "--name", "x", "-q"])
    assert result.exit_code == 0, result.output
    text = (tmp_path / "x" / "config.toml").read_text()
    assert "staleness = 2" in text and 'hetero = "1:1:2"' in text
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert summary["workers"] == 3 and summary["backend"] == "sim"


def test_list_shows_everything():
    out = cli("list").stdout
    for name in ("bsp", "ssp", "asp", "digits", "fashion-mnist", "adacomp-cnn", "ec2", "H=x", "A:B:C", "edge",
                 "edgeml list settings"):
        assert name in out


def _settings_docs():
    """Every setting the CLI lists: the common sections and the shipped algorithms (test plugins registered in
    this process are unknown to the CLI's own process)."""
    from edgeml.algorithms import BUILTIN, REGISTRY
    from edgeml.schema import COMMON_SECTIONS, describe_fields

    for section, cls in [*COMMON_SECTIONS.items(), *((n, REGISTRY[n].config) for n in BUILTIN)]:
        for name, _, _, doc in describe_fields(cls):
            yield section, name, doc.replace("``", "")


@pytest.mark.parametrize("columns", [80, 120])
def test_list_settings_fit_the_terminal(columns):
    env = {"COLUMNS": str(columns)}
    out = cli("list", "settings", env=env).stdout + cli("list", "algorithms", env=env).stdout
    assert max(len(line) for line in out.splitlines()) <= columns
    lines = out.splitlines()
    for section, name, doc in _settings_docs():
        assert any(f"│ {name} " in line and doc.split()[0] in line for line in lines), f"{section}.{name}"


def test_list_settings_document_every_field():
    """On a wide terminal each setting is one row holding its whole docstring, printed as written (no markup,
    no emoji codes), with inherited fields documented too."""
    env = {"COLUMNS": "400"}
    out = cli("list", "settings", env=env).stdout + cli("list", "algorithms", env=env).stdout
    for section, name, doc in _settings_docs():
        assert doc, f"{section}.{name} has no docstring"
        assert f"--set {section}.NAME=VALUE" in out
        assert any(f"│ {name} " in line and doc in line for line in out.splitlines()), f"{section}.{name}"
    assert "[{worker = 0, start = 10.0, end = 20.0, factor = 3.0}]" in out and "1:1:3" in out
    ssp = cli("list", "ssp", env=env).stdout
    assert "staleness" in ssp and "Local learning rate eta'" in ssp and "cluster" not in ssp


def test_help_documents_what_zero_means():
    out = " ".join(cli("run", "--help", env={"COLUMNS": "200"}).stdout.split())
    for text in ("0: no step limit", "0: no time limit", "0: no target"):
        assert text in out


def test_preparing_line_on_a_terminal_only(monkeypatch):
    """Before torch, the data and calibration (seconds) a terminal user sees what is happening; logs stay clean."""
    import io

    from rich.console import Console

    import edgeml.cli as cli_module
    from edgeml.config import load_config

    cfg = load_config(overrides=["cluster.workers=3"])
    for terminal in (True, False):
        buf = io.StringIO()
        monkeypatch.setattr(cli_module, "err", Console(file=buf, force_terminal=terminal, width=200))
        cli_module._preparing(cfg)
        text = buf.getvalue()
        if terminal:
            assert "preparing bsp (procs, 3 workers)" in text and "calibrating the host" in text
        else:
            assert text == ""


def test_sim_run_end_to_end_prints_the_run_directory(tmp_path):
    p = cli("run", "ssp", "--backend", "sim", "--hetero", "1:1:3", "--workers", "3", "--max-time", "5",
            "--out", str(tmp_path), "-q")
    assert p.returncode == 0, p.stderr
    path = Path(p.stdout.strip().splitlines()[-1])
    for f in ("config.toml", "meta.json", "evals.csv", "nodes.csv", "summary.json", "series/staleness.csv"):
        assert (path / f).exists(), f
    meta = json.loads((path / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["seed"] == 0 and meta["edgeml_version"]
