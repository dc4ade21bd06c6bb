"""What a chat template may cost: the size of each value it makes, the bytes it builds, its time.

A template from a stranger runs in C wherever it compares, hashes, prints, sorts or joins, and no
deadline (nor the page's Stop) lands inside a C loop: ``[[[a]*1000]*1000]*100 == [[[b]*1000]*1000]*100``
holds a few thousand objects and runs for hours. So the sandbox keeps one invariant instead: every value
a template can reach *weighs* at most MAX_TEXT units and nests at most MAX_NESTING containers deep. A
value's weight is about the length of its repr: a string's length, a container's items summed, a shared
item counted each time it occurs (the list above weighs 10^8 times ``a``). Then no single operation
costs more than a few passes over MAX_TEXT units, and the deadline is checked between any two.

* Operations whose result may outweigh their inputs by far are checked *before* they run: ``*``, ``+``,
  ``%`` and ``**`` (:func:`check_binop`), ``~`` and join (:func:`checked_join`), ``str.format``
  (:func:`check_format`), indent, tojson, replace, expandtabs, and the string scans whose worst case is
  quadratic (:func:`check_str_method`).
* Every other result is weighed *after* (:meth:`Budget.admit`): what it made anew is charged to the
  render's MAX_BUILT bytes (and held until the render ends, so what a render holds is bounded too).
* :class:`LineTracer` counts the template's lines, its time and its macro depth.

Every refusal is a :class:`~pyengine.errors.TemplateError` saying what was too large.
"""

from __future__ import annotations

import re
import string
import sys
import time
from itertools import chain
from typing import Any

from pyengine.errors import TemplateError

MAX_SOURCE = 131_072        # chars of template source (the largest known chat templates hold ~20,000)
MAX_TEXT = 1_000_000        # the weight of any value (a string's chars), and the rendered prompt's chars
MAX_NESTING = 64            # containers inside containers
MAX_INT_BITS = 4096         # the largest integer a template may make
MAX_INT_ARG = 100_000       # the largest integer a template may pass to a call or filter (widths, counts)
MAX_SCAN = 50_000_000       # chars compared by a scan that is quadratic at worst (rfind, strip with chars)
MAX_BUILT = 64 << 20        # bytes of values one render may make (all of them held until it ends)
MAX_STEPS = 2_000_000       # template source lines executed per render
MAX_SECONDS = 10.0          # wall time per render
MAX_DEPTH = 40              # template frames (the template, its macros and call blocks) active at once
# Jinja parses and compiles by recursion: a source nested deep enough overflows the stack (under Pyodide,
# the worker's). Refused before it is parsed: blocks and brackets open at once, and operators in one tag
# (a chain of them parses as nested nodes). The 71 templates of llama.cpp's tests reach 12 and 26.
MAX_SOURCE_NESTING = 64
MAX_TAG_OPERATORS = 100

# The str methods a template may call (others, such as encode, translate or Markup's striptags, are
# refused by the sandbox); of them, the scans that compare every char with every char at worst.
STR_METHODS = frozenset("""
    capitalize casefold center count endswith expandtabs find format format_map index isalnum isalpha
    isascii isdecimal isdigit isidentifier islower isnumeric isprintable isspace istitle isupper join ljust
    lower lstrip partition removeprefix removesuffix replace rfind rindex rjust rpartition rsplit rstrip
    split splitlines startswith strip swapcase title upper zfill""".split())
QUADRATIC_SCANS = frozenset("strip lstrip rstrip rfind rindex rsplit rpartition".split())

