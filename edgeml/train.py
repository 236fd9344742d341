"""The shared training step: one model, batch and optimizer code for every algorithm and both backends.

``Job`` is what every node of a run shares (config, cluster model, data, initial model). ``Trainer`` is a
worker's model with its parameters and gradients laid out in one flat tensor each, so that an update is a
single tensor on the wire and an SGD step is one in-place operation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from edgeml.data import Dataset, load_dataset, partition
from edgeml.hetero import Cluster, build_cluster
from edgeml.models import build_model, loss_for


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
    cluster: Cluster
    dataset: Dataset
    model_name: str
    shards: list[torch.Tensor]
    init_params: torch.Tensor
    test_index: torch.Tensor
    base_step_s: float

    @property
    def num_workers(self) -> int:
        return len(self.shards)

    def make_model(self) -> nn.Module:
        ds = self.dataset
        torch.manual_seed(self.cfg.run.seed)
        return build_model(self.model_name, ds.input_shape, ds.num_classes)

    def trainer(self, worker: int, device: str = "cpu") -> "Trainer":
        """Worker ``worker``'s trainer over its shard, starting from the common initial model."""
        ds = self.dataset
        idx = self.shards[worker]
        return Trainer(self.make_model(), loss_for(self.model_name), ds.x_train, ds.y_train, idx,
                       self.cfg.data.batch_size, seed=self.cfg.run.seed * 100_003 + worker,
                       init=self.init_params, device=device)


def build_job(cfg, base_step_s: float | None = None) -> Job:
    """Load data, partition it, build the initial model: the deterministic part of a run's setup."""
    from edgeml.errors import UserError

    ds = load_dataset(cfg.data.dataset, root=cfg.data.root or None, download=cfg.data.download)
    model_name = cfg.model.name or default_model(ds)
    n = cfg.cluster.workers
    if n > len(ds.y_train):
        raise UserError(f"{n} workers but only {len(ds.y_train)} training samples: use fewer workers")
    shards = partition(ds.y_train, n, cfg.data.partition, seed=cfg.run.seed, alpha=cfg.data.alpha,
                       shards_per_part=cfg.data.shards_per_worker)
    smallest = min(range(n), key=lambda w: len(shards[w]))
    if cfg.data.batch_size > len(shards[smallest]):
        raise UserError(f"data.batch_size = {cfg.data.batch_size} is larger than worker {smallest}'s share of "
                        f"{len(shards[smallest])} training samples ({cfg.data.partition} split of {len(ds.y_train)} "
                        f"over {n} workers): use --batch-size {len(shards[smallest])} or less, or fewer workers")
    torch.manual_seed(cfg.run.seed)
    model = build_model(model_name, ds.input_shape, ds.num_classes)
    init, _ = flatten_module(model)
    g = torch.Generator().manual_seed(cfg.run.seed + 7)
    n_test = len(ds.y_test)
    k = cfg.eval.test_samples or n_test
    test_index = torch.randperm(n_test, generator=g)[: min(k, n_test)].sort().values
    if base_step_s is None:
        base_step_s = cfg.cluster.base_step_s or 0.01
    return Job(cfg, build_cluster(cfg), ds, model_name, shards, init, test_index, base_step_s)


class Trainer:
    """A model whose parameters live in ``self.params`` (flat) and gradients in ``self.grad`` (flat)."""

    def __init__(self, model: nn.Module, loss: nn.Module, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor,
                 batch_size: int, *, seed: int, init: torch.Tensor | None = None, device: str = "cpu"):
        self.model = model.to(device)
        self.params, self.grad = flatten_module(self.model)
        if init is not None:
            self.params.copy_(init)
        self.loss_fn = loss
        self.x, self.y, self.index = x, y, index
        self.batch_size = min(batch_size, len(index))
        self.device = device
        self._gen = torch.Generator().manual_seed(seed)
        self._order = torch.empty(0, dtype=torch.long)
        self._pos = 0
        self.epoch = 0

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next mini-batch of this worker's shard, reshuffled every epoch (drop-last)."""
        if self._pos + self.batch_size > len(self._order):
            self._order = self.index[torch.randperm(len(self.index), generator=self._gen)]
            self._pos = 0
            self.epoch += 1
        sel = self._order[self._pos:self._pos + self.batch_size]
        self._pos += self.batch_size
        return self.x[sel].to(self.device), self.y[sel].to(self.device)

    def gradient(self) -> float:
        """Compute the gradient of one mini-batch into ``self.grad``; return the batch loss."""
        x, y = self.next_batch()
        self.grad.zero_()
        loss = self.loss_fn(self.model(x), y)
        loss.backward()
        return float(loss.detach())

    def sgd(self, lr: float) -> None:
        self.params.add_(self.grad, alpha=-lr)


@torch.no_grad()
def evaluate(model: nn.Module, params: torch.Tensor, loss_fn: nn.Module, x: torch.Tensor, y: torch.Tensor,
             batch: int = 1000) -> tuple[float, float]:
    """(mean loss, accuracy) of ``params`` loaded into ``model`` (whose parameters are flat views)."""
    flat = torch.cat([p.reshape(-1) for p in model.parameters()])
    if flat.numel() != params.numel():
        raise ValueError("parameter count mismatch")
    offset = 0
    for p in model.parameters():
        n = p.numel()
        p.copy_(params[offset:offset + n].view_as(p))
        offset += n
    model.eval()
    total_loss, correct = 0.0, 0
    reduction = loss_fn.reduction
    loss_fn.reduction = "sum"
    try:
        for i in range(0, len(y), batch):
            out = model(x[i:i + batch])
            total_loss += float(loss_fn(out, y[i:i + batch]))
            correct += int((out.argmax(1) == y[i:i + batch]).sum())
    finally:
        loss_fn.reduction = reduction
        model.train()
    return total_loss / len(y), correct / len(y)
