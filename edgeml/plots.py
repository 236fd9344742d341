"""Figures: one function per figure, a tidy DataFrame in, a matplotlib Figure out.

Every figure reads without the paper at hand: a title saying what is compared and under which settings, axis
labels with units, one legend. Colour means the method (with a marker of its own, so that two methods with
the same curve stay visible), line style the swept setting. Seeds of a run are drawn as their mean with a 95%
bootstrap band or error bar. A run that never reached a target is drawn at its budget, hatched and marked
'>'. Figures are at most ``MAX_WIDTH`` inches wide; long titles wrap.

The tables come from ``edgeml.figures.figure_tables`` and carry ``method`` and ``setting`` columns. Nothing
here knows an algorithm's internals: figures of the series a run wrote (``series/<name>.csv``) are chosen
from ``SERIES_FIGURES``, keyed by the series' name, so an algorithm that writes a new series adds its figure
there and nowhere else; decided quantities arrive as ``name``/``value`` rows.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from typing import Callable

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullLocator  # noqa: E402

from edgeml.stats import bootstrap_band, bootstrap_ci  # noqa: E402

X_AXES = {"time_s": "training time (s)", "total_steps": "total steps over all workers",
          "total_mb": "bytes sent by all nodes (MB)", "ingress_mb": "bytes into the parameter server (MB)",
          "iterations": "iterations"}
X_NAMES = {"time_s": "training time", "total_steps": "total steps", "total_mb": "bytes sent",
           "ingress_mb": "ingress at the parameter server", "iterations": "iterations"}
PARTS = {"computation": "#4C72B0", "communication": "#DD8452", "waiting": "#C44E52"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
HATCHES = ("", "//", "..", "xx", "\\\\", "++")
"""Bar fills that tell apart runs of one method (one colour) in the same panel."""
DASHES = ("-", "--", ":", "-.", (0, (6, 2, 1, 2, 1, 2)), (0, (10, 3)), (0, (1, 3)), (0, (4, 1, 4, 4)))
GRID_POINTS = 80
MAX_WIDTH = 14.0     # inches; at 150 dpi a figure is at most 2100 px wide
MAX_TICK_LABELS = 12  # per axis: more worker labels are thinned out



def _spans(mid, lo, hi) -> np.ndarray:
    """Error-bar lengths [below, above] around ``mid`` for an interval [lo, hi] (scalars or arrays): clipped at 0,
    because a mean of equal values can land an ulp outside their range and matplotlib refuses negative lengths."""
    mid, lo, hi = (np.atleast_1d(np.asarray(v, dtype=float)) for v in (mid, lo, hi))
    return np.clip(np.vstack([mid - lo, hi - mid]), 0.0, None)


def _figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Figure, list]:
    # A bare Figure (no pyplot) leaves no global state behind, so many figures never pile up in memory.
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        fig = Figure(figsize=(min(width, MAX_WIDTH), height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    return fig, axes


def _title(fig: Figure, text: str, context: str) -> None:
    width = max(40, int(fig.get_figwidth() * 11))  # characters that fit at this font size
    lines = textwrap.wrap(text, width) + (textwrap.wrap(context, width) if context else [])
    fig.suptitle("\n".join(lines), fontsize=11)


def _wrap(text: str, width: int = 18) -> str:
    """A tick label on several lines: one per part of a setting, long parts folded at word boundaries."""
    return "\n".join(textwrap.fill(part, width, break_long_words=False) for part in text.split(", "))


def _order(df: pd.DataFrame, col: str) -> list:
    return list(dict.fromkeys(df[col])) if col in df else []


@dataclass
class Styles:
    """Colour and marker per method, line style per setting, shared by every panel of one figure."""

    methods: list[str]
    settings: list[str]

    def __post_init__(self):
        palette = sns.color_palette("tab10" if len(self.methods) <= 10 else "husl", len(self.methods))
        self.colour = dict(zip(self.methods, palette))
        self.marker = {m: MARKERS[i % len(MARKERS)] for i, m in enumerate(self.methods)}
        self.dash = {s: DASHES[i % len(DASHES)] for i, s in enumerate(self.settings)}
        # settings that all set the same keys are named by their values, the keys titling the legend or axis
        pairs = {s: [p.split("=", 1) for p in s.split(",")] if s else [] for s in self.settings}
        keys = {tuple(k for k, _ in kv) for s, kv in pairs.items() if s}
        same = len(keys) == 1 and all(pairs[s] for s in self.settings)
        self.setting_title = ", ".join(next(iter(keys))) if same else "setting"
        self.setting_names = {s: ", ".join(v for _, v in pairs[s]) if same else s.replace(",", ", ") or "-"
                              for s in self.settings}

    @classmethod
    def of(cls, df: pd.DataFrame) -> "Styles":
        return cls(_order(df, "method"), _order(df, "setting"))

    def legend(self, fig: Figure, lines: bool = True) -> None:
        """Methods (colour and marker) and, when several, settings (line style), below the panels."""
        handles = [Line2D([], [], color=self.colour[m], marker=self.marker[m], lw=1.6 if lines else 0, ms=6)
                   for m in self.methods]
        labels = list(self.methods)
        title = "method"
        if len(self.settings) > 1 and lines:
            handles += [Line2D([], [], color="0.35", ls=self.dash[s], lw=1.6) for s in self.settings]
            labels += [self.setting_names[s] for s in self.settings]
            title = f"method; {self.setting_title}"
        width = max(map(len, labels)) + 6
        ncols = max(1, min(len(labels), int(fig.get_figwidth() * 11) // width))
        # grow the figure by the legend's height, so that many entries never squeeze it into the panels
        fig.set_figheight(fig.get_figheight() + 0.24 * (math.ceil(len(labels) / ncols) + 1))
        fig.legend(handles, labels, title=title, loc="outside lower center", ncols=ncols, frameon=False)


def _curve_on_grid(g: pd.DataFrame, x: str, y: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Mean curve of a run's seeds and its 95% bootstrap band on one x grid (one seed: its points, no band).

    Seeds evaluate at different step and byte counts (and procs at jittered times); the grid ends where the
    shortest seed ends, so the band never mixes in seeds that have stopped."""
    g = g.dropna(subset=[y])
    if g["seed"].nunique() < 2:
        g = g.sort_values(x)
        return g[x].to_numpy(float), g[y].to_numpy(float), None
    grid = np.linspace(0, g.groupby("seed")[x].max().min(), GRID_POINTS)
    curves = np.array([np.interp(grid, s[x].to_numpy(float), s[y].to_numpy(float))
                       for _, s in (g.sort_values(x).groupby("seed"))])
    lo, hi = bootstrap_band(curves)
    return grid, curves.mean(axis=0), np.vstack([lo, hi])


