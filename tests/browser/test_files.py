"""Dropping files on the app: a split model as several files, a broken file, a hostile name, Gemma 3 270M."""

from __future__ import annotations

import re

import pytest
from conftest import TINY
from gguf_split import split_gguf
from gguf_write import gguf_bytes

from browser.pages import (
    WATCH_PROGRESS,
    conversation,
    drop_files,
    error_text,
    load_model,
    messages,
    messages_with_notes,
    pick_files,
    send,
    set_settings,
    wait_loaded,
    wait_reply,
    wait_status,
)
from browser.reference import cpython_reply
from pyengine.gguf import open_gguf
from pyengine.model.config import ARCHITECTURES

pytestmark = pytest.mark.browser

HOOKS = ["dropzone", "file-input", "load-demo", "model-info", "inspector", "progress", "status", "prompt", "send",
         "stop", "new-chat", "temperature", "top-k", "top-p", "min-p", "repeat-penalty", "max-tokens", "seed",
         "system-prompt", "stats", "error", "send-error", "workers", "weights"]
HOSTILE_NAME = '<img src=x onerror="window.pwned = 1">Tiny <b>bold</b>'


def card_field(page, field: str) -> str:
    return page.get_by_test_id("model-info").locator(f"dd[data-field={field}]").text_content()


def test_every_test_hook_is_on_the_page(app):
    missing = [h for h in HOOKS if app.get_by_test_id(h).count() != 1]
    assert missing == []
    assert app.get_by_test_id("status").text_content() == "no model"


# What a select must share with the number inputs to look like one of the settings' controls.
CONTROL_STYLE = ["border-top-width", "border-top-style", "border-top-color", "border-radius", "padding-left",
                 "padding-top", "font-family", "font-size", "color", "background-color"]


def test_the_selects_look_like_the_other_settings(app):
    style = """(el, props) => { const s = getComputedStyle(el); return props.map((p) => s.getPropertyValue(p)); }"""
    number = app.get_by_test_id("temperature").evaluate(style, CONTROL_STYLE)
    for name in ("weights", "workers"):
        select = app.get_by_test_id(name)
        assert select.is_enabled()  # the app is cross-origin isolated: workers can be chosen
        assert dict(zip(CONTROL_STYLE, select.evaluate(style, CONTROL_STYLE))) == dict(zip(CONTROL_STYLE, number)), name
        box, field = select.bounding_box(), app.get_by_test_id("temperature").bounding_box()
        assert abs(box["height"] - field["height"]) <= 2, (name, box, field)
    assert app.get_by_test_id("weights").evaluate("el => getComputedStyle(el).appearance") == "none"


def test_a_file_that_is_not_a_gguf_is_said_plainly(app, tmp_path):
    notes = tmp_path / "notes.gguf"
    notes.write_bytes(b"hello, this is a text file\n" * 4)
    drop_files(app, [notes])
    wait_loaded(app)
    assert error_text(app) == "notes.gguf is not a GGUF file (it starts with 'hell', a GGUF file starts with 'GGUF')"
    assert app.get_by_test_id("status").text_content() == "no model"
    app.locator(".error-close").click()


def test_split_model_dropped_as_several_files(app, tmp_path):
    parts = split_gguf(TINY["llama"], 3, tmp_path)
    load_model(app, parts[::-1], drop=True)  # any order
    assert card_field(app, "architecture") == "llama"
    assert card_field(app, "file-size").endswith("in 3 files")
    assert card_field(app, "files").split("\n") == [p.name for p in parts]  # in split order
    assert app.get_by_test_id("inspector").locator(".part-box .sections-bar").count() == 3
    set_settings(app, temperature=0, max_tokens=6)
    send(app, "hello")
    assert wait_reply(app) == cpython_reply(TINY["llama"], ["hello"], max_tokens=6)


def test_a_broken_file_shows_an_error_and_keeps_the_app(app, tmp_path):
    before = messages(app)
    assert before, "runs after a chat in this module"
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(TINY["llama"].read_bytes()[:5000])  # cut in the metadata
    drop_files(app, [broken])
    wait_loaded(app)
    err = error_text(app)
    assert err is not None and err.startswith("broken.gguf") and "internal error" not in err
    assert app.get_by_test_id("status").text_content() == "ready"  # the model loaded before is still there
    assert messages(app) == before                                  # and so is the conversation
    send(app, "again")
    assert wait_reply(app)
    assert error_text(app) is None


