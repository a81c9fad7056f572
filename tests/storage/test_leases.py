"""Lease sets (concurrency limits): one behaviour suite for memory, Redis and Redis Cluster,
sync and async, with explicit ``now=`` values so that every answer is exact; then the
memory implementation's bound under a flood of tenants.

The async implementation runs in an event loop of its own thread and is called from the
test through a thin synchronous face (as ``test_contract.py`` does for the rate storages).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import tracemalloc
from typing import TYPE_CHECKING, Any

import pytest

from quotaql.errors import ConfigError
from quotaql.storage import (
    AsyncRedisLeases,
    AsyncRedisStorage,
    LeaseSpec,
    MemoryLeases,
    RedisLeases,
    RedisStorage,
)
from quotaql.storage.leases import MAX_LEASE_ID, MAX_TTL_MS, LeaseResult, lease_key

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterator, Sequence

    import redis

    from tests.support.servers import AsyncRunner

T0 = 1_700_000_000_000  # ms: a realistic Redis TIME
TTL = 30_000
TIMEOUT = 5.0
KINDS = ("memory", "redis", "redis-cluster", "async-redis", "async-cluster")
TIER = LeaseSpec("tier", 3)
FIELD = LeaseSpec("field:Query.search", 1)

HOSTILE_LEASES = (
    "a b",
    "{a}",
    "}{",
    " ",
    "ü",
    "🔑 ключ",
    "\0",
    "a\0b",
    "\n",
    "'); redis.call('FLUSHALL') --",
    "%d %s",
    "take",
    "-inf",
    "+inf",
    "(0",
    "1e309",
    "x" * MAX_LEASE_ID,
)
HOSTILE_TENANTS = (
    "{a}b",
    "a b",
    "",
    "ünïcødé 🔑",
    "x" * 10_000,
    "\0",
    "{t:acme}",
    "acme}:~c:tier",
    "global",
    "{global}",
    "acme",
    "t:acme",
    None,
)


class FrozenClock:
    """The memory implementation's clock: tests pass ``now``; it only has to be fixed."""

    def __call__(self) -> float:
        return T0 / 1000


