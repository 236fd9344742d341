"""One rank of a procs run started by ``torchrun`` across machines (env:// rendezvous).

Rank 0 is the monitor, ranks 1..N the nodes. Each rank listens on the address of its machine that reaches
``MASTER_ADDR`` (loopback when that is loopback) and publishes it in torchrun's store; then the ranks talk
over the same transport as a single-machine run. torchrun supervises the processes: a rank whose process
dies is noticed by its connection to the monitor closing.

The ranks prove to each other that they belong to the run with a secret (``edgeml.runtime.procs.transport``)
that the user sets on every machine in ``EDGEML_SECRET``: torchrun's store answers anyone who reaches
``MASTER_PORT``, so a secret handed out through it would keep no one out. Each run keys its connections with
HMAC-SHA256(``EDGEML_SECRET``, a salt that rank 0 draws and publishes in the store), so each run, and each
restart, has its own key; the ranks compare a digest of it through the store and refuse to start, in one line,
when ``EDGEML_SECRET`` differs between machines.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import time
from collections import deque
from pathlib import Path

from edgeml.errors import UserError
from edgeml.rundir import RunWriter
from edgeml.runtime.procs.monitor import monitor_main
from edgeml.runtime.procs.node import node_main
from edgeml.runtime.procs.transport import Endpoint, listen

SECRET_ENV = "EDGEML_SECRET"
MIN_SECRET_CHARS = 16


def launched_by_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MASTER_ADDR" in os.environ)


def shared_secret() -> bytes:
    """The secret every machine of a torchrun run was given (``EDGEML_SECRET``); a ``UserError`` without it."""
    value = os.environ.get(SECRET_ENV, "")
    if len(value) < MIN_SECRET_CHARS:
        raise UserError(f"under torchrun, set {SECRET_ENV} to the same secret of at least {MIN_SECRET_CHARS} "
                        f"characters on every machine (e.g. export {SECRET_ENV}=$(python -c 'import secrets; "
                        f"print(secrets.token_hex(32))')): the ranks prove it to each other before they read any "
                        f"message" + (f"; it has {len(value)}" if value else ""))
    return value.encode()


def check_world(cfg, nodes: int) -> None:
    """The torchrun world fits the run (its size) and can be secured (``EDGEML_SECRET`` is set)."""
    shared_secret()
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
    shared = shared_secret()
    store, _, _ = next(rendezvous("env://", rank, world))
    master, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    prefix = f"edgeml/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', 0)}"
    if rank == 0:  # this run's salt, and a digest of its key, for the others to check theirs against
        salt = secrets.token_hex(16)
        secret = run_key(shared, salt)
        store.set(f"{prefix}/salt", salt)
        store.set(f"{prefix}/check", key_check(secret))
    else:
        secret = run_key(shared, store.get(f"{prefix}/salt").decode())
        if not hmac.compare_digest(store.get(f"{prefix}/check").decode(), key_check(secret)):
            store.set(f"{prefix}/mismatch", str(rank))  # so that the ranks waiting for this one stop too
            raise UserError(f"{SECRET_ENV} on this machine differs from rank 0's: set the same value on every "
                            f"machine")
    listener = listen(_local_address(master, port))
    host, own = listener.getsockname()[:2]
    store.set(f"{prefix}/{rank}", f"{host}:{own}")
    return Endpoint(rank, listener, _addresses(store, prefix, world), secret), store


def _addresses(store, prefix: str, world: int) -> dict[int, tuple[str, int]]:
    """Every rank's address, as each publishes it; a ``UserError`` as soon as a rank says its secret differs
    (within the store's timeout, after which the store's own error is raised)."""
    keys = {r: f"{prefix}/{r}" for r in range(world)}
    deadline = time.monotonic() + store.timeout.total_seconds()
    while time.monotonic() < deadline and not store.check(list(keys.values())):
        if store.check([f"{prefix}/mismatch"]):
            other = store.get(f"{prefix}/mismatch").decode()
            raise UserError(f"rank {other} was given another {SECRET_ENV} than rank 0: set the same value on every "
                            f"machine")
        time.sleep(0.05)
    addresses = {}
    for r, key in keys.items():
        h, p = store.get(key).decode().rsplit(":", 1)
        addresses[r] = (h, int(p))
    return addresses


def run_key(shared: bytes, salt: str) -> bytes:
    """This run's key: the user's secret keyed with the salt rank 0 drew."""
    return hmac.new(shared, b"edgeml-procs run key\0" + salt.encode(), hashlib.sha256).digest()


def key_check(secret: bytes) -> str:
    """A digest that tells whether two ranks hold the same key (and says nothing else about it)."""
    return hmac.new(secret, b"edgeml-procs key check", hashlib.sha256).hexdigest()


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
    try:
        endpoint, _store = _endpoint()  # rank 0 may host the store: keep it for the run
    except UserError as exc:  # a rank was given another secret: the run directory says why it ended
        writer = RunWriter.attach(path)
        writer.close()
        writer.write_meta(status="failed", stop_reason=str(exc))
        raise
    result = _LocalQueue()
    monitor_main(endpoint, job, programs, str(path), progress, _LocalQueue(), result, standalone=False,
                 supervised=False)
    return result.get()
