"""Resolver time on the sampled operations: timed per schema coordinate, in the metrics per
call and per subject, and nothing at all on the operations that are not sampled.

Through Strawberry (the extension a sampled request gets implements ``resolve``; the others
do not, so Strawberry's middleware manager holds nothing for them), Ariadne (the handler's
middleware for a sampled request only) and graphql-core's own ``graphql()``.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
from graphql import build_schema, graphql, graphql_sync
from prometheus_client import CollectorRegistry

from quotaql.gate import timing
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.instrumentation.resolvers import SubjectMeans
from quotaql.plugin import CostLimiter

if TYPE_CHECKING:
    from pathlib import Path

SLEEP = 0.01


def sample_value(registry: CollectorRegistry, name: str, coordinate: str) -> float | None:
    return registry.get_sample_value(name, {"coordinate": coordinate})


def config_file(tmp_path: Path, sample: float) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(
        f"[cost]\ntuning_sample = {sample}\n\n[tiers.free]\ncapacity = 1000000\n"
        "refill_per_second = 100000\n",
        encoding="utf-8",
    )
    return path


# -- the timer itself ----------------------------------------------------------------------------

SDL = "type Query { fast: Int items: [Item!]! slow: Int broken: Int } type Item { name: String }"


class Root:
    def fast(self, info: Any) -> int:
        return 1

    def items(self, info: Any) -> list[dict[str, str]]:
        return [{"name": "a"}, {"name": "b"}, {"name": "c"}]

    async def slow(self, info: Any) -> int:
        await asyncio.sleep(SLEEP)
        return 2

    def broken(self, info: Any) -> int:
        raise ValueError("no")


def test_the_timer_times_each_call_per_coordinate_an_awaitable_to_its_end() -> None:
    schema = build_schema(SDL)
    timer = timing.ResolverTimer()
    result = asyncio.run(graphql(schema, "{ __typename fast slow broken items { name } }", Root(),
                                 middleware=[timer]))  # fmt: skip
    assert result.data == {"__typename": "Query", "fast": 1, "slow": 2, "broken": None,
                           "items": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}  # fmt: skip
    times = timer.times
    assert sorted(times) == ["Item.name", "Query.broken", "Query.fast", "Query.items",
                             "Query.slow"]  # fmt: skip
    assert times["Item.name"].calls == 3  # once per item, one tally
    assert times["Query.broken"].calls == 1  # a resolver that raised is timed too
    assert times["Query.slow"].seconds >= SLEEP  # awaited: its sleep counted
    assert times["Query.fast"].calls == 1
    assert sum(times["Item.name"].counts) == 3


def test_an_operation_run_without_the_timer_is_not_timed() -> None:
    schema = build_schema(SDL)
    timer = timing.ResolverTimer()
    graphql_sync(schema, "{ fast }", Root(), middleware=[timer])
    graphql_sync(schema, "{ fast items { name } }", Root())  # another execution: no timer
    assert list(timer.times) == ["Query.fast"]
    assert timer.times["Query.fast"].calls == 1


def test_subject_means_keep_at_most_k_subjects_and_one_mean_each() -> None:
    means = SubjectMeans(4)
    for who in range(100):
        means.add(who, 2, 0.02)
        means.add(who, 2, 0.02)
    assert len(means.sums) < 8  # at most 2k while the period fills
    assert means.close() == [0.01] * 4  # the four smallest hashes, their mean per call
    assert means.close() == []


# -- Strawberry ---------------------------------------------------------------------------------


@strawberry.type
class Item:
    name: str


@strawberry.type
class Query:
    @strawberry.field
    async def slow(self) -> int:
        await asyncio.sleep(SLEEP)
        return 1

    @strawberry.field
    def items(self) -> list[Item]:
        return [Item(name="a"), Item(name="b")]


@pytest.mark.parametrize("sample", [0.0, 1.0])
def test_strawberry_times_only_the_sampled_requests(tmp_path: Path, sample: float) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = CostLimiter.from_config(config_file(tmp_path, sample), metrics=metrics)
    schema = strawberry.Schema(query=Query, extensions=[limiter])
    # What Strawberry makes its middleware of: the extensions that implement resolve.
    implements = [limiter()._implements_resolve() for _ in range(20)]
    assert implements == [sample == 1.0] * 20
    for _ in range(3):
        result = asyncio.run(schema.execute("{ slow items { name } }"))
        assert result.errors is None, result.errors
    metrics.flush(final=True)
    calls = sample_value(registry, "quotaql_resolver_seconds_count", "Query.slow")
    if sample == 0.0:
        assert calls is None  # not a single series
        return
    assert calls == 3
    seconds = sample_value(registry, "quotaql_resolver_seconds_sum", "Query.slow")
    assert seconds is not None
    assert seconds >= 3 * SLEEP
    assert sample_value(registry, "quotaql_resolver_seconds_count", "Item.name") == 6
    # One subject (anonymous), one minute: one observation, whatever its calls.
    assert sample_value(registry, "quotaql_resolver_subject_seconds_count", "Item.name") == 1


def test_the_timed_operations_are_those_whose_list_sizes_are_kept(tmp_path: Path) -> None:
    """One draw per request: list sizes and resolver times come from the same operations."""
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = CostLimiter.from_config(config_file(tmp_path, 0.5), metrics=metrics)
    schema = strawberry.Schema(query=Query, extensions=[limiter])
    for _ in range(60):
        schema.execute_sync("{ items { name } }")
    metrics.flush(final=True)
    timed = sample_value(registry, "quotaql_resolver_seconds_count", "Query.items")
    lists = sample_value(registry, "quotaql_list_operation_max_items_count", "Query.items")
    assert timed is not None
    assert 5 <= timed <= 55  # about half of 60
    assert lists == timed


@pytest.mark.parametrize("sample", [0.0, 1.0])
def test_an_unsampled_request_costs_no_resolver_wrapper(tmp_path: Path, sample: float) -> None:
    """The hot path: with nothing sampled, no frame of the timer sits between Strawberry and
    a resolver (with everything sampled, one does: the check can fail)."""
    stacks: list[set[str]] = []

    @strawberry.type
    class Peek:
        @strawberry.field
        def depth(self) -> int:
            frame: Any = sys._getframe(1)
            files = set()
            while frame is not None:
                files.add(frame.f_code.co_filename)
                frame = frame.f_back
            stacks.append(files)
            return 1

    metrics = PrometheusMetrics(CollectorRegistry())
    limiter = CostLimiter.from_config(config_file(tmp_path, sample), metrics=metrics)
    schema = strawberry.Schema(query=Peek, extensions=[limiter])
    for _ in range(5):
        assert schema.execute_sync("{ depth }").data == {"depth": 1}
    wrapped = [any(f.endswith(("gate/timing.py", "gate\\timing.py")) for f in s) for s in stacks]
    assert wrapped == [sample == 1.0] * 5


# -- Ariadne ------------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["asgi", "wsgi"])
@pytest.mark.parametrize("sample", [0.0, 1.0])
def test_ariadne_times_only_the_sampled_requests(
    tmp_path: Path, sample: float, server: str
) -> None:
    from ariadne import QueryType, make_executable_schema

    from quotaql.ariadne import CostLimiter as AriadneLimiter

    query = QueryType()
    query.set_field("fast", lambda *_: 1)
    if server == "asgi":

        async def resolve_slow(*_: Any) -> int:
            await asyncio.sleep(SLEEP)
            return 2
    else:

        def resolve_slow(*_: Any) -> int:
            time.sleep(SLEEP)
            return 2

    query.set_field("slow", resolve_slow)
    schema = make_executable_schema("type Query { slow: Int fast: Int }", query)
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    limiter = AriadneLimiter.from_config(config_file(tmp_path, sample), metrics=metrics)
    body = {"query": "{ slow fast }"}
    if server == "asgi":
        app = limiter.asgi(schema)

        async def ask() -> list[Any]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                return [(await client.post("/graphql", json=body)).json() for _ in range(3)]

        answers = asyncio.run(ask())
    else:
        wsgi = limiter.wsgi(schema)
        answers = [wsgi_post(wsgi, body) for _ in range(3)]
    assert [answer["data"] for answer in answers] == [{"slow": 2, "fast": 1}] * 3
    metrics.flush(final=True)
    calls = sample_value(registry, "quotaql_resolver_seconds_count", "Query.slow")
    if sample == 0.0:
        assert calls is None
        return
    assert calls == 3
    seconds = sample_value(registry, "quotaql_resolver_seconds_sum", "Query.slow")
    assert seconds is not None
    assert seconds >= 3 * SLEEP
    assert sample_value(registry, "quotaql_resolver_seconds_count", "Query.fast") == 3


def wsgi_post(app: Any, body: dict[str, Any]) -> Any:
    raw = json.dumps(body).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
        "REMOTE_ADDR": "203.0.113.9",
    }
    chunks = app(environ, lambda status, headers: None)
    return json.loads(b"".join(chunks))


# -- the graphql-core recipe --------------------------------------------------------------------


def test_the_graphql_core_recipe_times_a_sampled_operation(tmp_path: Path) -> None:
    from graphql import execute

    from quotaql.gate import Gate

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    gate = Gate.from_config(config_file(tmp_path, 1.0), metrics=metrics)
    schema = build_schema(SDL)
    request = {"type": "http", "client": ("203.0.113.9", 5123), "headers": []}
    op = gate.begin(request=request)
    document = gate.parse(schema, "{ fast items { name } }", op=op)
    op = gate.admit(schema, document, None, None, op=op)
    assert op.runs
    timer = timing.sample(gate)
    assert timer is not None  # tuning_sample = 1.0
    result = execute(schema, document, Root(), middleware=[timer])
    timing.attach(op, timer)
    gate.settle(op, result.data, result.errors)
    gate.finish(op)
    metrics.flush(final=True)
    assert sample_value(registry, "quotaql_resolver_seconds_count", "Item.name") == 3
    assert sample_value(registry, "quotaql_resolver_subject_seconds_count", "Item.name") == 1
    # The same draw kept its list sizes.
    assert sample_value(registry, "quotaql_list_operation_max_items_count", "Query.items") == 1
