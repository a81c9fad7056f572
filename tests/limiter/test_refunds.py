"""Refunds off the response path (quotaql.limiter.refunds): queued, coalesced, retried, counted.

Against real private redis-servers: pauses are SIGSTOPs, calls are counted by the server.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import AsyncLimiter, AsyncRedisStorage, CircuitBreaker, Limiter, Quota, RedisStorage
from quotaql.limiter.refunds import RefundQueue
from quotaql.storage import Debit
from tests.support.servers import AsyncRunner

if TYPE_CHECKING:
    import redis

    from tests.support.servers import RedisServer

T0 = 1_700_000_000_000
SLOW = Quota("tenant", capacity=100, refill_per_second=0.001)
WINDOW = Quota("daily", limit=100, window_seconds=1, algorithm="fixed_window")


class Refunds:
    """A recorder that keeps what the limiter says of its refunds."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, float]] = []

    def decision(self, decision: Any, seconds: float) -> None:
        pass

    def backend_error(self, backend: str, error: BaseException) -> None:
        pass

    def circuit(self, backend: str, is_open: bool) -> None:
        pass

    def refunds(self, outcome: str, count: int, cost: float) -> None:
        self.events.append((outcome, count, cost))

    def total(self, outcome: str) -> tuple[int, float]:
        chosen = [event for event in self.events if event[0] == outcome]
        return sum(e[1] for e in chosen), sum(e[2] for e in chosen)


def evalsha_calls(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0))


def sync_limiter(server: RedisServer, reset_timeout: float = 0.5, **kwargs: Any) -> Limiter:
    with server.client() as client:
        storage = RedisStorage(client, timeout=kwargs.pop("timeout", 1.0))
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=reset_timeout)
    return Limiter(storage, breaker=breaker, **kwargs)


# -- the queue itself ----------------------------------------------------------------------


def test_coalescing_adds_the_amounts_and_keeps_the_earliest_debit() -> None:
    queue = RefundQueue()
    queue.add("acme", (SLOW, WINDOW), (5.0, 0.0), at=2_000)
    queue.add("acme", (SLOW, WINDOW), (3.0, 1.0), at=1_000)
    queue.add("acme", (SLOW, WINDOW), (2.0, 2.0), at=None)
    queue.add("other", (SLOW,), (1.0,), at=None)
    [acme, other] = sorted(queue.take(), key=lambda refund: refund.key)
    assert (acme.amounts, acme.at, acme.merged) == ((10.0, 3.0), 1_000, 3)
    assert (other.amounts, other.at, other.merged) == ((1.0,), None, 1)
    assert (queue.queued, queue.coalesced, len(queue)) == (4, 2, 0)
    queue.done(2)
    assert not queue.pending


def test_a_full_queue_drops_and_counts_instead_of_growing() -> None:
    lost: list[tuple[int, float]] = []
    queue = RefundQueue(max_entries=3, on_dropped=lambda _, count, cost: lost.append((count, cost)))
    for i in range(10):
        queue.add(f"t{i}", (SLOW,), (float(i),), at=None)
    assert len(queue) == 3
    assert (queue.lost, queue.lost_cost) == (7, sum(range(3, 10)))
    assert sum(count for count, _ in lost) == 7


def test_refunds_older_than_max_age_are_lost_when_put_back() -> None:
    now = [0.0]
    queue = RefundQueue(max_age=10.0, clock=lambda: now[0])
    queue.add("acme", (SLOW,), (4.0,), at=None)
    now[0] = 5.0
    queue.put_back(queue.take())
    assert len(queue) == 1  # 5 s old: kept
    now[0] = 10.5
    queue.put_back(queue.take())
    assert len(queue) == 0
    assert (queue.lost, queue.lost_cost) == (1, 4.0)


@pytest.mark.parametrize(
    ("option", "value"), [("refund_max_age", 0), ("refund_queue_size", 0), ("defer_refunds", 1)]
)
def test_bad_refund_options_are_config_errors(option: str, value: object) -> None:
    from quotaql.errors import ConfigError

    with pytest.raises(ConfigError, match=option):
        Limiter(RedisStorage.from_url("redis://127.0.0.1:1"), **{option: value})


