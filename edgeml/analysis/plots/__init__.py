"""Figures: one function per figure, a tidy DataFrame in, a matplotlib Figure out.

Every figure reads without the paper at hand: a title saying what is compared and under which settings, axis
labels with units, one legend. Colour means the method (with a marker of its own, so that two methods with
the same curve stay visible), line style the swept setting. Seeds of a run are drawn as their mean with a 95%
bootstrap band or error bar. A run that never reached a target is drawn at its budget, hatched and marked
'>'. Figures are at most ``MAX_WIDTH`` inches wide; long titles wrap.

The tables come from ``edgeml.analysis.figures.figure_tables`` and carry ``method`` and ``setting`` columns.
Nothing here knows an algorithm's internals: figures of the series a run wrote (``series/<name>.csv``) are
chosen from ``SERIES_FIGURES``, keyed by the series' name, so an algorithm that writes a new series adds its
figure there and nowhere else; decided quantities arrive as ``name``/``value`` rows.

By kind: ``curves`` (metrics against time, steps, bytes or iterations), ``bars`` (convergence bars, time
breakdown, throughput), ``against`` (metrics against a setting or a measured quantity), ``series`` (the
series figures and their registry); ``style`` holds what they share (colours, markers, line styles, sizes).
"""

# style first: it selects matplotlib's Agg backend before anything imports pyplot
from edgeml.analysis.plots.style import MAX_TICK_LABELS, MAX_WIDTH, X_AXES, X_NAMES  # noqa: I001
from edgeml.analysis.plots.against import against
from edgeml.analysis.plots.bars import accuracy, bars, throughput, time_breakdown
from edgeml.analysis.plots.curves import convergence, cost_per_iteration
from edgeml.analysis.plots.series import (SERIES_FIGURES, SeriesFigure, commits, decisions, epochs, exchange, rounds,
                                         staleness, staleness_hist, trials)

__all__ = ["MAX_TICK_LABELS", "MAX_WIDTH", "SERIES_FIGURES", "X_AXES", "X_NAMES", "SeriesFigure", "accuracy", "against",
           "bars",
           "commits", "convergence", "cost_per_iteration", "decisions", "epochs", "exchange", "rounds", "staleness",
           "staleness_hist", "throughput", "time_breakdown", "trials"]
