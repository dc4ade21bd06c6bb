"""The trace of one step (pyengine.model.trace, pyengine.generation.trace, ``python -m pyengine trace``) on
every fixture architecture (tests/fixtures/tiny-*.gguf, float32).

What each test proves:
- the last layer's logit lens is the step's logits: its top 1 is the model's greedy token, its
  probabilities the softmax of the logits of the untraced step;
- turning the trace on changes no logits (bit for bit), and leaves the conversation's cache as it was:
  the steps after it give the logits of a cache never traced (a step inside the cache too, which a
  hybrid model reaches again from a checkpoint);
- each head's attention sums to 1 over the positions it sees (the window's only on a sliding layer);
  a shared-KV layer names its source layer, a DeltaNet layer gives its state's norm per head;
- the seconds per layer, with the embedding's and the output's, add up to the step's within 10%;
- a model split over 2 and 3 workers (helpers as threads) gives the whole model's trace, and its
  helpers' caches are left as they were;
- every weight form (blocks, f32, quantized, compact) traces its own step: the same logits bit for bit;
- the CLI prints the record the issue asks for (`layers` with `top` = [[id, piece, prob]],
  `attention` heads x positions, `seconds`; `tokens`; `total_seconds`), `--heads` keeps that many;
- the page's worker traces a token of the last reply (the next turn's reply as without it) and refuses any
  other request in words.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import FIXTURES, need_kernel
from parallel.test_parallel import run
from split_threads import start, stop

from pyengine.cli import main
from pyengine.errors import PyEngineError
from pyengine.generation.trace import trace
from pyengine.gguf import open_gguf
from pyengine.model import load_model
from pyengine.text.tokenizer import Tokenizer

ARCHS = sorted(p.stem[len("tiny-"):] for p in FIXTURES.glob("tiny-*.gguf"))
PROMPT = [1, 5, 9, 42, 7, 300, 12, 3, 17, 2]
GELU = {"gemma2", "gemma3", "gemma4"}      # GELU looked up in float16: a split's sums move it by float16 steps


def load(arch: str):
    g = open_gguf(FIXTURES / f"tiny-{arch}.gguf")
    return load_model(g, weights="f32"), Tokenizer(g.metadata)


def chat(model, n_steps: int = 3):
    """A cache holding the prompt and ``n_steps`` greedy tokens; the ids, and the logits of each step."""
    cache = model.new_cache(64)
    logits = [model.forward(PROMPT, cache)]
    ids = list(PROMPT)
    for _ in range(n_steps):
        ids.append(int(np.argmax(logits[-1])))
        logits.append(model.forward(ids[-1:], cache))
    return cache, ids, logits


def softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x.astype(np.float64) - x.max())
    return z / z.sum()


def test_every_fixture_architecture_is_traced():
    assert len(ARCHS) == 14 and {"qwen35", "lfm2", "gemma4", "gemma2"} <= set(ARCHS)


@pytest.mark.parametrize("arch", ARCHS)
def test_the_lens_ends_at_the_models_greedy_token_and_the_trace_changes_nothing(arch):
    model, tok = load(arch)
    cache, ids, logits = chat(model)
    n = len(ids) - 1                                               # the last step the cache ran
    rec = trace(model, tok, ids, n, cache=cache)
    last = rec["layers"][-1]
    want = int(np.argmax(logits[-1]))
    assert last["top"][0][0] == want == rec["next"][0]
    p = softmax(logits[-1])
    np.testing.assert_allclose([q for _, _, q in last["top"]], p[[i for i, _, _ in last["top"]]], rtol=1e-6)
    assert last["answer"] == [0, pytest.approx(p[want], rel=1e-6)]
    assert len(rec["layers"]) == model.config.n_layer and rec["tokens"][-1] == rec["token"]
    # the cache the chat goes on with: the next steps as if never traced
    fresh, _, _ = chat(model)
    assert cache.n == fresh.n == len(ids)
    nxt = int(np.argmax(logits[-1]))
    for _ in range(2):
        a, b = model.forward([nxt], cache), model.forward([nxt], fresh)
        assert np.array_equal(a, b)
        nxt = int(np.argmax(a))
    # a step inside the cache (a hybrid model reruns from its checkpoint) gives that step's logits
    inside = trace(model, tok, ids, len(PROMPT), cache=cache)
    assert inside["next"][0] == int(np.argmax(logits[1])) and cache.n == fresh.n


@pytest.mark.parametrize("arch", ARCHS)
def test_traced_logits_are_the_untraced_steps(arch):
    from pyengine.model.trace import trace_step
    model, _ = load(arch)
    cache, ids, _ = chat(model, 1)
    cache.truncate(cache.start_of(len(ids) - 1))
    cache2, _, _ = chat(model, 1)
    cache2.truncate(cache2.start_of(len(ids) - 1))
    if cache.n < len(ids) - 1:                                     # hybrid: back to a checkpoint, run to the step
        model.forward(ids[cache.n:-1], cache)
        model.forward(ids[cache2.n:-1], cache2)
    _, traced = trace_step(model, cache, ids, len(ids) - 1)
    assert np.array_equal(traced, model.forward(ids[-1:], cache2))


@pytest.mark.parametrize("arch", ARCHS)
def test_attention_rows_sum_to_one_over_what_each_layer_sees(arch):
    model, tok = load(arch)
    c = model.config
    rec = trace(model, tok, PROMPT)
    n = len(PROMPT) - 1
    kinds = set()
    for il, layer in enumerate(rec["layers"]):
        kinds.add(layer["kind"])
        if layer["kind"] in ("attention", "shared"):
            a = np.asarray(layer["attention"])                     # (heads, positions)
            window = model.layers[il].mixer.window
            first = max(0, n - window + 1) if window else 0
            assert a.shape == (c.n_head, n + 1 - first) and layer["first"] == first
            np.testing.assert_allclose(a.sum(axis=1), 1.0, rtol=0, atol=1e-5)
            assert (layer["kind"] == "shared") == (c.kv_layers[il] != il)
            assert layer.get("kv_layer", il) == c.kv_layers[il]
        elif layer["kind"] == "delta":
            assert len(layer["state_norm"]) == c.ssm_dt_rank and min(layer["state_norm"]) > 0
        else:
            assert layer["kind"] == "conv" and "attention" not in layer
    want = {"lfm2": {"conv", "attention"}, "qwen35": {"delta", "attention"}, "gemma4": {"attention", "shared"}}
    assert kinds == want.get(arch, {"attention"})


@pytest.mark.parametrize("arch", ARCHS)
def test_the_parts_times_add_up_to_the_steps(arch):
    model, tok = load(arch)
    for _ in range(3):                                             # a busy machine may stall one step
        rec = trace(model, tok, PROMPT)
        parts = sum(layer["seconds"] for layer in rec["layers"]) + sum(s["seconds"] for s in rec["stages"].values())
        if abs(parts - rec["total_seconds"]) <= 0.1 * rec["total_seconds"]:
            break
    assert abs(parts - rec["total_seconds"]) <= 0.1 * rec["total_seconds"], (parts, rec["total_seconds"])
    for layer in rec["layers"]:                                    # each layer's kinds add up to its seconds
        assert sum(layer["ops"].values()) == pytest.approx(layer["seconds"], rel=1e-9)
    names = {"attn_qkv", "ffn_gate_up", "ffn_down", "output", "token_embd"}
    assert names <= set(rec["bytes"]) and {"norms", "rest"} <= set(rec["ops"])
    assert rec["bytes"]["output"] == model.output.nbytes


def same_trace(got: dict, want: dict, tol: float) -> None:
    assert got["tokens"] == want["tokens"] and got["next"] == want["next"]
    for a, b in zip(got["layers"], want["layers"], strict=True):
        assert [t[0] for t in a["top"]] == [t[0] for t in b["top"]] and a["answer"][0] == b["answer"][0]
        np.testing.assert_allclose([t[2] for t in a["top"]], [t[2] for t in b["top"]], rtol=0, atol=tol)
        assert a["kind"] == b["kind"] and a.get("first") == b.get("first") and a.get("kv_layer") == b.get("kv_layer")
        for key in ("attention", "state_norm"):
            assert (key in a) == (key in b)
            if key in a:
                np.testing.assert_allclose(a[key], b[key], rtol=0, atol=tol)


@pytest.mark.parametrize("n_workers", [2, 3])
@pytest.mark.parametrize("arch", ARCHS)
def test_a_split_models_trace_is_the_whole_models(arch, n_workers):
    whole, tok = load(arch)
    model, helpers, threads = start(FIXTURES / f"tiny-{arch}.gguf", n_workers)
    tol = 5e-4 if arch in GELU else 1e-5
    try:
        c1, ids, _ = chat(whole)
        c2, ids2, _ = chat(model)
        assert ids2 == ids
        for n in (len(ids) - 1, len(PROMPT)):                      # at the cache's end, and inside it
            same_trace(trace(model, tok, ids, n, heads=3, cache=c2), trace(whole, tok, ids, n, heads=3, cache=c1), tol)
        if helpers:
            model.chan.wait_idle()                                 # the helpers have put their caches back
        assert all(h.caches[c2.id].n == c2.n for h in helpers)
        np.testing.assert_allclose(model.forward([7], c2), whole.forward([7], c1), rtol=0, atol=tol)
    finally:
        stop(model, threads)


def test_heads_and_positions_are_checked():
    model, tok = load("llama")
    rec = trace(model, tok, PROMPT, heads=2)
    assert all(len(layer["attention"]) == 2 for layer in rec["layers"])
    for kw, msg in (({"position": len(PROMPT)}, "the position to trace must be 0..9"),
                    ({"position": -1}, "must be 0..9"), ({"heads": 0}, "heads must be a number of heads >= 1")):
        with pytest.raises(PyEngineError, match=msg):
            trace(model, tok, PROMPT, **kw)
    with pytest.raises(PyEngineError, match="nothing to trace: the prompt gives no tokens"):
        trace(model, tok, [])
    n_train = model.config.n_ctx_train                    # a fresh cache: the model's trained context, checked
    with pytest.raises(PyEngineError, match=f"position {n_train} is past the context of {n_train} tokens"):
        trace(model, tok, [1] * (n_train + 1))             # before the prompt's steps are run


def test_cli_trace_json(capsys):
    path = str(FIXTURES / "tiny-qwen2.gguf")
    assert main(["trace", path, "--prompt", "hello world", "--heads", "2", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    model, tok = load("qwen2")
    ids = tok.encode("hello world", add_special=True, parse_special=True)
    assert rec["tokens"] == [tok.token_bytes(i, special=True).decode() for i in ids] and rec["position"] == len(ids) - 1
    assert len(rec["layers"]) == 2 and rec["total_seconds"] > 0
    for layer in rec["layers"]:
        assert len(layer["top"]) == 5 and all(len(t) == 3 for t in layer["top"]) and layer["seconds"] > 0
        assert np.asarray(layer["attention"]).shape == (2, len(ids))
    assert rec["layers"][-1]["top"][0][0] == int(np.argmax(model.forward(ids, model.new_cache(16))))
    assert main(["trace", path, "--prompt", "hello world", "--position", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["tokens"] == [rec["tokens"][0]]
    assert main(["trace", path, "--prompt", "hello world", "--heads", "2"]) == 0   # the table: a line per layer
    lines = capsys.readouterr().out.splitlines()[1:]
    for line, layer in zip(lines, rec["layers"], strict=True):
        mean = np.asarray(layer["attention"]).mean(axis=0)
        i = int(np.argmax(mean))
        assert line.endswith(f"| reads {i} {rec['tokens'][i]!r} {mean[i]:.2f}")   # its most-read position
    assert main(["trace", path, "--prompt", "hello", "--position", "99"]) == 1
    assert "error: the position to trace must be 0.." in capsys.readouterr().err


def test_the_worker_traces_a_token_of_the_last_reply():
    """pyengine.browser.worker's ``trace``: the step that wrote reply token i, on the conversation's cache (the
    next turn's reply is the same as without it); a token not of the last reply is an error message."""
    from pyengine.browser import worker
    from pyengine.gguf.source import FileSource

    def reply(text: str) -> list[dict]:
        posted.clear()
        run(worker.handle({"type": "chat", "text": text, "system": "", "probs": 3,
                                   "settings": {"temperature": 0, "max_tokens": 5}}))
        return [t for m in posted if m["type"] == "piece" for t in m.get("tokens", [])]

    texts = []
    for traced in (False, True):
        posted: list[dict] = []
        worker.setup(posted.append)
        run(worker.handle({"type": "load", "files": [FileSource(FIXTURES / "tiny-qwen2.gguf")]}))
        records = reply("hello")
        if traced:
            back = len(records) - 3                                # the reply's third token
            run(worker.handle({"type": "trace", "back": back, "id": records[2]["id"]}))
            got = posted[-1]
            assert got["type"] == "traced" and got["back"] == back
            turn = worker._session.chat.turn
            ids = turn.prompt_ids + turn.ids
            want = trace(worker._session.chat.engine.model, worker._session.chat.engine.tokenizer,
                         ids[:len(turn.prompt_ids) + 2], len(turn.prompt_ids) + 1)
            assert got["trace"]["next"][0] == records[2]["id"] == want["next"][0]
            same_trace(got["trace"], want, 0.0)
            run(worker.handle({"type": "trace", "back": back, "id": records[2]["id"] + 1}))
            assert posted[-1] == {"type": "error", "during": "trace", "message": (
                "only the tokens of the last reply written since the model was loaded can be looked inside "
                "(with Token probabilities on)")}
        texts.append(reply("more"))
    assert texts[0] == texts[1]


@pytest.mark.parametrize("msg", [{}, {"back": "0", "id": 1}, {"back": True, "id": 1}, {"back": -1, "id": 1},
                                 {"back": 10 ** 30, "id": 1}, {"back": 0, "id": None}, {"back": 0.0, "id": 1}])
def test_the_worker_refuses_a_bad_trace_request_in_words(msg):
    """Before a model, and after a reply without token records: every request is an error message, not a trace."""
    from pyengine.browser import worker
    from pyengine.gguf.source import FileSource
    posted: list[dict] = []
    worker.setup(posted.append)
    for step in ({"type": "load", "files": [FileSource(FIXTURES / "tiny-llama.gguf")]},
                 {"type": "chat", "text": "hi", "system": "", "settings": {"temperature": 0, "max_tokens": 3}}, None):
        run(worker.handle({"type": "trace", **msg}))
        assert posted[-1]["type"] == "error" and posted[-1]["during"] == "trace"
        assert posted[-1]["message"].startswith(("no model is loaded", "only the tokens of the last reply"))
        if step:
            run(worker.handle(step))


@pytest.mark.parametrize("form", ["blocks", "f32", "quantized", "compact"])
@pytest.mark.parametrize("arch", ["llama-q4km", "qwen35", "gemma4"])
def test_every_weight_form_traces_its_own_step(arch, form):
    """The trace runs in the weight form the model holds (its matrices wrapped, not changed): the step's logits
    bit for bit, the lens's last top 1 the greedy token, each matrix's bytes those of its form."""
    from pyengine.model.trace import trace_step
    if form == "blocks":
        need_kernel()
    model = load_model(open_gguf(FIXTURES / f"tiny-{arch}.gguf"), weights=form)
    cache = model.new_cache(32)
    want = model.forward(PROMPT, cache)
    rec, got = trace_step(model, cache, PROMPT, len(PROMPT) - 1)
    assert model.weights == form and np.array_equal(got, want)
    assert rec["layers"][-1]["top"][0][0] == int(np.argmax(want))
    assert rec["bytes"]["ffn_down"] == sum(layer.ffn.w_down.nbytes for layer in model.layers)


def test_a_continued_reply_traces_the_tokens_the_last_turn_wrote():
    """Continue: the page's records of the reply run on from the turn before; counted back from the last token,
    a new token is traced, and one written by the turn before is refused."""
    from pyengine.browser import worker
    from pyengine.gguf.source import FileSource
    posted: list[dict] = []
    worker.setup(posted.append)
    settings = {"temperature": 0, "max_tokens": 3}
    run(worker.handle({"type": "load", "files": [FileSource(FIXTURES / "tiny-qwen2.gguf")]}))
    run(worker.handle({"type": "chat", "text": "hello", "system": "", "probs": 2, "settings": settings}))
    first = [t for m in posted if m["type"] == "piece" for t in m.get("tokens", [])]
    text = "".join(m["text"] for m in posted if m["type"] == "piece")
    posted.clear()
    run(worker.handle({"type": "chat", "messages": [{"role": "user", "content": "hello"},
                                                            {"role": "assistant", "content": text}],
                               "continue": True, "system": "", "probs": 2, "settings": settings}))
    more = [t for m in posted if m["type"] == "piece" for t in m.get("tokens", [])]
    assert len(first) == len(more) == 3
    run(worker.handle({"type": "trace", "back": 0, "id": more[-1]["id"]}))
    turn = worker._session.chat.turn
    assert posted[-1]["type"] == "traced" and posted[-1]["trace"]["next"][0] == more[-1]["id"]
    assert posted[-1]["trace"]["position"] == len(turn.prompt_ids) + 1
    run(worker.handle({"type": "trace", "back": 3, "id": first[-1]["id"]}))
    assert posted[-1]["type"] == "error"
