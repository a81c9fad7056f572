"""Subscriptions (and queries) over websockets, against a real uvicorn: graphql-transport-ws
and the older graphql-ws, with the ``websockets`` package's client."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import websockets.sync.client

from quotaql.ariadne import CostLimiter
from tests.support import ariadne_shop as shop
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from websockets.sync.client import ClientConnection

TICKS = "subscription { ticks(count: 10) }"  # 30 per event


@pytest.fixture
def limiter(write_config: Callable[..., Path]) -> CostLimiter:
    return CostLimiter.from_config(write_config(limits="max_subscriptions = 1\n"))


@pytest.fixture(params=["graphql-transport-ws", "graphql-ws"])
def server(request: pytest.FixtureRequest, limiter: CostLimiter) -> Iterator[UvicornServer]:
    app = limiter.asgi(shop.make_schema(), websocket_protocol=request.param)
    with UvicornServer(app) as running:
        running.protocol = request.param  # type: ignore[attr-defined]
        yield running


class Client:
    """Either protocol's client: subscribe, read an operation's messages, stop it."""

    def __init__(
        self, socket: ClientConnection, protocol: str, params: dict[str, Any] | None = None
    ) -> None:
        self.socket = socket
        self.modern = protocol == "graphql-transport-ws"
        self.send({"type": "connection_init", "payload": params or {}})
        assert self.recv() == {"type": "connection_ack"}

    def send(self, message: dict[str, Any]) -> None:
        self.socket.send(json.dumps(message))

    def recv(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.socket.recv(timeout=10))
        return message

    def subscribe(self, id: str, query: str) -> None:
        kind = "subscribe" if self.modern else "start"
        self.send({"type": kind, "id": id, "payload": {"query": query}})

    def stop(self, id: str) -> None:
        self.send({"type": "complete" if self.modern else "stop", "id": id})

    def until_done(self, id: str) -> tuple[list[Any], list[dict[str, Any]]]:
        """The operation's data payloads, and its errors, until it completes or fails."""
        data: list[Any] = []
        errors: list[dict[str, Any]] = []
        while True:
            message = self.recv()
            assert message.get("id") == id, message
            if message["type"] in ("next", "data"):
                payload = message["payload"]
                if "data" in payload:
                    data.append(payload["data"])
                errors.extend(payload.get("errors", []))
            elif message["type"] == "error":
                payload = message["payload"]
                errors.extend(payload if isinstance(payload, list) else [payload])
                return data, errors  # an error message ends the operation
            elif message["type"] == "complete":
                return data, errors


def connect(server: UvicornServer, key: str | None = "tenant-a") -> Any:
    protocol = server.protocol  # type: ignore[attr-defined]
    return websockets.sync.client.connect(
        server.ws_url,
        subprotocols=[protocol],
        additional_headers={"X-API-Key": key} if key is not None else {},
        open_timeout=5,
    )


def available(server: UvicornServer, key: str = "tenant-a") -> float:
    body = httpx.post(
        f"{server.url}/graphql", json={"query": "{ hello }"}, headers={"X-API-Key": key}
    ).json()
    # Before this probe, which pays [limits] min_charge (1).
    return float(body["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"]) + 1


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_each_event_after_the_first_is_charged_and_running_dry_ends_it(
    server: UvicornServer, limiter: CostLimiter
) -> None:
    with connect(server) as socket:
        client = Client(socket, server.protocol)  # type: ignore[attr-defined]
        client.subscribe("1", TICKS)
        data, errors = client.until_done("1")
        # 100 points: 30 at the start pays the first event, 30 each for two more; the
        # fourth does not fit in the 10 left.
        assert data == [{"ticks": 0}, {"ticks": 1}, {"ticks": 2}]
        (error,) = errors
        assert error["extensions"]["code"] == "RATE_LIMITED"
        assert error["extensions"]["cost"] == 30
        assert error["message"].startswith(
            "This subscription event costs 30 points but only 10 of your 100"
        )
        # Out of budget, a new subscription is refused before its source runs.
        shop.resolver_calls.clear()
        client.subscribe("2", TICKS)
        data, errors = client.until_done("2")
        assert data == []
        assert errors[0]["extensions"]["code"] == "RATE_LIMITED"
        assert shop.resolver_calls == []
    assert available(server) == pytest.approx(10, abs=0.1)
    assert _eventually(lambda: limiter.gate.open_subscriptions() == 0)


