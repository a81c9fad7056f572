"""The cost analysis modules import one another one way: no cycle, and the compiled schema
knows nothing of the plans made with it."""

from __future__ import annotations

import graphlib

from tests.support.imports import import_graph

PACKAGE = "quotaql.cost_analysis"


def imports() -> dict[str, set[str]]:
    """The modules of the package each of its modules imports (by their names in the
    package), wherever the import is written."""
    prefix = f"{PACKAGE}."
    return {
        name.removeprefix(prefix): {
            target.removeprefix(prefix).split(".")[0]
            for target in targets
            if target.startswith(prefix)
        }
        for name, targets in import_graph().items()
        if name.startswith(prefix)
    }


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
