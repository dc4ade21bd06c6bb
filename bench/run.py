"""`make bench`: pyengine against wllama and llama.cpp on the same model files and the same prompt, in one run.

    python bench/run.py [--engines E1,E2,...] [--models gemma3,smollm2 | PATH.gguf,...] [--runs 3]
                        [--gen 65] [--out bench/results.json] [--md bench/RESULTS.md] [--no-save]

Engines (the table ENGINES): pyengine in CPython, in Pyodide under Node and in a Chromium worker;
wllama 3.13 (llama.cpp in wasm) in the same Chromium with 1 and 2 threads; llama.cpp through
llama-cpp-python with 1 and 2 threads (skipped with a note when it is not installed).

What one run of one engine on one model measures (the same steps everywhere):
1. load: file chosen -> ready, in seconds. In the browser the runtime (Pyodide, numpy, the wheels) is
   started before the file is chosen; wllama has nothing to start before it has a model, so its load
   includes compiling its wasm. pyengine's load is the page's (``pyengine.browser.worker.WorkerSession.load``).
2. the fixed prompt, right after the load, to --gen greedy tokens (temperature 0; end of generation
   ignored): time to first token (TTFT; in the browser as the page sees the first token arrive), prefill
   tok/s = prompt tokens / prefill seconds, decode tok/s = (gen - 1) one-token passes / their seconds,
   both as the engine times them (pyengine's TurnStats, llama-server's `timings`). wllama's load reads
   every tensor (with JSPI it reads the File without mmap), so its first prefill is not slowed by reads.
3. peak memory: the wasm heap in the browser and under Node (wasm memory only grows: its size at the
   end is its peak), peak RSS (ru_maxrss) of a fresh process in CPython and llama.cpp (which mmaps the
   file: its RSS counts the pages it touched).

The prompt: PROMPT_TEXT tokenized by the model's tokenizer and cut to exactly N_PROMPT ids, passed as ids
where the engine takes ids; wllama's completion API takes text, so it gets the text of those ids, checked
to tokenize back to the same ids (and its reported prompt_n is checked). Runs are interleaved (each round
runs every model on every engine, engines in a rotated order) because the machine is shared and noisy;
the table gives medians with their min-max spread and, beside each pyengine figure, its ratio to wllama
on one thread. The greedy tokens of every engine are compared with llama.cpp's (same tokens = the
length of the common prefix).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
STATIC = ROOT / "static"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

MODELS = {"gemma3": ROOT / "models" / "gemma-3-270m-q4_k_m.gguf",
          "smollm2": ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf",
          # the shapes of Qwen2.5-0.5B, Llama-3.2-1B, Qwen3.5-0.8B and Gemma 4 E2B with random weights
          # (bench/make_models.py)
          **{name: ROOT / "models" / "bench" / f"{name}-random-q4_k_m.gguf"
             for name in ("qwen2-0.5b", "llama-1b", "qwen35-0.8b", "gemma4-e2b")}}
N_PROMPT = 128           # prompt tokens
N_GEN = 65               # generated tokens: the first from the prefill, then 64 decode steps
REFERENCE = "llamacpp-1t"  # whose greedy tokens the others are compared with
BASELINE = "wllama-2t"     # the ratios' denominator
SUBPROCESS_TIMEOUT = 20 * 60

PROMPT_TEXT = (
    "The lighthouse stood on a rock at the mouth of the harbour, and for more than a hundred years its keepers "
    "had written down the weather in a book that was kept on a shelf beside the lamp. Each morning the keeper "
    "climbed the stairs, cleaned the glass, trimmed the wick and noted the direction of the wind, the height of "
    "the waves and the ships that had passed in the night. When the old keeper retired, his daughter took over "
    "the work. She kept the same book, but she added drawings of the birds that rested on the gallery during "
    "storms, and lists of the fish the boats brought back to the village. Years later a historian found the "
    "books in the attic of the harbour office. Reading them from the first page to the last, she saw the slow "
    "change of the climate, the end of the sailing ships, the arrival of the steamers and the day the lamp "
    "was replaced by an electric light. She decided to write the story of the lighthouse and its keepers, "
    "and she began with the first entry in the oldest book, dated the first of March."
)


# A chat turn of about 500 tokens (the page applies its chat template; wllama gets the text as it is):
# the TTFT of a long first message.
LONG_TURN = (f"Here is a story.\n\n{PROMPT_TEXT}\n\nAnd here it is again.\n\n{PROMPT_TEXT}\n\n"
             "Summarize it in three sentences: the first about the keepers and their book, the second about "
             "what the historian saw when she read the books from the first page to the last, and the third "
             "about the story she decided to write.")


# ----------------------------------------------------------------------------
# the prompt

@dataclass
class Prompt:
    ids: list[int]   # exactly N_PROMPT ids, as the model's tokenizer (= llama.cpp's) makes them
    text: str        # their text; tokenizing it (with the model's BOS rule) gives `ids` back


def make_prompt(model: Path) -> Prompt:
    """PROMPT_TEXT's first N_PROMPT tokens and their text; raises SystemExit if the text does not
    tokenize back to the same ids (then wllama would not see the same prompt)."""
    from pyengine.generation import load_tokenizer
    tok = load_tokenizer(str(model))
    ids = tok.encode(PROMPT_TEXT, add_special=True)[:N_PROMPT]
    if len(ids) < N_PROMPT:
        sys.exit(f"{model.name}: PROMPT_TEXT is only {len(ids)} tokens, {N_PROMPT} needed")
    text = tok.decode(ids)
    if tok.encode(text, add_special=True) != ids:
        sys.exit(f"{model.name}: the text of the first {N_PROMPT} prompt ids does not tokenize back to them")
    return Prompt(ids, text)


# ----------------------------------------------------------------------------
# the engines: one function per kind, each returns the raw numbers of one run

ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}   # numpy's BLAS (CPython's prefill)


def run_process(cmd: list[str], env: dict | None = None) -> dict:
    """A command that prints one JSON line on stdout; its stderr's tail goes in the error."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, cwd=ROOT,
                       env={**os.environ, **(env or {})})
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_cpython(bench: Bench, model: Path, prompt: Prompt, n_gen: int, threads: int) -> dict:
    return run_process([sys.executable, str(BENCH / "pyengine_bench.py"), str(model),
                        "--ids", json.dumps(prompt.ids), "--gen", str(n_gen)], ONE_THREAD)


