"""Dequantization: the raw blocks of a ggml tensor to float32 weights.

A quantized tensor is a run of blocks (see :mod:`pyengine.gguf.ggml_types`); a block of
``type_size`` bytes holds ``block_size`` weights. Each dequantizer below takes
the blocks as a ``(n_blocks, type_size)`` uint8 array, slices it field by field
in the order of ggml's C struct (``ggml-common.h``), and writes the weights into
a ``(n_blocks, block_size)`` float32 array. The bit layout of each block is
drawn in its function's docstring; the math is ggml's ``dequantize_row_*``
(``ggml-quants.c``) and the results are bit-exact with ``gguf.quants.dequantize``:
scales are f16 converted to float32 first, each product or difference is one
float32 operation in the same order as gguf-py's, and integer codes become
float32 exactly.

Each quantized type is one ``codes_<type>`` function that slices the blocks
into their integer codes and per-sub-block scales (:class:`Codes`, the table
:data:`QUANT_CODES`); dequantizing multiplies them out. The weight forms that
keep a type's own codes (``pyengine.weights``) start from the same functions.

The work is vectorized over blocks (no Python loop per block) and done
:data:`CHUNK_ELEMENTS` weights at a time, so the temporaries stay a few MiB
whatever the tensor: peak memory is the float32 output plus a little. Bit
twiddling is done on uint8 arrays (cheap everywhere); the float32 passes are a
cast, one multiply and at most one add or subtract per weight. Lookup tables
are used only where the codes are non-linear (IQ4): fancy indexing is slow in
Pyodide. ``bench/bench_quants.py`` prints the throughput of each type.

Multi-byte fields are read as little-endian (``'<f2'``, ``'<u2'``, ...): the
reader accepts little-endian GGUF files only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pyengine.errors import GGUFError
from pyengine.gguf.ggml_types import GGMLType

CHUNK_ELEMENTS = 1 << 18  # weights dequantized per step: 1 MiB of float32 output


# ---------------------------------------------------------------------------
# Helpers: fields, f16 scales, bit planes
# ---------------------------------------------------------------------------
# Layouts, chosen for speed (numpy pays per inner loop, most of all in Pyodide):
# - per-block scales are worked on transposed, (k, n_blocks), so their small
#   arithmetic runs in long loops over the blocks;
# - bit fields are unpacked from a contiguous copy of the field into planes,
#   (count, n_blocks, bytes), one whole-array operation per plane;
# - the hot loop, the float32 multiply (and add/subtract) per weight, reads the
#   planes through a transposed view in weight order and writes ``out``.

def _fields(blocks: np.ndarray, *sizes: int) -> list[np.ndarray]:
    """Split (n, type_size) blocks into column views of the given byte sizes, in struct order."""
    assert sum(sizes) == blocks.shape[1], (sizes, blocks.shape)
    edges = np.cumsum(sizes)[:-1].tolist()
    return np.split(blocks, edges, axis=1)


def _f16(field: np.ndarray) -> np.ndarray:
    """(n, 2) uint8 -> (n,) float32: a little-endian f16 per block, converted exactly."""
    return field.view("<f2").astype(np.float32).reshape(len(field))


def _per_block(field: np.ndarray) -> np.ndarray:
    """(n, k) uint8 -> (k, n) uint8 contiguous: a per-block field, blocks innermost."""
    return np.ascontiguousarray(field.T)


def _planes(x: np.ndarray, bits: int, count: int) -> np.ndarray:
    """Unpack ``count`` fields of ``bits`` bits from each element of x, lowest bits first.

    x (...) unsigned -> (count, ...) contiguous, plane k = (x >> (bits * k)) & mask.
    Nibbles are ``_planes(x, 4, 2)``, 2-bit codes ``_planes(x, 2, 4)``, single
    bits ``_planes(x, 1, 8)``.
    """
    x = np.ascontiguousarray(x)
    mask = (1 << bits) - 1
    q = np.empty((count,) + x.shape, x.dtype)
    np.bitwise_and(x, mask, out=q[0])
    for k in range(1, count):
        np.right_shift(x, bits * k, out=q[k])
    masked = count if bits * count < 8 * x.itemsize else count - 1  # the top plane may need no mask
    np.bitwise_and(q[1:masked], mask, out=q[1:masked])
    return q


def _offset(q: np.ndarray, zero: int) -> np.ndarray:
    """uint8 codes q (in place) -> int8 q - zero, for the symmetric types."""
    np.subtract(q, zero, out=q)  # wraps modulo 256; the int8 view reads it signed
    return q.view(np.int8)


def _put_high(q: np.ndarray, high: np.ndarray, shift: int) -> None:
    """q |= high << shift, in place (high is modified): add the high bits to low codes."""
    np.left_shift(high, shift, out=high)
    np.bitwise_or(q, high, out=q)


class Codes(NamedTuple):
    """A run of blocks as stored, not multiplied out: ``w = q * scale - minus + plus``.

    ``q`` integer codes in weight order (a view, shaped like the blocks' weights
    with one more axis or more; the last axis runs within one scale's
    sub-block): int8 for the symmetric types (``q - zero`` already taken),
    uint8 for the types with a min; ``scale``, ``minus``, ``plus`` float32, one
    per sub-block, shaped as ``q`` without its last axis (or broadcasting to it).
    """
    q: np.ndarray
    scale: np.ndarray
    minus: np.ndarray | None = None
    plus: np.ndarray | None = None


def _scale(out: np.ndarray, q: np.ndarray, scale: np.ndarray,
           minus: np.ndarray | None = None, plus: np.ndarray | None = None) -> None:
    """The hot loop: out = q * scale - minus (or + plus), in float32, as gguf-py rounds it.

    out (n, ..., L) float32; q (n, ..., L) integer codes, any strides (a view in
    weight order); scale, minus, plus (n, ...) float32, one per block or
    sub-block, broadcast over its L weights. The codes are cast first (exact),
    then each float operation is one pass over ``out`` in place.
    """
    np.copyto(out, q)
    np.multiply(out, scale[..., None], out=out)
    if minus is not None:
        np.subtract(out, minus[..., None], out=out)
    if plus is not None:
        np.add(out, plus[..., None], out=out)


# ---------------------------------------------------------------------------
# Plain types: a cast per element
# ---------------------------------------------------------------------------

def _plain(dtype: str) -> Callable[[np.ndarray, np.ndarray], None]:
    """Dequantizer for an unquantized type: each element is one little-endian ``dtype``."""
    def dequantize_plain(blocks: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, blocks.view(dtype))  # (n, 1) -> (n, 1) float32 (exact for F32/F16, rounded for F64/I32)
    dequantize_plain.__name__ = f"dequantize_{dtype}"
    return dequantize_plain


def dequantize_bf16(blocks: np.ndarray, out: np.ndarray) -> None:
    """BF16: the top 16 bits of a float32 (ggml ``ggml_bf16_to_fp32``): shift left by 16."""
    np.left_shift(blocks.view("<u2"), 16, out=out.view(np.uint32), dtype=np.uint32)


# ---------------------------------------------------------------------------
# 32-weight blocks: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
# ---------------------------------------------------------------------------
# Weights 0..15 of a 4-bit block are the low nibbles of qs[0..15], weights
# 16..31 the high nibbles:  qs[j] = hhhhllll -> w[j] = llll, w[j + 16] = hhhh.
# The 5-bit types add qh (32 bits, little-endian): bit i is bit 4 of w[i].

def _q4_codes(qs: np.ndarray) -> np.ndarray:
    """qs (n, 16) -> (n, 2, 16) uint8 codes in weight order (a view of the nibble planes)."""
    return _planes(qs, 4, 2).transpose(1, 0, 2)


def _q5_codes(qh: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """qh (n, 4), qs (n, 16) -> (n, 2, 16) uint8 5-bit codes in weight order."""
    q = _q4_codes(qs)                                                     # bits 0-3
    qh = _per_block(qh.view("<u2")).view(np.uint8)                        # (2, 2n): qh of w 0..15, w 16..31
    h = np.unpackbits(qh.reshape(-1), bitorder="little").reshape(2, -1, 16)  # (2, n, 16) bit 4
    _put_high(q, h.transpose(1, 0, 2), 4)
    return q


def codes_q4_0(blocks: np.ndarray) -> Codes:
    """Q4_0 block (18 bytes): d f16 | qs[16] nibbles.  w = d * (q - 8).

    ggml ``dequantize_row_q4_0``.
    """
    d, qs = _fields(blocks, 2, 16)
    return Codes(_offset(_q4_codes(qs), 8), _f16(d)[:, None])


def codes_q4_1(blocks: np.ndarray) -> Codes:
    """Q4_1 block (20 bytes): d f16 | m f16 | qs[16] nibbles.  w = d * q + m.

    ggml ``dequantize_row_q4_1``.
    """
    d, m, qs = _fields(blocks, 2, 2, 16)
    return Codes(_q4_codes(qs), _f16(d)[:, None], plus=_f16(m)[:, None])


def codes_q5_0(blocks: np.ndarray) -> Codes:
    """Q5_0 block (22 bytes): d f16 | qh[4] (bit 4 of each weight) | qs[16] nibbles.  w = d * (q - 16).

    ggml ``dequantize_row_q5_0``.
    """
    d, qh, qs = _fields(blocks, 2, 4, 16)
    return Codes(_offset(_q5_codes(qh, qs), 16), _f16(d)[:, None])


def codes_q5_1(blocks: np.ndarray) -> Codes:
    """Q5_1 block (24 bytes): d f16 | m f16 | qh[4] | qs[16] nibbles.  w = d * q + m.

    ggml ``dequantize_row_q5_1``.
    """
    d, m, qh, qs = _fields(blocks, 2, 2, 4, 16)
    return Codes(_q5_codes(qh, qs), _f16(d)[:, None], plus=_f16(m)[:, None])


def codes_q8_0(blocks: np.ndarray) -> Codes:
    """Q8_0 block (34 bytes): d f16 | qs[32] int8.  w = d * q.

    ggml ``dequantize_row_q8_0``.
    """
    d, qs = _fields(blocks, 2, 32)
    return Codes(qs.view(np.int8), _f16(d))  # (n, 32) * (n,)


# ---------------------------------------------------------------------------
# K-quants: 256-weight super-blocks of 16 or 8 sub-blocks with their own scales
# ---------------------------------------------------------------------------

def _scale_min_k4(scales: np.ndarray) -> np.ndarray:
    """The 8 six-bit scales and 8 six-bit mins of Q4_K/Q5_K (ggml ``get_scale_min_k4``).

    scales (12, n) uint8, blocks innermost -> (2, 8, n) uint8: [0] scales, [1] mins.

        byte  0..3   EEaaaaaa   a = scale 0..3,  EE = bits 4-5 of scale 4..7
        byte  4..7   FFbbbbbb   b = min 0..3,    FF = bits 4-5 of min 4..7
        byte  8..11  ffffeeee   eeee = bits 0-3 of scale 4..7, ffff = of min 4..7
    """
    a, b, c = scales[0:4], scales[4:8], scales[8:12]  # (4, n) each
    sm = np.empty((2, 8, scales.shape[1]), np.uint8)
    np.bitwise_and(a, 63, out=sm[0, :4])
    np.bitwise_and(b, 63, out=sm[1, :4])
    sm[0, 4:] = (c & 15) | ((a >> 6) << 4)
    sm[1, 4:] = (c >> 4) | ((b >> 6) << 4)
    return sm


def codes_q2_k(blocks: np.ndarray) -> Codes:
    """Q2_K block (84 bytes): scales[16] | qs[64] | d f16 | dmin f16.

    scales[i] = mmmmssss for sub-block i of 16 weights: w = (d * s) * q - (dmin * m).
    qs: 2 halves of 32 bytes; 2-bit field k (bits 2k..2k+1) of byte l of half h is
    weight 128h + 32k + l.  ggml ``dequantize_row_q2_K``.
    """
    n = len(blocks)
    scales, qs, d, dmin = _fields(blocks, 16, 64, 2, 2)
    sm = _planes(_per_block(scales), 4, 2)        # (2, 16, n): [0] scales, [1] mins
    dl = _f16(d) * sm[0]                          # (16, n) float32
    ml = _f16(dmin) * sm[1]                       # (16, n) float32
    q = _planes(qs, 2, 4).reshape(4, n, 2, 2, 16)  # (k, n, h, l // 16, l % 16)
    return Codes(q.transpose(1, 2, 0, 3, 4), dl.T.reshape(n, 2, 4, 2), minus=ml.T.reshape(n, 2, 4, 2))


def codes_q3_k(blocks: np.ndarray) -> Codes:
    """Q3_K block (110 bytes): hmask[32] | qs[64] | scales[12] | d f16.

    Weight 128h + 32k + l (half h, field k, byte l): bits 0-1 are field k of
    qs[32h + l]; bit 2 is bit 4h + k of hmask[l]; q = that 3-bit code - 4.
    16 six-bit scales s (offset by 32), one per 16 weights:

        byte 0..7   hhhhllll   llll = bits 0-3 of scale i, hhhh = of scale i + 8
        byte 8..11  ddccbbaa   bits 4-5 of scale j (aa), j+4 (bb), j+8 (cc), j+12 (dd)

    w = (d * (s - 32)) * q.  ggml ``dequantize_row_q3_K``.
    """
    n = len(blocks)
    hmask, qs, scales, d = _fields(blocks, 32, 64, 12, 2)
    sc = _per_block(scales)                                       # (12, n)
    s = _planes(sc[:8], 4, 2).reshape(16, n)                      # bits 0-3 of scale i
    _put_high(s, _planes(sc[8:], 2, 4).reshape(16, n), 4)         # bits 4-5
    dl = _f16(d) * _offset(s, 32)                                 # (16, n) float32
    q = _planes(qs.reshape(n, 2, 32).transpose(1, 0, 2), 2, 4)    # (k, h, n, l) bits 0-1
    h = _planes(hmask, 1, 8).reshape(2, 4, n, 32)                 # (h, k, n, l) bit 2
    _put_high(q, h.transpose(1, 0, 2, 3), 2)
    q = _offset(q, 4).reshape(4, 2, n, 2, 16)                     # (k, h, n, l // 16, l % 16)
    return Codes(q.transpose(2, 1, 0, 3, 4), dl.T.reshape(n, 2, 4, 2))


def codes_q4_k(blocks: np.ndarray) -> Codes:
    """Q4_K block (144 bytes): d f16 | dmin f16 | scales[12] | qs[128].

    8 sub-blocks of 32 weights with 6-bit scale s and min m (see ``_scale_min_k4``):
    w = (d * s) * q - (dmin * m).  qs: 4 chunks of 32 bytes; chunk c holds
    sub-block 2c in its low nibbles and 2c + 1 in its high nibbles.
    ggml ``dequantize_row_q4_K``.
    """
    n = len(blocks)
    d, dmin, scales, qs = _fields(blocks, 2, 2, 12, 128)
    sm = _scale_min_k4(_per_block(scales))                 # (2, 8, n)
    dl = _f16(d) * sm[0]                                   # (8, n) float32
    ml = _f16(dmin) * sm[1]                                # (8, n) float32
    q = _planes(qs, 4, 2).reshape(2, n, 4, 32)             # (nibble, n, c, l)
    return Codes(q.transpose(1, 2, 0, 3), dl.T.reshape(n, 4, 2), minus=ml.T.reshape(n, 4, 2))


def codes_q5_k(blocks: np.ndarray) -> Codes:
    """Q5_K block (176 bytes): d f16 | dmin f16 | scales[12] | qh[32] | qs[128].

    As Q4_K, plus bit 4 of weight l of sub-block j is bit j of qh[l].
    w = (d * s) * q - (dmin * m).  ggml ``dequantize_row_q5_K``.
    """
    n = len(blocks)
    d, dmin, scales, qh, qs = _fields(blocks, 2, 2, 12, 32, 128)
    sm = _scale_min_k4(_per_block(scales))                        # (2, 8, n)
    dl = _f16(d) * sm[0]                                          # (8, n) float32
    ml = _f16(dmin) * sm[1]                                       # (8, n) float32
    q = _planes(qs.reshape(n, 4, 32).transpose(1, 0, 2), 4, 2)    # (nibble, c, n, l) bits 0-3
    h = _planes(qh, 1, 8).reshape(4, 2, n, 32)                    # (c, nibble, n, l) bit 4
    _put_high(q, h.transpose(1, 0, 2, 3), 4)
    return Codes(q.transpose(2, 1, 0, 3), dl.T.reshape(n, 4, 2), minus=ml.T.reshape(n, 4, 2))


def codes_q6_k(blocks: np.ndarray) -> Codes:
    """Q6_K block (210 bytes): ql[128] | qh[64] | scales[16] int8 | d f16.

    Weight 128h + 32k + l (half h, quarter k = 2i + j, l < 32): bits 0-3 are
    nibble i of ql[64h + 32j + l]; bits 4-5 are field k (bits 2k..2k+1) of
    qh[32h + l]; q = that 6-bit code - 32.  One int8 scale s per 16 weights:
    w = (d * s) * q.  ggml ``dequantize_row_q6_K``.
    """
    n = len(blocks)
    ql, qh, scales, d = _fields(blocks, 128, 64, 16, 2)
    q = _planes(ql.reshape(n, 2, 2, 32).transpose(2, 0, 1, 3), 4, 2)  # (i, j, n, h, l) bits 0-3
    _put_high(q, _planes(qh, 2, 4).reshape(2, 2, n, 2, 32), 4)        # (i, j, n, h, l) bits 4-5
    dl = _f16(d) * _per_block(scales).view(np.int8)                   # (16, n) float32
    q = _offset(q, 32).reshape(2, 2, n, 2, 2, 16)                     # (i, j, n, h, l // 16, l % 16)
    return Codes(q.transpose(2, 3, 0, 1, 4, 5), dl.T.reshape(n, 2, 2, 2, 2))


# ---------------------------------------------------------------------------
# IQ4: 4-bit indices into a non-linear table of int8 values
# ---------------------------------------------------------------------------

IQ4_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)  # ggml kvalues_iq4nl


def _iq4_pair_table() -> np.ndarray:
    """(256,) uint16: for byte b, the int8 pair (value[b & 15], value[b >> 4]) in memory order."""
    values = np.array(IQ4_VALUES, np.int8)
    b = np.arange(256)
    pairs = np.stack([values[b & 15], values[b >> 4]], axis=1)  # (256, 2) int8
    return pairs.view(np.uint16).reshape(256)


_IQ4_PAIRS = _iq4_pair_table()


def _iq4_values(qs: np.ndarray) -> np.ndarray:
    """qs (..., 16) uint8 -> (..., 2, 16) int8 view: [0] values of low nibbles, [1] of high.

    One table lookup per byte gives both of its weights (lookups are the slow part).
    """
    pairs = _IQ4_PAIRS[np.ascontiguousarray(qs)].view(np.int8)  # (..., 32): lo0 hi0 lo1 hi1 ...
    return pairs.reshape(qs.shape + (2,)).swapaxes(-1, -2)


def codes_iq4_nl(blocks: np.ndarray) -> Codes:
    """IQ4_NL block (18 bytes): d f16 | qs[16] nibbles as Q4_0.  w = d * IQ4_VALUES[q].

    ggml ``dequantize_row_iq4_nl``.
    """
    d, qs = _fields(blocks, 2, 16)
    return Codes(_iq4_values(qs), _f16(d)[:, None])


def codes_iq4_xs(blocks: np.ndarray) -> Codes:
    """IQ4_XS block (136 bytes): d f16 | scales_h u16 | scales_l[4] | qs[128].

    8 sub-blocks of 32 weights, each laid out as an IQ4_NL block's qs[16].
    Six-bit scale of sub-block i: bits 0-3 are nibble i % 2 of scales_l[i // 2],
    bits 4-5 are bits 2i..2i+1 of scales_h.  w = (d * (s - 32)) * IQ4_VALUES[q].
    ggml ``dequantize_row_iq4_xs``.
    """
    n = len(blocks)
    d, scales_h, scales_l, qs = _fields(blocks, 2, 2, 4, 128)
    s = _planes(_per_block(scales_l), 4, 2).transpose(1, 0, 2).reshape(8, n)      # bits 0-3
    hi = _planes(_per_block(scales_h.view("<u2")), 2, 8).reshape(8, n)           # bits 4-5
    _put_high(s, hi.astype(np.uint8), 4)
    dl = _f16(d) * _offset(s, 32)                                                # (8, n) float32
    return Codes(_iq4_values(qs.reshape(n, 8, 16)), dl.T[:, :, None])


# ---------------------------------------------------------------------------
# The table, and the entry point
# ---------------------------------------------------------------------------

class CodeType(NamedTuple):
    """How a quantized type's codes come out: ``codes(blocks (n, type_size) uint8) -> Codes``, the bits of
    a code, the weights sharing one scale, and whether it has a min (unsigned codes, ``w = s q - m``)."""
    codes: Callable[[np.ndarray], Codes]
    bits: int
    sub: int
    has_min: bool


QUANT_CODES: dict[str, CodeType] = {
    #                  codes          bits sub  min
    "Q4_0": CodeType(codes_q4_0,      4,  32, False),
    "Q4_1": CodeType(codes_q4_1,      4,  32, True),
    "Q5_0": CodeType(codes_q5_0,      5,  32, False),
    "Q5_1": CodeType(codes_q5_1,      5,  32, True),
    "Q8_0": CodeType(codes_q8_0,      8,  32, False),
    "Q2_K": CodeType(codes_q2_k,      2,  16, True),
    "Q3_K": CodeType(codes_q3_k,      3,  16, False),
    "Q4_K": CodeType(codes_q4_k,      4,  32, True),
    "Q5_K": CodeType(codes_q5_k,      5,  32, True),
    "Q6_K": CodeType(codes_q6_k,      6,  16, False),
    "IQ4_NL": CodeType(codes_iq4_nl,  8,  32, False),   # the table's int8 values, not the 4-bit indices
    "IQ4_XS": CodeType(codes_iq4_xs,  8,  32, False),
}


def _dequantize_codes(codes: Callable[[np.ndarray], Codes]) -> Callable[[np.ndarray, np.ndarray], None]:
    """The dequantizer of a quantized type: its codes multiplied out (``_scale``) into ``out``."""
    def dequantize_codes(blocks: np.ndarray, out: np.ndarray) -> None:
        c = codes(blocks)
        _scale(out.reshape(c.q.shape), *c)
    dequantize_codes.__name__ = codes.__name__.replace("codes_", "dequantize_")
    return dequantize_codes


DEQUANTIZERS: dict[str, Callable[[np.ndarray, np.ndarray], None]] = {
    # ggml type name: fn(blocks (n, type_size) uint8, out (n, block_size) float32)
    "F32": _plain("<f4"),
    "F16": _plain("<f2"),
    "BF16": dequantize_bf16,
    "F64": _plain("<f8"),
    "I8": _plain("i1"),
    "I16": _plain("<i2"),
    "I32": _plain("<i4"),
    **{name: _dequantize_codes(t.codes) for name, t in QUANT_CODES.items()},
}


def dequantizer(ggml_type: GGMLType, name: str | None = None) -> Callable[[np.ndarray, np.ndarray], None]:
    """The dequantizer of ``ggml_type`` (:data:`DEQUANTIZERS`). Raises GGUFError naming the tensor and
    the types supported: a load checks every tensor's type with it before it reads any."""
    fn = DEQUANTIZERS.get(ggml_type.name)
    if fn is None:
        what = f"tensor {name!r}: " if name else ""
        raise GGUFError(f"{what}cannot dequantize ggml type {ggml_type.name} (id {ggml_type.id}); "
                        f"supported types: {', '.join(DEQUANTIZERS)}")
    return fn


def dequantize(blocks: np.ndarray | bytes, ggml_type: GGMLType, n_elements: int,
               name: str | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """Dequantize the raw bytes of a tensor to float32.

    blocks: uint8 array (any shape, read flat) or bytes-like, exactly
        ``n_elements // block_size * type_size`` bytes of ``ggml_type`` blocks.
    ggml_type: a row of :data:`pyengine.gguf.ggml_types.GGML_TYPES`.
    n_elements: weights in the tensor, a multiple of ``ggml_type.block_size``.
    name: the tensor's name, for error messages.
    out: optional float32 C-contiguous array of ``n_elements`` to write into.
    Returns: float32 array of shape ``(n_elements,)`` (``out`` flattened, if given).

    Raises GGUFError (naming the tensor and type) for a type with no dequantizer
    here (supported: the keys of :data:`DEQUANTIZERS`), an element count that is
    not whole blocks, or a byte length that does not match.
    The math per type is ggml's ``dequantize_row_<type>``; bit-exact with
    ``gguf.quants.dequantize``.
    """
    fn = dequantizer(ggml_type, name)
    bs = ggml_type.block_size
    src = _blocks(blocks, ggml_type, n_elements, name)                   # (n_blocks, type_size) uint8
    n_blocks = len(src)
    if out is None:
        out = np.empty(n_elements, np.float32)
    elif out.dtype != np.float32 or out.size != n_elements or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of {n_elements} elements")
    dst = out.reshape(n_blocks, bs)
    step = max(1, CHUNK_ELEMENTS // bs)  # blocks per step
    with np.errstate(all="ignore"):  # inf/NaN scales in a hostile file give inf/NaN weights, as in ggml
        for start in range(0, n_blocks, step):
            fn(src[start:start + step], dst[start:start + step])
    return out.reshape(n_elements)


def codes(blocks: np.ndarray | bytes, ggml_type: GGMLType, n_elements: int, name: str | None = None) -> Codes:
    """The stored codes and scales of ``n_elements`` weights of a quantized type (a key of
    :data:`QUANT_CODES`), not multiplied out: see :class:`Codes`. One pass over the blocks, no
    chunking (callers pass a chunk of rows). Raises GGUFError as :func:`dequantize`."""
    if ggml_type.name not in QUANT_CODES:
        raise GGUFError(f"tensor {name!r}: ggml type {ggml_type.name} has no integer codes")
    with np.errstate(all="ignore"):
        return QUANT_CODES[ggml_type.name].codes(_blocks(blocks, ggml_type, n_elements, name))


def _blocks(blocks: np.ndarray | bytes, ggml_type: GGMLType, n_elements: int, name: str | None) -> np.ndarray:
    """The raw bytes as (n_blocks, type_size) uint8, checked against ``n_elements`` of ``ggml_type``."""
    what = f"tensor {name!r}: " if name else ""
    bs, ts = ggml_type.block_size, ggml_type.type_size
    if n_elements < 0 or n_elements % bs:
        raise GGUFError(f"{what}{n_elements} elements is not a whole number of "
                        f"{ggml_type.name} blocks of {bs}")
    raw = np.frombuffer(blocks, np.uint8) if not isinstance(blocks, np.ndarray) else blocks.reshape(-1)
    if raw.dtype != np.uint8:
        raise TypeError(f"blocks must be uint8, not {raw.dtype}")
    n_blocks = n_elements // bs
    if raw.size != n_blocks * ts:
        raise GGUFError(f"{what}{ggml_type.name} data is {raw.size} bytes, expected {n_blocks * ts} "
                        f"({n_elements} elements = {n_blocks} blocks of {ts} bytes)")
    return raw.reshape(n_blocks, ts)
