"""ModelConfig.from_metadata: every fixture's hyperparameters, llama.cpp's defaults, and clear errors.

The expected values come from tests/fixtures/fixtures-reference.json (what each tiny model was made
with) and from the real models' metadata (RUNTIME.md). Which keys are required follows llama.cpp's
own behaviour, recorded in the reference's ``required_keys_probe`` (each key omitted in turn).
"""

from __future__ import annotations

import math

import pytest
from conftest import TINY

from pyengine.errors import ModelError, UnsupportedArchitectureError
from pyengine.gguf import open_gguf
from pyengine.model.config import ARCHITECTURES, ModelConfig

FIXTURES = ["llama", "llama-q4km", "qwen2", "qwen3", "gemma3"]


def metadata(name: str) -> tuple[dict, dict]:
    with open_gguf(TINY[name]) as g:
        return dict(g.metadata), dict(g.tensors)


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_config_matches_reference(name, fixtures_reference):
    ref = fixtures_reference["fixtures"][name]
    md, tensors = metadata(name)
    c = ModelConfig.from_metadata(md, tensors)
    want = ref["config"]
    assert c.arch == want["arch"]
    assert (c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.n_ff) == (
        want["n_layer"], want["n_embd"], want["n_head"], want["n_head_kv"], want["n_ff"])
    head = want["head_dim"] or want["n_embd"] // want["n_head"]
    assert (c.head_dim_k, c.head_dim_v, c.rope_dim) == (head, head, head)
    assert math.isclose(c.rms_eps, want["eps"], rel_tol=1e-6)  # stored as float32
    assert c.rope_freq_base == want["rope_base"] and c.n_ctx_train == want["ctx"]
    assert c.tied_output == want["tied"]
    assert c.n_vocab == ref["reference"]["n_vocab"] == ref["n_vocab_tokens"]
    assert c.sliding_window == want.get("sliding_window", 0)
    assert c.attn_scale == pytest.approx(1 / math.sqrt(head))


def test_gemma3_layer_pattern():
    c = ModelConfig.from_metadata(metadata("gemma3")[0])
    # llama.cpp set_swa_pattern(6): every sixth layer (il % 6 == 5) is global, the rest slide
    assert c.swa_layers == (True, True, True, True, True, False)
    assert (c.sliding_window, c.rope_freq_base_swa, c.rope_freq_base) == (4, 10000.0, 1e6)


def test_gemma3_pattern_and_swa_base_from_keys():
    md = metadata("gemma3")[0]
    c = ModelConfig.from_metadata({**md, "gemma3.attention.sliding_window_pattern": 3,
                                   "gemma3.rope.freq_base_swa": 5000.0})
    assert c.swa_layers == (True, True, False, True, True, False) and c.rope_freq_base_swa == 5000.0
    flags = [False, True, True, False, True, True]
    c = ModelConfig.from_metadata({**md, "gemma3.attention.sliding_window_pattern": flags})
    assert c.swa_layers == tuple(flags)


def test_gemma3_without_sliding_window_is_all_global():
    md = metadata("gemma3")[0]
    del md["gemma3.attention.sliding_window"]
    c = ModelConfig.from_metadata(md)
    assert c.sliding_window == 0 and not any(c.swa_layers)


def test_real_gemma3_config(gemma3_path):
    with open_gguf(gemma3_path) as g:
        c = ModelConfig.from_metadata(g.metadata, g.tensors)
    assert (c.n_vocab, c.n_embd, c.n_layer, c.n_ff, c.n_head, c.n_head_kv, c.head_dim_k) == (
        262144, 640, 18, 2048, 4, 1, 256)
    assert (c.n_ctx_train, c.sliding_window, c.rope_freq_base, c.tied_output) == (32768, 512, 1e6, True)
    assert [il for il, swa in enumerate(c.swa_layers) if not swa] == [5, 11, 17]
    assert c.attn_scale == 1 / 16  # 1/sqrt(head_dim): query_pre_attn_scalar = 256


def test_real_smollm2_config(smollm2_path):
    with open_gguf(smollm2_path) as g:
        c = ModelConfig.from_metadata(g.metadata, g.tensors)
    assert (c.arch, c.n_vocab, c.n_embd, c.n_layer, c.n_ff, c.n_head, c.n_head_kv, c.head_dim_k) == (
        "llama", 49152, 576, 30, 1536, 9, 3, 64)
    assert (c.rope_freq_base, c.rope_dim, c.sliding_window, c.tied_output) == (100000.0, 64, 0, True)


