"""The pure limiter math: every algorithm driven with explicit times, and Quota validation.

Times are integer milliseconds; ``T0`` is a realistic Redis ``TIME`` in ms (the scale the
scripts see in production) and a multiple of every window used here, so windows start at
``T0``. A :class:`Meter` drives one quota through its pure functions the way a storage
does: commit an allowed check, keep nothing for a refused one.
"""

from __future__ import annotations

import copy
import math
import re
from typing import TYPE_CHECKING

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from quotaql import Quota
from quotaql.errors import ConfigError
from quotaql.policy.algorithms import ALGORITHMS, commit
from quotaql.policy.quota import combine

if TYPE_CHECKING:
    from quotaql.policy.algorithms import Check

T0 = 1_700_000_000_000  # ms; a multiple of 1024 and of 10_000
ALL = tuple(ALGORITHMS)
BUCKETS = ("token_bucket", "gcra")


class Meter:
    """One quota's state, driven through its pure functions like a storage drives them."""

    def __init__(self, quota: Quota) -> None:
        self.quota = quota
        self.check_fn, self.refund_fn = ALGORITHMS[quota.algorithm]
        self.state: object = None

    def take(self, now: int, cost: float) -> Check:
        """Check ``cost`` and commit it when allowed (a state that stops mattering is dropped)."""
        check = self.check_fn(self.state, now, cost, *self.quota.params)
        if check.allowed and check.state is not None:  # None: nothing to write
            state = commit(self.quota.algorithm, check.state)
            self.state = state if check.ttl_ms > 0 else None
        return check

    def probe(self, now: int, cost: float) -> Check:
        """What :meth:`take` would answer, leaving the state alone (a log expires in place)."""
        return self.check_fn(copy.deepcopy(self.state), now, cost, *self.quota.params)

    def remaining(self, now: int) -> float:
        return self.probe(now, 0.0).remaining

    def refund(self, now: int, amount: float) -> None:
        self.state, _ttl = self.refund_fn(self.state, now, amount, *self.quota.params)


def quota(algorithm: str, size: float = 10, *, per_second: float = 1, seconds: float = 10) -> Quota:
    """A bucket of ``size`` refilled ``per_second``, or a window of ``size`` per ``seconds``."""
    if algorithm in BUCKETS:
        return Quota("q", capacity=size, refill_per_second=per_second, algorithm=algorithm)  # type: ignore[arg-type]
    return Quota("q", limit=size, window_seconds=seconds, algorithm=algorithm)  # type: ignore[arg-type]


# -- behaviour every algorithm shares --------------------------------------------------------


@pytest.mark.parametrize("algorithm", ALL)
def test_a_fresh_quota_allows_its_whole_capacity_at_once_then_refuses(algorithm: str) -> None:
    meter = Meter(quota(algorithm))
    first = meter.take(T0, 10)
    assert (first.allowed, first.remaining, first.retry_after_ms) == (True, 0, 0)
    second = meter.take(T0, 0.5)
    assert (second.allowed, second.exceeds_capacity) == (False, False)
    assert second.retry_after_ms > 0


@pytest.mark.parametrize("algorithm", ALL)
def test_a_cost_above_capacity_exceeds_it_and_has_no_retry(algorithm: str) -> None:
    q = quota(algorithm)
    meter = Meter(q)
    meter.take(T0, 4)
    before = meter.remaining(T0)
    check = meter.take(T0, 10.5)
    assert (check.allowed, check.exceeds_capacity, check.state) == (False, True, None)
    assert meter.remaining(T0) == before
    decision = combine([q], [check], 10.5, "memory")
    assert (decision.allowed, decision.reason, decision.retry_after) == (
        False,
        "exceeds_capacity",
        None,
    )
    assert decision.limited_by == "q"


