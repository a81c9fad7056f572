"""The client's contract over real HTTP, the same for every adapter on the gate.

Strawberry's ASGI app and FastAPI router (``quotaql.plugin``), and Ariadne's ASGI app and a
FastAPI route handing requests to it (``quotaql.ariadne``), each serving the same shop
(``tests/support/strawberry_shop.py``, ``tests/support/ariadne_shop.py``: the same prices)
on a real uvicorn, driven by httpx. One difference is the frameworks' own: an operation the analysis refuses
(bad variables) answers 200 in Strawberry and 400 in Ariadne, as each answers its own
validation errors. Every integration of Strawberry on its own server is in
tests/adapters/integrations; what only one adapter has (batches, websockets) is beside it.
"""

# ruff: noqa: F811 (the shop's fixtures, imported by name)
from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI, Request
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL
from strawberry.fastapi import GraphQLRouter

from quotaql import ariadne as ariadne_adapter
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.support import ariadne_shop, strawberry_shop
from tests.support.app_servers import UvicornServer
from tests.support.shop_http import (  # noqa: F401 (fixtures, by name)
    EXPENSIVE,
    EXPORT,
    config_path,
    post,
    write_config,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path
    from types import ModuleType

    from tests.support.servers import RedisServer


@dataclass(frozen=True)
class Adapter:
    """One way of serving the shop: its schema's module and how it answers what it refuses."""

    name: str
    shop: ModuleType
    analysis_status: int  # the status of an operation the analysis refuses

    def app(self, path: Path, storage: Any = None) -> Any:
        """The shop on ``path``'s config; with ``storage``, closed in the server's loop."""
        options = {} if storage is None else {"storage": storage}
        if self.name.startswith("strawberry"):
            schema = strawberry_shop.make_schema(CostLimiter.from_config(path, **options))
            if self.name == "strawberry-asgi":
                app: Any = GraphQL(schema)
            else:
                app = FastAPI()
                app.include_router(GraphQLRouter(schema), prefix="/graphql")
        else:
            limiter = ariadne_adapter.CostLimiter.from_config(path, **options)
            graphql_app = limiter.asgi(ariadne_shop.make_schema())
            app = graphql_app
            if self.name == "ariadne-fastapi":  # Ariadne's recipe: a route hands it requests
                app = FastAPI()

                @app.post("/graphql")
                async def graphql(request: Request) -> Any:
                    return await graphql_app.handle_request(request)

        if storage is None:
            return app

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            yield
            await storage.close()  # its connections belong to the server's loop

        return Starlette(routes=[Mount("/", app=app)], lifespan=lifespan)


ADAPTERS = {
    adapter.name: adapter
    for adapter in (
        Adapter("strawberry-asgi", strawberry_shop, 200),
        Adapter("strawberry-fastapi", strawberry_shop, 200),
        Adapter("ariadne-asgi", ariadne_shop, 400),
        Adapter("ariadne-fastapi", ariadne_shop, 400),
    )
}
ASGI = ["strawberry-asgi", "ariadne-asgi"]


@pytest.fixture(autouse=True)
def _clear_resolver_calls() -> Iterator[None]:
    for shop in (strawberry_shop, ariadne_shop):
        shop.resolver_calls.clear()
    yield
    for shop in (strawberry_shop, ariadne_shop):
        shop.resolver_calls.clear()


@pytest.fixture(params=list(ADAPTERS))
def adapter(request: pytest.FixtureRequest) -> Adapter:
    return ADAPTERS[str(request.param)]


@pytest.fixture
def server(adapter: Adapter, config_path: Path) -> Iterator[UvicornServer]:
    with UvicornServer(adapter.app(config_path)) as running:
        yield running


def test_an_allowed_request_carries_its_cost_and_the_rate_limit_headers(
    adapter: Adapter, server: UvicornServer
) -> None:
    response = post(server.url, EXPENSIVE)
    assert response.status_code == 200
    body = response.json()
    assert "errors" not in body
    assert len(body["data"]["products"]) == adapter.shop.CATALOG_SIZE
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


def test_over_budget_is_429_with_retry_after_and_no_resolver_runs(
    adapter: Adapter, server: UvicornServer
) -> None:
    statuses = [post(server.url, EXPORT).status_code for _ in range(12)]
    assert statuses == [200] * 10 + [429] * 2  # 100 / 10
    adapter.shop.resolver_calls.clear()
    response = post(server.url, EXPORT)
    assert response.status_code == 429
    assert adapter.shop.resolver_calls == []
    body = response.json()
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    # Refused from the deny cache, before its query was read: the least any request costs.
    assert error["extensions"]["cost"] == 1
    assert error["message"].startswith(
        "Only 0 of your 100 points remain, less than any request costs (1); retry in"
    )
    retry = int(response.headers["Retry-After"])
    assert retry == pytest.approx(error["extensions"]["retryAfter"], abs=1)
    assert retry >= 1
    assert response.headers["X-RateLimit-Remaining"] == "0"
    # Another tenant is not affected.
    assert post(server.url, EXPORT, key="tenant-b").status_code == 200


def test_the_refund_is_visible_in_currently_available(server: UvicornServer) -> None:
    first = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
    second = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
    # Each costs 70 up front and 16 in the end: the budget goes down by 16, not 70.
    spent = (
        first["throttleStatus"]["currentlyAvailable"]
        - second["throttleStatus"]["currentlyAvailable"]
    )
    assert spent == pytest.approx(16, abs=0.1)


def test_graphql_cost_validate_prices_without_running_and_pays_the_minimum(
    adapter: Adapter, server: UvicornServer
) -> None:
    response = post(server.url, EXPENSIVE, **{"GraphQL-Cost": "validate"})
    assert response.status_code == 200
    body = response.json()
    assert body["data"] is None
    assert "errors" not in body
    assert body["extensions"]["cost"]["requestedQueryCost"] == 70
    assert body["extensions"]["cost"]["breakdown"]["Product.reviews"] == 50
    assert body["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == pytest.approx(
        99, abs=0.1
    )  # it paid [limits] min_charge (1), not the 70 it would cost
    assert adapter.shop.resolver_calls == []
    after = post(server.url, "{ hello }").json()
    assert after["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == pytest.approx(
        98, abs=0.1
    )


TOO_BIG = "{ products(first: 20) { name reviews(first: 5) { stars } } }"  # 140 > 100, ever


def test_graphql_cost_validate_warns_of_an_operation_that_can_never_run(
    adapter: Adapter, server: UvicornServer
) -> None:
    response = post(server.url, TOO_BIG, **{"GraphQL-Cost": "validate"})
    assert response.status_code == 200  # priced, as asked: nothing refused
    body = response.json()
    (warning,) = body["extensions"]["warnings"]
    assert warning["code"] == "COST_EXCEEDS_CAPACITY"
    assert (warning["quota"], warning["cost"], warning["limit"]) == ("tenant", 140, 100)
    assert "can ever hold" in warning["message"]
    ran = post(server.url, TOO_BIG)  # what the warning said running it would be
    assert ran.json()["errors"][0]["extensions"]["code"] == "COST_EXCEEDS_CAPACITY"
    assert ran.status_code == 400
    fits = post(server.url, EXPENSIVE, **{"GraphQL-Cost": "validate"}).json()
    assert "warnings" not in fits["extensions"]


@pytest.mark.parametrize("value", ["estimate", "VALIDATEX", "x" * 5000])
def test_an_unknown_graphql_cost_value_is_refused_with_a_code(
    adapter: Adapter, server: UvicornServer, value: str
) -> None:
    response = post(server.url, EXPENSIVE, **{"GraphQL-Cost": value})
    assert response.status_code == 400
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "BAD_COST_HEADER"
    assert "'validate'" in error["message"]
    assert len(error["message"]) < 300  # a hostile value is not echoed whole
    assert adapter.shop.resolver_calls == []
    # it paid the minimum, as a document that does not parse (Strawberry charges it once
    # the operation ended: by a task, perhaps after the response)
    time.sleep(0.2)
    cost = post(server.url, "{ hello }").json()["extensions"]["cost"]
    assert cost["throttleStatus"]["currentlyAvailable"] == 98


def test_numbers_reach_clients_without_float_noise(server: UvicornServer) -> None:
    # A refill of 0.001 point a second leaves a budget at 84.0000x: told 84 (an integer),
    # in headers and extensions alike; a wait to the millisecond.
    cost = post(server.url, EXPENSIVE).json()["extensions"]["cost"]
    status = cost["throttleStatus"]
    assert [type(v) for v in (cost["requestedQueryCost"], status["currentlyAvailable"])] == [
        int,
        int,
    ]
    assert (cost["requestedQueryCost"], status["currentlyAvailable"]) == (70, 84)
    for _ in range(12):
        refused = post(server.url, EXPORT)
    error = refused.json()["errors"][0]["extensions"]
    retry = error["retryAfter"]
    assert retry == round(retry, 3)
    assert isinstance(error["remaining"], int)


def test_refusals_by_the_analysis_are_graphql_errors_not_500(
    adapter: Adapter, server: UvicornServer
) -> None:
    response = post(server.url, "{ products(first: 1000) { reviews(first: 1000) { stars } } }")
    assert response.status_code == 400  # can never fit in 100
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == "COST_EXCEEDS_CAPACITY"
    assert "Retry-After" not in response.headers  # waiting does not help
    bad = post(server.url, "query Q($n: Int!) { products(first: $n) { name } }")
    assert bad.status_code == adapter.analysis_status
    assert bad.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
    assert adapter.shop.resolver_calls == []


def test_rotating_unknown_keys_and_forged_forwarded_for_get_one_addresses_budget(
    server: UvicornServer,
) -> None:
    responses = [
        post(server.url, EXPORT, key=f"guess-{i}", **{"X-Forwarded-For": f"198.51.100.{i}"})
        for i in range(12)
    ]
    # Each new key (and each forged X-Forwarded-For) is the client's address: one budget.
    assert [r.status_code for r in responses] == [200] * 10 + [429] * 2
    assert post(server.url, EXPORT, key="another-invented-key").status_code == 429
    assert post(server.url, EXPORT, key="tenant-a").status_code == 200  # a known key


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
def test_hot_reload_picks_up_edits_and_survives_bad_ones(
    server: UvicornServer, config_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quotaql")
    assert _capacity(server) == 100
    text = config_path.read_text(encoding="utf-8")
    config_path.write_text(text.replace("capacity = 100\n", "capacity = 300\n"), encoding="utf-8")
    assert _eventually(lambda: _capacity(server) == 300)
    config_path.write_text(text + "\n[tiers.broken]\ncapacity = -1\n", encoding="utf-8")
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


def _eventually(check: Callable[[], Any], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
def test_fifty_concurrent_clients_never_over_admit(adapter: Adapter, server: UvicornServer) -> None:
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
    assert adapter.shop.resolver_calls.count("exportOrders") == 10


# -- Redis storage, and Redis failing -------------------------------------------------------


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
def test_redis_storage_allows_blocks_and_refunds(
    adapter: Adapter, config_path: Path, fresh_redis_server: RedisServer
) -> None:
    storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    with UvicornServer(adapter.app(config_path, storage), lifespan="on") as server:
        first = post(server.url, EXPENSIVE)
        assert first.status_code == 200
        cost = first.json()["extensions"]["cost"]
        assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(84, abs=0.1)
        statuses = [post(server.url, EXPORT).status_code for _ in range(10)]
        assert statuses == [200] * 8 + [429] * 2  # 84 / 10


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
@pytest.mark.parametrize(
    ("mode", "status", "code"),
    [("open", 200, None), ("closed", 503, "RATE_LIMITER_UNAVAILABLE"), ("local", 200, None)],
)
def test_a_redis_kill_answers_by_the_fail_mode(
    adapter: Adapter,
    write_config: Callable[..., Path],
    fresh_redis_server: RedisServer,
    mode: str,
    status: int,
    code: str | None,
) -> None:
    path = write_config(limits=f'on_backend_error = "{mode}"\n')
    storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    with UvicornServer(adapter.app(path, storage), lifespan="on") as server:
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


# -- concurrency limits (max_in_flight) -------------------------------------------------------

NARROW = """
[tiers.narrow]
capacity = 100
refill_per_second = 0.001
max_in_flight = 2
[tenants.narrow-co]
tier = "narrow"
"""


def test_too_many_concurrent_is_429_with_retry_after_and_debits_nothing(
    adapter: Adapter, write_config: Callable[..., Path], fresh_redis_server: RedisServer
) -> None:
    """Another worker holds the tenant's two slots (its leases are in the shared Redis): this
    one refuses, runs no resolver, debits nothing, and admits again once a slot is free."""
    from quotaql.storage.leases import LeaseSpec, RedisLeases
    from quotaql.storage.redis import RedisStorage

    path = write_config(NARROW, limits="retry_jitter = 0\nconcurrency_retry_after = 3\n")
    storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    with (
        fresh_redis_server.client() as client,
        UvicornServer(adapter.app(path, storage), lifespan="on") as server,
    ):
        other_worker = RedisLeases(RedisStorage(client, timeout=1.0))
        first = post(server.url, EXPORT, key="narrow-co")
        assert first.status_code == 200
        left = first.headers["X-RateLimit-Remaining"]
        for lease in ("elsewhere-1", "elsewhere-2"):
            spec = [LeaseSpec("tier", 2)]
            assert other_worker.take("key:narrow-co", spec, lease, 30_000).taken
        adapter.shop.resolver_calls.clear()

        refused = post(server.url, EXPORT, key="narrow-co")

        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "3"
        assert "RateLimit" not in refused.headers  # no budget was looked at
        body = refused.json()
        assert body["data"] is None
        (error,) = body["errors"]
        assert error["extensions"] == {
            "code": "TOO_MANY_CONCURRENT",
            "limit": 2,
            "quota": "in_flight",
            "retryAfter": 3.0,
        }
        assert adapter.shop.resolver_calls == []
        # The refusal is not kept: once a slot is free, the next request runs at once, and
        # finds the budget as the first request left it.
        assert other_worker.release("key:narrow-co", ["tier"], "elsewhere-1") == 1
        again = post(server.url, EXPORT, key="narrow-co")
        assert again.status_code == 200
        assert int(again.headers["X-RateLimit-Remaining"]) == int(left) - 10
        # Its own lease goes back once the operation ends, by a task of the server's loop
        # that may run just after the response was sent: given a moment, never left held.
        deadline = time.monotonic() + 5
        while (
            client.zcard("quotaql:{t:key:narrow-co}:~c:tier") != 1 and time.monotonic() < deadline
        ):
            time.sleep(0.01)
        assert client.zcard("quotaql:{t:key:narrow-co}:~c:tier") == 1  # its own was released