def _probe_missing_keys(fixtures_reference):
    """(arch, key) for every model key whose absence makes llama.cpp refuse to load the fixture."""
    out = []
    for arch, probes in fixtures_reference["required_keys_probe"].items():
        for what, result in probes.items():
            _, kind, key = what.split(" ", 2)   # "omit key llama.context_length"
            if kind == "key" and key.startswith(arch + ".") and not result["loads"]:
                out.append((arch, key, "key not found" in result["errors"][0]))
    return out


def test_probe_covers_the_required_keys(fixtures_reference):
    keys = {k for _, k, _ in _probe_missing_keys(fixtures_reference)}
    assert "llama.context_length" in keys and "gemma3.attention.key_length" in keys and len(keys) >= 30


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "gemma3"])
def test_keys_llama_cpp_requires_by_name_are_required(arch, fixtures_reference):
    """A key llama.cpp reports as "key not found" is a ModelError naming that key here too."""
    md = metadata(arch)[0]
    for a, key, named in _probe_missing_keys(fixtures_reference):
        if a != arch or not named:
            continue
        with pytest.raises(ModelError, match=key.replace(".", r"\.")):
            ModelConfig.from_metadata({k: v for k, v in md.items() if k != key})


def test_head_count_and_ffn_length_are_required():
    md = metadata("qwen2")[0]
    for key in ("qwen2.attention.head_count", "qwen2.feed_forward_length"):
        with pytest.raises(ModelError, match="missing metadata key '" + key.replace(".", r"\.")):
            ModelConfig.from_metadata({k: v for k, v in md.items() if k != key})


def test_defaults_as_llama_cpp():
    md = metadata("qwen3")[0]
    for key in ("qwen3.attention.head_count_kv", "qwen3.attention.key_length", "qwen3.attention.value_length",
                "qwen3.rope.freq_base"):
        del md[key]
    c = ModelConfig.from_metadata(md)
    assert (c.n_head_kv, c.head_dim_k, c.head_dim_v, c.rope_dim, c.rope_freq_base) == (4, 16, 16, 16, 10000.0)
    assert c.rope_scaling_type == "linear" and c.rope_freq_scale == 1.0


def test_vocab_from_tokens_when_no_vocab_size():
    md = metadata("llama")[0]
    del md["llama.vocab_size"]
    assert ModelConfig.from_metadata(md).n_vocab == 328
    del md["tokenizer.ggml.tokens"]
    with pytest.raises(ModelError, match="vocab_size"):
        ModelConfig.from_metadata(md)


