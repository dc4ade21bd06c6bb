"""``python -m pyengine inspect``: a GGUF file laid out for people, or as one JSON object.

:func:`describe` makes the data (the browser's inspector shows the same dict);
:func:`format_text` prints it the way ``gguf-dump`` / ``llama-gguf`` do: the
byte ranges of the file's five sections, the header, every key with its type
and value (long arrays cut, their length shown), the tensor table, a summary
per ggml type, total parameters and file size.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import numpy as np

from pyengine.gguf import GGUFFile, open_gguf

ARRAY_HEAD = 8        # items shown of a longer array
TEXT_STRING_MAX = 80  # characters of a string value shown in the text view


# ---------------------------------------------------------------------------
# The data
# ---------------------------------------------------------------------------

def plain(value: Any) -> Any:
    """A metadata value whole, as plain Python: numpy arrays become lists (of int, float, bool)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list) and value and not isinstance(value[0], str):  # an array of arrays
        return [plain(v) for v in value]
    return value


def _cut(value: Any) -> Any:
    """A metadata value for display: arrays (lists or numpy arrays) longer than
    ``ARRAY_HEAD`` become ``{"length": n, "first": [first ARRAY_HEAD items]}``;
    NaN and infinities become the strings ``"nan"``, ``"inf"``, ``"-inf"``
    (JSON has no such numbers)."""
    if isinstance(value, (list, np.ndarray)):
        items = [_cut(v) for v in plain(value[:ARRAY_HEAD])]
        return items if len(value) <= ARRAY_HEAD else {"length": len(value), "first": items}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _sections(sections) -> list[dict]:
    return [{"name": s.name, "start": s.start, "end": s.end} for s in sections]


def describe(g: GGUFFile) -> dict:
    """Everything ``inspect`` shows, as plain JSON-able data (a pure function of ``g``).

    Keys: ``files``, ``file_size`` (bytes, all parts), ``version``,
    ``byte_order``, ``n_tensors``, ``n_kv``, ``alignment``, ``data_offset``,
    ``sections`` (part 0's: name, start, end; end exclusive), ``metadata``
    (key -> value, arrays as lists, long ones cut as ``{"length", "first"}``),
    ``value_types`` (key -> ``"UINT32"``, ``"ARRAY[STRING]"`` ...),
    ``tensors`` (list of name, shape (ggml ne), type, offset (absolute, in its
    part), n_bytes, n_elements, part), ``types`` (per ggml type: type, count,
    params, bytes; most bytes first), ``n_params``, ``parts`` (each part's
    name, size, sections).
    """
    tensors = [{"name": t.name, "shape": list(t.shape), "type": t.type.name, "offset": t.offset,
                "n_bytes": t.n_bytes, "n_elements": t.n_elements, "part": t.part}
               for t in g.tensors.values()]
    types: dict[str, dict] = {}
    for t in tensors:
        row = types.setdefault(t["type"], {"type": t["type"], "count": 0, "params": 0, "bytes": 0})
        row["count"] += 1
        row["params"] += t["n_elements"]
        row["bytes"] += t["n_bytes"]
    return {
        "files": [p.source.name for p in g.parts],
        "file_size": g.file_size,
        "version": g.version,
        "byte_order": g.byte_order,
        "n_tensors": len(g.tensors),
        "n_kv": g.n_kv,
        "alignment": g.alignment,
        "data_offset": g.data_offset,
        "sections": _sections(g.sections),
        "metadata": {k: _cut(v) for k, v in g.metadata.items()},
        "value_types": dict(g.value_types),
        "tensors": tensors,
        "types": sorted(types.values(), key=lambda r: -r["bytes"]),
        "n_params": sum(t["n_elements"] for t in tensors),
        "parts": [{"name": p.source.name, "size": p.source.size, "sections": _sections(p.sections)}
                  for p in g.parts],
    }


# ---------------------------------------------------------------------------
# The text view
# ---------------------------------------------------------------------------

