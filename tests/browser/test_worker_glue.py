"""pyengine.browser.worker in CPython: the browser File source over a fake File, the settings, and the
commands' error handling (every failure is an "error" message; nothing escapes handle())."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TINY

from pyengine.browser import page, worker
from pyengine.browser import settings as page_settings
from pyengine.browser.file_source import BrowserFileSource
from pyengine.errors import PyEngineError
from pyengine.gguf import open_gguf
from pyengine.gguf.source import BytesSource
from pyengine.model.config import ARCHITECTURES


class FakeBlob:
    """The part of the browser's File/Blob that BrowserFileSource uses."""

    def __init__(self, data: bytes, name: str = "blob"):
        self.data, self.name, self.size = data, name, len(data)
        self.slices: list[tuple[int, int]] = []

    def slice(self, a: int, b: int) -> FakeBlob:
        self.slices.append((a, b))
        return FakeBlob(self.data[a:b], self.name)


class FakeArrayBuffer:
    def __init__(self, data: bytes):
        self.data = data

    def to_bytes(self) -> bytes:
        return self.data


class FakeFileReaderSync:
    def readAsArrayBuffer(self, blob: FakeBlob) -> FakeArrayBuffer:  # noqa: N802 (the DOM's name)
        return FakeArrayBuffer(blob.data)


def browser_source(path) -> BrowserFileSource:
    return BrowserFileSource(FakeBlob(path.read_bytes(), path.name), reader=FakeFileReaderSync())


def test_browser_file_source_reads_slices_and_counts():
    blob = FakeBlob(bytes(range(100)), "m.gguf")
    src = BrowserFileSource(blob, reader=FakeFileReaderSync())
    assert (src.name, src.size) == ("m.gguf", 100)
    assert src.read(10, 5) == bytes([10, 11, 12, 13, 14])
    assert src.read(95, 50) == bytes([95, 96, 97, 98, 99])   # short only at the end
    assert src.read(100, 8) == b"" and src.read(500, 8) == b""
    assert blob.slices == [(10, 15), (95, 100)]                # never a slice past the end, none for empty reads
    assert (src.reads, src.bytes_read) == (4, 10)
    with pytest.raises(ValueError):
        src.read(-1, 4)


def test_gguf_through_the_browser_source_equals_the_file():
    path = TINY["llama-q4km"]
    src = browser_source(path)
    with open_gguf(path) as want:
        got = open_gguf(src)
        np.testing.assert_equal(got.metadata, want.metadata)  # arrays of numbers may be numpy arrays
        assert list(got.tensors) == list(want.tensors)
        name = next(iter(want.tensors))
        assert (got.tensor(name) == want.tensor(name)).all()
    assert src.reads <= 3  # the header in one large read, then the tensor


def test_settings_become_sampler_params():
    params, max_tokens = page_settings.sampler_params({"temperature": 0, "top_k": 5.0, "top_p": 0.5,
                                                "repeat_penalty": 1.1, "seed": 7, "max_tokens": 12})
    assert (params.temperature, params.top_k, params.top_p, params.repeat_penalty, params.seed) == (0.0, 5, 0.5, 1.1, 7)
    assert params.min_p == 0.05 and max_tokens == 12              # a field not sent takes its default
    assert page_settings.sampler_params({})[1] == page_settings.MAX_TOKENS
    assert page_settings.sampler_params({"seed": None})[0].seed is None  # a blank seed: a random one


def test_setting_rules_name_the_page_labels_and_the_model_limits():
    rules = {r["name"]: r for r in page_settings.setting_rules(n_vocab=49152, n_ctx=8192)}
    assert list(rules) == ["temperature", "top_k", "top_p", "min_p", "repeat_penalty", "max_tokens", "seed"]
    top_k = rules["top_k"]
    assert f"{top_k['label']} must be {top_k['rule']}" == "Top-k must be a whole number from 0 to 49152"
    assert rules["max_tokens"]["rule"] == "a whole number from 1 to 8192"
    assert rules["top_p"]["rule"] == "a number above 0 and at most 1"
    assert rules["seed"]["rule"] == "a whole number from 0 to 4294967295, or blank for a random seed"
    assert page_settings.setting_rules()[1]["rule"] == "a whole number of 0 or more"  # no model: no upper bound


