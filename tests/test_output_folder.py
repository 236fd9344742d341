"""One writer per output folder, and nothing written outside it: a reproduction holds a lock on ``--out`` (a
second one is refused naming the holder's PID; the lock goes with the holder however it ends), and every path
it writes or deletes, and the committed results ``--check`` reads, resolve inside their folders."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeml import cli
from edgeml.errors import UserError
from edgeml.reproduce import execute, load, output_lock, plan, reproduce

try:
    from tests.conftest import pythonpath
except ImportError:  # run from inside tests/
    from conftest import pythonpath

ROOT = Path(__file__).resolve().parents[1]
TOY = """
[experiment]
paper = "toy"
seeds = [0]
baseline = "bsp"

[settings]
run = { backend = "sim" }
stop = { max_time = 2 }
cluster = { workers = 2 }

[[runs]]
algorithm = "bsp"

[[figures]]
id = "fig1"
title = "Fig. 1"

[[runs]]
algorithm = "ssp"
figure = "fig1"
"""

# A reproduction whose runs wait until the file argv[1] exists (each first writes argv[1] + ".waiting"): it holds
# its output folder meanwhile.
HELD = """
import sys, time, pathlib
import edgeml.runner
release, real = pathlib.Path(sys.argv[1]), edgeml.runner.run
def held(cfg, **kw):
    release.with_suffix(".waiting").touch()
    deadline = time.monotonic() + 300
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return real(cfg, **kw)
edgeml.runner.run = held
sys.argv = ["edgeml", *sys.argv[2:]]
from edgeml.cli import main
main()
"""


@pytest.fixture
def toy(tmp_path):
    path = tmp_path / "toy.toml"
    path.write_text(TOY)
    return str(path)


def edgeml(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": pythonpath(ROOT)}, **kw)


def wait_for(predicate, what: str, deadline_s: float = 240.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {deadline_s:g} s for {what}")
        time.sleep(0.05)


def snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.mark.slow
def test_a_second_reproduction_on_a_held_folder_is_refused_naming_the_holder(tmp_path, toy):
    out, release = tmp_path / "out", tmp_path / "release"
    holder = edgeml("-c", HELD, str(release), "reproduce", toy, "--out", str(out), "--jobs", "1", cwd=tmp_path)
    try:
        lock, waiting = out / execute.LOCK, release.with_suffix(".waiting")
        wait_for(lambda: waiting.exists() or holder.poll() is not None, "the first reproduction to start a run")
        assert holder.poll() is None, holder.communicate()
        assert lock.read_text().strip() == str(holder.pid)
        before = snapshot(out)
        second = edgeml("-m", "edgeml", "reproduce", toy, "--out", str(out), "--jobs", "1", "--resume", cwd=tmp_path)
        stdout, stderr = second.communicate(timeout=240)
        assert second.returncode == 2, stderr
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and f"is being written by another edgeml reproduce (PID {holder.pid})" in lines[0]
        assert stdout == "" and snapshot(out) == before  # the second wrote nothing
        release.touch()  # the first goes on, undisturbed
        stdout, stderr = holder.communicate(timeout=300)
        assert holder.returncode == 0, stderr
        assert (out / "REPORT.md").is_file() and not lock.exists()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_the_lock_goes_with_its_holder_however_it_ends(tmp_path):
    out = tmp_path / "out"
    holder = edgeml("-c", "import sys; from pathlib import Path; from edgeml.reproduce import output_lock\n"
                    "with output_lock(Path(sys.argv[1])):\n    print('held', flush=True); sys.stdin.read()",
                    str(out), cwd=tmp_path, stdin=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UserError, match=rf"is being written by another edgeml reproduce \(PID {holder.pid}\)"):
            with output_lock(out):
                pass
        holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel releases the lock
        holder.wait(timeout=60)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert (out / execute.LOCK).read_text().strip() == str(holder.pid)  # the killed holder's file stays...
    with output_lock(out):  # ...and is no obstacle
        assert (out / execute.LOCK).read_text().strip() == str(os.getpid())
    assert not (out / execute.LOCK).exists()


def test_a_clean_release_leaves_no_lock_and_no_folder_it_made(tmp_path):
    out = tmp_path / "a" / "b"
    with output_lock(out):
        assert (out / execute.LOCK).is_file()
    assert not (tmp_path / "a").exists()
    out.mkdir(parents=True)
    (out / "kept").write_text("")
    with pytest.raises(RuntimeError):
        with output_lock(out):
            raise RuntimeError("any exit")
    assert sorted(p.name for p in out.iterdir()) == ["kept"]
    with output_lock(out):  # and it is free again
        pass


def test_a_refused_reproduction_leaves_a_new_folder_unmade(tmp_path, toy, monkeypatch):
    def refused(*args, **kw):
        raise UserError("refused while the folder is held")

    monkeypatch.setattr(execute, "plan_work", refused)
    with pytest.raises(UserError, match="refused while"):
        reproduce(toy, out=tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()
    monkeypatch.undo()
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--out", str(tmp_path / "user")])
    assert result.exit_code == 2 and "was not written by edgeml reproduce" in result.output
    assert sorted(p.name for p in (tmp_path / "user").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("link", ["runs", "figures", "REPORT.md"])
def test_a_link_in_the_output_folder_cannot_lead_the_writes_elsewhere(tmp_path, toy, link):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "experiment.toml").write_text(TOY)
    (out / link).symlink_to(elsewhere / link if link.endswith(".md") else elsewhere)
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"outside {str(out.resolve())!r}" in lines[0] and link in lines[0]
    assert list(elsewhere.iterdir()) == []
    assert sorted(p.name for p in out.iterdir()) == sorted(["experiment.toml", link])


def test_a_paper_name_cannot_lead_the_output_or_check_out_of_their_folders(tmp_path, toy, monkeypatch):
    real = load.load_experiment
    monkeypatch.setattr(load, "load_experiment", lambda p: dataclasses.replace(real(p), paper="../../../escaped"))
    monkeypatch.chdir(tmp_path / "")
    with pytest.raises(UserError, match=r"paper '../../../escaped': its output folder .* outside"):
        reproduce(toy, quick=True)
    with pytest.raises(UserError, match=r"paper '../../../escaped': its committed results .* outside"):
        reproduce(toy, quick=True, out=tmp_path / "out", check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["toy.toml"]


def test_a_run_directory_outside_its_folder_is_never_deleted(tmp_path, toy):
    work = execute.plan_work(plan.plan(load.load_experiment(toy), True), set(), tmp_path / "out", True, False)[0]
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious").write_text("")
    with pytest.raises(UserError, match="outside"):
        execute.run_one("toy", work, victim, True)
    assert (victim / "precious").is_file()


def test_a_run_may_be_made_in_the_folder_its_caller_names_and_only_there(tmp_path, toy):
    """On a cluster a run is made in its node's temporary folder (``root``), outside the output's runs/: it runs
    there, and a path outside that folder is still refused."""
    work = execute.plan_work(plan.plan(load.load_experiment(toy), True), set(), tmp_path / "out", True, False)[0]
    node = tmp_path / "node-tmp"
    node.mkdir()
    assert execute.run_one("toy", work, node / work.run.dirname, True, root=node) is None
    assert (node / work.run.dirname / "summary.json").is_file()
    victim = tmp_path / "victim"
    victim.mkdir()
    with pytest.raises(UserError, match="outside"):
        execute.run_one("toy", work, victim, True, root=node)
    assert victim.is_dir()


def test_a_run_name_cannot_leave_run_out(tmp_path):
    from edgeml.config import build_config
    from edgeml.runner import run_dir_for

    cfg = build_config({"run": {"algorithm": "bsp", "out": str(tmp_path / "runs")}}, paths=False)
    cfg.run.name = "../escaped"  # past any check of the name itself: the path is checked where it is made
    with pytest.raises(UserError, match=r"run.name = '../escaped' would put the run directory .* not directly"):
        run_dir_for(cfg)
    assert not (tmp_path / "escaped").exists()
