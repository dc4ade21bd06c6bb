"""Dequantization throughput per ggml type (a benchmark, not a test).

    python bench/bench_quants.py [--elements N] [--repeat R] [--types Q4_K ...] [--chunk C]

For each type in ``quants.DEQUANTIZERS``: random blocks of N weights (default
2^22), the best of R runs of ``quants.dequantize`` (run round-robin over the
types, so a busy moment on a shared machine does not hit one type only),
printed as million elements per second, and the peak memory traced during one
run as a multiple of the float32 output (chunking keeps it near 1.0). Plain
Python + numpy, so it runs unchanged under Pyodide.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from pyengine.gguf import quants
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME


def random_blocks(type_name: str, n_elements: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes for n_elements weights of the type (scales may be any f16, even inf/NaN)."""
    t = GGML_TYPES_BY_NAME[type_name]
    return rng.integers(0, 256, n_elements // t.block_size * t.type_size, dtype=np.uint8)


def run_seconds(raw: np.ndarray, type_name: str, n_elements: int) -> float:
    """Seconds for one ``quants.dequantize`` of the blocks."""
    t0 = time.perf_counter()
    quants.dequantize(raw, GGML_TYPES_BY_NAME[type_name], n_elements)
    return time.perf_counter() - t0


def peak_ratio(raw: np.ndarray, type_name: str, n_elements: int) -> float:
    """Peak memory traced during one run / the float32 output's bytes."""
    tracemalloc.start()
    quants.dequantize(raw, GGML_TYPES_BY_NAME[type_name], n_elements)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / (4 * n_elements)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--elements", type=int, default=1 << 22, help="weights per type (default 2^22)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per type; the best is kept (default 5)")
    ap.add_argument("--types", nargs="*", default=list(quants.DEQUANTIZERS), help="ggml type names")
    ap.add_argument("--chunk", type=int, default=quants.CHUNK_ELEMENTS, help="quants.CHUNK_ELEMENTS to use")
    args = ap.parse_args()
    quants.CHUNK_ELEMENTS = args.chunk
    rng = np.random.default_rng(0)
    n = args.elements // 256 * 256
    print(f"numpy {np.__version__}, {sys.implementation.name} {sys.version.split()[0]} on {sys.platform}, "
          f"{n} elements per type, chunk {quants.CHUNK_ELEMENTS}, best of {args.repeat} round-robin runs")
    raws = {name: random_blocks(name, n, rng) for name in args.types}
    best = {name: float("inf") for name in args.types}
    with np.errstate(all="ignore"):
        for _ in range(args.repeat):  # round-robin, so a busy moment does not hit one type only
            for name in args.types:
                best[name] = min(best[name], run_seconds(raws[name], name, n))
        print(f"{'type':8} {'Melem/s':>9} {'ns/elem':>8} {'peak/out':>9}")
        for name in args.types:
            mps = n / best[name] / 1e6
            print(f"{name:8} {mps:9.1f} {1e3 / mps:8.2f} {peak_ratio(raws[name], name, n):9.2f}")


if __name__ == "__main__":
    main()