def test_the_fields_start_with_the_sampler_defaults():
    rules = page_settings.setting_rules()
    assert [r["default"] for r in rules] == ["0.8", "40", "0.95", "0.05", "1.0", "256", ""]
    assert [r["placeholder"] for r in rules if r["placeholder"]] == ["random"]  # only the seed may be blank


def test_page_data_says_the_hint_and_the_stop_reasons_in_words():
    from pyengine.generation.loop import STOP_REASONS
    data = worker.page_data()
    assert data["hint"] == ("Temperature 0 is greedy: the same reply every time. Leave Seed blank for a random seed "
                            "each reply; every other field needs a number.")
    assert list(data["stop_words"]) == list(STOP_REASONS)
    assert data["stop_words"]["max_tokens"] == "token limit" and data["stop_words"]["eog"] == "end of turn"
    assert data["continued"] == ["context", "max_tokens", "stopped"]   # not eog, stop_string or error
    assert data["probs_note"].startswith("Each token is shaded by the probability it had after the repetition")


# A field's rule, the text typed in it, and what it reads as (the tiny llama: 328 tokens, a context of 256).
READ = [
    ("temperature", "0.8", 0.8),
    ("temperature", " 0 ", 0.0),
    ("top_k", "40", 40),
    ("top_k", "1e2", 100),
    ("top_p", ".5", 0.5),
    ("max_tokens", "+12", 12),
    ("seed", "", None),
    ("seed", "4294967295", 4294967295),
]


@pytest.mark.parametrize("name, text, value", READ)
def test_a_field_as_typed_reads_as_its_number(name, text, value):
    rules = {r["name"]: r for r in page_settings.setting_rules(n_vocab=328, n_ctx=256)}
    got = page_settings.read_setting(rules[name], text)
    assert got == value and type(got) is type(value)


SEED_MUST = "Seed must be a whole number from 0 to 4294967295, or blank for a random seed"

# A field, the text typed in it (None: the browser found no number), and why it is not sent.
BAD_TEXT = [
    ("top_k", "-5", "Top-k must be a whole number from 0 to 328 (it is -5)"),
    ("top_k", "2.5", "Top-k must be a whole number from 0 to 328 (it is 2.5)"),
    ("top_k", "1e9", "Top-k must be a whole number from 0 to 328 (it is 1e9)"),   # as typed, not 1000000000
    ("top_k", None, "Top-k must be a whole number from 0 to 328 (it is not a number)"),
    ("top_k", "nan", "Top-k must be a whole number from 0 to 328 (it is not a number)"),
    ("top_k", "1_000", "Top-k must be a whole number from 0 to 328 (it is not a number)"),
    ("temperature", "  ", "Temperature must be a number from 0 to 5 (it is blank)"),
    ("top_p", "0", "Top-p must be a number above 0 and at most 1 (it is 0)"),
    ("max_tokens", "257", "Max tokens must be a whole number from 1 to 256 (it is 257)"),
    ("seed", "1.5", f"{SEED_MUST} (it is 1.5)"),
]


@pytest.mark.parametrize("name, text, message", BAD_TEXT)
def test_a_bad_field_as_typed_is_named_by_its_label_and_range(name, text, message):
    rules = {r["name"]: r for r in page_settings.setting_rules(n_vocab=328, n_ctx=256)}
    with pytest.raises(PyEngineError) as e:
        page_settings.read_setting(rules[name], text or "", bad_input=text is None)
    assert str(e.value) == message


def test_check_fields_keeps_the_right_ones_and_names_every_bad_one():
    values, errors = page_settings.check_fields(
        {"seed": "", "top_k": "-5", "temperature": "0.5", "min_p": "", "top_p": "", "unknown": "1"}, ["top_p"])
    assert values == {"temperature": 0.5, "seed": None}
    assert [e["name"] for e in errors] == ["top_k", "top_p", "min_p"]   # in the page's order
    assert errors[1]["message"] == "Top-p must be a number above 0 and at most 1 (it is not a number)"


