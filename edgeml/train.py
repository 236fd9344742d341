"""The shared training step: one model, batch and optimizer code for every algorithm and both backends.

``Job`` is what every node of a run shares (config, world, data, initial model) and the cost model of a
step (``FORWARD_WORK``, ``forward_macs``). ``Trainer`` is a
worker's model with its parameters and gradients laid out in one flat tensor each, so that an update is a
single tensor on the wire and an SGD step is one in-place operation; the algorithm can steer which samples
it trains on, read per-sample losses, and address each layer's slice of the flat vectors.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from edgeml.data import Dataset, load_dataset, partition
from edgeml.models import build_model, loss_for
from edgeml.world import World


def default_model(dataset: Dataset) -> str:
    """``mlp`` for tabular and tiny images, ``lenet5`` for 28x28 and larger images."""
    shape = dataset.input_shape
    return "lenet5" if len(shape) == 3 and shape[-1] >= 28 else "mlp"


def flatten_module(model: nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-seat ``model``'s parameters and gradients as views into two flat tensors; return (params, grads)."""
    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params]).clone()
    grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset:offset + n].view_as(p)
        p.grad = grad[offset:offset + n].view_as(p)
        offset += n
    return flat, grad


@dataclass
class Job:
    """Everything the nodes of one run share. Tensors are shared (not copied) with worker processes."""

    cfg: object
    dataset: Dataset
    model_name: str
    shards: list[torch.Tensor]
    init_params: torch.Tensor
    test_index: torch.Tensor
    world: World
    """The run's world keyed by rank (devices, speeds, network, failures, co-running load: ``edgeml.world``)."""

    @property
    def base_step_s(self) -> float:
        """Step time of a factor-1 device (calibrated in procs), kept in ``world``."""
        return self.world.base_step_s

    @base_step_s.setter
    def base_step_s(self, value: float) -> None:
        self.world.base_step_s = value

    @property
    def num_workers(self) -> int:
        return len(self.shards)

    def make_model(self) -> nn.Module:
        ds = self.dataset
        torch.manual_seed(self.cfg.run.seed)
        m = self.cfg.model
        return build_model(self.model_name, ds.input_shape, ds.num_classes, width=m.width, binary=m.binary, init=m.init)

    def forward_work(self, samples: int) -> float:
        """Work, in training steps, of a forward pass over ``samples`` samples (``FORWARD_WORK`` per batch)."""
        return samples * FORWARD_WORK / self.cfg.data.batch_size

    def forward_macs(self) -> float:
        """Multiply-adds of one sample's forward pass through the run's model (built aside: the global random
        state is left as it was)."""
        with torch.random.fork_rng(devices=[]):
            return forward_macs(self.make_model(), self.dataset.input_shape)

    def evaluator(self, x: torch.Tensor, y: torch.Tensor) -> "Evaluator":
        """(loss, accuracy) of flat parameters on the examples ``x``, ``y`` with the run's model and loss."""
        return Evaluator(self, x, y)

    def trainer(self, worker: int | None, device: str = "cpu", gen: torch.Generator | None = None) -> "Trainer":
        """Worker ``worker``'s trainer over its shard (``None``: over every training sample in use, for training on one
        device), starting from the common initial model (``gen``: the node's own generator, ``node.gen``)."""
        ds = self.dataset
        idx = self.shards[worker] if worker is not None else torch.cat(self.shards).sort().values
        return Trainer(self.make_model(), loss_for(self.model_name), ds.x_train, ds.y_train, idx,
                       self.cfg.data.batch_size, seed=self.cfg.run.seed * 100_003 + (worker or 0),
                       init=self.init_params, device=device, gen=gen, order=self.cfg.data.order)


