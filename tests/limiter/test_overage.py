"""The limiter's ``charge``: an operation's overage, debited whether it fits or not, on the
quotas its debit was made on, in one storage call per slot; what "below zero" means for each
algorithm; nothing charged over a refusal or a debit that never happened; the fail modes.

Memory, Redis and Redis Cluster (real servers), sync and async, with explicit ``now=``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import AsyncLimiter, AsyncRedisStorage, Limiter, MemoryStorage, Quota, RedisStorage

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis

    from tests.support.servers import AsyncRunner

NOW = 1_700_000_000_000  # ms, a multiple of every window here
ALGORITHMS = ("token_bucket", "gcra", "sliding_log", "sliding_counter", "fixed_window")


def quota(algorithm: str, name: str = "tenant", size: float = 100, **kwargs: Any) -> Quota:
    """A bucket of ``size`` refilled at 10/s, or a window of ``size`` per 10 s."""
    if algorithm in ("token_bucket", "gcra"):
        return Quota(name, capacity=size, refill_per_second=10, algorithm=algorithm, **kwargs)
    return Quota(name, limit=size, window_seconds=10, algorithm=algorithm, **kwargs)


# After a debit of 10 and an overage of 190 at NOW (200 of 100: 100 below zero), when a
# request of 1 fits again, in ms after NOW: what "below zero" means for each algorithm.
FITS_AGAIN_MS = {
    # The bucket's full-again time moved 19 s later: 101 tokens of refill at 10/s.
    "token_bucket": 10_100,
    "gcra": 10_100,
    # The 200 points are entries of the log: they leave it one window after they were made.
    "sliding_log": 10_000,
    # Counted in this window; in the next, weighted by its overlap: 200 x w + 1 <= 100
    # once w <= 0.495, 5.05 s into the next window.
    "sliding_counter": 15_050,
    # Counted in this window only: the next one starts from 0 (a window forgets its debt).
    "fixed_window": 10_000,
}


def storage_of(request: pytest.FixtureRequest, kind: str) -> Any:
    if kind == "memory":
        return MemoryStorage()
    if kind == "redis":
        client: redis.Redis = request.getfixturevalue("redis_client")
        return RedisStorage(client)
    cluster: redis.cluster.RedisCluster = request.getfixturevalue("cluster_client")
    return RedisStorage(cluster)


@pytest.fixture(params=["memory", "redis", "redis-cluster"])
def limiter(request: pytest.FixtureRequest) -> Iterator[Limiter]:
    storage = storage_of(request, str(request.param))
    yield Limiter(storage, on_backend_error="closed")  # a failure shows, never a silent allow
    if isinstance(storage, RedisStorage):
        storage.close()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_an_overage_goes_below_zero_and_the_subject_waits_until_it_has_passed(
    limiter: Limiter, algorithm: str
) -> None:
    q = quota(algorithm)
    decision = limiter.acquire("acme", 10, [q], now=NOW)
    assert decision.allowed
    limiter.charge("acme", 190, [q], decision=decision, now=NOW)  # it ran 200 in all
    assert limiter.peek("acme", [q], now=NOW).remaining == 0  # shown no lower than 0
    fits = FITS_AGAIN_MS[algorithm]
    refused = limiter.acquire("acme", 1, [q], now=NOW)
    assert not refused.allowed
    assert refused.reason == "rate_limited"
    assert refused.retry_after == pytest.approx(fits / 1000, abs=0.002)
    assert not limiter.acquire("acme", 1, [q], now=NOW + fits - 2).allowed
    assert limiter.acquire("acme", 1, [q], now=NOW + fits).allowed
    # Another subject is not touched.
    assert limiter.peek("other", [q], now=NOW).remaining == 100


def test_each_quota_pays_its_own_amount_and_a_zero_leaves_a_quota_as_it_is(
    limiter: Limiter,
) -> None:
    tenant = quota("token_bucket")
    daily = quota("sliding_counter", "daily", 1000)
    field = quota("fixed_window", "field:Query.items", 50, refundable=False)
    quotas = [tenant, daily, field]
    decision = limiter.acquire("acme", 10, quotas, now=NOW)
    limiter.charge("acme", 30, quotas, amounts=[30, 15, 0], decision=decision, now=NOW)
    left = {s.name: s.remaining for s in limiter.peek("acme", quotas, now=NOW).quotas}
    assert left == {"tenant": 60, "daily": 975, "field:Query.items": 40}


def test_a_shared_quota_pays_the_overage_too(limiter: Limiter) -> None:
    tenant, platform = quota("token_bucket"), quota("gcra", "platform", 1000, shared=True)
    decision = limiter.acquire("acme", 10, [tenant, platform], now=NOW)
    limiter.charge("acme", 40, [tenant, platform], decision=decision, now=NOW)
    assert limiter.peek("acme", [tenant], now=NOW).remaining == 50
    assert limiter.peek("someone-else", [platform], now=NOW).remaining == 950


def test_nothing_is_charged_over_a_refusal_or_a_decision_that_debited_nothing(
    limiter: Limiter,
) -> None:
    q = quota("token_bucket")
    assert limiter.acquire("acme", 100, [q], now=NOW).allowed
    refused = limiter.acquire("acme", 10, [q], now=NOW)
    assert not refused.allowed
    limiter.charge("acme", 50, [q], decision=refused, now=NOW)  # it never ran
    fail_open = refused._replace(allowed=True, source="fail_open", reason=None)
    limiter.charge("acme", 50, [q], decision=fail_open, now=NOW)  # it debited nothing
    later = limiter.acquire("acme", 10, [q], now=NOW + 1_000)
    assert later.allowed  # 10 refilled in a second, nothing more owed


def test_a_charge_is_checked_like_a_debit(limiter: Limiter) -> None:
    q = quota("token_bucket")
    with pytest.raises(ValueError, match="finite number >= 0"):
        limiter.charge("acme", -5, [q])
    with pytest.raises(ValueError, match="one amount per quota"):
        limiter.charge("acme", 5, [q], amounts=[1, 2])
    assert limiter.peek("acme", [q], now=NOW).remaining == 100


# -- one storage call ----------------------------------------------------------------------


def evalsha_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))


def test_the_overage_of_several_quotas_is_one_script_call(redis_client: redis.Redis) -> None:
    storage = RedisStorage(redis_client)
    try:
        limiter = Limiter(storage, on_backend_error="closed")
        quotas = [quota("token_bucket"), quota("sliding_log", "daily", 1000),
                  quota("gcra", "op:Export", 50)]  # fmt: skip
        decision = limiter.acquire("acme", 10, quotas, now=NOW)
        before = evalsha_calls(redis_client)
        limiter.charge("acme", 20, quotas, amounts=[20, 20, 5], decision=decision, now=NOW)
        assert evalsha_calls(redis_client) - before == 1  # all of the tenant's, atomically
        left = {s.name: s.remaining for s in limiter.peek("acme", quotas, now=NOW).quotas}
        assert left == {"tenant": 70, "daily": 970, "op:Export": 35}
    finally:
        storage.close()


# -- async, and while the storage is down --------------------------------------------------


def test_the_async_limiter_charges_at_once_on_async_redis(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    async def body(client: Any) -> None:
        storage = AsyncRedisStorage(client)
        try:
            limiter = AsyncLimiter(storage, on_backend_error="closed")
            q = quota("token_bucket")
            decision = await limiter.acquire("acme", 10, [q], now=NOW)
            await limiter.charge("acme", 190, [q], decision=decision, now=NOW)
            assert limiter.refund_queue is not None
            assert not limiter.refund_queue.pending
            refused = await limiter.acquire("acme", 1, [q], now=NOW)
            assert refused.retry_after == pytest.approx(10.1, abs=0.002)
        finally:
            await storage.close()

    async_redis_client(body)


def test_the_async_limiter_charges_memory_at_once() -> None:
    async def body() -> None:
        limiter = AsyncLimiter(MemoryStorage())
        q = quota("gcra")
        decision = await limiter.acquire("acme", 10, [q], now=NOW)
        await limiter.charge("acme", 190, [q], decision=decision, now=NOW)
        assert not (await limiter.acquire("acme", 1, [q], now=NOW + 10_000)).allowed

    asyncio.run(body())


def test_while_redis_is_away_local_charges_the_fallback_and_open_charges_nothing(
    redis_client: redis.Redis,
) -> None:
    q = quota("token_bucket")
    for mode, fits_in_a_second in (("local", False), ("open", True)):
        storage = RedisStorage(redis_client)
        try:
            limiter = Limiter(storage, on_backend_error=mode)  # type: ignore[arg-type]
            decision = limiter.acquire(f"acme-{mode}", 10, [q])
            assert decision.source == "redis"
            limiter.breaker.failure(timeout=True)  # the breaker opens: Redis is away
            limiter.charge(f"acme-{mode}", 190, [q], decision=decision)
            later = limiter.acquire(f"acme-{mode}", 1, [q])
            assert later.source == ("fallback" if mode == "local" else "fail_open")
            assert later.allowed is fits_in_a_second
        finally:
            storage.close()