def run_node(bench: Bench, model: Path, prompt: Prompt, n_gen: int, threads: int) -> dict:
    bench.ensure_static()
    code = (f"import sys; sys.path.insert(0, '/bench')\nimport pyengine_bench\n"
            f"from pyengine.gguf.source import FileSource\n"
            f"await pyengine_bench.bench([FileSource('/models/{model.name}')], {prompt.ids!r}, {n_gen})\n")
    return run_process(["node", str(ROOT / "tests" / "node" / "run_pyodide.mjs"), "--static", str(STATIC),
                        "--mount", f"{BENCH}:/bench", "--mount", f"{model.parent}:/models", "--code", code])


def run_llamacpp(bench: Bench, model: Path, prompt: Prompt, n_gen: int, threads: int) -> dict:
    return run_process([sys.executable, str(BENCH / "llamacpp_bench.py"), str(model), "--ids",
                        json.dumps(prompt.ids), "--gen", str(n_gen), "--threads", str(threads)])


def run_chromium_pyengine(bench: Bench, model: Path, prompt: Prompt, n_gen: int, threads: int) -> dict:
    bench.ensure_static()
    return bench.chromium().run("pyengine", threads, model, prompt.ids, n_gen)


def run_wllama(bench: Bench, model: Path, prompt: Prompt, n_gen: int, threads: int) -> dict:
    """wllama: the prompt to ``n_gen`` tokens, then LONG_TURN to its first token (``long``)."""
    r = bench.chromium().run("wllama", threads, model, prompt.text, n_gen, long_prompt=LONG_TURN)
    return {**r, "ttft500_s": r["long"]["ttft_s"], "prefill500_tok_s": r["long"]["prefill_tok_s"]}


