"""Heterogeneity profiles, the link model and config parsing: pure functions checked by hand."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from edgeml.config import load_config, parse_overrides, parse_set_value, read_toml
from edgeml.schema import COMMON_SECTIONS, Config, range_of
from edgeml.errors import UserError
from edgeml.world.build import access_links
from edgeml.world.profiles import heterogeneity_degree, speeds
from edgeml.world.topology import Link
try:
    from tests import access_links as ref
except ImportError:  # tests/ itself on the path
    import access_links as ref


def test_named_profiles():
    assert speeds("homogeneous", 3) == [1.0, 1.0, 1.0]
    assert speeds("1:1:3", 3) == pytest.approx([1.0, 1.0, 1 / 3])
    assert speeds("1*2:3", 3) == speeds("1:1:3", 3) and speeds("2*3", 3) == pytest.approx([0.5] * 3)
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


@pytest.mark.parametrize("bad, message", [
    ("1:2", "gives 2 step-time ratios but there are 3 workers"), ("0:1:1", "step-time ratio 0:"),
    ("1:0:1", "step-time ratio 0:"), ("1:inf:1", "step-time ratio inf:"), ("1:nan:1", "step-time ratio nan:"),
    ("1:-2:1", "step-time ratio -2:"), ("H=0.5", "H must be"), ("H=inf", "H must be"), ("H=nan", "H must be"),
    ("H=1.2.3", "H must be"), ("x", "unknown heterogeneity profile"), ("1:a:2", "ratios must be numbers"),
    ("1*2:3*2", "gives 4 step-time ratios but there are 3 workers"), ("1*0:1*3", "a count after '*'"),
    ("1*-1:1*4", "a count after '*'"), ("1*1.5:2", "ratios must be numbers"), ("1*:2*2", "ratios must be numbers"),
    ("inf*3", "step-time ratio inf"), ("1*99999999999", "gives 99999999999 step-time ratios"),
])
def test_bad_profiles(bad, message):
    with pytest.raises(UserError) as err:
        speeds(bad, 3)
    assert message in str(err.value)


def test_every_number_declares_its_range_beside_its_field():
    """The walk refuses nan and inf everywhere; every number of every common section and of every shipped
    algorithm's config declares its range with its field (``schema.ranged``), so one function checks them all."""
    from edgeml.algorithms import BUILTIN, REGISTRY

    classes = [*COMMON_SECTIONS.items(), *((name, REGISTRY[name].config) for name in BUILTIN)]
    for section, cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if hints[f.name] in (int, float, list[int], list[float]):
                assert range_of(cls, f.name) is not None, f"{section}.{f.name} has no range"


@pytest.mark.parametrize("override, message", [
    ("stop.max_time=nan", "stop.max_time = nan is not a finite number: use a number >= 0 (0 means no time limit)"),
    ("stop.max_time=inf", "stop.max_time = inf is not a finite number"),
    ("run.seed=-1", "run.seed = -1 is out of range: use a whole number in [0, 4294967295]"),
    ("data.alpha=0.0", "data.alpha = 0.0 is out of range: use a number > 0"),
    ("stop.target_accuracy=2", "stop.target_accuracy = 2.0 is out of range: use a number in [0, 1]"),
    ("ssp.staleness=-1", "ssp.staleness = -1"),
    ("ssp.lr=nan", "ssp.lr = nan is not a finite number: use a number > 0"),
    ("cluster.crashes=[{worker=0, time=nan}]", "cluster.crashes[0].time = nan is not a finite number"),
    ("network.links=[{worker=0, latency_s='x'}]", "latency_s = 'x' must be a finite number >= 0"),
    ("network.links=[{worker=true}]", "worker must be an index"),
    ("run.name='a/b'", "run.name = 'a/b' is not a single directory name"),
])
def test_config_refusals_name_key_value_and_range(override, message):
    with pytest.raises(UserError) as err:
        load_config(overrides=["run.algorithm='ssp'", override])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_out_must_be_a_writable_directory_path(tmp_path):
    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(UserError, match="is a file"):
        load_config(overrides=[f"run.out='{f}'"])
    with pytest.raises(UserError, match="lies under the file"):
        load_config(overrides=[f"run.out='{f}/deeper/runs'"])
    with pytest.raises(UserError, match="not writable"):
        load_config(overrides=["run.out='/proc/edgeml-runs'"])
    assert load_config(overrides=[f"run.out='{tmp_path}/new/runs'"]).run.out.endswith("new/runs")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # checking created nothing


def test_config_path_must_be_a_file(tmp_path):
    with pytest.raises(UserError, match="is a directory"):
        read_toml(tmp_path)
    with pytest.raises(UserError, match="does not exist"):
        read_toml(tmp_path / "none.toml")


def test_cluster_factors_and_links():
    cfg = load_config(overrides=["cluster.workers=3", "cluster.hetero='1:2:4'", "network.latency_s=0.01",
                                 "network.up_mbps=8", "network.links=[{worker=2, latency_s=0.1, down_mbps=80}]",
                                 "cluster.slowdowns=[{worker=0, start=1.0, end=2.0, factor=5.0}]"])
    c = access_links(cfg)
    factors, slow = ref.profile_factors(cfg.cluster.hetero, 3), cfg.cluster.slowdowns
    assert factors == pytest.approx([1, 2, 4])
    assert [ref.step_factor(factors, slow, 0, t) for t in (0.5, 1.5, 2.0)] == [1, 5, 1]
    assert c[2] == Link(0.1, 1e6, 1e7, 0.0)
    # worker 0 -> PS (ideal link): 1000 bytes at 1 MB/s = 1 ms on the wire, then 10 ms latency
    assert ref.message_delay(c, 0, None, 1000) == pytest.approx((0.001, 0.01))
    # worker 0 -> worker 2: min(up 1 MB/s, down 10 MB/s); latencies add
    assert ref.message_delay(c, 0, 2, 1000) == pytest.approx((0.001, 0.11))
    assert ref.all_reduce_time(c, [0, 1], 1000) == pytest.approx(2 * (0.02 + 500 / 1e6))


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
    c = access_links(cfg)
    tx, flight = ref.message_delay(c, None, 0, 125_000)
    assert tx == 0 and flight == pytest.approx(0.1)
    tx, flight = ref.message_delay(c, 0, None, 125_000)  # upload: unlimited here
    assert tx == 0 and flight == 0


def test_every_unknown_key_is_reported_at_once_with_a_suggestion(tmp_path):
    path = tmp_path / "typos.toml"
    path.write_text('[stop]\nmax_tme = 3\n[run]\nbackned = "sim"\n[netwrok]\nlatency_s = 1\n[ssp]\nstalenes = 2\n')
    with pytest.raises(UserError) as exc:
        load_config(path, overrides=["run.algorithm='ssp'", "stop.zzz=1"])
    text = str(exc.value)
    assert "\n" not in text
    for part in ("'stop.max_tme' (did you mean 'max_time'?)", "'run.backned' (did you mean 'backend'?)",
                 "section [netwrok] (did you mean 'network'?)", "'ssp.stalenes' (did you mean 'staleness'?)",
                 "'stop.zzz'"):
        assert part in text, part
