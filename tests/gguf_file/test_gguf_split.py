"""Split models: parts in any order read as the whole file; bad sets of parts are named."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import gguf
import numpy as np
import pytest
from conftest import GOLDEN, TINY
from gguf_split import split_gguf
from gguf_write import gguf_bytes

from pyengine.errors import GGUFError
from pyengine.gguf import open_gguf
from pyengine.gguf.source import BytesSource, FileSource
from pyengine.inspect import plain

WHOLE = TINY["llama-q4km"]  # 21 tensors: F32, Q4_K, Q6_K, Q5_0, Q8_0


@pytest.fixture(scope="module")
def parts3(tmp_path_factory):
    return split_gguf(WHOLE, 3, tmp_path_factory.mktemp("split3"))


def test_split_names_and_keys(parts3):
    assert [p.name for p in parts3] == [f"tiny-llama-q4km-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    for i, p in enumerate(parts3):
        r = gguf.GGUFReader(p)  # the oracle reads every part
        assert r.fields["split.no"].contents() == i
        assert r.fields["split.count"].contents() == 3
        assert r.fields["split.tensors.count"].contents() == 21
        assert len(r.tensors) == 7
    assert "general.architecture" in gguf.GGUFReader(parts3[0]).fields
    assert "general.architecture" not in gguf.GGUFReader(parts3[1]).fields


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shuffled_parts_read_as_the_whole_file(parts3, seed):
    order = parts3[:]
    random.Random(seed).shuffle(order)
    sources = [FileSource(p) for p in order]
    with open_gguf(WHOLE) as whole, open_gguf(sources) as split:
        assert [p.source.name for p in split.parts] == [p.name for p in parts3]
        assert {k: plain(v) for k, v in split.metadata.items() if not k.startswith("split.")} == \
            {k: plain(v) for k, v in whole.metadata.items()}
        assert {k: split.value_types[k] for k in whole.metadata} == whole.value_types
        assert list(split.tensors) == list(whole.tensors)
        for name, t in whole.tensors.items():
            s = split.tensors[name]
            assert (s.shape, s.type, s.n_bytes) == (t.shape, t.type, t.n_bytes)
            assert s.part == list(whole.tensors).index(name) // 7
            assert np.array_equal(split.tensor_bytes(name), whole.tensor_bytes(name))
            assert np.array_equal(split.tensor(name), whole.tensor(name))
        # each tensor was read from its own part: 1 header read + 7 tensors x 2 (bytes, tensor)
        assert [s.reads for s in sorted(sources, key=lambda s: s.name)] == [15, 15, 15]
    for s in sources:
        s.close()


LLAMA_TOKENS = [1, 5, 9, 42]     # evaluated by llama.cpp on the whole file and on part 1 of parts3


def sha256_file(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_llama_cpp_loads_our_split(parts3):
    """llama.cpp found parts 2 and 3 from part 1's name and gave the whole file's logits.

    golden/make_reference_golden.py loaded WHOLE and these same parts (the splitter is deterministic:
    their sha256 is recorded) in llama.cpp, evaluated LLAMA_TOKENS and kept the last position's logits."""
    rec = json.loads((GOLDEN / "reference.json").read_text())["split"]
    assert rec["tokens"] == LLAMA_TOKENS and rec["whole_sha256"] == sha256_file(WHOLE)
    assert rec["parts_sha256"] == {p.name: sha256_file(p) for p in parts3}   # the very files llama.cpp loaded
    logits = [np.array(rec[k], dtype=np.float32) for k in ("logits_whole", "logits_split")]
    assert logits[0].shape == (328,) and 1 < np.abs(logits[0]).max() < 100  # real logits, not an empty buffer
    assert np.array_equal(logits[0], logits[1])


def _error(items) -> str:
    with pytest.raises(GGUFError) as e:
        open_gguf(items)
    return str(e.value)


def test_missing_part(parts3):
    assert _error([parts3[2], parts3[0]]) == (
        "tiny-llama-q4km-00001-of-00003.gguf: split model of 3 parts is missing "
        "tiny-llama-q4km-00002-of-00003.gguf (given: tiny-llama-q4km-00003-of-00003.gguf, "
        "tiny-llama-q4km-00001-of-00003.gguf)")


def test_one_part_alone(parts3):
    msg = _error([parts3[1]])
    assert "split model of 3 parts is missing tiny-llama-q4km-00001-of-00003.gguf, " \
           "tiny-llama-q4km-00003-of-00003.gguf" in msg


def test_duplicate_part(parts3):
    msg = _error([parts3[0], parts3[1], parts3[1], parts3[2]])
    assert msg == ("tiny-llama-q4km-00002-of-00003.gguf: duplicate part: split.no 1 is also "
                   "tiny-llama-q4km-00002-of-00003.gguf")


def test_foreign_part_from_another_model(parts3, tmp_path):
    other = split_gguf(TINY["qwen2"], 3, tmp_path)
    msg = _error([parts3[0], other[1], parts3[2]])
    assert msg.startswith("tiny-qwen2-00002-of-00003.gguf: foreign part: ")


def test_foreign_part_of_another_count(parts3, tmp_path):
    two = split_gguf(WHOLE, 2, tmp_path)
    msg = _error([parts3[0], two[1], parts3[2]])
    assert msg == ("tiny-llama-q4km-00002-of-00002.gguf: foreign part: split.count is 2, "
                   "but 3 in tiny-llama-q4km-00001-of-00003.gguf")


def test_whole_file_given_with_parts(parts3):
    msg = _error([parts3[0], WHOLE])
    assert msg.startswith("tiny-llama-q4km.gguf: not part of a split model")


def _part(no: int, count: int, tensors_count: int, tensor_names: list[str], name: str) -> BytesSource:
    kvs = [("split.no", "UINT16", no), ("split.count", "UINT16", count),
           ("split.tensors.count", "INT32", tensors_count)]
    data = gguf_bytes(kvs, [(n, (8,), 0, bytes(32)) for n in tensor_names])
    return BytesSource(data, name)


def test_split_tensors_count_checked():
    msg = _error([_part(0, 2, 3, ["a"], "m-00001-of-00002.gguf"), _part(1, 2, 3, ["b"], "m-00002-of-00002.gguf")])
    assert msg == ("m-00001-of-00002.gguf: key 'split.tensors.count': the split model should hold 3 "
                   "tensors, its 2 part(s) hold 2")


def test_tensor_in_two_parts():
    msg = _error([_part(0, 2, 2, ["a"], "m-00001-of-00002.gguf"), _part(1, 2, 2, ["a"], "m-00002-of-00002.gguf")])
    assert msg == "m-00002-of-00002.gguf: tensor 'a' is also in m-00001-of-00002.gguf"


def test_split_no_out_of_range():
    msg = _error([_part(0, 2, 2, ["a"], "m-00001-of-00002.gguf"), _part(7, 2, 2, ["b"], "m-00008-of-00002.gguf")])
    assert msg == "m-00008-of-00002.gguf: split.no 7 is outside 0..1 of split.count 2"


def test_huge_split_count_names_few_missing():
    msg = _error([_part(0, 65535, 1, ["a"], "m.gguf")])
    assert msg == ("m.gguf: split model of 65535 parts is missing split.no 1, split.no 2, split.no 3, "
                   "split.no 4, split.no 5 ... (given: m.gguf)")


def test_split_count_1_is_a_whole_file():
    g = open_gguf(_part(0, 1, 1, ["a"], "m.gguf"))
    assert list(g.tensors) == ["a"] and len(g.parts) == 1
