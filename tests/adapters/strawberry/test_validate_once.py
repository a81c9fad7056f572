"""Validate once, attacked over HTTP: Strawberry's ``on_validate`` (issue 23).

The extension sets ``pre_execution_errors = []`` for a document it knows (Strawberry then
skips its validation) and keeps one Strawberry found valid after a clean static pass. Here,
on a real uvicorn: two schemas and a schema swapped for a rebuilt one, a subject held to an
extra rule, a deep document let through for a shadow-mode or unlimited subject then sent by
an enforced one, a reload with a lower limit, invalid documents, and the work saved.

Strawberry's validations are counted by wrapping graphql-core's ``validate`` where
Strawberry calls it (``strawberry.schema.schema.validate``), per document text. The
graphql-core recipe's tests, and what the documents and rules are, are
tests/gate/test_validate_once.py.
"""

from __future__ import annotations

import collections
import functools
import os
import time
from typing import TYPE_CHECKING, Any

import pytest
import strawberry
import strawberry.schema.schema as strawberry_schema
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL
from strawberry.extensions import AddValidationRules

from quotaql.plugin import CostLimiter
from tests.gate.test_validate_once import (
    DEEP,
    HELLO,
    LEGACY,
    OVER,
    RELOADS,
    TOML,
    WIDE,
    NoHello,
)
from tests.support.app_servers import UvicornServer
from tests.support.shop_http import post as shop_post

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    import httpx
    from graphql import DocumentNode, GraphQLSchema
    from starlette.types import Receive, Scope, Send

# -- the schemas of tests/gate/test_validate_once.py's SDL, code first -----------------------


@strawberry.type
class Node:
    name: str

    @strawberry.field
    def child(self) -> Node | None:
        return Node(name=f"{self.name}'s child")


@strawberry.type
class Query:
    @strawberry.field
    def hello(self) -> str:
        return "world"

    @strawberry.field
    def node(self) -> Node:
        return Node(name="root")


@strawberry.type(name="Query")
class LegacyQuery(Query):
    @strawberry.field
    def legacy(self) -> str:
        return "old"


class StrictClients(AddValidationRules):
    """``AddValidationRules([NoHello])`` for the clients that send ``X-Strict`` only: one
    schema, two sets of rules."""

    def __init__(self) -> None:
        super().__init__([NoHello])

    def on_operation(self) -> Iterator[None]:
        request = self.execution_context.context["request"]
        if request.headers.get("x-strict"):
            yield from super().on_operation()
        else:
            yield


class Swappable:
    """An ASGI app whose app can be swapped while it serves: a schema reloaded."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def make_app(limiter: CostLimiter) -> GraphQL[Any, Any]:
    return GraphQL(strawberry.Schema(Query, extensions=[limiter]))


# What DEEP and WIDE's ``node`` run to.
RAN = {DEEP: {"child": {"child": {"name": "root's child's child"}}}, WIDE: {"name": "root"}}


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Strawberry's validations, by document text."""
    counts: collections.Counter[str] = collections.Counter()
    real = strawberry_schema.validate

    def counting(schema: GraphQLSchema, document: DocumentNode, *args: Any, **kwargs: Any) -> Any:
        assert document.loc is not None
        counts[document.loc.source.body] += 1
        return real(schema, document, *args, **kwargs)

    monkeypatch.setattr(strawberry_schema, "validate", counting)
    return counts


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    return path


@pytest.fixture
def limiter(config_file: Path) -> CostLimiter:
    return CostLimiter.from_config(config_file)


@pytest.fixture
def server(limiter: CostLimiter) -> Iterator[UvicornServer]:
    with UvicornServer(make_app(limiter)) as running:
        yield running


def post(url: str, query: str, key: str = "t", **headers: str) -> httpx.Response:
    """POST ``query`` as the API key ``key`` (``t``: the free tier, enforced)."""
    return shop_post(url, query, key, **headers)


def data(response: httpx.Response) -> Any:
    body = response.json()
    assert "errors" not in body, body
    return body["data"]


def error(response: httpx.Response) -> tuple[str, str | None]:
    first = response.json()["errors"][0]
    return first["message"], first.get("extensions", {}).get("code")


def remaining(url: str, key: str = "t") -> int:
    """The points ``key`` has, after a ``{ hello }`` probe (which pays 1)."""
    return int(post(url, "{ hello }", key=key).headers["X-RateLimit-Remaining"])


# -- another schema, a schema rebuilt -------------------------------------------------------


def test_two_schemas_on_one_limiter_keep_their_own_results(
    limiter: CostLimiter, validations: collections.Counter[str]
) -> None:
    app = Starlette(routes=[
        Mount("/a", GraphQL(strawberry.Schema(LegacyQuery, extensions=[limiter]))),
        Mount("/b", GraphQL(strawberry.Schema(Query, extensions=[limiter]))),
    ])  # fmt: skip
    with UvicornServer(app) as server:
        for _ in range(3):
            assert data(post(f"{server.url}/a", LEGACY)) == {"legacy": "old"}
        assert validations[LEGACY] == 1
        for _ in range(2):
            refused = post(f"{server.url}/b", LEGACY)
            assert "Cannot query field 'legacy'" in error(refused)[0]
        assert validations[LEGACY] == 3
        assert data(post(f"{server.url}/a", LEGACY)) == {"legacy": "old"}
        assert validations[LEGACY] == 3


