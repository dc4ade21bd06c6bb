"""Hostile chat templates on the page: a template that would run for hours in one comparison is refused
at once with its error, and the page answers the next message; Stop lands while a slow template renders
(the first message no longer sits at "stopping" until a reload), and the chat keeps the user's message."""

from __future__ import annotations

import time

import pytest
from conftest import TINY
from template_corpus import HOSTILE

from browser.pages import drop_files, error_text, messages, new_chat, send, set_settings, wait_loaded, wait_status
from browser.test_thinking_page import with_template

pytestmark = pytest.mark.browser

ANSWER = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "<|im_start|>assistant\n")
SLOW = "{% for i in range(100000) %}{% for j in range(19) %}{% endfor %}{% endfor %}"   # ~2,000,000 lines
COMPARE = dict((c, s) for c, s, _ in HOSTILE)["nested-compare"]


def load_with_template(page, tmp_path, template: str) -> None:
    path = tmp_path / "templated.gguf"
    with_template(TINY["llama"], path, template)
    drop_files(page, [path])
    wait_loaded(page)
    new_chat(page)
    set_settings(page, temperature=0, max_tokens=4, seed=None)


def test_a_template_that_would_hang_is_refused_at_once(app, tmp_path):
    load_with_template(app, tmp_path, "{% if messages|length > 1 %}" + COMPARE + "{% endif %}" + ANSWER)
    send(app, "hello")
    wait_status(app, ("ready",), 120_000)                           # the first message renders
    t0 = time.monotonic()
    send(app, "and again")
    wait_status(app, ("ready",), 60_000)
    assert time.monotonic() - t0 < 20
    assert error_text(app).startswith("chat template: '*' gives more than 1,000,000 chars or items")
    assert [r for r, _ in messages(app)][:2] == ["user", "assistant"]


def test_stop_lands_while_the_template_renders(app, tmp_path):
    load_with_template(app, tmp_path, SLOW + ANSWER)
    send(app, "hello")
    time.sleep(1.0)                                                # the worker is inside the template now
    t0 = time.monotonic()
    app.get_by_test_id("stop").click()
    wait_status(app, ("ready",), 30_000)
    assert time.monotonic() - t0 < 5
    assert messages(app)[0] == ("user", "hello") and error_text(app) is None
    last = app.locator("[data-testid=message][data-role=assistant]").last
    assert last.get_attribute("data-note") == "stopped"
