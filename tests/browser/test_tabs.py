"""Two tabs of the page in one browser: the second says plainly that another tab is open and what it can
do, until the first closes; a chat imported, renamed or deleted in one tab shows in the other's list."""

from __future__ import annotations

import json

import pytest

from browser.conftest import NetworkGuard
from browser.pages import BOOT_MS, wait_status

pytestmark = pytest.mark.browser

CHAT = {"title": "Shared", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def titles(page) -> list[str]:
    return page.locator("[data-testid=chat-list] .chat-open").all_text_contents()


def wait_titles(page, want: list[str]) -> None:
    page.wait_for_function("""want => JSON.stringify([...document.querySelectorAll(
      '[data-testid=chat-list] .chat-open')].map((b) => b.textContent)) === JSON.stringify(want)""", arg=want)


def test_a_second_tab_says_so_and_the_tabs_keep_in_step(browser, server):
    context = browser.new_context()
    guard = NetworkGuard(context)
    try:
        first, second = context.new_page(), context.new_page()
        for page in (first, second):
            page.goto(server)
            wait_status(page, ("no model",), BOOT_MS)
        assert first.get_by_test_id("tab-note").is_hidden()
        note = second.get_by_test_id("tab-note")
        assert note.is_visible() and note.text_content().startswith("pyengine is open in another tab too. This tab "
                                                                     "works as well")
        first.get_by_test_id("import-file").set_input_files(
            files=[{"name": "c.json", "mimeType": "application/json", "buffer": json.dumps(CHAT).encode()}])
        wait_titles(second, ["Shared"])
        second.get_by_role("button", name="Shared: open this chat").click()
        second.wait_for_function("() => document.querySelectorAll('[data-testid=message]').length === 2")
        first.get_by_role("button", name="Rename the chat Shared").click()
        box = first.get_by_role("textbox", name="New name for the chat Shared")
        box.fill("Renamed")
        box.press("Enter")
        wait_titles(second, ["Renamed"])
        second.get_by_role("button", name="Delete the chat Renamed").click()
        second.get_by_role("button", name="Delete the chat Renamed").click()   # the second click deletes
        wait_titles(first, [])
        first.close()
        second.wait_for_function("() => document.querySelector('[data-testid=tab-note]').hidden")
    finally:
        context.close()
    assert guard.outside == []
