"""A GGUF writer for tests, by hand: every field is ours to set, so broken files are easy.

``gguf_bytes(kvs, tensors)`` lays a whole file out the way ``gguf.GGUFWriter``
and llama.cpp do (tensors packed in order, each padded to the alignment). The
helpers below it (``u32``, ``gstr``, ``kv``, ``tensor_info`` ...) build the
pieces, so a test can assemble a file that no writer would produce.
"""

from __future__ import annotations

import struct

import numpy as np

from pyengine.gguf.header import VALUE_TYPE_IDS, VALUE_TYPES

# Test-only: the writer needs the struct format and numpy dtype of each fixed-size type by name.
_FMT = {name: fmt for name, fmt, _ in VALUE_TYPES.values() if fmt}
_DTYPE = {name: dtype for name, _, dtype in VALUE_TYPES.values() if dtype}


def u32(x: int) -> bytes:
    return struct.pack("<I", x)


def u64(x: int) -> bytes:
    return struct.pack("<Q", x)


def gstr(s: str | bytes) -> bytes:
    """A GGUF string: u64 length + bytes."""
    b = s.encode("utf-8", "surrogateescape") if isinstance(s, str) else s
    return u64(len(b)) + b


def _base(vtype: str) -> str:
    return "ARRAY" if vtype.startswith("ARRAY[") else vtype


def payload(vtype: str, value) -> bytes:
    """The bytes of a value of type ``vtype`` (``"UINT32"``, ``"ARRAY[STRING]"``,
    ``"ARRAY[ARRAY[INT8]]"`` ...), without its leading type id."""
    if vtype == "STRING":
        return gstr(value)
    if vtype.startswith("ARRAY["):
        item = vtype[len("ARRAY["):-1]
        head = u32(VALUE_TYPE_IDS[_base(item)]) + u64(len(value))
        if isinstance(value, np.ndarray):  # an array as the reader returns it: its items in one go
            return head + value.astype(_DTYPE[item]).tobytes()
        return head + b"".join(payload(item, v) for v in value)
    return struct.pack(_FMT[vtype], value)


def kv(key: str | bytes, vtype: str, value) -> bytes:
    """One metadata pair: key, type id, value."""
    return gstr(key) + u32(VALUE_TYPE_IDS[_base(vtype)]) + payload(vtype, value)


def tensor_info(name: str, ne: tuple[int, ...], type_id: int, offset: int) -> bytes:
    """One tensor info: name, n_dims, ne (u64 each), ggml type id, offset from the data section."""
    return gstr(name) + u32(len(ne)) + b"".join(u64(d) for d in ne) + u32(type_id) + u64(offset)


def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + u32(version) + u64(n_tensors) + u64(n_kv)


def pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def gguf_bytes(kvs: list[tuple[str, str, object]],
               tensors: list[tuple[str, tuple[int, ...], int, bytes]],
               alignment: int = 32, version: int = 3) -> bytes:
    """A whole GGUF file.

    kvs: ``(key, type name, value)``; tensors: ``(name, ne, ggml type id, raw data)``.
    ``alignment`` lays the data out; write a ``general.alignment`` key yourself
    if it is not 32.
    """
    offsets, at = [], 0
    for *_, data in tensors:
        offsets.append(at)
        at = pad(at + len(data), alignment)
    head = header(len(tensors), len(kvs), version)
    head += b"".join(kv(*item) for item in kvs)
    head += b"".join(tensor_info(name, ne, tid, off) for (name, ne, tid, _), off in zip(tensors, offsets))
    data_start = pad(len(head), alignment)
    out = bytearray(head) + bytes(data_start - len(head))
    for (*_, data), off in zip(tensors, offsets):
        out += bytes(data_start + off - len(out)) + data
    out += bytes(pad(len(out), alignment) - len(out))  # the last tensor is padded too
    return bytes(out)


def quantized_copy(src, dst, type_name: str = "Q8_0") -> None:
    """Write the GGUF ``src`` to ``dst`` with every matrix whose rows are whole blocks quantized to
    ``type_name`` by gguf-py's quantizer (``gguf.quants.quantize``: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0); the
    metadata and the other tensors as they are."""
    import gguf
    import gguf.quants

    from pyengine.gguf import open_gguf
    from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME

    qtype = GGML_TYPES_BY_NAME[type_name]
    with open_gguf(src) as g:
        kvs = [(k, t, g.metadata[k]) for k, t in g.value_types.items()]
        tensors = []
        for name, info in g.tensors.items():
            if len(info.shape) == 2 and info.shape[0] % qtype.block_size == 0:
                blocks = gguf.quants.quantize(g.tensor(name), gguf.GGMLQuantizationType[type_name])
                tensors.append((name, info.shape, qtype.id, blocks.tobytes()))
            else:
                tensors.append((name, info.shape, info.type.id, g.tensor_bytes(name).tobytes()))
    with open(dst, "wb") as f:
        f.write(gguf_bytes(kvs, tensors))
