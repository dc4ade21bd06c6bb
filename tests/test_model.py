"""The forward pass on the tiny fixtures against llama.cpp's logits, the KV cache, and the model's errors.

Reference values: tests/fixtures/fixtures-reference.json (llama.cpp CPU, F32 KV cache, all logits) for
the prompt ids [1, 5, 9, 42]. Tolerances:
- F32 fixtures: |logit - llama.cpp| < 1e-4. We measure <= 3.4e-6: both sides compute in float32 and
  differ only in summation order (and tiny-gemma3's GELU goes through ggml's float16 table here too).
- tiny-llama-q4km: llama.cpp rounds each matmul's activations to 8-bit blocks (Q8_0 / Q8_K). Without
  that rounding (the default) the logits differ by up to 0.27 (std of the logits 6.6), so we check the
  top-5 sets and the greedy ids; with ``ggml_rounding=True`` they agree to < 1e-4 (measured 3.8e-6).
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY

import pyengine.model.transformer as transformer
import pyengine.weights.budget as budget
import pyengine.weights.build as build
import pyengine.weights.matmul as matmul
import pyengine.weights.rows as weight_rows
from pyengine.errors import ModelError, PyEngineError
from pyengine.gguf import open_gguf
from pyengine.model import load_model
from pyengine.model.load import model_tensors
from pyengine.weights.forms import Form, Int8Rows, Packed, RowSplit

RNG = np.random.default_rng(0)
F32_FIXTURES = ["llama", "qwen2", "qwen3", "gemma3"]
ALL_FIXTURES = F32_FIXTURES + ["llama-q4km"]


class Edited:
    """A GGUF file seen without some metadata keys or tensors, or with other values (a file-like fake)."""

    def __init__(self, gf, drop=(), **metadata):
        self.metadata = {k: v for k, v in gf.metadata.items() if k not in drop}
        self.metadata.update({k.replace("__", "."): v for k, v in metadata.items()})
        self.tensors = {n: t for n, t in gf.tensors.items() if n not in drop}
        self.tensor, self.tensor_bytes = gf.tensor, gf.tensor_bytes


@pytest.fixture(scope="module")
def files():
    opened = {name: open_gguf(TINY[name]) for name in ALL_FIXTURES}
    yield opened
    for g in opened.values():
        g.close()


@pytest.fixture(scope="module")
def models(files):
    return {name: load_model(g) for name, g in files.items()}


def ref(fixtures_reference, name):
    return fixtures_reference["fixtures"][name]["reference"]


def greedy(model, prompt, n, n_ctx=64):
    """n greedy ids after prompt, decoding one token at a time; also each step's logits."""
    cache = model.new_cache(n_ctx)
    logits = model.forward(prompt, cache)
    ids, steps = [], []
    for _ in range(n):
        steps.append(logits)
        ids.append(int(np.argmax(logits)))
        logits = model.forward([ids[-1]], cache)
    return ids, steps


def top(logits, k=5):
    return [int(i) for i in np.argsort(-logits, kind="stable")[:k]]


@pytest.mark.parametrize("name", F32_FIXTURES)
def test_f32_fixture_logits_match_llama_cpp(name, models, fixtures_reference):
    r = ref(fixtures_reference, name)
    logits = models[name].forward(r["prompt_ids"], models[name].new_cache(64), logits="all")  # (4, n_vocab)
    assert logits.shape == (4, r["n_vocab"]) and logits.dtype == np.float32
    np.testing.assert_allclose(logits[-1], r["last_pos_logits"], rtol=0, atol=1e-4)
    for pos, want in enumerate(r["per_position_top5"]):
        np.testing.assert_allclose(logits[pos][[i for i, _ in want]], [v for _, v in want], rtol=0, atol=1e-4)
        assert top(logits[pos]) == [i for i, _ in want]


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_greedy_ids_match_llama_cpp(name, models, fixtures_reference):
    r = ref(fixtures_reference, name)
    ids, steps = greedy(models[name], r["prompt_ids"], 8)
    assert ids == r["greedy_next_ids"] == r["library_greedy_ids"]
    for logits, want in zip(steps, r["greedy_step_top5"]):
        assert set(top(logits)) == {i for i, _ in want}
        if name != "llama-q4km":
            np.testing.assert_allclose(logits[[i for i, _ in want]], [v for _, v in want], rtol=0, atol=1e-4)


