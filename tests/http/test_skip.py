"""Partial answers over real HTTP: ``[limits] on_field_limit = "skip"`` on Strawberry's and
Ariadne's ASGI apps served by uvicorn, budgets in a real Redis.

The attack: a client whose ``Query.search`` quota is spent asks for it again, under two
aliases, beside a free field. The answer is a 200 with ``hello``, each alias ``null`` with a
``RATE_LIMITED`` error at its path (``retryAfter``, the quota); no resolver of search nor
below it runs; the budgets in Redis show nothing of it debited; the headers name the spent
quota without a ``Retry-After``. A non-nullable field with a spent quota still refuses the
whole operation (429, no data).
"""

from __future__ import annotations

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

# search { id details { text } }: search weighs 10, details 1: 11 points of search's 25
# (two aliases: 22, more than the 14 then left).
TOML = """
[limits]
on_field_limit = "skip"
retry_jitter = 0
[cost.weights]
"Query.search" = 10
"Query.mustSearch" = 10
[tiers.free]
capacity = 1000
refill_per_second = 0.001
[tiers.free.fields]
"Query.search" = { capacity = 25, refill_per_second = 0.001 }
"Query.mustSearch" = { capacity = 15, refill_per_second = 0.001 }
[tenants.attacker]
tier = "free"
"""
SEARCH = "search { id details { text } }"
CALLS: dict[str, int] = {}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


@strawberry.type
class Detail:
    text: str


@strawberry.type
class Hit:
    id: strawberry.ID

    @strawberry.field
    def details(self) -> Detail:
        _count("details")
        return Detail(text="expensive")


@strawberry.type
class Query:
    @strawberry.field
    def search(self) -> Hit | None:
        _count("search")
        return Hit(id=strawberry.ID("1"))

    @strawberry.field
    def must_search(self) -> Hit:
        _count("mustSearch")
        return Hit(id=strawberry.ID("1"))

    @strawberry.field
    def hello(self) -> str:
        _count("hello")
        return "world"


SDL = """
type Query { search: Hit  mustSearch: Hit!  hello: String! }
type Hit { id: ID!  details: Detail! }
type Detail { text: String! }
"""
query = QueryType()


def _details(_: Any) -> dict[str, str]:
    """Hit.details under Ariadne (graphql-core's default resolver calls a callable)."""
    _count("details")
    return {"text": "expensive"}


@query.field("search")
def resolve_search(*_: Any) -> dict[str, Any]:
    _count("search")
    return {"id": "1", "details": _details}


@query.field("mustSearch")
def resolve_must_search(*_: Any) -> dict[str, Any]:
    _count("mustSearch")
    return {"id": "1", "details": _details}


@query.field("hello")
def resolve_hello(*_: Any) -> str:
    _count("hello")
    return "world"


@pytest.fixture(params=["strawberry", "ariadne"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[UvicornServer]:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    CALLS.clear()
    kind = str(request.param)
    with serving(
        request, "redis", lambda storage: limited_app(kind, path, storage, Query, SDL, query)
    ) as running:
        yield running


def post(url: str, document: str) -> httpx.Response:
    return httpx.post(f"{url}/graphql", json={"query": document},
                      headers={"X-API-Key": "attacker"}, timeout=10)  # fmt: skip


def test_a_spent_field_is_skipped_not_run_not_charged_and_a_200(server: UvicornServer) -> None:
    first = post(server.url, "{ " + SEARCH + " }")
    assert first.status_code == 200, first.text
    assert first.json()["data"]["search"]["details"]["text"] == "expensive"
    assert first.headers["RateLimit"].startswith('"field:Query.search";r=14;')
    assert CALLS == {"search": 1, "details": 1}

    response = post(server.url, "{ a: " + SEARCH + " hello b: " + SEARCH + " }")

    assert response.status_code == 200, response.text
    body = response.json()
    assert body["data"] == {"a": None, "hello": "world", "b": None}
    errors = sorted(body["errors"], key=lambda error: error["path"])
    assert [error["path"] for error in errors] == [["a"], ["b"]]
    for error in errors:
        assert error["extensions"]["code"] == "RATE_LIMITED"
        assert error["extensions"]["quota"] == "field:Query.search"
        assert error["extensions"]["retryAfter"] > 0
        assert error["extensions"]["remaining"] == 14
    assert CALLS == {"search": 1, "details": 1, "hello": 1}  # neither alias ran
    # Nothing of search debited: the tenant paid the least a request pays (hello costs 0),
    # search's quota still holds its 14 (the headers name it, the tightest, without a wait).
    cost = body["extensions"]["cost"]
    assert cost["throttleStatus"]["currentlyAvailable"] == 1000 - 11 - 1
    assert cost["actualQueryCost"] == 0
    assert response.headers["RateLimit"].startswith('"field:Query.search";r=14;')
    assert "retry-after" not in response.headers

    # In Redis, search's quota held its 14 all along: a search of 10 fits, and leaves 4.
    again = post(server.url, "{ search { id } }")
    assert again.json()["data"] == {"search": {"id": "1"}}
    assert again.headers["RateLimit"].startswith('"field:Query.search";r=4;')

    # A non-nullable field whose quota is spent refuses the whole operation, as before.
    assert post(server.url, "{ mustSearch { id details { text } } }").status_code == 200
    refused = post(server.url, "{ mustSearch { id details { text } } hello }")
    assert refused.status_code == 429, refused.text
    assert refused.json().get("data") is None
    assert refused.json()["errors"][0]["extensions"]["quota"] == "field:Query.mustSearch"
    assert int(refused.headers["Retry-After"]) >= 1
    assert CALLS == {"search": 2, "details": 2, "hello": 1, "mustSearch": 1}
