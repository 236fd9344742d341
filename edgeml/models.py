"""Models used by the reproduced papers, sized from the data set's input shape.

Each model adapts to the data: linear models and the MLP flatten any input, CNNs compute their flattened size with a
dummy forward pass and pad small images so their feature maps do not shrink to nothing. Construction draws only
from torch's global generator, so seeding torch before ``build_model`` gives identical weights on every worker.

Two rules follow from training on flat parameter vectors (``train.Trainer``). No dropout: it would draw from
torch's global generator in every step, coupling the nodes of a run (they share one process in ``sim``).
Batch normalization uses the batch's statistics in training and evaluation alike
(``track_running_stats=False``): what nodes exchange and the monitor evaluates is the parameter vector, and
running statistics are buffers outside it, so an evaluated model would otherwise normalize with the
untrained initial buffers.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from edgeml.errors import UserError
from edgeml.schema import check_binary, did_you_mean

MODELS: dict[str, str] = {
    "logreg": "multinomial logistic regression: one linear layer, cross-entropy loss",
    "svm": "linear multi-class SVM: one linear layer, multi-class hinge loss",
    "l2svm": "linear multi-class L2-SVM: one linear layer, squared multi-class hinge loss (smooth, so gradient "
             "methods settle on the optimum: SNAP's simulations)",
    "mlp": "one hidden layer of 30 ReLU units (the 784-30-10 MLP of the SNAP paper)",
    "mlp-128-64": "two hidden layers of 128 and 64 ReLU units (the MNIST MLP of Shokri and Shmatikov's selective "
                  "SGD, AdaComp's Table II model)",
    "adacomp-cnn": "conv 32, pool, conv 32, pool (3x3, same padding), dense 128: the AdaComp paper's CNN (211,690 "
                   "parameters on MNIST, as the paper counts)",
    "lenet5": "LeNet-5 with ReLU: conv 6, pool, conv 16, pool, fc 120-84",
    "cifar-cnn": "TensorFlow-tutorial CIFAR-10 CNN of the ADSP paper: 2 conv 64 + LRN, fc 384-192",
    "resnet18": "ResNet-18 with a 3x3 stride-1 stem and no max-pool, for small images",
    "resnet18-v1": "ResNet-18 v1 with the ImageNet stem (7x7 stride 2, max-pool), as ESync's authors ran it "
                   "on 28x28 images (about 7x cheaper than resnet18)",
    "alexnet": "AlexNet for 32x32 images: 5 conv (11x11/4 stem), 3 max-pool, one linear layer (~2.5M parameters)",
    "mobilenet-v2": "MobileNet-v2 for small images: stride-1 stem and first 24-channel stage (~2.2M parameters "
                    "at width 1)",
    "squeezenet": "SqueezeNet 1.1 for small images: 3x3 stride-1 stem (~0.72M parameters)",
}
_FLAT_MODELS = ("logreg", "svm", "l2svm", "mlp", "mlp-128-64")


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, *, width: float = 1.0,
                binary: bool = False, init: str = "default") -> nn.Module:
    """``_build``, then its initial weights as ``init`` says (``edgeml.schema.ModelSection.init``)."""
    model = _build(name, input_shape, num_classes, width=width, binary=binary)
    if init == "truncated-normal":
        initialize_truncated_normal(model)
    elif init != "default":
        raise UserError(f"model.init = {init!r}: use 'default' or 'truncated-normal'")
    return model


def initialize_truncated_normal(model: nn.Module, std: float = 0.1, bias: float = 0.1) -> None:
    """Every weight from a normal of standard deviation ``std`` redrawn beyond two of them, every bias ``bias``
    (TensorFlow's ``truncated_normal(stddev=0.1)`` and ``constant(0.1)``); drawn from torch's global generator, as
    the default initialization is. Normalization layers keep theirs (scale 1, shift 0)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (nn.BatchNorm2d, nn.GroupNorm, nn.LayerNorm)):
                continue
            for pname, p in module.named_parameters(recurse=False):
                if pname == "bias":
                    p.fill_(bias)
                else:
                    nn.init.trunc_normal_(p, std=std, a=-2 * std, b=2 * std)


