"""Wire encodings: what a compressed update looks like on the wire, as the tensors actually sent.

Each ``encode`` function returns a message payload (a dict of tensors) whose counted size, the tensors'
bytes (``base.payload_nbytes``), *is* the encoding's length, and each ``decode`` undoes it exactly. A node sends
one with ``node.send(dst, tag, **payload)``. Which payload keys are present tells the decoder which variant
it holds, as a frame type field would; keys, like tags, are not counted. Every ``*_nbytes`` function is the
encoding's length as a pure formula, and equals ``payload_nbytes`` of what the encoder returns.

Layers are given as ``(offset, size)`` spans of the flat vector (``Trainer.spans``), in increasing offset order.

- dense: the float32 vector itself, 4N bytes.
- sparse: int32 indices and float32 values, 8K bytes for K entries (the count is the tensors' length).
- sparse per layer (AdaComp, AdaComp Sec. IV: top-c of each weight matrix and bias vector separately): a
  header of one int32 entry count per layer, then layer-local int32 indices and float32 values, grouped by
  layer: 4L + 8K bytes.
- ternary (TernGrad, as SNAP's baseline): values in {-1, 0, +1} x a per-layer scaler; 2 bits per value,
  four values to a byte (value i in bits 2(i mod 4)..2(i mod 4)+1 of byte i // 4; codes 0 -> 0, 1 -> +1,
  2 -> -1), then one float32 scaler per layer: ceil(N/4) + 4L bytes.
- SNAP frames (SNAP Sec. IV-C, Fig. 3). Of N parameters, M are not sent (their change is below the
  threshold; the receiver keeps its previous values for them) and N - M are. Frame 1 carries the number M
  (a 4-byte integer), the M indices not sent (4 bytes each), then the N - M sent values in increasing index
  order: 4 + 4M + w(N - M) bytes for w-byte values, the paper's 4 + 8N - 4M with w = 8. Frame 2 carries
  index-value pairs of the sent parameters: (4 + w)(N - M), the paper's 12(N - M); its count is implied
  by its length. Frame 1 minus frame 2 is 4 + 8M - 4N whatever w is, so frame 1 is the smaller exactly when
  N > 2M + 1, the paper's rule; on a tie (N = 2M + 1) the paper sends frame 2, and so do we. Values travel
  as float64 (w = 8, the paper's doubles) or float32 (w = 4); float32 parameters round-trip exactly in both.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Payload = dict[str, torch.Tensor]
Spans = Sequence[tuple[int, int]]

_INT32_MAX = 2**31 - 1
_VALUE_DTYPES = {4: torch.float32, 8: torch.float64}


# ------------------------------------------------------------------------------------------------- dense
def dense(x: torch.Tensor) -> Payload:
    """The whole vector as float32: 4N bytes."""
    return {"values": x.detach().reshape(-1).to(torch.float32)}


def dense_decode(payload: Payload) -> torch.Tensor:
    return payload["values"]


def dense_nbytes(n: int) -> int:
    return 4 * n


# ------------------------------------------------------------------------------------------------- sparse
def sparse(x: torch.Tensor, index: torch.Tensor) -> Payload:
    """Entries ``index`` of the flat vector ``x`` as int32 indices and float32 values: 8K bytes."""
    x = x.detach().reshape(-1)
    index = _as_index(index, x.numel())
    return {"index": index.to(torch.int32), "values": x[index].to(torch.float32)}


def sparse_decode(payload: Payload) -> tuple[torch.Tensor, torch.Tensor]:
    """(int64 indices, float32 values) in the order they were encoded."""
    return payload["index"].to(torch.int64), payload["values"]


def sparse_nbytes(k: int) -> int:
    return 8 * k


def sparse_layers(x: torch.Tensor, index: torch.Tensor, spans: Spans) -> Payload:
    """Entries ``index`` (flat indices, each inside one of ``spans``) grouped by layer, with a per-layer count
    header and layer-local indices: 4L + 8K bytes. Within a layer the entries keep their order in ``index``."""
    x = x.detach().reshape(-1)
    index = _as_index(index, x.numel())
    offsets, sizes = _check_spans(spans, x.numel(), tile=False, device=index.device)
    layer = _layer_of(index, offsets, sizes)
    if len(layer) > 1 and not bool((layer[1:] >= layer[:-1]).all()):  # already grouped when index ascends
        order = torch.sort(layer, stable=True).indices
        index, layer = index[order], layer[order]
    counts = (torch.bincount(layer, minlength=len(sizes)) if len(sizes)
              else torch.zeros(0, dtype=torch.int64, device=layer.device))
    return {"counts": counts.to(torch.int32), "local": (index - offsets[layer]).to(torch.int32),
            "values": x[index].to(torch.float32)}


def sparse_layers_decode(payload: Payload, spans: Spans) -> tuple[torch.Tensor, torch.Tensor]:
    """(flat int64 indices, float32 values), grouped by layer in ``spans`` order."""
    counts = payload["counts"].to(torch.int64)
    offsets = torch.tensor([o for o, _ in spans], dtype=torch.int64, device=counts.device)
    if len(counts) != len(offsets):
        raise ValueError(f"payload has {len(counts)} layer counts but {len(offsets)} spans were given")
    base = torch.repeat_interleave(offsets, counts)
    return payload["local"].to(torch.int64) + base, payload["values"]


def sparse_layers_nbytes(k: int, num_layers: int) -> int:
    return 4 * num_layers + 8 * k


# ------------------------------------------------------------------------------------------------- ternary
def ternary(signs: torch.Tensor, scalers: torch.Tensor, spans: Spans) -> Payload:
    """Ternary values ``signs`` (each -1, 0 or +1) times one scaler per layer: ceil(N/4) + 4L bytes.

    ``spans`` must tile the vector exactly (every value belongs to one layer)."""
    signs = signs.detach().reshape(-1)
    n = signs.numel()
    _check_spans(spans, n, tile=True)
    scalers = scalers.detach().reshape(-1).to(torch.float32)
    if scalers.numel() != len(spans):
        raise ValueError(f"{scalers.numel()} scalers for {len(spans)} layers: give one scaler per layer")
    s = signs.to(torch.int64)
    if not torch.equal(s.to(signs.dtype), signs) or bool(((s < -1) | (s > 1)).any()):
        raise ValueError("ternary values must be -1, 0 or +1")
    codes = torch.remainder(s, 3).to(torch.uint8)  # -1 -> 2
    padded = torch.zeros(4 * ((n + 3) // 4), dtype=torch.uint8, device=s.device)
    padded[:n] = codes
    quads = padded.view(-1, 4)
    packed = quads[:, 0] | (quads[:, 1] << 2) | (quads[:, 2] << 4) | (quads[:, 3] << 6)
    return {"codes": packed, "scalers": scalers}


def ternary_decode(payload: Payload, spans: Spans) -> torch.Tensor:
    """The float32 vector sign x scaler of each value's layer."""
    n = sum(size for _, size in spans)
    packed = payload["codes"]
    if packed.numel() != (n + 3) // 4:
        raise ValueError(f"{packed.numel()} code bytes cannot hold the {n} values the spans cover")
    quads = torch.stack([(packed >> shift) & 3 for shift in (0, 2, 4, 6)], dim=1).reshape(-1)[:n]
    signs = torch.tensor([0.0, 1.0, -1.0], device=packed.device)[quads.to(torch.int64)]
    sizes = torch.tensor([size for _, size in spans], dtype=torch.int64, device=packed.device)
    return signs * torch.repeat_interleave(payload["scalers"], sizes)


