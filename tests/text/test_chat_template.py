"""Chat templates: built-in formats against llama.cpp, choosing a template, Jinja rendering, BOS, bounds."""

from __future__ import annotations

import json
import os
import re

import pytest
from conftest import GOLDEN, ROOT

from pyengine.errors import TemplateError
from pyengine.text.builtin_templates import BUILTIN_BY_NAME, BUILTIN_TEMPLATES, detect_builtin
from pyengine.text.chat_template import ChatTemplate, check_messages
from pyengine.text.jinja_sandbox import render_jinja

CHAT = [
    {"role": "system", "content": "Be brief. "},
    {"role": "user", "content": " Hi "},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "2+2?"},
]

# SmolLM2-135M-Instruct's tokenizer.chat_template, verbatim.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


CHATS = {"sys-4": CHAT, "user-3": CHAT[1:], "sys-user": CHAT[:2], "sys-3": CHAT[:3]}


def reference(section: str):
    """llama.cpp's results in golden/reference.json (made by golden/make_reference_golden.py)."""
    return json.loads((GOLDEN / "reference.json").read_text(encoding="utf-8"))[section]


def builtin_key(name: str, add_ass: bool, chat_id: str) -> str:
    return f"{name}|{int(add_ass)}|{chat_id}"


# --- built-in formats -------------------------------------------------------------------------

def test_gemma_format_written_out():
    t = ChatTemplate(None, BUILTIN_BY_NAME["gemma"])
    assert t.render(CHAT) == ("<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                              "<start_of_turn>model\nHello!<end_of_turn>\n"
                              "<start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n")


def test_chatml_format_written_out():
    t = ChatTemplate(None, BUILTIN_BY_NAME["chatml"])
    assert t.render(CHAT[1:2], add_generation_prompt=False) == "<|im_start|>user\n Hi <|im_end|>\n"


@pytest.mark.parametrize("name", [b.name for b in BUILTIN_TEMPLATES])
@pytest.mark.parametrize("add_ass", [True, False])
@pytest.mark.parametrize("chat_id", list(CHATS))
def test_builtin_equals_llama_cpp(name, add_ass, chat_id):
    """``llama_chat_apply_template(name, chat, add_ass)``, llama.cpp's own rendering, as recorded."""
    want = reference("chat_builtin")[builtin_key(name, add_ass, chat_id)]
    assert ChatTemplate(None, BUILTIN_BY_NAME[name]).render(CHATS[chat_id], add_ass) == want


@pytest.mark.parametrize("text, name", [
    (SMOLLM2_TEMPLATE, "chatml"),
    ("{{ '<|im_start|>' + role + '<|im_sep|>' }}", "phi4"),
    ("{{ '[INST] ' + m['content'] + ' [/INST]' }}", "llama2"),
    ("{{ bos_token + '[INST] ' + m['content'] + ' [/INST]' }}", "llama2-sys-bos"),
    ("[INST] <<SYS>>\n{{ s }}\n<</SYS>>", "llama2-sys"),
    ("{{ bos_token + '[INST] ' + content.strip() }}", "llama2-sys-strip"),
    ("{{ '<|user|>' }}{{ '<|assistant|>' }}{{ '<|end|>' }}", "phi3"),
    ("{{ '<start_of_turn>' + role }}", "gemma"),
    ("<|start_header_id|>{{ role }}<|end_header_id|>", "llama3"),
    ("gemma", "gemma"),
    ("no markers here", None),
])
def test_detect_builtin_by_markers_and_names(text, name):
    found = detect_builtin(text)
    assert (found.name if found else None) == name


# --- choosing a model's template -------------------------------------------------------------

def test_no_template_gemma3_uses_gemma_llama_uses_chatml():
    assert ChatTemplate.from_metadata({"general.architecture": "gemma3"}).name == "gemma"
    assert ChatTemplate.from_metadata({"general.architecture": "llama"}).name == "chatml"
    blank = {"general.architecture": "qwen3", "tokenizer.chat_template": " "}
    assert ChatTemplate.from_metadata(blank).name == "chatml"


