"""Every kind of figure really drawn to a file once: a valid PNG of plausible size with something on it. The
report goldens (``test_rendering.py``) and the reproduction tests compare text and do not draw
(``no_drawing`` in ``conftest.py``); this is where the drawing of each kind is exercised, from committed quick
runs (the data the committed reports draw)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from edgeml import rundir
from edgeml.analysis import plots
from edgeml.analysis.figures import plan_figures, save_png

RESULTS = Path(__file__).resolve().parents[1] / "results"
PAPERS = ("baselines", "adsp", "adacomp", "esync", "snap", "edgegossip")  # together they have every kind below
KINDS = {"convergence", "cost_per_iteration", "bars", "time_breakdown", "throughput", "accuracy", "staleness",
         "staleness_hist", "decisions", "commits", "trials", "rounds", "exchange", "epochs"}
BLANK_BYTES = 4000
"""A blank figure of that size is a PNG of a few hundred bytes (one colour); the smallest drawn one (axes,
ticks, text and a few bars) over 15 kB."""


def kind(name: str) -> str:
    return "convergence" if name.startswith("convergence_") else name


def check_png(path: Path) -> None:
    assert path.stat().st_size > BLANK_BYTES, f"{path.name}: {path.stat().st_size} bytes, a blank figure's size"
    with Image.open(path) as image:
        image.verify()  # the whole file decodes
    with Image.open(path) as image:
        assert image.format == "PNG" and 400 <= image.width <= 6000 and 200 <= image.height <= 6000, image.size
        assert len(image.convert("RGB").getcolors(1 << 16) or range(1 << 16)) > 8, f"{path.name}: nearly one colour"


def some_runs(paper: str) -> list[rundir.Run]:
    """Committed quick runs of ``paper`` (of its first seed) that among them hold every series its runs hold:
    every kind of figure the paper draws, at a fraction of the cost of drawing all its runs."""
    runs = rundir.load_runs([str(RESULTS / paper / "quick" / "runs")], recursive=True)
    seed = min(r.seed for r in runs)
    chosen, seen = [], set()
    for r in sorted((r for r in runs if r.seed == seed), key=lambda r: str(r.path)):
        series = {n for n in rundir.files(r.path) if n.startswith(f"{rundir.SERIES}/")}
        if not chosen or series - seen:
            chosen.append(r)
            seen |= series
    return chosen


@pytest.mark.slow
def test_every_kind_of_figure_draws_a_valid_png(tmp_path):
    drawn: dict[str, Path] = {}
    for paper in PAPERS:
        runs = some_runs(paper)
        pending = plan_figures(runs, tmp_path / paper, pdf=False)
        if paper == "baselines":  # accuracy is drawn only where a figure group names it
            pending += plan_figures(runs, tmp_path / paper, panels=["accuracy"], pdf=False)
        for f in pending:
            if kind(f.file.name) not in drawn:
                f.write()
                drawn[kind(f.file.name)] = f.file.png
    assert set(drawn) == KINDS, sorted(set(drawn) ^ KINDS)
    for path in drawn.values():
        check_png(path)


@pytest.mark.slow
def test_an_against_figure_draws_a_valid_png(tmp_path):
    rows = [{"method": m, "point": f"cluster.workers={w}", "seed": s, "cluster.workers": w,
             "time_to_target": base * w + s, "time_to_target_censored": False}
            for m, base in (("adsp", 10.0), ("bsp", 14.0)) for w in (2, 4, 8) for s in range(3)]
    path = tmp_path / "against.png"
    save_png(plots.against(pd.DataFrame(rows), "cluster.workers", ["time_to_target"], {"cluster.workers": "workers"}),
             path)
    check_png(path)


@pytest.mark.slow
def test_the_epochs_figure_of_runs_without_predictions_draws(tmp_path):
    """GoSGD's epochs carry no predictions: its runs alone draw the data ratios and an empty prediction panel."""
    runs = [r for r in rundir.load_runs([str(RESULTS / "edgegossip" / "quick" / "runs")]) if r.label == "gosgd"]
    assert runs
    pending = [f for f in plan_figures(runs, tmp_path, panels=["epochs"], pdf=False) if kind(f.file.name) == "epochs"]
    assert len(pending) == 1
    pending[0].write()
    check_png(pending[0].file.png)
