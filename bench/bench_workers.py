"""Decode and prefill speed of the browser app with 1, 2 and 4 Pyodide workers (pyengine/parallel).

    python bench/bench_workers.py [--model models/gemma-3-270m-q4_k_m.gguf] [--runs 3] [--workers 1 2 4 2@compact]

Each run is a fresh headless Chromium (Debian's /usr/bin/chromium) on the app as built in static/,
served cross-origin isolated by build_scripts/serve.py: choose the worker count on the page, pick
the model file, send one prompt (~128 tokens once the chat template is applied) at temperature 0
with at most 64 new tokens, and read the page's own numbers (the worker's TurnStats, the wasm heap
of each worker). The worker counts are interleaved (1, 2, 4, 1, 2, 4, ...) so a noisy machine
disturbs them alike; medians and the spread (min-max) over the runs are printed as a table and
written to bench/workers.json. Requests to any host other than 127.0.0.1 are aborted.

A setting ``N`` splits the model over N workers (pyengine.parallel.split: heads, FFN units and
vocabulary rows); ``@form`` loads with that Memory setting (pyengine.weights.budget.CHOICES) instead
of "auto". Before each round, two processes spin side by side (``cpu_parallel``: the
speed-up two busy processes get over one, 2.0 when both cores are free, 1.0 when other work holds one): workers can
only be faster when it is near 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from browser.conftest import CHROMIUM, CHROMIUM_ARGS, STATIC, NetworkGuard, start_server, stop_server
from browser.pages import BOOT_MS, error_text, pick_files, send, set_settings, wait_loaded, wait_reply, wait_status

# ~128 prompt tokens for Gemma 3 with its chat template (the run records the exact count)
PROMPT = ("Here is a short history of the printing press. Around 1440 Johannes Gutenberg, a goldsmith in Mainz, "
          "combined movable metal type, an oil-based ink and a wooden screw press into a system that could print "
          "pages far faster than any scribe could copy them. Within fifty years presses were running in more than "
          "two hundred cities across Europe, and millions of books had been printed. Prices fell, literacy rose, "
          "and ideas moved between scholars at a speed never seen before. Write a detailed essay that continues "
          "this history through the following centuries.")
N_GEN = 64


def spin(_=None) -> float:
    """Seconds of a fixed pure-Python loop."""
    t0, x = time.perf_counter(), 0
    for i in range(3_000_000):
        x += i
    return time.perf_counter() - t0


def cpu_parallel() -> float:
    """How much faster two processes spinning side by side finish their work than one after the other."""
    import multiprocessing
    one = spin()
    with multiprocessing.Pool(2) as pool:
        two = max(pool.map(spin, [0, 1]))
    return 2 * one / two


def one_run(pw, url: str, model: Path, setting: str, prompt: str = PROMPT, n_gen: int = N_GEN) -> dict:
    """A fresh browser: boot, choose the workers (``"N"``, then ``@form`` for a Memory setting other than
    "auto"), load ``model``, one greedy reply. Seconds, tok/s, bytes."""
    label = setting
    workers, _, weights = setting.partition("@")
    workers = int(workers)
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    try:
        context = browser.new_context(service_workers="block")
        guard = NetworkGuard(context)
        page = context.new_page()
        t0 = time.monotonic()
        page.goto(url)
        wait_status(page, ("no model",), BOOT_MS)
        boot_s = time.monotonic() - t0
        page.get_by_test_id("workers").select_option(str(workers))
        t0 = time.monotonic()
        pick_files(page, [model], weights or "auto")
        wait_loaded(page)
        load_s = time.monotonic() - t0
        if page.get_by_test_id("status").text_content() != "ready":
            raise RuntimeError(f"load failed: {error_text(page)}")
        note = page.get_by_test_id("workers-note")
        count, sync = int(note.get_attribute("data-count")), note.get_attribute("data-sync-us")
        if count != workers:
            raise RuntimeError(f"asked for {workers} workers, got {count}: {note.text_content()}")
        set_settings(page, temperature=0, max_tokens=n_gen, seed=None)
        send(page, prompt)
        wait_reply(page)
        stats = json.loads(page.get_by_test_id("stats").get_attribute("data-stats"))
        heap = json.loads(note.get_attribute("data-heap"))                # after the reply: the peak
        if guard.outside:
            raise RuntimeError(f"requests left 127.0.0.1: {guard.outside}")
    finally:
        browser.close()
    return {"setting": label, "workers": workers, "boot_s": boot_s, "load_s": load_s, "heap_bytes": heap,
            "sync_us": float(sync) if sync else None,
            "prompt_tokens": stats["prompt_tokens"], "prefill_tok_s": stats["prefill_tok_s"],
            "decode_tokens": stats["decode_tokens"],
            "decode_ms_per_token": 1000 * stats["decode_seconds"] / max(1, stats["decode_tokens"]),
            "decode_tok_s": stats["decode_tok_s"],
            "decode_wait_ms_per_token": 1000 * stats["decode_wait_seconds"] / max(1, stats["decode_tokens"]),
            "prefill_wait_s": stats["prefill_wait_seconds"], "browser": browser.version}


def summarize(runs: list[dict], settings: list[str]) -> list[dict]:
    """Per setting: median, min and max of each measure."""
    rows = []
    for n in settings:
        mine = [r for r in runs if r["setting"] == n]
        row = {"setting": n, "runs": len(mine)}
        for key in ("decode_ms_per_token", "decode_wait_ms_per_token", "decode_tok_s", "prefill_tok_s", "load_s",
                    "boot_s", "cpu_parallel"):
            v = [r[key] for r in mine]
            row[key] = {"median": statistics.median(v), "min": min(v), "max": max(v)}
        row["heap_bytes"] = mine[-1]["heap_bytes"]
        syncs = [r["sync_us"] for r in mine if r.get("sync_us") is not None]
        row["sync_us"] = statistics.median(syncs) if syncs else None
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    base = rows[0]["decode_ms_per_token"]["median"]

    def cell(m: dict, fmt: str) -> str:
        return f"{m['median']:{fmt}} ({m['min']:{fmt}}-{m['max']:{fmt}})"
    lines = ["| workers | decode ms/token | of which waiting for helpers | decode tok/s | speed-up | prefill tok/s "
             "| load s | wasm heap per worker | one sync µs | cpu_parallel |", "|---" * 10 + "|"]
    for r in rows:
        heap = " + ".join(f"{b / 2**20:.0f} MiB" for b in r["heap_bytes"])
        lines.append(f"| {r['setting']} | {cell(r['decode_ms_per_token'], '.1f')} "
                     f"| {cell(r['decode_wait_ms_per_token'], '.1f')} | {cell(r['decode_tok_s'], '.2f')} "
                     f"| {base / r['decode_ms_per_token']['median']:.2f}x | {cell(r['prefill_tok_s'], '.1f')} "
                     f"| {cell(r['load_s'], '.1f')} | {heap} | {'-' if r['sync_us'] is None else r['sync_us']} "
                     f"| {cell(r['cpu_parallel'], '.2f')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ROOT / "models" / "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", nargs="+", default=["1", "2", "4"])
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "workers.json")
    ap.add_argument("--gen", type=int, default=N_GEN, help=f"new tokens at most (default {N_GEN})")
    ap.add_argument("--prompt", default=PROMPT, help="the chat message (default: ~128 tokens on the printing press)")
    args = ap.parse_args()
    if not (STATIC / "index.html").is_file():
        sys.exit("static/ is not built: run `make build`")
    from playwright.sync_api import sync_playwright

    proc, url = start_server()
    runs = []
    try:
        with sync_playwright() as pw:
            for i in range(args.runs):
                for n in args.workers:
                    par = cpu_parallel()
                    r = {**one_run(pw, url, args.model, n, args.prompt, args.gen), "cpu_parallel": par}
                    runs.append(r)
                    print(f"run {i + 1}/{args.runs}, {n} worker(s), cpu_parallel {par:.2f}: "
                          f"decode {r['decode_ms_per_token']:.1f} ms/token "
                          f"({r['decode_wait_ms_per_token']:.1f} waiting), "
                          f"prefill {r['prefill_tok_s']:.1f} tok/s ({r['prompt_tokens']} tokens), "
                          f"load {r['load_s']:.1f} s", flush=True)
    finally:
        stop_server(proc)
    rows = summarize(runs, args.workers)
    print(table(rows))
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "model": args.model.name,
              "browser": f"Chromium {runs[0]['browser']}", "n_gen": args.gen, "summary": rows, "runs": runs}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
