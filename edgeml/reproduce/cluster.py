"""Running a reproduction's runs on a Ray cluster (``--cluster ray``, ``--address ADDR``): one Ray task per run.

Why: a full reproduction is hundreds of independent runs; a cluster runs them on many machines at once, and Ray
schedules them, moves a run off a node that died and brings its result back. Ray is optional (``pip install -e
'.[cluster]'``) and imported only here, and only when a cluster is asked for.

``check`` refuses bad input before anything is written, in seconds: Ray missing, an ``--address`` nothing
answers on (a TCP connect to the head's port), or something other than a Ray head (one handshake of Ray's GCS
client, where ``ray.init`` would retry for 20 s). ``session`` starts a local Ray instance with ``jobs`` CPUs
(``--cluster ray``) or joins a running cluster (``--address``), and shuts Ray down at the end, Ctrl-C included.

``run_cluster`` keeps the local scheduler's contract (``edgeml.reproduce.parallel.run_parallel``): it walks the
runs in the plan's order and submits each whose core reservation (``reservation``, capped at the largest node)
fits in the CPUs the cluster has free, so "running" in the progress display is what runs. Each task runs its run
into a temporary folder on its node and returns the run directory packed (tar.gz bytes), so the nodes need no
shared file system; the driver unpacks it at its final path in the output folder as soon as it ends, so
finished runs are never lost and ``--resume`` after a killed driver runs only the rest. A task whose worker or
node dies is run again from scratch (``MAX_RETRIES`` times), then reported failed like any failed run. Ctrl-C
cancels the outstanding tasks (a run stops in order, its temporary folder removed), force-cancels what has not
stopped within ``STOP_WITHIN_S``, and re-raises; the session then shuts Ray down.

The nodes need edgeml (the same version, with the same Ray and Python) and the runs' data sets (``data.root``,
or ``data.download``); ``EDGEML_PLUGINS`` is passed on to the tasks of a cluster joined with ``--address``. A
cluster that uses Ray's token authentication (a recent Ray's default) wants ``RAY_AUTH_MODE=token`` and its token
from the driver. The results are those of a serial reproduction: the same run directories, recorded in the
plan's order.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import shutil
import signal
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from edgeml.errors import UserError
from edgeml.reproduce.parallel import STOP_WITHIN_S, reservation
from edgeml.reproduce.plan import PlannedRun

KINDS = ("ray",)
"""The cluster kinds ``--cluster`` accepts."""

MAX_RETRIES = 2
"""How many times a run whose worker or node died is run again before it counts as failed."""

CONNECT_TIMEOUT_S = 3.0
"""How long ``check`` waits for the cluster's port to answer."""

DEFAULT_PORT = 6379
"""The port of a Ray head's GCS (``ray start --head`` prints ``ADDR`` as host:6379); Ray Client's (ray://) is
10001."""

INSTALL = "pip install -e '.[cluster]'"

TEMP_PREFIX = "edgeml-run-"
"""A task's temporary run folder on its node: ``<tmp>/edgeml-run-<worker pid>-<random>/<run directory>``."""

AUTH_MODE = "RAY_AUTH_MODE"
"""Ray's token authentication switch (Ray 2.5x and later): a cluster started with it on wants ``token`` here, and
its token, from every driver that joins."""


def check(kind: str, address: str | None) -> None:
    """Refuse an unknown cluster kind, a missing Ray, or an ``address`` nothing answers on (UserError)."""
    if kind not in KINDS:
        raise UserError(f"--cluster {kind!r}: the cluster kinds are {', '.join(KINDS)}: give --cluster ray (or "
                        "leave --cluster out to run on this machine)")
    if importlib.util.find_spec("ray") is None:
        raise UserError(f"--cluster ray needs Ray, which is not installed: {INSTALL}")
    if address is None or address in ("auto", "local"):  # Ray finds (or starts) the cluster, or says why not
        return
    host, port = _host_port(address)
    fix = ("start one there with `ray start --head` (it prints the address to give), check the host and port, or "
           "leave --address out to start a local Ray instance")
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        why = "no answer within %g s" % CONNECT_TIMEOUT_S if isinstance(exc, TimeoutError) else exc.strerror or exc
        raise UserError(f"--address {address}: cannot reach a Ray cluster at {host}:{port} ({why}): {fix}") from None
    if "://" not in address:  # a head's GCS: one handshake, where ray.init would retry for 20 s
        why = _not_a_head(f"{host}:{port}")
        if why and "Authentication" in why:
            raise UserError(f"--address {address}: the Ray cluster at {host}:{port} wants Ray's token "
                            "authentication: set RAY_AUTH_MODE=token and give the cluster's token (in "
                            "~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN)")
        if why:
            raise UserError(f"--address {address}: {host}:{port} answers, but not as a Ray cluster's head ({why}): "
                            f"{fix}")


