"""Make docs/screenshot.png: the app in Chromium with SmolLM2-135M-Instruct and a finished greedy reply.

    python tests/browser/screenshot.py        (needs static/ built and the models fetched)

Not a test: run it by hand when the page's look changes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # tests/: the browser package and conftest

from playwright.sync_api import sync_playwright  # noqa: E402

from browser.conftest import CHROMIUM, CHROMIUM_ARGS, ROOT, check_static, start_server, stop_server  # noqa: E402
from browser.pages import BOOT_MS, pick_files, send, set_settings, wait_loaded, wait_reply, wait_status  # noqa: E402

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = "Give me three tips for a good night's sleep."
OUT = ROOT / "docs" / "screenshot.png"


def main() -> None:
    check_static()
    proc, url = start_server()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
            page.goto(url)
            wait_status(page, ("no model",), BOOT_MS)
            pick_files(page, [MODEL])
            wait_loaded(page)
            set_settings(page, temperature=0, max_tokens=96)
            send(page, QUESTION)
            print(wait_reply(page))
            page.evaluate("document.querySelector('.side').scrollTop = 0")
            page.screenshot(path=str(OUT))
            browser.close()
    finally:
        stop_server(proc)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
