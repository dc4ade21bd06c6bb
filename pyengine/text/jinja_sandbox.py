"""The Jinja sandbox for chat templates from strangers, bounded in steps, time, sizes and depth.

A template is rendered as transformers renders it (``apply_chat_template``: an
immutable sandbox, ``trim_blocks``, ``lstrip_blocks``, the ``loopcontrols``
extension, ``raise_exception``, ``strftime_now`` and a ``tojson`` filter). On
top of jinja's sandbox, which refuses unsafe attributes and mutation, every
operation a template runs passes through the bounds of
:mod:`~pyengine.text.template_bounds`: the code generator sends literal lists,
dicts and tuples, slices and ``~`` through them; the environment every
arithmetic operator, call and filter; the output every printed value. Filters
no chat template needs whose cost grows faster than their input are left out
(``pprint``, ``urlize``, ``striptags``, ``wordwrap``), as are ``lipsum`` and the
attributes of types (``dict.update(d, ...)`` would change a dict). Every failure
is a :class:`~pyengine.errors.TemplateError` with the reason.
"""

from __future__ import annotations

import json
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from datetime import datetime
from functools import lru_cache, wraps
from typing import Any

from pyengine.errors import TemplateError
from pyengine.text import template_bounds as tb
from pyengine.text.template_bounds import (
    MAX_SECONDS,
    MAX_SOURCE,
    MAX_STEPS,
    MAX_TEXT,
    Budget,
    LineTracer,
    check_int,
)

LEFT_OUT = ("pprint", "urlize", "striptags", "wordwrap")     # filters a template may not use
_BUDGET: ContextVar[Budget | None] = ContextVar("pyengine_template_budget", default=None)


def _budget() -> Budget:
    """The running render's bounds (fresh ones outside a render: the optimizer is off, so jinja runs
    nothing of a template while it compiles it)."""
    budget = _BUDGET.get()
    return budget if budget is not None else Budget()


def _admit_result(budget: Budget, result: Any, what: str) -> Any:
    """A call's or filter's result, admitted; an iterator comes back admitting each of its items."""
    if isinstance(result, Iterator) and not isinstance(result, (str, bytes)):
        return tb.admitted_items(budget, result, what)
    return budget.admit(result, what)


def _guard_filter(name: str, f: Callable) -> Callable:
    """A Jinja filter whose integer arguments (after the filtered value) are capped, checked by its row
    of _FILTER_CHECKS before it runs and admitted after."""
    skip = 2 if getattr(f, "jinja_pass_arg", None) else 1    # (context/env,) value, args...
    check = _FILTER_CHECKS.get(name)

    @wraps(f)
    def guarded(*args, **kwargs):
        budget = _budget()
        budget.check_time()
        for a in (*args[skip:], *kwargs.values()):
            check_int(a, f"argument of filter {name}")
        if check is not None:
            check(budget, *args[skip - 1:], **kwargs)
        return _admit_result(budget, f(*args, **kwargs), f"filter {name}")
    return guarded


JINJA_CALL_KWARGS = ("_loop_vars", "_block_vars")   # passed by the compiled template to Context.call