@pytest.mark.parametrize("settings, message", [
    ({"top_k": -5}, "Top-k must be a whole number from 0 to 328 (it is -5)"),
    ({"top_k": 329}, "Top-k must be a whole number from 0 to 328 (it is 329)"),
    ({"top_k": 2.5}, "Top-k must be a whole number from 0 to 328 (it is 2.5)"),
    ({"top_k": "many"}, "Top-k must be a whole number from 0 to 328 (it is not a number)"),
    ({"temperature": None}, "Temperature must be a number from 0 to 5 (it is blank)"),
    ({"top_p": 0}, "Top-p must be a number above 0 and at most 1 (it is 0)"),
    ({"min_p": 1.5}, "Min-p must be a number from 0 to 1 (it is 1.5)"),
    ({"repeat_penalty": True}, "Repeat penalty must be a number above 0 and at most 10 (it is not a number)"),
    ({"max_tokens": 0}, "Max tokens must be a whole number from 1 to 256 (it is 0)"),
    ({"max_tokens": 257}, "Max tokens must be a whole number from 1 to 256 (it is 257)"),
    ({"seed": -1}, f"{SEED_MUST} (it is -1)"),
    ({"seed": float("nan")}, f"{SEED_MUST} (it is nan)"),
])
def test_a_bad_setting_is_named_by_its_label_and_range(settings, message):
    rules = page_settings.setting_rules(n_vocab=328, n_ctx=256)   # the tiny llama's
    with pytest.raises(PyEngineError) as e:
        page_settings.sampler_params({"temperature": 0.8, **settings}, rules)
    assert str(e.value) == message


@pytest.fixture
def posted():
    """Run handle() with a fresh session whose messages land in the returned list."""
    messages: list[dict] = []
    worker.setup(messages.append)
    return messages


def run(msg: dict) -> None:
    """Drive handle() to the end. Its only awaits are asyncio.sleep(0), a bare yield, so no event
    loop is needed (Playwright's sync API keeps one running in this thread in a browser session)."""
    coro = worker.handle(msg)
    try:
        while True:
            coro.send(None)
    except StopIteration:
        pass


def test_a_broken_file_is_an_error_message(posted, tmp_path):
    run({"type": "load", "files": [BytesSource(b"GGUF\x03\x00\x00\x00" + b"\xff" * 8, "broken.gguf")]})
    assert [m["type"] for m in posted] == ["error"]
    assert posted[0]["during"] == "load"
    assert posted[0]["message"].startswith("broken.gguf") and "internal error" not in posted[0]["message"]


@pytest.mark.parametrize("data, message", [
    (b"hello world", "x.gguf is not a GGUF file (it starts with 'hell', a GGUF file starts with 'GGUF')"),
    (b"\x7fELF\x02\x01",
     "x.gguf is not a GGUF file (it starts with the bytes 7f 45 4c 46, a GGUF file starts with 'GGUF')"),
    (b"GG", "x.gguf is not a GGUF file (it is only 2 bytes long)"),
    (b"", "x.gguf is empty (0 bytes): not a GGUF file"),
])
def test_a_file_that_is_not_a_gguf_is_said_plainly(posted, data, message):
    run({"type": "load", "files": [BytesSource(data, "x.gguf")]})
    assert posted == [{"type": "error", "during": "load", "message": message}]


def test_the_part_that_is_not_a_gguf_is_named(posted):
    good = BytesSource(TINY["llama"].read_bytes(), "good.gguf")
    run({"type": "load", "files": [good, BytesSource(b"hello world", "notes.txt")]})
    assert posted[-1]["message"] == \
        "notes.txt is not a GGUF file (it starts with 'hell', a GGUF file starts with 'GGUF')"


