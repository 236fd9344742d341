"""Figures of the series runs write (``series/<name>.csv``) and their registry, ``SERIES_FIGURES``: staleness,
decided quantities, commit counts, the commit-rate search, rounds, epochs and SNAP's selective exchange. An
algorithm that writes a new series adds its figure here and nowhere else."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from edgeml import rundir
from edgeml.analysis.plots.style import HATCHES, MARKERS, Styles, new_figure, order_of, label_spans, panel_title


def staleness(df: pd.DataFrame, context: str = "") -> Figure:
    """Histogram of the staleness of applied updates, one colour per run."""
    runs = order_of(df, "run")
    fig, axes = new_figure(1, 1, 8, 4.8)
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
        fig.legend(handles, labels, loc="outside lower center", frameon=False,
                   ncols=max(1, min(len(labels), int(fig.get_figwidth() * 11) // (max(map(len, labels)) + 6))))
    panel_title(fig, "Staleness of the updates applied by the parameter server", context)
    return fig


def staleness_hist(df: pd.DataFrame, context: str = "") -> Figure:
    """Histograms of staleness in power-of-two bins (rows ``updates, kind, lo, hi, count``, cumulative: the last
    write of each run and seed counts), summed over seeds, one line per run: the global staleness of each update
    and, where logged, the per-parameter staleness of each received entry (AdaComp Eq. 3)."""
    runs = order_of(df, "run")
    colours = dict(zip(runs, sns.color_palette("tab10" if len(runs) <= 10 else "husl", len(runs))))
    last = df[df["updates"] == df.groupby(["run", "seed"])["updates"].transform("max")]
    kinds = [k for k in ("global", "parameter") if k in set(last["kind"])]
    fig, axes = new_figure(1, len(kinds), 5.5 * len(kinds), 4.6)
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
    fig.legend(handles, labels, loc="outside lower center", frameon=False,
               ncols=max(1, min(len(labels), int(fig.get_figwidth() * 11) // (max(map(len, labels)) + 6))))
    panel_title(fig, "Staleness distributions at the parameter server", context)
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
    fig, axes = new_figure(nrows, ncols, max(7.0, 5.5 * ncols), 2.8 * nrows + 1.4)
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
    panel_title(fig, "Quantities the algorithms decided as they ran (one line or point set per node and seed)",
           context)
    return fig


def commits(df: pd.DataFrame, context: str = "") -> Figure:
    """Commit counts at the scheduler's checkpoints: every worker's count against C_target, and their spread.

    Rows of one checkpoint may carry different timestamps (procs stamps each worker's row as it is written), so
    rows are grouped by the ``checkpoint`` column, drawn at the checkpoint's first timestamp. Theorem 2 of
    ADSP: with commit rates dC_i = C_target - c_i, all workers' counts stay roughly equal."""
    st = Styles.of(df)
    fig, axes = new_figure(1, 2, 11, 4.6)
    at = df.groupby(["run", "seed", "checkpoint"])["time_s"].transform("min")
    df = df.assign(time_s=at)
    for _, d in df.groupby("run", sort=False):
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
    for _, g in spread.groupby("run", sort=False):
        for _, s in g.groupby("seed"):
            axes[1].plot(s["time_s"], s["spread"], color=st.colour[g["method"].iloc[0]],
                         marker=st.marker[g["method"].iloc[0]], ms=4, lw=1.2, drawstyle="steps-post")
    axes[1].set_xlabel("training time (s)")
    axes[1].set_ylabel("max - min commits over workers")
    axes[1].set_title("spread of the commit counts at each checkpoint")
    axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1].set_ylim(-0.15, max(1.0, float(spread["spread"].max())) + 0.5)  # a spread of 0 stays visible
    st.legend(fig, lines=False)
    panel_title(fig, "Commit counts of the workers at each checkpoint (ADSP Theorem 2)", context)
    return fig


