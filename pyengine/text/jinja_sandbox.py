"""The Jinja sandbox for chat templates from strangers, bounded in steps, time, sizes and depth.

A template is rendered as transformers renders it (``apply_chat_template``: an
immutable sandbox, ``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols``
extension, ``raise_exception``, ``strftime_now`` and a ``tojson`` filter). On
top of the sandbox, which refuses unsafe attributes and mutation, this module
caps the size of ``*``, ``**``, ``%`` and ``+`` results and of integer
arguments to calls and filters, the number of template lines executed, the
wall time, and the size of every string and of the output. Every failure is a
:class:`~pyengine.errors.TemplateError` with the reason.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache, wraps
from typing import Any

from pyengine.errors import TemplateError

MAX_TEXT = 1_000_000        # chars: the rendered prompt, and any string or list a template builds
MAX_INT_ARG = 100_000       # largest integer a template may pass to a call or filter (widths, counts)
MAX_STEPS = 2_000_000       # template source lines executed per render
MAX_SECONDS = 10.0          # wall time per render
MAX_DEPTH = 40              # template frames (the template, its macros and call blocks) active at once

_PRINTF_SPEC = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")
_FORMAT_SPEC = re.compile(r"\{[^{}]*?:([^{}]*)\}")


def _check_int(x: Any, what: str) -> None:
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > MAX_INT_ARG:
        raise TemplateError(f"chat template: {what} {x} is larger than {MAX_INT_ARG}")


def _check_size(x: Any, what: str) -> Any:
    if isinstance(x, (str, list, tuple)) and len(x) > MAX_TEXT:
        raise TemplateError(f"chat template: {what} gives more than {MAX_TEXT} chars or items")
    return x


def _check_format_string(fmt: str, printf: bool) -> None:
    """Refuse widths/precisions in a %-format or str.format string that would build a huge string."""
    specs = _PRINTF_SPEC.findall(fmt) if printf else [(s,) for s in _FORMAT_SPEC.findall(fmt)]
    for spec in specs:
        for n in re.findall(r"\d+", "".join(spec)):
            _check_int(int(n), "format width")


def _check_replace(s: Any, old: Any = "", new: Any = "", *_: Any) -> None:
    """Refuse a replace whose result would pass MAX_TEXT (it is built before any other check)."""
    if isinstance(s, str) and isinstance(old, str) and isinstance(new, str) and old and \
            len(s) + s.count(old) * (len(new) - len(old)) > MAX_TEXT:
        raise TemplateError(f"chat template: replace gives more than {MAX_TEXT} chars")


def _check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``*``, ``**``, ``%``, ``+`` whose result would be huge, before it is built."""
    seqs = (str, list, tuple)
    if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 \
            and abs(left) > 1 and right * abs(left).bit_length() > 4096:
        raise TemplateError(f"chat template: {left} ** {right} is too large")
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, seqs) and isinstance(n, int) and len(seq) * n > MAX_TEXT:
                raise TemplateError(f"chat template: '*' gives more than {MAX_TEXT} chars or items")
    if operator == "%" and isinstance(left, str):
        _check_format_string(left, printf=True)
        for a in right if isinstance(right, tuple) else (right,):
            _check_int(a, "format argument")
    if operator == "+" and isinstance(left, seqs) and isinstance(right, seqs) and len(left) + len(right) > MAX_TEXT:
        raise TemplateError(f"chat template: '+' gives more than {MAX_TEXT} chars or items")


