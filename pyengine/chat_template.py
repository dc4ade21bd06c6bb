"""Chat templates: turn a list of messages into the prompt text the model was trained on.

Two kinds of template, chosen as llama.cpp chooses them:

* the GGUF's own ``tokenizer.chat_template``, a Jinja template written for
  Hugging Face transformers, rendered here as transformers renders it
  (``apply_chat_template``: an immutable sandbox, ``trim_blocks``,
  ``lstrip_blocks``, the ``loopcontrols`` extension, ``raise_exception``,
  ``strftime_now`` and a ``tojson`` filter);
* a built-in format from :data:`BUILTIN_TEMPLATES`, written in Python as
  llama.cpp's ``llm_chat_apply_template`` (src/llama-chat.cpp) writes it. It is
  used when the GGUF has no template (Gemma 3 270M has none: the architecture
  picks one, chatml by default), when the template is only a format's name, and
  when jinja2 is not installed (the template's text picks one by its markers, as
  ``llm_chat_detect_template`` does).

BOS is never doubled: when the tokenizer adds BOS itself, a rendered text that
starts with the BOS token's text loses it (and a trailing EOS likewise when the
tokenizer adds EOS), as llama.cpp's ``common_chat_template_direct_apply`` does.
The text is then tokenized with ``encode(text, add_special=True, parse_special=True)``.

Templates come from strangers, so rendering is bounded: the sandbox refuses
unsafe attributes and mutation; on top of it this module caps the size of
``*``, ``**``, ``%`` and ``+`` results and of integer arguments to calls and
filters, caps the number of template lines executed, the wall time and the
size of every string and of the output. Every failure is a
:class:`~pyengine.errors.TemplateError` with the reason.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial, wraps
from typing import Any, Callable

from pyengine.errors import TemplateError

MAX_TEXT = 1_000_000        # chars: the rendered prompt, and any string or list a template builds
MAX_INT_ARG = 100_000       # largest integer a template may pass to a call or filter (widths, counts)
MAX_STEPS = 2_000_000       # template source lines executed per render
MAX_SECONDS = 10.0          # wall time per render
MAX_DEPTH = 40              # template frames (the template, its macros and call blocks) active at once


# ----------------------------------------------------------------------------
# messages

ROLES = ("system", "user", "assistant", "tool")   # the roles a conversation may hold (as llama.cpp's server)


def check_messages(messages: Any) -> list[dict]:
    """Validate a conversation: a list of ``{"role": str, "content": str, ...}`` dicts.

    Returns the list unchanged. Raises TemplateError naming the first bad message.
    """
    if not isinstance(messages, list):
        raise TemplateError(f"messages must be a list of {{role, content}} objects, not {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise TemplateError(f"message {i} must be an object with string 'role' and 'content': {m!r:.80}")
        if m["role"] not in ROLES:
            raise TemplateError(f"message {i}: role must be one of {', '.join(ROLES)}, got {m['role']!r:.40}")
    return messages


# ----------------------------------------------------------------------------
# built-in formats (llama.cpp src/llama-chat.cpp, llm_chat_apply_template)

def _trim(s: str) -> str:
    """C ``isspace`` trim, as llama-chat.cpp's ``trim`` (ASCII whitespace only)."""
    return s.strip(" \t\n\v\f\r")


def _turns(turn: str, prompt: str, msgs: list[dict], add_ass: bool, trim: bool = False) -> str:
    """Formats with one fixed pattern per message: ``turn`` with {role} and {content}, then ``prompt``
    (the assistant's opening) when ``add_ass``. ``trim``: the content is trimmed first."""
    out = [turn.format(role=m["role"], content=_trim(m["content"]) if trim else m["content"]) for m in msgs]
    return "".join(out) + (prompt if add_ass else "")


def _gemma(msgs: list[dict], add_ass: bool) -> str:
    """Gemma turns; system text joins the next user turn; "assistant" is "model"."""
    out, system = [], ""
    for m in msgs:
        if m["role"] == "system":
            system += _trim(m["content"])
            continue
        role = "model" if m["role"] == "assistant" else m["role"]
        out.append(f"<start_of_turn>{role}\n")
        if system and role != "model":
            out.append(system + "\n\n")
            system = ""
        out.append(_trim(m["content"]) + "<end_of_turn>\n")
    return "".join(out) + ("<start_of_turn>model\n" if add_ass else "")


