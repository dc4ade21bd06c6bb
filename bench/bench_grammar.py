"""What a grammar costs a reply: the mask and the step through the grammar per token, against a decode step.

    python bench/bench_grammar.py [--model models/bench/qwen2-0.5b-random-q4_k_m.gguf] [--tokens 64] [--runs 3]

For each grammar (a JSON schema of nested objects, enums and bounded arrays; llama.cpp's json.gbnf; its
arithmetic.gbnf when fetched), a greedy reply of ``--tokens`` tokens to a fixed prompt runs twice on
one Grammar: ``cold``, its states met for the first time (the automaton learnt as it goes), then
``warm``, the same reply again (its masks kept). The grammar's time per token is what
``GrammarMatcher.apply`` and ``accept`` take (the mask, the -inf copy of the logits, the walk of the
token's bytes); the decode step is a reply's decode seconds per token without a grammar. The vocabulary's
trie is built once per tokenizer, before: its time is printed apart. Medians of ``--runs``.

Under Pyodide (Node), from the checkout with static/ built::

    node tests/node/run_pyodide.mjs --mount .:/src --mount models:/models --mount .cache/vocab/grammars:/grammars \
        --code 'import sys; sys.path[:0] = ["/src", "/src/bench"]; import bench_grammar as B; from pathlib import Path
    B.bench("/models/bench/qwen2-0.5b-random-q4_k_m.gguf", 24, 1, Path("/grammars"))'
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from pyengine.generation import generate, load  # noqa: E402
from pyengine.generation.grammar import Grammar, GrammarMatcher, vocab_trie  # noqa: E402
from pyengine.generation.json_schema import schema_to_gbnf  # noqa: E402
from pyengine.generation.request import Request  # noqa: E402
from pyengine.generation.sampling import SamplerParams  # noqa: E402

GREEDY = SamplerParams(temperature=0, top_k=1)
PROMPT = "Give an order of a shop as JSON:"
GRAMMARS = ROOT / ".cache" / "vocab" / "grammars"


# tests/generation/test_json_schema.py's last schema: nested objects, enums, a bounded array, a pattern
ORDER = {"type": "object", "properties": {
    "id": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
    "items": {"type": "array", "maxItems": 2, "items": {
        "type": "object", "properties": {"sku": {"enum": ["pen", "ink", "pad"]},
                                         "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
        "required": ["sku", "qty"]}},
    "paid": {"type": ["boolean", "null"]}}, "required": ["id", "items", "paid"]}


def grammars(folder: Path = GRAMMARS) -> dict[str, str]:
    out = {"schema (order)": schema_to_gbnf(ORDER)}
    for name in ("json.gbnf", "arithmetic.gbnf"):
        if (folder / name).is_file():
            out[name] = (folder / name).read_text()
    return out


class Timed:
    """Times GrammarMatcher.apply and accept (seconds, summed) while in a ``with``."""

    def __enter__(self):
        self.seconds, self.calls = 0.0, 0
        self.saved = GrammarMatcher.apply, GrammarMatcher.accept
        timed = self

        def wrap(f):
            def run(*a, **k):
                t = time.perf_counter()
                try:
                    return f(*a, **k)
                finally:
                    timed.seconds += time.perf_counter() - t
            return run
        GrammarMatcher.apply, GrammarMatcher.accept = map(wrap, self.saved)
        return self

    def __exit__(self, *exc):
        GrammarMatcher.apply, GrammarMatcher.accept = self.saved


def reply(engine, ids, n, grammar=None) -> tuple[float, float, int]:
    """(decode seconds per token, grammar seconds per token, tokens) of one greedy reply."""
    with Timed() as t:
        gen = generate(engine, ids, Request(GREEDY, n, grammar=grammar))
        for _ in gen:
            pass
    steps = len(gen.ids) + (gen.stats.stop_reason == "eog")
    return gen.stats.decode_seconds / max(gen.stats.decode_tokens, 1), t.seconds / max(steps, 1), steps


def bench(model: str, tokens: int, runs: int, folder: Path = GRAMMARS) -> None:
    """Print the table for ``model`` (see the module doc)."""
    engine = load(model)
    tok = engine.tokenizer
    t = time.perf_counter()
    vocab_trie(tok)
    print(f"{Path(model).name}: n_vocab {tok.n_vocab}, weights {engine.model.weights}; "
          f"the vocabulary's trie built in {time.perf_counter() - t:.2f} s (once per tokenizer)")
    ids = tok.encode(PROMPT)
    step = statistics.median(reply(engine, ids, tokens)[0] for _ in range(runs))
    print(f"decode step without a grammar: {step * 1e3:.1f} ms")
    print("| grammar | tokens | cold: ms a token | % of a step | warm: ms a token | % of a step |")
    print("|---|---|---|---|---|---|")
    for name, text in grammars(folder).items():
        cold, warm, n = [], [], 0
        for _ in range(runs):
            g = Grammar.from_gbnf(text, name)
            _, c, n = reply(engine, ids, tokens, g)
            _, w, _ = reply(engine, ids, tokens, g)
            cold.append(c)
            warm.append(w)
        c, w = statistics.median(cold), statistics.median(warm)
        print(f"| {name} | {n} | {c * 1e3:.2f} | {100 * c / step:.1f}% | {w * 1e3:.2f} | {100 * w / step:.1f}% |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models/bench/qwen2-0.5b-random-q4_k_m.gguf"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    bench(args.model, args.tokens, args.runs)


if __name__ == "__main__":
    main()
