"""One behaviour suite for every storage: memory, Redis, Redis Cluster, sync and async.

Each test runs against every storage (and most against every algorithm) with explicit
``now=`` values, so the answers are exact and must be the same everywhere. The async
storages run in an event loop of their own (through the ``AsyncRunner`` fixtures) and are
called from the test through a thin synchronous face.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest

from quotaql import AsyncRedisStorage, MemoryStorage, Quota, RedisStorage
from quotaql.errors import ConfigError
from quotaql.limiter.flows import reserved_turn
from quotaql.storage import Debit

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterator, Sequence

    import redis

    from quotaql.policy.quota import Decision
    from tests.support.servers import AsyncRunner

T0 = 1_700_000_000_000  # ms: a realistic Redis TIME, a multiple of every window used here
TIMEOUT = 5.0  # generous: these tests are about behaviour, not about a loaded machine's latency
ALGORITHMS = ("token_bucket", "gcra", "sliding_log", "sliding_counter", "fixed_window")
BUCKETS = ("token_bucket", "gcra")
KINDS = ("memory", "redis", "redis-cluster", "async-redis", "async-cluster")
REDIS_KINDS = KINDS[1:]

HOSTILE_TENANTS = (
    "{a}b",
    "a b",
    " ",
    "",
    "ünïcødé ключ 🔑",
    "x" * 10_000,
    "\0",
    "a\0b",
    "\ud800",  # a lone surrogate: not even valid UTF-8
    "\n",
    "*",
    "{",
    "}",
    "acme",
    "t:acme",  # the tag a safe tenant "acme" gets
    "{t:acme}",
    "h:" + "0" * 32,  # looks like a hashed tenant's tag
    "global",  # the tag of the shared scope
    "{global}",
    "acme}:q",
    "quotaql:{t:acme}:q",
    "q#log",
)


def make(algorithm: str, name: str = "q", size: float = 10, **kwargs: float) -> Quota:
    """A bucket of ``size`` refilled at 1/s, or a window of ``size`` per 10 s."""
    if algorithm in BUCKETS:
        kwargs.setdefault("refill_per_second", 1)
        return Quota(name, capacity=size, algorithm=algorithm, **kwargs)  # type: ignore[arg-type]
    kwargs.setdefault("window_seconds", 10)
    return Quota(name, limit=size, algorithm=algorithm, **kwargs)  # type: ignore[arg-type]


def one_of_each(refuser: str | None = None, refuser_size: float = 5) -> list[Quota]:
    """A quota of every algorithm, named after it; ``refuser`` is smaller than the others."""
    return [
        make(algorithm, algorithm, refuser_size if algorithm == refuser else 10)
        for algorithm in ALGORITHMS
    ]


# -- the storages under test ----------------------------------------------------------------


class AsyncDriven:
    """An AsyncRedisStorage living in its own event loop thread, called synchronously.

    The thread runs the ``AsyncRunner`` fixture: its client is made inside that loop, the
    storage is built on it, and every call is handed to the loop and awaited there.
    """

    def __init__(self, runner: AsyncRunner[Any], **options: Any) -> None:
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self.storage: AsyncRedisStorage | None = None
        self._thread = threading.Thread(target=self._main, args=(runner, options), daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the async storage did not start within 30 s")
        if self._error is not None:
            raise self._error

    def _main(self, runner: AsyncRunner[Any], options: dict[str, Any]) -> None:
        async def body(client: Any) -> None:
            self.storage = AsyncRedisStorage(client, **options)
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            try:
                await self._stop.wait()
            finally:
                await self.storage.close()

        try:
            runner(body)
        except BaseException as exc:  # handed to the test thread by close()
            self._error = exc
            self._ready.set()

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def acquire(self, debit: Debit) -> Decision:
        assert self.storage is not None
        return self._call(self.storage.acquire(debit))  # type: ignore[no-any-return]

    def refund(self, debit: Debit) -> None:
        assert self.storage is not None
        self._call(self.storage.refund(debit))

    def charge(self, debit: Debit) -> None:
        assert self.storage is not None
        self._call(self.storage.charge(debit))

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = None) -> Decision:
        assert self.storage is not None
        return self._call(self.storage.peek(key, quotas, now))  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._error is not None:
            raise self._error


class Backend:
    """A storage with a synchronous face, and a look at what it keeps."""

    def __init__(
        self,
        kind: str,
        storage: Any,
        *,
        router: redis.Redis | None = None,
        nodes: Sequence[redis.Redis] = (),
    ) -> None:
        self.kind = kind
        self.storage = storage
        self.router = router  # routes key commands (PTTL, MEMORY USAGE) to the right node
        self.nodes = list(nodes)  # every server, for KEYS and DBSIZE

    @property
    def is_redis(self) -> bool:
        return self.kind != "memory"

    @property
    def source(self) -> str:
        return "redis" if self.is_redis else "memory"

    def acquire(
        self,
        key: str | None,
        cost: float,
        quotas: Sequence[Quota],
        now: int | None = T0,
        costs: Sequence[float] | None = None,
    ) -> Decision:
        return self.storage.acquire(Debit(key, cost, quotas, now, costs))  # type: ignore[no-any-return]

    def refund(
        self,
        key: str | None,
        amount: float,
        quotas: Sequence[Quota],
        now: int | None = T0,
        amounts: Sequence[float] | None = None,
        at: int | None = None,
        turn: int | None = None,
    ) -> None:
        self.storage.refund(Debit(key, amount, quotas, now, amounts, at, turn))

    def charge(
        self, key: str | None, amount: float, quotas: Sequence[Quota], now: int | None = T0
    ) -> None:
        self.storage.charge(Debit(key, amount, quotas, now))

    def peek(self, key: str | None, quotas: Sequence[Quota], now: int | None = T0) -> Decision:
        return self.storage.peek(key, quotas, now)  # type: ignore[no-any-return]

    def size(self) -> int:
        """How many states (memory) or keys (Redis) are kept."""
        if not self.is_redis:
            return len(self.storage)
        return sum(int(node.dbsize()) for node in self.nodes)

    def stored_keys(self) -> list[bytes]:
        return sorted(key for node in self.nodes for key in node.keys("*"))

    def pttl(self, key: bytes) -> int:
        assert self.router is not None
        return int(self.router.pttl(key))

    def memory_usage(self, key: bytes) -> int:
        assert self.router is not None
        return int(self.router.memory_usage(key))


class FrozenClock:
    """The memory storage's clock: tests pass ``now``, so it only has to be deterministic."""

    def __call__(self) -> float:
        return T0 / 1000


