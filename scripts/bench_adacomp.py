"""AdaComp at the paper's scale: the cost of one parameter-server update, and the memory of a 200-worker CNN run.

Cost (one process, one torch thread, the three methods' pieces alternating in rounds so that a drifting host
affects all alike): per update, a worker's mini-batch gradient of the adacomp-cnn at batch 10 (the work every
method shares), each method's selection at the worker (AdaComp: the c largest of every layer and their
encoding, AdaComp Alg. 1 lines 13-16; Comp-ASGD: the c largest of the whole update; ASGD: none) and each
method's step at the PS (AdaComp: Alg. 2, sigma_k for the kept entries from the touch history, alpha / sigma_k,
the apply, the history's record and the pull that answers; ASGD and Comp-ASGD: alpha / sigma on the whole
update or on its kept entries), with ``--workers`` workers pushing in random order, so that the history holds
as many outstanding pulls as a run's. Reported in microseconds and as ratios to the gradient.

Selection on gradients that are mostly zeros: ``top_c`` against its former self (before it counted zeros
apart), for Comp-ASGD and AdaComp, at several shares of exact zeros (a model with dead units).

Memory: ``edgeml run`` of ASGD and of AdaComp (each ``--c``) with ``--workers`` workers on the sim backend for
``--updates`` PS updates, each in a child process: its peak resident memory (ru_maxrss), and for AdaComp the
largest ``ps_memory`` the run logged (the staleness history, with its bound). Target: peak < 4 GiB.

Usage: python scripts/bench_adacomp.py [--workers 200] [--c 0.1 0.01 0.001] [--updates 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
import numpy as np  # noqa: E402
import torch  # noqa: E402

from _bench import ROOT, record  # noqa: E402
from edgeml.algorithms.adacomp import adacomp_update, staleness_rate  # noqa: E402
from edgeml.algorithms.adacomp_compression import largest_mask, keep_count, top_c  # noqa: E402
from edgeml.algorithms.adacomp_staleness import TouchHistory  # noqa: E402
from edgeml.config import load_config  # noqa: E402
from edgeml.runner import prepare  # noqa: E402
from edgeml.runtime import wire  # noqa: E402

TARGET_BYTES = 4 * 2 ** 30
SETTINGS = ["run.backend='sim'", "data.dataset='fashion-mnist'", "data.batch_size=10", "model.name='adacomp-cnn'",
            "cluster.base_step_s=0.01", "cluster.random_wait_s=0.01", "stop.max_time=100000",
            "eval.interval=0.05", "eval.test_samples=2000"]


class Methods:
    """Each method's worker selection and PS step on a shared model, with ``workers`` pulls outstanding."""

    def __init__(self, trainer, workers: int, c: float, seed: int = 0):
        self.trainer, self.workers, self.c = trainer, workers, c
        self.spans = trainer.spans
        self.W = trainer.params.detach().clone()
        size = self.W.numel()
        kept = sum(keep_count(c, n) for _, n in self.spans)
        self.history = TouchHistory(size, -(-size // kept), range(workers))
        self.version = 0
        self.pulled = [0] * workers
        self.gen = torch.Generator().manual_seed(seed)

    def next_worker(self) -> int:
        return int(torch.randint(self.workers, (1,), generator=self.gen))

    def gradient(self) -> torch.Tensor:
        self.trainer.gradient()
        return self.trainer.grad

    # worker side
    def select_adacomp(self, g):
        return wire.sparse_layers(g, top_c(g, self.c, self.spans), self.spans)

    def select_comp_asgd(self, g):
        return wire.sparse(g, top_c(g, self.c, [(0, g.numel())]))

    def select_one_partition(self, g):
        """AdaComp's selection by one partition of each whole layer (what ``top_c`` did before its sampled
        pre-selection): the same entries, checked here."""
        a = g.detach().numpy()
        idx = torch.cat([torch.from_numpy(np.flatnonzero(largest_mask(np.abs(a[o:o + n]), keep_count(self.c, n)))
                                          + o) for o, n in self.spans])
        assert torch.equal(idx, top_c(g, self.c, self.spans))
        return wire.sparse_layers(g, idx, self.spans)

    # PS side (alpha 0.01; the values applied do not matter to the cost)
    def step_adacomp(self, w: int, payload) -> None:
        adacomp_update(self.W, self.history, self.spans, w, payload, 0.01)
        self.history.pull(w)

    def step_asgd(self, w: int, g) -> None:
        staleness = self.version - self.pulled[w]
        self.W.add_(g, alpha=-staleness_rate(0.01, staleness))
        self.version += 1
        self.pulled[w] = self.version

    def step_comp_asgd(self, w: int, payload) -> None:
        index, values = wire.sparse_decode(payload)
        staleness = self.version - self.pulled[w]
        self.W.index_add_(0, index, values, alpha=-staleness_rate(0.01, staleness))
        self.version += 1
        self.pulled[w] = self.version


def time_pieces(m: Methods, updates: int) -> dict[str, float]:
    """Seconds of each piece over ``updates`` updates (the gradient recomputed for each)."""
    t = dict.fromkeys(["gradient", "adacomp select", "adacomp PS step", "comp-asgd select",
                       "comp-asgd PS step", "asgd PS step", "one partition select"], 0.0)
    for _ in range(updates):
        w = m.next_worker()
        t0 = time.perf_counter()
        g = m.gradient()
        t1 = time.perf_counter()
        p = m.select_adacomp(g)
        t2 = time.perf_counter()
        m.step_adacomp(w, p)
        t3 = time.perf_counter()
        q = m.select_comp_asgd(g)
        t4 = time.perf_counter()
        m.step_comp_asgd(w, q)
        t5 = time.perf_counter()
        m.step_asgd(w, g)
        t6 = time.perf_counter()
        m.select_one_partition(g)
        t7 = time.perf_counter()
        for key, dt in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6)):
            t[key] += dt
    return t


