"""ADSP: adaptive synchronous parallel for heterogeneous edge workers (Hu, Wang and Wu, AAAI 2020; ADSP).

Nodes: a parameter server, a scheduler and M workers (ADSP Fig. 2).

- **Worker** (Alg. 2): never waits. It trains mini-batch after mini-batch with local SGD at the local learning
  rate eta'(t) = lr * lr_decay^(t / lr_decay_s) (Sec. 5.1: "initialized to 0.1 and decays exponentially"),
  accumulating U_i = sum eta' g_i. A timer commits U_i every Gamma / dC_i - O_i seconds, O_i being the time
  the worker's last commit (push + pull) took; after a commit the worker continues from the returned model.
- **PS** (Alg. 2): W <- W - eta U_i on each commit, with eta = 1/M (Sec. 5.1), and returns W at once.
- **Scheduler** (Alg. 1): time is cut into check periods of Gamma seconds, grouped into epochs. At each
  checkpoint it sends the target total commit count C_target, and worker i makes dC_i = C_target - c_i
  commits in the next period (Sec. 4.1). At each epoch start it searches the commit rate online (Alg. 1's
  DECIDECOMMITRATE): a trial at rate 1 (C_target = max_i c_i + 1, Alg. 1 line 3), one at rate 2; if 2 earns
  the larger reward the recursion measures 2 anew and then 3, and so on; the first rate that its successor
  does not beat is kept for the rest of the epoch. Training never stops for the search.

Choices where the paper is open (the numeric ones are config fields below):

- *What the search varies.* Applied literally with fresh c_i, Alg. 1's "C_target + 1" would ask every worker
  for a single commit in the second trial. We read C_target - max_i c_i as the commit rate dC (commits per
  period, Fig. 3's x-axis): within an epoch C_target advances by dC every period, so a worker that fell
  behind gets its deficit on top (dC_i = C_target - c_i). ``reward_reuse`` reuses the kept candidate's reward
  in the next comparison instead of measuring it anew, as the authors' public code does.
- *What a trial measures.* A trial runs ``trial_periods`` check periods and its reward is fitted to the
  global loss at its checkpoints (start, each period's end: 3 samples by default, Sec. 4.2's "start, middle
  and end"). Within a period the samples would measure the commit schedule, not the rate: every timer starts
  at the checkpoint (Alg. 2 line 3), so at rate 1 all workers commit together at the period's end and the
  global model stays put until then, while at rate 4 it moves four times. At a checkpoint every worker has
  made its dC_i commits, the last one Gamma - O_i after the period's start whatever the rate, so the global
  model holds the same share of the work at every rate and trials on one underlying curve tie.
  ``trial_sampling = "within"`` (with ``loss_samples``, ``burn_in = "none"``, ``reward_reuse = true`` and
  ``target_ratio = 0.5``: the search as it was before) samples one period five times instead.
- *The untrained model's plateau.* At the run's start the loss falls ever faster (a concave curve that the
  O(1/t) model cannot describe), so a first trial there looks slower than any later one. ``burn_in =
  "bend"`` trains at Alg. 1's first rate until three successive checkpoint samples show the convex shape
  the reward's model assumes (``bent``), at most half an epoch, before the first search; the first epoch
  starts with that search. A search still running when its epoch ends is dropped (no ``kept_rate``), and the
  next epoch searches anew.
- *Who computes dC_i.* The scheduler broadcasts C_target and each worker subtracts its own commit count:
  the same formula, but exact even while a commit is still in flight to the PS. A worker never exceeds
  C_target.
- *The timer.* Commits happen between mini-batches, so a worker commits after the last step that ends
  before the timer expires (the next step would overrun it): its dC_i commits are then in by the
  checkpoint, as C_target asks ("submitted by the next checkpoint", Sec. 3), and the loss sampled at the
  checkpoint sees them. Expiries are spaced Gamma / dC_i apart from the first, Gamma / dC_i - O_i after the
  period's start: rounding a commit to a step boundary does not move the later ones, as with a real timer.
- *O_i before the first commit.* Alg. 2 needs O_i for the first timer, before any commit was timed. Each
  worker starts with a timed pull of the model whose request is as large as a commit (``LocalWorker.
  timed_pull``), so the first O_i is a commit's round trip on that worker's link, measured through the node
  interface on either backend; afterwards O_i is the duration of the worker's last commit.
- *Global loss for the reward.* At each checkpoint the scheduler pulls W from the PS and evaluates it on a
  fixed sample of ``probe_samples`` training examples. The end sample of a trial is the start sample of the
  next. Evaluation costs the scheduler's host time but no training time.
- *The reward* (Sec. 4.2): fit l = 1/(a1^2 t + a2) + a3, r = a1^2 / (1/(l* - a3) - a2): the inverse of the
  predicted time to reach l*, with t on the run's clock (``reward_clock = "run"``, the default), so that two
  trials on one O(1/t) curve predict the same time and tie, whichever starts first: the reward is meant "to
  compare the performance of the configurations when they do not start with the same system state". With t
  from each trial's start (``"trial"``, the rule before) r is the inverse of the time still needed, which
  favours whichever trial comes later on the same curve, so the search, which compares a rate with the next
  one, climbs. Both trials of a comparison share the target
  l* = target_ratio * (lowest loss sampled in either), so it lies ahead of both; ``target_loss`` fixes it.
  The asymptote a3 is bounded below by 0 (no loss used here is negative). When the fit is degenerate (it
  fails, or its asymptote lies at or above l* so the formula says "never") the reward is the inverse time to
  l* along the least-squares line through the trial's samples; ``fit_reward`` documents every branch, and
  each trial's row in ``trials`` says which rule gave its reward and how well it fitted (R^2, residual RMS).
- *Time scale.* The paper's Gamma = 60 s and 20-minute epochs suit hour-long runs of 128-example batches;
  left at 0 they are derived from the run (``kit.time_scale``): Gamma = 20 steps of the fastest device or
  1/40 of the time budget, whichever is longer, and an epoch = 20 periods (the paper's ratio).
- *Implicit momentum* (Eq. 3) is logged for each period from the rates dC_i and each worker's speed v_i so
  far (steps per second, from the step counts that ride on its commits), in seconds (see ``mu_implicit``).

Known differences of the authors' public code that we do not follow: a minimum of 10 s between commits, 40
local steps before the first commit, and C_target carried over between epochs so that it never decreased.

Time series: ``decisions`` rows name = c_target, commit_rate, mu_implicit (one per period), burn_in (one per
period before the first search), reward (the second trial's, one per comparison), target_loss (one per
comparison) and kept_rate (one per search that ends within its epoch: the rate kept for the rest of it);
``trials`` (per comparison, both trials: epoch, rate, reward, rule, degenerate, a1, a2, a3, r2, rmse, samples,
target, first and last loss, trial_start); ``settings`` (the resolved time settings, once); ``commits``
(checkpoint, worker, commits, target: the PS's commit count of every worker at every checkpoint, Theorem 2);
``staleness`` (worker, staleness, steps: per commit, the updates applied since the worker's last pull and its
local steps in the commit).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from edgeml.algorithms.kit import LocalSGDConfig, LocalWorker, ParameterServer, ps_nodes, time_scale
from edgeml.algorithms.registry import AlgorithmSpec, register
from edgeml.errors import UserError
from edgeml.schema import ranged

if TYPE_CHECKING:
    from edgeml.runtime.base import Node


@dataclass
class ADSPConfig(LocalSGDConfig):
    check_period_s: float = ranged(0.0, ge=0, zero="auto, kit.time_scale")
    """Check period Gamma in seconds (Sec. 5.1: 60 s). 0 (auto): ``kit.time_scale``, 20 steps of the fastest
    device or 1/40 of the time budget, whichever is longer (at most ``epoch_s`` / (2 ``trial_periods``), or half
    of it with ``within`` sampling: room for two trials)."""
    epoch_s: float = ranged(0.0, ge=0, zero="auto, 20 check periods")
    """Epoch length in seconds: the commit-rate search restarts every epoch (Sec. 5.1: 20 minutes). 0 (auto):
    20 check periods, the paper's ratio."""
    fixed_rate: int = ranged(0, ge=0, zero="search the rate online")
    """Commit rate dC per check period; 0 searches it online (Alg. 1), > 0 fixes it (Fig. 3 sweeps)."""
    trial_sampling: Literal["checkpoints", "within"] = "checkpoints"
    """How a search trial samples the global loss: at its checkpoints over ``trial_periods`` periods (each
    worker's commits are in at each, whatever the rate); ``within``: one period, ``loss_samples`` times (the
    rule before). Also sets a fixed-rate run's probe traffic."""
    trial_periods: int = ranged(2, ge=2)
    """Check periods per search trial with ``checkpoints`` sampling: ``trial_periods`` + 1 samples (2: start,
    middle and end, Sec. 4.2's example); >= 2."""
    loss_samples: int = ranged(5, ge=3)
    """Global-loss samples of a one-period trial with ``within`` sampling, evenly spaced from start to end."""
    burn_in: Literal["bend", "none"] = "bend"
    """Before the run's first search: ``bend`` trains at the first rate until the checkpoint losses bend
    (``bent``), at most half an epoch; ``none`` searches from the untrained model."""
    reward_reuse: bool = False
    """False (Alg. 1 lines 8-12): each comparison measures both candidates, the kept one anew. True (the
    authors' public code): the kept candidate's reward from the previous comparison stands for it."""
    probe_samples: int = ranged(512, ge=1)
    """Training examples (a fixed random sample) on which the scheduler evaluates the global loss."""
    target_ratio: float = ranged(0.8, gt=0, lt=1)
    """Reward target l* = this fraction of the lowest loss sampled in the two trials compared, near enough that
    the fits are read where their samples hold them (farther, a few samples' unevenness is amplified)."""
    target_loss: float = ranged(0.0, ge=0, zero="use target_ratio")
    """Fixed reward target l*; 0 uses ``target_ratio``."""
    reward_clock: Literal["run", "trial"] = "run"
    """The clock t of the reward fit (``fit_reward``): the run's (the paper's: trials on one loss curve tie,
    whatever their start) or each trial's own, from its first sample (time still needed: later trials win)."""

    time_settings = ("lr_decay_s", "check_period_s", "epoch_s")

    def validate(self, cfg) -> None:
        """The one rule over several fields (each number's range is declared with its field): a searching run's
        epoch holds two trials (a fixed rate needs no room)."""
        least = 2 * (self.trial_periods if self.trial_sampling == "checkpoints" else 1)
        if not self.fixed_rate and self.check_period_s and self.epoch_s and self.epoch_s < least * self.check_period_s:
            raise UserError(f"adsp.epoch_s = {self.epoch_s}: must be >= {least} * check_period_s = "
                            f"{least * self.check_period_s:g} (the search compares two trials of "
                            f"{least // 2} period(s) each)")

    def resolve(self, job) -> "ADSPConfig":
        a = super().resolve(job)
        least = 2 * (a.trial_periods if a.trial_sampling == "checkpoints" else 1)
        gamma = a.check_period_s or (min(time_scale(job), a.epoch_s / least) if a.epoch_s else time_scale(job))
        return dataclasses.replace(a, check_period_s=gamma, epoch_s=a.epoch_s or 20 * gamma)


