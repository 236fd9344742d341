"""The world keyed by rank (edgeml.world): devices, speeds, network, failures, waits, jitter and the
co-running load model, each checked by hand; and the config that describes them."""

from __future__ import annotations

import math
import pickle
import statistics

import pytest

from edgeml.config import load_config
from edgeml.errors import UserError
from edgeml.runtime.base import layout
from edgeml.world import build
from edgeml.world.build import access_links, node_links, parse_nodes
from edgeml.world.load import Load, fair_share
try:
    from tests import access_links as ref
except ImportError:  # tests/ itself on the path
    import access_links as ref

PS, W0, W1, W2, W3 = 1, 2, 3, 4, 5  # ranks of bsp with 4 workers: the PS first, then the workers


def env_of(*overrides: str, **kw):
    from edgeml.algorithms import get_algorithm

    cfg = load_config(overrides=["cluster.workers=4", *overrides])
    return build(cfg, layout(get_algorithm(cfg.run.algorithm).nodes(cfg)).roles, **kw), cfg


def test_default_star_reproduces_the_access_link_model_exactly():
    env, cfg = env_of("cluster.hetero='1:2:4:4'", "network.latency_s=0.01", "network.up_mbps=8",
                      "network.down_mbps=80", "network.commit_delay_s=0.003",
                      "network.links=[{worker=2, latency_s=0.05, up_mbps=2}]")
    links = access_links(cfg)
    worker = {PS: None, W0: 0, W1: 1, W2: 2, W3: 3}
    assert env.roles == {"ps": [PS], "worker": [W0, W1, W2, W3]}
    for src in worker:
        for dst in worker:
            if src == dst:
                continue
            for nbytes in (0, 1000, 123_457):
                got = env.message(src, dst, nbytes, t=3.0)
                assert (got.tx, got.flight) == ref.message_delay(links, worker[src], worker[dst], nbytes)
                assert got.hops == 2  # through the switch
    # the PS's link is ideal: a message from it to worker 0 costs worker 0's latency and downlink only
    assert env.message(PS, W0, 10_000, 0.0) == (0.0, 0.01 + 10_000 / 1e7, 2)


def test_links_by_node_set_give_any_node_its_link():
    """``network.links`` entries by node set: the PS's up link at 8 Mb/s carries its replies (1 MB/s on the
    wire), workers 0-1 get a slower downlink; entries by worker index still apply, and later entries win."""
    env, cfg = env_of("network.latency_s=0.01", "network.links=[{node='ps', up_mbps=8, latency_s=0.002},"
                      "{worker=3, down_mbps=40}, {node='worker:0-1', down_mbps=16}, {node='worker:1', latency_s=0.03}]")
    assert env.message(PS, W0, 10_000, 0.0) == pytest.approx((0.01, 0.002 + 0.01, 2))  # PS's uplink is the slower
    assert env.message(PS, W1, 10_000, 0.0) == pytest.approx((0.01, 0.002 + 0.03, 2))
    assert env.message(PS, W2, 10_000, 0.0) == pytest.approx((0.01, 0.002 + 0.01, 2))
    assert env.message(W0, PS, 10_000, 0.0) == pytest.approx((0.0, 0.01 + 0.002, 2))  # the PS's downlink: ideal
    tx, flight, _ = env.message(W2, W3, 10_000, 0.0)  # worker entries: worker 3's downlink at 5 MB/s
    assert (tx, flight) == pytest.approx((0.0, 0.02 + 10_000 / 5e6))
    assert node_links(cfg, env.roles)[W1].down_Bps == 2e6


@pytest.mark.parametrize("entry, words", [
    ("{node='server', up_mbps=8}", "names role 'server'"),
    ("{node='worker:7', up_mbps=8}", "outside the 4 worker node(s)"),
    ("{node='ps', up_mbps=-1}", "up_mbps = -1 must be a finite number >= 0"),
    ("{node='ps', worker=1}", "use the keys"),
])
def test_links_by_node_set_refuse_bad_entries(entry: str, words: str):
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        env_of(f"network.links=[{entry}]")