def _not_a_head(address: str) -> str | None:
    """Why the GCS client of Ray refuses ``address`` (None: a Ray head answers, or this Ray lacks the client)."""
    try:
        from ray._raylet import GcsClient  # what ray.init connects with (not public: skipped where it differs)
    except ImportError:
        return None
    with _quiet_stderr():  # Ray's C++ client logs each failed attempt there
        try:
            GcsClient(address=address)
        except TypeError:
            return None
        except Exception as exc:  # noqa: BLE001 - any refusal is the answer
            return f"{type(exc).__name__}: {_first_line(exc)}"
    return None


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 goes to /dev/null meanwhile (C++ code writes there directly)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _host_port(address: str) -> tuple[str, int]:
    """``host:port``, ``ray://host:port`` or ``host`` (port 6379, or 10001 for ray://); IPv6 in brackets."""
    scheme, _, rest = address.rpartition("://")
    rest = rest.split("/", 1)[0]
    host, colon, port = rest.rpartition(":") if not rest.endswith("]") else (rest, "", "")
    if not colon:
        host, port = rest, str(10001 if scheme == "ray" else DEFAULT_PORT)
    if not host or not port.isdigit():
        raise UserError(f"--address {address!r}: give the cluster's head as host:port (e.g. 10.0.0.5:6379, as "
                        "`ray start --head` prints it) or ray://host:10001")
    return host.strip("[]"), int(port)


@contextlib.contextmanager
def session(address: str | None, jobs: int | None) -> Iterator[None]:
    """Ray for the length of a reproduction: a local instance with ``jobs`` CPUs when ``address`` is None, else
    the running cluster at ``address``; quiet (no dashboard, no worker output on the terminal). The command
    line's own SIGINT and SIGTERM handling is kept (Ray would make SIGTERM exit at once), and so is this
    process's ``RAY_AUTH_MODE`` (a new local instance turns token authentication on for it)."""
    import ray

    options: dict = {"logging_level": logging.ERROR, "log_to_driver": False}
    if address is None:
        options.update(address="local", num_cpus=jobs, include_dashboard=False)
    else:
        options["address"] = address
        plugins = os.environ.get("EDGEML_PLUGINS")
        if plugins:
            options["runtime_env"] = {"env_vars": {"EDGEML_PLUGINS": plugins}}
    with _auth_mode_kept(), _raylet_messages_dropped():
        try:
            with _signals_kept():
                ray.init(**options)
        except Exception as exc:  # noqa: BLE001 - whatever Ray raises, the user gets one line
            with contextlib.suppress(Exception):
                ray.shutdown()
            where = f"join the Ray cluster at {address}" if address else "start a local Ray instance"
            raise UserError(f"cannot {where} ({type(exc).__name__}: {_first_line(exc)}): check that the cluster "
                            "runs the same Ray and Python as this machine, or leave --address out") from None
        try:
            yield
        finally:
            ray.shutdown()


@contextlib.contextmanager
def _raylet_messages_dropped() -> Iterator[None]:
    """Ray's driver prints the cluster's messages ("a worker died", "the task will be retried") on stdout, which
    carries the report's path alone, and across the progress display; they stay in the cluster's logs, and a run
    lost for good is reported failed with the reason. (Ray's function is replaced where this Ray has it.)"""
    from ray._private import worker

    original = getattr(worker, "print_to_stdstream", None)
    if original is None:
        yield
        return

    def without_raylet(data, *args, **kwargs):
        if data.get("pid") != "raylet":
            original(data, *args, **kwargs)

    worker.print_to_stdstream = without_raylet
    try:
        yield
    finally:
        worker.print_to_stdstream = original


@contextlib.contextmanager
def _signals_kept() -> Iterator[None]:
    """SIGINT's and SIGTERM's handlers are as before when the block ends."""
    main = threading.current_thread() is threading.main_thread()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _auth_mode_kept() -> Iterator[None]:
    """``RAY_AUTH_MODE`` is as before (set or not) when the block ends."""
    mode = os.environ.get(AUTH_MODE)
    try:
        yield
    finally:
        if mode is None:
            os.environ.pop(AUTH_MODE, None)
        else:
            os.environ[AUTH_MODE] = mode


