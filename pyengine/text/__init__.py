"""The text: tokenizers (SentencePiece and byte-level BPE, id for id with llama.cpp), and chat templates.

:mod:`~pyengine.text.vocab` reads the vocab from the metadata,
:mod:`~pyengine.text.bpe` holds byte-level BPE's pre-tokenizers and byte map,
:mod:`~pyengine.text.pretokenize` cuts text into words as llama.cpp does
(:mod:`~pyengine.text.unicode_classes` builds the ``\\p{L}`` classes from
``unicodedata``), :mod:`~pyengine.text.tokenizer` encodes and decodes, and
:mod:`~pyengine.text.stream` releases streamed text in whole characters.
:mod:`~pyengine.text.chat_template` turns a conversation into the prompt, with
:mod:`~pyengine.text.builtin_templates` (llama.cpp's formats in Python) or the
GGUF's Jinja template in :mod:`~pyengine.text.jinja_sandbox`.
"""
