"""Runtime overhead of the procs backend: ASP, no throttling; compute fraction should be >= 0.9.

compute fraction = steps x (uncontended step time) / (wall time x min(N, cores)).

The uncontended step time is measured in this process, alone, on the same model, batch and data, right before
each run (median of a plain loop). Counting the workers' own ``compute_s`` instead would count preemption (a
worker waiting for a core inside its step) as compute. The monitor evaluates only at the start and the end, so
the figure measures the runtime, not the evaluation a user asks for.
Usage: python scripts/bench_overhead.py [--workers 1 2] [--models lenet5 cifar-cnn] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from _bench import record, run_config  # noqa: E402
from edgeml.config import load_config  # noqa: E402
from edgeml.runner import prepare  # noqa: E402

TARGET = 0.9


def uncontended_step_s(dataset: str, model: str, repeats: int = 60) -> tuple[float, int]:
    """Median seconds of one gradient + SGD step alone in this process, and the model's parameter count."""
    import torch

    torch.set_num_threads(1)
    job = prepare(load_config(overrides=[f"data.dataset='{dataset}'", f"model.name='{model}'"]))[0]
    trainer = job.trainer(0)
    for _ in range(5):
        trainer.gradient()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        trainer.gradient()
        trainer.sgd(0.01)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), job.init_params.numel()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--models", nargs="+", default=["lenet5", "cifar-cnn"])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--dataset", default="fashion-mnist")
    args = ap.parse_args()
    cores = len(os.sched_getaffinity(0))
    lines = ["| workers | cores | model | params | uncontended step ms | steps | wall s | "
             "worker compute_s per step ms | worker wait + comm ms per step | compute fraction | target |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            for n in args.workers:
                step, params = uncontended_step_s(args.dataset, model)
                path, nodes, summary = run_config(Path(tmp), "run.algorithm='asp'", f"cluster.workers={n}",
                                                  "cluster.throttle=false", f"data.dataset='{args.dataset}'",
                                                  f"model.name='{model}'", f"stop.max_time={args.seconds}",
                                                  f"eval.interval={10 * args.seconds}", "eval.test_samples=500")
                w = nodes[nodes.role == "worker"]
                steps = int(w.steps.sum())
                frac = steps * step / (summary["duration_s"] * min(n, cores))
                lines.append(f"| {n} | {cores} | {model} | {params:,} | {1e3 * step:.1f} | {steps} | "
                             f"{summary['duration_s']:.1f} | {1e3 * w.compute_s.sum() / steps:.1f} | "
                             f"{1e3 * (w.comm_s.sum() + w.wait_s.sum()) / steps:.2f} | {frac:.3f} | "
                             f"{'met' if frac >= TARGET else 'not met'} |")
    record("overhead", lines + ["", f"Target: compute fraction >= {TARGET}. The parameter server and the monitor "
                                "are processes too: with N = cores they take their CPU time from the workers. "
                                "Run on a quiet host: other load on the cores lowers the fraction. Where a round "
                                "trip's time goes: results/benchmarks/roundtrip.md (scripts/bench_roundtrip.py)."])
