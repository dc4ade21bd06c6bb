"""pyengine.parallel in CPython: the cut into shards, and the split forward pass with helpers as threads.

The helpers run the same code as in the browser (``parallel.server``) on a ``ThreadBlock`` (numpy
arrays and a condition variable standing in for the SharedArrayBuffer and ``Atomics``). A split
model's logits are the whole model's up to float summation order (the partial sums of the heads
and FFN units are added in another order): within 1e-5 here (5e-4 for tiny-gemma3, whose GELU
rounds to float16 as ggml's does and so turns float32 differences into float16 steps).
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from conftest import TINY
from node.test_node_pyodide import in_pyodide, static_ready  # noqa: F401 (static_ready: a fixture)
from split_threads import start, stop

from pyengine.browser import worker
from pyengine.errors import PyEngineError
from pyengine.generation.engine import Engine
from pyengine.generation.loop import generate
from pyengine.generation.request import Request
from pyengine.gguf import open_gguf
from pyengine.gguf.source import FileSource
from pyengine.model import load_model
from pyengine.model.config import ModelConfig
from pyengine.parallel import channel, driver, server, split
from pyengine.text.tokenizer import Tokenizer

RNG = np.random.default_rng(3)
PROMPT = [1, 5, 9, 42, 7, 300, 12, 3]


def test_ranges_cover_n_in_order():
    assert split.ranges(262144, 2) == [(0, 131072), (131072, 262144)]
    assert split.ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert split.ranges(4864, 2, 256) == [(0, 2560), (2560, 4864)]          # 19 blocks of 256: 10 + 9
    with pytest.raises(PyEngineError, match="cannot cut 256 into 2 parts of whole groups of 256"):
        split.ranges(256, 2, 256)


@pytest.mark.parametrize("n_head, n_kv, n, align, want", [
    (14, 2, 2, 1, [((0, 7), (0, 1)), ((7, 14), (1, 2))]),                  # Qwen2.5-0.5B: a KV head each
    (14, 2, 4, 1, [((0, 4), (0, 1)), ((4, 7), (0, 1)), ((7, 11), (1, 2)), ((11, 14), (1, 2))]),
    (4, 1, 2, 1, [((0, 2), (0, 1)), ((2, 4), (0, 1))]),                    # Gemma 3: both compute the KV head
    (32, 8, 2, 4, [((0, 16), (0, 4)), ((16, 32), (4, 8))]),                # Llama-3.2-1B, Q4_K attn_output
    (32, 8, 3, 4, [((0, 12), (0, 3)), ((12, 24), (3, 6)), ((24, 32), (6, 8))]),
])
def test_head_ranges_keep_kv_groups_and_blocks(n_head, n_kv, n, align, want):
    got = split.head_ranges(n_head, n_kv, n, align)
    assert got == want
    g = n_head // n_kv
    for (h0, h1), (g0, g1) in got:                                          # each q head's KV head is held
        assert all(g0 <= h // g < g1 for h in range(h0, h1)) and (h1 - h0) % (g1 - g0) == 0


@pytest.mark.parametrize("weights", ["f32", "quantized", "compact"])
@pytest.mark.parametrize("name, n_workers", [("gemma3", 2), ("gemma3", 4), ("qwen2", 2), ("qwen2", 3)])
def test_a_split_model_gives_the_whole_models_logits(name, n_workers, weights):
    whole = load_model(open_gguf(TINY[name]), weights=weights)
    model, helpers, threads = start(TINY[name], n_workers, weights)
    tol = 5e-4 if name == "gemma3" else 1e-5
    try:
        assert model.workers == n_workers and model.weights == whole.weights
        c1, c2 = whole.new_cache(64), model.new_cache(64)
        want, got = whole.forward(PROMPT, c1, logits="all"), model.forward(PROMPT, c2, logits="all")
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)           # (8, n_vocab)
        ids = [int(np.argmax(want[-1]))]
        for _ in range(6):                                                  # decode, one token at a time
            a, b = whole.forward([ids[-1]], c1), model.forward([ids[-1]], c2)
            np.testing.assert_allclose(b, a, rtol=0, atol=tol)
            ids.append(int(np.argmax(a)))
        c2.truncate(5)                                                      # back to a prefix: the helpers follow
        np.testing.assert_allclose(model.forward(PROMPT[5:], c2, logits="all"), want[5:], rtol=0, atol=tol)
        assert [h.caches[c2.id].n for h in helpers] == [8] * (n_workers - 1)
        assert model.ping() > 0
    finally:
        stop(model, threads)


def test_a_model_that_cannot_be_cut_runs_in_fewer_workers_with_a_note():
    """tiny-llama-q4km's attn_output rows are one Q4_K block of 256 columns: its heads cannot be cut."""
    with open_gguf(TINY["llama-q4km"]) as g:
        plan = driver.plan_load(g, ModelConfig.from_metadata(g.metadata, g.tensors), "auto", 2)
    assert len(plan.shards) == 1
    assert plan.note == "running in 1 worker: cannot cut 2 into 2 parts of whole groups of 2"


