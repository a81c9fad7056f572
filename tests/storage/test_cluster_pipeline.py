"""Implicit pipelining of AsyncRedisStorage on a real 3-master Redis Cluster (issue 26).

The calls of one loop iteration go out grouped by master, each group on that master's own
connections. Every test counts each decision against the budgets left in Redis (never lost,
never applied twice) and the commands each master ran (``INFO commandstats``). The topology
changes are real: a slot migrated with ``CLUSTER SETSLOT`` / ``MIGRATE`` under traffic, a
master killed, a master's scripts flushed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
from prometheus_client import CollectorRegistry
from redis.crc import key_slot

from quotaql import Quota
from quotaql.errors import StorageError, StorageNotReached, StorageTimeout
from quotaql.instrumentation import names
from quotaql.instrumentation.metrics import PrometheusMetrics
from quotaql.storage import Debit
from quotaql.storage._cluster_pipeline import MAX_TRIES, ClusterPipelines
from quotaql.storage.redis import AsyncRedisStorage, redis_key
from tests.support.servers import RedisCluster

if TYPE_CHECKING:
    from collections.abc import Iterator

T0 = 1_700_000_000_000
CAPACITY = 100_000
QUOTA = Quota("tenant", capacity=CAPACITY, refill_per_second=1)  # ``now`` fixed: no refill
LOG = Quota("ops", limit=1000, window_seconds=60, algorithm="sliding_log")  # keys of its own
CALLERS = 64


def slot_of(tenant: str) -> int:
    return key_slot(redis_key("quotaql", tenant, QUOTA).encode())


def owners(cluster: RedisCluster) -> dict[int, int]:
    """Slot -> the port of the master that owns it."""
    table: dict[int, int] = {}
    for port, ranges in cluster.slot_ranges().items():
        for start, end in ranges:
            table.update(dict.fromkeys(range(start, end + 1), port))
    return table


def tenants_by_master(cluster: RedisCluster, each: int) -> dict[int, list[str]]:
    """``each`` tenant names per master port, whose keys live on that master."""
    table = owners(cluster)
    found: dict[int, list[str]] = {port: [] for port in cluster.ports}
    index = 0
    while any(len(names) < each for names in found.values()):
        name = f"tenant-{index}"
        index += 1
        names = found[table[slot_of(name)]]
        if len(names) < each:
            names.append(name)
    return found


def evalsha_calls(cluster: RedisCluster) -> dict[int, int]:
    """Each master's ``EVALSHA`` calls since its last ``CONFIG RESETSTAT``."""
    calls = {}
    for node in cluster.nodes:
        with node.client(socket_timeout=5) as client:
            stats = client.info("commandstats").get("cmdstat_evalsha", {})
            calls[node.port] = int(stats.get("calls", 0))
    return calls


def reset_stats(cluster: RedisCluster) -> None:
    for node in cluster.nodes:
        with node.client(socket_timeout=5) as client:
            client.config_resetstat()


async def remaining(
    cluster: RedisCluster, tenants: list[str], *, pipeline: bool = False
) -> dict[str, float]:
    """What each tenant has left, read by a storage of its own (not pipelined unless asked:
    redis-py's own cluster calls leave a dead master's connections unclosed)."""
    storage = AsyncRedisStorage(cluster.async_client(), timeout=5.0, pipeline=pipeline)
    try:
        return {tenant: (await storage.peek(tenant, [QUOTA], T0)).remaining for tenant in tenants}
    finally:
        await storage.close()


def cluster_pipelines(storage: AsyncRedisStorage) -> ClusterPipelines:
    pipelines = storage.pipeline
    assert isinstance(pipelines, ClusterPipelines)
    return pipelines


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> RedisCluster:
    """The session's cluster, emptied, its statistics reset."""
    redis_cluster.flushall()
    reset_stats(redis_cluster)
    return redis_cluster


def _own_cluster() -> Iterator[RedisCluster]:
    with RedisCluster() as cluster:
        for node in cluster.nodes:  # a master down: the others keep serving their slots
            with node.client(socket_timeout=5) as client:
                client.config_set("cluster-require-full-coverage", "no")
        yield cluster


