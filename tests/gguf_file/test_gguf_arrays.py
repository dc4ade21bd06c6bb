"""Metadata arrays: numbers stay numpy arrays, the cap on what metadata holds, progress while a header parses."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tracemalloc

import gguf
import numpy as np
import pytest
from conftest import ROOT, TINY
from gguf_corpus import assemble
from gguf_split import split_gguf
from gguf_write import gguf_bytes, gstr, header, kv, pad, tensor_info, u32, u64

import pyengine.gguf.header as gguf_header
from pyengine.browser.page import inspector
from pyengine.errors import GGUFError, ModelError, TokenizerError
from pyengine.gguf import open_gguf
from pyengine.gguf.cursor import FIRST_CHUNK, OBJECT_BYTES, PROGRESS_BYTES
from pyengine.gguf.header import KEY_BYTES as KEY_CHARGE
from pyengine.gguf.header import MAX_METADATA_BYTES, VALUE_TYPES
from pyengine.gguf.source import BytesSource, FileSource
from pyengine.inspect import describe, format_text, plain
from pyengine.model.config import ModelConfig
from pyengine.text.tokenizer import Tokenizer

DTYPES = {name: dtype for name, _, dtype in VALUE_TYPES.values() if dtype}  # "FLOAT32" -> "<f4" ...
MiB = 1 << 20

# Items of each fixed-size type, its extremes included.
ITEMS = {
    "UINT8": [0, 255, 7], "INT8": [-128, 127, 0], "UINT16": [0, 65535], "INT16": [-32768, 32767],
    "UINT32": [0, 2**32 - 1], "INT32": [-2**31, 2**31 - 1], "FLOAT32": [0.1, -2.5, math.inf, 1e-45],
    "BOOL": [True, False, True], "UINT64": [0, 2**64 - 1], "INT64": [-2**63, 2**63 - 1],
    "FLOAT64": [math.pi, -1e300, -math.inf],
}


def write(tmp_path, name: str, kvs: list, tensors: list = ()) -> FileSource:
    path = tmp_path / name
    path.write_bytes(gguf_bytes(kvs, list(tensors)))
    return path


# --- numbers stay numpy arrays ------------------------------------------------------------------

def test_arrays_of_every_fixed_size_type_agree_with_gguf_reader(tmp_path):
    kvs = [(f"a.{t.lower()}", f"ARRAY[{t}]", items) for t, items in ITEMS.items()]
    kvs += [(f"a.empty_{t.lower()}", f"ARRAY[{t}]", []) for t in ITEMS]
    path = write(tmp_path, "arrays.gguf", kvs)
    oracle = gguf.GGUFReader(path).fields
    with open_gguf(path) as g:
        for key, vtype, items in kvs:
            got, dtype = g.metadata[key], np.dtype(DTYPES[vtype[6:-1]])
            assert isinstance(got, np.ndarray) and got.ndim == 1 and got.dtype == dtype, key
            assert got.tolist() == oracle[key].contents() == np.array(items, dtype).tolist(), key
            if items:
                assert oracle[key].parts[oracle[key].data[0]].dtype == dtype, key
            assert not got.flags.writeable, key
    assert g.metadata["a.float32"].tolist() == [float(np.float32(0.1)), -2.5, math.inf, float(np.float32(1e-45))]
    assert g.metadata["a.uint64"][1] == 2**64 - 1 and g.metadata["a.int64"][0] == -2**63


def test_arrays_of_arrays_are_lists_of_arrays():
    g = open_gguf(gguf_bytes([("a.n", "ARRAY[ARRAY[INT16]]", [[1, -2], [], [3]]),
                              ("a.s", "ARRAY[ARRAY[STRING]]", [["x", "y"], []])], []))
    n = g.metadata["a.n"]
    assert type(n) is list and [a.dtype for a in n] == [np.int16] * 3 and plain(n) == [[1, -2], [], [3]]
    assert g.metadata["a.s"] == [["x", "y"], []]


def test_bool_items_are_true_when_not_zero():
    data = assemble([gstr("a.b") + u32(9) + u32(7) + u64(4) + bytes([0, 1, 2, 255])], [])
    b = open_gguf(data).metadata["a.b"]
    assert b.dtype == bool and b.tolist() == [False, True, True, True]
    assert b.view(np.uint8).tolist() == [0, 1, 1, 1] and (b == np.array([0, 1, 1, 1], bool)).all()
    assert not b.flags.writeable


@pytest.mark.parametrize("n", [3, 2_000_000])  # 12 bytes inside the first buffer; 8 MB past it, read alone
def test_an_array_owns_exactly_its_bytes(n):
    """Nothing made from the header keeps the header's buffer alive."""
    src = BytesSource(gguf_bytes([("a.x", "ARRAY[FLOAT32]", np.arange(n, dtype="<f4")),
                                  ("a.after", "UINT32", 7)], []), "own.gguf")
    g = open_gguf(src)
    x = g.metadata["a.x"]
    assert isinstance(x.base, bytes) and len(x.base) == x.nbytes == 4 * n
    assert np.array_equal(x, np.arange(n, dtype=np.float32)) and g.metadata["a.after"] == 7
    assert src.reads == (1 if n == 3 else 3)  # the first chunk; then the array alone, then the rest
    with pytest.raises(ValueError, match="read-only"):
        x[0] = 1.0


