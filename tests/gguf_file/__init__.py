"""Tests of pyengine.gguf, the file: byte sources, the reader, ggml types, dequantization, split files.

Not named ``gguf``: tests/ is on sys.path, and ``gguf`` is gguf-py, the oracle these tests import."""
