"""The code's layout: `app/main.py` a short composition of parts, and no import cycle among the modules of
`app/` and `loaders/`, at module level, inside a function or under `if TYPE_CHECKING:` (a deferred import is
for start-up time and a type-only one for the checker, neither a way around a cycle: a reader, and the tools
that draw the import graph, follow them all). Read from the source, nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "loaders")
MAIN_LINES = 200


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(path: Path, name: str, known: set[str]) -> set[str]:
    """The project's modules a module imports, anywhere in it (type-only imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    named: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            named.add(base)
            named.update(f"{base}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return {m for m in named if m in known and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, name, set(known)) for name, path in known.items()}


def test_no_import_cycle() -> None:
    graph = import_graph()
    assert "app.main" in graph and graph["app.main"], "the import graph was not read"
    assert cycles(graph) == []


def test_the_cycle_check_sees_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_main_is_a_short_composition() -> None:
    lines = len((ROOT / "app" / "main.py").read_text().splitlines())
    assert lines < MAIN_LINES, f"app/main.py has {lines} lines: move a part into its own module"