def former_mask(v, k: int):
    """``largest_mask`` as it was before it counted zeros apart: one partition of the whole span."""
    t = np.partition(v, v.size - k)[v.size - k]
    keep = v > t
    need = k - int(np.count_nonzero(keep))
    if need:
        keep[np.flatnonzero(v == t)[:need]] = True
    return keep


def select_former(x: torch.Tensor, c: float, spans) -> torch.Tensor:
    """``top_c`` as it was before it counted zeros apart, on a finite CPU vector ``x``: the same steps (the
    strided sample's threshold, even at 0, then ``former_mask`` on the candidates or the whole span)."""
    import math

    a = x.detach().numpy()
    assert np.isfinite(a).all()
    parts = []
    for o, n in spans:
        k = keep_count(c, n)
        if k == n:
            parts.append(torch.arange(n) + o)
            continue
        v, idx = np.abs(a[o:o + n]), None
        if n >= 8192 and 4 * k <= n:
            sample = v[:: n // 4096]
            expect = k * sample.size / n
            q = min(sample.size, int(expect + 4 * math.sqrt(expect)) + 8)
            candidates = np.flatnonzero(v >= np.partition(sample, sample.size - q)[sample.size - q])
            if candidates.size >= k:
                idx = candidates[former_mask(v[candidates], k)].astype(np.int64)
        if idx is None:
            idx = np.flatnonzero(former_mask(v, k)).astype(np.int64)
        parts.append(torch.from_numpy(idx) + o)
    return torch.cat(parts)


def time_zeros(g: torch.Tensor, spans, c_values, fractions, reps: int) -> list[str]:
    """Selection on gradients whose entries are mostly exact zeros (dead units, a model stuck at chance): ``top_c``
    against its former self (``select_former``), for Comp-ASGD's one span and AdaComp's layers, side by side on
    the same vectors (the same entries, asserted). Rows of the report's table."""
    rows = []
    gen = torch.Generator().manual_seed(1)
    for f in fractions:
        x = g.clone()
        x[torch.rand(x.numel(), generator=gen) < f] = 0.0
        for c in c_values:
            for method, sp in (("Comp-ASGD", [(0, x.numel())]), ("AdaComp", spans)):
                ways = {"former": partial(select_former, x, c, sp), "now": partial(top_c, x, c, sp)}
                assert torch.equal(ways["former"](), ways["now"]())
                calls: dict[str, list[float]] = {name: [] for name in ways}
                for r in range(reps):  # alternating, each first in turn
                    for name, fn in list(ways.items())[:: 1 if r % 2 else -1]:
                        t0 = time.perf_counter()
                        fn()
                        calls[name].append(1e6 * (time.perf_counter() - t0))
                t = {name: float(np.median(v)) for name, v in calls.items()}  # a call preempted once counts once
                rows.append(f"| {100 * float((x == 0).float().mean()):.1f} | {method} | {c:g} | {t['former']:.0f} | "
                            f"{t['now']:.0f} | **{t['former'] / t['now']:.1f}x** |")
    return rows


CHILD = """
import json, resource, sys
from pathlib import Path
from edgeml.config import load_config
from edgeml.runner import run
path = run(load_config(overrides=sys.argv[1:]), quiet=True)
print(json.dumps({"path": str(path), "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def whole_run(out: Path, algorithm: str, workers: int, updates: int, c: float | None) -> dict:
    """One run in a child process: wall seconds, peak RSS and (AdaComp) the largest staleness-history size."""
    overrides = [*SETTINGS, f"run.algorithm='{algorithm}'", f"cluster.workers={workers}",
                 f"stop.max_steps={updates}", f"run.out='{out}'", f"{algorithm}.lr=0.03"]
    if c is not None:
        overrides.append(f"{algorithm}.c={c}")
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CHILD, *overrides], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - t0
    info = json.loads(res.stdout.strip().splitlines()[-1])
    row = {"wall_s": wall, "peak_bytes": info["maxrss_kib"] * 1024, "history": None, "bound": None}
    if algorithm == "adacomp":
        from edgeml.rundir import read_file
        import io

        import pandas as pd

        series = pd.read_csv(io.StringIO(read_file(Path(info["path"]), "series/ps_memory.csv").decode()))
        row["history"], row["bound"] = int(series["bytes"].max()), int(series["bound_bytes"].max())
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--c", type=float, nargs="+", default=[0.1, 0.01, 0.001])
    ap.add_argument("--updates", type=int, default=10000, help="PS updates of each whole run")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of the cost measurement")
    ap.add_argument("--per-round", type=int, default=200, help="updates per round of the cost measurement")
    args = ap.parse_args()
    torch.set_num_threads(1)

    job = prepare(load_config(overrides=[*SETTINGS, "run.algorithm='adacomp'", "stop.max_steps=1",
                                         f"cluster.workers={args.workers}"]))[0]
    cost_rows, select_rows = [], []
    for c in args.c:
        m = Methods(job.trainer(0), args.workers, c)
        time_pieces(m, 20)  # warm-up
        total = dict.fromkeys(time_pieces(m, 1), 0.0)
        for _ in range(args.rounds):
            for key, dt in time_pieces(m, args.per_round).items():
                total[key] += dt
        n = args.rounds * args.per_round
        us = {k: 1e6 * v / n for k, v in total.items()}
        g = us["gradient"]
        ada = us["adacomp select"] + us["adacomp PS step"]
        comp = us["comp-asgd select"] + us["comp-asgd PS step"]
        cost_rows.append(f"| {c:g} | {g:.0f} | {us['adacomp select']:.0f} | {us['adacomp PS step']:.0f} | "
                         f"**{ada / g:.2f}** | {us['comp-asgd select']:.0f} | {us['comp-asgd PS step']:.0f} | "
                         f"{comp / g:.2f} | {us['asgd PS step']:.0f} | {us['asgd PS step'] / g:.2f} |")
        select_rows.append(f"| {c:g} | {us['one partition select']:.0f} | {us['adacomp select']:.0f} | "
                           f"**{us['one partition select'] / us['adacomp select']:.2f}x** |")

    g = job.trainer(0)
    g.gradient()
    zero_rows = time_zeros(g.grad.detach().clone(), g.spans, args.c, (0.0, 0.9, 0.97, 0.999), args.rounds * 10)

    mem_rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm, c in [("asgd", None), *(("adacomp", c) for c in args.c)]:
            r = whole_run(Path(tmp), algorithm, args.workers, args.updates, c)
            hist = (f"{r['history'] / 2 ** 20:.1f} MiB (bound {r['bound'] / 2 ** 20:.1f} MiB)"
                    if r["history"] is not None else "-")
            verdict = "met" if r["peak_bytes"] < TARGET_BYTES else "not met"
            mem_rows.append(f"| {algorithm} | {'-' if c is None else f'{c:g}'} | {args.updates} | "
                            f"{r['wall_s']:.0f} | {1e3 * r['wall_s'] / args.updates:.1f} | "
                            f"**{r['peak_bytes'] / 2 ** 30:.2f}** | {hist} | {verdict} |")

    record("adacomp", [
        f"The adacomp-cnn (211,690 parameters) on Fashion-MNIST, batch 10, {args.workers} workers, one torch "
        "thread. Cost per update: the pieces of one update alternate in one process (a worker's gradient, "
        "each method's selection and its PS step, the PS's staleness history holding every worker's "
        f"outstanding pull); {args.rounds} rounds of {args.per_round} updates; microseconds per update and, in "
        "bold, AdaComp's selection and PS step together as a fraction of the gradient.", "",
        "| c | gradient us | AdaComp select us | AdaComp PS step us | AdaComp / gradient | Comp-ASGD select us | "
        "Comp-ASGD PS step us | Comp-ASGD / gradient | ASGD PS step us | ASGD / gradient |",
        "|---|---|---|---|---|---|---|---|---|---|", *cost_rows, "",
        "AdaComp's selection (with its encoding) as `top_c` makes it, a strided sample's threshold choosing the "
        "candidates of each layer of 8,192 entries or more, against one partition of each whole layer, side by "
        "side on the same gradients (the same entries, asserted on each):", "",
        "| c | one partition per layer us | sampled pre-selection us | speed-up |", "|---|---|---|---|",
        *select_rows, "",
        "Selection on gradients that are mostly exact zeros (a model whose units have died, as at too large an "
        "alpha: a seeded random share of one gradient's entries set to 0), `top_c` against `top_c` as it was "
        "before it counted zeros apart, side by side on the same vectors (the same entries, asserted): NumPy's "
        "partition slows down on many equal values.", "",
        "| zeros % | method | c | before us (median) | now us (median) | speed-up |", "|---|---|---|---|---|---|",
        *zero_rows, "",
        f"Whole runs (`edgeml run` on the sim backend in a child process, {args.workers} workers, the "
        "experiment's settings: random waits, evaluation every 0.05 s on 2,000 test images): wall time, peak "
        "resident memory of the process (ru_maxrss) and the largest staleness history the PS logged "
        "(`ps_memory`, with the bound of edgeml/algorithms/adacomp_staleness.py).", "",
        "| method | c | updates | wall s | ms per update | peak memory GiB | staleness history | target |",
        "|---|---|---|---|---|---|---|---|", *mem_rows, "",
        f"Target: peak memory < {TARGET_BYTES / 2 ** 30:.0f} GiB with {args.workers} workers."])


if __name__ == "__main__":
    main()
