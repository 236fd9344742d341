"""Where an ASP round trip goes on the procs transport: a worker process pushes a LeNet-5-sized update to a
parameter-server process, which applies it and returns the model; each leg is timestamped.

The worker either pushes back to back or after a busy loop as long as a LeNet-5 step (``--busy-ms``), as in a
real run: then the server's core has gone idle and every wake-up pays the host's idle-exit latency. Legs
(median ms over the measured round trips):

  send       the worker's sendall of the encoded update (blocks until the server has read what its socket
             buffers cannot hold)
  s_recv     from the end of that sendall to the server's reader thread holding the whole message
  s_wake     from there to the server's main thread holding it (a condition-variable wake-up)
  s_apply    apply the update and send the model back
  c_recv     from the server's send to the worker's reader thread holding the whole reply
  c_wake     from there to the worker's main thread holding it

Usage: python scripts/bench_roundtrip.py [--busy-ms 0 5] [--trips 300]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

import torch

from _bench import record  # noqa: F401  (also puts the repository on the path)
from edgeml.runtime.procs import transport as T
from edgeml.runtime.procs.framing import decode, encode

PARAMS = 61_706  # LeNet-5
LEGS = ["send", "s_recv", "s_wake", "s_apply", "c_recv", "c_wake"]


class Stamped(T.Transport):
    """The transport, stamping when a reader thread has a whole message."""

    def _arrive(self, src, buf):
        self.arrived_at = time.perf_counter()
        super()._arrive(src, buf)


def _take(tr: Stamped):
    with tr.cond:
        while not tr.inbox:
            tr.cond.wait()
        return tr.inbox.popleft(), tr.arrived_at


def server(ep, out) -> None:
    torch.set_num_threads(1)
    tr = Stamped(ep)
    W = torch.zeros(PARAMS)
    rows = []
    while True:
        msg, arrived = _take(tr)
        woke = time.perf_counter()
        if msg.tag == "end":
            out.put(rows)
            return
        W.add_(msg["u"], alpha=-0.1)
        tr.send(1, "model", {"params": W}, {})
        rows.append((arrived, woke, time.perf_counter()))


def worker(ep, busy_ms: float, trips: int, out) -> None:
    torch.set_num_threads(1)
    tr = Stamped(ep)
    u = torch.randn(PARAMS)
    rows = []
    for _ in range(trips):
        t = time.perf_counter()
        while time.perf_counter() - t < busy_ms / 1e3:
            pass
        t0 = time.perf_counter()
        tr.send(0, "push", {"u": u}, {})
        sent = time.perf_counter()
        _, arrived = _take(tr)
        rows.append((t0, sent, arrived, time.perf_counter()))
    tr.send(0, "end", {}, {})
    out.put(rows)


def measure(busy_ms: float, trips: int) -> list[float]:
    ctx = mp.get_context("fork")
    eps = T.loopback_endpoints(2)
    qs, qw = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=server, args=(eps[0], qs)),
             ctx.Process(target=worker, args=(eps[1], busy_ms, trips, qw))]
    for p in procs:
        p.start()
    w, s = qw.get(), qs.get()
    for p in procs:
        p.join()
    legs = []
    for (t0, sent, c_arr, c_woke), (s_arr, s_woke, s_done) in list(zip(w, s))[trips // 6:]:
        legs.append([sent - t0, s_arr - sent, s_woke - s_arr, s_done - s_woke, c_arr - s_done, c_woke - c_arr])
    return [statistics.median(leg[i] for leg in legs) * 1e3 for i in range(len(LEGS))] + \
        [statistics.median(c_woke - t0 for t0, _, _, c_woke in w[trips // 6:]) * 1e3]


def codec_us(repeats: int = 1000) -> tuple[float, float]:
    """Microseconds to encode (framed, as sent) and to decode one update."""
    u = torch.randn(PARAMS)
    meta = {"nbytes": 4 * PARAMS, "sent_at": 0.0, "arrive_at": 0.0}
    t0 = time.perf_counter()
    for _ in range(repeats):
        encode("push", {"u": u}, meta, framed=True)
    t1 = time.perf_counter()
    buf = encode("push", {"u": u}, meta)
    for _ in range(repeats):
        decode(buf)
    return (t1 - t0) / repeats * 1e6, (time.perf_counter() - t1) / repeats * 1e6


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy-ms", type=float, nargs="+", default=[0.0, 5.0])
    ap.add_argument("--trips", type=int, default=300)
    args = ap.parse_args()
    lines = ["| busy ms before each push | " + " | ".join(LEGS) + " | round trip (median) |",
             "|---" * (len(LEGS) + 2) + "|"]
    for busy in args.busy_ms:
        m = measure(busy, args.trips)
        lines.append(f"| {busy:g} | " + " | ".join(f"{v:.3f}" for v in m) + " |")
    enc, dec = codec_us()
    lines += ["", f"{PARAMS:,} float32 parameters each way, ms. A negative leg: the receiver had the message "
              f"before the sender's sendall returned. Encoding one update takes {enc:.0f} us, decoding it "
              f"{dec:.0f} us."]
    record("roundtrip", lines)