def test_a_failed_or_silent_helper_is_an_error_and_stop_leaves_the_helpers_ready(monkeypatch, capsys):
    model, helpers, threads = start(TINY["gemma3"], 3)
    try:
        cache = model.new_cache(64)
        want = model.forward(PROMPT, cache)
        helpers[1].model.output = None                                      # its next logits fail
        with pytest.raises(PyEngineError, match="worker 3 failed"):
            model.forward([4], cache)
            model.forward([4], cache)
        assert "Traceback" in capsys.readouterr().err
        helpers[1].model.output = helpers[1].model.token_embd
        cache.truncate(0)
        np.testing.assert_allclose(model.forward(PROMPT, cache), want, rtol=0, atol=1e-5)   # served past it
        calls = [0]
        reduce = model.model.comm.all_reduce

        def interrupted(a):                                                 # a Stop lands in the 5th sum
            calls[0] += 1
            if calls[0] == 5:
                raise KeyboardInterrupt
            return reduce(a)
        monkeypatch.setattr(model.model.comm, "all_reduce", interrupted)
        with pytest.raises(KeyboardInterrupt):
            model.forward(PROMPT, model.new_cache(64))
        monkeypatch.setattr(model.model.comm, "all_reduce", reduce)
        cache.truncate(0)
        np.testing.assert_allclose(model.forward(PROMPT, cache), want, rtol=0, atol=1e-5)   # the helpers left it
        monkeypatch.setattr(channel, "TIMEOUT_S", 0.2)
        helpers[0].chan.block = channel.ThreadBlock(1)                      # helper 2 hears nothing more
        with pytest.raises(PyEngineError, match="worker 2 did not answer"):
            model.forward([4], cache)
    finally:
        model.chan.abort()


class FakePool:
    """worker.js's pool as pyengine.browser.worker sees it, with the helpers as threads of this process."""

    def __init__(self, n_workers: int, fail: str | None = None, boot_fail: str | None = None):
        self.n, self.fail, self.boot_fail, self.helpers, self.dropped = n_workers, fail, boot_fail, [], []

    def size(self) -> int:
        return self.n - 1

    async def start(self):
        return [self.boot_fail] + [None] * (self.n - 2)

    def load(self, files, plan, block, count):
        """Helpers 1..count each load in a thread of its own at once, then serve; an awaitable of their
        results, as worker.js's Promise."""
        results, ready = [None] * count, [threading.Event() for _ in range(count)]

        def helper(i: int) -> None:
            if self.fail and i == 1:
                results[0] = {"ok": False, "message": self.fail}
                return ready[0].set()
            h = server.load_helper(open_gguf([f.path for f in files]), plan, i, block,    # a reader of its own
                                   heap=lambda: (3 + i) * 2**20)
            self.helpers.append(h)
            results[i - 1] = {"ok": True, "bytes": h.model.weights_nbytes, "heap": 1000 + i}
            ready[i - 1].set()
            h.serve()

        for i in range(1, count + 1):
            threading.Thread(target=helper, args=(i,), daemon=True).start()
        return asyncio.get_running_loop().run_in_executor(None, lambda: [e.wait() for e in ready] and results)

    def drop(self, failed) -> None:
        self.dropped += list(failed)
        self.n -= len(failed)

    def resize(self, workers=None) -> None:
        pass


