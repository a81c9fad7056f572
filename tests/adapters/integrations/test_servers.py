"""Each Strawberry HTTP integration under its own server: the harness is real, end to end."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import httpx
import pytest
import strawberry
import websockets.exceptions
import websockets.sync.client

from tests.adapters.integrations.contexts import split_values
from tests.adapters.integrations.schemas import (
    CHANNELS_WHOAMI_PATH,
    TENANT_CONTEXT_PATH,
    tenant_context,
    tenant_dependency,
    whoami_schema,
)
from tests.support.frameworks import SERVERS, LiveServer, configure_django, serve

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

WHOAMI = '{ whoami(header: "X-Probe") { client values } }'
SOURCES = ("127.0.0.2", "127.0.0.3")
# TEST-NET-3 (RFC 5737): only ever a header value here, never an address anything talks to.
FORWARDED_FOR = "203.0.113.7"


def schema_for(integration: str) -> strawberry.Schema | str:
    return CHANNELS_WHOAMI_PATH if integration == "channels" else whoami_schema(integration)


@pytest.fixture(scope="module", params=list(SERVERS))
def server(request: pytest.FixtureRequest) -> Iterator[LiveServer]:
    with serve(request.param, schema_for(request.param)) as live:
        yield live


def post(
    server: LiveServer,
    query: str,
    *,
    source: str = "127.0.0.1",
    headers: Sequence[tuple[str, str]] = (),
    cookies: dict[str, str] | None = None,
) -> httpx.Response:
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=10, cookies=cookies) as client:
        return client.post(server.url, json={"query": query}, headers=list(headers))


def test_each_loopback_source_address_is_the_client_and_proxy_headers_are_ignored(
    server: LiveServer,
) -> None:
    headers = [
        ("x-PROBE", "a"),
        ("X-Probe", "b"),
        ("X-Forwarded-For", FORWARDED_FOR),
        ("Forwarded", f"for={FORWARDED_FOR}"),
        ("X-Real-IP", FORWARDED_FOR),
        # Quart passes the peer to its Request as a first "Remote-Addr" header.
        ("Remote-Addr", FORWARDED_FOR),
    ]
    for source in SOURCES:
        response = post(server, WHOAMI, source=source, headers=headers)

        assert response.status_code == 200, response.text
        whoami = response.json()["data"]["whoami"]
        assert whoami["client"] == source, server.log()
        # Chalice's local server keeps the first of repeated headers (dict of an HTTPMessage).
        expected = ["a"] if server.integration == "chalice" else ["a", "b"]
        assert split_values(whoami["values"]) == expected


def test_a_resolver_sets_the_status_and_a_header_through_the_frameworks_response(
    server: LiveServer,
) -> None:
    response = post(server, '{ respond(status: 429, header: "Retry-After", value: "7") }')

    assert response.status_code == 429, response.text
    assert response.headers.get_list("retry-after") == ["7"]
    assert response.json() == {"data": {"respond": True}}


def test_a_subscription_sees_the_websocket_peer_where_the_integration_has_websockets(
    server: LiveServer,
) -> None:
    connect = websockets.sync.client.connect
    if not server.websockets:
        with pytest.raises(websockets.exceptions.InvalidHandshake):
            connect(server.ws_url, subprotocols=["graphql-transport-ws"], open_timeout=5)
        return

    with connect(
        server.ws_url,
        subprotocols=["graphql-transport-ws"],
        open_timeout=5,
        source_address=(SOURCES[0], 0),
    ) as socket:
        socket.send(json.dumps({"type": "connection_init"}))
        assert json.loads(socket.recv(timeout=5)) == {"type": "connection_ack"}
        subscribe = {"type": "subscribe", "id": "1", "payload": {"query": "subscription { peer }"}}
        socket.send(json.dumps(subscribe))
        message = json.loads(socket.recv(timeout=5))
        assert message == {"type": "next", "id": "1", "payload": {"data": {"peer": SOURCES[0]}}}
        assert json.loads(socket.recv(timeout=5)) == {"type": "complete", "id": "1"}


@pytest.mark.parametrize("integration", list(SERVERS))
def test_a_custom_context_getter_reaches_the_resolvers(integration: str) -> None:
    getter: object = tenant_context
    if integration in {"fastapi", "litestar"}:
        getter = tenant_dependency  # a dependency of theirs, merged into the default context
    elif integration == "channels":
        getter = TENANT_CONTEXT_PATH

    with serve(integration, schema_for(integration), context_getter=getter) as server:
        response = post(server, "{ tenant }")

    assert response.json() == {"data": {"tenant": "acme"}}, server.log()


def test_stock_chalice_local_reports_every_client_as_127_0_0_1() -> None:
    with serve("chalice", whoami_schema("chalice"), real_source_ip=False) as server:
        response = post(server, WHOAMI, source=SOURCES[0])

    assert response.json()["data"]["whoami"]["client"] == "127.0.0.1"


@strawberry.type
class UserQuery:
    @strawberry.field
    def user(self, info: strawberry.Info) -> str:
        try:
            return info.context.request.user.username
        except Exception as exc:  # its name is the answer
            return type(exc).__name__

    @strawberry.field
    async def auser(self, info: strawberry.Info) -> str:
        return (await info.context.request.auser()).username


def test_the_async_django_view_reads_the_session_user_only_through_auser() -> None:
    configure_django()
    from django.contrib.auth.models import User
    from django.test import Client

    user, _ = User.objects.get_or_create(username="integration-alice")
    django_client = Client()
    django_client.force_login(user)
    session = {"sessionid": django_client.cookies["sessionid"].value}
    schema = strawberry.Schema(query=UserQuery)

    with serve("django", schema) as sync_server:
        answer = post(sync_server, "{ user }", cookies=session).json()
    assert answer == {"data": {"user": "integration-alice"}}

    with serve("django-async", schema) as async_server:
        answer = post(async_server, "{ user auser }", cookies=session).json()
    # The lazy request.user queries the session and user tables: sync-only in the event loop.
    assert answer == {"data": {"user": "SynchronousOnlyOperation", "auser": "integration-alice"}}
