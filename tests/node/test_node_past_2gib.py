"""A worker's memory past 2 GiB, under Pyodide in Node: what the page does there is what it does below.

Each run first takes 2.25 GiB of the wasm heap (never touched: the OS backs none of it), so that the
model's weights and whatever Python makes next sit above the 2 GiB line, where an address is a negative
i32 to JavaScript. Then, with every address checked to be past the line:
- SmolLM2's weights read through BrowserFileSource (a File's slices put at the array's address by
  web/file_read.js) give greedy ids and logits bit for bit equal to a run without the ballast;
- strings of every width (ASCII, Latin-1, UCS-2, UCS-4) cross to JavaScript and back unchanged, bytes
  come from an ArrayBuffer, and numpy arrays go to and from a SharedArrayBuffer (JsBlock) and through
  web/meeting.js's sums; before build_scripts/fetch_runtime.py's ADDRESS_FIXES, UCS-2 text came out as
  zeros, UCS-4 raised and the buffers' copies raised RangeError.
"""

from __future__ import annotations

import pytest
from conftest import SMOLLM2

from node.test_node_pyodide import in_pyodide, need, static_ready  # noqa: F401 (static_ready: a fixture)

pytestmark = pytest.mark.node

LINE = 2**31
STEPS = 6
PROMPT = [1, 9690, 314, 260, 3575, 282, 4649, 47]   # token ids of SmolLM2's vocabulary

RUN = '''
import numpy as np
import js
from pyodide.code import run_js
from pyengine.browser.file_source import BrowserFileSource
from pyengine.browser.shared_memory import JsBlock, js_block
from pyengine.gguf import open_gguf
from pyengine.model import load_model
from pyengine.parallel.channel import CTL_WORDS


def crossings():
    \"\"\"Strings and buffers made past the line, each with its address and whether it crossed unchanged.\"\"\"
    got = {}
    for kind, ch in (("ascii", "a"), ("latin1", "\\u00e9"), ("ucs2", "\\u4e2d"), ("ucs4", "\\U0001f600")):
        s = (ch + "x ") * 50000
        back = str(js.Array.new(50000).fill(ch + "x ").join(""))
        got[kind] = [id(s), js.String.new(s).valueOf() == s, id(back), back == s]
    buf = js.Uint8Array.new(2**20)
    buf.fill(7)
    b = buf.to_bytes()
    got["to_bytes"] = [id(b), b == bytes([7]) * 2**20]
    n = 2**23                                             # floats: no chunk this big is free below the line
    block, a = JsBlock.new(n), np.arange(n, dtype=np.float32)
    out = np.zeros_like(a)
    block.write(0, a)
    block.read(0, out)
    got["block"] = [a.ctypes.data, out.ctypes.data, bool((out == a).all())]
    summer = js_block(js.SharedArrayBuffer.new(4 * (CTL_WORDS + n)))
    part, total = a[::-1].copy(), np.zeros_like(a)
    done = summer.sum(part, total, 0, n, 0, 1)
    got["sum"] = [part.ctypes.data, total.ctypes.data, done == -1 and bool((total == part).all())]
    return got


ballast = [np.empty(2**30 + 2**27, np.uint8) for _ in range(BALLAST)]  # 2.25 GiB of the heap, untouched
# A File of the host's model and a reader with FileReaderSync's one method, for Node (no FileReaderSync).
file, reader = run_js(\"\"\"(host) => {
  const bytes = process.getBuiltinModule("fs").readFileSync(host);
  const file = { name: "SmolLM2.gguf", size: bytes.length, slice: (a, b) => ({ a, b }) };
  return [file, { readAsArrayBuffer: (s) => bytes.buffer.slice(bytes.byteOffset + s.a, bytes.byteOffset + s.b) }];
}\"\"\")(HOST)
with open_gguf([BrowserFileSource(file, reader)]) as g:
    model = load_model(g, weights="blocks")
lowest = min(m.data.ctypes.data for layer in model.layers
             for m in (layer.mixer.wqkv, layer.mixer.wo, layer.ffn.w_gate_up, layer.ffn.w_down))
probe = greedy_ids(model, PROMPT, STEPS)
{"lowest": lowest, "ids": probe["greedy_ids"], "logits": probe["logits"],
 "checks": crossings() if BALLAST else None}
'''


def run(ballast: int) -> dict:
    need(SMOLLM2.is_file(), f"{SMOLLM2} is missing (make models)")
    return in_pyodide(f"BALLAST, HOST, PROMPT, STEPS = {ballast}, {str(SMOLLM2)!r}, {PROMPT!r}, {STEPS}\n" + RUN)


@pytest.fixture(scope="module")
def runs(static_ready) -> dict:  # noqa: F811 (a fixture)
    return {"high": run(2), "low": run(0)}


def test_weights_above_2_gib_give_the_same_logits_bit_for_bit(runs):
    high, low = runs["high"], runs["low"]
    assert low["lowest"] < LINE <= high["lowest"]        # the ballast put every matrix past the line
    assert high["ids"] == low["ids"]
    assert high["logits"] == low["logits"]


@pytest.mark.parametrize("kind", ["ascii", "latin1", "ucs2", "ucs4"])
def test_a_string_above_2_gib_crosses_to_javascript_and_back(runs, kind):
    at, there, back_at, back = runs["high"]["checks"][kind]
    assert at >= LINE and back_at >= LINE
    assert there and back


def test_buffers_above_2_gib_cross_both_ways(runs):
    checks = runs["high"]["checks"]
    at, same = checks["to_bytes"]
    assert at >= LINE and same
    *addresses, same = checks["block"]
    assert min(addresses) >= LINE and same
    *addresses, same = checks["sum"]
    assert min(addresses) >= LINE and same
