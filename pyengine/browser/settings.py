"""The page's settings: one table of the sampling fields, with their labels and ranges, checked here only.

The page draws its sampling fields from the rows of :data:`SETTINGS`
(:func:`setting_rules`: sent with ``booted``, and again with ``model`` for the
model's limits). A message goes with the fields as typed, and Python reads and
checks them once (:func:`check_fields`, in the worker's ``chat``; ``check`` does
the same while the page shows a bad field, as it is edited). The Memory options
and the model card's weights line come from
:data:`MEMORY`, the page's words for each policy of :data:`pyengine.weights.budget.WEIGHT_FORMS`
(:func:`memory_options`, :func:`weight_cards`).
"""

from __future__ import annotations

import re
from typing import Any

from pyengine.errors import PyEngineError
from pyengine.generation.request import MAX_TOKENS

# The page's words for each weights= policy (pyengine.weights.budget.WEIGHT_FORMS): its Memory option (None
# where only "auto" picks it) and the model card's line.
MEMORY: dict[str, tuple[str | None, str]] = {
    "blocks": (None, "blocks: the file's own blocks, products in the C kernel"),
    "numpy": ("numpy, no C kernel", "numpy: auto's numpy forms, without the C kernel"),
    "f32": ("numpy float32, most memory", "f32: float32 in numpy, the most memory"),
    "quantized": (None, "quantized: the file's codes, a code in each int64 lane"),
    "compact": ("numpy, least memory, slowest", "compact: the file's codes packed tight, slower"),
    "mixed": (None, "mixed: the file's codes, expanded where the budget allows"),
}
AUTO_OPTION = "the C kernel where it runs (default)"   # the page's name for weights="auto"

# The page's settings, one row each, in the order the page shows them (its fields are drawn from
# these rows, see :func:`setting_rules`). Columns: the name in ``chat.settings`` (sampling ones are
# pyengine.generation.sampling.SamplerParams fields, whose defaults the fields start with), the
# page's label, whole number or not, the lowest and highest value allowed (a number, or a limit of
# the model loaded: "n_vocab" tokens, "n_ctx" the context), whether the lowest itself is excluded,
# the step of the field's arrows, what a blank field means ("": a blank field is an error) and the
# word a blank field shows (its placeholder).
SETTINGS: tuple[tuple, ...] = (
    # name             label             whole  lowest  highest    above  step  blank            placeholder
    ("temperature",    "Temperature",    False, 0,      5,         False, 0.05, "",              ""),
    ("top_k",          "Top-k",          True,  0,      "n_vocab", False, 1,    "",              ""),
    ("top_p",          "Top-p",          False, 0,      1,         True,  0.01, "",              ""),
    ("min_p",          "Min-p",          False, 0,      1,         False, 0.01, "",              ""),
    ("repeat_penalty", "Repeat penalty", False, 0,      10,        True,  0.05, "",              ""),
    ("max_tokens",     "Max tokens",     True,  1,      "n_ctx",   False, 1,    "",              ""),
    ("seed",           "Seed",           True,  0,      2**32 - 1, False, 1,    "a random seed", "random"),
)

# A number as the page's number fields take it: "-5", "0.95", ".5", "1e3" (not "nan", "inf" or "1_000").
NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def setting_rules(n_vocab: int | None = None, n_ctx: int | None = None) -> list[dict]:
    """The rows of :data:`SETTINGS` for a model of ``n_vocab`` tokens and a context of ``n_ctx``
    tokens (None: no upper bound), as the page reads them: ``{name, label, whole, min, max (None:
    none), above, step, blank, placeholder, default, rule}``, where ``default`` is the text the
    field starts with ("0.8"; "" for blank) and ``rule`` says in words what the field takes ("a
    whole number from 0 to 49152")."""
    from pyengine.generation.sampling import SamplerParams
    defaults = {**vars(SamplerParams()), "max_tokens": MAX_TOKENS}
    limits = {"n_vocab": n_vocab, "n_ctx": n_ctx}
    rules = []
    for name, label, whole, lo, hi, above, step, blank, placeholder in SETTINGS:
        hi = limits[hi] if isinstance(hi, str) else hi
        kind = "a whole number" if whole else "a number"
        if above:
            span = f"above {lo}" + (f" and at most {hi}" if hi is not None else "")
        else:
            span = f"from {lo} to {hi}" if hi is not None else f"of {lo} or more"
        rule = f"{kind} {span}" + (f", or blank for {blank}" if blank else "")
        default = "" if defaults[name] is None else str(defaults[name])
        rules.append({"name": name, "label": label, "whole": whole, "min": lo, "max": hi, "above": above,
                      "step": step, "blank": blank, "placeholder": placeholder, "default": default, "rule": rule})
    return rules


