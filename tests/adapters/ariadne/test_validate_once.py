"""Validate once, attacked over HTTP: Ariadne's ``query_validator`` (issue 23).

quotaql installs a ``query_validator`` in every handler (wrapping the application's own):
the static pass, then validation, neither run again for a document that passed both. Here,
on a real uvicorn: two schemas and a schema swapped for a rebuilt one, one schema served with
and without extra ``validation_rules`` (a list, a per-request callable, introspection turned
off), a deep document let through for a shadow-mode or unlimited subject then sent by an
enforced one, a reload with a lower limit, invalid documents, and the work saved.

Validations are counted by wrapping graphql-core's ``validate`` where quotaql calls it
(``quotaql.ariadne.graphql_validate``), or with the application's own ``query_validator``,
per document text. The documents, rules and configuration are
tests/gate/test_validate_once.py's.
"""

from __future__ import annotations

import collections
import os
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from ariadne import ObjectType, QueryType, make_executable_schema
from graphql import validate as graphql_validate
from starlette.applications import Starlette
from starlette.routing import Mount

from quotaql import ariadne as adapter
from quotaql.ariadne import CostLimiter
from tests.gate.test_validate_once import (
    DEEP,
    HELLO,
    LEGACY,
    OVER,
    RELOADS,
    SDL,
    TOML,
    WIDE,
    WITHOUT_LEGACY,
    NoHello,
)
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from graphql import DocumentNode, GraphQLSchema
    from starlette.types import Receive, Scope, Send

query = QueryType()
node = ObjectType("Node")


@query.field("hello")
def resolve_hello(*_: Any) -> str:
    return "world"


@query.field("node")
def resolve_node(*_: Any) -> dict[str, str]:
    return {"name": "root"}


@query.field("legacy")
def resolve_legacy(*_: Any) -> str:
    return "old"


@node.field("child")
def resolve_child(parent: dict[str, str], *_: Any) -> dict[str, str]:
    return {"name": f"{parent['name']}'s child"}


def make_schema(sdl: str = SDL) -> GraphQLSchema:
    bindables = [query, node] if "legacy" in sdl else [_without_legacy(), node]
    return make_executable_schema(sdl, *bindables)


def _without_legacy() -> QueryType:
    plain = QueryType()
    plain.set_field("hello", resolve_hello)
    plain.set_field("node", resolve_node)
    return plain


def make_app(limiter: CostLimiter) -> Any:
    return limiter.asgi(make_schema())


# What DEEP and WIDE's ``node`` run to.
RAN = {DEEP: {"child": {"child": {"name": "root's child's child"}}}, WIDE: {"name": "root"}}


class Swappable:
    """An ASGI app whose app can be swapped while it serves: a schema reloaded."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def counter(counts: collections.Counter[str], validate: Callable[..., Any]) -> Callable[..., Any]:
    def counting(schema: GraphQLSchema, document: DocumentNode, *args: Any, **kwargs: Any) -> Any:
        assert document.loc is not None
        counts[document.loc.source.body] += 1
        return validate(schema, document, *args, **kwargs)

    return counting


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """The validations quotaql's ``query_validator`` runs, by document text."""
    counts: collections.Counter[str] = collections.Counter()
    monkeypatch.setattr(adapter, "graphql_validate", counter(counts, graphql_validate))
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


def post(url: str, text: str, key: str = "t", **headers: str) -> httpx.Response:
    """POST ``text`` to ``url``'s /graphql as the API key ``key`` (``t``: enforced)."""
    return httpx.post(
        f"{url}/graphql", json={"query": text}, headers={"X-API-Key": key, **headers}, timeout=10
    )


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
        Mount("/a", limiter.asgi(make_schema())),
        Mount("/b", limiter.asgi(make_schema(WITHOUT_LEGACY))),
    ])  # fmt: skip
    with UvicornServer(app) as server:
        for _ in range(3):
            assert data(post(f"{server.url}/a", LEGACY)) == {"legacy": "old"}
        assert validations[LEGACY] == 1
        for _ in range(2):
            refused = post(f"{server.url}/b", LEGACY)
            assert refused.status_code == 400
            assert "Cannot query field 'legacy'" in error(refused)[0]
        assert validations[LEGACY] == 3
        assert data(post(f"{server.url}/a", LEGACY)) == {"legacy": "old"}
        assert validations[LEGACY] == 3


