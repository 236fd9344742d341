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

def plain_loop(trainer, steps: int) -> float:
    """Seconds for ``steps`` iterations of gradient + SGD step on one model."""
    t0 = time.perf_counter()
    for _ in range(steps):
        trainer.gradient()
        trainer.sgd(0.01)
    return time.perf_counter() - t0


def event_loop(job, cfg, monitor_cls, kernel_cls, algorithm) -> tuple[float, int]:
    """Seconds and samples of one sim event loop (training, PS updates, messages, evaluation at start and end)."""
    kernel = kernel_cls(job, algorithm.nodes(cfg), monitor_cls(job))
    t0 = time.perf_counter()
    kernel.run()
    return time.perf_counter() - t0, sum(n.counters.samples for n in kernel.nodes.values())


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2000, help="steps of each side, split over the rounds")
    ap.add_argument("--rounds", type=int, default=5, help="plain and sim alternate this many times")
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--model", default="lenet5")
    ap.add_argument("--algorithm", default="asp")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from edgeml.algorithms import get_algorithm  # noqa: E402
    from edgeml.metrics import Monitor  # noqa: E402
    from edgeml.runtime.sim import Kernel  # noqa: E402

    per_round = args.steps // args.rounds
    overrides = [f"run.algorithm='{args.algorithm}'", "run.backend='sim'", f"cluster.workers={args.workers}",
                 f"data.dataset='{args.dataset}'", f"model.name='{args.model}'", "stop.max_time=0",
                 f"stop.max_steps={per_round}", "eval.interval=1000000"]
    cfg = load_config(overrides=overrides)
    job = build_job(cfg)
    algorithm = get_algorithm(cfg.run.algorithm)
    trainer = job.trainer(0)
    plain_loop(trainer, 20)  # warm-up
    event_loop(job, cfg, Monitor, Kernel, algorithm)
    # alternate the two loops so that a host whose speed drifts affects both alike
    plain_s, sim_s, sim_samples, ratios = 0.0, 0.0, 0, []
    for _ in range(args.rounds):
        p = plain_loop(trainer, per_round)
        s, n = event_loop(job, cfg, Monitor, Kernel, algorithm)
        plain_s, sim_s, sim_samples = plain_s + p, sim_s + s, sim_samples + n
        ratios.append((n / s) / (per_round * trainer.batch_size / p))
    plain = args.rounds * per_round * trainer.batch_size / plain_s
    sim = sim_samples / sim_s
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        _, _, summary = run_config(Path(tmp), *overrides[:-2], f"stop.max_steps={args.steps}",
                                   "eval.interval=1000000")
        whole = summary["total_samples"] / (time.perf_counter() - t0)
    record("sim-throughput", [
        f"{args.algorithm}, {args.workers} workers, {args.model} on {args.dataset}, batch {trainer.batch_size}, "
        f"{args.steps} steps each side in {args.rounds} alternating rounds, one torch thread "
        "(OMP_NUM_THREADS=1). Node programs run as greenlets on the kernel's thread.", "",
        "| loop | samples/s | ratio to plain |", "|---|---|---|",
        f"| plain PyTorch loop (gradient + SGD step) | {plain:.0f} | 1.000 |",
        f"| sim backend: the event loop (training, PS updates, messages, evaluation at start and end) | "
        f"{sim:.0f} | **{sim / plain:.3f}** |",
        f"| sim backend: a whole `edgeml run` (plus loading data, building the job, writing the run directory) | "
        f"{whole:.0f} | {whole / plain:.3f} |", "",
        "Per-round ratios (event loop / plain): " + ", ".join(f"{r:.3f}" for r in ratios) + ".", "",
        "Target: event loop / plain >= 0.9. The whole-run figure adds fixed setup costs that shrink with longer runs."])
