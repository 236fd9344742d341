"""The procs transport keeps out whoever does not know the run's secret, and its frames are plain data.

- An intruder on a running node's port (no secret, a crafted frame whose header would run code if it were
  unpickled) runs nothing, changes nothing in the run and is counted in ``meta.json``.
- The HMAC handshake accepts the run's secret and refuses any other, both ways; a refused connection (a wrong
  proof, a timeout, a close) marks no rank dead, where an authenticated one's close does.
- Frames round-trip every dtype and shape the runtime sends (empty tensors, scalars, nested plain metadata) and
  a malformed frame is refused with a clear error, also on a live connection, whose thread carries on.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from edgeml.config import load_config
from edgeml.runner import run
from edgeml.runtime.procs import launch
from edgeml.runtime.procs import framing as F
from edgeml.runtime.procs import transport as T
from edgeml.runtime.procs.framing import DTYPES, FrameError, decode, encode
from waiting import PATIENCE, wait_for


# ------------------------------------------------------------------------------------------------- helpers
def _wait(tr: T.Transport, what, within: float = PATIENCE) -> bool:
    """Wait on the transport's condition until ``what()`` holds (every change of its state notifies it)."""
    with tr.cond:
        return tr.cond.wait_for(what, timeout=within)


def _pair(secrets: tuple[bytes, bytes] | None = None) -> list[T.Transport]:
    ends = T.loopback_endpoints(2)
    if secrets:
        ends = [dataclasses.replace(e, secret=s) for e, s in zip(ends, secrets)]
    return [T.Transport(e) for e in ends]


def _closed_by_peer(conn: socket.socket, within: float = PATIENCE) -> bytes:
    """Everything the peer sent until it closed the connection (raises on a timeout)."""
    conn.settimeout(within)
    got = b""
    try:
        while chunk := conn.recv(4096):
            got += chunk
    except ConnectionResetError:  # closed with bytes of ours unread: a reset, which may overtake what it sent
        pass
    return got


def _pickle_frame(marker: Path, claimed_rank: int) -> bytes:
    """What a connection to a node sent before this transport existed: the claimed source rank, then a framed
    message whose pickled header opens (creates) ``marker`` when it is unpickled."""

    class Payload:
        def __reduce__(self):
            return open, (str(marker), "w")

    header = pickle.dumps(("push", [], {"x": Payload()}, {}))
    header += b"\0" * ((-len(header)) % 8)
    body = len(header).to_bytes(8, "little") + header
    return claimed_rank.to_bytes(8, "little") + len(body).to_bytes(8, "little") + body


# ------------------------------------------------------------------------------------------------- a real run
def _bsp(tmp_path: Path, name: str):
    # lock-step BSP (a fixed learning rate): its model after k rounds does not depend on the clock, and its bytes
    # per step and message sizes are pinned exactly; the step budget ends it a few rounds past 600 steps
    return load_config(overrides=["run.algorithm='bsp'", "cluster.workers=2", "stop.max_steps=600",
                                  "stop.max_time=120", "eval.interval=0.25",
                                  f"run.out='{tmp_path}'", f"run.name='{name}'"])


def _intrude(addresses: dict, evals: Path, marker: Path, out: dict) -> None:
    """Once the run is under way, connect to worker 0's node (rank 2) claiming to be the PS (rank 1), send the
    crafted frame and see what comes back."""
    try:
        wait_for(lambda: 2 in addresses and evals.exists() and len(evals.read_text().splitlines()) >= 2,
                 "the run's first evaluation", every=0.05)
        with socket.create_connection(addresses[2], timeout=10) as conn:
            try:
                conn.sendall(_pickle_frame(marker, claimed_rank=1))
            except OSError:
                pass  # the node may close before it has taken every byte
            out["answer"] = _closed_by_peer(conn)
        out["at"] = time.monotonic()
    except BaseException as exc:  # noqa: BLE001 (reported by the test)
        out["error"] = exc


