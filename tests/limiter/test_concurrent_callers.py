"""No over-admission under concurrency: processes, threads and tasks against one tenant.

The bound is the token bucket's own promise: in ``elapsed`` seconds of the server's clock,
at most ``capacity + refill × elapsed`` is admitted; with demand far above it, at least 90 %
of that is admitted too (no false blocks).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import random
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import (
    AsyncLimiter,
    AsyncRedisStorage,
    Limiter,
    MemoryStorage,
    Quota,
    RedisStorage,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    import redis
    import redis.asyncio

    from quotaql.policy.quota import Decision
    from tests.support.servers import AsyncRunner, RedisServer

CAPACITY = 200
REFILL = 100  # per second
BUCKET = {"name": "tenant", "capacity": CAPACITY, "refill_per_second": REFILL}
KEY = "acme"
MAX_COST = 5
LOAD_SECONDS = 2.0
MAX_CALLS_PER_WORKER = 5_000
# Generous per-call timeout: this is about correctness under load, and a timeout would turn
# into a fail-mode decision (counted, and failing the test) rather than a Redis decision.
CALL_TIMEOUT = 2.0
PROCESSES = 4
THREADS = 16
START_TIMEOUT = 30.0
NOW = 1_700_000_000_000  # explicit ms: the memory/Redis checks below must not refill


def server_seconds(client: redis.Redis) -> float:
    """The server's clock (``TIME``) in seconds."""
    seconds, microseconds = client.time()
    return seconds + microseconds / 1e6


def assert_within_bucket_bound(admitted: float, elapsed: float, busy: float | None = None) -> None:
    """Never more than the bucket gives over ``elapsed`` (the whole run); not much less than
    it gives over ``busy``, the time every worker was still asking (default: the whole run):
    once some workers have stopped, the refill outruns the demand and nobody takes it."""
    bound = CAPACITY + REFILL * elapsed
    assert admitted <= bound + 1e-6, f"over-admitted: {admitted} > {bound:.2f}"
    floor = CAPACITY + REFILL * (elapsed if busy is None else min(busy, elapsed))
    assert admitted >= 0.9 * floor, f"false blocks: {admitted} < 90 % of {floor:.2f}"


# -- processes × threads against the real Redis ------------------------------------------------


def _hammer(
    url: str, seed: int, ready: Any, go: Any, results: Any
) -> None:  # pragma: no cover - runs in a child process
    """One process: THREADS threads acquire for LOAD_SECONDS once ``go`` is set."""
    try:
        storage = RedisStorage.from_url(url, timeout=CALL_TIMEOUT)
        limiter = Limiter(storage, on_backend_error="closed")
        quota = Quota(**BUCKET)  # type: ignore[arg-type]
        storage.client.ping()
        admitted = [0] * THREADS
        calls = [0] * THREADS
        not_redis = [0] * THREADS

        def run(index: int) -> None:
            rng = random.Random(seed * 1_000 + index)
            if not go.wait(START_TIMEOUT):
                return
            deadline = time.monotonic() + LOAD_SECONDS
            while time.monotonic() < deadline and calls[index] < MAX_CALLS_PER_WORKER:
                cost = rng.randint(1, MAX_COST)
                decision = limiter.acquire(KEY, cost, [quota])
                calls[index] += 1
                if decision.source != "redis":
                    not_redis[index] += 1
                elif decision.allowed:
                    admitted[index] += cost

        threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
        for thread in threads:
            thread.start()
        ready.put(seed)
        for thread in threads:
            thread.join()
        end = server_seconds(storage.client)
        storage.close()
        results.put(
            {"admitted": sum(admitted), "calls": sum(calls), "not_redis": sum(not_redis),
             "end": end, "error": None}
        )  # fmt: skip
    except BaseException as exc:
        results.put({"error": repr(exc)})
        ready.put(seed)


