"""Long chats (generation/chat.py): a conversation too long for the context keeps the system prompt and
the newest turns; a reply that fills the context stops and can be resumed; a last message that cannot fit
is an error that says so."""

from __future__ import annotations

import pytest
from conftest import TINY

from pyengine.errors import PyEngineError
from pyengine.generation import ChatSession, load
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
    turn = chat.send("the last question", GREEDY, max_tokens=8)
    text = reply(turn)
    dropped = turn.stats.dropped_messages
    assert dropped > 0 and dropped % 2 == 0
    assert "SYSTEM RULES" in chat.prompt and "the last question" in chat.prompt
    assert f"turn {dropped - 1} " not in chat.prompt and f"turn {dropped} " in chat.prompt and "turn 11 " in chat.prompt
    assert len(turn.prompt_ids) + 8 <= 256 < len(turn.prompt_ids) + 8 + 40    # only as many turns as needed left out
    assert len(chat.messages) == 14 and chat.messages[-1]["content"] == text   # the conversation keeps them all
    fresh = ChatSession(engine, system="SYSTEM RULES", n_ctx=256)
    fresh.messages = long_talk(12)[dropped:]
    assert reply(fresh.send("the last question", GREEDY, max_tokens=8)) == text   # the same prompt, the same reply


def test_a_reply_that_fills_the_context_stops_and_goes_on(engine, monkeypatch):
    monkeypatch.setattr(engine.tokenizer, "eog_ids", frozenset())   # the tiny model would end its turn early
    chat = ChatSession(engine, n_ctx=96)
    first = chat.send("hello", GREEDY, max_tokens=500)
    text = reply(first)
    assert first.stats.stop_reason == "context" and len(first.tokens) == 96
    more = chat.resume(GREEDY, max_tokens=6)
    added = reply(more)
    assert added and len(more.ids) == 6 and more.stats.stop_reason == "max_tokens"
    assert chat.messages[-1] == {"role": "assistant", "content": text + added}
    assert len(more.prompt_ids) + 6 <= 96                      # the reply's end kept, its start left out
    tail = engine.tokenizer.decode(more.prompt_ids[-8:])
    assert text.endswith(tail[-4:])


def test_resume_needs_a_reply(engine):
    chat = ChatSession(engine, n_ctx=64)
    with pytest.raises(PyEngineError, match="there is no reply to continue"):
        chat.resume(GREEDY)


def test_a_last_message_that_cannot_fit_is_said_plainly(engine):
    chat = ChatSession(engine, n_ctx=64)
    chat.messages = long_talk(2)
    with pytest.raises(PyEngineError, match="no longer fits the context of 64 tokens: send a shorter one"):
        chat.send("word " * 100, GREEDY, max_tokens=4)
    assert chat.messages == long_talk(2)
