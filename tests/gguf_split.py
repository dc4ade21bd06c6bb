"""Split a GGUF file into N parts the way ``llama-gguf-split --split`` does.

Part ``i`` of ``n`` is ``{stem}-{i+1:05d}-of-{n:05d}.gguf``. Every part carries
``split.no`` (UINT16, from 0), ``split.count`` (UINT16) and
``split.tensors.count`` (INT32); part 0 also carries all of the input's
metadata, in order, before them. The tensors are dealt out in file order, in
runs as even as possible (each part gets at least one); each part lays out its
own data section (part 0 keeps the input's alignment, the others use 32).

For tests and fixtures only (the browser tests need a split model):

    python tests/gguf_split.py IN.gguf N OUT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # run as a script: find pyengine and gguf_write
    sys.path[:0] = [str(Path(__file__).resolve().parent.parent), str(Path(__file__).resolve().parent)]

from gguf_write import gguf_bytes

from pyengine.gguf import open_gguf
from pyengine.gguf.header import DEFAULT_ALIGNMENT
from pyengine.gguf.split import KEY_SPLIT_COUNT, KEY_SPLIT_NO, KEY_SPLIT_TENSORS_COUNT


def split_gguf(path: str | Path, n_parts: int, out_dir: str | Path) -> list[Path]:
    """Write ``n_parts`` split files of the GGUF at ``path`` into ``out_dir``; return their paths."""
    path, out_dir = Path(path), Path(out_dir)
    with open_gguf(path) as g:
        names = list(g.tensors)
        if not 1 <= n_parts <= len(names):
            raise ValueError(f"cannot split {len(names)} tensors into {n_parts} parts")
        bounds = [len(names) * i // n_parts for i in range(n_parts + 1)]
        kvs = [(k, g.value_types[k], v) for k, v in g.metadata.items() if not k.startswith("split.")]
        out = []
        for i in range(n_parts):
            split_kvs = [(KEY_SPLIT_NO, "UINT16", i), (KEY_SPLIT_COUNT, "UINT16", n_parts),
                         (KEY_SPLIT_TENSORS_COUNT, "INT32", len(names))]
            tensors = [(n, g.tensors[n].shape, g.tensors[n].type.id, g.tensor_bytes(n).tobytes())
                       for n in names[bounds[i]:bounds[i + 1]]]
            data = gguf_bytes((kvs if i == 0 else []) + split_kvs, tensors,
                              alignment=g.alignment if i == 0 else DEFAULT_ALIGNMENT)
            part = out_dir / f"{path.stem}-{i + 1:05d}-of-{n_parts:05d}.gguf"
            part.write_bytes(data)
            out.append(part)
    return out


if __name__ == "__main__":
    for p in split_gguf(sys.argv[1], int(sys.argv[2]), sys.argv[3]):
        print(p)