def test_processes_and_threads_never_over_admit_one_tenant(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    results = context.Queue()
    go = context.Event()
    processes = [
        context.Process(target=_hammer, args=(redis_server.url, seed, ready, go, results))
        for seed in range(PROCESSES)
    ]
    for process in processes:
        process.start()
    try:
        for _ in processes:
            ready.get(timeout=START_TIMEOUT)
        started = server_seconds(redis_client)
        go.set()
        reports = [results.get(timeout=START_TIMEOUT) for _ in processes]
    finally:
        go.set()
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)

    assert [report["error"] for report in reports] == [None] * PROCESSES
    assert [process.exitcode for process in processes] == [0] * PROCESSES
    assert sum(report["not_redis"] for report in reports) == 0
    elapsed = max(report["end"] for report in reports) - started
    assert LOAD_SECONDS <= elapsed < LOAD_SECONDS + 5
    calls = sum(report["calls"] for report in reports)
    assert calls > 10 * (CAPACITY + REFILL * elapsed) / MAX_COST  # demand far above supply
    assert_within_bucket_bound(sum(report["admitted"] for report in reports), elapsed)


# -- asyncio tasks against the real Redis ------------------------------------------------------


def test_asyncio_tasks_never_over_admit_one_tenant(
    redis_client: redis.Redis, async_redis_client: AsyncRunner[redis.asyncio.Redis]
) -> None:
    tasks = 200
    quota = Quota(**BUCKET)  # type: ignore[arg-type]

    async def body(client: redis.asyncio.Redis) -> tuple[float, int, int, float, float]:
        storage = AsyncRedisStorage(client, timeout=CALL_TIMEOUT)
        limiter = AsyncLimiter(storage, on_backend_error="closed")
        admitted = 0
        calls = 0
        not_redis = 0
        stopped: list[float] = []  # when each worker asked for the last time

        async def hammer(index: int) -> None:
            nonlocal admitted, calls, not_redis
            rng = random.Random(index)
            deadline = time.monotonic() + LOAD_SECONDS
            for _ in range(MAX_CALLS_PER_WORKER):
                if time.monotonic() >= deadline:
                    break
                cost = rng.randint(1, MAX_COST)
                decision = await limiter.acquire(KEY, cost, [quota])
                calls += 1
                if decision.source != "redis":
                    not_redis += 1
                elif decision.allowed:
                    admitted += cost
            stopped.append(time.monotonic())

        try:
            async with asyncio.timeout(LOAD_SECONDS + 20):
                started = await client.time()
                begun = time.monotonic()
                await asyncio.gather(*(hammer(index) for index in range(tasks)))
                ended = await client.time()
        finally:
            await storage.close()
            await storage.client.connection_pool.disconnect()  # close() leaves it open
        elapsed = (ended[0] + ended[1] / 1e6) - (started[0] + started[1] / 1e6)
        return admitted, calls, not_redis, elapsed, min(stopped) - begun

    admitted, calls, not_redis, elapsed, busy = async_redis_client(body)

    assert not_redis == 0
    assert LOAD_SECONDS <= elapsed < LOAD_SECONDS + 5
    assert calls > 10 * (CAPACITY + REFILL * elapsed) / MAX_COST
    # The tail after the first worker stopped (the others finishing their last calls) asks
    # for less than the refill: the floor is counted over the time they all asked.
    assert_within_bucket_bound(admitted, elapsed, busy)


# -- threads: exact answers with a stopped clock -----------------------------------------------


