"""The ``procs`` backend: one OS process per node, messages over ``torch.distributed`` (gloo).

Layout of a run: rank 0 is the *monitor* (evaluates snapshots of the exposed model, applies the stopping
rules, writes the run directory, shows progress); ranks 1..N are the algorithm's nodes. On one machine the
launcher spawns all of them with ``torch.multiprocessing`` and supervises them: a node that dies ends the run
with the reason recorded, Ctrl-C stops it in order, and nothing outlives the run (children also get SIGKILL
if the launcher itself dies). Under ``torchrun`` (env:// rendezvous) each launched process takes the rank it
is given, so the same programs span machines.

Transport: each process runs a receiver thread that takes any message (``recv`` from any source: a length,
then the encoded bytes) into an inbox, so ``recv`` with a timeout and polling are plain condition waits.
Link emulation: the sender computes when the message would arrive under the link model (its uplink queue,
bytes / bandwidth, latencies, commit delay) and the receiver holds the message until then.

Throttling: a step sleeps until ``base_step_s * factor`` has passed. ``calibrate`` measures the real step time
and picks ``base_step_s`` so that all throttled workers together use at most half of the host's cores, which
keeps the emulated speed ratios accurate even with many more processes than cores.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import socket
import statistics
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import asdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from edgeml.metrics import Monitor, NodeReport, RunWriter, Totals
from edgeml.runtime.base import Counters, Message, Node, NodeCrashed, NodeInfo, StopRun, layout, matches

CONTROL = "__"  # tags of runtime control traffic start with this; it is never counted as algorithm bytes
STATS_INTERVAL_S = 0.25
CHUNK_BYTES = 1 << 20
"""Receive buffer of each process: a message up to this size (framing included) travels as one gloo message."""
UTILIZATION = 0.5
MIN_STEP_S = 0.01
"""Floor of the calibrated step time: messages over gloo take ~1 ms, so emulated steps far below that would
measure the transport rather than the algorithm."""


# ------------------------------------------------------------------------------------------- wire format

def encode(tag: str, data: dict[str, Any], meta: dict[str, Any], framed: bool = False) -> torch.Tensor:
    """One uint8 buffer: [8-byte header length][pickled header, padded to 8][tensor bytes, each padded to 8].

    ``framed`` prefixes the buffer's own length (8 bytes), as the transport sends it, in the same single copy."""
    specs, blobs, scalars, offset = [], [], {}, 0
    for key, value in data.items():
        if isinstance(value, torch.Tensor):
            t = value.detach().contiguous().cpu()
            raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
            specs.append((key, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset, raw.numel()))
            pad = (-raw.numel()) % 8
            blobs.append(raw)
            if pad:
                blobs.append(torch.zeros(pad, dtype=torch.uint8))
            offset += raw.numel() + pad
        else:
            scalars[key] = value
    header = pickle.dumps((tag, specs, scalars, meta))
    header += b"\0" * ((-len(header)) % 8)
    prefix = (8 + len(header) + offset).to_bytes(8, "little") if framed else b""
    head = torch.frombuffer(bytearray(prefix + len(header).to_bytes(8, "little") + header), dtype=torch.uint8)
    return torch.cat([head, *blobs]) if blobs else head


def decode(buf: torch.Tensor) -> tuple[str, dict[str, Any], dict[str, Any]]:
    n = int.from_bytes(bytes(buf[:8].tolist()), "little")
    tag, specs, scalars, meta = pickle.loads(bytes(buf[8:8 + n].numpy()))
    base = 8 + n
    data: dict[str, Any] = {}
    for key, dtype, shape, offset, nbytes in specs:
        raw = buf[base + offset: base + offset + nbytes]
        data[key] = raw.view(getattr(torch, dtype)).reshape(shape) if nbytes else \
            torch.empty(shape, dtype=getattr(torch, dtype))
    data.update(scalars)
    return tag, data, meta


