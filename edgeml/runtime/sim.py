"""The ``sim`` backend: every node in one process on a virtual clock (discrete events).

Each node program runs as a greenlet (a coroutine with its own stack, in the one thread of the run): the
kernel switches to the node whose event is next, and the node switches back when it blocks again (in
``compute``, ``sleep``, ``recv`` or ``all_reduce``). A switch costs about a microsecond, where handing a baton
between OS threads costs a hundred or more, so the event loop runs nearly at the speed of the training it
drives. Torch's grad mode is per thread, so each node saves and restores its own across a switch. The
training computation itself is real (the same ``Trainer`` code as ``procs``); only its *duration* is virtual,
taken from the device model, and a message's delay from the link model (decided in ``Node.send``). Events at
equal times run in the order they were scheduled, so a seed gives bit-identical metrics. Hundreds of workers
fit on a small machine because they take turns.

A run ends by a stopping rule, when every node has finished, or *stalled*: when no node can make progress
(every live node waits in a ``recv`` without timeout or an ``all_reduce``, and no message, reduction or
scheduled crash is pending), which the kernel knows exactly from two counters.
"""

from __future__ import annotations

import heapq
import itertools
import traceback
from collections import deque
from typing import Any, Callable

import greenlet
import torch

from edgeml.runtime.monitor import Monitor, NodeReport, Totals
from edgeml.runtime.base import (INTERRUPTED, Layout, Message, Node, NodeCrashed, StopRun, describe_blocked,
                                 layout, matches)


class SimNode(Node):
    def __init__(self, kernel: "Kernel", rank: int, lay: Layout, job: Any, program: Callable):
        super().__init__(rank, lay, job, kernel.dead)
        self.kernel = kernel
        self.program = program
        self.mailbox: deque[Message] = deque()
        self.waiting: tuple[int | None, str | None] | None = None
        self.token: object | None = None
        """Identifies this node's one valid pending wake-up (None: none; older wake-ups are stale)."""
        self.wake_msg: Message | None = None
        self.interrupt_on: tuple[int | None, str | None] | None = None
        """While a step may be interrupted: the (src, tag) that ends it."""
        self.interrupted = False
        self.reduced: tuple[list[int], float] | None = None
        self.kill: BaseException | None = None
        self.done = False
        self.glet: greenlet.greenlet | None = None  # made by Kernel.run, whose greenlet is its parent

    # ---------------------------------------------------------------- coroutine plumbing
    def _main(self) -> None:
        torch.set_grad_enabled(True)
        try:
            self._check()
            self.program(self)
        except KeyboardInterrupt:
            raise  # Ctrl-C (or SIGTERM) during this node's turn: on to the kernel, which ends the run
        except NodeCrashed:
            if self.crashed_at is None:
                self.crashed_at = self.kernel.now
        except StopRun:
            pass
        except BaseException as exc:  # a bug in a node program: end the run, report it
            self.kernel.error = (self.info, exc, traceback.format_exc())
        finally:
            self.done = True
            self.disarm()
            self.kernel.on_node_done(self)
        # returning switches back to the kernel (the greenlet's parent)

    def _check(self) -> None:
        if self.kill is not None:
            raise self.kill

    def arm(self, t: float) -> None:
        """Wake this node at time ``t`` (replacing any other pending wake-up)."""
        if self.token is None:
            self.kernel.timers += 1
        self.token = tok = object()
        self.kernel.schedule(t, self.kernel.wake, self, tok)

    def disarm(self) -> None:
        if self.token is not None:
            self.kernel.timers -= 1
            self.token = None

    def _block(self) -> None:
        """Switch back to the kernel until an event wakes this node."""
        grad = torch.is_grad_enabled()
        self.glet.parent.switch()
        torch.set_grad_enabled(grad)
        self._check()

    def _wait_until(self, t: float) -> None:
        self.arm(t)
        self._block()

    # ---------------------------------------------------------------- runtime interface
    def now(self) -> float:
        return self.kernel.now

    def sleep(self, seconds: float) -> None:
        self._check()
        self._wait_until(self.kernel.now + max(0.0, seconds))

    def _compute(self, fn, work, interrupt):
        self._check()
        result = fn()
        t0 = self.kernel.now
        duration = self.step_duration(work)
        if interrupt is not None:
            if any(matches(m, *interrupt) for m in self.mailbox):
                return INTERRUPTED, 0.0
            self.interrupt_on, self.interrupted = interrupt, False
            try:
                self._wait_until(t0 + duration)
            finally:
                self.interrupt_on = None
            if self.interrupted:
                return INTERRUPTED, self.kernel.now - t0
        else:
            self._wait_until(t0 + duration)
        self.kernel.total_steps += 1
        return result, duration

    def _load(self, since, t):
        return self.world.load(self.rank, t, since)

    def _stop_run(self, reason):
        if self.kernel.stop_request is None:
            self.kernel.stop_request = f"{self.info.name}: {reason}"

    def _deliver(self, dst: int, msg: Message, last: bool) -> bool:
        # a message is a copy in host memory, as on a real wire
        msg.data = {key: (v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v)
                    for key, v in msg.data.items()}
        self.kernel.schedule(msg.arrive_at, self.kernel.deliver, dst, msg, pending=True)
        return True

    def _await(self, src, tag, timeout):
        self._check()
        for i, msg in enumerate(self.mailbox):
            if matches(msg, src, tag):
                del self.mailbox[i]
                return msg
        if timeout is not None and timeout <= 0:
            return None
        self.waiting = (src, tag)
        self.wake_msg = None
        if timeout is not None:
            self.arm(self.kernel.now + timeout)
        try:
            self._block()
        finally:
            self.waiting = None
        msg, self.wake_msg = self.wake_msg, None
        return msg

    def _all_reduce(self, tensor: torch.Tensor, role: str) -> tuple[list[int], float]:
        self._check()
        k = self.kernel
        k.groups.setdefault(role, {})[self.rank] = tensor
        self.reduced = None
        k.try_reduce(role)
        self._block()
        members, complete_at = self.reduced
        return members, complete_at


