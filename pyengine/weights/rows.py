"""Reading a weight's rows from the file, a chunk at a time, never a whole tensor.

A weight of ggml shape ``ne = (n_in, n_out)`` stores its ``n_out`` rows one
after the other, each ``type.n_bytes(n_in)`` bytes, so rows ``a..b-1`` are one
contiguous range of the tensor's bytes: one read of the file. Several weights
stacked by rows (``attn_q``, ``attn_k``, ``attn_v`` as one ``wqkv``) are read
as consecutive row ranges of their tensors (:class:`pyengine.weights.build.Builder`).
"""

from __future__ import annotations

import numpy as np

from pyengine.errors import GGUFError
from pyengine.gguf import quants

LOAD_CHUNK_BYTES = 8 * 2**20        # float32 bytes of rows read and dequantized at once while loading


def raw_rows(gguf_file, name: str, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
    """The stored blocks of rows ``a..b-1`` of weight ``name``: uint8 (bytes,), one read of the file, into
    ``out`` when given (uint8, C-contiguous, that many bytes: the weights' own array).

    An object without ``parts`` (a test's stand-in) is sliced from its
    ``tensor_bytes``. Raises GGUFError on a short read.
    """
    info = gguf_file.tensors[name]
    row_bytes = info.type.n_bytes(info.shape[0])
    n = (b - a) * row_bytes
    if out is not None and not out.flags.c_contiguous:
        raise ValueError("raw_rows: out must be C-contiguous (a reshape would read into a copy)")
    out = np.empty(n, np.uint8) if out is None else out.reshape(n)
    if not hasattr(gguf_file, "parts"):
        out[:] = gguf_file.tensor_bytes(name)[a * row_bytes:b * row_bytes]
        return out
    src = gguf_file.parts[info.part].source
    at = info.offset + a * row_bytes
    got = src.read_into(at, out)
    if got != n:
        raise GGUFError(f"{src.name}: byte {at}: tensor {name!r}: read {got} of {n} bytes "
                        f"(the file changed or was truncated)")
    return out


def dequantized_rows(gguf_file, name: str, a: int, b: int, out: np.ndarray | None = None) -> np.ndarray:
    """Rows ``a..b-1`` of weight ``name`` as float32 ``(b - a, n_in)`` (written into ``out``, a float32
    buffer of at least that many elements, when given). Raises GGUFError."""
    info = gguf_file.tensors[name]
    n = (b - a) * info.shape[0]
    rows = quants.dequantize(raw_rows(gguf_file, name, a, b), info.type, n, name=name,
                             out=None if out is None else out.reshape(-1)[:n])
    return rows.reshape(b - a, info.shape[0])


def chunk_rows(n_in: int) -> int:
    """Rows of ``n_in`` weights read at once: ``LOAD_CHUNK_BYTES`` of float32, at least one."""
    return max(1, LOAD_CHUNK_BYTES // (4 * n_in))


class FileRows:
    """A matrix left in the file, for lookups only: ``rows(ids)`` reads and dequantizes each id's row when
    asked (one read of the file each); no product. Holds no weights (``nbytes`` 0)."""

    def __init__(self, gguf_file, name: str):
        self.gguf_file, self.name = gguf_file, name
        n_in, n_out = gguf_file.tensors[name].shape[:2]
        self.shape = (n_out, n_in)
        self.nbytes = 0

    def rows(self, ids) -> np.ndarray:
        """Rows ``ids`` (R,) as float32 (R, n_in). Raises GGUFError on a short read."""
        ids = np.asarray(ids).reshape(-1)
        out = np.empty((len(ids), self.shape[1]), np.float32)             # (R, n_in)
        for i, r in enumerate(ids.tolist()):
            dequantized_rows(self.gguf_file, self.name, r, r + 1, out[i])
        return out