def ternary_nbytes(n: int, num_layers: int) -> int:
    return (n + 3) // 4 + 4 * num_layers


# ------------------------------------------------------------------------------------------------- SNAP
def snap_frame1_nbytes(n: int, m: int, value_bytes: int = 8) -> int:
    """Frame 1 for N parameters of which M are not sent: 4 + 4M + w(N - M) (paper: 4 + 8N - 4M)."""
    return 4 + 4 * m + value_bytes * (n - m)


def snap_frame2_nbytes(n: int, m: int, value_bytes: int = 8) -> int:
    """Frame 2 for N parameters of which M are not sent: (4 + w)(N - M) (paper: 12(N - M))."""
    return (4 + value_bytes) * (n - m)


def snap_nbytes(n: int, m: int, value_bytes: int = 8) -> int:
    """Length of the frame ``snap_frame`` sends: the smaller of the two, frame 2 on a tie."""
    return min(snap_frame1_nbytes(n, m, value_bytes), snap_frame2_nbytes(n, m, value_bytes))


def snap_frame(x: torch.Tensor, send: torch.Tensor, value_bytes: int = 8) -> Payload:
    """SNAP's frame for the flat vector ``x`` where the boolean mask ``send`` marks the parameters sent."""
    if value_bytes not in _VALUE_DTYPES:
        raise ValueError(f"value_bytes = {value_bytes}: use 8 (float64, as in the paper) or 4 (float32)")
    x = x.detach().reshape(-1)
    send = send.reshape(-1)
    if send.dtype != torch.bool or send.numel() != x.numel():
        raise ValueError(f"send must be a boolean mask of the vector's {x.numel()} entries")
    if x.numel() > _INT32_MAX:
        raise ValueError("SNAP frames index parameters with int32: the vector is too long")
    dtype = _VALUE_DTYPES[value_bytes]
    n, kept = x.numel(), int((~send).sum())
    if snap_frame1_nbytes(n, kept, value_bytes) < snap_frame2_nbytes(n, kept, value_bytes):
        return {"num_unsent": torch.tensor([kept], dtype=torch.int32, device=x.device),
                "unsent": torch.nonzero(~send).reshape(-1).to(torch.int32), "values": x[send].to(dtype)}
    return {"index": torch.nonzero(send).reshape(-1).to(torch.int32), "values": x[send].to(dtype)}


