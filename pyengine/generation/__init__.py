"""Generation: sampling the next token, the loop that streams a reply, and the chat around it.

    prompt ids ──prefill──▶ logits ──sample──▶ id ──detokenize──▶ text piece ──▶ consumer
                              ▲                 │
                              └────decode◀──────┘   (one token per step, KV cache grows by one;
                                                     with prompt lookup, a drafted few checked at once)

:mod:`~pyengine.generation.engine` opens a model (:func:`load`),
:mod:`~pyengine.generation.request` says what a reply is asked for (:class:`Request`),
:mod:`~pyengine.generation.sampling` is llama.cpp's sampler chain,
:mod:`~pyengine.generation.loop` produces one reply a token at a time,
:mod:`~pyengine.generation.lookup` drafts tokens from n-grams of the conversation, and
:mod:`~pyengine.generation.chat` keeps a conversation and its KV cache across turns.
"""

from pyengine.generation.chat import ChatSession, chat_prompt
from pyengine.generation.engine import Engine, load, load_tokenizer
from pyengine.generation.loop import Generation, TurnStats, generate
from pyengine.generation.request import Request
from pyengine.generation.sampling import Sampler, SamplerParams

__all__ = ["ChatSession", "Engine", "Generation", "Request", "Sampler", "SamplerParams", "TurnStats", "chat_prompt",
           "generate", "load", "load_tokenizer"]
