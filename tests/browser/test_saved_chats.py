"""Saved chats (IndexedDB) and models (OPFS) in a persistent Chromium profile: two chats, one renamed, each
with its own system prompt, and the model picked on the first visit are back after the browser is closed
and opened again with the server stopped (the service worker serves the page): the model loads with one
click and answers as the CPython engine does. A chat exported as JSON and Markdown, the JSON imported
back; bad imports are refused with an error that names what is wrong. A split model is saved as its
parts, byte for byte, and Forget frees its space."""

from __future__ import annotations

import json
import re

import pytest
from conftest import TINY
from gguf_split import split_gguf

from browser.conftest import CHROMIUM, CHROMIUM_ARGS, NetworkGuard, start_server, stop_server
from browser.pages import (
    BOOT_MS,
    EXACT,
    ask,
    choose_memory,
    load_model,
    messages,
    new_chat,
    set_settings,
    wait_ready,
    wait_status,
)
from browser.reference import cpython_reply

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


def wait_model_saved(page) -> None:
    page.wait_for_function("() => document.querySelectorAll('[data-testid=saved-model-list] li').length > 0"
                           " && document.querySelector('[data-testid=storage-note]').textContent.startsWith('This')",
                           timeout=120_000)


@pytest.fixture(scope="module")
def own_server(built):
    """A server of this module's own, stopped before the second visit."""
    proc, url = start_server()
    yield proc, url
    if proc.poll() is None:
        stop_server(proc)


@pytest.fixture(scope="module")
def first_visit(playwright, profile, own_server, smollm2_path):
    """The model picked (and saved), two chats made, the second renamed; the browser closed, the server
    stopped. Returns what the page showed."""
    proc, server = own_server
    context, page, guard = open_profile(playwright, profile, server)
    try:
        page.wait_for_function("() => navigator.serviceWorker.ready.then(() => true)")
        load_model(page, [smollm2_path])
        set_settings(page, temperature=0, max_tokens=8, seed=None)
        page.get_by_test_id("system-prompt").fill(SYSTEM)
        ask(page, FIRST)
        first = messages(page)
        wait_saved(page, 1)
        new_chat(page)
        page.get_by_test_id("system-prompt").fill("")
        set_settings(page, max_tokens=6)
        ask(page, SECOND)
        second = messages(page)
        wait_saved(page, 2)
        page.get_by_role("button", name=f"Rename the chat {SECOND}").click()
        box = page.get_by_role("textbox", name=f"New name for the chat {SECOND}")
        box.fill("Colours")
        box.press("Enter")
        wait_current(page, "Colours")
        wait_model_saved(page)
        assert page.locator(".saved-model small").text_content() == "93.8 MiB"
        assert "used of" in page.get_by_test_id("storage-note").text_content()
    finally:
        context.close()
        stop_server(proc)
    assert guard.outside == []
    return first, second


def test_chats_and_the_model_are_back_after_the_browser_restarts_offline(playwright, profile, own_server,
                                                                         first_visit, smollm2_path):
    first, second = first_visit
    context, page, guard = open_profile(playwright, profile, own_server[1])
    try:
        wait_saved(page, 2)
        assert chat_titles(page) == ["Colours", FIRST]
        assert current_title(page) == "Colours" and messages(page) == second   # the chat shown last
        assert page.get_by_test_id("max-tokens").input_value() == "6"
        assert page.get_by_test_id("system-prompt").input_value() == ""
        page.get_by_role("button", name=f"{FIRST}: open this chat").click()
        wait_current(page, "Colours", same=False)
        assert messages(page) == first and len(first) == 2
        assert page.get_by_test_id("system-prompt").input_value() == SYSTEM
        assert page.get_by_test_id("max-tokens").input_value() == "8"
        export_and_import(page, first)
        # the saved model, with one click: no file chosen, no server (Memory is not kept: float32 again)
        choose_memory(page, EXACT)
        page.get_by_role("button", name="Load the saved model").click()
        wait_status(page, ("loading", "ready"))           # the files are read from OPFS first
        wait_ready(page)
        reply = ask(page, SECOND)
        assert reply == cpython_reply(smollm2_path, [FIRST, first[1][1], SECOND], max_tokens=8, system=SYSTEM)
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
    ('[{"role": "robot", "content": "x"}]', 'bad.json: messages[0].role must be one of system, user, assistant, '
                                            'tool (it is "robot")'),
    ('[{"role": "assistant", "content": "", "tool_calls": [{"id": 1}]}]',
     'bad.json: messages[0].tool_calls[0] must be {id, function: {name, arguments: {...}}} (it is {"id":1})'),
    ('[{"role": "tool", "content": "sunny"}]', 'bad.json: messages[0]: a tool\'s result must have "tool_call_id"'),
    ('{"messages": [], "tools": {"text": 3}}', 'bad.json: "tools" must be {"text": tool definitions as text'),
    ('[{"role": "user", "content": 5}]', "bad.json: messages[0].content must be text (it is number)"),
    ('[{"role": "user", "content": "a"}, {"role": "system", "content": "b"}]',
     "bad.json: messages[1]: a system message may only come first"),
    ('{"messages": [], "settings": {"seed": [1]}}', "bad.json: settings.seed must be a number or text (it is a list)"),
    ('[{"role": "user", "content": "<img src=x onerror=\\"window.pwned=1\\">"}]', None),
    ('[{"role": "user", "content": "<script>window.pwned=2</script>"}, {"role": "assistant", "content": '
     '"<script>window.pwned=3</script> [x](javascript:window.pwned=4) <img src=x onerror=\\"window.pwned=5\\">"}]',
     None),
]


