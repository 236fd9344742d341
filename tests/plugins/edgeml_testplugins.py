"""Algorithms used only by the fault tests (loaded through EDGEML_PLUGINS)."""

import os

from edgeml.algorithms import AlgorithmSpec, register
from edgeml.algorithms.kit import PSConfig, ps_nodes, ps_worker
from edgeml.algorithms.ps import asp_server


def dying_worker(node):
    """Worker 1's process dies abruptly after a few steps, as a crash of the host would."""
    if node.index == 1:
        trainer = node.job.trainer(node.index)
        for _ in range(5):
            node.compute(trainer.gradient)
        os._exit(7)
    ps_worker(node)


register(AlgorithmSpec("test-die", "a worker process dies", PSConfig, ps_nodes(asp_server, dying_worker)))


def shared_probe(node):
    """Reports whether the training data reached this process through shared memory."""
    x = node.job.dataset.x_train
    node.log("probe", shared=bool(x.is_shared()), numel=int(x.numel()))
    ps_worker(node)


register(AlgorithmSpec("test-shared", "reports shared data", PSConfig, ps_nodes(asp_server, shared_probe)))


def lazy_importer(node):
    """Imports a slow module at its first use, mid-run, and logs how long that took on the run's clock."""
    t0 = node.now()
    import edgeml_slowimport  # noqa: F401

    node.log("probe", import_s=node.now() - t0)
    ps_worker(node)


register(AlgorithmSpec("test-preload", "imports a slow module mid-run", PSConfig, ps_nodes(asp_server, lazy_importer),
                       preload=("edgeml_slowimport",)))
