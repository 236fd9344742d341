"""The steerable trainer: the default batches are unchanged, chosen batches and orders are followed exactly,
per-layer views tile the flat vectors, and momentum SGD equals torch.optim.SGD."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgeml.models import build_model, loss_for
from edgeml.train import Trainer, flatten_module

N, SHAPE = 120, (1, 8, 8)
SHARD = torch.arange(3, N, 2)  # 59 samples: every other one, from 3


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, *SHAPE, generator=g), torch.randint(0, 10, (N,), generator=g)


def _trainer(model: str = "lenet5", batch_size: int = 16, seed: int = 5, **kw) -> Trainer:
    x, y = _data()
    torch.manual_seed(1)
    return Trainer(build_model(model, SHAPE, 10), loss_for(model), x, y, SHARD, batch_size, seed=seed, **kw)


class _OldTrainer:
    """The trainer's default path as it was before it could be steered (a verbatim copy), the reference."""

    def __init__(self, model, loss, x, y, index, batch_size, *, seed, init=None, device="cpu"):
        self.model = model.to(device)
        self.params, self.grad = flatten_module(self.model)
        if init is not None:
            self.params.copy_(init)
        self.loss_fn = loss
        self.x, self.y, self.index = x, y, index
        self.batch_size = min(batch_size, len(index))
        self.device = device
        self._gen = torch.Generator().manual_seed(seed)
        self.order_of = torch.empty(0, dtype=torch.long)
        self._pos = 0
        self.epoch = 0

    def next_batch(self):
        if self._pos + self.batch_size > len(self.order_of):
            self.order_of = self.index[torch.randperm(len(self.index), generator=self._gen)]
            self._pos = 0
            self.epoch += 1
        sel = self.order_of[self._pos:self._pos + self.batch_size]
        self._pos += self.batch_size
        return self.x[sel].to(self.device), self.y[sel].to(self.device)

    def gradient(self):
        x, y = self.next_batch()
        self.grad.zero_()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return float(loss.detach())

    def sgd(self, lr):
        self.params.add_(self.grad, alpha=-lr)


def test_default_batches_are_bit_identical_to_before() -> None:
    new = _trainer()
    x, y = _data()
    torch.manual_seed(1)
    old = _OldTrainer(build_model("lenet5", SHAPE, 10), loss_for("lenet5"), x, y, SHARD, 16, seed=5)
    for _ in range(13):  # 3 batches per epoch (drop-last): more than four epochs
        assert new.gradient() == old.gradient()
        assert torch.equal(new.grad, old.grad)
        new.sgd(0.1)
        old.sgd(0.1)
        assert torch.equal(new.params, old.params) and new.epoch == old.epoch
    assert new.epoch == 5


def test_a_device_resident_shard_gives_the_same_batches() -> None:
    # CUDA nodes copy their shard to the device once; the path is the same on the CPU, where it can be checked
    plain, resident = _trainer(), _trainer(resident=True)
    for _ in range(7):
        assert plain.gradient() == resident.gradient() and torch.equal(plain.grad, resident.grad)
    idx = torch.tensor([5, 3, 77, 9])
    assert plain.gradient(idx) == resident.gradient(idx)
    assert torch.equal(plain.losses(idx), resident.losses(idx))
    with pytest.raises(ValueError, match="shard"):
        resident.gradient(torch.tensor([4]))


def test_chosen_batch_as_indices_or_tensors() -> None:
    a, b, c = _trainer(), _trainer(), _trainer()
    x, y = _data()
    idx = torch.tensor([5, 3, 77, 9])
    la = a.gradient(idx)
    lb = b.gradient((x[idx], y[idx]))
    assert la == lb and torch.equal(a.grad, b.grad)
    lc = c.gradient(idx[:2])  # any batch size
    assert lc != la
    assert a.epoch == 0  # the epoch order was not touched
    for bad in (torch.tensor([4]), torch.tensor([N + 1]), torch.tensor([-1]), torch.tensor([3.0]), torch.tensor([[3]])):
        with pytest.raises(ValueError):
            a.gradient(bad)
    with pytest.raises(ValueError, match="labels"):
        a.gradient((x[:3], y[:2]))