def test_all_reduce_on_the_star_with_equal_latencies_is_the_access_link_models():
    env, cfg = env_of("network.latency_s=0.004", "network.up_mbps=8", "network.down_mbps=16")
    reference = ref.all_reduce_time(access_links(cfg), [0, 1, 2], 3000)
    assert env.all_reduce_time([W0, W1, W2], 3000) == pytest.approx(reference)


def test_speed_factors_and_slowdowns_for_any_role():
    env, cfg = env_of("cluster.hetero='1:2:4:4'", "cluster.base_step_s=0.5",
                      "cluster.slowdowns=[{worker=1, start=1.0, end=2.0, factor=3.0},"
                      "{node='ps', start=1.0, end=2.0, factor=5.0}, {node='worker:0-1', start=0, factor=2}]")
    factors = ref.profile_factors(cfg.cluster.hetero, 4)
    assert [env.speed_factor(r, 0.0) for r in (PS, W0, W1, W2, W3)] == [1, 2, 4, 4, 4]
    assert env.speed_factor(PS, 1.5) == 5 and env.speed_factor(PS, 2.0) == 1
    assert env.speed_factor(W1, 1.5) == 2 * 3 * 2 == ref.step_factor(factors, cfg.cluster.slowdowns, 1, 1.5) * 2
    assert env.step_time(PS, 1.0) == 2.5 and env.step_time(W0, 0.0, work=0.25) == 0.25
    # without node entries a worker's factor is the profile's, bit for bit
    env, cfg = env_of("cluster.hetero='H=3.2'", "cluster.slowdowns=[{worker=3, start=0, end=9, factor=1.7}]")
    factors = ref.profile_factors(cfg.cluster.hetero, 4)
    for i, r in enumerate(env.roles["worker"]):
        assert env.step_time(r, 1.0) == env.base_step_s * ref.step_factor(factors, cfg.cluster.slowdowns, i, 1.0)


def test_node_sets():
    roles = {"ps": [1], "scheduler": [2], "worker": [3, 4, 5, 6]}
    assert parse_nodes(0, roles, "k") == [3]
    assert parse_nodes("1-2", roles, "k") == [4, 5]
    assert parse_nodes("ps, worker:3", roles, "k") == [1, 6]
    assert parse_nodes("worker", roles, "k") == [3, 4, 5, 6]
    assert parse_nodes("*", roles, "k") == [1, 2, 3, 4, 5, 6]
    assert parse_nodes("scheduler:0,0", roles, "k") == [2, 3]
    for bad, why in [("4", "outside the 4 worker"), ("server", "role 'server'"), ("2-1", "outside"),
                     ("worker:a", "not an index"), (1.5, "not a node set"), (True, "not a node set"), ("", "role ''")]:
        with pytest.raises(UserError, match=why) as exc:
            parse_nodes(bad, roles, "load.schedule")
        assert str(exc.value).startswith("load.schedule = ") and "roles here: ps, scheduler, worker" in str(exc.value)


def test_devices_per_node():
    env, _ = env_of("run.device='cuda'", "cluster.devices={cpu='0-1'}")
    assert [env.device(r) for r in (PS, W0, W1, W2, W3)] == ["cuda", "cpu", "cpu", "cuda", "cuda"]
    env, _ = env_of("cluster.workers=6", "cluster.devices={cuda='0-3', cpu='4-5,ps'}")  # ESync's 4 GPUs, 2 CPUs
    assert [env.device(r) for r in env.ranks] == ["cpu"] + ["cuda"] * 4 + ["cpu"] * 2
    env, _ = env_of()
    assert set(env.devices.values()) == {"cpu"}
    for bad, why in [("{cpu='0-1', cuda='1'}", "worker 1 on both cpu and cuda"),
                     ("{tpu='0'}", "unknown device kind 'tpu'"), ("{cpu='7'}", "outside the 4 worker"),
                     ("'cpu'", "is not a table")]:
        with pytest.raises(UserError, match=why):
            env_of(f"cluster.devices={bad}")