_FILTER_CHECKS: dict[str, Callable] = {
    "replace": lambda budget, s, *a, **k: tb.check_replace(s, *a, **k),
    "indent": lambda budget, s, *a, **k: tb.check_indent(s, *a, **k),
    "trim": lambda budget, s, chars=None: tb.check_scan(s, chars),
    "format": lambda budget, s, *a, **k: tb.check_printf(budget, s, k or a) if isinstance(s, str) else None,
    "tojson": lambda budget, value, *a, **k: tb.check_tojson(budget, value, *a[1:2], **{
        key: v for key, v in k.items() if key in ("indent", "separators")}),
}


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
            sort_keys: bool = False) -> str:
    """transformers' ``tojson`` filter: plain ``json.dumps`` (no HTML escaping, non-ASCII kept)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template: {str(message)[:500]}")


def _strftime_now(fmt: str) -> str:
    if len(fmt) > 256:
        raise TemplateError("chat template: strftime_now's format is longer than 256 chars")
    return datetime.now().strftime(fmt)


def _make_filters(jinja_filters: dict) -> dict:
    """Jinja's filters with transformers' tojson, a join and a sum that are bounded, each guarded."""
    from jinja2.filters import make_attrgetter
    from jinja2.utils import pass_environment

    @pass_environment
    def join(environment, value: Any, d: str = "", attribute: Any = None) -> str:
        if attribute is not None:
            value = map(make_attrgetter(environment, attribute), value)
        return tb.checked_join(_budget(), str(d), value, "filter join")

    @pass_environment
    def sum_numbers(environment, value: Any, attribute: Any = None, start: Any = 0) -> Any:
        if attribute is not None:
            value = map(make_attrgetter(environment, attribute), value)
        total = start
        for v in (start, *value):
            if not isinstance(v, (int, float)):
                raise TemplateError(f"chat template: filter sum adds numbers only, not {type(v).__name__}")
            total = v if v is start else total + v
        return total

    filters = {k: f for k, f in jinja_filters.items() if k not in LEFT_OUT}
    filters.update(tojson=_tojson, join=join, sum=sum_numbers)
    return {name: _guard_filter(name, f) for name, f in filters.items()}


def _bounded_code_generator(base: type) -> type:
    class BoundedCodeGenerator(base):
        """Jinja's code generator, with literal containers, slices and ``~`` sent through the bounds."""

        def _admitted(self, visit: Callable, node, frame, what: str) -> None:
            self.write("environment.admit(")
            visit(node, frame)
            self.write(f", {what!r})")

        def visit_List(self, node, frame) -> None:  # noqa: N802 (jinja's visitor names)
            self._admitted(super().visit_List, node, frame, "a list")

        def visit_Dict(self, node, frame) -> None:  # noqa: N802 (jinja's visitor names)
            self._admitted(super().visit_Dict, node, frame, "a dict")

        def visit_Tuple(self, node, frame) -> None:  # noqa: N802 (jinja's visitor names)
            if node.ctx != "load":               # a target: `for a, b in ...`
                return super().visit_Tuple(node, frame)
            self._admitted(super().visit_Tuple, node, frame, "a tuple")

        def visit_Getitem(self, node, frame) -> None:  # noqa: N802 (jinja's visitor names)
            from jinja2 import nodes
            if not isinstance(node.arg, nodes.Slice):
                return super().visit_Getitem(node, frame)
            self._admitted(super().visit_Getitem, node, frame, "a slice")

        def visit_Concat(self, node, frame) -> None:  # noqa: N802 (jinja's visitor names)
            self.write("environment.concat_parts((")
            for arg in node.nodes:
                self.visit(arg, frame)
                self.write(", ")
            self.write("))")
    return BoundedCodeGenerator