def _backend(request: pytest.FixtureRequest, kind: str) -> Iterator[Backend]:
    if kind == "memory":
        yield Backend(kind, MemoryStorage(clock=FrozenClock()))
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
                yield Backend(kind, storage, router=raw, nodes=nodes)
            finally:
                storage.close()
    finally:
        for node in nodes:
            if node is not raw:
                node.close()


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from _backend(request, request.param)


@pytest.fixture(params=REDIS_KINDS)
def redis_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    yield from _backend(request, request.param)


@pytest.fixture(params=ALGORITHMS)
def algorithm(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# -- acquire, peek, refund ------------------------------------------------------------------

# Take 4 of 10 at T0: seconds until full again.
RESET_AFTER_4 = {
    "token_bucket": 4.0,
    "gcra": 4.0,
    "sliding_log": 10.0,  # the entry leaves the window
    "sliding_counter": 20.0,  # counted in full for this window, weighted during the next
    "fixed_window": 10.0,
}
# Take 10 of 10 at T0, then ask for 3 at T0: seconds until that fits.
RETRY_AFTER_3 = {
    "token_bucket": 3.0,
    "gcra": 3.0,
    "sliding_log": 10.0,
    "sliding_counter": 13.0,  # 10 x weight + 3 <= 10 once the weight is 0.7
    "fixed_window": 10.0,
}


def test_acquire_debits_the_cost_and_reports_what_is_left(backend: Backend, algorithm: str) -> None:
    q = make(algorithm)
    decision = backend.acquire("acme", 4, [q])
    reset = RESET_AFTER_4[algorithm]
    assert decision == (
        True, 4, 6.0, 10.0, 0.0, reset, None, backend.source, None,
        (("q", 10.0, 6.0, reset, 0.0, True),), T0, 0.0,
    )  # fmt: skip
    assert backend.acquire("acme", 6, [q]).remaining == 0


def test_a_refusal_names_the_quota_and_the_exact_retry(backend: Backend, algorithm: str) -> None:
    q = make(algorithm)
    assert backend.acquire("acme", 10, [q]).allowed
    decision = backend.acquire("acme", 3, [q])
    retry = RETRY_AFTER_3[algorithm]
    assert (decision.allowed, decision.reason, decision.limited_by) == (False, "rate_limited", "q")
    assert (decision.retry_after, decision.remaining, decision.limit) == (retry, 0.0, 10.0)
    assert decision.quotas == (("q", 10.0, 0.0, decision.reset_after, retry, False),)
    at = T0 + int(retry * 1000)
    assert not backend.acquire("acme", 3, [q], now=at - 1).allowed
    assert backend.acquire("acme", 3, [q], now=at).allowed


def test_peek_reports_the_state_without_debiting(backend: Backend, algorithm: str) -> None:
    q = make(algorithm)
    backend.acquire("acme", 4, [q])
    first = backend.peek("acme", [q], now=T0 + 1)
    assert first == backend.peek("acme", [q], now=T0 + 1)
    assert (first.allowed, first.cost, first.limited_by) == (True, 0.0, None)
    assert 6.0 <= first.remaining < 6.01
    assert backend.acquire("acme", 6, [q], now=T0 + 1).allowed


def test_peek_of_an_untouched_key_shows_a_full_quota_and_writes_nothing(
    backend: Backend, algorithm: str
) -> None:
    decision = backend.peek("acme", [make(algorithm)])
    assert decision == (
        True, 0.0, 10.0, 10.0, 0.0, 0.0, None, backend.source, None,
        (("q", 10.0, 10.0, 0.0, 0.0, True),), T0, 0.0,
    )  # fmt: skip
    assert backend.size() == 0


@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a not in BUCKETS])
def test_a_late_refund_never_gives_more_than_a_prompt_one(backend: Backend, algorithm: str) -> None:
    """A refund that arrives after its debit's window has passed (a slow operation, a deferred
    refund) gives back only to that window: never budget of the window a later operation
    is spending (a refund taken from the current window's count would hand it out again).

    A bucket has no windows: a late refund gives back the same tokens, up to full, and the
    bucket's bound (capacity + rate x time over any interval) holds whenever it comes.
    """
    q = make(algorithm)
    for key, late in (("prompt", False), ("late", True)):
        first = backend.acquire(key, 8, [q], now=T0 + 9_000)  # near the end of window 0
        assert first.allowed
        assert first.at == T0 + 9_000
        if not late:
            backend.refund(key, 8, [q], now=T0 + 9_500, at=first.at)
        assert backend.acquire(key, 2, [q], now=T0 + 10_500).allowed  # window 1
        if late:
            backend.refund(key, 8, [q], now=T0 + 11_000, at=first.at)
    for when in (T0 + 11_000, T0 + 19_500):  # before and after the first debit expires
        prompt = backend.peek("prompt", [q], now=when).remaining
        late_remaining = backend.peek("late", [q], now=when).remaining
        assert late_remaining <= prompt + 1e-9, (when, prompt, late_remaining)
    # The window's own count is left as the later debit made it.
    assert backend.peek("late", [q], now=T0 + 11_000).remaining == 8