@pytest.mark.parametrize("text, error", BAD_IMPORTS)
def test_an_import_is_checked_and_stays_inert(app, text, error):
    app.get_by_test_id("import-file").set_input_files(
        files=[{"name": "bad.json", "mimeType": "application/json", "buffer": text.encode()}])
    note = app.get_by_test_id("chats-note")
    app.wait_for_function("() => document.querySelector('[data-testid=chats-note]').textContent !== ''")
    if error is None:  # imported, and drawn inert: the user's text as text, a reply's Markdown sanitized
        shown = [(m["role"], m["content"]) for m in json.loads(text)]
        assert note.text_content() == f"Imported bad.json: {len(shown)} message{'s' if len(shown) > 1 else ''}."
        assert messages(app) == shown
        assert app.evaluate("window.pwned") is None
        assert app.locator(".messages :is(script, img, [onerror], a[href^='javascript'])").count() == 0
    else:
        assert note.text_content().startswith(f"Not imported: {error}"), note.text_content()
    app.evaluate("document.querySelector('[data-testid=chats-note]').textContent = ''")


def test_a_split_model_is_saved_as_its_parts_and_forget_frees_them(app, tmp_path):
    parts = split_gguf(TINY["llama"], 3, tmp_path)
    app.evaluate("""() => {  // count the asks to keep the storage (the answer stays the browser's own); keep the notes
      const persist = navigator.storage.persist.bind(navigator.storage);
      window.persistAsked = 0;
      navigator.storage.persist = () => { window.persistAsked += 1; return persist(); };
      const note = document.querySelector('[data-testid=storage-note]');
      window.storageNotes = [];
      new MutationObserver(() => window.storageNotes.push(note.textContent)).observe(note, {childList: true});
    }""")
    load_model(app, parts, drop=True)
    wait_model_saved(app)
    assert app.evaluate("window.persistAsked") == 1         # navigator.storage.persist() asked once it is saved
    notes = app.evaluate("window.storageNotes")
    copying = [m.groups() for m in (re.fullmatch(r"Saving .+ for the next visit: (.+) of (.+)", n) for n in notes) if m]
    assert len(copying) >= 3 and copying[-1][0] == copying[-1][1]  # the copy's progress, part by part, to the end
    item = app.locator("[data-testid=saved-model-list] li")
    assert item.locator("small").text_content().endswith("in 3 parts")
    stored = app.evaluate("""async () => {
      const dir = await (await navigator.storage.getDirectory()).getDirectoryHandle('models');
      const out = {};
      for await (const [, h] of dir.entries()) {
        for await (const [name, f] of h.entries()) {
          out[name] = [...new Uint8Array(await (await f.getFile()).arrayBuffer())];
        }
      }
      return out;
    }""")
    for p in parts:
        assert bytes(stored[p.name]) == p.read_bytes()
    meta = {"files": [p.name for p in parts], "size": sum(p.stat().st_size for p in parts)}
    assert {k: v for k, v in json.loads(bytes(stored["meta.json"])).items() if k in meta} == meta
    used = app.evaluate("navigator.storage.estimate().then((e) => e.usage)")
    item.get_by_role("button", name="Forget").click()
    app.wait_for_function("() => document.querySelectorAll('[data-testid=saved-model-list] li').length === 0")
    assert app.evaluate("navigator.storage.estimate().then((e) => e.usage)") < used
