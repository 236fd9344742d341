"""Messages between the processes of a run, over TCP, that a dead peer can neither block nor break.

Every rank listens on one socket (loopback for a single-machine run). A sender opens one connection per
destination on its first message, proves that it knows the run's secret (below), then writes framed messages
(``framing``: plain-data headers, never unpickled); the receiver reads each incoming connection in a thread of
its own into one inbox, so ``recv`` from any source, with a timeout, is a plain condition wait. A peer is known
dead once its authenticated connection closes (its process is gone), a send to it fails, it announced its
failure on its last message, or the monitor says so (tag ``__died``); a send to a dead peer returns False and
never raises or waits. Sends happen on one thread of each process (the node's or the monitor's own).

**Authentication.** Every run draws a secret (``Endpoint.secret``: the launcher's random key, or under torchrun
one derived from ``EDGEML_SECRET``). A connection proves it before the receiver reads any byte of a frame, in
three messages: the sender announces the rank it claims and a random nonce; the receiver answers with a random
nonce of its own (the challenge) and its proof, HMAC-SHA256(secret, server label || both nonces || claimed rank
|| receiving rank); the sender checks that (it sends nothing to whatever does not know the secret) and answers
with its proof, the same HMAC under the client label, which the receiver checks with ``hmac.compare_digest``. A
connection that is not an edgeml handshake, claims a rank not of the run, proves wrong, or has not proved within
``AUTH_TIMEOUT_S`` is closed and counted (``refused``): it is never read further, and its close marks no rank
dead. The claimed rank is bound into the proof, so no connection can speak for another rank without the secret.
The sender waits for one answer of the receiver, once per connection. (The stream itself is neither encrypted
nor signed per frame: the secret keeps out whoever cannot prove it, not someone who can rewrite packets in
flight.)

Runtime control traffic has tags starting with ``__``; it is never counted as the algorithm's messages.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import socket
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from edgeml.runtime.base import Message, matches
from edgeml.runtime.procs.framing import FrameError, decode, encode

CONTROL = "__"
CONNECT_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 30.0
"""How long a sender waits for the receiving process to answer its connection (it may still be starting)."""
AUTH_TIMEOUT_S = 10.0
"""How long a receiver waits for a new connection's proof before it drops the connection."""
MAX_PENDING = 64
"""Connections awaiting their proof at once; more are dropped (and counted) at once."""
MAX_FRAME_BYTES = 1 << 40
"""A frame length beyond this (a corrupt stream) closes the connection instead of allocating it."""

MAGIC = b"edgeml\x02\x00"
"""The first 8 bytes each side of a connection sends (this handshake's version)."""
NONCE_BYTES = 32
_CLIENT, _SERVER = b"edgeml-procs client proof\0", b"edgeml-procs server proof\0"


def new_secret() -> bytes:
    """A run's fresh random secret."""
    return secrets.token_bytes(32)


def proof(secret: bytes, label: bytes, server_nonce: bytes, client_nonce: bytes, src: int, dst: int) -> bytes:
    """HMAC-SHA256 of one side of the handshake: rank ``src`` connecting to rank ``dst``."""
    msg = label + server_nonce + client_nonce + src.to_bytes(8, "little") + dst.to_bytes(8, "little")
    return hmac.new(secret, msg, hashlib.sha256).digest()


@dataclass
class Endpoint:
    """A rank's listening socket, every rank's address and the run's secret: what a process needs to join the
    run. (The secret travels to a child process with its arguments, over a pipe: never on a command line or in
    the environment; it is left out of ``repr``.)"""

    rank: int
    listener: socket.socket
    addresses: dict[int, tuple[str, int]]
    secret: bytes = field(repr=False)


