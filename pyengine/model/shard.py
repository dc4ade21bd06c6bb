"""What part of the model one worker holds: its attention heads, FFN units, vocabulary rows,
short-convolution channels (lfm2) and Gated DeltaNet value heads (qwen35).

A whole model is the one shard of one worker; ``pyengine.parallel.split``
cuts a model into the shards of several.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Shard:
    """Worker ``index`` of ``count``: q heads ``heads``, KV heads ``kv_heads``, FFN units ``ffn``, vocabulary
    rows ``vocab``, channels ``conv`` of the short convolutions (lfm2), value heads ``ssm`` of the Gated
    DeltaNet layers (qwen35; all of them in every worker when they cannot be cut), each a range
    ``(first, end)``."""
    index: int
    count: int
    heads: tuple[int, int]
    kv_heads: tuple[int, int]
    ffn: tuple[int, int]
    vocab: tuple[int, int]
    conv: tuple[int, int] = (0, 0)
    ssm: tuple[int, int] = (0, 0)

    RANGES = ("heads", "kv_heads", "ffn", "vocab", "conv", "ssm")

    def as_dict(self) -> dict:
        return {"index": self.index, "count": self.count, **{k: getattr(self, k) for k in self.RANGES}}

    @classmethod
    def from_dict(cls, d: dict) -> Shard:
        return cls(d["index"], d["count"], *(tuple(d[k]) for k in cls.RANGES))


def whole_model(config) -> Shard:
    """The whole model in one worker."""
    c = config
    return Shard(0, 1, (0, c.n_head), (0, c.n_head_kv), (0, c.n_ff), (0, c.n_vocab), (0, c.n_embd), (0, c.ssm_dt_rank))


@dataclass(frozen=True)
class Placement:
    """Where a load goes: ``shard`` of the model (None: all of it), its matrices in ``forms`` (the main
    worker's plan, ``{key: Form}``; None: planned at load), its partial results summed by ``comm``
    (``pyengine.parallel.channel.Channel``; None: a model held whole)."""
    shard: Shard | None = None
    forms: dict | None = None
    comm: Any = None
