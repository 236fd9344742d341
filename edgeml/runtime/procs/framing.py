"""How the procs transport puts a message on the wire: one buffer per message, tensors copied once, a header of
plain data that is parsed, never unpickled.

Layout (little-endian): [8-byte header length][header, zero-padded to 8][tensor bytes, each zero-padded to 8].

The header is a struct: ``version, flags, tensors, entries, tag length`` (``<BBIII``), the tag (UTF-8), then per
tensor its dtype (a code into ``DTYPE_NAMES``), number of dimensions and sizes (``<BB`` then ``<Q`` each): the
bytes of tensor i follow those of tensor i - 1, so a tensor is exactly its dtype, shape and raw buffer. Then one
entry per item of the message's ``data`` and ``meta``: which of the two (``<B``), its kind (``<B``) and its key
(``<H`` length, UTF-8), then its value by kind: none, false, true, an int64 (``<q``), a float64 (``<d``), a
string (``<I`` length, UTF-8), a tensor (``<I`` index), or any other plain value (``<I`` length, JSON).

In that JSON, plain values (None, bool, int, float, including NaN and infinities, str, list, dict with str keys)
are themselves, and the few other types the runtime sends are tagged objects: ``{"$": "tuple", "items": [...]}``,
``{"$": "dict", "items": [[key, value], ...]}`` (non-str keys, or a key starting with ``$``), ``{"$": "np",
"dtype": name, "v": value}`` (a NumPy scalar), ``{"$": "tensor", "i": index}`` and ``{"$": "ndarray", "i":
index}`` (a tensor, a NumPy array, by its index in the tensor table). Anything else is refused when it is sent
(``TypeError``), and a header that does not parse as this layout is refused when it is received (``FrameError``),
so a frame can only ever produce these values. Decoding returns views into the received buffer, so a received
tensor is not copied again. (The common messages, tensors with scalar metadata, need no JSON at all.)
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import torch

VERSION = 1
MAX_DEPTH = 64
"""Nesting depth of a message's values (and number of tensor dimensions) beyond which it is refused."""

DTYPE_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16",
               "bfloat16", "float32", "float64", "complex64", "complex128")
"""Tensor dtypes a frame may carry; a dtype travels as its index here."""
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES
                                  if isinstance(getattr(torch, name, None), torch.dtype)}
"""Those this torch has, by name."""
_CODE = {DTYPES[name]: code for code, name in enumerate(DTYPE_NAMES) if name in DTYPES}
_BY_CODE = {code: (DTYPES[name], torch.empty(0, dtype=DTYPES[name]).element_size())
            for code, name in enumerate(DTYPE_NAMES) if name in DTYPES}

NP_DTYPES = {name: np.dtype(name) for name in (
    "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64", "float16", "float32",
    "float64")}
"""NumPy dtypes a frame may carry (e.g. a ``np.float32`` in a series row)."""

_HEAD, _DIMS, _ENTRY = struct.Struct("<BBIII"), struct.Struct("<BB"), struct.Struct("<BBH")
_I64, _F64, _U32 = struct.Struct("<q"), struct.Struct("<d"), struct.Struct("<I")
NONE, FALSE, TRUE, INT, FLOAT, STR, TENSOR, PLAIN = range(8)
_SECTIONS = 2  # data, meta
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # allow_nan: NaN and infinities as JSON does


class FrameError(ValueError):
    """A received buffer is not a well-formed frame: the message is dropped (never partly acted on)."""


# ------------------------------------------------------------------------------------------------- encoding
def _tensor_ref(value: torch.Tensor, tensors: list[torch.Tensor], kind: str = "tensor") -> dict[str, Any]:
    if value.dtype not in _CODE:
        raise TypeError(f"a message cannot carry a tensor of dtype {value.dtype}")
    tensors.append(value)
    return {"$": kind, "i": len(tensors) - 1}