def trials(df: pd.DataFrame, context: str = "") -> Figure:
    """The online search of ADSP Alg. 1: each trial's reward against the commit rate it tried, a line per
    search (epoch) and run; the search stops at the first rate whose reward is lower."""
    st = Styles.of(df)
    fig, axes = new_figure(1, 1, 8, 4.8)
    data = df.drop_duplicates(["run", "seed", "epoch", "rate"]).sort_values(["run", "seed", "epoch", "rate"])
    for (_, _, _), g in data.groupby(["run", "seed", "epoch"], sort=False):
        method = g["method"].iloc[0]
        axes[0].plot(g["rate"], g["reward"], color=st.colour[method], marker=st.marker[method], lw=1.2, alpha=0.8)
    axes[0].set_xlabel("commit rate tried (commits per check period)")
    axes[0].set_ylabel("reward (1 / predicted time to the target loss)")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    st.legend(fig, lines=False)
    panel_title(fig, "Rewards of the commit-rate search, a line per epoch (ADSP Alg. 1)", context)
    return fig


def rounds(df: pd.DataFrame, context: str = "") -> Figure:
    """Synchronous rounds in which devices train locally (ESync): each device's local iterations per round, and
    the longest it waited at an aggregation against its capability (the duration of one of its iterations;
    ESync Alg. 2 keeps the wait below the capability plus the State Server's epsilon)."""
    st = Styles.of(df)
    fig, axes = new_figure(1, 2, 11, 4.6)
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
                    edgecolor="white", yerr=label_spans(d["iterations"], d["lo"], d["hi"]), capsize=2)
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
    axes[0].legend(frameon=False, fontsize=8)
    panel_title(fig, "Local iterations per round and waiting at aggregation, per device", context)
    return fig


