"""What one reply is asked for: the sampler's settings, its limits and what holds it, in one object.

:class:`Request` is what :func:`pyengine.generation.generate`, :class:`~pyengine.generation.loop.Generation`
and :class:`~pyengine.generation.chat.ChatSession`'s ``send``/``respond``/``resume`` take, in place of a
list of parameters each: the CLI builds one from its options, the browser worker from the page's
settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyengine.generation.lookup import LOOKUP_DEFAULT
from pyengine.generation.sampling import Sampler, SamplerParams

MAX_TOKENS = 256      # a reply's default length limit, in tokens (the page's Max tokens starts there)


@dataclass(frozen=True)
class Request:
    """One reply's settings.

    ``sampling``: :class:`SamplerParams` (None: llama.cpp's defaults), or a ready :class:`Sampler`, whose
    random generator then goes on from where it is; ``max_tokens``: the most tokens of the reply;
    ``stop_strings``: texts that end the reply (the text before one is emitted, it is not);
    ``lookup``: the most tokens prompt lookup drafts per step (0 = off, :mod:`pyengine.generation.lookup`);
    ``probs``: how many alternatives each reply token's record lists (0 = no records);
    ``grammar``: a :class:`~pyengine.generation.grammar.Grammar` the reply holds to, or a matcher part-way
    through one (a resumed reply); in a chat, the chat's own grammar when None;
    ``should_stop()``: the consumer's Stop, asked between two steps.
    """
    sampling: SamplerParams | Sampler | None = None
    max_tokens: int = MAX_TOKENS
    stop_strings: tuple[str, ...] = ()
    lookup: int = LOOKUP_DEFAULT
    probs: int = 0
    grammar: Any = None
    should_stop: Callable[[], bool] | None = None

    def sampler(self) -> Sampler:
        """The :class:`Sampler` of ``sampling``: the one given, else a new one (its settings checked:
        PyEngineError names the first out of range)."""
        return self.sampling if isinstance(self.sampling, Sampler) else Sampler(self.sampling)
