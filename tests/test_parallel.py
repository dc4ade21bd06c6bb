"""pyengine.parallel in CPython: the row split, slices read from the file, and the shared-buffer protocol
with the shards served in-process on numpy arrays (the browser runs the same code on a SharedArrayBuffer)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY

from pyengine import generation
from pyengine.browser import worker
from pyengine.errors import PyEngineError
from pyengine.gguf import open_gguf
from pyengine.gguf.source import FileSource
from pyengine.model import load_model
from pyengine.parallel import channel, plan, server, sharded
from pyengine.weights import budget
from pyengine.weights.forms import F32, RowSplit
from pyengine.weights.lanes import pack_block


def test_row_ranges_cover_the_rows_in_order():
    assert plan.row_ranges(262144, 2) == [(0, 131072), (131072, 262144)]
    assert plan.row_ranges(10, 3) == [(0, 4), (4, 7), (7, 10)]
    assert plan.row_ranges(49152, 4) == [(0, 12288), (12288, 24576), (24576, 36864), (36864, 49152)]
    assert plan.row_ranges(5, 1) == [(0, 5)]
    for bad in (0, 10, 4):
        with pytest.raises(PyEngineError, match="cannot split"):
            plan.row_ranges(3 if bad == 4 else 100, bad)


FORMS = list(budget.WEIGHT_FORMS)


@pytest.mark.parametrize("name", ["gemma3", "llama-q4km"])
@pytest.mark.parametrize("weights", FORMS)
def test_a_slice_read_from_the_file_equals_those_rows_of_the_model(name, weights):
    with open_gguf(TINY[name]) as g:
        model = load_model(g, weights=weights)
        full = model.output
        spec = plan.plan(model, g.tensors, 2)
        vocab = spec["matrices"][0]
        if isinstance(full, RowSplit):                                    # "mixed" past its budget
            split_rows_equal_the_model(g, full, vocab)
            return
        packed = vocab["form"]["form"] == "PACKED"
        lo, hi = (36, 249) if packed else (37, 250)                       # packed: rows 3k to 3k'
        part = server.load_rows(g, vocab["names"], lo, hi, vocab["form"])
        wqkv = spec["matrices"][1]                                        # attn_q, attn_k, attn_v stacked
        n_q = g.tensors[wqkv["names"][0]].shape[1]
        a, b = n_q - n_q % 3 - 3, n_q + 5                                 # rows from two of the tensors
        stacked = server.load_rows(g, wqkv["names"], a, b, wqkv["form"])
        lin = model.layers[0].wqkv
        assert np.array_equal(held(stacked), held(lin.take_rows(a, b)))
        x = np.random.default_rng(2).standard_normal((3, lin.shape[1])).astype(np.float32)
        assert np.array_equal(stacked(x), lin(x)[:, a:b])
    assert vocab["names"] == ["token_embd.weight" if name == "gemma3" else "output.weight"]
    rows = full.take_rows(lo, hi)
    assert type(part) is type(full) and part.shape == (hi - lo, full.shape[1])
    assert np.array_equal(held(part), held(rows))
    if isinstance(full, F32):
        assert vocab["form"] == {"form": "F32", "act": None}
    else:
        blocks = (pack_block(full.shape[1]),) if packed else (128, full.shape[1])
        assert np.array_equal(part.scale[:hi - lo], rows.scale[:hi - lo]) and full.block in blocks
    x = np.random.default_rng(1).standard_normal((2, full.shape[1])).astype(np.float32)
    assert np.array_equal(part(x), full(x)[:, lo:hi])    # column scale and all
    ids = [lo, lo + 1, lo + 2, hi - 1]
    assert np.array_equal(part.rows([i - lo for i in ids]), full.rows(ids))


def held(w) -> np.ndarray:
    """The array of a weight form's codes or values (int8 ``q``, else ``w``)."""
    return w.q if hasattr(w, "q") else w.w


