"""The model split over several Pyodide workers (pyengine/parallel, web/shard_worker.js) in Chromium.

With 2 workers the vocabulary matrix's rows are shared between the main worker and a helper; the
page's greedy replies must still equal the CPython engine's, Stop must still land while the main
worker waits on the helper, and a page that is not cross-origin isolated, or a helper that cannot
start, leaves one worker that works.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from browser.conftest import STATIC, fresh_page, start_server, stop_server
from browser.pages import ask, error_text, load_model, messages, new_chat, set_settings
from browser.reference import cpython_reply, reply_before_near_tie
from browser.test_chat import QUESTION, stop_mid_reply_then_ask_again

pytestmark = pytest.mark.browser


def worker_count(page) -> int:
    return int(page.get_by_test_id("workers-note").get_attribute("data-count"))


def greedy(page, text: str, max_tokens: int) -> str:
    new_chat(page)
    set_settings(page, temperature=0, max_tokens=max_tokens, seed=None)
    return ask(page, text)


@pytest.fixture(scope="module")
def two_workers(app, smollm2_path):
    """The app (cross-origin isolated: 2 workers by default) with SmolLM2-135M-Instruct loaded."""
    assert app.evaluate("crossOriginIsolated")
    assert app.get_by_test_id("workers").input_value() == "2"
    load_model(app, [smollm2_path])
    return app


def test_two_workers_reply_as_cpython(two_workers, smollm2_path):
    assert worker_count(two_workers) == 2
    note = two_workers.get_by_test_id("workers-note").text_content()
    assert note.startswith("computing in 2 workers (") and note.count(" + ") == 1, note  # each one's memory
    loaded = heaps(two_workers)
    assert greedy(two_workers, QUESTION, 24) == cpython_reply(smollm2_path, [QUESTION], max_tokens=24)
    replied = heaps(two_workers)                              # as the reply left them (a heap only grows)
    assert len(replied) == 2 and all(a >= b > 0 for a, b in zip(replied, loaded)), (loaded, replied)


def heaps(page) -> list[int]:
    """Each worker's wasm bytes, as the page says them."""
    return json.loads(page.get_by_test_id("workers-note").get_attribute("data-heap"))


def test_stop_while_waiting_on_the_helper_then_the_next_message_works(two_workers, smollm2_path):
    assert worker_count(two_workers) == 2
    stop_mid_reply_then_ask_again(two_workers, smollm2_path)


def test_gemma3_with_two_then_four_workers_replies_as_cpython(two_workers, gemma3_path):
    """Gemma 3's output is tied to token_embd: the helpers also look up the embedding rows they hold."""
    question = "The capital of France is"
    want = cpython_reply(gemma3_path, [question], max_tokens=12)
    load_model(two_workers, [gemma3_path])
    assert worker_count(two_workers) == 2
    assert greedy(two_workers, question, 12) == want
    load_model(two_workers, [gemma3_path], workers="4")  # the old helper leaves its loop, three load
    assert worker_count(two_workers) == 4
    assert greedy(two_workers, question, 12) == want
    load_model(two_workers, [gemma3_path], workers="1")
    assert worker_count(two_workers) == 1
    assert greedy(two_workers, question, 12) == want


@pytest.mark.parametrize("memory, card, form", [("auto", "blocks:", "blocks"), ("numpy", "mixed:", "numpy")])
def test_gemma3_default_form_over_two_workers_replies_as_one(two_workers, gemma3_path, memory, card, form):
    """The default form (the file's own blocks, in the C kernel) and numpy's "mixed" (Gemma 3's vocabulary
    in two forms, packed rows then int8 rows: a RowSplit), split over two workers, the second across that
    seam: the reply is one worker's, token for token, up to the first step where CPython's top-2 margin is
    under 0.1 (the split sums the columns' halves apart; in the kernel's form this prompt has none)."""
    question = "What is two plus two?"
    start = reply_before_near_tie(gemma3_path, [question], 12, weights=form)
    load_model(two_workers, [gemma3_path], memory, "1")
    assert worker_count(two_workers) == 1
    one = greedy(two_workers, question, 12)
    load_model(two_workers, [gemma3_path], memory, "2")
    assert worker_count(two_workers) == 2
    assert two_workers.get_by_test_id("model-info").locator("dd[data-field=weights]").text_content().startswith(card)
    two = greedy(two_workers, question, 12)
    assert one.startswith(start) and two.startswith(start) and len(start) > 10, (one, two, start)


def test_without_isolation_the_setting_falls_back_to_one_worker(browser, server, smollm2_path):
    with fresh_page(browser, server, isolated=False) as page:
        workers = page.get_by_test_id("workers")
        assert workers.input_value() == "1" and workers.is_disabled()
        assert page.get_by_test_id("workers-note").text_content() == "1 worker: the page is not cross-origin isolated"
        load_model(page, [smollm2_path])
        assert worker_count(page) == 1
        assert greedy(page, QUESTION, 8) == cpython_reply(smollm2_path, [QUESTION], max_tokens=8)


@pytest.fixture
def broken_helper_server(built, tmp_path):
    """static/ (hard links) with a shard_worker.js that throws as it starts, served on its own port.
    (A route cannot do it: Playwright does not see the requests of a worker started by a worker.)"""
    root = tmp_path / "static"
    shutil.copytree(STATIC, root, copy_function=os.link)
    (root / "shard_worker.js").unlink()
    (root / "shard_worker.js").write_text("throw new Error('no helper today');\n")
    proc, url = start_server(root)
    yield url
    stop_server(proc)


def test_a_helper_that_cannot_start_leaves_one_working_worker(browser, broken_helper_server, smollm2_path):
    with fresh_page(browser, broken_helper_server) as page:
        assert page.evaluate("crossOriginIsolated") and page.get_by_test_id("workers").input_value() == "2"
        load_model(page, [smollm2_path])
        note = page.get_by_test_id("workers-note").text_content()
        assert worker_count(page) == 1 and note.startswith("running in 1 worker (worker 2 failed: "), note
        assert error_text(page) is None
        assert greedy(page, QUESTION, 8) == cpython_reply(smollm2_path, [QUESTION], max_tokens=8)
        assert messages(page)[-1][0] == "assistant"
