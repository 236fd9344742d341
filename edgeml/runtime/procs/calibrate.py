"""Throttling: measure a real training step and choose the emulated step time of the fastest device.

A step sleeps until ``base_step_s * factor`` has passed. All workers together demand
``measured * sum_i 1/factor_i`` CPU-seconds per ``base_step_s``; ``calibrate`` keeps that below
``UTILIZATION`` of the host's cores, so that throttled step times, not CPU contention, set the speeds, even
with many more processes than cores.
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
    """Measure a step with the run's thread count (this process's own is left as it was); pick ``base_step_s``."""
    cfg = job.cfg
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.run.threads)
    try:
        trainer = job.trainer(0)
        for _ in range(3):
            trainer.gradient()
        times = []
        t_end = time.perf_counter() + 1.0
        while len(times) < 5 or (len(times) < 30 and time.perf_counter() < t_end):
            t0 = time.perf_counter()
            trainer.gradient()
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(threads)
    measured = statistics.median(times)
    cores = host_cores()
    demand = sum(1.0 / f for f in job.cluster.factors)
    needed = measured * demand / (cores * UTILIZATION)
    base = cfg.cluster.base_step_s or max(needed, 2 * measured, MIN_STEP_S)
    return {"measured_step_s": measured, "cores": cores, "utilization_target": UTILIZATION,
            "demand_steps": demand, "base_step_s": base, "throttle": cfg.cluster.throttle,
            "base_step_s_given": bool(cfg.cluster.base_step_s),
            "oversubscribed": base < needed}