def _pack(value: Any, tensors: list[torch.Tensor], depth: int = 0) -> Any:
    """``value`` as JSON-ready plain data, its tensors appended to ``tensors`` (see the module docstring)."""
    t = type(value)
    if value is None or t is str or t is bool or t is int or t is float:
        return value
    if depth > MAX_DEPTH:
        raise TypeError(f"a message's values may nest at most {MAX_DEPTH} deep")
    if t is dict:
        if all(type(k) is str and not k.startswith("$") for k in value):
            return {k: _pack(v, tensors, depth + 1) for k, v in value.items()}
        return {"$": "dict", "items": [[_pack(k, tensors, depth + 1), _pack(v, tensors, depth + 1)]
                                       for k, v in value.items()]}
    if t is list:
        return [_pack(v, tensors, depth + 1) for v in value]
    if t is tuple:
        return {"$": "tuple", "items": [_pack(v, tensors, depth + 1) for v in value]}
    if isinstance(value, torch.Tensor):
        return _tensor_ref(value, tensors)
    if isinstance(value, np.generic):
        if value.dtype.name not in NP_DTYPES:
            raise TypeError(f"a message cannot carry a NumPy scalar of dtype {value.dtype}")
        return {"$": "np", "dtype": value.dtype.name, "v": value.item()}
    if isinstance(value, np.ndarray):
        if value.dtype.name not in NP_DTYPES:
            raise TypeError(f"a message cannot carry a NumPy array of dtype {value.dtype}")
        return _tensor_ref(torch.from_numpy(np.ascontiguousarray(value)), tensors, "ndarray")
    # subclasses of the plain types (an IntEnum, a torch.Size, a named tuple) travel as their plain value
    for plain in (bool, int, float, str, tuple, list, dict):
        if isinstance(value, plain):
            return _pack(plain(value), tensors, depth)
    raise TypeError(f"a message cannot carry a {t.__module__}.{t.__qualname__}: only tensors, NumPy scalars and "
                    f"arrays, and plain values (None, bool, int, float, str, list, tuple, dict)")


def _entries(section: int, items: dict[str, Any], tensors: list[torch.Tensor], out: list[bytes]) -> None:
    for key, value in items.items():
        if type(key) is not str:
            raise TypeError(f"a message's keys must be str, got {key!r}")
        k = key.encode()
        if len(k) > 0xFFFF:
            raise TypeError(f"a message's key may be at most 65535 bytes, got {len(k)}")
        t = type(value)
        if t is float:
            out.append(_ENTRY.pack(section, FLOAT, len(k)) + k + _F64.pack(value))
        elif t is int and -(1 << 63) <= value < (1 << 63):
            out.append(_ENTRY.pack(section, INT, len(k)) + k + _I64.pack(value))
        elif isinstance(value, torch.Tensor):
            _tensor_ref(value, tensors)
            out.append(_ENTRY.pack(section, TENSOR, len(k)) + k + _U32.pack(len(tensors) - 1))
        elif t is bool or value is None:
            out.append(_ENTRY.pack(section, NONE if value is None else TRUE if value else FALSE, len(k)) + k)
        elif t is str:
            s = value.encode()
            out.append(_ENTRY.pack(section, STR, len(k)) + k + _U32.pack(len(s)) + s)
        else:
            text = _JSON.encode(_pack(value, tensors)).encode()
            out.append(_ENTRY.pack(section, PLAIN, len(k)) + k + _U32.pack(len(text)) + text)


