"""Sampling: choose the next token id from a logits vector.

The chain is llama.cpp's default (common/sampling.cpp ``common_params_sampling::samplers``,
each step as in src/llama-sampler.cpp), leaving out the steps that are off by default
(DRY, top-n-sigma, typical-p, XTC):

    penalties -> top-k -> top-p -> min-p -> temperature -> dist

* **penalties** (``llama_sampler_penalties_apply``): every token seen in the last
  ``repeat_last_n`` tokens (prompt included) has its logit divided by ``repeat_penalty``
  when positive and multiplied by it when zero or negative;
* **top-k** keeps the ``top_k`` largest logits (0 = all);
* **top-p** takes the softmax of what is left (at temperature 1, since temperature comes
  later) and keeps the shortest run of most likely tokens whose probability sums to at
  least ``top_p`` (1 = all);
* **min-p** keeps the tokens whose logit is at least ``max + ln(min_p)``, i.e. whose
  probability is at least ``min_p`` times the top one's (0 = all);
* **temperature** divides the logits; 0 (or less) is greedy: the argmax after penalties;
* **dist** draws from the softmax of the survivors with a numpy ``Generator`` (seeded:
  repeatable; llama.cpp's mt19937 draws differ, so sampled, not greedy, runs differ from it).

:meth:`Sampler.distribution` is the chain up to ``dist``: the ids and probabilities the token is
drawn from; :meth:`Sampler.draw` is ``dist``; :meth:`Sampler.sample` is both.
:meth:`Sampler.probabilities` is what the page and the CLI show of a step (``--probs``): the softmax
of the penalized logits divided by the temperature, over the whole vocabulary, before top-k, top-p
and min-p cut it (at temperature 0, the softmax of the penalized logits); :func:`top_probs` its
likeliest few.

The vocabulary can be 262,144 wide: top-k bounds the k-th largest logit from a 1/16 sample,
``argpartition``s the few hundred candidates above it and sorts only the k survivors; top-p
without top-k first tries the 256 most likely tokens, as llama.cpp does, then 8 times more at
each try rather than sorting the whole vocabulary. The survivors of each step equal llama.cpp's
(tests/generation/test_sampling.py runs llama.cpp's own samplers on the same logits); the prompt is in the
penalties' window as in llama-cli, which accepts the prompt tokens into its sampler
("push the prompt in the sampling context in order to apply repetition penalties later").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pyengine.errors import PyEngineError

TOP_K_STRIDE = 16         # top-k on a wide vocabulary first bounds the k-th largest from every 16th logit
TOP_P_FIRST_TRY = 256     # top-p without top-k first sorts the 256 likeliest (llama.cpp's heuristic), then 8x more


@dataclass
class SamplerParams:
    """Sampling settings; the defaults are llama.cpp's (``common_params_sampling``).

    temperature: 0 = greedy; top_k: 0 = off; top_p: 1 = off; min_p: 0 = off;
    repeat_penalty: 1 = off; repeat_last_n: tokens of history penalized (0 = off, -1 = all);
    seed: None = a fresh random seed each time.
    """
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = None

    def check(self) -> SamplerParams:
        """Raise PyEngineError naming the first setting out of range; return self."""
        bad = [("temperature", self.temperature >= 0), ("top_k", self.top_k >= 0),
               ("top_p", 0 < self.top_p <= 1), ("min_p", 0 <= self.min_p <= 1),
               ("repeat_penalty", self.repeat_penalty > 0), ("repeat_last_n", self.repeat_last_n >= -1),
               ("seed", self.seed is None or self.seed >= 0)]
        for name, ok in bad:
            if not ok:
                raise PyEngineError(f"sampling: {name} = {getattr(self, name)} is out of range")
        return self


# ----------------------------------------------------------------------------
# the steps: each takes candidates (ids, logits) and returns the survivors

def apply_penalties(logits: np.ndarray, history: Sequence[int], penalty: float, last_n: int) -> np.ndarray:
    """Repetition penalty over the last ``last_n`` tokens of ``history`` (-1 = all of it).

    logits: (n_vocab,) float32, not modified; returns a penalized copy (or ``logits`` itself when
    the penalty is off). Each distinct recent token is penalized once: positive logits are divided
    by ``penalty``, others multiplied (llama.cpp ``llama_sampler_penalties_apply``).
    """
    if penalty == 1.0 or last_n == 0 or len(history) == 0:
        return logits
    recent = history if last_n < 0 else history[-last_n:]
    ids = np.unique(np.asarray(recent, dtype=np.int64))
    ids = ids[(ids >= 0) & (ids < logits.shape[0])]
    out = logits.copy()                                              # (n_vocab,)
    x = out[ids]                                                     # (n_recent,)
    out[ids] = np.where(x <= 0, x * np.float32(penalty), x / np.float32(penalty))
    return out


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """The ``k`` largest logits, sorted descending: (ids (k,) int64, logits (k,) float32, sorted=True).
    k <= 0 or >= n_vocab keeps every token, unsorted.

    A wide vocabulary is first cut to the logits at or above the k-th largest of every
    ``TOP_K_STRIDE``-th logit: a lower bound of the k-th largest of all, so no top-k token is lost,
    and a few hundred candidates remain for ``argpartition``."""
    n = logits.shape[0]
    if k <= 0 or k >= n:
        return np.arange(n), logits, False
    cand = np.arange(n)
    if n >= TOP_K_STRIDE * k * 4:
        bound = np.partition(logits[::TOP_K_STRIDE], -k)[-k]        # k-th largest of a 1/16 sample
        cand = np.flatnonzero(logits >= bound)                       # (m,) m >= k
    m = cand.shape[0]
    ids = cand[np.argpartition(logits[cand], m - k)[m - k:]]         # (k,) the k largest, any order
    ids = ids[np.argsort(-logits[ids], kind="stable")]               # (k,) descending
    return ids, logits[ids], True


def softmax(x: np.ndarray) -> np.ndarray:
    """(n,) float -> (n,) float64 probabilities; max-subtracted for stability."""
    e = np.exp(x.astype(np.float64) - x.max())
    return e / e.sum()


def _sort_desc(ids: np.ndarray, vals: np.ndarray, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``n`` largest candidates (all when None), sorted descending by value."""
    if n is not None and n < vals.shape[0]:
        part = np.argpartition(-vals, n - 1)[:n]
        order = part[np.argsort(-vals[part], kind="stable")]
    else:
        order = np.argsort(-vals, kind="stable")
    return ids[order], vals[order]


