"""The browser half of `make bench`: Debian's Chromium driven by Playwright against a local server.

One server on 127.0.0.1 (build_scripts/serve.py's handler, with its COOP/COEP headers, so the page is
cross-origin isolated and wllama may start threads) serves three folders:

    /bench/...   bench/          the bench page (bench/web/) and bench/pyengine_bench.py
    /wllama/...  .cache/wllama/package/esm/   wllama's ES module and wasm (`npm pack @wllama/wllama`)
    /...         static/         Pyodide and the wheels, as built by build_scripts/build_static.py

Each run gets a fresh browser (fresh workers and wasm heaps, no threads left from the run before):
boot the runtime, choose the model file through the page's file input (as a person would), wait for
the load, run the prompt.
Every request to a host other than 127.0.0.1 fails (the resolver knows no other host) and is counted.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "build_scripts"))
import serve

CHROMIUM = "/usr/bin/chromium"
# The network guard is in the resolver: every host but 127.0.0.1 fails to resolve. (Playwright's request
# interception, the tests' guard, made wllama's 2-thread runs hang: its pthreads never started.)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
WLLAMA_VERSION = "3.13.0"
WLLAMA_DIR = ROOT / ".cache" / "wllama"                 # git-ignored (/.cache/)
WLLAMA_ESM = WLLAMA_DIR / "package" / "esm"
MOUNTS = {"/bench/": ROOT / "bench", "/wllama/": WLLAMA_ESM}   # URL prefix -> folder; the rest is static/
# Seconds each step may take (Playwright's evaluate has no timeout of its own). wllama with 2 threads
# sometimes never finishes its load or its completion when the machine is loaded: such a run fails
# after its timeout and the next one starts.
TIMEOUTS = {"boot": 120, "loaded": 180, "generate": 300}


def fetch_wllama() -> Path:
    """wllama's package in .cache/wllama/ (`npm pack`, once); returns its esm/ folder."""
    if not (WLLAMA_ESM / "index.js").is_file():
        WLLAMA_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "pack", f"@wllama/wllama@{WLLAMA_VERSION}"], cwd=WLLAMA_DIR, check=True,
                       capture_output=True)
        with tarfile.open(WLLAMA_DIR / f"wllama-wllama-{WLLAMA_VERSION}.tgz") as tar:
            tar.extractall(WLLAMA_DIR, filter="data")
    return WLLAMA_ESM


class BenchHandler(serve.Handler):
    """serve.py's handler (headers, path checks, ranges) over the three folders of :data:`MOUNTS`."""

    static_root: Path
    # wllama starts its workers from blob: URLs, which the app's Content-Security-Policy forbids: the bench
    # pages are not the app, and run without it (the app's own page, bench_workers.py, keeps it)
    policy = {k: v for k, v in serve.HEADERS.items() if k != "Content-Security-Policy"}

    def send_file(self, body: bool) -> None:
        self.root = self.static_root
        for prefix, folder in MOUNTS.items():
            if self.path.startswith(prefix):
                self.root, self.path = folder.resolve(), self.path[len(prefix) - 1:]
                break
        super().send_file(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass


def evaluate(page, step: str, expression: str, arg=None):
    """``await expression`` in the page (``arg`` in scope), failing after ``TIMEOUTS[step]`` seconds."""
    return page.evaluate(f"""async (arg) => {{
        let timer;
        const late = new Promise((_, reject) => {{
          const why = new Error("{step}: no answer in {TIMEOUTS[step]} s");
          timer = setTimeout(() => reject(why), {1000 * TIMEOUTS[step]});
        }});
        try {{ return await Promise.race([{expression}, late]); }} finally {{ clearTimeout(timer); }}
    }}""", arg)


class ChromiumBench:
    """Playwright and the server, for the length of a `with` block; :meth:`run` measures one engine once,
    in a Chromium of its own."""

    def __init__(self, static: Path):
        handler = type("Handler", (BenchHandler,), {"static_root": static.resolve()})
        self.server = serve.Server((serve.HOST, 0), handler)
        self.url = f"http://{serve.HOST}:{self.server.server_address[1]}"
        self.blocked: list[str] = []

    def __enter__(self) -> ChromiumBench:
        from playwright.sync_api import sync_playwright
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self._pw = sync_playwright().start()
        return self

    def __exit__(self, *exc) -> None:
        self._pw.stop()
        self.server.shutdown()
        self.server.server_close()

    def _note(self, request) -> None:
        """Count a request to any host but 127.0.0.1 (the resolver rule makes it fail)."""
        if urlsplit(request.url).scheme in ("http", "https") and urlsplit(request.url).hostname != serve.HOST:
            self.blocked.append(request.url)

    def run(self, engine: str, threads: int, model: Path, prompt: list[int] | str, n_gen: int,
            long_prompt: str | None = None) -> dict:
        """One run in a fresh page: boot, choose the file, load, the prompt to ``n_gen`` tokens (``ttft_s``:
        to the first token, wall, as the page sees it). ``prompt``: ids for pyengine, the text that
        tokenizes to them for wllama (its completion API takes text). With ``long_prompt`` (text, wllama)
        a second completion of one token from it gives ``long`` (its TTFT, prompt tokens, prefill tok/s).
        Numbers in seconds and bytes."""
        browser = self._pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        version = browser.version
        page = browser.new_page()
        page.on("request", self._note)
        page.set_default_timeout(1000 * TIMEOUTS["boot"])
        errors: list[str] = []
        console: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: console.append(m.text[:300]))
        try:
            page.goto(f"{self.url}/bench/web/index.html?engine={engine}&threads={threads}")
            if not page.evaluate("self.crossOriginIsolated"):
                raise RuntimeError("the bench page is not cross-origin isolated")
            boot = evaluate(page, "boot", "bench.boot()")
            page.set_input_files("#file", str(model))
            load = evaluate(page, "loaded", "bench.loaded")
            result = evaluate(page, "generate", "bench.generate(...arg)", [prompt, n_gen])
            if long_prompt is not None:
                long = evaluate(page, "generate", "bench.generate(...arg)", [long_prompt, 1])
                result["long"] = {"ttft_s": long["ttft_wall_s"], "prompt_tokens": long["prompt_tokens"],
                                  "prefill_tok_s": long["prefill_tok_s"]}
            memory = result.get("wasm_heap_bytes")
        except Exception as e:
            raise RuntimeError(f"{e}; page errors: {errors[-3:]}; console: {console[-8:]}") from None
        finally:
            browser.close()
        if errors:
            result["page_errors"] = errors
        return {**result, "boot": boot, **load, "load_s": load["load_wall_s"], "ttft_s": result["ttft_wall_s"],
                "wasm_heap_bytes": memory, "browser": version,
                "blocked_requests": list(self.blocked)}
