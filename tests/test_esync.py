"""ESync (esync.txt Alg. 1-2): the State Server's QUERY-STATE on hand-made tables, ESync's reduction to SSGD,
aggregation by all-reduce and by parameter server giving the same models, the delayed-ACK mode, and the
baselines SSGD and standalone training."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from edgeml.algorithms.esync import Record, query_state
from edgeml.config import load_config
from edgeml.errors import UserError
from edgeml.runner import run

A, B, C = 2, 3, 4  # device ranks


def table(**rows) -> dict[int, Record]:
    return {r.rank: r for r in rows.values()}


def test_query_state_is_not_ready_before_any_local_iteration():
    t = table(a=Record(A, c=0.1, t_e=0.0, round=0), b=Record(B, c=1.0, t_e=0.0, round=0))
    assert not query_state(t, A, k=0, c=0.1, t_e=0.5, now=0.5, eps=0.0)
    assert (t[A].k, t[A].c, t[A].t_e) == (0, 0.1, 0.5) and not t[A].ready  # line 3 updated the record


def test_query_state_waits_for_the_slowest_to_pull_the_round():
    # the slowest (B, largest c) is still in round 0 while A is in round 1
    t = table(a=Record(A, c=0.1, round=1), b=Record(B, c=1.0, round=0, t_e=0.0))
    assert not query_state(t, A, k=3, c=0.1, t_e=0.9, now=0.9, eps=0.0)
    # a device that never reported counts as not having pulled
    t = table(a=Record(A, c=0.1, round=0), b=Record(B))
    assert not query_state(t, A, k=1, c=0.1, t_e=0.1, now=0.1, eps=0.0)


def test_query_state_the_slowest_itself_is_ready_after_one_iteration():
    t = table(a=Record(A, c=0.1, round=0), b=Record(B, c=1.0, round=0))
    assert query_state(t, B, k=1, c=1.0, t_e=1.0, now=1.0, eps=0.0) and t[B].ready


def test_query_state_ready_once_the_slowest_is():
    t = table(a=Record(A, c=0.1, round=0), b=Record(B, c=1.0, round=0, ready=True, t_e=0.0))
    assert query_state(t, A, k=2, c=0.1, t_e=0.2, now=0.2, eps=0.0)  # rest time 0.8 > 0.1, but B is ready


def test_query_state_ready_when_another_iteration_would_not_fit():
    # B (slowest, c = 1) finished its last iteration at t = 2.0, so it is done at 3.0 (binary fractions: exact)
    def ask(now: float, c: float = 0.25, eps: float = 0.0) -> bool:
        t = table(a=Record(A, c=c, round=0), b=Record(B, c=1.0, t_e=2.0, round=0), c=Record(C, c=0.5, round=0))
        return query_state(t, A, k=4, c=c, t_e=now, now=now, eps=eps)
    assert not ask(now=2.5)  # 0.5 s left: one more 0.25 s iteration fits
    assert ask(now=2.875)  # 0.125 s left: it does not
    assert not ask(now=2.75)  # exactly 0.25 s left: fits, at the boundary
    assert ask(now=2.75, eps=0.01)  # epsilon settles the boundary towards aggregating


def test_query_state_ignores_crashed_devices_when_finding_the_slowest():
    t = table(a=Record(A, c=0.1, round=0), b=Record(B, c=9.0, round=0, t_e=0.0))
    assert not query_state(t, A, k=1, c=0.1, t_e=0.1, now=0.1, eps=0.0)
    assert query_state(t, A, k=1, c=0.1, t_e=0.1, now=0.1, eps=0.0, live={A})  # A is the slowest alive


def _run(tmp_path, name: str, *overrides: str):
    cfg = load_config(overrides=[f"run.out='{tmp_path}'", f"run.name='{name}'", "run.backend='sim'",
                                 "cluster.workers=3", "stop.max_time=30", "eval.interval=0.25", *overrides])
    path = run(cfg)
    return path, pd.read_csv(path / "evals.csv")


def test_with_equal_speeds_esync_is_ssgd(tmp_path):
    rounds = 150  # each device's probe is one step more for ESync
    es, a = _run(tmp_path, "esync", "run.algorithm='esync'", "esync.lr=0.05", f"stop.max_steps={3 + 3 * rounds}")
    _, b = _run(tmp_path, "ssgd", "run.algorithm='ssgd'", "ssgd.lr=0.05", f"stop.max_steps={3 * rounds}")
    assert (pd.read_csv(es / "series" / "rounds.csv").iterations == 1).all()  # one local iteration per round
    # the same rounds on the same batches: the same model, up to rounding (ESync forms w + mean(w' - w))
    assert a.rounds.iloc[-1] == b.rounds.iloc[-1] == rounds - 1
    assert a.accuracy.iloc[-1] == b.accuracy.iloc[-1]
    assert a.loss.iloc[-1] == pytest.approx(b.loss.iloc[-1], rel=1e-5)
    assert a.loss.iloc[-1] < 0.5 * a.loss.iloc[0]


def test_a_cap_of_one_local_iteration_makes_esync_ssgd_at_any_speeds(tmp_path):
    rounds, speeds = 120, "cluster.hetero='1:2:5'"
    es, a = _run(tmp_path, "esync", "run.algorithm='esync'", "esync.lr=0.05", "esync.max_local=1", speeds,
                 f"stop.max_steps={3 + 3 * rounds}")
    _, b = _run(tmp_path, "ssgd", "run.algorithm='ssgd'", "ssgd.lr=0.05", speeds, f"stop.max_steps={3 * rounds}")
    assert (pd.read_csv(es / "series" / "rounds.csv").iterations == 1).all()
    assert a.rounds.iloc[-1] == b.rounds.iloc[-1] == rounds - 1
    assert a.accuracy.iloc[-1] == b.accuracy.iloc[-1]
    assert a.loss.iloc[-1] == pytest.approx(b.loss.iloc[-1], rel=1e-5)


def test_the_cap_bounds_each_rounds_local_iterations_and_only_in_blocking_mode(tmp_path):
    path, _ = _run(tmp_path, "capped", "run.algorithm='esync'", "esync.lr=0.05", "cluster.hetero='1:2:6'",
                   "stop.max_time=2", "esync.max_local=3")
    rounds = pd.read_csv(path / "series" / "rounds.csv")
    per = rounds[rounds["round"] > 1].groupby("rank").iterations.agg(["min", "max"])
    # uncapped, 5, 2 and 1 (test_fast_devices_train_more...): the fastest stops at 3 and waits
    assert per.loc[[2, 3, 4], "min"].tolist() == [3, 2, 1] and per.loc[[2, 3, 4], "max"].tolist() == [3, 2, 1]
    with pytest.raises(UserError, match="esync.max_local = 2 caps the rounds of the blocking mode"):
        load_config(overrides=["run.algorithm='esync'", "esync.max_local=2", "esync.mode='delayed_ack'"])


@pytest.mark.parametrize("algorithm", ["esync", "ssgd"])
def test_all_reduce_and_parameter_server_aggregation_give_the_same_models(tmp_path, algorithm):
    common = [f"run.algorithm='{algorithm}'", f"{algorithm}.lr=0.05", "cluster.hetero='1:2:5'", "stop.max_time=3"]
    _, ar = _run(tmp_path, "allreduce", *common)
    ps_path, ps = _run(tmp_path, "ps", *common, f"{algorithm}.aggregation='ps'")
    assert ar.total_steps.tolist() == ps.total_steps.tolist()
    assert ar.accuracy.tolist() == ps.accuracy.tolist()
    # the all-reduce's row averages the devices' identical copies, the server's is the one model
    assert ar.loss.tolist() == pytest.approx(ps.loss.tolist(), rel=1e-9, abs=1e-12)
    roles = pd.read_csv(ps_path / "nodes.csv").role.tolist()
    assert roles.count("ps") == 1


def test_fast_devices_train_more_and_wait_less_than_their_capability(tmp_path):
    path, evals = _run(tmp_path, "esync", "run.algorithm='esync'", "esync.lr=0.05", "cluster.hetero='1:2:6'",
                       "stop.max_time=2")
    rounds = pd.read_csv(path / "series" / "rounds.csv")
    per = rounds[rounds["round"] > 1].groupby("rank").iterations.agg(["min", "max"])
    # steps of 0.01, 0.02 and 0.06 s: per round of the slowest's one iteration, 5 and 2 (the sixth and third
    # would end exactly with the slowest's: epsilon sends them to aggregate)
    assert per.loc[[2, 3, 4], "min"].tolist() == [5, 2, 1] and per.loc[[2, 3, 4], "max"].tolist() == [5, 2, 1]
    eps = 0.001  # auto: a tenth of the fastest step
    capability = {2: 0.01, 3: 0.02, 4: 0.06}
    for rank, group in rounds.groupby("rank"):
        assert (group.wait_s <= capability[rank] + eps + 1e-12).all()  # Alg. 2: waiting below one's own c
    assert evals.rounds.iloc[-1] == rounds[rounds["rank"] == 2]["round"].max()


def test_delayed_ack_aborts_the_iteration_in_progress(tmp_path):
    # no latency: the READY for iteration k arrives at once and aborts iteration k + 1 (delta = 1)
    path, _ = _run(tmp_path, "zero", "run.algorithm='esync'", "esync.lr=0.05", "esync.mode='delayed_ack'",
                   "cluster.hetero='1:2:6'", "stop.max_time=2")
    r = pd.read_csv(path / "series" / "rounds.csv")
    fast = r[r["rank"] == 2]
    assert (fast.delta == 1).all() and (fast.iterations == fast.ready_for).all() and len(fast) > 20
    # a round trip of 2 x 25 ms: the fast device (10 ms steps) completes two more iterations while its query
    # travels, so READY for iteration k aborts iteration k + 3, and it aggregates iterations 1 .. k + 2
    path, _ = _run(tmp_path, "latency", "run.algorithm='esync'", "esync.lr=0.05", "esync.mode='delayed_ack'",
                   "cluster.hetero='1:2:6'", "stop.max_time=4", "network.latency_s=0.0125")
    r = pd.read_csv(path / "series" / "rounds.csv")
    fast = r[(r["rank"] == 2) & (r["round"] > 2)]
    assert (fast.delta == 3).all(), fast
    assert (fast.iterations == fast.ready_for + 2).all()
    n = pd.read_csv(path / "nodes.csv").set_index("rank")
    # every step is a probe, an aggregated iteration or one of the iterations of the round under way
    done = r.groupby("rank").iterations.sum()
    assert ((n.loc[[2, 3, 4], "steps"] - done - 1) >= 0).all()


def test_standalone_trains_on_the_whole_training_set(tmp_path):
    path, evals = _run(tmp_path, "alone", "run.algorithm='centralized'", "centralized.lr=0.05", "stop.max_time=3")
    nodes = pd.read_csv(path / "nodes.csv")
    assert nodes.role.tolist() == ["worker"] and evals.accuracy.iloc[-1] > 0.85
    # one pass of batches over all the data, not over a third of it
    assert nodes.samples.iloc[0] == 300 * 32


def test_standalone_weight_decay_adds_to_each_gradient():
    # on f(w) = |w|^2 / 2 (gradient w) a step is w <- w - lr (w + decay w)
    from types import SimpleNamespace

    from edgeml.algorithms.esync import StandaloneConfig, standalone

    class Done(Exception):
        pass

    w = torch.tensor([1.0, -2.0])
    trainer = SimpleNamespace(params=w.clone(), grad=torch.zeros(2), batch_size=1)
    trainer.gradient = lambda: trainer.grad.copy_(trainer.params)
    trainer.sgd = lambda lr: trainer.params.add_(trainer.grad, alpha=-lr)
    calls = []

    def compute(fn, samples):
        if len(calls) == 2:
            raise Done
        calls.append(samples)
        fn()

    node = SimpleNamespace(trainer=lambda all_data: trainer, expose=lambda p: None, compute=compute,
                           algo=StandaloneConfig(lr=0.1, weight_decay=0.5))
    with pytest.raises(Done):
        standalone(node)
    assert torch.allclose(trainer.params, w * (1 - 0.1 * 1.5) ** 2)


@pytest.mark.parametrize("setting", ["esync.global_lr=0", "esync.state_eps_s=-1", "esync.lr=nan",
                                     "esync.mode='eager'", "esync.max_local=-1", "ssgd.aggregation='ring'",
                                     "standalone.lr=-1", "centralized.weight_decay=-0.1",
                                     "standalone.weight_decay=inf"])
def test_bad_settings_are_refused(setting):
    algorithm = setting.split(".")[0]
    with pytest.raises(UserError):
        load_config(overrides=[f"run.algorithm='{algorithm}'", setting])
