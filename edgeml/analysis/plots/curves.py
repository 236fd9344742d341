"""Curves: test accuracy and loss against time, steps or bytes, and communication cost against iterations; a
line per run with a 95% bootstrap band over its seeds, and past the end of its shortest seed a thin line per seed
that went on (runs that stop at a plateau, or diverge, end at different points)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from edgeml.analysis.plots.style import GRID_POINTS, X_AXES, X_NAMES, Styles, new_figure, panel_title
from edgeml.analysis.stats import bootstrap_band


def _curve_on_grid(g: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Mean curve of a run's seeds and its 95% bootstrap band on one x grid (one seed: its points, no band).

    Seeds evaluate at different step and byte counts (and procs at jittered times); the grid is their evaluation
    points (so a curve is drawn where it was measured, also near 0 on a log axis), thinned geometrically to at most
    ``GRID_POINTS``, and ends where the shortest seed ends, so the band never mixes in seeds that have stopped
    (``_tails`` draws what the others measured after that)."""
    g = g.dropna(subset=[y])
    if g["seed"].nunique() < 2:
        g = g.sort_values(x)
        return g[x].to_numpy(float), g[y].to_numpy(float), None
    points = np.unique(g[x].to_numpy(float))
    grid = points[points <= g.groupby("seed")[x].max().min()]
    if grid.size > GRID_POINTS:
        grid = grid[np.unique(np.geomspace(1, grid.size, GRID_POINTS).round().astype(int) - 1)]
    curves = np.array([np.interp(grid, s[x].to_numpy(float), s[y].to_numpy(float))
                       for _, s in (g.sort_values(x).groupby("seed"))])
    lo, hi = bootstrap_band(curves)
    return grid, curves.mean(axis=0), np.vstack([lo, hi])


