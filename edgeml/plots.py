"""Figures: one function per figure, a tidy DataFrame in, a matplotlib Figure out.

Every figure reads without the paper at hand: a title saying what is compared and under which settings, axis
labels with units, one legend naming the runs. Seeds of a run are drawn as their mean with a 95% bootstrap band
(seaborn). Runs keep the same colour in every figure. The tables come from ``edgeml.report.figure_tables``;
nothing here knows an algorithm's internals: decided quantities arrive as ``name``/``value`` rows.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator, ScalarFormatter  # noqa: E402

X_AXES = {"time_s": "training time (s)", "total_steps": "total steps over all workers",
          "total_mb": "bytes sent by all nodes (MB)"}
X_NAMES = {"time_s": "training time", "total_steps": "total steps", "total_mb": "bytes sent"}
PARTS = {"computation": "#4C72B0", "communication": "#DD8452", "waiting": "#C44E52"}
GRID_POINTS = 80


def _figure(nrows: int, ncols: int, width: float, height: float) -> tuple[Figure, list]:
    # A bare Figure (no pyplot) leaves no global state behind, so many figures never pile up in memory.
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.85):
        fig = Figure(figsize=(width, height), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel().tolist()
    return fig, axes


def _order(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(df["run"]))


def _palette(runs: list[str]) -> dict[str, tuple]:
    return dict(zip(runs, sns.color_palette("tab10" if len(runs) <= 10 else "husl", len(runs))))


def _title(fig: Figure, text: str, context: str) -> None:
    fig.suptitle(text + (f"\n{context}" if context else ""), fontsize=11)


def _one_legend(fig: Figure, axes: list, title: str) -> None:
    """Replace the per-panel legends by one legend right of the panels."""
    entries: dict[str, object] = {}
    for ax in axes:
        legend = ax.get_legend()
        if legend is not None:
            for handle, text in zip(legend.legend_handles, legend.get_texts()):
                entries.setdefault(text.get_text(), handle)
            legend.remove()
    if not entries:
        return
    handles, labels = list(entries.values()), list(entries)
    # Below the panels, in as many columns as fit: long run names never run into the title or the panels.
    ncols = max(1, min(len(labels), int(fig.get_figwidth() * 11) // (max(map(len, labels)) + 6)))
    # grow the figure by the legend's height, so that many runs never squeeze it into the panels
    fig.set_figheight(fig.get_figheight() + 0.24 * (math.ceil(len(labels) / ncols) + 1))
    fig.legend(handles, labels, title=title, loc="outside lower center", ncols=ncols, frameon=False)


def _band(values) -> tuple[float, float]:
    # seaborn's own bootstrap loops in Python (seconds per curve); this one is vectorized and seeded.
    from edgeml.report import bootstrap_ci

    return bootstrap_ci(values)[1:]


def _on_common_grid(evals: pd.DataFrame, x: str) -> pd.DataFrame:
    """Interpolate each seed of a run onto one x grid, so seaborn can average seeds into a band.

    Seeds evaluate at different step and byte counts (and procs at jittered times); the grid ends where the
    shortest seed ends, so the band never mixes in seeds that have stopped.
    """
    out = []
    for run, g in evals.groupby("run", sort=False):
        if g["seed"].nunique() < 2:
            out.append(g)
            continue
        grid = np.linspace(0, g.groupby("seed")[x].max().min(), GRID_POINTS)
        for seed, s in g.groupby("seed"):
            s = s.sort_values(x)
            row = {"run": run, "seed": seed, x: grid}
            for y in ("accuracy", "loss"):
                ok = s[y].notna()
                row[y] = np.interp(grid, s.loc[ok, x], s.loc[ok, y]) if ok.any() else np.nan
            out.append(pd.DataFrame(row))
    return pd.concat(out, ignore_index=True)


def convergence(evals: pd.DataFrame, x: str = "time_s", context: str = "") -> Figure:
    """Test accuracy and loss against ``x`` (time_s, total_steps or total_mb); one line per run."""
    runs = _order(evals)
    data = _on_common_grid(evals, x)
    fig, axes = _figure(1, 2, 11, 4.6)
    for ax, (y, label) in zip(axes, (("accuracy", "test accuracy"), ("loss", "test loss"))):
        sns.lineplot(data=data, x=x, y=y, hue="run", hue_order=runs, palette=_palette(runs), errorbar=_band, ax=ax)
        ax.set_xlabel(X_AXES[x])
        ax.set_ylabel(label)
        ax.set_title(f"{label} vs {X_NAMES[x]}")
    axes[0].set_ylim(0, 1)
    _one_legend(fig, axes, "run")
    _title(fig, f"Test accuracy and loss of the global model against {X_NAMES[x]}", context)
    return fig


def time_breakdown(nodes: pd.DataFrame, context: str = "") -> Figure:
    """Stacked bars per worker: shares of computation, communication and waiting; one panel per run."""
    runs = _order(nodes)
    ncols = min(len(runs), 3)
    nrows = math.ceil(len(runs) / ncols)
    panel = max(3.8, 0.32 * nodes.groupby("run")["worker"].nunique().max())  # room for every worker's label
    fig, axes = _figure(nrows, ncols, max(6.0, panel * ncols), 3.3 * nrows + 1.2)
    for ax, run in zip(axes, runs):
        d = nodes[nodes["run"] == run]
        bottom = np.zeros(len(d))
        for part, colour in PARTS.items():
            ax.bar(d["worker"].astype(str), d[part].fillna(0), bottom=bottom, color=colour, label=part, width=0.75)
            bottom += d[part].fillna(0).to_numpy()
        ax.set_ylim(0, 100)
        ax.set_title(run)
        ax.set_xlabel("worker (step-time factor)")
        ax.set_ylabel("share of its time (%)")
        ax.grid(axis="x", visible=False)
    for ax in axes[len(runs):]:
        ax.set_visible(False)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=3, frameon=False)
    _title(fig, "Where each worker's time goes", context)
    return fig


def throughput(summary: pd.DataFrame, context: str = "") -> Figure:
    """Bars per run: training throughput (samples/s) and traffic (MB/s); seeds give 95% CI error bars."""
    runs = _order(summary)
    data = summary.assign(mb_per_s=summary["bytes_per_s"] / 1e6)
    horizontal = max(map(len, runs)) * len(runs) > 40  # long names read better as rows than as slanted ticks
    fig, axes = _figure(1, 2, 11, 1.6 + 0.45 * len(runs) if horizontal else 3.8)
    for ax, (value, label) in zip(axes, (("samples_per_s", "training throughput (samples/s)"),
                                         ("mb_per_s", "traffic, all nodes (MB/s)"))):
        xy = {"x": value, "y": "run"} if horizontal else {"x": "run", "y": value}
        sns.barplot(data=data, **xy, hue="run", order=runs, hue_order=runs, palette=_palette(runs),
                    errorbar=("ci", 95), seed=0, legend=False, ax=ax)
        ax.set_xlabel(label if horizontal else "")
        ax.set_ylabel("" if horizontal else label)
    if horizontal:
        axes[1].set_yticklabels([])
    _title(fig, "Training throughput and network traffic per run", context)
    return fig


def staleness(df: pd.DataFrame, context: str = "") -> Figure:
    """Histogram of the staleness of applied updates, one colour per run."""
    runs = _order(df)
    fig, axes = _figure(1, 1, 8, 4.8)
    sns.histplot(data=df, x="staleness", hue="run", hue_order=runs, palette=_palette(runs), discrete=True,
                 stat="probability", common_norm=False, multiple="dodge", shrink=0.85, ax=axes[0])
    axes[0].set_xlabel("staleness (updates applied between a worker's pull and its push)")
    axes[0].set_ylabel("fraction of updates")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    _one_legend(fig, axes, "run")
    _title(fig, "Staleness of the updates applied by the parameter server", context)
    return fig


def decisions(df: pd.DataFrame, context: str = "") -> Figure:
    """One panel per decided quantity (``name``): its value over time, a line per run and node."""
    runs = _order(df)
    names = list(dict.fromkeys(df["name"]))
    ncols = min(len(names), 2)
    nrows = math.ceil(len(names) / ncols)
    fig, axes = _figure(nrows, ncols, max(7.0, 5.5 * ncols), 3.3 * nrows + 1.4)
    data = df.assign(unit=df["seed"].astype(str) + "/" + df["rank"].astype(str))
    for ax, name in zip(axes, names):
        sns.lineplot(data=data[data["name"] == name], x="time_s", y="value", hue="run", hue_order=runs,
                     palette=_palette(runs), units="unit", estimator=None, drawstyle="steps-post", lw=1.2, ax=ax)
        ax.set_title(name)
        ax.set_xlabel("training time (s)")
        ax.set_ylabel(name)
    for ax in axes[len(names):]:
        ax.set_visible(False)
    _one_legend(fig, axes, "run")
    _title(fig, "Quantities the algorithms decided as they ran (one line per node and seed)", context)
    return fig


def commits(df: pd.DataFrame, context: str = "") -> Figure:
    """Commit counts at the scheduler's checkpoints: every worker's count against C_target, and their spread.

    Theorem 2 of adsp.txt: with commit rates dC_i = C_target - c_i, all workers' counts stay roughly equal."""
    runs = _order(df)
    pal = _palette(runs)
    fig, axes = _figure(1, 2, 11, 4.6)
    for run in runs:
        d = df[df["run"] == run]
        for (_, _), w in d.groupby(["seed", "worker"]):
            axes[0].plot(w["time_s"], w["commits"], color=pal[run], lw=0.8, alpha=0.45, drawstyle="steps-post")
        target = d.groupby("time_s", as_index=False)["target"].max()
        axes[0].plot(target["time_s"], target["target"], color=pal[run], lw=1.6, ls="--", drawstyle="steps-post")
    axes[0].set_xlabel("training time (s)")
    axes[0].set_ylabel("commits so far")
    axes[0].set_title("each worker's commits (thin) and C_target (dashed)")
    spread = (df.groupby(["run", "seed", "time_s"], sort=False)["commits"].agg(lambda c: c.max() - c.min())
              .rename("spread").reset_index())
    sns.lineplot(data=spread, x="time_s", y="spread", hue="run", hue_order=runs, palette=pal, errorbar=_band,
                 drawstyle="steps-post", ax=axes[1])
    axes[1].set_xlabel("training time (s)")
    axes[1].set_ylabel("max - min commits over workers")
    axes[1].set_title("spread of the commit counts at each checkpoint")
    axes[1].yaxis.set_major_locator(MaxNLocator(integer=True))
    axes[1].set_ylim(-0.15, max(1.0, float(spread["spread"].max())) + 0.5)  # a spread of 0 stays visible
    _one_legend(fig, axes, "run")
    _title(fig, "Commit counts of the workers at each checkpoint (adsp.txt Theorem 2)", context)
    return fig


