"""The suite's own scheduling under pytest-xdist (the README's test command runs on every core): a test marked
``alone`` runs with nothing beside it; tests that start processes share one worker."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, group_of, pythonpath

pytest.importorskip("xdist")

SUITE = {
    "conftest.py": "from tests.conftest import _alone_when_marked, pytest_xdist_make_scheduler  # noqa: F401\n",
    "pytest.ini": "[pytest]\nmarkers =\n    alone: runs with nothing beside it\n",
    "record.py": textwrap.dedent("""
        import json, os, time
        from pathlib import Path

        def span(name, alone):
            # The alone test (collected first) holds the host for a second; every other test waits for it to have
            # run (or 10 s), so that without exclusion one is under way while it runs, whichever starts first.
            done = Path(os.environ["SPANS"]).with_suffix(".done")
            t0 = time.monotonic()
            if alone:
                time.sleep(1.0)
                done.touch()
            else:
                while not done.exists() and time.monotonic() < t0 + 10:
                    time.sleep(0.02)
            with open(os.environ["SPANS"], "a") as f:
                f.write(json.dumps([name, t0, time.monotonic()]) + "\\n")
    """),
    "test_many.py": "import pytest, record\n\n@pytest.mark.parametrize('i', range(4))\n"
                    "def test_beside(i):\n    record.span(f'beside{i}', False)\n",
    "test_a_alone.py": "import pytest, record\n\n@pytest.mark.alone\n"
                       "def test_alone():\n    record.span('alone', True)\n",
}


def test_a_test_marked_alone_overlaps_no_other(tmp_path):
    for name, text in SUITE.items():
        (tmp_path / name).write_text(text)
    spans = tmp_path / "spans.jsonl"
    env = {"PYTHONPATH": pythonpath(ROOT), "SPANS": str(spans)}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", str(tmp_path)],
                       cwd=tmp_path, env={**__import__("os").environ, **env}, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [json.loads(line) for line in spans.read_text().splitlines()]
    assert len(rows) == 5
    alone = next(r for r in rows if r[0] == "alone")
    others = [r for r in rows if r[0] != "alone"]
    # the four others, on the other worker too: none ran while it did
    assert all(end <= alone[1] or start >= alone[2] for _, start, end in others), rows


def test_tests_that_start_processes_share_one_group_and_the_readme_keeps_its_order():
    assert group_of("tests/test_procs.py::test_x[a]") == group_of("tests/test_faults.py::test_y") == "host_bound"
    assert group_of("tests/test_readme.py::test_a[1]") == group_of("tests/test_readme.py::test_b") == "test_readme"
    assert group_of("tests/test_claims.py::test_z") == "tests/test_claims.py::test_z"
