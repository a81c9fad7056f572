"""No free work, over real HTTP: the attacks issue 11 found, on every adapter of the gate
(Strawberry's ASGI app and FastAPI router, Ariadne's ASGI app and a FastAPI route) served
by uvicorn, and on Redis where the attack was on Redis."""

# ruff: noqa: F811 (the contract's fixtures, imported by name)
from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.http.test_contract import (  # noqa: F401 (its fixtures, by name)
    ASGI,
    Adapter,
    _clear_resolver_calls,
    adapter,
    server,
)
from tests.support import strawberry_shop
from tests.support.app_servers import UvicornServer
from tests.support.introspection import INTROSPECTION_QUERIES
from tests.support.shop_http import EXPENSIVE, EXPORT, config_path, post, write_config  # noqa: F401

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from tests.support.servers import RedisServer


def available(url: str, key: str = "tenant-a") -> float:
    """What ``key`` has left before this probe (``{ hello }`` pays the minimum, 1)."""
    cost = post(url, "{ hello }", key=key).json()["extensions"]["cost"]
    return float(cost["throttleStatus"]["currentlyAvailable"]) + 1


def test_a_multi_megabyte_alias_document_is_refused_at_once_and_charged(
    adapter: Adapter, server: UvicornServer
) -> None:
    # 5 MB of `__typename` aliases: it blocked a worker for 18 s and cost nothing.
    document = "{ " + " ".join(f"a{i}: __typename" for i in range(400_000)) + " }"
    assert len(document) > 5_000_000
    started = time.perf_counter()
    response = post(server.url, document)
    elapsed = time.perf_counter() - started
    errors = response.json()["errors"]
    assert errors[0]["extensions"]["code"] == "QUERY_TOO_LARGE"
    assert elapsed < 2.0  # the body's transfer and JSON decoding; parsing never starts
    assert adapter.shop.resolver_calls == []
    assert available(server.url) == pytest.approx(99, abs=0.1)  # it paid the minimum


@pytest.mark.parametrize(
    ("document", "code"),
    [
        # 450 conflicting aliases (13.8 KB): 1.2 s of graphql-core's overlapping-fields rule.
        (
            "{ " + " ".join(f"x: {'name' if i % 2 else 'hello'}" for i in range(450)) + " }",
            "TOO_MANY_FIELDS",
        ),
        # The same without aliases: one field, different arguments, again and again.
        (
            "{ " + " ".join(f"products(first: {i}) {{ name }}" for i in range(450)) + " }",
            "TOO_MANY_FIELDS",
        ),
        ("{ " + " ".join(f"a{i}: hello" for i in range(450)) + " }", "TOO_MANY_ALIASES"),
        ("{ " + " zzz" * 20_000 + " }", "QUERY_TOO_LARGE"),  # 20,000 unknown fields
        # Within every limit per selection set, but merged: 25 x 19 `reviews` compared
        # pairwise (0.6-1.3 s of validation a request, found by an attack on this issue).
        (
            "{ "
            + " ".join("products { " + " reviews { stars }" * 19 + " }" for _ in range(25))
            + " }",
            "TOO_MANY_FIELDS",
        ),
    ],
)
def test_a_document_that_would_stall_validation_is_refused_before_it(
    adapter: Adapter, server: UvicornServer, document: str, code: str
) -> None:
    response = post(server.url, document)
    (error,) = response.json()["errors"]  # quotaql's one error: validation never ran
    assert error["extensions"]["code"] == code
    # It paid for its size ([cost] chars_per_point: 1,000 characters a point; each of these
    # is 3.6-80 KB), where it paid min_charge (1) before.
    # told rounded down
    assert available(server.url) == pytest.approx(100 - len(document) / 1000, abs=1)


def test_parse_and_validation_failures_pay_the_minimum(
    adapter: Adapter, server: UvicornServer
) -> None:
    for document in ("{ hello", "{ nope }", "{ products(first: 1) { nope } }"):
        for _ in range(5):
            assert post(server.url, document).json()["errors"]
    assert adapter.shop.resolver_calls == []
    assert available(server.url) == pytest.approx(100 - 15, abs=0.1)