def _guard_filter(f: Callable) -> Callable:
    """Wrap a Jinja filter so its integer arguments (after the filtered value) are capped."""
    skip = 2 if getattr(f, "jinja_pass_arg", None) else 1    # (context/env,) value, args...

    @wraps(f)
    def guarded(*args, **kwargs):
        for a in list(args[skip:]) + list(kwargs.values()):
            _check_int(a, f"argument of filter {f.__name__}")
        if f.__name__ == "do_format" and isinstance(args[skip - 1], str):
            _check_format_string(args[skip - 1], printf=True)
        if f.__name__ == "do_replace":
            _check_replace(*args[skip - 1:skip + 2])
        return _check_size(f(*args, **kwargs), f"filter {f.__name__}")
    return guarded


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
            sort_keys: bool = False) -> str:
    """transformers' ``tojson`` filter: plain ``json.dumps`` (no HTML escaping, non-ASCII kept)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=1)
def _make_environment():
    """The Jinja environment transformers uses, with this module's bounds added (None without jinja2)."""
    try:
        from jinja2 import nodes
        from jinja2.ext import Extension
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        return None

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers' assistant mask): renders its body."""
        tags = {"generation"}

        def parse(self, parser) -> list[nodes.Node]:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**", "%", "+"])

        def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
            _check_binop(operator, left, right)
            return _check_size(super().call_binop(context, operator, left, right), f"'{operator}'")

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's signature)
            for a in list(args) + list(kwargs.values()):
                _check_int(a, f"argument of {getattr(__obj, '__name__', 'call')}")
            if isinstance(getattr(__obj, "__self__", None), str) and __obj.__name__ == "replace":
                _check_replace(__obj.__self__, *args)
            return _check_size(super().call(__context, __obj, *args, **kwargs), "a call")

        def getattr(self, obj: Any, attribute: str) -> Any:     # every `a.b` (a namespace's value, too)
            return _check_size(super().getattr(obj, attribute), f"'.{attribute}'")

        def getitem(self, obj: Any, argument: Any) -> Any:     # every `a[b]`
            return _check_size(super().getitem(obj, argument), "'[]'")

        def wrap_str_format(self, value: Any):
            wrapped = super().wrap_str_format(value)    # str.format, sandboxed by jinja
            if wrapped is not None:
                _check_format_string(value.__self__, printf=False)
            return wrapped

    env = BoundedEnvironment(trim_blocks=True, lstrip_blocks=True,
                             extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = _tojson
    env.filters = {name: _guard_filter(f) for name, f in env.filters.items()}
    del env.globals["lipsum"]                     # paragraphs of filler on demand: no template needs it
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


@lru_cache(maxsize=8)
def _compile(source: str):
    """A template compiled once per source text. Raises TemplateError (jinja2 missing, bad syntax)."""
    env = _make_environment()
    if env is None:
        raise TemplateError("this model's chat template needs jinja2: pip install jinja2")
    try:
        return env.from_string(source)
    except Exception as e:  # TemplateSyntaxError, or anything else a hostile text provokes
        raise TemplateError(f"chat template does not parse: {e} (line {getattr(e, 'lineno', '?')})") from None


class _Bounds:
    """A ``sys.settrace`` hook that bounds a template's lines executed, wall time, string sizes and
    macro recursion.

    Only frames of compiled templates (``co_filename == "<template>"``) are traced line by line, so
    jinja's own code and the filters run at full speed. Raising from the hook raises in the template.
    Recursion is bounded well before Python's own limit: under Pyodide a deep recursion overflows
    the JavaScript stack first, a fatal error that no ``except`` catches.
    """

    def __init__(self, max_steps: int, max_seconds: float):
        self.steps, self.max_steps = 0, max_steps
        self.deadline, self.max_seconds = time.monotonic() + max_seconds, max_seconds
        self.depth = 0

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename != "<template>":
            return None
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise TemplateError(f"chat template: macros nested more than {MAX_DEPTH} deep (runaway recursion?)")
        return self.line

    def line(self, frame, event, arg):
        if event == "return":
            self.depth -= 1
        elif event == "line":
            self.steps += 1
            if self.steps > self.max_steps:
                raise TemplateError(f"chat template: more than {self.max_steps} steps (a runaway loop?)")
            if self.steps % 256 == 0 and time.monotonic() > self.deadline:
                raise TemplateError(f"chat template: rendering took more than {self.max_seconds:g} s")
            for v in frame.f_locals.values():
                if isinstance(v, str) and len(v) > MAX_TEXT:
                    raise TemplateError(f"chat template: builds a string of more than {MAX_TEXT} chars")
        return self.line


def render_jinja(source: str, context: dict, max_steps: int = MAX_STEPS, max_seconds: float = MAX_SECONDS) -> str:
    """Render a Jinja chat template in the bounded sandbox.

    ``context`` holds the template's variables (``messages``, ``add_generation_prompt``,
    ``bos_token``, ``eos_token``, ...). Raises TemplateError on any failure: jinja2 missing, a
    syntax error, ``raise_exception``, an undefined operation, a sandbox violation, a bound.
    """
    template = _compile(source)
    bounds, previous = _Bounds(max_steps, max_seconds), sys.gettrace()
    out: list[str] = []
    n = 0
    sys.settrace(bounds)
    try:
        for piece in template.generate(**context):
            n += len(piece)
            if n > MAX_TEXT:
                raise TemplateError(f"chat template: output longer than {MAX_TEXT} chars")
            out.append(piece)
    except TemplateError:
        raise
    except RecursionError:  # CPython's limit, reached through jinja internals rather than macros
        raise TemplateError("chat template: recursion too deep") from None
    except Exception as e:  # jinja errors, SecurityError, TypeError, ... from a stranger's template
        raise TemplateError(f"chat template failed: {type(e).__name__}: {e}") from None
    finally:
        sys.settrace(previous)
    return "".join(out)



def jinja_available() -> bool:
    """True when jinja2 can be imported (the GGUF's own template can be rendered)."""
    return _make_environment() is not None