# -- sync: the refund thread ---------------------------------------------------------------


def test_a_refund_returns_at_once_and_is_applied_in_the_background(
    fresh_redis_server: RedisServer,
) -> None:
    limiter = sync_limiter(fresh_redis_server)
    try:
        decisions = [limiter.acquire("acme", 10, [SLOW]) for _ in range(5)]
        with fresh_redis_server.client() as client:
            client.config_resetstat()
            for decision in decisions:
                limiter.refund("acme", 8, [SLOW], decision=decision)
            deadline = time.monotonic() + 5
            while limiter.refund_queue is not None and limiter.refund_queue.pending:
                assert time.monotonic() < deadline
                time.sleep(0.005)
            calls = evalsha_calls(client)
        # 5 refunds queued at once: fewer calls than refunds (coalesced), all applied.
        assert 1 <= calls <= 5
        assert limiter.peek("acme", [SLOW]).remaining == pytest.approx(90, abs=0.01)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_refunds_queued_while_the_breaker_is_open_are_applied_after_the_outage(
    fresh_redis_server: RedisServer,
) -> None:
    recorder = Refunds()
    limiter = sync_limiter(fresh_redis_server, timeout=0.1, recorder=recorder)
    try:
        spent = limiter.acquire("acme", 50, [SLOW])
        fresh_redis_server.pause()
        try:
            # Another tenant's call times out and opens the breaker (Redis will still run it).
            assert limiter.acquire("opener", 1, [SLOW]).source == "fallback"
            started = time.monotonic()
            limiter.refund("acme", 30, [SLOW], decision=spent)
            assert time.monotonic() - started < 0.05  # the response did not wait for Redis
            time.sleep(0.15)  # the thread found the breaker open: nothing sent, still queued
            assert limiter.refund_queue is not None
            assert limiter.refund_queue.pending
        finally:
            fresh_redis_server.resume()
        assert limiter.flush(timeout=5) == 0
        assert limiter.peek("acme", [SLOW]).remaining == pytest.approx(80, abs=0.01)
        assert recorder.total("applied") == (1, 30.0)
        assert recorder.total("lost") == recorder.total("unknown") == (0, 0)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_a_refund_whose_call_timed_out_is_never_sent_again(fresh_redis_server: RedisServer) -> None:
    """A paused Redis still runs a call it received once it resumes: a refund resent after a
    timeout would be given back twice (the tenant would gain the refund a second time)."""
    recorder = Refunds()
    limiter = sync_limiter(fresh_redis_server, timeout=0.1, recorder=recorder)
    try:
        spent = limiter.acquire("acme", 50, [SLOW])
        fresh_redis_server.pause()
        try:
            limiter.refund("acme", 30, [SLOW], decision=spent)  # sent, then it times out
            deadline = time.monotonic() + 5
            while recorder.total("unknown")[0] == 0:
                assert time.monotonic() < deadline, "the timed-out refund was not counted"
                time.sleep(0.02)
        finally:
            fresh_redis_server.resume()
        limiter.flush(timeout=1)
        time.sleep(0.3)  # the breaker closes again
        # Redis ran it once when it resumed, or never (its connection closed on the timeout,
        # before Redis read it); nobody sent it again: never 50 + 30 + 30.
        remaining = round(limiter.peek("acme", [SLOW]).remaining)
        assert remaining in (50, 80)
        assert recorder.total("unknown") == (1, 30.0)
        assert recorder.total("applied") == (0, 0)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_refunds_older_than_max_age_are_counted_lost_never_applied(
    fresh_redis_server: RedisServer,
) -> None:
    recorder = Refunds()
    # The breaker stays open longer than the refund may wait.
    limiter = sync_limiter(
        fresh_redis_server, 5.0, timeout=0.1, recorder=recorder, refund_max_age=0.3
    )
    try:
        spent = limiter.acquire("acme", 50, [SLOW])
        fresh_redis_server.pause()
        try:
            assert limiter.acquire("opener", 1, [SLOW]).source == "fallback"  # it opens
            limiter.refund("acme", 30, [SLOW], decision=spent)
            deadline = time.monotonic() + 5
            while recorder.total("lost")[0] == 0:
                assert time.monotonic() < deadline, "the refund was never counted lost"
                time.sleep(0.02)
        finally:
            fresh_redis_server.resume()
        assert recorder.total("lost") == (1, 30.0)
        # Lost: the tenant paid more than it used, never less.
        with fresh_redis_server.client() as client:
            direct = RedisStorage(client, timeout=1.0)
            try:
                assert direct.peek("acme", [SLOW]).remaining == pytest.approx(50, abs=0.01)
            finally:
                direct.close()
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def _child_flush(limiter: Limiter, result: Any) -> None:
    queue = limiter.refund_queue
    result.put((len(queue) if queue is not None else -1, limiter.flush(timeout=1)))


