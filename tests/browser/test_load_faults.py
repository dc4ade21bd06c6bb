"""A load that fails keeps what the user had (pyengine.browser.worker in CPython): whatever the cause found
before the weights are read (the header, the metadata, the tokenizer, the chat template, the tensor table, a
shape, a type, the architecture, the memory), the model loaded before and its conversation stay, and the
next message is answered by it. The header's reading is shown as progress."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import TINY
from gguf_write import gguf_bytes

from browser.test_worker_glue import FakeArrayBuffer, FakeBlob, chat, load_tiny, run
from pyengine.browser import worker
from pyengine.browser.file_source import BrowserFileSource
from pyengine.gguf import open_gguf
from pyengine.gguf.ggml_types import GGML_TYPES
from pyengine.gguf.source import BytesSource, FileSource

MXFP4 = next(t for t in GGML_TYPES.values() if t.name == "MXFP4")


@pytest.fixture
def posted():
    messages: list[dict] = []
    worker.setup(messages.append)
    return messages


def changed(drop: tuple = (), tensors: dict | None = None, **metadata) -> BytesSource:
    """The tiny llama with metadata changed (``key=(type name, value)``, or a value of the key's type),
    tensors dropped, or tensors replaced (``name: (ne, ggml type id, raw bytes)``)."""
    path = TINY["llama"]
    with open_gguf(path) as g:
        kvs = {k: (g.value_types[k], v) for k, v in g.metadata.items()}
        kvs.update({k.replace("__", "."): v if isinstance(v, tuple) else (g.value_types[k.replace("__", ".")], v)
                    for k, v in metadata.items()})
        table = {n: (t.shape, t.type.id, g.tensor_bytes(n).tobytes()) for n, t in g.tensors.items() if n not in drop}
        table.update(tensors or {})
        return BytesSource(gguf_bytes([(k, t, v) for k, (t, v) in kvs.items()],
                                      [(n, *row) for n, row in table.items()]), "changed.gguf")


def tiny_tensor(name: str):
    with open_gguf(TINY["llama"]) as g:
        return g.tensors[name].shape, g.tensor_bytes(name).tobytes()


FFN_UP, FFN_UP_BYTES = tiny_tensor("blk.0.ffn_up.weight")
BAD_LOADS = [
    ("header", lambda: BytesSource(TINY["llama"].read_bytes()[:300], "cut.gguf"), "cut.gguf: byte"),
    ("metadata", lambda: changed(llama__embedding_length=("STRING", "64")), "llama.embedding_length"),
    ("tokenizer", lambda: changed(tokenizer__ggml__model="bogus"), "bogus"),
    ("chat template", lambda: changed(tokenizer__chat_template=("STRING", "{% for %}")),
     "chat template does not parse"),
    ("tensor table", lambda: changed(drop=("output_norm.weight",)), "missing tensor 'output_norm.weight'"),
    ("shape", lambda: changed(tensors={"blk.0.ffn_up.weight": (FFN_UP[::-1], 0, FFN_UP_BYTES)}),
     "tensor 'blk.0.ffn_up.weight' has shape"),
    ("type", lambda: changed(tensors={"blk.0.attn_q.weight": ((64, 64), MXFP4.id,
                                                               bytes(MXFP4.n_bytes(64 * 64)))}), "MXFP4"),
    ("architecture", lambda: changed(general__architecture="phi9"), "phi9"),
]


@pytest.mark.parametrize("cause, source, message", BAD_LOADS, ids=[c for c, _, _ in BAD_LOADS])
def test_a_load_that_fails_keeps_the_model_and_the_chat(posted, cause, source, message):
    from browser.reference import cpython_reply
    load_tiny(posted)
    first, _ = chat(posted, "hello", max_tokens=3)
    before = list(worker._session.chat.messages)
    start = len(posted)
    run({"type": "load", "files": [source()]})
    kinds = [m["type"] for m in posted[start:]]
    # no "unloaded": nothing changed (an unsupported architecture still shows its file in the Inspector)
    assert kinds[-1] == "error" and set(kinds[:-1]) <= {"progress", "inspect"}, kinds
    assert message in posted[-1]["message"] and "internal error" not in posted[-1]["message"], posted[-1]
    assert worker._session.chat.messages == before
    again, _ = chat(posted, "again", max_tokens=3)                                 # the old model answers
    assert again == cpython_reply(TINY["llama"], ["hello", first, "again"], max_tokens=3)


@pytest.mark.parametrize("name, shown", [
    ("x" * 200_000_000, "x" * 199 + "…"),                       # 200 MB: cut to 200 characters
    (("ARRAY[STRING]", ["a" * 1000] * 1000), "changed.gguf"),  # not a string: the file's name instead
])
def test_the_models_name_from_the_file_is_cut_or_ignored(posted, name, shown):
    """general.name goes into every chat record and the saved model's meta.json: only a string, cut."""
    run({"type": "load", "files": [changed(general__name=name if isinstance(name, tuple) else ("STRING", name))]})
    assert posted[-1]["type"] == "model", posted[-1]
    assert posted[-1]["card"]["name"] == shown


def test_an_unknown_architecture_of_any_size_is_named_in_a_short_error(posted):
    run({"type": "load", "files": [changed(general__architecture="phi" * 10_000_000)]})
    message = posted[-1]["message"]
    assert posted[-1]["type"] == "error" and "unsupported architecture 'phiphi" in message and len(message) < 1000


def test_the_header_is_shown_as_it_is_read(posted):
    load_tiny(posted)
    header = [m for m in posted if m.get("stage") == "reading header"]
    with open_gguf(TINY["llama"]) as g:
        assert header and header[-1]["bytes"] == header[-1]["total_bytes"]
        assert g.data_offset - g.alignment < header[-1]["bytes"] <= g.data_offset       # its end, before padding
    assert posted.index(header[-1]) < next(i for i, m in enumerate(posted) if m.get("stage") == "reading tensors")


def too_big_load(posted, path, monkeypatch, weights: str) -> str:
    """In the browser (sys.platform as Pyodide's), the tiny llama loaded with a chat, then a load of
    ``path`` in ``weights`` that must fail before it reads a weight: its message; the chat is kept."""
    from pyengine.weights import budget
    load_tiny(posted)
    chat(posted, "hello", max_tokens=3)
    before = list(worker._session.chat.messages)
    monkeypatch.setattr(budget.sys, "platform", "emscripten")
    start = len(posted)
    run({"type": "load", "files": [FileSource(path)], "weights": weights})
    assert [m["type"] for m in posted[start:]][-1] == "error" and "unloaded" not in [m["type"] for m in posted]
    assert worker._session.chat.messages == before
    return posted[-1]["message"]


# the smallest form each runtime has, and what it needs a worker for the 3B and 8B below
SMALLEST = {"kernel": ("the file's own blocks", "1.78", "4.03"),
            "numpy": ("the compact form (Memory: numpy, least memory, slowest)", "1.97", "4.47")}


def test_a_form_too_big_for_the_browser_says_what_fits_and_keeps_the_chat(posted, tmp_path, monkeypatch, products):
    """A model of Llama-3.2-3B's shapes in Q4_0 (1.68 GiB of tensors; a sparse file, only its header
    written) asked in float32: more than one worker holds; the load says so, and what would fit."""
    message = too_big_load(posted, sparse_model(tmp_path / "3b.gguf"), monkeypatch, "f32")
    form, gib, _ = SMALLEST[products]
    assert message == (
        "this model (1.68 GiB of tensors) needs 12.07 GiB in each of 1 worker(s) in this form, largest array "
        "1.47 GiB; a browser worker holds at most 3.75 GiB (a wasm32 memory ends at 4 GiB): the smallest "
        f"form, {form}, would need {gib} GiB a worker")


def test_auto_picks_forms_that_fit_a_worker(tmp_path, monkeypatch, products):
    """The 3B in the default form fits one worker (the smallest form needs 1.78 GiB, 1.97 in numpy's: the
    heap may pass 2 GiB). The 8B (3.93 GiB of tensors) fits in no form in one worker, and in 2: the file's
    own blocks, half each, or numpy's forms, which fill each one's heap (mixed forms) but stay within it."""
    from pyengine.browser.settings import memory_names
    from pyengine.errors import PyEngineError
    from pyengine.model.config import ModelConfig
    from pyengine.parallel.driver import plan_load
    from pyengine.weights import budget
    monkeypatch.setattr(budget.sys, "platform", "emscripten")
    form, _, gib = SMALLEST[products]
    with open_gguf(sparse_model(tmp_path / "3b.gguf")) as g:
        one = plan_load(g, ModelConfig.from_metadata(g.metadata, g.tensors), "auto", 1)
    assert one.nbytes + budget.RUNTIME_BYTES <= budget.HEAP_MAX
    assert one.weights == ("blocks" if products == "kernel" else "mixed")
    with open_gguf(sparse_model(tmp_path / "8b.gguf", n_embd=4096, n_ff=14336, n_layer=32, n_head=32)) as g:
        config = ModelConfig.from_metadata(g.metadata, g.tensors)
        with pytest.raises(PyEngineError, match=re.escape(f"even the smallest form, {form}, needs {gib} GiB")):
            plan_load(g, config, "auto", 1, names=memory_names())
        two = plan_load(g, config, "auto", 2)
    assert len(two.shards) == 2
    if products == "kernel":
        assert two.weights == "blocks" and 0.45 * 3.93 * 2**30 < two.nbytes < 0.55 * 3.93 * 2**30
    else:
        assert two.weights == "mixed"
        assert budget.HEAP_MAX - budget.RUNTIME_BYTES - 2**27 < two.nbytes <= budget.HEAP_MAX - budget.RUNTIME_BYTES


def test_a_model_too_big_for_any_form_says_so_and_keeps_the_chat(posted, tmp_path, monkeypatch, products):
    """Llama-3.1-8B's shapes in Q4_0 (3.93 GiB of tensors): even the smallest form passes one worker's heap."""
    path = sparse_model(tmp_path / "8b.gguf", n_embd=4096, n_ff=14336, n_layer=32, n_head=32)
    message = too_big_load(posted, path, monkeypatch, "auto")
    form, _, gib = SMALLEST[products]
    assert message == (
        f"this model (3.93 GiB of tensors) needs {gib} GiB in each of 1 worker(s) in this form, largest array "
        f"{'0.28' if products == 'kernel' else '0.31'} GiB; a browser worker holds at most 3.75 GiB (a wasm32 "
        f"memory ends at 4 GiB): even the smallest form, {form}, needs {gib} GiB a worker: more workers, or a "
        "smaller quantization of the model")


def sparse_model(path, n_embd: int = 3072, n_ff: int = 8192, n_layer: int = 28, n_head: int = 24, n_kv: int = 8):
    """Llama shapes (by default Llama-3.2-3B's: 3072 wide, 28 layers, 24/8 heads, 8192 FFN) with 128,256 tokens
    in Q4_0, the tiny llama's tokenizer padded to the vocabulary; the file is sparse past its header."""
    from gguf_write import header, kv, pad, tensor_info
    n_vocab = 128_256
    with open_gguf(TINY["llama"]) as g:
        tokens = list(g.metadata["tokenizer.ggml.tokens"])
        scores = list(g.metadata["tokenizer.ggml.scores"])
        types = [int(t) for t in g.metadata["tokenizer.ggml.token_type"]]
    pad_n = n_vocab - len(tokens)
    kvs = [kv("general.architecture", "STRING", "llama"), kv("llama.context_length", "UINT32", 4096),
           kv("llama.embedding_length", "UINT32", n_embd), kv("llama.block_count", "UINT32", n_layer),
           kv("llama.feed_forward_length", "UINT32", n_ff), kv("llama.attention.head_count", "UINT32", n_head),
           kv("llama.attention.head_count_kv", "UINT32", n_kv), kv("llama.rope.dimension_count", "UINT32", 128),
           kv("llama.attention.layer_norm_rms_epsilon", "FLOAT32", 1e-5),
           kv("tokenizer.ggml.model", "STRING", "llama"),
           kv("tokenizer.ggml.tokens", "ARRAY[STRING]", tokens + [f"<unused{i}>" for i in range(pad_n)]),
           kv("tokenizer.ggml.scores", "ARRAY[FLOAT32]", scores + [0.0] * pad_n),
           kv("tokenizer.ggml.token_type", "ARRAY[INT32]", types + [5] * pad_n)]
    q4_0 = GGML_TYPES[2]
    shapes = [("token_embd.weight", (n_embd, n_vocab), 2), ("output_norm.weight", (n_embd,), 0)]
    for i in range(n_layer):
        shapes += [(f"blk.{i}.{name}", ne, tid) for name, ne, tid in (
            ("attn_norm.weight", (n_embd,), 0), ("ffn_norm.weight", (n_embd,), 0),
            ("attn_q.weight", (n_embd, n_embd), 2), ("attn_k.weight", (n_embd, n_embd // n_head * n_kv), 2),
            ("attn_v.weight", (n_embd, n_embd // n_head * n_kv), 2), ("attn_output.weight", (n_embd, n_embd), 2),
            ("ffn_gate.weight", (n_embd, n_ff), 2), ("ffn_up.weight", (n_embd, n_ff), 2),
            ("ffn_down.weight", (n_ff, n_embd), 2))]
    infos, at = [], 0
    for name, ne, tid in shapes:
        infos.append(tensor_info(name, ne, tid, at))
        n = int(np.prod(ne))
        at = pad(at + (q4_0.n_bytes(n) if tid == 2 else 4 * n), 32)
    head = header(len(infos), len(kvs)) + b"".join(kvs) + b"".join(infos)
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(pad(len(head), 32) + at)
    return path


class FailingReader:
    """FileReaderSync over a file whose reads starting at byte ``after`` or later fail, as Chromium's
    NotReadableError when the file changed on disk after it was chosen."""

    def __init__(self, data: bytes, after: int):
        self.data, self.after = data, after

    def readAsArrayBuffer(self, blob):  # noqa: N802 (the DOM's name)
        if blob.start >= self.after:
            raise OSError("NotReadableError: The requested file could not be read, typically due to permission "
                          "problems that have occurred after a reference to a file was acquired.")
        return FakeArrayBuffer(blob.data)


class SlicedBlob(FakeBlob):
    def __init__(self, data: bytes, name: str, start: int = 0):
        super().__init__(data, name)
        self.start = start

    def slice(self, a: int, b: int) -> SlicedBlob:
        return SlicedBlob(self.data[a:b], self.name, self.start + a)


def test_a_file_that_becomes_unreadable_mid_load_is_a_clear_error(posted):
    """The tensors' reads fail half-way: the load says that it failed while the weights were read, which
    file and byte, that the file changed, and that the model before was let go; no internal error, and the
    worker holds no half-built model. The model before, loaded again, answers the conversation the page kept."""
    from browser.reference import cpython_reply
    load_tiny(posted)
    first, _ = chat(posted, "hello", max_tokens=3)
    data = TINY["qwen2"].read_bytes()
    with open_gguf(TINY["qwen2"]) as g:
        after = g.data_offset + sum(t.n_bytes for t in g.tensors.values()) // 2
    start = len(posted)
    run({"type": "load", "files": [BrowserFileSource(SlicedBlob(data, "qwen2.gguf"), FailingReader(data, after))]})
    kinds = [m["type"] for m in posted[start:]]
    assert "unloaded" in kinds and kinds[-1] == "error", kinds
    assert re.fullmatch(r"the load failed while the weights were read: qwen2\.gguf: byte \d+: the file can no "
                        r"longer be read \(NotReadableError: The requested file could not be read.*\): it was "
                        r"changed, moved or deleted since it was chosen; choose it again; the model loaded before "
                        r"was let go to make room: the conversation is kept, load it again",
                        posted[-1]["message"]), posted[-1]["message"]
    run({"type": "chat", "text": "hi", "system": "", "settings": {}})
    assert posted[-1]["message"] == "no model is loaded: drop a .gguf file first"
    load_tiny(posted)                                        # the page's "Load ... again", then its conversation
    start = len(posted)
    talk = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": first},
            {"role": "user", "content": "again"}]
    run({"type": "chat", "messages": talk, "system": "", "settings": {"temperature": 0, "max_tokens": 3}})
    again = "".join(m["text"] for m in posted[start:] if m["type"] == "piece")
    assert posted[-1]["type"] == "done" and again == cpython_reply(TINY["llama"], ["hello", first, "again"],
                                                                   max_tokens=3)


def test_a_failure_before_any_model_says_only_that_the_weights_failed(posted):
    data = TINY["qwen2"].read_bytes()
    with open_gguf(TINY["qwen2"]) as g:
        after = g.data_offset + 1
    run({"type": "load", "files": [BrowserFileSource(SlicedBlob(data, "qwen2.gguf"), FailingReader(data, after))]})
    assert [m["type"] for m in posted][-1] == "error" and "unloaded" not in [m["type"] for m in posted]
    assert posted[-1]["message"].startswith("the load failed while the weights were read: qwen2.gguf: byte ")
    assert posted[-1]["message"].endswith("; choose it again"), posted[-1]["message"]
