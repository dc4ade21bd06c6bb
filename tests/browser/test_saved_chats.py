"""Saved chats (IndexedDB) in a persistent Chromium profile: two chats, one renamed, each with its own system
prompt, are back after the browser is closed and opened again; a chat exported as JSON and Markdown, and
the JSON imported back; bad imports are refused with an error that names what is wrong."""

from __future__ import annotations

import json

import pytest

from browser.conftest import CHROMIUM, CHROMIUM_ARGS, NetworkGuard
from browser.pages import (
    BOOT_MS,
    EXACT,
    error_text,
    messages,
    pick_files,
    send,
    set_settings,
    wait_loaded,
    wait_reply,
    wait_status,
)

pytestmark = pytest.mark.browser

FIRST = "What is the capital of France?"
SECOND = "Name a color."
SYSTEM = "You are terse."


def open_profile(playwright, profile, url):
    context = playwright.chromium.launch_persistent_context(
        str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 860},
        accept_downloads=True)
    guard = NetworkGuard(context)
    page = context.pages[0] if context.pages else context.new_page()
    page.goto(url)
    wait_status(page, ("no model", "ready"), BOOT_MS)
    return context, page, guard


def chat_titles(page) -> list[str]:
    return page.locator("[data-testid=chat-list] .chat-open").all_text_contents()


def current_title(page) -> str:
    return page.locator("[data-testid=chat-list] .chat-open[aria-current=true]").text_content()


def wait_current(page, title: str, same: bool = True) -> None:
    """Wait until the chat shown is (or, same=False, is no longer) the one titled ``title``."""
    page.wait_for_function("""([title, same]) =>
      (document.querySelector('.chat-open[aria-current=true]')?.textContent === title) === same""", arg=[title, same])


def wait_saved(page, count: int) -> None:
    page.wait_for_function("n => document.querySelector('[data-testid=chat-list]').children.length === n", arg=count)


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    return tmp_path_factory.mktemp("profile")


@pytest.fixture(scope="module")
def first_visit(playwright, profile, server, smollm2_path):
    """Two chats made, the second renamed; the browser closed. Returns what the page showed."""
    context, page, guard = open_profile(playwright, profile, server)
    try:
        pick_files(page, [smollm2_path], EXACT)
        wait_loaded(page)
        assert page.get_by_test_id("status").text_content() == "ready", error_text(page)
        set_settings(page, temperature=0, max_tokens=8, seed=None)
        page.get_by_test_id("system-prompt").fill(SYSTEM)
        send(page, FIRST)
        wait_reply(page)
        first = messages(page)
        wait_saved(page, 1)
        page.get_by_test_id("new-chat").click()
        page.get_by_test_id("system-prompt").fill("")
        set_settings(page, max_tokens=6)
        send(page, SECOND)
        wait_reply(page)
        second = messages(page)
        wait_saved(page, 2)
        page.get_by_role("button", name=f"Rename the chat {SECOND}").click()
        box = page.get_by_role("textbox", name=f"New name for the chat {SECOND}")
        box.fill("Colours")
        box.press("Enter")
        wait_current(page, "Colours")
    finally:
        context.close()
    assert guard.outside == []
    return first, second


def test_chats_are_back_after_the_browser_restarts(playwright, profile, server, first_visit):
    first, second = first_visit
    context, page, guard = open_profile(playwright, profile, server)
    try:
        wait_saved(page, 2)
        assert chat_titles(page) == ["Colours", FIRST]
        assert current_title(page) == "Colours" and messages(page) == second   # the chat shown last
        assert page.get_by_test_id("max-tokens").input_value() == "6"
        assert page.get_by_test_id("system-prompt").input_value() == ""
        page.get_by_role("button", name=f"Open the chat {FIRST}").click()
        wait_current(page, "Colours", same=False)
        assert messages(page) == first and len(first) == 2
        assert page.get_by_test_id("system-prompt").input_value() == SYSTEM
        assert page.get_by_test_id("max-tokens").input_value() == "8"
        export_and_import(page, first)
    finally:
        context.close()
    assert guard.outside == []


def export_and_import(page, shown) -> None:
    with page.expect_download() as got:
        page.get_by_test_id("export-json").click()
    data = json.loads(open(got.value.path(), encoding="utf-8").read())
    assert data["messages"] == [{"role": "system", "content": SYSTEM}] + [
        {"role": role, "content": text} for role, text in shown]
    assert data["settings"]["max_tokens"] == "8" and data["model"].lower().startswith("smollm2")
    with page.expect_download() as got:
        page.get_by_test_id("export-markdown").click()
    md = open(got.value.path(), encoding="utf-8").read()
    assert md.startswith(f"# {FIRST}\n") and f"## You\n\n{FIRST}\n" in md and shown[1][1] in md

    data["title"] = "Imported"
    page.get_by_test_id("import-file").set_input_files(
        files=[{"name": "chat.json", "mimeType": "application/json", "buffer": json.dumps(data).encode()}])
    wait_current(page, "Imported")
    assert messages(page) == shown and page.get_by_test_id("system-prompt").input_value() == SYSTEM
    assert page.get_by_test_id("chats-note").text_content() == "Imported chat.json: 2 messages."
    wait_saved(page, 3)


BAD_IMPORTS = [
    ("not json", "bad.json: not JSON"),
    ('{"messages": 3}', 'bad.json: "messages" must be a list of {role, content} (it is number)'),
    ('[{"role": "robot", "content": "x"}]', 'bad.json: messages[0].role must be one of system, user, assistant '
                                            '(it is "robot")'),
    ('[{"role": "user", "content": 5}]', "bad.json: messages[0].content must be text (it is number)"),
    ('[{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]',
     "bad.json: messages[1]: a system message may only come first"),
    ('{"messages": [], "settings": {"seed": [1]}}', "bad.json: settings.seed must be a number or text (it is a list)"),
    ('[{"role": "user", "content": "<img src=x onerror=\\"window.pwned=1\\">"}]', None),
]


@pytest.mark.parametrize("text, error", BAD_IMPORTS)
def test_an_import_is_checked_and_stays_inert(app, text, error):
    app.get_by_test_id("import-file").set_input_files(
        files=[{"name": "bad.json", "mimeType": "application/json", "buffer": text.encode()}])
    note = app.get_by_test_id("chats-note")
    app.wait_for_function("() => document.querySelector('[data-testid=chats-note]').textContent !== ''")
    if error is None:
        assert note.text_content() == "Imported bad.json: 1 message."
        assert app.evaluate("window.pwned") is None and app.locator(".messages img").count() == 0
        assert messages(app) == [("user", json.loads(text)[0]["content"])]
    else:
        assert note.text_content().startswith(f"Not imported: {error}"), note.text_content()
    app.evaluate("document.querySelector('[data-testid=chats-note]').textContent = ''")
