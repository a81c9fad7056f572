"""Hostile request bodies under each of the eleven Strawberry integrations' own servers.

Strawberry's views read and parse the body themselves, before the ``CostLimiter`` sees the
request: each of the eleven answered a body nested 50,000 deep, a body of ``null``, a JSON
string, number or boolean, and invalid UTF-8 with a 500 and a traceback, and a GET whose
``variables`` nest 1,500 deep too (measured on Strawberry 0.341, issue 22); a body of
25,000 empty lists was parsed whole for nothing. Served through
``quotaql.plugin.views.screened`` (``serve(..., screened=True)``), every one is answered 400
``INVALID_REQUEST_BODY`` with its reason, and its client pays ``[limits] min_charge``.
"""

from __future__ import annotations

import contextlib
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
import websockets.exceptions
import websockets.sync.client
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from quotaql.asgi import InvalidBody, read_body, screen_body
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage
from tests.adapters.integrations import limited
from tests.adapters.integrations.limited import (
    CHANNELS_LIMITED_PATH,
    CONFIG_VARIABLE,
    limited_schema,
)
from tests.adapters.integrations.test_matrix import BASE_TOML, FREE_CAPACITY, PRO_CAPACITY
from tests.support.frameworks import SERVERS, LiveServer, serve

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from tests.support.servers import RedisServer

DEEP = 50_000
HOSTILE: dict[str, tuple[bytes, str]] = {
    "variables nested 50,000 deep": (
        b'{"query": "{ subject }", "variables": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        "too_deep",
    ),
    "a list nested 50,000 deep": (b"[" * DEEP + b"]" * DEEP, "too_deep"),
    "variables nested 500 deep": (
        b'{"query": "{ subject }", "variables": {"a": ' + b"[" * 500 + b"]" * 500 + b"}}",
        "too_deep",
    ),
    "25,000 empty lists in a key nobody reads (75 KB)": (
        b'{"query": "{ subject }", "x": [' + b"[]," * 24_999 + b"[]]}",
        "too_many_values",
    ),
    "null": (b"null", "not_an_operation"),
    "a JSON string": (b'"{ subject }"', "not_an_operation"),
    "a number": (b"42", "not_an_operation"),
    "true": (b"true", "not_an_operation"),
    "an empty list": (b"[]", "not_an_operation"),
    "a list of numbers": (b"[1, 2, 3]", "not_an_operation"),
    "a batch with a number in it": (b'[{"query": "{ subject }"}, 1]', "not_an_operation"),
    "invalid UTF-8": (b'{"query": "{ subject \xff\xfe }"}', "not_utf8"),
    "not JSON": (b'{"query": ', "not_json"),
    "an empty body": (b"", "not_json"),
}
MIN_CHARGE = 1  # [limits] min_charge's default
PRICED = "{ items(first: 10) { id } }"  # 10 points


@pytest.fixture(scope="module", params=list(SERVERS))
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """The limited schema (free tier: 100 points, no refill to speak of) behind the
    integration's screened view."""
    integration = str(request.param)
    config = tmp_path_factory.mktemp("quotaql") / "quotaql.toml"
    config.write_text(BASE_TOML)
    with contextlib.ExitStack() as stack:
        if integration == "channels":  # daphne's child builds the schema from its environment
            live = serve(integration, CHANNELS_LIMITED_PATH, screened=True,
                         child_env={CONFIG_VARIABLE: str(config)})  # fmt: skip
        else:
            live = serve(integration, limited_schema(config), screened=True)
        yield stack.enter_context(live)


@pytest.fixture
def client() -> Iterator[Any]:
    """Clients from chosen loopback addresses (each test its own: no shared budget)."""
    made: list[httpx.Client] = []

    def from_address(source: str) -> httpx.Client:
        transport = httpx.HTTPTransport(local_address=source)
        made.append(httpx.Client(transport=transport, timeout=20))
        return made[-1]

    yield from_address
    for each in made:
        each.close()


def post_body(client: httpx.Client, server: LiveServer, body: bytes, **headers: str) -> Any:
    return client.post(
        server.url, content=body, headers={"content-type": "application/json", **headers}
    )


def refused(server: LiveServer, response: httpx.Response, reason: str) -> None:
    assert response.status_code == 400, (
        f"{server.integration}: {response.status_code} {response.text[:300]}\n{server.log()}"
    )
    body = response.json()
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"] == {"code": "INVALID_REQUEST_BODY", "reason": reason}
    assert error["message"]


