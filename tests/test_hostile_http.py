"""No free work, over real HTTP: the attacks issue 11 found, on every adapter of the gate
(Strawberry's ASGI app and FastAPI router, Ariadne's ASGI app and a FastAPI route) served
by uvicorn, and on Redis where the attack was on Redis."""

# ruff: noqa: F811 (the contract's fixtures, imported by name)
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import httpx
import pytest

from quotaql.storage.redis import AsyncRedisStorage
from tests.introspection import INTROSPECTION_QUERIES
from tests.plugin.asgi import UvicornServer
from tests.shop_http import EXPENSIVE, EXPORT, post
from tests.test_http_contract import (  # noqa: F401 (its fixtures, by name)
    ASGI,
    Adapter,
    _clear_resolver_calls,
    adapter,
    config_path,
    server,
    write_config,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from tests.servers import RedisServer


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
    ],
)
def test_a_document_that_would_stall_validation_is_refused_before_it(
    adapter: Adapter, server: UvicornServer, document: str, code: str
) -> None:
    response = post(server.url, document)
    (error,) = response.json()["errors"]  # quotaql's one error: validation never ran
    assert error["extensions"]["code"] == code
    assert available(server.url) == pytest.approx(99, abs=0.1)


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