def test_q4km_top5_without_activation_rounding(models, fixtures_reference):
    r = ref(fixtures_reference, "llama-q4km")
    logits = models["llama-q4km"].forward(r["prompt_ids"], models["llama-q4km"].new_cache(64), logits="all")
    for pos, want in enumerate(r["per_position_top5"]):
        assert set(top(logits[pos])) == {i for i, _ in want}
    diff = np.abs(logits[-1] - np.array(r["last_pos_logits"])).max()
    assert 0.01 < diff < 0.5   # llama.cpp's 8-bit activations, not ours


def test_q4km_with_ggml_rounding_matches_llama_cpp(files, fixtures_reference):
    r = ref(fixtures_reference, "llama-q4km")
    m = load_model(files["llama-q4km"], ggml_rounding=True)
    logits = m.forward(r["prompt_ids"], m.new_cache(64), logits="all")
    np.testing.assert_allclose(logits[-1], r["last_pos_logits"], rtol=0, atol=1e-4)
    for pos, want in enumerate(r["per_position_top5"]):
        assert top(logits[pos]) == [i for i, _ in want]
        np.testing.assert_allclose(logits[pos][[i for i, _ in want]], [v for _, v in want], rtol=0, atol=1e-4)


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_decode_with_cache_equals_prefill_all(name, models):
    m = models[name]
    tokens = [1, 5, 9, 42, 7, 300, 12, 3, 99, 150, 8, 21]   # 12 positions: past tiny-gemma3's window of 4
    full = m.forward(tokens, m.new_cache(32), logits="all")  # (12, n_vocab)
    cache = m.new_cache(32)
    first = m.forward(tokens[:5], cache, logits="all")
    rest = np.stack([m.forward([t], cache) for t in tokens[5:]])
    tol = 5e-4 if name == "gemma3" else 2e-5     # gemma's float16 GELU table: see the ubatch test
    np.testing.assert_allclose(np.concatenate([first, rest]), full, rtol=0, atol=tol)
    assert cache.n == 12


def test_long_prompt_runs_in_ubatches(models, monkeypatch):
    """tiny-gemma3 (window 4) in steps of 5 tokens. Its GELU rounds to float16 (as ggml), which turns
    float32 summation-order differences into float16 steps: hence 5e-4 here, not 2e-5."""
    m = models["gemma3"]
    tokens = list(range(3, 40))
    whole = m.forward(tokens, m.new_cache(64), logits="all")
    monkeypatch.setattr(transformer, "UBATCH", 5)
    cache = m.new_cache(64)
    np.testing.assert_allclose(m.forward(tokens, cache, logits="all"), whole, rtol=0, atol=5e-4)
    np.testing.assert_allclose(m.forward([7], cache), m.forward(tokens + [7], m.new_cache(64)), atol=5e-4)


def test_logits_modes(models):
    m = models["qwen3"]
    cache = m.new_cache(16)
    assert m.forward([1, 2, 3], cache, logits="none").shape == (0, 302) and cache.n == 3
    last = m.forward([4], cache)
    assert last.shape == (302,)
    np.testing.assert_allclose(last, m.forward([1, 2, 3, 4], m.new_cache(16), logits="all")[3], atol=2e-5)
    with pytest.raises(PyEngineError, match="logits must be one of"):
        m.forward([1], cache, logits="first")


def test_truncate_reuses_the_prefix(models):
    m = models["llama"]
    a = m.forward([1, 5, 9, 42, 7], m.new_cache(16))
    cache = m.new_cache(16)
    m.forward([1, 5, 9, 100, 101, 102], cache, logits="none")
    cache.truncate(3)
    np.testing.assert_allclose(m.forward([42, 7], cache), a, atol=2e-5)
    assert cache.n == 5
    with pytest.raises(PyEngineError, match="cannot truncate"):
        cache.truncate(6)


