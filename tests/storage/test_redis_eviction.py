"""A Redis storage refuses a server that may evict its keys (an evicted budget is a full one):
private redis-servers started with each ``maxmemory-policy``, sync and async, a 3-master
cluster with one evicting master, an ACL user without ``CONFIG``, a renamed ``CONFIG``, and
the lease sets that go through the same storage."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import Quota
from quotaql.errors import EvictionRefused, StorageError
from quotaql.instrumentation import names
from quotaql.storage import (
    AsyncRedisLeases,
    AsyncRedisStorage,
    LeaseSpec,
    RedisLeases,
    RedisStorage,
)
from quotaql.storage.base import Debit
from quotaql.storage.eviction import RECHECK_SECONDS
from tests.support.servers import RedisServer, free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.servers import RedisCluster

EVICTING = (
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
)
MAXMEMORY = 64 * 1024 * 1024
QUOTA = Quota("tenant", capacity=10, refill_per_second=1)
TIMEOUT = 2.0


def debit(tenant: str = "acme") -> Debit:
    return Debit(tenant, 1, [QUOTA])


def config_gets(server: RedisServer) -> int:
    """How many ``CONFIG GET`` the server answered (its command statistics)."""
    stats = server.info("commandstats")
    entry = stats.get("cmdstat_config|get")
    return int(entry["calls"]) if isinstance(entry, dict) else 0


@pytest.fixture(scope="module", params=EVICTING)
def evicting(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A redis-server under ``maxmemory`` with an evicting policy."""
    args = ["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", str(request.param)]
    with RedisServer(args) as server:
        yield server


