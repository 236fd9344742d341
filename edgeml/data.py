"""Datasets and their partitioning across workers.

Every dataset comes back as in-memory float32 tensors: edge experiments use small data sets, and holding them in
memory keeps each simulated worker's batches cheap and the runs reproducible. Two data sets ship with
scikit-learn and always work offline; MNIST, Fashion-MNIST and CIFAR-10 are read from their original files with
small readers here, so no network access is needed once the files are on disk.
"""

from __future__ import annotations

import gzip
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from edgeml.cache import cache_dir
from edgeml.errors import UserError
from edgeml.schema import did_you_mean

if TYPE_CHECKING:
    import torch

DATASETS: dict[str, str] = {
    "digits": "8x8 handwritten digits, 1797 images, 10 classes (bundled with scikit-learn)",
    "breast-cancer": "Wisconsin breast cancer, 569 samples x 30 features, 2 classes (bundled with scikit-learn)",
    "credit-synthetic": "synthetic stand-in of the shape of 'default of credit card clients' (SNAP's simulations): "
                        "30,000 samples x 24 features, 2 classes, 22% positive (generated, seeded)",
    "credit-full-rank": "credit-synthetic without its six redundant features: 16 informative and 8 noise features, "
                        "none a combination of others, so every direction of a linear model moves its loss",
    "fashion-mnist": "Fashion-MNIST 28x28 grayscale clothing, 60k/10k, 10 classes (IDX files)",
    "mnist": "MNIST 28x28 grayscale digits, 60k/10k, 10 classes (IDX files)",
    "cifar10": "CIFAR-10 32x32 colour images, 50k/10k, 10 classes (python pickle batches)",
}

_BUNDLED = ("digits", "breast-cancer", "credit-synthetic", "credit-full-rank")
PARTITIONS: dict[str, str] = {
    "iid": "every worker gets the same label mix (a seeded shuffle)",
    "shards": "each worker gets a few label-sorted shards (data.shards_per_worker)",
    "dirichlet": "label shares drawn from a Dirichlet (data.alpha; small means skewed workers)",
    "sorted": "class-sorted contiguous parts (ESync's non-iid split)",
}

# Published per-channel statistics, so a data set normalizes the same way however many files are present.
_NORMALIZATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion-mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
# Folder names torchvision uses, so files it downloaded are found without moving them.
_TORCHVISION_NAME = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST", "cifar10": "CIFAR10"}
_IDX_FILES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}
_CIFAR_DIR = "cifar-10-batches-py"
_CIFAR_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
# Installed by `apt-get install dataset-fashion-mnist` on Debian/Ubuntu.
_DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
_DIRICHLET_TRIES = 100


@dataclass(frozen=True)
class Dataset:
    """A train/test split held in memory, already normalized and ready to batch."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, which models use to size their first layer."""
        return tuple(self.x_train.shape[1:])


def load_dataset(name: str, root: str | Path | None = None, download: bool = False) -> Dataset:
    """Load a data set by name from ``root`` (or, without one, the default folders); download only when asked."""
    import torch  # here: validating a config must not load torch
    found = locate(name, root, download)
    if name in _BUNDLED:
        return _load_sklearn(name)
    if found is None:
        _download(name, root)
        found = _find(name, root)
        if found is None:
            raise UserError(_missing(name, root))
    if name == "cifar10":
        x_train, y_train, x_test, y_test = _read_cifar(found)
    else:
        x_train, y_train, x_test, y_test = _read_idx_set(found)
    mean, std = _NORMALIZATION[name]
    return Dataset(
        name=name,
        x_train=_normalize_images(x_train, mean, std),
        y_train=torch.from_numpy(y_train.astype(np.int64)),
        x_test=_normalize_images(x_test, mean, std),
        y_test=torch.from_numpy(y_test.astype(np.int64)),
        num_classes=10,
    )


