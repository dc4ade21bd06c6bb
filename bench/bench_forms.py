"""The cost of one product in each weight form, per weight and per call: the numbers behind auto's cost model
(pyengine.weights.budget NS_PER_WEIGHT, SUB16, NS_PER_CALL). In Pyodide under Node by default.

    python bench/bench_forms.py [--model MODEL.gguf] [--cpython] [--tokens 1 64]

For each ggml type the model holds, its largest matrix (at most MAX_ROWS rows of it) is built in every
form and multiplied by random activations: the best of a few runs, as ns a weight (one token, and a prompt
of ``--tokens`` tokens, per token), and the time of a product of a 128-row slice of it (the fixed cost of a
call). The C kernel's form (blocks) is measured beside numpy's where the kernel loads. CPU time of the
process (Node's process.cpuUsage, CPython's process_time), so a machine shared with other work disturbs it
less than wall time would.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


MAX_ROWS = 16384      # rows of a matrix measured (the vocabulary's first ones)


def cpu_seconds():
    """The process's CPU time in seconds (Node's under Pyodide)."""
    if sys.platform == "emscripten":
        import js
        u = js.process.cpuUsage()
        return (u.user + u.system) / 1e6
    import time
    return time.process_time()


def best(w, x, reps: int = 5) -> float:
    """The least CPU seconds of ``w(x)`` over ``reps`` runs (after one to warm up)."""
    w(x)
    times = []
    for _ in range(reps):
        t0 = cpu_seconds()
        w(x)
        times.append(cpu_seconds() - t0)
    return min(times)


def measure(path: str, tokens: list[int]) -> list[dict]:
    """One row per (ggml type, form): ns a weight per token count, and ns a call of a 128-row slice."""
    import numpy as np

    from pyengine.gguf import open_gguf
    from pyengine.weights import kernel
    from pyengine.weights.build import Builder
    from pyengine.weights.forms import Form

    g = open_gguf(path)
    largest: dict[str, str] = {}                                          # ggml type -> its largest layer matrix
    for name, info in g.tensors.items():
        if len(info.shape) == 2:
            if info.n_elements > g.tensors[largest.get(info.type.name, name)].n_elements or \
                    info.type.name not in largest:
                largest[info.type.name] = name
    rows = []
    for name in largest.values():
        info = g.tensors[name]
        n_out, n_in = min(info.shape[1], MAX_ROWS), info.shape[0]
        rng = np.random.default_rng(0)
        kernel_form = [Form.BLOCKS] if kernel.get() is not None and info.type.name in kernel.TYPES else []
        for form in (Form.F32, Form.QUANTIZED, Form.COMPACT, *kernel_form):
            w = Builder(g).build([(name, 0, n_out)], form)
            small = Builder(g).build([(name, 0, 128)], form)
            row = {"tensor": name, "type": info.type.name, "shape": [n_out, n_in], "form": form.name}
            for t in tokens:
                x = rng.standard_normal((t, n_in)).astype(np.float32)
                row[f"ns_per_weight_T{t}"] = 1e9 * best(w, x) / (n_out * n_in * t)
            row["ns_per_call_128_rows"] = 1e9 * best(small, rng.standard_normal(n_in).astype(np.float32), 20)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "bench" / "llama-1b-random-q4_k_m.gguf")
    ap.add_argument("--cpython", action="store_true", help="in this CPython instead of Pyodide under Node")
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 64])
    args = ap.parse_args()
    model = args.model.resolve()
    if args.cpython:
        rows = measure(str(model), args.tokens)
    else:
        sys.path.insert(0, str(BENCH))
        import run
        run.Bench().ensure_static()
        code = (f"import sys; sys.path.insert(0, '/bench')\nimport bench_forms\n"
                f"bench_forms.measure('/models/{model.name}', {args.tokens!r})\n")
        out = run.run_process(["node", str(ROOT / "tests" / "node" / "run_pyodide.mjs"), "--mount",
                               f"{BENCH}:/bench", "--mount", f"{model.parent}:/models", "--code", code])
        rows = out if isinstance(out, list) else []
    cols = [f"ns_per_weight_T{t}" for t in args.tokens]
    print("| type | form | " + " | ".join(f"ns/weight, {t} token(s)" for t in args.tokens) + " | ns/call, 128 rows |")
    print("|---" * (len(cols) + 3) + "|")
    for r in rows:
        print(f"| {r['type']} | {r['form'].lower()} | " + " | ".join(f"{r[c]:.3f}" for c in cols)
              + f" | {r['ns_per_call_128_rows'] / 1000:.0f} µs |")


if __name__ == "__main__":
    main()