def _build(name: str, input_shape: tuple[int, ...], num_classes: int, *, width: float = 1.0,
           binary: bool = False) -> nn.Module:
    """Build a freshly initialized model mapping a batch of ``input_shape`` samples to ``num_classes`` logits.

    ``width`` is MobileNet-v2's width multiplier (channels scaled, rounded to multiples of 8). ``binary``: a linear
    model of two classes with one output s (``BinaryLogits``), the binary logistic regression or SVM (one weight
    per feature and a bias, as scikit-learn's ``LogisticRegression`` and ``LinearSVC`` have for two classes): with
    one output per class, moving both rows of weights alike changes no logit difference, so half of the
    parameters are directions no loss sees."""
    if name not in MODELS:
        raise UserError(f"unknown model '{name}'{did_you_mean(name, list(MODELS))}: choose one of "
                        f"{', '.join(MODELS)}")
    if num_classes < 2:
        raise UserError(f"model needs at least 2 classes, got {num_classes}: check the dataset labels")
    if not width > 0 or (width != 1.0 and name != "mobilenet-v2"):
        raise UserError(f"width multiplier {width} for model '{name}': only mobilenet-v2 takes one, "
                        "and it must be > 0")
    shape = tuple(int(d) for d in input_shape)
    if binary:
        check_binary(name, num_classes)
        return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(shape), 1), BinaryLogits())
    if name in _FLAT_MODELS:
        features = math.prod(shape)
        if name == "mlp":
            return nn.Sequential(nn.Flatten(), nn.Linear(features, 30), nn.ReLU(), nn.Linear(30, num_classes))
        if name == "mlp-128-64":
            return nn.Sequential(nn.Flatten(), nn.Linear(features, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
                                 nn.Linear(64, num_classes))
        return nn.Sequential(nn.Flatten(), nn.Linear(features, num_classes))
    if len(shape) != 3:
        raise UserError(
            f"model '{name}' needs image input [C, H, W] but the data has shape {shape}: "
            f"use one of {', '.join(_FLAT_MODELS)}"
        )
    builders: dict[str, Callable[[tuple[int, int, int], int], nn.Module]] = {
        "adacomp-cnn": _adacomp_cnn,
        "lenet5": _lenet5,
        "cifar-cnn": _cifar_cnn,
        "resnet18": _resnet18,
        "resnet18-v1": lambda s, c: _resnet18(s, c, imagenet_stem=True),
        "alexnet": _alexnet,
        "squeezenet": _squeezenet,
        "mobilenet-v2": lambda s, c: _mobilenet_v2(s, c, width),
    }
    return builders[name]((shape[0], shape[1], shape[2]), num_classes)


def loss_for(name: str) -> nn.Module:
    """The training loss that defines the model: hinge for the SVM, squared hinge for the L2-SVM, cross-entropy for
    everything else."""
    if name not in MODELS:
        raise UserError(f"unknown model '{name}'{did_you_mean(name, list(MODELS))}: choose one of "
                        f"{', '.join(MODELS)}")
    if name in ("svm", "l2svm"):
        return _MarginLoss(p=2 if name == "l2svm" else 1)
    return nn.CrossEntropyLoss()


class BinaryLogits(nn.Module):
    """One score s per sample as the two logits (-s/2, s/2): their difference is s, so the losses of ``loss_for``
    are the binary ones (cross-entropy: log(1 + exp(-y s)); the squared hinge: max(0, 1 - y s)^2 / 2 with y = +-1),
    and argmax predicts the class of s's sign."""

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        return torch.cat([-s / 2, s / 2], dim=1)


class _MarginLoss(nn.MultiMarginLoss):
    """torch's multi-class hinge loss, except that non-finite scores give NaN: torch clamps max(0, NaN) to 0, so a
    diverged SVM would otherwise score a perfect loss of 0."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = super().forward(input, target)
        return torch.where(torch.isfinite(input).all(), loss, torch.full_like(loss, math.nan))


def _with_head(name: str, features: nn.Sequential, shape: tuple[int, int, int], head: list[int], c: int) -> nn.Module:
    """Append Flatten and a ReLU MLP head whose input size comes from a dummy forward pass through ``features``."""
    with torch.no_grad():
        try:
            flat = features(torch.zeros(1, *shape)).numel()
        except RuntimeError:
            flat = 0
    if flat == 0:
        raise UserError(f"images of shape {shape} are too small for model '{name}': use logreg, svm or mlp")
    layers: list[nn.Module] = [nn.Flatten()]
    for width in head:
        layers += [nn.Linear(flat, width), nn.ReLU()]
        flat = width
    layers.append(nn.Linear(flat, c))
    return nn.Sequential(*features, *layers)


class ChannelsLastConv2d(nn.Conv2d):
    """``nn.Conv2d`` computed in channels-last memory format: its output, and so the ReLU and max-pooling after it,
    are channels-last, which torch's CPU kernels run much faster for small CNNs (an adacomp-cnn training step
    1.2-1.5x, its evaluation 1.7-2.4x: ``scripts/bench_conv_layout.py``; torch's channels-first max-pooling took
    a quarter of a step). The weight stays where ``train.flatten_module`` puts it, in its own layout: each forward
    pass takes a channels-last copy of it (a view when it has one input channel, whose two layouts order memory
    alike). The numbers are a convolution's, summed in another order than ``nn.Conv2d``'s: equal up to float32
    rounding, and deterministic."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight
        if w.shape[1] == 1:  # a 1-channel weight's strides already order memory as channels-last: restride it
            out, _, h, k = w.shape
            w = w.view(out, h, k, 1).permute(0, 3, 1, 2)
        else:
            w = w.contiguous(memory_format=torch.channels_last)
        return self._conv_forward(x, w, self.bias)