def available(server: LiveServer, client: httpx.Client, **headers: str) -> float:
    """What the client's budget holds after a 10-point query (read from its answer)."""
    response = client.post(server.url, json={"query": PRICED}, headers=headers)
    assert response.status_code == 200, f"{server.integration}: {response.text[:300]}"
    throttle = response.json()["extensions"]["cost"]["throttleStatus"]
    return float(throttle["currentlyAvailable"])


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_body_is_answered_400_with_its_reason_never_500(
    server: LiveServer, client: Any, name: str
) -> None:
    body, reason = HOSTILE[name]

    refused(server, post_body(client("127.0.7.1"), server, body), reason)


def test_a_get_whose_variables_nest_1500_deep_is_answered_400(
    server: LiveServer, client: Any
) -> None:
    # Brackets as they are (3 KB): percent-encoded, the line would pass aiohttp's and
    # Sanic's 8 KB limits on a request line.
    deep = "[" * 1_500 + "]" * 1_500
    response = client("127.0.7.2").get(f"{server.url}?query=%7B%20subject%20%7D&variables={deep}")

    refused(server, response, "too_deep")


def test_a_get_with_variables_that_are_not_an_object_is_answered_400(
    server: LiveServer, client: Any
) -> None:
    response = client("127.0.7.3").get(
        server.url, params={"query": "{ subject }", "variables": "[1]"}
    )

    refused(server, response, "not_an_object")


def test_each_hostile_body_costs_its_address_the_minimum_charge(
    server: LiveServer, client: Any
) -> None:
    attacker = client("127.0.7.4")
    for body, reason in HOSTILE.values():
        refused(server, post_body(attacker, server, body), reason)

    paid = len(HOSTILE) * MIN_CHARGE
    assert available(server, attacker) == pytest.approx(FREE_CAPACITY - paid - 10, abs=0.1)
    # Another address did not pay for them.
    assert available(server, client("127.0.7.5")) == pytest.approx(FREE_CAPACITY - 10, abs=0.1)


def test_a_hostile_body_with_a_known_key_is_charged_to_its_tenant(
    server: LiveServer, client: Any
) -> None:
    sender = client("127.0.7.6")
    for _ in range(3):
        refused(
            server,
            post_body(sender, server, b"null", **{"X-API-Key": "globex"}),
            "not_an_operation",
        )

    left = available(server, sender, **{"X-API-Key": "globex"})
    assert left == pytest.approx(PRO_CAPACITY - 3 * MIN_CHARGE - 10, abs=0.1)


