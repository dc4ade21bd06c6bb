"""pyengine: run GGUF language models with Python and numpy, in CPython or in the browser.

The pipeline, one module each:

    source.py        the bytes: a file, in-memory bytes or the browser's File, read at (offset, length)
    gguf.py          the file: header, metadata, tensor infos, split models
    ggml.py          the ggml type table (block sizes and byte counts)
    quants.py        dequantization of each ggml type to float32
    config.py        the model's hyperparameters, read from GGUF keys through one table
    model.py         the architectures and the forward pass (prefill, decode, KV cache)
    tokenizer.py     SentencePiece and byte-level BPE tokenizers from the GGUF vocab
    unicode_classes.py  \\p{L}-style classes from unicodedata for the BPE pre-tokenizers (no regex module)
    chat_template.py chat templates (jinja2 sandbox) and the built-in ones
    sampling.py      greedy, temperature, top-k, top-p, min-p, repetition penalty
    generate.py      the generation loop and chat sessions
    cli.py           ``python -m pyengine inspect|generate|chat|tokenize``
    worker.py        glue for the Pyodide Web Worker
"""

__version__ = "0.1.0"
