"""Figures of a set of runs: the tables they are drawn from, which panels a set of runs gets, and their captions.

``write_figures`` draws the convergence curves (against time, steps and bytes), the convergence bars, the time
breakdown and the throughput for any set of runs; the figures of the series the runs wrote
(``series/<name>.csv``), chosen from ``edgeml.analysis.plots.SERIES_FIGURES``; and, for an experiment's figure group,
metrics against a setting or a measured quantity. Each figure comes with a caption saying what is measured
(test loss on how many samples, how often) and, for a reproduction, which of the paper's figures it
reproduces. Colour means the method (the algorithm) and line style the setting: the config keys in which runs
of one method differ within the figure.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from edgeml import rundir
from edgeml.analysis import plots
from edgeml.analysis.compare import QUANTITIES, Comparison, claim_samples, compare, host_bound
from edgeml.analysis.convergence import TARGET_METRICS, Target
from edgeml.analysis.names import key_name, method_of, setting_text
from edgeml.rundir import NODES, NODES_NEEDED, SERIES, Run, flat_config, fmt_value


def context(runs: list[Run]) -> str:
    s = [r.summary for r in runs]
    parts = [f"{s[0][k]}" for k in ("dataset", "model") if len({x[k] for x in s}) == 1]
    if len({x["workers"] for x in s}) == 1:
        parts.append(f"{s[0]['workers']} workers")
    if len({x["hetero"] for x in s}) == 1:
        parts.append(f"speeds {s[0]['hetero']}")
    if {x.get("backend") for x in s} == {"sim"}:
        parts.append("sim backend (virtual seconds)")
    return ", ".join(parts)


MODELS = {"average": "the global model", "mean": "the nodes' mean", "worst": "the worst node's model"}
"""What a curve describes, by ``eval.models``: where nodes keep models of their own, not always a global one."""


def evaluated_model(runs: list[Run]) -> str:
    """The model the runs' evaluations describe ("the worst node's model"; several joined by "or")."""
    models = sorted({r.config.get("eval", {}).get("models", "average") for r in runs}, key=list(MODELS).index)
    return " or ".join(MODELS[m] for m in models) or MODELS["average"]


def measured_text(runs: list[Run]) -> str:
    """What an evaluation is: 'test loss on 1000 test samples every 20 s (virtual)'."""
    evals = [r.config.get("eval", {}) for r in runs]
    samples = {e.get("test_samples", 0) for e in evals}
    every = sorted({float(e.get("interval", math.nan)) for e in evals})
    on = f"{samples.pop()} test samples" if len(samples) == 1 and 0 not in samples else "the test set" \
        if samples == {0} else "test samples"
    clock = " of virtual time" if {r.summary.get("backend") for r in runs} == {"sim"} else ""
    period = f"{every[0]:g} s" if len(every) == 1 else f"{every[0]:g} to {every[-1]:g} s"
    return f"evaluated on {on} every {period}{clock}"


def _fewest_keys(keys: list[str], groups: list[list[dict]], given: tuple[str, ...] = ()) -> list[str]:
    """The fewest of ``keys`` (the first such, in their order) that, with the ``given`` keys, tell apart every
    two configs of a group that differ in any of ``keys``: keys that only vary together with another (the
    evaluation interval with the backend) are left out."""
    import itertools

    def values(flat: dict, ks) -> str:
        return json.dumps([flat.get(k) for k in ks], sort_keys=True, default=str)

    def apart(subset) -> bool:
        for flats in groups:
            full = {values(f, [*given, *keys]) for f in flats}
            if len({values(f, [*given, *subset]) for f in flats}) < len(full):
                return False
        return True

    if len(keys) > 10:  # too many to try every subset: all of them
        return keys
    for n in range(len(keys) + 1):
        for subset in itertools.combinations(keys, n):
            if apart(subset):
                return list(subset)
    return keys


def _by_method(runs: list[Run]) -> dict[str, list[str]]:
    """The runs' paths by method (``method_of``), in order."""
    groups: dict[str, list[str]] = {}
    for r in runs:
        groups.setdefault(method_of(r), []).append(str(r.path))
    return groups


def _varying(flat: dict[str, dict], paths: list[str]) -> list[str]:
    """The config keys whose values differ among the runs at ``paths`` (``flat``: their flat configs)."""
    return [k for k in dict.fromkeys(k for p in paths for k in flat[p])
            if len({json.dumps(flat[p].get(k), sort_keys=True, default=str) for p in paths}) > 1]