def test_failures_are_seeded_and_drop_messages_between_neighbours():
    common = ["cluster.workers=29", "network.topology='random'", "network.degree=3", "network.failed_links=0.1",
              "network.failed_from_s=5", "network.failed_for_s=10"]
    env, _ = env_of(*common)
    again, _ = env_of(*common)
    others = [env_of(*common, f"run.seed={s}")[0].topology.failed(6.0) for s in (1, 2, 3)]
    failed = env.topology.failed(6.0)
    assert len(failed) == round(0.1 * len(env.topology.edges())) == 4
    assert failed == again.topology.failed(6.0) and any(f != failed for f in others)
    assert env.topology.failed(4.9) == env.topology.failed(15.0) == frozenset()
    u, v = sorted(failed)[0]
    assert env.message(u, v, 100, 4.0) is not None and env.message(u, v, 100, 15.0) is not None
    assert env.message(u, v, 100, 5.0) is None  # neighbours whose link is down: lost
    assert v in env.neighbours(u) and v not in env.neighbours(u, 6.0) and v in env.neighbours(u, 16.0)
    # a star's access links are bridges: failing them needs failed_may_disconnect
    with pytest.raises(UserError, match="network.failed_links: only 0 of 5 links can fail"):
        env_of("network.failed_links=0.4")
    env, _ = env_of("network.failed_links=0.4", "network.failed_may_disconnect=true")
    lost = [r for r in env.ranks if env.message(r, PS if r != PS else W0, 10, 0.0) is None]
    assert len(lost) >= 1 and len(env.topology.failed(0.0)) == 2


def test_transient_failures_miss_messages_to_neighbours_one_at_a_time_from_the_senders_stream():
    common = ["cluster.workers=29", "network.topology='random'", "network.degree=3", "network.failed_links=0.05",
              "network.failures='transient'", "network.failed_from_s=5", "network.failed_for_s=10"]
    env, _ = env_of(*common)
    assert env.topology.failed(6.0) == frozenset()  # no link is down: messages miss one by one
    u, v = env.topology.edges()[0]
    stream, again = env.rng(u, "miss"), env.rng(u, "miss")
    fates = [env.message(u, v, 100, 6.0, miss=stream) is None for _ in range(20_000)]
    assert fates[:200] == [env.message(u, v, 100, 6.0, miss=again) is None for _ in range(200)]
    assert statistics.fmean(fates) == pytest.approx(0.05, abs=0.006)
    back = env.rng(v, "miss")  # the other direction misses on its own draws
    assert [env.message(v, u, 100, 6.0, miss=back) is None for _ in range(200)] != fates[:200]
    quiet = env.rng(u, "miss")  # outside [failed_from_s, + failed_for_s), and for routed traffic: no miss
    assert all(env.message(u, v, 100, t, miss=quiet) is not None for t in (0.0, 4.9, 15.0) for _ in range(300))
    assert all(env.message(u, v, 100, 6.0, detour=True, miss=quiet) is not None for _ in range(300))
    assert quiet.random() == env.rng(u, "miss").random()  # and nothing was drawn for them
    with pytest.raises(ValueError, match="miss"):
        env.message(u, v, 100, 6.0)
    assert env_of(*common[:-3], "network.failures='permanent'")[0].topology.failed(0.0)  # the other model
    # silent misses: the same draws miss, but the message is sent (costed as any other) and marked missed
    silent, _ = env_of(*common[:4], "network.failures='silent'", *common[5:])
    stream = silent.rng(u, "miss")
    sent = [silent.message(u, v, 100, 6.0, miss=stream) for _ in range(200)]
    assert [type(d).__name__ == "Missed" for d in sent] == fates[:200] and len(set(sent)) == 1