def encode(tag: str, data: dict[str, Any], meta: dict[str, Any], framed: bool = False) -> torch.Tensor:
    """One uint8 buffer holding the message. ``framed`` prefixes the buffer's own length (8 bytes), as the
    transport sends it, in the same single copy. Raises ``TypeError`` for a value a frame cannot carry."""
    if type(tag) is not str:
        raise TypeError(f"a message's tag must be a str, got {type(tag).__name__}")
    tensors: list[torch.Tensor] = []
    entries: list[bytes] = []
    _entries(0, data, tensors, entries)
    _entries(1, meta, tensors, entries)
    specs, blobs, offset = [], [], 0
    for t in tensors:  # (each call skipped where it would return the tensor itself: this is the hot path)
        if t.requires_grad:
            t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        if not t.is_contiguous():
            t = t.contiguous()
        ndim = t.dim()
        if ndim > MAX_DEPTH:
            raise TypeError(f"a message cannot carry a tensor of more than {MAX_DEPTH} dimensions")
        raw = t.view(-1).view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)
        specs.append(struct.pack(f"<BB{ndim}Q", _CODE[t.dtype], ndim, *t.shape))
        pad = (-raw.numel()) % 8
        blobs.append(raw)
        if pad:
            blobs.append(torch.zeros(pad, dtype=torch.uint8))
        offset += raw.numel() + pad
    name = tag.encode()
    header = b"".join([_HEAD.pack(VERSION, 0, len(tensors), len(entries), len(name)), name, *specs, *entries])
    header += b"\0" * ((-len(header)) % 8)
    prefix = (8 + len(header) + offset).to_bytes(8, "little") if framed else b""
    head = torch.frombuffer(bytearray(prefix + len(header).to_bytes(8, "little") + header), dtype=torch.uint8)
    return torch.cat([head, *blobs]) if blobs else head


# ------------------------------------------------------------------------------------------------- decoding
def _unpack(value: Any, tensors: list[torch.Tensor], depth: int = 0) -> Any:
    t = type(value)
    if t is list:
        if depth > MAX_DEPTH:
            raise FrameError(f"the header's values nest deeper than {MAX_DEPTH}")
        return [_unpack(v, tensors, depth + 1) for v in value]
    if t is not dict:
        return value  # None, bool, int, float, str: what JSON parses to
    if depth > MAX_DEPTH:
        raise FrameError(f"the header's values nest deeper than {MAX_DEPTH}")
    kind = value.get("$")
    if kind is None:
        return {k: _unpack(v, tensors, depth + 1) for k, v in value.items()}
    if kind == "tuple" and type(value.get("items")) is list:
        return tuple(_unpack(v, tensors, depth + 1) for v in value["items"])
    if kind == "dict" and type(value.get("items")) is list:
        out = {}
        for pair in value["items"]:
            if type(pair) is not list or len(pair) != 2:
                raise FrameError("a dict's item is not a [key, value] pair")
            key = _unpack(pair[0], tensors, depth + 1)
            try:
                out[key] = _unpack(pair[1], tensors, depth + 1)
            except TypeError:
                raise FrameError(f"a dict key of type {type(key).__name__} is not hashable") from None
        return out
    if kind in ("tensor", "ndarray"):
        i = value.get("i")
        if type(i) is not int or not 0 <= i < len(tensors):
            raise FrameError(f"a reference to tensor {i!r}, of {len(tensors)} in the frame")
        if kind == "tensor":
            return tensors[i]
        try:
            return tensors[i].numpy()
        except TypeError:
            raise FrameError(f"tensor {i} ({tensors[i].dtype}) cannot be a NumPy array") from None
    if kind == "np" and value.get("dtype") in NP_DTYPES and type(value.get("v")) in (bool, int, float):
        try:
            return NP_DTYPES[value["dtype"]].type(value["v"])
        except (OverflowError, ValueError):
            raise FrameError(f"{value['v']!r} is not a {value['dtype']}") from None
    raise FrameError(f"an unknown or malformed tagged value {str(value)[:80]!r}")


def _text(h: bytes, at: int, n: int, what: str) -> str:
    if at + n > len(h):
        raise FrameError(f"the header ends inside {what}")
    try:
        return h[at:at + n].decode()
    except UnicodeDecodeError:
        raise FrameError(f"{what} is not UTF-8") from None


