"""A helper worker's side of a split: its shard of the model, read from the file, run in step with the others.

A helper loads only its shard (``pyengine.model.load.load_model(placement=...)``, in
the forms the main worker chose), then serves commands until EXIT: each FORWARD
runs the same forward pass as every other worker, on its own KV cache (one per
cache id the main worker names, set back to the command's position first, so a
turn that reuses a prefix, a rejected draft or an edit needs no other message).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from typing import Any

from pyengine.errors import PyEngineError
from pyengine.model.load import load_model
from pyengine.model.shard import Placement, Shard
from pyengine.model.trace import Recorder, run
from pyengine.parallel.channel import (
    CACHE,
    CMD,
    EXIT,
    FORWARD,
    LOGITS,
    LOGITS_MODES,
    N_CTX,
    N_TOKENS,
    PING,
    POS,
    TOKENS,
    TRACE,
    AbortError,
    Channel,
)


def plan_message(shards: list[Shard], forms: dict, weights: str, lay: dict) -> dict:
    """What every helper needs to load and serve its shard, as plain data (it crosses to a JS worker)."""
    return {"shards": [s.as_dict() for s in shards], "weights": weights, "layout": lay,
            "forms": {".".join(map(str, k)): f.name for k, f in forms.items()}}


def read_plan(msg: dict, index: int) -> tuple[Shard, dict, list[int]]:
    """A helper's shard, the forms ``{key: Form}`` and every shard's vocabulary width, from ``plan_message``."""
    from pyengine.weights.forms import Form
    s = msg["shards"][index]
    shard = Shard.from_dict(s)
    forms = {tuple(int(p) if p.isdigit() else p for p in k.split(".")): Form[f] for k, f in msg["forms"].items()}
    widths = [b - a for a, b in (tuple(x["vocab"]) for x in msg["shards"])]
    return shard, forms, widths


def no_heap() -> int:
    """The heap clock outside a browser: 0, unknown."""
    return 0


class Helper:
    """Helper ``index``'s shard of the model and its end of the channel, serving commands; ``heap()``: its
    wasm heap in bytes, told to the main worker after each command."""

    def __init__(self, model, chan: Channel, heap: Callable[[], int] = no_heap):
        self.model, self.chan, self.heap = model, chan, heap
        self.caches: dict[int, Any] = {}

    def serve(self) -> None:
        """Run commands until EXIT (blocks this worker). A failed command is reported (FAIL) and served past."""
        last = 0
        while True:
            last = self.chan.next_command(last)
            cmd = self.chan.block.load(CMD)
            if cmd == EXIT:
                self.chan.finish(False)
                return
            failed = False
            try:
                if cmd == FORWARD:
                    self.forward()
                elif cmd == PING:
                    self.chan.barrier()
            except AbortError:
                pass
            except Exception:  # noqa: BLE001 (the main worker reports it; the traceback goes to the console)
                traceback.print_exc()
                failed = True
            self.chan.finish(failed, self.heap())

    def forward(self) -> None:
        b = self.chan.block
        n, pos, cache_id, n_ctx = b.load(N_TOKENS), b.load(POS), b.load(CACHE), b.load(N_CTX)
        cache = self.caches.get(cache_id)
        if cache is None:
            self.caches = {cache_id: self.model.new_cache(n_ctx)}      # one conversation at a time
            cache = self.caches[cache_id]
        if pos > cache.n:
            raise PyEngineError(f"helper {self.chan.index + 1}: asked for position {pos}, holds {cache.n}")
        tokens, trace = b.read_ints(TOKENS, n), b.load(TRACE)
        if trace:                                                       # a traced step: the cache put back after
            run(self.model, cache, tokens, pos, Recorder(self.model, trace - 1))
            return
        cache.truncate(pos)
        self.model.forward(tokens, cache, LOGITS_MODES[b.load(LOGITS)])


def load_helper(gguf, plan: dict, index: int, block: Any, heap: Callable[[], int] = no_heap) -> Helper:
    """Helper ``index``'s server: its shard of ``gguf`` (an opened GGUFFile) in the plan's forms (``heap``:
    as :class:`Helper` has it). Raises PyEngineError (GGUFError, ModelError) when its shard cannot be read."""
    shard, forms, widths = read_plan(plan, index)
    chan = Channel(block, index, plan["layout"], widths)

    def progress(done: int, total: int, done_bytes: int, total_bytes: int) -> None:
        chan.report_load(done, done_bytes)                  # the main worker shows the sum
    model = load_model(gguf, progress, plan["weights"], placement=Placement(shard, forms, chan))
    return Helper(model, chan, heap)
