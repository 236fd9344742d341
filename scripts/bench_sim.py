"""Simulation throughput: samples/s trained in the sim backend vs a plain single-process PyTorch loop.

Both train the same model with the same batch size on the same data, alternating in rounds in this process.
The sim runs with the settings a user gets from the command line (`edgeml run asp --backend sim`): the default
evaluation every virtual second on 2000 test samples, one torch thread. Target ratio >= 0.9 at 8 and at 200
workers. Usage: python scripts/bench_sim.py [--workers 8 200] [--models adacomp-cnn] [--seconds 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"  # before torch: every thread (sim's node threads too) gets one
import torch  # noqa: E402

from _bench import record, run_config  # noqa: E402
from edgeml.config import load_config  # noqa: E402
from edgeml.runner import prepare  # noqa: E402

TARGET = 0.9


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


def measure(args, model: str, workers: int) -> list[str]:
    """Rows of the table for one model: plain loop, event loop, whole run; and the per-round ratios."""
    from edgeml.algorithms import get_algorithm
    from edgeml.runtime.monitor import Monitor
    from edgeml.runtime.sim import Kernel

    base = [f"run.algorithm='{args.algorithm}'", "run.backend='sim'", f"cluster.workers={workers}",
            f"data.dataset='{args.dataset}'", f"model.name='{model}'", "stop.max_time=0"]
    job = prepare(load_config(overrides=[*base, "stop.max_steps=1"]))[0]
    trainer = job.trainer(0)
    plain_loop(trainer, 5)  # warm-up, then size the rounds to about --seconds per side
    per_step = plain_loop(trainer, 10) / 10
    per_round = max(20 * workers, round(args.seconds / args.rounds / per_step))
    cfg = load_config(overrides=[*base, f"stop.max_steps={per_round}"])
    job = dataclasses.replace(job, cfg=cfg)  # the same data, shards and initial model; this round's stop rule
    algorithm = get_algorithm(cfg.run.algorithm)
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
        _, _, summary = run_config(Path(tmp), *base, f"stop.max_steps={args.rounds * per_round}")
        whole = summary["total_samples"] / (time.perf_counter() - t0)
    verdict = "met" if sim / plain >= TARGET else "not met"
    return [f"| {model} | {workers} | {args.rounds} x {per_round} | {plain:.0f} | {sim:.0f} | **{sim / plain:.3f}** | "
            f"{', '.join(f'{r:.2f}' for r in ratios)} | {whole:.0f} ({whole / plain:.3f}) | {verdict} |"]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, nargs="+", default=[8, 200])
    ap.add_argument("--models", nargs="+", default=["adacomp-cnn"])
    ap.add_argument("--seconds", type=float, default=30, help="about this long for each side and model")
    ap.add_argument("--rounds", type=int, default=5, help="plain and sim alternate this many times")
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--algorithm", default="asp")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = [row for model in args.models for n in args.workers for row in measure(args, model, n)]
    record("sim-throughput", [
        f"{args.algorithm} on {args.dataset}, batch 32, one torch thread (the command line's defaults). Node "
        "programs run as greenlets on the kernel's thread. Plain loop: gradient + SGD step on one model. Event "
        "loop: the sim backend's run (training, PS updates, messages, the default evaluation every virtual "
        "second on 2000 test samples); the two alternate in rounds of the same number of steps. "
        "Whole run: `edgeml run` "
        "with loading data, building the job and writing the run directory.", "",
        "| model | workers | rounds x steps | plain samples/s | event loop samples/s | ratio | per-round ratios | "
        "whole run samples/s (ratio) | target |", "|---|---|---|---|---|---|---|---|---|", *rows, "",
        f"Target: event loop / plain >= {TARGET}."])
