"""Hostile request bodies under Ariadne's own HTTP handling: the WSGI app (werkzeug) and the
ASGI handler (uvicorn, without ``BodyLimit`` in front).

Ariadne parses the body itself: a body nested 50,000 deep, a GET whose ``variables`` nest
1,500 deep and a multipart ``operations`` field nested 50,000 deep answered 500 (a
``RecursionError`` its ``except ValueError`` does not catch), so did any multipart request
without python-multipart installed, and the rest got a plain-text 400 nobody paid for.
Limited by ``quotaql.ariadne.CostLimiter``, each is answered 400 ``INVALID_REQUEST_BODY``
with its reason, and its client pays ``[limits] min_charge``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import websockets.exceptions
import websockets.sync.client

from quotaql.ariadne import CostLimiter
from quotaql.asgi import reads_multipart
from tests.adapters.integrations.test_bodies import DEEP, HOSTILE, MIN_CHARGE
from tests.adapters.integrations.test_matrix import BASE_TOML
from tests.support import ariadne_shop as shop
from tests.support.app_servers import UvicornServer, WSGIServer

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.app_servers import ServerThread


@pytest.fixture(scope="module", params=["wsgi", "asgi"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread | UvicornServer]:
    """The shop, limited (free tier: 100 points, no refill to speak of), GET queries on."""
    config = tmp_path_factory.mktemp("quotaql") / "quotaql.toml"
    config.write_text(BASE_TOML)
    limiter = CostLimiter.from_config(config)
    if request.param == "wsgi":
        with WSGIServer(limiter.wsgi(shop.make_schema(), execute_get_queries=True)) as running:
            yield running
    else:
        app = limiter.asgi(shop.make_schema(), execute_get_queries=True)
        with UvicornServer(app) as served:
            yield served


def client(source: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=20)


def refused(response: httpx.Response, reason: str) -> None:
    assert response.status_code == 400, response.text[:300]
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["data"] is None
    (error,) = body["errors"]
    assert error["extensions"] == {"code": "INVALID_REQUEST_BODY", "reason": reason}


def post_body(sender: httpx.Client, url: str, body: bytes) -> httpx.Response:
    return sender.post(f"{url}/graphql", content=body, headers={"content-type": "application/json"})


def available(sender: httpx.Client, url: str) -> float:
    response = sender.post(f"{url}/graphql", json={"query": "{ hello }"})
    assert response.status_code == 200, response.text[:300]
    return float(response.json()["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"])


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_body_is_answered_400_with_its_reason_never_500(server: Any, name: str) -> None:
    body, reason = HOSTILE[name]
    with client("127.0.8.1") as sender:
        refused(post_body(sender, server.url, body), reason)


def test_a_get_whose_variables_nest_1500_deep_is_answered_400(server: Any) -> None:
    deep = "[" * 1_500 + "]" * 1_500
    with client("127.0.8.2") as sender:
        response = sender.get(f"{server.url}/graphql?query=%7B%20hello%20%7D&variables={deep}")
    refused(response, "too_deep")


def test_a_multipart_operations_field_nested_50000_deep_is_answered_400(server: Any) -> None:
    operations = '{"query": "{ hello }", "variables": ' + "[" * DEEP + "]" * DEEP + "}"
    with client("127.0.8.3") as sender:
        response = sender.post(
            f"{server.url}/graphql", files={"operations": (None, operations), "map": (None, "{}")}
        )
    # Without python-multipart, neither reads multipart/form-data: any such request was a 500.
    refused(response, "too_deep" if reads_multipart() else "no_multipart")


def test_each_hostile_body_costs_its_address_the_minimum_charge(server: Any) -> None:
    with client("127.0.8.4") as attacker, client("127.0.8.5") as bystander:
        for body, reason in HOSTILE.values():
            refused(post_body(attacker, server.url, body), reason)
        paid = available(bystander, server.url) - available(attacker, server.url)

    assert paid == pytest.approx(len(HOSTILE) * MIN_CHARGE, abs=0.1)


def test_honest_requests_pass_the_screen_unchanged(server: Any) -> None:
    nested = {"a": [1, {"b": [2, {"c": [3]}]}], "s": '[[[[{{{{ \\" ]]'}
    with client("127.0.8.6") as honest:
        posted = honest.post(
            f"{server.url}/graphql",
            json={"query": "{ hello }", "variables": nested},
        )
        got = honest.get(
            f"{server.url}/graphql", params={"query": "{ hello }", "variables": "null"}
        )

    for response in (posted, got):
        assert response.status_code == 200, response.text[:300]
        assert response.json()["data"] == {"hello": "world"}


@pytest.mark.parametrize("protocol", ["graphql-transport-ws", "graphql-ws"])
@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ('{"type": "subscribe", "id": "1", "payload": ' + "[" * DEEP + "]" * DEEP + "}", "deep"),
        ('{"type": ', "not JSON"),
        (b'{"type": "connection_init"}', "a binary frame"),
        ("null", "null"),
    ],
    ids=["nested 50,000 deep", "not JSON", "a binary frame", "null"],
)
def test_a_hostile_websocket_message_closes_the_connection_4400_without_a_traceback(
    protocol: str, message: str | bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Starlette's receive_json raised in Ariadne's loop (a RecursionError, a ValueError, a
    KeyError for a binary frame, a TypeError for null): the connection died unclosed, with
    a traceback."""
    app = CostLimiter().asgi(shop.make_schema(), websocket_protocol=protocol)
    with (
        UvicornServer(app) as served,
        websockets.sync.client.connect(
            served.ws_url, subprotocols=[protocol], open_timeout=5, max_size=None
        ) as socket,
    ):
        socket.send(json.dumps({"type": "connection_init"}))
        assert json.loads(socket.recv(timeout=5))["type"] == "connection_ack"
        socket.send(message)
        with pytest.raises(websockets.exceptions.ConnectionClosedError) as closed:
            socket.recv(timeout=5)
    assert closed.value.rcvd is not None
    assert closed.value.rcvd.code == 4400, (reason, closed.value)
    assert "Traceback" not in caplog.text
    assert not [record for record in caplog.records if record.exc_info]