def top_p(ids: np.ndarray, vals: np.ndarray, is_sorted: bool, p: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """Keep the shortest most-likely prefix whose probability mass is >= p (llama.cpp
    ``llama_sampler_top_p_apply``, min_keep 1). Returns sorted survivors.

    The sums are float32 and sequential (``np.cumsum``), in the candidates' order, as llama.cpp
    adds them: over a wide flat vocabulary the rounding decides which tokens at the edge stay."""
    if p >= 1.0:
        return ids, vals, is_sorted
    n, top = vals.shape[0], vals.max()
    z = np.cumsum(np.exp(vals - top, dtype=np.float32))[-1]          # softmax denominator, float32 running sum
    n_try = n if is_sorted or n <= 1024 else TOP_P_FIRST_TRY
    while True:
        s_ids, s_vals = (ids, vals) if is_sorted else _sort_desc(ids, vals, n_try)
        cum = np.cumsum(np.exp(s_vals - top, dtype=np.float32) / z)   # (n_try,) cumulative probability
        reached = np.flatnonzero(cum >= p)
        if reached.size or s_vals.shape[0] == n:
            break
        n_try = min(n, n_try * 8)                                    # not enough mass yet: look at 8x more
    keep = reached[0] + 1 if reached.size else n
    return s_ids[:keep], s_vals[:keep], True


def min_p(ids: np.ndarray, vals: np.ndarray, is_sorted: bool, p: float) -> tuple[np.ndarray, np.ndarray, bool]:
    """Keep tokens with logit >= max + ln(p), i.e. probability >= p * the top probability
    (llama.cpp ``llama_sampler_min_p_apply``)."""
    if p <= 0.0 or vals.shape[0] == 0:
        return ids, vals, is_sorted
    keep = vals >= vals.max() + np.float32(np.log(p))                # (n,) bool
    return ids[keep], vals[keep], is_sorted


# ----------------------------------------------------------------------------
# the chain

class Sampler:
    """Chooses next tokens with :class:`SamplerParams`; holds the random generator, so a seeded
    Sampler gives the same ids for the same logits and histories."""

    def __init__(self, params: SamplerParams | None = None):
        self.params = (params or SamplerParams()).check()
        self.rng = np.random.default_rng(self.params.seed)

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """The next token id for ``logits`` ((n_vocab,) float32) after the tokens ``history``
        (the prompt and everything generated so far: the penalties' window): greedy's argmax, or a
        draw from :meth:`distribution`. Raises PyEngineError when the logits hold a NaN or +inf (a
        file whose weights are not finite)."""
        ids, probs = self.distribution(logits, history)
        if self.params.temperature <= 0.0:
            return int(ids[0])                                       # greedy: no draw
        return self.draw(ids, probs)

    def distribution(self, logits: np.ndarray, history: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
        """The distribution the next token is drawn from, after the whole chain: (ids (n,) int64,
        probs (n,) float64 summing to 1), n the survivors of top-k, top-p and min-p, in no promised
        order. Greedy (temperature 0) is the argmax after penalties with probability 1. Raises
        PyEngineError as :meth:`sample` does."""
        sp = self.params
        logits = apply_penalties(logits, history, sp.repeat_penalty, sp.repeat_last_n)
        best = int(np.argmax(logits))                                # a NaN, if there is one
        if not np.isfinite(logits[best]):
            raise PyEngineError(f"the model's logits hold {logits[best]} (token {best}): its weights are not "
                                f"all finite numbers")
        if sp.temperature <= 0.0:
            return np.array([best]), np.ones(1)                      # greedy
        ids, vals, is_sorted = top_k(logits, sp.top_k)
        ids, vals, is_sorted = top_p(ids, vals, is_sorted, sp.top_p)
        ids, vals, is_sorted = min_p(ids, vals, is_sorted, sp.min_p)
        return ids, softmax(vals / np.float32(sp.temperature))       # (n_kept,) int64, float64

    def probabilities(self, logits: np.ndarray, history: Sequence[int] = ()) -> np.ndarray:
        """(n_vocab,) float64: the softmax of ``logits`` after the penalties and the temperature, before
        top-k, top-p and min-p (temperature 0: of the penalized logits, as at temperature 1)."""
        sp = self.params
        logits = apply_penalties(logits, history, sp.repeat_penalty, sp.repeat_last_n)
        t = sp.temperature if sp.temperature > 0.0 else 1.0
        return softmax(logits / np.float32(t))

    def draw(self, ids: np.ndarray, probs: np.ndarray) -> int:
        """One id drawn from ``probs`` ((n,) float64) with one uniform of the generator: the id whose
        slice of the cumulative sum the uniform lands in (``dist``)."""
        i = int(np.searchsorted(np.cumsum(probs), self.rng.random() * probs.sum(), side="right"))
        return int(ids[min(i, ids.shape[0] - 1)])


def top_probs(probs: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The ``n`` likeliest (id, probability) of ``probs`` ((n_vocab,)), most likely first (ties: lower id)."""
    n = min(n, probs.shape[0])
    ids = np.argpartition(-probs, n - 1)[:n] if n < probs.shape[0] else np.arange(probs.shape[0])
    ids = ids[np.lexsort((ids, -probs[ids]))]
    return [(int(i), float(probs[i])) for i in ids]
