"""Benchmark (not a test): issue 12's hostile cases measured, each against its bound.

Every CPython case runs in a fresh process (``--one GROUP CASE``): once for its time and the growth of the
process's peak RSS (``ru_maxrss`` after the case over before it), once more under tracemalloc for the
peak it traced. The templates render under the real bounds (MAX_SECONDS, MAX_STEPS, MAX_BUILT). Under
Pyodide 0.27.7 in Node (one process, tests/node/run_pyodide.mjs) the template and GGUF corpora run again:
each case's time and the wasm heap's growth (it never shrinks, so its growth is the peak). Writes
bench/hostile.json and bench/HOSTILE.md.

    flock /tmp/pyengine-heavy.lock python bench/hostile.py [--no-node]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(TESTS)]

MiB = 1 << 20
FUZZ_SECONDS = 20.0
FUZZ_BOUND = 0.5          # the render bound the fuzzed templates get (as in the tests)
ONE_OP = 1.0              # how far past its deadline one operation may end
BIG_ARRAY = 60_000_000    # float32 items of the metadata array inspect reads (240 MB)


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# --- the cases ------------------------------------------------------------------------------------
# Each maker returns (run, check): run() does the case once (its result, or the exception it raised),
# check(outcome) -> (passed, text).


def template_case(case: str):
    from template_corpus import HOSTILE

    from pyengine.errors import TemplateError
    from pyengine.text.jinja_sandbox import render_jinja
    source, pattern = next((s, p) for c, s, p in HOSTILE if c == case)
    context = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}

    def run():
        return render_jinja(source, dict(context))

    def check(outcome):  # a case the tests end by their 1 s deadline may end otherwise within the real one
        ok = isinstance(outcome, TemplateError) and (re.search(pattern, str(outcome)) or "took more" in pattern)
        return bool(ok), str(outcome)
    return run, check


def fuzz_case(_: str):
    import random

    from template_corpus import random_template

    from pyengine.errors import TemplateError
    from pyengine.text.jinja_sandbox import render_jinja
    context = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}

    def run():
        rng, deadline, worst, n, errors = random.Random(12), time.monotonic() + FUZZ_SECONDS, 0.0, 0, 0
        while time.monotonic() < deadline:
            source, t0 = random_template(rng), time.perf_counter()
            try:
                render_jinja(source, dict(context), max_seconds=FUZZ_BOUND)
            except TemplateError:
                errors += 1
            worst, n = max(worst, time.perf_counter() - t0), n + 1
        return {"templates": n, "errors": errors, "worst_s": worst}

    def check(outcome):
        ok = isinstance(outcome, dict) and outcome["worst_s"] < FUZZ_BOUND + ONE_OP
        return ok, (f"{outcome['templates']} templates ({outcome['errors']} refused), the slowest "
                    f"{outcome['worst_s']:.2f} s" if isinstance(outcome, dict) else str(outcome))
    return run, check


def source_cap_case(_: str):
    from pyengine.errors import TemplateError
    from pyengine.text.chat_template import ChatTemplate

    def run():
        return ChatTemplate.from_metadata({"tokenizer.chat_template": "{{ 1 }}" * 20_000})

    def check(outcome):
        return isinstance(outcome, TemplateError) and "131,072" in str(outcome), str(outcome)
    return run, check


def gguf_case(case: str):
    from gguf_corpus import BROKEN

    from pyengine.errors import GGUFError
    from pyengine.gguf import open_gguf
    from pyengine.gguf.source import BytesSource
    data, pattern = next((d, p) for c, d, p in BROKEN if c == case)

    def run():
        return open_gguf(BytesSource(data, "bad.gguf"))

    def check(outcome):
        ok = isinstance(outcome, GGUFError) and re.search(pattern, str(outcome))
        return bool(ok), str(outcome)
    return run, check


def metadata_cap_case(_: str):
    """A sparse file whose one array is an item past the 256 MiB cap."""
    from gguf_write import gstr, header, u32, u64

    from pyengine.errors import GGUFError
    from pyengine.gguf import open_gguf
    from pyengine.gguf.header import MAX_METADATA_BYTES
    n = MAX_METADATA_BYTES // 4
    head = header(0, 1) + gstr("a.big") + u32(9) + u32(6) + u64(n)
    path = Path(tempfile.mkdtemp()) / "sparse.gguf"
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + 4 * n + 64)

    def run():
        return open_gguf(path)

    def check(outcome):
        return isinstance(outcome, GGUFError) and "metadata would hold more than 256 MiB" in str(outcome), \
            str(outcome)
    return run, check


def big_array_file() -> Path:
    """A GGUF whose metadata holds a 240 MB float32 array, written once into the temp folder."""
    import numpy as np
    from gguf_write import gguf_bytes
    path = Path(tempfile.gettempdir()) / "pyengine-hostile-240mb.gguf"
    if not path.exists() or path.stat().st_size < 4 * BIG_ARRAY:
        path.write_bytes(gguf_bytes([("general.architecture", "STRING", "llama"),
                                     ("a.big", "ARRAY[FLOAT32]", np.arange(BIG_ARRAY, dtype="<f4"))],
                                    [("t", (8,), 0, np.ones(8, "<f4").tobytes())]))
    return path


def inspect_case(_: str):
    """``python -m pyengine inspect`` of the 240 MB array's file: its child's peak RSS."""
    path = big_array_file()

    def run():
        p = subprocess.run([sys.executable, "-m", "pyengine", "inspect", str(path)], cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600)
        child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        return {"rc": p.returncode, "child_rss": child}

    def check(outcome):
        bound = 1.25 * 4 * BIG_ARRAY + 200 * MiB
        ok = isinstance(outcome, dict) and outcome["rc"] == 0 and outcome["child_rss"] < bound
        return ok, f"exit {outcome['rc']}, the inspect process peaked at {outcome['child_rss'] / MiB:,.0f} MiB RSS" \
            if isinstance(outcome, dict) else str(outcome)
    return run, check


def open_array_case(_: str):
    from pyengine.gguf import open_gguf
    path = big_array_file()

    def run():
        with open_gguf(path) as g:
            a = g.metadata["a.big"]
            return f"{type(a).__name__} {a.dtype} {a.shape}"

    def check(outcome):
        return outcome == f"ndarray float32 ({BIG_ARRAY},)", str(outcome)
    return run, check


def load_case(cause: str):
    """The tiny llama loaded with a chat in the worker (CPython), then a load that fails for ``cause``."""
    sys.path.insert(0, str(TESTS))
    from browser.test_load_faults import BAD_LOADS, FailingReader, SlicedBlob, sparse_model
    from browser.test_worker_glue import chat, load_tiny
    from browser.test_worker_glue import run as run_command
    from conftest import TINY

    from pyengine.browser import worker
    from pyengine.browser.file_source import BrowserFileSource
    from pyengine.gguf import open_gguf
    from pyengine.gguf.source import FileSource
    from pyengine.weights import budget
    posted: list[dict] = []
    worker.setup(posted.append)
    load_tiny(posted)
    chat(posted, "hello", max_tokens=3)
    before = list(worker._session.chat.messages)
    weights = "auto"
    if cause.startswith("memory"):
        budget.sys.platform = "emscripten"          # budget as Pyodide's: 4 GiB a worker
        if "3B" in cause:
            source, weights = FileSource(sparse_model(Path(tempfile.mkdtemp()) / "3b.gguf")), "f32"
        else:
            source = FileSource(sparse_model(Path(tempfile.mkdtemp()) / "8b.gguf", n_embd=4096, n_ff=14336,
                                             n_layer=32, n_head=32))
    elif cause == "file unreadable mid-load":
        data = TINY["qwen2"].read_bytes()
        with open_gguf(TINY["qwen2"]) as g:
            after = g.data_offset + sum(t.n_bytes for t in g.tensors.values()) // 2
        source = BrowserFileSource(SlicedBlob(data, "qwen2.gguf"), FailingReader(data, after))
    else:
        source = next(s for c, s, _ in BAD_LOADS if c == cause)()
    keeps = cause != "file unreadable mid-load"

    def run():
        start = len(posted)
        run_command({"type": "load", "files": [source], "weights": weights})
        return {"kinds": [m["type"] for m in posted[start:]], "message": posted[-1].get("message", ""),
                "kept": worker._session.chat is not None and worker._session.chat.messages == before}

    def check(outcome):
        if not isinstance(outcome, dict):
            return False, str(outcome)
        ok = outcome["kinds"][-1] == "error" and "internal error" not in outcome["message"]
        unloaded = "unloaded" in outcome["kinds"]
        ok = ok and (outcome["kept"] and not unloaded if keeps else unloaded)
        what = "model and chat kept" if outcome["kept"] else "model let go, the page keeps the chat"
        return ok, f"{what}: {outcome['message']}"
    return run, check


def stop_prompt_case(_: str):
    """Stop landing while the prompt is built, in the worker (CPython): the user's message stays."""
    sys.path.insert(0, str(TESTS))
    from browser.test_worker_glue import chat, load_tiny
    from browser.test_worker_glue import run as run_command

    from pyengine.browser import worker
    from pyengine.generation import chat as chat_module
    posted: list[dict] = []
    worker.setup(posted.append, interruptible=True)
    load_tiny(posted)
    chat(posted, "hello", max_tokens=3)
    real = chat_module.chat_prompt

    def run():
        fired = []

        def prompt(*args, **kwargs):
            if not fired:
                fired.append(1)
                raise KeyboardInterrupt
            return real(*args, **kwargs)
        chat_module.chat_prompt = prompt
        try:
            run_command({"type": "chat", "text": "tell me", "system": "", "settings": {"max_tokens": 3}})
        finally:
            chat_module.chat_prompt = real
        return [m["content"] for m in worker._session.chat.messages]

    def check(outcome):
        ok = isinstance(outcome, list) and outcome[-2:] == ["tell me", ""]
        return ok, f"the worker's conversation ends {outcome[-2:]!r}" if isinstance(outcome, list) else str(outcome)
    return run, check


