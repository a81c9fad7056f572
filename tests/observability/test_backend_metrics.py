"""The metrics of the Redis path off the response (issue 13 §4.4): deferred refunds by outcome
(queued and coalesced read from the queue at scrape time, applied / lost / unknown from the
limiter's recorder), the refund queue, the points of refunds lost, and the pipeline's writes
and commands; on private redis-servers, and under prometheus-client's multiprocess mode.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from quotaql import AsyncLimiter, CircuitBreaker, Limiter, Quota, RedisStorage
from quotaql.config import load_config
from quotaql.cost_analysis.directives import COST_DIRECTIVES_SDL
from quotaql.gate import Gate
from quotaql.instrumentation import names
from quotaql.instrumentation.logs import LogRecorder, StructuredLog
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.limiter import MultiRecorder
from quotaql.storage.redis import AsyncRedisStorage

if TYPE_CHECKING:
    import redis

    from tests.support.servers import RedisServer

ROOT = Path(__file__).resolve().parents[2]
SLOW = Quota("tenant", capacity=1000, refill_per_second=0.001)
SCHEMA = build_schema(
    COST_DIRECTIVES_SDL
    + "type Query { items: [Item] @listSize(assumedSize: 50) }\ntype Item { id: ID }"
)
ITEMS = parse("{ items { id } }")  # 50 estimated; actual: what the data holds
TOML = """
[limits]
deny_cache_size = 0
[tiers.free]
capacity = 100000
refill_per_second = 1
[tenants.acme]
tier = "free"
"""


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    found = registry.get_sample_value(name, labels)
    return 0.0 if found is None else found


def refunds(registry: CollectorRegistry, outcome: str) -> float:
    return sample(registry, names.REFUNDS_TOTAL, outcome=outcome)


def scope() -> dict[str, Any]:
    return {"type": "http", "client": ("203.0.113.9", 1), "headers": [(b"x-api-key", b"acme")]}


def test_every_refund_and_lease_series_starts_at_zero() -> None:
    registry = CollectorRegistry()
    PrometheusMetrics(registry)
    text = generate_latest(registry).decode()
    for outcome in names.REFUND_OUTCOMES:
        assert f'{names.REFUNDS_TOTAL}{{outcome="{outcome}"}} 0.0' in text
    for outcome in names.LEASE_OUTCOMES:
        assert f'{names.LEASES_TOTAL}{{outcome="{outcome}"}} 0.0' in text
    assert f"{names.REFUND_QUEUE} 0.0" in text
    families = {family.name for family in text_string_to_metric_families(text)}
    assert {"quotaql_refunds", "quotaql_leases", names.REFUND_QUEUE} <= families


def test_the_recorder_counts_applied_lost_and_unknown_and_the_points_lost() -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    metrics.refunds("applied", 3, 45.0)
    metrics.refunds("lost", 2, 30.0)
    metrics.refunds("unknown", 1, 7.5)
    assert refunds(registry, "applied") == 3
    assert refunds(registry, "lost") == 2
    assert refunds(registry, "unknown") == 1
    # the points a tenant paid and did not get back: lost and unknown, never applied
    lost = sample(registry, names.COST_TOTAL, tier="", outcome=names.REFUND_LOST)
    assert lost == 37.5
    text = generate_latest(registry).decode()
    assert f'{names.COST_TOTAL}{{outcome="{names.REFUND_LOST}",tier=""}} 37.5' in text


def test_lost_refunds_are_logged_as_such(caplog: pytest.LogCaptureFixture) -> None:
    recorder = LogRecorder(StructuredLog())
    with caplog.at_level(logging.INFO, logger="quotaql"):
        recorder.refunds("applied", 4, 10.0)
        recorder.refunds("lost", 2, 30.0)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.quotaql_event == "refunds_lost"
    assert (record.outcome, record.count, record.cost) == ("lost", 2, 30.0)
    assert "paid up to that much more" in record.getMessage()


def test_queued_and_coalesced_are_read_from_the_queue_when_scraped(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    storage = RedisStorage.from_url(redis_server.url, timeout=1.0)
    limiter = Limiter(storage, recorder=metrics)
    assert limiter.refund_queue is not None
    metrics.watch_refunds(limiter.refund_queue)
    try:
        decisions = [limiter.acquire("acme", 10, [SLOW]) for _ in range(5)]
        breaker = limiter.breaker
        breaker.failure(timeout=True)  # open: the refunds wait, nothing is applied
        for decision in decisions:
            limiter.refund("acme", 4, [SLOW], decision=decision)
        time.sleep(0.2)  # the refund thread found the breaker open
        assert refunds(registry, "queued") == 5
        assert refunds(registry, "coalesced") == 4  # one tenant, one quota set: one entry
        assert sample(registry, names.REFUND_QUEUE) == 1
        assert refunds(registry, "applied") == 0
        breaker.success()
        assert limiter.flush(timeout=5) == 0
        assert refunds(registry, "applied") == 5  # the five refunds it coalesced
        assert sample(registry, names.REFUND_QUEUE) == 0
        assert refunds(registry, "queued") == 5  # read again: no double counting
        remaining = limiter.peek("acme", [SLOW]).remaining
        assert remaining == pytest.approx(1000 - 50 + 20, abs=0.1)
    finally:
        storage.close()


def test_refunds_lost_in_an_outage_are_counted_with_their_points(
    fresh_redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    storage = RedisStorage.from_url(fresh_redis_server.url, timeout=0.1)
    limiter = Limiter(
        storage,
        breaker=CircuitBreaker(failure_threshold=1, reset_timeout=5.0),
        recorder=MultiRecorder(LogRecorder(StructuredLog()), metrics),
        refund_max_age=0.3,
    )
    try:
        spent = limiter.acquire("acme", 50, [SLOW])
        fresh_redis_server.pause()
        try:
            assert limiter.acquire("opener", 1, [SLOW]).source == "fallback"  # it opens
            with caplog.at_level(logging.WARNING, logger="quotaql"):
                limiter.refund("acme", 30, [SLOW], decision=spent)
                deadline = time.monotonic() + 5
                while refunds(registry, "lost") == 0:
                    assert time.monotonic() < deadline, "the refund was never counted lost"
                    time.sleep(0.05)
        finally:
            fresh_redis_server.resume()
        assert refunds(registry, "lost") == 1
        assert sample(registry, names.COST_TOTAL, tier="", outcome=names.REFUND_LOST) == 30
        assert any(r.quotaql_event == "refunds_lost" for r in caplog.records)
    finally:
        storage.close()


def test_the_gate_exports_its_limiter_s_refunds_and_pipeline(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    path = tmp_path / "quotaql.toml"
    path.write_text(TOML, encoding="utf-8")

    async def main() -> None:
        registry = CollectorRegistry()
        storage = AsyncRedisStorage.from_url(redis_server.url, timeout=1.0)
        gate = Gate(load_config(path), storage=storage, metrics=PrometheusMetrics(registry))
        try:

            async def one() -> None:
                op = await gate.admit_async(SCHEMA, ITEMS, request=scope())
                await gate.settle_async(op, {"items": [{"id": "1"}]})  # 50 paid, 1 used
                gate.finish(op)

            await asyncio.gather(*(one() for _ in range(20)))
            assert await gate.aflush() == 0
            assert refunds(registry, "queued") == 20
            assert refunds(registry, "applied") == 20  # coalesced ones count each
            queued = refunds(registry, "coalesced")
            assert 0 <= queued < 20
            pipeline = storage.pipeline
            assert pipeline is not None
            commands = sample(registry, names.PIPELINE_COMMANDS_TOTAL, backend="redis")
            batches = sample(registry, names.PIPELINE_BATCHES_TOTAL, backend="redis")
            assert (commands, batches) == (pipeline.commands, pipeline.batches)
            assert batches < 20 < commands  # twenty concurrent debits shared writes
            # 20 x 49 points back to the tenant's bucket: 100000 - 20 x 50 + 20 x 49
            peek = await gate.limiter.peek("key:acme", [gate.config.tiers["free"].quota])  # type: ignore[misc]
            assert peek.remaining == pytest.approx(100000 - 20, abs=1)
        finally:
            await storage.close()

    asyncio.run(main())


def test_a_new_event_loop_s_pipeline_keeps_the_counters_growing(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)
    storage = AsyncRedisStorage.from_url(redis_server.url, timeout=1.0)
    metrics.watch_pipeline(storage)
    limiter = AsyncLimiter(storage)
    seen: list[float] = []

    async def burst() -> None:
        await asyncio.gather(*(limiter.acquire("acme", 1, [SLOW]) for _ in range(10)))
        seen.append(sample(registry, names.PIPELINE_COMMANDS_TOTAL, backend="redis"))
        pipeline = storage.pipeline
        assert pipeline is not None
        await pipeline.close()  # its connections, before its loop ends

    asyncio.run(burst())
    first = storage.pipeline
    asyncio.run(burst())  # another loop: another pipeline, its own counts from 0
    assert storage.pipeline is not first
    assert seen[0] >= 10
    assert seen[1] >= seen[0] + 10  # added to, neither reset nor counted twice

    async def close() -> None:
        await storage.close()

    asyncio.run(close())


MULTIPROCESS_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from quotaql import AsyncLimiter, AsyncRedisStorage, Quota
    from quotaql.instrumentation.metrics import PrometheusMetrics
    from prometheus_client import CollectorRegistry

    metrics = PrometheusMetrics(CollectorRegistry())
    quota = Quota("tenant", capacity=1000, refill_per_second=0.001)

    async def main():
        storage = AsyncRedisStorage.from_url(sys.argv[1], timeout=1.0)
        limiter = AsyncLimiter(storage, recorder=metrics)
        metrics.watch_refunds(limiter.refund_queue)
        metrics.watch_pipeline(storage)
        decisions = await asyncio.gather(*(limiter.acquire("acme", 5, [quota]) for _ in range(8)))
        for decision in decisions:
            await limiter.refund("acme", 2, [quota], decision=decision)
        await limiter.flush()
        # An operation, once the second is over: what no scrape of this process ever reads
        # reaches its files.
        await asyncio.sleep(1.1)
        metrics.operation("allowed", "query", "free", "acme")
        await storage.close()

    asyncio.run(main())
    """
)


def test_multiprocess_workers_write_their_backend_counters(
    redis_server: RedisServer, redis_client: redis.Redis, tmp_path: Path
) -> None:
    from prometheus_client.multiprocess import MultiProcessCollector

    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    subprocess.run(
        [sys.executable, "-c", MULTIPROCESS_WORKER, redis_server.url],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
    )
    aggregated = CollectorRegistry()
    MultiProcessCollector(aggregated, path=str(directory))  # type: ignore[no-untyped-call]
    assert refunds(aggregated, "queued") == 8
    assert refunds(aggregated, "applied") == 8
    # eight debits, then one refund (the eight coalesced): at least nine commands
    assert sample(aggregated, names.PIPELINE_COMMANDS_TOTAL, backend="redis") >= 8 + 1
