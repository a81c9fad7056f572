"""The ASGI application daphne serves for ``ChannelsServer`` (in daphne's child process).

Configured through the environment: ``QUOTAQL_CHANNELS_SCHEMA`` (``"module:attribute"``),
``QUOTAQL_CHANNELS_CONTEXT_GETTER`` (an import path, or empty) and
``QUOTAQL_CHANNELS_OPTIONS`` (JSON keyword options for both consumers; ``"screened":
true`` screens their JSON, ``quotaql.plugin.views.screened``). Without
``QUOTAQL_CHANNELS_SCHEMA`` (pytest's doctest collection imports every module) importing it
builds nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tests.support.frameworks import configure_django, load

_router: Any = None


def build() -> Any:
    """Django settings, then the HTTP and WebSocket consumers at ``/graphql``."""
    configure_django(migrate=False)  # the consumers never touch the database
    from channels.routing import ProtocolTypeRouter, URLRouter
    from django.urls import re_path
    from strawberry.channels import GraphQLHTTPConsumer, GraphQLWSConsumer

    schema = load(os.environ["QUOTAQL_CHANNELS_SCHEMA"])
    options: dict[str, Any] = json.loads(os.environ.get("QUOTAQL_CHANNELS_OPTIONS") or "{}")
    getter_path = os.environ.get("QUOTAQL_CHANNELS_CONTEXT_GETTER") or ""
    http_consumer: type[GraphQLHTTPConsumer] = GraphQLHTTPConsumer
    ws_consumer: type[GraphQLWSConsumer] = GraphQLWSConsumer
    if options.pop("screened", False):  # quotaql's body screen on both consumers
        from quotaql.plugin.views import screened

        http_consumer = screened(GraphQLHTTPConsumer)
        ws_consumer = screened(GraphQLWSConsumer)

    if getter_path:
        context_getter = load(getter_path)

        class ContextHTTPConsumer(http_consumer):  # type: ignore[valid-type,misc]  # a variable
            async def get_context(self, request: Any, response: Any) -> Any:
                return context_getter(request, response)

        class ContextWSConsumer(ws_consumer):  # type: ignore[valid-type,misc]  # a variable
            async def get_context(self, request: Any, response: Any) -> Any:
                return context_getter(request, response)

        http_consumer, ws_consumer = ContextHTTPConsumer, ContextWSConsumer

    return ProtocolTypeRouter(
        {
            "http": URLRouter(
                [re_path(r"^graphql$", http_consumer.as_asgi(schema=schema, **options))]
            ),
            "websocket": URLRouter(
                [re_path(r"^graphql$", ws_consumer.as_asgi(schema=schema, **options))]
            ),
        }
    )


if os.environ.get("QUOTAQL_CHANNELS_SCHEMA"):
    # Built at import, before daphne's event loop runs: Django's setup is sync-only.
    _router = build()


async def application(scope: Any, receive: Any, send: Any) -> None:
    """ASGI 3: the router built at import."""
    if _router is None:
        msg = "QUOTAQL_CHANNELS_SCHEMA is not set: nothing to serve"
        raise RuntimeError(msg)
    await _router(scope, receive, send)