def run(coro) -> None:
    """Drive a coroutine to its end on an event loop in a thread of its own (Playwright's sync API may
    keep one running in this thread)."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


def worker_reply(pool: FakePool | None, path, text: str, weights: str = "auto") -> tuple[dict, str]:
    """The ``model`` message's workers and the reply's text, one chat message after a load; the ``done``
    message's heaps are each worker's (this one's: 12345 bytes)."""
    posted: list[dict] = []
    worker.setup(posted.append, pool=pool, heap=lambda: 12345)
    run(worker.handle({"type": "load", "files": [FileSource(path)], "weights": weights}))
    model_msg = next(m for m in posted if m["type"] in ("model", "error"))
    assert model_msg["type"] == "model", model_msg
    # the progress is the whole load's, summed over the workers
    last = [m for m in posted if m["type"] == "progress"][-1]
    with open_gguf(path) as g:
        assert last["tensors"] == last["n_tensors"] > 0 and last["bytes"] == last["total_bytes"]
        file_bytes = sum(t.n_bytes for t in g.tensors.values())
    # each worker reads the norms whole: a little more than the file (9% on tiny-gemma3's 4 norms a layer)
    assert file_bytes <= last["total_bytes"] <= 1.1 * file_bytes
    run(worker.handle({"type": "chat", "text": text, "system": "", "settings": {"temperature": 0, "max_tokens": 8}}))
    done = next(m for m in posted if m["type"] == "done")
    assert done["heap"] == [12345] + [(3 + i) * 2**20 for i in range(1, model_msg["workers"]["count"])]
    return model_msg["workers"], "".join(m["text"] for m in posted if m["type"] == "piece")


@pytest.mark.parametrize("name", ["gemma3", "qwen2"])
def test_the_worker_splits_the_model_and_replies_as_one_worker(name):
    one, text = worker_reply(None, TINY[name], "hello")
    assert one == {"count": 1, "heap": [12345], "note": ""}
    two, text2 = worker_reply(FakePool(2), TINY[name], "hello")
    assert two.pop("sync_us") > 0
    assert two == {"count": 2, "heap": [12345, 1001], "note": ""}
    assert worker._session.chat.engine.model.workers == 2
    assert text2 == text and len(text) > 0
    worker._session.model.close()


def test_a_helper_that_cannot_start_leaves_the_others():
    pool = FakePool(3, boot_fail="Python did not start: no memory")
    one, text = worker_reply(None, TINY["qwen2"], "hello")
    two, text2 = worker_reply(pool, TINY["qwen2"], "hello")
    assert pool.dropped == [0] and two.pop("sync_us") > 0
    assert two == {"count": 2, "heap": [12345, 1001],
                   "note": "running in 2 workers (worker 2 failed: Python did not start: no memory)"}
    assert text2 == text
    worker._session.model.close()


def test_a_helper_that_fails_to_load_is_a_clear_error():
    posted: list[dict] = []
    pool = FakePool(3, fail="Python did not start")
    worker.setup(posted.append, pool=pool, heap=lambda: 12345)
    run(worker.handle({"type": "load", "files": [FileSource(TINY["gemma3"])]}))
    assert posted[-1]["type"] == "error" and pool.dropped == [0]
    assert posted[-1]["message"] == ("the load failed while the weights were read: worker 2 could not load its "
                                     "part of the model: Python did not start; load the model again (or choose "
                                     "1 worker)")
    for h in pool.helpers:
        h.chan.abort()


def test_the_reply_says_how_long_the_main_worker_waited_for_the_helpers(monkeypatch):
    """TurnStats' prefill_wait_seconds and decode_wait_seconds: a helper slowed by 50 ms a forward pass
    makes the main worker wait about that long at each pass's meetings; a whole model waits for none."""
    tok = Tokenizer(open_gguf(TINY["qwen2"]).metadata)
    model, helpers, threads = start(TINY["qwen2"], 2, "f32")
    slow = helpers[0].model.forward

    def late(*args, **kw):
        time.sleep(0.05)
        return slow(*args, **kw)
    monkeypatch.setattr(helpers[0].model, "forward", late)
    try:
        gen = generate(Engine(None, model, tok, wait_seconds=model.wait_seconds), PROMPT, Request(max_tokens=4))
        list(gen)
        s = gen.stats
        assert s.decode_tokens == 3 and 0.05 <= s.prefill_wait_seconds < s.ttft_seconds
        assert 3 * 0.05 <= s.decode_wait_seconds < s.decode_seconds
    finally:
        stop(model, threads)
    gen = generate(Engine(None, load_model(open_gguf(TINY["qwen2"])), tok), PROMPT, Request(max_tokens=4))
    list(gen)
    assert gen.stats.prefill_wait_seconds == gen.stats.decode_wait_seconds == 0


MEETING_CODE = '''
import numpy as np
from pyengine.browser.shared_memory import new_block
from pyengine.parallel.channel import COUNT, GEN, Channel, layout

lay = layout(2, 8, 4)
block = new_block(lay["n_floats"])
size = lay["reduce_size"]
rng = np.random.default_rng(5)
a0, a1 = (rng.standard_normal((3, 8)).astype(np.float32) * np.exp2(rng.integers(-30, 30, (3, 8))).astype(np.float32)
          for _ in range(2))
# worker 1 arrives first: nobody else has, so after its bounded wait it hands the generation back unsummed
out1 = np.full((3, 8), -7, np.float32)
awaited = block.sum(a1, out1, 0, size, 1, 2)
# the main worker arrives last, releases worker 1 and sums both slots in one call
out0 = Channel(block, 0, lay, [4, 4]).all_reduce(a0)
# worker 1 then reads the slots as Channel.all_reduce does after its own wait
got = np.empty_like(a1)
block.read(0, got)
block.read(size, out1)
[type(block).__name__, awaited, block.load(GEN), block.load(COUNT), (out0 == a0 + a1).all().item(),
 (got + out1 == out0).all().item(), (got == a0).all().item()]
'''


@pytest.mark.node
def test_the_pages_one_call_meeting_sums_as_numpy_does(static_ready):  # noqa: F811 (a fixture)
    """web/meeting.js under Pyodide in Node: a worker that arrives first gets the generation back after its
    bounded wait; the last to arrive releases it and gets the slots' sum in worker order, bit for bit numpy's
    float32 sum (values over 60 binary orders of magnitude)."""
    assert in_pyodide(MEETING_CODE, timeout=300) == ["JsSumBlock", 0, 1, 0, True, True, True]