def run_page(bench: Bench, model: Path, prompt: Prompt, n_gen: int, threads: int) -> dict:
    """The app itself (web/, as a person uses it) with ``threads`` Pyodide workers and the default Memory
    setting, measured by bench/bench_workers.py in its own Chromium: LONG_TURN as the first chat message
    (its TTFT and prefill; then 64 decode steps); memory is every worker's heap together."""
    bench.ensure_static()
    out = Path(tempfile.mkdtemp()) / "page.json"
    p = subprocess.run([sys.executable, str(BENCH / "bench_workers.py"), "--model", str(model), "--runs", "1",
                        "--workers", str(threads), "--prompt", LONG_TURN, "--gen", str(n_gen),
                        "--out", str(out)], capture_output=True,
                       text=True, timeout=SUBPROCESS_TIMEOUT, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-800:]}")
    r = json.loads(out.read_text())["runs"][0]
    ttft = r["prompt_tokens"] / r["prefill_tok_s"]
    return {"load_s": r["load_s"], "ttft_s": None, "prefill_tok_s": None, "ttft500_s": ttft,
            "prefill500_tok_s": r["prefill_tok_s"], "decode_tok_s": r["decode_tok_s"],
            "wasm_heap_bytes": sum(r["heap_bytes"]), "prefill_tokens": r["prompt_tokens"],
            "decode_tokens": r["decode_tokens"], "own_prompt": True, "workers": r}


@dataclass
class Engine:
    run: Callable[..., dict]
    threads: int
    where: str       # what runs it
    memory: str      # what the memory figure is


ENGINES = {
    "pyengine-cpython":  Engine(run_cpython, 1, "pyengine, CPython 3.11 + numpy (OpenBLAS, 1 thread)",
                                "peak RSS"),
    "pyengine-node":     Engine(run_node, 1, "pyengine, Pyodide 0.27.7 under Node", "wasm heap"),
    "pyengine-chromium": Engine(run_chromium_pyengine, 1, "pyengine, Pyodide 0.27.7 in a Chromium worker",
                                "wasm heap"),
    **{f"pyengine-page-{n}w": Engine(run_page, n, f"pyengine, the app page with {n} worker{'s' * (n > 1)} "
                                     "(Memory: default; a ~500-token first message; bench/bench_workers.py)",
                                     "wasm heaps") for n in (1, 2, 4)},
    "wllama-1t":         Engine(run_wllama, 1, "wllama 3.13 in Chromium, 1 thread", "wasm heap"),
    "wllama-2t":         Engine(run_wllama, 2, "wllama 3.13 in Chromium, 2 threads", "wasm heap"),
    "llamacpp-1t":       Engine(run_llamacpp, 1, "llama.cpp (llama-cpp-python), 1 thread", "peak RSS"),
    "llamacpp-2t":       Engine(run_llamacpp, 2, "llama.cpp (llama-cpp-python), 2 threads", "peak RSS"),
}
METRICS = ("load_s", "ttft_s", "prefill_tok_s", "decode_tok_s", "ttft500_s", "prefill500_tok_s", "memory_bytes")


class Bench:
    """What the engines share: the Chromium instance (started on first use) and the static/ check."""

    def __init__(self):
        self._chromium = None
        self._static_checked = False

    def chromium(self):
        if self._chromium is None:
            from browser import ChromiumBench, fetch_wllama
            self.ensure_static()
            fetch_wllama()
            self._chromium = ChromiumBench(STATIC).__enter__()
        return self._chromium

    def ensure_static(self) -> None:
        """static/ must hold the work tree's pyengine: rebuild it (offline, seconds) when it does not."""
        if self._static_checked:
            return
        sys.path.insert(0, str(ROOT / "build_scripts"))
        from build_wheels import sources_digest
        manifest = STATIC / "wheels" / "manifest.json"
        built = None
        if manifest.exists():
            built = next((w.get("sources_sha256") for w in json.loads(manifest.read_text())["wheels"]
                          if w["name"] == "pyengine"), None)
        if built != sources_digest():
            print("static/ is older than pyengine/: rebuilding it", file=sys.stderr)
            subprocess.run([sys.executable, str(ROOT / "build_scripts" / "build_static.py")], check=True,
                           capture_output=True, timeout=SUBPROCESS_TIMEOUT)
        self._static_checked = True

    def close(self) -> None:
        if self._chromium is not None:
            self._chromium.__exit__(None, None, None)


# ----------------------------------------------------------------------------
# measuring

