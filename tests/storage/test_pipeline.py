"""Implicit pipelining of AsyncRedisStorage: concurrent calls of one event loop share writes.

Everything runs against a real private redis-server: batching is counted both on the client
(writes made) and on the server (``INFO commandstats``), outages are real pauses and flushes.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import AsyncRedisStorage, MemoryStorage, Quota
from quotaql.errors import StorageError, StorageTimeout
from quotaql.storage import Debit
from tests.support.servers import AsyncRunner

if TYPE_CHECKING:
    import redis

    from tests.support.servers import RedisServer

T0 = 1_700_000_000_000
QUOTA = Quota("tenant", capacity=10, refill_per_second=1)
CALLERS = 64


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0))


def test_concurrent_calls_go_out_in_few_writes_and_each_gets_its_own_answer(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    async def body(client: Any) -> tuple[list[float], int, int]:
        storage = AsyncRedisStorage(client, timeout=5.0, pipeline_limit=16)
        try:
            await storage.peek("warm", [QUOTA])  # the script loaded: no NOSCRIPT below
            await asyncio.to_thread(redis_client.config_resetstat)
            assert storage.pipeline is not None
            before = storage.pipeline.batches
            costs = [1 + i % 5 for i in range(CALLERS)]
            decisions = await asyncio.gather(
                *(
                    storage.acquire(Debit(f"t{i}", cost, [QUOTA], T0))
                    for i, cost in enumerate(costs)
                )
            )
            writes = storage.pipeline.batches - before
            return [d.remaining for d in decisions], writes, len(costs)
        finally:
            await storage.close()

    remaining, batches, calls = AsyncRunner(redis_server.async_client)(body)
    reference = MemoryStorage()
    expected = [
        reference.acquire(Debit(f"t{i}", 1 + i % 5, [QUOTA], T0)).remaining for i in range(CALLERS)
    ]
    assert remaining == expected
    # 64 calls, at most 16 a write: 4 writes, plus at most one per connection that was
    # still busy when more arrived.
    assert batches <= 64 // 16 + 2
    assert evalsha_calls(redis_client) == calls


def test_a_lone_call_is_one_write(redis_server: RedisServer) -> None:
    async def body(client: Any) -> list[int]:
        storage = AsyncRedisStorage(client, timeout=5.0)
        try:
            seen = []
            for i in range(5):
                decision = await storage.acquire(Debit("lone", 1, [QUOTA], T0))
                assert decision.remaining == 9 - i
                assert storage.pipeline is not None
                seen.append(storage.pipeline.batches)
            return seen
        finally:
            await storage.close()

    assert AsyncRunner(redis_server.async_client)(body) == [1, 2, 3, 4, 5]


async def acquire_while_paused(
    storage: AsyncRedisStorage, server: RedisServer, count: int, quota: Quota, now: int | None
) -> tuple[list[Any], float]:
    """``count`` concurrent acquires (tenants ``t0``, ``t1``...) while ``server`` is paused
    (SIGSTOP): their results (exceptions included) and how long they took; resumed after."""
    await asyncio.to_thread(server.pause)
    try:
        started = time.monotonic()
        results = await asyncio.gather(
            *(storage.acquire(Debit(f"t{i}", 1, [quota], now)) for i in range(count)),
            return_exceptions=True,
        )
        return results, time.monotonic() - started
    finally:
        await asyncio.to_thread(server.resume)


def test_a_paused_redis_fails_every_waiting_call_within_the_timeout_then_recovers(
    fresh_redis_server: RedisServer,
) -> None:
    timeout = 0.2

    async def body(client: Any) -> tuple[list[BaseException | Any], float, float]:
        storage = AsyncRedisStorage(client, timeout=timeout)
        try:
            assert (await storage.acquire(Debit("warm", 1, [QUOTA], T0))).allowed  # connections up
            results, took = await acquire_while_paused(
                storage, fresh_redis_server, CALLERS, QUOTA, T0
            )
            again = await storage.acquire(Debit("after", 1, [QUOTA], T0))
            return results, took, again.remaining
        finally:
            await storage.close()

    results, took, remaining = AsyncRunner(fresh_redis_server.async_client)(body)
    assert all(isinstance(result, StorageTimeout) for result in results), results[:3]
    # One deadline per batch; the batches wait on two connections, each batch for the one
    # ahead of it at worst: well under a few timeouts, never a hang.
    assert took < timeout * 8
    assert remaining == 9


def test_calls_after_a_script_flush_load_the_script_again(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    async def body(client: Any) -> list[float]:
        storage = AsyncRedisStorage(client, timeout=5.0)
        try:
            await storage.acquire(Debit("flush", 1, [QUOTA], T0))
            await client.script_flush()
            decisions = await asyncio.gather(
                *(storage.acquire(Debit("flush", 1, [QUOTA], T0)) for _ in range(8))
            )
            return sorted(d.remaining for d in decisions)
        finally:
            await storage.close()

    assert AsyncRunner(redis_server.async_client)(body) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_cancelled_caller_leaves_the_connection_in_step(redis_server: RedisServer) -> None:
    async def body(client: Any) -> tuple[list[Any], float]:
        storage = AsyncRedisStorage(client, timeout=5.0, pipeline_connections=1)
        try:
            tasks = [
                asyncio.create_task(storage.acquire(Debit(f"c{i}", 2, [QUOTA], T0)))
                for i in range(10)
            ]
            await asyncio.sleep(0)  # queued and flushed: in flight
            tasks[3].cancel()
            tasks[7].cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            # The next answers are this call's own, not a cancelled call's late reply.
            after = await storage.acquire(Debit("c3", 1, [QUOTA], T0))
            return results, after.remaining
        finally:
            await storage.close()

    results, after = AsyncRunner(redis_server.async_client)(body)
    assert isinstance(results[3], asyncio.CancelledError)
    assert isinstance(results[7], asyncio.CancelledError)
    assert [r.remaining for i, r in enumerate(results) if i not in (3, 7)] == [8] * 8
    # The cancelled debit of c3 may or may not have been made (it was sent): 7 or 9 left.
    assert after in (7, 9)


def test_a_flood_beyond_the_queue_bound_fails_fast_instead_of_queueing(
    redis_server: RedisServer,
) -> None:
    async def body(client: Any) -> list[Any]:
        storage = AsyncRedisStorage(client, timeout=5.0, pipeline_queue_max=10)
        try:
            return await asyncio.gather(
                *(storage.acquire(Debit(f"f{i}", 1, [QUOTA], T0)) for i in range(CALLERS)),
                return_exceptions=True,
            )
        finally:
            await storage.close()

    results = AsyncRunner(redis_server.async_client)(body)
    answered = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, StorageError)]
    assert len(answered) == 10
    assert len(refused) == CALLERS - 10
    assert "already waiting" in str(refused[0])


def test_an_error_reply_fails_only_its_own_call(redis_server: RedisServer) -> None:
    async def body(client: Any) -> list[Any]:
        storage = AsyncRedisStorage(client, timeout=5.0)
        try:
            script = storage.script_for([QUOTA])
            bad = storage.evaluate(script, ["k"], ["acquire", "1", "", "leaky 1 1 0 1 f"])
            good = [storage.acquire(Debit(f"e{i}", 1, [QUOTA], T0)) for i in range(4)]
            return await asyncio.gather(bad, *good, return_exceptions=True)
        finally:
            await storage.close()

    bad, *good = AsyncRunner(redis_server.async_client)(body)
    assert isinstance(bad, StorageError)
    assert "unknown algorithm leaky" in str(bad)
    assert [decision.remaining for decision in good] == [9, 9, 9, 9]


def test_a_closed_storage_refuses_new_calls(redis_server: RedisServer) -> None:
    async def body(client: Any) -> None:
        storage = AsyncRedisStorage(client, timeout=5.0)
        await storage.acquire(Debit("x", 1, [QUOTA], T0))
        await storage.close()
        with pytest.raises(StorageError, match="closed"):
            await storage.acquire(Debit("x", 1, [QUOTA], T0))

    AsyncRunner(redis_server.async_client)(body)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("pipeline", 1),
        ("pipeline_limit", 0),
        ("pipeline_limit", True),
        ("pipeline_connections", 0),
        ("pipeline_queue_max", -5),
        ("pipeline_queue_max", 2.5),
    ],
)
def test_bad_pipeline_options_are_refused(
    redis_server: RedisServer, option: str, value: object
) -> None:
    async def body(client: Any) -> None:
        with pytest.raises(ValueError, match=option):
            AsyncRedisStorage(client, **{option: value})

    AsyncRunner(redis_server.async_client)(body)


def test_a_cluster_client_is_pipelined_unless_asked_not_to(
    cluster_client: Any, redis_cluster: Any
) -> None:
    # Issue 26: a cluster's calls are pipelined per master (tests/storage/test_cluster_pipeline.py).
    async def body(client: Any, pipeline: bool) -> tuple[bool, float]:
        storage = AsyncRedisStorage(client, timeout=5.0, pipeline=pipeline)
        try:
            decision = await storage.acquire(Debit(f"cl{pipeline}", 1, [QUOTA], T0))
            return storage.pipelined, decision.remaining
        finally:
            await storage.close()

    runner = AsyncRunner(redis_cluster.async_client)
    assert runner(lambda client: body(client, True)) == (True, 9)
    assert runner(lambda client: body(client, False)) == (False, 9)
