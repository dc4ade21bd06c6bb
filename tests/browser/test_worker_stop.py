"""Stop while the prompt is built (pyengine.browser.worker in CPython): the interrupt buffer's
KeyboardInterrupt may land while the template renders or the text is tokenized, before any token; the
reply then ends stopped and empty, and the worker's conversation keeps the user's message, as the page
shows it, so the next turn answers the conversation the user sees."""

from __future__ import annotations

import pytest
from conftest import TINY

from browser.test_worker_glue import chat, load_tiny, run
from pyengine.browser import worker
from pyengine.generation import chat as chat_module


@pytest.fixture
def posted():
    messages: list[dict] = []
    worker.setup(messages.append, interruptible=True)
    return messages


def stop_while_rendering(monkeypatch):
    """chat_prompt raises KeyboardInterrupt once, as the interrupt buffer would inside the template."""
    real, fired = chat_module.chat_prompt, []

    def prompt(*args, **kwargs):
        if not fired:
            fired.append(1)
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    monkeypatch.setattr(chat_module, "chat_prompt", prompt)
    return fired


@pytest.mark.parametrize("sent_as", ["text", "messages"])
def test_stop_while_the_prompt_is_built_keeps_the_message(posted, monkeypatch, sent_as):
    from browser.reference import cpython_reply
    load_tiny(posted)
    first, _ = chat(posted, "hello", max_tokens=3)
    fired = stop_while_rendering(monkeypatch)
    start = len(posted)
    talk = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": first}]
    user = {"role": "user", "content": "tell me"}
    message = {"text": "tell me"} if sent_as == "text" else {"messages": [*talk, user]}
    run({"type": "chat", **message, "system": "", "settings": {"temperature": 0, "max_tokens": 3}})
    assert fired and posted[start:] == [{"type": "started"},
                                        {"type": "done", "stopped": True, "stats": None, "heap": []}]
    assert worker._session.chat.messages == [*talk, user, {"role": "assistant", "content": ""}]
    again, done = chat(posted, "again", max_tokens=3)
    assert again == cpython_reply(TINY["llama"], ["hello", first, "tell me", "", "again"], max_tokens=3)
    assert done["stats"]["cached_tokens"] == 0         # the cache started again
