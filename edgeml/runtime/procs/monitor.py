"""The monitor of a procs run (rank 0): evaluation, stopping rules, deaths, stalls and the run directory.

- **Evaluation.** Nodes send a snapshot of their exposed model once per evaluation tick. Once every live
  exposer has sent one for tick k or later, the monitor evaluates, of each, its first snapshot of tick k or
  later, stamped with the latest of their times. A slow exposer delays evaluations but never stops them; a
  dead one is left out; at most ``MAX_QUEUED`` snapshots wait per node. The final row averages the latest
  model of every node that ever exposed one.
- **Deaths.** A node whose program ended (crashed, returned, raised) or whose process died is announced to
  every other node (tag ``__died``), so they drop messages to it and leave it out of all-reduces. A process
  that died (the launcher reports its exit code; under torchrun its connection closing tells) fails the run
  and is recorded as crashed; a node program that raised fails it too, its traceback going to ``error.txt``.
- **Stalls.** The run is stalled when every live node has waited at least ``STALL_S`` seconds in a ``recv``
  without timeout or an ``all_reduce`` with nothing in flight to it, no message between nodes is in flight
  (every node's sent and received counts add up), no node ended in that time and no crash is scheduled later.
- **The end.** Whatever ends the run, the monitor stops the nodes, collects their final counters, writes the
  run directory and reports (status, reason). If the launcher dies, the monitor is told (SIGUSR1) and still
  does all of this.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path

import torch

from edgeml.runtime.monitor import Monitor, NodeReport, Totals, error_report, report_rows, summarize
from edgeml.rundir import RunWriter
from edgeml.runtime.base import Counters, Message, TagCounters, describe_blocked, layout
from edgeml.runtime.interference import Supervisor, pin
from edgeml.runtime.procs.contention import HostLoad, assess, message as contention_message
from edgeml.runtime.procs.node import die_with_parent
from edgeml.runtime.procs.transport import CONTROL, Endpoint, Transport

STALL_S = 3.0
MAX_QUEUED = 8


class Snapshots:
    """Exposed models by node: which to evaluate together (see the module docstring), and the latest of each."""

    def __init__(self):
        self.queues: dict[int, deque] = {}
        self.latest: dict[int, torch.Tensor] = {}

    def add(self, rank: int, tick: int, t: float, params: torch.Tensor) -> None:
        self.latest[rank] = params
        if tick >= 0:  # tick -1: the model a node held when its program ended
            self.queues.setdefault(rank, deque(maxlen=MAX_QUEUED)).append((tick, t, params))

    def drop(self, rank: int) -> None:
        self.queues.pop(rank, None)

    def ready(self) -> list[tuple[float, list[torch.Tensor]]]:
        """(time, models) of each evaluation that every live exposer has now sent a snapshot for."""
        out = []
        queues = self.queues.values()
        while queues and all(queues):
            k = min(q[-1][0] for q in queues)
            picks = [next(s for s in q if s[0] >= k) for q in queues]
            out.append((max(t for _, t, _ in picks), [p for _, _, p in picks]))
            for q in queues:
                while q and q[0][0] <= k:
                    q.popleft()
        return out


class RunMonitor:
    def __init__(self, job, programs: list, transport: Transport, writer: RunWriter, monitor: Monitor,
                 epoch: float, supervised: bool):
        self.job = job
        self.lay = lay = layout(programs)
        self.transport = transport
        self.writer = writer
        self.monitor = monitor
        self.epoch = epoch
        self.supervised = supervised
        """The launcher reports dead processes; under torchrun a closed connection is the sign."""
        self.reports = {r: NodeReport(info, Counters()) for r, info in lay.infos.items()}
        self.stats: dict[int, dict] = {}
        self.series: list = []
        self.ended: dict[int, float] = {}
        """Nodes whose program ended or whose process died, and when the monitor learned it."""
        self.snapshots = Snapshots()
        self.failure: str | None = None
        self.stop_request: str | None = None
        """Why a node program ended the run (``Node.stop_run``)."""
        self.interrupted = False
        self.stopping = False
        self.crash_schedule = job.world.crash_times

    def now(self) -> float:
        return time.time() - self.epoch

    # ---------------------------------------------------------------- events
    def handle(self, msg: Message) -> None:
        src = msg.src
        if msg.tag == CONTROL + "stats":
            st = msg["stats"]  # plain data (see ProcsNode.send_stats)
            rep = self.reports[src]
            rep.counters = Counters(**st["counters"])
            rep.tags = {k: TagCounters(**v) for k, v in st["tags"].items()}
            if st["crashed_at"] is not None:
                rep.crashed_at = st["crashed_at"]
            self.series.extend(st["series"])
            self.stats[src] = st
            if st["final"]:
                self.end(src)
        elif msg.tag == CONTROL + "snapshot":
            if src not in self.ended or msg.meta["tick"] < 0:
                self.snapshots.add(src, msg.meta["tick"], msg.meta["time"], msg["params"])
            if not self.stopping:
                self.evaluate_ready()
        elif msg.tag == CONTROL + "stop_run":
            self.stop_request = self.stop_request or msg.meta["reason"]
        elif msg.tag == CONTROL + "error":
            info = self.lay.infos[src]
            self.writer.write_error(error_report(info, msg.meta["time"], msg.meta["trace"]))
            self.failure = self.failure or f"{info.name} raised {msg.meta['error']}"
            self.end(src)

    def end(self, rank: int) -> None:
        if rank in self.ended:
            return
        self.ended[rank] = self.now()
        self.snapshots.drop(rank)
        if not self.stopping:
            for r in self.lay.infos:
                if r not in self.ended:
                    self.transport.send(r, CONTROL + "died", {}, {"rank": rank})
            self.evaluate_ready()

    def died(self, rank: int, how: str) -> None:
        """Node ``rank``'s process is gone (killed, or exited on its own)."""
        if rank in self.ended:
            return
        self.reports[rank].crashed_at = self.now()
        self.failure = self.failure or f"{self.lay.infos[rank].name} (rank {rank}) {how}"
        self.end(rank)

    def evaluate_ready(self) -> None:
        for t, params in self.snapshots.ready():
            self.monitor.evaluate(t, params, Totals.of(list(self.reports.values())))

    def pump(self, wait: float, control) -> None:
        """Handle what nodes sent and what the launcher reported (a node's death, Ctrl-C)."""
        tr = self.transport
        with tr.cond:
            if not tr.inbox:
                tr.cond.wait(wait)
            msgs = list(tr.inbox)
            tr.inbox.clear()
        for m in msgs:
            self.handle(m)
        if not self.supervised:
            for r in sorted(tr.dead - set(self.ended)):
                self.died(r, "died (its connection closed)")
        while not control.empty():
            kind, *args = control.get()
            if kind == "died":
                self.died(args[0], f"died with {exit_text(args[1])}")
            elif kind == "interrupt":
                self.interrupted = True

    def unexposed(self) -> bool:
        """Every node has reported and none exposes a model: evaluation rows then come on the monitor's clock
        (totals only), as in sim."""
        return len(self.stats) == len(self.reports) and not any(st["exposes"] for st in self.stats.values())

    def stalled(self, now: float) -> str | None:
        if any(now - t < STALL_S for t in self.ended.values()):
            return None
        live = [r for r in self.lay.infos if r not in self.ended]
        if not live or any(self.crash_schedule.get(r, -1.0) > now for r in live):
            return None  # a crash to come may end an all_reduce
        blocked = []
        for r in live:
            st = self.stats.get(r)
            if st is None or st["blocked_since"] is None or st["time"] - st["blocked_since"] < STALL_S:
                return None
            blocked.append((self.lay.infos[r], st["blocked_on"]))
        if sum(st["sent"] for st in self.stats.values()) != sum(st["arrived"] for st in self.stats.values()):
            return None  # a message is in flight
        return f"no node can make progress: {describe_blocked(blocked)}"

    # ---------------------------------------------------------------- the run
    def run(self, control, launcher_gone: threading.Event) -> tuple[str, str, float]:
        mon = self.monitor
        infos = self.lay.infos
        tick = 0.0
        while True:
            self.pump(0.05, control)
            t = self.now()
            if t >= tick and self.unexposed():
                mon.evaluate(t, [], Totals.of(list(self.reports.values())))
                tick = (t // self.job.cfg.eval.interval + 1) * self.job.cfg.eval.interval
            if launcher_gone.is_set():
                self.failure = self.failure or "the launcher process was killed"
            mon.check_time(t)
            mon.check_steps(sum(r.counters.steps for r in self.reports.values()))
            if self.failure:
                status, reason = "failed", self.failure
            elif self.interrupted:
                status, reason = "interrupted", "interrupted by the user"
            elif self.stop_request:
                status, reason = "stopped", self.stop_request
            elif mon.stop_reason:
                status, reason = "completed", mon.stop_reason
            elif len(self.ended) == len(infos):
                status, reason = "completed", "every node finished"
            elif (stall := self.stalled(t)) is not None:
                status, reason = "stalled", stall
            else:
                continue
            break
        duration = self.now()
        self.stopping = True
        for r in infos:
            if r not in self.ended:
                self.transport.send(r, CONTROL + "stop", {}, {})
        deadline = time.monotonic() + (2 if launcher_gone.is_set() else 10)
        while len(self.ended) < len(infos) and time.monotonic() < deadline:
            self.pump(0.05, control)
            for r in self.transport.dead - set(self.ended):  # gone without a final report
                self.end(r)
        self._add_late_losses()
        if status != "failed":
            mon.evaluate(duration, list(self.snapshots.latest.values()), Totals.of(list(self.reports.values())))
        return status, reason, duration

    def _add_late_losses(self) -> None:
        """Messages that reached a node after its program ended count as lost for their senders."""
        for st in self.stats.values():
            for (src, tag), n in st["lost"].items():
                self.reports[src].counters.messages_lost += n
                self.reports[src].tags.setdefault(tag, TagCounters()).messages_lost += n

    def refused(self) -> dict:
        """Connections the ranks refused because they did not prove the run's secret: ``total``, ``by_rank``
        (ranks that refused any) and ``why`` (by reason); ``malformed``: messages dropped as malformed."""
        tr = self.transport
        counts = {0: (tr.refused, dict(tr.refused_why), tr.malformed)}
        counts.update({r: (st.get("refused", 0), st.get("refused_why", {}), st.get("malformed", 0))
                       for r, st in self.stats.items()})
        why: dict[str, int] = {}
        for _, reasons, _ in counts.values():
            for k, n in reasons.items():
                why[k] = why.get(k, 0) + n
        return {"total": sum(n for n, _, _ in counts.values()),
                "by_rank": {str(r): n for r, (n, _, _) in sorted(counts.items()) if n}, "why": why,
                "malformed": sum(m for _, _, m in counts.values())}

    def release(self) -> None:
        for r in self.lay.infos:
            self.transport.send(r, CONTROL + "exit", {}, {})


def exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"exit code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def co_running(job, epoch: float) -> Supervisor:
    """Start the run's co-running workloads (``[load] schedule``) as real processes, from this (the monitor's)
    main thread so that they die with it; each node with workloads gets ``load.cores`` CPUs of the host of its
    own, shared with its interferers (``cpus``; empty without a schedule)."""
    env = job.world
    load = job.cfg.load
    ranks = sorted({w.rank for w in env.workloads})
    cpus = pin(ranks, load.cores, sorted(os.sched_getaffinity(0))) if ranks else {}
    sup = Supervisor(env.workloads, epoch=epoch, net_Bps=load.net_MBps * 1e6, disk_Bps=load.disk_MBps * 1e6,
                     dir=load.dir, cpus=cpus)
    sup.start()
    return sup


def await_ready(transport: Transport, ranks, control, within: float = 300.0) -> None:
    """Wait until every node process said it is ready (its imports done), one died, the launcher sent word (an
    interrupt, a death: handed on to the run afterwards), or ``within`` seconds passed: the run's clock starts
    only then, so no node's start-up is charged to the run."""
    waiting, told = set(ranks), []
    deadline = time.monotonic() + within
    with transport.cond:
        while waiting and time.monotonic() < deadline:
            waiting -= transport.dead
            waiting = {r for r in waiting if transport.take(r, CONTROL + "ready", math.inf)[0] is None}
            while not control.empty():
                told.append(control.get())
            if told:
                break
            if waiting:
                transport.cond.wait(0.1)
    for item in told:  # the run acts on them as if they came now
        control.put(item)


def _mark_contention(job, run: RunMonitor, writer: RunWriter, host: HostLoad) -> None:
    """Record each node's throttled step time against its target and the host's load; mark the run (and say
    so on stderr, its last lines) when the host's contention, not the device model, set the speeds."""
    cluster = job.cfg.cluster
    record = assess({r: st.get("step_times") for r, st in run.stats.items()},
                    {r: info.name for r, info in run.lay.infos.items()}, host.summary(),
                    throttled=cluster.throttle and cluster.throttle_mode == "absolute")
    writer.write_meta(oversubscribed=record["marked"], contention=record)
    if record["marked"]:
        print(contention_message(record, cluster.workers), file=sys.stderr)


def monitor_main(endpoint: Endpoint, job, programs: list, path: str, progress, control, result,
                 standalone: bool = True, supervised: bool = True) -> None:
    """Entry point of the monitor (rank 0): evaluation, stopping rules, progress (``progress()`` makes the
    display: a context manager whose ``update(row)`` takes each evaluation) and the run directory."""
    launcher_gone = threading.Event()
    if standalone:
        signal.signal(signal.SIGUSR1, lambda *_: launcher_gone.set())
        die_with_parent(signal.SIGUSR1)  # the fork server, our parent, dies with the launcher
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher handles Ctrl-C and SIGTERM, and tells us
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(job.cfg.run.threads)
    transport = Transport(endpoint)
    writer = RunWriter.attach(Path(path))
    progress = progress()
    monitor = Monitor(job, writer, on_row=progress.update)
    await_ready(transport, range(1, len(endpoint.addresses)), control)
    epoch = time.time() + 0.2
    interferers = co_running(job, epoch)
    try:
        for r in range(1, len(endpoint.addresses)):
            transport.send(r, CONTROL + "start", {"epoch": epoch, "base_step_s": job.base_step_s,
                                                  "cpus": interferers.cpus,
                                                  "interferers": {r: interferers.pids(r) for r in interferers.cpus}},
                           {})
        run = RunMonitor(job, programs, transport, writer, monitor, epoch, supervised)
    except BaseException:
        interferers.stop()
        raise
    try:
        with HostLoad() as host:
            status, reason, duration = run.run(control, launcher_gone)
        progress.__exit__(None, None, None)
        _mark_contention(job, run, writer, host)
        refused = run.refused()
        writer.write_meta(refused_connections=refused)
        if refused["total"]:
            n, ranks = refused["total"], ", ".join(f"rank {r}: {k}" for r, k in refused["by_rank"].items())
            print(f"edgeml: {n} unauthenticated connection{'s' if n > 1 else ''} refused ({ranks}); see "
                  f"refused_connections in meta.json", file=sys.stderr)
        reports = list(run.reports.values())
        writer.finish(*report_rows(reports, duration), run.series,
                      summarize(job, reports, monitor.rows, duration, status, reason), duration, status, reason)
        run.release()
        result.put((status, reason))
        if launcher_gone.is_set():  # nobody else is left to say where the results are
            print(f"run {status}: {reason} (results in {path})", file=sys.stderr)
    except BaseException as exc:
        reason = f"monitor error: {type(exc).__name__}: {exc}"
        writer.write_error(f"monitor (rank 0) raised\n{traceback.format_exc()}")
        writer.write_meta(status="failed", stop_reason=reason)
        result.put(("failed", reason))
    finally:
        interferers.stop()
        sys.stdout.flush()
        sys.stderr.flush()
        if standalone:
            result.close()
            result.join_thread()  # flush the queue before leaving without interpreter teardown
            os._exit(0)
