"""The limiter's own logic: quotas, shared quotas, validation, the circuit breaker, the recorder."""

from __future__ import annotations

import asyncio
import math
import threading
import time
import uuid
from typing import TYPE_CHECKING

import pytest

from quotaql import (
    AsyncLimiter,
    AsyncRedisStorage,
    CircuitBreaker,
    ConfigError,
    Limiter,
    MemoryStorage,
    Quota,
    RedisStorage,
    StorageError,
)
from quotaql.errors import StorageTimeout
from quotaql.limiter import MultiRecorder, NullRecorder
from quotaql.limiter.recorder import decision_hook

if TYPE_CHECKING:
    from collections.abc import Iterator

    import redis
    import redis.asyncio

    from quotaql.policy.quota import Decision, Source
    from tests.support.servers import AsyncRunner, RedisServer

# Explicit "now" (ms) for tests that run on both storages: Redis reads its own clock otherwise.
NOW = 1_700_000_000_000

TENANT = Quota("tenant", capacity=100, refill_per_second=10)
PLATFORM = Quota("platform", capacity=10, refill_per_second=1, shared=True)


class ManualClock:
    """A clock that only moves when told: seconds, like ``time.monotonic``."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CollectingRecorder:
    """A :class:`quotaql.limiter.Recorder` that keeps every call, for assertions.

    ``list.append`` is atomic under the GIL, so limiter threads may share one.
    """

    def __init__(self) -> None:
        self.decisions: list[tuple[Decision, float]] = []
        self.errors: list[tuple[str, BaseException]] = []
        self.circuits: list[tuple[str, bool]] = []

    def decision(self, decision: Decision, seconds: float) -> None:
        self.decisions.append((decision, seconds))

    def backend_error(self, backend: str, error: BaseException) -> None:
        self.errors.append((backend, error))

    def circuit(self, backend: str, is_open: bool) -> None:
        self.circuits.append((backend, is_open))


def remaining(decision: Decision) -> dict[str, float]:
    """Each quota's remaining budget, by name."""
    return {status.name: status.remaining for status in decision.quotas}


def stored(storage: MemoryStorage | RedisStorage) -> int:
    """How many states (memory) or keys (Redis) the storage holds."""
    if isinstance(storage, MemoryStorage):
        return len(storage)
    keys: int = storage.client.dbsize()
    return keys


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture(params=["memory", "redis"])
def storage(request: pytest.FixtureRequest, clock: ManualClock) -> Iterator[object]:
    """A memory storage on the manual clock, or a Redis storage on the private server."""
    if request.param == "memory":
        yield MemoryStorage(clock=clock)
        return
    client: redis.Redis = request.getfixturevalue("redis_client")
    redis_storage = RedisStorage(client)
    try:
        yield redis_storage
    finally:
        redis_storage.close()


@pytest.fixture
def limiter(storage: MemoryStorage | RedisStorage) -> Limiter:
    # "closed": a Redis failure would show as a refusal, never as a silent allow.
    return Limiter(storage, on_backend_error="closed")


# -- acquire, refund, peek ---------------------------------------------------------------------


def test_acquire_debits_the_cost_and_peek_shows_what_is_left(limiter: Limiter) -> None:
    decision = limiter.acquire("acme", 30, [TENANT], now=NOW)

    assert decision.allowed
    assert decision.cost == 30
    assert decision.remaining == 70
    assert decision.limit == 100
    assert decision.retry_after == 0
    assert decision.reset_after == pytest.approx(3.0, abs=0.002)
    assert decision.limited_by is None
    assert decision.reason is None
    assert decision.source == limiter.storage.name
    peeked = limiter.peek("acme", [TENANT], now=NOW)
    assert peeked.remaining == 70
    assert peeked.cost == 0


def test_peek_debits_nothing(limiter: Limiter) -> None:
    for _ in range(3):
        assert limiter.peek("acme", [TENANT], now=NOW).remaining == 100
    assert limiter.acquire("acme", 100, [TENANT], now=NOW).allowed


def test_refused_request_names_the_quota_and_the_exact_wait(limiter: Limiter) -> None:
    assert limiter.acquire("acme", 80, [TENANT], now=NOW).allowed

    decision = limiter.acquire("acme", 30, [TENANT], now=NOW)

    assert not decision.allowed
    assert decision.limited_by == "tenant"
    assert decision.reason == "rate_limited"
    assert decision.remaining == 20
    # 10 tokens missing at 10 per second.
    assert decision.retry_after == pytest.approx(1.0, abs=0.002)
    assert limiter.peek("acme", [TENANT], now=NOW).remaining == 20
    later = NOW + 1_000
    assert limiter.acquire("acme", 30, [TENANT], now=later).allowed