@pytest.mark.parametrize("algorithm", ALL)
def test_a_refused_call_leaves_no_trace(algorithm: str) -> None:
    refused, untouched = Meter(quota(algorithm)), Meter(quota(algorithm))
    for meter in (refused, untouched):
        meter.take(T0, 8)
    assert not refused.take(T0 + 1, 5).allowed
    for later in (T0 + 1, T0 + 3_000, T0 + 12_000):
        assert refused.remaining(later) == untouched.remaining(later)


@pytest.mark.parametrize("algorithm", ALL)
def test_a_zero_cost_is_always_allowed_and_takes_nothing(algorithm: str) -> None:
    meter = Meter(quota(algorithm))
    meter.take(T0, 10)
    check = meter.take(T0, 0)
    assert (check.allowed, check.remaining) == (True, 0)
    assert not meter.probe(T0, 0.5).allowed


@pytest.mark.parametrize(
    ("algorithm", "history", "now", "cost", "retry_ms"),
    [
        # The example: capacity 10 at 1/s, take 10, then 3 more need 3 s.
        ("token_bucket", [(T0, 10)], T0, 3, 3000),
        ("gcra", [(T0, 10)], T0, 3, 3000),
        ("token_bucket", [(T0, 10)], T0 + 500, 3, 2500),
        ("gcra", [(T0, 10)], T0 + 500, 3, 2500),
        # The oldest entry (4) frees enough for 3; for 5 the second one must go too.
        ("sliding_log", [(T0, 4), (T0 + 2000, 6)], T0 + 5000, 3, 5000),
        ("sliding_log", [(T0, 4), (T0 + 2000, 6)], T0 + 5000, 5, 7000),
        # Current window full: wait into the next one until 10 × weight + 1 <= 10.
        ("sliding_counter", [(T0 + 5000, 10)], T0 + 5000, 1, 6000),
        # Previous window 10, weight 0.75 at +2.5 s: 7.5 + 3 fits once the weight is 0.7.
        ("sliding_counter", [(T0 + 5000, 10)], T0 + 12_500, 3, 500),
        ("fixed_window", [(T0 + 2500, 10)], T0 + 2500, 3, 7500),
    ],
)
def test_retry_after_is_exactly_when_the_same_call_fits(
    algorithm: str, history: list[tuple[int, float]], now: int, cost: float, retry_ms: int
) -> None:
    meter = Meter(quota(algorithm))
    for at, taken in history:
        assert meter.take(at, taken).allowed
    check = meter.take(now, cost)
    assert (check.allowed, check.retry_after_ms) == (False, retry_ms)
    assert not meter.probe(now + retry_ms - 1, cost).allowed
    assert meter.probe(now + retry_ms, cost).allowed


# Parameters whose arithmetic is exact in binary floating point (dyadic rates, intervals
# and window fractions, costs in halves): the properties below must then hold exactly.
EXACT_BUCKET_RATES = (125, 250, 500, 1000, 2000)  # per second: 1/8 .. 2 per ms
EXACT_WINDOWS = (0.256, 1.024, 4.096)  # seconds: 2**8 .. 2**12 ms


@st.composite
def exact_quotas(draw: st.DrawFn, algorithms: tuple[str, ...] = ALL) -> Quota:
    algorithm = draw(st.sampled_from(algorithms))
    size = draw(st.sampled_from([1, 2.5, 4, 10, 16]))
    if algorithm in BUCKETS:
        return quota(algorithm, size, per_second=draw(st.sampled_from(EXACT_BUCKET_RATES)))
    return quota(algorithm, size, seconds=draw(st.sampled_from(EXACT_WINDOWS)))


@st.composite
def float_quotas(draw: st.DrawFn, algorithms: tuple[str, ...] = ALL) -> Quota:
    algorithm = draw(st.sampled_from(algorithms))
    size = draw(st.floats(0.5, 100))
    if algorithm in BUCKETS:
        return quota(algorithm, size, per_second=draw(st.floats(0.1, 1000)))
    return quota(algorithm, size, seconds=draw(st.floats(0.001, 20)))


