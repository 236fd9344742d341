"""The parameter-server kit (edgeml/algorithms/kit.py): bookkeeping by hand, hooks, time settings, and the
default run of every shipped algorithm learning."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from conftest import simulate
from edgeml.algorithms import BUILTIN
from edgeml.algorithms.adacomm import AdacommConfig, FixedAdacommConfig
from edgeml.algorithms.adsp import ADSPConfig
from edgeml.algorithms.kit import LocalSGDConfig, ParameterServer, PSConfig, ps_worker, time_scale
from edgeml.config import load_config
from edgeml.runner import run
from edgeml.runtime.base import Message


class FakeNode:
    """Just enough of a PS node: rank 1 is the PS, ranks 2.. the workers; messages are queued by hand."""

    def __init__(self, workers: int, eta: float, init: torch.Tensor):
        self.job = SimpleNamespace(init_params=init)
        self.device = torch.device("cpu")
        self.algo = PSConfig(global_lr=eta)
        self.workers = list(range(2, 2 + workers))
        self.inbox: list[Message] = []
        self.sent: list[tuple[int, str, dict]] = []
        self.rows: list[tuple[str, dict]] = []
        self.exposed = None

    def ranks(self, role):
        return list(self.workers) if role == "worker" else [1]

    def worker_index(self, rank):
        return self.workers.index(rank)

    def expose(self, params):
        self.exposed = params

    def log(self, series, **fields):
        self.rows.append((series, fields))

    def send(self, dst, tag, **data):
        self.sent.append((dst, tag, {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in data.items()}))

    def recv(self, src=None, tag=None, timeout=None):
        for i, m in enumerate(self.inbox):
            if tag is None or m.tag == tag:
                return self.inbox.pop(i)
        raise AssertionError("the server waited for a message that never comes")


def push(src: int, *values: float, tag: str = "push") -> Message:
    return Message(src, tag, {"update": torch.tensor(values)}, 0)


def staleness_rows(node):
    return [(r["worker"], r["staleness"]) for s, r in node.rows if s == "staleness"]


def test_async_bookkeeping_by_hand():
    node = FakeNode(2, eta=0.5, init=torch.tensor([1.0, 1.0]))
    ps = ParameterServer(node)
    assert node.exposed is ps.W and ps.eta == 0.5 and ps.W is not node.job.init_params
    assert ps.apply(push(2, 2.0, 0.0)) == 0  # W = (0, 1), version 1
    ps.reply(2)
    assert ps.apply(push(3, 0.0, 4.0)) == 1  # worker 3 pulled version 0: one model made since
    assert ps.apply(push(2, 2.0, 2.0)) == 1  # worker 2 pulled version 1; worker 3's update made version 2
    assert ps.W.tolist() == [-1.0, -2.0] and ps.version == 3
    assert staleness_rows(node) == [(0, 0), (1, 1), (0, 1)]
    assert node.sent[0][:2] == (2, "model") and node.sent[0][2]["params"].tolist() == [0.0, 1.0]
    assert ps.pulled == {2: 1, 3: 0}


def test_step_rule_hook_divides_by_staleness():
    """An ASGD-style rule (eta / staleness) is a step function; the kit passes each update's staleness."""
    node = FakeNode(2, eta=1.0, init=torch.zeros(1))
    ps = ParameterServer(node, rule=lambda ps, msg, s: ps.W.add_(msg["update"], alpha=-ps.eta / max(1, s)))
    ps.apply(push(2, 1.0))  # staleness 0: full step
    ps.apply(push(3, 1.0))  # staleness 1
    ps.apply(push(3, 1.0))  # staleness 2 (worker 3 never pulled)
    assert ps.W.tolist() == [-(1.0 + 1.0 + 0.5)]
    assert staleness_rows(node) == [(0, 0), (1, 1), (1, 2)]


class PerParameter(ParameterServer):
    """A subclass with its own state: per-parameter staleness sigma_k (the updates that touched entry k since
    the worker pulled; adacomp.txt Eq. 3) and rate eta / sigma_k (eta when 0), from per-parameter counters."""

    def __init__(self, node):
        super().__init__(node)
        self.count = torch.zeros_like(self.W)
        self.seen = {w: self.count.clone() for w in self.workers}

    def step(self, msg, staleness):
        u = msg["update"]
        sigma = self.count - self.seen[msg.src]
        self.W.sub_(torch.where(sigma > 0, self.eta / sigma, torch.full_like(sigma, self.eta)) * u)
        self.count += u != 0

    def reply(self, dst, **extra):
        super().reply(dst, **extra)
        self.seen[dst] = self.count.clone()


