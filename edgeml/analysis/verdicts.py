"""Verdicts: a claim (``edgeml.analysis.claims``) decided on runs over seeds with bootstrap intervals,
censoring and resolution, and the text that reports it.

The data are a tidy *samples* table (one row per run, seed, metric and target: ``lo``/``hi`` equal when
measured, ``hi`` infinite when a run never reached the target) built by
``edgeml.analysis.compare.claim_samples``. Duplicate runs of one seed are one sample (their mean). Each seed
gives one value (an interval when censored); the verdict rests on the 95% bootstrap interval of their mean
(``edgeml.analysis.stats``):

- **holds**: the interval lies on the paper's side of neutral (0 for reductions and differences, 1 for
  ratios) and reaches the paper's figure within 10% (it overlaps [0.9 p, p / 0.9]); a direction claim holds
  when the interval lies on its side. A value claim holds when the interval lies within ``op``'s bound; an
  equivalence claim (``within``, "about the same") when the interval lies inside its range, and it does not
  hold when the interval lies wholly outside it (with a censored side, when the known bound does).
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
(3 of 5 seeds)". What the runs read before that rule is kept (``Verdict.provisional``) and reported beside it.

A verdict is data (``Verdict``: kind, bound, the effect with its interval, n, the seeds it needs, the arrival
rule...); ``verdict_words`` is the one place it becomes words, and ``verdicts.csv`` carries its fields as columns
(``verdict_row``, ``verdict_from_row``). Every verdict away from the paper owes a diagnosis
(``owes_diagnosis``): weaker, does not hold, inconclusive, not resolved, and stronger once its interval lies
beyond ``FAR`` (2x) of the paper's figure, a result that far above the paper's being no more a reproduction of
it than one that far below.

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


VERDICT_KINDS = ("holds", "weaker", "stronger", "does not hold", "inconclusive", "not resolved", "not measured")
"""What a claim can read (``Verdict.kind``)."""
DECISIVE = ("holds", "weaker", "stronger", "does not hold")
"""The kinds that decide a claim (with or without a bound: "holds (>= 40%)")."""
NEEDS_DIAGNOSIS = ("weaker", "stronger", "does not hold", "inconclusive", "not resolved")
"""The kinds a claim owes a diagnosis for (``edgeml.analysis.claims.Diagnosis``): "stronger" only beyond
``FAR`` of the paper's figure (``owes_diagnosis``)."""
FAR = 2.0
"""A result further than this factor from the paper's figure is no reproduction of it, on either side."""
BOUNDS = ("", ">=", "<=")
UNITS = ("%", "x", "s", "MB", "pp", "")
"""How a verdict's numbers are written: a share, a ratio, seconds, bytes (in MB), percentage points, a plain
number."""


@dataclass(frozen=True)
class Verdict:
    """A claim's verdict as data; ``verdict_words`` says it ("holds (>= 40%)", "inconclusive (3 of 5 seeds)").

    Numbers are as the claim shows them (``_show``: a change against the baseline carries its sign), in
    ``unit``; None where there is none."""

    kind: str
    """One of ``VERDICT_KINDS``; "inconclusive" with ``provisional`` set: too few seeds decided it."""
    bound: str = ""
    """">=" or "<=": a run never reached the target, so only this bound on the effect is known (``point``)."""
    point: float | None = None
    """The mean effect (the bound, with ``bound``)."""
    lo: float | None = None
    """The 95% interval of the mean effect (of the bound, with ``bound``), lo <= hi."""
    hi: float | None = None
    unit: str = ""
    signed: bool = False
    """Shown as a change with its sign ("+38%")."""
    paper: float | None = None
    """The paper's figure for a comparison, shown as the effect is."""
    n: int = 0
    """The seeds it rests on."""
    seeds_needed: int = MIN_SEEDS
    """The seeds a decisive verdict needs (``HEADLINE_SEEDS`` for a headline claim)."""
    rule: str = ""
    """The arrival rule a time to a target is read by (``edgeml.analysis.convergence.RULES``); "" for other
    metrics."""
    reason: str = ""
    """Why it is not measured, or an inconclusive reading's reason ("censored points")."""
    provisional: str = ""
    """The kind the runs read before ``seed_rule`` (same bound and numbers)."""
    resolution: float | None = None
    """One evaluation interval, in ``resolution_unit`` (the samples' unit: "s", "steps", "bytes")."""
    resolution_unit: str = ""

    def __str__(self) -> str:
        return verdict_words(self)


