"""Refunds off the response path: queued, coalesced, applied in the background, never lost
silently and never able to give back more than was debited.

An operation that cost less than its estimate gets the difference back after it ran. With
Redis that is a round trip the response used to wait for. The limiters now queue the refund
and answer at once; the queue is applied by a background thread (:class:`Limiter`) or task
(:class:`AsyncLimiter`, whose calls the storage pipelines with the decisions in flight).

- **Coalesced.** Refunds of one tenant's quota set waiting together are one storage call:
  their amounts add up, and the debit time (``Decision.at``) is the earliest of theirs. A
  window gives back only to the window of that time, so a coalesced refund gives back at
  most what its parts would have (less when their debits were in different windows), never
  more. Amounts are what the gate computed from the operations' own charges: a client
  cannot raise them.
- **Retried, then counted.** A refund that could not be sent (the breaker open during an
  outage, a full pipeline) stays queued and is tried again; after ``max_age`` seconds, or
  when the queue already holds ``max_entries`` refunds, it is dropped and counted ``lost``
  with its cost points (the tenant then paid more than it used, never less). A refund whose
  call was sent and then failed (a timeout, a broken connection) may have been applied (a
  paused Redis runs it when it resumes): it is counted ``unknown``, never sent again, so
  no refund is ever applied twice.
- **Bounded.** At most ``max_entries`` waiting refunds, whatever the number of tenants.
- **Fork-safe.** A process forked with refunds waiting applies none of them (its parent
  does), so no refund is applied twice.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import weakref
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from quotaql.policy.quota import Quota

__all__ = ["DEFAULT_MAX_AGE", "DEFAULT_MAX_ENTRIES", "PendingRefund", "RefundQueue"]

DEFAULT_MAX_AGE = 10.0  # seconds a refund may wait for the storage before it is lost
DEFAULT_MAX_ENTRIES = 10_000  # refunds waiting at once


class PendingRefund(NamedTuple):
    """One waiting refund: what to give back to each of a tenant's quotas."""

    key: str
    quotas: tuple[Quota, ...]
    amounts: tuple[float, ...]  # one per quota
    at: int | None  # the earliest debit time of what it coalesces (None: unknown, now)
    now: int | None  # the time it is applied at (tests), None: the storage's clock
    since: float  # when the oldest of what it coalesces was queued (monotonic seconds)
    merged: int  # refunds coalesced into it
    turn: int | None = None  # the turn its debit reserved (ms): the waiter leaves the line

    @property
    def amount(self) -> float:
        """The cost points it gives back: every quota's amount when they are the same, else
        the largest (the operation's own quotas; a root field's may get less)."""
        return max(self.amounts, default=0.0)

    @property
    def per_quota(self) -> tuple[float, ...] | None:
        """Each quota's amount, or None when all get the same."""
        first = self.amounts[0] if self.amounts else 0.0
        return None if all(each == first for each in self.amounts) else self.amounts


_Key = tuple[str, tuple["Quota", ...], "int | None", "int | None"]
_queues: weakref.WeakSet[RefundQueue] = weakref.WeakSet()