def decode(buf: torch.Tensor) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(tag, data, meta) of an encoded (unframed) buffer; tensors are views into ``buf``. Raises ``FrameError``
    (a ``ValueError``) for anything that is not a frame ``encode`` could have made."""
    if buf.dtype != torch.uint8 or buf.dim() != 1:
        raise FrameError(f"a frame is a 1-d uint8 buffer, got {buf.dtype} of shape {tuple(buf.shape)}")
    raw = buf.numpy()
    size = len(raw)
    if size < 8:
        raise FrameError(f"a frame has at least 8 bytes, got {size}")
    n = int.from_bytes(raw[:8].tobytes(), "little")
    if n > size - 8 or n % 8:
        raise FrameError(f"the header's length ({n} bytes) is not a multiple of 8 within the frame ({size} bytes)")
    h = raw[8:8 + n].tobytes()
    what = "its first fields"
    try:  # every fixed-size field is read with unpack_from, which raises struct.error past the header's end
        version, flags, n_tensors, n_entries, tag_len = _HEAD.unpack_from(h, 0)
        if version != VERSION or flags:
            raise FrameError(f"the header is not a version-{VERSION} frame header (version {version}, flags "
                             f"{flags})")
        at = _HEAD.size + tag_len
        tag = _text(h, _HEAD.size, tag_len, "the tag")
        base, offset, tensors = 8 + n, 0, []
        for i in range(n_tensors):
            what = f"tensor {i}'s description"
            code, ndim = _DIMS.unpack_from(h, at)
            if code not in _BY_CODE or ndim > MAX_DEPTH:
                raise FrameError(f"tensor {i} has an unknown dtype (code {code}) or {ndim} dimensions")
            shape = list(struct.unpack_from(f"<{ndim}Q", h, at + _DIMS.size))
            at += _DIMS.size + 8 * ndim
            if any(n >= 1 << 62 for n in shape):
                raise FrameError(f"tensor {i}'s shape {shape} has an impossible size")
            dtype, itemsize = _BY_CODE[code]
            nbytes = math.prod(shape) * itemsize
            if base + offset + nbytes > size:
                raise FrameError(f"tensor {i} ({DTYPE_NAMES[code]}, shape {shape}) lies beyond the frame's end")
            try:
                if not nbytes:
                    tensors.append(torch.empty(shape, dtype=dtype))
                else:
                    t = buf[base + offset: base + offset + nbytes].view(dtype)
                    tensors.append(t if ndim == 1 else t.reshape(shape))
            except (RuntimeError, OverflowError, TypeError, ValueError) as exc:
                raise FrameError(f"tensor {i} ({DTYPE_NAMES[code]}, shape {shape}) cannot be read: "
                                 f"{str(exc)[:120]}") from None
            offset += nbytes + (-nbytes) % 8
        if base + offset != size:
            raise FrameError(f"the frame holds {size - base} bytes of tensors, its header describes {offset}")
        sections: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
        for i in range(n_entries):
            what = f"entry {i}"
            section, kind, key_len = _ENTRY.unpack_from(h, at)
            if section >= _SECTIONS:
                raise FrameError(f"entry {i} belongs to an unknown section {section}")
            key = _text(h, at + _ENTRY.size, key_len, f"entry {i}'s key")
            at += _ENTRY.size + key_len
            what = f"entry {key!r}"
            if kind == FLOAT:
                value = _F64.unpack_from(h, at)[0]
                at += 8
            elif kind == INT:
                value = _I64.unpack_from(h, at)[0]
                at += 8
            elif kind == TENSOR:
                index = _U32.unpack_from(h, at)[0]
                at += 4
                if index >= len(tensors):
                    raise FrameError(f"entry {key!r} refers to tensor {index}, of {len(tensors)} in the frame")
                value = tensors[index]
            elif kind in (NONE, FALSE, TRUE):
                value = None if kind == NONE else kind == TRUE
            elif kind in (STR, PLAIN):
                length = _U32.unpack_from(h, at)[0]
                value = _text(h, at + 4, length, f"entry {key!r}")
                at += 4 + length
                if kind == PLAIN:
                    try:
                        value = _unpack(json.loads(value), tensors)
                    except FrameError:
                        raise
                    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
                        raise FrameError(f"entry {key!r} is not JSON (or nests too deep): {str(exc)[:120]}") from None
            else:
                raise FrameError(f"entry {key!r} has an unknown kind {kind}")
            sections[section][key] = value
    except struct.error:
        raise FrameError(f"the header ends inside {what}") from None
    if len(h) - at >= 8 or h[at:].strip(b"\0"):
        raise FrameError(f"the header has {len(h) - at} bytes past its last entry")
    return tag, sections[0], sections[1]
