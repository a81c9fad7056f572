"""What imports what: the framework-neutral core never needs Strawberry."""

from __future__ import annotations

import subprocess
import sys

import pytest

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