def cases() -> list[tuple[str, str, str]]:
    """(group, case, bound) of every CPython case, in the table's order."""
    from gguf_corpus import BROKEN
    from template_corpus import HOSTILE

    from pyengine.text.template_bounds import MAX_BUILT, MAX_SECONDS
    tb = f"{MAX_SECONDS:g} s + {ONE_OP:g} s; traced < {MAX_BUILT // MiB} MiB + 48 MiB"
    rows = [("template", c, tb) for c, _, _ in HOSTILE]
    rows += [("template", "fuzz", f"{FUZZ_SECONDS:g} s of random templates, each < {FUZZ_BOUND} s + {ONE_OP:g} s"),
             ("template", "source-cap", "140,000 chars refused at compile (cap 131,072)")]
    rows += [("gguf", c, "GGUFError naming file and byte; < 1 s; traced < 2 MiB") for c, _, _ in BROKEN]
    rows += [("metadata", "cap-256MiB-sparse", "refused before allocating; traced < 2 MiB"),
             ("metadata", "open-240MB-array", "a numpy array; traced < 240 MB + 2 MiB"),
             ("metadata", "inspect-240MB-array", "child RSS < 1.25 x 240 MB + 200 MiB (was 2.5 GB)")]
    rows += [("counts", c, "refused before the objects are made; RSS < 2 x file + 64 MiB (was 13-22 x)")
             for c in ("inner-arrays", "keys", "tensor-infos")]
    rows += [("chat", "400 turns, 508 k chars", "prompt built < 2 s (was 87 s a send)"),
             ("chat", "199 x 5,000 chars, Jinja", "answered (was: the template refused 'messages' over 1 M chars)")]
    from browser.test_load_faults import BAD_LOADS
    rows += [("load", c, "error before any weight is read; model and chat kept") for c, _, _ in BAD_LOADS]
    rows += [("load", "memory (3B-shaped Q4_0 asked in f32)", "error before any weight is read; model and chat kept"),
             ("load", "memory (8B-shaped Q4_0, auto)", "error before any weight is read; model and chat kept"),
             ("load", "auto fits (3B-shaped Q4_0)", "auto plans within one worker's heap (4 GiB - 128 MiB)"),
             ("load", "file unreadable mid-load", "says so, the model before let go (offered again)"),
             ("stop", "while the prompt is built", "the user's message stays in the worker's conversation")]
    return rows


