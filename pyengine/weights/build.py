"""Building each weight form from the file's rows: any row range of one weight or of several stacked.

A :class:`Builder` reads ``rows.LOAD_CHUNK_BYTES`` of rows at a time through
one reused float32 buffer (and one int8 buffer for the codes), so a load never
holds a whole float32 matrix beside its result. The main worker builds every
matrix whole; a helper worker builds only its rows, with the same code, so its
rows are bit for bit the main model's.
"""

from __future__ import annotations

import numpy as np

from pyengine.gguf import quants
from pyengine.weights.forms import F32, Form, Int8Blocks, Int8Rows, Packed, row_split
from pyengine.weights.lanes import LANE_HALF, LANES, pack_block, pack_rows, x_levels
from pyengine.weights.matmul import VEC_DOT_TYPE, quantize_int8
from pyengine.weights.quantized import Layout, Quantized, lane_codes, pack_codes
from pyengine.weights.rows import chunk_rows, dequantized_rows, raw_rows, stack_shape, stacked_chunks

INT8_BLOCK = 64                      # weights of a row sharing one scale in the Int8Blocks form
COL_SAMPLE = (16, 512)               # the column scales come from 16 chunks of 512 rows spread over the matrix
Q8_0_BLOCK = 32                      # Q8_0's weights per block: kept as stored in the packed form
Q8_0_LEVELS = (LANE_HALF - 1) // (32 * 128)   # 255: activation codes any 32 int8 weight codes leave room for


def packed_block(types: list[str], n_in: int) -> int:
    """The packed form's block for rows stacked from tensors of ggml ``types``: 32 when they are all
    Q8_0 (their own codes and scales are kept as stored), else ``lanes.pack_block(n_in)``."""
    return Q8_0_BLOCK if n_in % Q8_0_BLOCK == 0 and all(t == "Q8_0" for t in types) else pack_block(n_in)


def column_scale(gguf_file, names: list[str]) -> np.ndarray:
    """The column scales of the weights ``names`` stacked by rows, for the ``Int8Rows`` form:
    (n_in,) float32 in (0, 1].

    Each column's largest |weight| over ``COL_SAMPLE`` chunks of rows spread
    evenly over each matrix (all rows when it is smaller), over the largest of
    them; a row scale then takes each row's largest |weight / col|, so no
    weight is clipped whatever the sample saw. Any reader of the file (a
    helper worker) gets the same. A sampled row far larger than the rest (a
    hostile or broken file) shrinks its columns in every other row: the packed
    form has no column scales.
    """
    n_chunks, rows = COL_SAMPLE
    amax = np.zeros(gguf_file.tensors[names[0]].shape[0], np.float32)    # (n_in,)
    for name in names:
        n_in, n_rows = gguf_file.tensors[name].shape
        starts = [0] if n_rows <= n_chunks * rows else np.linspace(0, n_rows - rows, n_chunks).astype(int).tolist()
        for a in starts:
            chunk = dequantized_rows(gguf_file, name, a, min(n_rows, a + rows))   # (rows, n_in)
            np.maximum(amax, np.abs(chunk).max(axis=0), out=amax)
    top = amax.max()
    return np.where(amax > 0, amax / top, np.float32(1.0)).astype(np.float32) if top > 0 else np.ones_like(amax)


