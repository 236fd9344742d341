"""Heterogeneity profiles, the link model and config parsing: pure functions checked by hand."""

from __future__ import annotations

import math

import pytest

from edgeml.config import Config, load_config, parse_overrides, parse_set_value
from edgeml.errors import UserError
from edgeml.hetero import Link, build_cluster, heterogeneity_degree, speeds


def test_named_profiles():
    assert speeds("homogeneous", 3) == [1.0, 1.0, 1.0]
    assert speeds("1:1:3", 3) == pytest.approx([1.0, 1.0, 1 / 3])
    for h in (1.0, 2.0, 3.2):
        assert heterogeneity_degree(speeds(f"H={h}", 18)) == pytest.approx(h)
    ec2 = speeds("ec2", 18)
    assert [ec2.count(v) for v in (1.0, 1.8, 3.2, 2.0)] == [7, 5, 4, 2]
    ec2_36 = speeds("ec2", 36)
    assert [ec2_36.count(v) for v in (1.0, 1.8, 3.2, 2.0)] == [14, 10, 8, 4]
    three = speeds("adacomp-3class", 10)
    assert [three.count(v) for v in (1.0, 0.1, 0.01)] == [3, 4, 3]
    mix = speeds("cpu-gpu", 6)
    assert max(mix) / min(mix) == pytest.approx(117)
    assert sum(v < 0.1 for v in mix) == 2  # two CPUs among six devices, as in esync.txt


@pytest.mark.parametrize("bad", ["1:2", "0:1:1", "H=0.5", "x", "1:a:2"])
def test_bad_profiles(bad):
    with pytest.raises(UserError):
        speeds(bad, 3)


def test_cluster_factors_and_links():
    cfg = load_config(overrides=["cluster.workers=3", "cluster.hetero='1:2:4'", "network.latency_s=0.01",
                                 "network.up_mbps=8", "network.links=[{worker=2, latency_s=0.1, down_mbps=80}]",
                                 "cluster.slowdowns=[{worker=0, start=1.0, end=2.0, factor=5.0}]"])
    c = build_cluster(cfg)
    assert c.factors == pytest.approx([1, 2, 4])
    assert c.step_factor(0, 0.5) == 1 and c.step_factor(0, 1.5) == 5 and c.step_factor(0, 2.0) == 1
    assert c.links[2] == Link(0.1, 1e6, 1e7, 0.0)
    # worker 0 -> PS (ideal link): 1000 bytes at 1 MB/s = 1 ms on the wire, then 10 ms latency
    assert c.message_delay(0, None, 1000) == pytest.approx((0.001, 0.01))
    # worker 0 -> worker 2: min(up 1 MB/s, down 10 MB/s); latencies add
    assert c.message_delay(0, 2, 1000) == pytest.approx((0.001, 0.11))
    assert c.all_reduce_time([0, 1], 1000) == pytest.approx(2 * (0.02 + 500 / 1e6))


def test_set_values_are_toml_literals():
    assert parse_set_value("3") == 3 and parse_set_value("0.5") == 0.5 and parse_set_value("true") is True
    assert parse_set_value("'H=2'") == "H=2" and parse_set_value("H=2") == "H=2"
    assert parse_set_value("[{worker=1, time=2.0}]") == [{"worker": 1, "time": 2.0}]
    assert parse_overrides(["a.b=1", "a.c=x"]) == {"a": {"b": 1, "c": "x"}}


def test_config_round_trips_through_toml(tmp_path):
    import tomli_w

    cfg = load_config(overrides=["run.algorithm='ssp'", "ssp.staleness=5", "cluster.hetero='ec2'",
                                 "cluster.workers=18"])
    path = tmp_path / "c.toml"
    path.write_text(tomli_w.dumps(cfg.to_dict()))
    again = load_config(path)
    assert again.to_dict() == cfg.to_dict() and isinstance(again, Config)
    assert again.algo.staleness == 5


def test_type_errors_name_the_key():
    with pytest.raises(UserError, match="cluster.workers = 'many' is not a whole number"):
        load_config(overrides=["cluster.workers='many'"])
    with pytest.raises(UserError, match="run.backend = 'x' is not allowed"):
        load_config(overrides=["run.backend='x'"])


def test_a_fast_sender_is_not_serialized_by_slow_receivers():
    # a PS (ideal link) replying to many workers with 10 Mb/s downlinks: no queue at the PS,
    # each reply takes bytes / 10 Mb/s on its own way
    cfg = load_config(overrides=["cluster.workers=4", "network.down_mbps=10"])
    c = build_cluster(cfg)
    tx, flight = c.message_delay(None, 0, 125_000)
    assert tx == 0 and flight == pytest.approx(0.1)
    tx, flight = c.message_delay(0, None, 125_000)  # upload: unlimited here
    assert tx == 0 and flight == 0
