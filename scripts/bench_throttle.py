"""Throttling fidelity: measured step-time ratios vs the profile, N worker processes on this host.

In the regime of the real reproductions (the ADSP CNN, 18 workers of the EC2 mix on this host's cores): each
worker's mean step time (compute time / steps) relative to the fastest worker's, and its steps per alive second
relative to the fastest worker's, against the profile's factor. Target: every worker within 10% on both.
Usage: python scripts/bench_throttle.py [--workers 18] [--hetero ec2] [--model cifar-cnn]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from _bench import record, run_config

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=18)
    ap.add_argument("--hetero", default="ec2")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--algorithm", default="asp")
    ap.add_argument("--model", default="cifar-cnn")
    ap.add_argument("--dataset", default="fashion-mnist")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path, nodes, summary = run_config(Path(tmp), f"run.algorithm='{args.algorithm}'",
                                          f"cluster.workers={args.workers}", f"cluster.hetero='{args.hetero}'",
                                          f"stop.max_time={args.seconds}", f"model.name='{args.model}'",
                                          f"data.dataset='{args.dataset}'")
        meta = json.loads((path / "meta.json").read_text())
    w = nodes[nodes.role == "worker"].sort_values("index")
    step = (w.compute_s / w.steps).to_numpy()
    rate = (w.steps / w.alive_s).to_numpy()
    factors = meta["step_factors"]
    fastest = min(range(len(factors)), key=lambda i: factors[i])
    lines = ["| worker | profile factor | step-time ratio | error | steps/s ratio (inverse) | error |",
             "|---|---|---|---|---|---|"]
    worst = 0.0
    for i, f in enumerate(factors):
        ratio = step[i] / step[fastest]
        slow = rate[fastest] / rate[i]
        err, err2 = abs(ratio / f - 1), abs(slow / f - 1)
        worst = max(worst, err, err2)
        lines.append(f"| {i} | {f:.3f} | {ratio:.3f} | {err:.1%} | {slow:.3f} | {err2:.1%} |")
    cal = meta["calibration"]
    record("throttle", [f"{args.workers} workers, profile `{args.hetero}`, {args.algorithm}, {args.model} on "
                        f"{args.dataset}, {args.seconds:g} s, "
                        f"{cal['cores']} cores; measured step {cal['measured_step_s'] * 1e3:.2f} ms, "
                        f"calibrated base step {cal['base_step_s'] * 1e3:.2f} ms.", "", *lines, "",
                        f"Worst error **{worst:.1%}** (target <= 10%): {'met' if worst <= 0.1 else 'not met'}."])