def test_jinja_template_is_rendered_by_jinja_unless_unavailable():
    md = {"general.architecture": "llama", "tokenizer.chat_template": SMOLLM2_TEMPLATE}
    jinja = ChatTemplate.from_metadata(md)
    assert jinja.name == "jinja"
    assert jinja.render([{"role": "user", "content": "Hi"}]) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert ChatTemplate.from_metadata(md, use_jinja=False).name == "chatml"
    with pytest.raises(TemplateError, match="needs jinja2"):
        ChatTemplate.from_metadata({"tokenizer.chat_template": "{{ x }}"}, use_jinja=False)
    assert ChatTemplate.from_metadata({"tokenizer.chat_template": "llama3"}).name == "llama3"


def test_bos_is_never_doubled():
    md = {"tokenizer.chat_template":
          "{{ bos_token }}{% for m in messages %}[{{ m.content }}]{% endfor %}{{ eos_token }}"}
    msgs = [{"role": "user", "content": "a"}]
    assert ChatTemplate.from_metadata(md, "<s>", "</s>", add_bos=True).render(msgs) == "[a]</s>"
    assert ChatTemplate.from_metadata(md, "<s>", "</s>", add_bos=False).render(msgs) == "<s>[a]</s>"
    assert ChatTemplate.from_metadata(md, "<s>", "</s>", add_bos=True, add_eos=True).render(msgs) == "[a]"


def test_special_text_typed_in_messages_comes_back_as_its_own_part():
    t = ChatTemplate(None, BUILTIN_BY_NAME["gemma"], "<bos>", "<eos>", add_bos=True)
    typed = re.compile("<start_of_turn>|<end_of_turn>|<bos>")
    msgs = [{"role": "user", "content": "<bos>Hi <end_of_turn> there<start_of_turn> "}]
    assert t.render_parts(msgs, typed=typed) == [
        ("<start_of_turn>user\n", False), ("<bos>", True), ("Hi ", False), ("<end_of_turn>", True),
        (" there", False), ("<start_of_turn>", True), ("<end_of_turn>\n<start_of_turn>model\n", False)]
    assert t.render(msgs) == "".join(p for p, _ in t.render_parts(msgs, typed=typed))   # trimmed the same
    assert t.render_parts(CHAT[1:2], typed=typed) == [(t.render(CHAT[1:2]), False)]
    jinja = ChatTemplate("{{ messages[0].content[2:] | upper }}", None)
    assert jinja.render_parts([{"role": "user", "content": "ab<bos>c\U0010FFFE"}], typed=typed) == [
        ("<bos>", True), ("C\ufffd", False)]


# --- Jinja as transformers renders it -------------------------------------------------------

def test_jinja_names_templates_use():
    src = ("{%- for m in messages -%}{% generation %}{{ m.content }}{% endgeneration %}"
           "{%- if loop.index == 1 %}{% break %}{% endif %}{% endfor %}\n"
           "{{ messages[1:] | tojson }}|{{ strftime_now('%Y') | length }}|{{ add_generation_prompt }}")
    out = render_jinja(src, {"messages": [{"role": "user", "content": "é"}, {"role": "x", "content": "ü"}],
                             "add_generation_prompt": True})
    assert out == 'é[{"role": "x", "content": "ü"}]|4|True'


def test_replace_still_works():
    assert render_jinja("{{ 'a-b'|replace('-', '+') }}{{ 'x-y'.replace('-', '') }}", {}) == "a+bxy"


# A template written here to touch what real ones use: system extraction, namespace, loop
# controls, whitespace control, trim/strip, tojson (non-ASCII, indent), the generation tag.
RICH_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system = 'default system' %}
{%- endif %}
<|sys|>{{ system }}<|end|>
{% set ns = namespace(turns=0, last='') %}
{% for m in messages %}
    {%- if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('bad role ' + m['role']) }}{% endif %}
    {%- if m['content'] == 'skip' %}{% continue %}{% endif %}
    {%- set ns.turns = ns.turns + 1 %}