def test_a_forked_child_applies_none_of_its_parents_refunds(
    fresh_redis_server: RedisServer,
) -> None:
    limiter = sync_limiter(fresh_redis_server)
    try:
        spent = limiter.acquire("acme", 50, [SLOW])
        fresh_redis_server.pause()  # the refund stays queued while the child is made
        try:
            limiter.refund("acme", 30, [SLOW], decision=spent)
            context = multiprocessing.get_context("fork")
            result = context.Queue()
            child = context.Process(target=_child_flush, args=(limiter, result))
            child.start()
            assert result.get(timeout=10) == (0, 0)  # nothing queued in the child
            child.join(timeout=10)
        finally:
            fresh_redis_server.resume()
        limiter.flush(timeout=5)
        # Applied once, by the parent: 50 + 30 back, not 50 + 60.
        assert limiter.peek("acme", [SLOW]).remaining == pytest.approx(80, abs=0.01)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_a_late_refund_of_a_window_gives_nothing_to_the_next_window(
    fresh_redis_server: RedisServer,
) -> None:
    """The attack D4 closes, through the deferred path: debit at the end of a window, let the
    refund arrive in the next one (a slow resolver, an outage), spend the next window."""
    limiter = sync_limiter(fresh_redis_server, timeout=0.1)
    try:
        first = limiter.acquire("acme", 80, [WINDOW], now=T0 + 900)
        fresh_redis_server.pause()
        try:
            limiter.refund("acme", 80, [WINDOW], now=T0 + 1_100, decision=first)
        finally:
            fresh_redis_server.resume()
        assert limiter.acquire("acme", 90, [WINDOW], now=T0 + 1_050).allowed
        limiter.flush(timeout=5)
        # Window 1 holds its own 90: the refund of window 0's debit does not lower it.
        assert not limiter.acquire("acme", 20, [WINDOW], now=T0 + 1_200).allowed
        assert limiter.peek("acme", [WINDOW], now=T0 + 1_200).remaining == 10
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


# -- async: the loop's refund task ---------------------------------------------------------


def test_async_refunds_never_wait_for_redis_and_ride_along_with_decisions(
    fresh_redis_server: RedisServer,
) -> None:
    recorder = Refunds()

    async def body(client: Any) -> tuple[float, float, list[float]]:
        storage = AsyncRedisStorage(client, timeout=0.2)
        breaker = CircuitBreaker(failure_threshold=1, reset_timeout=1.0)
        limiter = AsyncLimiter(storage, breaker=breaker, recorder=recorder)
        try:
            spent = await asyncio.gather(*(limiter.acquire(f"t{i}", 20, [SLOW]) for i in range(64)))
            await asyncio.to_thread(fresh_redis_server.pause)
            try:
                assert (await limiter.acquire("x", 1, [SLOW])).source == "fallback"  # opens
                started = time.monotonic()
                for i, decision in enumerate(spent):
                    await limiter.refund(f"t{i}", 15, [SLOW], decision=decision)
                took = time.monotonic() - started
                await asyncio.sleep(0.3)  # the breaker is open: nothing sent, still queued
                assert limiter.refund_queue is not None
                assert limiter.refund_queue.pending
            finally:
                await asyncio.to_thread(fresh_redis_server.resume)
            left = await limiter.flush(timeout=5)
            peeks = [(await limiter.peek(f"t{i}", [SLOW])).remaining for i in range(64)]
            return took, left, peeks
        finally:
            await storage.close()

    took, left, peeks = AsyncRunner(fresh_redis_server.async_client)(body)
    assert took < 0.05
    assert left == 0
    # Queued while the breaker was open (opened by the timed-out "x"), nothing was sent
    # during the pause: every refund was applied once, after it.
    assert peeks == pytest.approx([95.0] * 64, abs=0.01)
    assert recorder.total("applied") == (64, 64 * 15.0)
    assert recorder.total("unknown") == (0, 0)