@pytest.mark.slow
def test_an_intruder_without_the_secret_runs_nothing_changes_nothing_and_is_counted(tmp_path, monkeypatch):
    marker = tmp_path / "intruder-was-here"
    addresses: dict = {}
    real = launch.loopback_endpoints

    def spy(world, *args, **kwargs):  # the launcher's endpoints: where the nodes listen
        ends = real(world, *args, **kwargs)
        addresses.update(ends[0].addresses)
        return ends

    monkeypatch.setattr(launch, "loopback_endpoints", spy)
    seen: dict = {}
    intruder = threading.Thread(target=_intrude, args=(addresses, tmp_path / "intruded" / "evals.csv", marker, seen),
                                daemon=True)
    intruder.start()
    intruded = run(_bsp(tmp_path, "intruded"))
    ended = time.monotonic()
    intruder.join(PATIENCE)
    assert "error" not in seen, seen.get("error")
    assert not marker.exists()  # nothing was unpickled
    # the node answered nothing (what it read was no handshake) and closed the connection while the run went on
    assert seen["answer"] == b""
    assert seen["at"] < ended
    clean = run(_bsp(tmp_path, "clean"))

    metas = {p.name: json.loads((p / "meta.json").read_text()) for p in (intruded, clean)}
    assert metas["intruded"]["refused_connections"] == {"total": 1, "by_rank": {"2": 1}, "malformed": 0,
                                                        "why": {"not an edgeml handshake": 1}}
    assert metas["clean"]["refused_connections"]["total"] == 0

    summaries = {p.name: json.loads((p / "summary.json").read_text()) for p in (intruded, clean)}
    for s in summaries.values():
        assert (s["status"], s["stop_reason"]) == ("completed", "step budget 600 reached")
        assert s["messages_lost"] == 0 and s["crashed_workers"] == 0
    assert not (intruded / "error.txt").exists()
    # what a run of lock-step BSP pins: the same messages of the same sizes, one push and one model per step
    sizes = {p.name: pd.read_csv(p / "messages.csv").groupby(["role", "tag"])[["min_bytes", "max_bytes"]].agg(
        ["min", "max"]) for p in (intruded, clean)}
    assert sizes["intruded"].equals(sizes["clean"]), pd.concat(sizes, axis=1)
    push, model = (sizes["clean"].loc[("worker", "push")].iloc[0], sizes["clean"].loc[("ps", "model")].iloc[0])
    for p in (intruded, clean):
        nodes = pd.read_csv(p / "nodes.csv")
        workers, ps = nodes[nodes.role == "worker"], nodes[nodes.role == "ps"].iloc[0]
        # one push per step, but for a last step that the stop may cut before its push (a busy host makes it
        # likely)...
        assert ((workers.steps - 1 <= workers.messages_sent) & (workers.messages_sent <= workers.steps)).all()
        assert (workers.bytes_sent == workers.messages_sent * push).all()
        # ...answered by one model, but for the last round, which the stop may cut short
        pushes = workers.messages_sent.sum()
        assert pushes - len(workers) <= ps.messages_sent <= pushes
        assert ps.bytes_sent == ps.messages_sent * model
        # in lock step: no worker was cut off from the PS (whose rank the intruder claimed)
        assert workers.steps.max() - workers.steps.min() <= 1
    # the model after about the same number of rounds (the step budget stops each run a few rounds past it)
    assert summaries["intruded"]["final_accuracy"] == pytest.approx(summaries["clean"]["final_accuracy"], abs=0.03)


# ------------------------------------------------------------------------------------------------- the handshake
def test_the_handshake_accepts_the_runs_secret():
    a, b = _pair()
    assert a.send(1, "ping", {"x": torch.arange(3)}, {"k": 1})
    assert _wait(b, lambda: b.inbox)
    msg = b.inbox.popleft()
    assert (msg.src, msg.tag, msg.meta["k"]) == (0, "ping", 1) and torch.equal(msg["x"], torch.arange(3))
    assert (a.refused, b.refused) == (0, 0)
    # an authenticated connection's close does speak for its rank: the peer's process is gone
    a.close()
    assert _wait(b, lambda: 0 in b.dead)


def test_a_wrong_secret_is_refused_and_marks_no_rank_dead():
    a, b = _pair((b"a" * 32, b"b" * 32))
    # the sender finds the receiver's proof wrong and sends nothing; the receiver counts a connection that never
    # proved anything (a made-up proof is refused too: see below)
    assert not a.send(1, "ping", {"k": 1}, {})
    assert _wait(b, lambda: b.refused == 1)
    assert b.refused_why == {"closed before its proof": 1} and not b.inbox and not b.dead


