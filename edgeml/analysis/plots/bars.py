"""Bars: time and steps until a target per method (hatched at the budget where a run never got there), each
worker's time split into computation, communication and waiting, throughput and traffic per run, and best and
final accuracy per run."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from edgeml.analysis.plots.style import (MAX_TICK_LABELS, MAX_WIDTH, PARTS, Styles, label_spans, new_figure,
                                         order_of, panel_title, wrap_label)
from edgeml.analysis.stats import bootstrap_ci


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
        ax.errorbar(x, mean, label_spans(mean, ci_lo, ci_hi), color="0.15", capsize=3, lw=1.1)
    return max(mean, ci_hi if not censored else mean)


def bars(reach: pd.DataFrame, target: str, context: str = "") -> Figure:
    """Convergence time and steps per method (the papers' bar charts, e.g. ADSP Fig. 4(b), 4(c), 5(e)).

    ``reach``: one row per run and seed with method, setting, time_lo, time_hi, steps_lo, steps_hi (hi
    infinite where the run never reached ``target``). With settings, bars are grouped by setting."""
    st = Styles.of(reach)
    grouped = len(st.settings) > 1
    # a method run in one setting that no method run in several has is a group of its own, named by its method(s)
    alone = [s for s in order_of(reach, "setting") if s not in st.settings]
    groups = [*st.settings, *alone] if grouped else [""]
    names = {s: s if s in st.settings else "/".join(order_of(reach[reach["setting"] == s], "method")) for s in groups}
    # a group of bars is as wide as its methods need, and at least as wide as its tick label's longest line
    lines = [line for s in groups for line in wrap_label(names[s]).split("\n")]
    label_in = max(map(len, lines), default=0) * 0.085
    group_in = max(0.9 * len(st.methods), label_in + 0.2) if grouped else 0.9 * len(st.methods)
    fig_in = min(MAX_WIDTH, max(8.0, 2 * (1.0 + group_in * (len(groups) if grouped else 1))))
    fig, axes = new_figure(1, 2, fig_in, 4.4)
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
                if grouped and setting in alone:  # its own group: its bars centred
                    here = order_of(reach[reach["setting"] == setting], "method")
                    x = gi + (here.index(method) - (len(here) - 1) / 2) * width
                else:
                    x = gi + (mi - (len(st.methods) - 1) / 2) * width if grouped else mi
                top = max(top, _bar(ax, x, width if grouped else 0.7, d[f"{q}_lo"].to_numpy(float),
                                    d[f"{q}_hi"].to_numpy(float), st.colour[method]))
        ticks = [names[s] for s in groups] if grouped else st.methods
        ax.set_xticks(range(len(ticks)), [wrap_label(t) for t in ticks])
        if lean or (not grouped and max(map(len, ticks)) > 8):  # long names lean rather than overlap
            ax.tick_params(axis="x", labelrotation=25)
            for tick in ax.get_xticklabels():
                tick.set_horizontalalignment("right")
        ax.set_ylabel(label)
        ax.set_ylim(0, top * 1.15 or 1)
        ax.grid(axis="x", visible=False)
    if grouped:
        st.legend(fig, lines=False)
    handles = [Patch(facecolor="0.6", alpha=0.45, hatch="//", edgecolor="0.4", label="> never reached (at budget)")]
    if (np.isinf(reach[["time_hi", "steps_hi"]].to_numpy(float))).any():
        axes[1].legend(handles=handles, loc="upper right", fontsize=8, frameon=False)
    panel_title(fig, f"Convergence time and steps until {target}", context)
    return fig


def time_breakdown(nodes: pd.DataFrame, context: str = "") -> Figure:
    """Stacked bars per worker: shares of computation, communication and waiting; one panel per run."""
    runs = order_of(nodes, "run")
    ncols = min(len(runs), 3)
    nrows = math.ceil(len(runs) / ncols)
    most = int(nodes.groupby("run")["worker"].nunique().max())
    panel = min(MAX_WIDTH / ncols, max(3.6, 0.3 * most))
    fig, axes = new_figure(nrows, ncols, panel * ncols, 3.2 * nrows + 1.3)
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
    panel_title(fig, "Where each worker's time goes", context)
    return fig


def throughput(summary: pd.DataFrame, context: str = "") -> Figure:
    """Bars per run: training throughput (samples/s) and traffic (MB/s); seeds give 95% bootstrap error bars."""
    runs = order_of(summary, "run")
    fig, axes = new_figure(1, 2, 11, 1.6 + 0.42 * len(runs))
    colours = dict(zip(runs, sns.color_palette("tab10" if len(runs) <= 10 else "husl", len(runs))))
    for ax, (value, scale, label) in zip(axes, (("samples_per_s", 1.0, "training throughput (samples/s)"),
                                                ("bytes_per_s", 1e6, "traffic, all nodes (MB/s)"))):
        for i, run in enumerate(runs):
            v = summary.loc[summary["run"] == run, value].to_numpy(float) / scale
            mean, lo, hi = bootstrap_ci(v)
            ax.barh(i, mean, color=colours[run], height=0.7)
            if hi > lo:
                ax.errorbar(mean, i, xerr=label_spans(mean, lo, hi), color="0.15", capsize=3, lw=1.1)
        ax.set_yticks(range(len(runs)), [textwrap.fill(r, 34) for r in runs] if ax is axes[0] else [""] * len(runs),
                      fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(label)
    panel_title(fig, "Training throughput and network traffic per run", context)
    return fig


def accuracy(summary: pd.DataFrame, test_samples: int | None = None, context: str = "") -> Figure:
    """Best and final test accuracy per run (AdaComp Table II: one row per setting): each seed a small dot,
    the mean a large one with its 95% bootstrap interval, on an axis zoomed to the values, so the interval, not
    the axis, says how large a difference is; ``test_samples``, when every run evaluated on that many, is drawn
    as the resolution (one test sample's share of the accuracy)."""
    runs = order_of(summary, "run")
    fig, axes = new_figure(1, 2, 11, 1.8 + 0.42 * len(runs))
    colours = dict(zip(runs, sns.color_palette("tab10" if len(runs) <= 10 else "husl", len(runs))))
    for ax, (value, label) in zip(axes, (("best_accuracy", "best test accuracy"),
                                         ("final_accuracy", "final test accuracy"))):
        for i, run in enumerate(runs):
            v = summary.loc[summary["run"] == run, value].to_numpy(float)
            v = v[np.isfinite(v)]
            if not v.size:
                continue
            mean, lo, hi = bootstrap_ci(v)
            ax.plot(v, np.full(v.size, i) + 0.18, lw=0, marker=".", ms=5, color=colours[run], alpha=0.7)
            ax.errorbar(mean, i, xerr=label_spans(mean, lo, hi) if hi > lo else None, color=colours[run],
                        marker="o", ms=7, capsize=3, lw=1.4)
        ax.set_yticks(range(len(runs)), [textwrap.fill(r, 34) for r in runs] if ax is axes[0] else [""] * len(runs),
                      fontsize=8)
        ax.set_ylim(len(runs) - 0.5, -0.5)
        resolution = f" (one test sample: {100 / test_samples:.2g} pt)" if test_samples else ""
        ax.set_xlabel(label + resolution)
    panel_title(fig, "Best and final test accuracy per run: seeds (small dots), mean with 95% interval", context)
    return fig
