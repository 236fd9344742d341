"""EdgeGossip's performance predictor (EdgeGossip Sec. 3.3; the overhead of Fig. 11).

A regression RG(U) of a platform's slowdown from the co-running load U = (cpu, net, disk) (``node.load()``),
fitted on the platform's own samples (load over a window of ``sample_steps`` steps, measured time per data
point); the predicted time per point is t0 x RG(U) with t0 re-estimated after every epoch from the measured
speed (t0 = t_measured / RG(U_measured)), so a drifting platform speed is followed. Throughput p = 1 / t (one
executor per platform), which the balancer (Algorithm 1, ``balancer``) turns into data ratios. Plain numpy and
scikit-learn: the platform program (``programs``) feeds it samples and asks it for predictions.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


class Predictor:
    """The basic performance predictor: RG(U), the slowdown of a platform's training under co-running load
    U = (cpu, net, disk), and t0, its time per data point without interference.

    RG is scikit-learn's ``ExtraTreesRegressor`` (25 trees) on log(time per point): the slowdown is non-linear
    (a shared core gives 1 / (1 - u), then saturates) and differs by resource and with their mix, which an
    ensemble of randomized trees fits without a chosen functional form, as a smooth-enough average of step
    functions; it needs no feature scaling, is deterministic for a seed, and fits a few hundred samples in
    tens of milliseconds (gradient boosting fitted as well, 3x slower; nearest neighbours were twice as far
    off on the synthetic test). RG(U) = exp(f(U) - f(0)), at least 1; until ``MIN_SAMPLES`` samples exist it
    is 1. ``fit`` refits only once ``MIN_NEW`` samples have arrived since the last fit.
    """

    MIN_SAMPLES = 8
    MIN_NEW = 8

    def __init__(self, window: int = 512, seed: int = 0):
        self.window = window
        self.seed = seed
        self.new = 0
        self.loads: list[tuple[float, float, float]] = []
        self.times: list[float] = []
        self.model = None
        self.base = 0.0
        self.memo: dict[tuple[float, ...], float] = {}
        self.t0: float | None = None

    def observe(self, load: Sequence[float], t: float) -> None:
        """One sample: time per point ``t`` measured under ``load``."""
        if t > 0 and math.isfinite(t):
            self.loads.append(tuple(float(v) for v in load))
            self.times.append(float(t))
            self.new += 1
            del self.loads[:-self.window], self.times[:-self.window]

    def fit(self) -> None:
        if len(self.times) < self.MIN_SAMPLES or self.new < self.MIN_NEW:
            return
        from sklearn.ensemble import ExtraTreesRegressor

        self.model = ExtraTreesRegressor(25, min_samples_leaf=2, random_state=self.seed, n_jobs=1)
        self.model.fit(np.array(self.loads), np.log(self.times))
        self.new = 0
        self.memo = {}
        self.base = float(self.model.predict(np.zeros((1, 3)))[0])

    def slowdown(self, load: Sequence[float]) -> float:
        """RG(U) >= 1."""
        if self.model is None:
            return 1.0
        key = tuple(float(v) for v in load)
        if key not in self.memo:  # modelled loads repeat exactly; each prediction costs milliseconds
            self.memo[key] = max(1.0, math.exp(float(self.model.predict(np.array([key]))[0]) - self.base))
        return self.memo[key]

    def calibrate(self, load: Sequence[float], t: float) -> None:
        """t0 <- t / RG(U): follow the platform's measured speed (time per point ``t`` under ``load``)."""
        if t > 0 and math.isfinite(t):
            self.t0 = t / self.slowdown(load)

    def predict(self, load: Sequence[float]) -> float:
        """Predicted time per data point under ``load``: t0 x RG(U)."""
        if self.t0 is None:
            raise ValueError("calibrate the predictor with a measured time first")
        return self.t0 * self.slowdown(load)