def test_cost_above_capacity_is_refused_for_good_and_debits_nothing(limiter: Limiter) -> None:
    decision = limiter.acquire("acme", 101, [TENANT], now=NOW)

    assert not decision.allowed
    assert decision.reason == "exceeds_capacity"
    assert decision.retry_after is None
    assert decision.limited_by == "tenant"
    assert limiter.peek("acme", [TENANT], now=NOW).remaining == 100


def test_refund_gives_back_unused_cost_but_never_above_capacity(limiter: Limiter) -> None:
    limiter.acquire("acme", 50, [TENANT], now=NOW)

    limiter.refund("acme", 20, [TENANT], now=NOW)
    assert limiter.peek("acme", [TENANT], now=NOW).remaining == 70

    limiter.refund("acme", 1_000, [TENANT], now=NOW)
    assert limiter.peek("acme", [TENANT], now=NOW).remaining == 100


def test_tenants_have_separate_budgets(limiter: Limiter) -> None:
    assert limiter.acquire("acme", 100, [TENANT], now=NOW).allowed
    assert not limiter.acquire("acme", 1, [TENANT], now=NOW).allowed
    assert limiter.acquire("globex", 100, [TENANT], now=NOW).allowed


def test_memory_bucket_refills_with_the_injected_clock(clock: ManualClock) -> None:
    limiter = Limiter(MemoryStorage(clock=clock))
    assert limiter.acquire("acme", 100, [TENANT]).allowed
    assert not limiter.acquire("acme", 1, [TENANT]).allowed

    clock.advance(2.5)

    assert limiter.peek("acme", [TENANT]).remaining == pytest.approx(25)
    assert limiter.acquire("acme", 25, [TENANT]).allowed
    assert not limiter.acquire("acme", 1, [TENANT]).allowed


def test_async_limiter_on_memory_acquires_refunds_and_peeks(clock: ManualClock) -> None:
    limiter = AsyncLimiter(MemoryStorage(clock=clock))

    async def main() -> list[Decision]:
        first = await limiter.acquire("acme", 80, [TENANT])
        refused = await limiter.acquire("acme", 30, [TENANT])
        await limiter.refund("acme", 15, [TENANT])
        return [first, refused, await limiter.peek("acme", [TENANT])]

    first, refused, peeked = asyncio.run(main())

    assert first.allowed
    assert first.source == "memory"
    assert not refused.allowed
    assert refused.retry_after == pytest.approx(1.0)
    assert peeked.remaining == 35


def test_async_limiter_on_redis_acquires_refunds_and_peeks(
    async_redis_client: AsyncRunner[redis.asyncio.Redis],
) -> None:
    async def body(client: redis.asyncio.Redis) -> list[Decision]:
        storage = AsyncRedisStorage(client)
        limiter = AsyncLimiter(storage, on_backend_error="closed")
        try:
            first = await limiter.acquire("acme", 80, [TENANT], now=NOW)
            refused = await limiter.acquire("acme", 30, [TENANT], now=NOW)
            await limiter.refund("acme", 15, [TENANT], now=NOW)
            return [first, refused, await limiter.peek("acme", [TENANT], now=NOW)]
        finally:
            await storage.close()

    first, refused, peeked = async_redis_client(body)

    assert first.allowed
    assert first.source == "redis"
    assert not refused.allowed
    assert refused.limited_by == "tenant"
    assert refused.retry_after == pytest.approx(1.0, abs=0.002)
    assert peeked.remaining == 35


# -- several quotas: all or nothing ------------------------------------------------------------

OPS = Quota("ops", capacity=10, refill_per_second=1, algorithm="gcra")
DAILY = Quota("daily", limit=1_000, window_seconds=86_400, algorithm="fixed_window")


def test_allowed_multi_quota_decision_reports_the_tightest_quota(limiter: Limiter) -> None:
    decision = limiter.acquire("acme", 5, [TENANT, OPS, DAILY], now=NOW)

    assert decision.allowed
    assert decision.remaining == 5
    assert decision.limit == 10
    assert [status.name for status in decision.quotas] == ["tenant", "ops", "daily"]
    assert remaining(decision) == {"tenant": 95, "ops": 5, "daily": 995}


def test_refusal_by_one_quota_debits_none_of_them(limiter: Limiter) -> None:
    assert limiter.acquire("acme", 8, [TENANT, OPS, DAILY], now=NOW).allowed

    decision = limiter.acquire("acme", 5, [TENANT, OPS, DAILY], now=NOW)

    assert not decision.allowed
    assert decision.limited_by == "ops"
    assert decision.reason == "rate_limited"
    # GCRA: 3 units missing at one per second.
    assert decision.retry_after == pytest.approx(3.0, abs=0.002)
    statuses = {status.name: status for status in decision.quotas}
    assert statuses["tenant"].allowed
    assert not statuses["ops"].allowed
    peeked = limiter.peek("acme", [TENANT, OPS, DAILY], now=NOW)
    assert remaining(peeked) == {"tenant": 92, "ops": 2, "daily": 992}


