"""pyengine: run GGUF language models with Python and numpy, in CPython or in the browser.

The pipeline, a subpackage per stage, in the order the bytes flow:

    gguf/          the file: byte sources, the header and its metadata, tensor infos, split models,
                   the ggml type table, dequantization
    weights/       the weights: one class per form a matrix is held in, their products, reading rows
                   from the file, the memory budget
    model/         the model: hyperparameters and the architecture table, the network's operations,
                   the transformer's forward pass, the KV cache, loading it from a GGUF
    text/          the text: tokenizers (SentencePiece, byte-level BPE), chat templates
    generation/    generation: sampling, the loop that streams a reply, the chat session
    parallel/      the model split over several workers (the math, tested in CPython)
    browser/       the browser: the Web Worker's glue, the File byte source, the page's settings

    cli.py         ``python -m pyengine inspect|generate|chat|tokenize``
    inspect.py     a GGUF laid out for people (the CLI and the page's inspector)
    errors.py      the one family of errors for bad input
"""

__version__ = "0.1.0"
