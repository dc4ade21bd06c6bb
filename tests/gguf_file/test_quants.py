"""Dequantization, bit-exact against gguf-py's ``gguf.quants.dequantize`` (the oracle).

Float32 results are compared as their uint32 bit patterns (so -0.0 != 0.0),
NaN-aware: a NaN must be a NaN in both, whatever its payload.
"""

from __future__ import annotations

import tracemalloc

import gguf
import numpy as np
import pytest
from gguf_oracle import reader

from pyengine.errors import GGUFError
from pyengine.gguf import quants
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME

QUANTIZED = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]
GGUF_QUANTIZES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"]  # gguf.quants.quantize supports these

# Byte offsets of the f16 scale fields in each block (ggml-common.h).
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}


def assert_same_bits(got: np.ndarray, ref: np.ndarray) -> None:
    """float32 arrays equal bit for bit, except that any NaN matches any NaN."""
    got = np.asarray(got).reshape(-1)
    ref = np.asarray(ref, np.float32).reshape(-1)
    assert got.dtype == np.float32 and got.shape == ref.shape
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan)
    bad = np.flatnonzero(got.view(np.uint32)[~nan] != ref.view(np.uint32)[~nan])
    assert bad.size == 0, f"{bad.size} weights differ, first at {bad[0]}: {got[~nan][bad[0]]} vs {ref[~nan][bad[0]]}"


def oracle(raw: np.ndarray, type_name: str) -> np.ndarray:
    with np.errstate(all="ignore"):  # inf/NaN scales in the any-bytes test
        return gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[type_name])


