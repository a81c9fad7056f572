"""The first calls of a fresh async storage on a real 3-master Redis Cluster.

A worker that starts under load sends its first decisions all at once. On a fresh
``redis.asyncio`` cluster client those concurrent first commands raced the client's lazy
discovery of the cluster, and some failed ("Connection closed by server"): a healthy cluster
counted as failing, those decisions answered by the fail mode, the breaker perhaps opened.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from quotaql import Quota
from quotaql.storage import Debit
from quotaql.storage.redis import AsyncRedisStorage

if TYPE_CHECKING:
    from tests.support.servers import RedisCluster

QUOTA = Quota("tenant", capacity=1000, refill_per_second=1e-6)
CALLS = 40
ROUNDS = 4  # a fresh client each: the race showed in most rounds before the fix


def test_concurrent_first_calls_of_a_fresh_cluster_storage_all_reach_redis(
    redis_cluster: RedisCluster,
) -> None:
    async def round_(tenant: str) -> list[object]:
        storage = AsyncRedisStorage(redis_cluster.async_client(), timeout=2.0)
        try:
            return list(
                await asyncio.gather(
                    *(storage.acquire(Debit(tenant, 1, [QUOTA])) for _ in range(CALLS)),
                    return_exceptions=True,
                )
            )
        finally:
            await storage.close()

    redis_cluster.flushall()
    for index in range(ROUNDS):
        results = asyncio.run(round_(f"tenant-{index}"))
        failed = [result for result in results if isinstance(result, BaseException)]
        assert failed == [], f"round {index}: {failed[:3]}"
        remaining = sorted(round(result.remaining) for result in results)  # type: ignore[attr-defined]
        assert remaining == [QUOTA.maximum - n for n in range(CALLS, 0, -1)]  # each debited once