# ------------------------------------------------------------------------------------------ the math


def loss_curve(t, a1: float, a2: float, a3: float):
    """The O(1/t) loss model of Sec. 4.2: l = 1/(a1^2 t + a2) + a3."""
    return 1.0 / (a1 * a1 * np.asarray(t, dtype=float) + a2) + a3


@dataclass(frozen=True)
class RewardFit:
    """The reward of one trial and how it was obtained (see ``fit_reward``)."""

    reward: float
    rule: str
    """``curve`` (the paper's fit), ``slope`` (the least-squares line) or ``none`` (no usable samples)."""
    degenerate: str = ""
    """Why the curve was not used ("" when it was)."""
    a1: float = math.nan
    a2: float = math.nan
    a3: float = math.nan
    """The fitted curve's parameters, also when it was degenerate (nan when there was no fit)."""
    r2: float = math.nan
    """Coefficient of determination of the rule's fit on the samples (nan when the samples are all equal)."""
    rmse: float = math.nan
    """Root mean square of the rule's residuals, in loss units."""


def fit_reward(times, losses, target: float, floor: float = 0.0, clock: str = "run") -> RewardFit:
    """Reward of one trial (ADSP Sec. 4.2): r = 1 / (predicted time to reach the loss ``target``).

    ``clock``: what t is. ``"run"`` (the paper's intent): the times as given, the run's clock, so r = 1 / t*,
    t* the time on the run's clock at which the fitted curve reaches the target; samples of one O(1/t) curve
    taken at any start predict the same t* and tie. ``"trial"``: t from the trial's first sample, so r is the
    inverse of the time still needed, larger for a later trial on the same curve.

    The paper's rule (``curve``): fit l = 1/(a1^2 t + a2) + a3 by least squares, written as l = b/(1 + k t) + a3
    with b = 1/a2 > 0, k = a1^2/a2 >= 0 so that the fit is well conditioned, and a3 >= ``floor`` (a loss never
    falls below its floor: 0 for cross-entropy and hinge losses); then r = a1^2 / (1/(l* - a3) - a2) =
    k (l* - a3) / (l(0) - l*), or inf when l(0) <= l* (reached at t = 0).

    The curve is *degenerate* when fewer than 3 samples allow no 3-parameter fit, when the fit fails or is not
    finite, or when its asymptote a3 >= l*: the formula then says "never", which with a few noisy samples
    is mostly an artefact (a sharp bend fitted to noise) and would tie every such trial at 0. Then the
    reward follows the least-squares line through the samples (``slope``: the curve family's limit b -> inf,
    a robust estimate of the rate of decrease): r = -slope / (l_line(0) - l*), 0 when the line does not
    fall, inf when it is at or below l* at t = 0. Fewer than 2 finite samples give r = 0 (``none``).
    """
    if clock not in ("run", "trial"):
        raise ValueError(f"clock = {clock!r}: 'run' or 'trial'")
    t = np.asarray(times, dtype=float)
    y = np.asarray(losses, dtype=float)
    if len(t) < 2 or not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        return RewardFit(0.0, "none", "fewer than 2 finite samples")
    if clock == "trial":
        t = t - t[0]
    span = float(t[-1]) or 1.0
    a, why = (math.nan,) * 3, "fewer than 3 samples"
    if len(t) >= 3:
        params = _fit_curve(t / span, y, floor)  # fit in units of the trial's length
        if params is None:
            why = "no fit"
        else:
            b, k, a3 = params[0], params[1] / span, params[2]  # k per second
            a = (math.sqrt(k / b), 1.0 / b, a3)
            if a3 < target:
                l0 = b + a3
                r = math.inf if l0 <= target else k * (target - a3) / (l0 - target)
                return RewardFit(float(r), "curve", "", *a, *_quality(y, b / (1.0 + k * t) + a3))
            why = "asymptote at or above the target"
    slope, l0 = np.polyfit(t, y, 1)
    r = 0.0 if slope >= 0 else (math.inf if l0 <= target else -slope / (l0 - target))
    return RewardFit(float(r), "slope", why, *a, *_quality(y, l0 + slope * t))


