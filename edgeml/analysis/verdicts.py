"""Verdicts: a claim (``edgeml.analysis.claims``) decided on runs over seeds with bootstrap intervals,
censoring and resolution, and the text that reports it.

The data are a tidy *samples* table (one row per run, seed, metric and target: ``lo``/``hi`` equal when
measured, ``hi`` infinite when a run never reached the target) built by
``edgeml.analysis.compare.claim_samples``. Duplicate runs of one seed are one sample (their mean). Each seed
gives one value (an interval when censored); the verdict rests on the 95% bootstrap interval of their mean
(``edgeml.analysis.stats``):

- **holds**: the interval lies on the paper's side of neutral (0 for reductions and differences, 1 for
  ratios) and reaches the paper's figure within 10% (it overlaps [0.9 p, p / 0.9]); a direction claim holds
  when the interval lies on its side. A value claim holds when the interval lies within ``op``'s bound.
- **weaker** / **stronger**: on the paper's side, but entirely below 0.9 p / above p / 0.9.
- **does not hold**: the interval lies on the other side (or beyond a value claim's bound), or, for a claim
  with the paper's figure, it lies entirely below 0.9 p without lying on the paper's side: the paper's figure
  is excluded, whichever the effect's sign ("0% [-3%, 3%]" where the paper says 80% less), as an upper bound
  below it excludes it (below).
- **inconclusive**: the interval straddles neutral (or the bound); with a censored side only a bound is
  known, and the verdict is decisive only when the bound alone proves it, else "inconclusive (>= x)": a lower
  bound on the paper's side reads "holds (>= x)" once it reaches 0.9 p and "stronger (>= x)" beyond p / 0.9;
  an upper bound reads "does not hold (<= x)" when it lies on the other side of neutral, or when it excludes
  the paper's figure (below 0.9 p: whichever side the effect is on, the paper's figure was not measured; "at
  most 28x" where the paper says 191x). Both sides censored: inconclusive.
- **not resolved**: a time-to-target effect smaller than one evaluation interval (the time resolution): the
  mean paired difference lies within one interval of zero; a ``difference`` claim whose margin is at least the
  resolution is decided on its margin instead. Such an effect still reads "does not hold" when the paper's
  figure lies beyond it by more than the resolution: when the interval stays below 0.9 p with every seed's
  times moved one evaluation interval the paper's way (the run's sooner, the baseline's later).

Seeds (``seed_rule``): a verdict rests on at least ``MIN_SEEDS`` seeds, else it is "inconclusive (one seed)";
a headline claim reads holds, weaker, stronger or does not hold only on ``HEADLINE_SEEDS``, else "inconclusive
(3 of 5 seeds)". What the runs read before that rule is kept (``Result.provisional``) and reported beside it.

Every measured effect is also said in words (``Result.words``), oriented to the claim and in its kind's unit:
"fig4-adsp: time to the target 45% lower than fig4-bsp's", "esync: bytes per second 1/52 of asgd's".

Shown numbers point the claim's way: a ``reduction`` or ``difference`` claim on the higher side (``direction =
"higher"`` or a negative ``paper_value``) shows the run's change against the baseline, run / baseline - 1 or
run - baseline, so "ADSP carries out more steps than BSP" measured as -23% reads as 23% fewer, and the
paper's figure is shown the same way. The verdicts do not depend on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from edgeml.analysis.claims import HEADLINE_SEEDS, MIN_SEEDS, NEUTRAL, PAIR_KINDS, Claim
from edgeml.analysis.names import point_text
from edgeml.analysis.stats import Interval, mean_interval, pair_effect

HOLDS_SHARE = 0.9
"""A claim holds when its interval reaches the paper's figure within 1 - HOLDS_SHARE (10%)."""


