"""A helper worker killed mid-reply, in Chromium: its Python leaves its loop for good during the third
forward pass it serves (an interrupt its own shard_worker.js raises, as a killed or dead interpreter would
end), and shard_worker.js marks it dead in the shared buffer. The main worker, waiting for it at a meeting,
gives the reply up at once (not after the channel's 120 s), the page says what happened and what to do,
the chat keeps the user's message, and loading the model again works.
"""

from __future__ import annotations

import os
import shutil
import time

import pytest

from browser.conftest import STATIC, fresh_page, start_server, stop_server
from browser.pages import error_text, load_model, messages, new_chat, send, set_settings, wait_status
from browser.test_workers import worker_count

pytestmark = pytest.mark.browser

# Put in the helper after its Python starts: once it reads the third FORWARD command (server.py's serve loads
# ctl[CMD] once a command; ctl[SEQ] numbers them), its Python is interrupted; server.py's loop catches no
# KeyboardInterrupt, so serve_helper throws. (Hooked on that read, not on Atomics.wait: a helper that finds
# its next command at once, or while meeting.js spins, never calls Atomics.wait, and then it never died.)
DIES = """  pyodide = py;
  const stop = new Int32Array(new SharedArrayBuffer(4));
  py.setInterruptBuffer(stop);
  const load = Atomics.load, forwards = new Set();
  Atomics.load = (ta, i) => {
    const v = load(ta, i);
    if (i === 1 && v === 1 && ta.length > 1000 && forwards.add(load(ta, 0)).size >= 3) stop[0] = 2;
    return v;
  };
"""


@pytest.fixture
def dying_helper_server(built, tmp_path):
    """static/ (hard links) whose helpers die during the third forward pass they serve."""
    root = tmp_path / "static"
    shutil.copytree(STATIC, root, copy_function=os.link)
    text = (root / "shard_worker.js").read_text()
    assert text.count("  pyodide = py;\n") == 1
    (root / "shard_worker.js").unlink()
    (root / "shard_worker.js").write_text(text.replace("  pyodide = py;\n", DIES))
    proc, url = start_server(root)
    yield url
    stop_server(proc)


def test_a_helper_killed_mid_reply_ends_it_at_once_and_the_model_loads_again(browser, dying_helper_server,
                                                                             smollm2_path):
    with fresh_page(browser, dying_helper_server) as page:
        load_model(page, [smollm2_path], workers="2")
        assert worker_count(page) == 2
        new_chat(page)
        set_settings(page, temperature=0, max_tokens=16, seed=None)
        t0 = time.monotonic()
        send(page, "What is the capital of France?")
        wait_status(page, ("no model",), 60_000)                       # the model was let go, at once
        assert time.monotonic() - t0 < 60
        assert error_text(page) == "worker 2 stopped (see the browser console): the model was let go; load it again"
        assert messages(page)[0] == ("user", "What is the capital of France?")
        load_model(page, [smollm2_path])                               # a new helper (this one dies later too)
        assert worker_count(page) == 2 and error_text(page) is None
        set_settings(page, max_tokens=1)
        send(page, "Hi")
        wait_status(page, ("ready",), 120_000)
        assert messages(page)[-1][0] == "assistant"
