"""For every person: every button and field has a name; the chat works by keyboard alone (Tab reaches the
message box and a reply's actions, Enter sends and regenerates) with the focus visible; a reply is read out
through a live region once it ends; at a 390-pixel phone width the chat comes first, the settings fold
away, and nothing is wider than the screen."""

from __future__ import annotations

import pytest
from conftest import TINY

from browser.conftest import NetworkGuard
from browser.pages import BOOT_MS, load_model, set_settings, wait_reply, wait_status
from browser.test_markdown import STREAM

pytestmark = pytest.mark.browser

# Every button, input, select and textarea with no accessible name: [tag, testid or class].
UNNAMED = """() => [...document.querySelectorAll('button, input, select, textarea, summary')].filter((e) => {
  const label = e.getAttribute('aria-label') || [...(e.labels || [])].map((l) => l.textContent).join('')
    || (e.tagName === 'BUTTON' || e.tagName === 'SUMMARY' ? e.textContent : '');
  return !label.trim();
}).map((e) => [e.tagName, e.dataset.testid || e.className])"""

WIDE = "```python\n" + "x = 1  # " + "wide " * 60 + "\n```\n\n| " + " | ".join(f"c{i}" for i in range(30)) + " |\n|" \
    + "---|" * 30 + "\n| " + " | ".join("v" for _ in range(30)) + " |\n"


@pytest.fixture(scope="module")
def tiny(app):
    load_model(app, [TINY["llama"]], drop=True)
    set_settings(app, temperature=0, max_tokens=4, seed=None)
    return app


def tab_to(page, test, limit: int = 120) -> None:
    """Press Tab until ``test`` (a JS expression on document.activeElement, as `e`) holds."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate(f"(() => {{ const e = document.activeElement; return Boolean({test}); }})()"):
            return
    raise AssertionError(f"Tab never reached {test}")


def focus_ring(page) -> str:
    return page.evaluate("getComputedStyle(document.activeElement).outlineStyle")


def test_the_chat_by_keyboard_alone(tiny):
    tiny.evaluate("document.activeElement.blur()")
    tab_to(tiny, "e.dataset.testid === 'prompt'")
    tiny.keyboard.insert_text("hello")
    tiny.keyboard.press("Enter")
    tiny.wait_for_function("() => document.querySelectorAll('[data-testid=message]').length === 2")
    reply = wait_reply(tiny)
    assert tiny.get_by_test_id("announce").text_content() == f"The model replied: {reply}"
    tab_to(tiny, "e.getAttribute('aria-label') === 'Regenerate: write this reply again'")
    assert focus_ring(tiny) == "solid"
    old = tiny.get_by_test_id("stats").get_attribute("data-stats")
    tiny.keyboard.press("Enter")
    tiny.wait_for_function("""old => document.querySelector('[data-testid=stats]').dataset.stats !== old
      && document.querySelector('[data-testid=status]').textContent === 'ready'""", arg=old)
    assert tiny.locator("[data-testid=message]").count() == 2


def test_every_button_and_field_has_a_name(tiny):
    tiny.evaluate(STREAM, [WIDE])
    tiny.get_by_test_id("show-probs").check()
    tiny.get_by_test_id("show-probs").uncheck()
    assert tiny.evaluate(UNNAMED) == []


def test_the_phone_layout(browser, server):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    guard = NetworkGuard(context)
    page = context.new_page()
    try:
        page.goto(server)
        wait_status(page, ("no model",), BOOT_MS)
        chat = page.locator(".main").bounding_box()
        model = page.get_by_test_id("dropzone").bounding_box()
        assert chat["y"] < model["y"] and chat["width"] <= 390      # the chat first
        fold = page.get_by_test_id("settings-fold")
        assert fold.get_attribute("open") is None and page.get_by_test_id("temperature").is_hidden()
        fold.locator("summary").click()
        assert page.get_by_test_id("temperature").is_visible()
        page.evaluate(STREAM, [WIDE])
        assert page.evaluate("document.documentElement.scrollWidth") <= 390   # wide code and tables scroll inside
        assert page.get_by_test_id("prompt").bounding_box()["width"] <= 390
    finally:
        context.close()
    assert guard.outside == []
