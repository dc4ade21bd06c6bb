"""A trace of one forward step: the logit lens, the attention weights and the step's cost.

The step that reads the token at position ``n`` (and gives the logits of the token after it) is run
again on the same KV cache and weights, with a :class:`Recorder` passed down the forward pass
(:meth:`pyengine.model.transformer.Model.forward`; None there when off, a check per layer). It keeps,
for each layer:

- the **logit lens** (nostalgebraist, "interpreting GPT: the logit lens", 2020): the residual stream
  after the layer put through the model's own head, ``output · output_norm(x)`` with gemma's soft-cap
  and granite's scale (:meth:`Model.head`), as probabilities: the top ``LENS_TOP`` and the final
  answer's rank and probability. After the last layer it is the step's logits;
- the **attention weights** of the step's query (``softmax(q·kᵀ)`` of "Attention Is All You Need",
  :func:`pyengine.model.ops.attention_weights`): (heads, positions) over the positions the layer sees
  (a sliding window: only the window, from ``first``). A layer reading another's keys and values
  (gemma4's shared KV) names it (``kv_layer``); a short convolution (lfm2) has no weights; a Gated
  DeltaNet layer (qwen35) has its recurrent state in their place: the norm of each value head's S;
- the **cost**: seconds per kind of operation (each matrix by its GGUF name, attention, norms, the
  rest), timed by wrapping the model's matrices and stages for the step only (the lens and the
  weights are not counted), and the bytes of weights each matrix read.

A split model (:mod:`pyengine.parallel`) traces in every worker at once: the lens's logits are gathered
like the step's, each worker's heads and value heads summed into the whole (every worker computes
the same zeros elsewhere), so the trace is the whole model's. The cache is put back as it was
(:meth:`KVCache.snapshot`): the conversation goes on from the same keys, values and states.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any

import numpy as np

from pyengine.model.blocks import Attention, ShortConv
from pyengine.model.delta_net import DeltaNet
from pyengine.model.ops import Scoring, attention_weights

LENS_TOP = 5            # tokens the logit lens keeps per layer
MATRICES = {"wqkv": "attn_qkv", "wo": "attn_output", "w_gate_up": "ffn_gate_up", "w_down": "ffn_down",
            "conv_in": "shortconv.in_proj", "conv_out": "shortconv.out_proj", "inp_gate": "inp_gate",
            "proj": "proj", "w_in": "ssm_in", "w_out": "ssm_out"}   # block field -> the name a step's cost shows
# (a DeltaNet's w_in: attn_qkv, attn_gate, ssm_beta and ssm_alpha)
MODEL_MATRICES = {"token_embd": "token_embd", "output": "output"}
STAGES = {"norm": "norms", "residual": "norms", "ffn": "rest"}   # Block method or part -> kind
MIXERS = {Attention: "attention", ShortConv: "short convolution", DeltaNet: "delta rule"}
COMM = {"all_reduce": "all-reduce", "gather": "gather"}  # a split model's meetings
KINDS = {"attention": "attention", "shared": "attention over another layer's keys and values",
         "conv": "short convolution (no attention weights)", "delta": "Gated DeltaNet (the state's norm per head)"}


class _Matrix:
    """A weight form whose products and row reads are timed and counted by a :class:`Recorder`."""

    def __init__(self, rec: Recorder, name: str, w: Any):
        self._rec, self._name, self._w = rec, name, w

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return self._rec.run(self._name, self._w.nbytes, self._w, x)

    def rows(self, ids: np.ndarray) -> np.ndarray:
        return self._rec.run(self._name, self._w.nbytes * len(ids) // max(self._w.shape[0], 1), self._w.rows, ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._w, name)


class Recorder:
    """What one traced step of ``model`` (a whole model or one worker's shard) shows; ``heads``: the q heads
    kept (the first ones; None: all). Installed for the step only (:meth:`installed`)."""

    def __init__(self, model, heads: int | None = None):
        c = model.config
        self.model, self.heads = model, min(heads or c.n_head, c.n_head)
        self.mixers = [layer.mixer for layer in model.layers]   # (wrapped in the model during the step)
        self.layers: list[dict] = []
        self.stages: dict[str, dict] = {}
        self._lens: list[np.ndarray] = []       # each layer's lens logits (n_vocab,)
        self._ops: dict[str, float] = {}
        self._bytes: dict[str, int] = {}
        self._stack: list[float] = []           # time spent in what the running wrappers called
        self._t = self._over = 0.0
        self.overhead = 0.0                     # seconds of the recorder's own work in the step
        self.wall = 0.0                         # seconds of the traced forward pass, the recorder's work included
        self._quiet = False
        self._attn: tuple | None = None         # the last attend's (weights (H, S), first position)

    # --- timing
    def run(self, label: str, nbytes: int, fn, *args):
        """``fn(*args)``, its time (less what it calls that is timed too) counted under ``label``."""
        if self._quiet:
            return fn(*args)
        self._stack.append(0.0)
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            dt = time.perf_counter() - t0
            inner = self._stack.pop()
            self._ops[label] = self._ops.get(label, 0.0) + dt - inner
            self._bytes[label] = self._bytes.get(label, 0) + nbytes
            if self._stack:
                self._stack[-1] += dt

    @contextmanager
    def _own(self):
        """The recorder's own work: not counted in the step, its wrappers quiet."""
        t0, self._quiet = time.perf_counter(), True
        try:
            yield
        finally:
            self._quiet = False
            dt = time.perf_counter() - t0
            self._over += dt
            self.overhead += dt
            if self._stack:
                self._stack[-1] += dt

    def _close(self) -> dict:
        """The cost of the part of the step since the last close: seconds, per kind, bytes."""
        now = time.perf_counter()
        seconds = now - self._t - self._over
        ops = self._ops
        ops["rest"] = ops.get("rest", 0.0) + max(0.0, seconds - sum(ops.values()))   # what no wrapper timed
        out = {"seconds": seconds, "ops": ops, "bytes": {k: v for k, v in self._bytes.items() if v}}
        self._ops, self._bytes, self._t, self._over = {}, {}, now, 0.0
        return out

    # --- installed on the model for one step
    def _wrap(self, label: str, fn):
        return lambda *args: self.run(label, 0, fn, *args)

    def _targets(self):
        """(object, attribute, replacement) for every matrix, stage and meeting timed."""
        m = self.model
        for layer in m.layers:
            mixer = layer.mixer
            for part in (layer, mixer, layer.ffn):
                for field, name in MATRICES.items():
                    if getattr(part, field, None) is not None:
                        yield part, field, _Matrix(self, name, getattr(part, field))
            for attr, label in STAGES.items():
                yield layer, attr, self._wrap(label, getattr(layer, attr))
            yield layer, "mixer", self._wrap(MIXERS[type(mixer)], mixer)
            if isinstance(mixer, Attention):
                yield mixer, "attend", self._attender(mixer)
        for field, name in MODEL_MATRICES.items():
            yield m, field, _Matrix(self, name, getattr(m, field))
        if m.comm.count > 1:
            for method, label in COMM.items():
                yield m.comm, method, self._wrap(label, getattr(m.comm, method))

    @contextmanager
    def installed(self):
        """The model's matrices and stages wrapped for the step, put back after."""
        saved = []
        for obj, attr, new in self._targets():
            saved.append((obj, attr, attr in vars(obj), getattr(obj, attr)))
            setattr(obj, attr, new)
        try:
            yield self
        finally:
            for obj, attr, own, old in reversed(saved):
                if own:
                    setattr(obj, attr, old)
                else:
                    delattr(obj, attr)

    def _attender(self, mixer: Attention):
        """``mixer.attend``, timed, keeping the weights of the step's last query."""
        real = self._wrap("attention", mixer.attend)

        def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, pos: int, window: int) -> np.ndarray:
            out = real(q, k, v, pos, window)
            with self._own():
                p = pos + q.shape[2] - 1                                  # the last query's position
                first = max(0, p - window + 1) if window else 0
                w = attention_weights(q[:, :, -1:], k[:, first:p + 1], p, first, window,
                                      Scoring(mixer.scoring.cap))         # (Hkv, G, 1, S)
                self._attn = (w.reshape(-1, w.shape[-1]), first)          # (this shard's heads, S)
            return out
        return attend

    # --- called by the forward pass
    def start(self) -> None:
        self._t = self._t0 = time.perf_counter()
        self._over = self.overhead = 0.0

    def embedded(self, x: np.ndarray) -> None:
        self.stages["embed"] = self._close()

    def layer(self, il: int, x: np.ndarray, cache) -> None:
        rec = self._close()
        with self._own():
            rec.update(layer=il, **self._mixer(il, cache))
            logits = self.model.head(x[-1:])                              # (1, n_vocab); None on a helper
            if logits is not None:
                self._lens.append(logits[0])
            self.layers.append(rec)
        self._t, self._over = time.perf_counter(), 0.0

    def finished(self) -> None:
        self.stages["output"] = self._close()

    # --- what each layer mixes in
    def _mixer(self, il: int, cache) -> dict:
        m, mixer = self.model, self.mixers[il]
        if isinstance(mixer, ShortConv):
            return {"kind": "conv", "note": KINDS["conv"]}
        if isinstance(mixer, DeltaNet):
            return {"kind": "delta", "note": KINDS["delta"], "state_norm": self._state_norms(il, cache)}
        weights, first = self._attn
        h0, h1 = m.shard.heads
        full = np.zeros((self.heads, weights.shape[1]), np.float32)      # (heads kept, S)
        if h0 < self.heads:
            full[h0:min(h1, self.heads)] = weights[:self.heads - h0]
        full = m.comm.all_reduce(full)                                    # every worker's heads
        src = mixer.src
        kind = "attention" if src == il else "shared"
        out = {"kind": kind, "note": KINDS[kind], "attention": full, "first": first}
        return out if src == il else {**out, "kv_layer": src}

    def _state_norms(self, il: int, cache) -> np.ndarray:
        """Each value head's state norm ``||S||`` (Frobenius) after the step: (ssm_dt_rank,)."""
        m, n = self.model, self.model.config.ssm_dt_rank
        j0, j1 = m.shard.ssm
        s = cache.staged(il)[1]                                           # (H of the shard, Dv, Dk)
        norms = np.zeros((1, n), np.float32)
        norms[0, j0:j1] = np.sqrt(np.einsum("hij,hij->h", s, s))
        return (m.comm.all_reduce(norms) if j1 - j0 < n else norms)[0]

    # --- the record
    def result(self) -> dict | None:
        """The trace as plain data (ids, not pieces): ``layers`` (each: ``top`` [[id, prob]], ``answer``
        [rank, prob] of the final top-1, the mixer's weights or note, ``seconds``, ``ops``), ``stages``
        (embed, output), ``ops`` {kind: seconds} and ``bytes`` {matrix: bytes} of the whole step, and
        ``total_seconds`` (the forward pass's time less the recorder's, measured apart from the parts'). The
        main worker's only (None on a helper)."""
        if not self._lens:
            return None
        final = int(np.argmax(self._lens[-1]))
        for rec, logits in zip(self.layers, self._lens):
            p = _softmax(logits)
            top = np.argsort(-p, kind="stable")[:LENS_TOP]
            rec["top"] = [[int(i), float(p[i])] for i in top]
            rec["answer"] = [int((p > p[final]).sum()), float(p[final])]
        parts = self.layers + list(self.stages.values())
        ops, nbytes = {}, {}
        for part in parts:
            for k, v in part["ops"].items():
                ops[k] = ops.get(k, 0.0) + v
            for k, v in part.pop("bytes").items():
                nbytes[k] = nbytes.get(k, 0) + v
        return {"layers": self.layers, "stages": self.stages, "ops": ops, "bytes": nbytes, "final": final,
                "total_seconds": self.wall - self.overhead}


