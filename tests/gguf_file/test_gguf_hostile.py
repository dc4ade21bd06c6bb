"""Hostile input: every broken file gives its own GGUFError naming file, byte and key/tensor."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT
from gguf_corpus import BROKEN, assemble, nested, small_file
from gguf_write import gstr, header, kv, tensor_info, u32, u64

from pyengine.errors import GGUFError
from pyengine.gguf import open_gguf
from pyengine.gguf.source import BytesSource
from pyengine.inspect import plain


def _error(data: bytes, name: str = "bad.gguf") -> str:
    with pytest.raises(GGUFError) as e:
        open_gguf(BytesSource(data, name))
    return str(e.value)


@pytest.mark.parametrize("case, data, pattern", BROKEN, ids=[c for c, _, _ in BROKEN])
def test_broken_file(case, data, pattern):
    msg = _error(data)
    assert msg.startswith("bad.gguf: byte "), msg
    assert re.search(pattern, msg), msg


def test_corpus_cases_are_distinct():
    assert len({c for c, _, _ in BROKEN}) == len(BROKEN)
    assert len({d for _, d, _ in BROKEN}) == len(BROKEN)


SMALL = small_file()


def test_small_file_is_valid():
    g = open_gguf(SMALL)
    assert g.metadata["a.toks"] == ["<s>", "ab"] and plain(g.metadata["a.nest"]) == [[1], [2, 3]]
    assert [t.n_bytes for t in g.tensors.values()] == [64, 18]
    assert g.tensors["q"].offset + 18 == len(SMALL)


@pytest.mark.parametrize("n", range(len(SMALL)))
def test_every_truncation_point(n):
    msg = _error(SMALL[:n])
    assert re.match(r"bad\.gguf: byte \d+: (header|key|tensor)", msg), msg
    short = r"(needs \d+ bytes but only \d+ are left|cannot fit in the \d+ bytes left|runs past the end of the file)"
    assert re.search(short, msg), msg


def test_arrays_nested_8_deep_are_read():
    g = open_gguf(assemble([nested(8)], []))
    assert plain(g.metadata["a.deep"]) == [[[[[[[[5]]]]]]]]
    assert g.value_types["a.deep"] == "ARRAY[" * 8 + "INT8" + "]" * 8


def test_zero_dim_tensor_is_empty():
    """llama.cpp allows a dimension of 0 (ne >= 0): the tensor holds nothing."""
    g = open_gguf(assemble([kv("general.architecture", "STRING", "x")],
                           [tensor_info("e", (0, 4), 0, 0), tensor_info("t", (8,), 0, 0)], bytes(32)))
    assert g.tensors["e"].n_bytes == 0 and g.tensor("e").shape == (4, 0)


@pytest.mark.parametrize("seed", range(20))
def test_random_corruption_is_a_gguf_error_or_a_valid_file(seed):
    """Flip 1-4 random bytes of the small file, 25 times per seed: the reader either
    reads a consistent file or raises GGUFError, never anything else."""
    rng = random.Random(seed)
    for _ in range(25):
        data = bytearray(SMALL)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            g = open_gguf(BytesSource(bytes(data), "fuzz.gguf"))
        except GGUFError as e:
            assert str(e).startswith("fuzz.gguf: "), e
            continue
        for name, t in g.tensors.items():
            assert g.tensor_bytes(name).size == t.n_bytes


# --- small files that would make the reader allocate many times their size (issue 19) ----------------------

MiB = 1 << 20


def many_inner_arrays(n: int) -> bytes:
    """One key holding ``n`` empty arrays of UINT8 (12 bytes each in the file)."""
    return header(0, 1) + gstr("a") + u32(9) + u32(9) + u64(n) + (u32(0) + u64(0)) * n


def many_keys(n: int) -> bytes:
    """``n`` keys of one UINT8 each (14 bytes each)."""
    keys = np.char.add("k", np.char.zfill(np.arange(n).astype(str), 7)).astype("S8")
    rows = np.zeros(n, [("len", "<u8"), ("key", "S8"), ("type", "<u4"), ("value", "u1")])
    rows["len"], rows["key"], rows["value"] = 8, keys, 1
    return header(0, n) + rows.tobytes()


def many_tensor_infos(n: int) -> bytes:
    """``n`` tensor infos of 1-D F32 tensors of no elements (36 bytes each)."""
    names = np.char.add("t", np.char.zfill(np.arange(n).astype(str), 7)).astype("S8")
    rows = np.zeros(n, [("len", "<u8"), ("name", "S8"), ("n_dims", "<u4"), ("ne", "<u8"), ("type", "<u4"),
                        ("offset", "<u8")])
    rows["len"], rows["name"], rows["n_dims"] = 8, names, 1
    return header(n, 0) + rows.tobytes()


# (what it holds, its bytes, the error); each is refused before the objects it counts are made
HOSTILE_COUNTS = {
    "inner-arrays": (lambda: many_inner_arrays(3_000_000),
                     r"byte 49: key 'a': metadata would hold more than \d+ MiB: this array of 3,000,000 arrays"),
    "keys": (lambda: many_keys(2_000_000),
             r"byte 24: header: metadata would hold more than \d+ MiB: this count of 2,000,000 keys"),
    "tensor-infos": (lambda: many_tensor_infos(2_000_000),
                     r"byte 24: tensor infos: the header would hold more than \d+ MiB: this count of 2,000,000 "
                     r"tensor infos"),
}
PEAK = """
import resource, sys
from pyengine.errors import GGUFError
from pyengine.gguf import open_gguf
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    open_gguf(sys.argv[1])
    print("opened")
except GGUFError as e:
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, e)
"""


@pytest.mark.parametrize("case", list(HOSTILE_COUNTS))
def test_a_small_file_of_hostile_counts_is_refused_within_twice_its_size(case, tmp_path):
    """3 M empty inner arrays (34 MiB), 2 M keys (27 MiB), 2 M tensor infos (69 MiB): the process grows by
    less than twice the file plus 64 MiB (it grew 13-22x the file before) and says which count."""
    make, message = HOSTILE_COUNTS[case]
    path = tmp_path / f"{case}.gguf"
    path.write_bytes(make())
    out = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True, text=True, timeout=300,
                         cwd=ROOT, check=True).stdout
    grown_kib, text = out.split(" ", 1)
    assert re.match(rf"{case}\.gguf: {message} would bring it to [\d,]+ bytes$", text.strip()), text
    assert int(grown_kib) * 1024 < 2 * path.stat().st_size + 64 * MiB