def setting_error(rule: dict, shown: str) -> PyEngineError:
    """The error of a bad field, named by its label with what it takes: "Top-k must be a whole number
    from 0 to 49152 (it is -5)"; ``shown`` is what the field holds ("-5", "blank", "not a number")."""
    return PyEngineError(f"{rule['label']} must be {rule['rule']} (it is {shown})")


def check_setting(rule: dict, value: Any) -> Any:
    """``value`` (a number, or None for a blank field) checked against one of :func:`setting_rules`'
    rows: returns it as an int or float (None for an allowed blank). Raises PyEngineError naming the
    field by its label and what it takes: "Top-k must be a whole number from 0 to 49152 (it is -5)"."""
    if value is None and rule["blank"]:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    ok = number and value == value and abs(value) != float("inf")
    if ok and rule["whole"]:
        ok = float(value).is_integer()
        value = int(value) if ok else value
    if ok:
        lo, hi = rule["min"], rule["max"]
        ok = (value > lo if rule["above"] else value >= lo) and (hi is None or value <= hi)
    if not ok:
        raise setting_error(rule, "blank" if value is None else repr(value) if number else "not a number")
    return value if rule["whole"] else float(value)


def read_setting(rule: dict, text: str, bad_input: bool = False) -> Any:
    """A field as typed on the page, read and checked against its rule: the number (as
    :func:`check_setting` returns it), or None for an allowed blank. ``bad_input``: the browser
    found no number in the field (a number input then reports "" for "1e" or "-"). Raises the
    :func:`setting_error`, which shows the text as typed: "(it is 2.5)", "(it is blank)", "(it is
    not a number)"."""
    text = text.strip()
    if bad_input or (text and not NUMBER.fullmatch(text)):
        raise setting_error(rule, "not a number")
    if not text:
        return check_setting(rule, None)
    try:
        return check_setting(rule, float(text))
    except PyEngineError:
        raise setting_error(rule, text) from None


def check_fields(fields: dict, bad_input: list | tuple = (), rules: list[dict] | None = None) -> tuple[dict, list]:
    """The page's fields as typed (name -> text; a number is read as its text), each read against
    ``rules`` (:func:`setting_rules`, default: with no model limits) by :func:`read_setting`;
    ``bad_input``: the names of the fields in which the browser found no number. Returns (name -> number
    or None for the fields that are right, ``[{name, message}]`` for the others, in the page's order); a
    name with no rule is left out."""
    values, errors = {}, []
    for rule in rules or setting_rules():
        name = rule["name"]
        if name not in fields:
            continue
        try:
            text = "" if fields[name] is None else str(fields[name])
            values[name] = read_setting(rule, text, name in bad_input)
        except PyEngineError as e:
            errors.append({"name": name, "message": str(e)})
    return values, errors


def sampler_params(settings: dict, rules: list[dict] | None = None) -> tuple[Any, int]:
    """The page's settings as (SamplerParams, max_tokens), each checked against ``rules``
    (:func:`setting_rules`, default: with no model limits). A field missing from ``settings`` takes
    its default (SamplerParams', MAX_TOKENS); a field sent blank (None) is an error unless its rule
    allows it (the seed: random).

    Raises PyEngineError naming the first bad field by the page's label, with its allowed range.
    """
    return params_of({r["name"]: check_setting(r, settings[r["name"]])
                      for r in rules or setting_rules() if r["name"] in settings})