def test_a_schema_rebuilt_without_a_field_refuses_what_the_old_one_accepted(
    limiter: CostLimiter, validations: collections.Counter[str]
) -> None:
    app = Swappable(GraphQL(strawberry.Schema(LegacyQuery, extensions=[limiter])))
    with UvicornServer(app) as server:
        for _ in range(2):
            assert data(post(server.url, LEGACY)) == {"legacy": "old"}
        app.app = GraphQL(strawberry.Schema(Query, extensions=[limiter]))  # reloaded
        before = remaining(server.url)
        refused = post(server.url, LEGACY)
        assert "Cannot query field 'legacy'" in error(refused)[0]
        assert remaining(server.url) == before - 2  # the refusal paid, then the probe
        app.app = GraphQL(strawberry.Schema(LegacyQuery, extensions=[limiter]))  # the same
        assert data(post(server.url, LEGACY)) == {"legacy": "old"}
    assert validations[LEGACY] == 3  # the rebuilt schemas validated it again


# -- extra rules ------------------------------------------------------------------------------


def test_a_request_held_to_an_extra_rule_is_not_served_the_default_rules_result(
    limiter: CostLimiter, validations: collections.Counter[str]
) -> None:
    schema = strawberry.Schema(Query, extensions=[StrictClients, limiter])
    with UvicornServer(GraphQL(schema)) as server:
        for _ in range(2):
            assert data(post(server.url, HELLO))["hello"] == "world"
        assert validations[HELLO] == 1
        for _ in range(2):
            refused = post(server.url, HELLO, **{"X-Strict": "1"})
            assert error(refused)[0] == "NoHello: hello is not for this client"
        assert validations[HELLO] == 3
        # And the other way: kept under the extra rule is not kept for the default ones.
        query = "{ node { name } }"
        for _ in range(2):
            assert data(post(server.url, query, **{"X-Strict": "1"})) == {"node": {"name": "root"}}
        assert data(post(server.url, query)) == {"node": {"name": "root"}}
        assert validations[query] == 2


def test_a_schema_with_add_validation_rules_beside_one_without(
    limiter: CostLimiter, validations: collections.Counter[str]
) -> None:
    app = Starlette(routes=[
        Mount("/plain", GraphQL(strawberry.Schema(Query, extensions=[limiter]))),
        Mount("/strict", GraphQL(strawberry.Schema(
            Query, extensions=[functools.partial(AddValidationRules, [NoHello]), limiter]
        ))),
    ])  # fmt: skip
    with UvicornServer(app) as server:
        for _ in range(2):
            assert data(post(f"{server.url}/plain", HELLO))["hello"] == "world"
        refused = post(f"{server.url}/strict", HELLO)
        assert error(refused)[0] == "NoHello: hello is not for this client"
    assert validations[HELLO] == 2


# -- no way around the static pass ------------------------------------------------------------


@pytest.mark.parametrize(("text", "refusal"), OVER)
@pytest.mark.parametrize("first", ["newbie", "lurker"], ids=["shadow", "off"])
def test_a_document_over_a_limit_let_through_for_one_subject_is_refused_for_an_enforced_one(
    server: UvicornServer,
    validations: collections.Counter[str],
    first: str,
    text: str,
    refusal: str,
) -> None:
    for _ in range(3):
        response = post(server.url, text, key=first)
        assert response.status_code == 200
        assert data(response)["node"] == RAN[text]
    assert validations[text] == 3  # never kept
    before = remaining(server.url)
    for _ in range(2):
        refused = post(server.url, text, key="t")
        assert error(refused)[1] == refusal
    assert validations[text] == 3  # refused before Strawberry validates
    assert remaining(server.url) == before - 3  # two refusals, one probe


@pytest.mark.parametrize(("lower", "higher", "text", "refusal"), RELOADS)
def test_a_reload_with_a_lower_limit_refuses_a_document_kept_under_the_old_one(
    config_file: Path,
    validations: collections.Counter[str],
    lower: str,
    higher: str,
    text: str,
    refusal: str,
) -> None:
    config_file.write_text(TOML.replace(lower, higher), encoding="utf-8")
    limiter = CostLimiter.from_config(config_file)
    with UvicornServer(make_app(limiter)) as server:
        for _ in range(3):
            assert data(post(server.url, text))["node"] == RAN[text]
        assert validations[text] == 1  # kept under the higher limit
        config = limiter.gate.config
        config_file.write_text(TOML, encoding="utf-8")
        stamp = os.stat(config_file).st_mtime_ns + 10_000_000
        os.utime(config_file, ns=(stamp, stamp))  # a new stamp even on a coarse clock
        deadline = time.monotonic() + 5.0
        while limiter.gate.config is config:  # other requests bring the reload in
            assert time.monotonic() < deadline, "the new configuration was not loaded"
            post(server.url, "{ hello }", key="someone")
            time.sleep(0.02)
        refused = post(server.url, text)
        assert error(refused)[1] == refusal
    assert validations[text] == 1


# -- invalid documents, the work saved --------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "validated"),
    [("{ nope }", 5), ("{ hello(x: 1) }", 5), (DEEP, 0), (WIDE, 0)],
)
def test_an_invalid_document_is_validated_and_charged_every_time(
    server: UvicornServer, validations: collections.Counter[str], query: str, validated: int
) -> None:
    before = remaining(server.url)
    for _ in range(5):
        response = post(server.url, query)
        assert response.json()["data"] is None
        assert error(response)[0]
    assert validations[query] == validated
    assert remaining(server.url) == before - 6  # five refusals, one probe


def test_a_valid_repeated_document_is_validated_once(
    server: UvicornServer, validations: collections.Counter[str]
) -> None:
    before = remaining(server.url)
    for _ in range(10):
        assert data(post(server.url, HELLO)) == {"hello": "world", "node": {"name": "root"}}
    assert validations[HELLO] == 1
    assert remaining(server.url) == before - 11  # each paid its point, kept or not