def test_model_binary_reaches_the_model_builder():
    from edgeml.runner import prepare

    for name in ("'mlp'", "''"):  # a data set's default model is never a linear one
        with pytest.raises(UserError, match="model.binary = true is for a linear model"):
            prepare(load_config(overrides=[f"model.name={name}", "model.binary=true"]))[0]
    job = prepare(load_config(overrides=["data.dataset='credit-full-rank'", "model.name='l2svm'",
                                         "model.binary=true"]))[0]
    assert job.init_params.numel() == 25 and sum(p.numel() for p in job.make_model().parameters()) == 25  # SNAP's SVM


def test_graph_topologies_and_neighbours():
    env, _ = env_of()
    assert env.neighbours(W1) == [PS, W0, W2, W3]  # the star's switch links everyone
    env, _ = env_of("network.topology='ring'", "network.link_latency_s=0.01", "network.link_mbps=8")
    assert env.neighbours(PS) == [W0, W3] and env.neighbours(W1) == [W0, W2]
    d = env.message(PS, W1, 1000, 0.0)  # two hops round the ring: two latencies, 1000 B at 1 MB/s
    assert d.hops == 2 and d.tx == pytest.approx(0.001) and d.tx + d.flight == pytest.approx(0.021)
    env, _ = env_of("network.topology='edges'", "network.edges=[['ps', 0], [0, 1], [1, 2], [2, 3], "
                    "{u=3, v='ps', latency_s=0.5}]")
    assert env.neighbours(PS) == [W0, W3] and env.message(W3, PS, 0, 0.0) == (0.0, 0.5, 1)
    env, _ = env_of("network.topology='complete'", "network.commit_delay_s=0.2")
    assert env.message(W0, W1, 0, 0.0).flight == 0.2 and env.message(PS, W1, 0, 0.0).flight == 0.0


def test_random_waits_are_seeded_with_the_configured_mean():
    env, _ = env_of("cluster.random_wait_s=0.2")
    a, b = env.rng(W0, "wait"), env.rng(W0, "wait")
    draws = [env.random_wait(a) for _ in range(20_000)]
    assert draws[:50] == [env.random_wait(b) for _ in range(50)]
    assert draws[:50] != [env.random_wait(env.rng(W1, "wait")) for _ in range(50)]
    assert statistics.fmean(draws) == pytest.approx(0.2, rel=0.03) and min(draws) >= 0
    assert statistics.stdev(draws) == pytest.approx(0.2, rel=0.05)  # exponential: sd = mean
    env, _ = env_of("cluster.random_wait_s=0.2", "cluster.random_wait='uniform'")
    stream = env.rng(W0, "wait")
    draws = [env.random_wait(stream) for _ in range(20_000)]
    assert statistics.fmean(draws) == pytest.approx(0.2, rel=0.03) and 0 <= min(draws) and max(draws) <= 0.4
    assert env_of()[0].random_wait(env.rng(W0, "wait")) == 0.0


def test_jitter_is_seeded_per_sender_and_bounded():
    env, _ = env_of("network.latency_s=0.01", "network.jitter_s=0.05")
    base = 0.01  # worker 0's access latency (the PS's link is ideal)
    first = env.message(W0, PS, 100, 0.0, env.rng(W0, "jitter")).flight
    stream = env.rng(W0, "jitter")
    flights = [env.message(W0, PS, 100, 0.0, stream).flight for _ in range(2000)]
    assert flights[0] == first and all(base <= f <= base + 0.05 for f in flights)
    assert statistics.fmean(flights) == pytest.approx(base + 0.025, rel=0.05)
    with pytest.raises(ValueError, match="jitter"):
        env.message(W0, PS, 100, 0.0)


def test_fair_share_by_hand():
    assert fair_share(1.0, [1.0, 0.25]) == 0.75
    assert fair_share(1.0, [1.0, 1.0]) == 0.5
    assert fair_share(1.0, [1.0, 0.2, 1.0, 1.0]) == pytest.approx(0.8 / 3)
    assert fair_share(2.0, [1.0, 1.0]) == math.inf


