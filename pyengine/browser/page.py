"""What the page shows of a model: its card, the inspector's tables, and errors in words."""

from __future__ import annotations

import itertools
import sys
import traceback
from typing import Any

from pyengine.errors import GGUFError, PyEngineError
from pyengine.gguf import text_value

# Why a reply ended (pyengine.generation.loop.STOP_REASONS), in the words of the statistics line.
STOP_WORDS = {"eog": "end of turn", "stop_string": "stop string", "max_tokens": "token limit",
              "context": "context full", "stopped": "stopped", "error": "error"}
# The stop reasons of a reply that Continue goes on with (ChatSession.resume): the context, the token
# limit or Stop ended it, not the model.
CONTINUED = ("context", "max_tokens", "stopped")
# What the token probabilities view shades a token by (pyengine.generation.sampling.Sampler.probabilities).
PROBS_NOTE = ("Each token is shaded by the probability it had after the repetition penalty and the temperature, "
              "before top-k, top-p and min-p (temperature 0: the softmax of the penalized logits); with a "
              "Structured output, after its mask: the tokens it refuses at 0. Click a token of the last reply, or "
              "press Space on it, to look inside the step that wrote it.")

SHOWN_CHARS = 20_000  # a metadata string longer than this is cut in the inspector (a chat template fits)
INSPECT_ROWS = 10_000  # metadata keys and tensors sent to the inspector (real models: a few hundred)


def open_gguf_plainly(sources: list, progress: Any = None) -> Any:
    """:func:`pyengine.gguf.open_gguf` (``progress`` as its), except that a file that is not a GGUF at all
    (empty, too short, or not starting with the magic ``GGUF``) is said plainly: "x.gguf is not a GGUF
    file (it starts with 'hell', a GGUF file starts with 'GGUF')". Raises GGUFError naming the file."""
    from pyengine.gguf import GGUF_MAGIC, open_gguf
    try:
        return open_gguf(sources, progress=progress)
    except GGUFError:
        for src in sources:
            head = src.read(0, len(GGUF_MAGIC))
            if head == GGUF_MAGIC:
                continue
            if not head:
                raise GGUFError(f"{src.name} is empty (0 bytes): not a GGUF file") from None
            if len(head) < len(GGUF_MAGIC):
                raise GGUFError(f"{src.name} is not a GGUF file (it is only {len(head)} bytes long)") from None
            starts = f"'{head.decode()}'" if head.isascii() and head.decode().isprintable() else \
                f"the bytes {head.hex(' ')}"
            raise GGUFError(f"{src.name} is not a GGUF file (it starts with {starts}, "
                            f"a GGUF file starts with 'GGUF')") from None
        raise



def model_card(d: dict, chat_template: str, weights: str = "") -> dict:
    """The model card from :func:`pyengine.inspect.describe`'s dict: name, architecture, parameters,
    quant types (most bytes first), context length (tokens), file size (bytes, all parts),
    ``weights``: the weight form the model is held in (``Model.weights``, a key of WEIGHT_FORMS), and
    ``products``: what runs the quantized products (:func:`pyengine.weights.kernel.status`)."""
    from pyengine.weights import kernel
    meta = d["metadata"]
    arch = text_value(meta.get("general.architecture")) or "?"
    return {
        "name": text_value(meta.get("general.name")) or d["files"][0],
        "architecture": arch,
        "parameters": d["n_params"],
        "quant_types": ", ".join(t["type"] for t in d["types"]),
        "context_length": meta.get(f"{arch}.context_length", 0),
        "file_size": d["file_size"],
        "files": d["files"],
        "chat_template": chat_template,
        "weights": weights,
        "products": kernel.products_line(weights, "the Memory setting"),
    }


def inspector(d: dict) -> dict:
    """The inspector's data from :func:`pyengine.inspect.describe`'s dict: ``header`` (version,
    counts, alignment, data offset), ``parts`` (each file's name, size and five sections with byte
    ranges), ``metadata`` (key, type, value as text), ``types`` (per ggml type: count, params,
    bytes), ``tensors`` (name, shape, type, offset, n_bytes); at most INSPECT_ROWS keys and tensors."""
    types = d["value_types"]
    return {
        "header": {k: d[k] for k in ("version", "n_kv", "n_tensors", "alignment", "data_offset")},
        "parts": d["parts"],
        "metadata": [{"key": k, "type": types[k], "value": show_value(v, types[k])}
                     for k, v in itertools.islice(d["metadata"].items(), INSPECT_ROWS)],
        "types": d["types"],
        "tensors": [{k: t[k] for k in ("name", "shape", "type", "offset", "n_bytes")}
                    for t in d["tensors"][:INSPECT_ROWS]],
    }


def show_value(value: Any, vtype: str) -> str:
    """A metadata value as the inspector shows it: a string as it is (up to SHOWN_CHARS; a chat
    template fits), anything else as the CLI prints it (long arrays cut, their length shown)."""
    from pyengine.inspect import _show
    if isinstance(value, str):
        return value if len(value) <= SHOWN_CHARS else f"{value[:SHOWN_CHARS]}... ({len(value):,} characters)"
    return _show(value, vtype)


def error_text(e: BaseException) -> str:
    """What the page shows for an exception: the PyEngineError's own text, else 'internal error: ...'."""
    if isinstance(e, PyEngineError):
        return str(e)
    if isinstance(e, MemoryError):
        return "out of memory: the model does not fit in a browser worker's 4 GiB of memory: choose more workers"
    traceback.print_exception(e, file=sys.stderr)  # the console keeps the traceback for a bug report
    return f"internal error: {type(e).__name__}: {e}"


def weights_failed(text: str, let_go: bool) -> str:
    """The error of a load that failed while the weights were read (``text``: :func:`error_text`'s);
    ``let_go``: the model loaded before was let go to make room (the page offers to load it again)."""
    before = "; the model loaded before was let go to make room: the conversation is kept, load it again" \
        if let_go else ""
    return f"the load failed while the weights were read: {text}{before}"
