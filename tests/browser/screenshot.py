"""Make the README's screenshots with SmolLM2-135M-Instruct (Memory f32, greedy replies) in Chromium:

    docs/screenshot.png     a chat whose reply has highlighted code, 1280 px wide
    docs/probabilities.png  a short reply as its tokens shaded by probability, one token's alternatives open
    docs/phone.png          the chat at a phone's width (390 px), the settings folded away
    docs/dark.png           the chat with code in the dark theme (the system's scheme emulated as dark)
    docs/dark-probabilities.png  the probabilities in the dark theme

    python tests/browser/screenshot.py        (needs static/ built and the models fetched)

Not a test: run it by hand when the page's look changes, and look at the pictures.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # tests/: the browser package and conftest

from playwright.sync_api import sync_playwright  # noqa: E402

from browser.conftest import CHROMIUM, CHROMIUM_ARGS, ROOT, check_static, start_server, stop_server  # noqa: E402
from browser.pages import BOOT_MS, ask, load_model, new_chat, set_settings, wait_status  # noqa: E402

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
QUESTION = "Write a Python function that checks if a number is prime."
SHORT = "What is the capital of France?"
DOCS = ROOT / "docs"
DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}


def shoot(page, name: str) -> None:
    path = DOCS / name
    page.screenshot(path=str(path))
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")


def show_alternatives(page, index: int) -> None:
    """Focus the reply's token ``index`` (its alternatives open under it) and scroll it into view."""
    token = page.locator(".message.assistant:last-child .tok").nth(index)
    token.focus()
    token.scroll_into_view_if_needed()


def with_demo(shots) -> None:
    """Serve static/, open it in Chromium with SmolLM2 loaded (Memory f32, 1 worker), run ``shots(page)``."""
    check_static()
    proc, url = start_server()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport=DESKTOP, device_scale_factor=1)
            page.goto(url)
            wait_status(page, ("no model",), BOOT_MS)
            load_model(page, [MODEL], workers="1")  # f32: in the file's codes (as in llama.cpp) SHORT goes astray
            shots(page)
            page.get_by_test_id("show-probs").uncheck()  # the toggle is kept in localStorage
            browser.close()
    finally:
        stop_server(proc)


def readme_shots(page) -> None:
    """The README's pictures (the module's list), on the page ``with_demo`` opened."""
    set_settings(page, temperature=0, max_tokens=256)
    print(ask(page, QUESTION))
    page.locator(".message.assistant:last-child pre").first.scroll_into_view_if_needed()
    page.evaluate("document.querySelector('.side').scrollTop = 0")
    shoot(page, "screenshot.png")
    page.emulate_media(color_scheme="dark")   # the Theme setting on System follows it
    shoot(page, "dark.png")
    page.emulate_media(color_scheme="light")

    page.set_viewport_size(PHONE)
    page.evaluate("document.querySelector('.messages').scrollTop = 0")
    shoot(page, "phone.png")
    page.set_viewport_size(DESKTOP)

    new_chat(page)
    page.get_by_test_id("show-probs").check()  # the records come with the replies asked while it is on
    set_settings(page, max_tokens=24)
    print(ask(page, SHORT))
    show_alternatives(page, 5)  # " Paris"
    shoot(page, "probabilities.png")
    page.emulate_media(color_scheme="dark")
    show_alternatives(page, 5)
    shoot(page, "dark-probabilities.png")
    page.emulate_media(color_scheme="light")


def main() -> None:
    with_demo(readme_shots)


if __name__ == "__main__":
    main()