def number_text(v: float, unit: str, signed: bool = False) -> str:
    """A number as verdicts write it in ``unit``; a value that rounds to zero has no sign ("0.0 pp", never
    "-0.0 pp"); ``signed``: a positive one carries "+"."""
    if math.isinf(v):
        text = "∞" if v > 0 else "-∞"
    elif unit == "%":
        text = f"{v:.0%}"
    elif unit == "x":
        text = f"{v:.2f}x"
    elif unit == "s":
        text = f"{v:.0f} s"
    elif unit == "MB":
        text = f"{v / 1e6:.1f} MB"
    elif unit == "pp":
        text = f"{v * 100:.1f} pp"
    else:
        text = f"{v:.4g}"
    if _rounds_to_zero(text):
        return text.removeprefix("-")
    return "+" + text if signed and v > 0 else text


def _reading(kind: str, v: Verdict) -> str:
    if kind == "not measured":
        return f"not measured: {v.reason}"
    detail = v.reason or (f"{v.bound} {number_text(v.point, v.unit, v.signed)}" if v.bound else "")
    return f"{kind} ({detail})" if detail else kind


def verdict_words(v: Verdict) -> str:
    """A verdict in the reports' words: "holds", "holds (>= 40%)", "inconclusive (3 of 5 seeds)", "not measured:
    no run 'x'". The one place they are made."""
    if v.provisional:
        return f"inconclusive ({'one seed' if v.n == 1 else f'{v.n} of {v.seeds_needed} seeds'})"
    return _reading(v.kind, v)


def provisional_words(v: Verdict) -> str:
    """What the runs read where too few seeds decided the verdict ("holds (>= 40%)"); "" elsewhere."""
    return _reading(v.provisional, v) if v.provisional else ""


def resolution_words(v: Verdict) -> str:
    return _resolution_text(math.nan if v.resolution is None else v.resolution, v.resolution_unit)


def far_from_paper(v: Verdict) -> bool:
    """Whether the effect lies more than ``FAR`` from the paper's figure p: its interval (its bound, where only a
    bound is known) excludes [p / FAR, FAR p], taken as the paper states the figure (7x: 3.5x to 14x; 80%: 40%
    to 160%). False where the paper gives no figure or nothing was measured."""
    if v.paper is None or v.point is None:
        return False
    a, b = sorted((v.paper / FAR, v.paper * FAR))
    if v.bound == ">=":
        return v.point > b
    if v.bound == "<=":
        return v.point < a
    return v.lo is not None and (v.hi < a or v.lo > b)


def owes_diagnosis(v: Verdict) -> bool:
    """Whether a claim reading ``v`` needs a diagnosis: every verdict away from the paper, "stronger" once it
    lies beyond ``FAR`` of the paper's figure."""
    return v.kind in NEEDS_DIAGNOSIS and (v.kind != "stronger" or far_from_paper(v))


def reproduced(v: Verdict) -> bool:
    """On the paper's side and within ``FAR`` of its figure (a claim without one: holds)."""
    if v.provisional or v.kind not in ("holds", "weaker", "stronger"):
        return False
    return not far_from_paper(v)


# the columns ``verdicts.csv`` carries a verdict in (``verdict_row``), beside the claim's own
VERDICT_FIELDS = {"verdict": "kind", "bound": "bound", "point": "point", "lo": "lo", "hi": "hi", "unit": "unit",
                  "signed": "signed", "paper_figure": "paper", "n": "n", "seeds_needed": "seeds_needed",
                  "rule": "rule", "reason": "reason", "provisional": "provisional", "resolution": "resolution",
                  "resolution_unit": "resolution_unit"}


NUMBERS = ("point", "lo", "hi", "paper", "resolution")
"""The fields of a ``Verdict`` that hold a number or None."""


