"""The file's own ggml blocks, multiplied in the C kernel: the weight form of the page and the CLI.

A matrix ``W (n_out, n_in)`` of a quantized type is held exactly as the GGUF
stores it: ``n_out`` rows of ``n_in / block_size`` blocks, one after the
other, ``type.n_bytes(n_in)`` bytes a row (a worker's columns are whole blocks
of each row). Loading it only copies bytes, and it takes the file's own size.

``W x`` rounds x to 8-bit codes by block (ggml's ``quantize_row_q8_0``,
``q8_1`` or ``q8_K``, the type's vec_dot_type) and sums the codes' products
exactly as integers, block by block, then scales them: ggml's
``ggml_vec_dot_<type>_q8_<x>``, in ``kernel/kernel.c``. ``rows`` dequantizes
with numpy (:func:`pyengine.gguf.quants.dequantize`), bit for bit as ggml's
``get_rows``.
"""

from __future__ import annotations

import numpy as np

from pyengine.gguf import quants
from pyengine.gguf.ggml_types import GGMLType
from pyengine.weights.forms import Form
from pyengine.weights.kernel import Kernel, Matrix


class Blocks:
    """``W (n_out, n_in)`` as ``data (n_out, row bytes)`` uint8, the GGUF's blocks of ``ggml_type``."""
    form = Form.BLOCKS

    def __init__(self, data: np.ndarray, ggml_type: GGMLType, n_in: int, kernel: Kernel):
        if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != ggml_type.n_bytes(n_in):
            raise ValueError(f"{ggml_type.name} blocks of {n_in} weights a row must be (rows, "
                             f"{ggml_type.n_bytes(n_in)}) uint8, got {data.dtype} {data.shape}")
        self.data, self.type, self.n_in, self.kernel = np.ascontiguousarray(data), ggml_type, n_in, kernel
        self.matrix = Matrix(self.data, ggml_type.name, n_in)                          # checked once

    @property
    def shape(self) -> tuple[int, int]:
        return (self.data.shape[0], self.n_in)

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def __call__(self, x: np.ndarray, acts: dict | None = None) -> np.ndarray:
        """(n_in,) -> (n_out,), or (T, n_in) -> (T, n_out) float32. ``acts`` keeps x's rounded codes for
        the other parts of a RowSplit."""
        y = self.kernel.product(self.matrix, x.reshape(-1, self.n_in), acts)                # (T, n_out)
        return y[0] if x.ndim == 1 else y

    def rows(self, ids) -> np.ndarray:
        """Rows ``ids`` as float32 (R, n_in), as ggml ``get_rows`` dequantizes them (the same bits)."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        return quants.dequantize(self.data[ids], self.type, len(ids) * self.n_in).reshape(len(ids), self.n_in)