def auto_fits_case(_: str):
    """The 3B's plan in the browser's budget: mixed forms within one worker's heap."""
    from browser.test_load_faults import sparse_model

    from pyengine.gguf import open_gguf
    from pyengine.model.config import ModelConfig
    from pyengine.parallel.driver import plan_load
    from pyengine.weights import budget
    budget.sys.platform = "emscripten"
    path = sparse_model(Path(tempfile.mkdtemp()) / "3b.gguf")

    def run():
        with open_gguf(path) as g:
            plan = plan_load(g, ModelConfig.from_metadata(g.metadata, g.tensors), "auto", 1)
        return plan.weights, plan.nbytes

    def check(outcome):
        if not isinstance(outcome, tuple):
            return False, str(outcome)
        ok = outcome[1] + budget.RUNTIME_BYTES <= budget.HEAP_MAX
        return ok, f"{outcome[0]} forms, {(outcome[1] + budget.RUNTIME_BYTES) / 2**30:.2f} GiB a worker"
    return run, check


def counts_case(case: str):
    """A small file of hostile counts (tests/gguf_file/test_gguf_hostile.py's), written once, opened."""
    from gguf_file.test_gguf_hostile import HOSTILE_COUNTS

    from pyengine.errors import GGUFError
    from pyengine.gguf import open_gguf
    make, pattern = HOSTILE_COUNTS[case]
    path = Path(tempfile.mkdtemp()) / f"{case}.gguf"
    path.write_bytes(make())

    def run():
        return open_gguf(path)

    def check(outcome):
        return isinstance(outcome, GGUFError) and re.search(pattern, str(outcome)) is not None, \
            f"{path.stat().st_size / MiB:.0f} MiB file: {outcome}"
    return run, check


