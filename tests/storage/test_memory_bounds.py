"""The memory storage is bounded in bytes, and a flood of keys never refills a tenant.

Issue 11 §5: long tenant keys were stored verbatim (a 30 KB key cost 30 KB per state), and
a flood of new keys evicted the least recently used states, drained ones included, which
then came back full. Every test here runs on an injected clock that only moves when told,
so no refill happens unless a test asks for it.
"""

from __future__ import annotations

import gc
import random
import string
import tracemalloc
from typing import TYPE_CHECKING

import pytest

from quotaql import Limiter, MemoryStorage, Quota
from quotaql.storage import Debit
from quotaql.storage.memory import PLAIN_TENANT_MAX

if TYPE_CHECKING:
    from collections.abc import Callable

    from quotaql.policy.quota import Algorithm

T0 = 1_700_000_000_000  # ms
LONG = 30_000  # characters: the attacker's key size
BUDGET = 300  # capacity / limit of every quota here
BYTES_PER_TENANT = 300


class Clock:
    """Seconds, like ``time.monotonic``, that only move when told."""

    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> float:
        return self.ms / 1000

    def advance(self, seconds: float) -> None:
        self.ms += round(seconds * 1000)


def quota(
    algorithm: Algorithm = "token_bucket", name: str = "tenant", *, shared: bool = False
) -> Quota:
    """A quota of 300, refilled at 1 a second (buckets) or over a 600 s window."""
    if algorithm in ("token_bucket", "gcra"):
        return Quota(name, capacity=BUDGET, refill_per_second=1, algorithm=algorithm, shared=shared)
    return Quota(name, limit=BUDGET, window_seconds=600, algorithm=algorithm, shared=shared)


ALGORITHMS: tuple[Algorithm, ...] = (
    "token_bucket",
    "gcra",
    "sliding_log",
    "sliding_counter",
    "fixed_window",
)
TENANT = quota()


def random_key(rng: random.Random, length: int = 12) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits, k=length))


def stored_keys(storage: MemoryStorage) -> list[str]:
    return list(storage._states)


def longest_stored_key(storage: MemoryStorage) -> int:
    return max(len(key) for key in stored_keys(storage))


# The longest state key a tenant may have: the quota's state name, a mark, the tenant part.
KEY_BOUND = len(TENANT.state_name) + 1 + PLAIN_TENANT_MAX


# -- bytes per tenant ------------------------------------------------------------------------


def bytes_per_tenant(make_key: Callable[[int], str], tenants: int = 5_000) -> float:
    """The memory the storage keeps per tenant, each tenant debited once (traced)."""
    storage = MemoryStorage(clock=Clock())
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(tenants):
            assert storage.acquire(Debit(make_key(index), 1, [TENANT], now=T0)).allowed
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(storage) == tenants
    assert longest_stored_key(storage) <= KEY_BOUND
    return (after - before) / tenants


@pytest.mark.parametrize(
    "make_key",
    [
        lambda i: f"{i:08d}" + "k" * LONG,
        lambda i: f"{i:08d}" + "ü" * LONG,
        lambda i: f"{i:08d}" + "\U0001f600" * LONG,
        lambda i: f"{i:08d}" + "\U0001f600" * 40,  # short, but 4 bytes a character
    ],
    ids=["30k-ascii", "30k-latin1", "30k-astral", "short-astral"],
)
def test_memory_per_tenant_stays_under_300_bytes_whatever_the_key(
    make_key: Callable[[int], str],
) -> None:
    assert bytes_per_tenant(make_key) < BYTES_PER_TENANT


def test_a_30kb_key_costs_no_more_than_a_short_one() -> None:
    short = bytes_per_tenant(lambda i: f"tenant-{i}")
    at_the_bound = bytes_per_tenant(lambda i: f"{i:08d}".ljust(PLAIN_TENANT_MAX, "k"))
    long = bytes_per_tenant(lambda i: f"{i:08d}" + "k" * LONG)
    assert short < BYTES_PER_TENANT
    assert at_the_bound < BYTES_PER_TENANT
    assert long <= at_the_bound


