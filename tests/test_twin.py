"""Twin runs (``edgeml twin``, ``edgeml.analysis.twin``): one configuration on procs and on sim, the simulator's
error per quantity, and a check that fails when the simulator drops a timing term."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from edgeml.analysis import twin
from edgeml.analysis.convergence import Target
from edgeml.config import load_config
from edgeml.rundir import load_run
from edgeml.runner import run, run_twins

SETTINGS = ["data.dataset='digits'", "data.batch_size=16", "cluster.workers=2", "cluster.hetero='1:2'",
            "eval.interval=0.25", "eval.test_samples=0"]


def _sim(tmp_path, name: str, *extra: str):
    cfg = load_config(overrides=[*SETTINGS, "run.algorithm='asp'", "run.backend='sim'", "stop.max_time=3",
                                 "cluster.base_step_s=0.02", *extra, f"run.out='{tmp_path}'", f"run.name='{name}'"])
    return load_run(run(cfg))


def test_identical_twins_show_no_error_and_a_slower_model_shows_its_own(tmp_path):
    """Two sim runs as the twins (the table reads run directories, whatever wrote them): the same configuration
    has no error in any quantity; a step twice as long on the 'sim' side is about +100% in time to the target (to
    an evaluation interval) and -50% in samples per second, both beyond the 10% bound; the staleness rows come
    from the asynchronous runs."""
    a, b = _sim(tmp_path, "a"), _sim(tmp_path, "b")
    target = [Target("accuracy", 0.8)]
    same = twin.twin_table(a, b, target)
    assert same["error"].fillna(0).abs().max() == 0 and twin.breaches(same).empty
    assert {"staleness, mean", "staleness, largest", "bytes", "messages"} <= set(same["quantity"])
    assert same["quantity"].str.startswith("time to accuracy>=0.8").sum() == 2  # both arrival rules

    slow = twin.twin_table(a, _sim(tmp_path, "c", "cluster.base_step_s=0.04"), target)
    rate = slow.set_index("quantity").loc["samples per second"]
    assert rate["error"] == pytest.approx(-0.5, abs=0.02) and rate["within"] is False  # noqa: E712
    times = slow[slow["quantity"].str.startswith("time to")]
    assert (times["error"] > 0.5).all() and set(twin.breaches(slow)["quantity"]) >= set(times["quantity"])
    shares = slow[slow["unit"] == "share"]
    nodes = len(pd.read_csv(a.path / "nodes.csv"))  # the workers and the server
    assert len(shares) == 4 * nodes and shares["bound"].isna().all()  # four shares a node, reported unbounded
    other = slow[slow["quantity"].str.endswith("other share")]
    assert (other["procs"].abs() < 1e-9).all() and (other["sim"].abs() < 1e-9).all()  # sim: every second counted


def test_a_side_that_never_reaches_the_target_leaves_the_error_open_and_the_report_says_so(tmp_path):
    a = _sim(tmp_path, "a")
    table = twin.twin_table(a, a, [Target("accuracy", 0.999)])
    times = table[table["quantity"].str.startswith("time to")]
    assert times["error"].isna().all() and times["within"].isna().all()
    assert times["quantity"].str.contains("procs never reached it, sim never reached it").all()
    assert list(twin.unmeasured(table)["quantity"]) == list(times["quantity"])
    report = twin.markdown(table, a, a)
    assert "**2 not measured**" in report and "Every bounded quantity is within it" not in report
    contention = table[table["quantity"].str.startswith("procs contention")]
    assert contention["error"].isna().all()


def test_a_rate_procs_never_measured_is_beyond_the_bound():
    row = twin._row("samples per second", 0.0, 5.0, "/s", twin.BOUND)
    assert row["error"] == float("inf") and row["within"] is False
    assert twin._row("samples per second", 0.0, 0.0, "/s", twin.BOUND)["within"] is True


@pytest.mark.slow
def test_the_twin_check_fails_when_the_simulator_drops_a_message_cost(tmp_path, monkeypatch):
    """Real processes against the virtual clock on a costed network (10 Mb/s: each push and pull of the model
    takes longer than a step): the intact simulator's rates are compared, then the same sim run with every
    message's cost removed (``World.message`` delivers at once) reports samples per second far beyond the bound.
    The processes can only be slower than their model on a busy host, which widens that error, never hides it."""
    from edgeml.world import model

    layers = {"run": {"algorithm": "bsp", "seed": 0, "out": str(tmp_path)},
              "data": {"dataset": "digits", "batch_size": 16}, "model": {"name": "mlp"},
              "cluster": {"workers": 2, "base_step_s": 0.02}, "stop": {"max_time": 4},
              "network": {"latency_s": 0.005, "up_mbps": 10.0, "down_mbps": 10.0},
              "eval": {"interval": 0.5, "test_samples": 0}}
    procs_dir, sim_dir, folder = run_twins(layers, "pair")
    procs, sim = load_run(procs_dir), load_run(sim_dir)
    assert [folder.name, procs_dir.name, sim_dir.name] == ["pair-twin", "pair-procs", "pair-sim"]
    assert procs.summary["backend"] == "procs" and sim.summary["backend"] == "sim"
    assert sim.meta()["base_step_s"] == procs.meta()["base_step_s"] == 0.02
    intact = twin.twin_table(procs, sim, [Target("accuracy", 0.5)]).set_index("quantity")

    free = model.Delivery(0.0, 0.0, 1)
    monkeypatch.setattr(model.World, "message", lambda self, src, dst, nbytes, t, *a, **k: free)
    cfg = load_config(overrides=[f"{s}.{k}={v!r}" for s, sec in layers.items() for k, v in sec.items()]
                      + ["run.backend='sim'", "run.name='costless'"])
    costless = twin.twin_table(procs, load_run(run(cfg)), [Target("accuracy", 0.5)]).set_index("quantity")
    rate = costless.loc["samples per second"]
    assert rate["error"] > twin.BOUND and rate["within"] is False  # noqa: E712
    assert rate["error"] > intact.loc["samples per second", "error"] + 0.5  # the message cost was most of a step
    written = twin.write(folder, costless.reset_index(), procs, sim)
    assert [p.name for p in written] == ["twin.csv", "twin.md", "twin.png"]
    assert "beyond the bound" in (folder / "twin.md").read_text()
    assert not math.isnan(pd.read_csv(folder / "twin.csv").set_index("quantity").loc["samples per second", "error"])


def test_twins_refuse_a_name_in_use_before_running(tmp_path):
    from edgeml.errors import UserError

    (tmp_path / "pair-sim").mkdir()
    with pytest.raises(UserError, match="pair-sim exists: choose another name"):
        run_twins({"run": {"algorithm": "bsp", "out": str(tmp_path)}}, "pair")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pair-sim"]


def test_bytes_per_message_is_the_nodes_bytes_over_their_messages(tmp_path):
    from edgeml.rundir import DERIVED

    a = _sim(tmp_path, "a")
    nodes = pd.read_csv(a.path / "nodes.csv")
    assert DERIVED["bytes_per_message"](a) == pytest.approx(nodes.bytes_sent.sum() / nodes.messages_sent.sum())
    assert a.decided("bytes_per_message") == DERIVED["bytes_per_message"](a) > 0


def test_the_time_shares_are_the_nodes_seconds_over_their_time_alive(tmp_path):
    from edgeml.rundir import DERIVED

    a = _sim(tmp_path, "a")
    nodes = pd.read_csv(a.path / "nodes.csv")
    shares = {k: DERIVED[f"{k}_share"](a) for k in ("compute", "comm", "wait")}
    for k, column in (("compute", "compute_s"), ("comm", "comm_s"), ("wait", "wait_s")):
        assert shares[k] == pytest.approx(nodes[column].sum() / nodes.alive_s.sum()) and 0 <= shares[k] < 1
        assert a.decided(f"{k}_share") == shares[k]
    assert shares["compute"] > 0 and sum(shares.values()) == pytest.approx(1.0, abs=0.01)  # nothing else takes time


def test_the_mean_staleness_is_the_servers_updates_mean_and_none_without_a_server(tmp_path):
    from edgeml.rundir import DERIVED

    a = _sim(tmp_path, "a")  # ASP: 2 workers at 1:2, so the fast one's pushes find models the slow one made
    rows = pd.read_csv(a.path / "series/staleness.csv")
    assert DERIVED["mean_staleness"](a) == pytest.approx(rows.staleness.mean()) and rows.staleness.max() >= 1
    assert a.decided("mean_staleness") == DERIVED["mean_staleness"](a)
    gossip = _sim(tmp_path, "g", "run.algorithm='edgegossip'")
    assert DERIVED["mean_staleness"](gossip) is None


@pytest.mark.parametrize("name", ["../escape", "a/b"])
def test_twins_refuse_a_name_that_leaves_the_output_folder(tmp_path, name):
    from edgeml.errors import UserError

    out = tmp_path / "out"
    with pytest.raises(UserError, match="outside run.out"):
        run_twins({"run": {"algorithm": "bsp", "out": str(out)}}, name)
    assert not any(tmp_path.iterdir())  # nothing written, not even run.out