@pytest.mark.parametrize("order", [("slow", "fast"), ("fast", "slow")])
def test_limited_by_is_the_quota_with_the_longest_wait(
    limiter: Limiter, order: tuple[str, str]
) -> None:
    by_name = {
        "slow": Quota("slow", capacity=20, refill_per_second=1),
        "fast": Quota("fast", capacity=20, refill_per_second=10),
    }
    quotas = [by_name[name] for name in order]
    assert limiter.acquire("acme", 18, quotas, now=NOW).allowed

    decision = limiter.acquire("acme", 10, quotas, now=NOW)

    assert decision.limited_by == "slow"
    assert decision.retry_after == pytest.approx(8.0, abs=0.002)
    assert all(not status.allowed for status in decision.quotas)


def test_a_quota_the_cost_can_never_fit_wins_over_a_wait(limiter: Limiter) -> None:
    small = Quota("small", capacity=5, refill_per_second=1)
    assert limiter.acquire("acme", 95, [TENANT], now=NOW).allowed

    decision = limiter.acquire("acme", 10, [TENANT, small], now=NOW)

    assert decision.limited_by == "small"
    assert decision.reason == "exceeds_capacity"
    assert decision.retry_after is None
    assert remaining(limiter.peek("acme", [TENANT, small], now=NOW)) == {"tenant": 5, "small": 5}


# -- shared quotas: one budget for every tenant ------------------------------------------------


def test_shared_quota_is_one_budget_across_tenants(limiter: Limiter) -> None:
    first = limiter.acquire("acme", 6, [TENANT, PLATFORM], now=NOW)

    assert first.allowed
    assert first.remaining == 4
    assert first.limit == 10
    assert remaining(first) == {"tenant": 94, "platform": 4}

    second = limiter.acquire("globex", 6, [TENANT, PLATFORM], now=NOW)

    assert not second.allowed
    assert second.limited_by == "platform"
    assert second.reason == "rate_limited"
    assert second.retry_after == pytest.approx(2.0, abs=0.002)


def test_tenant_debit_is_refunded_when_the_shared_quota_refuses(limiter: Limiter) -> None:
    limiter.acquire("acme", 6, [TENANT, PLATFORM], now=NOW)

    assert not limiter.acquire("globex", 6, [TENANT, PLATFORM], now=NOW).allowed

    assert remaining(limiter.peek("globex", [TENANT, PLATFORM], now=NOW)) == {
        "tenant": 100,
        "platform": 4,
    }
    assert remaining(limiter.peek("acme", [TENANT, PLATFORM], now=NOW)) == {
        "tenant": 94,
        "platform": 4,
    }


def test_tenant_refusal_leaves_the_shared_quota_untouched(limiter: Limiter) -> None:
    small_tenant = Quota("tenant", capacity=5, refill_per_second=1)
    big_platform = Quota("platform", capacity=100, refill_per_second=1, shared=True)
    assert limiter.acquire("acme", 4, [small_tenant, big_platform], now=NOW).allowed

    decision = limiter.acquire("acme", 3, [small_tenant, big_platform], now=NOW)

    assert not decision.allowed
    assert decision.limited_by == "tenant"
    peeked = limiter.peek("acme", [small_tenant, big_platform], now=NOW)
    assert remaining(peeked) == {"tenant": 1, "platform": 96}


def test_a_shared_refusal_undoes_the_tenant_s_reservation_and_its_place_in_line(
    limiter: Limiter,
) -> None:
    """The tenant's quota reserves a turn (and a place in its line of one), then the shared
    quota refuses: the tenant's debit is undone, its place in the line with it, so that
    the next request of the tenant may still wait."""
    line = Quota("tenant", capacity=5, refill_per_second=10, max_delay=1.0, max_queued=1)
    platform = Quota("platform", capacity=100, refill_per_second=1, shared=True)
    assert limiter.acquire("acme", 5, [line], now=NOW).allowed  # the burst: the bucket spent
    limiter.acquire("other", 100, [platform], now=NOW)  # the platform's budget spent too

    undone = limiter.acquire("acme", 1, [line, platform], now=NOW)

    assert not undone.allowed
    assert undone.limited_by == "platform"
    waits = limiter.acquire("acme", 1, [line], now=NOW)  # its place is free: it may wait
    assert waits.allowed
    assert waits.delay == pytest.approx(0.1)
    assert not limiter.acquire("acme", 1, [line], now=NOW).allowed  # one place, now taken