def test_a_drained_address_still_gets_400_for_a_hostile_body(
    server: LiveServer, client: Any
) -> None:
    drained = client("127.0.7.7")
    for _ in range(FREE_CAPACITY // 10):
        assert drained.post(server.url, json={"query": PRICED}).status_code == 200
    assert drained.post(server.url, json={"query": PRICED}).status_code == 429

    refused(server, post_body(drained, server, b"[" * DEEP + b"]" * DEEP), "too_deep")


def test_honest_requests_pass_the_screen_unchanged(server: LiveServer, client: Any) -> None:
    honest = client("127.0.7.8")
    nested = {"a": [1, {"b": [2, {"c": [3]}]}], "s": '[[[[{{{{ \\" ]]'}
    posted = honest.post(server.url, json={"query": "{ subject }", "variables": nested})
    got = honest.get(server.url, params={"query": "{ subject }", "variables": "null"})
    got_object = honest.get(server.url, params={"query": "{ subject }", "variables": '{"a": [1]}'})

    for response in (posted, got, got_object):
        assert response.status_code == 200, f"{server.integration}: {response.text[:300]}"
        assert response.json()["data"] == {"subject": "ip:127.0.7.8"}
    # Three free queries, each paid the minimum: nothing more.
    assert available(server, honest) == pytest.approx(FREE_CAPACITY - 3 * MIN_CHARGE - 10, abs=0.1)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_the_views_answer_what_the_shared_screen_says(name: str) -> None:
    """One screen for every door: ``BodyLimit``, the views, Ariadne's handlers."""
    body, reason = HOSTILE[name]
    with pytest.raises(InvalidBody) as caught:
        read_body(body)
    assert caught.value.reason == reason
    assert screen_body(body) == reason


# -- on Redis, counted and traced -------------------------------------------------------------


@pytest.mark.parametrize(
    ("integration", "storage_class"),
    [("flask", RedisStorage), ("aiohttp", AsyncRedisStorage)],
    ids=["flask-sync-redis", "aiohttp-async-redis"],
)
def test_on_redis_a_hostile_body_is_charged_counted_and_traced(
    integration: str,
    storage_class: type[RedisStorage | AsyncRedisStorage],
    redis_server: RedisServer,
    redis_client: Any,
    tmp_path: Path,
    client: Any,
) -> None:
    config = tmp_path / "quotaql.toml"
    config.write_text(BASE_TOML)
    registry = CollectorRegistry()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    limiter = CostLimiter.from_config(
        config,
        storage=storage_class.from_url(redis_server.url, timeout=1.0),
        metrics=PrometheusMetrics(registry),
        tracer_provider=provider,
    )
    schema = strawberry.Schema(query=limited.Query, extensions=[limiter])
    attacker = client("127.0.9.1")
    with serve(integration, schema, screened=True) as server:
        for body in (b"null", b"[" * DEEP + b"]" * DEEP, b"\xff"):
            response = post_body(attacker, server, body)
            assert response.status_code == 400, f"{response.text[:300]}\n{server.log()}"
        left = available(server, attacker)

    assert left == pytest.approx(FREE_CAPACITY - 3 * MIN_CHARGE - 10, abs=0.1)
    assert redis_client.dbsize() > 0  # the budget lives in Redis
    rejected = [
        sample.value
        for metric in registry.collect()
        if metric.name == "quotaql_requests"
        for sample in metric.samples
        if sample.name == "quotaql_requests_total" and sample.labels["decision"] == "rejected"
    ]
    assert sum(rejected) == 3
    code = {"code": "INVALID_REQUEST_BODY"}
    assert registry.get_sample_value("quotaql_rejections_total", code) == 3
    decisions = [span.attributes.get("quotaql.decision") for span in exporter.get_finished_spans()]
    assert decisions.count("rejected") == 3


# -- websocket messages ------------------------------------------------------------------------

WEBSOCKETS = [name for name, server_class in SERVERS.items() if server_class.websockets]


@pytest.mark.parametrize("integration", WEBSOCKETS)
def test_a_websocket_message_nested_50000_deep_closes_the_connection_4400_without_a_traceback(
    integration: str, tmp_path: Path
) -> None:
    """It raised a RecursionError in the view's decode_json: the connection died with a
    traceback in the log (Litestar: closed 4500 Internal Server Error)."""
    config = tmp_path / "quotaql.toml"
    config.write_text(BASE_TOML)
    deep = "[" * DEEP + "]" * DEEP
    hostile = '{"type": "subscribe", "id": "2", "payload": {"query": "{ subject }", "variables": '
    with contextlib.ExitStack() as stack:
        if integration == "channels":
            live = serve(integration, CHANNELS_LIMITED_PATH, screened=True,
                         child_env={CONFIG_VARIABLE: str(config)})  # fmt: skip
        else:
            live = serve(integration, limited_schema(config), screened=True)
        server = stack.enter_context(live)
        socket = stack.enter_context(
            websockets.sync.client.connect(
                server.ws_url,
                subprotocols=["graphql-transport-ws"],
                open_timeout=5,
                max_size=None,
                source_address=("127.0.9.2", 0),
            )
        )
        socket.send(json.dumps({"type": "connection_init"}))
        assert json.loads(socket.recv(timeout=5)) == {"type": "connection_ack"}
        honest = {"type": "subscribe", "id": "1", "payload": {"query": "{ subject }"}}
        socket.send(json.dumps(honest))
        answer = json.loads(socket.recv(timeout=5))
        assert answer["type"] == "next", answer
        assert answer["payload"]["data"] == {"subject": "ip:127.0.9.2"}
        assert json.loads(socket.recv(timeout=5)) == {"type": "complete", "id": "1"}

        socket.send(hostile + deep + "}}")
        with pytest.raises(websockets.exceptions.ConnectionClosedError) as closed:
            socket.recv(timeout=5)
        log = server.log()
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4400, closed.value
    assert "RecursionError" not in log