def _bounded_environment(base: type, code_generator: type) -> type:
    class BoundedEnvironment(base):
        """jinja's immutable sandbox with every operator, call, filter and printed value bounded."""
        code_generator_class = code_generator
        intercepted_binops = frozenset(["+", "-", "*", "/", "//", "%", "**"])

        @staticmethod
        def concat(pieces) -> str:              # the output of a macro, a call block, a {% set %} block
            return tb.checked_join(_budget(), "", pieces, "a block's output")

        @staticmethod
        def concat_parts(parts: tuple) -> str:
            return tb.checked_join(_budget(), "", parts, "'~'")

        @staticmethod
        def admit(value: Any, what: str) -> Any:
            return _budget().admit(value, what)

        def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
            budget = _budget()
            known = tb.check_binop(budget, operator, left, right)
            result = super().call_binop(context, operator, left, right)
            what = f"'{operator}'"
            return budget.admit(result, what) if known is None else budget.record(result, *known, what)

        def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
            if isinstance(obj, type) or (isinstance(obj, str) and attr not in tb.STR_METHODS):
                return False
            return super().is_safe_attribute(obj, attr, value)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (jinja's signature)
            budget, name = _budget(), getattr(__obj, "__name__", "call")
            given = {k: v for k, v in kwargs.items() if k not in JINJA_CALL_KWARGS}   # the template's own
            for a in (*args, *given.values()):
                check_int(a, f"argument of {name}")
            owner = getattr(__obj, "__self__", None)
            if isinstance(owner, str) and isinstance(__obj, (types.BuiltinMethodType, types.MethodType)):
                if name == "join" and len(args) == 1 and not given:
                    return tb.checked_join(budget, owner, args[0], "str.join", strict=True)
                tb.check_str_method(owner, name, args, given)
            return _admit_result(budget, super().call(__context, __obj, *args, **kwargs), name)

        def wrap_str_format(self, value: Any):
            wrapped = super().wrap_str_format(value)    # str.format and format_map, sandboxed by jinja
            if wrapped is None:
                return None
            fmt, is_map = value.__self__, value.__name__ == "format_map"

            @wraps(wrapped)
            def checked(*args, **kwargs):
                budget = _budget()
                tb.check_format(budget, fmt, args if not is_map else args[:1], {} if is_map else kwargs)
                return budget.admit(wrapped(*args, **kwargs), "str.format")
            return checked
    return BoundedEnvironment


@lru_cache(maxsize=1)
def _make_environment():
    """The Jinja environment transformers uses, with this module's bounds added (None without jinja2)."""
    try:
        from jinja2 import nodes
        from jinja2.compiler import CodeGenerator
        from jinja2.ext import Extension
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from jinja2.utils import Namespace, pass_eval_context
    except ImportError:
        return None

    class GenerationTag(Extension):
        """``{% generation %}...{% endgeneration %}`` (transformers' assistant mask): renders its body."""
        tags = {"generation"}

        def parse(self, parser) -> list[nodes.Node]:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class OpaqueNamespace(Namespace):
        def __repr__(self) -> str:
            return "<Namespace>"

    @pass_eval_context                 # (so jinja evaluates no printed value while it compiles)
    def finalize(eval_ctx, value: Any) -> str:
        return _budget().admit(value if isinstance(value, str) else str(value), "a printed value")

    environment = _bounded_environment(ImmutableSandboxedEnvironment, _bounded_code_generator(CodeGenerator))
    env = environment(trim_blocks=True, lstrip_blocks=True, optimized=False, finalize=finalize,
                      extensions=[GenerationTag, "jinja2.ext.loopcontrols"])
    env.filters = _make_filters(env.filters)
    del env.globals["lipsum"]                     # paragraphs of filler on demand: no template needs it
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, namespace=OpaqueNamespace)
    return env


@lru_cache(maxsize=8)
def _compile(source: str):
    """A template compiled once per source text. Raises TemplateError (jinja2 missing, too long, bad syntax)."""
    env = _make_environment()
    if env is None:
        raise TemplateError("this model's chat template needs jinja2: pip install jinja2")
    if len(source) > MAX_SOURCE:
        raise TemplateError(f"the chat template is {len(source):,} chars long: more than the {MAX_SOURCE:,} "
                            "a template may have")
    try:
        check_nesting(env, source)
        with warnings.catch_warnings():               # Python's own remarks on the code jinja wrote
            warnings.simplefilter("ignore")
            return env.from_string(source)
    except TemplateError:
        raise
    except Exception as e:  # TemplateSyntaxError, RecursionError, anything else a hostile text provokes
        raise TemplateError(f"chat template does not parse: {e} (line {getattr(e, 'lineno', '?')})") from None


BLOCKS = frozenset("if for macro call filter with block autoescape trans raw".split())   # closed by end...
_OPENING = frozenset("([{")
_FLAT_OPERATORS = frozenset("{)]},:=~")           # what builds no nested node of its own ('(' '[': a call, an item)
_WORD_OPERATORS = frozenset("not and or is in if else".split())


