"""Adaptive limits end to end: a real uvicorn serving a Strawberry API whose resolver is made
slow, budgets in a private redis-server (the async gate), the controller on the real clock.

The latency source engages within ``engage_for`` of the slowdown; while engaged a tenant's
operation takes ``cost / m`` from its budget and an essential tier's takes ``cost``; once the
resolver is fast again it releases after ``release_for`` and the debits are the cost again.
The metrics endpoint shows all of it.

Then the attack of two addresses (issue: 5 failing 1-point queries a second each engaged
adaptation for every tenant in 9 s, and took the multiplier to its floor in 16 s): on
Strawberry with failing queries (the errors source), on Ariadne with slow ones (its errors
arrive formatted: the latency source applies). They never engage it for the others, and pay
the floor themselves; five and more subjects under real pressure still engage it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
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
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from tests.support.servers import RedisServer

QUERY = "{ products(first: 10) { id } }"  # costs 10, and its actual cost is 10: no refund
TENANTS = ("t0", "t1", "t2", "t3", "t4", "t5")  # min_subjects (5) and more
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


# -- two addresses cannot pull the limits for everyone ----------------------------------------

ATTACK_TOML = """
[limits]
deny_cache_size = 0
[identity]
trusted_proxies = ["127.0.0.1/32"]
[tiers.free]
capacity = 1000
refill_per_second = 100
{tenants}
[adaptive]
mode = "enforce"
sources = ["{source}"]
latency_target = 0.05
latency_saturate = 0.15
window = 4
min_samples = 10
engage_for = 1
release_for = 1
step = 1.0
"""
HONEST_KEYS = tuple(f"h{i}" for i in range(8))
ATTACKERS = ("198.51.100.7", "203.0.113.9")
WORK = "{ products(first: 10) { id } }"  # costs 10
BAD = "{ bad { id } }"  # costs 1: it fails (Strawberry) or is slow (Ariadne)
# What the test turns on: every resolver fails (or is slow) for everyone.
outage = {"on": False}


@strawberry.type
class AttackQuery:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def products(self, first: int = 10) -> list[Product]:
        if outage["on"]:
            raise RuntimeError("the database is down")
        return [Product(id=strawberry.ID(str(i))) for i in range(first)]

    @strawberry.field
    def bad(self) -> Product:
        raise RuntimeError("the resolver crashed")


def strawberry_attack_app(path: Path, storage: Any, registry: CollectorRegistry) -> Any:
    limiter = CostLimiter.from_config(path, storage=storage, metrics=PrometheusMetrics(registry))
    return GraphQL(strawberry.Schema(query=AttackQuery, extensions=[limiter]))


ARIADNE_SDL = """
type Query {
  products(first: Int = 10): [Product!]! @listSize(slicingArguments: ["first"])
  bad: Product!
}
type Product { id: ID! }
"""


def ariadne_attack_app(path: Path, storage: Any, registry: CollectorRegistry) -> Any:
    from ariadne import QueryType, make_executable_schema

    from quotaql import ariadne
    from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL

    query = QueryType()

    @query.field("products")
    async def products(*_: Any, first: int = 10) -> list[dict[str, str]]:
        if outage["on"]:
            await asyncio.sleep(0.2)
        return [{"id": str(i)} for i in range(first)]

    @query.field("bad")
    async def bad(*_: Any) -> dict[str, str]:
        await asyncio.sleep(0.2)
        return {"id": "slow"}

    schema = make_executable_schema(COST_DIRECTIVES_SDL + ARIADNE_SDL, query)
    limiter = ariadne.CostLimiter.from_config(
        path, storage=storage, metrics=PrometheusMetrics(registry)
    )
    return limiter.asgi(schema)


ATTACKS = {
    "strawberry-errors": ("errors", strawberry_attack_app),
    "ariadne-latency": ("latency", ariadne_attack_app),
}


def remaining(client: httpx.Client, query: str, **headers: str) -> int:
    response = client.post("/graphql", json={"query": query}, headers=headers)
    assert response.status_code == 200, response.text
    return int(response.headers["X-RateLimit-Remaining"])


def one_second(client: httpx.Client) -> None:
    """What a second of traffic holds, interleaved (sent one after another, as fast as they
    go): each attacker's 5 bad 1-point queries, and 10 operations of cost 10 of the honest
    tenants."""
    for turn in range(5):
        for address in ATTACKERS:
            response = client.post(
                "/graphql", json={"query": BAD}, headers={"X-Forwarded-For": address}
            )
            assert response.status_code == 200, response.text
        for key in (HONEST_KEYS[turn], HONEST_KEYS[(turn + 5) % len(HONEST_KEYS)]):
            response = client.post("/graphql", json={"query": WORK}, headers={"X-API-Key": key})
            assert response.status_code == 200, response.text


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_two_addresses_cannot_engage_adaptive_limits_for_everyone(
    attack: str, fresh_redis_server: RedisServer, tmp_path: Path
) -> None:
    source, make_app = ATTACKS[attack]
    path = tmp_path / "quotaql.toml"
    tenants = "\n".join(
        f'[tenants.{key}]\ntier = "free"' for key in (*HONEST_KEYS, "fresh", "late")
    )
    path.write_text(ATTACK_TOML.format(tenants=tenants, source=source), encoding="utf-8")
    registry = CollectorRegistry()
    storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    graphql = make_app(path, storage, registry)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await storage.close()  # its connections belong to the server's loop

    routes = [Mount("/metrics", metrics_app(registry)), Mount("/", graphql)]
    app = Starlette(routes=routes, lifespan=lifespan)
    outage["on"] = False
    ignored = {"source": source, "reason": names.IGNORED_FEW_SUBJECTS}
    try:
        with (
            UvicornServer(app, lifespan="on") as server,
            httpx.Client(base_url=server.url, timeout=10) as client,
        ):
            started = time.monotonic()
            engaged_ever = False
            while time.monotonic() - started < 8.0:  # the window (4 s), twice over
                one_second(client)
                engaged_ever |= gauge(client, names.ADAPTIVE_ENGAGED) == 1.0
            values = samples(client)

            def value(name: str, **labels: str) -> float | None:
                return values.get((name, tuple(sorted(labels.items()))))

            assert not engaged_ever
            assert value(names.ADAPTIVE_MULTIPLIER, tier="free") == 1.0
            assert value(names.PRESSURE, source=source) == 0.0
            assert (value(names.PRESSURE_IGNORED_TOTAL, **ignored) or 0) >= 2
            # The two networks (and, on a loaded machine, an honest tenant whose own few
            # operations were slow too: its own share of the pressure, never everyone's).
            assert (value(names.ADAPTIVE_CULPRITS) or 0) >= 2
            # A fresh honest tenant pays the cost; a fresh address of an attacking network
            # pays 1 / 0.25 for its 1-point query: those who cause the pressure pay first.
            assert remaining(client, WORK, **{"X-API-Key": "fresh"}) == 990
            assert remaining(client, BAD, **{"X-Forwarded-For": "203.0.113.200"}) == 996

            outage["on"] = True  # now every tenant's operations fail (are slow): ten subjects
            started = time.monotonic()
            while gauge(client, names.ADAPTIVE_ENGAGED) != 1.0:
                assert time.monotonic() - started < 20, "a real outage did not engage"
                one_second(client)
            assert remaining(client, WORK, **{"X-API-Key": "late"}) < 990  # scaled for all
    finally:
        outage["on"] = False
