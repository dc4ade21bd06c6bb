"""Long chats (generation/chat.py): a conversation too long for the context keeps the system prompt and
the newest turns; a reply that fills the context stops and can be resumed; a last message that cannot fit
is an error that says so."""

from __future__ import annotations

import pytest
from conftest import TINY

from pyengine.errors import PyEngineError
from pyengine.generation import ChatSession, load
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams

GREEDY = SamplerParams(temperature=0)


@pytest.fixture(scope="module")
def engine():
    return load([str(TINY["llama"])], weights="f32")


def reply(turn) -> str:
    return "".join(turn)


def long_talk(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "words " * 12}
            for i in range(n)]


def test_a_long_conversation_keeps_the_system_prompt_and_the_newest_turns(engine):
    chat = ChatSession(engine, system="SYSTEM RULES", n_ctx=256)
    chat.messages = long_talk(12)
    turn = chat.send("the last question", Request(GREEDY, 8))
    text = reply(turn)
    dropped = turn.stats.dropped_messages
    assert dropped > 0 and dropped % 2 == 0
    assert "SYSTEM RULES" in chat.prompt and "the last question" in chat.prompt
    assert f"turn {dropped - 1} " not in chat.prompt and f"turn {dropped} " in chat.prompt and "turn 11 " in chat.prompt
    assert len(turn.prompt_ids) + 8 <= 256 < len(turn.prompt_ids) + 8 + 40    # only as many turns as needed left out
    assert len(chat.messages) == 14 and chat.messages[-1]["content"] == text   # the conversation keeps them all
    fresh = ChatSession(engine, system="SYSTEM RULES", n_ctx=256)
    fresh.messages = long_talk(12)[dropped:]
    assert reply(fresh.send("the last question", Request(GREEDY, 8))) == text   # the same prompt, the same reply


def test_a_reply_that_fills_the_context_stops_and_goes_on(engine, monkeypatch):
    monkeypatch.setattr(engine.tokenizer, "eog_ids", frozenset())   # the tiny model would end its turn early
    chat = ChatSession(engine, n_ctx=96)
    first = chat.send("hello", Request(GREEDY, 500))
    text = reply(first)
    assert first.stats.stop_reason == "context" and len(first.tokens) == 96
    more = chat.resume(Request(GREEDY, 6))
    added = reply(more)
    assert added and len(more.ids) == 6 and more.stats.stop_reason == "max_tokens"
    assert chat.messages[-1] == {"role": "assistant", "content": text + added}
    assert len(more.prompt_ids) + 6 <= 96                      # the reply's end kept, its start left out
    tail = engine.tokenizer.decode(more.prompt_ids[-8:])
    assert text.endswith(tail[-4:])


def test_resume_needs_a_reply(engine):
    chat = ChatSession(engine, n_ctx=64)
    with pytest.raises(PyEngineError, match="there is no reply to continue"):
        chat.resume(Request(GREEDY))


def test_a_last_message_that_cannot_fit_is_said_plainly(engine):
    chat = ChatSession(engine, n_ctx=64)
    chat.messages = long_talk(2)
    with pytest.raises(PyEngineError, match="no longer fits the context of 64 tokens: send a shorter one"):
        chat.send("word " * 100, Request(GREEDY, 4))
    assert chat.messages == long_talk(2)


def linear_fit(chat: ChatSession, conversation: list[dict], room: int) -> int:
    """Messages left out as the first long-chat code found them: render, drop the oldest turn, again."""
    from pyengine.generation.chat import chat_prompt
    head, dropped = 1, 0
    while True:
        kept = conversation[:head] + conversation[head + dropped:]
        _, ids = chat_prompt(chat.engine.template, chat.engine.tokenizer, kept)
        if len(ids) + room <= chat.cache.n_ctx or head + dropped >= len(conversation) - 1:
            return dropped
        dropped += 2 if conversation[head + dropped + 1]["role"] == "assistant" else 1


@pytest.mark.parametrize("n_ctx", [128, 200, 256, 400, 1024])
def test_the_turns_left_out_are_as_few_as_rendering_each_would_find(engine, n_ctx):
    chat = ChatSession(engine, system="SYSTEM RULES", n_ctx=n_ctx)
    chat.messages = long_talk(40)
    conversation = chat.conversation() + [{"role": "user", "content": "the last question"}]
    expected = linear_fit(chat, conversation, min(8, n_ctx // 4))
    turn = chat.send("the last question", Request(GREEDY, 8))
    assert turn.stats.dropped_messages == expected
    turn.close()


def test_a_long_chat_renders_a_few_times_and_counts_each_message_once(engine, monkeypatch):
    """401 turns against 512 tokens: the old code rendered and tokenized the whole chat once per turn left
    out (~200 passes); now a few renders of what the context keeps, and each message is tokenized alone
    once, at its first send."""
    from pyengine.generation import chat as chat_module
    renders, counted = [], []
    render, encode = chat_module.chat_prompt, engine.tokenizer.encode
    monkeypatch.setattr(chat_module, "chat_prompt", lambda t, tok, kept, **o: renders.append(len(kept)) or
                        render(t, tok, kept, **o))
    monkeypatch.setattr(engine.tokenizer, "encode", lambda text, **k: counted.append(text) or encode(text, **k))
    chat = ChatSession(engine, n_ctx=512)
    chat.messages = long_talk(400)
    chat.send("the last question", Request(GREEDY, 4)).close()
    contents = [m["content"] for m in chat.messages[:-1]]                        # all but the reply
    assert len(renders) <= 6 and max(renders) < 60, renders
    assert sorted(t for t in counted if t in contents) == sorted(contents)     # each message alone, once
    renders.clear(), counted.clear()
    chat.send("one more", Request(GREEDY, 4)).close()
    assert len(renders) <= 6, renders
    assert [t for t in counted if t in contents or t == "one more"] == ["one more"]   # only the new messages


@pytest.mark.real_model
def test_a_conversation_past_what_a_template_may_be_given_is_answered(smollm2_path):
    """199 messages of 5,000 chars (~1 M chars: past the sandbox's bound on what a template is given) with
    SmolLM2's Jinja template: the oldest turns are left out before the template sees them."""
    engine = load([str(smollm2_path)], weights="f32")
    chat = ChatSession(engine, n_ctx=2048)
    chat.messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 4990}
                     for i in range(199)]
    turn = chat.send("the last question", Request(GREEDY, 4))
    reply(turn)
    assert turn.stats.stop_reason in ("max_tokens", "eog") and turn.stats.dropped_messages >= 190
    assert "turn 198 " in chat.prompt and engine.template.name != "chatml"