STEPS = st.one_of(st.just(0), st.integers(1, 3), st.integers(0, 5000))
HALVES = st.integers(0, 40).map(lambda n: n / 2)
FRACTIONS = st.one_of(st.sampled_from([0.0, 0.1, 0.25, 0.3, 0.5, 0.8, 1.0]), st.floats(0, 1.2))
STARTS = st.one_of(st.just(T0), st.integers(0, 4 * T0))


def check_retry_after(
    q: Quota, start: int, history: list[tuple[int, float]], *, minimal: bool
) -> None:
    """Each refusal's retry is at least 1 ms and the same call fits then (and not before)."""
    meter = Meter(q)
    now = start
    for dt, cost in history:
        now += dt
        check = meter.take(now, cost)
        if check.allowed or check.exceeds_capacity:
            continue
        retry = int(check.retry_after_ms)
        assert retry >= 1, f"refused {cost!r} at {now} with retry_after {retry!r}"
        assert meter.probe(now + retry, cost).allowed, (
            f"refused {cost!r} at {now}, told to retry in {retry} ms, refused again then"
        )
        if minimal:
            assert not meter.probe(now + retry - 1, cost).allowed


@pytest.mark.parametrize(
    ("q", "history", "now", "cost"),
    [
        # need = (0.3 + 10) - 10 rounds above the 0.3 the log holds: no entry "frees" it.
        (quota("sliding_log", 10), [(T0, 0.3)], T0, 10),
        # 0.8 x 0.75 + 0.3 + 0.1 is 1.0000000000000002 where retry_after said it fits.
        (
            quota("sliding_counter", 1, seconds=1),
            [(T0 + 500, 0.8), (T0 + 1125, 0.3)],
            T0 + 1125,
            0.1,
        ),
        (quota("gcra", 0.5, per_second=9), [(T0, 0.25)], T0, 0.5),
    ],
    ids=["sliding_log", "sliding_counter", "gcra"],
)
def test_waiting_retry_after_is_enough_with_decimal_costs(
    q: Quota, history: list[tuple[int, float]], now: int, cost: float
) -> None:
    meter = Meter(q)
    for at, taken in history:
        assert meter.take(at, taken).allowed
    check = meter.take(now, cost)
    assert not check.allowed
    assert check.retry_after_ms >= 1, f"refused with retry_after 0: {check}"
    later = meter.probe(now + int(check.retry_after_ms), cost)
    assert later.allowed, f"told to retry in {check.retry_after_ms} ms, refused then: {later}"


@settings(max_examples=300, deadline=None)
@given(q=exact_quotas(), history=st.lists(st.tuples(STEPS, HALVES), max_size=25))
def test_retry_after_is_exact_when_the_arithmetic_is(
    q: Quota, history: list[tuple[int, float]]
) -> None:
    check_retry_after(q, T0, history, minimal=True)


@pytest.mark.parametrize("algorithm", ALL)
@settings(max_examples=300, deadline=None)
@given(data=st.data(), start=STARTS)
def test_a_refusal_never_says_retry_now_and_retrying_then_succeeds(
    algorithm: str, data: st.DataObject, start: int
) -> None:
    # Arbitrary floats and realistic timestamps: rounding may cost a millisecond of
    # minimality, but a refusal must never say "retry in 0 ms" (a client would spin) and
    # waiting the advertised time must be enough.
    q = data.draw(float_quotas((algorithm,)))
    history = data.draw(
        st.lists(st.tuples(STEPS, FRACTIONS.map(lambda f: f * q.maximum)), max_size=25)
    )
    check_retry_after(q, start, history, minimal=False)


