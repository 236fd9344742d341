"""Twin runs: one configuration on real processes (procs) and on the virtual clock (sim), the same seed and world,
and how far the simulator's prediction lies from what the processes measured (``edgeml twin``).

``twin_table(procs, sim, targets)``: a row per quantity, each side's value and the simulator's error:

- ``time to <target>`` under both arrival rules (``stays``: never leaves the target again; ``first``); a side
  that never reaches it shows what it spent (censored), and the error is left open;
- ``samples per second`` and ``bytes per second`` over the run (the summary's totals over its duration);
- ``bytes`` and ``messages`` over the run (every node's): both backends count them in one message path
  (``edgeml.runtime.base``), so they agree up to the steps each side fits into its budget; a frame whose size
  depends on the values it carries (SNAP's) may differ with the clock;
- each node's (workers' and servers') ``steps`` and ``compute``, ``communication`` and ``waiting`` shares of its
  time, and the ``other`` share none of them counts (work between a program's steps, messages and waits: on the
  virtual clock it takes no time, so a share there is a cost the simulator leaves out); the error of a share is
  its difference, in points;
- for a run that logs staleness (asynchronous schemes: ``series/staleness.csv``) its mean, median, 90th
  percentile and largest value;
- the procs run's contention mark: the median and worst realised / target step time of its throttled nodes
  (``meta.json``: ``contention``; no error: the simulator's steps take their target), so that a gap the host
  caused is told from one the simulator made.

The error is ``sim / procs - 1`` (a share: ``sim - procs``; infinite where procs measured none and sim some).
Times and rates have a bound (``BOUND``: the simulator predicts them within 10% on a quiet host); ``within`` says
whether the row keeps it (None where there is no error to judge: ``unmeasured``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from edgeml.analysis.convergence import Target, reach_run

if TYPE_CHECKING:
    from edgeml.rundir import Run

BOUND = 0.10
"""The simulator's relative error on times to a target and on rates that the twins allow (on a quiet host)."""
RULES = ("stays", "first")
SHARES = (("compute", "compute_s"), ("communication", "comm_s"), ("waiting", "wait_s"))
COLUMNS = ["quantity", "procs", "sim", "error", "unit", "bound", "within"]


def _row(quantity: str, procs: float, sim: float, unit: str = "", bound: float | None = None,
         share: bool = False) -> dict:
    if share:
        error = sim - procs
    elif not (math.isfinite(procs) and math.isfinite(sim)):
        error = math.nan
    else:
        error = sim / procs - 1 if procs else (0.0 if sim == 0 else math.inf)  # procs measured none, sim some
    within = (abs(error) <= bound) if bound is not None and not math.isnan(error) else None
    return {"quantity": quantity, "procs": procs, "sim": sim, "error": error, "unit": unit, "bound": bound,
            "within": within}


def _reach_rows(procs: Run, sim: Run, target: Target) -> list[dict]:
    rows = []
    for rule in RULES:
        t = Target(target.metric, target.value, rule)
        hit = {side: reach_run(r, t) for side, r in (("procs", procs), ("sim", sim))}
        spacing = float(np.nanmax([h.resolution["time"] for h in hit.values()] + [0.0]))
        rule_name = "" if rule == "stays" else ", first reach"
        row = _row(f"time to {t.short}{rule_name} (evaluations {spacing:.2g} s apart)", hit["procs"].time_s,
                   hit["sim"].time_s, "s", BOUND)
        if any(h.censored for h in hit.values()):  # what a side spent without reaching it: no error to give
            row.update(error=math.nan, within=None,
                       quantity=row["quantity"] + " (" + ", ".join(f"{s} never reached it" for s, h in hit.items()
                                                                  if h.censored) + ")")
        rows.append(row)
    return rows


NODE_COLUMNS = ("role", "index", "steps", "compute_s", "comm_s", "wait_s", "alive_s", "messages_sent")


def _node_table(r: Run) -> pd.DataFrame:
    """Every node of the run (``nodes.csv``), indexed "worker 0", "ps 0"..."""
    nodes = r.table("nodes.csv", NODE_COLUMNS)
    return nodes.set_index(nodes["role"] + " " + nodes["index"].astype(str))


def _staleness(r: Run) -> pd.Series | None:
    s = r.table("series/staleness.csv", required=False)
    return None if s is None or "staleness" not in s.columns or s.empty else s["staleness"].astype(float)


