"""Redis eviction against real servers: uvicorn (Strawberry and Ariadne) on a private
redis-server under ``maxmemory`` with ``volatile-lru`` (a managed Redis's default).

The attack: a tenant drains its budget, then a flood of new client addresses (a key each)
fills the memory; Redis evicts keys to make room, among them the drained tenant's bucket,
which then reads as full: the tenant has its whole budget back. quotaql's keys all have a
TTL, so ``volatile-lru`` evicts them first (the cache's keys beside them, without one, never).

- without ``[redis] allow_eviction`` the server refuses to start (the ASGI lifespan fails;
  a sync storage fails the limiter's construction), naming the policy and the fix: the
  attack never gets a server to run against;
- with it, the server runs, says so (a warning, ``quotaql_redis_eviction``), and the attack
  works: the documented risk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn
from prometheus_client import CollectorRegistry
from strawberry.asgi import GraphQL
from uvicorn.config import STARTUP_FAILURE

from quotaql import ariadne as ariadne_adapter
from quotaql.asgi import Lifespan
from quotaql.errors import EvictionRefused
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage
from tests.support import ariadne_shop, strawberry_shop
from tests.support.app_servers import UVICORN_DEFAULTS, UvicornServer
from tests.support.servers import STARTUP_TIMEOUT, RedisServer, bind_loopback

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

MAXMEMORY = 8 * 1024 * 1024
# Room left for quotaql's keys once the cache's data is in: ~170 bytes a bucket, so a few
# hundred; the flood makes several times as many, and Redis evicts the rest.
HEADROOM = 32 * 1024
FLOOD = 1_000
CAPACITY = 10
TOML = f"""
[limits]
retry_jitter = 0
# The deny cache would keep refusing the drained tenant in this process from memory; another
# worker, or this one once the entry goes, asks Redis: turned off to see what Redis says.
deny_cache_size = 0
[identity]
trusted_proxies = ["127.0.0.1/32"]   # the clients' addresses come in X-Forwarded-For
[tiers.free]
capacity = {CAPACITY}
refill_per_second = 0.001
[tenants.acme]
tier = "free"
"""
ALLOW = """
[redis]
allow_eviction = true
"""
HELLO = {"query": "{ hello }"}  # pays min_charge, 1
ACME = {"X-API-Key": "acme"}


@pytest.fixture
def evicting() -> Iterator[RedisServer]:
    """A private redis-server as a managed one often is: maxmemory, volatile-lru. Redis's
    LRU is approximated by sampling: 64 samples per eviction (its most) make the oldest key
    go first in all but a vanishing share of runs (at 5, acme's bucket survived a flood now
    and then)."""
    args = ["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "volatile-lru"]
    args += ["--maxmemory-samples", "64"]
    with RedisServer(args) as server:
        yield server


def write_config(tmp_path: Path, *, allow: bool) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML + (ALLOW if allow else ""), encoding="utf-8")
    return path


def make_app(kind: str, path: Path, storage: Any, registry: CollectorRegistry | None = None) -> Any:
    """The kind's ASGI app, with the lifespan that checks an async storage at start-up (a
    sync one is checked by the limiter's construction)."""
    options: dict[str, Any] = {"storage": storage}
    if registry is not None:
        options["metrics"] = PrometheusMetrics(registry)
    if kind == "strawberry":
        limiter = CostLimiter.from_config(path, **options)
        return Lifespan(GraphQL(strawberry_shop.make_schema(limiter)), limiter)
    return ariadne_adapter.CostLimiter.from_config(path, **options).asgi(ariadne_shop.make_schema())