def convergence(evals: pd.DataFrame, x: str = "time_s", context: str = "") -> Figure:
    """Test accuracy and loss against ``x`` (time_s, total_steps, total_mb or ingress_mb): a line per run, colour and
    marker by method, line style by setting, a 95% band over seeds."""
    st = Styles.of(evals)
    fig, axes = _figure(1, 2, 11, 4.6)
    for k, (run, g) in enumerate(evals.groupby("run", sort=False)):
        method, setting = g["method"].iloc[0], g["setting"].iloc[0]
        m = st.methods.index(method)
        for ax, y in zip(axes, ("accuracy", "loss")):
            xs, ys, band = _curve_on_grid(g, x, y)
            if xs.size == 0:
                continue
            every = max(1, xs.size // 8)
            # markers offset per method: two methods with one curve show both markers
            ax.plot(xs, ys, color=st.colour[method], ls=st.dash[setting], lw=1.5, marker=st.marker[method],
                    ms=5, markevery=(min(xs.size - 1, m * every // max(1, len(st.methods))), every), alpha=0.9)
            if band is not None:
                ax.fill_between(xs, band[0], band[1], color=st.colour[method], alpha=0.15, lw=0)
    ends = pd.to_numeric(evals.groupby("run")[x].max(), errors="coerce")
    ends = ends[ends > 0]
    # runs that end an order of magnitude apart (compressed volumes; a baseline given 10x the budget) would squeeze
    # the short ones against the axis: a log scale, linear near 0 where every run starts
    log = len(ends) > 1 and ends.max() >= 10 * ends.min()
    for ax, (y, label) in zip(axes, (("accuracy", "test accuracy"), ("loss", "test loss"))):
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
    st.legend(fig)
    _title(fig, f"Test accuracy and loss of the global model against {X_NAMES[x]}", context)
    return fig


def cost_per_iteration(evals: pd.DataFrame, context: str = "") -> Figure:
    """Communication cost (bytes x hops, snap.txt Sec. II-B) per iteration and in total against iterations (the
    ``iterations`` counter): a line per run, a 95% band over seeds. Per iteration is the cost between two
    evaluations over the iterations between them, the evaluations taken at least a fiftieth of the run's
    iterations apart: the counter and the bytes are read at slightly different moments (in procs, of different
    processes), and over one or two iterations that alone makes the ratio zig-zag."""
    st = Styles.of(evals)
    fig, axes = _figure(1, 2, 11, 4.6)
    parts = []
    for _, s in evals.sort_values("time_s").groupby(["run", "seed"], sort=False):
        s = s.drop_duplicates("iterations", keep="last")
        s = s[_spaced(s["iterations"].to_numpy(), max(1.0, s["iterations"].max() / 50))]
        per = s["total_byte_hops"].diff() / s["iterations"].diff()
        parts.append(s.assign(per_iteration_mb=per / 1e6, cost_mb=s["total_byte_hops"] / 1e6))
    data = pd.concat(parts, ignore_index=True) if parts else evals
    for run, g in data.groupby("run", sort=False):
        method, setting = g["method"].iloc[0], g["setting"].iloc[0]
        for ax, y in zip(axes, ("per_iteration_mb", "cost_mb")):
            xs, ys, band = _curve_on_grid(g, "iterations", y)
            if xs.size == 0:
                continue
            ax.plot(xs, ys, color=st.colour[method], ls=st.dash[setting], lw=1.5, marker=st.marker[method], ms=4,
                    markevery=max(1, xs.size // 8), alpha=0.9)
            if band is not None:
                ax.fill_between(xs, band[0], band[1], color=st.colour[method], alpha=0.15, lw=0)
    for ax, label in zip(axes, ("cost per iteration (MB x hops)", "total cost (MB x hops)")):
        ax.set_xlabel("iterations")
        ax.set_ylabel(label)
        ax.set_ylim(bottom=0)
    axes[0].set_title("communication per iteration")
    axes[1].set_title("total communication")
    st.legend(fig)
    _title(fig, "Communication cost against iterations", context)
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


def _mean_ci(lo: np.ndarray, hi: np.ndarray) -> tuple[float, float, float, bool]:
    """Mean over seeds with its bootstrap interval; censored (hi infinite): the mean of the bounds, no interval."""
    censored = bool(np.isinf(hi).any())
    mean, ci_lo, ci_hi = bootstrap_ci(lo)
    return mean, ci_lo, ci_hi, censored


def _bar(ax, x: float, width: float, lo: np.ndarray, hi: np.ndarray, colour) -> float:
    """One bar: the mean with its interval; hatched at the budget and marked '>' when a seed never got there."""
    mean, ci_lo, ci_hi, censored = _mean_ci(lo, hi)
    ax.bar(x, mean, width, color=colour, alpha=0.45 if censored else 0.9, hatch="//" if censored else None,
           edgecolor=colour if censored else "none", lw=1.0)
    if censored:
        ax.annotate(">", (x, mean), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                    fontsize=12, fontweight="bold", color=colour)
    elif ci_hi > ci_lo:
        ax.errorbar(x, mean, _spans(mean, ci_lo, ci_hi), color="0.15", capsize=3, lw=1.1)
    return max(mean, ci_hi if not censored else mean)


def bars(reach: pd.DataFrame, target: str, context: str = "") -> Figure:
    """Convergence time and steps per method (the papers' bar charts, e.g. adsp.txt Fig. 4(b), 4(c), 5(e)).

    ``reach``: one row per run and seed with method, setting, time_lo, time_hi, steps_lo, steps_hi (hi
    infinite where the run never reached ``target``). With settings, bars are grouped by setting."""
    st = Styles.of(reach)
    grouped = len(st.settings) > 1
    groups = st.settings if grouped else [""]
    # a group of bars is as wide as its methods need, and at least as wide as its tick label's longest line
    label_in = max((len(line) for s in groups for line in _wrap(st.setting_names[s]).split("\n")), default=0) * 0.085
    group_in = max(0.9 * len(st.methods), label_in + 0.2) if grouped else 0.9 * len(st.methods)
    fig_in = min(MAX_WIDTH, max(8.0, 2 * (1.0 + group_in * (len(groups) if grouped else 1))))
    fig, axes = _figure(1, 2, fig_in, 4.4)
    # where the widest figure still leaves a group less room than its label needs, the labels lean instead
    lean = grouped and (fig_in / 2 - 1.0) / len(groups) < label_in + 0.1
    width = 0.8 / len(st.methods)
    for ax, (q, label) in zip(axes, (("time", f"time until {target} (s)"), ("steps", f"steps until {target}"))):
        top = 0.0
        for gi, setting in enumerate(groups):
            for mi, method in enumerate(st.methods):
                d = reach[(reach["method"] == method) & ((reach["setting"] == setting) if grouped else True)]
                if d.empty:
                    continue
                x = gi + (mi - (len(st.methods) - 1) / 2) * width if grouped else mi
                top = max(top, _bar(ax, x, width if grouped else 0.7, d[f"{q}_lo"].to_numpy(float),
                                    d[f"{q}_hi"].to_numpy(float), st.colour[method]))
        ticks = [st.setting_names[s] for s in groups] if grouped else st.methods
        ax.set_xticks(range(len(ticks)), [_wrap(t) for t in ticks])
        if lean or (not grouped and max(map(len, ticks)) > 8):  # long names lean rather than overlap
            ax.tick_params(axis="x", labelrotation=25)
            for tick in ax.get_xticklabels():
                tick.set_horizontalalignment("right")
        ax.set_xlabel(st.setting_title if grouped else "")
        ax.set_ylabel(label)
        ax.set_ylim(0, top * 1.15 or 1)
        ax.grid(axis="x", visible=False)
    if grouped:
        st.legend(fig, lines=False)
    handles = [Patch(facecolor="0.6", alpha=0.45, hatch="//", edgecolor="0.4", label="> never reached (at budget)")]
    if (np.isinf(reach[["time_hi", "steps_hi"]].to_numpy(float))).any():
        axes[1].legend(handles=handles, loc="upper right", fontsize=8, frameon=False)
    _title(fig, f"Convergence time and steps until {target}", context)
    return fig


def _split_by_other_keys(df: pd.DataFrame, x: str) -> pd.DataFrame:
    """``df`` with ``method`` renamed "method (k=v, ...)" where a method's points differ in keys other than x."""
    if df.empty or "point" not in df:
        return df
    # "k=v,k2=v2": split only at a comma that starts the next key, so a value may hold commas ("[1, 2]")
    rest = df["point"].astype(str).map(lambda p: ", ".join(kv for kv in re.split(r",(?=[A-Za-z_][\w.]*=)", p)
                                                           if kv and not kv.startswith(f"{x}=")))
    several = rest.groupby(df["method"]).transform("nunique") > 1
    out = df.copy()
    out.loc[several, "method"] = df["method"][several] + " (" + rest[several] + ")"
    return out


def _label_levels(ax: Axes, levels: list[tuple[float, str]], values: pd.Series, st: Styles) -> None:
    """Name each reference level "<method> (not swept)" at the panel's left edge; levels closer than 3% of the
    panel's range of values share one label ("a, b (not swept)"), so that equal levels do not print over each
    other."""
    finite = pd.to_numeric(values, errors="coerce").dropna()
    span = float(finite.max() - finite.min()) if len(finite) else 0.0
    groups: list[list[tuple[float, str]]] = []
    for ym, method in sorted(levels):
        if groups and abs(ym - groups[-1][0][0]) <= 0.03 * span:
            groups[-1].append((ym, method))
        else:
            groups.append([(ym, method)])
    for group in groups:
        names = [m for _, m in group]
        ax.annotate(f"{', '.join(names)} (not swept)", (0.01, group[0][0]), xycoords=("axes fraction", "data"),
                    xytext=(0, 3), textcoords="offset points", fontsize=8,
                    color=st.colour[names[0]] if len(names) == 1 else "0.25")


def against(df: pd.DataFrame, x: str, ys: list[str], labels: dict[str, str], context: str = "") -> Figure:
    """One panel per metric in ``ys`` against ``x`` (a swept setting or a measured quantity): per method and
    sweep point the mean over seeds with 95% bootstrap error bars (in x too when x is measured), one line per
    method. ``df``: method, point, seed, x, each y and ``<y>_censored`` where a y can be censored. Runs of one
    method that differ in more than x (``point`` sets other keys too: SNAP with two weight matrices) are lines of
    their own, named by those keys."""
    df = _split_by_other_keys(df, x)
    st = Styles.of(df)
    ncols = min(len(ys), 3)
    nrows = math.ceil(len(ys) / ncols)
    fig, axes = _figure(nrows, ncols, max(6.0, 4.6 * ncols), 3.6 * nrows + 1.0)
    # a method run without a sweep beside swept ones (a centralized reference) is a level, not a point at its x
    swept = df["point"].astype(str) != ""
    reference = {m for m in st.methods if swept.any() and not swept[df["method"] == m].any()}
    placed = df[~df["method"].isin(reference)]
    numeric = pd.to_numeric(placed[x], errors="coerce").notna().all()
    xs_all = pd.to_numeric(placed[x], errors="coerce") if numeric else None
    values = np.unique(xs_all.to_numpy(float)) if numeric else np.arange(len(_order(placed, "point")), dtype=float)
    logx = bool(numeric and values.min() > 0 and values.max() / values.min() >= 8)
    # at a swept setting's values, methods side by side (dodged by up to a quarter of the gap between values),
    # so that methods with equal results do not hide each other; a measured x stays where it was measured
    drawn = [m for m in st.methods if m not in reference]
    at_values = not numeric or (len(values) <= 10 and any(f"{x}=" in str(p) for p in placed["point"]))
    gaps = np.diff(np.log2(values) if logx else values)
    gap = float(gaps.min()) if len(gaps) else 1.0
    dodge = {m: ((i / (len(drawn) - 1) - 0.5) * 0.25 * gap if at_values and len(drawn) > 1 else 0.0)
             for i, m in enumerate(drawn)}

    def shifted(v: float, method: str) -> float:
        return v * 2 ** dodge[method] if logx else v + dodge[method]

    for ax, y in zip(axes, ys):
        levels: list[tuple[float, str]] = []
        for method in st.methods:
            d = df[(df["method"] == method) & df[y].notna()]
            if method in reference:
                if len(d):
                    ym, yl, yh = bootstrap_ci(d[y].to_numpy(float))
                    ax.axhline(ym, color=st.colour[method], ls="--", lw=1.2)
                    if yh > yl:
                        ax.axhspan(yl, yh, color=st.colour[method], alpha=0.12, lw=0)
                    levels.append((ym, method))
                continue
            pts = []
            for k, (point, g) in enumerate(d.groupby("point", sort=False)):
                xv = pd.to_numeric(g[x]).to_numpy(float) if numeric else np.full(len(g), k, dtype=float)
                yv = g[y].to_numpy(float)
                censored = bool(g.get(f"{y}_censored", pd.Series(False, index=g.index)).any())
                xm, xl, xh = bootstrap_ci(xv)
                if xh == xl:
                    xm = xl = xh = shifted(xm, method)
                ym, yl, yh = bootstrap_ci(yv)
                pts.append((xm, ym))
                ax.errorbar(xm, ym, yerr=None if censored else _spans(ym, yl, yh),
                            xerr=_spans(xm, xl, xh) if xh > xl else None, color=st.colour[method],
                            marker=st.marker[method], mfc="white" if censored else st.colour[method], capsize=3,
                            lw=0, elinewidth=1.1, ms=7)
                if censored:
                    ax.annotate(">", (xm, ym), xytext=(0, 5), textcoords="offset points", ha="center",
                                va="bottom", fontsize=11, fontweight="bold", color=st.colour[method])
            if pts:
                px, py = zip(*sorted(pts))
                ax.plot(px, py, color=st.colour[method], lw=1.3, alpha=0.8)
        _label_levels(ax, levels, df[y], st)
        if logx:
            ax.set_xscale("log", base=2)
        if numeric:
            if at_values:  # a swept setting: a tick per value
                ax.set_xticks(values)
                ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if not numeric:
            points = _order(df, "point")
            ax.set_xticks(range(len(points)), [p.split("=", 1)[-1] for p in points])
        ax.set_xlabel(labels.get(x, x))
        ax.set_ylabel(labels.get(y, y))
        ax.set_title(textwrap.fill(f"{labels.get(y, y)} against {labels.get(x, x)}", 48))
    for ax in axes[len(ys):]:
        ax.set_visible(False)
    st.legend(fig, lines=False)
    _title(fig, f"Against {labels.get(x, x)}: mean over seeds with 95% bootstrap intervals", context)
    return fig


def time_breakdown(nodes: pd.DataFrame, context: str = "") -> Figure:
    """Stacked bars per worker: shares of computation, communication and waiting; one panel per run."""
    runs = _order(nodes, "run")
    ncols = min(len(runs), 3)
    nrows = math.ceil(len(runs) / ncols)
    most = int(nodes.groupby("run")["worker"].nunique().max())
    panel = min(MAX_WIDTH / ncols, max(3.6, 0.3 * most))
    fig, axes = _figure(nrows, ncols, panel * ncols, 3.2 * nrows + 1.3)
    for ax, run in zip(axes, runs):
        d = nodes[nodes["run"] == run]
        x = np.arange(len(d))
        bottom = np.zeros(len(d))
        for part, colour in PARTS.items():
            ax.bar(x, d[part].fillna(0), bottom=bottom, color=colour, label=part, width=0.8)
            bottom += d[part].fillna(0).to_numpy()
        # every worker's label while they fit; beyond MAX_TICK_LABELS, every k-th, without the factor
        step = max(1, math.ceil(len(d) / MAX_TICK_LABELS))
        labels = d["worker"] if step == 1 else d["index"].astype(int).astype(str)
        ax.set_xticks(x[::step], list(labels)[::step], fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_title(textwrap.fill(run, 42), fontsize=9)
        ax.set_xlabel("worker (step-time factor)" if step == 1 else "worker")
        ax.set_ylabel("share of its time (%)")
        ax.grid(axis="x", visible=False)
    for ax in axes[len(runs):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, frameon=False)
    _title(fig, "Where each worker's time goes", context)
    return fig


def throughput(summary: pd.DataFrame, context: str = "") -> Figure:
    """Bars per run: training throughput (samples/s) and traffic (MB/s); seeds give 95% bootstrap error bars."""
    runs = _order(summary, "run")
    fig, axes = _figure(1, 2, 11, 1.6 + 0.42 * len(runs))
    colours = dict(zip(runs, sns.color_palette("tab10" if len(runs) <= 10 else "husl", len(runs))))
    for ax, (value, scale, label) in zip(axes, (("samples_per_s", 1.0, "training throughput (samples/s)"),
                                                ("bytes_per_s", 1e6, "traffic, all nodes (MB/s)"))):
        for i, run in enumerate(runs):
            v = summary.loc[summary["run"] == run, value].to_numpy(float) / scale
            mean, lo, hi = bootstrap_ci(v)
            ax.barh(i, mean, color=colours[run], height=0.7)
            if hi > lo:
                ax.errorbar(mean, i, xerr=_spans(mean, lo, hi), color="0.15", capsize=3, lw=1.1)
        ax.set_yticks(range(len(runs)), [textwrap.fill(r, 34) for r in runs] if ax is axes[0] else [""] * len(runs),
                      fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(label)
    _title(fig, "Training throughput and network traffic per run", context)
    return fig


# ------------------------------------------------------------------------------------------ series figures


def staleness(df: pd.DataFrame, context: str = "") -> Figure:
    """Histogram of the staleness of applied updates, one colour per run."""
    runs = _order(df, "run")
    fig, axes = _figure(1, 1, 8, 4.8)
    sns.histplot(data=df, x="staleness", hue="run", hue_order=runs, discrete=True,
                 palette=dict(zip(runs, sns.color_palette("tab10" if len(runs) <= 10 else "husl", len(runs)))),
                 stat="probability", common_norm=False, multiple="dodge", shrink=0.85, ax=axes[0])
    axes[0].set_xlabel("staleness (updates applied between a worker's pull and its push)")
    axes[0].set_ylabel("fraction of updates")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    legend = axes[0].get_legend()
    if legend is not None:
        handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
        legend.remove()
        fig.legend(handles, labels, title="run", loc="outside lower center", frameon=False,
                   ncols=max(1, min(len(labels), int(fig.get_figwidth() * 11) // (max(map(len, labels)) + 6))))
    _title(fig, "Staleness of the updates applied by the parameter server", context)
    return fig


def staleness_hist(df: pd.DataFrame, context: str = "") -> Figure:
    """Histograms of staleness in power-of-two bins (rows ``updates, kind, lo, hi, count``, cumulative: the last
    write of each run and seed counts), summed over seeds, one line per run: the global staleness of each update
    and, where logged, the per-parameter staleness of each received entry (adacomp.txt Eq. 3)."""
    runs = _order(df, "run")
    colours = dict(zip(runs, sns.color_palette("tab10" if len(runs) <= 10 else "husl", len(runs))))
    last = df[df["updates"] == df.groupby(["run", "seed"])["updates"].transform("max")]
    kinds = [k for k in ("global", "parameter") if k in set(last["kind"])]
    fig, axes = _figure(1, len(kinds), 5.5 * len(kinds), 4.6)
    titles = {"global": ("global staleness of each update", "fraction of updates"),
              "parameter": ("per-parameter staleness sigma_k of each received entry", "fraction of entries")}
    for ax, kind in zip(axes, kinds):
        d = last[last["kind"] == kind].groupby(["run", "lo", "hi"], sort=False, as_index=False)["count"].sum()
        bins = d[["lo", "hi"]].drop_duplicates().sort_values("lo")
        labels = [str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in zip(bins["lo"], bins["hi"])]
        for i, run in enumerate(runs):
            r = d[d["run"] == run].set_index("lo")["count"].reindex(bins["lo"], fill_value=0)
            if r.sum() > 0:  # hollow markers of their own keep runs with equal histograms visible
                ax.plot(range(len(r)), r.to_numpy() / r.sum(), color=colours[run], marker=MARKERS[i % len(MARKERS)],
                        mfc="none", ms=7 - 4 * i / max(1, len(runs) - 1), lw=1.2, label=run)
        ax.set_xticks(range(len(labels)), labels, rotation=45 if len(labels) > 8 else 0, fontsize=8)
        ax.set_xlabel("staleness (updates since the pull; power-of-two bins)")
        ax.set_title(titles[kind][0])
        ax.set_ylabel(titles[kind][1])
    handles, labels = axes[0].get_legend_handles_labels()
    for ax in axes[1:]:  # runs that log only the global staleness are in the first panel
        extra = [(h, lab) for h, lab in zip(*ax.get_legend_handles_labels()) if lab not in labels]
        handles += [h for h, _ in extra]
        labels += [lab for _, lab in extra]
    fig.legend(handles, labels, title="run", loc="outside lower center", frameon=False,
               ncols=max(1, min(len(labels), int(fig.get_figwidth() * 11) // (max(map(len, labels)) + 6))))
    _title(fig, "Staleness distributions at the parameter server", context)
    return fig


def _regular(times: np.ndarray) -> bool:
    """Logged at a steady cadence (a setting in force between its values) rather than at events (a trial)."""
    gaps = np.diff(np.sort(times))
    return times.size >= 4 and gaps.mean() > 0 and gaps.std() < 0.5 * gaps.mean()


def decisions(df: pd.DataFrame, context: str = "") -> Figure:
    """One panel per decided quantity (``name``) against time, a colour per run. A quantity logged at a steady
    cadence is a setting in force until the next value (a step line per node and seed); one logged at events,
    e.g. once per trial, is drawn as points."""
    st = Styles.of(df)
    names = list(dict.fromkeys(df["name"]))
    ncols = min(len(names), 2)
    nrows = math.ceil(len(names) / ncols)
    fig, axes = _figure(nrows, ncols, max(7.0, 5.5 * ncols), 2.8 * nrows + 1.4)
    for ax, name in zip(axes, names):
        d = df[df["name"] == name]
        units = list(d.groupby(["run", "seed", "rank"], sort=False))
        steps = all(_regular(g["time_s"].to_numpy(float)) for _, g in units)
        for (_, _, _), g in units:
            method, g = g["method"].iloc[0], g.sort_values("time_s")
            kw = dict(color=st.colour[method], marker=st.marker[method])
            if steps:
                ls = st.dash[g["setting"].iloc[0]] if "setting" in g else "-"
                ax.plot(g["time_s"], g["value"], drawstyle="steps-post", lw=1.2, ms=3, markevery=[0], ls=ls, **kw)
            else:
                ax.plot(g["time_s"], g["value"], lw=0, ms=6, alpha=0.8, **kw)
        ax.set_title(name + ("" if steps else " (one point per event)"))
        ax.set_xlabel("training time (s)")
        ax.set_ylabel(name)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    st.legend(fig)
    _title(fig, "Quantities the algorithms decided as they ran (one line or point set per node and seed)",
           context)
    return fig


def commits(df: pd.DataFrame, context: str = "") -> Figure:
    """Commit counts at the scheduler's checkpoints: every worker's count against C_target, and their spread.

    Rows of one checkpoint may carry different timestamps (procs stamps each worker's row as it is written), so
    rows are grouped by the ``checkpoint`` column, drawn at the checkpoint's first timestamp. Theorem 2 of
    adsp.txt: with commit rates dC_i = C_target - c_i, all workers' counts stay roughly equal."""
    st = Styles.of(df)
    fig, axes = _figure(1, 2, 11, 4.6)
    at = df.groupby(["run", "seed", "checkpoint"])["time_s"].transform("min")
    df = df.assign(time_s=at)
    for run, d in df.groupby("run", sort=False):
        colour = st.colour[d["method"].iloc[0]]
        for (_, _), w in d.groupby(["seed", "worker"]):
            axes[0].plot(w["time_s"], w["commits"], color=colour, lw=0.8, alpha=0.45, drawstyle="steps-post")
        target = d.groupby("checkpoint", as_index=False).agg(time_s=("time_s", "min"), target=("target", "max"))
        axes[0].plot(target["time_s"], target["target"], color=colour, lw=1.6, ls="--", drawstyle="steps-post")
    axes[0].set_xlabel("training time (s)")
    axes[0].set_ylabel("commits so far")
    axes[0].set_title("each worker's commits (thin) and C_target (dashed)")
    spread = (df.groupby(["run", "method", "seed", "checkpoint"], sort=False)
              .agg(time_s=("time_s", "min"), spread=("commits", lambda c: c.max() - c.min())).reset_index())
    for run, g in spread.groupby("run", sort=False):
        for _, s in g.groupby("seed"):
            axes[1].plot(s["time_s"], s["spread"], color=st.colour[g["method"].iloc[0]],
                         marker=st.marker[g["method"].iloc[0]], ms=4, lw=1.2, drawstyle="steps-post")
    axes[1].set_xlabel("training time (s)")
    axes[1].set_ylabel("max - min commits over workers")
    axes[1].set_title("spread of the commit counts at each checkpoint")
    axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1].set_ylim(-0.15, max(1.0, float(spread["spread"].max())) + 0.5)  # a spread of 0 stays visible
    st.legend(fig, lines=False)
    _title(fig, "Commit counts of the workers at each checkpoint (adsp.txt Theorem 2)", context)
    return fig


def trials(df: pd.DataFrame, context: str = "") -> Figure:
    """The online search of adsp.txt Alg. 1: each trial's reward against the commit rate it tried, a line per
    search (epoch) and run; the search stops at the first rate whose reward is lower."""
    st = Styles.of(df)
    fig, axes = _figure(1, 1, 8, 4.8)
    data = df.drop_duplicates(["run", "seed", "epoch", "rate"]).sort_values(["run", "seed", "epoch", "rate"])
    for (_, _, _), g in data.groupby(["run", "seed", "epoch"], sort=False):
        method = g["method"].iloc[0]
        axes[0].plot(g["rate"], g["reward"], color=st.colour[method], marker=st.marker[method], lw=1.2, alpha=0.8)
    axes[0].set_xlabel("commit rate tried (commits per check period)")
    axes[0].set_ylabel("reward (1 / predicted time to the target loss)")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    st.legend(fig, lines=False)
    _title(fig, "Rewards of the commit-rate search, a line per epoch (adsp.txt Alg. 1)", context)
    return fig


def rounds(df: pd.DataFrame, context: str = "") -> Figure:
    """Synchronous rounds in which devices train locally (ESync): each device's local iterations per round, and
    the longest it waited at an aggregation against its capability (the duration of one of its iterations;
    esync.txt Alg. 2 keeps the wait below the capability plus the State Server's epsilon)."""
    st = Styles.of(df)
    fig, axes = _figure(1, 2, 11, 4.6)
    df = df.assign(device=df["rank"] - df.groupby("run")["rank"].transform("min"))
    per = (df.groupby(["run", "method", "setting", "seed", "device"], sort=False)
           .agg(iterations=("iterations", "mean"), wait=("wait_s", "max"), capability=("capability", "median"))
           .reset_index())
    runs = list(dict.fromkeys(per["run"]))
    width = 0.8 / len(runs)
    for k, run in enumerate(runs):
        d = per[per["run"] == run].groupby("device", as_index=False).agg(
            method=("method", "first"), iterations=("iterations", "mean"), lo=("iterations", "min"),
            hi=("iterations", "max"))
        colour = st.colour[d["method"].iloc[0]]
        x = d["device"] + (k - (len(runs) - 1) / 2) * width
        axes[0].bar(x, d["iterations"], width, color=colour, alpha=0.8, label=run, hatch=HATCHES[k % len(HATCHES)],
                    edgecolor="white", yerr=_spans(d["iterations"], d["lo"], d["hi"]), capsize=2)
        m = per[per["run"] == run]
        axes[1].plot(m["capability"], m["wait"], lw=0, marker=st.marker[d["method"].iloc[0]], color=colour, ms=6)
    axes[0].set_xlabel("device (in rank order)")
    axes[0].set_ylabel("local iterations per round (mean over rounds)")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    top = float(np.nanmax(per[["capability", "wait"]].to_numpy())) if len(per) else 1.0
    axes[1].plot([0, top], [0, top], color="0.4", ls="--", lw=1)
    axes[1].set_xlabel("capability: seconds per local iteration")
    axes[1].set_ylabel("longest wait at an aggregation (s)")
    axes[1].set_title("one point per device and seed; dashed: wait = capability")
    axes[0].legend(title="run", frameon=False, fontsize=8)
    _title(fig, "Local iterations per round and waiting at aggregation, per device", context)
    return fig


LOAD_COLUMNS = ("load_cpu", "load_net", "load_disk")


def epochs(df: pd.DataFrame, context: str = "") -> Figure:
    """Epoch-based gossip training (EdgeGossip, GoSGD): each platform's data ratio r_i per epoch, a line per
    platform (mean over seeds), the predicted against the measured training time of each epoch (points on the
    dashed line are exact predictions), and, where the runs recorded the co-running load each epoch trained
    under, the prediction error against that load (edgegossip.txt Fig. 9: error against the co-running
    workload's size). The load is the busiest resource's (CPU in cores, network and disk as fractions of
    capacity), and the epoch is a CPU epoch when CPU is that resource, an I/O epoch otherwise (idle: none above
    0.05); the lines are the mean error per 0.1 of load."""
    st = Styles.of(df)
    predicted = df[df["predicted_s"] > 0] if "predicted_s" in df else df.iloc[:0]
    loaded = predicted.dropna(subset=list(LOAD_COLUMNS)) if set(LOAD_COLUMNS) <= set(df) else predicted.iloc[:0]
    fig, axes = _figure(1, 3 if len(loaded) else 2, 17 if len(loaded) else 11, 4.6)
    df = df.assign(platform=df["rank"] - df.groupby("run")["rank"].transform("min"))
    for run, d in df.groupby("run", sort=False):
        method = d["method"].iloc[0]
        dash = st.dash[d["setting"].iloc[0]] if "setting" in d else "-"
        for _, g in d.groupby("platform"):
            g = g.groupby("epoch", as_index=False)["ratio"].mean()
            axes[0].plot(g["epoch"], g["ratio"], color=st.colour[method], ls=dash, lw=1.0, alpha=0.7,
                         drawstyle="steps-post")
        p = predicted[predicted["run"] == run]
        axes[1].plot(p["measured_s"], p["predicted_s"], lw=0, marker=st.marker[method], ms=3, alpha=0.5,
                     color=st.colour[method])
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("data ratio r_i (share of its data a platform trains on)")
    axes[0].set_ylim(-0.03, 1.05)
    axes[0].set_title("a line per platform")
    top = float(predicted[["measured_s", "predicted_s"]].max().max()) if len(predicted) else 1.0
    axes[1].plot([0, top], [0, top], color="0.4", ls="--", lw=1)
    axes[1].set_xlabel("measured training time of the epoch (s)")
    axes[1].set_ylabel("predicted (s)")
    axes[1].set_title("one point per platform and epoch; dashed: exact")
    if len(loaded):
        _error_against_load(axes[2], loaded, st)
    st.legend(fig)
    title = "Data ratio per platform and epoch; predicted against measured epoch times"
    _title(fig, title + ("; prediction error against co-running load" if len(loaded) else ""), context)
    return fig


def _error_against_load(ax, d: pd.DataFrame, st: "Styles") -> None:
    load = d[list(LOAD_COLUMNS)].to_numpy(dtype=float)
    busiest = load.max(axis=1)
    kind = np.where(busiest <= 0.05, "idle", np.where(load.argmax(axis=1) == 0, "CPU", "I/O"))
    error = 100 * (d["predicted_s"] - d["measured_s"]).abs() / d["measured_s"]
    d = d.assign(load=busiest, kind=kind, error=error.to_numpy(), bin=np.round(busiest, 1))
    lines = {"CPU": "-", "I/O": "--", "idle": ":"}
    for (method, k), g in d.groupby(["method", "kind"], sort=False):
        ax.plot(g["load"], g["error"], lw=0, marker=st.marker[method], ms=3, alpha=0.25, color=st.colour[method])
        m = g.groupby("bin", as_index=False)["error"].mean()
        ax.plot(m["bin"], m["error"], color=st.colour[method], ls=lines[k], lw=1.6, marker="o", ms=4, label=k)
    ax.set_xlabel("co-running load of the epoch (the busiest resource)")
    ax.set_ylabel("prediction error of the epoch's time (%)")
    ax.set_ylim(0, max(5.0, float(np.nanpercentile(d["error"], 98)) * 1.1))
    ax.legend(title="busiest resource: mean per 0.1", loc="upper right", framealpha=0.85, fontsize=8)
    ax.set_title("one point per platform and epoch")


@dataclass(frozen=True)
class SeriesFigure:
    draw: Callable[[pd.DataFrame, str], Figure]
    columns: tuple[str, ...]  # the columns the series must have
    caption: str


SERIES_FIGURES = {
    "staleness": SeriesFigure(staleness, ("staleness",),
                              "Staleness of the updates the parameter server applied (fraction of updates)"),
    "staleness_hist": SeriesFigure(staleness_hist, ("updates", "kind", "lo", "hi", "count"),
                                   "Staleness histograms at the end of each run, summed over seeds: the global "
                                   "staleness of each update and the per-parameter staleness sigma_k of each "
                                   "received entry (power-of-two bins)"),
    "decisions": SeriesFigure(decisions, ("time_s", "rank", "name", "value"),
                              "Quantities the algorithms decided as they ran: steps for settings in force, points "
                              "for values logged once per event"),
    "commits": SeriesFigure(commits, ("time_s", "checkpoint", "worker", "commits", "target"),
                            "Each worker's commit count at every checkpoint against C_target, and their spread"),
    "trials": SeriesFigure(trials, ("epoch", "rate", "reward"),
                           "Each trial's reward against the commit rate it tried, a line per search"),
    "rounds": SeriesFigure(rounds, ("rank", "iterations", "wait_s", "capability"),
                           "Each device's local iterations per round, and its longest wait at an aggregation "
                           "against its capability"),
    "epochs": SeriesFigure(epochs, ("epoch", "rank", "ratio", "measured_s"),
                           "Each platform's data ratio per epoch, the predicted against the measured training "
                           "time of each epoch, and the prediction error against the co-running load the epoch "
                           "trained under"),
}
