"""What only the Ariadne integration does over HTTP, end to end on a real uvicorn.

The contract every adapter shares (429, refunds, validate, rotating keys, hot reload, Redis
and its outages) is ``tests/http/test_contract.py``. Here: Ariadne answers an operation that
is not executed and that the limiter did not refuse (a static limit) with HTTP 400, as it
answers its own validation errors, and its logger stays quiet about quotaql's refusals.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI, Request

from quotaql.ariadne import CostLimiter
from tests.support import ariadne_shop as shop
from tests.support.app_servers import UvicornServer
from tests.support.shop_http import EXPENSIVE, EXPORT, post

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path


def fastapi_app(limiter: CostLimiter) -> FastAPI:
    """Ariadne's FastAPI recipe: a route hands the request to the GraphQL app."""
    graphql_app = limiter.asgi(shop.make_schema())
    app = FastAPI()

    @app.post("/graphql")
    async def graphql(request: Request) -> Any:
        return await graphql_app.handle_request(request)

    return app


@pytest.fixture(params=["asgi", "fastapi"])
def server(request: pytest.FixtureRequest, config_path: Path) -> Iterator[UvicornServer]:
    limiter = CostLimiter.from_config(config_path)
    app = limiter.asgi(shop.make_schema()) if request.param == "asgi" else fastapi_app(limiter)
    with UvicornServer(app) as running:
        yield running


def test_static_limits_of_the_cost_table_answer_their_codes(
    write_config: Callable[..., Path],
) -> None:
    path = write_config("[cost]\nmax_depth = 2\nmax_tokens = 40\n")
    with UvicornServer(CostLimiter.from_config(path).asgi(shop.make_schema())) as server:
        deep = post(server.url, EXPENSIVE)
        large = post(server.url, "{ " + "hello " * 50 + "}")
    assert deep.status_code == 400
    assert deep.json()["errors"][0]["extensions"]["code"] == "QUERY_TOO_DEEP"
    assert large.status_code == 400
    assert large.json()["errors"][0]["extensions"]["code"] == "QUERY_TOO_LARGE"
    assert shop.resolver_calls == []


def test_refusals_are_logged_by_quotaql_not_by_ariadne(
    server: UvicornServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    for _ in range(11):
        post(server.url, EXPORT)
    assert not [r for r in caplog.records if r.name == "ariadne"]
    events = [getattr(r, "quotaql_event", None) for r in caplog.records]
    assert "blocked" in events
