"""The cost analysis modules import one another one way: no cycle, and the compiled schema
knows nothing of the plans made with it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import quotaql.cost_analysis

PACKAGE = "quotaql.cost_analysis"
FOLDER = Path(quotaql.cost_analysis.__file__).parent


def imports() -> dict[str, set[str]]:
    """The modules of the package each of its modules imports, wherever the import is
    written (at module level, in a function, under ``TYPE_CHECKING``)."""
    names = {path.stem for path in FOLDER.glob("*.py")} - {"__init__"}
    found: dict[str, set[str]] = {}
    for name in names:
        tree = ast.parse((FOLDER / f"{name}.py").read_text(encoding="utf-8"))
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package itself
                    base = f"{PACKAGE}.{base}" if base else PACKAGE
                targets.add(base)
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        found[name] = {
            target.removeprefix(f"{PACKAGE}.").split(".")[0]
            for target in targets
            if target.startswith(f"{PACKAGE}.")
        } & (names - {name})
    return found


def test_no_module_of_the_package_imports_one_that_imports_it_back() -> None:
    graph = imports()
    try:
        order = list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        raise AssertionError(f"an import cycle: {' -> '.join(error.args[1])}") from None
    assert set(order) == set(graph)


def test_the_compiled_schema_imports_nothing_of_the_plan() -> None:
    below = imports()["_compile"]
    assert below <= {"directives", "model", "_strawberry"}, below
