"""The C kernel (pyengine/weights/kernel): ggml's quantized products, checked against numpy's.

For every type it multiplies, on random blocks (finite f16 scales) with odd row counts:
- the activations it rounds are numpy's (``matmul.quantize_activations``) code for code and scale for
  scale, Q8_1's ``s`` as ggml stores it, and the sums of each 16 codes;
- the integer sum of each sub-block of 16 weights with a token's codes equals numpy's, computed from the
  codes :func:`pyengine.gguf.quants.codes` reads: every bit of each type's unpacking;
- ``W x`` for 1 to 37 tokens (four at a time and the rest, past a tile of 32) equals a float64 product of
  the dequantized weights with the rounded activations, written into a column slice of a wider array;
- the Blocks form gives the same, shares one rounding of x between the parts of a row split, and reads
  rows bit for bit as ``gguf.quants`` dequantizes them.
Every binary16 scale is read as numpy reads it (NaN and infinities too), and what the wrapper must not pass
to C (a wrong dtype, shape, layout or size, an unknown type) is a KernelError before the call.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from conftest import need_kernel
from gguf_file.test_quants import random_blocks

from pyengine.gguf import quants
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME
from pyengine.model import delta_net, ops
from pyengine.weights import kernel
from pyengine.weights.blocks import Blocks
from pyengine.weights.build import Builder, whole
from pyengine.weights.forms import Form, RowSplit
from pyengine.weights.kernel import KernelError
from pyengine.weights.matmul import absmax, quantize_activations
from weights.test_quantized import Tensors, reference

TYPES = list(kernel.TYPES)
RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def k():
    need_kernel()
    return kernel.get()


def act_fields(k, act: np.ndarray, type_name: str, n: int) -> dict:
    """A token's record from pe_quantize, field by field (kernel.c's act_layout)."""
    block = 256 if kernel.TYPES[type_name] == "Q8_K" else 32
    q8_1 = kernel.TYPES[type_name] == "Q8_1"
    at = [k.code_bytes * n, 4 * (n // block), 2 * (n // 16), 4 * (n // 32) if q8_1 else 0]
    edges = np.cumsum([0] + at)
    assert act.shape[-1] == k.act_bytes(type_name, n) >= edges[-1]
    q, d, bsum, s = (act[..., a:b] for a, b in zip(edges[:-1], edges[1:]))
    codes = np.int8 if k.code_bytes == 1 else np.int16                  # x86 int8, wasm int16
    return {"q": q.view(codes), "d": d.view(np.float32), "bsum": bsum.view(np.int16), "s": s.view(np.float32)}


@pytest.mark.parametrize("type_name", TYPES)
def test_the_activations_are_rounded_as_numpy_rounds_them(k, type_name):
    n = 512
    x = RNG.standard_normal((3, n)).astype(np.float32) * np.float32(3)
    x[1, :256] = 0                                                      # a block of zeros: scale 0
    x[2, 7] = 40                                                        # one large value
    f = act_fields(k, k.quantize(x, type_name), type_name, n)
    q, d, _ = quantize_activations(x, kernel.TYPES[type_name])
    assert np.array_equal(f["q"], q) and np.array_equal(f["d"], d)
    assert np.array_equal(f["bsum"], q.reshape(3, -1, 16).sum(-1).astype(np.int16))
    if kernel.TYPES[type_name] == "Q8_1":
        s = absmax(x.reshape(3, -1, 32)) / np.float32(127) * q.reshape(3, -1, 32).sum(-1).astype(np.float32)
        assert np.array_equal(f["s"], s.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("type_name", TYPES)
def test_the_integer_sums_are_numpys(k, type_name):
    t = GGML_TYPES_BY_NAME[type_name]
    rows, n = 7, 768 if t.block_size == 256 else 96
    raw = random_blocks(type_name, rows * n // t.block_size, RNG)
    x = RNG.standard_normal((1, n)).astype(np.float32)
    act = k.quantize(x, type_name)
    xq = quantize_activations(x, kernel.TYPES[type_name])[0].astype(np.int64).reshape(-1, 16)   # (n/16, 16)
    codes = np.asarray(quants.codes(raw, t, rows * n).q).astype(np.int64).reshape(rows, -1, 16)
    want = (codes * xq).sum(-1)                                                            # (rows, n/16)
    blocks = raw.reshape(rows, -1)
    for r in range(rows):
        assert np.array_equal(k.block_sums(np.ascontiguousarray(blocks[r]), type_name, act[0]), want[r]), r


@pytest.mark.parametrize("type_name", TYPES)
def test_the_product_of_any_number_of_tokens(k, type_name):
    t = GGML_TYPES_BY_NAME[type_name]
    rows, n = 37, 512
    g = Tensors({"w": (type_name, rows, n)})
    c = quants.codes(g.raw["w"], t, rows * n)
    x = RNG.standard_normal((37, n)).astype(np.float32)
    want = reference(g.weights("w"), x, type_name, None if c.plus is None else c.plus.reshape(rows, -1))
    tol = 2e-6 * np.abs(want).max()
    for tokens in (1, 2, 4, 5, 37):
        wide = np.full((tokens, rows + 9), np.nan, np.float32)           # rows 3..3+rows of a wider array
        out = k.mul_mat(g.raw["w"].reshape(rows, -1), type_name, n, k.quantize(x[:tokens], type_name),
                        wide[:, 3:3 + rows])
        np.testing.assert_allclose(out, want[:tokens], rtol=0, atol=tol)
        assert np.isnan(wide[:, :3]).all() and np.isnan(wide[:, 3 + rows:]).all()   # nothing written outside


@pytest.mark.parametrize("type_name", TYPES)
def test_a_prompts_tiles_give_one_tokens_bits(k, type_name):
    """A prompt's tiles (x86: eight rows a vector, the rows past them as one token's) add the same floats in
    the same order as one token does: 37 tokens at once and one at a time agree bit for bit."""
    t = GGML_TYPES_BY_NAME[type_name]
    rows, n = 21, 1024
    raw = random_blocks(type_name, rows * n // t.block_size, RNG).reshape(rows, -1)
    act = k.quantize(RNG.standard_normal((37, n)).astype(np.float32), type_name)
    tiles = k.mul_mat(raw, type_name, n, act, np.empty((37, rows), np.float32))
    one = [k.mul_mat(raw, type_name, n, act[i:i + 1], np.empty((1, rows), np.float32))[0] for i in range(37)]
    assert np.isfinite(tiles).all() and np.array_equal(tiles.view(np.uint32), np.array(one).view(np.uint32))


def test_every_native_build_gives_the_same_bits(k):
    """The native builds this CPU runs (AVX-512 with 16 rows a vector, AVX2 with 8, the portable one) give the
    same bits: for every type, one token or a prompt's tiles; attention's products; a delta net layer."""
    libs = [kernel.Kernel(str(kernel.HERE / kernel.NATIVE[b])) for b in kernel.native_builds()]
    if len(libs) < 2:
        pytest.skip(f"only {kernel.native_builds()} runs here")
    got = [[] for _ in libs]                                              # each build's outputs, in turn
    rows, n = 37, 512
    for type_name in TYPES:
        raw = random_blocks(type_name, rows * n // GGML_TYPES_BY_NAME[type_name].block_size, RNG).reshape(rows, -1)
        x = RNG.standard_normal((37, n)).astype(np.float32)
        for lib, out in zip(libs, got):
            out += [lib.mul_mat(raw, type_name, n, lib.quantize(x[:t], type_name), np.empty((t, rows), np.float32))
                    for t in (1, 5, 37)]
    q, keys, p = (RNG.standard_normal(shape).astype(np.float32) for shape in ((3, 5, 72), (3, 40, 72), (3, 5, 40)))
    layer, proj, window, s = delta_layer(np.random.default_rng(3), 4, 2, 32, 4, 9)
    for lib, out in zip(libs, got):
        out += [lib.attention_scores(q, keys), lib.attention_values(p, keys), *lib.delta_net(proj, layer, window, s)]
    for out in got[1:]:
        assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(out, got[0], strict=True))


def test_the_blocks_form(k):
    """One row split of two types: one rounding of x a vec_dot type, the parts' rows in order, rows() bit
    for bit, a batch and one token alike."""
    g = Tensors({"a": ("Q4_K", 5, 256), "b": ("Q6_K", 3, 256), "c": ("Q8_0", 2, 256)})
    w = Builder(g).build(whole(g, ["a", "b", "c"]), Form.BLOCKS)
    assert isinstance(w, RowSplit) and [type(p) for p in w.parts] == [Blocks] * 3 and w.shape == (10, 256)
    assert w.nbytes == sum(g.raw[n].size for n in "abc")
    x = RNG.standard_normal((6, 256)).astype(np.float32)
    want = np.concatenate([reference(g.weights(n), x, g.tensors[n].type.name) for n in "abc"], axis=1)
    np.testing.assert_allclose(w(x), want, rtol=0, atol=2e-6 * np.abs(want).max())
    np.testing.assert_allclose(w(x[2]), want[2], rtol=0, atol=2e-6 * np.abs(want).max())
    first = w(x[0])                                      # one token's work arrays are kept for the next:
    w(x[1])                                              # what a product returns is its own
    np.testing.assert_allclose(first, want[0], rtol=0, atol=2e-6 * np.abs(want).max())
    acts: dict = {}
    for part in w.parts:
        part(x, acts)
    assert sorted(acts) == [("kernel", "Q8_0", 256), ("kernel", "Q8_K", 256)]
    ids = [9, 0, 5, 4]
    rows = np.concatenate([g.weights(n) for n in "abc"])[ids]
    assert np.array_equal(w.rows(ids).view(np.uint32), rows.view(np.uint32))


def test_every_binary16_scale_is_read_as_numpy_reads_it(k):
    """65536 Q8_0 rows, row h with scale h (its f16 bits) and code 1 at weights 0, 2, 4 and 6, times x = 1
    there (codes 127, scale d_x): y = 4 * 127 * h * d_x, NaN and infinities included."""
    h = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    w = np.zeros((1 << 16, 34), np.uint8)
    w[:, :2] = h.view(np.uint8).reshape(-1, 2)
    w[:, [2, 4, 6, 8]] = 1
    x = np.zeros((1, 32), np.float32)
    x[0, [0, 2, 4, 6]] = 1                                              # codes 127 there, d_x = fp16(1/127)
    act = k.quantize(x, "Q8_0")
    dx = act_fields(k, act, "Q8_0", 32)["d"][0, 0]
    with np.errstate(all="ignore"):
        want = h.view(np.float16).astype(np.float32) * dx * np.float32(127) * np.float32(4)
    got = k.mul_mat(w, "Q8_0", 32, act, np.empty((1, 1 << 16), np.float32))[0]
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok])


def test_nan_and_infinite_activations_end_in_nan_not_a_trap(k):
    t = GGML_TYPES_BY_NAME["Q4_0"]
    raw = random_blocks("Q4_0", 4 * 64 // t.block_size, RNG).reshape(4, -1)
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    x[0, 3], x[1, 10], x[2, 0] = np.nan, np.inf, -np.inf               # each token's first block of 32
    for type_name in ("Q4_0", "Q4_1", "Q4_K"):
        k.quantize(np.resize(x, (3, 256)), type_name)                   # no trap on any path
    y = k.mul_mat(raw, "Q4_0", 64, k.quantize(x, "Q4_0"), np.empty((3, 4), np.float32))
    assert np.isnan(y).all()           # a NaN or an infinity does not round to a finite code and vanish
    wide = random_blocks("Q4_K", 4, RNG).reshape(4, -1)
    yk = k.mul_mat(wide, "Q4_K", 256, k.quantize(np.resize(x, (3, 256)), "Q4_K"), np.empty((3, 4), np.float32))
    assert np.isnan(yk).all()
    only_nan = np.full((1, 256), np.nan, np.float32)                    # no finite value sets the scale
    assert np.isnan(k.mul_mat(wide, "Q4_K", 256, k.quantize(only_nan, "Q4_K"), np.empty((1, 4), np.float32))).all()
    x[:, :32] = 1.0
    assert np.isfinite(k.mul_mat(raw, "Q4_0", 64, k.quantize(x, "Q4_0"), np.empty((3, 4), np.float32))).all()


BAD = [
    ("an unknown type", lambda k, w, a, o: k.mul_mat(w, "IQ2_XXS", 64, a, o), "no product for IQ2_XXS"),
    ("a float32 weight", lambda k, w, a, o: k.mul_mat(w.astype(np.float32), "Q4_0", 64, a, o), "uint8"),
    ("rows of the wrong size", lambda k, w, a, o: k.mul_mat(w[:, :-1].copy(), "Q4_0", 64, a, o), "bytes a row"),
    ("a non-contiguous weight", lambda k, w, a, o: k.mul_mat(w[::2], "Q4_0", 64, a, o[:, :2]), "C-contiguous"),
    ("codes of another width", lambda k, w, a, o: k.mul_mat(w, "Q4_0", 64, a[:, :-32].copy(), o), "bytes a token"),
    ("codes of another type", lambda k, w, a, o: k.mul_mat(w, "Q4_1", 64, a, o), "bytes a row"),
    ("an output too small", lambda k, w, a, o: k.mul_mat(w, "Q4_0", 64, a, o[:, :3]), "out must be"),
    ("an output of other tokens", lambda k, w, a, o: k.mul_mat(w, "Q4_0", 64, a, o[:1]), "out must be"),
    ("a read-only output", lambda k, w, a, o: k.mul_mat(w, "Q4_0", 64, a, readonly(o)), "out must be"),
    ("a float64 output", lambda k, w, a, o: k.mul_mat(w, "Q4_0", 64, a, o.astype(np.float64)), "out must be"),
    ("a strided output", lambda k, w, a, o: k.mul_mat(w, "Q4_0", 64, a, np.empty((2, 8), np.float32)[:, ::2]),
     "out must be"),
    ("x not float32", lambda k, w, a, o: k.quantize(np.zeros((2, 64)), "Q4_0"), "float32"),
    ("x not whole blocks", lambda k, w, a, o: k.quantize(np.zeros((2, 48), np.float32), "Q4_0"), "whole Q4_0"),
    ("x not whole K blocks", lambda k, w, a, o: k.quantize(np.zeros((2, 64), np.float32), "Q4_K"), "whole Q4_K"),
]


def readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("what, call, message", BAD, ids=[b[0] for b in BAD])
def test_what_c_must_not_be_given_is_refused_first(k, what, call, message):
    w = random_blocks("Q4_0", 8, RNG).reshape(4, -1)                     # 4 rows of 64 weights
    act = k.quantize(RNG.standard_normal((2, 64)).astype(np.float32), "Q4_0")
    with pytest.raises(KernelError, match=message):
        call(k, w, act, np.empty((2, 4), np.float32))


def test_the_c_side_checks_its_numbers_too(k):
    lib, buf = k.lib, np.zeros(1 << 12, np.uint8)
    assert lib.pe_act_bytes(5, 64) == -1 and lib.pe_act_bytes(2, 48) == -2 and lib.pe_act_bytes(2, 0) == -2
    assert lib.pe_act_bytes(12, 128) == -2 and lib.pe_act_bytes(2, -32) == -2
    p = buf.ctypes.data
    assert lib.pe_quantize(2, p, 64, -1, p) == -2 and lib.pe_quantize(99, p, 64, 1, p) == -1
    assert lib.pe_mul_mat(2, p, -1, 64, p, 1, p, 1) == -2 and lib.pe_mul_mat(2, p, 4, 64, p, 2, p, 3) == -2
    assert lib.pe_mul_mat(2, p, 0, 64, p, 0, p, 0) == 0                # nothing to do: nothing read


def test_status_says_which_products_run(monkeypatch):
    kernel.use(False, "a test")
    assert kernel.get() is None and kernel.status() == "numpy (a test)"
    kernel.use(True)
    monkeypatch.setattr(kernel, "_loaded", [])
    monkeypatch.setenv("PYENGINE_KERNELS", "0")
    assert kernel.get() is None and kernel.status() == "numpy (PYENGINE_KERNELS=0)"
    monkeypatch.setattr(kernel, "_loaded", [])
    monkeypatch.delenv("PYENGINE_KERNELS")
    monkeypatch.setattr(kernel, "library_path", lambda: None)
    assert kernel.get() is None and "not built" in kernel.status()
    monkeypatch.setattr(kernel, "_loaded", [])
    monkeypatch.setattr(kernel, "library_path", lambda: "/nonexistent/libpyengine_kernel.so")
    assert kernel.get() is None and kernel.status().startswith("numpy (the C kernel did not load")


# (Hkv, G, T, D, Dv, pos, window, cap): decode, a GQA group over a long cache, head sizes off the 8 and 32
# lanes, a prompt cut into chunks, a draft checked query by query, a sliding window, gemma2's soft cap
ATTENTION = [(2, 7, 1, 64, 64, 530, 0, 0.0), (8, 4, 1, 128, 128, 77, 0, 0.0), (1, 4, 1, 256, 256, 600, 512, 0.0),
             (3, 2, 1, 13, 45, 9, 0, 0.0), (2, 3, 40, 72, 80, 0, 0, 0.0), (2, 2, 3, 64, 64, 20, 0, 0.0),
             (2, 2, 50, 32, 32, 100, 16, 50.0)]


@pytest.mark.parametrize("shape", ATTENTION, ids=lambda s: "x".join(map(str, s)))
def test_attention_over_the_cache_in_the_kernel_is_numpys(k, shape, monkeypatch):
    """ops.attention with the kernel's products equals its einsum form up to float32 summation order, on
    slices of a cache with room past them (heads apart by the capacity)."""
    hkv, g, t, d, dv, pos, window, cap = shape
    q = RNG.standard_normal((hkv, g, t, d)).astype(np.float32) / np.float32(np.sqrt(d))
    cache_k = RNG.standard_normal((hkv, pos + t + 9, d)).astype(np.float32)
    cache_v = RNG.standard_normal((hkv, pos + t + 9, dv)).astype(np.float32)
    if t > 20:
        monkeypatch.setattr(ops, "SCORES_MAX", hkv * g * (pos + t) * 7)  # chunks of 7 queries
    args = (q, cache_k[:, :pos + t], cache_v[:, :pos + t], pos, window)
    want, got = ops.attention(*args, ops.Scoring(cap)), ops.attention(*args, ops.Scoring(cap, k))
    assert got.shape == want.shape == (hkv, g, t, dv) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)


def test_the_attention_products_refuse_what_they_must_not_read(k):
    q, cache = np.zeros((2, 3, 8), np.float32), np.zeros((2, 10, 8), np.float32)
    assert k.attention_scores(q, cache[:, :4]).shape == (2, 3, 4)
    for bad_q, bad_k, message in [(q.astype(np.float64), cache, "q must be"), (q[:, :, ::2], cache, "q must be"),
                                  (q, cache[:1], "k must be float32 \\(2, 10, 8\\)"),
                                  (q, cache[:, :, :4], "k must be"), (q, cache[:, ::2], "contiguous"),
                                  (q, cache.transpose(1, 0, 2)[:2], "contiguous")]:
        with pytest.raises(KernelError, match=message):
            k.attention_scores(bad_q, bad_k)
    with pytest.raises(KernelError, match="contiguous"):
        k.attention_values(np.zeros((2, 3, 5), np.float32), np.zeros((5, 2, 8), np.float32).transpose(1, 0, 2))
    p = q.ctypes.data
    assert k.lib.pe_attn_scores(p, 2, 3, 8, p, 7, 1, p) == -2              # heads closer than their rows
    assert k.lib.pe_attn_values(p, 2, 3, 1, p, 8, 0, p) == -2 and k.lib.pe_attn_values(p, -1, 3, 1, p, 8, 8, p) == -2


def delta_layer(rng, h: int, hk: int, d: int, taps: int, t: int) -> tuple:
    """A Gated DeltaNet layer of random weights (its products the identity: the kernel runs what lies between
    them), with gates from -30 to 30 (softplus's both ends), and its inputs: (layer, proj (T, P), window, s)."""
    c = 2 * hk * d + h * d
    layer = delta_net.DeltaNet(
        w_in=lambda x: x, conv=rng.standard_normal((c, taps)).astype(np.float32) / np.float32(taps),
        dt_bias=rng.uniform(-30, 30, h).astype(np.float32), a=-np.exp(rng.standard_normal(h)).astype(np.float32),
        norm=rng.standard_normal(d).astype(np.float32), w_out=lambda o: o, key_of=np.arange(h) % hk, d_state=d)
    proj = rng.standard_normal((t, c + h * d + 2 * h)).astype(np.float32)
    window = rng.standard_normal((taps - 1, c)).astype(np.float32)
    return layer, proj, window, (rng.standard_normal((h, d, d)) * 0.1).astype(np.float32)


@pytest.mark.parametrize("h, hk, d, taps, t", [(16, 16, 128, 4, 1), (4, 2, 8, 3, 5), (3, 1, 16, 1, 2), (2, 2, 4, 4, 9)])
def test_a_delta_net_layer_in_the_kernel_is_numpys(k, h, hk, d, taps, t):
    """delta_net.delta_net with the kernel (pe_delta_net: the convolution, silu, l2 norms, gates, delta rule and
    gated norm in one call, a token at a time) equals its numpy form up to float32 rounding (its own e^x and
    log, its own sum order), and leaves the state it was given as it was."""
    layer, proj, window, s = delta_layer(np.random.default_rng(h * t), h, hk, d, taps, t)
    before = window.copy(), s.copy()
    want, got = delta_net.delta_net(layer, proj, window, s), delta_net.delta_net(layer, proj, window, s, k)
    assert (window == before[0]).all() and (s == before[1]).all()
    for a, b, tol in zip(got, want, (2e-5, 0, 2e-6)):
        assert a.shape == b.shape and a.dtype == np.float32
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=tol)