def twin_table(procs: Run, sim: Run, targets: list[Target]) -> pd.DataFrame:
    """The twins side by side (the module docstring)."""
    rows = [r for t in targets for r in _reach_rows(procs, sim, t)]
    p, s = procs.summary, sim.summary
    for name, key in (("samples per second", "total_samples"), ("bytes per second", "total_bytes")):
        rows.append(_row(name, p[key] / (p["duration_s"] or math.nan), s[key] / (s["duration_s"] or math.nan), "/s",
                         BOUND))
    np_, ns = _node_table(procs), _node_table(sim)
    rows.append(_row("bytes", float(p["total_bytes"]), float(s["total_bytes"]), "B"))
    rows.append(_row("messages", float(np_["messages_sent"].sum()), float(ns["messages_sent"].sum())))
    for node in np_.index.intersection(ns.index):  # every node, the server's too
        a, b = np_.loc[node], ns.loc[node]
        if not (a["alive_s"] > 0 and b["alive_s"] > 0):
            continue
        rows.append(_row(f"{node}: steps", float(a["steps"]), float(b["steps"])))
        for name, col in SHARES:
            rows.append(_row(f"{node}: {name} share", a[col] / a["alive_s"], b[col] / b["alive_s"], "share",
                             share=True))
        other = [1 - sum(n[col] for _, col in SHARES) / n["alive_s"] for n in (a, b)]  # the clock ran, none counted
        rows.append(_row(f"{node}: other share", *other, "share", share=True))
    st = {side: _staleness(r) for side, r in (("procs", procs), ("sim", sim))}
    if st["procs"] is not None and st["sim"] is not None:
        for name, read in (("mean", pd.Series.mean), ("median", pd.Series.median),
                           ("90th percentile", lambda x: x.quantile(0.9)), ("largest", pd.Series.max)):
            rows.append(_row(f"staleness, {name}", float(read(st["procs"])), float(read(st["sim"]))))
    contention = procs.meta().get("contention") or {}
    for name, key in (("median", "median_ratio"), ("worst", "worst_ratio")):
        if contention.get(key) is not None:  # the procs side only: the simulator's steps take their target
            rows.append({**_row(f"procs contention: {name} realised / target step time", float(contention[key]),
                                1.0), "error": math.nan})
    return pd.DataFrame(rows, columns=COLUMNS)


def breaches(table: pd.DataFrame) -> pd.DataFrame:
    """The rows whose error exceeds their bound."""
    return table[table["within"].eq(False)]


def unmeasured(table: pd.DataFrame) -> pd.DataFrame:
    """The bounded rows with no error to judge (a side never reached the target, or measured nothing)."""
    return table[table["bound"].notna() & table["within"].isna()]


def _number(v: float, unit: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if unit == "share":
        return f"{100 * v:.1f}%"
    return f"{v:,.4g}" if abs(v) < 1e5 else f"{v:,.0f}"


def _error(row) -> str:
    e = row["error"]
    if e is None or (isinstance(e, float) and math.isnan(e)):
        return "-"
    return f"{100 * e:+.1f} pt" if row["unit"] == "share" else f"{100 * e:+.1f}%"


def markdown(table: pd.DataFrame, procs: Run, sim: Run) -> str:
    """The twin table as a report: what ran, each quantity's values and error, and the verdict on the bounds."""
    over, open_ = breaches(table), unmeasured(table)
    lines = [f"# Twin runs: {procs.summary['algorithm']}, {procs.summary['workers']} workers, seed {procs.seed}", "",
             f"procs: `{procs.path}`  ", f"sim: `{sim.path}`", "",
             f"The simulator's error is sim / procs - 1 (a share: the difference in points); times and rates are "
             f"bounded at {100 * BOUND:.0f}%. "
             + (f"**{len(over)} beyond the bound**: {', '.join(over['quantity'])}. " if len(over) else "")
             + (f"**{len(open_)} not measured**: {', '.join(open_['quantity'])}. " if len(open_) else "")
             + ("**Every bounded quantity is within it.**" if not len(over) and not len(open_) else ""), "",
             "| quantity | procs | sim | error | bound |", "|---|---:|---:|---:|---:|"]
    for _, r in table.iterrows():
        bound = "-" if r["bound"] is None or (isinstance(r["bound"], float) and math.isnan(r["bound"])) \
            else f"{100 * r['bound']:.0f}%" + ("" if r["within"] is not False else " (beyond)")
        lines.append(f"| {r['quantity']} | {_number(r['procs'], r['unit'])} | {_number(r['sim'], r['unit'])} | "
                     f"{_error(r)} | {bound} |")
    return "\n".join(lines) + "\n"


def figure(procs: Run, sim: Run, metric: str = "accuracy"):
    """The two runs' curves of ``metric`` against time, overlaid."""
    from edgeml.analysis.plots.style import new_figure, panel_title

    fig, (ax,) = new_figure(1, 1, 6.5, 4.2)
    for side, r, style in (("procs", procs, "-"), ("sim", sim, "--")):
        ev = r.evals.dropna(subset=[metric])
        ax.plot(ev["time_s"], ev[metric], ls=style, lw=1.5, marker="o" if side == "procs" else None, ms=3,
                label="sim (virtual clock)" if side == "sim" else "procs (wall clock)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"test {metric}")
    ax.legend(frameon=False)
    panel_title(fig, f"Twin runs: {procs.summary['algorithm']} on real processes and on the virtual clock",
                f"{procs.summary['workers']} workers, {procs.summary['hetero']}, seed {procs.seed}")
    return fig


def write(out: Path, table: pd.DataFrame, procs: Run, sim: Run) -> list[Path]:
    """twin.csv, twin.md and twin.png in ``out``."""
    from edgeml.analysis.figures import save_png

    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "twin.csv", index=False)
    (out / "twin.md").write_text(markdown(table, procs, sim))
    save_png(figure(procs, sim), out / "twin.png")
    return [out / "twin.csv", out / "twin.md", out / "twin.png"]