def run_threads(count: int, target: Callable[[int], None]) -> None:
    """Start ``count`` threads on ``target(index)`` at once (a barrier); join them, bounded."""
    barrier = threading.Barrier(count)
    failures: list[BaseException] = []

    def start(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            target(index)
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=start, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "threads did not finish"
    assert failures == []


@pytest.fixture(params=["memory", "redis"])
def storage(request: pytest.FixtureRequest) -> Iterator[MemoryStorage | RedisStorage]:
    if request.param == "memory":
        yield MemoryStorage(clock=lambda: NOW / 1000)
        return
    client: redis.Redis = request.getfixturevalue("redis_client")
    redis_storage = RedisStorage(client, timeout=CALL_TIMEOUT)
    try:
        yield redis_storage
    finally:
        redis_storage.close()
        redis_storage.client.connection_pool.disconnect()  # close() leaves it open


def test_hundred_threads_against_a_limit_of_five_admit_exactly_five(
    storage: MemoryStorage | RedisStorage,
) -> None:
    # limits' test_concurrency: 100 threads, a 5-per-window limit, exactly 5 succeed.
    limiter = Limiter(storage, on_backend_error="closed")
    quota = Quota("per-minute", limit=5, window_seconds=60, algorithm="fixed_window")
    decisions: list[Decision] = []

    run_threads(100, lambda _: decisions.append(limiter.acquire(KEY, 1, [quota], now=NOW)))

    assert len(decisions) == 100
    assert {decision.source for decision in decisions} == {storage.name}
    assert sum(decision.allowed for decision in decisions) == 5


def test_sixteen_threads_drain_a_memory_bucket_to_exactly_its_capacity() -> None:
    limiter = Limiter(MemoryStorage(clock=lambda: NOW / 1000))
    quota = Quota(**BUCKET)  # type: ignore[arg-type]
    admitted = [0] * 16

    def drain(index: int) -> None:
        rng = random.Random(index)
        for _ in range(MAX_CALLS_PER_WORKER):
            cost = rng.randint(1, MAX_COST)
            decision = limiter.acquire(KEY, cost, [quota])
            if decision.allowed:
                admitted[index] += cost
            elif cost == 1:
                return  # not even 1 left: the bucket is empty (integer costs, no refill)

    run_threads(16, drain)

    assert sum(admitted) == CAPACITY
    assert limiter.peek(KEY, [quota]).remaining == 0


def test_concurrent_multi_quota_acquires_are_all_or_nothing(
    storage: MemoryStorage | RedisStorage,
) -> None:
    # Requests on (a, b), on a alone and on b alone race each other; if a refused (a, b)
    # request ever debited one quota, a's or b's loss would exceed what was admitted on it.
    limiter = Limiter(storage, on_backend_error="closed")
    a = Quota("a", capacity=150, refill_per_second=1)
    b = Quota("b", capacity=100, refill_per_second=1, algorithm="gcra")
    kinds = {"ab": [a, b], "a": [a], "b": [b]}
    names = list(kinds)
    admitted = dict.fromkeys(kinds, 0)
    refused = dict.fromkeys(kinds, 0)
    lock = threading.Lock()

    def hammer(index: int) -> None:
        kind = names[index % len(names)]
        rng = random.Random(index)
        for _ in range(60):
            cost = rng.randint(1, MAX_COST)
            decision = limiter.acquire(KEY, cost, kinds[kind], now=NOW)
            assert decision.source == storage.name
            with lock:
                if decision.allowed:
                    admitted[kind] += cost
                else:
                    refused[kind] += 1

    run_threads(12, hammer)

    left = {status.name: status.remaining for status in limiter.peek(KEY, [a, b], now=NOW).quotas}
    assert 150 - left["a"] == pytest.approx(admitted["ab"] + admitted["a"], abs=1e-9)
    assert 100 - left["b"] == pytest.approx(admitted["ab"] + admitted["b"], abs=1e-9)
    assert all(count > 0 for count in refused.values())  # every kind met a full quota


def test_concurrent_shared_quota_refunds_keep_every_budget_consistent(
    storage: MemoryStorage | RedisStorage,
) -> None:
    # A shared quota is a second call, undone when it refuses: under contention every
    # tenant must end up debited by exactly what it was admitted, and so must the shared one.
    limiter = Limiter(storage, on_backend_error="closed")
    tenant = Quota("tenant", capacity=60, refill_per_second=1)
    platform = Quota("platform", capacity=150, refill_per_second=1, shared=True)
    tenants = ["acme", "globex", "initech", "umbrella"]
    admitted = dict.fromkeys(tenants, 0)
    lock = threading.Lock()

    def hammer(index: int) -> None:
        key = tenants[index % len(tenants)]
        rng = random.Random(index)
        for _ in range(40):
            cost = rng.randint(1, MAX_COST)
            decision = limiter.acquire(key, cost, [tenant, platform], now=NOW)
            assert decision.source == storage.name
            if decision.allowed:
                with lock:
                    admitted[key] += cost

    run_threads(16, hammer)

    total = sum(admitted.values())
    assert total <= 150
    assert all(cost <= 60 for cost in admitted.values())
    for key in tenants:
        left = limiter.peek(key, [tenant, platform], now=NOW)
        by_name = {status.name: status.remaining for status in left.quotas}
        assert 60 - by_name["tenant"] == pytest.approx(admitted[key], abs=1e-9), key
        assert 150 - by_name["platform"] == pytest.approx(total, abs=1e-9)