def test_refund_returns_cost_to_the_tenant_and_the_shared_quota(limiter: Limiter) -> None:
    limiter.acquire("acme", 6, [TENANT, PLATFORM], now=NOW)

    limiter.refund("acme", 4, [TENANT, PLATFORM], now=NOW)

    assert remaining(limiter.peek("acme", [TENANT, PLATFORM], now=NOW)) == {
        "tenant": 98,
        "platform": 8,
    }


def test_shared_quota_alone_is_shared_by_every_tenant(limiter: Limiter) -> None:
    assert limiter.acquire("acme", 6, [PLATFORM], now=NOW).allowed

    refused = limiter.acquire("globex", 6, [PLATFORM], now=NOW)

    assert not refused.allowed
    assert refused.limited_by == "platform"
    assert limiter.peek("initech", [PLATFORM], now=NOW).remaining == 4


def test_async_shared_quota_refunds_the_tenant_when_it_refuses(clock: ManualClock) -> None:
    limiter = AsyncLimiter(MemoryStorage(clock=clock))

    async def main() -> tuple[Decision, Decision]:
        await limiter.acquire("acme", 6, [TENANT, PLATFORM])
        refused = await limiter.acquire("globex", 6, [TENANT, PLATFORM])
        return refused, await limiter.peek("globex", [TENANT, PLATFORM])

    refused, peeked = asyncio.run(main())

    assert refused.limited_by == "platform"
    assert remaining(peeked) == {"tenant": 100, "platform": 4}


# -- bad arguments: refused before anything is written -----------------------------------------


@pytest.mark.parametrize("key", ["", None, b"acme", 42, ["acme"]])
def test_bad_key_is_refused_and_nothing_is_written(
    limiter: Limiter, storage: MemoryStorage | RedisStorage, key: object
) -> None:
    with pytest.raises((TypeError, ValueError), match="key must be a non-empty string"):
        limiter.acquire(key, 1, [TENANT], now=NOW)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="key must be a non-empty string"):
        limiter.refund(key, 1, [TENANT], now=NOW)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="key must be a non-empty string"):
        limiter.peek(key, [TENANT], now=NOW)  # type: ignore[arg-type]
    assert stored(storage) == 0


@pytest.mark.parametrize("cost", [-1, -0.5, math.nan, math.inf, -math.inf])
def test_negative_or_non_finite_cost_is_a_value_error_and_nothing_is_written(
    limiter: Limiter, storage: MemoryStorage | RedisStorage, cost: float
) -> None:
    with pytest.raises(ValueError, match="cost must be a finite number >= 0"):
        limiter.acquire("acme", cost, [TENANT, PLATFORM], now=NOW)
    with pytest.raises(ValueError, match="cost must be a finite number >= 0"):
        limiter.refund("acme", cost, [TENANT, PLATFORM], now=NOW)
    assert stored(storage) == 0


@pytest.mark.parametrize("cost", [True, False, "5", None, b"1"])
def test_cost_that_is_not_a_number_is_a_type_error_and_nothing_is_written(
    limiter: Limiter, storage: MemoryStorage | RedisStorage, cost: object
) -> None:
    with pytest.raises(TypeError, match="cost must be a number"):
        limiter.acquire("acme", cost, [TENANT], now=NOW)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cost must be a number"):
        limiter.refund("acme", cost, [TENANT], now=NOW)  # type: ignore[arg-type]
    assert stored(storage) == 0


@pytest.mark.parametrize(
    "quotas",
    [
        [TENANT, TENANT],
        [TENANT, Quota("tenant", capacity=5, refill_per_second=1)],
        [TENANT, Quota("tenant", capacity=5, refill_per_second=1, shared=True)],
        [PLATFORM, OPS, PLATFORM],
    ],
    ids=["same-quota-twice", "same-name", "shared-and-own-same-name", "shared-twice"],
)
def test_duplicate_quota_names_are_a_value_error_and_nothing_is_written(
    limiter: Limiter, storage: MemoryStorage | RedisStorage, quotas: list[Quota]
) -> None:
    with pytest.raises(ValueError, match="same name"):
        limiter.acquire("acme", 1, quotas, now=NOW)
    with pytest.raises(ValueError, match="same name"):
        limiter.refund("acme", 1, quotas, now=NOW)
    with pytest.raises(ValueError, match="same name"):
        limiter.peek("acme", quotas, now=NOW)
    assert stored(storage) == 0


@pytest.mark.parametrize("quota", ["tenant", {"capacity": 5}, None])
def test_something_other_than_a_quota_is_a_type_error(
    limiter: Limiter, storage: MemoryStorage | RedisStorage, quota: object
) -> None:
    with pytest.raises(TypeError, match="quotas must be Quota objects"):
        limiter.acquire("acme", 1, [TENANT, quota], now=NOW)  # type: ignore[list-item]
    assert stored(storage) == 0