_ENTRY = 64                 # bytes the budget's own record of one value costs
_OPAQUE = 32                # the weight of an object whose repr says nothing of its contents
_VIEWS = (type({}.keys()), type({}.values()), type({}.items()))
_PRINTF_SPEC = re.compile(r"%(\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def too_big(what: str, unit: str = "chars or items") -> TemplateError:
    return TemplateError(f"chat template: {what} gives more than {MAX_TEXT:,} {unit}")


def too_deep(what: str) -> TemplateError:
    return TemplateError(f"chat template: {what} nests containers more than {MAX_NESTING} deep")


def check_int(x: Any, what: str) -> None:
    """Refuse an integer argument larger than MAX_INT_ARG (a width, a count, a range)."""
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > MAX_INT_ARG:
        raise TemplateError(f"chat template: {what} {x} is larger than {MAX_INT_ARG}")


def check_width(digits: str, what: str = "format width") -> int:
    """A width or precision written in a format string, refused past MAX_INT_ARG."""
    if len(digits) > len(str(MAX_INT_ARG)):
        raise TemplateError(f"chat template: {what} {digits[:12]}... is larger than {MAX_INT_ARG}")
    check_int(int(digits), what)
    return int(digits)


class Budget:
    """One render's bounds: its deadline, the bytes it has made, and the weight of each value seen.

    ``seen`` maps ``id(value)`` to ``(value, weight, height)``; holding the value keeps its id unique
    while the render runs. Containers may be kept as seen because the sandbox lets no template change
    a list or dict (namespaces, which may change, weigh as opaque objects: their repr is short).
    """

    def __init__(self, max_seconds: float = MAX_SECONDS, max_built: int = MAX_BUILT):
        self.max_seconds, self.deadline = max_seconds, time.monotonic() + max_seconds
        self.max_built, self.built = max_built, 0
        self.seen: dict[int, tuple[Any, int, int]] = {}

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateError(f"chat template: rendering took more than {self.max_seconds:g} s")

    def know(self, value: Any, what: str) -> None:
        """Weigh a value the template is given (the conversation): within the bounds, not charged."""
        self._weigh(value, 0, False, what)

    def admit(self, value: Any, what: str) -> Any:
        """``value``, made by ``what``, once weighed and charged. Raises TemplateError past a bound."""
        self.check_time()
        self._weigh(value, 0, True, what)
        return value

    def record(self, value: Any, weight: int, height: int, what: str) -> Any:
        """``value`` made by ``what``, whose weight and height are known (:func:`check_binop`): charged
        without walking it."""
        if not isinstance(value, (list, tuple)) or id(value) in self.seen:
            return self.admit(value, what)
        self.check_time()
        self.seen[id(value)] = (value, weight, height)
        self._charge(value)
        return value

    def measure(self, value: Any, what: str) -> tuple[int, int]:
        """(weight, height) of a value: its repr's length, about; how many containers deep it nests."""
        return self._weigh(value, 0, True, what)

    def weight(self, value: Any, what: str) -> int:
        return self._weigh(value, 0, True, what)[0]

    def _weigh(self, x: Any, level: int, charge: bool, what: str) -> tuple[int, int]:
        if type(x) is str and id(x) in self.seen:                       # the common case, first
            return len(x) + 2, 0
        if x is None or isinstance(x, bool):
            return 4, 0
        if isinstance(x, int):
            if x.bit_length() > MAX_INT_BITS:
                raise TemplateError(f"chat template: {what} gives an integer of more than {MAX_INT_BITS} bits")
            return 2 + x.bit_length() // 3, 0
        if isinstance(x, float):
            return 24, 0
        if isinstance(x, range):
            return 2 + len(x) * (2 + len(str(max(abs(x.start), abs(x.stop))))), 0
        if isinstance(x, _VIEWS):
            return self._weigh(x.mapping, level, charge, what)
        if not isinstance(x, (str, bytes, list, tuple, set, frozenset, dict)):
            return _OPAQUE, 0
        known = self.seen.get(id(x))
        if known is not None:
            return known[1], known[2]
        if isinstance(x, (str, bytes)):
            weight, height = len(x) + 2, 0
        else:
            weight, height = self._weigh_items(x, level, charge, what)
        if weight > MAX_TEXT + 2:
            raise too_big(what)
        self.seen[id(x)] = (x, weight, height)
        if charge:
            self._charge(x)
        return weight, height

    def _charge(self, x: Any) -> None:
        self.built += sys.getsizeof(x) + _ENTRY
        if self.built > self.max_built:
            raise TemplateError(f"chat template: makes more than {self.max_built >> 20} MiB of values")

    def _weigh_items(self, x: Any, level: int, charge: bool, what: str) -> tuple[int, int]:
        if level >= MAX_NESTING:
            raise too_deep(what)
        weight, height, seen = 2, 0, self.seen
        for n, item in enumerate(chain.from_iterable(x.items()) if isinstance(x, dict) else x):
            known = seen.get(id(item))              # (most items: inline, for a call costs ~1 us when traced)
            if known is not None:
                w, h = known[1], known[2]
            elif type(item) is int and item.bit_length() <= MAX_INT_BITS:
                w, h = 2 + item.bit_length() // 3, 0
            else:
                w, h = self._weigh(item, level + 1, charge, what)
            weight += w + 2
            height = max(height, h)
            if weight > MAX_TEXT + 2:
                raise too_big(what)
            if not n & 8191:
                self.check_time()
        if height >= MAX_NESTING:
            raise too_deep(what)
        return weight, height + 1


def admitted_items(budget: Budget, items: Any, what: str):
    """The items of an iterator a filter or call returned (map, select, batch...), each admitted."""
    for item in items:
        yield budget.admit(item, what)


# --- checks before an operation runs ------------------------------------------------------------

def check_binop(budget: Budget, operator: str, left: Any, right: Any) -> tuple[int, int] | None:
    """Refuse ``*``, ``**``, ``%``, ``+`` whose result would outweigh MAX_TEXT, before it is built.
    Returns the (weight, height) of the list or tuple ``+`` or ``*`` will make (None for any other
    result), so :meth:`Budget.record` need not walk it (``ns.items + [item]`` in a loop stays linear)."""
    seqs = (str, list, tuple)
    if operator == "+" and isinstance(left, str) and isinstance(right, str):     # the common case, first
        if len(left) + len(right) > MAX_TEXT:
            raise too_big("'+'")
        return None
    if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 \
            and abs(left) > 1 and right * abs(left).bit_length() > MAX_INT_BITS:
        raise TemplateError(f"chat template: {left} ** {right} is too large")
    if operator == "*":
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, seqs) and isinstance(n, int) and n >= 1:
                weight, height = budget.measure(seq, "'*'")
                if (weight - 2) * n > MAX_TEXT:
                    raise too_big("'*'")
                return (weight - 2) * n + 2, height
    if operator == "%" and isinstance(left, str):
        check_printf(budget, left, right)
    if operator == "+" and isinstance(left, seqs) and isinstance(right, seqs):
        (w1, h1), (w2, h2) = budget.measure(left, "'+'"), budget.measure(right, "'+'")
        if w1 + w2 > MAX_TEXT:
            raise too_big("'+'")
        return w1 + w2 - 2, max(h1, h2)
    return None


