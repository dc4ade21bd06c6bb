"""Test helper: a static/ that is built and holds the work tree's pyengine, for the Node and browser tests.

``make test`` builds static/ before pytest. When a test runs after pyengine/ changed, ``current_static()``
re-runs the build (offline, a few seconds: only the pyengine wheel and the listings change) instead of
testing a stale wheel. Skips when static/ was never built, except under CI (CI=true), where that fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STATIC = ROOT / "static"
sys.path.insert(0, str(ROOT / "build_scripts"))
from build_static import BUILD_LINE, SERVICE_WORKER  # noqa: E402
from build_wheels import sources_digest  # noqa: E402


def built_sources() -> str | None:
    """``sources_sha256`` of the pyengine wheel in static/wheels/manifest.json (None: no build)."""
    manifest = STATIC / "wheels" / "manifest.json"
    if not manifest.exists():
        return None
    return next(w for w in json.loads(manifest.read_text())["wheels"] if w["name"] == "pyengine")["sources_sha256"]


def current_static() -> Path:
    """static/, rebuilt first when its pyengine wheel is older than pyengine/."""
    built = built_sources()
    if built is None:
        if os.environ.get("CI") == "true":
            pytest.fail("static/ is not built (make build)")
        pytest.skip("static/ is not built (make build)")
    if built != sources_digest():
        subprocess.run([sys.executable, str(ROOT / "build_scripts" / "build_static.py")],
                       check=True, capture_output=True, timeout=600)
    return STATIC


def offline(cmd: list[str]) -> list[str]:
    """``cmd`` run in a new network namespace with no interfaces up (``unshare -n``, as root), so any
    attempt to reach the network fails; ``cmd`` unchanged where that is not possible (fails under CI)."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-n", *cmd]
    if os.environ.get("CI") == "true":
        pytest.fail("unshare -n is not available to cut the network")
    return cmd


def same_as_web(rel: Path, static: Path = STATIC) -> bool:
    """static/``rel`` is web/``rel`` as the build writes it: a copy, except the service worker's BUILD
    line (its version and file list)."""
    built, src = static / rel, ROOT / "web" / rel
    if not built.is_file():
        return False
    if rel.as_posix() == SERVICE_WORKER:
        return BUILD_LINE.sub("", built.read_text()) == BUILD_LINE.sub("", src.read_text())
    return built.read_bytes() == src.read_bytes()
