"""Hostile input under Pyodide 0.27.7 in Node (the browser's runtime), as under CPython: every broken GGUF
of tests/gguf_corpus.py gives the same error, and every hostile chat template of tests/template_corpus.py
ends within its bound with its error, and random templates never pass the bound, with the wasm heap
(which never shrinks: its growth is the peak) held to what a render may build.

One Node process runs everything (Pyodide starts in ~6 s); the corpus files are written here and mounted.
Needs node and static/ (make build).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from gguf_corpus import BROKEN
from static_build import STATIC, offline
from template_corpus import HOSTILE

from node.test_node_pyodide import HARNESS, need, static_ready  # noqa: F401 (a fixture)
from pyengine.errors import GGUFError
from pyengine.gguf import open_gguf
from pyengine.text.template_bounds import MAX_BUILT

pytestmark = pytest.mark.node

TESTS = Path(__file__).resolve().parents[1]
SECONDS, SLACK = 1.0, 2.0   # the bound the templates render under here, and how far past it one operation may end
FUZZ_SECONDS = 20.0

CODE = f'''
import os, random, sys, time
sys.path.insert(0, "/tests")
import pyodide_js
from template_corpus import HOSTILE, random_template
from pyengine.errors import GGUFError, TemplateError
from pyengine.gguf import open_gguf
from pyengine.text.jinja_sandbox import render_jinja

def heap():
    return pyodide_js._module.HEAP8.length

CONTEXT = {{"messages": [{{"role": "user", "content": "hi"}}], "add_generation_prompt": True}}
gguf = {{}}
for name in sorted(os.listdir("/corpus")):
    try:
        open_gguf("/corpus/" + name).close()
        gguf[name] = None
    except GGUFError as e:
        gguf[name] = str(e)
templates = {{}}
for case, source, _ in HOSTILE:
    before, t0 = heap(), time.perf_counter()
    try:
        render_jinja(source, dict(CONTEXT), max_steps=200_000, max_seconds={SECONDS})
        message = None
    except TemplateError as e:
        message = str(e)
    templates[case] = [message, time.perf_counter() - t0, heap() - before]
rng, deadline, fuzz = random.Random(12), time.monotonic() + {FUZZ_SECONDS}, []
while time.monotonic() < deadline:
    source, t0 = random_template(rng), time.perf_counter()
    try:
        render_jinja(source, dict(CONTEXT), max_seconds=0.5)
    except TemplateError:
        pass
    fuzz.append([time.perf_counter() - t0, source])
worst = max(fuzz)
{{"gguf": gguf, "templates": templates, "fuzz": [len(fuzz), worst[0], worst[1]], "heap": heap()}}
'''


@pytest.fixture(scope="module")
def pyodide_run(static_ready, tmp_path_factory):  # noqa: F811 (the fixture imported above)
    corpus = tmp_path_factory.mktemp("corpus")
    for case, data, _ in BROKEN:
        (corpus / f"{case}.gguf").write_bytes(data)
    args = ["node", str(HARNESS), "--static", str(STATIC), "--mount", f"{TESTS}:/tests", "--mount", f"{corpus}:/corpus"]
    proc = subprocess.run(offline(args), input=CODE, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"Pyodide run failed:\n{proc.stderr[-4000:]}"
    return corpus, json.loads(proc.stdout)


@pytest.mark.parametrize("case", [c for c, _, _ in BROKEN])
def test_a_broken_gguf_gives_the_same_error_under_pyodide(pyodide_run, case):
    corpus, run = pyodide_run
    with pytest.raises(GGUFError) as e:
        open_gguf(corpus / f"{case}.gguf")
    assert run["gguf"][f"{case}.gguf"] == str(e.value).replace(str(corpus), "/corpus")


@pytest.mark.parametrize("case, pattern", [(c, p) for c, _, p in HOSTILE])
def test_a_hostile_template_ends_within_its_bound_under_pyodide(pyodide_run, case, pattern):
    message, seconds, heap_growth = pyodide_run[1]["templates"][case]
    assert message is not None and re.search(pattern, message), message
    assert seconds < SECONDS + SLACK
    assert heap_growth < MAX_BUILT + (64 << 20)


def test_fuzzed_templates_never_pass_the_bound_under_pyodide(pyodide_run):
    n, worst, source = pyodide_run[1]["fuzz"]
    assert n > 30 and worst < 0.5 + SLACK, source
