"""Runtime overhead of the procs backend: ASP, no throttling; compute fraction should be >= 0.9.

compute fraction = sum of worker compute time / (wall time x min(N, cores)).
Every combination of --workers and --models runs for --seconds; the monitor evaluates only at the start and
the end (as in bench_sim.py), so the figure measures the runtime, not the evaluation the user asks for.
Usage: python scripts/bench_overhead.py [--workers 1 2] [--models lenet5 cifar-cnn] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from _bench import record, run_config
from edgeml.config import load_config
from edgeml.train import build_job

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=["lenet5", "cifar-cnn"])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--dataset", default="fashion-mnist")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    lines = ["| workers | cores | model | step ms | params | steps | wall s | worker wait + comm ms per step | "
             "compute fraction |", "|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            params = build_job(load_config(overrides=[f"data.dataset='{args.dataset}'", f"model.name='{model}'"]))\
                .init_params.numel()
            for n in args.workers:
                path, nodes, summary = run_config(Path(tmp), "run.algorithm='asp'", f"cluster.workers={n}",
                                                  "cluster.throttle=false", f"data.dataset='{args.dataset}'",
                                                  f"model.name='{model}'", f"stop.max_time={args.seconds}",
                                                  f"eval.interval={10 * args.seconds}", "eval.test_samples=500")
                w = nodes[nodes.role == "worker"]
                frac = w.compute_s.sum() / (summary["duration_s"] * min(n, cores))
                steps = w.steps.sum()
                lines.append(f"| {n} | {cores} | {model} | {1e3 * w.compute_s.sum() / steps:.1f} | {params:,} | "
                             f"{steps} | {summary['duration_s']:.1f} | "
                             f"{1e3 * (w.comm_s.sum() + w.wait_s.sum()) / steps:.2f} | {frac:.3f} |")
    record("overhead", lines + ["", "Target: compute fraction >= 0.9. The parameter server and the monitor are "
                                "processes too: with N = cores they take their CPU time from the workers."])