def _llama2(msgs: list[dict], add_ass: bool, system: bool = True, bos_inside: bool = False,
            strip: bool = False) -> str:
    """``[INST] ... [/INST]answer</s>``; variants: <<SYS>> block, ``<s>`` between turns, stripped text.
    llama.cpp adds no generation prompt for this format (``add_ass`` is unused)."""
    out, inside = ["[INST] "], True
    for m in msgs:
        content = _trim(m["content"]) if strip else m["content"]
        if not inside:
            out.append("<s>[INST] " if bos_inside else "[INST] ")
            inside = True
        if m["role"] == "system":
            out.append(f"<<SYS>>\n{content}\n<</SYS>>\n\n" if system else content + "\n")
        elif m["role"] == "user":
            out.append(content + " [/INST]")
        else:
            out.append(content + "</s>")
            inside = False
    return "".join(out)


@dataclass(frozen=True)
class Builtin:
    name: str                           # llama.cpp's name for the format (llm_chat_template_from_str)
    markers: tuple[str, ...]            # all must occur in a Jinja template's text to pick this format
    render: Callable[[list[dict], bool], str]


# In llama.cpp's detection order: the first row whose markers all occur wins.
BUILTIN_TEMPLATES: tuple[Builtin, ...] = (
    Builtin("phi4", ("<|im_start|>", "<|im_sep|>"),
            partial(_turns, "<|im_start|>{role}<|im_sep|>{content}<|im_end|>", "<|im_start|>assistant<|im_sep|>")),
    Builtin("chatml", ("<|im_start|>",),
            partial(_turns, "<|im_start|>{role}\n{content}<|im_end|>\n", "<|im_start|>assistant\n")),
    Builtin("llama2-sys-strip", ("[INST]", "content.strip()"), partial(_llama2, strip=True)),
    Builtin("llama2-sys-bos", ("[INST]", "bos_token + '[INST]"), partial(_llama2, bos_inside=True)),
    Builtin("llama2-sys", ("[INST]", "<<SYS>>"), _llama2),
    Builtin("llama2", ("[INST]",), partial(_llama2, system=False)),
    Builtin("phi3", ("<|assistant|>", "<|end|>"),
            partial(_turns, "<|{role}|>\n{content}<|end|>\n", "<|assistant|>\n")),
    Builtin("gemma", ("<start_of_turn>",), _gemma),
    Builtin("llama3", ("<|start_header_id|>", "<|end_header_id|>"),
            partial(_turns, "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>",
                    "<|start_header_id|>assistant<|end_header_id|>\n\n", trim=True)),
)
BUILTIN_BY_NAME = {b.name: b for b in BUILTIN_TEMPLATES}

# general.architecture -> built-in format, for a GGUF without a template; else DEFAULT_BUILTIN.
ARCH_BUILTIN = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma", "phi3": "phi3"}
DEFAULT_BUILTIN = "chatml"


def detect_builtin(source: str) -> Builtin | None:
    """The built-in format a template's text names or looks like (llama.cpp ``llm_chat_detect_template``)."""
    if source in BUILTIN_BY_NAME:
        return BUILTIN_BY_NAME[source]
    for b in BUILTIN_TEMPLATES:
        if all(m in source for m in b.markers):
            return b
    return None


# ----------------------------------------------------------------------------
# the Jinja sandbox, bounded

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


# ----------------------------------------------------------------------------
# the template a model uses

