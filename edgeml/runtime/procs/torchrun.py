"""One rank of a procs run started by ``torchrun`` across machines (env:// rendezvous).

Rank 0 is the monitor, ranks 1..N the nodes. Each rank listens on the address of its machine that reaches
``MASTER_ADDR`` (loopback when that is loopback) and publishes it in torchrun's store; then the ranks talk
over the same transport as a single-machine run. torchrun supervises the processes: a rank whose process
dies is noticed by its connection to the monitor closing.
"""

from __future__ import annotations

import os
import socket
from collections import deque
from pathlib import Path

from edgeml.errors import UserError
from edgeml.runtime.procs.monitor import monitor_main
from edgeml.runtime.procs.node import node_main
from edgeml.runtime.procs.transport import Endpoint, listen


def launched_by_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MASTER_ADDR" in os.environ)


def check_world(cfg, nodes: int) -> None:
    world = int(os.environ["WORLD_SIZE"])
    if world != nodes + 1:
        raise UserError(f"torchrun started {world} processes but {cfg.run.algorithm} with {cfg.cluster.workers} "
                        f"workers needs {nodes + 1} (1 monitor + {nodes} nodes): set --nnodes/--nproc-per-node "
                        f"so that their product is {nodes + 1}")


def torchrun_is_monitor() -> bool:
    return int(os.environ["RANK"]) == 0


def _local_address(master: str, port: int) -> str:
    """This machine's address on the route to ``master`` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((master, port))
        return s.getsockname()[0]


def _endpoint():
    """This rank's endpoint, after exchanging addresses through torchrun's store (kept alive by the caller)."""
    from torch.distributed import rendezvous

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store, _, _ = next(rendezvous("env://", rank, world))
    master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    listener = listen(_local_address(master, port))
    host, own = listener.getsockname()[:2]
    prefix = f"edgeml/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)}"
    store.set(f"{prefix}/{rank}", f"{host}:{own}")
    addresses = {}
    for r in range(world):
        h, p = store.get(f"{prefix}/{r}").decode().rsplit(":", 1)
        addresses[r] = (h, int(p))
    return Endpoint(rank, listener, addresses), store


class _LocalQueue:
    """Stand-in for the launcher's queues when torchrun supervises the processes."""

    def __init__(self):
        self.items: deque = deque()

    def empty(self) -> bool:
        return not self.items

    def get(self):
        return self.items.popleft()

    def put(self, item) -> None:
        self.items.append(item)


def torchrun_node(job, programs: list, preload: tuple[str, ...] = ()) -> None:
    endpoint, _store = _endpoint()
    node_main(endpoint, job, programs, standalone=False, preload=preload)


def torchrun_monitor(job, programs: list, path: Path, progress) -> tuple[str, str]:
    endpoint, _store = _endpoint()  # rank 0 may host the store: keep it for the run
    result = _LocalQueue()
    monitor_main(endpoint, job, programs, str(path), progress, _LocalQueue(), result, standalone=False,
                 supervised=False)
    return result.get()
