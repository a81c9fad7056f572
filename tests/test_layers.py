"""The house keeps its shape: each layer imports only the layers below it (docs/architecture.md
draws them), the offline tools stay out of the request path, no module or class grows past
what a reader can hold, the adapters' front doors are typed, and the mode is an enum."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

import pytest

from tests.support.imports import import_graph, module_paths

if TYPE_CHECKING:
    from pathlib import Path

MAX_MODULE_LINES = 900
MAX_CLASS_LINES = 700

# Each layer, and what it may import (besides itself). A layer is a top-level module or a
# package; ``instrumentation.names`` (every metric, label and event name: constants only)
# stands apart, at the bottom, so that the limiter layer may name what it counts.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "web": set(),
    "asgi": set(),
    "_graphql_compat": set(),
    "instrumentation.names": set(),
    "policy": {"errors"},
    "cost_analysis": {"errors", "_graphql_compat"},
    "storage": {"policy", "errors", "instrumentation.names"},
    "_flow": {"policy", "storage"},
    "limiter": {"storage", "policy", "errors", "_flow", "instrumentation.names"},
    "config": {"policy", "cost_analysis", "errors", "_graphql_compat"},
    "contract": {"policy", "errors"},
    "instrumentation": {"limiter", "policy", "errors", "instrumentation.names", "storage"},
    "identity": {"config", "_flow", "web", "errors", "instrumentation", "instrumentation.names"},
    "adaptive": {"config", "policy", "errors", "instrumentation", "instrumentation.names"},
    "gate": {
        "_flow",
        "adaptive",
        "config",
        "contract",
        "cost_analysis",
        "errors",
        "identity",
        "instrumentation",
        "instrumentation.names",
        "limiter",
        "policy",
        "storage",
        "web",
    },
    "plugin": {
        "gate",
        "config",
        "contract",
        "cost_analysis",
        "errors",
        "identity",
        "policy",
        "web",
        "instrumentation",
        "instrumentation.names",
        "asgi",
    },
    "_ariadne_options": set(),  # Ariadne's keyword options, typed (typing only)
    "ariadne": {
        "_ariadne_options",
        "gate",
        "config",
        "contract",
        "cost_analysis",
        "errors",
        "identity",
        "policy",
        "web",
        "instrumentation",
        "instrumentation.names",
        "asgi",
    },
}
# The offline tools: generators, the command line, the demo, the simulation. They may import
# anything; nothing above may import them.
OFFLINE = {"observability", "tune", "simulation", "cli", "demo"}


# The modules by their names in the package (``gate.core``), their files and what each imports.
MODULES: dict[str, Path] = {
    name.removeprefix("quotaql."): path
    for name, path in module_paths().items()
    if name != "quotaql"
}
IMPORTS: dict[str, set[str]] = {
    name.removeprefix("quotaql."): {target.removeprefix("quotaql.") for target in targets}
    for name, targets in import_graph().items()
    if name != "quotaql"
}


def _layer(module: str) -> str:
    """``gate`` for ``gate.core``; ``instrumentation.names`` stands alone."""
    if module == "instrumentation.names":
        return module
    return module.split(".", maxsplit=1)[0]


def test_every_layer_is_known() -> None:
    layers = {_layer(module) for module in MODULES}
    assert layers <= ALLOWED.keys() | OFFLINE, layers - ALLOWED.keys() - OFFLINE


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) in ALLOWED))
def test_a_module_imports_only_the_layers_below_its_own(module: str) -> None:
    layer = _layer(module)
    reached = {_layer(name) for name in IMPORTS[module]} - {layer}
    assert reached <= ALLOWED[layer], (
        f"quotaql.{module} ({layer}) imports {sorted(reached - ALLOWED[layer])}"
    )


def test_the_layer_table_has_no_cycle() -> None:
    import graphlib

    graphlib.TopologicalSorter(ALLOWED).prepare()


def test_nothing_in_the_request_path_imports_an_offline_tool() -> None:
    for module in MODULES:
        if _layer(module) in OFFLINE:
            continue
        reached = {_layer(name) for name in IMPORTS[module]} & OFFLINE
        assert not reached, f"quotaql.{module} imports the offline {sorted(reached)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_or_class_is_too_long_to_read(module: str) -> None:
    source = MODULES[module].read_text(encoding="utf-8")
    assert len(source.splitlines()) <= MAX_MODULE_LINES, f"quotaql.{module}"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            assert lines <= MAX_CLASS_LINES, f"quotaql.{module}.{node.name}: {lines} lines"


ADAPTERS = [m for m in MODULES if _layer(m) in {"plugin", "ariadne"} or m == "gate.adapter"]


@pytest.mark.parametrize("module", sorted(ADAPTERS))
def test_no_adapter_takes_untyped_options(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.args.kwarg:
            annotation = node.args.kwarg.annotation
            assert annotation is None or ast.unparse(annotation) != "Any", (
                f"quotaql.{module}.{node.name}(**{node.args.kwarg.arg}: Any)"
            )


def _compares_mode_with_a_string(node: ast.Compare) -> bool:
    sides = [node.left, *node.comparators]
    names = {
        side.attr if isinstance(side, ast.Attribute) else getattr(side, "id", None)
        for side in sides
    }
    strings = {side.value for side in sides if isinstance(side, ast.Constant)}
    return "mode" in names and bool(strings & {"enforce", "shadow", "off"})


def test_the_mode_is_never_compared_as_a_string() -> None:
    found = [
        f"quotaql.{module}:{node.lineno}"
        for module, path in MODULES.items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Compare) and _compares_mode_with_a_string(node)
    ]
    assert not found, found
