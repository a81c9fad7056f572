"""The async limiter's path to Redis: each decision timed once, a storage subclass's own
``acquire`` or ``evaluate`` still the one called, bad arguments refused by the storage.

Against a real private redis-server (the session's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from quotaql import AsyncLimiter, AsyncRedisStorage, Quota
from quotaql.storage import Debit
from tests.limiter.test_limiter import CollectingRecorder

if TYPE_CHECKING:
    from collections.abc import Sequence

    import redis.asyncio

    from quotaql.policy.quota import Decision
    from tests.support.servers import AsyncRunner

NOW = 1_700_000_000_000
TENANT = Quota("tenant", capacity=100, refill_per_second=1)
PLATFORM = Quota("platform", capacity=1_000, refill_per_second=10, shared=True)


def test_each_redis_decision_is_told_once_with_its_duration(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    recorder = CollectingRecorder()

    async def body(client: redis.asyncio.Redis) -> list[Decision]:
        storage = AsyncRedisStorage(client)
        limiter = AsyncLimiter(storage, on_backend_error="open", recorder=recorder)
        try:
            made = [await limiter.acquire("acme", cost, [TENANT], now=NOW) for cost in (80, 30)]
            made.append(await limiter.acquire("acme", 10, [TENANT, PLATFORM], now=NOW))
            made.append(await limiter.acquire("acme", 5, [TENANT], costs=[5], now=NOW))
        finally:
            await storage.close()
        # Closed: its calls fail, and the fail mode's decision is told like any other.
        made.append(await limiter.acquire("acme", 1, [TENANT], now=NOW))
        return made

    made = async_redis_client(body)

    assert [decision for decision, _ in recorder.decisions] == made
    assert [(d.allowed, d.source) for d in made] == [
        (True, "redis"),
        (False, "redis"),
        (True, "redis"),
        (True, "redis"),
        (True, "fail_open"),
    ]
    assert all(seconds >= 0 for _, seconds in recorder.decisions)


class CountingStorage(AsyncRedisStorage):
    """The real storage, counting the calls of its own ``acquire`` and ``evaluate``."""

    def __init__(self, client: Any) -> None:
        super().__init__(client)
        self.acquired = 0
        self.evaluated = 0

    async def acquire(self, debit: Debit) -> Decision:
        self.acquired += 1
        return await super().acquire(debit)

    async def evaluate(self, script: Any, keys: Sequence[str], args: Sequence[str]) -> Any:
        self.evaluated += 1
        return await super().evaluate(script, keys, args)


def test_a_subclass_s_acquire_and_evaluate_are_the_ones_called(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    async def body(client: redis.asyncio.Redis) -> tuple[list[Decision], int, int]:
        storage = CountingStorage(client)
        limiter = AsyncLimiter(storage)
        try:
            made = [await limiter.acquire("acme", 40, [TENANT], now=NOW) for _ in range(3)]
            made.append(await storage.acquire(Debit("acme", 1, [TENANT], NOW)))
            with pytest.raises(ValueError, match="finite number"):
                await storage.acquire(Debit("acme", -1.0, [TENANT], NOW))
        finally:
            await storage.close()
        return made, storage.acquired, storage.evaluated

    made, acquired, evaluated = async_redis_client(body)

    assert [(d.allowed, d.remaining) for d in made] == [
        (True, 60),
        (True, 20),
        (False, 20),
        (True, 19),
    ]
    assert acquired == 5  # the limiter's three, and the two made here
    assert evaluated == 4  # every script call (the refused argument made none)


def test_the_storage_s_own_acquire_still_checks_its_arguments(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    async def body(client: redis.asyncio.Redis) -> None:
        storage = AsyncRedisStorage(client)
        try:
            with pytest.raises(TypeError, match="Quota objects"):
                await storage.acquire(Debit("acme", 1, ["tenant"], NOW))  # type: ignore[list-item]
            with pytest.raises(ValueError, match="one amount per quota"):
                await storage.acquire(Debit("acme", 1, [TENANT], NOW, [1, 2]))
            assert (await storage.acquire(Debit("acme", 1, [TENANT], NOW))).allowed
        finally:
            await storage.close()

    async_redis_client(body)