@dataclass(frozen=True)
class Result:
    claim: str
    target: str
    paper: str
    measured: str
    n: int
    resolution: str
    verdict: str
    figure: str | None = None
    at: str = ""  # the sweep point, for a claim checked at every point of a sweep
    words: str = ""  # the measured effect in words ("esync: bytes per second 1/52 of asgd's")
    provisional: str = ""  # what the runs read where ``seed_rule`` made the verdict inconclusive
    headline: bool = False
    other_rule: str = ""  # the other arrival rule's reading, where it disagrees (``edgeml.reproduce.render``)
    ablations: tuple = ()  # (run, measured, verdict) of each ablation of the claim's diagnosis


HEADLINE_MARK = "**H** "
"""Before a headline claim's text in a report's tables (``edgeml.reproduce.check`` reads past it)."""
DECISIVE = ("holds", "weaker", "stronger", "does not hold")
"""The verdicts that decide a claim (with or without a bound: "holds (>= 40%)")."""
NEEDS_DIAGNOSIS = ("weaker", "does not hold", "inconclusive", "not resolved")
"""The verdicts a claim owes a diagnosis for (why it does not read holds: ``edgeml.analysis.claims.Diagnosis``)."""


def verdict_kind(verdict: str) -> str:
    """A verdict's kind: "holds (>= 40%)" is holds, "inconclusive (one seed)" inconclusive, "not measured: no
    run 'x'" not measured."""
    return verdict.split(" (")[0].split(":")[0]


def seed_rule(result: Result, claim: Claim) -> Result:
    """``result`` with its verdict made inconclusive where too few seeds decided it (the module docstring): one
    seed never decides; a headline claim needs ``HEADLINE_SEEDS`` to read a decisive verdict."""
    v = result.verdict
    if v.startswith("not measured") or result.n == 0:
        return result
    if result.n < MIN_SEEDS:
        return replace(result, verdict="inconclusive (one seed)", provisional=v)
    if claim.headline and result.n < HEADLINE_SEEDS and v.split(" (")[0] in DECISIVE:
        return replace(result, verdict=f"inconclusive ({result.n} of {HEADLINE_SEEDS} seeds)", provisional=v)
    return result


