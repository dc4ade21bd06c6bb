"""A helper worker killed mid-reply (pyengine.browser.worker over helpers as threads, tests/parallel/test_parallel.py's
FakePool): its serving ends abruptly, as when its Python dies, and web/shard_worker.js marks it dead in the
shared buffer (here: channel.mark_dead, what that JavaScript does). The reply ends at once with an error
that says what to do, the conversation is as before the failed message, the split model is let go with its
helper, and the next load runs."""

from __future__ import annotations

import time

from conftest import TINY

from parallel.test_parallel import FakePool, run, worker_reply
from pyengine.browser import worker
from pyengine.gguf.source import FileSource
from pyengine.parallel import channel, server


class Killed(BaseException):
    """What ends a helper's Python for good (no ``except Exception`` in its loop catches it)."""


def test_a_helper_killed_mid_reply_ends_the_reply_at_once_and_the_next_load_works(monkeypatch):
    _, want = worker_reply(None, TINY["qwen2"], "hello")
    forwards, real_forward, real_serve = [], server.Helper.forward, server.Helper.serve

    def forward(self):
        forwards.append(1)
        if len(forwards) == 3:                                      # the prompt, one token, then it dies
            raise Killed
        return real_forward(self)

    def serve(self):                                                # shard_worker.js's catch, in Python
        try:
            real_serve(self)
        except Killed:
            channel.mark_dead(self.chan.block, self.chan.index)
    monkeypatch.setattr(server.Helper, "forward", forward)
    monkeypatch.setattr(server.Helper, "serve", serve)
    monkeypatch.setattr(channel, "TIMEOUT_S", 600.0)                 # so only the mark can end the wait quickly

    posted: list[dict] = []
    pool = FakePool(2)
    worker.setup(posted.append, pool=pool, heap=lambda: 12345)
    run(worker.handle({"type": "load", "files": [FileSource(TINY["qwen2"])]}))
    assert posted[-1]["type"] == "model" and posted[-1]["workers"]["count"] == 2
    start, t0 = len(posted), time.monotonic()
    run(worker.handle({"type": "chat", "text": "hello", "system": "", "settings": {"temperature": 0, "max_tokens": 8}}))
    assert time.monotonic() - t0 < 10
    kinds = [m["type"] for m in posted[start:]]
    assert kinds[-1] == "error" and "done" not in kinds and kinds.count("piece") >= 1, kinds   # mid-reply
    assert posted[-1]["message"] == \
        "worker 2 stopped (see the browser console): the model was let go; load it again"
    assert "unloaded" in kinds and pool.dropped == [0] and worker._session.chat is None

    monkeypatch.setattr(server.Helper, "forward", real_forward)
    _, again = worker_reply(FakePool(2), TINY["qwen2"], "hello")    # a new load, new helpers
    assert again == want
    worker._session.model.close()