def test_check_answers_with_the_rules_of_the_model_loaded(posted):
    run({"type": "check", "settings": {"top_k": "1000", "seed": ""}})
    assert posted == [{"type": "checked", "settings": {"top_k": 1000, "seed": None}, "errors": []}]  # no model limit
    load_tiny(posted)
    start = len(posted)
    run({"type": "check", "settings": {"top_k": "1000", "max_tokens": "", "seed": "7"}, "bad_input": ["seed"]})
    assert posted[start:] == [{"type": "checked", "settings": {}, "errors": [
        {"name": "top_k", "message": "Top-k must be a whole number from 0 to 328 (it is 1000)"},
        {"name": "max_tokens", "message": "Max tokens must be a whole number from 1 to 256 (it is blank)"},
        {"name": "seed", "message": f"{SEED_MUST} (it is not a number)"}]}]


def test_chat_checks_the_settings_as_typed_once_and_refuses_bad_ones(posted):
    """One round trip: "chat" brings the fields as typed; bad ones are refused with the errors "check" would
    give and nothing else is posted (the conversation unchanged); right ones start the reply."""
    load_tiny(posted)
    start = len(posted)
    typed = {"temperature": "0", "top_k": "1000", "max_tokens": "4", "seed": "1.5"}
    run({"type": "chat", "text": "hi", "system": "", "settings": typed, "bad_input": []})
    assert posted[start:] == [{"type": "refused", "errors": [
        {"name": "top_k", "message": "Top-k must be a whole number from 0 to 328 (it is 1000)"},
        {"name": "seed", "message": f"{SEED_MUST} (it is 1.5)"}]}]
    assert worker._session.chat.messages == []
    run({"type": "chat", "text": "hi", "system": "", "settings": {**typed, "top_k": "40", "seed": ""}})
    new = [m["type"] for m in posted[start + 1:]]
    assert new[0] == "started" and new[-1] == "done" and set(new[1:-1]) == {"piece"}
    assert [m["role"] for m in worker._session.chat.messages] == ["user", "assistant"]


def test_chat_without_a_model_and_unknown_commands_are_errors(posted):
    run({"type": "chat", "text": "hi", "system": "", "settings": {}})
    run({"type": "frobnicate"})
    assert [m["message"] for m in posted] == ["no model is loaded: drop a .gguf file first",
                                              "unknown command 'frobnicate'"]


def test_a_bug_is_an_internal_error_message(posted, capsys):
    run({"type": "load", "files": [object()]})  # not a byte source, not a File: a bug in the caller
    assert posted[0]["type"] == "error"
    assert posted[0]["message"].startswith("internal error: AttributeError")
    assert "Traceback" in capsys.readouterr().err  # the console keeps the traceback


def load_tiny(posted: list[dict]) -> dict:
    run({"type": "load", "files": [browser_source(TINY["llama"])]})
    assert posted[-1]["type"] == "model", posted[-1]
    return posted[-1]


def test_load_posts_progress_then_the_model(posted):
    model = load_tiny(posted)
    progress = [m for m in posted if m["type"] == "progress" and m["stage"] == "reading tensors"]
    assert progress and progress[-1]["tensors"] == progress[-1]["n_tensors"] == model["inspect"]["tensors"].__len__()
    card, size = model["card"], TINY["llama"].stat().st_size
    with open_gguf(TINY["llama"]) as g:
        tensor_bytes = sum(t.n_bytes for t in g.tensors.values())  # the header aside
        assert progress[0]["bytes"] == 0 and progress[-1]["bytes"] == progress[-1]["total_bytes"] == tensor_bytes
        assert card["architecture"] == "llama" and card["files"] == ["tiny-llama.gguf"]
        assert card["parameters"] == sum(t.n_elements for t in g.tensors.values())
        assert card["context_length"] == 256 and card["file_size"] == size
    (part,) = model["inspect"]["parts"]
    assert [s["name"] for s in part["sections"]] == ["magic", "header", "metadata", "tensor_infos", "tensor_data"]
    assert part["sections"][-1]["end"] == part["size"] == size
    assert model["inspect"]["header"]["version"] == 3
    assert model["settings"] == page_settings.setting_rules(n_vocab=328, n_ctx=256)  # the page's ranges for this model


