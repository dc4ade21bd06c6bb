"""Inside a step, on the page, with SmolLM2-135M-Instruct (Memory f32, 1 worker, temperature 0): clicking the first
token of a reply (Token probabilities on) opens the panel, and what it shows is what ``python -m pyengine trace
MODEL --chat --prompt QUESTION --weights f32 --json`` prints for the same step: each layer's logit-lens top token
and its probability, the positions the last attention layer's heads read most and their mean weights, the kinds of
operation whose cost is drawn. The panel works by keyboard (Space on a token opens it, the pickers change the
picture, Escape closes it and the token has the focus again), and axe finds nothing in it at 1280 and 390 px in
both themes, and at 390 px nothing is wider than it. Loaded again over 2 workers (the helpers run the traced step
too, meeting.js summing each worker's heads), the panel shows the same numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from browser.axe import check
from browser.pages import REPLY_MS, ask, load_model, messages, new_chat, send, set_settings, wait_reply

pytestmark = pytest.mark.browser

QUESTION = "What is the capital of France?"
ROOT = Path(__file__).resolve().parents[2]

# The panel's tables as text: {lens: [[layer, token, p]], attention: [[position, token, weight]], cost: [kind]}.
TABLES = """() => {
  const rows = (sel) => [...document.querySelectorAll(`[data-testid=trace-panel] ${sel} tbody tr`)]
    .map((tr) => [...tr.children].map((td) => td.textContent));
  return { lens: rows('.lens-table'), attention: rows('.attn-table'), cost: rows('.cost-table').map((r) => r[0]),
           layer: document.querySelector('[data-testid=trace-layer] select').value };
}"""

OPENED = "() => document.querySelector('[data-testid=trace-panel] .lens-table') !== null"


def visible(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)[1:-1]


@pytest.fixture(scope="module")
def cli_trace(smollm2_path) -> dict:
    out = subprocess.run([sys.executable, "-m", "pyengine", "trace", str(smollm2_path), "--chat", "--prompt", QUESTION,
                          "--weights", "f32", "--json"], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def replied(app, smollm2_path):
    load_model(app, [smollm2_path], workers="1")
    app.get_by_test_id("show-probs").check()
    set_settings(app, temperature=0, max_tokens=4, seed=None)
    ask(app, QUESTION)
    return app


def same_as_cli(page, want: dict) -> None:
    """Open the panel on the last reply's first token; what it shows is ``want``'s (the CLI's record)."""
    first = page.locator(".message.assistant:last-child .tok").first
    first.click()
    page.wait_for_function(OPENED, timeout=60_000)
    got = page.evaluate(TABLES)
    assert [row[0] for row in got["lens"]] == [str(layer["layer"]) for layer in want["layers"]]
    for (_, token, p, *_), layer in zip(got["lens"], want["layers"], strict=True):
        assert token == f'"{visible(layer["top"][0][1])}"'
        assert float(p.rstrip("%")) == pytest.approx(100 * layer["top"][0][2], abs=0.051)
    assert want["layers"][-1]["top"][0][1] == want["next"][1]
    shown = "(s) => [...s.childNodes].filter((n) => n.nodeType === 3).map((n) => n.textContent).join('')"
    assert first.evaluate(shown) == want["next"][1]                     # the token clicked is the step's answer
    layer = want["layers"][int(got["layer"])]
    mean = np.asarray(layer["attention"]).mean(axis=0)                  # (positions from first)
    assert len(got["attention"]) == 8
    for position, token, weight in got["attention"]:
        i = int(position)
        assert token == visible(want["tokens"][i])
        assert float(weight.rstrip("%")) == pytest.approx(100 * mean[i - layer["first"]], abs=0.051)
    assert set(got["cost"]) - {"all-reduce", "gather"} == set(want["ops"])


def test_the_panel_shows_what_the_cli_prints(replied, cli_trace):
    same_as_cli(replied, cli_trace)
    assert "(1 worker, f32 weights)" in replied.locator("[data-testid=trace-panel] .trace-part").nth(2).text_content()


def test_the_panel_by_keyboard(replied):
    page = replied
    panel = page.get_by_test_id("trace-panel")
    if panel.is_visible():                                              # opened by a click on token 0
        page.keyboard.press("Escape")
        page.wait_for_function("() => document.activeElement.dataset.index === '0'")   # the focus back on it
    token = page.locator(".message.assistant:last-child .tok").nth(1)
    token.focus()
    assert page.evaluate("document.activeElement.dataset.index") == "1"
    page.keyboard.press("Space")
    page.wait_for_function(OPENED, timeout=60_000)
    assert panel.is_visible()
    page.get_by_test_id("trace-head").locator("select").select_option("0")
    assert page.locator("[data-testid=trace-panel] .attn-note").text_content().startswith(
        f"Layer {page.evaluate(TABLES)['layer']}, head 0.")
    page.get_by_test_id("trace-layer").locator("select").focus()
    page.keyboard.press("Escape")
    assert panel.is_hidden()
    page.wait_for_function("() => document.activeElement.dataset.index === '1'")


def test_the_panel_passes_axe(replied):
    page = replied

    def open_panel(p):
        if not p.get_by_test_id("trace-panel").is_visible():
            p.locator(".message.assistant:last-child .tok").first.click()
        p.wait_for_function(OPENED, timeout=60_000)
    assert check(page, "the trace panel", open_panel) == []
    page.set_viewport_size({"width": 390, "height": 844})              # a phone: nothing wider than the panel
    try:
        assert page.evaluate("""() => { const d = document.querySelector('[data-testid=trace-panel]');
          return d.scrollWidth <= d.clientWidth && document.documentElement.scrollWidth <= 390; }""")
    finally:
        page.set_viewport_size({"width": 1280, "height": 860})
    page.keyboard.press("Escape")


STREAMING_CLICK = """() => {               // in one task: the click lands while the reply is still streaming
  const li = document.querySelector('.message.assistant:last-child');
  if (!li.classList.contains('streaming') || li.querySelectorAll('.tok').length < 3) return false;
  li.querySelectorAll('.tok')[1].click();
  return true;
}"""
PANEL_TEXT = "() => document.querySelector('[data-testid=trace-panel] .trace-content').textContent"


def test_a_reply_being_written_and_one_no_longer_last_in_the_worker_are_refused(replied):
    """A token clicked while its reply streams: counted back from a moving end, the worker would trace another
    token (one with the same id further on, or refuse in words that do not fit); the panel says to wait, and no
    trace comes after the reply ends. Two turns with the same reply, the second deleted: the first is the last
    message shown but not the worker's last turn, whose tokens have the same ids: refused, not the other's trace."""
    page = replied
    new_chat(page)
    set_settings(page, max_tokens=200)
    send(page, "Write a long poem about the sea.")
    page.wait_for_function(STREAMING_CLICK, timeout=REPLY_MS)
    waiting = "The reply is still being written: look inside its tokens once it has ended."
    assert page.evaluate(PANEL_TEXT) == waiting
    page.keyboard.press("Escape")                                        # the panel is modal: closed to Stop
    page.get_by_test_id("stop").click()
    wait_reply(page)
    page.wait_for_timeout(500)                                           # a trace would have come by now
    assert page.evaluate(PANEL_TEXT) == waiting and page.evaluate(OPENED) is False

    new_chat(page)
    set_settings(page, max_tokens=4)
    first, second = ask(page, QUESTION), ask(page, QUESTION)
    assert first == second                                               # the same tokens: only the turn tells
    page.get_by_label("Delete this message and its reply").nth(1).click()
    assert len(messages(page)) == 2
    page.locator(".message.assistant:last-child .tok").first.click()
    assert page.evaluate(PANEL_TEXT) == ("Only the tokens of the last reply, written in this chat since the model "
                                         "was loaded, can be looked inside.")
    page.wait_for_timeout(500)
    assert page.evaluate(OPENED) is False
    page.keyboard.press("Escape")


def test_a_model_split_over_two_workers_shows_the_whole_models_trace(replied, smollm2_path, cli_trace):
    """Each worker's heads and vocabulary rows gathered (the sums in another order: within the table's 0.1%)."""
    page = replied
    load_model(page, [smollm2_path], workers="2")
    new_chat(page)
    ask(page, QUESTION)
    same_as_cli(page, cli_trace)
    cost = page.locator("[data-testid=trace-panel] .trace-part").nth(2).text_content()
    assert "(2 workers, f32 weights)" in cost and "all-reduce" in cost
    page.keyboard.press("Escape")


# A trace of 18 attention layers x 2 heads over a long conversation (as pyengine.generation.trace gives it), drawn
# by trace_view.js itself: each heatmap row's height on screen, and the lines each number of the tables takes.
LONG_TRACE = """async (n) => {
  const view = await import('./app/trace_view.js');
  const row = Array.from({ length: n + 1 }, (_, i) => (i === 0 ? 0.5 : 0.5 / n));
  const long = [2, 3, 4, 5].map((i) => [i, ` internationalization${i}`, 0.01]);   // a wide "next 4" column
  const layers = Array.from({ length: 18 }, (_, il) => ({ layer: il, kind: 'attention', note: 'attention', first: 0,
    attention: [row, row], top: [[1, ' Paris', 0.9531], ...long], answer: [0, 0.9531],
    seconds: 0.001, ops: { attention: 0.001 } }));
  const tokens = Array.from({ length: n + 1 }, (_, i) => ` w${i}`);
  const trace = { position: n, token: ' is', next: [1, ' Paris'], tokens, layers, stages: {},
    ops: { attention: 0.018, ffn_down: 0.0123 }, bytes: { ffn_down: 2 ** 20 },
    total_seconds: 0.0303, weights: 'f32', workers: 1 };
  const span = document.createElement('span');
  view.openTrace(span, { token: ' Paris' }, 0);
  view.showTrace(trace, 0);
  const pic = document.querySelector('[data-testid=trace-panel] .heatmap');
  const lines = (td) => {
    const r = document.createRange();
    r.selectNodeContents(td);
    return r.getClientRects().length;
  };
  const numbers = [...document.querySelectorAll('[data-testid=trace-panel] .lens-table tbody td:nth-child(3)')];
  return { row: pic.getBoundingClientRect().height / 18, lines: Math.max(...numbers.map(lines)) };
}"""


def test_a_long_conversations_heatmap_keeps_its_rows_readable(app):
    """3000 positions (binned into 256 columns): a row of the heatmap is as tall on screen as in a short chat (was
    3.6 px, the picture 14 times wider than tall), and a probability is not broken over lines by a wide row."""
    got = app.evaluate(LONG_TRACE, 3000)
    app.keyboard.press("Escape")
    assert got["row"] >= 8 and got["lines"] == 1, got
