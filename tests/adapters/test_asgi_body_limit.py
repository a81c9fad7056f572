"""quotaql.asgi.BodyLimit on a real uvicorn, in front of Strawberry's and Ariadne's ASGI apps:
a body past the cap is refused 413 before the application reads it, sent whole or chunked."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from strawberry.asgi import GraphQL

from quotaql import ariadne as ariadne_adapter
from quotaql.asgi import INVALID_REQUEST_BODY, REQUEST_TOO_LARGE, BodyLimit
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


# -- hostile bodies: refused before the framework parses them (they answered 500) ----------

HOSTILE = {
    "nested 50,000 deep": b'{"query": "{ hello }", "variables": '
    + b"[" * 50_000
    + b"]" * 50_000
    + b"}",
    "null": b"null",
    "invalid UTF-8": b'{"query": "{ hello \xff\xfe }"}',
    "a number": b"42",
    "a list of numbers": b"[1, 2, 3]",
    "not JSON": b'{"query": ',
    "deep variables within the parser": b'{"query": "{ hello }", "variables": {"a": '
    + b"[" * 500
    + b"]" * 500
    + b"}}",
    "25,000 values": b'{"query": "{ hello }", "x": [' + b"1," * 24_999 + b"1]}",
}


@pytest.fixture(scope="module", params=["strawberry", "ariadne"])
def wide_server(request: pytest.FixtureRequest) -> Iterator[UvicornServer]:
    """A server whose cap lets every hostile body in (they are all under 120 KB)."""
    with UvicornServer(BodyLimit(app(str(request.param)), max_bytes=200_000)) as running:
        yield running


@pytest.mark.parametrize("body", list(HOSTILE.values()), ids=list(HOSTILE))
def test_a_hostile_body_is_refused_400_before_the_framework_reads_it(
    wide_server: UvicornServer, body: bytes
) -> None:
    assert len(body) <= 120_000
    response = httpx.post(f"{wide_server.url}/graphql", content=body,
                          headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
    assert response.status_code == 400, response.text
    (error,) = response.json()["errors"]
    assert error["extensions"]["code"] == INVALID_REQUEST_BODY
    assert error["extensions"]["reason"] in {
        "not_utf8",
        "not_json",
        "too_deep",
        "too_many_values",
        "not_an_operation",
    }


def test_an_operation_with_nested_variables_passes(server: UvicornServer) -> None:
    body = {"query": "{ hello }", "variables": {"n": [1, {"a": [2, {"b": [3]}]}]}}
    response = httpx.post(f"{server.url}/graphql", json=body, timeout=10)
    assert response.status_code == 200, response.text
    assert response.json()["data"] == {"hello": "world"}


class Debits:
    """A recorder that keeps the limiter's decisions."""

    def __init__(self) -> None:
        self.decisions: list[Any] = []

    def decision(self, decision: Any, seconds: float) -> None:
        self.decisions.append(decision)

    def backend_error(self, backend: str, error: BaseException) -> None:
        """Not expected here."""

    def circuit(self, backend: str, is_open: bool) -> None:
        """Not expected here."""


def test_a_hostile_body_is_charged_to_its_address_when_the_limiter_is_given() -> None:
    debits = Debits()
    limiter = CostLimiter(recorder=debits)
    application = GraphQL(strawberry_shop.make_schema(limiter))
    with UvicornServer(BodyLimit(application, limiter=limiter)) as running:
        for _ in range(3):
            response = httpx.post(f"{running.url}/graphql", content=b"null",
                                  headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
            assert response.status_code == 400
    minimum = limiter.gate.config.limits.min_charge
    assert [(d.allowed, d.cost) for d in debits.decisions] == [(True, minimum)] * 3


def test_a_hostile_body_is_not_charged_without_the_limiter(server: UvicornServer) -> None:
    response = httpx.post(f"{server.url}/graphql", content=b"[[[[1]]]]",
                          headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
    assert response.status_code == 400
    assert response.json()["errors"][0]["extensions"]["reason"] == "not_an_operation"


def test_the_limiter_must_be_a_gate_or_an_adapter() -> None:
    with pytest.raises(TypeError, match="takes a gate or an adapter"):
        BodyLimit(app("strawberry"), limiter=object())
    with pytest.raises(ValueError, match="max_depth must be an integer >= 0"):
        BodyLimit(app("strawberry"), max_depth=-1)


def test_screen_false_caps_the_size_only_for_an_app_that_screens_as_it_parses() -> None:
    """Ariadne's handler screens the body as it parses it: in front of it, ``BodyLimit``
    need not parse it first (its refusal is the handler's, the same answer)."""
    with UvicornServer(BodyLimit(app("ariadne"), max_bytes=CAP, screen=False)) as running:
        hostile = httpx.post(f"{running.url}/graphql", content=b"[" * 4_000 + b"]" * 4_000,
                             headers={"content-type": "application/json"}, timeout=10)  # fmt: skip
        refused(httpx.post(f"{running.url}/graphql", content=big_query(),
                           headers={"content-type": "application/json"}, timeout=10))  # fmt: skip
    assert hostile.status_code == 400
    assert hostile.json()["errors"][0]["extensions"] == {
        "code": INVALID_REQUEST_BODY,
        "reason": "too_deep",
    }
