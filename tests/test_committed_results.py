"""The committed results (``results/``) stay small enough to clone: at most 60 MB in all (as git would commit
them), and every committed run holds only what ``edgeml reproduce`` keeps of a run (``edgeml.rundir.compact``:
one archive, without the tables and series that no figure or claim reads). That each committed report still renders
byte for byte from those runs is ``test_rendering.py``."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from edgeml import rundir
from edgeml.analysis.figures import kept_series

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
LIMIT = 60 * 1000 * 1000  # bytes: 60 MB


def _committed() -> list[Path]:
    """The files under ``results/`` as git would commit them (tracked, plus untracked files git does not ignore,
    less those deleted from the work tree); every file below ``results/`` outside a git checkout."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True)
        if top.returncode == 0 and Path(top.stdout.strip()).resolve() == ROOT:
            listed = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard", "--", "results"],
                                    cwd=ROOT, capture_output=True, check=True).stdout.decode()
            return [p for p in (ROOT / f for f in dict.fromkeys(listed.split("\0")) if f) if p.is_file()]
    except OSError:  # no git
        pass
    return [p for p in RESULTS.rglob("*") if p.is_file()]


def test_the_committed_results_stay_under_60_mb():
    files = _committed()
    assert files, "no committed results found"
    sizes = {p: p.stat().st_size for p in files}
    total = sum(sizes.values())
    if total > LIMIT:
        by_paper: dict[str, int] = {}
        for p, n in sizes.items():
            key = "/".join(p.relative_to(RESULTS).parts[:2 if "quick" in p.relative_to(RESULTS).parts[1:2] else 1])
            by_paper[key] = by_paper.get(key, 0) + n
        biggest = sorted(sizes, key=sizes.get, reverse=True)[:5]
        raise AssertionError(
            f"results/ holds {total / 1e6:.1f} MB, over the {LIMIT / 1e6:.0f} MB a clone should carry: "
            + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(by_paper.items(), key=lambda kv: -kv[1]))
            + "; biggest files: " + ", ".join(f"{p.relative_to(ROOT)} ({sizes[p] / 1e6:.1f} MB)" for p in biggest))


@pytest.mark.parametrize("paper", [p.name for p in sorted(RESULTS.iterdir()) if p.is_dir() and p.name != "benchmarks"])
def test_every_committed_run_is_compacted(paper):
    """What ``edgeml reproduce`` (``edgeml.analysis.figures.compact_run``) keeps of a finished run, and nothing
    else: one archive, ``run.zip``, without the tables and series no figure or claim reads. Loose files, or a
    table nobody reads, are bulk a clone need not carry (on disk, each file takes at least a block)."""
    kept = kept_series()
    runs = sorted({p.parent for name in (rundir.SUMMARY, rundir.ARCHIVE) for p in (RESULTS / paper).rglob(name)})
    assert runs
    bulky = []
    for run in runs:
        loose = [p for p in run.rglob("*") if p.relative_to(run).as_posix() != rundir.ARCHIVE]
        unread = [name for name in rundir.files(run) if name in rundir.DROPPED or (
            name.startswith(f"{rundir.SERIES}/") and name.split("/", 1)[1].removesuffix(".csv") not in kept)]
        bulky += [p.relative_to(ROOT).as_posix() for p in loose] + [f"{run.relative_to(ROOT)}: {n}" for n in unread]
    assert not bulky, (f"{len(bulky)} committed run files are not compacted (e.g. {', '.join(bulky[:3])}): rerun "
                       "`edgeml reproduce PAPER --resume --out results/PAPER`, which compacts its finished runs, "
                       "or edgeml.analysis.figures.compact_run on each run directory")


REPORTS = sorted(p.parent for p in [*RESULTS.glob("*/REPORT.md"), *RESULTS.glob("*/quick/REPORT.md")])
RAW_KEY = re.compile(r"\b[a-z_]+\.[a-z_]+=")  # "cluster.hetero=", "snap.weights="


@pytest.mark.slow
@pytest.mark.parametrize("folder", REPORTS, ids=[p.relative_to(RESULTS).as_posix() for p in REPORTS])
def test_no_committed_figure_names_a_series_by_a_raw_config_key_or_a_dash(folder, monkeypatch):
    """What the legends of a committed report's figures say, computed as its figures were drawn: each figure
    group's methods, settings and run names. None is a raw ``section.key=value`` or a "-" (or empty where it
    names something)."""
    from edgeml.analysis.figures import group_settings, method_of, run_names
    from edgeml.reproduce.load import load_experiment
    from edgeml.reproduce.plan import plan

    monkeypatch.setenv("EDGEML_DATA", str(folder))  # planning checks no data set here: names only
    exp = load_experiment(str(folder / "experiment.toml"))
    planned = plan(exp, folder.name == "quick")
    names = exp.run_names()
    # the runs the report covers: a reproduction spanning sessions plans runs it has not made yet
    runs = rundir.load_runs([str(folder / "runs" / p.dirname) for p in planned
                             if (folder / "runs" / p.dirname).is_dir()])
    for r in runs:
        r.name = names.get(r.spec, "")
    for gid in dict.fromkeys(g for p in planned for g in p.figures):
        members = {p.name for p in planned if gid in p.figures}
        group = [r for r in runs if r.label in members]
        settings = group_settings(group, exp.labels)
        shown = [method_of(r) for r in group] + list(settings.values()) + list(run_names(group, settings).values())
        bad = [s for s in shown if RAW_KEY.search(s) or s.strip() == "-"]
        assert not bad, f"{folder.name} figure group {gid!r}: {bad[:3]}"