def chunk_codes(raw: np.ndarray, info, n_rows: int, block: int, buf: np.ndarray | None = None,
                codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """``n_rows`` rows of a weight from their stored bytes ``raw`` as the packed form holds them:
    (codes (n_rows, n_in) int8, scale (n_rows, n_in / block) float32, the activation levels they
    leave room for).

    Q8_0 with a block of 32: the file's own codes and scales (ggml's
    ``dequantize_row_q8_0``: w = d * q), no rounding. Otherwise dequantized (into
    ``buf``, float32, when given) and rounded to int8 per block
    (``matmul.quantize_int8``, into ``codes``). Raises GGUFError for bytes that
    are not whole blocks.
    """
    n_in = info.shape[0]
    if info.type.name == "Q8_0" and block == Q8_0_BLOCK:
        c = quants.codes(raw, info.type, n_rows * n_in, name=info.name)
        return c.q.reshape(n_rows, n_in), c.scale.reshape(n_rows, n_in // Q8_0_BLOCK), Q8_0_LEVELS
    rows = quants.dequantize(raw, info.type, n_rows * n_in, name=info.name,
                             out=None if buf is None else buf[:n_rows * n_in]).reshape(n_rows, n_in)
    q = np.empty((n_rows, n_in), np.int8) if codes is None else codes[:rows.size].reshape(n_rows, n_in)
    scale = np.empty((n_rows, n_in // block), np.float32)
    quantize_int8(rows, block, out=(q, scale))
    return q, scale, x_levels(q, block)


def _by_lane(per_row: np.ndarray, m: int, lay: Layout) -> np.ndarray:
    """Per-row values (m * rows, B) as :class:`Quantized` holds them: (phases, lanes, B, m)."""
    return np.ascontiguousarray(per_row.reshape(m, lay.phases, lay.lanes, -1).transpose(1, 2, 3, 0))


class Builder:
    """Makes weight forms from the rows of ``gguf_file``'s tensors.

    Every method takes the weights ``names`` stacked by rows and the stack's
    rows ``lo..hi-1`` (default: all), and calls ``tick(name)`` once a tensor's
    rows are all read (a whole stack only). ``ggml_rounding``: the forms round
    their activations to each tensor's ggml vec_dot_type (rows of different
    types stacked become a :class:`~pyengine.weights.forms.RowSplit`).
    """

    def __init__(self, gguf_file, ggml_rounding: bool = False, tick=None):
        self.gf, self.ggml_rounding = gguf_file, ggml_rounding
        self.tick = tick or (lambda name: None)
        self.buf = np.empty(0, np.float32)   # float32 rows of one load chunk, reused tensor after tensor
        self.codes = np.empty(0, np.int8)    # their int8 codes (the packed form)

    def ensure_buffers(self, n: int) -> None:
        """The reused float32 rows and int8 codes of a load chunk: at least ``n`` elements each."""
        if self.buf.size < n:
            self.buf, self.codes = np.empty(n, np.float32), np.empty(n, np.int8)

    def _chunks(self, names: list[str], lo: int, hi: int | None):
        """:func:`rows.stacked_chunks` over rows ``lo..hi-1`` (hi None: the whole stack, ticking each
        tensor once its last chunk is done)."""
        whole = hi is None
        for name, a, b, r in stacked_chunks(self.gf, names, lo, stack_shape(self.gf, names)[0] if whole else hi):
            yield name, a, b, r
            if whole and b == self.gf.tensors[name].shape[1]:
                self.tick(name)

    def _act(self, name: str) -> str | None:
        return VEC_DOT_TYPE.get(self.gf.tensors[name].type.name) if self.ggml_rounding else None

    def _by_act(self, names: list[str], lo: int, hi: int | None, make):
        """``make(names, lo, hi, act)`` for the stack, or a RowSplit of one per run of tensors sharing an
        activation rounding (ggml_rounding with stacked types that differ)."""
        acts = [self._act(n) for n in names]
        if len(set(acts)) == 1:
            return make(names, lo, hi, acts[0])
        return self._runs(names, acts, lo, hi, lambda group, a, b: make(group, a, b, self._act(group[0])))

    def f32(self, names: list[str], lo: int = 0, hi: int | None = None) -> F32:
        """float32 rows, dequantized straight into their place in the stacked matrix."""
        def make(names, lo, hi, act):
            n_rows, n_in = stack_shape(self.gf, names)
            w = np.empty(((n_rows if hi is None else hi) - lo, n_in), np.float32)   # (n_out, n_in)
            for name, a, b, r in self._chunks(names, lo, hi):
                dequantized_rows(self.gf, name, a, b, out=w[r:r + b - a])
            return F32(w, act)
        return self._by_act(names, lo, hi, make)

    def int8(self, names: list[str], lo: int = 0, hi: int | None = None, block: int = INT8_BLOCK,
             col: np.ndarray | None = None) -> Int8Blocks | Int8Rows:
        """int8 rows with a scale per ``block`` weights (one per row when ``block`` does not divide n_in);
        with ``col`` (n_in,), the weights divided by it first and a scale per row (``Int8Rows``)."""
        def make(names, lo, hi, act):
            n_rows, n_in = stack_shape(self.gf, names)
            n_out = (n_rows if hi is None else hi) - lo
            blocks = 1 if col is not None or n_in % block else n_in // block
            q = np.empty((n_out, n_in), np.int8)                          # (n_out, n_in)
            scale = np.empty((n_out, blocks), np.float32)                 # (n_out, blocks)
            self.ensure_buffers(chunk_rows(n_in) * n_in)
            for name, a, b, r in self._chunks(names, lo, hi):
                rows = dequantized_rows(self.gf, name, a, b, out=self.buf)   # (b-a, n_in) float32
                if col is not None:
                    rows /= col
                quantize_int8(rows, n_in // blocks, out=(q[r:r + b - a], scale[r:r + b - a]))
            return Int8Blocks(q, scale, act) if col is None else Int8Rows(q, scale, col, act)
        return self._by_act(names, lo, hi, make)

    def int8_rows(self, names: list[str], lo: int = 0, hi: int | None = None,
                  col: np.ndarray | None = None) -> Int8Rows:
        """int8 with a scale per row and one per column (``column_scale`` of the whole matrix, unless given)."""
        return self.int8(names, lo, hi, col=column_scale(self.gf, names) if col is None else col)

    def packed(self, names: list[str], lo: int = 0, hi: int | None = None, levels: int | None = None,
               block: int | None = None) -> Packed:
        """Packed rows (``lo`` a multiple of 3): int8 codes per block (``chunk_codes``: Q8_0's own, or
        rounded per ``lanes.pack_block(n_in)`` weights), put into their fields of the int64 rows. The
        activations take the most levels the codes leave room for (``lanes.x_levels``), or
        ``levels`` when given (a helper worker's rows: the whole matrix's)."""
        n_rows, n_in = stack_shape(self.gf, names)
        n_out = (n_rows if hi is None else hi) - lo
        block = block or packed_block([self.gf.tensors[n].type.name for n in names], n_in)
        self.ensure_buffers(min(n_out, chunk_rows(n_in)) * n_in)
        m = -(-n_out // LANES)
        w = np.empty((m, n_in), np.int64)                                 # (ceil(n_out/3), n_in)
        scale = np.zeros((LANES * m, n_in // block), np.float32)          # (3 ceil(n_out/3), B)
        found = LANE_HALF
        for name, a, b, r in self._chunks(names, lo, hi):
            raw = raw_rows(self.gf, name, a, b)                           # (bytes of rows a..b-1,) uint8
            q, scale[r:r + b - a], lv = chunk_codes(raw, self.gf.tensors[name], b - a, block, self.buf, self.codes)
            pack_rows(q, w, r)                                            # rows in order: see pack_rows
            found = min(found, lv)
        return Packed(w, scale, n_out, found if levels is None else levels)

    def quantized(self, names: list[str], lo: int = 0, hi: int | None = None, cols: tuple[int, int] | None = None,
                  compact: bool = False):
        """The stack's rows ``lo..hi-1`` in their own ggml codes (:class:`Quantized`), columns ``cols``
        (c0, c1) only when given (multiples of the type's block). Expanded lanes, or ``compact`` ones.
        Stacked tensors of different types become a RowSplit of one part per run of a type; a type
        without integer codes (F32, F16, BF16) is float32. Raises GGUFError."""
        types = [self.gf.tensors[n].type.name for n in names]
        if len(set(types)) > 1:
            return self._runs(names, types, lo, hi, lambda group, a, b: self.quantized(group, a, b, cols, compact))
        if types[0] not in quants.QUANT_CODES:
            return self.f32(names, lo, hi) if cols is None else self._f32_cols(names, lo, hi, cols)
        bits = quants.QUANT_CODES[types[0]][1]
        lay = Layout(bits, Layout.max_phases(bits) if compact else 1)
        n_rows, n_in = stack_shape(self.gf, names)
        n_out = (n_rows if hi is None else hi) - lo
        c0, c1 = cols or (0, n_in)
        m = -(-n_out // lay.rows)
        q = np.zeros((m, c1 - c0), np.int64)                              # (M, K) packed lane codes
        scale = shift = None
        for name, a, b, r in self._chunks(names, lo, hi):
            codes, sc, sh = lane_codes(self._codes(name, a, b, cols), b - a, c1 - c0, bits)
            if scale is None:
                nb = sc.shape[1]
                scale = np.zeros((m * lay.rows, nb), np.float32)          # rows in order, then laid out
                shift = None if sh is None else np.zeros((m * lay.rows, nb), np.float32)
            pack_codes(codes, q, r, lay)
            scale[r:r + b - a] = sc
            if sh is not None:
                shift[r:r + b - a] = sh
        sub = (c1 - c0) // scale.shape[1]
        return Quantized(q, _by_lane(scale, m, lay), None if shift is None else _by_lane(shift, m, lay), n_out, lay,
                         sub, types[0])

    def _codes(self, name: str, a: int, b: int, cols: tuple[int, int] | None) -> quants.Codes:
        """The stored codes of rows a..b-1 of tensor ``name``, columns ``cols`` only (whole blocks)."""
        info = self.gf.tensors[name]
        raw = raw_rows(self.gf, name, a, b)                                # (bytes of rows a..b-1,) uint8
        n_in, k = info.shape[0], info.shape[0]
        if cols is not None:
            bs, ts = info.type.block_size, info.type.type_size
            if cols[0] % bs or cols[1] % bs:
                raise ValueError(f"columns {cols} of {name!r} are not whole {info.type.name} blocks of {bs}")
            raw = np.ascontiguousarray(raw.reshape(b - a, n_in // bs, ts)[:, cols[0] // bs:cols[1] // bs]).reshape(-1)
            k = cols[1] - cols[0]
        return quants.codes(raw, info.type, (b - a) * k, name=name)

    def _f32_cols(self, names: list[str], lo: int, hi: int | None, cols: tuple[int, int]) -> F32:
        """float32 rows, columns ``cols`` only."""
        w = self.f32(names, lo, hi)
        return F32(np.ascontiguousarray(w.w[:, cols[0]:cols[1]]), w.act)

    def _runs(self, names: list[str], keys: list, lo: int, hi: int | None, make):
        """A RowSplit of ``make(group, a, b)`` per run of stacked tensors with the same key, over the
        stack's rows lo..hi-1 (``b`` None: the group whole)."""
        runs: list[list[str]] = []
        for i, name in enumerate(names):
            if i and keys[i] == keys[i - 1]:
                runs[-1].append(name)
            else:
                runs.append([name])
        hi = stack_shape(self.gf, names)[0] if hi is None else hi
        parts, r0 = [], 0
        for group in runs:
            n = stack_shape(self.gf, group)[0]
            a, b = max(lo, r0) - r0, min(hi, r0 + n) - r0
            if a < b:
                parts.append(make(group, a, None if (a, b) == (0, n) else b))
            r0 += n
        return row_split(parts)

    def mixed(self, name: str, packed_rows: int, lo: int = 0, hi: int | None = None):
        """A vocabulary matrix in the "mixed" form: its first ``packed_rows`` rows packed, the rest
        int8 with row and column scales (a RowSplit when both are there)."""
        n_out = stack_shape(self.gf, [name])[0]
        hi_ = n_out if hi is None else hi
        r = min(n_out, packed_rows)
        parts = ([self.packed([name], max(lo, 0), min(hi_, r))] if lo < r else []) + \
            ([self.int8_rows([name], max(lo, r), hi_)] if hi_ > r else [])
        if hi is None:
            self.tick(name)
        return row_split(parts)

    def build(self, names: list[str], form: Form, packed_rows: int = 0):
        """The whole stack ``names`` in ``form`` (ROW_SPLIT: the "mixed" vocabulary matrix)."""
        if form is Form.F32:
            return self.f32(names)
        if form is Form.INT8_BLOCKS:
            return self.int8(names)
        if form is Form.INT8_ROWS:
            return self.int8_rows(names)
        if form is Form.PACKED:
            return self.packed(names)
        return self.mixed(names[0], packed_rows)
