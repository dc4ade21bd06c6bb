"""The generate, chat and tokenize commands on the tiny fixtures: JSON outputs, streaming, errors."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from conftest import GOLDEN, ROOT, TINY

from pyengine.cli import main
from pyengine.generation import ChatSession, generate, load
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams

LLAMA, QWEN2 = str(TINY["llama"]), str(TINY["qwen2"])

# llama.cpp (llama-cpp-python 0.3.36) tokenize(add_special=True, parse_special=True) of special-token text
PARSED_SPECIAL = {
    LLAMA: {"<s>hi": [1, 1, 309, 268], "a</s>b": [1, 296, 2, 259, 261]},
    QWEN2: {"<|im_start|>hi": [300, 104, 105], "<|endoftext|>b": [299, 98]},
}


def run(argv: list[str], stdin: str = "", monkeypatch=None, capsys=None) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture
def cli(monkeypatch, capsys):
    return lambda argv, stdin="": run(argv, stdin, monkeypatch, capsys)


@pytest.fixture(scope="module")
def llama():
    return load(LLAMA)


# --- tokenize -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama", "qwen2", "gemma3"])
def test_tokenize_equals_llama_cpp(cli, name, fixtures_reference):
    cases = fixtures_reference["fixtures"][name]["reference"]["tokenize_add_bos"]
    rc, out, _ = cli(["tokenize", str(TINY[name])], "".join(json.dumps(t) + "\n\n" for t in cases))
    assert rc == 0
    assert [json.loads(line) for line in out.splitlines()] == [c["ids"] for c in cases.values()]


@pytest.mark.parametrize("path", [LLAMA, QWEN2])
def test_tokenize_parse_special(cli, path):
    texts = list(PARSED_SPECIAL[path])
    stdin = "".join(json.dumps(t) + "\n" for t in texts)
    rc, out, _ = cli(["tokenize", path, "--parse-special"], stdin)
    assert rc == 0 and [json.loads(x) for x in out.splitlines()] == list(PARSED_SPECIAL[path].values())
    rc, out, _ = cli(["tokenize", path], stdin)
    assert rc == 0 and all(json.loads(x) != ids for x, ids in zip(out.splitlines(), PARSED_SPECIAL[path].values()))


@pytest.mark.parametrize("stdin, message", [('"ok"\n{bad\n', "stdin line 2: not JSON"),
                                            ('["a"]\n', "stdin line 1: expected a JSON string, got list")])
def test_tokenize_bad_lines(cli, stdin, message):
    rc, out, err = cli(["tokenize", LLAMA], stdin)
    assert rc == 1 and f"error: {message}" in err


# --- generate -------------------------------------------------------------------------------------

def test_generate_json(cli, llama, fixtures_reference):
    prompt = "hello the world"
    rc, out, err = cli(["generate", LLAMA, "-p", prompt, "-n", "8", "--json"])
    assert rc == 0 and "loaded tiny-llama.gguf: llama" in err
    got = json.loads(out)
    assert set(got) == {"prompt_ids", "ids", "text", "stats", "weights"}
    assert got["weights"] == "f32"   # "auto" on a tiny model
    assert got["prompt_ids"] == fixtures_reference["fixtures"]["llama"]["reference"]["tokenize_add_bos"][prompt]["ids"]
    gen = generate(llama, got["prompt_ids"], Request(SamplerParams(temperature=0), 8))
    assert got["text"] == "".join(gen) and got["ids"] == gen.ids
    assert got["text"] == llama.tokenizer.decode(got["ids"])
    assert got["stats"]["generated_tokens"] == 8 and got["stats"]["prompt_tokens"] == 7
    assert got["stats"]["stop_reason"] == "max_tokens" and got["stats"]["decode_tok_s"] > 0


def test_generate_streams_the_same_text(cli):
    argv = ["generate", LLAMA, "-p", "is it the end?", "-n", "6", "--temp", "0.9", "--seed", "3", "--top-k", "20"]
    rc, out, err = cli(argv)
    rc2, js, _ = cli(argv + ["--json"])
    assert rc == rc2 == 0 and out == json.loads(js)["text"] + "\n"
    assert "prefill 9 tok" in err and "stop: max_tokens" in err


def test_generate_as_a_program():
    p = subprocess.run([sys.executable, "-m", "pyengine", "generate", QWEN2, "-p", "hello", "-n", "3", "--json"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["ids"]) == 3


@pytest.mark.parametrize("argv, message", [
    (["--top-p", "0"], "top_p"),
    (["-c", "-1"], "ctx-size"),
    (["-c", "4"], "more than the context of 4 tokens"),
    (["--lookup", "-1"], "--lookup must be a number of tokens >= 0"),
])
def test_generate_bad_options(cli, argv, message):
    rc, _, err = cli(["generate", LLAMA, "-p", "hello the world"] + argv)
    assert rc == 1 and message in err
    assert ("loaded" in err) == (message.startswith("more than"))   # option errors come before loading


@pytest.mark.parametrize("command", [["generate", LLAMA, "-p", "the cat sat on the mat. the cat sat on the mat. the"],
                                     ["chat", LLAMA, "--messages"]])
def test_lookup_gives_the_same_reply_and_its_counts(cli, command, tmp_path):
    """--lookup N drafts from the conversation: the same greedy ids, the drafted and accepted counts
    in --json's stats and on stderr's summary line (only when on)."""
    if command[-1] == "--messages":
        path = tmp_path / "m.json"
        path.write_text(json.dumps([{"role": "user", "content": "the cat sat on the mat. the cat sat on the mat"}]))
        command = command + [str(path)]
    runs = {}
    for k in ("0", "8"):
        rc, out, _ = cli(command + ["-n", "24", "--lookup", k, "--json"])
        runs[k] = json.loads(out)["stats"], json.loads(out)["ids"]
        assert rc == 0 and runs[k][0]["lookup"] == int(k)
    (off, off_ids), (on, on_ids) = runs["0"], runs["8"]
    assert on_ids == off_ids and off["drafted_tokens"] == 0 and on["drafted_tokens"] >= on["accepted_tokens"]
    assert on["accepted_tokens"] > 0 or command[0] == "chat"      # the raw prompt repeats itself: drafts taken
    _, _, err = cli(command + ["-n", "24", "--lookup", "8"])
    assert f"lookup 8: {on['accepted_tokens']} of {on['drafted_tokens']} drafted tokens accepted" in err
    _, _, err = cli(command + ["-n", "4"])
    assert "lookup" not in err.splitlines()[-1]                     # off by default


@pytest.mark.parametrize("form", ["blocks", "f32", "quantized", "compact"])
def test_generate_weights(cli, form):
    """--weights reaches the model: the JSON and stderr name the form, and the ids are the greedy
    ones of a model loaded in that form here."""
    rc, out, err = cli(["generate", LLAMA, "-p", "hello the world", "-n", "6", "--weights", form, "--json"])
    got = json.loads(out)
    assert rc == 0 and got["weights"] == form and f"{form} weights" in err
    products = "C kernel" if form == "blocks" else f"numpy (--weights {form})"    # what runs them is said
    assert f"quantized products: {products}" in err
    engine = load(LLAMA, weights=form)
    assert engine.model.weights == form
    gen = generate(engine, got["prompt_ids"], Request(SamplerParams(temperature=0), 6))
    assert got["text"] == "".join(gen) and got["ids"] == gen.ids


def test_chat_weights_compact(cli):
    rc, out, err = cli(["chat", QWEN2, "-n", "3", "--json", "--weights", "compact"], "hello\nis it the end?\n")
    replies = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and [r["weights"] for r in replies] == ["compact", "compact"] and "compact weights" in err


@pytest.mark.parametrize("command", [["generate", LLAMA, "-p", "x"], ["chat", LLAMA]])
def test_bad_weights_is_a_usage_error(command, capsys):
    with pytest.raises(SystemExit) as e:
        main(command + ["--weights", "int4"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--weights: invalid choice: 'int4'" in err and "'compact'" in err


def test_missing_model_file(cli, tmp_path):
    rc, _, err = cli(["generate", str(tmp_path / "nope.gguf"), "-p", "x"])
    assert rc == 1 and err.startswith("error:") and "nope.gguf" in err


def test_a_missing_tensor_names_the_file(cli, tmp_path):
    data = bytearray(TINY["llama"].read_bytes())
    data[data.find(b"blk.1.ffn_up.weight")] = ord("X")                   # the tensor now has another name
    (tmp_path / "renamed.gguf").write_bytes(data)
    rc, _, err = cli(["generate", str(tmp_path / "renamed.gguf"), "-p", "x"])
    assert rc == 1 and err.startswith("error: renamed.gguf: missing tensor 'blk.1.ffn_up.weight'")


def test_a_chat_template_file_that_does_not_parse_is_named_before_the_load(cli, tmp_path):
    (tmp_path / "bad.jinja").write_text("{% for x in %}")
    rc, out, err = cli(["chat", LLAMA, "--chat-template-file", str(tmp_path / "bad.jinja")], "hi\n")
    assert rc == 1 and "loaded" not in err and out == ""
    assert err.startswith(f"error: {tmp_path / 'bad.jinja'} (--chat-template-file): chat template does not parse")


@pytest.mark.real_model
@pytest.mark.parametrize("model", ["smollm2_path", "gemma3_path"])
def test_generate_real_models_as_llama_cpp(cli, model, request):
    """A prompt whose greedy path has no close call (top-2 margins over 1.8 in llama.cpp): the
    command's prompt ids, ids and text equal llama.cpp's (tests/golden/generate.json)."""
    path = request.getfixturevalue(model)
    case = next(c for c in json.loads((GOLDEN / "generate.json").read_text())[path.name]
                if c["prompt"] == "1, 2, 3, 4, 5,")
    rc, out, _ = cli(["generate", str(path), "-p", case["prompt"], "-n", "12", "--json"])
    got = json.loads(out)
    assert rc == 0 and min(case["margins"][:12]) > 1.8
    assert got["prompt_ids"] == case["prompt_ids"] and got["ids"] == case["ids"][:12]
    assert got["text"] == " 6, 7, 8, 9," and case["text"].startswith(got["text"])


# --- chat -----------------------------------------------------------------------------------------

def test_chat_messages_json(cli, llama, tmp_path):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello the world"}]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(messages))
    rc, out, _ = cli(["chat", LLAMA, "--messages", str(path), "-n", "5", "--json"])
    assert rc == 0
    got = json.loads(out)
    assert set(got) == {"prompt", "prompt_ids", "ids", "text", "stats", "weights"}
    assert got["prompt"] == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello the world<|im_end|>\n"
                             "<|im_start|>assistant\n")
    assert got["prompt_ids"] == llama.tokenizer.encode(got["prompt"], add_special=True, parse_special=True)
    chat = ChatSession(llama)
    chat.messages = messages
    turn = chat.respond(Request(SamplerParams(temperature=0), 5))
    assert "".join(turn) == got["text"] and turn.ids == got["ids"]


def test_chat_interactive_keeps_the_conversation(cli):
    rc, out, _ = cli(["chat", QWEN2, "-n", "4", "--json", "--system", "Be brief."], "hello\n\nis it the end?\n")
    first, second = [json.loads(line) for line in out.splitlines()]
    assert rc == 0
    assert first["prompt"].startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert second["prompt"].startswith(first["prompt"] + first["text"] + "<|im_end|>\n<|im_start|>user\nis it the end?")
    assert second["stats"]["cached_tokens"] >= len(first["prompt_ids"])
    assert second["stats"]["prefill_tokens"] == len(second["prompt_ids"]) - second["stats"]["cached_tokens"]


def test_chat_streams(cli):
    rc, out, err = cli(["chat", QWEN2, "-n", "3"], "hello\n")
    rc2, js, _ = cli(["chat", QWEN2, "-n", "3", "--json"], "hello\n")
    assert rc == rc2 == 0 and out == json.loads(js)["text"] + "\n" and "stop: max_tokens" in err


@pytest.mark.parametrize("content, message", [
    ("{not json", "not a JSON file"),
    ('[{"role": "user"}]', "message 0 must be an object with string 'role' and 'content'"),
    ('{"role": "user", "content": "x"}', "messages must be a list"),
    ('[{"role": "wizard", "content": "x"}]', "message 0: role must be one of system, user, assistant, tool"),
    ("[]", "no messages to answer"),
])
def test_chat_bad_messages_file(cli, tmp_path, content, message):
    path = tmp_path / "m.json"
    path.write_text(content)
    rc, _, err = cli(["chat", LLAMA, "--messages", str(path)])
    assert rc == 1 and message in err and "loaded" not in err


@pytest.mark.parametrize("command", [["generate", LLAMA, "-p", "hi"], ["chat", LLAMA]])
@pytest.mark.parametrize("n", ["0", "-1"])
def test_n_predict_below_one_is_an_error(cli, command, n):
    rc, out, err = cli(command + ["-n", n], "hello\n")
    assert rc == 1 and err == f"error: -n/--n-predict must be at least 1 token, got {n}\n" and out == ""


LONG_PROMPT = " ".join(["word"] * 300)  # more than the tiny models' trained context of 256 tokens


@pytest.mark.parametrize("command", [["generate", LLAMA, "-p", LONG_PROMPT], ["chat", LLAMA]])
def test_ctx_size_above_the_trained_context_is_cut_to_it(cli, command):
    """-c beyond the model's context_length is cut to it, with a note: the long prompt then does not fit."""
    rc, out, err = cli(command + ["-c", "100000", "-n", "2"], LONG_PROMPT + "\n")
    note = "note: -c/--ctx-size 100000 is more than the model's trained context of 256 tokens: using 256\n"
    assert rc == 1 and note in err and "the context of 256 tokens" in err.splitlines()[-1] and out == ""
    rc, _, err = cli(command + ["-c", "256", "-n", "2"], "hello\n")  # at the limit: no note
    assert "note:" not in err
