"""JSON Schema to GBNF, as llama.cpp's ``json_schema_to_grammar`` covers it
(``common/json-schema-to-grammar.cpp``; the rules' names and shapes are llama.cpp's).

    {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
        root ::= "{" space name-kv space "}"
        name-kv ::= "\\"name\\"" space ":" space string
        string ::= "\\"" char* "\\""            space ::= | " " | "\\n"{1,2} [ \\t]{0,20}

What is covered: ``type`` (one or a list), objects (``properties``, ``required``, optional ones in
their order, ``additionalProperties``: false when absent, as llama.cpp has it), arrays (``items``,
``prefixItems``, ``minItems``/``maxItems``), strings (``minLength``/``maxLength``, ``enum``,
``const``, ``format`` date, time, date-time, uuid, and ``pattern``: ``^...$`` with literals, ``.``,
classes, ``\\d \\w \\s``, groups, ``|`` and ``* + ? {m,n}``), integers with ``minimum``/``maximum``
(exclusive too: llama.cpp bounds integers only; a ``number``'s bounds are not held), booleans,
null, ``oneOf``/``anyOf``, ``allOf`` of objects, ``$ref`` within the schema (``#/$defs/...``,
``#/definitions/...``, ``#``). Anything else raises :class:`GrammarError` naming the schema path.
:func:`json_mode_grammar` is any JSON object.

Numbers are bounded as llama.cpp bounds them (16 digits a part); strings are not unless the schema
says so (``maxLength``, ``enum``, ``pattern``, ``format``), but a reply near its token limit is closed
by it (:meth:`pyengine.generation.grammar.GrammarMatcher.allowed`) when the limit holds the schema's
shortest value.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pyengine.generation.grammar_parse import MAX_REPETITION, GrammarError

SPACE = '| " " | "\\n"{1,2} [ \\t]{0,20}'
COMPACT_SPACE = '" "?'              # one space at most: a reply's length bounded by its content
PRIMITIVES: dict[str, tuple[str, tuple[str, ...]]] = {       # name -> (body, rules it needs)
    "boolean": ('("true" | "false")', ()),
    "decimal-part": ("[0-9]{1,16}", ()),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", ()),
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
               ("integral-part", "decimal-part")),
    "integer": ('("-"? integral-part)', ("integral-part",)),
    "value": ("object | array | string | number | boolean | null",
              ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? space "}"',
               ("string", "value")),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ("value",)),
    "uuid": ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" '
             '[0-9a-fA-F]{12} "\\""', ()),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', ()),
    "string": ('"\\"" char* "\\""', ("char",)),
    "null": ('"null"', ()),
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )', ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
             '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "date-string": ('"\\"" date "\\""', ("date",)),
    "time-string": ('"\\"" time "\\""', ("time",)),
    "date-time-string": ('"\\"" date-time "\\""', ("date-time",)),
}
FORMATS = {"date": "date-string", "time": "time-string", "date-time": "date-time-string", "uuid": "uuid"}
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
MAX_SCHEMA_RULES = 10_000
NOT_IN_JSON = '"\\\\\\x7F\\x00-\\x1F'                  # what a JSON string cannot hold as it is
JSON_CHAR_CLASS = '[^"\\\\\\x7F\\x00-\\x1F]'                   # a character a JSON string holds as it is


def literal(text: str) -> str:
    """``text`` as a GBNF string literal (quotes, backslashes and control characters escaped)."""
    def esc(c: str) -> str:
        if c in '"\\':
            return "\\" + c
        return f"\\x{ord(c):02X}" if ord(c) < 0x20 or ord(c) == 0x7F else c
    return '"' + "".join(map(esc, text)) + '"'


def json_literal(value: Any) -> str:
    """The JSON text of ``value`` as a GBNF literal (an ``enum`` or ``const`` value)."""
    return literal(json.dumps(value, ensure_ascii=False))


def repetition(item: str, lo: int, hi: int | None, sep: str = "") -> str:
    """``item`` lo..hi times (hi None: no bound), ``sep`` between two (llama.cpp ``build_repetition``)."""
    if hi == 0:
        return ""
    if not sep:
        return f"({item}){{{lo},{'' if hi is None else hi}}}"
    rest = repetition(f"{sep} {item}", max(lo - 1, 0), None if hi is None else hi - 1)
    body = f"{item} {rest}" if rest else item
    return f"({body})" if lo > 0 else f"({body})?"


# --- integer ranges -------------------------------------------------------------------------------

def _same_length(lo: str, hi: str) -> list[str]:
    """GBNF alternatives for the decimal numbers lo..hi, both of the same number of digits."""
    if lo == hi:
        return [literal(lo)]
    if len(lo) == 1:
        return [f"[{lo}-{hi}]"]
    n = len(lo) - 1
    if lo[0] == hi[0]:
        return [f"{literal(lo[0])} ({' | '.join(_same_length(lo[1:], hi[1:]))})"]
    out, first, last = [], int(lo[0]), int(hi[0])
    if lo[1:] != "0" * n:
        out.append(f"{literal(lo[0])} ({' | '.join(_same_length(lo[1:], '9' * n))})")
        first += 1
    if hi[1:] != "9" * n:
        tail = f"{literal(hi[0])} ({' | '.join(_same_length('0' * n, hi[1:]))})"
        last -= 1
    else:
        tail = None
    if first <= last:
        out.append(f"[{first}-{last}] [0-9]{{{n}}}")
    if tail:
        out.append(tail)
    return out


def _naturals(lo: int, hi: int | None) -> list[str]:
    """Alternatives for the numbers lo..hi (>= 0, hi None: up to 16 digits), no leading zeros."""
    out = []
    top = hi if hi is not None else 10 ** 16 - 1
    for n in range(len(str(lo)), len(str(top)) + 1):
        a, b = max(lo, 10 ** (n - 1) if n > 1 else 0), min(top, 10 ** n - 1)
        if a > b:
            continue
        if hi is None and a == 10 ** (n - 1) and n > 1:          # every longer number too: one rule
            out.append(f"[1-9] [0-9]{{{n - 1},15}}")
            break
        out.extend(_same_length(str(a), str(b)))
    return out


def integer_range(lo: int | None, hi: int | None) -> str:
    """A GBNF expression for the integers lo..hi (None: no bound; up to 16 digits as llama.cpp)."""
    if lo is not None and hi is not None and lo > hi:
        raise GrammarError(f"no integer is >= {lo} and <= {hi}")
    alts = []
    if lo is None or lo < 0:                                     # the negatives: "-" and a magnitude
        mags = _naturals(1 if hi is None or hi >= 0 else -hi, None if lo is None else -lo)
        alts.append(f'"-" ({" | ".join(mags)})')
    if hi is None or hi >= 0:
        alts.extend(_naturals(max(lo or 0, 0), hi))
    if not all(alts) or not alts:
        raise GrammarError(f"no integer of at most 16 digits is within {lo}..{hi}")
    return "(" + " | ".join(alts) + ")"


# --- patterns -------------------------------------------------------------------------------------

_CLASS_ESCAPES = {"d": "0-9", "w": "a-zA-Z0-9_", "s": " \\t\\n\\r"}


class _Pattern:
    """A ``pattern`` (a practical subset of ECMA-262 regular expressions) as a GBNF expression over
    the characters of a JSON string's text (quotes and backslashes written escaped)."""

    def __init__(self, pattern: str, where: str):
        self.p, self.i, self.where, self.original = pattern, 0, where, pattern

    def error(self, message: str) -> GrammarError:
        at = self.i + self.original.startswith("^")
        return GrammarError(f"{self.where}: pattern {self.original!r} at {at}: {message}")

    def parse(self) -> str:
        p = self.p
        start, end = p.startswith("^"), p.endswith("$") and not p.endswith("\\$")
        self.p = p[1 if start else 0:len(p) - 1 if end else len(p)]
        body = self.alternates()
        if self.i != len(self.p):
            raise self.error("unexpected ')'")
        free = "char*"                                            # an unanchored side: anything around it
        return " ".join(([] if start else [free]) + [f"({body})"] + ([] if end else [free]))

    def alternates(self) -> str:
        alts = [self.sequence()]
        while self.i < len(self.p) and self.p[self.i] == "|":
            self.i += 1
            alts.append(self.sequence())
        return " | ".join(a or '""' for a in alts)

    def sequence(self) -> str:
        items: list[str] = []
        while self.i < len(self.p) and self.p[self.i] not in "|)":
            atom = self.atom()
            items.append(self.quantified(atom))
        return " ".join(items)

    def atom(self) -> str:
        c = self.p[self.i]
        self.i += 1
        if c == "(":
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith("?", self.i):
                raise self.error("lookarounds and named groups are not supported")
            body = self.alternates()
            if self.i >= len(self.p) or self.p[self.i] != ")":
                raise self.error("expecting ')'")
            self.i += 1
            return f"({body})"
        if c == "[":
            return self.char_class()
        if c == ".":
            return JSON_CHAR_CLASS
        if c == "\\":
            return self.escape()
        if c in "*+?{":
            raise self.error(f"'{c}' with nothing to repeat")
        return self.char(c)

    @staticmethod
    def char(c: str) -> str:
        """One literal character as the JSON text holds it."""
        if c in '"\\':
            return literal("\\" + c)
        if ord(c) < 0x20:
            return literal(f"\\u{ord(c):04x}")
        return literal(c)

    def escape(self) -> str:
        if self.i >= len(self.p):
            raise self.error("a pattern ends in '\\'")
        c = self.p[self.i]
        self.i += 1
        if c in _CLASS_ESCAPES:
            return f"[{_CLASS_ESCAPES[c]}]"
        if c.isalnum():
            raise self.error(f"\\{c} is not supported")
        return self.char(c)

    def char_class(self) -> str:
        out, negated = [], self.p.startswith("^", self.i)
        self.i += negated
        while self.i < len(self.p) and self.p[self.i] != "]":
            c = self.p[self.i]
            self.i += 1
            if c == "\\" and self.i < len(self.p):
                e = self.p[self.i]
                self.i += 1
                out.append(_CLASS_ESCAPES.get(e) or ("\\" + e if e in "]\\-^[" else e))
            elif c in '"':
                raise self.error("a quote in a class is not supported")
            else:
                out.append("\\" + c if c in "[" else c)
        if self.i >= len(self.p):
            raise self.error("expecting ']'")
        self.i += 1
        return f"[^{''.join(out)}{NOT_IN_JSON}]" if negated else f"[{''.join(out)}]"

    def quantified(self, atom: str) -> str:
        if self.i >= len(self.p):
            return atom
        c = self.p[self.i]
        if c in "*+?":
            self.i += 1 + self.p.startswith("?", self.i + 1)
            return f"{atom}{c}"
        m = re.match(r"\{(\d+)(,(\d*))?\}", self.p[self.i:])
        if not m:
            return atom
        self.i += m.end() + self.p.startswith("?", self.i + m.end())
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else (int(m.group(3)) if m.group(3) else None)
        return repetition(atom, lo, hi)