def test_a_long_key_is_never_held_by_the_table() -> None:
    storage = MemoryStorage(clock=Clock())
    long_key = "x" * LONG
    storage.acquire(Debit(long_key, 10, [TENANT, quota(name="op:Export")]))
    storage.refund(Debit(long_key, 5, [TENANT]))
    storage.acquire(Debit(None, 10, [quota(name="platform", shared=True)]))
    storage.acquire(Debit("a" * PLAIN_TENANT_MAX, 10, [TENANT]))  # at the bound: kept as it is
    storage.acquire(Debit("a" * (PLAIN_TENANT_MAX + 1), 10, [TENANT]))  # past it: hashed
    assert len(storage) == 5
    assert longest_stored_key(storage) <= KEY_BOUND
    assert not any(long_key in key for key in stored_keys(storage))
    assert f"tenant\0{'a' * PLAIN_TENANT_MAX}" in stored_keys(storage)


# -- hashed keys -----------------------------------------------------------------------------


def test_two_long_keys_never_share_a_state_and_each_refunds_and_peeks_its_own() -> None:
    storage = MemoryStorage(clock=Clock())
    prefix = "k" * LONG
    first, second, third = prefix + "1", prefix + "2", "é" + prefix
    assert storage.acquire(Debit(first, 200, [TENANT])).remaining == 100
    assert storage.acquire(Debit(second, 50, [TENANT])).remaining == 250
    storage.refund(Debit(first, 30, [TENANT]))
    assert storage.peek(first, [TENANT]).remaining == 130
    assert storage.peek(second, [TENANT]).remaining == 250
    assert storage.peek(third, [TENANT]).remaining == BUDGET
    storage.refund(
        Debit(third, 30, [TENANT])
    )  # a full quota: nothing to give back, nothing written
    assert len(storage) == 2
    assert longest_stored_key(storage) <= KEY_BOUND
    # A plain tenant that spells a long key's stored digest has a state of its own.
    digest = stored_keys(storage)[0].split("\2")[1]
    assert storage.peek(digest, [TENANT]).remaining == BUDGET
    assert storage.acquire(Debit(digest, 1, [TENANT])).remaining == BUDGET - 1
    assert storage.peek(first, [TENANT]).remaining == 130


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_long_key_decides_like_a_short_one(algorithm: Algorithm) -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock, max_keys=10)
    q = quota(algorithm)
    long_key, short_key = "L" * LONG, "short"
    for cost, refund, step in [(120, 20, 5), (150, 0, 30), (90, 40, 1), (80, 0, 200)]:
        assert storage.acquire(Debit(long_key, cost, [q])) == storage.acquire(
            Debit(short_key, cost, [q])
        )
        storage.refund(Debit(long_key, refund, [q]))
        storage.refund(Debit(short_key, refund, [q]))
        assert storage.peek(long_key, [q]) == storage.peek(short_key, [q])
        clock.advance(step)
    assert longest_stored_key(storage) <= KEY_BOUND


# -- a flood of new keys ---------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_flood_of_new_keys_never_refills_a_drained_tenant(algorithm: Algorithm) -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=100)
    q = quota(algorithm)
    assert storage.acquire(Debit("victim", 240, [q])).remaining == 60
    rng = random.Random(5)
    admitted_past_the_table = 0.0
    for index in range(5_000):
        decision = storage.acquire(Debit(random_key(rng), 10, [q]))
        if index >= 99 and decision.allowed:  # the victim and 99 flood keys fill the table
            admitted_past_the_table += decision.cost
    assert storage.peek("victim", [q]).remaining == 60  # no time passed: no refill
    assert not storage.acquire(Debit("victim", 61, [q])).allowed
    # Past max_keys the flood shares one overflow budget: one quota's worth in all.
    assert admitted_past_the_table <= BUDGET
    assert storage.overflowing
    assert storage.overflowed == 5_000 - 99
    assert len(storage) <= 100 + 1  # the table, and one overflow state


def test_keys_past_max_keys_share_one_overflow_budget_per_quota() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=1)
    small = Quota("tenant", capacity=50, refill_per_second=1)  # another tier, same name
    other = quota(name="op:Export")
    assert storage.acquire(Debit("own", 10, [TENANT])).remaining == 290
    assert storage.acquire(Debit("flood-1", 200, [TENANT])).remaining == 100
    assert storage.acquire(Debit("flood-2", 100, [TENANT])).remaining == 0
    assert not storage.acquire(Debit("flood-3", 1, [TENANT])).allowed
    # Another quota (or the same name with other parameters) has its own overflow budget.
    assert storage.acquire(Debit("flood-4", 40, [small])).remaining == 10
    assert storage.acquire(Debit("flood-5", 100, [other])).remaining == 200
    # A key that has a state keeps it.
    assert storage.acquire(Debit("own", 10, [TENANT])).remaining == 280
    assert storage.overflowed == 5


