"""The one family of errors pyengine raises for bad input.

Every message is meant for a person: it names the file, byte offset, key or
tensor at fault. The CLI prints ``error: <message>`` and exits 1; the browser
worker posts the message to the page. Anything *not* derived from
:class:`PyEngineError` is a bug in pyengine.
"""

import reprlib


class PyEngineError(Exception):
    """Base of every error caused by the user's input (files, prompts, options)."""


class GGUFError(PyEngineError):
    """A GGUF file (or a split set) is malformed, truncated, hostile or unsupported."""


class ModelError(PyEngineError):
    """The model cannot be built: unsupported architecture, missing key or tensor, bad shape."""


_SHORT = reprlib.Repr()   # a stranger's value in a message: long strings and lists cut
_SHORT.maxstring = _SHORT.maxother = 200


class UnsupportedArchitectureError(ModelError):
    """``general.architecture`` names one pyengine does not run. The file is still a GGUF: its
    metadata and tensors can be inspected. ``arch`` is the value found, ``supported`` the ones run."""

    def __init__(self, arch: object, supported: tuple[str, ...]):
        self.arch, self.supported = arch, tuple(supported)
        super().__init__(f"unsupported architecture {_SHORT.repr(arch)} (general.architecture); "
                         f"supported: {', '.join(self.supported)}")


class TokenizerError(PyEngineError):
    """The tokenizer in the GGUF is unsupported or inconsistent."""


class TemplateError(PyEngineError):
    """A chat template failed to render."""
