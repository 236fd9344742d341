"""The run directory's archive: a run compacted as ``edgeml reproduce`` keeps its runs (``edgeml.rundir.compact``:
one ``run.zip`` holding what the analysis reads, unread series and tables left out, the staleness series cut to
the column its figure reads) loads as the run it was, for every table, figure and claim; so does a run in the
former compacted form (gzipped tables)."""

from __future__ import annotations

import gzip
import os
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from edgeml import rundir
from edgeml.analysis.compare import compare
from edgeml.analysis.figures import compact_run, figure_tables, kept_series
from edgeml.config import load_config
from edgeml.errors import UserError
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


def test_a_run_keeps_only_the_series_its_figure_groups_draw(tmp_path):
    """Compacted for figure groups that name their panels, a run keeps the series figures they draw and the
    claims' decisions, nothing more; one group that draws every panel (None) keeps every series a figure reads."""
    written = _ssp_run(tmp_path)
    series = {}
    for name, panels in [("drawn", [["convergence_time"], ["staleness"]]), ("undrawn", [["convergence_time"]]),
                         ("all", [["convergence_time"], None])]:
        path = tmp_path / name / "ssp"
        shutil.copytree(written, path)
        compact_run(path, panels)
        series[name] = {n for n in rundir.files(path) if n.startswith("series/")}
    assert series["drawn"] == series["all"] == {"series/staleness.csv", "series/decisions.csv"}
    assert series["undrawn"] == {"series/decisions.csv"}


def test_the_series_the_claims_derived_quantities_read_are_kept_whole_drawn_or_not(tmp_path):
    """``epochs`` (the predictor's errors, ``rundir.DERIVED_SERIES``) stays whole in a run whose figure groups do
    not draw it, so its claims read what they read before compaction."""
    written = _ssp_run(tmp_path)
    epochs = pd.DataFrame({"time_s": [1.0, 2.0], "rank": [1, 1], "role": ["worker"] * 2, "epoch": [0, 1],
                           "ratio": [1.0, 0.5], "points": [10, 5], "predicted_s": [1.0, 0.6],
                           "measured_s": [1.0, 0.5], "failed": [0, 0], "load_cpu": [0.0, 0.3]})
    epochs.to_csv(written / "series" / "epochs.csv", index=False)
    before = rundir.Run(written, summary={}, config={}).decided("persistence_error")
    compact_run(written, [["convergence_time"]])
    assert rundir.files(written)["series/epochs.csv"] == epochs.to_csv(index=False).encode()
    assert rundir.Run(written, summary={}, config={}).decided("persistence_error") == before == 0.0


def test_a_compacted_run_is_one_archive_and_loads_as_it_was_written(tmp_path):
    written = _ssp_run(tmp_path)
    compacted = tmp_path / "compacted" / "ssp"
    shutil.copytree(written, compacted)
    compact_run(compacted)

    assert os.listdir(compacted) == [rundir.ARCHIVE]
    inside = rundir.files(compacted)
    assert set(inside) == {"config.toml", "meta.json", "summary.json", "evals.csv", "nodes.csv",
                           "series/staleness.csv", "series/decisions.csv"}  # no messages.csv, no probe series
    assert inside["series/staleness.csv"].startswith(b"staleness\r\n")   # the only column its figure reads
    for name in ("summary.json", "config.toml", "meta.json", "evals.csv", "nodes.csv", "series/decisions.csv"):
        assert inside[name] == (written / name).read_bytes(), name   # kept byte for byte

    a, b = load_run(written), load_run(compacted)
    assert (a.summary, a.config, a.meta()) == (b.summary, b.config, b.meta())
    pd.testing.assert_frame_equal(a.evals, b.evals)
    for name in (rundir.NODES, "series/decisions.csv"):
        pd.testing.assert_frame_equal(a.table(name), b.table(name))
    assert b.table(rundir.MESSAGES, required=False) is None
    stale = b.table("series/staleness.csv")
    assert list(stale.columns) == ["staleness"] and len(stale) > 10
    pd.testing.assert_frame_equal(a.table("series/staleness.csv")[["staleness"]], stale)
    assert a.decided("rate") == b.decided("rate") == 0.5
    assert rundir.finished_status(compacted) == rundir.finished_status(written) == "completed"

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
    os.utime(two / "evals.csv", (0, 0))    # elsewhere, at another time: the same bytes (no time in the archive)
    compact_run(two)
    assert _files(two) == first
    with zipfile.ZipFile(two / rundir.ARCHIVE, "a") as z:   # a series no figure reads any more: dropped
        z.writestr("series/probe.csv", "time_s,depth\n0.5,3\n")
    assert "series/probe.csv" in rundir.files(two)
    compact_run(two)
    assert _files(two) == first


