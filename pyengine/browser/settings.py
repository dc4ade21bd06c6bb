"""The page's settings: one table of the sampling fields, with their labels and ranges, checked on both sides.

The page reads the rows of :data:`SETTINGS` for the model loaded
(:func:`setting_rules`, sent with the ``model`` message) and checks its fields
against them before it sends a message; the worker checks them again
(:func:`sampler_params`). The Memory options come from
:data:`pyengine.weights.budget.WEIGHT_FORMS` (:func:`memory_options`).
"""

from __future__ import annotations

from typing import Any

from pyengine.errors import PyEngineError
from pyengine.weights.budget import AUTO_OPTION, WEIGHT_FORMS

MAX_TOKENS = 256      # a reply's default length limit, in tokens

# The page's settings, one row each; the page checks its fields against the same rows (sent with
# the ``model`` message, see :func:`setting_rules`) before it sends a message. Columns: the name in
# ``chat.settings`` (sampling ones are pyengine.sampling.SamplerParams fields), the page's label,
# whole number or not, the lowest and highest value allowed (a number, or a limit of the model
# loaded: "n_vocab" tokens, "n_ctx" the context), whether the lowest itself is excluded, and what a
# blank field means ("": a blank field is an error).
SETTINGS: tuple[tuple, ...] = (
    # name             label             whole  lowest  highest    above  blank
    ("temperature",    "Temperature",    False, 0,      5,         False, ""),
    ("top_k",          "Top-k",          True,  0,      "n_vocab", False, ""),
    ("top_p",          "Top-p",          False, 0,      1,         True,  ""),
    ("min_p",          "Min-p",          False, 0,      1,         False, ""),
    ("repeat_penalty", "Repeat penalty", False, 0,      10,        True,  ""),
    ("max_tokens",     "Max tokens",     True,  1,      "n_ctx",   False, ""),
    ("seed",           "Seed",           True,  0,      2**32 - 1, False, "a random seed"),
)



def setting_rules(n_vocab: int | None = None, n_ctx: int | None = None) -> list[dict]:
    """The rows of :data:`SETTINGS` for a model of ``n_vocab`` tokens and a context of ``n_ctx``
    tokens (None: no upper bound), as the page reads them: ``{name, label, whole, min, max (None:
    none), above, blank, rule}``, where ``rule`` says in words what the field takes ("a whole number
    from 0 to 49152")."""
    limits = {"n_vocab": n_vocab, "n_ctx": n_ctx}
    rules = []
    for name, label, whole, lo, hi, above, blank in SETTINGS:
        hi = limits[hi] if isinstance(hi, str) else hi
        kind = "a whole number" if whole else "a number"
        if above:
            span = f"above {lo}" + (f" and at most {hi}" if hi is not None else "")
        else:
            span = f"from {lo} to {hi}" if hi is not None else f"of {lo} or more"
        rule = f"{kind} {span}" + (f", or blank for {blank}" if blank else "")
        rules.append({"name": name, "label": label, "whole": whole, "min": lo, "max": hi, "above": above,
                      "blank": blank, "rule": rule})
    return rules


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
        shown = "blank" if value is None else repr(value) if number else "not a number"
        raise PyEngineError(f"{rule['label']} must be {rule['rule']} (it is {shown})")
    return value if rule["whole"] else float(value)


def sampler_params(settings: dict, rules: list[dict] | None = None) -> tuple[Any, int]:
    """The page's settings as (SamplerParams, max_tokens), each checked against ``rules``
    (:func:`setting_rules`, default: with no model limits). A field missing from ``settings`` takes
    its default (SamplerParams', MAX_TOKENS); a field sent blank (None) is an error unless its rule
    allows it (the seed: random).

    Raises PyEngineError naming the first bad field by the page's label, with its allowed range.
    """
    from pyengine.generation.sampling import SamplerParams
    values = {r["name"]: check_setting(r, settings[r["name"]])
              for r in rules or setting_rules() if r["name"] in settings}
    max_tokens = values.pop("max_tokens", MAX_TOKENS)
    return SamplerParams(**values).check(), max_tokens



def memory_options() -> list[dict]:
    """The page's Memory options, in order: ``{value, label}`` ("auto" first), and the model card's
    line for each weight policy, ``{value, card}``."""
    options = [{"value": "auto", "label": AUTO_OPTION}]
    options += [{"value": k, "label": w.option} for k, w in WEIGHT_FORMS.items() if w.option]
    return options


def weight_cards() -> dict[str, str]:
    """The model card's line for each weight policy (``Model.weights``)."""
    return {k: w.card for k, w in WEIGHT_FORMS.items()}