def check_nesting(env, source: str) -> None:
    """Refuse a template whose blocks (an ``elif`` nests one more ``if``) and brackets nest deeper than
    ``MAX_SOURCE_NESTING``, or with a tag of more than ``MAX_TAG_OPERATORS`` operators (calls, items and
    inline ``if``s included), from jinja's lexer (a loop, not a recursion), before the parser recurses
    into it. Raises TemplateError naming the line; a lexing error is jinja's own."""
    blocks: list[int] = []                         # an entry per open block: its elifs
    brackets = ops = 0
    first, assigns = False, None                   # at a tag's first word; a set tag: saw its '=' yet
    for line, kind, value in env.lex(source):
        if kind in ("block_begin", "variable_begin"):
            first, ops = kind == "block_begin", 0
        elif kind in ("block_end", "variable_end"):
            if assigns is False:                   # {% set x %}...{% endset %} opens a block
                blocks.append(0)
            first, assigns = False, None
        elif kind != "whitespace":
            if first and kind == "name":
                if value in BLOCKS:
                    blocks.append(0)
                elif value == "elif" and blocks:
                    blocks[-1] += 1
                elif value.startswith("end") and blocks:
                    blocks.pop()
                assigns = False if value == "set" else None
            first = False
            if kind == "operator":
                brackets += (value in _OPENING) - (value in ")]}")
                assigns = True if value == "=" and assigns is False else assigns
                ops += value not in _FLAT_OPERATORS
            ops += kind == "name" and value in _WORD_OPERATORS
            if len(blocks) + sum(blocks) + brackets > tb.MAX_SOURCE_NESTING:
                raise TemplateError(f"chat template: line {line}: blocks and brackets nested more than "
                                    f"{tb.MAX_SOURCE_NESTING} deep")
            if ops > tb.MAX_TAG_OPERATORS:
                raise TemplateError(f"chat template: line {line}: one tag holds more than {tb.MAX_TAG_OPERATORS} "
                                    "operators")


def check_template(source: str) -> None:
    """Compile a template (at load, before it renders anything). Raises TemplateError."""
    _compile(source)


def render_jinja(source: str, context: dict, max_steps: int = MAX_STEPS, max_seconds: float = MAX_SECONDS) -> str:
    """Render a Jinja chat template in the bounded sandbox.

    ``context`` holds the template's variables (``messages``, ``add_generation_prompt``,
    ``bos_token``, ``eos_token``, ...). Raises TemplateError on any failure: jinja2 missing, a
    syntax error, ``raise_exception``, an undefined operation, a sandbox violation, a bound.
    """
    template = _compile(source)
    budget = Budget(max_seconds)
    token, previous = _BUDGET.set(budget), sys.gettrace()
    out: list[str] = []
    n = 0
    try:
        for key, value in context.items():
            budget.know(value, f"the variable {key!r}")
        sys.settrace(LineTracer(budget, max_steps))
        for piece in template.generate(**context):
            n += len(piece)
            if n > MAX_TEXT:
                raise TemplateError(f"chat template: output longer than {MAX_TEXT:,} chars")
            out.append(piece)
    except TemplateError:
        raise
    except RecursionError:  # CPython's limit, reached through jinja internals rather than macros
        raise TemplateError("chat template: recursion too deep") from None
    except MemoryError:
        raise TemplateError("chat template: ran out of memory") from None
    except Exception as e:  # jinja errors, SecurityError, TypeError, ... from a stranger's template
        raise TemplateError(f"chat template failed: {type(e).__name__}: {str(e)[:500]}") from None
    finally:
        sys.settrace(previous)
        _BUDGET.reset(token)
    return "".join(out)


def jinja_available() -> bool:
    """True when jinja2 can be imported (the GGUF's own template can be rendered)."""
    return _make_environment() is not None
