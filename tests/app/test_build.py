"""build_scripts/build_static.py: what static/ holds, that it matches its pins and listings, and that a
re-run with the network cut (``unshare -n``) writes nothing.

The static/ checks need a build (``make build``; ``make test`` builds first); the helper tests do not.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from static_build import current_static, offline, same_as_web

sys.path.insert(0, str(ROOT / "build_scripts"))
from build_wheels import PYENGINE_SOURCES, sources_digest  # noqa: E402
from buildlib import install_bytes, link_file, npm_pack, prune  # noqa: E402
from fetch_runtime import (  # noqa: E402
    ADDRESS_FIXES,
    GROWTH_FIX,
    GROWTH_SLACK,
    LOCK_PACKAGES,
    PYODIDE_FILES,
    lock_closure,
    modest_growth,
    unsigned_addresses,
)
from fetch_vendor import VENDOR  # noqa: E402


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def static() -> Path:
    return current_static()


# ---------------------------------------------------------------------------------------------------------
# static/ as built

def test_runtime_is_pyodide_0_27_7_with_lock_checked_wheels(static):
    lock = json.loads((static / "pyodide" / "pyodide-lock.json").read_text())
    assert lock["info"]["version"] == "0.27.7" and lock["info"]["python"] == "3.12.7"
    for name in PYODIDE_FILES:
        assert (static / "pyodide" / name).stat().st_size > 0
    assert (static / "pyodide" / "pyodide.asm.wasm").read_bytes()[:4] == b"\0asm"
    entries = lock_closure(lock, LOCK_PACKAGES)
    assert sorted(e["name"] for e in entries) == ["micropip", "numpy", "packaging"]
    for e in entries:
        assert sha256(static / "pyodide" / e["file_name"]) == e["sha256"], e["file_name"]
    assert lock["packages"]["numpy"]["sha256"] == "ebb61241d962b98b21597d7ce43b67668a6d5bab3acec4fbe958657320d7cd08"


def test_the_runtimes_js_reads_heap_addresses_as_unsigned(static):
    """static/'s pyodide.asm.js holds none of ADDRESS_FIXES' signed forms (tests/node/test_node_past_2gib.py shows
    what they broke), and a runtime that lacks one is refused at build time, not patched in part."""
    js = (static / "pyodide" / "pyodide.asm.js").read_text()
    for pattern, _, _ in ADDRESS_FIXES:
        assert pattern.search(js) is None, pattern.pattern
    assert js.count("String.fromCharCode(HEAPU16[(ptr>>>1)+i>>>0])") == 1           # _python2js_ucs2
    with pytest.raises(SystemExit, match="not 107"):
        unsigned_addresses("HEAPU16[(ptr>>1)+i>>>0]")


def test_the_runtimes_heap_grows_little_past_what_is_asked(static):
    """static/'s pyodide.asm.js grows the wasm heap at most GROWTH_SLACK past a request (not 1.2 times its size,
    which a heap that never shrinks keeps), and a runtime without emscripten's growth rule is refused."""
    js = (static / "pyodide" / "pyodide.asm.js").read_text()
    assert GROWTH_FIX[0].search(js) is None
    assert js.count(f"Math.min(overGrownHeapSize,requestedSize+{GROWTH_SLACK})") == 1
    with pytest.raises(SystemExit, match="not 1"):
        modest_growth("function _emscripten_resize_heap(requestedSize){}")


def test_wheels_match_the_manifest_and_are_pure_python(static):
    manifest = json.loads((static / "wheels" / "manifest.json").read_text())
    assert manifest["pyodide_packages"] == ["numpy"]
    assert [w["name"] for w in manifest["wheels"]] == ["markupsafe", "jinja2", "pyengine"]  # install order
    for w in manifest["wheels"]:
        path = static / "wheels" / w["file"]
        assert (sha256(path), path.stat().st_size) == (w["sha256"], w["size"])
        assert w["file"].endswith("-py3-none-any.whl")
        with zipfile.ZipFile(path) as z:
            assert not [n for n in z.namelist() if n.endswith((".so", ".pyd"))], w["file"]
    with zipfile.ZipFile(static / "wheels" / manifest["wheels"][0]["file"]) as z:
        assert "markupsafe/_native.py" in z.namelist()


def test_pyengine_wheel_holds_the_work_tree_sources(static):
    manifest = json.loads((static / "wheels" / "manifest.json").read_text())
    entry = manifest["wheels"][-1]
    assert entry["sources_sha256"] == sources_digest()
    with zipfile.ZipFile(static / "wheels" / entry["file"]) as z:
        packaged = {n: z.read(n) for n in z.namelist() if n.startswith("pyengine/")}
    sources = {p.relative_to(ROOT).as_posix(): p.read_bytes() for p in ROOT.glob(PYENGINE_SOURCES[-1])
               if "__pycache__" not in p.parts}
    assert packaged == sources and "pyengine/__init__.py" in sources


