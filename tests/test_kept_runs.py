"""Kept runs are verified before they count: ``--resume`` runs again (and says so) a finished run whose archive
does not read back, whose tables are cut, or whose last evaluation is not the one its summary reports; and
``compare``/``plot`` name such a run in one line (exit 2) rather than read it wrong or raise."""

from __future__ import annotations

import io
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgeml import cli, rundir
from edgeml.reproduce import execute, load, plan, reproduce

TOY = """
[experiment]
paper = "toy"
seeds = [0]
baseline = "bsp"

[settings]
run = { backend = "sim" }
stop = { max_time = 3 }
cluster = { workers = 2 }

[[runs]]
algorithm = "bsp"

[[runs]]
algorithm = "ssp"
"""
DAMAGED, KEPT = "bsp-s0", "ssp-s0"


@pytest.fixture(scope="module")
def reproduction(tmp_path_factory) -> tuple[str, Path]:
    """A finished two-run reproduction (its experiment file, its folder), copied by each test before it damages
    a run."""
    folder = tmp_path_factory.mktemp("kept")
    (folder / "toy.toml").write_text(TOY)
    reproduce(str(folder / "toy.toml"), out=folder / "out")
    return str(folder / "toy.toml"), folder / "out"


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """The two runs of the toy experiment, run and packed as a reproduction keeps them (no report drawn)."""
    folder = tmp_path_factory.mktemp("runs")
    (folder / "toy.toml").write_text(TOY)
    work = execute.plan_work(plan.plan(load.load_experiment(str(folder / "toy.toml")), False), set(),
                             folder / "out", False, False)
    for w in work:
        path = folder / "out" / "runs" / w.run.dirname
        assert execute.run_one("toy", w, path, False) is None
        rundir.compact(path, {})
    return folder / "out"


@pytest.fixture
def out(finished, tmp_path) -> Path:
    shutil.copytree(finished, tmp_path / "out")
    return tmp_path / "out"


@pytest.fixture
def reproduced(reproduction, tmp_path) -> Path:
    shutil.copytree(reproduction[1], tmp_path / "out")
    return tmp_path / "out"


