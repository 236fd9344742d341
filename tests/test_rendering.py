"""Every committed report (``results/<paper>/REPORT.md`` and ``results/<paper>/quick/REPORT.md``) and its
``verdicts.csv`` render byte for byte from its committed runs alone, in another folder than the one it was
made in, without running anything.

The report is rendered as ``edgeml reproduce --resume`` renders it when every run is finished: from a copy of
the committed ``runs/`` and ``experiment.toml`` (a copy, so that nothing can touch the committed runs). Two
inputs of the report are not in the runs: the command line and the day it was rendered; both are read back
from the committed report's "How this was produced".
"""

from __future__ import annotations

import datetime as dt
import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

import edgeml.runner
from edgeml.reproduce import render, reproduce

RESULTS = Path(__file__).resolve().parents[1] / "results"
REPORTS = sorted(p.parent for p in [*RESULTS.glob("*/REPORT.md"), *RESULTS.glob("*/quick/REPORT.md")])
FAST = {"baselines"}  # rendered in under ~10 s (on 2 busy cores); the others draw many figures
PRODUCED = re.compile(r"^`(edgeml reproduce [^`]*)` with edgeml \S+ \(git \S+\) on (\d{4})-(\d\d)-(\d\d):", re.M)
IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")


def _name(folder: Path) -> str:
    return folder.relative_to(RESULTS).as_posix()


def _case(folder: Path):
    return pytest.param(folder, id=_name(folder), marks=() if _name(folder) in FAST else pytest.mark.slow)


def _no_run(*args, **kwargs):
    pytest.fail("rendering a committed report ran a run: its runs must all be kept as finished")


@pytest.fixture
def placeholder_data(tmp_path, monkeypatch):
    """Empty files where edgeml looks for the image data sets: planning checks that a run's data set is
    there (it never reads it), and rendering must not depend on the data sets being installed."""
    root = tmp_path / "data"
    for name in ("mnist", "fashion-mnist"):
        for f in IDX_FILES:
            (root / name).mkdir(parents=True, exist_ok=True)
            (root / name / f).touch()
    monkeypatch.setenv("EDGEML_DATA", str(root))


def test_every_committed_report_is_covered():
    assert len(REPORTS) >= 2 and all((p / "runs").is_dir() and (p / "experiment.toml").is_file() for p in REPORTS)


@pytest.mark.parametrize("folder", [_case(p) for p in REPORTS])
def test_a_committed_report_renders_byte_identical_from_its_runs(folder, tmp_path, monkeypatch, placeholder_data,
                                                                 no_drawing):
    committed = (folder / "REPORT.md").read_bytes()
    produced = PRODUCED.search(committed.decode())
    assert produced, f"{_name(folder)}/REPORT.md has no 'How this was produced' line"
    command, day = produced.group(1), dt.date(*map(int, produced.group(2, 3, 4)))
    monkeypatch.setattr(edgeml.runner, "run", _no_run)
    monkeypatch.setattr(render, "today", lambda: day)
    out = tmp_path / "elsewhere" / _name(folder)
    shutil.copytree(folder / "runs", out / "runs")
    shutil.copyfile(folder / "experiment.toml", out / "experiment.toml")
    reproduce(str(folder / "experiment.toml"), quick=folder.name == "quick", out=out, command_line=command,
              resume=True, console=Console(file=io.StringIO()))
    assert (out / "REPORT.md").read_bytes() == committed
    assert (out / "verdicts.csv").read_bytes() == (folder / "verdicts.csv").read_bytes()


def test_the_committed_scoreboard_is_rendered_from_the_committed_reports():
    """``results/README.md`` is what ``edgeml reproduce --summary`` renders from the committed verdicts: a
    re-rendered report without a re-rendered scoreboard fails here."""
    from edgeml.reproduce.summary import SCOREBOARD, render_summary

    assert (RESULTS / SCOREBOARD).read_text() == render_summary(RESULTS), \
        "results/README.md is stale: run `edgeml reproduce --summary` (from the repository's root)"


@pytest.mark.parametrize("folder", REPORTS, ids=_name)
def test_a_committed_report_names_a_missing_diagnosis_only_where_one_is_missing(folder):
    """"not yet diagnosed" appears in a report once per claim whose results in verdicts.csv await a diagnosis,
    plus the count of those results at the top; a report that owes none does not say those words anywhere."""
    import csv

    rows = list(csv.DictReader((folder / "verdicts.csv").open()))
    waiting = sum(r["cause"] == "not yet diagnosed" for r in rows)
    claims = {r["claim"] for r in rows if r["cause"] == "not yet diagnosed"}
    report = (folder / "REPORT.md").read_text()
    assert len(re.findall(r"^- \*.*\*: \*\*not yet diagnosed\*\*\.$", report, re.M)) == len(claims)
    assert report.count("not yet diagnosed") == (len(claims) + 1 if waiting else 0)
    assert (f"**{waiting} not yet diagnosed**" if waiting else "**every diagnosis owed is given**") in report
