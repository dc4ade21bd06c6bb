"""Byte sources: the only way pyengine touches a model file's bytes.

In the browser there is no mmap and no path: the worker sees the user's ``File``
only through reads of ``(offset, length)``, each costing ~1 ms whatever its
size. So the engine is written against this tiny interface and nothing else:

- ``name: str``   -- shown in error messages (the file name),
- ``size: int``   -- the file's size in bytes,
- ``read(offset, length) -> bytes`` -- exactly ``length`` bytes, fewer only at
  end of file,
- ``read_into(offset, out) -> int`` -- the same into ``out`` (a contiguous uint8
  array), returning how many bytes came: a model's weights go to their array
  without a bytes object between,
- ``reads: int``  -- how many ``read`` calls were made (tests and benchmarks
  count them; readers must ask for large chunks), and ``bytes_read: int``
  (progress bars).

:class:`FileSource` reads a local file with plain ``seek``/``read``;
:class:`BytesSource` serves bytes in memory (tests). The worker adds a source
over the browser ``File`` with the same members (it may subclass
:class:`ByteSource`, which keeps the counts, and implement ``_read``).
"""

from __future__ import annotations

import os

import numpy as np


class ByteSource:
    """The common part of every source: range checks and the ``reads`` / ``bytes_read`` counts.

    A subclass sets ``name`` and ``size`` (through ``__init__``) and implements
    ``_read(offset, length) -> bytes``; it may override :meth:`close`.
    """

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self.reads = 0
        self.bytes_read = 0

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes from ``offset`` (fewer only at the end)."""
        if offset < 0 or length < 0:
            raise ValueError(f"read at offset {offset} of length {length}: both must be >= 0")
        data = self._read(offset, length)
        self.reads += 1
        self.bytes_read += len(data)
        return data

    def read_into(self, offset: int, out: np.ndarray) -> int:
        """Fill ``out`` (uint8, C-contiguous) with the bytes from ``offset``; the count read (fewer than
        ``out.size`` only at the end)."""
        if offset < 0:
            raise ValueError(f"read at offset {offset}: it must be >= 0")
        if out.dtype != np.uint8 or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("read_into needs a writable C-contiguous uint8 array")
        n = self._read_into(offset, out)
        self.reads += 1
        self.bytes_read += n
        return n

    def _read(self, offset: int, length: int) -> bytes:
        raise NotImplementedError

    def _read_into(self, offset: int, out: np.ndarray) -> int:
        data = self._read(offset, out.size)
        out[:len(data)] = np.frombuffer(data, np.uint8)
        return len(data)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, size={self.size})"


class FileSource(ByteSource):
    """A local file, read with ``seek``/``read`` (never mmap).

    The file stays open until :meth:`close` (or the end of a ``with`` block).
    ``size`` is taken once, at open.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        self._f = open(self.path, "rb")
        super().__init__(os.path.basename(self.path), os.fstat(self._f.fileno()).st_size)

    def _read(self, offset: int, length: int) -> bytes:
        self._f.seek(offset)
        return self._f.read(length)

    def _read_into(self, offset: int, out: np.ndarray) -> int:
        self._f.seek(offset)
        return self._f.readinto(memoryview(out).cast("B"))

    def close(self) -> None:
        self._f.close()


class BytesSource(ByteSource):
    """Bytes held in memory, named like a file (for tests and generated files)."""

    def __init__(self, data: bytes | bytearray | memoryview, name: str = "<bytes>"):
        self._data = memoryview(bytes(data))
        super().__init__(name, len(self._data))

    def _read(self, offset: int, length: int) -> bytes:
        return bytes(self._data[offset:offset + length])
