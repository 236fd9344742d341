"""Parallel reproductions: the same quick reproduction with ``--jobs 2`` and ``--jobs 1``, side by side in one
invocation, on a 2-core machine. Target: a speedup of at least 1.8x, with identical comparison tables, reports
and run series (sim runs are deterministic, whatever process runs them).

Each configuration runs as its own ``edgeml reproduce`` process into a fresh folder, timed on the wall clock
from start to REPORT.md; rounds alternate which goes first. Usage:
python scripts/bench_jobs.py [--paper esync] [--rounds 2] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _bench import ROOT, record

from edgeml import rundir

TARGET = 1.8


def reproduce(paper: str, out: Path, jobs: int) -> float:
    """Wall seconds of ``edgeml reproduce PAPER --quick --jobs N`` into ``out``."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "edgeml", "reproduce", paper, "--quick", "--out", str(out), "--jobs",
                    str(jobs)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def same_results(a: Path, b: Path) -> dict[str, bool]:
    """Which outputs of two reproductions are byte-identical (the report up to its command line)."""
    def files(out: Path, pattern: str) -> dict[str, bytes]:
        return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.glob(pattern))}

    def evals(out: Path) -> dict[str, bytes | None]:
        return {run.name: rundir.read_file(run, rundir.EVALS) for run in sorted((out / "runs").iterdir())}

    def report(out: Path) -> list[str]:
        return [x for x in (out / "REPORT.md").read_text().splitlines() if "edgeml reproduce" not in x]

    return {"compare tables": files(a, "compare*.csv") == files(b, "compare*.csv"),
            "REPORT.md": report(a) == report(b),
            "runs' evaluations": evals(a) == evals(b)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--paper", default="esync")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    times: dict[int, list[float]] = {1: [], args.jobs: []}
    checks: list[dict[str, bool]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [1, args.jobs] if r % 2 == 0 else [args.jobs, 1]
            outs = {j: Path(tmp) / f"r{r}-j{j}" for j in order}
            for j in order:
                times[j].append(reproduce(args.paper, outs[j], j))
            checks.append(same_results(outs[1], outs[args.jobs]))
    serial, side = sum(times[1]) / args.rounds, sum(times[args.jobs]) / args.rounds
    speedup = serial / side
    identical = {k: all(c[k] for c in checks) for k in checks[0]}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    record("jobs", [
        f"`edgeml reproduce {args.paper} --quick` with `--jobs 1` (one run at a time, in the driver's process) and "
        f"`--jobs {args.jobs}` (runs side by side, each in its own process), {args.rounds} rounds alternating which "
        f"goes first, on a machine with {cores} cores. Wall seconds from start to REPORT.md.",
        "",
        "| configuration | wall s per round | mean |",
        "|---|---|---|",
        f"| --jobs 1 | {', '.join(f'{t:.1f}' for t in times[1])} | {serial:.1f} |",
        f"| --jobs {args.jobs} | {', '.join(f'{t:.1f}' for t in times[args.jobs])} | {side:.1f} |",
        "",
        f"Speedup: **{speedup:.2f}x** (target >= {TARGET}x: {'met' if speedup >= TARGET else 'NOT met'}).",
        "",
        "Identical outputs: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in identical.items()) + ".",
    ])


if __name__ == "__main__":
    main()
