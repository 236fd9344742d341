"""The run directory's compressed tables: a run compacted as ``edgeml reproduce`` keeps its runs
(``edgeml.rundir.compact``: CSV tables gzipped, unread series deleted, the staleness series cut to the column
its figure reads) loads as the run it was, for every table, figure and claim."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pandas as pd

from edgeml import rundir
from edgeml.analysis.compare import compare
from edgeml.analysis.figures import compact_run, figure_tables, kept_series
from edgeml.config import load_config
from edgeml.rundir import find_runs, load_run, load_runs
from edgeml.runner import run


def _files(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _ssp_run(tmp_path: Path) -> Path:
    """A short SSP run on the sim backend (it writes the staleness series), plus a series nothing reads and
    decisions logged by hand."""
    cfg = load_config(overrides=["run.algorithm='ssp'", "run.backend='sim'", "cluster.workers=3",
                                 "cluster.hetero='1:1:3'", "stop.max_time=5", f"run.out='{tmp_path / 'runs'}'",
                                 "run.name='ssp'"])
    path = run(cfg, quiet=True)
    pd.DataFrame({"time_s": [0.5, 1.0], "rank": [1, 1], "role": ["ps", "ps"], "depth": [3, 4]}) \
        .to_csv(path / "series" / "probe.csv", index=False)
    pd.DataFrame({"time_s": [0.5, 1.0], "rank": [1, 1], "role": ["ps", "ps"], "name": ["rate", "rate"],
                  "value": [0.25, 0.75]}).to_csv(path / "series" / "decisions.csv", index=False)
    return path


def test_a_compacted_run_loads_as_it_was_written(tmp_path):
    written = _ssp_run(tmp_path)
    compacted = tmp_path / "compacted" / "ssp"
    shutil.copytree(written, compacted)
    compact_run(compacted)

    names = set(_files(compacted))
    assert {"evals.csv.gz", "nodes.csv.gz", "messages.csv.gz", "series/staleness.csv.gz",
            "series/decisions.csv.gz", "summary.json", "config.toml", "meta.json"} <= names
    assert not [n for n in names if n.endswith(".csv")] and "series/probe.csv.gz" not in names  # unread: gone
    with gzip.open(compacted / "series" / "staleness.csv.gz", "rt", newline="") as f:
        assert f.readline() == "staleness\r\n"   # the only column its figure reads
    assert (compacted / rundir.SUMMARY).read_bytes() == (written / rundir.SUMMARY).read_bytes()

    a, b = load_run(written), load_run(compacted)
    pd.testing.assert_frame_equal(a.evals, b.evals)
    for name in (rundir.NODES, rundir.MESSAGES, "series/decisions.csv"):
        pd.testing.assert_frame_equal(a.table(name), b.table(name))
    stale = b.table("series/staleness.csv")
    assert list(stale.columns) == ["staleness"] and len(stale) > 10
    pd.testing.assert_frame_equal(a.table("series/staleness.csv")[["staleness"]], stale)
    assert a.decided("rate") == b.decided("rate") == 0.5

    # everything the tables, figures and claims are built from is the same
    ra, rb = load_runs([str(written)]), load_runs([str(compacted)])
    pa, pb = compare(ra).per_run, compare(rb).per_run
    pd.testing.assert_frame_equal(pa.drop(columns="path"), pb.drop(columns="path"))
    ta, tb = figure_tables(ra), figure_tables(rb)
    assert ta.keys() == tb.keys() and "staleness" in tb
    for name in ta:
        pd.testing.assert_frame_equal(ta[name][tb[name].columns], tb[name])


def test_compacting_is_deterministic_and_once_is_enough(tmp_path):
    written = _ssp_run(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    shutil.copytree(written, one)
    shutil.copytree(written, two)
    compact_run(one)
    first = _files(one)
    compact_run(one)                       # again: nothing changes
    assert _files(one) == first
    compact_run(two)                       # elsewhere: the same bytes (no name or time in the gzip headers)
    assert _files(two) == first


def test_a_compaction_cut_short_leaves_a_readable_run(tmp_path):
    """The CSV goes only once its compressed copy is complete; where both are there the CSV is read."""
    written = _ssp_run(tmp_path)
    with open(written / rundir.EVALS, "rb") as f:
        (written / f"{rundir.EVALS}.gz").write_bytes(gzip.compress(f.read()[:40]))   # a torn copy
    assert rundir.table_path(written, rundir.EVALS) == written / rundir.EVALS
    full = load_run(written).evals
    compact_run(written)
    assert not (written / rundir.EVALS).exists()
    pd.testing.assert_frame_equal(load_run(written).evals, full)


def test_runs_with_only_compressed_tables_are_found(tmp_path):
    written = _ssp_run(tmp_path)
    compact_run(written)
    (written / rundir.SUMMARY).unlink()        # found by its evaluations alone, as an unfinished run is
    assert find_runs([str(tmp_path / "runs")]) == [written.resolve()]
    assert find_runs([str(tmp_path)], recursive=True) == [written.resolve()]


def test_the_kept_series_are_the_ones_the_analysis_reads():
    from edgeml.analysis import plots

    kept = kept_series()
    assert set(kept) == set(plots.SERIES_FIGURES) | {"decisions"}
    for name, columns in kept.items():   # a series cut to some columns keeps at least those its figure needs
        if columns is not None:
            assert set(plots.SERIES_FIGURES[name].columns) <= set(columns)


def test_the_windowed_prediction_error_averages_out_epoch_noise_and_skips_runs_without_predictions(tmp_path):
    """``window_prediction_error`` sums predictions and measurements over windows of ``WINDOW_EPOCHS`` epochs
    per platform: noise that cancels within a window leaves no error, a bias stays whole; failed epochs and a
    platform's incomplete last window are left out."""
    w = rundir.WINDOW_EPOCHS
    rows = []
    for e in range(2 * w + 3):  # platform 1: alternately 1 s early and 1 s late around a right prediction
        rows.append({"time_s": e, "rank": 1, "epoch": e, "predicted_s": 3.0, "measured_s": 2.0 if e % 2 else 4.0,
                     "failed": 0})
    for e in range(w + 1):  # platform 2: always twice the measured time; one failed epoch
        rows.append({"time_s": e, "rank": 2, "epoch": e, "predicted_s": 0.0 if e == 3 else 2.0,
                     "measured_s": 0.0 if e == 3 else 1.0, "failed": int(e == 3)})
    (tmp_path / "series").mkdir()
    pd.DataFrame(rows).to_csv(tmp_path / "series" / "epochs.csv", index=False)
    run = rundir.Run(tmp_path, summary={}, config={})
    assert run.decided("window_prediction_error") == (0.0 + 1.0) / 2
    pd.DataFrame([{"time_s": 0, "rank": 1, "epoch": 0, "measured_s": 1.0}]).to_csv(
        tmp_path / "series" / "epochs.csv", index=False)
    assert run.decided("window_prediction_error") is None  # GoSGD's epochs: no predictions


def test_a_run_written_before_a_key_of_its_algorithm_existed_reads_it_as_the_default():
    """``flat_config`` fills an algorithm's section with its defaults (``SECTION_DEFAULTS``, recorded by the
    registry), so a run made before ``edgegossip.choose`` existed names the same setting as one made after, and
    one that set it otherwise differs there alone."""
    import edgeml.algorithms  # noqa: F401  (registers every algorithm's defaults)

    old = rundir.Run(Path("old"), summary={}, config={"run": {"algorithm": "edgegossip"},
                                                        "edgegossip": {"method": "svd_kmeans"}})
    new = rundir.Run(Path("new"), summary={}, config={"run": {"algorithm": "edgegossip"},
                                                        "edgegossip": {"method": "svd_kmeans", "choose": "loss"}})
    other = rundir.Run(Path("other"), summary={}, config={"run": {"algorithm": "edgegossip"},
                                                          "edgegossip": {"choose": "random"}})
    assert rundir.flat_config(old) == rundir.flat_config(new)
    a, b = rundir.flat_config(old), rundir.flat_config(other)
    assert {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} == {"edgegossip.choose"}
    assert "bsp.lr" not in a  # only the sections the run has