def test_a_refund_never_reaches_into_a_later_operations_entries(backend: Backend) -> None:
    """A sliding log gives a refund back from the entries made at or before its debit."""
    q = make("sliding_log")
    first = backend.acquire("acme", 6, [q], now=T0)
    assert backend.acquire("acme", 4, [q], now=T0 + 5_000).allowed
    backend.refund("acme", 6, [q], now=T0 + 6_000, at=first.at)
    # The first debit is gone; the second stays until it expires at T0 + 15 s.
    assert backend.peek("acme", [q], now=T0 + 6_000).remaining == 6
    assert backend.peek("acme", [q], now=T0 + 14_999).remaining == 6
    assert backend.peek("acme", [q], now=T0 + 15_000).remaining == 10


def test_refund_gives_cost_back_but_never_above_full(backend: Backend, algorithm: str) -> None:
    q = make(algorithm)
    backend.acquire("acme", 6, [q])
    backend.refund("acme", 2, [q])
    assert backend.peek("acme", [q]).remaining == 6
    backend.refund("acme", 100, [q])
    assert backend.peek("acme", [q]).remaining == 10
    assert backend.acquire("acme", 10, [q]).allowed
    assert not backend.acquire("acme", 0.5, [q]).allowed


def test_refund_to_an_untouched_key_writes_nothing(backend: Backend, algorithm: str) -> None:
    backend.refund("acme", 5, [make(algorithm)])
    assert backend.size() == 0


def test_no_quotas_allows_everything_and_writes_nothing(backend: Backend) -> None:
    decision = backend.acquire("acme", 5, [])
    assert (decision.allowed, decision.limited_by, decision.quotas) == (True, None, ())
    backend.refund("acme", 5, [])
    assert backend.size() == 0


# -- several quotas: one decision, all or nothing --------------------------------------------

# The refuser holds 5, has 1 left after taking 4 at T0, and is asked for 4 more at T0.
RETRY_AFTER_4_OF_5 = {
    "token_bucket": 3.0,
    "gcra": 3.0,
    "sliding_log": 10.0,  # the first entry (4) must leave the window
    "sliding_counter": 17.5,  # 4 x weight + 4 <= 5 once the weight is 0.25
    "fixed_window": 10.0,
}


