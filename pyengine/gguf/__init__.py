"""The GGUF file: its bytes, its header, its tensor types and the decoding of their blocks.

The format (GGUF v2 and v3, little-endian; ggml's ``gguf.h`` and ``gguf.cpp``):

1. magic         ``b"GGUF"``
2. header        ``version: u32``, ``n_tensors: u64``, ``n_kv: u64``
3. metadata      ``n_kv`` times: ``key: string``, ``type: u32``, value.
                 A string is ``length: u64`` + UTF-8 bytes; an array is
                 ``item_type: u32``, ``count: u64``, then the items.
4. tensor infos  ``n_tensors`` times: ``name: string``, ``n_dims: u32``,
                 ``ne: u64 * n_dims`` (fastest-varying first), ``type: u32``
                 (a ggml type id), ``offset: u64`` (from the data section).
5. tensor data   at ``data_offset``: the end of the tensor infos rounded up to
                 ``general.alignment`` (a ``UINT32`` power of two; 32 if absent).

Every number in the file comes from a stranger. The header is parsed from one
growing buffer (1 MiB, then doubling up to 4 MiB), so a 6 MB header costs a few
reads (a value of 4 MiB or more past the buffer is read on its own); every
count and length is checked against the bytes left in the file before anything
is allocated, so a count of 2^63 fails at once. Choices where the format leaves
room, following llama.cpp's ``gguf_init_from_file`` unless said otherwise:

- versions 2 and 3 only; version 1 (u32 counts) is rejected;
- big-endian files (their version field reads byte-swapped, e.g. 0x03000000)
  are detected and rejected with a message naming the byte order;
- an array of numbers or BOOL is a read-only 1-D numpy array (of its own
  bytes), an array of strings a ``list[str]``, an array of arrays a list;
- arrays of arrays are read up to ``MAX_ARRAY_DEPTH`` (8) levels;
- the header of one file may hold at most ``MAX_METADATA_BYTES`` (256 MiB),
  and at most the file's size plus 64 MiB: its bytes, plus what Python makes
  of them (64 for a string, 320 for an inner array, 256 for a key, 512 for a
  tensor info), charged before it is made, so that a count of millions is
  refused before its objects exist (ours: a bound for a 4 GiB wasm heap);
- keys must be non-empty and unique; tensor names unique (across all parts
  of a split model too);
- ``general.alignment`` must be a ``UINT32`` power of two (0 and 13 are not);
- at most 4 dims; a dim may be 0 (llama.cpp allows it: the tensor is empty),
  never negative as an int64; the element count must stay below 2^63;
  the first dim must be a multiple of the type's block size;
- tensor data must lie inside its file, start on an ``alignment`` boundary and
  not overlap another tensor's (llama.cpp further requires the tensors to be
  packed in file order; we do not);
- strings are decoded as UTF-8 with ``surrogateescape``, so invalid bytes in a
  token text survive (``s.encode("utf-8", "surrogateescape")`` gives them back).

A split model (``NAME-00001-of-00003.gguf`` ...), as ``llama-gguf-split``
writes it: every part has ``split.no`` (u16, from 0), ``split.count`` (u16) and
``split.tensors.count`` (i32); part 0 has all the metadata; each tensor's data
sits in the part whose infos name it, at an offset from that part's data
section.

Modules, in the order a load uses them: :mod:`~pyengine.gguf.source` (byte
sources), :mod:`~pyengine.gguf.cursor` (checked front-to-back reads),
:mod:`~pyengine.gguf.header` (metadata values, tensor infos, one file),
:mod:`~pyengine.gguf.split` (the parts of a split model),
:mod:`~pyengine.gguf.file` (:func:`open_gguf`, :class:`GGUFFile`),
:mod:`~pyengine.gguf.ggml_types` (the ggml type table) and
:mod:`~pyengine.gguf.quants` (dequantization).
"""

from pyengine.gguf.file import GGUFFile, open_gguf
from pyengine.gguf.header import GGUF_MAGIC, Section, TensorInfo, text_value

__all__ = ["GGUFFile", "GGUF_MAGIC", "Section", "TensorInfo", "open_gguf", "text_value"]