def _number_cell(v: float | None) -> str:
    # every digit (the shortest text that reads back to the same float): the words read back from the file are
    # the report's, even where a mean lies on a rounding tie (6.235 shown as 6.23x or 6.24x by its last bit)
    return "" if v is None else repr(float(v))


def verdict_row(v: Verdict) -> dict[str, str]:
    """``v`` as ``verdicts.csv``'s cells (``VERDICT_FIELDS``); ``verdict_from_row`` reads them back."""
    cells = {}
    for column, name in VERDICT_FIELDS.items():
        x = getattr(v, name)
        cells[column] = str(int(x)) if isinstance(x, bool) else _number_cell(x) if name in NUMBERS else str(x)
    return cells


def verdict_from_row(row: dict[str, str]) -> Verdict:
    """The verdict of one ``verdicts.csv`` row; a ValueError naming the cell that is no part of one. Columns
    other than ``verdict`` may be missing (a file written before they were): they take their defaults."""
    values = {}
    for column, name in VERDICT_FIELDS.items():
        cell = row.get(column)
        if cell is None:
            continue
        default = getattr(Verdict, name, None)
        try:
            if name in NUMBERS:
                values[name] = float(cell) if cell else None
            elif name == "kind" or isinstance(default, str):
                values[name] = cell
            elif isinstance(default, bool):
                values[name] = bool(int(cell))
            else:
                values[name] = int(cell)
        except ValueError:
            what = "number" if name in NUMBERS else type(default).__name__
            raise ValueError(f"{column} = {cell!r} is no {what}") from None
        if name in NUMBERS and values[name] is not None and math.isnan(values[name]):
            values[name] = None
    v = Verdict(**values)
    for name, allowed in (("kind", VERDICT_KINDS), ("bound", BOUNDS), ("unit", UNITS),
                          ("provisional", ("",) + VERDICT_KINDS)):
        if getattr(v, name) not in allowed:
            raise ValueError(f"{'verdict' if name == 'kind' else name} = {getattr(v, name)!r}: one of "
                             f"{', '.join(repr(a) for a in allowed)}")
    return v


@dataclass(frozen=True)
class Result:
    """A claim's reading at one sweep point and target: the typed verdict and the text beside it."""

    claim: str
    target: str
    paper: str
    measured: str
    decision: Verdict
    figure: str | None = None
    at: str = ""  # the sweep point, for a claim checked at every point of a sweep
    words: str = ""  # the measured effect in words ("esync: bytes per second 1/52 of asgd's")
    headline: bool = False
    other_rule: str = ""  # the other arrival rule's reading, where it disagrees (``edgeml.analysis.readings``)
    ablations: tuple = ()  # (run, measured, Verdict) of each ablation of the claim's diagnosis
    seeds_apart: str = ""  # each seed's effect where the mean and the median lie on opposite sides of no effect

    @property
    def verdict(self) -> str:
        return verdict_words(self.decision)

    @property
    def kind(self) -> str:
        return self.decision.kind

    @property
    def n(self) -> int:
        return self.decision.n

    @property
    def provisional(self) -> str:
        return provisional_words(self.decision)

    @property
    def resolution(self) -> str:
        return resolution_words(self.decision)

    @property
    def where(self) -> str:
        """Where it was measured: the sweep point and the target ("cluster.hetero=H=1.6; loss<=0.9")."""
        return claim_at(self.at, self.target)


def claim_at(at: str, target: str) -> str:
    return "; ".join(filter(None, (at, target))) or "-"


HEADLINE_MARK = "**H** "
"""Before a headline claim's text in a report's tables."""


def seed_rule(result: Result, claim: Claim) -> Result:
    """``result`` with its verdict made inconclusive where too few seeds decided it (the module docstring): one
    seed never decides; a headline claim needs ``HEADLINE_SEEDS`` to read a decisive verdict."""
    v = result.decision
    if v.kind == "not measured" or v.n == 0:
        return result
    if v.n < MIN_SEEDS or (claim.headline and v.n < HEADLINE_SEEDS and v.kind in DECISIVE):
        return replace(result, decision=replace(v, kind="inconclusive", provisional=v.kind))
    return result


