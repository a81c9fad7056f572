"""Sharded shared quotas on a real 3-master Redis Cluster: a fleet of async limiters (each
its own ``AsyncRedisStorage`` and cluster client) whose ``[global]`` quota has N = 3 shards
spreads its shared calls over the 3 masters, counted with each node's ``INFO
commandstats`` (``cmdstat_evalsha``), where N = 1 puts them all on one; and what the fleet
admits in real time, against the bound docs/scale-out.md writes (C + r·T in any window).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

import redis

from quotaql import AsyncLimiter, Limiter, Quota
from quotaql.limiter.shards import RetriedStatus, homes
from quotaql.storage.base import Debit
from quotaql.storage.keys import shard_key
from quotaql.storage.redis import AsyncRedisStorage, RedisStorage, redis_key

if TYPE_CHECKING:
    from tests.support.servers import RedisCluster

FLEET = 3  # workers, each with its own storage and client
SUBJECTS = [f"key:{i}" for i in range(240)]


def evalsha_calls(cluster: RedisCluster) -> dict[int, int]:
    """``cmdstat_evalsha`` calls of each master, by port."""
    calls = {}
    for node in cluster.nodes:
        with redis.Redis(cluster.host, node.port, socket_timeout=5) as client:
            stats = client.info("commandstats")
        calls[node.port] = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return calls


async def _fleet_run(
    cluster: RedisCluster, quota: Quota, *, seconds: float | None, decisions: int, callers: int
) -> tuple[int, int, float, set[str]]:
    """``callers`` concurrent callers over a fleet of ``FLEET`` limiters, each asking the
    shared ``quota`` cost 1 for a random subject: ``decisions`` of them, or for
    ``seconds``. What was admitted, asked, the seconds it took, and the sources."""
    storages = [AsyncRedisStorage(cluster.async_client(), timeout=2.0) for _ in range(FLEET)]
    limiters = [AsyncLimiter(s, on_backend_error="closed") for s in storages]
    rng = random.Random(5)
    admitted = asked = 0
    sources: set[str] = set()
    try:
        # Every worker's scripts loaded and slots known before the clock starts.
        for limiter in limiters:
            for shard in range(quota.shards):
                warm = next(s for s in SUBJECTS if homes(s, quota.shards)[0] == shard)
                await limiter.acquire(warm, 0, [quota])
        started = time.monotonic()
        deadline = None if seconds is None else started + seconds

        async def caller() -> None:
            nonlocal admitted, asked
            while (deadline is None and asked < decisions) or (
                deadline is not None and time.monotonic() < deadline
            ):
                asked += 1
                limiter = limiters[rng.randrange(FLEET)]
                decision = await limiter.acquire(rng.choice(SUBJECTS), 1, [quota])
                sources.add(decision.source)
                admitted += decision.allowed

        await asyncio.wait_for(asyncio.gather(*(caller() for _ in range(callers))), 60)
        return admitted, asked, time.monotonic() - started, sources
    finally:
        for storage in storages:
            await storage.close()


def test_a_fleet_spreads_a_sharded_shared_quota_over_the_three_masters(
    redis_cluster: RedisCluster,
) -> None:
    shares = {}
    for shards in (1, 3):
        redis_cluster.flushall()
        quota = Quota("global", capacity=1e9, refill_per_second=1e6, shared=True, shards=shards)
        before = evalsha_calls(redis_cluster)
        admitted, asked, _, sources = asyncio.run(
            _fleet_run(redis_cluster, quota, seconds=None, decisions=900, callers=16)
        )
        after = evalsha_calls(redis_cluster)
        assert admitted == asked >= 900
        assert sources == {"redis"}
        calls = sorted(after[port] - before[port] for port in after)
        shares[shards] = [round(count / sum(calls), 3) for count in calls]
        assert sum(calls) >= asked  # every decision one script call (and the warm-up ones)
    assert shares[1][:2] == [0.0, 0.0]  # N = 1: one master takes every shared call
    assert min(shares[3]) > 0.25, shares  # N = 3: each master a third, give or take


def test_the_fleet_admits_no_more_than_one_exact_bucket(redis_cluster: RedisCluster) -> None:
    # The written bound: in any window of T, at most C + r·T in all (each shard C/N + r/N·T),
    # measured from before the first call to after the last (every refill counted).
    redis_cluster.flushall()
    capacity, rate = 90.0, 60.0
    quota = Quota("global", capacity=capacity, refill_per_second=rate, shared=True, shards=3)
    admitted, asked, elapsed, sources = asyncio.run(
        _fleet_run(redis_cluster, quota, seconds=1.5, decisions=0, callers=24)
    )
    assert sources == {"redis"}
    exact = capacity + rate * elapsed
    assert asked > 2 * exact  # the demand was well above the quota
    assert admitted <= exact  # over-admission <= 0
    assert admitted >= 0.8 * exact  # and every shard drained: little left unused


def test_a_refund_goes_back_to_the_second_shard_through_the_queue(
    redis_cluster: RedisCluster,
) -> None:
    # Deferred refunds (the async limiter's queue) of a decision its subject's second shard
    # allowed are applied on that shard, on its master, not on the home one.
    redis_cluster.flushall()
    quota = Quota("global", capacity=30, refill_per_second=1e-3, shared=True, shards=3)
    shard = Quota("global", capacity=10, refill_per_second=1e-3 / 3, shared=True)
    subject = next(s for s in SUBJECTS if homes(s, 3) == (0, 2))

    async def body() -> tuple[float, ...]:
        storage = AsyncRedisStorage(redis_cluster.async_client(), timeout=2.0)
        limiter = AsyncLimiter(storage, on_backend_error="closed")
        try:
            drained = await storage.acquire(Debit(shard_key(0, 3), 10, [shard]))
            assert drained.allowed
            decision = await limiter.acquire(subject, 4, [quota])
            assert decision.allowed
            assert decision.quotas[0].__class__ is RetriedStatus
            await limiter.refund(subject, 3, [quota], decision=decision)
            assert await limiter.flush() == 0
            peeked = [await storage.peek(shard_key(i, 3), [shard]) for i in range(3)]
            return tuple(decision.remaining for decision in peeked)
        finally:
            await storage.close()

    home, _, second = asyncio.run(body())
    assert home < 0.01  # still drained: nothing given back there
    assert 8.99 < second < 9.01  # 10 - 4 + 3


def test_the_sync_storage_keeps_each_shard_on_its_own_master(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    quota = Quota("global", capacity=300, refill_per_second=30, shared=True, shards=3)
    shard = Quota("global", capacity=100, refill_per_second=10, shared=True)
    limiter = Limiter(RedisStorage(cluster_client, timeout=2.0), on_backend_error="closed")
    decisions = [limiter.acquire(subject, 1, [quota]) for subject in SUBJECTS[:60]]
    assert all(decision.source == "redis" for decision in decisions)
    keys = [redis_key("quotaql", shard_key(i, 3), shard) for i in range(3)]
    assert all(cluster_client.exists(key) for key in keys)
    assert len({redis_cluster.node_for_key(key) for key in keys}) == 3
    assert cluster_client.exists("quotaql:{global}:~q") == 0  # N = 3: not the one key
