"""Building each weight form from the file's rows: a stack of row ranges of tensors, whole or some columns.

A matrix is built from *pieces*: ``(tensor name, first row, end row)``, stacked
by rows in order (q, k and v as one ``wqkv``; a worker's share of the heads is a
piece of each). A :class:`Builder` reads ``rows.LOAD_CHUNK_BYTES`` of rows at a
time, so a load never holds a whole tensor; with ``cols`` it keeps only those
columns (whole ggml blocks) of each row: a worker's share of the attention
output or FFN-down inputs. Every worker builds its share with the same code, so
its rows and columns are bit for bit those of the whole model.
"""

from __future__ import annotations

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.gguf import quants
from pyengine.weights import kernel
from pyengine.weights.blocks import Blocks
from pyengine.weights.forms import F32, Form, row_split
from pyengine.weights.matmul import VEC_DOT_TYPE
from pyengine.weights.quantized import Layout, Quantized, lane_codes, pack_codes
from pyengine.weights.rows import chunk_rows, dequantized_rows, raw_rows

Piece = tuple[str, int, int]            # rows a..b-1 of tensor name


def whole(gguf_file, names: list[str]) -> list[Piece]:
    """The pieces of the tensors ``names`` whole."""
    return [(n, 0, gguf_file.tensors[n].shape[1]) for n in names]


def _by_lane(per_row: np.ndarray, m: int, layout: Layout, rows_last: bool = True) -> np.ndarray:
    """Per-row values (m * rows, B) as :class:`Quantized` holds them: (phases, lanes, B, m), or with
    ``rows_last=False`` (phases, lanes, m, B)."""
    by_lane = per_row.reshape(m, layout.phases, layout.lanes, -1)
    return np.ascontiguousarray(by_lane.transpose(1, 2, 3, 0) if rows_last else by_lane.transpose(1, 2, 0, 3))


def piece_nbytes(info, a: int, b: int, cols: tuple[int, int] | None) -> int:
    """The file's bytes of rows a..b-1 of tensor ``info``, columns ``cols`` only (None: all): the share of
    the file a shard stands for (its reads take whole rows)."""
    return info.type.n_bytes(info.shape[0] if cols is None else cols[1] - cols[0]) * (b - a)