def _per_seed(samples: pd.DataFrame) -> pd.DataFrame:
    """One row per seed (duplicate runs of a seed averaged): index seed, columns lo, hi, resolution."""
    return samples.groupby("seed").agg(lo=("lo", "mean"), hi=("hi", "mean"), resolution=("resolution", "mean"))


def decide(iv: Interval, claim: Claim, lo_open: bool, hi_open: bool, resolved: bool,
           favoured: Interval | None = None) -> tuple[str, bool]:
    """The verdict's kind for a pair or trend claim from the mean effect's interval (see the module
    docstring), and whether it rests on a bound (one side censored: ``effect`` says which).

    ``favoured``: the interval with every time moved one resolution step the paper's way (``_favoured``); an
    effect below the resolution still excludes the paper's figure when this interval does."""
    neutral = 0.0 if claim.kind == "trend" else NEUTRAL[claim.kind]  # a trend's statistic: no change is 0
    if lo_open and hi_open:
        return "inconclusive", False
    s = claim.sign
    p = abs(claim.paper_value - neutral) if claim.kind in PAIR_KINDS and claim.paper_value is not None else None

    def short_of_paper(v: Interval) -> bool:  # the whole interval below 0.9 p on the paper's side
        top = v.ci_high - neutral if s > 0 else neutral - v.ci_low
        return p is not None and claim.margin is None and bool(top < HOLDS_SHARE * p)

    if not resolved:
        return "does not hold" if favoured is not None and short_of_paper(favoured) else "not resolved", False
    if claim.within is not None:  # equivalence: inside the range holds, wholly outside it does not
        a, b = claim.within
        if hi_open:  # only the effect's lower end is known
            return ("does not hold" if iv.ci_low > b else "inconclusive"), True
        if lo_open:
            return ("does not hold" if iv.ci_high < a else "inconclusive"), True
        inside, outside = a <= iv.ci_low and iv.ci_high <= b, iv.ci_high < a or iv.ci_low > b
        return ("holds" if inside else "does not hold" if outside else "inconclusive"), False
    lo, hi = (iv.ci_low - neutral, iv.ci_high - neutral) if s > 0 else (neutral - iv.ci_high, neutral - iv.ci_low)
    if s < 0:
        lo_open, hi_open = hi_open, lo_open
    if claim.margin is not None:  # non-inferiority: short of the baseline by up to the margin still holds
        lo, hi = lo + claim.margin, hi + claim.margin
        if hi_open:
            return ("holds" if lo >= 0 else "inconclusive"), True
        if lo_open:
            return ("does not hold" if hi < 0 else "inconclusive"), True
        return ("holds" if lo >= 0 else "does not hold" if hi < 0 else "inconclusive"), False
    if hi_open:  # only a lower bound on the effect
        if lo > 0 and p is not None and lo > p / HOLDS_SHARE:
            return "stronger", True
        return ("holds" if lo > 0 and (p is None or lo >= HOLDS_SHARE * p) else "inconclusive"), True
    if lo_open:  # only an upper bound: below neutral, or below the paper's figure, it decides
        return ("does not hold" if hi < 0 or short_of_paper(iv) else "inconclusive"), True
    if lo > 0:
        if p is None:
            return "holds", False
        return ("weaker" if hi < HOLDS_SHARE * p else "stronger" if lo > p / HOLDS_SHARE else "holds"), False
    return ("does not hold" if hi < 0 or short_of_paper(iv) else "inconclusive"), False


def decide_value(iv: Interval, claim: Claim, hi_open: bool, resolved: bool) -> tuple[str, bool]:
    """A value claim's kind, and whether it rests on a (lower) bound."""
    lo, hi = iv.ci_low, iv.ci_high
    if not resolved:
        return "not resolved", False
    if claim.op == ">=":
        verdict = "holds" if lo >= claim.paper_value else "does not hold" if hi < claim.paper_value else "inconclusive"
    elif claim.op == "<=":
        verdict = "holds" if hi <= claim.paper_value else "does not hold" if lo > claim.paper_value else "inconclusive"
    else:
        a, b = claim.paper_value
        verdict = "holds" if a <= lo and hi <= b else "does not hold" if hi < a or lo > b else "inconclusive"
    return verdict, hi_open


