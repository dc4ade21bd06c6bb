"""An architecture pyengine does not run: said plainly (its name and the supported ones), and the file
still inspected (its metadata and tensors, in the CLI and in the data the page's inspector shows).

The file: tests/fixtures/tiny-qwen2.gguf with ``general.architecture`` = "mamba" and its keys renamed
``mamba.*`` (a GGUF like any other, of an architecture llama.cpp knows and pyengine does not).
"""

from __future__ import annotations

import io
import json
import sys

import pytest
from conftest import TINY
from gguf_write import gguf_bytes

from pyengine.browser.page import inspector
from pyengine.cli import main
from pyengine.errors import ModelError, UnsupportedArchitectureError
from pyengine.gguf import open_gguf
from pyengine.inspect import describe
from pyengine.model.config import ARCHITECTURES, ModelConfig
from pyengine.model.load import load_model


def mamba_bytes() -> bytes:
    """tiny-qwen2.gguf as a "mamba" file."""
    with open_gguf(TINY["qwen2"]) as g:
        kvs = [(k.replace("qwen2.", "mamba."), t, "mamba" if k == "general.architecture" else g.metadata[k])
               for k, t in g.value_types.items()]
        tensors = [(n, i.shape, i.type.id, g.tensor_bytes(n).tobytes()) for n, i in g.tensors.items()]
    return gguf_bytes(kvs, tensors)


@pytest.fixture(scope="module")
def mamba(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("unsupported") / "tiny-mamba.gguf"
    path.write_bytes(mamba_bytes())
    return str(path)


def cli(argv: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO('"hi"\n'))
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_error_names_the_architecture_and_the_supported_ones(mamba):
    with open_gguf(mamba) as g:
        with pytest.raises(UnsupportedArchitectureError) as info:
            ModelConfig.from_metadata(g.metadata, g.tensors)
        with pytest.raises(UnsupportedArchitectureError):
            load_model(g)
    e = info.value
    assert isinstance(e, ModelError) and e.arch == "mamba" and e.supported == tuple(ARCHITECTURES)
    assert str(e) == ("unsupported architecture 'mamba' (general.architecture); supported: "
                      + ", ".join(ARCHITECTURES))


@pytest.mark.parametrize("command", [["generate", "-p", "hi", "-n", "2"], ["chat", "-n", "2"]])
def test_generate_and_chat_say_it_in_one_line(mamba, command, monkeypatch, capsys):
    argv = [command[0], mamba, *command[1:]]
    rc, out, err = cli(argv, monkeypatch, capsys)
    assert rc == 1 and out == ""
    assert err == (f"error: unsupported architecture 'mamba' (general.architecture); supported: "
                   f"{', '.join(ARCHITECTURES)}; `python -m pyengine inspect {mamba}` shows its metadata "
                   f"and tensors\n")


def test_the_tokenizer_still_works(mamba, monkeypatch, capsys):
    rc, out, _ = cli(["tokenize", mamba], monkeypatch, capsys)
    assert rc == 0 and json.loads(out) == [104, 105]          # tiny-qwen2's "h", "i"


def test_inspect_shows_its_metadata_and_tensors(mamba, monkeypatch, capsys):
    rc, out, _ = cli(["inspect", mamba], monkeypatch, capsys)
    assert rc == 0
    assert "general.architecture" in out and "mamba" in out and "mamba.block_count" in out
    assert "blk.1.ffn_down.weight" in out and "token_embd.weight" in out
    rc, out, _ = cli(["inspect", "--json", mamba], monkeypatch, capsys)
    d = json.loads(out)
    assert rc == 0 and d["metadata"]["general.architecture"] == "mamba"
    with open_gguf(mamba) as g:
        assert [t["name"] for t in d["tensors"]] == list(g.tensors)


def test_the_pages_inspector_data_holds_them(mamba):
    """What pyengine.browser.page.inspector gives the page: every key and tensor of the file."""
    with open_gguf(mamba) as g:
        data = inspector(describe(g))
        assert {m["key"] for m in data["metadata"]} == set(g.metadata)
        assert next(m["value"] for m in data["metadata"] if m["key"] == "general.architecture") == "mamba"
        assert [t["name"] for t in data["tensors"]] == list(g.tensors)
        assert data["header"]["n_tensors"] == len(g.tensors)


@pytest.mark.parametrize("extra, message", [
    ("blk.0.ffn_gate_inp.weight", "'blk.0.ffn_gate_inp.weight': mixture-of-experts layers are not supported"),
    ("blk.3.ffn_down_exps.weight", "'blk.3.ffn_down_exps.weight': mixture-of-experts layers are not supported"),
    ("rope_factors_long.weight", "LongRoPE .* is not supported"),
])
def test_parts_of_a_supported_architecture_it_cannot_run_are_refused(extra, message, tmp_path):
    """A file of a supported architecture with a part pyengine does not run (Gemma 4 26B-A4B's experts,
    Phi-3.5's LongRoPE) is refused by name, not run without it."""
    with open_gguf(TINY["qwen2"].with_name("tiny-gemma4.gguf")) as g:
        kvs = [(k, t, g.metadata[k]) for k, t in g.value_types.items()]
        tensors = [(n, i.shape, i.type.id, g.tensor_bytes(n).tobytes()) for n, i in g.tensors.items()]
    down = next(t for t in tensors if t[0] == "blk.0.ffn_down.weight")
    path = tmp_path / "with-extra.gguf"
    path.write_bytes(gguf_bytes(kvs, tensors + [(extra, *down[1:])]))
    with open_gguf(path) as g, pytest.raises(ModelError, match=message):
        load_model(g)
