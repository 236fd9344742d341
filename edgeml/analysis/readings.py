"""How an experiment's claims are read on its finished runs: the targets each is decided at, the runs it reads,
its reading by the other arrival rule, its diagnosis's ablations in its place, and the figure group it is
reported in. ``check_claims`` returns every claim's ``Result`` (``edgeml.analysis.verdicts``); the report only
lays them out.

An experiment here is anything with ``claims``, ``targets``, ``source`` and ``run_names()``
(``edgeml.reproduce.load.Experiment``), a planned run anything with ``name``, ``spec`` and ``figures``
(``edgeml.reproduce.plan.PlannedRun``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from edgeml.analysis.claims import REACHED, Claim
from edgeml.analysis.compare import Comparison, claim_samples
from edgeml.analysis.convergence import EPOCHS, RULE_NAMES, SMOOTH_WINDOW, Target, highest_reached
from edgeml.analysis.verdicts import MIN_SEEDS, HEADLINE_SEEDS, Result, Verdict, evaluate, owes_diagnosis, paper_text
from edgeml.errors import UserError
from edgeml.rundir import Run

REACHED_NOTE = "the highest every run reaches"
"""How a claim's result names a ``REACHED`` target beside its value."""
NO_LEVEL_NOTE = "the highest every run reaches: none above where the runs start"
"""A ``REACHED`` target with no level above some run's first evaluation (``highest_reached`` NaN)."""
OTHER_RULE = {"stays": "first", "first": "stays", "smoothed": "stays"}
"""The arrival rule a time to a target is also read by, beside the one its claim is decided on."""


def claim_targets(exp, claim: Claim, cmp: Comparison, runs: list[Run]) -> list[Target]:
    """The targets ``claim`` is decided at: its own, else the headline target; ``REACHED`` becomes the highest
    level every run of the claim's sides reaches (``highest_reached``; none while no run has finished, and
    left out where it equals another of the claim's targets; NaN, reported as not measured, where no level
    above the runs' start is reached by all); each on the loss (accuracy) of each of the claim's ``models``."""
    if not claim.on_target:
        return []
    if claim.epochs:
        return [Target(EPOCHS, float(n), "first") for n in claim.epochs]
    headline = (exp.targets or cmp.targets)[0]
    rule = claim.rule or headline.rule
    if rule == "stopping":
        if claim.models != ("run",):
            raise UserError(f"{exp.source.name}: claim {claim.text!r} reads models {list(claim.models)}, but the "
                            "experiment's stopping rule reads the run's own loss: drop models, or give targets")
        return [Target("loss", rule="stopping")]
    values = claim.targets or ([headline.value] if headline.rule != "stopping" else [])
    if not values:
        raise UserError(f"{exp.source.name}: claim {claim.text!r} needs targets: the experiment's rule is the "
                        "stopping rule, which has none")
    targets = []
    for model in claim.models:  # the run's own loss (accuracy), then the servers' average model's
        metric = f"average_{headline.metric}" if model == "average" else headline.metric
        for v in values:
            t = Target(metric, 0.0 if v == REACHED else v, rule, window=claim.window or SMOOTH_WINDOW)
            if v == REACHED:
                level = highest_reached(claim_runs(claim, runs), t)
                if level is None or level in values:
                    continue
                t = replace(t, value=level, note=REACHED_NOTE if not math.isnan(level) else NO_LEVEL_NOTE)
            targets.append(t)
    return targets


def no_level(claim: Claim, target: Target, names: dict[str, str], figure: str) -> Result:
    """A claim's result at a ``REACHED`` target that has no level: not measured, and why."""
    better = "below" if target.lower else "above"
    why = (f"no {target.metric} {better} where the runs start is reached by every run ({RULE_NAMES[target.rule]}; "
           "a run that diverged ends below its start)")
    return Result(claim.text, f"{target.metric} ({NO_LEVEL_NOTE})", paper_text(claim, names), "n/a",
                  Verdict("not measured", reason=why, rule=target.rule,
                          seeds_needed=HEADLINE_SEEDS if claim.headline else MIN_SEEDS),
                  figure=figure, headline=claim.headline)


def claim_runs(claim: Claim, runs: list[Run]) -> list[Run]:
    """The runs a claim reads: its run's and its baseline's (a swept run's every point), on its seeds."""
    sides = {claim.run, claim.baseline} - {None}
    return [r for r in runs if (r.label in sides or r.spec in sides or any(
            r.label.startswith(s + "[") for s in sides if "[" not in s)) and
            (claim.seeds is None or r.seed in claim.seeds)]