def long_chat_case(case: str):
    """A send after a long conversation: 400 turns (508 k chars) on the tiny llama at n_ctx 4096, or 199
    messages of 5,000 chars with SmolLM2's Jinja template at 2048: the prompt built, its turns left out."""
    from conftest import SMOLLM2, TINY

    from pyengine.generation import ChatSession, load
    from pyengine.generation.request import Request
    from pyengine.generation.sampling import SamplerParams
    jinja = case.startswith("199")
    engine = load([str(SMOLLM2 if jinja else TINY["llama"])], weights="f32")
    text = "x" * 4990 if jinja else "words and more words " * 60
    talk = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + text}
            for i in range(199 if jinja else 400)]

    def run():
        chat = ChatSession(engine, n_ctx=2048 if jinja else 4096)
        chat.messages = list(talk)
        turn = chat.send("the last question", Request(SamplerParams(temperature=0), 1))
        turn.close()
        return turn.stats.dropped_messages

    def check(outcome):
        return isinstance(outcome, int), f"{outcome} messages left out"
    return run, check


MAKERS = {"template": template_case, "gguf": gguf_case, "load": load_case, "stop": stop_prompt_case}
SPECIAL = {("template", "fuzz"): fuzz_case, ("template", "source-cap"): source_cap_case,
           ("metadata", "cap-256MiB-sparse"): metadata_cap_case, ("metadata", "open-240MB-array"): open_array_case,
           ("metadata", "inspect-240MB-array"): inspect_case, ("load", "auto fits (3B-shaped Q4_0)"): auto_fits_case,
           **{("counts", c): counts_case for c in ("inner-arrays", "keys", "tensor-infos")},
           **{("chat", c): long_chat_case for c in ("400 turns, 508 k chars", "199 x 5,000 chars, Jinja")}}


def outcome_of(run):
    try:
        return run()
    except Exception as e:  # noqa: BLE001 (the error is the case's outcome)
        return e


def measure_one(group: str, case: str) -> dict:
    """One case in this process: seconds and RSS growth, then tracemalloc's peak on a second run."""
    run, check = SPECIAL.get((group, case), MAKERS.get(group))(case)
    rss0 = peak_rss()
    t0 = time.perf_counter()
    outcome = outcome_of(run)
    seconds = time.perf_counter() - t0
    rss = peak_rss() - rss0
    passed, text = check(outcome)
    traced = None
    if case not in ("fuzz", "inspect-240MB-array"):   # tracing would slow the fuzzer; inspect runs in a child
        tracemalloc.start()
        outcome_of(run)
        traced = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    if isinstance(outcome, dict) and "child_rss" in outcome:
        rss = outcome["child_rss"]
    return {"seconds": seconds, "rss_growth": rss, "traced": traced, "passed": passed, "result": text}


