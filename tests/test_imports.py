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
