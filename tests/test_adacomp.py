"""AdaComp, ASGD and Comp-ASGD (adacomp.txt Alg. 1-2, Eqs. 3-5): per-layer top-c selection, the per-parameter
staleness sigma_k against a brute-force history, the reduction to sequential SGD, exact bytes per push, the
PS's bounded memory at 200 workers, and the staleness histograms."""

from __future__ import annotations

import random

import pandas as pd
import pytest
import torch

from edgeml.algorithms.adacomp import adacomp_update, staleness_rate
from edgeml.algorithms.adacomp_compression import keep_count, top_c
from edgeml.algorithms.adacomp_staleness import Histogram, TouchHistory
from edgeml.config import load_config
from edgeml.runtime import wire
from edgeml.runner import run
from edgeml.runner import prepare
from edgeml.train import Evaluator


# ------------------------------------------------------------------------------------------ selection
def test_keep_count_is_floor_of_c_n_and_at_least_one():
    assert keep_count(0.29, 100) == 29  # not 28 from 0.29 * 100 = 28.999999999999996
    assert keep_count(0.01, 250) == 2 and keep_count(0.001, 250) == 1 and keep_count(1.0, 7) == 7
    assert keep_count(0.5, 1) == 1


def test_top_c_keeps_the_largest_of_each_layer_with_ties_to_the_lowest_index():
    x = torch.tensor([0.5, -3.0, 1.0, -1.0, 2.0,    # layer 0: 5 entries, c = 0.4 keeps 2: -3 and 2
                      1.0, -1.0, 1.0, 0.1,          # layer 1: 4 entries keep 1: a three-way tie at 1
                      -0.2, 0.0, 0.3])              # layer 2: 3 entries keep 1: 0.3
    spans = [(0, 5), (5, 4), (9, 3)]
    assert top_c(x, 0.4, spans).tolist() == [1, 4, 5, 11]
    # a tie at the threshold inside a layer: -1 and 1 tie for the second place of layer 0; the lower index wins
    y = torch.tensor([5.0, 1.0, -1.0, 0.0, 0.5])
    assert top_c(y, 0.4, [(0, 5)]).tolist() == [0, 1]
    # c x size < 1 still sends each layer's largest entry
    assert top_c(x, 0.01, spans).tolist() == [1, 5, 11]
    assert top_c(x, 1.0, spans).tolist() == list(range(12))