def test_a_one_shot_iterator_of_quotas_is_never_silently_unlimited(
    limiter: Limiter, storage: MemoryStorage | RedisStorage
) -> None:
    # Validation walks the quotas once; an iterator must not reach the storage empty
    # (which would allow everything): refuse it, or enforce it.
    try:
        decision = limiter.acquire("acme", 30, iter([TENANT]), now=NOW)  # type: ignore[arg-type]
    except TypeError:
        assert stored(storage) == 0
    else:
        assert decision.limit == 100
        assert limiter.peek("acme", [TENANT], now=NOW).remaining == 70


def test_async_limiter_refuses_bad_arguments_before_writing(clock: ManualClock) -> None:
    storage = MemoryStorage(clock=clock)
    limiter = AsyncLimiter(storage)

    async def main() -> None:
        with pytest.raises(ValueError, match="key must be a non-empty string"):
            await limiter.acquire("", 1, [TENANT])
        with pytest.raises(ValueError, match="cost must be a finite number >= 0"):
            await limiter.acquire("acme", math.nan, [TENANT, PLATFORM])
        with pytest.raises(TypeError, match="cost must be a number"):
            await limiter.refund("acme", True, [TENANT])
        with pytest.raises(ValueError, match="same name"):
            await limiter.peek("acme", [PLATFORM, PLATFORM])

    asyncio.run(main())

    assert len(storage) == 0


def test_unknown_fail_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="on_backend_error must be one of open, closed, local"):
        Limiter(MemoryStorage(), on_backend_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="on_backend_error must be one of open, closed, local"):
        AsyncLimiter(MemoryStorage(), on_backend_error="allow")  # type: ignore[arg-type]


@pytest.mark.parametrize("limiter_class", [Limiter, AsyncLimiter])
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"local_share": -0.1}, "local_share must be a number from 0 to 1"),
        ({"local_share": 1.5}, "local_share must be a number from 0 to 1"),
        ({"local_share": math.nan}, "local_share must be a number from 0 to 1"),
        ({"local_share": True}, "local_share must be a number from 0 to 1"),
        ({"local_share": "0.1"}, "local_share must be a number from 0 to 1"),
        ({"local_share": None}, "local_share must be a number from 0 to 1"),
        ({"open_cap": 0}, "open_cap must be a number above 0 and at most 1"),
        ({"open_cap": -0.5}, "open_cap must be a number above 0 and at most 1"),
        ({"open_cap": 1.01}, "open_cap must be a number above 0 and at most 1"),
        ({"open_cap": math.inf}, "open_cap must be a number above 0 and at most 1"),
        ({"open_cap": math.nan}, "open_cap must be a number above 0 and at most 1"),
        ({"open_cap": False}, "open_cap must be a number above 0 and at most 1"),
        ({"open_cap": "0.1"}, "open_cap must be a number above 0 and at most 1"),
    ],
)
def test_fallback_shares_are_checked(
    limiter_class: type[Limiter | AsyncLimiter], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        limiter_class(MemoryStorage(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("limiter_class", [Limiter, AsyncLimiter])
def test_fallback_shares_at_their_bounds_are_accepted(
    limiter_class: type[Limiter | AsyncLimiter],
) -> None:
    limiter_class(MemoryStorage(), local_share=0)
    limiter_class(MemoryStorage(), local_share=1)
    limiter_class(MemoryStorage(), on_backend_error="open", open_cap=1)
    limiter_class(MemoryStorage(), on_backend_error="open", open_cap=1e-6)
    limiter_class(MemoryStorage(), on_backend_error="open", open_cap=None)


def test_the_fallback_given_is_the_one_used(clock: ManualClock) -> None:
    # An empty MemoryStorage has a length of 0: a `fallback or default` dropped it.
    fallback = MemoryStorage(clock=clock, source="fallback")
    limiter = Limiter(MemoryStorage(clock=clock), fallback=fallback)

    assert limiter._core.fallback is fallback


def test_the_reports_kept_for_the_fallback_are_bounded(
    redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    import quotaql.limiter.flows

    monkeypatch.setattr(quotaql.limiter.flows, "MAX_REPORTS", 20)
    storage = RedisStorage(redis_client)
    limiter = Limiter(storage, on_backend_error="local")
    try:
        for index in range(50):  # the platform allows the first 10 tenants, then refuses
            limiter.acquire(f"tenant-{index}", 1, [TENANT, PLATFORM], now=NOW)
        assert limiter.flush() == 0  # the refunds of the refused debits (deferred) applied
        limiter.acquire("tenant-40", 1, [TENANT], now=NOW)  # reported again: the most recent

        reports = limiter._core.reports
        assert len(reports) == 20
        assert list(reports)[-1] == "tenant\0tenant-40"
        assert "platform\1" in reports  # the shared quota's state, reported by every call
        assert "tenant\0tenant-0" not in reports  # the least recently reported went first
        # Its first debit was refunded when the platform refused: one left in Redis.
        assert reports["tenant\0tenant-40"][0] == TENANT.maximum - 1
    finally:
        storage.close()


def test_a_memory_storage_keeps_no_reports(clock: ManualClock) -> None:
    limiter = Limiter(MemoryStorage(clock=clock), on_backend_error="local")

    limiter.acquire("acme", 1, [TENANT, PLATFORM])

    assert limiter._core.reports == {}


# -- circuit breaker ---------------------------------------------------------------------------


def test_breaker_opens_after_threshold_failures_in_a_row(clock: ManualClock) -> None:
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=5.0, clock=clock)

    assert breaker.failure() is False
    assert breaker.failure() is False
    assert breaker.allow()
    assert not breaker.is_open

    assert breaker.failure() is True

    assert breaker.is_open
    assert not breaker.allow()
    assert breaker.retry_after() == 5.0


def test_breaker_success_resets_the_failure_count(clock: ManualClock) -> None:
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=5.0, clock=clock)
    breaker.failure()
    breaker.failure()

    assert breaker.success() is False  # it was not open

    assert breaker.failure() is False
    assert breaker.failure() is False
    assert not breaker.is_open
    assert breaker.failure() is True


def test_breaker_timeout_opens_it_at_once(clock: ManualClock) -> None:
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=5.0, clock=clock)

    assert breaker.failure(timeout=True) is True

    assert breaker.is_open
    assert not breaker.allow()


def test_open_breaker_waits_reset_timeout_then_lets_a_single_probe(clock: ManualClock) -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=5.0, clock=clock)
    breaker.failure()

    clock.advance(4.9)
    assert breaker.retry_after() == pytest.approx(0.1)
    assert not breaker.allow()

    clock.advance(0.1)
    assert breaker.retry_after() == 0
    assert breaker.allow()  # the probe
    assert not breaker.allow()
    clock.advance(60)
    assert not breaker.allow()  # still one probe at a time, however long it takes
    assert breaker.is_open


