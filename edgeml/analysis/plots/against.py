"""Metrics against a swept setting or a measured quantity: per method and sweep point the mean over seeds
with 95% bootstrap error bars, a line per method, methods run without the sweep as reference levels."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, NullLocator

from edgeml.analysis.names import read_value, point_terms, setting_text
from edgeml.analysis.plots.style import Styles, new_figure, order_of, label_spans, panel_title
from edgeml.analysis.stats import bootstrap_ci


def _split_by_other_keys(df: pd.DataFrame, x: str) -> pd.DataFrame:
    """``df`` with ``method`` renamed "method (variant)" where a method's points differ in more than x: by the
    ``variant`` column (the legend's name for the other keys, ``edgeml.analysis.figures.against_data``), else by
    the keys of ``point`` ("k=v,k2=v2") other than x."""
    if df.empty or "point" not in df:
        return df
    if "variant" in df:
        rest = df["variant"].fillna("").astype(str)
    else:  # each other key as a legend names a setting
        rest = df["point"].astype(str).map(lambda p: ", ".join(setting_text(k, read_value(v)) for k, v in point_terms(p)
                                                               if k != x))
    several = rest.groupby(df["method"]).transform("nunique") > 1
    out = df.copy()
    out.loc[several, "method"] = df["method"][several] + " (" + rest[several] + ")"
    return out


def _label_levels(ax: Axes, levels: list[tuple[float, str]], values: pd.Series, st: Styles) -> None:
    """Name each reference level "<method> (not swept)" at the panel's left edge; levels closer than 3% of the
    panel's range of values share one label ("a, b (not swept)"), so that equal levels do not print over each
    other. A level's own name already ending in parentheses takes the words inside them ("ADSP (searched; not
    swept)")."""
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
        text = ", ".join(names)
        text = f"{text[:-1]}; not swept)" if len(names) == 1 and text.endswith(")") else f"{text} (not swept)"
        ax.annotate(text, (0.01, group[0][0]), xycoords=("axes fraction", "data"),
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
    fig, axes = new_figure(nrows, ncols, max(6.0, 4.6 * ncols), 3.6 * nrows + 1.0)
    # a method run without a sweep beside swept ones (a centralized reference) is a level, not a point at its x
    swept = df["point"].astype(str) != ""
    reference = {m for m in st.methods if swept.any() and not swept[df["method"] == m].any()}
    placed = df[~df["method"].isin(reference)]
    numeric = pd.to_numeric(placed[x], errors="coerce").notna().all()
    xs_all = pd.to_numeric(placed[x], errors="coerce") if numeric else None
    categories = order_of(placed, "point")  # a named setting's values (W: eq24, problem22...), in order of appearance
    values = np.unique(xs_all.to_numpy(float)) if numeric else np.arange(len(categories), dtype=float)
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
            for point, g in d.groupby("point", sort=False):
                # a named value sits at its own tick, whichever of the values this method was run at
                xv = pd.to_numeric(g[x]).to_numpy(float) if numeric else \
                    np.full(len(g), categories.index(point), dtype=float)
                yv = g[y].to_numpy(float)
                censored = bool(g.get(f"{y}_censored", pd.Series(False, index=g.index)).any())
                xm, xl, xh = bootstrap_ci(xv)
                if xh == xl:
                    xm = xl = xh = shifted(xm, method)
                ym, yl, yh = bootstrap_ci(yv)
                pts.append((xm, ym, float(xv[0]) if not numeric else 0.0))
                ax.errorbar(xm, ym, yerr=None if censored else label_spans(ym, yl, yh),
                            xerr=label_spans(xm, xl, xh) if xh > xl else None, color=st.colour[method],
                            marker=st.marker[method], mfc="white" if censored else st.colour[method], capsize=3,
                            lw=0, elinewidth=1.1, ms=7)
                if censored:
                    ax.annotate(">", (xm, ym), xytext=(0, 5), textcoords="offset points", ha="center",
                                va="bottom", fontsize=11, fontweight="bold", color=st.colour[method])
            # one line through the points; between named values only where they are neighbours (a line
            # across a value the method was not run at would pass through a point it does not have)
            pts.sort()
            pieces = [[pts[0]]] if pts else []
            for prev, cur in zip(pts, pts[1:]):
                if numeric or cur[2] - prev[2] == 1:
                    pieces[-1].append(cur)
                else:
                    pieces.append([cur])
            for piece in (p for p in pieces if len(p) > 1):
                ax.plot([p[0] for p in piece], [p[1] for p in piece], color=st.colour[method], lw=1.3,
                        alpha=0.8)
        _label_levels(ax, levels, df[y], st)
        if logx:
            ax.set_xscale("log", base=2)
        if numeric:
            if at_values:  # a swept setting: a tick per value
                ax.set_xticks(values)
                ax.xaxis.set_minor_locator(NullLocator())
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        if not numeric:  # each named by its value of x (a point may set other keys too)
            at = placed.drop_duplicates("point").set_index("point")[x] if x in placed else None
            ax.set_xticks(range(len(categories)),
                          [str(at[p]) if at is not None else p.split("=", 1)[-1] for p in categories])
        ax.set_xlabel(labels.get(x, x))
        ax.set_ylabel(labels.get(y, y))
        ax.set_title(textwrap.fill(f"{labels.get(y, y)} against {labels.get(x, x)}", 48))
    for ax in axes[len(ys):]:
        ax.set_visible(False)
    st.legend(fig, lines=False)
    panel_title(fig, f"Against {labels.get(x, x)}: mean over seeds with 95% bootstrap intervals", context)
    return fig