def test_the_kernels_delta_net_refuses_what_does_not_fit():
    need_kernel()
    k = kernel.get()
    layer, proj, window, s = delta_layer(np.random.default_rng(1), 4, 2, 8, 3, 2)
    cases = (((proj[:, :-1].copy(), layer, window, s), r"cannot take proj \(2, 103\): it takes \(2, 104\)"),
             ((proj, layer, window[:1].copy(), s), r"cannot take window \(1, 64\): it takes \(2, 64\)"),
             ((proj, layer, window, s[:, :, :4].copy()), "cannot take s"),
             ((proj.T, layer, window, s), "C-contiguous"))
    for args, message in cases:
        with pytest.raises(KernelError, match=message):
            k.delta_net(*args)
    layer.key_of = np.array([0, 1, 2, 0])                                 # a key head the layer lacks
    with pytest.raises(KernelError, match="its sizes or key heads do not agree"):
        k.delta_net(proj, layer, window, s)
    p, bad = proj.ctypes.data, np.array([2, 4, 2, 8, 3], np.int32)
    keys = np.array([0, 1, 2, 0], np.int32)                               # the C side checks key_of too
    assert k.lib.pe_delta_net(p, bad.ctypes.data, p, p, p, p, p, keys.ctypes.data, ctypes.c_float(1e-6), p, p, p,
                              p) == -2
    bad[3] = -8
    assert k.lib.pe_delta_net(p, bad.ctypes.data, *[p] * 6, ctypes.c_float(1e-6), p, p, p, p) == -2


