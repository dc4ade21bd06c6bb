"""The built-in chat formats: llama.cpp's ``llm_chat_apply_template`` (src/llama-chat.cpp) in Python.

One row of :data:`BUILTIN_TEMPLATES` per format, in llama.cpp's detection
order; a GGUF without a Jinja template gets the row its architecture names
(:data:`ARCH_BUILTIN`), else chatml.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial


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

