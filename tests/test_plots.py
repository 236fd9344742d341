"""Figures: each paper panel type labels its axes and draws the series it is given; edgeml plot writes them."""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from edgeml import cli
from edgeml.analysis import plots
from edgeml.analysis.figures import figure_tables, write_figures
from edgeml.analysis.plots.style import GRID_POINTS, label_spans
from edgeml.rundir import load_runs
from test_report import make_run


def evals_frame(settings=("",)) -> pd.DataFrame:
    rows = []
    for method, speed in (("adacomm", 1.0), ("fixed_adacomm", 1.0), ("adsp", 2.0)):
        for setting in settings:
            for seed in (0, 1):
                for t in range(6):
                    rows.append({"run": f"{method}[{setting}]", "method": method, "setting": setting, "seed": seed,
                                 "time_s": float(t), "total_steps": 10 * t * speed + seed, "total_mb": 0.1 * t * speed,
                                 "accuracy": 1 - 0.8 * np.exp(-speed * t), "loss": 2 * np.exp(-speed * t)})
    return pd.DataFrame(rows)


def data_lines(ax):
    """The mean curves (not the thin single-seed tails past a run's shortest seed)."""
    return [line for line in ax.lines if len(line.get_xdata()) > 1 and line.get_gid() != "seed-tail"]


def tail_lines(ax):
    return [line for line in ax.lines if line.get_gid() == "seed-tail"]


@pytest.mark.parametrize("x, label", [("time_s", "training time (s)"), ("total_steps", "total steps over all workers"),
                                      ("total_mb", "bytes sent by all nodes (MB)")])
def test_convergence_axes(x, label):
    fig = plots.convergence(evals_frame(), x, "digits, mlp")
    acc, loss = fig.axes[:2]
    assert (acc.get_xlabel(), acc.get_ylabel()) == (label, "test accuracy")
    assert (loss.get_xlabel(), loss.get_ylabel()) == (label, "test loss")
    # ADACOMM's curve is Fixed ADACOMM's here: the legend says so, rather than leave a reader looking for it
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["adacomm (same curve as fixed_adacomm)",
                                                                  "fixed_adacomm", "adsp"]
    assert "digits, mlp" in fig._suptitle.get_text()
    assert len(data_lines(acc)) == 3 and acc.collections  # mean lines and the seed bands


def test_curves_are_drawn_where_they_were_measured_also_near_zero_on_a_log_axis():
    # a baseline evaluated every 10 s for 10,000 s beside a 600 s run: a log time axis, where a coarse even grid
    # would join 0 to its first grid point by a straight segment over measurements it skipped
    rows = [{"run": f"{m}[]", "method": m, "setting": "", "seed": seed, "time_s": float(t),
             "accuracy": min(0.9, t / end), "loss": 1.0} for m, end in (("ssgd", 10_000), ("esync", 600))
            for seed in (0, 1) for t in range(0, end + 1, 10)]
    acc = plots.convergence(pd.DataFrame(rows), "time_s").axes[0]
    assert acc.get_xscale() == "symlog"
    long, short = sorted(data_lines(acc), key=lambda ln: -max(ln.get_xdata()))
    x = list(long.get_xdata())
    assert x[:4] == [0.0, 10.0, 20.0, 30.0] and x[-1] == 10_000.0  # every early point, and the end
    assert len(x) <= GRID_POINTS and all(b > a for a, b in zip(x, x[1:]))
    assert list(short.get_xdata()) == [float(t) for t in range(0, 601, 10)]  # few points: all of them


def test_seeds_that_run_on_past_the_shortest_are_drawn_one_by_one():
    # three seeds that stop at a plateau at 40, 60 and 100 steps: the mean and its band end at 40; the two that go
    # on are drawn each as a thin line from the mean's end to their own, and the title says what those are
    ends = {0: 40, 1: 60, 2: 100}
    rows = [{"run": "asgd[]", "method": "asgd", "setting": "", "seed": seed, "time_s": float(t),
             "total_steps": float(t), "accuracy": 0.5 + t / 400 + seed / 100, "loss": 1.0 - t / 200}
            for seed, end in ends.items() for t in range(0, end + 1, 10)]
    fig = plots.convergence(pd.DataFrame(rows), "total_steps", "digits, mlp")
    acc = fig.axes[0]
    (mean,) = data_lines(acc)
    assert max(mean.get_xdata()) == 40.0
    tails = sorted(tail_lines(acc), key=lambda ln: max(ln.get_xdata()))
    assert [list(t.get_xdata()) for t in tails] == [[40.0, 50.0, 60.0], [40.0] + [float(t) for t in range(50, 101, 10)]]
    assert tails[1].get_ydata()[0] == pytest.approx(0.5 + 40 / 400 + 0.02)  # each from its own value at the end
    assert tails[1].get_ydata()[-1] == pytest.approx(0.5 + 100 / 400 + 0.02)
    assert all(t.get_lw() < mean.get_lw() and t.get_color() == mean.get_color() for t in tails)
    assert len(tail_lines(fig.axes[1])) == 2
    title = fig._suptitle.get_text().replace("\n", " ")
    assert "digits, mlp" in title and "thin lines: single seeds after the first of their run's seeds stopped" in title
    # seeds that end together: no tails, and no note
    same = pd.DataFrame([r for r in rows if r["total_steps"] <= 40])
    fig = plots.convergence(same, "total_steps", "digits, mlp")
    assert not tail_lines(fig.axes[0]) and "thin lines" not in fig._suptitle.get_text()


def test_a_diverging_run_puts_the_loss_on_a_log_scale():
    df = evals_frame()
    assert plots.convergence(df, "time_s").axes[1].get_yscale() == "linear"
    df.loc[(df.method == "adsp") & (df.seed == 1) & (df.time_s == 3.0), "loss"] = 1e18  # one run blows up
    df.loc[(df.method == "adsp") & (df.seed == 1) & (df.time_s > 3.0), "loss"] = np.nan
    loss = plots.convergence(df, "time_s").axes[1]
    assert loss.get_yscale() == "log" and loss.get_ylabel() == "test loss (log scale)"
    median = df["loss"].median()
    assert 30 * median < loss.get_ylim()[1] <= 1000 * median  # the blow-up leaves the panel, the rest fills it


