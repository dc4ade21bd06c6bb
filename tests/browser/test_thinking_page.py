"""Reasoning models on the page: a reply's <think> block drawn as a collapsed section apart from the
answer (streaming and done), and the Thinking toggle, shown for a template that reads enable_thinking
(tiny-qwen3 given Qwen3's switch) and not for one that does not, reaching the template: the page's greedy
reply with thinking off equals the CPython chat's with enable_thinking false."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import TINY
from generation.test_thinking import QWEN3_LIKE
from gguf_write import gguf_bytes

from browser.pages import EXACT, ask, drop_files, load_model, messages, new_chat, set_settings, wait_loaded
from pyengine.generation import ChatSession, load
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams
from pyengine.gguf import open_gguf
from pyengine.text.chat_template import ChatTemplate

pytestmark = pytest.mark.browser

REPLY = "<think>\nI should say hi.\n</think>\n\nHello **there**"

STREAM = """async (pieces) => {
  const view = await import('./app/chat_view.js');
  view.clearMessages(false);
  view.startTurn('question');
  const seen = [];
  for (const p of pieces) {
    view.addPiece(p);
    await new Promise((r) => requestAnimationFrame(r));
    seen.push(document.querySelector('.message.assistant:last-child summary')?.textContent ?? null);
  }
  view.endTurn(false);
  return seen;
}"""


def with_template(src, dst, template: str) -> None:
    with open_gguf(src) as g:
        kvs = [(k, t, g.metadata[k]) for k, t in g.value_types.items()] + [
            ("tokenizer.chat_template", "STRING", template)]
        tensors = [(n, i.shape, i.type.id, g.tensor_bytes(n).tobytes()) for n, i in g.tensors.items()]
    dst.write_bytes(gguf_bytes(kvs, tensors))


def test_thinking_is_a_collapsed_section_apart_from_the_answer(app):
    seen = app.evaluate(STREAM, [REPLY[i:i + 6] for i in range(0, len(REPLY), 6)])
    assert seen[0] is None and seen[1] == "Thinking…" and seen[-1] == "Thinking"   # "<think" alone is text yet
    body = app.locator(".message.assistant:last-child .body")
    box = body.locator("details.thinking")
    assert box.get_attribute("open") is None and box.get_attribute("data-done") == "true"
    assert box.locator(".thinking-body p").text_content() == "I should say hi."
    assert body.locator(":scope > .answer strong").text_content() == "there"
    assert body.locator(".thinking-body").is_hidden()
    box.locator("summary").click()
    assert body.locator(".thinking-body").is_visible()
    assert app.locator(".message.assistant:last-child").get_attribute("data-text") == REPLY


def test_the_thinking_toggle_reaches_the_template(app, tmp_path):
    model = tmp_path / "tiny-qwen3-thinking.gguf"
    with_template(TINY["qwen3"], model, QWEN3_LIKE)
    toggle = app.get_by_test_id("thinking")
    drop_files(app, [TINY["llama"]], EXACT)
    wait_loaded(app)
    assert toggle.is_hidden()                                 # no switch in that template
    load_model(app, [model], drop=True)
    assert toggle.is_visible() and toggle.is_checked()
    toggle.uncheck()
    new_chat(app)
    set_settings(app, temperature=0, max_tokens=6, seed=None)
    reply = ask(app, "hi")
    engine = load([str(model)], weights="f32")
    engine = dataclasses.replace(engine, template=ChatTemplate.from_metadata(
        {**engine.gguf.metadata, "tokenizer.chat_template": QWEN3_LIKE}))
    off = ChatSession(engine, options={"enable_thinking": False})
    assert reply == "".join(off.send("hi", Request(SamplerParams(temperature=0), 6)))
    assert messages(app) == [("user", "hi"), ("assistant", reply)]
