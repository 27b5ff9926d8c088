"""The package declares what it imports: a fresh ``pip install .`` must be able to run it.

This machine's Python has more packages than a user's venv (click, for one, which typer no
longer installs since it vendors it), so a missing dependency would pass every other test.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _guarded(tree) -> set[int]:
    """ids of the import nodes in a ``try`` that catches ImportError: optional, with their own message."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                for h in node.handlers):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _imported_top_names() -> dict[str, str]:
    """Top-level module names the package imports anywhere (functions included), with one file each;
    not those it imports in a ``try`` that handles their absence (PyYAML for YAML cluster files)."""
    names: dict[str, str] = {}
    for path in sorted((ROOT / "splitwise_plan").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        optional = _guarded(tree)
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for m in mods:
                names.setdefault(m.split(".")[0], path.name)
    return names


def _declared() -> set[str]:
    """Distribution names of the dependencies and optional dependencies, normalized."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    reqs = list(project["dependencies"]) + [r for extra in project.get("optional-dependencies", {}).values()
                                            for r in extra]
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def test_every_third_party_import_is_a_declared_dependency():
    declared = _declared()
    providers = importlib.metadata.packages_distributions()
    missing = []
    for name, where in _imported_top_names().items():
        if name in sys.stdlib_module_names or name == "splitwise_plan":
            continue
        dists = {d.lower().replace("_", "-") for d in providers.get(name, [name])}
        # a module that a declared package installs with itself (sqlalchemy by optuna, say) still
        # needs its own line: the declared one may stop installing it, as typer did click
        if not dists & declared:
            missing.append(f"{name} (imported in {where}, from {sorted(dists)})")
    assert not missing, f"imported but not in pyproject.toml's dependencies: {missing}"
