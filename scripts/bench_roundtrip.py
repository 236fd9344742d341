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

``--against TREE`` compares this checkout with another one (e.g. ``git worktree add /tmp/base HEAD``): the two
run in turn, ``--rounds`` times each in the order ABBA, each in a fresh interpreter importing its own edgeml, and
the result (median round trip of each, their ratio as throughput, the host's load) goes to
``results/benchmarks/transport_auth.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


_ONE = """
import json, sys, timeit
sys.path.insert(0, "scripts")
import torch
import bench_roundtrip as b
import resource
def measured(busy):  # the legs, and the CPU time of the server and the worker processes per round trip (ms)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    legs = b.measure(busy, TRIPS)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / TRIPS * 1e3
    return legs + [cpu - busy]  # less the busy loop
out = {"edgeml": b.T.__file__, "legs": [measured(busy) for busy in BUSY]}
torch.set_num_threads(1)
u = torch.randn(b.PARAMS)
meta = {"nbytes": 4 * b.PARAMS, "sent_at": 0.0, "arrive_at": 0.0}
buf = b.encode("push", {"u": u}, meta)
best = lambda f: min(timeit.repeat(f, number=200, repeat=7)) / 200 * 1e6
out["codec"] = [best(lambda: b.encode("push", {"u": u}, meta, framed=True)), best(lambda: b.decode(buf))]
print(json.dumps(out))
"""


def _one(tree: Path, busy: list[float], trips: int) -> dict:
    """One measurement of the checkout ``tree``, in an interpreter of its own that imports that checkout's edgeml
    and ``scripts/bench_roundtrip.py``: its ``measure`` for each ``busy`` (the legs and the round trip, medians
    in ms), and the best time to encode and to decode one update (us, one thread)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = _ONE.replace("TRIPS", str(trips)).replace("BUSY", repr(busy))
    out = subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                         check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert Path(got["edgeml"]).resolve().is_relative_to(tree.resolve()), got["edgeml"]
    return got


def compare(against: Path, busy: list[float], trips: int, rounds: int) -> None:
    """This checkout (new) against ``against`` (base), interleaved ABBA; ratios are new/base throughput (base
    round trip / new round trip)."""
    here = Path(__file__).resolve().parents[1]
    runs: dict[str, list[dict]] = {"new": [], "base": []}
    loads = [os.getloadavg()[0]]
    for r in range(rounds):
        for name in (("new", "base") if r % 2 == 0 else ("base", "new")):
            runs[name].append(_one(here if name == "new" else against, busy, trips))
            loads.append(os.getloadavg()[0])
    lines = [f"This checkout (new) against `{against}` (base): {rounds} measurements each, interleaved ABBA, each in a "
             f"fresh interpreter importing its own edgeml and running its own `measure` ({trips} round trips of "
             f"{PARAMS:,} float32 parameters each way, the first sixth discarded). Host: {os.cpu_count()} CPUs, "
             f"1-minute load average {min(loads):.1f}-{max(loads):.1f} (median {statistics.median(loads):.1f}) "
             f"while measuring.", "",
             "| busy ms before each push | base round trip (ms, median of the measurements' medians) | new (ms) | "
             "new/base throughput | paired new/base, median (quartiles) | CPU ms per round trip, base / new | "
             "legs base | legs new |", "|---|---|---|---|---|---|---|---|"]
    for i, b in enumerate(busy):
        rt = {k: [x["legs"][i][len(LEGS)] for x in v] for k, v in runs.items()}
        cpu = {k: statistics.median(x["legs"][i][-1] for x in v) for k, v in runs.items()}
        base, new = statistics.median(rt["base"]), statistics.median(rt["new"])
        paired = sorted(o / n for o, n in zip(rt["base"], rt["new"]))
        legs = {k: " / ".join(f"{statistics.median(x['legs'][i][j] for x in v):.3f}" for j in range(len(LEGS)))
                for k, v in runs.items()}
        lines.append(f"| {b:g} | {base:.3f} | {new:.3f} | {base / new:.3f} | {statistics.median(paired):.3f} "
                     f"({_pct(paired, 0.25):.3f}-{_pct(paired, 0.75):.3f}) | {cpu['base']:.3f} / {cpu['new']:.3f} | "
                     f"{legs['base']} | {legs['new']} |")
    codec = {k: [statistics.median(x["codec"][j] for x in v) for j in (0, 1)] for k, v in runs.items()}
    lines += ["", f"Legs: {' / '.join(LEGS)} (see the top of `scripts/bench_roundtrip.py`). CPU per round trip: "
              f"user + system time of the server and worker processes over the measurement (start and end "
              f"included, the busy loop taken off), divided by the round trips: unlike the round trip, hardly "
              f"touched by the host's other load. Encoding one update "
              f"(framed, one thread, best of 7 x 200 calls): {codec['base'][0]:.1f} us (base), "
              f"{codec['new'][0]:.1f} us (new); decoding it: {codec['base'][1]:.1f} us, {codec['new'][1]:.1f} us "
              f"(medians over the measurements)."]
    record("transport_auth", lines)


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--busy-ms", type=float, nargs="+", default=[0.0, 5.0])
    ap.add_argument("--trips", type=int, default=300)
    ap.add_argument("--against", type=Path, help="another checkout to compare with (see the module docstring)")
    ap.add_argument("--rounds", type=int, default=6)
    args = ap.parse_args()
    if args.against:
        compare(args.against, args.busy_ms, args.trips, args.rounds)
        sys.exit(0)
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
