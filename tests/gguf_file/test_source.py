"""Byte sources: exact reads, short reads only at EOF, read counting."""

from __future__ import annotations

import numpy as np
import pytest

from pyengine.gguf.source import BytesSource, FileSource

DATA = bytes(range(256)) * 5  # 1280 bytes


@pytest.fixture(params=["file", "bytes"])
def source(request, tmp_path):
    if request.param == "file":
        path = tmp_path / "data.bin"
        path.write_bytes(DATA)
        src = FileSource(path)
        yield src
        src.close()
    else:
        yield BytesSource(DATA, name="data.bin")


def test_name_and_size(source):
    assert source.name == "data.bin"
    assert source.size == 1280
    assert source.reads == 0


def test_reads_are_exact_and_counted(source):
    assert source.read(0, 4) == b"\x00\x01\x02\x03"
    assert source.read(300, 3) == bytes([44, 45, 46])
    assert source.read(1000, 280) == DATA[1000:]
    assert source.read(5, 0) == b""
    assert source.reads == 4 and source.bytes_read == 4 + 3 + 280


def test_short_read_only_at_eof(source):
    assert source.read(1270, 100) == DATA[1270:]
    assert source.read(1280, 10) == b""
    assert source.read(5000, 10) == b""


def test_read_into_fills_the_array_and_counts(source):
    out = np.full(300, 255, np.uint8)
    assert source.read_into(1000, out) == 280                      # short only at the end
    assert out[:280].tobytes() == DATA[1000:] and (out[280:] == 255).all()
    assert source.read_into(4, out[:3]) == 3 and out[:3].tolist() == [4, 5, 6]
    assert source.reads == 2 and source.bytes_read == 283


def test_read_into_refuses_an_array_it_cannot_fill_in_place(source):
    for bad in (np.zeros(8, np.int32), np.zeros(16, np.uint8)[::2], np.zeros(8, np.uint8).view()):
        if bad.dtype == np.uint8 and bad.flags.c_contiguous:
            bad.flags.writeable = False
        with pytest.raises(ValueError, match="writable C-contiguous uint8"):
            source.read_into(0, bad)
    with pytest.raises(ValueError):
        source.read_into(-1, np.zeros(4, np.uint8))


def test_negative_ranges_rejected(source):
    with pytest.raises(ValueError):
        source.read(-1, 4)
    with pytest.raises(ValueError):
        source.read(0, -4)


def test_file_source_context_manager(tmp_path):
    path = tmp_path / "x.gguf"
    path.write_bytes(b"GGUF")
    with FileSource(path) as src:
        assert src.read(0, 4) == b"GGUF"
        assert repr(src) == "FileSource(name='x.gguf', size=4)"
    assert src._f.closed