def check_printf(budget: Budget, fmt: str, args: Any) -> None:
    """Refuse ``fmt % args`` (or the format filter) when its result could outweigh MAX_TEXT."""
    specs, widest = _PRINTF_SPEC.findall(fmt), 0
    for _key, width, precision in specs:
        for n in (width, precision):
            widest = max(widest, MAX_INT_ARG if n == "*" else check_width(n) if n else 0)
    if isinstance(args, tuple):
        for a in args:
            check_int(a, "format argument")
        fields = sum(budget.weight(a, "'%'") for a in args)
    elif isinstance(args, dict):
        fields = len(specs) * max((budget.weight(v, "'%'") for v in args.values()), default=0)
    else:
        fields = budget.weight(args, "'%'")
    if len(fmt) + fields + len(specs) * widest > MAX_TEXT:
        raise too_big("'%'")


def check_format(budget: Budget, fmt: str, args: tuple, kwargs: dict) -> None:
    """Refuse ``fmt.format(*args, **kwargs)`` when its result could outweigh MAX_TEXT: each field may
    print the heaviest argument (every argument once when all fields are ``{}``), padded to the widest
    width written (or any, when a width comes from an argument)."""
    fields, widest, automatic = 0, 0, True
    for _text, name, spec, _conversion in string.Formatter().parse(fmt):
        if name is None:
            continue
        fields, automatic = fields + 1, automatic and name == ""
        if spec and "{" in spec:
            widest = MAX_INT_ARG
            for s in [a for a in (*args, *kwargs.values()) if isinstance(a, str)]:
                for digits in re.findall(r"\d+", s):
                    check_width(digits)
        for digits in re.findall(r"\d+", spec or ""):
            widest = max(widest, check_width(digits))
    weights = [budget.weight(a, "str.format") for a in (*args, *kwargs.values())]
    printed = sum(weights) if automatic else fields * max(weights, default=0)
    if len(fmt) + printed + fields * widest > MAX_TEXT:
        raise too_big("str.format")


