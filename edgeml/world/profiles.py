"""Speed profiles: how fast each worker is relative to the fastest (``cluster.hetero``).

Speeds are *step-time factors* relative to the fastest device (factor 1): ``sim`` turns them into virtual step
durations, ``procs`` sleeps each step up to ``base_step_s * factor`` (throttling); ``edgeml.world`` applies them.

Named profiles (``cluster.hetero``):
- ``homogeneous``; explicit step-time ratios ``1:1:3`` (ADSP Sec. 2.3, one entry per worker; ``r*k`` repeats a
  ratio for k workers: ``1*60:19*80:199*60``);
- ``H=3.2``: heterogeneity degree H = mean(v)/min(v) of speeds v (ADSP Sec. 5.2). Speeds are spread
  evenly over [1, 2H - 1], whose mean is H (the paper does not say how it spread them);
- ``ec2``: ADSP's 18-worker EC2 mix (7 t2.large, 5 t2.xlarge, 4 t2.2xlarge, 2 t3.xlarge; ADSP Sec. 5.1),
  scaled to any worker count by keeping the proportions. Relative speeds 1, 1.8, 3.2, 2.0 are our estimate
  of CNN training throughput on 2, 4, 8 and 4 vCPUs (the paper gives none);
- ``adacomp-3class``: 30% fast, 40% ten times slower, 30% a hundred times slower (AdaComp Sec. V);
- ``cpu-gpu``: ESync's mix (ESync Sec. 5): a third of devices are CPUs, the slowest ~117x the fastest
  GPU (3.5 s vs 0.03 s per batch).
"""

from __future__ import annotations

import math
import re

from edgeml.errors import UserError
from edgeml.schema import did_you_mean

PROFILES = {
    "homogeneous": "all workers equally fast",
    "A:B:C": "explicit step-time ratios, one per worker (e.g. 1:1:3; r*k repeats r for k workers: 1*6:3*2)",
    "H=x": "heterogeneity degree H = mean(speed)/min(speed), speeds spread evenly (ADSP Sec. 5.2)",
    "ec2": "ADSP's EC2 mix: 7 t2.large, 5 t2.xlarge, 4 t2.2xlarge, 2 t3.xlarge per 18 workers",
    "adacomp-3class": "30% fast, 40% 10x slower, 30% 100x slower (AdaComp)",
    "cpu-gpu": "ESync's CPU/GPU mix: a third CPUs, slowest ~117x the fastest (ESync)",
}

_EC2 = [(7, 1.0), (5, 1.8), (4, 3.2), (2, 2.0)]  # (count per 18 workers, relative speed)


def _apportion(counts: list[int], n: int) -> list[int]:
    """Largest-remainder apportionment of ``n`` items in the proportions of ``counts``."""
    total = sum(counts)
    raw = [c * n / total for c in counts]
    out = [math.floor(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))
    for i in order[: n - sum(out)]:
        out[i] += 1
    return out


def speeds(profile: str, n: int) -> list[float]:
    """Relative speeds v_i (steps per unit time) of ``n`` workers for a named profile."""
    p = profile.strip().lower()
    if p in ("homogeneous", "homo", ""):
        return [1.0] * n
    if ":" in p or "*" in p:
        items = []
        for item in p.split(":"):
            ratio, star, count = item.partition("*")
            try:
                items.append((float(ratio), int(count) if star else 1))
            except ValueError:
                raise UserError(f"cluster.hetero = {profile!r}: ratios must be numbers like 1:1:3, each optionally "
                                f"repeated as ratio*count like 1*60:19*80") from None
        bad = [t for t, _ in items if not (math.isfinite(t) and t > 0)]
        if bad:
            raise UserError(f"cluster.hetero = {profile!r} has the step-time ratio {bad[0]:g}: every ratio must be "
                            f"a finite number > 0, like 1:1:3")
        if any(k < 1 for _, k in items):
            raise UserError(f"cluster.hetero = {profile!r} repeats a ratio {min(k for _, k in items)} times: a count "
                            f"after '*' is a whole number >= 1, like 1*60:19*80")
        total = sum(k for _, k in items)
        if total != n:
            raise UserError(f"cluster.hetero = {profile!r} gives {total} step-time ratios but there are {n} "
                            f"workers: give one ratio per worker (or --workers {total})")
        return [1.0 / t for t, k in items for _ in range(k)]
    m = re.fullmatch(r"h\s*=\s*(.*)", p)
    if m:
        try:
            h = float(m.group(1))
        except ValueError:
            h = math.nan
        if not math.isfinite(h) or h < 1 or (n == 1 and h != 1):
            raise UserError(f"cluster.hetero = {profile!r}: H must be a finite number >= 1, like H=3.2 "
                            f"(and H=1 with a single worker)")
        vmax = 2 * h - 1
        return [1.0 + (vmax - 1.0) * i / (n - 1) for i in range(n)] if n > 1 else [1.0]
    if p == "ec2":
        counts = _apportion([c for c, _ in _EC2], n)
        return [v for (_, v), c in zip(_EC2, counts) for _ in range(c)]
    if p == "adacomp-3class":
        counts = _apportion([3, 4, 3], n)
        return [v for v, c in zip((1.0, 0.1, 0.01), counts) for _ in range(c)]
    if p == "cpu-gpu":
        n_cpu = max(1, round(n / 3)) if n > 1 else 0
        gpu = [1.0 / (1 + 2 * i / max(1, n - n_cpu - 1)) for i in range(n - n_cpu)]  # GPUs within 3x
        cpu = [1.0 / (60 + 57 * i / max(1, n_cpu - 1)) for i in range(n_cpu)]  # CPUs 60x..117x slower
        return gpu + cpu
    named = [k for k in PROFILES if ":" not in k and "=" not in k]  # the names, not the patterns A:B:C, H=x
    raise UserError(f"unknown heterogeneity profile {profile!r}{did_you_mean(p, named)}: use one of "
                    f"{', '.join(PROFILES)}")


def heterogeneity_degree(v: list[float]) -> float:
    """H = mean(v) / min(v) (ADSP Sec. 5.2)."""
    return sum(v) / len(v) / min(v)
