"""A reasoning model's thinking switch: a chat template that reads ``enable_thinking`` (Qwen3's) is found
(chat.thinking_switch) and the chat's ``options`` reach it; a template without it is left as it is."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import TINY

from pyengine.generation import ChatSession, load
from pyengine.generation.chat import thinking_switch
from pyengine.generation.request import Request
from pyengine.generation.sampling import SamplerParams
from pyengine.text.chat_template import ChatTemplate

# The part of Qwen3's template that matters here: an empty thinking block when thinking is off.
QWEN3_LIKE = ("{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
              "{%- if add_generation_prompt %}<|im_start|>assistant\n"
              "{%- if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{%- endif %}"
              "{%- endif %}")


@pytest.fixture(scope="module")
def engine():
    e = load([str(TINY["qwen3"])], weights="f32")
    template = ChatTemplate.from_metadata({**e.gguf.metadata, "tokenizer.chat_template": QWEN3_LIKE})
    return dataclasses.replace(e, template=template)


def prompt(engine, **options) -> str:
    chat = ChatSession(engine, options=options)
    list(chat.send("hi", Request(SamplerParams(temperature=0), 2)))
    return chat.prompt


def test_the_switch_is_found_and_reaches_the_template(engine):
    assert thinking_switch(engine.template)
    assert prompt(engine, enable_thinking=False).endswith("<|im_start|>assistant<think>\n\n</think>")
    assert prompt(engine, enable_thinking=True).endswith("<|im_start|>assistant")
    assert prompt(engine).endswith("<|im_start|>assistant")             # no option: the template's default


def test_a_template_without_it_has_no_switch():
    assert not thinking_switch(load([str(TINY["llama"])], weights="f32").template)
    assert not thinking_switch(None)