def test_a_refusal_by_one_quota_debits_none_of_the_others(backend: Backend, algorithm: str) -> None:
    quotas = one_of_each(refuser=algorithm)
    assert backend.acquire("acme", 4, quotas).allowed
    decision = backend.acquire("acme", 4, quotas)
    assert (decision.allowed, decision.limited_by, decision.reason) == (
        False,
        algorithm,
        "rate_limited",
    )
    assert decision.retry_after == RETRY_AFTER_4_OF_5[algorithm]
    assert (decision.remaining, decision.limit) == (1.0, 5.0)
    assert [status.allowed for status in decision.quotas] == [
        name != algorithm for name in ALGORITHMS
    ]
    for status in backend.peek("acme", quotas).quotas:
        assert status.remaining == (1.0 if status.name == algorithm else 6.0), status


def test_the_quota_that_refuses_longest_is_the_one_named(backend: Backend) -> None:
    quotas = [make("token_bucket", "fast", 5), make("fixed_window", "slow", 5), make("gcra", "ok")]
    backend.acquire("acme", 4, quotas)
    decision = backend.acquire("acme", 4, quotas)
    assert (decision.limited_by, decision.retry_after) == ("slow", 10.0)
    assert [s.retry_after for s in decision.quotas] == [3.0, 10.0, 0.0]


def test_an_allowed_multi_quota_call_reports_the_tightest_quota(backend: Backend) -> None:
    quotas = [make("token_bucket", "wide", 100), make("sliding_log", "narrow", 8)]
    decision = backend.acquire("acme", 5, quotas)
    assert (decision.allowed, decision.remaining, decision.limit) == (True, 3.0, 8.0)
    assert [status.remaining for status in decision.quotas] == [95.0, 3.0]


def test_each_quota_can_be_debited_its_own_amount_all_or_nothing(
    backend: Backend, algorithm: str
) -> None:
    # A root-field quota pays that field's cost, the tenant's quota the operation's, in
    # one atomic call.
    quotas = [make("token_bucket", "tenant", 100), make(algorithm, "field", 10)]
    decision = backend.acquire("acme", 30, quotas, costs=[30, 4])
    assert decision.allowed
    assert [status.remaining for status in decision.quotas] == [70.0, 6.0]
    refused = backend.acquire("acme", 30, quotas, costs=[30, 7])
    assert (refused.allowed, refused.limited_by, refused.cost) == (False, "field", 7)
    after = backend.peek("acme", quotas)
    assert [status.remaining for status in after.quotas] == [70.0, 6.0]  # nothing debited
    backend.refund("acme", 0, quotas, amounts=[20, 3])
    assert [status.remaining for status in backend.peek("acme", quotas).quotas] == [90.0, 9.0]


def test_per_quota_amounts_must_match_the_quotas(backend: Backend) -> None:
    quotas = [make("token_bucket", "tenant"), make("gcra", "field")]
    with pytest.raises(ValueError, match="one amount per quota"):
        backend.acquire("acme", 1, quotas, costs=[1])
    with pytest.raises(ValueError, match="finite number"):
        backend.acquire("acme", 1, quotas, costs=[1, -2])
    assert backend.size() == 0


def test_a_cost_above_capacity_is_refused_for_good_and_writes_nothing(
    backend: Backend, algorithm: str
) -> None:
    q = make(algorithm)
    decision = backend.acquire("acme", 10.5, [q])
    assert (decision.allowed, decision.reason, decision.retry_after, decision.limited_by) == (
        False,
        "exceeds_capacity",
        None,
        "q",
    )
    assert decision.remaining == 10.0
    assert backend.size() == 0


def test_exceeding_capacity_wins_over_a_rate_limit(backend: Backend, algorithm: str) -> None:
    quotas = [make("fixed_window", "window", 20), make(algorithm, "small", 8)]
    backend.acquire("acme", 15, [quotas[0]])
    decision = backend.acquire("acme", 9, quotas)
    assert (decision.limited_by, decision.reason, decision.retry_after) == (
        "small",
        "exceeds_capacity",
        None,
    )
    assert backend.peek("acme", quotas).quotas[0].remaining == 5


# -- keys: shared quotas, hostile tenants ----------------------------------------------------


def test_shared_quotas_are_one_budget_apart_from_every_tenant(
    backend: Backend, algorithm: str
) -> None:
    q = make(algorithm)
    assert backend.acquire(None, 10, [q]).allowed
    assert not backend.acquire(None, 1, [q]).allowed
    for tenant in ("acme", "global", "{global}", ""):
        assert backend.acquire(tenant, 10, [q]).allowed, tenant
    assert backend.peek(None, [q]).remaining == 0