class Builder:
    """Makes weight forms from the rows of ``gguf_file``'s tensors.

    ``tick(name, nbytes)`` is called as each piece's rows have been read (bytes
    as stored in the file). ``ggml_rounding``: the float32 form rounds its
    activations to each tensor's ggml vec_dot_type.
    """

    def __init__(self, gguf_file, ggml_rounding: bool = False, tick=None):
        self.gf, self.ggml_rounding = gguf_file, ggml_rounding
        self.tick = tick or (lambda name, nbytes: None)

    def build(self, pieces: list[Piece], form: Form, cols: tuple[int, int] | None = None):
        """The stack ``pieces`` in ``form`` (BLOCKS, F32, QUANTIZED or COMPACT), columns ``cols`` only when given.
        Pieces of different ggml types become a RowSplit of one part per run of a type (in float32: of
        an activation rounding); a type without integer codes (F32, F16, BF16) is float32 in any form."""
        keys = [(None if form is Form.F32 else self.gf.tensors[n].type.name, self._act(n)) for n, _, _ in pieces]
        if len(set(keys)) > 1:
            runs: list[list[Piece]] = []
            for i, piece in enumerate(pieces):
                if i and keys[i] == keys[i - 1]:
                    runs[-1].append(piece)
                else:
                    runs.append([piece])
            return row_split([self.build(run, form, cols) for run in runs])
        if form is Form.F32 or keys[0][0] not in quants.QUANT_CODES:
            return self.f32(pieces, cols)
        if form is Form.BLOCKS:
            return self.blocks(pieces, cols)
        return self.quantized(pieces, cols, compact=form is Form.COMPACT)

    def _act(self, name: str) -> str | None:
        return VEC_DOT_TYPE.get(self.gf.tensors[name].type.name) if self.ggml_rounding else None

    def _chunks(self, pieces: list[Piece], cols: tuple[int, int] | None):
        """Yield ``(name, a, b, r)``: rows a..b-1 of tensor ``name``, rows r..r+b-a-1 of the stack, a chunk
        of ``rows.chunk_rows`` at a time; ``tick(name, piece_nbytes)`` once a piece's rows are all used."""
        r = 0
        for name, lo, hi in pieces:
            info = self.gf.tensors[name]
            step = chunk_rows(info.shape[0])
            for a in range(lo, hi, step):
                yield name, a, min(hi, a + step), r + a - lo
            self.tick(name, piece_nbytes(info, lo, hi, cols))
            r += hi - lo

    def f32(self, pieces: list[Piece], cols: tuple[int, int] | None = None) -> F32:
        """float32 rows, dequantized straight into their place in the stacked matrix (columns ``cols``)."""
        n_in = self.gf.tensors[pieces[0][0]].shape[0]
        c0, c1 = cols or (0, n_in)
        w = np.empty((sum(b - a for _, a, b in pieces), c1 - c0), np.float32)   # (n_out, n_in)
        for name, a, b, r in self._chunks(pieces, cols):
            if cols is None:
                dequantized_rows(self.gf, name, a, b, out=w[r:r + b - a])
            else:
                w[r:r + b - a] = dequantized_rows(self.gf, name, a, b)[:, c0:c1]
        return F32(w, self._act(pieces[0][0]))

    def quantized(self, pieces: list[Piece], cols: tuple[int, int] | None = None, compact: bool = False) -> Quantized:
        """The stack in its own ggml codes (one type), expanded lanes or ``compact`` ones. Raises GGUFError."""
        type_name = self.gf.tensors[pieces[0][0]].type.name
        bits = quants.QUANT_CODES[type_name].bits
        layout = Layout(bits, Layout.max_phases(bits) if compact else 1)
        n_in = self.gf.tensors[pieces[0][0]].shape[0]
        c0, c1 = cols or (0, n_in)
        n_out = sum(b - a for _, a, b in pieces)
        m = -(-n_out // layout.rows)
        q = np.zeros((m, c1 - c0), np.int64)                              # (M, K) packed lane codes
        scale = shift = None
        for name, a, b, r in self._chunks(pieces, cols):
            codes, sc, sh = lane_codes(self._codes(name, a, b, cols), b - a, c1 - c0, bits)
            if scale is None:
                scale = np.zeros((m * layout.rows, sc.shape[1]), np.float32)   # rows in order, then laid out
                shift = None if sh is None else np.zeros_like(scale)
            pack_codes(codes, q, r, layout)
            scale[r:r + b - a] = sc
            if sh is not None:
                shift[r:r + b - a] = sh
        shift = None if shift is None else _by_lane(shift, m, layout, rows_last=False)
        return Quantized(q, _by_lane(scale, m, layout), shift, n_out, layout, (c1 - c0) // scale.shape[1], type_name)

    def blocks(self, pieces: list[Piece], cols: tuple[int, int] | None = None) -> Blocks:
        """The stack in the file's own blocks (one type), for the C kernel. Raises PyEngineError when the
        kernel is not there, GGUFError for a short read."""
        k = kernel.get()
        if k is None:
            raise PyEngineError(f"the weight form 'blocks' needs the C kernel, and the products run in "
                                f"{kernel.status()}")
        info = self.gf.tensors[pieces[0][0]]
        c0, c1 = cols or (0, info.shape[0])
        data = np.empty((sum(b - a for _, a, b in pieces), info.type.n_bytes(c1 - c0)), np.uint8)
        for name, a, b, r in self._chunks(pieces, cols):
            if cols is None:
                raw_rows(self.gf, name, a, b, out=data[r:r + b - a])     # from the file straight into place
            else:
                data[r:r + b - a] = self._raw(name, a, b, cols)
        return Blocks(data, info.type, c1 - c0, k)

    def _raw(self, name: str, a: int, b: int, cols: tuple[int, int] | None) -> np.ndarray:
        """The stored blocks of rows a..b-1 of tensor ``name``, columns ``cols`` only (whole blocks):
        (b - a, bytes a row) uint8."""
        info = self.gf.tensors[name]
        raw = raw_rows(self.gf, name, a, b).reshape(b - a, -1)            # (rows, bytes a row) uint8
        if cols is None:
            return raw
        bs, ts = info.type.block_size, info.type.type_size
        if cols[0] % bs or cols[1] % bs:
            raise ValueError(f"columns {cols} of {name!r} are not whole {info.type.name} blocks of {bs}")
        return raw.reshape(b - a, -1, ts)[:, cols[0] // bs:cols[1] // bs].reshape(b - a, -1)

    def _codes(self, name: str, a: int, b: int, cols: tuple[int, int] | None) -> quants.Codes:
        """The stored codes of rows a..b-1 of tensor ``name``, columns ``cols`` only (whole blocks)."""
        info = self.gf.tensors[name]
        k = info.shape[0] if cols is None else cols[1] - cols[0]
        return quants.codes(np.ascontiguousarray(self._raw(name, a, b, cols)), info.type, (b - a) * k, name=name)
