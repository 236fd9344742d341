"""Ray's overhead per run: the same small quick reproduction through `--cluster ray` (a local Ray instance) and
with `--jobs` (child processes), side by side; target at most 2 s more per run through Ray.

Each side is a whole `edgeml reproduce` command, as a user runs it (start-up, runs, tables, figures, REPORT.md),
with the same cores (`--jobs N`, and `--cluster ray --jobs N`: a Ray instance of N CPUs). The two alternate in
rounds so that a host whose speed drifts affects both alike; the medians are compared. Overhead per run =
(Ray's wall time - local wall time) / runs. Ray's start and shutdown (once per reproduction) are timed alone
too, so the rest, per run, is what each task costs: submitting it, packing its run directory on the node and
unpacking it into --out. Both sides must give the same run directories.
Usage: python scripts/bench_cluster.py [--seeds 0,1,2,3] [--jobs 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _bench import ROOT, record  # noqa: E402
from edgeml import rundir  # noqa: E402
from edgeml.reproduce.parallel import default_jobs  # noqa: E402

TARGET_S = 2.0

EXPERIMENT = """
[experiment]
paper = "bench-cluster"
seeds = [0]
baseline = "bsp"
target_accuracy = 0.5

[settings]
run = { backend = "sim" }
cluster = { workers = 2 }

[quick]
stop = { max_time = 2 }

[[runs]]
algorithm = "bsp"
sweep = { "cluster.hetero" = ["H=1", "1:3"] }

[[runs]]
name = "ssp"
algorithm = "ssp"
config = { ssp = { staleness = 1 } }
"""
"""Three sim runs of 2 workers per seed, about a second each: small runs, where overhead shows most."""


def reproduce(toml: Path, out: Path, seeds: str, how: list[str]) -> float:
    """Wall seconds of one `edgeml reproduce --quick` command into ``out``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "edgeml", "reproduce", str(toml), "--quick", "--seeds", seeds,
                           "--out", str(out), *how], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"edgeml reproduce {' '.join(how)} failed:\n{done.stderr[-3000:]}")
    return wall


def ray_start_stop(jobs: int) -> float:
    """Seconds to start and shut down a local Ray instance as reproduce does (``edgeml.reproduce.cluster``)."""
    from edgeml.reproduce.cluster import session

    t0 = time.perf_counter()
    with session(None, jobs):
        pass
    return time.perf_counter() - t0


def runs_of(out: Path) -> dict[str, bytes]:
    """Every file of the run directories but meta.json (wall clock) and config.toml (it names the output)."""
    return {f"{run.name}/{name}": data for run in sorted((out / "runs").iterdir()) if run.is_dir()
            for name, data in rundir.files(run).items() if name not in (rundir.META, rundir.CONFIG)}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", default="0,1,2,3", help="three runs per seed")
    ap.add_argument("--jobs", type=int, default=default_jobs(), help="cores for both sides")
    ap.add_argument("--rounds", type=int, default=2, help="local and Ray alternate this many times")
    args = ap.parse_args()
    sides = {"local": ["--jobs", str(args.jobs)], "ray": ["--cluster", "ray", "--jobs", str(args.jobs)]}
    walls: dict[str, list[float]] = {side: [] for side in sides}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        toml = Path(tmp) / "bench-cluster.toml"
        toml.write_text(EXPERIMENT)
        results = {}
        for r in range(args.rounds):
            for side, how in sides.items():
                out = Path(tmp) / f"{side}-{r}"
                walls[side].append(reproduce(toml, out, args.seeds, how))
                results[side] = runs_of(out)
        runs = len(rundir.find_runs([str(Path(tmp) / "local-0" / "runs")]))
        same = results["ray"] == results["local"] and runs > 0
        start_stop = ray_start_stop(args.jobs)
    load_after = os.getloadavg()[0]
    local, ray = statistics.median(walls["local"]), statistics.median(walls["ray"])
    per_run = (ray - local) / runs
    verdict = "met" if per_run <= TARGET_S else "not met"
    record("cluster", [
        f"The same quick reproduction ({runs} sim runs of 2 workers, about a second of compute each, seeds "
        f"{args.seeds}) as whole `edgeml reproduce` commands: with `--jobs {args.jobs}` (runs side by side in local "
        f"processes) and with `--cluster ray --jobs {args.jobs}` (a local Ray instance of {args.jobs} CPUs, a Ray task "
        f"per run, each run directory packed on its node and unpacked into --out); {args.rounds} rounds, "
        f"alternating, medians compared. Host: {os.cpu_count()} cores, load average {load_before:.1f} before and "
        f"{load_after:.1f} after (other work on the host slows both sides alike).", "",
        "| side | wall s per round | median wall s |", "|---|---|---|",
        *(f"| {side} | {', '.join(f'{w:.1f}' for w in ws)} | {statistics.median(ws):.1f} |"
          for side, ws in walls.items()), "",
        f"Ray's overhead: **{per_run:+.2f} s per run** ({ray - local:+.1f} s over {runs} runs); target at most "
        f"{TARGET_S:g} s per run: {verdict}. Of it, starting and shutting down the local Ray instance: "
        f"{start_stop:.1f} s once per reproduction ({start_stop / runs:.2f} s per run here, less with more runs); "
        f"the rest, what each task costs: {per_run - start_stop / runs:+.2f} s per run. Run directories identical "
        f"on both sides: {'yes' if same else 'NO'}."])