@pytest.mark.parametrize("x", ["time_s", "total_steps", "total_mb"])
def test_runs_ending_an_order_of_magnitude_apart_get_a_log_axis(x):
    df = evals_frame()
    assert plots.convergence(df, x).axes[0].get_xscale() == "linear"
    long = df[df.method == "adacomm"].copy()
    long[["time_s", "total_steps", "total_mb"]] *= 12  # one method runs 12x as long (or sends 12x as much)
    fig = plots.convergence(pd.concat([df[df.method != "adacomm"], long]), x)
    assert all(ax.get_xscale() == "symlog" and ax.get_xlabel().endswith("(log scale)") for ax in fig.axes[:2])


def test_identical_curves_of_two_methods_stay_distinguishable():
    # ADACOMM and Fixed ADACOMM draw the same curve here: colour, marker and marker positions tell them apart
    lines = data_lines(plots.convergence(evals_frame(), "time_s").axes[1])
    a, f = lines[0], lines[1]
    assert np.array_equal(a.get_ydata(), f.get_ydata())
    assert a.get_color() != f.get_color() and a.get_marker() != f.get_marker()
    assert a.get_markevery() != f.get_markevery()


def test_colour_means_the_method_and_line_style_the_setting():
    fig = plots.convergence(evals_frame(("1:1:3", "1:1:5")), "time_s")
    lines = data_lines(fig.axes[0])
    assert len(lines) == 6
    by_run = {(round(sum(mcolors.to_rgb(line.get_color())), 4), line.get_linestyle()) for line in lines}
    assert len(by_run) == 6                                   # every (method, setting) looks different
    assert len({line.get_linestyle() for line in lines}) == 2  # one style per setting
    assert len({line.get_color() for line in lines}) == 3      # one colour per method
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["adacomm (same curve as fixed_adacomm)", "fixed_adacomm", "adsp", "1:1:3", "1:1:5"]
    assert fig.legends[0].get_title().get_text() == ""  # the entries name themselves


def reach_frame() -> pd.DataFrame:
    rows = []
    for method, times, censored in (("bsp", (400.0, 500.0, 600.0), False), ("adsp", (200.0, 210.0, 220.0), False),
                                    ("fixed_adacomm", (1000.0, 1000.0, 1000.0), True)):
        for seed, t in enumerate(times):
            rows.append({"method": method, "setting": "", "seed": seed, "time_lo": t,
                         "time_hi": math.inf if censored else t, "steps_lo": 10 * t,
                         "steps_hi": math.inf if censored else 10 * t})
    return pd.DataFrame(rows)


def test_bars_with_long_setting_labels_never_print_them_over_each_other():
    # AdaComp's Fig. 4 group: six settings named by three keys, one a long speed pattern
    rows = [{"method": "adacomp", "seed": s, "time_lo": 5.0, "time_hi": 5.0, "steps_lo": 100.0, "steps_hi": 100.0,
             "setting": f"train_samples={n}, {h}, c={c}"}
            for n, h, c in [(0, "homogeneous", 0.1), (0, "homogeneous", 0.01), (0, "homogeneous", 0.001),
                            (0, "1*60:19*80:199*60", 0.001), (12000, "homogeneous", 0.001),
                            (12000, "1*60:19*80:199*60", 0.001)] for s in (0, 1)]
    fig = plots.bars(pd.DataFrame(rows), "accuracy >= 0.8")
    fig.canvas.draw()
    assert fig.get_figwidth() <= plots.MAX_WIDTH
    for ax in fig.axes[:2]:
        labels = ax.get_xticklabels()
        boxes = [t.get_window_extent() for t in labels]
        apart = all(a.x1 <= b.x0 for a, b in zip(boxes, boxes[1:]))
        assert apart or all(t.get_rotation() > 0 for t in labels)
    # short labels stay upright however many bars there are (five methods at three delays)
    rows = [{"method": m, "seed": 0, "time_lo": 5.0, "time_hi": 5.0, "steps_lo": 100.0, "steps_hi": 100.0,
             "setting": f"delay={d}"} for m in ("adsp", "bsp", "ssp", "adacomm", "fixed_adacomm")
            for d in (0.0, 4.0, 8.0)]
    fig = plots.bars(pd.DataFrame(rows), "loss <= 0.9")
    assert all(t.get_rotation() == 0 for ax in fig.axes[:2] for t in ax.get_xticklabels())


def test_bars_of_convergence_time_and_steps_with_censored_bars_hatched():
    fig = plots.bars(reach_frame(), "loss stays <= 0.9")
    time, steps = fig.axes[:2]
    assert time.get_ylabel() == "time until loss stays <= 0.9 (s)"
    assert steps.get_ylabel() == "steps until loss stays <= 0.9"
    assert [t.get_text() for t in time.get_xticklabels()] == ["bsp", "adsp", "fixed_adacomm"]
    assert {t.get_rotation() for t in time.get_xticklabels()} == {25.0}  # long names lean, never overlap
    heights = [p.get_height() for p in time.patches]
    assert heights == pytest.approx([500.0, 210.0, 1000.0])
    assert [p.get_hatch() for p in time.patches] == [None, None, "//"]   # the run that never got there
    assert [t.get_text() for t in time.texts] == [">"]                   # ... marked '>' at its budget
    assert len(time.lines) >= 2  # error bars of the measured means


def test_grouped_bars_per_setting():
    df = pd.concat([reach_frame().assign(setting="H=1.6"), reach_frame().assign(setting="H=3.2")])
    ax = plots.bars(df, "loss stays <= 0.9").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["H=1.6", "H=3.2"]
    assert len(ax.patches) == 6


