"""Lease sets in a real Redis: the server's clock, key TTLs, real-time expiry, concurrent
takers (threads and asyncio tasks, the ZSET sampled from outside), a Redis killed mid-way,
and a 3-master cluster."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql.errors import StorageError, StorageTimeout
from quotaql.storage import (
    AsyncRedisLeases,
    AsyncRedisStorage,
    LeaseSpec,
    RedisLeases,
    RedisStorage,
)
from quotaql.storage.leases import lease_key

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis
    import redis.asyncio
    import redis.cluster

    from tests.support.servers import AsyncRunner, RedisCluster, RedisServer

TIMEOUT = 5.0
TIER = LeaseSpec("tier", 3)
FIELD = LeaseSpec("field:Query.search", 2)


@pytest.fixture
def leases(redis_client: redis.Redis) -> Iterator[RedisLeases]:
    storage = RedisStorage(redis_client, timeout=TIMEOUT)
    try:
        yield RedisLeases(storage)
    finally:
        storage.close()


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def wait_until(predicate: Any, seconds: float) -> float:
    """Poll ``predicate`` every 10 ms for at most ``seconds``; the time it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not true within {seconds} s")
        time.sleep(0.01)
    return time.monotonic() - start


# -- the server's clock and the keys' TTLs ---------------------------------------------------


def test_scores_are_expiries_in_the_servers_clock(
    leases: RedisLeases, redis_client: redis.Redis
) -> None:
    before = server_ms(redis_client)
    result = leases.take("acme", [TIER, FIELD], "op", 30_000)
    after = server_ms(redis_client)
    assert result.taken
    assert before <= result.at <= after
    for spec in (TIER, FIELD):
        key = lease_key("quotaql", "acme", spec.name)
        assert redis_client.type(key) == b"zset"
        assert redis_client.zrange(key, 0, -1, withscores=True) == [(b"op", result.at + 30_000)]
    refused = leases.take("acme", [LeaseSpec("field:Query.search", 1)], "op-2", 30_000)
    assert 30_000 - (refused.at - result.at) == refused.next_free_ms


def test_a_keys_ttl_is_its_longest_lease_and_is_never_lowered(
    leases: RedisLeases, redis_client: redis.Redis
) -> None:
    key = lease_key("quotaql", "acme", "tier")
    leases.take("acme", [TIER], "long", 60_000)
    assert 59_000 < redis_client.pttl(key) <= 60_000
    leases.take("acme", [TIER], "short", 1_000)  # a shorter ttl never lowers it
    assert 59_000 < redis_client.pttl(key) <= 60_000
    assert leases.renew("acme", ["tier"], ["short"], 120_000) == 1
    assert 119_000 < redis_client.pttl(key) <= 120_000
    assert leases.renew("acme", ["tier"], ["long"], 1_000) == 1
    assert 119_000 < redis_client.pttl(key) <= 120_000
    # A renew that finds nothing leaves the key alone; a release of the last lease deletes it.
    assert leases.renew("acme", ["tier"], ["ghost"], 500_000) == 0
    assert redis_client.pttl(key) <= 120_000
    assert leases.release("acme", ["tier"], "long") == 1
    assert leases.release("acme", ["tier"], "short") == 1
    assert redis_client.exists(key) == 0


def test_an_idle_tenants_sets_disappear_by_themselves(
    leases: RedisLeases, redis_client: redis.Redis
) -> None:
    # A holder that crashed: never released, never renewed.
    assert leases.take("idle", [TIER, FIELD], "op", 200).taken
    keys = [lease_key("quotaql", "idle", spec.name) for spec in (TIER, FIELD)]
    assert redis_client.exists(*keys) == 2
    wait_until(lambda: redis_client.exists(*keys) == 0, 5)
    assert redis_client.dbsize() == 0


def test_a_crashed_holders_leases_free_within_their_ttl_in_real_time(
    leases: RedisLeases,
) -> None:
    ttl = 300
    start = time.monotonic()
    for i in range(3):
        assert leases.take("acme", [TIER], f"dead-{i}", ttl).taken
    last_taken = time.monotonic()  # a loaded machine spreads the three takes out
    refused = leases.take("acme", [TIER], "next", ttl)
    if time.monotonic() - start < ttl / 1000:  # a loaded machine may already be past it
        assert not refused.taken
        assert 0 < (refused.next_free_ms or 0) <= ttl
    # The first slot frees with the first dead lease, the last with the last one.
    waited = wait_until(lambda: leases.take("acme", [TIER], "next", 30_000).taken, 5)
    assert time.monotonic() - start <= ttl / 1000 + 1.0, waited
    alone = wait_until(lambda: leases.count("acme", "tier") == 1, 5)
    assert time.monotonic() - last_taken <= ttl / 1000 + 1.0, alone
    assert leases.release("acme", ["tier"], "dead-0") == 0  # expired: the caller counts it


