"""The delay line on a sync storage (the default ``MemoryStorage``, ``RedisStorage``) under a
real uvicorn: an operation of a delay tier over its rate waits for its turn and is answered
200, on Strawberry and Ariadne.

Strawberry used to pick its sync hooks for a sync storage, so a delay tier's operation was
decided as a sync server's (``[limits] delay_sync = "refuse"``): 0 of 3 delayed, each
refused 429. A sync server (WSGI) still refuses them, as documented, and now says so in the
log once instead of silently.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from prometheus_client import CollectorRegistry
from strawberry.asgi import GraphQL

from quotaql import ariadne as ariadne_adapter
from quotaql.config import load_config
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.plugin import CostLimiter
from quotaql.storage.memory import MemoryStorage
from quotaql.storage.redis import RedisStorage
from tests.support import ariadne_shop, strawberry_shop
from tests.support.app_servers import UvicornServer, WSGIServer

if TYPE_CHECKING:
    from pathlib import Path

    from tests.support.servers import RedisServer

CAPACITY, RATE, MAX_DELAY = 2, 5.0, 2.0
TOML = """
[limits]
retry_jitter = 0
[tiers.free]
capacity = {capacity}
refill_per_second = {rate}
on_limit = "delay"
max_delay = {max_delay}
"""
HELLO = {"query": "{ hello }"}  # costs 0: pays min_charge, 1
OVER = 3  # requests past the bucket, sent at once


def make_app(kind: str, config_path: Path, storage: Any, registry: CollectorRegistry) -> Any:
    config = load_config(config_path)
    metrics = PrometheusMetrics(registry)
    if kind == "strawberry":
        limiter = CostLimiter(config, storage=storage, metrics=metrics)
        return GraphQL(strawberry_shop.make_schema(limiter))
    adapter = ariadne_adapter.CostLimiter(config, storage=storage, metrics=metrics)
    return adapter.asgi(ariadne_shop.make_schema())


async def drain_then_burst(url: str) -> tuple[list[httpx.Response], list[float]]:
    """Spend the full bucket, then send ``OVER`` more at once: their answers, and when each
    came back (seconds after the first request was sent)."""
    async with httpx.AsyncClient(timeout=10) as client:
        sent = time.monotonic()
        for _ in range(CAPACITY):
            assert (await client.post(f"{url}/graphql", json=HELLO)).status_code == 200

        async def one() -> tuple[httpx.Response, float]:
            response = await client.post(f"{url}/graphql", json=HELLO)
            return response, time.monotonic() - sent

        answers = await asyncio.gather(*(one() for _ in range(OVER)))
    return [response for response, _ in answers], sorted(took for _, took in answers)


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML.format(capacity=CAPACITY, rate=RATE, max_delay=MAX_DELAY), "utf-8")
    return path


@pytest.mark.parametrize("kind", ["strawberry", "ariadne"])
@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_over_budget_requests_of_a_delay_tier_wait_their_turn_and_are_answered(
    kind: str, backend: str, config_path: Path, redis_server: RedisServer
) -> None:
    if backend == "redis":
        with redis_server.client() as client:
            client.flushall()
        storage: Any = RedisStorage.from_url(redis_server.url, timeout=2.0)
    else:
        storage = MemoryStorage()
    registry = CollectorRegistry()
    try:
        with UvicornServer(make_app(kind, config_path, storage, registry)) as server:
            responses, took = asyncio.run(drain_then_burst(server.url))
    finally:
        if backend == "redis":
            storage.close()
    assert [response.status_code for response in responses] == [200] * OVER
    assert all(response.json()["data"] == {"hello": "world"} for response in responses)
    # The k-th waited for its turn: the bucket was full when the first request was sent,
    # so the k-th past it ran k / rate after that at the earliest (whole ms: 2 ms early).
    for index, seconds in enumerate(took):
        assert seconds >= (index + 1) / RATE - 0.002, (index, took)
    delays = {"tier": "free"}
    assert registry.get_sample_value(names.DELAY_SECONDS + "_count", delays) == OVER
    refused = registry.get_sample_value(names.DELAY_REFUSED_TOTAL, {**delays, "reason": "sync"})
    assert refused in (None, 0.0)


def test_a_wsgi_server_refuses_a_delay_tier_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "quotaql.toml"  # a turn within max_delay, but no refill between requests
    path.write_text(TOML.format(capacity=CAPACITY, rate=1.0, max_delay=MAX_DELAY), "utf-8")
    registry = CollectorRegistry()
    adapter = ariadne_adapter.CostLimiter(load_config(path), metrics=PrometheusMetrics(registry))
    caplog.set_level(logging.WARNING, logger=names.LOGGER)
    with WSGIServer(adapter.wsgi(ariadne_shop.make_schema())) as server:
        statuses = [
            httpx.post(f"{server.url}/graphql", json=HELLO, timeout=10).status_code
            for _ in range(CAPACITY + OVER)
        ]
    assert statuses == [200] * CAPACITY + [429] * OVER
    said = [record.getMessage() for record in caplog.records if "delay_sync" in record.getMessage()]
    assert len(said) == 1
    assert 'tier "free" has on_limit = "delay"' in said[0]
    assert 'delay_sync = "sleep"' in said[0]
    # Counted (the first; the deny cache answers the next ones before the delay line).
    refused = registry.get_sample_value(
        names.DELAY_REFUSED_TOTAL, {"tier": "free", "reason": names.DELAY_SYNC}
    )
    assert refused is not None
    assert refused >= 1