@settings(max_examples=200, deadline=None)
@given(
    q=exact_quotas(),
    ops=st.lists(st.tuples(STEPS, st.sampled_from(["take", "refund"]), HALVES), max_size=30),
)
def test_refunds_never_raise_a_quota_above_its_maximum(
    q: Quota, ops: list[tuple[int, str, float]]
) -> None:
    meter = Meter(q)
    now = T0
    for dt, op, amount in ops:
        now += dt
        if op == "take":
            meter.take(now, amount)
        else:
            meter.refund(now, amount)
        assert 0 <= meter.remaining(now) <= q.maximum


@pytest.mark.parametrize("algorithm", ALL)
def test_a_refund_larger_than_the_debit_only_refills_to_the_maximum(algorithm: str) -> None:
    meter = Meter(quota(algorithm))
    meter.take(T0, 3)
    meter.refund(T0, 50)
    assert meter.remaining(T0) == 10
    assert meter.take(T0, 10).allowed
    assert not meter.probe(T0, 0.5).allowed


@pytest.mark.parametrize("algorithm", ALL)
def test_a_refund_to_an_untouched_quota_creates_no_state(algorithm: str) -> None:
    meter = Meter(quota(algorithm))
    meter.refund(T0, 5)
    assert meter.state is None
    assert meter.remaining(T0) == 10


@pytest.mark.parametrize("algorithm", ALL)
def test_a_fresh_quota_reports_exactly_its_maximum_as_remaining(algorithm: str) -> None:
    # 7.3 and 2.9/s are not binary fractions: a remaining derived through a division
    # (capacity × interval / interval) must still not claim more than the quota holds.
    q = quota(algorithm, 7.3, per_second=2.9, seconds=1.7)
    assert Meter(q).remaining(T0) == 7.3


@pytest.mark.parametrize("algorithm", ALL)
def test_a_clock_going_back_never_refills_a_quota_twice(algorithm: str) -> None:
    # Redis TIME can step back (NTP, a failover to a replica with another clock). Going
    # back across a window start and forward again must not hand out the budget again.
    meter = Meter(quota(algorithm))
    admitted = [at for at in (T0 + 500, T0 - 500, T0 + 600) if meter.take(at, 10).allowed]
    assert admitted == [T0 + 500]


@pytest.mark.parametrize("algorithm", BUCKETS)
def test_a_bucket_behind_the_clock_refills_only_from_its_last_refill(algorithm: str) -> None:
    meter = Meter(quota(algorithm))
    meter.take(T0 + 1000, 10)
    assert not meter.take(T0, 1).allowed  # earlier than the last refill: no refill
    assert meter.remaining(T0 + 1000) == 0
    assert meter.remaining(T0 + 1500) == 0.5


class ExpiringMeter(Meter):
    """A :class:`Meter` that forgets its state once its TTL has passed, like the storages do."""

    def __init__(self, quota: Quota) -> None:
        super().__init__(quota)
        self.expires = 0

    def _live(self, now: int) -> None:
        if self.state is not None and self.expires <= now:
            self.state = None

    def take(self, now: int, cost: float) -> Check:
        self._live(now)
        check = super().take(now, cost)
        if check.allowed and check.state is not None:  # None: nothing written
            self.expires = now + check.ttl_ms
        return check

    def probe(self, now: int, cost: float) -> Check:
        self._live(now)
        return super().probe(now, cost)

    def refund(self, now: int, amount: float) -> None:
        self._live(now)
        self.state, ttl = self.refund_fn(self.state, now, amount, *self.quota.params)
        self.expires = now + ttl


@settings(max_examples=300, deadline=None)
@given(
    data=st.data(),
    ops=st.lists(st.tuples(STEPS, st.sampled_from(["take", "refund"]), FRACTIONS), max_size=30),
)
def test_forgetting_a_state_when_its_ttl_passes_changes_no_decision(
    data: st.DataObject, ops: list[tuple[int, str, float]]
) -> None:
    q = data.draw(st.one_of(exact_quotas(), float_quotas()))
    keeping, expiring = Meter(q), ExpiringMeter(q)
    now = T0
    for dt, op, fraction in ops:
        now += dt
        amount = fraction * q.maximum
        if op == "refund":
            keeping.refund(now, amount)
            expiring.refund(now, amount)
        else:
            assert keeping.take(now, amount)[:2] == expiring.take(now, amount)[:2]
        kept, expired = keeping.probe(now, 0.0), expiring.probe(now, 0.0)
        assert kept._replace(state=None) == expired._replace(state=None), (now, op, amount)


