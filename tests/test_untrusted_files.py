"""Data files are read as data: a CIFAR-10 batch goes through an unpickler that builds arrays and plain values
only, so a crafted batch cannot run code (its payload never runs, the user gets one line naming the file)."""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from edgeml.data import load_dataset
from edgeml.errors import UserError

try:
    from tests.conftest import pythonpath
    from tests.fixtures_formats import write_cifar_like
except ImportError:  # run from inside tests/
    from conftest import pythonpath
    from fixtures_formats import write_cifar_like

ROOT = Path(__file__).resolve().parents[1]
BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


class _Py2Pickler(pickle._Pickler):
    """Writes what Python 2's cPickle wrote for the CIFAR-10 batches (protocol 2): byte strings as BINSTRING,
    arrays through ``numpy.core.multiarray._reconstruct`` with the raw bytes as their state."""

    def _global(self, module: str, name: str) -> None:
        self.write(pickle.GLOBAL + f"{module}\n{name}\n".encode())

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, bytes):
            n = len(obj)
            self.write((pickle.SHORT_BINSTRING + bytes([n]) if n < 256 else pickle.BINSTRING + struct.pack("<i", n))
                       + obj)
        elif isinstance(obj, np.dtype):
            self._global("numpy", "dtype")
            super().save((obj.str[1:].encode(), 0, 1))
            self.write(pickle.REDUCE)
            super().save((3, b"|", None, None, None, -1, -1, 0))
            self.write(pickle.BUILD)
        elif isinstance(obj, np.ndarray):
            self._global("numpy.core.multiarray", "_reconstruct")
            self._global("numpy", "ndarray")
            self.save((0,))
            self.save(b"b")
            self.write(pickle.TUPLE3 + pickle.REDUCE)
            self.save((1, obj.shape, obj.dtype, False, obj.tobytes()))
            self.write(pickle.BUILD)
        else:
            super().save(obj, save_persistent_id)


def py2_batch(data: np.ndarray, labels: list[int], name: str) -> bytes:
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump({b"batch_label": name.encode(), b"data": data, b"labels": labels,
                                       b"filenames": [f"{i}.png".encode() for i in range(len(labels))]})
    return buf.getvalue()


class _Payload:
    """Unpickling this runs ``os.system`` (what a crafted batch would do)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def crafted(marker: Path) -> bytes:
    return pickle.dumps({b"data": _Payload(marker), b"labels": [0]}, protocol=2)


def test_genuine_python2_batches_load(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    made = {}
    for name in BATCHES:
        data = rng.integers(0, 256, (3, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, 3)]
        (folder / name).write_bytes(py2_batch(data, labels, name))
        made[name] = (data, labels)
    ds = load_dataset("cifar10", root=tmp_path)
    assert ds.x_train.shape == (15, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    assert ds.y_train.tolist() == [v for n in BATCHES[:-1] for v in made[n][1]]
    assert ds.y_test.tolist() == made["test_batch"][1]


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_batches_pickled_again_by_python3_load(tmp_path, protocol):
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    for name in BATCHES:
        (folder / name).write_bytes(pickle.dumps({b"data": data, b"labels": [1, 2]}, protocol=protocol))
    ds = load_dataset("cifar10", root=tmp_path)
    assert ds.x_train.shape == (10, 3, 32, 32) and ds.y_test.tolist() == [1, 2]


@pytest.mark.parametrize("payload", [
    lambda marker: crafted(marker),
    # a global that looks harmless by its module still is not data
    lambda marker: pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": print}, 2),
    # the codecs protocol 2 uses for bytes, with a codec other than latin1
    lambda marker: b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x06\x00\x00\x00base64\x86R.",
])
def test_a_batch_asking_for_anything_but_data_is_refused_before_it_runs(tmp_path, payload):
    write_cifar_like(tmp_path / "cifar-10-batches-py")
    marker = tmp_path / "ran"
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(payload(marker))
    with pytest.raises(UserError, match=r"data_batch_2 asks to load .+, which no CIFAR-10 batch holds") as err:
        load_dataset("cifar10", root=tmp_path)
    assert "\n" not in str(err.value) and not marker.exists()


def test_the_command_line_refuses_a_crafted_batch_with_one_line_and_writes_nothing(tmp_path):
    write_cifar_like(tmp_path / "data" / "cifar-10-batches-py")
    marker = tmp_path / "ran"
    (tmp_path / "data" / "cifar-10-batches-py" / "data_batch_1").write_bytes(crafted(marker))
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "edgeml", "run", "bsp", "--backend", "sim", "--dataset", "cifar10",
                           "--data-root", str(tmp_path / "data"), "--workers", "2", "--max-time", "1",
                           "--out", str(out), "--quiet"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": pythonpath(ROOT)})
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "data_batch_1 asks to load posix.system" in lines[0], proc.stderr
    assert not marker.exists() and proc.stdout == ""
    assert not out.exists() or not any(out.iterdir())