def test_a_stopped_subscription_gives_its_slot_back(
    server: UvicornServer, limiter: CostLimiter
) -> None:
    with connect(server, key="acme") as socket:  # pro tier: 1000 points
        client = Client(socket, server.protocol)  # type: ignore[attr-defined]
        client.subscribe("1", "subscription { ticks(count: 100000) }")
        assert client.recv()["payload"] == {"data": {"ticks": 0}}
        client.subscribe("2", TICKS)  # max_subscriptions = 1
        while (message := client.recv())["id"] == "1":
            pass
        assert message["type"] == "error"
        payload = message["payload"]
        (error,) = payload if isinstance(payload, list) else [payload]
        assert error["extensions"]["code"] == "TOO_MANY_SUBSCRIPTIONS"
        client.stop("1")
        assert _eventually(lambda: limiter.gate.open_subscriptions() == 0)
    with connect(server, key="acme") as socket:  # the slot is free again
        client = Client(socket, server.protocol)  # type: ignore[attr-defined]
        client.subscribe("3", "subscription { ticks(count: 2) }")
        data, errors = client.until_done("3")
        assert (data, errors) == ([{"ticks": 0}, {"ticks": 1}], [])
    assert _eventually(lambda: limiter.gate.open_subscriptions() == 0)


def test_a_closed_socket_ends_its_subscriptions(
    server: UvicornServer, limiter: CostLimiter
) -> None:
    with connect(server, key="acme") as socket:
        client = Client(socket, server.protocol)  # type: ignore[attr-defined]
        client.subscribe("1", "subscription { ticks(count: 100000) }")
        assert client.recv()["payload"] == {"data": {"ticks": 0}}
        assert limiter.gate.open_subscriptions() == 1
    assert _eventually(lambda: limiter.gate.open_subscriptions() == 0)


def test_a_query_over_the_websocket_is_debited_and_reports_its_cost(server: UvicornServer) -> None:
    with connect(server) as socket:
        client = Client(socket, server.protocol)  # type: ignore[attr-defined]
        client.subscribe("1", "{ products(first: 10) { name reviews(first: 5) { stars } } }")
        message = client.recv()
        assert message["type"] in ("next", "data")
        cost = message["payload"]["extensions"]["cost"]
        assert (cost["requestedQueryCost"], cost["actualQueryCost"]) == (70, 16)
        assert cost["throttleStatus"]["currentlyAvailable"] == pytest.approx(84, abs=0.1)
    assert available(server) == pytest.approx(84, abs=0.1)


def test_a_key_sent_in_connection_init_is_the_subscriber(server: UvicornServer) -> None:
    # A browser cannot set headers on a websocket: its key comes in connection_init.
    # Ariadne keeps that payload nowhere; the limited handlers keep it for the identity.
    before = available(server, "acme")
    with connect(server, key=None) as socket:
        params = {"X-API-Key": "acme", **{f"noise-{i}": "x" for i in range(10)}}
        client = Client(socket, server.protocol, params)  # type: ignore[attr-defined]
        client.subscribe("1", "subscription { ticks(count: 2) }")
        data, errors = client.until_done("1")
    assert (data, errors) == ([{"ticks": 0}, {"ticks": 1}], [])
    assert available(server, "acme") == pytest.approx(before - 1 - 60, abs=0.5)  # a probe, acme


@pytest.mark.parametrize("django_loaded", [False, True], ids=["alone", "django-loaded"])
def test_subscriptions_refused_before_pricing_pay_the_minimum(
    server: UvicornServer, django_loaded: bool
) -> None:
    # Ariadne answers these itself, before calling the root value: they were free, and one
    # of them (a heavy query beside the subscription) cost a second of validation each.
    # Django loaded in the same process (another app, a test before) changes nothing: a
    # Starlette websocket has no ``auser`` to await (it made these free again).
    if django_loaded:
        import django  # noqa: F401

        assert "django" in sys.modules
    before = available(server)
    refused = [
        "subscription { nope }",  # does not validate
        "subscription { ticks(count: 1) ",  # does not parse
        "subscription { " + " ".join(f"t{i}: ticks(count: 1)" for i in range(101)) + " }",
    ]
    with connect(server) as socket:
        client = Client(socket, server.protocol)  # type: ignore[attr-defined]
        for number, query in enumerate(refused):
            client.subscribe(str(number), query)
            data, errors = client.until_done(str(number))
            assert (data, bool(errors)) == ([], True)
    time.sleep(0.1)
    # Each paid min_charge, or its size when more ([cost] chars_per_point: the 101 aliases).
    paid = sum(max(1.0, len(query) / 1000) for query in refused)
    assert available(server) == pytest.approx(before - 1 - paid, abs=1)  # a probe