def locate(name: str, root: str | Path | None = None, download: bool = False) -> Path | None:
    """The folder holding data set ``name``'s files; None for a bundled data set or one still to download.

    Cheap (no file is read), so bad input is refused before anything loads: an unknown name, a ``root`` that is
    not an existing directory, or files found nowhere when ``download`` is off all raise UserError.
    """
    if name not in DATASETS:
        raise UserError(f"unknown dataset '{name}'{did_you_mean(name, list(DATASETS))}: choose one of "
                        f"{', '.join(DATASETS)}")
    base = Path(root).expanduser() if root is not None else None
    if base is not None and not base.is_dir():
        problem = "is not a directory" if base.exists() else "does not exist"
        raise UserError(f"data.root = {str(root)!r} {problem}: pass --data-root an existing directory holding "
                        f"the data set's files")
    if name in _BUNDLED:
        return None
    found = _find(name, root)
    if found is None and not download:
        raise UserError(_missing(name, root))
    return found


def _missing(name: str, root: str | Path | None) -> str:
    """What was searched, which files were expected, and the two fixes."""
    if name == "cifar10":
        files = f"{_CIFAR_DIR}/ with {', '.join(_CIFAR_FILES)}"
    else:
        files = ", ".join(_IDX_FILES.values()) + " (each may end in .gz)"
    if root is not None:
        base = Path(root).expanduser()
        folders = ", ".join(str(p) for p in _candidate_dirs(name, base))
        return (f"data.root = {str(root)!r} does not hold {name}: expected {files} in one of {folders}; "
                f"point --data-root at them, or add --download to fetch them there")
    searched = ", ".join(str(p) for p in _search_bases(name, None))
    return (f"dataset '{name}' not found under {searched} (expected {files}): "
            f"pass --data-root DIR holding the original files, or add --download")


def _load_sklearn(name: str) -> Dataset:
    """Load a scikit-learn bundled data set with a fixed stratified 80/20 split, so runs are comparable."""
    import torch  # here: validating a config must not load torch
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import train_test_split

    if name in ("credit-synthetic", "credit-full-rank"):
        x, y = credit_synthetic(full_rank=name == "credit-full-rank")
    else:
        bunch = load_digits() if name == "digits" else load_breast_cancer()
        x, y = bunch.data.astype(np.float32), bunch.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    if name == "digits":
        # Pixels are 0..16; scale to [0,1] and use one train-set mean/std as for the other image sets.
        x_tr, x_te = x_tr.reshape(-1, 1, 8, 8) / 16.0, x_te.reshape(-1, 1, 8, 8) / 16.0
        mean, std = x_tr.mean(), x_tr.std()
    else:
        # Features differ in scale by orders of magnitude; standardize with train statistics only.
        mean, std = x_tr.mean(axis=0), x_tr.std(axis=0)
        std = np.where(std > 0, std, 1.0)
    return Dataset(
        name=name,
        x_train=torch.from_numpy(((x_tr - mean) / std).astype(np.float32)),
        y_train=torch.from_numpy(y_tr),
        x_test=torch.from_numpy(((x_te - mean) / std).astype(np.float32)),
        y_test=torch.from_numpy(y_te),
        num_classes=int(y.max()) + 1,
    )


