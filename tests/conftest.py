"""Fixtures shared by the whole suite: private Redis servers and a Redis Cluster; and which
suites are timing-sensitive (the ``serial`` mark)."""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

    from tests.support.servers import AsyncRunner, RedisCluster, RedisServer

# redis is an optional extra: tests.support.servers is imported inside the fixtures so that the
# suites that never touch Redis still run where it is not installed.

SYSTEM_REDIS_PORT = 6379

# The suites that hold real time to bounds a busy machine misses: marked ``serial``, they run
# alone, after the parallel run of the rest (``make pytest``). A test elsewhere may carry
# ``@pytest.mark.serial`` itself.
SERIAL = (
    "tests/gate/test_delay.py",  # bursts against a 20-per-second bucket on the real clock
    "tests/limiter/test_stalls.py",  # real loop stalls and GIL holds against 0.1 s timeouts
    "tests/storage/test_leases_keeper.py",  # renewals and expiries in real time
    "tests/observability/test_live.py",  # traffic that must fire alerts within a minute
    "tests/http/test_delay.py",  # operations started at a bucket's rate across processes
    # A lease or a charge that a task of the server's loop settles just after the answer, the
    # test giving it a tenth or a fifth of a second.
    "tests/http/test_contract.py::test_too_many_concurrent_is_429_with_retry_after_and_debits_nothing",
    "tests/http/test_hostile.py::test_refused_documents_pay_the_minimum_on_redis_too",
    "tests/adapters/ariadne/test_websockets.py::test_subscriptions_refused_before_pricing_pay_the_minimum",
    # A paused Redis against a 0.2 s timeout: the call after the pause reconnects within it.
    "tests/storage/test_pipeline.py::test_a_paused_redis_fails_every_waiting_call",
    # Redis Cluster failover and resharding under load, timed against 0.25 s deadlines.
    "tests/storage/test_failover_cluster.py",
    "tests/storage/test_resharding_cluster.py",
)


@pytest.fixture(autouse=True)
def _serial_tests_run_without_stray_threads(request: pytest.FixtureRequest) -> None:
    """A timing-sensitive test runs without the reload threads of gates earlier tests left
    to the garbage collector (each wakes every reload_interval and takes the GIL)."""
    if request.node.get_closest_marker("serial") is None:
        return
    gc.collect()  # a gate collected stops its thread at once (weakref.finalize)
    for thread in threading.enumerate():
        if thread.name == "quotaql-reload":
            thread.join(0.2)


@pytest.hookimpl(tryfirst=True)  # before -m selects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(SERIAL):
            item.add_marker(pytest.mark.serial)


@contextlib.contextmanager
def _redis_binaries_required() -> Iterator[None]:
    from tests.support.servers import MissingRedisBinary

    try:
        yield
    except MissingRedisBinary as exc:
        # Fail, never skip: a suite that silently skips its Redis tests proves nothing.
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _no_leaked_redis_servers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After the session, reap any redis-server a test started and never stopped, loudly."""
    yield
    servers = sys.modules.get("tests.support.servers")
    leaked = servers.reap_all() if servers is not None else []
    # After Ctrl-C a test may have been cut off before its own cleanup: reap quietly.
    if leaked and request.session.exitstatus != pytest.ExitCode.INTERRUPTED:
        pytest.fail(f"tests left redis-server processes running (now killed): pids {leaked}")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One private redis-server for the session; tests that kill or pause use fresh_redis_server."""
    from tests.support.servers import RedisServer

    with _redis_binaries_required():
        server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A ``redis.Redis`` (bytes replies) on the session server, emptied with FLUSHALL first."""
    assert redis_server.port != SYSTEM_REDIS_PORT
    assert redis_server.running, "a test killed the shared redis_server; use fresh_redis_server"
    assert not redis_server.paused, "a test left the shared redis_server paused"
    with redis_server.client() as client:
        client.flushall()
        yield client


@pytest.fixture
def async_redis_client(
    redis_server: RedisServer, redis_client: redis.Redis
) -> AsyncRunner[redis.asyncio.Redis]:
    """Run ``async def body(client)`` with a fresh ``redis.asyncio.Redis`` on the session server.

    ``async_redis_client(body, **client_kwargs)`` runs ``body`` under ``asyncio.run`` with a
    client made inside that loop and closed with ``await client.aclose()`` after it; the server
    was emptied with FLUSHALL before the test. (No pytest-asyncio: tests stay plain functions.)
    """
    from tests.support.servers import AsyncRunner

    return AsyncRunner(redis_server.async_client)


@pytest.fixture
def fresh_redis_server() -> Iterator[RedisServer]:
    """A private redis-server for one test, free to be killed, restarted or paused."""
    from tests.support.servers import RedisServer

    with _redis_binaries_required():
        server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A 3-master Redis Cluster (no replicas) for the session."""
    from tests.support.servers import RedisCluster

    with _redis_binaries_required():
        cluster = RedisCluster().start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> Iterator[redis.cluster.RedisCluster]:
    """A ``redis.cluster.RedisCluster`` on the session cluster, every master emptied first."""
    assert SYSTEM_REDIS_PORT not in redis_cluster.ports
    redis_cluster.flushall()
    with redis_cluster.client() as client:
        yield client


@pytest.fixture
def async_cluster_client(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> AsyncRunner[redis.asyncio.cluster.RedisCluster]:
    """Like ``async_redis_client``, with a ``redis.asyncio.cluster.RedisCluster``."""
    from tests.support.servers import AsyncRunner

    return AsyncRunner(redis_cluster.async_client)