@pytest.mark.parametrize("algorithm", ALL)
def test_a_state_written_while_the_clock_is_behind_lives_as_long_as_it_matters(
    algorithm: str,
) -> None:
    # The TTL is counted from ``now``; when ``now`` is behind the state's own time (a
    # bucket's last refill, the newest log entry) it must reach past that, or the state is
    # forgotten (by the memory storage, or by Redis on its own stepped-back clock) while it
    # still holds a debit back: the quota refills for free.
    keeping, expiring = Meter(quota(algorithm)), ExpiringMeter(quota(algorithm))
    for meter in (keeping, expiring):
        assert meter.take(T0 + 1000, 4).allowed
        assert meter.take(T0, 1).allowed  # the clock is one second behind
    for later in range(T0 + 1000, T0 + 12_001, 250):
        assert expiring.remaining(later) == keeping.remaining(later), f"at T0+{later - T0}"


# -- token bucket ----------------------------------------------------------------------------


def test_token_bucket_refills_at_its_rate_up_to_its_capacity() -> None:
    meter = Meter(quota("token_bucket", 10, per_second=2))
    meter.take(T0, 10)
    assert meter.remaining(T0 + 1250) == 2.5
    assert meter.remaining(T0 + 60_000) == 10
    assert meter.take(T0 + 60_000, 10).allowed
    assert not meter.probe(T0 + 60_000, 0.5).allowed


def test_token_bucket_burst_after_a_partial_refill_is_what_refilled() -> None:
    meter = Meter(quota("token_bucket", 100, per_second=50))
    meter.take(T0, 100)
    assert not meter.take(T0 + 200, 10.5).allowed
    assert meter.take(T0 + 200, 10).allowed
    check = meter.take(T0 + 210, 37)
    assert (check.allowed, check.retry_after_ms) == (False, 730)  # (37 - 0.5) / 0.05


def test_token_bucket_reset_and_ttl_are_the_time_to_refill() -> None:
    meter = Meter(quota("token_bucket", 10, per_second=1))
    check = meter.take(T0, 3)
    assert (check.reset_after_ms, check.ttl_ms) == (3000, 3000)
    check = meter.take(T0 + 1000, 0)
    assert (check.reset_after_ms, check.ttl_ms) == (2000, 2000)


# -- GCRA ------------------------------------------------------------------------------------


def test_gcra_keeps_one_timestamp_and_matches_the_token_bucket_example() -> None:
    meter = Meter(quota("gcra", 10, per_second=1))
    assert meter.take(T0, 10).allowed
    assert meter.state == (T0 + 10_000) * 1000  # the arrival time, in microseconds
    check = meter.take(T0, 3)
    assert (check.allowed, check.retry_after_ms, check.reset_after_ms) == (False, 3000, 10_000)
    assert meter.take(T0 + 3000, 3).allowed


