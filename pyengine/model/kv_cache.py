"""The KV cache: every layer's keys and values for the positions seen so far.

It adds ``2 · n_layer · n_ctx · n_head_kv · head_dim · 4`` bytes (gemma-3-270m:
36 KiB per token; SmolLM2: 45 KiB per token) and grows with the conversation up
to ``n_ctx``. A short-convolution block (lfm2) keeps its convolution's input at
every position in place of keys and values (``n_embd · 4`` bytes per token),
so its state at any position is the rows before it: going back is a truncate,
as for attention.
"""

from __future__ import annotations

import itertools

import numpy as np

from pyengine.errors import PyEngineError

_IDS = itertools.count(1)


def _per_layer(x, n_layer: int) -> tuple:
    """A size given for all layers (an int) or per layer (a sequence), as one per layer."""
    return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n_layer


class KVCache:
    """Keys and values of every layer for the positions seen so far.

    ``k[il]`` is (n_head_kv, capacity, Dk) float32 and ``v[il]`` (n_head_kv,
    capacity, Dv): one head's positions are contiguous rows, so attention reads
    ``k[il][:, :n]`` without a copy. Heads and head sizes may differ per layer (gemma4: a
    layer that reads another's keys and values holds 0 heads). Capacity doubles as needed up to ``n_ctx``.
    ``conv[il]`` is (capacity, channels) float32 for a short-convolution block
    (its ``k[il]``, ``v[il]`` hold no heads), None for attention.
    ``n`` is the number of positions filled; ``truncate(n)`` forgets the rest
    (a chat reuses the common prefix of the previous turn).
    """

    def __init__(self, n_layer: int, n_head_kv: int, head_dim_k: int, head_dim_v: int, n_ctx: int,
                 conv_channels: tuple = ()):
        self.n_ctx, self.n = n_ctx, 0
        self.id = next(_IDS)          # names this cache to the helper workers of a split model
        cap = min(n_ctx, 256)
        conv = tuple(conv_channels) or (0,) * n_layer                    # per layer: channels, 0 for attention
        heads, dk, dv = (_per_layer(x, n_layer) for x in (n_head_kv, head_dim_k, head_dim_v))
        self.k = [np.zeros((0 if w else h, cap, d), np.float32) for w, h, d in zip(conv, heads, dk)]
        self.v = [np.zeros((0 if w else h, cap, d), np.float32) for w, h, d in zip(conv, heads, dv)]
        self.conv = [np.zeros((cap, w), np.float32) if w else None for w in conv]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[1]

    def _positions_nbytes(self) -> int:
        """Bytes of the arrays held per position: keys, values, convolution inputs (at capacity)."""
        return sum(a.nbytes for a in self.k + self.v + self.conv if a is not None)

    @property
    def nbytes(self) -> int:
        return self._positions_nbytes()

    @property
    def position_nbytes(self) -> int:
        """Bytes one more position takes: every layer's keys and values (or convolution input) of it."""
        return self._positions_nbytes() // max(self.capacity, 1)

    @property
    def state_nbytes_max(self) -> int:
        """Bytes the cache may hold whatever its length (a hybrid model's recurrent states): none here."""
        return 0

    def reserve(self, n: int) -> None:
        """Make room for positions 0..n-1 (n <= n_ctx), keeping what is stored: 1.5 times the room at least
        (a heap never shrinks: doubling left up to half of a browser's cache unused)."""
        if n <= self.capacity:
            return
        cap = min(self.n_ctx, max(n, self.capacity + self.capacity // 2))
        for arrs in (self.k, self.v):
            for il, a in enumerate(arrs):
                b = np.zeros((a.shape[0], cap, a.shape[2]), np.float32)
                b[:, :self.n] = a[:, :self.n]
                arrs[il] = b
        for il, a in enumerate(self.conv):
            if a is not None:
                b = np.zeros((cap, a.shape[1]), np.float32)
                b[:self.n] = a[:self.n]
                self.conv[il] = b

    def truncate(self, n: int) -> None:
        """Keep the first ``n`` positions (0 <= n <= self.n)."""
        if not 0 <= n <= self.n:
            raise PyEngineError(f"cannot truncate the KV cache to {n} positions: it holds {self.n}")
        self.n = n

    def start_of(self, n: int) -> int:
        """The position a pass up to ``n`` starts from after ``truncate(n)``: ``n`` itself here."""
        return n

    def snapshot(self, a: int, b: int) -> tuple:
        """What passes over positions ``a..b-1`` change, to put back with :meth:`restore`: ``n`` and copies of
        those rows of every layer (a trace re-runs a step without disturbing the conversation's cache)."""
        b = min(b, self.n)
        rows = [[x[:, a:b].copy() for x in self.k], [x[:, a:b].copy() for x in self.v],
                [None if x is None else x[a:b].copy() for x in self.conv]]
        return self.n, a, rows

    def restore(self, snap: tuple) -> None:
        """Put back what :meth:`snapshot` kept (the arrays may have grown since: rows are copied into them)."""
        self.n, a, (k, v, conv) = snap[0], snap[1], snap[2]
        for arrs, kept in ((self.k, k), (self.v, v)):
            for x, y in zip(arrs, kept):
                x[:, a:a + y.shape[1]] = y
        for x, y in zip(self.conv, conv):
            if x is not None:
                x[a:a + len(y)] = y

    def advance(self, n: int, prefill: bool = False) -> None:
        """A forward pass filled positions up to ``n``: they are now held (``prefill``: see
        :class:`HybridCache`)."""
        self.n = n


MAX_CHECKPOINTS = 8      # recurrent states kept to go back to (each: every DeltaNet layer's state)


class HybridCache(KVCache):
    """The KV cache of a hybrid model's attention layers, and the recurrent state of its Gated DeltaNet
    layers (:mod:`pyengine.model.delta_net`) at position ``n``.

    ``window[il]`` (K-1, C) and ``s[il]`` (H, Dv, Dk) float32 are layer ``il``'s state (None for an
    attention layer, whose ``k[il]``/``v[il]`` hold its keys and values; a DeltaNet layer's are empty).
    A forward pass stages each layer's new state (:meth:`stage`) and :meth:`advance` makes them the
    state, so a pass stopped midway leaves the state at ``n`` as it was. States are never changed in
    place: a snapshot is a list of references.

    A recurrent state cannot be cut back like keys and values, so :meth:`truncate` goes back to the
    latest state it holds at or before the position asked for: the state before the last forward pass,
    the states before and after each of the last prefills (``MAX_CHECKPOINTS`` states), or the empty
    state at 0. The caller runs the tokens from ``n`` again (:class:`pyengine.generation.loop.Generation`
    does).
    """

    def __init__(self, recurrent: tuple, n_head_kv: int, head_dim_k: int, head_dim_v: int, n_ctx: int,
                 shapes: tuple[tuple[int, int], tuple[int, int, int]]):
        super().__init__(len(recurrent), n_head_kv, head_dim_k, head_dim_v, n_ctx)
        for il, rec in enumerate(recurrent):
            if rec:
                self.k[il], self.v[il] = self.k[il][:0], self.v[il][:0]   # (0, capacity, D): no keys
        self.recurrent = recurrent
        self.window_shape, self.state_shape = shapes     # (K-1, C) and (H, Dv, Dk) of a layer
        self.window, self.s = self._empty()
        self._staged: dict[int, tuple] = {}
        self.last: tuple | None = None          # (position, window, s) before the last forward pass
        self.checkpoints: dict[int, tuple] = {}  # position -> (window, s), before each prefill

    def _empty(self) -> tuple[list, list]:
        w = [np.zeros(self.window_shape, np.float32) if r else None for r in self.recurrent]
        s = [np.zeros(self.state_shape, np.float32) if r else None for r in self.recurrent]
        return w, s

    @property
    def nbytes(self) -> int:
        held = {id(a): a.nbytes for a in self.window + self.s if a is not None}
        for _, w, s in [self.last] if self.last else []:
            held.update({id(a): a.nbytes for a in w + s if a is not None})
        for w, s in self.checkpoints.values():
            held.update({id(a): a.nbytes for a in w + s if a is not None})
        return super().nbytes + sum(held.values())

    @property
    def state_nbytes_max(self) -> int:
        """The most bytes of recurrent states held at once: the current, the last, a pass's staged and the
        checkpoints, each every DeltaNet layer's window and S."""
        one = sum(4 * (int(np.prod(self.window_shape)) + int(np.prod(self.state_shape))) for r in self.recurrent if r)
        return one * (MAX_CHECKPOINTS + 3)

    def stage(self, il: int, window: np.ndarray, s: np.ndarray) -> None:
        """Layer ``il``'s state after the forward pass under way (made the state by :meth:`advance`)."""
        self._staged[il] = (window, s)

    def staged(self, il: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Layer ``il``'s state staged by the forward pass under way (window, s), or None."""
        return self._staged.get(il)

    def state(self, il: int) -> tuple[np.ndarray, np.ndarray]:
        """Layer ``il``'s state at ``n``: (window (K-1, C), s (H, Dv, Dk))."""
        return self.window[il], self.s[il]

    def advance(self, n: int, prefill: bool = False) -> None:
        """Make the staged states the state at ``n``. The state before is kept as ``last``; a prefill keeps
        the states before and after it as checkpoints (the start of a turn, and its prompt without the
        reply, which a template may render anew: the oldest goes past ``MAX_CHECKPOINTS``)."""
        before = (self.n, list(self.window), list(self.s))
        self.last = before
        for il, (w, s) in self._staged.items():
            self.window[il], self.s[il] = w, s
        self._staged = {}
        if prefill:
            if before[0]:                                                # (at 0 the state is the empty one)
                self.checkpoints[before[0]] = before[1:]
            self.checkpoints[n] = (list(self.window), list(self.s))
            while len(self.checkpoints) > MAX_CHECKPOINTS:
                del self.checkpoints[min(self.checkpoints)]
        self.n = n

    def _held(self, n: int) -> dict:
        """The states held at or before position ``n``: {position: (window, s)}."""
        held = {p: ws for p, ws in self.checkpoints.items() if p <= n}
        if self.last is not None and self.last[0] <= n:
            held[self.last[0]] = self.last[1:]
        return held

    def start_of(self, n: int) -> int:
        """The position :meth:`truncate` to ``n`` goes back to: the latest state held at or before it."""
        return n if n == self.n else max(self._held(n), default=0)

    def snapshot(self, a: int, b: int) -> tuple:
        """As :meth:`KVCache.snapshot`, with the recurrent states (references: they are never changed in place)."""
        states = (list(self.window), list(self.s), self.last, dict(self.checkpoints))
        return super().snapshot(a, b) + (states,)

    def restore(self, snap: tuple) -> None:
        super().restore(snap)
        w, s, self.last, self.checkpoints = snap[3]
        self.window, self.s, self._staged = list(w), list(s), {}

    def drop_staged(self) -> None:
        """Forget the states of a forward pass that did not finish."""
        self._staged = {}

    def truncate(self, n: int) -> None:
        """Go back to the latest held state at or before position ``n`` (0 <= n <= self.n): ``self.n`` is
        then that position, at most ``n``."""
        if not 0 <= n <= self.n:
            raise PyEngineError(f"cannot truncate the KV cache to {n} positions: it holds {self.n}")
        self._staged = {}
        if n == self.n:
            return
        held = self._held(n)
        p = max(held, default=0)
        w, s = held[p] if p in held else self._empty()
        self.window, self.s, self.n = list(w), list(s), p
        self.checkpoints = {q: ws for q, ws in self.checkpoints.items() if q <= p}
        self.last = None if self.last is None or self.last[0] > p else self.last
