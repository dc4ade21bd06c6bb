"""Make tests/golden/reference.json: llama.cpp's answers for the tests that used to ask it live.

Run by hand, never in CI (it needs llama-cpp-python, a ~20 minute compile; no models):

    pip install llama-cpp-python==0.3.36
    python tests/golden/make_reference_golden.py     # ~5 s; rewrites reference.json

The committed data was made with llama-cpp-python 0.3.36 (its vendored llama.cpp: libllama 0.5.0,
libggml 0.25.3) and jinja2 3.1.6, CPU only. The cases are the tests' own (imported from them), so
the tests and this script cannot drift apart. What llama.cpp is asked (README.md has the schema):

- ``chat_builtin`` (tests/text/test_chat_template.py): ``llama_chat_apply_template(name, chat, add_ass)``
  for every built-in template pyengine knows x 4 chats x add_ass true/false (72 strings).
- ``chat_jinja``, ``chat_jinja_error``: llama-cpp-python's ``Jinja2ChatFormatter`` (sandboxed Jinja2,
  trim_blocks, lstrip_blocks) rendering the test's RICH_TEMPLATE (8 strings), and the exception it
  raises on a ``tool`` message (``raise_exception``).
- ``sampling`` (tests/generation/test_sampling.py): llama.cpp's samplers (src/llama-sampler.cpp:
  ``llama_sampler_init_penalties``, ``_top_k``, ``_top_p``, ``_min_p``) applied to each case's logits,
  first the penalties alone, then the chain; the survivors are stored as a bit mask plus the logits
  llama.cpp changed (the penalized ones), checked here to rebuild llama.cpp's output exactly.
- ``split`` (tests/gguf_file/test_gguf_split.py): tiny-llama-q4km.gguf and its 3-part split (tests/gguf_split.py,
  deterministic) each loaded by ``llama_cpp.Llama`` (part 1's name: llama.cpp finds the others),
  ``eval([1, 5, 9, 42])``, the last position's logits; plus the sha256 of every file it loaded.
"""

from __future__ import annotations

import base64
import ctypes
import json
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent.parent)]

import llama_cpp
from generation import test_sampling as ts
from gguf_file import test_gguf_split as tgs
from gguf_split import split_gguf
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from text import test_chat_template as tct  # tests/: the cases

from pyengine.text.builtin_templates import BUILTIN_TEMPLATES


def builtin(name: str, messages: list[dict], add_ass: bool) -> str:
    """llama.cpp's own rendering (``llama_chat_apply_template``)."""
    arr = (llama_cpp.llama_chat_message * len(messages))(
        *[llama_cpp.llama_chat_message(role=m["role"].encode(), content=m["content"].encode()) for m in messages])
    buf = ctypes.create_string_buffer(1 << 14)
    n = llama_cpp.llama_chat_apply_template(name.encode(), arr, len(messages), add_ass, buf, len(buf))
    assert 0 <= n < len(buf), (name, n)
    return buf.raw[:n].decode()


def jinja(messages: list[dict], add: bool) -> str:
    return Jinja2ChatFormatter(tct.RICH_TEMPLATE, eos_token="</s>", bos_token="<s>",
                               add_generation_prompt=add)(messages=messages).prompt


def jinja_error() -> dict:
    try:
        jinja(tct.JINJA_BAD_ROLE, True)
    except Exception as e:  # noqa: BLE001 -- recorded as it is
        return {"type": type(e).__name__, "message": str(e)}
    raise AssertionError("the formatter accepted a tool message")


def survivors(steps, logits, history) -> dict:
    """Apply llama.cpp samplers (``(name, *args)``) in order; the surviving ``{id: logit}``."""
    assert ctypes.sizeof(llama_cpp.llama_token_data) == 12
    arr = np.zeros(len(logits), dtype=[("id", "<i4"), ("logit", "<f4"), ("p", "<f4")])   # llama_token_data[]
    arr["id"], arr["logit"] = np.arange(len(logits)), logits
    cur = llama_cpp.llama_token_data_array(arr.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)),
                                           len(arr), -1, False)
    for name, *args in steps:
        smpl = getattr(llama_cpp, f"llama_sampler_init_{name}")(*args)
        for t in history:
            llama_cpp.llama_sampler_accept(smpl, t)
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(cur))
        llama_cpp.llama_sampler_free(smpl)
    return dict(zip(arr["id"][:cur.size].tolist(), arr["logit"][:cur.size].tolist()))


def encode_survivors(found: dict, logits) -> dict:
    """``{n, mask, changed}`` (see ts.survivors_from_golden); checked to decode to ``found`` exactly."""
    mask = np.zeros(len(logits), np.uint8)
    mask[list(found)] = 1
    changed = [[i, v] for i, v in sorted(found.items()) if np.float32(v) != logits[i]]
    rec = {"n": len(found), "mask": base64.b64encode(zlib.compress(np.packbits(mask).tobytes(), 9)).decode(),
           "changed": changed}
    assert ts.survivors_from_golden(rec, logits) == found
    return rec


def sampling_case(n, top_k_, top_p_, min_p_, penalty) -> dict:
    logits, history = ts.chain_inputs(n, top_k_)
    steps = [("penalties", n, ts.REPEAT_LAST_N, penalty, 0.0, 0.0), ("top_k", top_k_), ("top_p", top_p_, 1),
             ("min_p", min_p_, 1)]
    return {"inputs_sha256": ts.inputs_sha256(logits, history),
            "penalties": encode_survivors(survivors(steps[:1], logits, history), logits),
            "chain": encode_survivors(survivors(steps, logits, history), logits)}


def last_logits(path: Path) -> list[float]:
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=16, n_threads=1, logits_all=True, verbose=False)
    llm.eval(tgs.LLAMA_TOKENS)
    out = np.array(llm.scores[len(tgs.LLAMA_TOKENS) - 1], dtype=np.float32).tolist()
    llm.close()
    return out


def split_case() -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        parts = split_gguf(tgs.WHOLE, 3, tmp)
        return {"tokens": tgs.LLAMA_TOKENS, "whole_sha256": tgs.sha256_file(tgs.WHOLE),
                "parts_sha256": {p.name: tgs.sha256_file(p) for p in parts},
                "logits_whole": last_logits(tgs.WHOLE), "logits_split": last_logits(parts[0])}


def main() -> None:
    bools = (True, False)
    data = {
        "llama_cpp_python": llama_cpp.__version__,
        "chat_builtin": {tct.builtin_key(b.name, a, c): builtin(b.name, chat, a)
                         for b in BUILTIN_TEMPLATES for a in bools for c, chat in tct.CHATS.items()},
        "chat_jinja": {tct.builtin_key("rich", a, c): jinja(chat, a)
                       for a in bools for c, chat in tct.JINJA_CHATS.items()},
        "chat_jinja_error": jinja_error(),
        "sampling": {ts.chain_key(*case): sampling_case(*case) for case in ts.CHAIN_CASES},
        "split": split_case(),
    }
    out = HERE / "reference.json"
    out.write_text(json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