def _show(value: Any, vtype: str) -> str:
    """One metadata value as text: strings quoted and cut, FLOAT32 at float32 precision."""
    if isinstance(value, dict):  # a cut array
        head = _show(value["first"], vtype)
        return f"{head[:-1]}, ... ] ({value['length']:,} items)"
    if isinstance(value, list):
        return "[" + ", ".join(_show(v, vtype) for v in value) + "]"
    if isinstance(value, str):
        s = json.dumps(value[:TEXT_STRING_MAX], ensure_ascii=False)
        return s if len(value) <= TEXT_STRING_MAX else f"{s[:-1]}...\" ({len(value):,} chars)"
    if isinstance(value, float) and "FLOAT32" in vtype:
        return str(np.float32(value))  # the shortest text that reads back as the same float32
    return str(value)


def _table(rows: list[list[str]], right: set[int]) -> list[str]:
    """Rows of cells as aligned text; columns in ``right`` are right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                             for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in rows]


def format_text(d: dict) -> str:
    """The human view of :func:`describe`'s dict."""
    out = [f"{', '.join(d['files'])}: GGUF v{d['version']}, {d['byte_order']}-endian, "
           f"{d['file_size']:,} bytes", ""]
    for part in d["parts"]:
        out.append(f"sections of {part['name']} ({part['size']:,} bytes; end exclusive)")
        out += _table([["section", "start", "end", "bytes"]]
                      + [[s["name"], f"{s['start']:,}", f"{s['end']:,}", f"{s['end'] - s['start']:,}"]
                         for s in part["sections"]], {1, 2, 3})
        out.append("")
    out += ["header", f"  version {d['version']}, n_tensors {d['n_tensors']:,}, n_kv {d['n_kv']:,}, "
            f"alignment {d['alignment']}, data_offset {d['data_offset']:,}", ""]
    out.append(f"metadata ({len(d['metadata'])} keys)")
    if d["metadata"]:
        out += _table([[k, d["value_types"][k], "= " + _show(v, d["value_types"][k])]
                       for k, v in d["metadata"].items()], set())
    out += ["", f"tensors ({d['n_tensors']:,})"]
    split = len(d["parts"]) > 1
    rows = [["#", "name", "type", "shape (ne)", "elements", "offset", "bytes"] + (["part"] if split else [])]
    for i, t in enumerate(d["tensors"]):
        rows.append([str(i), t["name"], t["type"], " x ".join(map(str, t["shape"])) or "scalar",
                     f"{t['n_elements']:,}", f"{t['offset']:,}", f"{t['n_bytes']:,}"]
                    + ([str(t["part"])] if split else []))
    out += _table(rows, {0, 4, 5, 6, 7})
    out += ["", "by type"]
    rows = [["type", "tensors", "params", "bytes"]]
    rows += [[r["type"], str(r["count"]), f"{r['params']:,}", f"{r['bytes']:,}"] for r in d["types"]]
    rows.append(["total", str(d["n_tensors"]), f"{d['n_params']:,}", f"{sum(r['bytes'] for r in d['types']):,}"])
    out += _table(rows, {1, 2, 3})
    out += ["", f"total: {d['n_params']:,} parameters, {d['file_size']:,} bytes of file"]
    return "\n".join(out) + "\n"


def run_inspect(files: list[str], as_json: bool = False) -> int:
    """The ``inspect`` command: print the view (or ``--json``) of one model; 0 on success.

    Bad input raises :class:`~pyengine.errors.GGUFError` (the CLI prints it
    as one ``error:`` line and exits 1).
    """
    with open_gguf(files) as g:
        d = describe(g)
    text = json.dumps(d) + "\n" if as_json else format_text(d)
    # invalid UTF-8 in strings survives as lone surrogates: print them as \udcXX
    sys.stdout.write(text.encode("utf-8", "backslashreplace").decode("utf-8"))
    return 0
