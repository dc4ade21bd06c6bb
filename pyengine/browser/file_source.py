"""A browser ``File`` as a byte source: what a worker reads a dropped GGUF through."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

import numpy as np

from pyengine.errors import GGUFError
from pyengine.gguf.source import ByteSource


class BrowserFileSource(ByteSource):
    """A browser ``File`` (or ``Blob``) as a byte source (see :mod:`pyengine.gguf.source`).

    Each read is one ``FileReaderSync().readAsArrayBuffer(file.slice(a, b))``
    (workers only), whose cost is mostly per call: callers read in large chunks. Only the bytes asked for are
    copied, into the wasm heap; :meth:`read_into` puts them straight at the array's address through
    web/file_read.js (the module ``pyengine_file``) where the page has registered it. ``reader`` is for
    tests (anything with ``readAsArrayBuffer(blob)`` returning an ArrayBuffer, or in CPython an object
    with ``to_bytes()``). A file that can no longer be
    read (changed, moved or deleted on disk since it was chosen: the browser's NotReadableError) is a
    GGUFError naming it and the byte.
    """

    def __init__(self, file: Any, reader: Any = None):
        super().__init__(str(file.name), int(file.size))
        self.file = file
        self._reader = reader

    def _read(self, offset: int, length: int) -> bytes:
        end = min(self.size, offset + length)
        if end <= offset:
            return b""
        with self._reading(offset):
            return self.reader().readAsArrayBuffer(self.file.slice(offset, end)).to_bytes()

    def _read_into(self, offset: int, out: np.ndarray) -> int:
        try:
            import pyengine_file
        except ImportError:
            return super()._read_into(offset, out)
        end = min(self.size, offset + out.size)
        if end <= offset:
            return 0
        with self._reading(offset):
            return int(pyengine_file.read_into(self.reader(), self.file.slice(offset, end), out.ctypes.data))

    def reader(self) -> Any:
        """The FileReaderSync the reads go through (made at the first read)."""
        if self._reader is None:
            import js  # Pyodide's window onto the worker's globals
            self._reader = js.FileReaderSync.new()
        return self._reader

    @contextmanager
    def _reading(self, offset: int):
        """A failed read as the GGUFError that names the file and the byte."""
        try:
            yield
        except Exception as e:  # noqa: BLE001 (under Pyodide a JsException: NotReadableError, NotFoundError...)
            reason = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            raise GGUFError(f"{self.name}: byte {offset}: the file can no longer be read ({reason}): it was "
                            "changed, moved or deleted since it was chosen; choose it again") from None

