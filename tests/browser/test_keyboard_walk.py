"""A person without a mouse (issue 22): load a model from the drop zone's file chooser, turn on the token
probabilities, send, open a token's alternatives, regenerate, edit and send again, start a new chat and go
back to the first, by the keyboard alone, with the focus ring visible at every step (a screenshot of each
step in the test's tmp_path, kept by pytest's tmp folders)."""

from __future__ import annotations

import pytest
from conftest import TINY

from browser.pages import set_settings, wait_ready, wait_reply

pytestmark = pytest.mark.browser

# The element focused: [its test id, class or label, its outline style and width in px].
FOCUSED = """() => {
  const e = document.activeElement;
  const s = getComputedStyle(e);
  return [e.dataset.testid || e.getAttribute('aria-label') || e.className, s.outlineStyle, parseFloat(s.outlineWidth)];
}"""


def press_until(page, test: str, key: str = "Tab", limit: int = 150) -> None:
    """Press ``key`` until ``test`` (a JS expression on document.activeElement, as `e`) holds."""
    for _ in range(limit):
        page.keyboard.press(key)
        if page.evaluate(f"(() => {{ const e = document.activeElement; return Boolean({test}); }})()"):
            return
    raise AssertionError(f"{key} never reached {test}")


class Walk:
    def __init__(self, page, folder):
        self.page, self.folder, self.steps = page, folder, []

    def step(self, name: str) -> None:
        """The focus is on an element with a visible ring; a screenshot of the page as it is."""
        what, style, width = self.page.evaluate(FOCUSED)
        assert what != "" and style != "none" and width >= 2, (name, what, style, width)
        self.steps.append(name)
        self.page.screenshot(path=str(self.folder / f"{len(self.steps):02d}-{name}.png"))


def test_the_chat_by_keyboard_alone(app, tmp_path):
    page, walk = app, Walk(app, tmp_path)
    # Chromium intercepts file choosers only once Playwright has asked it to, which takes a round trip:
    # asked here, well before Enter opens one (asked in expect_file_chooser alone, a chooser was sometimes missed)
    page.on("filechooser", lambda chooser: None)
    page.evaluate("() => document.activeElement.blur()")
    press_until(page, "e.dataset.testid === 'dropzone'")
    walk.step("drop-zone")
    with page.expect_file_chooser() as chooser:
        page.keyboard.press("Enter")
    chooser.value.set_files(str(TINY["llama"]))
    wait_ready(page)
    set_settings(page, temperature=0, max_tokens=6, seed=None)

    press_until(page, "e.dataset.testid === 'show-probs'")
    walk.step("probabilities-toggle")
    page.keyboard.press("Space")
    assert page.get_by_test_id("show-probs").is_checked()
    press_until(page, "e.dataset.testid === 'prompt'")
    walk.step("message-box")
    page.keyboard.insert_text("hello")
    page.keyboard.press("Enter")
    # the message shows once the worker has checked the settings, and the reply starts with it
    page.wait_for_function("() => document.querySelectorAll('[data-testid=message]').length === 2")
    wait_reply(page)

    press_until(page, "e.classList.contains('tok')")
    assert page.locator(".tok:focus .alts").is_visible()
    walk.step("token-alternatives")
    page.keyboard.press("ArrowRight")
    walk.step("next-token")
    page.keyboard.press("Escape")
    assert page.locator(".tok:focus .alts").is_hidden()

    press_until(page, "e.getAttribute('aria-label') === 'Regenerate: write this reply again'")
    walk.step("regenerate")
    old = page.get_by_test_id("stats").get_attribute("data-stats")
    page.keyboard.press("Enter")
    page.wait_for_function("""old => document.querySelector('[data-testid=stats]').dataset.stats !== old
      && document.querySelector('[data-testid=status]').textContent === 'ready'""", arg=old)

    page.locator(".message.assistant:last-child .tok").first.focus()   # where the reading left off
    press_until(page, "e.dataset.action === 'edit'", key="Shift+Tab")
    walk.step("edit")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.activeElement.classList.contains('edit-box')")
    walk.step("editing")
    page.keyboard.press("ControlOrMeta+a")
    page.keyboard.insert_text("hello again")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelector('[data-testid=message]').dataset.text === 'hello again'")
    wait_reply(page)
    assert page.locator(".message.user .body").first.text_content() == "hello again"

    press_until(page, "e.dataset.testid === 'new-chat'")
    walk.step("new-chat")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=message]').length === 0")
    press_until(page, "e.getAttribute('aria-label') === 'hello: open this chat'")   # named by its first message
    walk.step("first-chat")
    page.keyboard.press("Enter")
    page.wait_for_function("() => document.querySelectorAll('[data-testid=message]').length === 2")
    assert walk.steps == ["drop-zone", "probabilities-toggle", "message-box", "token-alternatives", "next-token",
                          "regenerate", "edit", "editing", "new-chat", "first-chat"]