# -- concurrent takers -------------------------------------------------------------------------


class Sampler:
    """Samples ZCARD of a key from its own connection until stopped: the peak it saw."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._client = client
        self._key = key
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        deadline = time.monotonic() + 60
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.peak = max(self.peak, int(self._client.zcard(self._key)))
            self.samples += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def test_takers_in_threads_never_exceed_the_maximum(
    leases: RedisLeases, redis_server: RedisServer
) -> None:
    spec = LeaseSpec("tier", 3)
    running = peak = refused = 0
    lock = threading.Lock()

    def worker(n: int) -> None:
        nonlocal running, peak, refused
        for i in range(60):
            lease = f"{n}-{i}"
            if not leases.take("acme", [spec], lease, 30_000).taken:
                with lock:
                    refused += 1
                continue
            with lock:
                running += 1
                peak = max(peak, running)
            time.sleep(0.001)  # the operation
            with lock:
                running -= 1
            assert leases.release("acme", ["tier"], lease) == 1

    with redis_server.client() as sampling:
        sampler = Sampler(sampling, lease_key("quotaql", "acme", "tier"))
        try:
            threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        finally:
            sampler.stop()
    assert not any(thread.is_alive() for thread in threads)
    assert sampler.samples > 10
    assert 1 <= sampler.peak <= 3
    assert 1 <= peak <= 3
    assert refused > 0  # 8 threads on 3 slots: some were refused
    assert leases.count("acme", "tier") == 0


def test_takers_in_asyncio_tasks_never_exceed_the_maximum(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    spec = LeaseSpec("tier", 3)
    key = lease_key("quotaql", "acme", "tier")

    async def body(client: redis.asyncio.Redis) -> tuple[int, int, int, int]:
        storage = AsyncRedisStorage(client, timeout=TIMEOUT)
        leases = AsyncRedisLeases(storage)
        running = peak = refused = sampled = 0
        done = asyncio.Event()

        async def sampler() -> None:
            nonlocal sampled
            while not done.is_set():
                sampled = max(sampled, int(await client.zcard(key)))

        async def worker(n: int) -> None:
            nonlocal running, peak, refused
            for i in range(25):
                lease = f"{n}-{i}"
                if not (await leases.take("acme", [spec], lease, 30_000)).taken:
                    refused += 1
                    await asyncio.sleep(0)
                    continue
                running += 1
                peak = max(peak, running)
                await asyncio.sleep(0.001)  # the operation
                running -= 1
                assert await leases.release("acme", ["tier"], lease) == 1

        sampling = asyncio.create_task(sampler())
        try:
            async with asyncio.timeout(60):
                await asyncio.gather(*(worker(n) for n in range(20)))
        finally:
            done.set()
            await sampling
            left = await leases.count("acme", "tier")
            await storage.close()
        return peak, sampled, refused, left

    peak, sampled, refused, left = async_redis_client(body)
    assert 1 <= peak <= 3
    assert 1 <= sampled <= 3
    assert refused > 0
    assert left == 0


# -- a Redis killed mid-way ----------------------------------------------------------------------


def test_a_killed_redis_is_a_storage_error_then_works_after_restart(
    fresh_redis_server: RedisServer,
) -> None:
    with fresh_redis_server.client() as client:
        storage = RedisStorage(client, timeout=0.2)
        try:
            leases = RedisLeases(storage)
            assert leases.take("acme", [TIER], "op", 30_000).taken
            fresh_redis_server.kill()
            for call in (
                lambda: leases.take("acme", [TIER], "op-2", 30_000),
                lambda: leases.release("acme", ["tier"], "op"),
                lambda: leases.renew("acme", ["tier"], ["op"], 30_000),
                lambda: leases.count("acme", "tier"),
            ):
                with pytest.raises(StorageError, match="Redis failed"):
                    call()
            fresh_redis_server.restart()  # empty, and without the script: NOSCRIPT, reload
            assert leases.take("acme", [TIER], "op-2", 30_000).in_flight == (1,)
            assert leases.release("acme", ["tier"], "op") == 0  # lost with the old server
            fresh_redis_server.pause()
            try:
                with pytest.raises(StorageTimeout):
                    leases.take("acme", [TIER], "op-3", 30_000)
            finally:
                fresh_redis_server.resume()
            # The timed-out take was in the socket: Redis ran it once resumed. A caller
            # that gets an error from take must release the lease (or let it expire).
            assert leases.count("acme", "tier") == 2
            assert leases.release("acme", ["tier"], "op-3") == 1
        finally:
            storage.close()


def test_a_killed_redis_is_a_storage_error_for_async_leases_too(
    fresh_redis_server: RedisServer,
) -> None:
    async def body() -> None:
        client = fresh_redis_server.async_client()
        storage = AsyncRedisStorage(client, timeout=0.2)
        try:
            leases = AsyncRedisLeases(storage)
            assert (await leases.take("acme", [TIER], "op", 30_000)).taken
            fresh_redis_server.kill()
            with pytest.raises(StorageError):
                await leases.take("acme", [TIER], "op-2", 30_000)
            with pytest.raises(StorageError):
                await leases.renew("acme", ["tier"], ["op"], 30_000)
            fresh_redis_server.restart()
            assert (await leases.take("acme", [TIER], "op-2", 30_000)).in_flight == (1,)
            fresh_redis_server.pause()
            try:
                with pytest.raises(StorageTimeout):
                    await leases.release("acme", ["tier"], "op-2")
            finally:
                fresh_redis_server.resume()
            # The timed-out release had been sent: Redis ran it once resumed. A release is
            # safe to retry: the retry finds the lease gone.
            assert await leases.release("acme", ["tier"], "op-2") == 0
            assert await leases.count("acme", "tier") == 0
        finally:
            await storage.close()
            await client.aclose()

    asyncio.run(body())


# -- Redis Cluster ---------------------------------------------------------------------------


def tenants_by_master(cluster: RedisCluster) -> dict[int, str]:
    """A tenant whose lease sets live on each master."""
    found: dict[int, str] = {}
    for i in range(1_000):
        tenant = f"tenant-{i}"
        found.setdefault(cluster.node_for_key(lease_key("quotaql", tenant, "tier")), tenant)
        if len(found) == len(cluster.nodes):
            return found
    raise AssertionError("no tenant for some master")


def test_lease_sets_of_tenants_spread_over_the_masters(
    cluster_client: redis.cluster.RedisCluster, redis_cluster: RedisCluster
) -> None:
    spread = tenants_by_master(redis_cluster)
    assert len(spread) == 3
    storage = RedisStorage(cluster_client, timeout=TIMEOUT)
    try:
        leases = RedisLeases(storage)
        for tenant in spread.values():
            # Two limits in one call: the tenant's hash tag puts both sets in one slot.
            assert leases.take(tenant, [TIER, FIELD], "op", 30_000).in_flight == (1, 1)
            assert leases.take(tenant, [TIER, FIELD], "op-2", 30_000).in_flight == (2, 2)
            refused = leases.take(tenant, [TIER, FIELD], "op-3", 30_000)
            assert (refused.taken, refused.limited_by) == (False, FIELD.name)
        for port, tenant in spread.items():
            keys = [lease_key("quotaql", tenant, spec.name) for spec in (TIER, FIELD)]
            assert len({int(cluster_client.cluster_keyslot(key)) for key in keys}) == 1
            for node in redis_cluster.nodes:
                with node.client() as direct:
                    # On the master that owns the tenant's slot, and on no other.
                    stored = set(direct.keys(f"quotaql:{{t:{tenant}}}:*"))
                    assert stored == (
                        {key.encode() for key in keys} if node.port == port else set()
                    )
                    if node.port == port:
                        assert direct.zcard(keys[1]) == 2
            assert leases.renew(tenant, [TIER.name, FIELD.name], ["op", "op-2"], 30_000) == 4
            assert leases.release(tenant, [TIER.name, FIELD.name], "op") == 2
            assert leases.count(tenant, FIELD.name) == 1
    finally:
        storage.close()


def test_async_lease_sets_spread_over_the_masters(
    async_cluster_client: AsyncRunner[Any], redis_cluster: RedisCluster
) -> None:
    spread = tenants_by_master(redis_cluster)

    async def body(client: Any) -> list[int]:
        storage = AsyncRedisStorage(client, timeout=TIMEOUT)
        try:
            leases = AsyncRedisLeases(storage)
            counts = []
            for tenant in spread.values():
                for i in range(3):
                    await leases.take(tenant, [TIER, FIELD], f"op-{i}", 30_000)
                counts.append(await leases.count(tenant, TIER.name))
                counts.append(await leases.count(tenant, FIELD.name))
            return counts
        finally:
            await storage.close()

    assert async_cluster_client(body) == [2, 2] * 3  # the third take was refused everywhere
    for port, tenant in spread.items():
        node = next(node for node in redis_cluster.nodes if node.port == port)
        with node.client() as direct:
            assert direct.zcard(lease_key("quotaql", tenant, TIER.name)) == 2