def _tails(g: pd.DataFrame, x: str, y: str, end: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each seed's curve past ``end``, where the mean over the seeds stops, from its (interpolated) value there:
    what the seeds that went on measured, drawn one by one since a mean over fewer seeds would jump as each one
    stops."""
    tails = []
    for _, s in g.dropna(subset=[y]).sort_values(x, kind="stable").groupby("seed"):
        xs, ys = s[x].to_numpy(float), s[y].to_numpy(float)
        after = xs > end
        if after.any():
            tails.append((np.r_[end, xs[after]], np.r_[np.interp(end, xs, ys), ys[after]]))
    return tails


def _draw(ax, g: pd.DataFrame, x: str, y: str, colour, dash, marker, m: int, methods: int) -> tuple[tuple, bool]:
    """A run's mean curve with its band and, past its shortest seed, its seeds' tails; returns the mean curve and
    whether tails were drawn."""
    xs, ys, band = _curve_on_grid(g, x, y)
    if xs.size == 0:
        return (xs, ys), False
    every = max(1, xs.size // 8, methods)
    # markers offset per method: two methods with one curve show both markers (even on a few points)
    ax.plot(xs, ys, color=colour, ls=dash, lw=1.5, marker=marker, ms=5,
            markevery=(min(xs.size - 1, m * every // max(1, methods)), every), alpha=0.9)
    if band is None:
        return (xs, ys), False
    ax.fill_between(xs, band[0], band[1], color=colour, alpha=0.15, lw=0)
    tails = _tails(g, x, y, xs[-1])
    for tx, ty in tails:
        ax.plot(tx, ty, color=colour, ls=dash, lw=0.7, alpha=0.55, gid="seed-tail")
    return (xs, ys), bool(tails)


TAILS_NOTE = "thin lines: single seeds after the first of their run's seeds stopped"


def _noted(context: str, tails: bool) -> str:
    """A figure's context line, with what its thin lines are where it has some."""
    return "; ".join(filter(None, (context, TAILS_NOTE if tails else "")))


def convergence(evals: pd.DataFrame, x: str = "time_s", context: str = "", model: str = "the global model") -> Figure:
    """Test accuracy and loss of ``model`` (what the evaluations describe: ``figures.evaluated_model``) against ``x``
    (time_s, total_steps, total_mb or ingress_mb): a line per run, colour and marker by method, line style by
    setting, a 95% band over seeds."""
    st = Styles.of(evals)
    fig, axes = new_figure(1, 2, 11, 4.6)
    drawn: list[tuple[str, str, list]] = []  # (method, setting, its curves): to name the ones that coincide
    tails = False
    for _, g in evals.groupby("run", sort=False):
        method, setting = g["method"].iloc[0], g["setting"].iloc[0]
        mine = []
        for ax, y in zip(axes, ("accuracy", "loss")):
            curve, tailed = _draw(ax, g, x, y, st.colour[method], st.dash[setting], st.marker[method],
                                  st.methods.index(method), len(st.methods))
            mine.append(curve)
            tails |= tailed
        drawn.append((method, setting, mine))
    st.add_notes(coinciding(drawn))
    ends = pd.to_numeric(evals.groupby("run")[x].max(), errors="coerce")
    ends = ends[ends > 0]
    # runs that end an order of magnitude apart (compressed volumes; a baseline given 10x the budget) would squeeze
    # the short ones against the axis: a log scale, linear near 0 where every run starts
    log = len(ends) > 1 and ends.max() >= 10 * ends.min()
    for ax, (_, label) in zip(axes, (("accuracy", "test accuracy"), ("loss", "test loss"))):
        if log:
            ax.set_xscale("symlog", linthresh=10.0 ** math.floor(math.log10(ends.min() / 100)), linscale=0.5)
        ax.set_xlabel(X_AXES[x] + (" (log scale)" if log else ""))
        ax.set_ylabel(label)
        ax.set_title(f"{label} vs {X_NAMES[x]}")
    axes[0].set_ylim(0, 1)
    losses = pd.to_numeric(evals.get("loss", pd.Series(dtype=float)), errors="coerce")
    losses = losses[np.isfinite(losses) & (losses > 0)]
    if len(losses) and losses.max() > 30 * losses.median():  # a diverging run would flatten every other curve
        axes[1].set_yscale("log")
        axes[1].set_ylabel("test loss (log scale)")
        # three decades above the typical loss: a blow-up leaves the panel (to 1e20, say) rather than take it over
        axes[1].set_ylim(top=min(axes[1].get_ylim()[1], 1000 * losses.median()))
    st.legend(fig)
    panel_title(fig, f"Test accuracy and loss of {model} against {X_NAMES[x]}",
                _noted(context, tails))
    return fig


def coinciding(drawn: list[tuple[str, str, list]]) -> dict[str, str]:
    """Legend notes for methods whose every curve lies on another method's (SNO's iterates are SNAP-0's): "same
    curve as SNAP-0", so that a reader looks for the hidden line rather than for a missing one. ``drawn``:
    (method, setting, [(xs, ys) per panel]) per line, in drawing order; curves coincide where they have the same
    points to a millionth."""
    def same(a: list, b: list) -> bool:
        return all(xa.shape == xb.shape and np.allclose(xa, xb, rtol=1e-6, atol=1e-9) and
                   np.allclose(ya, yb, rtol=1e-6, atol=1e-9, equal_nan=True) for (xa, ya), (xb, yb) in zip(a, b))

    notes: dict[str, str] = {}
    for method in dict.fromkeys(m for m, _, _ in drawn):
        others = [[o for o, _, c2 in drawn if o != method and same(c, c2)] for m, _, c in drawn if m == method]
        common = set(others[0]).intersection(*others[1:]) if others else set()
        if common:
            first = next(o for o, _, _ in drawn if o in common)
            if notes.get(first) != f"same curve as {method}":  # one of the two names the other
                notes[method] = f"same curve as {first}"
    return notes


def cost_per_iteration(evals: pd.DataFrame, context: str = "") -> Figure:
    """Communication cost (bytes x hops, SNAP Sec. II-B) per iteration and in total against iterations (the
    ``iterations`` counter): a line per run, a 95% band over seeds. Per iteration is the cost between two
    evaluations over the iterations between them, the evaluations taken at least a fiftieth of the run's
    iterations apart: the counter and the bytes are read at slightly different moments (in procs, of different
    processes), and over one or two iterations that alone makes the ratio zig-zag."""
    st = Styles.of(evals)
    fig, axes = new_figure(1, 2, 11, 4.6)
    parts = []
    for _, s in evals.sort_values("time_s").groupby(["run", "seed"], sort=False):
        s = s.drop_duplicates("iterations", keep="last")
        s = s[_spaced(s["iterations"].to_numpy(), max(1.0, s["iterations"].max() / 50))]
        per = s["total_byte_hops"].diff() / s["iterations"].diff()
        parts.append(s.assign(per_iteration_mb=per / 1e6, cost_mb=s["total_byte_hops"] / 1e6))
    data = pd.concat(parts, ignore_index=True) if parts else evals
    drawn: list[tuple[str, str, list]] = []
    tails = False
    for _, g in data.groupby("run", sort=False):
        method, setting = g["method"].iloc[0], g["setting"].iloc[0]
        mine = []
        for ax, y in zip(axes, ("per_iteration_mb", "cost_mb")):
            curve, tailed = _draw(ax, g, "iterations", y, st.colour[method], st.dash[setting], st.marker[method],
                                  st.methods.index(method), len(st.methods))
            mine.append(curve)
            tails |= tailed
        drawn.append((method, setting, mine))
    st.add_notes(coinciding(drawn))
    for ax, label in zip(axes, ("cost per iteration (MB x hops)", "total cost (MB x hops)")):
        ax.set_xlabel("iterations")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    axes[0].set_title("communication per iteration")
    axes[1].set_title("total communication")
    st.legend(fig)
    panel_title(fig, "Communication cost against iterations", _noted(context, tails))
    return fig


def _spaced(x: np.ndarray, gap: float) -> np.ndarray:
    """A mask keeping the first of increasing values ``x`` and then each one at least ``gap`` past the last kept;
    the last value replaces the last kept one where it falls short of the gap (the end of a run is kept)."""
    keep = np.zeros(len(x), dtype=bool)
    last = -math.inf
    for i, v in enumerate(x):
        if v >= last + gap:
            keep[i], last = True, v
    if len(x) and not keep[-1]:
        kept = np.flatnonzero(keep)
        if len(kept) > 1:
            keep[kept[-1]] = False
        keep[-1] = True
    return keep
