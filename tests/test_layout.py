"""The package's shape: no import circle, ``js`` only in the browser stage, short functions and modules.

Read from the source with ``ast``: every import counts, a late one inside a function too (a circle
hidden by a late import is still a circle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pyengine"
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


# pyengine/model/: the forward pass and its loader read without scrolling, a dataclass where more is passed
MODEL_MAX_FUNCTION_LINES = 40
MODEL_MAX_PARAMETERS = 6              # besides self and cls
MODEL_MODULES = sorted(m for m in MODULES if m == "pyengine.model" or m.startswith("pyengine.model."))


def model_functions(name: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [node for node in ast.walk(ast.parse(MODULES[name].read_text()))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]


def parameter_count(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Its parameters besides self and cls, ``*args`` and ``**kwargs`` one each."""
    a = node.args
    names = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs] + [p.arg for p in (a.vararg, a.kwarg) if p]
    return len([n for n in names if n not in ("self", "cls")])


@pytest.mark.parametrize("name", MODEL_MODULES)
def test_the_model_stages_functions_are_at_most_40_lines(name):
    long = [(f.name, f.end_lineno - f.lineno + 1) for f in model_functions(name)
            if f.end_lineno - f.lineno + 1 > MODEL_MAX_FUNCTION_LINES]
    assert long == []


@pytest.mark.parametrize("name", MODEL_MODULES)
def test_the_model_stages_functions_take_at_most_6_parameters(name):
    many = [(f.name, parameter_count(f)) for f in model_functions(name) if parameter_count(f) > MODEL_MAX_PARAMETERS]
    assert many == []


def test_the_parameter_count_skips_self_and_counts_the_rest():
    f = ast.parse("def f(self, a, b=1, /, c=2, *args, d, e=3, **kw): pass").body[0]
    assert parameter_count(f) == 7 and MODEL_MODULES[0] == "pyengine.model" and len(MODEL_MODULES) > 8
