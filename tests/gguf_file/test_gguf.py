"""The GGUF reader on synthetic files: values, layout, tensors, read counts."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
from gguf_write import gguf_bytes, kv, u32

from pyengine.errors import GGUFError
from pyengine.gguf import open_gguf
from pyengine.gguf.cursor import FIRST_CHUNK
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME
from pyengine.gguf.header import VALUE_TYPES
from pyengine.gguf.source import BytesSource, FileSource
from pyengine.inspect import plain

F32, F16 = GGML_TYPES_BY_NAME["F32"].id, GGML_TYPES_BY_NAME["F16"].id
DTYPES = {name: dtype for name, _, dtype in VALUE_TYPES.values() if dtype}  # "FLOAT32" -> "<f4" ...

# One value of each of the 13 types (ARRAY four ways).
VALUES = [
    ("t.u8", "UINT8", 255),
    ("t.i8", "INT8", -128),
    ("t.u16", "UINT16", 65535),
    ("t.i16", "INT16", -32768),
    ("t.u32", "UINT32", 4294967295),
    ("t.i32", "INT32", -2147483648),
    ("t.f32", "FLOAT32", 0.1),            # read back as float32(0.1) widened
    ("t.bool", "BOOL", True),
    ("t.str", "STRING", "héllo ▁wörld 🦙"),
    ("t.u64", "UINT64", 2**64 - 1),
    ("t.i64", "INT64", -(2**63)),
    ("t.f64", "FLOAT64", -1e300),
    ("t.arr_f32", "ARRAY[FLOAT32]", [0.5, -2.25, 1e-3]),
    ("t.arr_str", "ARRAY[STRING]", ["", "a", "<0x0A>", "ü"]),
    ("t.arr_bool", "ARRAY[BOOL]", [True, False, True]),
    ("t.arr_nested", "ARRAY[ARRAY[INT16]]", [[1, -2], [], [3]]),
    ("t.arr_empty", "ARRAY[UINT64]", []),
]


def check_value(got, vtype: str, value) -> None:
    """``got`` (read back) is ``value`` written as ``vtype``: arrays of numbers as numpy arrays."""
    item = vtype[len("ARRAY["):-1]
    if vtype == "FLOAT32":
        assert type(got) is float and got == float(np.float32(value))
    elif vtype.startswith("ARRAY[ARRAY["):
        assert type(got) is list
        for g, v in zip(got, value, strict=True):
            check_value(g, item, v)
    elif vtype == "ARRAY[STRING]":
        assert type(got) is list and got == value
    elif vtype.startswith("ARRAY["):
        dtype = np.dtype(DTYPES[item])
        assert isinstance(got, np.ndarray) and got.dtype == dtype and got.ndim == 1
        assert got.tolist() == np.array(value, dtype).tolist()
    else:
        assert type(got) is type(value) and got == value


def test_every_value_type_round_trips():
    g = open_gguf(BytesSource(gguf_bytes(VALUES, []), "values.gguf"))
    assert list(g.metadata) == [k for k, _, _ in VALUES]
    for key, vtype, value in VALUES:
        assert g.value_types[key] == vtype, key
        check_value(g.metadata[key], vtype, value)
    assert g.metadata["t.f32"] == 0.10000000149011612
    assert g.n_kv == len(VALUES) and g.tensors == {}


def test_values_written_by_gguf_writer(tmp_path):
    path = tmp_path / "w.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_uint8("a.u8", 7)
    w.add_int64("a.i64", -5)
    w.add_float64("a.f64", math.pi)
    w.add_bool("a.bool", False)
    w.add_array("a.tokens", ["<s>", "</s>", "▁the"])
    w.add_array("a.scores", [0.0, -1.5, -2.5])
    w.add_array("a.types", [1, 3, 1])
    w.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with open_gguf(path) as g:
        assert {k: plain(v) for k, v in g.metadata.items()} == {
            "general.architecture": "llama", "a.u8": 7, "a.i64": -5, "a.f64": math.pi, "a.bool": False,
            "a.tokens": ["<s>", "</s>", "▁the"], "a.scores": [0.0, -1.5, -2.5], "a.types": [1, 3, 1]}
        assert g.value_types["a.types"] == "ARRAY[INT32]" and g.metadata["a.types"].dtype == np.int32
        assert g.value_types["a.scores"] == "ARRAY[FLOAT32]" and g.metadata["a.scores"].dtype == np.float32
        t = g.tensors["w"]
        assert (t.shape, t.type.name, t.n_bytes, t.n_elements) == ((4, 3), "F32", 48, 12)
        assert np.array_equal(np.frombuffer(g.tensor_bytes("w"), "<f4"), np.arange(12))


def test_invalid_utf8_survives_as_surrogates():
    g = open_gguf(gguf_bytes([("k", "STRING", b"ab\xff\xfe")], []))
    assert g.metadata["k"] == "ab\udcff\udcfe"
    assert g.metadata["k"].encode("utf-8", "surrogateescape") == b"ab\xff\xfe"


def _two_tensor_file(alignment: int = 32, version: int = 3) -> bytes:
    w = np.arange(6, dtype="<f4")                       # ne (3, 2): 2 rows of 3
    h = np.array([1.5, -2.0, 0.25, 65504], dtype="<f2")  # ne (4,)
    kvs = [("general.architecture", "STRING", "llama")]
    if alignment != 32:
        kvs.append(("general.alignment", "UINT32", alignment))
    return gguf_bytes(kvs, [("w", (3, 2), F32, w.tobytes()), ("h", (4,), F16, h.tobytes())],
                      alignment=alignment, version=version)


@pytest.mark.parametrize("alignment", [32, 64, 1])
def test_layout_and_tensor_infos(alignment):
    data = _two_tensor_file(alignment)
    g = open_gguf(BytesSource(data, "two.gguf"))
    assert (g.version, g.alignment, g.byte_order) == (3, alignment, "little")
    assert g.data_offset % alignment == 0
    names = [s.name for s in g.sections]
    assert names == ["magic", "header", "metadata", "tensor_infos", "tensor_data"]
    assert [s[1:] for s in g.sections[:2]] == [(0, 4), (4, 24)]
    for a, b in zip(g.sections[:3], g.sections[1:4]):
        assert a.end == b.start
    assert g.sections[3].end <= g.data_offset < g.sections[3].end + alignment
    assert g.sections[4] == ("tensor_data", g.data_offset, len(data))
    w, h = g.tensors["w"], g.tensors["h"]
    assert (w.name, w.shape, w.type.name, w.offset, w.n_bytes, w.part) == ("w", (3, 2), "F32", g.data_offset, 24, 0)
    assert (h.shape, h.type.name, h.n_bytes) == ((4,), "F16", 8)
    assert h.offset == g.data_offset + max(24, -(-24 // alignment) * alignment)


def test_version_2_reads_like_3():
    g = open_gguf(_two_tensor_file(version=2))
    assert g.version == 2 and list(g.tensors) == ["w", "h"]


def test_tensor_shape_is_reversed_ne():
    g = open_gguf(_two_tensor_file())
    w = g.tensor("w")
    assert w.dtype == np.float32 and w.shape == (2, 3)
    assert np.array_equal(w, [[0, 1, 2], [3, 4, 5]])
    assert np.array_equal(g.tensor("h"), np.array([1.5, -2.0, 0.25, 65504], dtype=np.float32))


def test_unknown_tensor_name():
    g = open_gguf(BytesSource(_two_tensor_file(), "two.gguf"))
    with pytest.raises(GGUFError, match=r"two.gguf: no tensor named 'nope'"):
        g.tensor_bytes("nope")


def test_type_without_dequantizer_is_named():
    iq2 = GGML_TYPES_BY_NAME["IQ2_XXS"]
    data = gguf_bytes([], [("blk.0.ffn_up.weight", (256, 2), iq2.id, bytes(2 * iq2.type_size))])
    g = open_gguf(BytesSource(data, "iq.gguf"))
    assert g.tensor_bytes("blk.0.ffn_up.weight").size == 132
    with pytest.raises(GGUFError, match=r"^iq\.gguf: byte \d+: tensor 'blk\.0\.ffn_up\.weight': "
                                        r"cannot dequantize ggml type IQ2_XXS"):
        g.tensor("blk.0.ffn_up.weight")


def test_tensor_data_is_one_read_per_tensor():
    src = BytesSource(_two_tensor_file(), "two.gguf")
    g = open_gguf(src)
    assert src.reads == 1  # the whole (small) header in one read
    g.tensor_bytes("w")
    g.tensor_bytes("h")
    assert src.reads == 3


def test_big_header_takes_few_reads():
    """A Gemma-sized vocab (262,144 strings, scores, types: ~6 MB) in a handful of reads."""
    n = 262_144
    tokens = [f"tok{i}" for i in range(n)]
    scores = np.linspace(-1, 0, n, dtype=np.float32).tolist()
    data = gguf_bytes([("tokenizer.ggml.tokens", "ARRAY[STRING]", tokens),
                       ("tokenizer.ggml.scores", "ARRAY[FLOAT32]", scores),
                       ("tokenizer.ggml.token_type", "ARRAY[INT32]", [1] * n)], [])
    assert len(data) > 5 * FIRST_CHUNK
    src = BytesSource(data, "vocab.gguf")
    g = open_gguf(src)
    assert src.reads <= 4  # 1 + 2 + 4 MiB
    assert g.metadata["tokenizer.ggml.tokens"][::65536] == ["tok0", "tok65536", "tok131072", "tok196608"]
    assert g.metadata["tokenizer.ggml.tokens"][-1] == "tok262143"
    assert g.metadata["tokenizer.ggml.scores"].tolist() == scores


def test_strings_across_chunk_boundaries():
    """Strings straddling every refill point come out whole (lengths 0..600 bytes)."""
    tokens = ["x" * (i % 601) for i in range(8000)]  # ~2.4 MB: crosses the 1 MiB and 3 MiB marks
    g = open_gguf(gguf_bytes([("toks", "ARRAY[STRING]", tokens), ("after", "UINT32", 7)], []))
    assert g.metadata["toks"] == tokens and g.metadata["after"] == 7


def test_file_source_and_paths(tmp_path):
    path = tmp_path / "two.gguf"
    path.write_bytes(_two_tensor_file())
    src = FileSource(path)
    g = open_gguf(src)
    assert g.name == "two.gguf" and g.file_size == path.stat().st_size
    g.close()
    assert not src._f.closed  # a source passed in stays open
    src.close()
    g = open_gguf(str(path))
    g.close()
    assert g.parts[0].source._f.closed  # a path opened here is closed


def test_bytes_like_inputs():
    data = _two_tensor_file()
    for x in (data, bytearray(data), memoryview(data), [data]):
        assert list(open_gguf(x).tensors) == ["w", "h"]
    with pytest.raises(GGUFError, match="no GGUF file given"):
        open_gguf([])


def test_key_offsets_point_at_values():
    data = gguf_bytes([("a", "UINT32", 7)], [])
    g = open_gguf(data)
    at = g.parts[0].key_offsets["a"]
    assert data[at:at + 4] == u32(7)
    assert data[24:24 + len(kv("a", "UINT32", 7))] == kv("a", "UINT32", 7)
