"""llama.cpp's side of `make bench`, through llama-cpp-python: one load and one greedy run, in its own
process (bench/run.py starts one per run, so the peak RSS is this run's).

    python bench/llamacpp_bench.py MODEL.gguf --ids '[2, 818, ...]' [--gen 65] [--threads 1]  (one JSON line)

The same measures as bench/pyengine_bench.py: load (``Llama(...)``: llama.cpp mmaps the file, so pages
are read as they are first used), the prompt ids in one batch (``Llama.eval``) plus the argmax of the last
logits (time to first token), then ``gen - 1`` one-token decode steps, each an ``eval`` and an argmax
(greedy; end-of-generation ids are not special: always ``gen`` tokens).
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np


def greedy_next(llm) -> int:
    """The argmax of the logits of the last token ``eval`` ran."""
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))   # (n_vocab,) float32
    return int(np.argmax(logits))


def bench(path: str, prompt_ids: list[int], n_gen: int, threads: int) -> dict:
    import llama_cpp
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(path, n_ctx=512, n_batch=512, n_threads=threads, n_threads_batch=threads,
                          verbose=False)
    load_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    llm.eval(prompt_ids)
    ids = [greedy_next(llm)]
    prefill_s = time.perf_counter() - t0          # and the first token: the first reply after loading

    t0 = time.perf_counter()
    while len(ids) < n_gen:
        llm.eval([ids[-1]])
        ids.append(greedy_next(llm))
    decode_s = time.perf_counter() - t0
    n_decode = n_gen - 1
    return {"load_s": load_s, "prompt_tokens": len(prompt_ids), "prefill_tokens": len(prompt_ids),
            "prefill_seconds": prefill_s, "ttft_s": prefill_s, "decode_tokens": n_decode,
            "decode_seconds": decode_s, "prefill_tok_s": len(prompt_ids) / prefill_s,
            "decode_tok_s": n_decode / decode_s if decode_s > 0 else 0.0, "generated_tokens": len(ids),
            "ids": ids, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "version": llama_cpp.__version__}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True, help="the prompt ids, a JSON list")
    ap.add_argument("--gen", type=int, default=65, help="tokens to generate (default 65: 1 + 64 decode steps)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    print(json.dumps(bench(args.model, json.loads(args.ids), args.gen, args.threads)))


if __name__ == "__main__":
    main()
