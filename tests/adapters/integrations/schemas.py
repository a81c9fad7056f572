"""Tiny schemas that report what an integration's context says about the request.

``whoami_schema(integration)`` answers ``{ whoami(header: "X-Probe") { client values } }``
with the peer address and a header's values read from ``info.context``, sets a status and a
header with ``{ respond(status: 429, header: "Retry-After", value: "7") }``, and streams the
peer address of a WebSocket with ``subscription { peer }``. ``CHANNELS_WHOAMI`` is the
channels one, importable by daphne's child process.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator  # noqa: TC003 - Strawberry reads it at runtime

import strawberry

from tests.adapters.integrations.contexts import ACCESS, context_value

__all__ = [
    "CHANNELS_WHOAMI",
    "CHANNELS_WHOAMI_PATH",
    "TENANT_CONTEXT_PATH",
    "Whoami",
    "tenant_context",
    "tenant_dependency",
    "whoami_schema",
]


@strawberry.type
class Whoami:
    """What the integration reports: the client's address and one header's values."""

    client: str
    values: list[str]


def whoami_schema(integration: str) -> strawberry.Schema:
    """A schema whose resolvers read ``info.context`` the way ``integration`` shapes it."""
    access = ACCESS[integration]

    @strawberry.type
    class Query:
        @strawberry.field
        def whoami(self, info: strawberry.Info, header: str = "X-Probe") -> Whoami:
            return Whoami(
                client=access.peer_host(info.context),
                values=access.header_values(info.context, header),
            )

        @strawberry.field
        def tenant(self, info: strawberry.Info) -> str | None:
            """What a custom context getter put under ``tenant``."""
            return context_value(info.context, "tenant")

        @strawberry.field
        def respond(self, info: strawberry.Info, status: int, header: str, value: str) -> bool:
            access.set_status(info.context, status)
            access.set_header(info.context, header, value)
            return True

    @strawberry.type
    class Subscription:
        @strawberry.subscription
        async def peer(self, info: strawberry.Info) -> AsyncGenerator[str, None]:
            yield access.peer_host(info.context)

    return strawberry.Schema(query=Query, subscription=Subscription)


CHANNELS_WHOAMI = whoami_schema("channels")
CHANNELS_WHOAMI_PATH = f"{__name__}:CHANNELS_WHOAMI"


def tenant_context(request: object, response: object) -> dict[str, object]:
    """A view's ``get_context``: the default dict plus ``tenant``."""
    return {"request": request, "response": response, "tenant": "acme"}


async def tenant_dependency() -> dict[str, object]:
    """FastAPI's and Litestar's ``context_getter``: merged into their default context."""
    return {"tenant": "acme"}


TENANT_CONTEXT_PATH = f"{__name__}:tenant_context"