def test_a_receiver_without_the_secret_gets_nothing():
    """The receiver proves the secret first: a sender sends nothing to whatever answers on a rank's address."""
    ends = T.loopback_endpoints(2)
    impostor = socket.socket()
    impostor.bind(("127.0.0.1", 0))
    impostor.listen()
    sender = T.Transport(dataclasses.replace(ends[0], addresses={1: impostor.getsockname()[:2]}))
    got: list[bytes] = []

    def serve() -> None:  # reads the sender's hello, answers with a well-formed challenge and a made-up proof
        conn, _ = impostor.accept()
        got.append(conn.recv(len(T.MAGIC) + 8 + T.NONCE_BYTES, socket.MSG_WAITALL))
        conn.sendall(T.MAGIC + b"n" * T.NONCE_BYTES + b"\0" * 32)
        got.append(_closed_by_peer(conn))  # what the sender sends after that: nothing
        conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    assert not sender.send(1, "secret-model", {"x": torch.ones(1000)}, {})
    server.join(10)
    assert got[0][:len(T.MAGIC) + 8] == T.MAGIC + (0).to_bytes(8, "little")  # its hello: who it says it is
    assert got[1] == b"" and 1 in sender.dead  # then nothing; that address is dead to the sender
    impostor.close()
    sender.close()


def _hello(conn: socket.socket, rank: int) -> tuple[bytes, bytes]:
    """Send a handshake's hello claiming ``rank``; (the client nonce, the receiver's answer)."""
    mine = os.urandom(T.NONCE_BYTES)
    conn.sendall(T.MAGIC + rank.to_bytes(8, "little") + mine)
    return mine, conn.recv(len(T.MAGIC) + 2 * T.NONCE_BYTES, socket.MSG_WAITALL)


def test_a_connection_that_claims_a_rank_without_the_secret_cannot_mark_it_dead():
    _, b = _pair()
    # claims rank 0 with a made-up proof, then closes: refused, and rank 0 is not dead
    with socket.create_connection(b.addresses[1]) as conn:
        _, answer = _hello(conn, 0)
        assert answer[:len(T.MAGIC)] == T.MAGIC  # the challenge and the receiver's proof
        conn.sendall(b"m" * 32)
        assert _closed_by_peer(conn) == b""
    socket.create_connection(b.addresses[1]).close()  # one that closes without a word
    with socket.create_connection(b.addresses[1]) as conn:  # one that claims a rank the run does not have
        conn.sendall(T.MAGIC + (7).to_bytes(8, "little") + b"c" * T.NONCE_BYTES)
        assert _closed_by_peer(conn) == b""
    assert _wait(b, lambda: b.refused == 3)
    assert b.refused_why == {"wrong proof": 1, "closed before its proof": 1, "not a rank of this run": 1}
    assert not b.dead and not b.inbox


def test_a_connection_that_stays_silent_is_dropped_when_its_time_is_up(monkeypatch):
    monkeypatch.setattr(T, "AUTH_TIMEOUT_S", 0.3)
    _, b = _pair()
    with socket.create_connection(b.addresses[1]) as conn:
        assert _closed_by_peer(conn) == b""  # dropped, unanswered
    with socket.create_connection(b.addresses[1]) as conn:  # one that trickles its hello: the same deadline
        for byte in T.MAGIC:
            conn.sendall(bytes([byte]))
            if _wait(b, lambda: b.refused == 2, within=0.05):
                break
        assert _closed_by_peer(conn) == b""
    assert _wait(b, lambda: b.refused == 2)
    assert b.refused_why == {"timed out": 2} and not b.dead


