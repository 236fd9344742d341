"""Convolutions in channels-last memory format (``models.ChannelsLastConv2d``) against torch's default layout,
side by side in one process, one thread, alternating: the training step (forward and backward, with the
parameters as views of a flat vector as ``train.Trainer`` seats them) and the evaluation pass (batch 128) of
each small CNN on 28x28 single-channel input, each at the batch its experiments train with (adacomp-cnn 10,
lenet5 and cifar-cnn 32). Records the time ratio and the largest gradient difference (float32 rounding: the two
layouts sum in different orders) in results/benchmarks/conv_layout.md. adacomp-cnn builds with the
channels-last layer; the others keep torch's.

    python scripts/bench_conv_layout.py [--repeats N]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import record  # noqa: E402

from edgeml import models  # noqa: E402
from edgeml.train import flatten_module  # noqa: E402

CASES = [("adacomp-cnn", 10, 200), ("lenet5", 32, 100), ("cifar-cnn", 32, 10)]
"""(model, training batch, passes per timing at --repeats 1)."""


def with_layer(name: str, channels_last: bool) -> nn.Module:
    """``name`` built from seed 0, every convolution of it as ``ChannelsLastConv2d`` or as ``nn.Conv2d``."""
    torch.manual_seed(0)
    model = models.build_model(name, (1, 28, 28), 10)
    kind = models.ChannelsLastConv2d if channels_last else nn.Conv2d
    for module in model.modules():
        for child_name, child in list(module.named_children()):
            if isinstance(child, nn.Conv2d) and type(child) is not kind:
                new = kind(child.in_channels, child.out_channels, child.kernel_size, child.stride, child.padding,
                           child.dilation, child.groups, child.bias is not None, child.padding_mode)
                new.load_state_dict(child.state_dict())
                setattr(module, child_name, new)
    return model


def timed(model: nn.Module, grads: torch.Tensor, x: torch.Tensor, y: torch.Tensor, train: bool,
          passes: int) -> float:
    loss_fn = nn.CrossEntropyLoss()
    start = time.perf_counter()
    for _ in range(passes):
        if train:
            grads.zero_()
            loss_fn(model(x), y).backward()
        else:
            with torch.no_grad():
                model(x)
    return (time.perf_counter() - start) / passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternations of the two layouts")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    torch.set_num_threads(1)
    lines = ["| model | pass | batch | torch's layout (ms) | channels-last (ms) | ratio | largest gradient "
             "difference |",
             "|---|---|---|---|---|---|---|"]
    for name, batch, passes in CASES:
        default, fast = with_layer(name, False), with_layer(name, True)
        (_, g_default), (_, g_fast) = flatten_module(default), flatten_module(fast)
        gen = torch.Generator().manual_seed(1)
        x, y = torch.randn(batch, 1, 28, 28, generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        for train, b in ((True, batch), (False, 128)):
            xb = x if train else torch.randn(b, 1, 28, 28, generator=gen)
            yb = y if train else torch.randint(0, 10, (b,), generator=gen)
            timed(default, g_default, xb, yb, train, 2)  # warm up
            timed(fast, g_fast, xb, yb, train, 2)
            a = c = 0.0
            for _ in range(args.repeats):  # alternate, so a change in the machine's load falls on both
                a += timed(default, g_default, xb, yb, train, passes) / args.repeats
                c += timed(fast, g_fast, xb, yb, train, passes) / args.repeats
            diff = f"{float((g_default - g_fast).abs().max()):.1e} of {float(g_default.abs().max()):.1e}" if train \
                else "-"
            lines.append(f"| {name} | {'training step' if train else 'evaluation'} | {b} | {a * 1e3:.2f} | "
                         f"{c * 1e3:.2f} | {a / c:.2f}x | {diff} |")
    record("conv_layout", [f"One thread; each time the mean over {args.repeats} alternations of the two layouts "
                           "(passes per timing: adacomp-cnn 200, lenet5 100, cifar-cnn 10). Measured on a 2-core "
                           "host with two other single-thread processes running: absolute times are above a "
                           "quiet core's, and the ratios vary by about 0.3 from one run to the next.", "", *lines])


if __name__ == "__main__":
    main()