@dataclass
class ChatTemplate:
    """How one model's conversations become prompt text.

    ``source`` is the Jinja text (None for a built-in), ``builtin`` the built-in format (None for
    Jinja). ``bos_token``/``eos_token`` are the token texts templates see; ``add_bos``/``add_eos``
    say whether the tokenizer adds them itself, so :meth:`render` strips them from the text's ends.
    """
    source: str | None
    builtin: Builtin | None
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False
    add_eos: bool = False

    @property
    def name(self) -> str:
        return self.builtin.name if self.builtin else "jinja"

    @classmethod
    def from_metadata(cls, metadata: dict, bos_token: str = "", eos_token: str = "", add_bos: bool = False,
                      add_eos: bool = False, use_jinja: bool | None = None) -> "ChatTemplate":
        """Choose the template for a GGUF as llama.cpp does.

        ``tokenizer.chat_template`` if present (rendered by Jinja; if it only names a built-in
        format, or jinja2 is missing / ``use_jinja`` is False, the built-in its text looks like),
        else the built-in for ``general.architecture`` (:data:`ARCH_BUILTIN`), else chatml.
        The token texts and add flags are the tokenizer's (see :func:`pyengine.generate.load`).
        Raises TemplateError when the text matches no built-in and Jinja cannot be used.
        """
        source = metadata.get("tokenizer.chat_template")
        if use_jinja is None:
            use_jinja = _make_environment() is not None
        builtin = None
        if not isinstance(source, str) or not source.strip():
            source = None
            builtin = BUILTIN_BY_NAME[ARCH_BUILTIN.get(metadata.get("general.architecture"), DEFAULT_BUILTIN)]
        elif source in BUILTIN_BY_NAME or not use_jinja:
            builtin = detect_builtin(source)
            if builtin is None:
                raise TemplateError("this model's chat template needs jinja2 (pip install jinja2): "
                                    "it matches no built-in format")
            source = None
        return cls(source, builtin, bos_token, eos_token, add_bos, add_eos)

    def render(self, messages: list[dict], add_generation_prompt: bool = True, **extra: Any) -> str:
        """The prompt text for ``messages`` (a list of ``{"role", "content"}``), ending with the
        assistant's opening when ``add_generation_prompt``. A leading BOS text (trailing EOS
        text) is removed when the tokenizer adds one. Raises TemplateError."""
        return "".join(text for text, _ in self.render_parts(messages, add_generation_prompt, **extra))

    def render_parts(self, messages: list[dict], add_generation_prompt: bool = True,
                     typed: re.Pattern | None = None, **extra: Any) -> list[tuple[str, bool]]:
        """:meth:`render`'s text cut into ``(text, is_typed)`` parts.

        ``typed`` matches special-token texts (``"<|im_end|>"``); where one occurs in a message's
        content it comes back as its own part flagged True, to be tokenized as plain text: a user
        who types ``<|im_end|>`` must not end their turn. Everything else is the template's text
        (flag False), whose special tokens are parsed. The content is marked before rendering (a
        placeholder per occurrence), so what the template does to it (trim, slicing) is kept.
        """
        check_messages(messages)
        found: list[str] = []
        if typed is not None:
            messages = [_mark_typed(m, typed, found) for m in messages]
        if self.builtin is not None:
            text = self.builtin.render(messages, add_generation_prompt)
        else:
            context = dict(extra, messages=messages, add_generation_prompt=add_generation_prompt,
                           bos_token=self.bos_token, eos_token=self.eos_token)
            text = render_jinja(self.source, context)
        if self.add_bos and self.bos_token and text.startswith(self.bos_token):
            text = text[len(self.bos_token):]
        if self.add_eos and self.eos_token and text.endswith(self.eos_token):
            text = text[:-len(self.eos_token)]
        return _split_marks(text, found)


# A special-token text typed in a message becomes MARK + its index in `found` + END while the
# template renders (two Unicode noncharacters: no text, tokenizer or template makes them).
_MARK, _END = "\U0010FFFE", "\U0010FFFF"
_MARKED = re.compile(_MARK + r"(\d+)" + _END)


def _mark_typed(message: dict, typed: re.Pattern, found: list[str]) -> dict:
    def mark(m: re.Match) -> str:
        found.append(m.group())
        return f"{_MARK}{len(found) - 1}{_END}"

    content = message["content"].replace(_MARK, "\ufffd").replace(_END, "\ufffd")
    return {**message, "content": typed.sub(mark, content)}


def _split_marks(text: str, found: list[str]) -> list[tuple[str, bool]]:
    parts, pos = [], 0
    for m in _MARKED.finditer(text) if found else ():
        parts += [(text[pos:m.start()], False)] if m.start() > pos else []
        parts.append((found[int(m.group(1))], True))
        pos = m.end()
    return parts + ([(text[pos:], False)] if pos < len(text) or not parts else [])
