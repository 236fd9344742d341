"""ADSP: adaptive synchronous parallel for heterogeneous edge workers (Hu, Wang and Wu, AAAI 2020; adsp.txt).

Nodes: a parameter server, a scheduler and M workers (adsp.txt Fig. 2).

- **Worker** (Alg. 2): never waits. It trains mini-batch after mini-batch with local SGD at the local learning
  rate eta'(t) = lr * lr_decay^(t / lr_decay_s) (Sec. 5.1: "initialized to 0.1 and decays exponentially"),
  accumulating U_i = sum eta' g_i. A timer commits U_i every Gamma / dC_i - O_i seconds, O_i being the time
  the worker's last commit (push + pull) took; after a commit the worker continues from the returned model.
- **PS** (Alg. 2): W <- W - eta U_i on each commit, with eta = 1/M (Sec. 5.1), and returns W at once.
- **Scheduler** (Alg. 1): time is cut into check periods of Gamma seconds, grouped into epochs. At each
  checkpoint it sends the target total commit count C_target, and worker i makes dC_i = C_target - c_i
  commits in the next period (Sec. 4.1). At each epoch start it searches the commit rate online: one period
  at rate 1 (C_target = max_i c_i + 1, Alg. 1 line 3), then rate 2, ..., as long as the reward improves,
  then keeps the best rate for the rest of the epoch. Training never stops for the search.

Choices where the paper is open (the numeric ones are config fields below):

- *What the search varies.* Applied literally with fresh c_i, Alg. 1's "C_target + 1" would ask every worker
  for a single commit in the second trial. We read C_target - max_i c_i as the commit rate dC (commits per
  period, Fig. 3's x-axis): within an epoch C_target advances by dC every period, so a worker that fell
  behind gets its deficit on top (dC_i = C_target - c_i). A candidate's reward measured in one comparison is
  reused in the next instead of being measured again, so every trial takes one period.
- *Who computes dC_i.* The scheduler broadcasts C_target and each worker subtracts its own commit count:
  the same formula, but exact even while a commit is still in flight to the PS. A worker never exceeds
  C_target.
- *The timer.* Commits happen between mini-batches, so a worker commits after the last step that ends
  before the timer expires (the next step would overrun it): its dC_i commits are then in by the
  checkpoint, as C_target asks ("submitted by the next checkpoint", Sec. 3), and the loss sampled at the
  checkpoint sees them. Expiries are spaced Gamma / dC_i apart from the first, Gamma / dC_i - O_i after the
  period's start: rounding a commit to a step boundary does not move the later ones, as with a real timer.
- *Global loss for the reward.* The scheduler pulls W from the PS and evaluates it on a fixed sample of
  ``probe_samples`` training examples, at ``loss_samples`` evenly spaced times of each period (start,
  middle and end for 3; Sec. 4.2). The end sample of a period is the start sample of the next. Evaluation
  costs the scheduler's host time but no training time.
- *The reward* (Sec. 4.2): fit l = 1/(a1^2 t + a2) + a3 (t from the trial's start), r = a1^2 / (1/(l* - a3)
  - a2): the inverse of the predicted time to reach l*. Both trials of a comparison share the target
  l* = target_ratio * (lowest loss sampled in either), so it lies ahead of both; ``target_loss`` fixes it.
  See ``fit_reward`` for what happens when the fit fails or l* is out of reach.
- *Implicit momentum* (Eq. 3) is logged for each period from the rates dC_i and each worker's speed v_i so
  far (steps per second, from the step counts that ride on its commits), in seconds (see ``mu_implicit``).

Known differences of the authors' public code that we do not follow: a minimum of 10 s between commits, 40
local steps before the first commit, and C_target carried over between epochs so that it never decreased.

Time series: ``decisions`` rows name = c_target, commit_rate, mu_implicit (one per period), reward (one per
trial) and target_loss (one per comparison); ``trials`` (per comparison, both trials: epoch, rate, reward,
a1, a2, a3, target, first and last loss, trial_start); ``commits`` (checkpoint, worker, commits, target: the
PS's commit count of every worker at every checkpoint, Theorem 2); ``staleness`` (worker, staleness, steps:
per commit, the updates applied since the worker's last pull and its local steps in the commit).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from edgeml.algorithms.kit import LocalSGDConfig, LocalWorker, ParameterServer, ps_nodes
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.errors import UserError

if TYPE_CHECKING:
    from edgeml.runtime.base import Node


@dataclass
class ADSPConfig(LocalSGDConfig):
    check_period_s: float = 60.0
    """Check period Gamma in seconds (Sec. 5.1: 60 s)."""
    epoch_s: float = 1200.0
    """Epoch length in seconds: the commit-rate search restarts every epoch (Sec. 5.1: 20 minutes)."""
    fixed_rate: int = 0
    """Commit rate dC per check period; 0 searches it online (Alg. 1), > 0 fixes it (Fig. 3 sweeps)."""
    loss_samples: int = 3
    """Global-loss samples per check period for the reward fit (Sec. 4.2: start, middle, end); >= 3."""
    probe_samples: int = 512
    """Training examples (a fixed random sample) on which the scheduler evaluates the global loss."""
    target_ratio: float = 0.5
    """Reward target l* = this fraction of the lowest loss sampled in the two trials compared."""
    target_loss: float = 0.0
    """Fixed reward target l*; 0 uses ``target_ratio``."""

    def validate(self, cfg) -> None:
        super().validate(cfg)
        if self.check_period_s <= 0:
            raise UserError(f"adsp.check_period_s = {self.check_period_s}: must be > 0 seconds")
        if self.epoch_s < 2 * self.check_period_s:
            raise UserError(f"adsp.epoch_s = {self.epoch_s}: must be >= 2 * check_period_s = "
                            f"{2 * self.check_period_s:g} (the search compares at least two periods)")
        if self.fixed_rate < 0:
            raise UserError(f"adsp.fixed_rate = {self.fixed_rate}: must be >= 0 (0 = search)")
        if self.loss_samples < 3:
            raise UserError(f"adsp.loss_samples = {self.loss_samples}: must be >= 3 (the fit has 3 parameters)")
        if self.probe_samples < 1:
            raise UserError(f"adsp.probe_samples = {self.probe_samples}: must be >= 1")
        if not 0 < self.target_ratio < 1:
            raise UserError(f"adsp.target_ratio = {self.target_ratio}: must lie in (0, 1)")
        if self.target_loss < 0:
            raise UserError(f"adsp.target_loss = {self.target_loss}: must be >= 0 (0 = use target_ratio)")


# ------------------------------------------------------------------------------------------ the math


def loss_curve(t, a1: float, a2: float, a3: float):
    """The O(1/t) loss model of Sec. 4.2: l = 1/(a1^2 t + a2) + a3."""
    return 1.0 / (a1 * a1 * np.asarray(t, dtype=float) + a2) + a3


def fit_reward(times, losses, target: float) -> tuple[float, tuple[float, float, float] | None]:
    """Reward of one trial (adsp.txt Sec. 4.2): (r, (a1, a2, a3)), r = 1 / (predicted time to reach ``target``).

    Fits l = 1/(a1^2 t + a2) + a3 (t from the first sample) with ``scipy.optimize.curve_fit``, written as
    l = b/(1 + k t) + a3 with b = 1/a2 > 0 and k = a1^2/a2 >= 0 so that the fit is well conditioned; then
    r = a1^2 / (1/(l* - a3) - a2) = k (l* - a3) / (l(0) - l*). When the paper's formula has no finite
    positive value we return its limit, so rewards stay comparable:

    - l* <= a3: the fitted curve never reaches the target: r = 0 (infinite time; worse than any trial that
      reaches it).
    - l(0) <= l*: the target is reached at once: r = inf.
    - the fit fails (too few points, non-finite values, no convergence): use the straight line, the family's
      limit as b -> inf (least squares on the samples): r = slope / (l(0) - l*), 0 if the loss does not fall;
      the parameters are then None.
    """
    from scipy.optimize import OptimizeWarning, curve_fit

    t = np.asarray(times, dtype=float)
    y = np.asarray(losses, dtype=float)
    if len(t) < 2 or not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        return 0.0, None
    t = t - t[0]
    span = float(t[-1]) or 1.0
    tn = t / span  # fit in units of the trial's length
    params = None
    if len(t) >= 3:
        drop = max(float(y[0] - y[-1]), 1e-6)
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", OptimizeWarning)  # no covariance from 3 points: not needed
                (b, k, a3), _ = curve_fit(lambda x, b, k, c: b / (1.0 + k * x) + c, tn, y,
                                          p0=(2 * drop, 1.0, float(y[-1]) - drop),
                                          bounds=([1e-12, 0.0, -np.inf], [np.inf, np.inf, np.inf]), maxfev=5000)
            if all(map(math.isfinite, (b, k, a3))):
                params = (float(b), float(k) / span, float(a3))  # k per second
        except (RuntimeError, ValueError):
            params = None
    if params is None:
        slope, l0 = np.polyfit(t, y, 1)
        if slope >= 0:
            return 0.0, None
        return (math.inf if l0 <= target else float(-slope / (l0 - target))), None
    b, k, a3 = params
    fitted = (math.sqrt(k / b), 1.0 / b, float(a3))
    if target <= a3:
        return 0.0, fitted
    l0 = b + a3
    if l0 <= target:
        return math.inf, fitted
    return float(k * (target - a3) / (l0 - target)), fitted


def mu_implicit(period: float, rates, speeds) -> float:
    """Implicit momentum 1 - p of Eq. (3): p = 1 / (1 + (1 - 1/m) sum_i Gamma / (dC_i v_i)).

    ``period`` is Gamma in seconds, ``rates`` the commit rates dC_i, ``speeds`` v_i in steps per second. As
    printed, the sum's terms carry units (s^2 per step), so the value depends on the unit of time (we use
    seconds); its decrease with dC (Fig. 3(b)) does not. A worker with dC_i <= 0 or v_i <= 0 makes p = 0.
    """
    m = len(rates)
    if m == 0:
        return 0.0
    if any(r <= 0 or v <= 0 for r, v in zip(rates, speeds)):
        return 1.0
    total = sum(period / (r * v) for r, v in zip(rates, speeds))
    return 1.0 - 1.0 / (1.0 + (1.0 - 1.0 / m) * total)


# ------------------------------------------------------------------------------------------ node programs


def adsp_worker(node: Node) -> None:
    a = node.algo
    w = LocalWorker(node, a)
    ps, sched = node.ranks("ps")[0], node.ranks("scheduler")[0]
    commits, left = 0, 0
    overhead, interval, due = 0.0, math.inf, math.inf
    msg = node.recv(sched, "target")  # the first period's target
    while True:
        while msg is not None:  # a new period: restart the timer (Alg. 2 line 3)
            left = int(msg["c_target"]) - commits
            interval = a.check_period_s / left if left > 0 else math.inf
            due = float(msg["start"]) + interval - overhead
            msg = node.recv(sched, "target", timeout=0)
        start = node.now()
        w.step()
        if left > 0 and 2 * node.now() - start >= due - 1e-9:  # the timer expires during the next step
            start = node.now()
            w.commit(ps, "commit", steps=w.steps)
            overhead = node.now() - start
            commits, left, due = commits + 1, left - 1, due + interval
        msg = node.recv(sched, "target", timeout=0)


def adsp_server(node: Node) -> None:
    import torch

    ps = ParameterServer(node)
    m = len(ps.workers)
    counts = torch.zeros(m, dtype=torch.int64)
    steps = torch.zeros(m, dtype=torch.int64)
    last = torch.zeros(m, dtype=torch.float64)  # time of each worker's last commit
    while True:
        msg = node.recv()
        if msg.tag == "commit":
            i = node.worker_index(msg.src)
            ps.apply(msg, steps=int(msg["steps"]))
            counts[i] += 1
            steps[i] += int(msg["steps"])
            last[i] = node.now()
            ps.reply(msg.src)
        elif msg.tag == "query":  # the scheduler: commit counts, step counts, and the model when asked
            extra = {"params": ps.W} if msg["params"] else {}
            node.send(msg.src, "state", counts=counts, steps=steps, last=last, **extra)


class _Probe:
    """The global loss: W evaluated on a fixed random sample of the training set (outside any clock)."""

    def __init__(self, node: Node, n: int):
        import torch

        from edgeml.train import Evaluator

        ds = node.job.dataset
        g = torch.Generator().manual_seed(node.cfg.run.seed + 11)
        idx = torch.randperm(len(ds.y_train), generator=g)[: min(n, len(ds.y_train))]
        self.evaluate = Evaluator(node.job, ds.x_train[idx], ds.y_train[idx])

    def __call__(self, params) -> float:
        return self.evaluate(params)[0]


def adsp_scheduler(node: Node) -> None:
    a = node.algo
    ps, workers = node.ranks("ps")[0], node.ranks("worker")
    probe = _Probe(node, a.probe_samples)
    gamma, n = a.check_period_s, a.loss_samples

    def state(with_params: bool):
        node.send(ps, "query", params=with_params)
        return node.recv(ps, "state")

    def sample() -> tuple[float, float, object]:
        t = node.now()
        st = state(True)
        return t, probe(st["params"]), st  # evaluating takes the scheduler's host time, not training time

    checkpoint, epoch = 0, 0
    st, loss = state(False), None
    now = node.now()  # checkpoints lie on a fixed grid, however long the evaluations take
    while True:  # one epoch (Alg. 1 MAINFUNCTION)
        epoch_end = now + a.epoch_s - 1e-9
        c_target = int(st["counts"].max())  # Alg. 1 line 3: C_target = max_i c_i + rate, rate = 1 first
        rate = a.fixed_rate or 1
        searching = not a.fixed_rate
        best = None  # (rate, times, losses) of the best trial so far
        while now < epoch_end:  # one check period, from the checkpoint at `now`
            c_target += rate
            start_counts = st["counts"].clone()
            for w in workers:
                node.send(w, "target", c_target=c_target, start=now)
            node.log("decisions", name="c_target", value=c_target, epoch=epoch, rate=rate)
            node.log("decisions", name="commit_rate", value=rate, epoch=epoch, rate=rate)
            if loss is None:  # the very first sample; later ones are the previous period's last
                t, loss, st = sample()
            times, losses = [t], [loss]
            for j in range(1, n):
                node.sleep(now + j * gamma / (n - 1) - node.now())
                t, loss, st = sample()
                times.append(t)
                losses.append(loss)
            now += gamma
            checkpoint += 1
            for i, c in enumerate(st["counts"].tolist()):
                node.log("commits", checkpoint=checkpoint, worker=i, commits=c, target=c_target)
            # Eq. (3) with this period's rates and each worker's mean speed (steps reported / time reported)
            dc = (c_target - start_counts).tolist()
            v = (st["steps"].double() / st["last"].clamp(min=1e-9)).tolist()
            node.log("decisions", name="mu_implicit", value=mu_implicit(gamma, dc, v), epoch=epoch, rate=rate)
            if not searching:
                continue
            trial = (rate, times, losses)
            if best is None:
                best, rate = trial, rate + 1
                continue
            target = a.target_loss or a.target_ratio * min(min(best[2]), min(losses))
            r_best, fit_best = fit_reward(best[1], best[2], target)
            r_new, fit_new = fit_reward(times, losses, target)
            node.log("decisions", name="target_loss", value=target, epoch=epoch, rate=rate)
            for (tr, fit, r) in ((best, fit_best, r_best), (trial, fit_new, r_new)):
                a1, a2, a3 = fit or (math.nan,) * 3
                node.log("trials", epoch=epoch, rate=tr[0], reward=r, a1=a1, a2=a2, a3=a3, target=target,
                         loss_first=tr[2][0], loss_last=tr[2][-1], trial_start=tr[1][0])
            node.log("decisions", name="reward", value=r_new, epoch=epoch, rate=rate)
            if r_new > r_best:  # Alg. 1 line 11: keep increasing while the reward improves
                best, rate = trial, rate + 1
            else:
                rate, searching = best[0], False
        epoch += 1


register(AlgorithmSpec("adsp", "Adaptive synchronous parallel: no waiting, commit rates searched online",
                       ADSPConfig, ps_nodes(adsp_server, adsp_worker, ("scheduler", adsp_scheduler)),
                       "adsp.txt Sec. 3-4, Alg. 1-2"))