def build_job(cfg, world: World) -> Job:
    """Load data, partition it, build the initial model: the deterministic part of a run's setup, in the
    ``world`` the runner built for it."""
    from edgeml.errors import UserError

    ds = load_dataset(cfg.data.dataset, root=cfg.data.root or None, download=cfg.data.download)
    model_name = cfg.model.name or default_model(ds)
    n = cfg.cluster.workers
    pool = torch.arange(len(ds.y_train))  # the training samples in use
    if cfg.data.train_samples:
        if cfg.data.train_samples > len(pool):
            raise UserError(f"data.train_samples = {cfg.data.train_samples} but {cfg.data.dataset} has only "
                            f"{len(pool)} training samples: use at most that many, or 0 for all")
        g = torch.Generator().manual_seed(cfg.run.seed + 11)
        pool = torch.randperm(len(pool), generator=g)[:cfg.data.train_samples].sort().values
    if n > len(pool):
        raise UserError(f"{n} workers but only {len(pool)} training samples: use fewer workers")
    shards = [pool[s] for s in partition(ds.y_train[pool], n, cfg.data.partition, seed=cfg.run.seed,
                                         alpha=cfg.data.alpha, shards_per_part=cfg.data.shards_per_worker)]
    smallest = min(range(n), key=lambda w: len(shards[w]))
    if cfg.data.batch_size > len(shards[smallest]):
        raise UserError(f"data.batch_size = {cfg.data.batch_size} is larger than worker {smallest}'s share of "
                        f"{len(shards[smallest])} training samples ({cfg.data.partition} split of {len(pool)} "
                        f"over {n} workers): use --batch-size {len(shards[smallest])} or less, or fewer workers")
    torch.manual_seed(cfg.run.seed)
    m = cfg.model
    model = build_model(model_name, ds.input_shape, ds.num_classes, width=m.width, binary=m.binary, init=m.init)
    init, _ = flatten_module(model)
    g = torch.Generator().manual_seed(cfg.run.seed + 7)
    n_test = len(ds.y_test)
    k = cfg.eval.test_samples or n_test
    test_index = torch.randperm(n_test, generator=g)[: min(k, n_test)].sort().values
    return Job(cfg, ds, model_name, shards, init, test_index, world)


# ------------------------------------------------------------------------------------------------- cost model
FORWARD_WORK = 1 / 3
"""A forward pass's share of a training step's computation (forward + backward ~ 3 forward passes): what
evaluating a batch's losses costs, in steps (EdgeGossip's loss ranking, ESync's reference pass)."""


