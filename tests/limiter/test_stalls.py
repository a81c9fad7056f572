"""Worker stalls are not outages: a blocked event loop (or a thread holding the GIL) while
Redis is healthy counts no failure and sends no decision to the fail mode, and a real
outage behind a stalling loop still fails in bounded time.

The stalls are real (``time.sleep`` on the event loop, a thread spinning with the GIL), and
so is Redis: private ``redis-server`` processes, paused with SIGSTOP for the outages. Every
loop is bounded in count and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from typing import TYPE_CHECKING

import pytest

from quotaql import AsyncLimiter, AsyncRedisStorage, CircuitBreaker, Quota, RedisStorage
from quotaql.errors import StorageTimeout
from quotaql.storage import Debit
from quotaql.storage.redis import MAX_STALL_EXTENSIONS, _Deadline
from tests.limiter.test_limiter import CollectingRecorder
from tests.limiter.test_outage import run_bounded

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    import redis

    from quotaql.limiter import BackendErrorMode
    from quotaql.policy.quota import Decision
    from tests.support.servers import RedisServer

# Redis's per-call timeout in these tests: small enough that the stalls below are well past
# it, large enough that a healthy loopback Redis on a loaded 2-core machine meets it.
TIMEOUT = 0.1
QUOTA = Quota("tenant", capacity=1_000_000, refill_per_second=1_000)
KEY = "acme"


def async_limiter(
    server: RedisServer, recorder: CollectingRecorder, mode: BackendErrorMode = "local"
) -> AsyncLimiter:
    """An AsyncLimiter on ``server`` with :data:`TIMEOUT`; make it inside its event loop."""
    storage = AsyncRedisStorage(server.async_client(), timeout=TIMEOUT)
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=5.0)
    return AsyncLimiter(storage, on_backend_error=mode, breaker=breaker, recorder=recorder)


async def block_loop(seconds: float) -> None:
    """Block the event loop for ``seconds`` at this task's first step (no await before)."""
    time.sleep(seconds)


def connections_received(admin: redis.Redis) -> int:
    """How many connections the server has accepted (``admin``'s own is open already)."""
    return int(admin.info("stats")["total_connections_received"])


# -- one long stall ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["local", "open"])
def test_a_two_second_loop_stall_while_redis_is_healthy_is_not_a_backend_failure(
    redis_server: RedisServer, redis_client: redis.Redis, mode: BackendErrorMode
) -> None:
    recorder = CollectingRecorder()

    async def main() -> tuple[Decision, float, int]:
        limiter = async_limiter(redis_server, recorder, mode)
        try:
            assert (await limiter.acquire(KEY, 1, [QUOTA])).source == "redis"  # connected
            before = connections_received(redis_client)
            # Its first step runs right after the acquire below has sent its command:
            # Redis answers at once, into a loop that is blocked for 2 s.
            stall = asyncio.create_task(block_loop(2.0))
            started = time.monotonic()
            decision = await limiter.acquire(KEY, 1, [QUOTA])
            waited = time.monotonic() - started
            await stall
            after = await limiter.acquire(KEY, 1, [QUOTA])
            assert after.source == "redis"
            return decision, waited, connections_received(redis_client) - before
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]

    decision = waited = reconnects = None

    async def run() -> None:
        nonlocal decision, waited, reconnects
        decision, waited, reconnects = await main()

    run_bounded(run)
    assert waited is not None
    assert waited >= 1.9  # the stall happened while the call was in flight
    assert decision is not None
    assert decision.source == "redis"
    assert decision.allowed
    assert recorder.errors == []
    assert recorder.circuits == []
    assert reconnects == 0  # the read was never cancelled, so the connection was kept


# -- repeated stalls a little longer than the timeout ------------------------------------------