def test_a_run_in_the_former_compacted_form_reads_and_compacts_alike(tmp_path):
    """Runs compacted before the archive hold each CSV table gzip-compressed (``<name>.csv.gz``) beside their
    JSON and TOML files: they read as they did, and compact to the archive a fresh run compacts to."""
    written = _ssp_run(tmp_path)
    fresh, former = tmp_path / "fresh", tmp_path / "former"
    shutil.copytree(written, fresh)
    shutil.copytree(written, former)
    for p in [*former.glob("*.csv"), *former.glob("series/*.csv")]:
        p.with_name(p.name + ".gz").write_bytes(gzip.compress(p.read_bytes()))
        p.unlink()
    pd.testing.assert_frame_equal(load_run(former).evals, load_run(written).evals)
    assert find_runs([str(former)]) == [former.resolve()]
    compact_run(fresh)
    compact_run(former)
    assert _files(former) == _files(fresh)


def test_a_compaction_cut_short_leaves_a_readable_run(tmp_path):
    """The archive is written aside and put in place whole; the loose files go only once it is there, and
    where both hold a file the loose one is read."""
    written = _ssp_run(tmp_path)
    whole = tmp_path / "whole"
    shutil.copytree(written, whole)
    compact_run(whole)
    archive = (whole / rundir.ARCHIVE).read_bytes()
    full = load_run(written).evals
    (written / f"{rundir.ARCHIVE}.tmp").write_bytes(archive[:200])    # cut short while writing the archive
    pd.testing.assert_frame_equal(load_run(written).evals, full)
    (written / rundir.ARCHIVE).write_bytes(archive)                   # ... or while deleting the loose files
    (written / rundir.SUMMARY).unlink()
    (written / rundir.EVALS).write_text("time_s,loss\n")             # a loose file comes first
    assert rundir.read_file(written, rundir.EVALS) == b"time_s,loss\n"
    (written / rundir.EVALS).unlink()
    pd.testing.assert_frame_equal(load_run(written).evals, full)
    compact_run(written)
    assert os.listdir(written) == [rundir.ARCHIVE]
    assert _files(written) == _files(whole)


def test_a_damaged_archive_is_one_clear_error(tmp_path):
    written = _ssp_run(tmp_path)
    compact_run(written)
    (written / rundir.ARCHIVE).write_bytes(b"not a zip file")
    assert rundir.finished_status(written) is None
    with pytest.raises(UserError, match="unreadable file .*re-run it"):
        load_run(written)


def test_compacted_runs_are_found(tmp_path):
    written = _ssp_run(tmp_path)
    compact_run(written)
    assert find_runs([str(tmp_path / "runs")]) == [written.resolve()]
    assert find_runs([str(tmp_path)], recursive=True) == [written.resolve()]
    assert [r.path for r in load_runs([str(tmp_path / "runs")])] == [written.resolve()]


def test_the_kept_series_are_the_ones_the_analysis_reads():
    from edgeml.analysis import plots

    kept = kept_series()
    assert set(kept) == set(plots.SERIES_FIGURES) | {"decisions"}
    for name, columns in kept.items():   # a series cut to some columns keeps at least those its figure needs
        if columns is not None:
            assert set(plots.SERIES_FIGURES[name].columns) <= set(getattr(columns, "columns", columns))


def test_the_best_smoothed_accuracy_is_the_highest_moving_average_not_one_lucky_evaluation(tmp_path):
    """``best_smoothed_accuracy``: the highest mean of five consecutive evaluations (the ``smoothed`` rule's
    window), so one evaluation far above its neighbours moves it by a fifth of its height; None with fewer than
    five evaluations."""
    accuracy = [0.2, 0.9, 0.2, 0.2, 0.2, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, float("nan")]
    pd.DataFrame({"time_s": range(len(accuracy)), "total_steps": 0, "total_bytes": 0, "loss": 1.0,
                  "accuracy": accuracy}).to_csv(tmp_path / "evals.csv", index=False)
    run = rundir.Run(tmp_path, summary={}, config={})
    assert run.decided("best_smoothed_accuracy") == pytest.approx((0.3 + 0.4 + 0.5 + 0.6 + 0.7) / 5)
    pd.DataFrame({"time_s": range(4), "total_steps": 0, "total_bytes": 0, "loss": 1.0,
                  "accuracy": [0.9] * 4}).to_csv(tmp_path / "evals.csv", index=False)
    assert rundir.Run(tmp_path, summary={}, config={}).decided("best_smoothed_accuracy") is None


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