def listen(host: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen(128)
    return s


def loopback_endpoints(world: int, secret: bytes | None = None) -> list[Endpoint]:
    """Endpoints of ``world`` ranks on this machine, listening on 127.0.0.1 only, sharing ``secret`` (by
    default a fresh one: each run draws its own)."""
    secret = new_secret() if secret is None else secret
    listeners = [listen("127.0.0.1") for _ in range(world)]
    addresses = {r: s.getsockname()[:2] for r, s in enumerate(listeners)}
    return [Endpoint(r, s, addresses, secret) for r, s in enumerate(listeners)]


def _read_exact(conn: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = conn.recv_into(view[got:])
        if n == 0:
            raise EOFError
        got += n


def _read_bytes(conn: socket.socket, n: int, deadline: float) -> bytes:
    """``n`` bytes from ``conn`` by ``deadline`` (``time.monotonic``), else ``TimeoutError``."""
    buf, got = bytearray(n), 0
    view = memoryview(buf)
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        conn.settimeout(left)
        k = conn.recv_into(view[got:])
        if k == 0:
            raise EOFError
        got += k
    return bytes(buf)


class Refused(Exception):
    """A connection did not prove the run's secret (the reason is the message)."""


class Transport:
    def __init__(self, endpoint: Endpoint):
        self.rank = endpoint.rank
        self.addresses = endpoint.addresses
        self._secret = endpoint.secret
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
        self.refused = 0
        """Incoming connections dropped because they did not prove the run's secret (in time)."""
        self.refused_why: dict[str, int] = {}
        """Those by reason (``wrong proof``, ``timed out``, ``closed before its proof``, ...)."""
        self.malformed = 0
        """Messages on authenticated connections dropped because they were not well-formed frames."""
        self._out: dict[int, socket.socket] = {}
        self._pending = threading.BoundedSemaphore(MAX_PENDING)
        self._listener = endpoint.listener
        threading.Thread(target=self._accept, name="edgeml-accept", daemon=True).start()

    # ---------------------------------------------------------------- receiving
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if not self._pending.acquire(blocking=False):
                conn.close()
                self._refuse("too many connections awaiting their proof")
                continue
            threading.Thread(target=self._read, args=(conn,), name="edgeml-recv", daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        src = None
        try:
            try:
                src = self._authenticate(conn)
            except Refused as exc:
                self._refuse(str(exc))
                return
            except (OSError, EOFError) as exc:
                self._refuse("timed out" if isinstance(exc, TimeoutError) else "closed before its proof")
                return
            finally:
                self._pending.release()
            head = bytearray(8)
            while True:
                _read_exact(conn, memoryview(head))
                n = int.from_bytes(head, "little")
                if not 8 <= n <= MAX_FRAME_BYTES:
                    _warn(f"rank {self.rank}: rank {src} sent a frame of {n} bytes (a corrupt stream); its "
                          f"connection is closed")
                    return
                buf = torch.empty(n, dtype=torch.uint8)
                _read_exact(conn, memoryview(buf.numpy()))
                self._arrive(src, buf)
        except (OSError, EOFError):
            pass  # the peer's process is gone (or this one is closing)
        finally:
            conn.close()
            if src is not None:  # only an authenticated connection speaks for its rank
                self.mark_dead(src)

    def _authenticate(self, conn: socket.socket) -> int:
        """The rank a new connection proves it speaks for (see the module docstring); raises ``Refused``."""
        deadline = time.monotonic() + AUTH_TIMEOUT_S
        hello = _read_bytes(conn, len(MAGIC) + 8 + NONCE_BYTES, deadline)
        if hello[:len(MAGIC)] != MAGIC:
            raise Refused("not an edgeml handshake")
        claimed, client_nonce = int.from_bytes(hello[len(MAGIC):len(MAGIC) + 8], "little"), hello[len(MAGIC) + 8:]
        if claimed not in self.addresses:
            raise Refused("not a rank of this run")
        server_nonce = os.urandom(NONCE_BYTES)
        conn.sendall(MAGIC + server_nonce + proof(self._secret, _SERVER, server_nonce, client_nonce, claimed,
                                                  self.rank))
        mac = _read_bytes(conn, NONCE_BYTES, deadline)
        if not hmac.compare_digest(mac, proof(self._secret, _CLIENT, server_nonce, client_nonce, claimed, self.rank)):
            raise Refused("wrong proof")
        conn.settimeout(None)
        # having answered on this connection, Linux took it for a request-response one and delays its ACKs (to
        # ride on the next answer, which never comes): back to acknowledging at once, or every large frame's
        # sendall waits on delayed ACKs
        if hasattr(socket, "TCP_QUICKACK"):
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        return claimed

    def _refuse(self, why: str) -> None:
        with self.cond:
            self.refused += 1
            self.refused_why[why] = self.refused_why.get(why, 0) + 1
            self.cond.notify_all()

    def _arrive(self, src: int, buf: torch.Tensor) -> None:
        try:
            tag, data, meta = decode(buf)
            if tag == CONTROL + "died" and type(meta.get("rank")) is not int:
                raise FrameError(f"a death notice names rank {meta.get('rank')!r}")
            for key in ("nbytes", "sent_at", "arrive_at"):
                if type(meta.get(key, 0)) not in (int, float):
                    raise FrameError(f"the transport's {key} is {meta[key]!r}, not a number")
        except FrameError as exc:  # dropped whole; the connection and its thread carry on
            with self.cond:
                self.malformed += 1
            _warn(f"rank {self.rank} dropped a malformed message from rank {src}: {exc}")
            return
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
        try:
            client_nonce = os.urandom(NONCE_BYTES)
            conn.sendall(MAGIC + self.rank.to_bytes(8, "little") + client_nonce)
            answer = _read_bytes(conn, len(MAGIC) + 2 * NONCE_BYTES, time.monotonic() + HANDSHAKE_TIMEOUT_S)
            server_nonce, mac = answer[len(MAGIC):len(MAGIC) + NONCE_BYTES], answer[len(MAGIC) + NONCE_BYTES:]
            expected = proof(self._secret, _SERVER, server_nonce, client_nonce, self.rank, dst)
            if answer[:len(MAGIC)] != MAGIC or not hmac.compare_digest(mac, expected):
                raise ConnectionError(f"rank {dst}'s address did not prove the run's secret")
            conn.sendall(proof(self._secret, _CLIENT, server_nonce, client_nonce, self.rank, dst))
        except EOFError:
            conn.close()
            raise ConnectionError(f"rank {dst}'s address closed the connection during the handshake") from None
        except OSError:
            conn.close()
            raise
        conn.settimeout(None)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._out[dst] = conn
        return conn

    def close(self) -> None:
        self._listener.close()
        for conn in self._out.values():
            conn.close()
        self._out.clear()


def _warn(line: str) -> None:
    print(f"edgeml: {line}", file=sys.stderr, flush=True)