def forward_macs(model: nn.Module, input_shape: tuple[int, ...]) -> float:
    """Multiply-adds of one sample's forward pass through the model's linear and convolution layers."""
    total = 0.0

    def count(module, _inputs, out):
        nonlocal total
        if isinstance(module, nn.Linear):
            total += module.in_features * module.out_features
        else:
            k = module.weight[0].numel()  # in_channels / groups x kernel area
            total += out[0].numel() * k

    hooks = [m.register_forward_hook(count) for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    try:
        with torch.no_grad():
            training = model.training
            model.eval()
            model(torch.zeros(1, *input_shape, device=next(model.parameters()).device))
            model.train(training)
    finally:
        for h in hooks:
            h.remove()
    return max(total, 1.0)



class Layer(NamedTuple):
    """One parameter tensor of the model (a weight matrix, a bias vector) as a slice of the flat vectors."""

    name: str
    """As in ``model.named_parameters()``."""
    offset: int
    size: int
    shape: tuple[int, ...]


Batch = torch.Tensor | tuple[torch.Tensor, torch.Tensor]
"""Sample indices into the data set (the same indices as the node's shard), or ``(x, y)`` tensors."""


class Trainer:
    """A model whose parameters live in ``self.params`` (flat) and gradients in ``self.grad`` (flat).

    By default ``gradient()`` takes the next mini-batch of a shuffled pass over the node's shard (each epoch
    reshuffled, or class by class in a fixed order with ``order="class"``; a remainder shorter than a batch
    dropped). The algorithm can steer it instead: a batch of its
    choosing (``gradient(batch)``), an epoch over an order and subset of the shard it chose (``set_order``),
    per-sample losses (``losses``), per-layer slices of the flat vectors (``layers``, ``views``) and momentum
    (``sgd``). A batch is given as sample indices, which must belong to the shard, or as ``(x, y)`` tensors
    for samples the algorithm made itself (EdgeGossip's aggregated points).
    """

    def __init__(self, model: nn.Module, loss: nn.Module, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor,
                 batch_size: int, *, seed: int, init: torch.Tensor | None = None, device: str = "cpu",
                 gen: torch.Generator | None = None, resident: bool | None = None, order: str = "shuffled"):
        self.model = model.to(device)
        self.params, self.grad = flatten_module(self.model)
        if init is not None:
            self.params.copy_(init)
        self.layers: list[Layer] = []
        offset = 0
        for name, p in self.model.named_parameters():  # the order flatten_module laid them out in
            self.layers.append(Layer(name, offset, p.numel(), tuple(p.shape)))
            offset += p.numel()
        self.loss_fn = loss
        self.x, self.y, self.index = x, y, index
        self._in_shard = torch.zeros(len(y), dtype=torch.bool)
        self._in_shard[index] = True
        self.batch_size = min(batch_size, len(index))
        self.device = device
        self._resident = None
        if resident if resident is not None else device != "cpu":
            # the shard's samples live on the device, copied once: a CUDA node moves no batch over the bus
            local = torch.full((len(y),), -1, dtype=torch.int64)
            local[index] = torch.arange(len(index))
            self._resident = (local, x[index].to(device), y[index].to(device))
        self._shuffle = torch.Generator().manual_seed(seed)
        self._fixed = index[torch.sort(y[index], stable=True).indices] if order == "class" else None
        self.gen = gen if gen is not None else torch.Generator().manual_seed(_derived_seed(seed, "gen"))
        """This node's generator for the algorithm's own draws (stochastic rounding, sampling), so none uses
        torch's global one. Separate from the shuffling generator: drawing from it never changes the batches."""
        self._order = torch.empty(0, dtype=torch.long)
        self._pos = 0
        self._momentum: torch.Tensor | None = None
        self._whole: tuple[torch.Tensor, torch.Tensor] | None = None
        self.epoch = 0

    # ---------------------------------------------------------------- batches
    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next mini-batch of the current epoch's order; at its end a new epoch shuffles the whole shard (or,
        built with ``order="class"``, visits it class by class again)."""
        if self._pos + self.batch_size > len(self._order):
            self._order = self._fixed if self._fixed is not None else \
                self.index[torch.randperm(len(self.index), generator=self._shuffle)]
            self._pos = 0
            self.epoch += 1
        sel = self._order[self._pos:self._pos + self.batch_size]
        self._pos += self.batch_size
        return self._samples(sel)

    def set_order(self, indices: torch.Tensor) -> None:
        """Start a new epoch now that visits ``indices`` (samples of the shard: all or a subset, in this order)
        in consecutive batches of ``batch_size``; a remainder shorter than a batch is dropped, as in every
        epoch. Once it is used up, epochs visit the whole shard again as before (shuffled, or class by class)."""
        self._order = self._shard_indices(indices).clone()
        self._pos = 0
        self.epoch += 1

    def shard(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels of the whole shard, in ``index`` order, on the device: gathered once and kept, for
        programs that take every step over the whole shard (SNAP's full-shard gradients); the same tensors as
        ``self._batch(self.index)`` gives, without gathering them at every step."""
        if self._whole is None:
            self._whole = self._samples(self.index)
        return self._whole

    @property
    def batches_left(self) -> int:
        """Full batches left in the current epoch's order."""
        return (len(self._order) - self._pos) // self.batch_size

    def _batch(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(batch, torch.Tensor):
            return self._samples(self._shard_indices(batch))
        x, y = batch
        if len(x) != len(y):
            raise ValueError(f"batch has {len(x)} inputs but {len(y)} labels")
        return x.to(self.device), y.to(self.device)

    def _samples(self, sel: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and labels of the shard's samples ``sel`` (data set indices), on the device."""
        if self._resident is not None:
            local, x, y = self._resident
            at = local[sel].to(self.device)
            return x[at], y[at]
        return self.x[sel].to(self.device), self.y[sel].to(self.device)

    def _shard_indices(self, indices: torch.Tensor) -> torch.Tensor:
        if indices.dim() != 1 or indices.dtype.is_floating_point or indices.dtype == torch.bool:
            raise ValueError("sample indices must be a 1-D integer tensor")
        if len(indices) and (int(indices.min()) < 0 or int(indices.max()) >= len(self._in_shard)
                             or not bool(self._in_shard[indices].all())):
            raise ValueError("sample indices must belong to this node's shard")
        return indices.to(torch.int64)

    # ---------------------------------------------------------------- computation
    def gradient(self, batch: Batch | None = None) -> float:
        """Compute the gradient of one mini-batch into ``self.grad``; return the batch loss. Without ``batch``,
        the next mini-batch of the epoch (``next_batch``)."""
        x, y = self.next_batch() if batch is None else self._batch(batch)
        self.grad.zero_()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return float(loss.detach())

    @torch.no_grad()
    def losses(self, batch: Batch, chunk: int = 1024) -> torch.Tensor:
        """Per-sample losses (float32, on the CPU) at the current parameters, without gradients, in evaluation
        mode. Models with batch normalization normalize over each chunk of ``chunk`` samples."""
        x, y = self._batch(batch)
        training = self.model.training
        reduction = self.loss_fn.reduction
        self.model.eval()
        self.loss_fn.reduction = "none"
        try:
            parts = [self.loss_fn(self.model(x[i:i + chunk]), y[i:i + chunk]) for i in range(0, len(y), chunk)]
        finally:
            self.loss_fn.reduction = reduction
            self.model.train(training)
        return torch.cat(parts).float().cpu() if parts else torch.zeros(0)

    def sgd(self, lr: float, momentum: float = 0.0) -> None:
        """params -= lr * step. The step is the gradient, or with momentum m the buffer b <- m b + g that
        starts at the first gradient: torch.optim.SGD's rule (dampening 0, no Nesterov, no weight decay)."""
        if momentum == 0.0:
            self.params.add_(self.grad, alpha=-lr)
            return
        if self._momentum is None:
            self._momentum = self.grad.clone()
        else:
            self._momentum.mul_(momentum).add_(self.grad)
        self.params.add_(self._momentum, alpha=-lr)

    # ---------------------------------------------------------------- per-layer views
    @property
    def spans(self) -> list[tuple[int, int]]:
        """``(offset, size)`` of each layer, the layer boundaries the wire encodings take."""
        return [(layer.offset, layer.size) for layer in self.layers]

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """One 1-D view per layer into ``flat`` (``self.params``, ``self.grad`` or any vector of their size)."""
        if flat.dim() != 1 or flat.numel() != self.params.numel():
            raise ValueError(f"expected a flat vector of {self.params.numel()} entries, got shape {tuple(flat.shape)}")
        return [flat[layer.offset:layer.offset + layer.size] for layer in self.layers]


def _derived_seed(seed: int, stream: str) -> int:
    """A 64-bit seed for an independent stream of ``seed`` (string-derived, as ``Node.rng`` is)."""
    return int.from_bytes(hashlib.blake2b(f"{seed}/{stream}".encode(), digest_size=8).digest(), "little")


class Evaluator:
    """(loss, accuracy) of flat parameters on fixed examples ``x``, ``y`` with the run's model and loss: the
    monitor's test set and ADSP's probe of the training loss use one."""

    def __init__(self, job: Job, x: torch.Tensor, y: torch.Tensor):
        self.model = job.make_model()
        flatten_module(self.model)
        self.loss_fn = loss_for(job.model_name)
        self.x, self.y = x, y

    def __call__(self, params: torch.Tensor, per_class: list[float] | None = None) -> tuple[float, float]:
        return evaluate(self.model, params, self.loss_fn, self.x, self.y, per_class=per_class)


def eval_batch(model: nn.Module) -> int:
    """Examples per forward pass when evaluating ``model``: 128 for a model with convolutions or batch
    normalization (on a CPU a convolutional model evaluates about 1.7x faster in batches of 128 than of 1000: the
    activations stay in cache; and batch normalization without running statistics normalizes over each batch),
    8192 for the others (linear models and MLPs: per-call overhead dominates, and a 60-server SNAP simulation
    spent a quarter of its time evaluating 6,000 examples in 47 calls per model)."""
    batched = (nn.modules.conv._ConvNd, nn.modules.batchnorm._NormBase)
    return 128 if any(isinstance(m, batched) for m in model.modules()) else 8192


@torch.no_grad()
def evaluate(model: nn.Module, params: torch.Tensor, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor,
             batch: int | None = None, per_class: list[float] | None = None) -> tuple[float, float]:
    """(mean loss, accuracy) of ``params`` loaded into ``model`` (whose parameters are flat views), in batches
    of ``batch`` (default ``eval_batch``); models with batch normalization without running statistics
    normalize over each batch. A list passed as ``per_class`` is filled with each class's accuracy (class k at
    index k, NaN for a class without examples), for classes 0 to the model's number of outputs - 1."""
    batch = batch or eval_batch(model)
    flat = torch.cat([p.reshape(-1) for p in model.parameters()])
    if flat.numel() != params.numel():
        raise ValueError("parameter count mismatch")
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.copy_(params[offset:offset + n].view_as(p))
        offset += n
    model.eval()
    total_loss, correct, hits = 0.0, 0, []
    reduction = loss_fn.reduction
    loss_fn.reduction = "sum"
    try:
        for i in range(0, len(y), batch):
            out = model(x[i:i + batch])
            total_loss += float(loss_fn(out, y[i:i + batch]))
            hit = out.argmax(1) == y[i:i + batch]
            correct += int(hit.sum())
            if per_class is not None:
                hits.append(hit)
                width = out.shape[1]
    finally:
        loss_fn.reduction = reduction
        model.train()
    if per_class is not None and hits:
        seen = torch.bincount(y, minlength=width).double()
        right = torch.bincount(y[torch.cat(hits)], minlength=width).double()
        per_class[:] = (right / seen).tolist()  # 0 / 0: NaN, a class the examples lack
    return total_loss / len(y), correct / len(y)
