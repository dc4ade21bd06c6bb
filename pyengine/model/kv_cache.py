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


class KVCache:
    """Keys and values of every layer for the positions seen so far.

    ``k[il]`` is (n_head_kv, capacity, Dk) float32 and ``v[il]`` (n_head_kv,
    capacity, Dv): one head's positions are contiguous rows, so attention reads
    ``k[il][:, :n]`` without a copy. Capacity doubles as needed up to ``n_ctx``.
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
        self.k = [np.zeros((0 if w else n_head_kv, cap, head_dim_k), np.float32) for w in conv]
        self.v = [np.zeros((0 if w else n_head_kv, cap, head_dim_v), np.float32) for w in conv]
        self.conv = [np.zeros((cap, w), np.float32) if w else None for w in conv]

    @property
    def capacity(self) -> int:
        return self.k[0].shape[1]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k + self.v + self.conv if a is not None)

    def reserve(self, n: int) -> None:
        """Make room for positions 0..n-1 (n <= n_ctx), keeping what is stored."""
        if n <= self.capacity:
            return
        cap = min(self.n_ctx, max(n, 2 * self.capacity))
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