def test_a_model_whose_weights_are_not_finite_is_an_error_in_the_kernels_form(tmp_path):
    """A norm weight of NaNs in a Q4_K_M file: the NaN reaches the logits through the kernel's products (a NaN
    activation makes its block's scale NaN, not a finite code), and generation says what is wrong instead of
    replying with noise."""
    need_kernel()
    from conftest import TINY

    from pyengine.errors import PyEngineError
    from pyengine.generation.sampling import Sampler, SamplerParams
    from pyengine.gguf import open_gguf
    from pyengine.model import load_model
    raw = bytearray(TINY["llama-q4km"].read_bytes())
    t = open_gguf(str(TINY["llama-q4km"])).tensors["blk.1.ffn_norm.weight"]
    assert bytes(raw[t.offset:t.offset + t.n_bytes]) != bytes(t.n_bytes)         # the tensor's own bytes
    raw[t.offset:t.offset + t.n_bytes] = np.full(t.n_elements, np.nan, np.float32).tobytes()
    path = tmp_path / "nan.gguf"
    path.write_bytes(bytes(raw))
    model = load_model(open_gguf(str(path)), weights="blocks")
    assert model.weights == "blocks"
    logits = model.forward([1, 2, 3], model.new_cache(8))
    assert np.isnan(logits).all()
    with pytest.raises(PyEngineError, match="not all finite"):
        Sampler(SamplerParams(temperature=0)).sample(logits, [1, 2, 3])
