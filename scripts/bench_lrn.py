"""The cifar-cnn's two faster layers against torch's, each alone and both together: local response
normalization (edgeml's shifted slices against torch's 3-D average pool) and max-pooling (edgeml's channels-last
forward against torch's channels-first kernel). Side by side in one process, one thread, alternating: the
training step (forward and backward, batch 32) and the evaluation pass (batch 128) of the model on 28x28
single-channel input, as ADSP's Fashion-MNIST runs take them. Checks that both give the same bits, then
records the time ratios in results/benchmarks/lrn.md.

    python scripts/bench_lrn.py [--repeats N]
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import record  # noqa: E402

from edgeml import models  # noqa: E402


def timed(model: nn.Module, x: torch.Tensor, y: torch.Tensor, train: bool, repeats: int) -> tuple[float, torch.Tensor]:
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for _ in range(repeats):
        model.zero_grad()
        if train:
            loss = loss_fn(model(x), y)
            loss.backward()
            out = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        else:
            with torch.no_grad():
                out = model(x)
    return (time.perf_counter() - start) / repeats, out


def with_torchs(model: nn.Module, layers: tuple[type, ...]) -> nn.Module:
    """A copy of ``model`` whose edgeml layers of the given types are torch's, with the same settings."""
    model = copy.deepcopy(model)
    for module in model.modules():
        for child_name, child in list(module.named_children()):
            if isinstance(child, models.LocalResponseNorm) and models.LocalResponseNorm in layers:
                setattr(module, child_name, nn.LocalResponseNorm(child.size, child.alpha, child.beta, child.k))
            elif isinstance(child, models.MaxPool2d) and models.MaxPool2d in layers:
                setattr(module, child_name, nn.MaxPool2d(child.kernel_size, child.stride, child.padding))
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ours = models.build_model("cifar-cnn", (1, 28, 28), 10)
    lines = ["| layer | pass | batch | torch's (s) | edgeml's (s) | ratio | same bits |",
             "|---|---|---|---|---|---|---|"]
    for label, layers in (("LRN", (models.LocalResponseNorm,)), ("max-pool", (models.MaxPool2d,)),
                          ("both", (models.LocalResponseNorm, models.MaxPool2d))):
        theirs = with_torchs(ours, layers)
        for train, batch in ((True, 32), (False, 128)):
            g = torch.Generator().manual_seed(1)
            x, y = torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g)
            t_theirs = t_ours = 0.0
            for _ in range(2):  # alternate, so a change in the machine's load falls on both
                a, out_theirs = timed(theirs, x, y, train, args.repeats)
                b, out_ours = timed(ours, x, y, train, args.repeats)
                t_theirs, t_ours = t_theirs + a / 2, t_ours + b / 2
            same = torch.equal(out_theirs, out_ours)
            lines.append(f"| {label} | {'training step' if train else 'evaluation'} | {batch} | {t_theirs:.4f} | "
                         f"{t_ours:.4f} | {t_theirs / t_ours:.2f}x | {'yes' if same else 'NO'} |")
    record("lrn", ["One thread; each time the mean of 2 x " + str(args.repeats) + " passes, the two models "
                   "alternating. torch's: the model with torch's layer in place of edgeml's (both: neither of "
                   "edgeml's two).", "", *lines])


if __name__ == "__main__":
    main()
