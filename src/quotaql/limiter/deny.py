"""The local deny cache: a subject the storage refused a moment ago is refused again from
memory, without parsing its document or asking the storage, until its retry time.

Correct across workers: an entry is only ever written from a refusal the storage (Redis,
or this process's memory) answered, and it lasts no longer than what that refusal said:

- **before parsing**, a subject is refused only while its budget cannot hold even the
  smallest charge (``[limits] min_charge``): the time the storage named for the refused
  cost, scaled down to the minimum charge (exact for the buckets and GCRA, whose budget
  comes back linearly; earlier than the storage would answer for the windows, whose budget
  comes back all at once);
- **once priced**, an operation that costs what was refused is refused until the exact
  retry time of that refusal; one that costs more (but no more than the quota holds), until
  its own retry time, for the buckets and GCRA (whose times scale with the cost);
- a refusal of the **time quota** (the subject's worker time in debt, checked at cost 0)
  refuses every request of the subject, before parsing, until its retry time.

A refund (an operation of the same subject that used less than it paid) can make the
storage answer yes a little sooner than the cache: the cache errs by that much, never by
refusing what no refusal covered. Bounded: at most ``size`` subjects, the oldest dropped.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, NamedTuple

from quotaql.policy.quota import TIME_QUOTA

if TYPE_CHECKING:
    from collections.abc import Callable

    from quotaql.policy.quota import Decision, Quota

__all__ = ["Denial", "DenyCache", "ShardDenials"]

# The quotas whose refusal says something about the subject, whatever it asks next; a
# quota of an operation name or of a root field only refuses that operation or field.
_SUBJECT_QUOTAS = frozenset({"tenant", "user", "global", TIME_QUOTA})
# The sources of decisions a shard's storage made.
_STORED = frozenset({"redis", "memory"})
# The algorithms whose budget comes back at a steady rate: the wait scales with the cost.
_LINEAR = frozenset({"token_bucket", "gcra"})


class Denial(NamedTuple):
    """One refusal kept: until when, for what cost, and the storage's answer."""

    until: float  # monotonic seconds: the exact retry time of ``cost``
    floor_until: float  # until when even the minimum charge is refused (<= until)
    cost: float
    decision: Decision
    quotas: tuple[Quota, ...]
    linear: bool  # the refusing quota's wait scales with the cost
    waits: bool = False  # the refusing quota lets requests wait (max_delay): see remember()
    everything: bool = False  # every request is refused until ``until`` (the time quota)