def test_hostile_tenants_each_get_their_own_state(backend: Backend) -> None:
    quotas = one_of_each()
    # Every tenant takes a different amount from all five quotas in one call (one script
    # call per tenant: on the cluster its keys must share a slot): any two tenants that
    # shared a key would show the sum.
    taken = {tenant: 0.25 * (index + 1) for index, tenant in enumerate(HOSTILE_TENANTS)}
    for tenant, cost in taken.items():
        assert backend.acquire(tenant, cost, quotas).allowed, repr(tenant)
    for tenant, cost in taken.items():
        remaining = [status.remaining for status in backend.peek(tenant, quotas).quotas]
        assert remaining == [10 - cost] * len(quotas), repr(tenant)
    assert backend.peek("untouched", quotas).remaining == 10
    assert backend.peek(None, quotas).remaining == 10


def test_every_key_of_a_tenant_shares_one_hash_tag_and_stays_short(
    redis_backend: Backend,
) -> None:
    quotas = one_of_each()
    for tenant in HOSTILE_TENANTS:
        redis_backend.acquire(tenant, 1, quotas)
    by_tag: dict[bytes, set[bytes]] = {}
    for key in redis_backend.stored_keys():
        assert key.count(b"{") == 1, key
        assert key.count(b"}") == 1, key
        tag = key[key.index(b"{") + 1 : key.index(b"}")]
        by_tag.setdefault(tag, set()).add(key)
        assert len(key) <= 80, key
    assert len(by_tag) == len(HOSTILE_TENANTS)
    # Five quotas: four in the tenant's hash, the sliding log with two keys of its own.
    assert all(len(keys) == 3 for keys in by_tag.values())


# -- what Redis keeps ------------------------------------------------------------------------

# Take 4 of 10 at T0: how long each state must live (ms).
TTL_AFTER_4 = {
    "token_bucket": 4000,
    "gcra": 4000,
    "sliding_log": 10_000,
    "sliding_counter": 20_000,
    "fixed_window": 10_000,
}