def test_subclass_hooks_per_parameter_staleness():
    node = FakeNode(2, eta=1.0, init=torch.zeros(2))
    ps = PerParameter(node)
    ps.apply(push(2, 1.0, 0.0))  # sigma (0, 0): W = (-1, 0); entry 0 touched once
    ps.apply(push(3, 1.0, 1.0))  # sigma (1, 0): W = (-2, -1); counts (2, 1)
    ps.reply(2)  # worker 2 pulls: its counts are (2, 1)
    ps.apply(push(3, 0.0, 2.0))  # worker 3 never pulled: sigma (2, 1), rates (1/2, 1): W = (-2, -3)
    ps.apply(push(2, 2.0, 2.0))  # sigma (2, 2) - (2, 1) = (0, 1): full rates: W = (-4, -5)
    assert ps.W.tolist() == [-4.0, -5.0]
    assert staleness_rows(node) == [(0, 0), (1, 1), (1, 2), (0, 1)]  # the global staleness, logged as ever


def test_barrier_round_gathers_every_worker_and_applies_in_rank_order():
    node = FakeNode(3, eta=0.25, init=torch.zeros(1))
    node.inbox = [push(4, 4.0), push(2, 8.0), Message(2, "query", {}, 0), push(3, 12.0)]
    ps = ParameterServer(node)
    msgs = ps.gather()
    assert [m.src for m in msgs] == [4, 2, 3]  # arrival order; the query is left for later
    assert [m.tag for m in node.inbox] == ["query"]
    ps.apply_round(msgs)
    assert ps.W.tolist() == [-6.0] and ps.version == 1  # a round makes one model
    assert staleness_rows(node) == [(0, 0), (1, 0), (2, 0)]  # logged in rank order, all fresh
    for w in ps.workers:
        ps.reply(w)
    assert ps.pulled == {2: 1, 3: 1, 4: 1}


def test_barrier_round_combine_hook():
    """ESync's PS mode: one averaged step for the round instead of one step per update."""
    node = FakeNode(2, eta=1.0, init=torch.ones(1))
    ps = ParameterServer(node)

    def mean(ps, msgs):
        ps.W.add_(sum(m["update"] for m in msgs) / len(msgs), alpha=-2.0)
    ps.apply_round([push(3, 3.0), push(2, 1.0)], combine=mean)
    assert ps.W.tolist() == [1.0 - 2.0 * 2.0] and ps.version == 1


class WorkerNode:
    """Just enough of a worker for ``ps_worker``: a trainer whose gradient is fixed, a PS that answers each push
    with a model and a version, and an end after ``pushes`` pushes."""

    class Done(Exception):
        pass

    def __init__(self, pushes: int, lr: float = 0.5):
        self.algo = PSConfig(lr=lr)
        self.pushes, self.sent = pushes, []
        t = SimpleNamespace(params=torch.zeros(3), grad=torch.tensor([1.0, -2.0, 4.0]), batch_size=8,
                            spans=[(0, 2), (2, 1)])
        t.gradient = lambda: 0.25  # the batch loss
        self.t = t

    def trainer(self):
        return self.t

    def ranks(self, role):
        return [1]

    def compute(self, fn, samples):
        self.computing = True  # what runs inside a step is the worker's computation (timed as such on procs)
        try:
            return fn()
        finally:
            self.computing = False

    def push(self, dst, tag, **data):
        if len(self.sent) == self.pushes:
            raise WorkerNode.Done
        self.sent.append((dst, tag, {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in data.items()}))

    def count(self, name):
        pass

    def recv(self, src, tag):
        return Message(src, tag, {"params": torch.full((3,), float(len(self.sent))), "version": 10 * len(self.sent)}, 0)