class Transport:
    """Point-to-point messages of any size between ranks, with a receiving thread and an inbox."""

    def __init__(self, rank: int):
        self.rank = rank
        self.inbox: deque[Message] = deque()
        self.cond = threading.Condition()
        self.closed = False
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._receive, name="edgeml-recv", daemon=True)
        self.thread.start()

    def send(self, dst: int, tag: str, data: dict[str, Any], meta: dict[str, Any]) -> None:
        # one gloo message when it fits the receiver's chunk buffer (gloo accepts a larger receive buffer),
        # else the first chunk, whose length field announces the rest, then the rest
        framed = encode(tag, data, meta, framed=True)
        dist.send(framed[:CHUNK_BYTES], dst, tag=1)
        if framed.numel() > CHUNK_BYTES:
            dist.send(framed[CHUNK_BYTES:], dst, tag=2)

    def _receive(self) -> None:
        chunk = torch.empty(CHUNK_BYTES, dtype=torch.uint8)
        try:
            while True:
                src = dist.recv(chunk, tag=1)
                size = int(chunk[:8].view(torch.int64).item())
                buf = torch.empty(size, dtype=torch.uint8)
                first = min(size, CHUNK_BYTES - 8)
                buf[:first].copy_(chunk[8:8 + first])
                if size > first:
                    dist.recv(buf[first:], src=src, tag=2)
                tag, data, meta = decode(buf)
                if tag == CONTROL + "stop":  # acted on here: no thread has to watch the inbox for it
                    self.stopped.set()
                    with self.cond:
                        self.cond.notify_all()
                    continue
                arrived = time.time()
                msg = Message(src, tag, data, meta.get("nbytes", 0), sent_at=meta.get("sent_at", arrived), meta=meta)
                msg.deliver_at = max(arrived, meta.get("deliver_at", arrived))  # type: ignore[attr-defined]
                with self.cond:
                    self.inbox.append(msg)
                    self.cond.notify_all()
        except BaseException as exc:  # the group is being torn down, or a peer vanished
            with self.cond:
                self.error = exc
                self.closed = True
                self.stopped.set()
                self.cond.notify_all()

    def take(self, src: int | None, tag: str | None, now: float) -> tuple[Message | None, float | None]:
        """A deliverable matching message, else the earliest time one becomes deliverable (call under cond)."""
        soonest = None
        for i, msg in enumerate(self.inbox):
            if matches(msg, src, tag):
                if msg.deliver_at <= now:  # type: ignore[attr-defined]
                    del self.inbox[i]
                    return msg, None
                soonest = msg.deliver_at if soonest is None else min(soonest, msg.deliver_at)  # type: ignore
        return None, soonest


# ------------------------------------------------------------------------------------------- the node

