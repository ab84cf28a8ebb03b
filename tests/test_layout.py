"""The repository's shape: no import cycles between the project's modules, no oversized module,
and a module map (docs/module-map.md) that matches the tree.

The import graph is read from the source (every ``import`` and ``from ... import`` statement,
also those inside functions, except under ``if TYPE_CHECKING:``), so a cycle hidden behind a
function-level import is still a cycle. Run just this check with ``pytest tests/test_layout.py``.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("reference", "backends", "conformance", "opconform", "mutants", "benchmarks")
MAX_LINES = 400
MODULE_MAP = REPO / "docs" / "module-map.md"
# Modules allowed past MAX_LINES, each one cohesive thing (say why).
LONG_MODULES: dict[str, str] = {}


def _modules() -> dict[str, Path]:
    """Dotted module name -> path, for every tracked-or-new .py file of the project's packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")) if (REPO / package).is_dir() else ():
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` imports (the longest known prefix of each target)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_package = path.name == "__init__.py"
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            targets.add(module)
            targets.update(f"{module}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    resolved = set()
    for target in targets:
        parts = target.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in modules:
                if candidate != name:
                    resolved.add(candidate)
                break
    return resolved


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_cycle_finder_finds_a_cycle():
    """The checker itself: a two-module loop through a package is reported, a chain is not."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycles():
    """No two project modules import each other, directly or through others."""
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_oversized_module():
    """Every module is at most MAX_LINES lines, unless LONG_MODULES says why it is one thing."""
    long = {}
    for name, path in _modules().items():
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_LINES and name not in LONG_MODULES:
            long[name] = lines
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_module_map_matches_the_tree():
    """The module map (docs/module-map.md) names every module of the project's packages, and nothing else."""
    text = MODULE_MAP.read_text(encoding="utf-8")
    assert text.startswith("# Module map\n"), f"{MODULE_MAP} does not start with '# Module map'"
    mapped = set(re.findall(r"^\| `([\w/.-]+\.py)` \|", text, flags=re.M))
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *PACKAGES, "conftest.py"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    actual = {p for p in tracked if p.endswith(".py") and (REPO / p).exists()}
    assert mapped == actual, (
        f"in the tree, not in {MODULE_MAP.relative_to(REPO)}: {sorted(actual - mapped)}; "
        f"in the map, not in the tree: {sorted(mapped - actual)}"
    )


def test_every_package_ships_in_the_wheel():
    """pyproject's explicit package list names every package folder (an ``__init__.py``) of the
    project: opconform.capture was missing, so an installed ``opconform replay`` could not import."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {
        ".".join(init.parent.relative_to(REPO).parts)
        for package in PACKAGES
        for init in (REPO / package).rglob("__init__.py")
    }
    assert not folders - listed, (
        f"packages missing from pyproject's [tool.setuptools] packages: {folders - listed}"
    )