def _fit_curve(tn, y, floor: float) -> tuple[float, float, float] | None:
    """Least-squares (b, k, a3) of y = b/(1 + k t) + a3 with b > 0, k >= 0, a3 >= floor; None if it fails."""
    from scipy.optimize import OptimizeWarning, curve_fit

    drop = max(float(y[0] - y[-1]), 1e-6)
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)  # no covariance from 3 points: not needed
            (b, k, a3), _ = curve_fit(lambda x, b, k, c: b / (1.0 + k * x) + c, tn, y,
                                      p0=(2 * drop, 1.0, max(floor, float(y[-1]) - drop)),
                                      bounds=([1e-12, 0.0, floor], [np.inf, np.inf, np.inf]), maxfev=5000)
    except (RuntimeError, ValueError):
        return None
    return (float(b), float(k), float(a3)) if all(map(math.isfinite, (b, k, a3))) else None


def _quality(y, predicted) -> tuple[float, float]:
    """(R^2, residual RMS) of ``predicted`` against ``y``."""
    res = float(np.sum((y - predicted) ** 2))
    tot = float(np.sum((y - np.mean(y)) ** 2))
    return (1.0 - res / tot if tot > 0 else math.nan), math.sqrt(res / len(y))


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
    a = node.algo.resolve(node.job)
    w = LocalWorker(node, a)
    ps, sched = node.ranks("ps")[0], node.ranks("scheduler")[0]
    commits, left = 0, 0
    interval, due = math.inf, math.inf
    overhead = w.timed_pull(ps)  # O_i for the first timer: a commit's round trip
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
    import torch  # here, not at the top: importing the algorithms (config validation) stays free of torch

    node.algo.resolve(node.job).log_settings(node)
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
        elif msg.tag == "pull":  # a worker's timed pull before its first commit
            ps.reply(msg.src)
        elif msg.tag == "query":  # the scheduler: commit counts, step counts, and the model when asked
            extra = {"params": ps.W} if msg["params"] else {}
            node.send(msg.src, "state", counts=counts, steps=steps, last=last, **extra)


