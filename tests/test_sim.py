"""The sim backend: equivalences between algorithms, determinism, exact bytes, device and link models."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from conftest import simulate
from edgeml.algorithms import AlgorithmSpec, REGISTRY, register
from edgeml.config import load_config
from edgeml.runner import run
from edgeml.runner import prepare


def ps_params(kernel):
    return kernel.nodes[kernel.roles["ps"][0]].exposed


def test_bsp_with_one_worker_equals_plain_sgd():
    kernel, _, status, _ = simulate("run.algorithm='bsp'", "cluster.workers=1", "stop.max_steps=25",
                                    "stop.max_time=0", "bsp.lr=0.05", "bsp.global_lr=1.0")
    assert status == "completed"
    ps = kernel.nodes[kernel.roles["ps"][0]]
    applied = ps.counters.messages_recv
    assert applied >= 20
    job = prepare(kernel.job.cfg)[0]
    ref = job.trainer(0)
    for _ in range(applied):
        ref.gradient()
        ref.sgd(0.05)
    assert torch.allclose(ps.exposed, ref.params, rtol=0, atol=1e-6)
    assert not torch.equal(ps.exposed, job.init_params)


def test_bsp_with_a_decaying_rate_and_one_worker_equals_plain_sgd_at_each_steps_rate():
    """``bsp.lr_decay`` (a baseline tuned as ADSP's local rate is, Sec. 5.1): step k, starting at k * 0.1 s
    (0.1 s steps, no latency), moves by eta'(t) = 0.05 * 0.5^(t / 0.3); computed here with a plain trainer."""
    kernel, _, status, _ = simulate("run.algorithm='bsp'", "cluster.workers=1", "stop.max_steps=25",
                                    "stop.max_time=0", "bsp.lr=0.05", "bsp.global_lr=1.0", "bsp.lr_decay=0.5",
                                    "bsp.lr_decay_s=0.3", "cluster.base_step_s=0.1", "network.latency_s=0")
    assert status == "completed"
    ps = kernel.nodes[kernel.roles["ps"][0]]
    job = prepare(kernel.job.cfg)[0]
    ref = job.trainer(0)
    for k in range(ps.counters.messages_recv):
        ref.gradient()
        ref.sgd(0.05 * 0.5 ** (k * 0.1 / 0.3))
    assert torch.allclose(ps.exposed, ref.params, rtol=0, atol=1e-6)
    constant = job.trainer(0)  # and the decay matters: the constant rate ends elsewhere
    for _ in range(ps.counters.messages_recv):
        constant.gradient()
        constant.sgd(0.05)
    assert not torch.allclose(ps.exposed, constant.params, rtol=0, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("hetero", ["homogeneous", "1:2:5"])
def test_ssp_with_bound_zero_equals_bsp(hetero):
    common = ["cluster.workers=3", f"cluster.hetero='{hetero}'", "stop.max_time=3", "stop.max_steps=0"]
    bsp, *_ = simulate("run.algorithm='bsp'", *common)
    ssp, *_ = simulate("run.algorithm='ssp'", "ssp.staleness=0", *common)
    def steps(k):
        return [n.counters.steps for n in k.nodes.values() if n.info.role == "worker"]
    assert steps(bsp) == steps(ssp)
    assert torch.allclose(ps_params(bsp), ps_params(ssp), rtol=0, atol=1e-6)
    # and a positive bound really lets fast workers run ahead
    loose, *_ = simulate("run.algorithm='ssp'", "ssp.staleness=3", *common)
    if hetero != "homogeneous":
        assert sum(steps(loose)) > sum(steps(ssp))
        assert max(steps(loose)) - min(steps(loose)) <= 3 + 1


def test_ssp_never_exceeds_its_staleness_bound():
    kernel, *_ = simulate("run.algorithm='ssp'", "ssp.staleness=2", "cluster.workers=3",
                          "cluster.hetero='1:1:6'", "stop.max_time=4")
    steps = [n.counters.steps for n in kernel.nodes.values() if n.info.role == "worker"]
    # a worker that has pushed c updates may compute step c only if c <= min + s
    assert max(steps) - min(steps) <= 2 + 1
    stale = pd.DataFrame([r for n in kernel.nodes.values() for s, r in n.series if s == "staleness"])
    assert stale.staleness.min() >= 0


@pytest.mark.slow
def test_sim_is_deterministic(tmp_path):
    args = ["run.algorithm='asp'", "run.backend='sim'", "cluster.workers=3", "cluster.hetero='1:2:3'",
            "stop.max_time=3", f"run.out='{tmp_path}'"]
    a = run(load_config(overrides=[*args, "run.name='a'"]))
    b = run(load_config(overrides=[*args, "run.name='b'"]))
    c = run(load_config(overrides=[*args, "run.name='c'", "run.seed=1"]))
    for f in ("evals.csv", "nodes.csv", "series/staleness.csv"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    assert (a / "evals.csv").read_bytes() != (c / "evals.csv").read_bytes()


def test_exact_byte_counts():
    kernel, *_ = simulate("run.algorithm='asp'", "cluster.workers=3", "stop.max_time=2")
    P = kernel.job.init_params.numel()
    push = 4 * P + 8  # float32 update + one 8-byte scalar (the batch loss)
    pull = 4 * P
    ps = kernel.nodes[kernel.roles["ps"][0]]
    workers = [n for n in kernel.nodes.values() if n.info.role == "worker"]
    assert ps.counters.bytes_recv == ps.counters.messages_recv * push
    assert ps.counters.bytes_sent == ps.counters.messages_sent * pull
    for w in workers:
        assert w.counters.bytes_sent == w.counters.messages_sent * push
        assert w.counters.bytes_recv == w.counters.messages_recv * pull


def test_step_times_follow_the_profile():
    kernel, *_ = simulate("run.algorithm='asp'", "cluster.workers=3", "cluster.hetero='1:2:4'",
                          "cluster.base_step_s=0.01", "stop.max_time=4")
    steps = [n.counters.steps for n in kernel.nodes.values() if n.info.role == "worker"]
    # ideal links: a worker's iteration is exactly its step time, so steps = floor(T / step) (+- the last)
    for s, f in zip(steps, (1, 2, 4)):
        assert abs(s - 4 / (0.01 * f)) <= 1


def test_link_model_latency_and_bandwidth():
    # one worker, ASP: iteration = step + (push tx + 2 latency hops) + (pull tx + latency)
    kernel, *_ = simulate("run.algorithm='asp'", "cluster.workers=1", "cluster.base_step_s=0.01",
                          "network.latency_s=0.005", "network.up_mbps=8", "network.down_mbps=80",
                          "stop.max_time=5")
    P = kernel.job.init_params.numel()
    push, pull = 4 * P + 8, 4 * P
    iteration = 0.01 + (push / 1e6 + 0.005) + (pull / 1e7 + 0.005)
    w = next(n for n in kernel.nodes.values() if n.info.role == "worker")
    assert abs(w.counters.steps - 5 / iteration) <= 1
    assert w.counters.comm_s == pytest.approx(w.counters.messages_recv * iteration - w.counters.messages_recv * 0.01,
                                              rel=0.02)


@pytest.mark.parametrize("workers", [2, 4])
def test_a_parameter_servers_replies_queue_on_its_up_link(workers: int):
    """``network.links`` by node set: the PS's up link at 8 Mb/s, the workers' ideal. BSP's PS replies to all
    workers at the barrier, one message at a time, so the last reply leaves n transmissions after the first:
    a round is one step plus n x (reply bytes / 1 MB/s), and more workers make every round longer."""
    kernel, *_ = simulate("run.algorithm='bsp'", f"cluster.workers={workers}", "cluster.base_step_s=0.01",
                          "network.links=[{node='ps', up_mbps=8}]", "stop.max_time=3")
    reply = 4 * kernel.job.init_params.numel()
    round_s = 0.01 + workers * reply / 1e6
    steps = sorted(n.counters.steps for n in kernel.nodes.values() if n.info.role == "worker")
    # a worker whose reply leaves first starts the round that the clock cuts short: one step more
    assert 3 / round_s - 1 <= steps[0] <= steps[-1] <= 3 / round_s + 2
    ideal, *_ = simulate("run.algorithm='bsp'", f"cluster.workers={workers}", "cluster.base_step_s=0.01",
                         "stop.max_time=3")
    assert all(abs(n.counters.steps - 300) <= 1 for n in ideal.nodes.values() if n.info.role == "worker")


@pytest.mark.slow
def test_commit_delay_and_slowdown():
    fast, *_ = simulate("run.algorithm='asp'", "cluster.workers=2", "cluster.base_step_s=0.01", "stop.max_time=2")
    slowed, *_ = simulate("run.algorithm='asp'", "cluster.workers=2", "cluster.base_step_s=0.01", "stop.max_time=2",
                          "cluster.slowdowns=[{worker=1, start=0.5, end=1.5, factor=4.0}]")
    delayed, *_ = simulate("run.algorithm='asp'", "cluster.workers=2", "cluster.base_step_s=0.01", "stop.max_time=2",
                           "network.commit_delay_s=0.01")
    def steps(k):
        return [n.counters.steps for n in k.nodes.values() if n.info.role == "worker"]
    assert steps(fast) == [200, 200] or all(abs(s - 200) <= 1 for s in steps(fast))
    assert abs(steps(slowed)[0] - 200) <= 1
    assert abs(steps(slowed)[1] - (50 + 25 + 50)) <= 2  # 0.5 s fast, 1 s at 4x, 0.5 s fast
    assert all(abs(s - 100) <= 1 for s in steps(delayed))  # each iteration pays 0.01 s extra


def test_crash_schedule_and_probability():
    kernel, *_ = simulate("run.algorithm='asp'", "cluster.workers=3", "cluster.base_step_s=0.01",
                          "cluster.crashes=[{worker=1, time=0.5}]", "stop.max_time=2")
    w = [n for n in kernel.nodes.values() if n.info.role == "worker"]
    assert w[1].crashed_at == pytest.approx(0.5)
    assert abs(w[1].counters.steps - 50) <= 1 and abs(w[0].counters.steps - 200) <= 1
    k2, *_ = simulate("run.algorithm='asp'", "cluster.workers=10", "cluster.crash_prob=0.05", "stop.max_time=3",
                      "cluster.base_step_s=0.01")
    crashed = [n for n in k2.nodes.values() if n.info.role == "worker" and n.crashed_at is not None]
    assert 5 <= len(crashed) <= 10  # P(survive 300 pushes) = 0.95^300: all but a fluke crash
    for n in crashed:  # it fails right after a push: its last message was sent
        assert n.counters.messages_sent == n.counters.steps


@pytest.mark.slow
def test_stopping_rules():
    # a step budget bounds the run, so a target that is never reached fails the test instead of hanging it
    _, mon, _, reason = simulate("run.algorithm='asp'", "cluster.workers=2", "stop.max_time=0",
                                 "stop.target_accuracy=0.8", "stop.max_steps=20000")
    assert reason.startswith("target accuracy")
    assert mon.rows[-1]["accuracy"] >= 0.8 and all(r["accuracy"] < 0.8 for r in mon.rows[:-1])
    kernel, _, _, reason = simulate("run.algorithm='asp'", "cluster.workers=2", "stop.max_time=0",
                                    "stop.max_steps=37")
    assert reason.startswith("step budget") and kernel.total_steps == 37
    _, mon, _, reason = simulate("run.algorithm='asp'", "cluster.workers=2", "stop.max_time=0",
                                 "stop.loss_variance=1e-3", "stop.window=5", "eval.interval=0.5")
    assert reason.startswith("loss variance")
    losses = [r["loss"] for r in mon.rows[-6:-1]]
    assert max(losses) - min(losses) < 0.2
    _, mon, _, reason = simulate("run.algorithm='asp'", "cluster.workers=2", "stop.max_time=0", "stop.plateau=6",
                                 "stop.plateau_delta=0.005", "eval.interval=0.5")
    assert reason.startswith("accuracy plateau")
    acc = [r["accuracy"] for r in mon.rows]  # it stops at the first evaluation where the rule holds
    holds = [max(acc[k - 6:k]) <= max(acc[:k - 6]) + 0.005 for k in range(7, len(acc) + 1)]
    assert holds[-1] and not any(holds[:-1])


def test_the_plateau_rule_by_hand():
    from edgeml.runtime.monitor import Monitor
    from edgeml.schema import StopSection

    mon = Monitor.__new__(Monitor)
    mon.stop_cfg, mon.rows, mon.stop_reason = StopSection(plateau=3, plateau_delta=0.01), [], None
    for acc in [0.1, 0.5, 0.7, 0.72, 0.725, 0.722, 0.726, 0.9]:
        row = {"loss": 1.0, "accuracy": acc}
        mon.rows.append(row)
        mon._check_targets(row, evaluated=True)
        if mon.stop_reason:
            break
    # after 0.726 the best of the last three (0.726) is within 0.01 of the best before them (0.72)
    assert len(mon.rows) == 7 and "0.7260" in mon.stop_reason and "0.7200" in mon.stop_reason


@pytest.mark.slow
def test_a_diverged_model_stops_the_run_only_when_asked():
    # a step size far past the stable range makes the loss infinite or NaN within a few evaluations
    blowup = ("run.algorithm='asp'", "cluster.workers=2", "stop.max_time=0", "stop.max_steps=3000",
              "asp.lr=1e6", "eval.interval=0.05")
    _, mon, _, reason = simulate(*blowup, "stop.diverged=true")
    assert reason.startswith("the model diverged")
    assert not math.isfinite(mon.rows[-1]["loss"]) and all(math.isfinite(r["loss"]) for r in mon.rows[:-1])
    kernel, mon, _, reason = simulate(*blowup)  # off by default: the run goes on to its budget
    assert reason.startswith("step budget") and kernel.total_steps == 3000
    assert not math.isfinite(mon.rows[-1]["loss"])


# --- runtime primitives through a tiny algorithm defined here (the sim backend runs in-process) ---

def _probe(node):
    peers = node.ranks("worker")
    t = torch.tensor([float(node.index + 1)])
    node.all_reduce(t)
    node.log("probe", what="sum", value=float(t))
    got = node.recv(tag="nothing", timeout=0.25)
    node.log("probe", what="timeout", value=node.now(), got=got is None)
    if node.index == 0:
        node.send(peers[1], "hello", x=torch.arange(3), k=7)
    else:
        msg = node.recv(src=peers[0], tag="hello")
        node.log("probe", what="hello", value=float(msg["x"].sum() + msg["k"]), nbytes=msg.nbytes)
    while True:
        node.sleep(1.0)


@pytest.fixture
def probe_algorithm():
    from edgeml.algorithms.ps import PSConfig
    register(AlgorithmSpec("probe", "test probe", PSConfig, lambda cfg: [("worker", _probe)] * cfg.cluster.workers))
    yield
    REGISTRY.pop("probe")


def test_an_interrupt_wins_over_a_run_directory_that_went_away(tmp_path):
    """Ctrl-C (or SIGTERM) after the run directory was deleted by hand ends the run as interrupted: the failed
    write must not turn it into an ordinary error, which a reproduction would record and go on past."""
    import shutil

    from edgeml.algorithms.ps import PSConfig

    def vanish(node):
        node.sleep(0.5)
        shutil.rmtree(tmp_path / "gone")
        raise KeyboardInterrupt

    register(AlgorithmSpec("vanish", "test", PSConfig, lambda cfg: [("worker", vanish)] * cfg.cluster.workers))
    try:
        cfg = load_config(overrides=["run.algorithm='vanish'", "run.backend='sim'", "cluster.workers=1",
                                     "stop.max_time=5", "data.dataset='digits'", f"run.out='{tmp_path}'",
                                     "run.name='gone'"])
        with pytest.raises(KeyboardInterrupt):
            run(cfg, quiet=True)
    finally:
        REGISTRY.pop("vanish")


def test_a_ctrl_c_before_the_kernel_loop_records_the_run_as_interrupted(tmp_path, monkeypatch):
    """A Ctrl-C that lands as the run starts (the progress display opening, the kernel entering its loop) is an
    interrupt, not a failure: a reproduction records the run "interrupted" and stops, it does not go on."""
    import json

    from edgeml.runtime import sim

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(sim.Kernel, "run", interrupted)
    cfg = load_config(overrides=["run.algorithm='asp'", "run.backend='sim'", "cluster.workers=1",
                                 "stop.max_time=1", "data.dataset='digits'", f"run.out='{tmp_path}'",
                                 "run.name='early'"])
    with pytest.raises(KeyboardInterrupt):
        run(cfg, quiet=True)
    summary = json.loads((tmp_path / "early" / "summary.json").read_text())
    assert (summary["status"], summary["stop_reason"]) == ("interrupted", "interrupted by the user")


def test_all_reduce_timeout_and_messages(probe_algorithm):
    kernel, *_ = simulate("run.algorithm='probe'", "cluster.workers=2", "stop.max_time=2")
    rows = [r for n in kernel.nodes.values() for s, r in n.series if s == "probe"]
    sums = [r["value"] for r in rows if r["what"] == "sum"]
    assert sums == [3.0, 3.0]
    timeouts = [r for r in rows if r["what"] == "timeout"]
    assert all(r["got"] and r["value"] == pytest.approx(0.25) for r in timeouts)
    hello = next(r for r in rows if r["what"] == "hello")
    assert hello["value"] == 3 + 7 and hello["nbytes"] == 3 * 8 + 8


@pytest.mark.slow
def test_sim_results_do_not_depend_on_the_thread_count_left_by_what_ran_before(tmp_path):
    args = ["run.algorithm='asp'", "run.backend='sim'", "cluster.workers=2", "stop.max_time=0.5",
            "eval.interval=0.1", f"run.out='{tmp_path}'"]
    ambient = torch.get_num_threads()
    a = run(load_config(overrides=[*args, "run.name='a'"]))
    assert torch.get_num_threads() == ambient  # restored after the run
    torch.set_num_threads(2)
    try:
        b = run(load_config(overrides=[*args, "run.name='b'"]))
        assert torch.get_num_threads() == 2
        two = run(load_config(overrides=[*args, "run.name='two'", "run.threads=2"]))
    finally:
        torch.set_num_threads(ambient)
    assert (a / "evals.csv").read_bytes() == (b / "evals.csv").read_bytes()
    assert json.loads((a / "meta.json").read_text())["threads"] == 1
    assert json.loads((two / "meta.json").read_text())["threads"] == 2
    # where the thread count changes results (which is why the run sets its own), the test can tell; on some
    # machines the kernels give the same bits with one or two threads and the comparison above cannot fail
    if (a / "evals.csv").read_bytes() == (two / "evals.csv").read_bytes():
        pytest.skip("one and two threads give identical results on this machine: the check could not fail")


def test_calibration_leaves_the_launchers_thread_count_alone():
    from edgeml.runtime.procs import calibrate

    ambient = torch.get_num_threads()
    job = prepare(load_config(overrides=["run.threads=2"]), base_step_s=0.0)[0]
    torch.set_num_threads(1)
    try:
        calibrate(job)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(ambient)


def test_too_many_procs_nodes_for_the_host_are_refused_before_anything_is_written(tmp_path):
    from edgeml.errors import UserError
    from edgeml.runtime.procs import host_cores

    workers = 2 * host_cores()  # 1 PS + 2c workers > 1 per core
    cfg = load_config(overrides=["run.algorithm='asp'", f"cluster.workers={workers}", "run.max_procs_per_core=1",
                                 f"run.out='{tmp_path / 'runs'}'"])
    with pytest.raises(UserError, match=f"needs {workers + 1} node processes, .*use --backend sim"):
        run(cfg)
    assert not (tmp_path / "runs").exists()


def test_eval_models_average_mean_and_worst_describe_the_nodes_models(tmp_path):
    args = ["run.algorithm='gosgd'", "run.backend='sim'", "cluster.workers=3", "stop.max_time=1",
            "eval.interval=0.25", "cluster.hetero='1:2:3'", f"run.out='{tmp_path}'"]
    rows = {how: pd.read_csv(run(load_config(overrides=[*args, f"run.name='{how}'", f"eval.models='{how}'"]))
                             / "evals.csv") for how in ("average", "mean", "worst")}
    assert len({len(r) for r in rows.values()}) == 1 and len(rows["mean"]) >= 4
    # the same runs (evaluation costs no virtual time), described three ways
    assert (rows["mean"]["total_bytes"] == rows["worst"]["total_bytes"]).all()
    assert (rows["worst"]["loss"] >= rows["mean"]["loss"]).all()
    assert (rows["worst"]["accuracy"] <= rows["mean"]["accuracy"]).all()
    assert (rows["worst"]["loss"] > rows["mean"]["loss"]).any()  # the nodes' models differ
    assert (rows["average"]["loss"] != rows["mean"]["loss"]).any()
    # beside the nodes' own models, the mean and worst runs record the average model's: the average run's columns
    assert "average_loss" not in rows["average"]
    for how in ("mean", "worst"):
        assert rows[how]["average_loss"].tolist() == rows["average"]["loss"].tolist()
        assert rows[how]["average_accuracy"].tolist() == rows["average"]["accuracy"].tolist()
    # one exposing node: all three are its model
    one = [*args[1:2], "cluster.workers=1", *args[3:5], *args[6:]]
    alone = [pd.read_csv(run(load_config(overrides=[*one, "run.algorithm='standalone'", f"run.name='1{how}'",
                                                    f"eval.models='{how}'"])) / "evals.csv")["loss"].tolist()
             for how in ("average", "worst")]
    assert alone[0] == alone[1]


@pytest.mark.parametrize("how", ["average", "mean", "worst"])
def test_per_class_accuracy_adds_up_to_the_accuracy_and_changes_nothing_else(tmp_path, how):
    import numpy as np

    from edgeml.runner import prepare

    args = ["run.algorithm='gosgd'", "run.backend='sim'", "cluster.workers=3", "stop.max_time=1",
            "eval.interval=0.25", "eval.test_samples=150", "data.partition='sorted'", f"eval.models='{how}'",
            f"run.out='{tmp_path}'"]
    plain = pd.read_csv(run(load_config(overrides=[*args, "run.name='plain'"])) / "evals.csv")
    cfg = load_config(overrides=[*args, "run.name='classes'", "eval.per_class=true"])
    rows = pd.read_csv(run(cfg) / "evals.csv")
    columns = [f"accuracy_c{k}" for k in range(10)]
    assert [c for c in rows.columns if c.startswith("accuracy_c")] == columns
    pd.testing.assert_frame_equal(rows.drop(columns=columns), plain)  # the run and its other columns are the same
    job, _ = prepare(cfg)
    y = job.dataset.y_test[job.test_index].numpy()
    share = np.bincount(y, minlength=10) / len(y)
    per = rows[columns].to_numpy()
    assert ((per >= 0) & (per <= 1)).all()
    if how == "average":  # one model: the class accuracies weighted by the classes' shares are the accuracy
        assert per @ share == pytest.approx(rows["accuracy"].to_numpy())
    elif how == "mean":  # the mean over models of each model's weighted sum
        assert per @ share == pytest.approx(rows["accuracy"].to_numpy())
    else:  # the worst model of each class: at most any one model, so the weighted sum is at most the accuracy
        assert (per @ share <= rows["accuracy"].to_numpy() + 1e-12).all()
    assert (per[1:] != per[1]).any()  # class accuracies move during training


def test_data_order_class_gives_every_worker_its_shard_class_by_class():
    from edgeml.runner import prepare

    job, _ = prepare(load_config(overrides=["run.backend='sim'", "cluster.workers=3", "data.partition='sorted'",
                                            "data.order='class'", "data.batch_size=50"]))
    for w in range(3):
        t = job.trainer(w)
        labels = torch.cat([t.next_batch()[1] for _ in range(len(job.shards[w]) // 50)])
        assert labels.tolist() == sorted(job.dataset.y_train[job.shards[w]].tolist())[:len(labels)]
        assert t.next_batch()[1].tolist() == labels[:50].tolist()  # the next epoch: the same order again


def test_series_tables_write_numpy_scalars_as_plain_numbers():
    import numpy as np

    from edgeml.rundir import csv_value as _csv_value

    assert _csv_value(np.float64(0.1)) == "0.1" and _csv_value(np.float32(0.5)) == "0.5"
    assert _csv_value(np.int64(3)) == 3 and _csv_value(np.True_) is True
    assert _csv_value(np.float64("nan")) == "" and _csv_value(float("inf")) == "inf"