def evaluate(claim: Claim, samples: pd.DataFrame, target: str = "", seeds_rule: bool = True,
             names: dict[str, str] | None = None, rule: str = "") -> list[Result]:
    """Evaluate ``claim`` on the samples table at one target (``Target.short``; "" for other metrics): one
    result, or one per sweep point when the claim names a swept run. ``seeds_rule``: apply ``seed_rule`` (off:
    what the samples read, however few seeds they have). ``names``: what the words call each run, by its
    experiment name ("fig4-adsp": "ADSP"; ``words_names``). ``rule``: the arrival rule ``target`` is read by,
    which the verdicts record."""
    seeds = seed_rule if seeds_rule else (lambda result, claim: result)
    rows = samples[(samples["metric"] == claim.metric) & (samples["target"] == target)]
    base = Verdict("not measured", seeds_needed=HEADLINE_SEEDS if claim.headline else MIN_SEEDS, rule=rule)
    result = dict(claim=claim.text, target=target, paper=paper_text(claim, names or {}), figure=claim.figure,
                  headline=claim.headline, decision=base)

    def missing(why: str) -> list[Result]:
        return [not_measured(result, why)]

    if samples.empty or not (samples["metric"] == claim.metric).any():
        return missing(f"the runs have no metric {claim.metric!r}")
    if claim.seeds is not None:
        rows = rows[rows["seed"].isin(claim.seeds)]
    unit = rows["unit"].iloc[0] if len(rows) else ""
    if claim.kind == "trend":
        return [seeds(_evaluate_trend(claim, rows, result, unit), claim)]
    if (rows["run"] == claim.run).any():
        return [seeds(_evaluate_one(claim, claim.run, rows, result, unit, names or {}), claim)]
    points = rows.loc[rows["spec"] == claim.run, ["run", "point"]].drop_duplicates()
    if points.empty:
        return missing(f"no run {claim.run!r}" + (" with those seeds" if claim.seeds else ""))
    return [seeds(_evaluate_one(claim, label, rows, {**result, "at": point}, unit, names or {}), claim)
            for label, point in points.values]


def not_measured(result: dict, why: str) -> Result:
    """``result`` (``Result``'s fields but measured) read as not measured, and why."""
    return Result(**{**result, "decision": replace(result["decision"], kind="not measured", reason=why)},
                  measured="n/a")


def _verdict(result: dict, claim: Claim, decided: tuple[str, bool], iv: Interval, lo_open: bool, hi_open: bool,
             res: float, unit: str, reason: str = "") -> Verdict:
    """The typed verdict of ``decided`` (kind, bounded) on the mean effect ``iv`` (censored on ``lo_open`` /
    ``hi_open``), its numbers as the claim shows them."""
    kind, bounded = decided
    flip = _flip(claim)
    point, lo, hi, bound = None, None, None, ""
    if bounded:
        lower = hi_open and not lo_open  # only the effect's lower end is known
        bound = _bound_op(claim, lower)
        point = _shown(claim, iv.low if lower else iv.high)
        lo, hi = sorted((_shown(claim, iv.ci_low), _shown(claim, iv.ci_high)))
    elif not (lo_open or hi_open) and iv.n:
        point = _shown(claim, iv.low)
        lo, hi = sorted((_shown(claim, iv.ci_low), _shown(claim, iv.ci_high)))
    paper = _shown(claim, claim.paper_value) if claim.kind in PAIR_KINDS and claim.paper_value is not None else None
    return replace(result["decision"], kind=kind, bound=bound, point=_number(point), lo=_number(lo), hi=_number(hi),
                   unit=_unit(claim), signed=flip, paper=_number(paper), n=iv.n, reason=reason,
                   resolution=_number(res) if unit else None, resolution_unit=unit)


def _number(v: float | None) -> float | None:
    """A verdict's number as a float, None where there is none (NaN)."""
    return None if v is None or math.isnan(v) else float(v)