@pytest.fixture(scope="module")
def reshard_cluster() -> Iterator[RedisCluster]:
    """A 3-master cluster of this module's own, whose slots the tests move."""
    yield from _own_cluster()


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    """A 3-master cluster of the test's own (a master is killed)."""
    yield from _own_cluster()


def test_64_callers_over_three_masters_are_each_answered_once_and_debited_once(
    cluster: RedisCluster,
) -> None:
    by_master = tenants_by_master(cluster, 9)
    warm = [names.pop() for names in by_master.values()]  # the script loaded on each master
    tenants = [name for names in by_master.values() for name in names]
    rounds = 6
    costs = {tenant: 1 + index % 4 for index, tenant in enumerate(tenants)}

    async def caller(storage: AsyncRedisStorage, index: int) -> list[tuple[str, float]]:
        seen = []
        for turn in range(rounds):
            tenant = tenants[(index + turn) % len(tenants)]
            decision = await storage.acquire(Debit(tenant, costs[tenant], [QUOTA], T0))
            assert decision.allowed
            seen.append((tenant, decision.remaining))
        return seen

    async def body() -> tuple[list[list[tuple[str, float]]], dict[str, float], ClusterPipelines]:
        storage = AsyncRedisStorage(cluster.async_client(), timeout=5.0, pipeline_limit=16)
        try:
            for port in cluster.ports:  # whatever ran before on this cluster: NOSCRIPT below
                await asyncio.to_thread(_script_flush, cluster, port)
            for tenant in warm:
                await storage.peek(tenant, [QUOTA], T0)
            await asyncio.to_thread(reset_stats, cluster)
            answers = await asyncio.gather(*(caller(storage, i) for i in range(CALLERS)))
            pipelines = cluster_pipelines(storage)
        finally:
            await storage.close()
        return answers, await remaining(cluster, tenants), pipelines

    answers, left, pipelines = asyncio.run(body())
    calls: dict[str, int] = dict.fromkeys(tenants, 0)
    for seen in answers:
        for tenant, _ in seen:
            calls[tenant] += 1
    # Each tenant's answers are its budget after 1, 2, ... of its debits: each exactly once.
    for tenant in tenants:
        got = sorted((r for seen in answers for t, r in seen if t == tenant), reverse=True)
        cost = costs[tenant]
        assert got == [CAPACITY - cost * n for n in range(1, calls[tenant] + 1)], tenant
        assert left[tenant] == CAPACITY - cost * calls[tenant]
    # One EVALSHA per decision, on its own master (and one per peek), all three masters used,
    # in batches.
    per_master = evalsha_calls(cluster)
    for port, owned in by_master.items():
        assert per_master[port] == sum(calls[name] for name in owned) + len(owned)
    assert len(pipelines.pipelines) == 3
    assert pipelines.commands == 2 * len(warm) + CALLERS * rounds  # the warm-up met NOSCRIPT
    assert pipelines.batches < pipelines.commands / 4


def test_a_master_whose_scripts_were_flushed_loads_them_again(cluster: RedisCluster) -> None:
    by_master = tenants_by_master(cluster, 4)
    flushed = cluster.ports[1]
    tenants = [name for names in by_master.values() for name in names]

    async def body() -> tuple[list[Any], dict[str, float]]:
        storage = AsyncRedisStorage(cluster.async_client(), timeout=5.0)
        try:
            await asyncio.gather(*(storage.acquire(Debit(t, 1, [QUOTA], T0)) for t in tenants))
            await asyncio.to_thread(_script_flush, cluster, flushed)
            results = await asyncio.gather(
                *(storage.acquire(Debit(t, 2, [QUOTA], T0)) for t in tenants for _ in range(4)),
                return_exceptions=True,
            )
        finally:
            await storage.close()
        return results, await remaining(cluster, tenants)

    results, left = asyncio.run(body())
    assert [r for r in results if isinstance(r, BaseException)] == []
    assert left == dict.fromkeys(tenants, CAPACITY - 1 - 4 * 2)
    with redis.Redis(cluster.host, flushed, socket_timeout=5) as client:
        assert client.info("commandstats")["cmdstat_script|load"]["calls"] >= 1