def test_a_chosen_order_is_followed_exactly() -> None:
    t, ref, fresh = _trainer(batch_size=4), _trainer(batch_size=4), _trainer(batch_size=4)
    order = torch.tensor([99, 3, 41, 7, 7, 11, 63, 5, 13, 101, 15])  # a subset, a repeat, 11 = 2 batches + 3
    t.gradient()  # mid-epoch: the chosen order starts a new epoch at once
    t.set_order(order)
    assert t.epoch == 2 and t.batches_left == 2
    for k in range(2):
        loss = t.gradient()
        assert loss == ref.gradient(order[4 * k:4 * k + 4]) and torch.equal(t.grad, ref.grad)
    assert t.batches_left == 0
    # used up (the 3 left over are dropped): the next epoch shuffles the whole shard. The chosen order drew
    # nothing from the shuffling generator, so this is its second shuffle, as for a trainer left alone
    for _ in range(len(SHARD) // 4):
        fresh.next_batch()
    assert torch.equal(t.next_batch()[0], fresh.next_batch()[0]) and (t.epoch, fresh.epoch) == (3, 2)
    with pytest.raises(ValueError, match="shard"):
        t.set_order(torch.tensor([3, 4]))


def test_class_order_visits_the_shard_class_by_class_every_epoch() -> None:
    t, ref = _trainer(batch_size=16, order="class"), _trainer(batch_size=16)
    x, y = _data()
    fixed = sorted(SHARD.tolist(), key=lambda i: (int(y[i]), i))  # labels ascending, data set order within
    seen = [t.next_batch()[0] for _ in range(9)]  # 3 batches per epoch (the last 11 samples dropped): 3 epochs
    for k, batch in enumerate(seen):
        assert torch.equal(batch, x[fixed[16 * (k % 3):16 * (k % 3) + 16]])
    assert t.epoch == 3
    assert not torch.equal(ref.next_batch()[0], seen[0])  # shuffled by default


def test_per_sample_losses() -> None:
    t = _trainer("mlp")
    t.gradient()
    grad, params = t.grad.clone(), t.params.clone()
    idx = SHARD[:10]
    per = t.losses(idx)
    assert per.shape == (10,) and per.dtype == torch.float32 and not per.requires_grad
    assert torch.equal(t.grad, grad) and torch.equal(t.params, params)  # no step, no gradient
    assert t.model.training and t.loss_fn.reduction == "mean"  # restored
    assert per.mean().item() == pytest.approx(t.gradient(idx), rel=1e-6)
    x, y = _data()
    assert torch.allclose(t.losses((x[idx], y[idx]), chunk=3), per, rtol=0, atol=1e-6)
    assert torch.equal(per[4], t.losses(idx[4:5])[0])
    assert t.losses(idx[:0]).shape == (0,)


@pytest.mark.parametrize("model", ["lenet5", "mlp"])
def test_layer_views_tile_the_flat_vectors(model: str) -> None:
    t = _trainer(model)
    named = list(t.model.named_parameters())
    assert [layer.name for layer in t.layers] == [name for name, _ in named]
    assert [layer.shape for layer in t.layers] == [tuple(p.shape) for _, p in named]
    end = 0
    for layer in t.layers:  # in order, no gaps, no overlaps
        assert layer.offset == end and layer.size > 0
        end += layer.size
    assert end == t.params.numel() and t.spans == [(layer.offset, layer.size) for layer in t.layers]
    t.gradient()
    for (_name, p), pv, gv in zip(named, t.views(t.params), t.views(t.grad)):
        assert torch.equal(pv, p.detach().reshape(-1)) and torch.equal(gv, p.grad.reshape(-1))
    t.views(t.params)[1].fill_(7.0)  # views write through to the model
    assert bool((named[1][1] == 7.0).all())
    with pytest.raises(ValueError, match="flat vector"):
        t.views(t.params[:-1])


@pytest.mark.parametrize("momentum", [0.9, 0.5, 0.0])
def test_momentum_sgd_equals_torch_optim_sgd(momentum: float) -> None:
    t = _trainer("lenet5")
    torch.manual_seed(1)
    ref = build_model("lenet5", SHAPE, 10)
    opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=momentum, dampening=0, nesterov=False, weight_decay=0)
    x, y = _data()
    assert torch.equal(t.params, torch.cat([p.detach().reshape(-1) for p in ref.parameters()]))
    g = torch.Generator().manual_seed(3)
    for _ in range(12):
        idx = SHARD[torch.randperm(len(SHARD), generator=g)[:8]]
        t.gradient(idx)
        t.sgd(0.05, momentum=momentum)
        opt.zero_grad()
        nn.functional.cross_entropy(ref(x[idx]), y[idx]).backward()
        opt.step()
        assert torch.equal(t.params, torch.cat([p.detach().reshape(-1) for p in ref.parameters()]))  # bit for bit


def test_the_nodes_own_generator() -> None:
    a, b = _trainer(seed=5), _trainer(seed=5)
    assert isinstance(a.gen, torch.Generator)
    draw = torch.rand(4, generator=a.gen)
    assert torch.equal(draw, torch.rand(4, generator=b.gen))
    assert not torch.equal(torch.rand(4, generator=_trainer(seed=6).gen), torch.rand(4, generator=_trainer(seed=5).gen))
    # drawing from it never changes the batches, and training never draws from torch's global generator
    global_state = torch.get_rng_state()
    for _ in range(5):
        assert a.gradient() == b.gradient()
    assert torch.equal(global_state, torch.get_rng_state())
    given = torch.Generator().manual_seed(0)
    assert _trainer(gen=given).gen is given


@pytest.mark.parametrize(("model", "batch"), [("lenet5", 128), ("mlp", 8192), ("l2svm", 8192)])
def test_evaluation_batches_by_model_and_agrees_with_small_batches(model: str, batch: int) -> None:
    from edgeml.train import eval_batch, evaluate

    shape = (24, 1, 1) if model == "l2svm" else SHAPE
    net = build_model(model, shape, 10)
    params, _ = flatten_module(net)
    assert eval_batch(net) == batch
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(300, *shape, generator=g), torch.randint(0, 10, (300,), generator=g)
    whole_loss, whole_acc = evaluate(net, params, loss_for(model), x, y)
    small_loss, small_acc = evaluate(net, params, loss_for(model), x, y, batch=7)
    assert whole_acc == small_acc  # the same predictions, only the loss's sums ordered otherwise
    assert whole_loss == pytest.approx(small_loss, rel=1e-6)


@pytest.mark.parametrize("resident", [False, True])
def test_the_whole_shard_is_gathered_once_and_gives_the_gradient_over_its_indices(resident):
    """``shard()`` is the shard's samples in ``index`` order, kept: the gradient over it is the gradient over
    the indices bit for bit (SNAP's full-shard steps), and later calls return the same tensors."""
    by_index, by_shard = _trainer("mlp", resident=resident), _trainer("mlp", resident=resident)
    x, y = by_shard.shard()
    assert torch.equal(y, _data()[1][SHARD]) and torch.equal(x, _data()[0][SHARD])
    assert by_index.gradient(by_index.index) == by_shard.gradient(by_shard.shard())
    assert torch.equal(by_index.grad, by_shard.grad)
    assert by_shard.shard()[0] is x
