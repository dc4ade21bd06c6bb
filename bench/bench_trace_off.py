"""Decode speed with the trace off, before and after it was added: the same greedy run in two source trees.

    python bench/bench_trace_off.py MODEL.gguf --base /tmp/base --rounds 5 [--gen 64] [--out bench/trace_off.json]

Each round runs one process per tree (``PYTHONPATH`` = the tree, the base first, then this one, then the base
again... interleaved, so a busy machine slows both alike): load MODEL (weights "auto": the C kernel's blocks),
prefill a fixed 32-token prompt, decode ``--gen`` tokens greedily, and print the decode tok/s
(``TurnStats.decode_tok_s``). Then, in this tree only, the cost of one traced step against an untraced one
(:func:`pyengine.model.trace.trace_step`). Prints and writes the medians; run it under the machine's lock
(``flock /tmp/pyengine-heavy.lock``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [(7 * i + 3) % 1000 + 10 for i in range(32)]


def one_run(model: str, n_gen: int) -> dict:
    """In this process (whichever pyengine PYTHONPATH gives): the decode tok/s of one greedy run."""
    from pyengine.generation import generate, load
    from pyengine.generation.request import Request
    from pyengine.generation.sampling import SamplerParams
    engine = load([model])
    gen = generate(engine, PROMPT, Request(SamplerParams(temperature=0.0), n_gen))
    while gen.step() is not None:
        pass
    import pyengine
    out = {"decode_tok_s": gen.stats.decode_tok_s, "weights": engine.model.weights, "ids": gen.ids[:8],
           "pyengine": str(Path(pyengine.__file__).parent.parent)}
    try:
        from pyengine.model.trace import trace_step
    except ImportError:                                            # the tree before the trace
        return out
    ids = PROMPT + gen.ids
    n = len(ids) - 1
    plain = []
    for _ in range(5):
        gen.cache.truncate(n)
        t0 = time.perf_counter()
        engine.model.forward(ids[n:], gen.cache)
        plain.append(time.perf_counter() - t0)
    traced = [time.perf_counter()]
    for _ in range(5):
        trace_step(engine.model, gen.cache, ids, n)
        traced.append(time.perf_counter())
    traced = [b - a for a, b in zip(traced, traced[1:])]
    return {**out, "step_s": statistics.median(plain), "traced_step_s": statistics.median(traced)}


def compare(model: str, base: str, rounds: int, n_gen: int) -> dict:
    model, runs = str(Path(model).resolve()), {"base": [], "trace": []}
    for _ in range(rounds):
        for name, tree in (("base", base), ("trace", str(ROOT))):
            out = subprocess.run([sys.executable, __file__, model, "--one", "--gen", str(n_gen)], check=True,
                                 capture_output=True, text=True, env={**os.environ, "PYTHONPATH": tree}, cwd=tree)
            runs[name].append(json.loads(out.stdout))
            assert runs[name][-1]["pyengine"] == str(Path(tree).resolve()), runs[name][-1]["pyengine"]
    assert runs["base"][0]["ids"] == runs["trace"][0]["ids"], "the two trees decode different tokens"
    tok_s = {k: [r["decode_tok_s"] for r in v] for k, v in runs.items()}
    return {"model": Path(model).name, "weights": runs["trace"][0]["weights"], "gen": n_gen, "rounds": rounds,
            "decode_tok_s": tok_s, "median_tok_s": {k: statistics.median(v) for k, v in tok_s.items()},
            "step_s": statistics.median(r["step_s"] for r in runs["trace"]),
            "traced_step_s": statistics.median(r["traced_step_s"] for r in runs["trace"])}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--base", help="a source tree of pyengine before the trace (git archive of main)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--one", action="store_true", help="one run in this process (what --base's rounds call)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.model, args.gen)))
        return 0
    result = compare(args.model, args.base, args.rounds, args.gen)
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
