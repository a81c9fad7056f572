"""quotaql.asgi.BodyLimit on a real uvicorn, in front of Strawberry's and Ariadne's ASGI apps:
a body past the cap is refused 413 before the application reads it, sent whole or chunked."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from strawberry.asgi import GraphQL

from quotaql import ariadne as ariadne_adapter
from quotaql.asgi import REQUEST_TOO_LARGE, BodyLimit
from quotaql.plugin import CostLimiter
from tests.support import ariadne_shop, strawberry_shop
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Iterator

CAP = 10_000


def app(kind: str) -> Any:
    if kind == "strawberry":
        return GraphQL(strawberry_shop.make_schema(CostLimiter()))
    return ariadne_adapter.CostLimiter().asgi(ariadne_shop.make_schema())


@pytest.fixture(params=["strawberry", "ariadne"])
def server(request: pytest.FixtureRequest) -> Iterator[UvicornServer]:
    with UvicornServer(BodyLimit(app(str(request.param)), max_bytes=CAP)) as running:
        yield running


def big_query() -> bytes:
    return json.dumps({"query": "{ hello " + "# padding\n" * 2_000 + "}"}).encode()


def refused(response: httpx.Response) -> None:
    assert response.status_code == 413
    (error,) = response.json()["errors"]
    assert error["extensions"] == {"code": REQUEST_TOO_LARGE, "limit": CAP}


def test_a_body_within_the_cap_is_served(server: UvicornServer) -> None:
    response = httpx.post(f"{server.url}/graphql", json={"query": "{ hello }"}, timeout=10)
    assert response.status_code == 200
    assert response.json()["data"] == {"hello": "world"}


def test_a_body_past_the_cap_is_refused_by_its_length(server: UvicornServer) -> None:
    body = big_query()
    assert len(body) > CAP
    refused(httpx.post(f"{server.url}/graphql", content=body,
                       headers={"content-type": "application/json"}, timeout=10))  # fmt: skip


def test_a_chunked_body_past_the_cap_is_refused_as_it_arrives(server: UvicornServer) -> None:
    body = big_query()

    def chunks() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
        for start in range(0, len(body), 1_000):
            yield body[start : start + 1_000]

    response = httpx.post(f"{server.url}/graphql", content=chunks(),
                          headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
    refused(response)
    # The server is fine after it: the next request is served.
    ok = httpx.post(f"{server.url}/graphql", json={"query": "{ hello }"}, timeout=10)
    assert ok.status_code == 200


def test_the_cap_is_checked() -> None:
    with pytest.raises(ValueError, match="max_bytes must be an integer >= 0"):
        BodyLimit(app("strawberry"), max_bytes=-1)
