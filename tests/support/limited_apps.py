"""One schema limited by quotaql on Strawberry's or Ariadne's ASGI app, served by uvicorn
with its budgets in memory or in a private redis-server: the HTTP attack tests' servers."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import strawberry
from ariadne import make_executable_schema
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql import ariadne as ariadne_adapter
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator
    from pathlib import Path

    import pytest
    from ariadne import QueryType

    from tests.support.servers import RedisServer

__all__ = ["limited_app", "serving"]


def limited_app(
    kind: str, path: Path, storage: Any, strawberry_query: type, sdl: str, query: QueryType
) -> Any:
    """``strawberry_query`` (``kind`` "strawberry") or ``sdl`` with ``query``'s resolvers
    (Ariadne), limited by the configuration at ``path``; an async ``storage`` is closed at
    the server's shutdown (its connections belong to the server's loop)."""
    options = {} if storage is None else {"storage": storage}
    if kind == "strawberry":
        limiter = CostLimiter.from_config(path, **options)
        app: Any = GraphQL(strawberry.Schema(strawberry_query, extensions=[limiter]))
    else:
        app = ariadne_adapter.CostLimiter.from_config(path, **options).asgi(
            make_executable_schema(sdl, query)
        )
    if storage is None:
        return app

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await storage.close()

    return Starlette(routes=[Mount("/", app=app)], lifespan=lifespan)


@contextlib.contextmanager
def serving(request: pytest.FixtureRequest, backend: str, app_of: Any) -> Iterator[UvicornServer]:
    """Serve ``app_of(storage)`` with the budgets of ``backend``: "memory" (the default
    storage) or "redis" (the session's private redis-server, emptied first)."""
    storage = None
    if backend == "redis":
        redis_server: RedisServer = request.getfixturevalue("redis_server")
        request.getfixturevalue("redis_client")  # emptied first
        storage = AsyncRedisStorage.from_url(redis_server.url, timeout=0.5)
    lifespan = "off" if storage is None else "on"  # Strawberry's app alone has none
    with UvicornServer(app_of(storage), lifespan=lifespan) as running:
        yield running