def slack(need: int) -> int:
    """How long a state hash may outlive its states: a quarter more, at least a second (the
    script extends a hash's expiry only when a state needs more, not on every write)."""
    return need + max(1000, -(-need // 4))


def test_every_key_expires_soon_after_its_state_stops_mattering(
    redis_backend: Backend, algorithm: str
) -> None:
    q = make(algorithm)
    redis_backend.acquire("acme", 4, [q])
    keys = redis_backend.stored_keys()
    need = TTL_AFTER_4[algorithm]
    # A sliding log's keys live exactly as long as its newest entry; a hash a little longer.
    bound = need if algorithm == "sliding_log" else slack(need)
    assert len(keys) == (2 if algorithm == "sliding_log" else 1)
    for key in keys:
        ttl = redis_backend.pttl(key)
        # Real time runs while the test does: allow a second of it; never below the need.
        assert need - 1000 < ttl <= bound, key


def test_every_key_keeps_a_ttl_through_acquire_refund_and_peek(
    redis_backend: Backend, algorithm: str
) -> None:
    q = make(algorithm)
    steps = [
        lambda: redis_backend.acquire("acme", 4, [q]),
        lambda: redis_backend.acquire("acme", 3, [q], now=T0 + 1000),
        lambda: redis_backend.refund("acme", 2, [q], now=T0 + 1500),
        lambda: redis_backend.peek("acme", [q], now=T0 + 10_500),  # the first entry expires
        lambda: redis_backend.acquire("acme", 1, [q], now=T0 + 10_600),
        lambda: redis_backend.refund("acme", 0.5, [q], now=T0 + 10_700),
    ]
    for step in steps:
        step()
        for key in redis_backend.stored_keys():
            assert redis_backend.pttl(key) > 0, key


def test_no_key_outlives_its_state(redis_backend: Backend) -> None:
    # Short enough to expire within the test, long enough that a loaded machine still
    # finds all twelve keys right after writing them (buckets full in 0.5 s, windows 0.5 s).
    fast = [
        Quota("tb", capacity=10, refill_per_second=10),
        Quota("gcra", capacity=10, refill_per_second=10, algorithm="gcra"),
        Quota("log", limit=10, window_seconds=0.5, algorithm="sliding_log"),
        Quota("ctr", limit=10, window_seconds=0.5, algorithm="sliding_counter"),
        Quota("fix", limit=10, window_seconds=0.5, algorithm="fixed_window"),
    ]
    # The server's clock (now=None): keys expire in real time, within 2 windows (1 s).
    assert redis_backend.acquire("acme", 7, fast, now=None).allowed
    redis_backend.refund("acme", 2, fast, now=None)
    assert redis_backend.acquire(None, 7, fast, now=None).allowed
    # Per scope: one hash for four quotas, two keys for the sliding log.
    assert len(redis_backend.stored_keys()) == 6
    deadline = time.monotonic() + 5.0
    while redis_backend.stored_keys() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert redis_backend.stored_keys() == []


@pytest.mark.parametrize("tenant", ["acme", "{acme}"], ids=["safe", "hashed"])
def test_an_idle_tenant_costs_redis_about_a_hundred_bytes_and_each_more_quota_little(
    redis_backend: Backend, tenant: str
) -> None:
    q = Quota("tenant", capacity=1000, refill_per_second=50)
    redis_backend.acquire(tenant, 37, [q])
    redis_backend.acquire(tenant, 0.3, [q], now=T0 + 7)  # 17 significant digits of tokens
    [key] = redis_backend.stored_keys()
    # One small hash (Redis's compact listpack): the state (one integer) and the hash's
    # expiry. Hashed tenants take 22 characters more, and cluster mode keeps 16 more bytes
    # per key for its slot index. Measured on Redis 7.0: 120 bytes for a plain id.
    limit = 128 + (16 if tenant == "{acme}" else 0) + (16 if "cluster" in redis_backend.kind else 0)
    one = redis_backend.memory_usage(key)
    assert one <= limit, (key, redis_backend.router.hgetall(key))  # type: ignore[union-attr]
    # Every further quota of the tenant is one more field of the same hash (a key of its own
    # cost some 90 bytes each).
    more = [Quota(f"op:{i}", capacity=60, refill_per_second=1) for i in range(4)]
    redis_backend.acquire(tenant, 1, [q, *more], now=T0 + 8)
    [key] = redis_backend.stored_keys()
    assert (redis_backend.memory_usage(key) - one) / len(more) <= 32


# -- bad arguments ---------------------------------------------------------------------------

BAD_COSTS = [-1, -0.5, math.nan, math.inf, -math.inf, True, False, "3", None]


@pytest.mark.parametrize("cost", BAD_COSTS, ids=repr)
def test_a_bad_cost_is_refused_and_nothing_is_written(backend: Backend, cost: object) -> None:
    for quotas in ([make("sliding_log")], one_of_each()):
        with pytest.raises((ValueError, TypeError)):
            backend.acquire("acme", cost, quotas)  # type: ignore[arg-type]
        with pytest.raises((ValueError, TypeError)):
            backend.refund("acme", cost, quotas)  # type: ignore[arg-type]
    assert backend.size() == 0


@pytest.mark.parametrize("cost", BAD_COSTS, ids=repr)
def test_a_bad_refund_amount_leaves_the_state_alone(backend: Backend, cost: object) -> None:
    q = make("token_bucket")
    backend.acquire("acme", 4, [q])
    with pytest.raises((ValueError, TypeError)):
        backend.refund("acme", cost, [q])  # type: ignore[arg-type]
    assert backend.peek("acme", [q]).remaining == 6


@pytest.mark.parametrize(
    "quotas",
    [["q"], [object()], [{"capacity": 1}], [Quota("q", capacity=1, refill_per_second=1), "x"]],
    ids=["str", "object", "dict", "mixed"],
)
def test_something_other_than_a_quota_is_a_type_error(
    backend: Backend, quotas: list[object]
) -> None:
    with pytest.raises(TypeError):
        backend.acquire("acme", 1, quotas)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        backend.refund("acme", 1, quotas)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        backend.peek("acme", quotas)  # type: ignore[arg-type]
    assert backend.size() == 0


# -- connections -----------------------------------------------------------------------------


# Closing the storages is tested in tests/limiter/test_limiter.py (connections counted by name).


# -- the same answers everywhere -------------------------------------------------------------


def test_a_mixed_scenario_decides_like_the_memory_reference(backend: Backend) -> None:
    reference = MemoryStorage(clock=FrozenClock())
    quotas = one_of_each(refuser="sliding_counter", refuser_size=7.5)
    script: list[tuple[str, str | None, float, list[Quota], int]] = [
        ("acquire", "acme", 2.5, quotas, T0 + 100),
        ("acquire", "acme", 3, quotas[:2], T0 + 900),
        ("acquire", None, 4, quotas[2:], T0 + 1_000),
        ("acquire", "acme", 4.5, quotas, T0 + 1_500),  # the counter refuses
        ("refund", "acme", 1.5, quotas, T0 + 2_000),
        ("peek", "acme", 0, quotas, T0 + 2_001),
        ("acquire", "acme", 10.5, quotas, T0 + 2_002),  # above every capacity
        ("acquire", "{acme}", 7.5, quotas[::-1], T0 + 2_003),
        ("peek", "acme", 0, quotas, T0 + 9_999),
        ("acquire", "acme", 5, quotas, T0 + 10_000),  # new windows
        ("acquire", "acme", 4, quotas, T0 + 13_333),
        ("refund", None, 1, quotas[2:], T0 + 13_400),
        ("peek", None, 0, quotas, T0 + 25_000),
        ("peek", "acme", 0, quotas, T0 + 31_000),
    ]
    for step, (op, key, amount, qs, now) in enumerate(script):
        if op == "refund":
            backend.refund(key, amount, qs, now)
            reference.refund(Debit(key, amount, qs, now))
            continue
        if op == "peek":
            got, expected = backend.peek(key, qs, now), reference.peek(key, qs, now)
        else:
            got, expected = (
                backend.acquire(key, amount, qs, now),
                reference.acquire(Debit(key, amount, qs, now)),
            )
        assert got._replace(source="memory") == expected, f"step {step}: {op} {key!r} {amount}"


# -- reservations: a leaky bucket as a queue (max_delay) ------------------------------------


def delayed(algorithm: str, delay: float = 1.0) -> Quota:
    """10 of capacity, refilled at 10 a second, reservations up to ``delay`` seconds."""
    return Quota("q", capacity=10, refill_per_second=10, algorithm=algorithm, max_delay=delay)  # type: ignore[arg-type]


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_a_cost_that_fits_within_max_delay_is_reserved_and_waits_its_turn(
    backend: Backend, algorithm: str
) -> None:
    q = delayed(algorithm)
    now = backend.acquire("acme", 10, [q], now=T0)
    assert (now.allowed, now.delay) == (True, 0.0)
    later = backend.acquire("acme", 5, [q], now=T0)  # 5 more tokens come in 0.5 s
    assert (later.allowed, later.delay, later.remaining) == (True, 0.5, 0.0)
    # The next 5 come 0.5 s after those: 1.0 s from now, the longest it may wait.
    last = backend.acquire("acme", 5, [q], now=T0)
    assert (last.allowed, last.delay) == (True, 1.0)
    # Past max_delay: refused as without reservations; its retry is when it could be reserved.
    refused = backend.acquire("acme", 1, [q], now=T0)
    assert (refused.allowed, refused.reason) == (False, "rate_limited")
    assert refused.retry_after == pytest.approx(0.1)
    assert backend.acquire("acme", 1, [q], now=T0 + 100).delay == pytest.approx(1.0)


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_reserved_turns_never_start_more_than_the_bucket_allows(
    backend: Backend, algorithm: str
) -> None:
    """A burst of 60 calls of cost 1 at once: the bucket's capacity runs now, the rest at
    the refill rate, one turn each; no turn is earlier than the rate allows."""
    q = delayed(algorithm, delay=3.0)
    starts = []
    for _ in range(60):
        decision = backend.acquire("burst", 1, [q], now=T0)
        if decision.allowed:
            starts.append(decision.delay)
    assert len(starts) == 10 + 30  # 10 now, then 3 s at 10 a second
    for k, start in enumerate(sorted(starts)):
        # By the time `start`, at most capacity + rate x start calls have started.
        assert k + 1 <= 10 + 10 * start + 1e-9, (k, start)


def test_a_cost_above_capacity_is_never_reserved(backend: Backend) -> None:
    decision = backend.acquire("acme", 11, [delayed("token_bucket", 60)], now=T0)
    assert (decision.allowed, decision.reason, decision.retry_after) == (
        False,
        "exceeds_capacity",
        None,
    )


def test_several_quotas_wait_for_the_longest_reservation(backend: Backend) -> None:
    tenant = Quota("tenant", capacity=10, refill_per_second=10, max_delay=2)
    user = Quota("user", capacity=4, refill_per_second=2, max_delay=2).scoped("alice")
    assert backend.acquire("acme", 4, [tenant, user], now=T0).delay == 0.0
    both = backend.acquire("acme", 2, [tenant, user], now=T0)
    # The tenant has room; the user's 2 more tokens come in 1 s.
    assert (both.allowed, both.delay) == (True, 1.0)
    assert [status.allowed for status in both.quotas] == [True, True]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"limit": 5, "window_seconds": 1, "algorithm": "fixed_window"}, "needs token_bucket"),
        ({"limit": 5, "window_seconds": 1, "algorithm": "sliding_log"}, "needs token_bucket"),
        ({"capacity": 5, "refill_per_second": 1, "max_delay": -1}, "from 0 to 60"),
        ({"capacity": 5, "refill_per_second": 1, "max_delay": 61}, "from 0 to 60"),
        ({"capacity": 5, "refill_per_second": 1, "max_delay": True}, "from 0 to 60"),
        ({"capacity": 5, "refill_per_second": 1, "max_delay": float("nan")}, "from 0 to 60"),
    ],
)
def test_bad_max_delays_are_config_errors(kwargs: dict[str, object], match: str) -> None:
    kwargs.setdefault("max_delay", 1)
    with pytest.raises(ConfigError, match=match):
        Quota("q", **kwargs)  # type: ignore[arg-type]


