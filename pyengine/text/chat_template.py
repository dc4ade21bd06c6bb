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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyengine.errors import TemplateError
from pyengine.text.builtin_templates import ARCH_BUILTIN, BUILTIN_BY_NAME, DEFAULT_BUILTIN, Builtin, detect_builtin
from pyengine.text.jinja_sandbox import check_template, jinja_available, render_jinja

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
                      add_eos: bool = False, use_jinja: bool | None = None) -> ChatTemplate:
        """Choose the template for a GGUF as llama.cpp does.

        ``tokenizer.chat_template`` if present (rendered by Jinja; if it only names a built-in
        format, or jinja2 is missing / ``use_jinja`` is False, the built-in its text looks like),
        else the built-in for ``general.architecture`` (:data:`ARCH_BUILTIN`), else chatml.
        The token texts and add flags are the tokenizer's (see :func:`pyengine.generation.load`).
        A Jinja template is compiled here, so a load finds what is wrong with it. Raises TemplateError
        when the text does not parse, is too long, or matches no built-in and Jinja cannot be used.
        """
        source = metadata.get("tokenizer.chat_template")
        if use_jinja is None:
            use_jinja = jinja_available()
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
        if source is not None:
            check_template(source)
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