class Kernel:
    """Discrete-event scheduler and monitor driver for one simulated run."""

    def __init__(self, job, programs: list[tuple[str, Callable]], monitor: Monitor):
        self.job = job
        self.monitor = monitor
        self.now = 0.0
        self.heap: list = []
        self.seq = itertools.count()
        self.total_steps = 0
        self.finished = 0  # nodes whose program has ended
        self.error: tuple[Any, BaseException, str] | None = None
        self.stop_request: str | None = None
        """Why a node program ended the run (``Node.stop_run``)."""
        self.dead: set[int] = set()
        self.groups: dict[str, dict[int, torch.Tensor]] = {}
        self.pending = 0
        """Scheduled events that can wake a node: deliveries, reductions, crashes (not the monitor's own)."""
        self.timers = 0
        """Nodes with a valid pending wake-up. With ``pending`` at 0 too, no node can ever run again."""
        lay = layout(programs)
        self.roles = lay.roles
        self.live = {role: len(ranks) for role, ranks in lay.roles.items()}
        self.nodes = {r: SimNode(self, r, lay, job, program) for r, (_, program) in enumerate(programs, start=1)}

    def schedule(self, t: float, fn: Callable, *args: Any, pending: bool = False) -> None:
        if pending:
            self.pending += 1
        heapq.heappush(self.heap, (t, next(self.seq), fn, args, pending))

    def _switch_to(self, node: SimNode) -> None:
        node.glet.switch()

    def wake(self, node: SimNode, token: object) -> None:
        if node.done or node.token is not token:
            return  # stale wake-up (the node was woken otherwise, or has ended)
        node.disarm()
        self._switch_to(node)

    def deliver(self, dst: int, msg: Message) -> None:
        node = self.nodes[dst]
        if node.done:  # it died while the message was in flight
            self.nodes[msg.src].counters.messages_lost += 1
            self.nodes[msg.src]._tag(msg.tag).messages_lost += 1
            return
        if node.waiting is not None and matches(msg, *node.waiting):
            node.disarm()
            node.wake_msg = msg
            self._switch_to(node)
            return
        node.mailbox.append(msg)
        if node.interrupt_on is not None and matches(msg, *node.interrupt_on):
            node.disarm()  # the step ends now; the message waits in the mailbox
            node.interrupted = True
            self._switch_to(node)

    def try_reduce(self, role: str) -> None:
        group = self.groups.get(role, {})
        if not group or len(group) < self.live[role]:
            return
        ranks = sorted(group)
        total = group[ranks[0]].clone()
        for r in ranks[1:]:
            total += group[r].to(total.device)  # members may sit on different devices (a CPU/GPU mix)
        duration = self.job.world.all_reduce_time(ranks, total.numel() * total.element_size(), self.now)
        for r in ranks:
            group[r].copy_(total)
            node = self.nodes[r]
            node.reduced = (ranks, self.now)
            node.arm(self.now + duration)
        group.clear()

    def on_node_done(self, node: SimNode) -> None:
        self.finished += 1
        self.dead.add(node.rank)
        self.live[node.info.role] -= 1
        for role in list(self.groups):
            self.groups[role].pop(node.rank, None)
            if role == node.info.role and self.groups[role]:
                self.schedule(self.now, self.try_reduce, role, pending=True)

    def kill(self, node: SimNode, exc: BaseException) -> None:
        if node.done:
            return
        node.kill = exc
        node.disarm()
        self._switch_to(node)

    def crash(self, node: SimNode) -> None:
        if not node.done:
            node.crashed_at = self.now
            self.kill(node, NodeCrashed(f"worker {node.index} failed at {self.now:g} s"))

    # ---------------------------------------------------------------- the run
    def reports(self) -> list[NodeReport]:
        return [NodeReport(n.info, n.counters, n.crashed_at, n.tags) for n in self.nodes.values()]

    def _evaluate(self, params: list[torch.Tensor] | None = None) -> None:
        live = [n.exposed for n in self.nodes.values() if n.exposed is not None and n.crashed_at is None]
        self.monitor.evaluate(self.now, live if params is None else params, Totals.of(self.reports()))

    def _tick(self) -> None:
        self.monitor.check_time(self.now)
        if self.monitor.stop_reason:
            return  # the run's final row, below, is the evaluation at this time
        self._evaluate()
        if not self.monitor.stop_reason:
            self.schedule(self.now + self.job.cfg.eval.interval, self._tick)

    def stalled(self) -> str:
        blocked = [(n.info, n.waiting_for() or "a wait") for n in self.nodes.values() if not n.done]
        return f"no node can make progress: {describe_blocked(blocked)}"

    def run(self) -> tuple[str, str]:
        """Run to a stopping rule, the end of every program or a stall; returns (status, reason). Native thread
        pools (BLAS, OpenMP: scikit-learn, scipy) keep to ``run.threads`` as torch does, so results do not
        depend on the host's core count."""
        from threadpoolctl import threadpool_limits

        with threadpool_limits(self.job.cfg.run.threads):
            return self._run()

    def _run(self) -> tuple[str, str]:
        for node in self.nodes.values():
            node.glet = greenlet.greenlet(node._main)
            node.arm(0.0)
        for rank, t in self.job.world.crash_times.items():
            self.schedule(t, self.crash, self.nodes[rank], pending=True)
        self.schedule(0.0, self._tick)
        max_time = self.job.cfg.stop.max_time
        if max_time:
            self.schedule(max_time, self.monitor.check_time, max_time)
        status, reason = "completed", ""
        try:
            while self.heap:  # never empty before the end: the monitor's next evaluation is always in it
                t, _, fn, args, pending = heapq.heappop(self.heap)
                self.pending -= pending
                self.now = max(self.now, t)
                fn(*args)
                if self.error:
                    info, exc, _ = self.error
                    status, reason = "failed", f"{info.name} raised {type(exc).__name__}: {exc}"
                    break
                if self.stop_request is not None:
                    status, reason = "stopped", self.stop_request
                    break
                self.monitor.check_steps(self.total_steps)
                if self.monitor.stop_reason:
                    reason = self.monitor.stop_reason
                    break
                if self.finished == len(self.nodes):
                    reason = "every node finished"
                    break
                if self.pending == 0 and self.timers == 0:
                    status, reason = "stalled", self.stalled()
                    break
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted by the user"
        finally:
            if status != "failed":
                last = self.monitor.rows[-1]["time_s"] if self.monitor.rows else -1
                if last < self.now:
                    self._evaluate([n.exposed for n in self.nodes.values() if n.exposed is not None])
            for node in self.nodes.values():
                self.kill(node, StopRun())
        return status, reason
