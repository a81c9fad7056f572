"""Cost headers for an edge and a warning before the wall, over real HTTP: Strawberry's and
Ariadne's ASGI apps under uvicorn, the budgets in a real redis-server.

The attack: a client forges the cost headers (``X-Cost-Estimated: 0``) hoping an edge that
counts them, or the application, takes its word; a resolver (or the framework) sets a header
of the same name. The answer always carries quotaql's values, never theirs; a refusal carries
the estimate and no actual cost; ``cost_headers = false`` sends none (a live reload).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
from ariadne import QueryType

from tests.support.limited_apps import limited_app, serving
from tests.support.waiting import eventually

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.app_servers import UvicornServer

TOML = """
[limits]
deny_cache_size = 0
reload_interval = 0.1
warn_at = 0.8
{headers}
[tiers.free]
capacity = 1000
refill_per_second = 0.5
[tenants.mallory]
tier = "free"
[tenants.alice]
tier = "free"
"""
HEADERS = 'cost_headers = true\ncost_header_names = { estimated = "X-Score", actual = "X-Spent" }'
FORGED = {
    "X-Cost-Estimated": "0",
    "X-Cost-Actual": "0",
    "X-Score": "0",
    "X-Spent": "0",
    "RateLimit": '"tenant";r=1000;t=0;quotaql-warn=1000',
}


@strawberry.type
class Item:
    id: strawberry.ID


@strawberry.type
class Query:
    @strawberry.field
    def items(self, info: strawberry.Info, first: int = 10) -> list[Item]:
        # A resolver (or a middleware) that writes the edge's headers itself.
        response = info.context.get("response")
        if response is not None:
            response.headers["X-Score"] = "0"
            response.headers["X-Spent"] = "0"
        return [Item(id=strawberry.ID(str(i))) for i in range(min(first, 500))]


SDL = "type Query { items(first: Int = 10): [Item!]! }\ntype Item { id: ID! }"
query = QueryType()


@query.field("items")
def resolve_items(_: Any, info: Any, first: int = 10) -> list[dict[str, str]]:
    del info
    return [{"id": str(i)} for i in range(min(first, 500))]


@pytest.fixture(params=["strawberry", "ariadne"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[UvicornServer, Path]]:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML.format(headers=HEADERS), encoding="utf-8")
    kind = str(request.param)
    with serving(
        request, "redis", lambda storage: limited_app(kind, path, storage, Query, SDL, query)
    ) as running:
        yield running, path


def post(url: str, document: str, key: str, **headers: str) -> httpx.Response:
    return httpx.post(f"{url}/graphql", json={"query": document},
                      headers={"X-API-Key": key, **headers}, timeout=10)  # fmt: skip


def items(n: int) -> str:
    return f"{{ items(first: {n}) {{ id }} }}"


def test_forged_cost_headers_are_never_echoed_and_the_warning_comes_before_the_wall(
    served: tuple[UvicornServer, Path],
) -> None:
    server, path = served
    # 600 asked, 600 returned: quotaql's numbers, whatever the client and the resolver say.
    answer = post(server.url, items(600), "mallory", **FORGED)
    assert answer.status_code == 200, answer.text
    assert (answer.headers["X-Score"], answer.headers["X-Spent"]) == ("600", "500")
    assert answer.headers.get_list("X-Score") == ["600"]  # one value: the resolver's is gone
    assert answer.headers.get_list("X-Spent") == ["500"]
    assert "X-Cost-Estimated" not in answer.headers  # not echoed: renamed, and never read
    assert "quotaql-warn" not in answer.headers["RateLimit"]  # 500 of 1000 left
    body = answer.json()
    assert body["extensions"]["cost"]["actualQueryCost"] == 500
    assert "warning" not in body["extensions"]["cost"]

    # 350 more: 150 of 1000 left (15 %), below warn_at's 20 %: warned, in the body and the
    # RateLimit header, the same numbers.
    warned = post(server.url, items(350), "mallory", **FORGED)
    assert warned.status_code == 200, warned.text
    cost = warned.json()["extensions"]["cost"]
    warning = cost["warning"]
    assert warning["quota"] == "tenant"
    assert warning["capacity"] == 1000
    assert warning["sustainableRate"] == 0.5
    assert 150 <= warning["remaining"] <= 152  # (the refill since, at 0.5 a second)
    assert warning["remaining"] == cost["throttleStatus"]["currentlyAvailable"]
    rate_limit = warned.headers["RateLimit"]
    assert rate_limit.startswith(f'"tenant";r={warning["remaining"]};')
    assert rate_limit.endswith(";quotaql-warn=0.5")
    assert rate_limit.count("quotaql-warn") == 1  # the client's forged one is not there

    # The wall: refused. The estimate still goes out (an edge counts what was asked), the
    # actual cost does not (nothing ran), and a refusal carries no warning.
    refused = post(server.url, items(400), "mallory", **FORGED)
    assert refused.status_code == 429
    assert refused.headers["X-Score"] == "400"
    assert "X-Spent" not in refused.headers
    assert "quotaql-warn" not in refused.headers["RateLimit"]
    assert "warning" not in refused.json()["extensions"]["cost"]

    # Mallory's wall is not Alice's: nothing about it in her answer.
    alice = post(server.url, items(5), "alice")
    assert "warning" not in alice.json()["extensions"]["cost"]
    assert alice.headers["RateLimit"].startswith('"tenant";r=995;')

    # Priced, not run: the estimate only.
    priced = post(server.url, items(7), "alice", **{"GraphQL-Cost": "validate"})
    assert priced.headers["X-Score"] == "7"
    assert "X-Spent" not in priced.headers

    # cost_headers = false (a live reload): quotaql sends none of its own (the names are
    # the application's again: what a resolver writes under them goes out untouched).
    path.write_text(TOML.format(headers=""), encoding="utf-8")

    def reloaded() -> bool:
        return post(server.url, items(1), "alice").headers.get("X-Score") in (None, "0")

    assert eventually(reloaded, 10, every=0.1) is not None
    plain = post(server.url, items(2), "alice", **FORGED)
    assert plain.status_code == 200
    assert "X-Cost-Estimated" not in plain.headers
    assert "X-Cost-Actual" not in plain.headers
    assert plain.headers.get("X-Spent") in (None, "0")