def measure(bench: Bench, name: str, model: Path, prompt: Prompt, n_gen: int) -> dict:
    """One run of one engine on one model: the raw result plus the METRICS, or an ``error``."""
    engine = ENGINES[name]
    t0 = time.perf_counter()
    try:
        raw = engine.run(bench, model, prompt, n_gen, engine.threads)
    except Exception as e:  # noqa: BLE001 (one failed run is reported, the others go on)
        error = " ".join(f"{type(e).__name__}: {e}".split())   # one line, for the table
        return {"error": error[:2000], "wall_s": time.perf_counter() - t0}
    row = {"load_s": raw["load_s"], "ttft_s": raw["ttft_s"], "prefill_tok_s": raw["prefill_tok_s"],
           "decode_tok_s": raw["decode_tok_s"], "ttft500_s": raw.get("ttft500_s"),
           "prefill500_tok_s": raw.get("prefill500_tok_s"),
           "memory_bytes": raw.get("wasm_heap_bytes") or raw.get("peak_rss_bytes"),
           "wall_s": time.perf_counter() - t0, "raw": raw}
    problems = []
    if raw.get("prefill_tokens") != len(prompt.ids) and not raw.get("own_prompt"):
        problems.append(f"prefill of {raw.get('prefill_tokens')} tokens, not {len(prompt.ids)}")
    if raw.get("decode_tokens") != n_gen - 1:
        problems.append(f"{raw.get('decode_tokens')} decode steps, not {n_gen - 1} ({raw.get('stop_reason')})")
    if problems:
        row["warning"] = "; ".join(problems)
    return row


def llamacpp_available() -> bool:
    try:
        import llama_cpp  # noqa: F401
        return True
    except ImportError:
        return False


def run_all(engines: list[str], models: dict[str, Path], runs: int, n_gen: int) -> tuple[list[dict], dict]:
    """Every engine on every model, `runs` rounds, interleaved; returns (rows, prompts)."""
    prompts = {name: make_prompt(path) for name, path in models.items()}
    bench = Bench()
    rows = []
    try:
        for r in range(runs):
            for mname, mpath in models.items():
                order = engines[r % len(engines):] + engines[:r % len(engines)]
                for ename in order:
                    row = {"engine": ename, "model": mname, "run": r,
                           **measure(bench, ename, mpath, prompts[mname], n_gen)}
                    rows.append(row)
                    print(progress_line(row), file=sys.stderr, flush=True)
    finally:
        bench.close()
    return rows, prompts


def progress_line(row: dict) -> str:
    head = f"run {row['run']} {row['model']:10} {row['engine']:18}"
    if "error" in row:
        return f"{head} ERROR {row['error'][:300]}"
    parts = [f"{label} {fmt.format(row[m] * (1e-6 if m == 'memory_bytes' else 1))}"
             for m, label, fmt, _ in COLUMNS if row.get(m) is not None]
    warning = f"  WARNING {row['warning']}" if "warning" in row else ""
    return f"{head} {'  '.join(parts)}  ({row['wall_s']:.0f} s){warning}"


# ----------------------------------------------------------------------------
# summarizing

def spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarize(rows: list[dict], engines: list[str], models: dict[str, Path], prompts: dict,
              n_gen: int) -> dict:
    """{model: {engine: {metric: spread, "same_tokens": ..., "errors": [...]}}}."""
    from pyengine.generation import load_tokenizer
    out = {}
    for mname, mpath in models.items():
        tok = load_tokenizer(str(mpath))
        ok = {e: [r for r in rows if r["model"] == mname and r["engine"] == e and "error" not in r] for e in engines}
        ref = next((r["raw"]["ids"] for r in ok.get(REFERENCE, []) if "ids" in r["raw"]), None)
        out[mname] = {}
        for e in engines:
            s = {m: spread([r[m] for r in ok[e] if r[m] is not None]) for m in METRICS
                 if any(r[m] is not None for r in ok[e])}
            s["errors"] = [r["error"] for r in rows if r["model"] == mname and r["engine"] == e and "error" in r]
            s["warnings"] = sorted({r["warning"] for r in ok[e] if "warning" in r})
            if ref is not None and ok[e]:
                s["same_tokens"] = same_tokens(ok[e][0]["raw"], ref, tok)
            out[mname][e] = s
        out[mname]["_file_bytes"] = mpath.stat().st_size
    return out


