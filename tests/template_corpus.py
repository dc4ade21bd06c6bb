"""Hostile chat templates, each with the error it must give, and random templates for fuzzing.

``HOSTILE`` lists ``(case id, template source, regex the TemplateError must match)``: the cases of
issue 12 (a comparison of large nested lists, ``~``, join, format, ``%``, expandtabs, tojson's indent)
and the other ways a template could run long in one C call or hold much memory. ``random_template(rng)``
builds a template tree from the operations a template can chain (literals, ``*``, ``+``, ``~``,
comparisons, filters, str methods, slices, loops that feed a namespace back into itself).
This module runs under CPython and under Pyodide (tests/node/test_node_pyodide.py imports it there).
"""

from __future__ import annotations

import random

S = "{% set s = 'x' * 999990 %}"                        # a string just under the weight cap
NEST = "{% set ns = namespace(x=1) %}{% for i in range(60) %}{% set ns.x = [ns.x] %}{% endfor %}"

HOSTILE = [
    ("nested-compare", "{% set A = range(1000)|list %}{% set B = range(1000)|list %}"
                       "{{ [[[A]*1000]*1000]*100 == [[[B]*1000]*1000]*100 }}", r"'\*' gives more than"),
    ("literal-doubling", "{% set ns = namespace(x=[1]) %}{% for i in range(60) %}{% set ns.x = [ns.x, ns.x] %}"
                         "{% endfor %}{{ ns.x == ns.x[:] }}", "a list gives more than"),
    ("dict-doubling", "{% set ns = namespace(x=1) %}{% for i in range(60) %}{% set ns.x = {'a': ns.x, 'b': ns.x} %}"
                      "{% endfor %}{{ ns.x }}", "a dict gives more than"),
    ("deep-nesting", "{% set ns = namespace(x=1) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                     "{{ ns.x }}", "nests containers more than 64 deep"),
    ("tilde", S + "{{ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s ~ s }}",
     "'~' gives more than"),
    ("tilde-loop", "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "'~' gives more than"),
    ("join-filter", S + "{{ (range(3)|list)|join(s) }}", "filter join gives more than"),
    ("join-method", S + "{{ s[:600000].join(['a', 'b', 'c']) }}", "str.join gives more than"),
    ("join-generator", S + "{{ [1, 2, 3]|map('string')|join(s) }}", "filter join gives more than"),
    ("str-format", S + "{{ ('{0}' * 100).format(s) }}", "str.format gives more than"),
    ("str-format-width", "{{ '{:100000000}'.format(1) }}", "format width"),
    ("str-format-nested-width", "{{ '{0:{1}}'.format('a', '>99999999') }}", "format width"),
    ("format-map", S + "{{ '{a}{a}{a}'.format_map({'a': s}) }}", "str.format gives more than"),
    ("percent", S + "{{ ('%(a)s' * 10) % {'a': s} }}", "'%' gives more than"),
    ("percent-width", "{{ '%100000000s' % 'x' }}", "format width"),
    ("format-filter", S + "{{ '%s%s'|format(s, s) }}", "'%' gives more than"),
    ("expandtabs", "{% set s = '\t' * 999990 %}{{ s.expandtabs(100000) }}", "expandtabs gives more than"),
    ("tojson-indent", NEST + "{{ ([ns.x] * 1000)|tojson(indent=100000) }}", "filter tojson gives more than"),
    ("tojson-separators", "{{ (range(1000)|list)|tojson(separators=('x' * 99999, ':')) }}",
     "filter tojson gives more than"),
    ("indent", "{% set s = '\n' * 999990 %}{{ s|indent(100000, blank=True) }}", "filter indent gives more than"),
    ("indent-string", "{% set s = '\n' * 99990 %}{{ s|indent('y' * 99999, blank=True) }}",
     "filter indent gives more than"),
    ("str-times", "{{ 'x' * 100000000 }}", r"'\*' gives more than"),
    ("list-times", "{{ [1, 2, 3] * 10000000 }}", r"'\*' gives more than"),
    ("list-plus", "{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     r"'\+' gives more than"),
    ("power", "{{ 7 ** 100000 }}", "too large"),
    ("int-squaring", "{% set ns = namespace(x=3) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}",
     "integer of more than 4096 bits"),
    ("int-from-text", "{{ ('1' * 100000)|int(base=2) }}", "integer of more than 4096 bits"),
    ("range", "{{ range(100000000)|list }}", "larger than 100000"),
    ("center", "{{ 'x'.center(100000000) }}", "argument of center"),
    ("center-filter", "{{ 'x'|center(100000000) }}", "argument of filter"),
    ("replace", S + "{{ s|replace('x', 'yy') }}", "replace gives more"),
    ("replace-method", S + "{{ s.replace('x', 'yy') }}", "replace gives more"),
    ("replace-empty", "{% set s = 'x' * 99999 %}{{ s.replace('', 'yyyyyyyyyyyy') }}", "replace gives more"),
    ("rfind", "{% set s = 'a' * 999999 %}{% set p = 'a' * 400000 + 'b' %}{{ s.rfind(p) }}", "compares more than"),
    ("rsplit", "{% set s = 'a' * 999999 %}{% set p = 'a' * 400000 + 'b' %}{{ s.rsplit(p) }}", "compares more than"),
    ("strip-chars", "{% set s = 'a' * 999999 %}{{ s.strip('b' * 999990 + 'a') }}", "compares more than"),
    ("trim-chars", "{% set s = 'a' * 999999 %}{{ s|trim('b' * 999990 + 'a') }}", "compares more than"),
    ("batch-fill", S + "{% for b in [1]|batch(1000, s) %}{{ b|length }}{% endfor %}", "filter batch gives more"),
    ("sum-lists", "{{ ([[1] * 10] * 10)|sum(start=[]) }}", "sum adds numbers only"),
    ("many-values", "".join(f"{{% set v{i} = ('x' * 999000) ~ {i} %}}" for i in range(200)),
     "makes more than 64 MiB"),
    ("block-output", "{% macro m() %}{% for i in range(1100) %}{{ 'x' * 999 }}{% endfor %}{% endmacro %}{{ m() }}",
     "a block's output gives more than"),
    ("set-block", "{% set b %}{% for i in range(1100) %}{{ 'y' * 999 }}{% endfor %}{% endset %}{{ b }}",
     "a block's output gives more than"),
    ("output", "{% for i in range(100000) %}{{ 'x' * 999 }}{% endfor %}", "output longer than"),
    ("dict-update", "{% set d = {} %}{{ dict.update(d, {'a': 1}) }}", "SecurityError"),
    ("dict-fromkeys", S + "{{ {}.fromkeys(range(1000), s) }}", "a call|fromkeys gives more than"),
    ("translate", "{{ 'aaaa'.translate({97: 'x' * 1000}) }}", "SecurityError"),
    ("encode", "{{ ('x' * 1000).encode('punycode') }}", "SecurityError"),
    ("striptags", "{{ ('<a>' * 300000)|striptags }}", "No filter named 'striptags'"),
    ("pprint", "{{ [1]|pprint }}", "No filter named 'pprint'"),
    ("strftime", "{{ strftime_now('%c' * 100000) }}", "longer than 256"),
    ("raise-long", "{{ raise_exception('x' * 999999) }}", "chat template: x{500}$"),
    ("recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "nested more than 40 deep"),
    ("steps", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
     "steps|took more than"),
    ("accumulate", "{% set ns = namespace(l=[]) %}{% for i in range(4000) %}{% set ns.l = ns.l + [i ~ 'x' * 3000] %}"
                   "{% endfor %}{{ ns.l|sort|length }}", r"'\+' gives more than"),
    ("groupby-chars", "{{ ('x' * 999990)|groupby('k') }}", "took more than"),
    ("source", "{{ 1 }}" * 30000, "more than the 131,072 a template may have"),
    ("parse-depth", "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", "brackets nested more than 64 deep"),
    ("filter-chain", "{{ 1" + "|string" * 5000 + " }}", "one tag holds more than 100 operators"),
    ("block-depth", "{% if a %}" * 4000 + "x" + "{% endif %}" * 4000, "blocks and brackets nested more than 64"),
    ("set-blocks", "{% set x %}" * 70 + "{% endset %}" * 70, "blocks and brackets nested more than 64"),
    ("unary-chain", "{{ " + "not " * 25000 + "a }}", "one tag holds more than 100 operators"),
    ("inline-ifs", "{{ " + "1 if 1 else " * 5000 + "1 }}", "one tag holds more than 100 operators"),
    ("item-chain", "{{ messages" + "[0]" * 3000 + " }}", "one tag holds more than 100 operators"),
    ("call-chain", "{{ range" + "()" * 3000 + " }}", "one tag holds more than 100 operators"),
    ("elif-chain", "{% if a %}" + "{% elif 0 %}" * 8000 + "{% endif %}", "blocks and brackets nested more than 64"),
]

# What random_template draws from: values (some just under the cap), unary and binary steps.
_ATOMS = ["'x'", "'x' * 999990", "'\\t' * 99999", "'a\\nb' * 1000", "range(1000)|list", "ns.a", "ns.b",
          "messages", "[]", "7", "4096", "(1, 2)", "{'k': ns.a}", "'{0}{0}%s'", "big", "i"]
_UNARY = ["[{}]", "[{0}, {0}]", "({0}, {0})", "{{'a': {0}, 'b': {0}}}", "{}|list", "{}|join", "{}|join('--')",
          "{}|tojson", "{}|tojson(indent=50)", "{}|string", "{}|sort", "{}|unique|list", "{}|reverse|list",
          "{}|first", "{}|last", "{}|length", "{}|batch(3)|list", "{}|map('string')|list", "{}|indent(40)",
          "{}|trim", "{}|upper", "{}|replace('x', 'yyy')", "{}|dictsort", "{}|items|list", "{}|center(9999)",
          "{}[1:]", "{}[::-1]", "({}).split()", "({}).rsplit('x')", "({}).expandtabs(64)", "({}).strip('xa')",
          "({}).replace('', '-')", "({}).format(ns.a, ns.b)", "({}) % (ns.a, ns.b)", "'-'.join({})",
          "({}).zfill(5000)", "{}|int", "{}|sum", "{}|max", "{}|selectattr('k')|list", "{}|groupby('k')"]
_BINARY = ["{} * {}", "{} + {}", "{} ~ {}", "{} == {}", "{} < {}", "{} in {}", "{} ** {}", "{} % {}",
           "[{}, {}]|join", "({}, {})|tojson", "{} if {} else 'no'"]


def random_expression(rng: random.Random, depth: int) -> str:
    """An expression tree of at most ``depth`` levels."""
    if depth == 0 or rng.random() < 0.2:
        return rng.choice(_ATOMS)
    if rng.random() < 0.55:
        return rng.choice(_UNARY).format("(" + random_expression(rng, depth - 1) + ")")
    return rng.choice(_BINARY).format("(" + random_expression(rng, depth - 1) + ")",
                                      "(" + random_expression(rng, depth - 1) + ")")


def random_template(rng: random.Random) -> str:
    """A template that feeds random expressions back into a namespace, in loops or not, and prints some."""
    parts = ["{% set ns = namespace(a='x' * 1000, b=[1, 2, 3]) %}{% set big = 'y' * 999000 %}{% set i = 2 %}"]
    for _ in range(rng.randint(1, 4)):
        body = f"{{% set ns.{rng.choice('ab')} = {random_expression(rng, 3)} %}}"
        if rng.random() < 0.5:
            body = f"{{% for i in range({rng.choice([3, 30, 3000])}) %}}{body}{{% endfor %}}"
        parts += [body, f"{{{{ {random_expression(rng, 2)} }}}}"]
    return "".join(parts)
