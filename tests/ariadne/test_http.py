"""The HTTP contract of the Ariadne integration end to end: a real uvicorn, driven by httpx.

The same contract as ``tests/plugin/test_http.py`` for Strawberry, with one difference that
is Ariadne's: an operation that is not executed and that the limiter did not refuse (a
static limit, bad variables) answers HTTP 400, as Ariadne answers its own validation
errors; Strawberry answers those with 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.applications import Starlette
from starlette.routing import Mount

from quotaql.ariadne import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.ariadne import shop
from tests.ariadne.servers import Uvicorn

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

    from tests.servers import RedisServer

EXPENSIVE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"  # 70, actual 16
EXPORT = "mutation { exportOrders }"  # 10 (mutation weight), actual 10: no refund


def post(url: str, query: str, key: str = "tenant-a", **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/graphql", json={"query": query}, headers={"X-API-Key": key, **headers}, timeout=10
    )


def fastapi_app(limiter: CostLimiter) -> FastAPI:
    """Ariadne's FastAPI recipe: a route hands the request to the GraphQL app."""
    graphql_app = limiter.asgi(shop.make_schema())
    app = FastAPI()

    @app.post("/graphql")
    async def graphql(request: Request) -> Any:
        return await graphql_app.handle_request(request)

    return app


@pytest.fixture(params=["asgi", "fastapi"])
def server(request: pytest.FixtureRequest, config_path: Path) -> Iterator[Uvicorn]:
    limiter = CostLimiter.from_config(config_path)
    app = limiter.asgi(shop.make_schema()) if request.param == "asgi" else fastapi_app(limiter)
    with Uvicorn(app) as running:
        yield running


def test_allowed_request_carries_cost_and_rate_limit_headers(server: Uvicorn) -> None:
    response = post(server.url, EXPENSIVE)
    assert response.status_code == 200
    body = response.json()
    assert "errors" not in body
    assert len(body["data"]["products"]) == shop.CATALOG_SIZE
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 70
    assert cost["actualQueryCost"] == 16
    assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(84, abs=0.1)
    assert response.headers["RateLimit-Policy"] == '"tenant";q=100;w=100000'
    assert response.headers["RateLimit"].startswith('"tenant";r=84;t=')
    assert response.headers["X-RateLimit-Limit"] == "100"
    assert response.headers["X-RateLimit-Remaining"] == "84"
    assert int(response.headers["X-RateLimit-Reset"]) > 0
    assert "Retry-After" not in response.headers


