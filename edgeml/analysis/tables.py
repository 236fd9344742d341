"""Text tables: markdown for reports, rich for the terminal, and the cell formats of a comparison (means with
their intervals, bounds of censored times, speedups)."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows])


def rich_table(title: str, headers: list[str], cells: list[list[str]]) -> Table:
    """Every text as written: a run named ``bsp[run.backend=procs]`` is no markup tag to drop."""
    table = Table(title=Text(title), caption=Text("means over seeds; [95% bootstrap interval] with several seeds"))
    for i, h in enumerate(headers):
        # fold, never cut: a narrow terminal wraps cells onto more lines instead of hiding digits
        table.add_column(Text(h), style="cyan" if i == 0 else None, justify="left" if i == 0 else "right",
                         overflow="fold")
    for row in cells:
        table.add_row(*(Text(str(c)) for c in row))
    return table


def wide_console(stderr: bool = False) -> Console:
    """A console; when output goes to a file or CI log, wide enough that tables do not wrap."""
    console = Console(stderr=stderr)
    return console if console.is_terminal else Console(stderr=stderr, width=240)


def number_text(v: float, fmt: str) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def ci_text(row: pd.Series, col: str, fmt: str, missing: str = "n/a") -> str:
    mean, lo, hi = row[col], row[f"{col}_ci_low"], row[f"{col}_ci_high"]
    if math.isnan(mean):
        return missing
    if lo == hi or math.isnan(lo):
        return fmt.format(mean)
    return f"{fmt.format(mean)} [{fmt.format(lo)}, {fmt.format(hi)}]"


def time_text(iv, reached: int, n: int) -> str:
    if reached == n:
        return f"{iv.low:.3g}" if iv.ci_low == iv.ci_high else f"{iv.low:.3g} [{iv.ci_low:.3g}, {iv.ci_high:.3g}]"
    return f"> {iv.low:.3g} (never)" if reached == 0 else f">= {iv.low:.3g} ({reached}/{n} reached)"


def reached_text(row: pd.Series, col: str, fmt: str) -> str:
    reached, n = (int(x) for x in row["reached"].split("/"))
    if reached == n:
        return ci_text(row, col, fmt)
    bound = fmt.format(row[f"{col}_bound"])
    return f"> {bound} (never)" if reached == 0 else f">= {bound} ({reached}/{n} reached)"


def speedup_text(row: pd.Series) -> str:
    lo, hi = row["speedup_low"], row["speedup_high"]
    if math.isnan(lo):
        return "n/a"
    if lo == hi:
        return ci_text(row, "speedup", "{:.2f}x")
    if math.isinf(hi) and lo > 0:
        return f">= {lo:.2f}x"
    if lo == 0 and math.isfinite(hi):
        return f"<= {hi:.2f}x"
    return "n/a (both censored)"
