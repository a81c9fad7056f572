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


@pytest.mark.parametrize("module", NEUTRAL)
def test_the_core_imports_without_strawberry(module: str) -> None:
    # In a fresh interpreter whose Strawberry cannot be imported at all.
    script = (
        "import sys\n"
        "class NoStrawberry:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'strawberry' or name.startswith('strawberry.'):\n"
        "            raise ImportError('strawberry is not installed here')\n"
        "sys.meta_path.insert(0, NoStrawberry())\n"
        f"import {module}\n"
        "from graphql import build_schema, parse\n"
        "from quotaql.gate import Gate\n"
        "op = Gate().admit(build_schema('type Query { a: Int }'), parse('{ a }'))\n"
        "assert not op.refused, op.errors\n"
        "print(sorted(m for m in sys.modules if m.startswith('strawberry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# The limiter layer: what make pytest-gql32 leaves out, since graphql-core's version
# cannot change what it does.
GRAPHQL_FREE = (
    "quotaql.limiter",
    "quotaql.breaker",
    "quotaql.refunds",
    "quotaql.policy",
    "quotaql.simulation",
    "quotaql.storage.memory",
    "quotaql.storage.redis",
    "quotaql.storage.leases",
)


def test_the_limiter_layer_imports_no_graphql_core() -> None:
    script = (
        "import sys\n"
        "class NoGraphql:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'graphql' or name.startswith('graphql.'):\n"
        "            raise ImportError('graphql-core is not installed here')\n"
        "sys.meta_path.insert(0, NoGraphql())\n"
        + "".join(f"import {module}\n" for module in GRAPHQL_FREE)
        + "print(sorted(m for m in sys.modules if m.split('.')[0] == 'graphql'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
