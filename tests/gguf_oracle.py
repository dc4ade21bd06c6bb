"""gguf-py's GGUFReader (what ``gguf-dump`` prints) as the oracle, built once per file per session."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import gguf


@cache
def reader(path: Path) -> gguf.GGUFReader:
    """The oracle's view of ``path`` (Gemma 3 takes ~15 s: build it once)."""
    return gguf.GGUFReader(path)


def fields(r: gguf.GGUFReader) -> dict:
    """The file's own keys (without gguf-py's ``GGUF.version`` ... pseudo-fields)."""
    return {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}


def value_type(field) -> str:
    """gguf-py's field types as our type name: ``[ARRAY, STRING]`` -> ``"ARRAY[STRING]"``."""
    names = [t.name for t in field.types]
    return "".join(f"{n}[" for n in names[:-1]) + names[-1] + "]" * (len(names) - 1)