def params_of(values: dict) -> tuple[Any, int]:
    """Settings already checked (name -> number, as :func:`check_fields` reads them) as (SamplerParams,
    max_tokens); a field missing takes its default (SamplerParams', MAX_TOKENS)."""
    from pyengine.generation.sampling import SamplerParams
    values = dict(values)
    max_tokens = values.pop("max_tokens", MAX_TOKENS)
    return SamplerParams(**values).check(), max_tokens


def settings_hint(rules: list[dict] | None = None) -> str:
    """The line under the sampling fields, from the rules (:func:`setting_rules`): what temperature 0 does and
    which fields may be left blank: "Temperature 0 is greedy: the same reply every time. Leave Seed blank for
    a random seed each reply; every other field needs a number."."""
    rules = rules or setting_rules()
    blanks = [f"Leave {r['label']} blank for {r['blank']} each reply" for r in rules if r["blank"]]
    temperature = next(r["label"] for r in rules if r["name"] == "temperature")
    rest = "; every other field needs a number." if blanks else " Every field needs a number."
    return f"{temperature} 0 is greedy: the same reply every time. " + "; ".join(blanks) + rest


def memory_options() -> list[dict]:
    """The page's Memory options, in order: ``{value, label}`` ("auto" first), and the model card's
    line for each weight policy, ``{value, card}``."""
    options = [{"value": "auto", "label": AUTO_OPTION}]
    options += [{"value": k, "label": option} for k, (option, _) in MEMORY.items() if option]
    return options


def weight_cards() -> dict[str, str]:
    """The model card's line for each weight policy (``Model.weights``)."""
    return {k: card for k, (_, card) in MEMORY.items()}


def memory_names() -> dict[str, str]:
    """What the load's errors say after a weights= choice's form: its Memory option ("(Memory: numpy,
    least memory, slowest)"), for the choices the page offers."""
    return {k: f" (Memory: {option})" for k, (option, _) in MEMORY.items() if option}


# The Structured output setting: its options in the page's order, (value, label, what the editor holds).
STRUCTURES: tuple[tuple[str, str, str], ...] = (
    ("none", "None", ""),
    ("json", "JSON object", ""),
    ("schema", "JSON schema", "a JSON Schema"),
    ("grammar", "Grammar (GBNF)", "a GBNF grammar (llama.cpp's format)"),
)
MAX_STRUCTURE_CHARS = 200_000   # what the editor may hold


def structure_options() -> list[dict]:
    """The Structured output options: ``{value, label, editor}`` (editor: what its text is; "" for none)."""
    return [{"value": v, "label": label, "editor": editor} for v, label, editor in STRUCTURES]


def structure_gbnf(kind: str, text: str) -> str | None:
    """The GBNF of the Structured output setting ``kind`` with the editor's ``text`` (None for "none").
    Raises GrammarError naming the line and column of bad text (a schema's JSON or a grammar's GBNF,
    parsed here so the error is the editor's)."""
    from pyengine.generation.grammar_parse import GrammarError, parse_gbnf
    from pyengine.generation.json_schema import json_mode_gbnf, parse_schema, schema_to_gbnf
    kinds = [v for v, _, _ in STRUCTURES]
    if kind not in kinds:
        raise GrammarError(f"Structured output must be one of {', '.join(kinds)} (it is {kind!r})")
    if len(text) > MAX_STRUCTURE_CHARS:
        raise GrammarError(f"the {kind} has {len(text):,} characters, more than {MAX_STRUCTURE_CHARS:,}")
    if kind == "none":
        return None
    if kind == "json":
        return json_mode_gbnf()
    if kind == "schema":
        return schema_to_gbnf(parse_schema(text, "schema"))
    parse_gbnf(text, "grammar")                     # the editor's own line and column
    return text