def _script_flush(cluster: RedisCluster, port: int) -> None:
    with redis.Redis(cluster.host, port, socket_timeout=5) as client:
        client.script_flush()


def test_callers_cancelled_mid_batch_leave_every_master_in_step(cluster: RedisCluster) -> None:
    by_master = tenants_by_master(cluster, 4)
    tenants = [name for names in by_master.values() for name in names]
    cancelled = set(tenants[::3])

    async def body() -> tuple[list[Any], dict[str, float], dict[str, float]]:
        storage = AsyncRedisStorage(cluster.async_client(), timeout=5.0, pipeline_connections=1)
        try:
            for owned in by_master.values():  # discovered, each master's connection made
                await storage.peek(owned[-1], [QUOTA], T0)
            tasks = {
                t: asyncio.create_task(storage.acquire(Debit(t, 3, [QUOTA], T0))) for t in tenants
            }
            pipelines = cluster_pipelines(storage)
            written = pipelines.batches + 3
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5.0  # a busy machine: iterations are not a bound
            while pipelines.batches < written and loop.time() < deadline:
                await asyncio.sleep(0)  # each master's batch written, its replies not read yet
            assert pipelines.batches >= written
            for tenant in cancelled:
                tasks[tenant].cancel()
            results = await asyncio.gather(*tasks.values(), return_exceptions=True)
            # The next answer on each master is each call's own, not a cancelled call's.
            after = await asyncio.gather(
                *(storage.acquire(Debit(t, 1, [QUOTA], T0)) for t in tenants)
            )
        finally:
            await storage.close()
        return (
            results,
            {t: a.remaining for t, a in zip(tenants, after, strict=True)},
            await remaining(cluster, tenants),
        )

    results, after, left = asyncio.run(body())
    for tenant, result in zip(tenants, results, strict=True):
        if isinstance(result, asyncio.CancelledError):
            assert tenant in cancelled
            # Its debit was written: made once, or not at all; never twice.
            assert after[tenant] in (CAPACITY - 1, CAPACITY - 4)
        else:  # answered (a cancel that came after its answer changes nothing)
            assert result.remaining == CAPACITY - 3
            assert after[tenant] == CAPACITY - 4
        assert left[tenant] == after[tenant]
    assert any(isinstance(result, asyncio.CancelledError) for result in results)


def test_a_slot_migrated_under_traffic_loses_and_duplicates_no_decision(
    reshard_cluster: RedisCluster,
) -> None:
    """MIGRATING/IMPORTING, MIGRATE of the tenant's keys, SETSLOT NODE, while 64 callers
    debit that tenant and tenants of every master: ASK then MOVED, followed per call."""
    cluster = reshard_cluster
    cluster.flushall()
    by_master = tenants_by_master(cluster, 3)
    source = cluster.ports[0]
    target = cluster.ports[1]
    moving = by_master[source][0]
    tenants = [name for names in by_master.values() for name in names]
    stop = threading.Event()
    migrated = threading.Event()

    async def caller(storage: AsyncRedisStorage, index: int) -> dict[str, int]:
        made: dict[str, int] = {}
        deadline = time.monotonic() + 15
        turn = 0
        while not stop.is_set() and time.monotonic() < deadline:
            # Half the callers on the moving tenant, the others on every master's.
            tenant = moving if index % 2 else tenants[(index + turn) % len(tenants)]
            turn += 1
            decision = await storage.acquire(Debit(tenant, 1, [QUOTA], T0))
            assert decision.allowed
            made[tenant] = made.get(tenant, 0) + 1
        return made

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry)

    async def body() -> tuple[list[dict[str, int]], dict[str, float], dict[str, int]]:
        storage = AsyncRedisStorage(cluster.async_client(), timeout=5.0)
        metrics.watch_pipeline(storage)
        try:
            await asyncio.gather(*(storage.acquire(Debit(t, 1, [QUOTA], T0)) for t in tenants))
            callers = [asyncio.create_task(caller(storage, i)) for i in range(CALLERS)]
            mover = asyncio.create_task(
                asyncio.to_thread(_migrate, cluster, moving, source, target, migrated)
            )
            try:
                await mover
                await asyncio.sleep(0.05)  # more traffic after the move: MOVED, then the new owner
            finally:
                stop.set()
            made = await asyncio.gather(*callers)
            redirects = dict(cluster_pipelines(storage).redirects)
            metrics.sync()  # as a scrape does
        finally:
            await storage.close()
        return made, await remaining(cluster, tenants), redirects

    made, left, redirects = asyncio.run(body())
    for kind in ("ask", "moved"):  # counted for Prometheus as the pipeline counted them
        labels = {"backend": "redis", "kind": kind}
        assert registry.get_sample_value(names.PIPELINE_REDIRECTS_TOTAL, labels) == redirects[kind]
    assert migrated.is_set()
    assert cluster.node_for_key(redis_key("quotaql", moving, QUOTA)) == target
    for tenant in tenants:
        count = 1 + sum(each.get(tenant, 0) for each in made)
        assert left[tenant] == CAPACITY - count, tenant
    assert sum(each.get(moving, 0) for each in made) > 0
    assert redirects["ask"] > 0  # keys moved, slot not yet: ASKING + EVALSHA on the target
    assert redirects["moved"] > 0  # then the slot: the map updated, the target