@pytest.mark.parametrize("schedule, cores, threads, slowdown", [
    ("{node=0, kind='cpu', intensity=0.25}", 1, 1, 4 / 3),  # 1 / (1 - u)
    ("{node=0, kind='cpu', intensity=0.5}", 1, 1, 2.0),
    ("{node=0, kind='cpu', intensity=0.8}", 1, 1, 2.0),  # past half a core the two split it
    ("{node=0, kind='cpu', intensity=1}, {node=0, kind='cpu', intensity=1}", 1, 1, 3.0),
    ("{node=0, kind='cpu', intensity=1}", 2, 1, 1.0),  # a second core for the workload
    ("{node=0, kind='cpu', intensity=1}", 1, 2, 1.5),  # two threads on one core: 1/2 each alone, 1/3 beside
    ("{node=0, kind='io', intensity=1}", 1, 1, 1.0),  # disk and network do not slow a step
    ("{node=1, kind='cpu', intensity=1}", 1, 1, 1.0),  # another node's workload
    ("{node=0, kind='cpu', intensity=1, start=20}", 1, 1, 1.0),  # not yet
])
def test_sim_cpu_load_model(schedule, cores, threads, slowdown):
    env, _ = env_of("cluster.base_step_s=0.1", f"load.schedule=[{schedule}]", f"load.cores={cores}",
                    f"run.threads={threads}")
    assert env.cpu_slowdown(W0, 10.0) == pytest.approx(slowdown)
    assert env.step_time(W0, 10.0) == pytest.approx(0.1 * slowdown)


def test_sim_load_observation_and_windows():
    env, _ = env_of("load.schedule=[{node='0-1', kind='cpu', intensity=0.25, start=0, end=10},"
                    "{node=0, kind='cpu', intensity=0.8, start=5, end=10}, {node='ps', kind='io', intensity=0.5},"
                    "{node=1, kind='disk', intensity=0.7, start=2}]")
    assert env.load(W0, 1.0) == Load(0.25, 0.0, 0.0)
    assert env.load(W0, 6.0) == Load(1.0, 0.0, 0.0)  # 0.25 + 0.8 on one core: 0.25 and 0.75
    assert env.load(W0, 10.0) == Load(0.0, 0.0, 0.0)
    assert env.load(W0, 12.0, since=4.0) == pytest.approx(Load((1 * 0.25 + 5 * 1.0) / 8, 0.0, 0.0))
    assert env.load(W0, 6.0, since=6.0) == env.load(W0, 6.0)
    assert env.load(PS, 0.0) == Load(0.0, 0.5, 0.5) and env.load(W1, 3.0) == Load(0.25, 0.0, 0.7)
    assert env.cpu_slowdown(W0, 6.0) == pytest.approx(1 / (1 - 0.25 - 0.375))  # L: 0.25 + 2L = 1 -> 0.375


def test_sim_net_load_shares_the_nodes_links():
    env, _ = env_of("network.up_mbps=8", "network.down_mbps=8", "network.latency_s=0.01",
                    "load.schedule=[{node=0, kind='net', intensity=0.25, end=10}, {node=1, kind='io', intensity=1}]")
    assert env.message(W0, PS, 1000, 0.0) == pytest.approx((0.001 / 0.75, 0.01, 2))
    assert env.message(W0, PS, 1000, 10.0) == pytest.approx((0.001, 0.01, 2))
    # the slower share at either end sets the rate; the sender's queue keeps its own link's share
    tx, flight, _ = env.message(W0, W1, 1000, 0.0)
    assert tx == pytest.approx(0.001 / 0.75) and tx + flight == pytest.approx(0.02 + 0.001 / 0.5)
    assert env.message(W2, W3, 1000, 0.0) == pytest.approx((0.001, 0.02, 2))
    assert env.message(W0, W0, 1000, 0.0) == (0.0, 0.0, 0)  # to itself: no link
    assert env.message(PS, W3, 1000, 0.0) == env_of("network.up_mbps=8", "network.down_mbps=8",
                                                   "network.latency_s=0.01")[0].message(PS, W3, 1000, 0.0)


