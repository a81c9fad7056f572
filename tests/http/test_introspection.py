"""Introspection pays for its work, over real HTTP: a full introspection query costs a server
10-15 times a one-point query (graphql-core resolves every type, field and argument of the
schema) and was priced 0, so one address could repeat it for the minimum charge alone. It
is now priced by what it returns (``[cost] introspection = "counted"``, the default), and
``introspection = "off"`` refuses it.

Strawberry's and Ariadne's ASGI apps on uvicorn, serving the shop of the contract tests.
"""

# ruff: noqa: F811 (the contract's fixtures, imported by name)
from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest
from graphql import get_introspection_query

from tests.http.test_contract import (  # noqa: F401 (its fixtures, by name)
    ASGI,
    Adapter,
    _clear_resolver_calls,
    adapter,
)
from tests.support.app_servers import UvicornServer
from tests.support.shop_http import post, write_config  # noqa: F401

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

INTROSPECTION = get_introspection_query()


def anonymous(url: str, query: str) -> httpx.Response:
    """A request without an API key: its client address (127.0.0.1) pays."""
    return httpx.post(f"{url}/graphql", json={"query": query}, timeout=30)


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
def test_repeated_introspection_from_one_address_runs_its_budget_down(
    adapter: Adapter, write_config: Callable[..., Path]
) -> None:
    # The address's tier holds 100 points. Before: 100 introspections at 1 point each.
    with UvicornServer(adapter.app(write_config())) as server:
        answers = []
        for _ in range(30):  # bounded: refused well before
            response = anonymous(server.url, INTROSPECTION)
            answers.append(response)
            if response.status_code == 429:
                break
        other = post(server.url, "{ hello }", key="tenant-b")
    ran = [a for a in answers if a.status_code == 200]
    assert 5 <= len(ran) <= 9, [a.status_code for a in answers]
    for response in ran:
        body = response.json()
        assert "errors" not in body
        assert body["data"]["__schema"]["queryType"]["name"] == "Query"
    costs = [r.json()["extensions"]["cost"] for r in ran]
    left = [cost["throttleStatus"]["currentlyAvailable"] for cost in costs]
    spent = [before - after for before, after in zip([100.0, *left], left, strict=False)]
    # Each paid what it returned (about 11 points on this schema), never the minimum (1).
    assert all(9 < points < 14 for points in spent), spent
    assert all(c["requestedQueryCost"] >= c["actualQueryCost"] > 9 for c in costs), costs
    refused = answers[-1]
    assert refused.status_code == 429
    (error,) = refused.json()["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    assert int(refused.headers["Retry-After"]) >= 1
    assert other.status_code == 200  # another tenant's budget is its own


@pytest.mark.parametrize("adapter", ASGI, indirect=True)
def test_introspection_off_refuses_it_and_charges_the_minimum(
    adapter: Adapter, write_config: Callable[..., Path]
) -> None:
    path = write_config('[cost]\nintrospection = "off"\n')
    with UvicornServer(adapter.app(path)) as server:
        refused = [
            post(server.url, query)
            for query in (
                INTROSPECTION,
                '{ t: __type(name: "Product") { name } }',
                "{ ...F } fragment F on Query { __schema { queryType { name } } }",
            )
        ]
        typename = post(server.url, "{ __typename hello }")
    for response in refused:
        assert response.status_code == adapter.analysis_status
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "INTROSPECTION_DISABLED"
        assert error["message"].startswith("Introspection is disabled on this server")
    assert adapter.shop.resolver_calls == ["hello"]  # only the last request ran
    body = typename.json()
    assert body["data"] == {"__typename": "Query", "hello": "world"}
    # Three refusals at [limits] min_charge (1 each; the introspection query, longer than
    # [cost] chars_per_point, its size), then { hello } itself (1).
    paid = max(1.0, len(INTROSPECTION) / 1000) + 1 + 1 + 1
    assert body["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"] == pytest.approx(
        100 - paid, abs=1
    )  # told rounded down