def test_cache_grows_past_its_first_capacity(models):
    m = models["qwen2"]
    cache = m.new_cache(300)
    assert cache.capacity == 256
    tokens = [int(t) for t in np.random.default_rng(0).integers(0, 302, 270)]
    first = m.forward(tokens[:250], cache, logits="none")
    assert first.shape == (0, 302)
    out = m.forward(tokens[250:], cache, logits="all")
    assert cache.capacity == 300 and cache.n == 270
    np.testing.assert_allclose(out, m.forward(tokens, m.new_cache(270), logits="all")[250:], atol=1e-4)


def test_context_overflow_is_a_clear_error(models):
    m = models["llama"]
    cache = m.new_cache(8)
    m.forward([1, 2, 3, 4, 5, 6], cache)
    with pytest.raises(PyEngineError, match=r"context full: 6 tokens in the cache \+ 3 new > n_ctx = 8"):
        m.forward([7, 8, 9], cache)
    assert cache.n == 6
    m.forward([7, 8], cache)
    with pytest.raises(PyEngineError, match="context full"):
        m.forward([9], cache)
    with pytest.raises(PyEngineError, match="positive number of tokens"):
        m.new_cache(0)


def test_bad_tokens_are_clear_errors(models):
    m = models["llama"]
    with pytest.raises(PyEngineError, match=r"token id 328 is outside the vocabulary \(0\.\.327\)"):
        m.forward([1, 328], m.new_cache(8))
    with pytest.raises(PyEngineError, match="token id -1"):
        m.forward([-1], m.new_cache(8))
    with pytest.raises(PyEngineError, match="at least one token"):
        m.forward([], m.new_cache(8))
    with pytest.raises(PyEngineError, match="list of integer ids"):
        m.forward(["hello"], m.new_cache(8))


@pytest.mark.parametrize("name, tensor", [
    ("llama", "blk.0.attn_norm.weight"), ("llama", "output_norm.weight"), ("llama", "blk.1.ffn_down.weight"),
    ("qwen3", "blk.0.attn_q_norm.weight"), ("qwen3", "blk.0.attn_k_norm.weight"),
    ("gemma3", "blk.0.post_attention_norm.weight"), ("gemma3", "blk.5.post_ffw_norm.weight"),
    ("gemma3", "token_embd.weight"),
])
def test_missing_tensor_is_named(name, tensor, files):
    with pytest.raises(ModelError, match=f"missing tensor '{tensor}'"):
        load_model(Edited(files[name], drop=[tensor]))


@pytest.mark.parametrize("name, key, tensor", [
    ("llama", "llama.attention.head_count_kv", "blk.0.attn_k.weight"),
    ("qwen3", "qwen3.attention.key_length", "blk.0.attn_q.weight"),
    ("gemma3", "gemma3.attention.value_length", "blk.0.attn_v.weight"),
])
def test_metadata_that_contradicts_a_tensor_names_it(name, key, tensor, files):
    """llama.cpp refuses these too ("check_tensor_dims: tensor ... has wrong shape")."""
    with pytest.raises(ModelError, match=f"tensor '{tensor}' has shape"):
        load_model(Edited(files[name], drop=[key]))


def test_trailing_unit_dims_are_accepted_and_wrong_shapes_named(files):
    g = files["llama"]
    fake = Edited(g)
    info = g.tensors["blk.0.attn_norm.weight"]
    fake.tensors["blk.0.attn_norm.weight"] = info._replace(shape=info.shape + (1, 1))    # (64, 1, 1)
    a, b = load_model(fake), load_model(g)
    np.testing.assert_array_equal(a.forward([1, 2], a.new_cache(4)), b.forward([1, 2], b.new_cache(4)))
    fake.tensors["blk.0.attn_norm.weight"] = info._replace(shape=(32, 2))
    with pytest.raises(ModelError, match=r"'blk.0.attn_norm.weight' has shape \(32, 2\), expected \(64,\)"):
        load_model(fake)