def test_a_proof_is_bound_to_the_rank_it_claims():
    """A proof made for one rank does not pass for another: the claimed rank is inside the MAC."""
    secret = b"s" * 32
    _, b = _pair((secret, secret))
    with socket.create_connection(b.addresses[1]) as conn:
        mine, answer = _hello(conn, 1)  # claims rank 1...
        theirs = answer[len(T.MAGIC):len(T.MAGIC) + T.NONCE_BYTES]
        assert answer[len(T.MAGIC) + T.NONCE_BYTES:] == T.proof(secret, T._SERVER, theirs, mine, 1, 1)
        conn.sendall(T.proof(secret, T._CLIENT, theirs, mine, 0, 1))  # ...with a proof made for rank 0
        assert _closed_by_peer(conn) == b""
    assert _wait(b, lambda: b.refused == 1) and b.refused_why == {"wrong proof": 1}


# ------------------------------------------------------------------------------------------------- framing
SHAPES = [(), (0,), (1,), (7,), (3, 0, 2), (2, 3, 4)]


@pytest.mark.parametrize("dtype", sorted(DTYPES, key=str))
def test_frames_round_trip_every_dtype_and_shape(dtype):
    dt = DTYPES[dtype]
    data = {}
    for i, shape in enumerate(SHAPES):
        x = torch.arange(math.prod(shape), dtype=torch.float64).reshape(shape) - 2
        data[f"t{i}"] = (x > 0) if dt == torch.bool else x.to(dt)
    data["strided"] = torch.arange(12).reshape(3, 4).t().to(dt)  # not contiguous
    tag, out, meta = decode(encode("push", data, {"nbytes": 12}))
    assert tag == "push" and meta == {"nbytes": 12} and list(out) == list(data)
    for key, x in data.items():
        assert out[key].dtype == x.dtype and out[key].shape == x.shape and torch.equal(out[key], x), key


def test_frames_carry_parameters_and_views_as_plain_tensors():
    w = torch.nn.Parameter(torch.randn(4, 3))
    _, out, _ = decode(encode("model", {"w": w, "t": w.t(), "row": w[1]}, {}))
    assert not out["w"].requires_grad and torch.equal(out["w"], w.detach())
    assert torch.equal(out["t"], w.detach().t()) and torch.equal(out["row"], w.detach()[1])


def test_frames_round_trip_scalars_and_nested_plain_metadata():
    data = {"k": 3, "big": 2 ** 70, "x": 2.5, "neg0": -0.0, "inf": float("-inf"), "flag": True, "none": None,
            "s": "ünïcode ✓", "f32": np.float32(0.1), "i64": np.int64(-5), "b": np.bool_(True)}
    meta = {"round": ["worker", 3], "members": [1, 2, 3], "t": (1, (2.5, "x"), None), "empty": {}, "nil": [],
            "by_rank": {1: [0, 1], 2: {7: "cpu"}}, "lost": {(1, "push"): 3}, "$dollar": {"$": 1},
            "series": [("staleness", {"time_s": 0.5, "worker": 0, "staleness": 0})],
            "nested": {"a": [{"b": (torch.ones(2), np.arange(3, dtype=np.int16))}]}, "nan": float("nan")}
    tag, out, got = decode(encode("stats", data, meta))
    for key, value in data.items():
        assert type(out[key]) is type(value) and (out[key] == value), key
    assert str(out["neg0"]) == "-0.0"
    assert math.isnan(got.pop("nan")) and math.isnan(meta.pop("nan"))
    nested = got.pop("nested")["a"][0]["b"]
    assert torch.equal(nested[0], torch.ones(2)) and nested[1].dtype == np.int16 and list(nested[1]) == [0, 1, 2]
    meta.pop("nested")
    assert got == meta
    assert type(got["t"]) is tuple and type(got["t"][1]) is tuple and type(got["round"]) is list
    assert list(got["by_rank"]) == [1, 2] and list(got["lost"]) == [(1, "push")]


def test_a_frame_refuses_to_carry_what_is_not_plain_data():
    with pytest.raises(TypeError, match="cannot carry a builtins.set"):
        encode("push", {"x": {1, 2}}, {})
    with pytest.raises(TypeError, match="cannot carry a builtins.object"):
        encode("push", {}, {"x": object()})


def _frame(header: bytes, tail: bytes = b"") -> torch.Tensor:
    """A frame with this header (zero-padded to 8) and these tensor bytes."""
    header += b"\0" * ((-len(header)) % 8)
    return torch.frombuffer(bytearray(len(header).to_bytes(8, "little") + header + tail), dtype=torch.uint8)


