"""One GGUF file's header: the magic, the counts, the metadata values and the tensor infos.

:func:`read_part` parses one file (a whole model, or one part of a split
model) into a :class:`GGUFPart`; the rules for hostile input are listed in
:mod:`pyengine.gguf`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pyengine.gguf.cursor import Cursor
from pyengine.gguf.ggml_types import GGML_TYPES, GGMLType

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_ARRAY_DEPTH = 8        # an array of arrays of ... at most this many levels
MAX_DIMS = 4               # ggml's GGML_MAX_DIMS
MAX_METADATA_BYTES = 256 << 20  # what one file's header may hold (Cursor.hold); real vocabs take a tenth or less
HEADER_BASE_BYTES = 64 << 20    # ... and at most the file's own size plus this: a small file cannot hold much
# What Python makes, charged to the cap before it is made (CPython 3.12, 64-bit; measured on 2-3 M of each):
KEY_BYTES = 256                 # a key: its str, its entries in the values, types and offsets dicts (~190)
ARRAY_BYTES = 320               # an array inside an array: a numpy array, its (value, type) pair, list slots (~280)
TENSOR_INFO_BYTES = 512         # a tensor info: its name, shape tuple, TensorInfo and dict entries (~440)

KEY_ALIGNMENT = "general.alignment"
TEXT_CHARS = 200           # a name from the metadata, as the page and the CLI show and store it

# The 13 GGUF value types: id -> (name, struct format of one item, numpy dtype).
# STRING and ARRAY have no fixed size. BOOL is one byte, true when non-zero.
VALUE_TYPES: dict[int, tuple[str, str | None, str | None]] = {
    0:  ("UINT8",   "<B", "<u1"),
    1:  ("INT8",    "<b", "<i1"),
    2:  ("UINT16",  "<H", "<u2"),
    3:  ("INT16",   "<h", "<i2"),
    4:  ("UINT32",  "<I", "<u4"),
    5:  ("INT32",   "<i", "<i4"),
    6:  ("FLOAT32", "<f", "<f4"),
    7:  ("BOOL",    "<?", "?"),
    8:  ("STRING",  None, None),
    9:  ("ARRAY",   None, None),
    10: ("UINT64",  "<Q", "<u8"),
    11: ("INT64",   "<q", "<i8"),
    12: ("FLOAT64", "<d", "<f8"),
}
T_STRING, T_ARRAY = 8, 9
VALUE_TYPE_IDS = {name: tid for tid, (name, _, _) in VALUE_TYPES.items()}


_SCALARS = {tid: struct.Struct(fmt) for tid, (_, fmt, _) in VALUE_TYPES.items() if fmt}
_MIN_KV_BYTES = 8 + 4 + 1          # key length, type, the smallest value
_MIN_TENSOR_INFO_BYTES = 8 + 4 + 4 + 8  # name length, n_dims, type, offset (0 dims)
_MIN_ARRAY_BYTES = 4 + 8           # item type, count


class Section(NamedTuple):
    """One of the file's five parts: bytes ``[start, end)``."""
    name: str
    start: int
    end: int


class TensorInfo(NamedTuple):
    """Where a tensor lives and what it is.

    ``shape`` is ggml's ``ne`` (fastest-varying first; a weight is
    ``(n_in, n_out)``), ``offset`` the absolute byte offset in part ``part``.
    """
    name: str
    shape: tuple[int, ...]
    type: GGMLType
    offset: int
    n_bytes: int
    part: int

    @property
    def n_elements(self) -> int:
        return n_elements(self.shape)


def n_elements(shape: Iterable[int]) -> int:
    """The product of ``shape`` as a Python int (never overflows)."""
    n = 1
    for d in shape:
        n *= d
    return n


# ---------------------------------------------------------------------------
# Metadata values
# ---------------------------------------------------------------------------