def test_linear_rope_scaling():
    md = metadata("llama")[0]
    c = ModelConfig.from_metadata({**md, "llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0})
    assert c.rope_freq_scale == 0.25
    assert ModelConfig.from_metadata({**md, "llama.rope.scale_linear": 2.0}).rope_freq_scale == 0.5   # older key
    with pytest.raises(ModelError, match="yarn.*supported: none, linear"):
        ModelConfig.from_metadata({**md, "llama.rope.scaling.type": "yarn"})


def test_unsupported_architecture_lists_the_supported():
    md = metadata("llama")[0]
    with pytest.raises(UnsupportedArchitectureError, match="'mamba'.*supported: llama, qwen2, qwen3, gemma3"):
        ModelConfig.from_metadata({**md, "general.architecture": "mamba"})
    with pytest.raises(ModelError, match="None"):
        ModelConfig.from_metadata({})
    with pytest.raises(ModelError, match=r"\['llama'\]"):
        ModelConfig.from_metadata({**md, "general.architecture": ["llama"]})
    assert list(ARCHITECTURES) == ["llama", "qwen2", "qwen3", "gemma3", "gemma2", "phi3", "granite", "olmo2",
                                   "smollm3", "exaone4", "lfm2", "qwen35", "gemma4"]


@pytest.mark.parametrize("key, value, message", [
    ("llama.block_count", "2", "must be a number"),
    ("llama.block_count", True, "must be a number"),
    ("llama.block_count", 2.5, "must be an integer"),
    ("llama.block_count", 0, "must be positive"),
    ("llama.block_count", 10**9, "at most 512 layers"),
    ("llama.attention.head_count_kv", 3, "must divide head_count"),
    ("llama.rope.freq_base", float("nan"), "must be finite"),
    ("llama.rope.dimension_count", 8, "equal to the head size"),
    ("llama.attention.head_count", [4, 4, 2], "per-layer"),
    ("llama.attention.head_count_kv", [2, 1], "per-layer"),
])
def test_bad_values_are_clear_errors(key, value, message):
    md = metadata("llama")[0]
    with pytest.raises(ModelError, match=message):
        ModelConfig.from_metadata({**md, key: value})


def lfm2_metadata() -> dict:
    with open_gguf(TINY["qwen2"].with_name("tiny-lfm2.gguf")) as g:
        return dict(g.metadata)


def test_lfm2_short_convolutions_are_the_layers_without_kv_heads():
    """llama.cpp llama_model_lfm2::load_arch_hparams: is_recr(il) = n_head_kv(il) == 0."""
    c = ModelConfig.from_metadata(lfm2_metadata())
    assert c.conv_layers == (True, True, False, True) and c.n_head_kv == 2 and c.shortconv_l_cache == 3
    assert c.spec.output_norm == "token_embd_norm"
    c = ModelConfig.from_metadata({**lfm2_metadata(), "lfm2.attention.head_count_kv": 2})
    assert c.conv_layers == (False,) * 4 and c.n_head_kv == 2


@pytest.mark.parametrize("key, value, message", [
    ("lfm2.shortconv.l_cache", None, "missing metadata key 'lfm2.shortconv.l_cache'"),
    ("lfm2.shortconv.l_cache", 1, "must be at least 2"),
    ("lfm2.attention.head_count_kv", [0, 2, 0], "has 3 values, expected one per layer"),
    ("lfm2.attention.head_count_kv", [0, 2, 0, 1], "per-layer values"),
    ("lfm2.attention.head_count_kv", [0, 2, 0, "2"], "must be a number"),
    ("lfm2.attention.sliding_window", 8, "sliding window on lfm2 is not supported"),
])
def test_lfm2_bad_values_are_clear_errors(key, value, message):
    md = {k: v for k, v in lfm2_metadata().items() if k != key}
    with pytest.raises(ModelError, match=message):
        ModelConfig.from_metadata(md if value is None else {**md, key: value})


def gemma4_metadata() -> dict:
    with open_gguf(TINY["qwen2"].with_name("tiny-gemma4.gguf")) as g:
        return dict(g.metadata)


def test_gemma4_layers_their_heads_ffn_and_shared_kv():
    """llama.cpp llama_model_gemma4::load_arch_hparams and create_memory's reuse: the last 2 layers read
    the KV of layer 2 (sliding) and 3 (full); full layers have heads of 32, sliding ones 16."""
    c = ModelConfig.from_metadata(gemma4_metadata())
    assert c.swa_layers == (True, False, True, False, True, False) and c.sliding_window == 3
    assert c.kv_layers == (0, 1, 2, 3, 2, 3)
    assert [c.head_dims(il) for il in range(2)] == [(16, 16), (32, 32)] and (c.rope_dim, c.rope_dim_swa) == (32, 16)
    assert c.n_ff == 96 and c.ffn_mult == (1, 1, 1, 1, 2, 2) and c.n_embd_per_layer == 32
    assert c.attn_scale == 1.0 and c.final_logit_softcap == 5.0 and c.rope_freq_base_swa == 10000.0


@pytest.mark.parametrize("key, value, message", [
    ("gemma4.attention.shared_kv_layers", 5, "at most block_count - 2 = 4 layers can share"),
    ("gemma4.attention.sliding_window_pattern", [True, False, False, True, True, False],
     "layer 4 shares the KV of layer 2, which is not of its kind"),
    ("gemma4.feed_forward_length", [96, 96, 96, 96, 150, 192], "must be multiples of the smallest"),
    ("gemma4.feed_forward_length", [96, 96, 0, 96, 192, 192], "must be in 1.."),
    ("gemma4.feed_forward_length", [96, 96], "has 2 values, expected one per layer"),
    ("gemma4.embedding_length_per_layer_input", 1 << 20, "must be in 0..65536"),
    ("gemma4.embedding_length_per_layer_input", None, "missing metadata key"),
    ("gemma4.attention.key_length_swa", 0, "must be in 1..65536"),
    ("gemma4.rope.dimension_count_swa", 64, "dimension_count_swa' = 64 must be even and at most"),
    ("gemma4.nextn_predict_layers", 6, r"nextn_predict_layers' = 6 must be in 0\.\.5"),
])
def test_gemma4_bad_values_are_clear_errors(key, value, message):
    md = {k: v for k, v in gemma4_metadata().items() if k != key}
    with pytest.raises(ModelError, match=message):
        ModelConfig.from_metadata(md if value is None else {**md, key: value})
