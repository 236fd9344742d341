"""The scoreboard: ``results/README.md``, one page over every committed reproduction.

``edgeml reproduce --summary`` renders it from each full reproduction's ``verdicts.csv`` (written beside its
REPORT.md by ``edgeml.reproduce.render``; read here as typed verdicts, ``read_verdicts``): per paper, the count of
each verdict, of the headline results reproduced (on the paper's side and within 2x of its figure) and of the
claims not yet diagnosed, then one row per headline claim (the paper's abstract and conclusions) with the
paper's figure, ours in words with its interval and seeds, the verdict and the diagnosis's cause; for an
experiment with no headline claim (the toolkit's own: baselines, the procs/sim twins), one row per result. It reads the
reports' results only, so it is the same wherever it is rendered; a test checks that the committed one is
current.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from edgeml.analysis.claims import CAUSES
from edgeml.analysis.tables import md_table
from edgeml.analysis.verdicts import FAR, Verdict, reproduced, verdict_from_row, verdict_words
from edgeml.errors import UserError

SCOREBOARD = "README.md"


COLUMNS = ("claim", "headline", "at", "paper", "words", "measured", "n", "verdict", "cause")
"""The columns of ``verdicts.csv`` every reader needs (``edgeml.reproduce.render.VERDICT_COLUMNS`` writes them,
with the verdict's other typed fields)."""


@dataclass(frozen=True)
class Row:
    """One result of a ``verdicts.csv``: its claim, where it was measured, and its verdict as data."""

    claim: str
    headline: bool
    at: str
    paper: str
    words: str
    measured: str
    decision: Verdict
    cause: str

    @property
    def verdict(self) -> str:
        return verdict_words(self.decision)


def read_verdicts(path: Path, command: str = "--summary") -> list[Row]:
    """A reproduction's ``verdicts.csv`` as typed rows; a UserError naming the file (and the claim) where it
    cannot be read as one."""
    fix = "re-render that reproduction with edgeml reproduce PAPER --resume --out FOLDER"
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            raw = list(reader)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"{command}: cannot read {path} ({exc}): {fix}") from None
    if missing:
        raise UserError(f"{command}: {path} lacks the column(s) {', '.join(missing)}: it is no verdicts.csv "
                        f"edgeml wrote; {fix}")
    rows = []
    for r in raw:
        try:
            decision = verdict_from_row(r)
        except ValueError as exc:
            raise UserError(f"{command}: {path}, claim {r['claim']!r} ({r['at']}): {exc}; {fix}") from None
        rows.append(Row(r["claim"], r["headline"] == "1", r["at"], r["paper"], r["words"], r["measured"], decision,
                        r["cause"]))
    return rows


def render_summary(results: Path) -> str:
    """The scoreboard's text for the reproductions in ``results`` (``results/<paper>/verdicts.csv``)."""
    papers = sorted(p.parent for p in results.glob("*/verdicts.csv"))
    if not papers:
        raise UserError(f"--summary: no reproduction with a verdicts.csv in {results} (results/<paper>/): "
                        "reproduce a paper with --out results/<paper> first, or re-render one with --resume")
    lines = ["# Reproduction scoreboard", "",
             "Every paper's headline claims (its abstract and conclusions) as the committed full reproductions "
             "decide them (an experiment of the toolkit's own, without headline claims: every result); each "
             "REPORT.md has every claim, the figures and the runs. Rendered by "
             "`edgeml reproduce --summary` from each reproduction's `verdicts.csv`; do not edit by hand.", "",
             "A headline claim reads holds, weaker, stronger or does not hold only on 5 seeds, any claim on at "
             f"least 2; a claim that does not read holds carries a diagnosis (a stronger one once it lies beyond "
             f"{FAR:g}x the paper's figure): " + "; ".join(f"*{k}*: {v}" for k, v in CAUSES.items()) + ". "
             f"*Reproduced*: the headline results that read holds, weaker or stronger within {FAR:g}x of the "
             "paper's figure (a claim without a figure: holds), out of all.", ""]
    totals: Counter = Counter()
    overview, sections = [], []
    for folder in papers:
        rows = read_verdicts(folder / "verdicts.csv")
        counts = Counter(r.decision.kind for r in rows)
        totals += counts
        waiting = sum(r.cause == "not yet diagnosed" for r in rows)
        headline = [r for r in rows if r.headline]
        overview.append([f"[{folder.name}]({folder.name}/REPORT.md)", str(len(rows)), str(len(headline)),
                         ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), str(waiting),
                         f"{sum(reproduced(r.decision) for r in headline)} of {len(headline)}"])
        sections += [f"## {folder.name}", ""]
        if headline:
            sections += [md_table(["claim", "at", "paper", "ours", "n", "verdict", "diagnosis"],
                                  [[r.claim, r.at, r.paper, _ours(r), str(r.decision.n), f"**{r.verdict}**",
                                    r.cause or "-"] for r in headline]), ""]
        else:  # an experiment of the toolkit's own (baselines, twins): each of its results
            sections += ["No claim of this experiment is marked headline; every result:", "",
                         md_table(["claim", "at", "ours", "n", "verdict", "diagnosis"],
                                  [[r.claim, r.at, _ours(r), str(r.decision.n), f"**{r.verdict}**", r.cause or "-"]
                                   for r in rows]), ""]
    lines += ["| reproduction | results | headline | verdicts | awaiting a diagnosis | reproduced |",
              "|---|---|---|---|---|---|", *("| " + " | ".join(r) + " |" for r in overview), "",
              "All reproductions: " + ", ".join(f"{n} {k}" for k, n in sorted(totals.items())) + ".", "",
              *sections]
    return "\n".join(lines)


def _ours(r: Row) -> str:
    return f"{r.words} ({r.measured})" if r.words else r.measured


def write_summary(results: Path) -> Path:
    path = results / SCOREBOARD
    path.write_text(render_summary(results))
    return path
