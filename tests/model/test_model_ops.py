"""The operations against plain float64 formulas: rope, masked GQA attention, RMSNorm, GELU, activation rounding."""

from __future__ import annotations

import math

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize, quantize

from pyengine.model.ops import Rope, attention, geglu, rmsnorm, softcap, swiglu
from pyengine.weights.matmul import round_activations

RNG = np.random.default_rng(7)


def rope_reference(x, pos, n_rot, base, neox, scale=1.0):
    """x (T, H, D) float64: pair i turned by (pos + t) * scale * base^(-2i/n_rot)."""
    out = x.astype(np.float64).copy()
    for t in range(x.shape[0]):
        for i in range(n_rot // 2):
            theta = (pos + t) * scale * base ** (-2 * i / n_rot)
            a, b = (i, i + n_rot // 2) if neox else (2 * i, 2 * i + 1)
            x0, x1 = x[t, :, a].astype(np.float64), x[t, :, b].astype(np.float64)
            out[t, :, a] = x0 * math.cos(theta) - x1 * math.sin(theta)
            out[t, :, b] = x0 * math.sin(theta) + x1 * math.cos(theta)
    return out


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("n_rot, scale", [(16, 1.0), (8, 0.25)])
def test_rope_matches_the_formula(neox, n_rot, scale):
    x = RNG.standard_normal((5, 3, 16)).astype(np.float32)
    rope = Rope(n_rot, 10000.0, scale, neox)
    got = rope(x.copy(), 70)
    np.testing.assert_allclose(got, rope_reference(x, 70, n_rot, 10000.0, neox, scale), atol=2e-5)
    np.testing.assert_array_equal(got[..., n_rot:], x[..., n_rot:])    # dims past n_rot stay
    assert len(rope.cos) >= 75


def test_rope_freq_factors_divide_the_angle():
    x = RNG.standard_normal((2, 1, 8)).astype(np.float32)
    ff = np.array([1.0, 2.0, 4.0, 8.0], np.float32)
    got = Rope(8, 500000.0, 1.0, False, ff)(x.copy(), 3)
    want = x.astype(np.float64).copy()
    for t in range(2):
        for i in range(4):
            th = (3 + t) * 500000.0 ** (-2 * i / 8) / ff[i]
            x0, x1 = x[t, 0, 2 * i], x[t, 0, 2 * i + 1]
            want[t, 0, 2 * i] = x0 * math.cos(th) - x1 * math.sin(th)
            want[t, 0, 2 * i + 1] = x0 * math.sin(th) + x1 * math.cos(th)
    np.testing.assert_allclose(got, want, atol=2e-5)


def attention_reference(q, k, v, pos, window):
    """q (T, H, D), k/v (S, Hkv, D), float64 loops: head h uses kv head h // (H / Hkv)."""
    t_n, h_n, _ = q.shape
    g = h_n // k.shape[1]
    out = np.zeros((t_n, h_n, v.shape[2]))
    for t in range(t_n):
        p = pos + t
        keys = [s for s in range(p + 1) if not window or p - s < window]
        for h in range(h_n):
            sc = np.array([q[t, h] @ k[s, h // g] for s in keys], np.float64)
            w = np.exp(sc - sc.max())
            out[t, h] = (w / w.sum()) @ v[keys, h // g]
    return out


@pytest.mark.parametrize("window", [0, 3])
@pytest.mark.parametrize("pos, t", [(0, 6), (4, 5), (9, 1)])
def test_attention_masks_and_gqa(window, pos, t, monkeypatch):
    hkv, g, d = 2, 3, 8
    q = RNG.standard_normal((t, hkv * g, d)).astype(np.float32)
    k = RNG.standard_normal((pos + t, hkv, d)).astype(np.float32)
    v = RNG.standard_normal((pos + t, hkv, d)).astype(np.float32)
    want = attention_reference(q, k, v, pos, window)                        # (T, H, D)
    qh = q.reshape(t, hkv, g, d).transpose(1, 2, 0, 3)                      # (Hkv, G, T, D)
    for chunk in (1 << 22, 10):                                              # one chunk, or many
        monkeypatch.setattr("pyengine.model.ops.SCORES_MAX", chunk)
        got = attention(qh, k.transpose(1, 0, 2), v.transpose(1, 0, 2), pos, window)
        np.testing.assert_allclose(got.transpose(2, 0, 1, 3).reshape(t, hkv * g, d), want, atol=1e-5)


def test_rmsnorm_and_activations():
    x = RNG.standard_normal((3, 16)).astype(np.float32) * 3
    w = RNG.standard_normal(16).astype(np.float32)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(rmsnorm(x, w, 1e-6), want, rtol=1e-5, atol=1e-6)
    g = np.array([-20.0, -10.0, -1.5, 0.0, 0.3, 2.0, 10.0, 25.0], np.float32)
    u = np.full(8, 2.0, np.float32)
    gelu = 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
    np.testing.assert_allclose(geglu(g, u), gelu * 2, rtol=2e-3, atol=1e-3)  # float16 table, as ggml
    assert geglu(g, u)[0] == 0 and geglu(g, u)[-1] == 50 and geglu(g, u)[-2] == 20  # ggml's |x| >= 10 cases
    np.testing.assert_allclose(swiglu(g, u), g / (1 + np.exp(-g.astype(np.float64))) * 2, rtol=1e-6)
    np.testing.assert_allclose(softcap(np.array([0.0, 30.0, -300.0], np.float32), 30.0),
                               [0.0, 30 * math.tanh(1), -30 * math.tanh(10)], rtol=1e-6)


def test_q8_0_activation_rounding_agrees_with_gguf_py():
    x = RNG.standard_normal((4, 256)).astype(np.float32)
    want = dequantize(quantize(x, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0)
    got = round_activations(x, "Q8_0")
    # gguf-py scales by 1/d, ggml's x86 path by 127/amax: a product one ulp apart may round the other way
    assert np.mean(got == want) > 0.999
    step = np.abs(x.reshape(4, 8, 32)).max(-1, keepdims=True) / 127
    # half a step of rounding, plus the scale's own float16 rounding (<= 2^-11 relative) on 127 steps
    assert np.all(np.abs(got - x).reshape(4, 8, 32) <= step * (0.5 + 127 * 2.0 ** -11))


def test_q8_k_activation_rounding():
    x = RNG.standard_normal(512).astype(np.float32)
    x[300] = -9.0                                        # the signed max of block 1 is negative
    got = round_activations(x, "Q8_K").reshape(2, 256)
    d = np.array([x[:256][np.abs(x[:256]).argmax()], -9.0], np.float32) / -127
    q = got / d[:, None]
    np.testing.assert_allclose(q, np.rint(q), atol=1e-3)    # integer multiples of the block scale
    assert q.max() <= 127 and got[1, 300 - 256] == pytest.approx(-9.0)
    assert np.all(round_activations(np.zeros(256, np.float32), "Q8_K") == 0)
    assert round_activations(x, None) is x
    np.testing.assert_array_equal(round_activations(x, "F16"), x.astype(np.float16).astype(np.float32))


def test_absmax_reads_the_bits_as_the_values():
    from pyengine.weights.matmul import absmax
    x = RNG.standard_normal((7, 5, 64)).astype(np.float32) * 100
    x[2, 3] = 0
    x[4, 1, 7] = -np.inf
    np.testing.assert_array_equal(absmax(x), np.abs(x).max(axis=-1))
    assert np.isnan(absmax(np.array([1.0, np.nan, -2.0], np.float32)))