def credit_synthetic(full_rank: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """A data set of the shape of "default of credit card clients" (UCI; SNAP Sec. V trains its SVMs on it:
    30,000 samples, 24 features), which no package ships offline: ``make_classification`` with a fixed seed,
    10 informative and 6 redundant features, two Gaussian clusters per class, 22% of the samples positive (the
    real set's share of defaults) and 10% of the labels flipped, so that a linear model is about as accurate as
    on the real set (about 0.82 on the held-out fifth, against a majority class of 0.75).

    ``full_rank`` (``credit-full-rank``): the six redundant features, linear combinations of the informative ones,
    are informative features of their own instead, so that no direction of a linear model's weights leaves the
    loss unchanged (a redundant feature's is such a direction: only a regularizer moves it); the classes lie
    further apart (``class_sep`` 1.3), so that a linear model is as accurate as on ``credit-synthetic``."""
    from sklearn.datasets import make_classification

    informative, redundant, sep = (16, 0, 1.3) if full_rank else (10, 6, 1.0)
    x, y = make_classification(n_samples=30_000, n_features=24, n_informative=informative, n_redundant=redundant,
                               n_repeated=0, n_classes=2, n_clusters_per_class=2, weights=[0.78], flip_y=0.1,
                               class_sep=sep, random_state=0)
    return x.astype(np.float32), y.astype(np.int64)


def _normalize_images(images: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """uint8 [N,C,H,W] -> float32 scaled to [0,1] then normalized per channel."""
    import torch  # here: validating a config must not load torch
    x = torch.from_numpy(images).float().div_(255.0)
    m = torch.tensor(mean).view(1, -1, 1, 1)
    s = torch.tensor(std).view(1, -1, 1, 1)
    return x.sub_(m).div_(s)


def _search_bases(name: str, root: str | Path | None) -> list[Path]:
    """Base folders in priority order: an explicit root alone (the one a run's config records), otherwise
    $EDGEML_DATA, the user cache, then system packages."""
    if root is not None:
        return [Path(root).expanduser()]
    bases = []
    if os.environ.get("EDGEML_DATA"):
        bases.append(Path(os.environ["EDGEML_DATA"]).expanduser())
    bases.append(cache_dir(name))
    if name == "fashion-mnist":
        bases.append(_DEBIAN_FASHION_MNIST)
    return bases


def _candidate_dirs(name: str, base: Path) -> list[Path]:
    """Layouts accepted under a base folder: flat, torchvision's, and one sub-folder per data set."""
    if name == "cifar10":
        return [base / _CIFAR_DIR, base, base / name / _CIFAR_DIR]
    return [base, base / _TORCHVISION_NAME[name] / "raw", base / name]


def _find(name: str, root: str | Path | None) -> Path | None:
    """First folder that holds every file of the data set, or None."""
    for base in _search_bases(name, root):
        for folder in _candidate_dirs(name, base):
            if name == "cifar10":
                if all((folder / f).is_file() for f in _CIFAR_FILES):
                    return folder
            elif all(_idx_path(folder, f) is not None for f in _IDX_FILES.values()):
                return folder
    return None


def _download(name: str, root: str | Path | None) -> None:
    """Fetch the original files through torchvision; reading stays with the readers here."""
    import torchvision.datasets as tvd

    target = Path(root).expanduser() if root is not None else cache_dir(name)
    cls = {"mnist": tvd.MNIST, "fashion-mnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10}[name]
    try:
        for train in (True, False):
            cls(root=str(target), train=train, download=True)
    except Exception as exc:  # network and archive errors come in many types; all mean the same to the user
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(
            f"downloading dataset '{name}' into {target} failed ({reason}): "
            "check the network, or pass --data-root DIR holding the original files"
        ) from exc


# ---------------------------------------------------------------------------------------------------------------
# IDX (MNIST-family) files


def _idx_path(folder: Path, stem: str) -> Path | None:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _read_idx(path: Path, expected_ndim: int) -> np.ndarray:
    """Read one uint8 IDX file (gzipped or raw): 2 zero bytes, type 0x08, ndim, big-endian dims, data."""
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
    except (OSError, EOFError) as exc:
        raise UserError(f"cannot read {path} ({exc}): replace it with the original file") from exc
    if len(raw) < 4 or raw[:3] != b"\x00\x00\x08" or raw[3] != expected_ndim:
        raise UserError(
            f"{path} is not a uint8 IDX file with {expected_ndim} dimensions (bad magic number): "
            "replace it with the original file"
        )
    header = 4 + 4 * expected_ndim
    dims = tuple(int(d) for d in np.frombuffer(raw[4:header], dtype=">u4")) if len(raw) >= header else ()
    if len(dims) != expected_ndim or len(raw) - header != int(np.prod(dims)):
        raise UserError(f"{path} is truncated or has extra bytes: replace it with the original file")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims).copy()  # writable, as torch wants


def _read_idx_set(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Read the four IDX files of a folder into images [N,1,H,W] and labels [N]."""
    arrays = []
    for split in ("train", "test"):
        x_path = _idx_path(folder, _IDX_FILES[f"{split}_x"])
        y_path = _idx_path(folder, _IDX_FILES[f"{split}_y"])
        assert x_path is not None and y_path is not None  # _find checked they exist
        x, y = _read_idx(x_path, 3), _read_idx(y_path, 1)
        _check_pair(x_path, len(x), y_path, y)
        arrays += [x[:, None, :, :], y]
    return arrays[0], arrays[1], arrays[2], arrays[3]


def _check_pair(x_path: Path, n: int, y_path: Path, y: np.ndarray) -> None:
    if len(y) != n:
        raise UserError(f"{x_path} has {n} images but {y_path} has {len(y)} labels: use files from one release")
    if len(y) and int(y.max()) >= 10:
        raise UserError(f"{y_path} has label {int(y.max())} outside 0..9: replace it with the original file")


# ---------------------------------------------------------------------------------------------------------------
# CIFAR-10 python batches


class _Refused(pickle.UnpicklingError):
    """A batch asked for a global that no CIFAR-10 batch holds."""


# What a CIFAR-10 batch (a dict of bytes, lists and one uint8 array, pickled by Python 2) and the same data
# pickled again by Python 3 (any protocol) may ask for: numpy's array and dtype reconstructors, and plain data
# types. Nothing else is looked up, so a crafted file cannot name a callable that runs code.
_CIFAR_GLOBALS = {
    *((m, "_reconstruct") for m in ("numpy.core.multiarray", "numpy._core.multiarray")),
    *((m, "scalar") for m in ("numpy.core.multiarray", "numpy._core.multiarray")),
    *((m, "_frombuffer") for m in ("numpy.core.numeric", "numpy._core.numeric")),
    ("numpy", "ndarray"), ("numpy", "dtype"),
    *(("builtins", t) for t in ("bytes", "bytearray", "str", "int", "float", "complex", "bool", "list", "tuple",
                                "dict", "set", "frozenset")),
}


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as Python 3 pickles bytes at protocol 2, limited to that codec."""
    if encoding not in ("latin1", "latin-1"):
        raise _Refused(f"_codecs.encode with codec {encoding!r}")
    return text.encode("latin1")


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays only (``_CIFAR_GLOBALS``); any other global is refused before it is
    imported, so a data file can never run code."""

    def find_class(self, module: str, name: str):
        if (module, name) == ("_codecs", "encode"):
            return _latin1
        if (module, name) in _CIFAR_GLOBALS:
            return super().find_class(module, name)
        raise _Refused(f"{module}.{name}")


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 pickle batch through ``_CifarUnpickler``: a file that asks for anything but arrays and
    plain data is refused before any of it runs."""
    try:
        with path.open("rb") as f:
            batch = _CifarUnpickler(f, encoding="bytes").load()
        data = np.asarray(batch[b"data"])
        labels = np.asarray(batch[b"labels"])
        if data.dtype != np.uint8 or not np.issubdtype(labels.dtype, np.integer):
            raise TypeError(f"data of type {data.dtype}, labels of type {labels.dtype}")
        labels = labels.astype(np.int64)
    except _Refused as exc:
        raise UserError(f"{path} asks to load {exc}, which no CIFAR-10 batch holds (only arrays and plain data are "
                        "read from data files): replace it with the original file") from None
    except Exception as exc:  # unpickling a damaged file can fail with almost any exception type
        raise UserError(
            f"{path} is not a CIFAR-10 python batch ({type(exc).__name__}): replace it with the original file"
        ) from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise UserError(
            f"{path} has data of shape {data.shape}, expected [N, 3072]: replace it with the original file"
        )
    if labels.ndim != 1:
        raise UserError(f"{path} has labels of shape {labels.shape}, expected [N]: replace it with the original file")
    _check_pair(path, len(data), path, labels)
    if len(labels) and int(labels.min()) < 0:
        raise UserError(f"{path} has label {int(labels.min())} outside 0..9: replace it with the original file")
    return data.reshape(-1, 3, 32, 32), labels


def _read_cifar(folder: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    train = [_read_cifar_batch(folder / f) for f in _CIFAR_FILES[:-1]]
    x_test, y_test = _read_cifar_batch(folder / _CIFAR_FILES[-1])
    return np.concatenate([x for x, _ in train]), np.concatenate([y for _, y in train]), x_test, y_test


# ---------------------------------------------------------------------------------------------------------------
# Partitioning


def partition(
    labels: torch.Tensor,
    num_parts: int,
    scheme: str = "iid",
    *,
    seed: int = 0,
    alpha: float = 0.5,
    shards_per_part: int = 2,
) -> list[torch.Tensor]:
    """Split sample indices across workers: disjoint, sorted index tensors, reproducible for a seed.

    ``iid`` gives every worker the same label mix; ``shards`` (McMahan et al.) gives each worker a few label-sorted
    shards, so only a few classes; ``dirichlet`` draws each class's split over workers from Dir(alpha), where a
    small alpha means strongly skewed workers; ``sorted`` (ESync's non-iid split) sorts the samples by class and
    cuts them into contiguous, equal-sized parts, worker i taking the i-th (the seed only decides which samples
    of a class fall on either side of a cut).
    """
    import torch  # here: validating a config must not load torch
    if scheme not in PARTITIONS:
        raise UserError(f"unknown partition scheme '{scheme}'{did_you_mean(scheme, list(PARTITIONS))}: choose one "
                        f"of {', '.join(PARTITIONS)}")
    y = labels.detach().cpu().numpy().reshape(-1)
    n = len(y)
    if num_parts < 1:
        raise UserError(f"{num_parts} workers requested: use at least 1 worker")
    if num_parts > n:
        raise UserError(f"{num_parts} workers but only {n} training samples: use fewer workers")
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        parts = np.array_split(rng.permutation(n), num_parts)
    elif scheme == "shards":
        parts = _shards(y, num_parts, shards_per_part, rng)
    elif scheme == "sorted":
        parts = np.array_split(_class_sorted(y, rng), num_parts)
    else:
        parts = _dirichlet(y, num_parts, alpha, rng)
    return [torch.from_numpy(np.sort(p).astype(np.int64)) for p in parts]


def _shards(y: np.ndarray, num_parts: int, shards_per_part: int, rng: np.random.Generator) -> list[np.ndarray]:
    num_shards = num_parts * shards_per_part
    if shards_per_part < 1 or num_shards > len(y):
        raise UserError(
            f"{num_parts} workers x {shards_per_part} shards each needs at least {max(num_shards, 1)} samples "
            f"and >= 1 shard per worker, got {len(y)} samples: use fewer workers or shards per worker"
        )
    shards = np.array_split(_class_sorted(y, rng), num_shards)
    owners = rng.permutation(num_shards).reshape(num_parts, shards_per_part)
    return [np.concatenate([shards[s] for s in row]) for row in owners]


def _class_sorted(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sample indices sorted by class; shuffled first, so the order within a class is random."""
    perm = rng.permutation(len(y))
    return perm[np.argsort(y[perm], kind="stable")]


def _dirichlet(y: np.ndarray, num_parts: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    if not alpha > 0:
        raise UserError(f"dirichlet alpha must be > 0, got {alpha}: pass a positive alpha such as 0.5")
    for _ in range(_DIRICHLET_TRIES):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_parts)]
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            cuts = (np.cumsum(rng.dirichlet([alpha] * num_parts)) * len(idx)).astype(int)[:-1]
            for part, chunk in zip(parts, np.split(idx, cuts)):
                part.append(chunk)
        merged = [np.concatenate(p) for p in parts]
        if all(len(p) > 0 for p in merged):
            return merged
    raise UserError(
        f"dirichlet partition with alpha={alpha} left a worker without samples in {_DIRICHLET_TRIES} draws: "
        "raise alpha or use fewer workers"
    )