def test_ps_worker_hooks():
    """Pushes of eta' g and the batch loss by default; ``pack(cfg, spans, U)`` encodes U, ``scaled=False`` pushes
    g itself, ``fields(loss, reply)`` adds the push's other fields (AdaComp: the version last pulled)."""
    node = WorkerNode(pushes=2)
    with pytest.raises(WorkerNode.Done):
        ps_worker(node)
    assert [(dst, tag) for dst, tag, _ in node.sent] == [(1, "push"), (1, "push")]
    assert node.sent[0][2]["update"].tolist() == [0.5, -1.0, 2.0] and node.sent[0][2]["loss"] == 0.25
    assert node.t.params.tolist() == [2.0, 2.0, 2.0]  # the model of the last reply

    def pack(cfg, spans, update):
        assert node.computing, "the encoding runs outside the worker's step: its time would count as nothing"
        return {"first": update[spans[1][0]:].clone(), "lr": cfg.lr}

    def version(loss, reply):
        return {"version": reply["version"] if reply is not None else 0}
    node = WorkerNode(pushes=2)
    with pytest.raises(WorkerNode.Done):
        ps_worker(node, pack, scaled=False, fields=version)
    assert [(d["first"].tolist(), d["lr"], d["version"]) for _, _, d in node.sent] == [([4.0], 0.5, 0),
                                                                                       ([4.0], 0.5, 10)]


def job_for(base_step_s: float, max_time: float):
    return SimpleNamespace(base_step_s=base_step_s, cfg=SimpleNamespace(stop=SimpleNamespace(max_time=max_time)))


def test_time_scale_and_auto_settings():
    assert time_scale(job_for(0.01, 20.0)) == 0.5  # 1/40 of the budget
    assert time_scale(job_for(2.0, 1000.0)) == 40.0  # 20 steps of 2 s (the budget would give 25 s)
    assert time_scale(job_for(0.01, 0.0)) == pytest.approx(0.2)  # no budget: 20 steps
    job = job_for(0.01, 20.0)
    a = ADSPConfig().resolve(job)
    assert (a.check_period_s, a.epoch_s, a.lr_decay_s) == (0.5, 10.0, 10.0)
    assert ADSPConfig().check_period_s == 0  # resolve returns a copy
    a = ADSPConfig(epoch_s=0.6).resolve(job)  # an explicit epoch keeps room for two trials of two periods
    assert (a.check_period_s, a.epoch_s) == (0.15, 0.6)
    a = ADSPConfig(check_period_s=60.0, epoch_s=1200.0, lr_decay_s=600.0).resolve(job)  # explicit values stay
    assert (a.check_period_s, a.epoch_s, a.lr_decay_s) == (60.0, 1200.0, 600.0)
    assert ADSPConfig(check_period_s=2.0).resolve(job).epoch_s == 40.0
    a = AdacommConfig().resolve(job)
    assert (a.trial_s, a.adapt_period_s, a.lr_decay_s) == (0.5, 1.0, 10.0)
    assert FixedAdacommConfig(trial_s=3.0).resolve(job).trial_s == 3.0
    assert LocalSGDConfig(lr=0.2, lr_decay=0.5, lr_decay_s=4.0).local_lr(8.0) == pytest.approx(0.05)


def test_adsp_default_period_fits_the_run():
    """Left at 0, a 4 s run of 0.01 s steps gets 0.2 s check periods (20 steps; 1/40 of the budget is less)
    and 4 s epochs, and the first commits come within the first period: adsp.txt's 60 s would leave the
    model untouched for the whole run."""
    kernel, monitor, status, _ = simulate("run.algorithm='adsp'", "cluster.workers=3", "stop.max_time=4")
    ps = kernel.nodes[kernel.roles["ps"][0]]
    assert [r for s, r in ps.series if s == "settings"] == [
        {"time_s": 0.0, "rank": ps.rank, "role": "ps", "lr_decay_s": 4.0, "check_period_s": 0.2, "epoch_s": 4.0}]
    sched = kernel.nodes[kernel.roles["scheduler"][0]]
    starts = [r["time_s"] for s, r in sched.series if s == "decisions" and r["name"] == "c_target"]
    assert starts == pytest.approx([0.2 * k for k in range(20)])
    first = min(r["time_s"] for s, r in ps.series if s == "staleness")
    assert first < 0.2 and monitor.rows[-1]["accuracy"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", sorted(BUILTIN))
def test_default_run_learns(tmp_path, algorithm):
    """`edgeml run ALGO --backend sim` with every default (4 workers, 20 s, digits) learns: accuracy well
    above chance (0.1 for 10 classes)."""
    path = run(load_config(overrides=[f"run.algorithm='{algorithm}'", "run.backend='sim'", f"run.out='{tmp_path}'"]))
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["final_accuracy"] > 0.8
    assert math.isfinite(summary["final_loss"])