@pytest.mark.parametrize(
    ("capacity", "per_second"), [(1, 6), (1, 18), (5, 0.7), (12, 23.89), (7, 89.66)]
)
def test_gcra_admits_its_whole_capacity_from_a_full_bucket_at_a_real_timestamp(
    capacity: float, per_second: float
) -> None:
    check = Meter(quota("gcra", capacity, per_second=per_second)).take(T0, capacity)
    assert check.allowed, f"full bucket refused its capacity: {check}"


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.floats(0.5, 1000),
    per_second=st.floats(0.01, 1000),
    fraction=st.floats(0, 1),
    now=STARTS,
)
def test_gcra_admits_any_cost_up_to_capacity_from_a_full_bucket(
    capacity: float, per_second: float, fraction: float, now: int
) -> None:
    cost = fraction * capacity
    assert Meter(quota("gcra", capacity, per_second=per_second)).take(now, cost).allowed


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.sampled_from([1, 2.5, 4, 10, 16]),
    per_second=st.sampled_from(EXACT_BUCKET_RATES),
    history=st.lists(st.tuples(STEPS, HALVES), max_size=30),
)
def test_gcra_decides_exactly_like_the_token_bucket_when_the_arithmetic_is_exact(
    capacity: float, per_second: float, history: list[tuple[int, float]]
) -> None:
    bucket = Meter(quota("token_bucket", capacity, per_second=per_second))
    gcra = Meter(quota("gcra", capacity, per_second=per_second))
    now = T0
    for dt, cost in history:
        now += dt
        a, b = bucket.take(now, cost), gcra.take(now, cost)
        assert (a.allowed, a.exceeds_capacity, a.remaining, a.retry_after_ms) == (
            b.allowed,
            b.exceeds_capacity,
            b.remaining,
            b.retry_after_ms,
        )
        assert a.reset_after_ms == b.reset_after_ms


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.floats(0.5, 1000),
    per_second=st.floats(0.01, 1000),
    start=STARTS,
    history=st.lists(st.tuples(STEPS, FRACTIONS), max_size=30),
)
@example(capacity=141.0, per_second=141.0, start=0, history=[(0, 0.5), (0, 0.5)])
def test_gcra_and_the_token_bucket_disagree_only_on_rounding_ties(
    capacity: float, per_second: float, start: int, history: list[tuple[int, float]]
) -> None:
    bucket = Meter(quota("token_bucket", capacity, per_second=per_second))
    gcra = Meter(quota("gcra", capacity, per_second=per_second))
    interval = 1000 / per_second
    now = start
    for dt, fraction in history:
        now += dt
        cost = fraction * capacity
        tokens = bucket.remaining(now)
        a, b = bucket.take(now, cost), gcra.take(now, cost)
        if a.allowed != b.allowed:
            # GCRA keeps an absolute timestamp: near 1.7e12 ms one ulp is 2.4e-4 ms, so it
            # resolves tokens to a few ulps of time over the interval; and both states are
            # whole microseconds, each debit rounding by up to one (near 0 ms, where an ulp
            # is tiny, the microseconds are what counts: Hypothesis found capacity = rate =
            # 141 and two debits of half the capacity at 0 ms 1 µs apart). Beyond that, a
            # disagreement would be a difference of algorithm, not of rounding.
            resolution = max(8 * math.ulp(float(now) + capacity * interval), 0.002)
            slack = resolution / interval
            assert abs(cost - tokens) <= slack + 1e-9 * capacity, (now, cost, tokens, a, b)
            return  # the two states now differ by one admitted call


# -- sliding log -----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    q=exact_quotas(("sliding_log",)),
    history=st.lists(st.tuples(STEPS, HALVES), max_size=40),
)
def test_sliding_log_never_admits_more_than_its_limit_in_any_window(
    q: Quota, history: list[tuple[int, float]]
) -> None:
    limit, window = q.params
    meter = Meter(q)
    admitted: list[tuple[int, float]] = []
    now = T0
    for dt, cost in history:
        now += dt
        # Entries of the window ending now: those after now - window (exclusive).
        in_window = sum(c for at, c in admitted if at > now - window)
        check = meter.take(now, cost)
        fits = in_window + cost <= limit
        assert check.allowed == fits, (now, cost, in_window, check)
        if check.allowed:
            admitted.append((now, cost))
            assert check.remaining == limit - in_window - cost


