"""The memory storage's inlined common cases answer as its general paths do.

A refund of one quota of a key that has a state under its plain name is made inline
(``MemoryStorage.give_back``), as a decision of one quota is (``decide``); any other goes
through the key mapping and the overflow states. The same refund given as ``amounts`` of
one takes the general path: both must leave the same state. The arguments a caller gives
are checked once, with the messages they always had.
"""

from __future__ import annotations

import math
from typing import get_args

import pytest

from quotaql import Limiter, MemoryStorage, Quota
from quotaql.policy.quota import Algorithm
from quotaql.storage import Debit

T0 = 1_700_000_000_000  # ms
ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)
# A plain key, a long one and one outside ASCII (both stored as their digest), the shared
# scope.
KEYS = ["acme", "k" * 65, "café", None]


def quota(algorithm: Algorithm) -> Quota:
    if algorithm in ("token_bucket", "gcra"):
        return Quota("tenant", capacity=10, refill_per_second=1, algorithm=algorithm)
    return Quota("tenant", limit=10, window_seconds=60, algorithm=algorithm)


def frozen() -> float:
    return T0 / 1000


@pytest.mark.parametrize("key", KEYS, ids=repr)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_refund_of_one_quota_leaves_the_state_the_general_path_leaves(
    algorithm: Algorithm, key: str | None
) -> None:
    q = quota(algorithm)
    inline, general = MemoryStorage(clock=frozen), MemoryStorage(clock=frozen)
    for storage in (inline, general):
        storage.acquire(Debit(key, 3, [q], T0))
        storage.acquire(Debit(key, 4, [q], T0 + 500))
    for now, amount, at in ((T0 + 600, 2.5, T0 + 500), (T0 + 700, 1, None), (None, 0.5, T0)):
        inline.refund(Debit(key, amount, [q], now, None, at))
        general.refund(Debit(key, amount, [q], now, [amount], at))
        for later in (T0 + 700, T0 + 5_000, T0 + 61_000):
            assert inline.peek(key, [q], later) == general.peek(key, [q], later)
    assert len(inline) == len(general) == 1
    assert inline._states.keys() == general._states.keys()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_a_refund_of_a_key_without_a_state_writes_nothing(algorithm: Algorithm) -> None:
    q = quota(algorithm)
    storage = MemoryStorage(clock=frozen)
    storage.refund(Debit("acme", 5, [q]))
    limiter = Limiter(storage)
    limiter.refund("other", 5, [q])
    assert len(storage) == 0
    assert storage.peek("acme", [q]).remaining == 10


def test_a_refund_of_zero_changes_nothing() -> None:
    q = quota("token_bucket")
    storage = MemoryStorage(clock=frozen)
    storage.acquire(Debit("acme", 4, [q]))
    before = dict(storage._states)
    storage.refund(Debit("acme", 0, [q]))
    storage.refund(Debit("acme", 0.0, [q], None, [0.0]))
    assert storage._states == before


BAD = [
    (-1, ValueError, "cost must be a finite number >= 0"),
    (math.nan, ValueError, "cost must be a finite number >= 0"),
    (math.inf, ValueError, "cost must be a finite number >= 0"),
    (True, TypeError, "cost must be a number"),
    ("3", TypeError, "cost must be a number"),
    (None, TypeError, "cost must be a number"),
]


@pytest.mark.parametrize(("bad", "error", "message"), BAD, ids=repr)
def test_a_bad_amount_among_amounts_is_refused_as_ever_and_nothing_is_written(
    bad: object, error: type[Exception], message: str
) -> None:
    q, other = quota("token_bucket"), Quota("other", capacity=10, refill_per_second=1)
    storage = MemoryStorage(clock=frozen)
    limiter = Limiter(storage)
    for amounts in ([bad], [1, bad], [bad, 1]):
        quotas = [q, other][: len(amounts)]
        with pytest.raises(error, match=message):
            storage.acquire(Debit("acme", 1, quotas, None, amounts))  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            storage.refund(Debit("acme", 1, quotas, None, amounts))  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            storage.charge(Debit("acme", 1, quotas, None, amounts))  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            limiter.acquire("acme", 1, quotas, costs=amounts)  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            limiter.refund("acme", 1, quotas, amounts=amounts)  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            limiter.charge("acme", 1, quotas, amounts=amounts)  # type: ignore[arg-type]
    assert len(storage) == 0


@pytest.mark.parametrize(("bad", "error", "message"), BAD, ids=repr)
def test_a_bad_cost_is_refused_before_the_quotas_are_looked_at(
    bad: object, error: type[Exception], message: str
) -> None:
    """The cost is checked first, as it always was: a bad cost of a request whose quotas
    are not a sequence says what is wrong with the cost."""
    limiter = Limiter(MemoryStorage(clock=frozen))
    with pytest.raises(error, match=message):
        limiter.acquire("acme", bad, iter([quota("gcra")]))  # type: ignore[arg-type]
    with pytest.raises(error, match=message):
        limiter.refund("acme", bad, iter([quota("gcra")]))  # type: ignore[arg-type]


def test_a_subclass_that_overrides_refund_is_refunded_through_it() -> None:
    """The limiter's in-process refund (``give_back``) never bypasses a subclass's refund."""

    seen: list[float] = []

    class Counting(MemoryStorage):
        def refund(self, debit: Debit) -> None:
            seen.append(debit.amount)
            super().refund(debit)

    quota = Quota("tenant", 100, refill_per_second=1.0)
    limiter = Limiter(Counting())
    decision = limiter.acquire("acme", 40, (quota,))
    limiter.refund("acme", 15, (quota,), decision=decision)
    assert seen == [15]
    assert limiter.acquire("acme", 0, (quota,)).remaining == pytest.approx(75, abs=0.5)