def _probe_changes(fixtures_reference):
    """(arch, 'key'|'tensor', name, top5) for each omission llama.cpp loads with different logits."""
    for arch, probes in fixtures_reference["required_keys_probe"].items():
        for what, result in probes.items():
            if result["loads"] and not result["logits_unchanged"]:
                _, kind, name = what.split(" ", 2)
                yield arch, kind, name, [i for i, _ in result["last_pos_top5"]]


def test_optional_keys_and_tensors_change_logits_as_in_llama_cpp(files, fixtures_reference):
    """Without rope.freq_base (10000), sliding_window (no window), output.weight (tied), q/k/v biases."""
    seen = 0
    for arch, _, name, want in _probe_changes(fixtures_reference):
        m = load_model(Edited(files[arch], drop=[name]))
        logits = m.forward(ref(fixtures_reference, arch)["prompt_ids"], m.new_cache(8))
        assert top(logits) == want, (arch, name)
        seen += 1
    assert seen == 8


def test_progress_reports_every_tensor(files):
    calls = []
    m = load_model(files["qwen2"], progress=lambda *a: calls.append(a))
    names = [n for n, _, _ in model_tensors(m.config) if n in files["qwen2"].tensors]
    total = sum(files["qwen2"].tensors[n].n_bytes for n in names)
    assert len(names) == len(files["qwen2"].tensors) == 26
    assert calls[0] == (0, 26, 0, total) and calls[-1] == (26, 26, total, total)
    assert [c[0] for c in calls] == list(range(27))


def test_int8_weights_take_a_quarter_and_stay_close(files, models, monkeypatch):
    monkeypatch.setattr(weight_rows, "LOAD_CHUNK_BYTES", 100 * 4 * 64)   # several reads per tensor (328 rows)
    m8 = load_model(files["llama"], weights="int8")
    m32 = models["llama"]
    assert m8.layers[0].wqkv.q.dtype == np.int8 and m32.layers[0].wqkv.w.dtype == np.float32
    assert 0.25 < m8.weights_nbytes / m32.weights_nbytes < 0.3
    a = m32.forward([1, 5, 9, 42], m32.new_cache(8))
    b = m8.forward([1, 5, 9, 42], m8.new_cache(8))
    assert np.abs(a - b).max() < 0.05 * a.std()


def test_weight_budgets_pick_the_form(files, monkeypatch):
    assert load_model(files["llama"]).weights == "f32"                # 1.9 MB: under F32_BUDGET
    monkeypatch.setattr(budget, "F32_BUDGET", 100_000)
    m = load_model(files["llama"])
    assert m.weights == "mixed" and m.layers[0].wqkv.form is Form.PACKED
    monkeypatch.setattr(budget, "WEIGHTS_BUDGET", 100_000)
    m = load_model(files["llama"])
    assert m.weights == "int8" and m.layers[0].wqkv.q.dtype == np.int8
    with pytest.raises(PyEngineError, match="weights must be"):
        load_model(files["llama"], weights="f16")


@pytest.mark.parametrize("form", list(budget.WEIGHT_FORMS))
@pytest.mark.parametrize("name", ["llama", "gemma3", "llama-q4km"])
def test_form_nbytes_is_what_a_load_holds(form, name, files):
    """The estimate the heap reservation and the "mixed" budget use: within 3% of the weights loaded on
    these tiny models (the stacked q/k/v and gate/up pad a row or two fewer than the tensors one by
    one; 0.01% on gemma-3-270m)."""
    m = load_model(files[name], weights=form)
    shapes = [(n, tuple(t.shape)) for n, t in files[name].tensors.items()]
    q8_0 = {n for n, t in files[name].tensors.items() if t.type.name == "Q8_0"}
    limit = int(budget.MIXED_FILE_RATIO * sum(t.n_bytes for t in files[name].tensors.values()))
    rows = budget.mixed_vocab_rows(shapes, limit, q8_0)
    assert 0 <= budget.form_nbytes(shapes, form, rows, q8_0) / m.weights_nbytes - 1 < 0.03


