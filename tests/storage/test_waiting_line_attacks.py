"""Attacks on issue 13's reservations: the line of waiting requests (``max_queued``) in
Redis (``<key>#w``) and in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from quotaql import MemoryStorage, Quota, RedisStorage
from quotaql.storage import Debit

if TYPE_CHECKING:
    import redis

T0 = 1_700_000_000_000


# -- the line of waiting requests (max_queued) ------------------------------------------------

QUEUED = Quota("q", capacity=10, refill_per_second=1, max_delay=30, max_queued=3)


def _line_after_a_refund(storage: Any) -> None:
    """Two requests wait (their turns at T0 + 10 s and + 20 s), then an earlier request's
    refund moves the bucket back and a cheap one waits only 11 s."""
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 0  # runs now (refunded)
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 10.0
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 20.0  # runs at T0 + 20 s
    storage.refund(Debit("acme", 10, [QUEUED], now=T0))  # the first one cost nothing after all
    assert storage.acquire(Debit("acme", 1, [QUEUED], now=T0)).delay == 11.0


def test_a_short_wait_never_shortens_the_line_of_the_longer_ones_memory() -> None:
    """The line's expiry was set from the last reservation's wait alone: after a refund, a
    short wait cut the line's life below a longer waiter's turn, the line was forgotten
    while that request still waited, and more than ``max_queued`` requests waited at once."""
    storage = MemoryStorage(clock=lambda: T0 / 1000)
    _line_after_a_refund(storage)
    later = T0 + 13_000  # the 11 s waiter has run; the 20 s one still waits
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=later)).delay == 8.0
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=later)).delay == 18.0
    # Three wait now (turns at + 20, + 21 and + 31 s): one more is refused until + 20 s.
    refused = storage.acquire(Debit("acme", 10, [QUEUED], now=later))
    assert (refused.allowed, refused.retry_after) == (False, 7.0)


def test_a_short_wait_never_shortens_the_line_of_the_longer_ones_redis(
    redis_client: redis.Redis,
) -> None:
    """The same in Redis: the ``#w`` set's TTL must outlive its last waiter's turn (it was
    cut to the newest reservation's wait + 1 s: 12 s while a request waits 20 s)."""
    storage = RedisStorage(redis_client, timeout=5.0)
    try:
        _line_after_a_refund(storage)
        ttl = redis_client.pttl("quotaql:{t:acme}:q#w")
        assert ttl > 20_000  # the 20 s waiter's turn, and the second more every line gets
    finally:
        storage.close()