def group_settings(runs: list[Run], labels: dict[str, str] | None = None) -> dict[str, str]:
    """Each run's setting within a figure (by path), as its legend names it: the fewest config keys that tell
    apart the runs of one method (``method_of``) there (``_fewest_keys``), each named by ``setting_text``; every
    run is named by the same keys, so that one line style means one setting across methods. A key an older run
    lacks counts as its default (``flat_config``); a key a run has no value for (another algorithm's section)
    is left out of its name. Where fewest keys can be chosen in several ways, the keys the runs' sweeps name
    (``Run.point``) come first: AdaComp at c = 0.1, 0.01 and 0.001, each c at its own tuned alpha, is named by
    its c, not by its alpha."""
    flat = {str(r.path): flat_config(r) for r in runs}
    groups = _by_method(runs)
    varying = {k for paths in groups.values() for k in _varying(flat, paths)}
    swept = {k for r in runs for k in r.point}
    keys = [k for k in dict.fromkeys(k for p in flat for k in flat[p]) if k in varying]  # in the configs' order
    tried = sorted(keys, key=lambda k: k not in swept)  # stable: the swept keys first
    picked = set(_fewest_keys(tried, [[flat[p] for p in paths] for paths in groups.values()]))
    chosen = [k for k in keys if k in picked]  # named in the configs' order
    return {p: ", ".join(setting_text(k, f[k], labels) for k in chosen if f.get(k) is not None)
            for p, f in flat.items()}


def run_names(runs: list[Run], settings: dict[str, str]) -> dict[str, str]:
    """Each run's name in a figure, by label: its method with its setting ("ADSP (H=1.6)", ``group_settings``);
    a name that runs of two labels would share keeps the label beside it."""
    names = {}
    for r in runs:
        s = settings[str(r.path)]
        names[r.label] = f"{method_of(r)} ({s})" if s else method_of(r)
    labels: dict[str, set] = {}
    for label, name in names.items():
        labels.setdefault(name, set()).add(label)
    return {label: f"{name} [{label}]" if len(labels[name]) > 1 else name for label, name in names.items()}


