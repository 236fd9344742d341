"""The command line: bad input gives one line, exit code 2, no traceback and no run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeml.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "edgeml", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("args, needle", [
    (["run", "nosuch"], "unknown algorithm 'nosuch'"),
    (["run", "bsp", "--workers", "0"], "cluster.workers = 0"),
    (["run", "bsp", "--workers", "5000"], "5000 workers but only"),
    (["run", "ssp", "--set", "ssp.staleness=-1"], "ssp.staleness = -1"),
    (["run", "bsp", "--set", "bsp.lr=-0.1"], "bsp.lr = -0.1"),
    (["run", "bsp", "--set", "stop.nosuch=1"], "unknown config key 'stop.nosuch'"),
    (["run", "bsp", "--set", "nosection.x=1"], "unknown config section [nosection]"),
    (["run", "bsp", "--set", "novalue"], "is malformed"),
    (["run", "bsp", "--dataset", "mnist"], "--download"),
    (["run", "bsp", "--dataset", "nosuch"], "unknown dataset"),
    (["run", "bsp", "--model", "nosuch"], "unknown model"),
    (["run", "bsp", "--hetero", "1:2"], "one ratio per worker"),
    (["run", "bsp", "--hetero", "weird"], "unknown heterogeneity profile"),
    (["run", "bsp", "--network", "moon"], "unknown network profile"),
    (["run", "bsp", "--backend", "gpu"], "run.backend = 'gpu'"),
    (["run", "bsp", "--max-time", "-1"], "stop.max_time = -1"),
    (["run", "bsp", "--max-time", "0"], "no stopping rule"),
    (["run", "bsp", "--set", "cluster.crash_prob=2"], "cluster.crash_prob = 2"),
    (["run", "bsp", "--set", "cluster.crashes=[{worker=9, time=1.0}]"], "worker must be an index"),
    (["run", "bsp", "--config", "/nonexistent.toml"], "does not exist"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, args, needle):
    result = runner.invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.output
    assert not any(tmp_path.iterdir())


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
    for name in ("bsp", "ssp", "asp", "digits", "fashion-mnist", "adacomp-cnn", "ec2", "H=x", "edge"):
        assert name in out


def test_sim_run_end_to_end_prints_the_run_directory(tmp_path):
    p = cli("run", "ssp", "--backend", "sim", "--hetero", "1:1:3", "--workers", "3", "--max-time", "5",
            "--out", str(tmp_path), "-q")
    assert p.returncode == 0, p.stderr
    path = Path(p.stdout.strip().splitlines()[-1])
    for f in ("config.toml", "meta.json", "evals.csv", "nodes.csv", "summary.json", "series/staleness.csv"):
        assert (path / f).exists(), f
    meta = json.loads((path / "meta.json").read_text())
    assert meta["status"] == "completed" and meta["seed"] == 0 and meta["edgeml_version"]
