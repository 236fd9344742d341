"""Algorithms for the cluster tests (tests/test_reproduce_ray.py), loaded through EDGEML_PLUGINS: a run whose
process dies the first time it runs, as a run on a node that is lost mid-run and then retried elsewhere."""

import os
from pathlib import Path

from edgeml.algorithms import AlgorithmSpec, register
from edgeml.algorithms.kit import PSConfig, ps_nodes, ps_worker
from edgeml.algorithms.ps import asp_server


def dies_once(node):
    """Worker 1's process dies abruptly after a few steps while the file ``EDGEML_TEST_DIES_ONCE`` names does
    not exist yet (it is written first, one line per death); then ASP as usual."""
    marker = Path(os.environ["EDGEML_TEST_DIES_ONCE"])
    if node.index == 1 and not marker.exists():
        trainer = node.job.trainer(node.index)
        for _ in range(5):
            node.compute(trainer.gradient)
        marker.write_text("died\n")
        os._exit(7)
    ps_worker(node)


register(AlgorithmSpec("test-dies-once", "a worker process dies the first time", PSConfig,
                       ps_nodes(asp_server, dies_once)))