def same_tokens(raw: dict, ref_ids: list[int], tok) -> str:
    """How far an engine's greedy output agrees with the reference: "k/n" tokens, or for an engine that
    returns text (wllama), "same text" or where it first differs."""
    if raw.get("own_prompt"):
        return "(another prompt)"
    if "ids" in raw:
        ids = raw["ids"]
        k = next((i for i, (a, b) in enumerate(zip(ids, ref_ids)) if a != b), min(len(ids), len(ref_ids)))
        return f"{k}/{len(ref_ids)}"
    text, ref_text = raw.get("text", ""), tok.decode(ref_ids)
    if text == ref_text:
        return "same text"
    k = next((i for i, (a, b) in enumerate(zip(text, ref_text)) if a != b), min(len(text), len(ref_text)))
    return f"text differs at char {k}/{len(ref_text)}"


# ----------------------------------------------------------------------------
# the table

COLUMNS = [("load_s", "load s", "{:.2f}", False), ("ttft_s", "TTFT s", "{:.2f}", False),
           ("prefill_tok_s", "prefill tok/s", "{:.1f}", True), ("decode_tok_s", "decode tok/s", "{:.2f}", True),
           ("ttft500_s", "TTFT 500 s", "{:.1f}", False), ("prefill500_tok_s", "prefill 500 tok/s", "{:.1f}", True),
           ("memory_bytes", "peak memory MB", "{:.0f}", False)]


def cell(s: dict | None, metric: str, fmt: str, base: dict | None) -> str:
    """'median (min-max)', with ' · r×' (ratio to the baseline's median) when a baseline is given."""
    if s is None or metric not in s:
        return "-"
    scale = 1e-6 if metric == "memory_bytes" else 1.0
    m = s[metric]
    text = f"{fmt.format(m['median'] * scale)} ({fmt.format(m['min'] * scale)}-{fmt.format(m['max'] * scale)})"
    if base is not None and metric in base and base[metric]["median"]:
        text += f" · **{m['median'] / base[metric]['median']:.2f}×**"
    return text


def markdown(summary: dict, engines: list[str], meta: dict) -> str:
    lines = [f"# pyengine vs wllama vs llama.cpp ({meta['date'][:10]})", "",
             f"Machine: {meta['machine']['description']}. {meta['n_runs']} runs per engine and model, interleaved; "
             f"median (min-max). Prompt: {N_PROMPT} tokens; decode: {meta['n_gen'] - 1} greedy steps after the "
             f"first token. Ratios (**×**) are to `{BASELINE}`'s median (for load, TTFT and memory, lower is "
             f"better; for tok/s, higher). Memory: wasm heap in the browser and under Node, peak RSS in "
             f"CPython and llama.cpp (which mmaps the file). `same tokens`: greedy ids equal to `{REFERENCE}`'s "
             f"(common prefix). pyengine at `{meta['machine'].get('git', '?')}`. Produced by `make bench` "
             f"(bench/run.py, {meta.get('wall_s', 0) / 60:.0f} minutes); raw runs in bench/results.json.", ""]
    for mname, per in summary.items():
        file_mb = per["_file_bytes"] / 1e6
        lines += [f"## {mname} ({Path(meta['models'][mname]).name}, {file_mb:.0f} MB)", "",
                  "| engine | " + " | ".join(c[1] for c in COLUMNS) + " | same tokens |",
                  "|---" * (len(COLUMNS) + 2) + "|"]
        base = per.get(BASELINE)
        for e in engines:
            s = per.get(e)
            b = base if e.startswith("pyengine") and e != BASELINE else None
            cells = [cell(s, m, fmt, b) for m, _, fmt, _ in COLUMNS]
            note = s.get("same_tokens", "-") if s else "-"
            if s and s["errors"]:
                note += f"; {len(s['errors'])} failed: {s['errors'][0][:120]}"
            lines.append(f"| {e} | " + " | ".join(cells) + f" | {note} |")
        lines += [""] + goal_lines(per, model_key(mname)) + [""]
    lines += ["Engines:", ""] + [f"- `{e}`: {ENGINES[e].where}; memory = {ENGINES[e].memory}" for e in engines]
    lines += ["", "Notes:", ""] + [f"- {note}" for note in meta.get("notes", []) + NOTES]
    return "\n".join(lines) + "\n"