def test_mixed_packs_the_vocabulary_up_to_the_budget(files, models, monkeypatch):
    """"mixed": packed layers; the output matrix's first rows packed while the whole stays within
    MIXED_FILE_RATIO x the file's tensors, the rest int8 with row and column scales (a RowSplit)."""
    g, m32 = files["llama"], models["llama"]
    shapes = [(n, tuple(t.shape)) for n, t in g.tensors.items()]
    file_bytes = sum(t.n_bytes for t in g.tensors.values())
    rest = budget.form_nbytes(shapes, "mixed", 0)                        # every output row int8
    per_row = (budget.matrix_nbytes(Form.PACKED, (64, 3)) - 3 * (64 + 4)) / 3   # a packed row, less an int8 one
    monkeypatch.setattr(budget, "MIXED_FILE_RATIO", (rest + 120 * per_row + 1) / file_bytes)   # 120 rows
    m = load_model(g, weights="mixed")
    out = m.output                                                          # untied: (328, 64)
    assert isinstance(out, RowSplit) and [p.shape[0] for p in out.parts] == [120, 208]
    assert isinstance(out.parts[0], Packed) and isinstance(out.parts[1], Int8Rows) and out.parts[1].q.dtype == np.int8
    assert m.token_embd.q.dtype == np.int8 and isinstance(m.token_embd, Int8Rows)   # only its rows are read
    assert budget.form_nbytes(shapes, "mixed", 120) <= budget.MIXED_FILE_RATIO * file_bytes \
        < budget.form_nbytes(shapes, "mixed", 123)
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_array_equal(out(x), np.concatenate([out.parts[0](x), out.parts[1](x)], axis=-1))
    ids = [0, 119, 120, 327, 5]
    np.testing.assert_array_equal(out.rows(ids)[[0, 1, 4]], out.parts[0].rows([0, 119, 5]))
    np.testing.assert_array_equal(out.rows(ids)[[2, 3]], out.parts[1].rows([0, 207]))
    np.testing.assert_allclose(out.rows(ids), m32.output.w[ids], atol=0.02 * np.abs(m32.output.w).max())
    a = m32.forward([1, 5, 9, 42], m32.new_cache(8))
    b = m.forward([1, 5, 9, 42], m.new_cache(8))
    assert 0 < np.abs(a - b).max() < 0.06 * a.std()


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_packed_weights_stay_close_and_keep_the_greedy_ids(name, files, models, fixtures_reference):
    m, m32 = load_model(files[name], weights="packed"), models[name]
    assert all(isinstance(w, Packed) for w in (m.output, m.layers[0].wqkv, m.layers[-1].w_down))
    assert 0.6 < m.weights_nbytes / m32.weights_nbytes < 0.75                # 8/3 + scales of 4 bytes
    a = m32.forward([1, 5, 9, 42], m32.new_cache(8))
    b = m.forward([1, 5, 9, 42], m.new_cache(8))
    assert 0 < np.abs(a - b).max() < 0.12 * a.std()   # measured up to 0.10 (qwen2's random weights)
    r = ref(fixtures_reference, name)
    margins = [s[0][1] - s[1][1] for s in r["greedy_step_top5"]]        # llama.cpp's top-1 minus top-2
    k0 = next((k for k, v in enumerate(margins) if v < 0.1), len(margins))   # qwen2: 0.037 at step 0
    ids, steps = greedy(m, r["prompt_ids"], k0 + 1 if k0 < len(margins) else len(margins))
    assert ids[:k0] == r["greedy_next_ids"][:k0]
    if k0 < len(margins):                                                # a near-tie: either of the two
        assert r["greedy_next_ids"][k0] in np.argsort(-steps[k0])[:2]