def _softmax(logits: np.ndarray) -> np.ndarray:
    """Probabilities (n_vocab,) float64 of logits (n_vocab,)."""
    z = logits.astype(np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


def run(model, cache, tokens: np.ndarray, pos: int, recorder: Recorder) -> np.ndarray | None:
    """Run ``tokens`` from position ``pos`` on one worker's ``model`` (a whole model, or a shard as every
    worker does at once): all but the last untraced (what a recurrent state needs to reach the step), the
    last through ``recorder``; then put ``cache`` back as it was. Returns the step's logits (n_vocab,)
    (None on a helper)."""
    snap = cache.snapshot(pos, pos + len(tokens))
    try:
        cache.truncate(pos)
        if len(tokens) > 1:
            model.forward(tokens[:-1], cache, "none")
        with recorder.installed():
            recorder.start()
            logits = model.forward(tokens[-1:], cache, "last", recorder)
            recorder.wall = time.perf_counter() - recorder._t0
            return logits
    finally:
        cache.restore(snap)


def trace_step(model, cache, ids, n: int, heads: int | None = None) -> tuple[dict, np.ndarray]:
    """Trace the step of ``model`` (a Model or a SplitModel) that reads ``ids[n]`` at position ``n`` on the
    keys and values ``cache`` holds of ``ids[:n]`` (those it lacks are run first), keeping ``heads`` q
    heads. Returns (:meth:`Recorder.result`, the step's logits (n_vocab,)); ``cache`` is as it was."""
    ids = np.asarray(ids, np.int64)
    pos = cache.start_of(min(n, cache.n))
    shard = getattr(model, "model", model)                                # a SplitModel's own shard
    rec = Recorder(shard, heads)
    traced = getattr(model, "traced_run", None)
    logits = traced(ids[pos:n + 1], cache, pos, rec) if traced else run(model, cache, ids[pos:n + 1], pos, rec)
    return rec.result(), logits
