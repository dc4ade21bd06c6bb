"""The model file: one GGUF, or every part of a split model, opened through byte sources."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from pyengine.errors import GGUFError
from pyengine.gguf.header import GGUFPart, TensorInfo, read_part
from pyengine.gguf.source import BytesSource, FileSource
from pyengine.gguf.split import KEY_SPLIT_TENSORS_COUNT, order_split, split_int


class GGUFFile:
    """An opened GGUF model: one file, or every part of a split model in order.

    Attributes (part 0's for a split model): ``version``, ``alignment``,
    ``data_offset``, ``byte_order`` (always ``"little"``), ``n_kv``,
    ``metadata`` (key -> int, float, bool, str, read-only 1-D numpy array
    (an array of numbers or BOOL), list of str, or list of arrays; in file order),
    ``value_types`` (key -> ``"UINT32"``, ``"ARRAY[STRING]"``, ...),
    ``sections``; and over all parts ``tensors`` (name -> :class:`TensorInfo`,
    file order), ``parts``, ``file_size`` (bytes, all parts).
    """

    byte_order = "little"

    def __init__(self, parts: list[GGUFPart], owned: Iterable[Any] = ()):
        self.parts = parts
        self._owned = list(owned)
        p0 = parts[0]
        self.version, self.alignment, self.data_offset = p0.version, p0.alignment, p0.data_offset
        self.n_kv, self.metadata, self.value_types = p0.n_kv, p0.metadata, p0.value_types
        self.sections = p0.sections
        self.file_size = sum(p.source.size for p in parts)
        self.name = p0.source.name
        self.tensors: dict[str, TensorInfo] = {}
        for p in parts:
            for name, t in p.tensors.items():
                if name in self.tensors:
                    raise GGUFError(f"{p.source.name}: tensor {name!r} is also in "
                                    f"{parts[self.tensors[name].part].source.name}")
                self.tensors[name] = t
        expected = split_int(p0, KEY_SPLIT_TENSORS_COUNT)
        if expected is not None and expected != len(self.tensors):
            raise GGUFError(f"{p0.source.name}: key {KEY_SPLIT_TENSORS_COUNT!r}: the split model "
                            f"should hold {expected} tensors, its {len(parts)} part(s) hold "
                            f"{len(self.tensors)}")

    def _info(self, name: str) -> TensorInfo:
        t = self.tensors.get(name)
        if t is None:
            raise GGUFError(f"{self.name}: no tensor named {name!r}")
        return t

    def tensor_bytes(self, name: str) -> np.ndarray:
        """The raw blocks of tensor ``name``: uint8 ``(n_bytes,)``, read-only, read in one call."""
        t = self._info(name)
        src = self.parts[t.part].source
        data = src.read(t.offset, t.n_bytes)
        if len(data) != t.n_bytes:
            raise GGUFError(f"{src.name}: byte {t.offset}: tensor {name!r}: read {len(data)} of "
                            f"{t.n_bytes} bytes (the file changed or was truncated)")
        return np.frombuffer(data, dtype=np.uint8)

    def tensor(self, name: str) -> np.ndarray:
        """Tensor ``name`` dequantized to float32, shape ``reversed(ne)``.

        A weight of ``ne = (n_in, n_out)`` reads as ``(n_out, n_in)``, rows
        contiguous. Types :mod:`pyengine.gguf.quants` cannot dequantize raise
        :class:`GGUFError` naming the type and tensor.
        """
        from pyengine.gguf import quants

        t = self._info(name)
        try:
            x = quants.dequantize(self.tensor_bytes(name), t.type, t.n_elements, name=name)  # (n_elements,)
        except GGUFError as e:  # quants names the tensor and type; add the file and byte
            raise GGUFError(f"{self.parts[t.part].source.name}: byte {t.offset}: {e}") from None
        return x.reshape(tuple(reversed(t.shape)))  # (ne[3], ne[2], ne[1], ne[0])

    def close(self) -> None:
        """Close the files this object opened (sources passed in stay open)."""
        for src in self._owned:
            src.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_source(x: Any) -> bool:
    return hasattr(x, "read") and hasattr(x, "size") and hasattr(x, "name")


def _read_parts(sources: list, progress: Callable[[int, int], None] | None, skip: frozenset[str]) -> list[GGUFPart]:
    """Each source's header, reporting ``progress`` as bytes of all headers so far."""
    parts: list[GGUFPart] = []
    for src in sources:
        before = sum(p.sections[3].end for p in parts)  # the end of each header's tensor infos
        report = None if progress is None else (lambda done, total, b=before: progress(b + done, b + total))
        parts.append(read_part(src, progress=report, skip=skip))
    return parts


def open_gguf(paths_or_sources: Any, progress: Callable[[int, int], None] | None = None,
              skip: frozenset[str] = frozenset()) -> GGUFFile:
    """Open one GGUF file, or every part of a split model given in any order.

    ``paths_or_sources``: a path, a byte source (see :mod:`pyengine.gguf.source`),
    bytes, or a list of those. Only the headers are read here: a few
    large reads per file. ``progress(bytes_done, bytes_total)``, if given, is
    called as the headers are parsed, every ``PROGRESS_BYTES`` (2 MiB) of
    header and at the end of each file: bytes of header, summed over the
    files in the order given. ``bytes_done`` only grows; ``bytes_total`` is
    an estimate (a header's size is known once it is parsed), at least
    ``bytes_done`` and equal to it in the last call. An array under a key in
    ``skip`` is only counted (a :class:`~pyengine.gguf.header.SkippedArray`:
    a helper worker has no use for the vocabulary's lists). Raises :class:`GGUFError`
    for malformed, hostile or mismatched files, naming the file and byte
    offset; ``OSError`` if a path cannot be opened.
    """
    one = (str, bytes, bytearray, memoryview, os.PathLike)
    items = [paths_or_sources] if _is_source(paths_or_sources) or isinstance(
        paths_or_sources, one) else list(paths_or_sources)
    if not items:
        raise GGUFError("no GGUF file given")
    owned: list[Any] = []
    try:
        sources = []
        for x in items:
            if isinstance(x, (bytes, bytearray, memoryview)):
                x = BytesSource(x)
            elif not _is_source(x):
                x = FileSource(x)
                owned.append(x)
            sources.append(x)
        parts = order_split(_read_parts(sources, progress, skip))
        for i, p in enumerate(parts):
            p.index = i
            p.tensors = {n: t._replace(part=i) for n, t in p.tensors.items()}
        return GGUFFile(parts, owned)
    except BaseException:
        for src in owned:
            src.close()
        raise
