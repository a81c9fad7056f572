"""The adapters' typed options: the gate's keywords (``GateOptions``), and Ariadne's and
Strawberry's own that the helpers pass on, each in step with the signature it stands for and
checked by mypy where an adapter is built."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import strawberry
from ariadne.asgi import GraphQL as ASGIGraphQL
from ariadne.asgi.handlers import GraphQLHTTPHandler, GraphQLTransportWSHandler, GraphQLWSHandler
from ariadne.wsgi import GraphQL as WSGIGraphQL

import quotaql.gate.core
import quotaql.gate.options
from quotaql import _ariadne_options, ariadne, plugin
from quotaql.gate import Gate
from quotaql.gate.adapter import Adapter
from quotaql.gate.options import FromConfigOptions, GateOptions
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.limiter import Recorder
from quotaql.plugin import schema
from quotaql.storage.leases import AsyncLeases, Leases

if TYPE_CHECKING:
    from collections.abc import Callable

SRC = Path(__file__).resolve().parent.parent / "src"

ADAPTERS = [Adapter, plugin.CostLimiter, ariadne.CostLimiter]

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
    assert GateOptions.__optional_keys__ == frozenset(keywords)
    assert not GateOptions.__required_keys__
    gate = type_hints(Gate.__init__, quotaql.gate.core)
    options = type_hints(GateOptions, quotaql.gate.options)
    assert options == {name: gate[name] for name in keywords}
    # from_config sets config_path itself.
    assert FromConfigOptions.__optional_keys__ == frozenset(keywords) - {"config_path"}


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__module__)
def test_every_adapter_takes_the_gates_config_and_typed_options(adapter: type[Adapter]) -> None:
    gate = inspect.signature(Gate.__init__).parameters
    parameters = inspect.signature(adapter.__init__).parameters
    assert parameters["config"].annotation == gate["config"].annotation
    assert parameters["options"].kind is inspect.Parameter.VAR_KEYWORD
    assert parameters["options"].annotation == "Unpack[GateOptions]"
    from_config = inspect.signature(adapter.from_config).parameters
    assert from_config["options"].annotation == "Unpack[FromConfigOptions]"


def ariadne_keywords(cls: type) -> set[str]:
    """The named parameters ``cls(...)`` takes, through the ``**kwargs`` its ``__init__``
    passes on to its bases' (Ariadne's websocket handlers)."""
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        parameters = inspect.signature(vars(klass)["__init__"]).parameters.values()
        names.update(p.name for p in parameters if p.kind not in {p.VAR_POSITIONAL, p.VAR_KEYWORD})
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            return names - {"self"}
    raise AssertionError(f"{cls} passes **kwargs on to object")


@pytest.mark.parametrize(
    ("options", "ariadne_class", "left_out"),
    [
        # The limiter refuses server-sent-event subscriptions (they escape its reach).
        (_ariadne_options._HTTPOptions, GraphQLHTTPHandler, {"subscription_handlers"}),
        (_ariadne_options._TransportWSOptions, GraphQLTransportWSHandler, set()),
        (_ariadne_options._WSOptions, GraphQLWSHandler, set()),
        # CostLimiter.asgi makes the two handlers.
        (
            _ariadne_options._ASGIOptions,
            ASGIGraphQL,
            {"schema", "http_handler", "websocket_handler"},
        ),
        (_ariadne_options._WSGIOptions, WSGIGraphQL, {"schema"}),
    ],
    ids=["http", "graphql-transport-ws", "graphql-ws", "asgi", "wsgi"],
)
def test_the_ariadne_helpers_take_ariadnes_own_keywords(
    options: type, ariadne_class: type, left_out: set[str]
) -> None:
    assert set(options.__annotations__) == ariadne_keywords(ariadne_class) - left_out
    assert not options.__required_keys__


def test_the_websocket_helper_takes_either_handlers_keywords() -> None:
    either = ariadne_keywords(GraphQLTransportWSHandler) | ariadne_keywords(GraphQLWSHandler)
    assert set(_ariadne_options._EitherWebsocketOptions.__annotations__) == either


def test_the_rate_limit_field_takes_strawberrys_field_keywords() -> None:
    parameters = inspect.signature(strawberry.field).parameters
    assert set(schema._FieldOptions.__annotations__) == set(parameters) - {"resolver"}
    assert not schema._FieldOptions.__required_keys__


SNIPPET = """\
from ariadne import make_executable_schema

from quotaql.ariadne import CostLimitedHTTPHandler
from quotaql.ariadne import CostLimiter as AriadneLimiter
from quotaql.plugin import CostLimiter
from quotaql.plugin.schema import rate_limit_field
from quotaql.storage.memory import MemoryStorage

CostLimiter(storage=MemoryStorage(), config_path="quotaql.toml", pressure=lambda: 0.5)
limiter = AriadneLimiter(None, quiet_logs=False, storage=MemoryStorage(), tracer_provider=1)
schema = make_executable_schema("type Query { hello: String }")
limiter.asgi(schema, debug=True, logger="ariadne", websocket_protocol="graphql-ws")
limiter.wsgi(schema, debug=True, middleware=[])
limiter.http_handler(extensions=[])
CostLimitedHTTPHandler(limiter, middleware=[])
limiter.websocket_handler(protocol="graphql-ws", keepalive=5.0)
CostLimiter.from_config("quotaql.toml", storage=MemoryStorage(), quiet_logs=False)
AriadneLimiter.from_config("quotaql.toml").wsgi(schema)
rate_limit_field(name="budget", deprecation_reason="use viewer.budget")
CostLimiter(storge=MemoryStorage())  # error: call-arg
CostLimiter(pressure=0.5)  # error: arg-type
AriadneLimiter(storge=MemoryStorage())  # error: call-arg
AriadneLimiter(config_path=3)  # error: arg-type
limiter.wsgi(schema, debgu=True)  # error: call-arg
limiter.asgi(schema, http_handler=None)  # error: call-arg
limiter.http_handler(subscription_handlers=[])  # error: call-arg
limiter.websocket_handler(keepalive=5.0)  # error: call-overload
CostLimitedHTTPHandler(limiter, extensions=3)  # error: arg-type
CostLimiter.from_config("quotaql.toml", storge=MemoryStorage())  # error: call-arg
AriadneLimiter.from_config("quotaql.toml", config_path="other.toml")  # error: call-arg
rate_limit_field(descripton="the budget")  # error: call-arg
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
        for number, line in enumerate(SNIPPET.splitlines(), start=1)
        if "# error: " in line
    }
    assert found == expected, done.stdout + done.stderr
    assert done.returncode == 1