def exchange(df: pd.DataFrame, context: str = "") -> Figure:
    """SNAP's selective exchange (SNAP Sec. IV-C, Fig. 4(b)): the fraction of the values its frames could
    carry that the peers sent, per iteration (summed over peers, mean over seeds; SNO sends every value, SNAP-0
    every changed one), and the APE threshold in force (mean over peers and seeds; 0 for SNAP-0 and SNO, left
    out: the panel is drawn only where a run has one), the shares on a log axis where some fall below 0.1, else
    linear from 0 (SNAP Fig. 2(a)'s reading); each run's markers start at their own offset, so that equal lines stay
    told apart."""
    st = Styles.of(df)
    thresholds = bool((df["threshold"] > 0).any())
    fig, axes = new_figure(1, 2, 11, 4.6) if thresholds else new_figure(1, 1, 6.5, 4.6)
    per = (df.groupby(["run", "method", "seed", "iteration"], sort=False)
           .agg(sent=("sent", "sum"), values=("values", "sum"), threshold=("threshold", "mean")).reset_index())
    per = per.assign(fraction=per["sent"] / per["values"].where(per["values"] > 0))
    mean = per.groupby(["run", "method", "iteration"], sort=False)[["fraction", "threshold"]].mean().reset_index()
    floor = None
    shown = mean.loc[mean["fraction"] > 0, "fraction"]
    logarithmic = len(shown) > 0 and float(shown.min()) < 0.1  # shares near 0 (SNAP's late exchange) need decades
    runs = mean.groupby("run", sort=False)
    for k, (run, d) in enumerate(runs):
        method = d["method"].iloc[0]
        ls = st.dash[df.loc[df["run"] == run, "setting"].iloc[0]] if "setting" in df else "-"
        # markers staggered between runs, so that equal lines (SNAP-0 and SNO both sending every value) each
        # show their own
        every = max(1, len(d) // 8)
        kw = dict(color=st.colour[method], marker=st.marker[method], ls=ls, lw=1.3, ms=5,
                  markevery=(k * every // runs.ngroups, every))
        positive = d[d["fraction"] > 0] if logarithmic else d
        axes[0].plot(positive["iteration"], positive["fraction"], **kw)
        if (d["fraction"] == 0).any():
            low = float(positive["fraction"].min()) if len(positive) else 1e-6
            floor = low if floor is None else min(floor, low)
        t = d[d["threshold"] > 0]
        if len(t) and thresholds:
            axes[1].plot(t["iteration"], t["threshold"], **kw)
    if logarithmic:
        axes[0].set_yscale("log")
    else:
        axes[0].set_ylim(0, 1.04)
        floor = None  # a linear axis draws the iterations that send none
    axes[0].set_xlabel("iteration")
    axes[0].set_ylabel("values sent / values the frames could carry")
    axes[0].set_title("fraction of the parameter values sent" + (" (iterations sending none: not drawn)"
                                                                  if floor is not None else ""))
    if thresholds:
        axes[1].set_yscale("log")
        axes[1].set_xlabel("iteration")
        axes[1].set_ylabel("APE threshold T (mean over servers)")
        axes[1].set_title("the APE threshold in force (SNAP-0, SNO: 0)")
    st.legend(fig)
    panel_title(fig, "Selective exchange: the values sent " + ("and the APE threshold " if thresholds else "")
                + "per iteration (SNAP Sec. IV-C)", context)
    return fig


LOAD_COLUMNS = ("load_cpu", "load_net", "load_disk")


def epochs(df: pd.DataFrame, context: str = "") -> Figure:
    """Epoch-based gossip training (EdgeGossip, GoSGD): each platform's data ratio r_i per epoch, a line per
    platform (mean over seeds), the predicted against the measured training time of each epoch (points on the
    dashed line are exact predictions), and, where the runs recorded the co-running load each epoch trained
    under, the prediction error against that load (EdgeGossip Fig. 9: error against the co-running
    workload's size). The load is the busiest resource's (CPU in cores, network and disk as fractions of
    capacity), and the epoch is a CPU epoch when CPU is that resource, an I/O epoch otherwise (idle: none above
    0.05); the lines are the mean error per 0.1 of load."""
    st = Styles.of(df)
    predicted = df[df["predicted_s"] > 0] if "predicted_s" in df else df.iloc[:0]
    loaded = predicted.dropna(subset=list(LOAD_COLUMNS)) if set(LOAD_COLUMNS) <= set(df) else predicted.iloc[:0]
    fig, axes = new_figure(1, 3 if len(loaded) else 2, 17 if len(loaded) else 11, 4.6)
    df = df.assign(platform=df["rank"] - df.groupby("run")["rank"].transform("min"))
    for run, d in df.groupby("run", sort=False):
        method = d["method"].iloc[0]
        dash = st.dash[d["setting"].iloc[0]] if "setting" in d else "-"
        for _, g in d.groupby("platform"):
            g = g.groupby("epoch", as_index=False)["ratio"].mean()
            axes[0].plot(g["epoch"], g["ratio"], color=st.colour[method], ls=dash, lw=1.0, alpha=0.7,
                         drawstyle="steps-post")
        p = predicted[predicted["run"] == run]
        if len(p):  # GoSGD's epochs have no predictions
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
    panel_title(fig, title + ("; prediction error against co-running load" if len(loaded) else ""), context)
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
    # the only columns the figure reads, where they are all a reproduction keeps of a large series (None: it
    # keeps every column; ``edgeml.analysis.figures.compact_run``), or its totals per key where the figure and every
    # other reader only add its rows up (``rundir.Totals``)
    reads: tuple[str, ...] | rundir.Totals | None = None


SERIES_FIGURES = {
    "staleness": SeriesFigure(staleness, ("staleness",),
                              "Staleness of the updates the parameter server applied (fraction of updates)",
                              reads=("staleness",)),  # a row per update: the committed AdaComp runs' bulk
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
    "exchange": SeriesFigure(exchange, ("iteration", "sent", "values", "threshold"),
                             "The fraction of the parameter values the servers sent per iteration (summed over "
                             "servers, mean over seeds) and the APE threshold in force, on log axes",
                             # the figure and the claims' sent fractions read per-iteration totals over servers
                             reads=rundir.Totals(("iteration",), ("sent", "values"), ("threshold",))),
    "epochs": SeriesFigure(epochs, ("epoch", "rank", "ratio", "measured_s"),
                           "Each platform's data ratio per epoch, the predicted against the measured training "
                           "time of each epoch, and the prediction error against the co-running load the epoch "
                           "trained under"),
}
