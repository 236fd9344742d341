"""A node process of a procs run: the runtime interface on the wall clock, throttled steps, the transport.

Inside every runtime call the node does its housekeeping: it stops when the monitor says so, fails at its
scheduled crash time, sends its counters and new series rows to the monitor every ``STATS_INTERVAL_S``
seconds, and a snapshot of its exposed model once per evaluation interval (stamped with the time it was
taken). A message is held in the receiver's inbox until its arrival time under the link model.

``all_reduce`` runs over the point-to-point transport: every live member sends its tensor to the lowest live
member, which sums them in rank order (as ``sim`` does) and sends the sum back. A member that learns the
root died sends its tensor to the next one; the root leaves out a member that died. Every wait is a
condition wait with housekeeping, so the end of the run or a crash interrupts it.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
import time
import traceback
from dataclasses import asdict
from typing import Any

import torch
from threadpoolctl import threadpool_limits

from edgeml.runtime.base import INTERRUPTED, Layout, Message, Node, NodeCrashed, StopRun, layout
from edgeml.runtime.interference import Load, LoadMeter
from edgeml.runtime.procs.contention import StepTimes
from edgeml.runtime.procs.transport import CONTROL, Endpoint, Transport

STATS_INTERVAL_S = 0.25


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies, so nothing is orphaned."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class ProcsNode(Node):
    def __init__(self, rank: int, lay: Layout, job, transport: Transport, epoch: float):
        super().__init__(rank, lay, job, transport.dead)
        self.transport = transport
        self.epoch = epoch
        self.stop = transport.stopped
        self.throttle_debt = 0.0
        self.step_times = StepTimes()
        """Throttled steps' targets against their realised times (``contention``: did the host distort them)."""
        self.next_stats = 0.0
        self.next_snapshot = 0.0
        self.sent_series = 0
        self.rounds: dict[str, int] = {}
        self.blocked_since: float | None = None
        """Since when this node waits with no timeout and nothing in flight to it (stall detection)."""
        self.crash_time = self.crash_schedule.get(rank)
        self.meter = None
        """Reads this node's co-running interferer processes (``load()``), when it has any."""

    def now(self) -> float:
        return time.time() - self.epoch

    # ---------------------------------------------------------------- housekeeping
    def _check(self) -> None:
        if self.stop.is_set() or 0 in self.dead:  # the run is over, or its monitor is gone
            raise StopRun()
        t = self.now()
        if self.crash_time is not None and t >= self.crash_time:
            self.crashed_at = t
            raise NodeCrashed(f"worker {self.index} failed at {t:.3g} s")
        if t >= self.next_stats:
            self.send_stats()
            self.next_stats = t + STATS_INTERVAL_S
        if self.exposed is not None and t >= self.next_snapshot:
            tick = int(t // self.cfg.eval.interval)
            self.transport.send(0, CONTROL + "snapshot", {"params": self.exposed}, {"time": t, "tick": tick})
            self.next_snapshot = (tick + 1) * self.cfg.eval.interval

    def send_stats(self, final: bool = False) -> None:
        rows = self.series[self.sent_series:]
        self.sent_series = len(self.series)
        tr = self.transport
        stats = {  # plain data: the frame's header carries it as such (never pickled)
            "counters": asdict(self.counters), "tags": {k: asdict(v) for k, v in self.tags.items()},
            "step_times": asdict(self.step_times),
            "series": rows, "crashed_at": self.crashed_at, "final": final, "time": self.now(),
            "blocked_since": self.blocked_since, "blocked_on": self.waiting_for(), "sent": tr.sent,
            "arrived": tr.arrived, "lost": dict(tr.lost), "exposes": self.exposed is not None,
            "refused": tr.refused, "refused_why": dict(tr.refused_why), "malformed": tr.malformed}
        tr.send(0, CONTROL + "stats", {"stats": stats}, {})

    def _wait(self, seconds: float, blocked: bool) -> None:
        """Wait on the transport (call under its condition) at most ``seconds``, waking for housekeeping and
        for this node's crash; ``blocked``: nothing but a message can end this wait (stall detection)."""
        if not blocked:
            self.blocked_since = None
        elif self.blocked_since is None:
            self.blocked_since = self.now()
        self.transport.cond.wait(max(0.0, min(seconds, STATS_INTERVAL_S, self._until_crash(), self._until_snapshot())))

    def _until_crash(self) -> float:
        return max(1e-3, self.crash_time - self.now()) if self.crash_time is not None else 3600.0

    def _until_snapshot(self) -> float:
        """Until this node's next model snapshot is due: a node that waits wakes for it, so the monitor sees
        the model of every evaluation interval as the virtual clock's evaluations do, and not only at the
        node's next message (a model changed just after a snapshot would otherwise be seen a round late)."""
        return max(1e-3, self.next_snapshot - self.now()) if self.exposed is not None else 3600.0

    def _pause(self, seconds: float, interrupt: tuple[int | None, str | None] | None = None) -> bool:
        """Sleep, waking for housekeeping and for a stop; with ``interrupt``, return True as soon as a matching
        message is deliverable (it stays in the inbox)."""
        end = time.monotonic() + seconds
        tr = self.transport
        while True:
            self._check()
            left = end - time.monotonic()
            if interrupt is None:
                if left <= 0:
                    return False
                self.stop.wait(min(left, STATS_INTERVAL_S, self._until_crash(), self._until_snapshot()))
                continue
            now = self.now()
            with tr.cond:
                msg, soonest = tr.take(*interrupt, now, consume=False)
                if msg is not None:
                    return True
                if left <= 0:
                    return False
                waits = [left, STATS_INTERVAL_S, self._until_crash(), self._until_snapshot()]
                waits += [soonest - now] if soonest else []
                tr.cond.wait(max(0.0, min(waits)))

    # ---------------------------------------------------------------- runtime interface
    def sleep(self, seconds: float) -> None:
        self._pause(max(0.0, seconds))

    def _compute(self, fn, work, interrupt):
        """Run ``fn``, then throttle: in ``absolute`` mode to base x factor x work, in ``scale`` mode to the
        measured time x factor (so real co-running load shows in the step time)."""
        self._check()
        start = self.now()
        t0 = time.perf_counter()
        if interrupt is not None and self._pause(0.0, interrupt):
            return INTERRUPTED, 0.0
        result = fn()
        if self.device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        cluster = self.cfg.cluster
        if not cluster.throttle:
            target = 0.0
        elif cluster.throttle_mode == "scale":
            target = elapsed * self.world.speed_factor(self.rank, start)
        else:
            target = self.job.base_step_s * self.world.speed_factor(self.rank, start) * work
        if target - elapsed - self.throttle_debt > 0 or interrupt is not None:
            # pace like a token bucket: past oversleep (the OS wakes us late under load) shortens this sleep,
            # so the mean step time converges on the target instead of drifting above it
            if self._pause(max(0.0, target - elapsed - self.throttle_debt), interrupt):
                return INTERRUPTED, time.perf_counter() - t0
        actual = time.perf_counter() - t0
        if target > 0:
            self.throttle_debt = min(max(self.throttle_debt + actual - target, 0.0), target)
            self.step_times.add(target, actual, elapsed)
        return result, actual

    def _stop_run(self, reason):
        self.transport.send(0, CONTROL + "stop_run", {}, {"reason": f"{self.info.name}: {reason}"})

    def _load(self, since, t):
        if self.meter is None:
            return Load(0.0, 0.0, 0.0)
        return self.meter.read()

    def _deliver(self, dst: int, msg: Message, last: bool) -> bool:
        meta: dict[str, Any] = {"nbytes": msg.nbytes, "sent_at": msg.sent_at, "arrive_at": msg.arrive_at}
        if last:
            meta["last"] = True
        return self.transport.send(dst, msg.tag, msg.data, meta)

    def _await(self, src, tag, timeout):
        deadline = None if timeout is None else self.now() + timeout
        tr = self.transport
        try:
            while True:
                self._check()
                now = self.now()
                with tr.cond:
                    msg, soonest = tr.take(src, tag, now)
                    if msg is not None:
                        return msg
                    if deadline is not None and now >= deadline:
                        return None
                    waits = [t - now for t in (deadline, soonest) if t is not None]
                    self._wait(min(waits, default=float("inf")), blocked=not waits)
        finally:
            self.blocked_since = None

    def _all_reduce(self, tensor: torch.Tensor, role: str) -> tuple[list[int], float]:
        k = self.rounds[role] = self.rounds.get(role, 0) + 1
        tr = self.transport
        key = [role, k]
        sent_to = None
        got: dict[int, torch.Tensor] = {}
        try:
            while True:
                self._check()
                live = [r for r in self.roles[role] if r == self.rank or self.alive(r)]
                root = live[0]
                if root != self.rank and sent_to != root:
                    if not tr.send(root, CONTROL + "ar", {"t": tensor}, {"round": key}):
                        continue  # the failed send marked the root dead: look again
                    sent_to = root
                with tr.cond:
                    if root == self.rank:
                        for m in tr.take_where(lambda m: m.tag == CONTROL + "ar" and m.meta["round"] == key):
                            got[m.src] = m["t"]
                        if all(r in got for r in live[1:]):
                            break
                    else:
                        done = tr.take_where(lambda m: m.tag == CONTROL + "ars" and m.meta["round"] == key)
                        if done:
                            tensor.copy_(done[0]["t"])
                            return self._reduced(tensor, done[0].meta["members"], done[0].meta["complete_at"])
                    # wake when a member's scheduled crash is due: the root stops waiting for it
                    due = [self.crash_schedule[r] - self.now() for r in live if r in self.crash_schedule]
                    self._wait(min(due, default=float("inf")), blocked=True)
        finally:
            self.blocked_since = None
        total = tensor.clone()  # the sum in rank order, as sim forms it
        for r in live[1:]:
            total += got[r].to(total.device)  # members may sit on different devices (a CPU/GPU mix)
        complete_at = self.now()
        for r in live[1:]:
            tr.send(r, CONTROL + "ars", {"t": total}, {"round": key, "members": live, "complete_at": complete_at})
        tensor.copy_(total)
        with tr.cond:  # contributions of members that died in this round
            tr.take_where(lambda m: m.tag == CONTROL + "ar" and m.meta["round"] == key)
        return self._reduced(tensor, live, complete_at)

    def _reduced(self, tensor: torch.Tensor, members: list[int], complete_at: float) -> tuple[list[int], float]:
        """Spend the modelled reduction time, counted from when the last member joined."""
        nbytes = tensor.numel() * tensor.element_size()
        modelled = self.world.all_reduce_time(members, nbytes, complete_at)
        if complete_at + modelled > self.now():
            self._pause(complete_at + modelled - self.now())
        return list(members), complete_at


def node_main(endpoint: Endpoint, job, programs: list, standalone: bool = True, preload: tuple[str, ...] = ()) -> None:
    """Entry point of a node process (rank >= 1), running its program of ``programs`` (role, program). It
    imports the ``preload`` modules and tells the monitor it is ready before the run's clock starts."""
    if standalone:
        die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C and stops us in order
    torch.set_num_threads(job.cfg.run.threads)
    threadpool_limits(job.cfg.run.threads)  # native pools too (BLAS, OpenMP: scikit-learn, scipy), for the process
    rank = endpoint.rank
    program = programs[rank - 1][1]
    for module in preload:  # seconds on a busy host: not on the run's clock
        importlib.import_module(module)
    transport = Transport(endpoint)
    transport.send(0, CONTROL + "ready", {}, {})
    with transport.cond:  # wait for the monitor's start signal (carries the shared clock epoch)
        while True:
            msg, _ = transport.take(0, CONTROL + "start", float("inf"))
            if msg is not None:
                break
            if 0 in transport.dead:
                os._exit(3)
            transport.cond.wait(1.0)
    job.base_step_s = msg["base_step_s"]
    node = ProcsNode(rank, layout(programs), job, transport, msg["epoch"])
    if node.device == "cuda":  # several nodes share a GPU when there are fewer GPUs than CUDA nodes
        torch.cuda.set_device(rank % torch.cuda.device_count())
    if msg["cpus"].get(rank):
        os.sched_setaffinity(0, msg["cpus"][rank])  # this node's share of the host, which its interferers load
    if msg["interferers"].get(rank):
        load = job.cfg.load
        node.meter = LoadMeter(msg["interferers"][rank], net_Bps=load.net_MBps * 1e6, disk_Bps=load.disk_MBps * 1e6)
    time.sleep(max(0.0, node.epoch - time.time()))  # every node starts at t = 0 on the shared clock
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
        end = node.now()
        transport.end(end)
        if error:
            transport.send(0, CONTROL + "error", {}, {"error": error.strip().splitlines()[-1], "trace": error,
                                                      "time": end})
        if node.exposed is not None and node.crashed_at is None:
            transport.send(0, CONTROL + "snapshot", {"params": node.exposed}, {"time": end, "tick": -1})
        node.send_stats(final=True)
        reported = (dict(transport.lost), transport.refused, transport.malformed)
        deadline = time.monotonic() + 30
        with transport.cond:  # until the monitor releases us, count what still arrives for us as lost
            while time.monotonic() < deadline and 0 not in transport.dead:
                msg, _ = transport.take(0, CONTROL + "exit", float("inf"))
                if msg is not None:
                    break
                if (transport.lost, transport.refused, transport.malformed) != reported:
                    reported = (dict(transport.lost), transport.refused, transport.malformed)
                    node.send_stats(final=True)
                transport.inbox.clear()
                transport.cond.wait(0.5)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
