"""How the procs transport puts a message on the wire: one buffer per message, tensors copied once.

Layout: [8-byte header length][pickled header, padded to 8][tensor bytes, each padded to 8]. The header holds
the tag, each tensor's dtype, shape and offset, the scalars and the transport's metadata. Decoding returns
views into the received buffer, so a received tensor is not copied again.
"""

from __future__ import annotations

import pickle
from typing import Any

import torch


def encode(tag: str, data: dict[str, Any], meta: dict[str, Any], framed: bool = False) -> torch.Tensor:
    """One uint8 buffer holding the message. ``framed`` prefixes the buffer's own length (8 bytes), as the
    transport sends it, in the same single copy."""
    specs, blobs, scalars, offset = [], [], {}, 0
    for key, value in data.items():
        if isinstance(value, torch.Tensor):
            t = value.detach().contiguous().cpu()
            raw = t.reshape(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
            specs.append((key, str(t.dtype).removeprefix("torch."), tuple(t.shape), offset, raw.numel()))
            pad = (-raw.numel()) % 8
            blobs.append(raw)
            if pad:
                blobs.append(torch.zeros(pad, dtype=torch.uint8))
            offset += raw.numel() + pad
        else:
            scalars[key] = value
    header = pickle.dumps((tag, specs, scalars, meta))
    header += b"\0" * ((-len(header)) % 8)
    prefix = (8 + len(header) + offset).to_bytes(8, "little") if framed else b""
    head = torch.frombuffer(bytearray(prefix + len(header).to_bytes(8, "little") + header), dtype=torch.uint8)
    return torch.cat([head, *blobs]) if blobs else head


def decode(buf: torch.Tensor) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(tag, data, meta) of an encoded (unframed) buffer; tensors are views into ``buf``."""
    n = int.from_bytes(bytes(buf[:8].tolist()), "little")
    tag, specs, scalars, meta = pickle.loads(bytes(buf[8:8 + n].numpy()))
    base = 8 + n
    data: dict[str, Any] = {}
    for key, dtype, shape, offset, nbytes in specs:
        raw = buf[base + offset: base + offset + nbytes]
        data[key] = raw.view(getattr(torch, dtype)).reshape(shape) if nbytes else \
            torch.empty(shape, dtype=getattr(torch, dtype))
    data.update(scalars)
    return tag, data, meta