def test_the_predictor_is_compared_with_the_previous_epochs_time_per_point_on_the_same_epochs(tmp_path):
    """``persistence_error``: each epoch guessed as the previous kept epoch's time per point times its points;
    ``prediction_over_persistence`` the predictor's mean error over that guess's, on the same epochs (each
    platform's first and failed epochs left out)."""
    rows = [  # platform 1: the load doubles the time per point at epoch 2, which the predictor foresees
        {"rank": 1, "epoch": 0, "points": 100, "predicted_s": 9.0, "measured_s": 10.0, "failed": 0},
        {"rank": 1, "epoch": 1, "points": 50, "predicted_s": 5.0, "measured_s": 5.0, "failed": 0},
        {"rank": 1, "epoch": 2, "points": 50, "predicted_s": 9.0, "measured_s": 10.0, "failed": 0},
        # platform 2: a failed epoch between two kept ones, each at 0.1 s per point
        {"rank": 2, "epoch": 0, "points": 10, "predicted_s": 1.0, "measured_s": 1.0, "failed": 0},
        {"rank": 2, "epoch": 1, "points": 0, "predicted_s": 0.0, "measured_s": 0.0, "failed": 1},
        {"rank": 2, "epoch": 2, "points": 20, "predicted_s": 2.2, "measured_s": 2.0, "failed": 0},
    ]
    (tmp_path / "series").mkdir()
    pd.DataFrame([{"time_s": r["epoch"], **r} for r in rows]).to_csv(tmp_path / "series" / "epochs.csv", index=False)
    run = rundir.Run(tmp_path, summary={}, config={})
    # guesses: 0.1 x 50 = 5 (exact), 0.1 x 50 = 5 against 10 (0.5), 0.1 x 20 = 2 (exact); predictor: 0, 0.1, 0.1
    assert run.decided("persistence_error") == pytest.approx(0.5 / 3)
    assert run.decided("prediction_over_persistence") == pytest.approx((0.2 / 3) / (0.5 / 3))
    pd.DataFrame([{"time_s": 0, "rank": 1, "epoch": 0, "measured_s": 1.0}]).to_csv(
        tmp_path / "series" / "epochs.csv", index=False)
    assert run.decided("persistence_error") is None and run.decided("prediction_over_persistence") is None


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


def test_snaps_exchange_is_kept_as_its_totals_per_iteration_and_reads_as_before(tmp_path):
    """A SNAP run's exchange (a row per server and iteration) is kept as one row per iteration, its values sent and
    carriable summed over the servers and its threshold averaged (``rundir.Totals``): the sent fractions the claims
    read and the table the exchange figure draws are the ones the whole series gave; compacting again changes
    nothing."""
    from edgeml.analysis.plots import SERIES_FIGURES

    cfg = load_config(overrides=["run.algorithm='snap'", "run.backend='sim'", "data.dataset='breast-cancer'",
                                 "data.batch_size=4", "model.name='l2svm'", "cluster.workers=5",
                                 "network.topology='ring'", "stop.max_time=30", "eval.interval=1",
                                 "eval.test_samples=0", "snap.round_s=1", f"run.out='{tmp_path}'", "run.name='snap'"])
    path = run(cfg, quiet=True)
    whole = pd.read_csv(path / "series" / "exchange.csv")
    iterations = whole["iteration"].nunique()
    assert len(whole) == 5 * iterations and (whole["threshold"] > 0).any() and whole["sent"].nunique() > 1
    quantities = ["late_sent_fraction", "sent_fraction_at_0", f"sent_fraction_at_{iterations // 2}"]
    before = [rundir.Run(path, summary={}, config={}).decided(q) for q in quantities]

    def drawn(p: Path) -> pd.DataFrame:  # what the exchange figure computes of the table
        ex = rundir.Run(p, summary={}, config={}).table("series/exchange.csv")
        return ex.groupby("iteration").agg(sent=("sent", "sum"), values=("values", "sum"),
                                           threshold=("threshold", "mean"))

    expected = drawn(path)
    compact_run(path, [["exchange"]])
    kept = rundir.Run(path, summary={}, config={}).table("series/exchange.csv")
    assert list(kept.columns) == list(SERIES_FIGURES["exchange"].reads.columns)
    assert list(kept["iteration"]) == list(range(iterations))
    assert [rundir.Run(path, summary={}, config={}).decided(q) for q in quantities] == before
    assert all(0 < q <= 1 for q in before)
    pd.testing.assert_frame_equal(drawn(path)[["sent", "values"]], expected[["sent", "values"]])
    assert drawn(path)["threshold"].to_numpy() == pytest.approx(expected["threshold"].to_numpy(), rel=1e-12)
    first = _files(path)
    compact_run(path, [["exchange"]])
    assert _files(path) == first


def test_totals_keep_whole_numbers_whole_and_a_single_row_as_written():
    t = rundir.Totals(("k",), ("n",), ("x",))
    table = b"k,n,x,other\n1,2,0.5,a\n1,3,0.25,b\n2,7,1e-05,c\n"
    assert t.of(table) == b"k,n,x\r\n1,5,0.375\r\n2,7,1e-05\r\n"
    assert t.of(t.of(table)) == t.of(table)
    assert t.of(b"k,n\n1,2\n") == b"k,n\n1,2\n"  # lacks a column: as it is