def _per_seed(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per seed (duplicate runs of a seed averaged): index seed, columns lo, hi, resolution."""
    return samples.groupby("seed").agg(lo=("lo", "mean"), hi=("hi", "mean"), resolution=("resolution", "mean"))


def decide(iv: Interval, claim: Claim, lo_open: bool, hi_open: bool, resolved: bool,
           favoured: Interval | None = None) -> str:
    """The verdict for a pair or trend claim from the mean effect's interval (see the module docstring).

    ``favoured``: the interval with every time moved one resolution step the paper's way (``_favoured``); an
    effect below the resolution still excludes the paper's figure when this interval does."""
    neutral = 0.0 if claim.kind == "trend" else NEUTRAL[claim.kind]  # a trend's statistic: no change is 0
    if lo_open and hi_open:
        return "inconclusive"
    s = claim.sign
    p = abs(claim.paper_value - neutral) if claim.kind in PAIR_KINDS and claim.paper_value is not None else None

    def short_of_paper(v: Interval) -> bool:  # the whole interval below 0.9 p on the paper's side
        top = v.ci_high - neutral if s > 0 else neutral - v.ci_low
        return p is not None and claim.margin is None and bool(top < HOLDS_SHARE * p)

    if not resolved:
        return "does not hold" if favoured is not None and short_of_paper(favoured) else "not resolved"
    lo, hi = (iv.ci_low - neutral, iv.ci_high - neutral) if s > 0 else (neutral - iv.ci_high, neutral - iv.ci_low)
    if s < 0:
        lo_open, hi_open = hi_open, lo_open
    bound = _bound_text(iv, claim, lo_open if s > 0 else hi_open, hi_open if s > 0 else lo_open)
    if claim.margin is not None:  # non-inferiority: short of the baseline by up to the margin still holds
        lo, hi = lo + claim.margin, hi + claim.margin
        if hi_open:
            return f"holds ({bound})" if lo >= 0 else f"inconclusive ({bound})"
        if lo_open:
            return f"does not hold ({bound})" if hi < 0 else f"inconclusive ({bound})"
        return "holds" if lo >= 0 else "does not hold" if hi < 0 else "inconclusive"
    if hi_open:  # only a lower bound on the effect
        if lo > 0 and p is not None and lo > p / HOLDS_SHARE:
            return f"stronger ({bound})"
        return f"holds ({bound})" if lo > 0 and (p is None or lo >= HOLDS_SHARE * p) else f"inconclusive ({bound})"
    if lo_open:  # only an upper bound: below neutral, or below the paper's figure, it decides
        return f"does not hold ({bound})" if hi < 0 or short_of_paper(iv) else f"inconclusive ({bound})"
    if lo > 0:
        if p is None:
            return "holds"
        return "weaker" if hi < HOLDS_SHARE * p else "stronger" if lo > p / HOLDS_SHARE else "holds"
    return "does not hold" if hi < 0 or short_of_paper(iv) else "inconclusive"


def decide_value(iv: Interval, claim: Claim, hi_open: bool, resolved: bool) -> str:
    lo, hi = iv.ci_low, iv.ci_high
    if not resolved:
        return "not resolved"
    if claim.op == ">=":
        verdict = "holds" if lo >= claim.paper_value else "does not hold" if hi < claim.paper_value else "inconclusive"
    elif claim.op == "<=":
        verdict = "holds" if hi <= claim.paper_value else "does not hold" if lo > claim.paper_value else "inconclusive"
    else:
        a, b = claim.paper_value
        verdict = "holds" if a <= lo and hi <= b else "does not hold" if hi < a or lo > b else "inconclusive"
    return f"{verdict} ({_bound_text(iv, claim, False, True)})" if hi_open else verdict


def evaluate(claim: Claim, samples: pd.DataFrame, target: str = "", seeds_rule: bool = True,
             names: dict[str, str] | None = None) -> list[Result]:
    """Evaluate ``claim`` on the samples table at one target (``Target.short``; "" for other metrics): one
    result, or one per sweep point when the claim names a swept run. ``seeds_rule``: apply ``seed_rule`` (off:
    what the samples read, however few seeds they have). ``names``: what the words call each run, by its
    experiment name ("fig4-adsp": "ADSP"; ``words_names``)."""
    rule = seed_rule if seeds_rule else (lambda result, claim: result)
    rows = samples[(samples["metric"] == claim.metric) & (samples["target"] == target)]
    result = dict(claim=claim.text, target=target, paper=paper_text(claim, names or {}), figure=claim.figure,
                  headline=claim.headline)

    def missing(why: str) -> list[Result]:
        return [Result(**result, measured="n/a", n=0, resolution="-", verdict=f"not measured: {why}")]

    if samples.empty or not (samples["metric"] == claim.metric).any():
        return missing(f"the runs have no metric {claim.metric!r}")
    if claim.seeds is not None:
        rows = rows[rows["seed"].isin(claim.seeds)]
    unit = rows["unit"].iloc[0] if len(rows) else ""
    if claim.kind == "trend":
        return [rule(_evaluate_trend(claim, rows, result, lambda why: missing(why)[0], unit), claim)]
    if (rows["run"] == claim.run).any():
        return [rule(_evaluate_one(claim, claim.run, rows, result, unit, names or {}), claim)]
    points = rows.loc[rows["spec"] == claim.run, ["run", "point"]].drop_duplicates()
    if points.empty:
        return missing(f"no run {claim.run!r}" + (" with those seeds" if claim.seeds else ""))
    return [rule(_evaluate_one(claim, label, rows, {**result, "at": point}, unit, names or {}), claim)
            for label, point in points.values]


def _evaluate_one(claim: Claim, label: str, rows: pd.DataFrame, result: dict, unit: str,
                  names: dict[str, str]) -> Result:
    def missing(why: str) -> Result:
        return Result(**result, measured="n/a", n=0, resolution="-", verdict=f"not measured: {why}")

    run = _per_seed(rows[rows["run"] == label])
    if claim.kind == "value":
        iv = mean_interval(run["lo"], run["hi"])
        hi_open = bool(np.isinf(run["hi"]).any())
        res = float(run["resolution"].max())
        resolved = not (unit and iv.exact and claim.op != "between" and abs(iv.low - claim.paper_value) < res)
        return Result(**result, measured=_measured(iv, claim, False, hi_open), n=iv.n,
                      resolution=_resolution_text(res, unit), verdict=decide_value(iv, claim, hi_open, resolved),
                      words=effect_words(claim, iv, words_names([label], result, names)[0], "", False, hi_open))
    base_label = claim.baseline
    if not (rows["run"] == base_label).any() and "[" in label and "[" not in base_label:
        base_label = claim.baseline + label[label.index("["):]  # a sweep point pairs with the same point
    if not (rows["run"] == base_label).any():
        return missing(f"no run {base_label!r}" + (" with those seeds" if claim.seeds else ""))
    base = _per_seed(rows[rows["run"] == base_label])
    seeds = run.index.intersection(base.index)
    if seeds.empty:
        return missing(f"no seed in common ({label}: {', '.join(map(str, run.index))}; {base_label}: "
                       f"{', '.join(map(str, base.index))})")
    r, b = run.loc[seeds], base.loc[seeds]
    lo, hi = pair_effect(claim.kind, r["lo"], r["hi"], b["lo"], b["hi"])
    iv = mean_interval(lo, hi)
    lo_open, hi_open = bool(np.isinf(r["hi"]).any()), bool(np.isinf(b["hi"]).any())
    res = float(max(r["resolution"].max(), b["resolution"].max()))
    d_lo, d_hi = pair_effect("difference", r["lo"], r["hi"], b["lo"], b["hi"])
    resolved = not (unit and -res < float(np.mean(d_lo)) and float(np.mean(d_hi)) < res)
    if claim.kind == "difference" and claim.margin is not None and claim.margin >= res:
        resolved = True  # a difference below the resolution lies within a margin at least as wide: decide on it
    favoured = None if resolved or lo_open or hi_open else _favoured(claim, r, b, res)
    return Result(**result, measured=_measured(iv, claim, lo_open, hi_open), n=iv.n,
                  resolution=_resolution_text(res, unit),
                  verdict=decide(iv, claim, lo_open, hi_open, resolved, favoured),
                  words=effect_words(claim, iv, *words_names([label, base_label], result, names), lo_open,
                                     hi_open))


def _favoured(claim: Claim, run: pd.DataFrame, base: pd.DataFrame, res: float) -> Interval | None:
    """The effect's interval with every seed's time moved one resolution step the paper's way (the run's
    sooner and the baseline's later, or the other way round for a claim on the higher side): what the effect
    could be at most, were every time off by a whole evaluation interval in the paper's favour. None where a
    time would reach zero."""
    step = claim.sign * res
    r_lo, r_hi, b_lo, b_hi = run["lo"] - step, run["hi"] - step, base["lo"] + step, base["hi"] + step
    if min(r_lo.min(), b_lo.min()) <= 0:
        return None
    return mean_interval(*pair_effect(claim.kind, r_lo, r_hi, b_lo, b_hi))


def _evaluate_trend(claim: Claim, rows: pd.DataFrame, result: dict, missing, unit: str) -> Result:
    run = rows[rows["spec"] == claim.run]
    if run.empty:
        return missing(f"no sweep {claim.run!r}")
    points = list(dict.fromkeys(run["point"]))
    if len(points) < (3 if claim.direction == "minimum" else 2):
        return missing(f"{claim.run!r} sweeps {len(points)} point(s): too few for the {claim.direction} trend")
    base = rows[rows["spec"] == claim.baseline] if claim.baseline else None
    if base is not None and base.empty:
        return missing(f"no sweep {claim.baseline!r}")
    per_point: list[pd.DataFrame] = []
    for pt in points:
        r = _per_seed(run[run["point"] == pt])
        if base is None:
            per_point.append(r[["lo", "hi", "resolution"]])
            continue
        b = _per_seed(base[base["point"] == pt])
        seeds = r.index.intersection(b.index)
        lo, hi = pair_effect(claim.effect, r.loc[seeds, "lo"], r.loc[seeds, "hi"], b.loc[seeds, "lo"],
                             b.loc[seeds, "hi"])
        per_point.append(pd.DataFrame({"lo": lo, "hi": hi, "resolution": np.maximum(
            r.loc[seeds, "resolution"], b.loc[seeds, "resolution"])}, index=seeds))
    seeds = sorted(set.intersection(*(set(p.index) for p in per_point)))
    if not seeds:
        return missing(f"no seed at every point of {claim.run!r}")
    lo = np.array([[p.loc[s, "lo"] for p in per_point] for s in seeds], dtype=float)
    hi = np.array([[p.loc[s, "hi"] for p in per_point] for s in seeds], dtype=float)
    bounds = np.array([trend_bounds(a, b, claim.direction) for a, b in zip(lo, hi)]).reshape(len(seeds), 2)
    iv = mean_interval(bounds[:, 0], bounds[:, 1])
    per_res = np.array([p["resolution"].max() for p in per_point], dtype=float)
    res = float(np.nanmax(per_res)) if np.isfinite(per_res).any() else math.nan  # none for an untimed metric
    timed = unit and claim.effect in ("value", "difference")
    means = ", ".join(f"{pt.split('=', 1)[-1]}: {_point_text(claim, p)}" for pt, p in zip(points, per_point))
    name = "dip" if claim.direction == "minimum" else "change"
    if (bounds[:, 0] == bounds[:, 1]).all():  # every seed's statistic measured (censoring, if any, did not matter)
        resolved = not (timed and abs(iv.low) < res)
        verdict, shown = decide(iv, claim, False, False, resolved), _measured(iv, claim, False, False)
    else:
        verdict, shown = _decide_trend_bound(iv, bounds, claim, res if timed else 0.0)
    return Result(**result, measured=f"{means}; {name} {shown}", n=len(seeds),
                  resolution=_resolution_text(res, unit if timed else ""), verdict=verdict,
                  words=_trend_words(claim, iv, bool((bounds[:, 0] == bounds[:, 1]).all())))


def _decide_trend_bound(iv: Interval, bounds: np.ndarray, claim: Claim, res: float) -> tuple[str, str]:
    """(verdict, measured) for a trend whose statistic is only bounded on some seeds: the bound on the paper's
    side proves the trend ("holds (>= x)"), the other bound can disprove it; else inconclusive."""
    # (lo_open, hi_open) as ``decide`` takes them: the side that can prove the trend is the one left known
    proving = (False, True) if claim.sign > 0 else (True, False)
    fallback = None
    for lo_open, hi_open in (proving, proving[::-1]):
        side = bounds[:, 0] if hi_open else bounds[:, 1]
        if not np.isfinite(side).all():
            continue
        resolved = not abs(iv.low if hi_open else iv.high) < res
        verdict = decide(iv, claim, lo_open, hi_open, resolved)
        shown = _measured(iv, claim, lo_open, hi_open)
        if verdict.startswith(("holds", "does not hold")):
            return verdict, shown
        fallback = fallback or (verdict, shown)
    return fallback or ("inconclusive (censored points)", "n/a (censored points)")


def _point_text(claim: Claim, p: pd.DataFrame) -> str:
    """A sweep point's mean effect in a trend's measured text; a bound where seeds were censored."""
    lo, hi = float(p["lo"].mean()), float(p["hi"].mean())
    if lo == hi:
        return _fmt(claim, lo, effect=True)
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{_fmt(claim, lo, effect=True)} to {_fmt(claim, hi, effect=True)}"
    if math.isfinite(lo) or math.isfinite(hi):
        return f"{'>=' if math.isfinite(lo) else '<='} {_fmt(claim, lo if math.isfinite(lo) else hi, effect=True)}"
    return "censored"


def trend_bounds(lo: np.ndarray, hi: np.ndarray, direction: str) -> tuple[float, float]:
    """The lowest and highest ``trend_statistic`` over values known only as intervals [lo_i, hi_i] (equal where
    measured; a censored point is open on one side). The statistic is monotone in each value, so each bound
    takes every value at the matching end."""
    if direction == "minimum":
        return (float(min(lo[0], lo[-1]) - hi[1:-1].min()), float(min(hi[0], hi[-1]) - lo[1:-1].min()))
    x = np.arange(lo.size, dtype=float)
    w = (x - x.mean()) / ((x - x.mean()) ** 2).sum() * (lo.size - 1)  # the statistic is sum(w * values)
    with np.errstate(invalid="ignore"):
        low = np.where(w > 0, w * lo, np.where(w < 0, w * hi, 0.0)).sum()
        high = np.where(w > 0, w * hi, np.where(w < 0, w * lo, 0.0)).sum()
    return float(low), float(high)


def trend_statistic(values: np.ndarray, direction: str) -> float:
    """``increasing``/``decreasing``: the least-squares line's change from the first point to the last (points
    equally spaced, so the statistic does not depend on the sweep's scale); ``minimum``: how far the lowest
    interior point lies below the lower end."""
    return trend_bounds(values, values, direction)[0]


# ------------------------------------------------------------------------------------------ text


def _fmt(claim: Claim, v: float, effect: bool = False) -> str:
    """A number in the claim's terms: percent for reductions and fractions, x for ratios, units for times; a value
    that rounds to zero has no sign ("0.0 pp", never "-0.0 pp")."""
    text = _fmt_raw(claim, v, effect)
    return text[1:] if text.startswith("-") and _rounds_to_zero(text) else text


def _rounds_to_zero(text: str) -> bool:
    """Whether a formatted number reads as zero ("0%", "-0.0 pp"; not "∞")."""
    return "0" in text and not any(c in "123456789" for c in text)


def _fmt_raw(claim: Claim, v: float, effect: bool = False) -> str:
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    kind = claim.effect if claim.kind == "trend" else claim.kind
    if kind == "reduction":
        return f"{v:.0%}"
    if kind == "ratio":
        return f"{v:.2f}x"
    if claim.metric == "time_to_target":
        return f"{v:.0f} s"
    if claim.metric == "bytes_to_target":
        return f"{v / 1e6:.1f} MB"
    if claim.metric.endswith(("fraction", "accuracy")):  # a difference of two shares is in percentage points
        return f"{v * 100:.1f} pp" if kind == "difference" else f"{v:.0%}"
    return f"{v:.4g}"


def _flip(claim: Claim) -> bool:
    """Whether a claim's effect is shown negated: a reduction or difference on the higher side (see the module
    docstring), so that the shown number is the run's change against the baseline."""
    return claim.kind in ("reduction", "difference") and claim.sign < 0


def _show(claim: Claim, v: float) -> str:
    """``v`` as the claim shows it: a change against the baseline carries its sign."""
    if not _flip(claim):
        return _fmt(claim, v)
    text = _fmt(claim, -v)
    return ("+" if -v > 0 and not _rounds_to_zero(text) else "") + text


def _bound_op(claim: Claim, lower_bound: bool) -> str:
    """The comparison a bound on the effect reads with, as the claim shows the effect (``_flip`` reverses it)."""
    return ">=" if lower_bound != _flip(claim) else "<="


def _bound_text(iv: Interval, claim: Claim, lo_open: bool, hi_open: bool) -> str:
    if hi_open and not lo_open:
        return f"{_bound_op(claim, True)} {_show(claim, iv.low)}"
    if lo_open and not hi_open:
        return f"{_bound_op(claim, False)} {_show(claim, iv.high)}"
    return "not measured"


def _measured(iv: Interval, claim: Claim, lo_open: bool, hi_open: bool) -> str:
    if lo_open and hi_open:
        return "not measured (censored on both sides)"
    if lo_open or hi_open:
        ci = iv.ci_low if hi_open else iv.ci_high
        return f"{_bound_text(iv, claim, lo_open, hi_open)} [95% CI of the bound {_bound_op(claim, hi_open)} " \
               f"{_show(claim, ci)}]"
    if iv.n == 1 or iv.ci_low == iv.ci_high:
        return _show(claim, iv.low)
    low, high = (iv.ci_high, iv.ci_low) if _flip(claim) else (iv.ci_low, iv.ci_high)
    return f"{_show(claim, iv.low)} [{_show(claim, low)}, {_show(claim, high)}]"


QUANTITY_NOUNS = {"time_to_target": "time to the target", "steps_to_target": "steps to the target",
                  "bytes_to_target": "bytes sent until the target", "ingress_to_target": "bytes into the PS until "
                  "the target", "iterations_to_target": "iterations to the target",
                  "cost_to_target": "communication cost until the target"}


def metric_noun(metric: str) -> str:
    """A metric as words: "time to the target", "bytes per second", "final accuracy"."""
    if metric in QUANTITY_NOUNS:
        return QUANTITY_NOUNS[metric]
    m = metric.replace("_per_s", " per second")
    return (m[:-2] + " (s)" if m.endswith("_s") else m).replace("_", " ")


def _magnitude(claim: Claim, v: float) -> str:
    """An effect's size without its sign, as ``_fmt`` writes it ("45%", "0.8 pp" as "0.8 pt", "12 s")."""
    return _fmt(claim, abs(v), effect=True).replace(" pp", " pt")


def _named(label: str, result: dict) -> str:
    """A run as the words name it: a swept run's point is the result's "at" already ("fig5-adsp", not
    "fig5-adsp[cluster.hetero=H=1.6]")."""
    return label.split("[", 1)[0] if result.get("at") and label.endswith("]") else label


def words_names(labels: list[str], result: dict, names: dict[str, str]) -> list[str]:
    """The runs a result compares as its words name them: each by ``names`` (its experiment name's display
    name: "ADSP" for "fig4-adsp"; a point it names follows as a setting: "ESync (iid)"), unless two different
    runs would be called alike (two ADSP runs), where each keeps its experiment name."""
    plain = [_named(label, result) for label in labels]

    def shown(label: str) -> str:
        spec, bracket, point = label.partition("[")
        if label in names or not bracket:
            return names.get(label, label)
        name, setting = names.get(spec, spec), point_text(point.removesuffix("]"))
        return f"{name[:-1]}, {setting})" if name.endswith(")") else f"{name} ({setting})"

    display = [shown(label) for label in plain]
    return display if len(set(display)) == len(set(plain)) else plain


TURNED = {"at least ": "at most ", "at most ": "at least ", "": ""}
"""A bound's words said of the other side: a run at least 2x as fast takes at most 1/2 the time."""


def effect_words(claim: Claim, iv: Interval, run: str, base: str, lo_open: bool, hi_open: bool) -> str:
    """The measured mean effect in words, oriented to the claim: what the run's metric is against the
    baseline's (``reduction``: "45% lower"; ``ratio``: "1/52 of", "2.1x"; ``difference``: "0.8 pt higher"),
    or the run's own value (``value``). A censored side gives a bound ("at least 45% lower"); censored on
    both sides, nothing is said."""
    if lo_open and hi_open:
        return ""
    noun = metric_noun(claim.metric)
    if claim.kind == "value":
        v = iv.low
        return f"{run}: {noun} {'at least ' if hi_open else ''}{_fmt(claim, v)}"
    v = iv.low if not lo_open else iv.high  # the known end of the mean effect
    bound = "" if not (lo_open or hi_open) else ("at least " if hi_open else "at most ")
    if claim.kind == "ratio":  # baseline / run: said of the run, as run / baseline = 1 / v, a bound turns round
        if v <= 0 or not math.isfinite(v):
            return ""
        inverse = TURNED[bound]
        if claim.metric == "time_to_target":
            return f"{run} reaches the target {bound}{v:.3g}x as fast as {base}" if v >= 1 else \
                f"{run} takes {inverse}{1 / v:.3g}x {base}'s time to reach the target"
        return f"{run}: {noun} {inverse}1/{v:.3g} of {base}'s" if v >= 1 else \
            f"{run}: {noun} {inverse}{1 / v:.3g}x {base}'s"
    if _rounds_to_zero(_magnitude(claim, v)):
        return f"{run}: {noun} the same as {base}'s, to the shown precision"
    lower = v > 0  # reduction 1 - run / baseline, difference baseline - run: above 0, the run's is lower
    if not lower:  # a bound on the effect bounds the run's excess the other way: effect >= -5% is at most 5% higher
        bound = TURNED[bound]
    if claim.kind == "difference" and "accuracy" in claim.metric:
        return f"{run} {bound}{_magnitude(claim, v)} {'less' if lower else 'more'} accurate than {base}"
    if claim.metric == "time_to_target":
        return f"{run} reaches the target {bound}{_magnitude(claim, v)} {'sooner' if lower else 'later'} than " \
               f"{base}" if claim.kind == "difference" else \
            f"{run} takes {bound}{_magnitude(claim, v)} {'less' if lower else 'more'} time than {base} to reach the " \
            "target"
    return f"{run}: {noun} {bound}{_magnitude(claim, v)} {'lower' if lower else 'higher'} than {base}'s"


def _trend_words(claim: Claim, iv: Interval, measured: bool) -> str:
    """A trend's statistic in words: how much the quantity rises or falls across the sweep, or how deep the
    dip inside it is."""
    if not measured:
        return ""
    noun = metric_noun(claim.metric) if claim.effect == "value" else f"the {claim.effect} against {claim.baseline}"
    v = iv.low
    if claim.direction == "minimum":
        return f"{noun}: lowest inside the sweep, {_magnitude(claim, v)} below the lower end" if v > 0 else \
            f"{noun}: no point inside the sweep is below both ends"
    return f"{noun} {'rises' if v > 0 else 'falls'} by {_magnitude(claim, v)} from the first point to the last"


def _resolution_text(res: float, unit: str) -> str:
    if not unit or not math.isfinite(res):
        return "-"
    if unit == "bytes":
        return f"{res / 1e6:.2g} MB"
    # a measured interval (procs: 19.9959 s) to 3 digits, whole numbers from 100 on (1234 steps, not 1.23e+03)
    return f"{res:.0f} {unit}" if res >= 100 else f"{res:.3g} {unit}"


def paper_text(claim: Claim, names: dict[str, str] | None = None) -> str:
    """What the paper says, in the verdict table's words: its figure, or the side of the baseline (called as
    ``words_names`` calls it, where it reads apart from the claim's run)."""
    if claim.baseline is not None and claim.kind != "trend":
        base = words_names([claim.run, claim.baseline], {}, names or {})[1]
        claim = replace(claim, baseline=base)
    if claim.kind == "trend":
        return {"increasing": "increasing", "decreasing": "decreasing",
                "minimum": "a minimum inside the sweep"}[claim.direction]
    if claim.kind == "value":
        if claim.op == "between":
            return f"{_fmt(claim, claim.paper_value[0])} to {_fmt(claim, claim.paper_value[1])}"
        return f"{claim.op} {_fmt(claim, claim.paper_value)}"
    if claim.paper_value is None and claim.margin is not None:
        side = "lower" if claim.sign > 0 else "higher"
        return f"{side} than {claim.baseline} or short of it by at most {_fmt(claim, claim.margin)}"
    if claim.paper_value is None:
        return f"{'lower' if claim.sign > 0 else 'higher'} than {claim.baseline} (no number given)"
    return _show(claim, claim.paper_value)