def test_demo_model_is_described_by_demo_json(static):
    demo = json.loads((static / "models" / "demo.json").read_text())
    path = static / demo["url"]
    assert demo["file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and path.name == demo["file"]
    assert path.stat().st_size == demo["size"] == 98_362_432
    assert sha256(path) == demo["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_files_json_lists_every_file_but_the_models(static):
    listing = json.loads((static / "files.json").read_text())
    listed = {f["path"]: f for f in listing["files"]}
    on_disk = {p.relative_to(static).as_posix() for p in static.rglob("*") if p.is_file()}
    assert set(listed) == on_disk - {"files.json"} - {p for p in on_disk if p.startswith("models/")}
    for rel, f in listed.items():
        assert (sha256(static / rel), (static / rel).stat().st_size) == (f["sha256"], f["size"]), rel
    for rel in ("pyodide/pyodide.mjs", "wheels/manifest.json"):
        assert rel in listed
    assert len(listing["version"]) == 16


def test_vendor_holds_the_pinned_packages_files_and_nothing_else(static):
    """The page's libraries (markdown-it, DOMPurify, highlight.js) are the files of their pinned npm tarballs."""
    names = {name for *_, files in VENDOR for name in files.values()}
    assert {p.name for p in (static / "vendor").iterdir()} == names
    for spec, tarball, digest, files in VENDOR:
        with tarfile.open(npm_pack(spec, tarball, digest), "r:gz") as tar:
            for member, name in files.items():
                assert (static / "vendor" / name).read_bytes() == tar.extractfile(f"package/{member}").read(), name


def test_page_is_a_copy_of_web(static):
    for src in (ROOT / "web").rglob("*"):
        if src.is_file() and not src.name.startswith(".") and "__pycache__" not in src.parts:
            assert same_as_web(src.relative_to(ROOT / "web"), static), src


def test_the_service_worker_holds_the_build_s_version_and_file_list(static):
    """static/sw.js names this build (files.json's version: a new build is a new service worker) and
    caches exactly its files: every file but the models and itself."""
    listing = json.loads((static / "files.json").read_text())
    line = next(ln for ln in (static / "sw.js").read_text().splitlines() if ln.startswith("const BUILD = "))
    build = json.loads(line.removeprefix("const BUILD = ").split("; //")[0])
    cached = [f["path"] for f in listing["files"] if f["path"] != "sw.js"]
    assert build == {"version": listing["version"], "files": cached}
    assert "index.html" in build["files"] and not any(p.endswith(".gguf") for p in build["files"])


def test_rebuild_offline_writes_nothing(static):
    """After a build, a second one needs no network (run in a new network namespace) and changes nothing."""
    cmd = offline([sys.executable, str(ROOT / "build_scripts" / "build_static.py")])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert " 0 written in " in proc.stdout.splitlines()[-1], proc.stdout


# ---------------------------------------------------------------------------------------------------------
# the helpers

def test_install_bytes_writes_only_changes(tmp_path):
    dst = tmp_path / "a" / "b.txt"
    assert install_bytes(b"one", dst) == "new"
    assert install_bytes(b"one", dst) == "ok"
    assert install_bytes(b"two", dst) == "updated"
    assert dst.read_bytes() == b"two" and sorted(p.name for p in dst.parent.iterdir()) == ["b.txt"]


def test_link_file_links_once_and_replaces_a_different_file(tmp_path):
    src, dst = tmp_path / "model.gguf", tmp_path / "static" / "model.gguf"
    src.write_bytes(b"GGUF" * 100)
    assert link_file(src, dst) == "new"
    assert os.path.samefile(src, dst)
    assert link_file(src, dst) == "ok"
    dst.unlink()
    dst.write_bytes(b"GGUF" * 99)
    assert link_file(src, dst) == "updated" and dst.read_bytes() == src.read_bytes()


def test_prune_removes_files_not_kept_and_empty_folders(tmp_path):
    keep = [tmp_path / "x" / "keep.js", tmp_path / "top.html"]
    gone = [tmp_path / "x" / "old.js", tmp_path / "stale" / "deep" / "old.whl"]
    for p in keep + gone:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"1")
    assert sorted(prune(tmp_path, set(keep))) == sorted(gone)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["top.html", "x", "x/keep.js"]


def test_lock_closure_follows_depends_and_rejects_unknown_names():
    lock = {"packages": {"micropip": {"name": "micropip", "depends": ["packaging"]},
                         "packaging": {"name": "packaging", "depends": []},
                         "numpy": {"name": "numpy", "depends": []}}}
    assert [e["name"] for e in lock_closure(lock, ("micropip",))] == ["micropip", "packaging"]
    with pytest.raises(SystemExit, match="no package 'scipy'"):
        lock_closure(lock, ("numpy", "scipy"))
