"""``--plan``: the planned runs and what they will cost, without running or writing anything.

Estimated core-seconds per run (a rough guide for choosing ``--jobs`` and a machine, not a promise):

* a run finished in the output folder with the same configuration: the ``cpu_s`` recorded in its
  ``meta.json``;
* a sim run not finished: the mean recorded ``cpu_s`` of the same run's finished seeds in the output folder
  (the same ``[[runs]]`` entry and sweep point), else of this experiment's finished sim runs of the same
  algorithm and model there, each scaled by the work its budget bounds against the run's (the steps of the
  formula below: 64 workers for 300 s cost eight times 8 workers for 300 s); without any, ``SIM_SETUP_S`` plus
  the cost of the steps simulated, which the first of its budgets bounds: ``SIM_CPU_PER_WORKER_S * workers *
  max_time`` by the clock, ``SIM_CPU_PER_STEP_S * max_steps`` by the step count, ``SIM_CPU_PER_STEP_S * workers
  * iterations`` by the algorithm's own iteration budget (its section's ``iterations``, as SNAP's and the PS
  schemes' have: every worker steps once per iteration);
* a procs run: its reserved cores (``parallel.reservation``) times ``max_time + PROCS_SETUP_S`` (its processes
  run on the wall clock for ``stop.max_time``, after starting and calibrating); unknown when its algorithm's
  ``iterations`` ends it first;
* a run with neither budget (``stop.max_time`` and ``stop.max_steps`` 0) and no measurement: unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edgeml import rundir
from edgeml.reproduce.execute import finished
from edgeml.reproduce.parallel import reservation
from edgeml.reproduce.plan import PlannedRun

SIM_SETUP_S = 3.0
SIM_CPU_PER_WORKER_S = 0.05
SIM_CPU_PER_STEP_S = 0.005
PROCS_SETUP_S = 10.0


@dataclass
class PlanRow:
    run: PlannedRun
    backend: str
    workers: int
    max_time: float
    max_steps: int
    cores: int  # reserved by the scheduler (at most --jobs)
    finished: bool
    selected: bool
    estimate: float | None  # core-seconds; None: unknown
    measured: bool  # the estimate is a finished run's own cpu_s


def _cpu_s(path: Path) -> float | None:
    try:
        value = rundir.read_json(path, rundir.META).get("cpu_s")
    except (OSError, ValueError):
        return None
    return float(value) if isinstance(value, (int, float)) else None


def plan_rows(planned: list[PlannedRun], selected: set[str], out: Path, quick: bool, jobs: int) -> list[PlanRow]:
    """One row per planned run with its estimated core-seconds (see the module's docstring)."""
    import copy

    rows, by_name, by_algorithm, iterations = [], {}, {}, {}
    for p in planned:
        cfg = copy.deepcopy(p.cfg)
        cfg.run.name, cfg.run.out = p.dirname, str(out / "runs")
        path = out / "runs" / p.dirname
        done = finished(path, cfg, quick)
        cpu = _cpu_s(path) if done else None
        iterations[p.dirname] = int(getattr(cfg.algo, "iterations", 0) or 0)
        row = PlanRow(p, cfg.run.backend, cfg.cluster.workers, float(cfg.stop.max_time), cfg.stop.max_steps,
                      reservation(cfg, jobs), done, p.dirname in selected, cpu, cpu is not None)
        if cpu is not None:
            by_name.setdefault(p.name, []).append(cpu)
            if row.backend == "sim":
                by_algorithm.setdefault((p.algorithm, cfg.model.name), []).append((cpu, _work(row, iterations)))
        rows.append(row)
    for row in rows:
        if row.measured:
            continue
        work = _work(row, iterations)
        alike = by_algorithm.get((row.run.algorithm, row.run.cfg.model.name))
        if row.backend == "procs":  # on the wall clock: an iteration budget ends it at a time no one knows ahead
            bounded = row.max_time and not iterations[row.run.dirname]
            row.estimate = row.cores * (row.max_time + PROCS_SETUP_S) if bounded else None
        elif by_name.get(row.run.name):
            row.estimate = sum(by_name[row.run.name]) / len(by_name[row.run.name])
        elif alike:  # scaled by the work each one's budget bounded against this run's
            row.estimate = sum(cpu * (work / w if work and w else 1.0) for cpu, w in alike) / len(alike)
        else:
            row.estimate = SIM_SETUP_S + work if work is not None else None
    return rows


def _work(row: PlanRow, iterations: dict[str, int]) -> float | None:
    """The cost of the steps a sim run's first budget lets it simulate (the module docstring's formula, without
    the setup); None with no budget that bounds it."""
    its = iterations[row.run.dirname]
    bounds = ([SIM_CPU_PER_WORKER_S * row.workers * row.max_time] if row.max_time else []) + \
        ([SIM_CPU_PER_STEP_S * row.max_steps] if row.max_steps else []) + \
        ([SIM_CPU_PER_STEP_S * row.workers * its] if its else [])
    return min(bounds) if bounds else None


def _seconds(s: float | None) -> str:
    return "?" if s is None else f"{s:,.0f}"


def plan_table(paper: str, rows: list[PlanRow], jobs: int):
    """The rows as a table for the terminal, and the total line."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"{paper}: {len(rows)} planned runs"), title_justify="left")
    for h in ("run", "seed", "backend", "workers", "max_time", "cores", "core-s", "finished"):
        table.add_column(h, overflow="fold", justify="left" if h in ("run", "backend", "finished") else "right")
    for r in rows:
        state = "yes" if r.finished else ("no" if r.selected else "no (not selected by --only)")
        table.add_row(Text(r.run.name), str(r.run.seed), r.backend, str(r.workers),
                      f"{r.max_time:g}" if r.max_time else "-", str(r.cores),
                      _seconds(r.estimate) + ("" if r.measured or r.estimate is None else " (est.)"), state)
    todo = [r for r in rows if not r.finished and r.selected]
    unknown = sum(r.estimate is None for r in rows)
    total = sum(r.estimate or 0 for r in rows)
    left = sum(r.estimate or 0 for r in todo)
    line = (f"total: {total:,.0f} core-seconds for all {len(rows)} runs; {len(todo)} to run: {left:,.0f} "
            f"core-seconds, about {left / jobs / 60:,.1f} min on {jobs} core(s)"
            + (f"; {unknown} run(s) of unknown cost (no recorded cpu_s, no budget that bounds it)" if unknown else ""))
    return table, Text(line)