def test_probe_success_closes_the_breaker(clock: ManualClock) -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=5.0, clock=clock)
    breaker.failure()
    clock.advance(5.0)
    assert breaker.allow()

    assert breaker.success() is True

    assert not breaker.is_open
    assert breaker.retry_after() == 0
    assert all(breaker.allow() for _ in range(5))


def test_probe_failure_reopens_for_a_full_reset_timeout(clock: ManualClock) -> None:
    breaker = CircuitBreaker(failure_threshold=3, reset_timeout=5.0, clock=clock)
    breaker.failure(timeout=True)
    clock.advance(5.0)
    assert breaker.allow()

    assert breaker.failure() is False  # already open: not a new opening

    assert breaker.is_open
    assert breaker.retry_after() == 5.0
    assert not breaker.allow()
    clock.advance(5.0)
    assert breaker.allow()


def test_only_one_of_many_threads_becomes_the_probe(clock: ManualClock) -> None:
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=1.0, clock=clock)
    breaker.failure()
    clock.advance(1.0)
    threads = 32
    barrier = threading.Barrier(threads)
    answers: list[bool] = []

    def ask() -> None:
        barrier.wait(timeout=10)
        answers.append(breaker.allow())

    workers = [threading.Thread(target=ask) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=10)

    assert len(answers) == threads
    assert answers.count(True) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"failure_threshold": 0}, "failure_threshold must be at least 1"),
        ({"failure_threshold": -3}, "failure_threshold must be at least 1"),
        ({"failure_threshold": True}, "failure_threshold must be an integer"),
        ({"failure_threshold": 2.5}, "failure_threshold must be an integer"),
        ({"reset_timeout": 0}, "reset_timeout must be seconds > 0"),
        ({"reset_timeout": -1.0}, "reset_timeout must be seconds > 0"),
        ({"reset_timeout": math.nan}, "reset_timeout must be seconds > 0"),
        ({"reset_timeout": "5"}, "reset_timeout must be seconds > 0"),
    ],
)
def test_breaker_settings_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CircuitBreaker(**kwargs)  # type: ignore[arg-type]


# -- the recorder ------------------------------------------------------------------------------


def test_recorder_receives_every_decision(clock: ManualClock) -> None:
    recorder = CollectingRecorder()
    limiter = Limiter(MemoryStorage(clock=clock), recorder=recorder)

    made = [limiter.acquire("acme", cost, [TENANT, PLATFORM]) for cost in (6, 6, 3)]

    assert [decision for decision, _ in recorder.decisions] == made
    assert [decision.allowed for decision in made] == [True, False, True]
    assert all(seconds >= 0 for _, seconds in recorder.decisions)
    assert recorder.errors == []
    assert recorder.circuits == []


