"""``@defer`` and ``@stream`` over real HTTP streaming: priced whole, each payload counted as
it is sent, settled once (after the last payload, or when the client leaves mid-stream).

A Strawberry app with incremental execution on, under a real uvicorn, on a real Redis; the
client reads the ``multipart/mixed`` answer with httpx, part by part.

Prices (the default cost model): a ``Product`` weighs 2, a ``Review`` 1. The catalog holds
four products of two reviews each, so ``products(first: 10) { name ... @defer { reviews(first:
5) { stars } } }`` is priced 10 × (2 + 5) = 70 and costs 4 × (2 + 2) = 16 once it ran.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from strawberry.asgi import GraphQL
from strawberry.schema.config import StrawberryConfig

from quotaql.cost_analysis.directives import Cost, ListSize
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage
from tests.support.app_servers import UvicornServer
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import redis

    from tests.support.servers import RedisServer

TOML = """
[limits]
default_tier = "free"
min_charge = 0  # the budget looked at with a free query
cost_headers = true
[tiers.free]
capacity = 1000
refill_per_second = 0.001
[tiers.pro]
capacity = 1000
refill_per_second = 0.001
max_in_flight = 1
[tenants.acme]
tier = "pro"
"""

DEFERRED = "{ products(first: 10) { name ... @defer { reviews(first: 5) { stars } } } }"
STREAMED = "{ products(first: 10) @stream(initialCount: 1) { name } }"
WHOLE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"
CATALOG = 4
pauses = {"review": 0.0, "item": 0.0}  # seconds each deferred / streamed part waits
broken = {"review": -1}  # the product whose reviews fail (-1: none)


@strawberry.type
class Review:
    stars: int


@strawberry.type(directives=[Cost(weight="2")])
class Product:
    name: str
    number: strawberry.Private[int] = 0

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    async def reviews(self, first: int = 10) -> list[Review] | None:
        await asyncio.sleep(pauses["review"])
        if self.number == broken["review"]:
            raise ValueError("the reviews service is down")
        return [Review(stars=5) for _ in range(min(first, 2))]


@strawberry.type
class Query:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    async def products(self, first: int = 10) -> strawberry.Streamable[Product]:  # type: ignore[misc]
        for i in range(min(first, CATALOG)):
            if i:
                await asyncio.sleep(pauses["item"])
            yield Product(name=f"product {i}", number=i)

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    async def leaky(self, first: int = 10) -> strawberry.Streamable[Product]:  # type: ignore[misc]
        """Ignores its slice: two products more than asked for."""
        for i in range(first + 2):
            yield Product(name=f"product {i}", number=i)

    @strawberry.field
    def hello(self) -> str:
        return "world"


def make_app(limiter: CostLimiter, *, incremental: bool = True) -> GraphQL[Any, Any]:
    config = StrawberryConfig(enable_experimental_incremental_execution=incremental)
    return GraphQL(strawberry.Schema(query=Query, extensions=[limiter], config=config))


@pytest.fixture(autouse=True)
def _no_pauses() -> Iterator[None]:
    yield
    pauses.update(review=0.0, item=0.0)
    broken.update(review=-1)


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    return path


def parts(body: bytes) -> list[dict[str, Any]]:
    """The JSON parts of a ``multipart/mixed`` body, by their ``Content-Length``."""
    found = []
    for match in re.finditer(rb"Content-Length: (\d+)\r\n\r\n", body):
        start = match.end()
        found.append(json.loads(body[start : start + int(match.group(1))]))
    return found


def post(url: str, query: str, key: str = "acme") -> httpx.Response:
    return httpx.post(
        f"{url}/graphql",
        json={"query": query},
        headers={"X-API-Key": key, "Accept": "multipart/mixed, application/json"},
        timeout=10,
    )


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def left(limiter: CostLimiter, redis_server: RedisServer) -> float:
    """What acme has left in Redis now (the worker time every operation pays too is a
    fraction of a point: compare within one)."""
    quota = limiter.config.tier_of("acme").quota
    with redis_server.client() as client:
        return RedisStorage(client, timeout=1.0).peek("key:acme", (quota,)).remaining


def test_deferred_and_streamed_are_debited_whole_and_refunded_after_the_last_payload(
    config_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    registry = CollectorRegistry()
    limiter = CostLimiter.from_config(
        config_path,
        storage=AsyncRedisStorage.from_url(redis_server.url, timeout=1.0),
        metrics=PrometheusMetrics(registry),
    )
    with UvicornServer(make_app(limiter)) as server:
        # Run whole, the same selection costs 16 of its 70: the reference.
        whole = post(server.url, WHOLE).json()["extensions"]["cost"]
        assert (whole["requestedQueryCost"], whole["actualQueryCost"]) == (70, 16)
        before = left(limiter, redis_server)

        response = post(server.url, DEFERRED)

        assert response.headers["content-type"].startswith("multipart/mixed")
        # The headers go before the rest runs: the estimate, no actual cost yet.
        assert response.headers["X-Cost-Estimated"] == "70"
        assert "X-Cost-Actual" not in response.headers
        first, *rest = parts(response.content)
        assert first["hasNext"] is True
        assert len(first["pending"]) == CATALOG  # a deferred fragment per product
        # The initial payload says the whole price was debited; the last, what it cost.
        assert first["extensions"]["cost"]["requestedQueryCost"] == 70
        assert first["extensions"]["cost"]["actualQueryCost"] is None
        shown = first["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
        assert shown == pytest.approx(before - 70, abs=1)
        assert rest[-1]["hasNext"] is False
        assert rest[-1]["extensions"]["cost"]["actualQueryCost"] == 16
        shown = rest[-1]["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
        assert shown == pytest.approx(before - 16, abs=1)  # once the refund is applied
        assert all("cost" not in (part.get("extensions") or {}) for part in rest[:-1])
        reviews = [item for part in rest for item in part.get("incremental", ())]
        assert len(reviews) == CATALOG
        # Settled once, as the whole operation is: the 54 points that never ran came back.
        refunded = lambda: abs(left(limiter, redis_server) - (before - 16)) < 1  # noqa: E731
        assert eventually(refunded, 5) is not None

        # A streamed list is priced whole, whatever its initialCount: 10 × 2 (not 1 × 2).
        before = left(limiter, redis_server)
        pauses["item"] = 0.01
        streamed = parts(post(server.url, STREAMED).content)
        assert streamed[0]["data"] == {"products": [{"name": "product 0"}]}
        assert streamed[0]["extensions"]["cost"]["requestedQueryCost"] == 20
        items = [item for part in streamed[1:] for each in part.get("incremental", ())
                 for item in each.get("items", ())]  # fmt: skip
        assert len(items) == CATALOG - 1
        assert streamed[-1]["extensions"]["cost"]["actualQueryCost"] == 8  # four products
        refunded = lambda: abs(left(limiter, redis_server) - (before - 8)) < 1  # noqa: E731
        assert eventually(refunded, 5) is not None

        payloads = sample(registry, names.INCREMENTAL_PAYLOADS_TOTAL, tier="pro")
        assert payloads == len(rest) + len(streamed) - 1
        completed = {"tier": "pro", "outcome": names.INCREMENTAL_COMPLETED}
        assert sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **completed) == 2
        abandoned = {"tier": "pro", "outcome": names.INCREMENTAL_ABANDONED}
        assert sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **abandoned) == 0


def test_a_deferred_payload_abandoned_mid_stream_is_settled_once_and_frees_its_lease(
    config_path: Path, redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """The attack: ask for expensive deferred work, read the first part, leave. The operation
    is settled once, keeping its whole debit (what ran for the payloads never sent is not
    given back: leaving just before delivery must not buy free work), counted as abandoned,
    and its concurrency lease (max_in_flight = 1) is free for the next request at once."""
    registry = CollectorRegistry()
    client = redis_server.client()
    limiter = CostLimiter.from_config(
        config_path,
        storage=RedisStorage(client, timeout=1.0),  # a sync storage, on the server's loop
        metrics=PrometheusMetrics(registry),
    )
    abandoned = {"tier": "pro", "outcome": names.INCREMENTAL_ABANDONED}
    with client, UvicornServer(make_app(limiter)) as server:
        before = left(limiter, redis_server)
        pauses["review"] = 5.0  # the deferred fragments take their time
        with (
            httpx.Client(timeout=10) as client,
            client.stream(
                "POST",
                f"{server.url}/graphql",
                json={"query": DEFERRED},
                headers={"X-API-Key": "acme", "Accept": "multipart/mixed"},
            ) as response,  # fmt: skip
        ):
            chunks = response.iter_raw()
            read = b""
            while not parts(read):
                read += next(chunks)
            (first,) = parts(read)
            assert first["hasNext"] is True
            assert first["extensions"]["cost"]["requestedQueryCost"] == 70
            # Still streaming: the operation holds the tenant's one place.
            busy = post(server.url, "{ hello }")
            assert busy.status_code == 429
            assert busy.json()["errors"][0]["extensions"]["code"] == "TOO_MANY_CONCURRENT"
            chunks.close()
            response.close()
        # The client left (the connection closed) with the deferred fragments unsent.

        def settled() -> bool:
            gc.collect()  # a stream dropped unread ends when it is collected
            return sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **abandoned) == 1

        assert eventually(settled, 4, every=0.05) is not None
        pauses["review"] = 0.0
        # The whole debit kept, once: neither refunded nor charged twice; and the next
        # request runs (the lease was given back).
        assert left(limiter, redis_server) == pytest.approx(before - 70, abs=1)
        assert post(server.url, "{ hello }").status_code == 200
        assert sample(registry, names.INCREMENTAL_PAYLOADS_TOTAL, tier="pro") == 0
        completed = {"tier": "pro", "outcome": names.INCREMENTAL_COMPLETED}
        assert sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **completed) == 0
        assert sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **abandoned) == 1


def test_without_incremental_execution_defer_is_an_unknown_directive(config_path: Path) -> None:
    """Incremental execution off (and always on graphql-core 3.2): ``@defer`` is not in the
    schema, so the document does not validate: it is rejected (and pays ``min_charge``, 0
    here), as any invalid one, and nothing is followed."""
    registry = CollectorRegistry()
    limiter = CostLimiter.from_config(config_path, metrics=PrometheusMetrics(registry))
    schema = strawberry.Schema(query=Query, extensions=[limiter])

    result = asyncio.run(schema.execute(DEFERRED, context_value={"request": None}))

    assert result.data is None
    assert result.errors is not None
    assert "Unknown directive '@defer'" in result.errors[0].message
    assert sample(registry, names.REJECTIONS_TOTAL, code="GRAPHQL_VALIDATION_FAILED") == 1
    assert sample(registry, names.INCREMENTAL_PAYLOADS_TOTAL, tier="free") == 0


# -- in process: what is settled, and the span ----------------------------------------------


def traced(config_path: Path) -> tuple[strawberry.Schema, InMemorySpanExporter, CollectorRegistry]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    registry = CollectorRegistry()
    limiter = CostLimiter.from_config(
        config_path, metrics=PrometheusMetrics(registry), tracer_provider=provider
    )
    config = StrawberryConfig(enable_experimental_incremental_execution=True)
    return strawberry.Schema(query=Query, extensions=[limiter], config=config), exporter, registry


async def streamed(schema: strawberry.Schema, query: str) -> list[Any]:
    """The initial result's ``extensions.cost``, then each later payload's (or None)."""
    result: Any = await schema.execute(query, context_value={"request": None})
    later = [(payload.extensions or {}).get("cost") async for payload in result.subsequent_results]
    return [result.initial_result.extensions["cost"], *later]


def test_a_stream_longer_than_its_estimate_pays_its_overage_after_the_last_payload(
    config_path: Path,
) -> None:
    schema, exporter, registry = traced(config_path)
    query = "{ leaky(first: 2) @stream(initialCount: 0) { name } }"

    first, *rest = asyncio.run(streamed(schema, query))

    assert first["requestedQueryCost"] == 4  # two products of 2
    assert first["throttleStatus"]["currentlyAvailable"] == pytest.approx(1000 - 4, abs=1)
    assert rest[-1]["actualQueryCost"] == 8  # four came: 4 more charged (charge_overage)
    assert rest[-1]["throttleStatus"]["currentlyAvailable"] == pytest.approx(1000 - 8, abs=1)
    (span,) = exporter.get_finished_spans()
    events = [event.name for event in span.events]
    assert events.count(names.EVENT_INCREMENTAL_PAYLOAD) == len(rest)
    assert events[-1] == names.EVENT_OVERAGE
    payloads = [e for e in span.events if e.name == names.EVENT_INCREMENTAL_PAYLOAD]
    assert [e.attributes[names.ATTR_PAYLOAD] for e in payloads] == list(range(1, len(rest) + 1))
    assert sample(registry, names.INCREMENTAL_PAYLOADS_TOTAL, tier="free") == len(rest)


def test_an_error_in_a_deferred_fragment_is_charged_as_in_one_piece(config_path: Path) -> None:
    """What an error erased in a deferred fragment costs its estimate, as when the same
    selection runs in one piece: deferring changes neither the price nor the actual cost."""
    broken["review"] = 1
    schema, _, _ = traced(config_path)

    whole = asyncio.run(schema.execute(WHOLE, context_value={"request": None}))
    *_, last = asyncio.run(streamed(schema, DEFERRED))

    assert whole.errors is not None
    assert whole.extensions is not None
    assert last["requestedQueryCost"] == whole.extensions["cost"]["requestedQueryCost"] == 70
    assert last["actualQueryCost"] == whole.extensions["cost"]["actualQueryCost"]
    assert last["actualQueryCost"] > 16  # the failed reviews at their estimate


def test_a_stream_never_started_is_settled_when_collected(config_path: Path) -> None:
    """A server that drops the incremental result unread (its client gone before the first
    part): the operation is settled once when the stream is collected, its span ended."""
    schema, exporter, registry = traced(config_path)

    limiter = schema.extensions[0]
    assert isinstance(limiter, CostLimiter)
    quota = limiter.config.tier_of(None).quota

    async def dropped() -> float:
        result: Any = await schema.execute(DEFERRED, context_value={"request": None})
        debited = limiter.limiter.peek("anonymous", (quota,)).remaining
        del result
        gc.collect()
        await asyncio.sleep(0)  # (the finalizer runs on this loop)
        return float(limiter.limiter.peek("anonymous", (quota,)).remaining) - debited

    # Nothing refunded, nothing charged twice (but its worker time, a fraction of a point).
    assert asyncio.run(dropped()) == pytest.approx(0, abs=0.5)
    abandoned = {"tier": "free", "outcome": names.INCREMENTAL_ABANDONED}
    assert sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **abandoned) == 1
    (deferred,) = exporter.get_finished_spans()
    assert [event.name for event in deferred.events] == [names.EVENT_INCREMENTAL_ABANDONED]


@pytest.mark.parametrize(
    ("incremental", "whole"),
    [
        (
            "{ products(first: 10) @stream(initialCount: 1) { name"
            " ... @defer { reviews(first: 5) { ... @defer { stars } } } } }",
            WHOLE,
        ),
        (
            '{ ... @defer { products(first: 3) @stream(initialCount: 0) { ... @defer(label: "x")'
            " { name } reviews(first: 5) { stars } } } }",
            "{ products(first: 3) { name reviews(first: 5) { stars } } }",
        ),
        (
            "{ a: products(first: 2) { name }"
            " ... @defer { a: products(first: 2) { reviews(first: 1) { stars } } } }",
            "{ a: products(first: 2) { name reviews(first: 1) { stars } } }",
        ),
    ],
    ids=["nested-defer-in-stream", "stream-in-defer", "one-field-in-two-parts"],
)
def test_payloads_merge_as_the_client_merges_them(
    config_path: Path, incremental: str, whole: str
) -> None:
    """Deferred fragments inside streamed items and the reverse, and a field delivered in
    two parts: the price and the actual cost are the selection's in one piece."""
    schema, _, _ = traced(config_path)

    one = asyncio.run(schema.execute(whole, context_value={"request": None}))
    first, *rest = asyncio.run(streamed(schema, incremental))

    assert one.extensions is not None
    assert first["requestedQueryCost"] == one.extensions["cost"]["requestedQueryCost"]
    assert rest[-1]["actualQueryCost"] == one.extensions["cost"]["actualQueryCost"]
