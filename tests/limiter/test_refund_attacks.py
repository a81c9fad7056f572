"""Attacks on issue 13's deferred refunds: a refund in two calls, a loop that shuts down,
a fallback debit, a peek during an outage.

Against real private redis-servers (pauses are SIGSTOPs, kills are SIGKILLs).
"""

from __future__ import annotations

import asyncio
import gc
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import (
    AsyncLimiter,
    AsyncRedisStorage,
    CircuitBreaker,
    Limiter,
    MemoryStorage,
    Quota,
    RedisStorage,
)
from tests.limiter.test_refunds import Refunds
from tests.support.servers import AsyncRunner

if TYPE_CHECKING:
    from tests.support.servers import RedisServer

T0 = 1_700_000_000_000
OWN = Quota("tenant", capacity=100, refill_per_second=0.001)
PLATFORM = Quota("platform", capacity=1000, refill_per_second=0.001, shared=True)
SLOW = Quota("tenant", capacity=100, refill_per_second=0.001)


# -- a refund in two calls (the tenant's quotas, then the shared ones) ------------------------


def test_a_refund_whose_shared_call_is_not_reached_gives_the_tenant_its_part_once(
    fresh_redis_server: RedisServer,
) -> None:
    """A refund of own and shared quotas is two calls. When the first (the tenant's) was
    applied and the second could not be sent (the pipeline's queue full under load, a
    connection that cannot be made), the refund was queued again whole: the tenant's quotas
    got the refund once more at every retry (up to ``refund_max_age`` of retries), a budget
    it never paid for. Only the part not applied may be tried again."""
    recorder = Refunds()

    async def body(client: Any) -> tuple[float, float, int]:
        # One connection, one waiting call at most: a call made while another waits behind
        # the batch in flight is not reached (StorageNotReached), as under a flood.
        storage = AsyncRedisStorage(
            client, timeout=5.0, pipeline_connections=1, pipeline_queue_max=1
        )
        breaker = CircuitBreaker(failure_threshold=100, reset_timeout=0.1)
        limiter = AsyncLimiter(storage, breaker=breaker, recorder=recorder)
        try:
            spent = await limiter.acquire("acme", 80, [OWN, PLATFORM])
            assert spent.allowed
            pipeline = storage.pipeline
            assert pipeline is not None
            await asyncio.to_thread(fresh_redis_server.pause)
            try:
                await limiter.refund("acme", 30, [OWN, PLATFORM], decision=spent)
                # The tenant's part goes out and waits for the paused server's reply...
                deadline = time.monotonic() + 5
                while not (pipeline._busy and not pipeline._queue):
                    assert time.monotonic() < deadline, "the refund was never sent"
                    await asyncio.sleep(0.001)
                # ...while another request's call waits behind it: the queue is full when
                # the shared part comes next.
                other = asyncio.ensure_future(storage.peek("other", [OWN]))
                while not pipeline._queue:
                    assert time.monotonic() < deadline, "the other call was never queued"
                    await asyncio.sleep(0)
            finally:
                await asyncio.to_thread(fresh_redis_server.resume)
            await other
            assert await limiter.flush(timeout=5) == 0
            own = (await limiter.peek("acme", [OWN])).remaining
            shared = (await limiter.peek("acme", [PLATFORM])).remaining
            return own, shared, limiter.refund_queue.unknown  # type: ignore[union-attr]
        finally:
            await storage.close()

    own, shared, unknown = AsyncRunner(fresh_redis_server.async_client)(body)
    # 20 left + 30 back, once; the shared quota gets its 30 too (its part was retried).
    assert own == pytest.approx(50, abs=0.01)
    assert shared == pytest.approx(950, abs=0.01)
    assert unknown == 0
    assert recorder.total("applied") == (1, 30.0)


# -- a peek while Redis is down ---------------------------------------------------------------


def test_a_peek_during_an_outage_does_not_wait_for_refunds_that_cannot_be_sent(
    fresh_redis_server: RedisServer,
) -> None:
    """A peek first applies the refunds queued before it. With the breaker open they cannot
    be sent, and the peek retried them for a second before it answered (from the fail mode,
    which reads none of them anyway): a client calling a quota-status endpoint in a loop
    held a worker thread a second per call for the whole outage."""
    with fresh_redis_server.client() as client:
        storage = RedisStorage(client, timeout=0.1)
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=30)
    limiter = Limiter(storage, breaker=breaker)
    try:
        spent = limiter.acquire("acme", 50, [SLOW])
        fresh_redis_server.pause()
        try:
            assert limiter.acquire("opener", 1, [SLOW]).source == "fallback"  # it opens
            limiter.refund("acme", 30, [SLOW], decision=spent)
            started = time.monotonic()
            peeked = limiter.peek("acme", [SLOW])
            took = time.monotonic() - started
        finally:
            fresh_redis_server.resume()
        assert peeked.source == "fallback"
        assert took < 0.3
        assert limiter.refund_queue is not None
        assert limiter.refund_queue.pending  # still queued: applied once Redis is back
    finally:
        storage.close()


