"""pyengine's side of `make bench`: one load and one greedy run, the same code in CPython, in Pyodide
under Node and in the Chromium worker (bench/run.py drives all three).

    python bench/pyengine_bench.py MODEL.gguf --ids '[2, 818, ...]' [--gen 65]    (prints one JSON line)

* :func:`load` is the app's load, file chosen -> ready: ``pyengine.browser.worker.WorkerSession.load`` on byte
  sources (``FileSource`` here and under Node, the worker's ``BrowserFileSource`` on the dropped ``File``
  in Chromium): header, tokenizer, template, every tensor dequantized, the model card and inspector.
* :func:`run_greedy` prefills the fixed prompt ids and decodes greedily through
  ``pyengine.generation.generate`` (temperature 0): the first step is the prefill plus the first token,
  then one forward pass per token. Its numbers are ``TurnStats``': wall time inside the steps.
* :func:`peak_memory_bytes`: the wasm heap (``HEAP8.length``: wasm memory only grows, so its length
  now is its peak) under Pyodide, the process's peak RSS (``ru_maxrss``) in CPython.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
import time
from collections.abc import Callable
from typing import Any


async def load(sources: list) -> tuple[Any, float]:
    """Load a model as the page does, in one worker; returns (the pyengine.generation.Engine, seconds).
    (``WorkerSession.load`` is a coroutine: it may wait for helper workers; here there are none.)"""
    from pyengine.browser.worker import WorkerSession
    session = WorkerSession(post=lambda msg: None)
    t0 = time.perf_counter()
    done = session.load(sources)
    if inspect.isawaitable(done):
        await done
    return session.chat.engine, time.perf_counter() - t0


def run_greedy(engine: Any, prompt_ids: list[int], n_gen: int,
               on_token: Callable[[int], None] | None = None) -> dict:
    """Greedy generation of up to ``n_gen`` tokens after ``prompt_ids`` (the first token comes from the
    prefill, the other n_gen - 1 from one decode step each); ``on_token(i)`` after each token.
    Returns TurnStats as a dict plus ``ids`` (the generated ids)."""
    from pyengine.generation import generate
    from pyengine.generation.request import Request
    from pyengine.generation.sampling import SamplerParams
    gen = generate(engine, prompt_ids, Request(SamplerParams(temperature=0.0), n_gen))
    while gen.step() is not None:
        if on_token is not None:
            on_token(len(gen.ids))
    return {**gen.stats.as_dict(), "ids": gen.ids}


def peak_memory_bytes() -> dict:
    """{"wasm_heap_bytes": ...} under Pyodide, {"peak_rss_bytes": ...} in CPython (Linux)."""
    if sys.platform == "emscripten":
        import pyodide_js
        return {"wasm_heap_bytes": int(pyodide_js._module.HEAP8.length)}
    import resource
    return {"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}  # KiB on Linux


async def bench(sources: list, prompt_ids: list[int], n_gen: int) -> dict:
    """One measured run, as bench/run.py defines it for every engine: load, then the prompt to ``n_gen``
    greedy tokens (``ttft_s``: the first reply after loading, prefill + first token). Numbers in seconds,
    tokens, bytes."""
    engine, load_s = await load(sources)
    result = run_greedy(engine, prompt_ids, n_gen)
    return {"load_s": load_s, "ttft_s": result["ttft_seconds"], **result, **peak_memory_bytes()}


def main() -> None:
    import argparse
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from pyengine.gguf.source import FileSource
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--ids", required=True, help="the prompt ids, a JSON list")
    ap.add_argument("--gen", type=int, default=65, help="tokens to generate (default 65: 1 + 64 decode steps)")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(bench([FileSource(args.model)], json.loads(args.ids), args.gen))))


if __name__ == "__main__":
    main()