class ProcsNode(Node):
    def __init__(self, info: NodeInfo, roles, job, transport: Transport, epoch: float, groups: dict):
        super().__init__(info, roles, job)
        self.transport = transport
        self.epoch = epoch
        self.groups = groups
        self.stop = transport.stopped
        self.up_busy = 0.0
        self.throttle_debt = 0.0
        self.next_stats = 0.0
        self.next_snapshot = 0.0
        self.sent_series = 0
        self.tick = 0
        cluster = job.cluster
        self.crash_time = cluster.crash_times.get(info.index) if info.role == "worker" else None

    def now(self) -> float:
        return time.time() - self.epoch

    # housekeeping done inside every runtime call: control messages, stats, snapshots, crash schedule
    def _check(self) -> None:
        if self.stop.is_set():
            raise StopRun()
        t = self.now()
        if self.crash_time is not None and t >= self.crash_time:
            self.crashed_at = t
            raise NodeCrashed(f"worker {self.index} failed at {t:.3g} s")
        if t >= self.next_stats:
            self.send_stats()
            self.next_stats = t + STATS_INTERVAL_S
        if self.exposed is not None and t >= self.next_snapshot:
            self.transport.send(0, CONTROL + "snapshot", {"params": self.exposed},
                                {"time": t, "tick": self.tick})
            self.tick += 1
            self.next_snapshot = self.tick * self.job.cfg.eval.interval

    def send_stats(self, final: bool = False) -> None:
        rows = self.series[self.sent_series:]
        self.sent_series = len(self.series)
        blob = pickle.dumps({"counters": asdict(self.counters), "series": rows, "crashed_at": self.crashed_at,
                             "final": final, "time": self.now()})
        self.transport.send(0, CONTROL + "stats", {"blob": torch.frombuffer(bytearray(blob), dtype=torch.uint8)}, {})

    def _pause(self, seconds: float) -> None:
        """Sleep, waking for housekeeping and for a stop."""
        end = time.monotonic() + seconds
        while True:
            self._check()
            left = end - time.monotonic()
            if left <= 0:
                return
            self.stop.wait(min(left, STATS_INTERVAL_S, self._until_crash()))

    def _until_crash(self) -> float:
        return max(1e-3, self.crash_time - self.now()) if self.crash_time is not None else 3600.0

    def sleep(self, seconds: float) -> None:
        self._pause(max(0.0, seconds))

    def _compute(self, fn):
        self._check()
        t0 = time.perf_counter()
        result = fn()
        if self.cfg.run.device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        target = self.step_duration() if self.cfg.cluster.throttle else 0.0
        if target > 0:
            # pace like a token bucket: past oversleep (the OS wakes us late under load) shortens this sleep,
            # so the mean step time converges on the target instead of drifting above it
            if target - elapsed - self.throttle_debt > 0:
                self._pause(target - elapsed - self.throttle_debt)
            actual = time.perf_counter() - t0
            self.throttle_debt = min(max(self.throttle_debt + actual - target, 0.0), target)
            return result, actual
        return result, elapsed

    def _post(self, dst: int, tag: str, data: dict[str, Any], nbytes: int) -> float:
        self._check()
        now = self.now()
        tx, flight = self.job.cluster.message_delay(self.worker_index(self.rank), self.worker_index(dst), nbytes)
        start = max(now, self.up_busy)
        self.up_busy = start + tx
        meta = {"nbytes": nbytes, "sent_at": self.epoch + now, "deliver_at": self.epoch + start + tx + flight}
        self.transport.send(dst, tag, data, meta)
        return start + tx + flight

    def _await(self, src, tag, timeout):
        t0 = self.now()
        deadline = None if timeout is None else t0 + timeout
        tr = self.transport
        while True:
            self._check()
            now = self.now()
            with tr.cond:
                msg, soonest = tr.take(src, tag, time.time())
                if msg is None:
                    if deadline is not None and now >= deadline:
                        return None, now - t0
                    if tr.closed:
                        raise StopRun()
                    waits = [STATS_INTERVAL_S, self._until_crash()]
                    if deadline is not None:
                        waits.append(deadline - now)
                    if soonest is not None:
                        waits.append(soonest - time.time())
                    tr.cond.wait(max(0.0, min(waits)))
                    continue
            arrived = self.now()
            msg.flight_s = max(0.0, msg.deliver_at - msg.sent_at)  # type: ignore[attr-defined]
            return msg, arrived - t0

    def _all_reduce(self, tensor: torch.Tensor, role: str) -> tuple[float, float]:
        self._check()
        group = self.groups[role]
        t0 = time.perf_counter()
        dist.barrier(group=group)
        t1 = time.perf_counter()
        dist.all_reduce(tensor, group=group)
        members = [self.worker_index(r) if role == "worker" else None for r in self.roles[role]]
        modeled = self.job.cluster.all_reduce_time(members, tensor.numel() * tensor.element_size())
        spent = time.perf_counter() - t1
        if modeled > spent:
            self._pause(modeled - spent)
        return max(spent, modeled), t1 - t0


# ------------------------------------------------------------------------------------------- calibration

