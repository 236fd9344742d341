"""SNAP's selective exchange (SNAP Sec. IV-C, Algorithm 1, Eqs. 25-27), run by each peer by itself: which
changed parameters a peer sends its neighbours, and the APE threshold that decides it.

The APE threshold T starts at ``threshold`` x the mean parameter magnitude of x^0 (Sec. V: 10%); in a stage a
parameter is sent only when it changed by more than T / sum_{l=1}^{I} (1 + alpha G)^l since last sent
(``send_bound``; Alg. 1 line 4, I = ``hold`` = 10 iterations), so the bound of Eq. (27), sum_l (1 + alpha G)^l
max|Delta x^{k-l}|, stays below T for at least I iterations; the peer tracks that bound with its own largest
unsent change (``APESchedule``), and when it reaches T the stage ends and T shrinks by 10%, until T falls below
``epsilon`` x T_0, where it stays (a small final APE avoids sending the last slight changes). The growth
1 + alpha G is computed from the run's step and G = ``hessian_bound`` where G is given (Algorithm 1 line 4; at
line 1's alpha = 1 / (100 G), ``step = "alg1"``, exactly the paper's example 1.01; ``programs.ape_growth``), else it
is the ``growth`` setting. With a larger alpha G the bound of Eq. (27) grows fast (its sum over 10 iterations is
10.6 at 1 + alpha G = 1.01, about 100 at 1.4, 4,900 at 2.2), and the send bound T / sum shrinks as fast. With
threshold 0 every changed parameter is sent (SNAP-0, Sec. V).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch


def send_bound(threshold: float, hold: int, growth: float) -> float:
    """The largest change left unsent: T / sum_{l=1}^{I} c^l, c = 1 + alpha G, so that I iterations of unsent
    changes up to it keep the APE bound of Eq. (27) at most T. (Algorithm 1 line 4 writes the sum's upper bound
    I c^I; the exact sum gives the text's numbers: T = 3, I = 10, c = 1.01 -> 0.28; T = 1 -> 0.1.)"""
    return threshold / sum(growth ** i for i in range(1, hold + 1))


@dataclass
class APESchedule:
    """A peer's APE threshold (Sec. IV-C, Algorithm 1, Sec. V) in stages; the bound of Eq. (27) on the
    accumulated error, a_{k+1} = c (a_k + e_k) with e_k the largest change left unsent and c = ``growth`` =
    1 + alpha G, restarts with each stage. At a stage's end T shrinks by ``shrink``; stages end until T is below
    ``floor`` (none with T = 0: SNAP-0).

    When a stage ends is ``rule``'s: ``"fixed"``, after ``hold`` iterations, at every peer alike (Sec. IV-C's
    example: "in the first 10 iterations ... the APE threshold 3 ... After that, we restart the iteration ...
    and reduce the APE threshold to be 1"), so that peers can restart EXTRA together; ``"ape"``, once the bound
    reaches T and the stage has lasted ``hold`` iterations (Algorithm 1's "till APE exceeds T_k", at each peer by
    itself)."""

    threshold: float
    floor: float
    hold: int = 10
    shrink: float = 0.9
    growth: float = 1.01
    rule: Literal["fixed", "ape"] = "fixed"
    ape: float = 0.0
    stage_iterations: int = 0
    stages: int = 0

    def bound(self) -> float:
        """Changes up to this are not sent in this iteration."""
        return send_bound(self.threshold, self.hold, self.growth)

    def record(self, unsent: float) -> bool:
        """One iteration done whose largest unsent change was ``unsent``; whether it ended a stage."""
        self.ape = self.growth * (self.ape + unsent)
        self.stage_iterations += 1
        staged = 0 < self.threshold and self.floor <= self.threshold and self.stage_iterations >= self.hold
        if staged and (self.rule == "fixed" or self.ape >= self.threshold):
            self.threshold *= self.shrink
            self.ape = 0.0
            self.stage_iterations = 0
            self.stages += 1
            return True
        return False


def changed(x: torch.Tensor, held: torch.Tensor, bound: float) -> torch.Tensor:
    """The parameters to send: those whose value differs from what the neighbour holds by more than ``bound``
    (with ``bound = 0``: every changed one)."""
    return (x - held).abs() > bound

