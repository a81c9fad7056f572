"""Shutdown through the ASGI lifespan: refunds still waiting when the server stops are
applied (``Gate.aflush``), by :class:`quotaql.asgi.Lifespan` around Strawberry's app and by
the app of :meth:`quotaql.ariadne.CostLimiter.asgi`; without it they would be lost with the
event loop. On a real uvicorn (lifespan on) and a private redis-server.

A resolver opens the limiter's breaker mid-request (an outage that starts while the
operation runs): its refund then waits in the queue, and is still waiting when the server is
told to stop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx
import pytest
import strawberry
from ariadne import QueryType, make_executable_schema
from strawberry.asgi import GraphQL

from quotaql import CircuitBreaker, Quota, RedisStorage
from quotaql.ariadne import CostLimiter as AriadneLimiter
from quotaql.asgi import Lifespan
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL, ListSize
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.support.app_servers import UvicornServer

if TYPE_CHECKING:
    from pathlib import Path

    import redis

    from tests.support.servers import RedisServer

TOML = """
[limits]
deny_cache_size = 0
[tiers.free]
capacity = 1000
refill_per_second = 0.001
[tenants.acme]
tier = "free"
"""
QUERY = "{ items(first: 50) { id } }"  # 50 estimated, 1 returned: 49 given back
QUOTA = Quota("tenant", capacity=1000, refill_per_second=0.001)
# Holds the limiter whose breaker the resolver opens (one test at a time).
current: dict[str, Any] = {}


def outage_starts() -> None:
    """Redis goes away while the operation runs: the breaker opens (for half a second)."""
    current["gate"].limiter.breaker.failure(timeout=True)


@strawberry.type
class Item:
    id: strawberry.ID


@strawberry.type
class Query:
    @strawberry.field(directives=[ListSize(slicing_arguments=["first"])])
    def items(self, first: int = 50) -> list[Item]:
        outage_starts()
        return [Item(id=strawberry.ID("1"))]


def ariadne_schema() -> Any:
    query = QueryType()

    @query.field("items")
    def resolve_items(*_: Any, **__: Any) -> list[dict[str, str]]:
        outage_starts()
        return [{"id": "1"}]

    sdl = (
        COST_DIRECTIVES_SDL
        + 'type Query { items(first: Int = 50): [Item] @listSize(slicingArguments: ["first"]) }'
        + " type Item { id: ID }"
    )
    return make_executable_schema(sdl, query)


def strawberry_app(limiter: CostLimiter, *, lifespan: bool) -> Any:
    app = GraphQL(strawberry.Schema(query=Query, extensions=[limiter]))
    return Lifespan(app, limiter) if lifespan else app


def remaining(redis_server: RedisServer) -> float:
    with redis_server.client() as client:
        storage = RedisStorage(client, timeout=1.0)
        try:
            return storage.peek("key:acme", [QUOTA]).remaining
        finally:
            storage.close()


@pytest.mark.parametrize(
    ("adapter", "lifespan"),
    [("strawberry", True), ("strawberry", False), ("ariadne", True)],
)
def test_refunds_waiting_at_shutdown_are_applied_by_the_lifespan(
    tmp_path: Path,
    redis_server: RedisServer,
    redis_client: redis.Redis,
    adapter: str,
    lifespan: bool,
) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")
    options: dict[str, Any] = {
        "storage": AsyncRedisStorage.from_url(redis_server.url, timeout=1.0),
        "breaker": CircuitBreaker(reset_timeout=0.5),
    }
    app: Any
    if adapter == "strawberry":
        limiter = CostLimiter.from_config(path, **options)
        app = strawberry_app(limiter, lifespan=lifespan)
    else:
        ariadne = AriadneLimiter.from_config(path, **options)
        limiter = ariadne  # type: ignore[assignment]
        app = ariadne.asgi(ariadne_schema())
    current["gate"] = limiter.gate
    with UvicornServer(app, lifespan="on" if lifespan else "off") as server:
        response = httpx.post(
            f"{server.url}/graphql",
            json={"query": QUERY},
            headers={"X-API-Key": "acme"},
            timeout=10,
        )
        assert response.status_code == 200
        assert response.json()["extensions"]["cost"]["actualQueryCost"] == 1
        queue = limiter.gate.limiter.refund_queue
        assert queue is not None
        assert queue.pending  # the breaker is open: the refund waits
    # The server stopped: the loop that would have applied it is gone.
    if lifespan:
        assert not queue.pending
        assert remaining(redis_server) == pytest.approx(1000 - 1, abs=0.1)  # given back
    else:
        assert remaining(redis_server) == pytest.approx(1000 - 50, abs=0.1)  # never applied


def test_lifespan_takes_gates_or_adapters_only() -> None:
    limiter = CostLimiter()
    assert Lifespan(GraphQL(strawberry.Schema(query=Query)), limiter).gates == (limiter.gate,)
    with pytest.raises(TypeError, match="gates or adapters"):
        Lifespan(GraphQL(strawberry.Schema(query=Query)), object())