def test_a_tenant_caught_half_migrated_is_tried_again_briefly_then_fails_debiting_nothing(
    reshard_cluster: RedisCluster,
) -> None:
    """A decision over keys of which some have moved and some not is refused by the source
    (TRYAGAIN): sent again a few times, then a storage error (the fail mode answers), the
    other masters' calls unaffected; once the move completes the tenant is debited as if
    the failed calls had never been made."""
    cluster = reshard_cluster
    cluster.flushall()
    by_master = tenants_by_master(cluster, 2)
    source, target = cluster.ports[2], cluster.ports[0]
    tenant = by_master[source][0]
    others = [names[1] for port, names in by_master.items() if port != source]
    quotas = [QUOTA, LOG]
    slot = slot_of(tenant)
    keys = [redis_key("quotaql", tenant, quota) for quota in quotas]  # the hash, the log

    async def body() -> tuple[list[Any], float, dict[str, int], list[float]]:
        storage = AsyncRedisStorage(cluster.async_client(), timeout=5.0)
        try:
            await storage.acquire(Debit(tenant, 1, quotas, T0))
            source_id, target_id = _node_id(cluster, source), _node_id(cluster, target)
            with (
                redis.Redis(cluster.host, source, socket_timeout=5) as src,
                redis.Redis(cluster.host, target, socket_timeout=5) as dst,
            ):
                dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
                src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
                src.execute_command("MIGRATE", cluster.host, target, "", 0, 5000, "KEYS", keys[0])
                started = time.monotonic()
                results = await asyncio.gather(
                    *(storage.acquire(Debit(tenant, 1, quotas, T0)) for _ in range(3)),
                    *(storage.acquire(Debit(other, 1, quotas, T0)) for other in others),
                    return_exceptions=True,
                )
                took = time.monotonic() - started
                rest = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100)
                src.execute_command("MIGRATE", cluster.host, target, "", 0, 5000, "KEYS", *rest)
                for node in cluster.nodes:
                    with node.client(socket_timeout=5) as client:
                        client.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
            after = await storage.acquire(Debit(tenant, 1, quotas, T0))
            redirects = dict(cluster_pipelines(storage).redirects)
        finally:
            await storage.close()
        return results, took, redirects, [status.remaining for status in after.quotas]

    results, took, redirects, after = asyncio.run(body())
    assert all(isinstance(result, StorageError) for result in results[:3]), results[:3]
    assert "TryAgainError" in str(results[0])
    assert all(not isinstance(result, BaseException) for result in results[3:]), results[3:]
    assert redirects["tryagain"] == 3 * MAX_TRIES
    assert took < 1.0  # a few short waits, not the request's TTL
    assert after == [CAPACITY - 2, LOG.limit - 2]  # the refused calls debited nothing