def bounded(row: dict) -> bool:
    """The case's own bound on time and traced memory, on top of its result (check)."""
    from pyengine.text.template_bounds import MAX_BUILT, MAX_SECONDS
    group, case, traced, s = row["group"], row["case"], row["traced"] or 0, row["seconds"]
    if group == "template" and case not in ("fuzz", "source-cap"):
        return s < MAX_SECONDS + ONE_OP and traced < MAX_BUILT + 48 * MiB
    if group == "gguf" or case == "cap-256MiB-sparse":
        return s < 1.0 and traced < 2 * MiB
    if case == "open-240MB-array":
        return traced < 4 * BIG_ARRAY + 2 * MiB
    if group == "counts":
        return row["rss_growth"] < 2 * float(row["result"].split(" MiB")[0]) * MiB + 64 * MiB
    if case.startswith("400 turns"):
        return s < 2.0
    return True


# --- under Pyodide in Node ------------------------------------------------------------------------

NODE_CODE = '''
import os, random, sys, time
sys.path.insert(0, "/tests")
import pyodide_js
from template_corpus import HOSTILE, random_template
from pyengine.errors import GGUFError, TemplateError
from pyengine.gguf import open_gguf
from pyengine.gguf.source import BytesSource
from pyengine.text.jinja_sandbox import render_jinja

def heap():
    return pyodide_js._module.HEAP8.length

CONTEXT = {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": True}
out = {"template": {}, "gguf": {}}
for case, source, _ in HOSTILE:
    before, t0 = heap(), time.perf_counter()
    try:
        render_jinja(source, dict(CONTEXT))
        message = None
    except TemplateError as e:
        message = str(e)
    out["template"][case] = [message, time.perf_counter() - t0, heap() - before]
for name in sorted(os.listdir("/corpus")):
    case, data = name[:-5], open("/corpus/" + name, "rb").read()
    before, t0 = heap(), time.perf_counter()
    try:
        open_gguf(BytesSource(data, "bad.gguf")).close()
        message = None
    except GGUFError as e:
        message = str(e)
    out["gguf"][case] = [message, time.perf_counter() - t0, heap() - before]
rng, deadline, n, worst, before = random.Random(12), time.monotonic() + FUZZ, 0, 0.0, heap()
while time.monotonic() < deadline:
    source, t0 = random_template(rng), time.perf_counter()
    try:
        render_jinja(source, dict(CONTEXT), max_seconds=BOUND)
    except TemplateError:
        pass
    n, worst = n + 1, max(worst, time.perf_counter() - t0)
out["fuzz"] = [n, worst, heap() - before]
out["heap"] = heap()
out
'''