def figure_tables(runs: list[Run], labels: dict[str, str] | None = None) -> dict[str, pd.DataFrame]:
    """The tidy tables the figures are drawn from: ``evals``, ``nodes`` and one per series the runs wrote.
    Every row names its run (``run_names``), method (colour), setting (line style, ``group_settings``) and seed."""
    evals, nodes, series = [], [], {}
    settings = group_settings(runs, labels)
    names = run_names(runs, settings)
    for r in runs:
        tag = {"run": names[r.label], "method": method_of(r), "setting": settings[str(r.path)], "seed": r.seed,
               "host_bound": host_bound(r)}  # the legend marks its method (``plots.style.Styles``)
        ingress = r.evals["ps_ingress_bytes"] if "ps_ingress_bytes" in r.evals else 0.0
        evals.append(r.evals.assign(total_mb=r.evals["total_bytes"] / 1e6, ingress_mb=ingress / 1e6, **tag))
        n = r.table(NODES, NODES_NEEDED)
        w = n[n["role"] == "worker"].copy()
        factors = r.meta().get("step_factors") or []
        w["worker"] = [f"{int(i)}\n×{factors[int(i)]:.3g}" if int(i) < len(factors) else str(int(i))
                       for i in w["index"]]
        alive = w["alive_s"].where(w["alive_s"] > 0)
        for src, part in (("compute_s", "computation"), ("comm_s", "communication"), ("wait_s", "waiting")):
            w[part] = 100 * w[src] / alive
        nodes.append(w[["worker", "index", "computation", "communication", "waiting"]].assign(**tag))
        for name, spec in plots.SERIES_FIGURES.items():
            df = r.table(f"{SERIES}/{name}.csv", spec.columns, required=False)
            if df is not None:
                series.setdefault(name, []).append(df.assign(**tag))

    def cat(frames: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    worker_means = cat(nodes).groupby(["run", "worker"], sort=False, as_index=False).mean(numeric_only=True)
    return {"evals": cat(evals), "nodes": worker_means, **{k: cat(v) for k, v in series.items()}}


def kept_series() -> dict[str, tuple[str, ...] | None]:
    """The series the analysis reads of a run, each with the columns a reproduction keeps of it (None: every
    column): the figures' (``plots.SERIES_FIGURES``, ``SeriesFigure.reads``) and the claims' ``decisions``
    (``Run.decided``)."""
    return {"decisions": None, **{name: spec.reads for name, spec in plots.SERIES_FIGURES.items()}}


def compact_run(path: Path, panels: list[list[str] | None] | None = None) -> None:
    """Shrink a finished run directory to what the tables, figures and claims read of it, as ``edgeml
    reproduce`` keeps its runs: its files and the kept series packed into ``run.zip``, other series left out
    (``edgeml.rundir.compact``, ``kept_series``). ``panels``: the panels of each figure group the run is drawn
    in (None for a group that draws every panel with data); a series figure none of them names is not kept
    (the claims' ``decisions`` always are, and whole the series the claims' derived quantities read,
    ``rundir.DERIVED_SERIES``). Without ``panels`` every series a figure may draw is kept."""
    kept = kept_series()
    if panels is not None and all(p is not None for p in panels):
        drawn = {name for p in panels for name in p}
        kept = {k: v for k, v in kept.items() if k == "decisions" or k in drawn}
    rundir.compact(path, {**kept, **dict.fromkeys(rundir.DERIVED_SERIES)})


@dataclass(frozen=True)
class FigureFile:
    name: str
    png: Path
    caption: str
    pdf: bool = True
    """Written as a PDF beside the PNG too (``png`` with the suffix ``.pdf``)."""


STANDARD_PANELS = ("convergence_time", "convergence_steps", "convergence_bytes", "convergence_ingress",
                   "convergence_iterations", "cost_per_iteration", "bars", "time_breakdown", "throughput", "accuracy")
"""The panels a figure group may name; ``accuracy`` only where named (a figure group without ``panels`` and
``edgeml plot`` draw the others)."""


def panel_names() -> tuple[str, ...]:
    return STANDARD_PANELS + tuple(plots.SERIES_FIGURES)


SUMMARY_NAMES = {"best_accuracy": "best test accuracy", "final_accuracy": "final test accuracy",
                 "best_loss": "best test loss", "final_loss": "final test loss"}
"""Axis names of the run summaries' metrics that an ``against`` panel may draw."""


def axis_label(metric: str, target: Target, labels: dict[str, str] | None = None) -> str:
    """An axis's name: a metric with its target and unit, or a config key by its short name (``key_name``)."""
    if metric in QUANTITIES:
        unit = {"time": " (s)", "steps": "", "bytes": " (bytes)", "ingress": " (bytes into the PS)", "iterations": "",
                "cost": " (byte-hops)"}[QUANTITIES[metric]]
        return f"{QUANTITIES[metric]} until {replace(target, note='')}{unit}"
    if "." in metric:
        return key_name(metric, labels)
    return SUMMARY_NAMES.get(metric, metric)


def against_data(runs: list[Run], cmp: Comparison, x: str, ys: list[str],
                 labels: dict[str, str] | None = None) -> pd.DataFrame:
    """Rows per run for an ``against`` panel: method, point (the config keys in which the method's runs differ,
    ``section.key=value``), variant (the legend's name for what sets it apart besides x: "" where nothing
    does), seed, x (a config key such as a swept setting, or a metric), the ys."""
    flat = {str(r.path): flat_config(r) for r in runs}
    from_config = all(x in f for f in flat.values())
    metrics = ys if from_config else [x, *ys]
    samples = claim_samples(runs, cmp.per_run, metrics, [cmp.target])
    point, variant = {}, {}
    for paths in _by_method(runs).values():
        keys = _varying(flat, paths)
        given = (x,) if x in keys else ()
        rest = _fewest_keys([k for k in keys if k != x], [[flat[p] for p in paths]], given)
        for p in paths:
            point[p] = ",".join(f"{k}={fmt_value(flat[p].get(k))}" for k in keys)
            variant[p] = ", ".join(setting_text(k, flat[p][k], labels) for k in rest if flat[p].get(k) is not None)
    rows = []
    for r in runs:
        s = samples[samples["run"].eq(r.label) & samples["seed"].eq(r.seed)]
        row = {"method": method_of(r), "point": point[str(r.path)], "variant": variant[str(r.path)], "seed": r.seed}
        if from_config:
            row[x] = flat[str(r.path)][x]
        for m in metrics:
            v = s[s["metric"] == m]
            if not v.empty:
                row[m] = float(v["lo"].mean())
                row[f"{m}_censored"] = bool(np.isinf(v["hi"]).any())
        rows.append(row)
    return pd.DataFrame(rows)


DPI = 120  # on screen the width of a README column; --pdf for print
COLOURS = 64


def save_png(fig: Any, path: Path) -> None:
    """Write a figure as a PNG of at most ``COLOURS`` colours (median cut, no dithering) at ``DPI``. A plot has
    few colours, its anti-aliased edges and bands many; the palette image looks the same and takes about a
    quarter of the bytes of the full-colour one at 150 dpi (which keeps the committed reproductions' figures,
    ``results/``, small; the PDF, ``--pdf``, is the figure for print)."""
    from PIL import Image

    plots.style.fit_titles(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    image = Image.open(buf).convert("RGB")
    image.quantize(COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True,
                                                                                             dpi=(DPI, DPI))


def write_figures(runs: list[Run], out: Path, cmp: Comparison | None = None, panels: Iterable[str] | None = None,
                  against: Iterable[dict] = (), cite: str = "", processes: int = 1,
                  labels: dict[str, str] | None = None, pdf: bool = True) -> list[FigureFile]:
    """Draw the figures the runs have data for (or the ``panels`` named), plus one figure per ``against``
    entry ({"x": key or metric, "y": [metrics]}); write PNG (and PDF: ``pdf``); return them with their captions. A
    ``cite`` (the paper's figure these runs reproduce) opens the captions of the paper's panels. ``processes``:
    draw them side by side in that many processes (``draw``). ``labels``: short names of config keys for the
    legends and axes (``setting_text``)."""
    pending = plan_figures(runs, out, cmp, panels, against, cite, labels, pdf)
    out.mkdir(parents=True, exist_ok=True)
    draw(pending, processes)
    return [f.file for f in pending]


@dataclass(frozen=True)
class PendingFigure:
    """A figure ready to draw: ``make()`` returns the matplotlib figure, written as ``file`` (PNG, and PDF where
    ``file.pdf``)."""

    file: FigureFile
    make: Any

    def write(self) -> None:
        fig = self.make()
        self.file.png.parent.mkdir(parents=True, exist_ok=True)
        save_png(fig, self.file.png)
        if self.file.pdf:  # no creation date in the PDF: the same runs draw the same bytes
            fig.savefig(self.file.png.with_suffix(".pdf"), dpi=DPI, metadata={"CreationDate": None})


def plan_figures(runs: list[Run], out: Path, cmp: Comparison | None = None, panels: Iterable[str] | None = None,
                 against: Iterable[dict] = (), cite: str = "", labels: dict[str, str] | None = None,
                 pdf: bool = True) -> list[PendingFigure]:
    """The figures ``write_figures`` draws, with their data prepared, not yet drawn."""
    cmp = cmp or compare(runs)
    tables = figure_tables(runs, labels)
    ctx, measured, model = context(runs), measured_text(runs), evaluated_model(runs)
    target = cmp.target
    seeds = max(len({r.seed for r in runs if r.label == lab}) for lab in {r.label for r in runs})
    band = f"; mean over {seeds} seeds with a 95% bootstrap band" if seeds > 1 else ""
    paper = f"{cite}: " if cite else ""
    wanted = set(panels) if panels is not None else None
    figures: list[tuple[str, Any, str]] = []

    def want(name: str) -> bool:
        return wanted is None or name in wanted

    evals = tables["evals"]
    has_ps = bool((evals["ingress_mb"] > 0).any())
    counted = "iterations" in evals and bool(evals["iterations"].notna().any())
    for name, x in (("convergence_time", "time_s"), ("convergence_steps", "total_steps"),
                    ("convergence_bytes", "total_mb"), ("convergence_ingress", "ingress_mb"),
                    ("convergence_iterations", "iterations")):
        # ingress: only where a parameter server received; iterations: runs that count them
        if want(name) and (x != "ingress_mb" or has_ps) and (x != "iterations" or counted):
            figures.append((name, lambda x=x: plots.convergence(evals[evals[x].notna()], x, ctx, model),
                            f"{paper}test loss and accuracy of {model} against {plots.X_NAMES[x]}, "
                            f"{measured}{band}"))
    if want("cost_per_iteration") and counted:
        figures.append(("cost_per_iteration", lambda: plots.cost_per_iteration(evals[evals["iterations"].notna()], ctx),
                        f"{paper}communication cost (bytes x hops) per iteration against iterations, {measured}"
                        f"{band}"))
    if want("bars"):
        settings = group_settings(runs, labels)
        method = {str(r.path): method_of(r) for r in runs}
        reach = cmp.reach[(cmp.reach["target"] == target.short) & cmp.reach["path"].isin(settings)]
        reach = reach.assign(method=reach["path"].map(method), setting=reach["path"].map(settings))
        figures.append(("bars", lambda: plots.bars(reach, str(replace(target, note="")), ctx),
                        f"{paper}time and steps until {target} ({measured}), mean over seeds with 95% bootstrap "
                        "intervals; a hatched bar marked '>' never got there: its height is what the run lasted"))
    if want("time_breakdown"):
        figures.append(("time_breakdown", lambda: plots.time_breakdown(tables["nodes"], ctx),
                        f"{paper}each worker's time split into computation, communication and waiting"))
    if wanted is not None and "accuracy" in wanted:
        counts = {int(r.config.get("eval", {}).get("test_samples") or 0) for r in runs}
        n = counts.pop() if len(counts) == 1 else 0
        figures.append(("accuracy", lambda: plots.accuracy(_named_per_run(runs, cmp, labels), n or None, ctx),
                        f"{paper}best and final test accuracy per run: every seed, and the mean over seeds with its "
                        f"95% bootstrap interval ({measured})"))
    if want("throughput"):
        figures.append(("throughput", lambda: plots.throughput(_named_per_run(runs, cmp, labels), ctx),
                        "training throughput and network traffic per run, mean over seeds"))
    for name, spec in plots.SERIES_FIGURES.items():
        if name in tables and not tables[name].empty and want(name):
            figures.append((name, lambda spec=spec, name=name: spec.draw(tables[name], ctx), spec.caption))
    for a in against:
        x, ys = a["x"], list(a["y"])
        data = against_data(runs, cmp, x, ys, labels)
        ys = [y for y in ys if y in data.columns]
        if ys and (x in data.columns):
            names = {m: axis_label(m, target, labels) for m in [x, *ys]}
            figures.append((f"against_{x}", lambda data=data, x=x, ys=ys, names=names:
                            plots.against(data, x, ys, names, ctx),
                            f"{paper}{', '.join(names[y] for y in ys)} against {names[x]}: mean over seeds with "
                            f"95% bootstrap intervals ({measured})"
                            + ("; a hollow point marked '>' never reached the target: it is drawn at what the run "
                               "lasted" if any(m in TARGET_METRICS for m in [x, *ys]) else "")))
    return [PendingFigure(FigureFile(name, out / f"{name}.png", caption if cite else caption[:1].upper() + caption[1:],
                                     pdf), make) for name, make, caption in figures]


def _named_per_run(runs: list[Run], cmp: Comparison, labels: dict[str, str] | None) -> pd.DataFrame:
    """The comparison's per-run rows of ``runs``, each named as the figure's legend names it."""
    names = run_names(runs, group_settings(runs, labels))
    per_run = cmp.per_run[cmp.per_run["path"].isin({str(r.path) for r in runs})]
    return per_run.assign(run=per_run["run"].map(names))


def draw(figures: list[PendingFigure], processes: int = 1) -> None:
    """Write ``figures``, in ``processes`` processes side by side where this system can fork (Linux): children
    forked from this one, which holds the figures' data already, take the next figure to draw until none is
    left, as does this process. The files are the same bytes as drawn one after another. A child that fails
    leaves its figure to this process, which draws it again, so an error is raised here, with its traceback."""
    import multiprocessing as mp
    import sys

    n = min(processes, len(figures))
    if n <= 1 or not sys.platform.startswith("linux"):
        for f in figures:
            f.write()
        return
    ctx = mp.get_context("fork")
    taken, done = ctx.Value("i", 0), ctx.Array("b", len(figures))
    children = [ctx.Process(target=_draw_share, args=(figures, taken, done, True), daemon=True)
                for _ in range(n - 1)]
    try:
        for c in children:
            c.start()
        _draw_share(figures, taken, done, False)
        for c in children:
            c.join()
    finally:
        for c in children:
            if c.is_alive():
                c.kill()
                c.join()
    for k, f in enumerate(figures):
        if not done[k]:  # its child failed (or was killed): the error, if any, is raised here
            f.write()


def _draw_share(figures: list[PendingFigure], taken, done, child: bool) -> None:
    """Draw the next figure nobody took until none is left; mark each one written."""
    if child:  # a fresh stderr: the parent's may be locked by a thread that wrote when this process forked
        import os
        import sys

        sys.stdout = sys.stderr = open(os.devnull, "w")
    while True:
        with taken.get_lock():
            k = taken.value
            taken.value += 1
        if k >= len(figures):
            return
        figures[k].write()
        done[k] = 1