def test_sliding_log_entries_leave_the_window_exactly_one_window_later() -> None:
    meter = Meter(quota("sliding_log", 10, seconds=10))
    meter.take(T0, 6)
    meter.take(T0 + 4000, 4)
    assert meter.remaining(T0 + 9999) == 0
    assert meter.remaining(T0 + 10_000) == 6
    assert meter.remaining(T0 + 14_000) == 10
    assert meter.state is not None


def test_sliding_log_refund_takes_back_the_most_recent_entries_first() -> None:
    meter = Meter(quota("sliding_log", 10, seconds=10))
    meter.take(T0, 3)
    meter.take(T0 + 1000, 4)
    meter.refund(T0 + 1000, 5)  # all of the 4, then 1 of the 3
    assert meter.remaining(T0 + 2000) == 8
    assert meter.remaining(T0 + 10_000) == 10  # what is left is the T0 entry


# -- sliding counter -------------------------------------------------------------------------


def test_sliding_counter_weights_the_previous_window_by_its_overlap() -> None:
    meter = Meter(quota("sliding_counter", 10, seconds=10))
    meter.take(T0 + 5000, 10)
    assert meter.remaining(T0 + 10_000) == 0  # weight 1
    assert meter.remaining(T0 + 12_500) == 2.5  # weight 0.75
    assert meter.remaining(T0 + 17_500) == 7.5  # weight 0.25
    assert not meter.take(T0 + 12_500, 3).allowed
    check = meter.take(T0 + 12_500, 2.5)
    assert (check.allowed, check.remaining) == (True, 0)
    # 2.5 now counts in full in this window, the previous one still at 0.75 - 0.1.
    assert meter.remaining(T0 + 13_500) == 10 - 2.5 - 6.5


def test_sliding_counter_forgets_a_window_older_than_the_previous_one() -> None:
    meter = Meter(quota("sliding_counter", 10, seconds=10))
    meter.take(T0 + 9000, 10)
    assert meter.remaining(T0 + 10_000) == 0
    assert meter.remaining(T0 + 19_999) == 10 - 10 * (1 / 10_000)
    assert meter.remaining(T0 + 20_000) == 10
    assert meter.take(T0 + 25_000, 10).allowed


def test_sliding_counter_reset_is_when_the_current_window_stops_counting() -> None:
    meter = Meter(quota("sliding_counter", 10, seconds=10))
    check = meter.take(T0 + 4000, 2)
    # Counted in full until T0+10 s, then weighted until T0+20 s.
    assert (check.reset_after_ms, check.ttl_ms) == (16_000, 16_000)


# -- fixed window ----------------------------------------------------------------------------


def test_fixed_window_starts_over_at_each_boundary() -> None:
    meter = Meter(quota("fixed_window", 10, seconds=10))
    assert meter.take(T0 + 9999, 10).allowed
    check = meter.take(T0 + 9999, 1)
    assert (check.allowed, check.retry_after_ms, check.reset_after_ms) == (False, 1, 1)
    assert meter.take(T0 + 10_000, 10).allowed
    assert not meter.take(T0 + 19_999, 1).allowed


def test_fixed_window_blocked_calls_do_not_count() -> None:
    meter = Meter(quota("fixed_window", 10, seconds=10))
    assert meter.take(T0, 8).allowed
    for _ in range(3):
        assert not meter.take(T0 + 1, 5).allowed
    check = meter.take(T0 + 2, 2)
    assert (check.allowed, check.remaining) == (True, 0)


def test_fixed_window_windows_are_aligned_to_the_epoch() -> None:
    meter = Meter(quota("fixed_window", 10, seconds=10))
    check = meter.take(T0 + 7000, 1)
    assert (check.reset_after_ms, check.ttl_ms) == (3000, 3000)


# -- Quota validation ------------------------------------------------------------------------

