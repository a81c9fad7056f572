"""Work above the estimate is charged, over real HTTP: a resolver that ignores ``first``
returns 500 items where the estimate said 10, on Strawberry's and Ariadne's ASGI apps served
by uvicorn, with the budgets in memory or in a real Redis. Before, it paid 10 points for 500
items, again and again; now it pays 500, its budget goes below empty, and its next requests
are refused until the refill has paid the debt, while another subject runs on."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
from ariadne import QueryType

from tests.support.limited_apps import limited_app, serving

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.app_servers import UvicornServer


RETURNED = 500  # what the resolver returns, whatever `first` says
GREEDY = "{ items(first: 10) { id } }"  # priced 10: 10 items of weight 1
CAPACITY = 100
REFILL = 200  # points a second: the debt of 400 is paid in 2 s
TOML = f"""
[limits]
deny_cache_size = 0
[tiers.free]
capacity = {CAPACITY}
refill_per_second = {REFILL}
[tenants.attacker]
tier = "free"
[tenants.honest]
tier = "free"
"""


@strawberry.type
class Item:
    id: strawberry.ID


@strawberry.type
class Query:
    @strawberry.field
    def items(self, first: int = 10) -> list[Item]:
        del first  # the bug the attacker found: the page size is not applied
        return [Item(id=strawberry.ID(str(i))) for i in range(RETURNED)]

    @strawberry.field
    def hello(self) -> str:
        return "world"


SDL = """
type Query { items(first: Int = 10): [Item!]!  hello: String! }
type Item { id: ID! }
"""
query = QueryType()


@query.field("items")
def resolve_items(_: Any, info: Any, first: int = 10) -> list[dict[str, str]]:
    del info, first  # the page size is not applied
    return [{"id": str(i)} for i in range(RETURNED)]


@query.field("hello")
def resolve_hello(*_: Any) -> str:
    return "world"


@pytest.fixture(params=["strawberry", "ariadne"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["memory", "redis"])
def server(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> Iterator[UvicornServer]:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    with serving(
        request, request.param, lambda storage: limited_app(kind, path, storage, Query, SDL, query)
    ) as running:
        yield running


def post(url: str, document: str, key: str) -> httpx.Response:
    """POST ``document`` as the tenant of API key ``key`` (both run on one loopback
    address: the keys tell them apart)."""
    return httpx.post(f"{url}/graphql", json={"query": document},
                      headers={"X-API-Key": key}, timeout=10)  # fmt: skip


def test_500_items_for_an_estimate_of_10_are_charged_500_and_the_subject_waits(
    server: UvicornServer,
) -> None:
    sent = time.monotonic()
    response = post(server.url, GREEDY, "attacker")
    assert response.status_code == 200, response.text
    body = response.json()
    assert len(body["data"]["items"]) == RETURNED
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 10
    assert cost["actualQueryCost"] == RETURNED
    # 10 debited, 490 charged after: 400 below empty, shown as nothing left.
    assert cost["throttleStatus"]["currentlyAvailable"] == 0

    refused = post(server.url, "{ hello }", "attacker")
    elapsed = time.monotonic() - sent  # the refill since the overage was charged, at most
    assert refused.status_code == 429
    (error,) = refused.json()["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    # The debt (400) and the request (1) at 200 a second: 2 s from the charge, less what
    # has refilled since, jittered up by at most 10 %.
    wait = error["extensions"]["retryAfter"]
    assert 2.005 - elapsed - 0.01 <= wait <= 2.005 * 1.1 + 0.01, (wait, elapsed)
    assert int(refused.headers["Retry-After"]) >= 2
    # The greedy query again: refused, no resolver runs for it.
    assert post(server.url, GREEDY, "attacker").status_code == 429

    # Another subject is not touched.
    honest = post(server.url, "{ hello }", "honest")
    assert honest.status_code == 200
    assert honest.json()["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == 99

    # Once the refill has paid the debt, the attacker runs again.
    time.sleep(2.1)
    assert post(server.url, "{ hello }", "attacker").status_code == 200


def test_the_attack_repeated_pays_its_work_not_the_estimate(server: UvicornServer) -> None:
    # Before: 10 points for 500 items, so at 200 points a second 20 such requests a second
    # for ever. Now one of them costs its 500: within 1.5 s, at most 2 of 15 run.
    served = 0
    deadline = time.monotonic() + 1.5
    for _ in range(15):
        if time.monotonic() > deadline:
            break
        served += post(server.url, GREEDY, "attacker").status_code == 200
    assert 1 <= served <= 2