def node_run() -> dict:
    from gguf_corpus import BROKEN
    from static_build import STATIC, offline
    corpus = Path(tempfile.mkdtemp())
    for case, data, _ in BROKEN:                       # written here: the corpus is made with gguf-py
        (corpus / f"{case}.gguf").write_bytes(data)
    code = NODE_CODE.replace("FUZZ", str(FUZZ_SECONDS)).replace("BOUND", str(FUZZ_BOUND))
    args = ["node", str(TESTS / "node" / "run_pyodide.mjs"), "--static", str(STATIC), "--mount", f"{TESTS}:/tests",
            "--mount", f"{corpus}:/corpus"]
    proc = subprocess.run(offline(args), input=code, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"Pyodide run failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


# --- the report -----------------------------------------------------------------------------------

def mib(n) -> str:
    return "-" if n is None else f"{n / MiB:,.1f}"


def cell(text: str, n: int = 90) -> str:
    text = text.replace("|", "\\|").replace("\n", " ")
    return text if len(text) <= n else text[:n - 3] + "..."


def write_report(rows: list[dict], node: dict | None) -> str:
    from gguf_corpus import BROKEN
    from template_corpus import HOSTILE

    from pyengine.text.template_bounds import MAX_BUILT, MAX_SECONDS
    ok = sum(r["passed"] and r["bounded"] for r in rows)
    lines = ["# Hostile input (issue 12): each case, its bound, what it cost, the result", "",
             "Made by `bench/hostile.py` (`flock /tmp/pyengine-heavy.lock python bench/hostile.py`); numbers in "
             "bench/hostile.json. CPython " + sys.version.split()[0] + ", each case in a fresh process: the time "
             "of one run, the growth of the process's peak RSS over it, and tracemalloc's peak on a second run. "
             "Templates render under the real bounds (10 s, 2,000,000 steps, 64 MiB built a render). "
             f"Machine: {os.cpu_count()} cores, shared with other work (times are upper bounds).", "",
             f"**{ok} of {len(rows)} CPython cases within their bound with the expected result.**", "",
             "| group | case | bound | seconds | traced MiB | RSS growth MiB | result |",
             "|---|---|---|---:|---:|---:|---|"]
    for r in rows:
        mark = "ok" if r["passed"] and r["bounded"] else "FAIL"
        lines.append(f"| {r['group']} | {cell(r['case'], 40)} | {cell(r['bound'], 60)} | {r['seconds']:.3f} | "
                     f"{mib(r['traced'])} | {mib(r['rss_growth'])} | {mark}: {cell(r['result'])} |")
    if node:
        tpat = {c: p for c, _, p in HOSTILE}
        gpat = {c: p for c, _, p in BROKEN}
        heap_bound = MAX_BUILT + 64 * MiB
        t_ok = [c for c, (m, s, h) in node["template"].items()
                if m and (re.search(tpat[c], m) or "took more" in tpat[c])   # as template_case's check
                and s < MAX_SECONDS + 2 and h < heap_bound]
        g_ok = [c for c, (m, s, h) in node["gguf"].items() if m and re.search(gpat[c], m) and s < 2]
        n, worst, fuzz_heap = node["fuzz"]
        lines += ["", "## Under Pyodide 0.27.7 in Node", "",
                  f"One Node process; wasm heap at the end {node['heap'] / MiB:,.0f} MiB. Bound: templates "
                  f"{MAX_SECONDS:g} s + 2 s and heap growth < {heap_bound // MiB} MiB; GGUF files < 2 s with "
                  f"CPython's error. **Templates: {len(t_ok)} of {len(node['template'])} within; GGUF: {len(g_ok)} "
                  f"of {len(node['gguf'])} within; fuzz: {n} random templates in {FUZZ_SECONDS:g} s, the slowest "
                  f"{worst:.2f} s (bound {FUZZ_BOUND} s + 2 s), heap growth {fuzz_heap / MiB:.0f} MiB.**", "",
                  "| group | case | seconds | heap growth MiB | result |", "|---|---|---:|---:|---|"]
        for group, good in (("template", t_ok), ("gguf", g_ok)):
            for c, (m, s, h) in node[group].items():
                mark = "ok" if c in good else "FAIL"
                lines.append(f"| {group} | {c} | {s:.3f} | {mib(h)} | {mark}: {cell(m or 'no error')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--one", nargs=2, metavar=("GROUP", "CASE"), help="measure one case in this process (JSON)")
    ap.add_argument("--no-node", action="store_true", help="skip the Pyodide run")
    ap.add_argument("--node-only", action="store_true", help="the CPython rows from bench/hostile.json")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure_one(*args.one)))
        return
    out = ROOT / "bench" / "hostile.json"
    rows = json.loads(out.read_text())["cpython"] if args.node_only else []
    for group, case, bound in [] if args.node_only else cases():
        p = subprocess.run([sys.executable, __file__, "--one", group, case], capture_output=True, text=True,
                           timeout=900, cwd=ROOT)
        if p.returncode:
            row = {"seconds": 0.0, "rss_growth": None, "traced": None, "passed": False,
                   "result": f"crashed: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}"}
        else:
            row = json.loads(p.stdout.strip().splitlines()[-1])
        row.update(group=group, case=case, bound=bound)
        row["bounded"] = bounded(row)
        rows.append(row)
        print(f"{group:9} {case[:34]:34} {row['seconds']:7.3f} s {mib(row['traced']):>8} MiB "
              f"{'ok' if row['passed'] and row['bounded'] else 'FAIL'}", flush=True)
    out.write_text(json.dumps({"cpython": rows, "node": None}, indent=1) + "\n")
    node = None if args.no_node else node_run()
    out.write_text(json.dumps({"cpython": rows, "node": node}, indent=1) + "\n")
    (ROOT / "bench" / "HOSTILE.md").write_text(write_report(rows, node))


if __name__ == "__main__":
    main()
