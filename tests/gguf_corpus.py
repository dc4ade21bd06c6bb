"""A corpus of broken GGUF files, each with the error it must give.

``BROKEN`` lists ``(case id, file bytes, regex the GGUFError message must match)``.
Each file is a small valid one with a single fault, built from the pieces in
:mod:`gguf_write`. ``small_file()`` is a valid file whose every proper prefix is
a truncation error (its last tensor ends exactly on the alignment, so there is
no trailing padding to cut).
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from gguf_write import gstr, header, kv, pad, tensor_info, u32, u64

F32, Q4_0 = 0, 2
BIG = 1 << 63
ARCH = kv("general.architecture", "STRING", "llama")
T_ARRAY, T_INT8 = 9, 1


def assemble(kvs: list[bytes], infos: list[bytes], data: bytes = b"", *, n_kv: int | None = None,
             n_tensors: int | None = None, version: int = 3, alignment: int = 32,
             magic: bytes = b"GGUF") -> bytes:
    """Raw pieces into a file: header, pairs, infos, padding to ``alignment``, data."""
    head = header(len(infos) if n_tensors is None else n_tensors,
                  len(kvs) if n_kv is None else n_kv, version)
    head = magic + head[4:] + b"".join(kvs) + b"".join(infos)
    return head + bytes(pad(len(head), alignment) - len(head)) + data


def small_file() -> bytes:
    """Valid: a string, a string array, a nested array, an F32 (8, 2) and a Q4_0 (32,) tensor."""
    kvs = [ARCH, kv("a.toks", "ARRAY[STRING]", ["<s>", "ab"]),
           kv("a.nest", "ARRAY[ARRAY[INT8]]", [[1], [2, 3]]), kv("a.f", "FLOAT32", 0.5)]
    w = np.arange(16, dtype="<f4").tobytes()           # 64 bytes
    q = bytes(18) + bytes(14)                           # one Q4_0 block (18 bytes) + pad to 32
    infos = [tensor_info("w", (8, 2), F32, 0), tensor_info("q", (32,), Q4_0, 64)]
    return assemble(kvs, infos, w + q)[:-14]            # the file ends where q ends


def _one_tensor(ne=(8,), type_id=F32, offset=0, n_bytes=32, kvs=(ARCH,), alignment=32) -> bytes:
    return assemble(list(kvs), [tensor_info("t", ne, type_id, offset)], bytes(n_bytes), alignment=alignment)


def _big_endian() -> bytes:
    """A real big-endian file, written by ``gguf.GGUFWriter``."""
    import gguf

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "be.gguf")
        w = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
        w.add_tensor("t", np.ones(4, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        with open(path, "rb") as f:
            return f.read()


def nested(depth: int) -> bytes:
    """A key whose value is ``depth`` arrays, each holding one array, the innermost one int8."""
    body = (u32(T_ARRAY) + u64(1)) * (depth - 1) + u32(T_INT8) + u64(1) + b"\x05"
    return gstr("a.deep") + u32(T_ARRAY) + body


BROKEN: list[tuple[str, bytes, str]] = [
    ("empty_file", b"", r"byte 0: header: magic needs 4 bytes but only 0 are left"),
    ("bad_magic", assemble([ARCH], [], magic=b"GGML"), r"byte 0: header: not a GGUF file: magic b'GGML'"),
    ("version_0", assemble([ARCH], [], version=0),
     r"byte 4: header: GGUF version 0 is not supported \(this reader reads versions 2 and 3\)"),
    ("version_1", assemble([ARCH], [], version=1),
     r"byte 4: header: GGUF version 1 is no longer supported \(this reader reads versions 2 and 3\)"),
    ("version_4", assemble([ARCH], [], version=4),
     r"byte 4: header: GGUF version 4 is not supported \(this reader reads versions 2 and 3\)"),
    ("big_endian", _big_endian(),
     r"byte 4: header: the file is big-endian \(its version reads 3 byte-swapped\); pyengine reads little-endian"),
    ("n_kv_2^63", assemble([ARCH], [], n_kv=BIG),
     r"byte 24: header: metadata: 9223372036854775808 items of at least 13 bytes cannot fit"),
    ("n_tensors_2^63", assemble([ARCH], [], n_tensors=BIG),
     r"tensor infos: 9223372036854775808 items of at least 24 bytes cannot fit"),
    ("n_kv_past_end", assemble([ARCH], [], n_kv=2, alignment=1),
     r"byte \d+: key #1: key length needs 8 bytes but only 0 are left"),
    ("key_length_2^63", assemble([u64(BIG) + b"k"], []),
     r"byte 32: key #0: key needs 9223372036854775808 bytes but only \d+ are left"),
    ("string_length_2^63", assemble([gstr("a.s") + u32(8) + u64(BIG)], []),
     r"key 'a.s': string needs 9223372036854775808 bytes"),
    ("array_count_2^63", assemble([gstr("a.x") + u32(T_ARRAY) + u32(6) + u64(BIG)], []),
     r"key 'a.x': array of FLOAT32: 9223372036854775808 items of at least 4 bytes cannot fit"),
    ("string_array_count_2^63", assemble([gstr("a.x") + u32(T_ARRAY) + u32(8) + u64(BIG)], []),
     r"key 'a.x': array of strings: 9223372036854775808 items of at least 8 bytes"),
    ("nested_array_count_2^63", assemble([gstr("a.x") + u32(T_ARRAY) + u32(T_ARRAY) + u64(BIG)], []),
     r"key 'a.x': array of arrays: 9223372036854775808 items of at least 12 bytes"),
    ("arrays_nested_10000_deep", assemble([nested(10_000)], []), r"key 'a.deep': arrays nested more than 8 deep"),
    ("arrays_nested_9_deep", assemble([nested(9)], []), r"key 'a.deep': arrays nested more than 8 deep"),
    ("unknown_value_type", assemble([gstr("a.x") + u32(13) + u32(0)], []),
     r"byte 35: key 'a.x': unknown GGUF value type 13"),
    ("unknown_array_item_type", assemble([gstr("a.x") + u32(T_ARRAY) + u32(99) + u64(0)], []),
     r"byte 39: key 'a.x': unknown GGUF value type 99"),
    ("empty_key", assemble([kv("", "UINT8", 1)], []), r"byte 24: key #0: empty key"),
    ("duplicate_key", assemble([ARCH, kv("a.x", "UINT8", 1), kv("a.x", "UINT8", 2)], []),
     r"key #2: duplicate key 'a.x' \(first at byte \d+\)"),
    ("alignment_0", assemble([kv("general.alignment", "UINT32", 0)], []),
     r"byte 53: key 'general.alignment': alignment 0 is not a power of two"),
    ("alignment_13", assemble([kv("general.alignment", "UINT32", 13)], []),
     r"byte 53: key 'general.alignment': alignment 13 is not a power of two"),
    ("alignment_int32", assemble([kv("general.alignment", "INT32", 32)], []),
     r"key 'general.alignment': must be a UINT32, not INT32"),
    ("alignment_array", assemble([kv("general.alignment", "ARRAY[UINT32]", [32])], []),
     r"key 'general.alignment': must be a UINT32, not ARRAY\[UINT32\]"),
    ("5_dims", _one_tensor(ne=(1, 1, 1, 1, 8)), r"tensor 't': 5 dimensions \(ggml allows at most 4\)"),
    ("n_dims_2^32-1", _one_tensor(ne=()).replace(gstr("t") + u32(0), gstr("t") + u32(2**32 - 1)),
     r"tensor 't': 4294967295 dimensions"),
    ("dim_2^63", _one_tensor(ne=(8, BIG)), r"tensor 't': dimension 1 is 9223372036854775808, negative as ggml's int64"),
    ("elements_overflow", _one_tensor(ne=(1 << 32, 1 << 31)),
     r"tensor 't': shape \[4294967296, 2147483648\] has 9223372036854775808 elements"),
    ("unknown_type_99", _one_tensor(type_id=99), r"tensor 't': unknown ggml type id 99"),
    ("removed_type_4", _one_tensor(type_id=4), r"tensor 't': unknown ggml type id 4"),
    ("type_2^32-1", _one_tensor(type_id=2**32 - 1), r"tensor 't': unknown ggml type id 4294967295"),
    ("ne0_not_block_multiple", _one_tensor(ne=(33,), type_id=Q4_0),
     r"tensor 't': first dimension 33 is not a multiple of Q4_0's block size 32"),
    ("scalar_q4_0", _one_tensor(ne=(), type_id=Q4_0),
     r"tensor 't': first dimension 1 is not a multiple of Q4_0's block size 32"),
    ("duplicate_tensor", assemble([ARCH], [tensor_info("t", (8,), F32, 0), tensor_info("t", (8,), F32, 32)], bytes(64)),
     r"byte 102: tensor 't': duplicate tensor name \(first at byte 69\)"),
    ("misaligned_tensor", _one_tensor(offset=16, n_bytes=64),
     r"tensor 't': data offset 16 is not a multiple of the alignment 32"),
    ("misaligned_tensor_alignment_64", _one_tensor(offset=32, n_bytes=64, alignment=64,
                                                   kvs=(kv("general.alignment", "UINT32", 64),)),
     r"tensor 't': data offset 32 is not a multiple of the alignment 64"),
    ("overlapping_tensors",
     assemble([ARCH], [tensor_info("a", (16,), F32, 0), tensor_info("b", (8,), F32, 32)], bytes(64)),
     r"tensor 'b': data \[\d+, \d+\) overlaps tensor 'a'"),
    ("same_offset_tensors",
     assemble([ARCH], [tensor_info("a", (8,), F32, 0), tensor_info("b", (8,), F32, 0)], bytes(32)),
     r"overlaps tensor 'a'"),
    ("data_past_eof", _one_tensor(n_bytes=31), r"tensor 't': data \[\d+, \d+\) runs past the end of the file"),
    ("offset_2^62", _one_tensor(offset=1 << 62), r"tensor 't': data \[\d+, \d+\) runs past the end of the file"),
    ("huge_tensor", _one_tensor(ne=(1 << 40,)), r"tensor 't': data \[\d+, 4398046511\d+\) runs past the end"),
    ("value_bytes_cut", assemble([gstr("a.x") + u32(4) + b"\x01\x02"], [], alignment=1),
     r"key 'a.x': UINT32 needs 4 bytes but only 2 are left"),
]
