"""The HTTP contract end to end: a real uvicorn server, driven by httpx."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI
from strawberry.asgi import GraphQL
from strawberry.fastapi import GraphQLRouter

from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.plugin import shop
from tests.plugin.asgi import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from tests.servers import RedisServer

EXPENSIVE = "{ products(first: 10) { name reviews(first: 5) { stars } } }"  # 70, actual 16
EXPORT = "mutation { exportOrders }"  # 10 (mutation weight), actual 10: no refund

TOML = """
[limits]
reload_interval = 0.1
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.pro]
capacity = 1000
refill_per_second = 0.001
[tenants.acme]
tier = "pro"
[tenants.tenant-a]
tier = "free"
[tenants.tenant-b]
tier = "free"
[tenants.crowd]
tier = "free"
"""


def post(url: str, query: str, key: str = "tenant-a", **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/graphql", json={"query": query}, headers={"X-API-Key": key, **headers}, timeout=10
    )


@pytest.fixture
def config_path(write_config: Callable[..., Path]) -> Path:
    return write_config(base=TOML)


@pytest.fixture(params=["asgi", "fastapi"])
def server(request: pytest.FixtureRequest, config_path: Path) -> Iterator[UvicornServer]:
    schema = shop.make_schema(CostLimiter.from_config(config_path))
    app: Any
    if request.param == "asgi":
        app = GraphQL(schema)
    else:
        app = FastAPI()
        app.include_router(GraphQLRouter(schema), prefix="/graphql")
    with UvicornServer(app) as running:
        yield running


def test_allowed_request_carries_cost_and_rate_limit_headers(server: UvicornServer) -> None:
    response = post(server.url, EXPENSIVE)
    assert response.status_code == 200
    body = response.json()
    assert "errors" not in body
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


def test_over_budget_is_429_with_retry_after(server: UvicornServer) -> None:
    statuses = [post(server.url, EXPORT).status_code for _ in range(12)]
    assert statuses == [200] * 10 + [429] * 2  # 100 / 10
    response = post(server.url, EXPORT)
    assert response.status_code == 429
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
    # Another tenant is not affected.
    assert post(server.url, EXPORT, key="tenant-b").status_code == 200


def test_refund_is_visible_in_currently_available(server: UvicornServer) -> None:
    first = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
    second = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
    # Each costs 70 up front and 16 in the end: the budget goes down by 16, not 70.
    spent = (
        first["throttleStatus"]["currentlyAvailable"]
        - second["throttleStatus"]["currentlyAvailable"]
    )
    assert spent == pytest.approx(16, abs=0.1)


def test_graphql_cost_validate_header(server: UvicornServer) -> None:
    response = post(server.url, EXPENSIVE, **{"GraphQL-Cost": "validate"})
    assert response.status_code == 200
    body = response.json()
    assert body["data"] is None
    assert body["extensions"]["cost"]["requestedQueryCost"] == 70
    assert body["extensions"]["cost"]["breakdown"]["Product.reviews"] == 50
    after = post(server.url, "{ hello }").json()
    assert after["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == pytest.approx(
        100, abs=0.1
    )


def test_static_limit_errors_are_graphql_errors_not_500(server: UvicornServer) -> None:
    response = post(server.url, "{ products(first: 1000) { reviews(first: 1000) { stars } } }")
    assert response.status_code == 400  # can never fit in 100
    assert response.json()["errors"][0]["extensions"]["code"] == "COST_EXCEEDS_CAPACITY"
    bad = post(server.url, "query Q($n: Int!) { products(first: $n) { name } }")
    assert bad.status_code == 200
    assert bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


@pytest.mark.parametrize("server", ["asgi"], indirect=True)
def test_hot_reload_picks_up_edits_and_survives_bad_ones(
    server: UvicornServer, config_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    assert (
        post(server.url, "{ hello }").json()["extensions"]["cost"]["throttleStatus"][
            "maximumAvailable"
        ]
        == 100
    )
    config_path.write_text(TOML.replace("capacity = 100\n", "capacity = 300\n"), encoding="utf-8")
    assert _eventually(lambda: _capacity(server) == 300)
    config_path.write_text(TOML + "\n[tiers.broken]\ncapacity = -1\n", encoding="utf-8")
    assert _eventually(lambda: _capacity(server) == 300 and _reload_failures(caplog))
    assert _capacity(server) == 300  # the previous config still serves
    (failed,) = _reload_failures(caplog)  # logged once, not on every request
    assert "tiers.broken.capacity" in failed.getMessage()
    assert str(config_path) in failed.getMessage()


def _reload_failures(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "quotaql_event", "") == "config_reload_failed"]


def _capacity(server: UvicornServer) -> float:
    body = post(server.url, "{ hello }").json()
    return float(body["extensions"]["cost"]["throttleStatus"]["maximumAvailable"])


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("server", ["asgi"], indirect=True)
def test_fifty_concurrent_clients_never_over_admit(server: UvicornServer) -> None:
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


# -- Redis storage, and Redis failing -------------------------------------------------------


def _redis_app(config_path: Path, url: str) -> GraphQL:
    storage = AsyncRedisStorage.from_url(url, timeout=0.5)
    return GraphQL(shop.make_schema(CostLimiter.from_config(config_path, storage=storage)))


def test_redis_storage_allows_blocks_and_refunds(
    config_path: Path, fresh_redis_server: RedisServer
) -> None:
    with UvicornServer(_redis_app(config_path, fresh_redis_server.url)) as server:
        first = post(server.url, EXPENSIVE)
        assert first.status_code == 200
        assert first.json()["extensions"]["cost"]["throttleStatus"][
            "currentlyAvailable"
        ] == pytest.approx(84, abs=0.1)
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
    path = write_config(base=TOML.replace("[limits]\n", f'[limits]\non_backend_error = "{mode}"\n'))
    with UvicornServer(_redis_app(path, fresh_redis_server.url)) as server:
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


SHADOW_AND_TIERS = """
[limits]
reload_interval = 0
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.pro]
capacity = 1000
refill_per_second = 0.001
[tiers.pro.operations]
ExportOrders = { capacity = 20, refill_per_second = 0.001 }
[tiers.trial]
mode = "shadow"
capacity = 10
refill_per_second = 0.001
[tenants.acme]
tier = "pro"
[tenants.newbie]
tier = "trial"
"""


def test_tiers_operation_quotas_and_shadow_mode_over_http(
    write_config: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    schema = shop.make_schema(CostLimiter.from_config(write_config(base=SHADOW_AND_TIERS)))
    with UvicornServer(GraphQL(schema)) as server:
        # Tiers: the same query, three budgets.
        limits = {
            key: int(post(server.url, "{ hello }", key=key).headers["X-RateLimit-Limit"])
            for key in ("someone", "acme", "newbie")
        }
        assert limits == {"someone": 100, "acme": 1000, "newbie": 10}
        # The pro tier's ExportOrders quota: 20 points, 10 per export.
        export = "mutation ExportOrders { exportOrders }"
        statuses = [post(server.url, export, key="acme").status_code for _ in range(3)]
        assert statuses == [200, 200, 429]
        refused = post(server.url, export, key="acme")
        assert refused.json()["errors"][0]["extensions"]["quota"] == "op:ExportOrders"
        assert '"op:ExportOrders";q=20' in refused.headers["RateLimit-Policy"]
        # The trial tier is in shadow mode: far over its 10 points, never refused.
        shadow = [post(server.url, EXPENSIVE, key="newbie") for _ in range(3)]
        assert [r.status_code for r in shadow] == [200, 200, 200]
        assert all("errors" not in r.json() for r in shadow)
        assert all("Retry-After" not in r.headers for r in shadow)
    events = [getattr(r, "quotaql_event", None) for r in caplog.records]
    assert "shadow_blocked" in events


# -- batches --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["asgi", "fastapi"])
def test_a_batch_where_some_ran_is_200_and_all_refused_is_429(
    write_config: Callable[..., Path], kind: str
) -> None:
    path = write_config(base=TOML.replace("[limits]\n", "[limits]\nrefund_unused = false\n"))
    schema = shop.make_schema(CostLimiter.from_config(path), batching=True)
    app: Any = GraphQL(schema)
    if kind == "fastapi":
        app = FastAPI()
        app.include_router(GraphQLRouter(schema), prefix="/graphql")
    with UvicornServer(app) as server:

        def batch(*queries: str) -> httpx.Response:
            return httpx.post(
                f"{server.url}/graphql",
                json=[{"query": query} for query in queries],
                headers={"X-API-Key": "tenant-a"},
                timeout=10,
            )

        # 70 + 70 + 10 on a budget of 100: the second is refused, the others run.
        mixed = batch(EXPENSIVE, EXPENSIVE, "{ hello }")
        assert mixed.status_code == 200  # a client that retries on 429 would re-run two
        bodies = mixed.json()
        assert [("errors" in body) for body in bodies].count(True) == 1
        (refused,) = [body for body in bodies if "errors" in body]
        assert refused["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
        assert "Retry-After" not in mixed.headers
        assert mixed.headers["X-RateLimit-Limit"] == "100"
        assert shop.resolver_calls.count("products") == 1
        # Every operation refused: 429, and the longest wait.
        everything = batch(EXPENSIVE, EXPENSIVE, EXPENSIVE)  # 70 each, 20 left
        assert everything.status_code == 429
        assert all(
            b["errors"][0]["extensions"]["code"] == "RATE_LIMITED" for b in everything.json()
        )
        longest = max(b["errors"][0]["extensions"]["retryAfter"] for b in everything.json())
        assert int(everything.headers["Retry-After"]) == pytest.approx(longest, abs=1)


def test_a_root_field_quota_cannot_be_renamed_around_over_http(
    write_config: Callable[..., Path],
) -> None:
    field = '"Mutation.exportOrders" = { capacity = 3, refill_per_second = 0.001 }'
    path = write_config(base=TOML + f"[tiers.free.fields]\n{field}\n")
    with UvicornServer(GraphQL(shop.make_schema(CostLimiter.from_config(path)))) as server:
        disguises = [
            "mutation ExportOrders { exportOrders }",
            "mutation Innocent { exportOrders }",
            "mutation { renamed: exportOrders }",
            "mutation { ...F } fragment F on Mutation { exportOrders }",
        ]
        statuses = [post(server.url, query).status_code for query in disguises]
        assert statuses == [200, 200, 200, 429]
        refused = post(server.url, "mutation Other { a: exportOrders }")
        assert refused.status_code == 429
        assert refused.json()["errors"][0]["extensions"]["quota"] == "field:Mutation.exportOrders"
        assert '"field:Mutation.exportOrders";q=3' in refused.headers["RateLimit-Policy"]
        assert post(server.url, "{ hello }").status_code == 200  # the rest of the API is open
        assert shop.resolver_calls.count("exportOrders") == 3
