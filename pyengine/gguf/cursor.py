"""Checked front-to-back reads of a GGUF header from one growing buffer.

Every count and length in the header comes from a stranger: the cursor checks
each against the bytes left in the file before anything is read or allocated,
and names the file, the byte offset and what was being read in its errors.

While a cap is set (:meth:`Cursor.limit`: the metadata), every string and
array is also checked against it before it is made: the bytes read since the
cap was set, plus ``OBJECT_BYTES`` for each string or array object, may not
pass it. Every value the cursor returns owns its bytes (a large one is read on
its own), so nothing made from the header keeps the buffer alive.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from pyengine.errors import GGUFError

FIRST_CHUNK = 1 << 20      # bytes of the first header read; each next read doubles
MAX_CHUNK = 4 << 20        # ... up to this (a chunk and the tail it joins are held at once)
OWN_READ = 4 << 20         # a value of at least this many bytes that runs past the buffer: one read of its own
OBJECT_BYTES = 64          # charged to the cap per string or array made (about a CPython str and its list slot)
PROGRESS_BYTES = 2 << 20   # header bytes between two progress calls
NEVER = 1 << 64            # an offset no file reaches

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")


class Cursor:
    """Reads a source from byte 0 through a buffer refilled in doubling chunks.

    ``where`` names what is being read (``"header"``, ``"key 'x'"``,
    ``"tensor 'y'"``) for error messages. ``progress(bytes_done, bytes_total)``
    (optional) is called by :meth:`report`; ``estimate`` is the best guess of
    where the header ends (an offset; :meth:`strings` extrapolates it).
    """

    def __init__(self, source: Any, progress: Callable[[int, int], None] | None = None):
        self.src = source
        self.buf = b""
        self.base = 0            # file offset of buf[0]
        self.p = 0               # read position in buf
        self.chunk = FIRST_CHUNK
        self.where = "header"
        self.cap = 0             # bytes the values read under the cap may hold
        self.cap_end = NEVER     # the offset the reads may reach: lowered by OBJECT_BYTES per object made
        self.capped = "metadata"  # what the cap holds, for its error
        self.progress = progress
        self.next_report = NEVER if progress is None else PROGRESS_BYTES
        self.estimate = 0

    @property
    def offset(self) -> int:
        return self.base + self.p

    @property
    def left(self) -> int:
        """Bytes of the file after the read position."""
        return self.src.size - self.offset

    def error(self, msg: str, offset: int | None = None) -> GGUFError:
        at = self.offset if offset is None else offset
        return GGUFError(f"{self.src.name}: byte {at}: {self.where}: {msg}")

    def _check_left(self, n: int, what: str) -> None:
        if n > self.left:
            raise self.error(f"{what} needs {n} bytes but only {self.left} are left in the file "
                             f"of {self.src.size} bytes (truncated?)")

    def need(self, n: int, what: str) -> None:
        """Make ``buf[p:p+n]`` available, checking ``n`` against the file first."""
        have = len(self.buf) - self.p
        if n <= have:
            return
        self._check_left(n, what)
        end = self.base + len(self.buf)
        want = min(max(n - have, self.chunk), self.src.size - end)
        self.chunk = min(2 * self.chunk, MAX_CHUNK)
        more = self.src.read(end, want)
        if len(more) < n - have:
            raise self.error(f"{what}: the file ended early (read {len(more)} of {want} bytes at {end})")
        self.buf = self.buf[self.p:] + more
        self.base += self.p
        self.p = 0

    def check_count(self, count: int, item_bytes: int, what: str) -> None:
        """Reject ``count`` items of at least ``item_bytes`` each that cannot fit in the file."""
        if count * item_bytes > self.left:
            raise self.error(f"{what}: {count} items of at least {item_bytes} bytes cannot fit "
                             f"in the {self.left} bytes left in the file")

    # --- the cap and progress ----------------------------------------------------------------

    def limit(self, cap: int | None) -> None:
        """From here on, hold at most ``cap`` bytes (None: no cap)."""
        self.cap, self.cap_end = (0, NEVER) if cap is None else (cap, self.offset + cap)

    def hold(self, n: int, objects: int, what: str, each: int = OBJECT_BYTES) -> None:
        """Charge ``objects`` objects of ``each`` bytes about to be made of the next ``n`` bytes; past the cap,
        an error naming ``capped`` (what the cap is on)."""
        end = self.cap_end - objects * each
        if self.offset + n > end:
            held = self.cap - (end - self.offset - n)
            raise self.error(f"{self.capped} would hold more than {self.cap / 2**20:.0f} MiB: this {what} "
                             f"would bring it to {held:,} bytes")
        self.cap_end = end

    def report(self, last: bool = False) -> None:
        """Call ``progress(offset, estimate)`` when ``PROGRESS_BYTES`` were read since the last call, or ``last``."""
        if self.progress is None or (self.offset < self.next_report and not last):
            return
        self.next_report = self.offset + PROGRESS_BYTES
        self.progress(self.offset, self.offset if last else max(self.offset, self.estimate))

    # --- reads ----------------------------------------------------------------------------------

    def unpack(self, st: struct.Struct, what: str) -> tuple:
        self.need(st.size, what)
        out = st.unpack_from(self.buf, self.p)
        self.p += st.size
        return out

    def u32(self, what: str) -> int:
        return self.unpack(U32, what)[0]

    def u64(self, what: str) -> int:
        return self.unpack(U64, what)[0]

    def raw(self, n: int, what: str) -> bytes:
        """The next ``n`` bytes as a bytes object of their own.

        Past the buffer, ``n >= OWN_READ`` bytes come in one read of exactly
        ``n`` (the buffer is dropped), so a large array is never also copied
        into the buffer.
        """
        if n >= OWN_READ and n > len(self.buf) - self.p:
            self._check_left(n, what)
            at = self.offset
            data = self.src.read(at, n)
            if len(data) < n:
                raise self.error(f"{what}: the file ended early (read {len(data)} of {n} bytes)")
            self.buf, self.base, self.p = b"", at + n, 0
            return data
        self.need(n, what)
        out = self.buf[self.p:self.p + n]
        self.p += n
        return out

    def string(self, what: str = "string", objects: int = 1) -> str:
        return self.string_bytes(what, objects).decode("utf-8", "surrogateescape")

    def string_bytes(self, what: str = "string", objects: int = 1) -> bytes:
        """One string's bytes, checked against the cap as ``objects`` objects (0: already charged)."""
        n = self.u64(f"{what} length")
        self._check_left(n, what)
        self.hold(n, objects, what)
        return self.raw(n, what)

    def strings(self, count: int) -> list[str]:
        """``count`` strings: the hot loop of header parsing (262,144 vocab entries).

        Strings wholly inside the buffer, the cap and the next progress report
        are cut straight out of the buffer and decoded; the one that stops the
        loop goes through :meth:`string`, which refills or raises. (Decoded one
        by one: a list of every string's bytes beside a list of the strings once
        took twice the memory, and its holes stayed in a browser's heap.)
        """
        self.check_count(count, 8, "array of strings")
        self.hold(8 * count, count + 1, f"array of {count:,} strings")
        out: list[str] = [""] * count
        unpack = U64.unpack_from
        start, i = self.offset, 0
        while i < count:
            buf, p = self.buf, self.p
            stop = min(len(buf), self.cap_end - self.base, self.next_report - self.base)
            last = stop - 8  # the last position a length can start at
            for j in range(i, count):  # the hot loop
                if p > last:
                    break
                q = p + 8
                r = q + unpack(buf, p)[0]
                if r > stop:
                    break
                out[j] = buf[q:r].decode("utf-8", "surrogateescape")
                p = r
            else:
                j = count
            i = j                  # the first string not cut out of this buffer
            self.p = p
            if i < count:
                out[i] = self.string(objects=0)
                i += 1
            self.estimate = self.offset + (self.offset - start) * (count - i) // i
            self.report()
        return out

    def skip(self, n: int, what: str) -> None:
        """Move past the next ``n`` bytes (checked against the file) without making anything of them."""
        self._check_left(n, what)
        if n <= len(self.buf) - self.p:
            self.p += n
        else:
            self.buf, self.base, self.p = b"", self.offset + n, 0

    def skip_strings(self, count: int) -> None:
        """Move past ``count`` strings, reading only their lengths (each checked against the file)."""
        self.check_count(count, 8, "array of strings")
        unpack, i = U64.unpack_from, 0
        while i < count:
            buf, p = self.buf, self.p
            last = len(buf) - 8
            while i < count and p <= last:           # the strings wholly inside the buffer
                r = p + 8 + unpack(buf, p)[0]
                if r > len(buf):
                    break
                p, i = r, i + 1
            self.p = p
            if i < count:                            # the one that runs past it: refilled or refused
                self.skip(self.u64("string length"), "string")
                i += 1
            self.report()

    def numbers(self, dtype: str, count: int, what: str) -> np.ndarray:
        """``count`` fixed-size items: a read-only 1-D array over bytes of its own.

        ``dtype`` ``"?"`` (GGUF's BOOL) reads one byte an item, true when non-zero.
        """
        size = np.dtype(dtype).itemsize
        self.check_count(count, size, what)
        self.hold(count * size, 1, what)
        data = self.raw(count * size, what)
        if dtype == "?":
            out = np.frombuffer(data, dtype=np.uint8) != 0
            out.flags.writeable = False
            return out
        return np.frombuffer(data, dtype=dtype)
