"""Byte sources: exact reads, short reads only at EOF, read counting."""

from __future__ import annotations

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
