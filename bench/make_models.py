"""Models of real size with random weights, for the benchmarks: the shapes of Qwen2.5-0.5B, Llama-3.2-1B,
Llama-3.2-3B (``llama-3b``, made only when named: past 2 GiB of a worker's heap), Qwen3.5-0.8B (the Gated
DeltaNet hybrid: ``qwen35-0.8b``) and Gemma 4 E2B (``gemma4-e2b``: per-layer embeddings, shared KV layers,
full-attention heads of 512).

    python bench/make_models.py [qwen2-0.5b|llama-1b|llama-3b|qwen35-0.8b|gemma4-e2b ...] [--out models/bench]
                                [--type Q4_K_M]

Speed and memory depend on the shapes and the ggml types, not on the values, so each model is
written with seeded random float16 weights (gguf-py's writer), then quantized by llama.cpp's own
quantizer (``llama_cpp.llama_model_quantize``, llama-cpp-python) to Q4_K_M, as real downloads are;
without llama-cpp-python, gguf-py's Q4_0 quantizer stands in.
The tokenizer is SmolLM2-135M-Instruct's (byte-level BPE, 49,152 tokens, ChatML template; from
models/, see build_scripts/fetch_models.py), padded with unused tokens to the shape's vocabulary.
Each model is written once: a file that exists is kept. Tensors are drawn and written a few rows at a
time (the float16 Gemma 4 E2B is ~10 GB), so memory stays near one chunk of :data:`CHUNK` values.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "build_scripts"))

from fetch_models import MODELS, fetch

from pyengine.gguf import open_gguf


@dataclass(frozen=True)
class Shape:
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    n_vocab: int
    n_ctx: int
    rope_base: float
    rms_eps: float
    qkv_bias: bool
    hybrid: tuple = ()      # qwen35: (head size, rope dims, DeltaNet key heads, value heads, their head size)
    gemma4: Gemma4 | None = None


@dataclass(frozen=True)
class Gemma4:
    """What a gemma4 shape adds (HF config names in the comments)."""
    head_swa: int           # head_dim: the sliding layers' heads
    head_full: int          # global_head_dim: the full-attention layers' heads
    period: int             # layer_types: period - 1 sliding layers, then a full one
    window: int             # sliding_window
    n_shared: int           # num_kv_shared_layers: the last layers, reading earlier layers' KV
    per_layer: int          # hidden_size_per_layer_input
    rope_base_swa: float    # the sliding layers' rope_theta
    rope_partial: float     # the full layers' partial_rotary_factor ("proportional" rope)
    softcap: float          # final_logit_softcapping

    def swa(self, n_layer: int) -> list[bool]:
        return [(il + 1) % self.period != 0 for il in range(n_layer)]


# The shapes of the real models (their config.json), with tied embeddings as both have.
SHAPES = {
    "qwen2-0.5b": Shape("qwen2", 24, 896, 4864, 14, 2, 151_936, 32_768, 1e6, 1e-6, True),
    "llama-1b": Shape("llama", 16, 2048, 8192, 32, 8, 49_152, 131_072, 5e5, 1e-5, False),
    "llama-3b": Shape("llama", 28, 3072, 8192, 24, 8, 128_256, 131_072, 5e5, 1e-5, False),
    "qwen35-0.8b": Shape("qwen35", 24, 1024, 3584, 8, 2, 248_320, 262_144, 1e7, 1e-6, False, (256, 64, 16, 16, 128)),
    "gemma4-e2b": Shape("gemma4", 35, 1536, 6144, 8, 1, 262_144, 131_072, 1e6, 1e-6, False,
                        gemma4=Gemma4(256, 512, 5, 512, 20, 256, 1e4, 0.25, 30.0)),
}
ON_REQUEST = ("llama-3b",)                   # made only when named (6.4 GB of float16 on the way)
SSM_D_CONV = 4                              # qwen35's conv taps
ROPE_SECTIONS = [11, 11, 10, 0]             # qwen35's rope pairs per section (time, height, width, extra)
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
                  "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                  "tokenizer.ggml.padding_token_id", "tokenizer.chat_template")
STD = 0.02                                  # the weights' standard deviation
CHUNK = 1 << 24                             # values drawn at a time (64 MB of float32)


def tensors(s: Shape):
    """Yield (GGUF name, numpy shape (rows, n_in)) of every tensor of shape ``s``."""
    if s.hybrid:
        yield from qwen35_tensors(s)
        return
    if s.gemma4:
        yield from gemma4_tensors(s)
        return
    hd = s.n_embd // s.n_head
    yield "token_embd.weight", (s.n_vocab, s.n_embd)
    yield "output_norm.weight", (s.n_embd,)
    for il in range(s.n_layer):
        p = f"blk.{il}."
        yield p + "attn_norm.weight", (s.n_embd,)
        for name, rows in (("attn_q", s.n_head * hd), ("attn_k", s.n_head_kv * hd), ("attn_v", s.n_head_kv * hd)):
            yield p + name + ".weight", (rows, s.n_embd)
            if s.qkv_bias:
                yield p + name + ".bias", (rows,)
        yield p + "attn_output.weight", (s.n_embd, s.n_head * hd)
        yield from ffn_tensors(s, p, "ffn_norm")


def ffn_tensors(s: Shape, p: str, norm: str, n_ff: int = 0):
    n_ff = n_ff or s.n_ff
    yield p + norm + ".weight", (s.n_embd,)
    yield p + "ffn_gate.weight", (n_ff, s.n_embd)
    yield p + "ffn_up.weight", (n_ff, s.n_embd)
    yield p + "ffn_down.weight", (s.n_embd, n_ff)


def qwen35_tensors(s: Shape):
    """The tensors of a qwen35 shape (llama.cpp ``llama_model_qwen35::load_arch_tensors``): Gated DeltaNet
    layers, and gated full attention every 4th."""
    hd, _, hk, hv, d = s.hybrid
    e, conv = s.n_embd, 2 * hk * d + hv * d
    yield "token_embd.weight", (s.n_vocab, e)
    yield "output_norm.weight", (e,)
    for il in range(s.n_layer):
        p = f"blk.{il}."
        yield p + "attn_norm.weight", (e,)
        if (il + 1) % 4:
            yield from ((p + "attn_qkv.weight", (conv, e)), (p + "attn_gate.weight", (hv * d, e)),
                        (p + "ssm_beta.weight", (hv, e)), (p + "ssm_alpha.weight", (hv, e)),
                        (p + "ssm_conv1d.weight", (conv, SSM_D_CONV)), (p + "ssm_dt.bias", (hv,)),
                        (p + "ssm_a", (hv,)), (p + "ssm_norm.weight", (d,)), (p + "ssm_out.weight", (e, hv * d)))
        else:
            yield from ((p + "attn_q.weight", (2 * s.n_head * hd, e)), (p + "attn_k.weight", (s.n_head_kv * hd, e)),
                        (p + "attn_v.weight", (s.n_head_kv * hd, e)), (p + "attn_q_norm.weight", (hd,)),
                        (p + "attn_k_norm.weight", (hd,)), (p + "attn_output.weight", (e, s.n_head * hd)))
        yield from ffn_tensors(s, p, "post_attention_norm")


def qwen35_keys(w, s: Shape) -> None:
    """The keys a qwen35 shape adds (llama.cpp ``llama_model_qwen35::load_arch_hparams``)."""
    import gguf
    hd, n_rot, hk, hv, d = s.hybrid
    vt, a = gguf.GGUFValueType, s.arch
    for key, value in (("attention.key_length", hd), ("attention.value_length", hd), ("rope.dimension_count", n_rot),
                       ("full_attention_interval", 4), ("ssm.conv_kernel", SSM_D_CONV), ("ssm.state_size", d),
                       ("ssm.group_count", hk), ("ssm.time_step_rank", hv), ("ssm.inner_size", hv * d)):
        w.add_key_value(f"{a}.{key}", value, vt.UINT32)
    w.add_key_value(f"{a}.rope.dimension_sections", ROPE_SECTIONS, vt.ARRAY, sub_type=vt.INT32)


def gemma4_n_ff(s: Shape) -> list[int]:
    """feed_forward_length per layer: the shared-KV layers' FFN double-wide (use_double_wide_mlp)."""
    return [s.n_ff * (1 if il < s.n_layer - s.gemma4.n_shared else 2) for il in range(s.n_layer)]


