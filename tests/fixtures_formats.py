"""Writers for tiny data files in the original MNIST (IDX) and CIFAR-10 (pickle) formats, for offline tests."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np

IDX_STEMS = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def idx_bytes(array: np.ndarray) -> bytes:
    """Encode a uint8 array as IDX: two zero bytes, type 0x08, ndim, big-endian dims, raw data."""
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()


def write_idx(path: Path, array: np.ndarray, gz: bool) -> Path:
    """Write ``array`` as an IDX file, gzipped (adding ``.gz``) or raw; returns the written path."""
    data = idx_bytes(array)
    if gz:
        path = path.with_name(path.name + ".gz")
        data = gzip.compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def write_mnist_like(folder: Path, *, n_train: int = 20, n_test: int = 10, gz: bool = True, seed: int = 0) -> dict:
    """Write the four MNIST-format files of random 28x28 images; returns the arrays written, keyed like IDX_STEMS."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_x": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_y": rng.integers(0, 10, n_train, dtype=np.uint8),
        "test_x": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_y": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for key, stem in IDX_STEMS.items():
        write_idx(folder / stem, arrays[key], gz)
    return arrays


def write_cifar_like(folder: Path, *, per_batch: int = 4, seed: int = 0) -> dict:
    """Write data_batch_1..5 and test_batch with random images; returns {"train_x","train_y","test_x","test_y"}."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    xs, ys = [], []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        with (folder / name).open("wb") as f:
            pickle.dump({b"batch_label": name.encode(), b"data": data, b"labels": labels}, f)
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(np.array(labels))
    return {
        "train_x": np.concatenate(xs[:5]),
        "train_y": np.concatenate(ys[:5]),
        "test_x": xs[5],
        "test_y": ys[5],
    }
