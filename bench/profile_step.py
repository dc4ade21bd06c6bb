"""Where a prefill and a decode step spend their time, by kernel: a profile (not a test), in CPython or in
Pyodide under Node.

    python bench/profile_step.py [gemma3|smollm2|MODEL.gguf] [--decode 16] [--node [--relaxed]] [--cprofile]
                                 [--shard K/N]

Loads the model, prefills bench/run.py's fixed 128-token prompt once, then runs --decode greedy decode
steps, with a timer (perf_counter) around each kernel the forward pass calls: every weight matmul by
its role (q/k/v, attention output, FFN gate+up, FFN down, the output layer over the vocabulary),
attention over the KV cache, RMSNorm, rope, the gated activation, the logit softcap, and the sampler
(argmax). "other" is the forward pass minus its kernels: Python between them, residual adds, reshapes,
KV cache writes, the embedding rows. The timers add ~1 us per call (a few hundred calls per token).
``--node`` runs the same code in Pyodide (tests/node/run_pyodide.mjs, static/ as built; ``--relaxed``: with
the kernel's relaxed-SIMD build, as Chromium runs it, Node's relaxed SIMD switched on); ``--cprofile``
(CPython only) also prints cProfile's top functions of the decode steps. ``--shard K/N`` loads only worker
K's shard of a split over N workers, in the forms the page plans for N (``browser_budget``), and runs it
alone (its sums and gathers return its own part): what one worker computes, without the waits.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


def instrument(model) -> tuple[dict, dict]:
    """Wrap the kernels the forward pass calls with timers; returns (seconds, calls), both by label."""
    import pyengine.model.blocks as model_blocks
    import pyengine.model.transformer as transformer
    from pyengine.model.ops import Rope
    from pyengine.weights import blocks, forms, quantized

    seconds, calls = defaultdict(float), defaultdict(int)
    inside = [0]        # timed calls running: a call inside another (a row split's parts) is the outer one's

    def timed(label_of, fn, nests=True):
        def wrapper(*args, **kwargs):
            if inside[0] and nests:
                return fn(*args, **kwargs)
            t0 = time.perf_counter()
            inside[0] += nests
            try:
                return fn(*args, **kwargs)
            finally:
                inside[0] -= nests
                label = label_of(args)
                seconds[label] += time.perf_counter() - t0
                calls[label] += 1
        return wrapper

    out = model.output
    roles = {id(out): f"matmul output {out.shape[0]}x{out.shape[1]} ({out.form.name.lower()})"}
    for part, a, b in zip(getattr(out, "parts", []), getattr(out, "starts", [])[:-1], getattr(out, "starts", [])[1:]):
        roles[id(part)] = f"matmul output rows {a}-{b} ({part.form.name.lower()})"
    for layer in model.layers:                                           # the block's, its mixer's, its FFN's
        for name, value in [item for part in (layer, layer.mixer, layer.ffn) for item in vars(part).items()]:
            if hasattr(value, "form"):
                roles.setdefault(id(value), f"matmul {name} ({value.form.name.lower()})")
    for cls in (forms.F32, quantized.Quantized, forms.RowSplit, blocks.Blocks):
        if "__call__" in vars(cls):
            cls.__call__ = timed(lambda a: roles.get(id(a[0]), "matmul ?"), cls.__call__)
    Rope.__call__ = timed(lambda a: "rope", Rope.__call__)
    for module, names in ((model_blocks, ("attention", "rmsnorm")), (transformer, ("rmsnorm", "softcap"))):
        for name in names:
            setattr(module, name, timed(lambda a, n=name: n, getattr(module, name)))
    for layer in model.layers:                                           # the activation, resolved at load
        layer.ffn.act = timed(lambda a, n=layer.ffn.act.__name__: n, layer.ffn.act)
    transformer.Model.forward = timed(lambda a: "forward (total)", transformer.Model.forward, nests=False)
    return seconds, calls


def load(path: str, weights: str, shard: str | None):
    """The whole model, or shard "K/N" of it in the page's forms for N workers, run alone: a communicator
    of N workers that sums and gathers only its own part (timing only)."""
    from pyengine.gguf import open_gguf
    from pyengine.model import load_model
    g = open_gguf(path)
    if shard is None:
        return load_model(g, weights=weights)
    from pyengine.model.config import ModelConfig
    from pyengine.model.shard import Placement
    from pyengine.model.transformer import Solo
    from pyengine.parallel.driver import plan_load
    from pyengine.weights.budget import browser_budget
    k, n = map(int, shard.split("/"))
    plan = plan_load(g, ModelConfig.from_metadata(g.metadata, g.tensors), weights, n, browser_budget)
    alone = type("Alone", (Solo,), {"count": n})()
    return load_model(g, weights=plan.weights, placement=Placement(plan.shards[k], plan.forms, alone))


def profile(path: str, prompt_ids: list[int], n_decode: int, cprofile: bool = False, weights: str = "auto",
            shard: str | None = None) -> dict:
    """{"prefill": {label: ms per token}, "decode": {label: ms per token}, ...} for one model file."""
    import numpy as np

    from pyengine.generation.sampling import Sampler, SamplerParams
    model = load(path, weights, shard)
    seconds, calls = instrument(model)
    sampler = Sampler(SamplerParams(temperature=0.0))
    cache = model.new_cache(len(prompt_ids) + n_decode + 1)
    out = {"model": Path(path).name + (f", shard {shard}" if shard else ""), "n_prompt": len(prompt_ids),
           "n_decode": n_decode, "weights_nbytes": model.weights_nbytes}

    def sample(logits, history):
        t0 = time.perf_counter()
        tok = sampler.sample(logits, history)
        seconds["sampler (argmax)"] += time.perf_counter() - t0
        return tok

    def phase(name: str, n_tokens: int, steps) -> None:
        seconds.clear()
        calls.clear()
        steps()
        ms = {k: 1000 * v / n_tokens for k, v in seconds.items()}
        kernels = sum(v for k, v in ms.items() if k not in ("forward (total)", "sampler (argmax)"))
        ms["other (Python, adds, reshapes, cache writes)"] = ms["forward (total)"] - kernels
        out[name] = dict(sorted(ms.items(), key=lambda kv: -kv[1]))
        out[name + "_calls_per_token"] = {k: v / n_tokens for k, v in calls.items()}

    ids = list(prompt_ids)
    phase("prefill", len(ids), lambda: ids.append(sample(model.forward(ids, cache), ids)))

    def decode() -> None:
        for _ in range(n_decode):
            ids.append(sample(model.forward([ids[-1]], cache), ids))
    if cprofile:
        import cProfile
        import io
        import pstats
        prof = cProfile.Profile()
        phase("decode", n_decode, lambda: prof.runcall(decode))
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(15)
        out["cprofile_decode"] = text.getvalue()
    else:
        phase("decode", n_decode, decode)
    out["runtime"] = f"Python {sys.version.split()[0]} on {sys.platform}, numpy {np.__version__}"
    return out


def table(result: dict) -> str:
    lines = [f"{result['model']} ({result['runtime']}): ms per token, prefill of {result['n_prompt']} tokens "
             f"and {result['n_decode']} decode steps; weights {result['weights_nbytes'] / 2**20:.0f} MiB", "",
             "| step | prefill ms/token | decode ms/token | decode share | decode calls/token |",
             "|---|---|---|---|---|"]
    total = result["decode"]["forward (total)"] + result["decode"].get("sampler (argmax)", 0.0)
    for label in result["decode"]:
        d, p = result["decode"][label], result["prefill"].get(label, 0.0)
        share = "" if label == "forward (total)" else f"{100 * d / total:.0f}%"
        n = result["decode_calls_per_token"].get(label)
        lines.append(f"| {label} | {p:.2f} | {d:.2f} | {share} | {'' if n is None else f'{n:g}'} |")
    return "\n".join(lines)


def main() -> None:
    import argparse
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(BENCH))
    import run
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="gemma3")
    ap.add_argument("--decode", type=int, default=16, help="decode steps (default 16)")
    ap.add_argument("--node", action="store_true", help="in Pyodide under Node")
    ap.add_argument("--relaxed", action="store_true", help="(--node) the kernel's relaxed-SIMD build")
    ap.add_argument("--cprofile", action="store_true", help="cProfile's top functions of the decode steps")
    ap.add_argument("--weights", default="auto", help="weight form (pyengine.weights.budget.CHOICES)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--shard", help="K/N: only worker K's shard of a split over N workers")
    args = ap.parse_args()
    path = run.MODELS.get(args.model) or Path(args.model).resolve()
    ids = run.make_prompt(path).ids
    if args.node:
        run.Bench().ensure_static()
        code = (f"import sys; sys.path.insert(0, '/bench')\nimport profile_step\n"
                f"profile_step.profile('/models/{path.name}', {ids!r}, {args.decode}, weights={args.weights!r}, "
                f"shard={args.shard!r})\n")
        relaxed = (["--experimental-wasm-relaxed-simd"], ["--kernel", "pyengine_kernel_relaxed.so"]) if args.relaxed \
            else ([], [])
        result = run.run_process(["node", *relaxed[0], str(ROOT / "tests" / "node" / "run_pyodide.mjs"), *relaxed[1],
                                  "--mount", f"{BENCH}:/bench", "--mount", f"{path.parent}:/models", "--code", code])
    else:
        result = profile(str(path), ids, args.decode, args.cprofile, args.weights, args.shard)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(table(result))
    if "cprofile_decode" in result:
        print("\n" + result["cprofile_decode"])


if __name__ == "__main__":
    main()