# -- charges: debits that need not fit (multi-region sync, docs/scale-out.md) ---------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_charge_debits_past_empty_and_the_debt_is_paid_from_the_refill(
    backend: Backend, algorithm: str
) -> None:
    q = make(algorithm)  # 10: a bucket refilled at 1/s, or a window of 10 s
    backend.charge("acme", 25, [q], now=T0)  # another region admitted 25
    assert backend.peek("acme", [q], now=T0).remaining == 0
    assert not backend.acquire("acme", 1, [q], now=T0).allowed
    if algorithm in BUCKETS:
        # 15 below empty: nothing until 15 s of refill, then the refill as usual.
        assert not backend.acquire("acme", 1, [q], now=T0 + 15_999).allowed
        assert backend.acquire("acme", 1, [q], now=T0 + 16_000).allowed
    else:  # counted in its window (both windows of a sliding counter): none left in it
        assert not backend.acquire("acme", 1, [q], now=T0 + 9_999).allowed
    backend.charge("other", 0, [q], now=T0)  # nothing to charge: nothing written
    assert backend.peek("other", [q], now=T0).remaining == 10


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_at_most_max_queued_requests_wait_their_turn(backend: Backend, algorithm: str) -> None:
    """A flood of cheap requests cannot park more than ``max_queued`` waiters behind a
    bucket (memory, sockets and tasks of the servers that hold them): one more is refused
    until the first of them runs, and the line moves as they run."""
    q = Quota(
        "q", capacity=10, refill_per_second=10, algorithm=algorithm, max_delay=5, max_queued=3
    )  # type: ignore[arg-type]
    assert backend.acquire("acme", 10, [q], now=T0).delay == 0.0  # runs now: not waiting
    waits = [backend.acquire("acme", 1, [q], now=T0).delay for _ in range(3)]
    assert waits == [0.1, 0.2, 0.3]
    refused = backend.acquire("acme", 1, [q], now=T0)
    assert (refused.allowed, refused.reason, refused.retry_after) == (False, "rate_limited", 0.1)
    assert backend.peek("acme", [q], now=T0).allowed is False  # the peek sees the line too
    # The first waiter has run at T0 + 100: room for one more, at the end of the line.
    assert backend.acquire("acme", 1, [q], now=T0 + 100).delay == pytest.approx(0.3)
    assert not backend.acquire("acme", 1, [q], now=T0 + 100).allowed


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_a_waiter_that_leaves_takes_its_place_in_the_line_with_it(
    backend: Backend, algorithm: str
) -> None:
    """The attack: reserve turns and leave (each leaver refunded) to fill the tenant's line
    with places nobody holds, so that the tenant's other clients are refused instead of
    waiting, for free. The refund of a waiter's debit names its turn (``at`` plus its
    ``delay``): its entry leaves the line with it. A refund after its turn, or of a debit
    that did not wait, takes no one's place."""
    q = Quota(
        "q", capacity=10, refill_per_second=10, algorithm=algorithm, max_delay=5, max_queued=3
    )  # type: ignore[arg-type]
    backend.acquire("acme", 10, [q], now=T0)  # the burst runs now
    waiters = [backend.acquire("acme", 1, [q], now=T0) for _ in range(3)]
    assert [w.delay for w in waiters] == [0.1, 0.2, 0.3]
    assert not backend.acquire("acme", 1, [q], now=T0).allowed  # the line is full
    # The second one leaves at T0 + 50: its debit back, its place free.
    left = waiters[1]
    assert left.at == T0
    assert reserved_turn(left) == T0 + 200
    backend.refund("acme", 1, [q], now=T0 + 50, at=left.at, turn=reserved_turn(left))
    again = backend.acquire("acme", 1, [q], now=T0 + 50)
    assert again.allowed
    assert again.delay == pytest.approx(0.25)
    assert not backend.acquire("acme", 1, [q], now=T0 + 50).allowed  # full again: 3 wait
    # A refund that names no turn (what ran gives back unused cost) frees no place, nor one
    # that names a turn nobody waits for.
    backend.refund("acme", 1, [q], now=T0 + 60, at=T0)
    backend.refund("acme", 1, [q], now=T0 + 60, at=T0, turn=T0 + 999)
    assert not backend.acquire("acme", 1, [q], now=T0 + 60).allowed
    # The first waiter ran at T0 + 100: room for exactly one more.
    assert backend.acquire("acme", 1, [q], now=T0 + 150).allowed
    assert not backend.acquire("acme", 1, [q], now=T0 + 150).allowed


def test_max_queued_needs_max_delay() -> None:
    with pytest.raises(ConfigError, match="max_queued needs max_delay"):
        Quota("q", capacity=5, refill_per_second=1, max_queued=3)
    with pytest.raises(ConfigError, match="max_queued must be an integer"):
        Quota("q", capacity=5, refill_per_second=1, max_delay=1, max_queued=-1)
