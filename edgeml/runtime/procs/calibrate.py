"""Throttling: measure a real training step and choose the emulated step time of the fastest device.

A step sleeps until ``base_step_s * factor`` has passed (``cluster.throttle_mode = "absolute"``). The CPU
workers together demand ``measured * sum_i 1/factor_i`` CPU-seconds per ``base_step_s``; ``calibrate`` keeps
that below ``UTILIZATION`` of the host's cores, so that throttled step times, not CPU contention, set the
speeds, even with many more processes than cores. CUDA workers are measured on their GPU. In ``scale`` mode a
step lasts its measured time x factor instead, so real co-running load shows in step times.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import torch

UTILIZATION = 0.5
MIN_STEP_S = 0.01
"""Floor of the calibrated step time: a message between processes takes ~0.1-1 ms, so emulated steps far
below that would measure the transport rather than the algorithm."""


def host_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def calibrate(job) -> dict[str, Any]:
    """Measure a step on each device kind the workers use, with the run's thread count (this process's own is
    left as it was); pick ``base_step_s``: every worker's target ``base_step_s * factor`` at least twice its
    kind's measured step, and the CPU workers' demand within ``UTILIZATION`` of the host's cores. In ``scale``
    mode steps are not slept to a target: ``base_step_s`` is the fastest measured step (the unit of settings on
    the run's time scale)."""
    cfg = job.cfg
    env = job.world
    workers = env.roles.get("worker", []) or env.ranks
    kinds = sorted({env.device(r) for r in workers})
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.run.threads)
    try:
        measured = {kind: _measure(job, kind) for kind in kinds}
    finally:
        torch.set_num_threads(threads)
    cores = host_cores()
    cpu_demand = sum(1.0 / env.factors[r] for r in workers if env.device(r) == "cpu")
    needed = measured.get("cpu", 0.0) * cpu_demand / (cores * UTILIZATION)
    slowest = max(measured[env.device(r)] / env.factors[r] for r in workers)
    if cfg.cluster.throttle_mode == "scale":
        base = cfg.cluster.base_step_s or min(measured.values())
    else:
        base = cfg.cluster.base_step_s or max(needed, 2 * slowest, MIN_STEP_S)
    return {"measured_step_s": max(measured.values()), "measured_by_device": measured, "cores": cores,
            "utilization_target": UTILIZATION, "demand_steps": cpu_demand, "base_step_s": base,
            "throttle": cfg.cluster.throttle, "throttle_mode": cfg.cluster.throttle_mode,
            "base_step_s_given": bool(cfg.cluster.base_step_s),
            # predicted before the run (a given base_step_s too short for the CPU workers on these cores); whether
            # contention did distort it is measured during the run: meta.json "oversubscribed" (contention.py)
            "demand_exceeds_cores": base < needed}


def _measure(job, device: str) -> float:
    """Median time of a training step on ``device`` (after a warm-up)."""
    trainer = job.trainer(0, device)
    for _ in range(3):
        trainer.gradient()
    times = []
    t_end = time.perf_counter() + 1.0
    while len(times) < 5 or (len(times) < 30 and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        trainer.gradient()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
