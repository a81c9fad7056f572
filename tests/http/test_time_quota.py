"""The time quota over real HTTP: a query cheap in points whose resolver burns 60 ms of CPU,
sent again and again by one client, on Strawberry's and Ariadne's ASGI apps served by
uvicorn, with the budgets in memory or in a real Redis. Before, it paid its point (or
nothing: a scalar costs 0) and kept the worker busy as long as it liked; now its worker time
is charged to its time quota, and once that is in debt it is refused ``RATE_LIMITED`` with
``extensions.quota = "time"`` and a ``Retry-After``, while another client runs on."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import httpx
import pytest
import strawberry
from ariadne import QueryType

from tests.support.limited_apps import limited_app, serving

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.app_servers import UvicornServer


BURN_MS = 60  # CPU time the slow resolver takes
SLOW = "{ slow }"  # priced 0 (a scalar): only the minimum charge, 1 point
CAPACITY_MS = 200
REFILL_MS = 50  # a second: a twentieth of a core
TOML = f"""
[limits]
[tiers.free]
capacity = 1000
refill_per_second = 50
time = {{ capacity_ms = {CAPACITY_MS}, refill_ms_per_second = {REFILL_MS} }}
[tenants.attacker]
tier = "free"
[tenants.honest]
tier = "free"
"""


def burn(ms: float) -> int:
    """Keep this thread's CPU busy for ``ms`` milliseconds of CPU time."""
    end = time.thread_time() + ms / 1000
    while time.thread_time() < end:
        sum(range(200))
    return int(ms)


@strawberry.type
class Query:
    @strawberry.field
    def slow(self) -> int:
        return burn(BURN_MS)

    @strawberry.field
    def hello(self) -> str:
        return "world"


SDL = "type Query { slow: Int!  hello: String! }"
query = QueryType()
query.set_field("slow", lambda *_: burn(BURN_MS))
query.set_field("hello", lambda *_: "world")


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
    return httpx.post(f"{url}/graphql", json={"query": document},
                      headers={"X-API-Key": key}, timeout=10)  # fmt: skip


def test_a_slow_cheap_query_repeated_is_refused_by_the_time_quota(server: UvicornServer) -> None:
    started = time.monotonic()
    statuses: list[int] = []
    refusal: httpx.Response | None = None
    for _ in range(12):
        response = post(server.url, SLOW, "attacker")
        statuses.append(response.status_code)
        if response.status_code == 429 and refusal is None:
            refusal = response
        honest = post(server.url, "{ hello }", "honest")  # interleaved: never refused
        assert honest.status_code == 200, honest.text
    elapsed = time.monotonic() - started
    ran = statuses.count(200)
    # 200 ms at once and 50 ms a second: each run takes 60 ms, so about four runs, and one
    # for each 60 ms refilled meanwhile; never the twelve it asked for.
    most = (CAPACITY_MS + REFILL_MS * elapsed) / BURN_MS + 1
    assert 3 <= ran <= most, (statuses, elapsed)
    assert statuses[:3] == [200, 200, 200]
    assert refusal is not None
    (error,) = refusal.json()["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    assert error["extensions"]["quota"] == "time"
    assert error["extensions"]["retryAfter"] > 0
    assert int(refusal.headers["Retry-After"]) >= 1
    assert error["message"].startswith("Your operations have taken all the worker time")
