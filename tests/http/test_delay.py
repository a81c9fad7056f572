"""Delay instead of refuse against real servers (issue 13 §1): the turns in a private
redis-server, the API Strawberry through uvicorn.

- three uvicorn worker **processes** on one redis-server, 200 concurrent requests of one
  tenant spread over them: the operations start at the bucket's rate across the processes
  (none before its turn, no window holding more than the bucket allows), the rest are
  refused 429 with ``Retry-After``;
- the async gate on Redis, the server paused (SIGSTOP) while operations wait: they still run
  at their turns (the reservation was made; the run needs no call);
- a client that leaves while it waits gains nothing: what ran stays within the rate.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import strawberry
from graphql import build_schema, parse
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.routing import Mount
from strawberry.asgi import GraphQL

from quotaql.config import load_config
from quotaql.gate import Gate
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics, metrics_app
from quotaql.plugin import CostLimiter
from quotaql.storage.redis import AsyncRedisStorage
from tests.http.test_concurrency import CONFIG_ENV, REDIS_ENV, workers

if TYPE_CHECKING:
    from tests.support.servers import RedisServer

CAPACITY, RATE, MAX_DELAY = 5, 20.0, 2.0
TOML = f"""
[limits]
retry_jitter = 0
[tiers.free]
capacity = 1000000
refill_per_second = 1000
[tiers.paced]
capacity = {CAPACITY}
refill_per_second = {RATE}
on_limit = "delay"
max_delay = {MAX_DELAY}
max_queued = 100
[tenants.acme]
tier = "paced"
"""
# The spread of the replies' latencies and of the workers' sleeps: how late (never how
# early) a start may be against its turn, on a busy 2-core machine (starts that come late
# may bunch up in a window).
JITTER = 0.25


@strawberry.type
class Query:
    @strawberry.field
    async def started(self) -> float:
        return time.time()  # one machine, one clock: comparable across the workers

    @strawberry.field
    def hello(self) -> str:
        return "world"


def create_app() -> Starlette:
    """The subprocess workers' factory (``uvicorn --factory tests.http.test_delay:create_app``)."""
    registry = CollectorRegistry()
    storage = AsyncRedisStorage.from_url(os.environ[REDIS_ENV], timeout=2.0)
    limiter = CostLimiter.from_config(
        Path(os.environ[CONFIG_ENV]), storage=storage, metrics=PrometheusMetrics(registry)
    )
    schema = strawberry.Schema(query=Query, extensions=[limiter])
    return Starlette(routes=[Mount("/metrics", metrics_app(registry)), Mount("/", GraphQL(schema))])