def members(archive: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(archive) as z:
        return {n: z.read(n) for n in z.namelist()}


def rewrite(archive: Path, name: str, edit) -> None:
    """The archive again, with member ``name`` edited (a damaged table inside a whole archive)."""
    files = members(archive)
    files[name] = edit(files[name])
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for n, data in files.items():
            z.writestr(n, data)
    archive.write_bytes(buf.getvalue())


def damage_deflate(archive: Path, name: str) -> None:
    """Overwrite the start of member ``name``'s compressed data: its deflate stream no longer decodes."""
    data = bytearray(archive.read_bytes())
    with zipfile.ZipFile(archive) as z:
        info = z.getinfo(name)
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len
    data[start:start + 8] = b"\xff" * 8  # a final block of the reserved type 3
    archive.write_bytes(bytes(data))


def cut_mid_line(data: bytes) -> bytes:
    return data[:-7]


def cut_at_line_end(data: bytes) -> bytes:
    return data[:data.rstrip(b"\r\n").rfind(b"\n") + 1]


DAMAGE = {
    "a table cut in a line": (lambda a: rewrite(a, "evals.csv", cut_mid_line), "its last line is cut short"),
    "a table cut at a line's end": (lambda a: rewrite(a, "evals.csv", cut_at_line_end), "evals.csv ends at"),
    "a damaged member": (lambda a: damage_deflate(a, "evals.csv"), "evals.csv is damaged"),
    "a truncated archive": (lambda a: a.write_bytes(a.read_bytes()[: a.stat().st_size // 2]), "run.zip is damaged"),
    "a status meta.json does not share": (
        lambda a: rewrite(a, "meta.json", lambda d: d.replace(b'"status": "completed"', b'"status": "running"')),
        "meta.json says running where summary.json says completed"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_verify_names_what_is_damaged_and_passes_a_whole_run(out, damage):
    assert rundir.verify(out / "runs" / DAMAGED) is None
    make, reason = DAMAGE[damage]
    make(out / "runs" / DAMAGED / rundir.ARCHIVE)
    assert reason in rundir.verify(out / "runs" / DAMAGED)
    assert rundir.verify(out / "runs" / KEPT) is None


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_resume_runs_a_damaged_run_again_and_says_so(reproduction, reproduced, damage):
    toy, out = reproduction[0], reproduced
    archive = out / "runs" / DAMAGED / rundir.ARCHIVE
    whole, kept = members(archive), (out / "runs" / KEPT / rundir.ARCHIVE).stat().st_mtime_ns
    make, reason = DAMAGE[damage]
    make(archive)
    result = CliRunner().invoke(cli.app, ["reproduce", toy, "--out", str(out), "--jobs", "1", "--resume"])
    assert result.exit_code == 0, result.output
    said = [line for line in result.output.splitlines() if "does not read back" in line]
    assert len(said) == 1 and said[0].startswith(f"{DAMAGED}: ") and reason in said[0]
    assert said[0].endswith("running it again")
    assert f"{KEPT.removesuffix('-s0')} seed 0 (kept)" in result.output and result.output.count("(kept)") == 1
    assert (out / "runs" / KEPT / rundir.ARCHIVE).stat().st_mtime_ns == kept
    # run again, the run is whole: a sim run of the same seed gives back the same tables
    assert rundir.verify(out / "runs" / DAMAGED) is None
    assert members(archive)["evals.csv"] == whole["evals.csv"]


@pytest.mark.slow
def test_without_resume_a_damaged_run_is_neither_kept_nor_deleted(reproduction, reproduced):
    out = reproduced
    rewrite(out / "runs" / DAMAGED / rundir.ARCHIVE, "evals.csv", cut_mid_line)
    before = (out / "runs" / DAMAGED / rundir.ARCHIVE).read_bytes()
    result = CliRunner().invoke(cli.app, ["reproduce", reproduction[0], "--out", str(out), "--jobs", "1"])
    assert result.exit_code == 2 and "--resume" in result.output
    assert (out / "runs" / DAMAGED / rundir.ARCHIVE).read_bytes() == before


@pytest.mark.parametrize("damage", [d for d in DAMAGE if "meta.json" not in d] + ["a bad checksum"])
@pytest.mark.parametrize("command", ["compare", "plot"])
def test_compare_and_plot_name_an_unreadable_run_in_one_line(out, tmp_path, damage, command):
    archive = out / "runs" / DAMAGED / rundir.ARCHIVE
    if damage == "a bad checksum":  # the central directory's CRC-32 of evals.csv no longer matches its data
        data = bytearray(archive.read_bytes())
        record = data.find(b"PK\x01\x02")
        while data[record + 46:record + 46 + struct.unpack("<H", data[record + 28:record + 30])[0]] != b"evals.csv":
            name_len, extra_len, comment_len = struct.unpack("<HHH", data[record + 28:record + 34])
            record += 46 + name_len + extra_len + comment_len
        data[record + 16:record + 20] = bytes(b ^ 0xFF for b in data[record + 16:record + 20])
        archive.write_bytes(bytes(data))
    else:
        DAMAGE[damage][0](archive)
    args = [str(out / "runs")] + (["--out", str(tmp_path / "figures")] if command == "plot" else [])
    result = CliRunner().invoke(cli.app, [command, *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"run {out / 'runs' / DAMAGED}" in lines[0] and "Traceback" not in result.output
    assert lines[0].endswith("re-run it, or leave it out") or lines[0].endswith(": re-run it")
    if command == "compare":  # (plot reads runs as compare does; drawing a whole run's figures tells no more)
        whole = CliRunner().invoke(cli.app, [command, str(out / "runs" / KEPT)])
        assert whole.exit_code == 0, whole.output
