"""Every model builds for every input shape it supports, and gives one logit per class."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from edgeml.errors import UserError
from edgeml.models import MODELS, build_model, loss_for

IMAGE_SHAPES = [(1, 28, 28), (3, 32, 32), (1, 8, 8)]
FLAT = ["logreg", "svm", "mlp"]
CNNS = ["adacomp-cnn", "lenet5", "cifar-cnn"]
SMALL_IMAGE_NETS = ["alexnet", "mobilenet-v2", "squeezenet"]  # torchvision-sized nets adapted to 28 and 32 px


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("shape", IMAGE_SHAPES + [(30,)])
@pytest.mark.parametrize("name", FLAT + CNNS)
def test_forward_shape(name: str, shape: tuple[int, ...]) -> None:
    if name in CNNS and len(shape) == 1:
        pytest.skip("CNNs need images; covered by test_cnn_rejects_tabular")
    model = build_model(name, shape, 10)
    assert model(torch.randn(3, *shape)).shape == (3, 10)


@pytest.mark.slow
@pytest.mark.parametrize("shape", IMAGE_SHAPES)
@pytest.mark.parametrize("name", ["resnet18", "resnet18-v1"])
def test_resnet18_forward(name: str, shape: tuple[int, ...]) -> None:
    model = build_model(name, shape, 7).eval()
    assert model(torch.randn(2, *shape)).shape == (2, 7)


def test_resnet18_v1_keeps_the_imagenet_stem() -> None:
    # As ESync's authors ran Gluon's resnet18_v1 on 28x28 images: 7x7 stride-2 stem and max-pool, so the first
    # block sees 7x7 and the last 1x1; the same parameters as the small-image variant but for the stem.
    model = build_model("resnet18-v1", (1, 28, 28), 10).eval()
    seen: dict[str, tuple[int, ...]] = {}

    def record(name: str):  # a forward hook must return None, or its value replaces the output
        return lambda module, inputs, output: seen.update({name: tuple(output.shape)})

    for name in ("layer1", "layer4"):
        getattr(model, name).register_forward_hook(record(name))
    model(torch.randn(2, 1, 28, 28))
    assert seen == {"layer1": (2, 64, 7, 7), "layer4": (2, 512, 1, 1)}
    small = build_model("resnet18", (1, 28, 28), 10)
    assert _params(model) - _params(small) == 64 * (7 * 7 - 3 * 3)


@pytest.mark.parametrize("name", CNNS + ["resnet18", "resnet18-v1"] + SMALL_IMAGE_NETS)
def test_cnn_rejects_tabular(name: str) -> None:
    with pytest.raises(UserError, match="image input") as err:
        build_model(name, (30,), 2)
    assert all(flat in str(err.value) for flat in FLAT)


def test_adacomp_cnn_has_the_papers_parameter_count() -> None:
    assert _params(build_model("adacomp-cnn", (1, 28, 28), 10)) == 211_690  # adacomp.txt Sec. V-A


def test_the_selective_sgd_mlp() -> None:
    assert _params(build_model("mlp-128-64", (1, 28, 28), 10)) == 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10


def test_mlp_size() -> None:
    assert _params(build_model("mlp", (784,), 10)) == 784 * 30 + 30 + 30 * 10 + 10
    assert _params(build_model("mlp", (1, 28, 28), 10)) == 784 * 30 + 30 + 30 * 10 + 10


def test_linear_models_are_one_layer() -> None:
    for name in ("logreg", "svm", "l2svm"):
        assert _params(build_model(name, (30,), 2)) == 30 * 2 + 2


def test_lenet5_classic_size_on_32px() -> None:
    # conv1 156 + conv2 2416 + fc 400*120+120 + 120*84+84 + 84*10+10 = 61706, LeNet-5's well-known count.
    assert _params(build_model("lenet5", (1, 32, 32), 10)) == 61706


def test_losses() -> None:
    assert isinstance(loss_for("svm"), nn.MultiMarginLoss) and loss_for("svm").p == 1
    assert isinstance(loss_for("l2svm"), nn.MultiMarginLoss) and loss_for("l2svm").p == 2  # squared hinge
    for name in MODELS:
        if name not in ("svm", "l2svm"):
            assert isinstance(loss_for(name), nn.CrossEntropyLoss)


@pytest.mark.parametrize("name", ["svm", "l2svm", "mlp"])
def test_a_diverged_model_has_nan_loss(name: str) -> None:
    # torch's hinge loss clamps max(0, NaN) to 0: a diverged SVM must not look like a perfect one
    y = torch.tensor([0, 1, 2])
    for bad in (math.nan, math.inf):
        scores = torch.tensor([[1.0, bad, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0]])
        assert math.isnan(float(loss_for(name)(scores, y)))
    if name != "mlp":  # finite scores: exactly torch's hinge loss
        scores = torch.tensor([[0.5, 0.2, 0.0], [0.0, 2.0, 1.5], [0.0, 0.0, 3.0]])
        p = 2 if name == "l2svm" else 1
        assert float(loss_for(name)(scores, y)) == float(nn.MultiMarginLoss(p=p)(scores, y)) > 0



def test_deterministic_given_seed() -> None:
    def weights(seed: int) -> list[torch.Tensor]:
        torch.manual_seed(seed)
        return [p.detach().clone() for p in build_model("cifar-cnn", (3, 32, 32), 10).parameters()]

    assert all(torch.equal(a, b) for a, b in zip(weights(0), weights(0)))
    assert not all(torch.equal(a, b) for a, b in zip(weights(0), weights(1)))


def test_unknown_model_lists_names() -> None:
    for call in (lambda: build_model("vgg", (1, 28, 28), 10), lambda: loss_for("vgg")):
        with pytest.raises(UserError) as err:
            call()
        assert all(name in str(err.value) for name in MODELS)


def test_too_small_image_is_user_error() -> None:
    with pytest.raises(UserError, match="too small"):
        build_model("adacomp-cnn", (1, 2, 2), 10)


def test_needs_two_classes() -> None:
    with pytest.raises(UserError, match="2 classes"):
        build_model("logreg", (30,), 1)


# --- AlexNet, MobileNet-v2, SqueezeNet on 28x28 grayscale and 32x32 colour ------------------------------------------


def _alexnet_params(channels: int, num_classes: int) -> int:
    convs = [(channels, 64, 11), (64, 192, 5), (192, 384, 3), (384, 256, 3), (256, 256, 3)]
    return sum(i * o * k * k + o for i, o, k in convs) + 256 * num_classes + num_classes  # 1x1 map at the end


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
@pytest.mark.parametrize("name", SMALL_IMAGE_NETS)
def test_small_image_nets_train(name: str, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    model = build_model(name, shape, 10)
    x, y = torch.randn(8, *shape), torch.arange(8) % 10
    assert model(x[:3]).shape == (3, 10)
    rng = torch.get_rng_state()
    opt = torch.optim.SGD(model.parameters(), lr=0.005)
    before = nn.functional.cross_entropy(model(x), y)
    before.backward()
    opt.step()
    after = nn.functional.cross_entropy(model(x), y)
    assert after < before
    assert torch.equal(rng, torch.get_rng_state())  # no dropout: training never draws from the global RNG
    # batch norm keeps no running statistics: the parameter vector is the whole model state
    assert not any("running" in b for b, _ in model.named_buffers())


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32)])
def test_small_image_net_sizes(shape: tuple[int, ...]) -> None:
    from torchvision.models import mobilenet_v2, squeezenet1_1

    c = shape[0]
    # AlexNet: the five convolutions and one linear layer, counted by hand (2.47M on colour images)
    assert _params(build_model("alexnet", shape, 10)) == _alexnet_params(c, 10)
    assert _params(build_model("alexnet", (3, 32, 32), 10)) == 2_472_266
    # MobileNet-v2 and SqueezeNet: torchvision's nets with only the stem's input channels changed
    for width in (1.0, 0.5):
        ours = _params(build_model("mobilenet-v2", shape, 10, width=width))
        stem = 32 if width == 1.0 else 16
        assert ours == _params(mobilenet_v2(num_classes=10, width_mult=width)) - (3 - c) * stem * 9
    assert _params(build_model("mobilenet-v2", (3, 32, 32), 10)) == 2_236_682
    assert _params(build_model("squeezenet", shape, 10)) == _params(squeezenet1_1(num_classes=10)) - (3 - c) * 64 * 9


def test_small_image_net_strides() -> None:
    # 32x32 is downsampled 8x by MobileNet-v2 (4x4 before pooling) and to 4x4 before SqueezeNet's classifier
    mobile = build_model("mobilenet-v2", (3, 32, 32), 10)
    assert mobile.features(torch.randn(2, 3, 32, 32)).shape == (2, 1280, 4, 4)
    squeeze = build_model("squeezenet", (1, 28, 28), 10)
    assert squeeze.features(torch.randn(2, 1, 28, 28)).shape[-2:] == (3, 3)


def test_width_multiplier_only_for_mobilenet() -> None:
    with pytest.raises(UserError, match="only mobilenet-v2"):
        build_model("alexnet", (3, 32, 32), 10, width=0.5)
    with pytest.raises(UserError, match="> 0"):
        build_model("mobilenet-v2", (3, 32, 32), 10, width=0.0)
    with pytest.raises(UserError, match="too small"):
        build_model("squeezenet", (1, 4, 4), 10)


@pytest.mark.parametrize("name", ["resnet18", "resnet18-v1"])
def test_resnet18_keeps_no_running_statistics(name: str) -> None:
    model = build_model(name, (1, 28, 28), 10)
    assert not any("running" in b for b, _ in model.named_buffers())


@pytest.mark.parametrize("size", [1, 2, 4, 9])
def test_local_response_norm_gives_torchs_bits_forward_and_backward(size: int) -> None:
    from edgeml.models import LocalResponseNorm

    g = torch.Generator().manual_seed(size)
    for shape in [(8, 16, 7, 7), (3, 5, 4)]:  # 4-D: the shifted slices; 3-D: torch's own path
        x0, w = torch.randn(*shape, generator=g) * 3, torch.randn(*shape, generator=g)
        ours, theirs = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        a = LocalResponseNorm(size, alpha=0.001, beta=0.75, k=1.0)(ours)
        b = torch.nn.LocalResponseNorm(size, alpha=0.001, beta=0.75, k=1.0)(theirs)
        (a * w).sum().backward()
        (b * w).sum().backward()
        assert torch.equal(a, b) and torch.equal(ours.grad, theirs.grad)


@pytest.mark.parametrize("kernel,stride,padding", [(3, 2, 1), (2, None, 0), (3, 1, 1), ((2, 3), (1, 2), (1, 0))])
def test_max_pool_gives_torchs_bits_forward_and_backward(kernel, stride, padding) -> None:
    """edgeml's MaxPool2d (channels-last forward) against torch's: the same output, the same gradient, with and
    without autograd, on inputs full of ties (ReLU zeros, repeated values) and on 1 channel or 1 sample."""
    from edgeml.models import MaxPool2d

    g = torch.Generator().manual_seed(3)
    for shape in [(8, 16, 13, 11), (1, 1, 9, 9), (4, 3, 28, 28), (5, 7, 6)]:  # 3-D: torch's own path
        x0 = torch.relu(torch.randn(*shape, generator=g)).round(decimals=1)  # zeros and repeated values
        w = torch.randn(*x0.shape[:-2], *nn.functional.max_pool2d(x0, kernel, stride, padding).shape[-2:],
                        generator=g)
        ours, theirs = x0.clone().requires_grad_(), x0.clone().requires_grad_()
        a = MaxPool2d(kernel, stride, padding)(ours)
        b = nn.MaxPool2d(kernel, stride, padding)(theirs)
        (a * w).sum().backward()
        (b * w).sum().backward()
        assert a.is_contiguous() and torch.equal(a, b) and torch.equal(ours.grad, theirs.grad)
        with torch.no_grad():
            assert torch.equal(MaxPool2d(kernel, stride, padding)(x0), b)


def test_max_pool_keeps_torchs_options() -> None:
    """Options the channels-last path does not take (ceil mode, dilation, returned indices) give torch's result."""
    from edgeml.models import MaxPool2d

    x = torch.randn(2, 3, 9, 9, generator=torch.Generator().manual_seed(0))
    for options in [{"ceil_mode": True}, {"dilation": 2}, {"return_indices": True}]:
        ours, theirs = MaxPool2d(2, **options)(x), nn.MaxPool2d(2, **options)(x)
        ours, theirs = (ours, theirs) if isinstance(ours, tuple) else ((ours,), (theirs,))
        assert len(ours) == len(theirs) and all(torch.equal(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("channels", [1, 3])
def test_channels_last_conv_is_the_convolution_and_trains_the_flat_vector(channels: int) -> None:
    """``ChannelsLastConv2d`` (adacomp-cnn's layers) computes nn.Conv2d's convolution in channels-last format:
    the same output and gradients up to float32 rounding, an output in channels-last memory, and gradients that
    land in the weight's own storage (here a view of a flat vector, as ``train.flatten_module`` seats it)."""
    from edgeml.models import ChannelsLastConv2d
    from edgeml.train import flatten_module

    torch.manual_seed(0)
    ours = ChannelsLastConv2d(channels, 8, 3, padding=1)
    ref = nn.Conv2d(channels, 8, 3, padding=1)
    ref.load_state_dict(ours.state_dict())
    params, grads = flatten_module(ours)
    x = torch.randn(4, channels, 12, 12)
    out, expected = ours(x), ref(x)
    assert out.is_contiguous(memory_format=torch.channels_last) and not expected.is_contiguous(
        memory_format=torch.channels_last)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    weights = torch.randn(expected.shape)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    assert grads.abs().sum() > 0  # the gradients are in the flat vector
    torch.testing.assert_close(grads, torch.cat([ref.weight.grad.reshape(-1), ref.bias.grad]), rtol=1e-5, atol=1e-5)
    assert params.data_ptr() == ours.weight.data_ptr()  # still the flat vector's view


def test_a_binary_linear_model_is_a_weight_per_feature_and_a_bias_with_the_binary_losses() -> None:
    """``binary``: one score s as the logits (-s/2, s/2): 24 weights and a bias on 24 features (SNAP's SVM), and
    the losses of ``loss_for`` on it are the binary ones: log(1 + exp(-y s)), max(0, 1 - y s)^2 / 2,
    max(0, 1 - y s) / 2 with y = +-1."""
    torch.manual_seed(0)
    x, target = torch.randn(64, 24), torch.randint(0, 2, (64,))
    y = 2.0 * target - 1.0
    for name, binary_loss in (("logreg", lambda s: torch.log1p(torch.exp(-y * s))),
                              ("l2svm", lambda s: (1 - y * s).clamp(min=0) ** 2 / 2),
                              ("svm", lambda s: (1 - y * s).clamp(min=0) / 2)):
        model = build_model(name, (24,), 2, binary=True)
        assert _params(model) == 25
        s = model[1](x).squeeze(1)  # the score
        logits = model(x)
        assert logits.shape == (64, 2) and torch.equal(logits.argmax(1), (s > 0).long())
        assert torch.allclose(loss_for(name)(logits, target), binary_loss(s).mean(), rtol=1e-6)
    # one output per class: moving both rows of weights alike changes no loss, a direction the binary model lacks
    two = build_model("l2svm", (24,), 2)
    before = loss_for("l2svm")(two(x), target)
    with torch.no_grad():
        two[1].weight += torch.randn(24)
    assert torch.allclose(loss_for("l2svm")(two(x), target), before)


@pytest.mark.parametrize(("name", "classes"), [("mlp", 2), ("lenet5", 2), ("l2svm", 3), ("logreg", 10)])
def test_binary_is_refused_for_other_models_and_more_classes(name: str, classes: int) -> None:
    with pytest.raises(UserError, match="model.binary = true is for a linear model"):
        build_model(name, (1, 28, 28), classes, binary=True)


def test_the_truncated_normal_initialization_is_tensorflows():
    """model.init = "truncated-normal": every weight within two standard deviations of 0.1 with the truncated
    normal's spread (0.1 x 0.88), every bias 0.1, normalization layers untouched; seeded as the default is."""
    torch.manual_seed(3)
    model = build_model("adacomp-cnn", (1, 28, 28), 10, init="truncated-normal")
    weights = torch.cat([p.reshape(-1) for n, p in model.named_parameters() if not n.endswith("bias")])
    biases = torch.cat([p.reshape(-1) for n, p in model.named_parameters() if n.endswith("bias")])
    assert weights.abs().max() <= 0.2 and abs(weights.std().item() - 0.1 * 0.8796) < 0.002
    assert torch.equal(biases, torch.full_like(biases, 0.1))
    torch.manual_seed(3)
    again = build_model("adacomp-cnn", (1, 28, 28), 10, init="truncated-normal")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    resnet = build_model("resnet18", (3, 32, 32), 10, init="truncated-normal")
    norms = [m for m in resnet.modules() if isinstance(m, nn.BatchNorm2d)]
    assert norms and all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in norms)
    torch.manual_seed(3)
    default = build_model("adacomp-cnn", (1, 28, 28), 10)
    torch.manual_seed(3)
    assert all(torch.equal(a, b) for a, b in zip(default.parameters(), build_model("adacomp-cnn", (1, 28, 28), 10,
                                                                                   init="default").parameters()))
    with pytest.raises(UserError, match="model.init"):
        build_model("mlp", (30,), 2, init="xavier")
