"""The pure-Python wheels for ``static/wheels/``: pyengine, Jinja2 and a MarkupSafe without its C speedups.

The worker installs them in the order of ``static/wheels/manifest.json`` with no dependency resolution
(numpy comes from Pyodide itself). MarkupSafe publishes no pure wheel; its ``setup.py`` falls back to a
plain-Python build when compiling ``_speedups.c`` fails, so we build it from the sdist with ``CC=false``
and check that the wheel is ``py3-none-any`` with no compiled module in it (``markupsafe/__init__.py``
then uses ``_native.py``).

Builds use a pinned setuptools installed once into ``.cache/buildtools`` (see ``build_env``), so a
changed pyengine source rebuilds its wheel offline.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from buildlib import CACHE, ROOT, install_bytes, install_file, pip_download, run, sha256_of

BUILD_ENV = ("setuptools==80.9.0",)
JINJA2 = ("jinja2==3.1.6", "jinja2-3.1.6-py3-none-any.whl",
          "85ece4451f492d0c13c5dd7c13a64681a86afae63a5f347908daf103ce6d2f67")
MARKUPSAFE_SDIST = ("markupsafe==3.0.4", "markupsafe-3.0.4.tar.gz",
                    "2e9ad7dd851bf45fab9f75cbff4cb493fee9979e8d8c7c9c3ee119022518edd6")
# What goes into the pyengine wheel: its hash decides whether the wheel is rebuilt.
PYENGINE_SOURCES = ("pyproject.toml", "README.md", "pyengine/**/*.py")


def build_env() -> dict[str, str]:
    """The environment pip builds wheels in: ``BUILD_ENV`` installed once (``pip --target``) into
    ``.cache/buildtools``, first on PYTHONPATH, so builds need neither a venv nor the network."""
    tools = CACHE / "buildtools"
    stamp = tools / "requirements.txt"
    if not (stamp.exists() and stamp.read_text() == "\n".join(BUILD_ENV)):
        shutil.rmtree(tools, ignore_errors=True)
        run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--target", str(tools), *BUILD_ENV])
        stamp.write_text("\n".join(BUILD_ENV))
    path = os.pathsep.join(p for p in (str(tools), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "SOURCE_DATE_EPOCH": "315532800"}  # 1980-01-01: same bytes each build


def pip_wheel(source: Path, out_dir: Path, env: dict | None = None) -> Path:
    """``pip wheel --no-deps --no-build-isolation`` of ``source`` into a fresh ``out_dir``; return the wheel."""
    shutil.rmtree(out_dir, ignore_errors=True)
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "-w", str(out_dir), str(source)], env={**build_env(), **(env or {})})
    (wheel,) = out_dir.glob("*.whl")
    if not wheel.name.endswith("-py3-none-any.whl"):
        raise SystemExit(f"error: {wheel.name} is not a pure-Python wheel")
    return wheel


def markupsafe_wheel() -> Path:
    """A pure ``markupsafe-*-py3-none-any.whl`` built from the pinned sdist (cached after the first build)."""
    sdist = pip_download(*MARKUPSAFE_SDIST, "--no-binary", ":all:", "--no-build-isolation", env=build_env())
    out_dir = CACHE / "wheels" / sdist.name.removesuffix(".tar.gz")
    built = list(out_dir.glob("*.whl")) if out_dir.is_dir() else []
    if len(built) == 1:
        return built[0]
    wheel = pip_wheel(sdist, out_dir, env={"CC": "false"})  # the compile fails, setup.py builds pure Python
    with zipfile.ZipFile(wheel) as z:
        compiled = [n for n in z.namelist() if n.endswith((".so", ".pyd", ".dylib"))]
    if compiled:
        shutil.rmtree(out_dir)
        raise SystemExit(f"error: {wheel.name} has compiled modules {compiled}")
    return wheel


def sources_digest() -> str:
    """sha256 over the relative paths and bytes of ``PYENGINE_SOURCES``."""
    h = hashlib.sha256()
    for pattern in PYENGINE_SOURCES:
        for path in sorted(ROOT.glob(pattern)):
            if "__pycache__" not in path.parts:
                h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def pyengine_wheel() -> Path:
    """The pyengine wheel for the current sources, rebuilt (from a clean copy) only when they change."""
    out_dir = CACHE / "wheels" / f"pyengine-{sources_digest()[:16]}"
    built = list(out_dir.glob("*.whl")) if out_dir.is_dir() else []
    if len(built) == 1:
        return built[0]
    for old in (CACHE / "wheels").glob("pyengine-*"):
        shutil.rmtree(old)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        src = Path(tmp) / "src"  # a clean copy: no stale build/ or egg-info from the work tree
        for pattern in PYENGINE_SOURCES:
            for path in ROOT.glob(pattern):
                if "__pycache__" not in path.parts:
                    (src / path.relative_to(ROOT)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(path, src / path.relative_to(ROOT))
        return pip_wheel(src, out_dir)


def wheel_name(wheel: Path) -> str:
    return wheel.name.split("-")[0].lower()


def build_wheels(dest: Path) -> dict[Path, str]:
    """Fill ``dest`` (``static/wheels/``) with the wheels and ``manifest.json``, listed in install order.

    manifest.json: ``{"pyodide_packages": ["numpy"], "wheels": [{"name", "file", "sha256", "size"}, ...]}``;
    pyengine's entry also has ``sources_sha256`` (see ``sources_digest``).
    """
    wheels = [markupsafe_wheel(), pip_download(*JINJA2), pyengine_wheel()]
    done = {dest / w.name: install_file(w, dest / w.name) for w in wheels}
    entries = [{"name": wheel_name(w), "file": w.name, "sha256": sha256_of(w), "size": w.stat().st_size}
               for w in wheels]
    entries[-1]["sources_sha256"] = sources_digest()  # lets tests tell a stale pyengine wheel from a fresh one
    manifest = {"pyodide_packages": ["numpy"], "wheels": entries}
    text = json.dumps(manifest, indent=2) + "\n"
    done[dest / "manifest.json"] = install_bytes(text.encode(), dest / "manifest.json")
    return done
