"""Helpers that drive the app's page in the browser tests: drop files, send a message, read the chat."""

from __future__ import annotations

import base64
from pathlib import Path

BOOT_MS = 120_000   # Python start in the worker: ~8 s alone, much more on a busy machine
LOAD_MS = 300_000   # a real model: read, dequantize, lay out (Gemma 3 270M is 253 MB)
REPLY_MS = 300_000  # a reply of a few dozen tokens at a few tokens/s on a busy machine
CHECK_MS = 60_000   # the worker's check of the settings before a message goes (milliseconds when idle)

# Records every text the newest assistant message holds (its data-text: the Markdown as the model wrote
# it), so a test can see the reply grow.
WATCH_REPLY = """() => {
  window.replyUpdates = [];
  const list = document.querySelector('.messages');
  new MutationObserver(() => {
    const all = list.querySelectorAll('[data-testid=message][data-role=assistant]');
    const text = all.length ? all[all.length - 1].dataset.text : '';
    if (window.replyUpdates[window.replyUpdates.length - 1] !== text) window.replyUpdates.push(text);
  }).observe(list, {subtree: true, childList: true, attributes: true, attributeFilter: ['data-text']});
}"""

# Records every text and width the progress bar shows while a model loads.
WATCH_PROGRESS = """() => {
  window.progressUpdates = [];
  const box = document.querySelector('[data-testid=progress]');
  new MutationObserver(() => window.progressUpdates.push(
    [box.querySelector('.progress-text').textContent, box.querySelector('.progress-fill').style.width]
  )).observe(box, {subtree: true, childList: true, characterData: true, attributes: true});
}"""

DROP = """files => {
  const dt = new DataTransfer();
  for (const f of files) {
    const bytes = Uint8Array.from(atob(f.b64), (c) => c.charCodeAt(0));
    dt.items.add(new File([bytes], f.name));
  }
  const zone = document.querySelector('[data-testid=dropzone]');
  for (const type of ['dragenter', 'dragover', 'drop']) {
    zone.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
  }
}"""


def wait_status(page, states: tuple[str, ...], timeout_ms: float = 60_000) -> str:
    """Wait until the status badge reads one of ``states``; return it."""
    page.wait_for_function("states => states.includes(document.querySelector('[data-testid=status]').textContent)",
                           arg=list(states), timeout=timeout_ms)
    return page.get_by_test_id("status").text_content()


# The Memory setting the tests load with unless they say otherwise: float32, whose replies equal the
# CPython engine's (browser/reference.py). The quantized forms round activations to 8-bit codes, and the
# last bits in which numpy 2.0 (Pyodide) and 2.4 (here) sum float32 flip a few of those roundings, so
# their greedy replies part at near-ties; the default form is checked against Pyodide under Node instead.
EXACT = "f32"


def choose_memory(page, weights: str | None) -> None:
    """Set the Memory select (the weight form of the next load) unless ``weights`` is None."""
    if weights is not None:
        page.get_by_test_id("weights").select_option(weights)


def drop_files(page, paths: list[Path], weights: str | None = EXACT) -> None:
    """A synthetic drop of ``paths`` on the drop zone (a DataTransfer of Files, as a person's drop makes).

    The bytes travel through the test protocol as base64: small files only."""
    choose_memory(page, weights)
    page.evaluate(DROP, [{"name": p.name, "b64": base64.b64encode(p.read_bytes()).decode()} for p in paths])


def pick_files(page, paths: list[Path], weights: str | None = EXACT) -> None:
    """Choose ``paths`` with the file picker (Playwright hands Chromium the paths: any size), the
    Memory setting set to ``weights`` first."""
    choose_memory(page, weights)
    page.get_by_test_id("file-input").set_input_files([str(p) for p in paths])


def load_model(page, paths: list[Path], weights: str | None = EXACT, workers: str | None = None,
               drop: bool = False) -> None:
    """Pick ``paths`` (drop=True: drop them; small files only) as one model, Memory set to ``weights`` and
    the Workers select to ``workers`` first (None: as they are), and wait for the load; an AssertionError
    with the page's error unless the model is ready."""
    if workers is not None:
        page.get_by_test_id("workers").select_option(workers)
    (drop_files if drop else pick_files)(page, paths, weights)
    wait_ready(page)


