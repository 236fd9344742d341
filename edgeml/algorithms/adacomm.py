"""ADACOMM and Fixed ADACOMM: periodic local-update SGD through a PS (Wang and Joshi 2018; ADSP Sec. 2.2, 5.1).

Every worker takes tau local SGD steps at the local learning rate eta'(t) (the same decaying schedule as ADSP,
``LocalSGDConfig``), pushes its accumulated update U_i = sum eta' g_i and waits for the PS. The PS waits for
all M workers (a barrier), applies W <- W - eta U_i for each (eta = 1/M, so W becomes the average of the
local models), and returns W with the tau of the next round.

- **tau0** is chosen by a short online search unless given: each of ``tau_candidates`` runs in turn for
  ``trial_s`` seconds (at least two rounds), and the one with the best ADSP reward wins (``fit_reward``,
  ADSP Sec. 4.2: the inverse of the predicted time to reach a common target loss, fitted on the trial's
  loss estimates on the run's clock, ``reward_clock``; target = ``target_ratio`` times the lowest estimate of
  the search). Trials do not start from a common state; the reward was designed for exactly that, whereas raw
  loss decrease per second always favours the first candidate, which sees the steepest part of the curve.
  The search runs inside the timed run; the paper compares against tuned baselines, so the ADSP experiment
  gives tau0 from an offline sweep instead (``experiments/adsp/``).
- **ADACOMM** then adapts tau every ``adapt_period_s`` seconds: tau = ceil(sqrt(L / L0) tau0) (Wang and
  Joshi 2018), L0 being the loss when tau0 took effect. **Fixed ADACOMM** keeps tau0.
- *Time scale* (open in both papers for this setting): left at 0, ``trial_s`` is one time unit of the run
  and ``adapt_period_s`` two (``kit.time_scale``: 20 steps of the fastest device or 1/40 of the budget,
  whichever is longer), so the search takes a small part of any run and tau adapts several times.
- The loss L is the PS's estimate of the global model's training loss: each worker reports the loss of the
  first mini-batch of a round, computed on the model the PS sent, and the PS averages the M reports (in rank
  order, so that the estimate does not depend on the order of arrival).

Time series: ``decisions`` rows name = tau (every change), tau_trial (value: the reward of a candidate,
with its ``tau``, the ``target``, the reward's ``rule`` and fit ``r2``), loss0 (L0) and loss (the estimate
L at each adaptation); ``staleness`` (0 for every update); ``settings`` (the resolved time settings, once).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Literal

from edgeml.algorithms.adsp import fit_reward
from edgeml.algorithms.kit import LocalSGDConfig, LocalWorker, ParameterServer, ps_nodes, time_scale
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.errors import UserError
from edgeml.schema import ranged

if TYPE_CHECKING:
    from edgeml.runtime.base import Node


@dataclass
class FixedAdacommConfig(LocalSGDConfig):
    tau0: int = ranged(0, ge=0, zero="search it over tau_candidates")
    """Local steps per round at the start; 0 chooses it by the search over ``tau_candidates``."""
    tau_candidates: list[int] = ranged(default_factory=lambda: [1, 2, 4, 8], ge=1)
    """Values of tau0 the search tries, in this order."""
    trial_s: float = ranged(0.0, ge=0, zero="auto, one time unit")
    """How long each candidate runs in the tau0 search (seconds; at least two rounds). 0 (auto): one time unit
    (``kit.time_scale``: 20 steps of the fastest device or 1/40 of the time budget, whichever is longer)."""
    target_ratio: float = ranged(0.5, gt=0, lt=1)
    """Search reward target: this fraction of the lowest loss estimate seen during the search."""
    reward_clock: Literal["run", "trial"] = "run"
    """The clock of the search's reward fit (``adsp.fit_reward``): the run's, on which candidates on one loss
    curve tie whatever their start, or each trial's own (time still needed: later candidates win)."""

    time_settings = ("lr_decay_s", "trial_s")

    def validate(self, cfg) -> None:
        """The one rule over several fields (each number's range is declared with its field)."""
        if not self.tau0 and not self.tau_candidates:
            raise UserError(f"{cfg.run.algorithm}.tau_candidates = []: give the values of tau0 to search (whole "
                            f"numbers >= 1), or set tau0")

    def resolve(self, job) -> "FixedAdacommConfig":
        return dataclasses.replace(super().resolve(job), trial_s=self.trial_s or time_scale(job))

    def first_tau(self) -> int:
        return self.tau0 or self.tau_candidates[0]