def fill_with_cache_data(server: RedisServer) -> None:
    """Another application's data, without TTLs (volatile-lru never evicts it), up to
    ``HEADROOM`` below ``maxmemory``: the instance is nearly full, as shared ones get."""
    with server.client() as client:
        for index in range(MAXMEMORY // 1024):
            free = MAXMEMORY - HEADROOM - int(str(server.info("memory")["used_memory"]))
            if free < 2048:
                break
            # In pieces (one big SET would need its size again as a buffer), smaller as the
            # room left shrinks: the instance ends within 2 KB of the headroom.
            client.set(f"cache:{index}", b"x" * min(32 * 1024, free // 2))


async def drain(url: str) -> list[int]:
    """acme spends its whole budget: its statuses (the last one refused)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        return [
            (await client.post("/graphql", json=HELLO, headers=ACME)).status_code
            for _ in range(CAPACITY + 1)
        ]


async def flood_then_ask(url: str) -> tuple[list[int], httpx.Response]:
    """``FLOOD`` new addresses one request each, then acme asks again: (the flood's
    statuses, acme's answer)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        gate = asyncio.Semaphore(16)

        async def one(index: int) -> int:
            address = f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}"
            async with gate:
                response = await client.post(
                    "/graphql", json=HELLO, headers={"X-Forwarded-For": address}
                )
            return response.status_code

        flood = await asyncio.gather(*(one(index) for index in range(1, FLOOD + 1)))
        after = await client.post("/graphql", json=HELLO, headers=ACME)
    return list(flood), after


@pytest.mark.parametrize("kind", ["strawberry", "ariadne"])
def test_an_evicting_redis_stops_the_server_from_starting(
    kind: str, tmp_path: Path, evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=names.LOGGER)
    storage = AsyncRedisStorage.from_url(evicting.url, timeout=2.0)  # no connection kept
    app = make_app(kind, write_config(tmp_path, allow=False), storage)
    # uvicorn itself, in this thread: a failed lifespan startup makes it exit with its code
    # for that (3), before it accepts a connection. (A server that did start is told to stop
    # after a while: this test fails then, it does not hang.)
    server = uvicorn.Server(uvicorn.Config(app, **{**UVICORN_DEFAULTS, "lifespan": "on"}))
    bound = threading.Timer(STARTUP_TIMEOUT, lambda: setattr(server, "should_exit", True))
    bound.start()
    try:
        with contextlib.closing(bind_loopback()) as sock, pytest.raises(SystemExit) as exited:
            server.run(sockets=[sock])
    finally:
        bound.cancel()
    assert exited.value.code == STARTUP_FAILURE
    assert not server.started
    (refusal,) = [
        record
        for record in caplog.records
        if getattr(record, names.LOG_EVENT, None) == names.REDIS_EVICTION_EVENT
    ]
    message = refusal.getMessage()
    assert f"quotaql refuses the Redis at {evicting.host}:{evicting.port}" in message
    assert "maxmemory-policy volatile-lru" in message
    assert "maxmemory-policy noeviction" in message
    assert "[redis] allow_eviction = true" in message
    with evicting.client() as client:
        assert client.dbsize() == 0  # nothing was ever debited there


@pytest.mark.parametrize("kind", ["strawberry", "ariadne"])
def test_a_sync_storage_on_an_evicting_redis_fails_the_limiter_s_construction(
    kind: str, tmp_path: Path, evicting: RedisServer
) -> None:
    path = write_config(tmp_path, allow=False)
    storage = RedisStorage.from_url(evicting.url, timeout=2.0)
    adapter = CostLimiter if kind == "strawberry" else ariadne_adapter.CostLimiter
    try:
        with pytest.raises(EvictionRefused, match="maxmemory-policy volatile-lru"):
            adapter.from_config(path, storage=storage)
    finally:
        storage.close()


@pytest.mark.parametrize("kind", ["strawberry", "ariadne"])
def test_with_allow_eviction_a_flood_of_new_addresses_gives_a_drained_tenant_its_budget_back(
    kind: str, tmp_path: Path, evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=names.LOGGER)
    registry = CollectorRegistry()
    # A sync storage: closed here once the server stopped (an async one's connections
    # would outlive the server's event loop).
    storage = RedisStorage.from_url(evicting.url, timeout=2.0)
    app = make_app(kind, write_config(tmp_path, allow=True), storage, registry)
    with contextlib.closing(storage), UvicornServer(app, lifespan="on") as server:
        # Started, and said so: a warning and the gauge.
        assert any(
            getattr(record, names.LOG_EVENT, None) == names.REDIS_EVICTION_EVENT
            and record.levelno == logging.WARNING
            and "[redis] allow_eviction = true accepts that" in record.getMessage()
            for record in caplog.records
        )
        labels = {"policy": "volatile-lru", "verdict": names.EVICTION_ALLOWED}
        assert registry.get_sample_value(names.REDIS_EVICTION, labels) == 1
        drained = asyncio.run(drain(server.url))
        # A server in service: its scripts loaded (Redis counts them in used_memory), the
        # instance nearly full of a cache's data.
        fill_with_cache_data(evicting)
        flood, after = asyncio.run(flood_then_ask(server.url))
    assert drained == [200] * CAPACITY + [429]
    assert flood == [200] * FLOOD  # every new address has a budget of its own
    evicted = int(str(evicting.info("stats")["evicted_keys"]))
    assert evicted > FLOOD // 4
    # The documented risk: acme's bucket was evicted with the others, and reads as full.
    assert after.status_code == 200
    assert after.headers["X-RateLimit-Remaining"] == str(CAPACITY - 1)
    with evicting.client() as client:
        assert client.exists("cache:0")  # the cache's data, without a TTL, was kept
