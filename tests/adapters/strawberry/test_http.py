"""What only the Strawberry extension does over HTTP: tiers, operation and root-field quotas,
shadow mode and batches, on a real uvicorn driven by httpx.

The client's contract every adapter shares (cost, headers, refusals, refunds, validate, hot
reload, concurrency, Redis and its outages) is tests/http/test_contract.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fastapi import FastAPI
from strawberry.asgi import GraphQL
from strawberry.fastapi import GraphQLRouter

from quotaql.plugin import CostLimiter
from tests.support import strawberry_shop as shop
from tests.support.app_servers import UvicornServer
from tests.support.shop_http import EXPENSIVE, SHOP_TOML, post

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


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
    path = write_config(base=SHOP_TOML.replace("[limits]\n", "[limits]\nrefund_unused = false\n"))
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
    path = write_config(base=SHOP_TOML + f"[tiers.free.fields]\n{field}\n")
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