NOTES = [
    "`pyengine-chromium` is pyengine in one worker (bench/web/pyengine_worker.js: Pyodide and the wheels started "
    "as web/worker.js starts them, then `WorkerSession.load` and `generate`), with the default weights "
    "(\"auto\": the file's own blocks and the C kernel, where it loads; `pyengine-cpython` too, its native "
    "build). `pyengine-page-Nw` is the app page itself with N workers (bench/bench_workers.py): its first chat "
    "message is the ~500-token LONG_TURN (so its TTFT and prefill are over that turn, and its 64 decode steps "
    "follow it), every worker's heap counted.",
    "wllama's completion API takes text, not ids: it gets the text of the prompt ids (checked to tokenize back to "
    "them; its prompt_n is 128), then LONG_TURN's text as a second completion of one token (TTFT 500, prefill "
    "500). Its greedy text leaves llama.cpp's after a few words (another llama.cpp build and wasm kernels: "
    "near-ties). pyengine's float32 ids (CPython) equal llama.cpp's; its quantized forms round activations as "
    "llama.cpp does and follow its ids to the first near-tie.",
    "wllama has nothing to start before it has a model, so its load includes compiling its wasm; pyengine's "
    "load starts with Python, numpy and the wheels already running (boot ~5-8 s, not counted).",
    "Two threads on 2 cores shared with other work: when the other core is busy, spin-waiting threads collapse "
    "(see the minima of wllama-2t and llamacpp-2t); 4 workers on 2 cores take turns.",
    "Where pyengine's decode time goes: bench/PROFILE.md (bench/profile_step.py).",
    "pyengine's greedy ids (CPython, the kernel's blocks) leave llama.cpp's at a near-tie of the random weights: "
    "the kernel rounds activations as llama.cpp does, and its float sums are its own (tests/model/test_model_real.py "
    "holds the ids to llama.cpp's up to a top-2 margin of 0.1 on the fixtures and real models).",
]


# The goals of issue 17: (text, numerator engine, denominator engine, "file" or "2w-before", metric, target,
# higher is better). The page's prefill and TTFT are over LONG_TURN; wllama's over the same text (its second
# completion).
GOALS = [
    ("decode, the page with 2 workers vs wllama 2 threads", "pyengine-page-2w", "wllama-2t", "decode_tok_s", 3.0, True),
    ("decode, the page with 2 workers vs llama.cpp 2 threads", "pyengine-page-2w", "llamacpp-2t", "decode_tok_s",
     0.5, True),
    ("prefill (500-token turn), the page with 2 workers vs wllama 2 threads", "pyengine-page-2w", "wllama-2t",
     "prefill500_tok_s", 2.0, True),
    ("TTFT (500-token turn), the page with 2 workers vs wllama 2 threads", "pyengine-page-2w", "wllama-2t",
     "ttft500_s", 0.5, False),
    ("load, the page with 2 workers vs wllama 2 threads", "pyengine-page-2w", "wllama-2t", "load_s", 1.0, False),
    ("peak wasm memory, the page with 2 workers (all heaps) vs file size", "pyengine-page-2w", "file", "memory_bytes",
     1.3, False),
    ("decode, the page with 1 worker vs 2 workers before the kernel", "pyengine-page-1w", "2w-before",
     "decode_tok_s", 1.6, True),
    ("prefill, CPython vs llama.cpp 1 thread", "pyengine-cpython", "llamacpp-1t", "prefill_tok_s", 1.0, True),
    ("decode, CPython vs llama.cpp 1 thread", "pyengine-cpython", "llamacpp-1t", "decode_tok_s", 0.8, True),
]
# The page's decode with 2 workers before the C kernel (issue 17, main at 5c78f95; tok/s, the best of its range).
DECODE_2W_BEFORE = {"qwen2-0.5b": 5.3, "qwen35-0.8b": 2.75, "gemma3": 6.56, "llama-1b": 3.7}


def model_key(name: str) -> str:
    """The shape a bench model's name starts with (``llama-1b-random-q4_0`` -> ``llama-1b``), else the name."""
    return next((k for k in DECODE_2W_BEFORE if name.startswith(k)), name)