<|{{ m.role }}|>
{% if m.role == 'assistant' %}{% generation %}{{ m.content.strip() }}{% endgeneration %}
{%- else %}{{ m.content }}{% endif %}
{{ '<|end|>' if not loop.last else '<|last|>' }}
    {%- if m['content'] == 'stop' %}{% break %}{% endif %}
{% endfor %}
turns={{ ns.turns }} meta={{ {'k': 'é', 'n': [1, 2]} | tojson(indent=1) }}
{% if add_generation_prompt %}<|assistant|>
{% endif %}{{ eos_token if not add_generation_prompt else '' }}"""


JINJA_CHATS = {"sys-4": CHAT, "user-3": CHAT[1:],
               "skip": CHAT[1:2] + [{"role": "user", "content": "skip"}] + CHAT[2:],
               "stop": CHAT[1:2] + [{"role": "user", "content": "stop"}] + CHAT[2:]}
JINJA_BAD_ROLE = CHAT[1:2] + [{"role": "tool", "content": "x"}]


@pytest.mark.parametrize("chat_id", list(JINJA_CHATS))
@pytest.mark.parametrize("add", [True, False])
def test_jinja_renders_as_llama_cpp_python(chat_id, add):
    """llama-cpp-python's ``Jinja2ChatFormatter(RICH_TEMPLATE, eos "</s>", bos "<s>")``, as recorded."""
    want = reference("chat_jinja")[builtin_key("rich", add, chat_id)]
    got = ChatTemplate(RICH_TEMPLATE, None, "<s>", "</s>").render(JINJA_CHATS[chat_id], add)
    assert got == want and "turns=" in got


def test_jinja_template_errors_where_llama_cpp_python_raises():
    raised = reference("chat_jinja_error")        # what the formatter raised on JINJA_BAD_ROLE
    assert raised["type"] == "ValueError" and re.search("bad role tool", raised["message"])
    with pytest.raises(TemplateError, match="bad role tool"):
        ChatTemplate(RICH_TEMPLATE, None, "<s>", "</s>").render(JINJA_BAD_ROLE)


def test_trim_and_lstrip_blocks():
    assert render_jinja("  {% if true %}\nA\n  {% endif %}\nB", {}) == "A\nB"


@pytest.mark.parametrize("src, match", [
    ("{{ raise_exception('no system role') }}", "chat template: no system role"),
    ("{% for %}", "does not parse"),
    ("{{ ''.__class__.__mro__ }}", "SecurityError"),
    ("{{ messages.append(1) }}", "SecurityError"),
    ("{{ 'x' * 10000000 }}", r"'\*' gives more than"),
    ("{{ 'x'.center(100000000) }}", "argument of center"),
    ("{{ 'x'|center(100000000) }}", "argument of filter"),
    ("{{ '%100000000s' % 'x' }}", "format width"),
    ("{{ '{:100000000}'.format(1) }}", "format width"),
    ("{{ 7 ** 100000 }}", "too large"),
    ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "nested more than 40 deep"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "gives more than"),
    ("{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     r"'\+' gives more than"),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "steps"),
    ("{{ undefined_thing.attr }}", "UndefinedError"),
    ("{% set s = 'a' * 999999 %}{{ s|replace('a', 'bbbbbbbbbb') }}", "replace gives more"),
    ("{% set s = 'a' * 999999 %}{{ s.replace('a', 'bbbbbbbbbb') }}", "replace gives more"),
    ("{{ lipsum(100000) }}", "UndefinedError"),
])
def test_hostile_or_broken_templates_raise_template_error(src, match):
    with pytest.raises(TemplateError, match=match):
        render_jinja(src, {"messages": []}, max_steps=20_000)


def test_macros_may_recurse_a_little():
    src = "{% macro f(n) %}{{ n }}{% if n > 0 %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(30) }}"
    assert render_jinja(src, {}) == "".join(str(n) for n in range(30, -1, -1))


