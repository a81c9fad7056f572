"""What imports what: the framework-neutral core never needs Strawberry, the configuration
imports nothing above the values it holds, and no module imports one that imports it back."""

from __future__ import annotations

import graphlib
import subprocess
import sys

import pytest

from tests.support.imports import import_graph

NEUTRAL = (
    "quotaql",
    "quotaql.gate",
    "quotaql.contract",
    "quotaql.identity",
    "quotaql.web",
    "quotaql.config",
    "quotaql.cost_analysis",
    "quotaql.cost_analysis.directives",
    "quotaql.cost_analysis.rule",
    "quotaql.storage.redis",
    "quotaql.instrumentation.metrics",
)


def run_without(package: str, body: str) -> str:
    """Run ``body`` in a fresh interpreter in which ``package`` cannot be imported at all;
    what it printed (it fails the test if the interpreter failed)."""
    script = (
        "import sys\n"
        "class Missing:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] == {package!r}:\n"
        f"            raise ImportError('{package} is not installed here')\n"
        "sys.meta_path.insert(0, Missing())\n"
        f"{body}"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] == {package!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("module", NEUTRAL)
def test_the_core_imports_without_strawberry(module: str) -> None:
    body = (
        f"import {module}\n"
        "from graphql import build_schema, parse\n"
        "from quotaql.gate import Gate\n"
        "op = Gate().admit(build_schema('type Query { a: Int }'), parse('{ a }'))\n"
        "assert not op.refused, op.errors\n"
    )
    assert run_without("strawberry", body) == "[]"


# The limiter layer: what make pytest-gql32 leaves out, since graphql-core's version
# cannot change what it does.
GRAPHQL_FREE = (
    "quotaql.limiter",
    "quotaql.limiter.breaker",
    "quotaql.limiter.refunds",
    "quotaql.limiter.deny",
    "quotaql.policy",
    "quotaql.simulation",
    "quotaql.storage.memory",
    "quotaql.storage.redis",
    "quotaql.storage.leases",
)


def test_the_limiter_layer_imports_no_graphql_core() -> None:
    body = "".join(f"import {module}\n" for module in GRAPHQL_FREE)
    assert run_without("graphql", body) == "[]"


def test_no_module_imports_one_that_imports_it_back() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as error:
        raise AssertionError(f"an import cycle: {' -> '.join(error.args[1])}") from None


def test_the_configuration_imports_nothing_above_the_values_it_holds() -> None:
    """``quotaql.config`` reads and holds values: through every import of its modules, and
    of theirs, it reaches only itself, ``policy``, the cost model (and what that imports)
    and the errors; what an operation pays under it is the gate's."""
    graph = import_graph()

    def below(module: str) -> bool:
        return module.split(".")[:2] in (["quotaql", "config"], ["quotaql", "policy"]) or (
            module in ("quotaql.cost_analysis.model", "quotaql._graphql_compat", "quotaql.errors")
        )

    assert graph["quotaql.cost_analysis.model"] <= {"quotaql._graphql_compat", "quotaql.errors"}
    reached = {name: name for name in graph if name.split(".")[:2] == ["quotaql", "config"]}
    todo = list(reached)
    while todo:
        module = todo.pop()
        for target in graph[module] - reached.keys():
            reached[target] = f"{reached[module]} -> {target}"
            todo.append(target)
    assert [path for module, path in sorted(reached.items()) if not below(module)] == []
