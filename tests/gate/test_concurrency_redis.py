"""Concurrency limits through the gate on a private redis-server: the leases live in the
tenant's ZSETs (sync and async storages alike), are renewed while an operation runs and
released when it ends, and the fail modes answer when Redis is down or silent.

The in-memory behaviour is in tests/gate/test_concurrency.py; HTTP servers, killed workers
and several processes in tests/http/test_concurrency.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import TYPE_CHECKING, Any

import pytest
from graphql import build_schema, parse
from prometheus_client import CollectorRegistry

from quotaql.config import load_config
from quotaql.contract import RATE_LIMITER_UNAVAILABLE, TOO_MANY_CONCURRENT
from quotaql.gate import Gate, Operation
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage.leases import AsyncRedisLeases, MemoryLeases, RedisLeases
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import redis

    from tests.support.servers import RedisServer

SCHEMA = build_schema("type Query { hello: String }\ntype Subscription { ticks: Int }")
HELLO = parse("{ hello }")
TICKS = parse("subscription { ticks }")
KEY = "acme"
TIER_SET = b"quotaql:{t:key:acme}:~c:tier"
TOML = """
[limits]
retry_jitter = 0
on_backend_error = "{mode}"
local_share = 0.25
lease_ttl = {ttl}
deny_cache_size = 0
[tiers.free]
capacity = 1000
refill_per_second = 1
max_in_flight = 8
[tenants.acme]
tier = "free"
"""
TIMEOUT = 0.2


def scope(key: str = KEY) -> dict[str, Any]:
    return {"type": "http", "client": ("203.0.113.9", 40000), "headers": [(b"x-api-key",
            key.encode())]}  # fmt: skip


@pytest.fixture
def config(tmp_path: Path) -> Callable[..., Any]:
    def write(mode: str = "local", ttl: float = 30) -> Any:
        path = tmp_path / "quotaql.toml"
        path.write_text(TOML.replace("{mode}", mode).replace("{ttl}", str(ttl)), "utf-8")
        return load_config(path)

    return write


def zcard(client: redis.Redis) -> int:
    return int(client.zcard(TIER_SET))


def wait_for(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


# -- sync storage ---------------------------------------------------------------------------


def test_sync_gate_keeps_its_leases_in_the_tenant_s_zset(
    config: Callable[..., Any], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    storage = RedisStorage.from_url(redis_server.url, timeout=TIMEOUT)
    gate = Gate(config(), storage=storage)
    assert isinstance(gate.leases, RedisLeases)
    assert gate.leases.storage is storage  # the storage's own private client
    try:
        ops = [gate.admit(SCHEMA, HELLO, request=scope()) for _ in range(9)]
        assert [op.code for op in ops] == [None] * 8 + [TOO_MANY_CONCURRENT]
        assert zcard(redis_client) == 8
        members = {member.decode() for member in redis_client.zrange(TIER_SET, 0, -1)}
        assert members == {op.lease.id for op in ops[:8] if op.lease}
        ttl_ms = redis_client.pttl(TIER_SET)
        assert 25_000 < ttl_ms <= 30_000  # the set lives as long as its longest lease
        for op in ops:
            gate.finish(op)
        assert zcard(redis_client) == 0
        assert not gate.admit(SCHEMA, HELLO, request=scope()).refused
    finally:
        storage.close()


def test_a_long_operation_keeps_its_lease_while_it_runs(
    config: Callable[..., Any], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    storage = RedisStorage.from_url(redis_server.url, timeout=TIMEOUT)
    gate = Gate(config(ttl=1), storage=storage)  # renewed every 1/3 s
    try:
        op = gate.admit(SCHEMA, HELLO, request=scope())
        assert op.lease is not None
        lease = op.lease.id
        first = redis_client.zscore(TIER_SET, lease)
        time.sleep(2.0)  # twice its ttl
        later = redis_client.zscore(TIER_SET, lease)
        assert first is not None
        assert later is not None
        assert later > first + 1000  # renewed: its expiry moved on by more than a second
        gate.finish(op)
        assert redis_client.zscore(TIER_SET, lease) is None
    finally:
        storage.close()


# -- async storage --------------------------------------------------------------------------


def test_async_gate_releases_when_the_operation_ends(
    config: Callable[..., Any], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    async def main() -> None:
        storage = AsyncRedisStorage.from_url(redis_server.url, timeout=TIMEOUT)
        registry = CollectorRegistry()
        gate = Gate(config(), storage=storage, metrics=PrometheusMetrics(registry))
        assert isinstance(gate.leases, AsyncRedisLeases)
        try:
            ops = await asyncio.gather(
                *(gate.admit_async(SCHEMA, HELLO, request=scope()) for _ in range(12))
            )
            assert sorted(op.code or "" for op in ops) == [""] * 8 + [TOO_MANY_CONCURRENT] * 4
            assert zcard(redis_client) == 8
            for op in ops:
                gate.finish(op)  # sync: the releases go out as tasks of this loop
            await gate.aflush()
            assert zcard(redis_client) == 0
            sample = registry.get_sample_value
            assert sample(names.LEASES_TOTAL, {"outcome": "taken"}) == 8
            assert sample(names.LEASES_TOTAL, {"outcome": "refused"}) == 4
            assert sample(names.LEASES_TOTAL, {"outcome": "released"}) == 8
            assert sample(names.IN_FLIGHT, {"tier": "free"}) == 0
            # the async pipeline carried the takes and the releases
            commands = sample(names.PIPELINE_COMMANDS_TOTAL, {"backend": "redis"}) or 0
            batches = sample(names.PIPELINE_BATCHES_TOTAL, {"backend": "redis"}) or 0
            assert commands >= 12 + 8 + 8  # takes, the debits of those admitted, releases
            assert 1 <= batches < commands  # concurrent calls shared writes
        finally:
            await storage.close()

    asyncio.run(main())


def test_a_subscription_holds_its_lease_until_it_ends(
    config: Callable[..., Any], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    async def main() -> None:
        storage = AsyncRedisStorage.from_url(redis_server.url, timeout=TIMEOUT)
        gate = Gate(config(), storage=storage)
        subscriptions = b"quotaql:{t:key:acme}:~c:subscriptions"
        try:
            op = await gate.admit_async(SCHEMA, TICKS, request=scope())
            assert op.lease is not None
            assert op.lease.names == ("subscriptions",)
            for _ in range(3):
                assert await gate.event_async(op) is None  # events take no lease
            assert redis_client.zcard(subscriptions) == 1
            assert zcard(redis_client) == 0  # and no query slot
            gate.finish(op)
            await gate.aflush()
            assert redis_client.zcard(subscriptions) == 0
        finally:
            await storage.close()

    asyncio.run(main())


def test_cancelled_admissions_leave_no_lease_behind(
    config: Callable[..., Any], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """Clients that leave mid-admission (their task cancelled while the lease or the debit
    is on its way): every lease one of them may have taken is given back."""

    async def main() -> None:
        storage = AsyncRedisStorage.from_url(redis_server.url, timeout=1.0)
        gate = Gate(config(), storage=storage)
        rng = random.Random(13)
        try:
            admitted: list[Operation] = []
            for _ in range(100):
                task = asyncio.ensure_future(gate.admit_async(SCHEMA, HELLO, request=scope()))
                # cancelled at a different point each time: while taking, while debiting, or
                # (a few) once admitted
                await asyncio.sleep(rng.uniform(0, 0.004))
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    admitted.append(await task)
            for op in admitted:
                gate.finish(op)
            await gate.aflush()
            await asyncio.sleep(0.05)  # the last releases' replies
            assert 0 < len(admitted) < 100  # some were cancelled, some not
            assert zcard(redis_client) == 0
            assert gate.in_flight() == {}
            held = sum(len(keeper) for keeper in gate.lease_keepers)
            assert held == 0  # nothing left to renew either
        finally:
            await storage.close()

    asyncio.run(main())


def test_a_client_that_leaves_while_its_lease_is_taken_leaves_no_lease(
    config: Callable[..., Any], fresh_redis_server: RedisServer, redis_server: RedisServer
) -> None:
    """Cancelled once the take was sent and before its answer (Redis silent meanwhile): the
    take runs when Redis wakes up, and the release sent after it (one connection: in order)
    takes it back."""

    async def main() -> None:
        rates = AsyncRedisStorage.from_url(redis_server.url, timeout=1.0)
        lease_storage = AsyncRedisStorage.from_url(
            fresh_redis_server.url, timeout=5.0, pipeline_connections=1
        )
        gate = Gate(config(), storage=rates, leases=AsyncRedisLeases(lease_storage))
        client = fresh_redis_server.client()
        try:
            gate.finish(await gate.admit_async(SCHEMA, HELLO, request=scope()))  # warm
            await gate.aflush()
            fresh_redis_server.pause()
            task = asyncio.ensure_future(gate.admit_async(SCHEMA, HELLO, request=scope()))
            await asyncio.sleep(0.1)  # the take is written, Redis does not answer
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            fresh_redis_server.resume()
            assert await asyncio.to_thread(wait_for, lambda: zcard(client) == 0, 3)
            await asyncio.sleep(0.3)  # and it stays so: the take did run before the release
            assert zcard(client) == 0
            assert client.exists(TIER_SET) == 0
        finally:
            fresh_redis_server.resume()
            client.close()
            await lease_storage.close()
            await rates.close()

    asyncio.run(main())


class _TakesLate(AsyncRedisLeases):
    """Takes that reach Redis 50 ms after they were asked, whatever their caller does
    meanwhile (as a take in a pipeline batch waits for its connection to be made, or is sent
    again after a ``NOSCRIPT``), on the real lease script."""

    __slots__ = ("releases",)

    def __init__(self, storage: AsyncRedisStorage) -> None:
        super().__init__(storage)
        self.releases = 0

    async def take(self, *args: Any, **kwargs: Any) -> Any:
        async def late() -> Any:
            await asyncio.sleep(0.05)
            return await AsyncRedisLeases.take(self, *args, **kwargs)

        return await asyncio.shield(asyncio.ensure_future(late()))

    async def release(self, *args: Any, **kwargs: Any) -> int:
        self.releases += 1
        return await super().release(*args, **kwargs)


def test_a_lease_is_given_back_only_once_its_take_has_been_answered(
    config: Callable[..., Any], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    """The client leaves before its take reaches Redis: a release sent at once would find
    nothing, then the take would hold its slot until lease_ttl (seen on the pipeline's two
    connections, the take's still connecting). The release waits for the take's answer."""

    async def main() -> None:
        storage = AsyncRedisStorage.from_url(redis_server.url, timeout=1.0)
        leases = _TakesLate(storage)
        gate = Gate(config(), storage=storage, leases=leases)
        try:
            for _ in range(3):
                task = asyncio.ensure_future(gate.admit_async(SCHEMA, HELLO, request=scope()))
                await asyncio.sleep(0.01)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            await asyncio.sleep(0.1)  # every take has reached Redis
            await gate.aflush()
            assert zcard(redis_client) == 0
            assert leases.releases == 3
            assert gate.in_flight() == {}
            # A take that was refused took nothing: no release is sent for it.
            held = [await gate.admit_async(SCHEMA, HELLO, request=scope()) for _ in range(8)]
            task = asyncio.ensure_future(gate.admit_async(SCHEMA, HELLO, request=scope()))
            await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.1)
            await gate.aflush()
            assert zcard(redis_client) == 8
            assert leases.releases == 3
            for op in held:
                gate.finish(op)
            await gate.aflush()
            assert zcard(redis_client) == 0
        finally:
            await storage.close()

    asyncio.run(main())


def test_a_client_that_leaves_while_it_is_debited_gives_its_lease_back(
    config: Callable[..., Any], fresh_redis_server: RedisServer, redis_server: RedisServer
) -> None:
    """The lease is taken; the client leaves while the rate debit waits for a silent Redis
    (the rates on another server here): the lease is released at once."""

    async def main() -> None:
        rates = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=5.0)
        lease_storage = AsyncRedisStorage.from_url(redis_server.url, timeout=1.0)
        gate = Gate(config(), storage=rates, leases=AsyncRedisLeases(lease_storage))
        client = redis_server.client()
        client.flushall()
        try:
            gate.finish(await gate.admit_async(SCHEMA, HELLO, request=scope()))  # warm
            await gate.aflush()
            fresh_redis_server.pause()
            task = asyncio.ensure_future(gate.admit_async(SCHEMA, HELLO, request=scope()))
            assert await asyncio.to_thread(wait_for, lambda: zcard(client) == 1, 3)
            task.cancel()  # taken, and waiting for its debit
            with pytest.raises(asyncio.CancelledError):
                await task
            await gate.aflush(timeout=2.0)
            assert zcard(client) == 0
            assert gate.in_flight() == {}
        finally:
            fresh_redis_server.resume()
            client.close()
            await lease_storage.close()
            await rates.close()

    asyncio.run(main())


# -- fail modes -----------------------------------------------------------------------------


def test_local_fail_mode_counts_leases_in_this_process_with_its_share(
    config: Callable[..., Any], fresh_redis_server: RedisServer
) -> None:
    storage = RedisStorage.from_url(fresh_redis_server.url, timeout=TIMEOUT)
    registry = CollectorRegistry()
    gate = Gate(config("local"), storage=storage, metrics=PrometheusMetrics(registry))
    try:
        before = gate.admit(SCHEMA, HELLO, request=scope())  # a lease in Redis
        assert isinstance(before.lease.leases, RedisLeases)  # type: ignore[union-attr]
        fresh_redis_server.kill()
        ops = [gate.admit(SCHEMA, HELLO, request=scope()) for _ in range(3)]
        # max_in_flight 8 x local_share 0.25 = 2 per process while Redis is down
        assert [op.code for op in ops] == [None, None, TOO_MANY_CONCURRENT]
        assert all(isinstance(op.lease.leases, MemoryLeases) for op in ops[:2])  # type: ignore[union-attr]
        assert ops[2].errors[0].extensions["limit"] == 2
        failed = registry.get_sample_value(names.LEASES_TOTAL, {"outcome": "take_failed"})
        assert failed == 3
        for op in (before, *ops):
            gate.finish(op)
        assert gate.in_flight() == {}
        # the release of the lease taken in Redis could not be made: it expires by itself
        assert registry.get_sample_value(names.LEASES_TOTAL, {"outcome": "release_failed"}) == 1
        assert registry.get_sample_value(names.LEASES_TOTAL, {"outcome": "released"}) == 2
    finally:
        storage.close()


def test_open_fail_mode_runs_without_a_lease(
    config: Callable[..., Any], fresh_redis_server: RedisServer
) -> None:
    storage = RedisStorage.from_url(fresh_redis_server.url, timeout=TIMEOUT)
    gate = Gate(config("open"), storage=storage)
    try:
        fresh_redis_server.kill()
        ops = [gate.admit(SCHEMA, HELLO, request=scope()) for _ in range(12)]
        assert not any(op.refused for op in ops)  # more than max_in_flight: nothing counts
        assert all(op.lease is not None and op.lease.leases is None for op in ops)
        assert ops[0].outcome == names.FAIL_OPEN
        for op in ops:
            gate.finish(op)
        assert gate.in_flight() == {}
    finally:
        storage.close()


def test_closed_fail_mode_refuses_and_takes_nothing(
    config: Callable[..., Any], fresh_redis_server: RedisServer
) -> None:
    storage = RedisStorage.from_url(fresh_redis_server.url, timeout=TIMEOUT)
    gate = Gate(config("closed"), storage=storage)
    try:
        fresh_redis_server.kill()
        started = time.monotonic()
        ops = [gate.admit(SCHEMA, HELLO, request=scope()) for _ in range(5)]
        elapsed = time.monotonic() - started
        assert [op.code for op in ops] == [RATE_LIMITER_UNAVAILABLE] * 5
        assert ops[0].status == 503
        assert ops[0].outcome == names.FAIL_CLOSED
        assert int(ops[0].headers["Retry-After"]) >= 1
        assert ops[0].headers["X-RateLimit-Limit"] == "1000"  # the tier's budget, as the limiter's
        assert ops[0].decision is not None
        assert ops[0].decision.source == "fail_closed"
        assert elapsed < 5 * TIMEOUT  # the breaker opened: not a timeout per operation
        for op in ops:
            gate.finish(op)
    finally:
        storage.close()


def test_a_take_that_timed_out_is_released_where_it_may_have_landed(
    config: Callable[..., Any], fresh_redis_server: RedisServer
) -> None:
    """A silent Redis: the take times out (the fail mode answers), then Redis wakes up and
    runs it anyway. The operation's end releases it there too: no slot is left taken."""

    async def main() -> None:
        storage = AsyncRedisStorage.from_url(fresh_redis_server.url, timeout=TIMEOUT)
        gate = Gate(config("local"), storage=storage)
        client = fresh_redis_server.client()
        try:
            await gate.admit_async(SCHEMA, HELLO, request=scope("other"))  # connected, loaded
            fresh_redis_server.pause()
            op = await gate.admit_async(SCHEMA, HELLO, request=scope())
            assert op.lease is not None
            assert isinstance(op.lease.leases, MemoryLeases)  # the local fail mode
            assert op.lease.stray is gate.leases
            fresh_redis_server.resume()
            await asyncio.sleep(0.3)
            assert zcard(client) == 1  # the timed-out take ran once Redis was back
            gate.limiter.breaker.success()  # past the breaker's cool-down
            gate.finish(op)
            await gate.aflush()
            assert zcard(client) == 0
        finally:
            fresh_redis_server.resume()
            client.close()
            await storage.close()

    asyncio.run(main())


def test_an_async_operation_s_span_ends_once_its_lease_is_released(
    config: Callable[..., Any], redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
        InMemorySpanExporter,
    )

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    async def main() -> None:
        storage = AsyncRedisStorage.from_url(redis_server.url, timeout=TIMEOUT)
        gate = Gate(config(), storage=storage, tracer_provider=provider)
        try:
            op = await gate.admit_async(SCHEMA, HELLO, request=scope())
            gate.finish(op)
            assert exporter.get_finished_spans() == ()  # the release is on its way
            await gate.aflush()
            (span,) = exporter.get_finished_spans()
            assert span.attributes[names.ATTR_IN_FLIGHT] == 1
            assert zcard(redis_client) == 0
            # Finished where no loop runs (a thread): the release cannot be made, the lease
            # expires by itself, and the span ends anyway.
            op = await gate.admit_async(SCHEMA, HELLO, request=scope())
            await asyncio.to_thread(gate.finish, op)
            assert len(exporter.get_finished_spans()) == 2
            assert zcard(redis_client) == 1
            held = sum(len(keeper) for keeper in gate.lease_keepers)
            assert held == 0  # no longer renewed: it expires within lease_ttl
        finally:
            await storage.close()

    asyncio.run(main())
