"""Spans through the OpenTelemetry SDK's in-memory exporter (no patches)."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from quotaql.instrumentation import names
from quotaql.instrumentation.tenants import hashed
from quotaql.plugin import CostLimiter
from tests.adapters.strawberry.test_extension import EXPENSIVE, _dead_redis_storage, context
from tests.support import strawberry_shop as shop

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

TOML = """
[limits]
{extra}
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tenants.acme]
tier = "free"
[tenants.t]
tier = "free"
"""


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def schema_with(
    write_config: Callable[..., Path], provider: TracerProvider, extra: str = "", **kwargs: Any
) -> Any:
    path = write_config(base=TOML.format(extra=extra))
    return shop.make_schema(CostLimiter.from_config(path, tracer_provider=provider, **kwargs))


def test_a_check_span_under_the_operation_span(
    write_config: Callable[..., Path], provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    schema = schema_with(write_config, provider)
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("graphql operation") as operation:
        result = schema.execute_sync("query Shop " + EXPENSIVE, context_value=context("acme"))
    assert result.errors is None
    check, parent = exporter.get_finished_spans()
    assert parent.name == "graphql operation"
    assert check.name == names.SPAN_CHECK
    assert check.parent is not None
    assert check.parent.span_id == operation.get_span_context().span_id
    attributes = dict(check.attributes or {})
    # The worker time the operation took (its time quota's charge): measured, so not exact.
    assert 0 < attributes.pop(names.ATTR_TIME_MS) < 1_000
    assert attributes == {
        names.ATTR_OPERATION_TYPE: "query",
        names.ATTR_OPERATION_NAME: "Shop",
        names.ATTR_COST_ESTIMATED: 70.0,
        names.ATTR_COST_MODEL: "apollo",
        names.ATTR_COST_ACTUAL: 16.0,
        names.ATTR_DEPTH: 3,
        names.ATTR_TENANT: hashed("key:acme"),
        names.ATTR_IDENTITY: "key",
        names.ATTR_TIER: "free",
        names.ATTR_DECISION: "allowed",
        names.ATTR_REMAINING: pytest.approx(84, abs=0.01),
        names.ATTR_BACKEND: "memory",
    }
    (refund,) = check.events
    assert refund.name == names.EVENT_REFUND
    assert refund.attributes == {"quotaql.refund": 54.0}


def test_a_blocked_operation_has_its_retry_after(
    write_config: Callable[..., Path], provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    schema = schema_with(write_config, provider, "refund_unused = false")
    schema.execute_sync(EXPENSIVE, context_value=context("t"))
    schema.execute_sync(EXPENSIVE, context_value=context("t"))
    blocked = exporter.get_finished_spans()[-1]
    assert blocked.attributes[names.ATTR_DECISION] == "blocked"
    assert blocked.attributes[names.ATTR_RETRY_AFTER] > 0
    assert names.ATTR_COST_ACTUAL not in blocked.attributes
    assert blocked.attributes[names.ATTR_CODE] == "RATE_LIMITED"
    allowed = exporter.get_finished_spans()[0]
    assert names.ATTR_CODE not in allowed.attributes  # only a refusal has a code


def test_a_refused_document_carries_its_code(
    write_config: Callable[..., Path], provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    schema = schema_with(write_config, provider)
    spreads = "{ hello " + " ".join(f"...X{i}" for i in range(70)) + " }"
    assert schema.execute_sync(spreads, context_value=context("t")).errors
    (span,) = exporter.get_finished_spans()
    assert span.attributes[names.ATTR_DECISION] == "rejected"
    assert span.attributes[names.ATTR_CODE] == "TOO_MANY_FIELD_PAIRS"


def test_a_refused_operation_carries_its_code(
    write_config: Callable[..., Path], provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    schema = schema_with(write_config, provider)
    text = "query Q($n: Int) { products(first: $n) { name } }"
    (error,) = schema.execute_sync(
        text, variable_values={"n": [1] * 5_000}, context_value=context("t")
    ).errors
    assert error.extensions["code"] == names.TOO_MANY_VARIABLE_VALUES
    schema.execute_sync("{ nope }", context_value=context("t"))
    schema.execute_sync(EXPENSIVE, context_value=context("t"))
    many, invalid, allowed = exporter.get_finished_spans()
    assert many.attributes[names.ATTR_DECISION] == "rejected"
    assert many.attributes[names.ATTR_CODE] == names.TOO_MANY_VARIABLE_VALUES
    assert invalid.attributes[names.ATTR_CODE] == names.GRAPHQL_VALIDATION_FAILED
    assert names.ATTR_CODE not in allowed.attributes


def test_failing_open_adds_an_event(
    write_config: Callable[..., Path], provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    schema = schema_with(
        write_config, provider, 'on_backend_error = "open"', storage=_dead_redis_storage()
    )
    assert schema.execute_sync("{ hello }", context_value=context("t")).errors is None
    (span,) = exporter.get_finished_spans()
    assert span.attributes[names.ATTR_DECISION] == "fail_open"
    assert [event.name for event in span.events] == [names.EVENT_FAIL_OPEN]


def test_no_provider_no_span_and_no_opentelemetry_import() -> None:
    # In a fresh interpreter: a limiter without a tracer provider serves a query and
    # OpenTelemetry is never even imported.
    script = (
        "import sys, strawberry\n"
        "from quotaql.plugin import CostLimiter\n"
        "@strawberry.type\n"
        "class Query:\n"
        "    @strawberry.field\n"
        "    def hello(self) -> str:\n"
        "        return 'world'\n"
        "limiter = CostLimiter()\n"
        "schema = strawberry.Schema(query=Query, extensions=[limiter])\n"
        "assert schema.execute_sync('{ hello }').errors is None\n"
        "assert limiter.tracing is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
