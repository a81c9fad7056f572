"""The adapter in process: root values, contexts, hooks and what is imported."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import ariadne
import httpx
import pytest
from graphql import GraphQLError

from quotaql.ariadne import CostLimiter, current_operation
from tests.support import ariadne_shop as shop

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

EXPORT = "mutation { exportOrders }"  # 10 of the free tier's 100


def wsgi_post(app: Any, query: str, **environ: str) -> tuple[str, dict[str, str], Any]:
    """One POST straight into a WSGI app: its status, headers and JSON body."""
    body = json.dumps({"query": query}).encode()
    environ = {
        "REQUEST_METHOD": "POST",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "REMOTE_ADDR": "203.0.113.9",
        **environ,
    }
    started: dict[str, Any] = {}
    chunks = app(environ, lambda status, headers: started.update(status=status, headers=headers))
    return started["status"], dict(started["headers"]), json.loads(b"".join(chunks))


def test_importing_quotaql_ariadne_does_not_import_strawberry() -> None:
    code = (
        "import sys, quotaql.ariadne; print(any(m.startswith('strawberry') for m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


def test_the_applications_root_value_runs_after_admission_and_never_when_refused(
    config_path: Path,
) -> None:
    calls: list[Any] = []

    def root_value(context: Any, operation_name: str | None, variables: Any, document: Any) -> Any:
        calls.append(context)
        return {"from": "the application"}

    app = CostLimiter.from_config(config_path).wsgi(shop.make_schema(), root_value=root_value)
    statuses = [wsgi_post(app, "mutation Export { exportOrders }")[0] for _ in range(11)]
    assert statuses == ["200 OK"] * 10 + ["429 Too Many Requests"]
    assert len(calls) == 10  # the refused one never reached it


def test_a_custom_context_and_an_async_root_value_on_asgi(
    config_path: Path,
) -> None:
    seen: list[Any] = []

    async def root_value(context: Any, *_: Any) -> Any:
        seen.append(context)
        return None

    def identify(context: Any) -> str | None:
        return str(context["tenant"])

    limiter = CostLimiter.from_config(config_path, identify=identify)
    app = limiter.asgi(shop.make_schema(), context_value={"tenant": "acme"}, root_value=root_value)

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/graphql", json={"query": "{ hello }"})

    response = asyncio.run(ask())
    assert response.json()["data"] == {"hello": "world"}
    assert seen == [{"tenant": "acme"}]
    assert response.headers["X-RateLimit-Limit"] == "1000"  # identify named acme: pro tier


def test_the_default_identity_reads_the_request_whatever_the_context_holds(
    config_path: Path,
) -> None:
    app = CostLimiter.from_config(config_path).wsgi(
        shop.make_schema(), context_value=lambda environ, data: {"user": None}
    )
    for _ in range(10):
        assert wsgi_post(app, EXPORT, REMOTE_ADDR="198.51.100.1")[0] == "200 OK"
    assert wsgi_post(app, EXPORT, REMOTE_ADDR="198.51.100.1")[0] == "429 Too Many Requests"
    assert wsgi_post(app, EXPORT, REMOTE_ADDR="198.51.100.2")[0] == "200 OK"
    status, _, _ = wsgi_post(app, EXPORT, HTTP_X_API_KEY="acme")
    assert status == "200 OK"  # a known key is its own tenant


def test_an_operation_outside_the_handlers_is_priced_debited_and_recorded_at_once(
    config_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="quotaql")
    limiter = CostLimiter.from_config(config_path)
    app = limiter.wsgi(shop.make_schema())
    environ = {"REMOTE_ADDR": "203.0.113.9"}
    data = {"query": EXPORT}
    results = [
        ariadne.graphql_sync(
            app.schema, data, context_value={"request": environ}, root_value=app.root_value
        )
        for _ in range(11)
    ]
    assert [success for success, _ in results] == [True] * 10 + [False]
    assert results[-1][1]["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
    events = [getattr(r, "quotaql_event", None) for r in caplog.records]
    assert events.count("ariadne_unscoped_operation") == 1  # said once


def test_the_handlers_refuse_wirings_that_would_leave_operations_unlimited() -> None:
    from ariadne.asgi import GraphQL
    from ariadne.asgi.handlers import GraphQLHTTPHandler
    from ariadne.contrib.sse import SSESubscriptionHandler

    limiter = CostLimiter()
    # Server-sent events: subscriptions the limiter could neither charge per event nor cap.
    with pytest.raises(TypeError, match="subscription_handlers"):
        limiter.http_handler(subscription_handlers=[SSESubscriptionHandler()])
    # A limited websocket beside Ariadne's own HTTP handler: every query unlimited.
    with pytest.raises(TypeError, match=r"http_handler=limiter\.http_handler\(\)"):
        GraphQL(
            shop.make_schema(),
            http_handler=GraphQLHTTPHandler(),
            websocket_handler=limiter.websocket_handler(),
        )
    # Configured twice, the root value is still wrapped once: one charge per operation.
    handler = limiter.http_handler()
    GraphQL(shop.make_schema(), http_handler=handler)
    admission = handler.root_value
    handler.configure(shop.make_schema(), root_value=admission)
    assert handler.root_value is admission


def test_parser_limits_answer_their_code(write_config: Callable[..., Path]) -> None:
    app = CostLimiter.from_config(write_config("[cost]\nmax_length = 20\n")).wsgi(
        shop.make_schema()
    )
    status, _, body = wsgi_post(app, "{ hello hello hello hello }")
    assert status == "400 Bad Request"
    assert body["errors"][0]["extensions"]["code"] == "QUERY_TOO_LARGE"
    assert wsgi_post(app, "{ hello }")[2]["data"] == {"hello": "world"}


def test_a_websocket_protocol_it_does_not_know_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown websocket protocol"):
        CostLimiter().websocket_handler(protocol="sse")  # type: ignore[arg-type]


def test_gate_and_configuration_are_exclusive() -> None:
    limiter = CostLimiter()
    assert CostLimiter(gate=limiter.gate).gate is limiter.gate
    with pytest.raises(TypeError, match="takes no other configuration"):
        CostLimiter(gate=limiter.gate, storage=object())


def test_resolvers_see_the_current_operation_and_the_applications_errors_are_still_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    query = ariadne.QueryType()

    @query.field("tenant")
    def resolve_tenant(*_: Any) -> str:
        op = current_operation()
        assert op is not None
        return op.tenant

    @query.field("fails")
    def resolve_fails(*_: Any) -> str:
        raise GraphQLError("no such order", extensions={"code": "BAD_USER_INPUT"})

    schema = ariadne.make_executable_schema("type Query { tenant: String fails: String }", query)
    app = CostLimiter().wsgi(schema)
    caplog.set_level(logging.ERROR, logger="ariadne")
    before = current_operation()
    assert wsgi_post(app, "{ tenant }")[2]["data"] == {"tenant": "ip:203.0.113.9"}
    assert current_operation() is before  # nothing is left behind
    assert wsgi_post(app, "{ fails }")[2]["errors"][0]["message"] == "no such order"
    (logged,) = [r.getMessage() for r in caplog.records if r.name == "ariadne"]
    assert logged.startswith("no such order")


def test_an_unknown_key_under_reject_is_401_and_runs_nothing(
    write_config: Callable[..., Path],
) -> None:
    path = write_config('[identity]\nunknown_keys = "reject"\n')
    app = CostLimiter.from_config(path).wsgi(shop.make_schema())
    status, headers, body = wsgi_post(app, EXPORT, HTTP_X_API_KEY="guessed")
    assert status == "401 Unauthorized"
    assert body["data"] is None
    assert body["errors"][0]["extensions"]["code"] == "UNKNOWN_API_KEY"
    assert "X-RateLimit-Limit" not in headers
    assert shop.resolver_calls == []
    assert wsgi_post(app, EXPORT, HTTP_X_API_KEY="tenant-a")[0] == "200 OK"
