"""The ``sim`` backend: every node in one process on a virtual clock (discrete events).

Each node program runs as a greenlet (a coroutine with its own stack, in the one thread of the run): the
kernel switches to the node whose event is next, and the node switches back when it blocks again (in
``compute``, ``sleep``, ``recv`` or ``all_reduce``). A switch costs about a microsecond, where handing a baton
between OS threads costs a hundred or more, so the event loop runs nearly at the speed of the training it
drives. Torch's grad mode is per thread, so each node saves and restores its own across a switch. The
training computation itself is real (the same ``Trainer`` code as ``procs``); only its *duration* is virtual,
taken from the device model, and a message's delay from the link model. Events at equal times run in the
order they were scheduled, so a seed gives bit-identical metrics. Hundreds of workers fit on a small machine
because they take turns.
"""

from __future__ import annotations

import heapq
import itertools
import traceback
from collections import deque
from typing import Any, Callable

import greenlet
import torch

from edgeml.metrics import Monitor, NodeReport, Totals
from edgeml.runtime.base import Message, Node, NodeCrashed, NodeInfo, StopRun, layout, matches


class SimNode(Node):
    def __init__(self, kernel: "Kernel", info: NodeInfo, roles: dict[str, list[int]], job: Any, program: Callable):
        super().__init__(info, roles, job)
        self.kernel = kernel
        self.program = program
        self.mailbox: deque[Message] = deque()
        self.waiting: tuple[int | None, str | None] | None = None
        self.token: object | None = object()
        self.wake_msg: Message | None = None
        self.kill: BaseException | None = None
        self.done = False
        self.up_busy = 0.0
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
            self.token = None
            self.kernel.on_node_done(self)
        # returning switches back to the kernel (the greenlet's parent)

    def _check(self) -> None:
        if self.kill is not None:
            raise self.kill

    def _block(self) -> None:
        """Switch back to the kernel until an event wakes this node."""
        grad = torch.is_grad_enabled()
        self.glet.parent.switch()
        torch.set_grad_enabled(grad)
        self._check()

    def _wait_until(self, t: float) -> None:
        self.token = tok = object()
        self.kernel.schedule(t, self.kernel.wake, self, tok)
        self._block()

    # ---------------------------------------------------------------- runtime interface
    def now(self) -> float:
        return self.kernel.now

    def sleep(self, seconds: float) -> None:
        self._check()
        self._wait_until(self.kernel.now + max(0.0, seconds))

    def _compute(self, fn):
        self._check()
        result = fn()
        duration = self.step_duration()
        self._wait_until(self.kernel.now + duration)
        self.kernel.total_steps += 1
        return result, duration

    def _post(self, dst: int, tag: str, data: dict[str, Any], nbytes: int) -> float:
        self._check()
        k = self.kernel
        # a message is a copy in host memory, as on a real wire
        data = {key: (v.detach().to("cpu", copy=True) if isinstance(v, torch.Tensor) else v)
                for key, v in data.items()}
        tx, flight = self.job.cluster.message_delay(self.worker_index(self.rank), self.worker_index(dst), nbytes)
        start = max(k.now, self.up_busy)
        self.up_busy = start + tx
        arrive = start + tx + flight
        msg = Message(self.rank, tag, data, nbytes, sent_at=k.now, flight_s=arrive - k.now)
        k.schedule(arrive, k.deliver, dst, msg)
        return arrive

    def _await(self, src, tag, timeout):
        self._check()
        for i, msg in enumerate(self.mailbox):
            if matches(msg, src, tag):
                del self.mailbox[i]
                return msg, 0.0
        if timeout is not None and timeout <= 0:
            return None, 0.0
        t0 = self.kernel.now
        self.waiting = (src, tag)
        self.wake_msg = None
        self.token = tok = object()
        if timeout is not None:
            self.kernel.schedule(t0 + timeout, self.kernel.wake, self, tok)
        self._block()
        self.waiting = None
        msg, self.wake_msg = self.wake_msg, None
        return msg, self.kernel.now - t0

    def _all_reduce(self, tensor: torch.Tensor, role: str) -> tuple[float, float]:
        self._check()
        k = self.kernel
        group = k.groups.setdefault(role, {})
        t0 = k.now
        group[self.rank] = tensor
        self.token = object()
        k.try_reduce(role)
        self._block()
        return k.last_reduce_s[role], k.now - t0 - k.last_reduce_s[role]


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
        self.error: tuple[NodeInfo, BaseException, str] | None = None
        self.groups: dict[str, dict[int, torch.Tensor]] = {}
        self.last_reduce_s: dict[str, float] = {}
        self.roles, infos = layout(programs)
        self.nodes = {r: SimNode(self, infos[r], self.roles, job, program)
                      for r, (_, program) in enumerate(programs, start=1)}

    def schedule(self, t: float, fn: Callable, *args: Any) -> None:
        heapq.heappush(self.heap, (t, next(self.seq), fn, args))

    def _switch_to(self, node: SimNode) -> None:
        node.glet.switch()

    def wake(self, node: SimNode, token: object, msg: Message | None = None) -> None:
        if node.done or node.token is not token:
            return  # stale wake-up (the node was woken otherwise, or has ended)
        node.token = None
        node.wake_msg = msg
        self._switch_to(node)

    def deliver(self, dst: int, msg: Message) -> None:
        node = self.nodes.get(dst)
        if node is None or node.done:
            return  # messages to failed or finished nodes are lost
        if node.waiting is not None and matches(msg, *node.waiting):
            self.wake(node, node.token, msg)
        else:
            node.mailbox.append(msg)

    def try_reduce(self, role: str) -> None:
        group = self.groups.get(role, {})
        members = [r for r in self.nodes.values() if r.info.role == role and not r.done]
        if not group or len(group) < len(members):
            return
        ranks = sorted(group)
        total = group[ranks[0]].clone()
        for r in ranks[1:]:
            total += group[r]
        members = [self.nodes[r].info.index if role == "worker" else None for r in ranks]
        self.last_reduce_s[role] = self.job.cluster.all_reduce_time(members, total.numel() * total.element_size())
        for r in ranks:
            group[r].copy_(total)
            node = self.nodes[r]
            node.token = tok = object()
            self.schedule(self.now + self.last_reduce_s[role], self.wake, node, tok)
        group.clear()

    def on_node_done(self, node: SimNode) -> None:
        self.finished += 1
        for role in list(self.groups):
            self.groups[role].pop(node.rank, None)
            if role == node.info.role and self.groups[role]:
                self.schedule(self.now, self.try_reduce, role)

    def kill(self, node: SimNode, exc: BaseException) -> None:
        if node.done:
            return
        node.kill = exc
        node.token = None
        self._switch_to(node)

    def crash(self, node: SimNode) -> None:
        if not node.done:
            node.crashed_at = self.now
            self.kill(node, NodeCrashed(f"worker {node.index} failed at {self.now:g} s"))

    # ---------------------------------------------------------------- the run
    def reports(self) -> list[NodeReport]:
        return [NodeReport(n.info, n.counters, n.crashed_at) for n in self.nodes.values()]

    def exposed(self) -> list[torch.Tensor]:
        return [n.exposed for n in self.nodes.values() if n.exposed is not None and n.crashed_at is None]

    def _evaluate(self) -> None:
        self.monitor.evaluate(self.now, self.exposed(), Totals.of(self.reports()))
        self.monitor.check_time(self.now)
        if not self.monitor.stop_reason:
            self.schedule(self.now + self.job.cfg.eval.interval, self._evaluate)

    def run(self) -> tuple[str, str]:
        """Run to a stopping rule; returns (status, reason)."""
        for node in self.nodes.values():
            node.glet = greenlet.greenlet(node._main)
            self.schedule(0.0, self.wake, node, node.token)
        for w, t in self.job.cluster.crash_times.items():
            self.schedule(t, self.crash, self.nodes[self.roles["worker"][w]])
        self.schedule(0.0, self._evaluate)
        max_time = self.job.cfg.stop.max_time
        if max_time:
            self.schedule(max_time, self.monitor.check_time, max_time)
        status, reason = "completed", ""
        try:
            while self.heap:
                t, _, fn, args = heapq.heappop(self.heap)
                self.now = max(self.now, t)
                fn(*args)
                if self.error:
                    info, exc, _ = self.error
                    status, reason = "failed", f"{info.role} {info.index} raised {type(exc).__name__}: {exc}"
                    break
                self.monitor.check_steps(self.total_steps)
                if self.monitor.stop_reason:
                    reason = self.monitor.stop_reason
                    break
                if self.finished == len(self.nodes):
                    reason = "every node finished"
                    break
            else:
                reason = "no node can make progress (every live node is waiting for a message)"
                status = "stopped"
        except KeyboardInterrupt:
            status, reason = "interrupted", "interrupted by the user"
        finally:
            if status != "failed":
                last = self.monitor.rows[-1]["time_s"] if self.monitor.rows else -1
                if last < self.now:
                    self.monitor.evaluate(self.now, self.exposed(), Totals.of(self.reports()))
            for node in self.nodes.values():
                self.kill(node, StopRun())
        return status, reason