def _head(tensors: int = 0, entries: int = 0, tag: bytes = b"t", version: int = 1, flags: int = 0) -> bytes:
    return struct.pack("<BBIII", version, flags, tensors, entries, len(tag)) + tag


def _entry(kind: int, key: bytes = b"x", value: bytes = b"", section: int = 0) -> bytes:
    return struct.pack("<BBH", section, kind, len(key)) + key + value


def _plain(text: str, key: bytes = b"x") -> bytes:
    return _entry(F.PLAIN, key, struct.pack("<I", len(text.encode())) + text.encode())


def _float32(*shape: int) -> bytes:  # a tensor description: float32 (code 11), its sizes
    return struct.pack("<BB", F.DTYPE_NAMES.index("float32"), len(shape)) + b"".join(struct.pack("<Q", n)
                                                                                      for n in shape)


@pytest.mark.parametrize("buf, error", [
    (torch.zeros(3, dtype=torch.uint8), "at least 8 bytes"),
    (_frame(_head())[:8].clone().fill_(255), "not a multiple of 8 within the frame"),
    (_frame(pickle.dumps(("push", [], {}, {}))), "not a version-1 frame header"),
    (_frame(_head(version=2)), "not a version-1 frame header"),
    (_frame(_head(flags=1)), "not a version-1 frame header"),
    (_frame(b"\1\0"), "ends inside its first fields"),
    (_frame(_head(tag=b"\xff\xfe")), "the tag is not UTF-8"),
    (_frame(struct.pack("<BBIII", 1, 0, 0, 0, 100) + b"t"), "ends inside the tag"),
    (_frame(_head(tensors=1) + struct.pack("<BB", 200, 1)), "unknown dtype \\(code 200\\)"),
    (_frame(_head(tensors=1) + struct.pack("<BB", 11, 65)), "65 dimensions"),
    (_frame(_head(tensors=1) + struct.pack("<BB", 11, 2) + struct.pack("<Q", 2)), "ends inside tensor 0's description"),
    (_frame(_head(tensors=1) + _float32(8), b"\0" * 16), "lies beyond the frame's end"),
    (_frame(_head(tensors=1) + _float32(0, 1 << 63)), "impossible size"),
    (_frame(_head(tensors=1) + _float32(2), b"\0" * 16), "holds 16 bytes of tensors, its header describes 8"),
    (_frame(_head(entries=1) + _entry(F.FLOAT)), "ends inside entry 'x'"),  # 16 bytes: no padding to read
    (_frame(_head(entries=1) + _entry(F.INT, section=2)), "unknown section 2"),
    (_frame(_head(entries=1) + _entry(42)), "unknown kind 42"),
    (_frame(_head(entries=1) + _entry(F.TENSOR, value=struct.pack("<I", 0))), "refers to tensor 0, of 0"),
    (_frame(_head(entries=1) + _entry(F.STR, value=struct.pack("<I", 2) + b"\xc3(")), "entry 'x' is not UTF-8"),
    (_frame(_head(entries=1) + _plain("{'a': 1}")), "entry 'x' is not JSON"),
    (_frame(_head(entries=1) + _plain('{"$": "pickle", "v": "gASV"}')), "unknown or malformed tagged value"),
    (_frame(_head(entries=1) + _plain('{"$": "np", "dtype": "object", "v": 1}')), "unknown or malformed tagged"),
    (_frame(_head(entries=1) + _plain('{"$": "tensor", "i": 0}')), "a reference to tensor 0, of 0"),
    (_frame(_head(entries=1) + _plain('{"$": "dict", "items": [[[1], 2]]}')), "not hashable"),
    (_frame(_head(entries=1) + _plain("[" * 80 + "]" * 80)), "nest deeper than 64"),
    (_frame(_head(entries=1) + _plain("[" * 100000 + "]" * 100000)), "not JSON \\(or nests too deep\\)"),
    (_frame(_head() + b"\0" * 7 + b"garbage!"), "bytes past its last entry"),
])
def test_a_malformed_frame_is_refused_with_a_clear_error(buf, error):
    with pytest.raises(FrameError, match=error):
        decode(buf)


