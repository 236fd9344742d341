"""Every model builds for every input shape it supports, and gives one logit per class."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from edgeml.errors import UserError
from edgeml.models import MODELS, build_model, loss_for

IMAGE_SHAPES = [(1, 28, 28), (3, 32, 32), (1, 8, 8)]
FLAT = ["logreg", "svm", "mlp"]
CNNS = ["adacomp-cnn", "lenet5", "cifar-cnn"]


def _params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("shape", IMAGE_SHAPES + [(30,)])
@pytest.mark.parametrize("name", FLAT + CNNS)
def test_forward_shape(name: str, shape: tuple[int, ...]) -> None:
    if name in CNNS and len(shape) == 1:
        pytest.skip("CNNs need images; covered by test_cnn_rejects_tabular")
    model = build_model(name, shape, 10)
    assert model(torch.randn(3, *shape)).shape == (3, 10)


@pytest.mark.parametrize("shape", IMAGE_SHAPES)
def test_resnet18_forward(shape: tuple[int, ...]) -> None:
    model = build_model("resnet18", shape, 7).eval()
    assert model(torch.randn(2, *shape)).shape == (2, 7)


@pytest.mark.parametrize("name", CNNS + ["resnet18"])
def test_cnn_rejects_tabular(name: str) -> None:
    with pytest.raises(UserError, match="image input") as err:
        build_model(name, (30,), 2)
    assert all(flat in str(err.value) for flat in FLAT)


def test_adacomp_cnn_size() -> None:
    assert 150_000 <= _params(build_model("adacomp-cnn", (1, 28, 28), 10)) <= 300_000


def test_mlp_size() -> None:
    assert _params(build_model("mlp", (784,), 10)) == 784 * 30 + 30 + 30 * 10 + 10
    assert _params(build_model("mlp", (1, 28, 28), 10)) == 784 * 30 + 30 + 30 * 10 + 10


def test_linear_models_are_one_layer() -> None:
    for name in ("logreg", "svm"):
        assert _params(build_model(name, (30,), 2)) == 30 * 2 + 2


def test_lenet5_classic_size_on_32px() -> None:
    # conv1 156 + conv2 2416 + fc 400*120+120 + 120*84+84 + 84*10+10 = 61706, LeNet-5's well-known count.
    assert _params(build_model("lenet5", (1, 32, 32), 10)) == 61706


def test_losses() -> None:
    assert isinstance(loss_for("svm"), nn.MultiMarginLoss)
    for name in MODELS:
        if name != "svm":
            assert isinstance(loss_for(name), nn.CrossEntropyLoss)


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