def _adacomp_cnn(shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    # AdaComp Sec. V-A: "two convolutional layers and two full-connected layers (211,690 parameters)", from
    # Keras's MNIST examples. The paper gives no layer sizes; 32 and 32 3x3 filters with same padding, each followed
    # by 2x2 max-pooling, then dense 128, give exactly 211,690 parameters on 28x28x1 (320 + 9,248 + 200,832 + 1,290).
    features = nn.Sequential(
        ChannelsLastConv2d(shape[0], 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        ChannelsLastConv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
    )  # fmt: skip
    return _with_head("adacomp-cnn", features, shape, [128], num_classes)


def _lenet5(shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    # 32x32 is LeNet's native size; 28x28 gets padding 2 on the first conv (as in the MNIST setup), and images
    # under 16 px also pad the second conv so the map survives both pools.
    side = min(shape[1:])
    features = nn.Sequential(
        nn.Conv2d(shape[0], 6, 5, padding=2 if side < 32 else 0), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5, padding=2 if side < 16 else 0), nn.ReLU(), nn.MaxPool2d(2),
    )  # fmt: skip
    return _with_head("lenet5", features, shape, [120, 84], num_classes)


class LocalResponseNorm(nn.LocalResponseNorm):
    """torch's LocalResponseNorm with the same numbers, forward and backward; for 4-D input the layer alone is
    about 3x faster on a CPU (a cifar-cnn training step 1.4-1.5x, ``scripts/bench_lrn.py``): the window's sum of
    squares as ``size`` shifted slices added in the window's order (what torch's ``avg_pool3d`` adds, in
    float32), instead of a 3-D average pool over a 5-D view, which took a third of a cifar-cnn run's time.
    Other inputs go to torch's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4:
            return super().forward(x)
        channels = x.shape[1]
        squares = nn.functional.pad(x * x, (0, 0, 0, 0, self.size // 2, (self.size - 1) // 2))
        window = squares[:, :channels]
        for i in range(1, self.size):
            window = window + squares[:, i:i + channels]
        return x / (window / self.size).mul(self.alpha).add(self.k).pow(self.beta)


class _ChannelsLastMaxPool(torch.autograd.Function):
    """Max-pooling's forward in channels-last memory, its backward torch's channels-first kernel (see MaxPool2d)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, kernel: list[int], stride: list[int], padding: list[int]) -> torch.Tensor:
        out, indices = torch.ops.aten.max_pool2d_with_indices(
            x.contiguous(memory_format=torch.channels_last), kernel, stride, padding)
        indices = indices.contiguous()
        ctx.save_for_backward(x, indices)
        ctx.pool = (kernel, stride, padding)
        return out.contiguous()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        x, indices = ctx.saved_tensors
        kernel, stride, padding = ctx.pool
        return torch.ops.aten.max_pool2d_with_indices_backward(
            grad.contiguous(), x, kernel, stride, padding, [1, 1], False, indices), None, None, None


class MaxPool2d(nn.MaxPool2d):
    """torch's MaxPool2d with the same numbers, forward and backward, about 4x faster for channels-first 4-D
    input on a CPU (a cifar-cnn training step 1.2x, its evaluation 1.5x: ``scripts/bench_lrn.py``): the maxima
    and their indices come from torch's channels-last kernel on a channels-last copy of the input (the channels-first
    kernel took a fifth of a cifar-cnn step), the output and the backward pass stay channels-first, so the layers
    around it and the gradient's summation order are torch's. Both kernels scan a window in the same order and
    keep its first maximum, so ties pick the same index. Other inputs and options (dilation, ceil mode, returned
    indices) go to torch's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or self.return_indices or self.ceil_mode or nn.modules.utils._pair(self.dilation) != (1, 1):
            return super().forward(x)
        kernel = list(nn.modules.utils._pair(self.kernel_size))
        stride = list(nn.modules.utils._pair(self.stride if self.stride is not None else self.kernel_size))
        padding = list(nn.modules.utils._pair(self.padding))
        if not (torch.is_grad_enabled() and x.requires_grad):
            return nn.functional.max_pool2d(x.contiguous(memory_format=torch.channels_last), kernel, stride,
                                            padding).contiguous()
        return _ChannelsLastMaxPool.apply(x, kernel, stride, padding)


def _cifar_cnn(shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    # TensorFlow's LRN(depth_radius=4, alpha=0.001/9) equals torch's LocalResponseNorm(9, alpha=0.001), since torch
    # divides alpha by the window size. Pool 3 stride 2 padding 1 matches TF's "SAME" output size.
    features = nn.Sequential(
        nn.Conv2d(shape[0], 64, 5, padding=2), nn.ReLU(), MaxPool2d(3, stride=2, padding=1),
        LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0),
        nn.Conv2d(64, 64, 5, padding=2), nn.ReLU(),
        LocalResponseNorm(9, alpha=0.001, beta=0.75, k=1.0),
        MaxPool2d(3, stride=2, padding=1),
    )  # fmt: skip
    return _with_head("cifar-cnn", features, shape, [384, 192], num_classes)


def _resnet18(shape: tuple[int, int, int], num_classes: int, imagenet_stem: bool = False) -> nn.Module:
    # Small images: the usual CIFAR variant, a 3x3 stride-1 stem and no max-pool (the ImageNet stem shrinks a
    # 32x32 image 4x before the first block). ``imagenet_stem``: MXNet Gluon's resnet18_v1 (thumbnail=False),
    # which the ESync authors' code builds for its 28x28 Fashion-MNIST batches: the 7x7 stride-2 stem and
    # max-pool take a 28x28 image to 7x7 before the first block, and the last block sees 1x1. Either way only
    # the stem's input channels follow the data.
    from torchvision.models import resnet18

    model = resnet18(num_classes=num_classes, norm_layer=_batch_norm)
    if imagenet_stem:
        model.conv1 = nn.Conv2d(shape[0], 64, 7, stride=2, padding=3, bias=False)
    else:
        model.conv1 = nn.Conv2d(shape[0], 64, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")  # as torchvision inits convs
    return model


def _alexnet(shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    # The usual CIFAR-10 AlexNet (as in the pytorch-classification collection): AlexNet's five convolutions
    # and three pools with an 11x11 stride-4 stem, one linear layer. Ceil-mode pools keep a 28x28 image to a
    # 1x1 map (floor mode would shrink it to nothing); on 32x32 they change nothing.
    features = nn.Sequential(
        nn.Conv2d(shape[0], 64, 11, stride=4, padding=5), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
        nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
        nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
        nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, ceil_mode=True),
    )  # fmt: skip
    return _with_head("alexnet", features, shape, [], num_classes)


def _mobilenet_v2(shape: tuple[int, int, int], num_classes: int, width: float) -> nn.Module:
    # torchvision's definition; for 32x32 inputs the usual CIFAR change: the stem and the first 24-channel
    # stage keep stride 1, so the image is downsampled 8x (to 4x4) instead of 32x.
    from torchvision.models import MobileNetV2

    setting = [[1, 16, 1, 1], [6, 24, 2, 1], [6, 32, 3, 2], [6, 64, 4, 2], [6, 96, 3, 1], [6, 160, 3, 2],
               [6, 320, 1, 1]]  # torchvision's, with stride 1 in the second row
    model = MobileNetV2(num_classes=num_classes, width_mult=width, inverted_residual_setting=setting,
                        norm_layer=_batch_norm, dropout=0.0)
    stem = model.features[0][0]
    model.features[0][0] = nn.Conv2d(shape[0], stem.out_channels, 3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(model.features[0][0].weight, mode="fan_out")  # as torchvision inits convs
    return model


def _squeezenet(shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from torchvision.models import squeezenet1_1

    model = squeezenet1_1(num_classes=num_classes, dropout=0.0)
    model.features[0] = nn.Conv2d(shape[0], 64, 3, stride=1, padding=1)  # was 3x3 stride 2 for 224px
    nn.init.kaiming_uniform_(model.features[0].weight)  # as torchvision inits SqueezeNet's convs
    nn.init.zeros_(model.features[0].bias)
    try:
        with torch.no_grad():
            model.features(torch.zeros(1, *shape))
    except RuntimeError:  # its three 3x3 max-pools need images of at least 8 px
        raise UserError(f"images of shape {shape} are too small for model 'squeezenet': "
                        "use logreg, svm or mlp") from None
    return model


def _batch_norm(channels: int) -> nn.Module:
    return nn.BatchNorm2d(channels, track_running_stats=False)