def test_repeated_stalls_of_one_and_a_half_timeouts_count_no_failure(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    recorder = CollectingRecorder()
    stall = 1.5 * TIMEOUT
    stalls = 6

    async def main() -> tuple[list[Decision], int]:
        limiter = async_limiter(redis_server, recorder)
        done = asyncio.Event()
        stalled = 0

        async def staller() -> None:
            nonlocal stalled
            try:
                for _ in range(stalls):
                    time.sleep(stall)  # the loop is blocked, again and again
                    stalled += 1
                    await asyncio.sleep(0)
            finally:
                done.set()

        decisions: list[Decision] = []

        async def worker() -> None:
            for _ in range(1_000):  # bounded; the staller ends it long before
                if done.is_set():
                    return
                decisions.append(await limiter.acquire(KEY, 1, [QUOTA]))

        try:
            assert (await limiter.acquire(KEY, 1, [QUOTA])).source == "redis"
            await asyncio.gather(staller(), worker(), worker())
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]
        return decisions, stalled

    result: list[tuple[list[Decision], int]] = []

    async def run() -> None:
        result.append(await main())

    run_bounded(run)
    decisions, stalled = result[0]
    assert stalled == stalls
    assert len(decisions) >= 2  # calls were in flight through the stalls (each met some)
    assert {decision.source for decision in decisions} == {"redis"}
    assert recorder.errors == []
    assert recorder.circuits == []


# -- a real outage still fails, in bounded time ------------------------------------------------


def test_a_hung_redis_behind_a_stalling_loop_still_times_out_in_bounded_time(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    stall = 1.5 * TIMEOUT
    # A period is extended for a stall a bounded number of times, then it expires. With
    # stalls back to back, the timer of each runs after up to two of them (the staller's
    # next step is queued ahead of it), and the expiry and the task's wakeup after one each.
    bound = (1 + MAX_STALL_EXTENSIONS) * (TIMEOUT + 2 * stall) + 2 * stall + 0.5

    async def main() -> tuple[Decision, float]:
        limiter = async_limiter(server, recorder)
        stop = asyncio.Event()

        async def staller() -> None:
            deadline = time.monotonic() + 2 * bound
            while not stop.is_set() and time.monotonic() < deadline:
                time.sleep(stall)
                await asyncio.sleep(0)

        try:
            assert (await limiter.acquire(KEY, 1, [QUOTA])).source == "redis"
            server.pause(10.0)  # resumes by itself should the test die first
            try:
                stalls = asyncio.create_task(staller())
                started = time.monotonic()
                decision = await limiter.acquire(KEY, 1, [QUOTA])
                waited = time.monotonic() - started
                stop.set()
                await stalls
            finally:
                server.resume()
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]
        assert limiter.breaker.is_open
        return decision, waited

    result: list[tuple[Decision, float]] = []

    async def run() -> None:
        result.append(await main())

    run_bounded(run)
    decision, waited = result[0]
    assert decision.source == "fallback"
    assert [type(error) for _, error in recorder.errors] == [StorageTimeout]
    assert recorder.circuits == [("redis", True)]
    assert TIMEOUT * 0.8 <= waited < bound


