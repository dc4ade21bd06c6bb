"""The chat: a conversation with one model, its prompt rendered and tokenized, its KV cache reused.

Each turn renders the whole conversation, tokenizes it as llama.cpp tokenizes
a chat prompt (:func:`chat_prompt`), keeps the cache's longest common prefix
with the new ids and prefills only the rest (llama.cpp's server does the same
with its prompt cache).

A conversation too long for the context keeps the system prompt and the newest
turns: the oldest turns are left out of the prompt (``stats.dropped_messages``
says how many messages) until the reply has room (:meth:`ChatSession._fit`). A
reply that fills the context stops (``context``) and :meth:`ChatSession.resume`
goes on with it.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import accumulate
from typing import Any

from pyengine.errors import PyEngineError, TemplateError
from pyengine.generation import tools as tool_calls
from pyengine.generation.engine import Engine
from pyengine.generation.grammar import Grammar
from pyengine.generation.loop import Generation
from pyengine.generation.request import Request
from pyengine.text.chat_template import ChatTemplate, check_messages
from pyengine.text.template_bounds import MAX_TEXT

KEY_CHARS = 16                        # what a message weighs in a template's bound besides its text
MAX_MESSAGES_CHARS = MAX_TEXT * 9 // 10   # the kept messages' chars, within what a template may be given


def suffix_sums(values: list[int]) -> list[int]:
    """``out[i] = sum(values[i:])`` for i in 0..len(values) (the last: 0), in one pass."""
    return list(accumulate(reversed(values), initial=0))[::-1]


def chat_prompt(template: ChatTemplate, tokenizer: Any, messages: list[dict], **options: Any) -> tuple[str, list[int]]:
    """The prompt text and ids for ``messages``, ready for the assistant's reply; ``options`` are more
    variables for the template (``enable_thinking``).

    The template's text is tokenized as llama.cpp tokenizes a chat prompt (``add_special=True``,
    ``parse_special=True``), except special-token text typed in a message: that stays plain text.
    """
    parts = template.render_parts(messages, add_generation_prompt=True, typed=typed_specials(tokenizer), **options)
    ids = [tokenizer.bos_id] if tokenizer.add_bos else []
    for text, typed in parts:
        ids += tokenizer.encode(text, add_special=False, parse_special=not typed)
    ids += [tokenizer.eos_id] if tokenizer.add_eos else []
    return "".join(text for text, _ in parts), ids


_TYPED_SPECIALS: weakref.WeakKeyDictionary[Any, re.Pattern | None] = weakref.WeakKeyDictionary()


def typed_specials(tokenizer: Any) -> re.Pattern | None:
    """A regex of the texts of the tokens that only ``parse_special`` turns into tokens (control and
    unknown tokens), longest first; None if there are none. Built once per tokenizer (Gemma 3:
    6,250 texts, ~0.1 s) and forgotten with it."""
    if tokenizer not in _TYPED_SPECIALS:
        from pyengine.text.vocab import ATTR_HIDDEN
        texts = sorted({t for t, a in zip(tokenizer.tokens, tokenizer.attrs) if a & ATTR_HIDDEN and t},
                       key=len, reverse=True)
        _TYPED_SPECIALS[tokenizer] = re.compile("|".join(map(re.escape, texts))) if texts else None
    return _TYPED_SPECIALS[tokenizer]


THINKING = "enable_thinking"   # the template variable that turns a reasoning model's thinking on and off


def thinking_switch(template: ChatTemplate | None) -> bool:
    """Whether the template reads ``enable_thinking`` (Qwen3's): the page then shows it as a toggle."""
    return bool(template is not None and template.source and THINKING in template.source)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


@dataclass
class ChatSession:
    """A conversation with one model: the messages, and a KV cache reused from turn to turn.

    ``send(text, request)`` adds a user message and returns the reply's :class:`Generation`, as the
    :class:`Request` asks (the sampler, ``max_tokens``, ``lookup``: the conversation is what it copies
    from, ``probs``...); when the reply ends (end of turn, limit, stop) its emitted text becomes the
    assistant message, so the conversation always reads as the user saw it (:meth:`keep_shown`); a reply
    that fails leaves the conversation as it was. ``respond()`` answers the conversation as it stands, or
    one the caller keeps. Only one reply runs at a time: a new one closes the last.
    ``system`` is sent as a first ``system`` message (the template decides what it does); ``options`` go
    to the template as variables (``enable_thinking``: :meth:`set_thinking`); ``tools``: the tool
    definitions (:mod:`pyengine.generation.tools`): a reply's calls are kept in its message's
    ``tool_calls``, :meth:`add_tool_result` answers one; ``tool_choice="required"`` holds each reply to
    one call; ``grammar`` (:mod:`pyengine.generation.grammar`) holds each reply to a grammar (unless its
    request brings its own).
    """
    engine: Engine
    system: str | None = None
    n_ctx: int | None = None
    messages: list[dict] = field(default_factory=list)
    options: dict = field(default_factory=dict)   # more template variables: {"enable_thinking": False}
    grammar: Grammar | None = None                  # every reply held to it (structured output)
    tools: list | None = None                       # tool definitions, OpenAI's form (tools.py)
    tool_choice: str = "auto"                       # "required": the next reply is one call, by a grammar

    def __post_init__(self):
        if self.engine.template is None:
            raise TemplateError(self.engine.template_error or "this model has no usable chat template")
        self.tool_format, self._call_grammar = None, (None, None)
        self.set_tools(self.tools, self.tool_choice)
        self.cache = self.engine.model.new_cache(self.n_ctx)
        self.tokens: list[int] = []      # the ids whose keys and values the cache holds
        self.turn: Generation | None = None
        self.prompt = ""                 # the last rendered prompt text
        self._counts: dict[str, int] = {}   # the messages' tokens (:meth:`_count`), by content
        self._before: list[dict] = []       # the conversation before the turn (a failed reply goes back to it)
        self._tail, self._resumed = "", False   # the resumed message's text before the turn, whether resumed

    def set_tools(self, tools: list | None, tool_choice: str = "auto") -> None:
        """The tool definitions from the next reply on (None or []: none): checked, given to the template
        as ``tools``, and the format its text writes calls in found (TemplateError if it takes none);
        ``tool_choice`` "required" holds the next reply to one call (its grammar kept while the tools stay)."""
        self.tools, self.tool_choice, self.tool_format = tools or None, tool_choice, None
        self.options = {k: v for k, v in self.options.items() if k != "tools"}
        if not self.tools:
            return
        self.tools = tool_calls.check_tools(self.tools)
        fmt = tool_calls.tool_format(self.engine.template.source)
        if fmt is None:
            raise TemplateError(f"this model's chat template ({self.template_name}) takes no tools pyengine reads "
                                f"(formats: {', '.join(f.name for f in tool_calls.TOOL_FORMATS)})")
        self.tool_format, self.options = fmt, {**self.options, "tools": self.tools}
        gbnf = tool_calls.tool_call_gbnf(self.tools, fmt)
        if self._call_grammar[0] != gbnf:
            self._call_grammar = (gbnf, Grammar.from_gbnf(gbnf, "tools"))

    def add_tool_result(self, call_id: str, content: str) -> None:
        """Put the result of the call ``call_id`` of the last reply into the conversation (the ``tool``
        role); :meth:`respond` then goes on. Raises PyEngineError for a call the last reply did not make."""
        last = len(self.messages)
        while last > 0 and self.messages[last - 1]["role"] == "tool":
            last -= 1                                        # the reply before the results given so far
        calls = self.messages[last - 1].get("tool_calls", []) if last > 0 else []
        call = next((c for c in calls if c["id"] == call_id), None)
        if call is None or any(m.get("tool_call_id") == call_id for m in self.messages[last:]):
            raise PyEngineError(f"no call {call_id!r} of the last reply is waiting for its result")
        self.messages.append(tool_calls.tool_result(call, content))

    @property
    def template_name(self) -> str:
        return self.engine.template.name

    def set_system(self, system: str | None) -> None:
        self.system = system or None

    def reset(self) -> None:
        """Forget the messages (the system prompt stays) and empty the cache."""
        self._close_turn()
        self.messages = []
        self.cache.truncate(0)
        self.tokens = []

    def conversation(self, messages: list[dict] | None = None) -> list[dict]:
        """The system message, if any, and ``messages`` (default: the conversation's)."""
        return ([{"role": "system", "content": self.system}] if self.system else []) + \
            (self.messages if messages is None else messages)

    def send(self, text: str, request: Request | None = None) -> Generation:
        """Add the user's ``text`` and start the reply as ``request`` asks (default: :class:`Request`'s).
        Raises TemplateError / PyEngineError (the conversation is then left as it was)."""
        self._close_turn()
        return self._start(self.messages + [{"role": "user", "content": text}], request)

    def respond(self, request: Request | None = None, messages: list[dict] | None = None) -> Generation:
        """Start a reply to the conversation as it stands, or to ``messages``: the whole conversation as the
        caller keeps it (checked, it becomes this one; the cache's common prefix with the last turn is
        reused, so an edited or regenerated turn prefills only what changed)."""
        self._close_turn()
        return self._start(self._given(messages), request)

    def resume(self, request: Request | None = None, messages: list[dict] | None = None) -> Generation:
        """Go on with the last message, the assistant's (say, a reply the context or a token limit cut), of
        the conversation or of ``messages`` (as :meth:`respond` takes them): its text is the start of the
        reply, and what follows is added to it when the turn ends."""
        self._close_turn()
        messages = self._given(messages)
        if not messages or messages[-1]["role"] != "assistant":
            raise PyEngineError("there is no reply to continue: the last message is not the model's")
        return self._start(messages, request, messages[-1]["content"])

    def _given(self, messages: list[dict] | None) -> list[dict]:
        """The caller's ``messages``, checked and copied, or the conversation's (None)."""
        return self.messages if messages is None else check_messages([dict(m) for m in messages])

    def keep_shown(self, shown: str) -> None:
        """The last reply was stopped after the caller had shown ``shown`` of it: its message keeps exactly
        that (a Stop may land after a token's text was taken, before it was shown)."""
        if self.messages and self.messages[-1]["role"] == "assistant":
            self.messages[-1] = {**self.messages[-1], "content": self._tail + shown}

    def set_thinking(self, thinking: bool | None) -> None:
        """Turn a reasoning model's thinking on or off (the template's ``enable_thinking``, where it reads
        one: :func:`thinking_switch`); None leaves it to the template's default."""
        self.options = {k: v for k, v in self.options.items() if k != THINKING}
        if thinking is not None and thinking_switch(self.engine.template):
            self.options[THINKING] = bool(thinking)

    def _start(self, messages: list[dict], request: Request | None, tail: str | None = None) -> Generation:
        """The reply to ``messages`` (the system message goes first, if any), whose last one starts the reply
        when ``tail`` is its text (:meth:`resume`); ``messages`` become the conversation once the reply starts.
        A failure leaves the conversation as it was; so does a reply that fails later (:meth:`_ended`). A
        KeyboardInterrupt (the page's Stop) while the prompt is built ends the turn with an empty reply, as
        the page shows it: the conversation keeps the user's message, and the cache starts again."""
        before, asked = self.messages, messages[:-1] if tail is not None else messages
        try:
            turn = self._begin(self.conversation(asked), request or Request(), tail)
        except KeyboardInterrupt:
            self.turn, self.tokens = None, []
            self.cache.truncate(0)
            self.messages = asked + [{"role": "assistant", "content": ""}]
            raise
        self.messages, self._before, self._tail, self._resumed = messages, before, tail or "", tail is not None
        return turn

    def _begin(self, conversation: list[dict], request: Request, tail: str | None) -> Generation:
        """The reply's Generation: the conversation fitted to the context (:meth:`_fit`), the cache's
        common prefix kept. ``tail``: the start of the reply, for :meth:`resume` (None: a new reply)."""
        engine = self.engine
        prompt, ids, dropped = self._fit(check_messages(conversation), request.max_tokens, tail)
        keep = min(common_prefix(self.tokens, ids), len(ids) - 1)
        self.cache.truncate(keep)                       # a recurrent state may go back further
        self.tokens = self.tokens[:self.cache.n]
        self.prompt = prompt
        grammar = request.grammar if request.grammar is not None else self._grammar()
        grammar = grammar.matcher(engine.tokenizer) if grammar is not None else None
        if grammar is not None and tail:
            grammar.feed(tail.encode("utf-8"))
        request = replace(request, sampling=request.sampler(), grammar=grammar)
        self.turn = Generation(engine, ids, request, self.cache, self._ended, dropped)
        return self.turn

    def _grammar(self) -> Grammar | None:
        """The grammar this reply holds to: :attr:`grammar`, else one call when ``tool_choice`` is "required"."""
        if self.tool_choice not in ("auto", "required"):
            raise PyEngineError(f"tool_choice must be 'auto' or 'required', got {self.tool_choice!r}")
        if self.grammar is None and self.tool_format is not None and self.tool_choice == "required":
            return self._call_grammar[1]
        return self.grammar

    def _fit(self, conversation: list[dict], max_tokens: int, tail: str | None) -> tuple[str, list[int], int]:
        """The prompt (text, ids) of ``conversation`` (and the reply's start ``tail``) within the context:
        while it leaves the reply fewer than ``min(max_tokens, n_ctx // 4)`` tokens, the oldest turn
        after the system prompt goes (a message and the reply to it); the last user message always
        stays, and a ``tail`` too long for what is left keeps its end. Returns (text, ids, messages left
        out). Raises PyEngineError when the system prompt and the last message alone do not fit.

        Each message's tokens are counted once (:meth:`_count`, kept from send to send), which says how
        many turns must go at least; the prompt is then rendered for that many, then more (a galloping
        search: leaving fewer turns out never makes a prompt shorter), so a send renders and tokenizes what
        the context keeps a few times, not the whole chat once per turn left out."""
        engine, n_ctx = self.engine, self.cache.n_ctx
        room = min(max_tokens, n_ctx // 4)
        tail_ids = engine.tokenizer.encode(tail, add_special=False) if tail else []
        head = 1 if conversation and conversation[0]["role"] == "system" else 0
        last = max((i for i, m in enumerate(conversation) if m["role"] == "user"), default=len(conversation) - 1)
        cuts = [0]                                   # the numbers of messages that may be left out, in order
        while head + cuts[-1] < last:
            cuts.append(cuts[-1] + (2 if conversation[head + cuts[-1] + 1]["role"] == "assistant" else 1))
        self._counts = {m["content"]: self._count(m["content"]) for m in conversation}    # forget the rest
        tokens = suffix_sums([self._counts[m["content"]] for m in conversation])   # [i]: messages i.. together
        chars = suffix_sums([len(m["content"]) + KEY_CHARS for m in conversation])
        fixed = tokens[0] - tokens[head] + len(tail_ids) + room
        least = next((j for j, d in enumerate(cuts)
                      if tokens[head + d] + fixed <= n_ctx and chars[head + d] <= MAX_MESSAGES_CHARS), len(cuts) - 1)
        rendered: dict[int, tuple[str, list[int]]] = {}

        def fits(j: int) -> bool:
            kept = conversation[:head] + conversation[head + cuts[j]:]
            rendered[j] = chat_prompt(engine.template, engine.tokenizer, kept, **self.options)
            return len(rendered[j][1]) + len(tail_ids) + room <= n_ctx

        lo, hi, step = least, len(cuts) - 1, 1      # the first cut that fits lies in lo..hi (hi: the last)
        j = least
        while j < hi and not fits(j):               # gallop from the counts' guess, then halve
            lo, j, step = j + 1, min(hi, j + step), 2 * step
        hi = j
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
        while lo == least > 0 and fits(lo - 1):     # the counts said too much (a template that leaves text out)
            lo = least = lo - 1
        if lo not in rendered:
            fits(lo)
        prompt, ids = rendered[lo]
        if len(ids) + room > n_ctx:
            raise PyEngineError(f"the last message is {len(ids)} tokens long with the system prompt and no longer "
                                f"fits the context of {n_ctx} tokens: send a shorter one")
        tail_ids = tail_ids[max(0, len(ids) + len(tail_ids) + room - n_ctx):]
        text = prompt + (engine.tokenizer.decode(tail_ids) if tail_ids else "")
        return text, ids + tail_ids, cuts[lo]

    def _count(self, content: str) -> int:
        """Tokens of a message's ``content`` on its own, less what its two ends may merge with the template's
        text around it: at most what the content costs in a prompt. Counted once per text."""
        if content not in self._counts:
            return max(0, len(self.engine.tokenizer.encode(content, add_special=False)) - 2)
        return self._counts[content]

    def _ended(self, turn: Generation) -> None:
        """The reply ended: its text becomes the assistant's message (with its tool calls), or goes on with
        the one resumed; a failed reply (``error``) is not part of the conversation, which goes back to what
        it was before the turn."""
        self.tokens = turn.tokens
        if turn.stats.stop_reason == "error":
            self.messages = self._before
        elif self._resumed:
            self.messages[-1] = {**self.messages[-1], "content": self.messages[-1]["content"] + turn.text}
        else:
            self.messages.append(self._reply_message(turn.text))

    def _reply_message(self, text: str) -> dict:
        """The assistant's message of a reply's text: with the tool calls it makes, read out of it."""
        message = {"role": "assistant", "content": text}
        if self.tool_format is not None:
            made = sum(len(m.get("tool_calls", ())) for m in self.messages)
            content, calls = tool_calls.parse_tool_calls(text, self.tool_format, made)
            message = {**message, "content": content, "tool_calls": calls} if calls else message
        return message

    def _close_turn(self) -> None:
        if self.turn is not None:
            self.turn.close()
            self.turn = None
