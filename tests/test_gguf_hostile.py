"""Hostile input: every broken file gives its own GGUFError naming file, byte and key/tensor."""

from __future__ import annotations

import random
import re

import pytest
from gguf_corpus import BROKEN, assemble, nested, small_file
from gguf_write import kv, tensor_info

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
