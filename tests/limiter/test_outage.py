"""Redis outages: a killed or hung redis-server is answered by the fail mode, then recovered from.

Every test runs its own server (``fresh_redis_server``), kills or pauses it for real, and is
bounded in time; the fixture stops the server however the test ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import TYPE_CHECKING

import pytest

from quotaql import AsyncLimiter, AsyncRedisStorage, CircuitBreaker, Limiter, Quota, RedisStorage
from quotaql.errors import StorageError, StorageTimeout
from quotaql.storage import Debit
from tests.limiter.test_limiter import CollectingRecorder

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import TracebackType

    from quotaql.limiter import BackendErrorMode
    from quotaql.policy.quota import Decision
    from tests.limiter.test_limiter import ManualClock
    from tests.support.servers import RedisServer

MODES: Sequence[BackendErrorMode] = ("open", "closed", "local")
# What each fail mode answers while Redis is out: (source, allowed).
FAIL_ANSWER = {
    "open": ("fail_open", True),
    "closed": ("fail_closed", False),
    "local": ("fallback", True),
}
COOL_DOWN = 1.0  # the breaker's reset_timeout: short for quick recovery, long enough that a
# loaded machine (the whole suite on 2 cores) still sees the breaker open between two checks
TIMEOUT = 0.05  # RedisStorage's default per-call timeout
# Large enough that the local fallback allows every request these tests make.
TENANT = Quota("tenant", capacity=100_000, refill_per_second=1_000)
KEY = "acme"
BOUND = 5.0  # the longest any wait in these tests may take


def wait_until(predicate: Callable[[], bool], timeout: float = BOUND) -> bool:
    """Poll ``predicate`` until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


