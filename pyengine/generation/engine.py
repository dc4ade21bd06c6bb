"""Opening a model: the GGUF, its tokenizer, its chat template and its weights, in that order.

:func:`load` is the one place the CLI and the browser worker get a model from:
:func:`check` first checks all that can be checked before the weights are read
(the architecture, the tokenizer and template, the tensors), so a bad file fails
before the slow part; the browser worker calls it on its own first, to keep the
model loaded before until the new one has passed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyengine.errors import ModelError, TemplateError
from pyengine.text.chat_template import ChatTemplate


def no_wait() -> float:
    """The wait clock of a model held whole by one worker: it never waits for another."""
    return 0.0


@dataclass
class Engine:
    """What :func:`load` builds: the opened GGUF, its model, tokenizer and chat template.
    ``template`` is None when the GGUF's template cannot be used (``template_error`` says why);
    raw completion still works. ``wait_seconds()``: the seconds the model has waited so far for the other
    workers holding parts of it (a split model's, :mod:`pyengine.parallel`; ``no_wait`` for a whole one),
    which a reply's stats count."""
    gguf: Any
    model: Any
    tokenizer: Any
    template: ChatTemplate | None = None
    template_error: str = ""
    wait_seconds: Callable[[], float] = no_wait


@dataclass
class Checked:
    """A model opened and checked, its weights not read yet (:func:`check`): the GGUF, its
    :class:`pyengine.model.ModelConfig`, tokenizer and chat template (None when it cannot be used,
    ``template_error`` says why), and whether the GGUF was opened here (then closed once the weights are
    read)."""
    gguf: Any
    config: Any
    tokenizer: Any
    template: ChatTemplate | None
    template_error: str = ""
    owned: bool = False


def check(paths_or_gguf: Any) -> Checked:
    """Open a model and check everything that can be checked before its weights are read: the
    architecture and its keys, the tokenizer and chat template, every tensor's shape and type (each
    once). ``paths_or_gguf`` is anything :func:`pyengine.gguf.open_gguf` takes (paths, byte sources, a
    list for a split model) or an opened ``GGUFFile``. Raises GGUFError, UnsupportedArchitectureError,
    ModelError, TokenizerError."""
    from pyengine.gguf.quants import dequantizer
    from pyengine.model.config import ModelConfig
    from pyengine.model.load import check_tensors

    gguf, owned = _open(paths_or_gguf)
    try:
        config = ModelConfig.from_metadata(gguf.metadata, gguf.tensors)
        tokenizer, template, template_error = text_parts(gguf)
        for name in check_tensors(gguf, config):                          # shapes, then types
            dequantizer(gguf.tensors[name].type, name)
    except BaseException as e:
        if owned:
            gguf.close()
        if type(e) is ModelError:                                         # the file it is about, named
            raise ModelError(f"{gguf.name}: {e}") from None
        raise
    return Checked(gguf, config, tokenizer, template, template_error, owned)


def load(source: Any, progress: Callable | None = None, weights: str = "auto", placement: Any = None) -> Engine:
    """Open a model and read its weights: ``source`` is what :func:`check` takes, or what it gave (the
    checks are then not done again). The one way the CLI and the browser worker open a model.

    ``progress(done_tensors, total_tensors, done_bytes, total_bytes)`` is called while the weights are
    read; ``weights`` is one of ``weights.budget.CHOICES``; ``placement`` (a
    :class:`pyengine.model.shard.Placement`: shard, forms, communicator) loads one worker's part of a model
    split over several (:func:`pyengine.parallel.driver.plan_load`), as :func:`pyengine.model.load_model`
    takes it. Files opened here are closed once the weights are in
    memory (``engine.gguf`` keeps its metadata and tensor table), unless the model reads from them as it
    runs (gemma4's per-layer embeddings). Raises GGUFError, TokenizerError, ModelError.
    """
    from pyengine.model.load import load_model

    checked = source if isinstance(source, Checked) else check(source)
    loaded = None
    try:
        loaded = load_model(checked.gguf, progress=progress, weights=weights, placement=placement)
    finally:
        if checked.owned and not getattr(loaded, "reads_file", False):
            checked.gguf.close()
    return Engine(checked.gguf, loaded, checked.tokenizer, checked.template, checked.template_error)


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
    return Tokenizer(gguf.metadata)


def _open(paths_or_gguf: Any) -> tuple[Any, bool]:
    """(the GGUFFile, whether it was opened here)."""
    from pyengine.gguf import GGUFFile, open_gguf
    if isinstance(paths_or_gguf, GGUFFile):
        return paths_or_gguf, False
    return open_gguf(paths_or_gguf), True


def _token_text(tokenizer: Any, tid: int | None) -> str:
    return tokenizer.tokens[tid] if tid is not None else ""

