"""The limiter math, written once: one pure function per algorithm, weighted by cost.

Time is integer milliseconds passed in by the caller (no clock reads here); amounts are
floats. ``src/quotaql/storage/lua/*.lua`` mirrors these functions operation for operation,
so Redis and the memory storage reach identical decisions (a property test checks it):
keep the two in step, including the order of floating-point operations.

Each ``check`` returns a :class:`Check`: whether ``cost`` fits, and the state to store if
the caller commits it. Nothing is written for a blocked call, and a state equal to the
empty one may be dropped (``ttl_ms`` says when the stored state stops mattering, counted
from ``now``).

Each ``refund`` takes ``at``, the time of the debit it gives back (None: now): a window
gives back only what that debit counted in it, so a late refund never returns more than a
prompt one would have, and never budget of a later window.

Floating point: a cost "fits" when it exceeds what is available by at most ``SLACK`` of
the quota's size, so that rounding never refuses a request that fits exactly (a full
bucket, or a retry at the promised time). A clock that steps back (Redis ``TIME`` after an
NTP correction) never gives anything back: state keeps its own, later, time.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ALGORITHMS",
    "CHARGES",
    "SLACK",
    "Check",
    "SlidingLog",
    "commit",
    "fixed_window",
    "fixed_window_refund",
    "gcra",
    "gcra_refund",
    "sliding_counter",
    "sliding_counter_refund",
    "sliding_log",
    "sliding_log_refund",
    "token_bucket",
    "token_bucket_refund",
]

SLACK = 1e-9  # of the quota's size: the rounding a fit may absorb

# States are plain values, the cheapest things to keep in memory per key. The buckets keep
# one integer (microseconds), which Redis also stores in its most compact encoding.
BucketState = int  # when the bucket is full again, in microseconds
SlidingCounterState = tuple[int, float, float]  # window start, current count, previous count
FixedWindowState = tuple[int, float]  # window start, count


class SlidingLog:
    """A sliding log's state: admitted ``(time, cost)`` entries in time order, and their total.

    The one mutable state: copying the log on every call would cost O(entries).
    """

    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        self.entries: deque[tuple[int, float]] = deque()
        self.total = 0.0

    def expire(self, now: int, window: int) -> None:
        """Forget the entries older than one window."""
        entries = self.entries
        cutoff = now - window
        while entries and entries[0][0] <= cutoff:
            self.total = self.total - entries.popleft()[1]
        if not entries:
            self.total = 0.0


class Check(NamedTuple):
    """One quota's answer to one request.

    Attributes:
        allowed: ``cost`` fits now.
        exceeds_capacity: ``cost`` is larger than the quota can ever allow.
        state: the state to store when the caller commits the request (allowed only; None
            when nothing needs writing); a sliding log's is a pending entry that
            :func:`commit` appends.
        remaining: what is left after this request (if allowed) or now (if not).
        retry_after_ms: when the same request would fit (0 when allowed, >= 1 when not,
            unless it never will).
        reset_after_ms: when the quota is back to full.
        ttl_ms: how long the stored state matters; after that the key may expire.
    """

    allowed: bool
    exceeds_capacity: bool
    state: object
    remaining: float
    retry_after_ms: float
    reset_after_ms: float
    ttl_ms: int


# Check(...) goes through a Python-level __new__; tuple.__new__ builds the same NamedTuple
# in a third of the time, and checks run on every request.
_new = tuple.__new__
_ceil = math.ceil


def _ms(value: float) -> int:
    """Round a duration up to whole milliseconds (never negative)."""
    return max(0, _ceil(value))


# -- the buckets: one timestamp, when the bucket is full again -------------------------------


def _debt(state: BucketState | None, now_us: int) -> float:
    """Milliseconds of refill the bucket still owes (0 when full)."""
    return (state - now_us) / 1000 if state is not None and state > now_us else 0.0


def _rebucket(state: BucketState | None, now: int, change: float) -> tuple[BucketState | None, int]:
    """The state and TTL of a bucket whose debt moves by ``change`` ms (a refund's is negative)."""
    now_us = now * 1000
    debt = _debt(state, now_us) + change
    if debt <= 0:
        return None, 0
    return now_us + _ceil(debt * 1000), _ms(debt)


def token_bucket(
    state: BucketState | None,
    now: int,
    cost: float,
    capacity: float,
    rate: float,
    delay_ms: int = 0,
) -> Check:
    """Token bucket: ``capacity`` tokens, refilled at ``rate`` tokens per ms, ``cost`` per call.

    The state is the time the bucket is full again; the tokens it holds are derived from
    it: ``capacity - (full_at - now) × rate``.

    With ``delay_ms``, a cost that does not fit now but will within ``delay_ms`` (the tokens
    refilled by then cover it) is a reservation: allowed, debited now (the bucket goes below
    empty), and ``retry_after_ms`` is how long the call must wait before it runs (a leaky
    bucket as a queue: nginx's ``limit_req`` without ``nodelay``). A refusal's retry is when
    the call could be reserved.
    """
    now_us = now * 1000
    # _debt() inlined: the default algorithm, on every request.
    debt = (state - now_us) / 1000 if state is not None and state > now_us else 0.0
    tokens = capacity - debt * rate
    if cost > capacity:
        return _new(Check, (False, True, None, tokens, 0, _ms(debt), 0))
    if cost <= tokens + capacity * SLACK:
        debt = debt + cost / rate
        reset = _ceil(debt)  # _ms() without its max(): debt >= 0
        remaining = tokens - cost if tokens > cost else 0.0
        return _new(Check, (True, False, now_us + _ceil(debt * 1000), remaining, 0, reset, reset))
    if delay_ms and cost <= tokens + rate * delay_ms + capacity * SLACK:  # a reservation
        wait = _ms((cost - tokens) / rate)
        debt = debt + cost / rate
        reset = _ceil(debt)
        return _new(
            Check, (True, False, now_us + _ceil(debt * 1000), tokens - cost, wait, reset, reset)
        )
    retry = _ms((cost - tokens) / rate - delay_ms)
    return _new(Check, (False, False, None, tokens, retry if retry > 0 else 1, _ms(debt), 0))


def token_bucket_refund(
    state: BucketState | None,
    now: int,
    amount: float,
    capacity: float,
    rate: float,
    at: int | None = None,
) -> tuple[BucketState | None, int]:
    """Give ``amount`` tokens back (never above capacity). Returns the state and its TTL.

    A bucket does not care when the debit was (``at``): tokens given back late are the same
    tokens, and they never lift it above full.
    """
    del capacity, at  # the signature matches token_bucket's: callers pass Quota.params
    return _rebucket(state, now, -(amount / rate))


def gcra(
    state: BucketState | None,
    now: int,
    cost: float,
    capacity: float,
    interval: float,
    delay_ms: int = 0,
) -> Check:
    """Generic cell rate algorithm: one unit of cost every ``interval`` ms, bursts of ``capacity``.

    The state is the theoretical arrival time (when the meter is empty again). It admits
    what a token bucket with the same capacity and rate admits; it is the leaky bucket
    written as a meter. ``delay_ms`` reserves as :func:`token_bucket` does.
    """
    now_us = now * 1000
    debt = _debt(state, now_us)
    tolerance = capacity * interval
    if cost > capacity:
        return _new(Check, (False, True, None, capacity - debt / interval, 0, _ms(debt), 0))
    new_debt = debt + cost * interval
    if new_debt <= tolerance + tolerance * SLACK:
        reset = _ms(new_debt)
        remaining = capacity - new_debt / interval
        return _new(
            Check,
            (
                True,
                False,
                now_us + _ceil(new_debt * 1000),
                remaining if remaining > 0 else 0.0,
                0,
                reset,
                reset,
            ),
        )
    if delay_ms and new_debt <= tolerance + delay_ms + tolerance * SLACK:  # a reservation
        reset = _ms(new_debt)
        wait = _ms(new_debt - tolerance)
        remaining = capacity - new_debt / interval
        return _new(
            Check, (True, False, now_us + _ceil(new_debt * 1000), remaining, wait, reset, reset)
        )
    retry = _ms(new_debt - tolerance - delay_ms)
    return _new(
        Check,
        (False, False, None, capacity - debt / interval, retry if retry > 0 else 1, _ms(debt), 0),
    )


def gcra_refund(
    state: BucketState | None,
    now: int,
    amount: float,
    capacity: float,
    interval: float,
    at: int | None = None,
) -> tuple[BucketState | None, int]:
    """Move the arrival time back by ``amount`` units (never before now; ``at`` as for
    :func:`token_bucket_refund`)."""
    del capacity, at
    return _rebucket(state, now, -(amount * interval))


# -- sliding log: exact, every admitted call is remembered for one window -------------------


def sliding_log(
    state: SlidingLog | None, now: int, cost: float, limit: float, window: int, delay_ms: int = 0
) -> Check:
    """Admit when the calls of the last ``window`` ms plus ``cost`` stay within ``limit``.

    Expired entries are dropped from ``state`` in place; the new entry is only appended
    by :func:`commit`, so a call refused by another quota leaves no trace.
    """
    del delay_ms  # a window has no reservations (a Quota refuses max_delay on one)
    log = SlidingLog() if state is None else state
    log.expire(now, window)
    entries, total = log.entries, log.total
    newest = entries[-1][0] if entries else None
    reset = 0 if newest is None else _ms(newest + window - now)
    if cost > limit:
        return _new(Check, (False, True, None, limit - total, 0, reset, 0))
    if total + cost <= limit + limit * SLACK:
        remaining = limit - (total + cost)
        remaining = remaining if remaining > 0 else 0.0
        if cost == 0:
            return _new(Check, (True, False, None, remaining, 0, reset, 0))
        # Entries stay in time order even when the clock steps back.
        at = now if newest is None or newest < now else newest
        ttl = _ms(at + window - now)
        return _new(Check, (True, False, (log, at, cost), remaining, 0, ttl, ttl))
    # The first entry whose expiry makes room, with the admission test's own arithmetic.
    retry = reset
    left = total
    for at, entry_cost in entries:
        left = left - entry_cost
        if left + cost <= limit + limit * SLACK:
            retry = _ms(at + window - now)
            break
    return _new(Check, (False, False, None, limit - total, retry, reset, 0))


def sliding_log_commit(pending: tuple[SlidingLog, int, float]) -> SlidingLog:
    """Append the entry an allowed :func:`sliding_log` check left pending."""
    log, at, cost = pending
    log.entries.append((at, cost))
    log.total = log.total + cost
    return log


def sliding_log_refund(
    state: SlidingLog | None,
    now: int,
    amount: float,
    limit: float,
    window: int,
    at: int | None = None,
) -> tuple[SlidingLog | None, int]:
    """Take ``amount`` back from the most recent entries made at or before ``at`` (the
    debit's time; None: any), never from a later operation's entries."""
    del limit
    if state is None:
        return None, 0
    state.expire(now, window)
    entries = state.entries
    later: list[tuple[int, float]] = []  # entries after the debit: not this refund's
    if at is not None:
        while entries and entries[-1][0] > at:
            later.append(entries.pop())
    while entries and amount > 0:
        when, entry_cost = entries.pop()
        if entry_cost > amount:
            entries.append((when, entry_cost - amount))
            state.total = state.total - amount
            amount = 0
        else:
            state.total = state.total - entry_cost
            amount = amount - entry_cost
    while later:
        entries.append(later.pop())
    if not entries:
        return None, 0
    return state, _ms(entries[-1][0] + window - now)


# -- sliding window counter: weighted previous + current fixed window ------------------------


def _counter_windows(
    state: SlidingCounterState | None, now: int, window: int
) -> SlidingCounterState:
    """The counts as of ``now``'s window (a state from a later window stays as it is)."""
    start = now - now % window
    if state is None:
        return start, 0.0, 0.0
    old_start, current, previous = state
    if old_start >= start:
        return state
    previous = current if start - old_start == window else 0.0
    return start, 0.0, previous


def _counter_estimate(start: int, current: float, previous: float, now: int, window: int) -> float:
    """The weighted count at ``now`` for windows as of ``start``."""
    elapsed = now - start if now > start else 0
    return previous * ((window - elapsed) / window) + current


def _counter_reset(start: int, current: float, previous: float, now: int, window: int) -> int:
    if current > 0:
        return _ms(start + 2 * window - now)
    if previous > 0:
        return _ms(start + window - now)
    return 0


def _counter_stored(
    start: int, current: float, previous: float, now: int, window: int
) -> tuple[SlidingCounterState | None, int]:
    """The state to store for these counts and its TTL (None when neither window counts)."""
    ttl = _counter_reset(start, current, previous, now, window)
    if ttl == 0:
        return None, 0
    return (start, current, previous), ttl


def sliding_counter(
    state: SlidingCounterState | None,
    now: int,
    cost: float,
    limit: float,
    window: int,
    delay_ms: int = 0,
) -> Check:
    """Approximate sliding window: previous window's count weighted by its overlap."""
    del delay_ms  # a window has no reservations (a Quota refuses max_delay on one)
    start, current, previous = _counter_windows(state, now, window)
    estimated = _counter_estimate(start, current, previous, now, window)
    reset = _counter_reset(start, current, previous, now, window)
    if cost > limit:
        return _new(Check, (False, True, None, max(0.0, limit - estimated), 0, reset, 0))
    if estimated + cost <= limit + limit * SLACK:
        current = current + cost
        after = _counter_reset(start, current, previous, now, window)
        remaining = limit - (estimated + cost)
        return _new(
            Check,
            (
                True,
                False,
                (start, current, previous),
                remaining if remaining > 0 else 0.0,
                0,
                after,
                after,
            ),
        )
    if current + cost <= limit:
        # Wait until the previous window's weight has shrunk enough.
        at = start + window - (limit - current - cost) * window / previous
    else:
        # Wait for the next window, where this window's count is the weighted one.
        at = start + window + max(0.0, window - (limit - cost) * window / current)
    retry = _ms(at - now)
    retry = retry if retry > 0 else 1
    # Rounding may leave the estimate a hair over the limit at `at`: step to where the
    # admission test itself passes (each millisecond lowers the estimate).
    for _ in range(3):
        later = now + retry
        windows = _counter_windows((start, current, previous), later, window)
        if _counter_estimate(*windows, later, window) + cost <= limit + limit * SLACK:
            break
        retry = retry + 1
    return _new(Check, (False, False, None, max(0.0, limit - estimated), retry, reset, 0))


def sliding_counter_refund(
    state: SlidingCounterState | None,
    now: int,
    amount: float,
    limit: float,
    window: int,
    at: int | None = None,
) -> tuple[SlidingCounterState | None, int]:
    """Take ``amount`` back from the count of the window the debit was in (``at``; None:
    the current one): the current or the previous window, else nothing (gone already)."""
    del limit
    if state is None:
        return None, 0
    start, current, previous = _counter_windows(state, now, window)
    debited = start if at is None else at - at % window
    if debited == start:
        current = max(0.0, current - amount)
    elif debited == start - window:
        previous = max(0.0, previous - amount)
    return _counter_stored(start, current, previous, now, window)


# -- fixed window: blocked calls do not count ------------------------------------------------


def _fixed_count(state: FixedWindowState | None, now: int, window: int) -> FixedWindowState:
    """The window as of ``now`` and its count (a later window's state stays as it is)."""
    start = now - now % window
    if state is not None and state[0] >= start:
        return state
    return start, 0.0


def _fixed_stored(
    start: int, count: float, now: int, window: int
) -> tuple[FixedWindowState | None, int]:
    """The state to store for this count and its TTL (None when the count is 0)."""
    if count == 0:
        return None, 0
    return (start, count), _ms(start + window - now)


def fixed_window(
    state: FixedWindowState | None,
    now: int,
    cost: float,
    limit: float,
    window: int,
    delay_ms: int = 0,
) -> Check:
    """Count per aligned window of ``window`` ms; the count restarts at each window."""
    del delay_ms  # a window has no reservations (a Quota refuses max_delay on one)
    start, count = _fixed_count(state, now, window)
    end = _ms(start + window - now)
    reset = end if count > 0 else 0
    if cost > limit:
        return _new(Check, (False, True, None, limit - count, 0, reset, 0))
    if count + cost <= limit + limit * SLACK:
        count = count + cost
        after = end if count > 0 else 0
        remaining = limit - count
        return _new(
            Check,
            (True, False, (start, count), remaining if remaining > 0 else 0.0, 0, after, after),
        )
    return _new(Check, (False, False, None, limit - count, end, reset, 0))


def fixed_window_refund(
    state: FixedWindowState | None,
    now: int,
    amount: float,
    limit: float,
    window: int,
    at: int | None = None,
) -> tuple[FixedWindowState | None, int]:
    """Take ``amount`` back from the current window's count if the debit (``at``; None:
    now) was counted in it; a debit of an earlier window is gone with its window."""
    del limit
    start, count = _fixed_count(state, now, window)
    if at is None or at - at % window == start:
        count = max(0.0, count - amount)
    return _fixed_stored(start, count, now, window)


# -- charges: debits that need not fit (another region's admissions, issue 13 §6) ------------


def token_bucket_charge(
    state: BucketState | None, now: int, amount: float, capacity: float, rate: float
) -> tuple[BucketState | None, int]:
    """Debit ``amount`` whether it fits or not: the bucket may go below empty (its state is
    a later full-again time), and admits nothing until it has refilled past the debt."""
    del capacity
    return _rebucket(state, now, amount / rate)


def gcra_charge(
    state: BucketState | None, now: int, amount: float, capacity: float, interval: float
) -> tuple[BucketState | None, int]:
    """:func:`token_bucket_charge` for the GCRA meter."""
    del capacity
    return _rebucket(state, now, amount * interval)


def sliding_log_charge(
    state: SlidingLog | None, now: int, amount: float, limit: float, window: int
) -> tuple[SlidingLog | None, int]:
    """Log ``amount`` now whether it fits or not."""
    del limit
    log = SlidingLog() if state is None else state
    log.expire(now, window)
    entries = log.entries
    if amount <= 0:
        return (log, _ms(entries[-1][0] + window - now)) if entries else (None, 0)
    newest = entries[-1][0] if entries else None
    at = now if newest is None or newest < now else newest
    entries.append((at, amount))
    log.total = log.total + amount
    return log, _ms(at + window - now)


def sliding_counter_charge(
    state: SlidingCounterState | None, now: int, amount: float, limit: float, window: int
) -> tuple[SlidingCounterState | None, int]:
    """Count ``amount`` in the current window whether it fits or not."""
    del limit
    start, current, previous = _counter_windows(state, now, window)
    return _counter_stored(start, current + amount, previous, now, window)


def fixed_window_charge(
    state: FixedWindowState | None, now: int, amount: float, limit: float, window: int
) -> tuple[FixedWindowState | None, int]:
    """Count ``amount`` in the current window whether it fits or not."""
    del limit
    start, count = _fixed_count(state, now, window)
    return _fixed_stored(start, count + amount, now, window)


def commit(algorithm: str, pending: object) -> object:
    """The state to store for an allowed check's ``state``."""
    if algorithm == "sliding_log" and pending is not None:
        return sliding_log_commit(pending)  # type: ignore[arg-type]
    return pending


# name -> (check, refund); each takes (state, now, amount, *Quota.params), a refund also
# the debit's time ``at``.
ALGORITHMS: dict[str, tuple[Callable[..., Check], Callable[..., tuple[Any, int]]]] = {
    "token_bucket": (token_bucket, token_bucket_refund),
    "gcra": (gcra, gcra_refund),
    "sliding_log": (sliding_log, sliding_log_refund),
    "sliding_counter": (sliding_counter, sliding_counter_refund),
    "fixed_window": (fixed_window, fixed_window_refund),
}
# name -> charge; each takes (state, now, amount, *Quota.params).
CHARGES: dict[str, Callable[..., tuple[Any, int]]] = {
    "token_bucket": token_bucket_charge,
    "gcra": gcra_charge,
    "sliding_log": sliding_log_charge,
    "sliding_counter": sliding_counter_charge,
    "fixed_window": fixed_window_charge,
}