def against_sweep(df: pd.DataFrame, key: str, metrics: list[str], target: str = "", context: str = "") -> Figure:
    """One panel per metric against the swept config value ``key``: a point per seed, the mean as a line."""
    ncols = min(len(metrics), 3)
    nrows = math.ceil(len(metrics) / ncols)
    fig, axes = _figure(nrows, ncols, max(6.0, 4.6 * ncols), 3.6 * nrows + 1.0)
    values = pd.to_numeric(df[key], errors="coerce")
    numeric = values.notna().all()
    data = df.assign(**{key: values if numeric else df[key].astype(str)})
    for ax, metric in zip(axes, metrics):
        d = data.dropna(subset=[metric])
        sns.lineplot(data=d, x=key, y=metric, estimator="mean", errorbar=None, marker="o", color="#4C72B0", ax=ax)
        sns.scatterplot(data=d, x=key, y=metric, color="#4C72B0", alpha=0.4, ax=ax, legend=False)
        if numeric and values.min() > 0 and values.max() / values.min() >= 8:
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(ScalarFormatter())
        label = f"time to {target} (s)" if metric == "time_to_target" and target else metric
        ax.set_xlabel(key)
        ax.set_ylabel(label)
        ax.set_title(f"{label} against {key}")
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    _title(fig, f"Against the swept {key}", context)
    return fig


def trials(df: pd.DataFrame, context: str = "") -> Figure:
    """The online search of adsp.txt Alg. 1: each trial's reward against the commit rate it tried, a line per
    search (epoch) and run; the search stops at the first rate whose reward is lower."""
    runs = _order(df)
    fig, axes = _figure(1, 1, 8, 4.8)
    data = df.drop_duplicates(["run", "seed", "epoch", "rate"]).sort_values(["run", "seed", "epoch", "rate"])
    data = data.assign(search=data["seed"].astype(str) + "/" + data["epoch"].astype(str))
    sns.lineplot(data=data, x="rate", y="reward", hue="run", hue_order=runs, palette=_palette(runs),
                 units="search", estimator=None, marker="o", lw=1.2, ax=axes[0])
    axes[0].set_xlabel("commit rate tried (commits per check period)")
    axes[0].set_ylabel("reward (1 / predicted time to the target loss)")
    axes[0].xaxis.set_major_locator(MaxNLocator(integer=True))
    _one_legend(fig, axes, "run")
    _title(fig, "Rewards of the commit-rate search, a line per epoch (adsp.txt Alg. 1)", context)
    return fig
