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
from conftest import TINY, need_kernel

import pyengine.model.transformer as transformer
import pyengine.weights.budget as budget
import pyengine.weights.matmul as matmul
from pyengine.errors import ModelError, PyEngineError
from pyengine.gguf import open_gguf
from pyengine.model import load_model
from pyengine.model.load import budget_matrices, model_tensors, shard_matrices
from pyengine.weights import kernel
from pyengine.weights.forms import Form

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
    """Each fixture as numpy's "auto" holds it (float32 for these tiny models)."""
    return {name: load_model(g, weights="numpy") for name, g in files.items()}


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
    roomy = m.new_cache(4096)
    m.forward(tokens, roomy, logits="none")
    assert roomy.capacity == 384                                          # 1.5 times the first 256


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


@pytest.mark.parametrize("form", ["blocks", "quantized", "compact"])
def test_the_file_codes_give_llama_cpps_logits(form, files, fixtures_reference):
    """The quantized forms multiply the Q4_K_M fixture's own codes as llama.cpp does (activations
    rounded to 8-bit blocks per type, exact integer block sums): its logits to float rounding."""
    if form == "blocks":
        need_kernel()
    r = ref(fixtures_reference, "llama-q4km")
    m = load_model(files["llama-q4km"], weights=form)
    assert m.weights == form and {f.name for f in m.forms.values()} == {form.upper()}
    logits = m.forward(r["prompt_ids"], m.new_cache(64), logits="all")
    np.testing.assert_allclose(logits[-1], r["last_pos_logits"], rtol=0, atol=1e-4)
    for pos, want in enumerate(r["per_position_top5"]):
        assert top(logits[pos]) == [i for i, _ in want]
    ids, _ = greedy(m, r["prompt_ids"], 8)
    assert ids == r["greedy_next_ids"]


def test_the_quantized_forms_hold_less(files, models):
    """Q4_K_M as float32, expanded codes (a code a 16- or 21-bit lane) and compact codes; an F32 file
    stays float32 in every form."""
    f32 = models["llama-q4km"].weights_nbytes
    sizes = {w: load_model(files["llama-q4km"], weights=w).weights_nbytes for w in ("quantized", "compact")}
    assert 0.45 < sizes["quantized"] / f32 < 0.75 and 0.15 < sizes["compact"] / f32 < 0.35
    if kernel.get() is not None:                             # the file's own blocks: its matrices' bytes
        g = files["llama-q4km"]
        held = sum(t.n_bytes for n, t in g.tensors.items() if t.type.name in kernel.TYPES)
        assert held < load_model(g, weights="blocks").weights_nbytes < min(1.05 * held, sizes["compact"])
    assert load_model(files["llama"], weights="compact").weights_nbytes == models["llama"].weights_nbytes