def test_an_async_refund_to_a_redis_that_refuses_connections_is_kept_and_applied_later(
    fresh_redis_server: RedisServer,
) -> None:
    """A connection that cannot be made sent nothing: the refund stays queued (not counted
    unknown) and is applied once Redis is back."""
    recorder = Refunds()

    async def body(client: Any) -> tuple[float, int]:
        storage = AsyncRedisStorage(client, timeout=0.5)
        breaker = CircuitBreaker(failure_threshold=100, reset_timeout=0.1)
        limiter = AsyncLimiter(storage, breaker=breaker, recorder=recorder)
        try:
            spent = await limiter.acquire("acme", 50, [SLOW])
            pipeline = storage.pipeline
            assert pipeline is not None
            for connection in pipeline._idle:  # the next call must connect
                await connection.disconnect()
            await asyncio.to_thread(fresh_redis_server.kill)
            await limiter.refund("acme", 30, [SLOW], decision=spent)
            await asyncio.sleep(0.3)  # tried: connection refused, kept
            assert limiter.refund_queue is not None
            assert limiter.refund_queue.pending
            await asyncio.to_thread(fresh_redis_server.start)
            # The data went with the killed server: the refund lands on a fresh state
            # (a full bucket takes nothing more), but it is applied, not dropped.
            left = await limiter.flush(timeout=5)
            return left, limiter.refund_queue.unknown
        finally:
            await storage.close()

    left, unknown = AsyncRunner(fresh_redis_server.async_client)(body)
    assert (left, unknown) == (0, 0)
    assert recorder.total("applied") == (1, 30.0)


def test_refunds_queued_as_the_idle_thread_ends_are_still_applied(
    fresh_redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refund thread ends when idle; a refund queued just then is applied anyway (by the
    thread taking its place back, or by a new one), never left for the next refund."""
    import quotaql.limiter.rate as limiter_module

    monkeypatch.setattr(limiter_module, "_IDLE_THREAD", 0.02)
    limiter = sync_limiter(fresh_redis_server)
    try:
        queue = limiter.refund_queue
        assert queue is not None
        spent = limiter.acquire("acme", 90, [SLOW])
        for round_ in range(40):
            limiter.refund("acme", 1, [SLOW], decision=spent)
            deadline = time.monotonic() + 2.0
            while queue.pending:
                assert time.monotonic() < deadline, f"round {round_}: the refund was left queued"
                time.sleep(0.001)
            time.sleep(0.02 * (round_ % 3) / 2)  # land around the idle thread's end
        assert limiter.peek("acme", [SLOW]).remaining == pytest.approx(50, abs=0.05)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def _child_decides(storage: Any, result: Any) -> None:
    result.put(storage.acquire(Debit("acme", 1, [SLOW])).remaining)


def test_a_child_forked_while_another_thread_holds_the_memory_lock_still_decides() -> None:
    from quotaql import MemoryStorage

    storage = MemoryStorage()
    storage.acquire(Debit("acme", 10, [SLOW]))
    storage._lock.acquire()  # another thread of the parent is deciding at fork time
    try:
        context = multiprocessing.get_context("fork")
        result = context.Queue()
        child = context.Process(target=_child_decides, args=(storage, result))
        child.start()
        assert result.get(timeout=10) == pytest.approx(89, abs=0.01)
        child.join(timeout=10)
    finally:
        storage._lock.release()