def count(schema: dict, key: str, path: str, default: int | None) -> int | None:
    """A count of the schema (``minItems``, ``maxLength``...): an integer >= 0, or ``default``."""
    v = schema.get(key, default)
    if v is default:
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not float(v).is_integer():
        raise GrammarError(f"schema at {path}/{key}: expecting a whole number >= 0, got {json.dumps(v)[:40]}")
    if key.startswith("min") and v > MAX_REPETITION:
        raise GrammarError(f"schema at {path}/{key}: {int(v)} is more than a grammar repeats ({MAX_REPETITION})")
    return int(v) if v <= MAX_REPETITION else None          # as llama.cpp: a larger most is no bound


# --- the converter --------------------------------------------------------------------------------

class SchemaConverter:
    """Turns one schema into GBNF rules (``rules``: name -> body); :meth:`visit` returns a rule's name."""

    def __init__(self, schema: Any, compact: bool = False):
        self.root_schema = schema
        self.rules: dict[str, str] = {"space": COMPACT_SPACE if compact else SPACE}
        self.refs: dict[str, str] = {}

    def add_rule(self, name: str, body: str) -> str:
        key = re.sub(r"[^a-zA-Z0-9-]+", "-", name) or "rule"
        if self.rules.get(key, body) != body:
            i = 0
            while f"{key}{i}" in self.rules and self.rules[f"{key}{i}"] != body:
                i += 1
            key = f"{key}{i}"
        if len(self.rules) >= MAX_SCHEMA_RULES:
            raise GrammarError(f"schema: more than {MAX_SCHEMA_RULES} rules")
        self.rules[key] = body
        return key

    def primitive(self, name: str) -> str:
        body, needs = PRIMITIVES[name]
        self.rules[name] = body
        for dep in needs:
            if dep not in self.rules:
                self.primitive(dep)
        return name

    def visit(self, schema: Any, name: str, path: str = "#") -> str:
        """The rule for ``schema`` (at ``path`` in the whole schema), named after ``name``."""
        rule = name or "root"
        rule += "-" if rule in PRIMITIVES or rule == "space" else ""
        if schema is True or schema == {}:
            return self.add_rule(rule, self.primitive("value"))
        if not isinstance(schema, dict):
            raise GrammarError(f"schema at {path}: a schema is an object or true, got {json.dumps(schema)[:80]}")
        sub = f"{name}-" if name else ""
        if "$ref" in schema:
            return self.add_rule(rule, self.ref(schema["$ref"], path))
        for key in ("oneOf", "anyOf"):
            if key in schema:
                alts = [self.visit(s, f"{sub}{i}", f"{path}/{key}/{i}")
                        for i, s in enumerate(self.list_of(schema, key, path))]
                return self.add_rule(rule, " | ".join(alts))
        if "allOf" in schema:
            return self.visit(self.merge_all_of(schema, path), name, path)
        if "const" in schema:
            return self.add_rule(rule, json_literal(schema["const"]))
        if "enum" in schema:
            values = self.list_of(schema, "enum", path)
            return self.add_rule(rule, "(" + " | ".join(json_literal(v) for v in values) + ")")
        kind = schema.get("type")
        if isinstance(kind, list):
            return self.add_rule(rule, " | ".join(self.visit({**schema, "type": t}, f"{sub}{t}", path) for t in kind))
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else None
        if kind is None:
            return self.add_rule(rule, self.primitive("value"))
        if kind not in TYPES:
            raise GrammarError(f"schema at {path}/type: unknown type {kind!r}")
        return getattr(self, "visit_" + kind)(schema, name, rule, path)

    @staticmethod
    def list_of(schema: dict, key: str, path: str) -> list:
        v = schema[key]
        if not isinstance(v, list) or not v:
            raise GrammarError(f"schema at {path}/{key}: expecting a non-empty list")
        return v

    def ref(self, ref: Any, path: str) -> str:
        """The rule of a ``$ref`` within the schema (a JSON pointer after ``#``), made once."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise GrammarError(f"schema at {path}/$ref: only references within the schema (#...) are supported")
        if ref not in self.refs:
            target: Any = self.root_schema
            for part in [p for p in ref[1:].split("/") if p]:
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, dict) or part not in target:
                    raise GrammarError(f"schema at {path}/$ref: {ref} points to nothing")
                target = target[part]
            name = "ref" + re.sub(r"[^a-zA-Z0-9-]+", "-", ref[1:]) if ref != "#" else "root"
            self.refs[ref] = name if ref == "#" else self.add_rule(name, '""')     # a placeholder: may recurse
            if ref != "#":
                self.rules[self.refs[ref]] = self.visit(target, self.refs[ref] + "-body", ref)
        return self.refs[ref]

    def merge_all_of(self, schema: dict, path: str) -> dict:
        """``allOf`` of object schemas: their properties and required lists together (as llama.cpp)."""
        props, required = {}, []
        for i, part in enumerate(self.list_of(schema, "allOf", path)):
            while isinstance(part, dict) and "$ref" in part:
                part = self.resolve(part["$ref"], f"{path}/allOf/{i}")
            if not isinstance(part, dict):
                raise GrammarError(f"schema at {path}/allOf/{i}: expecting an object schema")
            props.update(part.get("properties", {}))
            required += part.get("required", [])
        return {"type": "object", "properties": props, "required": required}

    def resolve(self, ref: str, path: str) -> Any:
        target: Any = self.root_schema
        for part in [p for p in str(ref)[1:].split("/") if p]:
            if not isinstance(target, dict) or part not in target:
                raise GrammarError(f"schema at {path}/$ref: {ref} points to nothing")
            target = target[part]
        return target

    # --- the types
    def visit_object(self, schema: dict, name: str, rule: str, path: str) -> str:
        props = schema.get("properties", {})
        extra = schema.get("additionalProperties", False if props else True)
        if not isinstance(props, dict):
            raise GrammarError(f"schema at {path}/properties: expecting an object")
        if not props and (extra is True or extra == {}):
            return self.add_rule(rule, self.primitive("object"))
        required = set(schema.get("required", []))
        sub = f"{name}-" if name else ""
        kvs, req, opt = {}, [], []
        for key, prop in props.items():
            value = self.visit(prop, f"{sub}{key}", f"{path}/properties/{key}")
            kvs[key] = self.add_rule(f"{sub}{key}-kv", f'{json_literal(key)} space ":" space {value}')
            (req if key in required else opt).append(key)
        if extra is not False:
            value = self.primitive("value") if extra is True or extra == {} else \
                self.visit(extra, f"{sub}additional-value", f"{path}/additionalProperties")
            keys = self.add_rule(f"{sub}additional-k", self.not_strings(list(props))) if props else \
                self.primitive("string")
            kvs["*"] = self.add_rule(f"{sub}additional-kv", f'{keys} ":" space {value}')
            opt.append("*")
        body = '"{" space ' + ' "," space '.join(kvs[k] for k in req)
        if opt:
            chains = " | ".join(self.optional_chain(opt[i:], kvs, name) for i in range(len(opt)))
            body += f' ( "," space ( {chains} ) )?' if req else f" ( {chains} )?"
        return self.add_rule(rule, body + ' space "}"')

    def optional_chain(self, keys: list[str], kvs: dict[str, str], name: str, first: bool = True) -> str:
        """The optional properties ``keys`` in their order, the first present (``first``) or not
        (llama.cpp's ``get_recursive_refs``)."""
        k, kv = keys[0], kvs[keys[0]]
        comma = f'( "," space {kv} )'
        out = (f"{kv} {comma}*" if k == "*" else kv) if first else comma + ("*" if k == "*" else "?")
        if len(keys) > 1:
            rest = self.optional_chain(keys[1:], kvs, name, first=False)
            out += " " + self.add_rule(f"{name}-{k}-rest" if name else f"{k}-rest", rest)
        return out

    def not_strings(self, words: list[str]) -> str:
        """A JSON string that is none of ``words`` (llama.cpp ``_not_strings``: a trie of them)."""
        trie: dict = {}
        for w in words:
            node = trie
            for c in json.dumps(w, ensure_ascii=False)[1:-1]:
                node = node.setdefault(c, {})
            node[""] = {}
        char = self.primitive("char")

        def visit(node: dict) -> str:
            kids = [c for c in node if c]
            alts = [f"{literal(c)} {visit(node[c])}" for c in sorted(kids)]
            avoid = "".join("\\" + c if c in "]\\-^" else c for c in kids if c != '"')
            alts.append(f'[^"\\\\\\x7F\\x00-\\x1F{avoid}] {char}*')
            if "" not in node:
                alts.append('""')
            return "(" + " | ".join(alts) + ")"
        return f'"\\"" {visit(trie)} "\\"" space'

    def visit_array(self, schema: dict, name: str, rule: str, path: str) -> str:
        sub = f"{name}-" if name else ""
        if "prefixItems" in schema:
            items = [self.visit(s, f"{sub}tuple-{i}", f"{path}/prefixItems/{i}")
                     for i, s in enumerate(self.list_of(schema, "prefixItems", path))]
            return self.add_rule(rule, '"[" space ' + ' "," space '.join(items) + ' space "]"')
        item = schema.get("items", True)
        lo, hi = count(schema, "minItems", path, 0), count(schema, "maxItems", path, None)
        if (item is True or item == {}) and lo == 0 and hi is None:
            return self.add_rule(rule, self.primitive("array"))
        item_rule = self.visit(item, f"{sub}item", f"{path}/items")
        if hi is not None and hi < lo:
            raise GrammarError(f"schema at {path}: maxItems {hi} < minItems {lo}")
        return self.add_rule(rule, f'"[" space {repetition(item_rule, lo, hi, chr(34) + "," + chr(34) + " space")} '
                                   f'space "]"')

    def visit_string(self, schema: dict, name: str, rule: str, path: str) -> str:
        if "pattern" in schema:
            body = _Pattern(str(schema["pattern"]), f"schema at {path}/pattern").parse()
            self.primitive("char")
            return self.add_rule(rule, f'"\\"" {body} "\\""')
        fmt = schema.get("format")
        if fmt in FORMATS:
            return self.add_rule(rule, self.primitive(FORMATS[fmt]))
        lo, hi = count(schema, "minLength", path, 0), count(schema, "maxLength", path, None)
        if lo or hi is not None:
            char = self.primitive("char")
            return self.add_rule(rule, f'"\\"" {repetition(char, lo, hi)} "\\""')
        return self.add_rule(rule, self.primitive("string"))

    def visit_integer(self, schema: dict, name: str, rule: str, path: str) -> str:
        def bound(key: str, exclusive: str, step: int) -> int | None:
            v = schema.get(key)
            x = schema.get(exclusive)
            if isinstance(x, (int, float)) and not isinstance(x, bool):
                return int(x) + step if float(x).is_integer() else (int(x) + (step > 0))
            if isinstance(x, bool) and x and v is not None:                   # draft 4's boolean form
                return int(v) + step
            if v is None:
                return None
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise GrammarError(f"schema at {path}/{key}: expecting a number")
            return int(v) if float(v).is_integer() else int(v) + (step > 0)
        lo, hi = bound("minimum", "exclusiveMinimum", 1), bound("maximum", "exclusiveMaximum", -1)
        if lo is None and hi is None:
            return self.add_rule(rule, self.primitive("integer"))
        try:
            return self.add_rule(rule, integer_range(lo, hi))
        except GrammarError as e:
            raise GrammarError(f"schema at {path}: {e}") from None

    def visit_number(self, schema: dict, name: str, rule: str, path: str) -> str:
        return self.add_rule(rule, self.primitive("number"))

    def visit_boolean(self, schema: dict, name: str, rule: str, path: str) -> str:
        return self.add_rule(rule, self.primitive("boolean"))

    def visit_null(self, schema: dict, name: str, rule: str, path: str) -> str:
        return self.add_rule(rule, self.primitive("null"))

    def gbnf(self) -> str:
        return "".join(f"{name} ::= {body}\n" for name, body in self.rules.items())


def schema_to_gbnf(schema: Any, compact: bool = False) -> str:
    """GBNF for the JSON values ``schema`` (a parsed JSON Schema) allows; ``compact``: at most one
    space between tokens (llama.cpp's allows a newline and 20 tabs). Raises GrammarError."""
    conv = SchemaConverter(schema, compact)
    root = conv.visit(schema, "")
    if root != "root":
        conv.rules["root"] = root
    return conv.gbnf()


def json_mode_gbnf() -> str:
    """GBNF for any JSON object (``json`` mode)."""
    return schema_to_gbnf({"type": "object"})


def parse_schema(text: str, source: str = "schema") -> Any:
    """A JSON Schema from its text; GrammarError names the line and column of bad JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise GrammarError(f"{source}: line {e.lineno}, column {e.colno}: {e.msg}") from None
