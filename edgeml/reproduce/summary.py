"""The scoreboard: ``results/README.md``, one page over every committed reproduction.

``edgeml reproduce --summary`` renders it from each full reproduction's ``verdicts.csv`` (written beside its
REPORT.md by ``edgeml.reproduce.render``): per paper, the count of each verdict and of the claims not yet
diagnosed, then one row per headline claim (the paper's abstract and conclusions) with the paper's figure,
ours in words with its interval and seeds, the verdict and the diagnosis's cause. It reads the reports'
results only, so it is the same wherever it is rendered; a test checks that the committed one is current.
"""

from __future__ import annotations

import csv
from pathlib import Path

from edgeml.analysis.claims import CAUSES
from edgeml.analysis.tables import md_table
from edgeml.analysis.verdicts import verdict_kind
from edgeml.errors import UserError

SCOREBOARD = "README.md"


COLUMNS = ("claim", "headline", "at", "paper", "words", "measured", "n", "verdict", "cause")
"""The columns of ``verdicts.csv`` the scoreboard reads (``edgeml.reproduce.render.VERDICT_COLUMNS`` writes them)."""


def read_verdicts(path: Path) -> list[dict[str, str]]:
    """A reproduction's ``verdicts.csv``; a UserError naming the file where it cannot be read as one."""
    try:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UserError(f"--summary: cannot read {path} ({exc}): re-render that reproduction with "
                        "edgeml reproduce PAPER --resume --out FOLDER") from None
    if missing:
        raise UserError(f"--summary: {path} lacks the column(s) {', '.join(missing)}: it is no verdicts.csv "
                        "edgeml wrote; re-render that reproduction with edgeml reproduce PAPER --resume --out FOLDER")
    return rows


def render_summary(results: Path) -> str:
    """The scoreboard's text for the reproductions in ``results`` (``results/<paper>/verdicts.csv``)."""
    papers = sorted(p.parent for p in results.glob("*/verdicts.csv"))
    if not papers:
        raise UserError(f"--summary: no reproduction with a verdicts.csv in {results} (results/<paper>/): "
                        "reproduce a paper with --out results/<paper> first, or re-render one with --resume")
    lines = ["# Reproduction scoreboard", "",
             "Every paper's headline claims (its abstract and conclusions) as the committed full reproductions "
             "decide them; each paper's REPORT.md has every claim, the figures and the runs. Rendered by "
             "`edgeml reproduce --summary` from each reproduction's `verdicts.csv`; do not edit by hand.", "",
             "A headline claim reads holds, weaker, stronger or does not hold only on 5 seeds, any claim on at "
             "least 2; a claim that does not read holds carries a diagnosis: " + "; ".join(
                 f"*{k}*: {v}" for k, v in CAUSES.items()) + ".", ""]
    totals: dict[str, int] = {}
    overview, sections = [], []
    for folder in papers:
        rows = read_verdicts(folder / "verdicts.csv")
        counts: dict[str, int] = {}
        for r in rows:
            counts[verdict_kind(r["verdict"])] = counts.get(verdict_kind(r["verdict"]), 0) + 1
            totals[verdict_kind(r["verdict"])] = totals.get(verdict_kind(r["verdict"]), 0) + 1
        waiting = sum(r["cause"] == "not yet diagnosed" for r in rows)
        headline = [r for r in rows if r["headline"] == "1"]
        overview.append([f"[{folder.name}]({folder.name}/REPORT.md)", str(len(rows)), str(len(headline)),
                         ", ".join(f"{n} {k}" for k, n in sorted(counts.items())), str(waiting)])
        sections += [f"## {folder.name}", ""]
        if headline:
            sections += [md_table(["claim", "at", "paper", "ours", "n", "verdict", "diagnosis"],
                                  [[r["claim"], r["at"], r["paper"], _ours(r), r["n"], f"**{r['verdict']}**",
                                    r["cause"] or "-"] for r in headline]), ""]
        else:
            sections += ["(no claim of this experiment is marked headline)", ""]
    lines += ["| reproduction | results | headline | verdicts | not yet diagnosed |", "|---|---|---|---|---|",
              *("| " + " | ".join(r) + " |" for r in overview), "",
              "All reproductions: " + ", ".join(f"{n} {k}" for k, n in sorted(totals.items())) + ".", "",
              *sections]
    return "\n".join(lines)


def _ours(r: dict[str, str]) -> str:
    return f"{r['words']} ({r['measured']})" if r["words"] else r["measured"]


def write_summary(results: Path) -> Path:
    path = results / SCOREBOARD
    path.write_text(render_summary(results))
    return path