def test_each_evicting_policy_is_refused_before_anything_is_written(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    policy = _policy(evicting)
    caplog.set_level(logging.ERROR, logger=names.LOGGER)
    storage = RedisStorage.from_url(evicting.url, timeout=TIMEOUT)
    try:
        with pytest.raises(EvictionRefused) as refused:
            storage.acquire(debit())
        with pytest.raises(EvictionRefused):  # and every call after it
            storage.acquire(debit())
        with pytest.raises(EvictionRefused):
            RedisLeases(storage).take("acme", [LeaseSpec("tier", 3)], "lease-1", 10_000)
    finally:
        storage.close()
    message = str(refused.value)
    assert f"{evicting.host}:{evicting.port}" in message
    assert f"maxmemory-policy {policy}" in message
    assert "noeviction" in message
    assert "allow_eviction = true" in message
    check = storage.eviction.check
    assert check is not None
    assert (check.policy, check.verdict) == (policy, names.EVICTION_REFUSED)
    with evicting.client() as client:
        assert client.dbsize() == 0  # no debit, no lease was written
    # Said once, as an error with its event, not once per call.
    said = [r for r in caplog.records if getattr(r, names.LOG_EVENT, None) == "redis_eviction"]
    assert len(said) == 1
    assert said[0].levelno == logging.ERROR


def test_each_evicting_policy_is_refused_by_the_async_storage_too(evicting: RedisServer) -> None:
    async def main() -> list[Any]:
        storage = AsyncRedisStorage.from_url(evicting.url, timeout=TIMEOUT)
        try:
            calls = [storage.acquire(debit(f"t{i}")) for i in range(20)]
            lease = AsyncRedisLeases(storage).take("acme", [LeaseSpec("tier", 3)], "l", 10_000)
            return await asyncio.gather(*calls, lease, return_exceptions=True)
        finally:
            await storage.close()

    before = config_gets(evicting)
    answers = asyncio.run(main())
    assert all(isinstance(answer, EvictionRefused) for answer in answers), answers
    # The calls that came at once waited for one check (then the refusal stood).
    assert config_gets(evicting) - before == 1
    with evicting.client() as client:
        assert client.dbsize() == 0


def _policy(server: RedisServer) -> str:
    with server.client() as client:
        return str(client.config_get("maxmemory-policy")["maxmemory-policy"])


@pytest.mark.parametrize("colour", ["sync", "async"])
def test_allow_eviction_runs_with_a_loud_warning(
    evicting: RedisServer, colour: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=names.LOGGER)
    if colour == "sync":
        storage = RedisStorage.from_url(evicting.url, timeout=TIMEOUT, allow_eviction=True)
        try:
            decision = storage.acquire(debit())
        finally:
            storage.close()
    else:

        async def main() -> Any:
            storage = AsyncRedisStorage.from_url(evicting.url, timeout=TIMEOUT, allow_eviction=True)
            try:
                return await storage.acquire(debit())
            finally:
                await storage.close()

        decision = asyncio.run(main())
    assert decision.allowed
    (said,) = [r for r in caplog.records if getattr(r, names.LOG_EVENT, None) == "redis_eviction"]
    assert said.levelno == logging.WARNING
    assert "may evict its keys" in said.getMessage()
    assert "allow_eviction = true accepts that" in said.getMessage()


def test_noeviction_passes_and_is_checked_once(redis_server: RedisServer) -> None:
    with redis_server.client() as client:
        client.flushall()
    before = config_gets(redis_server)
    storage = RedisStorage.from_url(redis_server.url, timeout=TIMEOUT)
    try:
        for _ in range(5):
            assert storage.acquire(debit()).allowed
    finally:
        storage.close()
    assert config_gets(redis_server) - before == 1
    check = storage.eviction.check
    assert check is not None
    assert (check.policy, check.verdict) == ("noeviction", names.EVICTION_SAFE)


def test_maxmemory_0_evicts_nothing_whatever_the_policy_and_says_what_would(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=names.LOGGER)
    with RedisServer(["--maxmemory-policy", "volatile-lru"]) as server:  # maxmemory 0
        storage = RedisStorage.from_url(server.url, timeout=TIMEOUT)
        try:
            assert storage.acquire(debit()).allowed
        finally:
            storage.close()
    check = storage.eviction.check
    assert check is not None
    assert (check.policy, check.verdict) == ("volatile-lru", names.EVICTION_SAFE)
    (said,) = [r for r in caplog.records if getattr(r, names.LOG_EVENT, None) == "redis_eviction"]
    assert "maxmemory 0 (no limit)" in said.getMessage()
    assert "setting a maxmemory later would evict" in said.getMessage()


@pytest.mark.parametrize("colour", ["sync", "async"])
def test_an_acl_user_without_config_runs_and_is_told_what_to_check(
    colour: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=names.LOGGER)
    with RedisServer(
        ["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "allkeys-lru"]
    ) as server:
        with server.client() as admin:
            admin.acl_setuser(
                "app", enabled=True, passwords=["+secret"], keys=["*"],
                commands=["+@all", "-config"],
            )  # fmt: skip
        url = f"redis://app:secret@{server.host}:{server.port}/0"
        if colour == "sync":
            storage: Any = RedisStorage.from_url(url, timeout=TIMEOUT)
            try:
                decision = storage.acquire(debit())
            finally:
                storage.close()
        else:

            async def main() -> Any:
                storage = AsyncRedisStorage.from_url(url, timeout=TIMEOUT)
                try:
                    return storage, await storage.acquire(debit())
                finally:
                    await storage.close()

            storage, decision = asyncio.run(main())
    # CONFIG is forbidden: the policy cannot be known (here it evicts): it runs, and says
    # what to check by hand.
    assert decision.allowed
    check = storage.eviction.check
    assert (check.policy, check.verdict) == ("unknown", names.EVICTION_UNVERIFIED)
    (said,) = [r for r in caplog.records if getattr(r, names.LOG_EVENT, None) == "redis_eviction"]
    message = said.getMessage()
    assert said.levelno == logging.WARNING
    assert "no permissions to run the 'config|get' command" in message
    assert "check by hand that maxmemory-policy is noeviction" in message
    assert "+config|get" in message


def test_a_renamed_config_command_is_unverified_not_refused() -> None:
    args = ["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "volatile-lru"]
    with RedisServer([*args, "--rename-command", "CONFIG", ""]) as server:
        storage = RedisStorage.from_url(server.url, timeout=TIMEOUT)
        try:
            assert storage.acquire(debit()).allowed
        finally:
            storage.close()
    check = storage.eviction.check
    assert check is not None
    assert check.verdict == names.EVICTION_UNVERIFIED
    assert "unknown command" in str(check.nodes[0].error)


def test_a_policy_set_to_noeviction_is_accepted_by_a_later_check() -> None:
    args = ["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "allkeys-lru"]
    with RedisServer(args) as server, server.client() as admin:
        storage = RedisStorage.from_url(server.url, timeout=TIMEOUT)
        try:
            with pytest.raises(EvictionRefused):
                storage.acquire(debit())
            admin.config_set("maxmemory-policy", "noeviction")
            with pytest.raises(EvictionRefused):  # the refusal stands a moment (no check)
                storage.acquire(debit())
            time.sleep(RECHECK_SECONDS)
            assert storage.acquire(debit()).allowed
        finally:
            storage.close()
    check = storage.eviction.check
    assert check is not None
    assert check.verdict == names.EVICTION_SAFE
    assert storage.eviction.passed


def test_a_redis_not_reached_is_a_storage_error_and_is_checked_at_the_next_call() -> None:
    storage = RedisStorage.from_url(f"redis://127.0.0.1:{free_port()}/0", timeout=0.2)
    try:
        with pytest.raises(StorageError) as failed:
            storage.acquire(debit())
    finally:
        storage.close()
    assert not isinstance(failed.value, EvictionRefused)
    assert storage.eviction.check is None
    assert not storage.eviction.passed


@pytest.mark.parametrize("colour", ["sync", "async"])
def test_one_evicting_master_of_a_cluster_refuses_the_storage(
    redis_cluster: RedisCluster, colour: str
) -> None:
    node = redis_cluster.nodes[1]
    with node.client() as admin:
        admin.config_set("maxmemory", str(MAXMEMORY))
        admin.config_set("maxmemory-policy", "volatile-ttl")
        try:
            answer = _cluster_call(redis_cluster, colour)
        finally:
            admin.config_set("maxmemory-policy", "noeviction")
            admin.config_set("maxmemory", "0")
    assert isinstance(answer, EvictionRefused), answer
    message = str(answer)
    assert f"{node.host}:{node.port} (maxmemory-policy volatile-ttl" in message
    for other in (redis_cluster.nodes[0], redis_cluster.nodes[2]):
        assert f":{other.port} " not in message


@pytest.mark.parametrize("colour", ["sync", "async"])
def test_a_cluster_of_noeviction_masters_passes_every_one_checked(
    redis_cluster: RedisCluster, colour: str
) -> None:
    redis_cluster.flushall()
    answer = _cluster_call(redis_cluster, colour, checked=True)
    assert not isinstance(answer, BaseException), answer
    decision, check = answer
    assert decision.allowed
    assert check.verdict == names.EVICTION_SAFE
    assert sorted(node.node for node in check.nodes) == sorted(
        f"{node.host}:{node.port}" for node in redis_cluster.nodes
    )


def _cluster_call(cluster: RedisCluster, colour: str, *, checked: bool = False) -> Any:
    """One acquire through a fresh storage on ``cluster``: its decision (and the check,
    with ``checked``), or the error it raised."""
    if colour == "sync":
        with cluster.client() as client:
            storage = RedisStorage(client, timeout=TIMEOUT)
            try:
                decision = storage.acquire(debit())
            except StorageError as error:
                return error
            finally:
                storage.close()
        return (decision, storage.eviction.check) if checked else decision

    async def main() -> Any:
        client = cluster.async_client()
        storage = AsyncRedisStorage(client, timeout=TIMEOUT)
        try:
            decision = await storage.acquire(debit())
        except StorageError as error:
            return error
        finally:
            await storage.close()
            await client.aclose()
        return (decision, storage.eviction.check) if checked else decision

    return asyncio.run(main())
