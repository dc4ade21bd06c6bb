"""The package's shape: no import circle, ``js`` only in the browser stage, short functions and modules; and
every module of the page type-checked.

Read from the source with ``ast``: every import counts, a late one inside a function too (a circle
hidden by a late import is still a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "pyengine"
WEB = PACKAGE.parent / "web"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 600
BROWSER_ONLY = ("js", "pyodide")       # modules that exist only under Pyodide


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """The modules ``path`` imports, anywhere in it (``from a import b`` names a.b when b is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_circle():
    graph = {m: {i for i in imports(p) if i in MODULES and i != m} for m, p in MODULES.items()}
    # a submodule importing its own package's __init__ is how Python imports it, not a circle
    graph = {m: {i for i in deps if not m.startswith(i + ".")} for m, deps in graph.items()}
    assert cycles(graph) == []


def test_the_circle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_js_is_imported_only_by_the_browser_stage():
    users = sorted(m for m, p in MODULES.items() if any(i.split(".")[0] in BROWSER_ONLY for i in imports(p)))
    assert users and all(m.startswith("pyengine.browser.") for m in users), users


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_and_functions_are_short(name):
    source = MODULES[name].read_text()
    assert len(source.splitlines()) <= MAX_MODULE_LINES
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []


MAX_PARAMETERS = 6          # a function's parameters besides self and cls; more go in a dataclass (a Request)
MODEL_MAX_FUNCTION_LINES = 40   # pyengine/model/: the forward pass and its loader read without scrolling
MODEL_MODULES = sorted(m for m in MODULES if m == "pyengine.model" or m.startswith("pyengine.model."))


def parameter_counts(source: str) -> list[tuple[str, int]]:
    """(name, parameters besides a first ``self`` or ``cls``; ``*args`` and ``**kw`` count one each) of
    every function in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            named = a.posonlyargs + a.args
            own = named[1:] if named and named[0].arg in ("self", "cls") else named
            out.append((node.name, len(own) + len(a.kwonlyargs) + bool(a.vararg) + bool(a.kwarg)))
    return out


@pytest.mark.parametrize("name", sorted(MODULES))
def test_functions_take_at_most_6_parameters(name):
    many = [(f, n) for f, n in parameter_counts(MODULES[name].read_text()) if n > MAX_PARAMETERS]
    assert many == []


def test_the_parameter_count_leaves_out_self_and_counts_the_rest():
    source = "class A:\n    def f(self, a, b=1, *c, d, **e): pass\ndef g(cls, x): pass\ndef h(a, /, b): pass\n"
    assert parameter_counts(source) == [("g", 1), ("h", 2), ("f", 5)]


@pytest.mark.parametrize("name", MODEL_MODULES)
def test_the_model_stages_functions_are_at_most_40_lines(name):
    long = [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(MODULES[name].read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.end_lineno - node.lineno + 1 > MODEL_MAX_FUNCTION_LINES]
    assert MODEL_MODULES[0] == "pyengine.model" and len(MODEL_MODULES) > 8
    assert long == []


def test_every_page_module_begins_with_ts_check():
    """The page's modules (web/app/*.js, and app.js and the workers' beside it) ask for TypeScript's checks
    in their first line; make lint runs them (tsconfig.json, tsconfig.workers.json)."""
    modules = sorted(WEB.rglob("*.js"))
    unchecked = [p.relative_to(WEB).as_posix() for p in modules if not p.read_text().startswith("// @ts-check\n")]
    assert len([p for p in modules if p.parent.name == "app"]) >= 20
    assert unchecked == []