def test_grouped_bars_draw_a_method_run_in_one_setting_of_its_own():
    # ADSP at two degrees beside a reference run once at another: its bars are a group of their own, not lost
    df = pd.concat([reach_frame()[lambda d: d.method != "bsp"].assign(setting="H=1.6"),
                    reach_frame()[lambda d: d.method != "bsp"].assign(setting="H=3.2"),
                    reach_frame()[lambda d: d.method == "bsp"].assign(setting="ec2")])
    ax = plots.bars(df, "loss stays <= 0.9").axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["H=1.6", "H=3.2", "bsp"]  # named by its method
    assert len(ax.patches) == 5
    assert ax.patches[-1].get_x() + ax.patches[-1].get_width() / 2 == pytest.approx(2.0)  # centred in its group


def test_against_a_swept_setting_with_intervals_and_censored_points():
    rows = []
    for method, base in (("adsp", 200.0), ("fixed_adacomm", 300.0)):
        for h, scale in (("1.6", 1.0), ("3.2", 2.0)):
            for seed in range(3):
                t = base * scale + 10 * seed
                censored = method == "fixed_adacomm" and h == "3.2"
                rows.append({"method": method, "point": f"cluster.workers={h}", "seed": seed, "cluster.workers": h,
                             "time_to_target": 1000.0 if censored else t, "time_to_target_censored": censored})
    fig = plots.against(pd.DataFrame(rows), "cluster.workers", ["time_to_target"],
                        {"cluster.workers": "workers", "time_to_target": "time until loss <= 0.9 (s)"})
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("workers", "time until loss <= 0.9 (s)")
    lines = data_lines(ax)
    assert [list(line.get_ydata()) for line in lines] == [[210.0, 410.0], [310.0, 1000.0]]  # a line per method
    assert [t.get_text() for t in ax.texts] == [">"]   # the censored point
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["adsp", "fixed_adacomm"]


def test_against_draws_an_unswept_reference_as_a_level():
    # SNAP's size sweep beside one centralized run (1 worker): a dashed level, not a point at x = 1
    rows = [{"method": "snap", "point": f"cluster.workers={n}", "seed": s, "cluster.workers": n,
             "final_accuracy": 0.9 + n / 1000} for n in (10, 20, 40) for s in (0, 1)]
    rows += [{"method": "centralized", "point": "", "seed": s, "cluster.workers": 1, "final_accuracy": 0.95}
             for s in (0, 1)]
    fig = plots.against(pd.DataFrame(rows), "cluster.workers", ["final_accuracy"], {})
    ax = fig.axes[0]
    (line,) = [ln for ln in data_lines(ax) if ln.get_linestyle() == "-"]
    assert list(line.get_xdata()) == [10.0, 20.0, 40.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "20", "40"]  # a tick per swept value
    assert ax.get_xlim()[0] > 5  # the reference's x = 1 is not on the axis
    levels = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert len(levels) == 1 and list(levels[0].get_ydata()) == [0.95, 0.95]
    assert [t.get_text() for t in ax.texts] == ["centralized (not swept)"]


def test_against_names_equal_reference_levels_once():
    # ADACOMM and Fixed ADACOMM run at one delay beside swept methods, with equal results: one shared label,
    # not two printed over each other; a distant level keeps its own
    rows = [{"method": "adsp", "point": f"network.commit_delay_s={d}", "seed": s, "network.commit_delay_s": d,
             "time_to_target": 300.0 + 20 * d} for d in (0.0, 4.0) for s in (0, 1)]
    rows += [{"method": m, "point": "", "seed": s, "network.commit_delay_s": 0.0, "time_to_target": t}
             for m, t in (("adacomm", 520.0), ("fixed_adacomm", 521.0), ("bsp", 900.0)) for s in (0, 1)]
    ax = plots.against(pd.DataFrame(rows), "network.commit_delay_s", ["time_to_target"], {}).axes[0]
    assert sorted(t.get_text() for t in ax.texts) == ["adacomm, fixed_adacomm (not swept)", "bsp (not swept)"]
    assert len([ln for ln in ax.lines if ln.get_linestyle() == "--"]) == 3
    # a name with its own parentheses takes the words inside them, not a second pair
    rows = [r for r in rows if r["method"] != "bsp"] + [{**r, "method": "ADSP (searched)"} for r in rows
                                                       if r["method"] == "bsp"]
    ax = plots.against(pd.DataFrame(rows), "network.commit_delay_s", ["time_to_target"], {}).axes[0]
    assert "ADSP (searched; not swept)" in [t.get_text() for t in ax.texts]


def test_against_sets_methods_with_equal_results_side_by_side():
    # SNAP-0 and SNO make the same iterates: their points must not hide each other at a swept setting's values
    rows = [{"method": m, "point": f"network.degree={d}", "seed": s, "network.degree": d, "iterations": 400.0}
            for m in ("snap0", "sno", "snap") for d in (2, 3, 5) for s in (0, 1)]
    ax = plots.against(pd.DataFrame(rows), "network.degree", ["iterations"], {}).axes[0]
    xs = [list(line.get_xdata()) for line in data_lines(ax)]
    assert len(xs) == 3 and xs[0] != xs[1] != xs[2]
    for x in xs:  # each within a quarter of the smallest gap (1) of its true value
        assert all(abs(v - d) <= 0.125 + 1e-12 for v, d in zip(x, (2, 3, 5)))
    assert xs[1] == [2.0, 3.0, 5.0]  # the middle method stays on the value
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "3", "5"]