def random_blocks(type_name: str, n_blocks: int, rng: np.random.Generator, finite: bool = True) -> np.ndarray:
    """(n_blocks * type_size,) random bytes; with ``finite``, every f16 scale a finite normal value."""
    t = GGML_TYPES_BY_NAME[type_name]
    raw = rng.integers(0, 256, (n_blocks, t.type_size), dtype=np.uint8)
    if finite:
        for at in F16_FIELDS[type_name]:
            scale = rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-6, 3, n_blocks)
            raw[:, at:at + 2] = scale.astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def dequantize(raw, type_name: str, **kw) -> np.ndarray:
    t = GGML_TYPES_BY_NAME[type_name]
    n_bytes = raw.size if isinstance(raw, np.ndarray) else len(raw)
    return quants.dequantize(raw, t, n_bytes // t.type_size * t.block_size, **kw)


# --- every listed type, random blocks ---------------------------------------

@pytest.mark.parametrize("type_name", QUANTIZED)
@pytest.mark.parametrize("n_blocks", [1, 3, 100])
def test_random_blocks_bit_exact(type_name, n_blocks):
    raw = random_blocks(type_name, n_blocks, np.random.default_rng(n_blocks))
    got = dequantize(raw, type_name)
    assert got.shape == (n_blocks * GGML_TYPES_BY_NAME[type_name].block_size,)
    assert np.isfinite(got).all()
    assert np.count_nonzero(got) > got.size // 2  # the test really sees weights
    assert_same_bits(got, oracle(raw.reshape(n_blocks, -1), type_name))


@pytest.mark.parametrize("type_name", QUANTIZED)
def test_any_bytes_bit_exact(type_name):
    """Every byte random, scales too: subnormal, infinite and NaN scales give what gguf gives."""
    raw = random_blocks(type_name, 300, np.random.default_rng(7), finite=False)
    assert_same_bits(dequantize(raw, type_name), oracle(raw.reshape(300, -1), type_name))


@pytest.mark.parametrize("type_name", QUANTIZED)
def test_across_chunks(type_name, monkeypatch):
    """Blocks split over several chunks (and a short last one) give the same weights."""
    t = GGML_TYPES_BY_NAME[type_name]
    raw = random_blocks(type_name, 23, np.random.default_rng(1))
    whole = dequantize(raw, type_name)
    monkeypatch.setattr(quants, "CHUNK_ELEMENTS", 5 * t.block_size)
    assert_same_bits(dequantize(raw, type_name), whole)
    monkeypatch.setattr(quants, "CHUNK_ELEMENTS", 1)  # one block per step
    assert_same_bits(dequantize(raw, type_name), whole)


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_K"])
def test_many_blocks_default_chunks(type_name):
    """Past several default chunks (8192 Q8_0 blocks, 1024 K blocks per chunk)."""
    n_blocks = 3 * quants.CHUNK_ELEMENTS // GGML_TYPES_BY_NAME[type_name].block_size + 5
    raw = random_blocks(type_name, n_blocks, np.random.default_rng(3))
    assert_same_bits(dequantize(raw, type_name), oracle(raw.reshape(n_blocks, -1), type_name))


@pytest.mark.parametrize("type_name", GGUF_QUANTIZES)
def test_quantized_by_gguf_bit_exact(type_name):
    """Blocks as gguf-py's quantizer writes them, from weights of several magnitudes."""
    rng = np.random.default_rng(11)
    weights = (rng.standard_normal((64, 256)) * np.logspace(-4, 1, 64)[:, None]).astype(np.float32)
    raw = gguf.quants.quantize(weights, gguf.GGMLQuantizationType[type_name])  # (64, bytes per row)
    got = dequantize(raw.reshape(-1), type_name).reshape(64, 256)
    assert_same_bits(got, oracle(raw, type_name))
    assert np.abs(got - weights).max() < 0.2 * np.abs(weights).max()  # and it is the weights, roughly


def test_known_values():
    """A hand-made Q4_0 and Q8_0 block: ggml's formulas, written out."""
    d = np.array([0.5], np.float16).view(np.uint8)
    qs = np.arange(16, dtype=np.uint8) * 17  # byte j = (j << 4) | j
    got = dequantize(np.concatenate([d, qs]), "Q4_0")
    expected = 0.5 * (np.concatenate([np.arange(16), np.arange(16)]) - 8)
    assert np.array_equal(got, expected.astype(np.float32))
    q8 = np.arange(-16, 16, dtype=np.int8).view(np.uint8)
    got = dequantize(np.concatenate([np.array([-0.25], np.float16).view(np.uint8), q8]), "Q8_0")
    assert np.array_equal(got, (-0.25 * np.arange(-16, 16)).astype(np.float32))


# --- plain types --------------------------------------------------------------

def test_f32_is_copied_bit_for_bit():
    raw = np.random.default_rng(0).integers(0, 256, 4 * 1000, dtype=np.uint8)  # NaN payloads included
    got = dequantize(raw, "F32")
    assert np.array_equal(got.view(np.uint8), raw)


@pytest.mark.parametrize("type_name", ["F16", "BF16"])
def test_half_types_bit_exact(type_name):
    raw = np.random.default_rng(0).integers(0, 256, 2 * 5000, dtype=np.uint8)
    assert_same_bits(dequantize(raw, type_name), oracle(raw, type_name))


@pytest.mark.parametrize("type_name, dtype", [("I8", "i1"), ("I16", "<i2"), ("I32", "<i4"), ("F64", "<f8")])
def test_plain_types_cast(type_name, dtype):
    values = np.array([0, 1, -1, 127, -128, 3.5, -2.25, 1e6, 123456789], dtype=np.float64)
    if dtype != "<f8":
        values = values[np.abs(values) < np.iinfo(dtype).max].astype(np.int64)
    raw = values.astype(dtype).view(np.uint8)
    assert np.array_equal(dequantize(raw, type_name), values.astype(dtype).astype(np.float32))


# --- the entry point: inputs, outputs, errors -------------------------------

def test_accepts_bytes_and_any_uint8_shape_and_out():
    raw = random_blocks("Q4_K", 4, np.random.default_rng(5))
    ref = dequantize(raw, "Q4_K")
    assert_same_bits(dequantize(raw.tobytes(), "Q4_K"), ref)
    assert_same_bits(dequantize(raw.reshape(4, -1), "Q4_K"), ref)
    out = np.full(1024, np.nan, np.float32)
    assert dequantize(raw, "Q4_K", out=out) is not None
    assert_same_bits(out, ref)


def test_zero_elements():
    got = quants.dequantize(np.zeros(0, np.uint8), GGML_TYPES_BY_NAME["Q6_K"], 0)
    assert got.shape == (0,) and got.dtype == np.float32


@pytest.mark.parametrize("type_name", ["F32", "Q8_0", "Q4_K", "IQ4_XS"])
def test_wrong_byte_length_is_an_error(type_name):
    t = GGML_TYPES_BY_NAME[type_name]
    raw = random_blocks(type_name, 2, np.random.default_rng(0), finite=False)
    for bad in (raw[:-1], np.concatenate([raw, raw[:1]]), raw[:0]):
        with pytest.raises(GGUFError, match=rf"{type_name} data is {bad.size} bytes, expected {2 * t.type_size}"):
            quants.dequantize(bad, t, 2 * t.block_size, name="blk.0.ffn_up.weight")


def test_partial_block_is_an_error():
    t = GGML_TYPES_BY_NAME["Q4_K"]
    with pytest.raises(GGUFError, match=r"'blk.3.attn_q.weight'.*300 elements.*Q4_K blocks of 256"):
        quants.dequantize(np.zeros(144, np.uint8), t, 300, name="blk.3.attn_q.weight")


@pytest.mark.parametrize("type_name", ["IQ2_XXS", "TQ1_0", "Q8_K", "MXFP4", "I64"])
def test_unsupported_type_is_named(type_name):
    t = GGML_TYPES_BY_NAME[type_name]
    raw = np.zeros(t.type_size, np.uint8)
    cannot = rf"tensor 'output.weight': cannot dequantize ggml type {type_name} \(id {t.id}\)"
    with pytest.raises(GGUFError, match=cannot):
        quants.dequantize(raw, t, t.block_size, name="output.weight")
    with pytest.raises(GGUFError, match=rf"^cannot dequantize ggml type {type_name}"):
        quants.dequantize(raw, t, t.block_size)


def test_table_covers_the_listed_types():
    expected = {"F32", "F16", "BF16", "F64", "I8", "I16", "I32", *QUANTIZED}
    assert set(quants.DEQUANTIZERS) == expected
    assert expected <= set(GGML_TYPES_BY_NAME)


@pytest.mark.parametrize("type_name", ["Q8_0", "Q4_K", "Q6_K"])
def test_peak_memory_is_the_output_plus_a_chunk(type_name):
    """Chunking keeps the temporaries to a few MiB whatever the tensor (16 MiB output here)."""
    t = GGML_TYPES_BY_NAME[type_name]
    n_elements = 1 << 22
    raw = np.zeros(n_elements // t.block_size * t.type_size, np.uint8)
    tracemalloc.start()
    try:
        dequantize(raw, type_name)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert 4 * n_elements <= peak < 4 * n_elements + 4 * 2**20


# --- real tensors -----------------------------------------------------------

@pytest.mark.real_model
@pytest.mark.parametrize("model", ["gemma3", "smollm2"])
def test_real_tensors_bit_exact(model, request):
    """A few tensors of each type in each real model, raw bytes from gguf-py's reader."""
    r = reader(request.getfixturevalue(f"{model}_path"))
    seen: dict[str, int] = {}
    for rt in r.tensors:
        name = rt.tensor_type.name
        if seen.get(name, 0) >= 2 or rt.n_elements > 1 << 22:
            continue
        seen[name] = seen.get(name, 0) + 1
        raw = r.data[rt.data_offset:rt.data_offset + rt.n_bytes]
        got = quants.dequantize(raw, GGML_TYPES_BY_NAME[name], int(rt.n_elements), name=rt.name)
        assert_same_bits(got, gguf.quants.dequantize(rt.data, rt.tensor_type))
    expected = {"gemma3": {"F32", "Q8_0", "Q5_0", "Q4_K", "Q6_K"}, "smollm2": {"F32", "Q4_1"}}[model]
    assert expected <= set(seen), seen