def text_value(value: object, limit: int = TEXT_CHARS) -> str | None:
    """A metadata value shown or stored as a name (``general.name``, ``general.architecture``): a str cut to
    ``limit`` characters (an ellipsis marks the cut), None for any other value (an array, a number)."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[:limit - 1] + "…"


def _value_type(cur: Cursor, what: str) -> int:
    at = cur.offset
    tid = cur.u32(what)
    if tid not in VALUE_TYPES:
        raise cur.error(f"unknown GGUF value type {tid} (known: 0-12)", at)
    return tid


@dataclass(frozen=True)
class SkippedArray:
    """An array the reader was asked not to make (:func:`read_part`'s ``skip``): its length only."""
    count: int

    def __len__(self) -> int:
        return self.count


def _skip_array(cur: Cursor) -> tuple[SkippedArray, str]:
    """Move past one array of numbers or strings -> (SkippedArray, type name); an array of arrays is
    an error here (the keys skipped hold no such thing)."""
    item = _value_type(cur, "array item type")
    count = cur.u64("array length")
    item_name = VALUE_TYPES[item][0]
    if item == T_STRING:
        cur.skip_strings(count)
    elif item in _SCALARS:
        size = _SCALARS[item].size
        cur.check_count(count, size, f"array of {item_name}")
        cur.skip(count * size, f"array of {item_name}")
    else:
        raise cur.error("an array of arrays where an array of numbers or strings was expected")
    return SkippedArray(count), f"ARRAY[{item_name}]"


def _read_value(cur: Cursor, tid: int, depth: int = 0) -> tuple[Any, str]:
    """One value of GGUF type ``tid`` -> (value, type name like ``ARRAY[STRING]``).

    A scalar is an int, float, bool or str; an array of a fixed-size type a
    read-only 1-D numpy array (BOOL as ``bool``); an array of strings a
    ``list[str]``; an array of arrays a list of those.
    """
    name = VALUE_TYPES[tid][0]
    if tid == T_STRING:
        return cur.string(), name
    if tid != T_ARRAY:
        return cur.unpack(_SCALARS[tid], name)[0], name
    if depth >= MAX_ARRAY_DEPTH:
        raise cur.error(f"arrays nested more than {MAX_ARRAY_DEPTH} deep")
    item = _value_type(cur, "array item type")
    count = cur.u64("array length")
    item_name, _, dtype = VALUE_TYPES[item]
    if item == T_STRING:
        return cur.strings(count), f"ARRAY[{item_name}]"
    if item == T_ARRAY:
        cur.check_count(count, _MIN_ARRAY_BYTES, "array of arrays")
        cur.hold(_MIN_ARRAY_BYTES * count, count + 1, f"array of {count:,} arrays", each=ARRAY_BYTES)
        pairs = [_read_value(cur, T_ARRAY, depth + 1) for _ in range(count)]
        inner = {t for _, t in pairs}  # "ARRAY[ARRAY]" when the inner types differ or none
        return [v for v, _ in pairs], f"ARRAY[{inner.pop() if len(inner) == 1 else 'ARRAY'}]"
    return cur.numbers(dtype, count, f"array of {item_name}"), f"ARRAY[{item_name}]"


def _read_metadata(cur: Cursor, n_kv: int, skip: frozenset[str] = frozenset()) -> tuple[dict, dict, dict]:
    """The ``n_kv`` key-value pairs -> (values, type names, byte offset of each value), within the cap
    :func:`read_part` set (every key charged before the first is read; each string and array before it
    is made); an array under a key in ``skip`` is a :class:`SkippedArray`."""
    cur.check_count(n_kv, _MIN_KV_BYTES, "metadata")
    cur.hold(0, n_kv, f"count of {n_kv:,} keys", each=KEY_BYTES)
    values: dict[str, Any] = {}
    types: dict[str, str] = {}
    offsets: dict[str, int] = {}
    for i in range(n_kv):
        cur.where = f"key #{i}"
        at = cur.offset
        key = cur.string("key", objects=0)
        if not key:
            raise cur.error("empty key", at)
        if key in values:
            raise cur.error(f"duplicate key {key!r} (first at byte {offsets[key]})", at)
        cur.where = f"key {key!r}"
        tid = _value_type(cur, "value type")
        offsets[key] = cur.offset
        values[key], types[key] = _skip_array(cur) if tid == T_ARRAY and key in skip else _read_value(cur, tid)
        cur.report()
    return values, types, offsets


def _alignment(cur: Cursor, values: dict, types: dict, offsets: dict) -> int:
    if KEY_ALIGNMENT not in values:
        return DEFAULT_ALIGNMENT
    cur.where = f"key {KEY_ALIGNMENT!r}"
    at, align = offsets[KEY_ALIGNMENT], values[KEY_ALIGNMENT]
    if types[KEY_ALIGNMENT] != "UINT32":
        raise cur.error(f"must be a UINT32, not {types[KEY_ALIGNMENT]}", at)
    if align == 0 or align & (align - 1):
        raise cur.error(f"alignment {align} is not a power of two", at)
    return align


# ---------------------------------------------------------------------------
# Tensor infos
# ---------------------------------------------------------------------------

def _read_tensor_info(cur: Cursor) -> tuple[str, tuple[int, ...], GGMLType, int]:
    """One tensor info -> (name, ne, type, offset from the data section); shape checks."""
    name = cur.string("tensor name", objects=0)
    cur.where = f"tensor {name!r}"
    at = cur.offset
    n_dims = cur.u32("n_dims")
    if n_dims > MAX_DIMS:
        raise cur.error(f"{n_dims} dimensions (ggml allows at most {MAX_DIMS})", at)
    ne = tuple(cur.numbers("<u8", n_dims, "dims").tolist())
    for j, d in enumerate(ne):
        if d >= 1 << 63:
            raise cur.error(f"dimension {j} is {d}, negative as ggml's int64", at)
    n = n_elements(ne)
    if n >= 1 << 63:
        raise cur.error(f"shape {list(ne)} has {n} elements, more than ggml's int64 can count", at)
    at = cur.offset
    tid = cur.u32("ggml type")
    if tid not in GGML_TYPES:
        raise cur.error(f"unknown ggml type id {tid}", at)
    gtype = GGML_TYPES[tid]
    ne0 = ne[0] if ne else 1
    if ne0 % gtype.block_size:
        raise cur.error(f"first dimension {ne0} is not a multiple of {gtype.name}'s block size "
                        f"{gtype.block_size}", at)
    return name, ne, gtype, cur.u64("data offset")


def _check_tensor_data(cur: Cursor, tensors: dict[str, TensorInfo], info_at: dict[str, int],
                       data_offset: int, alignment: int) -> None:
    """Each tensor's bytes inside the file, aligned, and overlapping no other's."""
    size = cur.src.size
    for t in tensors.values():
        cur.where = f"tensor {t.name!r}"
        rel = t.offset - data_offset
        if rel % alignment:
            raise cur.error(f"data offset {rel} is not a multiple of the alignment {alignment}",
                            info_at[t.name])
        if t.offset + t.n_bytes > size:
            raise cur.error(f"data [{t.offset}, {t.offset + t.n_bytes}) runs past the end of "
                            f"the file ({size} bytes)", info_at[t.name])
    prev = None
    for t in sorted((t for t in tensors.values() if t.n_bytes), key=lambda t: t.offset):
        if prev is not None and t.offset < prev.offset + prev.n_bytes:
            cur.where = f"tensor {t.name!r}"
            raise cur.error(f"data [{t.offset}, {t.offset + t.n_bytes}) overlaps tensor "
                            f"{prev.name!r} [{prev.offset}, {prev.offset + prev.n_bytes})",
                            info_at[t.name])
        prev = t


# ---------------------------------------------------------------------------
# One file
# ---------------------------------------------------------------------------

@dataclass
class GGUFPart:
    """One parsed GGUF file (a whole model, or one part of a split model)."""
    source: Any
    index: int                     # position in the split (0 for a single file)
    version: int
    alignment: int
    data_offset: int               # absolute byte offset of the tensor data
    n_kv: int
    metadata: dict[str, Any]
    value_types: dict[str, str]
    tensors: dict[str, TensorInfo]
    sections: list[Section]
    key_offsets: dict[str, int] = field(default_factory=dict)  # byte offset of each value


def _read_header(cur: Cursor) -> tuple[int, int, int]:
    """Magic, version, counts -> (version, n_tensors, n_kv)."""
    magic = cur.raw(4, "magic")
    if magic != GGUF_MAGIC:
        raise cur.error(f"not a GGUF file: magic {magic!r}, expected {GGUF_MAGIC!r}", 0)
    version = cur.u32("version")
    supported = " and ".join(map(str, SUPPORTED_VERSIONS))
    if version & 0xFFFF == 0 and version:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        raise cur.error(f"the file is big-endian (its version reads {swapped} byte-swapped); "
                        f"pyengine reads little-endian GGUF files only", 4)
    if version not in SUPPORTED_VERSIONS:
        why = "is no longer supported" if version == 1 else "is not supported"
        raise cur.error(f"GGUF version {version} {why} (this reader reads versions {supported})", 4)
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata key-value count")
    return version, n_tensors, n_kv


def read_part(source: Any, index: int = 0, progress: Callable[[int, int], None] | None = None,
              skip: frozenset[str] = frozenset()) -> GGUFPart:
    """Parse one GGUF file's header, metadata and tensor infos from ``source`` (an array under a key in
    ``skip`` only counted: a :class:`SkippedArray`).

    Tensor data is not read; its placement is checked. What the header makes is charged to a cap
    (``MAX_METADATA_BYTES``, and at most the file's size plus ``HEADER_BASE_BYTES``) before it is made,
    so a hostile count is refused before its objects exist. ``progress(bytes_done,
    bytes_total)`` is called as :class:`Cursor` reports (the last call: both
    the end of the tensor infos). Raises :class:`GGUFError` naming the file,
    byte offset and key or tensor.
    """
    cur = Cursor(source, progress)
    version, n_tensors, n_kv = _read_header(cur)
    kv_start = cur.offset
    cur.limit(min(MAX_METADATA_BYTES, source.size + HEADER_BASE_BYTES))
    values, types, key_offsets = _read_metadata(cur, n_kv, skip)
    alignment = _alignment(cur, values, types, key_offsets)
    ti_start = cur.offset
    cur.where, cur.capped = "tensor infos", "the header"
    cur.check_count(n_tensors, _MIN_TENSOR_INFO_BYTES, "tensor infos")
    cur.hold(0, n_tensors, f"count of {n_tensors:,} tensor infos", each=TENSOR_INFO_BYTES)
    raw: list[tuple[str, tuple[int, ...], GGMLType, int]] = []
    info_at: dict[str, int] = {}
    for i in range(n_tensors):
        cur.where = f"tensor #{i}"
        at = cur.offset
        info = _read_tensor_info(cur)
        if info[0] in info_at:
            raise cur.error(f"duplicate tensor name (first at byte {info_at[info[0]]})", at)
        info_at[info[0]] = at
        raw.append(info)
        cur.report()
    cur.limit(None)
    ti_end = cur.offset
    data_offset = -(-ti_end // alignment) * alignment
    tensors = {}
    for name, ne, gtype, rel in raw:
        n_bytes = gtype.n_bytes(n_elements(ne))
        tensors[name] = TensorInfo(name, ne, gtype, data_offset + rel, n_bytes, index)
    _check_tensor_data(cur, tensors, info_at, data_offset, alignment)
    cur.report(last=True)
    sections = [Section("magic", 0, 4), Section("header", 4, kv_start),
                Section("metadata", kv_start, ti_start), Section("tensor_infos", ti_start, ti_end),
                Section("tensor_data", min(data_offset, source.size), source.size)]
    return GGUFPart(source, index, version, alignment, data_offset, n_kv, values, types,
                    tensors, sections, key_offsets)