@pytest.fixture(params=["memory", "redis"])
def storage(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        yield MemoryStorage(clock=lambda: T0 / 1000)
        return
    client = request.getfixturevalue("redis_client")
    storage = RedisStorage(client, timeout=5.0)
    yield storage
    storage.close()


def test_a_waiter_whose_bucket_state_repeats_an_earlier_one_still_counts(storage: Any) -> None:
    """The Redis line named each waiter by the bucket's new state, "unique to this
    reservation": after a refund moved the bucket back, a reservation of the same cost
    reached the same state, and its entry replaced the earlier waiter's. Repeated (refunds
    of long operations, each followed by a reservation), any number of requests waited
    while the set held ``max_queued`` - 1; the memory storage (a list) refused them."""
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 0  # runs now (refunded)
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 10.0
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 20.0
    storage.refund(Debit("acme", 10, [QUEUED], now=T0))
    # The bucket is back where it was before the 20 s waiter: the same cost, the same state.
    assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 20.0
    refused = storage.acquire(Debit("acme", 1, [QUEUED], now=T0))  # three wait: the line is full
    assert (refused.allowed, refused.retry_after) == (False, 10.0)


@pytest.mark.parametrize("first", ["victim", "hostile"])
def test_a_tenant_named_after_another_s_line_shares_nothing_with_it(first: str) -> None:
    """The memory storage kept a tenant's line of waiting requests under its state's key
    with ``#w`` appended, and a plain tenant is kept as it is: the tenant ``acme#w`` had
    its bucket under the key of ``acme``'s line. Whichever came first, the other's requests
    crashed (a bucket state read as a line, a line read as a bucket): a client choosing its
    tenant id took another tenant's reservations down."""
    storage = MemoryStorage(clock=lambda: T0 / 1000)

    def victim() -> None:
        assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 0
        assert storage.acquire(Debit("acme", 10, [QUEUED], now=T0)).delay == 10.0

    def hostile() -> None:
        assert storage.acquire(Debit("acme#w", 4, [QUEUED], now=T0)).remaining == 6

    for step in (victim, hostile) if first == "victim" else (hostile, victim):
        step()
    # Each kept its own: acme's line holds its waiter, acme#w's bucket its 4.
    assert storage.peek("acme#w", [QUEUED], now=T0).remaining == 6
    assert storage.acquire(Debit("acme", 5, [QUEUED], now=T0)).delay == 15.0
    assert storage.acquire(Debit("acme", 5, [QUEUED], now=T0)).delay == 20.0
    assert not storage.acquire(Debit("acme", 5, [QUEUED], now=T0)).allowed  # three wait


# -- many quotas in one call: two hashes, sliding logs, lines ----------------------------------

TWO_HASHES = (
    Quota("tb", capacity=10, refill_per_second=2),
    Quota("tbu", capacity=6, refill_per_second=3, max_delay=1.5, max_queued=2).scoped("bob"),
    Quota("log", limit=12, window_seconds=3, algorithm="sliding_log"),
    Quota("logu", limit=7, window_seconds=2, algorithm="sliding_log").scoped("bob"),
    Quota("gq", capacity=5, refill_per_second=2, algorithm="gcra", max_delay=3, max_queued=2),
    Quota("ctru", limit=12, window_seconds=2, algorithm="sliding_counter").scoped("bob"),
    Quota("fixu", limit=9, window_seconds=1.5, algorithm="fixed_window").scoped("{x} " * 30),
)


def test_lua_and_python_decide_alike_over_two_hashes_logs_and_lines(
    redis_client: redis.Redis,
) -> None:
    """The parity machine of test_parity (each call in MULTI/EXEC, keys persisted) over
    quotas in the tenant's hash, a user's hash (a plain scope and a hashed one), sliding
    logs of both, and two lines, chosen in random subsets of one call."""
    from hypothesis import settings
    from hypothesis.stateful import run_state_machine_as_test

    from tests.storage.test_parity import HALVES, parity_machine

    machine = parity_machine(redis_client, TWO_HASHES, HALVES)
    run_state_machine_as_test(
        machine, settings=settings(max_examples=60, stateful_step_count=30, deadline=None)
    )


def test_no_key_is_ever_left_without_a_ttl(redis_client: redis.Redis) -> None:
    """Any sequence of acquires, refunds (of debits now or long ago), charges and peeks on
    the server's own clock leaves every key (hashes, logs and their totals, lines) with a
    TTL: an idle tenant costs nothing once its quotas are full again."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    storage = RedisStorage(redis_client, timeout=5.0)
    subsets = st.lists(st.sampled_from(TWO_HASHES), min_size=1, max_size=4, unique=True)
    step = st.tuples(
        st.sampled_from(["acquire", "refund", "old refund", "charge", "peek"]),
        st.sampled_from(["acme", "{a} b", None]),
        st.integers(0, 12).map(lambda n: n / 2),
        subsets,
    )

    @settings(max_examples=40, deadline=None)
    @given(steps=st.lists(step, min_size=1, max_size=25))
    def sequence(steps: list[tuple[str, str | None, float, list[Quota]]]) -> None:
        redis_client.flushall()
        for mode, tenant, amount, quotas in steps:
            if mode == "acquire":
                storage.acquire(Debit(tenant, amount, quotas))
            elif mode == "refund":
                storage.refund(Debit(tenant, amount, quotas))
            elif mode == "old refund":
                storage.refund(Debit(tenant, amount, quotas, at=0))
            elif mode == "charge":
                storage.charge(Debit(tenant, amount, quotas))
            else:
                storage.peek(tenant, quotas)
            for key in redis_client.scan_iter(count=1000):
                assert redis_client.pttl(key) != -1, (key, steps)

    try:
        sequence()
    finally:
        storage.close()


HOSTILE_SCOPES = ("~x", "~q", "#w", "x#w", "#log", "s:bob", "bob", "h:" + "A" * 22, "~u:s:bob", "")


def test_hostile_scopes_and_tenants_never_share_a_state(storage: Any) -> None:
    """A user scope or a tenant spelled like the layout's own names (the ``~x`` expiry field,
    the ``~q``/``~u:`` groups, the ``#w`` line and ``#log`` suffixes, a scope's own token)
    gets a budget of its own, and touches no one else's."""
    base = Quota("per_user", capacity=10, refill_per_second=0.001, max_delay=30, max_queued=2)
    scoped = [base.scoped(scope) for scope in HOSTILE_SCOPES if scope]
    owners = [("acme", quota) for quota in [base, *scoped]]
    owners += [(tenant, base) for tenant in ("acme#w", "acme~x", "acme}:~q", "~q", "acme#log")]
    for index, (tenant, quota) in enumerate(owners):
        assert storage.acquire(Debit(tenant, 1 + index % 9, [quota], now=T0)).allowed, (
            tenant,
            quota,
        )
    for index, (tenant, quota) in enumerate(owners):
        left = storage.peek(tenant, [quota], now=T0).remaining
        assert left == pytest.approx(10 - (1 + index % 9), abs=1e-6), (tenant, quota.scope)
