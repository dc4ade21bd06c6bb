"""Make tests/golden/arch_reference.json: llama.cpp's logits and greedy ids on the tiny fixtures of the
families added after the shared ones, gemma4 among them (tests/fixtures/make_arch_fixtures.py).

Run by hand (needs llama-cpp-python 0.3.36; ~5 s):

    python tests/fixtures/make_arch_fixtures.py      # the fixtures (byte-reproducible)
    python tests/golden/make_arch_golden.py          # rewrites arch_reference.json

For each fixture, as stored (F32) and as ``gguf_write.quantized_copy`` makes it (Q8_0 matrices, gguf-py's
quantizer, deterministic; its sha256 is recorded so the test knows it made the same file), llama.cpp
(CPU, 1 thread, F32 KV cache, flash attention off, ``logits_all``) evaluates the prompt ids ``PROMPT``:

- ``prompt_logits``: the logits of every prompt position (4 x n_vocab; the Q8_0 copy: the last only),
  float32 to 7 significant digits;
- ``greedy_ids``: 8 ids decoded one at a time, each the argmax of the raw logits (lowest id on ties);
  ``margins``: each step's top-1 minus top-2 logit; ``last_logits`` (F32 only): the 8th step's logits.

The hybrid qwen35 fixture goes to tests/golden/qwen35_reference.json, the same records and, beside
them, ``long``: the logits of every position of the ``LONG`` prompt (80 seeded ids: a DeltaNet chunk
of 64 and 16 more; the Q8_0 copy: the last position only).
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent), str(HERE.parent / "fixtures")]

from gguf_write import quantized_copy  # noqa: E402  (tests/gguf_write.py)
from make_arch_fixtures import FAMILIES, QWEN35_SEED  # noqa: E402  (tests/fixtures/)

ARCHS = [*FAMILIES, "gemma4"]                # the fixtures of arch_reference.json (gemma4: gemma4_bytes)

FIXTURES = HERE.parent / "fixtures"
PROMPT = [1, 5, 9, 42]
LONG = [int(i) for i in np.random.default_rng(QWEN35_SEED + 35).integers(1, 300, 80)]
N_GREEDY = 8
GGML_TYPE_F32 = 0


def floats(a: np.ndarray) -> list:
    """float32 values as JSON numbers of 7 significant digits (within 6e-8 of each, relatively)."""
    return [float(f"{x:.7g}") for x in np.asarray(a, np.float32).reshape(-1)]


def llama(path: Path, n_ctx: int = 64):
    from llama_cpp import Llama
    return Llama(str(path), n_ctx=n_ctx, n_threads=1, n_threads_batch=1, logits_all=True, verbose=False,
                 type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False)


def run(path: Path, full: bool) -> dict:
    llm = llama(path)
    llm.eval(PROMPT)
    prompt_logits = np.array(llm.scores[:len(PROMPT)], np.float32)
    logits, ids, margins = prompt_logits[-1], [], []
    for _ in range(N_GREEDY):
        top2 = np.sort(logits)[-2:]
        margins.append(round(float(top2[1] - top2[0]), 6))
        ids.append(int(np.argmax(logits)))
        llm.eval([ids[-1]])
        logits = np.array(llm.scores[llm.n_tokens - 1], np.float32)
    out = {"sha256": hashlib.sha256(path.read_bytes()).hexdigest(), "greedy_ids": ids, "margins": margins}
    if full:
        return {**out, "prompt_logits": [floats(row) for row in prompt_logits], "last_logits": floats(logits)}
    return {**out, "prompt_logits": [floats(prompt_logits[-1])]}


def run_long(path: Path, full: bool) -> list:
    """The logits of every position of ``LONG`` (full) or of its last one."""
    llm = llama(path, 256)
    llm.eval(LONG)
    logits = np.array(llm.scores[:len(LONG)], np.float32)
    return [floats(row) for row in (logits if full else logits[-1:])]


def qwen35(tmp: str) -> None:
    src, q8 = FIXTURES / "tiny-qwen35.gguf", Path(tmp) / "tiny-qwen35-q8_0.gguf"
    quantized_copy(src, q8, "Q8_0")
    import llama_cpp
    out = {"prompt_ids": PROMPT, "long_ids": LONG, "llama_cpp_python": llama_cpp.__version__,
           "f32": {**run(src, True), "long": run_long(src, True)},
           "q8_0": {**run(q8, False), "long": run_long(q8, False)}}
    print("qwen35", out["f32"]["greedy_ids"], flush=True)
    path = HERE / "qwen35_reference.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print("wrote", path, path.stat().st_size, "bytes")


def main() -> None:
    import llama_cpp
    out = {"prompt_ids": PROMPT, "llama_cpp_python": llama_cpp.__version__, "fixtures": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ARCHS:
            src = FIXTURES / f"tiny-{arch}.gguf"
            q8 = Path(tmp) / f"tiny-{arch}-q8_0.gguf"
            quantized_copy(src, q8, "Q8_0")
            out["fixtures"][arch] = {"f32": run(src, True), "q8_0": run(q8, False)}
            print(arch, out["fixtures"][arch]["f32"]["greedy_ids"], flush=True)
        qwen35(tmp)
    path = HERE / "arch_reference.json"
    path.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print("wrote", path, path.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
