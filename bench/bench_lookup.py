"""Prompt lookup (pyengine/generation/lookup.py) on and off: decode speed and acceptance on real models.

    python bench/bench_lookup.py [--models models/SmolLM2-135M-Instruct.Q4_1.gguf ...] [--lookup 0 4 8/2 8/3]
                                 [--runs 3] [--max-tokens 96] [--temp 0] [--blas-min N] [--out bench/lookup.json]

Four tasks: repeat given code with a name changed, fix given code and show it whole, summarize a given
text, and a question with nothing to copy. An instruct model (a chat template that names the assistant)
gets each as a chat message through ``ChatSession.respond``; a base model (Gemma 3 270M) gets a raw
completion prompt through ``generate``. Each (task, lookup) runs ``--runs`` times, the settings
interleaved (0, 4, 8, 0, 4, 8, ...) so a noisy machine disturbs them alike; a setting ``k/n`` drafts up
to k tokens from n-grams of at least n tokens (``lookup.NGRAM_MIN``), ``k`` alone keeps the default n.
A run's numbers are its TurnStats: decode tok/s (tokens after the first over the wall time of the steps that made them),
drafted and accepted tokens; and whether its ids equal the lookup-off run's (greedy: they must, up to a
near-tie). Medians are printed as a table and, with every run, written to ``--out`` as JSON.
``--blas-min N`` is a what-if: products of at least N tokens with float32 weights go to BLAS
(``pyengine.weights.matmul.BLAS_MIN_TOKENS``, 64: a draft's few tokens are einsums).

Under Pyodide (bench/lookup_pyodide.json: one run, 64 tokens, the default weights "mixed"), from the
checkout with static/ built::

    node tests/node/run_pyodide.mjs --mount .:/src --mount models:/models <<'EOF'
    import sys; sys.path[:0] = ["/src", "/src/bench"]      # this checkout's pyengine, not the built wheel
    import bench_lookup as B
    out = {m: B.bench_model(f"/models/{m}", ["0", "4", "8"], 1, 64, 0.0) for m in B.MODELS}
    rows = [r for rs, _ in out.values() for r in rs]
    {"pass_cost": {m: c for m, (_, c) in out.items()}, "summary": B.summarize(rows),
     "runs": [{k: r[k] for k in B.RUN_FIELDS} for r in rows]}
    EOF
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CODE = '''def mean(values):
    """The arithmetic mean of a list of numbers."""
    total = 0
    count = 0
    for v in values:
        total += v
        count += 1
    if count == 0:
        raise ValueError("mean of an empty list")
    return total / count


def variance(values):
    m = mean(values)
    return mean([(v - m) ** 2 for v in values])
'''

BUGGY = CODE.replace("count += 1", "count += 2")

TEXT = ("The city of Lyon sits where the Rhone and the Saone rivers meet, in the east of France. The Romans "
        "founded it in 43 BC as Lugdunum, and for three centuries it was the capital of the Gauls. In the "
        "Renaissance it became a centre of banking and printing, and from the sixteenth century its silk "
        "weavers made it famous across Europe. The weavers' covered passages, the traboules, still run "
        "between the streets of the old town. In 1831 and 1834 the silk workers rose against falling wages, "
        "two of the first workers' revolts of the industrial age. Today Lyon is France's third city, known "
        "for its food, its old town listed by UNESCO, and the Festival of Lights held every December.")

MODELS = ("SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf")

# name: (a chat message for an instruct model, a raw prompt for a base model)
TASKS = {
    "repeat_code": (f"Repeat this code exactly, but rename the function `mean` to `average` everywhere:\n\n"
                    f"```python\n{CODE}```",
                    f"Original code:\n```python\n{CODE}```\n\nThe same code with the function `mean` renamed "
                    f"to `average` everywhere:\n```python\n"),
    "fix_code": (f"This code has a bug. Show the whole corrected code:\n\n```python\n{BUGGY}```",
                 f"Buggy code:\n```python\n{BUGGY}```\n\nThe whole code, with the bug fixed:\n```python\n"),
    "summarize": (f"{TEXT}\n\nSummarize the text above in a few sentences.",
                  f"Text: {TEXT}\n\nSummary of the text above: "),
    "question": ("What causes the seasons on Earth?",
                 "Question: What causes the seasons on Earth?\nAnswer:"),
}


RUN_FIELDS = ("model", "weights", "task", "lookup", "run", "mode", "decode_tok_s", "generated_tokens",
              "drafted_tokens", "accepted_tokens", "stop_reason")      # what --out keeps of each run


def run_case(engine, task: str, setting: str, max_tokens: int, temperature: float = 0.0, seed: int = 1) -> dict:
    """One reply to ``task`` with lookup ``setting`` ("k" or "k/n", see the module doc): its TurnStats as
    a dict plus ``ids`` and ``mode`` ("chat" through the template, "raw" for a base model)."""
    from pyengine.generation import ChatSession, SamplerParams, generate
    from pyengine.generation import lookup as ngrams
    from pyengine.generation.request import Request
    default_min = ngrams.NGRAM_MIN
    lookup, _, n_min = setting.partition("/")
    lookup = int(lookup)
    ngrams.NGRAM_MIN = int(n_min) if n_min else default_min          # read when the reply's index is built
    params = SamplerParams(temperature=temperature, seed=seed)
    message, raw = TASKS[task]
    if is_instruct(engine):
        chat = ChatSession(engine, n_ctx=2048)
        chat.messages = [{"role": "user", "content": message}]
        gen, mode = chat.respond(Request(params, max_tokens, lookup=lookup)), "chat"
    else:
        ids = engine.tokenizer.encode(raw, add_special=True, parse_special=True)
        gen, mode = generate(engine, ids, Request(params, max_tokens, lookup=lookup), n_ctx=2048), "raw"
    ngrams.NGRAM_MIN = default_min
    for _ in gen:
        pass
    return {**gen.stats.as_dict(), "ids": gen.ids, "mode": mode}


def is_instruct(engine) -> bool:
    """A chat template that names an assistant turn (SmolLM2's); Gemma 3 270M's built-in "gemma" format
    is there, but the model is a base model: it gets raw prompts."""
    return engine.template is not None and engine.template.name != "gemma"


def pass_cost(engine, sizes=(1, 2, 3, 5, 9), runs: int = 5) -> dict:
    """What a draft costs: the median seconds of a forward pass of T tokens (logits of each) after a
    200-token context, for each T in ``sizes``, and its ratio to one token's."""
    import numpy as np
    model = engine.model
    cache = model.new_cache(512)
    model.forward(np.arange(10, 210).tolist(), cache, logits="last")
    seconds = {t: [] for t in sizes}
    for _ in range(runs):
        for t in sizes:
            cache.truncate(200)
            t0 = time.perf_counter()
            model.forward(np.arange(300, 300 + t).tolist(), cache, logits="all")
            seconds[t].append(time.perf_counter() - t0)
    med = {t: statistics.median(v) for t, v in seconds.items()}
    return {str(t): {"seconds": med[t], "x_one": med[t] / med[sizes[0]]} for t in sizes}


def bench_model(path: str, settings: list[str], runs: int, max_tokens: int, temperature: float) -> tuple:
    """(the runs' rows, the pass costs) of one model."""
    from pyengine.generation import load
    engine = load(path)
    run_case(engine, "question", "0", 4)                                 # warm up (first-call costs)
    cost = pass_cost(engine)
    print(f"{Path(path).name}: a pass of T tokens costs " + ", ".join(f"T={t}: {c['x_one']:.2f}x"
                                                                     for t, c in cost.items()), file=sys.stderr)
    rows = []
    for task in TASKS:
        for r in range(runs):
            for setting in settings:
                t0 = time.perf_counter()
                res = run_case(engine, task, setting, max_tokens, temperature, seed=r + 1)
                res.update(model=Path(path).name, weights=engine.model.weights, task=task, lookup=setting,
                           run=r, wall_s=time.perf_counter() - t0)
                rows.append(res)
                print(f"{res['model']} {task} lookup={setting} run={r}: {res['decode_tok_s']:.1f} tok/s, "
                      f"{res['accepted_tokens']}/{res['drafted_tokens']} accepted, {res['generated_tokens']} tok",
                      file=sys.stderr, flush=True)
    return rows, cost


def summarize(rows: list[dict]) -> list[dict]:
    """Medians per (model, task, lookup); ``same_ids``: every run's ids equal lookup 0's of the same run."""
    off = {(r["model"], r["task"], r["run"]): r["ids"] for r in rows if r["lookup"] == "0"}
    out = []
    for key in dict.fromkeys((r["model"], r["task"], r["lookup"]) for r in rows):
        group = [r for r in rows if (r["model"], r["task"], r["lookup"]) == key]
        base = [r for r in rows if (r["model"], r["task"], r["lookup"]) == (key[0], key[1], "0")]
        tok_s = statistics.median(r["decode_tok_s"] for r in group)
        out.append({"model": key[0], "task": key[1], "lookup": key[2],
                    "decode_tok_s": tok_s, "min": min(r["decode_tok_s"] for r in group),
                    "max": max(r["decode_tok_s"] for r in group),
                    "speedup": tok_s / statistics.median(r["decode_tok_s"] for r in base) if base else None,
                    "generated": statistics.median(r["generated_tokens"] for r in group),
                    "drafted": statistics.median(r["drafted_tokens"] for r in group),
                    "accepted": statistics.median(r["accepted_tokens"] for r in group),
                    "same_ids": all(r["ids"] == off.get((r["model"], r["task"], r["run"])) for r in group)})
    return out


def table(summary: list[dict]) -> str:
    lines = ["| model | task | lookup | decode tok/s (min-max) | x off | generated | drafted | accepted | same ids |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        lines.append(f"| {s['model']} | {s['task']} | {s['lookup']} | {s['decode_tok_s']:.1f} ({s['min']:.1f}-"
                     f"{s['max']:.1f}) | {s['speedup']:.2f} | {s['generated']:.0f} | {s['drafted']:.0f} | "
                     f"{s['accepted']:.0f} | {'yes' if s['same_ids'] else 'no'} |")
    return "\n".join(lines)


def main() -> None:
    sys.path.insert(0, str(ROOT))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=[str(ROOT / "models" / m) for m in MODELS])
    ap.add_argument("--lookup", nargs="+", default=["0", "4", "8", "8/2"], help='settings "k" or "k/n"; 0 first')
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--blas-min", type=int, default=None, help="what-if: BLAS from this many tokens")
    ap.add_argument("--out", default=str(ROOT / "bench" / "lookup.json"))
    args = ap.parse_args()
    if args.blas_min is not None:
        from pyengine.weights import matmul
        matmul.BLAS_MIN_TOKENS = args.blas_min
    rows, costs = [], {}
    for path in args.models:
        more, costs[Path(path).name] = bench_model(path, args.lookup, args.runs, args.max_tokens, args.temp)
        rows += more
    summary = summarize(rows)
    print(table(summary))
    settings = {**vars(args), "models": [Path(m).name for m in args.models], "out": Path(args.out).name}
    write_json(Path(args.out), settings, costs, summary, [{k: r[k] for k in RUN_FIELDS} for r in rows])


def write_json(path: Path, settings: dict, costs: dict, summary: list[dict], runs: list[dict]) -> None:
    """The results as JSON, a summary row or a run to a line, numbers to 4 significant digits."""
    rows = lambda items: ",\n".join("  " + json.dumps(rounded(x)) for x in items)  # noqa: E731
    costs = rounded(costs)
    path.write_text(f'{{\n "settings": {json.dumps(settings)},\n "pass_cost": {json.dumps(costs)},\n'
                    f' "summary": [\n{rows(summary)}\n ],\n "runs": [\n{rows(runs)}\n ]\n}}\n')



def rounded(x):
    """``x`` with every float in it to 4 significant digits."""
    if isinstance(x, float):
        return float(f"{x:.4g}")
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    return [rounded(v) for v in x] if isinstance(x, list) else x


if __name__ == "__main__":
    main()
