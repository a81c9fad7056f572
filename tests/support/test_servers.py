"""The Redis test helpers run, crash, restart, pause and cluster real redis-server processes."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import socket
import time
from typing import TYPE_CHECKING

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
import redis.exceptions
import redis.retry
from redis.backoff import NoBackoff

from tests.support.servers import (
    CLUSTER_BUS_OFFSET,
    CLUSTER_SLOTS,
    MissingRedisBinary,
    RedisCluster,
    RedisServer,
    RedisStartupError,
    free_cluster_port,
    live_servers,
)

if TYPE_CHECKING:
    from tests.support.servers import AsyncRunner

SYSTEM_REDIS_PORT = 6379
SET_TWO_KEYS = "redis.call('SET', KEYS[1], ARGV[1]); redis.call('SET', KEYS[2], ARGV[1]); return 2"


def assert_reaped(pid: int) -> None:
    """``pid`` was a child of this process and has been waited for (no zombie left)."""
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def no_retry_client(server: RedisServer, timeout: float) -> redis.Redis:
    # redis-py retries timeouts and refused connections by default; these tests want the
    # first failure.
    return server.client(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=redis.retry.Retry(NoBackoff(), 0),
    )


# -- one server -------------------------------------------------------------------------------


def test_session_server_answers_ping_on_a_private_port_and_keeps_nothing_on_disk(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    assert redis_client.ping()
    assert redis_server.host == "127.0.0.1"
    assert redis_server.port != SYSTEM_REDIS_PORT
    assert redis_server.url == f"redis://127.0.0.1:{redis_server.port}/0"
    info = redis_server.info("server")
    assert info["tcp_port"] == redis_server.port
    assert info["process_id"] == redis_server.pid
    config = redis_client.config_get("*")
    assert config["save"] == ""
    assert config["appendonly"] == "no"
    assert config["dir"] == str(redis_server.directory)


def test_redis_client_starts_empty_and_speaks_bytes(redis_client: redis.Redis) -> None:
    assert redis_client.dbsize() == 0
    redis_client.set("k", "v")
    assert redis_client.get("k") == b"v"


def test_port_6379_is_refused() -> None:
    with pytest.raises(ValueError, match="6379"):
        RedisServer(port=SYSTEM_REDIS_PORT)


def test_free_cluster_port_has_a_free_bus_port() -> None:
    port = free_cluster_port()
    assert port != SYSTEM_REDIS_PORT
    for candidate in (port, port + CLUSTER_BUS_OFFSET):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", candidate))


def test_kill_refuses_connections_and_reaps_the_process(fresh_redis_server: RedisServer) -> None:
    pid = fresh_redis_server.pid
    assert pid is not None
    directory = fresh_redis_server.directory
    assert directory is not None
    assert directory.is_dir()

    fresh_redis_server.kill()

    with (
        no_retry_client(fresh_redis_server, 1.0) as client,
        pytest.raises(redis.exceptions.ConnectionError),
    ):
        client.ping()
    assert fresh_redis_server.process is not None
    assert fresh_redis_server.process.returncode == -signal.SIGKILL
    assert_reaped(pid)
    assert not directory.exists()
    assert fresh_redis_server not in live_servers()


def test_stop_shuts_down_cleanly_reaps_and_removes_the_temp_dir() -> None:
    with RedisServer() as server:
        pid = server.pid
        directory = server.directory
        assert pid is not None
        assert directory is not None
        assert server in live_servers()
    assert server.process is not None
    assert server.process.returncode == 0
    assert pid is not None
    assert_reaped(pid)
    assert not directory.exists()
    assert server not in live_servers()


def test_restart_reuses_the_port_with_no_data_and_no_scripts(
    fresh_redis_server: RedisServer,
) -> None:
    port, old_pid = fresh_redis_server.port, fresh_redis_server.pid
    assert old_pid is not None
    with fresh_redis_server.client() as client:
        client.set("k", "v")
        sha = client.script_load("return 1")
        assert client.script_exists(sha) == [True]

    fresh_redis_server.kill()
    fresh_redis_server.restart()

    assert fresh_redis_server.port == port
    assert fresh_redis_server.pid != old_pid
    assert_reaped(old_pid)
    with fresh_redis_server.client() as client:
        assert client.ping()
        assert client.get("k") is None
        assert client.script_exists(sha) == [False]
        with pytest.raises(redis.exceptions.NoScriptError):
            client.evalsha(sha, 0)


def test_pause_makes_clients_time_out_until_resume(fresh_redis_server: RedisServer) -> None:
    fresh_redis_server.pause()
    assert fresh_redis_server.paused
    started = time.monotonic()
    with (
        no_retry_client(fresh_redis_server, 0.2) as client,
        pytest.raises(redis.exceptions.TimeoutError),
    ):
        # The kernel still accepts the connection; the frozen server never answers.
        client.ping()
    assert time.monotonic() - started < 1.0

    fresh_redis_server.resume()

    assert not fresh_redis_server.paused
    with no_retry_client(fresh_redis_server, 1.0) as client:
        assert client.ping()


def test_pause_for_some_seconds_resumes_by_itself(fresh_redis_server: RedisServer) -> None:
    started = time.monotonic()
    fresh_redis_server.pause(0.3)
    with fresh_redis_server.client(socket_timeout=5) as client:
        assert client.ping()
    assert time.monotonic() - started >= 0.25
    assert not fresh_redis_server.paused


def test_a_paused_server_still_stops() -> None:
    server = RedisServer().start()
    pid = server.pid
    assert pid is not None
    server.pause()
    server.stop(timeout=5)
    assert_reaped(pid)


def test_startup_failure_raises_with_the_log_tail_and_leaves_nothing() -> None:
    server = RedisServer(["--no-such-directive", "x"])
    with pytest.raises(RedisStartupError, match="Bad directive") as caught:
        server.start()
    assert not caught.value.port_in_use
    assert server.pid is not None
    assert_reaped(server.pid)
    assert server.directory is None
    assert server not in live_servers()


def test_missing_binaries_fail_naming_the_debian_package() -> None:
    with pytest.raises(MissingRedisBinary, match="apt-get install redis-server"):
        RedisServer(executable="redis-server-not-installed").start()
    with pytest.raises(MissingRedisBinary, match="apt-get install redis-tools"):
        RedisCluster(cli="redis-cli-not-installed").start()


def test_async_client_round_trip(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    async def body(client: redis.asyncio.Redis) -> tuple[bytes | str | None, list[int]]:
        await client.set("k", "v")
        counts = await asyncio.gather(*(client.incr("n") for _ in range(50)))
        return await client.get("k"), counts

    value, counts = async_redis_client(body)
    assert value == b"v"
    assert sorted(counts) == list(range(1, 51))


# -- cluster ----------------------------------------------------------------------------------


def test_cluster_is_ok_with_three_masters_owning_every_slot(redis_cluster: RedisCluster) -> None:
    assert len(redis_cluster.ports) == 3
    assert SYSTEM_REDIS_PORT not in redis_cluster.ports
    for port in redis_cluster.ports:
        info = redis_cluster.cluster_info(port)
        assert info["cluster_state"] == "ok"
        assert info["cluster_known_nodes"] == "3"
        assert info["cluster_size"] == "3"
    owners = redis_cluster.slot_ranges()
    assert sorted(owners) == sorted(redis_cluster.ports)
    ranges = sorted(r for port_ranges in owners.values() for r in port_ranges)
    assert ranges[0][0] == 0
    assert ranges[-1][1] == CLUSTER_SLOTS - 1
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start == end + 1
    with redis.Redis(redis_cluster.host, redis_cluster.ports[0]) as node:
        nodes = node.execute_command("CLUSTER NODES")
    assert len(nodes) == 3
    assert all("master" in entry["flags"].split(",") for entry in nodes.values()), nodes


def test_a_cluster_without_replicas_lists_none_and_slots_match_the_server(
    redis_cluster: RedisCluster,
) -> None:
    assert redis_cluster.masters() == sorted(redis_cluster.ports)
    assert all(redis_cluster.replicas_of(port) == [] for port in redis_cluster.ports)
    with redis.Redis(redis_cluster.host, redis_cluster.ports[0]) as node:
        for key in ("{a}x", "quotaql:{t:acme}:~q", "no-tag"):
            assert redis_cluster.slot_of(key) == node.execute_command("CLUSTER KEYSLOT", key)
    slot = redis_cluster.slot_of("a")
    owner = redis_cluster.master_of_slot(slot)
    with pytest.raises(ValueError, match="already on"):
        redis_cluster.migrate_slot(slot, owner)
    with pytest.raises(LookupError, match="not a master with a replica"):
        redis_cluster.fail_over(owner)  # nothing killed: it has no replica
    assert redis_cluster.node(owner).running


def test_hash_tags_spread_keys_over_every_master(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    tags = redis_cluster.hash_tags_by_master()
    assert sorted(tags) == sorted(redis_cluster.ports)
    for port, tag in tags.items():
        key = f"{{{tag}}}x"
        assert redis_cluster.node_for_key(key) == port
        cluster_client.set(key, port)
    for port, tag in tags.items():
        with redis.Redis(redis_cluster.host, port) as node:
            assert node.dbsize() == 1
            assert node.get(f"{{{tag}}}x") == str(port).encode()


def test_multi_key_commands_on_one_hash_tag_work(
    cluster_client: redis.cluster.RedisCluster,
) -> None:
    assert cluster_client.mset({"{a}x": 1, "{a}y": 2})
    assert cluster_client.mget("{a}x", "{a}y") == [b"1", b"2"]
    assert cluster_client.eval(SET_TWO_KEYS, 2, "{a}x", "{a}z", "3") == 2
    assert cluster_client.get("{a}z") == b"3"


def test_multi_key_commands_across_slots_raise_crossslot(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster
) -> None:
    # redis-py refuses before sending; a node asked directly answers CROSSSLOT, which
    # redis-py raises as ClusterCrossSlotError (a ResponseError).
    with pytest.raises(redis.exceptions.RedisClusterException, match="same key slot"):
        cluster_client.eval(SET_TWO_KEYS, 2, "{a}x", "{b}x", "1")
    with (
        redis.Redis(redis_cluster.host, redis_cluster.node_for_key("{a}x")) as node,
        pytest.raises(redis.exceptions.ClusterCrossSlotError, match="same slot"),
    ):
        node.eval(SET_TWO_KEYS, 2, "{a}x", "{b}x", "1")
    assert cluster_client.exists("{a}x", "{b}x") == 0


def test_async_cluster_client_routes_by_hash_tag(
    redis_cluster: RedisCluster,
    async_cluster_client: AsyncRunner[redis.asyncio.cluster.RedisCluster],
) -> None:
    tags = redis_cluster.hash_tags_by_master()

    async def body(client: redis.asyncio.cluster.RedisCluster) -> list[bytes | str | None]:
        await asyncio.gather(*(client.set(f"{{{tag}}}x", port) for port, tag in tags.items()))
        return [await client.get(f"{{{tag}}}x") for tag in tags.values()]

    assert async_cluster_client(body) == [str(port).encode() for port in tags]


def test_a_cluster_that_fails_to_form_stops_every_node_it_started() -> None:
    # `false` stands in for redis-cli: the nodes start, `--cluster create` fails.
    cluster = RedisCluster(cli="false")
    with pytest.raises(RedisStartupError, match="cluster create failed"):
        cluster.start()
    assert len(cluster.pids) == 3
    for pid in cluster.pids:
        assert_reaped(pid)
    assert cluster.directory is None
