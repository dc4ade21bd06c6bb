"""Assemble ``static/``, everything the browser app needs, served as is from 127.0.0.1.

    python build_scripts/build_static.py [--no-model]

static/
  pyodide/            Pyodide 0.27.7 core (npm) + numpy, micropip, packaging wheels (sha256 from its lock file)
  wheels/             pyengine, jinja2, pure-Python markupsafe + manifest.json (install order, sha256)
  vendor/             the page's libraries from npm: markdown-it, DOMPurify, highlight.js (fetch_vendor.py)
  kernel/             pyengine's C kernel as a wasm32 side module (build_kernel.py, which also builds
                      CPython's native libraries beside kernel.c)
  models/             the demo model (SmolLM2-135M-Instruct Q4_1, hard-linked from models/) + demo.json
  files.json          every file but the models (path, size, sha256) and the build's version
  sw.js               web/sw.js with the build's version and file list written into it (its BUILD line)
  ...                 the page: a copy of web/

Downloads are pinned by sha256 and cached in .cache/, so after the first run nothing needs the network;
each file is written only when its bytes change, and files left from an earlier build are removed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import time
from pathlib import Path

from build_kernel import WASM, WASM_RELAXED, build_kernels
from build_wheels import build_wheels
from buildlib import ROOT, STATIC, install_bytes, install_file, link_file, prune, sha256_of
from fetch_models import MODELS, fetch
from fetch_runtime import build_runtime
from fetch_vendor import build_vendor

WEB = ROOT / "web"
RESERVED = ("pyodide", "wheels", "vendor", "kernel", "models", "files.json")  # written by the build, not by web/
SERVICE_WORKER = "sw.js"                                  # written with the build's list, not copied
BUILD_LINE = re.compile(r"^const BUILD = .*$", re.M)
DEMO_MODEL = ("smollm2", "SmolLM2-135M-Instruct (Q4_1)")   # (key in fetch_models.MODELS, name shown on the page)


def build_page(dest: Path) -> dict[Path, str]:
    """Copy every file of ``web/`` into ``dest`` at the same relative path."""
    done = {}
    for src in sorted(WEB.rglob("*")) if WEB.is_dir() else []:
        rel = src.relative_to(WEB)
        if not src.is_file() or "__pycache__" in rel.parts or rel.name.startswith("."):
            continue
        if rel.parts[0] in RESERVED:
            raise SystemExit(f"error: web/{rel} collides with static/{rel.parts[0]}, which the build writes")
        if rel.as_posix() != SERVICE_WORKER:
            done[dest / rel] = install_file(src, dest / rel)
    return done


def build_kernel(dest: Path) -> dict[Path, str]:
    """The kernels for the page (``dest``/pyengine_kernel.so, and pyengine_kernel_relaxed.so for browsers with
    relaxed SIMD) and for CPython; a build that fails is said, and leaves that runtime on numpy's products."""
    built = build_kernels()
    for path, state in built.items():
        if state.startswith("failed"):
            print(f"  note: the C kernel {path.name} was not built, that runtime keeps numpy's products: "
                  f"{state.removeprefix('failed: ')}")
    if built[WASM].startswith("failed"):
        return {}
    return {dest / lib.name: install_file(lib, dest / lib.name) for lib in (WASM, WASM_RELAXED)
            if not built[lib].startswith("failed")}


def build_demo_model(dest: Path) -> dict[Path, str]:
    """Fetch the demo model into models/ (sha256-checked), link it into ``dest`` and describe it in demo.json.

    demo.json: ``{"display_name", "file", "url" (relative to static/), "size" (bytes), "sha256"}``.
    """
    key, display_name = DEMO_MODEL
    model = MODELS[key]
    src = fetch(model, ROOT / "models")
    done = {dest / model.name: link_file(src, dest / model.name)}
    demo = {"display_name": display_name, "file": model.name, "url": f"models/{model.name}",
            "size": model.size, "sha256": model.sha256}
    done[dest / "demo.json"] = install_bytes((json.dumps(demo, indent=2) + "\n").encode(), dest / "demo.json")
    return done


def files_listing(paths: list[Path]) -> dict:
    """``{"version": sha256 of the listing, "files": [{"path", "size", "sha256"}]}``, paths from static/."""
    files = [{"path": p.relative_to(STATIC).as_posix(), "size": p.stat().st_size, "sha256": sha256_of(p)}
             for p in sorted(paths)]
    version = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    return {"version": version, "files": files}


def service_worker(template: str, listing: dict) -> bytes:
    """web/sw.js with its BUILD line holding the build's version and the paths it caches: a new build is a
    new service worker, which replaces the old one and its cache."""
    build = {"version": listing["version"], "files": [f["path"] for f in listing["files"]]}
    text, n = BUILD_LINE.subn(f"const BUILD = {json.dumps(build)}; // written by build_scripts/build_static.py",
                              template, count=1)
    if n != 1:
        raise SystemExit(f"error: web/{SERVICE_WORKER} has no line starting `const BUILD = `")
    return text.encode()


def build_listings(shell: list[Path]) -> dict[Path, str]:
    """static/sw.js (the service worker with the list of ``shell``, every file but the models) and
    static/files.json (the same list, sw.js included, and the version)."""
    listing = files_listing(shell)
    sw = STATIC / SERVICE_WORKER
    done = {sw: install_bytes(service_worker((WEB / SERVICE_WORKER).read_text(), listing), sw)}
    listing["files"] = files_listing([*shell, sw])["files"]
    done[STATIC / "files.json"] = install_bytes((json.dumps(listing, indent=2) + "\n").encode(), STATIC / "files.json")
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-model", action="store_true", help="leave the demo model out")
    args = ap.parse_args()

    t0 = time.monotonic()
    steps = [("runtime", lambda: build_runtime(STATIC / "pyodide")),
             ("wheels", lambda: build_wheels(STATIC / "wheels")),
             ("vendor", lambda: build_vendor(STATIC / "vendor")),
             ("kernel", lambda: build_kernel(STATIC / "kernel")),
             ("page", lambda: build_page(STATIC))]
    if not args.no_model:
        steps.append(("demo model", lambda: build_demo_model(STATIC / "models")))
    done: dict[Path, str] = {}
    for label, step in steps:
        t = time.monotonic()
        result = step()
        changed = sum(state != "ok" for state in result.values())
        print(f"{label:<11} {len(result):3d} files, {changed:3d} written  ({time.monotonic() - t:.1f} s)")
        done.update(result)
    done.update(build_listings([p for p in done if p.parent != STATIC / "models"]))

    for path, state in sorted(done.items()):
        if state != "ok":
            print(f"  {state:<8} {path.relative_to(ROOT)}")
    for path in prune(STATIC, set(done)):
        print(f"  removed  {path.relative_to(ROOT)}")
    total = sum(p.stat().st_size for p in done)
    print(f"static/: {len(done)} files, {total / 2**20:.1f} MiB, {sum(s != 'ok' for s in done.values())} written"
          f" in {time.monotonic() - t0:.1f} s")


if __name__ == "__main__":
    main()