def test_a_schema_rebuilt_without_a_field_refuses_what_the_old_one_accepted(
    limiter: CostLimiter, validations: collections.Counter[str]
) -> None:
    app = Swappable(limiter.asgi(make_schema()))
    with UvicornServer(app) as server:
        for _ in range(2):
            assert data(post(server.url, LEGACY)) == {"legacy": "old"}
        app.app = limiter.asgi(make_schema(WITHOUT_LEGACY))  # reloaded
        before = remaining(server.url)
        refused = post(server.url, LEGACY)
        assert "Cannot query field 'legacy'" in error(refused)[0]
        assert remaining(server.url) == before - 2  # the refusal paid, then the probe
        app.app = limiter.asgi(make_schema())  # rebuilt the same: another schema still
        assert data(post(server.url, LEGACY)) == {"legacy": "old"}
    assert validations[LEGACY] == 3


# -- extra rules ------------------------------------------------------------------------------


def _strict_rules(context: Any, document: DocumentNode, data: Any) -> list[Any]:
    """Ariadne's per-request ``validation_rules``: NoHello for the clients that ask."""
    return [NoHello] if context["request"].headers.get("x-strict") else []


@pytest.mark.parametrize(
    ("options", "headers"),
    [
        pytest.param({"validation_rules": [NoHello]}, {}, id="list"),
        pytest.param({"validation_rules": _strict_rules}, {"X-Strict": "1"}, id="callable"),
    ],
)
def test_the_same_schema_with_an_extra_rule_is_not_served_the_default_rules_result(
    limiter: CostLimiter,
    validations: collections.Counter[str],
    options: dict[str, Any],
    headers: dict[str, str],
) -> None:
    schema = make_schema()  # one schema object, two handlers
    app = Starlette(routes=[
        Mount("/plain", limiter.asgi(schema)),
        Mount("/strict", limiter.asgi(schema, **options)),
    ])  # fmt: skip
    with UvicornServer(app) as server:
        for _ in range(2):
            assert data(post(f"{server.url}/plain", HELLO))["hello"] == "world"
        assert validations[HELLO] == 1
        for _ in range(2):
            refused = post(f"{server.url}/strict", HELLO, **headers)
            assert refused.status_code == 400
            assert error(refused)[0] == "NoHello: hello is not for this client"
        assert validations[HELLO] == 3
        # Kept under the extra rule is not kept for the default ones either.
        text = "{ node { name } }"
        for _ in range(2):
            assert data(post(f"{server.url}/strict", text, **headers))["node"] == {"name": "root"}
        assert data(post(f"{server.url}/plain", text))["node"] == {"name": "root"}
        assert validations[text] == 2


def test_introspection_turned_off_is_not_served_the_result_of_a_handler_that_allows_it(
    limiter: CostLimiter, validations: collections.Counter[str]
) -> None:
    schema = make_schema()
    introspection = "{ __schema { queryType { name } } }"  # within max_depth = 3
    app = Starlette(routes=[
        Mount("/open", limiter.asgi(schema)),
        Mount("/closed", limiter.asgi(schema, introspection=False)),
    ])  # fmt: skip
    with UvicornServer(app) as server:
        for _ in range(2):
            assert "__schema" in data(post(f"{server.url}/open", introspection))
        refused = post(f"{server.url}/closed", introspection)
        assert refused.status_code == 400
        assert "introspection is disabled" in error(refused)[0].lower()
    assert validations[introspection] == 2


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
        assert refused.status_code == 400
        assert error(refused)[1] == refusal
    assert validations[text] == 3  # refused before validation
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
    ("text", "validated"),
    [("{ nope }", 5), ("{ hello(x: 1) }", 5), (DEEP, 0), (WIDE, 0)],
)
def test_an_invalid_document_is_validated_and_charged_every_time(
    server: UvicornServer, validations: collections.Counter[str], text: str, validated: int
) -> None:
    before = remaining(server.url)
    for _ in range(5):
        response = post(server.url, text)
        assert response.status_code == 400
        assert response.json().get("data") is None
        assert error(response)[0]
    assert validations[text] == validated
    assert remaining(server.url) == before - 6  # five refusals, one probe


def test_a_valid_repeated_document_is_validated_once(
    server: UvicornServer, validations: collections.Counter[str]
) -> None:
    before = remaining(server.url)
    for _ in range(10):
        assert data(post(server.url, HELLO)) == {"hello": "world", "node": {"name": "root"}}
    assert validations[HELLO] == 1
    assert remaining(server.url) == before - 11  # each paid its point, kept or not


def test_the_applications_own_query_validator_runs_once_too(limiter: CostLimiter) -> None:
    counts: collections.Counter[str] = collections.Counter()
    app = limiter.asgi(make_schema(), query_validator=counter(counts, graphql_validate))
    with UvicornServer(app) as server:
        for _ in range(5):
            assert data(post(server.url, HELLO))["hello"] == "world"
        for _ in range(3):
            assert "Cannot query field 'nope'" in error(post(server.url, "{ nope }"))[0]
    assert (counts[HELLO], counts["{ nope }"]) == (1, 3)
