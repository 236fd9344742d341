"""Wire encodings: counted bytes are the formulas (checked by hand), and decoding round-trips exactly."""

from __future__ import annotations

import pytest
import torch

from edgeml.runtime import wire
from edgeml.runtime.base import payload_nbytes

SPANS = [(0, 6), (6, 3), (9, 1)]  # a 2x3 weight, a bias of 3, a bias of 1: N = 10, L = 3


def _vec(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------- dense
def test_dense() -> None:
    x = _vec(10)
    p = wire.dense(x)
    assert payload_nbytes(p) == wire.dense_nbytes(10) == 40
    assert torch.equal(wire.dense_decode(p), x)


# ------------------------------------------------------------------------------------------------- sparse
@pytest.mark.parametrize("index", [[], [3], [0, 9, 4], list(range(10))])
def test_sparse_round_trip_and_bytes(index: list[int]) -> None:
    x = _vec(10)
    idx = torch.tensor(index, dtype=torch.int64)
    p = wire.sparse(x, idx)
    assert p["index"].dtype == torch.int32 and p["values"].dtype == torch.float32
    assert payload_nbytes(p) == wire.sparse_nbytes(len(index)) == 8 * len(index)
    got_idx, got_val = wire.sparse_decode(p)
    assert torch.equal(got_idx, idx) and torch.equal(got_val, x[idx])


def test_sparse_layers_bytes_by_hand() -> None:
    x = _vec(10)
    # 2 entries of layer 0, none of layer 1, 1 of layer 2: header 3 x 4 + 3 entries x 8 = 36 bytes
    p = wire.sparse_layers(x, torch.tensor([1, 5, 9]), SPANS)
    assert payload_nbytes(p) == wire.sparse_layers_nbytes(3, 3) == 36
    assert p["counts"].tolist() == [2, 0, 1] and p["local"].tolist() == [1, 5, 0]
    idx, val = wire.sparse_layers_decode(p, SPANS)
    assert idx.tolist() == [1, 5, 9] and torch.equal(val, x[[1, 5, 9]])


def test_sparse_layers_groups_by_layer_keeping_order_within() -> None:
    x = _vec(10)
    p = wire.sparse_layers(x, torch.tensor([9, 7, 2, 6, 0]), SPANS)
    idx, val = wire.sparse_layers_decode(p, SPANS)
    assert idx.tolist() == [2, 0, 7, 6, 9] and torch.equal(val, x[idx])


def test_sparse_layers_empty_and_gaps() -> None:
    x = _vec(10)
    p = wire.sparse_layers(x, torch.tensor([], dtype=torch.int64), SPANS)
    assert payload_nbytes(p) == 12 and wire.sparse_layers_decode(p, SPANS)[0].numel() == 0
    gappy = [(0, 2), (5, 2)]  # spans need not tile for sparse entries...
    idx, _ = wire.sparse_layers_decode(wire.sparse_layers(x, torch.tensor([6, 1]), gappy), gappy)
    assert idx.tolist() == [1, 6]
    with pytest.raises(ValueError, match="outside every layer"):  # ...but every entry must be in one
        wire.sparse_layers(x, torch.tensor([3]), gappy)
    with pytest.raises(ValueError, match="increasing order"):
        wire.sparse_layers(x, torch.tensor([3]), [(0, 5), (4, 2)])
    with pytest.raises(ValueError, match="out of range"):
        wire.sparse(x, torch.tensor([10]))


# ------------------------------------------------------------------------------------------------- ternary
def test_ternary_bytes_and_packing_by_hand() -> None:
    signs = torch.tensor([1, -1, 0, 1, 0, 0, -1, 1, 1, -1])
    scalers = torch.tensor([0.5, 2.0, 3.0])
    p = wire.ternary(signs, scalers, SPANS)
    # ceil(10 / 4) = 3 code bytes + 3 float32 scalers = 15 bytes
    assert payload_nbytes(p) == wire.ternary_nbytes(10, 3) == 15
    # codes 1,2,0,1 -> 0b01_00_10_01; 0,0,2,1 -> 0b01_10_00_00; 1,2,(pad 0,0) -> 0b00_00_10_01
    assert p["codes"].dtype == torch.uint8 and p["codes"].tolist() == [0b01001001, 0b01100000, 0b00001001]
    out = wire.ternary_decode(p, SPANS)
    assert out.tolist() == [0.5, -0.5, 0.0, 0.5, 0.0, 0.0, -2.0, 2.0, 2.0, -3.0]


@pytest.mark.parametrize("n", [0, 1, 4, 7, 33])
def test_ternary_round_trip(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    signs = torch.randint(-1, 2, (n,), generator=g).to(torch.int8)
    spans = [(0, n // 2), (n // 2, n - n // 2)]
    scalers = torch.rand(2, generator=g)
    p = wire.ternary(signs, scalers, spans)
    assert payload_nbytes(p) == wire.ternary_nbytes(n, 2)
    expect = signs.float() * torch.repeat_interleave(scalers, torch.tensor([n // 2, n - n // 2]))
    assert torch.equal(wire.ternary_decode(p, spans), expect)


def test_ternary_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="-1, 0 or \\+1"):
        wire.ternary(torch.tensor([0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0]), torch.ones(3), SPANS)
    with pytest.raises(ValueError, match="-1, 0 or \\+1"):
        wire.ternary(torch.full((10,), 2), torch.ones(3), SPANS)
    with pytest.raises(ValueError, match="one scaler per layer"):
        wire.ternary(torch.zeros(10), torch.ones(2), SPANS)
    with pytest.raises(ValueError, match="gaps"):
        wire.ternary(torch.zeros(10), torch.ones(2), [(0, 4), (5, 5)])


# ------------------------------------------------------------------------------------------------- SNAP
@pytest.mark.parametrize("n, m, f1, f2", [
    (10, 0, 4 + 80, 120),    # nothing withheld: frame 1 = count + all values
    (10, 4, 4 + 80 - 16, 72),  # 4 + 8N - 4M = 68, 12(N - M) = 72
    (10, 10, 4 + 80 - 40, 0),  # everything withheld: frame 2 is empty
    (0, 0, 4, 0),
])
def test_snap_byte_formulas_by_hand(n: int, m: int, f1: int, f2: int) -> None:
    assert wire.snap_frame1_nbytes(n, m) == f1 == 4 + 8 * n - 4 * m
    assert wire.snap_frame2_nbytes(n, m) == f2 == 12 * (n - m)
    # float32 values: count + M indices + 4-byte values; 8-byte pairs
    assert wire.snap_frame1_nbytes(n, m, 4) == 4 + 4 * m + 4 * (n - m)
    assert wire.snap_frame2_nbytes(n, m, 4) == 8 * (n - m)
    assert wire.snap_nbytes(n, m) == min(f1, f2)


def test_snap_frame_choice_is_the_papers_rule() -> None:
    # frame 1 exactly when N > 2M + 1, for either value width; the tie N = 2M + 1 sends frame 2
    for w in (4, 8):
        for n in range(0, 12):
            for m in range(0, n + 1):
                send = torch.arange(n) >= m  # the first m withheld
                p = wire.snap_frame(_vec(n), send, w)
                assert ("unsent" in p) == (n > 2 * m + 1), (n, m, w)
                assert payload_nbytes(p) == wire.snap_nbytes(n, m, w)
    assert wire.snap_frame1_nbytes(7, 3) == wire.snap_frame2_nbytes(7, 3) == 48  # the tie, by hand


@pytest.mark.parametrize("w", [4, 8])
@pytest.mark.parametrize("pattern", ["empty", "all", "none", "tie", "sparse", "dense"])
def test_snap_round_trip(w: int, pattern: str) -> None:
    n = {"empty": 0, "tie": 7}.get(pattern, 20)
    x, previous = _vec(n, 1), _vec(n, 2)
    send = {
        "empty": torch.zeros(0, dtype=torch.bool),
        "all": torch.ones(n, dtype=torch.bool),
        "none": torch.zeros(n, dtype=torch.bool),
        "tie": torch.tensor([True, False, True, False, True, False, True]),  # N = 7, M = 3
        "sparse": torch.arange(n) % 7 == 3,
        "dense": torch.arange(n) % 7 != 3,
    }[pattern]
    p = wire.snap_frame(x, send, w)
    assert all(v.dtype in (torch.int32, wire._VALUE_DTYPES[w]) for v in p.values())
    m = int((~send).sum())
    assert payload_nbytes(p) == wire.snap_nbytes(n, m, w)
    out = wire.snap_decode(p, previous)
    assert torch.equal(out, torch.where(send, x, previous))
    assert out.dtype == previous.dtype and (n == 0 or out.data_ptr() != previous.data_ptr())


def test_snap_frame1_layout() -> None:
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
    p = wire.snap_frame(x, torch.tensor([True, True, False, True, True]))  # N = 5 > 2 x 1 + 1
    assert p["num_unsent"].tolist() == [1] and p["unsent"].tolist() == [2]
    assert p["values"].dtype == torch.float64 and p["values"].tolist() == [1.0, 2.0, 4.0, 5.0]
    assert payload_nbytes(p) == 4 + 8 * 5 - 4 * 1 == 40
    with pytest.raises(ValueError, match="value_bytes"):
        wire.snap_frame(x, torch.ones(5, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="boolean mask"):
        wire.snap_frame(x, torch.ones(4, dtype=torch.bool))


# ------------------------------------------------------------------------------------------------- devices
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_every_encoding_works_on_a_cuda_node_as_on_the_cpu() -> None:
    """A CUDA node encodes its own tensors and decodes what arrived on its device: same payloads, same bytes."""
    x, index, mask = _vec(10), torch.tensor([9, 0, 4, 7]), torch.tensor([True, False] * 5)
    signs, scalers = torch.tensor([1.0, 0.0, -1.0, 1.0, 1.0, 0.0, -1.0, 0.0, 1.0, -1.0]), torch.tensor([0.5, 2.0, 1.0])
    cases = [
        (lambda d: wire.dense(x.to(d)), lambda p, d: wire.dense_decode(p)),
        (lambda d: wire.sparse(x.to(d), index.to(d)), lambda p, d: wire.sparse_decode(p)),
        (lambda d: wire.sparse_layers(x.to(d), index.to(d), SPANS), lambda p, d: wire.sparse_layers_decode(p, SPANS)),
        (lambda d: wire.ternary(signs.to(d), scalers.to(d), SPANS), lambda p, d: wire.ternary_decode(p, SPANS)),
        (lambda d: wire.snap_frame(x.to(d), mask.to(d)), lambda p, d: wire.snap_decode(p, torch.zeros(10, device=d))),
        (lambda d: wire.snap_frame(x.to(d), ~mask.to(d) | (torch.arange(10, device=d) < 8)),
         lambda p, d: wire.snap_decode(p, torch.zeros(10, device=d))),
    ]
    for encode, decode in cases:
        on_cpu, on_gpu = encode("cpu"), encode("cuda")
        assert payload_nbytes(on_gpu) == payload_nbytes(on_cpu)
        assert all(v.device.type == "cuda" for v in on_gpu.values())
        got_cpu, got_gpu = decode(on_cpu, "cpu"), decode(on_gpu, "cuda")
        for a, b in zip(got_cpu if isinstance(got_cpu, tuple) else [got_cpu],
                        got_gpu if isinstance(got_gpu, tuple) else [got_gpu]):
            assert b.device.type == "cuda" and torch.equal(a, b.cpu())
