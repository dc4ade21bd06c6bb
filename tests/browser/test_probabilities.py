"""Token probabilities on the page with SmolLM2-135M-Instruct (Memory f32, 1 worker, temperature 0): each
reply token's probability and its 5 likeliest alternatives equal what the CLI's ``--json --probs 5``
prints for the same conversation; the shading is a class; the alternatives show on hover and on keyboard
focus, and the arrow keys move between tokens."""

from __future__ import annotations

import pytest

from browser.pages import ask, load_model, set_settings
from browser.reference import cli_chat
from pyengine.browser.page import PROBS_NOTE

pytestmark = pytest.mark.browser

QUESTION = "What is the capital of France?"
N = 6

# Every token of the last reply: [text, p, class, [[id, p] of its alternatives]] (each one hovered first).
TOKENS = """async () => {
  const spans = [...document.querySelectorAll('[data-testid=message][data-role=assistant]:last-child .tok')];
  const out = [];
  for (const s of spans) {
    s.dispatchEvent(new MouseEvent('mouseover', {bubbles: true}));
    const alts = [...s.querySelectorAll('.alt')].map((a) => [Number(a.dataset.id), Number(a.dataset.p)]);
    const chosen = Number(s.querySelector('.alt.chosen')?.dataset.id ?? -1);
    const text = [...s.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('');
    out.push([text, Number(s.dataset.p), s.className, alts, chosen]);
  }
  return out;
}"""


@pytest.fixture(scope="module")
def smollm(app, smollm2_path):
    load_model(app, [smollm2_path], workers="1")
    return app


def test_the_page_shows_the_probabilities_the_cli_prints(smollm, smollm2_path):
    smollm.get_by_test_id("show-probs").check()
    assert smollm.get_by_test_id("probs-note").text_content() == PROBS_NOTE   # the distribution, named
    set_settings(smollm, temperature=0, max_tokens=N, seed=None)
    reply = ask(smollm, QUESTION)
    want = cli_chat(smollm2_path, [QUESTION], N, "--probs", "5")
    assert reply == want["text"]
    got = smollm.evaluate(TOKENS)
    assert len(got) == len(want["probs"]) == N
    for (text, p, cls, alts, chosen), rec in zip(got, want["probs"], strict=True):
        assert text == rec["text"] and chosen == rec["id"]
        assert p == pytest.approx(rec["p"], rel=1e-4)
        assert cls.split() == ["tok", f"p-{min(9, int(rec['p'] * 10))}"]
        assert [i for i, _ in alts] == [t["id"] for t in rec["top"]]
        assert [q for _, q in alts] == pytest.approx([t["p"] for t in rec["top"]], rel=1e-4, abs=1e-7)
    assert smollm.evaluate("document.querySelectorAll('.messages [style]').length") == 0


def test_the_alternatives_show_on_keyboard_focus_and_arrows_move(smollm):
    first = smollm.locator(".message.assistant:last-child .tok").first
    first.focus()
    assert first.locator(".alts").is_visible()
    first.press("ArrowRight")
    second = smollm.locator(".message.assistant:last-child .tok").nth(1)
    assert smollm.evaluate("document.activeElement.dataset.index") == "1"
    assert second.locator(".alts").is_visible() and first.locator(".alts").is_hidden()
    assert second.get_attribute("tabindex") == "0" and first.get_attribute("tabindex") == "-1"


def test_turning_it_off_shows_the_markdown_again(smollm):
    smollm.get_by_test_id("show-probs").uncheck()
    assert smollm.locator(".message.assistant .tok").count() == 0
    smollm.get_by_test_id("show-probs").check()
    assert smollm.locator(".message.assistant:last-child .tok").count() == N


def test_a_token_is_named_by_its_text_and_the_keys_open_and_close_it(smollm):
    first = smollm.locator(".message.assistant:last-child .tok").first
    text = first.evaluate("(s) => [...s.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('')")
    assert first.get_attribute("role") == "button"
    assert first.get_attribute("aria-label").startswith(f"{text.strip()}: ")   # the name begins with what it shows
    first.focus()
    box = first.locator(".alts")
    assert box.is_visible() and first.get_attribute("aria-expanded") == "true"
    assert first.get_attribute("aria-describedby") == box.get_attribute("id")   # read as its description
    first.press("Escape")
    assert box.is_hidden() and first.get_attribute("aria-expanded") == "false"
    first.press("Enter")
    assert box.is_visible()
    first.press("End")
    assert smollm.evaluate("document.activeElement.dataset.index") == str(N - 1)
    smollm.keyboard.press("Home")
    assert smollm.evaluate("document.activeElement.dataset.index") == "0"
