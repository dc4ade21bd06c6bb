"""The page's Memory setting (the weight form of pyengine.weights.budget.WEIGHT_FORMS): sent with ``load``,
shown on the model card, and the replies of an int8 model equal the CPython engine's in int8.

The first tests drive pyengine.browser.worker in CPython (a fake pool of 2 workers, as tests/test_parallel.py);
the browser ones load SmolLM2-135M-Instruct in Chromium, cross-origin isolated: 2 workers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import TINY
from test_parallel import FakePool, run, worker_reply

from browser.pages import error_text
from browser.reference import cpython_reply
from browser.test_chat import QUESTION
from browser.test_workers import greedy, load, worker_count
from pyengine.browser import worker
from pyengine.gguf import open_gguf
from pyengine.gguf.source import FileSource
from pyengine.weights.budget import WEIGHT_FORMS, is_vocab

FORMS = {"auto": "balanced (default)", "f32": "fastest, most memory", "packed": "fast, two thirds of that",
         "int8": "low memory, slower"}


# --- pyengine.browser.worker in CPython -------------------------------------------------------------------

def test_the_worker_loads_int8_and_its_helper_holds_int8_rows():
    """Every matrix shared with the helper (split "all": the layers' too) is int8 there as here."""
    path = TINY["llama-q4km"]
    pool = FakePool(2, split="all")
    info, text = worker_reply(pool, path, "hello", weights="int8")
    model = worker._session.chat.engine.model
    assert info["count"] == 2 and model.weights == "int8"
    helper = [lin for lin in pool.servers[0].locals if lin is not None]
    assert len(helper) == 1 + 4 * len(model.layers)              # output, then wqkv, wo, w_gate_up, w_down
    assert {w.q.dtype for w in helper} == {model.output.local.q.dtype} == {np.dtype(np.int8)}
    assert text == cpython_reply(path, ["hello"], max_tokens=8, weights="int8") != ""
    _, text_f32 = worker_reply(None, path, "hello", weights="f32")
    assert text_f32 == cpython_reply(path, ["hello"], max_tokens=8, weights="f32")


def test_the_card_names_the_form_in_use():
    posted: list[dict] = []
    worker.setup(posted.append)
    for asked, held in [("int8", "int8"), ("auto", "f32"), (None, "f32")]:  # auto: float32 for a tiny model
        run(worker.handle({"type": "load", "files": [FileSource(TINY["llama"])], "weights": asked}))
        assert posted[-1]["type"] == "model", posted[-1]
        assert posted[-1]["card"]["weights"] == held == worker._session.chat.engine.model.weights


def test_an_unknown_form_is_an_error_that_keeps_the_model():
    posted: list[dict] = []
    worker.setup(posted.append)
    run(worker.handle({"type": "load", "files": [FileSource(TINY["llama"])], "weights": "int8"}))
    start = len(posted)
    run(worker.handle({"type": "load", "files": [FileSource(TINY["qwen2"])], "weights": "int4"}))
    assert [m["type"] for m in posted[start:]] == ["error"]   # no "unloaded": the int8 model stays
    forms = ", ".join(repr(f) for f in ("auto", *WEIGHT_FORMS))
    assert f"weights must be {forms}, got 'int4'" in posted[-1]["message"]
    assert worker._session.chat.engine.model.weights == "int8"


# --- the page in Chromium -------------------------------------------------------------------------

@pytest.mark.browser
def test_the_memory_setting_offers_the_forms(app):
    select = app.get_by_test_id("weights")
    assert select.input_value() == "auto"
    options = select.locator("option")
    assert dict(zip(options.evaluate_all("os => os.map(o => o.value)"), options.all_text_contents())) == FORMS


@pytest.fixture(scope="module")
def int8_smollm(app, smollm2_path):
    """The app with SmolLM2-135M-Instruct loaded in int8 (2 workers: the page is cross-origin isolated)."""
    load(app, smollm2_path, weights="int8")
    return app


@pytest.mark.browser
def test_int8_model_card_and_greedy_reply_equal_cpython_int8(int8_smollm, smollm2_path):
    page = int8_smollm
    card = page.get_by_test_id("model-info")
    assert card.locator("dd[data-field=weights]").text_content() == "int8: low memory, slower"
    assert worker_count(page) == 2
    heap = json.loads(page.get_by_test_id("workers-note").get_attribute("data-heap"))
    with open_gguf(smollm2_path) as g:   # what "f32" would hold as float32 in this worker alone
        layers_f32 = 4 * sum(t.n_elements for name, t in g.tensors.items() if not is_vocab(name))
    assert len(heap) == 2 and heap[0] < layers_f32, (heap, layers_f32)   # int8: 221 MB against 425 MB
    reply = greedy(page, QUESTION, 24)
    assert reply == cpython_reply(smollm2_path, [QUESTION], max_tokens=24, weights="int8")
    assert error_text(page) is None


@pytest.mark.browser
def test_a_change_applies_at_the_next_load(int8_smollm):
    page = int8_smollm
    page.get_by_test_id("weights").select_option("auto")
    assert page.get_by_test_id("weights-note").text_content() == "from the next model loaded on"
    assert page.get_by_test_id("model-info").locator("dd[data-field=weights]").text_content().startswith("int8:")


@pytest.mark.browser
def test_the_default_form_replies_as_pyodide_under_node(int8_smollm, smollm2_path):
    """"auto" (here "mixed": packed layers, int8 vocabulary rows) in the page equals the engine with the
    same form under Pyodide in Node, token for token. Against CPython the packed forms can part at a
    near-tie (numpy 2.4 sums float32 in other orders; see browser/pages.py EXACT)."""
    from test_node_pyodide import in_pyodide
    page = int8_smollm
    load(page, smollm2_path, weights="auto")
    assert page.get_by_test_id("model-info").locator("dd[data-field=weights]").text_content().startswith("mixed:")
    reply = greedy(page, QUESTION, 24)
    node = in_pyodide(f"""
from pyengine.generation import ChatSession, load
from pyengine.generation.sampling import SamplerParams
session = ChatSession(load(MODELS + "/{smollm2_path.name}"))
turn = session.send({QUESTION!r}, SamplerParams(temperature=0.0), max_tokens=24)
for _ in turn:
    pass
[turn.text, session.engine.model.weights]
""")
    assert node[1] == "mixed" and reply == node[0] and reply.strip()
