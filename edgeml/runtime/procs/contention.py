"""Whether the host distorted a procs run: each worker's realised step time against its throttle target, beside
the host's load.

A throttled step sleeps until its target, ``base_step_s x factor x work`` (``calibrate``), paced like a token
bucket, so a worker's mean realised step stays on its target whenever its computation fits within it. On a quiet
host the two agree within a few percent: calibration makes every target at least twice the measured step, and
a late wake-up (about a millisecond) is small against steps of 10 ms or more. Realised steps above the target by
more than ``MARGIN`` (25%) mean the computation itself took over 2.5x its calibrated time: CPU contention on the
host, not the device model, set that worker's speed, and the run's times compare the host's load rather than the
algorithms. Such a run is marked ``oversubscribed`` in ``meta.json`` (the details under ``contention``), says so
when it ends, and ``compare`` and ``plot`` mark it. In ``throttle_mode = "scale"`` a step's target is its own
measured time x factor (real load is meant to show), so the mark does not apply; nor without throttling.
"""

from __future__ import annotations

import os
import statistics
import threading
from dataclasses import dataclass
from typing import Any

MARGIN = 0.25
"""Realised / target step time above 1 + MARGIN marks a run: four times the largest quiet-host deviation
(pacing and wake-up latency, a few percent), and below the 1.77x of a 2-core host running 18 workers."""
MIN_STEPS = 5
"""A worker with fewer throttled steps says too little to mark a run (the first steps warm caches up)."""
SAMPLE_S = 0.5


@dataclass
class StepTimes:
    """One node's throttled steps: how many, and their target, realised and computing seconds summed."""

    steps: int = 0
    target_s: float = 0.0
    realised_s: float = 0.0
    compute_s: float = 0.0

    def add(self, target: float, realised: float, compute: float) -> None:
        self.steps += 1
        self.target_s += target
        self.realised_s += realised
        self.compute_s += compute


class HostLoad:
    """Samples the host's CPU use (psutil, all cores, percent) and its 1-minute load average every ``SAMPLE_S``
    seconds on a thread, while in a ``with`` block."""

    def __init__(self, every: float = SAMPLE_S):
        self.every = every
        self.cpu: list[float] = []
        self.load1: list[float] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="host-load", daemon=True)

    def __enter__(self) -> HostLoad:
        import psutil

        psutil.cpu_percent(None)  # the first call only starts the interval
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(timeout=2 * self.every + 1)

    def _sample(self) -> None:
        import psutil

        while not self._done.wait(self.every):
            self.cpu.append(psutil.cpu_percent(None))
            self.load1.append(os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan"))

    def summary(self) -> dict[str, Any]:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        out: dict[str, Any] = {"cores": cores, "logical_cpus": os.cpu_count(), "samples": len(self.cpu)}
        for name, values in (("cpu_percent", self.cpu), ("load1", self.load1)):
            if values:
                out[f"{name}_mean"] = round(statistics.fmean(values), 2)
                out[f"{name}_max"] = round(max(values), 2)
        return out


def assess(step_times: dict[int, dict], names: dict[int, str], host: dict[str, Any], throttled: bool,
           margin: float = MARGIN) -> dict[str, Any]:
    """The run's contention record: per node with throttled steps (``step_times`` by rank, ``StepTimes`` as
    dicts) its steps, mean target, realised and computing step (ms) and realised / target; ``marked`` when a
    node with at least ``MIN_STEPS`` steps exceeded its target by more than ``margin``."""
    nodes = {}
    for rank, st in sorted(step_times.items()):
        if not st or st["steps"] == 0 or st["target_s"] <= 0:
            continue
        n = st["steps"]
        nodes[names.get(rank, str(rank))] = {
            "steps": n, "target_ms": round(1e3 * st["target_s"] / n, 3),
            "realised_ms": round(1e3 * st["realised_s"] / n, 3), "compute_ms": round(1e3 * st["compute_s"] / n, 3),
            "ratio": round(st["realised_s"] / st["target_s"], 4)}
    counted = {k: v for k, v in nodes.items() if v["steps"] >= MIN_STEPS}
    worst = max(counted, key=lambda k: counted[k]["ratio"], default=None)
    over = sorted((k for k, v in counted.items() if v["ratio"] > 1 + margin), key=lambda k: -counted[k]["ratio"])
    return {"marked": throttled and bool(over), "applies": throttled, "margin": margin, "min_steps": MIN_STEPS,
            "worst": worst, "worst_ratio": counted[worst]["ratio"] if worst else None,
            "median_ratio": round(statistics.median(v["ratio"] for v in counted.values()), 4) if counted else None,
            "over": over, "nodes": nodes, "host": host}


def message(record: dict[str, Any], workers: int) -> str:
    """The line a marked run ends with: what was measured, what it means, what to do instead."""
    worst = record["nodes"][record["worst"]]
    host = record["host"]
    load = (f"; host load {host['load1_mean']:.1f} on {host['cores']} cores, CPU {host['cpu_percent_mean']:.0f}% "
            f"busy" if "load1_mean" in host and "cpu_percent_mean" in host else "")
    fewer = f" or fewer than {workers} workers" if workers > 1 else ""
    return (f"edgeml: host contention distorted this run: {len(record['over'])} node(s) took over "
            f"{1 + record['margin']:.2f}x their throttled step time ({record['worst']}: {worst['realised_ms']:.1f} "
            f"ms per step against a {worst['target_ms']:.1f} ms target{load}); its times measure the host, not the "
            f"algorithm. Re-run it with --backend sim{fewer}, or on a quieter host (meta.json: contention)")