def test_env_pickles_for_worker_processes():
    env, _ = env_of("network.topology='random'", "network.degree=2.5", "network.failed_links=0.2",
                    "load.schedule=[{node='*', kind='cpu', intensity=0.5}]")
    again = pickle.loads(pickle.dumps(env))
    assert again.topology.failed(1.0) == env.topology.failed(1.0)
    assert [again.step_time(r, 1.0) for r in env.ranks] == [env.step_time(r, 1.0) for r in env.ranks]


@pytest.mark.parametrize("override, key", [
    ("cluster.random_wait_s=nan", "cluster.random_wait_s"),
    ("cluster.random_wait_s=-1", "cluster.random_wait_s"),
    ("cluster.random_wait='normal'", "cluster.random_wait"),
    ("cluster.throttle_mode='relative'", "cluster.throttle_mode"),
    ("network.jitter_s=inf", "network.jitter_s"),
    ("network.failed_links=1.5", "network.failed_links"),
    ("network.failed_links=nan", "network.failed_links"),
    ("network.failed_from_s=-2", "network.failed_from_s"),
    ("network.failed_for_s=inf", "network.failed_for_s"),
    ("network.degree=0", "network.degree"),
    ("network.link_mbps=-1", "network.link_mbps"),
    ("network.topology='mesh'", "network.topology"),
    ("load.cores=0", "load.cores"),
    ("load.net_MBps=nan", "load.net_MBps"),
    ("load.disk_MBps=0", "load.disk_MBps"),
    ("model.width=inf", "model.width"),
    ("model.width=-0.5", "model.width"),
    ("load.schedule=[{node=0, kind='cpu', intensity=1.5}]", "load.schedule"),
    ("load.schedule=[{node=0, kind='cpu', intensity=nan}]", "load.schedule"),
    ("load.schedule=[{node=0, kind='gpu', intensity=0.5}]", "load.schedule"),
    ("load.schedule=[{node=0, kind='cpu', intensity=0.5, start=5, end=2}]", "load.schedule"),
    ("load.schedule=[{node=0, kind='cpu', intensity=0.5, start=inf}]", "load.schedule"),
    ("load.schedule=[{node=0, kind='cpu', intensity=0.5, end=inf}]", "load.schedule"),
    ("cluster.slowdowns=[{node='ps', start=0, end=inf, factor=2}]", "cluster.slowdowns"),
    ("load.schedule=[{node=0, kind='cpu'}]", "load.schedule"),
    ("load.schedule=[{node='gpu:0', kind='cpu', intensity=0.5}]", "load.schedule"),
    ("load.schedule=[3]", "load.schedule"),
    ("cluster.slowdowns=[{node='ps', start=0, end=1, factor=nan}]", "cluster.slowdowns"),
    ("cluster.slowdowns=[{node='ps', start=0, end=1, factor=0}]", "cluster.slowdowns"),
    ("cluster.slowdowns=[{node='ps', end=3, factor=2}]", "cluster.slowdowns"),
    ("network.edges=[[0, 1]]", "network.edges"),  # star
    ("network.link_latency_s=0.1", "network.link_latency_s"),  # star
])
def test_bad_environment_settings_are_refused_in_one_line(override, key):
    with pytest.raises(UserError) as exc:
        load_config(overrides=["cluster.workers=4", override])
    assert key in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("overrides, key", [
    (["network.topology='ring'", "network.latency_s=0.1"], "network.latency_s"),
    (["network.topology='ring'", "network.links=[{worker=0, up_mbps=1}]"], "network.links"),
    (["network.topology='edges'", "network.edges=[[0, 0]]"], "network.edges"),
    (["network.topology='edges'", "network.edges=[[0, 1]]"], "network.edges"),  # nodes cut off
    (["network.topology='edges'", "network.edges=[['worker', 1]]"], "network.edges"),
    (["network.topology='random'", "network.degree=4.5"], "network.degree"),  # 5 nodes: at most 4
    (["network.failures='transient'", "network.failed_may_disconnect=true"], "network.failed_may_disconnect"),
    (["network.failures='sometimes'"], "network.failures"),
])
def test_bad_topologies_are_refused_in_one_line(overrides, key):
    with pytest.raises(UserError) as exc:
        load_config(overrides=["cluster.workers=4", *overrides])
    assert key in str(exc.value) and "\n" not in str(exc.value)