def calibrate(job) -> dict[str, Any]:
    """Measure a real training step and choose the fastest device's emulated step time ``base_step_s``.

    All workers together demand ``measured * sum_i 1/factor_i`` CPU-seconds per ``base_step_s``; we keep that
    below ``UTILIZATION`` of the host's cores so that throttled step times, not CPU contention, set the speeds.
    """
    cfg = job.cfg
    torch.set_num_threads(cfg.run.threads)
    trainer = job.trainer(0)
    for _ in range(3):
        trainer.gradient()
    times = []
    t_end = time.perf_counter() + 1.0
    while len(times) < 5 or (len(times) < 30 and time.perf_counter() < t_end):
        t0 = time.perf_counter()
        trainer.gradient()
        times.append(time.perf_counter() - t0)
    measured = statistics.median(times)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    demand = sum(1.0 / f for f in job.cluster.factors)
    needed = measured * demand / (cores * UTILIZATION)
    base = cfg.cluster.base_step_s or max(needed, 2 * measured, MIN_STEP_S)
    return {"measured_step_s": measured, "cores": cores, "utilization_target": UTILIZATION,
            "demand_steps": demand, "base_step_s": base, "throttle": cfg.cluster.throttle,
            "base_step_s_given": bool(cfg.cluster.base_step_s),
            "oversubscribed": base < needed}


# ------------------------------------------------------------------------------------------- processes

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so nothing is orphaned."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _init(rank: int, world: int, init_method: str, roles: dict[str, list[int]]) -> dict:
    dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    # every rank creates every group, in the same order (a torch.distributed rule)
    return {role: dist.new_group(ranks) for role, ranks in sorted(roles.items())}


def _plugins(names: str | None) -> None:
    """Register the launcher's plugin algorithms here too (the fork server may predate them)."""
    from edgeml.algorithms import _load_plugins

    if names:
        os.environ["EDGEML_PLUGINS"] = names
        _load_plugins()


