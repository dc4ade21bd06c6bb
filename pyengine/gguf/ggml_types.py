"""The ggml tensor types: one table of every type id a GGUF file may name.

A quantized tensor is stored as a run of fixed-size *blocks*; each block holds
``block_size`` weights in ``type_size`` bytes. The byte counts below are written
as the sum of the block's fields, in the order of ggml's C structs
(``ggml-common.h``), as gguf-py's ``GGML_QUANT_SIZES`` writes them, so the table
documents the layouts. Ids with no row (4, 5, 31-33, 36-38) were removed from
ggml and are rejected like any unknown id.

Dequantization lives in :mod:`pyengine.gguf.quants`; this module only says what the
types *are*.
"""

from __future__ import annotations

from dataclasses import dataclass

QK_K = 256  # weights per super-block of the K-quants and most IQ types


@dataclass(frozen=True)
class GGMLType:
    id: int           # ggml_type enum value, as stored in a GGUF tensor info
    name: str         # ggml's name, e.g. "Q4_K"
    block_size: int   # weights per block
    type_size: int    # bytes per block

    def n_bytes(self, n_elements: int) -> int:
        """Bytes taken by ``n_elements`` weights (a multiple of ``block_size``)."""
        return n_elements // self.block_size * self.type_size


_ROWS = [
    #  id  name       weights  bytes per block, field by field
    (0,  "F32",      1,       4),
    (1,  "F16",      1,       2),
    (2,  "Q4_0",     32,      2 + 16),                       # d, qs[16] (4-bit)
    (3,  "Q4_1",     32,      2 + 2 + 16),                   # d, m, qs[16]
    (6,  "Q5_0",     32,      2 + 4 + 16),                   # d, qh[4] (5th bits), qs[16]
    (7,  "Q5_1",     32,      2 + 2 + 4 + 16),               # d, m, qh[4], qs[16]
    (8,  "Q8_0",     32,      2 + 32),                       # d, qs[32] (int8)
    (9,  "Q8_1",     32,      4 + 4 + 32),                   # d, s (f32 pair), qs[32]
    (10, "Q2_K",     QK_K,    QK_K // 16 + QK_K // 4 + 2 + 2),  # scales, qs, d, dmin
    (11, "Q3_K",     QK_K,    QK_K // 8 + QK_K // 4 + 12 + 2),  # hmask, qs, scales, d
    (12, "Q4_K",     QK_K,    2 + 2 + 12 + QK_K // 2),       # d, dmin, scales, qs
    (13, "Q5_K",     QK_K,    2 + 2 + 12 + QK_K // 8 + QK_K // 2),  # d, dmin, scales, qh, qs
    (14, "Q6_K",     QK_K,    QK_K // 2 + QK_K // 4 + QK_K // 16 + 2),  # ql, qh, scales, d
    (15, "Q8_K",     QK_K,    4 + QK_K + QK_K // 16 * 2),    # d (f32), qs, bsums[16] (i16)
    (16, "IQ2_XXS",  QK_K,    2 + QK_K // 4),                # d, qs (u16 grid indices + signs)
    (17, "IQ2_XS",   QK_K,    2 + QK_K // 4 + QK_K // 32),   # d, qs, scales
    (18, "IQ3_XXS",  QK_K,    2 + QK_K // 4 + QK_K // 8),    # d, qs (grid + signs)
    (19, "IQ1_S",    QK_K,    2 + QK_K // 8 + QK_K // 16),   # d, qs, qh (u16)
    (20, "IQ4_NL",   32,      2 + 16),                       # d, qs[16] (non-linear 4-bit)
    (21, "IQ3_S",    QK_K,    2 + QK_K // 4 + QK_K // 32 + QK_K // 8 + 4),  # d, qs, qh, signs, scales
    (22, "IQ2_S",    QK_K,    2 + QK_K // 4 + QK_K // 16),   # d, qs (+signs), qh, scales
    (23, "IQ4_XS",   QK_K,    2 + 2 + QK_K // 64 + QK_K // 2),  # d, scales_h, scales_l, qs
    (24, "I8",       1,       1),
    (25, "I16",      1,       2),
    (26, "I32",      1,       4),
    (27, "I64",      1,       8),
    (28, "F64",      1,       8),
    (29, "IQ1_M",    QK_K,    QK_K // 8 + QK_K // 16 + QK_K // 32),  # qs, qh, scales (d packed in)
    (30, "BF16",     1,       2),
    (34, "TQ1_0",    QK_K,    (QK_K - 4 * QK_K // 64) // 5 + QK_K // 64 + 2),  # qs (base-3), qh, d
    (35, "TQ2_0",    QK_K,    QK_K // 4 + 2),                # qs (2-bit), d
    (39, "MXFP4",    32,      1 + 16),                       # e (E8M0 scale), qs[16] (FP4 E2M1)
    (40, "NVFP4",    64,      4 + 32),                       # d[4] (UE4M3 per 16), qs[32] (FP4)
    (41, "Q1_0",     128,     2 + 128 // 8),                 # d, qs (sign bits)
]

GGML_TYPES: dict[int, GGMLType] = {row[0]: GGMLType(*row) for row in _ROWS}
GGML_TYPES_BY_NAME: dict[str, GGMLType] = {t.name: t for t in GGML_TYPES.values()}