def checked_join(budget: Budget, sep: str, items: Any, what: str, strict: bool = False) -> str:
    """``sep.join`` of each item's text, refused as soon as the texts so far pass MAX_TEXT chars.
    ``strict``: as ``str.join``, every item must be a string."""
    parts: list[str] = []
    total = -len(sep)
    for item in items:
        if strict and not isinstance(item, str):
            raise TypeError(f"sequence item {len(parts)}: expected str instance, {type(item).__name__} found")
        text = item if isinstance(item, str) else str(item)
        if not len(parts) & 4095:
            budget.check_time()               # (a string's chars are a million items with no call between)
        total += len(sep) + len(text)
        if total > MAX_TEXT:
            raise too_big(what, "chars")
        parts.append(text)
    return budget.admit(sep.join(parts), what)


def check_replace(s: Any, old: Any = "", new: Any = "", count: Any = -1, *_: Any) -> None:
    """Refuse a replace whose result would pass MAX_TEXT (``old == ""`` inserts at every char)."""
    if not (isinstance(s, str) and isinstance(old, str) and isinstance(new, str)):
        return
    hits = len(s) + 1 if old == "" else s.count(old)
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    if len(s) + hits * (len(new) - len(old)) > MAX_TEXT:
        raise TemplateError(f"chat template: replace gives more than {MAX_TEXT:,} chars")


def check_str_method(s: str, name: str, args: tuple, kwargs: dict) -> None:
    """Refuse a call of the str method ``name`` that would build more than MAX_TEXT chars or scan
    more than MAX_SCAN."""
    if name in QUADRATIC_SCANS:
        for a in (*args, *kwargs.values()):
            if isinstance(a, str) and len(s) * len(a) > MAX_SCAN:
                raise TemplateError(f"chat template: {name} of {len(s):,} chars for {len(a):,} compares "
                                    f"more than {MAX_SCAN:,} chars")
    elif name == "replace":
        check_replace(s, *args, **kwargs)
    elif name == "expandtabs":
        size = (args or (kwargs.get("tabsize", 8),))[0]
        if isinstance(size, int) and len(s) + s.count("\t") * size > MAX_TEXT:
            raise too_big("expandtabs", "chars")


def check_indent(s: Any, width: Any = 4, first: bool = False, blank: bool = False) -> None:
    """Refuse the indent filter when the indented text would pass MAX_TEXT chars."""
    step = len(width) if isinstance(width, str) else width if isinstance(width, int) else 0
    if isinstance(s, str) and len(s) + (s.count("\n") + 2) * max(step, 0) > MAX_TEXT:
        raise too_big("filter indent", "chars")


def check_tojson(budget: Budget, value: Any, indent: Any = None, separators: Any = None) -> None:
    """Refuse tojson when the JSON text could pass MAX_TEXT chars: each item (at most a third of the
    weight) on a line of its own, indented to its depth, with its separators."""
    weight, height = budget.measure(value, "filter tojson")
    step = len(indent) if isinstance(indent, str) else indent if isinstance(indent, int) else 0
    seps = sum(len(s) for s in separators if isinstance(s, str)) if isinstance(separators, (list, tuple)) else 2
    per_item = seps + (1 + height * max(step, 0) if indent is not None else 0)
    if weight + (weight // 3 + 1) * per_item > MAX_TEXT:
        raise too_big("filter tojson", "chars")


def check_scan(s: Any, chars: Any) -> None:
    """Refuse the trim filter's strip of ``chars`` when it could compare more than MAX_SCAN chars."""
    if isinstance(s, str) and isinstance(chars, str):
        check_str_method(s, "strip", (chars,), {})


# --- lines, time and depth ----------------------------------------------------------------------

class LineTracer:
    """A ``sys.settrace`` hook that bounds a template's lines executed, wall time and macro depth.

    Only frames of compiled templates (``co_filename == "<template>"``) are traced line by line, so
    jinja's own code and the filters run at full speed; the deadline is also checked every 1024 calls
    of any Python function, so it lands inside a filter's loop (a sort's key, a map). Raising from the
    hook raises in the template.
    Recursion is bounded well before Python's own limit: under Pyodide a deep recursion overflows
    the JavaScript stack first, a fatal error that no ``except`` catches.
    """

    def __init__(self, budget: Budget, max_steps: int = MAX_STEPS):
        self.budget, self.steps, self.max_steps, self.depth, self.calls = budget, 0, max_steps, 0, 0

    def __call__(self, frame, event, arg):
        if frame.f_code.co_filename != "<template>":
            self.calls += 1
            if not self.calls & 1023:
                self.budget.check_time()
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
            if self.steps % 256 == 0:
                self.budget.check_time()
        return self.line