@pytest.fixture(scope="module")
def array_40mb(tmp_path_factory):
    """A GGUF whose metadata holds a 40 MB float32 array (10,000,000 items), and one tensor."""
    path = tmp_path_factory.mktemp("big") / "big.gguf"
    path.write_bytes(gguf_bytes([("general.architecture", "STRING", "llama"),
                                 ("a.big", "ARRAY[FLOAT32]", np.arange(10_000_000, dtype="<f4"))],
                                [("t", (8,), 0, np.ones(8, "<f4").tobytes())]))
    return path


def test_a_40_mb_array_is_held_once_while_read(array_40mb):
    """The header parse peaks near the array's own size (it was 2 buffers, then a list of floats)."""
    n_bytes = 40_000_000
    tracemalloc.start()
    try:
        with open_gguf(FileSource(array_40mb)) as g:
            _, peak = tracemalloc.get_traced_memory()
            big = g.metadata["a.big"]
    finally:
        tracemalloc.stop()
    assert n_bytes < peak < n_bytes + 2 * FIRST_CHUNK
    assert big.dtype == np.float32 and big.shape == (10_000_000,)
    assert np.array_equal(big, np.arange(10_000_000, dtype=np.float32))
    assert list(g.tensors) == ["t"] and np.array_equal(g.tensor("t"), np.ones(8))


