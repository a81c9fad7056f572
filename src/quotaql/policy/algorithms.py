"""The limiter math, written once: one pure function per algorithm, weighted by cost.

Time is integer milliseconds passed in by the caller (no clock reads here); amounts are
floats. ``src/quotaql/storage/lua/*.lua`` mirrors these functions operation for operation,
so Redis and the memory storage reach identical decisions (a property test checks it):
keep the two in step, including the order of floating-point operations.

Each ``check`` returns a :class:`Check`: whether ``cost`` fits, and the state to store if
the caller commits it. Nothing is written for a blocked call, and a state equal to the
empty one may be dropped (``ttl_ms`` says when the stored state stops mattering).
"""

from __future__ import annotations

import math
from collections import deque
from math import ceil
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "ALGORITHMS",
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

# States are plain tuples, the cheapest thing to keep in memory per key.
TokenBucketState = tuple[float, int]  # tokens, last refill time
GcraState = float  # theoretical arrival time
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
        state: the state to store when the caller commits the request (allowed only);
            a sliding log's is a pending entry that :func:`commit` appends.
        remaining: what is left after this request (if allowed) or now (if not).
        retry_after_ms: when the same request would fit (0 when allowed).
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


def _ms(value: float) -> int:
    """Round a duration up to whole milliseconds (never negative)."""
    return max(0, math.ceil(value))


# -- token bucket: capacity, refill per millisecond ------------------------------------------


def token_bucket(
    state: TokenBucketState | None, now: int, cost: float, capacity: float, rate: float
) -> Check:
    """Classic token bucket: ``capacity`` tokens, ``rate`` tokens per ms, ``cost`` per call."""
    if state is None:
        tokens, last = capacity, now
    else:
        tokens, last = state
        if now > last:
            tokens = min(capacity, tokens + (now - last) * rate)
            last = now
    if cost > capacity:
        return _new(Check, (False, True, None, tokens, 0, _ms((capacity - tokens) / rate), 0))
    if cost <= tokens:
        tokens = tokens - cost
        reset = ceil((capacity - tokens) / rate)  # >= 0: tokens <= capacity
        return _new(Check, (True, False, (tokens, last), tokens, 0, reset, reset))
    retry = _ms((cost - tokens) / rate)
    return _new(Check, (False, False, None, tokens, retry, _ms((capacity - tokens) / rate), 0))


def token_bucket_refund(
    state: TokenBucketState | None, now: int, amount: float, capacity: float, rate: float
) -> tuple[TokenBucketState | None, int]:
    """Give ``amount`` tokens back (never above capacity). Returns the state and its TTL."""
    if state is None:
        return None, 0
    tokens, last = state
    if now > last:
        tokens = min(capacity, tokens + (now - last) * rate)
        last = now
    tokens = min(capacity, tokens + amount)
    return (tokens, last), _ms((capacity - tokens) / rate)


# -- GCRA (leaky bucket as a meter): one timestamp per key -----------------------------------


def gcra(
    state: GcraState | None, now: int, cost: float, interval: float, tolerance: float
) -> Check:
    """Generic cell rate algorithm: ``interval`` ms per unit of cost, bursts up to ``tolerance``.

    ``tolerance`` is capacity × interval: a full bucket admits ``capacity`` at once.
    """
    tat = now if state is None or state < now else state
    if cost * interval > tolerance:
        return _new(
            Check, (False, True, None, (tolerance - (tat - now)) / interval, 0, _ms(tat - now), 0)
        )
    new_tat = tat + cost * interval
    if new_tat - now <= tolerance:
        reset = _ms(new_tat - now)
        return _new(
            Check, (True, False, new_tat, (tolerance - (new_tat - now)) / interval, 0, reset, reset)
        )
    return _new(
        Check,
        (
            False,
            False,
            None,
            (tolerance - (tat - now)) / interval,
            _ms(new_tat - tolerance - now),
            _ms(tat - now),
            0,
        ),
    )


def gcra_refund(
    state: GcraState | None, now: int, amount: float, interval: float, tolerance: float
) -> tuple[GcraState | None, int]:
    """Move the arrival time back by ``amount`` units (never before now)."""
    del tolerance  # the signature matches gcra's, so callers pass the same parameters
    if state is None or state <= now:
        return None, 0
    tat = state - amount * interval
    if tat <= now:
        return None, 0
    return tat, _ms(tat - now)


# -- sliding log: exact, every admitted call is remembered for one window -------------------


def sliding_log(
    state: SlidingLog | None, now: int, cost: float, limit: float, window: int
) -> Check:
    """Admit when the calls of the last ``window`` ms plus ``cost`` stay within ``limit``.

    Expired entries are dropped from ``state`` in place; the new entry is only appended
    by :func:`commit`, so a call refused by another quota leaves no trace.
    """
    log = SlidingLog() if state is None else state
    log.expire(now, window)
    entries, total = log.entries, log.total
    reset = _ms(entries[-1][0] + window - now) if entries else 0
    if cost > limit:
        return _new(Check, (False, True, None, limit - total, 0, reset, 0))
    if total + cost <= limit:
        return _new(
            Check, (True, False, (log, now, cost), limit - (total + cost), 0, window, window)
        )
    need = total + cost - limit
    freed = 0.0
    retry = 0
    for at, entry_cost in entries:
        freed = freed + entry_cost
        if freed >= need:
            retry = _ms(at + window - now)
            break
    return _new(Check, (False, False, None, limit - total, retry, reset, 0))