def node_main(rank: int, world: int, init_method: str, job, standalone: bool = True,
              plugins: str | None = None) -> None:
    """Entry point of a node process (rank >= 1)."""
    from edgeml.algorithms import get_algorithm

    _plugins(plugins)
    if standalone:
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C and stops us in order
    torch.set_num_threads(job.cfg.run.threads)
    programs = get_algorithm(job.cfg.run.algorithm).nodes(job.cfg)
    roles, infos = layout(programs)
    program = programs[rank - 1][1]
    groups = _init(rank, world, init_method, roles)
    transport = Transport(rank)
    with transport.cond:  # wait for the monitor's start signal (carries the shared clock epoch)
        while True:
            msg, _ = transport.take(0, CONTROL + "start", float("inf"))
            if msg is not None:
                break
            if transport.closed:
                os._exit(3)
            transport.cond.wait(1.0)
    job.base_step_s = msg["base_step_s"]
    node = ProcsNode(infos[rank], roles, job, transport, msg["epoch"], groups)
    if job.cfg.run.device == "cuda":
        torch.cuda.set_device(0)
    error = ""
    try:
        program(node)
    except NodeCrashed:
        if node.crashed_at is None:
            node.crashed_at = node.now()
    except StopRun:
        pass
    except BaseException:
        error = traceback.format_exc()
    try:  # final report: error if any, the final model, counters and remaining series
        if error:
            transport.send(0, CONTROL + "error", {}, {"error": error.strip().splitlines()[-1], "trace": error})
        if node.exposed is not None and node.crashed_at is None:
            transport.send(0, CONTROL + "snapshot", {"params": node.exposed}, {"time": node.now(), "tick": -1})
        node.send_stats(final=True)
        deadline = time.monotonic() + 30
        with transport.cond:  # keep draining until the monitor releases us (others may still send to us)
            while time.monotonic() < deadline and not transport.closed:
                msg, _ = transport.take(0, CONTROL + "exit", float("inf"))
                if msg is not None:
                    break
                transport.inbox = deque(m for m in transport.inbox if m.src == 0)
                transport.cond.wait(0.5)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def monitor_main(world: int, init_method: str, job, path: str, quiet: bool, control, result,
                 standalone: bool = True, plugins: str | None = None) -> None:
    """Entry point of the monitor (rank 0): evaluation, stopping rules, progress and the run directory."""
    from edgeml.algorithms import get_algorithm
    from edgeml.progress import RunProgress

    _plugins(plugins)
    if standalone:
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(max(1, job.cfg.run.threads))
    roles, infos = layout(get_algorithm(job.cfg.run.algorithm).nodes(job.cfg))
    _init(0, world, init_method, roles)
    transport = Transport(0)
    writer = RunWriter.attach(Path(path))
    progress = RunProgress(job.cfg, quiet=quiet)
    monitor = Monitor(job, writer, on_row=progress.update)
    epoch = time.time() + 0.2
    for r in range(1, world):
        transport.send(r, CONTROL + "start", {"epoch": epoch, "base_step_s": job.base_step_s}, {})
    reports = {r: NodeReport(infos[r], Counters()) for r in infos}
    series: list = []
    final: set[int] = set()
    snapshots: dict[int, dict[int, torch.Tensor]] = {}
    exposers: set[int] = set()
    evaluated = -1
    status, reason = "completed", ""
    last_snapshot: dict[int, torch.Tensor] = {}
    final_snapshot: dict[int, torch.Tensor] = {}

    def handle(msg: Message) -> None:
        nonlocal evaluated, status, reason
        if msg.tag == CONTROL + "stats":
            st = pickle.loads(bytes(msg["blob"].numpy()))
            rep = reports[msg.src]
            rep.counters = Counters(**st["counters"])
            rep.crashed_at = st["crashed_at"]
            series.extend(st["series"])
            if st["final"]:
                final.add(msg.src)
        elif msg.tag == CONTROL + "snapshot":
            tick = msg.meta["tick"]
            if tick < 0:
                final_snapshot[msg.src] = msg["params"]
                return
            exposers.add(msg.src)
            last_snapshot[msg.src] = msg["params"]
            snapshots.setdefault(tick, {})[msg.src] = msg["params"]
            ready = [k for k, v in snapshots.items() if len(v) >= len(exposers) and k > evaluated]
            for k in sorted(ready):
                monitor.evaluate(k * job.cfg.eval.interval, list(snapshots.pop(k).values()),
                                 Totals.of(list(reports.values())))
                evaluated = k
            for k in [k for k in snapshots if k <= evaluated - 2]:
                snapshots.pop(k)
        elif msg.tag == CONTROL + "error":
            info = infos[msg.src]
            status, reason = "failed", f"{info.role} {info.index} raised {msg.meta['error']}"
            final.add(msg.src)

    def pump(wait: float) -> None:
        """Handle what nodes sent and what the launcher reported (a node's death, Ctrl-C)."""
        nonlocal status, reason
        with transport.cond:
            if not transport.inbox:
                transport.cond.wait(wait)
            msgs = list(transport.inbox)
            transport.inbox.clear()
        for m in msgs:
            handle(m)
        while not control.empty():
            kind, *args = control.get()
            if kind == "died":
                final.add(args[0])
                if status == "completed":
                    info = infos[args[0]]
                    status, reason = "failed", f"{info.role} {info.index} (rank {args[0]}) died with exit code {args[1]}"
            elif kind == "interrupt" and status == "completed":
                status, reason = "interrupted", "interrupted by the user"

    try:
        while not monitor.stop_reason and status == "completed":
            pump(0.05)
            monitor.check_time(time.time() - epoch)
            monitor.check_steps(sum(r.counters.steps for r in reports.values()))
            if len(final) == len(infos):
                reason = reason or "every node finished"
                break
        if monitor.stop_reason:
            reason = monitor.stop_reason
        duration = time.time() - epoch
        for r in infos:
            if r not in final:
                try:
                    transport.send(r, CONTROL + "stop", {}, {})
                except Exception:
                    pass
        deadline = time.monotonic() + 10
        while len(final) < len(infos) and time.monotonic() < deadline:
            pump(0.05)
        last_snapshot.update(final_snapshot)
        if last_snapshot and status != "failed":
            monitor.evaluate(duration, list(last_snapshot.values()), Totals.of(list(reports.values())))
        for r in infos:
            try:
                transport.send(r, CONTROL + "exit", {}, {})
            except Exception:
                pass
        progress.__exit__(None, None, None)
        writer.finish(list(reports.values()), series, monitor.rows, duration, status, reason, job)
        result.put((status, reason))
    except BaseException as exc:
        result.put(("failed", f"monitor error: {type(exc).__name__}: {exc}"))
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if standalone:
            result.close()
            result.join_thread()  # flush the queue before leaving without interpreter teardown
            os._exit(0)


