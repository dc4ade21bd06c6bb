"""The quantized weight form (pyengine.weights.quantized): each ggml type's own codes and scales in int64 lanes.

Random blocks of every type with integer codes (finite f16 scales), laid out expanded and compact:
- ``rows`` gives the file's weights bit for bit (``gguf.quants.dequantize``, the oracle);
- ``W x`` is the exact integer product of the codes with x rounded as ggml rounds it for that type
  (its vec_dot_type), then scaled: against a float64 product of the dequantized weights with the
  rounded activations (``matmul.round_activations``, which ``ggml_rounding`` uses);
- rows and block-aligned columns read from the middle of a stacked pair equal those rows and columns.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf_file.test_quants import random_blocks

from pyengine.gguf import quants
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME
from pyengine.gguf.header import TensorInfo
from pyengine.weights import quantized
from pyengine.weights.build import Builder, whole
from pyengine.weights.forms import Form
from pyengine.weights.matmul import VEC_DOT_TYPE, absmax, quantize_activations, round_activations
from pyengine.weights.quantized import Layout

TYPES = list(quants.QUANT_CODES)
RNG = np.random.default_rng(7)


class Tensors:
    """A stand-in GGUF: tensors of given types and random blocks, read through ``tensor_bytes``."""

    def __init__(self, specs: dict[str, tuple[str, int, int]]):
        self.tensors, self.raw = {}, {}
        for name, (type_name, n_rows, n_in) in specs.items():
            t = GGML_TYPES_BY_NAME[type_name]
            self.raw[name] = random_blocks(type_name, n_rows * n_in // t.block_size, RNG)
            self.tensors[name] = TensorInfo(name, (n_in, n_rows), t, 0, self.raw[name].size, 0)

    def tensor_bytes(self, name: str) -> np.ndarray:
        return self.raw[name]

    def weights(self, name: str) -> np.ndarray:
        info = self.tensors[name]
        return quants.dequantize(self.raw[name], info.type, info.n_elements).reshape(info.shape[1], info.shape[0])


def reference(w: np.ndarray, x: np.ndarray, type_name: str, plus: np.ndarray | None = None) -> np.ndarray:
    """float64 W x with x rounded as ggml rounds it for ``type_name``: (T, n_out). For the Q8_1 types,
    ``plus`` (n_out, K/32), the rows' mins, meet the sums of x's codes as ggml stores them (``s``, f16)."""
    vdt = VEC_DOT_TYPE[type_name]
    y = round_activations(x, vdt).astype(np.float64) @ w.astype(np.float64).T
    if vdt == "Q8_1":                           # ggml's s: fp16(max|x| / 127 * sum q), not d * sum q
        q, d, _ = quantize_activations(x, vdt)
        xsum = q.reshape(len(x), -1, 32).sum(-1)                                  # (T, K/32)
        d_max = absmax(x.reshape(len(x), -1, 32)) / np.float32(127)
        s = (d_max * xsum.astype(np.float32)).astype(np.float16).astype(np.float64)
        y += (s - d.astype(np.float64) * xsum) @ plus.astype(np.float64).T
    return y


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("type_name", TYPES)
def test_rows_and_product(type_name, compact, monkeypatch):
    n_rows, n_in = 37, 512                                                       # rows: not whole int64 rows
    g = Tensors({"w": (type_name, n_rows, n_in)})
    q = Builder(g).quantized(whole(g, ["w"]), compact=compact)
    bits = quants.QUANT_CODES[type_name].bits
    assert q.layout.phases == (Layout.max_phases(bits) if compact else 1) and q.shape == (n_rows, n_in)
    w = g.weights("w")
    ids = [0, 5, 36, 17, 5]
    assert np.array_equal(q.rows(ids).view(np.uint32), w[ids].view(np.uint32))       # the same bits
    x = RNG.standard_normal((5, n_in)).astype(np.float32)
    c = quants.codes(g.raw["w"], g.tensors["w"].type, n_rows * n_in)
    want = reference(w, x, type_name, None if c.plus is None else c.plus.reshape(n_rows, -1))
    scale = np.abs(want).max()
    np.testing.assert_allclose(q(x[0]), want[0], rtol=0, atol=2e-6 * scale)
    post = 5 * q.layout.phases * q.layout.lanes * (n_in // q.sub)
    monkeypatch.setattr(quantized, "POST_ELEMENTS", 3 * post)                  # chunks of 3 int64 rows
    monkeypatch.setattr(quantized, "PHASE_ELEMENTS", 2 * n_in)
    np.testing.assert_allclose(q(x), want, rtol=0, atol=2e-6 * scale)
    monkeypatch.setattr(quantized, "FLOAT_TOKENS", 5)                          # a prompt: float32 rows
    monkeypatch.setattr(quantized, "FLOAT_ELEMENTS", 2 * n_in * q.layout.rows)  # two int64 rows a chunk
    assert np.array_equal(q._dequantize(0, q.q.shape[0])[:n_rows].view(np.uint32), w.view(np.uint32))
    np.testing.assert_allclose(q(x), want, rtol=0, atol=2e-6 * scale)


def test_the_lanes_hold_the_extreme_sums():
    """Every code at its extreme, every activation code at -127: the lane sums reach their bounds
    (4-bit codes 32 * 8 * 127 = 32512 < 2**15; 8-bit 32 * 128 * 127 < 2**20) and come back exact."""
    for type_name in ("Q4_0", "Q8_0"):
        g = Tensors({"w": (type_name, 12, 64)})
        raw = g.raw["w"].reshape(-1, g.tensors["w"].type.type_size)
        raw[:, 2:] = 0x00 if type_name == "Q4_0" else 0x80                    # codes -8 / -128: the largest |code|
        raw[:, :2] = np.frombuffer(np.float16(1.0).tobytes(), np.uint8)       # d = 1
        q = Builder(g).quantized(whole(g, ["w"]))
        x = np.full(64, -1.0, np.float32)                                     # codes -127
        lowest = -8 if type_name == "Q4_0" else -128
        dx = np.float32(np.float16(1 / 127))                                  # Q8_0's scale, stored as f16
        np.testing.assert_array_equal(q(x), np.full(12, 64 * lowest * (-127 * dx), np.float32))


def test_stacked_types_and_column_ranges():
    g = Tensors({"a": ("Q4_K", 40, 768), "b": ("Q6_K", 24, 768)})
    build = Builder(g)
    stack = build.build(whole(g, ["a", "b"]), Form.QUANTIZED)                   # a RowSplit of two types
    assert [p.ggml_type for p in stack.parts] == ["Q4_K", "Q6_K"] and stack.shape == (64, 768)
    w = np.concatenate([g.weights("a"), g.weights("b")])
    x = RNG.standard_normal((3, 768)).astype(np.float32)
    part = build.build([("a", 30, 40), ("b", 0, 10)], Form.COMPACT, cols=(256, 512))   # one block of columns
    assert part.shape == (20, 256)
    assert np.array_equal(part.rows(range(20)).view(np.uint32), w[30:50, 256:512].view(np.uint32))
    got = part(x[:, 256:512])
    want = np.concatenate([reference(w[30:40, 256:512], x[:, 256:512], "Q4_K"),
                           reference(w[40:50, 256:512], x[:, 256:512], "Q6_K")], axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())
    with pytest.raises(ValueError, match="not whole Q4_K blocks"):
        build.quantized(whole(g, ["a"]), cols=(0, 128))