def sliding_log_commit(pending: tuple[SlidingLog, int, float]) -> SlidingLog:
    """Append the entry an allowed :func:`sliding_log` check left pending."""
    log, now, cost = pending
    log.entries.append((now, cost))
    log.total = log.total + cost
    return log


def sliding_log_refund(
    state: SlidingLog | None, now: int, amount: float, limit: float, window: int
) -> tuple[SlidingLog | None, int]:
    """Take ``amount`` back from the most recent entries."""
    del limit
    if state is None:
        return None, 0
    state.expire(now, window)
    entries = state.entries
    while entries and amount > 0:
        at, entry_cost = entries.pop()
        if entry_cost > amount:
            entries.append((at, entry_cost - amount))
            state.total = state.total - amount
            amount = 0
        else:
            state.total = state.total - entry_cost
            amount = amount - entry_cost
    if not entries:
        return None, 0
    return state, _ms(entries[-1][0] + window - now)


# -- sliding window counter: weighted previous + current fixed window ------------------------


def _counter_windows(
    state: SlidingCounterState | None, now: int, window: int
) -> SlidingCounterState:
    start = now - now % window
    if state is None:
        return start, 0.0, 0.0
    old_start, current, previous = state
    if old_start == start:
        return state
    previous = current if start - old_start == window else 0.0
    return start, 0.0, previous


def sliding_counter(
    state: SlidingCounterState | None, now: int, cost: float, limit: float, window: int
) -> Check:
    """Approximate sliding window: previous window's count weighted by its overlap."""
    start, current, previous = _counter_windows(state, now, window)
    elapsed = now - start
    estimated = previous * ((window - elapsed) / window) + current
    if current > 0:
        reset = _ms(start + 2 * window - now)
    elif previous > 0:
        reset = _ms(start + window - now)
    else:
        reset = 0
    if cost > limit:
        return _new(Check, (False, True, None, max(0.0, limit - estimated), 0, reset, 0))
    if estimated + cost <= limit:
        current = current + cost
        return _new(
            Check,
            (
                True,
                False,
                (start, current, previous),
                limit - (estimated + cost),
                0,
                _ms(start + 2 * window - now),
                _ms(start + 2 * window - now),
            ),
        )
    if current + cost <= limit:
        # Wait until the previous window's weight has shrunk enough.
        at = start + window - (limit - current - cost) * window / previous
    else:
        # Wait for the next window, where this window's count is the weighted one.
        at = start + window + max(0.0, window - (limit - cost) * window / current)
    return _new(Check, (False, False, None, max(0.0, limit - estimated), _ms(at - now), reset, 0))


def sliding_counter_refund(
    state: SlidingCounterState | None, now: int, amount: float, limit: float, window: int
) -> tuple[SlidingCounterState | None, int]:
    """Take ``amount`` back from the current window's count."""
    del limit
    if state is None:
        return None, 0
    start, current, previous = _counter_windows(state, now, window)
    current = max(0.0, current - amount)
    if current == 0 and previous == 0:
        return None, 0
    return (start, current, previous), _ms(start + 2 * window - now)


# -- fixed window: blocked calls do not count ------------------------------------------------


def fixed_window(
    state: FixedWindowState | None, now: int, cost: float, limit: float, window: int
) -> Check:
    """Count per aligned window of ``window`` ms; the count restarts at each window."""
    start = now - now % window
    count = state[1] if state is not None and state[0] == start else 0.0
    reset = _ms(start + window - now)
    if cost > limit:
        return _new(Check, (False, True, None, limit - count, 0, reset if count else 0, 0))
    if count + cost <= limit:
        count = count + cost
        return _new(Check, (True, False, (start, count), limit - count, 0, reset, reset))
    return _new(Check, (False, False, None, limit - count, reset, reset, 0))


def fixed_window_refund(
    state: FixedWindowState | None, now: int, amount: float, limit: float, window: int
) -> tuple[FixedWindowState | None, int]:
    """Take ``amount`` back from the current window's count."""
    del limit
    start = now - now % window
    if state is None or state[0] != start:
        return None, 0
    count = max(0.0, state[1] - amount)
    if count == 0:
        return None, 0
    return (start, count), _ms(start + window - now)


def commit(algorithm: str, pending: object) -> object:
    """The state to store for an allowed check's ``state``."""
    if algorithm == "sliding_log":
        return sliding_log_commit(pending)  # type: ignore[arg-type]
    return pending


# name -> (check, refund); each takes (state, now, amount, *Quota.params).
ALGORITHMS: dict[str, tuple[Callable[..., Check], Callable[..., tuple[Any, int]]]] = {
    "token_bucket": (token_bucket, token_bucket_refund),
    "gcra": (gcra, gcra_refund),
    "sliding_log": (sliding_log, sliding_log_refund),
    "sliding_counter": (sliding_counter, sliding_counter_refund),
    "fixed_window": (fixed_window, fixed_window_refund),
}