def goal_lines(per: dict, model: str) -> list[str]:
    out = []
    for text, num, den, metric, target, higher in GOALS:
        a = per.get(num, {}).get(metric)
        b = (per["_file_bytes"] if den == "file" else DECODE_2W_BEFORE.get(model) if den == "2w-before"
             else per.get(den, {}).get(metric, {}).get("median"))
        if a is None or not b:
            continue
        r = a["median"] / b
        met = r >= target if higher else r <= target
        out.append(f"- goal {text}: {r:.2f}× (goal {'≥' if higher else '≤'} {target}×): {'met' if met else 'not met'}")
    return out


# ----------------------------------------------------------------------------
# the machine

def machine() -> dict:
    def cmd(*args: str) -> str:
        try:
            return subprocess.run(args, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem_kb = next((int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    import numpy
    info = {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem_kb / 1e6, 1),
            "os": cmd("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME") or platform.platform(),
            "python": platform.python_version(), "numpy": numpy.__version__, "node": cmd("node", "--version"),
            "chromium": cmd("/usr/bin/chromium", "--version"), "load_average": os.getloadavg(),
            "git": cmd("git", "-C", str(ROOT), "describe", "--always", "--dirty")}
    try:
        import llama_cpp
        info["llama_cpp_python"] = llama_cpp.__version__
    except ImportError:
        pass
    info["description"] = (f"{info['cpu']}, {info['cores']} cores (shared with other work), {info['memory_gb']} GB, "
                           f"{info['os']}; {info['chromium']}; Node {info['node']}; Python {info['python']}, "
                           f"numpy {info['numpy']}")
    return info


# ----------------------------------------------------------------------------
# the command line

def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default=",".join(ENGINES), help=f"comma-separated, of: {', '.join(ENGINES)}")
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated names ({', '.join(MODELS)}) or paths")
    ap.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--gen", type=int, default=N_GEN, help=f"generated tokens (default {N_GEN}: 1 + 64 decode steps)")
    ap.add_argument("--out", type=Path, default=BENCH / "results.json", help="the raw runs and the summary (JSON)")
    ap.add_argument("--md", type=Path, default=BENCH / "RESULTS.md", help="the table (markdown)")
    ap.add_argument("--no-save", action="store_true", help="print the table only (a quick measurement)")
    args = ap.parse_args()
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown:
        ap.error(f"unknown engines {unknown}; choose from {list(ENGINES)}")
    models = {}
    for m in (m.strip() for m in args.models.split(",") if m.strip()):
        path = MODELS.get(m) or Path(m).resolve()
        if not path.is_file():
            ap.error(f"{m}: no such model (names: {list(MODELS)}; or a .gguf path)")
        models[m if m in MODELS else path.stem] = path
    args.models = models
    return args


def main() -> None:
    args = parse_args()
    notes = []
    if not llamacpp_available():
        skipped = [e for e in args.engines if e.startswith("llamacpp")]
        args.engines = [e for e in args.engines if e not in skipped]
        if skipped:
            notes.append(f"skipped {', '.join(skipped)}: llama_cpp is not importable (pip install llama-cpp-python)")
            print(f"note: {notes[-1]}", file=sys.stderr)
    meta = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "machine": machine(), "n_runs": args.runs, "n_gen": args.gen, "n_prompt": N_PROMPT,
            "engines": {e: ENGINES[e].where for e in args.engines},
            "models": {m: str(p.relative_to(ROOT) if p.is_relative_to(ROOT) else p) for m, p in args.models.items()},
            "notes": notes}
    t0 = time.perf_counter()
    rows, prompts = run_all(args.engines, args.models, args.runs, args.gen)
    meta["wall_s"] = time.perf_counter() - t0
    summary = summarize(rows, args.engines, args.models, prompts, args.gen)
    table = markdown(summary, args.engines, meta)
    print(table)
    if not args.no_save:
        meta["prompts"] = {m: {"ids": p.ids, "text": p.text} for m, p in prompts.items()}
        args.out.write_text(json.dumps({**meta, "summary": summary, "runs": rows}, indent=1) + "\n")
        args.md.write_text(table)
        print(f"wrote {args.out} and {args.md}", file=sys.stderr)


if __name__ == "__main__":
    main()
