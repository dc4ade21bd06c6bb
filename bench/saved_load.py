"""A model's first load (the file chosen) against its second (the copy saved in OPFS), in Chromium.

    flock /tmp/pyengine-heavy.lock python3 bench/saved_load.py [MODEL] [--workers N] [--memory FORM]

One page (1 worker and the default Memory unless told): choose the file, wait for the load and for its
copy into OPFS, reload the page (a new worker), load the saved model with one click. Printed per load:
the worker's "loaded in" seconds and the page's (from the click to ready), and how long the page takes to
read the saved file's bytes alone (16 MiB slices, as the worker reads a File): what a cache of the
converted weights could save at most is the load less that read, and it would read more bytes than the
file (the converted weights are larger than the file's codes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests")]  # tests/: the browser package and conftest

from browser.conftest import CHROMIUM, CHROMIUM_ARGS, STATIC, start_server, stop_server  # noqa: E402
from browser.pages import BOOT_MS, choose_memory, wait_status  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

MODEL = ROOT / "models" / "bench" / "qwen2-0.5b-random-q4_k_m.gguf"

# Start a clock: window.loadMs becomes the milliseconds from now until the page says ready (or failed).
CLOCK = """() => {
  const t0 = performance.now();
  const s = document.querySelector('[data-testid=status]');
  window.loadMs = null;
  const check = () => (s.textContent === 'ready' || s.textContent === 'failed'
    ? (window.loadMs = performance.now() - t0) : setTimeout(check, 20));
  setTimeout(check, 20);
}"""

# Milliseconds to read every byte of the saved models' files, 16 MiB at a time.
READ_SAVED = """async () => {
  const root = await (await navigator.storage.getDirectory()).getDirectoryHandle('models');
  const t0 = performance.now();
  let n = 0;
  for await (const [, dir] of root.entries()) {
    for await (const [name, h] of dir.entries()) {
      if (name === 'meta.json') continue;
      const f = await h.getFile();
      for (let at = 0; at < f.size; at += 16 << 20) n += (await f.slice(at, at + (16 << 20)).arrayBuffer()).byteLength;
    }
  }
  return [performance.now() - t0, n];
}"""


def loaded_in(page) -> str:
    """The worker's load time, the form the weights took and the worker's wasm memory."""
    form = page.locator("dd[data-field=weights]").text_content()
    heap = page.get_by_test_id("workers-note").get_attribute("data-heap")
    return f"{page.get_by_test_id('stats').text_content()} ({form}; wasm memory {heap} bytes)"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", type=Path, default=MODEL)
    ap.add_argument("--workers", default="1")
    ap.add_argument("--memory", default=None, help="the Memory setting (default: the page's, auto)")
    args = ap.parse_args()
    if not (STATIC / "index.html").is_file():
        sys.exit("static/ is not built: run `make build`")
    proc, url = start_server()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_context().new_page()
            page.goto(url)
            wait_status(page, ("no model",), BOOT_MS)
            page.get_by_test_id("workers").select_option(args.workers)
            choose_memory(page, args.memory)
            page.evaluate(CLOCK)
            page.get_by_test_id("file-input").set_input_files([str(args.model)])
            first = page.wait_for_function("() => window.loadMs", timeout=600_000).json_value()
            print(f"first load (file chosen): page {first / 1000:.1f} s, worker {loaded_in(page)}")
            page.wait_for_function("() => document.querySelectorAll('[data-testid=saved-model-list] li').length"
                                   " && document.querySelector('[data-testid=storage-note]').textContent"
                                   ".startsWith('This')", timeout=300_000)
            page.reload()
            wait_status(page, ("no model",), BOOT_MS)
            page.get_by_test_id("workers").select_option(args.workers)
            choose_memory(page, args.memory)
            ms, n = page.evaluate(READ_SAVED)
            print(f"reading the saved file alone: {ms / 1000:.2f} s for {n / 2**20:.0f} MiB")
            page.evaluate(CLOCK)
            page.locator("[data-testid=saved-model-list] button", has_text="Load").first.click()
            second = page.wait_for_function("() => window.loadMs", timeout=600_000).json_value()
            print(f"second load (saved model): page {second / 1000:.1f} s, worker {loaded_in(page)}")
            browser.close()
    finally:
        stop_server(proc)


if __name__ == "__main__":
    main()
