"""Simulation throughput: samples/s trained in the sim backend vs a plain single-process PyTorch loop.

Both train the same model with the same batch size on the same data, one after the other in this process.
Target ratio >= 0.9. Usage: python scripts/bench_sim.py [--workers 8] [--steps 2000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"  # before torch: every thread (sim's node threads too) gets one
import torch  # noqa: E402

from _bench import record, run_config  # noqa: E402
from edgeml.config import load_config  # noqa: E402
from edgeml.train import build_job  # noqa: E402

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--algorithm", default="asp")
    args = ap.parse_args()
    torch.set_num_threads(1)
    overrides = [f"run.algorithm='{args.algorithm}'", "run.backend='sim'", f"cluster.workers={args.workers}",
                 f"data.dataset='{args.dataset}'", f"model.name='{args.model}'", "stop.max_time=0",
                 f"stop.max_steps={args.steps}", "eval.interval=1000000"]
    job = build_job(load_config(overrides=overrides))
    trainer = job.trainer(0)
    for _ in range(20):
        trainer.gradient()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        trainer.gradient()
        trainer.sgd(0.01)
    plain = args.steps * trainer.batch_size / (time.perf_counter() - t0)
    from edgeml.algorithms import get_algorithm  # noqa: E402
    from edgeml.metrics import Monitor  # noqa: E402
    from edgeml.runtime.sim import Kernel  # noqa: E402

    # the same job (data, shards, initial model) as a run; time the event loop, which trains and evaluates
    cfg = load_config(overrides=overrides)
    kernel = Kernel(job, get_algorithm(cfg.run.algorithm).nodes(cfg), Monitor(job))
    t0 = time.perf_counter()
    kernel.run()
    loop_s = time.perf_counter() - t0
    samples = sum(n.counters.samples for n in kernel.nodes.values())
    sim = samples / loop_s
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        _, _, summary = run_config(Path(tmp), *overrides)
        whole = summary["total_samples"] / (time.perf_counter() - t0)
    record("sim-throughput", [
        f"{args.algorithm}, {args.workers} workers, {args.model} on {args.dataset}, batch {trainer.batch_size}, "
        f"{args.steps} steps, one torch thread (OMP_NUM_THREADS=1 for every thread).", "",
        "| loop | samples/s | ratio to plain |", "|---|---|---|",
        f"| plain PyTorch loop (gradient + SGD step) | {plain:.0f} | 1.000 |",
        f"| sim backend: the event loop (training, PS updates, messages, evaluation at start and end) | "
        f"{sim:.0f} | **{sim / plain:.3f}** |",
        f"| sim backend: a whole `edgeml run` (plus loading data, building the job, writing the run directory) | "
        f"{whole:.0f} | {whole / plain:.3f} |", "",
        "Target: event loop / plain >= 0.9. The whole-run figure adds fixed setup costs that shrink with longer runs."])