def run_local(job, path: Path, quiet: bool) -> tuple[str, str]:
    """Spawn the monitor and the nodes on this machine (loopback only) and supervise them."""
    from edgeml.algorithms import get_algorithm

    programs = get_algorithm(job.cfg.run.algorithm).nodes(job.cfg)
    world = len(programs) + 1
    init_method = f"tcp://127.0.0.1:{free_port()}"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # a fork server imports torch and edgeml once, then forks each node from that clean state: starting N
    # processes costs one import instead of N (fork from this process is unsafe once threads exist)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["edgeml.runtime.forkserver", "edgeml.runtime.procs", "edgeml.algorithms",
                                "edgeml.metrics"])
    control, result = ctx.Queue(), ctx.Queue()
    plugins = os.environ.get("EDGEML_PLUGINS")
    procs = [ctx.Process(target=monitor_main, args=(world, init_method, job, str(path), quiet, control, result),
                         kwargs={"plugins": plugins}, daemon=False)]
    procs += [ctx.Process(target=node_main, args=(r, world, init_method, job), kwargs={"plugins": plugins},
                          daemon=False) for r in range(1, world)]
    for p in procs:
        p.start()
    reported: set[int] = set()
    outcome: tuple[str, str] | None = None
    interrupted = False
    try:
        while outcome is None:
            try:
                outcome = result.get(timeout=0.1)
                break
            except Exception:
                pass
            if not procs[0].is_alive():
                try:
                    outcome = result.get(timeout=1.0)
                except Exception:
                    outcome = ("failed", f"the monitor process died with exit code {procs[0].exitcode}")
                break
            for r, p in enumerate(procs[1:], start=1):
                if r not in reported and p.exitcode not in (None, 0):
                    reported.add(r)
                    control.put(("died", r, p.exitcode))
    except KeyboardInterrupt:
        interrupted = True
        control.put(("interrupt",))
        try:
            outcome = result.get(timeout=20)
        except Exception:
            outcome = ("interrupted", "interrupted by the user")
    finally:
        deadline = time.monotonic() + 10
        for p in procs:
            p.join(timeout=max(0.1, deadline - time.monotonic()))
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if interrupted:
        raise KeyboardInterrupt
    return outcome


def launched_by_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("RANK" in os.environ and "WORLD_SIZE" in os.environ
                                                   and "MASTER_ADDR" in os.environ)


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

    def close(self) -> None:
        pass

    def join_thread(self) -> None:
        pass


def run_torchrun(cfg, spec, path: Path, quiet: bool) -> Path:
    """Run this process's rank of a ``torchrun``-launched job (rank 0: monitor; others: nodes)."""
    from edgeml.errors import UserError
    from edgeml.runner import meta_for
    from edgeml.train import build_job

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    need = len(spec.nodes(cfg)) + 1
    if world != need:
        raise UserError(f"torchrun started {world} processes but {cfg.run.algorithm} with {cfg.cluster.workers} "
                        f"workers needs {need} (1 monitor + {need - 1} nodes): set --nnodes/--nproc-per-node so "
                        f"their product is {need}")
    job = build_job(cfg, base_step_s=0.0)
    if rank == 0:
        calibration = calibrate(job)
        job.base_step_s = calibration["base_step_s"]
        w = RunWriter(path, cfg.to_dict(), meta_for(cfg, job, calibration))
        w.close()
        result = _LocalQueue()
        monitor_main(world, "env://", job, str(path), quiet, _LocalQueue(), result, standalone=False)
        status, reason = result.get()
        print(path)
        if status == "failed":
            raise RuntimeError(f"run failed: {reason} (partial results in {path})")
        os._exit(0)  # leave the process group without a teardown handshake
    node_main(rank, world, "env://", job, standalone=False)
    return path