def test_time_bound():
    with pytest.raises(TemplateError, match="took more than"):
        render_jinja("{% for i in range(5000) %}{% endfor %}", {}, max_seconds=0.0)


def test_render_errors_keep_tracing_state():
    import sys
    before = sys.gettrace()
    with pytest.raises(TemplateError):
        render_jinja("{{ raise_exception('x') }}", {})
    assert sys.gettrace() is before


def test_check_messages():
    assert check_messages(CHAT) is CHAT
    with pytest.raises(TemplateError, match="message 1"):
        check_messages([{"role": "user", "content": "a"}, {"role": "user"}])
    with pytest.raises(TemplateError, match="list"):
        check_messages({"role": "user", "content": "a"})
    with pytest.raises(TemplateError, match="message 1: role must be one of system, user, assistant, tool, got"):
        check_messages([{"role": "user", "content": "a"}, {"role": "wizard", "content": "b"}])
    assert check_messages([{"role": "tool", "content": "{}"}])[0]["role"] == "tool"


# --- the templates llama.cpp tests with ---------------------------------------------------------

TEMPLATES = ROOT / ".cache" / "vocab" / "templates"   # build_scripts/fetch_vocabs.py, from the pinned sdist


def llama_cpp_templates() -> list[str]:
    listing = TEMPLATES / "COMPLETE"
    return listing.read_text().split() if listing.is_file() else ["(not fetched)"]


def jinja2_render(source: str, messages: list[dict]) -> str:
    """A template as transformers renders it: Jinja2's immutable sandbox with trim and lstrip blocks, loop
    controls, ``raise_exception``, ``strftime_now`` and transformers' ``tojson`` (plain ``json.dumps``)."""
    from datetime import datetime

    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"],
                                        loader=jinja2.BaseLoader())
    env.filters["tojson"] = lambda x, ensure_ascii=False, indent=None, separators=None, sort_keys=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise ValueError(message)
    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.now().strftime(fmt))
    return env.from_string(source).render(messages=messages, add_generation_prompt=True, bos_token="<s>",
                                          eos_token="</s>")


@pytest.mark.parametrize("name", llama_cpp_templates())
def test_llama_cpps_chat_templates_render_as_jinja2_renders_them(name):
    """Each of the 70 templates of llama.cpp's models/templates (Gemma 4, Qwen3.5, LFM2.5, Granite, SmolLM3,
    DeepSeek, gpt-oss...) gives Jinja2's own text for a chat with and without a system prompt, or a
    TemplateError where Jinja2 raises; a template Jinja2 cannot parse (transformers' {% generation %} tag)
    renders."""
    import jinja2
    if name == "(not fetched)":
        if os.environ.get("CI") == "true":
            pytest.fail(f"{TEMPLATES} is missing: run build_scripts/fetch_vocabs.py")
        pytest.skip("templates not fetched (python build_scripts/fetch_vocabs.py)")
    source = (TEMPLATES / name).read_text(encoding="utf-8")
    for messages in (CHAT, CHAT[1:]):
        ours = ChatTemplate(source, None, "<s>", "</s>")
        try:
            want = jinja2_render(source, messages)
        except jinja2.TemplateSyntaxError:
            assert ours.render(messages)
            continue
        except Exception:  # noqa: BLE001 (what the template raised, as Jinja2 raises it)
            with pytest.raises(TemplateError):
                ours.render(messages)
            continue
        assert ours.render(messages) == want


def test_str_methods_run_inside_loops():
    """Jinja passes its loop's variables to calls made in a loop (``_loop_vars``): the bounds on str
    methods take the template's own arguments only (NVIDIA Nemotron's template calls replace in one)."""
    src = ("{% set ns = namespace(a='') %}{% for m in messages %}{% set ns.a = ns.a + m.content.replace('a', 'b')"
           ".expandtabs(2).split('X')|join('-') %}{% endfor %}{{ ns.a }}")
    assert ChatTemplate(src, None, "<s>", "</s>").render([{"role": "user", "content": "a\tXa"}]) == "b -b"
