"""``python -m pyengine inspect``: the text view, ``--json``, and errors as one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT, TINY
from gguf_corpus import BROKEN
from gguf_oracle import fields, reader, value_type
from gguf_split import split_gguf
from gguf_write import gguf_bytes

from pyengine.cli import main
from pyengine.gguf import open_gguf
from pyengine.inspect import ARRAY_HEAD, describe

LLAMA = TINY["llama"]


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(["inspect", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def expected_value(field):
    """What ``--json`` must show for a gguf-py field: the value, or a cut array."""
    value = field.contents()
    if isinstance(value, list) and len(value) > ARRAY_HEAD:
        return {"length": len(value), "first": value[:ARRAY_HEAD]}
    return value


def check_against_gguf_dump(d: dict, path) -> None:
    r = reader(path)
    assert d["version"] == r.fields["GGUF.version"].contents()
    assert d["n_kv"] == r.fields["GGUF.kv_count"].contents() == len(d["metadata"])
    assert d["n_tensors"] == r.fields["GGUF.tensor_count"].contents() == len(d["tensors"])
    assert (d["alignment"], d["data_offset"]) == (r.alignment, r.data_offset)
    assert list(d["metadata"]) == list(fields(r))
    for key, f in fields(r).items():
        assert d["value_types"][key] == value_type(f), key
        assert d["metadata"][key] == expected_value(f), key
    for t, rt in zip(d["tensors"], r.tensors, strict=True):
        assert (t["name"], t["shape"], t["type"]) == (rt.name, rt.shape.tolist(), rt.tensor_type.name)
        assert (t["offset"], t["n_bytes"], t["n_elements"]) == (rt.data_offset, rt.n_bytes, rt.n_elements)


def test_json_agrees_with_gguf_dump_on_a_fixture(capsys):
    code, out, err = run(capsys, "--json", LLAMA)
    assert code == 0 and err == ""
    d = json.loads(out)
    check_against_gguf_dump(d, LLAMA)
    assert d["sections"] == [{"name": "magic", "start": 0, "end": 4}, {"name": "header", "start": 4, "end": 24},
                             {"name": "metadata", "start": 24, "end": 7937},
                             {"name": "tensor_infos", "start": 7937, "end": 9155},
                             {"name": "tensor_data", "start": 9184, "end": 473312}]
    assert d["file_size"] == LLAMA.stat().st_size == 473312
    assert d["n_params"] == sum(t.n_elements for t in reader(LLAMA).tensors)
    assert d["types"] == [{"type": "F32", "count": 21, "params": d["n_params"], "bytes": 4 * d["n_params"]}]


@pytest.mark.real_model
def test_json_agrees_with_gguf_dump_on_gemma3(capsys, gemma3_path):
    code, out, _ = run(capsys, "--json", gemma3_path)
    assert code == 0
    d = json.loads(out)
    check_against_gguf_dump(d, gemma3_path)
    assert d["metadata"]["tokenizer.ggml.tokens"]["length"] == 262144
    assert d["n_params"] == 268_098_176 and d["file_size"] == 253_113_024


def test_text_view(capsys):
    code, out, err = run(capsys, TINY["llama-q4km"])
    assert code == 0 and err == ""
    d = describe(open_gguf(TINY["llama-q4km"]))
    lines = out.splitlines()
    assert lines[0] == "tiny-llama-q4km.gguf: GGUF v3, little-endian, 609,344 bytes"
    assert "  tensor_infos  8,067    9,285    1,218" in lines
    assert "  version 3, n_tensors 21, n_kv 25, alignment 32, data_offset 9,312" in lines
    for key, vtype in d["value_types"].items():
        assert any(line.split()[:2] == [key, vtype] for line in lines), key
    tokens = next(line for line in lines if line.split()[:1] == ["tokenizer.ggml.tokens"])
    assert tokens.endswith(f"... ] ({len(open_gguf(TINY['llama-q4km']).metadata['tokenizer.ggml.tokens'])} items)")
    assert sum(1 for line in lines if ".weight" in line) == 21
    assert lines[-1] == f"total: {d['n_params']:,} parameters, 609,344 bytes of file"
    by_type = lines[lines.index("by type") + 1:-2]
    assert [row.split()[0] for row in by_type] == ["type"] + [r["type"] for r in d["types"]] + ["total"]


def test_split_model_view(capsys, tmp_path):
    parts = split_gguf(LLAMA, 2, tmp_path)
    code, out, _ = run(capsys, "--json", parts[1], parts[0])
    d = json.loads(out)
    assert d["files"] == [p.name for p in parts] and [p["name"] for p in d["parts"]] == d["files"]
    assert d["file_size"] == sum(p.stat().st_size for p in parts)
    assert [t["part"] for t in d["tensors"]] == [0] * 10 + [1] * 11
    code, out, _ = run(capsys, *parts)
    assert out.count("sections of tiny-llama-0000") == 2 and "  part" in out


def test_odd_values_print(capsys, tmp_path):
    path = tmp_path / "odd.gguf"
    path.write_bytes(gguf_bytes([("a.nan", "FLOAT32", float("nan")), ("a.inf", "FLOAT64", float("-inf")),
                                 ("a.bad", "STRING", b"ok\xff"), ("a.long", "STRING", "x" * 500),
                                 ("a.nest", "ARRAY[ARRAY[UINT8]]", [[1, 2], list(range(20))])], []))
    code, out, _ = run(capsys, "--json", path)
    d = json.loads(out)
    assert d["metadata"] == {"a.nan": "nan", "a.inf": "-inf", "a.bad": "ok\udcff", "a.long": "x" * 500,
                             "a.nest": [[1, 2], {"length": 20, "first": list(range(8))}]}
    code, out, _ = run(capsys, path)
    assert '= "ok\\udcff"' in out and '..." (500 chars)' in out
    assert "= [[1, 2], [0, 1, 2, 3, 4, 5, 6, 7, ... ] (20 items)]" in out
    assert "tensors (0)" in out and "total: 0 parameters" in out


@pytest.mark.parametrize("case", ["bad_magic", "version_1", "n_kv_2^63", "overlapping_tensors"])
def test_bad_file_is_one_error_line(capsys, tmp_path, case):
    data, pattern = next((d, p) for c, d, p in BROKEN if c == case)
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    code, out, err = run(capsys, path)
    assert code == 1 and out == ""
    assert err.startswith("error: bad.gguf: byte ") and err.count("\n") == 1, err


def test_errors_through_the_real_command_line(tmp_path):
    """As a user runs it: exit status 1, one ``error:`` line, no traceback."""
    path = tmp_path / "bad.gguf"
    path.write_bytes(next(d for c, d, _ in BROKEN if c == "big_endian"))
    for args in ([str(path)], [str(tmp_path / "missing.gguf")], ["--json", str(path)]):
        p = subprocess.run([sys.executable, "-m", "pyengine", "inspect", *args], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1 and p.stdout == ""
        assert p.stderr.startswith("error: ") and p.stderr.count("\n") == 1, p.stderr
        assert "Traceback" not in p.stderr
    assert "big-endian" in p.stderr