class DenyCache:
    """Refusals by subject, kept until their retry time (see the module).

    Example:
        >>> from quotaql.policy.quota import Decision
        >>> now = [100.0]
        >>> cache = DenyCache(clock=lambda: now[0])
        >>> refused = Decision(False, 50.0, 0.0, 1000.0, 1.0, 20.0, "tenant", "redis",
        ...                    "rate_limited")
        >>> cache.remember("key:acme", refused, (), min_charge=1.0)
        True
        >>> cache.before_parsing("key:acme").decision.retry_after  # 1 point of 50 comes back first
        0.02
        >>> now[0] += 0.5
        >>> cache.before_parsing("key:acme") is None, cache.priced("key:acme", 50.0) is not None
        (True, True)
    """

    def __init__(self, size: int = 10_000, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._denials: dict[str, Denial] = {}

    def __len__(self) -> int:
        return len(self._denials)

    def remember(
        self, key: str, decision: Decision, quotas: tuple[Quota, ...], *, min_charge: float
    ) -> bool:
        """Keep ``decision`` (a refusal of ``key``) if waiting is what it asks; True if kept."""
        retry = decision.retry_after
        if (
            self.size <= 0
            or decision.allowed
            or decision.reason != "rate_limited"
            or decision.limited_by not in _SUBJECT_QUOTAS
            or retry is None
            or not 0 < retry < float("inf")
        ):
            return False
        now = self._clock()
        refusing = [quota for quota in quotas if quota.name == decision.limited_by]
        waits = any(quota.max_delay for quota in refusing)
        # The time quota, checked at cost 0, refuses while the subject's worker time is in
        # debt, whatever the request: every request, until its retry.
        everything = decision.limited_by == TIME_QUOTA
        if everything:
            floor_until, linear = now + retry, False
        elif waits:
            # A quota that lets requests wait: its retry is when this cost could wait (its
            # turn within max_delay, its line not full). A cheaper one may wait now (asked
            # of the storage); a larger one could not wait before then either (its turn is
            # later, the line as full), so it is refused until then too, at least.
            floor_until, linear = now, False
        else:
            short = decision.cost - decision.remaining  # what the refused cost lacked
            floor = min_charge - decision.remaining  # what the smallest charge lacks
            floor_until = now + retry * min(1.0, floor / short) if floor > 0 and short > 0 else now
            linear = any(quota.algorithm in _LINEAR for quota in refusing)
        denial = Denial(
            now + retry, floor_until, decision.cost, decision, quotas, linear, waits, everything
        )
        with self._lock:
            denials = self._denials
            denials.pop(key, None)
            denials[key] = denial
            while len(denials) > self.size:
                del denials[next(iter(denials))]
        return True

    def before_parsing(self, key: str) -> Denial | None:
        """The refusal that still holds for any request of ``key`` (even the cheapest)."""
        denial = self._denials.get(key)
        if denial is None:
            return None
        now = self._clock()
        if now >= denial.floor_until:
            if now >= denial.until:
                self.forget(key)
            return None
        return _left(denial, denial.floor_until - now)

    def priced(self, key: str, cost: float) -> Denial | None:
        """The refusal that still holds for an operation of ``key`` that costs ``cost``."""
        denial = self._denials.get(key)
        if denial is None or (cost < denial.cost and not denial.everything):
            return None
        now = self._clock()
        if now >= denial.until:
            self.forget(key)
            return None
        decision = denial.decision
        if denial.everything or cost == denial.cost or (denial.waits and cost <= decision.limit):
            return _left(denial, denial.until - now)
        short = decision.cost - decision.remaining
        if not denial.linear or cost > decision.limit or short <= 0:
            return None  # the storage says (a larger cost's time, or never)
        # The same refusal, for a larger cost: its wait grows with what it lacks.
        wait = (denial.until - now) + (cost - decision.cost) * (decision.retry_after or 0) / short
        return _left(denial, wait)

    def forget(self, key: str) -> None:
        """Drop ``key``'s refusal (it was allowed since, or it expired)."""
        with self._lock:
            self._denials.pop(key, None)

    def clear(self) -> None:
        """Drop every refusal (the configuration changed)."""
        with self._lock:
            self._denials.clear()


def _left(denial: Denial, seconds: float) -> Denial:
    """``denial`` with its decision's retry time counted from now."""
    decision = denial.decision._replace(retry_after=round(seconds, 6))
    return denial._replace(decision=decision)


class ShardDenials:
    """The shards of sharded shared quotas (``[global] shards``) that refused a moment ago,
    kept until their retry time, so that the decisions that would go to one skip it: to the
    subject's second shard at once, or, both remembered empty, refused without a call.

    Correct as the subjects' cache is: an entry is written only from a refusal a shard
    answered (``rate_limited``) and lasts no longer than its retry time, for a cost at least
    the one refused (a cheaper request is asked of the shard). A shard's refusal holds for
    every subject whose request it would debit, whoever asked: a shard is one bucket.
    Bounded: at most ``size`` entries (one per shard and set of shared quotas: a few), the
    oldest dropped. Also where the limiter counts its shard calls (``tell``: called, spared,
    retried, and the shard; the recorder's ``shard_calls``).
    """

    def __init__(
        self,
        tell: Callable[[str, int | None, int], None] | None = None,
        *,
        size: int = 256,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.tell = tell
        self._clock = clock
        self._lock = threading.Lock()
        self._denials: dict[tuple[str, tuple[Quota, ...]], tuple[float, float, Decision]] = {}

    def __len__(self) -> int:
        return len(self._denials)

    def held(self, shard: str, quotas: tuple[Quota, ...], cost: float) -> Decision | None:
        """The refusal of ``shard`` (its key) that still holds for ``cost`` of ``quotas``,
        its retry time counted from now; None: ask the shard."""
        denial = self._denials.get((shard, quotas))
        if denial is None:
            return None
        until, refused, decision = denial
        if cost < refused:
            return None
        now = self._clock()
        if now >= until:
            with self._lock:
                self._denials.pop((shard, quotas), None)
            return None
        return decision._replace(retry_after=round(until - now, 6))

    def answered(self, shard: str, quotas: tuple[Quota, ...], decision: Decision) -> None:
        """Keep ``decision`` of ``shard`` if it is a refusal to wait out; forget the shard's
        refusal if it allowed. A decision the storage did not make (the fail mode's, the
        local fallback's during an outage) says nothing of the shard: ignored."""
        if decision.source not in _STORED:
            return
        if decision.allowed:
            if self._denials:
                with self._lock:
                    self._denials.pop((shard, quotas), None)
            return
        retry = decision.retry_after
        if decision.reason != "rate_limited" or retry is None or not 0 < retry < float("inf"):
            return
        with self._lock:
            denials = self._denials
            denials.pop((shard, quotas), None)
            denials[(shard, quotas)] = (self._clock() + retry, decision.cost, decision)
            while len(denials) > self.size:
                del denials[next(iter(denials))]

    def count(self, outcome: str, shard: int | None, calls: int = 1) -> None:
        """Tell the recorder of ``calls`` calls to ``shard`` ``called``, ``spared`` or
        ``retried``."""
        if self.tell is not None and calls:
            self.tell(outcome, shard, calls)

    def clear(self) -> None:
        """Drop every refusal."""
        with self._lock:
            self._denials.clear()
