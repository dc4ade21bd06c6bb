"""The main worker's side of a split: its shard, driving the helpers', looks like a whole model.

:class:`SplitModel` has the :class:`pyengine.model.Model` interface the
generation loop uses (``forward``, ``new_cache``, ``config``, ``weights``): each
``forward`` first posts the command that runs the same forward pass in every
helper, then runs the main worker's own shard, meeting the helpers at each sum.
A Stop (KeyboardInterrupt) or an error in the middle gives the command up, so
the helpers leave it too and the next command starts clean.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.model.load import budget_matrices, held_nbytes, shard_matrices
from pyengine.model.trace import run
from pyengine.parallel.channel import EXIT, FORWARD, MAX_TOKENS, Channel, layout, ping
from pyengine.parallel.split import alignments, plan
from pyengine.weights.budget import check_fits, default_budget, forms_nbytes, plan_forms


class SplitModel:
    """The main worker's shard ``model`` (its comm is ``chan``) and the helpers it drives."""

    def __init__(self, model, chan: Channel):
        self.model, self.chan = model, chan

    def __getattr__(self, name: str) -> Any:     # config, weights, forms, shard ... as the main shard has them
        return getattr(self.model, name)

    @property
    def workers(self) -> int:
        return self.chan.count

    def wait_seconds(self) -> float:
        """Seconds this worker has waited at meetings for the others (all commands so far): the clock of
        :class:`pyengine.generation.Engine`'s ``wait_seconds``, which a reply's stats count."""
        return self.chan.waited

    def new_cache(self, n_ctx: int | None = None):
        return self.model.new_cache(n_ctx)

    def forward(self, tokens, cache, logits: str = "last") -> np.ndarray:
        """As :meth:`pyengine.model.Model.forward`, every worker running its shard (commands of at most
        ``channel.MAX_TOKENS`` tokens). Raises PyEngineError (a bad token, the context full, a helper
        silent or failed); KeyboardInterrupt (Stop) gives the command up."""
        ids = self.model.check_tokens(tokens, cache, logits)
        outs = []
        for i in range(0, len(ids), MAX_TOKENS):
            chunk = ids[i:i + MAX_TOKENS]
            mode = logits if logits == "all" or i + MAX_TOKENS >= len(ids) else "none"
            self.chan.send(FORWARD, chunk, pos=cache.n, logits=mode, cache=cache)
            try:
                outs.append(self.model.forward(chunk, cache, mode))
            except BaseException:
                self.chan.abort()                                         # the helpers leave it too
                raise
        if logits == "last":
            return outs[-1]
        return outs[0] if len(outs) == 1 else np.concatenate(outs)

    def traced_run(self, tokens: np.ndarray, cache, pos: int, recorder) -> np.ndarray:
        """:func:`pyengine.model.trace.run` in every worker at once (one FORWARD command flagged as a trace,
        at most ``channel.MAX_TOKENS`` tokens); the step's logits (n_vocab,)."""
        if len(tokens) > MAX_TOKENS:
            raise PyEngineError(f"a traced step of a split model runs at most {MAX_TOKENS} tokens, "
                                f"got {len(tokens)}: trace a step nearer the cache's end")
        self.chan.send(FORWARD, tokens, pos=pos, logits="last", cache=cache, trace=1 + recorder.heads)
        try:
            return run(self.model, cache, tokens, pos, recorder)
        except BaseException:
            self.chan.abort()
            raise

    def ping(self) -> float:
        """Seconds of one meeting of every worker."""
        return ping(self.chan)

    def close(self) -> None:
        """Send the helpers out of their loop (they let their shards go)."""
        self.chan.send(EXIT)


def channel_layout(config, shards) -> dict:
    """The shared buffer's layout for ``shards`` of a model of ``config``."""
    return layout(len(shards), config.n_embd, max(s.vocab[1] - s.vocab[0] for s in shards))


class LoadPlan:
    """How a model is loaded over ``len(shards)`` workers: the shards, each matrix's form (the same in every
    worker), the weight policy in use, the bytes of weights of the largest shard, and a note (why fewer
    workers than asked, or none)."""

    def __init__(self, shards: list, forms: dict, weights: str, nbytes: int, note: str = ""):
        self.shards, self.forms, self.weights, self.nbytes, self.note = shards, forms, weights, nbytes, note


def plan_load(gguf, config, weights: str, n_workers: int, budget=default_budget,
              names: dict[str, str] | None = None) -> LoadPlan:
    """Cut the model over ``n_workers`` workers (fewer when its matrices cannot be cut so many ways, with a
    note) and choose each matrix's form for the largest shard within ``budget(file bytes, workers)``.
    Raises PyEngineError when no form fits a worker's heap, naming what it needs and what would fit
    (``names``: as :func:`pyengine.weights.budget.check_fits` takes them)."""
    note = ""
    aligns = alignments(config, gguf.tensors)
    for n in range(n_workers, 0, -1):
        try:
            shards = plan(config, n, *aligns)
            break
        except PyEngineError as e:
            note = f"running in {n - 1} worker{'s' * (n > 2)}: {e}" if n > 1 else note
    n = len(shards)
    file_bytes = held_nbytes(gguf.tensors)
    largest = max(shards, key=lambda s: (s.ffn[1] - s.ffn[0], s.vocab[1] - s.vocab[0], s.ssm[1] - s.ssm[0]))
    listed = budget_matrices(shard_matrices(config, gguf.tensors, largest), gguf.tensors)
    policy, forms = plan_forms(listed, weights, budget(file_bytes, n))
    nbytes = forms_nbytes(listed, forms)
    check_fits(listed, forms, nbytes, n, file_bytes, names)
    return LoadPlan(shards, forms, policy, nbytes, note if n < n_workers else "")