def test_a_failed_reply_is_marked_and_left_out_of_the_chat(app):
    """A message the model cannot answer is shown failed, with the error, and offered again in the box; the
    statistics of the reply before go; the next message is answered as if the failed one was never sent."""
    before = messages_with_notes(app)
    assert before and app.get_by_test_id("stats").text_content(), "runs after a chat in this module"
    too_long = " ".join(["word"] * 400)  # the split tiny model has a context of 256 tokens
    send(app, too_long)
    wait_status(app, ("ready",), 60_000)
    error = error_text(app)
    assert "no longer fits the context of 256 tokens" in error
    assert messages_with_notes(app) == before + [("user", too_long, "failed")]  # no empty reply left
    note = app.locator("[data-testid=message][data-note=failed] .note").text_content()
    assert note == f"failed, not part of the conversation: {error}"
    assert app.get_by_test_id("stats").text_content() == ""
    assert app.get_by_test_id("stats").get_attribute("data-stats") is None
    assert app.get_by_test_id("prompt").input_value() == too_long
    turns = conversation(app)
    send(app, "hello")
    assert wait_reply(app) == cpython_reply(TINY["llama"], turns + ["hello"], max_tokens=6)
    assert "tok/s" in app.get_by_test_id("stats").text_content()
    assert error_text(app) is None


def test_an_unsupported_architecture_is_named_and_shown_in_the_inspector(app, tmp_path):
    """The error names the architecture and the supported ones; the file's keys and tensors are in the
    Inspector tab; the model loaded before stays (tests/model/test_unsupported.py: the same file in the CLI)."""
    from model.test_unsupported import mamba_bytes
    assert app.get_by_test_id("status").text_content() == "ready", "runs after a load in this module"
    path = tmp_path / "tiny-mamba.gguf"
    path.write_bytes(mamba_bytes())
    drop_files(app, [path])
    wait_loaded(app)
    assert error_text(app) == (f"unsupported architecture 'mamba' (general.architecture); supported: "
                               f"{', '.join(ARCHITECTURES)}; the Inspector tab shows its metadata and tensors")
    assert app.get_by_test_id("status").text_content() == "ready"
    inspector = app.get_by_test_id("inspector")
    with open_gguf(TINY["qwen2"]) as g:
        n_tensors = len(g.tensors)
    assert inspector.locator(".tensor-count").text_content() == f"({n_tensors})"
    keys = inspector.locator(".meta-table tbody tr td:first-child").all_text_contents()
    assert "mamba.block_count" in keys and "general.architecture" in keys
    app.locator(".error-close").click()


def test_model_text_is_never_html(app, tmp_path):
    with open_gguf(TINY["llama"]) as g:
        kvs = [(k, g.value_types[k], HOSTILE_NAME if k == "general.name" else v) for k, v in g.metadata.items()]
        tensors = [(n, t.shape, t.type.id, g.tensor_bytes(n).tobytes()) for n, t in g.tensors.items()]
        data = gguf_bytes(kvs, tensors, alignment=g.alignment)
    hostile = tmp_path / "hostile.gguf"
    hostile.write_bytes(data)
    pick_files(app, [hostile])
    wait_loaded(app)
    assert app.get_by_test_id("model-info").locator(".model-name").text_content() == HOSTILE_NAME
    assert app.locator("img, b").count() == 0
    assert app.evaluate("window.pwned") is None


def test_demo_model_button(app):
    button = app.get_by_test_id("load-demo")
    assert "SmolLM2-135M-Instruct" in button.text_content()
    button.click()
    wait_loaded(app)
    assert app.get_by_test_id("status").text_content() == "ready", error_text(app)
    assert card_field(app, "file") == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_gemma3_card(app, gemma3_path):
    app.evaluate(WATCH_PROGRESS)
    pick_files(app, [gemma3_path])
    wait_loaded(app)
    shown = [text for text, _ in app.evaluate("window.progressUpdates")]
    # every worker's share summed: the file's 239.8 MiB of tensors (each worker reads the norms whole)
    reading = [re.fullmatch(r"reading tensors: (.+) of (239\.[89] MiB) · (\d+) / 236 tensors", t) for t in shown]
    reading = [m.groups() for m in reading if m]
    assert reading and reading[0][0] == "0 bytes" and reading[0][2] == "0", shown
    assert reading[-1][0] == reading[-1][1] == reading[0][1] and reading[-1][2] == "236", shown
    assert app.get_by_test_id("progress").is_hidden()
    assert app.get_by_test_id("status").text_content() == "ready", error_text(app)
    assert card_field(app, "architecture") == "gemma3"
    assert "Q8_0" in card_field(app, "quant-types")