class AsyncDriven:
    """An AsyncRedisLeases in an event loop of its own thread, called synchronously."""

    def __init__(self, runner: AsyncRunner[Any], **options: Any) -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.leases: AsyncRedisLeases | None = None
        self._thread = threading.Thread(target=self._main, args=(runner, options), daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the async leases did not start within 30 s")
        if self._error is not None:
            raise self._error

    def _main(self, runner: AsyncRunner[Any], options: dict[str, Any]) -> None:
        async def body(client: Any) -> None:
            storage = AsyncRedisStorage(client, **options)
            self.leases = AsyncRedisLeases(storage)
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await storage.close()

        try:
            runner(body)
        except BaseException as exc:  # handed to the test thread by close()
            self._error = exc
            self._ready.set()

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def take(self, *args: Any, **kwargs: Any) -> LeaseResult:
        assert self.leases is not None
        return self._call(self.leases.take(*args, **kwargs))  # type: ignore[no-any-return]

    def release(self, *args: Any, **kwargs: Any) -> int:
        assert self.leases is not None
        return self._call(self.leases.release(*args, **kwargs))  # type: ignore[no-any-return]

    def renew(self, *args: Any, **kwargs: Any) -> int:
        assert self.leases is not None
        return self._call(self.leases.renew(*args, **kwargs))  # type: ignore[no-any-return]

    def count(self, *args: Any, **kwargs: Any) -> int:
        assert self.leases is not None
        return self._call(self.leases.count(*args, **kwargs))  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._error is not None:
            raise self._error


class Backend:
    """Lease sets with a synchronous face, ``now=T0`` unless told, and a look into Redis."""

    def __init__(
        self, kind: str, leases: Any, *, router: Any = None, nodes: Sequence[redis.Redis] = ()
    ) -> None:
        self.kind = kind
        self.leases = leases
        self.router = router  # routes key commands to the right node
        self.nodes = list(nodes)

    @property
    def is_redis(self) -> bool:
        return self.kind != "memory"

    def take(
        self,
        key: str | None,
        specs: Sequence[LeaseSpec],
        lease: str,
        ttl_ms: int = TTL,
        now: int = T0,
    ) -> LeaseResult:
        return self.leases.take(key, specs, lease, ttl_ms, now)  # type: ignore[no-any-return]

    def release(self, key: str | None, names: Sequence[str], lease: str, now: int = T0) -> int:
        return self.leases.release(key, names, lease, now)  # type: ignore[no-any-return]

    def renew(
        self,
        key: str | None,
        names: Sequence[str],
        leases: Sequence[str],
        ttl_ms: int = TTL,
        now: int = T0,
    ) -> int:
        return self.leases.renew(key, names, leases, ttl_ms, now)  # type: ignore[no-any-return]

    def count(self, key: str | None, name: str, now: int = T0) -> int:
        return self.leases.count(key, name, now)  # type: ignore[no-any-return]

    def stored_keys(self) -> list[bytes]:
        return sorted(key for node in self.nodes for key in node.keys("*"))


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    kind = request.param
    if kind == "memory":
        yield Backend(kind, MemoryLeases(clock=FrozenClock()))
        return
    if kind in ("redis", "async-redis"):
        raw = request.getfixturevalue("redis_client")
        nodes = [raw]
    else:
        raw = request.getfixturevalue("cluster_client")
        nodes = [node.client() for node in request.getfixturevalue("redis_cluster").nodes]
    try:
        if kind.startswith("async"):
            runner = request.getfixturevalue(
                "async_redis_client" if kind == "async-redis" else "async_cluster_client"
            )
            driven = AsyncDriven(runner, timeout=TIMEOUT)
            try:
                yield Backend(kind, driven, router=raw, nodes=nodes)
            finally:
                driven.close()
        else:
            storage = RedisStorage(raw, timeout=TIMEOUT)
            try:
                yield Backend(kind, RedisLeases(storage), router=raw, nodes=nodes)
            finally:
                storage.close()
    finally:
        for node in nodes:
            if node is not raw:
                node.close()


# -- take, release, count --------------------------------------------------------------------


def test_takes_up_to_the_maximum_then_refuses_naming_the_limit(backend: Backend) -> None:
    for i, expected in enumerate((1, 2, 3)):
        result = backend.take("acme", [TIER], f"op-{i}", now=T0 + i)
        assert result == LeaseResult(True, None, (expected,), None, T0 + i)
    refused = backend.take("acme", [TIER], "op-3", now=T0 + 10)
    # The earliest lease (taken at T0) expires at T0 + TTL: 10 ms of it have passed.
    assert refused == LeaseResult(False, "tier", (3,), TTL - 10, T0 + 10)
    assert backend.count("acme", "tier", now=T0 + 10) == 3


def test_a_release_frees_a_slot_and_says_whether_the_lease_was_still_held(
    backend: Backend,
) -> None:
    for i in range(3):
        assert backend.take("acme", [TIER], f"op-{i}").taken
    assert backend.release("acme", ["tier"], "op-1") == 1
    assert backend.release("acme", ["tier"], "op-1") == 0  # released twice: not held
    assert backend.release("acme", ["tier"], "never-taken") == 0
    assert backend.count("acme", "tier") == 2
    assert backend.take("acme", [TIER], "op-3").in_flight == (3,)


def test_a_crashed_holders_leases_free_themselves_exactly_at_their_ttl(
    backend: Backend,
) -> None:
    # Three holders take the three slots and never release (they crashed).
    for i in range(3):
        assert backend.take("acme", [TIER], f"dead-{i}", now=T0 + i).taken
    end = T0 + TTL  # the first lease expires here: live while its expiry is above now
    refused = backend.take("acme", [TIER], "new", now=end - 1)
    assert (refused.taken, refused.next_free_ms) == (False, 1)
    assert backend.count("acme", "tier", now=end - 1) == 3
    assert backend.count("acme", "tier", now=end) == 2
    taken = backend.take("acme", [TIER], "new", now=end)
    assert (taken.taken, taken.in_flight) == (True, (3,))
    # Late: all the dead ones are gone; their release reports them expired.
    assert backend.count("acme", "tier", now=end + 2) == 1
    assert backend.release("acme", ["tier"], "dead-2", now=end + 2) == 0


def test_a_release_after_expiry_counts_as_expired(backend: Backend) -> None:
    assert backend.take("acme", [TIER, FIELD], "op").taken
    assert backend.release("acme", ["tier", "field:Query.search"], "op", now=T0 + TTL) == 0
    assert backend.take("acme", [TIER, FIELD], "op2").taken
    assert backend.release("acme", ["tier", "field:Query.search"], "op2", now=T0 + TTL - 1) == 2


def test_take_is_all_or_nothing_over_two_limits(backend: Backend) -> None:
    assert backend.take("acme", [TIER, FIELD], "op-1").in_flight == (1, 1)
    refused = backend.take("acme", [TIER, FIELD], "op-2", now=T0 + 5)
    assert refused == LeaseResult(False, "field:Query.search", (1, 1), TTL - 5, T0 + 5)
    assert backend.count("acme", "tier") == 1  # op-2 took no tier slot either
    # Another root field has its own set: the tier's slots are still there.
    other = LeaseSpec("field:Query.other", 1)
    assert backend.take("acme", [TIER, other], "op-3").in_flight == (2, 1)
    # The first full set in the specs' order is the one named; counts are given for all.
    backend.take("acme", [TIER], "op-4")
    refused = backend.take("acme", [FIELD, TIER, other], "op-5")
    assert (refused.limited_by, refused.in_flight) == ("field:Query.search", (1, 3, 1))
    refused = backend.take("acme", [other, TIER], "op-5")
    assert refused.limited_by == "field:Query.other"
    assert backend.count("acme", "tier") == 3
    # Releasing op-1 from both sets frees the field.
    assert backend.release("acme", ["tier", "field:Query.search"], "op-1") == 2
    assert backend.take("acme", [FIELD], "op-5").taken


def test_next_free_is_the_earliest_lease_of_the_refusing_set(backend: Backend) -> None:
    backend.take("acme", [TIER], "late", now=T0 + 500)
    backend.take("acme", [TIER], "early", now=T0)
    backend.take("acme", [TIER], "mid", now=T0 + 200, ttl_ms=TTL + 1000)
    refused = backend.take("acme", [TIER], "x", now=T0 + 600)
    assert refused.next_free_ms == TTL - 600  # "early"
    assert backend.release("acme", ["tier"], "early", now=T0 + 600) == 1
    assert backend.take("acme", [TIER], "y", now=T0 + 600).taken
    assert backend.take("acme", [TIER], "z", now=T0 + 700).next_free_ms == TTL - 200  # "late"


def test_taking_a_held_lease_again_does_not_count_it_twice(backend: Backend) -> None:
    for i in range(3):
        backend.take("acme", [TIER], f"op-{i}")
    # A retry of op-0 after a timeout (the first take did run): allowed even at the maximum.
    again = backend.take("acme", [TIER], "op-0", now=T0 + 100)
    assert again == LeaseResult(True, None, (3,), None, T0 + 100)
    # ... and its expiry moved to T0 + 100 + TTL: it outlives op-1 and op-2.
    assert backend.count("acme", "tier", now=T0 + TTL) == 1
    # A take with a shorter ttl never moves an expiry back.
    backend.take("acme", [TIER], "op-0", ttl_ms=1, now=T0 + 200)
    assert backend.count("acme", "tier", now=T0 + TTL + 99) == 1
    # Held in one set, not in the other: it needs room only where it is new.
    backend.take("acme", [FIELD], "f-1", now=T0 + TTL + 99)
    refused = backend.take("acme", [TIER, FIELD], "op-0", now=T0 + TTL + 99)
    assert (refused.limited_by, refused.in_flight) == ("field:Query.search", (1, 1))


def test_tenants_and_limits_have_sets_of_their_own(backend: Backend) -> None:
    for tenant in HOSTILE_TENANTS:
        assert backend.take(tenant, [FIELD], "op").taken, tenant
    for tenant in HOSTILE_TENANTS:
        assert backend.count(tenant, FIELD.name) == 1, tenant
        assert not backend.take(tenant, [FIELD], "op-2").taken
        assert backend.count(tenant, "tier") == 0
    assert backend.release("acme", [FIELD.name], "op") == 1
    assert backend.count("t:acme", FIELD.name) == 1
    assert backend.count(None, FIELD.name) == 1
    if backend.is_redis:
        # Every set of a tenant is under its hash tag; hostile tenants are hashed.
        keys = backend.stored_keys()
        assert len(keys) == len(HOSTILE_TENANTS) - 1  # acme's set emptied: deleted
        assert all(
            key.startswith((b"quotaql:{t:", b"quotaql:{h:", b"quotaql:{global}")) for key in keys
        )
        assert all(key.endswith(b"}:~c:field:Query.search") for key in keys)


def test_a_limit_without_leases_costs_nothing_and_counts_zero(backend: Backend) -> None:
    assert backend.count("acme", "tier") == 0
    assert backend.release("acme", ["tier", "field:Query.x"], "op") == 0
    assert backend.renew("acme", ["tier"], ["op"]) == 0
    if backend.is_redis:
        assert backend.stored_keys() == []


# -- renew -------------------------------------------------------------------------------------


def test_renew_keeps_a_long_operations_lease(backend: Backend) -> None:
    backend.take("acme", [TIER, FIELD], "long")
    backend.take("acme", [TIER], "short")
    # Every 10 s (a third of the ttl) the holder renews: far past the first ttl.
    for step in range(1, 10):
        assert backend.renew("acme", ["tier", FIELD.name], ["long"], now=T0 + step * 10_000) == 2
    assert backend.count("acme", "tier", now=T0 + 90_000) == 1  # "short" expired long ago
    assert backend.count("acme", FIELD.name, now=T0 + 90_000 + TTL - 1) == 1
    assert backend.count("acme", FIELD.name, now=T0 + 90_000 + TTL) == 0


def test_renew_never_brings_back_a_released_or_expired_lease(backend: Backend) -> None:
    for lease in ("released", "expired", "kept"):
        backend.take("acme", [TIER], lease)
    backend.release("acme", ["tier"], "released", now=T0 + 10)
    backend.renew("acme", ["tier"], ["kept"], now=T0 + TTL - 1)
    # At T0 + TTL "expired" is no longer live: a renew, even of all three, finds only "kept".
    assert backend.renew("acme", ["tier"], ["released", "expired", "kept"], now=T0 + TTL) == 1
    assert backend.count("acme", "tier", now=T0 + TTL) == 1
    assert backend.release("acme", ["tier"], "expired", now=T0 + TTL) == 0
    assert backend.release("acme", ["tier"], "released", now=T0 + TTL) == 0
    assert backend.count("acme", "tier", now=T0 + TTL) == 1


def test_renew_never_shortens_a_lease(backend: Backend) -> None:
    backend.take("acme", [TIER], "op", ttl_ms=60_000)
    assert backend.renew("acme", ["tier"], ["op"], ttl_ms=1, now=T0 + 1) == 1
    assert backend.count("acme", "tier", now=T0 + 59_999) == 1


def test_renew_counts_set_lease_pairs_once_each(backend: Backend) -> None:
    for lease in ("a", "b"):
        backend.take("acme", [TIER, LeaseSpec("subscriptions", 5)], lease)
    names = ["tier", "subscriptions", "field:Query.none"]
    assert backend.renew("acme", names, ["a", "b", "a", "ghost"]) == 4


def test_hostile_lease_ids_are_opaque_members(backend: Backend) -> None:
    spec = LeaseSpec("tier", len(HOSTILE_LEASES))
    for i, lease in enumerate(HOSTILE_LEASES):
        assert backend.take("acme", [spec], lease).in_flight == (i + 1,), lease
    assert backend.renew("acme", ["tier"], list(HOSTILE_LEASES)) == len(HOSTILE_LEASES)
    for i, lease in enumerate(HOSTILE_LEASES):
        assert backend.release("acme", ["tier"], lease) == 1, lease
        assert backend.count("acme", "tier") == len(HOSTILE_LEASES) - i - 1
    if backend.is_redis:  # nothing else was written (or flushed) by any of them
        assert backend.stored_keys() == []
        assert backend.take("other", [TIER], "op").taken
        assert backend.stored_keys() == [b"quotaql:{t:other}:~c:tier"]


# -- arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "a b", "{tier}", "tier}", "a~b", "a!b", "x" * 129, "ü", "a\nb", "a\0", 5, None]
)
def test_a_limit_name_that_could_break_out_of_its_key_is_refused(name: object) -> None:
    with pytest.raises(ConfigError, match="limit name"):
        LeaseSpec(name, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("maximum", [0, -1, 1.0, 2.5, True, "3", None])
def test_a_maximum_must_be_a_positive_integer(maximum: object) -> None:
    with pytest.raises(ConfigError, match=r"limit 'tier': maximum must be an integer >= 1"):
        LeaseSpec("tier", maximum)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda b: b.take("acme", [], "op"), ValueError, "at least one LeaseSpec"),
        (lambda b: b.take("acme", [TIER, TIER], "op"), ValueError, "distinct"),
        (lambda b: b.take("acme", [("tier", 3)], "op"), TypeError, "LeaseSpec objects"),
        (lambda b: b.take("acme", [TIER], ""), ValueError, "1-200 characters"),
        (lambda b: b.take("acme", [TIER], "x" * 201), ValueError, "1-200 characters"),
        (lambda b: b.take("acme", [TIER], 7), TypeError, "lease id must be a string"),
        (lambda b: b.take("acme", [TIER], "\ud800"), ValueError, "valid unicode"),
        (lambda b: b.take("acme", [TIER], "op", ttl_ms=0), ValueError, "ttl_ms"),
        (lambda b: b.take("acme", [TIER], "op", ttl_ms=MAX_TTL_MS + 1), ValueError, "ttl_ms"),
        (lambda b: b.take("acme", [TIER], "op", ttl_ms=1.5), ValueError, "ttl_ms"),
        (lambda b: b.take("acme", [TIER], "op", ttl_ms=True), ValueError, "ttl_ms"),
        (lambda b: b.take("acme", [TIER], "op", now=1.5), TypeError, "now"),
        (lambda b: b.release("acme", "tier", "op"), TypeError, "not the string"),
        (lambda b: b.release("acme", [], "op"), ValueError, "at least one limit name"),
        (lambda b: b.release("acme", ["a b"], "op"), ValueError, "limit name 'a b'"),
        (lambda b: b.release("acme", ["{x}"], "op"), ValueError, "limit name"),
        (lambda b: b.release("acme", ["t", "t"], "op"), ValueError, "distinct"),
        (lambda b: b.renew("acme", ["tier"], "op"), TypeError, "not the string"),
        (lambda b: b.renew("acme", ["tier"], ["ok", ""]), ValueError, "1-200 characters"),
        (lambda b: b.renew("acme", ["tier"], ["ok"], ttl_ms=-5), ValueError, "ttl_ms"),
        (lambda b: b.count("acme", "a}b"), ValueError, "limit name"),
    ],
)
def test_bad_arguments_get_a_precise_error_and_write_nothing(
    backend: Backend, call: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        call(backend)
    assert backend.count("acme", "tier") == 0
    if backend.is_redis:
        assert backend.stored_keys() == []


def test_the_redis_key_of_a_lease_set() -> None:
    assert lease_key("quotaql", "acme", "tier") == "quotaql:{t:acme}:~c:tier"
    assert lease_key("q", None, "subscriptions") == "q:{global}:~c:subscriptions"
    assert lease_key("q", "a b", "tier").startswith("q:{h:")


def test_redis_leases_need_the_matching_storage() -> None:
    with pytest.raises(TypeError, match="RedisLeases needs a RedisStorage"):
        RedisLeases(MemoryLeases())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AsyncRedisLeases needs an AsyncRedisStorage"):
        AsyncRedisLeases(MemoryLeases())  # type: ignore[arg-type]


# -- memory: bounded whatever the tenants -------------------------------------------------------


class Clock:
    """Seconds, like ``time.monotonic``, that only move when told."""

    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> float:
        return self.ms / 1000


FLOOD = 20_000  # twenty times max_keys


def flooder(i: int) -> str:
    """The flood's tenants; one in a thousand has a 30 KB key (stored as its digest)."""
    return f"{i:06d}" + "x" * (30_000 if i % 1000 == 0 else 0)


def test_a_flood_of_tenants_that_never_release_stays_bounded_and_shares_one_budget() -> None:
    clock = Clock()
    leases = MemoryLeases(clock=clock, max_keys=1_000)
    spec = LeaseSpec("tier", 4)
    # A busy tenant holds its four slots before the flood.
    for i in range(4):
        assert leases.take("victim", [spec], f"v-{i}", TTL).taken
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        taken = 0
        for i in range(FLOOD):
            taken += leases.take(flooder(i), [spec], f"f-{i}", TTL).taken
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(leases) <= 1_000 + 1
    assert grown < 1_000 * 1_000  # under 1 KB a set, whatever the keys
    assert leases.overflowing
    # 999 tenants got a set of their own; the rest shared one overflow set of 4.
    assert taken == 999 + 4
    assert leases.overflowed == FLOOD - 999
    # The victim kept its set and its slots: the flood freed none of them.
    assert leases.count("victim", "tier") == 4
    assert not leases.take("victim", [spec], "v-4", TTL).taken
    # A lease taken in the overflow set is released (and counted) there.
    assert leases.count(flooder(FLOOD - 1), "tier") == 4
    assert leases.renew("001003", ["tier"], ["f-1003"], TTL) == 0  # refused: never held
    assert sum(leases.renew(flooder(i), ["tier"], [f"f-{i}"], TTL) for i in range(999, 1_010)) == 4
    # Tenants share the overflow set, not their lease ids: another's id is not theirs.
    assert leases.renew("whoever", ["tier"], [f"f-{i}" for i in range(999, 1_010)], TTL) == 0
    assert leases.release("001001", ["tier"], "f-1000") == 0
    assert sum(leases.release(flooder(i), ["tier"], f"f-{i}") for i in range(999, 1_010)) == 4
    assert leases.take("another", [spec], "a-1", TTL).taken


def test_tenants_that_release_their_leases_leave_room_for_new_ones() -> None:
    clock = Clock()  # never moves: only releases make sets idle
    leases = MemoryLeases(clock=clock, max_keys=1_000)
    spec = LeaseSpec("tier", 1)
    for i in range(FLOOD):
        tenant = f"t{i}"
        result = leases.take(tenant, [spec], "op", TTL)
        assert result.taken, i
        assert leases.release(tenant, ["tier"], "op") == 1
    assert len(leases) <= 1_000
    assert leases.overflowed == 0
    assert not leases.overflowing
    assert consistent(leases)


def consistent(leases: MemoryLeases) -> bool:
    """The table's order list and its sets hold the same keys, each set at its index."""
    order = leases._order
    sets = leases._sets
    return sorted(order) == sorted(sets) and all(sets[k].index == i for i, k in enumerate(order))


def test_a_set_a_release_empties_is_the_next_to_make_room() -> None:
    leases = MemoryLeases(clock=Clock(), max_keys=16)  # the clock never moves
    spec = LeaseSpec("tier", 1)
    for i in range(16):
        assert leases.take(f"t{i}", [spec], "op", TTL).taken
    assert leases.take("x", [spec], "op", TTL).taken  # the overflow set
    assert leases.overflowing
    for i in (12, 3, 7):  # wherever they are in the table
        assert leases.release(f"t{i}", ["tier"], "op") == 1
    for name in ("y0", "y1", "y2"):
        assert leases.take(name, [spec], "op", TTL).taken
        assert not leases.overflowing, name  # a set of its own
        assert leases.count(name, "tier") == 1
    # The table is full again; the overflow set holds x's lease (same id, other tenant).
    refused = leases.take("y3", [spec], "op", TTL)
    assert (refused.taken, refused.in_flight, leases.overflowing) == (False, (1,), True)
    assert len(leases) == 16 + 1
    assert consistent(leases)
    for i in (0, 1, 2, 4, 5, 6, 8, 9, 10, 11, 13, 14, 15):
        assert leases.count(f"t{i}", "tier") == 1  # the live sets were all kept


def test_expired_sets_make_room_once_their_leases_expire() -> None:
    clock = Clock()
    leases = MemoryLeases(clock=clock, max_keys=100)
    spec = LeaseSpec("tier", 1)
    for i in range(100):
        assert leases.take(f"dead{i}", [spec], "op", TTL).taken  # never released
    assert leases.take("late", [spec], "x", TTL).taken  # in the (empty) overflow set
    assert leases.overflowing
    assert not leases.take("later", [spec], "y", TTL).taken  # the overflow set is full
    clock.ms += TTL  # every crashed holder's lease expired
    for i in range(100):
        assert leases.take(f"new{i}", [spec], "op", TTL).taken
    assert not leases.overflowing
    assert len(leases) <= 100 + 1
    assert leases.count("new99", "tier") == 1
    assert consistent(leases)


def test_memory_leases_are_thread_safe_and_never_exceed_the_maximum() -> None:
    leases = MemoryLeases(max_keys=10)
    spec = LeaseSpec("tier", 3)
    running = 0
    peak = 0
    lock = threading.Lock()
    refused = 0

    def worker(n: int) -> None:
        nonlocal running, peak, refused
        for i in range(300):
            lease = f"{n}-{i}"
            if not leases.take("acme", [spec], lease, TTL).taken:
                with lock:
                    refused += 1
                continue
            with lock:
                running += 1
                peak = max(peak, running)
            assert leases.count("acme", "tier") <= 3
            with lock:
                running -= 1
            assert leases.release("acme", ["tier"], lease) == 1

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert 1 <= peak <= 3
    assert leases.count("acme", "tier") == 0


def test_max_keys_must_be_a_positive_integer() -> None:
    for bad in (0, -1, True, 1.5, "10"):
        with pytest.raises(ConfigError, match="max_keys must be a positive integer"):
            MemoryLeases(max_keys=bad)  # type: ignore[arg-type]