def chat(posted: list[dict], text: str, **settings) -> tuple[str, dict]:
    """Send ``text``; return the pieces joined and the done message."""
    start = len(posted)
    run({"type": "chat", "text": text, "system": "", "settings": {"temperature": 0, **settings}})
    new = posted[start:]
    assert new[-1]["type"] == "done", new[-1]
    return "".join(m["text"] for m in new if m["type"] == "piece"), new[-1]


def test_a_reply_streams_the_cpython_greedy_text(posted):
    from browser.reference import cpython_reply
    load_tiny(posted)
    text, done = chat(posted, "hello", max_tokens=6)
    assert text == cpython_reply(TINY["llama"], ["hello"], max_tokens=6)
    assert done["stopped"] is False and done["stats"]["generated_tokens"] == 6
    assert done["stats"]["stop_reason"] == "max_tokens"


def test_a_reply_to_the_messages_the_page_keeps_reuses_the_cache_up_to_an_edit(posted):
    """"chat" with ``messages``: the page's whole conversation answered; an edited last message prefills
    only from the edit on, and a bad message is an error naming it."""
    from browser.reference import cpython_reply
    from pyengine.generation.chat import chat_prompt, common_prefix
    load_tiny(posted)
    first, _ = chat(posted, "hello", max_tokens=4)
    settings = {"temperature": 0, "max_tokens": 4}
    talk = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": first}]
    start = len(posted)
    run({"type": "chat", "messages": [*talk, {"role": "user", "content": "tell me more"}], "system": "",
         "settings": settings})
    done = posted[-1]
    text = "".join(m["text"] for m in posted[start:] if m["type"] == "piece")
    assert text == cpython_reply(TINY["llama"], ["hello", first, "tell me more"], max_tokens=4)
    start = len(posted)
    run({"type": "chat", "messages": [*talk, {"role": "user", "content": "tell me less"}], "system": "",
         "settings": settings})
    edited = posted[-1]["stats"]
    engine = worker._session.chat.engine
    ids = [chat_prompt(engine.template, engine.tokenizer, [*talk, {"role": "user", "content": f"tell me {w}"}])[1]
           for w in ("more", "less")]
    assert edited["cached_tokens"] == common_prefix(*ids) > done["stats"]["cached_tokens"]   # up to the edit
    run({"type": "chat", "messages": [{"role": "robot", "content": "x"}], "system": "", "settings": settings})
    assert posted[-1]["type"] == "error" and "role must be one of" in posted[-1]["message"]


def test_pieces_carry_the_token_records_when_asked(posted):
    load_tiny(posted)
    start = len(posted)
    run({"type": "chat", "text": "hello", "system": "", "settings": {"temperature": 0, "max_tokens": 5}, "probs": 3})
    pieces = [m for m in posted[start:] if m["type"] == "piece"]
    records = [r for m in pieces for r in m.get("tokens", [])]
    assert len(records) == 5 and all(len(r["top"]) == 3 and r["top"][0]["id"] == r["id"] for r in records)
    assert "".join(r["text"] for r in records) == "".join(m["text"] for m in pieces)
    run({"type": "chat", "text": "hello", "system": "", "settings": {}, "probs": 99})
    assert posted[-1]["type"] == "error" and "probs must be a whole number of alternatives from 0 to 20" in \
        posted[-1]["message"]


def test_a_cooperative_stop_keeps_what_was_shown(posted):
    load_tiny(posted)
    pieces = []
    worker._session.should_stop = lambda: len(pieces) >= 2
    worker._session.post = lambda m: (posted.append(m), m["type"] == "piece" and pieces.append(m["text"]))
    text, done = chat(posted, "hello", max_tokens=50)
    assert done["stopped"] is True and done["stats"]["stop_reason"] == "stopped"
    assert worker._session.chat.messages[-1] == {"role": "assistant", "content": text}
    assert len(pieces) == 2