def test_validate_only_requests_pay_the_minimum_and_run_dry(
    adapter: Adapter, write_config: Callable[..., Path]
) -> None:
    path = write_config()
    path.write_text(path.read_text().replace("capacity = 100\n", "capacity = 5\n", 1))
    with UvicornServer(adapter.app(path)) as running:
        answers = [post(running.url, EXPENSIVE, **{"GraphQL-Cost": "validate"}) for _ in range(7)]
    assert [a.status_code for a in answers] == [200] * 5 + [429] * 2
    left = [a.json()["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]
            for a in answers[:5]]  # fmt: skip
    assert left == pytest.approx([4, 3, 2, 1, 0], abs=0.1)
    assert answers[5].json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
    assert adapter.shop.resolver_calls == []


@pytest.mark.parametrize("name", sorted(INTROSPECTION_QUERIES))
def test_the_tools_introspection_queries_pass(
    adapter: Adapter, server: UvicornServer, name: str
) -> None:
    response = post(server.url, INTROSPECTION_QUERIES[name])
    assert response.status_code == 200
    body = response.json()
    assert "errors" not in body, body["errors"]
    assert body["data"]["__schema"]["queryType"]["name"] == "Query"


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
def test_a_refused_tenants_flood_costs_redis_nothing(
    adapter: Adapter, config_path: Path, fresh_redis_server: RedisServer
) -> None:
    storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    with (
        UvicornServer(adapter.app(config_path, storage), lifespan="on") as server,
        fresh_redis_server.client() as redis,
    ):
        statuses = [post(server.url, EXPORT).status_code for _ in range(11)]
        assert statuses == [200] * 10 + [429]  # 100 / 10: the last refused by Redis
        calls = redis.info("commandstats")["cmdstat_evalsha"]["calls"]
        with httpx.Client(base_url=server.url, timeout=10) as client:
            flood = [
                client.post("/graphql", json={"query": document}, headers={"X-API-Key": "tenant-a"})
                for document in [EXPORT, "{ hello }", "{ hello", "{ nope }"] * 25
            ]
        assert {response.status_code for response in flood} == {429}
        for response in flood:
            (error,) = response.json()["errors"]
            assert error["extensions"]["code"] == "RATE_LIMITED"
            exact = error["extensions"]["retryAfter"]
            assert int(response.headers["Retry-After"]) >= exact > 0
        # A hundred refusals, and not one more script call: they came from memory.
        assert redis.info("commandstats")["cmdstat_evalsha"]["calls"] == calls
        assert post(server.url, EXPORT, key="tenant-b").status_code == 200  # another tenant


@pytest.mark.parametrize("adapter", ["strawberry-asgi"], indirect=True)
def test_an_exhausted_tenant_stays_exhausted_through_a_redis_outage(
    adapter: Adapter, write_config: Callable[..., Path], fresh_redis_server: RedisServer
) -> None:
    # A fresh in-process bucket per outage gave an exhausted tenant 4-8 more costly requests.
    path = write_config(limits='on_backend_error = "local"\n')
    storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    with UvicornServer(adapter.app(path, storage), lifespan="on") as server:
        statuses = [post(server.url, EXPORT).status_code for _ in range(10)]
        assert statuses == [200] * 10  # 100 / 10: nothing left
        fresh_redis_server.kill()
        during = [post(server.url, EXPORT) for _ in range(5)]
        assert [response.status_code for response in during] == [429] * 5
        for response in during:
            assert response.json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
        # A tenant Redis never reported starts from local_share (10 %) of its capacity.
        fresh = [post(server.url, EXPORT, key="tenant-b").status_code for _ in range(3)]
        assert fresh == [200, 429, 429]


class StallingStorage(AsyncRedisStorage):
    """The real storage, with a hook to stall the server's event loop for 2 s (as a slow
    sync call in an async server would: a hostile document, a bad resolver) right when its
    next call is under way."""

    stall_next = False

    async def acquire(self, *args: Any, **kwargs: Any) -> Any:
        if self.stall_next:
            self.stall_next = False
            asyncio.get_running_loop().call_soon(time.sleep, 2.0)  # runs at this call's await
        return await super().acquire(*args, **kwargs)


def test_a_two_second_stall_with_redis_healthy_leaves_the_breaker_closed(
    write_config: Callable[..., Path], fresh_redis_server: RedisServer
) -> None:
    # Found on uvicorn: the Redis call under way during a stall blew its 50 ms timeout, the
    # breaker opened, and `local` answered from a fresh bucket.
    storage = StallingStorage.from_url(fresh_redis_server.url)  # the default 50 ms timeout
    limiter = CostLimiter.from_config(write_config(), storage=storage)

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await storage.close()

    app = Starlette(
        routes=[Mount("/", app=GraphQL(strawberry_shop.make_schema(limiter)))], lifespan=lifespan
    )
    with UvicornServer(app, lifespan="on") as server:
        for _ in range(3):
            assert post(server.url, "{ hello }", key="acme").status_code == 200
            storage.stall_next = True
            started = time.perf_counter()
            stalled = post(server.url, "{ hello }", key="acme")
            assert time.perf_counter() - started >= 2.0  # the loop did stall
            assert stalled.status_code == 200
            assert "errors" not in stalled.json()
            assert not limiter.limiter.breaker.is_open  # a stall is no outage
        after = post(server.url, "{ hello }", key="acme").json()["extensions"]["cost"]
        # Every request was decided by Redis: 1000 - 7 minimum charges, none elsewhere.
        assert after["throttleStatus"]["currentlyAvailable"] == pytest.approx(993, abs=0.5)


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
def test_refused_documents_pay_the_minimum_on_redis_too(
    adapter: Adapter, config_path: Path, fresh_redis_server: RedisServer
) -> None:
    # With an async storage, Strawberry's hooks before execution stay sync: the refusal's
    # charge is taken by a task as the operation ends.
    storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=0.5)
    with UvicornServer(adapter.app(config_path, storage), lifespan="on") as server:
        for document in ("{ hello", "{ nope }", "{ " + " hello" * 31 + " }"):
            for _ in range(2):
                assert post(server.url, document).json()["errors"]
        assert adapter.shop.resolver_calls == []

        time.sleep(0.2)  # the last charge may land just after its answer
        assert available(server.url) == pytest.approx(100 - 6, abs=0.1)


def test_a_document_whose_operation_cannot_be_chosen_pays_the_minimum(
    adapter: Adapter, server: UvicornServer
) -> None:
    # 2,900 small operations and a name none has: parsed for nothing, and it was free.
    document = " ".join(f"query Q{i} {{ hello }}" for i in range(2_900))
    for _ in range(3):
        response = httpx.post(
            f"{server.url}/graphql",
            json={"query": document, "operationName": "NOPE"},
            headers={"X-API-Key": "tenant-a"},
            timeout=10,
        )
        # Strawberry answers 400 with a text body, Ariadne a GraphQL error.
        assert response.status_code == 400 or response.json()["errors"]
    assert adapter.shop.resolver_calls == []
    # The first paid for its 63 KB ([cost] chars_per_point: 63 points), not min_charge (1);
    # the budget left could not pay the next ones' size: refused for lack of it, free.
    # told rounded down
    assert available(server.url) == pytest.approx(100 - len(document) / 1000, abs=1)
