"""Opening a model: the GGUF, its tokenizer, its chat template and its weights, in that order.

:func:`load` is the one place the CLI and the browser worker get a model from;
the tokenizer and template are read first, so a bad vocab fails before the
slow part.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyengine.errors import TemplateError
from pyengine.text.chat_template import ChatTemplate


@dataclass
class Engine:
    """What :func:`load` builds: the opened GGUF, its model, tokenizer and chat template.
    ``template`` is None when the GGUF's template cannot be used (``template_error`` says why);
    raw completion still works."""
    gguf: Any
    model: Any
    tokenizer: Any
    template: ChatTemplate | None
    template_error: str = ""


def load(paths_or_gguf: Any, progress: Callable[[int, int], None] | None = None,
         weights: str = "auto") -> Engine:
    """Open a model: ``paths_or_gguf`` is anything :func:`pyengine.gguf.open_gguf` takes (paths,
    byte sources, a list for a split model) or an opened ``GGUFFile``.

    ``progress(done_tensors, total_tensors)`` is called while the weights are read; ``weights`` is
    passed to :func:`pyengine.model.load_model` (one of ``weights.budget.CHOICES``).
    The tokenizer and template are read first, so a bad vocab fails before the slow part. Files
    opened here are closed once the weights are in memory (``engine.gguf`` keeps its metadata and
    tensor table), unless the model reads from them as it runs (gemma4's per-layer embeddings).
    Raises GGUFError, TokenizerError, ModelError.
    """
    from pyengine.model.load import load_model

    gguf, owned = _open(paths_or_gguf)
    try:
        tokenizer, template, template_error = text_parts(gguf)
        report = None if progress is None else (lambda done, total, *_bytes: progress(done, total))
        model = None
        model = load_model(gguf, progress=report, weights=weights)
    finally:
        if owned and not getattr(model, "reads_file", False):
            gguf.close()
    return Engine(gguf, model, tokenizer, template, template_error)


def text_parts(gguf: Any) -> tuple[Any, ChatTemplate | None, str]:
    """A GGUF's tokenizer, chat template (None when it cannot be used) and why not: everything of a model
    but its weights. Raises TokenizerError."""
    tokenizer = _tokenizer(gguf)
    try:
        template = ChatTemplate.from_metadata(gguf.metadata, _token_text(tokenizer, tokenizer.bos_id),
                                              _token_text(tokenizer, tokenizer.eos_id),
                                              tokenizer.add_bos, tokenizer.add_eos)
    except TemplateError as e:
        return tokenizer, None, str(e)
    return tokenizer, template, ""


def load_tokenizer(paths_or_gguf: Any):
    """Only the tokenizer of a GGUF (what ``tokenize`` needs): no weights are read."""
    gguf, owned = _open(paths_or_gguf)
    try:
        return _tokenizer(gguf)
    finally:
        if owned:
            gguf.close()


def _tokenizer(gguf: Any):
    from pyengine.text.tokenizer import Tokenizer
    return Tokenizer.from_metadata(gguf.metadata)


def _open(paths_or_gguf: Any) -> tuple[Any, bool]:
    """(the GGUFFile, whether it was opened here)."""
    from pyengine.gguf import GGUFFile, open_gguf
    if isinstance(paths_or_gguf, GGUFFile):
        return paths_or_gguf, False
    return open_gguf(paths_or_gguf), True


def _token_text(tokenizer: Any, tid: int | None) -> str:
    return tokenizer.tokens[tid] if tid is not None else ""

