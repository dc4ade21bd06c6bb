"""The real models, read by us and by gguf-py's GGUFReader (the oracle): same keys, tensors, weights."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf_oracle import fields, reader, value_type

from pyengine.gguf import open_gguf
from pyengine.gguf.source import FileSource
from pyengine.inspect import plain

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module", params=["gemma3", "smollm2"])
def model(request):
    path = request.getfixturevalue(f"{request.param}_path")
    src = FileSource(path)
    g = open_gguf(src)
    yield request.param, src, g, reader(path)
    src.close()


def test_header_in_a_few_reads(model):
    name, src, g, r = model
    assert src.reads == {"gemma3": 3, "smollm2": 2}[name]  # 6.5 MB and 1.8 MB headers: 1 + 2 (+ 4) MiB
    assert (g.version, g.alignment, g.data_offset) == (3, 32, r.data_offset)
    assert g.data_offset == {"gemma3": 6_525_120, "smollm2": 1_785_664}[name]


def test_every_key_agrees_with_gguf_reader(model):
    _, _, g, r = model
    assert list(g.metadata) == list(fields(r))
    assert r.fields["GGUF.kv_count"].contents() == g.n_kv == len(fields(r))
    for key, f in fields(r).items():
        assert g.value_types[key] == value_type(f), key
        assert plain(g.metadata[key]) == f.contents(), key
        if isinstance(g.metadata[key], np.ndarray):  # an array of numbers: the oracle's item dtype
            assert g.metadata[key].dtype == f.parts[f.data[0]].dtype, key


def test_every_tensor_info_agrees_with_gguf_reader(model):
    _, _, g, r = model
    assert list(g.tensors) == [t.name for t in r.tensors]
    for rt in r.tensors:
        t = g.tensors[rt.name]
        assert t.shape == tuple(rt.shape.tolist()), rt.name
        assert t.type.name == rt.tensor_type.name and t.type.id == int(rt.tensor_type), rt.name
        assert (t.offset, t.n_bytes, t.n_elements) == (rt.data_offset, rt.n_bytes, rt.n_elements), rt.name


def test_known_facts_of_gemma3(gemma3_path):
    with open_gguf(gemma3_path) as g:
        assert g.file_size == 253_113_024 and len(g.tensors) == 236 and g.n_kv == 33
        types = [t.type.name for t in g.tensors.values()]
        assert {n: types.count(n) for n in set(types)} == {"F32": 109, "Q8_0": 10, "Q5_0": 81, "Q4_K": 27, "Q6_K": 9}
        emb = g.tensors["token_embd.weight"]
        assert emb.shape == (640, 262144) and emb.type.name == "Q8_0"
        assert len(g.metadata["tokenizer.ggml.tokens"]) == 262_144
        assert g.metadata["gemma3.block_count"] == 18


def test_every_tensor_dequantizes_like_gguf_quants(model):
    """Bit-exact float32 (compared as uint32) for all tensors, read one read per tensor."""
    _, src, g, r = model
    reads = src.reads
    for rt in r.tensors:
        ours = g.tensor(rt.name)
        ref = gguf.quants.dequantize(rt.data, rt.tensor_type).astype(np.float32)
        assert ours.shape == tuple(reversed(rt.shape.tolist())), rt.name
        assert np.array_equal(ours.view(np.uint32), ref.reshape(ours.shape).view(np.uint32)), rt.name
    assert src.reads - reads == len(r.tensors)