def test_an_async_peek_during_an_outage_does_not_wait_for_refunds_that_cannot_be_sent(
    fresh_redis_server: RedisServer,
) -> None:
    async def body(client: Any) -> tuple[float, str, bool]:
        storage = AsyncRedisStorage(client, timeout=0.1)
        # Connected and the script loaded first, which a busy machine may not do within one
        # timeout (this test's breaker opens at the first failure).
        warming = AsyncLimiter(storage, breaker=CircuitBreaker(failure_threshold=1000))
        for _ in range(5):
            if (await warming.acquire("warm", 1, [SLOW])).source == "redis":
                break
        breaker = CircuitBreaker(failure_threshold=1, reset_timeout=30)
        limiter = AsyncLimiter(storage, breaker=breaker)
        try:
            spent = await limiter.acquire("acme", 50, [SLOW])
            assert spent.source == "redis"
            await asyncio.to_thread(fresh_redis_server.pause)
            try:
                assert (await limiter.acquire("opener", 1, [SLOW])).source == "fallback"
                await limiter.refund("acme", 30, [SLOW], decision=spent)
                await asyncio.sleep(0.02)  # the refund task met the open breaker
                started = time.monotonic()
                peeked = await limiter.peek("acme", [SLOW])
                took = time.monotonic() - started
            finally:
                await asyncio.to_thread(fresh_redis_server.resume)
            queue = limiter.refund_queue
            assert queue is not None
            return took, peeked.source, queue.pending
        finally:
            await storage.close()

    took, source, pending = AsyncRunner(fresh_redis_server.async_client)(body)
    assert source == "fallback"
    assert took < 0.3
    assert pending


def test_refunds_in_flight_when_their_loop_shuts_down_are_counted_not_vanished(
    fresh_redis_server: RedisServer,
) -> None:
    """A loop that ends (``asyncio.run`` returning, a worker's shutdown) cancels the refund
    task. The refunds it had taken were neither put back nor counted: lost without a trace
    in ``refunds_lost``/``unknown``. Sent, they may have been applied: counted unknown."""
    recorder = Refunds()
    limiters: list[AsyncLimiter] = []

    async def body(client: Any) -> None:
        storage = AsyncRedisStorage(client, timeout=5.0)
        limiter = AsyncLimiter(storage, recorder=recorder)
        limiters.append(limiter)
        spent = await limiter.acquire("acme", 50, [SLOW])
        await asyncio.to_thread(fresh_redis_server.pause)
        await limiter.refund("acme", 30, [SLOW], decision=spent)
        await asyncio.sleep(0.05)  # taken and sent: waiting for the paused server
        await storage.close()
        # The loop ends here: asyncio.run cancels the refund task.

    try:
        AsyncRunner(fresh_redis_server.async_client)(body)
    finally:
        fresh_redis_server.resume()
    queue = limiters[0].refund_queue
    assert queue is not None
    assert not queue.pending
    assert (queue.unknown, queue.unknown_cost) == (1, 30.0)
    assert recorder.total("unknown") == (1, 30.0)


def test_a_refund_of_a_fallback_debit_gives_the_shared_quotas_theirs(
    fresh_redis_server: RedisServer,
) -> None:
    """During an outage the fallback debits shared quotas in the shared scope; the refund
    of such a decision went to the fallback with the tenant's key for every quota, so the
    shared quotas' part landed on no state at all and was lost without a count."""
    with fresh_redis_server.client() as client:
        storage = RedisStorage(client, timeout=0.1)
    limiter = Limiter(
        storage, breaker=CircuitBreaker(failure_threshold=1, reset_timeout=30), local_share=1.0
    )
    try:
        fresh_redis_server.kill()
        spent = limiter.acquire("acme", 50, [OWN, PLATFORM])
        assert (spent.allowed, spent.source) == (True, "fallback")
        limiter.refund("acme", 30, [OWN, PLATFORM], decision=spent)
        assert limiter.peek("acme", [OWN]).remaining == pytest.approx(80, abs=0.01)
        assert limiter.peek("acme", [PLATFORM]).remaining == pytest.approx(980, abs=0.01)
    finally:
        storage.close()


