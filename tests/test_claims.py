"""Convergence metrics, censoring and claim verdicts on hand-made tables whose answers are known exactly."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pandas as pd
import pytest

from edgeml.analysis.claims import Claim, parse_claim
from edgeml.analysis.convergence import Target, highest_reached, reach, stays_index, stopping_index
from edgeml.analysis.stats import bootstrap_ci, mean_interval
from edgeml.analysis.verdicts import evaluate, paper_text, trend_statistic
from edgeml.errors import UserError

INF = math.inf


# ------------------------------------------------------------------------------------------ convergence


def curve(losses, dt: float = 20.0) -> pd.DataFrame:
    n = len(losses)
    return pd.DataFrame({"time_s": np.arange(n) * dt, "total_steps": np.arange(n) * 85,
                         "total_bytes": np.arange(n) * 1000, "loss": losses, "accuracy": [1 - x for x in losses]})


END = {"time": 1000.0, "steps": 4000, "bytes": 9e6}


def test_stays_below_ignores_a_curve_that_dips_once():
    # the loss touches 0.899 at t = 60 and rises above 1.0 again: it stays below 0.9 only from t = 120
    evals = curve([2.0, 1.5, 0.899, 1.05, 0.95, 0.85, 1.1, 0.88, 0.87, 0.86, 0.84, 0.83])
    assert reach(evals, Target("loss", 0.9, "first"), END).time_s == 40.0
    stays = reach(evals, Target("loss", 0.9), END)
    assert (stays.time_s, stays.steps, stays.bytes, stays.censored) == (140.0, 595.0, 7000.0, False)
    assert {q: stays.resolution[q] for q in ("time", "steps", "bytes")} == \
        {"time": 20.0, "steps": 85.0, "bytes": 1000.0}
    assert math.isnan(stays.resolution["ingress"])  # no ps_ingress_bytes column in this table
    # the mean of the last 5 evaluations first falls to 0.9 at t = 220, once the 1.1 has left the window
    assert reach(evals, Target("loss", 0.9, "smoothed"), END).time_s == 220.0
    assert stays_index(np.array([True, False, True, True])) == 2
    assert stays_index(np.array([True, True, False])) is None


def test_a_run_that_never_stays_there_is_censored_at_what_it_spent():
    evals = curve([2.0, 0.85, 1.2])  # dips below 0.9 but ends above it
    r = reach(evals, Target("loss", 0.9), END)
    assert r.censored and (r.time_s, r.steps, r.bytes) == (1000.0, 4000.0, 9e6)
    assert reach(curve([2.0, 1.5]), Target("accuracy", 0.9), END).censored


def test_the_stopping_rule_is_the_monitors():
    losses = [2.0, 1.0, 0.8, 0.71, 0.7, 0.705, 0.7, 0.69]
    i = stopping_index(np.array(losses), 2e-4, 4)
    # the first window of 4 with population variance below 2e-4, as edgeml.runtime.monitor.Monitor decides it
    expected = next(k for k in range(3, len(losses)) if statistics.pvariance(losses[k - 3:k + 1]) < 2e-4)
    assert i == expected == 6
    r = reach(curve(losses), Target("loss", rule="stopping"), END, (2e-4, 4))
    assert (r.time_s, r.censored) == (120.0, False)
    assert reach(curve(losses), Target("loss", rule="stopping"), END, (1e-9, 4)).censored
    assert stopping_index(np.array([1.0, math.nan, 1.0, 1.0]), 1e-3, 3) is None  # a gap is not stable


# ------------------------------------------------------------------------------------------ intervals


def test_interval_bootstrap_of_exact_and_censored_values():
    iv = mean_interval([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    m, lo, hi = bootstrap_ci([1.0, 2.0, 3.0])
    assert (iv.low, iv.high, iv.ci_low, iv.ci_high, iv.n) == (2.0, 2.0, lo, hi, 3) and iv.exact
    # one seed censored above: the mean is only bounded below, and the upper end is unbounded
    iv = mean_interval([1.0, 2.0, 3.0], [1.0, 2.0, INF])
    assert iv.low == 2.0 and iv.high == INF and not iv.exact and iv.ci_high == INF
    assert 1.0 <= iv.ci_low <= 2.0


# ------------------------------------------------------------------------------------------ claims


def samples(rows) -> pd.DataFrame:
    """Rows (run, seed, lo, hi[, point, spec]) of one time-to-target metric evaluated every 20 s."""
    out = []
    for r in rows:
        run, seed, lo, hi = r[:4]
        point = r[4] if len(r) > 4 else ""
        out.append({"run": run, "spec": run.split("[")[0], "point": point, "seed": seed, "metric": "time_to_target",
                    "target": "loss<=0.9", "lo": lo, "hi": hi, "resolution": 20.0, "unit": "s"})
    return pd.DataFrame(out)


def timed(run: dict, base: dict) -> pd.DataFrame:
    """{seed: time or None (censored at 1000 s)} for run 'new' and baseline 'base'."""
    rows = []
    for label, times in (("new", run), ("base", base)):
        for seed, t in times.items():
            rows.append((label, seed, 1000.0 if t is None else t, INF if t is None else t))
    return samples(rows)


def claim(kind: str = "reduction", paper=None, **kw) -> Claim:
    return Claim("t", kw.pop("metric", "time_to_target"), kw.pop("run", "new"), kind, kw.pop("baseline", "base"),
                 paper, **kw)


def verdict(c: Claim, table: pd.DataFrame, target: str = "loss<=0.9"):
    (r,) = evaluate(c, table, target, seeds_rule=False)  # the decision itself, on however many seeds
    return r


@pytest.mark.parametrize("new, paper, expected", [
    ({0: 200.0, 1: 220.0, 2: 180.0}, 0.8, "holds"),            # 80% [78%, 82%]
    ({0: 500.0, 1: 520.0, 2: 480.0}, 0.8, "weaker"),           # 50%: the whole interval below 0.9 x 80%
    ({0: 100.0, 1: 120.0, 2: 80.0}, 0.5, "stronger"),          # 90%: the whole interval above 50% / 0.9
    ({0: 1100.0, 1: 1200.0, 2: 1150.0}, 0.8, "does not hold"),  # slower in every seed
    ({0: 600.0, 1: 1400.0, 2: 900.0}, 0.3, "inconclusive"),    # the interval straddles 0 and reaches 30%
    ({0: 600.0, 1: 1400.0, 2: 900.0}, 0.8, "does not hold"),   # ... but stays below 0.9 x 80%: 80% is excluded
    ({0: 200.0, 1: 220.0, 2: 180.0}, None, "holds"),           # a direction: the interval lies above 0
])
def test_verdicts_rest_on_the_paired_interval(new, paper, expected):
    table = timed(new, {0: 1000.0, 1: 1000.0, 2: 1000.0})
    r = verdict(claim(paper=paper), table)
    assert r.verdict == expected, r
    assert r.n == 3 and r.resolution == "20 s"


def test_seeds_whose_mean_and_median_disagree_are_shown_one_by_one():
    """Five seeds: one far slower for the baseline carries the mean reduction (+), while three of five are slower
    for the run, so the median is below no effect: the result lists each seed and the median. Seeds that agree,
    a censored seed, or two seeds: nothing listed."""
    base = {s: 1000.0 for s in range(5)}
    r = verdict(claim(), timed({0: 1100.0, 1: 1050.0, 2: 100.0, 3: 900.0, 4: 1020.0}, {**base, 2: 9000.0}))
    assert r.seeds_apart.startswith("per seed 0: -10%, 1: -5%, 2: 99%, 3: 10%, 4: -2%; median -2%"), r.seeds_apart
    assert verdict(claim(), timed({0: 900.0, 1: 950.0, 2: 100.0}, {s: 1000.0 for s in range(3)})).seeds_apart == ""
    assert verdict(claim(), timed({0: 1100.0, 1: None, 2: 100.0}, {s: 1000.0 for s in range(3)})).seeds_apart == ""
    assert verdict(claim(), timed({0: 1100.0, 1: 100.0}, {0: 1000.0, 1: 9000.0})).seeds_apart == ""
    ratio = verdict(claim("ratio"), timed({0: 1100.0, 1: 1050.0, 2: 10.0}, {s: 1000.0 for s in range(3)}))
    assert "median 0.95x" in ratio.seeds_apart  # a ratio's no effect is 1
    near = {0: 1000.01, 1: 1000.01, 2: 999.9}  # apart from no effect by less than the shown precision
    assert verdict(claim("ratio"), timed(near, {s: 1000.0 for s in range(3)})).seeds_apart == ""


def test_the_measured_figure_shows_the_interval():
    r = verdict(claim(paper=0.8), timed({0: 200.0, 1: 300.0}, {0: 1000.0, 1: 1000.0}))
    assert r.measured == "75% [70%, 80%]" and r.paper == "80%"


def test_an_effect_below_one_evaluation_interval_is_not_resolved():
    # 280 s against 300 s: 7% faster, but the evaluations are 20 s apart
    r = verdict(claim(), timed({0: 290.0, 1: 280.0, 2: 290.0}, {0: 300.0, 1: 300.0, 2: 300.0}))
    assert r.verdict == "not resolved"
    r = verdict(claim(), timed({0: 260.0, 1: 260.0}, {0: 300.0, 1: 300.0}))
    assert r.verdict == "holds"  # two intervals apart


def test_an_unresolved_effect_still_excludes_a_paper_figure_beyond_the_resolution():
    # 290 s against 300 s on 20 s evaluations: the sign is not resolved, but even with every run 20 s sooner and
    # every baseline 20 s later (270 s against 320 s, 16% less) the effect stays far below the paper's 80%
    same = timed({0: 290.0, 1: 300.0, 2: 300.0}, {0: 300.0, 1: 300.0, 2: 290.0})
    r = verdict(claim(paper=0.8), same)
    assert r.verdict == "does not hold" and "same" in r.words
    # the paper's 15% lies within one evaluation interval of it: not resolved, as a direction claim is
    assert verdict(claim(paper=0.15), same).verdict == "not resolved"
    assert verdict(claim(), same).verdict == "not resolved"
    # a paper figure on the higher side ("takes 50% more time") is moved the other way round
    assert verdict(claim(paper=-0.5), same).verdict == "does not hold"
    assert verdict(claim(paper=-0.1), same).verdict == "not resolved"
    # a ratio as well: 2x faster is excluded, 1.1x is not
    assert verdict(claim("ratio", paper=2.0), same).verdict == "does not hold"
    assert verdict(claim("ratio", paper=1.1), same).verdict == "not resolved"


def test_a_measured_interval_decides_as_an_upper_bound_would():
    # a measured interval short of the paper's figure reads as a censored run's bound does (both exclude 50%)
    bound = verdict(claim(paper=0.5), timed({0: None}, {0: 1500.0}))
    measured = verdict(claim(paper=0.5), timed({0: 900.0, 1: 1100.0, 2: 1000.0}, {0: 1000.0, 1: 1000.0, 2: 1200.0}))
    assert bound.verdict.startswith("does not hold") and measured.verdict == "does not hold", measured


def test_a_margin_at_least_the_resolution_decides_an_unresolved_difference():
    # 10 s slower on 20 s evaluations: unresolved as a difference, but within a 30 s margin ("at most a little slower")
    slower = timed({0: 310.0, 1: 310.0}, {0: 300.0, 1: 300.0})
    assert verdict(claim("difference", direction="lower"), slower).verdict == "not resolved"
    assert verdict(claim("difference", direction="lower", margin=30.0), slower).verdict == "holds"
    assert verdict(claim("difference", direction="lower", margin=5.0), slower).verdict == "not resolved"


def test_an_unreached_baseline_gives_a_bound_not_100_percent():
    # the baseline never reached the target in its 1000 s: ADSP's 869 s is 13% less than the budget, no more
    r = verdict(claim(paper=0.8), timed({0: 869.0}, {0: None}))
    assert r.verdict == "inconclusive (>= 13%)" and r.measured.startswith(">= 13%")
    assert "100%" not in r.measured
    # when the bound alone proves the claim, it holds, and says it is a bound; beyond p / 0.9 it is stronger
    r = verdict(claim(paper=0.85), timed({0: 100.0}, {0: None}))
    assert r.verdict == "holds (>= 90%)"
    r = verdict(claim(paper=0.8), timed({0: 100.0}, {0: None}))
    assert r.verdict == "stronger (>= 90%)"  # 0.9 > 0.8 / 0.9
    r = verdict(claim(), timed({0: 100.0, 1: 150.0}, {0: None, 1: 800.0}))
    assert r.verdict.startswith("holds (>=")


def test_a_censored_run_can_only_fail_to_hold():
    r = verdict(claim(paper=0.5), timed({0: None}, {0: 400.0}))  # the run took more than 1000 s, base 400 s
    assert r.verdict == "does not hold (<= -150%)"
    r = verdict(claim(paper=0.3), timed({0: None}, {0: 1500.0}))  # at most 33% faster: unknown direction
    assert r.verdict == "inconclusive (<= 33%)"
    # an upper bound below the paper's figure (0.9 x 50% = 45%) excludes it: the paper's 50% was not measured
    r = verdict(claim(paper=0.5), timed({0: None}, {0: 1500.0}))
    assert r.verdict == "does not hold (<= 33%)"


def test_both_sides_censored_is_inconclusive():
    r = verdict(claim(paper=0.8), timed({0: None, 1: None}, {0: None, 1: None}))
    assert r.verdict == "inconclusive" and "censored" in r.measured and r.n == 2


def test_ratio_difference_and_direction_claims():
    table = timed({0: 250.0, 1: 250.0}, {0: 500.0, 1: 500.0})
    assert verdict(claim("ratio", 2.0), table).measured == "2.00x"
    assert verdict(claim("ratio", 2.0), table).verdict == "holds"
    assert verdict(claim("difference", 250.0), table).verdict == "holds"
    # "36 workers are slower than 18": the run's time is higher than the baseline's
    slower = timed({0: 600.0, 1: 640.0}, {0: 500.0, 1: 500.0})
    assert verdict(claim(direction="higher"), slower).verdict == "holds"
    assert verdict(claim(direction="lower"), slower).verdict == "does not hold"


def test_value_claims_use_the_interval_against_the_bound():
    rows = [{"run": "bsp", "spec": "bsp", "point": "", "seed": s, "metric": "noncompute_fraction", "target": "",
             "lo": v, "hi": v, "resolution": math.nan, "unit": ""} for s, v in enumerate([0.55, 0.60, 0.65])]
    table = pd.DataFrame(rows)

    def value(op, paper):
        return verdict(Claim("t", "noncompute_fraction", "bsp", "value", None, paper, op), table, "")

    assert value(">=", 0.5).verdict == "holds"
    assert value(">=", 0.7).verdict == "does not hold"
    assert value(">=", 0.6).verdict == "inconclusive"  # the mean is 60% but the interval reaches below
    assert value("<=", 0.5).verdict == "does not hold"
    assert value("between", (0.4, 0.7)).verdict == "holds" and value("between", (0.4, 0.7)).paper == "40% to 70%"
    assert value(">=", 0.5).measured.startswith("60% [")


def test_claims_on_a_sweep_are_checked_at_every_point():
    rows = []
    for point, (new, base) in {"H=1.6": (300.0, 400.0), "H=3.2": (300.0, 800.0)}.items():
        for seed in (0, 1):
            rows += [(f"new[cluster.hetero={point}]", seed, new, new, f"cluster.hetero={point}"),
                     (f"base[cluster.hetero={point}]", seed, base, base, f"cluster.hetero={point}")]
    table = samples(rows)
    at_every = evaluate(claim(), table, "loss<=0.9")
    assert [(r.at, r.measured, r.verdict) for r in at_every] == [
        ("cluster.hetero=H=1.6", "25%", "holds"), ("cluster.hetero=H=3.2", "62%", "holds")]
    # the point is the result's "at": the words name the runs without it
    assert at_every[1].words == "new takes 62% less time than base to reach the target"
    (one,) = evaluate(claim(paper=0.624, run="new[cluster.hetero=H=3.2]"), table, "loss<=0.9")
    assert one.verdict == "holds" and one.at == ""
    # a run named with its point: the point follows as readers see a setting, not as a config key
    assert one.words.startswith("new (H=3.2) takes 62% less time than base (H=3.2)")
    # the gap grows with H: the time difference goes from 100 s to 500 s
    trend = verdict(Claim("t", "time_to_target", "new", "trend", "base", None, direction="increasing",
                          effect="difference"), table)
    assert trend.verdict == "holds" and "change 400 s" in trend.measured
    flat = verdict(Claim("t", "time_to_target", "new", "trend", None, None, direction="increasing"), table)
    assert flat.verdict == "not resolved"  # the run's own time does not change at all


def test_trend_statistics_by_hand():
    assert trend_statistic(np.array([1.0, 2.0, 3.0]), "increasing") == pytest.approx(2.0)
    v = np.array([3.0, 1.0, 2.0, 5.0])  # the least-squares line's change over the sweep
    assert trend_statistic(v, "increasing") == pytest.approx(np.polyfit(np.arange(4.0), v, 1)[0] * 3)
    assert trend_statistic(np.array([3.0, 1.0, 2.0, 4.0]), "minimum") == pytest.approx(2.0)  # min(3, 4) - 1
    rows = [("rate[adsp.fixed_rate=%d]" % k, s, t + 10 * s, t + 10 * s, f"adsp.fixed_rate={k}")
            for k, t in ((1, 240.0), (2, 180.0), (4, 200.0), (8, 260.0)) for s in (0, 1, 2)]
    table = samples(rows)
    c = Claim("t", "time_to_target", "rate", "trend", None, None, direction="minimum")
    r = verdict(c, table)
    assert r.verdict == "holds" and "dip 60 s" in r.measured  # 240 - 180
    # a censored end that cannot be the lower end leaves the dip measured exactly
    censored = samples(rows[:-1] + [("rate[adsp.fixed_rate=8]", 2, 1000.0, INF, "adsp.fixed_rate=8")])
    assert verdict(c, censored).verdict == "holds"
    # both interior points of one seed censored: its dip is at most 260 - 1000, so only "does not hold" can be
    # proved, and the other seeds' dips (60 s) keep the mean's upper bound above zero
    late = {"adsp.fixed_rate=2", "adsp.fixed_rate=4"}
    censored = samples([(r, s, 1000.0, INF, pt) if s == 2 and pt in late else (r, s, a, b, pt)
                        for r, s, a, b, pt in rows])
    r = verdict(c, censored)
    assert r.verdict == "inconclusive (<= -207 s)" and "dip <= -207 s" in r.measured  # (60 + 60 - 740) / 3


def test_a_trend_with_a_censored_point_is_decided_on_its_bound():
    # ADSP's speed-up over BSP against the delay: BSP never reaches the target at the last delay, so the
    # speed-up there is at least budget / ADSP's time, and the change from the first point is bounded below
    def table(base_times):
        rows = []
        for k, (new, base) in enumerate(zip((300.0, 400.0, 500.0), base_times)):
            pt = f"network.commit_delay_s={4 * k}"
            for s in (0, 1, 2):
                b_lo, b_hi = (base, base) if math.isfinite(base) else (1200.0, INF)
                rows += [(f"new[{pt}]", s, new + s, new + s, pt), (f"base[{pt}]", s, b_lo, b_hi, pt)]
        return samples(rows)

    c = Claim("t", "time_to_target", "new", "trend", "base", None, direction="increasing", effect="ratio")
    grows = verdict(c, table((600.0, 1000.0, INF)))  # ratios 2.0, 2.5, >= 2.4
    assert grows.verdict == "holds (>= 0.40x)" and "8: >= 2.40x" in grows.measured
    assert "[95% CI of the bound" in grows.measured
    falls = verdict(c, table((INF, 600.0, 700.0)))  # >= 4.0, 1.5, 1.4: only an upper bound on the change
    assert falls.verdict.startswith("does not hold (<= ")
    c_down = Claim("t", "time_to_target", "new", "trend", "base", None, direction="decreasing", effect="ratio")
    assert verdict(c_down, table((INF, 600.0, 700.0))).verdict.startswith("holds (<= ")
    # censored at both ends: neither bound is finite
    both = verdict(c, table((INF, 600.0, INF)))
    assert both.verdict == "inconclusive (censored points)" and "change n/a (censored points)" in both.measured


def test_missing_runs_and_metrics_are_not_measured():
    table = timed({0: 200.0}, {1: 300.0})
    assert verdict(claim(), table).verdict.startswith("not measured: no seed in common")
    assert verdict(claim(run="nope"), table).verdict == "not measured: no run 'nope'"
    assert verdict(claim(metric="wait_fraction"), table).verdict.startswith("not measured: the runs have no metric")
    assert verdict(claim(seeds=(0,)), table).verdict == "not measured: no run 'base' with those seeds"
    # a baseline that names its own sweep point is reported as named when it is missing
    table = samples([("new[p=1]", 0, 100.0, 100.0)])
    assert verdict(claim(run="new[p=1]", baseline="base[p=1]"), table).verdict == "not measured: no run 'base[p=1]'"


@pytest.mark.parametrize("raw, message", [
    ({"text": "t", "metric": "m", "run": "r", "kind": "reduction", "baselin": "b"},
     "unknown key 'baselin'.*allowed keys are baseline, diagnosis, direction"),
    ({"text": "t", "metric": "m", "run": "r", "kind": "faster"}, "kind = 'faster'"),
    ({"text": "t", "metric": "m", "run": "r", "kind": "value"}, "needs a finite number paper_value"),
    ({"text": "t", "metric": "m", "run": "r", "kind": "value", "op": "between", "paper_value": [0.6, 0.4]},
     "low < high"),
    ({"text": "t", "metric": "m", "run": "r", "kind": "reduction", "paper_value": 0.5, "direction": "higher"},
     "contradicts"),
    ({"text": "t", "metric": "m", "run": "r", "kind": "trend"}, "needs direction"),
    ({"text": "t", "metric": "m", "run": "r", "kind": "trend", "direction": "increasing", "baseline": "b"},
     "needs effect"),
    ({"text": "t", "metric": "final_loss", "run": "r", "kind": "reduction", "targets": [0.9]},
     "targets and rule apply to"),
    ({"text": "t", "metric": "time_to_target", "run": "r", "kind": "reduction", "seeds": [0, "1"]}, "seeds"),
    ({"text": "t", "metric": "time_to_target", "run": "r", "kind": "reduction", "rule": "soon"}, "rule = 'soon'"),
    ({"text": "t", "run": "r", "kind": "reduction"}, "lacks metric"),
    ({"text": "t", "metric": "ingress_to_target", "run": "r", "kind": "ratio", "targets": [0.8, "highest"]},
     "targets must be a non-empty list of distinct numbers or 'reached'"),
    ({"text": "t", "metric": "ingress_to_target", "run": "r", "kind": "ratio", "targets": [0.8, 0.8]},
     "distinct"),
    ({"text": "t", "metric": "ingress_to_target", "run": "r", "kind": "ratio", "targets": [[0.8]]}, "targets"),
    ({"text": "t", "metric": "ingress_to_target", "run": "r", "kind": "ratio", "targets": ["reached"],
      "rule": "stopping"}, "the stopping rule takes none"),
])
def test_claims_are_validated_strictly(raw, message):
    with pytest.raises(UserError, match=message):
        parse_claim(raw, "x.toml", "bsp")
    good = parse_claim({"text": "t", "metric": "time_to_target", "run": "r", "kind": "reduction",
                        "paper_value": 0.8, "targets": [1.0, 0.9]}, "x.toml", "bsp")
    assert (good.baseline, good.targets, good.sign) == ("bsp", (1.0, 0.9), 1)
    reached = parse_claim({"text": "t", "metric": "ingress_to_target", "run": "r", "kind": "ratio",
                           "targets": [0.85, "reached"]}, "x.toml", "bsp")
    assert reached.targets == (0.85, "reached")


class _Evals:
    """What ``reach_run`` reads of a run: its evaluations, summary and config."""

    def __init__(self, accuracy: list[float], loss: list[float] | None = None):
        n = len(accuracy)
        self.evals = pd.DataFrame({"time_s": np.arange(n, dtype=float), "total_steps": np.arange(n) * 10,
                                   "total_bytes": np.arange(n) * 100, "ps_ingress_bytes": np.arange(n) * 50,
                                   "accuracy": accuracy, "loss": loss if loss is not None else [1.0] * n})
        self.summary = {"duration_s": n - 1.0, "total_steps": (n - 1) * 10, "total_bytes": (n - 1) * 100,
                        "ps_ingress_bytes": (n - 1) * 50}
        self.config = {}


@pytest.mark.parametrize("rule, accuracy, loss", [("stays", 0.81, 0.61), ("first", 0.87, 0.5)])
def test_the_highest_level_every_run_reaches_is_read_on_a_grid_by_the_rule(rule, accuracy, loss):
    # run a stays above 0.81 from its last evaluation (0.812) and first reaches 0.87, exactly on the grid
    a = _Evals([0.1, 0.87, 0.80, 0.812], [2.0, 0.5, 0.7, 0.61])
    b = _Evals([0.3, 0.9, 0.88], [1.5, 0.4, 0.45])
    assert highest_reached([a, b], Target("accuracy", 0.0, rule)) == accuracy
    assert highest_reached([b, a], Target("accuracy", 0.0, rule)) == accuracy  # whatever the order
    assert highest_reached([a, b], Target("loss", 0.0, rule)) == loss
    # every run reaches the level, and no run reaches the next one up by the rule
    for metric, level, up in (("accuracy", accuracy, accuracy + 0.005), ("loss", loss, loss - 0.005)):
        assert all(not reach(r.evals, Target(metric, level, rule), {"time": 9, "steps": 9, "bytes": 9}).censored
                   for r in (a, b))
        assert any(reach(r.evals, Target(metric, up, rule), {"time": 9, "steps": 9, "bytes": 9}).censored
                   for r in (a, b))
    assert highest_reached([], Target("accuracy", 0.0, rule)) is None
    assert highest_reached([a, _Evals([math.nan, math.nan])], Target("accuracy", 0.0, rule)) is None


def test_no_level_above_where_the_runs_start_is_no_level():
    # a run that diverges ends at chance: by "stays" it reaches no accuracy above its start (nor a loss below it),
    # so the level every run reaches is one a run had before training, where no ratio of bytes is measured: NaN
    a = _Evals([0.1, 0.87, 0.80, 0.812], [2.0, 0.5, 0.7, 0.61])
    diverged = _Evals([0.3, 0.85, 0.1], [1.5, 0.45, 1e9])
    assert math.isnan(highest_reached([a, diverged], Target("accuracy", 0.0, "stays")))
    assert math.isnan(highest_reached([a, diverged], Target("loss", 0.0, "stays")))
    # by first reach it did get somewhere
    assert highest_reached([a, diverged], Target("accuracy", 0.0, "first")) == 0.85
    # in a report: the claim's result at that target says it was not measured, and why
    from types import SimpleNamespace

    from edgeml.analysis.readings import NO_LEVEL_NOTE, claim_targets, no_level
    c = parse_claim({"text": "t", "metric": "ingress_to_target", "run": "r", "kind": "ratio",
                     "targets": [0.8, "reached"]}, "x.toml", "b")
    for run, label in ((a, "r"), (diverged, "b")):
        run.label, run.spec, run.seed = label, label, 0
    exp = SimpleNamespace(targets=[Target("accuracy", 0.8)], source=SimpleNamespace(name="x.toml"))
    fixed, none = claim_targets(exp, c, SimpleNamespace(targets=[]), [a, diverged])
    assert fixed.value == 0.8 and math.isnan(none.value) and none.note == NO_LEVEL_NOTE
    r = no_level(c, none, {}, "fig3")
    assert (r.n, r.figure, r.target) == (0, "fig3", f"accuracy ({NO_LEVEL_NOTE})")
    assert r.verdict == ("not measured: no accuracy above where the runs start is reached by every run (stays; a "
                         "run that diverged ends below its start)")


def test_a_difference_of_accuracies_is_in_percentage_points():
    rows = [{"run": r, "spec": r, "point": "", "seed": s, "metric": "final_accuracy", "target": "", "lo": v, "hi": v,
             "resolution": 0.0, "unit": ""} for r, vals in (("new", (0.80, 0.81)), ("base", (0.83, 0.83)))
            for s, v in enumerate(vals)]
    r = verdict(claim("difference", metric="final_accuracy", direction="higher"), pd.DataFrame(rows), "")
    # shown the claim's way (run - baseline: -3 and -2 pp), lowest first
    assert r.measured == "-2.5 pp [-3.0 pp, -2.0 pp]" and r.verdict == "does not hold"


def test_a_resolution_reads_as_a_short_number():
    from edgeml.analysis.verdicts import _resolution_text
    assert [_resolution_text(r, "s") for r in (19.9959, 20.0, 0.5, 1234.4)] == ["20 s", "20 s", "0.5 s", "1234 s"]
    assert _resolution_text(2.5e6, "bytes") == "2.5 MB" and _resolution_text(math.nan, "s") == "-"


def test_a_change_that_rounds_to_zero_has_no_sign():
    from edgeml.analysis.verdicts import _show
    higher = claim("difference", metric="final_accuracy", direction="higher")
    assert [_show(higher, v) for v in (0.0003, -0.0003, 0.0, -0.02, 0.02)] == ["0.0 pp", "0.0 pp", "0.0 pp",
                                                                               "+2.0 pp", "-2.0 pp"]
    assert _show(claim("difference", metric="final_accuracy"), -0.0003) == "0.0 pp"
    assert _show(claim("difference", metric="final_accuracy"), -math.inf) == "-∞"
    assert _show(higher, math.inf) == "-∞" and _show(higher, -math.inf) == "+∞"


def test_a_claim_on_the_higher_side_shows_the_runs_change_against_the_baseline():
    fewer = timed({0: 300.0, 1: 340.0}, {0: 400.0, 1: 400.0})  # "more steps than BSP": 25% and 15% fewer
    r = verdict(claim(direction="higher"), fewer)
    assert (r.paper, r.measured, r.verdict) == ("higher than base (no number given)", "-20% [-25%, -15%]",
                                                "does not hold")
    assert verdict(claim(direction="lower"), fewer).measured == "20% [15%, 25%]"  # the reduction as before
    more = timed({0: 500.0, 1: 600.0}, {0: 400.0, 1: 400.0})
    r = verdict(claim(paper=-0.3), more)  # the paper: 30% more
    assert (r.paper, r.measured, r.verdict) == ("+30%", "+38% [+25%, +50%]", "holds")
    censored = timed({0: None, 1: None}, {0: 400.0, 1: 400.0})  # the run never got there: more than +150%
    r = verdict(claim(direction="higher"), censored)
    assert r.verdict == "holds (>= +150%)" and r.measured.startswith(">= +150% [95% CI of the bound >= +150%")


def accuracies(run: tuple, base: tuple) -> pd.DataFrame:
    return pd.DataFrame([{"run": r, "spec": r, "point": "", "seed": s, "metric": "final_accuracy", "target": "",
                          "lo": v, "hi": v, "resolution": 0.0, "unit": ""}
                         for r, vals in (("new", run), ("base", base)) for s, v in enumerate(vals)])


@pytest.mark.parametrize("run, margin, expected", [
    ((0.9, 0.9), 0.0, "holds"),            # identical: "at least as accurate" holds, where a direction is undecided
    ((0.9, 0.9), None, "inconclusive"),
    ((0.895, 0.893), 0.01, "holds"),       # half a point short, within a one-point margin
    ((0.87, 0.88), 0.01, "does not hold"),  # two points short
    ((0.88, 0.905), 0.01, "inconclusive"),  # the interval straddles the margin
])
def test_a_margin_makes_a_non_inferiority_claim(run, margin, expected):
    c = claim("difference", metric="final_accuracy", direction="higher", margin=margin)
    assert verdict(c, accuracies(run, (0.9, 0.9)), "").verdict == expected
    if margin is not None:
        assert paper_text(c) == f"higher than base or short of it by at most {margin * 100:.1f} pp"


@pytest.mark.parametrize("raw", [
    {"kind": "difference", "margin": 0.01},                                # no direction
    {"kind": "difference", "direction": "higher", "margin": -0.01},
    {"kind": "difference", "direction": "higher", "margin": "1pp"},
    {"kind": "reduction", "paper_value": 0.5, "margin": 0.01},
    {"kind": "value", "paper_value": 0.5, "margin": 0.01},
])
def test_a_margin_is_refused_where_it_means_nothing(raw):
    with pytest.raises(UserError, match="margin"):
        parse_claim({"text": "t", "metric": "final_accuracy", "run": "r", **raw}, "x.toml", "b")




@pytest.mark.parametrize("new, base, expected", [
    ({0: 1000.0, 1: 1100.0, 2: 900.0}, {0: 1000.0, 1: 1000.0, 2: 1000.0}, "holds"),          # about 1x both ways
    ({0: 700.0, 1: 650.0, 2: 750.0}, {0: 1000.0, 1: 1000.0, 2: 1000.0}, "holds"),            # ahead, but by < 2x
    ({0: 1500.0, 1: 1400.0, 2: 1600.0}, {0: 1000.0, 1: 1000.0, 2: 1000.0}, "holds"),         # behind, by < 2x
    ({0: 100.0, 1: 120.0, 2: 80.0}, {0: 1000.0, 1: 1000.0, 2: 1000.0}, "does not hold"),     # 10x ahead: not "the same"
    ({0: 3000.0, 1: 2800.0, 2: 3200.0}, {0: 1000.0, 1: 1000.0, 2: 1000.0}, "does not hold"),  # 3x behind
    ({0: 300.0, 1: 1000.0, 2: 1100.0}, {0: 1000.0, 1: 1000.0, 2: 1000.0}, "inconclusive"),   # straddles 2x
])
def test_an_equivalence_claim_holds_inside_its_range_on_both_sides(new, base, expected):
    c = claim("ratio", within=(0.5, 2.0))
    assert verdict(c, timed(new, base)).verdict == expected
    assert paper_text(c) == "about the same as base: 0.50x to 2.00x"


def test_an_equivalence_claim_is_decided_below_the_resolution_only_where_its_range_is_wider():
    c = claim("ratio", within=(0.5, 2.0))
    # 1000 s against 1000 +- 100 s: 0.5x-2x is 500 s wide on the near side, more than the 20 s between evaluations
    assert verdict(c, timed({0: 1000.0, 1: 1010.0}, {0: 1000.0, 1: 1000.0})).verdict == "holds"
    # 30 s against 25-35 s: 2x is 15 s away, closer than one evaluation interval: no reading
    assert verdict(c, timed({0: 25.0, 1: 35.0}, {0: 30.0, 1: 30.0})).verdict == "not resolved"


def test_a_censored_equivalence_claim_decides_only_on_a_bound_outside_its_range():
    c = claim("ratio", within=(0.5, 2.0))
    # the baseline never reached the target in 1000 s, the run in 100 s: the ratio is at least 10x
    assert verdict(c, timed({0: 100.0, 1: 110.0}, {0: None, 1: None})).verdict.startswith("does not hold (>=")
    # ... in 900 s: at least 1.1x, which may lie inside or outside the range
    assert verdict(c, timed({0: 900.0, 1: 880.0}, {0: None, 1: None})).verdict.startswith("inconclusive (>=")
    # the run never reached it, the baseline in 100 s: at most 0.1x
    assert verdict(c, timed({0: None, 1: None}, {0: 100.0, 1: 110.0})).verdict.startswith("does not hold (<=")


@pytest.mark.parametrize("raw, message", [
    ({"kind": "ratio", "within": [0.5, 2], "paper_value": 3}, "no paper_value, direction or margin"),
    ({"kind": "ratio", "within": [0.5, 2], "direction": "lower"}, "no paper_value, direction or margin"),
    ({"kind": "value", "within": [0.5, 2], "paper_value": 1}, "applies to a reduction, ratio or difference"),
    ({"kind": "ratio", "within": [1.2, 2]}, "low < 1 < high"),
    ({"kind": "difference", "within": [-0.01]}, "low < 0 < high"),
    ({"kind": "reduction", "within": ["a", 1]}, "low < 0 < high"),
])
def test_an_equivalence_range_is_refused_where_it_means_nothing(raw, message):
    with pytest.raises(UserError, match=message):
        parse_claim({"text": "t", "metric": "time_to_target", "run": "r", **raw}, "x.toml", "b")
    ok = parse_claim({"text": "t", "metric": "time_to_target", "run": "r", "kind": "ratio", "within": [0.5, 2]},
                     "x.toml", "b")
    assert ok.within == (0.5, 2.0) and ok.sign == 1


# ------------------------------------------------------------------------------------------ seeds, words, rules


def test_one_seed_never_decides_a_claim():
    (r,) = evaluate(claim(paper=0.8), timed({0: 200.0}, {0: 1000.0}), "loss<=0.9")
    assert r.verdict == "inconclusive (one seed)" and r.provisional == "holds" and r.n == 1
    (two,) = evaluate(claim(paper=0.8), timed({0: 200.0, 1: 210.0}, {0: 1000.0, 1: 1000.0}), "loss<=0.9")
    assert two.verdict == "holds" and two.provisional == ""


@pytest.mark.parametrize("seeds, expected", [(3, "inconclusive (3 of 5 seeds)"), (4, "inconclusive (4 of 5 seeds)"),
                                             (5, "holds")])
def test_a_headline_claim_needs_five_seeds_to_read_a_decisive_verdict(seeds, expected):
    table = timed({s: 200.0 + s for s in range(seeds)}, {s: 1000.0 for s in range(seeds)})
    (r,) = evaluate(claim(paper=0.8, headline=True), table, "loss<=0.9")
    assert r.verdict == expected and r.headline
    assert r.provisional == ("" if seeds == 5 else "holds")
    # an undecided result stays what it is: three seeds that straddle no effect are inconclusive anyway
    (u,) = evaluate(claim(paper=0.1, headline=True), timed({0: 800.0, 1: 1300.0, 2: 1000.0},
                                                          {0: 1000.0, 1: 1000.0, 2: 1000.0}), "loss<=0.9")
    assert u.verdict == "inconclusive" and u.provisional == ""


def test_words_match_the_sign_for_both_claim_directions():
    lower = evaluate(claim(), timed({0: 200.0, 1: 200.0}, {0: 1000.0, 1: 1000.0}), "loss<=0.9")[0]
    assert lower.words == "new takes 80% less time than base to reach the target"
    # the same runs under a claim on the higher side: the words say what was measured, not the claim's hope
    higher = evaluate(claim(direction="higher"), timed({0: 200.0, 1: 200.0}, {0: 1000.0, 1: 1000.0}), "loss<=0.9")[0]
    assert higher.words == lower.words and higher.verdict == "does not hold"
    slower = evaluate(claim(), timed({0: 1500.0, 1: 1500.0}, {0: 1000.0, 1: 1000.0}), "loss<=0.9")[0]
    assert slower.words == "new takes 50% more time than base to reach the target"



def test_a_bound_on_a_run_that_is_slower_says_at_most_in_words_as_the_measured_bound_does():
    """A baseline censored at 1000 s took at least that long: a run that took 1500 s is at most 50% slower (the
    effect, 1 - run / base, is >= -50%); a run censored at 1000 s against a base of 500 s is at least 100%
    slower."""
    base_censored = evaluate(claim(), timed({0: 1500.0, 1: 1500.0}, {0: None, 1: None}), "loss<=0.9")[0]
    assert base_censored.words == "new takes at most 50% more time than base to reach the target"
    assert base_censored.verdict == "inconclusive (>= -50%)"
    run_censored = evaluate(claim(), timed({0: None, 1: None}, {0: 500.0, 1: 500.0}), "loss<=0.9")[0]
    assert run_censored.words == "new takes at least 100% more time than base to reach the target"
    assert run_censored.verdict.endswith("(<= -100%)")
    faster = evaluate(claim(), timed({0: 200.0, 1: 200.0}, {0: None, 1: None}), "loss<=0.9")[0]
    assert faster.words == "new takes at least 80% less time than base to reach the target"

def test_the_words_call_runs_by_their_names_in_the_papers_unless_two_would_read_alike():
    table = timed({0: 200.0, 1: 200.0}, {0: 1000.0, 1: 1000.0})
    (r,) = evaluate(claim(), table, "loss<=0.9", names={"new": "ADSP", "base": "BSP"})
    assert r.words == "ADSP takes 80% less time than BSP to reach the target"
    # two ADSP runs (a fixed rate against the searched one) keep the experiment's names, which tell them apart
    (same,) = evaluate(claim(), table, "loss<=0.9", names={"new": "ADSP", "base": "ADSP"})
    assert same.words == "new takes 80% less time than base to reach the target"
    # a run named with its sweep point keeps the point after its name
    from edgeml.analysis.verdicts import words_names

    assert words_names(["new[cluster.hetero=H=2]", "base"], {}, {"new": "ADSP", "base": "BSP"}) == \
        ["ADSP (H=2)", "BSP"]
    assert words_names(["esync[data.partition=iid,network.commit_delay_s=8.0]", "ssgd"], {},
                       {"esync": "ESync", "ssgd": "SSGD"}) == ["ESync (iid, commit_delay_s=8)", "SSGD"]
    assert words_names(["fixed[adsp.fixed_rate=1]", "base"], {}, {"fixed": "ADSP (fixed rate)", "base": "BSP"}) == \
        ["ADSP (fixed rate, fixed_rate=1)", "BSP"]
    assert words_names(["new[cluster.hetero=H=2]", "base"], {"at": "cluster.hetero=H=2"},
                       {"new": "ADSP", "base": "BSP"}) == ["ADSP", "BSP"]


def _accuracy(run: list[float], base: list[float], metric: str = "final_accuracy") -> pd.DataFrame:
    rows = [{"run": label, "spec": label, "point": "", "seed": s, "metric": metric, "target": "", "lo": v, "hi": v,
             "resolution": math.nan, "unit": ""} for label, vs in (("new", run), ("base", base))
            for s, v in enumerate(vs)]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("direction, run, words", [
    ("higher", [0.93, 0.94], "new 1.5 pt more accurate than base"),   # crashes: more accurate, said so
    ("higher", [0.90, 0.91], "new 1.5 pt less accurate than base"),
    ("lower", [0.90, 0.91], "new 1.5 pt less accurate than base"),
])
def test_an_accuracy_difference_says_which_run_is_more_accurate(direction, run, words):
    c = claim("difference", metric="final_accuracy", direction=direction)
    (r,) = evaluate(c, _accuracy(run, [0.915, 0.925]))
    assert r.words == words


def test_a_ratio_is_said_as_the_paper_says_it():
    c = claim("ratio", 15.0, metric="bytes_per_s")  # "ESync sends 1/15 of ASGD's bytes per second"
    (r,) = evaluate(c, _accuracy([1.0, 1.0], [52.0, 52.0], metric="bytes_per_s"))
    assert r.words == "new: bytes per second 1/52 of base's" and r.verdict == "stronger"
    t = claim("ratio", 7.0)
    (fast,) = evaluate(t, timed({0: 100.0, 1: 100.0}, {0: 700.0, 1: 700.0}), "loss<=0.9")
    assert fast.words == "new reaches the target 7x as fast as base" and fast.verdict == "holds"


def test_first_reach_and_stays_differ_on_an_oscillating_series():
    """A curve that dips below the target, rises back above it and settles later: first reach takes the dip,
    stays the settling; the moving average over a stated window lies between."""
    loss = [1.2, 0.85, 1.1, 0.88, 1.05, 0.95, 0.8, 0.7, 0.6, 0.6]
    evals = pd.DataFrame({"time_s": [10.0 * i for i in range(len(loss))], "total_steps": range(len(loss)),
                          "total_bytes": [0.0] * len(loss), "loss": loss})
    end = {"time": 100.0, "steps": 10, "bytes": 0.0}
    first = reach(evals, Target("loss", 0.9, "first"), end)
    stays = reach(evals, Target("loss", 0.9, "stays"), end)
    smooth = reach(evals, Target("loss", 0.9, "smoothed", window=3), end)
    assert (first.time_s, stays.time_s, smooth.time_s) == (10.0, 60.0, 70.0)
    assert Target("loss", 0.9, "first").key == "loss<=0.9 (first reach)" and Target("loss", 0.9).key == "loss<=0.9"
    assert Target("loss", 0.9, "smoothed", window=3).key == "loss<=0.9 (moving average of 3)"


def test_diagnoses_are_parsed_strictly():
    raw = {"text": "t", "metric": "time_to_target", "run": "r", "kind": "reduction", "headline": True,
           "reading": "open", "diagnosis": {"departures": ["budget"], "cause": "budget",
                                            "text": "the runs stop before BSP settles", "ablations": ["r-long"]}}
    c = parse_claim(raw, "x.toml", "b")
    assert c.headline and c.diagnosis.cause == "budget" and c.diagnosis.ablations == ("r-long",)
    assert c.diagnosis.departures == ("budget",) and c.reading.open
    pair = {**raw["diagnosis"], "ablations": ["r-long", "r-net vs b-net"]}
    assert parse_claim({**raw, "diagnosis": pair}, "x.toml", "b").diagnosis.pairs == [("r-long", None),
                                                                                       ("r-net", "b-net")]
    cited = {"departures": ["budget"]}
    for bad, message in (({**cited, "cause": "luck", "text": "x"}, "cause = 'luck': choose one of setting"),
                         ({**cited, "cause": "budget"}, "needs text"),
                         ({**cited, "cause": "budget", "text": "x", "runs": []}, "unknown key 'runs'"),
                         ({**cited, "cause": "budget", "text": "x", "ablations": "r"}, "list of run names"),
                         ({**cited, "text": "x", "ablations": ["a vs b vs c"]}, "pairs \"run vs baseline"),
                         ({**cited, "text": "x", "ablations": [" vs b"]}, "list of run names"),
                         ({"cause": "budget", "text": "x"}, "cites the ledger rows"),
                         ({**cited, "cause": "claim", "text": "x"}, "needs the ablations"),
                         ("budget", "must be a table")):
        with pytest.raises(UserError, match=message):
            parse_claim({**raw, "diagnosis": bad}, "x.toml", "b")
    with pytest.raises(UserError, match="a headline claim states how the paper defines"):
        parse_claim({k: v for k, v in raw.items() if k != "reading"}, "x.toml", "b")
    with pytest.raises(UserError, match="headline = 'yes'"):
        parse_claim({**raw, "headline": "yes"}, "x.toml", "b")
    with pytest.raises(UserError, match="window"):
        parse_claim({**raw, "window": 3}, "x.toml", "b")   # a window without the smoothed rule


def test_a_bound_on_a_ratio_turns_round_when_said_of_the_run():
    """Ingress ratio ASGD / AdaComp known only as a bound: where AdaComp never reached the target the ratio is
    at most 28x, so AdaComp's ingress is at least 1/28 of ASGD's; where ASGD never did, the other way round."""
    c = claim("ratio", 191.0, metric="ingress_to_target")

    def case(new_hi: float, base_hi: float):
        rows = samples([("new", s, 10.0, new_hi) for s in (0, 1)] + [("base", s, 280.0, base_hi) for s in (0, 1)])
        (r,) = evaluate(c, rows.assign(metric="ingress_to_target"), "loss<=0.9")
        return r

    run_censored, base_censored = case(INF, 280.0), case(10.0, INF)
    assert run_censored.measured.startswith("<= 28.00x") and "at least 1/28 of base's" in run_censored.words
    assert base_censored.measured.startswith(">= 28.00x") and "at most 1/28 of base's" in base_censored.words


def test_a_claim_reads_the_average_model_where_its_runs_evaluate_another():
    """``models = ["run", "average"]``: each target read on the run's own loss and on the servers' average model's
    (``average_loss``); a run that evaluates one model (no such column) reads its own loss for both."""
    from types import SimpleNamespace

    from edgeml.analysis.readings import claim_targets
    from edgeml.errors import UserError

    raw = {"text": "t", "metric": "iterations_to_target", "run": "r", "kind": "reduction", "targets": [0.5, 0.4]}
    c = parse_claim({**raw, "models": ["run", "average"]}, "x.toml", "b")
    exp = SimpleNamespace(targets=[Target("loss", 0.6)], source=None)
    ts = claim_targets(exp, c, None, [])
    assert [(t.metric, t.value) for t in ts] == [("loss", 0.5), ("loss", 0.4), ("average_loss", 0.5),
                                                 ("average_loss", 0.4)]
    assert ts[2].short == "average_loss<=0.5" and ts[2].lower
    assert [t.metric for t in claim_targets(exp, parse_claim(raw, "x.toml", "b"), None, [])] == ["loss", "loss"]
    worst = pd.DataFrame({"time_s": [0, 1, 2, 3], "loss": [0.9, 0.7, 0.45, 0.3],
                          "average_loss": [0.9, 0.45, 0.3, 0.3]})
    one = worst.drop(columns="average_loss")
    budget = {"time": 3.0, "steps": 0, "bytes": 0, "ingress": 0, "iterations": 0, "cost": 0}
    assert reach(worst, ts[0], budget).value("time") == 2 and reach(worst, ts[2], budget).value("time") == 1
    from edgeml.analysis.convergence import run_evals

    averaged = SimpleNamespace(evals=one, config={"eval": {"models": "average"}})  # its loss is the average's
    assert reach(run_evals(averaged, "average_loss"), ts[2], budget).value("time") == 2
    older = SimpleNamespace(evals=one, config={"eval": {"models": "worst"}})  # the worst server's: no average read
    assert reach(run_evals(older, "average_loss"), ts[2], budget).censored
    for bad, words in (({"models": ["worst"]}, "models must be"), ({"models": "average"}, "models must be"),
                       ({"models": ["run", "run"]}, "models must be"),
                       ({"models": ["average"], "rule": "stopping", "targets": None}, "models applies")):
        with pytest.raises(UserError, match=words):
            parse_claim({k: v for k, v in {**raw, **bad}.items() if v is not None}, "x.toml", "b")
    with pytest.raises(UserError, match="models applies"):
        parse_claim({"text": "t", "metric": "final_accuracy", "run": "r", "kind": "value", "op": ">=",
                     "paper_value": 0.5, "models": ["average"]}, "x.toml", "b")


def test_the_first_model_is_the_claims_reading_and_the_others_are_never_headline():
    from edgeml.analysis.readings import secondary

    raw = {"text": "t", "metric": "iterations_to_target", "run": "r", "kind": "reduction", "targets": [0.5],
           "headline": True, "reading": "open"}
    first_run = parse_claim({**raw, "models": ["run", "average"]}, "x.toml", "b")
    first_average = parse_claim({**raw, "models": ["average", "run"]}, "x.toml", "b")
    loss, average = Target("loss", 0.5), Target("average_loss", 0.5)
    assert not secondary(first_run, loss) and secondary(first_run, average)
    assert secondary(first_average, loss) and not secondary(first_average, average)
    alone = parse_claim({**raw, "models": ["average"]}, "x.toml", "b")
    assert not secondary(alone, average) and not secondary(alone, None) and not secondary(first_run, None)


def test_a_claim_on_the_average_model_under_the_experiments_stopping_rule_is_refused():
    from types import SimpleNamespace
    from pathlib import Path

    from edgeml.analysis.readings import claim_targets
    from edgeml.errors import UserError

    c = parse_claim({"text": "t", "metric": "time_to_target", "run": "r", "kind": "reduction", "models": ["average"]},
                    "x.toml", "b")
    exp = SimpleNamespace(targets=[Target("loss", rule="stopping")], source=Path("x.toml"))
    with pytest.raises(UserError, match="stopping rule reads the run's own loss"):
        claim_targets(exp, c, None, [])
