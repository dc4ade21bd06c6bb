"""The GGUF file: header, metadata and tensor infos, read through a byte source.

The format (GGUF v2 and v3, little-endian; ggml's ``gguf.h`` and ``gguf.cpp``):

1. magic         ``b"GGUF"``
2. header        ``version: u32``, ``n_tensors: u64``, ``n_kv: u64``
3. metadata      ``n_kv`` times: ``key: string``, ``type: u32``, value.
                 A string is ``length: u64`` + UTF-8 bytes; an array is
                 ``item_type: u32``, ``count: u64``, then the items.
4. tensor infos  ``n_tensors`` times: ``name: string``, ``n_dims: u32``,
                 ``ne: u64 * n_dims`` (fastest-varying first), ``type: u32``
                 (a ggml type id), ``offset: u64`` (from the data section).
5. tensor data   at ``data_offset``: the end of the tensor infos rounded up to
                 ``general.alignment`` (a ``UINT32`` power of two; 32 if absent).

Every number in the file comes from a stranger. The header is parsed from one
growing buffer (1 MiB, then doubling), so a 6 MB header costs a handful of
reads; every count and length is checked against the bytes left in the file
before anything is allocated, so a count of 2^63 fails at once. Choices where
the format leaves room, following llama.cpp's ``gguf_init_from_file`` unless
said otherwise:

- versions 2 and 3 only; version 1 (u32 counts) is rejected;
- big-endian files (their version field reads byte-swapped, e.g. 0x03000000)
  are detected and rejected with a message naming the byte order;
- arrays of arrays are read up to ``MAX_ARRAY_DEPTH`` (8) levels;
- keys must be non-empty and unique; tensor names unique (across all parts
  of a split model too);
- ``general.alignment`` must be a ``UINT32`` power of two (0 and 13 are not);
- at most 4 dims; a dim may be 0 (llama.cpp allows it: the tensor is empty),
  never negative as an int64; the element count must stay below 2^63;
  the first dim must be a multiple of the type's block size;
- tensor data must lie inside its file, start on an ``alignment`` boundary and
  not overlap another tensor's (llama.cpp further requires the tensors to be
  packed in file order; we do not);
- strings are decoded as UTF-8 with ``surrogateescape``, so invalid bytes in a
  token text survive (``s.encode("utf-8", "surrogateescape")`` gives them back).

A split model (``NAME-00001-of-00003.gguf`` ...), as ``llama-gguf-split``
writes it: every part has ``split.no`` (u16, from 0), ``split.count`` (u16) and
``split.tensors.count`` (i32); part 0 has all the metadata; each tensor's data
sits in the part whose infos name it, at an offset from that part's data
section.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

import numpy as np

from pyengine.errors import GGUFError
from pyengine.ggml import GGML_TYPES, GGMLType
from pyengine.source import BytesSource, FileSource

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_ARRAY_DEPTH = 8        # an array of arrays of ... at most this many levels
MAX_DIMS = 4               # ggml's GGML_MAX_DIMS
FIRST_CHUNK = 1 << 20      # bytes of the first header read; each next read doubles
MAX_CHUNK = 64 << 20       # ... up to this

KEY_ALIGNMENT = "general.alignment"
KEY_SPLIT_NO = "split.no"
KEY_SPLIT_COUNT = "split.count"
KEY_SPLIT_TENSORS_COUNT = "split.tensors.count"
SPLIT_NAME = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")

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
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
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
# The cursor: front-to-back reads of the header from one growing buffer
# ---------------------------------------------------------------------------

class _Cursor:
    """Reads a source from byte 0 through a buffer refilled in doubling chunks.

    ``where`` names what is being read (``"header"``, ``"key 'x'"``,
    ``"tensor 'y'"``) for error messages.
    """

    def __init__(self, source: Any):
        self.src = source
        self.buf = b""
        self.base = 0            # file offset of buf[0]
        self.p = 0               # read position in buf
        self.chunk = FIRST_CHUNK
        self.where = "header"

    @property
    def offset(self) -> int:
        return self.base + self.p

    @property
    def left(self) -> int:
        """Bytes of the file after the read position."""
        return self.src.size - self.offset

    def error(self, msg: str, offset: int | None = None) -> GGUFError:
        at = self.offset if offset is None else offset
        return GGUFError(f"{self.src.name}: byte {at}: {self.where}: {msg}")

    def need(self, n: int, what: str) -> None:
        """Make ``buf[p:p+n]`` available, checking ``n`` against the file first."""
        have = len(self.buf) - self.p
        if n <= have:
            return
        if n > self.left:
            raise self.error(f"{what} needs {n} bytes but only {self.left} are left in the file "
                             f"of {self.src.size} bytes (truncated?)")
        end = self.base + len(self.buf)
        want = min(max(n - have, self.chunk), self.src.size - end)
        self.chunk = min(2 * self.chunk, MAX_CHUNK)
        more = self.src.read(end, want)
        if len(more) < n - have:
            raise self.error(f"{what}: the file ended early (read {len(more)} of {want} bytes at {end})")
        self.buf = self.buf[self.p:] + more
        self.base += self.p
        self.p = 0

    def check_count(self, count: int, item_bytes: int, what: str) -> None:
        """Reject ``count`` items of at least ``item_bytes`` each that cannot fit in the file."""
        if count * item_bytes > self.left:
            raise self.error(f"{what}: {count} items of at least {item_bytes} bytes cannot fit "
                             f"in the {self.left} bytes left in the file")

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        self.need(st.size, what)
        out = st.unpack_from(self.buf, self.p)
        self.p += st.size
        return out

    def u32(self, what: str) -> int:
        return self.unpack(_U32, what)[0]

    def u64(self, what: str) -> int:
        return self.unpack(_U64, what)[0]

    def raw(self, n: int, what: str) -> bytes:
        self.need(n, what)
        out = self.buf[self.p:self.p + n]
        self.p += n
        return out

    def string(self, what: str = "string") -> str:
        return self.string_bytes(what).decode("utf-8", "surrogateescape")

    def string_bytes(self, what: str = "string") -> bytes:
        n = self.u64(f"{what} length")
        return self.raw(n, what)

    def strings(self, count: int) -> list[str]:
        """``count`` strings: the hot loop of header parsing (262,144 vocab entries).

        Strings wholly inside the buffer are cut straight out of it; one that
        runs past the buffer's end goes through :meth:`string_bytes`, which
        refills. All are decoded at the end.
        """
        self.check_count(count, 8, "array of strings")
        raw: list[bytes] = [b""] * count
        unpack = _U64.unpack_from
        i = 0
        while i < count:
            buf, p = self.buf, self.p
            last = len(buf) - 8  # the last position a length can start at
            for i in range(i, count):  # the hot loop
                if p > last:
                    break
                q = p + 8
                r = q + unpack(buf, p)[0]
                if r > last + 8:
                    break
                raw[i] = buf[q:r]
                p = r
            else:
                i = count
            self.p = p
            if i < count:
                raw[i] = self.string_bytes()
                i += 1
        return [b.decode("utf-8", "surrogateescape") for b in raw]

    def numbers(self, dtype: str, count: int, what: str) -> np.ndarray:
        """``count`` fixed-size items: a 1-D numpy view of the buffer."""
        size = np.dtype(dtype).itemsize
        self.check_count(count, size, what)
        self.need(count * size, what)
        out = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.p)
        self.p += count * size
        return out


# ---------------------------------------------------------------------------
# Metadata values
# ---------------------------------------------------------------------------

def _value_type(cur: _Cursor, what: str) -> int:
    at = cur.offset
    tid = cur.u32(what)
    if tid not in VALUE_TYPES:
        raise cur.error(f"unknown GGUF value type {tid} (known: 0-12)", at)
    return tid


def _read_value(cur: _Cursor, tid: int, depth: int = 0) -> tuple[Any, str]:
    """One value of GGUF type ``tid`` -> (Python value, type name like ``ARRAY[STRING]``)."""
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
        pairs = [_read_value(cur, T_ARRAY, depth + 1) for _ in range(count)]
        inner = {t for _, t in pairs}  # "ARRAY[ARRAY]" when the inner types differ or none
        return [v for v, _ in pairs], f"ARRAY[{inner.pop() if len(inner) == 1 else 'ARRAY'}]"
    return cur.numbers(dtype, count, f"array of {item_name}").tolist(), f"ARRAY[{item_name}]"


def _read_metadata(cur: _Cursor, n_kv: int) -> tuple[dict, dict, dict]:
    """The ``n_kv`` key-value pairs -> (values, type names, byte offset of each value)."""
    cur.check_count(n_kv, _MIN_KV_BYTES, "metadata")
    values: dict[str, Any] = {}
    types: dict[str, str] = {}
    offsets: dict[str, int] = {}
    for i in range(n_kv):
        cur.where = f"key #{i}"
        at = cur.offset
        key = cur.string("key")
        if not key:
            raise cur.error("empty key", at)
        if key in values:
            raise cur.error(f"duplicate key {key!r} (first at byte {offsets[key]})", at)
        cur.where = f"key {key!r}"
        tid = _value_type(cur, "value type")
        offsets[key] = cur.offset
        values[key], types[key] = _read_value(cur, tid)
    return values, types, offsets


def _alignment(cur: _Cursor, values: dict, types: dict, offsets: dict) -> int:
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

def _read_tensor_info(cur: _Cursor) -> tuple[str, tuple[int, ...], GGMLType, int]:
    """One tensor info -> (name, ne, type, offset from the data section); shape checks."""
    name = cur.string("tensor name")
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


def _check_tensor_data(cur: _Cursor, tensors: dict[str, TensorInfo], info_at: dict[str, int],
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


def _read_header(cur: _Cursor) -> tuple[int, int, int]:
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


def read_part(source: Any, index: int = 0) -> GGUFPart:
    """Parse one GGUF file's header, metadata and tensor infos from ``source``.

    Tensor data is not read; its placement is checked. Raises
    :class:`GGUFError` naming the file, byte offset and key or tensor.
    """
    cur = _Cursor(source)
    version, n_tensors, n_kv = _read_header(cur)
    kv_start = cur.offset
    values, types, key_offsets = _read_metadata(cur, n_kv)
    alignment = _alignment(cur, values, types, key_offsets)
    ti_start = cur.offset
    cur.where = "tensor infos"
    cur.check_count(n_tensors, _MIN_TENSOR_INFO_BYTES, "tensor infos")
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
    ti_end = cur.offset
    data_offset = -(-ti_end // alignment) * alignment
    tensors = {}
    for name, ne, gtype, rel in raw:
        n_bytes = gtype.n_bytes(n_elements(ne))
        tensors[name] = TensorInfo(name, ne, gtype, data_offset + rel, n_bytes, index)
    _check_tensor_data(cur, tensors, info_at, data_offset, alignment)
    sections = [Section("magic", 0, 4), Section("header", 4, kv_start),
                Section("metadata", kv_start, ti_start), Section("tensor_infos", ti_start, ti_end),
                Section("tensor_data", min(data_offset, source.size), source.size)]
    return GGUFPart(source, index, version, alignment, data_offset, n_kv, values, types,
                    tensors, sections, key_offsets)


# ---------------------------------------------------------------------------
# Split models: order the parts and check they belong together
# ---------------------------------------------------------------------------

def _split_int(part: GGUFPart, key: str) -> int | None:
    value = part.metadata.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise GGUFError(f"{part.source.name}: byte {part.key_offsets[key]}: key {key!r}: "
                        f"must be an integer, not {part.value_types[key]}")
    return value


def _order_split(parts: list[GGUFPart]) -> list[GGUFPart]:
    """Parts in ``split.no`` order, checked against ``split.count`` and each other."""
    names = ", ".join(p.source.name for p in parts)
    nos = {}
    for p in parts:
        no, count = _split_int(p, KEY_SPLIT_NO), _split_int(p, KEY_SPLIT_COUNT)
        if no is None or count is None:
            if len(parts) == 1:
                return parts
            raise GGUFError(f"{p.source.name}: not part of a split model (no {KEY_SPLIT_NO!r} / "
                            f"{KEY_SPLIT_COUNT!r} keys), but it was given with other files: {names}")
        if no in nos:
            raise GGUFError(f"{p.source.name}: duplicate part: split.no {no} is also "
                            f"{nos[no].source.name}")
        nos[no] = p
    first = nos.get(0) or parts[0]
    count = _split_int(first, KEY_SPLIT_COUNT)
    _check_foreign(first, parts)
    if count == 1 and len(parts) == 1:
        return parts
    extra = [p for no, p in nos.items() if not 0 <= no < count]
    if extra:
        raise GGUFError(f"{extra[0].source.name}: split.no {_split_int(extra[0], KEY_SPLIT_NO)} "
                        f"is outside 0..{count - 1} of split.count {count}")
    if len(nos) < count:  # name at most 5 missing parts: count may be 65535
        missing = [i for i in range(min(count, len(nos) + 5)) if i not in nos]
        raise GGUFError(f"{first.source.name}: split model of {count} parts is missing "
                        f"{_describe_missing(first, missing, count)}"
                        f"{' ...' if count - len(nos) > len(missing) else ''} (given: {names})")
    return [nos[i] for i in range(count)]


def _check_foreign(first: GGUFPart, parts: list[GGUFPart]) -> None:
    """Every part must agree with ``first`` on split.count, split.tensors.count and name prefix."""
    m0 = SPLIT_NAME.match(first.source.name)
    for p in parts:
        for key in (KEY_SPLIT_COUNT, KEY_SPLIT_TENSORS_COUNT):
            if _split_int(p, key) != _split_int(first, key):
                raise GGUFError(f"{p.source.name}: foreign part: {key} is {_split_int(p, key)}, "
                                f"but {_split_int(first, key)} in {first.source.name}")
        m = SPLIT_NAME.match(p.source.name)
        if m0 and m and m["prefix"] != m0["prefix"]:
            raise GGUFError(f"{p.source.name}: foreign part: its name does not start with "
                            f"{m0['prefix']!r} like {first.source.name}")


def _describe_missing(first: GGUFPart, missing: list[int], count: int) -> str:
    m = SPLIT_NAME.match(first.source.name)
    if m:
        return ", ".join(f"{m['prefix']}-{i + 1:05d}-of-{count:05d}.gguf" for i in missing)
    return ", ".join(f"split.no {i}" for i in missing)


# ---------------------------------------------------------------------------
# The model file (one file or all parts of a split model)
# ---------------------------------------------------------------------------

class GGUFFile:
    """An opened GGUF model: one file, or every part of a split model in order.

    Attributes (part 0's for a split model): ``version``, ``alignment``,
    ``data_offset``, ``byte_order`` (always ``"little"``), ``n_kv``,
    ``metadata`` (key -> int/float/bool/str/list, in file order),
    ``value_types`` (key -> ``"UINT32"``, ``"ARRAY[STRING]"``, ...),
    ``sections``; and over all parts ``tensors`` (name -> :class:`TensorInfo`,
    file order), ``parts``, ``file_size`` (bytes, all parts).
    """

    byte_order = "little"

    def __init__(self, parts: list[GGUFPart], owned: Iterable[Any] = ()):
        self.parts = parts
        self._owned = list(owned)
        p0 = parts[0]
        self.version, self.alignment, self.data_offset = p0.version, p0.alignment, p0.data_offset
        self.n_kv, self.metadata, self.value_types = p0.n_kv, p0.metadata, p0.value_types
        self.sections = p0.sections
        self.file_size = sum(p.source.size for p in parts)
        self.name = p0.source.name
        self.tensors: dict[str, TensorInfo] = {}
        for p in parts:
            for name, t in p.tensors.items():
                if name in self.tensors:
                    raise GGUFError(f"{p.source.name}: tensor {name!r} is also in "
                                    f"{parts[self.tensors[name].part].source.name}")
                self.tensors[name] = t
        expected = _split_int(p0, KEY_SPLIT_TENSORS_COUNT)
        if expected is not None and expected != len(self.tensors):
            raise GGUFError(f"{p0.source.name}: key {KEY_SPLIT_TENSORS_COUNT!r}: the split model "
                            f"should hold {expected} tensors, its {len(parts)} part(s) hold "
                            f"{len(self.tensors)}")

    def _info(self, name: str) -> TensorInfo:
        t = self.tensors.get(name)
        if t is None:
            raise GGUFError(f"{self.name}: no tensor named {name!r}")
        return t

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw blocks of tensor ``name``: uint8 ``(n_bytes,)``, read-only, read in one call."""
        t = self._info(name)
        src = self.parts[t.part].source
        data = src.read(t.offset, t.n_bytes)
        if len(data) != t.n_bytes:
            raise GGUFError(f"{src.name}: byte {t.offset}: tensor {name!r}: read {len(data)} of "
                            f"{t.n_bytes} bytes (the file changed or was truncated)")
        return np.frombuffer(data, dtype=np.uint8)

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` dequantized to float32, shape ``reversed(ne)``.

        A weight of ``ne = (n_in, n_out)`` reads as ``(n_out, n_in)``, rows
        contiguous. Types :mod:`pyengine.quants` cannot dequantize raise
        :class:`GGUFError` naming the type and tensor.
        """
        from pyengine import quants

        t = self._info(name)
        try:
            x = quants.dequantize(self.tensor_bytes(name), t.type, t.n_elements, name=name)  # (n_elements,)
        except GGUFError as e:  # quants names the tensor and type; add the file and byte
            raise GGUFError(f"{self.parts[t.part].source.name}: byte {t.offset}: {e}") from None
        return x.reshape(tuple(reversed(t.shape)))  # (ne[3], ne[2], ne[1], ne[0])

    def close(self) -> None:
        """Close the files this object opened (sources passed in stay open)."""
        for src in self._owned:
            src.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_source(x: Any) -> bool:
    return hasattr(x, "read") and hasattr(x, "size") and hasattr(x, "name")


def open_gguf(paths_or_sources: Any) -> GGUFFile:
    """Open one GGUF file, or every part of a split model given in any order.

    ``paths_or_sources``: a path, a byte source (see :mod:`pyengine.source`),
    bytes, or a list of those. Only the headers are read here: a few
    large reads per file. Raises :class:`GGUFError` for malformed, hostile or
    mismatched files, naming the file and byte offset; ``OSError`` if a path
    cannot be opened.
    """
    one = (str, bytes, bytearray, memoryview, os.PathLike)
    items = [paths_or_sources] if _is_source(paths_or_sources) or isinstance(
        paths_or_sources, one) else list(paths_or_sources)
    if not items:
        raise GGUFError("no GGUF file given")
    owned: list[Any] = []
    try:
        sources = []
        for x in items:
            if isinstance(x, (bytes, bytearray, memoryview)):
                x = BytesSource(x)
            elif not _is_source(x):
                x = FileSource(x)
                owned.append(x)
            sources.append(x)
        parts = _order_split([read_part(s) for s in sources])
        for i, p in enumerate(parts):
            p.index = i
            p.tensors = {n: t._replace(part=i) for n, t in p.tensors.items()}
        return GGUFFile(parts, owned)
    except BaseException:
        for src in owned:
            src.close()
        raise
