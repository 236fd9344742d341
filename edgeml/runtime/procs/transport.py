"""Messages between the processes of a run, over TCP, that a dead peer can neither block nor break.

Every rank listens on one socket (loopback for a single-machine run). A sender opens one connection per
destination on its first message, announces its rank, then writes framed messages (``framing``); the
receiver reads each incoming connection in a thread of its own into one inbox, so ``recv`` from any source,
with a timeout, is a plain condition wait. A peer is known dead once its connection closes (its process is
gone), a send to it fails, it announced its failure on its last message, or the monitor says so (tag
``__died``); a send to a dead peer returns False and never raises or waits. Sends happen on one thread of
each process (the node's or the monitor's own).

Runtime control traffic has tags starting with ``__``; it is never counted as the algorithm's messages.
"""

from __future__ import annotations

import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import Callable

import torch

from edgeml.runtime.base import Message, matches
from edgeml.runtime.procs.framing import decode, encode

CONTROL = "__"
CONNECT_TIMEOUT_S = 10.0


@dataclass
class Endpoint:
    """A rank's listening socket and every rank's address: what a process needs to join the run."""

    rank: int
    listener: socket.socket
    addresses: dict[int, tuple[str, int]]


def listen(host: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(128)
    return s


def loopback_endpoints(world: int) -> list[Endpoint]:
    """Endpoints of ``world`` ranks on this machine, listening on 127.0.0.1 only."""
    listeners = [listen("127.0.0.1") for _ in range(world)]
    addresses = {r: s.getsockname()[:2] for r, s in enumerate(listeners)}
    return [Endpoint(r, s, addresses) for r, s in enumerate(listeners)]


def _read_exact(conn: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            raise EOFError
        got += n


class Transport:
    def __init__(self, endpoint: Endpoint):
        self.rank = endpoint.rank
        self.addresses = endpoint.addresses
        self.inbox: deque[Message] = deque()
        self.cond = threading.Condition()
        self.dead: set[int] = set()
        self.stopped = threading.Event()
        self.sent = 0
        self.arrived = 0
        """Messages between nodes (not to or from the monitor) sent and received: equal when none is in flight."""
        self.ended_at: float | None = None
        self.lost: dict[tuple[int, str], int] = {}
        """(sender, tag) -> algorithm messages that reached this node after its program ended."""
        self._out: dict[int, socket.socket] = {}
        self._listener = endpoint.listener
        threading.Thread(target=self._accept, name="edgeml-accept", daemon=True).start()

    # ---------------------------------------------------------------- receiving
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), name="edgeml-recv", daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        src = None
        try:
            head = bytearray(8)
            _read_exact(conn, memoryview(head))
            src = int.from_bytes(head, "little")
            while True:
                _read_exact(conn, memoryview(head))
                buf = torch.empty(int.from_bytes(head, "little"), dtype=torch.uint8)
                _read_exact(conn, memoryview(buf.numpy()))
                self._arrive(src, buf)
        except (OSError, EOFError):
            pass  # the peer's process is gone (or this one is closing)
        finally:
            conn.close()
            if src is not None:
                self.mark_dead(src)

    def _arrive(self, src: int, buf: torch.Tensor) -> None:
        tag, data, meta = decode(buf)
        if tag == CONTROL + "stop":  # acted on here: no thread has to watch the inbox for it
            self.stopped.set()
        with self.cond:
            if tag == CONTROL + "died":
                self.dead.add(meta["rank"])
            elif tag != CONTROL + "stop":
                if src and self.rank:
                    self.arrived += 1
                if meta.get("last"):  # the sender failed right after sending this
                    self.dead.add(src)
                msg = Message(src, tag, data, meta.get("nbytes", 0), meta.get("sent_at", 0.0),
                              meta.get("arrive_at", 0.0), meta)
                if self.ended_at is not None and not tag.startswith(CONTROL):
                    self._lose(msg)
                else:
                    self.inbox.append(msg)
            self.cond.notify_all()

    def _lose(self, msg: Message) -> None:
        if not self.stopped.is_set():  # at the end of the run, what is in flight is simply not delivered
            self.lost[(msg.src, msg.tag)] = self.lost.get((msg.src, msg.tag), 0) + 1

    def mark_dead(self, rank: int) -> None:
        with self.cond:
            self.dead.add(rank)
            self.cond.notify_all()

    def end(self, t: float) -> None:
        """This node's program ended at ``t``: messages that arrive later (on the link model's clock) are lost."""
        with self.cond:
            self.ended_at = t
            kept: deque[Message] = deque()
            for msg in self.inbox:
                if msg.arrive_at > t and not msg.tag.startswith(CONTROL):
                    self._lose(msg)
                else:
                    kept.append(msg)
            self.inbox = kept

    def take(self, src: int | None, tag: str | None, now: float,
             consume: bool = True) -> tuple[Message | None, float | None]:
        """A matching message deliverable at ``now`` (left in the inbox unless ``consume``), else the earliest
        time one becomes deliverable (call under ``cond``)."""
        soonest = None
        for i, msg in enumerate(self.inbox):
            if matches(msg, src, tag):
                if msg.arrive_at <= now:
                    if consume:
                        del self.inbox[i]
                    return msg, None
                soonest = msg.arrive_at if soonest is None else min(soonest, msg.arrive_at)
        return None, soonest

    def take_where(self, keep: Callable[[Message], bool]) -> list[Message]:
        """Remove and return every message for which ``keep`` holds (call under ``cond``)."""
        taken = [m for m in self.inbox if keep(m)]
        if taken:
            self.inbox = deque(m for m in self.inbox if not keep(m))
        return taken

    # ---------------------------------------------------------------- sending
    def send(self, dst: int, tag: str, data: dict, meta: dict) -> bool:
        """Send a message; False (and ``dst`` is marked dead) if its process cannot be reached."""
        if dst in self.dead:
            return False
        framed = encode(tag, data, meta, framed=True)
        try:
            conn = self._out.get(dst) or self._connect(dst)
            conn.sendall(memoryview(framed.numpy()))
        except OSError:
            conn = self._out.pop(dst, None)
            if conn is not None:
                conn.close()
            self.mark_dead(dst)
            return False
        if dst and self.rank:
            self.sent += 1
        return True

    def _connect(self, dst: int) -> socket.socket:
        conn = socket.create_connection(self.addresses[dst], timeout=CONNECT_TIMEOUT_S)
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.sendall(self.rank.to_bytes(8, "little"))
        self._out[dst] = conn
        return conn

    def close(self) -> None:
        self._listener.close()
        for conn in self._out.values():
            conn.close()
        self._out.clear()
