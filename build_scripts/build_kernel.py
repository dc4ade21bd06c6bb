"""Build pyengine's C kernel (``pyengine/weights/kernel/kernel.c``) for the page and for CPython.

    python build_scripts/build_kernel.py

The compiler is clang from the Zig toolchain on PyPI (``ziglang``, pinned in
``install_build_deps.sh``): no system compiler, no emsdk. It makes:

- ``build/kernel/pyengine_kernel.so``: a wasm32 Emscripten side module with SIMD128, copied to
  ``static/kernel/`` by ``build_static.py``; the page's workers write it into Pyodide's file system for
  ``ctypes.CDLL`` (``web/pyodide_boot.js``). It imports nothing (``-ffreestanding``), and
  ``-mno-extended-const`` keeps its data segments loadable by Pyodide 0.27.
- ``build/kernel/pyengine_kernel_relaxed.so``: the same with relaxed SIMD, its products bytes times bytes
  as on x86; the page takes it where the browser validates a relaxed instruction.
- ``pyengine/weights/kernel/libpyengine_kernel-*.so``: CPython's native libraries: x86-64 with AVX-512 and
  its VNNI products (``x86_64_v4``: Ice Lake, Zen 4 and later; llama.cpp's native build uses them too), with
  AVX2 and FMA (``x86_64_v3``), and a portable build for any other CPU of the machine's architecture; they
  give the same bits.

Each output is rebuilt only when its sources or flags change (a ``.sha256`` stamp beside it). A build that
fails prints why and leaves that runtime on numpy's products; it never stops ``make build``.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "pyengine" / "weights" / "kernel"
WASM = ROOT / "build" / "kernel" / "pyengine_kernel.so"
WASM_RELAXED = ROOT / "build" / "kernel" / "pyengine_kernel_relaxed.so"
SOURCES = (KERNEL / "kernel.c", KERNEL / "simd.h")
ZIG = [sys.executable, "-m", "ziglang"]
ZIG_VERSION = "0.17.1"
# -ffp-contract=off: no fused multiply-adds, so that every build sums the same floats to the same bits;
# -fno-math-errno: a square root is the instruction (IEEE, exact), never a call into a libm the wasm module lacks
COMMON = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-fvisibility=hidden", "-Wall", "-Wextra", "-Werror"]
WASM_CC = ["-target", "wasm32-emscripten", "-msimd128", "-mno-extended-const", "-ffreestanding", *COMMON]
# relaxed SIMD: i16x8.relaxed_dot_i8x16_i7x16_s, pmaddubsw in V8 on x86 (exact for 7-bit weight codes)
WASM_RELAXED_CC = [*WASM_CC, "-mrelaxed-simd"]
WASM_LD = ["--experimental-pic", "-shared", "--no-entry", "--export-dynamic", "--strip-all"]


def native_builds() -> dict[str, list[str]]:
    """The native libraries to build on this machine: {file name: compiler flags}."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        return {"libpyengine_kernel-x86_64-avx512.so": ["-march=x86_64_v4", "-mavx512vnni"],
                "libpyengine_kernel-x86_64-avx2.so": ["-march=x86_64_v3"],
                "libpyengine_kernel-portable.so": ["-march=x86_64_v2"]}
    return {"libpyengine_kernel-portable.so": []}


def stamp_of(flags: list[str]) -> str:
    h = hashlib.sha256(" ".join([ZIG_VERSION, *flags]).encode())
    for src in SOURCES:
        h.update(src.read_bytes())
    return h.hexdigest()


def up_to_date(out: Path, stamp: str) -> bool:
    marker = out.with_name(out.name + ".sha256")
    return out.exists() and marker.exists() and marker.read_text() == stamp


def compile_step(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[2:])}` exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")


def build(out: Path, flags: list[str], wasm: bool) -> str:
    """Build one library into ``out`` unless it is up to date; "ok", "built" or "failed: why"."""
    stamp = stamp_of(flags + (WASM_LD if wasm else []))
    if up_to_date(out, stamp):
        return "ok"
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp_out = Path(tmp) / out.name
            if wasm:
                obj = Path(tmp) / "kernel.o"
                compile_step([*ZIG, "cc", *flags, "-c", str(SOURCES[0]), "-o", str(obj)])
                compile_step([*ZIG, "wasm-ld", *WASM_LD, str(obj), "-o", str(tmp_out)])
            else:
                compile_step([*ZIG, "cc", *flags, "-shared", str(SOURCES[0]), "-o", str(tmp_out)])
            tmp_out.replace(out)
    except (RuntimeError, OSError) as e:
        out.unlink(missing_ok=True)
        return f"failed: {e}"
    out.with_name(out.name + ".sha256").write_text(stamp)
    return "built"


def have_zig() -> str | None:
    """None when ``python -m ziglang`` runs, else why not."""
    try:
        proc = subprocess.run([*ZIG, "version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if proc.returncode != 0:
        return (proc.stderr.strip().splitlines() or ["python -m ziglang failed"])[-1]
    return None


def build_kernels() -> dict[Path, str]:
    """Every library: {path: "ok" | "built" | "failed: why"}, the wasm module first."""
    outs = {WASM: (WASM_CC, True), WASM_RELAXED: (WASM_RELAXED_CC, True)}
    outs.update({KERNEL / name: ([*COMMON, *flags], False) for name, flags in native_builds().items()})
    missing = have_zig()
    if missing:
        return {out: f"failed: the Zig toolchain (pip install ziglang=={ZIG_VERSION}) does not run: {missing}"
                for out in outs}
    return {out: build(out, flags, wasm) for out, (flags, wasm) in outs.items()}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    for out, state in build_kernels().items():
        print(f"  {state.splitlines()[0]:<8} {out.relative_to(ROOT)}")
        if state.startswith("failed"):
            print("\n".join("    " + line for line in state.splitlines()[1:]))


if __name__ == "__main__":
    main()
