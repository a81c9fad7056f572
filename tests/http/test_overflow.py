"""Past ``max_keys``, a flood of addresses does not lock out every new client: over real
uvicorn servers (Strawberry's ASGI app and Ariadne's) on a ``MemoryStorage`` whose table a
flood fills, the clients' addresses told by a trusted proxy's ``X-Forwarded-For`` (the
test client is the proxy on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx
import pytest
from prometheus_client import CollectorRegistry
from strawberry.asgi import GraphQL

from quotaql import ariadne as ariadne_adapter
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from quotaql.storage import MemoryStorage
from tests.support import ariadne_shop, strawberry_shop
from tests.support.app_servers import UvicornServer
from tests.support.shop_http import EXPORT

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# Every address gets 3 exports (10 points each); the proxy in front is 127.0.0.1.
TOML = """
[limits]
reload_interval = 0
deny_cache_size = 0
[tiers.free]
capacity = 30
refill_per_second = 0.001
[identity]
trusted_proxies = ["127.0.0.1/32"]
"""
MAX_KEYS = 40
FLOODED = "198.51.100"  # the attacker's /24
FLOOD = 200  # addresses of it


class Served(NamedTuple):
    url: str
    storage: MemoryStorage
    registry: CollectorRegistry


def app(kind: str, path: Path, **options: Any) -> Any:
    if kind == "strawberry":
        return GraphQL(strawberry_shop.make_schema(CostLimiter.from_config(path, **options)))
    limiter = ariadne_adapter.CostLimiter.from_config(path, **options)
    return limiter.asgi(ariadne_shop.make_schema())


@pytest.fixture(params=["strawberry", "ariadne"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    storage, registry = MemoryStorage(max_keys=MAX_KEYS), CollectorRegistry()
    options = {"storage": storage, "metrics": PrometheusMetrics(registry)}
    with UvicornServer(app(str(request.param), path, **options)) as server:
        yield Served(server.url, storage, registry)
    for shop in (strawberry_shop, ariadne_shop):
        shop.resolver_calls.clear()


def exports(url: str, addresses: list[str], in_flight: int = 8) -> list[int]:
    """One export from each of ``addresses`` (concurrently, as a flood is): the statuses."""

    async def run() -> list[int]:
        limit = asyncio.Semaphore(in_flight)
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:

            async def one(address: str) -> int:
                async with limit:
                    response = await client.post(
                        "/graphql", json={"query": EXPORT}, headers={"X-Forwarded-For": address}
                    )
                    return response.status_code

            return await asyncio.gather(*(one(address) for address in addresses))

    return asyncio.run(run())


def overflows(registry: CollectorRegistry, scope: str) -> float:
    found = registry.get_sample_value(
        names.OVERFLOW_TOTAL, {names.LABEL_STORE: names.STORE_STATES, names.LABEL_SCOPE: scope}
    )
    return 0.0 if found is None else found


def test_a_flood_of_one_network_past_max_keys_leaves_other_networks_new_clients_running(
    served: Served,
) -> None:
    url, storage, registry = served
    statuses = exports(url, [f"{FLOODED}.{host}" for host in range(1, FLOOD + 1)])
    # MAX_KEYS addresses got a state of their own (each spent 10 of 30: it still matters);
    # every later one shared its /24's state, which admitted 3 exports in all.
    assert statuses.count(200) == MAX_KEYS + 3
    assert statuses.count(429) == FLOOD - MAX_KEYS - 3
    assert storage.overflowing
    # A new honest client from another network runs normally: 3 of 3 (its budget), not 0.
    honest = exports(url, ["203.0.113.9"] * 4, in_flight=1)
    assert honest == [200, 200, 200, 429]
    # A new client of the flooded /24 shares that network's drained state.
    assert exports(url, [f"{FLOODED}.250"]) == [429]
    # Counted: the decisions made on a network's overflow state, none on the last resort.
    assert overflows(registry, names.OVERFLOW_NETWORK) == FLOOD - MAX_KEYS + 4 + 1
    assert overflows(registry, names.OVERFLOW_QUOTA) == 0
