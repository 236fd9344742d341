"""Data loading from the original file formats, and the partition schemes."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import torch

import edgeml.data as data
from edgeml.data import DATASETS, PARTITIONS, load_dataset, partition
from edgeml.errors import UserError

try:
    from tests.fixtures_formats import IDX_STEMS, idx_bytes, write_cifar_like, write_mnist_like
except ImportError:  # tests/ itself is on sys.path when it is not a package
    from fixtures_formats import IDX_STEMS, idx_bytes, write_cifar_like, write_mnist_like


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point HOME at an empty folder and drop EDGEML_DATA and EDGEML_CACHE, so tests never see the user's real
    data and the cache is ~/.cache/edgeml of that folder."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("EDGEML_DATA", raising=False)
    monkeypatch.delenv("EDGEML_CACHE", raising=False)
    return home


def _pixels(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """Undo normalization back to uint8 pixels."""
    m, s = torch.tensor(mean).view(1, -1, 1, 1), torch.tensor(std).view(1, -1, 1, 1)
    return torch.round((x * s + m) * 255).to(torch.uint8).numpy()


# --- IDX / MNIST family -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [True, False])
@pytest.mark.parametrize("name", ["mnist", "fashion-mnist"])
def test_idx_round_trip(tmp_path: Path, name: str, gz: bool) -> None:
    arrays = write_mnist_like(tmp_path, gz=gz)
    ds = load_dataset(name, root=tmp_path)
    assert ds.name == name and ds.num_classes == 10
    assert ds.x_train.shape == (20, 1, 28, 28) and ds.x_test.shape == (10, 1, 28, 28)
    assert ds.input_shape == (1, 28, 28)
    assert ds.x_train.dtype == torch.float32 and ds.y_train.dtype == torch.int64
    mean, std = data._NORMALIZATION[name]
    np.testing.assert_array_equal(_pixels(ds.x_train, mean, std)[:, 0], arrays["train_x"])
    np.testing.assert_array_equal(_pixels(ds.x_test, mean, std)[:, 0], arrays["test_x"])
    np.testing.assert_array_equal(ds.y_train.numpy(), arrays["train_y"])
    np.testing.assert_array_equal(ds.y_test.numpy(), arrays["test_y"])


@pytest.mark.parametrize("sub", ["MNIST/raw", "mnist"])
def test_idx_layouts_under_root(tmp_path: Path, sub: str) -> None:
    arrays = write_mnist_like(tmp_path / sub, seed=1)
    ds = load_dataset("mnist", root=tmp_path)
    np.testing.assert_array_equal(ds.y_train.numpy(), arrays["train_y"])


def test_env_var_and_cache_are_searched(tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cached = write_mnist_like(isolated_home / ".cache" / "edgeml" / "mnist", seed=2)
    np.testing.assert_array_equal(load_dataset("mnist").y_train.numpy(), cached["train_y"])
    env = write_mnist_like(tmp_path / "env" / "MNIST" / "raw", seed=3)
    monkeypatch.setenv("EDGEML_DATA", str(tmp_path / "env"))
    np.testing.assert_array_equal(load_dataset("mnist").y_train.numpy(), env["train_y"])
    # An explicit root wins over both.
    rooted = write_mnist_like(tmp_path / "root", seed=4)
    np.testing.assert_array_equal(load_dataset("mnist", root=tmp_path / "root").y_train.numpy(), rooted["train_y"])


def test_edgeml_cache_moves_the_data_cache(tmp_path: Path, isolated_home: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """$EDGEML_CACHE is the one cache root: a data set is found under $EDGEML_CACHE/<name>, and the default
    ~/.cache/edgeml is then no longer searched (SNAP's weights use the same root, test_snap)."""
    write_mnist_like(isolated_home / ".cache" / "edgeml" / "mnist", seed=2)
    moved = write_mnist_like(tmp_path / "cache" / "mnist", seed=5)
    monkeypatch.setenv("EDGEML_CACHE", str(tmp_path / "cache"))
    np.testing.assert_array_equal(load_dataset("mnist").y_train.numpy(), moved["train_y"])
    monkeypatch.setenv("EDGEML_CACHE", str(tmp_path / "empty"))
    with pytest.raises(UserError, match="--download"):
        load_dataset("mnist")


def test_missing_dataset_names_both_fixes(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        load_dataset("mnist", root=tmp_path)
    msg = str(err.value)
    assert "--data-root" in msg and "--download" in msg and str(tmp_path) in msg and "\n" not in msg


def test_root_is_the_only_place_searched(tmp_path: Path, isolated_home: Path) -> None:
    """A given root is what the run's config records, so data elsewhere (here the cache) is never read instead."""
    write_mnist_like(isolated_home / ".cache" / "edgeml" / "mnist", seed=2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError) as err:
        load_dataset("mnist", root=tmp_path / "empty")
    msg = str(err.value)
    assert f"data.root = '{tmp_path / 'empty'}' does not hold mnist" in msg
    assert all(stem in msg for stem in IDX_STEMS.values()) and str(isolated_home) not in msg


@pytest.mark.parametrize("name", ["mnist", "cifar10", "digits"])
def test_root_must_be_an_existing_directory(tmp_path: Path, name: str) -> None:
    with pytest.raises(UserError, match="does not exist: pass --data-root an existing directory"):
        load_dataset(name, root=tmp_path / "nonexistent")
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is not a directory"):
        data.locate(name, root=tmp_path / "file")


def test_locate_finds_without_reading(tmp_path: Path) -> None:
    """``locate`` (run before anything loads) only checks that the files exist; reading them comes later."""
    write_mnist_like(tmp_path / "MNIST" / "raw", gz=False)
    (tmp_path / "MNIST" / "raw" / IDX_STEMS["train_x"]).write_bytes(b"garbage")
    assert data.locate("mnist", root=tmp_path) == tmp_path / "MNIST" / "raw"
    with pytest.raises(UserError, match="magic"):
        load_dataset("mnist", root=tmp_path)
    assert data.locate("mnist", root=tmp_path / "MNIST", download=True) is None  # to be fetched there
    assert data.locate("digits") is None  # bundled


def test_corrupt_magic_is_user_error(tmp_path: Path) -> None:
    write_mnist_like(tmp_path, gz=False)
    path = tmp_path / IDX_STEMS["train_x"]
    raw = bytearray(path.read_bytes())
    raw[2] = 0x0D  # float type code instead of uint8
    path.write_bytes(bytes(raw))
    with pytest.raises(UserError, match="magic"):
        load_dataset("mnist", root=tmp_path)


def test_truncated_and_bad_gzip_are_user_errors(tmp_path: Path) -> None:
    write_mnist_like(tmp_path, gz=True)
    path = tmp_path / (IDX_STEMS["test_x"] + ".gz")
    path.write_bytes(gzip.compress(idx_bytes(np.zeros((10, 28, 28), np.uint8))[:-5]))
    with pytest.raises(UserError, match="truncated"):
        load_dataset("mnist", root=tmp_path)
    path.write_bytes(b"\x1f\x8bnot really gzip")
    with pytest.raises(UserError):
        load_dataset("mnist", root=tmp_path)


def test_label_count_mismatch_is_user_error(tmp_path: Path) -> None:
    write_mnist_like(tmp_path, gz=False)
    (tmp_path / IDX_STEMS["train_y"]).write_bytes(idx_bytes(np.zeros(3, np.uint8)))
    with pytest.raises(UserError, match="labels"):
        load_dataset("mnist", root=tmp_path)


@pytest.mark.skipif(not data._DEBIAN_FASHION_MNIST.is_dir(), reason="dataset-fashion-mnist package not installed")
def test_debian_fashion_mnist() -> None:
    ds = load_dataset("fashion-mnist")  # HOME is empty and no root: only the Debian folder can supply it
    assert ds.x_train.shape == (60000, 1, 28, 28) and ds.x_test.shape == (10000, 1, 28, 28)
    assert torch.bincount(ds.y_train).tolist() == [6000] * 10
    assert abs(ds.x_train.mean().item()) < 0.05 and abs(ds.x_train.std().item() - 1) < 0.05


# --- CIFAR-10 ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sub", ["cifar-10-batches-py", "cifar10/cifar-10-batches-py"])
def test_cifar_round_trip(tmp_path: Path, sub: str) -> None:
    arrays = write_cifar_like(tmp_path / sub)
    ds = load_dataset("cifar10", root=tmp_path)
    assert ds.x_train.shape == (20, 3, 32, 32) and ds.x_test.shape == (4, 3, 32, 32)
    mean, std = data._NORMALIZATION["cifar10"]
    np.testing.assert_array_equal(_pixels(ds.x_train, mean, std), arrays["train_x"])
    np.testing.assert_array_equal(_pixels(ds.x_test, mean, std), arrays["test_x"])
    np.testing.assert_array_equal(ds.y_train.numpy(), arrays["train_y"])
    np.testing.assert_array_equal(ds.y_test.numpy(), arrays["test_y"])


def test_corrupt_cifar_is_user_error(tmp_path: Path) -> None:
    write_cifar_like(tmp_path / "cifar-10-batches-py")
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").write_bytes(b"garbage")
    with pytest.raises(UserError, match="data_batch_3"):
        load_dataset("cifar10", root=tmp_path)


def test_missing_cifar(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="--download"):
        load_dataset("cifar10", root=tmp_path)


# --- scikit-learn bundled data sets --------------------------------------------------------------------------------


def test_digits() -> None:
    ds = load_dataset("digits")
    assert ds.x_train.shape == (1437, 1, 8, 8) and ds.x_test.shape == (360, 1, 8, 8)
    assert ds.num_classes == 10 and ds.y_train.dtype == torch.int64
    assert abs(ds.x_train.mean().item()) < 1e-4 and abs(ds.x_train.std().item() - 1) < 1e-2
    again = load_dataset("digits")
    assert torch.equal(ds.x_train, again.x_train) and torch.equal(ds.y_test, again.y_test)


def test_breast_cancer() -> None:
    ds = load_dataset("breast-cancer")
    assert ds.x_train.shape == (455, 30) and ds.x_test.shape == (114, 30) and ds.input_shape == (30,)
    assert ds.num_classes == 2 and ds.x_train.dtype == torch.float32
    assert ds.x_train.mean(0).abs().max().item() < 1e-4
    assert torch.equal(ds.x_test, load_dataset("breast-cancer").x_test)


def test_credit_synthetic_has_the_credit_card_sets_shape_and_is_fixed() -> None:
    ds = load_dataset("credit-synthetic")
    assert ds.x_train.shape == (24_000, 24) and ds.x_test.shape == (6_000, 24) and ds.num_classes == 2
    positive = ds.y_train.float().mean().item()
    assert 0.2 < positive < 0.3  # the credit set's share of defaults, with 10% of labels flipped
    assert ds.x_train.mean(0).abs().max().item() < 1e-4
    again = load_dataset("credit-synthetic")
    assert torch.equal(ds.x_train, again.x_train) and torch.equal(ds.y_test, again.y_test)
    # a linear model does better than the majority class, as on the real set (about 0.82 against 0.75)
    from sklearn.linear_model import LogisticRegression
    fit = LogisticRegression(max_iter=500).fit(ds.x_train.numpy(), ds.y_train.numpy())
    majority = max(positive, 1 - positive)
    assert fit.score(ds.x_test.numpy(), ds.y_test.numpy()) > majority + 0.04


def test_unknown_dataset_lists_names() -> None:
    with pytest.raises(UserError) as err:
        load_dataset("imagenet")
    assert all(name in str(err.value) for name in DATASETS)


# --- partitions ----------------------------------------------------------------------------------------------------


LABELS = torch.arange(1000) % 10


def _check_disjoint(parts: list[torch.Tensor], n: int, cover: bool) -> None:
    joined = torch.cat(parts)
    assert len(joined) == len(torch.unique(joined)), "parts overlap"
    assert all(p.dtype == torch.int64 and torch.equal(p, torch.sort(p).values) for p in parts)
    assert joined.min() >= 0 and joined.max() < n
    if cover:
        assert len(joined) == n


@pytest.mark.parametrize("scheme", PARTITIONS)
def test_partition_disjoint_and_deterministic(scheme: str) -> None:
    parts = partition(LABELS, 7, scheme, seed=3)
    assert len(parts) == 7 and all(len(p) > 0 for p in parts)
    _check_disjoint(parts, len(LABELS), cover=True)
    same = partition(LABELS, 7, scheme, seed=3)
    assert all(torch.equal(a, b) for a, b in zip(parts, same))
    other = partition(LABELS, 7, scheme, seed=4)
    assert any(not torch.equal(a, b) for a, b in zip(parts, other))


def test_iid_is_balanced() -> None:
    sizes = [len(p) for p in partition(LABELS, 3, "iid")]
    assert max(sizes) - min(sizes) <= 1


def test_shards_give_few_classes() -> None:
    parts = partition(LABELS, 10, "shards", shards_per_part=2)
    assert all(len(torch.unique(LABELS[p])) <= 2 for p in parts)
    assert all(len(p) == 100 for p in parts)


def test_dirichlet_small_alpha_is_skewed() -> None:
    skewed = partition(LABELS, 5, "dirichlet", alpha=0.05, seed=0)
    even = partition(LABELS, 5, "dirichlet", alpha=1000.0, seed=0)

    def top_share(parts: list[torch.Tensor]) -> float:
        """Mean fraction of a worker's samples that belong to its most common class."""
        return float(np.mean([torch.bincount(LABELS[p]).max().item() / len(p) for p in parts]))

    assert top_share(skewed) > 0.5 > 0.2 > top_share(even)


def test_single_part_gets_everything() -> None:
    for scheme in PARTITIONS:
        (only,) = partition(LABELS, 1, scheme)
        assert torch.equal(only, torch.arange(len(LABELS)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(num_parts=0), "at least 1"),
        (dict(num_parts=1001), "only 1000 training samples"),
        (dict(num_parts=5, scheme="random"), "iid, shards, dirichlet"),
        (dict(num_parts=5, scheme="dirichlet", alpha=0.0), "alpha"),
        (dict(num_parts=5, scheme="shards", shards_per_part=0), "shards"),
        (dict(num_parts=600, scheme="shards", shards_per_part=2), "fewer workers"),
    ],
)
def test_partition_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(UserError, match=match):
        partition(LABELS, **kwargs)


def test_dirichlet_gives_up_with_user_error() -> None:
    with pytest.raises(UserError, match="raise alpha"):
        partition(torch.zeros(3, dtype=torch.long), 3, "dirichlet", alpha=1e-3)


def test_sorted_cuts_class_sorted_contiguous_parts() -> None:
    labels = torch.tensor([3, 0, 2, 1, 0, 3, 1, 2, 2, 0, 1, 3])  # three of each of 4 classes
    parts = partition(labels, 4, "sorted", seed=5)
    # worker i gets the i-th quarter of the class-sorted samples: here exactly class i
    assert [torch.unique(labels[p]).tolist() for p in parts] == [[0], [1], [2], [3]]
    parts = partition(LABELS, 6, "sorted", seed=0)  # 1000 samples, 10 classes of 100: cuts every 166.7
    assert [len(p) for p in parts] == [167, 167, 167, 167, 166, 166]
    classes = [torch.unique(LABELS[p]).tolist() for p in parts]
    assert classes[0] == [0, 1] and classes[1] == [1, 2, 3] and classes[5] == [8, 9]
    assert all(max(LABELS[a]) <= min(LABELS[b]) for a, b in zip(parts, parts[1:]))  # contiguous in class order
    # the seed only moves samples of a class across a cut, never the class mix
    other = partition(LABELS, 6, "sorted", seed=1)
    assert [torch.bincount(LABELS[p], minlength=10).tolist() for p in other] == \
        [torch.bincount(LABELS[p], minlength=10).tolist() for p in parts]


def test_the_full_rank_credit_set_has_no_feature_a_combination_of_others() -> None:
    """credit-full-rank: credit-synthetic's shape, every feature independent of the others (its standardized
    features have full rank, credit-synthetic's 18 of 24), and a linear model as accurate as on credit-synthetic."""
    from sklearn.linear_model import LogisticRegression

    scores = {}
    for name, rank in (("credit-synthetic", 18), ("credit-full-rank", 24)):
        ds = load_dataset(name)
        assert ds.x_train.shape == (24_000, 24) and ds.num_classes == 2
        assert torch.linalg.matrix_rank(ds.x_train.double(), rtol=1e-4).item() == rank  # float32 rounding aside
        fit = LogisticRegression(max_iter=500).fit(ds.x_train.numpy(), ds.y_train.numpy())
        scores[name] = fit.score(ds.x_test.numpy(), ds.y_test.numpy())
    assert abs(scores["credit-full-rank"] - scores["credit-synthetic"]) < 0.02
