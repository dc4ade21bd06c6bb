"""A worker whose model sits past 2 GiB of its memory, in Chromium: it replies as a worker below the line.

The page is served from a copy of static/ whose worker.js first takes 2.25 GiB of the wasm heap (never
touched, so the machine backs none of it): the model's weights, the KV cache and the strings of the
chat then sit above 2 GiB, where an address is a negative i32 to JavaScript. The File's chunks reach
their arrays through web/file_read.js, the kernel's products and the reply's text cross as anywhere
else. In the kernel's form (the page's default) and with 2 workers, the greedy reply to a question with
non-ASCII text equals, character for character, the reply of the normal page; the worker says its
lowest weight address and its heap.
"""

from __future__ import annotations

import os
import shutil

import pytest

from browser.conftest import STATIC, fresh_page, start_server, stop_server
from browser.pages import ask, load_model, new_chat, set_settings

pytestmark = pytest.mark.browser

LINE = 2**31
QUESTION = "Écris « café » et « 東京 » dans une phrase, avec un 😀."
AFTER = '  glue = pyodide.pyimport("pyengine.browser.worker");\n'
# Put in worker.js after Python starts: the ballast, and what the test reads back through Playwright.
BALLAST = AFTER + """  pyodide.runPython(`import builtins, numpy
builtins.ballast = [numpy.empty(2**30 + 2**27, numpy.uint8) for _ in range(2)]`);
  self.pastTheLine = () => JSON.parse(pyodide.runPython(`
import json
from pyengine.browser import worker
from pyengine.parallel.driver import SplitModel
m = worker._session.model
m = m.model if isinstance(m, SplitModel) else m
json.dumps({"lowest": min(w.data.ctypes.data for l in m.layers
                          for w in (l.mixer.wqkv, l.mixer.wo, l.ffn.w_gate_up, l.ffn.w_down)),
            "heap": __import__("pyodide_js")._module.HEAPU8.length})`));
"""


@pytest.fixture
def ballast_server(built, tmp_path):
    """static/ (hard links) whose main worker holds 2.25 GiB before anything else."""
    root = tmp_path / "static"
    shutil.copytree(STATIC, root, copy_function=os.link)
    text = (root / "worker.js").read_text()
    assert text.count(AFTER) == 1
    (root / "worker.js").unlink()
    (root / "worker.js").write_text(text.replace(AFTER, BALLAST))
    proc, url = start_server(root)
    yield url
    stop_server(proc)


def reply(browser, url: str, path, workers: str) -> tuple[str, object]:
    """The page's greedy reply to QUESTION with the model in the kernel's form; the worker's pastTheLine()
    where the ballast put it (else None)."""
    with fresh_page(browser, url) as page:
        load_model(page, [path], weights="auto", workers=workers)
        new_chat(page)
        set_settings(page, temperature=0, max_tokens=24, seed=None)
        text = ask(page, QUESTION)
        worker = next(w for w in page.workers if w.url.endswith("/worker.js"))
        where = worker.evaluate("() => self.pastTheLine ? self.pastTheLine() : null")
    return text, where


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_model_past_2_gib_replies_as_one_below_it(browser, server, ballast_server, smollm2_path, workers):
    high, where = reply(browser, ballast_server, smollm2_path, workers)
    low, _ = reply(browser, server, smollm2_path, workers)
    assert where["lowest"] >= LINE and where["heap"] > LINE + 2**28
    assert len(high) > 20 and high == low