def inspect_peak(path) -> int:
    """The peak RSS in bytes of ``python -m pyengine inspect PATH``, run as the one child of a fresh process."""
    code = ("import resource, subprocess, sys; "
            "subprocess.run([sys.executable, '-m', 'pyengine', 'inspect', sys.argv[1]], check=True, "
            "stdout=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, check=True)
    return int(p.stdout) * 1024


def test_inspect_of_a_40_mb_array_stays_near_its_size(array_40mb):
    """``python -m pyengine inspect``'s peak RSS grows by about the array over a tiny file's."""
    grown = inspect_peak(array_40mb) - inspect_peak(TINY["llama"])
    assert 30_000_000 < grown < 1.25 * 40_000_000, grown


def test_inspect_of_a_240_mb_array_stays_near_its_size(tmp_path):
    """The issue's file: one float32 metadata array of 240 MB (60,000,000 zeros; a sparse file) made
    ``inspect`` peak at 2.5 GB RSS as Python floats; now about the array over a tiny file's."""
    n, path = 60_000_000, tmp_path / "240mb.gguf"
    head = header(1, 2) + kv("general.architecture", "STRING", "llama") + gstr("a.big") + u32(9) + u32(6) + u64(n)
    infos = tensor_info("t", (8,), 0, 0)
    with open(path, "wb") as f:
        f.write(head)
        f.seek(len(head) + 4 * n)                        # the array's zeros: a hole in the file
        f.write(infos)
        f.write(bytes(pad(f.tell(), 32) - f.tell()) + np.ones(8, "<f4").tobytes())
    with open_gguf(path) as g:
        assert g.metadata["a.big"].shape == (n,) and list(g.tensors) == ["t"]
    grown = inspect_peak(path) - inspect_peak(TINY["llama"])
    assert 200_000_000 < grown < 1.25 * 240_000_000, grown


# --- the cap on the metadata held ---------------------------------------------------------------

CAP = 1 * MiB
KEY_BYTES = 8 + 5 + 4         # "a.big"/"a.tok": length, text, value type (KEY_CHARGE: what its objects are charged)
ARRAY_HEAD = 4 + 8            # item type, count


@pytest.fixture
def small_cap(monkeypatch):
    monkeypatch.setattr(gguf_header, "MAX_METADATA_BYTES", CAP)


def test_numbers_just_under_the_cap_load(small_cap):
    # held: the metadata's bytes, plus KEY_CHARGE for the key and OBJECT_BYTES for the array
    n = (CAP - KEY_BYTES - ARRAY_HEAD - KEY_CHARGE - OBJECT_BYTES) // 4
    g = open_gguf(gguf_bytes([("a.big", "ARRAY[FLOAT32]", np.zeros(n, "<f4"))], []))
    assert g.metadata["a.big"].shape == (n,)


def test_numbers_just_over_the_cap_fail_naming_file_byte_and_key(small_cap):
    n = (CAP - KEY_BYTES - ARRAY_HEAD - KEY_CHARGE - OBJECT_BYTES) // 4 + 1
    data = gguf_bytes([("a.big", "ARRAY[FLOAT32]", np.zeros(n, "<f4"))], [])
    with pytest.raises(GGUFError) as e:
        open_gguf(BytesSource(data, "cap.gguf"))
    held = KEY_BYTES + ARRAY_HEAD + KEY_CHARGE + OBJECT_BYTES + 4 * n
    assert CAP < held <= CAP + 4
    assert str(e.value) == (f"cap.gguf: byte {24 + KEY_BYTES + ARRAY_HEAD}: key 'a.big': metadata would hold "
                            f"more than 1 MiB: this array of FLOAT32 would bring it to {held:,} bytes")


@pytest.mark.parametrize("extra", [0, 1])
def test_strings_just_under_the_cap_load_and_one_more_fails(small_cap, extra):
    # each 10-byte string: its length (8), its bytes, OBJECT_BYTES; the list is one object more
    per = 8 + 10 + OBJECT_BYTES
    n = (CAP - KEY_BYTES - ARRAY_HEAD - KEY_CHARGE - OBJECT_BYTES) // per + extra
    tokens = [f"t{i:09d}" for i in range(n)]
    data = gguf_bytes([("a.tok", "ARRAY[STRING]", tokens)], [])
    if not extra:
        assert open_gguf(data).metadata["a.tok"] == tokens
        return
    with pytest.raises(GGUFError) as e:
        open_gguf(BytesSource(data, "cap.gguf"))
    # every string's object is charged first: the first string whose bytes pass what is left fails
    left = CAP - KEY_BYTES - ARRAY_HEAD - KEY_CHARGE - (n + 1) * OBJECT_BYTES
    k = left // (8 + 10)
    at = 24 + KEY_BYTES + ARRAY_HEAD + (8 + 10) * k + 8
    held = at + 10 - 24 + KEY_CHARGE + (n + 1) * OBJECT_BYTES
    assert str(e.value) == (f"cap.gguf: byte {at}: key 'a.tok': metadata would hold more than 1 MiB: "
                            f"this string would bring it to {held:,} bytes")
    assert held - 18 <= CAP < held and k < n


def test_a_count_of_strings_over_the_cap_fails_before_the_list_is_made(small_cap):
    n = CAP // (8 + OBJECT_BYTES) + 1   # empty strings: 8 bytes of file each, but objects all the same
    data = gguf_bytes([("a.tok", "ARRAY[STRING]", [""] * n)], [])
    assert len(data) < CAP
    held = KEY_BYTES + ARRAY_HEAD + KEY_CHARGE + 8 * n + (n + 1) * OBJECT_BYTES
    with pytest.raises(GGUFError, match=rf"byte 53: key 'a\.tok': metadata would hold more than 1 MiB: "
                                        rf"this array of {n:,} strings would bring it to {held:,} bytes$"):
        open_gguf(data)


def test_the_real_cap_is_checked_before_the_array_is_allocated(tmp_path):
    """A sparse file holding an array one item past 256 MiB fails after reading the first chunk."""
    assert MAX_METADATA_BYTES == 256 * MiB
    n = MAX_METADATA_BYTES // 4
    head = header(0, 1) + gstr("a.big") + u32(9) + u32(6) + u64(n)
    path = tmp_path / "sparse.gguf"
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + 4 * n + 64)
    tracemalloc.start()
    try:
        with pytest.raises(GGUFError, match=r"^sparse\.gguf: byte 53: key 'a\.big': metadata would hold more "
                                            r"than 256 MiB: this array of FLOAT32 would bring it to "
                                            r"268,435,805 bytes$"):
            open_gguf(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * FIRST_CHUNK


@pytest.mark.real_model
@pytest.mark.parametrize("name", ["gemma3_path", "smollm2_path"])
def test_real_models_hold_an_eighth_of_the_cap(request, monkeypatch, name):
    monkeypatch.setattr(gguf_header, "MAX_METADATA_BYTES", MAX_METADATA_BYTES // 8)
    with open_gguf(request.getfixturevalue(name)) as g:
        assert len(g.metadata["tokenizer.ggml.tokens"]) > 40_000


# --- progress while the header parses -----------------------------------------------------------

def test_progress_while_a_big_vocab_parses():
    """400,000 strings of 12 bytes after 1.6 MB of scores: a call every PROGRESS_BYTES, each with the
    header's true end as the total (the strings so far predict the rest), and a last call at the end."""
    n = 400_000
    data = gguf_bytes([("general.architecture", "STRING", "llama"),
                       ("a.scores", "ARRAY[FLOAT32]", np.zeros(n, "<f4")),
                       ("a.tokens", "ARRAY[STRING]", [f"t{i:011d}" for i in range(n)])], [])
    calls = []
    g = open_gguf(data, progress=lambda done, total: calls.append((done, total)))
    end = g.sections[3].end
    assert calls[-1] == (end, end) and len(calls) > 4
    dones = [d for d, _ in calls]
    assert dones == sorted(set(dones)) and all(d <= t for d, t in calls)
    for before, after in zip([0] + dones[:-2], dones[:-1]):  # every call but the last: PROGRESS_BYTES apart
        assert PROGRESS_BYTES <= after - before <= PROGRESS_BYTES + 20
    assert end - dones[-2] <= PROGRESS_BYTES + 20
    assert [t for _, t in calls] == [end] * len(calls)


def test_progress_sums_the_parts_of_a_split_model(tmp_path):
    parts = split_gguf(TINY["llama-q4km"], 3, tmp_path)
    order = [parts[2], parts[0], parts[1]]
    calls = []
    with open_gguf(order, progress=lambda done, total: calls.append((done, total))) as g:
        ends = {p.source.name: p.sections[3].end for p in g.parts}
    at = np.cumsum([ends[p.name] for p in order]).tolist()
    assert calls == [(a, a) for a in at]  # small headers: one call at the end of each, summed in the order given


def test_progress_is_optional():
    data = gguf_bytes([("a.x", "ARRAY[INT8]", [1, 2])], [])
    for g in (open_gguf(data), open_gguf(data, None), open_gguf(data, progress=None)):
        assert g.metadata["a.x"].tolist() == [1, 2]


# --- the consumers ------------------------------------------------------------------------------

def tiny_metadata(name: str) -> dict:
    with open_gguf(TINY[name]) as g:
        return dict(g.metadata), dict(g.value_types)


def test_tokenizer_reads_the_arrays_as_lists_of_python_numbers():
    meta, _ = tiny_metadata("llama")
    assert isinstance(meta["tokenizer.ggml.scores"], np.ndarray)
    tok = Tokenizer(meta)
    assert type(tok.scores) is list and type(tok.scores[0]) is float
    assert tok.scores == meta["tokenizer.ggml.scores"].tolist()
    assert type(tok.attrs) is list and len(tok.attrs) == tok.n_vocab


@pytest.mark.parametrize("key, value, message", [
    ("tokenizer.ggml.token_type", np.ones(328, np.float32), "expected a list of int, got an array of float32"),
    ("tokenizer.ggml.token_type", np.ones(328, bool), "expected a list of int, got an array of bool"),
    ("tokenizer.ggml.scores", np.ones(328, bool), "expected a list of float or int, got an array of bool"),
    ("tokenizer.ggml.token_type", np.ones(327, np.int32), "327 entries, but tokenizer.ggml.tokens has 328"),
    ("tokenizer.ggml.tokens", np.ones(328, np.int32), "expected a list of str, got an array of int32"),
])
def test_tokenizer_names_arrays_of_the_wrong_type(key, value, message):
    meta, _ = tiny_metadata("llama")
    with pytest.raises(TokenizerError, match=f"^{key}: {message}"):
        Tokenizer({**meta, key: value})


def test_tokenizer_takes_any_integer_dtype_for_token_types():
    meta, _ = tiny_metadata("llama")
    types = meta["tokenizer.ggml.token_type"]
    tok = Tokenizer({**meta, "tokenizer.ggml.token_type": types.astype(np.uint8)})
    assert tok.attrs == Tokenizer(meta).attrs


def gemma3_with(tmp_path, **changes) -> dict:
    """The tiny gemma3's metadata written back with ``changes`` (key -> (type, value)), read again."""
    meta, types = tiny_metadata("gemma3")
    kvs = [(k, types[k], v) for k, v in meta.items() if k not in changes]
    kvs += [(k, vtype, v) for k, (vtype, v) in changes.items()]
    with open_gguf(write(tmp_path, "g.gguf", kvs)) as g:
        return g.metadata


def test_config_reads_a_bool_array_pattern_and_uniform_per_layer_values(tmp_path):
    flags = [False, True, True, False, True, True]
    meta = gemma3_with(tmp_path, **{"gemma3.attention.sliding_window_pattern": ("ARRAY[BOOL]", flags),
                                    "gemma3.attention.head_count_kv": ("ARRAY[INT32]", [1] * 6),
                                    "gemma3.rope.freq_base": ("ARRAY[FLOAT32]", [1e6] * 6)})
    assert isinstance(meta["gemma3.attention.sliding_window_pattern"], np.ndarray)
    c = ModelConfig.from_metadata(meta)
    assert c.swa_layers == tuple(flags) and all(type(f) is bool for f in c.swa_layers)
    assert (c.n_head_kv, c.rope_freq_base) == (1, 1e6) and type(c.n_head_kv) is int


@pytest.mark.parametrize("key, vtype, value, message", [
    ("gemma3.attention.head_count_kv", "ARRAY[INT32]", [1, 2, 1, 1, 1, 1], r"per-layer values \[1, 2, 1, 1, 1, 1\]"),
    ("gemma3.attention.head_count_kv", "ARRAY[INT32]", [], r"per-layer values \[\]"),
    ("gemma3.attention.head_count_kv", "ARRAY[BOOL]", [True] * 6, "must be a number, got True"),
    ("gemma3.attention.sliding_window_pattern", "ARRAY[INT32]", [0, 1] * 3, "must be 6 booleans"),
    ("gemma3.attention.sliding_window_pattern", "ARRAY[BOOL]", [True] * 5, "must be 6 booleans"),
])
def test_config_names_per_layer_arrays_it_cannot_use(tmp_path, key, vtype, value, message):
    meta = gemma3_with(tmp_path, **{key: (vtype, value)})
    with pytest.raises(ModelError, match=message):
        ModelConfig.from_metadata(meta)


def test_inspect_shows_numeric_arrays_as_plain_json(tmp_path):
    path = write(tmp_path, "odd.gguf", [("a.f", "ARRAY[FLOAT32]", [0.1, math.nan, -math.inf]),
                                        ("a.i", "ARRAY[INT64]", list(range(20))),
                                        ("a.b", "ARRAY[BOOL]", [True, False]),
                                        ("a.n", "ARRAY[ARRAY[UINT8]]", [[1], list(range(9))])])
    with open_gguf(path) as g:
        d = describe(g)
    assert d["metadata"] == {"a.f": [float(np.float32(0.1)), "nan", "-inf"],
                             "a.i": {"length": 20, "first": list(range(8))}, "a.b": [True, False],
                             "a.n": [[1], {"length": 9, "first": list(range(8))}]}
    assert json.loads(json.dumps(d, allow_nan=False)) == d  # strict JSON: no NaN tokens, no numpy types
    text = format_text(d)
    assert '= [0.1, "nan", "-inf"]' in text and "= [0, 1, 2, 3, 4, 5, 6, 7, ... ] (20 items)" in text
    rows = {r["key"]: r["value"] for r in inspector(d)["metadata"]}
    assert rows == {"a.f": '[0.1, "nan", "-inf"]', "a.i": "[0, 1, 2, 3, 4, 5, 6, 7, ... ] (20 items)",
                    "a.b": "[True, False]", "a.n": "[[1], [0, 1, 2, 3, 4, 5, 6, 7, ... ] (9 items)]"}


def test_random_arrays_round_trip():
    """Arrays of random types and lengths, one after another, some past the buffer: each comes back bit for bit."""
    rng = np.random.default_rng(0)
    kvs = []
    for i in range(30):
        t = list(ITEMS)[rng.integers(len(ITEMS))]
        dtype, n = np.dtype(DTYPES[t]), int(rng.choice([0, 1, 7, 1000, 100_000, 700_000]))
        items = rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype) if t != "BOOL" else \
            rng.integers(0, 2, n).astype(bool)
        kvs.append((f"a.{i}", f"ARRAY[{t}]", items))
    g = open_gguf(BytesSource(gguf_bytes(kvs, []), "random.gguf"))
    for key, _, items in kvs:
        got = g.metadata[key]
        assert got.dtype == items.dtype and got.tobytes() == items.tobytes(), key


# --- arrays a helper worker skips ---------------------------------------------------------------

def test_skipped_arrays_are_counted_and_the_rest_read_the_same(tmp_path):
    """open_gguf(skip=VOCAB_ARRAYS), as a helper worker opens its file: the vocabulary's lists are only
    counted (a SkippedArray of their length), every other key, offset and tensor is as a full read has it,
    and the config (its vocabulary size counted from the tokens) is the same."""
    from pyengine.gguf.header import SkippedArray
    from pyengine.text.vocab import VOCAB_ARRAYS
    for path in (TINY["qwen2"], TINY["gemma3"], ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"):
        with open_gguf(path) as full, open_gguf(path, skip=VOCAB_ARRAYS) as part:
            skipped = {k for k in part.metadata if isinstance(part.metadata[k], SkippedArray)}
            assert skipped == VOCAB_ARRAYS & set(full.metadata) and "tokenizer.ggml.tokens" in skipped
            assert all(len(part.metadata[k]) == len(full.metadata[k]) > 0 for k in skipped)
            assert {k: v for k, v in part.metadata.items() if k not in skipped}.keys() == full.metadata.keys() - skipped
            assert part.value_types == full.value_types and part.tensors == full.tensors
            assert ModelConfig.from_metadata(part.metadata, part.tensors) == ModelConfig.from_metadata(
                full.metadata, full.tensors)


@pytest.mark.parametrize("items, message", [
    (u64(2) + gstr("ab") + u64(10) + b"ccc", "string needs 10 bytes but only 3 are left"),   # runs past the end
    (u64(3), "array of strings: 3 items of at least 8 bytes cannot fit in the 0 bytes left"),
])
def test_a_skipped_array_past_the_file_is_an_error_naming_its_key(items, message):
    """A skipped array is walked as strictly as a read one: lengths past the file's end fail, naming the key."""
    from pyengine.text.vocab import VOCAB_ARRAYS
    body = header(0, 1) + gstr("tokenizer.ggml.tokens") + u32(9) + u32(8) + items   # ARRAY[STRING]
    with pytest.raises(GGUFError, match=f"cut.gguf: byte \\d+: key 'tokenizer.ggml.tokens': {message}"):
        open_gguf(BytesSource(body, "cut.gguf"), skip=VOCAB_ARRAYS)
