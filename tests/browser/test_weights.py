"""The page's Memory setting (a weight policy of pyengine.weights.budget.WEIGHT_FORMS): sent with ``load``,
shown on the model card, and the replies of a compact model equal the CPython engine's in that form.

The first tests drive pyengine.browser.worker in CPython (a fake pool of 2 workers, as tests/parallel/test_parallel.py);
the browser ones load SmolLM2-135M-Instruct in Chromium, cross-origin isolated: 2 workers.
"""

from __future__ import annotations

import json

import pytest
from conftest import TINY
from parallel.test_parallel import FakePool, run, worker_reply

from browser.pages import error_text, load_model
from browser.reference import cpython_reply, reply_before_near_tie
from browser.test_chat import QUESTION
from browser.test_workers import greedy, worker_count
from pyengine.browser import worker
from pyengine.browser.settings import AUTO_OPTION, MEMORY
from pyengine.gguf import open_gguf
from pyengine.gguf.source import FileSource
from pyengine.weights.budget import CHOICES
from pyengine.weights.forms import Form

FORMS = {"auto": AUTO_OPTION, **{k: MEMORY[k][0] for k in ("numpy", "f32", "compact")}}


# --- pyengine.browser.worker in CPython -------------------------------------------------------------------

@pytest.mark.parametrize("weights", ["blocks", "quantized", "compact"])
def test_the_worker_and_its_helper_hold_the_files_codes(weights, q8_qwen2):
    """Both workers hold their shard in the form asked for, and the reply is the CPython split's."""
    pool = FakePool(2)
    info, text = worker_reply(pool, q8_qwen2, "hello", weights=weights)
    model = worker._session.chat.engine.model
    assert info["count"] == 2 and model.weights == weights
    for shard in (model, pool.helpers[0].model):
        assert shard.layers[0].ffn.w_gate_up.form is Form[weights.upper()]
        assert shard.layers[0].ffn.w_gate_up.shape[0] == 2 * (shard.shard.ffn[1] - shard.shard.ffn[0])
    assert text == cpython_reply(q8_qwen2, ["hello"], max_tokens=8, weights=weights, workers=2) != ""
    model.close()


def test_the_card_names_the_form_in_use():
    posted: list[dict] = []
    worker.setup(posted.append)
    # auto: float32 for a tiny model of float32 tensors, which the kernel has no product for
    for asked, held in [("compact", "compact"), ("auto", "f32"), (None, "f32"), ("numpy", "f32")]:
        run(worker.handle({"type": "load", "files": [FileSource(TINY["llama"])], "weights": asked}))
        assert posted[-1]["type"] == "model", posted[-1]
        assert posted[-1]["card"]["weights"] == held == worker._session.chat.engine.model.weights


def test_an_unknown_form_is_an_error_that_keeps_the_model():
    posted: list[dict] = []
    worker.setup(posted.append)
    run(worker.handle({"type": "load", "files": [FileSource(TINY["llama"])], "weights": "compact"}))
    start = len(posted)
    run(worker.handle({"type": "load", "files": [FileSource(TINY["qwen2"])], "weights": "int4"}))
    kinds = [m["type"] for m in posted[start:]]
    assert kinds[-1] == "error" and set(kinds[:-1]) <= {"progress"}   # no "unloaded": the compact model stays
    forms = ", ".join(repr(f) for f in CHOICES)
    assert f"weights must be {forms}, got 'int4'" in posted[-1]["message"]
    assert worker._session.chat.engine.model.weights == "compact"


# --- the page in Chromium -------------------------------------------------------------------------

@pytest.mark.browser
def test_the_memory_setting_offers_the_forms(app):
    select = app.get_by_test_id("weights")
    assert select.input_value() == "auto"
    options = select.locator("option")
    assert dict(zip(options.evaluate_all("os => os.map(o => o.value)"), options.all_text_contents())) == FORMS


@pytest.fixture(scope="module")
def compact_smollm(app, smollm2_path):
    """The app with SmolLM2-135M-Instruct loaded compact (2 workers: the page is cross-origin isolated)."""
    load_model(app, [smollm2_path], "compact", workers="2")
    return app


@pytest.mark.browser
def test_compact_model_card_and_greedy_reply_equal_cpython_compact(compact_smollm, smollm2_path):
    page = compact_smollm
    card = page.get_by_test_id("model-info")
    assert card.locator("dd[data-field=weights]").text_content() == MEMORY["compact"][1]
    assert worker_count(page) == 2
    heap = json.loads(page.get_by_test_id("workers-note").get_attribute("data-heap"))
    with open_gguf(smollm2_path) as g:   # what float32 would hold in these two workers
        f32 = 4 * sum(t.n_elements for t in g.tensors.values())
    assert len(heap) == 2 and sum(heap) < f32, (heap, f32)
    reply = greedy(page, QUESTION, 24)
    start = reply_before_near_tie(smollm2_path, [QUESTION], max_tokens=24, weights="compact", workers=2)
    assert reply.startswith(start) and len(start) > 10, (reply, start)
    assert error_text(page) is None


@pytest.mark.browser
def test_a_change_applies_at_the_next_load(compact_smollm):
    page = compact_smollm
    page.get_by_test_id("weights").select_option("auto")
    assert page.get_by_test_id("weights-note").text_content() == "from the next model loaded on"
    assert page.get_by_test_id("model-info").locator("dd[data-field=weights]").text_content().startswith("compact:")


@pytest.mark.browser
def test_the_default_form_replies_as_pyodide_under_node(compact_smollm, smollm2_path):
    """"auto" in one worker (the file's own blocks, their products in the C kernel: Chromium has relaxed SIMD,
    so its build that multiplies bytes by bytes) equals the engine with the same forms under Pyodide in Node
    (the SIMD128 build: the same bits), token for token."""
    from node.test_node_pyodide import in_pyodide
    page = compact_smollm
    load_model(page, [smollm2_path], "auto", workers="1")
    shown = page.get_by_test_id("model-info").locator("dd[data-field=weights]").text_content()
    products = page.get_by_test_id("model-info").locator("dd[data-field=products]").text_content()
    assert products == "C kernel (pyengine_kernel_relaxed.so)"
    reply = greedy(page, QUESTION, 24)
    node = in_pyodide(f"""
from pyengine.generation import ChatSession, load
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams
session = ChatSession(load(MODELS + "/{smollm2_path.name}"))
turn = session.send({QUESTION!r}, Request(SamplerParams(temperature=0.0), 24))
for _ in turn:
    pass
[turn.text, session.engine.model.weights]
""")
    assert node[1] == "blocks" and shown == MEMORY[node[1]][1] and reply == node[0] and reply.strip()