def test_breakdown_throughput_staleness_decisions_axes():
    nodes = pd.DataFrame({"run": ["bsp"] * 2 + ["asp"] * 2, "worker": ["0\n×1", "1\n×3"] * 2, "index": [0, 1] * 2,
                          "computation": [33.0, 100.0, 100.0, 100.0], "communication": [0.0] * 4,
                          "waiting": [67.0, 0.0, 0.0, 0.0]})
    fig = plots.time_breakdown(nodes)
    assert [ax.get_title() for ax in fig.axes] == ["bsp", "asp"]
    assert fig.axes[0].get_ylabel() == "share of its time (%)"
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["computation", "communication", "waiting"]
    assert len(fig.axes[0].patches) == 6  # 2 workers x 3 parts
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["0\n×1", "1\n×3"]

    summary = pd.DataFrame({"run": ["bsp", "bsp", "asp"], "samples_per_s": [100.0, 110.0, 300.0],
                            "bytes_per_s": [1e6, 1e6, 3e6]})
    fig = plots.throughput(summary)
    assert [ax.get_xlabel() for ax in fig.axes] == ["training throughput (samples/s)", "traffic, all nodes (MB/s)"]
    assert [round(p.get_width()) for p in fig.axes[0].patches] == [105, 300]

    st = pd.DataFrame({"run": ["ssp"] * 3 + ["asp"] * 2, "staleness": [0, 1, 2, 0, 5]})
    fig = plots.staleness(st)
    assert fig.axes[0].get_xlabel().startswith("staleness") and fig.axes[0].get_ylabel() == "fraction of updates"


def test_many_workers_keep_the_breakdown_readable():
    # 6 runs of 36 workers: the figure stays at most MAX_WIDTH wide, and tick labels are thinned
    nodes = pd.DataFrame([{"run": f"run{r}", "worker": f"{i}\n×{1 + i / 10:g}", "index": i, "computation": 50.0,
                           "communication": 10.0, "waiting": 40.0} for r in range(6) for i in range(36)])
    fig = plots.time_breakdown(nodes)
    assert fig.get_figwidth() <= plots.MAX_WIDTH
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert len(labels) <= plots.MAX_TICK_LABELS and labels[:2] == ["0", "3"]


def test_decisions_draw_settings_as_steps_and_per_trial_values_as_points():
    rows = [{"run": "adsp", "method": "adsp", "seed": 0, "rank": 2, "time_s": 40.0 * k, "name": "c_target",
             "value": float(k)} for k in range(6)]
    rows += [{"run": "adsp", "method": "adsp", "seed": 0, "rank": 2, "time_s": t, "name": "reward", "value": v}
             for t, v in ((86.0, 0.1), (86.0, 0.3), (132.0, 0.2))]
    fig = plots.decisions(pd.DataFrame(rows))
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in shown] == ["c_target", "reward (one point per event)"]
    (steps,), (points,) = shown[0].lines, shown[1].lines
    assert steps.get_drawstyle() == "steps-post" and steps.get_linewidth() > 0
    assert points.get_linewidth() == 0 and list(points.get_ydata()) == [0.1, 0.3, 0.2]
    assert [ax.get_xlabel() for ax in shown] == ["training time (s)"] * 2


def test_commits_spread_groups_rows_by_checkpoint_not_timestamp():
    # procs writes each worker's row of one checkpoint at a slightly different time
    df = pd.DataFrame({"run": "adsp", "method": "adsp", "seed": 0,
                       "time_s": [46.771, 46.773, 46.774, 86.80, 86.81, 86.82], "checkpoint": [1, 1, 1, 2, 2, 2],
                       "worker": [0, 1, 2, 0, 1, 2], "commits": [1, 1, 0, 3, 3, 3], "target": [1, 1, 1, 3, 3, 3]})
    fig = plots.commits(df)
    counts, spread = fig.axes[:2]
    assert (counts.get_ylabel(), spread.get_ylabel()) == ("commits so far", "max - min commits over workers")
    assert len(counts.lines) == 4  # three workers and C_target
    (line,) = spread.lines
    assert list(line.get_xdata()) == [46.771, 86.80] and list(line.get_ydata()) == [1, 0]


def test_trials_figure_draws_one_line_per_search():
    df = pd.DataFrame({"run": "adsp", "method": "adsp", "seed": 0, "epoch": [0, 0, 0, 1, 1], "rate": [1, 2, 1, 1, 2],
                       "reward": [0.1, 0.3, 0.12, 0.2, 0.1]})
    ax = plots.trials(df).axes[0]
    assert ax.get_xlabel().startswith("commit rate") and ax.get_ylabel().startswith("reward")
    assert sorted(list(line.get_ydata()) for line in data_lines(ax)) == [[0.1, 0.3], [0.2, 0.1]]


def test_long_titles_wrap_to_the_figure():
    fig = plots.convergence(evals_frame(), "time_s", "a context " * 30)
    lines = fig._suptitle.get_text().splitlines()
    assert len(lines) > 2 and max(map(len, lines)) <= fig.get_figwidth() * 11


SERIES = {
    "staleness": pd.DataFrame({"time_s": [0.1, 0.2], "rank": [1, 1], "role": "ps", "worker": [0, 1],
                               "staleness": [0, 2]}),
    "decisions": pd.DataFrame({"time_s": [0.0, 1.0], "rank": [1, 1], "role": "ps", "name": "c_target",
                               "value": [2.0, 3.0]}),
    "commits": pd.DataFrame({"time_s": [4.0, 4.1, 8.0, 8.1], "rank": 2, "role": "scheduler", "checkpoint": [1, 1, 2, 2],
                             "worker": [0, 1, 0, 1], "commits": [1, 0, 2, 2], "target": [1, 1, 2, 2]}),
    "trials": pd.DataFrame({"time_s": [8.0, 8.0], "rank": 2, "role": "scheduler", "epoch": 0, "rate": [1, 2],
                            "reward": [0.1, 0.2]}),
    "rounds": pd.DataFrame({"time_s": [0.06, 0.06, 0.12, 0.12], "rank": [2, 3, 2, 3], "role": "worker",
                            "round": [1, 1, 2, 2], "iterations": [5, 1, 6, 1], "wait_s": [0.01, 0.0, 0.0, 0.0],
                            "capability": [0.01, 0.06, 0.01, 0.06]}),
    "exchange": pd.DataFrame({"time_s": [0.5, 0.5, 1.5, 1.5], "rank": [1, 2, 1, 2], "role": "worker",
                              "iteration": [0, 0, 1, 1], "sent": [40, 20, 0, 5], "values": [50, 50, 50, 50],
                              "threshold": [0.1, 0.1, 0.09, 0.09]}),
}


