"""Subscriptions over graphql-transport-ws on a real uvicorn: priced when they start, each
later event charged, ended when the subscriber runs out of budget, capped per subscriber.

Nothing is ever written to the websocket as HTTP status or headers (a subscription over
``strawberry.asgi.GraphQL`` used to crash on exactly that).
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from typing import TYPE_CHECKING, Any

import pytest
import websockets.sync.client
from fastapi import FastAPI
from strawberry.asgi import GraphQL
from strawberry.fastapi import GraphQLRouter

from quotaql.plugin import CostLimiter
from tests.support import strawberry_shop as shop
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from websockets.sync.client import ClientConnection

TOML = """
[limits]
max_subscriptions = 2
[tiers.free]
capacity = 100
refill_per_second = 0.001
[tiers.big]
capacity = 1000000
refill_per_second = 0.001
[tenants.subscriber]
tier = "free"
[tenants.streamer]
tier = "big"
[tenants.other]
tier = "big"
"""


@pytest.fixture(params=["asgi", "fastapi"])
def server(request: pytest.FixtureRequest, write_config: Callable[..., Path]) -> Iterator[str]:
    schema = shop.make_schema(CostLimiter.from_config(write_config(base=TOML)))
    app: Any
    if request.param == "asgi":
        app = GraphQL(schema)
    else:
        app = FastAPI()
        app.include_router(GraphQLRouter(schema), prefix="/graphql")
    with UvicornServer(app) as running:
        yield f"ws://127.0.0.1:{running.port}/graphql"


@contextlib.contextmanager
def connect(
    url: str, key: str = "subscriber", *, in_init: bool = False
) -> Iterator[ClientConnection]:
    """A graphql-transport-ws connection; the API key in the handshake's headers, or (as a
    browser must send it) in the ``connection_init`` payload."""
    with websockets.sync.client.connect(
        url,
        subprotocols=[websockets.Subprotocol("graphql-transport-ws")],
        additional_headers={} if in_init else {"X-API-Key": key},
        open_timeout=10,
    ) as socket:
        init: dict[str, Any] = {"type": "connection_init"}
        if in_init:
            init["payload"] = {"x-api-key": key}
        socket.send(json.dumps(init))
        assert json.loads(socket.recv(timeout=10))["type"] == "connection_ack"
        yield socket


def subscribe(socket: ClientConnection, id_: str, query: str) -> None:
    socket.send(json.dumps({"type": "subscribe", "id": id_, "payload": {"query": query}}))


def messages(socket: ClientConnection, id_: str, limit: int = 50) -> list[dict[str, Any]]:
    """Every message of subscription ``id_`` until it completes or errors."""
    found = []
    for _ in range(limit):
        message = json.loads(socket.recv(timeout=10))
        if message.get("id") != id_:
            continue
        found.append(message)
        if message["type"] in ("complete", "error"):
            return found
    raise AssertionError(f"subscription {id_} did not end within {limit} messages: {found}")


def refusal(got: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``extensions`` of a subscription refused before its first event: one error
    payload (a ``next`` with no data, or an ``error``), then nothing but ``complete``."""
    first, *rest = got
    errors = first["payload"] if first["type"] == "error" else first["payload"]["errors"]
    assert first["type"] == "error" or first["payload"].get("data") is None
    assert [message["type"] for message in rest] in ([], ["complete"])
    extensions: dict[str, Any] = errors[0]["extensions"]
    return extensions


def test_each_event_after_the_first_is_charged_and_exhaustion_ends_it(server: str) -> None:
    with connect(server) as socket:
        subscribe(socket, "1", "subscription { ticks(count: 10) }")  # 30 to start: 70 left
        got = messages(socket, "1")
    # Events 0 (paid at the start), 1 and 2 (30 each: 10 left), then a refusal, then the end.
    nexts = [m["payload"] for m in got if m["type"] == "next"]
    assert [p.get("data") for p in nexts[:3]] == [{"ticks": 0}, {"ticks": 1}, {"ticks": 2}]
    (error,) = nexts[3]["errors"]
    assert error["extensions"]["code"] == "RATE_LIMITED"
    assert error["extensions"]["retryAfter"] > 0
    assert nexts[3].get("data") is None
    assert len(nexts) == 4
    assert got[-1]["type"] == "complete"


def test_a_key_sent_in_connection_init_is_the_subscriber(server: str) -> None:
    # A browser cannot set headers on a websocket. The big tier's key streams on where the
    # keyless address (the free tier, like "subscriber") would run dry after three events.
    with connect(server, key="streamer", in_init=True) as socket:
        subscribe(socket, "1", "subscription { ticks(count: 8) }")
        got = messages(socket, "1")
    assert [m["payload"]["data"]["ticks"] for m in got if m["type"] == "next"] == list(range(8))


def test_a_subscriber_out_of_budget_cannot_start_one(server: str) -> None:
    with connect(server) as socket:
        subscribe(socket, "1", "subscription { ticks(count: 3) }")  # 30 + 30 + 30 = 90
        assert [m["type"] for m in messages(socket, "1")] == ["next"] * 3 + ["complete"]
        subscribe(socket, "2", "subscription { ticks(count: 1) }")  # 30 > 10 left
        assert refusal(messages(socket, "2"))["code"] == "RATE_LIMITED"


def test_open_subscriptions_are_capped_across_connections_and_a_closed_one_frees_its_slot(
    server: str,
) -> None:
    long = "subscription { ticks(count: 1000, interval: 0.2) }"
    streamer = functools.partial(connect, server, key="streamer")  # a big budget: only the cap
    with streamer() as first, streamer() as second, streamer() as third:
        subscribe(first, "a", long)
        assert json.loads(first.recv(timeout=10))["type"] == "next"
        subscribe(second, "b", long)
        assert json.loads(second.recv(timeout=10))["type"] == "next"
        subscribe(third, "c", long)  # a third, on a third connection: over the cap of 2
        refused = refusal(messages(third, "c"))
        assert (refused["code"], refused["limit"]) == ("TOO_MANY_SUBSCRIPTIONS", 2)
        # Another subscriber has slots of its own meanwhile.
        with connect(server, key="other") as other:
            subscribe(other, "o", "subscription { ticks(count: 1) }")
            assert [m["type"] for m in messages(other, "o")] == ["next", "complete"]
        # The client stops one: its slot is free again.
        first.send(json.dumps({"type": "complete", "id": "a"}))
        for _ in range(100):
            subscribe(third, "d", "subscription { ticks(count: 1) }")
            got = messages(third, "d")
            if got[0]["type"] == "next" and "errors" not in got[0]["payload"]:
                break
        else:
            raise AssertionError("the completed subscription never freed its slot")
    # Closing the connections ends their subscriptions: every slot comes back (the server
    # notices the closed sockets a moment later).
    long_ones = []
    with streamer() as one, streamer() as two:
        for socket, id_ in ((one, "e"), (two, "f")):
            for _ in range(50):
                subscribe(socket, id_, long)
                got = json.loads(socket.recv(timeout=10))
                if got["type"] == "next" and "errors" not in got["payload"]:
                    long_ones.append(id_)
                    break
                time.sleep(0.1)
    assert long_ones == ["e", "f"]