def run_cluster(items: list[tuple[int, PlannedRun, object]], jobs: int | None, run_one: Callable[..., str | None],
                kwargs_for: Callable[[int], dict], path_for: Callable[[int], Path],
                on_start: Callable[[int], None], on_end: Callable[[int, str | None], None],
                on_tick: Callable[[int], None]) -> None:
    """Run ``items`` (index, planned run, config) as Ray tasks in a ``session``, at most ``jobs`` CPUs reserved at
    once (None: all the cluster's), and unpack each run directory at ``path_for(index)`` as it ends.

    ``run_one(path=..., root=..., **kwargs_for(index))`` runs on a node and returns the failure reason (None when
    the run finished); the callbacks are ``run_parallel``'s: ``on_start(index)``, ``on_end(index, reason)``
    (reason: also when the task was lost), ``on_tick(running)`` about once a second."""
    import ray

    task = ray.remote(_task)
    pending = [(k, cfg) for k, _, cfg in items]
    running: dict = {}  # object ref -> (index, cores)
    capacity = _Capacity(jobs)
    try:
        while pending or running:
            total, largest = capacity.now()
            free = total - sum(cores for _, cores in running.values())
            for k, cfg in list(pending):
                cores = reservation(cfg, largest)
                if cores <= free:
                    path = path_for(k)
                    shutil.rmtree(path, ignore_errors=True)  # as run_one does locally: the run starts afresh
                    on_start(k)
                    ref = task.options(num_cpus=cores, max_retries=MAX_RETRIES, retry_exceptions=False,
                                       name=f"edgeml {path.name}").remote(run_one, kwargs_for(k), path.name)
                    running[ref] = (k, cores)
                    pending.remove((k, cfg))
                    free -= cores
            on_tick(len(running))
            if running:
                ready, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
                for ref in ready:
                    k, _ = running.pop(ref)
                    on_end(k, _collect(ref, path_for(k)))
            else:  # nothing fits yet: the cluster has no CPUs (its nodes are starting or were lost)
                time.sleep(1.0)
    except KeyboardInterrupt:
        _stop(running, path_for)
        raise
    finally:
        for ref in running:  # an error in the driver: no run goes on without it
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)


class _Capacity:
    """The CPUs runs may reserve: (total, largest node), the alive nodes' CPUs capped at ``jobs``; read from
    the cluster at most every few seconds (nodes join and leave)."""

    EVERY_S = 5.0

    def __init__(self, jobs: int | None):
        self.jobs, self.at, self.value = jobs, -float("inf"), (0, 0)

    def now(self) -> tuple[int, int]:
        if time.monotonic() - self.at >= self.EVERY_S:
            import ray

            cpus = [int(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
            total, largest = sum(cpus), max(cpus, default=0)
            if self.jobs is not None:
                total, largest = min(total, self.jobs), min(largest, self.jobs)
            self.at, self.value = time.monotonic(), (total, largest)
        return self.value


def _task(run_one: Callable[..., str | None], kwargs: dict, name: str) -> tuple[str | None, str, bytes | None]:
    """On a node: run into a fresh temporary folder (``run_one`` is told it is the run's folder); return the
    failure reason, the folder the run ran in (the driver puts its final path in its place) and the run directory
    as tar.gz bytes (None: none was made)."""
    _clear_dead_folders()
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        path = Path(tmp) / name
        reason = run_one(path=path, root=Path(tmp), **kwargs)
        return reason, str(path), pack(path) if path.is_dir() else None


def _clear_dead_folders() -> None:
    """Delete this node's temporary run folders whose worker process is gone: a worker that died (a crash, the
    OOM killer) could not delete its own, and its run was run again elsewhere or reported failed."""
    for folder in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*-*"):
        pid = folder.name[len(TEMP_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def pack(path: Path) -> bytes:
    """The directory ``path`` as tar.gz bytes, its files under ``path.name/``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
        tar.add(path, arcname=path.name)
    return buffer.getvalue()


def unpack(packed: bytes, path: Path) -> None:
    """Put the run directory ``pack`` made at ``path``, replacing what is there; the directory appears whole (it
    is unpacked beside it, then renamed), so a driver killed meanwhile leaves no half run that looks finished."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as tar:
            names = {m.name.split("/", 1)[0] for m in tar.getmembers()}
            if names != {path.name}:
                raise ValueError(f"a packed run directory holds {sorted(names)}, not {path.name!r}")
            tar.extractall(staging, filter="data")
        shutil.rmtree(path, ignore_errors=True)
        (staging / path.name).rename(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _collect(ref, path: Path) -> str | None:
    """Unpack a task's run directory at ``path``; the run's failure reason (None: finished), or why the task
    brought none back."""
    import ray

    try:
        reason, ran_at, packed = ray.get(ref)
    except ray.exceptions.RayTaskError as exc:  # the task raised (EDGEML_DEBUG=1 lets a bug's exception out)
        cause = getattr(exc, "cause", None) or exc
        return f"{type(cause).__name__}: {_first_line(cause)} (on the cluster)"
    except ray.exceptions.RayError as exc:  # its worker or node died each time, or it was cancelled
        return (f"the run's task was lost {MAX_RETRIES + 1} times ({type(exc).__name__}: {_first_line(exc)}); "
                "the node's Ray logs say why")
    if packed is not None:
        unpack(packed, path)
    return reason.replace(ran_at, str(path)) if reason else reason


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


def _stop(running: dict, path_for: Callable[[int], Path]) -> None:
    """Cancel every outstanding task (a running one stops in order), wait for them, force-cancel what is left;
    a run that finished meanwhile is unpacked like any other."""
    import ray

    for ref in running:
        with contextlib.suppress(Exception):
            ray.cancel(ref)
    deadline = time.monotonic() + STOP_WITHIN_S
    while running and time.monotonic() < deadline:
        try:
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=0.2)
        except KeyboardInterrupt:  # a second Ctrl-C: stop waiting
            break
        for ref in ready:
            k, _ = running.pop(ref)
            with contextlib.suppress(Exception):
                _collect(ref, path_for(k))
    for ref in running:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
    running.clear()