async def async_wait_until(predicate: Callable[[], bool], timeout: float = BOUND) -> bool:
    """:func:`wait_until` for asyncio: sleeps without blocking the loop."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.002)
    return True


def assert_fail_mode(
    decision: Decision, mode: BackendErrorMode, breaker: CircuitBreaker | None = None
) -> None:
    """``decision`` is what ``mode`` answers without Redis.

    Pass ``breaker`` right after the decision was made to check a refusal's
    ``retry_after`` against the breaker's remaining cool-down.
    """
    source, allowed = FAIL_ANSWER[mode]
    assert decision.source == source
    assert decision.allowed is allowed
    if mode == "closed":
        assert decision.reason == "backend_unavailable"
        assert decision.retry_after is not None
        assert decision.retry_after > 0
        if breaker is not None:
            # No sooner than the breaker will let a call through to Redis again.
            assert decision.retry_after >= breaker.retry_after()
    else:
        assert decision.reason is None


def assert_storage_errors(recorder: CollectingRecorder) -> None:
    assert all(backend == "redis" for backend, _ in recorder.errors)
    assert all(isinstance(error, StorageError) for _, error in recorder.errors)


def assert_all_from_redis(
    decisions: Sequence[Decision], errors: Sequence[tuple[str, BaseException]]
) -> None:
    """Every decision made while Redis was healthy came from Redis; if not, the message
    names the storage errors recorded meanwhile (``errors``), so a failure explains itself."""
    sources = [decision.source for decision in decisions]
    assert set(sources) == {"redis"}, (
        f"{len(sources) - sources.count('redis')} of the {len(sources)} decisions before the "
        f"kill were not from Redis ({sorted(set(sources))}); the storage errors recorded by "
        f"then: {list(errors)!r}"
    )


def noscript_count(server: RedisServer) -> int:
    """How many NOSCRIPT errors the server has replied (Redis >= 7 ``INFO errorstats``)."""
    stats = server.info("errorstats").get("errorstat_NOSCRIPT", {"count": 0})
    assert isinstance(stats, dict)
    return int(stats["count"])


# These tests are about a server that dies: a refused connection fails at once, whatever the
# timeout. A loaded CI host can stall a healthy call past the 50 ms default (one timeout
# opens the breaker), which would make decisions before the kill come from the fail mode.
HEALTHY_TIMEOUT = 1.0


def sync_limiter(
    server: RedisServer,
    mode: BackendErrorMode,
    recorder: CollectingRecorder,
    timeout: float = TIMEOUT,
) -> Limiter:
    with server.client() as client:  # the storage makes its own pool from these settings
        storage = RedisStorage(client, timeout=timeout)
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=COOL_DOWN)
    return Limiter(storage, on_backend_error=mode, breaker=breaker, recorder=recorder)


class Load:
    """A thread that calls ``limiter.acquire`` in a loop, keeping decisions and exceptions."""

    def __init__(self, limiter: Limiter) -> None:
        self.limiter = limiter
        self.decisions: list[Decision] = []
        self.exceptions: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.decisions.append(self.limiter.acquire(KEY, 1, [TENANT]))
            except BaseException as exc:  # any exception reaching the caller fails the test
                self.exceptions.append(exc)
                return
            time.sleep(0.001)

    def wait_for(self, count: int) -> bool:
        """Wait until ``count`` decisions were made (False after :data:`BOUND` s)."""
        return wait_until(lambda: len(self.decisions) >= count or bool(self.exceptions))

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=BOUND)
        assert not self._thread.is_alive(), "the load thread did not stop"


# -- killed server -----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_killed_server_mid_load_is_answered_by_the_fail_mode_then_recovers(
    fresh_redis_server: RedisServer, mode: BackendErrorMode
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    limiter = sync_limiter(server, mode, recorder, HEALTHY_TIMEOUT)
    breaker = limiter.breaker
    try:
        with Load(limiter) as load:
            assert load.wait_for(20)
            killed_at = len(load.decisions)
            errors_at_kill = list(recorder.errors)  # those of the decisions before the kill
            server.kill()
            assert wait_until(lambda: breaker.is_open)
            opened_at = len(load.decisions)
            assert load.wait_for(opened_at + 20)

        assert load.exceptions == []
        assert_all_from_redis(load.decisions[:killed_at], errors_at_kill)
        # The one call in flight at the kill may still have been answered by Redis.
        for decision in load.decisions[killed_at + 1 :]:
            assert_fail_mode(decision, mode)
        assert recorder.circuits == [("redis", True)]
        assert len(recorder.errors) >= 3
        assert_storage_errors(recorder)

        # Open: the fail mode answers and no call reaches Redis.
        errors = len(recorder.errors)
        calls = 0
        while breaker.retry_after() > 0.05:
            assert_fail_mode(limiter.acquire(KEY, 1, [TENANT]), mode, breaker)
            calls += 1
            time.sleep(0.001)
        assert calls > 0
        assert len(recorder.errors) == errors

        # Cool-down over, Redis still dead: one probe fails and reopens for a full cool-down.
        time.sleep(breaker.retry_after() + 0.01)
        assert_fail_mode(limiter.acquire(KEY, 1, [TENANT]), mode, breaker)
        assert len(recorder.errors) == errors + 1
        assert breaker.is_open
        assert breaker.retry_after() > COOL_DOWN / 2
        assert recorder.circuits == [("redis", True)]

        # Back: a new, empty server without the script.
        server.restart()
        assert noscript_count(server) == 0
        time.sleep(breaker.retry_after() + 0.01)
        recovered = limiter.acquire(KEY, 1, [TENANT])

        assert recovered.source == "redis"
        assert recovered.allowed
        assert recovered.remaining == TENANT.maximum - 1  # decided by the new server
        assert not breaker.is_open
        assert recorder.circuits == [("redis", True), ("redis", False)]
        assert noscript_count(server) == 1  # the probe met NOSCRIPT and loaded the script
        later = [limiter.acquire(KEY, 1, [TENANT]) for _ in range(5)]
        assert {decision.source for decision in later} == {"redis"}
        assert len(recorder.errors) == errors + 1
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_local_mode_still_enforces_quotas_during_an_outage(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    limiter = sync_limiter(server, "local", recorder, HEALTHY_TIMEOUT)
    small = Quota("tenant", capacity=5, refill_per_second=0.001)
    try:
        assert limiter.acquire(KEY, 1, [small]).source == "redis"
        server.kill()

        decisions = [limiter.acquire(KEY, 1, [small]) for _ in range(8)]

        assert {decision.source for decision in decisions} == {"fallback"}
        # The fallback starts from what Redis last reported (4 left), not from a full
        # bucket of its own: 4 allowed, then refusals.
        assert [decision.allowed for decision in decisions] == [True] * 4 + [False] * 4
        assert {decision.reason for decision in decisions[5:]} == {"rate_limited"}
        assert decisions[-1].limited_by == "tenant"
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


# -- hung (paused) server ----------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_hung_server_costs_one_timeout_then_the_fail_mode_answers_at_once(
    fresh_redis_server: RedisServer, mode: BackendErrorMode
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    limiter = sync_limiter(server, mode, recorder)
    breaker = limiter.breaker
    try:
        warm_sync(limiter, recorder)
        server.pause(BOUND)  # resumes by itself should the test die before resume()
        try:
            started = time.perf_counter()
            first = limiter.acquire(KEY, 1, [TENANT])
            waited = time.perf_counter() - started

            assert TIMEOUT * 0.8 <= waited < BOUND / 2  # one timeout paid, no hang
            assert_fail_mode(first, mode, breaker)
            assert [type(error) for _, error in recorder.errors] == [StorageTimeout]
            assert recorder.circuits == [("redis", True)]  # one timeout opens it

            for _ in range(20):
                assert_fail_mode(limiter.acquire(KEY, 1, [TENANT]), mode, breaker)
            # None of them went to Redis, so none paid a timeout (counted, not timed:
            # a loaded machine makes wall-clock bounds flaky).
            assert len(recorder.errors) == 1
        finally:
            server.resume()

        time.sleep(breaker.retry_after() + 0.01)
        assert limiter.acquire(KEY, 1, [TENANT]).source == "redis"
        assert recorder.circuits == [("redis", True), ("redis", False)]
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_a_long_hang_costs_one_timeout_per_cool_down_not_one_per_request(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    limiter = sync_limiter(server, "local", recorder)
    hang = 2.5 * COOL_DOWN  # long enough for probes after the first cool-downs
    try:
        warm_sync(limiter, recorder)
        server.pause(BOUND)
        try:
            calls = 0
            deadline = time.monotonic() + hang
            while time.monotonic() < deadline:
                assert limiter.acquire(KEY, 1, [TENANT]).source == "fallback"
                calls += 1
                time.sleep(0.002)
        finally:
            server.resume()

        # Only the first call and one probe per cool-down reached the hung server (each
        # paid a timeout); every other call was answered without it.
        assert 2 <= len(recorder.errors) <= 1 + hang / COOL_DOWN + 1
        assert all(isinstance(error, StorageTimeout) for _, error in recorder.errors)
        assert calls > 50
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


# -- asyncio -----------------------------------------------------------------------------------


def async_limiter(
    server: RedisServer,
    mode: BackendErrorMode,
    recorder: CollectingRecorder,
    timeout: float = TIMEOUT,
) -> AsyncLimiter:
    """An AsyncLimiter on ``server``; call inside the event loop that will use it."""
    # The storage builds its own pool from the client's settings; the client never connects.
    storage = AsyncRedisStorage(server.async_client(), timeout=timeout)
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=COOL_DOWN)
    return AsyncLimiter(storage, on_backend_error=mode, breaker=breaker, recorder=recorder)


def warm_sync(limiter: Limiter, recorder: CollectingRecorder) -> None:
    """:func:`warm` for a sync limiter."""
    for _ in range(10):
        if limiter.acquire(KEY, 1, [TENANT]).source == "redis":
            break
        time.sleep(limiter.breaker.retry_after() + 0.01)  # opened meanwhile: its cool-down
    else:
        raise AssertionError("Redis never answered within the timeout")
    recorder.errors.clear()
    recorder.circuits.clear()
    recorder.decisions.clear()


async def warm(limiter: AsyncLimiter, recorder: CollectingRecorder) -> None:
    """A first decision from Redis: the connection made and the script loaded, which a busy
    machine (the suite's parallel workers) may not do within one ``TIMEOUT``; a call that
    timed out meanwhile is forgotten (a success resets the breaker's count; an open breaker
    is waited out)."""
    for _ in range(10):
        if (await limiter.acquire(KEY, 1, [TENANT])).source == "redis":
            break
        await asyncio.sleep(limiter.breaker.retry_after() + 0.01)  # opened: its cool-down
    else:
        raise AssertionError("Redis never answered within the timeout")
    recorder.errors.clear()
    recorder.circuits.clear()
    recorder.decisions.clear()


def run_bounded(main: Callable[[], object], seconds: float = 20.0) -> None:
    """``asyncio.run`` the coroutine function ``main``, cancelled after ``seconds``."""

    async def bounded() -> None:
        async with asyncio.timeout(seconds):
            await main()  # type: ignore[misc]

    asyncio.run(bounded())


@pytest.mark.parametrize("mode", MODES)
def test_async_killed_server_mid_load_is_answered_by_the_fail_mode_then_recovers(
    fresh_redis_server: RedisServer, mode: BackendErrorMode
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()

    async def main() -> None:
        limiter = async_limiter(server, mode, recorder, HEALTHY_TIMEOUT)
        breaker = limiter.breaker
        decisions: list[Decision] = []
        exceptions: list[BaseException] = []
        stop = asyncio.Event()

        async def worker() -> None:
            while not stop.is_set():
                try:
                    decisions.append(await limiter.acquire(KEY, 1, [TENANT]))
                except Exception as exc:  # any exception reaching the caller fails the test
                    exceptions.append(exc)
                    return
                await asyncio.sleep(0.001)

        try:
            workers = [asyncio.create_task(worker()) for _ in range(8)]
            try:
                assert await async_wait_until(lambda: len(decisions) >= 40)
                killed_at = len(decisions)
                errors_at_kill = list(recorder.errors)  # those of the decisions before the kill
                await asyncio.to_thread(server.kill)
                assert await async_wait_until(lambda: breaker.is_open)
                opened_at = len(decisions)
                assert await async_wait_until(lambda: len(decisions) >= opened_at + 40)
            finally:
                stop.set()
                await asyncio.gather(*workers)

            assert exceptions == []
            assert_all_from_redis(decisions[:killed_at], errors_at_kill)
            for decision in decisions[opened_at:]:
                assert_fail_mode(decision, mode)
            assert recorder.circuits == [("redis", True)]
            assert_storage_errors(recorder)

            errors = len(recorder.errors)
            calls = 0
            while breaker.retry_after() > 0.05:
                assert_fail_mode(await limiter.acquire(KEY, 1, [TENANT]), mode, breaker)
                calls += 1
                await asyncio.sleep(0.001)
            assert calls > 0
            assert len(recorder.errors) == errors

            await asyncio.to_thread(server.restart)
            await asyncio.sleep(breaker.retry_after() + 0.01)
            recovered = await limiter.acquire(KEY, 1, [TENANT])

            assert recovered.source == "redis"
            assert recovered.remaining == TENANT.maximum - 1
            assert recorder.circuits == [("redis", True), ("redis", False)]
            assert noscript_count(server) == 1
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]

    run_bounded(main)


@pytest.mark.parametrize("mode", MODES)
def test_async_hung_server_costs_one_timeout_then_the_fail_mode_answers_at_once(
    fresh_redis_server: RedisServer, mode: BackendErrorMode
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()

    async def main() -> None:
        limiter = async_limiter(server, mode, recorder)
        breaker = limiter.breaker
        try:
            await warm(limiter, recorder)
            server.pause(BOUND)
            try:
                started = time.perf_counter()
                first = await limiter.acquire(KEY, 1, [TENANT])
                waited = time.perf_counter() - started

                assert TIMEOUT * 0.8 <= waited < BOUND / 2  # one timeout paid, no hang
                assert_fail_mode(first, mode, breaker)
                assert [type(error) for _, error in recorder.errors] == [StorageTimeout]
                assert recorder.circuits == [("redis", True)]

                burst = await asyncio.gather(
                    *(limiter.acquire(KEY, 1, [TENANT]) for _ in range(50))
                )
                for decision in burst:
                    assert_fail_mode(decision, mode)
                assert len(recorder.errors) == 1  # none of the fifty went to Redis
            finally:
                server.resume()

            for _ in range(10):  # a probe reconnects: past one TIMEOUT on a busy machine
                await asyncio.sleep(breaker.retry_after() + 0.01)
                if (await limiter.acquire(KEY, 1, [TENANT])).source == "redis":
                    break
            else:
                raise AssertionError("Redis never answered after it resumed")
            assert recorder.circuits[:1] == [("redis", True)]
            assert recorder.circuits[-1] == ("redis", False)  # closed by the probe that passed
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]

    run_bounded(main)


def test_async_half_open_breaker_lets_one_probe_through_a_burst(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()

    async def main() -> None:
        limiter = async_limiter(server, "closed", recorder)
        breaker = limiter.breaker
        try:
            await warm(limiter, recorder)
            server.pause(BOUND)
            try:
                await limiter.acquire(KEY, 1, [TENANT])
                assert breaker.is_open
                await asyncio.sleep(breaker.retry_after() + 0.01)

                burst = await asyncio.gather(
                    *(limiter.acquire(KEY, 1, [TENANT]) for _ in range(20))
                )

                # The first call, then the single probe: one timeout for the burst, not twenty.
                assert len(recorder.errors) == 2
                assert {decision.source for decision in burst} == {"fail_closed"}
                assert breaker.is_open
            finally:
                server.resume()
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]

    run_bounded(main)


def test_async_cancelled_probe_does_not_keep_the_breaker_open_forever(
    fresh_redis_server: RedisServer,
) -> None:
    # A request cancelled while it is the half-open probe (a client hung up, a
    # wait_for() expired) must not wedge the breaker: once Redis is back, a later
    # call probes again and decisions come from Redis.
    server = fresh_redis_server
    recorder = CollectingRecorder()

    async def main() -> list[str]:
        limiter = async_limiter(server, "open", recorder)
        breaker = limiter.breaker
        try:
            await warm(limiter, recorder)
            server.pause(BOUND)
            try:
                await limiter.acquire(KEY, 1, [TENANT])
                assert breaker.is_open
                await asyncio.sleep(breaker.retry_after() + 0.01)
                probe = asyncio.create_task(limiter.acquire(KEY, 1, [TENANT]))
                await asyncio.sleep(TIMEOUT / 5)  # the probe is waiting on the hung server
                probe.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await probe
            finally:
                server.resume()

            sources: list[str] = []
            deadline = time.monotonic() + 6 * COOL_DOWN
            while time.monotonic() < deadline:
                sources.append((await limiter.acquire(KEY, 1, [TENANT])).source)
                if sources[-1] == "redis":
                    break
                await asyncio.sleep(0.02)
            return sources
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]

    sources: list[str] = []

    async def run() -> None:
        sources.extend(await main())

    run_bounded(run)
    assert sources[-1] == "redis", f"never back to Redis: {len(sources)} calls, all fail_open"


def test_an_unreachable_async_cluster_is_a_storage_error_and_the_fail_mode_answers() -> None:
    # redis-py raises RedisClusterException (not a RedisError) when no node answers.
    import redis.asyncio.cluster

    from tests.support.servers import free_port

    port = free_port()  # nothing listens on it
    quota = Quota("tenant", capacity=10, refill_per_second=1)

    async def body() -> tuple[Exception | None, Decision]:
        client = redis.asyncio.cluster.RedisCluster(
            startup_nodes=[redis.asyncio.cluster.ClusterNode("127.0.0.1", port)]
        )
        storage = AsyncRedisStorage(client, timeout=0.5)
        error: Exception | None = None
        try:
            await storage.acquire(Debit("acme", 1, [quota]))
        except StorageError as exc:
            error = exc
        decision = await AsyncLimiter(storage, on_backend_error="local").acquire("acme", 1, [quota])
        return error, decision

    error, decision = asyncio.run(body())
    assert isinstance(error, StorageError)
    assert decision.allowed
    assert decision.source == "fallback"


# -- the local fallback starts from what Redis reported, not from a full bucket ---------------

# Refills a hundredth of a unit per second: nothing a test's few seconds could notice.
SLOW = Quota("tenant", capacity=100, refill_per_second=0.01)
SHARED_SLOW = Quota("platform", capacity=50, refill_per_second=0.01, shared=True)
COSTLY = 30


def drain(limiter: Limiter, key: str = KEY) -> float:
    """Spend ``key``'s SLOW budget in Redis down to about 10; return what Redis says is left."""
    drained = [limiter.acquire(key, COSTLY, [SLOW]) for _ in range(4)]
    assert [decision.allowed for decision in drained] == [True, True, True, False]
    assert {decision.source for decision in drained} == {"redis"}
    left = drained[-1].remaining
    assert left == pytest.approx(10, abs=0.5)
    return left


def assert_exhausted_in_the_fallback(limiter: Limiter, left: float) -> None:
    """The fallback refuses the costly request and allows only what Redis said was left."""
    costly = limiter.acquire(KEY, COSTLY, [SLOW])
    assert costly.source == "fallback"
    assert not costly.allowed
    assert costly.reason == "rate_limited"
    assert costly.limited_by == "tenant"
    assert costly.retry_after is not None
    assert costly.retry_after > 100  # (30 - 10) / 0.01 s, not "retry now"
    rest = limiter.acquire(KEY, round(left), [SLOW])
    assert rest.source == "fallback"
    assert rest.allowed
    assert not limiter.acquire(KEY, 1, [SLOW]).allowed


def test_an_exhausted_tenant_stays_exhausted_through_an_outage(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    limiter = sync_limiter(server, "local", recorder, HEALTHY_TIMEOUT)
    try:
        left = drain(limiter)
        server.kill()

        assert_exhausted_in_the_fallback(limiter, left)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_async_an_exhausted_tenant_stays_exhausted_through_an_outage(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    decisions: list[Decision] = []

    async def main() -> None:
        limiter = async_limiter(server, "local", recorder, HEALTHY_TIMEOUT)
        try:
            drained = [await limiter.acquire(KEY, COSTLY, [SLOW]) for _ in range(4)]
            assert [decision.allowed for decision in drained] == [True, True, True, False]
            await asyncio.to_thread(server.kill)
            decisions.append(await limiter.acquire(KEY, COSTLY, [SLOW]))
            decisions.append(await limiter.acquire(KEY, 10, [SLOW]))
            decisions.append(await limiter.acquire(KEY, 1, [SLOW]))
        finally:
            await limiter.storage.close()  # type: ignore[union-attr]

    run_bounded(main)
    assert {decision.source for decision in decisions} == {"fallback"}
    assert [decision.allowed for decision in decisions] == [False, True, False]
    assert decisions[0].reason == "rate_limited"


def test_a_never_seen_tenant_gets_only_the_local_share_during_an_outage(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    with server.client() as client:
        storage = RedisStorage(client, timeout=HEALTHY_TIMEOUT)
    limiter = Limiter(storage, on_backend_error="local", local_share=0.25)
    default = sync_limiter(server, "local", CollectingRecorder(), HEALTHY_TIMEOUT)
    try:
        assert limiter.acquire("known", 1, [SLOW]).source == "redis"
        assert default.acquire("known", 1, [SLOW]).source == "redis"
        server.kill()

        shared = [limiter.acquire("stranger", 1, [SLOW]) for _ in range(30)]
        by_default = [default.acquire("stranger", 1, [SLOW]) for _ in range(15)]

        assert {decision.source for decision in shared + by_default} == {"fallback"}
        assert [decision.allowed for decision in shared] == [True] * 25 + [False] * 5
        # local_share defaults to 0.1: 10 of 100.
        assert [decision.allowed for decision in by_default] == [True] * 10 + [False] * 5
    finally:
        storage.close()
        default.storage.close()  # type: ignore[attr-defined]


def test_a_shared_quota_starts_the_outage_from_its_last_report(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    limiter = sync_limiter(server, "local", CollectingRecorder(), HEALTHY_TIMEOUT)
    quotas = [SLOW, SHARED_SLOW]
    try:
        spent = limiter.acquire("big", 45, quotas)
        assert spent.source == "redis"
        assert spent.allowed
        server.kill()

        # A tenant never seen: 10 of its own (the local share), 5 left of the platform's.
        refused = limiter.acquire("small", 8, quotas)
        allowed = limiter.acquire("small", 5, quotas)

        assert refused.source == "fallback"
        assert not refused.allowed
        assert refused.limited_by == "platform"
        assert allowed.allowed  # its own debit was refunded when the platform refused
        assert not limiter.acquire("other", 1, quotas).allowed  # the platform is spent
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def _local_fallback_on_a_manual_clock(server: RedisServer) -> tuple[Limiter, ManualClock]:
    """A limiter on ``server`` whose ``local`` fallback runs on a clock the test moves."""
    from quotaql import MemoryStorage
    from tests.limiter.test_limiter import ManualClock

    clock = ManualClock()
    with server.client() as client:
        storage = RedisStorage(client, timeout=HEALTHY_TIMEOUT)
    fallback = MemoryStorage(clock=clock, source="fallback")
    return Limiter(storage, on_backend_error="local", fallback=fallback), clock


def test_the_fallback_credits_the_refill_since_the_report_and_nothing_more(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    limiter, clock = _local_fallback_on_a_manual_clock(server)
    quota = Quota("tenant", capacity=100, refill_per_second=1)
    try:
        drained = [limiter.acquire(KEY, COSTLY, [quota]) for _ in range(3)]
        assert {decision.source for decision in drained} == {"redis"}
        left = drained[-1].remaining  # 10, and the few ms of refill Redis saw
        server.kill()
        clock.advance(5.0)  # the fallback's clock: 5 s since the report

        assert limiter.acquire(KEY, 15, [quota]).allowed  # 10 + 5 s * 1/s
        after = limiter.acquire(KEY, 1, [quota])
        assert after.source == "fallback"
        assert not after.allowed
        assert after.remaining == pytest.approx(left - 10, abs=0.1)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def restart_and_recover(server: RedisServer, limiter: Limiter) -> None:
    """Bring the server back and let the breaker's probe close it (bounded)."""
    server.restart()
    deadline = time.monotonic() + BOUND
    while limiter.breaker.is_open:
        assert time.monotonic() < deadline, "the breaker never closed"
        time.sleep(min(limiter.breaker.retry_after(), 0.05) + 0.01)
        limiter.acquire("probe", 1, [SLOW])


def kill_and_open(server: RedisServer, limiter: Limiter) -> None:
    """Kill the server and make calls (answered by the fail mode) until the breaker opens."""
    server.kill()
    for _ in range(10):
        if limiter.breaker.is_open:
            return
        limiter.acquire("probe", 1, [SLOW])
    assert limiter.breaker.is_open


def test_after_recovery_the_next_outage_seeds_afresh_and_flapping_gives_nothing_twice(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    limiter = sync_limiter(server, "local", CollectingRecorder(), HEALTHY_TIMEOUT)
    try:
        left = drain(limiter)
        kill_and_open(server, limiter)
        assert_exhausted_in_the_fallback(limiter, left)  # spends what was left, in memory

        restart_and_recover(server, limiter)  # an empty Redis: it never saw those debits
        assert limiter.acquire("later", 1, [SLOW]).source == "redis"  # 99 left in Redis
        kill_and_open(server, limiter)

        # Seeded afresh from the newer report: 99 left.
        later = [limiter.acquire("later", COSTLY, [SLOW]) for _ in range(4)]
        assert {decision.source for decision in later} == {"fallback"}
        assert [decision.allowed for decision in later] == [True, True, True, False]
        # Redis has not reported KEY since the first outage: the second starts from what
        # the first one's fallback left (nothing), not from Redis's older report.
        again = limiter.acquire(KEY, 5, [SLOW])
        assert again.source == "fallback"
        assert not again.allowed
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


# -- open: no limit while Redis is down, unless open_cap ---------------------------------------


def open_limiter(server: RedisServer, open_cap: float | None) -> Limiter:
    with server.client() as client:
        storage = RedisStorage(client, timeout=HEALTHY_TIMEOUT)
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=COOL_DOWN)
    return Limiter(storage, on_backend_error="open", breaker=breaker, open_cap=open_cap)


def test_open_without_a_cap_allows_everything_while_redis_is_down(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    limiter = open_limiter(server, None)
    try:
        drain(limiter)  # exhausted in Redis: "open" does not care once Redis is gone
        server.kill()

        decisions = [limiter.acquire(KEY, COSTLY, [SLOW]) for _ in range(50)]

        assert {decision.source for decision in decisions} == {"fail_open"}
        assert all(decision.allowed for decision in decisions)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_open_with_a_cap_allows_a_share_of_each_quota_per_outage(
    fresh_redis_server: RedisServer,
) -> None:
    server = fresh_redis_server
    limiter = open_limiter(server, 0.1)
    try:
        assert limiter.acquire(KEY, 1, [SLOW]).source == "redis"
        kill_and_open(server, limiter)

        decisions = [limiter.acquire(KEY, 1, [SLOW]) for _ in range(50)]

        assert {decision.source for decision in decisions} == {"fallback"}
        assert [decision.allowed for decision in decisions] == [True] * 10 + [False] * 40
        for refused in decisions[10:]:
            assert refused.reason == "rate_limited"
            assert refused.limited_by == "tenant"
            assert refused.retry_after is not None
            assert refused.retry_after > 0

        # Fresh each outage: after Redis is back and gone again, 10 more.
        restart_and_recover(server, limiter)
        assert limiter.acquire(KEY, 1, [SLOW]).source == "redis"
        kill_and_open(server, limiter)
        again = [limiter.acquire(KEY, 1, [SLOW]) for _ in range(12)]
        assert [decision.allowed for decision in again] == [True] * 10 + [False] * 2
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


# -- refunds go back where their debit was made ------------------------------------------------


def test_a_refund_of_a_fallback_debit_never_reaches_redis(fresh_redis_server: RedisServer) -> None:
    """An operation decided by the local fallback during an outage and refunded after Redis is
    back: Redis never saw its debit, so giving the refund to Redis would hand the tenant
    budget it never paid for there (an attacker's expensive queries, timed around an outage,
    would each mint their unused cost)."""
    server = fresh_redis_server
    limiter = sync_limiter(server, "local", CollectingRecorder())
    try:
        spent = limiter.acquire(KEY, 50, [SLOW])
        assert (spent.source, spent.allowed) == ("redis", True)
        server.pause()
        try:
            during = [limiter.acquire(KEY, 1, [SLOW]) for _ in range(3)]
            assert during[-1].source == "fallback"
            assert during[-1].allowed
        finally:
            server.resume()
        assert wait_until(lambda: limiter.peek(KEY, [SLOW]).source == "redis")
        before = limiter.peek(KEY, [SLOW]).remaining

        limiter.refund(KEY, 1, [SLOW], decision=during[-1])  # the fallback's debit
        limiter.refund(KEY, 40, [SLOW], decision=spent._replace(source="fail_open"))
        assert limiter.flush() == 0  # whatever was deferred, applied (or dropped) now

        assert limiter.peek(KEY, [SLOW]).remaining == pytest.approx(before, abs=0.05)
        limiter.refund(KEY, 40, [SLOW], decision=spent)  # Redis's own debit goes back to it
        assert limiter.flush() == 0  # deferred refunds are applied by the limiter's thread
        assert limiter.peek(KEY, [SLOW]).remaining == pytest.approx(before + 40, abs=0.05)
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]


def test_an_outage_starts_a_tenant_in_reserved_debt_from_its_debt(
    fresh_redis_server: RedisServer,
) -> None:
    """A tenant whose turns were reserved (``max_delay``) is below empty in Redis; had the
    fallback started it at empty, an outage would have handed it the debt back: the turns
    reserved before it, then as many again."""
    server = fresh_redis_server
    limiter, _clock = _local_fallback_on_a_manual_clock(server)
    quota = Quota("tenant", capacity=10, refill_per_second=10, max_delay=2.0)
    try:
        assert limiter.acquire(KEY, 10, [quota]).delay == 0  # the burst, now
        reserved = limiter.acquire(KEY, 10, [quota])  # the next ten, in about a second
        assert reserved.source == "redis"
        assert reserved.allowed
        assert reserved.delay == pytest.approx(1.0, abs=0.05)
        server.kill()

        after = limiter.acquire(KEY, 1, [quota])  # the fallback's clock has not moved

        assert after.source == "fallback"
        assert after.allowed
        assert after.delay == pytest.approx(1.1, abs=0.05)  # behind the reserved ten
    finally:
        limiter.storage.close()  # type: ignore[attr-defined]