def test_three_workers_start_one_tenant_s_burst_at_the_bucket_s_rate(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    config = tmp_path / "quotaql.toml"
    config.write_text(TOML, encoding="utf-8")

    refusals_seen: list[float] = []  # when each 429 came back (time.time())

    async def burst(urls: list[str]) -> list[httpx.Response]:
        async with httpx.AsyncClient(timeout=60) as client:

            async def one(url: str) -> httpx.Response:
                response = await client.post(
                    f"{url}/graphql", json={"query": "{ started }"}, headers={"X-API-Key": "acme"}
                )
                if response.status_code == 429:
                    refusals_seen.append(time.time())
                return response

            return await asyncio.gather(*(one(urls[i % len(urls)]) for i in range(200)))

    with redis_server.client() as redis_client:
        redis_client.flushall()
    with workers(3, config, redis_server.url, "tests.http.test_delay:create_app") as running:
        sent = time.time()
        responses = asyncio.run(burst([worker.url for worker in running]))
        delayed = sum(
            worker.metric(names.DELAY_SECONDS + "_count", tier="paced") for worker in running
        )
        refused_by_queue = sum(
            worker.metric(names.DELAY_REFUSED_TOTAL, tier="paced", reason="queue")
            for worker in running
        )

    starts = sorted(
        response.json()["data"]["started"] for response in responses if response.status_code == 200
    )
    refused = [response for response in responses if response.status_code == 429]
    assert len(starts) + len(refused) == 200
    # The bucket at once, then max_delay's worth of the rate (and what refilled while the
    # 200 requests were being admitted): it queued, it did not only refuse.
    assert len(starts) >= 0.9 * (CAPACITY + RATE * MAX_DELAY)
    # Nothing before its turn, across the three processes: the bucket was full when the
    # burst was sent, so the k-th start is at least (k - capacity) / rate after it (the
    # bucket's time is in whole ms: a ms early at most).
    for index, at in enumerate(starts):
        turn = max(0, index + 1 - CAPACITY) / RATE
        assert at - sent >= turn - 0.002, (index, at - sent, turn)
    assert starts[-1] - sent >= 0.9 * MAX_DELAY  # the last waited about max_delay
    # In any window of w seconds, at most capacity + rate × (w + jitter) started.
    for window in (0.25, 0.5, 1.0):
        most = max(
            sum(1 for other in starts[index:] if other < at + window)
            for index, at in enumerate(starts)
        )
        assert most <= CAPACITY + RATE * (window + JITTER) + 1, (window, most)
    for response in refused:
        assert response.json()["errors"][0]["extensions"]["code"] == "RATE_LIMITED"
        assert int(response.headers["Retry-After"]) >= 1
    # Each start that did not wait had the bucket's tokens: the capacity, and what refilled
    # while the burst was being admitted (it is admitted until its last refusal; on a loaded
    # machine that takes a while).
    admitting = max(refusals_seen) - sent
    assert delayed >= len(starts) - CAPACITY - RATE * admitting - 2, admitting
    assert refused_by_queue >= 1


SCHEMA = build_schema("type Query { hello: String }")
HELLO = parse("{ hello }")


def gate_on(server: RedisServer, tmp_path: Path, registry: CollectorRegistry) -> Gate:
    config = tmp_path / "quotaql.toml"
    config.write_text(TOML.replace("max_delay = 2.0", "max_delay = 1.0"), encoding="utf-8")
    storage = AsyncRedisStorage.from_url(server.url, timeout=0.5)
    return Gate(load_config(config), storage=storage, metrics=PrometheusMetrics(registry))


def acme() -> dict[str, Any]:
    return {"type": "http", "client": ("203.0.113.9", 1), "headers": [(b"x-api-key", b"acme")]}


def test_operations_waiting_when_redis_stops_answering_still_run_at_their_turns(
    tmp_path: Path, fresh_redis_server: RedisServer
) -> None:
    registry = CollectorRegistry()
    gate = gate_on(fresh_redis_server, tmp_path, registry)

    async def main() -> list[float]:
        started = time.monotonic()

        async def one() -> float:
            op = await gate.admit_async(SCHEMA, HELLO, request=acme())
            assert not op.refused
            return time.monotonic() - started

        tasks = [asyncio.create_task(one()) for _ in range(CAPACITY + 10)]
        delayed = {"tier": "paced"}
        while registry.get_sample_value(names.DELAY_SECONDS + "_count", delayed) != 10:
            await asyncio.sleep(0.002)  # until every reservation is made, and waits
        fresh_redis_server.pause()  # SIGSTOP: no answer from now on
        try:
            return sorted(await asyncio.wait_for(asyncio.gather(*tasks), 5))
        finally:
            fresh_redis_server.resume()
            await gate.storage.close()

    ends = asyncio.run(main())
    waited = ends[CAPACITY:]
    assert len(waited) == 10
    for index, at in enumerate(waited):  # at its turn: not early, not held by the pause
        turn = (index + 1) / RATE
        assert turn - 0.01 <= at <= turn + JITTER + 0.3, (index, at, turn)
    assert registry.get_sample_value(names.DELAY_SECONDS + "_count", {"tier": "paced"}) == 10


def test_clients_that_leave_while_waiting_gain_nothing(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The attack on Redis: reserve turns and leave, again and again, then run greedily:
    each leaver's debit comes back (never more), so what ran stays within the rate."""
    registry = CollectorRegistry()
    with redis_server.client() as client:
        client.flushall()
    gate = gate_on(redis_server, tmp_path, registry)

    async def main() -> tuple[int, float]:
        started = time.monotonic()
        ran = 0
        for _ in range(20):
            tasks = [
                asyncio.create_task(gate.admit_async(SCHEMA, HELLO, request=acme()))
                for _ in range(15)
            ]
            await asyncio.sleep(0.02)  # decided: the bucket's at once, the others waiting
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            ran += sum(not isinstance(result, BaseException) and not result.refused
                       for result in results)  # fmt: skip
        await gate.aflush()
        greedy = await asyncio.gather(
            *(gate.admit_async(SCHEMA, HELLO, request=acme()) for _ in range(60))
        )
        ran += sum(not op.refused for op in greedy)
        await gate.storage.close()
        return ran, time.monotonic() - started

    ran, elapsed = asyncio.run(main())
    assert ran <= CAPACITY + RATE * elapsed + 2
    cancelled = registry.get_sample_value(names.DELAY_CANCELLED_TOTAL, {"tier": "paced"})
    assert cancelled is not None
    assert cancelled >= 100  # most of the 20 × 10 waiters left, refunded


def test_clients_that_leave_take_their_places_in_the_redis_line_with_them(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """The attack on Redis: fill the tenant's line (``max_queued`` 3) and leave, so that
    the tenant's other clients are refused for places nobody holds. The leavers' refunds
    (deferred, applied by the limiter's task) name their turns: the script takes their
    entries out of the line, and three may wait again at once."""
    registry = CollectorRegistry()
    with redis_server.client() as client:
        client.flushall()
    config = tmp_path / "quotaql.toml"
    # Turns 0.25 s apart: the leavers' refunds reach Redis before the first turn comes, even
    # on a busy machine (a refund after its turn finds its place gone already).
    config.write_text(
        TOML.replace("max_queued = 100", "max_queued = 3").replace(
            f"refill_per_second = {RATE}", "refill_per_second = 4"
        ),
        encoding="utf-8",
    )
    gate = Gate(
        load_config(config),
        storage=AsyncRedisStorage.from_url(redis_server.url, timeout=0.5),
        metrics=PrometheusMetrics(registry),
    )

    async def main() -> list[bool]:
        try:
            for _ in range(CAPACITY):  # the bucket, spent
                assert not (await gate.admit_async(SCHEMA, HELLO, request=acme())).refused
            waiters = [
                asyncio.create_task(gate.admit_async(SCHEMA, HELLO, request=acme()))
                for _ in range(3)
            ]
            delayed = {"tier": "paced"}
            while registry.get_sample_value(names.DELAY_SECONDS + "_count", delayed) != 3:
                await asyncio.sleep(0.002)  # until the three wait: the line is full
            with redis_server.client() as client:
                lines = list(client.scan_iter("*#w"))
                assert len(lines) == 1
                assert client.zcard(lines[0]) == 3
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
            await gate.aflush()
            with redis_server.client() as client:
                seconds, micros = client.time()
                now_ms = seconds * 1000 + micros // 1000
                # Every place still held (a turn to come) went with its leaver.
                assert client.zcount(lines[0], f"({now_ms}", "+inf") == 0
            again = await asyncio.gather(
                *(gate.admit_async(SCHEMA, HELLO, request=acme()) for _ in range(4))
            )
            return [op.refused for op in again]
        finally:
            await gate.storage.close()

    refused = asyncio.run(main())
    assert refused.count(False) == 3  # the line's three places, long before the turns left
    assert registry.get_sample_value(names.DELAY_CANCELLED_TOTAL, {"tier": "paced"}) == 3


def test_a_burst_on_a_redis_cluster_runs_at_the_bucket_s_rate(
    tmp_path: Path, async_cluster_client: Any
) -> None:
    """The same turns on a 3-master Redis Cluster: the tenant's hash and its line of waiting
    requests share the tenant's hash tag, so one script call on one master decides both."""
    config = tmp_path / "quotaql.toml"
    config.write_text(TOML.replace("max_delay = 2.0", "max_delay = 1.0"), encoding="utf-8")

    async def body(client: Any) -> tuple[float, list[tuple[float, bool]]]:
        storage = AsyncRedisStorage(client, timeout=1.0)
        gate = Gate(load_config(config), storage=storage)
        sent = time.monotonic()

        async def one() -> tuple[float, bool]:
            op = await gate.admit_async(SCHEMA, HELLO, request=acme())
            assert op.decision is not None
            assert op.decision.source == "redis"
            return time.monotonic(), op.refused

        try:
            return sent, list(await asyncio.gather(*(one() for _ in range(40))))
        finally:
            await storage.close()

    sent, results = async_cluster_client(body)
    starts = sorted(at - sent for at, refused in results if not refused)
    assert len(starts) >= 0.9 * (CAPACITY + RATE * 1.0)
    assert len(starts) < 40  # the rest were refused: the line reached max_delay
    for index, at in enumerate(starts):
        turn = max(0, index + 1 - CAPACITY) / RATE
        assert at >= turn - 0.002, (index, at, turn)