def snap_decode(payload: Payload, previous: torch.Tensor) -> torch.Tensor:
    """The sender's vector as the receiver now knows it: ``previous`` (the sender's values it last had) with
    the sent entries replaced. Returns a new tensor of ``previous``'s dtype and shape."""
    out = previous.detach().clone()
    flat = out.view(-1)
    values = payload["values"].to(flat.dtype)
    if "unsent" in payload:
        send = torch.ones(flat.numel(), dtype=torch.bool, device=flat.device)
        send[payload["unsent"].to(torch.int64)] = False
        if int(payload["num_unsent"][0]) != flat.numel() - int(send.sum()) or int(send.sum()) != values.numel():
            raise ValueError("SNAP frame 1 does not match the receiver's parameter count")
        flat[send] = values
    else:
        flat[payload["index"].to(torch.int64)] = values
    return out


# ------------------------------------------------------------------------------------------------- helpers
def _as_index(index: torch.Tensor, n: int) -> torch.Tensor:
    index = index.reshape(-1).to(torch.int64)
    if n > _INT32_MAX:
        raise ValueError("sparse encodings index with int32: the vector is too long")
    if index.numel() and (int(index.min()) < 0 or int(index.max()) >= n):
        raise ValueError(f"sparse index out of range for a vector of {n} entries")
    return index


def _check_spans(spans: Spans, n: int, *, tile: bool,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Offsets and sizes of ``spans`` (on ``device``); they must be in order, disjoint, inside [0, n) (and cover
    it if tile)."""
    end = 0
    for offset, size in spans:
        if size < 0 or offset < end or (tile and offset != end):
            raise ValueError(f"layer spans must be in increasing order without overlaps{' or gaps' if tile else ''}: "
                             f"({offset}, {size}) after a layer ending at {end}")
        end = offset + size
    if end > n or (tile and end != n):
        raise ValueError(f"layer spans end at {end} but the vector has {n} entries")
    return (torch.tensor([o for o, _ in spans], dtype=torch.int64, device=device),
            torch.tensor([s for _, s in spans], dtype=torch.int64, device=device))


def _layer_of(index: torch.Tensor, offsets: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
    layer = torch.searchsorted(offsets, index, right=True) - 1
    inside = (layer >= 0) & (index < (offsets + sizes)[layer.clamp(min=0)]) if len(offsets) else index < 0
    if not bool(inside.all()):
        raise ValueError("a sparse index lies outside every layer span")
    return layer