def _stable_top(x: torch.Tensor, c: float, spans) -> list[int]:
    """The definition, independently: per span, the first k of a stable sort by decreasing magnitude (NaN the
    largest, as torch.topk orders it)."""
    out = []
    for offset, n in spans:
        v = x[offset:offset + n].abs().double()
        v = torch.where(torch.isnan(v), torch.tensor(float("inf")), v)
        order = torch.sort(-v, stable=True).indices[: keep_count(c, n)]
        out += sorted((order + offset).tolist())
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_top_c_matches_a_stable_sort_on_many_ties_in_both_paths(dtype):
    """The NumPy partition (finite CPU vectors) and torch.topk (otherwise) pick the same entries as a stable
    sort by magnitude: ties at the threshold (many of them, zeros included) to the lowest index."""
    gen = torch.Generator().manual_seed(3)
    spans = [(0, 7), (7, 300), (307, 1000), (1307, 3)]
    for trial in range(30):
        x = (torch.randint(-4, 5, (1310,), generator=gen) / 4).to(dtype)  # nine values: ties everywhere
        if trial % 3 == 0:
            x = torch.randn(1310, generator=gen, dtype=dtype)
        for c in (0.5, 0.1, 0.01, 0.001, 1.0):
            idx = top_c(x, c, spans)
            assert idx.dtype == torch.int64 and idx.tolist() == _stable_top(x, c, spans)
    # large layers take the sampled pre-selection: the same entries, whether the sample's threshold lets
    # enough candidates through (Gaussian, mostly zeros, a few huge entries the stride misses) or not
    large = [(0, 8192), (8192, 30000), (38192, 9000)]
    for trial in range(15):
        x = torch.randn(47192, generator=gen, dtype=dtype)
        if trial % 4 == 1:
            x = (torch.randint(-4, 5, (47192,), generator=gen) / 4).to(dtype)
        if trial % 4 == 2:
            x[torch.rand(47192, generator=gen) < 0.97] = 0.0
        if trial % 4 == 3:
            x = torch.zeros(47192, dtype=dtype)
            x[torch.randint(0, 47192, (60,), generator=gen)] = torch.rand(60, generator=gen, dtype=dtype) + 1
        if trial % 5 == 4:  # the largest entries exactly where the sample looks: too few candidates, the fallback
            for offset, n in large:
                x[offset:offset + n:n // 4096] += 10
        for c in (0.25, 0.1, 0.01, 0.001):
            idx = top_c(x, c, large)
            assert idx.dtype == torch.int64 and idx.tolist() == _stable_top(x, c, large)
    x = torch.randn(1310, generator=gen, dtype=dtype)
    x[400] = float("inf")  # the torch path: an infinite entry is the largest of its layer
    assert 400 in top_c(x, 0.01, spans).tolist() and top_c(x, 0.01, spans).tolist() == _stable_top(x, 0.01, spans)

# ------------------------------------------------------------------------------------------ staleness
def test_sigma_on_a_hand_made_history_as_the_oldest_pull_advances():
    hist = TouchHistory(6, segment=2, holders=[1, 2])  # both hold version 0
    hist.record(torch.tensor([0, 1]))  # update 0
    hist.pull(1)  # worker 1 holds version 1
    hist.record(torch.tensor([1, 2]))  # update 1
    hist.record(torch.tensor([1]))  # update 2
    k = torch.tensor([0, 1, 2, 3])
    assert hist.sigma(2, k).tolist() == [1, 3, 1, 0]  # updates 0-2 (Eq. 3, u = j .. i-1)
    assert hist.sigma(1, k).tolist() == [0, 2, 1, 0]  # updates 1-2 only
    assert hist.window() == 3 and len(hist.closed) == 1  # the segment of versions 0-1 holds both pulls
    hist.pull(2)  # the oldest pull advances to version 1: version 0 is forgotten
    assert hist.window() == 2 and hist.sigma(2, k).tolist() == [0, 0, 0, 0]
    seg = hist.closed[0]
    assert seg.start == 1 and seg.log == []  # a single checkpoint at the one pull it still holds
    hist.record(torch.tensor([3]))  # update 3 closes the segment of versions 2-3, which holds worker 2's pull
    assert hist.sigma(1, k).tolist() == [0, 2, 1, 1] and hist.sigma(2, k).tolist() == [0, 0, 0, 1]
    hist.pull(1)  # no pull left in the segment of version 1: it is dropped
    assert [(s.start, len(s.log)) for s in hist.closed] == [(3, 0)] and hist.window() == 1
    assert hist.sigma(2, k).tolist() == [0, 0, 0, 1] and hist.sigma(1, k).tolist() == [0, 0, 0, 0]


def test_staleness_rate_is_eq_5():
    assert staleness_rate(0.6, 0) == 0.6 and staleness_rate(0.6, 1) == 0.6 and staleness_rate(0.6, 3) == 0.6 / 3
    assert staleness_rate(0.6, torch.tensor([0, 1, 2, 4])).tolist() == pytest.approx([0.6, 0.6, 0.3, 0.15])
    assert staleness_rate(0.6, 5, aware=False) == 0.6  # plain ASGD: every update gets alpha
    assert staleness_rate(0.6, torch.tensor([0, 7]), aware=False) == 0.6


@pytest.mark.parametrize("cap, aware, want", [
    (0.0, True, [0.2, 0.6, 0.6, 0.6]),  # Eq. 5: alpha / sigma_k, alpha at sigma_k = 0
    (2.0, True, [0.2, 0.4, 0.4, 0.4]),  # at most twice the update's rate, alpha / sigma = 0.2
    (1.0, True, [0.2, 0.2, 0.2, 0.2]),  # the update's rate for every entry (sigma_k <= sigma)
    (1.0, False, [0.6, 0.6, 0.6, 0.6]),  # no staleness division: every rate is alpha, under any cap >= 1
])
def test_rate_cap_bounds_each_entry_by_a_multiple_of_the_update_rate(cap, aware, want):
    hist = TouchHistory(4, segment=8, holders=[1, 2])
    for touched in ([0], [0, 1], [0]):  # three updates since worker 1 pulled version 0
        hist.record(torch.tensor(touched))
    spans = [(0, 4)]
    W = torch.zeros(4)
    data = wire.sparse_layers(torch.ones(4), torch.arange(4), spans)
    sigma = adacomp_update(W, hist, spans, 1, data, 0.6, aware, cap=cap, staleness=3)
    assert sigma.tolist() == [3, 1, 0, 0]
    assert (-W).tolist() == pytest.approx(want)


def test_sigma_matches_a_brute_force_history_while_the_window_slides():
    rng = random.Random(3)
    size, holders = 40, [1, 2, 3, 4]
    hist = TouchHistory(size, segment=3, holders=holders)
    updates: list[set[int]] = []  # every update's touched set, forever (the brute force)
    pulled = {h: 0 for h in holders}  # the version each holder last pulled
    for step in range(400):
        if rng.random() < 0.6:  # an update touching a random set
            touched = sorted(rng.sample(range(size), rng.randint(0, 6)))
            hist.record(torch.tensor(touched, dtype=torch.int64))
            updates.append(set(touched))
        else:
            h = rng.choice(holders)
            if rng.random() < 0.5:  # a push: sigma of some entries, checked against the brute force
                index = torch.tensor(sorted(rng.sample(range(size), 8)))
                want = [sum(k in u for u in updates[pulled[h]:]) for k in index.tolist()]
                assert hist.sigma(h, index).tolist() == want, step
            else:  # a pull: the holder's window moves forward
                hist.pull(h)
                pulled[h] = len(updates)
        assert hist.window() == len(updates) - min(pulled.values())
        assert hist.nbytes() <= hist.bound(kept=6)


def test_histogram_bins_are_powers_of_two():
    h = Histogram()
    h.add(torch.tensor([0, 1, 2, 3, 4, 7, 8, 1000]))
    h.add(5)
    assert h.rows() == [(0, 0, 1), (1, 1, 1), (2, 3, 2), (4, 7, 3), (8, 15, 1), (16, 31, 0), (32, 63, 0),
                        (64, 127, 0), (128, 255, 0), (256, 511, 0), (512, 1023, 1)]


# ------------------------------------------------------------------------------------------ runs
def _run(tmp_path, name, *overrides):
    cfg = load_config(overrides=[f"run.out='{tmp_path}'", f"run.name='{name}'", "run.backend='sim'", *overrides])
    return run(cfg)


def test_with_c_1_and_one_worker_adacomp_is_sequential_sgd(tmp_path):
    steps, lr = 60, 0.1
    path = _run(tmp_path, "one", "run.algorithm='adacomp'", "adacomp.c=1.0", f"adacomp.lr={lr}",
                "cluster.workers=1", f"stop.max_steps={steps}", "stop.max_time=100", "eval.interval=100")
    final = pd.read_csv(path / "evals.csv").iloc[-1]
    # the run stops as step `steps` ends, before the PS applies it: the model has seen steps - 1 updates
    cfg = load_config(overrides=["cluster.workers=1"])
    job = prepare(cfg)[0]
    trainer = job.trainer(0)
    for _ in range(steps - 1):
        trainer.gradient()
        trainer.params.sub_(trainer.grad * lr)  # rounded as AdaComp's PS rounds it (sgd's add_ may fuse it)
    ds = job.dataset
    loss, acc = Evaluator(job, ds.x_test[job.test_index], ds.y_test[job.test_index])(trainer.params)
    assert final.accuracy == acc and final.loss == pytest.approx(loss, rel=1e-6)
    assert loss < 0.7 * pd.read_csv(path / "evals.csv").loss.iloc[0]


@pytest.mark.parametrize("aware, warmup", [(True, 0), (False, 0), (True, 20)])
def test_asgd_replays_as_alpha_over_staleness_or_plain_alpha(tmp_path, aware, warmup):
    # every applied update, in the PS's order (the staleness series), replayed by hand: each worker's gradient
    # on the model it last pulled, times alpha / max(1, sigma) (Sec. V-B) or alpha (staleness_aware = false),
    # alpha rising as (v + 1) / warmup over the first updates v with a warm-up
    lr, workers = 0.2, 3
    path = _run(tmp_path, "asgd", "run.algorithm='asgd'", f"asgd.lr={lr}", f"asgd.staleness_aware={str(aware).lower()}",
                f"cluster.workers={workers}", "stop.max_steps=45", "stop.max_time=100", "eval.interval=100",
                "cluster.random_wait_s=0.01", f"asgd.warmup={warmup}")
    order = pd.read_csv(path / "series" / "staleness.csv")
    job = prepare(load_config(overrides=[f"cluster.workers={workers}"]))[0]
    trainers = [job.trainer(w) for w in range(workers)]
    W, version, pulled = job.init_params.clone(), 0, [0] * workers
    for w, s in zip(order.worker, order.staleness):
        assert s == version - pulled[w]
        trainers[w].gradient()
        alpha = lr * min(1.0, (version + 1) / warmup) if warmup else lr
        W.sub_(trainers[w].grad * (alpha / max(1, s) if aware else alpha))  # rounded as the PS rounds it
        version += 1
        trainers[w].params.copy_(W)
        pulled[w] = version
    assert order.staleness.max() >= 2  # the two rates differ on these updates
    ds = job.dataset
    loss, acc = Evaluator(job, ds.x_test[job.test_index], ds.y_test[job.test_index])(W)
    final = pd.read_csv(path / "evals.csv").iloc[-1]
    assert final.accuracy == acc and final.loss == pytest.approx(loss, rel=1e-6)


def test_adacomp_at_c_1_with_its_rates_capped_at_the_update_rate_is_asgd(tmp_path):
    # every entry kept and no entry faster than the whole update: AdaComp's PS applies ASGD's step, so the same
    # seed gives the same updates in the same order and the same models, bit for bit on any CPU: alpha 0.25 is
    # exact in float32, so the two ways of rounding alpha / sigma agree, and both PSs round the product
    # gradient x rate before subtracting it (a fused multiply-add in one of them differed in the last bit at
    # sigma = 3 or 7, on CPUs with vector units only)
    common = ["cluster.workers=3", "stop.max_steps=40", "stop.max_time=100", "eval.interval=0.02",
              "cluster.random_wait_s=0.01"]
    a = _run(tmp_path, "asgd", "run.algorithm='asgd'", "asgd.lr=0.25", *common)
    b = _run(tmp_path, "adacomp", "run.algorithm='adacomp'", "adacomp.lr=0.25", "adacomp.c=1.0",
             "adacomp.rate_cap=1.0", *common)
    sa, sb = (pd.read_csv(p / "series" / "staleness.csv") for p in (a, b))
    assert sa[["worker", "staleness"]].equals(sb[["worker", "staleness"]]) and sa.staleness.max() >= 2
    ea, eb = (pd.read_csv(p / "evals.csv") for p in (a, b))
    assert len(ea) > 2 and ea.accuracy.tolist() == eb.accuracy.tolist() and ea.loss.tolist() == eb.loss.tolist()


def test_bytes_per_push_are_4l_plus_8k_plus_8(tmp_path):
    c = 0.05
    path = _run(tmp_path, "bytes", "run.algorithm='adacomp'", f"adacomp.c={c}", "cluster.workers=2",
                "stop.max_time=1", "model.name='mlp'")
    job = prepare(load_config(overrides=["model.name='mlp'"]))[0]
    sizes = [p.numel() for p in job.make_model().parameters()]
    layers, kept = len(sizes), sum(keep_count(c, n) for n in sizes)
    tags = pd.read_csv(path / "messages.csv")
    push = tags[tags.tag == "push"]
    assert (push.min_bytes == 4 * layers + 8 * kept + 8).all() and (push.max_bytes == push.min_bytes).all()
    model = tags[tags.tag == "model"]
    assert (model.min_bytes == 4 * sum(sizes) + 8).all()  # the reply: the model and its version
    evals = pd.read_csv(path / "evals.csv")
    assert evals.ps_ingress_bytes.iloc[-1] == push.bytes_sent.sum()


@pytest.mark.parametrize("algorithm, c", [("comp_asgd", 0.05), ("asgd", None)])
def test_baselines_bytes(tmp_path, algorithm, c):
    extra = [f"{algorithm}.c={c}"] if c else []
    path = _run(tmp_path, algorithm, f"run.algorithm='{algorithm}'", "cluster.workers=2", "stop.max_time=1",
                "model.name='mlp'", *extra)
    params = prepare(load_config(overrides=["model.name='mlp'"]))[0].init_params.numel()
    push = pd.read_csv(path / "messages.csv").query("tag == 'push'")
    want = 8 * keep_count(c, params) + 8 if c else 4 * params + 8
    assert (push.min_bytes == want).all() and (push.max_bytes == want).all()


@pytest.mark.slow
def test_ps_memory_stays_within_its_bound_with_200_workers(tmp_path):
    path = _run(tmp_path, "many", "run.algorithm='adacomp'", "adacomp.c=0.01", "cluster.workers=200",
                "cluster.hetero='adacomp-3class'", "data.batch_size=4", "stop.max_time=3", "eval.interval=1",
                "adacomp.log_every=100", "cluster.random_wait_s=0.02")
    mem = pd.read_csv(path / "series" / "ps_memory.csv")
    assert len(mem) >= 5 and (mem.bytes <= mem.bound_bytes).all()
    params = prepare(load_config(overrides=["cluster.workers=200", "data.batch_size=4"]))[0].init_params.numel()
    assert mem.bytes.max() < 4 * params * 200 / 4  # well below a copy of the counts per worker
    assert mem.window.max() > 200  # slow workers keep old pulls outstanding: the window is long
    hist = pd.read_csv(path / "series" / "staleness_hist.csv")
    last = hist[hist.updates == hist.updates.max()]
    updates = int(last.updates.iloc[0])
    assert last[last.kind == "global"]["count"].sum() == updates  # one global staleness per update
    sizes = [p.numel() for p in prepare(load_config(overrides=["data.batch_size=4"]))[0].make_model().parameters()]
    kept = sum(keep_count(0.01, n) for n in sizes)  # one sigma_k per received entry
    assert last[last.kind == "parameter"]["count"].sum() == updates * kept
    nodes = pd.read_csv(path / "nodes.csv")
    assert updates == nodes[nodes.role == "ps"].messages_recv.iloc[0]


@pytest.mark.slow
def test_crashes_after_pushes_take_workers_out(tmp_path):
    path = _run(tmp_path, "crash", "run.algorithm='adacomp'", "cluster.workers=20", "cluster.crash_prob=0.002",
                "stop.max_time=3", "data.batch_size=8")
    nodes = pd.read_csv(path / "nodes.csv")
    workers = nodes[nodes.role == "worker"]
    assert 0 < workers.crashed.sum() < 20
    # a crashed worker's last push still arrived: every push it made was counted at the PS
    assert nodes[nodes.role == "ps"].messages_recv.iloc[0] == workers.messages_sent.sum()


def test_a_seeded_subset_of_the_training_set_is_split_over_the_workers():
    # adacomp.txt Table II trains on 20% of the training set
    cfg = load_config(overrides=["cluster.workers=5", "data.train_samples=300"])
    a, b = prepare(cfg)[0], prepare(cfg)[0]
    union = torch.cat(a.shards)
    assert len(union) == 300 and len(union.unique()) == 300
    assert all(torch.equal(x, y) for x, y in zip(a.shards, b.shards))
    full = prepare(load_config(overrides=["cluster.workers=5"]))[0]
    assert sum(len(s) for s in full.shards) == len(full.dataset.y_train)
