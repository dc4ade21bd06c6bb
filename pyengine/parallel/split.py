"""Who holds which part of the model: the attention heads, the FFN units and the vocabulary, cut over workers.

Each worker holds a :class:`Shard` (Megatron-style tensor parallelism): its
query heads and the key/value heads they read (rows of ``attn_q``, ``attn_k``,
``attn_v``; columns of ``attn_output``), its FFN units (rows of ``ffn_gate`` and
``ffn_up``; columns of ``ffn_down``) and its rows of the vocabulary matrices.
A layer then needs two sums over the workers (after the attention output and
after the FFN down projection), the embedding lookup one, and the logits one
gather: the points where the workers meet (``pyengine.parallel.channel``).

A column cut must fall on whole ggml blocks of the matrix it cuts (32 weights,
256 for the K-quants): :func:`plan` keeps every cut on those boundaries.
"""

from __future__ import annotations

import math

from pyengine.errors import PyEngineError
from pyengine.model.shard import Shard, whole_model

MAX_WORKERS = 9            # workers a shared buffer has room for (the main worker and 8 helpers)


def ranges(n: int, parts: int, align: int = 1) -> list[tuple[int, int]]:
    """``n`` cut into ``parts`` contiguous ``(first, end)`` ranges whose sizes differ by at most ``align``,
    every cut a multiple of ``align``. Raises PyEngineError when there are fewer groups than parts."""
    groups = -(-n // align)
    if parts < 1 or parts > groups:
        raise PyEngineError(f"cannot cut {n} into {parts} parts of whole groups of {align}")
    base, extra = divmod(groups, parts)
    bounds = [0]
    for i in range(parts):
        bounds.append(bounds[-1] + base + (i < extra))
    bounds = [min(n, b * align) for b in bounds]
    return list(zip(bounds[:-1], bounds[1:]))


def head_ranges(n_head: int, n_head_kv: int, n_workers: int, align: int) -> list[tuple[tuple, tuple]]:
    """Per worker ``(q heads, kv heads)``: whole KV groups when there are at least as many KV heads as
    workers, else each group's q heads cut among the workers sharing its KV head (which each
    compute it). Cuts of q heads fall on multiples of ``align`` heads. Raises PyEngineError."""
    g = n_head // n_head_kv                                               # q heads per KV head
    if n_workers <= n_head_kv:
        kv = ranges(n_head_kv, n_workers, max(1, align // math.gcd(align, g)))
        return [((a * g, b * g), (a, b)) for a, b in kv]
    per_group = ranges(n_workers, n_head_kv)                              # workers of each KV head
    out = []
    for kv_head, (w0, w1) in enumerate(per_group):
        for a, b in ranges(g, w1 - w0, align):
            out.append(((kv_head * g + a, kv_head * g + b), (kv_head, kv_head + 1)))
    return out


def plan(config, n_workers: int, head_align: int = 1, ffn_align: int = 1, conv_align: int = 1,
         ssm_align: int = 1) -> list[Shard]:
    """The shards of ``n_workers`` workers: ``head_align`` q heads, ``ffn_align`` FFN units, ``conv_align``
    short-convolution channels and ``ssm_align`` DeltaNet value heads make a whole block of the column-cut
    matrices (attn_output, ffn_down, shortconv.out_proj, ssm_out). DeltaNet heads too few to cut stay whole_model
    in every worker. Raises PyEngineError for a model that cannot be cut so many ways."""
    c = config
    if not 1 <= n_workers <= MAX_WORKERS:
        raise PyEngineError(f"cannot split a model over {n_workers} workers (1..{MAX_WORKERS})")
    if n_workers == 1:
        return [whole_model(c)]
    heads = head_ranges(c.n_head, c.n_head_kv, n_workers, head_align)
    ffn = ranges(c.n_ff, n_workers, ffn_align)
    vocab = ranges(c.n_vocab, n_workers)
    conv = ranges(c.n_embd, n_workers, conv_align)
    v = c.ssm_dt_rank                                                      # DeltaNet value heads
    ssm = ranges(v, n_workers, ssm_align) if n_workers <= -(-v // ssm_align) else [(0, v)] * n_workers
    return [Shard(i, n_workers, h, kv, *rest) for i, ((h, kv), *rest) in enumerate(zip(heads, ffn, vocab, conv, ssm))]


def alignments(config, tensors) -> tuple[int, int, int, int]:
    """(q heads, FFN units, short-convolution channels, DeltaNet value heads) that make a whole ggml block
    of every layer's attn_output, ffn_down, shortconv.out_proj and ssm_out."""
    c, heads, fb, cb, sb = config, 1, 1, 1, 1

    def block(name: str) -> int:
        return tensors[name].type.block_size if name in tensors else 1
    for il in range(c.n_layer):
        p = f"blk.{il}."
        wo, dv = block(p + "attn_output.weight"), c.head_dims(il)[1]
        heads = math.lcm(heads, wo // math.gcd(wo, dv))
        fb = math.lcm(fb, block(p + "ffn_down.weight"))
        cb = math.lcm(cb, block(p + "shortconv.out_proj.weight"))
        sb = math.lcm(sb, block(p + "ssm_out.weight"))
    d = max(c.ssm_d_state, 1)
    return heads, fb, cb, sb // math.gcd(sb, d)
