"""Make docs/TRACE.md's pictures with SmolLM2-135M-Instruct (Memory f32, 1 worker, greedy) in Chromium:

    docs/trace-token.png      the reply as its tokens, " Paris" about to be clicked
    docs/trace-lens.png       Inside the step: the logit lens, layer by layer
    docs/trace-attention.png  the attention: the heatmap of the heads' mean, the tokens shaded, the table
    docs/trace-cost.png       the step's cost as bars and a table
    docs/trace-phone.png      the panel at a phone's width (390 px)

    python tests/browser/trace_screenshots.py        (needs static/ built and the models fetched)

Not a test: run it by hand when the panel's look changes, and look at the pictures.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]  # tests/: the browser package and conftest


from browser.conftest import ROOT  # noqa: E402
from browser.pages import ask, set_settings  # noqa: E402
from browser.screenshot import PHONE, SHORT, shoot, with_demo  # noqa: E402

OPENED = "() => document.querySelector('[data-testid=trace-panel] .lens-table') !== null"


def part(page, n: int, name: str) -> None:
    """Section ``n`` (1: the lens, 2: attention, 3: cost) of the panel, scrolled into view, as ``name``."""
    section = page.locator("[data-testid=trace-panel] .trace-part").nth(n - 1)
    section.scroll_into_view_if_needed()
    section.screenshot(path=str(ROOT / "docs" / name))
    print(f"wrote docs/{name}")


def trace_shots(page) -> None:
    """docs/TRACE.md's pictures (the module's list), on the page ``with_demo`` opened."""
    page.get_by_test_id("show-probs").check()
    set_settings(page, temperature=0, max_tokens=12)
    print(ask(page, SHORT))
    token = page.locator(".message.assistant:last-child .tok").nth(5)   # " Paris"
    token.hover()
    shoot(page, "trace-token.png")
    token.click()
    page.wait_for_function(OPENED, timeout=120_000)
    page.evaluate("() => { const t = document.querySelector('.lens-table').parentElement; "
                  "t.scrollTop = t.scrollHeight; }")                 # the last layers, where " Paris" comes
    part(page, 1, "trace-lens.png")
    part(page, 2, "trace-attention.png")
    part(page, 3, "trace-cost.png")
    page.set_viewport_size(PHONE)
    page.locator("[data-testid=trace-panel] .trace-part").nth(1).scroll_into_view_if_needed()
    shoot(page, "trace-phone.png")
    page.keyboard.press("Escape")


def main() -> None:
    with_demo(trace_shots)


if __name__ == "__main__":
    main()