def test_a_pickled_header_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    frame = _pickle_frame(marker, 0)[16:]  # what follows the rank and the length prefix
    with pytest.raises(FrameError, match="not a version-1 frame header"):
        decode(torch.frombuffer(bytearray(frame), dtype=torch.uint8))
    assert not marker.exists()


def test_a_malformed_frame_on_a_live_connection_is_dropped_and_the_connection_carries_on(tmp_path, capfd):
    a, b = _pair()
    assert a.send(1, "first", {}, {})
    assert _wait(b, lambda: b.inbox)
    marker = tmp_path / "ran"
    bad = _pickle_frame(marker, 0)[8:]  # length-prefixed, as the transport frames a message
    a._out[1].sendall(bad)
    a._out[1].sendall(bytes(encode("__died", {}, {"rank": "everyone"}, framed=True).numpy()))
    assert a.send(1, "after", {"k": 2}, {})
    assert _wait(b, lambda: any(m.tag == "after" for m in b.inbox))
    assert [m.tag for m in b.inbox] == ["first", "after"] and b.malformed == 2
    assert not b.dead and b.refused == 0 and not marker.exists()
    err = capfd.readouterr().err
    assert "rank 1 dropped a malformed message from rank 0: the header is not a version-1 frame header" in err
    assert "a death notice names rank 'everyone'" in err


# ------------------------------------------------------------------------------------------------- torchrun
def test_torchrun_needs_a_secret_on_every_machine(monkeypatch):
    from edgeml.errors import UserError
    from edgeml.runtime.procs import torchrun

    monkeypatch.delenv("EDGEML_SECRET", raising=False)
    with pytest.raises(UserError, match="under torchrun, set EDGEML_SECRET to the same secret"):
        torchrun.shared_secret()
    monkeypatch.setenv("EDGEML_SECRET", "short")
    with pytest.raises(UserError, match="at least 16 characters.*it has 5"):
        torchrun.shared_secret()
    monkeypatch.setenv("EDGEML_SECRET", "x" * 16)
    assert torchrun.shared_secret() == b"x" * 16


def _rank_endpoint(rank: int, out: dict) -> None:
    from edgeml.runtime.procs import torchrun

    try:
        out[rank] = torchrun._endpoint()[0]
    except BaseException as exc:  # noqa: BLE001 (reported by the test)
        out[rank] = exc


@pytest.mark.parametrize("same", [True, False])
def test_torchrun_ranks_key_the_run_from_the_shared_secret_and_refuse_another(monkeypatch, same):
    """Through torchrun's store (a real TCPStore here), two ranks derive the same per-run key from the same
    EDGEML_SECRET; given different ones, both stop with one line each instead of waiting for each other."""
    import datetime

    import torch.distributed as dist

    from edgeml.errors import UserError

    timeout = datetime.timedelta(seconds=30)
    store = dist.TCPStore("127.0.0.1", 0, None, True, timeout=timeout)
    clients = {r: dist.TCPStore("127.0.0.1", store.port, None, False, timeout=timeout) for r in (0, 1)}  # one a rank
    monkeypatch.setattr(dist, "rendezvous", lambda url, rank, world: iter([(clients[rank], rank, world)]))
    for key, value in {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
                       "TORCHELASTIC_RUN_ID": "t", "TORCHELASTIC_RESTART_COUNT": "0", "RANK": "0",
                       "EDGEML_SECRET": "a" * 20}.items():
        monkeypatch.setenv(key, value)
    out: dict = {}
    rank0 = threading.Thread(target=_rank_endpoint, args=(0, out), daemon=True)
    rank0.start()
    store.wait(["edgeml/t/0/salt"])  # rank 0 has read its environment and drawn the run's salt
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("EDGEML_SECRET", "a" * 20 if same else "b" * 20)
    _rank_endpoint(1, out)
    rank0.join(30)
    if same:
        assert out[0].secret == out[1].secret and out[0].addresses == out[1].addresses
        assert out[0].secret not in (b"a" * 20,)  # a key of this run, not the shared secret itself
        for e in out.values():
            e.listener.close()
    else:
        assert isinstance(out[1], UserError) and "differs from rank 0's" in str(out[1])
        assert isinstance(out[0], UserError) and "rank 1 was given another EDGEML_SECRET" in str(out[0])