def test_a_failed_reply_is_not_part_of_the_conversation(posted):
    """A reply that fails mid-way (here the 3rd forward pass raises) is an error message, and the next
    message is answered as if the failed one had never been sent; the turns before it stay."""
    from browser.reference import cpython_reply
    load_tiny(posted)
    first, _ = chat(posted, "hello", max_tokens=4)
    model = worker._session.chat.engine.model
    calls = []

    def failing_forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise PyEngineError("the model broke")
        return type(model).forward(model, *args, **kwargs)
    model.forward = failing_forward
    start = len(posted)
    run({"type": "chat", "text": "tell me more", "system": "", "settings": {"temperature": 0, "max_tokens": 8}})
    kinds = [m["type"] for m in posted[start:]]
    assert kinds[-1] == "error" and "done" not in kinds and kinds.count("piece") >= 1  # it failed mid-reply
    assert posted[-1]["message"] == "the model broke"
    assert worker._session.chat.messages == [{"role": "user", "content": "hello"},
                                             {"role": "assistant", "content": first}]
    del model.forward
    again, done = chat(posted, "again", max_tokens=4)
    assert again == cpython_reply(TINY["llama"], ["hello", first, "again"], max_tokens=4)
    assert done["stats"]["cached_tokens"] > 0  # the cache still serves the turns before the failed one


def interrupt_once(posted: list[dict], when):
    """A post() that raises KeyboardInterrupt, as Pyodide's interrupt buffer would, at the first
    message ``when(message)`` picks; every other message lands in ``posted``. ``post.fired`` tells."""
    def post(m):
        if not post.fired and when(m):
            post.fired = True
            raise KeyboardInterrupt
        posted.append(m)
    post.fired = False
    return post


def test_an_interrupt_keeps_what_was_shown(posted):
    """KeyboardInterrupt (the interrupt buffer) may land anywhere: here, while the 4th piece is posted."""
    from browser.reference import cpython_reply
    load_tiny(posted)
    worker._session.interruptible = True
    start = len(posted)
    worker._session.post = interrupt_once(
        posted, lambda m: m["type"] == "piece" and sum(p["type"] == "piece" for p in posted[start:]) == 3)
    text, done = chat(posted, "hello", max_tokens=50)
    assert worker._session.post.fired and done["stopped"] is True
    assert text and worker._session.chat.messages[-1] == {"role": "assistant", "content": text}
    again, _ = chat(posted, "again", max_tokens=4)  # the session goes on from the stopped reply
    assert again == cpython_reply(TINY["llama"], ["hello", text, "again"], max_tokens=4)


def retyped(path, **changes) -> BytesSource:
    """The GGUF at ``path`` with some metadata values changed, in memory."""
    from gguf_write import gguf_bytes
    with open_gguf(path) as g:
        kvs = [(k, g.value_types[k], changes.get(k, v)) for k, v in g.metadata.items()]
        tensors = [(n, t.shape, t.type.id, g.tensor_bytes(n).tobytes()) for n, t in g.tensors.items()]
        return BytesSource(gguf_bytes(kvs, tensors, alignment=g.alignment), f"changed-{path.name}")


def test_a_model_that_cannot_load_keeps_the_one_before(posted):
    load_tiny(posted)
    chat(posted, "hello", max_tokens=2)
    before = list(worker._session.chat.messages)
    start = len(posted)
    run({"type": "load", "files": [retyped(TINY["llama"], **{"general.architecture": "phi9"})]})
    # the header read, the file shown in the inspector (tests/model/test_unsupported.py: all of it); no "unloaded"
    assert [m["type"] for m in posted[start:]] == ["progress", "inspect", "error"]
    with open_gguf(TINY["llama"]) as g:
        assert [t["name"] for t in posted[-2]["inspect"]["tensors"]] == list(g.tensors)
    assert posted[-1]["message"] == (f"unsupported architecture 'phi9' (general.architecture); supported: "
                                     f"{', '.join(ARCHITECTURES)}; the Inspector tab shows its metadata and tensors")
    assert worker._session.chat.messages == before


