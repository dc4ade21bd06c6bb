"""Helpers shared by the build steps: the folders, pinned downloads, and files that are written only when they change.

Every step of ``build_static.py`` writes through ``install_bytes`` / ``install_file`` / ``link_file``, which
compare before writing and return what they did ("new", "updated" or "ok"), so a re-run touches nothing that
has not changed and can say so. Downloads go to ``.cache/`` (git-ignored), each checked against a pinned sha256.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache"
STATIC = ROOT / "static"

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fetch_models import sha256_of  # noqa: E402  (one sha256 helper for every build script)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(cmd: list[str], **kwargs) -> None:
    """Run a tool quietly; on failure print its output and stop the build with its command line."""
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        raise SystemExit(f"error: `{' '.join(cmd)}` exited with {proc.returncode}")


def checked_download(cache_name: str, sha256: str, fetch) -> Path:
    """Return ``.cache/downloads/<cache_name>``, calling ``fetch(tmpdir) -> Path`` only when it is missing.

    The fetched file must have the pinned ``sha256`` (hex) or the build stops; a verified file is
    never fetched again, so after the first build no step needs the network.
    """
    out = CACHE / "downloads" / cache_name
    if out.exists() and sha256_of(out) == sha256:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        got = fetch(Path(tmp))
        digest = sha256_of(got)
        if digest != sha256:
            raise SystemExit(f"error: {cache_name}: sha256 {digest} != pinned {sha256}")
        shutil.move(str(got), out)
    return out


def pip_download(requirement: str, file_name: str, sha256: str, *pip_args: str, env: dict | None = None) -> Path:
    """``pip download --no-deps`` one pinned distribution (wheel or sdist) into the cache, sha256-checked."""
    def fetch(tmp: Path) -> Path:
        run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *pip_args,
             "-d", str(tmp), requirement], env=env)
        return tmp / file_name
    return checked_download(file_name, sha256, fetch)


def npm_pack(spec: str, file_name: str, sha256: str) -> Path:
    """``npm pack`` one pinned npm package into the cache (the tarball only; nothing is installed), sha256-checked."""
    def fetch(tmp: Path) -> Path:
        run(["npm", "pack", "--silent", "--pack-destination", str(tmp), spec], cwd=tmp)
        return tmp / file_name
    return checked_download(file_name, sha256, fetch)


def install_bytes(data: bytes, dst: Path) -> str:
    """Write ``data`` to ``dst`` unless it already holds exactly that; return "new", "updated" or "ok"."""
    if dst.is_file() and not dst.is_symlink() and dst.stat().st_size == len(data) and dst.read_bytes() == data:
        return "ok"
    state = "updated" if dst.exists() else "new"
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, dst)
    return state


def install_file(src: Path, dst: Path) -> str:
    """Copy ``src`` to ``dst`` unless they already match byte for byte (small files: the page, wheels)."""
    return install_bytes(src.read_bytes(), dst)


def link_file(src: Path, dst: Path) -> str:
    """Hard-link a large file (a model) into ``static/``, copying when linking is impossible.

    Nothing is rewritten when ``dst`` already is ``src`` or has its size and sha256.
    """
    if dst.exists() and (os.path.samefile(src, dst) or
                         (dst.stat().st_size == src.stat().st_size and sha256_of(dst) == sha256_of(src))):
        return "ok"
    state = "updated" if dst.exists() else "new"
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
    return state


def prune(folder: Path, keep: set[Path]) -> list[Path]:
    """Delete the files under ``folder`` that are not in ``keep`` (left over from an earlier build)."""
    removed = []
    if not folder.is_dir():
        return removed
    for path in sorted(folder.rglob("*"), reverse=True):
        if path.is_file() or path.is_symlink():
            if path not in keep:
                path.unlink()
                removed.append(path)
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    return removed
