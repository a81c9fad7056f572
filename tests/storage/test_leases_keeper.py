"""The lease keeper (renews what a process holds) and lease ids, in real time: renewal past
the ttl, a dropped lease left to expire, batching per group, storage errors survived, a
holder process SIGKILLed (its leases free within the ttl), forked children."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql.errors import StorageError
from quotaql.storage import (
    AsyncRedisLeases,
    AsyncRedisStorage,
    LeaseKeeper,
    LeaseSpec,
    MemoryLeases,
    RedisLeases,
    RedisStorage,
)
from quotaql.storage.leases import RENEW_BATCH, lease_key, new_lease_id

if TYPE_CHECKING:
    from collections.abc import Sequence

    import redis
    import redis.asyncio

    from tests.support.servers import AsyncRunner, RedisServer

TIER = LeaseSpec("tier", 100)
FIELD = LeaseSpec("field:Query.search", 100)


def wait_until(predicate: Any, seconds: float) -> float:
    """Poll ``predicate`` every 10 ms for at most ``seconds``; the time it took."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > seconds:
            raise AssertionError(f"not true within {seconds} s")
        time.sleep(0.01)
    return time.monotonic() - start


class RecordingLeases(MemoryLeases):
    """The memory leases, with a record of the renew calls made on them."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str | None, tuple[str, ...], tuple[str, ...]]] = []

    def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int,
        now: int | None = None,
    ) -> int:
        self.calls.append((key, tuple(names), tuple(leases)))
        return super().renew(key, names, leases, ttl_ms, now)


# -- lease ids -------------------------------------------------------------------------------


def test_lease_ids_are_unique_across_threads() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(into: list[str]) -> None:
        into.extend(new_lease_id() for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    ids = [lease for into in made for lease in into]
    assert len(set(ids)) == 20_000
    assert len({lease.rpartition("-")[0] for lease in ids}) == 1  # one token per process
    assert max(len(lease) for lease in ids) <= 20


def test_a_forked_child_never_makes_its_parents_ids() -> None:
    parent = [new_lease_id() for _ in range(3)]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave at once, whatever happens
        try:
            os.close(read)
            os.write(write, json.dumps([new_lease_id() for _ in range(3)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = json.loads(pipe.read())
    os.waitpid(pid, 0)
    after = new_lease_id()
    assert not set(child) & {*parent, after}
    assert child[0].rpartition("-")[0] != parent[0].rpartition("-")[0]
    assert after.rpartition("-")[0] == parent[0].rpartition("-")[0]  # the parent's goes on


# -- the sync keeper -------------------------------------------------------------------------


def test_the_keeper_renews_held_leases_past_their_ttl_and_drops_what_it_is_told() -> None:
    leases = MemoryLeases()
    # Renewed every 60 ms, a ttl of 600 ms: ten renewals' margin for a thread starved on a
    # busy machine (the suite's parallel workers).
    keeper = LeaseKeeper(leases, ttl_ms=600, period_ms=60)
    try:
        for lease in ("long", "dropped"):
            assert leases.take("acme", [TIER, FIELD], lease, 600).taken
            keeper.hold("acme", [TIER.name, FIELD.name], lease)
        assert len(keeper) == 2
        time.sleep(1.5)  # more than two ttls
        assert leases.count("acme", TIER.name) == 2
        assert keeper.renewed >= 2 * 2 * 5
        assert (keeper.lost, keeper.renew_failed) == (0, 0)
        # Dropped (its release failed, say): no longer renewed, so it expires by itself.
        assert keeper.drop("acme", [TIER.name, FIELD.name], "dropped")
        assert not keeper.drop("acme", [TIER.name, FIELD.name], "dropped")
        assert not keeper.drop("acme", [TIER.name], "long")  # another group
        wait_until(lambda: leases.count("acme", FIELD.name) == 1, 3)
        time.sleep(0.8)
        assert leases.count("acme", TIER.name) == 1  # "long" is still renewed
        assert leases.release("acme", [TIER.name, FIELD.name], "long") == 2
    finally:
        keeper.close()
    assert keeper._thread is None
    assert not any(thread.name == "quotaql-lease-keeper" for thread in threading.enumerate())


def test_the_keeper_makes_one_renew_call_per_group_with_all_its_leases() -> None:
    leases = RecordingLeases()
    keeper = LeaseKeeper(leases, ttl_ms=60_000, period_ms=50)
    groups = {
        ("acme", (TIER.name,)): [f"a-{i}" for i in range(3)],
        ("acme", (TIER.name, FIELD.name)): ["b-0", "b-1"],
        ("beta", (TIER.name,)): ["c-0"],
        (None, (TIER.name,)): [f"big-{i}" for i in range(RENEW_BATCH + 1)],
    }
    try:
        for (tenant, names), ids in groups.items():
            specs = [LeaseSpec(name, 1_000) for name in names]
            for lease in ids:
                assert leases.take(tenant, specs, lease, 60_000).taken
                keeper.hold(tenant, names, lease)
        wait_until(lambda: len(leases.calls) >= 5, 5)
    finally:
        keeper.close()
    first_round = leases.calls[:5]
    expected = [
        (tenant, names, tuple(ids[i : i + RENEW_BATCH]))
        for (tenant, names), ids in groups.items()
        for i in range(0, len(ids), RENEW_BATCH)
    ]
    assert sorted(first_round, key=repr) == sorted(expected, key=repr)
    assert keeper.renewed >= 3 + 4 + 1 + RENEW_BATCH + 1


def test_the_keeper_validates_what_it_is_given_and_refuses_holds_once_closed() -> None:
    leases = MemoryLeases()
    with pytest.raises(ValueError, match="period_ms"):
        LeaseKeeper(leases, ttl_ms=300, period_ms=300)
    with pytest.raises(ValueError, match="ttl_ms"):
        LeaseKeeper(leases, ttl_ms=0)
    keeper = LeaseKeeper(leases, ttl_ms=30_000)
    assert keeper.period_ms == 10_000
    with pytest.raises(ValueError, match="limit name"):
        keeper.hold("acme", ["a b"], "op")
    with pytest.raises(ValueError, match="1-200 characters"):
        keeper.hold("acme", ["tier"], "")
    assert keeper._thread is None  # nothing held: nothing started
    keeper.close()
    keeper.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        keeper.hold("acme", ["tier"], "op")


def test_the_keeper_survives_a_paused_and_a_killed_redis(fresh_redis_server: RedisServer) -> None:
    with fresh_redis_server.client() as client:
        storage = RedisStorage(client, timeout=0.05)
        keeper = None
        try:
            leases = RedisLeases(storage)
            keeper = LeaseKeeper(leases, ttl_ms=1_500, period_ms=150)
            assert leases.take("acme", [TIER], "op", 1_500).taken
            keeper.hold("acme", [TIER.name], "op")
            wait_until(lambda: keeper.renewed >= 2, 5)
            # Paused for less than the ttl: renewals fail meanwhile, the lease survives.
            fresh_redis_server.pause(0.6)
            wait_until(lambda: keeper.renew_failed >= 1, 5)
            assert isinstance(keeper.last_error, StorageError)
            wait_until(lambda: not fresh_redis_server.paused, 5)
            renewed = keeper.renewed
            wait_until(lambda: keeper.renewed > renewed, 5)
            time.sleep(1.6)  # past the ttl of any renewal made before the pause
            assert leases.count("acme", TIER.name) == 1
            # Killed and restarted empty: the lease is gone, the keeper counts it lost.
            fresh_redis_server.kill()
            failed = keeper.renew_failed
            wait_until(lambda: keeper.renew_failed > failed, 5)
            fresh_redis_server.restart()
            wait_until(lambda: keeper.lost >= 1, 5)
            assert leases.count("acme", TIER.name) == 0  # never brought back
        finally:
            if keeper is not None:
                keeper.close()
            storage.close()


class RecordingRedisLeases(RedisLeases):
    """Redis leases with a record of when each renew call started and for which tenant."""

    def __init__(self, storage: RedisStorage) -> None:
        super().__init__(storage)
        self.tenants: list[str | None] = []
        self.started: list[float] = []

    def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int,
        now: int | None = None,
    ) -> int:
        self.tenants.append(key)
        self.started.append(time.monotonic())
        return super().renew(key, names, leases, ttl_ms, now)


def test_rounds_cut_short_by_a_silent_redis_rotate_over_every_group(
    fresh_redis_server: RedisServer,
) -> None:
    with fresh_redis_server.client() as client:
        storage = RedisStorage(client, timeout=0.05)
        keeper = None
        try:
            leases = RecordingRedisLeases(storage)
            # 20 groups; each call waits its 50 ms timeout: a 100 ms round reaches 2 or 3.
            keeper = LeaseKeeper(leases, ttl_ms=30_000, period_ms=100)
            tenants = [f"t{i}" for i in range(20)]
            for tenant in tenants:
                keeper.hold(tenant, [TIER.name], "op")
            fresh_redis_server.pause()
            try:
                wait_until(lambda: set(leases.tenants) >= set(tenants), 20)
            finally:
                fresh_redis_server.resume()
            # Rounds: calls a period apart or more. Each took 2 or 3 calls (a few more on a
            # loaded machine), not 20: and yet, rotating, they reached every group.
            started = leases.started
            rounds = [1]
            for before, after in itertools.pairwise(started):
                if after - before > 0.09:
                    rounds.append(0)
                rounds[-1] += 1
            assert len(rounds) >= 4
            assert max(rounds) <= 6, rounds
        finally:
            if keeper is not None:
                keeper.close()
            storage.close()


# -- the async keeper ------------------------------------------------------------------------


def test_the_async_keeper_renews_on_its_loop_until_closed(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    async def body(client: redis.asyncio.Redis) -> tuple[int, int, int, bool]:
        storage = AsyncRedisStorage(client, timeout=5.0)
        leases = AsyncRedisLeases(storage)
        keeper = LeaseKeeper(leases, ttl_ms=300, period_ms=60)
        try:
            for lease in ("long", "dropped"):
                assert (await leases.take("acme", [TIER], lease, 300)).taken
                keeper.hold("acme", [TIER.name], lease)
            await asyncio.sleep(1.0)
            both = await leases.count("acme", TIER.name)
            assert keeper.drop("acme", [TIER.name], "dropped")
            await asyncio.sleep(0.6)
            one = await leases.count("acme", TIER.name)
            renewed = keeper.renewed
            task = keeper._loops[asyncio.get_running_loop()].task
            await keeper.aclose()
            await asyncio.sleep(0.6)  # closed: "long" expires too
            none = await leases.count("acme", TIER.name)
            return both, one, none, renewed > 10 and task is not None and task.done()
        finally:
            keeper.close()
            await storage.close()

    assert async_redis_client(body) == (2, 1, 0, True)


def test_an_async_keeper_needs_a_running_loop_to_hold(redis_client: redis.Redis) -> None:
    async def make() -> LeaseKeeper:
        storage = AsyncRedisStorage(redis_client)
        return LeaseKeeper(AsyncRedisLeases(storage), ttl_ms=30_000)

    keeper = asyncio.run(make())
    assert keeper.is_async
    with pytest.raises(RuntimeError, match="no running event loop"):
        keeper.hold("acme", ["tier"], "op")
    keeper.close()


# -- a crashed holder, a forked one --------------------------------------------------------------

HOLDER = textwrap.dedent(
    """
    import sys, time
    import redis
    from quotaql.storage import LeaseKeeper, LeaseSpec, RedisLeases, RedisStorage

    storage = RedisStorage(redis.Redis(port=int(sys.argv[1])), timeout=1.0)
    leases = RedisLeases(storage)
    keeper = LeaseKeeper(leases, ttl_ms=1_000, period_ms=200)
    for i in range(3):
        assert leases.take("acme", [LeaseSpec("tier", 3)], f"held-{i}", 1_000).taken
        keeper.hold("acme", ["tier"], f"held-{i}")
    print("ready", flush=True)
    time.sleep(60)
    """
)


def test_a_sigkilled_holders_leases_free_within_their_ttl(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(redis_server.port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        key = lease_key("quotaql", "acme", "tier")
        time.sleep(1.5)  # past the ttl: the holder's keeper renews
        assert redis_client.zcard(key) == 3
        leases = RedisLeases(RedisStorage(redis_client, timeout=5.0))
        assert not leases.take("acme", [LeaseSpec("tier", 3)], "new", 30_000).taken
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        killed = time.monotonic()
        wait_until(lambda: leases.take("acme", [LeaseSpec("tier", 3)], "new", 30_000).taken, 5)
        assert time.monotonic() - killed <= 1.0 + 0.5  # within the ttl (and some scheduling)
        wait_until(lambda: leases.count("acme", "tier") == 1, 2)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
        if holder.stdout is not None:
            holder.stdout.close()


def test_a_forked_child_keeper_holds_nothing_of_its_parent() -> None:
    leases = MemoryLeases()
    keeper = LeaseKeeper(leases, ttl_ms=300, period_ms=50)
    try:
        assert leases.take("acme", [TIER], "parent", 300).taken
        keeper.hold("acme", [TIER.name], "parent")
        wait_until(lambda: keeper.renewed >= 1, 5)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave at once, whatever happens
            report: dict[str, Any] = {}
            try:
                os.close(read)
                report["held"] = len(keeper)
                report["thread"] = keeper._thread is not None
                assert leases.take("acme", [TIER], "child", 300).taken
                keeper.hold("acme", [TIER.name], "child")
                time.sleep(0.8)  # the parent's copy is not renewed here: it expires
                report["parent"] = leases.release("acme", [TIER.name], "parent")
                report["child"] = leases.count("acme", TIER.name)
                report["renewed"] = keeper.renewed
                keeper.close()
            except BaseException as exc:  # reported to the parent
                report["error"] = repr(exc)
            finally:
                os.write(write, json.dumps(report).encode())
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            report = json.loads(pipe.read())
        os.waitpid(pid, 0)
        renewed = keeper.renewed
        wait_until(lambda: keeper.renewed > renewed, 5)  # the parent's keeper goes on
        assert leases.count("acme", TIER.name) == 1  # the child's lease is in its own copy
    finally:
        keeper.close()
    assert report.get("error") is None, report
    assert report["held"] == 0
    assert report["thread"] is False
    assert report["parent"] == 0  # expired in the child's memory: nobody renewed it there
    assert report["child"] == 1  # renewed by the child's own keeper
    assert report["renewed"] > report["held"]