def test_a_new_model_replaces_the_old_one(posted):
    load_tiny(posted)
    start = len(posted)
    run({"type": "load", "files": [browser_source(TINY["qwen2"])]})
    kinds = [m["type"] for m in posted[start:] if m.get("stage") != "reading header"]
    assert kinds[0] == "unloaded" and kinds[-1] == "model" and set(kinds[1:-1]) == {"progress"}
    assert posted[-1]["card"]["architecture"] == "qwen2"
    assert worker._session.chat.messages == []


def test_an_interrupt_while_done_is_posted_still_ends_the_reply(posted):
    load_tiny(posted)
    worker._session.interruptible = True
    worker._session.post = interrupt_once(posted, lambda m: m["type"] == "done")
    text, done = chat(posted, "hello", max_tokens=3)
    assert worker._session.post.fired and done == {"type": "done", "stopped": True, "stats": None, "heap": []}
    assert text


def test_metadata_values_as_the_inspector_shows_them():
    assert page.show_value("{% for m in messages %}", "STRING") == "{% for m in messages %}"
    long = "x" * (page.SHOWN_CHARS + 5)
    assert page.show_value(long, "STRING") == "x" * page.SHOWN_CHARS + f"... ({len(long):,} characters)"
    cut = {"length": 100, "first": [0, 1]}  # a long array as describe() cuts it
    assert page.show_value(cut, "ARRAY[INT32]") == "[0, 1, ... ] (100 items)"
    assert page.show_value(1e-06, "FLOAT32") == "1e-06"


def context(model, heaps: list[int]) -> int | None:
    """budget.context_that_fits for ``model``'s cache, as the worker asks it."""
    from pyengine.weights.budget import context_that_fits
    cache = model.new_cache(1)
    return context_that_fits(heaps, cache.position_nbytes, cache.state_nbytes_max, model.config.n_ctx_train)


def test_the_chats_context_is_what_the_heap_leaves_under_2_gib():
    """A chat's KV cache grows with it: its context is capped where the worker's heap would pass 2 GiB
    (the runtime passes nothing past it), at most the model's training context, at least 256 tokens."""
    from pyengine.model import load_model
    from pyengine.weights import budget
    with open_gguf(TINY["qwen2"].with_name("tiny-gemma4.gguf")) as g:
        m = load_model(g)
    per = m.new_cache(1).position_nbytes
    assert per == 2 * 2 * (16 + 16) * 4 + 2 * 2 * (32 + 32) * 4    # own KV: 2 sliding layers, 2 full; 2 share
    m.config.n_ctx_train = 4096
    near = budget.HEAP_LIMIT - budget.KV_MARGIN - 1000 * per
    assert context(m, []) is None                                     # CPython: the training context
    assert context(m, [near]) == 1000
    assert context(m, [2**26, near]) == 1000                          # the fullest worker decides
    assert context(m, [2**26]) == 4096
    assert context(m, [budget.HEAP_LIMIT]) == budget.MIN_CONTEXT == 256
    m.config.n_ctx_train = 128
    assert context(m, [budget.HEAP_LIMIT]) == 128                     # never past the training context


def test_a_hybrid_models_context_leaves_room_for_its_recurrent_states():
    """qwen35 keeps up to MAX_CHECKPOINTS + 3 copies of every DeltaNet layer's state whatever the context's
    length: the context is what is left after them."""
    from pyengine.model import load_model
    from pyengine.model.kv_cache import MAX_CHECKPOINTS
    from pyengine.weights import budget
    with open_gguf(TINY["qwen2"].with_name("tiny-qwen35.gguf")) as g:
        m = load_model(g)
    cache = m.new_cache(1)
    one = 4 * 4 * ((4 - 1) * (2 * 2 * 8 + 4 * 8) + 4 * 8 * 8)          # 4 DeltaNet layers: conv window and S
    assert cache.state_nbytes_max == one * (MAX_CHECKPOINTS + 3)
    m.config.n_ctx_train = 10**6
    near = budget.HEAP_LIMIT - budget.KV_MARGIN - cache.state_nbytes_max - 700 * cache.position_nbytes
    assert context(m, [near]) == 700