def test_a_hung_redis_behind_one_long_stall_fails_once_the_loop_is_back(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server

    async def main() -> tuple[BaseException | None, float]:
        storage = AsyncRedisStorage(server.async_client(), timeout=TIMEOUT)
        error: BaseException | None = None
        try:
            await storage.acquire(Debit(KEY, 1, [QUOTA]))
            server.pause(10.0)
            try:
                stall = asyncio.create_task(block_loop(1.0))
                started = time.monotonic()
                try:
                    await storage.acquire(Debit(KEY, 1, [QUOTA]))
                except StorageTimeout as exc:
                    error = exc
                waited = time.monotonic() - started
                await stall
            finally:
                server.resume()
        finally:
            await storage.close()
        return error, waited

    result: list[tuple[BaseException | None, float]] = []

    async def run() -> None:
        result.append(await main())

    run_bounded(run)
    error, waited = result[0]
    assert isinstance(error, StorageTimeout)
    # The stall, then one fresh period for the reply that never came.
    assert 1.0 + TIMEOUT * 0.8 <= waited < 1.0 + 2 * TIMEOUT + 0.5


# -- the deadline's own mechanics --------------------------------------------------------------


async def _race(guard: Callable[[Awaitable[str]], Awaitable[str]]) -> str:
    """A reply and the deadline, both due in the loop iteration after a stall.

    The reply's callback runs first in that iteration (as the socket's read does after a
    stall) and schedules the waiting task; the deadline's timer runs right after it.
    """
    loop = asyncio.get_running_loop()
    reply: asyncio.Future[str] = loop.create_future()
    start = loop.time()
    loop.call_at(start + 0.04, reply.set_result, "reply")
    loop.call_soon(time.sleep, 0.2)  # both timers are overdue when the loop is back
    return await guard(reply)


async def _with_asyncio_timeout(reply: Awaitable[str]) -> str:
    async with asyncio.timeout(0.05):
        return await reply


async def _with_deadline(reply: Awaitable[str]) -> str:
    """What AsyncRedisStorage._call does around its awaits, with an unreachable tolerance:
    the deadline counts as on time, so only its deferred cancel is at work."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    deadline = _Deadline(loop, task, 0.05, tolerance=60.0)
    try:
        return await reply
    except asyncio.CancelledError:
        if deadline.expired and deadline.withdraw():
            raise TimeoutError from None
        raise
    finally:
        deadline.disarm()


def test_a_reply_read_in_the_deadlines_own_iteration_wins_over_it() -> None:
    # asyncio.timeout loses this race: its timer cancels a task whose reply is in.
    with pytest.raises(TimeoutError):
        asyncio.run(_race(_with_asyncio_timeout))

    assert asyncio.run(_race(_with_deadline)) == "reply"


def test_a_cancel_from_elsewhere_is_a_cancel_not_a_timeout(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server

    async def main() -> tuple[bool, int]:
        storage = AsyncRedisStorage(server.async_client(), timeout=TIMEOUT)
        try:
            await storage.acquire(Debit(KEY, 1, [QUOTA]))
            server.pause(10.0)
            try:
                call = asyncio.create_task(storage.acquire(Debit(KEY, 1, [QUOTA])))
                await asyncio.sleep(TIMEOUT / 4)
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call
                cancelled = call.cancelled()
                # A timeout the storage raises leaves no cancel request behind it.
                with contextlib.suppress(StorageTimeout):
                    await storage.acquire(Debit(KEY, 1, [QUOTA]))
                task = asyncio.current_task()
                assert task is not None
                pending = task.cancelling()
            finally:
                server.resume()
        finally:
            await storage.close()
        return cancelled, pending

    result: list[tuple[bool, int]] = []

    async def run() -> None:
        result.append(await main())

    run_bounded(run)
    assert result == [(True, 0)]


def test_an_outer_timeout_shorter_than_the_storages_is_the_callers_timeout(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server

    async def main() -> BaseException | None:
        storage = AsyncRedisStorage(server.async_client(), timeout=1.0)
        try:
            await storage.acquire(Debit(KEY, 1, [QUOTA]))
            server.pause(10.0)
            try:
                async with asyncio.timeout(TIMEOUT):
                    await storage.acquire(Debit(KEY, 1, [QUOTA]))
            except TimeoutError as exc:
                return exc
            finally:
                server.resume()
        finally:
            await storage.close()
        return None

    result: list[BaseException | None] = []

    async def run() -> None:
        result.append(await main())

    run_bounded(run)
    assert type(result[0]) is TimeoutError  # the caller's, not a StorageTimeout


# -- the sync storage --------------------------------------------------------------------------


def test_a_thread_holding_the_gil_past_the_timeout_is_no_timeout_for_the_sync_storage(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    # RedisStorage's timeouts are socket timeouts: poll() in the kernel, GIL released, and
    # a reply that arrived is reported ready however late the thread gets the GIL back
    # (see RedisStorage). This guards that: a thread spinning with the GIL for 20 timeouts
    # while a call is in flight.
    with redis_server.client() as client:
        storage = RedisStorage(client, timeout=0.05)
    hold = 1.0
    go = threading.Event()
    spun: list[float] = []

    def hog() -> None:
        go.wait(timeout=10)
        started = time.monotonic()
        while time.monotonic() - started < hold:  # pure Python: keeps the GIL
            pass
        spun.append(time.monotonic() - started)

    previous = sys.getswitchinterval()
    thread = threading.Thread(target=hog, daemon=True)
    try:
        storage.acquire(Debit(KEY, 1, [QUOTA]))  # connected
        # Nobody takes the GIL from its holder for 30 s: the hog keeps it once it has it.
        sys.setswitchinterval(30.0)
        thread.start()
        go.set()
        started = time.monotonic()
        decision = storage.acquire(Debit(KEY, 1, [QUOTA]))  # the hog takes the GIL at its I/O
        waited = time.monotonic() - started
    finally:
        sys.setswitchinterval(previous)
        go.set()
        thread.join(timeout=10)
        storage.close()

    assert spun
    assert spun[0] >= hold
    assert waited >= hold * 0.9  # the call waited for the GIL for the whole hold
    assert decision.source == "redis"
    assert decision.allowed