def test_int8_keeps_the_vocabulary_int8_by_rows(files, models, monkeypatch):
    """int8 token_embd / output with a scale per row and per column (the "int8" form's vocabulary, and
    the rows of "mixed" past its budget), read in several chunks (the fixture has 328 rows: the column
    scales see them all)."""
    monkeypatch.setattr(weight_rows, "LOAD_CHUNK_BYTES", 100 * 4 * 64)   # 100 rows of 64 float32s per read
    m = load_model(files["llama"], weights="int8")
    m32 = models["llama"]
    for name in ("token_embd", "output"):
        lin, ref32 = getattr(m, name), getattr(m32, name).w                  # (328, 64)
        assert lin.q.dtype == np.int8 and lin.scale.shape == (328, 1) and lin.col.shape == (64,)
        np.testing.assert_allclose(lin.col, np.abs(ref32).max(axis=0) / np.abs(ref32).max(), rtol=1e-6)
        back = lin.q * lin.scale * lin.col                                     # (328, 64)
        assert np.abs(back - ref32).max() <= (lin.scale * lin.col).max() / 2 * 1.001
        assert np.abs(lin.q).max(axis=1).min() == 127                          # each row's scale is its largest
        np.testing.assert_allclose(lin.rows([3, 0, 3]), back[[3, 0, 3]], rtol=1e-6)
        np.testing.assert_allclose(lin(m32.output_norm), back @ m32.output_norm, rtol=1e-5, atol=1e-5)


def test_column_scales_come_from_chunks_spread_over_the_rows(files, models, monkeypatch):
    monkeypatch.setattr(build, "COL_SAMPLE", (3, 40))                 # rows 0-39, 144-183, 288-327 of 328
    w = models["llama"].token_embd.w                                       # (328, 64) float32
    seen = np.abs(np.concatenate([w[0:40], w[144:184], w[288:328]])).max(axis=0)
    col = build.column_scale(files["llama"], ["token_embd.weight"])
    np.testing.assert_allclose(col, seen / seen.max(), rtol=1e-6)
    lin = load_model(files["llama"], weights="int8").token_embd
    assert np.abs(lin.q).max(axis=1).min() == 127                          # rows outside the sample: no clipping
    assert np.abs(lin.q * lin.scale * lin.col - w).max() <= (lin.scale * lin.col).max() / 2 * 1.001


def test_fused_weights_layout(models):
    c, layer = models["qwen3"].config, models["qwen3"].layers[0]
    assert layer.wqkv.shape == (c.n_head * 32 + 2 * c.n_head_kv * 32, c.n_embd) == (256, 64)
    assert layer.w_gate_up.shape == (2 * c.n_ff, c.n_embd) and layer.w_down.shape == (c.n_embd, c.n_ff)
    assert models["qwen2"].output is models["qwen2"].token_embd          # tied: one array
    assert models["llama"].output is not models["llama"].token_embd      # untied output.weight
    assert models["qwen2"].layers[0].bqkv.shape == (128,)


def test_matmul_chunks_give_the_same_product(monkeypatch):
    monkeypatch.setattr(matmul, "USE_BLAS", False)    # the einsum path, as in Pyodide
    rng = np.random.default_rng(1)
    w = rng.standard_normal((300, 64)).astype(np.float32)
    x1 = rng.standard_normal(64).astype(np.float32)
    xt = rng.standard_normal((7, 64)).astype(np.float32)
    want1, wantt = matmul.matmul(w, x1), matmul.matmul(w, xt)
    np.testing.assert_allclose(wantt, xt @ w.T, rtol=1e-5, atol=1e-5)
    for limit in (300 * 64 * 3, 64 * 100, 64 * 30):     # 3 tokens per einsum; rows per token
        monkeypatch.setattr(matmul, "EINSUM_MAX", limit)
        np.testing.assert_allclose(matmul.matmul(w, x1), want1, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(matmul.matmul(w, xt), wantt, rtol=1e-6, atol=1e-6)
    monkeypatch.setattr(matmul, "USE_BLAS", True)
    monkeypatch.setattr(matmul, "BLAS_MIN_TOKENS", 2)
    np.testing.assert_allclose(matmul.matmul(w, x1), want1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(matmul.matmul(w, xt), wantt, rtol=1e-5, atol=1e-5)


def test_einsum_path_gives_the_fixture_logits(files, fixtures_reference, monkeypatch):
    """Pyodide has no BLAS: the einsum kernels must give llama.cpp's logits as well."""
    monkeypatch.setattr(matmul, "USE_BLAS", False)
    r = ref(fixtures_reference, "gemma3")
    m = load_model(files["gemma3"])
    np.testing.assert_allclose(m.forward(r["prompt_ids"], m.new_cache(8)), r["last_pos_logits"], atol=1e-4)

