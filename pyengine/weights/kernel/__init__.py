"""The quantized products in C (``kernel.c``), loaded with ctypes, every call checked before it is made.

``kernel.c`` multiplies a matrix held in the GGUF's own blocks by activations
rounded to 8-bit codes, as ggml's CPU backend does (its ``vec_dot`` for each
type). Beside them it holds the float32 loops numpy runs slowest without SIMD,
which a decode step spends its time in once the products are fast: attention's
two products over the KV cache, and qwen35's Gated DeltaNet layers between their
two products (numpy's some sixty small calls a token).

It is built by ``build_scripts/build_kernel.py`` with the Zig toolchain from
PyPI: a wasm32 side module with SIMD128 for the page, and one with relaxed
SIMD for browsers that have it (one of them written to :data:`WASM_PATH` by
``web/pyodide_boot.js`` before Python imports pyengine, its name in
``PYENGINE_KERNEL_NAME``),
and native shared libraries beside this file for CPython (x86-64 with
AVX-512 and VNNI, or with AVX2, where the CPU has them, else a portable build;
all of them give the same bits).

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
import threading
from pathlib import Path

import numpy as np

from pyengine.errors import PyEngineError
from pyengine.gguf.ggml_types import GGML_TYPES_BY_NAME, GGMLType

# The weight types kernel.c multiplies, and the activations' type each is rounded to (ggml's vec_dot_type)
TYPES = {"Q4_0": "Q8_0", "Q4_1": "Q8_1", "Q5_0": "Q8_0", "Q5_1": "Q8_1", "Q8_0": "Q8_0", "IQ4_NL": "Q8_0",
         "Q2_K": "Q8_K", "Q3_K": "Q8_K", "Q4_K": "Q8_K", "Q5_K": "Q8_K", "Q6_K": "Q8_K", "IQ4_XS": "Q8_K"}
VERSION = 6                                  # kernel.c's pe_version(): a library of another version is not used
MAX_N = 1 << 26                              # kernel.c's MAX_N: weights a row
HERE = Path(__file__).resolve().parent
WASM_PATH = "/lib/pyengine_kernel.so"        # where the page's boot writes the side module (Pyodide's FS)
NATIVE = {"avx512": "libpyengine_kernel-x86_64-avx512.so", "avx2": "libpyengine_kernel-x86_64-avx2.so",
          "portable": "libpyengine_kernel-portable.so"}
# the CPU flags (/proc/cpuinfo) each x86-64 build needs: x86-64-v4 and VNNI, x86-64-v3's AVX2 and FMA
X86_FLAGS = {"avx512": {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl", "avx512_vnni"},
             "avx2": {"avx2", "fma"}}


class KernelError(PyEngineError):
    """An array that kernel.c must not be given (its type, shape, dtype, layout or size)."""


DECODE_TOKENS = 4            # products of at most this many tokens reuse buffers kept for their shapes


class Matrix:
    """A matrix in its GGUF blocks, checked once for the kernel: ``data`` (rows, row bytes) uint8, C-contiguous,
    each row ``n`` weights of ``ggml_type``; its address looked up once (it is kept alive here)."""

    def __init__(self, data: np.ndarray, ggml_type: str, n: int):
        t = _type(ggml_type)
        _check(data, np.uint8, 2, "the blocks")
        if n <= 0 or n % t.block_size or data.shape[1] != t.n_bytes(n):
            raise KernelError(f"{data.shape[1]} bytes a row are not {n} {ggml_type} weights")
        self.data, self.type, self.id, self.n, self.rows = data, ggml_type, t.id, n, data.shape[0]
        self.address = data.ctypes.data


class Kernel:
    """kernel.c's functions on numpy arrays. ``path``: the shared library. Raises OSError (not loadable) or
    KernelError (another version).

    Under Pyodide its functions are called with plain Python ints (a typed ctypes argument costs
    microseconds there), addresses folded to signed 32-bit numbers (the same bits); natively with argtypes.
    """

    def __init__(self, path: str):
        self.path = path
        lib = ctypes.CDLL(path)
        if lib.pe_version() != VERSION:
            raise KernelError(f"{path}: kernel version {lib.pe_version()}, expected {VERSION}: rebuild it")
        i32, ptr = ctypes.c_int, ctypes.c_void_p
        self.wasm = sys.platform == "emscripten"
        for fn, args in ((lib.pe_code_bytes, []), (lib.pe_act_bytes, [i32, i32]),
                         (lib.pe_quantize, [i32, ptr, i32, i32, ptr]),
                         (lib.pe_mul_mat, [i32, ptr, i32, i32, ptr, i32, ptr, i32]),
                         (lib.pe_block_sums, [i32, ptr, i32, ptr, ptr]),
                         (lib.pe_attn_scores, [ptr, i32, i32, i32, ptr, i32, i32, ptr]),
                         (lib.pe_attn_values, [ptr, i32, i32, i32, ptr, i32, i32, ptr]),
                         (lib.pe_delta_net, [ptr, ptr, ptr, ptr, ptr, ptr, ptr, ptr, ctypes.c_float, ptr, ptr,
                                             ptr, ptr])):
            fn.restype = i32
            if not self.wasm:
                fn.argtypes = args
        self.lib = lib
        self.code_bytes = lib.pe_code_bytes()   # an activation code's bytes in a record: 1 (x86) or 2 (wasm)
        self._act_bytes: dict[tuple[str, int], int] = {}
        self._local = threading.local()        # its .buffers: (kind, shape) -> (array, address), a thread's own
        self._delta_layers: dict[tuple, tuple] = {}   # ids of a DeltaNet layer's arrays -> (them, pe_delta_net's)

    def act_bytes(self, ggml_type: str, n: int) -> int:
        """Bytes of one token's activation record for rows of ``n`` weights of ``ggml_type``."""
        key = (ggml_type, n)
        if key not in self._act_bytes:
            t = _type(ggml_type)
            if n <= 0 or n % t.block_size or n > MAX_N:
                raise KernelError(f"{n} weights are not whole {ggml_type} blocks of {t.block_size}")
            self._act_bytes[key] = _ok(self.lib.pe_act_bytes(t.id, n), "pe_act_bytes")
        return self._act_bytes[key]

    def product(self, m: Matrix, x: np.ndarray, acts: dict | None = None) -> np.ndarray:
        """``W x`` for the matrix ``m``: x (T, n) float32 -> (T, rows) float32, a new array. ``acts`` keeps x's
        rounded codes for another matrix of the same activation type and width (a row split's parts)."""
        if x.ndim != 2 or x.shape[1] != m.n:
            raise KernelError(f"x of shape {x.shape} for a matrix of {m.n} weights a row")
        t = len(x)
        if t == 0:
            return np.zeros((0, m.rows), np.float32)
        act_type = TYPES[m.type]
        key = ("kernel", act_type, m.n)
        act = None if acts is None else acts.get(key)          # (array, address): the array kept alive
        if act is None:
            xs, x_at = self._buffer("x", (t, m.n), np.float32)
            np.copyto(xs, x, casting="same_kind")
            act = self._buffer(act_type, (t, self.act_bytes(m.type, m.n)), np.uint8)
            _ok(self._call(self.lib.pe_quantize, m.id, x_at, m.n, t, act[1]), "pe_quantize")
            if acts is not None:
                acts[key] = act
        y, y_at = self._buffer("y", (t, m.rows), np.float32)
        _ok(self._call(self.lib.pe_mul_mat, m.id, m.address, m.rows, m.n, act[1], t, y_at, m.rows), "pe_mul_mat")
        return y.copy() if t <= DECODE_TOKENS else y

    def attention_scores(self, q: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Attention's scores over a KV cache: q (Hkv, M, D) float32, C-contiguous; k (Hkv, S, D) float32 with
        contiguous rows (a slice of the cache's positions) -> (Hkv, M, S) float32, q . k over D."""
        _check(q, np.float32, 3, "q")
        hkv, m, d = q.shape
        k_head = _cache_rows(k, (hkv, k.shape[1], d), "k")
        out = np.empty((hkv, m, k.shape[1]), np.float32)
        _ok(self._call(self.lib.pe_attn_scores, q.ctypes.data, hkv, m, d, k.ctypes.data, k_head, k.shape[1],
                       out.ctypes.data), "pe_attn_scores")
        return out

    def attention_values(self, p: np.ndarray, v: np.ndarray) -> np.ndarray:
        """The values weighted by the softmaxed scores: p (Hkv, M, S) float32, C-contiguous; v (Hkv, S, Dv)
        float32 with contiguous rows -> (Hkv, M, Dv) float32, summed over S in key order."""
        _check(p, np.float32, 3, "p")
        hkv, m, s = p.shape
        v_head = _cache_rows(v, (hkv, s, v.shape[2]), "v")
        out = np.empty((hkv, m, v.shape[2]), np.float32)
        _ok(self._call(self.lib.pe_attn_values, p.ctypes.data, hkv, m, s, v.ctypes.data, v_head, v.shape[2],
                       out.ctypes.data), "pe_attn_values")
        return out

    def delta_net(self, proj: np.ndarray, layer, window: np.ndarray, s: np.ndarray) -> tuple:
        """A Gated DeltaNet layer between its two products, T tokens in turn (kernel.c's pe_delta_net): proj
        (T, C + H D + 2 H) the input projection's rows, float32 C-contiguous; ``layer`` a
        :class:`pyengine.model.delta_net.DeltaNet` (its conv (C, K), dt_bias and a (H,), norm (D,), key_of (H,),
        d_state D, eps); the state window (K-1, C) and s (H, D, D), left as they were -> (out (T, H D) for
        ssm_out, the new window, the new s)."""
        conv_t, gates, norm, keys, hk = self._delta_layer(layer)
        (taps, c), (h, d) = conv_t.shape, (len(keys), layer.d_state)
        for a, shape, what in ((s, (h, d, d), "s"), (window, (taps - 1, c), "window"),
                               (proj, (len(proj), c + h * d + 2 * h), "proj")):
            _check(a, np.float32, len(shape), what)
            if a.shape != shape:
                raise KernelError(f"a DeltaNet layer of conv {(c, taps)}, {h} heads of {d} cannot take {what} "
                                  f"{a.shape}: it takes {shape}")
        t = len(proj)
        dims = np.array([t, h, hk, d, taps], np.int32)
        out, window_out, s_out = np.empty((t, h * d), np.float32), np.empty_like(window), np.empty_like(s)
        work, work_at = self._buffer("delta", (1, c), np.float32)
        _ok(self._call(self.lib.pe_delta_net, proj.ctypes.data, dims.ctypes.data, conv_t.ctypes.data,
                       window.ctypes.data, s.ctypes.data, gates.ctypes.data, norm.ctypes.data, keys.ctypes.data,
                       ctypes.c_float(layer.eps), window_out.ctypes.data, s_out.ctypes.data, out.ctypes.data, work_at),
            "pe_delta_net")
        return out, window_out, s_out

    def _delta_layer(self, layer) -> tuple:
        """A DeltaNet layer's constants as pe_delta_net takes them, checked and made once: conv_t (K, C), gates
        (2H,): dt_bias then a, norm (D,), key_of (H,) int32, and Hk. Raises KernelError for a layer whose
        sizes do not agree."""
        fields = (layer.conv, layer.dt_bias, layer.a, layer.norm, layer.key_of)
        key = tuple(map(id, fields))
        got = self._delta_layers.get(key, (None, None))[1]
        if got is None:
            conv, dt_bias, a, norm, key_of = fields
            _check(conv, np.float32, 2, "conv")
            h, d, (c, taps) = len(key_of), layer.d_state, conv.shape
            hk = (c - h * d) // (2 * d) if d > 0 else 0
            gates = np.concatenate([dt_bias, a]).astype(np.float32)                   # (2H,)
            if d <= 0 or hk <= 0 or c != 2 * hk * d + h * d or taps < 1 or gates.shape != (2 * h,) \
                    or np.shape(norm) != (d,) or not np.all((key_of >= 0) & (key_of < hk)):
                raise KernelError(f"a DeltaNet layer of conv {conv.shape}, {h} heads of {d}, gates {gates.shape}, "
                                  f"norm {np.shape(norm)}: its sizes or key heads do not agree")
            got = (np.ascontiguousarray(conv.T), gates, np.ascontiguousarray(norm, np.float32),
                   np.ascontiguousarray(key_of, np.int32), hk)
            self._delta_layers[key] = (fields, got)            # (the arrays held, so that their ids stay theirs)
        return got

    def _buffer(self, kind: str, shape: tuple, dtype) -> tuple[np.ndarray, int]:
        """A work array and its address: kept for decode's few tokens, new for a prompt's many."""
        key = (kind, shape)
        buffers = self._local.__dict__.setdefault("buffers", {})   # (threads stand in for workers in tests)
        got = buffers.get(key)
        if got is None:
            a = np.empty(shape, dtype)
            got = (a, a.ctypes.data)
            if shape[0] <= DECODE_TOKENS:
                buffers[key] = got
        return got

    def _call(self, fn, *args) -> int:
        if self.wasm:                                   # addresses past 2 GiB as the same 32 bits, signed
            args = tuple(a - (1 << 32) if isinstance(a, int) and a >= 1 << 31 else a for a in args)
        return fn(*args)

    # -- for tests: each step on arrays of the caller's, every argument checked ------------------------------

    def quantize(self, x: np.ndarray, ggml_type: str) -> np.ndarray:
        """x (T, n) float32 rounded to 8-bit codes for weights of ``ggml_type`` (Q8_0, Q8_1 or Q8_K, as ggml
        rounds it): (T, act_bytes) uint8 records for :meth:`mul_mat`."""
        _check(x, np.float32, 2, "x")
        t, n = x.shape
        act = np.empty((t, self.act_bytes(ggml_type, n)), np.uint8)
        _ok(self._call(self.lib.pe_quantize, _type(ggml_type).id, x.ctypes.data, n, t, act.ctypes.data),
            "pe_quantize")
        return act

    def mul_mat(self, w: np.ndarray, ggml_type: str, n: int, act: np.ndarray, out: np.ndarray) -> np.ndarray:
        """``out[t, r] = W[r] . x[t]`` for ``w`` (rows, row bytes) uint8, each row n weights of ``ggml_type``
        in its blocks, and ``act`` (T, act_bytes) from :meth:`quantize`; ``out`` (T, >= rows) float32, its
        rows contiguous (a column slice of a wider array is fine). Returns ``out``."""
        m = Matrix(w, ggml_type, n)
        self._check_act(act, ggml_type, n)
        if out.dtype != np.float32 or out.ndim != 2 or not out.flags.writeable or out.strides[1] != 4 \
                or out.strides[0] % 4 or out.shape != (len(act), m.rows):
            raise KernelError(f"out must be writeable float32 ({len(act)}, {m.rows}) with contiguous rows, "
                              f"got {out.dtype} {out.shape} strides {out.strides}")
        ldy = out.strides[0] // 4 if len(act) > 1 else m.rows
        _ok(self._call(self.lib.pe_mul_mat, m.id, m.address, m.rows, n, act.ctypes.data, len(act),
                       out.ctypes.data, ldy), "pe_mul_mat")
        return out

    def block_sums(self, row: np.ndarray, ggml_type: str, act: np.ndarray) -> np.ndarray:
        """One row's integer sums with one token's codes, a sub-block of 16 weights at a time, before any
        scale: (n / 16,) int32."""
        t_info = _type(ggml_type)
        _check(row, np.uint8, 1, "row")
        n = len(row) // t_info.type_size * t_info.block_size
        if len(row) != t_info.n_bytes(n) or not n:
            raise KernelError(f"a row of {len(row)} bytes is not whole {ggml_type} blocks")
        self._check_act(act[None] if act.ndim == 1 else act, ggml_type, n)
        out = np.empty(n // 16, np.int32)
        _ok(self._call(self.lib.pe_block_sums, t_info.id, row.ctypes.data, n, act.ctypes.data, out.ctypes.data),
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


def _cache_rows(a: np.ndarray, shape: tuple, what: str) -> int:
    """Check ``a`` is float32 of ``shape`` (heads, rows, width) with contiguous rows, its heads apart by at least
    their rows; returns the heads' distance in floats."""
    if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != shape or shape[2] == 0:
        raise KernelError(f"{what} must be float32 {shape}, got {getattr(a, 'dtype', type(a))} "
                          f"{getattr(a, 'shape', '')}")
    head, row, one = a.strides
    if one != 4 or row != 4 * shape[2] or head % 4 or (shape[0] > 1 and head < row * shape[1]) \
            or head >= 1 << 33:
        raise KernelError(f"{what}'s rows must be contiguous and its heads apart, got strides {a.strides}")
    return head // 4


def _ok(code: int, fn: str) -> int:
    if code < 0:
        raise KernelError(f"{fn} refused its arguments (code {code})")
    return code


def library_path() -> str | None:
    """The library this runtime would load: the wasm side module under Pyodide, else the native build
    for this CPU (None when there is none)."""
    if sys.platform == "emscripten":
        return WASM_PATH if os.path.exists(WASM_PATH) else None
    builds = native_builds()
    return str(HERE / NATIVE[builds[0]]) if builds else None


def native_builds() -> list[str]:
    """The native builds (keys of NATIVE) present beside this file that this CPU runs, the fastest first."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    flags = _cpu_flags() if x86 else set()
    return [name for name in NATIVE if (HERE / NATIVE[name]).exists()
            and (name == "portable" or (x86 and X86_FLAGS[name] <= flags))]


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


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


def products_line(weights: str, chosen_by: str) -> str:
    """One line saying what runs the quantized products of a model held under the weight policy ``weights``
    (``Model.weights``): :func:`status` for ``blocks`` or when the kernel is missing, else numpy, as
    ``chosen_by`` (e.g. "--weights f32") asked."""
    return status() if weights == "blocks" or get() is None else f"numpy ({chosen_by})"


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
    return kernel, f"C kernel ({os.environ.get('PYENGINE_KERNEL_NAME') or Path(path).name})"
