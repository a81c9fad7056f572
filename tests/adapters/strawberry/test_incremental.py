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
[tiers.free]
capacity = 100
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


@strawberry.type
class Review:
    stars: int


@strawberry.type(directives=[Cost(weight="2")])
class Product:
    name: str

    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    async def reviews(self, first: int = 10) -> list[Review]:
        await asyncio.sleep(pauses["review"])
        return [Review(stars=5) for _ in range(min(first, 2))]


@strawberry.type
class Query:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    async def products(self, first: int = 10) -> strawberry.Streamable[Product]:  # type: ignore[misc]
        for i in range(min(first, CATALOG)):
            if i:
                await asyncio.sleep(pauses["item"])
            yield Product(name=f"product {i}")

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


def available(url: str) -> float:
    """What acme has left, as a free query's answer shows it."""
    cost = post(url, "{ hello }").json()["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 0
    return float(cost["throttleStatus"]["currentlyAvailable"])


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
        before = available(server.url)

        response = post(server.url, DEFERRED)

        assert response.headers["content-type"].startswith("multipart/mixed")
        first, *rest = parts(response.content)
        assert first["hasNext"] is True
        assert len(first["pending"]) == CATALOG  # a deferred fragment per product
        # The initial payload says the whole price was debited; the last, what it cost.
        assert first["extensions"]["cost"]["requestedQueryCost"] == 70
        assert first["extensions"]["cost"]["actualQueryCost"] is None
        assert first["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == before - 70
        assert rest[-1]["hasNext"] is False
        assert rest[-1]["extensions"]["cost"]["actualQueryCost"] == 16
        assert all("cost" not in (part.get("extensions") or {}) for part in rest[:-1])
        reviews = [item for part in rest for item in part.get("incremental", ())]
        assert len(reviews) == CATALOG
        # Settled once, as the whole operation is: the 54 points that never ran came back.
        assert eventually(lambda: available(server.url) == before - 16, 5) is not None

        # A streamed list is priced whole, whatever its initialCount: 10 × 2 (not 1 × 2).
        before = available(server.url)
        pauses["item"] = 0.01
        streamed = parts(post(server.url, STREAMED).content)
        assert streamed[0]["data"] == {"products": [{"name": "product 0"}]}
        assert streamed[0]["extensions"]["cost"]["requestedQueryCost"] == 20
        items = [item for part in streamed[1:] for each in part.get("incremental", ())
                 for item in each.get("items", ())]  # fmt: skip
        assert len(items) == CATALOG - 1
        assert streamed[-1]["extensions"]["cost"]["actualQueryCost"] == 8  # four products
        assert eventually(lambda: available(server.url) == before - 8, 5) is not None

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
    limiter = CostLimiter.from_config(
        config_path,
        storage=RedisStorage(redis_server.client(), timeout=1.0),
        metrics=PrometheusMetrics(registry),
    )
    abandoned = {"tier": "pro", "outcome": names.INCREMENTAL_ABANDONED}
    with UvicornServer(make_app(limiter)) as server:
        before = available(server.url)
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
        # The next request runs (the lease was given back), and finds the whole debit kept,
        # once: neither refunded nor charged twice.
        assert available(server.url) == before - 70
        assert sample(registry, names.INCREMENTAL_PAYLOADS_TOTAL, tier="pro") == 0
        completed = {"tier": "pro", "outcome": names.INCREMENTAL_COMPLETED}
        assert sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **completed) == 0
        assert sample(registry, names.INCREMENTAL_OPERATIONS_TOTAL, **abandoned) == 1


def test_without_incremental_execution_defer_is_an_unknown_directive(config_path: Path) -> None:
    """Incremental execution off (and always on graphql-core 3.2): ``@defer`` is not in the
    schema, so the document does not validate; it pays ``min_charge``, as any invalid one."""
    limiter = CostLimiter.from_config(config_path)
    schema = strawberry.Schema(query=Query, extensions=[limiter])

    result = asyncio.run(schema.execute(DEFERRED, context_value={"request": None}))

    assert result.data is None
    assert result.errors is not None
    assert "Unknown directive '@defer'" in result.errors[0].message
