"""Benchmark (not a test): seconds and read calls to parse each real model's header
and to dequantize all of its tensors, in CPython.

    python bench/bench_reader.py [MODEL.gguf ...]    (default: the two models in models/)

In the browser each read costs ~1-2 ms whatever its size (RUNTIME.md), so the
read counts matter as much as the seconds.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pyengine.gguf import open_gguf
from pyengine.gguf.source import FileSource

MODELS = [ROOT / "models" / "gemma-3-270m-q4_k_m.gguf", ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"]


def bench(path: Path) -> None:
    src = FileSource(path)
    t0 = time.perf_counter()
    g = open_gguf(src)
    t_header, reads_header = time.perf_counter() - t0, src.reads
    n_strings = sum(len(v) for k, v in g.metadata.items() if g.value_types[k] == "ARRAY[STRING]")

    t0 = time.perf_counter()
    n_params = 0
    for name in g.tensors:
        n_params += g.tensor(name).size
    t_tensors, reads_tensors = time.perf_counter() - t0, src.reads - reads_header
    src.close()

    print(f"{path.name}: {src.size / 1e6:.1f} MB, {len(g.tensors)} tensors, {g.n_kv} keys")
    print(f"  header   {t_header:7.3f} s  {reads_header:4d} reads  {g.data_offset / 1e6:6.2f} MB "
          f"({n_strings:,} strings in arrays)")
    print(f"  tensors  {t_tensors:7.3f} s  {reads_tensors:4d} reads  {n_params:,} float32 values "
          f"({n_params / t_tensors / 1e6:.0f} M/s)")


if __name__ == "__main__":
    for p in sys.argv[1:] or MODELS:
        bench(Path(p))
