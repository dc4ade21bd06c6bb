"""The generation loop: a prompt turned into streamed text, a token or a few at a time.

:class:`Generation` is one reply. Each :meth:`Generation.step` runs one forward
pass (the first one is the prefill of the whole prompt), samples one token, or
with prompt lookup (``lookup`` > 0, :mod:`pyengine.generation.lookup`) checks a
draft of several and keeps the ones the model agrees with, and returns the text
they complete (``""`` while a UTF-8 character or a possible stop string is held
back), or ``None`` when the reply is over. It is also an iterator of those
pieces, so ``for piece in gen`` streams, and the consumer may stop between any
two steps (``gen.close()``, a ``should_stop()`` callback, or just not asking for
more). Stops: an end-of-generation token (``tokenizer.eog_ids``; not part of the
text), a stop string (the text before it is emitted, it is not), ``max_tokens``,
the context limit (``n_ctx``); they fall on the same token with lookup as
without, a draft running past them is cut there. Statistics per reply:
:class:`TurnStats`. With ``probs`` = N > 0, ``token_probs`` holds for each reply token what it was
drawn from (:meth:`pyengine.generation.sampling.Sampler.probabilities`: after penalties and
temperature, before truncation): its probability and the N likeliest alternatives. With a
``grammar`` (:mod:`pyengine.generation.grammar`), every step's logits are masked to the tokens that
can continue it before anything else sees them: the sampler, and the probabilities recorded
(each record then says ``"masked": True``); an end-of-generation token is allowed only where the
grammar is complete. Near ``max_tokens`` only tokens after which the grammar's shortest completion
still fits the tokens left are allowed (:meth:`GrammarMatcher.allowed`), so a reply whose budget
holds the grammar's shortest sentence ends complete: a JSON object is closed rather than cut.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.generation.grammar import Grammar
from pyengine.generation.lookup import NgramIndex
from pyengine.generation.request import Request
from pyengine.generation.sampling import top_probs

STOP_REASONS = ("eog", "stop_string", "max_tokens", "context", "stopped", "error")

class StopStrings:
    """Finds stop strings in streamed text. ``push(text)`` returns ``(emit, hit)``: the text that
    can be shown now, and whether a stop string occurred (``emit`` then ends before it). Text that
    could still become the start of a stop string is held back; ``flush()`` releases it."""

    def __init__(self, stops: Iterable[str]):
        self.stops = [s for s in stops if s]
        self.held = ""

    def push(self, text: str) -> tuple[str, bool]:
        if not self.stops:
            return text, False
        buf = self.held + text
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.held = ""
            return buf[:min(hits)], True
        keep = max(self._partial(buf, s) for s in self.stops)
        self.held = buf[len(buf) - keep:] if keep else ""
        return buf[:len(buf) - keep], False

    @staticmethod
    def _partial(buf: str, stop: str) -> int:
        """Length of the longest end of ``buf`` that is a proper start of ``stop``."""
        for k in range(min(len(stop) - 1, len(buf)), 0, -1):
            if buf.endswith(stop[:k]):
                return k
        return 0

    def flush(self) -> str:
        out, self.held = self.held, ""
        return out


# ----------------------------------------------------------------------------
# one reply

@dataclass
class TurnStats:
    """One reply's numbers. Tokens are counts; seconds are wall time inside :meth:`Generation.step`
    (time the consumer spends between steps is not counted)."""
    prompt_tokens: int = 0          # the prompt, as tokenized
    cached_tokens: int = 0          # of which the KV cache already held (prefix reuse)
    prefill_tokens: int = 0         # run through the model in the prefill (prompt - cached)
    generated_tokens: int = 0       # ids of the reply (an end-of-generation id is not counted)
    decode_tokens: int = 0          # tokens sampled after the first (an end-of-generation id counted)
    lookup: int = 0                 # prompt lookup's most tokens drafted per step (0 = off)
    drafted_tokens: int = 0         # draft tokens run through the model
    accepted_tokens: int = 0        # of which the model sampled the same token
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0     # the forward passes and sampling after the first token
    ttft_seconds: float = 0.0       # first step: prefill + sampling the first token
    prefill_wait_seconds: float = 0.0   # of the prefill, the main worker waiting for helpers (a split model)
    decode_wait_seconds: float = 0.0    # of the decode, the same
    dropped_messages: int = 0       # the oldest messages left out of the prompt to fit the context (chat.py)
    stop_reason: str = ""           # one of STOP_REASONS

    @property
    def prefill_tok_s(self) -> float:
        return self.prefill_tokens / self.prefill_seconds if self.prefill_seconds > 0 else 0.0

    @property
    def decode_tok_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "prefill_tok_s": self.prefill_tok_s, "decode_tok_s": self.decode_tok_s}

    def summary(self) -> str:
        return (f"prompt {self.prompt_tokens} tok ({self.cached_tokens} cached), "
                f"prefill {self.prefill_tokens} tok in {self.prefill_seconds:.2f} s ({self.prefill_tok_s:.1f} tok/s), "
                f"decode {self.decode_tokens} tok in {self.decode_seconds:.2f} s ({self.decode_tok_s:.1f} tok/s), "
                f"first token after {self.ttft_seconds:.2f} s, {self.generated_tokens} generated, "
                + (f"lookup {self.lookup}: {self.accepted_tokens} of {self.drafted_tokens} drafted tokens accepted, "
                   if self.lookup else "")
                + f"stop: {self.stop_reason}")


class Generation:
    """One reply to ``prompt_ids``, produced a step at a time (see the module doc), by ``engine``'s model
    and tokenizer (:class:`pyengine.generation.Engine`; its ``wait_seconds()`` gives the stats' waits), as
    ``request`` asks (:class:`~pyengine.generation.request.Request`: the sampler, ``max_tokens``, stop
    strings, ``lookup``, ``probs``, ``grammar``, ``should_stop``).

    ``cache``: a KV cache whose first ``cache.n`` positions already hold ``prompt_ids[:cache.n]``
    (the caller's promise; None: a new one of the model's training context); only the rest is
    prefilled. At least the last prompt token is always run, for its logits.
    ``on_finish(gen)`` is called once when the reply ends, however it ends. ``dropped_messages``: the
    messages of a chat left out of the prompt to fit the context (:mod:`pyengine.generation.chat`),
    kept in ``stats``.

    Attributes: ``prompt_ids``, ``ids`` (generated), ``text`` (emitted so far), ``tokens`` (the
    ids whose keys and values the cache holds), ``stats``, ``done``, ``token_probs`` (a record per
    id of ``ids``: ``{id, token, text, p, top}``, see :meth:`_prob_record`).
    """

    def __init__(self, engine: Any, prompt_ids: Sequence[int], request: Request | None = None, cache: Any = None,
                 on_finish: Callable[[Generation], None] | None = None, dropped_messages: int = 0):
        from pyengine.text.stream import StreamDecoder
        request = request or Request()
        lookup, tokenizer = request.lookup, engine.tokenizer
        self.model, self.tokenizer, self.request = engine.model, tokenizer, request
        self.prompt_ids = [int(t) for t in prompt_ids]
        if isinstance(lookup, bool) or not isinstance(lookup, int) or lookup < 0:
            raise PyEngineError(f"lookup must be a number of tokens >= 0 (0 = off), got {lookup!r}")
        self.sampler = request.sampler()
        self.cache = self.model.new_cache() if cache is None else cache
        if not self.prompt_ids:
            raise PyEngineError("the prompt is empty: there is nothing to continue")
        if len(self.prompt_ids) > self.cache.n_ctx:
            raise PyEngineError(f"the prompt has {len(self.prompt_ids)} tokens, more than the context "
                                f"of {self.cache.n_ctx} tokens")
        if self.cache.n >= len(self.prompt_ids):
            self.cache.truncate(len(self.prompt_ids) - 1)
        self.max_tokens, self.should_stop, self.on_finish = request.max_tokens, request.should_stop, on_finish
        self._wait_seconds = engine.wait_seconds
        self.tokens = self.prompt_ids[:self.cache.n]
        self.ids: list[int] = []
        self.text = ""
        self.done = False
        self.stats = TurnStats(prompt_tokens=len(self.prompt_ids), cached_tokens=self.cache.n,
                               prefill_tokens=len(self.prompt_ids) - self.cache.n, lookup=lookup,
                               dropped_messages=dropped_messages)
        self._history = list(self.prompt_ids)       # the repetition penalty's window: prompt + reply
        self._lookup = lookup
        self._ngrams = NgramIndex(self.prompt_ids) if lookup else None
        self._decoder = StreamDecoder(tokenizer)
        self._stops = StopStrings(request.stop_strings)
        self._eog = tokenizer.eog_ids
        self._probs = request.probs
        self.token_probs: list[dict] = []
        grammar = request.grammar
        self.grammar = grammar.matcher(tokenizer) if isinstance(grammar, Grammar) else grammar

    # --- the iterator protocol, for `for piece in gen`
    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> str:
        piece = self.step()
        if piece is None:
            raise StopIteration
        return piece

    def close(self) -> None:
        """Stop here (between steps); the reply keeps the text emitted so far."""
        if not self.done:
            self._finish("stopped")

    def step(self) -> str | None:
        """Run one forward pass: returns the text its tokens complete ("" if none yet), None when the
        reply is over."""
        if self.done:
            return None
        t0, self._waited0 = time.perf_counter(), self._wait_seconds()
        try:
            draft: list[int] = []
            prefill = len(self.tokens) < len(self.prompt_ids)
            if prefill:                                                       # first step: the prefill
                if self.max_tokens <= 0:
                    return self._finish("max_tokens")
                logits = self._forward(self.prompt_ids[len(self.tokens):], "last")   # (1, n_vocab)
                self.stats.prefill_seconds = time.perf_counter() - t0
            else:
                if self.should_stop is not None and self.should_stop():
                    return self._finish("stopped")
                if self.cache.n >= self.cache.n_ctx:
                    return self._finish("context")
                draft = self._draft()
                logits = self._forward([self.ids[-1]] + draft, "all" if draft else "last")  # (1 + k, n_vocab)
            return self._verify(logits, draft, t0, prefill)
        except KeyboardInterrupt:
            self._finish("stopped")
            raise
        except BaseException:
            self._finish("error")
            raise

    def _draft(self) -> list[int]:
        """Prompt lookup's guess of the next tokens, as many as fit: each pass samples one token past
        its draft, so a draft is at most ``max_tokens`` - 1 - generated long, and the cache must hold
        the last token and the draft."""
        room = min(self._lookup, self.max_tokens - len(self.ids) - 1, self.cache.n_ctx - self.cache.n - 1)
        return self._ngrams.draft(room) if self._ngrams is not None else []

    def _forward(self, tokens: list[int], logits: str) -> np.ndarray:
        """Run ``tokens`` through the model: (1, n_vocab) float32 logits of the last one
        (``logits="last"``) or (T, n_vocab) of each (``"all"``)."""
        out = self.model.forward(tokens, self.cache, logits=logits)
        self.tokens.extend(tokens)
        return out.reshape(-1, out.shape[-1])

    def _verify(self, logits: np.ndarray, draft: list[int], t0: float, prefill: bool) -> str:
        """Sample a token from each row of ``logits`` ((1 + len(draft), n_vocab)) in turn, going on
        to the next row while the sample equals the draft's token (:mod:`pyengine.generation.lookup`'s
        rule), book each token, and keep in the cache only the positions whose next token was sampled:
        the cache then holds what plain decoding's would. Returns the step's text."""
        piece, reason, sampled, accepted = "", None, 0, 0
        for row in logits:
            if self.grammar is not None:
                row = self.grammar.apply(row, self.max_tokens - len(self.ids))   # (n_vocab,) refused: -inf
            seen = self.sampler.probabilities(row, self._history) if self._probs else None   # (n_vocab,)
            tok = self.sampler.sample(row, self._history)              # the history as plain decoding's
            if self.grammar is not None:
                self.grammar.accept(tok)
            sampled += 1
            hit = sampled <= len(draft) and tok == draft[sampled - 1]
            accepted += hit
            text, reason = self._take(tok)
            if seen is not None and reason != "eog":
                self.token_probs.append(self._prob_record(tok, text, seen))
            piece += text
            if reason is not None or not hit:
                break
        self._keep(len(self.tokens) - len(logits) + sampled)
        self.stats.decode_tokens += 0 if prefill else sampled
        self.stats.drafted_tokens += len(draft)
        self.stats.accepted_tokens += accepted
        self._time(t0, prefill)
        return self._finish(reason, piece) if reason is not None else piece

    def _prob_record(self, tok: int, text: str, probs: np.ndarray) -> dict:
        """What token ``tok`` was drawn from: ``{id, token (its own text), text (the reply text it
        completed, "" while held back), p (its probability), top: [{id, token, p}] (the likeliest
        ``probs`` alternatives, most likely first)}``."""
        def token(i: int) -> str:
            return self.tokenizer.token_bytes(i).decode("utf-8", "replace")
        top = [{"id": i, "token": token(i), "p": p} for i, p in top_probs(probs, self._probs)]
        record = {"id": tok, "token": token(tok), "text": text, "p": float(probs[tok]), "top": top}
        return record | {"masked": True} if self.grammar is not None else record

    def _take(self, tok: int) -> tuple[str, str | None]:
        """Add a sampled token to the reply: (the text it completes, the stop reason or None)."""
        if tok in self._eog:
            return "", "eog"
        self.ids.append(tok)
        self._history.append(tok)
        if self._ngrams is not None:
            self._ngrams.append(tok)
        piece, hit = self._stops.push(self._decoder.push(tok))
        self.text += piece
        if hit:
            return piece, "stop_string"
        if len(self.ids) >= self.max_tokens:
            return piece, "max_tokens"
        return piece, None

    def _keep(self, n: int) -> None:
        """Forget the cache's positions past ``n`` (a rejected draft's). A recurrent state goes back to
        the state before the pass (``HybridCache.truncate``): the accepted tokens then run again."""
        if n < len(self.tokens):
            self.cache.truncate(n)
            again = self.tokens[self.cache.n:n]
            del self.tokens[self.cache.n:]
            if again:
                self._forward(again, "none")

    def _time(self, t0: float, prefill: bool) -> None:
        dt, waited = time.perf_counter() - t0, self._wait_seconds() - self._waited0
        if prefill:
            self.stats.ttft_seconds = dt
            self.stats.prefill_wait_seconds = waited
        else:
            self.stats.decode_seconds += dt
            self.stats.decode_wait_seconds += waited

    def _finish(self, reason: str, piece: str = "") -> str:
        """End the reply: release held-back text (unless stopped early or at a stop string)."""
        if reason in ("eog", "max_tokens", "context"):
            tail, hit = self._stops.push(self._decoder.flush())
            tail += "" if hit else self._stops.flush()
            self.text += tail
            piece += tail
            if tail and self.token_probs:
                self.token_probs[-1]["text"] += tail     # the text held back was the last tokens'

        self.done = True
        self.stats.stop_reason = reason
        self.stats.generated_tokens = len(self.ids)
        if self.on_finish is not None:
            self.on_finish(self)
        return piece


def generate(engine: Any, prompt_ids: Sequence[int], request: Request | None = None,
             n_ctx: int | None = None) -> Generation:
    """Continue ``prompt_ids`` with ``engine``'s model (a :class:`pyengine.generation.Engine`): a
    :class:`Generation` to iterate for text pieces (see its doc), as ``request`` asks (default: llama.cpp's
    sampling defaults), in a new cache of ``n_ctx`` positions (default: the model's training context).
    Raises PyEngineError for an empty prompt, one longer than the context, or a bad ``lookup``."""
    return Generation(engine, prompt_ids, request, engine.model.new_cache(n_ctx))
