"""A full disk ends a run as failed: one line, exit 1, ``meta.json`` and ``summary.json`` say ``failed`` where the
disk still takes them (where it does not, the run has no finished summary and ``--resume`` runs it again), and
no temporary file is left. Simulated with a disk of a few kilobytes under the run directory's writer; on a real
small tmpfs where the test may mount one (root)."""

from __future__ import annotations

import builtins
import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeml import cli, rundir
from edgeml.reproduce import reproduce

try:
    from tests.conftest import pythonpath
except ImportError:  # run from inside tests/
    from conftest import pythonpath

ROOT = Path(__file__).resolve().parents[1]
RUN = ["run", "bsp", "--backend", "sim", "--workers", "2", "--max-time", "10", "--set", "eval.interval=0.05",
       "--name", "r", "--quiet"]
TOY = """
[experiment]
paper = "toy"
seeds = [0]
baseline = "bsp"

[settings]
run = { backend = "sim" }
stop = { max_time = 10 }
eval = { interval = 0.05 }
cluster = { workers = 2 }

[[runs]]
algorithm = "bsp"

[[runs]]
algorithm = "ssp"
"""


class Disk:
    """A disk of ``capacity`` bytes under the run directory's writer (``rundir``'s ``open``): a write past it
    writes what fits and raises ENOSPC, as a full disk does; ``refill``: the space comes back after the first
    failure (another process freed some)."""

    def __init__(self, capacity: int, refill: bool = False):
        self.left, self.refill, self.failures = capacity, refill, 0

    def open(self, file, mode="r", *args, **kw):
        f = builtins.open(file, mode, *args, **kw)
        return f if not set(mode) & set("wax+") else _Limited(f, self)

    def take(self, n: int) -> int:
        """How much of ``n`` bytes fits; raises when not all of it does (after the caller wrote that much)."""
        if n <= self.left:
            self.left -= n
            return n
        return self.left


class _Limited:
    def __init__(self, f, disk: Disk):
        self._f, self._disk = f, disk

    def write(self, data):
        fits = self._disk.take(len(data))
        if fits < len(data):
            self._f.write(data[:fits])
            self._disk.left, self._disk.failures = 0, self._disk.failures + 1
            if self._disk.refill:
                self._disk.left = 10 ** 9
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()


def temporary_files(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".tmp")]


def one_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in output and "During handling" not in output, output
    return lines[0]


@pytest.mark.parametrize("refill", [True, False], ids=["space comes back", "stays full"])
def test_a_full_disk_ends_a_run_as_failed_in_one_line(tmp_path, monkeypatch, refill):
    disk = Disk(6000, refill)  # the config, meta.json and a few evaluations
    monkeypatch.setattr(rundir, "open", disk.open, raising=False)
    result = CliRunner().invoke(cli.app, [*RUN, "--out", str(tmp_path / "runs")])
    assert result.exit_code == 1 and disk.failures >= 1
    line = one_line(result.output)
    assert "run failed: cannot write the run directory: No space left on device" in line
    run = tmp_path / "runs" / "r"
    assert temporary_files(tmp_path) == []
    meta = json.loads((run / "meta.json").read_text())
    if refill:  # the run directory says how it ended
        assert meta["status"] == "failed" and "No space left on device" in meta["stop_reason"]
        assert json.loads((run / "summary.json").read_text())["status"] == "failed"
    else:  # nothing more could be written: no finished summary, so --resume runs it again
        assert meta["status"] == "running" and rundir.finished_status(run) is None
        assert "--resume runs it again" in line


@pytest.mark.slow
def test_a_reproduction_on_a_full_disk_runs_its_failed_runs_again_on_resume(tmp_path, monkeypatch):
    (tmp_path / "toy.toml").write_text(TOY)
    out = tmp_path / "out"
    monkeypatch.setattr(rundir, "open", Disk(6000).open, raising=False)
    with pytest.raises(RuntimeError, match="2 of 2 runs failed"):
        reproduce(str(tmp_path / "toy.toml"), out=out)
    assert temporary_files(out) == []
    assert [rundir.finished_status(p) for p in (out / "runs").iterdir()] == [None, None]
    monkeypatch.undo()  # space freed
    result = CliRunner().invoke(cli.app, ["reproduce", str(tmp_path / "toy.toml"), "--out", str(out), "--jobs", "1",
                                          "--resume"])
    assert result.exit_code == 0, result.output
    assert sorted(rundir.finished_status(p) for p in (out / "runs").iterdir()) == ["completed", "completed"]


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of 1 MB, mounted at ``tmp_path/disk``; skipped where the test may not mount one."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount: Path, leave: int) -> Path:
    """Fill the disk at ``mount`` up to ``leave`` bytes; returns the filler (delete it to free the space)."""
    st = os.statvfs(mount)
    filler = mount / "filler"
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - leave))
    return filler


def edgeml(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgeml", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": pythonpath(ROOT)})


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sim", "procs"])
def test_a_run_on_a_full_tmpfs_fails_in_one_line(small_disk, tmp_path, backend):
    fill(small_disk, 12 * 1024)  # the config, meta.json and the first page of evals.csv
    done = edgeml(*RUN, "--backend", backend, "--out", str(small_disk / "runs"), cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "run failed: cannot write the run directory: No space left on device" in one_line(done.stderr)
    assert temporary_files(small_disk) == [] and done.stdout == ""
    assert rundir.finished_status(small_disk / "runs" / "r") in (None, "failed")


@pytest.mark.slow
def test_a_reproduction_on_a_full_tmpfs_stops_in_one_line_and_resumes(small_disk, tmp_path):
    (tmp_path / "toy.toml").write_text(TOY)
    filler = fill(small_disk, 16 * 1024)
    args = ["reproduce", str(tmp_path / "toy.toml"), "--out", str(small_disk / "out"), "--jobs", "1"]
    done = edgeml(*args, cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")
    assert temporary_files(small_disk) == [] and not (small_disk / "out" / ".edgeml.lock").exists()
    filler.unlink()
    done = edgeml(*args, "--resume", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    runs = sorted((small_disk / "out" / "runs").iterdir())
    assert [rundir.finished_status(p) for p in runs] == ["completed", "completed"]
    assert all(rundir.verify(p) is None for p in runs)
