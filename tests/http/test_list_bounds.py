"""A null slicing argument over real HTTP: ``items(first: null)`` asks a resolver doing
``items[:first]`` for every item, so it is priced at the list's upper bound
(``[cost] max_list_size``), never at the assumed size.

Both adapters on uvicorn: Strawberry (``first: int | None = None`` prints as
``first: Int = null``, so even an argument left out is null) and Ariadne (schema-first,
``first: Int``, sized by the naming convention).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
from ariadne import QueryType, make_executable_schema

from quotaql import ariadne as ariadne_adapter
from quotaql.plugin import CostLimiter
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

CATALOG = 500  # what `items[:None]` returns
calls: list[int] = []  # the items each resolver call returned


@strawberry.type
class Item:
    id: int


@strawberry.type
class Query:
    @strawberry.field
    def items(self, first: int | None = None) -> list[Item]:
        found = [Item(id=i) for i in range(CATALOG)][:first]
        calls.append(len(found))
        return found


ARIADNE_SDL = """
type Item { id: Int! }
type Query { items(first: Int): [Item!]! }
"""


def _ariadne_schema() -> Any:
    query = QueryType()

    @query.field("items")
    def resolve_items(_: Any, _info: Any, first: int | None = None) -> list[dict[str, int]]:
        found = [{"id": i} for i in range(CATALOG)][:first]
        calls.append(len(found))
        return found

    return make_executable_schema(ARIADNE_SDL, query)


def _app(name: str, path: Path) -> Any:
    if name == "strawberry":
        from strawberry.asgi import GraphQL

        return GraphQL(strawberry.Schema(Query, extensions=[CostLimiter.from_config(path)]))
    return ariadne_adapter.CostLimiter.from_config(path).asgi(_ariadne_schema())


def _config(tmp_path: Path, capacity: int, extra: str = "") -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(
        f"[tiers.free]\ncapacity = {capacity}\nrefill_per_second = 0.001\n"
        f'[tenants.tenant-a]\ntier = "free"\n{extra}',
        encoding="utf-8",
    )
    return path


def _post(url: str, query: str, variables: dict[str, Any] | None = None) -> httpx.Response:
    return httpx.post(
        f"{url}/graphql",
        json={"query": query, "variables": variables or {}},
        headers={"X-API-Key": "tenant-a"},
        timeout=10,
    )


@pytest.fixture(autouse=True)
def _clear_calls() -> Iterator[None]:
    calls.clear()
    yield
    calls.clear()


NULLS = [
    ("{ items(first: null) { id } }", None),
    ("query($n: Int) { items(first: $n) { id } }", {"n": None}),
    ("query($n: Int = null) { items(first: $n) { id } }", {}),
]


@pytest.mark.parametrize("adapter", ["strawberry", "ariadne"])
@pytest.mark.parametrize(("query", "variables"), NULLS, ids=["literal", "variable", "default"])
def test_a_null_slicing_argument_is_priced_at_the_lists_upper_bound(
    tmp_path: Path, adapter: str, query: str, variables: dict[str, Any] | None
) -> None:
    # Before: priced at default_list_size (10) while the resolver returned all 500 items.
    with UvicornServer(_app(adapter, _config(tmp_path, 5000))) as server:
        response = _post(server.url, query, variables)
    body = response.json()
    assert response.status_code == 200, body
    assert len(body["data"]["items"]) == CATALOG
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 1000  # [cost] max_list_size, the default
    assert cost["actualQueryCost"] == CATALOG
    # Charged the estimate, refunded what did not run: it paid the 500 items it got.
    assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(4500, abs=0.1)


def test_strawberry_prices_a_left_out_argument_by_its_null_default(tmp_path: Path) -> None:
    # `first: int | None = None` is `first: Int = null`: the resolver gets None and returns all.
    with UvicornServer(_app("strawberry", _config(tmp_path, 5000))) as server:
        response = _post(server.url, "{ items { id } }")
    cost = response.json()["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 1000
    assert calls == [CATALOG]


@pytest.mark.parametrize("adapter", ["strawberry", "ariadne"])
def test_a_null_slice_over_budget_is_refused_before_any_resolver_runs(
    tmp_path: Path, adapter: str
) -> None:
    # A 100-point budget: before, 10 such requests fetched 5,000 items for 100 points.
    with UvicornServer(_app(adapter, _config(tmp_path, 100))) as server:
        responses = [_post(server.url, "{ items(first: null) { id } }") for _ in range(3)]
        honest = _post(server.url, "{ items(first: 20) { id } }")
    for response in responses:
        assert response.status_code == 400  # it can never fit: asking again never helps
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "COST_EXCEEDS_CAPACITY"
        assert error["extensions"]["cost"] == 1000
    assert honest.status_code == 200
    assert calls == [20]  # only the honest request ran a resolver


@pytest.mark.parametrize("adapter", ["strawberry", "ariadne"])
def test_null_slices_run_the_budget_down_by_what_they_fetch(tmp_path: Path, adapter: str) -> None:
    # 1,500 points: each null slice needs 1,000 up front and keeps 500 (the items it got).
    with UvicornServer(_app(adapter, _config(tmp_path, 1500))) as server:
        responses = [_post(server.url, "{ items(first: null) { id } }") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[2].json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
    assert calls == [CATALOG, CATALOG]


@pytest.mark.parametrize("adapter", ["strawberry", "ariadne"])
def test_max_list_size_sets_the_bound(tmp_path: Path, adapter: str) -> None:
    path = _config(tmp_path, 5000, "[cost]\nmax_list_size = 600\n")
    with UvicornServer(_app(adapter, path)) as server:
        response = _post(server.url, "{ items(first: null) { id } }")
    assert response.json()["extensions"]["cost"]["requestedQueryCost"] == 600
