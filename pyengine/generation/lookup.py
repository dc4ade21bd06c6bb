"""Prompt lookup: drafts for speculative decoding from n-grams already in the conversation.

llama.cpp's lookup decoding (``examples/lookup``, ``common/ngram-cache.cpp``) in the form of
prompt lookup decoding (Saxena 2023): the model is asked to check a guess instead of making one.

* **draft**: the last ``n`` tokens of the conversation (prompt + reply so far), ``n`` from
  ``NGRAM_MAX`` down to ``NGRAM_MIN``, are looked up among the tokens before them; at their most
  recent earlier occurrence, the up-to-``k`` tokens that followed are the draft. The continuation
  may run into the tokens it is copying (``a b a b`` -> ``a b a ...``), as llama.cpp's
  ``get_token`` reads the conversation and the draft as one sequence;
* **verify** (:class:`pyengine.generation.loop.Generation`): the last token and the draft go
  through the model in one forward pass, whose ``1 + k`` rows of logits are the next-token
  logits after each. Row ``i`` is sampled as plain decoding would sample it (the penalties'
  history holding the tokens accepted so far); the draft's token ``i`` is accepted if the sample
  equals it, and the first sample that differs (or the one after a fully accepted draft) ends the
  pass. The KV cache keeps the positions of the accepted tokens only.

For a draft that is one token ``d`` for sure (q a point mass), speculative sampling's rule
(Leviathan et al. 2023, Chen et al. 2023: accept with min(1, p/q), else draw from
max(p - q, 0) renormalized) is: accept ``d`` with probability p(d), else draw from p without
``d``, renormalized. Drawing x from p and accepting when x == d is that rule: x == d has
probability p(d), and given x != d, x is distributed as p without d (llama.cpp's ``lookup.cpp``
checks its drafts the same way). It uses the one uniform plain decoding draws for the token, so a
seeded reply with lookup is the reply without it, token for token, wherever the batched logits
equal the single-token ones.

The index maps each n-gram to the position after its latest occurrence that has a continuation,
updated as tokens arrive: a draft costs ``NGRAM_MAX - NGRAM_MIN + 1`` dict look-ups.
"""

from __future__ import annotations

from collections.abc import Iterable

NGRAM_MAX = 4         # the longest n-gram looked up (llama.cpp's LLAMA_NGRAM_MAX)
NGRAM_MIN = 4         # the shortest (llama-server's --lookup-ngram-min): shorter matches are accepted too
                      # rarely to pay for their draft's forward pass (bench/LOOKUP.md)
LOOKUP_DEFAULT = 0    # tokens drafted at most per forward pass by default: off, as a draft's forward pass
                      # costs nearly its length in one-token passes (bench/LOOKUP.md)


class NgramIndex:
    """The conversation's tokens and, for every n-gram of NGRAM_MIN..NGRAM_MAX tokens, where its most
    recent occurrence followed by a token ends: ``where[ngram] = i`` when ``tokens[i - n:i] == ngram``
    and ``i < len(tokens)``."""

    def __init__(self, tokens: Iterable[int] = (), n_min: int | None = None, n_max: int | None = None):
        self.n_min = NGRAM_MIN if n_min is None else n_min          # read when built: a bench may set them
        self.n_max = NGRAM_MAX if n_max is None else n_max
        self.tokens: list[int] = []
        self.where: dict[tuple[int, ...], int] = {}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        for t in tokens:
            self.append(t)

    def append(self, token: int) -> None:
        """Add one token: the n-grams that end just before it now have it as their continuation."""
        i, toks = len(self.tokens), self.tokens
        for n in range(self.n_min, min(self.n_max, i) + 1):
            self.where[tuple(toks[i - n:i])] = i
        toks.append(int(token))

    def draft(self, k: int) -> list[int]:
        """Up to ``k`` tokens guessed to come next: what followed the most recent earlier occurrence of
        the longest suffix (NGRAM_MAX tokens down to NGRAM_MIN) seen before; [] if none was."""
        toks, n_tok = self.tokens, len(self.tokens)
        if k <= 0:
            return []
        for n in range(min(self.n_max, n_tok), self.n_min - 1, -1):
            start = self.where.get(tuple(toks[n_tok - n:]))
            if start is not None:
                out: list[int] = []
                for pos in range(start, start + k):    # pos < n_tok + len(out): always defined
                    out.append(toks[pos] if pos < n_tok else out[pos - n_tok])
                return out
        return []
