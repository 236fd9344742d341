"""A paper's claims as an experiment file states them: the kinds, their fields, and the strict parsing of them.

A claim (an experiment file's ``[[claims]]``, see ``edgeml.reproduce.load``) names a metric, the run it is about
and, for comparisons, a baseline run. Kinds:

- ``reduction`` (1 - run / baseline), ``ratio`` (baseline / run), ``difference`` (baseline - run): paired by
  seed. ``paper_value`` is the paper's figure; without it the claim is a direction, ``direction = "lower"``
  (the run's metric is lower than the baseline's: the default) or ``"higher"``. A direction claim with
  ``margin = m`` (>= 0, in the effect's units) is a non-inferiority claim: the run may fall short of the
  baseline on that side by up to m ("at least as accurate as centralized training": margin = 0, identical
  values hold; "matches standalone within a percentage point": margin = 0.01). A pair claim with
  ``within = [low, high]`` (low < neutral < high, no paper_value or direction) is an equivalence claim, for a
  paper that says "about the same" or "almost the same": it holds when the effect's interval lies inside the
  range, does not hold when it lies wholly outside, and is inconclusive between; both sides count, so neither
  method being ahead is the paper's reading ("almost the same training speed as Async": ``within = [0.5, 2]``
  on the ratio of times).
- ``value``: the run's own metric against ``paper_value`` with ``op`` ">=", "<=" or "between" (then
  ``paper_value = [low, high]``).
- A ``reduction``, ``ratio``, ``difference`` or ``value`` claim whose ``run`` names a swept ``[[runs]]`` entry
  rather than one of its points is checked at every point ("at every heterogeneity degree"), each against
  the baseline's same point.
- ``trend``: across the points of a one-key sweep (``run`` names the swept ``[[runs]]`` entry, points in the
  experiment's order): ``direction = "increasing"`` or ``"decreasing"`` (the least-squares change from the
  first point to the last) or ``"minimum"`` (the best interior point is below both ends: the dip). With a
  ``baseline`` (another sweep over the same key) the per-point quantity is the ``effect`` against the
  baseline's same point (``reduction``, ``ratio`` or ``difference``); otherwise the run's own value. Where a
  seed was censored at some point the statistic is bounded (``trend_bounds``: it is monotone in each value):
  the bound on the paper's side can prove the trend ("holds (>= x)"), the other bound can disprove it, and a
  censored point that cannot change the statistic (a middle point of three, a high end of a dip) leaves it
  measured.

Every claim may also say:

- ``headline = true``: the claim is one of the paper's headline claims (its abstract or conclusion). A headline
  claim reads holds, weaker, stronger or does not hold only on ``HEADLINE_SEEDS`` seeds; any claim needs at
  least ``MIN_SEEDS`` (``edgeml.analysis.verdicts.seed_rule``).
- ``epochs = [30]`` (whole numbers above 0): the claim is read where each run has completed that many epochs
  (the evaluations' ``epochs`` counter), as a paper that measures "the model training time across different
  epochs" (EdgeGossip Sec. 4.1) reads it: a time, steps or bytes to a target spent on those epochs, or
  ``metric = "accuracy"`` (or ``"loss"``, ``EVAL_METRICS``, read at epochs only) there, the mean of the
  evaluations over the last of those epochs (``convergence.value_at``). Takes the place of ``targets`` and
  ``rule``; a run that never completes them (or counts no epoch) is censored (a time) or not measured (an
  accuracy).
- ``rule`` (``stays``, ``first``, ``smoothed``, ``stopping``) for a claim on a target: the arrival rule it is
  decided on (default: the experiment's); ``window`` the number of evaluations the ``smoothed`` rule averages.
- ``models = ["run", "average"]`` for a claim on a loss (accuracy) target: read it on the loss the run evaluates
  (``run``: its ``eval.models``, SNAP's worst server) and on the servers' average model (``average``: the
  evaluations' ``average_loss``; a run that evaluates one model reads its own), each a result of its own; the
  first is the claim's reading, the others secondary results beside it (never headline ones).
- ``reading = { quote = "...", section = "ADSP Sec. 5.2" }``: how the paper itself defines the quantity the
  claim measures (a short verbatim quote and where it stands), or ``reading = "open"`` where the paper leaves it
  open; printed with the claim. A headline claim must have one.
- ``diagnosis = {departures = ["id", ...], text = "...", ablations = ["run", ...]}``: why a claim does not read
  holds. It cites the rows of the paper's departures ledger (``edgeml.analysis.ledger``) it blames; its cause
  (``CAUSES``) follows from their kind (``cause`` may be left out where they share one), or is ``"claim"`` where
  its ablations put the paper's own setting on those factors and the result still falls short. Its ablations
  are the runs that test the cause (each is decided as the claim with the ablation in place of the claim's run,
  and its measured effect is reported beside the diagnosis); each must differ from the claim's runs in the
  config keys of the cited rows alone (checked when the experiment loads). A claim that compares two runs names
  an ablation of both as ``"run vs baseline"`` (``"ssp-network vs bsp-network"``): the claim decided on that
  pair (``Diagnosis.pairs``).

How a claim is decided on runs is ``edgeml.analysis.verdicts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edgeml.analysis.convergence import EVAL_METRICS, RULES, TARGET_METRICS
from edgeml.errors import UserError

KINDS = ("reduction", "ratio", "difference", "value", "trend")
PAIR_KINDS = ("reduction", "ratio", "difference")
NEUTRAL = {"reduction": 0.0, "ratio": 1.0, "difference": 0.0}
TRENDS = ("increasing", "decreasing", "minimum")
OPS = (">=", "<=", "between")
REACHED = "reached"
"""A claim's target that is no number: the highest accuracy (lowest loss) every run of the claim reaches
(``convergence.highest_reached``)."""
CLAIM_KEYS = {"text", "metric", "run", "baseline", "kind", "paper_value", "op", "direction", "effect", "seeds",
              "targets", "rule", "figure", "margin", "headline", "window", "diagnosis", "reading", "within", "epochs",
              "models"}
MIN_SEEDS = 2
"""The seeds any verdict needs: one run never decides a claim."""
HEADLINE_SEEDS = 5
"""The seeds a headline claim (the paper's abstract and conclusions) needs to read holds, weaker, stronger or
does not hold."""
CAUSES = {"setting": "the paper's setting differs",
          "implementation": "our implementation departs from the paper",
          "metric": "we measure the quantity otherwise than the paper",
          "budget": "the budget or the seeds are short",
          "claim": "the claim does not hold as far as we can tell"}
"""A diagnosis's cause: why a claim does not read holds. Each but "claim" is the kind of a ledger row."""
DIAGNOSIS_KEYS = {"cause", "text", "ablations", "departures"}
READING_KEYS = {"quote", "section"}
OPEN = "open"
"""A claim's ``reading`` where the paper does not define the quantity it reports."""
ABLATION_VS = " vs "
"""Joins an ablation's run and baseline: ``"ssp-network vs bsp-network"``."""


@dataclass(frozen=True)
class Diagnosis:
    """Why a claim does not read holds: a ``cause`` of ``CAUSES``, one line saying how (the setting that
    differs, where the implementation departs...), and the ablation runs that test it."""

    cause: str | None  # None until the ledger's rows give it (``edgeml.analysis.ledger.check_diagnoses``)
    text: str
    ablations: tuple[str, ...] = ()
    departures: tuple[str, ...] = ()  # the ledger rows it blames, by id

    @property
    def cause_text(self) -> str:
        return CAUSES[self.cause]

    @property
    def pairs(self) -> list[tuple[str, str | None]]:
        """Each ablation as (run, baseline): the runs it puts in the claim's place (baseline None: the claim's
        own)."""
        split = [a.partition(ABLATION_VS) for a in self.ablations]
        return [(run.strip(), base.strip() if vs else None) for run, vs, base in split]


@dataclass(frozen=True)
class Reading:
    """How the paper defines the quantity a claim measures: its words and where (``quote`` "" : it leaves it
    open)."""

    quote: str = ""
    section: str = ""

    @property
    def open(self) -> bool:
        return not self.quote

    def words(self) -> str:
        return "the paper leaves it open" if self.open else f"\"{self.quote}\" ({self.section})"


@dataclass(frozen=True)
class Claim:
    text: str
    metric: str
    run: str
    kind: str
    baseline: str | None = None
    paper_value: float | tuple[float, float] | None = None
    op: str = ">="
    direction: str | None = None
    effect: str = "value"
    seeds: tuple[int, ...] | None = None
    targets: tuple[float | str, ...] | None = None
    """Target values, or ``REACHED``: the highest level every run of both sides reaches, found from the runs."""
    rule: str | None = None
    figure: str | None = None
    margin: float | None = None
    headline: bool = False
    window: int | None = None
    diagnosis: Diagnosis | None = None
    reading: Reading | None = None
    within: tuple[float, float] | None = None
    """An equivalence claim's range of the effect ("about the same"), in the kind's units."""
    epochs: tuple[int, ...] | None = None
    """The completed epochs the claim is read at, in the place of ``targets``."""
    models: tuple[str, ...] = ("run",)
    """Whose loss (accuracy) a claim on a target reads: ``run``, what the run evaluates (``eval.models``);
    ``average``, the servers' average model (``average_loss``), where the run evaluates another."""

    @property
    def on_target(self) -> bool:
        """Whether the claim is read at targets: times (steps...) to one, or anything at a number of epochs."""
        return self.metric in TARGET_METRICS or self.epochs is not None

    @property
    def sign(self) -> int:
        """+1 when the paper's side is the run's metric being lower (pairs) / the trend as named; -1 else."""
        if self.kind == "trend":
            return -1 if self.direction == "decreasing" else 1
        if self.within is not None:
            return 1
        if self.paper_value is not None:
            return 1 if self.paper_value > NEUTRAL[self.kind] else -1
        return -1 if self.direction == "higher" else 1


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_claim(raw: dict, where: str, default_baseline: str) -> Claim:
    """Validate one ``[[claims]]`` table strictly (unknown keys refused with the allowed list)."""
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a [[claims]] entry must be a table")
    unknown = sorted(set(raw) - CLAIM_KEYS)
    if unknown:
        raise UserError(f"unknown key {unknown[0]!r} in {where} [[claims]]: allowed keys are "
                        f"{', '.join(sorted(CLAIM_KEYS))}")
    text = raw.get("text", "?")
    missing = [k for k in ("text", "metric", "run", "kind") if k not in raw]
    if missing:
        raise UserError(f"{where}: claim {text!r} lacks {', '.join(missing)}")

    def bad(msg: str) -> UserError:
        return UserError(f"{where}: claim {text!r}: {msg}")

    kind, paper, op = raw["kind"], raw.get("paper_value"), raw.get("op", ">=")
    if kind not in KINDS:
        raise bad(f"kind = {kind!r}: choose one of {', '.join(KINDS)}")
    if "op" in raw and kind != "value":
        raise bad("op applies to value claims only")
    if "effect" in raw and kind != "trend":
        raise bad("effect applies to trend claims only")
    direction = raw.get("direction")
    baseline = raw.get("baseline")
    effect = raw.get("effect", "value")
    if kind == "value":
        if op not in OPS:
            raise bad(f"op = {op!r}: choose one of {', '.join(OPS)}")
        if op == "between":
            if not (isinstance(paper, list) and len(paper) == 2 and all(map(_number, paper)) and paper[0] < paper[1]):
                raise bad("op = \"between\" needs paper_value = [low, high] with low < high")
            paper = (float(paper[0]), float(paper[1]))
        elif not _number(paper):
            raise bad("a value claim needs a finite number paper_value")
        if direction is not None or baseline is not None:
            raise bad("a value claim has no direction or baseline: it compares the run with paper_value")
    elif kind in PAIR_KINDS:
        baseline = baseline or default_baseline
        if paper is not None and not _number(paper):
            raise bad("paper_value must be a finite number")
        if direction not in (None, "lower", "higher"):
            raise bad(f"direction = {direction!r}: choose lower or higher (the run's metric against the baseline's)")
        if paper is not None and direction is not None and \
                (direction == "lower") != (paper > NEUTRAL[kind]):
            raise bad(f"direction = {direction!r} contradicts paper_value = {paper}")
        if paper is not None and paper == NEUTRAL[kind]:
            raise bad(f"paper_value = {paper} is no effect: give the paper's figure or a direction")
    else:
        if direction not in TRENDS:
            raise bad(f"a trend claim needs direction = one of {', '.join(TRENDS)}")
        if paper is not None:
            raise bad("a trend claim takes no paper_value (it checks a direction)")
        if effect not in ("value",) + PAIR_KINDS:
            raise bad(f"effect = {effect!r}: choose value, {', '.join(PAIR_KINDS)}")
        if (effect == "value") != (baseline is None):
            raise bad("a trend against a baseline needs effect = reduction, ratio or difference; without a "
                      "baseline, leave effect out")
    within = raw.get("within")
    if within is not None:
        if kind not in PAIR_KINDS or paper is not None or direction is not None or "margin" in raw:
            raise bad("within = [low, high] (about the same) applies to a reduction, ratio or difference claim "
                      "with no paper_value, direction or margin")
        if not (isinstance(within, list) and len(within) == 2 and all(map(_number, within))
                and within[0] < NEUTRAL[kind] < within[1]):
            raise bad(f"within must be [low, high] with low < {NEUTRAL[kind]:g} < high (no difference lies "
                      f"inside), e.g. within = [0.5, 2] for a ratio")
        within = (float(within[0]), float(within[1]))
    margin = raw.get("margin")
    if margin is not None and (kind not in PAIR_KINDS or paper is not None or direction is None
                               or not _number(margin) or margin < 0):
        raise bad("margin (a number >= 0) applies to a reduction, ratio or difference claim with a direction and "
                  "no paper_value")
    seeds = raw.get("seeds")
    if seeds is not None and not (isinstance(seeds, list) and seeds and
                                  all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise bad("seeds must be a non-empty list of integers, e.g. seeds = [0, 1, 2]")
    targets, rule = raw.get("targets"), raw.get("rule")
    if (targets is not None or rule is not None) and raw["metric"] not in TARGET_METRICS:
        raise bad(f"targets and rule apply to {', '.join(TARGET_METRICS)} only")
    if rule is not None and rule not in RULES:
        raise bad(f"rule = {rule!r}: choose one of {', '.join(RULES)}")
    if targets is not None and (rule == "stopping" or not isinstance(targets, list) or not targets
                                or not all(_number(t) or t == REACHED for t in targets)
                                or len(set(targets)) < len(targets)):
        raise bad(f"targets must be a non-empty list of distinct numbers or {REACHED!r} (the highest accuracy, or "
                  "lowest loss, every run of the claim reaches), e.g. targets = [0.85, \"reached\"]; the stopping "
                  "rule takes none")
    epochs = raw.get("epochs")
    if epochs is not None:
        if not (isinstance(epochs, list) and epochs and all(isinstance(e, int) and not isinstance(e, bool) and e > 0
                                                             for e in epochs) and len(set(epochs)) == len(epochs)):
            raise bad("epochs must be a non-empty list of distinct whole numbers above 0, e.g. epochs = [30]")
        if targets is not None or rule is not None:
            raise bad("epochs takes the place of targets and rule: the claim is read where each run has completed "
                      "those epochs")
        if raw["metric"] not in (*TARGET_METRICS, *EVAL_METRICS):
            raise bad(f"epochs applies to {', '.join((*TARGET_METRICS, *EVAL_METRICS))} only")
    elif raw["metric"] in EVAL_METRICS:
        raise bad(f"metric = {raw['metric']!r} is read at a number of epochs: add epochs = [30], or name "
                  f"final_{raw['metric']} or best_{raw['metric']}")
    window = raw.get("window")
    if window is not None and (rule != "smoothed" or not isinstance(window, int) or isinstance(window, bool)
                               or window < 2):
        raise bad("window (a whole number of evaluations, 2 or more) applies to rule = \"smoothed\" only")
    headline = raw.get("headline", False)
    if not isinstance(headline, bool):
        raise bad(f"headline = {headline!r}: use true or false")
    for key in ("text", "metric", "run"):
        if not isinstance(raw[key], str) or not raw[key]:
            raise bad(f"{key} must be a non-empty string")
    return Claim(raw["text"], raw["metric"], raw["run"], kind, baseline,
                 float(paper) if _number(paper) else paper, op, direction, effect,
                 tuple(seeds) if seeds else None,
                 tuple(t if t == REACHED else float(t) for t in targets) if targets else None, rule,
                 raw.get("figure"), float(margin) if margin is not None else None, headline, window,
                 parse_diagnosis(raw.get("diagnosis"), bad), parse_reading(raw.get("reading"), headline, bad),
                 within, tuple(epochs) if epochs else None, parse_models(raw.get("models"), raw, bad))


MODELS = ("run", "average")
"""What ``models`` may name (``Claim.models``)."""


def parse_models(models, raw: dict, bad) -> tuple[str, ...]:
    if models is None:
        return ("run",)
    if not (isinstance(models, list) and models and all(m in MODELS for m in models)
            and len(set(models)) == len(models)):
        raise bad(f"models must be a non-empty list of distinct {' and '.join(MODELS)}, e.g. models = [\"run\", "
                  "\"average\"]: whose loss the claim's targets read")
    if raw["metric"] not in TARGET_METRICS or raw.get("epochs") is not None or raw.get("rule") == "stopping":
        raise bad("models applies to a claim read at loss or accuracy targets (a time, steps, bytes... to one)")
    return tuple(models)


def parse_reading(raw, headline: bool, bad) -> Reading | None:
    """A claim's ``reading``: ``{ quote = "...", section = "ADSP Sec. 5.2" }`` or ``"open"``; a headline claim
    must state one."""
    example = 'reading = { quote = "the time when the stopping rule fires", section = "ADSP Sec. 5.2" }'
    if raw is None:
        if headline:
            raise bad(f"a headline claim states how the paper defines what it measures: {example}, or "
                      f"reading = \"{OPEN}\" where the paper leaves it open")
        return None
    if raw == OPEN:
        return Reading()
    if not isinstance(raw, dict) or set(raw) != READING_KEYS or not all(
            isinstance(raw[k], str) and raw[k].strip() and "\n" not in raw[k].strip() for k in READING_KEYS):
        raise bad(f"reading must be {example} (each one line), or \"{OPEN}\"")
    return Reading(raw["quote"].strip(), raw["section"].strip())


def parse_diagnosis(raw, bad) -> Diagnosis | None:
    """A claim's ``diagnosis`` table, strictly (``bad(message)`` makes the error naming the claim)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise bad('diagnosis must be a table: diagnosis = {departures = ["model"], text = "...", ablations = ["run"]}')
    unknown = sorted(set(raw) - DIAGNOSIS_KEYS)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} in its diagnosis: allowed keys are {', '.join(sorted(DIAGNOSIS_KEYS))}")
    cause, text, ablations = raw.get("cause"), raw.get("text"), raw.get("ablations", [])
    departures = raw.get("departures", [])
    if not (isinstance(departures, list) and departures and all(isinstance(d, str) and d for d in departures)
            and len(set(departures)) == len(departures)):
        raise bad("a diagnosis cites the ledger rows it blames: departures = [\"model\", ...] (the ids of "
                  "ledger.toml's [[departure]] rows, each once)")
    if cause is not None and cause not in CAUSES:
        raise bad(f"diagnosis cause = {cause!r}: choose one of {', '.join(CAUSES)} "
                  f"({'; '.join(f'{k}: {v}' for k, v in CAUSES.items())})")
    if not isinstance(text, str) or not text.strip() or "\n" in text.strip():
        raise bad("a diagnosis needs text: one line saying how (the setting that differs, where we depart...)")
    if not (isinstance(ablations, list) and all(isinstance(a, str) and a.strip() and a.count(ABLATION_VS) <= 1
                                                 and all(n.strip() for n in a.split(ABLATION_VS))
                                                 for a in ablations)):
        raise bad("diagnosis ablations must be a list of run names, or of pairs \"run vs baseline\", e.g. "
                  "ablations = [\"adsp-unbiased\"]")
    if cause == "claim" and not ablations:
        raise bad("cause = \"claim\" needs the ablations that put the paper's own setting on the cited factors")
    return Diagnosis(cause, text.strip(), tuple(ablations), tuple(departures))
