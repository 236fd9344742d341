"""Runtime overhead of the procs backend: ASP, no throttling; compute fraction should be >= 0.9.

compute fraction = sum of worker compute time / (wall time x min(N, cores)).
Usage: python scripts/bench_overhead.py [--workers 2] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from _bench import record, run_config

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--model", default="lenet5")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    lines = ["| workers | cores | model | steps | wall s | compute fraction |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.workers:
            _, nodes, summary = run_config(Path(tmp), "run.algorithm='asp'", f"cluster.workers={n}",
                                           "cluster.throttle=false", f"data.dataset='{args.dataset}'",
                                           f"model.name='{args.model}'", f"stop.max_time={args.seconds}",
                                           "eval.interval=5.0", "eval.test_samples=500")
            workers = nodes[nodes.role == "worker"]
            frac = workers.compute_s.sum() / (summary["duration_s"] * min(n, cores))
            lines.append(f"| {n} | {cores} | {args.model} | {summary['total_steps']} | "
                         f"{summary['duration_s']:.1f} | {frac:.3f} |")
    record("overhead", lines + ["", "Target: compute fraction >= 0.9 (evaluation every 5 s on 500 test samples "
                                "runs in the monitor process and competes for the same cores)."])
