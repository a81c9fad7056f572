"""The sync path: ``ariadne.wsgi.GraphQL`` limited, under werkzeug's threaded WSGI server."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

import httpx
import pytest

from quotaql.ariadne import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage
from tests.support import ariadne_shop as shop
from tests.support.app_servers import WSGIServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.support.servers import RedisServer

EXPENSIVE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"  # 70, actual 16
EXPORT = "mutation { exportOrders }"  # 10


def post(url: str, query: str, key: str = "tenant-a", **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/graphql", json={"query": query}, headers={"X-API-Key": key, **headers}, timeout=10
    )


@pytest.fixture
def server(config_path: Path) -> Iterator[WSGIServer]:
    with WSGIServer(CostLimiter.from_config(config_path).wsgi(shop.make_schema())) as running:
        yield running


def test_allowed_request_is_settled_and_carries_cost_and_headers(server: WSGIServer) -> None:
    response = post(server.url, EXPENSIVE)
    assert response.status_code == 200
    body = response.json()
    assert len(body["data"]["products"]) == shop.CATALOG_SIZE
    cost = body["extensions"]["cost"]
    assert (cost["requestedQueryCost"], cost["actualQueryCost"]) == (70, 16)
    assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(84, abs=0.1)
    assert response.headers["RateLimit-Policy"] == '"tenant";q=100;w=100000'
    assert response.headers["X-RateLimit-Remaining"] == "84"
    assert response.headers["Content-Type"] == "application/json; charset=UTF-8"
    assert "Retry-After" not in response.headers


def test_over_budget_is_429_with_retry_after_and_no_resolver_runs(server: WSGIServer) -> None:
    assert [post(server.url, EXPORT).status_code for _ in range(10)] == [200] * 10
    shop.resolver_calls.clear()
    response = post(server.url, EXPORT)
    assert response.status_code == 429
    assert response.reason_phrase == "Too Many Requests"
    assert shop.resolver_calls == []
    body = response.json()
    assert body["data"] is None
    assert body["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
    assert int(response.headers["Retry-After"]) >= 1
    assert response.headers["X-RateLimit-Remaining"] == "0"


def test_validate_cost_exceeding_capacity_and_bad_variables(server: WSGIServer) -> None:
    priced = post(server.url, EXPENSIVE, **{"GraphQL-Cost": "validate"})
    assert priced.status_code == 200
    assert priced.json()["data"] is None
    assert priced.json()["extensions"]["cost"]["breakdown"]["Product.reviews"] == 50
    assert shop.resolver_calls == []
    huge = post(server.url, "{ products(first: 1000) { reviews(first: 1000) { stars } } }")
    assert huge.status_code == 400
    assert huge.json()["errors"][0]["extensions"]["code"] == "COST_EXCEEDS_CAPACITY"
    bad = post(server.url, "query Q($n: Int!) { products(first: $n) { name } }")
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    # The price check, the query that can never fit and the bad variables paid the
    # minimum (1) each, and this probe pays 1 too.
    cost = post(server.url, "{ hello }").json()["extensions"]["cost"]
    assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(96, abs=0.1)


def test_fifty_concurrent_clients_never_over_admit(server: WSGIServer) -> None:
    with ThreadPoolExecutor(max_workers=50) as pool:
        statuses = list(pool.map(lambda _: post(server.url, EXPORT, key="crowd").status_code,
                                 range(50)))  # fmt: skip
    assert statuses.count(200) == 10
    assert statuses.count(429) == 40
    assert shop.resolver_calls.count("exportOrders") == 10


def test_rotating_unknown_keys_get_no_more_than_the_address_budget(server: WSGIServer) -> None:
    statuses = [
        post(
            server.url, EXPORT, key=f"guess-{i}", **{"X-Forwarded-For": f"198.51.100.{i}"}
        ).status_code
        for i in range(12)
    ]
    assert statuses == [200] * 10 + [429] * 2


def test_sync_redis_storage_allows_blocks_refunds_and_fails_closed(
    write_config: Callable[..., Path], fresh_redis_server: RedisServer
) -> None:
    path = write_config(limits='on_backend_error = "closed"\n')
    storage = RedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    try:
        app = CostLimiter.from_config(path, storage=storage).wsgi(shop.make_schema())
        with WSGIServer(app) as server:
            first = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
            assert first["throttleStatus"]["currentlyAvailable"] == pytest.approx(84, abs=0.1)
            statuses = [post(server.url, EXPORT).status_code for _ in range(10)]
            assert statuses == [200] * 8 + [429] * 2  # 84 / 10
            fresh_redis_server.kill()
            down = post(server.url, EXPORT, key="tenant-b")
            assert down.status_code == 503
            assert down.json()["errors"][0]["extensions"]["code"] == "RATE_LIMITER_UNAVAILABLE"
            assert int(down.headers["Retry-After"]) >= 1
    finally:
        storage.close()


def test_an_async_storage_is_refused_by_the_wsgi_app() -> None:
    storage = AsyncRedisStorage.from_url("redis://127.0.0.1:1")  # never connected
    with pytest.raises(TypeError, match="WSGI server cannot await"):
        CostLimiter(storage=storage).wsgi(shop.make_schema())