async def timed(call: Any) -> tuple[Any, float]:
    """``call``'s result (or error) and the seconds it took."""
    started = time.monotonic()
    try:
        result = await call
    except StorageError as exc:
        result = exc
    return result, time.monotonic() - started


def _node_id(cluster: RedisCluster, port: int) -> str:
    with redis.Redis(cluster.host, port, socket_timeout=5) as client:
        return str(client.execute_command("CLUSTER MYID").decode())


def _migrate(
    cluster: RedisCluster, tenant: str, source: int, target: int, done: threading.Event
) -> None:
    """Move ``tenant``'s slot from the master on ``source`` to the one on ``target`` the way
    ``redis-cli --cluster reshard`` does, pausing between the steps so that traffic meets each."""
    slot = slot_of(tenant)
    source_id, target_id = _node_id(cluster, source), _node_id(cluster, target)
    with (
        redis.Redis(cluster.host, source, socket_timeout=5) as src,
        redis.Redis(cluster.host, target, socket_timeout=5) as dst,
    ):
        time.sleep(0.05)
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
        time.sleep(0.05)
        for _ in range(100):
            keys = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            src.execute_command("MIGRATE", cluster.host, target, "", 0, 5000, "KEYS", *keys)
        time.sleep(0.05)  # the keys are on the target, the slot still the source's: ASK
        dst.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
        src.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
    for node in cluster.nodes:
        if node.port not in (source, target):
            with node.client(socket_timeout=5) as client:
                client.execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)
    done.set()


def test_a_killed_master_fails_only_its_own_calls(own_cluster: RedisCluster) -> None:
    cluster = own_cluster
    by_master = tenants_by_master(cluster, 4)
    victim = cluster.nodes[2]
    tenants = [name for names in by_master.values() for name in names]
    timeout = 0.5

    async def body() -> tuple[list[Any], float, list[Any], ClusterPipelines]:
        storage = AsyncRedisStorage(cluster.async_client(), timeout=timeout)
        try:
            await asyncio.gather(*(storage.acquire(Debit(t, 1, [QUOTA], T0)) for t in tenants))
            # Paused, the master holds up only its own calls: the others are answered at once.
            await asyncio.to_thread(victim.pause)
            try:
                paused = await asyncio.gather(
                    *(timed(storage.acquire(Debit(t, 1, [QUOTA], T0))) for t in tenants)
                )
            finally:
                await asyncio.to_thread(victim.resume)
            for tenant, (result, seconds) in zip(tenants, paused, strict=True):
                if tenant in by_master[victim.port]:
                    assert isinstance(result, StorageTimeout), result
                else:
                    assert result.allowed, result
                    assert seconds < timeout / 2
            await asyncio.to_thread(victim.kill)
            started = time.monotonic()
            first = await asyncio.gather(
                *(storage.acquire(Debit(t, 1, [QUOTA], T0)) for t in tenants),
                return_exceptions=True,
            )
            took = time.monotonic() - started
            await asyncio.sleep(0.15)  # the slot map's refresh, in the background
            second = await asyncio.gather(
                *(storage.acquire(Debit(t, 1, [QUOTA], T0)) for t in tenants),
                return_exceptions=True,
            )
            return first, took, second, cluster_pipelines(storage)
        finally:
            await storage.close()

    first, took, second, pipelines = asyncio.run(body())
    for results in (first, second):
        for tenant, result in zip(tenants, results, strict=True):
            if tenant in by_master[victim.port]:
                assert isinstance(result, StorageError), result
            else:
                assert not isinstance(result, BaseException), result
                assert result.allowed
    # A dead master's idle connection was seen closed: nothing sent, known unchanged.
    assert all(
        isinstance(result, StorageNotReached)
        for tenant, result in zip(tenants, second, strict=True)
        if tenant in by_master[victim.port]
    )
    assert took < timeout * 2
    assert pipelines.redirects["refresh"] >= 1
    alive = [t for port, names in by_master.items() if port != victim.port for t in names]

    async def left() -> dict[str, float]:
        return await remaining(cluster, alive, pipeline=True)

    assert asyncio.run(left()) == dict.fromkeys(alive, CAPACITY - 4)