def check_claims(exp, runs: list[Run], cmp: Comparison, planned: list) -> list[Result]:
    """Every claim at each of its targets, on the samples of the runs that finished; each result names the
    figure group it is reported in. A claim on a target is also read by the other arrival rule
    (``OTHER_RULE``: first reach beside stays), reported where the two disagree by more than one evaluation
    interval on some run (``other_rule``; a count of epochs reads alike by every rule); a claim's diagnosis's
    ablations are decided as the claim with each in place of its run (and baseline: ``Diagnosis.pairs``)."""
    targets = {c: claim_targets(exp, c, cmp, runs) for c in exp.claims}
    measurable = [t for ts in targets.values() for t in ts if not math.isnan(t.value)]
    others = {t: replace(t, rule=OTHER_RULE[t.rule]) for t in measurable if t.rule in OTHER_RULE and t.metric != EPOCHS}
    samples = claim_samples(runs, cmp.per_run, [c.metric for c in exp.claims],
                            list(dict.fromkeys(measurable + list(others.values()))))
    names = exp.run_names()
    results = []
    for c in exp.claims:
        ablations = [(a, replace(c, run=run, baseline=base or c.baseline, diagnosis=None, headline=False))
                     for a, (run, base) in zip(c.diagnosis.ablations, c.diagnosis.pairs)] if c.diagnosis else []
        for t in targets[c] or [None]:
            if t is not None and math.isnan(t.value):
                results.append(no_level(c, t, names, claim_figure(c, planned)))
                continue
            key, rule = (t.key, t.rule if t.metric != EPOCHS else "") if t else ("", "")  # epochs: any rule alike
            # read once per claim and target: a swept claim's points each pick theirs
            by_other = evaluate(c, samples, others[t].key, names=names, rule=others[t].rule) if t in others else []
            by_ablation = [(name, x) for name, a in ablations
                           for x in evaluate(a, samples, key, names=names, rule=rule)]
            for r in evaluate(c, samples, key, names=names, rule=rule):
                other = other_rule(c, r, samples, t, others.get(t), by_other) if t else ""
                abl = tuple((run, x.words or x.measured, x.decision) for run, x in by_ablation
                            if not r.at or x.at in ("", r.at))
                named = f"{r.target} ({t.note})" if t is not None and t.note else r.target
                results.append(replace(r, target=named, figure=claim_figure(c, planned), other_rule=other,
                                       ablations=abl, headline=r.headline and not secondary(c, t)))
    return results


def secondary(claim: Claim, target: Target | None) -> bool:
    """Whether ``target`` reads the claim on another of its ``models`` than the first, the claim's own reading: a
    secondary result beside it, never a headline one."""
    model = "average" if target is not None and target.metric.startswith("average_") else "run"
    return target is not None and claim.models[0] != model


def other_rule(claim: Claim, result: Result, samples, target: Target, other: Target | None,
               by_other: list[Result]) -> str:
    """What ``claim`` reads by the other arrival rule (``by_other``: its results by that rule), where some run it
    compares (at the result's sweep point) reaches the target more than one evaluation interval apart by the two
    rules, or by one rule only; else ""."""
    if other is None or result.n == 0:
        return ""
    names = {claim.run, claim.baseline} - {None}
    s = samples[(samples["metric"] == claim.metric) & (samples["run"].isin(names) | samples["spec"].isin(names))]
    if result.at:
        s = s[s["point"] == result.at]
    cols = ["run", "seed", "lo", "hi", "resolution"]
    both = s.loc[s["target"] == target.key, cols].merge(s.loc[s["target"] == other.key, cols], on=["run", "seed"],
                                                        suffixes=("", "_o"))
    censored = np.isinf(both["hi"]) != np.isinf(both["hi_o"])
    apart = (both["lo"] - both["lo_o"]).abs() > both["resolution"]
    if both.empty or not (censored | apart).any():
        return ""
    found = [x for x in by_other if x.at == result.at]
    if not found:
        return ""
    o = found[0]
    return f"by {RULE_NAMES[other.rule]}: {o.words or o.measured} ({o.measured}; {o.verdict})"


def claim_figure(claim: Claim, planned: list) -> str:
    """The figure group a claim is reported in: its own ``figure``, else its run's first group."""
    if claim.figure is not None:
        return claim.figure
    for p in planned:
        if p.name == claim.run or p.spec == claim.run:
            return p.figures[0]
    return ""


def undiagnosed(claims: list[Claim], results: list[Result]) -> list[Result]:
    """The results that need a diagnosis (``owes_diagnosis``) and whose claim has none."""
    diagnosed = {c.text for c in claims if c.diagnosis}
    return [r for r in results if owes_diagnosis(r.decision) and r.claim not in diagnosed]


def diagnosis_cause(claim: Claim | None, result: Result) -> str:
    """What ``verdicts.csv`` says of a result's diagnosis, where it owes one: its claim's cause, or "not yet
    diagnosed" where the claim has none; "" for a result that owes none (a claim's diagnosis speaks of its results
    away from the paper, not of those at another target or point that hold)."""
    if not owes_diagnosis(result.decision):
        return ""
    return claim.diagnosis.cause if claim is not None and claim.diagnosis else "not yet diagnosed"