@dataclass
class AdacommConfig(FixedAdacommConfig):
    adapt_period_s: float = ranged(0.0, ge=0, zero="auto, two time units")
    """Set tau = ceil(sqrt(L / L0) tau0) every this many seconds. 0 (auto): two time units (``kit.time_scale``)."""

    time_settings = ("lr_decay_s", "trial_s", "adapt_period_s")

    def resolve(self, job) -> "AdacommConfig":
        return dataclasses.replace(super().resolve(job), adapt_period_s=self.adapt_period_s or 2 * time_scale(job))


def adapted_tau(tau0: int, loss: float, loss0: float) -> int:
    """tau = ceil(sqrt(L / L0) * tau0), at least 1 (Wang and Joshi 2018)."""
    if not (loss0 > 0 and loss >= 0 and math.isfinite(loss)):
        return tau0
    return max(1, math.ceil(math.sqrt(loss / loss0) * tau0 - 1e-9))


def adacomm_worker(node: Node) -> None:
    a = node.algo.resolve(node.job)
    w = LocalWorker(node, a)
    ps = node.ranks("ps")[0]
    tau = a.first_tau()
    while True:
        losses = w.run(tau)
        tau = int(w.commit(ps, loss=losses[0])["tau"])  # losses[0]: the loss of the model pulled


def adacomm_server(node: Node, adapt: bool) -> None:
    a = node.algo.resolve(node.job)
    a.log_settings(node)
    ps = ParameterServer(node)
    tau = tau0 = a.first_tau()
    untried = [] if a.tau0 else list(a.tau_candidates[1:])
    searching = not a.tau0
    trials: list[tuple[int, list[float], list[float]]] = [(tau, [], [])]  # (tau, times sent, losses)
    loss0, next_adapt = None, math.inf
    sent_at = 0.0
    node.log("decisions", name="tau", value=tau)
    while True:
        msgs = ps.gather()
        ps.apply_round(msgs)
        losses = [float(m["loss"]) for m in sorted(msgs, key=lambda m: m.src)]
        loss = sum(losses) / len(losses)  # of the model sent at `sent_at`
        now = node.now()
        old = tau
        if searching:
            _, times, trial_losses = trials[-1]
            times.append(sent_at)
            trial_losses.append(loss)
            if now - times[0] >= a.trial_s and len(times) >= 2:
                if untried:
                    tau = untried.pop(0)
                    trials.append((tau, [], []))
                else:
                    target = a.target_ratio * min(min(ls) for _, _, ls in trials)
                    fits = [fit_reward(ts, ls, target, clock=a.reward_clock) for _, ts, ls in trials]
                    for (k, _, _), fit in zip(trials, fits):
                        node.log("decisions", name="tau_trial", value=fit.reward, tau=k, target=target,
                                 rule=fit.rule, r2=fit.r2)
                    rewards = [fit.reward for fit in fits]
                    tau = tau0 = trials[rewards.index(max(rewards))][0]  # the first best on ties
                    searching = False
        elif loss0 is None:
            loss0, next_adapt = loss, sent_at + a.adapt_period_s if adapt else math.inf
            node.log("decisions", name="loss0", value=loss0)
        elif now >= next_adapt:
            tau = adapted_tau(tau0, loss, loss0)
            node.log("decisions", name="loss", value=loss)
            while next_adapt <= now:
                next_adapt += a.adapt_period_s
        if tau != old:
            node.log("decisions", name="tau", value=tau)
        sent_at = now
        for w in sorted(m.src for m in msgs):
            ps.reply(w, tau=tau)


ADACOMM_DECISIONS = ("tau", "tau_trial", "loss", "loss0")
register(AlgorithmSpec("adacomm", "Local-update SGD with a barrier every tau steps, tau adapted to the loss",
                       AdacommConfig, ps_nodes(partial(adacomm_server, adapt=True), adacomm_worker),
                       "ADSP Sec. 2.2, 5.1; Wang and Joshi 2018", display="ADACOMM", decisions=ADACOMM_DECISIONS))
register(AlgorithmSpec("fixed_adacomm", "ADACOMM with tau fixed (tau0 searched or given)",
                       FixedAdacommConfig, ps_nodes(partial(adacomm_server, adapt=False), adacomm_worker),
                       "ADSP Sec. 5.1", display="Fixed ADACOMM", decisions=ADACOMM_DECISIONS), "fixed-adacomm")