def _probe(node: Node, n: int):
    """The global loss's evaluator: W on a fixed random sample of ``n`` training examples (outside any clock)."""
    import torch  # here, not at the top: importing the algorithms (config validation) stays free of torch

    ds = node.job.dataset
    g = torch.Generator().manual_seed(node.cfg.run.seed + 11)
    idx = torch.randperm(len(ds.y_train), generator=g)[: min(n, len(ds.y_train))]
    return node.evaluator(ds.x_train[idx], ds.y_train[idx])


def bent(losses) -> bool:
    """True when three successive checkpoint losses fall, the second drop no larger than the first: the
    convex shape of Sec. 4.2's O(1/t) model (an untrained model's plateau is concave: its loss falls ever
    faster)."""
    first, second = losses[-3] - losses[-2], losses[-2] - losses[-1]
    return 0 < second <= first


def adsp_scheduler(node: Node) -> None:
    a = node.algo.resolve(node.job)
    ps, workers = node.ranks("ps")[0], node.ranks("worker")
    probe = _probe(node, a.probe_samples)
    gamma = a.check_period_s

    def state(with_params: bool):
        node.send(ps, "query", params=with_params)
        return node.recv(ps, "state")

    def sample() -> tuple[float, float, object]:
        t = node.now()
        st = state(True)
        return t, probe(st["params"])[0], st  # evaluating takes the scheduler's host time, not training time

    # how a trial samples the loss: at its checkpoints over trial_periods periods, or loss_samples times in one
    within = a.trial_sampling == "within"
    per_period, periods = (a.loss_samples, 1) if within else (2, a.trial_periods)
    checkpoint, epoch = 0, 0
    st, loss = state(False), None
    history = []  # the checkpoint losses before the first search (the burn-in's)
    now = node.now()  # checkpoints lie on a fixed grid, however long the evaluations take
    while True:  # one epoch (Alg. 1 MAINFUNCTION)
        epoch_start, epoch_end = now, now + a.epoch_s - 1e-9
        c_target = int(st["counts"].max())  # Alg. 1 line 3: C_target = max_i c_i + rate, rate = 1 first
        rate = a.fixed_rate or 1
        # what the periods are for: "burn" (before the run's first search), "search" (trials), "kept"
        mode = "kept" if a.fixed_rate else ("burn" if epoch == 0 and a.burn_in == "bend" else "search")
        first = None  # (rate, times, losses): the comparison's first trial
        times, losses = None, None  # the current trial's samples
        while now < epoch_end:  # one check period, from the checkpoint at `now`
            c_target += rate
            start_counts = st["counts"].clone()
            for w in workers:
                node.send(w, "target", c_target=c_target, start=now)
            node.log("decisions", name="c_target", value=c_target, epoch=epoch, rate=rate)
            node.log("decisions", name="commit_rate", value=rate, epoch=epoch, rate=rate)
            if mode == "burn":
                node.log("decisions", name="burn_in", value=1, epoch=epoch, rate=rate)
            if loss is None:  # the very first sample; later ones are the previous period's last
                t, loss, st = sample()
                history.append(loss)
            if times is None:  # a trial starts at this checkpoint
                times, losses = [t], [loss]
            for j in range(1, per_period):
                node.sleep(now + j * gamma / (per_period - 1) - node.now())
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
            if mode == "burn":  # the search starts once the curve has bent, or after half an epoch
                history.append(loss)
                times = None
                if (len(history) >= 3 and bent(history)) or now - epoch_start >= a.epoch_s / 2 - 1e-9:
                    mode, epoch_end = "search", now + a.epoch_s - 1e-9  # the first epoch starts with its search
                continue
            if mode != "search" or len(times) < periods * (per_period - 1) + 1:  # no trial, or it goes on
                if mode != "search":
                    times = None
                continue
            trial, times = (rate, times, losses), None
            if first is None:
                first, rate = trial, rate + 1
                continue
            target = a.target_loss or a.target_ratio * min(min(first[2]), min(trial[2]))
            fit_first = fit_reward(first[1], first[2], target, clock=a.reward_clock)
            fit_new = fit_reward(trial[1], trial[2], target, clock=a.reward_clock)
            node.log("decisions", name="target_loss", value=target, epoch=epoch, rate=rate)
            for tr, fit in ((first, fit_first), (trial, fit_new)):
                node.log("trials", epoch=epoch, rate=tr[0], **dataclasses.asdict(fit), samples=len(tr[2]),
                         target=target, loss_first=tr[2][0], loss_last=tr[2][-1], trial_start=tr[1][0])
            node.log("decisions", name="reward", value=fit_new.reward, epoch=epoch, rate=rate)
            if fit_new.reward > fit_first.reward:  # Alg. 1 lines 11-12: recurse with C_target + 1
                if a.reward_reuse:  # the authors' code: its reward stands for it in the next comparison
                    first, rate = trial, rate + 1
                else:  # DECIDECOMMITRATE(C_target + 1) measures it anew (line 8), then C_target + 2
                    first = None
            else:  # line 14: keep C_target for the rest of the epoch
                rate, mode = first[0], "kept"
                node.log("decisions", name="kept_rate", value=rate, epoch=epoch, rate=rate)
        epoch += 1


register(AlgorithmSpec("adsp", "Adaptive synchronous parallel: no waiting, commit rates searched online",
                       ADSPConfig, ps_nodes(adsp_server, adsp_worker, ("scheduler", adsp_scheduler)),
                       "ADSP Sec. 3-4, Alg. 1-2", preload=("scipy.optimize",), display="ADSP",  # the reward fit
                       decisions=("c_target", "commit_rate", "mu_implicit", "target_loss", "reward", "burn_in",
                                  "kept_rate")))