NAME_RULE = "must be 1-128 characters of A-Z a-z 0-9 _ . : @ / + = -"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"capacity": 0, "refill_per_second": 1},
            "quota 'q': capacity must be greater than 0, got 0",
        ),
        (
            {"capacity": 10, "refill_per_second": -1},
            "quota 'q': refill_per_second must be greater than 0, got -1",
        ),
        (
            {"capacity": math.nan, "refill_per_second": 1},
            "quota 'q': capacity must be a finite number, got nan",
        ),
        (
            {"capacity": 10, "refill_per_second": math.inf},
            "quota 'q': refill_per_second must be a finite number, got inf",
        ),
        (
            {"capacity": True, "refill_per_second": 1},
            "quota 'q': capacity must be a finite number, got True",
        ),
        (
            {"capacity": "10", "refill_per_second": 1},
            "quota 'q': capacity must be a finite number, got '10'",
        ),
        ({"refill_per_second": 1}, "quota 'q': capacity is required"),
        (
            {"limit": 0, "window_seconds": 1, "algorithm": "fixed_window"},
            "quota 'q': limit must be greater than 0, got 0",
        ),
        (
            {"limit": 5, "window_seconds": math.nan, "algorithm": "sliding_log"},
            "quota 'q': window_seconds must be a finite number, got nan",
        ),
        (
            {"limit": 5, "window_seconds": 0.0004, "algorithm": "sliding_counter"},
            "quota 'q': window_seconds must be at least 0.001",
        ),
        (
            {"capacity": 10, "refill_per_second": 1, "algorithm": "leaky"},
            "quota 'q': unknown algorithm 'leaky' (expected one of token_bucket, gcra,"
            " sliding_log, sliding_counter, fixed_window)",
        ),
        (
            {"limit": 10, "window_seconds": 1},
            "quota 'q': token_bucket takes capacity and refill_per_second, not limit",
        ),
        (
            {"capacity": 10, "refill_per_second": 1, "window_seconds": 1, "algorithm": "gcra"},
            "quota 'q': gcra takes capacity and refill_per_second, not window_seconds",
        ),
        (
            {"capacity": 10, "refill_per_second": 1, "algorithm": "fixed_window"},
            "quota 'q': fixed_window takes limit and window_seconds, not capacity",
        ),
        (
            {"limit": 10, "window_seconds": 1, "refill_per_second": 1, "algorithm": "sliding_log"},
            "quota 'q': sliding_log takes limit and window_seconds, not refill_per_second",
        ),
    ],
)
def test_invalid_quota_parameters_are_refused_with_a_clear_message(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        Quota("q", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name", ["", "a b", "{a}", "a}b", "tenant{x", "a#b", "ü", "a\0", "x" * 129, None, 5]
)
def test_quota_names_that_could_break_a_storage_key_are_refused(name: object) -> None:
    with pytest.raises(
        ConfigError, match=f"^quota name {re.escape(repr(name))} {re.escape(NAME_RULE)}$"
    ):
        Quota(name, capacity=1, refill_per_second=1)  # type: ignore[arg-type]


def test_config_errors_are_value_errors() -> None:
    with pytest.raises(ValueError, match="capacity must be greater than 0"):
        Quota("q", capacity=-1, refill_per_second=1)


@pytest.mark.parametrize(
    ("kwargs", "params", "maximum"),
    [
        ({"capacity": 10, "refill_per_second": 2}, (10.0, 0.002), 10.0),
        ({"capacity": 10, "refill_per_second": 4, "algorithm": "gcra"}, (10.0, 250.0), 10.0),
        ({"limit": 5, "window_seconds": 1.5, "algorithm": "sliding_log"}, (5.0, 1500), 5.0),
        ({"limit": 5, "window_seconds": 0.001, "algorithm": "fixed_window"}, (5.0, 1), 5.0),
    ],
)
def test_quota_parameters_are_converted_to_milliseconds(
    kwargs: dict[str, object], params: tuple[float, float], maximum: float
) -> None:
    q = Quota("q", **kwargs)  # type: ignore[arg-type]
    assert (q.params, q.maximum) == (params, maximum)
