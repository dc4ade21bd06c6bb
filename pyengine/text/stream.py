"""Streaming detokenization: text released in whole characters as token ids arrive."""

from __future__ import annotations


class StreamDecoder:
    """Text of a stream of token ids, released in whole characters.

    ``push(id)`` returns the new text that is complete: bytes that end inside a
    UTF-8 sequence are held back until the sequence completes (or proves
    invalid: then U+FFFD, as ``bytes.decode(errors="replace")``). ``flush()``
    returns what is held back. Control tokens render as in
    :meth:`Tokenizer.token_bytes` with ``special``.
    """

    def __init__(self, tokenizer, special: bool = False):
        self.tokenizer, self.special = tokenizer, special
        self._held = b""

    def push(self, tid: int) -> str:
        data = self._held + self.tokenizer.token_bytes(tid, self.special)
        cut = complete_prefix(data)
        self._held = data[cut:]
        return data[:cut].decode("utf-8", "replace")

    def flush(self) -> str:
        data, self._held = self._held, b""
        return data.decode("utf-8", "replace")


def complete_prefix(data: bytes) -> int:
    """Length of ``data`` without a trailing, still incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b < 0x80:
            return len(data)                 # ASCII: nothing pending
        if b >= 0xC0:                        # a lead byte: does its sequence fit?
            need = 2 if b < 0xE0 else 3 if b < 0xF0 else 4
            return len(data) - back if need > back and b < 0xF8 else len(data)
    return len(data)                          # only continuation bytes: invalid, release them
