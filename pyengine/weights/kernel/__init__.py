"""The quantized products in C (``kernel.c``), loaded with ctypes, every call checked before it is made.

``kernel.c`` multiplies a matrix held in the GGUF's own blocks by activations
rounded to 8-bit codes, as ggml's CPU backend does (its ``vec_dot`` for each
type). It is built by ``build_scripts/build_kernel.py`` with the Zig toolchain
from PyPI: a wasm32 side module with SIMD128 for the page (written to
:data:`WASM_PATH` by ``web/pyodide_boot.js`` before Python imports pyengine),
and native shared libraries beside this file for CPython (x86-64 with AVX2
where the CPU has it, else a portable build).

:func:`get` gives the loaded :class:`Kernel`, or None, with :func:`status`
saying why: not built, switched off by ``PYENGINE_KERNELS=0``, or failing to
load. The engine then keeps to the numpy forms.

A wrong length given to C would corrupt Pyodide's heap, so every method checks
the types, shapes, dtypes, contiguity and sizes of its arrays first and raises
:class:`KernelError`; the C side checks the numbers it is given once more.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from pathlib import Path

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME, GGMLType

# The weight types kernel.c multiplies, and the activations' type each is rounded to (ggml's vec_dot_type)
TYPES = {"Q4_0": "Q8_0", "Q4_1": "Q8_1", "Q5_0": "Q8_0", "Q5_1": "Q8_1", "Q8_0": "Q8_0", "IQ4_NL": "Q8_0",
         "Q2_K": "Q8_K", "Q3_K": "Q8_K", "Q4_K": "Q8_K", "Q5_K": "Q8_K", "Q6_K": "Q8_K", "IQ4_XS": "Q8_K"}
VERSION = 1                                  # kernel.c's pe_version(): a library of another version is not used
HERE = Path(__file__).resolve().parent
WASM_PATH = "/lib/pyengine_kernel.so"        # where the page's boot writes the side module (Pyodide's FS)
NATIVE = {"avx2": "libpyengine_kernel-x86_64-avx2.so", "portable": "libpyengine_kernel-portable.so"}


class KernelError(PyEngineError):
    """An array that kernel.c must not be given (its type, shape, dtype, layout or size)."""


def _i64(v) -> ctypes.c_int64:
    return ctypes.c_int64(int(v))


class Kernel:
    """kernel.c's functions on numpy arrays. ``path``: the shared library. Raises OSError (not loadable) or
    KernelError (another version)."""

    def __init__(self, path: str):
        self.path = path
        lib = ctypes.CDLL(path)
        if lib.pe_version() != VERSION:
            raise KernelError(f"{path}: kernel version {lib.pe_version()}, expected {VERSION}: rebuild it")
        i64, ptr, i32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        lib.pe_act_bytes.argtypes, lib.pe_act_bytes.restype = [i32, i64], i64
        lib.pe_quantize.argtypes, lib.pe_quantize.restype = [i32, ptr, i64, i64, ptr], i32
        lib.pe_mul_mat.argtypes, lib.pe_mul_mat.restype = [i32, ptr, i64, i64, ptr, i64, ptr, i64], i32
        lib.pe_block_sums.argtypes, lib.pe_block_sums.restype = [i32, ptr, i64, ptr, ptr], i32
        self.lib = lib
        self._act_bytes: dict[tuple[str, int], int] = {}

    def act_bytes(self, ggml_type: str, n: int) -> int:
        """Bytes of one token's activation record for rows of ``n`` weights of ``ggml_type``."""
        key = (ggml_type, n)
        if key not in self._act_bytes:
            t = _type(ggml_type)
            if n <= 0 or n % t.block_size:
                raise KernelError(f"{n} weights are not whole {ggml_type} blocks of {t.block_size}")
            self._act_bytes[key] = _ok(self.lib.pe_act_bytes(t.id, n), "pe_act_bytes")
        return self._act_bytes[key]

    def quantize(self, x: np.ndarray, ggml_type: str) -> np.ndarray:
        """x (T, n) float32 rounded to 8-bit codes for weights of ``ggml_type`` (Q8_0, Q8_1 or Q8_K, as ggml
        rounds it): (T, act_bytes) uint8 records for :meth:`mul_mat`."""
        _check(x, np.float32, 2, "x")
        t, n = x.shape
        act = np.empty((t, self.act_bytes(ggml_type, n)), np.uint8)
        _ok(self.lib.pe_quantize(_type(ggml_type).id, x.ctypes.data, _i64(n), _i64(t), act.ctypes.data), "pe_quantize")
        return act

    def mul_mat(self, w: np.ndarray, ggml_type: str, n: int, act: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[t, r] = W[r] . x[t]`` for ``w`` (rows, row bytes) uint8, each row n weights of ``ggml_type``
        in its blocks, and ``act`` (T, act_bytes) from :meth:`quantize`; ``out`` (T, >= rows) float32, its
        rows contiguous (a column slice of a wider array is fine). Returns ``out``."""
        t_info = _type(ggml_type)
        _check(w, np.uint8, 2, "w")
        rows = w.shape[0]
        if w.shape[1] != t_info.n_bytes(n) or n % t_info.block_size:
            raise KernelError(f"w has {w.shape[1]} bytes a row, not {n} {ggml_type} weights")
        self._check_act(act, ggml_type, n)
        if out.dtype != np.float32 or out.ndim != 2 or not out.flags.writeable or out.strides[1] != 4 \
                or out.strides[0] % 4 or out.shape != (len(act), rows):
            raise KernelError(f"out must be writeable float32 ({len(act)}, {rows}) with contiguous rows, "
                              f"got {out.dtype} {out.shape} strides {out.strides}")
        ldy = out.strides[0] // 4 if len(act) > 1 else rows
        _ok(self.lib.pe_mul_mat(t_info.id, w.ctypes.data, _i64(rows), _i64(n), act.ctypes.data, _i64(len(act)),
                                out.ctypes.data, _i64(ldy)), "pe_mul_mat")
        return out

    def block_sums(self, row: np.ndarray, ggml_type: str, act: np.ndarray) -> np.ndarray:
        """For tests: one row's integer sums with one token's codes, a sub-block of 16 weights at a time,
        before any scale: (n / 16,) int32."""
        t_info = _type(ggml_type)
        _check(row, np.uint8, 1, "row")
        n = len(row) // t_info.type_size * t_info.block_size
        if len(row) != t_info.n_bytes(n) or not n:
            raise KernelError(f"a row of {len(row)} bytes is not whole {ggml_type} blocks")
        self._check_act(act[None] if act.ndim == 1 else act, ggml_type, n)
        out = np.empty(n // 16, np.int32)
        _ok(self.lib.pe_block_sums(t_info.id, row.ctypes.data, _i64(n), act.ctypes.data, out.ctypes.data),
            "pe_block_sums")
        return out

    def _check_act(self, act: np.ndarray, ggml_type: str, n: int) -> None:
        _check(act, np.uint8, 2, "act")
        if act.shape[1] != self.act_bytes(ggml_type, n):
            raise KernelError(f"act has {act.shape[1]} bytes a token, not the {self.act_bytes(ggml_type, n)} of "
                              f"{n} {ggml_type} weights")


def _type(name: str) -> GGMLType:
    if name not in TYPES:
        raise KernelError(f"the kernel has no product for {name}")
    return GGML_TYPES_BY_NAME[name]


def _check(a: np.ndarray, dtype, ndim: int, what: str) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != ndim or not a.flags.c_contiguous:
        raise KernelError(f"{what} must be a C-contiguous {ndim}-D {np.dtype(dtype)} array, got "
                          f"{getattr(a, 'dtype', type(a))} {getattr(a, 'shape', '')}")


def _ok(code: int, fn: str) -> int:
    if code < 0:
        raise KernelError(f"{fn} refused its arguments (code {code})")
    return code


def library_path() -> str | None:
    """The library this runtime would load: the wasm side module under Pyodide, else the native build
    for this CPU (None when there is none)."""
    if sys.platform == "emscripten":
        return WASM_PATH if os.path.exists(WASM_PATH) else None
    if platform.machine().lower() in ("x86_64", "amd64") and _has_avx2() and (HERE / NATIVE["avx2"]).exists():
        return str(HERE / NATIVE["avx2"])
    return str(HERE / NATIVE["portable"]) if (HERE / NATIVE["portable"]).exists() else None


def _has_avx2() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and " avx2" in line and " fma" in line for line in f)
    except OSError:
        return False


_loaded: list = []      # [Kernel or None, status]: loaded once a process
_off: list = []         # why the kernel is not to be used (use(False)), if it is not


def use(on: bool, why: str = "turned off") -> None:
    """Use the kernel from now on (when it loads), or keep to numpy (``why``: for :func:`status`)."""
    _off[:] = [] if on else [why]


def get() -> Kernel | None:
    """The kernel, loaded on first use, or None (:func:`status` says why)."""
    if not _loaded:
        _loaded.extend(_load())
    return None if _off else _loaded[0]


def status() -> str:
    """One line for the page and the CLI: which kernel runs the quantized products, or why none does."""
    get()
    return f"numpy ({_off[0]})" if _off else _loaded[1]


def _load() -> tuple:
    if os.environ.get("PYENGINE_KERNELS", "1") == "0":
        return None, "numpy (PYENGINE_KERNELS=0)"
    path = library_path()
    if path is None:
        return None, f"numpy ({os.environ.get('PYENGINE_KERNEL_WHY') or 'the C kernel is not built: make build'})"
    try:
        kernel = Kernel(path)
    except (OSError, KernelError) as e:
        return None, f"numpy (the C kernel did not load: {e})"
    return kernel, f"C kernel ({Path(path).name})"
