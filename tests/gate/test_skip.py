"""Partial answers (``[limits] on_field_limit = "skip"``) on the gate alone, with plain
graphql-core: when only root-field quotas refuse, the operation runs without those fields,
each ``null`` with a ``RATE_LIMITED`` error at its path, and pays nothing for them.

The attack: a skipped field used to get free work. Its resolver never runs (counted), nothing
under it runs, nothing of its cost is charged (the budgets read back exactly), fifty aliases
of it run none of them while the rest pays in full, a non-nullable one refuses the whole
operation, and a subscription is refused as before. The same over real HTTP (Strawberry,
Ariadne, Redis) is tests/http/test_skip.py.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, execute, graphql, parse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate import Gate
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.limiter import Limiter

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from graphql import GraphQLSchema

SDL = (
    COST_DIRECTIVES_SDL
    + """
type Query {
  search(q: String): [Hit] @listSize(assumedSize: 5)
  mustSearch: [Hit]! @listSize(assumedSize: 5)
  products: [Hit] @listSize(assumedSize: 3)
  hello: String
  viewer: Query
}
type Hit { id: ID  details: Detail }
type Detail { text: String }
type Mutation { send: Int  record: Int }
type Subscription { ticks: Int @cost(weight: "6") }
"""
)
# search { id details { text } }: 5 hits x (1 + details 1) = 10 points; products { id }: 3.
SEARCH = "search { id details { text } }"
SEARCH_COST = 10.0
TOML = """
[limits]
on_field_limit = "skip"
retry_jitter = 0
[tiers.free]
capacity = 2000
refill_per_second = 0.001
[tiers.free.fields]
"Query.search" = { capacity = 15, refill_per_second = 0.001 }
"Query.mustSearch" = { capacity = 15, refill_per_second = 0.001 }
"Query.products" = { capacity = 50, refill_per_second = 0.001 }
"Mutation.send" = { capacity = 3, refill_per_second = 0.001 }
"Subscription.ticks" = { capacity = 10, refill_per_second = 0.001 }
[tenants.t]
tier = "free"
"""
REQUEST = {"type": "http", "client": ("203.0.113.9", 40000), "headers": [(b"x-api-key", b"t")]}


class Schema:
    """The test schema, its resolvers counting their calls (a fresh one per test: a
    skipped field's resolver is guarded in its schema for good)."""

    def __init__(self) -> None:
        self.schema: GraphQLSchema = build_schema(SDL)
        self.calls: dict[str, int] = {}
        query = self.schema.query_type
        mutation = self.schema.mutation_type
        assert query is not None
        assert mutation is not None
        hit = self.schema.get_type("Hit")
        order: list[str] = []
        self.order = order

        def counted(name: str, value: Any) -> Any:
            def resolve(*_: Any, **__: Any) -> Any:
                self.calls[name] = self.calls.get(name, 0) + 1
                order.append(name)
                return value

            return resolve

        hits = [{"id": str(i)} for i in range(5)]
        query.fields["search"].resolve = counted("search", hits)
        query.fields["mustSearch"].resolve = counted("mustSearch", hits)
        query.fields["products"].resolve = counted("products", hits[:3])
        query.fields["hello"].resolve = counted("hello", "world")
        query.fields["viewer"].resolve = counted("viewer", {})
        hit.fields["details"].resolve = counted("details", {"text": "x"})  # type: ignore[union-attr]
        mutation.fields["send"].resolve = counted("send", 1)
        mutation.fields["record"].resolve = counted("record", 2)


@pytest.fixture
def write(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str = TOML) -> Path:
        path = tmp_path / "quotaql.toml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def gate(write: Callable[[str], Path]) -> Gate:
    return Gate(load_config(write(TOML)))


def run(gate: Gate, schema: Schema, query: str) -> tuple[Any, Any]:
    """Admit, execute, settle, finish: the operation and its result (None: refused)."""
    document = parse(query)
    op = gate.admit(schema.schema, document, request=REQUEST)
    result = None
    if op.runs:
        result = execute(schema.schema, document)
        gate.settle(op, result.data, result.errors)
    gate.finish(op)
    return op, result


def left(gate: Gate, name: str) -> float:
    """What quota ``name`` of tenant ``t`` holds now (an acquire of nothing reads it)."""
    tier = gate.config.tiers["free"]
    quota = tier.quota if name == "tenant" else tier.fields[name.removeprefix("field:")]
    limiter = gate.limiter
    assert isinstance(limiter, Limiter)
    return float(limiter.acquire("key:t", 0.0, (quota,)).remaining)


def drain(gate: Gate, schema: Schema) -> None:
    """Spend ``Query.search``'s quota (15) on one search (10): 5 left, less than a search."""
    op, result = run(gate, schema, "{ " + SEARCH + " }")
    assert result is not None
    assert not result.errors
    assert op.charge == SEARCH_COST


# -- the attack: a skipped field used to get free work ------------------------------------------


def test_a_skipped_field_never_runs_nothing_below_it_runs_and_nothing_of_it_is_charged(
    gate: Gate,
) -> None:
    schema = Schema()
    drain(gate, schema)
    tenant_before = left(gate, "tenant")
    calls = dict(schema.calls)

    op, result = run(gate, schema, "{ " + SEARCH + " products { id } hello }")

    assert not op.refused
    assert op.status is None  # a success: 200
    assert result.data == {"search": None, "products": [{"id": "0"}, {"id": "1"}, {"id": "2"}],
                           "hello": "world"}  # fmt: skip
    (error,) = result.errors
    assert error.path == ["search"]
    extensions = error.extensions
    assert extensions["code"] == "RATE_LIMITED"
    assert extensions["quota"] == "field:Query.search"
    assert extensions["cost"] == SEARCH_COST
    assert extensions["remaining"] == 5
    assert extensions["retryAfter"] > 0
    # (a) and (b): neither the skipped field's resolver nor anything under it ran.
    assert schema.calls["search"] == calls["search"]
    assert schema.calls["details"] == calls["details"]
    assert schema.calls["products"] == calls.get("products", 0) + 1
    # Nothing of it charged: the tenant paid products (3) and nothing else; search's quota
    # still holds its 5, products' (50) paid its 3.
    assert op.charge == 3
    assert op.actual == 3
    assert [quota.name for quota in op.quotas] == ["tenant", "field:Query.products"]
    assert left(gate, "tenant") == pytest.approx(tenant_before - 3, abs=0.01)
    assert left(gate, "field:Query.search") == pytest.approx(5, abs=0.01)
    assert left(gate, "field:Query.products") == pytest.approx(47, abs=0.01)
    # The headers: the tightest quota (search's, nothing of it left to run this), no wait.
    headers = op.headers
    assert headers["RateLimit"].startswith('"field:Query.search";r=5;')
    assert '"field:Query.search";q=15' in headers["RateLimit-Policy"]
    assert "Retry-After" not in headers
    cost = gate.results(op)
    assert cost == {} or cost["cost"]["requestedQueryCost"] == 3


def test_fifty_aliases_of_a_skipped_field_run_none_and_the_rest_pays_in_full(
    write: Callable[[str], Path],
) -> None:
    # Room for fifty searches (500 points), spent by fifty aliases: then fifty more are
    # refused for want of budget (not COST_EXCEEDS_CAPACITY, which refuses the operation).
    text = TOML.replace('"Query.search" = { capacity = 15', '"Query.search" = { capacity = 500')
    gate = Gate(load_config(write(text)))
    schema = Schema()
    aliases = " ".join(f"s{i}: {SEARCH}" for i in range(50))
    spent, _ = run(gate, schema, "{ " + aliases + " }")
    assert spent.charge == 50 * SEARCH_COST
    assert schema.calls["search"] == 50
    tenant_before = left(gate, "tenant")

    op, result = run(gate, schema, "{ products { id details { text } } " + aliases + " }")

    assert not op.refused
    assert schema.calls["search"] == 50  # none of the fifty ran
    assert schema.calls["details"] == 250 + 3  # the first fifty's, and products'
    assert len(result.data["products"]) == 3
    assert [result.data[f"s{i}"] for i in range(50)] == [None] * 50
    assert sorted(error.path[0] for error in result.errors) == sorted(f"s{i}" for i in range(50))
    assert {error.extensions["code"] for error in result.errors} == {"RATE_LIMITED"}
    # products with details, 3 x 2 = 6 points, paid in full; the fifty searches nothing.
    assert (op.charge, op.actual, op.refunded, op.overage) == (6, 6, 0, 0)
    assert left(gate, "tenant") == pytest.approx(tenant_before - 6, abs=0.01)
    assert left(gate, "field:Query.search") == pytest.approx(0, abs=0.01)


def test_a_skipped_field_run_anyway_is_charged_what_it_ran(gate: Gate) -> None:
    # A server that executes another schema than it admitted with (no guard there): the
    # field runs, so settling leaves it in, and its cost is charged as an overage.
    schema = Schema()
    drain(gate, schema)
    other = Schema()
    document = parse("{ " + SEARCH + " hello }")
    op = gate.admit(schema.schema, document, request=REQUEST)
    assert op.skipped is not None
    assert op.charge == 1

    result = execute(other.schema, document)
    gate.settle(op, result.data, result.errors)
    gate.finish(op)

    assert other.calls["search"] == 1
    assert op.actual == SEARCH_COST
    assert op.overage == SEARCH_COST - 1


def test_a_field_that_can_never_fit_its_quota_refuses_the_operation(gate: Gate) -> None:
    # Fifty searches (500 points) against a quota of 15: COST_EXCEEDS_CAPACITY, as before
    # (waiting never helps: the client must ask for less), nothing runs, nothing is skipped.
    schema = Schema()
    aliases = " ".join(f"s{i}: {SEARCH}" for i in range(50))

    op, result = run(gate, schema, "{ hello " + aliases + " }")

    assert result is None
    assert op.code == "COST_EXCEEDS_CAPACITY"
    assert op.skipped is None
    assert schema.calls == {}


def test_a_non_nullable_field_refuses_the_whole_operation(gate: Gate) -> None:
    schema = Schema()
    run(gate, schema, "{ mustSearch { id details { text } } }")  # 10 of its 15
    calls = dict(schema.calls)
    tenant_before = left(gate, "tenant")

    op, result = run(gate, schema, "{ mustSearch { id details { text } } hello }")

    assert result is None  # no partial data: its null would have erased all of it
    assert op.refused
    assert op.status == 429
    assert op.code == "RATE_LIMITED"
    assert op.error.extensions["quota"] == "field:Query.mustSearch"
    assert "Retry-After" in op.headers
    assert schema.calls == calls  # nothing ran, hello neither
    assert left(gate, "tenant") == pytest.approx(tenant_before, abs=0.01)


def test_nothing_left_to_run_is_refused_not_answered_empty(gate: Gate) -> None:
    schema = Schema()
    drain(gate, schema)

    op, result = run(gate, schema, "{ a: search { id } b: search { id } }")  # 10 of 15

    assert result is None
    assert (op.status, op.code, op.skipped) == (429, "RATE_LIMITED", None)
    assert schema.calls["search"] == 1


def test_several_refusing_fields_are_all_skipped(write: Callable[[str], Path]) -> None:
    text = TOML.replace('"Query.products" = { capacity = 50', '"Query.products" = { capacity = 4')
    gate = Gate(load_config(write(text)))
    schema = Schema()
    drain(gate, schema)
    run(gate, schema, "{ products { id } }")  # 3 of its 4

    op, result = run(gate, schema, "{ " + SEARCH + " products { id } hello }")

    assert result.data == {"search": None, "products": None, "hello": "world"}
    assert sorted(error.extensions["quota"] for error in result.errors) == [
        "field:Query.products",
        "field:Query.search",
    ]
    assert schema.calls["search"] == 1
    assert schema.calls["products"] == 1
    assert sorted(op.skipped.errors) == ["Query.products", "Query.search"]
    assert [quota.name for quota in op.quotas] == ["tenant"]


def test_a_root_field_reached_below_the_root_is_not_skipped(gate: Gate) -> None:
    # Query.search selected through viewer (a Query) is priced with the rest and charged to
    # the tenant, not to search's quota: it runs; the root one is skipped.
    schema = Schema()
    drain(gate, schema)

    op, result = run(gate, schema, "{ " + SEARCH + " viewer { " + SEARCH + " } }")

    assert result.data["search"] is None
    assert len(result.data["viewer"]["search"]) == 5
    assert [error.path for error in result.errors] == [["search"]]
    assert schema.calls["search"] == 2
    assert op.charge == 1 + SEARCH_COST  # viewer and its search


def test_a_mutation_runs_its_other_fields_in_order_without_the_skipped_one(gate: Gate) -> None:
    # Each root mutation field runs on its own, one after the other: an error in one does
    # not stop the next. A skipped one is answered as a resolver that raised before doing
    # anything would be: no side effect, nothing charged of it.
    schema = Schema()
    run(gate, schema, "mutation { send }")  # 1 of its 3... then 2 more
    run(gate, schema, "mutation { send }")
    run(gate, schema, "mutation { send }")
    assert schema.calls["send"] == 3
    tenant_before = left(gate, "tenant")

    op, result = run(gate, schema, "mutation { record send again: record }")

    assert result.data == {"record": 2, "send": None, "again": 2}
    assert [error.path for error in result.errors] == [["send"]]
    assert schema.order[-2:] == ["record", "record"]
    assert schema.calls["send"] == 3
    # The mutation's weight (10) and its two records (0 each): send's share (1) not paid.
    assert op.charge == 10
    assert left(gate, "tenant") == pytest.approx(tenant_before - 10, abs=0.01)


def test_a_subscription_is_refused_not_skipped(gate: Gate) -> None:
    schema = Schema()
    first = gate.admit(schema.schema, parse("subscription { ticks }"), request=REQUEST)
    assert first.runs
    gate.finish(first)

    op = gate.admit(schema.schema, parse("subscription { ticks }"), request=REQUEST)
    gate.finish(op)

    assert op.refused
    assert op.code == "RATE_LIMITED"
    assert op.skipped is None


def test_refuse_the_default_and_shadow_mode_skip_nothing(write: Callable[[str], Path]) -> None:
    for text in (TOML.replace('on_field_limit = "skip"', ""),
                 TOML.replace('on_field_limit = "skip"', 'on_field_limit = "skip"\nmode = "shadow"')):  # fmt: skip
        gate = Gate(load_config(write(text)))
        schema = Schema()
        drain(gate, schema)
        op, result = run(gate, schema, "{ " + SEARCH + " hello }")
        assert op.skipped is None
        if gate.config.limits.mode == "shadow":
            assert result.data["search"] is not None  # shadow: runs, counted as refused
            assert schema.calls["search"] == 2
        else:
            assert (result, op.status, op.code) == (None, 429, "RATE_LIMITED")
            assert schema.calls["search"] == 1


# -- async, and what is counted -----------------------------------------------------------------


def test_async_resolvers_and_the_async_entry_points(gate: Gate) -> None:
    schema = Schema()
    calls = {"search": 0}

    async def search(*_: Any, **__: Any) -> list[dict[str, str]]:
        calls["search"] += 1
        return [{"id": "1"}]

    query = schema.schema.query_type
    assert query is not None
    query.fields["search"].resolve = search

    async def scenario() -> list[Any]:
        results = []
        for _ in range(2):
            document = parse("{ " + SEARCH + " hello }")
            op = await gate.admit_async(schema.schema, document, request=REQUEST)
            result = await graphql(schema.schema, "{ " + SEARCH + " hello }")
            await gate.settle_async(op, result.data, result.errors)
            gate.finish(op)
            results.append((op, result))
        return results

    (_, ran), (second, skipped) = asyncio.run(scenario())

    assert ran.data["search"] == [{"id": "1", "details": {"text": "x"}}]
    assert skipped.data == {"search": None, "hello": "world"}
    assert calls["search"] == 1
    assert second.charge == 1  # hello costs nothing: the least a request pays


def test_a_skip_is_counted_in_metrics_on_the_span_and_in_the_log(
    write: Callable[[str], Path], caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gate = Gate(load_config(write(TOML)), metrics=PrometheusMetrics(registry),
                tracer_provider=provider)  # fmt: skip
    schema = Schema()
    drain(gate, schema)

    with caplog.at_level(logging.INFO, logger=names.LOGGER):
        run(gate, schema, "{ a: search { id } b: search { id } hello }")

    labels = {"coordinate": "Query.search", "tier": "free"}
    assert registry.get_sample_value(names.ROOT_FIELDS_SKIPPED_TOTAL, labels) == 1
    # One decision, allowed: the operation ran (the refused debit is not a second one).
    decisions = registry.get_sample_value(
        names.REQUESTS_TOTAL, {"decision": "allowed", "operation_type": "query", "tier": "free"}
    )
    assert decisions == 2
    span = exporter.get_finished_spans()[-1]
    (event,) = [event for event in span.events if event.name == names.EVENT_FIELDS_SKIPPED]
    assert list(event.attributes[names.ATTR_SKIPPED]) == ["Query.search"]
    (record,) = [
        r for r in caplog.records if getattr(r, names.LOG_EVENT, None) == names.FIELDS_SKIPPED
    ]
    assert "without Query.search" in record.getMessage()
    assert record.skipped == ["Query.search"]
    assert record.limited_by == "field:Query.search"