def test_async_recorder_receives_every_decision(clock: ManualClock) -> None:
    recorder = CollectingRecorder()
    limiter = AsyncLimiter(MemoryStorage(clock=clock), recorder=recorder)

    async def main() -> list[Decision]:
        return [await limiter.acquire("acme", cost, [TENANT]) for cost in (60, 60)]

    made = asyncio.run(main())

    assert [decision for decision, _ in recorder.decisions] == made
    assert [decision.allowed for decision in made] == [True, False]


class ErrorsOnly(NullRecorder):
    """A recorder of backend errors alone, as the gate's logs are: decisions it ignores."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def backend_error(self, backend: str, error: BaseException) -> None:
        self.errors.append(backend)


class NullWithDecisions(NullRecorder):
    """A :class:`NullRecorder` that keeps decisions after all."""

    def __init__(self) -> None:
        self.decisions: list[tuple[Decision, float]] = []

    def decision(self, decision: Decision, seconds: float) -> None:
        self.decisions.append((decision, seconds))


def test_a_multi_recorder_tells_each_decision_to_every_recorder_that_takes_it(
    clock: ManualClock,
) -> None:
    """The gate's recorder is its logs (which ignore decisions) and its metrics: the metrics
    are told each decision once, whatever else the multi-recorder holds."""
    alone, first, second = CollectingRecorder(), CollectingRecorder(), CollectingRecorder()
    kept = NullWithDecisions()
    cases: list[tuple[MultiRecorder, list[CollectingRecorder | NullWithDecisions]]] = [
        (MultiRecorder(ErrorsOnly(), alone), [alone]),
        (MultiRecorder(first, ErrorsOnly(), NullRecorder(), second), [first, second]),
        (MultiRecorder(ErrorsOnly(), kept), [kept]),
    ]
    for recorder, told in cases:
        limiter = Limiter(MemoryStorage(clock=clock), recorder=recorder)
        made = [limiter.acquire("acme", 60, [TENANT]) for _ in range(2)]
        for each in told:
            assert [decision for decision, _ in each.decisions] == made


def test_a_recorder_that_ignores_decisions_is_neither_told_them_nor_times_them(
    clock: ManualClock,
) -> None:
    assert decision_hook(NullRecorder()) is None
    assert decision_hook(MultiRecorder()) is None
    assert decision_hook(MultiRecorder(ErrorsOnly(), NullRecorder())) is None
    # The limiter's own recorder a NullRecorder: it never was told decisions, and is not.
    assert decision_hook(NullWithDecisions()) is None
    errors = ErrorsOnly()
    limiter = Limiter(MemoryStorage(clock=clock), recorder=MultiRecorder(errors))
    assert limiter.acquire("acme", 60, [TENANT]).allowed
    assert errors.errors == []
    collecting = CollectingRecorder()
    assert decision_hook(MultiRecorder(ErrorsOnly(), collecting)) == collecting.decision
    several = MultiRecorder(collecting, CollectingRecorder())
    assert decision_hook(several) == several.decision


@pytest.mark.parametrize("source", ["fail_open", "fail_closed", "fallback"])
def test_a_refund_of_a_debit_the_memory_storage_did_not_make_gives_it_nothing(
    clock: ManualClock, source: Source
) -> None:
    storage = MemoryStorage(clock=clock)
    limiter = Limiter(storage)
    spent = limiter.acquire("acme", 90, [TENANT], now=NOW)
    limiter.refund("acme", 40, [TENANT], decision=spent._replace(source=source), now=NOW)
    assert limiter.peek("acme", [TENANT], now=NOW).remaining == 10
    limiter.refund("acme", 40, [TENANT], decision=spent, now=NOW)
    assert limiter.peek("acme", [TENANT], now=NOW).remaining == 50
    limiter.refund("acme", 20, [TENANT], now=NOW)  # no decision: a debit made there now
    assert limiter.peek("acme", [TENANT], now=NOW).remaining == 70


def test_recorder_sees_backend_errors_and_circuit_changes(
    fresh_redis_server: RedisServer, clock: ManualClock
) -> None:
    server = fresh_redis_server
    recorder = CollectingRecorder()
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=5.0, clock=clock)
    with server.client() as client:
        storage = RedisStorage(client)
    limiter = Limiter(storage, on_backend_error="closed", breaker=breaker, recorder=recorder)
    try:
        assert limiter.acquire("acme", 1, [TENANT]).source == "redis"
        assert recorder.errors == []

        server.kill()
        failed = limiter.acquire("acme", 1, [TENANT])
        assert failed.source == "fail_closed"
        assert failed.reason == "backend_unavailable"
        assert len(recorder.errors) == 1
        backend, error = recorder.errors[0]
        assert backend == "redis"
        assert isinstance(error, StorageError)
        assert not isinstance(error, StorageTimeout)  # refused, not hung
        assert recorder.circuits == []

        limiter.acquire("acme", 1, [TENANT])
        assert len(recorder.errors) == 2
        assert recorder.circuits == [("redis", True)]

        for _ in range(5):
            assert limiter.acquire("acme", 1, [TENANT]).source == "fail_closed"
        assert len(recorder.errors) == 2  # the open breaker kept them away from Redis

        server.restart()
        clock.advance(5.0)
        recovered = limiter.acquire("acme", 1, [TENANT])
        assert recovered.source == "redis"
        assert recorder.circuits == [("redis", True), ("redis", False)]
        assert len(recorder.errors) == 2
        assert [decision for decision, _ in recorder.decisions][-1] == recovered
        assert len(recorder.decisions) == 9
    finally:
        storage.close()


def test_a_success_between_failures_resets_the_limiters_failure_count(
    fresh_redis_server: RedisServer, clock: ManualClock
) -> None:
    # "failure_threshold failures in a row": a Redis that fails now and then, with
    # successes in between, must not open the breaker.
    server = fresh_redis_server
    recorder = CollectingRecorder()
    breaker = CircuitBreaker(failure_threshold=2, reset_timeout=5.0, clock=clock)
    with server.client() as client:
        storage = RedisStorage(client)
    limiter = Limiter(storage, on_backend_error="closed", breaker=breaker, recorder=recorder)
    try:
        sources = []
        for _ in range(2):
            sources.append(limiter.acquire("acme", 1, [TENANT]).source)
            server.kill()
            sources.append(limiter.acquire("acme", 1, [TENANT]).source)
            server.restart()
        sources.append(limiter.acquire("acme", 1, [TENANT]).source)

        assert sources == ["redis", "fail_closed", "redis", "fail_closed", "redis"]
        assert len(recorder.errors) == 2
        assert recorder.circuits == []
        assert not breaker.is_open
    finally:
        storage.close()


def test_memory_storage_never_involves_the_breaker(clock: ManualClock) -> None:
    recorder = CollectingRecorder()
    breaker = CircuitBreaker(failure_threshold=1, reset_timeout=5.0, clock=clock)
    breaker.failure()  # even an open breaker: the memory storage cannot fail
    limiter = Limiter(
        MemoryStorage(clock=clock), on_backend_error="closed", breaker=breaker, recorder=recorder
    )

    decision = limiter.acquire("acme", 1, [TENANT, PLATFORM])

    assert decision.source == "memory"
    assert decision.allowed
    assert recorder.errors == []
    assert [recorded for recorded, _ in recorder.decisions] == [decision]


# -- connections -------------------------------------------------------------------------------


def _wait_for_clients(admin: redis.Redis, name: str, expected: int) -> int:
    """How many connections named ``name`` the server has, once ``expected`` or after 1 s."""
    deadline = time.monotonic() + 1.0
    while True:
        count = sum(1 for client in admin.client_list() if client["name"] == name)
        if count == expected or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


def test_closing_the_storage_closes_its_connections(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    # The storage's private pool inherits the client's settings, its name included.
    name = f"close-test-{uuid.uuid4().hex}"
    with redis_server.client(client_name=name) as client:
        storage = RedisStorage(client)
    Limiter(storage).acquire("acme", 1, [TENANT])
    assert _wait_for_clients(redis_client, name, 1) == 1

    storage.close()

    assert _wait_for_clients(redis_client, name, 0) == 0
    storage.client.connection_pool.disconnect()  # the leak, if any, ends with this test


def test_closing_the_async_storage_closes_its_connections(
    redis_client: redis.Redis, async_redis_client: AsyncRunner[redis.asyncio.Redis]
) -> None:
    name = f"close-test-{uuid.uuid4().hex}"

    async def body(client: redis.asyncio.Redis) -> tuple[int, int]:
        storage = AsyncRedisStorage(client)
        await AsyncLimiter(storage).acquire("acme", 1, [TENANT])
        opened = await asyncio.to_thread(_wait_for_clients, redis_client, name, 1)
        await storage.close()
        closed = await asyncio.to_thread(_wait_for_clients, redis_client, name, 0)
        await storage.client.connection_pool.disconnect()  # the leak ends with this test
        return opened, closed

    opened, closed = async_redis_client(body, client_name=name)

    assert opened == 1
    assert closed == 0


def test_the_limiters_typed_options_are_the_core_s_keyword_parameters() -> None:
    """``Limiter(storage, **options)`` is typed by ``LimiterOptions``: it names exactly the
    keywords the limiter's core takes, so a new keyword cannot be left out of the type."""
    import inspect

    from quotaql.limiter.flows import Core
    from quotaql.limiter.options import LimiterOptions

    keywords = [
        name
        for name, parameter in inspect.signature(Core.__init__).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert keywords == list(LimiterOptions.__annotations__)