def test_over_budget_is_429_with_retry_after_and_no_resolver_runs(server: Uvicorn) -> None:
    statuses = [post(server.url, EXPORT).status_code for _ in range(12)]
    assert statuses == [200] * 10 + [429] * 2  # 100 / 10
    shop.resolver_calls.clear()
    response = post(server.url, EXPORT)
    assert response.status_code == 429
    assert shop.resolver_calls == []
    body = response.json()
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    assert error["extensions"]["cost"] == 10
    assert error["message"].startswith("This query costs 10 points but only 0 of your 100 remain")
    retry = int(response.headers["Retry-After"])
    assert retry == pytest.approx(error["extensions"]["retryAfter"], abs=1)
    assert retry >= 1
    assert response.headers["X-RateLimit-Remaining"] == "0"
    assert body["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] < 1
    # Another tenant is not affected.
    assert post(server.url, EXPORT, key="tenant-b").status_code == 200


def test_refund_is_visible_in_currently_available(server: Uvicorn) -> None:
    first = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
    second = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
    # Each costs 70 up front and 16 in the end: the budget goes down by 16, not 70.
    spent = (
        first["throttleStatus"]["currentlyAvailable"]
        - second["throttleStatus"]["currentlyAvailable"]
    )
    assert spent == pytest.approx(16, abs=0.1)


def test_graphql_cost_validate_prices_without_running(server: Uvicorn) -> None:
    response = post(server.url, EXPENSIVE, **{"GraphQL-Cost": "validate"})
    assert response.status_code == 200
    body = response.json()
    assert body == {"data": None, "extensions": body["extensions"]}
    assert body["extensions"]["cost"]["requestedQueryCost"] == 70
    assert body["extensions"]["cost"]["breakdown"]["Product.reviews"] == 50
    assert shop.resolver_calls == []
    after = post(server.url, "{ hello }").json()
    assert after["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == pytest.approx(
        100, abs=0.1
    )


def test_static_limit_and_bad_variables_are_graphql_errors_not_500(server: Uvicorn) -> None:
    response = post(server.url, "{ products(first: 1000) { reviews(first: 1000) { stars } } }")
    assert response.status_code == 400  # can never fit in 100
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "COST_EXCEEDS_CAPACITY"
    assert "Retry-After" not in response.headers  # waiting does not help
    bad = post(server.url, "query Q($n: Int!) { products(first: $n) { name } }")
    assert bad.status_code == 400  # Ariadne's status for an operation it did not run
    assert bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert shop.resolver_calls == []


def test_static_limits_of_the_cost_table_answer_their_codes(
    write_config: Callable[..., Path],
) -> None:
    path = write_config("[cost]\nmax_depth = 2\nmax_tokens = 40\n")
    with Uvicorn(CostLimiter.from_config(path).asgi(shop.make_schema())) as server:
        deep = post(server.url, EXPENSIVE)
        large = post(server.url, "{ " + "hello " * 50 + "}")
    assert deep.status_code == 400
    assert deep.json()["errors"][0]["extensions"]["code"] == "QUERY_TOO_DEEP"
    assert large.status_code == 400
    assert large.json()["errors"][0]["extensions"]["code"] == "QUERY_TOO_LARGE"
    assert shop.resolver_calls == []


def test_refusals_are_logged_by_quotaql_not_by_ariadne(
    server: Uvicorn, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(11):
        post(server.url, EXPORT)
    assert not [r for r in caplog.records if r.name == "ariadne"]
    events = [getattr(r, "quotaql_event", None) for r in caplog.records]
    assert "blocked" in events


@pytest.mark.parametrize("server", ["asgi"], indirect=True)
def test_hot_reload_picks_up_edits_and_survives_bad_ones(
    server: Uvicorn, config_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    assert _capacity(server) == 100
    text = config_path.read_text(encoding="utf-8")
    config_path.write_text(text.replace("capacity = 100\n", "capacity = 300\n"), encoding="utf-8")
    assert _eventually(lambda: _capacity(server) == 300)
    config_path.write_text(text + "\n[tiers.broken]\ncapacity = -1\n", encoding="utf-8")
    assert _eventually(lambda: _capacity(server) == 300 and _reload_failures(caplog))
    (failed,) = _reload_failures(caplog)  # logged once, not on every request
    assert "tiers.broken.capacity" in failed.getMessage()


def _reload_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "quotaql_event", "") == "config_reload_failed"]


def _capacity(server: Uvicorn) -> float:
    body = post(server.url, "{ hello }").json()
    return float(body["extensions"]["cost"]["throttleStatus"]["maximumAvailable"])


def _eventually(check: Callable[[], Any], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("server", ["asgi"], indirect=True)
def test_fifty_concurrent_clients_never_over_admit(server: Uvicorn) -> None:
    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:

            async def one() -> int:
                response = await client.post(
                    "/graphql", json={"query": EXPORT}, headers={"X-API-Key": "crowd"}
                )
                return response.status_code

            return await asyncio.gather(*(one() for _ in range(50)))

    statuses = asyncio.run(burst())
    assert statuses.count(200) == 10  # 100 / 10 (refill 0.001/s adds nothing in a test)
    assert statuses.count(429) == 40
    assert shop.resolver_calls.count("exportOrders") == 10


# -- identity -------------------------------------------------------------------------------


@pytest.mark.parametrize("server", ["asgi"], indirect=True)
def test_rotating_unknown_keys_get_no_more_than_the_address_budget(server: Uvicorn) -> None:
    responses = [
        post(server.url, EXPORT, key=f"guess-{i}", **{"X-Forwarded-For": f"198.51.100.{i}"})
        for i in range(12)
    ]
    # Each new key (and each forged X-Forwarded-For) is the client's address: one budget.
    assert [r.status_code for r in responses] == [200] * 10 + [429] * 2
    assert post(server.url, EXPORT, key="no-key-at-all-either").status_code == 429
    assert post(server.url, EXPORT, key="tenant-a").status_code == 200  # a known key


# -- Redis storage, and Redis failing -------------------------------------------------------


def _redis_app(config_path: Path, url: str) -> Starlette:
    """The shop on Redis; the connections, which belong to the server's loop, are closed in
    it when the server stops."""
    storage = AsyncRedisStorage.from_url(url, timeout=0.5)
    graphql_app = CostLimiter.from_config(config_path, storage=storage).asgi(shop.make_schema())

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await storage.close()

    return Starlette(routes=[Mount("/", app=graphql_app)], lifespan=lifespan)


def test_redis_storage_allows_blocks_and_refunds(
    config_path: Path, fresh_redis_server: RedisServer
) -> None:
    with Uvicorn(_redis_app(config_path, fresh_redis_server.url), lifespan=True) as server:
        first = post(server.url, EXPENSIVE)
        assert first.status_code == 200
        cost = first.json()["extensions"]["cost"]
        assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(84, abs=0.1)
        statuses = [post(server.url, EXPORT).status_code for _ in range(10)]
        assert statuses == [200] * 8 + [429] * 2  # 84 / 10


@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [("open", 200, None), ("closed", 503, "RATE_LIMITER_UNAVAILABLE"), ("local", 200, None)],
)
def test_a_redis_kill_answers_by_the_fail_mode(
    write_config: Callable[..., Path],
    fresh_redis_server: RedisServer,
    mode: str,
    status: int,
    code: str | None,
) -> None:
    path = write_config(limits=f'on_backend_error = "{mode}"\n')
    with Uvicorn(_redis_app(path, fresh_redis_server.url), lifespan=True) as server:
        assert post(server.url, EXPORT).status_code == 200
        fresh_redis_server.kill()
        responses = [post(server.url, EXPORT) for _ in range(5)]
        assert [r.status_code for r in responses] == [status] * 5
        for response in responses:
            errors = response.json().get("errors")
            if code is None:
                assert errors is None
            else:
                assert errors[0]["extensions"]["code"] == code
                assert int(response.headers["Retry-After"]) >= 1
        if mode == "local":  # the local fallback still limits: 100 / 10 in memory
            more = [post(server.url, EXPORT).status_code for _ in range(10)]
            assert 429 in more
