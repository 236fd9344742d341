"""Throttling fidelity: measured step-time ratios vs the profile, N worker processes on this host.

Each worker's mean step time (compute time / steps) relative to the fastest worker's, against the profile's
factor. Target: every worker within 10%. Usage: python scripts/bench_throttle.py [--workers 18] [--hetero ec2]
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
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path, nodes, summary = run_config(Path(tmp), f"run.algorithm='{args.algorithm}'",
                                          f"cluster.workers={args.workers}", f"cluster.hetero='{args.hetero}'",
                                          f"stop.max_time={args.seconds}")
        meta = json.loads((path / "meta.json").read_text())
    w = nodes[nodes.role == "worker"].sort_values("index")
    step = (w.compute_s / w.steps).to_numpy()
    factors = meta["step_factors"]
    fastest = min(range(len(factors)), key=lambda i: factors[i])
    lines = ["| worker | profile factor | measured ratio | error |", "|---|---|---|---|"]
    worst = 0.0
    for i, f in enumerate(factors):
        ratio = step[i] / step[fastest]
        err = abs(ratio / f - 1)
        worst = max(worst, err)
        lines.append(f"| {i} | {f:.3f} | {ratio:.3f} | {err:.1%} |")
    cal = meta["calibration"]
    record("throttle", [f"{args.workers} workers, profile `{args.hetero}`, {args.algorithm}, {args.seconds:g} s, "
                        f"{cal['cores']} cores; measured step {cal['measured_step_s'] * 1e3:.2f} ms, "
                        f"calibrated base step {cal['base_step_s'] * 1e3:.2f} ms.", "", *lines, "",
                        f"Worst error **{worst:.1%}** (target <= 10%)."])
