"""Model speed and memory in CPython: load, prefill and decode tok/s, peak RSS (a benchmark, not a test).

    python bench/bench_model.py [MODEL.gguf ...] [--prompt 128] [--gen 64] [--weights auto|f32|mixed|int8|packed]
                                [--threads 1] [--pyodide] [--json]

For each model (default: both real models in models/), in a fresh child process so that its peak
RSS is its own: the load time (open + read + dequantize every tensor), the prefill of a fixed
128-token prompt (logits at the last position only), 64 greedy decode steps with the KV cache, and
the process's peak resident memory. ``--threads`` sets OPENBLAS_NUM_THREADS for the child (the
prefill's BLAS; default 1, to compare with llama.cpp on one thread). ``--pyodide`` runs the same
measurement in Pyodide under Node instead (tests/node/run_pyodide.mjs with the built static/'s
runtime and the work tree's pyengine; the memory is then the wasm heap, which only grows, so its
size is the peak). Numbers on a shared
machine vary run to run: run it on a quiet one, and more than once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from pyengine.gguf import open_gguf
from pyengine.model import load_model
from pyengine.weights.budget import WEIGHT_FORMS

DEFAULT_MODELS = ["models/gemma-3-270m-q4_k_m.gguf", "models/SmolLM2-135M-Instruct.Q4_1.gguf"]


def peak_memory_mb() -> float:
    """Peak resident memory of this process, or in Pyodide the wasm heap's size (MB of 10**6 bytes, as
    file_mb: the heap grows by up to 20% at a time, so it overshoots what is live)."""
    if sys.platform == "emscripten":
        import pyodide_js
        return pyodide_js._module.HEAP8.length / 1e6
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6   # Linux: KiB


def run_one(path: str, n_prompt: int, n_gen: int, weights: str) -> dict:
    """Measure one model in this process; returns a dict of numbers."""
    t0 = time.perf_counter()
    with open_gguf(path) as g:
        model = load_model(g, weights=weights)
    load_s = time.perf_counter() - t0
    prompt = [int(t) for t in np.random.default_rng(0).integers(100, 10000, n_prompt)]   # fixed ids
    cache = model.new_cache(n_prompt + n_gen)
    t0 = time.perf_counter()
    logits = model.forward(prompt, cache)
    prefill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n_gen):
        logits = model.forward([int(np.argmax(logits))], cache)
    decode_s = time.perf_counter() - t0
    return {"model": os.path.basename(path), "weights": getattr(model, "weights", "?"),
            "file_mb": os.path.getsize(path) / 1e6, "weights_mb": model.weights_nbytes / 1e6,
            "load_s": load_s, "prefill_tok_s": n_prompt / prefill_s, "decode_tok_s": n_gen / decode_s,
            "decode_ms": 1000 * decode_s / n_gen, "peak_mb": peak_memory_mb(), "runtime": sys.platform,
            "kv_cache_mb": cache.nbytes / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=[os.path.join(ROOT, m) for m in DEFAULT_MODELS])
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens (default 128)")
    ap.add_argument("--gen", type=int, default=64, help="greedy decode steps (default 64)")
    ap.add_argument("--weights", default="auto", choices=["auto", *WEIGHT_FORMS])
    ap.add_argument("--threads", type=int, default=1, help="OpenBLAS threads for the prefill (default 1)")
    ap.add_argument("--pyodide", action="store_true", help="measure in Pyodide under Node (needs static/)")
    ap.add_argument("--json", action="store_true", help="print one JSON list")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_one(args.models[0], args.prompt, args.gen, args.weights)))
        return
    rows = [measure(os.path.abspath(path), args) for path in args.models]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"{'model':34} {'runtime':10} {'weights':7} {'file MB':>8} {'weights MB':>10} {'load s':>7} "
          f"{'prefill tok/s':>13} {'decode tok/s':>12} {'peak MB':>8}")
    for r in rows:
        print(f"{r['model']:34} {r['runtime']:10} {r['weights']:7} {r['file_mb']:8.0f} {r['weights_mb']:10.0f} "
              f"{r['load_s']:7.1f} {r['prefill_tok_s']:13.1f} {r['decode_tok_s']:12.1f} {r['peak_mb']:8.0f}")


def measure(path: str, args: argparse.Namespace) -> dict:
    """run_one in a fresh process: a CPython child, or Pyodide in Node with the model's folder mounted."""
    if args.pyodide:
        code = (f"import sys\nsys.path[:0] = ['/src', '/src/bench']\nfrom bench_model import run_one\n"
                f"run_one('/models/{os.path.basename(path)}', {args.prompt}, {args.gen}, {args.weights!r})")
        cmd = ["node", os.path.join(ROOT, "tests", "node", "run_pyodide.mjs"), "--static", os.path.join(ROOT, "static"),
               "--mount", f"{ROOT}:/src",                     # the work tree's pyengine, not static/'s wheel
               "--mount", f"{os.path.dirname(path)}:/models", "--code", code]
        env = os.environ
    else:
        cmd = [sys.executable, os.path.abspath(__file__), path, "--child", "--prompt", str(args.prompt),
               "--gen", str(args.gen), "--weights", args.weights]
        env = {**os.environ, "OPENBLAS_NUM_THREADS": str(args.threads)}
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