def test_a_refund_or_peek_of_an_overflowed_key_reads_the_overflow_state() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=1)
    assert storage.acquire(Debit("own", 290, [TENANT])).remaining == 10
    assert storage.acquire(Debit("overflowed", 200, [TENANT])).remaining == 100
    storage.refund(Debit("overflowed", 50, [TENANT]))
    assert storage.peek("overflowed", [TENANT]).remaining == 150
    assert storage.peek("another-new-key", [TENANT]).remaining == 150  # the same state
    assert storage.peek("own", [TENANT]).remaining == 10
    assert len(storage) == 2  # no state of its own was made for the overflowed key
    assert "tenant\0overflowed" not in stored_keys(storage)


def test_a_flood_never_refills_a_drained_tenant_of_several_quotas() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=50)
    quotas = [TENANT, quota("sliding_counter", "op:Export"), quota("gcra", "user").scoped("u1")]
    assert storage.acquire(Debit("victim", 250, quotas)).remaining == 50
    rng = random.Random(7)
    admitted = []
    for _ in range(2_000):
        decision = storage.acquire(Debit(random_key(rng), 0, quotas, amounts=[20, 10, 5]))
        admitted.append(decision.allowed)
    after = storage.peek("victim", quotas)
    assert [status.remaining for status in after.quotas] == [50, 50, 50]
    # 47 slots left for 3 quotas: 15 flood keys got states of their own, the 16th two of
    # them (and the user quota's overflow state), the rest shared the overflow states,
    # where the tenant quota (300 / 20 a key) refused after 15 of them.
    assert sum(admitted) == 16 + BUDGET // 20
    assert len(storage._states) <= 50


def test_a_flood_never_refills_a_shared_quota() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=20)
    platform = quota(name="platform", shared=True)
    assert storage.acquire(Debit(None, 270, [platform])).remaining == 30
    rng = random.Random(3)
    for _ in range(1_000):
        storage.acquire(Debit(random_key(rng), 5, [TENANT]))
    assert storage.peek(None, [platform]).remaining == 30
    assert storage.acquire(Debit(None, 10, [platform])).remaining == 20


# -- refilled states make room ---------------------------------------------------------------


def test_refilled_states_make_room_for_new_keys_and_the_table_stays_bounded() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock, max_keys=50)
    assert storage.acquire(Debit("victim", 240, [TENANT])).remaining == 60  # 240 s to refill
    rng = random.Random(11)
    for _ in range(40):  # rounds of new keys, each refilled 2 s later (cost 1, 1 a second)
        for _ in range(200):
            storage.acquire(Debit(random_key(rng), 1, [TENANT]))
            assert len(storage._states) <= 50
        clock.advance(2)
    assert storage.peek("victim", [TENANT]).remaining == 60 + 80  # its refill, no more
    # Once the flood's states have refilled, new keys get states of their own again.
    overflowed = storage.overflowed
    for _ in range(49):
        assert storage.acquire(Debit(random_key(rng), 7, [TENANT])).remaining == BUDGET - 7
    assert storage.overflowed == overflowed
    assert not storage.overflowing
    assert len(storage._states) == 50


def test_the_sweep_drops_refilled_states_behind_drained_ones() -> None:
    clock = Clock()
    storage = MemoryStorage(clock=clock, max_keys=1_000)
    victims = [f"victim-{index}" for index in range(64)]  # first in line, 240 s to refill
    for victim in victims:
        storage.acquire(Debit(victim, 240, [TENANT]))
    for index in range(500):
        storage.acquire(Debit(f"key-{index}", 1, [TENANT]))
    clock.advance(2)  # every flood key is full again; the victims are not
    for _ in range(64):  # writes of one tenant: every 256 writes sweep a few states
        for _ in range(256):
            storage.acquire(Debit("busy", 0.001, [TENANT]))
    assert len(storage._states) == len(victims) + 1  # the victims and "busy"
    assert all(storage.peek(victim, [TENANT]).remaining == 62 for victim in victims)


# -- the limiter's local fallback ------------------------------------------------------------


def test_the_fallback_storage_has_the_same_bounds() -> None:
    storage = MemoryStorage(clock=Clock(), max_keys=1, source="fallback")
    limiter = Limiter(storage)
    assert limiter.acquire("victim", 290, [TENANT]).remaining == 10
    decision = limiter.acquire("x" * LONG, 100, [TENANT])
    assert (decision.allowed, decision.source, decision.remaining) == (True, "fallback", 200)
    assert limiter.peek("victim", [TENANT]).remaining == 10
    assert storage.overflowed == 1