class RefundQueue:
    """Refunds waiting to be applied, one entry per (tenant, quotas, ``now``, turn): the
    refunds of debits that reserved a turn coalesce only with those of the same turn (each
    takes its waiter out of the line; two that merged would take one).

    Thread-safe. ``on_dropped(outcome, count, cost)`` is told of refunds dropped: ``lost``
    (too old, or the queue full) or ``unknown`` (sent, then the call failed).
    """

    def __init__(
        self,
        *,
        max_age: float = DEFAULT_MAX_AGE,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
        on_dropped: Callable[[str, int, float], None] | None = None,
    ) -> None:
        if isinstance(max_age, bool) or not isinstance(max_age, int | float) or max_age <= 0:
            raise ValueError(f"refund_max_age must be a number of seconds > 0, got {max_age!r}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"refund_queue_size must be an integer >= 1, got {max_entries!r}")
        self.max_age = float(max_age)
        self.max_entries = max_entries
        self._clock = clock
        self._on_dropped = on_dropped
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._entries: dict[_Key, PendingRefund] = {}
        self.busy = 0  # refunds taken and not yet done with (being applied)
        self.queued = 0  # refunds queued
        self.coalesced = 0  # of them, added to one already waiting
        self.lost = 0  # refunds dropped
        self.lost_cost = 0.0  # their cost points
        self.unknown = 0  # refunds sent whose call failed (perhaps applied, never resent)
        self.unknown_cost = 0.0
        _queues.add(self)

    def __len__(self) -> int:
        """The refunds waiting (coalesced ones count once)."""
        return len(self._entries)

    def add(
        self,
        key: str,
        quotas: Sequence[Quota],
        amounts: Sequence[float],
        at: int | None,
        now: int | None = None,
        turn: int | None = None,
    ) -> None:
        """Queue a refund of ``amounts`` (one per quota) for a debit made at ``at`` that
        reserved ``turn`` (None: none)."""
        quotas = tuple(quotas)
        slot: _Key = (key, quotas, now, turn)
        with self._lock:
            self.queued += 1
            waiting = self._entries.get(slot)
            if waiting is not None:
                self.coalesced += 1
                self._entries[slot] = _merged(waiting, tuple(amounts), at, waiting.since, 1)
                return
            if len(self._entries) >= self.max_entries:
                lost = max(amounts, default=0.0)
            else:
                self._entries[slot] = PendingRefund(
                    key, quotas, tuple(amounts), at, now, self._clock(), 1, turn
                )
                return
        self._lose(1, lost)

    def take(self) -> list[PendingRefund]:
        """Everything waiting, to be applied now (the queue is empty after); call
        :meth:`done` when they were applied or put back."""
        with self._lock:
            taken = list(self._entries.values())
            self._entries.clear()
            self.busy += len(taken)
        return taken

    @contextlib.contextmanager
    def taking(self) -> Iterator[list[PendingRefund]]:
        """Everything waiting, taken to be applied inside the ``with``: counted lost if the
        applying is interrupted (cancelled: some may have been sent), and :meth:`done` in
        any case."""
        waiting = self.take()
        try:
            yield waiting
        except BaseException:
            self.drop(waiting)
            raise
        finally:
            self.done(len(waiting))

    def done(self, taken: int) -> None:
        """``taken`` refunds of :meth:`take` were applied or put back."""
        with self._settled:
            self.busy -= taken
            self._settled.notify_all()

    def wait_done(self, timeout: float) -> bool:
        """Wait until no refund is being applied (False after ``timeout`` seconds)."""
        with self._settled:
            return self._settled.wait_for(lambda: self.busy <= 0, timeout)

    @property
    def pending(self) -> bool:
        """Refunds are waiting or being applied."""
        return bool(self._entries) or self.busy > 0

    def put_back(self, refunds: Sequence[PendingRefund]) -> None:
        """Queue again refunds the storage could not apply, unless too old (then lost)."""
        if not refunds:
            return
        oldest = self._clock() - self.max_age
        lost_count, lost_cost = 0, 0.0
        with self._lock:
            for refund in refunds:
                slot: _Key = (refund.key, refund.quotas, refund.now, refund.turn)
                waiting = self._entries.get(slot)
                if refund.since < oldest or (
                    waiting is None and len(self._entries) >= self.max_entries
                ):
                    lost_count += refund.merged
                    lost_cost += refund.amount
                elif waiting is None:
                    self._entries[slot] = refund
                else:
                    since = min(waiting.since, refund.since)
                    self._entries[slot] = _merged(
                        waiting, refund.amounts, refund.at, since, refund.merged
                    )
        if lost_count:
            self._lose(lost_count, lost_cost)

    def drop(self, refunds: Sequence[PendingRefund]) -> None:
        """Count as lost refunds that may or may not have been applied (a call that failed
        after it was sent): dropped rather than risk giving them back twice."""
        if not refunds:
            return
        count, cost = sum(r.merged for r in refunds), sum(r.amount for r in refunds)
        with self._lock:
            self.unknown += count
            self.unknown_cost += cost
        if self._on_dropped is not None:
            self._on_dropped("unknown", count, cost)

    def clear(self) -> None:
        """Forget everything waiting, without counting it lost (a forked child's copy)."""
        with self._lock:
            self._entries.clear()
            self.busy = 0

    def _lose(self, count: int, cost: float) -> None:
        with self._lock:
            self.lost += count
            self.lost_cost += cost
        if self._on_dropped is not None:
            self._on_dropped("lost", count, cost)


def _merged(
    waiting: PendingRefund, amounts: tuple[float, ...], at: int | None, since: float, count: int
) -> PendingRefund:
    """``waiting`` with ``amounts`` added, dated by the earlier debit time."""
    total = tuple(a + b for a, b in zip(waiting.amounts, amounts, strict=True))
    earliest = waiting.at if at is None else at if waiting.at is None else min(waiting.at, at)
    return waiting._replace(amounts=total, at=earliest, since=since, merged=waiting.merged + count)


def _forget_in_child() -> None:
    for queue in list(_queues):
        queue._lock = threading.Lock()  # a lock another thread held at fork stays held
        queue._settled = threading.Condition(queue._lock)
        queue.clear()


os.register_at_fork(after_in_child=_forget_in_child)
