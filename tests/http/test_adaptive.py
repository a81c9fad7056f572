"""Adaptive limits end to end: a real uvicorn serving a Strawberry API whose resolver is made
slow, budgets in a private redis-server (the async gate), the controller on the real clock.

The latency source engages within ``engage_for`` of the slowdown; while engaged a tenant's
operation takes ``cost / m`` from its budget and an essential tier's takes ``cost``; once the
resolver is fast again it releases after ``release_for`` and the debits are the cost again.
The metrics endpoint shows all of it.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import httpx
import strawberry
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.cost_analysis.directives import ListSize
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.support.servers import RedisServer

QUERY = "{ products(first: 10) { id } }"  # costs 10, and its actual cost is 10: no refund
TENANTS = ("t0", "t1", "t2", "t3")
TOML = """
[limits]
deny_cache_size = 0
[tiers.free]
capacity = 1000
refill_per_second = 1
[tiers.internal]
capacity = 1000
refill_per_second = 1
essential = true
[tenants.ops]
tier = "internal"
{tenants}
[adaptive]
mode = "enforce"
sources = ["latency"]
latency_target = 0.05
latency_saturate = 0.15
latency_percentile = 0.9
window = 3
min_samples = 3
engage_for = 1
release_for = 1
step = 1.0
"""
# The resolver's delay, which the test turns up and down.
delay = {"seconds": 0.0}


@strawberry.type
class Product:
    id: strawberry.ID


@strawberry.type
class Query:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    async def products(self, first: int = 10) -> list[Product]:
        await asyncio.sleep(delay["seconds"])
        return [Product(id=strawberry.ID(str(i))) for i in range(first)]


def samples(client: httpx.Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the metrics endpoint: (name, sorted labels) -> value."""
    text = client.get("/metrics/").text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def gauge(client: httpx.Client, name: str, **labels: str) -> float | None:
    return samples(client).get((name, tuple(sorted(labels.items()))))


def available_after_one(client: httpx.Client, key: str) -> float:
    """A fresh tenant's budget after one operation (its debit is 1000 minus this)."""
    response = client.post("/graphql", json={"query": QUERY}, headers={"X-API-Key": key})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"]["products"][9] == {"id": "9"}
    available: float = body["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
    return available


def traffic_until(client: httpx.Client, done: Callable[[], bool], seconds: float) -> float:
    """The tenants' operations, one after another, until ``done()``; the seconds it took."""
    started = time.monotonic()
    while not done():
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not done after {seconds:g} s of traffic")
        for key in TENANTS:
            response = client.post("/graphql", json={"query": QUERY}, headers={"X-API-Key": key})
            assert response.status_code in (200, 429), response.text
    return time.monotonic() - started


def test_a_slow_resolver_engages_adaptive_limits_and_a_fast_one_releases_them(
    fresh_redis_server: RedisServer, tmp_path: Path
) -> None:
    path = tmp_path / "quotaql.toml"
    tenants = "\n".join(f'[tenants.{key}]\ntier = "free"' for key in (*TENANTS, "p1", "p2", "p3"))
    path.write_text(TOML.format(tenants=tenants), encoding="utf-8")
    registry = CollectorRegistry()
    limiter = CostLimiter.from_config(
        path,
        storage=AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5),
        metrics=PrometheusMetrics(registry),
    )
    schema = strawberry.Schema(query=Query, extensions=[limiter])
    app = Starlette(routes=[Mount("/metrics", metrics_app(registry)), Mount("/", GraphQL(schema))])
    delay["seconds"] = 0.0
    with UvicornServer(app) as server, httpx.Client(base_url=server.url, timeout=10) as client:
        assert available_after_one(client, "p1") == 990  # no pressure: the cost
        assert gauge(client, names.ADAPTIVE_ENGAGED) == 0.0

        delay["seconds"] = 0.2  # every resolver now takes 200 ms: p90 above 150 ms

        def engaged() -> bool:
            return gauge(client, names.ADAPTIVE_ENGAGED) == 1.0

        took = traffic_until(client, engaged, 20)
        assert took >= 1.0  # not before engage_for
        assert gauge(client, names.PRESSURE, source="latency") == 1.0
        assert gauge(client, names.ADAPTIVE_MULTIPLIER, tier="free") == 0.25  # the floor
        assert gauge(client, names.ADAPTIVE_MULTIPLIER, tier="internal") == 1.0
        assert available_after_one(client, "p2") == 1000 - 10 / 0.25
        assert available_after_one(client, "ops") == 990  # essential: never scaled

        delay["seconds"] = 0.0  # fast again

        def released() -> bool:
            values = samples(client)
            return (
                values.get((names.ADAPTIVE_ENGAGED, ())) == 0.0
                and values.get((names.ADAPTIVE_MULTIPLIER, (("tier", "free"),))) == 1.0
            )

        took = traffic_until(client, released, 20)
        assert took >= 1.0  # not before release_for
        assert available_after_one(client, "p3") == 990
        transitions: dict[str, Any] = {
            to: gauge(client, names.ADAPTIVE_TRANSITIONS_TOTAL, to=to) for to in names.TRANSITIONS
        }
        assert transitions == {"engaged": 1.0, "released": 1.0}