def test_the_budget_picks_the_forms(files):
    g = files["llama-q4km"]
    f32 = load_model(g, weights="f32").weights_nbytes
    assert load_model(g, weights="numpy", budget=f32).weights == "f32"       # float32 when it fits
    compact = load_model(g, weights="compact").weights_nbytes
    quantized = load_model(g, weights="quantized").weights_nbytes
    m = load_model(g, weights="numpy", budget=(compact + quantized) // 2)   # some upgraded, the rest compact
    assert m.weights == "mixed" and compact < m.weights_nbytes <= (compact + quantized) // 2
    assert Form.COMPACT in m.forms.values() and set(m.forms.values()) - {Form.COMPACT}
    assert load_model(g, weights="numpy", budget=compact).weights == "compact"
    with pytest.raises(PyEngineError, match="weights must be"):
        load_model(g, weights="f16")


def test_auto_buys_the_most_time_a_byte_first():
    small = budget.Matrix(("small",), (("Q4_K", 256),), 256)                  # a product's fixed cost dominates
    big = budget.Matrix(("big",), (("Q4_K", 8192),), 2048)
    q6 = budget.Matrix(("q6",), (("Q6_K", 2048),), 8192)                       # a scale every 16 weights
    listed = [small, big, q6]
    compact = sum(budget.matrix_nbytes(m, Form.COMPACT) for m in listed)

    def extra(m, form):
        return budget.matrix_nbytes(m, form) - budget.matrix_nbytes(m, Form.COMPACT)

    def per_byte(m, form):
        return (budget.matrix_ns(m, Form.COMPACT) - budget.matrix_ns(m, form)) / extra(m, form)

    # the small matrix's float32 saves the most a byte; then the others in the model's order
    assert per_byte(small, Form.F32) > max(per_byte(m, f) for m in (big, q6) for f in (Form.QUANTIZED, Form.F32))
    name, forms = budget.plan_forms(listed, "numpy", compact + extra(small, Form.F32))
    assert name == "mixed" and forms == {("small",): Form.F32, ("big",): Form.COMPACT, ("q6",): Form.COMPACT}
    ranked = sorted(((per_byte(m, f), m.key, f) for m in (big, q6) for f in (Form.QUANTIZED, Form.F32)), reverse=True)
    _, key, form = ranked[0]
    top = next(m for m in listed if m.key == key)
    got = budget.plan_forms(listed, "numpy", compact + extra(small, Form.F32) + extra(top, form))[1]
    assert got[key] is form and got[("small",)] is Form.F32
    assert budget.plan_forms(listed, "numpy", compact)[1] == dict.fromkeys(forms, Form.COMPACT)


@pytest.mark.parametrize("form", ["blocks", "f32", "quantized", "compact"])
def test_a_prompt_longer_than_a_batch(form, files):
    """A prompt of more than UBATCH tokens runs in chunks (the first ones without logits): the same last
    logits as the prompt fed in two steps."""
    if form == "blocks":
        need_kernel()
    m = load_model(files["llama-q4km"], weights=form)
    ids = [(7 * i) % m.config.n_vocab for i in range(transformer.UBATCH + 90)]
    whole = m.forward(ids, m.new_cache(len(ids)))
    cache = m.new_cache(len(ids))
    m.forward(ids[:-1], cache, logits="none")
    np.testing.assert_allclose(m.forward(ids[-1:], cache), whole, atol=1e-4)


def test_the_browser_budget_is_three_times_the_file_over_the_workers():
    mib = 2**20
    assert budget.browser_budget(400 * mib, 2) == 600 * mib - budget.RUNTIME_BYTES
    assert budget.browser_budget(400 * mib, 1) == 1200 * mib - budget.RUNTIME_BYTES
    assert budget.browser_budget(mib, 1) == budget.MIN_BUDGET == 64 * mib    # a fixture keeps float32
    assert budget.browser_budget(3 * 2**30, 1) == budget.HEAP_MAX - budget.RUNTIME_BYTES  # a heap at most
    assert budget.browser_budget(6 * 2**30, 4) == budget.HEAP_MAX - budget.RUNTIME_BYTES   # 4.5 GiB: capped
    assert budget.browser_budget(3 * 2**30, 4) == int(3.0 * 3 * 2**30 / 4) - budget.RUNTIME_BYTES


@pytest.mark.parametrize("form", [c for c in budget.CHOICES if c != "auto"])
@pytest.mark.parametrize("name", ["llama", "gemma3", "llama-q4km"])
def test_the_estimate_is_what_a_load_holds(form, name, files):
    """What the heap reservation and the budget count: the weights' bytes, biases and norms aside."""
    g = files[name]
    m = load_model(g, weights=form, budget=1 << 40)
    listed = budget_matrices(shard_matrices(m.config, g.tensors, m.shard), g.tensors)
    parts = [p for layer in m.layers for p in (layer, layer.mixer, layer.ffn)]
    vectors = sum(a.nbytes for p in parts for a in vars(p).values() if isinstance(a, np.ndarray))
    vectors += m.output_norm.nbytes
    assert budget.forms_nbytes(listed, m.forms) == m.weights_nbytes - vectors


def test_fused_weights_layout(models):
    c, layer = models["qwen3"].config, models["qwen3"].layers[0]
    assert layer.mixer.wqkv.shape == (c.n_head * 32 + 2 * c.n_head_kv * 32, c.n_embd) == (256, 64)
    assert layer.ffn.w_gate_up.shape == (2 * c.n_ff, c.n_embd) and layer.ffn.w_down.shape == (c.n_embd, c.n_ff)
    assert models["qwen2"].output is models["qwen2"].token_embd          # tied: one array
    assert models["llama"].output is not models["llama"].token_embd      # untied output.weight
    assert models["qwen2"].layers[0].mixer.bqkv.shape == (128,)


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



def test_a_load_checks_each_tensor_once(monkeypatch):
    """engine.load checks every shape before reading (engine.check), and load_model does not check again."""
    import pyengine.model.load as load
    from pyengine.generation import engine
    calls = []
    check = load._check_tensors
    monkeypatch.setattr(load, "_check_tensors", lambda g, c: calls.append(g) or check(g, c))
    engine.load(str(TINY["llama"]))
    assert len(calls) == 1
    with open_gguf(TINY["llama"]) as g:         # another file object: checked again
        load_model(g)
    assert len(calls) == 2