def test_plot_command_writes_every_figure(tmp_path):
    for seed in (0, 1):
        make_run(tmp_path / "runs", f"bsp{seed}", "bsp", seed)
        make_run(tmp_path / "runs", f"asp{seed}", "asp", seed, series=SERIES)
    result = CliRunner().invoke(cli.app, ["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "fig")])
    assert result.exit_code == 0, result.output
    names = ["convergence_time", "convergence_steps", "convergence_bytes", "bars", "time_breakdown", "throughput",
             "staleness", "decisions", "commits", "trials", "rounds", "exchange"]
    for name in names:
        for ext in ("png", "pdf"):
            path = tmp_path / "fig" / f"{name}.{ext}"
            assert path.stat().st_size > 1000
            assert str(path) in result.output
    assert (tmp_path / "fig" / "convergence_time.png").read_bytes()[:4] == b"\x89PNG"


def test_rounds_figure_shows_each_devices_iterations_and_wait():
    df = SERIES["rounds"].assign(run="esync", method="esync", setting="", seed=0)
    fig = plots.rounds(df)
    bars, points = fig.axes[0], fig.axes[1]
    assert sorted(round(p.get_height(), 6) for p in bars.patches) == [1.0, 5.5]  # device 0: 5 and 6 iterations
    assert sorted(points.lines[0].get_xdata().tolist()) == [0.01, 0.06]  # capabilities
    assert sorted(points.lines[0].get_ydata().tolist()) == [0.0, 0.01]  # longest waits


def test_rounds_figure_with_seeds_of_equal_means():
    # three seeds with the same mean iterations (a deterministic schedule): their mean, 0.37 * 3 / 3, lands an ulp
    # below the smallest, which matplotlib refused as a negative error bar
    base = SERIES["rounds"].assign(iterations=0.37, run="esync", method="esync", setting="")
    fig = plots.rounds(pd.concat([base.assign(seed=s) for s in range(3)], ignore_index=True))
    assert sorted(round(p.get_height(), 6) for p in fig.axes[0].patches) == [0.37, 0.37]
    assert (label_spans([0.36999999999999994], [0.37], [0.37]) >= 0).all()


def test_one_colour_per_method_one_line_style_per_setting_and_solid_left_to_a_method_without_settings():
    from edgeml.analysis.plots.style import Styles

    df = pd.DataFrame({"method": ["ASGD", "AdaComp", "AdaComp", "AdaComp", "Comp-ASGD", "Comp-ASGD"],
                       "setting": ["", "c = 0.1", "c = 0.01", "c = 0.001", "c = 0.1", "c = 0.01"]})
    st = Styles.of(df)
    assert st.dash["ASGD's own setting"] == "-" and "-" not in [st.dash[s] for s in st.settings]
    assert len({str(st.dash[s]) for s in st.settings}) == 3  # one style per c, shared by the methods
    both = Styles.of(df[df["method"] != "ASGD"])  # no method without settings: the first setting is solid
    assert both.dash["c = 0.1"] == "-"


def test_the_accuracy_panel_draws_each_seed_and_the_mean_with_its_interval():
    df = pd.DataFrame({"run": ["a", "a", "a", "b", "b", "b"], "best_accuracy": [0.90, 0.91, 0.92, 0.95, 0.95, 0.95],
                       "final_accuracy": [0.89, 0.90, 0.91, 0.94, 0.94, 0.94]})
    fig = plots.accuracy(df, test_samples=2000)
    ax = fig.axes[0]
    means = [c for c in ax.containers]  # one errorbar container per run
    assert len(means) == 2
    assert [m.lines[0].get_xdata()[0] for m in means] == pytest.approx([0.91, 0.95])
    dots = [line for line in ax.get_lines() if line.get_marker() == "."]
    assert sorted(x for d in dots for x in d.get_xdata()) == pytest.approx(sorted(df["best_accuracy"]))
    assert "one test sample: 0.05 pt" in ax.get_xlabel() and fig.axes[1].get_xlabel().startswith("final")


def test_the_exchange_figure_draws_the_fraction_of_values_sent_summed_over_servers():
    df = SERIES["exchange"].assign(run="snap", method="SNAP", setting="")
    df = pd.concat([df.assign(seed=0), df.assign(seed=1, sent=df["sent"] * 0 + 10)], ignore_index=True)
    fig = plots.exchange(df)
    (line,) = fig.axes[0].get_lines()
    # seed 0: 60/100 then 5/100; seed 1: 20/100 at both; the mean over seeds per iteration
    assert line.get_xdata().tolist() == [0, 1] and line.get_ydata().tolist() == pytest.approx([0.4, 0.125])
    (threshold,) = fig.axes[1].get_lines()
    assert threshold.get_ydata().tolist() == pytest.approx([0.1, 0.09])
    assert fig.axes[0].get_yscale() == "linear"  # 0.125-0.4: no share below 0.1


def test_series_figures_come_from_the_registry(tmp_path, monkeypatch):
    """A series a run wrote is drawn by the figure registered under its name, and by nothing else."""
    drawn = []

    def draw(df, context):
        drawn.append(sorted(df["run"].unique()))
        return plots.staleness(df.assign(staleness=df["depth"]), context)

    monkeypatch.setitem(plots.SERIES_FIGURES, "queue", plots.SeriesFigure(draw, ("depth",), "queue depths"))
    make_run(tmp_path, "a", "asp", series={"queue": pd.DataFrame({"time_s": [0.0], "depth": [3]}),
                                           "unregistered": pd.DataFrame({"x": [1]})})
    files = write_figures(load_runs([str(tmp_path)]), tmp_path / "fig")
    names = {f.name for f in files}
    assert "queue" in names and "unregistered" not in names and drawn == [["ASP"]]  # its name in the papers
    assert next(f for f in files if f.name == "queue").caption == "Queue depths"


def test_runs_without_series_skip_those_figures(tmp_path, no_drawing):  # names only: nothing drawn
    make_run(tmp_path, "bsp")
    written = {f.name for f in write_figures(load_runs([str(tmp_path)]), tmp_path / "fig")}
    assert written == {"convergence_time", "convergence_steps", "convergence_bytes", "convergence_ingress", "bars",
                       "time_breakdown", "throughput"}  # ingress: the run's parameter server received bytes


@pytest.mark.slow
def test_the_same_runs_draw_the_same_bytes(tmp_path):
    """Re-rendering a report leaves its figures untouched (no creation date in a PDF), so diffs show real changes."""
    make_run(tmp_path / "runs", "bsp")
    runs = load_runs([str(tmp_path / "runs")])
    write_figures(runs, tmp_path / "a")
    write_figures(runs, tmp_path / "b")
    pdfs = {p.name: p.read_bytes() for p in (tmp_path / "a").glob("*.pdf")}
    assert pdfs == {p.name: p.read_bytes() for p in (tmp_path / "b").glob("*.pdf")} and len(pdfs) >= 5


def test_a_run_without_nodes_csv_gives_one_line(tmp_path):
    (make_run(tmp_path / "runs", "old") / "nodes.csv").unlink()
    result = CliRunner().invoke(cli.app, ["plot", str(tmp_path / "runs"), "--out", str(tmp_path / "fig")])
    assert result.exit_code == 2
    assert "missing nodes.csv" in result.output and "Traceback" not in result.output


def test_staleness_hist_figure_draws_the_last_histogram_of_each_run_summed_over_seeds():
    rows = [  # (run, seed, updates, kind, lo, hi, count): cumulative writes at 10 and 20 updates
        ("adacomp", 0, 10, "global", 0, 0, 9), ("adacomp", 0, 20, "global", 0, 0, 10),
        ("adacomp", 0, 20, "global", 2, 3, 10), ("adacomp", 1, 20, "global", 1, 1, 20),
        ("adacomp", 0, 20, "parameter", 0, 0, 30), ("adacomp", 0, 20, "parameter", 1, 1, 10),
        ("asgd", 0, 20, "global", 4, 7, 20)]
    df = pd.DataFrame(rows, columns=["run", "seed", "updates", "kind", "lo", "hi", "count"])
    fig = plots.staleness_hist(df.assign(method=df["run"], setting=""))
    glob, param = fig.axes[0], fig.axes[1]
    assert [t.get_text() for t in glob.get_xticklabels()] == ["0", "1", "2-3", "4-7"]
    ada, asgd = glob.lines
    assert ada.get_ydata().tolist() == [0.25, 0.5, 0.25, 0.0] and asgd.get_ydata().tolist() == [0, 0, 0, 1.0]
    assert [line.get_ydata().tolist() for line in param.lines] == [[0.75, 0.25]]
    assert param.get_ylabel() == "fraction of entries"


def test_cost_per_iteration_reads_counters_at_least_a_gap_apart():
    import numpy as np

    from edgeml.analysis.plots.curves import _spaced

    assert _spaced(np.array([0, 1, 2, 3, 10, 11]), 3).tolist() == [True, False, False, True, False, True]
    assert _spaced(np.array([0, 1, 2]), 1).tolist() == [True, True, True]
    assert _spaced(np.array([5]), 3).tolist() == [True]


def test_against_draws_runs_of_one_method_that_differ_in_another_key_as_separate_lines():
    # SNAP with the optimized W and with Eq. (24)'s over network size: two lines, not one zig-zag
    rows = [{"method": "snap", "point": f"cluster.workers={n},snap.weights={w}", "seed": s, "cluster.workers": n,
             "iterations": (300.0 if w == "optimized" else 500.0) + n} for n in (20, 40, 60) for w in
            ("optimized", "eq24") for s in (0, 1)]
    fig = plots.against(pd.DataFrame(rows), "cluster.workers", ["iterations"], {})
    lines = data_lines(fig.axes[0])
    assert sorted(list(line.get_ydata()) for line in lines) == [[320.0, 340.0, 360.0], [520.0, 540.0, 560.0]]
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == ["snap (eq24)", "snap (optimized)"]


def test_a_setting_whose_value_holds_commas_names_its_line_whole():
    rows = [{"method": "bsp", "point": f"cluster.workers={n},cluster.hetero={h}", "seed": 0, "cluster.workers": n,
             "time": float(n)} for n in (2, 4) for h in ("[1, 2]", "[1, 3]")]
    fig = plots.against(pd.DataFrame(rows), "cluster.workers", ["time"], {})
    assert sorted(t.get_text() for t in fig.legends[0].get_texts()) == ["bsp (hetero=[1, 2])",
                                                                        "bsp (hetero=[1, 3])"]


def test_a_setting_whose_value_holds_commas_is_named_whole_by_its_field():
    from edgeml.analysis.names import setting_text
    from edgeml.analysis.plots.style import Styles

    slow = [{"worker": 0, "start": 10.0, "end": 20.0, "factor": 3.0}]
    assert setting_text("cluster.slowdowns", slow) == \
        'slowdowns=[{"worker": 0, "start": 10.0, "end": 20.0, "factor": 3.0}]'
    a, b = f"procs, {setting_text('cluster.slowdowns', slow)}", "sim, slowdowns=[]"
    fig, _ = plots.style.new_figure(1, 1, 8, 4)
    Styles(["BSP"], [a, b]).legend(fig)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["BSP", a, b]


def test_settings_are_named_by_the_experiments_labels_else_by_value_or_field_never_by_raw_keys():
    from edgeml.analysis.names import key_name, setting_text

    assert setting_text("run.backend", "sim") == "sim"                       # a word: the value alone
    assert setting_text("cluster.hetero", "H=1.6") == "H=1.6"
    assert setting_text("cluster.workers", 100) == "workers=100"             # a number: with its field
    assert setting_text("network.commit_delay_s", 8.0, {"network.commit_delay_s": "delay"}) == "delay=8"
    assert setting_text("cluster.hetero", "H=1.6", {"cluster.hetero": "H"}) == "H=1.6"  # not "H=H=1.6"
    assert setting_text("snap.weights", "eq24", {"snap.weights": "W"}) == "W=eq24"
    assert key_name("cluster.workers", {"cluster.workers": "servers"}) == "servers"
    assert key_name("network.degree") == "degree"
    # a template places the value, and the axis takes what follows it as the unit
    assert setting_text("network.commit_delay_s", 8.0, {"network.commit_delay_s": "delay {} s"}) == "delay 8 s"
    assert key_name("network.commit_delay_s", {"network.commit_delay_s": "delay {} s"}) == "delay (s)"
    assert setting_text("adacomp.c", 0.001) == "c=0.001"


def _legend(tmp_path, runs, labels=None, panel="convergence_time"):
    files = write_figures(load_runs([str(p) for p in runs]), tmp_path / "fig", panels=[panel], labels=labels)
    return files


def test_a_setting_is_named_by_the_fewest_keys_and_a_method_in_one_setting_gets_no_line_style(tmp_path):
    from edgeml.analysis.figures import figure_tables, group_settings

    # SNAP's testbed: SNAP on sim and on procs (the evaluation interval and round length vary with the backend),
    # PS once on sim: the settings are "sim" and "procs", and PS has no entry of its own, no "-"
    paths = [make_run(tmp_path, "snap-sim", "snap", config={"eval": {"interval": 8.0}, "snap": {"round_s": 8.0}}),
             make_run(tmp_path, "snap-procs", "snap", config={"run": {"backend": "procs"}, "eval": {"interval": 5.0},
                                                              "snap": {"round_s": 0.0}}),
             make_run(tmp_path, "ps", "peer_ps", config={"eval": {"interval": 8.0}}, accuracy=(0.1, 0.6, 0.7, 0.95))]
    runs = load_runs([str(p) for p in paths])
    settings = group_settings(runs)
    assert sorted(settings.values()) == ["procs", "sim", "sim"]
    evals = figure_tables(runs)["evals"]
    assert set(evals["method"]) == {"SNAP", "PS"}
    fig = plots.convergence(evals, "time_s")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels == ["SNAP", "PS", "sim", "procs"]
    assert not any("." in t or t == "-" for t in labels)
    ps = [line for line in data_lines(fig.axes[0]) if line.get_color() == fig.legends[0].legend_handles[1].get_color()]
    sim = [line for line in data_lines(fig.axes[0]) if line.get_linestyle() == "-"]
    assert ps and all(line in sim for line in ps)  # PS on sim is drawn in the style of "sim"


def test_a_setting_is_named_by_its_swept_key_where_another_key_varies_with_it(tmp_path):
    from edgeml.analysis.figures import group_settings

    # AdaComp swept over c, each c at its own tuned alpha (a key that comes first in the config and tells the
    # runs apart as well), beside Comp-ASGD over c at one alpha: one line style per c, none per alpha
    paths = [make_run(tmp_path, f"ada-{c}", "adacomp", config={"adacomp": {"lr": lr, "c": c}},
                      label=f"adacomp[adacomp.c={c}]", experiment={"point": {"adacomp.c": c}})
             for c, lr in ((0.1, 0.3), (0.01, 0.1))]
    paths += [make_run(tmp_path, f"comp-{c}", "comp_asgd", config={"comp_asgd": {"lr": 0.3, "c": c}},
                       label=f"comp_asgd[comp_asgd.c={c}]", experiment={"point": {"comp_asgd.c": c}})
              for c in (0.1, 0.01)]
    paths.append(make_run(tmp_path, "asgd", "asgd", config={"asgd": {"lr": 0.3}}))
    runs = load_runs([str(p) for p in paths])
    assert [group_settings(runs)[str(r.path)] for r in runs] == ["c=0.1", "c=0.01", "c=0.1", "c=0.01", ""]
    # without a sweep naming a key, the first keys in the configs' order that tell the runs apart, as before
    for r in runs:
        r.point = {}
    assert [group_settings(runs)[str(r.path)] for r in runs[:2]] == ["lr=0.3", "lr=0.1"]


def test_an_experiments_run_label_names_its_method_and_colours_it(tmp_path):
    from edgeml.analysis.figures import figure_tables

    paths = [make_run(tmp_path, "a", "edgegossip", config={"edgegossip": {"method": "svd_kmeans"}}),
             make_run(tmp_path, "b", "edgegossip", config={"edgegossip": {"method": "isvd_lsh"}}),
             make_run(tmp_path, "g", "gosgd")]
    runs = load_runs([str(p) for p in paths])
    runs[0].name, runs[1].name = "EdgeGossip (SVD+k-means)", "EdgeGossip (iSVD+LSH)"
    evals = figure_tables(runs)["evals"]
    assert list(dict.fromkeys(evals["method"])) == ["EdgeGossip (SVD+k-means)", "EdgeGossip (iSVD+LSH)", "GoSGD"]
    assert set(evals["setting"]) == {""}  # one colour per aggregation method: no line styles left to explain


@pytest.mark.slow
def test_figures_drawn_side_by_side_are_the_bytes_drawn_one_after_another(tmp_path):
    """``processes=2`` forks children that share the figures out; every file is the one a serial draw writes."""
    make_run(tmp_path / "runs", "bsp")
    make_run(tmp_path / "runs", "asp")
    runs = load_runs([str(tmp_path / "runs")])
    serial = write_figures(runs, tmp_path / "a")
    parallel = write_figures(runs, tmp_path / "b", processes=2)
    assert [f.name for f in serial] == [f.name for f in parallel] and len(serial) >= 5

    def files(folder):
        return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}

    assert files(tmp_path / "a") == files(tmp_path / "b") and len(files(tmp_path / "a")) == 2 * len(serial)


def test_a_figure_that_fails_in_a_child_raises_in_the_caller(tmp_path):
    """A child's error is not swallowed: its figure is drawn again in the calling process, which raises it."""
    from edgeml.analysis.figures import FigureFile, PendingFigure, draw

    def ok():
        from matplotlib.figure import Figure

        return Figure(figsize=(1, 1))

    def broken():
        raise ValueError("no such column: loss")

    pending = [PendingFigure(FigureFile(n, tmp_path / f"{n}.png", n), make)
               for n, make in (("a", ok), ("b", broken), ("c", ok), ("d", ok))]
    import multiprocessing

    for _ in range(3):  # whichever process takes the broken figure
        with pytest.raises(ValueError, match="no such column"):
            draw(pending, processes=3)
        assert not multiprocessing.active_children()


def test_against_a_named_setting_places_each_value_at_its_own_tick():
    # SNAP-0's weight matrices by name: a method run at only some of them keeps each at its own tick
    names = ("eq24", "problem22", "problem23", "optimized")
    rows = [{"method": "fixed", "point": f"snap0.weights={w}", "seed": s, "snap0.weights": w, "iterations": 60.0 + i}
            for i, w in enumerate(names) for s in (0, 1)]
    rows += [{"method": "bound", "point": f"snap0.weights={w}", "seed": s, "snap0.weights": w, "iterations": 90.0}
             for w in ("eq24", "problem23", "optimized") for s in (0, 1)]
    ax = plots.against(pd.DataFrame(rows), "snap0.weights", ["iterations"], {}).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list(names)
    fixed, bound = (list(line.get_xdata()) for line in data_lines(ax))
    assert [round(v) for v in fixed] == [0, 1, 2, 3]
    # problem23 at its tick, not at problem22's; the line joins it to optimized, not across problem22 to eq24
    assert [round(v) for v in bound] == [2, 3]
    marked = sorted(round(float(c.lines[0].get_xdata()[0])) for c in ax.containers if c.lines[0].get_marker() == "s")
    assert marked == [0, 2, 3]


def test_the_exchange_figure_keeps_equal_lines_apart_by_their_markers():
    # SNAP-0 and SNO both send every value: their lines coincide, their markers must not
    base = pd.DataFrame({"time_s": 0.0, "rank": 1, "role": "worker", "iteration": range(40), "sent": 50,
                         "values": 50, "threshold": 0.0, "seed": 0, "setting": ""})
    df = pd.concat([base.assign(run="snap0", method="SNAP-0"), base.assign(run="sno", method="SNO")])
    a, b = plots.exchange(df).axes[0].get_lines()
    assert a.get_ydata().tolist() == b.get_ydata().tolist()
    marked = [set(np.arange(40)[line.get_markevery()[0]::line.get_markevery()[1]]) for line in (a, b)]
    assert marked[0] and marked[1] and not marked[0] & marked[1]


def test_the_exchange_figure_is_linear_from_zero_within_a_decade_and_leaves_out_an_empty_threshold_panel():
    """SNAP-0 alone (threshold 0, shares 0.5-1: Fig. 2(a)'s reading): one panel, linear from 0, every iteration
    drawn, those that send nothing included; shares below 0.1 keep the log axis."""
    base = pd.DataFrame({"time_s": 0.0, "rank": 1, "role": "worker", "iteration": range(4), "sent": [50, 40, 0, 25],
                         "values": 50, "threshold": 0.0, "seed": 0, "setting": "", "run": "snap0", "method": "SNAP-0"})
    fig = plots.exchange(base)
    assert len(fig.axes) == 1 and fig.axes[0].get_yscale() == "linear" and fig.axes[0].get_ylim()[0] == 0
    (line,) = fig.axes[0].get_lines()
    assert line.get_ydata().tolist() == pytest.approx([1.0, 0.8, 0.0, 0.5])
    wide = base.assign(sent=[50, 40, 1, 25], threshold=0.1, run="snap", method="SNAP")
    fig = plots.exchange(wide)
    assert len(fig.axes) == 2 and fig.axes[0].get_yscale() == "log"


def test_a_panel_title_wider_than_its_panel_is_folded_to_fit_it_when_saved(tmp_path):
    """The constrained layout makes room for a title's lines, not its width: a long panel title ran off the
    figure (the values-sent figure's left panel). Saving folds every title to its panel's width, on more lines."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from edgeml.analysis.figures import save_png
    from edgeml.analysis.plots.style import new_figure

    fig, axes = new_figure(1, 2, 8.0, 3.0)
    long = "fraction of the parameter values sent (iterations sending none: not drawn), and then some more words"
    axes[0].set_title(long)
    axes[1].set_title("short")
    save_png(fig, tmp_path / "f.png")
    renderer = FigureCanvasAgg(fig).get_renderer()
    for ax in axes:
        assert ax.title.get_window_extent(renderer).width <= ax.get_window_extent(renderer).width
    assert axes[0].title.get_text().count("\n") >= 1 and axes[0].title.get_text().split() == long.split()
    assert axes[1].title.get_text() == "short"


def test_curves_name_the_model_their_evaluations_describe(tmp_path, no_drawing):
    """Where nodes keep models of their own (SNAP's servers), the curves say whose model they are: the worst
    node's where eval.models = worst, not "the global model" that a parameter server's runs describe."""
    def caption(*runs) -> str:
        files = write_figures(load_runs([str(p) for p in runs]), tmp_path / f"fig{len(runs)}")
        return next(f for f in files if f.name == "convergence_time").caption

    ps = make_run(tmp_path, "ps", "peer_ps")
    worst = make_run(tmp_path, "snap", "snap", config={"eval": {"models": "worst"}})
    assert "of the global model against" in caption(ps)
    assert "of the worst node's model against" in caption(worst)
    assert "of the global model or the worst node's model against" in caption(worst, ps)
    fig = plots.convergence(figure_tables(load_runs([str(worst)]))["evals"], "time_s", model="the worst node's model")
    assert "the worst node's model" in fig.texts[0].get_text()