def split_rows_equal_the_model(g, full: RowSplit, vocab: dict) -> None:
    """Slices of a RowSplit (packed rows, then int8 rows) read from the file, across its seam."""
    seam = int(full.starts[1])
    assert [tuple(p[:2]) for p in vocab["form"]["parts"]] == [(0, seam), (seam, full.shape[0])]
    assert full.align == 3 and all(lo % 3 == 0 for lo, _ in vocab["ranges"])
    x = np.random.default_rng(1).standard_normal((2, full.shape[1])).astype(np.float32)
    for lo, hi in [(0, seam), (seam - 9, seam + 7), (seam, full.shape[0])]:
        part = server.load_rows(g, vocab["names"], lo, hi, vocab["form"])
        kept = full.take_rows(lo, hi)
        assert part.shape == kept.shape == (hi - lo, full.shape[1])
        assert np.array_equal(part(x), full(x)[:, lo:hi]) and np.array_equal(kept(x), full(x)[:, lo:hi])
        ids = [lo, hi - 1, (lo + hi) // 2]
        assert np.array_equal(part.rows([i - lo for i in ids]), full.rows(ids))


def test_mixed_vocabulary_split_over_workers_across_its_seam(monkeypatch):
    with open_gguf(TINY["llama-q4km"]) as g:
        shapes = [(n, tuple(t.shape)) for n, t in g.tensors.items()]
        file_bytes = sum(t.n_bytes for t in g.tensors.values())
        half = (budget.form_nbytes(shapes, "mixed", 0) + budget.form_nbytes(shapes, "mixed", 999)) / 2
        monkeypatch.setattr(budget, "MIXED_FILE_RATIO", half / file_bytes)   # about half the rows packed
        model = load_model(g, weights="mixed")
        assert isinstance(model.output, RowSplit)
        split_rows_equal_the_model(g, model.output, plan.plan(model, g.tensors, 3)["matrices"][0])


def test_plan_splits_the_output_or_says_it_cannot():
    with open_gguf(TINY["llama-q4km"]) as g:
        model = load_model(g, weights="f32")
        spec = plan.plan(model, g.tensors, 2)
        f32 = {"form": "F32", "act": None}
        assert spec["matrices"][0] == {"names": ["output.weight"], "ranges": [(0, 164), (164, 328)], "form": f32,
                                       "cap": plan.R_MAX, "n_in": 160}
        assert len(spec["matrices"]) == 1 + 4 * 2                   # 2 layers of 4 matrices
        assert spec["matrices"][3]["names"] == ["blk.0.ffn_gate.weight", "blk.0.ffn_up.weight"]
        n_ff = g.tensors["blk.0.ffn_gate.weight"].shape[1]
        assert spec["matrices"][3]["ranges"] == [(0, n_ff), (n_ff, 2 * n_ff)]
        assert spec["x_size"] == plan.LAYER_ROWS * n_ff                # ffn_down's input is the widest
        assert spec["out_size"] == max(plan.R_MAX * 328, plan.LAYER_ROWS * 2 * n_ff)
        assert len(plan.plan(model, g.tensors, 2, layers=False)["matrices"]) == 1
        model.layers[1].wo = NotAForm(model.layers[1].wo)             # not one of the forms: that one stays whole
        assert plan.plan(model, g.tensors, 2)["matrices"][6] is None
        model.output = NotAForm(model.output)
        assert plan.plan(model, g.tensors, 2) is None


class NotAForm:
    """A weight that is none of the forms (its rows cannot be built elsewhere)."""

    def __init__(self, w):
        self.shape, self.align = w.shape, 1


class InProcess:
    """Shards served on a NumpyBlock whenever the main side waits: the protocol without threads."""

    def __init__(self, path, model, n_workers: int, fail: int | None = None, layers: bool = True):
        with open_gguf(path) as g:
            self.spec = plan.plan(model, g.tensors, n_workers, layers)
        self.block = channel.NumpyBlock(self.spec["x_size"] + self.spec["out_size"], on_wait=self.serve)
        self.servers = [server.load_shard([FileSource(path)], self.spec, i, self.block) for i in range(n_workers - 1)]
        if fail is not None:
            self.servers[fail].locals[0] = None   # its next command raises
        self.alive = [True] * len(self.servers)
        self.commands = 0

    def serve(self) -> None:
        self.commands += 1
        for i, s in enumerate(self.servers):
            if self.alive[i]:
                self.alive[i] = s.serve_one()


@pytest.mark.parametrize("n_workers", [2, 3, 4])
def test_sharded_logits_and_rows_equal_the_whole_matrix(n_workers):
    with open_gguf(TINY["gemma3"]) as g:          # tied: token_embd is the output too
        model = load_model(g)
    full, wo = model.output, model.layers[2].wo
    shards = InProcess(TINY["gemma3"], model, n_workers)
    split = sharded.install(model, shards.spec, shards.block)
    assert len(split) == 1 + 4 * len(model.layers)                   # every matrix split
    vocab = split[0]
    assert model.output is vocab and model.token_embd is vocab and model.layers[2].wo is split[10]
    lo, hi = shards.spec["matrices"][0]["ranges"][0]
    assert vocab.local.w.shape == (hi - lo, 48) and vocab.nbytes == full.w[lo:hi].nbytes
    x = np.random.default_rng(0).standard_normal((19, 48)).astype(np.float32)   # (R, n_embd): 3 commands
    for xs in (x[0], x[:1], x[:3], x):
        assert np.array_equal(vocab(xs), full(xs))
    assert shards.commands == 1 + 1 + 1 + 3
    ids = [0, 327, 5, 200, lo, hi - 1, 164, 300]
    assert np.array_equal(vocab.rows(ids), full.rows(ids))
    assert np.array_equal(vocab.rows([1, 2]), full.rows([1, 2]))     # all ours: no command
    assert shards.commands == 7
    h = np.random.default_rng(1).standard_normal((5, wo.shape[1])).astype(np.float32)
    assert np.array_equal(model.layers[2].wo(h), wo(h)) and shards.commands == 8   # a layer's: one command
    assert channel.ping(shards.block, n_workers - 1, 3) >= 0 and shards.commands == 11
    channel.send_exit(shards.block)
    shards.serve()
    assert shards.alive == [False] * (n_workers - 1)                  # EXIT ends every loop


def test_a_failed_or_silent_shard_is_an_error(monkeypatch, capsys):
    with open_gguf(TINY["gemma3"]) as g:
        model = load_model(g)
    shards = InProcess(TINY["gemma3"], model, 3, fail=1)
    vocab = sharded.install(model, shards.spec, shards.block)[0]
    with pytest.raises(PyEngineError, match="worker 3 failed"):
        vocab(np.ones(48, np.float32))
    assert "Traceback" in capsys.readouterr().err
    shards.block.on_wait = None                                       # nobody answers
    monkeypatch.setattr(channel, "TIMEOUT_S", 0.0)
    with pytest.raises(PyEngineError, match="worker 2 did not answer"):
        vocab(np.ones(48, np.float32))


class FakePool:
    """worker.js's pool as pyengine.browser.worker sees it, with the shards in this process."""

    def __init__(self, n_workers: int, fail: str | None = None, split: str = "vocab"):
        self.n, self.fail, self.servers, self.dropped, self.split = n_workers, fail, [], [], split

    def size(self) -> int:
        return self.n - 1

    async def load(self, files, spec, block):
        results = []
        for i in range(self.n - 1):
            if self.fail and i == 0:
                results.append({"ok": False, "message": self.fail})
                continue
            self.servers.append(server.load_shard(files, spec, i, block))
            results.append({"ok": True, "bytes": 0, "heap": 1000 + i})
        block.on_wait = lambda: [s.serve_one() for s in self.servers]
        return results

    def drop(self, failed) -> None:
        self.dropped += list(failed)

    def resize(self) -> None:
        self.servers = []


def run(coro) -> None:
    """Drive a coroutine whose awaits never suspend (no event loop needed)."""
    try:
        while True:
            coro.send(None)
    except StopIteration:
        pass


def worker_reply(pool: FakePool | None, path, text: str, weights: str = "auto") -> tuple[dict, str]:
    posted: list[dict] = []
    worker.setup(posted.append, pool=pool, heap=lambda: 12345)
    run(worker.handle({"type": "load", "files": [FileSource(path)], "weights": weights}))
    model_msg = next(m for m in posted if m["type"] in ("model", "error"))
    assert model_msg["type"] == "model", model_msg
    run(worker.handle({"type": "chat", "text": text, "system": "", "settings": {"temperature": 0, "max_tokens": 8}}))
    return model_msg["workers"], "".join(m["text"] for m in posted if m["type"] == "piece")


@pytest.mark.parametrize("name", ["gemma3", "llama-q4km"])
@pytest.mark.parametrize("split", ["vocab", "all"])
def test_the_worker_splits_the_model_and_replies_as_one_worker(name, split):
    one, text = worker_reply(None, TINY[name], "hello")
    assert one == {"count": 1, "heap": [12345], "note": ""}
    pool = FakePool(2, split=split)
    two, text2 = worker_reply(pool, TINY[name], "hello")
    assert two.pop("sync_us") > 0
    assert two == {"count": 2, "heap": [12345, 1000], "note": "", "split": split}
    model = worker._session.chat.engine.model
    assert isinstance(model.output, sharded.ShardedLinear)
    assert isinstance(model.layers[0].w_down, sharded.ShardedLinear) == (split == "all")
    assert text2 == text and len(text) > 0


def test_a_shard_that_fails_to_load_leaves_one_worker_with_a_note():
    one, text = worker_reply(None, TINY["gemma3"], "hello")
    pool = FakePool(3, fail="Python did not start")
    info, text2 = worker_reply(pool, TINY["gemma3"], "hello")
    assert info["count"] == 1 and info["note"] == "running in 1 worker (worker 2 failed: Python did not start)"
    assert pool.dropped == [0]
    assert isinstance(worker._session.chat.engine.model.output, F32)
    assert text2 == text
    assert [s.seq for s in pool.servers] == [0]          # told to EXIT: served when it next looks
    assert pool.servers[0].serve_one() is False


def test_engine_unchanged_by_sharding_in_cpython_generate():
    """The CPython engine's greedy text with every matrix split over 2 in-process shards."""
    engine = generation.load(TINY["llama-q4km"])
    ids = engine.tokenizer.encode("hello world")
    ref = generation.generate(engine.model, engine.tokenizer, ids, generation.SamplerParams(temperature=0), 10)
    ref_text = "".join(ref)
    shards = InProcess(TINY["llama-q4km"], engine.model, 2)
    sharded.install(engine.model, shards.spec, shards.block)
    got = generation.generate(engine.model, engine.tokenizer, ids, generation.SamplerParams(temperature=0), 10)
    assert "".join(got) == ref_text and shards.commands >= 10 * (1 + 4 * len(engine.model.layers))