def _evaluate_one(claim: Claim, label: str, rows: pd.DataFrame, result: dict, unit: str,
                  names: dict[str, str]) -> Result:
    def missing(why: str) -> Result:
        return not_measured(result, why)

    run = _per_seed(rows[rows["run"] == label])
    if claim.kind == "value":
        iv = mean_interval(run["lo"], run["hi"])
        hi_open = bool(np.isinf(run["hi"]).any())
        res = float(run["resolution"].max())
        resolved = not (unit and iv.exact and claim.op != "between" and abs(iv.low - claim.paper_value) < res)
        decided = decide_value(iv, claim, hi_open, resolved)
        return Result(**{**result, "decision": _verdict(result, claim, decided, iv, False, hi_open, res, unit)},
                      measured=_measured(iv, claim, False, hi_open),
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
    if claim.within is not None and _band(claim, float(np.mean(b["lo"]))) >= res:
        resolved = True  # likewise within an equivalence range at least as wide on both sides
    favoured = None if resolved or lo_open or hi_open else _favoured(claim, r, b, res)
    decided = decide(iv, claim, lo_open, hi_open, resolved, favoured)
    return Result(**{**result, "decision": _verdict(result, claim, decided, iv, lo_open, hi_open, res, unit)},
                  measured=_measured(iv, claim, lo_open, hi_open),
                  words=effect_words(claim, iv, *words_names([label, base_label], result, names), lo_open,
                                     hi_open), seeds_apart=seeds_apart(claim, lo, hi))


def seeds_apart(claim: Claim, lo: pd.Series, hi: pd.Series) -> str:
    """Each seed's effect, and their median, where the seeds disagree so that their mean and median lie on
    opposite sides of no effect (one seed far out carrying the mean: a bimodal result, not to be read from the
    mean alone); "" where they agree (or either shows as no effect at the shown precision), where a seed's effect is
    only bounded (censored), or with under three seeds."""
    exact = np.isclose(lo.to_numpy(dtype=float), hi.to_numpy(dtype=float), rtol=1e-12, atol=0)
    if len(lo) < 3 or not exact.all() or not np.isfinite(lo.to_numpy(dtype=float)).all():
        return ""
    none = 1.0 if claim.kind == "ratio" else 0.0
    mean, median = float(lo.mean()), float(lo.median())
    shown = {_show(claim, v) for v in (mean, median)}
    if (mean - none) * (median - none) >= 0 or _show(claim, none) in shown:  # (apart where it shows)
        return ""
    each = ", ".join(f"{seed}: {_show(claim, float(v))}" for seed, v in lo.items())
    return f"per seed {each}; median {_show(claim, float(lo.median()))}, on the other side of no effect from the mean"


def _band(claim: Claim, base: float) -> float:
    """How far, in the samples' unit, the run's value may lie from ``base`` (the baseline's) on either side, the
    nearer side, and stay within an equivalence claim's range."""
    a, b = claim.within
    if claim.kind == "difference":  # base - run
        return min(-a, b)
    if claim.kind == "reduction":  # 1 - run / base
        return base * min(-a, b)
    return base * min(1 - 1 / b, 1 / a - 1)  # ratio: base / run


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


def _evaluate_trend(claim: Claim, rows: pd.DataFrame, result: dict, unit: str) -> Result:
    def missing(why: str) -> Result:
        return not_measured(result, why)

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
    res_unit = unit if timed else ""
    if (bounds[:, 0] == bounds[:, 1]).all():  # every seed's statistic measured (censoring, if any, did not matter)
        resolved = not (timed and abs(iv.low) < res)
        decided, shown = decide(iv, claim, False, False, resolved), _measured(iv, claim, False, False)
        verdict = _verdict(result, claim, decided, iv, False, False, res, res_unit)
    else:
        decided, lo_open, hi_open, shown = _decide_trend_bound(iv, bounds, claim, res if timed else 0.0)
        verdict = _verdict(result, claim, decided, iv, lo_open, hi_open, res, res_unit,
                           "" if decided[1] else "censored points")
    return Result(**{**result, "decision": verdict}, measured=f"{means}; {name} {shown}",
                  words=_trend_words(claim, iv, bool((bounds[:, 0] == bounds[:, 1]).all())))


def _decide_trend_bound(iv: Interval, bounds: np.ndarray, claim: Claim,
                        res: float) -> tuple[tuple[str, bool], bool, bool, str]:
    """((kind, bounded), lo_open, hi_open, measured) for a trend whose statistic is only bounded on some seeds:
    the bound on the paper's side proves the trend ("holds (>= x)"), the other bound can disprove it; else
    inconclusive."""
    # (lo_open, hi_open) as ``decide`` takes them: the side that can prove the trend is the one left known
    proving = (False, True) if claim.sign > 0 else (True, False)
    fallback = None
    for lo_open, hi_open in (proving, proving[::-1]):
        side = bounds[:, 0] if hi_open else bounds[:, 1]
        if not np.isfinite(side).all():
            continue
        resolved = not abs(iv.low if hi_open else iv.high) < res
        decided = decide(iv, claim, lo_open, hi_open, resolved)
        found = decided, lo_open, hi_open, _measured(iv, claim, lo_open, hi_open)
        if decided[0] in ("holds", "does not hold"):
            return found
        fallback = fallback or found
    return fallback or (("inconclusive", False), True, True, "n/a (censored points)")


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
    """A number in the claim's terms (``number_text`` in the claim's ``_unit``)."""
    return number_text(v, _unit(claim))


def _rounds_to_zero(text: str) -> bool:
    """Whether a formatted number reads as zero ("0%", "-0.0 pp"; not "∞")."""
    return "0" in text and not any(c in "123456789" for c in text)


def _unit(claim: Claim) -> str:
    """How a claim's numbers are written (``UNITS``): percent for reductions and fractions, x for ratios, units
    for times and bytes."""
    kind = claim.effect if claim.kind == "trend" else claim.kind
    if kind == "reduction":
        return "%"
    if kind == "ratio":
        return "x"
    if claim.metric == "time_to_target":
        return "s"
    if claim.metric == "bytes_to_target":
        return "MB"
    if claim.metric.endswith(("fraction", "accuracy")) or "_fraction_" in claim.metric:  # shares; their difference
        return "pp" if kind == "difference" else "%"  # is in percentage points
    return ""


def _flip(claim: Claim) -> bool:
    """Whether a claim's effect is shown negated: a reduction or difference on the higher side (see the module
    docstring), so that the shown number is the run's change against the baseline."""
    return claim.kind in ("reduction", "difference") and claim.sign < 0


def _shown(claim: Claim, v: float) -> float:
    """``v`` as the claim shows it: negated for a change against the baseline (``_flip``)."""
    return -v if _flip(claim) else v


def _show(claim: Claim, v: float) -> str:
    """``v`` as the claim shows it: a change against the baseline carries its sign."""
    return number_text(_shown(claim, v), _unit(claim), _flip(claim))


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
    from edgeml.rundir import DERIVED, derived

    m = metric[:-len("_per_s")] + " per second" if metric.endswith("_per_s") else metric
    if metric not in DERIVED and derived(metric) is not None:  # a family's: "sent fraction at iteration 15"
        m = m.replace("_at_", "_at_iteration_")
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


def _goal(claim: Claim) -> tuple[str, str]:
    """What a time to a target is the time to, said of the run and as an infinitive."""
    return ("completes the epochs", "complete the epochs") if claim.epochs else ("reaches the target",
                                                                                 "reach the target")


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
            does, do = _goal(claim)
            return f"{run} {does} {bound}{v:.3g}x as fast as {base}" if v >= 1 else \
                f"{run} takes {inverse}{1 / v:.3g}x {base}'s time to {do}"
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
        does, do = _goal(claim)
        return f"{run} {does} {bound}{_magnitude(claim, v)} {'sooner' if lower else 'later'} than {base}" \
            if claim.kind == "difference" else \
            f"{run} takes {bound}{_magnitude(claim, v)} {'less' if lower else 'more'} time than {base} to {do}"
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
    if claim.within is not None:
        return f"about the same as {claim.baseline}: {_show(claim, claim.within[0])} to {_show(claim, claim.within[1])}"
    if claim.paper_value is None and claim.margin is not None:
        side = "lower" if claim.sign > 0 else "higher"
        return f"{side} than {claim.baseline} or short of it by at most {_fmt(claim, claim.margin)}"
    if claim.paper_value is None:
        return f"{'lower' if claim.sign > 0 else 'higher'} than {claim.baseline} (no number given)"
    return _show(claim, claim.paper_value)
