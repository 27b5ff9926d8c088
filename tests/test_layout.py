"""The package's shape: no import circle among its modules, no private name taken from another module,
and every module says what it is in a docstring. (The layers themselves are import-linter's contract in
pyproject.toml, which .ci/run checks.)"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "splitwise_plan"


def _modules() -> dict[str, ast.Module]:
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(f.read_text(encoding="utf-8"), filename=str(f))
    return out


def _imports(name: str, tree: ast.Module, modules) -> list[tuple[str, list[str], int]]:
    """(module imported, names taken from it, line) for every import of the package's own modules,
    at the top of the file or inside a function (a lazy import is an import all the same)."""
    found = []
    package = name if name in modules and (PACKAGE / Path(*name.split(".")[1:]) / "__init__.py").exists() \
        else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if not target.startswith("splitwise_plan"):
                continue
            names = [a.name for a in node.names]
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            others = [n for n in names if f"{target}.{n}" not in modules]
            if others or not subs:   # ``from package import module`` depends on the module, not the package
                found.append((target, others, node.lineno))
            found += [(s, [], node.lineno) for s in subs]
        elif isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names if a.name.startswith("splitwise_plan")]
    return found


def _graph(modules) -> dict[str, set[str]]:
    graph = {}
    for name, tree in modules.items():
        deps = set()
        for target, _, _ in _imports(name, tree, modules):
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target != name and target != "splitwise_plan":   # the root's lazy public API is no dependency
                deps.add(target)
        graph[name] = deps
    return graph


def _cycle(graph) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_circle_among_the_package_modules():
    modules = _modules()
    assert _cycle(_graph(modules)) is None, " -> ".join(_cycle(_graph(modules)))


def test_the_circle_finder_finds_a_circle():
    """The check above can fail: a hand-made circle is found (and a chain is not)."""
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_private_name_is_imported_across_modules():
    modules = _modules()
    taken = [f"{name}:{line} takes {target}.{n}" for name, tree in modules.items()
             for target, names, line in _imports(name, tree, modules)
             for n in names if n.startswith("_") and not n.startswith("__")]
    assert taken == []


def test_every_module_starts_with_a_docstring():
    missing = [name for name, tree in _modules().items() if not ast.get_docstring(tree)]
    assert missing == []
