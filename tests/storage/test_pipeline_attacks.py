"""Attacks on issue 13's async pipeline and Redis replies: event loops that come and go, a
shutdown during a ``NOSCRIPT`` retry, clients that decode replies.
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import (
    AsyncRedisStorage,
    MemoryStorage,
    Quota,
    RedisStorage,
)
from quotaql.errors import StorageError
from quotaql.storage import Debit
from tests.storage.test_pipeline import acquire_while_paused
from tests.support.servers import AsyncRunner

if TYPE_CHECKING:
    from tests.support.servers import RedisServer

T0 = 1_700_000_000_000
SLOW = Quota("tenant", capacity=100, refill_per_second=0.001)


# -- event loops that come and go ---------------------------------------------------------


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_storage_used_from_many_event_loops_keeps_nothing_of_the_closed_ones(
    fresh_redis_server: RedisServer,
) -> None:
    """A storage used from one short-lived loop after another (``asyncio.run`` per job,
    asgiref's async_to_sync) kept every loop's pipeline, and with it a connection to Redis
    each: connections and memory grew with every loop, without bound."""
    client = fresh_redis_server.async_client()
    storage = AsyncRedisStorage(client, timeout=5.0)
    loops = 30
    for _ in range(loops):
        decision = asyncio.run(storage.acquire(Debit("acme", 1, [SLOW])))
        assert decision.allowed
    kept = len(storage._pipelines)
    deadline = time.monotonic() + 2  # Redis lets go of a connection once it reads its end
    while True:
        clients = int(str(fresh_redis_server.info("clients")["connected_clients"]))
        if clients <= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.02)

    async def close(storage: AsyncRedisStorage, client: Any) -> None:
        await storage.close()
        await client.aclose()

    asyncio.run(close(storage, client))
    del storage, client
    gc.collect()  # the dead loops' connections, under this test's warning filters
    assert kept <= 2
    # The INFO client itself, the last loop's connection: never one per loop.
    assert clients <= 3


def test_a_call_retried_after_noscript_while_the_storage_closes_fails_instead_of_hanging(
    fresh_redis_server: RedisServer,
) -> None:
    """A ``NOSCRIPT`` reply queues its call again, behind the script's load. When the storage
    was closed meanwhile (a shutdown while Redis had just restarted), nothing flushed the
    queue again and nothing failed it: the caller waited forever (its batch's deadline was
    over), and a shutdown awaiting it hung."""

    async def body(client: Any) -> BaseException | None:
        storage = AsyncRedisStorage(client, timeout=5.0, pipeline_connections=1)
        await storage.acquire(Debit("acme", 1, [SLOW]))  # its connection is made, its script known
        await client.script_flush()
        pipeline = storage.pipeline
        assert pipeline is not None
        await asyncio.to_thread(fresh_redis_server.pause)
        try:
            call = asyncio.ensure_future(storage.acquire(Debit("acme", 1, [SLOW])))
            deadline = time.monotonic() + 5
            while not pipeline._busy:  # sent, waiting for the paused server's NOSCRIPT
                assert time.monotonic() < deadline, "the call was never sent"
                await asyncio.sleep(0.001)
            await storage.close()
        finally:
            await asyncio.to_thread(fresh_redis_server.resume)
        try:
            await asyncio.wait_for(call, timeout=2)
        except TimeoutError as exc:
            return exc
        except Exception as exc:  # what it failed with is the answer
            return exc
        return None

    outcome = AsyncRunner(fresh_redis_server.async_client)(body)
    assert not isinstance(outcome, TimeoutError), "the caller hung"
    assert isinstance(outcome, StorageError)


# -- clients that decode replies --------------------------------------------------------------

MIXED = (
    Quota("a", capacity=10, refill_per_second=2),
    Quota("b", limit=12, window_seconds=3, algorithm="sliding_log"),
    Quota("c", capacity=5, refill_per_second=1, algorithm="gcra", max_delay=3, max_queued=2),
    Quota("d", limit=9, window_seconds=2, algorithm="sliding_counter").scoped("bob"),
)


def _script_calls(storage: Any) -> list[Any]:
    """Every mode of the script (acquire, peek, refund, charge) on one storage, with
    explicit times, over one quota and over two hashes, a sliding log and a line at once."""
    seen: list[Any] = []
    for quotas in ([MIXED[0]], list(MIXED)):
        seen.extend(storage.acquire(Debit("acme", 3, quotas, now=T0 + step)) for step in range(4))
        storage.refund(Debit("acme", 2, quotas, now=T0 + 5, at=T0))
        storage.charge(Debit("acme", 1, quotas, now=T0 + 6))
        seen.append(storage.peek("acme", quotas, now=T0 + 7))
    return [decision._replace(source="-") for decision in seen]


def _lease_calls(storage: RedisStorage) -> list[Any]:
    from quotaql.storage.leases import LeaseSpec, RedisLeases

    leases = RedisLeases(storage)
    spec = LeaseSpec("tier", 1)
    return [
        tuple(leases.take("acme", [spec], "l1", 5_000, now=T0)),
        tuple(leases.take("acme", [spec], "l2", 5_000, now=T0)),
        leases.count("acme", "tier", now=T0),
        leases.renew("acme", ["tier"], ["l1"], 5_000, now=T0 + 1),
        leases.release("acme", ["tier"], "l1", now=T0 + 2),
    ]


def test_a_client_that_decodes_replies_gets_the_same_answers(redis_server: RedisServer) -> None:
    """The storage copies the application's client settings, ``decode_responses=True``
    included (str replies instead of bytes): every mode and the leases still parse, and
    the answers are the memory storage's."""
    answers = []
    for decode in (False, True):
        with redis_server.client(decode_responses=decode) as client:
            client.flushall()
            client.script_flush()  # NOSCRIPT first: the sha read back as the client decodes
            storage = RedisStorage(client, timeout=5.0)
            try:
                answers.append((_script_calls(storage), _lease_calls(storage)))
            finally:
                storage.close()

    async def decoded(client: Any) -> list[Any]:
        await client.flushall()
        await client.script_flush()  # the pipeline loads the script (a str sha) first
        storage = AsyncRedisStorage(client, timeout=5.0)
        try:
            seen = []
            for quotas in ([MIXED[0]], list(MIXED)):
                seen.extend(
                    [await storage.acquire(Debit("acme", 3, quotas, now=T0 + s)) for s in range(4)]
                )
                await storage.refund(Debit("acme", 2, quotas, now=T0 + 5, at=T0))
                await storage.charge(Debit("acme", 1, quotas, now=T0 + 6))
                seen.append(await storage.peek("acme", quotas, now=T0 + 7))
            return [decision._replace(source="-") for decision in seen]
        finally:
            await storage.close()

    pipelined = AsyncRunner(redis_server.async_client)(decoded, decode_responses=True)
    reference = _script_calls(MemoryStorage(clock=lambda: T0 / 1000))
    assert answers[0] == answers[1]
    assert answers[0][0] == reference == pipelined
    assert any(not decision.allowed for decision in reference)  # it did limit
    assert answers[0][1][1][0] is False  # the second lease was refused


def test_calls_queued_behind_a_batch_that_timed_out_fail_with_it(
    fresh_redis_server: RedisServer,
) -> None:
    """One deadline bounds each batch, not each call: with Redis silent, the calls queued
    behind a batch went out batch after batch, each waiting a timeout more (and each landing
    on Redis once it resumed, debits their callers were already answered without): a caller
    deep in the queue waited twenty timeouts here. They fail with the batch ahead, unsent."""
    timeout = 0.05

    async def body(client: Any) -> tuple[float, list[Any], float]:
        storage = AsyncRedisStorage(
            client, timeout=timeout, pipeline_connections=1, pipeline_limit=1
        )
        try:
            await storage.acquire(Debit("warm", 1, [SLOW]))
            results, took = await acquire_while_paused(storage, fresh_redis_server, 20, SLOW, None)
            again = await storage.acquire(Debit("after", 1, [SLOW]))
            return took, results, again.remaining
        finally:
            await storage.close()

    took, results, remaining = AsyncRunner(fresh_redis_server.async_client)(body)
    assert all(isinstance(result, StorageError) for result in results), results[:3]
    assert took < timeout * 4
    assert remaining == pytest.approx(99, abs=0.01)


def test_a_caller_cancelled_while_its_call_waits_for_a_noscript_retry_leaves_all_in_step(
    fresh_redis_server: RedisServer,
) -> None:
    """Calls that met ``NOSCRIPT`` are queued again behind the script's load; a caller that
    stops waiting meanwhile is skipped (its call never sent twice, never answered with
    another's reply), and every other caller gets its own answer."""

    async def body(client: Any) -> tuple[list[Any], float]:
        storage = AsyncRedisStorage(client, timeout=5.0, pipeline_connections=1)
        try:
            await storage.acquire(Debit("warm", 1, [SLOW]))
            await client.script_flush()
            pipeline = storage.pipeline
            assert pipeline is not None
            await asyncio.to_thread(fresh_redis_server.pause)
            try:
                calls = [
                    asyncio.ensure_future(storage.acquire(Debit(f"c{i}", 1 + i, [SLOW])))
                    for i in range(5)
                ]
                deadline = time.monotonic() + 5
                while not pipeline._busy:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.001)
                calls[2].cancel()
            finally:
                await asyncio.to_thread(fresh_redis_server.resume)
            results = await asyncio.gather(*calls, return_exceptions=True)
            after = await storage.acquire(Debit("c2", 1, [SLOW]))
            return results, after.remaining
        finally:
            await storage.close()

    results, after = AsyncRunner(fresh_redis_server.async_client)(body)
    assert isinstance(results[2], asyncio.CancelledError)
    assert [r.remaining for i, r in enumerate(results) if i != 2] == pytest.approx(
        [99, 98, 96, 95], abs=0.01
    )
    assert after == pytest.approx(99, abs=0.01)  # c2's cancelled call was never run