def wait_ready(page) -> None:
    """:func:`wait_loaded`, then an AssertionError with the page's error unless the model is ready."""
    wait_loaded(page)
    assert page.get_by_test_id("status").text_content() == "ready", error_text(page)


def wait_loaded(page) -> None:
    """Wait for the end of a load: 'ready' with a model, or the error of a failed load."""
    page.wait_for_function("""() => {
      const s = document.querySelector('[data-testid=status]').textContent;
      return s !== 'loading' && s !== 'starting';
    }""", timeout=LOAD_MS)


def new_chat(page) -> None:
    """Press New chat and wait until the chat shown is empty (the page keeps the last one first)."""
    page.get_by_test_id("new-chat").click()
    page.wait_for_function("() => document.querySelectorAll('[data-testid=message]').length === 0")


def set_settings(page, **values) -> None:
    """Fill sampling inputs by data-testid (underscores for dashes): set_settings(page, temperature=0, max_tokens=8)."""
    for name, value in values.items():
        page.get_by_test_id(name.replace("_", "-")).fill("" if value is None else str(value))


# True once the page has taken the message (one user message more than ``asked``) or said why not.
TAKEN = """asked => document.querySelectorAll('[data-testid=message][data-role=user]').length > asked
  || !document.querySelector('[data-testid=send-error]').hidden"""


def send(page, text: str) -> None:
    """Type ``text`` in the prompt as a person does (Shift+Enter between lines) and press Enter to send;
    return once the message is in the chat or the line under it says why not (the worker checks the
    settings before a message goes)."""
    prompt = page.get_by_test_id("prompt")
    prompt.fill("")
    prompt.focus()
    for i, line in enumerate(text.split("\n")):
        if i:
            prompt.press("Shift+Enter")
        page.keyboard.insert_text(line)  # typed text, without a key event per character
    assert prompt.input_value() == text  # nothing was sent before the last Enter
    asked = page.locator("[data-testid=message][data-role=user]").count()
    prompt.press("Enter")
    page.wait_for_function(TAKEN, arg=asked, timeout=CHECK_MS)


def ask(page, text: str) -> str:
    """:func:`send` ``text``, then :func:`wait_reply`: the reply's text."""
    send(page, text)
    return wait_reply(page)


def wait_reply(page) -> str:
    """Wait for the reply to finish; return the last assistant message's text."""
    wait_status(page, ("ready",), REPLY_MS)
    return messages(page)[-1][1]


def messages(page) -> list[tuple[str, str]]:
    """The chat as (role, text) pairs."""
    return [(role, text) for role, text, _ in messages_with_notes(page)]


def conversation(page) -> list[str]:
    """The texts of the messages the chat goes on from, in order (a failed turn is shown, not part of it)."""
    return [text for role, text, note in messages_with_notes(page) if note != "failed"]


def messages_with_notes(page) -> list[tuple[str, str, str | None]]:
    """The chat as (role, text, note) triples: text as written (a reply's Markdown source, not its
    rendering), note "stopped", "failed" or None."""
    triples = page.evaluate("""() => [...document.querySelectorAll('[data-testid=message]')]
        .map((m) => [m.dataset.role, m.dataset.text, m.dataset.note ?? null])""")
    return [tuple(t) for t in triples]


def send_error(page) -> str | None:
    """The line under the chat that says why a message was not sent (a bad setting), or None when hidden."""
    err = page.get_by_test_id("send-error")
    return err.text_content() if err.is_visible() else None


def wait_send_error_gone(page) -> None:
    """Wait until the line under the chat is hidden (the worker has checked the fields again after an edit)."""
    page.get_by_test_id("send-error").wait_for(state="hidden", timeout=CHECK_MS)


def error_text(page) -> str | None:
    """The error banner's text, or None when it is hidden."""
    err = page.get_by_test_id("error")
    return err.locator(".error-text").text_content() if err.is_visible() else None