def test_a_flush_keeps_to_its_timeout_whatever_the_backlog(redis_server: RedisServer) -> None:
    """A flush took the whole queue and applied it, one round trip per refund, before it
    looked at its timeout again: a backlog (refunds queued through an outage, up to
    ``refund_queue_size``) held a peek (1 s) or the process exit (0.5 s) for as many round
    trips, seconds against a slow Redis. What it has no time for stays queued."""
    with redis_server.client() as client:
        storage = RedisStorage(client, timeout=1.0)
    limiter = Limiter(storage)
    try:
        queue = limiter.refund_queue
        assert queue is not None
        backlog = queue.max_entries  # the most an outage leaves (refund_queue_size)
        for i in range(backlog):  # queued as an outage leaves them (no refund thread yet)
            queue.add(f"t{i}", (SLOW,), (1.0,), at=None)
        started = time.monotonic()
        left = limiter.flush(timeout=0.05)
        took = time.monotonic() - started
        assert 0 < left < backlog  # some applied, the rest still queued (not lost)
        assert (queue.lost, queue.unknown) == (0, 0)
        started = time.monotonic()
        assert limiter.flush(timeout=60) == 0
        whole = time.monotonic() - started
        # Against the same Redis in the same moment (a busy machine slows both): the flush
        # that had 50 ms left the backlog after a small part of the time applying it takes.
        assert took < whole / 4, (took, whole, left)
    finally:
        storage.close()


@pytest.mark.filterwarnings("ignore::ResourceWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_refunds_on_a_new_loop_are_applied_after_a_loop_closed_without_cancelling(
    fresh_redis_server: RedisServer,
) -> None:
    """The refund task is the limiter's: one made on a loop closed without cancelling its
    tasks (``run_until_complete`` then ``close()``, as sync wrappers do) never ends, and
    every later loop saw it "running" and started none of its own: their refunds stayed
    queued until something flushed them (a peek, the exit)."""
    client = fresh_redis_server.async_client()
    storage = AsyncRedisStorage(client, timeout=5.0)
    limiter = AsyncLimiter(storage)
    first = asyncio.new_event_loop()
    spent = first.run_until_complete(limiter.acquire("acme", 50, [SLOW]))
    first.run_until_complete(limiter.refund("acme", 10, [SLOW], decision=spent))
    first.close()  # its refund task is left pending for good

    async def later(limiter: AsyncLimiter, storage: AsyncRedisStorage, client: Any) -> int:
        spent = await limiter.acquire("other", 50, [SLOW])
        await limiter.refund("other", 30, [SLOW], decision=spent)
        queue = limiter.refund_queue
        assert queue is not None
        deadline = time.monotonic() + 5
        while len(queue) and time.monotonic() < deadline:  # no peek, no flush: the task's
            await asyncio.sleep(0.01)
        left = len(queue)
        await storage.close()
        await client.aclose()
        return left

    assert asyncio.run(later(limiter, storage, client)) == 0
    with fresh_redis_server.client() as direct_client:
        direct = RedisStorage(direct_client, timeout=5.0)
        try:
            assert direct.peek("other", [SLOW]).remaining == pytest.approx(80, abs=0.01)
        finally:
            direct.close()
    del limiter, storage, client, first
    gc.collect()  # the closed loop's task and connections, under this test's filters


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_a_refund_of_a_refused_decision_gives_nothing_back(
    kind: str, redis_server: RedisServer
) -> None:
    """``decision`` names the debit a refund gives back; a refusal made none. Refunding
    one (a caller that refunds every operation it settles, the refused ones too) handed
    the tenant budget it never paid: a client could refill its bucket by sending requests
    it knew would be refused."""
    if kind == "memory":
        limiter = Limiter(MemoryStorage())
    else:
        with redis_server.client() as client:
            client.flushall()
            limiter = Limiter(RedisStorage(client, timeout=5.0))
    try:
        assert limiter.acquire("acme", 90, [SLOW]).allowed
        refused = limiter.acquire("acme", 50, [SLOW])
        assert not refused.allowed
        limiter.refund("acme", 50, [SLOW], decision=refused)
        assert limiter.peek("acme", [SLOW]).remaining == pytest.approx(10, abs=0.01)
    finally:
        close = getattr(limiter.storage, "close", None)
        if close is not None:
            close()