def test_environment_config_round_trips_through_toml(tmp_path):
    import tomli_w

    cfg = load_config(overrides=["cluster.devices={cpu='0-1', cuda='ps'}", "network.topology='random'",
                                 "network.degree=2.5", "load.schedule=[{node='*', kind='io', intensity=0.3}]",
                                 "cluster.throttle_mode='scale'", "data.partition='sorted'", "model.width=0.5"])
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps(cfg.to_dict()))
    assert load_config(path).to_dict() == cfg.to_dict()


def test_model_width_reaches_the_model_builder():
    from edgeml.runner import prepare

    with pytest.raises(UserError, match="width multiplier 0.5 for model 'mlp'"):
        prepare(load_config(overrides=["model.name='mlp'", "model.width=0.5"]))[0]


def test_a_repeated_load_schedule_loads_every_worker_as_its_residue_and_equals_the_written_one_at_its_size():
    """``load.repeat = N``: worker i runs what the schedule gives worker i mod N. At N workers it is the
    schedule as written; at more, every worker is loaded; it refuses N above the workers and non-workers."""
    schedule = ("load.schedule=[{node=0, kind='cpu', intensity=0.5, start=0, end=10},"
                "{node='1', kind='disk', intensity=0.3}]")
    written, _ = env_of(schedule)
    env, _ = env_of(schedule, "load.repeat=2")
    for t in (1.0, 12.0):
        assert [env.load(r, t) for r in (W0, W1, W2, W3)] == \
            [written.load(W0, t), written.load(W1, t), written.load(W0, t), written.load(W1, t)]
    assert env.load(W2, 1.0) == Load(0.5, 0.0, 0.0) and env.load(W3, 1.0) == Load(0.0, 0.0, 0.3)
    same, _ = env_of(schedule, "load.repeat=4")
    assert [same.load(r, 1.0) for r in (PS, W0, W1, W2, W3)] == [written.load(r, 1.0) for r in (PS, W0, W1, W2, W3)]
    with pytest.raises(UserError, match=r"load.repeat = 5 .* this run has 4"):
        env_of(schedule, "load.repeat=5")
    with pytest.raises(UserError, match="workers only"):
        env_of("load.schedule=[{node='ps', kind='cpu', intensity=0.5}]", "load.repeat=2")
    with pytest.raises(UserError, match="workers only"):
        env_of("load.schedule=[{node=3, kind='cpu', intensity=0.5}]", "load.repeat=2")


def test_a_time_scale_replays_the_schedule_over_a_shorter_run():
    """``load.time_scale = s``: every entry's start and end times s; an open end stays open."""
    schedule = ("load.schedule=[{node=0, kind='cpu', intensity=0.5, start=100, end=200},"
                "{node='1', kind='disk', intensity=0.3, start=300}]")
    written, _ = env_of(schedule)
    scaled, _ = env_of(schedule, "load.time_scale=0.01")
    for t in (50.0, 150.0, 250.0, 350.0, 1e6):
        assert [scaled.load(r, t / 100) for r in (W0, W1)] == [written.load(r, t) for r in (W0, W1)]
    assert scaled.load(W0, 1.5) == Load(0.5, 0.0, 0.0) and scaled.load(W1, 2.9) == Load(0.0, 0.0, 0.0)
    with pytest.raises(UserError, match="time_scale"):
        env_of(schedule, "load.time_scale=0")