def gemma4_tensors(s: Shape):
    """The tensors of a gemma4 shape (llama.cpp ``llama_model_gemma4::load_arch_tensors``): the per-layer
    token table and its projection, and blocks whose k, v and k norm exist only where the layer keeps its KV."""
    g, e = s.gemma4, s.n_embd
    pl = g.per_layer * s.n_layer
    yield "token_embd.weight", (s.n_vocab, e)
    yield "per_layer_token_embd.weight", (s.n_vocab, pl)
    yield "per_layer_model_proj.weight", (pl, e)
    yield "per_layer_proj_norm.weight", (g.per_layer,)
    yield "output_norm.weight", (e,)
    yield "rope_freqs.weight", (g.head_full // 2,)
    for il, (swa, n_ff) in enumerate(zip(g.swa(s.n_layer), gemma4_n_ff(s))):
        p, hd, own_kv = f"blk.{il}.", g.head_swa if swa else g.head_full, il < s.n_layer - g.n_shared
        yield p + "attn_norm.weight", (e,)
        yield p + "attn_q.weight", (s.n_head * hd, e)
        if own_kv:
            yield from ((p + "attn_k.weight", (s.n_head_kv * hd, e)), (p + "attn_v.weight", (s.n_head_kv * hd, e)))
        yield p + "attn_q_norm.weight", (hd,)
        if own_kv:
            yield p + "attn_k_norm.weight", (hd,)
        yield from ((p + "attn_output.weight", (e, s.n_head * hd)), (p + "post_attention_norm.weight", (e,)))
        yield from ffn_tensors(s, p, "ffn_norm", n_ff)
        yield from ((p + "post_ffw_norm.weight", (e,)), (p + "inp_gate.weight", (g.per_layer, e)),
                    (p + "proj.weight", (e, g.per_layer)), (p + "post_norm.weight", (e,)),
                    (p + "layer_output_scale.weight", (1,)))


def gemma4_keys(w, s: Shape) -> None:
    """The keys a gemma4 shape adds (llama.cpp ``llama_model_gemma4::load_arch_hparams``, as the converter's
    ``Gemma4Model`` writes them)."""
    g = s.gemma4
    w.add_key_length(g.head_full)
    w.add_value_length(g.head_full)
    w.add_key_length_swa(g.head_swa)
    w.add_value_length_swa(g.head_swa)
    w.add_rope_dimension_count(g.head_full)               # "proportional": rope_freqs turns the rest off
    w.add_rope_dimension_count_swa(g.head_swa)
    w.add_rope_freq_base_swa(g.rope_base_swa)
    w.add_sliding_window(g.window)
    w.add_sliding_window_pattern(g.swa(s.n_layer))
    w.add_shared_kv_layers(g.n_shared)
    w.add_embedding_length_per_layer_input(g.per_layer)
    w.add_final_logit_softcapping(g.softcap)


def fixed(s: Shape, name: str, shape: tuple) -> np.ndarray:
    """A vector's float32 values: norms and output scales 1, ``ssm_a`` -1 (-exp(A_log): decays below 1),
    gemma4's rope_freqs 1 on the full heads' rotated pairs and 1e30 on the rest (the converter's), else 0.
    gemma4's q·k is unscaled (its trained q and k norms scale it), so there its q and k norms are
    head_dim^-1/4: q·k of unit variance, as 1/sqrt(head_dim) gives elsewhere (norms of 1 would give scores
    of std 16 to 22, a near-argmax softmax that turns any rounding into other tokens)."""
    if name == "rope_freqs.weight":
        n_rot = int(s.gemma4.head_full * s.gemma4.rope_partial) // 2
        return np.array([1.0] * n_rot + [1e30] * (shape[0] - n_rot), np.float32)
    if s.gemma4 and name.endswith(("attn_q_norm.weight", "attn_k_norm.weight")):
        return np.full(shape, shape[0] ** -0.25, np.float32)
    if name.endswith(("norm.weight", "layer_output_scale.weight")):
        return np.ones(shape, np.float32)
    return np.full(shape, -1.0 if name.endswith("ssm_a") else 0.0, np.float32)


class Drawn:
    """One tensor's values, drawn from ``rng`` and written :data:`CHUNK` values at a time by gguf-py's
    ``write_tensor_data`` (which needs only ``nbytes`` and ``tofile``): a float32 vector (:func:`fixed`), a
    float32 conv (N(0, 0.5)), or a matrix N(0, STD) in float16 or Q4_0."""

    def __init__(self, s: Shape, name: str, shape: tuple, rng, q4_0: bool):
        import gguf
        import gguf.quants
        self.name, self.shape, self.rng, self.s = name, shape, rng, s
        self.f32 = len(shape) == 1 or name.endswith("ssm_conv1d.weight")     # float32 as converted
        self.raw = None if self.f32 or not q4_0 else gguf.GGMLQuantizationType.Q4_0
        self.dtype = np.dtype(np.float32 if self.f32 else np.uint8 if self.raw else np.float16)
        self.byte_shape = gguf.quants.quant_shape_to_byte_shape(shape, self.raw) if self.raw else shape
        self.nbytes = int(np.prod(self.byte_shape)) * self.dtype.itemsize

    def chunks(self):
        import gguf.quants
        if len(self.shape) == 1:
            yield fixed(self.s, self.name, self.shape)
            return
        rows, n_in = self.shape
        step = max(1, CHUNK // n_in)
        for r in range(0, rows, step):
            a = self.rng.standard_normal((min(step, rows - r), n_in), np.float32)
            if self.f32:
                yield a * 0.5
            else:
                a *= STD
                yield gguf.quants.quantize(a, self.raw) if self.raw else a.astype(np.float16)

    def tofile(self, fout) -> None:
        for a in self.chunks():
            a.tofile(fout)


def write_random(name: str, s: Shape, path: Path, tokenizer: dict, q4_0: bool = False) -> None:
    """The model with vectors as :func:`fixed` and every matrix N(0, STD), seeded by its name: float16, or
    Q4_0 (``q4_0``, by gguf-py's quantizer); written tensor by tensor, a chunk of rows at a time."""
    import gguf

    rng = np.random.default_rng(sum(map(ord, name)))
    w = gguf.GGUFWriter(str(path), s.arch)
    w.add_name(f"random {name}")
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(gemma4_n_ff(s) if s.gemma4 else s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_vocab_size(s.n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if q4_0 else gguf.LlamaFileType.MOSTLY_F16)
    if s.hybrid:
        qwen35_keys(w, s)
    if s.gemma4:
        gemma4_keys(w, s)
    for key, value in tokenizer.items():
        w.add_key_value(key, value[0], value[1])
    drawn = [Drawn(s, tname, shape, rng, q4_0) for tname, shape in tensors(s)]
    for d in drawn:
        w.add_tensor_info(d.name, d.byte_shape, d.dtype, d.nbytes, raw_dtype=d.raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for d in drawn:
        w.write_tensor_data(d)
    w.close()


def smollm2_tokenizer(n_vocab: int) -> dict:
    """SmolLM2's tokenizer keys as {key: (value, gguf type)}, its vocab padded to ``n_vocab`` with
    unused tokens."""
    import gguf

    path = fetch(MODELS["smollm2"], ROOT / "models")
    with open_gguf(path) as g:
        meta, types = g.metadata, g.value_types
        tokens = list(meta["tokenizer.ggml.tokens"])
        token_type = [int(t) for t in meta["tokenizer.ggml.token_type"]]
        merges = list(meta["tokenizer.ggml.merges"])
        scalars = {k: meta[k] for k in TOKENIZER_KEYS if k in meta}
    pad = n_vocab - len(tokens)
    tokens += [f"<|unused_{i}|>" for i in range(pad)]
    token_type += [5] * pad                                         # UNUSED
    vt = gguf.GGUFValueType
    out = {"tokenizer.ggml.tokens": (tokens, vt.ARRAY), "tokenizer.ggml.token_type": (token_type, vt.ARRAY),
           "tokenizer.ggml.merges": (merges, vt.ARRAY)}
    for k, v in scalars.items():
        out[k] = (v, vt.STRING if types[k] == "STRING" else vt.UINT32)
    return out


def quantize(src: Path, dst: Path, type_name: str) -> None:
    """``src`` (float16) to ``dst`` in ``type_name`` by llama.cpp's quantizer (2 threads)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{type_name}")
    params.nthread = 2
    if llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params) != 0:
        raise SystemExit(f"error: llama.cpp could not quantize {src} to {type_name}")


def make(name: str, out_dir: Path, type_name: str) -> Path:
    """The quantized model ``name`` in ``out_dir`` (written when missing); returns its path."""
    s = SHAPES[name]
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        type_name = "Q4_0"
    dst = out_dir / f"{name}-random-{type_name.lower()}.gguf"
    if dst.exists():
        return dst
    out_dir.mkdir(parents=True, exist_ok=True)
    if type_name == "Q4_0" and "llama_cpp" not in sys.modules:
        print(f"writing {dst} (Q4_0 by gguf-py: llama-cpp-python is not installed)", flush=True)
        write_random(name, s, dst, smollm2_tokenizer(s.n_vocab), q4_0=True)
        return dst
    src = out_dir / f"{name}-random-f16.gguf"
    if not src.exists():
        print(f"writing {src} (float16)", flush=True)
        write_random(name, s, src, smollm2_tokenizer(s.n_vocab))
    print(f"quantizing to {dst} ({type_name})", flush=True)
    quantize(src, dst, type_name)
    src.unlink()
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", default=[n for n in SHAPES if n not in ON_REQUEST], choices=list(SHAPES))
    ap.add_argument("--out", default=str(ROOT / "models" / "bench"))
    ap.add_argument("--type", default="Q4_K_M")
    args = ap.parse_args()
    for name in args.names:
        print(make(name, Path(args.out), args.type))


if __name__ == "__main__":
    main()
