"""Models of real size with random weights, for the benchmarks: the shapes of Qwen2.5-0.5B, Llama-3.2-1B and
Qwen3.5-0.8B (the Gated DeltaNet hybrid: ``qwen35-0.8b``).

    python bench/make_models.py [qwen2-0.5b|llama-1b|qwen35-0.8b ...] [--out models/bench] [--type Q4_K_M]

Speed and memory depend on the shapes and the ggml types, not on the values, so each model is
written with seeded random float16 weights (gguf-py's writer), then quantized by llama.cpp's own
quantizer (``llama_cpp.llama_model_quantize``, llama-cpp-python) to Q4_K_M, as real downloads are;
without llama-cpp-python, gguf-py's Q4_0 quantizer stands in.
The tokenizer is SmolLM2-135M-Instruct's (byte-level BPE, 49,152 tokens, ChatML template; from
models/, see build_scripts/fetch_models.py), padded with unused tokens to the shape's vocabulary.
Each model is written once: a file that exists is kept.
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


# The shapes of the real models (their config.json), with tied embeddings as both have.
SHAPES = {
    "qwen2-0.5b": Shape("qwen2", 24, 896, 4864, 14, 2, 151_936, 32_768, 1e6, 1e-6, True),
    "llama-1b": Shape("llama", 16, 2048, 8192, 32, 8, 49_152, 131_072, 5e5, 1e-5, False),
    "qwen35-0.8b": Shape("qwen35", 24, 1024, 3584, 8, 2, 248_320, 262_144, 1e7, 1e-6, False, (256, 64, 16, 16, 128)),
}
SSM_D_CONV = 4                              # qwen35's conv taps
ROPE_SECTIONS = [11, 11, 10, 0]             # qwen35's rope pairs per section (time, height, width, extra)
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id",
                  "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                  "tokenizer.ggml.padding_token_id", "tokenizer.chat_template")
STD = 0.02                                  # the weights' standard deviation


def tensors(s: Shape):
    """Yield (GGUF name, numpy shape (rows, n_in)) of every tensor of shape ``s``."""
    if s.hybrid:
        yield from qwen35_tensors(s)
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


def ffn_tensors(s: Shape, p: str, norm: str):
    yield p + norm + ".weight", (s.n_embd,)
    yield p + "ffn_gate.weight", (s.n_ff, s.n_embd)
    yield p + "ffn_up.weight", (s.n_ff, s.n_embd)
    yield p + "ffn_down.weight", (s.n_embd, s.n_ff)


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


def write_random(name: str, s: Shape, path: Path, tokenizer: dict, q4_0: bool = False) -> None:
    """The model with norms 1, biases 0 and every matrix N(0, STD), seeded by its name: float16, or
    Q4_0 (``q4_0``, by gguf-py's quantizer)."""
    import gguf
    import gguf.quants

    rng = np.random.default_rng(sum(map(ord, name)))
    w = gguf.GGUFWriter(str(path), s.arch)
    w.add_name(f"random {name}")
    w.add_context_length(s.n_ctx)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_vocab_size(s.n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if q4_0 else gguf.LlamaFileType.MOSTLY_F16)
    if s.hybrid:
        qwen35_keys(w, s)
    for key, value in tokenizer.items():
        w.add_key_value(key, value[0], value[1])
    for tname, shape in tensors(s):
        if len(shape) == 1 or tname.endswith("ssm_conv1d.weight"):        # float32 as converted
            a = np.ones(shape, np.float32) if tname.endswith("norm.weight") else np.zeros(shape, np.float32)
            a = -a - 1 if tname.endswith("ssm_a") else a                     # -exp(A_log): decays below 1
            w.add_tensor(tname, rng.standard_normal(shape, np.float32) * 0.5 if len(shape) == 2 else a)
            continue
        a = rng.standard_normal(shape, np.float32) * STD
        if q4_0:
            w.add_tensor(tname, gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q4_0), raw_shape=shape,
                         raw_dtype=gguf.GGMLQuantizationType.Q4_0)
        else:
            w.add_tensor(tname, a.astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
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
    ap.add_argument("names", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--out", default=str(ROOT / "models" / "bench"))
    ap.add_argument("--type", default="Q4_K_M")
    args = ap.parse_args()
    for name in args.names:
        print(make(name, Path(args.out), args.type))


if __name__ == "__main__":
    main()
