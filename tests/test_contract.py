"""The contract every algorithm that ships with edgeml keeps, on both backends: it builds, runs a few seconds,
has a finite loss, its run directory reads back, and the same messages have the same byte counts in sim and
procs (both count them in the one message path of ``edgeml.runtime.base``)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from edgeml.algorithms import REGISTRY
from edgeml.config import load_config
from edgeml.runner import run

SHIPPED = sorted(name for name, spec in REGISTRY.items() if spec.nodes.__module__.startswith("edgeml."))
FAMILIES = {  # algorithms whose node programs share their shape and messages; the first of each runs in procs too
    "parameter server": ["bsp", "ssp", "asp"],
    "ADSP": ["adsp"],
    "AdaComm": ["adacomm", "fixed_adacomm"],
    "AdaComp": ["adacomp", "asgd", "comp_asgd"],
    "ESync": ["esync", "ssgd", "standalone"],
    "peers": ["snap0", "snap", "sno", "peer_ps", "terngrad"],
    "gossip": ["edgegossip", "gosgd"],
}
FIRST = {members[0] for members in FAMILIES.values()}
"""The default run checks every algorithm in sim and the first of each family in procs too (a procs run takes
seconds to start on a busy host); ``-m matrix`` (CI) runs every algorithm on both backends."""
QUICK = {  # periods short enough that every kind of message occurs within the run
    "adsp": ["adsp.check_period_s=0.25", "adsp.epoch_s=1.0"],
    "adacomm": ["adacomm.trial_s=0.3", "adacomm.adapt_period_s=0.5"],
    "fixed_adacomm": ["fixed_adacomm.trial_s=0.3"],
    "edgegossip": ["stop.max_time=10"],  # procs: loading scikit-learn takes seconds on a busy host
    # procs: each peer solves its weight matrix (cvxpy) before its first step, seconds on a busy host
    **{name: ["stop.max_time=10"] for name in ("snap", "snap0", "sno")},
}

VALUE_SIZED = {"snap"}
"""Algorithms whose message sizes depend on the values sent (SNAP's frames carry only the parameters that moved
past the APE bound), which differ between a virtual and a wall clock: the same kinds of message, sizes not
compared (``tests/test_wire.py`` checks their encoding byte for byte)."""


def _read_back(path) -> tuple[pd.DataFrame, pd.DataFrame]:
    meta = json.loads((path / "meta.json").read_text())
    summary = json.loads((path / "summary.json").read_text())
    assert meta["status"] == summary["status"] == "completed", meta.get("stop_reason")
    evals = pd.read_csv(path / "evals.csv")
    # a NaN evaluation is a row with no model to evaluate: before any node exposed one, so before any step (a
    # procs run's nodes still starting on a busy host); a NaN after training began is a model gone wrong
    assert (evals[evals.loss.isna()].total_steps == 0).all(), evals[["time_s", "total_steps", "loss"]]
    assert len(evals) >= 2 and math.isfinite(evals.loss.iloc[-1]), evals[["time_s", "total_steps", "loss"]]
    assert math.isclose(summary["final_loss"], evals.loss.iloc[-1], rel_tol=1e-12)
    nodes = pd.read_csv(path / "nodes.csv")
    assert (nodes[nodes.role == "worker"].steps > 0).all()
    for series in (path / "series").glob("*.csv") if (path / "series").exists() else []:
        pd.read_csv(series)
    tags = pd.read_csv(path / "messages.csv")
    # a node's bytes are those of its messages, tag by tag
    by_node = tags.groupby("rank")[["messages_sent", "bytes_sent", "messages_lost"]].sum()
    counted = nodes.set_index("rank")[["messages_sent", "bytes_sent", "messages_lost"]].loc[by_node.index]
    assert (by_node == counted).all().all()
    return nodes, tags


def test_every_shipped_algorithm_is_in_one_family():
    members = [a for family in FAMILIES.values() for a in family]
    assert sorted(members) == SHIPPED, "place a new algorithm in FAMILIES (its first member runs in procs by default)"


def _contract_run(tmp_path, algorithm: str, backend: str) -> pd.DataFrame:
    cfg = load_config(overrides=[f"run.algorithm='{algorithm}'", f"run.backend='{backend}'", "cluster.workers=2",
                                 "stop.max_time=3", "eval.interval=0.5", f"run.out='{tmp_path}'",
                                 f"run.name='{backend}'", *QUICK.get(algorithm, [])])
    _, tags = _read_back(run(cfg))
    return tags.groupby(["role", "tag"]).agg(smallest=("min_bytes", "min"), largest=("max_bytes", "max"))


@pytest.mark.parametrize("algorithm", sorted(set(SHIPPED) - FIRST))
def test_every_algorithm_keeps_the_contract_in_sim(tmp_path, algorithm):
    _contract_run(tmp_path, algorithm, "sim")


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", [a if a in FIRST else pytest.param(a, marks=pytest.mark.matrix)
                                       for a in SHIPPED])
def test_every_algorithm_keeps_the_contract_on_both_backends(tmp_path, algorithm):
    sizes = {backend: _contract_run(tmp_path, algorithm, backend) for backend in ("sim", "procs")}
    # the same kinds of message, of the same sizes
    assert sizes["sim"].index.tolist() == sizes["procs"].index.tolist()
    if algorithm not in VALUE_SIZED:
        assert sizes["sim"].equals(sizes["procs"]), pd.concat(sizes, axis=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algorithm", SHIPPED)
def test_every_algorithm_runs_on_a_cpu_and_cuda_mix(tmp_path, algorithm):
    """Worker 0 on the CPU, worker 1 and every other role on the GPU: messages, replies and all-reduces cross
    devices in both directions."""
    for backend in ("sim", "procs"):
        cfg = load_config(overrides=[f"run.algorithm='{algorithm}'", f"run.backend='{backend}'", "cluster.workers=2",
                                     "run.device='cuda'", "cluster.devices={cpu = '0'}", "stop.max_time=3",
                                     "eval.interval=0.5", f"run.out='{tmp_path}'", f"run.name='{backend}'",
                                     *QUICK.get(algorithm, [])])
        path = run(cfg)
        nodes, _ = _read_back(path)
        meta = json.loads((path / "meta.json").read_text())
        workers = sorted(nodes[nodes.role == "worker"]["rank"])
        devices = [meta["nodes"][str(r)]["device"] for r in sorted(nodes["rank"])]
        assert devices == ["cpu" if r == workers[0] else "cuda" for r in sorted(nodes["rank"])], devices
