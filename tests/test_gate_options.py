"""The adapters' typed options: ``GateOptions`` is the gate's keywords, and mypy checks them."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import quotaql.gate.core
import quotaql.gate.options
from quotaql import ariadne, plugin
from quotaql.gate import Gate
from quotaql.gate.options import GateOptions
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.limiter import Recorder
from quotaql.storage.leases import AsyncLeases, Leases

if TYPE_CHECKING:
    from collections.abc import Callable

SRC = Path(__file__).resolve().parent.parent / "src"

ADAPTERS = [plugin.CostLimiter, ariadne.CostLimiter]

# What the two modules import for their annotations only.
TYPE_ONLY = {
    "PrometheusMetrics": PrometheusMetrics,
    "Recorder": Recorder,
    "Leases": Leases,
    "AsyncLeases": AsyncLeases,
}


def type_hints(obj: Callable[..., Any] | type, module: Any) -> dict[str, Any]:
    """``obj``'s annotations evaluated in ``module`` (with its type-only imports)."""
    names = {**vars(quotaql.gate.core), **vars(module), **TYPE_ONLY}
    hints = typing.get_type_hints(obj, localns=names)
    hints.pop("return", None)
    return hints


def test_gate_options_are_the_gates_keyword_parameters_with_their_types() -> None:
    parameters = inspect.signature(Gate.__init__).parameters.values()
    keywords = [p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert list(GateOptions.__annotations__) == keywords
    assert GateOptions.__optional_keys__ == frozenset(keywords)
    gate = type_hints(Gate.__init__, quotaql.gate.core)
    options = type_hints(GateOptions, quotaql.gate.options)
    assert options == {name: gate[name] for name in keywords}


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__module__)
def test_every_adapter_takes_the_gates_config_and_typed_options(adapter: type) -> None:
    gate = inspect.signature(Gate.__init__).parameters
    parameters = inspect.signature(adapter.__init__).parameters
    assert parameters["config"].annotation == gate["config"].annotation
    assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
    assert parameters["options"].annotation == "Unpack[GateOptions]"


SNIPPET = """\
from quotaql.ariadne import CostLimiter as AriadneLimiter
from quotaql.plugin import CostLimiter
from quotaql.storage.memory import MemoryStorage

CostLimiter(storage=MemoryStorage(), config_path="quotaql.toml", pressure=lambda: 0.5)
AriadneLimiter(None, quiet_logs=False, storage=MemoryStorage(), tracer_provider=object())
CostLimiter(storge=MemoryStorage())  # error: call-arg
CostLimiter(pressure=0.5)  # error: arg-type
AriadneLimiter(storge=MemoryStorage())  # error: call-arg
AriadneLimiter(config_path=3)  # error: arg-type
"""


def test_mypy_strict_checks_the_options_where_an_adapter_is_built(tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(SNIPPET)
    env = {**os.environ, "MYPYPATH": str(SRC), "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"),
         "--no-error-summary", "snippet.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    found = {
        (int(line.split(":")[1]), line.rpartition("[")[2].rstrip("]"))
        for line in done.stdout.splitlines()
        if ": error: " in line
    }
    expected = {
        (number, line.rpartition("# error: ")[2])
        for number, line in enumerate(textwrap.dedent(SNIPPET).splitlines(), start=1)
        if "# error: " in line
    }
    assert found == expected, done.stdout + done.stderr
    assert done.returncode == 1
